/*
 * engine.c - the purchase engine (see engine.h): per-voucher queues, a
 * list of vouchers ready for a batch, a queue of tasks, worker threads
 * that each run one batch or task at a time, and the expiry thread.
 *
 * One mutex guards the queues and the ready list; it is held only to
 * append, to take a batch and to put a voucher back on the list, never
 * across I/O. A voucher is on the ready list when it has purchases waiting
 * and no batch running; the worker that takes it marks it running, and
 * when its batch ends puts it back at the end of the list if more arrived
 * meanwhile, so every voucher with waiting purchases gets its turn.
 *
 * A queue with nothing waiting and no batch goes to the end of the idle
 * list (oldest first), and leaves it when a purchase arrives; the sweep
 * frees the queues at its head that have been there idle_free_ms, a few
 * hundred per hold of the mutex, so that a crowd of finished sales does
 * not keep memory for good.
 *
 * /metrics reads the depths of the deepest queues from a small table of
 * its own (struct top), which the mutex's holders keep up to date and a
 * reader copies without the mutex, under a sequence counter.
 */
#include "engine/engine.h"

#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async/async.h"
#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/util.h"
#include "idgen/idgen.h"

/* An order id already taken (the ID worker's counter was lost) is retried
 * with a fresh one this many times. */
#define ID_ATTEMPTS 3

/* The sweep of idle queues runs about this often (more often when
 * idle_free_ms is shorter), and frees at most SWEEP_CHUNK queues per hold
 * of the mutex. Memory goes back to the system once TRIM_AFTER queues or
 * states were freed since the last time. */
#define SWEEP_MS 1000
#define SWEEP_CHUNK 256
#define TRIM_AFTER 1024

/* One voucher's queue, from its first purchase until it has been idle
 * idle_free_ms. */
struct vqueue {
    int64_t voucher_id;
    struct vqueue *hnext;                /* hash chain */
    struct engine_purchase *head, *tail; /* waiting, by arrival */
    unsigned queued;
    bool running;         /* a worker runs a batch of it */
    bool ready;           /* on the ready list */
    struct vqueue *rnext; /* ready list */
    bool idle;            /* on the idle list */
    struct vqueue *iprev, *inext;
    int64_t idle_since_ms; /* monotonic */
    int top;               /* its slot in struct top, or -1 */
};

#define QUEUE_BUCKETS 1024

/*
 * The deepest queues for /metrics. Written under the engine's mutex;
 * read without it: a writer makes seq odd, stores, makes it even again,
 * and a reader that saw it odd or changed copies again (the same seqlock
 * as the voucher cache's sets: the slots' fields are atomics, stored with
 * release and loaded with acquire).
 */
struct top {
    atomic_uint seq;
    struct {
        _Atomic int64_t voucher_id; /* 0: free */
        atomic_uint depth;
    } slot[ENGINE_TOP_SLOTS];
    /* Under the mutex only: */
    struct vqueue *owner[ENGINE_TOP_SLOTS];
    unsigned depth[ENGINE_TOP_SLOTS];
};

struct engine {
    struct engine_config cfg;
    pthread_mutex_t mu;  /* guards everything below */
    pthread_cond_t cond; /* CLOCK_MONOTONIC: workers also wait for a sweep */
    struct vqueue *buckets[QUEUE_BUCKETS];
    struct vqueue *ready_head, *ready_tail;
    struct vqueue *idle_head, *idle_tail; /* idle queues, oldest first */
    atomic_size_t queues;                 /* kept, for /metrics */
    int64_t sweep_due_ms;                 /* monotonic */
    bool sweeping;                        /* a worker sweeps now */
    size_t untrimmed; /* freed since the last trim (by the sweeper) */
    struct top top;
    struct engine_task *tasks_head, *tasks_tail;
    bool stopping;
    bool stopped; /* engine_stop() is done */
    pthread_t *threads;
    unsigned nthreads;
    /* the expiry thread */
    pthread_t expiry;
    bool expiry_started;
    pthread_cond_t expiry_cond; /* CLOCK_MONOTONIC; signalled to stop */
};

/* One member of a batch, on its worker's stack. */
struct member {
    struct engine_purchase *p;
    struct lock *lock; /* the user's purchase lock, while held */
    struct store_purchase_item item;
    bool settled; /* p's outcome is decided */
};

static struct vqueue *queue_get(struct engine *e, int64_t voucher_id)
{
    size_t h = (size_t)((uint64_t)voucher_id * 0x9e3779b97f4a7c15ULL >> 54);
    struct vqueue *q;

    for (q = e->buckets[h]; q; q = q->hnext)
        if (q->voucher_id == voucher_id)
            return q;
    q = xcalloc(1, sizeof(*q));
    q->voucher_id = voucher_id;
    q->top = -1;
    q->hnext = e->buckets[h];
    e->buckets[h] = q;
    atomic_fetch_add_explicit(&e->queues, 1, memory_order_relaxed);
    return q;
}

/* ---- the deepest queues, for /metrics ---- */

/* With e->mu held: publish slot i. */
static void top_publish(struct top *t, int i, int64_t voucher_id,
                        unsigned depth)
{
    unsigned seq = atomic_load_explicit(&t->seq, memory_order_relaxed);

    atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
    atomic_store_explicit(&t->slot[i].voucher_id, voucher_id,
                          memory_order_release);
    atomic_store_explicit(&t->slot[i].depth, depth, memory_order_release);
    atomic_store_explicit(&t->seq, seq + 2, memory_order_release);
    t->depth[i] = depth;
}

/* With e->mu held: q's depth changed. A queue with a slot updates it; one
 * without takes the shallowest slot when it is deeper than that one. */
static void top_note(struct engine *e, struct vqueue *q)
{
    struct top *t = &e->top;
    int i = q->top;

    if (i < 0) {
        unsigned min = UINT_MAX;

        for (int j = 0; j < ENGINE_TOP_SLOTS; j++)
            if (t->depth[j] < min) {
                min = t->depth[j];
                i = j;
            }
        if (q->queued <= min)
            return;
        if (t->owner[i])
            t->owner[i]->top = -1;
        t->owner[i] = q;
        q->top = i;
    }
    top_publish(t, i, q->voucher_id, q->queued);
}

/* With e->mu held: q is going away. */
static void top_forget(struct engine *e, struct vqueue *q)
{
    if (q->top < 0)
        return;
    e->top.owner[q->top] = NULL;
    top_publish(&e->top, q->top, 0, 0);
    q->top = -1;
}

/* ---- idle queues ---- */

/* With e->mu held: q has nothing waiting and no batch. */
static void idle_push(struct engine *e, struct vqueue *q, int64_t now)
{
    q->idle = true;
    q->idle_since_ms = now;
    q->inext = NULL;
    q->iprev = e->idle_tail;
    if (e->idle_tail)
        e->idle_tail->inext = q;
    else
        e->idle_head = q;
    e->idle_tail = q;
}

/* With e->mu held: q is on the idle list; take it off. */
static void idle_remove(struct engine *e, struct vqueue *q)
{
    if (q->iprev)
        q->iprev->inext = q->inext;
    else
        e->idle_head = q->inext;
    if (q->inext)
        q->inext->iprev = q->iprev;
    else
        e->idle_tail = q->iprev;
    q->idle = false;
    q->iprev = q->inext = NULL;
}

/* With e->mu held: unhash and free q (idle: nothing refers to it). */
static void queue_free(struct engine *e, struct vqueue *q)
{
    size_t h = (size_t)((uint64_t)q->voucher_id * 0x9e3779b97f4a7c15ULL >> 54);
    struct vqueue **pp = &e->buckets[h];

    while (*pp != q)
        pp = &(*pp)->hnext;
    *pp = q->hnext;
    if (q->idle)
        idle_remove(e, q);
    top_forget(e, q);
    free(q);
    atomic_fetch_sub_explicit(&e->queues, 1, memory_order_relaxed);
}

/* How often the sweep runs. */
static int64_t sweep_period_ms(const struct engine *e)
{
    int64_t half = e->cfg.idle_free_ms / 2;

    return half < 10 ? 10 : half < SWEEP_MS ? half : SWEEP_MS;
}

/*
 * With e->mu held, on a worker: when a sweep is due and no other worker
 * runs one, free the queues idle for idle_free_ms, then (without the
 * mutex) the store's idle per-voucher state, and hand what was freed back
 * to the system. Returns with e->mu held.
 */
static void idle_sweep(struct engine *e)
{
    int64_t now = util_mono_ms(), idle_ms = e->cfg.idle_free_ms;
    size_t freed = 0, chunk = 0;

    if (!idle_ms || e->sweeping || now < e->sweep_due_ms)
        return;
    e->sweeping = true;
    e->sweep_due_ms = now + sweep_period_ms(e);
    while (e->idle_head && now - e->idle_head->idle_since_ms >= idle_ms) {
        queue_free(e, e->idle_head);
        freed++;
        if (++chunk == SWEEP_CHUNK) {
            /* Let the purchases that wait for the mutex in. */
            chunk = 0;
            pthread_mutex_unlock(&e->mu);
            pthread_mutex_lock(&e->mu);
        }
    }
    pthread_mutex_unlock(&e->mu);
    freed += store_voucher_states_free_idle(idle_ms);
    e->untrimmed += freed;
#ifdef __GLIBC__
    /* free() keeps what it got back for the next malloc(); after a crowd
     * of finished sales, that is memory nobody will ask for soon. */
    if (e->untrimmed >= TRIM_AFTER) {
        malloc_trim(0);
        e->untrimmed = 0;
    }
#endif
    pthread_mutex_lock(&e->mu);
    e->sweeping = false;
}

/* With e->mu held: q has waiting purchases and no batch: list it. */
static void ready_push(struct engine *e, struct vqueue *q)
{
    if (q->ready || q->running || !q->head)
        return;
    q->ready = true;
    q->rnext = NULL;
    if (e->ready_tail)
        e->ready_tail->rnext = q;
    else
        e->ready_head = q;
    e->ready_tail = q;
    pthread_cond_signal(&e->cond);
}

static struct vqueue *ready_pop(struct engine *e)
{
    struct vqueue *q = e->ready_head;

    if (!q)
        return NULL;
    e->ready_head = q->rnext;
    if (!e->ready_head)
        e->ready_tail = NULL;
    q->ready = false;
    return q;
}

int engine_submit(struct engine *e, struct engine_purchase *p)
{
    struct vqueue *q;

    p->next = NULL;
    p->outcome = ENGINE_ERROR;
    p->err = 0;
    p->order_id = 0;
    p->queued_ms = util_mono_ms();
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        return -ESHUTDOWN;
    }
    q = queue_get(e, p->voucher_id);
    if (q->queued >= e->cfg.queue_max) {
        pthread_mutex_unlock(&e->mu);
        metrics_count(METRIC_PURCHASE_SHED, 1);
        return -EAGAIN;
    }
    if (q->idle)
        idle_remove(e, q);
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    q->queued++;
    top_note(e, q);
    ready_push(e, q);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

int engine_run(struct engine *e, struct engine_task *t)
{
    t->next = NULL;
    t->err = 0;
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        return -ESHUTDOWN;
    }
    if (e->tasks_tail)
        e->tasks_tail->next = t;
    else
        e->tasks_head = t;
    e->tasks_tail = t;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* ---- one batch ---- */

static void settle(struct member *m, enum engine_outcome o, int err)
{
    m->p->outcome = o;
    m->p->err = err;
    m->settled = true;
}

/* Members whose time is up before anything was done for them. */
static void expire(struct member *m, size_t n)
{
    int64_t now = util_mono_ms();

    for (size_t i = 0; i < n; i++)
        if (!m[i].settled && now >= m[i].p->deadline_ms) {
            metrics_count(METRIC_PURCHASE_EXPIRED, 1);
            settle(&m[i], ENGINE_ERROR, -ETIME);
        }
}

/* Take the locks of the members still open, in one round trip. */
static void locks_take(struct engine *e, struct member *m, size_t n)
{
    struct lock **ls = xcalloc(n, sizeof(*ls));
    struct member **who = xcalloc(n, sizeof(*who));
    enum lock_status *st = xcalloc(n, sizeof(*st));
    int *err = xcalloc(n, sizeof(*err));
    size_t k = 0;
    char name[64];

    for (size_t i = 0; i < n; i++) {
        if (m[i].settled)
            continue;
        snprintf(name, sizeof(name), "lock:order:%lld",
                 (long long)m[i].p->user_id);
        int rc = lock_new(e->cfg.locks, name, &m[i].lock);
        if (rc) {
            settle(&m[i], ENGINE_ERROR, rc);
            continue;
        }
        ls[k] = m[i].lock;
        who[k++] = &m[i];
    }
    if (lock_acquire_many(ls, k, e->cfg.lock_ttl_ms, st, err))
        for (size_t j = 0; j < k; j++)
            err[j] = -EINVAL;
    for (size_t j = 0; j < k; j++) {
        struct member *w = who[j];

        if (err[j]) {
            metrics_count(METRIC_LOCK_ERROR, 1);
            settle(w, ENGINE_ERROR, err[j]);
        } else if (st[j] == LOCK_BUSY) {
            metrics_count(METRIC_LOCK_BUSY, 1);
            settle(w, ENGINE_BUSY, 0);
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
static void locks_release(struct member *m, size_t n)
{
    struct lock **ls = xcalloc(n, sizeof(*ls));
    int *held = xcalloc(n, sizeof(*held));
    int *err = xcalloc(n, sizeof(*err));
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        if (m[i].lock)
            ls[k++] = m[i].lock;
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
        lock_free(m[i].lock);
        m[i].lock = NULL;
    }
    free(err);
    free(held);
    free(ls);
}

/* An order id for every member with a lock and no id yet. */
static void ids_take(struct store *st, struct member *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        redisContext *rc;
        int err;

        if (m[i].settled || m[i].item.order_id)
            continue;
        rc = store_redis(st);
        err = rc ? idgen_next(rc, "order", &m[i].item.order_id) : -ENOTCONN;
        if (err)
            settle(&m[i], ENGINE_ERROR, err);
    }
}

/* The store's answer for every member that reached the transaction; a
 * member whose order id was taken already retries with a fresh one. */
static void transact(struct store *st, int64_t voucher_id, struct member *m,
                     size_t n)
{
    struct store_purchase_item **items = xcalloc(n, sizeof(*items));

    for (int attempt = 0; attempt < ID_ATTEMPTS; attempt++) {
        size_t k = 0, clashes = 0;

        ids_take(st, m, n);
        for (size_t i = 0; i < n; i++) {
            if (m[i].settled)
                continue;
            m[i].item.user_id = m[i].p->user_id;
            m[i].item.deadline_ms = m[i].p->deadline_ms;
            items[k++] = &m[i].item;
        }
        if (k == 0)
            break;
        store_purchase_batch(st, voucher_id, items, k);
        for (size_t i = 0; i < n; i++) {
            struct member *w = &m[i];
            static const enum engine_outcome map[] = {
                [STORE_PURCHASE_OK] = ENGINE_OK,
                [STORE_PURCHASE_SOLD_OUT] = ENGINE_SOLD_OUT,
                [STORE_PURCHASE_DUPLICATE] = ENGINE_DUPLICATE,
            };

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
                settle(w, ENGINE_ERROR, w->item.err);
            else
                settle(w, map[w->item.outcome], 0);
            if (!w->p->err && w->p->outcome == ENGINE_OK)
                w->p->order_id = w->item.order_id;
        }
        if (!clashes)
            break;
        /* The rest of that block of ids is suspect too. */
        idgen_discard("order");
    }
    free(items);
}

/*
 * An async voucher's members: one Redis script sells to all of them (the
 * window, the buyer set and the stock, in Redis), and queues each order on
 * the voucher's stream for the writer (async/async.h).
 */
static void sell_async(struct engine *e, struct store *st, int64_t voucher_id,
                       struct member *m, size_t n)
{
    static const enum engine_outcome map[] = {
        [ASYNC_OK] = ENGINE_PENDING,
        [ASYNC_SOLD_OUT] = ENGINE_SOLD_OUT,
        [ASYNC_DUPLICATE] = ENGINE_DUPLICATE,
        [ASYNC_NOT_STARTED] = ENGINE_NOT_STARTED,
        [ASYNC_ENDED] = ENGINE_ENDED,
        [ASYNC_BACKLOG] = ENGINE_BACKLOG,
        [ASYNC_UNCONFIRMED] = ENGINE_UNCONFIRMED,
    };
    struct async_confirm confirm;
    int64_t *ids = xcalloc(n, sizeof(*ids)), *users = xcalloc(n, sizeof(*ids));
    enum async_outcome *out = xcalloc(n, sizeof(*out));
    struct member **who = xcalloc(n, sizeof(*who));
    redisContext *rc;
    size_t k = 0;
    int err;

    ids_take(st, m, n);
    for (size_t i = 0; i < n; i++) {
        if (m[i].settled)
            continue;
        if (FAILPOINT_FAILS("async_sale_drop")) { /* a test build's 202 lost */
            settle(&m[i], ENGINE_PENDING, 0);
            m[i].p->order_id = m[i].item.order_id;
            continue;
        }
        ids[k] = m[i].item.order_id;
        users[k] = m[i].p->user_id;
        who[k++] = &m[i];
    }
    rc = k ? store_redis(st) : NULL;
    /* A 202 only once the primary's replicas have the batch too. */
    async_confirm_get(e->cfg.async, &confirm);
    err = !k   ? 0
          : rc ? async_purchase(rc, voucher_id, e->cfg.async_backlog_max, ids,
                                users, k, &confirm, out)
               : -ENOTCONN;
    FAILPOINT("async_after_script");
    if (!err)
        async_voucher_hint(e->cfg.async, voucher_id);
    for (size_t j = 0; j < k; j++) {
        struct member *w = who[j];

        if (err) {
            /* No connection: nothing sent. Refused: nothing sold. A
             * connection that failed under the script: unknown. */
            settle(w, ENGINE_ERROR,
                   err == -ENOTCONN || err == -EAGAIN ? err : -EINPROGRESS);
        } else if (out[j] == ASYNC_NOT_READY) {
            settle(w, ENGINE_ERROR, -EAGAIN);
        } else {
            settle(w, map[out[j]], 0);
            if (out[j] == ASYNC_OK || out[j] == ASYNC_UNCONFIRMED)
                w->p->order_id = ids[j];
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

static void batch_run(struct engine *e, struct store *st, int64_t voucher_id,
                      struct member *m, size_t n)
{
    expire(m, n);
    if (n && m[0].p->async && !async_may_sell(e->cfg.async))
        for (size_t i = 0; i < n; i++)
            if (!m[i].settled)
                settle(&m[i], ENGINE_ERROR, -EPERM);
    if (n && m[0].p->async) {
        /* No per-user lock: the script is the guard. It runs atomically in
         * Redis and checks the buyer set itself, so one user's concurrent
         * purchases cannot race; a lock would add two round trips (and
         * halve the rate, measured) and decide nothing. */
        sell_async(e, st, voucher_id, m, n);
    } else {
        locks_take(e, m, n);
        FAILPOINT("after_lock");
        transact(st, voucher_id, m, n);
        locks_release(m, n);
    }
    for (size_t i = 0; i < n; i++) {
        if (!m[i].settled)
            settle(&m[i], ENGINE_ERROR, -EIO); /* cannot happen */
        m[i].p->done(m[i].p);
    }
}

/* ---- the workers ---- */

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void *worker_main(void *arg)
{
    struct engine *e = arg;
    struct store *st = store_new(e->cfg.store);
    size_t cap = e->cfg.batch_max > ASYNC_PURCHASE_BATCH_MAX
                     ? e->cfg.batch_max
                     : ASYNC_PURCHASE_BATCH_MAX;
    struct member *m = xcalloc(cap, sizeof(*m));

    pthread_mutex_lock(&e->mu);
    for (;;) {
        struct vqueue *q;
        size_t n = 0;
        int64_t now;

        idle_sweep(e);
        while (!e->stopping && !e->ready_head && !e->tasks_head) {
            if (!e->cfg.idle_free_ms) {
                pthread_cond_wait(&e->cond, &e->mu);
                continue;
            }
            /* Wake for the next sweep too. */
            struct timespec ts = {(time_t)(e->sweep_due_ms / 1000),
                                  (long)(e->sweep_due_ms % 1000) * 1000000L};
            pthread_cond_timedwait(&e->cond, &e->mu, &ts);
            idle_sweep(e);
        }
        if (e->stopping)
            break;
        if (e->tasks_head) {
            /* A task first: one transaction, and a person waiting. */
            struct engine_task *t = e->tasks_head;

            e->tasks_head = t->next;
            if (!e->tasks_head)
                e->tasks_tail = NULL;
            pthread_mutex_unlock(&e->mu);
            t->run(t, st);
            t->done(t);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        q = ready_pop(e);
        q->running = true;
        if (e->cfg.batch_linger_us && q->queued < e->cfg.batch_max) {
            pthread_mutex_unlock(&e->mu);
            sleep_us(e->cfg.batch_linger_us);
            pthread_mutex_lock(&e->mu);
        }
        now = util_mono_ms();
        /* An async voucher's batch is one script whatever its size, and
         * Redis fsyncs once per batch: take more. */
        size_t take = q->head && q->head->async ? ASYNC_PURCHASE_BATCH_MAX
                                                : e->cfg.batch_max;
        while (q->head && n < take) {
            struct engine_purchase *p = q->head;

            q->head = p->next;
            q->queued--;
            memset(&m[n], 0, sizeof(m[n]));
            m[n++].p = p;
            metrics_observe_wait(METRIC_WAIT_QUEUE,
                                 (uint64_t)(now - p->queued_ms) * 1000000u);
        }
        if (!q->head)
            q->tail = NULL;
        top_note(e, q);
        pthread_mutex_unlock(&e->mu);

        batch_run(e, st, q->voucher_id, m, n);

        pthread_mutex_lock(&e->mu);
        q->running = false;
        if (q->head)
            ready_push(e, q);
        else
            idle_push(e, q, util_mono_ms());
    }
    pthread_mutex_unlock(&e->mu);
    free(m);
    store_free(st);
    return NULL;
}

/* ---- the expiry of unpaid orders ---- */

static void *expiry_main(void *arg)
{
    struct engine *e = arg;
    struct store *st = store_new(e->cfg.store);
    int64_t failing_since = 0;

    pthread_mutex_lock(&e->mu);
    while (!e->stopping) {
        struct store_expired out;
        int err;

        pthread_mutex_unlock(&e->mu);
        err = store_orders_expire(st, STORE_EXPIRE_BATCH_MAX, &out);
        if (err) {
            /* MySQL down: the deadlines wait in MySQL; log once a run. */
            if (!failing_since)
                log_warn("order expiry failed", "err=%d", err);
            failing_since = util_mono_ms();
        } else {
            if (failing_since)
                log_info("order expiry running again", NULL);
            failing_since = 0;
            metrics_count(METRIC_ORDER_EXPIRED, out.orders);
            for (size_t i = 0; i < out.orders; i++)
                metrics_observe_wait(
                    METRIC_WAIT_EXPIRY_LAG,
                    (uint64_t)(out.lag_us[i] > 0 ? out.lag_us[i] : 0) * 1000u);
            for (size_t i = 0, j; e->cfg.units_returned && i < out.orders;
                 i = j) {
                for (j = i + 1; j < out.orders &&
                                out.order_voucher[j] == out.order_voucher[i];
                     j++)
                    ;
                e->cfg.units_returned(e->cfg.units_returned_ctx, st,
                                      out.order_voucher[i], &out.order_id[i],
                                      &out.order_user[i], j - i);
            }
        }
        pthread_mutex_lock(&e->mu);
        /* A full batch: there may be more right away. */
        if (!err && out.orders == STORE_EXPIRE_BATCH_MAX)
            continue;
        int64_t wake = util_mono_ms() + ENGINE_EXPIRY_POLL_MS;
        struct timespec ts = {(time_t)(wake / 1000),
                              (long)(wake % 1000) * 1000000L};
        while (!e->stopping && util_mono_ms() < wake)
            pthread_cond_timedwait(&e->expiry_cond, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    store_free(st);
    return NULL;
}

struct engine *engine_start(const struct engine_config *cfg)
{
    struct engine *e = xcalloc(1, sizeof(*e));

    e->cfg = *cfg;
    if (e->cfg.workers < 1)
        e->cfg.workers = 1;
    if (e->cfg.batch_max < 1)
        e->cfg.batch_max = 1;
    if (e->cfg.batch_max > STORE_BATCH_MAX)
        e->cfg.batch_max = STORE_BATCH_MAX;
    if (e->cfg.queue_max < 1)
        e->cfg.queue_max = 1;
    pthread_mutex_init(&e->mu, NULL);
    {
        pthread_condattr_t attr;

        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&e->cond, &attr);
        pthread_cond_init(&e->expiry_cond, &attr);
        pthread_condattr_destroy(&attr);
    }
    e->sweep_due_ms = util_mono_ms() + sweep_period_ms(e);
    if (e->cfg.expiry) {
        if (pthread_create(&e->expiry, NULL, expiry_main, e) != 0) {
            log_error("order expiry start failed", NULL);
            abort();
        }
        e->expiry_started = true;
    }
    e->threads = xcalloc(e->cfg.workers, sizeof(*e->threads));
    for (unsigned i = 0; i < e->cfg.workers; i++) {
        if (pthread_create(&e->threads[i], NULL, worker_main, e) != 0) {
            log_error("purchase engine start failed", "thread=%u", i);
            abort();
        }
        e->nthreads++;
    }
    return e;
}

void engine_stop(struct engine *e)
{
    struct engine_purchase *left = NULL, **tail = &left;
    struct engine_task *tasks;

    if (!e || e->stopped)
        return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_broadcast(&e->cond);
    pthread_cond_broadcast(&e->expiry_cond);
    pthread_mutex_unlock(&e->mu);
    for (unsigned i = 0; i < e->nthreads; i++)
        pthread_join(e->threads[i], NULL);
    if (e->expiry_started)
        pthread_join(e->expiry, NULL);

    /* No worker left: whatever still waits is answered here. Nothing new
     * is queued any more (stopping), so the lists are ours. */
    pthread_mutex_lock(&e->mu);
    tasks = e->tasks_head;
    e->tasks_head = e->tasks_tail = NULL;
    for (size_t h = 0; h < QUEUE_BUCKETS; h++) {
        for (struct vqueue *q = e->buckets[h]; q; q = q->hnext) {
            *tail = q->head;
            while (*tail)
                tail = &(*tail)->next;
            q->head = q->tail = NULL;
            q->queued = 0;
            top_note(e, q);
        }
    }
    pthread_mutex_unlock(&e->mu);
    while (tasks) {
        struct engine_task *t = tasks;

        tasks = t->next;
        t->err = -ESHUTDOWN;
        t->done(t);
    }
    while (left) {
        struct engine_purchase *p = left;

        left = p->next;
        p->outcome = ENGINE_ERROR;
        p->err = -ESHUTDOWN;
        p->done(p);
    }
    e->stopped = true;
}

void engine_free(struct engine *e)
{
    if (!e)
        return;
    engine_stop(e);
    for (size_t h = 0; h < QUEUE_BUCKETS; h++) {
        struct vqueue *q = e->buckets[h];

        while (q) {
            struct vqueue *next = q->hnext;

            free(q);
            q = next;
        }
    }
    pthread_cond_destroy(&e->expiry_cond);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->mu);
    free(e->threads);
    free(e);
}

size_t engine_queue_top(struct engine *e, int64_t *ids, unsigned *depths,
                        size_t max)
{
    int64_t id[ENGINE_TOP_SLOTS];
    unsigned depth[ENGINE_TOP_SLOTS];
    struct top *t;
    size_t n = 0;

    if (!e || max == 0)
        return 0;
    t = &e->top;
    for (;;) {
        unsigned seq = atomic_load_explicit(&t->seq, memory_order_acquire);

        if (!(seq & 1)) {
            for (int i = 0; i < ENGINE_TOP_SLOTS; i++) {
                id[i] = atomic_load_explicit(&t->slot[i].voucher_id,
                                             memory_order_acquire);
                depth[i] = atomic_load_explicit(&t->slot[i].depth,
                                                memory_order_acquire);
            }
            if (atomic_load_explicit(&t->seq, memory_order_relaxed) == seq)
                break;
        }
        sched_yield(); /* a writer is in the middle of a few stores */
    }
    for (int i = 0; i < ENGINE_TOP_SLOTS; i++) {
        size_t j;

        if (!id[i] || !depth[i])
            continue;
        /* Insertion into the sorted top list. */
        j = n < max ? n++ : max;
        while (j > 0 && depths[j - 1] < depth[i]) {
            if (j < max) {
                ids[j] = ids[j - 1];
                depths[j] = depths[j - 1];
            }
            j--;
        }
        if (j < max) {
            ids[j] = id[i];
            depths[j] = depth[i];
        }
    }
    return n;
}

size_t engine_queue_count(struct engine *e)
{
    return e ? atomic_load_explicit(&e->queues, memory_order_relaxed) : 0;
}
