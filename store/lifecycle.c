/*
 * lifecycle.c - an order after its purchase: paid, cancelled or expired,
 * and the voucher's numbers (see store.h, "the order lifecycle").
 *
 * Every transition is one transaction that first locks the order row
 * (SELECT ... FOR UPDATE, or FOR UPDATE SKIP LOCKED for the expiry's scan)
 * and changes it only if it is still unpaid; a cancel or an expiry then
 * gives the unit back with stock = stock + k on the voucher's row (or on a
 * segment) as the last statement before COMMIT, the same order of row
 * locks as a purchase (orders first, the hot row last), so the hot row is
 * held briefly and transitions do not deadlock with purchases. An async
 * sale's order also records, in the same transaction, that its sale's
 * Redis state is owed the unit (unit_returns.c).
 *
 * Many transitions can share one transaction: the expiry's batch, and the
 * merged payments and cancels (store_orders_pay(), store_orders_cancel()),
 * which lock their orders in the order of their ids, decide each member
 * as its own transaction would on what the members before it left, and
 * write the rows a few statements at once before the one COMMIT.
 *
 * A payment's transaction id pays one order: the unique key on
 * voucher_orders.txn_id sees one database; with several shards a payment
 * that is due (its order locked, unpaid, in time, the amount its price)
 * also reserves the id for its order on shard 0 before it is recorded
 * (store_txns_reserve(), shard.c), and is refused when another order
 * has it.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/util.h"

#define TXN_MAX 64

/* The locked order: what a transition needs to decide. at: when it was
 * locked and past_deadline read (MySQL's NOW(3), as text), which is the
 * time a payment decided on it records: the moment it was in time, not
 * the later one its UPDATE runs at. */
struct locked {
    int64_t user_id, voucher_id, status, past_deadline, pay_value;
    char txn[TXN_MAX + 1];
    unsigned long txn_len;
    char at[32];
    unsigned long at_len;
};

/* l's text columns ended after a fetch. */
static void locked_fetched(struct locked *l)
{
    l->txn[l->txn_len < TXN_MAX ? l->txn_len : TXN_MAX] = '\0';
    l->at[l->at_len < sizeof(l->at) - 1 ? l->at_len : sizeof(l->at) - 1] = '\0';
}

/* Lock order id's row (inside a transaction). *found false: no order. */
static int order_lock(struct store *st, int64_t id, struct locked *l,
                      bool *found)
{
    MYSQL_BIND p[1] = {0}, r[7] = {0};
    size_t n;
    int err;

    bind_i64(&p[0], &id);
    bind_i64(&r[0], &l->user_id);
    bind_i64(&r[1], &l->voucher_id);
    bind_i64(&r[2], &l->status);
    bind_str_out(&r[3], l->txn, sizeof(l->txn), &l->txn_len);
    bind_i64(&r[4], &l->past_deadline);
    bind_i64(&r[5], &l->pay_value);
    bind_str_out(&r[6], l->at, sizeof(l->at), &l->at_len);
    err = store_stmt_rows(st, STMT_ORDER_LOCK, p, r, 1, NULL, NULL, &n);
    if (!err) {
        locked_fetched(l);
        *found = n == 1;
    }
    return err;
}

/* Set order id (locked, unpaid) to status (cancelled or expired). */
static int order_close(struct store *st, int64_t id, int64_t status)
{
    MYSQL_BIND p[2] = {0};
    MYSQL_STMT *s;
    int err;

    bind_i64(&p[0], &status);
    bind_i64(&p[1], &id);
    err = store_stmt_exec(st, STMT_ORDER_CLOSE, p, NULL, &s);
    if (!err && mysql_stmt_affected_rows(s) != 1)
        err = -EIO; /* locked and unpaid: cannot happen */
    return err;
}

/*
 * Give k units of voucher_id back: to its row, or to the segment a user
 * of user_id buys from first (segment = user_id % N) when it is
 * segmented. Inside the transaction.
 */
static int units_return(struct store *st, int64_t voucher_id, int64_t user_id,
                        int64_t k)
{
    struct voucher_state *vs = store_voucher_state_get(voucher_id);
    MYSQL_BIND p[3] = {0};
    unsigned segments;
    MYSQL_STMT *s;
    int64_t seg;
    int err = store_voucher_segments_read(st, vs, &segments);

    if (err)
        goto out;
    bind_i64(&p[0], &k);
    bind_i64(&p[1], &voucher_id);
    if (segments <= 1) {
        err = store_stmt_exec(st, STMT_STOCK_RETURN, p, NULL, &s);
        goto out;
    }
    seg = user_id % segments;
    bind_i64(&p[2], &seg);
    err = store_stmt_exec(st, STMT_SEGMENT_RETURN, p, NULL, &s);
    if (!err)
        store_segment_mark_stocked(vs, (unsigned)seg);
out:
    store_voucher_state_put(vs);
    return err;
}

/* COMMIT: an unanswered one is -EINPROGRESS, never a success. */
static int commit(struct store *st)
{
    int err;

    if (!mysql_commit(st->my))
        return 0;
    err = store_mysql_error(st, NULL, "commit");
    return err == -ENOTCONN ? -EINPROGRESS : store_tx_rollback(st, err);
}

/* Run fn through store_retry(), and again after a deadlock or a lock wait
 * timeout (PURCHASE_ATTEMPTS in all). */
static int run_tx(struct store *st, int (*fn)(struct store *, void *),
                  void *arg)
{
    int err = -EDEADLK;

    for (int i = 0; i < PURCHASE_ATTEMPTS && err == -EDEADLK; i++)
        err = store_retry(st, fn, arg);
    /* What it decided for shard 0 (refunds), now that it committed. */
    return store_outbox_flush(st, err);
}

/* An order closed in the open transaction whose unit goes back. */
struct expiring {
    int64_t id, user_id, voucher_id, lag_us;
    unsigned segment; /* where its unit goes back (0: the voucher's row) */
};

static int by_voucher_segment(const void *x, const void *y)
{
    const struct expiring *a = x, *b = y;

    if (a->voucher_id != b->voucher_id)
        return a->voucher_id < b->voucher_id ? -1 : 1;
    return (a->segment > b->segment) - (a->segment < b->segment);
}

/*
 * Give back the units of the orders rows[0..n) that the open transaction
 * closed: each voucher's (segment's) units in one UPDATE stock = stock +
 * k, in one order of vouchers and segments (two transactions cannot
 * deadlock on the rows), then the records of what async sales are owed.
 * Sorts rows by voucher and segment.
 */
static int units_return_all(struct store *st, struct expiring *rows, size_t n)
{
    int err = 0;

    for (size_t i = 0; i < n && !err; i++) {
        struct voucher_state *vs = store_voucher_state_get(rows[i].voucher_id);
        unsigned segments;

        err = store_voucher_segments_read(st, vs, &segments);
        if (!err)
            rows[i].segment =
                segments > 1 ? (unsigned)(rows[i].user_id % segments) : 0;
        store_voucher_state_put(vs);
    }
    if (err)
        return err;
    qsort(rows, n, sizeof(rows[0]), by_voucher_segment);
    for (size_t i = 0; i < n && !err;) {
        size_t j = i + 1;

        while (j < n && rows[j].voucher_id == rows[i].voucher_id &&
               rows[j].segment == rows[i].segment)
            j++;
        err = units_return(st, rows[i].voucher_id, rows[i].user_id,
                           (int64_t)(j - i));
        i = j;
    }
    for (size_t i = 0; i < n && !err; i++)
        err = store_unit_return_owe(st, rows[i].id, rows[i].voucher_id,
                                    rows[i].user_id);
    return err;
}

/* ---- cancel ---- */

struct cancel_args {
    int64_t id;
    enum store_close *outcome;
};

static int cancel_once(struct store *st, void *arg)
{
    struct cancel_args *a = arg;
    struct locked l = {0};
    bool found = false;
    int err = store_query(st, "START TRANSACTION");

    if (err)
        return err;
    err = order_lock(st, a->id, &l, &found);
    if (err || !found) {
        *a->outcome = STORE_CLOSE_NOT_FOUND;
        return store_tx_rollback(st, err);
    }
    switch (l.status) {
    case ORDER_UNPAID:
        break;
    case ORDER_CANCELLED:
        *a->outcome = STORE_CLOSE_ALREADY;
        return store_tx_rollback(st, 0);
    case ORDER_PAID:
        *a->outcome = STORE_CLOSE_PAID;
        return store_tx_rollback(st, 0);
    default:
        *a->outcome = STORE_CLOSE_EXPIRED;
        return store_tx_rollback(st, 0);
    }
    err = order_close(st, a->id, ORDER_CANCELLED);
    if (!err)
        err = units_return(st, l.voucher_id, l.user_id, 1);
    if (!err)
        err = store_unit_return_owe(st, a->id, l.voucher_id, l.user_id);
    if (err)
        return store_tx_rollback(st, err);
    err = commit(st);
    if (!err && FAILPOINT_FAILS("cancel_commit_unanswered"))
        err = -EINPROGRESS;
    if (!err)
        *a->outcome = STORE_CLOSE_DONE;
    return err;
}

int store_order_cancel(struct store *st, int64_t order_id,
                       enum store_close *outcome, struct store_order *o)
{
    struct cancel_args a = {order_id, outcome};
    int err;

    st = store_by_id(st, order_id);
    err = run_tx(st, cancel_once, &a);

    if (err || *outcome == STORE_CLOSE_NOT_FOUND)
        return err;
    return store_order_get(st, order_id, o);
}

/* ---- pay ---- */

struct pay_args {
    int64_t id;
    int64_t amount;
    const char *txn;
    enum store_pay *outcome;
    int64_t *pay_value;
};

/* A refused payment (txn of amount for order id) to give back, in the
 * refusing transaction (store_refund_insert()). */
static int refund_insert(struct store *st, int64_t id, const char *txn,
                         int64_t amount, enum store_refund_reason why)
{
    return store_refund_insert(st, id, txn, amount, why);
}

static int refund_add(struct store *st, struct pay_args *a,
                      enum store_refund_reason why)
{
    return refund_insert(st, a->id, a->txn, a->amount, why);
}

/* Commit the refund of a refused payment (the order is left as it is). */
static int refused_refund(struct store *st, struct pay_args *a,
                          enum store_refund_reason why)
{
    int err = refund_add(st, a, why);

    return err ? store_tx_rollback(st, err) : commit(st);
}

static int pay_once(struct store *st, void *arg)
{
    struct pay_args *a = arg;
    struct locked l = {0};
    struct txn_reservation r = {a->txn, a->id, 0};
    bool found = false;
    MYSQL_BIND p[3] = {0};
    unsigned long txn_len, at_len;
    MYSQL_STMT *s;
    int err = store_query(st, "START TRANSACTION");

    if (err)
        return err;
    err = order_lock(st, a->id, &l, &found);
    if (err || !found) {
        *a->outcome = STORE_PAY_NOT_FOUND;
        return store_tx_rollback(st, err);
    }
    *a->pay_value = l.pay_value;
    if (l.status == ORDER_PAID) {
        /* The same notification again: the same transaction and the
         * amount it paid (the pay value); another amount is not it. */
        *a->outcome = strcmp(l.txn, a->txn) != 0 ? STORE_PAY_OTHER
                      : a->amount != l.pay_value ? STORE_PAY_AMOUNT
                                                 : STORE_PAY_SAME;
        if (*a->outcome == STORE_PAY_OTHER)
            return refused_refund(st, a, STORE_REFUND_SECOND);
        return store_tx_rollback(st, 0);
    }
    if (l.status != ORDER_UNPAID) {
        *a->outcome = STORE_PAY_CLOSED;
        return refused_refund(st, a, STORE_REFUND_CLOSED);
    }
    if (l.past_deadline) {
        /* Late: the order expires now, as the expiry would have, and the
         * unit goes back on sale; the payment is refused. */
        err = order_close(st, a->id, ORDER_EXPIRED);
        if (!err)
            err = units_return(st, l.voucher_id, l.user_id, 1);
        if (!err)
            err = store_unit_return_owe(st, a->id, l.voucher_id, l.user_id);
        if (!err)
            err = refund_add(st, a, STORE_REFUND_LATE);
        if (err)
            return store_tx_rollback(st, err);
        err = commit(st);
        if (!err)
            *a->outcome = STORE_PAY_LATE;
        return err;
    }
    if (a->amount != l.pay_value) {
        *a->outcome = STORE_PAY_AMOUNT;
        return store_tx_rollback(st, 0);
    }
    /* With several shards the transaction is first reserved for this
     * order on shard 0: another shard's order may have it. */
    err = store_txns_reserve(st, &r, 1);
    if (err)
        return store_tx_rollback(st, err);
    if (r.owner != a->id) {
        *a->outcome = STORE_PAY_TXN_USED;
        return store_tx_rollback(st, 0);
    }
    bind_str_in(&p[0], l.at, &at_len);
    bind_str_in(&p[1], a->txn, &txn_len);
    bind_i64(&p[2], &a->id);
    err = store_stmt_exec(st, STMT_ORDER_PAY, p, NULL, &s);
    if (err == -EEXIST) {
        /* The transaction's unique key: it paid another order. */
        *a->outcome = STORE_PAY_TXN_USED;
        return store_tx_rollback(st, 0);
    }
    if (!err && mysql_stmt_affected_rows(s) != 1)
        err = -EIO; /* locked and unpaid: cannot happen */
    if (err)
        return store_tx_rollback(st, err);
    err = commit(st);
    if (!err)
        *a->outcome = STORE_PAY_DONE;
    return err;
}

int store_order_pay(struct store *st, int64_t order_id, int64_t amount,
                    const char *txn_id, enum store_pay *outcome,
                    struct store_order *o, int64_t *pay_value)
{
    struct pay_args a = {order_id, amount, txn_id, outcome, pay_value};
    int err;

    if (!txn_id[0] || strlen(txn_id) > TXN_MAX)
        return -EINVAL;
    *pay_value = 0;
    st = store_by_id(st, order_id);
    err = run_tx(st, pay_once, &a);
    if (err || *outcome == STORE_PAY_NOT_FOUND)
        return err;
    return store_order_get(st, order_id, o);
}

/* ---- merged payments and cancels ---- */

/* One order of a merged batch: its row as locked, then as the batch's
 * earlier members left it. */
struct batch_order {
    int64_t id;
    bool found;
    struct locked l;
};

/* What one merged transaction works on. */
struct order_batch {
    struct batch_order *orders; /* distinct ids, ascending */
    size_t norders;
    struct expiring *returns; /* closed by this attempt, units to return */
    size_t nreturns;
    int64_t *ids; /* orders[i].id, for the read after COMMIT */
    /*
     * The writes of the members, gathered while they are decided and
     * made a few statements at once after (64 rows a statement): the
     * orders paid and their transaction ids; the orders cancelled. With
     * per_row, each payment is its own UPDATE as it is decided (how a
     * txn id another order holds is told apart: STORE_PAY_TXN_USED).
     */
    int64_t *pay_ids;
    const char **pay_txns;
    size_t npay;
    char locked_at[32]; /* the first lock statement's time: the earliest */
    bool per_row;
    int64_t *close_ids;
    size_t nclose;
};

static int by_id(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return (a > b) - (a < b);
}

/* The distinct orders of ids[0..n), ascending. */
static void order_batch_make(struct order_batch *b, const int64_t *ids,
                             size_t n)
{
    b->ids = xcalloc(n, sizeof(*b->ids));
    memcpy(b->ids, ids, n * sizeof(*ids));
    qsort(b->ids, n, sizeof(*b->ids), by_id);
    b->norders = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || b->ids[i] != b->ids[i - 1])
            b->ids[b->norders++] = b->ids[i];
    b->orders = xcalloc(b->norders, sizeof(*b->orders));
    for (size_t i = 0; i < b->norders; i++)
        b->orders[i].id = b->ids[i];
    b->returns = xcalloc(b->norders, sizeof(*b->returns));
    b->pay_ids = xcalloc(b->norders, sizeof(*b->pay_ids));
    b->pay_txns = xcalloc(b->norders, sizeof(*b->pay_txns));
    b->close_ids = xcalloc(b->norders, sizeof(*b->close_ids));
}

static void order_batch_free(struct order_batch *b)
{
    free(b->ids);
    free(b->orders);
    free(b->returns);
    free(b->pay_ids);
    free(b->pay_txns);
    free(b->close_ids);
}

/* A new attempt: nothing written yet. */
static void order_batch_reset(struct order_batch *b)
{
    b->nreturns = 0;
    b->npay = 0;
    b->nclose = 0;
}

static const enum stmt_id pay_stmt[] = {
    STMT_ORDERS_PAY_1,  STMT_ORDERS_PAY_2,  STMT_ORDERS_PAY_4,
    STMT_ORDERS_PAY_8,  STMT_ORDERS_PAY_16, STMT_ORDERS_PAY_32,
    STMT_ORDERS_PAY_64,
};

static const enum stmt_id close_stmt[] = {
    STMT_ORDERS_CLOSE_1,  STMT_ORDERS_CLOSE_2,  STMT_ORDERS_CLOSE_4,
    STMT_ORDERS_CLOSE_8,  STMT_ORDERS_CLOSE_16, STMT_ORDERS_CLOSE_32,
    STMT_ORDERS_CLOSE_64,
};

/*
 * Pay the gathered orders (locked, unpaid, distinct), up to 64 an
 * UPDATE, each with its txn id (a chunk is padded to a power of two with
 * its last order: CASE takes the first match, IN ignores repeats).
 * -EEXIST: a txn id is another order's (the statement is undone, the
 * transaction goes on).
 */
static int order_batch_pay_flush(struct store *st, struct order_batch *b)
{
    MYSQL_BIND p[1 + 3 * STMT_ROWS_MAX];
    unsigned long len[STMT_ROWS_MAX], at_len;
    int64_t ids[STMT_ROWS_MAX];
    const char *txns[STMT_ROWS_MAX];

    for (size_t i = 0; i < b->npay;) {
        size_t k = 0, m;
        unsigned lg = 0;
        MYSQL_STMT *s;
        int err;

        for (; i < b->npay && k < STMT_ROWS_MAX; i++, k++) {
            ids[k] = b->pay_ids[i];
            txns[k] = b->pay_txns[i];
        }
        while ((1u << lg) < k)
            lg++;
        m = (size_t)1 << lg;
        memset(p, 0, sizeof(p));
        bind_str_in(&p[0], b->locked_at, &at_len);
        for (size_t j = 0; j < m; j++) {
            size_t x = j < k ? j : k - 1;

            bind_i64(&p[1 + 2 * j], &ids[x]);
            bind_str_in(&p[2 + 2 * j], txns[x], &len[x]);
            bind_i64(&p[1 + 2 * m + j], &ids[x]);
        }
        err = store_stmt_exec(st, pay_stmt[lg], p, NULL, &s);
        if (!err && mysql_stmt_affected_rows(s) != k)
            err = -EIO; /* locked and unpaid: cannot happen */
        if (err)
            return err;
    }
    return 0;
}

/* Close the gathered orders (locked, unpaid, distinct) as status, up to
 * 64 an UPDATE. */
static int order_batch_close_flush(struct store *st, struct order_batch *b,
                                   int64_t status)
{
    MYSQL_BIND p[1 + STMT_ROWS_MAX];
    int64_t ids[STMT_ROWS_MAX];

    for (size_t i = 0; i < b->nclose;) {
        size_t k = 0;
        unsigned lg = 0;
        MYSQL_STMT *s;
        int err;

        for (; i < b->nclose && k < STMT_ROWS_MAX; i++)
            ids[k++] = b->close_ids[i];
        while ((1u << lg) < k)
            lg++;
        memset(p, 0, sizeof(p));
        bind_i64(&p[0], &status);
        for (size_t j = 0; j < ((size_t)1 << lg); j++) {
            if (j >= k)
                ids[j] = ids[k - 1];
            bind_i64(&p[1 + j], &ids[j]);
        }
        err = store_stmt_exec(st, close_stmt[lg], p, NULL, &s);
        if (!err && mysql_stmt_affected_rows(s) != k)
            err = -EIO; /* locked and unpaid: cannot happen */
        if (err)
            return err;
    }
    return 0;
}

/* The index of order id in b (it is there). */
static size_t order_batch_index(const struct order_batch *b, int64_t id)
{
    size_t lo = 0, hi = b->norders;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (b->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const enum stmt_id lock_stmt[] = {
    STMT_ORDERS_LOCK_1,  STMT_ORDERS_LOCK_2,  STMT_ORDERS_LOCK_4,
    STMT_ORDERS_LOCK_8,  STMT_ORDERS_LOCK_16, STMT_ORDERS_LOCK_32,
    STMT_ORDERS_LOCK_64,
};

/* Fetch context of order_batch_lock(). */
struct lock_fetch {
    int64_t id;
    struct locked l;
    struct order_batch *b;
};

static void lock_fetched(void *ctx, size_t i)
{
    struct lock_fetch *f = ctx;
    struct batch_order *o = &f->b->orders[order_batch_index(f->b, f->id)];

    (void)i;
    locked_fetched(&f->l);
    o->l = f->l;
    if (!f->b->locked_at[0])
        snprintf(f->b->locked_at, sizeof(f->b->locked_at), "%s", f->l.at);
    o->found = true;
}

/* Lock the batch's orders (inside the transaction), in the order of their
 * ids, up to 64 a statement. */
static int order_batch_lock(struct store *st, struct order_batch *b)
{
    struct lock_fetch f = {.b = b};
    MYSQL_BIND p[STMT_ROWS_MAX], r[8];
    int64_t chunk[STMT_ROWS_MAX];

    b->locked_at[0] = '\0';
    for (size_t i = 0; i < b->norders; i++)
        b->orders[i].found = false;
    for (size_t i = 0; i < b->norders;) {
        size_t k = 0, got;
        unsigned lg = 0;
        int err;

        for (; i < b->norders && k < STMT_ROWS_MAX; i++)
            chunk[k++] = b->ids[i];
        while ((1u << lg) < k)
            lg++;
        memset(p, 0, sizeof(p));
        for (size_t j = 0; j < (1u << lg); j++) {
            if (j >= k)
                chunk[j] = chunk[k - 1]; /* padding: IN ignores repeats */
            bind_i64(&p[j], &chunk[j]);
        }
        memset(r, 0, sizeof(r));
        bind_i64(&r[0], &f.id);
        bind_i64(&r[1], &f.l.user_id);
        bind_i64(&r[2], &f.l.voucher_id);
        bind_i64(&r[3], &f.l.status);
        bind_str_out(&r[4], f.l.txn, sizeof(f.l.txn), &f.l.txn_len);
        bind_i64(&r[5], &f.l.past_deadline);
        bind_i64(&r[6], &f.l.pay_value);
        bind_str_out(&r[7], f.l.at, sizeof(f.l.at), &f.l.at_len);
        err =
            store_stmt_rows(st, lock_stmt[lg], p, r, k, lock_fetched, &f, &got);
        if (err)
            return err;
    }
    return 0;
}

/* The locked order of order_id, when it is there and user_id's (user_id
 * 0: anyone's); else NULL. */
static struct batch_order *order_batch_get(struct order_batch *b,
                                           int64_t order_id, int64_t user_id)
{
    struct batch_order *o = &b->orders[order_batch_index(b, order_id)];

    if (!o->found || (user_id > 0 && o->l.user_id != user_id))
        return NULL;
    return o;
}

/* Close o (locked, unpaid) as status: now (a late payment's expiry), or
 * gathered for order_batch_close_flush() (gather); its unit goes back
 * before COMMIT. */
static int order_batch_close(struct store *st, struct order_batch *b,
                             struct batch_order *o, int64_t status, bool gather)
{
    int err = 0;

    if (gather)
        b->close_ids[b->nclose++] = o->id;
    else
        err = order_close(st, o->id, status);
    if (err)
        return err;
    o->l.status = status;
    b->returns[b->nreturns++] = (struct expiring){
        .id = o->id, .user_id = o->l.user_id, .voucher_id = o->l.voucher_id};
    return 0;
}

/* Give back the units of the orders the batch closed, then COMMIT (an
 * unanswered one is -EINPROGRESS). */
static int order_batch_commit(struct store *st, struct order_batch *b)
{
    int err = units_return_all(st, b->returns, b->nreturns);

    if (err)
        return store_tx_rollback(st, err);
    FAILPOINT("order_batch_before_commit");
    return commit(st);
}

struct read_args {
    struct order_batch *b;
    struct store_order *out;
    bool *found;
};

static int read_once(struct store *st, void *arg)
{
    struct read_args *a = arg;

    return store_orders_read(st, a->b->ids, a->b->norders, a->out, a->found);
}

/* Read every order of the batch as it is now, after its COMMIT, into
 * out[] (by b's index). */
static int order_batch_read(struct store *st, struct order_batch *b,
                            struct store_order **out)
{
    struct read_args a = {b, NULL, xcalloc(b->norders, sizeof(bool))};
    int err;

    *out = a.out = xcalloc(b->norders, sizeof(**out));
    err = store_retry(st, read_once, &a);
    free(a.found);
    if (err) {
        free(*out);
        *out = NULL;
    }
    return err;
}

struct pay_batch_args {
    struct store_pay_item *items;
    size_t n;
    struct order_batch b;
    /* With several shards, each item's reservation of its txn (made for
     * the items that may pay); else NULL. */
    struct txn_reservation *held;
};

/* Decide item it of the batch on its order o (locked), as pay_once()
 * would in a transaction of its own; writes what that one would. owner:
 * the order it->txn is reserved for (store_txns_reserve()). */
static int pay_item(struct store *st, struct order_batch *b,
                    struct store_pay_item *it, struct batch_order *o,
                    int64_t owner)
{
    struct locked *l = &o->l;
    MYSQL_BIND p[3] = {0};
    unsigned long txn_len, at_len;
    MYSQL_STMT *s;
    int err;

    it->pay_value = l->pay_value;
    if (it->amount < 0)
        it->amount = l->pay_value; /* the simulated provider's charge */
    if (l->status == ORDER_PAID) {
        it->outcome = strcmp(l->txn, it->txn) != 0 ? STORE_PAY_OTHER
                      : it->amount != l->pay_value ? STORE_PAY_AMOUNT
                                                   : STORE_PAY_SAME;
        if (it->outcome == STORE_PAY_OTHER)
            return refund_insert(st, o->id, it->txn, it->amount,
                                 STORE_REFUND_SECOND);
        return 0;
    }
    if (l->status != ORDER_UNPAID) {
        it->outcome = STORE_PAY_CLOSED;
        return refund_insert(st, o->id, it->txn, it->amount,
                             STORE_REFUND_CLOSED);
    }
    if (l->past_deadline) {
        err = order_batch_close(st, b, o, ORDER_EXPIRED, false);
        if (!err)
            err = refund_insert(st, o->id, it->txn, it->amount,
                                STORE_REFUND_LATE);
        if (!err)
            it->outcome = STORE_PAY_LATE;
        return err;
    }
    if (it->amount != l->pay_value) {
        it->outcome = STORE_PAY_AMOUNT;
        return 0;
    }
    if (owner != o->id) {
        /* Reserved for another order, maybe of another shard. */
        it->outcome = STORE_PAY_TXN_USED;
        return 0;
    }
    if (!b->per_row) {
        /* Paid by the flush after the loop; what follows in the batch
         * sees it paid. */
        b->pay_ids[b->npay] = o->id;
        b->pay_txns[b->npay++] = it->txn;
        l->status = ORDER_PAID;
        snprintf(l->txn, sizeof(l->txn), "%s", it->txn);
        it->outcome = STORE_PAY_DONE;
        return 0;
    }
    bind_str_in(&p[0], l->at, &at_len);
    bind_str_in(&p[1], it->txn, &txn_len);
    bind_i64(&p[2], &o->id);
    err = store_stmt_exec(st, STMT_ORDER_PAY, p, NULL, &s);
    if (err == -EEXIST) {
        /* The transaction's unique key: it paid another order (InnoDB
         * undoes this statement only; the batch goes on). */
        it->outcome = STORE_PAY_TXN_USED;
        return 0;
    }
    if (!err && mysql_stmt_affected_rows(s) != 1)
        err = -EIO; /* locked and unpaid: cannot happen */
    if (err)
        return err;
    l->status = ORDER_PAID;
    snprintf(l->txn, sizeof(l->txn), "%s", it->txn);
    it->outcome = STORE_PAY_DONE;
    return 0;
}

/*
 * Reserve the txn of each item that may pay (its order, as locked,
 * unpaid, in time, and the amount its price) on shard 0, before any of
 * the batch is recorded (store_txns_reserve()). An item that pays is
 * one of them: the batch only ever takes orders out of unpaid.
 */
static int pay_batch_reserve(struct store *st, struct pay_batch_args *a)
{
    for (size_t i = 0; i < a->n; i++) {
        struct store_pay_item *it = &a->items[i];
        struct batch_order *o =
            order_batch_get(&a->b, it->order_id, it->user_id);
        bool may_pay = o && o->l.status == ORDER_UNPAID &&
                       !o->l.past_deadline &&
                       (it->amount < 0 || it->amount == o->l.pay_value);

        a->held[i] = (struct txn_reservation){.txn = may_pay ? it->txn : NULL,
                                              .order_id = it->order_id};
    }
    return store_txns_reserve(st, a->held, a->n);
}

static int pay_batch_once(struct store *st, void *arg)
{
    struct pay_batch_args *a = arg;
    struct order_batch *b = &a->b;
    int err;

    order_batch_reset(b);
    for (size_t i = 0; i < a->n; i++) {
        a->items[i].outcome = STORE_PAY_NOT_FOUND;
        a->items[i].pay_value = 0;
    }
    err = store_query(st, "START TRANSACTION");
    if (err)
        return err;
    err = order_batch_lock(st, b);
    if (!err && a->held)
        err = pay_batch_reserve(st, a);
    for (size_t i = 0; i < a->n && !err; i++) {
        struct store_pay_item *it = &a->items[i];
        struct batch_order *o = order_batch_get(b, it->order_id, it->user_id);

        if (o)
            err = pay_item(st, b, it, o,
                           a->held ? a->held[i].owner : it->order_id);
    }
    if (!err)
        err = order_batch_pay_flush(st, b);
    /* -EEXIST: a txn id of the batch is another order's, or two members
     * name one; the caller runs the batch again, one UPDATE a payment. */
    if (err)
        return store_tx_rollback(st, err);
    return order_batch_commit(st, b);
}

static int orders_pay_here(struct store *st, struct store_pay_item *items,
                           size_t n)
{
    struct pay_batch_args a = {items, n, {0}, NULL};
    struct store_order *now = NULL;
    int64_t *ids;
    int err;

    if (n == 0)
        return 0;
    ids = xcalloc(n, sizeof(*ids));
    for (size_t i = 0; i < n; i++) {
        ids[i] = items[i].order_id;
        if (!items[i].txn[0] || strlen(items[i].txn) > TXN_MAX) {
            free(ids);
            return -EINVAL;
        }
    }
    order_batch_make(&a.b, ids, n);
    free(ids);
    if (store_shard_count(st) > 1)
        a.held = xcalloc(n, sizeof(*a.held));
    err = run_tx(st, pay_batch_once, &a);
    if (err == -EEXIST) {
        a.b.per_row = true;
        err = run_tx(st, pay_batch_once, &a);
    }
    if (!err)
        err = order_batch_read(st, &a.b, &now);
    for (size_t i = 0; i < n && !err; i++)
        if (items[i].outcome != STORE_PAY_NOT_FOUND)
            items[i].order = now[order_batch_index(&a.b, items[i].order_id)];
    free(now);
    free(a.held);
    order_batch_free(&a.b);
    return err;
}

struct cancel_batch_args {
    struct store_cancel_item *items;
    size_t n;
    struct order_batch b;
};

static int cancel_batch_once(struct store *st, void *arg)
{
    struct cancel_batch_args *a = arg;
    struct order_batch *b = &a->b;
    int err;

    order_batch_reset(b);
    for (size_t i = 0; i < a->n; i++)
        a->items[i].outcome = STORE_CLOSE_NOT_FOUND;
    err = store_query(st, "START TRANSACTION");
    if (err)
        return err;
    err = order_batch_lock(st, b);
    for (size_t i = 0; i < a->n && !err; i++) {
        struct store_cancel_item *it = &a->items[i];
        struct batch_order *o = order_batch_get(b, it->order_id, it->user_id);

        if (!o)
            continue;
        switch (o->l.status) {
        case ORDER_UNPAID:
            err = order_batch_close(st, b, o, ORDER_CANCELLED, true);
            it->outcome = STORE_CLOSE_DONE;
            break;
        case ORDER_CANCELLED:
            it->outcome = STORE_CLOSE_ALREADY;
            break;
        case ORDER_PAID:
            it->outcome = STORE_CLOSE_PAID;
            break;
        default:
            it->outcome = STORE_CLOSE_EXPIRED;
            break;
        }
    }
    if (!err)
        err = order_batch_close_flush(st, b, ORDER_CANCELLED);
    if (err)
        return store_tx_rollback(st, err);
    err = order_batch_commit(st, b);
    if (!err && b->nreturns && FAILPOINT_FAILS("cancel_commit_unanswered"))
        err = -EINPROGRESS;
    return err;
}

static int orders_cancel_here(struct store *st, struct store_cancel_item *items,
                              size_t n)
{
    struct cancel_batch_args a = {items, n, {0}};
    struct store_order *now = NULL;
    int64_t *ids;
    int err;

    if (n == 0)
        return 0;
    ids = xcalloc(n, sizeof(*ids));
    for (size_t i = 0; i < n; i++)
        ids[i] = items[i].order_id;
    order_batch_make(&a.b, ids, n);
    free(ids);
    err = run_tx(st, cancel_batch_once, &a);
    if (!err)
        err = order_batch_read(st, &a.b, &now);
    for (size_t i = 0; i < n && !err; i++)
        if (items[i].outcome != STORE_CLOSE_NOT_FOUND)
            items[i].order = now[order_batch_index(&a.b, items[i].order_id)];
    free(now);
    order_batch_free(&a.b);
    return err;
}

/*
 * Items of a merged call whose orders are on several shards run shard by
 * shard, each shard's as one transaction: items[0..n), size bytes each,
 * the order id of each at id_of(), here() the call on one shard. The
 * sale layer keeps a batch to one shard (its lanes), so that an error
 * means nothing was written.
 */
static int by_shard(struct store *st, void *items, size_t n, size_t size,
                    int64_t (*id_of)(const void *),
                    int (*here)(struct store *, void *, size_t))
{
    unsigned ns = store_shard_count(st), first;
    char *all = items, *sub;
    size_t *idx;
    int err = 0;

    if (n == 0)
        return 0;
    first = store_shard_of(st, id_of(all));
    for (size_t i = 1; i < n && first < ns; i++)
        if (store_shard_of(st, id_of(all + i * size)) != first)
            first = ns;
    if (first < ns)
        return here(store_shard(st, first), items, n);
    sub = xcalloc(n, size);
    idx = xcalloc(n, sizeof(*idx));
    for (unsigned s = 0; s < ns && !err; s++) {
        size_t k = 0;

        for (size_t i = 0; i < n; i++)
            if (store_shard_of(st, id_of(all + i * size)) == s) {
                idx[k] = i;
                memcpy(sub + k++ * size, all + i * size, size);
            }
        if (k == 0)
            continue;
        err = here(store_shard(st, s), sub, k);
        for (size_t j = 0; j < k; j++)
            memcpy(all + idx[j] * size, sub + j * size, size);
    }
    free(sub);
    free(idx);
    return err;
}

static int64_t pay_item_id(const void *x)
{
    return ((const struct store_pay_item *)x)->order_id;
}

static int pay_here(struct store *st, void *items, size_t n)
{
    return orders_pay_here(st, items, n);
}

int store_orders_pay(struct store *st, struct store_pay_item *items, size_t n)
{
    return by_shard(st, items, n, sizeof(*items), pay_item_id, pay_here);
}

static int64_t cancel_item_id(const void *x)
{
    return ((const struct store_cancel_item *)x)->order_id;
}

static int cancel_here(struct store *st, void *items, size_t n)
{
    return orders_cancel_here(st, items, n);
}

int store_orders_cancel(struct store *st, struct store_cancel_item *items,
                        size_t n)
{
    return by_shard(st, items, n, sizeof(*items), cancel_item_id, cancel_here);
}

/* ---- expiry ---- */

struct expire_args {
    unsigned max;
    struct store_expired *out;
};

/* Fetch context of the scan. */
struct scan_fetch {
    struct expiring row;
    struct expiring *rows;
};

static void scan_fetched(void *ctx, size_t i)
{
    struct scan_fetch *f = ctx;
    f->rows[i] = f->row;
}

static int expire_once(struct store *st, void *arg)
{
    struct expire_args *a = arg;
    struct expiring rows[STORE_EXPIRE_BATCH_MAX];
    struct scan_fetch f = {.rows = rows};
    MYSQL_BIND p[1] = {0}, r[4] = {0};
    int64_t limit = a->max;
    size_t n = 0;
    int err;

    memset(a->out, 0, sizeof(*a->out));
    err = store_query(st, "START TRANSACTION");
    if (err)
        return err;
    bind_i64(&p[0], &limit);
    bind_i64(&r[0], &f.row.id);
    bind_i64(&r[1], &f.row.user_id);
    bind_i64(&r[2], &f.row.voucher_id);
    bind_i64(&r[3], &f.row.lag_us);
    err = store_stmt_rows(st, STMT_EXPIRE_SCAN, p, r, a->max, scan_fetched, &f,
                          &n);
    if (err || n == 0)
        return store_tx_rollback(st, err);
    for (size_t i = 0; i < n && !err; i++)
        err = order_close(st, rows[i].id, ORDER_EXPIRED);
    if (err)
        return store_tx_rollback(st, err);
    FAILPOINT("expire_before_commit");
    /* Sorted by voucher from here: the answer lists them so. */
    err = units_return_all(st, rows, n);
    if (err)
        return store_tx_rollback(st, err);
    err = commit(st);
    if (!err && FAILPOINT_FAILS("expire_commit_unanswered"))
        err = -EINPROGRESS;
    if (err)
        return err;
    FAILPOINT("expire_after_commit");
    a->out->orders = n;
    for (size_t i = 0; i < n; i++) {
        a->out->lag_us[i] = rows[i].lag_us;
        a->out->order_id[i] = rows[i].id;
        a->out->order_voucher[i] = rows[i].voucher_id;
        a->out->order_user[i] = rows[i].user_id;
        if (i == 0 || rows[i].voucher_id != rows[i - 1].voucher_id)
            a->out->vouchers[a->out->nvouchers++] = rows[i].voucher_id;
    }
    return 0;
}

int store_orders_expire(struct store *st, unsigned shard, unsigned max,
                        struct store_expired *out)
{
    struct expire_args a = {max, out};

    if (max < 1 || max > STORE_EXPIRE_BATCH_MAX ||
        shard >= store_shard_count(st))
        return -EINVAL;
    return run_tx(store_shard(st, shard), expire_once, &a);
}

/* ---- numbers ---- */

struct stats_args {
    int64_t id;
    struct store_voucher_stats *out;
};

static int stats_once(struct store *st, void *arg)
{
    struct stats_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[9] = {0};
    MYSQL_TIME b, e;
    int64_t admission = 0;
    size_t n;
    int err;

    bind_i64(&p[0], &a->id);
    bind_i64(&r[0], &a->out->initial_stock);
    bind_i64(&r[1], &a->out->stock);
    bind_i64(&r[2], &a->out->unpaid);
    bind_i64(&r[3], &a->out->paid);
    bind_i64(&r[4], &a->out->cancelled);
    bind_i64(&r[5], &a->out->expired);
    bind_i64(&r[6], &admission);
    bind_time(&r[7], &b);
    bind_time(&r[8], &e);
    err = store_stmt_rows(st, STMT_VOUCHER_STATS, p, r, 1, NULL, NULL, &n);
    if (err)
        return err;
    if (!n)
        return -ENOENT;
    a->out->admission =
        admission == ADMISSION_QUEUE ? ADMISSION_QUEUE : ADMISSION_OPEN;
    a->out->begin_time = time_to_epoch(&b);
    a->out->end_time = time_to_epoch(&e);
    return 0;
}

int store_voucher_stats(struct store *st, int64_t voucher_id,
                        struct store_voucher_stats *out)
{
    struct stats_args a = {voucher_id, out};

    memset(out, 0, sizeof(*out));
    return store_retry(store_by_id(st, voucher_id), stats_once, &a);
}

/* ---- refunds ---- */

struct refund_row {
    struct store_refund r;
    int64_t reason, status;
    unsigned long txn_len;
    MYSQL_TIME created, done;
    char done_null;
    MYSQL_BIND b[8];
};

static void refund_bind(struct refund_row *x)
{
    memset(x->b, 0, sizeof(x->b));
    bind_i64(&x->b[0], &x->r.id);
    bind_i64(&x->b[1], &x->r.order_id);
    bind_str_out(&x->b[2], x->r.txn, sizeof(x->r.txn), &x->txn_len);
    bind_i64(&x->b[3], &x->r.amount);
    bind_i64(&x->b[4], &x->reason);
    bind_i64(&x->b[5], &x->status);
    bind_time(&x->b[6], &x->created);
    bind_time_null(&x->b[7], &x->done, &x->done_null);
}

static struct store_refund refund_finish(struct refund_row *x)
{
    struct store_refund r = x->r;

    r.txn[x->txn_len < sizeof(r.txn) ? x->txn_len : 0] = '\0';
    r.reason = (enum store_refund_reason)x->reason;
    r.done = x->status == 1;
    r.created_ms = time_to_epoch_ms(&x->created);
    r.done_ms = x->done_null ? 0 : time_to_epoch_ms(&x->done);
    return r;
}

struct refunds_args {
    int64_t status, before, max;
    struct store_refund *out;
    size_t *n;
    struct refund_row x;
};

static void refund_listed(void *ctx, size_t i)
{
    struct refunds_args *a = ctx;

    a->out[i] = refund_finish(&a->x);
}

static int refunds_once(struct store *st, void *arg)
{
    struct refunds_args *a = arg;
    MYSQL_BIND p[4] = {0};

    bind_i64(&p[0], &a->status);
    bind_i64(&p[1], &a->status);
    bind_i64(&p[2], &a->before);
    bind_i64(&p[3], &a->max);
    refund_bind(&a->x);
    return store_stmt_rows(st, STMT_REFUNDS_LIST, p, a->x.b, (size_t)a->max,
                           refund_listed, a, a->n);
}

int store_refunds_list(struct store *st, int status, int64_t before,
                       struct store_refund *out, size_t max, size_t *n)
{
    struct refunds_args a = {.status = status,
                             .before = before > 0 ? before : INT64_MAX,
                             .max = (int64_t)max,
                             .out = out,
                             .n = n};

    *n = 0;
    return store_retry(st, refunds_once, &a);
}

struct done_args {
    int64_t id, admin;
    const struct store_audit *audit;
    struct store_refund *r;
};

static int refund_done_once(struct store *st, void *arg)
{
    struct done_args *a = arg;
    MYSQL_BIND p[2] = {0}, q[1] = {0};
    struct refund_row x;
    MYSQL_STMT *s;
    size_t n = 0;
    int err;

    err = store_tx_begin_keyed(st, a->audit);
    if (err)
        return err;
    bind_i64(&p[0], &a->admin);
    bind_i64(&p[1], &a->id);
    err = store_stmt_exec(st, STMT_REFUND_DONE, p, NULL, &s);
    /* Recorded when this call changed it, not when it was done before. */
    if (!err && mysql_stmt_affected_rows(s) == 1)
        err = store_audit_add(st, a->audit);
    if (err)
        return store_tx_rollback(st, err);
    bind_i64(&q[0], &a->id);
    refund_bind(&x);
    err = store_stmt_rows(st, STMT_REFUND_GET, q, x.b, 1, NULL, NULL, &n);
    if (!err && !n)
        err = -ENOENT;
    if (err)
        return store_tx_rollback(st, err);
    *a->r = refund_finish(&x);
    return store_tx_commit(st);
}

int store_refund_done(struct store *st, int64_t id,
                      const struct store_audit *audit, struct store_refund *r)
{
    struct done_args a = {id, audit->admin_id, audit, r};
    /* Retried only when nothing was written (store_retry()). */
    return store_retry(st, refund_done_once, &a);
}
