/*
 * batch.c - what a batch of purchases does, in each mode (the engine's
 * batch functions, see internal.h). The engine hands a worker's batch of
 * one voucher's purchases here, in arrival order:
 *
 *   sync:  1. the buyers' locks for the voucher (sale_lock_name()), in
 *             one pipelined round trip (lock_acquire_many: a buyer
 *             whose lock is held already, say by a second tab, is
 *             BUSY);
 *          2. an order id for each (idgen: usually from the reserved
 *             block);
 *          3. one MySQL transaction for the batch (store_purchase_batch:
 *             the multi-row INSERT and the stock CAS, or one per
 *             purchase);
 *          4. the locks released, in one round trip.
 *   async: 1. an order id for each;
 *          2. one Redis script that decides for every buyer at once
 *             (async_purchase); no lock, since the script checks the
 *             buyer set atomically. On a Redis Cluster whose slot of
 *             the sale is moving, the script is sent again until the
 *             batch's first deadline.
 */
#include "sale/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "async/async.h"
#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/util.h"
#include "idgen/idgen.h"

/* An order id already taken (the ID worker's counter was lost) is retried
 * with a fresh one this many times. */
#define ID_ATTEMPTS 3

static struct sale_purchase *purchase_of(struct engine_purchase *p)
{
    return (struct sale_purchase *)((char *)p -
                                    offsetof(struct sale_purchase, p));
}

static void settle(struct sale_purchase *m, enum sale_outcome o, int err)
{
    m->outcome = o;
    m->err = err;
    m->settled = true;
}

void sale_lock_name(char buf[SALE_LOCK_NAME_LEN], int64_t voucher_id,
                    int64_t user_id)
{
    snprintf(buf, SALE_LOCK_NAME_LEN, "lock:order:{v:%lld}:%lld",
             (long long)voucher_id, (long long)user_id);
}

/* Take the locks of the members still open, in one round trip. */
static void locks_take(struct sale *s, int64_t voucher_id,
                       struct sale_purchase **m, size_t n)
{
    struct lock **ls = xcalloc(n, sizeof(*ls));
    struct sale_purchase **who = xcalloc(n, sizeof(*who));
    enum lock_status *st = xcalloc(n, sizeof(*st));
    int *err = xcalloc(n, sizeof(*err));
    size_t k = 0;
    char name[SALE_LOCK_NAME_LEN];

    for (size_t i = 0; i < n; i++) {
        if (m[i]->settled)
            continue;
        sale_lock_name(name, voucher_id, m[i]->buy->user_id);
        int rc = lock_new(s->cfg.locks, name, &m[i]->lock);
        if (rc) {
            settle(m[i], SALE_FAILED, rc);
            continue;
        }
        ls[k] = m[i]->lock;
        who[k++] = m[i];
    }
    if (lock_acquire_many(ls, k, s->cfg.lock_ttl_ms, st, err))
        for (size_t j = 0; j < k; j++)
            err[j] = -EINVAL;
    for (size_t j = 0; j < k; j++) {
        struct sale_purchase *w = who[j];

        if (err[j]) {
            metrics_count(METRIC_LOCK_ERROR, 1);
            settle(w, SALE_FAILED, err[j]);
        } else if (st[j] == LOCK_BUSY) {
            metrics_count(METRIC_LOCK_BUSY, 1);
            settle(w, SALE_BUSY, 0);
        } else {
            metrics_count(METRIC_LOCK_ACQUIRED, 1);
        }
        if (err[j] || st[j] != LOCK_ACQUIRED) {
            lock_free(w->lock);
            w->lock = NULL;
        }
    }
    free(err);
    free(st);
    free(who);
    free(ls);
}

/* Release the locks taken, in one round trip. The outcomes stand: if the
 * lock backend is gone, each lock ends with its lease. */
static void locks_release(struct sale_purchase **m, size_t n)
{
    struct lock **ls = xcalloc(n, sizeof(*ls));
    int *held = xcalloc(n, sizeof(*held));
    int *err = xcalloc(n, sizeof(*err));
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        if (m[i]->lock)
            ls[k++] = m[i]->lock;
    if (k && lock_release_many(ls, k, held, err) == 0) {
        for (size_t j = 0; j < k; j++) {
            if (err[j])
                log_warn("lock release failed", "name=%s err=%d",
                         lock_name(ls[j]), err[j]);
            else if (!held[j])
                log_warn("lock expired before release", "name=%s",
                         lock_name(ls[j]));
        }
    }
    for (size_t i = 0; i < n; i++) {
        /* Never still held here; lock_free() would release it alone. */
        lock_free(m[i]->lock);
        m[i]->lock = NULL;
    }
    free(err);
    free(held);
    free(ls);
}

/* An order id for every member still open without one: on voucher_id's
 * shard when sales are sharded. */
static void ids_take(struct store *st, int64_t voucher_id,
                     struct sale_purchase **m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct redis_link *l;
        int err;

        if (m[i]->settled || m[i]->item.order_id)
            continue;
        l = store_redis_link(st);
        err = l ? idgen_next(l, "order", &m[i]->item.order_id) : -ENOTCONN;
        if (!err)
            err = store_order_id_place(st, voucher_id, &m[i]->item.order_id);
        if (err)
            settle(m[i], SALE_FAILED, err);
    }
}

/* The store's answer for every member that reached the transaction; a
 * member whose order id was taken already retries with a fresh one. */
static void transact(struct store *st, int64_t voucher_id,
                     struct sale_purchase **m, size_t n)
{
    static const enum sale_outcome map[] = {
        [STORE_PURCHASE_OK] = SALE_ORDERED,
        [STORE_PURCHASE_SOLD_OUT] = SALE_SOLD_OUT,
        [STORE_PURCHASE_DUPLICATE] = SALE_DUPLICATE,
        [STORE_PURCHASE_PAUSED] = SALE_PAUSED,
        [STORE_PURCHASE_STOPPED] = SALE_ENDED,
    };
    struct store_purchase_item **items = xcalloc(n, sizeof(*items));

    for (int attempt = 0; attempt < ID_ATTEMPTS; attempt++) {
        size_t k = 0, clashes = 0;

        ids_take(st, voucher_id, m, n);
        for (size_t i = 0; i < n; i++) {
            if (m[i]->settled)
                continue;
            m[i]->item.user_id = m[i]->buy->user_id;
            m[i]->item.deadline_ms = m[i]->p.deadline_ms;
            items[k++] = &m[i]->item;
        }
        if (k == 0)
            break;
        store_purchase_batch(st, voucher_id, items, k);
        for (size_t i = 0; i < n; i++) {
            struct sale_purchase *w = m[i];

            if (w->settled)
                continue;
            if (w->item.err == -EEXIST && attempt + 1 < ID_ATTEMPTS) {
                w->item.order_id = 0; /* nothing written: a fresh id */
                clashes++;
                continue;
            }
            if (w->item.err == -ETIME)
                metrics_count(METRIC_PURCHASE_EXPIRED, 1);
            if (w->item.err)
                settle(w, SALE_FAILED, w->item.err);
            else
                settle(w, map[w->item.outcome], 0);
        }
        if (!clashes)
            break;
        /* The rest of that block of ids is suspect too. */
        idgen_discard("order");
    }
    free(items);
}

void sale__batch_sync(struct store *st, int64_t voucher_id,
                      struct engine_purchase **ps, size_t n)
{
    struct sale_purchase *m[ENGINE_BATCH_MAX];
    struct sale *s = purchase_of(ps[0])->sale;

    for (size_t i = 0; i < n; i++)
        m[i] = purchase_of(ps[i]);
    locks_take(s, voucher_id, m, n);
    FAILPOINT("after_lock");
    transact(st, voucher_id, m, n);
    locks_release(m, n);
    for (size_t i = 0; i < n; i++)
        if (!m[i]->settled)
            settle(m[i], SALE_FAILED, -EIO); /* cannot happen */
}

/*
 * An async sale's members: one Redis script sells to all of them (the
 * window, the buyer set and the stock, in Redis), and queues each order on
 * the voucher's stream for the writer (async/async.h).
 */
static void sell_async(struct sale *s, struct store *st, int64_t voucher_id,
                       struct sale_purchase **m, size_t n)
{
    static const enum sale_outcome map[] = {
        [ASYNC_OK] = SALE_PENDING,
        [ASYNC_SOLD_OUT] = SALE_SOLD_OUT,
        [ASYNC_DUPLICATE] = SALE_DUPLICATE,
        [ASYNC_NOT_STARTED] = SALE_NOT_STARTED,
        [ASYNC_ENDED] = SALE_ENDED,
        [ASYNC_BACKLOG] = SALE_BACKLOG,
        [ASYNC_UNCONFIRMED] = SALE_UNCONFIRMED,
        [ASYNC_PAUSED] = SALE_PAUSED,
    };
    struct async_confirm confirm;
    int64_t *ids = xcalloc(n, sizeof(*ids)), *users = xcalloc(n, sizeof(*ids));
    enum async_outcome *out = xcalloc(n, sizeof(*out));
    struct sale_purchase **who = xcalloc(n, sizeof(*who));
    struct redis_link *rl;
    int64_t deadline = 0;
    size_t k = 0;
    int err;

    ids_take(st, voucher_id, m, n);
    for (size_t i = 0; i < n; i++) {
        if (m[i]->settled)
            continue;
        if (FAILPOINT_FAILS("async_sale_drop")) { /* a test build's 202 lost */
            settle(m[i], SALE_PENDING, 0);
            continue;
        }
        ids[k] = m[i]->item.order_id;
        users[k] = m[i]->buy->user_id;
        /* The batch is answered at once: by its first deadline. */
        if (!deadline || m[i]->p.deadline_ms < deadline)
            deadline = m[i]->p.deadline_ms;
        who[k++] = m[i];
    }
    rl = k ? store_redis_link(st) : NULL;
    /* Sold only once the primary's replicas have the batch too. */
    async_confirm_get(s->cfg.async, &confirm);
    err = !k   ? 0
          : rl ? async_purchase(rl, voucher_id, s->cfg.async_backlog_max, ids,
                                users, k, &confirm, deadline, out)
               : -ENOTCONN;
    FAILPOINT("async_after_script");
    if (!err)
        async_voucher_hint(s->cfg.async, voucher_id);
    for (size_t j = 0; j < k; j++) {
        struct sale_purchase *w = who[j];

        if (err) {
            /* Never sent (no connection to the sale's primary, refused
             * credentials), or refused by Redis (an error reply, a slot
             * move that outlasted the budget): nothing sold, a retry is
             * safe. A connection that failed under the script: unknown. */
            settle(w, SALE_FAILED,
                   err == -ENOTCONN || err == -EACCES || err == -EAGAIN
                       ? err
                       : -EINPROGRESS);
        } else if (out[j] == ASYNC_NOT_READY) {
            settle(w, SALE_FAILED, -EAGAIN);
        } else {
            settle(w, map[out[j]], 0);
            if (out[j] == ASYNC_OK)
                metrics_count(METRIC_ASYNC_ACCEPTED, 1);
            else if (out[j] == ASYNC_UNCONFIRMED)
                metrics_count(METRIC_ASYNC_UNCONFIRMED, 1);
        }
    }
    free(who);
    free(out);
    free(users);
    free(ids);
}

void sale__batch_async(struct store *st, int64_t voucher_id,
                       struct engine_purchase **ps, size_t n)
{
    struct sale_purchase *m[ENGINE_BATCH_MAX];
    struct sale *s = purchase_of(ps[0])->sale;

    for (size_t i = 0; i < n; i++)
        m[i] = purchase_of(ps[i]);
    if (!async_may_sell(s->cfg.async)) {
        /* Its Redis may lose acknowledged writes: it sells no async
         * voucher. */
        for (size_t i = 0; i < n; i++)
            settle(m[i], SALE_FAILED, -EPERM);
        return;
    }
    sell_async(s, st, voucher_id, m, n);
    for (size_t i = 0; i < n; i++)
        if (!m[i]->settled)
            settle(m[i], SALE_FAILED, -EIO); /* cannot happen */
}
