/*
 * rconn.h - Redis plumbing shared by the redis and redlock backends: a
 * connection pool per server, the lock scripts (loaded once per
 * connection, run with EVALSHA, EVAL again after NOSCRIPT), and a pub/sub
 * listener per server that wakes waiters when a lock is released.
 * Internal to lock/.
 *
 * Keys and channels for a lock called NAME:
 *   NAME            the lock: a string holding the owner id, with a TTL
 *   lock:fence      one counter (no TTL) INCR'd at every first acquire;
 *                   shared by all names, so it only grows for each name
 *                   and leaves no per-name key behind
 *   lock-ch:NAME    the channel the release publishes on
 */
#ifndef SECKILL_LOCK_RCONN_H
#define SECKILL_LOCK_RCONN_H

#include <pthread.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "lock/internal.h"

#define RCONN_FENCE_KEY "lock:fence"
#define RCONN_CHANNEL_PREFIX "lock-ch:"

enum rconn_script {
    /* KEYS name, fence; ARGV owner, lease_ms.
     * {1, token} when taken, {0, pttl} when busy. */
    RCONN_ACQUIRE,
    /* KEYS name, channel; ARGV owner. 1 if deleted (and published). */
    RCONN_RELEASE,
    /* KEYS name; ARGV owner, lease_ms. 1 if still ours (TTL reset). */
    RCONN_RENEW,
    /* KEYS fence; ARGV token. Raise the counter to at least token. */
    RCONN_FENCE_RAISE,
    RCONN_NSCRIPTS
};

/* A pool of connections to one server; thread-safe. */
struct rconn_pool {
    pthread_mutex_t mu;
    const struct lock_url *url;
    int host; /* index into url->hosts */
    uint32_t timeout_ms;
    struct rconn_idle {
        redisContext *rc;
        int64_t since_ms;
    } * idle;
    int nidle, cap;
    int64_t next_try_ms; /* back-off after a failed connect */
};

void rconn_pool_init(struct rconn_pool *p, const struct lock_url *url, int host,
                     uint32_t timeout_ms);
void rconn_pool_destroy(struct rconn_pool *p);

/*
 * A connected context (AUTH, SELECT and SCRIPT LOAD done), or NULL with
 * *err set (-ECONNREFUSED, -ETIMEDOUT, -EIO). Give it back with
 * rconn_pool_put(); a context with err set is freed there.
 */
redisContext *rconn_pool_get(struct rconn_pool *p, int *err);
void rconn_pool_put(struct rconn_pool *p, redisContext *rc);

/*
 * Queue EVALSHA of script s with the given keys and args (strings with
 * lengths; argc counts both) on rc without reading the reply. Then
 * rconn_script_reply() reads it, running EVAL if the server answered
 * NOSCRIPT. Returns the reply (caller frees) or NULL with *err set.
 */
int rconn_script_append(redisContext *rc, enum rconn_script s, int nkeys,
                        int argc, const char **argv, const size_t *lens);
redisReply *rconn_script_reply(redisContext *rc, enum rconn_script s, int nkeys,
                               int argc, const char **argv, const size_t *lens,
                               int *err);

/* Map a failed context to an errno (-ETIMEDOUT, -ECONNRESET, ...). */
int rconn_errno(const redisContext *rc);

/*
 * One pub/sub listener per server. All listeners of a client share a
 * struct rconn_hub, so that a waiter can sleep on messages from several
 * servers (RedLock) with one condition variable.
 */
struct rconn_hub {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; broadcast on any message */
};

struct rconn_psub;

void rconn_hub_init(struct rconn_hub *h);
void rconn_hub_destroy(struct rconn_hub *h);

/* Start a listener for one server (its thread connects lazily). */
struct rconn_psub *rconn_psub_new(struct rconn_hub *hub,
                                  const struct lock_url *url, int host,
                                  uint32_t timeout_ms);
void rconn_psub_free(struct rconn_psub *ps);

/*
 * Subscribe to the channel of lock name (refcounted), waiting up to
 * until_ms (monotonic) for the server's confirmation. Returns the
 * channel's message count as the starting generation; a later
 * rconn_psub_changed() with it tells whether a message arrived since.
 * Never fails: without a confirmation the waiter relies on its timer.
 */
uint64_t rconn_psub_subscribe(struct rconn_psub *ps, const char *name,
                              int64_t until_ms);
void rconn_psub_unsubscribe(struct rconn_psub *ps, const char *name);

/*
 * With hub->mu held: has the channel seen a message (or a reconnect, which
 * may have lost one) since *gen? If so, returns 1 and moves *gen on.
 */
int rconn_psub_changed(struct rconn_psub *ps, const char *name, uint64_t *gen);

#endif
