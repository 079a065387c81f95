/*
 * vouchers.c - POST /api/vouchers (admin), GET /api/vouchers,
 * GET /api/vouchers/{id} and GET /api/vouchers/{id}/stats (admin: initial
 * stock, stock now, orders by status). The purchase is in seckill.c, the
 * operator's controls (edit, delete, pause, stop, restock) in
 * controls.c.
 */
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "handlers/endpoints.h"

json_t *voucher_json(const struct request *req, const struct store_voucher *v)
{
    json_t *o = json_pack(
        "{s:o,s:I,s:s,s:s,s:s,s:I,s:I,s:s,s:o,s:o}", "id", json_id(v->id),
        "shopId", (json_int_t)v->shop_id, "title", v->title, "subTitle",
        v->sub_title, "rules", v->rules, "payValue", (json_int_t)v->pay_value,
        "actualValue", (json_int_t)v->actual_value, "type",
        v->type == VOUCHER_SECKILL ? "seckill" : "normal", "createTime",
        json_time(v->created), "updateTime", json_time(v->updated));
    if (v->type == VOUCHER_SECKILL) {
        json_object_set_new(o, "stock", json_integer(v->stock));
        json_object_set_new(o, "beginTime", json_time(v->begin_time));
        json_object_set_new(o, "endTime", json_time(v->end_time));
        json_object_set_new(
            o, "purchaseMode",
            json_string(v->mode == PURCHASE_ASYNC ? "async" : "sync"));
        json_object_set_new(
            o, "admission",
            json_string(v->admission == ADMISSION_QUEUE ? "queue" : "open"));
        json_object_set_new(o, "paused", json_boolean(v->halt == HALT_PAUSED));
        if (v->admission == ADMISSION_QUEUE)
            json_object_set_new(
                o, "queueOpensAt",
                json_time(sale_queue_opens_at(req->sale, v->begin_time)));
    }
    return o;
}

/* Copy a validated string into a fixed buffer (lengths checked before). */
static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

unsigned vouchers_post(struct request *req)
{
    struct store_voucher *v;
    struct sale_actor who;
    const char *title = NULL, *sub_title = "", *rules = "", *type = "normal";
    const char *mode = NULL, *admission = NULL;
    bool mode_given = false;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    if (!body_object_or_reply(req))
        return req->status;
    v = xcalloc(1, sizeof(*v));
    if (!body_int_or_reply(req, "shopId", true, 1, INT64_MAX, &v->shop_id) ||
        !body_text_or_reply(req, "title", true, 255, false, &title) ||
        !body_text_or_reply(req, "subTitle", false, 255, false, &sub_title) ||
        !body_text_or_reply(req, "rules", false, 1024, true, &rules) ||
        !body_int_or_reply(req, "payValue", true, 0, MONEY_MAX,
                           &v->pay_value) ||
        !body_int_or_reply(req, "actualValue", true, 0, MONEY_MAX,
                           &v->actual_value) ||
        !body_str_or_reply(req, "type", false, 16, &type))
        goto out;
    /* A price of 0 gives the voucher away, and one above its value sells
     * it at a loss to the buyer: both are a typing mistake. */
    if (v->pay_value == 0 || v->pay_value > v->actual_value) {
        req_error(req, ERR_BAD_REQUEST,
                  "payValue: must be at least 1 and at most actualValue");
        goto out;
    }

    if (strcmp(type, "seckill") == 0) {
        v->type = VOUCHER_SECKILL;
        if (!body_int_or_reply(req, "stock", true, 0, STOCK_MAX, &v->stock) ||
            !body_time_or_reply(req, "beginTime", true, &v->begin_time) ||
            !body_time_or_reply(req, "endTime", true, &v->end_time))
            goto out;
        if (v->end_time <= v->begin_time) {
            req_error(req, ERR_BAD_REQUEST, "endTime: must be after beginTime");
            goto out;
        }
        /* A sale over before it is made sells nothing: a typing mistake. */
        if (v->end_time <= util_now_ms() / 1000) {
            req_error(req, ERR_BAD_REQUEST,
                      "endTime: must be in the future (the sale would be "
                      "over before it begins)");
            goto out;
        }
        if (!body_str_or_reply(req, "purchaseMode", false, 8, &mode))
            goto out;
        mode_given = mode != NULL;
        if (mode && strcmp(mode, "async") == 0)
            v->mode = PURCHASE_ASYNC;
        else if (mode && strcmp(mode, "sync") == 0)
            v->mode = PURCHASE_SYNC;
        else if (mode) {
            req_error(req, ERR_BAD_REQUEST,
                      "purchaseMode: must be \"sync\" or \"async\"");
            goto out;
        }
        if (!body_str_or_reply(req, "admission", false, 8, &admission))
            goto out;
        if (!admission || strcmp(admission, "open") == 0)
            v->admission = ADMISSION_OPEN;
        else if (strcmp(admission, "queue") == 0)
            v->admission = ADMISSION_QUEUE;
        else {
            req_error(req, ERR_BAD_REQUEST,
                      "admission: must be \"open\" or \"queue\"");
            goto out;
        }
    } else if (strcmp(type, "normal") == 0) {
        v->type = VOUCHER_NORMAL;
        if (body_has(req, "stock") || body_has(req, "beginTime") ||
            body_has(req, "endTime") || body_has(req, "purchaseMode") ||
            body_has(req, "admission")) {
            req_error(req, ERR_BAD_REQUEST,
                      "stock, beginTime, endTime, purchaseMode and admission "
                      "are only for seckill vouchers");
            goto out;
        }
    } else {
        req_error(req, ERR_BAD_REQUEST,
                  "type: must be \"normal\" or \"seckill\"");
        goto out;
    }
    copy_str(v->title, sizeof(v->title), title);
    copy_str(v->sub_title, sizeof(v->sub_title), sub_title);
    copy_str(v->rules, sizeof(v->rules), rules);

    req_actor(req, &who);
    err = sale_voucher_create(req->sale, v, mode_given, &who);
    if (err == -EPERM) {
        req_error(req, ERR_BAD_REQUEST,
                  "purchaseMode: async needs a Redis that keeps "
                  "acknowledged writes (appendonly yes, appendfsync "
                  "always) or SECKILL_ASYNC_ACCEPT_LOSS=1");
        goto out;
    }
    if (err == -EOPNOTSUPP) {
        req_error(req, ERR_BAD_REQUEST,
                  "purchaseMode: async is not served by this instance "
                  "(no async writer)");
        goto out;
    }
    if (err) {
        req_backend_error(req, err, "voucher_insert");
        goto out;
    }
    req_reply(req, 201, json_pack("{s:o}", "id", json_id(v->id)));
out:
    free(v);
    return req->status;
}

unsigned voucher_get(struct request *req)
{
    struct store_voucher *v = xmalloc(sizeof(*v));
    int err = sale_voucher_get(req->sale, req->id, v);

    if (err == -ENOENT)
        req_error(req, ERR_NOT_FOUND, "no voucher with this id");
    else if (err)
        req_backend_error(req, err, "voucher_get");
    else
        req_reply(req, 200, voucher_json(req, v));
    free(v);
    return req->status;
}

unsigned vouchers_get(struct request *req)
{
    int64_t shop_id, limit, before = 0;
    struct store_voucher *items;
    bool given, more;
    json_t *arr, *next;
    size_t n;
    int err;

    if (!query_int_or_reply(req, "shopId", 0, 1, INT64_MAX, &shop_id) ||
        !query_int_or_reply(req, "limit", 20, 1, 100, &limit) ||
        !query_cursor_or_reply(req, 1, &before, &given))
        return req->status;
    /* One more than the page: whether another page follows. */
    err = sale_vouchers_list(req->sale, shop_id, before, (unsigned)limit + 1,
                             &items, &n);
    if (err)
        return req_backend_error(req, err, "voucher_list");
    more = n > (size_t)limit;
    if (more)
        n = (size_t)limit;
    arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, voucher_json(req, &items[i]));
    next = json_cursor(more, 1, n ? &items[n - 1].id : &before);
    free(items);
    return req_reply(req, 200,
                     json_pack("{s:o,s:o}", "items", arr, "nextCursor", next));
}

unsigned voucher_stats_get(struct request *req)
{
    struct store_voucher_stats s;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    err = sale_voucher_stats(req->sale, req->id, &s);
    if (err == -ENOENT)
        return req_error(req, ERR_NOT_FOUND, "no seckill voucher with this id");
    if (err)
        return req_backend_error(req, err, "voucher_stats");
    json_t *queue = json_null();
    if (s.admission == ADMISSION_QUEUE) {
        int64_t joined = 0, admitted = 0;

        /* Redis away: the sale's numbers still come, without the room. */
        if (sale_queue_counts(req->sale, req->id, &s, &joined, &admitted) == 0)
            queue = json_pack("{s:I,s:I}", "length", (json_int_t)joined,
                              "admitted", (json_int_t)admitted);
    }
    return req_reply(
        req, 200,
        json_pack("{s:o,s:o,s:I,s:{s:I,s:I,s:I,s:I},s:I,s:I,s:o}", "voucherId",
                  json_id(req->id), "initialStock",
                  s.initial_stock >= 0 ? json_integer(s.initial_stock)
                                       : json_null(),
                  "stock", (json_int_t)s.stock, "orders", "unpaid",
                  (json_int_t)s.unpaid, "paid", (json_int_t)s.paid, "cancelled",
                  (json_int_t)s.cancelled, "expired", (json_int_t)s.expired,
                  "sold", (json_int_t)(s.unpaid + s.paid), "returned",
                  (json_int_t)(s.cancelled + s.expired), "queue", queue));
}
