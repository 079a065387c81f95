/*
 * seckill.c - POST /api/vouchers/{id}/seckill, the purchase:
 *
 *   1. read the voucher: exists, is a seckill voucher, on sale now, stock
 *      left (cheap rejections before any lock). Answered from the voucher
 *      cache (vcache.c) when it knows, before the rate limiter, so that a
 *      sold-out voucher costs no I/O; else read from MySQL;
 *   2. take the user's lock lock:order:{userId} from the lock backend
 *      (SECKILL_LOCK_URL; fail fast: a second concurrent request of the
 *      same user gets 429 BUSY);
 *   3. take an order id from the Redis ID worker (idgen/idgen.h: unique
 *      also across a Redis restart that loses its counter; usually from
 *      the process's block of reserved ids, without a round trip);
 *   4. one MySQL transaction: no order yet for (user, voucher), insert the
 *      order, CAS the stock, commit (store_order_purchase; concurrent
 *      purchases of the voucher share one transaction, SECKILL_BATCH_MAX);
 *   5. release the lock on every path, then reply.
 *
 * MySQL is the source of truth: the lock only keeps one user's requests
 * from racing; the unique key and the CAS keep the data right even when a
 * lock expires early.
 */
#include "handlers/internal.h"

#include <errno.h>
#include <stdio.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/util.h"
#include "idgen/idgen.h"
#include "lock/lock.h"

/*
 * Step 1's verdict on what is known about the voucher (from the cache when
 * cached, else just read from MySQL). Returns 0 to go on.
 */
static unsigned verdict_or_reply(struct request *req,
                                 const struct vcache_voucher *v, int64_t now_s,
                                 bool cached)
{
    if (!v->found)
        return req_error(req, ERR_NOT_FOUND, "no voucher with this id");
    if (v->type != VOUCHER_SECKILL)
        return req_error(req, ERR_NOT_SECKILL, NULL);
    if (now_s < v->begin_time)
        return req_error(req, ERR_NOT_STARTED, NULL);
    if (now_s >= v->end_time)
        return req_error(req, ERR_ENDED, NULL);
    if (v->sold_out) {
        metrics_count(cached ? METRIC_PURCHASE_SOLD_OUT_CACHED
                             : METRIC_PURCHASE_SOLD_OUT,
                      1);
        return req_error(req, ERR_SOLD_OUT, NULL);
    }
    return 0;
}

/* Step 1 when the cache could not answer: read the voucher row, remember
 * it (gen from vcache_entry_get), answer from it. Returns 0 to go on. */
static unsigned precheck_or_reply(struct request *req, int64_t now_s,
                                  uint64_t gen)
{
    struct vcache_voucher v;
    struct store_seckill s;
    int err = store_seckill_get(req->st, req->id, &s);

    if (err && err != -ENOENT)
        return req_backend_error(req, err, "seckill_get");
    vcache_voucher_from_row(&v, err ? NULL : &s);
    vcache_entry_put(req->vcache, req->id, &v, gen);
    return verdict_or_reply(req, &v, now_s, false);
}

/* An id the ID worker handed out before (its counter was lost) is
 * refused by the primary key; a fresh id is tried this many times. */
#define ID_ATTEMPTS 3

/* Steps 3 and 4, under the lock. A sold-out outcome also sets the
 * voucher's flag in the cache (gen: the cache generation read at step 1). */
static unsigned buy_locked(struct request *req, uint64_t gen)
{
    enum store_purchase outcome;
    int64_t order_id;
    int err = -EEXIST;

    for (int i = 0; i < ID_ATTEMPTS && err == -EEXIST; i++) {
        redisContext *rc = store_redis(req->st);
        if (!rc)
            return req_backend_error(req, -ENOTCONN, "idgen");
        err = idgen_next(rc, "order", &order_id);
        if (err)
            return req_backend_error(req, err, "idgen");
        err = store_order_purchase(req->st, order_id, req->auth.user_id,
                                   req->id, &outcome);
        /* The rest of that id's block is suspect too: reserve anew. */
        if (err == -EEXIST)
            idgen_discard("order");
    }
    if (err)
        return req_backend_error(req, err, "purchase");
    switch (outcome) {
    case STORE_PURCHASE_SOLD_OUT:
        vcache_sold_out_set(req->vcache, req->id, gen);
        return req_error(req, ERR_SOLD_OUT, NULL);
    case STORE_PURCHASE_DUPLICATE:
        return req_error(req, ERR_ALREADY_PURCHASED, NULL);
    case STORE_PURCHASE_OK:
        break;
    }
    return req_reply(req, 201,
                     json_pack("{s:o}", "orderId", json_id(order_id)));
}

unsigned voucher_seckill_post(struct request *req)
{
    int64_t now_s = util_now_ms() / 1000;
    struct vcache_voucher known;
    bool cached = false;
    uint64_t gen = 0;
    char name[64];
    struct lock *lock = NULL;
    enum lock_status ls;
    unsigned status;
    int err, held;

    /* Step 1 from memory first, before the rate limiter: the crowd that
     * keeps buying a sold-out (or not started, ended, unknown) voucher is
     * refused without a MySQL or Redis round trip. Only with a valid
     * token, so that 401s still count against the address's bucket. */
    if (req_auth(req) == 0) {
        cached = vcache_entry_get(req->vcache, req->id, &known, &gen);
        if (cached && (status = verdict_or_reply(req, &known, now_s, true)))
            return status;
    }
    if ((status = ratelimit_or_reply(req)) ||
        (status = req_user_or_reply(req)) ||
        (!cached && (status = precheck_or_reply(req, now_s, gen))))
        return status;

    /* Step 2: fail fast (no wait), with a fixed lease. */
    snprintf(name, sizeof(name), "lock:order:%lld",
             (long long)req->auth.user_id);
    err = lock_new(req->locks, name, &lock);
    if (!err)
        err = lock_acquire(lock, 0, req->cfg->lock_ttl_ms, &ls);
    if (err) {
        metrics_count(METRIC_LOCK_ERROR, 1);
        status = req_backend_error(req, err, "lock_acquire");
        goto out;
    }
    if (ls == LOCK_BUSY) {
        metrics_count(METRIC_LOCK_BUSY, 1);
        status = req_error(req, ERR_BUSY, NULL);
        goto out;
    }
    metrics_count(METRIC_LOCK_ACQUIRED, 1);

    FAILPOINT("after_lock");
    status = buy_locked(req, gen);

    /* Step 5, whatever happened above. If the lock backend is gone the
     * lock ends with its lease or session; the reply stands, since MySQL
     * holds the outcome. */
    err = lock_release(lock, &held);
    if (err)
        log_warn("lock release failed", "name=%s err=%d", name, err);
    else if (!held)
        log_warn("lock expired before release", "name=%s lease_ms=%u", name,
                 req->cfg->lock_ttl_ms);
out:
    lock_free(lock);
    return status;
}
