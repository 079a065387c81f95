/*
 * controls.c - the operator's controls of a sale (admin): PATCH and
 * DELETE /api/vouchers/{id}, POST /api/vouchers/{id}/pause, /resume,
 * /stop and /restock. Each calls one sale function (sale.h, "the
 * operator's controls"), which decides on the voucher's locked rows
 * whether the sale began; each answers with the voucher as it is now
 * (204 for a delete).
 */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "handlers/endpoints.h"

/* A restock adds at most this many units at once. */
#define RESTOCK_MAX 1000000LL

/* A control's refusal, or the voucher as the control left it. */
static unsigned control_reply(struct request *req, int err,
                              enum store_control out, const char *why,
                              const char *what)
{
    struct store_voucher *v;

    if (err)
        return req_backend_error(req, err, what);
    switch (out) {
    case STORE_CONTROL_DONE:
        break;
    case STORE_CONTROL_NOT_FOUND:
        return req_error(req, ERR_NOT_FOUND, "no voucher with this id");
    case STORE_CONTROL_NOT_SECKILL:
        return req_error(req, ERR_BAD_REQUEST,
                         "a normal voucher has no sale to control");
    case STORE_CONTROL_STARTED:
        return req_error(req, ERR_SALE_STARTED, why);
    case STORE_CONTROL_ENDED:
        return req_error(req, ERR_ENDED, why);
    case STORE_CONTROL_INVALID:
        return req_error(req, ERR_BAD_REQUEST, why);
    }
    if (req->method == HTTP_DELETE)
        return req_reply_raw(req, 204, NULL, NULL, 0);
    v = xmalloc(sizeof(*v));
    err = sale_voucher_get_fresh(req->sale, req->id, v);
    if (err == -ENOENT)
        req_error(req, ERR_NOT_FOUND, "no voucher with this id");
    else if (err)
        req_backend_error(req, err, what);
    else
        req_reply(req, 200, voucher_json(req, v));
    free(v);
    return req->status;
}

/* pause, resume: the same but for which. */
static unsigned pause_set(struct request *req, bool pause)
{
    enum store_control out = STORE_CONTROL_DONE;
    struct sale_actor who;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    req_actor(req, &who);
    err = sale_voucher_pause(req->sale, req->id, pause, &who, &out);
    return control_reply(req, err, out, NULL, pause ? "pause" : "resume");
}

unsigned voucher_pause_post(struct request *req)
{
    return pause_set(req, true);
}

unsigned voucher_resume_post(struct request *req)
{
    return pause_set(req, false);
}

unsigned voucher_stop_post(struct request *req)
{
    enum store_control out = STORE_CONTROL_DONE;
    struct sale_actor who;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    req_actor(req, &who);
    err = sale_voucher_stop(req->sale, req->id, &who, &out);
    return control_reply(req, err, out, NULL, "stop");
}

unsigned voucher_restock_post(struct request *req)
{
    enum store_control out = STORE_CONTROL_DONE;
    struct sale_actor who;
    const char *why = NULL;
    unsigned status;
    int64_t add = 0;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    if (!body_object_or_reply(req) ||
        !body_int_or_reply(req, "add", true, 1, RESTOCK_MAX, &add))
        return req->status;
    req_actor(req, &who);
    err = sale_voucher_restock(req->sale, req->id, add, &who, &out, &why);
    return control_reply(req, err, out, why, "restock");
}

/* The fields an edit may name, and those that never change. */
static const char *const editable[] = {
    "title",       "subTitle",  "rules",   "payValue",
    "actualValue", "beginTime", "endTime", "stock",
};
static const struct {
    const char *name, *why;
} fixed[] = {
    {"type", "type: fixed when the voucher was created"},
    {"shopId", "shopId: fixed when the voucher was created"},
    {"purchaseMode", "purchaseMode: fixed when the voucher was created"},
    {"admission", "admission: fixed when the voucher was created"},
};

/* The body's fields are all known: true, or a 400 naming the first
 * unknown one. *never: the first field that never changes, or NULL. */
static bool fields_known_or_reply(struct request *req, const char **never)
{
    const char *key;
    json_t *val;

    *never = NULL;
    json_object_foreach(req->json, key, val)
    {
        bool known = false;

        for (size_t i = 0; i < sizeof(editable) / sizeof(editable[0]); i++)
            known = known || strcmp(key, editable[i]) == 0;
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
            if (strcmp(key, fixed[i].name) == 0) {
                known = true;
                if (!*never)
                    *never = fixed[i].why;
            }
        if (!known) {
            char msg[160];

            snprintf(msg, sizeof(msg), "%.64s: not a field of a voucher", key);
            req_error(req, ERR_BAD_REQUEST, msg);
            return false;
        }
    }
    return true;
}

unsigned voucher_patch(struct request *req)
{
    struct store_voucher_patch p = {0};
    enum store_control out = STORE_CONTROL_DONE;
    struct sale_actor who;
    const char *never, *why = NULL;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    if (!body_object_or_reply(req) || !fields_known_or_reply(req, &never))
        return req->status;
    if (!body_text_or_reply(req, "title", false, 255, false, &p.title) ||
        !body_text_or_reply(req, "subTitle", false, 255, false, &p.sub_title) ||
        !body_text_or_reply(req, "rules", false, 1024, true, &p.rules) ||
        !body_int_or_reply(req, "payValue", false, 1, MONEY_MAX,
                           &p.pay_value) ||
        !body_int_or_reply(req, "actualValue", false, 1, MONEY_MAX,
                           &p.actual_value) ||
        !body_time_or_reply(req, "beginTime", false, &p.begin_time) ||
        !body_time_or_reply(req, "endTime", false, &p.end_time) ||
        !body_int_or_reply(req, "stock", false, 0, STOCK_MAX, &p.stock))
        return req->status;
    if (p.title && !p.title[0])
        return req_error(req, ERR_BAD_REQUEST, "title: must not be empty");
    /* Now ends a sale; earlier would make one over before its change. */
    if (body_has(req, "endTime") && p.end_time < util_now_ms() / 1000)
        return req_error(req, ERR_BAD_REQUEST,
                         "endTime: must not be in the past (now ends the "
                         "sale)");
    p.set = (p.title ? STORE_PATCH_TITLE : 0) |
            (p.sub_title ? STORE_PATCH_SUB_TITLE : 0) |
            (p.rules ? STORE_PATCH_RULES : 0) |
            (body_has(req, "payValue") ? STORE_PATCH_PAY_VALUE : 0) |
            (body_has(req, "actualValue") ? STORE_PATCH_ACTUAL_VALUE : 0) |
            (body_has(req, "beginTime") ? STORE_PATCH_BEGIN : 0) |
            (body_has(req, "endTime") ? STORE_PATCH_END : 0) |
            (body_has(req, "stock") ? STORE_PATCH_STOCK : 0);
    p.fixed = never;
    if (!p.set && !never)
        return req_error(req, ERR_BAD_REQUEST,
                         "nothing to change: name at least one field");
    req_actor(req, &who);
    err = sale_voucher_patch(req->sale, req->id, &p, &who, &out, &why);
    return control_reply(req, err, out, why, "voucher_patch");
}

unsigned voucher_delete(struct request *req)
{
    enum store_control out = STORE_CONTROL_DONE;
    struct sale_actor who;
    const char *why = NULL;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    req_actor(req, &who);
    err = sale_voucher_delete(req->sale, req->id, &who, &out, &why);
    return control_reply(req, err, out, why, "voucher_delete");
}
