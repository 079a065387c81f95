/*
 * orders.c - an order's routes: GET /api/orders/{id} (the owner or an
 * admin), GET /api/orders (the caller's, newest first), POST
 * /api/orders/{id}/cancel (the owner or an admin) and, with SECKILL_DEV=1,
 * POST /api/orders/{id}/pay (the owner: a simulated payment provider).
 *
 * A cancel or a payment is one short transaction, but it may wait for the
 * order's or the voucher's row while another transaction holds it, so it
 * runs as an engine task (engine/engine.h) with the request parked, like a
 * purchase. A cancel gives the unit back to the stock; every instance's
 * voucher cache then hears that the voucher may sell again.
 *
 * An async sale's order (async/async.h) is "pending" between its 202 and
 * the moment the writer puts it into MySQL: read, alone or in the
 * caller's list, it shows that status; cancelled or paid, it answers 429
 * BUSY with Retry-After (a second later it is an ordinary unpaid order).
 * The list shows it too after a purchase answered "outcome unknown", so
 * that the buyer can see what became of it.
 */
#include "handlers/internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/util.h"

static const char *status_name(enum order_status s)
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

json_t *order_json(const struct store_order *o)
{
    return json_pack("{s:o,s:o,s:o,s:s,s:o,s:o,s:o,s:o}", "id", json_id(o->id),
                     "userId", json_id(o->user_id), "voucherId",
                     json_id(o->voucher_id), "status", status_name(o->status),
                     "createTime", json_time(o->created), "payDeadline",
                     json_time_ms(o->pay_deadline_ms), "payTime",
                     json_time_ms(o->pay_time_ms), "closeTime",
                     json_time_ms(o->close_time_ms));
}

static void pending_times(struct request *req, int64_t accepted_ms,
                          struct store_order *o);

/*
 * Whether order_id is an async sale's order on its way to MySQL: 0 with
 * *o filled (status unpaid, no times), -ENOENT, or -errno. Looked up after
 * MySQL said no, in every sale with orders on their way (the index of
 * sales with work): the writer drops the pending record only once the
 * order is committed, so "not pending" means "in MySQL now, or never
 * sold".
 */
static int pending_find(struct request *req, struct store *st, int64_t order_id,
                        struct store_order *o)
{
    redisContext *rc = store_redis(st);
    int64_t accepted_ms = 0;
    int err;

    if (!rc)
        return -ENOTCONN;
    memset(o, 0, sizeof(*o));
    o->id = order_id;
    err = async_pending_find(rc, order_id, &o->voucher_id, &o->user_id,
                             &accepted_ms);
    pending_times(req, accepted_ms, o);
    return err;
}

/* An order as the API shows it while it is pending: as it will be once
 * written, status "pending". */
static json_t *pending_json(const struct store_order *o)
{
    json_t *j = order_json(o);

    json_object_set_new(j, "status", json_string("pending"));
    return j;
}

/* What the writer will store for an order sold at accepted_ms: created
 * then, to be paid within the pay timeout. */
static void pending_times(struct request *req, int64_t accepted_ms,
                          struct store_order *o)
{
    o->created = accepted_ms / 1000;
    o->pay_deadline_ms =
        accepted_ms + 1000 * (int64_t)(req->cfg->store.pay_timeout_s
                                           ? req->cfg->store.pay_timeout_s
                                           : STORE_PAY_TIMEOUT_DEFAULT_S);
}

/*
 * Append to arr the caller's async orders that wait for MySQL and are not
 * among mysql[0..n) (written between the two looks), at most max; how
 * many. Redis unreachable: none (MySQL's list still answers).
 */
static size_t pending_list(struct request *req, struct store *st,
                           const struct store_order *mysql, size_t n,
                           size_t max, json_t *arr)
{
    struct async_pending p[16];
    size_t found = 0, shown = 0;
    redisContext *rc = store_redis(st);

    if (!rc || async_pending_of_user(rc, req->auth.user_id, p,
                                     sizeof(p) / sizeof(p[0]), &found) != 0)
        return 0;
    for (size_t i = 0; i < found && shown < max; i++) {
        struct store_order o = {0};
        bool written = false;

        for (size_t j = 0; j < n && !written; j++)
            written = mysql[j].id == p[i].order_id;
        if (written)
            continue;
        o.id = p[i].order_id;
        o.user_id = req->auth.user_id;
        o.voucher_id = p[i].voucher_id;
        pending_times(req, p[i].accepted_ms, &o);
        json_array_append_new(arr, pending_json(&o));
        shown++;
    }
    return shown;
}

/* Read order_id: from MySQL, or pending on its way there (*pending); a
 * pending order reads even while MySQL is away. */
static int order_read(struct request *req, struct store *st, int64_t order_id,
                      struct store_order *o, bool *pending)
{
    int err = store_order_get(st, order_id, o), perr;

    *pending = false;
    if (err == 0)
        return 0;
    perr = pending_find(req, st, order_id, o);
    if (perr == 0) {
        *pending = true;
        return 0;
    }
    if (err != -ENOENT)
        return err; /* MySQL's error, not "absent" */
    if (perr != -ENOENT)
        return perr;
    /* Written between the two looks. */
    return store_order_get(st, order_id, o);
}

unsigned order_get(struct request *req)
{
    struct store_order o;
    unsigned status;
    bool pending;
    int err;

    if ((status = req_user_or_reply(req)))
        return status;
    err = order_read(req, req->st, req->id, &o, &pending);
    /* Someone else's order reads as absent: ids must not be probeable. */
    if (err == -ENOENT || (!err && o.user_id != req->auth.user_id &&
                           req->auth.role != TOKEN_ROLE_ADMIN))
        return req_error(req, ERR_NOT_FOUND, "no order with this id");
    if (err)
        return req_backend_error(req, err, "order_get");
    return req_reply(req, 200, pending ? pending_json(&o) : order_json(&o));
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
    /* The newest first: those still on their way to MySQL (a 202, or a
     * purchase whose outcome was unknown), then MySQL's. */
    size_t shown = pending_list(req, req->st, items, n, (size_t)limit, arr);
    for (size_t i = 0; i < n && shown < (size_t)limit; i++, shown++)
        json_array_append_new(arr, order_json(&items[i]));
    free(items);
    return req_reply(req, 200, json_pack("{s:o}", "items", arr));
}

void order_units_returned(struct vcache *vc, struct store *st,
                          int64_t voucher_id, const int64_t *orders,
                          const int64_t *users, size_t n)
{
    /* Does nothing for a sync voucher. A return that fails here stays
     * owed in MySQL, and the async writer gives it to Redis later. */
    int err = async_units_return(st, voucher_id, orders, users, n, NULL);

    if (err)
        log_warn("async units not returned to redis yet: retried later",
                 "voucher=%lld n=%zu err=%d", (long long)voucher_id, n, err);
    /* The unit is back on sale: drop "sold out" on every instance. */
    vcache_voucher_changed(vc, st, voucher_id);
}

/* ---- cancel and pay, as engine tasks ---- */

#define TXN_MAX 64

/* One cancel or payment: its input, and what the engine thread found. */
struct order_op {
    int64_t order_id;
    int64_t user_id; /* > 0: only this user's order; 0: any (admin) */
    int64_t amount;  /* < 0: the voucher's price */
    char txn[TXN_MAX + 1];
    int err;
    bool found;
    bool pending; /* an async sale's order not in MySQL yet */
    union {
        enum store_close close;
        enum store_pay pay;
    } outcome;
    struct store_order order;
    int64_t pay_value;
};

static struct request *task_request(struct engine_task *t)
{
    return (struct request *)((char *)t - offsetof(struct request, task));
}

/* Read the order and check it is the caller's (an admin's: any). */
static int op_find(struct request *req, struct store *st, struct order_op *op)
{
    int err = order_read(req, st, op->order_id, &op->order, &op->pending);

    if (err == -ENOENT ||
        (!err && op->user_id > 0 && op->order.user_id != op->user_id)) {
        op->found = false;
        return 0;
    }
    op->found = !err;
    return err;
}

/* After the reply: give the request back to its HTTP thread. */
static void op_resume(struct request *req)
{
    free(req->op);
    req->op = NULL;
    req_resume(req);
}

/* Park req and queue t; or answer 503 at once if the engine stopped. */
static unsigned op_park(struct request *req, struct order_op *op,
                        void (*run)(struct engine_task *, struct store *),
                        void (*done)(struct engine_task *))
{
    req->op = op;
    req->task = (struct engine_task){.run = run, .done = done};
    req_park(req);
    if (engine_run(req->engine, &req->task) != 0) {
        req_backend_error(req, -ESHUTDOWN, "order");
        op_resume(req);
    }
    return 0;
}

static void cancel_run(struct engine_task *t, struct store *st)
{
    struct request *req = task_request(t);
    struct order_op *op = req->op;

    op->err = op_find(req, st, op);
    if (op->err || !op->found || op->pending)
        return;
    op->err =
        store_order_cancel(st, op->order_id, &op->outcome.close, &op->order);
    if (op->err || (op->outcome.close != STORE_CLOSE_DONE &&
                    op->outcome.close != STORE_CLOSE_ALREADY))
        return;
    if (op->outcome.close == STORE_CLOSE_DONE)
        metrics_count(METRIC_ORDER_CANCELLED, 1);
    /* Cancelled before too: a cancel whose answer was lost is retried,
     * and its unit may not be back in Redis yet (a second return of the
     * same order changes nothing). */
    order_units_returned(req->vcache, st, op->order.voucher_id, &op->order.id,
                         &op->order.user_id, 1);
}

/* A pending order cannot be cancelled or paid yet: in a moment. */
static void pending_reply(struct request *req)
{
    req_error(req, ERR_BUSY,
              "the order is still being written; retry in a second");
    req->retry_after = 1;
}

static void cancel_done(struct engine_task *t)
{
    struct request *req = task_request(t);
    struct order_op *op = req->op;

    if (t->err)
        req_backend_error(req, t->err, "order_cancel");
    else if (op->err)
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
        req_reply(req, 200, order_json(&op->order));
    op_resume(req);
}

unsigned order_cancel_post(struct request *req)
{
    struct order_op *op;
    unsigned status;

    if ((status = req_user_or_reply(req)))
        return status;
    op = xcalloc(1, sizeof(*op));
    op->order_id = req->id;
    op->user_id = req->auth.role == TOKEN_ROLE_ADMIN ? 0 : req->auth.user_id;
    return op_park(req, op, cancel_run, cancel_done);
}

static void pay_run(struct engine_task *t, struct store *st)
{
    struct request *req = task_request(t);
    struct order_op *op = req->op;

    op->err = op_find(req, st, op);
    if (op->err || !op->found || op->pending)
        return;
    if (op->amount < 0) {
        /* The simulated provider charges the voucher's price. */
        struct store_voucher *v = xcalloc(1, sizeof(*v));

        op->err = store_voucher_get(st, op->order.voucher_id, v);
        op->amount = v->pay_value;
        free(v);
        if (op->err)
            return;
    }
    op->err = store_order_pay(st, op->order_id, op->amount, op->txn,
                              &op->outcome.pay, &op->order, &op->pay_value);
    if (op->err)
        return;
    switch (op->outcome.pay) {
    case STORE_PAY_DONE:
        metrics_count(METRIC_ORDER_PAID, 1);
        break;
    case STORE_PAY_LATE:
        /* Expired by the payment itself: the unit is back on sale. */
        metrics_count(METRIC_ORDER_EXPIRED, 1);
        order_units_returned(req->vcache, st, op->order.voucher_id,
                             &op->order.id, &op->order.user_id, 1);
        /* fall through */
    case STORE_PAY_CLOSED:
        metrics_count(METRIC_PAYMENT_LATE, 1);
        log_warn("payment refused, refund it",
                 "order=%lld txn=\"%s\" amount=%lld why=%s",
                 (long long)op->order_id, op->txn, (long long)op->amount,
                 op->outcome.pay == STORE_PAY_LATE ? "late" : "closed");
        break;
    case STORE_PAY_OTHER:
        log_warn("second payment of a paid order, refund it",
                 "order=%lld txn=\"%s\" amount=%lld", (long long)op->order_id,
                 op->txn, (long long)op->amount);
        break;
    default:
        break;
    }
}

static void pay_done(struct engine_task *t)
{
    struct request *req = task_request(t);
    struct order_op *op = req->op;
    char msg[120];

    if (t->err || op->err) {
        req_backend_error(req, t->err ? t->err : op->err, "order_pay");
        op_resume(req);
        return;
    }
    if (!op->found) {
        req_error(req, ERR_NOT_FOUND, "no order with this id");
        op_resume(req);
        return;
    }
    if (op->pending) {
        pending_reply(req);
        op_resume(req);
        return;
    }
    switch (op->outcome.pay) {
    case STORE_PAY_DONE:
    case STORE_PAY_SAME: /* the same notification again: the same answer */
        req_reply(req, 200, order_json(&op->order));
        break;
    case STORE_PAY_OTHER:
        req_error(req, ERR_ORDER_PAID,
                  "the order is paid by another transaction; refund this one");
        break;
    case STORE_PAY_CLOSED:
    case STORE_PAY_LATE:
        req_error(req, ERR_ORDER_CLOSED,
                  op->outcome.pay == STORE_PAY_LATE
                      ? "the pay deadline has passed; the order expired and "
                        "the payment must be refunded"
                      : "the order is cancelled or expired; the payment must "
                        "be refunded");
        break;
    case STORE_PAY_AMOUNT:
        snprintf(msg, sizeof(msg), "amount: must be the voucher's price, %lld",
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
    op_resume(req);
}

unsigned order_pay_park(struct request *req, int64_t order_id, int64_t user_id,
                        int64_t amount, const char *txn_id)
{
    struct order_op *op = xcalloc(1, sizeof(*op));

    op->order_id = order_id;
    op->user_id = user_id;
    op->amount = amount;
    snprintf(op->txn, sizeof(op->txn), "%s", txn_id);
    return op_park(req, op, pay_run, pay_done);
}

unsigned order_pay_post(struct request *req)
{
    char txn[32];
    unsigned status;

    /* A stand-in for the payment provider, for trying the service out:
     * it exists only in dev mode. */
    if (!req->cfg->dev)
        return req_error(req, ERR_NOT_FOUND, "no such endpoint");
    if ((status = req_user_or_reply(req)))
        return status;
    /* One transaction per order: paying twice is the same notification
     * twice (200, nothing changed). */
    snprintf(txn, sizeof(txn), "dev-%lld", (long long)req->id);
    return order_pay_park(req, req->id, req->auth.user_id, -1, txn);
}
