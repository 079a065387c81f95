/*
 * engine.c - the purchase engine (see engine.h): per-voucher queues, a
 * list of vouchers ready for a batch, a queue of tasks, and worker threads
 * that each run one batch or task at a time.
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

#include "common/metrics.h"
#include "common/util.h"

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
    p->err = 0;
    p->queued_ms = util_mono_ms();
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        return -ESHUTDOWN;
    }
    q = queue_get(e, p->voucher_id);
    if (q->queued >= e->cfg.queue_max) {
        pthread_mutex_unlock(&e->mu);
        if (p->voucher_id > 0) /* a purchase, not a lane (engine.h) */
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

/*
 * Hand the purchases ps[0..n) whose deadline has not passed to their
 * batch function, then answer every one of them.
 */
static void batch_run(struct store *st, int64_t voucher_id,
                      struct engine_purchase **ps, size_t n)
{
    struct engine_purchase *live[ENGINE_BATCH_MAX];
    int64_t now = util_mono_ms();
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (now >= ps[i]->deadline_ms) {
            /* Its time is up before anything was done for it. */
            metrics_count(METRIC_PURCHASE_EXPIRED, 1);
            ps[i]->err = -ETIME;
        } else {
            live[k++] = ps[i];
        }
    }
    if (k)
        live[0]->batch(st, voucher_id, live, k);
    for (size_t i = 0; i < n; i++)
        ps[i]->done(ps[i]);
}

/* ---- the workers ---- */

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* How many purchases a batch that starts with p takes. */
static size_t batch_take(const struct engine *e,
                         const struct engine_purchase *p)
{
    unsigned max = p->batch_max ? p->batch_max : e->cfg.batch_max;

    return max > ENGINE_BATCH_MAX ? ENGINE_BATCH_MAX : max;
}

static void *worker_main(void *arg)
{
    struct engine *e = arg;
    struct store *st = store_new(e->cfg.store);
    struct engine_purchase **ps = xcalloc(ENGINE_BATCH_MAX, sizeof(*ps));

    pthread_mutex_lock(&e->mu);
    for (;;) {
        const struct engine_purchase *first;
        struct vqueue *q;
        size_t n = 0, take;
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
        /* An async sale's batch is one script whatever its size, and Redis
         * fsyncs once per batch: its purchases ask for larger ones. */
        first = q->head;
        take = batch_take(e, first);
        while (q->head && n < take && q->head->batch == first->batch) {
            struct engine_purchase *p = q->head;

            q->head = p->next;
            q->queued--;
            ps[n++] = p;
            if (q->voucher_id > 0)
                metrics_observe_wait(METRIC_WAIT_QUEUE,
                                     (uint64_t)(now - p->queued_ms) * 1000000u);
        }
        if (!q->head)
            q->tail = NULL;
        top_note(e, q);
        pthread_mutex_unlock(&e->mu);

        batch_run(st, q->voucher_id, ps, n);

        pthread_mutex_lock(&e->mu);
        q->running = false;
        if (q->head)
            ready_push(e, q);
        else
            idle_push(e, q, util_mono_ms());
    }
    pthread_mutex_unlock(&e->mu);
    free(ps);
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
    if (e->cfg.batch_max > ENGINE_BATCH_MAX)
        e->cfg.batch_max = ENGINE_BATCH_MAX;
    if (e->cfg.queue_max < 1)
        e->cfg.queue_max = 1;
    pthread_mutex_init(&e->mu, NULL);
    {
        pthread_condattr_t attr;

        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&e->cond, &attr);
        pthread_condattr_destroy(&attr);
    }
    e->sweep_due_ms = util_mono_ms() + sweep_period_ms(e);
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
    pthread_mutex_unlock(&e->mu);
    for (unsigned i = 0; i < e->nthreads; i++)
        pthread_join(e->threads[i], NULL);

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
