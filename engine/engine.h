/*
 * engine.h - the purchase engine: where purchases run, off the HTTP
 * threads.
 *
 * The HTTP thread that receives a purchase checks what it can from memory
 * (the token, the voucher cache), submits the purchase here and parks its
 * connection; it never waits for anything shared. The engine queues the
 * purchase on its voucher's queue and one of its worker threads runs it in
 * a batch with the others that are waiting:
 *
 *   1. the per-user locks of every member, in one pipelined round trip
 *      (lock_acquire_many: a member whose user holds the lock already,
 *      say with a second tab, is BUSY);
 *   2. an order id for each (idgen: usually from the reserved block);
 *   3. one MySQL transaction for the batch (store_purchase_batch: the
 *      multi-row INSERT and the stock CAS, or one per purchase);
 *   4. the locks released, in one round trip;
 *   5. each member's done() callback with its own outcome.
 *
 * An async voucher's batch (async/async.h) is steps 2 and then one Redis
 * script that decides for every member at once; it takes no per-user
 * lock, since the script checks the buyer set atomically.
 *
 * One batch per voucher at a time (the hot row admits one transaction at a
 * time anyway); batches of different vouchers run in parallel on the
 * workers. A batch takes at most batch_max purchases, in arrival order.
 *
 * Bounds: a voucher's queue holds at most queue_max purchases; beyond that
 * engine_submit() refuses at once (the caller answers 429 BUSY). A
 * purchase whose deadline passes while it waits is answered -ETIME without
 * anything written. So a purchase is answered within its deadline plus at
 * most one statement in flight (common/sqlflavour.h bounds those).
 *
 * Besides purchases the engine runs two more kinds of work off the HTTP
 * threads: tasks (a cancel, a payment: one short transaction each, which
 * may wait for a row another transaction holds), first come first served
 * on the same workers; and the expiry of unpaid orders, on a thread of its
 * own that closes, every EXPIRY_POLL_MS, the orders whose pay deadline has
 * passed, in batches (store_orders_expire), on every instance at once
 * without double work, and reports each voucher that got units back.
 *
 * Memory: a voucher's queue exists while the voucher sells; once it has
 * been empty (no purchase waiting, no batch) for idle_free_ms it is freed,
 * and so is the store's state of every voucher unused as long
 * (store_voucher_states_free_idle()); a purchase that comes later makes
 * them again. An idle worker looks for such queues about once a second.
 *
 * Thread-safe: engine_submit() and engine_run() from any thread, done()
 * from an engine thread.
 */
#ifndef SECKILL_ENGINE_H
#define SECKILL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "async/async.h"
#include "lock/lock.h"
#include "store/store.h"

struct store;

struct engine_config {
    const struct store_config *store; /* every worker's own store */
    struct lock_client *locks;        /* the per-user purchase lock */
    unsigned workers;                 /* threads, >= 1 */
    unsigned batch_max;               /* 1..STORE_BATCH_MAX */
    unsigned batch_linger_us;         /* a batch waits this long for more */
    unsigned queue_max;               /* purchases waiting per voucher */
    uint32_t lock_ttl_ms;             /* lease of the per-user lock */
    /* The expiry closed orders[0..n) of users[0..n) for voucher_id: their
     * units went back on sale in MySQL. Called on the expiry thread with
     * its store, to return the units to an async sale and to tell whoever
     * caches "sold out". May be NULL. */
    void (*units_returned)(void *ctx, struct store *st, int64_t voucher_id,
                           const int64_t *orders, const int64_t *users,
                           size_t n);
    void *units_returned_ctx;
    bool expiry; /* run the expiry thread (false in unit tests) */
    /* Async vouchers (async/async.h): a voucher's backlog of orders not yet
     * in MySQL beyond which purchases are refused (ENGINE_BACKLOG), and
     * the writer that says whether this instance may sell them at all
     * (async_may_sell(); NULL: never). */
    unsigned async_backlog_max;
    struct async *async;
    /* Free a voucher's queue, and the store's per-voucher state, once
     * unused this long (and give the freed memory back to the system);
     * 0: keep them until engine_free(). */
    unsigned idle_free_ms;
};

/* How often the expiry looks for unpaid orders past their deadline. */
#define ENGINE_EXPIRY_POLL_MS 250

enum engine_outcome {
    ENGINE_OK,        /* order order_id is committed */
    ENGINE_SOLD_OUT,  /* no stock left (nothing written) */
    ENGINE_DUPLICATE, /* the user has an order for it (nothing written) */
    ENGINE_BUSY,      /* the user's other purchase holds the lock */
    ENGINE_ERROR,     /* err says what: nothing written unless it says */
    /* Async vouchers only: */
    ENGINE_PENDING,     /* sold in Redis: order order_id is on its way to
                         * MySQL (the writer will write it) */
    ENGINE_NOT_STARTED, /* before the sale's begin, by Redis' clock */
    ENGINE_ENDED,       /* after its end, by Redis' clock */
    ENGINE_BACKLOG,     /* too many orders wait for MySQL: retry later */
    ENGINE_UNCONFIRMED, /* sold in Redis, but its replicas did not confirm
                         * it in time: order order_id may be written, or
                         * lost by a failover (the outcome is unknown) */
};

/*
 * One purchase, owned by the caller until done() has been called. err with
 * ENGINE_ERROR: -ENOTCONN, -ECONNREFUSED, -ETIMEDOUT, -ECONNRESET, -EACCES
 * (a backend is unreachable or refused us: nothing written), -ETIME (the
 * deadline passed first: nothing written), -ESHUTDOWN (the engine stopped
 * first: nothing written), -EINPROGRESS (its COMMIT went unanswered: the
 * outcome is unknown), -EIO (an unexpected answer, logged).
 */
struct engine_purchase {
    /* Set by the caller: */
    int64_t voucher_id;
    int64_t user_id;
    int64_t deadline_ms; /* monotonic (util_mono_ms) */
    bool async;          /* the voucher sells in async mode */
    void (*done)(struct engine_purchase *p);
    /* Set before done() is called: */
    enum engine_outcome outcome;
    int err;
    int64_t order_id; /* ENGINE_OK, ENGINE_PENDING, ENGINE_UNCONFIRMED */
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
 * with -ESHUTDOWN, stop the expiry and join the threads. Every done() has
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
