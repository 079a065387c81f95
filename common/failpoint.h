/*
 * failpoint.h - named places in the purchase path (and around it) where
 * a test build can crash, stop or stall the process on purpose
 * (tests/faults). Compiled in only with -DSECKILL_FAILPOINTS (`make
 * FAILPOINTS=1`, into build/fp); otherwise FAILPOINT() is an empty
 * statement and costs nothing.
 *
 * A failpoint build reads SECKILL_FAILPOINTS on the first hit of any
 * point: a comma-separated list of name=action[@n], where action is
 *
 *   kill       SIGKILL the process (a crash: no cleanup, no reply)
 *   stop       SIGSTOP the process, all threads, until a SIGCONT
 *   sleep:MS   block the calling thread for MS milliseconds
 *   fail       make the step at that point fail, or leave it out, as the
 *              point's comment says (only points written
 *              FAILPOINT_FAILS(); elsewhere it does nothing)
 *
 * and @n makes it fire on the n-th time that point is reached (default
 * the first), once; %n instead makes it fire on every n-th time (the
 * n-th, the 2n-th, ...). Example:
 *
 *   SECKILL_FAILPOINTS="after_commit=kill@20,after_lock=sleep:3000"
 *   SECKILL_FAILPOINTS="async_sale_drop=fail%1000,unit_return_skip=fail@2"
 *   SECKILL_FAILPOINTS="restock_apply_twice=fail,waitroom_rate_only=fail%2"
 *
 * The points: after_lock (sale/batch.c, a batch's locks are held),
 * after_update (store/purchase.c, the stock UPDATE ran, no
 * COMMIT yet), after_commit (COMMIT succeeded, no reply yet),
 * expire_before_commit (store/lifecycle.c, an expiry batch closed its
 * orders and has not committed), expire_after_commit, and those of the
 * asynchronous mode: async_after_script (sale/batch.c, Redis sold a
 * batch, no reply yet), async_write_before_commit (store/async_orders.c, a
 * writer's batch is inserted and the stock row updated, no COMMIT yet),
 * async_write_after_commit (async/writer.c, the batch is committed,
 * not yet acknowledged in the stream) and async_before_preheat
 * (sale/vouchers.c, a new async voucher is committed in MySQL and
 * its sale not yet put into Redis); with sharded sales,
 * shard0_rows_before_move (store/shard.c: rows of shard 0 read from a
 * shard's outbox, none copied yet) and shard0_rows_before_forget (one
 * copied to shard 0, not yet deleted from the outbox), pay_txn_reserved
 * (store/shard.c: payments' transaction ids reserved for their orders
 * on shard 0, committed there when the orders are on another shard,
 * and the payments not yet recorded), and reconcile_between_reads
 * (async/reconcile.c: the reconciliation has read a sale's Redis state,
 * not yet MySQL's).
 * Points that can fail: cancel_commit_unanswered and
 * expire_commit_unanswered (store/lifecycle.c: the COMMIT of a cancel, of
 * an expiry batch, succeeded and its answer is taken as lost,
 * -EINPROGRESS), and unit_return_fails (async/scripts.c: one order's
 * return of its unit to an async sale in Redis fails as if Redis had
 * refused it). Four more plant bugs on purpose, for a checker that
 * must notice them (make soak SOAK_CANARY=1): async_sale_drop
 * (sale/batch.c: a purchase of an async sale is answered 202 without
 * going to the sale's script, so its order never reaches the stream),
 * unit_return_skip (async/scripts.c: one order's unit is taken as
 * given back to the sale's Redis state, and no longer owed, without
 * being given back), restock_apply_twice (store/controls.c: a restock
 * adds its units to the stock and the initial stock twice, in its one
 * transaction) and waitroom_rate_only (store/waitroom.c: a waiting
 * room's place is admitted by the rate alone, not after its buyer
 * joined, so a latecomer's ticket has expired when it is given).
 * A malformed list aborts the process: a test must not run with a
 * failpoint it did not get.
 */
#ifndef SECKILL_FAILPOINT_H
#define SECKILL_FAILPOINT_H

#include <stdbool.h>

#ifdef SECKILL_FAILPOINTS
/*
 * Count a hit of the point called name and run its action if this is the
 * hit it was armed for. Returns true when that action is "fail": the
 * caller then fails the step. Thread-safe.
 */
bool failpoint_hit(const char *name);
#define FAILPOINT(name) ((void)failpoint_hit(name))
#define FAILPOINT_FAILS(name) failpoint_hit(name)
#else
#define FAILPOINT(name) ((void)0)
#define FAILPOINT_FAILS(name) false
#endif

#endif
