/*
 * unit_returns.c - the units MySQL gave back that an async sale's Redis
 * state is still owed (see store.h): recorded by the transaction that
 * closes the order, listed for the writers to try again, dropped once
 * Redis has them.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int store_unit_return_owe(struct store *st, int64_t order_id,
                          int64_t voucher_id, int64_t user_id)
{
    MYSQL_BIND p[3] = {0};
    MYSQL_STMT *s;
    struct voucher_state *vs = store_voucher_state_get(voucher_id);
    bool async = false;
    int err = store_voucher_async_read(st, vs, &async);

    store_voucher_state_put(vs);
    if (err || !async)
        return err;
    bind_i64(&p[0], &order_id);
    bind_i64(&p[1], &voucher_id);
    bind_i64(&p[2], &user_id);
    return store_stmt_exec(st, STMT_UNIT_RETURN_OWE, p, NULL, &s);
}

struct list_args {
    int64_t min_age_us, max;
    struct store_unit_return row, *out;
    size_t *n;
};

static void listed(void *ctx, size_t i)
{
    struct list_args *a = ctx;
    a->out[i] = a->row;
}

static int list_once(struct store *st, void *arg)
{
    struct list_args *a = arg;
    MYSQL_BIND p[2] = {0}, r[3] = {0};

    bind_i64(&p[0], &a->min_age_us);
    bind_i64(&p[1], &a->max);
    bind_i64(&r[0], &a->row.order_id);
    bind_i64(&r[1], &a->row.voucher_id);
    bind_i64(&r[2], &a->row.user_id);
    return store_stmt_rows(st, STMT_UNIT_RETURNS_LIST, p, r, (size_t)a->max,
                           listed, a, a->n);
}

/* The shard a process's next list of owed units starts with. */
static atomic_uint list_turn;

int store_unit_returns_list(struct store *st, unsigned min_age_ms,
                            struct store_unit_return *out, size_t max,
                            size_t *n)
{
    unsigned ns = store_shard_count(st), first;
    int err = 0;

    *n = 0;
    if (max == 0)
        return 0;
    /* Every shard's, each from where the last shard's stopped; a
     * different shard first each time, so that one shard's backlog does
     * not starve the others'. */
    first = ns > 1 ? atomic_fetch_add(&list_turn, 1) % ns : 0;
    for (unsigned k = 0; k < ns && *n < max && !err; k++) {
        size_t got = 0;
        struct list_args a = {.min_age_us = (int64_t)min_age_ms * 1000,
                              .max = (int64_t)(max - *n),
                              .out = out + *n,
                              .n = &got};

        err = store_retry(store_shard(st, (first + k) % ns), list_once, &a);
        *n += got;
    }
    if (err)
        *n = 0;
    return err;
}

static const enum stmt_id done_stmt[] = {
    STMT_UNIT_RETURNS_DONE_1,  STMT_UNIT_RETURNS_DONE_2,
    STMT_UNIT_RETURNS_DONE_4,  STMT_UNIT_RETURNS_DONE_8,
    STMT_UNIT_RETURNS_DONE_16, STMT_UNIT_RETURNS_DONE_32,
    STMT_UNIT_RETURNS_DONE_64,
};

struct done_args {
    const int64_t *ids;
    size_t n;
};

/* One DELETE per chunk of up to 64 ids (padded to a power of two with
 * the last id). Autocommit: each chunk stands alone. */
static int done_once(struct store *st, void *arg)
{
    struct done_args *a = arg;
    MYSQL_BIND p[STMT_ROWS_MAX];
    int64_t ids[STMT_ROWS_MAX];
    MYSQL_STMT *s;

    for (size_t i = 0; i < a->n;) {
        size_t k = 0;
        unsigned lg = 0;
        int err;

        for (; i < a->n && k < STMT_ROWS_MAX; i++)
            ids[k++] = a->ids[i];
        while ((1u << lg) < k)
            lg++;
        memset(p, 0, sizeof(p));
        for (size_t j = 0; j < (1u << lg); j++) {
            if (j >= k)
                ids[j] = ids[k - 1];
            bind_i64(&p[j], &ids[j]);
        }
        /* Read committed: no gap locks. An id some other instance
         * deleted already would otherwise lock the gap it leaves, and a
         * closing transaction's INSERT of a new owed unit there would
         * deadlock with it. */
        err = store_query(st, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
        if (!err)
            err = store_stmt_exec(st, done_stmt[lg], p, NULL, &s);
        if (err)
            return err;
    }
    return 0;
}

int store_unit_returns_done(struct store *st, const int64_t *ids, size_t n)
{
    unsigned ns = store_shard_count(st);
    int64_t *mine;
    int err = 0;

    if (n == 0)
        return 0;
    if (ns <= 1) {
        struct done_args a = {ids, n};
        return store_retry(st, done_once, &a);
    }
    /* Each shard's records of its own orders (the ids name it). */
    mine = xcalloc(n, sizeof(*mine));
    for (unsigned s = 0; s < ns && !err; s++) {
        struct done_args a = {mine, 0};

        for (size_t i = 0; i < n; i++)
            if (store_shard_of(st, ids[i]) == s)
                mine[a.n++] = ids[i];
        if (a.n)
            err = store_retry(store_shard(st, s), done_once, &a);
    }
    free(mine);
    return err;
}
