/*
 * batch.c - merged purchases: the purchases of one voucher that arrived
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
 * Also the per-voucher state the store keeps while a voucher is in use:
 * the segments of a segmented voucher, and which were seen empty lately.
 * Each user holds a reference from store_voucher_state_get() to
 * store_voucher_state_put(); a state nobody holds that has not been used
 * for a while is freed by store_voucher_states_free_idle(), and made
 * again (its segments read again) on its next use.
 */
#include "store/internal.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/util.h"

struct voucher_state {
    int64_t voucher_id;
    /* Under states_mu: */
    struct voucher_state *next; /* hash chain */
    unsigned refs;              /* holders between get and put */
    int64_t used_ms;            /* monotonic: the last put */
    /* Atomics: the holders read and write them at the same time. */
    atomic_uint segments;        /* 0: not read yet */
    atomic_uint_fast64_t empty;  /* bit j: segment j seen at 0 */
    atomic_llong empty_since_ms; /* when the first of those was seen */
    atomic_uint mode;            /* 0: not read yet, else purchase_mode + 1 */
};

/* A member of a batch: the caller's item. */
#define member store_purchase_item

/* The states: a hash of chains under one mutex, held for a lookup (once
 * per batch, expiry or cancel: not per request) or a free. */
#define STATE_BUCKETS 1024
static struct voucher_state *states[STATE_BUCKETS];
static size_t states_kept;
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;

struct voucher_state *store_voucher_state_get(int64_t voucher_id)
{
    size_t h = (size_t)((uint64_t)voucher_id * 0x9e3779b97f4a7c15ULL >> 54);
    struct voucher_state *s;

    pthread_mutex_lock(&states_mu);
    for (s = states[h]; s && s->voucher_id != voucher_id; s = s->next)
        ;
    if (!s) {
        s = xcalloc(1, sizeof(*s));
        s->voucher_id = voucher_id;
        s->next = states[h];
        states[h] = s;
        states_kept++;
    }
    s->refs++;
    pthread_mutex_unlock(&states_mu);
    return s;
}

void store_voucher_state_put(struct voucher_state *vs)
{
    if (!vs)
        return;
    pthread_mutex_lock(&states_mu);
    vs->refs--;
    vs->used_ms = util_mono_ms();
    pthread_mutex_unlock(&states_mu);
}

size_t store_voucher_states_free_idle(int64_t idle_ms)
{
    int64_t now = util_mono_ms();
    size_t freed = 0;

    for (size_t h = 0; h < STATE_BUCKETS; h++) {
        /* One chain per hold of the mutex: a batch never waits long. */
        pthread_mutex_lock(&states_mu);
        for (struct voucher_state **pp = &states[h]; *pp;) {
            struct voucher_state *s = *pp;

            if (s->refs || now - s->used_ms < idle_ms) {
                pp = &s->next;
                continue;
            }
            *pp = s->next;
            free(s);
            states_kept--;
            freed++;
        }
        pthread_mutex_unlock(&states_mu);
    }
    return freed;
}

size_t store_voucher_states_count(void)
{
    size_t n;

    pthread_mutex_lock(&states_mu);
    n = states_kept;
    pthread_mutex_unlock(&states_mu);
    return n;
}

struct segments_args {
    int64_t voucher_id;
    int64_t count;
};

static int segments_count_once(struct store *st, void *arg)
{
    struct segments_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    size_t n;

    bind_i64(&p[0], &a->voucher_id);
    bind_i64(&r[0], &a->count);
    return store_stmt_rows(st, STMT_SEGMENT_COUNT, p, r, 1, NULL, NULL, &n);
}

/* As store_voucher_segments_get(), the read done by fn (which may be
 * wrapped in store_retry() or not). */
static int segments_get(struct store *st, struct voucher_state *vs, unsigned *n,
                        bool retry)
{
    struct segments_args a = {vs->voucher_id, 0};
    unsigned known = atomic_load_explicit(&vs->segments, memory_order_relaxed);
    int err;

    if (known) {
        *n = known;
        return 0;
    }
    err = retry ? store_retry(st, segments_count_once, &a)
                : segments_count_once(st, &a);
    if (err)
        return err;
    if (a.count > STORE_SEGMENTS_MAX) {
        /* Not made by this service: the rows past the bitmap's reach
         * would never sell. */
        log_error("voucher has too many stock segments", "voucher=%lld n=%lld",
                  (long long)vs->voucher_id, (long long)a.count);
        return -EIO;
    }
    known = a.count > 1 ? (unsigned)a.count : 1;
    atomic_store_explicit(&vs->segments, known, memory_order_relaxed);
    *n = known;
    return 0;
}

int store_voucher_async_read(struct store *st, struct voucher_state *vs,
                             bool *async)
{
    unsigned known = atomic_load_explicit(&vs->mode, memory_order_relaxed);
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    int64_t id = vs->voucher_id, mode = 0;
    size_t n = 0;
    int err;

    if (!known) {
        bind_i64(&p[0], &id);
        bind_i64(&r[0], &mode);
        err = store_stmt_rows(st, STMT_VOUCHER_MODE, p, r, 1, NULL, NULL, &n);
        if (err)
            return err;
        known = (unsigned)mode + 1; /* no row: not a seckill voucher */
        atomic_store_explicit(&vs->mode, known, memory_order_relaxed);
    }
    *async = known == PURCHASE_ASYNC + 1;
    return 0;
}

int store_voucher_segments_get(struct store *st, struct voucher_state *vs,
                               unsigned *n)
{
    return segments_get(st, vs, n, true);
}

int store_voucher_segments_read(struct store *st, struct voucher_state *vs,
                                unsigned *n)
{
    return segments_get(st, vs, n, false);
}

/* A segment seen empty is skipped for this long: a cancelled or expired
 * order may have given it a unit back meanwhile (on another instance). */
#define SEGMENT_EMPTY_TTL_MS 1000

bool store_segment_is_empty(struct voucher_state *vs, unsigned seg)
{
    uint_fast64_t bits = atomic_load_explicit(&vs->empty, memory_order_relaxed);

    if (!bits)
        return false;
    if (util_mono_ms() -
            atomic_load_explicit(&vs->empty_since_ms, memory_order_relaxed) >=
        SEGMENT_EMPTY_TTL_MS) {
        atomic_store_explicit(&vs->empty, 0, memory_order_relaxed);
        return false;
    }
    return seg < 64 && (bits >> seg & 1);
}

void store_segment_mark_empty(struct voucher_state *vs, unsigned seg)
{
    if (seg >= 64)
        return;
    if (!atomic_fetch_or_explicit(&vs->empty, (uint_fast64_t)1 << seg,
                                  memory_order_relaxed))
        atomic_store_explicit(&vs->empty_since_ms, util_mono_ms(),
                              memory_order_relaxed);
}

void store_segment_mark_stocked(struct voucher_state *vs, unsigned seg)
{
    if (seg < 64)
        atomic_fetch_and_explicit(&vs->empty, ~((uint_fast64_t)1 << seg),
                                  memory_order_relaxed);
}

/* ---- one batch's transaction ---- */

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

/* Read the voucher's stock row (autocommit: the latest committed). */
static int stock_read(struct store *st, int64_t voucher_id, int64_t *stock)
{
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    size_t n;
    int err;

    *stock = 0;
    bind_i64(&p[0], &voucher_id);
    bind_i64(&r[0], stock);
    err = store_stmt_rows(st, STMT_STOCK_GET, p, r, 1, NULL, NULL, &n);
    if (!err && n == 0)
        *stock = 0; /* no stock row: nothing to sell */
    return err;
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
        err = stock_read(st, b->voucher_id, &b->cap);
        if (err)
            return err;
        b->need_stock = false;
    }
    if (b->cap == 0) {
        for (size_t i = 0; i < b->n; i++)
            if (!b->m[i]->settled)
                settle(b->m[i], STORE_PURCHASE_SOLD_OUT, 0);
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
    err = store_stmt_exec(st, STMT_STOCK_TAKE, p, NULL, &s);
    if (err)
        return store_tx_rollback(st, err);
    if (mysql_stmt_affected_rows(s) != 1) {
        /* Fewer than k left: undo the orders, learn how many. */
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
        if (!b->m[i]->settled && !store_attempt_fits(b->m[i]->deadline_ms))
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
void store_batch_run(struct store *st, struct voucher_state *vs,
                     struct member **m, size_t n)
{
    struct batch b = {.voucher_id = vs->voucher_id, .m = m, .n = n, .cap = -1};
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
                e = store_purchase_single(st, vs, 1, m[i]->order_id,
                                          m[i]->user_id, vs->voucher_id,
                                          m[i]->deadline_ms, &o);
                settle(m[i], o, e);
            }
        }
        break;
    }
    for (size_t i = 0; i < n; i++)
        if (!m[i]->settled)
            settle(m[i], STORE_PURCHASE_SOLD_OUT, err);
}
