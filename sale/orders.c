/*
 * orders.c - an order after its purchase (see sale.h): reading it and a
 * buyer's list, cancelling it, paying it, and giving a closed order's
 * unit back to its sale.
 *
 * A cancel or a payment may wait for the order's or the voucher's row
 * while another transaction holds it, so it runs on the purchase engine
 * (engine/engine.h), merged with the others of its kind that wait with
 * it into one transaction (below). A cancel gives the unit back to the
 * stock; every instance's voucher cache then hears that the voucher may
 * sell again.
 *
 * An async sale's order (async/async.h) is pending between its sale and
 * the moment the writer puts it into MySQL: read, alone or in the buyer's
 * list, it shows as it will be written; it cannot be cancelled or paid
 * until then (a second later it is an ordinary unpaid order).
 */
#include "sale/internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "common/metrics.h"
#include "common/util.h"
#include "idgen/idgen.h"

/* What the writer will store for an order sold at accepted_ms: created
 * then, to be paid within the pay timeout. */
static void pending_times(const struct sale *s, int64_t accepted_ms,
                          struct store_order *o)
{
    unsigned pay_s = s->cfg.store->pay_timeout_s;

    o->status = ORDER_UNPAID;
    o->created = accepted_ms / 1000;
    o->pay_deadline_ms =
        accepted_ms +
        1000 * (int64_t)(pay_s ? pay_s : STORE_PAY_TIMEOUT_DEFAULT_S);
}

/*
 * Whether order_id is an async sale's order on its way to MySQL: 0 with
 * *o filled, -ENOENT, or -errno. Looked up after MySQL said no, in every
 * sale with orders on their way (the index of sales with work): the
 * writer drops the pending record only once the order is committed, so
 * "not pending" means "in MySQL now, or never sold".
 */
static int pending_find(const struct sale *s, struct store *st,
                        int64_t order_id, struct store_order *o)
{
    struct redis_link *rl = store_redis_link(st);
    int64_t accepted_ms = 0;
    int err;

    /* A cluster runs no async sale (cmd/config.c): none is pending. */
    if (!rl)
        return store_redis_is_cluster(s->cfg.store) ? -ENOENT : -ENOTCONN;
    memset(o, 0, sizeof(*o));
    o->id = order_id;
    err = async_pending_find(rl, order_id, &o->voucher_id, &o->user_id,
                             &accepted_ms);
    pending_times(s, accepted_ms, o);
    return err;
}

/* Read order_id: from MySQL, or pending on its way there (*pending); a
 * pending order reads even while MySQL is away. */
static int order_read(const struct sale *s, struct store *st, int64_t order_id,
                      struct store_order *o, bool *pending)
{
    int err = store_order_get(st, order_id, o), perr;

    *pending = false;
    if (err == 0)
        return 0;
    perr = pending_find(s, st, order_id, o);
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

/* order_read() for user_id only (0: anyone's): -ENOENT for another's. */
static int order_find(const struct sale *s, struct store *st, int64_t order_id,
                      int64_t user_id, struct store_order *o, bool *pending)
{
    int err = order_read(s, st, order_id, o, pending);

    if (!err && user_id > 0 && o->user_id != user_id)
        return -ENOENT;
    return err;
}

int sale_order_get(struct sale *s, int64_t order_id, int64_t user_id,
                   struct store_order *o, bool *pending)
{
    return order_find(s, sale__store(s), order_id, user_id, o, pending);
}

/*
 * The buyer's async orders that wait for MySQL (at most max of them), into
 * p. Read before MySQL's list: the writer drops a pending record only
 * once its order is committed, so an order is in one look or the other
 * (or both), never slipping between them. Redis unreachable: none
 * (MySQL's list still answers).
 */
static size_t pending_fetch(struct store *st, int64_t user_id,
                            struct async_pending *p, size_t max)
{
    struct redis_link *rl = store_redis_link(st);
    size_t found = 0;

    if (!rl || async_pending_of_user(rl, user_id, p, max, &found) != 0)
        return 0;
    return found;
}

/*
 * Of the pending orders p[0..found), those with id < before and not among
 * mysql[0..m) (written between the two looks), into out (at most max; *n
 * of them).
 */
static void pending_list(const struct sale *s, int64_t user_id, int64_t before,
                         const struct async_pending *p, size_t found,
                         const struct store_order *mysql, size_t m,
                         struct sale_order_row *out, size_t max, size_t *n)
{
    *n = 0;
    for (size_t i = 0; i < found && *n < max; i++) {
        struct sale_order_row *r = &out[*n];
        bool written = false;

        if (before > 0 && p[i].order_id >= before)
            continue;
        for (size_t j = 0; j < m && !written; j++)
            written = mysql[j].id == p[i].order_id;
        if (written)
            continue;
        memset(r, 0, sizeof(*r));
        r->order.id = p[i].order_id;
        r->order.user_id = user_id;
        r->order.voucher_id = p[i].voucher_id;
        pending_times(s, p[i].accepted_ms, &r->order);
        r->pending = true;
        (*n)++;
    }
}

static int row_newer_first(const void *a, const void *b)
{
    const struct sale_order_row *x = a, *y = b;

    return x->order.id > y->order.id ? -1 : x->order.id < y->order.id;
}

int sale_orders_list(struct sale *s, int64_t user_id, int64_t before,
                     unsigned limit, struct sale_order_row **rows, size_t *n,
                     bool *more)
{
    struct store *st = sale__store(s);
    struct store_order *items;
    struct async_pending p[16];
    struct sale_order_row pend[16];
    size_t m, np = 0, all, found;
    int err;

    *rows = NULL;
    *n = 0;
    *more = false;
    found = pending_fetch(st, user_id, p, sizeof(p) / sizeof(p[0]));
    /* One more than the page: whether another page follows. */
    err = store_order_list(st, user_id, before, limit + 1, &items, &m);
    if (err)
        return err;
    pending_list(s, user_id, before, p, found, items, m, pend,
                 sizeof(pend) / sizeof(pend[0]), &np);
    all = m + np;
    *rows = xcalloc(all ? all : 1, sizeof(**rows));
    memcpy(*rows, pend, np * sizeof(pend[0]));
    for (size_t i = 0; i < m; i++)
        (*rows)[np + i].order = items[i];
    free(items);
    /* One list by id: an order shows at its place whether it is still on
     * its way to MySQL or written already. */
    qsort(*rows, all, sizeof(**rows), row_newer_first);
    *more = all > limit;
    *n = all > limit ? limit : all;
    if (*n == 0) {
        free(*rows);
        *rows = NULL;
    }
    return 0;
}

void sale_units_returned(struct sale *s, struct store *st, int64_t voucher_id,
                         const int64_t *orders, const int64_t *users, size_t n)
{
    /* Does nothing for a sync voucher. A return that fails here stays
     * owed in MySQL, and the async writer gives it to Redis later. */
    int err = async_units_return(st, voucher_id, orders, users, n, NULL);

    if (err)
        log_warn("async units not returned to redis yet: retried later",
                 "voucher=%lld n=%zu err=%d", (long long)voucher_id, n, err);
    /* The unit is back on sale: drop "sold out" on every instance. */
    vcache_voucher_changed(s->cfg.vcache, st, voucher_id);
}

/* ---- cancel and pay, merged ---- */

/*
 * Cancels and payments are merged like purchases: each goes to a queue of
 * the purchase engine, and the calls that wait there together run as one
 * transaction (store_orders_cancel(), store_orders_pay()), so a crowd of
 * buyers who all pay at once costs one COMMIT per batch, not one per
 * payment. The queue is one of ORDER_LANES lanes chosen by the order id
 * (a key below zero, apart from the vouchers' own queues): the id is all
 * a call knows before its order is read, and the engine runs one batch
 * of a queue at a time, so the calls on one order never run in two
 * transactions at once. A payment leaves the voucher's row alone; the
 * units a batch gives back are returned per voucher inside it, last, in
 * the order of the vouchers, as a purchase takes its row last.
 *
 * A call whose order the batch did not find (an async sale's order on
 * its way to MySQL, one written since, another user's, none) and a call
 * that meets a full lane run alone, as a task, exactly as before.
 */
#define ORDER_LANES 4

/* A batch the engine hands over fits the store's merged calls. */
_Static_assert(ENGINE_BATCH_MAX <= STORE_ORDER_BATCH_MAX,
               "an engine batch larger than a merged transaction");

static int64_t lane_of(int64_t order_id)
{
    /* A sharded id's lowest bits are its shard: lanes of their own per
     * shard, so that a merged transaction stays on one shard. */
    if (idgen_is_sharded(order_id))
        return -1 - (int64_t)idgen_shard_of(order_id) * ORDER_LANES -
               (order_id >> IDGEN_SHARD_BITS) % ORDER_LANES;
    return -1 - order_id % ORDER_LANES;
}

/* A cancel or a payment while the engine has it. */
struct sale_order_task {
    struct engine_purchase merged; /* first: of_merged()'s cast */
    struct engine_task task;       /* when it runs alone */
    struct sale *sale;
    struct sale_order_op *op;
};

static struct sale_order_task *of_merged(struct engine_purchase *p)
{
    return (struct sale_order_task *)p;
}

static struct sale_order_task *task_of(struct engine_task *t)
{
    return (struct sale_order_task *)((char *)t -
                                      offsetof(struct sale_order_task, task));
}

/* Read the order and check it is the caller's (an admin's: any). */
static int op_find(const struct sale *s, struct store *st,
                   struct sale_order_op *op)
{
    int err =
        order_find(s, st, op->order_id, op->user_id, &op->order, &op->pending);

    op->found = !err;
    return err == -ENOENT ? 0 : err;
}

/* Forget the op's engine state and answer it (err: the engine's, 0 when
 * the op ran). */
static void op_answer(struct sale_order_task *ot, int err)
{
    struct sale_order_op *op = ot->op;

    if (err) /* the engine stopped before it ran: nothing was done */
        op->err = err;
    op->priv = NULL;
    free(ot);
    op->done(op);
}

static void op_done(struct engine_task *t)
{
    op_answer(task_of(t), t->err);
}

static void op_merged_done(struct engine_purchase *p)
{
    op_answer(of_merged(p), p->err);
}

static int op_start(struct sale *s, struct sale_order_op *op,
                    void (*batch)(struct store *, int64_t,
                                  struct engine_purchase **, size_t),
                    void (*run)(struct engine_task *, struct store *))
{
    struct sale_order_task *ot = xcalloc(1, sizeof(*ot));
    int err;

    op->err = 0;
    op->found = false;
    op->pending = false;
    ot->sale = s;
    ot->op = op;
    op->priv = ot;
    ot->merged = (struct engine_purchase){
        .voucher_id = lane_of(op->order_id),
        .deadline_ms = INT64_MAX, /* waits as a task would, for its turn */
        .batch = batch,
        .batch_max = STORE_ORDER_BATCH_MAX,
        .done = op_merged_done,
    };
    err = engine_submit(s->cfg.engine, &ot->merged);
    if (err == -EAGAIN) {
        /* The lane is full: alone, behind the tasks. */
        ot->task = (struct engine_task){.run = run, .done = op_done};
        err = engine_run(s->cfg.engine, &ot->task);
    }
    if (err) {
        op->priv = NULL;
        free(ot);
    }
    return err;
}

/* Closed orders of a batch, whose units are back in MySQL. */
struct closed {
    int64_t voucher[STORE_ORDER_BATCH_MAX], order[STORE_ORDER_BATCH_MAX],
        user[STORE_ORDER_BATCH_MAX];
    size_t n;
};

static void closed_add(struct closed *c, const struct store_order *o)
{
    c->voucher[c->n] = o->voucher_id;
    c->order[c->n] = o->id;
    c->user[c->n] = o->user_id;
    c->n++;
}

/* sale_units_returned() once per voucher of c. */
static void closed_returned(struct sale *s, struct store *st, struct closed *c)
{
    int64_t orders[STORE_ORDER_BATCH_MAX], users[STORE_ORDER_BATCH_MAX];
    bool taken[STORE_ORDER_BATCH_MAX] = {false};

    for (size_t i = 0; i < c->n; i++) {
        size_t k = 0;

        if (taken[i])
            continue;
        for (size_t j = i; j < c->n; j++) {
            if (taken[j] || c->voucher[j] != c->voucher[i])
                continue;
            taken[j] = true;
            orders[k] = c->order[j];
            users[k] = c->user[j];
            k++;
        }
        sale_units_returned(s, st, c->voucher[i], orders, users, k);
    }
}

/*
 * The batch of op failed with err (nothing of it written, or its COMMIT
 * unanswered). An async sale's order on its way to MySQL was not in the
 * batch: it is answered as pending, as op_find() answers it while MySQL
 * is away; the others get err.
 */
static void op_batch_failed(const struct sale *s, struct store *st,
                            struct sale_order_op *op, int err)
{
    struct store_order o;

    if (pending_find(s, st, op->order_id, &o) == 0) {
        op->err = 0;
        op->pending = true;
        op->found = op->user_id <= 0 || o.user_id == op->user_id;
        if (op->found)
            op->order = o;
        return;
    }
    op->err = err;
}

/* A cancel alone: read, then its own transaction. */
static void cancel_one(struct sale *s, struct store *st,
                       struct sale_order_op *op)
{
    op->err = op_find(s, st, op);
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
    sale_units_returned(s, st, op->order.voucher_id, &op->order.id,
                        &op->order.user_id, 1);
}

static void cancel_run(struct engine_task *t, struct store *st)
{
    cancel_one(task_of(t)->sale, st, task_of(t)->op);
}

static void cancel_batch(struct store *st, int64_t lane,
                         struct engine_purchase **ps, size_t n)
{
    struct sale *s = of_merged(ps[0])->sale;
    struct store_cancel_item *items = xcalloc(n, sizeof(*items));
    struct closed *c = xcalloc(1, sizeof(*c));
    int err;

    (void)lane;
    for (size_t i = 0; i < n; i++) {
        items[i].order_id = of_merged(ps[i])->op->order_id;
        items[i].user_id = of_merged(ps[i])->op->user_id;
    }
    err = store_orders_cancel(st, items, n);
    for (size_t i = 0; i < n; i++) {
        struct sale_order_op *op = of_merged(ps[i])->op;

        if (err) {
            op_batch_failed(s, st, op, err);
            continue;
        }
        if (items[i].outcome == STORE_CLOSE_NOT_FOUND) {
            cancel_one(s, st, op);
            continue;
        }
        op->found = true;
        op->outcome.close = items[i].outcome;
        op->order = items[i].order;
        if (items[i].outcome == STORE_CLOSE_DONE)
            metrics_count(METRIC_ORDER_CANCELLED, 1);
        /* Cancelled before too: as in cancel_one(). */
        if (items[i].outcome == STORE_CLOSE_DONE ||
            items[i].outcome == STORE_CLOSE_ALREADY)
            closed_add(c, &op->order);
    }
    closed_returned(s, st, c);
    free(c);
    free(items);
}

int sale_cancel(struct sale *s, struct sale_order_op *op)
{
    return op_start(s, op, cancel_batch, cancel_run);
}

/* Count and log what a payment of amount came to. */
static void pay_noted(const struct sale_order_op *op, int64_t amount)
{
    switch (op->outcome.pay) {
    case STORE_PAY_DONE:
        metrics_count(METRIC_ORDER_PAID, 1);
        break;
    case STORE_PAY_LATE:
        /* Expired by the payment itself: the unit is back on sale. */
        metrics_count(METRIC_ORDER_EXPIRED, 1);
        /* fall through */
    case STORE_PAY_CLOSED:
        metrics_count(METRIC_PAYMENT_LATE, 1);
        log_warn("payment refused, to refund (GET /api/refunds)",
                 "order=%lld txn=\"%s\" amount=%lld why=%s",
                 (long long)op->order_id, op->txn, (long long)amount,
                 op->outcome.pay == STORE_PAY_LATE ? "late" : "closed");
        break;
    case STORE_PAY_OTHER:
        log_warn("second payment of a paid order, to refund (GET "
                 "/api/refunds)",
                 "order=%lld txn=\"%s\" amount=%lld", (long long)op->order_id,
                 op->txn, (long long)amount);
        break;
    default:
        break;
    }
}

/* A payment alone: read, then its own transaction. */
static void pay_one(struct sale *s, struct store *st, struct sale_order_op *op)
{
    int64_t amount = op->amount;

    op->err = op_find(s, st, op);
    if (op->err || !op->found || op->pending)
        return;
    if (amount < 0) {
        /* The simulated provider charges the voucher's price. */
        struct store_voucher *v = xcalloc(1, sizeof(*v));

        op->err = store_voucher_get(st, op->order.voucher_id, v);
        amount = v->pay_value;
        free(v);
        if (op->err)
            return;
    }
    op->err = store_order_pay(st, op->order_id, amount, op->txn,
                              &op->outcome.pay, &op->order, &op->pay_value);
    if (op->err)
        return;
    pay_noted(op, amount);
    if (op->outcome.pay == STORE_PAY_LATE)
        sale_units_returned(s, st, op->order.voucher_id, &op->order.id,
                            &op->order.user_id, 1);
}

static void pay_run(struct engine_task *t, struct store *st)
{
    pay_one(task_of(t)->sale, st, task_of(t)->op);
}

static void pay_batch(struct store *st, int64_t lane,
                      struct engine_purchase **ps, size_t n)
{
    struct sale *s = of_merged(ps[0])->sale;
    struct store_pay_item *items = xcalloc(n, sizeof(*items));
    struct closed *c = xcalloc(1, sizeof(*c));
    int err;

    (void)lane;
    for (size_t i = 0; i < n; i++) {
        const struct sale_order_op *op = of_merged(ps[i])->op;

        items[i].order_id = op->order_id;
        items[i].user_id = op->user_id;
        items[i].amount = op->amount;
        items[i].txn = op->txn;
    }
    err = store_orders_pay(st, items, n);
    for (size_t i = 0; i < n; i++) {
        struct sale_order_op *op = of_merged(ps[i])->op;

        if (err) {
            op_batch_failed(s, st, op, err);
            continue;
        }
        if (items[i].outcome == STORE_PAY_NOT_FOUND) {
            pay_one(s, st, op);
            continue;
        }
        op->found = true;
        op->outcome.pay = items[i].outcome;
        op->order = items[i].order;
        op->pay_value = items[i].pay_value;
        pay_noted(op, items[i].amount);
        if (items[i].outcome == STORE_PAY_LATE)
            closed_add(c, &op->order);
    }
    closed_returned(s, st, c);
    free(c);
    free(items);
}

int sale_refunds_list(struct sale *s, int status, int64_t before,
                      struct store_refund *out, size_t max, size_t *n)
{
    return store_refunds_list(sale__store(s), status, before, out, max, n);
}

int sale_refund_done(struct sale *s, int64_t id, const struct sale_actor *who,
                     struct store_refund *r)
{
    struct store_audit audit;
    int err;

    sale__audit_make(&audit, who, "refund.done", "refund", id, NULL);
    err = store_refund_done(sale__store(s), id, &audit, r);
    sale__audit_done(&audit);
    return err;
}

int sale_pay(struct sale *s, struct sale_order_op *op)
{
    return op_start(s, op, pay_batch, pay_run);
}
