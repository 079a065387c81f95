/*
 * purchase.c - the purchase transactions (see store_purchase_batch() in
 * store.h): one purchase in its own transaction (the naive CAS on the
 * stock row, or on a stock segment), and the merged transaction of a
 * batch, and the choice between them.
 *
 * The merged transaction: the purchases of one voucher that arrived
 * together (the purchase engine hands them over as one batch) run as one
 * transaction on this thread's connection:
 *
 *   START TRANSACTION
 *   INSERT INTO voucher_orders VALUES (...), (...), ...  (k rows: one
 *       statement up to 16, else a few)
 *   UPDATE seckill_vouchers SET stock = stock - k
 *       WHERE voucher_id = ? AND stock >= k      -> last, the row lock
 *   COMMIT
 *
 * so the hot row is locked once per batch instead of once per purchase.
 * Existing orders: when the INSERT hits the unique (user, voucher) key,
 * it rolls back, one SELECT user_id ... WHERE voucher_id = ? AND user_id
 * IN (...) finds who has one (ALREADY_PURCHASED), and the rest try again;
 * a second clash (a user twice in the batch, or a race) sends the rest
 * through one transaction each. Looking only after a clash saves that
 * round trip on every batch of a sale, where nobody has an order yet.
 * Sold out: when the CAS matches no row, fewer than k remain: the
 * transaction rolls back, the stock s is read, and the first s members by
 * arrival are tried again (the others are SOLD_OUT once the stock reads
 * 0). Stock can grow meanwhile (a cancelled or expired order gives its
 * unit back), so a retry may sell more than the last read said; a bound on
 * the rounds stops the loop from spinning however the stock moves.
 *
 * A paused or stopped sale: every CAS also asks halt = 0 of the row it
 * locks (the voucher's stock row, or the segment: a pause or a stop sets
 * both), so a purchase whose CAS runs after the control committed sells
 * nothing, whatever its caller's cache said; one whose CAS ran first
 * holds the row until its COMMIT, so the control's answer comes after
 * it. A CAS that matched nothing then reads the row's halt (after the
 * rollback, so the latest committed) to tell PAUSED or STOPPED from
 * SOLD_OUT.
 */
#include "store/internal.h"

#include <errno.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/sqlflavour.h"
#include "common/util.h"
/* Read the voucher's stock row and halt (autocommit: the latest
 * committed). */
static int stock_read(struct store *st, int64_t voucher_id, int64_t *stock,
                      int64_t *halt)
{
    MYSQL_BIND p[1] = {0}, r[2] = {0};
    size_t n;
    int err;

    *stock = 0;
    *halt = 0;
    bind_i64(&p[0], &voucher_id);
    bind_i64(&r[0], stock);
    bind_i64(&r[1], halt);
    err = store_stmt_rows(st, STMT_STOCK_GET, p, r, 1, NULL, NULL, &n);
    if (!err && n == 0)
        *stock = *halt = 0; /* no stock row: nothing to sell */
    return err;
}

/* The outcome of a CAS that matched nothing on a sale with halt h. */
static enum store_purchase halted_outcome(int64_t h)
{
    return h == HALT_PAUSED    ? STORE_PURCHASE_PAUSED
           : h == HALT_STOPPED ? STORE_PURCHASE_STOPPED
                               : STORE_PURCHASE_SOLD_OUT;
}

struct purchase_args {
    int64_t order_id;
    int64_t user_id;
    int64_t voucher_id;
    struct voucher_state *vs;
    unsigned segments; /* > 1: CAS a segment, not the stock row */
    enum store_purchase *outcome;
};

/*
 * The CAS of a segmented voucher: take 1 from segment user_id % N, else
 * from the next ones in turn, skipping those seen empty before. A failed
 * UPDATE saw the segment's committed 0 or its halt (it waits for a holder
 * of the row lock); *missed gets its bit, marked empty by the caller once
 * it knows the sale is not halted. Sets *taken.
 */
static int segment_take(struct store *st, struct purchase_args *a, bool *taken,
                        uint64_t *missed)
{
    unsigned n = a->segments, first = (unsigned)(a->user_id % n);
    MYSQL_BIND p[2];
    MYSQL_STMT *s;
    int64_t seg;
    int err;

    *taken = false;
    for (unsigned k = 0; k < n; k++) {
        unsigned j = (first + k) % n;

        if (store_segment_is_empty(a->vs, j))
            continue;
        memset(p, 0, sizeof(p));
        seg = j;
        bind_i64(&p[0], &a->voucher_id);
        bind_i64(&p[1], &seg);
        err = store_stmt_exec(st, STMT_SEGMENT_DECR, p, NULL, &s);
        if (err)
            return err;
        if (mysql_stmt_affected_rows(s) == 1) {
            *taken = true;
            return 0;
        }
        if (j < 64)
            *missed |= (uint64_t)1 << j;
    }
    return 0;
}

static int purchase_once(struct store *st, void *arg)
{
    struct purchase_args *a = arg;
    MYSQL_BIND p[3] = {0}, r[1] = {0};
    int64_t one = 0, stock, halt;
    uint64_t missed = 0;
    MYSQL_STMT *s;
    bool taken;
    size_t n;
    int err;

    err = store_query(st, "START TRANSACTION");
    if (err)
        return err;

    /* 1. one order per user: the Redis lock serialises this user, the
     *    unique key catches anyone who got past an expired lock. */
    bind_i64(&p[0], &a->user_id);
    bind_i64(&p[1], &a->voucher_id);
    bind_i64(&r[0], &one);
    err = store_stmt_rows(st, STMT_ORDER_EXISTS, p, r, 1, NULL, NULL, &n);
    if (err)
        return store_tx_rollback(st, err);
    if (n) {
        *a->outcome = STORE_PURCHASE_DUPLICATE;
        return store_tx_rollback(st, 0);
    }

    /* 2. the order row. */
    MYSQL_BIND q[4] = {0};
    int64_t pay_timeout_s = store_pay_timeout_s(st);

    bind_i64(&q[0], &a->order_id);
    bind_i64(&q[1], &a->user_id);
    bind_i64(&q[2], &a->voucher_id);
    bind_i64(&q[3], &pay_timeout_s);
    err = store_stmt_exec(st, STMT_ORDER_INSERT, q, NULL, &s);
    if (err == -EEXIST) {
        /* Which key? The unique (user, voucher) key is the business
         * outcome; the primary key means the ID worker handed out an id
         * twice (its Redis counter was lost): the caller retries. */
        const char *m = mysql_stmt_error(st->stmts[STMT_ORDER_INSERT]);
        if (strstr(m, "uk_orders_active")) {
            *a->outcome = STORE_PURCHASE_DUPLICATE;
            return store_tx_rollback(st, 0);
        }
        log_error("order id already used", "id=%lld", (long long)a->order_id);
        return store_tx_rollback(st, -EEXIST);
    }
    if (err)
        return store_tx_rollback(st, err);

    /* 3. the CAS on the hot row (or a segment), last, so its row lock is
     *    held only for this statement and the COMMIT. */
    if (a->segments > 1) {
        err = segment_take(st, a, &taken, &missed);
    } else {
        memset(p, 0, sizeof(p));
        bind_i64(&p[0], &a->voucher_id);
        err = store_stmt_exec(st, STMT_STOCK_DECR, p, NULL, &s);
        taken = !err && mysql_stmt_affected_rows(s) == 1;
    }
    if (err)
        return store_tx_rollback(st, err);
    if (!taken) {
        store_tx_rollback(st, 0);
        /* Sold out, or halted? */
        err = stock_read(st, a->voucher_id, &stock, &halt);
        if (err)
            return err; /* rolled back: nothing written */
        *a->outcome = halted_outcome(halt);
        for (unsigned j = 0; !halt && j < 64; j++)
            if (missed >> j & 1)
                store_segment_mark_empty(a->vs, j);
        return 0;
    }
    FAILPOINT("after_update");

    if (mysql_commit(st->my)) {
        err = store_mysql_error(st, NULL, "commit");
        /* The COMMIT may or may not have happened: never report either. */
        return err == -ENOTCONN ? -EINPROGRESS : store_tx_rollback(st, err);
    }
    FAILPOINT("after_commit");
    metrics_observe_batch(1);
    *a->outcome = STORE_PURCHASE_OK;
    return 0;
}

/* Every segment of a segmented voucher seen empty lately: sold out. */
static bool segments_all_empty(struct voucher_state *vs, unsigned n)
{
    for (unsigned j = 0; j < n; j++)
        if (!store_segment_is_empty(vs, j))
            return false;
    return true;
}

/* Whether a purchase due by deadline_ms (monotonic) may start another
 * transaction attempt: one that waits for a row lock takes up to
 * SQL_LOCK_WAIT_S, which must fit in what is left of its budget. */
static bool attempt_fits(int64_t deadline_ms)
{
    return util_mono_ms() + SQL_LOCK_WAIT_S * 1000 <= deadline_ms;
}

/*
 * One purchase in its own transaction: the naive CAS on the stock row, or
 * on a segment when segments > 1. Retries deadlocks and a broken
 * connection. Returns 0 with *outcome, or an error of
 * store_purchase_batch().
 */
static int purchase_single(struct store *st, struct voucher_state *vs,
                           unsigned segments, int64_t order_id, int64_t user_id,
                           int64_t voucher_id, int64_t deadline_ms,
                           enum store_purchase *outcome)
{
    struct purchase_args a = {order_id, user_id,  voucher_id,
                              vs,       segments, outcome};
    int err = -EDEADLK;

    if (segments > 1 && segments_all_empty(vs, segments)) {
        *outcome = STORE_PURCHASE_SOLD_OUT;
        return 0;
    }
    for (int i = 0; i < PURCHASE_ATTEMPTS && err == -EDEADLK; i++) {
        if (!attempt_fits(deadline_ms))
            return -ETIME; /* every attempt so far rolled back */
        err = store_retry(st, purchase_once, &a);
    }
    return err;
}

/* ---- the merged transaction ---- */

/* A member of a batch: the caller's item. */
#define member store_purchase_item

/* The existing-orders SELECT for lists of 2^i users, i = 0..6. */
static const enum stmt_id exist_stmt[] = {
    STMT_ORDERS_EXIST_1,  STMT_ORDERS_EXIST_2,  STMT_ORDERS_EXIST_4,
    STMT_ORDERS_EXIST_8,  STMT_ORDERS_EXIST_16, STMT_ORDERS_EXIST_32,
    STMT_ORDERS_EXIST_64,
};

/* The multi-row INSERTs: insert_rows[j] rows by insert_stmt[j], largest
 * first. */
static const struct {
    size_t rows;
    enum stmt_id id;
} insert_sizes[] = {
    {64, STMT_ORDERS_INSERT_64}, {32, STMT_ORDERS_INSERT_32},
    {16, STMT_ORDERS_INSERT_16}, {15, STMT_ORDERS_INSERT_15},
    {14, STMT_ORDERS_INSERT_14}, {13, STMT_ORDERS_INSERT_13},
    {12, STMT_ORDERS_INSERT_12}, {11, STMT_ORDERS_INSERT_11},
    {10, STMT_ORDERS_INSERT_10}, {9, STMT_ORDERS_INSERT_9},
    {8, STMT_ORDERS_INSERT_8},   {7, STMT_ORDERS_INSERT_7},
    {6, STMT_ORDERS_INSERT_6},   {5, STMT_ORDERS_INSERT_5},
    {4, STMT_ORDERS_INSERT_4},   {3, STMT_ORDERS_INSERT_3},
    {2, STMT_ORDERS_INSERT_2},   {1, STMT_ORDER_INSERT},
};

/* A failed attempt after which the rest goes one transaction each. */
#define BATCH_SPLIT (-EALREADY)
/* The INSERT hit the unique (user, voucher) key: look for the users. */
#define BATCH_DUPS (-EADDRINUSE)

struct batch {
    int64_t voucher_id;
    struct member **m; /* by arrival */
    size_t n;
    int64_t cap;       /* at most this many in the next attempt; < 0: any */
    bool need_stock;   /* read the stock into cap first */
    bool check_dups;   /* look for existing orders first */
    bool dups_checked; /* did: a unique-key clash now means split */
    int64_t halt;      /* the last stock read's: a halted sale sells none */
};

static void settle(struct member *m, enum store_purchase outcome, int err)
{
    m->outcome = outcome;
    m->err = err;
    m->settled = true;
}

static size_t pending(const struct batch *b)
{
    size_t k = 0;

    for (size_t i = 0; i < b->n; i++)
        k += !b->m[i]->settled;
    return k;
}

/* Fetch context of the existing-orders SELECT. */
struct dup_fetch {
    struct member **chunk;
    size_t k;
    int64_t user_id; /* the bound result */
};

static void dup_found(void *ctx, size_t i)
{
    struct dup_fetch *f = ctx;

    (void)i;
    for (size_t j = 0; j < f->k; j++)
        if (f->chunk[j]->user_id == f->user_id && !f->chunk[j]->settled)
            settle(f->chunk[j], STORE_PURCHASE_DUPLICATE, 0);
}

/*
 * After a unique-key clash: members whose user already has an order for
 * the voucher are DUPLICATE (a read sees committed orders only). Lists
 * are padded to 2^i by repeating the last user.
 */
static int dups_settle(struct store *st, struct batch *b)
{
    struct member *chunk[STMT_ROWS_MAX];
    MYSQL_BIND p[1 + STMT_ROWS_MAX], r[1];
    int64_t users[STMT_ROWS_MAX];
    struct dup_fetch f = {.chunk = chunk};
    size_t i = 0, rows;
    int err;

    while (i < b->n) {
        unsigned lg = 0;
        size_t k = 0;

        for (; i < b->n && k < STMT_ROWS_MAX; i++)
            if (!b->m[i]->settled)
                chunk[k++] = b->m[i];
        if (k == 0)
            break;
        while ((1u << lg) < k)
            lg++;
        memset(p, 0, sizeof(p));
        memset(r, 0, sizeof(r));
        bind_i64(&p[0], &b->voucher_id);
        for (size_t j = 0; j < (1u << lg); j++) {
            users[j] = chunk[j < k ? j : k - 1]->user_id;
            bind_i64(&p[1 + j], &users[j]);
        }
        bind_i64(&r[0], &f.user_id);
        f.k = k;
        err =
            store_stmt_rows(st, exist_stmt[lg], p, r, k, dup_found, &f, &rows);
        if (err)
            return err;
    }
    return 0;
}

/*
 * The order rows of in[0..k): one statement for up to 16, else chunks of
 * 64, 32 and 16 first. A clash on the unique key the first time is
 * BATCH_DUPS (look up existing orders). Any other clash fails the whole
 * statement without saying which row: BATCH_SPLIT, and each member runs
 * alone,
 * which tells exactly who is a duplicate (a user got an order meanwhile,
 * past an expired lock) or holds an order id that is taken already (the
 * ID worker's counter was lost: that member alone retries with a fresh
 * id, logged as "order id already used").
 */
static int orders_insert(struct store *st, struct batch *b, struct member **in,
                         size_t k)
{
    MYSQL_BIND p[4 * STMT_ROWS_MAX];
    int64_t pay_timeout_s = store_pay_timeout_s(st);
    MYSQL_STMT *s;
    size_t done = 0;
    int err;

    while (done < k) {
        size_t j = 0, w;

        while (insert_sizes[j].rows > k - done)
            j++;
        w = insert_sizes[j].rows;
        memset(p, 0, 4 * w * sizeof(p[0]));
        for (size_t r = 0; r < w; r++) {
            bind_i64(&p[4 * r], &in[done + r]->order_id);
            bind_i64(&p[4 * r + 1], &in[done + r]->user_id);
            bind_i64(&p[4 * r + 2], &b->voucher_id);
            bind_i64(&p[4 * r + 3], &pay_timeout_s);
        }
        err = store_stmt_exec(st, insert_sizes[j].id, p, NULL, &s);
        if (err == -EEXIST) {
            const char *m = mysql_stmt_error(st->stmts[insert_sizes[j].id]);

            if (strstr(m, "uk_orders_active") && !b->dups_checked)
                return BATCH_DUPS;
            log_warn("purchase batch split by a key clash",
                     "voucher=%lld batch=%zu err=\"%s\"",
                     (long long)b->voucher_id, k, m);
            return BATCH_SPLIT;
        }
        if (err)
            return err;
        done += w;
    }
    return 0;
}

/*
 * One attempt: (the stock, or the existing orders, if needed, then) one
 * transaction over the members not settled yet, at most cap of them.
 * Returns 0 when it made progress or learnt something, else an error
 * with nothing committed
 * (BATCH_SPLIT, -EDEADLK, -ENOTCONN, -EIO). Members are settled
 * as their outcome becomes durable; an unanswered COMMIT settles its
 * members with -EINPROGRESS.
 */
static int batch_attempt(struct store *st, void *arg)
{
    struct batch *b = arg;
    struct member *in[STORE_BATCH_MAX];
    MYSQL_BIND p[3];
    MYSQL_STMT *s;
    int64_t k64;
    size_t k = 0;
    int err;

    if (b->need_stock) {
        err = stock_read(st, b->voucher_id, &b->cap, &b->halt);
        if (err)
            return err;
        b->need_stock = false;
    }
    if (b->cap == 0 || b->halt) {
        for (size_t i = 0; i < b->n; i++)
            if (!b->m[i]->settled)
                settle(b->m[i], halted_outcome(b->halt), 0);
        return 0;
    }
    if (b->check_dups) {
        err = dups_settle(st, b);
        if (err)
            return err;
        b->check_dups = false;
        b->dups_checked = true;
    }

    err = store_query(st, "START TRANSACTION");
    if (err)
        return err;
    for (size_t i = 0; i < b->n && (b->cap < 0 || (int64_t)k < b->cap); i++)
        if (!b->m[i]->settled)
            in[k++] = b->m[i];
    if (k == 0)
        return store_tx_rollback(st, 0);
    err = orders_insert(st, b, in, k);
    if (err == BATCH_DUPS) {
        /* Someone has an order already (a retry after a purchase that
         * timed out, or after an expired lock): find who, try again. */
        b->check_dups = true;
        return store_tx_rollback(st, 0);
    }
    if (err)
        return store_tx_rollback(st, err);

    /* The CAS on the hot row, last before the COMMIT. */
    k64 = (int64_t)k;
    memset(p, 0, sizeof(p));
    bind_i64(&p[0], &k64);
    bind_i64(&p[1], &b->voucher_id);
    bind_i64(&p[2], &k64);
    err = store_stmt_exec(st, STMT_SALE_TAKE, p, NULL, &s);
    if (err)
        return store_tx_rollback(st, err);
    if (mysql_stmt_affected_rows(s) != 1) {
        /* Fewer than k left, or halted: undo the orders, learn which. */
        b->need_stock = true;
        return store_tx_rollback(st, 0);
    }
    FAILPOINT("after_update");

    if (mysql_commit(st->my)) {
        err = store_mysql_error(st, NULL, "commit");
        if (err != -ENOTCONN)
            return store_tx_rollback(st, err);
        /* It may or may not have committed: never report either. */
        for (size_t j = 0; j < k; j++)
            settle(in[j], STORE_PURCHASE_OK, -EINPROGRESS);
        return 0;
    }
    FAILPOINT("after_commit");
    metrics_observe_batch((unsigned)k);
    for (size_t j = 0; j < k; j++)
        settle(in[j], STORE_PURCHASE_OK, 0);
    /* Members left out by the cap: is anything left for them? */
    if (pending(b))
        b->need_stock = true;
    return 0;
}

/* Settle the members that have no time left for another attempt: -ETIME,
 * nothing written for them (every attempt before rolled back). */
static void expire(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (!b->m[i]->settled && !attempt_fits(b->m[i]->deadline_ms))
            settle(b->m[i], STORE_PURCHASE_SOLD_OUT, -ETIME);
}

/*
 * Run the batch m[0..n) to the end: every member settled. Attempts go
 * through store_retry() (a connection that broke before the COMMIT is
 * retried once on a fresh one), deadlocks are retried, and a key clash
 * sends the rest through one transaction each, which answers each of them
 * exactly as if it had been alone (DUPLICATE, or -EEXIST for a taken
 * order id: that caller retries with a fresh one).
 */
static void batch_run(struct store *st, struct voucher_state *vs,
                      int64_t voucher_id, struct member **m, size_t n)
{
    struct batch b = {.voucher_id = voucher_id, .m = m, .n = n, .cap = -1};
    /* Each round settles someone or sees the stock shrink; this bound
     * only stops a bug from spinning. */
    int rounds = 0, rounds_max = 4 * (int)n + 64, deadlocks = 0, err = 0;

    while (expire(&b), pending(&b)) {
        if (rounds++ == rounds_max) {
            log_error("purchase batch made no progress", "voucher=%lld n=%zu",
                      (long long)b.voucher_id, n);
            err = -EIO;
            break;
        }
        err = store_retry(st, batch_attempt, &b);
        if (!err)
            continue;
        if (err == -EDEADLK && ++deadlocks < PURCHASE_ATTEMPTS)
            continue;
        if (err == BATCH_SPLIT) {
            err = 0;
            for (size_t i = 0; i < n; i++) {
                enum store_purchase o = STORE_PURCHASE_SOLD_OUT;
                int e;

                if (m[i]->settled)
                    continue;
                e = purchase_single(st, vs, 1, m[i]->order_id, m[i]->user_id,
                                    voucher_id, m[i]->deadline_ms, &o);
                settle(m[i], o, e);
            }
        }
        break;
    }
    for (size_t i = 0; i < n; i++)
        if (!m[i]->settled)
            settle(m[i], STORE_PURCHASE_SOLD_OUT, err);
}

void store_purchase_batch(struct store *st, int64_t voucher_id,
                          struct store_purchase_item **items, size_t n)
{
    static const enum metric_counter counter[] = {
        [STORE_PURCHASE_OK] = METRIC_PURCHASE_OK,
        [STORE_PURCHASE_SOLD_OUT] = METRIC_PURCHASE_SOLD_OUT,
        [STORE_PURCHASE_DUPLICATE] = METRIC_PURCHASE_DUPLICATE,
    };
    struct voucher_state *vs = store_voucher_state_get(voucher_id);
    unsigned segments, batch_max;
    int err;

    st = store_by_id(st, voucher_id); /* the voucher's shard, whole */
    batch_max = st->cfg->batch_max;
    for (size_t i = 0; i < n; i++) {
        items[i]->settled = false;
        items[i]->err = 0;
        items[i]->outcome = STORE_PURCHASE_SOLD_OUT;
    }
    err = store_voucher_segments_get(st, vs, &segments);
    if (err) {
        for (size_t i = 0; i < n; i++)
            items[i]->err = err;
        goto out;
    }
    if (batch_max == 0)
        batch_max = STORE_BATCH_DEFAULT;
    if (segments > 1 || batch_max == 1) {
        for (size_t i = 0; i < n; i++)
            items[i]->err = purchase_single(
                st, vs, segments, items[i]->order_id, items[i]->user_id,
                voucher_id, items[i]->deadline_ms, &items[i]->outcome);
    } else {
        batch_run(st, vs, voucher_id, items, n);
    }
    for (size_t i = 0; i < n; i++)
        if (!items[i]->err && items[i]->outcome <= STORE_PURCHASE_DUPLICATE)
            metrics_count(counter[items[i]->outcome], 1);
out:
    store_voucher_state_put(vs);
}
