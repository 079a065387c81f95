/*
 * async_orders.c - the MySQL side of the asynchronous purchase mode:
 * writing the orders a Redis Stream carried, idempotently, and reading
 * what the Redis side of a sale is rebuilt from (see store.h).
 *
 * A batch of the stream's orders is written in one transaction: the ids
 * already in MySQL are looked up first (a replay after a crash between
 * COMMIT and the stream's acknowledgement finds them, and writes nothing
 * twice), the rest go in with multi-row INSERTs, and the stock goes down
 * by their number as the last statement. An order the unique key refuses
 * (its user has another active order) or that finds no stock left cannot
 * ever be written: the batch is retried without it, and the caller moves
 * it aside (a dead-letter stream). Each row keeps its place in the
 * sale's stream, so that the reconciliation can count MySQL's orders up
 * to the place where it read Redis, whatever batches other writers
 * commit meanwhile.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/util.h"

#define WRITE_MAX 256

static const enum stmt_id ids_stmt[] = {
    STMT_IDS_EXIST_1,  STMT_IDS_EXIST_2,  STMT_IDS_EXIST_4,  STMT_IDS_EXIST_8,
    STMT_IDS_EXIST_16, STMT_IDS_EXIST_32, STMT_IDS_EXIST_64,
};

static const enum stmt_id insert_stmt[] = {
    STMT_ASYNC_INSERT_1,  STMT_ASYNC_INSERT_2,  STMT_ASYNC_INSERT_4,
    STMT_ASYNC_INSERT_8,  STMT_ASYNC_INSERT_16, STMT_ASYNC_INSERT_32,
    STMT_ASYNC_INSERT_64,
};

struct write_args {
    int64_t voucher_id;
    struct store_async_order *o;
    size_t n;
    bool *written;  /* in MySQL already, or now */
    bool *excluded; /* refused: not tried again */
};

/* Fetch context of the existence check. */
struct ids_fetch {
    struct write_args *a;
    int64_t id, user_id, voucher_id;
};

/* An id MySQL has: this very order (a replay), or another order's (the
 * ID worker lost its counter: this one can never be written). */
static void id_found(void *ctx, size_t i)
{
    struct ids_fetch *f = ctx;

    (void)i;
    for (size_t j = 0; j < f->a->n; j++) {
        struct store_async_order *o = &f->a->o[j];

        if (o->order_id != f->id)
            continue;
        if (o->user_id == f->user_id && f->a->voucher_id == f->voucher_id) {
            f->a->written[j] = true;
        } else {
            f->a->excluded[j] = true;
            o->result = -EEXIST;
        }
    }
}

/* Mark the orders MySQL has already (in chunks of up to 64, padded). */
static int find_written(struct store *st, struct write_args *a)
{
    MYSQL_BIND p[STMT_ROWS_MAX], r[3];
    int64_t ids[STMT_ROWS_MAX];
    struct ids_fetch f = {.a = a};
    size_t i = 0, rows;
    int err;

    while (i < a->n) {
        size_t k = 0;
        unsigned lg = 0;

        for (; i < a->n && k < STMT_ROWS_MAX; i++)
            ids[k++] = a->o[i].order_id;
        while ((1u << lg) < k)
            lg++;
        memset(p, 0, sizeof(p));
        memset(r, 0, sizeof(r));
        for (size_t j = 0; j < (1u << lg); j++) {
            if (j >= k)
                ids[j] = ids[k - 1];
            bind_i64(&p[j], &ids[j]);
        }
        bind_i64(&r[0], &f.id);
        bind_i64(&r[1], &f.user_id);
        bind_i64(&r[2], &f.voucher_id);
        err = store_stmt_rows(st, ids_stmt[lg], p, r, k, id_found, &f, &rows);
        if (err)
            return err;
    }
    return 0;
}

/* Insert in[0..k) (k a power of two up to 64). -EEXIST: a key refused a
 * row, which one unknown. */
static int insert_rows(struct store *st, struct write_args *a,
                       struct store_async_order **in, size_t k, unsigned lg)
{
    MYSQL_BIND p[5 * STMT_ROWS_MAX];
    MYSQL_TIME deadline[STMT_ROWS_MAX];
    int64_t pay_timeout_ms = store_pay_timeout_s(st) * 1000;
    MYSQL_STMT *s;

    memset(p, 0, 5 * k * sizeof(p[0]));
    for (size_t r = 0; r < k; r++) {
        time_from_epoch_ms(&deadline[r], in[r]->accepted_ms + pay_timeout_ms);
        bind_i64(&p[5 * r], &in[r]->order_id);
        bind_i64(&p[5 * r + 1], &in[r]->user_id);
        bind_i64(&p[5 * r + 2], &a->voucher_id);
        p[5 * r + 3].buffer_type = MYSQL_TYPE_DATETIME;
        p[5 * r + 3].buffer = &deadline[r];
        bind_i64(&p[5 * r + 4], &in[r]->stream_pos);
    }
    return store_stmt_exec(st, insert_stmt[lg], p, NULL, &s);
}

/*
 * One attempt: the orders not written and not refused go in, and the
 * stock goes down by their number. -EEXIST or -ERANGE: some order is
 * refused (by a unique key, or for want of stock); the caller finds which.
 */
static int write_once(struct store *st, void *arg)
{
    struct write_args *a = arg;
    struct store_async_order *in[WRITE_MAX];
    MYSQL_BIND p[3];
    MYSQL_STMT *s;
    int64_t k64;
    size_t k = 0, done = 0;
    int err = store_query(st, "START TRANSACTION");

    if (err)
        return err;
    err = find_written(st, a);
    if (err)
        return store_tx_rollback(st, err);
    for (size_t i = 0; i < a->n; i++)
        if (!a->written[i] && !a->excluded[i])
            in[k++] = &a->o[i];
    if (k == 0)
        return store_tx_rollback(st, 0);
    while (done < k) {
        unsigned lg = 6;

        while ((1u << lg) > k - done)
            lg--;
        err = insert_rows(st, a, in + done, 1u << lg, lg);
        if (err)
            return store_tx_rollback(st, err);
        done += 1u << lg;
    }
    /* The stock row last: its lock is held for this and the COMMIT. */
    k64 = (int64_t)k;
    memset(p, 0, sizeof(p));
    bind_i64(&p[0], &k64);
    bind_i64(&p[1], &a->voucher_id);
    bind_i64(&p[2], &k64);
    err = store_stmt_exec(st, STMT_STOCK_TAKE, p, NULL, &s);
    if (err)
        return store_tx_rollback(st, err);
    if (mysql_stmt_affected_rows(s) != 1)
        return store_tx_rollback(st, -ERANGE);
    FAILPOINT("async_write_before_commit");
    if (mysql_commit(st->my)) {
        err = store_mysql_error(st, NULL, "commit");
        /* Unknown: the next attempt's existence check tells. */
        return err == -ENOTCONN ? -EINPROGRESS : store_tx_rollback(st, err);
    }
    metrics_count(METRIC_ASYNC_WRITTEN, k);
    for (size_t i = 0; i < a->n; i++)
        if (!a->excluded[i])
            a->written[i] = true;
    return 0;
}

/* Run write_once, retrying a broken connection, a deadlock and an
 * unanswered COMMIT (the existence check makes the retry safe). */
static int write_retry(struct store *st, struct write_args *a)
{
    int err = -EDEADLK;

    for (int i = 0;
         i < PURCHASE_ATTEMPTS && (err == -EDEADLK || err == -EINPROGRESS); i++)
        err = store_retry(st, write_once, a);
    return err;
}

int store_async_write(struct store *st, int64_t voucher_id,
                      struct store_async_order *o, size_t n)
{
    bool written[WRITE_MAX] = {0}, excluded[WRITE_MAX] = {0};
    struct write_args a = {voucher_id, o, n, written, excluded};
    int err;

    if (n > WRITE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        o[i].result = 0;
    st = store_by_id(st, voucher_id);
    err = write_retry(st, &a);
    if (err == -EEXIST || err == -ERANGE) {
        /* Someone is refused: one at a time, to know who. */
        for (size_t i = 0; i < n; i++) {
            struct write_args one = {voucher_id, &o[i], 1, &written[i],
                                     &excluded[i]};

            if (written[i])
                continue;
            err = write_retry(st, &one);
            if (err == -EEXIST || err == -ERANGE) {
                excluded[i] = true;
                o[i].result = err;
                err = 0;
            }
            if (err)
                return err;
        }
        return 0;
    }
    return err;
}

/* ---- reading the sale ---- */

struct vouchers_args {
    int64_t lookback_s;
    int64_t *out;
    size_t cap, n;
    size_t base; /* the rows of the shards read before this one */
    int64_t one;
};

static void voucher_listed(void *ctx, size_t i)
{
    struct vouchers_args *a = ctx;

    i += a->base;
    if (i >= a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->out = xrealloc(a->out, a->cap * sizeof(*a->out));
    }
    a->out[i] = a->one;
}

static int vouchers_once(struct store *st, void *arg)
{
    struct vouchers_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    size_t got;
    int err;

    bind_i64(&p[0], &a->lookback_s);
    bind_i64(&r[0], &a->one);
    err = store_stmt_rows(st, STMT_ASYNC_VOUCHERS, p, r, SIZE_MAX,
                          voucher_listed, a, &got);
    a->n = a->base + got;
    return err;
}

static int id_newer_first(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return a > b ? -1 : a < b;
}

int store_async_vouchers(struct store *st, unsigned lookback_s, int64_t **out,
                         size_t *n)
{
    struct vouchers_args a = {.lookback_s = lookback_s};
    int err = 0;

    /* Every shard's, gathered (its voucher ids name it), newest first. */
    for (unsigned i = 0; i < store_shard_count(st) && !err; i++) {
        a.base = a.n;
        err = store_retry(store_shard(st, i), vouchers_once, &a);
    }
    if (!err && a.n > 1 && store_shard_count(st) > 1)
        qsort(a.out, a.n, sizeof(*a.out), id_newer_first);
    if (err) {
        free(a.out);
        a.out = NULL;
        a.n = 0;
    }
    *out = a.out;
    *n = a.n;
    return err;
}

struct sale_args {
    int64_t id;
    struct store_async_sale *out;
    int64_t user, order;
    size_t cap;
};

static void user_listed(void *ctx, size_t i)
{
    struct sale_args *a = ctx;

    if (i >= a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->out->users = xrealloc(a->out->users, a->cap * sizeof(int64_t));
        a->out->orders = xrealloc(a->out->orders, a->cap * sizeof(int64_t));
    }
    a->out->users[i] = a->user;
    a->out->orders[i] = a->order;
}

static int sale_once(struct store *st, void *arg)
{
    struct sale_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[10] = {0};
    MYSQL_TIME b, e;
    int64_t halt = 0;
    size_t n;
    int err;

    /* One snapshot: the row, the counts and the users agree. */
    err = store_query(st, "START TRANSACTION WITH CONSISTENT SNAPSHOT");
    if (err)
        return err;
    bind_i64(&p[0], &a->id);
    bind_i64(&r[0], &a->out->initial_stock);
    bind_i64(&r[1], &a->out->stock);
    bind_time(&r[2], &b);
    bind_time(&r[3], &e);
    bind_i64(&r[4], &a->out->written);
    bind_i64(&r[5], &a->out->last_pos);
    bind_i64(&r[6], &a->out->stamp);
    bind_i64(&r[7], &halt);
    bind_i64(&r[8], &a->out->revision);
    bind_i64(&r[9], &a->out->restocked);
    err = store_stmt_rows(st, STMT_ASYNC_SALE, p, r, 1, NULL, NULL, &n);
    if (!err && n == 0)
        err = -ENOENT;
    if (err)
        return store_tx_rollback(st, err);
    a->out->halt = (enum store_halt)halt;
    a->out->begin_time = time_to_epoch(&b);
    a->out->end_time = time_to_epoch(&e);
    memset(r, 0, sizeof(r));
    bind_i64(&r[0], &a->user);
    bind_i64(&r[1], &a->order);
    free(a->out->users);
    free(a->out->orders);
    a->out->users = NULL;
    a->out->orders = NULL;
    a->cap = 0;
    err = store_stmt_rows(st, STMT_ACTIVE_USERS, p, r, SIZE_MAX, user_listed, a,
                          &a->out->nusers);
    return store_tx_rollback(st, err); /* read only: nothing to commit */
}

int store_async_sale_read(struct store *st, int64_t voucher_id,
                          struct store_async_sale *out)
{
    struct sale_args a = {.id = voucher_id, .out = out};

    memset(out, 0, sizeof(*out));
    return store_retry(store_by_id(st, voucher_id), sale_once, &a);
}

struct counts_args {
    int64_t id, pos_max;
    struct store_async_counts *out;
};

static int counts_once(struct store *st, void *arg)
{
    struct counts_args *a = arg;
    MYSQL_BIND p[3] = {0}, r[6] = {0};
    size_t n;
    int err;

    bind_i64(&p[0], &a->pos_max);
    bind_i64(&p[1], &a->pos_max);
    bind_i64(&p[2], &a->id);
    bind_i64(&r[0], &a->out->initial_stock);
    bind_i64(&r[1], &a->out->active);
    bind_i64(&r[2], &a->out->orders);
    bind_i64(&r[3], &a->out->restocked);
    bind_i64(&r[4], &a->out->revision);
    bind_i64(&r[5], &a->out->owed);
    err = store_stmt_rows(st, STMT_ASYNC_COUNTS, p, r, 1, NULL, NULL, &n);
    return err ? err : n ? 0 : -ENOENT;
}

int store_async_counts_read(struct store *st, int64_t voucher_id,
                            int64_t pos_max, struct store_async_counts *out)
{
    struct counts_args a = {voucher_id, pos_max, out};

    memset(out, 0, sizeof(*out));
    return store_retry(store_by_id(st, voucher_id), counts_once, &a);
}

struct stamp_args {
    int64_t id, *stamp;
};

static int stamp_once(struct store *st, void *arg)
{
    struct stamp_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    size_t n;
    int err;

    bind_i64(&p[0], &a->id);
    bind_i64(&r[0], a->stamp);
    err = store_stmt_rows(st, STMT_ASYNC_STAMP, p, r, 1, NULL, NULL, &n);
    return err ? err : n ? 0 : -ENOENT;
}

int store_async_stamp_read(struct store *st, int64_t voucher_id, int64_t *stamp)
{
    struct stamp_args a = {voucher_id, stamp};

    *stamp = 0;
    return store_retry(store_by_id(st, voucher_id), stamp_once, &a);
}
