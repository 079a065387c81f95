/*
 * async.h - the asynchronous purchase mode: Redis decides, a Redis Stream
 * carries the orders to MySQL.
 *
 * A voucher created in async mode keeps its sale in Redis, under keys that
 * share one hash tag, so every script touches one Redis Cluster slot and
 * declares its keys in KEYS:
 *
 *   {v:ID}:info     hash: begin, end (epoch s), initial (stock), stamp
 *                   (the sale's creation stamp, from MySQL)
 *   {v:ID}:stock    units left
 *   {v:ID}:buyers   set: users with an active (unpaid or paid) order
 *   {v:ID}:stream   orders sold and not yet in MySQL: o (order id),
 *                   u (user), t (Redis time of the sale, ms)
 *   {v:ID}:pending  hash: order id -> "user:t", until it is in MySQL (so
 *                   it exists exactly while the sale has orders on their
 *                   way)
 *   {v:ID}:dead     orders that could never be written (dead letters)
 *   {v:ID}:frozen   set while the sale's state is being rebuilt
 *
 * and one key outside them, the index of sales with work:
 *
 *   seckill:async:work  set: the ids of sales whose stream may hold
 *                       orders
 *
 * which the writers read to find every sale with orders to write,
 * whatever its age and however many there are. It is written by its own
 * commands, never inside a script (a script touches one sale's slot): a
 * purchase sends SADD after its script, in the same round trip; a writer
 * takes a sale out with SREM and then looks at its stream (XLEN) and puts
 * it back if an order came in between. A purchase whose SADD was lost
 * (the connection broke after the script) is found again by the writers:
 * within the look-back from MySQL's list of sales, and at any age by a
 * sweep of the keyspace for pending hashes (when a writer starts, and
 * every minute).
 *
 * A batch of purchases is one script: it checks the window, each buyer
 * and the stock, and for each sale takes a unit, adds the buyer and
 * appends the order to the stream, atomically. The purchase answers 202
 * "pending". Every instance runs a writer: a consumer of the stream's
 * group "writers" that writes batches of orders to MySQL (idempotently:
 * the order id is the primary key), acknowledges and deletes them, claims
 * orders a dead consumer left pending, and moves an order that can never
 * be written to the dead-letter stream. One instance at a time (through
 * the lock library) reconciles each sale: when Redis and MySQL disagree
 * (a Redis restarted from an older append-only file, a dead letter), it
 * freezes the sale, lets the writers drain the stream, and rebuilds the
 * Redis state from MySQL, so no unit is ever sold twice.
 *
 * A sale's state is made once, when its voucher is created (the preheat),
 * or from MySQL by a reconciliation that finds it missing. Both write
 * the sale's creation stamp, so a preheat that comes late, after a
 * reconciliation made the sale and it started selling, leaves it alone.
 *
 * A 202 promises the order will be written: acknowledged writes must
 * survive a Redis crash (async_redis_durable()), or the operator accepts
 * losing them (SECKILL_ASYNC_ACCEPT_LOSS=1).
 */
#ifndef SECKILL_ASYNC_H
#define SECKILL_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "lock/lock.h"
#include "store/store.h"

enum async_outcome {
    ASYNC_OK,          /* sold: the order is in the stream */
    ASYNC_SOLD_OUT,    /* no unit left */
    ASYNC_DUPLICATE,   /* the user has an active order */
    ASYNC_NOT_STARTED, /* before the sale's begin (Redis' clock) */
    ASYNC_ENDED,       /* at or after its end */
    ASYNC_NOT_READY,   /* the sale's state is missing or being rebuilt */
    ASYNC_BACKLOG,     /* too many orders wait for MySQL: retry */
};

/*
 * Put a new sale into Redis: its window, initial stock and stock, its
 * creation stamp (store_voucher.sale_stamp), no buyers, no orders. For a
 * voucher just created. If the sale is there with this stamp already (a
 * reconciliation made it from MySQL first, and it may be selling), it is
 * left as it is: -EEXIST. Whatever a stale sale of the same id left (from
 * an earlier database on the same Redis: another stamp, or none) is
 * replaced. 0, -EEXIST, or -errno.
 */
int async_sale_preheat(redisContext *rc, int64_t voucher_id, int64_t begin_s,
                       int64_t end_s, int64_t stock, int64_t stamp);

/*
 * An async sale's window from its Redis state (for a purchase when MySQL
 * cannot say: the sale goes on without it). 0, -ENOENT (no async sale of
 * that id in Redis), or -errno.
 */
int async_sale_window(redisContext *rc, int64_t voucher_id, int64_t *begin_s,
                      int64_t *end_s);

/* The most purchases async_purchase() takes at once. */
#define ASYNC_PURCHASE_BATCH_MAX 256

/*
 * Sell voucher_id to users[i] as order order_ids[i], i < n (at most 256),
 * in one script, in that order, and add the sale to the index of sales
 * with work in the same round trip. out[i] is each one's outcome (all
 * the same for NOT_STARTED, ENDED, NOT_READY and BACKLOG: the stream holds
 * backlog_max orders or more). 0; -EAGAIN when Redis refused the script
 * (an error reply: nothing sold); or -errno as redis_errno() when the
 * connection failed (the outcome is then unknown).
 */
int async_purchase(redisContext *rc, int64_t voucher_id, unsigned backlog_max,
                   const int64_t *order_ids, const int64_t *users, size_t n,
                   enum async_outcome *out);

/*
 * An order of user_id was cancelled or expired in MySQL: its unit goes
 * back on sale in Redis and the user may buy again. Does nothing for a
 * voucher that is not async, or a user who is not a buyer (a second call).
 * 0 or -errno.
 */
int async_unit_return(redisContext *rc, int64_t voucher_id, int64_t user_id);

/*
 * Whether order_id waits in the stream of a sale, looked for in every
 * sale of the index of sales with work (a round trip for the index, and
 * one for each 256 sales in it): 0 with *voucher_id, *user_id and
 * *accepted_ms (Redis' time of the sale) set, -ENOENT (not waiting:
 * written already, or never sold), or -errno.
 */
int async_pending_find(redisContext *rc, int64_t order_id, int64_t *voucher_id,
                       int64_t *user_id, int64_t *accepted_ms);

/*
 * Whether the Redis of rc keeps every acknowledged write across a crash:
 * appendonly yes with appendfsync always. 0: it does; -EPERM: it does not
 * (why says what it has); another -errno: cannot tell (CONFIG refused).
 */
int async_redis_durable(redisContext *rc, char *why, size_t len);

/* ---- the writer and the reconciliation of one instance ---- */

/* A consumer silent this long has its orders claimed by another. */
#define ASYNC_CLAIM_MS 5000

struct async_config {
    const struct store_config *store; /* the writer's own store */
    struct lock_client *locks;        /* one reconciler at a time */
    unsigned batch;                   /* orders per MySQL transaction */
    unsigned claim_ms; /* a dead consumer's orders are claimed after */
    /* A sale is looked after (reconciled) from MySQL's list until this
     * long after its end; its orders still to be written after that are
     * found through the index of sales with work. */
    unsigned lookback_s;
    /* Units of voucher_id went back on sale (a rebuild): tell the voucher
     * caches. May be NULL. */
    void (*stock_changed)(void *ctx, struct store *st, int64_t voucher_id);
    void *ctx;
    /* Sell async vouchers even when Redis may lose acknowledged writes
     * (SECKILL_ASYNC_ACCEPT_LOSS=1). */
    bool accept_loss;
};

struct async;

/* Start this instance's writer thread. Never NULL. */
struct async *async_start(const struct async_config *cfg);

/*
 * Whether this instance may sell async vouchers: accept_loss, or its Redis
 * was durable (async_redis_durable()) at the last look (at the start, then
 * every couple of seconds). Thread-safe, lock-free.
 */
bool async_may_sell(const struct async *a);

/* Stop it (what it wrote is acknowledged; what it holds is claimed by
 * another writer later, or by this one after a restart). Accepts NULL. */
void async_stop(struct async *a);

/* Voucher voucher_id is async and on sale (this instance created it or
 * sold some): the writer wakes and takes it in now rather than at its
 * next look at MySQL or the index. Thread-safe, cheap when it is known. */
void async_voucher_hint(struct async *a, int64_t voucher_id);

/* The deepest backlogs (orders waiting for MySQL) and the oldest wait:
 * for /metrics. Thread-safe. */
size_t async_backlog_top(struct async *a, int64_t *ids, unsigned *depths,
                         size_t max, int64_t *oldest_ms);

#endif
