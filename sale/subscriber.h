/*
 * subscriber.h - a thread that listens to one Redis pub/sub channel for
 * as long as it runs: it connects (with the store's Redis settings, and to
 * the new master after a Sentinel failover; on a Redis Cluster with
 * SSUBSCRIBE at the owner of the channel's slot, and again at the new
 * owner when that node gives the slot away), subscribes, hands each
 * message to its owner, and starts over after any failure, with a
 * back-off. Used by the caches that other instances' changes invalidate:
 * the voucher cache (sale/vcache.c) and the sessions' view
 * (sale/sessions.c).
 *
 * A subscriber cannot tell which messages it missed while it was away,
 * so each (re)subscription is reported (on_subscribed): the owner then
 * drops or reloads what it keeps. Messages published after that call
 * returned are all delivered, in order, unless the connection breaks
 * (and then on_subscribed comes again).
 */
#ifndef SECKILL_SALE_SUBSCRIBER_H
#define SECKILL_SALE_SUBSCRIBER_H

#include <stdbool.h>
#include <stddef.h>

#include "store/store.h"

struct subscriber_config {
    const struct store_config *store; /* its Redis; outlives the thread */
    const char *channel;              /* copied */
    const char *what;                 /* for the log: "voucher cache" */
    /* On the subscriber's thread: after each SUBSCRIBE was confirmed,
     * before any message of that subscription. */
    void (*on_subscribed)(void *ctx);
    /* One message of len bytes (NUL-terminated). */
    void (*on_message)(void *ctx, const char *msg, size_t len);
    /* When > 0, on_tick(ctx) is called about every tick_ms, connected
     * or not. */
    unsigned tick_ms;
    void (*on_tick)(void *ctx);
    void *ctx;
};

struct subscriber;

/* Start the thread. NULL when it could not be started (logged). */
struct subscriber *subscriber_start(const struct subscriber_config *cfg);

/* Stop and join the thread, and free s. Accepts NULL. */
void subscriber_stop(struct subscriber *s);

/* True while s is subscribed (messages reach it). Accepts NULL (false). */
bool subscriber_listening(const struct subscriber *s);

#endif
