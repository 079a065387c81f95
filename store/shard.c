/*
 * shard.c - sales sharded over several MySQL primaries (store.h, "shards"):
 * which shard an id lives on, and the rows of shard 0 (refunds, audit
 * records) that a transaction of another shard decided on: written into
 * that shard's outbox (the table shard_outbox) in the transaction itself,
 * so that they commit with it, and moved to shard 0 after the commit, or
 * by the expiry thread's sweep after a crash; and the reservations of
 * payments' transaction ids (the table payment_txns), which make a
 * provider's transaction pay one order across the shards. The thread's
 * store of each shard is conn.c's.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/util.h"
#include "idgen/idgen.h"

unsigned store_shard_of(const struct store *st, int64_t id)
{
    unsigned n = store_shard_count(st), s;

    if (n <= 1)
        return 0;
    s = idgen_shard_of(id);
    return s < n ? s : 0;
}

int store_order_id_place(const struct store *st, int64_t voucher_id,
                         int64_t *id)
{
    if (store_shard_count(st) <= 1)
        return 0;
    return idgen_shard_compose(*id, store_shard_of(st, voucher_id), id);
}

struct store *store_by_id(struct store *st, int64_t id)
{
    return store_shard(st, store_shard_of(st, id));
}

/* A refused payment (txn of amount for order id) to give back, in the
 * refusing transaction; refunds are shard 0's, so from another shard
 * into its outbox. */
int store_refund_insert(struct store *st, int64_t id, const char *txn,
                        int64_t amount, int64_t reason)
{
    MYSQL_BIND p[4] = {0};
    unsigned long len;
    MYSQL_STMT *s;
    int err;

    bind_i64(&p[0], &id);
    bind_str_in(&p[1], txn, &len);
    bind_i64(&p[2], &amount);
    bind_i64(&p[3], &reason);
    if (!st->home)
        return store_stmt_exec(st, STMT_REFUND_INSERT, p, NULL, &s);
    err = store_stmt_exec(st, STMT_OUTBOX_REFUND, p, NULL, &s);
    st->outbox_written |= !err;
    return err;
}

/* ---- a payment's transaction id, reserved for its order ---- */

static const enum stmt_id reserve_stmt[] = {
    STMT_TXNS_RESERVE_1,  STMT_TXNS_RESERVE_2,  STMT_TXNS_RESERVE_4,
    STMT_TXNS_RESERVE_8,  STMT_TXNS_RESERVE_16, STMT_TXNS_RESERVE_32,
    STMT_TXNS_RESERVE_64,
};

static const enum stmt_id owner_stmt[] = {
    STMT_TXNS_OWNER_1,  STMT_TXNS_OWNER_2,  STMT_TXNS_OWNER_4,
    STMT_TXNS_OWNER_8,  STMT_TXNS_OWNER_16, STMT_TXNS_OWNER_32,
    STMT_TXNS_OWNER_64,
};

/* The reservations of one store_txns_reserve() call, by txn, then by
 * their place in the caller's array. */
struct reserve {
    struct txn_reservation **by_txn;
    size_t n;
};

static int by_txn_then_place(const void *x, const void *y)
{
    const struct txn_reservation *a = *(struct txn_reservation *const *)x;
    const struct txn_reservation *b = *(struct txn_reservation *const *)y;
    int c = strcmp(a->txn, b->txn);

    return c ? c : (a > b) - (a < b);
}

/* Fetch context of the owners' read: a row, and the chunk it is of. */
struct owner_fetch {
    char txn[72];
    unsigned long txn_len;
    int64_t owner;
    struct txn_reservation **first;
    size_t k;
};

static void owner_fetched(void *ctx, size_t i)
{
    struct owner_fetch *f = ctx;

    (void)i;
    f->txn[f->txn_len < sizeof(f->txn) ? f->txn_len : 0] = '\0';
    for (size_t j = 0; j < f->k; j++)
        if (!strcmp(f->first[j]->txn, f->txn))
            f->first[j]->owner = f->owner;
}

/* Reserve the distinct txns of first[0..k) (k <= 64, in the order of
 * the ids, so that two reservations wait for each other's rows in one
 * order), then read whom each is reserved for. */
static int reserve_chunk(struct store *h, struct txn_reservation **first,
                         size_t k)
{
    struct owner_fetch f = {.first = first, .k = k};
    MYSQL_BIND p[2 * STMT_ROWS_MAX], r[2];
    unsigned long len[STMT_ROWS_MAX];
    unsigned lg = 0;
    MYSQL_STMT *s;
    size_t m, got;
    int err;

    while ((1u << lg) < k)
        lg++;
    m = (size_t)1 << lg;
    memset(p, 0, sizeof(p));
    for (size_t j = 0; j < m; j++) {
        size_t x = j < k ? j : k - 1;

        bind_str_in(&p[2 * j], first[x]->txn, &len[x]);
        bind_i64(&p[2 * j + 1], &first[x]->order_id);
    }
    err = store_stmt_exec(h, reserve_stmt[lg], p, NULL, &s);
    if (err)
        return err;
    memset(p, 0, sizeof(p));
    for (size_t j = 0; j < m; j++) {
        size_t x = j < k ? j : k - 1;

        bind_str_in(&p[j], first[x]->txn, &len[x]);
    }
    memset(r, 0, sizeof(r));
    bind_str_out(&r[0], f.txn, sizeof(f.txn), &f.txn_len);
    bind_i64(&r[1], &f.owner);
    err = store_stmt_rows(h, owner_stmt[lg], p, r, k, owner_fetched, &f, &got);
    for (size_t j = 0; j < k && !err; j++)
        if (first[j]->owner <= 0)
            err = -EIO; /* reserved just now: cannot happen */
    return err;
}

static int reserve_once(struct store *h, void *arg)
{
    struct reserve *a = arg;
    struct txn_reservation *first[STMT_ROWS_MAX];
    size_t k = 0;
    int err = 0;

    for (size_t i = 0; i < a->n && !err; i++) {
        a->by_txn[i]->owner = 0;
        /* The first of a txn reserves it, for its order. */
        if (i > 0 && !strcmp(a->by_txn[i]->txn, a->by_txn[i - 1]->txn))
            continue;
        first[k++] = a->by_txn[i];
        if (k == STMT_ROWS_MAX) {
            err = reserve_chunk(h, first, k);
            k = 0;
        }
    }
    if (!err && k)
        err = reserve_chunk(h, first, k);
    for (size_t i = 1; i < a->n && !err; i++)
        if (!strcmp(a->by_txn[i]->txn, a->by_txn[i - 1]->txn))
            a->by_txn[i]->owner = a->by_txn[i - 1]->owner;
    return err;
}

int store_txns_reserve(struct store *st, struct txn_reservation *r, size_t n)
{
    struct store *h = store_home(st);
    struct reserve a = {0};
    bool one = store_shard_count(st) <= 1;
    int err = 0;

    for (size_t i = 0; i < n; i++)
        r[i].owner = one && r[i].txn ? r[i].order_id : 0;
    if (one || n == 0)
        return 0;
    a.by_txn = xcalloc(n, sizeof(*a.by_txn));
    for (size_t i = 0; i < n; i++)
        if (r[i].txn)
            a.by_txn[a.n++] = &r[i];
    qsort(a.by_txn, a.n, sizeof(*a.by_txn), by_txn_then_place);
    /* On shard 0 inside the payment's transaction (no reconnect there:
     * the rest would run outside it); from another shard an operation of
     * its own, each statement its own commit. */
    if (a.n)
        err = h == st ? reserve_once(h, &a) : store_retry(h, reserve_once, &a);
    if (!err && a.n)
        FAILPOINT("pay_txn_reserved");
    free(a.by_txn);
    return err;
}

/* ---- the move from a shard's outbox to shard 0 ---- */

/* Rows a move reads at once (each holds an audit change of up to
 * STORE_AUDIT_CHANGE_MAX bytes). */
#define OUTBOX_BATCH 16

enum { OUTBOX_REFUND = 1, OUTBOX_AUDIT = 2 };

/* One row of a shard's outbox, as read. */
struct outbox_row {
    int64_t id, kind, order_id, amount, reason, admin_id, target_id;
    MYSQL_TIME created;
    char txn[72], addr[72], action[40], target_type[24];
    char change[STORE_AUDIT_CHANGE_MAX];
    char change_null;
    unsigned long len[5];
};

struct outbox_read {
    struct outbox_row *rows, one;
    MYSQL_BIND r[13];
    size_t n;
};

static void outbox_fetched(void *ctx, size_t i)
{
    struct outbox_read *o = ctx;
    struct outbox_row *r = &o->one;
    char *s[] = {r->txn, r->addr, r->action, r->target_type, r->change};
    size_t cap[] = {sizeof(r->txn), sizeof(r->addr), sizeof(r->action),
                    sizeof(r->target_type), sizeof(r->change)};

    /* The buffers hold every value the columns allow. */
    for (size_t k = 0; k < 5; k++)
        s[k][r->len[k] < cap[k] ? r->len[k] : 0] = '\0';
    o->rows[i] = *r;
}

static int outbox_list_once(struct store *st, void *arg)
{
    struct outbox_read *o = arg;
    struct outbox_row *r = &o->one;
    MYSQL_BIND p[1] = {0};
    int64_t max = OUTBOX_BATCH;

    bind_i64(&p[0], &max);
    memset(o->r, 0, sizeof(o->r));
    bind_i64(&o->r[0], &r->id);
    bind_i64(&o->r[1], &r->kind);
    bind_time(&o->r[2], &r->created);
    bind_i64(&o->r[3], &r->order_id);
    bind_str_out(&o->r[4], r->txn, sizeof(r->txn), &r->len[0]);
    bind_i64(&o->r[5], &r->amount);
    bind_i64(&o->r[6], &r->reason);
    bind_i64(&o->r[7], &r->admin_id);
    bind_str_out(&o->r[8], r->addr, sizeof(r->addr), &r->len[1]);
    bind_str_out(&o->r[9], r->action, sizeof(r->action), &r->len[2]);
    bind_str_out(&o->r[10], r->target_type, sizeof(r->target_type), &r->len[3]);
    bind_i64(&o->r[11], &r->target_id);
    bind_str_out(&o->r[12], r->change, sizeof(r->change), &r->len[4]);
    o->r[12].is_null = (my_bool *)&r->change_null;
    return store_stmt_rows(st, STMT_OUTBOX_LIST, p, o->r, OUTBOX_BATCH,
                           outbox_fetched, o, &o->n);
}

struct outbox_copy {
    struct outbox_row *row;
    int64_t shard;
};

/* Copy a row to shard 0 (h): a second copy of it changes nothing. */
static int outbox_copy_once(struct store *h, void *arg)
{
    struct outbox_copy *c = arg;
    struct outbox_row *r = c->row;
    MYSQL_BIND p[9] = {0};
    unsigned long len[4];
    MYSQL_STMT *s;

    if (r->kind == OUTBOX_REFUND) {
        bind_i64(&p[0], &r->order_id);
        bind_str_in(&p[1], r->txn, &len[0]);
        bind_i64(&p[2], &r->amount);
        bind_i64(&p[3], &r->reason);
        bind_time(&p[4], &r->created);
        return store_stmt_exec(h, STMT_REFUND_MOVE, p, NULL, &s);
    }
    bind_time(&p[0], &r->created);
    bind_i64(&p[1], &r->admin_id);
    bind_str_in(&p[2], r->addr, &len[0]);
    bind_str_in(&p[3], r->action, &len[1]);
    bind_str_in(&p[4], r->target_type, &len[2]);
    bind_i64(&p[5], &r->target_id);
    if (r->change_null)
        p[6].buffer_type = MYSQL_TYPE_NULL;
    else
        bind_str_in(&p[6], r->change, &len[3]);
    bind_i64(&p[7], &c->shard);
    bind_i64(&p[8], &r->id);
    return store_stmt_exec(h, STMT_AUDIT_MOVE, p, NULL, &s);
}

static int outbox_delete_once(struct store *st, void *arg)
{
    MYSQL_BIND p[1] = {0};
    MYSQL_STMT *s;

    bind_i64(&p[0], arg);
    return store_stmt_exec(st, STMT_OUTBOX_DELETE, p, NULL, &s);
}

int store_outbox_move(struct store *st, unsigned shard, size_t *moved)
{
    struct store *h = store_home(st), *s;
    struct outbox_read *o;
    int err;

    *moved = 0;
    if (shard == 0 || shard >= store_shard_count(h))
        return 0;
    s = store_shard(h, shard);
    o = xcalloc(1, sizeof(*o));
    o->rows = xcalloc(OUTBOX_BATCH, sizeof(*o->rows));
    err = store_retry(s, outbox_list_once, o);
    if (!err && o->n)
        FAILPOINT("shard0_rows_before_move");
    /* Each row copied, then forgotten: a crash in between copies it
     * again, which changes nothing. */
    for (size_t i = 0; i < o->n && !err; i++) {
        struct outbox_copy c = {&o->rows[i], (int64_t)shard};

        err = store_retry(h, outbox_copy_once, &c);
        if (!err)
            FAILPOINT("shard0_rows_before_forget");
        if (!err)
            err = store_retry(s, outbox_delete_once, &o->rows[i].id);
        if (!err)
            (*moved)++;
    }
    free(o->rows);
    free(o);
    return err;
}

int store_outbox_flush(struct store *st, int err)
{
    size_t n;
    int e;

    if (!st->outbox_written)
        return err;
    st->outbox_written = false;
    if (err && err != -EINPROGRESS)
        return err; /* rolled back: nothing of it is in the outbox */
    /* Oldest first, with other operations' rows: a few batches, the
     * sweep has the rest of a backlog. */
    for (int i = 0; i < 8; i++)
        if ((e = store_outbox_move(st, st->shard_no, &n)) || n < OUTBOX_BATCH)
            break;
    if (e)
        log_warn("rows of shard 0 wait in a shard's outbox",
                 "shard=%u err=%d (the expiry thread moves them later)",
                 st->shard_no, e);
    return err;
}
