/*
 * orders.c - reading orders: one by id, and a user's, newest first (with
 * sharded sales, every shard's at once: fanout.c).
 */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* Result buffers for one row of the order SELECTs (ORDER_COLUMNS). */
struct order_row {
    MYSQL_BIND b[8];
    int64_t status;
    MYSQL_TIME created, deadline, paid, closed;
    char deadline_null, paid_null, closed_null;
};

static void order_row_bind(struct order_row *r, struct store_order *o)
{
    memset(r, 0, sizeof(*r));
    bind_i64(&r->b[0], &o->id);
    bind_i64(&r->b[1], &o->user_id);
    bind_i64(&r->b[2], &o->voucher_id);
    bind_i64(&r->b[3], &r->status);
    bind_time(&r->b[4], &r->created);
    bind_time_null(&r->b[5], &r->deadline, &r->deadline_null);
    bind_time_null(&r->b[6], &r->paid, &r->paid_null);
    bind_time_null(&r->b[7], &r->closed, &r->closed_null);
}

static void order_row_finish(struct order_row *r, struct store_order *o)
{
    o->status = (enum order_status)r->status;
    o->created = time_to_epoch(&r->created);
    o->pay_deadline_ms = r->deadline_null ? 0 : time_to_epoch_ms(&r->deadline);
    o->pay_time_ms = r->paid_null ? 0 : time_to_epoch_ms(&r->paid);
    o->close_time_ms = r->closed_null ? 0 : time_to_epoch_ms(&r->closed);
}

/* Fetch context of the order SELECTs, as in vouchers.c. */
struct order_fetch {
    struct order_row row;
    struct store_order *one;
    struct store_order *items;
};

static void order_fetched(void *ctx, size_t i)
{
    struct order_fetch *f = ctx;

    order_row_finish(&f->row, f->one);
    if (f->items)
        f->items[i] = *f->one;
}

struct get_args {
    int64_t id;
    struct store_order *o;
};

static int order_get_once(struct store *st, void *arg)
{
    struct get_args *a = arg;
    MYSQL_BIND p[1] = {0};
    struct order_fetch f = {.one = a->o};
    size_t n;
    int err;

    bind_i64(&p[0], &a->id);
    order_row_bind(&f.row, a->o);
    err = store_stmt_rows(st, STMT_ORDER_GET, p, f.row.b, 1, order_fetched, &f,
                          &n);
    return err ? err : n ? 0 : -ENOENT;
}

int store_order_get(struct store *st, int64_t id, struct store_order *o)
{
    struct get_args a = {id, o};
    return store_retry(store_by_id(st, id), order_get_once, &a);
}

struct list_args {
    int64_t user_id;
    int64_t before;
    int64_t limit;
    struct store_order **items;
    size_t *count;
};

static int order_list_once(struct store *st, void *arg)
{
    struct list_args *a = arg;
    MYSQL_BIND p[3] = {0};
    struct store_order one;
    struct order_fetch f = {.one = &one};
    int err;

    bind_i64(&p[0], &a->user_id);
    bind_i64(&p[1], &a->before);
    bind_i64(&p[2], &a->limit);
    order_row_bind(&f.row, &one);
    f.items = xcalloc((size_t)a->limit, sizeof(*f.items));
    err = store_stmt_rows(st, STMT_ORDER_LIST, p, f.row.b, (size_t)a->limit,
                          order_fetched, &f, a->count);
    if (*a->count == 0) {
        free(f.items);
        f.items = NULL;
    }
    *a->items = f.items;
    return err;
}

static int order_newer_first(const void *x, const void *y)
{
    int64_t a = ((const struct store_order *)x)->id;
    int64_t b = ((const struct store_order *)y)->id;

    return a > b ? -1 : a < b;
}

/* One shard's part of a user's merged list. */
struct list_part {
    struct order_fetch f;
    struct store_order one;
};

int store_order_list(struct store *st, int64_t user_id, int64_t before,
                     unsigned limit, struct store_order **items, size_t *count)
{
    struct list_args a = {user_id, before > 0 ? before : INT64_MAX, limit,
                          items, count};
    unsigned ns = store_shard_count(st);
    struct store_rows_call *c;
    struct list_part *part;
    struct store_order *all;
    MYSQL_BIND p[3] = {0};
    size_t nall = 0;
    int err;

    *items = NULL;
    *count = 0;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return -EINVAL;
    if (ns <= 1)
        return store_retry(st, order_list_once, &a);
    /*
     * Every shard's newest page below the cursor, asked of all the shards
     * at once, merged: sharded ids sort by time across shards
     * (idgen/idgen.h), so the newest limit of them all are the page, and
     * its last id is the cursor of the next, as with one shard.
     */
    bind_i64(&p[0], &a.user_id);
    bind_i64(&p[1], &a.before);
    bind_i64(&p[2], &a.limit);
    all = xcalloc((size_t)ns * limit, sizeof(*all));
    part = xcalloc(ns, sizeof(*part));
    c = xcalloc(ns, sizeof(*c));
    for (unsigned i = 0; i < ns; i++) {
        part[i].f.one = &part[i].one;
        part[i].f.items = all + (size_t)i * limit;
        order_row_bind(&part[i].f.row, &part[i].one);
        c[i] = (struct store_rows_call){.st = store_shard(st, i),
                                        .params = p,
                                        .results = part[i].f.row.b,
                                        .max = limit,
                                        .on_row = order_fetched,
                                        .ctx = &part[i].f};
    }
    err = store_stmt_rows_each(STMT_ORDER_LIST, c, ns);
    for (unsigned i = 0; i < ns && !err; i++) {
        memmove(all + nall, all + (size_t)i * limit, c[i].count * sizeof(*all));
        nall += c[i].count;
    }
    free(c);
    free(part);
    if (err || nall == 0) {
        free(all);
        return err;
    }
    qsort(all, nall, sizeof(*all), order_newer_first);
    *count = nall < limit ? nall : limit;
    *items = all;
    return 0;
}

struct sale_orders_args {
    int64_t voucher_id, status, from;
    bool desc;
    struct store_order *out;
    int64_t max;
    size_t *n;
};

static int voucher_orders_once(struct store *st, void *arg)
{
    struct sale_orders_args *a = arg;
    MYSQL_BIND p[5] = {0};
    struct store_order one;
    struct order_fetch f = {.one = &one, .items = a->out};

    bind_i64(&p[0], &a->voucher_id);
    bind_i64(&p[1], &a->status);
    bind_i64(&p[2], &a->status);
    bind_i64(&p[3], &a->from);
    bind_i64(&p[4], &a->max);
    order_row_bind(&f.row, &one);
    return store_stmt_rows(
        st, a->desc ? STMT_VOUCHER_ORDERS_DESC : STMT_VOUCHER_ORDERS_ASC, p,
        f.row.b, (size_t)a->max, order_fetched, &f, a->n);
}

int store_voucher_orders(struct store *st, int64_t voucher_id, int status,
                         bool desc, int64_t from, struct store_order *out,
                         size_t max, size_t *n)
{
    struct sale_orders_args a = {voucher_id, status,       from, desc,
                                 out,        (int64_t)max, n};

    *n = 0;
    if (max < 1)
        return -EINVAL;
    if (desc && from <= 0)
        a.from = INT64_MAX;
    return store_retry(store_by_id(st, voucher_id), voucher_orders_once, &a);
}

static const enum stmt_id get_stmt[] = {
    STMT_ORDERS_GET_1,  STMT_ORDERS_GET_2,  STMT_ORDERS_GET_4,
    STMT_ORDERS_GET_8,  STMT_ORDERS_GET_16, STMT_ORDERS_GET_32,
    STMT_ORDERS_GET_64,
};

/* Fetch context of store_orders_read(): each row to its place. */
struct many_fetch {
    struct order_row row;
    struct store_order one;
    const int64_t *ids;
    size_t n;
    struct store_order *out;
    bool *found;
};

static void many_fetched(void *ctx, size_t i)
{
    struct many_fetch *f = ctx;
    size_t lo = 0, hi = f->n;

    (void)i;
    order_row_finish(&f->row, &f->one);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (f->ids[mid] < f->one.id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < f->n && f->ids[lo] == f->one.id) {
        f->out[lo] = f->one;
        f->found[lo] = true;
    }
}

int store_orders_read(struct store *st, const int64_t *ids, size_t n,
                      struct store_order *out, bool *found)
{
    struct many_fetch f = {.ids = ids, .n = n, .out = out, .found = found};
    MYSQL_BIND p[STMT_ROWS_MAX];
    int64_t chunk[STMT_ROWS_MAX];

    memset(found, 0, n * sizeof(*found));
    for (size_t i = 0; i < n;) {
        size_t k = 0, got;
        unsigned lg = 0;
        int err;

        for (; i < n && k < STMT_ROWS_MAX; i++)
            chunk[k++] = ids[i];
        while ((1u << lg) < k)
            lg++;
        memset(p, 0, sizeof(p));
        for (size_t j = 0; j < (1u << lg); j++) {
            if (j >= k)
                chunk[j] = chunk[k - 1]; /* padding: IN ignores repeats */
            bind_i64(&p[j], &chunk[j]);
        }
        order_row_bind(&f.row, &f.one);
        err = store_stmt_rows(st, get_stmt[lg], p, f.row.b, k, many_fetched, &f,
                              &got);
        if (err)
            return err;
    }
    return 0;
}
