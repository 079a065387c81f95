/*
 * sale.c - the sale object, the pool threads' stores and jobs, the rate
 * limit, and how the instance is doing (see sale.h). The sale's
 * operations are in buy.c (the purchase), batch.c (what a batch does),
 * orders.c, vouchers.c and buyers.c.
 */
#include "sale/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "common/util.h"

struct sale *sale_new(const struct sale_config *cfg)
{
    struct sale *s = xcalloc(1, sizeof(*s));

    s->cfg = *cfg;
    s->listing = sale__listing_new();
    return s;
}

void sale_free(struct sale *s)
{
    if (!s)
        return;
    sale__listing_free(s->listing);
    free(s);
}

/* ---- each thread's store ---- */

static pthread_key_t store_key;
static pthread_once_t store_key_once = PTHREAD_ONCE_INIT;

static void store_key_destroy(void *p)
{
    store_free(p);
}

static void store_key_create(void)
{
    if (pthread_key_create(&store_key, store_key_destroy) != 0)
        abort();
}

struct store *sale__store(struct sale *s)
{
    struct store *st;

    pthread_once(&store_key_once, store_key_create);
    st = pthread_getspecific(store_key);
    if (!st) {
        st = store_new(s->cfg.store);
        pthread_setspecific(store_key, st);
    }
    return st;
}

/* ---- jobs ---- */

struct job {
    struct pool_task task; /* first: job_run()'s cast */
    void (*fn)(void *arg, int err);
    void *arg;
};

static void job_run(struct pool_task *t, int err)
{
    struct job *j = (struct job *)t;
    void (*fn)(void *, int) = j->fn;
    void *arg = j->arg;

    free(j);
    fn(arg, err);
}

int sale_job_run(struct sale *s, void (*fn)(void *arg, int err), void *arg)
{
    struct job *j = xcalloc(1, sizeof(*j));
    int err;

    j->task.run = job_run;
    j->fn = fn;
    j->arg = arg;
    err = pool_run(s->cfg.pool, &j->task);
    if (err)
        free(j);
    return err;
}

/* ---- rate limits ---- */

bool sale_limit_take(struct sale *s, const struct sale_limit *l,
                     unsigned *retry_s)
{
    static _Thread_local int64_t last_log_ms;
    struct store_rate_bucket b[STORE_RATE_BUCKETS_MAX];
    int64_t retry_ms = 0;
    char why[160];
    int err;

    *retry_s = 0;
    if (l->n == 0)
        return false;
    for (unsigned i = 0; i < l->n && i < STORE_RATE_BUCKETS_MAX; i++)
        b[i] = (struct store_rate_bucket){.key = l->bucket[i].key,
                                          .per_s = l->bucket[i].per_s,
                                          .burst = l->bucket[i].burst};
    err = store_rate_take(sale__store(s), b, l->n, &retry_ms, why, sizeof(why));
    if (err) {
        /* Fail open: a request is better served without its limit than
         * refused because Redis is away. Said once a second per thread. */
        int64_t now = util_mono_ms();

        if (now - last_log_ms >= 1000 || !last_log_ms) {
            last_log_ms = now;
            log_warn("rate limit skipped", "why=\"%s\" err=%d", why, err);
        }
        return false;
    }
    if (!retry_ms)
        return false;
    *retry_s = retry_ms <= 1000 ? 1 : (unsigned)((retry_ms + 999) / 1000);
    return true;
}

/* ---- how the instance is doing ---- */

void sale_health_check(struct sale *s, struct sale_health *h)
{
    struct store_replica_state rs[STORE_SHARDS_MAX];

    memset(h, 0, sizeof(*h));
    store_ping(sale__store(s), &h->mysql_ok, &h->redis_ok);
    h->redis_cluster = store_redis_cluster_check(sale__store(s));
    if (h->redis_cluster && strcmp(h->redis_cluster, "ok") != 0)
        h->redis_ok = false;
    h->lock_backend = "none";
    if (s->cfg.locks) {
        h->lock_err = lock_client_ping(s->cfg.locks);
        h->lock_backend = lock_client_backend(s->cfg.locks);
    }
    /* The read replicas are optional: without one reads go to the
     * primary, so they are reported but never make the instance unready. */
    h->nreplicas = store_replica_states(rs, STORE_SHARDS_MAX);
    for (size_t i = 0; i < h->nreplicas; i++) {
        h->replicas[i].shard = rs[i].shard;
        h->replicas[i].why = rs[i].why;
    }
    h->sharded = store_shard_count(sale__store(s)) > 1;
}

void sale_gauges_read(struct sale *s, struct sale_gauges *g,
                      struct metrics_extra *x)
{
    struct store_replica_state rs[STORE_SHARDS_MAX];
    int64_t oldest_ms;

    {
        /* The lanes of cancels and payments (keys below zero) are no
         * voucher's queue: read them all, keep the vouchers'. */
        int64_t ids[ENGINE_TOP_SLOTS];
        unsigned depths[ENGINE_TOP_SLOTS];
        size_t n =
            engine_queue_top(s->cfg.engine, ids, depths, ENGINE_TOP_SLOTS);

        x->queues = 0;
        for (size_t i = 0; i < n && x->queues < SALE_GAUGES_TOP; i++) {
            if (ids[i] < 0)
                continue;
            g->queue_ids[x->queues] = ids[i];
            g->queue_depths[x->queues++] = depths[i];
        }
    }
    x->queue_ids = g->queue_ids;
    x->queue_depths = g->queue_depths;
    x->queues_kept = engine_queue_count(s->cfg.engine);
    x->voucher_states = store_voucher_states_count();
    x->backlogs =
        async_backlog_top(s->cfg.async, g->backlog_ids, g->backlog_depths,
                          SALE_GAUGES_TOP, &oldest_ms);
    x->backlog_ids = g->backlog_ids;
    x->backlog_depths = g->backlog_depths;
    x->writer_lag_s = 0.0;
    if (oldest_ms) {
        int64_t lag = util_now_ms() - oldest_ms;
        x->writer_lag_s = lag > 0 ? (double)lag / 1000.0 : 0.0;
    }
    x->nreplicas = store_replica_states(rs, STORE_SHARDS_MAX);
    for (size_t i = 0; i < x->nreplicas; i++)
        g->replicas[i] = (struct metrics_replica){
            .shard = rs[i].shard, .up = rs[i].usable, .lag_s = rs[i].lag_s};
    x->replicas = g->replicas;
    x->replicas_by_shard = store_shard_count(sale__store(s)) > 1;
}
