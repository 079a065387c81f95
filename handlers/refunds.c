/*
 * refunds.c - payments to give back (admin): GET /api/refunds lists them
 * (pending first by default), POST /api/refunds/{id}/done records that
 * the money went back. A refund is made by the payment's own transaction
 * when the order was closed or paid by another transaction (store.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "handlers/endpoints.h"

#define PAGE_MAX 100

static const char *reason_name(enum store_refund_reason r)
{
    switch (r) {
    case STORE_REFUND_LATE:
        return "late";
    case STORE_REFUND_CLOSED:
        return "closed";
    case STORE_REFUND_SECOND:
        return "second_payment";
    }
    return "unknown";
}

json_t *refund_json(const struct store_refund *r)
{
    return json_pack("{s:o,s:o,s:s,s:I,s:s,s:s,s:o,s:o}", "id", json_id(r->id),
                     "orderId", json_id(r->order_id), "txnId", r->txn, "amount",
                     (json_int_t)r->amount, "reason", reason_name(r->reason),
                     "status", r->done ? "done" : "pending", "createTime",
                     json_time(r->created_ms / 1000), "doneTime",
                     r->done_ms ? json_time(r->done_ms / 1000) : json_null());
}

unsigned refunds_get(struct request *req)
{
    static const char *const statuses[] = {"pending", "done", "all"};
    struct store_refund *rows;
    const char *st = req_query(req, "status");
    int64_t limit, before = 0;
    bool given, more;
    int status = 0;
    unsigned code;
    json_t *items;
    size_t n;
    int err;

    if ((code = req_admin_or_reply(req)))
        return code;
    if (!query_int_or_reply(req, "limit", 50, 1, PAGE_MAX, &limit))
        return req->status;
    if (st) {
        status = -2;
        for (int i = 0; i < 3; i++)
            if (strcmp(st, statuses[i]) == 0)
                status = i == 2 ? -1 : i;
        if (status == -2)
            return req_error(req, ERR_BAD_REQUEST,
                             "status: must be pending, done or all");
    }
    if (!query_cursor_or_reply(req, 1, &before, &given))
        return req->status;
    /* One more than the page: whether another page follows. */
    rows = xcalloc((size_t)limit + 1, sizeof(*rows));
    err = sale_refunds_list(req->sale, status, before, rows, (size_t)limit + 1,
                            &n);
    if (err) {
        free(rows);
        return req_backend_error(req, err, "refunds_list");
    }
    more = n > (size_t)limit;
    if (more)
        n = (size_t)limit;
    items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, refund_json(&rows[i]));
    code = req_reply(req, 200,
                     json_pack("{s:o,s:o}", "items", items, "nextCursor",
                               json_cursor(more, 1, &rows[n ? n - 1 : 0].id)));
    free(rows);
    return code;
}

unsigned refund_done_post(struct request *req)
{
    struct store_refund r;
    struct sale_actor who;
    unsigned code;
    int err;

    if ((code = req_admin_or_reply(req)))
        return code;
    req_actor(req, &who);
    err = sale_refund_done(req->sale, req->id, &who, &r);
    if (err == -ENOENT)
        return req_error(req, ERR_NOT_FOUND, "no refund with this id");
    if (err)
        return req_backend_error(req, err, "refund_done");
    log_info("refund done", "refund=%lld order=%lld admin=%lld",
             (long long)r.id, (long long)r.order_id,
             (long long)req->auth.user_id);
    return req_reply(req, 200, refund_json(&r));
}
