/*
 * vouchers.c - vouchers and their seckill stock rows.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/util.h"
#include "idgen/idgen.h"

/* Result buffers for one row of the voucher SELECTs. */
struct voucher_row {
    MYSQL_BIND b[16];
    unsigned long len[16];
    char null[16];
    int64_t type, mode, admission, halt;
    MYSQL_TIME begin, end, created, updated;
};

static void voucher_row_bind(struct voucher_row *r, struct store_voucher *v)
{
    memset(r, 0, sizeof(*r));
    bind_i64(&r->b[0], &v->id);
    bind_i64(&r->b[1], &v->shop_id);
    bind_str_out(&r->b[2], v->title, sizeof(v->title), &r->len[2]);
    bind_str_out(&r->b[3], v->sub_title, sizeof(v->sub_title), &r->len[3]);
    bind_str_out(&r->b[4], v->rules, sizeof(v->rules), &r->len[4]);
    bind_i64(&r->b[5], &v->pay_value);
    bind_i64(&r->b[6], &v->actual_value);
    bind_i64(&r->b[7], &r->type);
    bind_i64(&r->b[8], &v->stock);
    bind_time(&r->b[9], &r->begin);
    bind_time(&r->b[10], &r->end);
    bind_time(&r->b[11], &r->created);
    bind_time(&r->b[12], &r->updated);
    bind_i64(&r->b[13], &r->mode);
    bind_i64(&r->b[14], &r->admission);
    bind_i64(&r->b[15], &r->halt);
    for (int i = 0; i < 16; i++)
        r->b[i].is_null = &r->null[i];
}

/* Finish a fetched row: terminate strings, convert times. */
static void voucher_row_finish(struct voucher_row *r, struct store_voucher *v)
{
    v->title[r->len[2] < sizeof(v->title) ? r->len[2] : 0] = '\0';
    v->sub_title[r->len[3] < sizeof(v->sub_title) ? r->len[3] : 0] = '\0';
    v->rules[r->len[4] < sizeof(v->rules) ? r->len[4] : 0] = '\0';
    v->type = r->type == VOUCHER_SECKILL ? VOUCHER_SECKILL : VOUCHER_NORMAL;
    v->mode = !r->null[13] && r->mode == PURCHASE_ASYNC ? PURCHASE_ASYNC
                                                        : PURCHASE_SYNC;
    v->admission = !r->null[14] && r->admission == ADMISSION_QUEUE
                       ? ADMISSION_QUEUE
                       : ADMISSION_OPEN;
    v->halt = r->null[15] ? HALT_NONE : (enum store_halt)r->halt;
    if (r->null[8]) {
        v->stock = v->begin_time = v->end_time = 0;
    } else {
        v->begin_time = time_to_epoch(&r->begin);
        v->end_time = time_to_epoch(&r->end);
    }
    v->created = time_to_epoch(&r->created);
    v->updated = time_to_epoch(&r->updated);
}

struct insert_args {
    struct store_voucher *v;
    const struct store_audit *audit;
    int64_t id; /* 0: the shard's AUTO_INCREMENT */
};

static int voucher_insert_once(struct store *st, void *arg)
{
    struct insert_args *a = arg;
    struct store_voucher *v = a->v;
    struct store_audit audit;
    MYSQL_BIND p[8] = {0};
    unsigned long len[4];
    int64_t type = v->type;
    MYSQL_STMT *s;
    int err;

    err = store_tx_begin_keyed(st, a->audit);
    if (err)
        return err;
    bind_i64(&p[0], &v->shop_id);
    bind_str_in(&p[1], v->title, &len[0]);
    bind_str_in(&p[2], v->sub_title, &len[1]);
    bind_str_in(&p[3], v->rules, &len[2]);
    bind_i64(&p[4], &v->pay_value);
    bind_i64(&p[5], &v->actual_value);
    bind_i64(&p[6], &type);
    if (a->id) {
        /* Sharded: the id names the shard, so it is given. */
        v->id = a->id;
        bind_i64(&p[7], &v->id);
        err = store_stmt_exec(st, STMT_VOUCHER_INSERT_ID, p, NULL, &s);
    } else {
        err = store_stmt_exec(st, STMT_VOUCHER_INSERT, p, NULL, &s);
    }
    if (err)
        goto rollback;
    if (!a->id) {
        v->id = (int64_t)mysql_stmt_insert_id(s);
        /* The table's AUTO_INCREMENT is in the sharded layout's range
         * (below): not an id to keep. */
        if (idgen_is_sharded(v->id)) {
            err = -EOVERFLOW;
            goto rollback;
        }
    }

    if (v->type == VOUCHER_SECKILL) {
        MYSQL_BIND q[8] = {0};
        int64_t mode = v->mode, admission = v->admission;
        MYSQL_TIME b, e;
        /* An async sale's stock is one counter in Redis and one row. */
        unsigned segments =
            v->mode == PURCHASE_ASYNC ? 1 : st->cfg->stock_segments;
        /* Segmented: the stock lives in the segments, the row holds 0. */
        int64_t row_stock = segments > 1 ? 0 : v->stock;

        time_from_epoch(&b, v->begin_time);
        time_from_epoch(&e, v->end_time);
        v->sale_stamp = 0;
        if (v->mode == PURCHASE_ASYNC)
            while (v->sale_stamp <= 0) {
                uint64_t x;

                randombytes_buf(&x, sizeof(x));
                v->sale_stamp = (int64_t)(x >> 1);
            }
        bind_i64(&q[0], &v->id);
        bind_i64(&q[1], &row_stock);
        bind_i64(&q[2], &v->stock);
        bind_time(&q[3], &b);
        bind_time(&q[4], &e);
        bind_i64(&q[5], &mode);
        if (v->sale_stamp)
            bind_i64(&q[6], &v->sale_stamp);
        else
            q[6].buffer_type = MYSQL_TYPE_NULL;
        bind_i64(&q[7], &admission);
        err = store_stmt_exec(st, STMT_SECKILL_INSERT, q, NULL, &s);
        if (err)
            goto rollback;
        for (unsigned i = 0; segments > 1 && i < segments; i++) {
            int64_t seg = i, stock = v->stock / segments +
                                     ((int64_t)i < v->stock % segments);

            memset(q, 0, sizeof(q));
            bind_i64(&q[0], &v->id);
            bind_i64(&q[1], &seg);
            bind_i64(&q[2], &stock);
            err = store_stmt_exec(st, STMT_SEGMENT_INSERT, q, NULL, &s);
            if (err)
                goto rollback;
        }
    }
    if (a->audit) {
        audit = *a->audit;
        audit.target_id = v->id;
        err = store_audit_add(st, &audit);
        if (err)
            goto rollback;
    }
    err = store_tx_commit(st);
    if (err)
        return err;
    if (v->type == VOUCHER_SECKILL && v->mode == PURCHASE_SYNC &&
        st->cfg->stock_segments > 1)
        log_info("voucher stock split into segments", "voucher=%lld n=%u",
                 (long long)v->id, st->cfg->stock_segments);
    return 0;

rollback:
    if (st->my)
        mysql_rollback(st->my);
    return err;
}

/* The shard the next voucher this process makes goes to. */
static atomic_uint next_shard;

int store_voucher_insert(struct store *st, struct store_voucher *v,
                         const struct store_audit *audit)
{
    struct insert_args a = {v, audit, 0};
    unsigned n = store_shard_count(st), shard;
    struct redis_link *l;
    int64_t wid;
    int err;

    if (n <= 1) {
        err = store_retry(st, voucher_insert_once, &a);
        if (err != -EOVERFLOW)
            return err;
        /*
         * The vouchers' AUTO_INCREMENT is past 2^62: the database was
         * shard 0 of sharded sales, whose ids (inserted as they are) push
         * it there. Its next value would decode as a sharded id of
         * whatever shard its low bits say, and be looked for there once
         * sales are sharded again: a sharded id of shard 0 instead.
         */
        shard = 0;
    } else {
        /*
         * Sharded: the shards in turn (each process its own turn, so
         * several instances spread new vouchers evenly too), and an id
         * from the ID worker that names the shard (AUTO_INCREMENT would
         * repeat across shards).
         */
        shard = atomic_fetch_add(&next_shard, 1) % n;
        /* With an Idempotency-Key, its own shard: a retry of the create
         * finds the key where the first one wrote it. */
        if (audit && audit->idem)
            shard = store_idem_shard(audit->idem, n);
    }
    l = store_redis_link(st);
    err = l ? idgen_next(l, "voucher", &wid) : -ECONNRESET;
    if (!err)
        err = idgen_shard_compose(wid, shard, &a.id);
    if (err == -ECONNRESET || err == -ETIMEDOUT)
        return -ENOTCONN;
    if (err)
        return -EIO;
    st = store_shard(st, shard);
    err = store_retry(st, voucher_insert_once, &a);
    if (err == -EEXIST)
        idgen_discard("voucher"); /* the block is suspect; nothing made */
    return store_outbox_flush(st, err);
}

/* Fetch context of the voucher SELECTs: one bound row, copied out. */
struct voucher_fetch {
    struct voucher_row row;
    struct store_voucher *one;   /* the bound buffers */
    struct store_voucher *items; /* NULL: keep only the one row */
};

static void voucher_fetched(void *ctx, size_t i)
{
    struct voucher_fetch *f = ctx;

    voucher_row_finish(&f->row, f->one);
    if (f->items)
        f->items[i] = *f->one;
}

struct get_args {
    int64_t id;
    struct store_voucher *v;
};

static int voucher_get_once(struct store *st, void *arg)
{
    struct get_args *a = arg;
    MYSQL_BIND p[1] = {0};
    struct voucher_fetch f = {.one = a->v};
    size_t n;
    int err;

    bind_i64(&p[0], &a->id);
    voucher_row_bind(&f.row, a->v);
    err = store_stmt_rows(st, STMT_VOUCHER_GET, p, f.row.b, 1, voucher_fetched,
                          &f, &n);
    return err ? err : n ? 0 : -ENOENT;
}

int store_voucher_get_locked(struct store *st, int64_t id,
                             struct store_voucher *v)
{
    struct get_args a = {id, v};

    return voucher_get_once(store_by_id(st, id), &a);
}

int store_voucher_get_primary(struct store *st, int64_t id,
                              struct store_voucher *v)
{
    struct get_args a = {id, v};

    return store_retry(store_by_id(st, id), voucher_get_once, &a);
}

int store_voucher_get(struct store *st, int64_t id, struct store_voucher *v)
{
    struct get_args a = {id, v};
    struct store *r;
    int err;

    st = store_by_id(st, id);
    r = store_reader(st);
    if (r != st) {
        err = store_retry(r, voucher_get_once, &a);
        store_reader_done(st, r, err);
        /* Not there may mean not replicated yet: the primary decides. */
        if (err == 0)
            return 0;
    }
    err = store_retry(st, voucher_get_once, &a);
    store_reader_done(st, st, err);
    return err;
}

struct list_args {
    int64_t shop_id;
    int64_t before; /* ids below this */
    int64_t limit;
    struct store_voucher **items;
    size_t *count;
};

static int voucher_list_once(struct store *st, void *arg)
{
    struct list_args *a = arg;
    MYSQL_BIND p[3] = {0};
    struct store_voucher *one = xmalloc(sizeof(*one));
    struct voucher_fetch f = {.one = one};
    int err;

    if (a->shop_id > 0) {
        bind_i64(&p[0], &a->shop_id);
        bind_i64(&p[1], &a->before);
        bind_i64(&p[2], &a->limit);
    } else {
        bind_i64(&p[0], &a->before);
        bind_i64(&p[1], &a->limit);
    }
    voucher_row_bind(&f.row, one);
    f.items = xcalloc((size_t)a->limit, sizeof(*f.items));
    err = store_stmt_rows(
        st, a->shop_id > 0 ? STMT_VOUCHER_LIST_SHOP : STMT_VOUCHER_LIST_ALL, p,
        f.row.b, (size_t)a->limit, voucher_fetched, &f, a->count);
    free(one);
    if (*a->count == 0) {
        free(f.items);
        f.items = NULL;
    }
    *a->items = f.items;
    return err;
}

/* Run a list (voucher_list_once(), sales_list_once()) on the replica
 * when it is usable, else (or after its failure) on the primary. */
static int list_read(struct store *st, int (*once)(struct store *, void *),
                     struct list_args *a)
{
    struct store *r = store_reader(st);
    int err;

    if (r != st) {
        err = store_retry(r, once, a);
        store_reader_done(st, r, err);
        if (err == 0)
            return 0;
        free(*a->items);
        *a->items = NULL;
        *a->count = 0;
    }
    err = store_retry(st, once, a);
    store_reader_done(st, st, err);
    return err;
}

/*
 * Run a list on every shard, one after the other, and gather the rows
 * into *a->items (*a->count of them, unsorted): at most the limit of
 * each shard's. One shard: list_read() as it is.
 */
static int list_all(struct store *st, int (*once)(struct store *, void *),
                    struct list_args *a)
{
    unsigned ns = store_shard_count(st);
    struct store_voucher **items = a->items, *all = NULL;
    size_t *count = a->count, nall = 0;
    int err = 0;

    if (ns <= 1)
        return list_read(st, once, a);
    for (unsigned i = 0; i < ns && !err; i++) {
        struct store_voucher *got = NULL;
        size_t n = 0;

        a->items = &got;
        a->count = &n;
        err = list_read(store_shard(st, i), once, a);
        if (!err && n) {
            all = xrealloc(all, (nall + n) * sizeof(*all));
            memcpy(all + nall, got, n * sizeof(*all));
            nall += n;
        }
        free(got);
    }
    a->items = items;
    a->count = count;
    if (err || nall == 0) {
        free(all);
        return err;
    }
    *items = all;
    *count = nall;
    return 0;
}

static int voucher_newer_first(const void *x, const void *y)
{
    int64_t a = ((const struct store_voucher *)x)->id;
    int64_t b = ((const struct store_voucher *)y)->id;

    return a > b ? -1 : a < b;
}

int store_voucher_list(struct store *st, int64_t shop_id, int64_t before,
                       unsigned limit, struct store_voucher **items,
                       size_t *count)
{
    struct list_args a = {shop_id, before > 0 ? before : INT64_MAX, limit,
                          items, count};
    int err;

    *items = NULL;
    *count = 0;
    if (limit < 1 || limit > STORE_LIST_MAX)
        return -EINVAL;
    err = list_all(st, voucher_list_once, &a);
    /* Several shards: newest first (sharded ids sort by time), the
     * newest limit of them. */
    if (!err && store_shard_count(st) > 1 && *count) {
        qsort(*items, *count, sizeof(**items), voucher_newer_first);
        if (*count > limit)
            *count = limit;
    }
    return err;
}

/* The sales list reuses list_args: shop_id is the time "now" (epoch s),
 * before the end of the window, limit each part's most. */
static int sales_list_once(struct store *st, void *arg)
{
    struct list_args *a = arg;
    MYSQL_BIND p[6] = {0};
    struct store_voucher *one = xmalloc(sizeof(*one));
    struct voucher_fetch f = {.one = one};
    MYSQL_TIME now, until;
    int err;

    time_from_epoch(&now, a->shop_id);
    time_from_epoch(&until, a->before);
    bind_time(&p[0], &now);
    bind_time(&p[1], &now);
    bind_i64(&p[2], &a->limit);
    bind_time(&p[3], &now);
    bind_time(&p[4], &until);
    bind_i64(&p[5], &a->limit);
    voucher_row_bind(&f.row, one);
    f.items = xcalloc(2 * (size_t)a->limit, sizeof(*f.items));
    err = store_stmt_rows(st, STMT_SALES_LIST, p, f.row.b, 2 * (size_t)a->limit,
                          voucher_fetched, &f, a->count);
    free(one);
    if (*a->count == 0) {
        free(f.items);
        f.items = NULL;
    }
    *a->items = f.items;
    return err;
}

static int sale_ending_first(const void *x, const void *y)
{
    const struct store_voucher *a = x, *b = y;

    if (a->end_time != b->end_time)
        return a->end_time < b->end_time ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int sale_beginning_first(const void *x, const void *y)
{
    const struct store_voucher *a = x, *b = y;

    if (a->begin_time != b->begin_time)
        return a->begin_time < b->begin_time ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int store_sales_list(struct store *st, int64_t now_s, int64_t until_s,
                     unsigned max, struct store_voucher **items, size_t *count)
{
    struct list_args a = {now_s, until_s, max, items, count};
    struct store_voucher *v;
    size_t on = 0, later;
    int err;

    *items = NULL;
    *count = 0;
    if (max < 1)
        return -EINVAL;
    err = list_all(st, sales_list_once, &a);
    if (err || store_shard_count(st) <= 1 || *count == 0)
        return err;
    /* Several shards: as the statement picks on one, the max sales on
     * ending soonest, then the max ahead beginning soonest. */
    v = *items;
    for (size_t i = 0; i < *count; i++)
        if (v[i].begin_time <= now_s) {
            struct store_voucher t = v[on];

            v[on++] = v[i];
            v[i] = t;
        }
    later = *count - on;
    qsort(v, on, sizeof(*v), sale_ending_first);
    qsort(v + on, later, sizeof(*v), sale_beginning_first);
    if (on > max) {
        memmove(v + max, v + on, later * sizeof(*v));
        on = max;
    }
    *count = on + (later < max ? later : max);
    return 0;
}

struct seckill_args {
    int64_t id;
    struct store_seckill *s;
};

static int seckill_get_once(struct store *st, void *arg)
{
    struct seckill_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[7] = {0};
    char null[7] = {0};
    int64_t type = 0, mode = 0, admission = 0, halt = 0;
    MYSQL_TIME b, e;
    size_t n;
    int err;

    bind_i64(&p[0], &a->id);
    bind_i64(&r[0], &type);
    bind_i64(&r[1], &a->s->stock);
    bind_time(&r[2], &b);
    bind_time(&r[3], &e);
    bind_i64(&r[4], &mode);
    bind_i64(&r[5], &admission);
    bind_i64(&r[6], &halt);
    for (int i = 0; i < 7; i++)
        r[i].is_null = &null[i];
    err = store_stmt_rows(st, STMT_SECKILL_GET, p, r, 1, NULL, NULL, &n);
    if (err)
        return err;
    if (n == 0)
        return -ENOENT;
    /* A seckill voucher without its stock row reads as normal. */
    a->s->type =
        type == VOUCHER_SECKILL && !null[1] ? VOUCHER_SECKILL : VOUCHER_NORMAL;
    a->s->mode =
        !null[4] && mode == PURCHASE_ASYNC ? PURCHASE_ASYNC : PURCHASE_SYNC;
    a->s->admission = !null[5] && admission == ADMISSION_QUEUE ? ADMISSION_QUEUE
                                                               : ADMISSION_OPEN;
    a->s->halt = null[6] ? HALT_NONE : (enum store_halt)halt;
    if (a->s->type == VOUCHER_SECKILL) {
        a->s->begin_time = time_to_epoch(&b);
        a->s->end_time = time_to_epoch(&e);
    } else {
        a->s->stock = a->s->begin_time = a->s->end_time = 0;
    }
    return 0;
}

int store_seckill_get(struct store *st, int64_t voucher_id,
                      struct store_seckill *s)
{
    struct seckill_args a = {voucher_id, s};
    return store_retry(store_by_id(st, voucher_id), seckill_get_once, &a);
}
