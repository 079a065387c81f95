/*
 * orders.c - GET /api/orders/{id} (the owner or an admin) and
 * GET /api/orders (the caller's, newest first).
 */
#include "handlers/internal.h"

#include <errno.h>
#include <stdlib.h>

static const char *status_name(enum order_status s)
{
    switch (s) {
    case ORDER_UNPAID:
        return "unpaid";
    case ORDER_PAID:
        return "paid";
    case ORDER_USED:
        return "used";
    case ORDER_CANCELLED:
        return "cancelled";
    case ORDER_REFUNDING:
        return "refunding";
    case ORDER_REFUNDED:
        return "refunded";
    }
    return "unknown";
}

static json_t *order_json(const struct store_order *o)
{
    return json_pack("{s:o,s:o,s:o,s:s,s:o}", "id", json_id(o->id), "userId",
                     json_id(o->user_id), "voucherId", json_id(o->voucher_id),
                     "status", status_name(o->status), "createTime",
                     json_time(o->created));
}

unsigned order_get(struct request *req)
{
    struct store_order o;
    unsigned status;
    int err;

    if ((status = req_user_or_reply(req)))
        return status;
    err = store_order_get(req->st, req->id, &o);
    /* Someone else's order reads as absent: ids must not be probeable. */
    if (err == -ENOENT || (!err && o.user_id != req->auth.user_id &&
                           req->auth.role != TOKEN_ROLE_ADMIN))
        return req_error(req, ERR_NOT_FOUND, "no order with this id");
    if (err)
        return req_backend_error(req, err, "order_get");
    return req_reply(req, 200, order_json(&o));
}

unsigned orders_get(struct request *req)
{
    struct store_order *items;
    int64_t limit;
    unsigned status;
    size_t n;
    int err;

    if ((status = req_user_or_reply(req)))
        return status;
    if (!query_int_or_reply(req, "limit", 20, 1, 100, &limit))
        return req->status;
    err = store_order_list(req->st, req->auth.user_id, (unsigned)limit, &items,
                           &n);
    if (err)
        return req_backend_error(req, err, "order_list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, order_json(&items[i]));
    free(items);
    return req_reply(req, 200, json_pack("{s:o}", "items", arr));
}
