/*
 * async.h - the asynchronous purchase mode: Redis decides, a Redis Stream
 * carries the orders to MySQL.
 *
 * A voucher created in async mode keeps its sale in Redis, under keys that
 * share one hash tag, so every script touches one Redis Cluster slot and
 * declares its keys in KEYS:
 *
 *   {v:ID}:info     hash: begin, end (epoch s), initial (stock),
 *                   written (orders settled as written to MySQL),
 *                   stamp (the sale's creation stamp, from MySQL);
 *                   the operator's controls as MySQL's sale row had
 *                   them: halt (1 paused, 2 stopped), rev (the row's
 *                   revision they came with), restocked (the units
 *                   added to initial since the creation)
 *   {v:ID}:stock    units left
 *   {v:ID}:buyers   set: users with an active (unpaid or paid) order
 *   {v:ID}:holders  hash: user -> the order id of that active order
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
 * the order id is the primary key; each row keeps its place in the
 * stream), then settles them in one script (acknowledged, deleted, no
 * longer pending, counted as written), claims orders a dead consumer left
 * pending, and moves an order that can never be written to the
 * dead-letter stream. One instance at a time (through the lock library)
 * reconciles each sale, comparing Redis with MySQL's orders up to the
 * place in the stream Redis had reached (async/compare.h): when they
 * disagree (a Redis restarted from an older append-only file, a dead
 * letter), it freezes the sale, lets the writers drain what is in
 * flight, and rebuilds the Redis state from MySQL, so no unit is ever
 * sold twice. The rebuild never holds the writer: each step that finds
 * orders still in flight returns, and the writer's loop comes back.
 *
 * A sale's state is made once, when its voucher is created (the preheat),
 * or from MySQL by a reconciliation that finds it missing. Both write
 * the sale's creation stamp, so a preheat that comes late, after a
 * reconciliation made the sale and it started selling, leaves it alone.
 *
 * A 202 promises the order will be written: acknowledged writes must
 * survive a Redis crash (async_redis_durable()), or the operator accepts
 * losing them (SECKILL_ASYNC_ACCEPT_LOSS=1). They must also survive a
 * failover to a replica: a batch is answered 202 only once the
 * primary's replicas have it (WAIT, pipelined behind the script); a
 * batch they do not confirm in time is answered "outcome unknown", since
 * it may yet replicate and be written, or be lost with the primary.
 *
 * A cancelled or expired order gives its unit back in MySQL first, and
 * then in Redis (async_units_return()). The return names the order: only
 * the order its user holds now (holders) gives a unit back, so a return
 * repeated, or late after the user bought again, changes nothing. The
 * transaction that closes an async sale's order records the return as
 * owed in MySQL; the record goes once Redis has the unit, and until then
 * the writer tries again (a COMMIT whose answer was lost, Redis down, a
 * crash in between): Redis and MySQL agree again without a rebuild.
 *
 * An operator's control (a pause, a resume, a stop, a restock, an edit
 * before the begin) commits in MySQL first, bumping the sale row's
 * revision, and then brings Redis up to that revision in one script
 * (async_sale_control()): the halt, the window, and the restocks, each
 * added to initial and stock together. The script carries the whole
 * state of its revision, and Redis keeps the highest it saw, so scripts
 * retried, or run out of order by two controls, leave the newest; the
 * reconciliation runs it too for a revision MySQL has and Redis lacks
 * (an instance that died in between). Until it runs, the reconciliation
 * reads the units the two sides' "restocked" differ by as on their way,
 * not as a disagreement (compare.h).
 *
 * One file per job: scripts.c is the Redis side of a sale (the scripts a
 * purchase, a preheat and a return run, the lookups of orders on their
 * way); writer.c the writer thread; reconcile.c the reconciliation and
 * rebuilds it runs; compare.c the comparison they decide on. The MySQL
 * side is store/async_orders.c.
 */
#ifndef SECKILL_ASYNC_H
#define SECKILL_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "common/redis_link.h"
#include "lock/lock.h"
#include "store/store.h"

enum async_outcome {
    ASYNC_OK,          /* sold: the order is in the stream */
    ASYNC_SOLD_OUT,    /* no unit left */
    ASYNC_DUPLICATE,   /* the user has an active order */
    ASYNC_NOT_STARTED, /* before the sale's begin (Redis' clock) */
    ASYNC_ENDED,       /* at or after its end */
    ASYNC_NOT_READY,   /* the sale's state is missing or being rebuilt */
    ASYNC_PAUSED,      /* an operator paused the sale */
    ASYNC_BACKLOG,     /* too many orders wait for MySQL: retry */
    /* Sold on the primary, but its replicas did not confirm the batch in
     * time: the order may be written, or lost by a failover. */
    ASYNC_UNCONFIRMED,
};

/* How a batch is confirmed before it is answered: replicas of the
 * primary that must have it (0: none), within wait_ms. */
struct async_confirm {
    unsigned replicas;
    unsigned wait_ms;
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
int async_sale_preheat(struct redis_link *rl, int64_t voucher_id,
                       int64_t begin_s, int64_t end_s, int64_t stock,
                       int64_t stamp);

/*
 * Bring voucher_id's Redis state up to the control state c committed in
 * MySQL (store.h, store_sale_control), in one script: unless Redis has
 * c->revision or a later one, its halt, window and restocks become c's,
 * the restocks' difference added to initial and stock together. 1
 * applied; 0 it had it already (or a later one); -ENOENT no state in
 * Redis (a rebuild makes it from MySQL, controls included); -EBUSY
 * frozen for a rebuild (try again: the rebuild's snapshot of MySQL may
 * predate the control); or -errno.
 */
int async_sale_control(struct redis_link *rl, int64_t voucher_id,
                       const struct store_sale_control *c);

/* Remove voucher_id's sale from Redis (a voucher deleted before its
 * begin: no order can be in flight). 0 or -errno. */
int async_sale_forget(struct redis_link *rl, int64_t voucher_id);

/*
 * An async sale's window from its Redis state (for a purchase when MySQL
 * cannot say: the sale goes on without it). 0, -ENOENT (no async sale of
 * that id in Redis), or -errno.
 */
int async_sale_window(struct redis_link *rl, int64_t voucher_id,
                      int64_t *begin_s, int64_t *end_s);

/* The most purchases async_purchase() takes at once. */
#define ASYNC_PURCHASE_BATCH_MAX 256

/*
 * Sell voucher_id to users[i] as order order_ids[i], i < n (at most 256),
 * in one script, in that order, and add the sale to the index of sales
 * with work in the same round trip (on a cluster, where the index is in
 * another slot, in one more once the script answered). out[i] is each one's
 * outcome (all the same for NOT_STARTED, ENDED, NOT_READY and BACKLOG: the
 * stream holds backlog_max orders or more). With confirm (may be NULL) asking
 * for replicas, a WAIT follows the script in the same round trip, on the
 * connection that ran it (on a cluster too, after a redirection), and the
 * sales of a batch they did not confirm are UNCONFIRMED. deadline_ms
 * (util_mono_ms(); 0: the link's own budget): on a cluster, until when a
 * script refused while the sale's slot moves is sent again. 0; -EAGAIN when
 * Redis refused the script (an error reply, or on a cluster every node
 * refused it until the deadline: nothing sold); -ENOTCONN or -EACCES when
 * it was never sent (no connection to the sale's primary; nothing sold); or
 * -errno as redis_errno() when the connection failed under the script (the
 * outcome is then unknown).
 */
int async_purchase(struct redis_link *rl, int64_t voucher_id,
                   unsigned backlog_max, const int64_t *order_ids,
                   const int64_t *users, size_t n,
                   const struct async_confirm *confirm, int64_t deadline_ms,
                   enum async_outcome *out);

/*
 * Orders orders[i] of users[i], i < n, of voucher_id were cancelled or
 * expired in MySQL: their units go back on sale in Redis and their users
 * may buy again, in one pipelined round trip on st's Redis. Each order
 * gives its unit back once: a second call, or one for an order its user
 * no longer holds, changes nothing. The returns Redis confirmed (or that
 * it had already) have their owed record dropped in MySQL
 * (store_unit_returns_done()); the others stay owed, and the writer
 * tries them again (also while the sale is frozen for a rebuild). A sync
 * voucher has no sale in Redis: nothing happens. *returned (may be NULL):
 * how many units went back now. 0, or -errno when Redis failed (the
 * records stay).
 */
int async_units_return(struct store *st, int64_t voucher_id,
                       const int64_t *orders, const int64_t *users, size_t n,
                       size_t *returned);

/* An async sale's order on its way to MySQL (its 202 was answered, or
 * its outcome was unknown). */
struct async_pending {
    int64_t order_id, voucher_id;
    int64_t accepted_ms; /* Redis' time of the sale */
};

/*
 * The orders of user_id that wait for MySQL, looked for in every sale of
 * the index of sales with work (a round trip for the index, and two for
 * each 256 sales in it): up to max into out, *found of them. 0 or -errno.
 */
int async_pending_of_user(struct redis_link *rl, int64_t user_id,
                          struct async_pending *out, size_t max, size_t *found);

/*
 * Whether order_id waits in the stream of a sale, looked for in every
 * sale of the index of sales with work (a round trip for the index, and
 * one for each 256 sales in it): 0 with *voucher_id, *user_id and
 * *accepted_ms (Redis' time of the sale) set, -ENOENT (not waiting:
 * written already, or never sold), or -errno.
 */
int async_pending_find(struct redis_link *rl, int64_t order_id,
                       int64_t *voucher_id, int64_t *user_id,
                       int64_t *accepted_ms);

/*
 * Whether the Redis of rl keeps every acknowledged write across a crash:
 * appendonly yes with appendfsync always (on a cluster: on every primary
 * of its slot map; why then names the first that does not). 0: it does;
 * -EPERM: it does not (why says what it has); -ENOTSUP: it will not say
 * (CONFIG refused or renamed); another -errno: it cannot say now (a
 * primary did not answer, or no slot map).
 */
int async_redis_durable(struct redis_link *rl, char *why, size_t len);

/* ---- the writer and the reconciliation of one instance ---- */

/* A consumer silent this long has its orders claimed by another. */
#define ASYNC_CLAIM_MS 5000
/* The reconciliation looks at every sale this often, by default. */
#define ASYNC_RECONCILE_MS 2000

struct async_config {
    const struct store_config *store; /* the writer's own store */
    struct lock_client *locks;        /* one reconciler at a time */
    unsigned batch;                   /* orders per MySQL transaction */
    unsigned claim_ms; /* a dead consumer's orders are claimed after */
    /* How often a sale's Redis state is compared with MySQL (0: the
     * default, ASYNC_RECONCILE_MS). */
    unsigned reconcile_ms;
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
    /* Replicas that must confirm a batch (-1: as many as the primary
     * has online or, through sentinels, as many as they know in any
     * state, at most 1; 0: none), within wait_ms (SECKILL_ASYNC_REPLICAS,
     * SECKILL_ASYNC_WAIT_MS). */
    int replicas;
    unsigned wait_ms;
};

struct async;

/* Start this instance's writer thread. Never NULL. */
struct async *async_start(const struct async_config *cfg);

/*
 * Whether this instance may sell async vouchers: accept_loss, or its Redis
 * was durable (async_redis_durable()) at the last look that could tell (at
 * the start, then every couple of seconds; a look that a primary did not
 * answer keeps the verdict before it). Thread-safe, lock-free.
 */
bool async_may_sell(const struct async *a);

/*
 * How this instance confirms a batch now: the configured replicas, or
 * (-1) those its Redis primary reported at the writer's last look
 * (online replicas, at most 1). Thread-safe, lock-free; a NULL a asks
 * for none.
 */
void async_confirm_get(const struct async *a, struct async_confirm *out);

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
