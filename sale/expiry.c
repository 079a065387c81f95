/*
 * expiry.c - the expiry of unpaid orders (see expiry.h).
 */
#include "sale/expiry.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "common/metrics.h"
#include "common/util.h"

struct expiry {
    struct sale *sale;
    const struct store_config *sc;
    pthread_t thread;
    pthread_mutex_t mu;  /* guards stop */
    pthread_cond_t cond; /* CLOCK_MONOTONIC; signalled to stop */
    bool stop;
};

/* One batch of shard's orders; returns how many orders it closed, or
 * -errno. */
static int expire_batch(struct expiry *x, struct store *st, unsigned shard,
                        int64_t *failing_since)
{
    struct store_expired out;
    int err = store_orders_expire(st, shard, STORE_EXPIRE_BATCH_MAX, &out);

    if (err) {
        /* MySQL down: the deadlines wait in MySQL; log once a run. */
        if (!*failing_since)
            log_warn("order expiry failed", "shard=%u err=%d", shard, err);
        *failing_since = util_mono_ms();
        return err;
    }
    if (*failing_since)
        log_info("order expiry running again", "shard=%u", shard);
    *failing_since = 0;
    metrics_count(METRIC_ORDER_EXPIRED, out.orders);
    for (size_t i = 0; i < out.orders; i++)
        metrics_observe_wait(METRIC_WAIT_EXPIRY_LAG,
                             (uint64_t)(out.lag_us[i] > 0 ? out.lag_us[i] : 0) *
                                 1000u);
    /* The closed orders come grouped by voucher. */
    for (size_t i = 0, j; i < out.orders; i = j) {
        for (j = i + 1;
             j < out.orders && out.order_voucher[j] == out.order_voucher[i];
             j++)
            ;
        sale_units_returned(x->sale, st, out.order_voucher[i], &out.order_id[i],
                            &out.order_user[i], j - i);
    }
    return (int)out.orders;
}

/* The rows of shard 0 a crash left in shard's outbox (store.h): moved,
 * and logged when there were any. */
static void outbox_sweep(struct store *st, unsigned shard,
                         int64_t *failing_since)
{
    size_t n = 0, all = 0;
    int err;

    while (!(err = store_outbox_move(st, shard, &n)) && n)
        all += n;
    if (err && !*failing_since)
        log_warn("rows of shard 0 could not leave a shard's outbox",
                 "shard=%u err=%d", shard, err);
    *failing_since = err ? util_mono_ms() : 0;
    if (all)
        log_info("rows of shard 0 moved from a shard's outbox",
                 "shard=%u rows=%zu", shard, all);
}

/* Idempotency-Keys are kept this long, and swept this often. */
#define IDEM_KEEP_S (24 * 3600)
#define IDEM_SWEEP_MS 60000

/* The Idempotency-Keys older than a day, once a minute. */
static void idem_sweep(struct store *st, int64_t *next_ms)
{
    size_t n = 0;
    int err;

    if (util_mono_ms() < *next_ms)
        return;
    *next_ms = util_mono_ms() + IDEM_SWEEP_MS;
    err = store_idem_sweep(st, IDEM_KEEP_S, &n);
    if (err)
        log_warn("old idempotency keys not deleted", "err=%d", err);
    else if (n)
        log_info("old idempotency keys deleted", "keys=%zu", n);
}

static void *expiry_main(void *arg)
{
    struct expiry *x = arg;
    struct store *st = store_new(x->sc);
    unsigned shards = store_shard_count(st);
    int64_t *failing_since = xcalloc(shards, sizeof(*failing_since));
    int64_t *outbox_failing = xcalloc(shards, sizeof(*outbox_failing));
    int64_t idem_next_ms = 0;

    pthread_mutex_lock(&x->mu);
    while (!x->stop) {
        bool full = false;

        pthread_mutex_unlock(&x->mu);
        /* Each shard expires its own orders, one batch each in turn. */
        for (unsigned i = 0; i < shards; i++)
            full |= expire_batch(x, st, i, &failing_since[i]) ==
                    STORE_EXPIRE_BATCH_MAX;
        for (unsigned i = 1; i < shards; i++)
            outbox_sweep(st, i, &outbox_failing[i]);
        idem_sweep(st, &idem_next_ms);
        pthread_mutex_lock(&x->mu);
        /* A full batch: there may be more right away. */
        if (full)
            continue;
        int64_t wake = util_mono_ms() + EXPIRY_POLL_MS;
        struct timespec ts = {(time_t)(wake / 1000),
                              (long)(wake % 1000) * 1000000L};
        while (!x->stop && util_mono_ms() < wake)
            pthread_cond_timedwait(&x->cond, &x->mu, &ts);
    }
    pthread_mutex_unlock(&x->mu);
    free(failing_since);
    free(outbox_failing);
    store_free(st);
    return NULL;
}

struct expiry *expiry_start(struct sale *s, const struct store_config *sc)
{
    struct expiry *x = xcalloc(1, sizeof(*x));
    pthread_condattr_t attr;

    x->sale = s;
    x->sc = sc;
    pthread_mutex_init(&x->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&x->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&x->thread, NULL, expiry_main, x) != 0) {
        log_error("order expiry start failed", NULL);
        abort();
    }
    return x;
}

void expiry_stop(struct expiry *x)
{
    if (!x)
        return;
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->thread, NULL);
    pthread_cond_destroy(&x->cond);
    pthread_mutex_destroy(&x->mu);
    free(x);
}
