/*
 * orders.c - an order's routes: GET /api/orders/{id} (the owner or an
 * admin), GET /api/orders (the caller's, newest first), POST
 * /api/orders/{id}/cancel (the owner or an admin) and, with SECKILL_DEV=1,
 * POST /api/orders/{id}/pay (the owner: a simulated payment provider).
 *
 * The reads run on the task pool (route.h) and wait for the sale layer;
 * a cancel or a payment is handed on to it (sale_cancel(), sale_pay()),
 * and its callback answers. An async sale's order reads "pending" until
 * the writer has it in MySQL; cancelled or paid meanwhile, it answers 429
 * BUSY with Retry-After (a second later it is an ordinary unpaid order).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/endpoints.h"

const char *order_status_name(enum order_status s)
{
    switch (s) {
    case ORDER_UNPAID:
        return "unpaid";
    case ORDER_PAID:
        return "paid";
    case ORDER_CANCELLED:
        return "cancelled";
    case ORDER_EXPIRED:
        return "expired";
    }
    return "unknown";
}

/* An epoch-milliseconds time, or null for 0. */
static json_t *json_time_ms(int64_t ms)
{
    return ms ? json_time(ms / 1000) : json_null();
}

json_t *order_json(const struct store_order *o, bool pending)
{
    return json_pack(
        "{s:o,s:o,s:o,s:s,s:o,s:o,s:o,s:o}", "id", json_id(o->id), "userId",
        json_id(o->user_id), "voucherId", json_id(o->voucher_id), "status",
        pending ? "pending" : order_status_name(o->status), "createTime",
        json_time(o->created), "payDeadline", json_time_ms(o->pay_deadline_ms),
        "payTime", json_time_ms(o->pay_time_ms), "closeTime",
        json_time_ms(o->close_time_ms));
}

/* The order's owner, or 0 for an admin (any order). */
static int64_t owner_of(const struct request *req)
{
    return req->auth.role == TOKEN_ROLE_ADMIN ? 0 : req->auth.user_id;
}

unsigned order_get(struct request *req)
{
    struct store_order o;
    unsigned status;
    bool pending;
    int err;

    if ((status = req_user_or_reply(req)))
        return status;
    err = sale_order_get(req->sale, req->id, owner_of(req), &o, &pending);
    /* Someone else's order reads as absent: ids must not be probeable. */
    if (err == -ENOENT)
        return req_error(req, ERR_NOT_FOUND, "no order with this id");
    if (err)
        return req_backend_error(req, err, "order_get");
    return req_reply(req, 200, order_json(&o, pending));
}

unsigned orders_get(struct request *req)
{
    struct sale_order_row *rows;
    int64_t limit, before = 0;
    unsigned status;
    bool given, more;
    json_t *arr, *next;
    size_t n;
    int err;

    if ((status = req_buyer_or_reply(req)))
        return status;
    if (!query_int_or_reply(req, "limit", 20, 1, 100, &limit) ||
        !query_cursor_or_reply(req, 1, &before, &given))
        return req->status;
    /* The cursor is the last order's id: pending orders and MySQL's are
     * one list by id (sale_orders_list()). */
    err = sale_orders_list(req->sale, req->auth.user_id, before,
                           (unsigned)limit, &rows, &n, &more);
    if (err)
        return req_backend_error(req, err, "order_list");
    arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, order_json(&rows[i].order, rows[i].pending));
    next = json_cursor(more, 1, n ? &rows[n - 1].order.id : &before);
    free(rows);
    return req_reply(req, 200,
                     json_pack("{s:o,s:o}", "items", arr, "nextCursor", next));
}

/* ---- cancel and pay ---- */

static struct request *op_request(struct sale_order_op *op)
{
    return (struct request *)((char *)op - offsetof(struct request, call.op));
}

/* A pending order cannot be cancelled or paid yet: in a moment. */
static void pending_reply(struct request *req)
{
    req_error(req, ERR_BUSY,
              "the order is still being written; retry in a second");
    req->retry_after = 1;
}

/* Park req and hand op to the sale layer (start: sale_cancel or
 * sale_pay); or answer 503 at once if it refuses. */
static unsigned op_start(struct request *req, struct sale_order_op *op,
                         int (*start)(struct sale *, struct sale_order_op *))
{
    req_park(req);
    if (start(req->sale, op) != 0) {
        req_backend_error(req, -ESHUTDOWN, "order");
        req_resume(req);
    }
    return 0;
}

static void cancelled(struct sale_order_op *op)
{
    struct request *req = op_request(op);

    if (op->err)
        req_backend_error(req, op->err, "order_cancel");
    else if (!op->found || op->outcome.close == STORE_CLOSE_NOT_FOUND)
        req_error(req, ERR_NOT_FOUND, "no order with this id");
    else if (op->pending)
        pending_reply(req);
    else if (op->outcome.close == STORE_CLOSE_PAID)
        req_error(req, ERR_ORDER_PAID, "a paid order cannot be cancelled");
    else if (op->outcome.close == STORE_CLOSE_EXPIRED)
        req_error(req, ERR_ORDER_CLOSED, "the order expired");
    else /* done now, or cancelled before: the same answer */
        req_reply(req, 200, order_json(&op->order, false));
    req_resume(req);
}

unsigned order_cancel_post(struct request *req)
{
    struct sale_order_op *op = &req->call.op;
    unsigned status;

    if ((status = req_user_or_reply(req)))
        return status;
    *op = (struct sale_order_op){
        .order_id = req->id,
        .user_id = owner_of(req),
        .done = cancelled,
    };
    return op_start(req, op, sale_cancel);
}

static void paid(struct sale_order_op *op)
{
    struct request *req = op_request(op);
    char msg[120];

    if (op->err)
        req_backend_error(req, op->err, "order_pay");
    else if (!op->found)
        req_error(req, ERR_NOT_FOUND, "no order with this id");
    else if (op->pending)
        pending_reply(req);
    else
        switch (op->outcome.pay) {
        case STORE_PAY_DONE:
        case STORE_PAY_SAME: /* the same notification again: the same answer */
            req_reply(req, 200, order_json(&op->order, false));
            break;
        case STORE_PAY_OTHER:
            req_error(req, ERR_ORDER_PAID,
                      "the order is paid by another transaction; refund "
                      "this one");
            break;
        case STORE_PAY_CLOSED:
        case STORE_PAY_LATE:
            req_error(req, ERR_ORDER_CLOSED,
                      op->outcome.pay == STORE_PAY_LATE
                          ? "the pay deadline has passed; the order expired "
                            "and the payment must be refunded"
                          : "the order is cancelled or expired; the payment "
                            "must be refunded");
            break;
        case STORE_PAY_AMOUNT:
            snprintf(msg, sizeof(msg),
                     "amount: must be the voucher's price, %lld",
                     (long long)op->pay_value);
            req_error(req, ERR_BAD_REQUEST, msg);
            break;
        case STORE_PAY_TXN_USED:
            req_error(req, ERR_BAD_REQUEST,
                      "txnId: this transaction paid another order");
            break;
        case STORE_PAY_NOT_FOUND:
            req_error(req, ERR_NOT_FOUND, "no order with this id");
            break;
        }
    req_resume(req);
}

unsigned order_pay_start(struct request *req, int64_t order_id, int64_t user_id,
                         int64_t amount, const char *txn_id)
{
    struct sale_order_op *op = &req->call.op;

    *op = (struct sale_order_op){
        .order_id = order_id,
        .user_id = user_id,
        .amount = amount,
        .done = paid,
    };
    snprintf(op->txn, sizeof(op->txn), "%s", txn_id);
    return op_start(req, op, sale_pay);
}

unsigned order_pay_post(struct request *req)
{
    char txn[32];
    unsigned status;

    /* A stand-in for the payment provider, for trying the service out:
     * it exists only in dev mode. */
    if (!req->cfg->dev)
        return req_error(req, ERR_NOT_FOUND, "no such endpoint");
    if ((status = req_buyer_or_reply(req)))
        return status;
    /* One transaction per order: paying twice is the same notification
     * twice (200, nothing changed). */
    snprintf(txn, sizeof(txn), "dev-%lld", (long long)req->id);
    return order_pay_start(req, req->id, req->auth.user_id, -1, txn);
}
