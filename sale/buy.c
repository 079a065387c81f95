/*
 * buy.c - the purchase (sale_buy() in sale.h): the caller's thread decides
 * only what it can without waiting for anyone else.
 *
 *   1. the voucher: exists, is a seckill voucher, on sale now, stock left
 *      (cheap refusals before any lock). Answered from the voucher cache
 *      (vcache.h) when it knows, before the rate limit, so that a
 *      sold-out voucher costs no I/O. What needs a round trip (the rate
 *      limit's Redis script, the voucher's row when the cache does not
 *      know it) runs on the task pool;
 *   2. the choice of the sale's mode, and the purchase handed to the
 *      purchase engine (engine/engine.h) with the batch function of that
 *      mode (batch.c). A sync sale's batch takes each buyer's lock
 *      for the voucher, lock:order:{v:voucherId}:userId (a second
 *      concurrent purchase of the same buyer is BUSY), an order id, and
 *      one MySQL transaction with the other purchases of the voucher
 *      waiting with it; an async sale's is one Redis script (the script
 *      checks the buyer set atomically), whose sale is a promise that
 *      the order will be in MySQL shortly.
 *      When Redis' replicas do not confirm the batch in time the outcome
 *      is unknown: the order may yet be written, or be lost with a
 *      failing primary.
 *
 * A purchase has SALE_BUDGET_MS from its arrival; a full queue is refused
 * at once. MySQL is the source of truth: the lock only keeps one buyer's
 * purchases from racing; the unique key and the CAS keep the data right
 * even when a lock expires early.
 */
#include "sale/internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "common/metrics.h"
#include "common/util.h"

/*
 * Step 1's verdict on what is known about the voucher (from the cache when
 * cached, else just read from MySQL). True when refused (b->outcome). A
 * queue sale's buyer needs a ticket of the waiting room, checked after
 * the sale's window, so that an early buyer still hears NOT_STARTED.
 */
static bool refused(const struct sale *s, struct sale_buy *b,
                    const struct vcache_voucher *v, int64_t now_s, bool cached)
{
    if (!v->found)
        b->outcome = SALE_NOT_FOUND;
    else if (v->type != VOUCHER_SECKILL)
        b->outcome = SALE_NOT_SECKILL;
    else if (now_s < v->begin_time)
        b->outcome = SALE_NOT_STARTED;
    else if (now_s >= v->end_time)
        b->outcome = SALE_ENDED;
    else if (v->paused)
        b->outcome = SALE_PAUSED;
    else if (v->sold_out) {
        metrics_count(cached ? METRIC_PURCHASE_SOLD_OUT_CACHED
                             : METRIC_PURCHASE_SOLD_OUT,
                      1);
        b->outcome = SALE_SOLD_OUT;
    } else if (v->queue && !sale__ticket_ok(s, b, util_now_ms())) {
        b->outcome = SALE_TICKET_REQUIRED;
    } else {
        return false;
    }
    return true;
}

/* Decided after it was handed on: forget its state, answer. */
static void answer(struct sale_purchase *sp)
{
    struct sale_buy *b = sp->buy;

    b->priv = NULL;
    free(sp);
    b->done(b);
}

static void failed(struct sale_purchase *sp, int err)
{
    sp->buy->outcome = SALE_FAILED;
    sp->buy->err = err;
    answer(sp);
}

/* The engine's answer (on an engine thread). */
static void purchase_done(struct engine_purchase *p)
{
    struct sale_purchase *sp =
        (struct sale_purchase *)((char *)p - offsetof(struct sale_purchase, p));
    struct sale_buy *b = sp->buy;

    if (p->err) { /* never reached a batch: -ETIME, -ESHUTDOWN */
        failed(sp, p->err);
        return;
    }
    b->outcome = sp->outcome;
    b->err = sp->err;
    if (sp->outcome == SALE_ORDERED || sp->outcome == SALE_PENDING ||
        sp->outcome == SALE_UNCONFIRMED)
        b->order_id = sp->item.order_id;
    if (sp->outcome == SALE_SOLD_OUT)
        vcache_sold_out_set(sp->sale->cfg.vcache, b->voucher_id,
                            sp->vcache_gen);
    else if (sp->outcome == SALE_BACKLOG)
        metrics_count(METRIC_PURCHASE_SHED, 1);
    answer(sp);
}

/* Step 2: the engine decides. Answers at once if it refuses. */
static void submit(struct sale_purchase *sp)
{
    struct sale_buy *b = sp->buy;
    int err;

    sp->p = (struct engine_purchase){
        .voucher_id = b->voucher_id,
        .deadline_ms = b->arrived_ms + SALE_BUDGET_MS,
        .batch = sp->async ? sale__batch_async : sale__batch_sync,
        /* An async sale's batch is one script whatever its size, and
         * Redis fsyncs once per batch: take more. */
        .batch_max = sp->async ? ASYNC_PURCHASE_BATCH_MAX : 0,
        .done = purchase_done,
    };
    err = engine_submit(sp->sale->cfg.engine, &sp->p);
    if (err == -EAGAIN) {
        sp->buy->outcome = SALE_QUEUE_FULL;
        answer(sp);
    } else if (err) {
        failed(sp, err);
    }
}

/*
 * Step 1 when the cache could not answer: read the voucher row, remember
 * it, decide from it. True when refused (b->outcome, or SALE_FAILED).
 */
static bool row_refused(struct sale_purchase *sp, struct store *st,
                        int64_t now_s)
{
    struct sale_buy *b = sp->buy;
    struct vcache_voucher v;
    struct store_seckill row;
    int err = store_seckill_get(st, b->voucher_id, &row);

    if (err && err != -ENOENT) {
        /* MySQL cannot say: an async sale sells from Redis alone. */
        struct redis_link *rl = store_redis_link(st);

        memset(&v, 0, sizeof(v));
        if (!rl || async_sale_window(rl, b->voucher_id, &v.begin_time,
                                     &v.end_time) != 0) {
            b->outcome = SALE_FAILED;
            b->err = err;
            return true;
        }
        v.found = true;
        v.type = VOUCHER_SECKILL;
        v.mode = PURCHASE_ASYNC;
        /* Its admission is in MySQL; Redis marks a waiting room too. */
        v.queue = store_waitroom_marked(st, b->voucher_id) != 0;
    } else {
        vcache_voucher_from_row(&v, err ? NULL : &row);
        vcache_entry_put(sp->sale->cfg.vcache, b->voucher_id, &v,
                         sp->vcache_gen);
    }
    sp->async = v.mode == PURCHASE_ASYNC;
    return refused(sp->sale, b, &v, now_s, false);
}

/* The round trips before the engine, on a pool thread. */
static void prepare(struct pool_task *t, int err)
{
    struct sale_purchase *sp =
        (struct sale_purchase *)((char *)t -
                                 offsetof(struct sale_purchase, task));
    struct sale_buy *b = sp->buy;
    struct store *st;

    if (err) { /* the pool stopped first: nothing was done */
        failed(sp, err);
        return;
    }
    if (util_mono_ms() - b->arrived_ms > SALE_BUDGET_MS) {
        /* It waited out its budget behind requests that wait for a
         * stalled backend: the buyer has been patient enough. */
        failed(sp, -ECANCELED);
        return;
    }
    if (sale_limit_take(sp->sale, &b->limit, &b->retry_s)) {
        b->outcome = SALE_RATE_LIMITED;
        answer(sp);
        return;
    }
    st = sale__store(sp->sale);
    if (!sp->cached && row_refused(sp, st, util_now_ms() / 1000)) {
        answer(sp);
        return;
    }
    submit(sp);
}

bool sale_buy(struct sale *s, struct sale_buy *b)
{
    int64_t now_s = util_now_ms() / 1000;
    struct vcache_voucher known;
    struct sale_purchase *sp;
    uint64_t gen;
    bool cached;

    b->err = 0;
    b->order_id = 0;
    b->retry_s = 0;
    b->priv = NULL;
    /* Step 1 from memory first, before the rate limit: the crowd that
     * keeps buying a sold-out (or not started, ended, unknown) voucher is
     * refused without a MySQL or Redis round trip. */
    cached = vcache_entry_get(s->cfg.vcache, b->voucher_id, &known, &gen);
    if (cached && refused(s, b, &known, now_s, true))
        return true;

    sp = xcalloc(1, sizeof(*sp));
    sp->sale = s;
    sp->buy = b;
    sp->cached = cached;
    sp->async = cached && known.mode == PURCHASE_ASYNC;
    sp->vcache_gen = gen;
    b->priv = sp;
    b->park(b);
    if (b->limit.n || !cached) {
        /* What is left may wait for Redis (the rate limit) or MySQL (a
         * voucher the cache does not know): on the pool. */
        int err;

        sp->task.run = prepare;
        err = pool_run(s->cfg.pool, &sp->task);
        if (err)
            failed(sp, err);
        return false;
    }
    submit(sp);
    return false;
}
