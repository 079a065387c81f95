/*
 * engine.h - the purchase engine: where purchases run, off the HTTP
 * threads, in batches per voucher.
 *
 * The sale layer (sale/sale.h) submits each purchase here, with the
 * function that runs a batch of its kind; the engine queues it on its
 * voucher's queue, and one of its worker threads hands it to that
 * function together with the others that are waiting: a sync sale's
 * batch takes the buyers' locks and runs one MySQL transaction, an async
 * sale's runs one Redis script (sale/batch.c). The engine only schedules:
 *
 *   - one batch per voucher at a time (the hot row admits one
 *     transaction at a time anyway); batches of different vouchers run in
 *     parallel on the workers. A batch takes at most batch_max purchases
 *     (the purchase's own bound, else the engine's), in arrival order,
 *     all of one batch function;
 *   - bounds: a voucher's queue holds at most queue_max purchases; beyond
 *     that engine_submit() refuses at once (the caller answers 429 BUSY).
 *     A purchase whose deadline passes while it waits is answered -ETIME
 *     without being handed to a batch. So a purchase is answered within
 *     its deadline plus at most one statement in flight (common/
 *     sqlflavour.h bounds those);
 *   - the key of a queue is the voucher's id for a purchase; the sale
 *     layer also queues cancels and payments, merged the same way, under
 *     keys below zero (lanes by order id: sale/orders.c), which the
 *     purchases' metrics (shed, queue wait) leave out;
 *   - tasks: a cancel or a payment that runs alone (one short transaction
 *     each, which may wait for a row another transaction holds), first
 *     come first served on the same workers. Everything else that must
 *     not run on an HTTP thread goes to the task pool (pool.h).
 *
 * Memory: a voucher's queue exists while the voucher sells; once it has
 * been empty (no purchase waiting, no batch) for idle_free_ms it is freed,
 * and so is the store's state of every voucher unused as long
 * (store_voucher_states_free_idle()); a purchase that comes later makes
 * them again. An idle worker looks for such queues about once a second.
 *
 * Thread-safe: engine_submit() and engine_run() from any thread; batch()
 * and done() run on an engine thread.
 */
#ifndef SECKILL_ENGINE_H
#define SECKILL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct store;

struct engine_config {
    const struct store_config *store; /* every worker's own store */
    unsigned workers;                 /* threads, >= 1 */
    unsigned batch_max;       /* 1..ENGINE_BATCH_MAX, unless a purchase says */
    unsigned batch_linger_us; /* a batch waits this long for more */
    unsigned queue_max;       /* purchases waiting per voucher */
    /* Free a voucher's queue, and the store's per-voucher state, once
     * unused this long (and give the freed memory back to the system);
     * 0: keep them until engine_free(). */
    unsigned idle_free_ms;
};

/* The most purchases one batch takes. */
#define ENGINE_BATCH_MAX 256

/*
 * One purchase, owned by the caller (usually embedded in its own state)
 * until done() has been called.
 */
struct engine_purchase {
    /* Set by the caller: */
    int64_t voucher_id;
    int64_t deadline_ms; /* monotonic (util_mono_ms) */
    /*
     * Run a batch: ps[0..n) (n >= 1) of voucher_id, in arrival order, all
     * submitted with this function, on an engine thread with its store.
     * It does the work and keeps each purchase's outcome in the caller's
     * state around it; done() follows for each.
     */
    void (*batch)(struct store *st, int64_t voucher_id,
                  struct engine_purchase **ps, size_t n);
    /* The most purchases a batch of this kind takes (0: the engine's
     * batch_max); at most ENGINE_BATCH_MAX. */
    unsigned batch_max;
    void (*done)(struct engine_purchase *p);
    /* Set before done() is called: 0 when batch() ran for it; -ETIME, its
     * deadline passed while it waited (nothing done); -ESHUTDOWN, the
     * engine stopped first (nothing done). */
    int err;
    /* Private to the engine: */
    struct engine_purchase *next;
    int64_t queued_ms;
};

struct engine;

/* Start the workers (each opens its connections lazily). cfg and what it
 * points to must outlive the engine. Never returns NULL. */
struct engine *engine_start(const struct engine_config *cfg);

/*
 * Queue p. Returns 0: p->done(p) will be called exactly once, from an
 * engine thread (never from inside this call). Or, with nothing queued and
 * done() not called: -EAGAIN, the voucher's queue is full; -ESHUTDOWN, the
 * engine is stopping.
 */
int engine_submit(struct engine *e, struct engine_purchase *p);

/*
 * A task: run() on an engine thread with that thread's store, then done()
 * on the same thread. Owned by the caller until done() has been called.
 */
struct engine_task {
    void (*run)(struct engine_task *t, struct store *st);
    void (*done)(struct engine_task *t);
    int err; /* -ESHUTDOWN when the engine stopped before running it */
    /* Private to the engine: */
    struct engine_task *next;
};

/*
 * Queue task t. Returns 0: t->done(t) will be called exactly once, from an
 * engine thread. Or -ESHUTDOWN (nothing queued, done() not called).
 */
int engine_run(struct engine *e, struct engine_task *t);

/*
 * Stop: refuse new purchases and tasks, let the batches and tasks that run
 * finish (answered as usual), answer every purchase and task still queued
 * with -ESHUTDOWN and join the threads. Every done() has
 * returned when this returns. e stays valid: engine_submit() and
 * engine_run() go on answering -ESHUTDOWN until engine_free(). Idempotent;
 * accepts NULL.
 */
void engine_stop(struct engine *e);

/*
 * Stop (engine_stop()) if not stopped yet, and free e. Only once no other
 * thread may call into e any more. Accepts NULL.
 */
void engine_free(struct engine *e);

/* The queues whose depth engine_queue_top() knows. */
#define ENGINE_TOP_SLOTS 16

/*
 * The vouchers with the most purchases waiting: up to max of them, deepest
 * first, into ids[] and depths[]. Returns how many. For /metrics: it takes
 * no lock the purchases take. The engine keeps the depth of the
 * ENGINE_TOP_SLOTS deepest queues it has seen; a queue takes the place of
 * the shallowest of them when a purchase makes it deeper, so while more
 * than that many queues have purchases waiting, one that has only shrunk
 * since may be missing. Thread-safe; e may be NULL.
 */
size_t engine_queue_top(struct engine *e, int64_t *ids, unsigned *depths,
                        size_t max);

/* How many per-voucher queues e keeps now. Thread-safe; e may be NULL. */
size_t engine_queue_count(struct engine *e);

#endif
