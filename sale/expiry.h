/*
 * expiry.h - the expiry of unpaid orders: a thread that closes, every
 * EXPIRY_POLL_MS, the orders whose pay deadline has passed, in batches
 * (store_orders_expire()), on every instance at once without double work,
 * and gives each closed order's unit back to its sale
 * (sale_units_returned()). With sales sharded over several MySQL
 * primaries, a batch of each shard in turn; and, as often, the sweep of
 * each shard's outbox (store_outbox_move(): refunds and audit records of
 * shard 0 that a crash left behind).
 */
#ifndef SECKILL_EXPIRY_H
#define SECKILL_EXPIRY_H

#include "sale/sale.h"
#include "store/store.h"

/* How often the expiry looks for unpaid orders past their deadline. */
#define EXPIRY_POLL_MS 250

struct expiry;

/* Start the thread, with its own store of sc, for sale s. sc and s must
 * outlive it. Never returns NULL. */
struct expiry *expiry_start(struct sale *s, const struct store_config *sc);

/* Stop the thread (a batch in progress finishes) and free x. NULL ok. */
void expiry_stop(struct expiry *x);

#endif
