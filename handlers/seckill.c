/*
 * seckill.c - POST /api/vouchers/{id}/seckill, the purchase.
 *
 * The HTTP thread only decides what it can without waiting for anyone
 * else:
 *
 *   1. read the voucher: exists, is a seckill voucher, on sale now, stock
 *      left (cheap rejections before any lock). Answered from the voucher
 *      cache (vcache.c) when it knows, before the rate limiter, so that a
 *      sold-out voucher costs no I/O. What needs a round trip (the rate
 *      limiter's Redis script, the voucher's row when the cache does not
 *      know it) runs on the I/O pool instead (req_offload());
 *   2. hand the purchase to the purchase engine (engine/engine.h) and
 *      park the connection. The engine takes the user's lock
 *      lock:order:{userId} (a second concurrent request of the same user
 *      gets 429 BUSY), an order id, and one MySQL transaction with the
 *      other purchases of the voucher waiting with it, then releases the
 *      lock and calls purchase_done() below, which sets the reply and
 *      resumes the connection.
 *
 * An async voucher (async/async.h) goes the same way, but the engine's
 * batch is one Redis script instead of the lock and the transaction (the
 * script checks the buyer set atomically): the answer is 202
 * {"orderId","status":"pending"}, a promise that the order will be in
 * MySQL shortly (GET /api/orders/{id} shows it pending until then). When
 * Redis' replicas do not confirm the batch in time, the answer is 503
 * "the outcome is unknown": the order may yet be written (it then shows
 * in GET /api/orders), or be lost with a failing primary.
 *
 * A purchase has STORE_PURCHASE_BUDGET_MS from its arrival; a full queue
 * is 429 BUSY at once. MySQL is the source of truth: the lock only keeps
 * one user's requests from racing; the unique key and the CAS keep the
 * data right even when a lock expires early.
 */
#include "handlers/internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/metrics.h"
#include "common/util.h"

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
                                  uint64_t gen, struct vcache_voucher *v)
{
    struct store_seckill s;
    int err = store_seckill_get(req->st, req->id, &s);

    if (err && err != -ENOENT) {
        /* MySQL cannot say: an async sale sells from Redis alone. */
        redisContext *rc = store_redis(req->st);

        memset(v, 0, sizeof(*v));
        if (!rc ||
            async_sale_window(rc, req->id, &v->begin_time, &v->end_time) != 0)
            return req_backend_error(req, err, "seckill_get");
        v->found = true;
        v->type = VOUCHER_SECKILL;
        v->mode = PURCHASE_ASYNC;
        return verdict_or_reply(req, v, now_s, false);
    }
    vcache_voucher_from_row(v, err ? NULL : &s);
    vcache_entry_put(req->vcache, req->id, v, gen);
    return verdict_or_reply(req, v, now_s, false);
}

/* The engine's answer (on an engine thread): the reply, then resume. */
static void purchase_done(struct engine_purchase *p)
{
    struct request *req =
        (struct request *)((char *)p - offsetof(struct request, purchase));

    switch (p->outcome) {
    case ENGINE_OK:
        req_reply(req, 201,
                  json_pack("{s:o}", "orderId", json_id(p->order_id)));
        break;
    case ENGINE_SOLD_OUT:
        vcache_sold_out_set(req->vcache, p->voucher_id, req->vcache_gen);
        req_error(req, ERR_SOLD_OUT, NULL);
        break;
    case ENGINE_DUPLICATE:
        req_error(req, ERR_ALREADY_PURCHASED, NULL);
        break;
    case ENGINE_BUSY:
        req_error(req, ERR_BUSY, NULL);
        break;
    case ENGINE_PENDING:
        req_reply(req, 202,
                  json_pack("{s:o,s:s}", "orderId", json_id(p->order_id),
                            "status", "pending"));
        break;
    case ENGINE_NOT_STARTED:
        req_error(req, ERR_NOT_STARTED, NULL);
        break;
    case ENGINE_ENDED:
        req_error(req, ERR_ENDED, NULL);
        break;
    case ENGINE_UNCONFIRMED:
        /* Not undone: it may yet reach the replica and be written. */
        req_error(req, ERR_UNAVAILABLE,
                  "the order was taken but not yet confirmed by Redis' "
                  "replica; the outcome is unknown: check your orders");
        break;
    case ENGINE_BACKLOG:
        metrics_count(METRIC_PURCHASE_SHED, 1);
        req_error(req, ERR_BUSY,
                  "too many orders of this voucher wait to be written; "
                  "retry");
        req->retry_after = 1;
        break;
    case ENGINE_ERROR:
        if (p->err == -EAGAIN)
            req_error(req, ERR_UNAVAILABLE,
                      "the sale is being repaired; nothing was bought, retry");
        else if (p->err == -EPERM)
            req_error(req, ERR_UNAVAILABLE,
                      "this instance's Redis may lose acknowledged writes, "
                      "so it does not sell this voucher; nothing was bought");
        else
            req_backend_error(req, p->err, "purchase");
        break;
    }
    req_resume(req);
}

unsigned voucher_seckill_post(struct request *req)
{
    int64_t now_s = util_now_ms() / 1000;
    struct vcache_voucher known;
    bool cached = false;
    uint64_t gen = 0;
    unsigned status;
    int err;

    /* Step 1 from memory first, before the rate limiter: the crowd that
     * keeps buying a sold-out (or not started, ended, unknown) voucher is
     * refused without a MySQL or Redis round trip. Only with a valid
     * token, so that 401s still count against the address's bucket. */
    if (req_auth(req) == 0) {
        cached = vcache_entry_get(req->vcache, req->id, &known, &gen);
        if (cached && (status = verdict_or_reply(req, &known, now_s, true)))
            return status;
    }
    /* What is left may wait for Redis (the rate limiter) or MySQL (a
     * voucher the cache does not know): the I/O pool runs this function
     * again, and this time goes on. (Without a valid token and a limit
     * to charge, the 401 below needs neither.) */
    if (!req->handed_on &&
        (ratelimit_applies(req) || (!cached && req_auth(req) == 0)))
        return req_offload(req, voucher_seckill_post);
    if ((status = ratelimit_or_reply(req)) ||
        (status = req_user_or_reply(req)) ||
        (!cached && (status = precheck_or_reply(req, now_s, gen, &known))))
        return status;

    /* Step 2: the engine decides; this thread goes on with others. */
    req->vcache_gen = gen;
    req->purchase = (struct engine_purchase){
        .voucher_id = req->id,
        .user_id = req->auth.user_id,
        .deadline_ms =
            (int64_t)(req->start_ns / 1000000u) + STORE_PURCHASE_BUDGET_MS,
        .async = known.mode == PURCHASE_ASYNC,
        .done = purchase_done,
    };
    req_park(req);
    err = engine_submit(req->engine, &req->purchase);
    if (err == 0)
        return 0;
    if (err == -EAGAIN) {
        req_error(req, ERR_BUSY,
                  "too many purchases of this voucher are waiting; retry");
        req->retry_after = 1;
    } else {
        req_backend_error(req, err, "purchase");
    }
    req_resume(req);
    return 0;
}
