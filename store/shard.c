/*
 * shard.c - sales sharded over several MySQL primaries (store.h, "shards"):
 * which shard an id lives on, and the rows of shard 0 (refunds, audit
 * records) that a transaction of another shard decided on. The thread's
 * store of each shard is conn.c's.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
 * after its commit. */
int store_refund_insert(struct store *st, int64_t id, const char *txn,
                        int64_t amount, int64_t reason)
{
    MYSQL_BIND p[4] = {0};
    unsigned long len;
    MYSQL_STMT *s;

    if (st->home) {
        struct store_deferred d = {.is_refund = true,
                                   .order_id = id,
                                   .amount = amount,
                                   .reason = reason,
                                   .txn = xstrdup(txn)};

        store_deferred_add(st, &d);
        return 0;
    }
    bind_i64(&p[0], &id);
    bind_str_in(&p[1], txn, &len);
    bind_i64(&p[2], &amount);
    bind_i64(&p[3], &reason);
    return store_stmt_exec(st, STMT_REFUND_INSERT, p, NULL, &s);
}

int store_deferred_flush(struct store *st, int err)
{
    struct store *h = store_home(st);

    for (size_t i = 0; i < st->ndeferred && !err; i++) {
        struct store_deferred *d = &st->deferred[i];
        /* Autocommitted, one by one: each row stands on its own. */
        int e = d->is_refund ? store_refund_insert(h, d->order_id, d->txn,
                                                   d->amount, d->reason)
                             : store_audit_add(h, &d->audit);

        if (e && d->is_refund)
            log_error("refund lost: shard 0 refused it after the order's "
                      "shard committed",
                      "shard=%u order=%lld txn=\"%s\" amount=%lld "
                      "reason=%lld err=%d",
                      st->shard_no, (long long)d->order_id, d->txn,
                      (long long)d->amount, (long long)d->reason, e);
        else if (e)
            log_error("audit record lost: shard 0 refused it after the "
                      "change's shard committed",
                      "shard=%u action=%s target=%lld err=%d", st->shard_no,
                      d->audit.action, (long long)d->audit.target_id, e);
    }
    store_deferred_drop(st);
    return err;
}
