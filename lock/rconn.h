/*
 * rconn.h - Redis plumbing shared by the redis and redlock backends: one
 * multiplexed connection per server, the lock scripts (loaded once per
 * connection, run with EVALSHA, EVAL again after NOSCRIPT), and a pub/sub
 * listener per server that wakes waiters when a lock is released. On a
 * Redis Cluster (the redis backend with a redis-cluster:// URL) there is
 * one of each per primary, and struct rconn_cluster (rcluster.c, at the
 * end of this file) routes each call to the owner of its slot; the
 * scripts then publish with SPUBLISH and the listeners SSUBSCRIBE.
 * Internal to lock/.
 *
 * Keys and channels. Every name starts with the client's prefix P (none
 * by default). A lock's key K is P NAME for a mutex, P lock-fair:NAME,
 * P lock-rw-w:NAME (both sides of a read-write lock) or P lock-sem:NAME;
 * every other name of the lock carries {T}, where T is the part of K that
 * decides its hash slot (K's own hash tag, or all of K), so that a Redis
 * Cluster keeps one lock's keys and channels in one slot and each script
 * runs there:
 *   K                  the lock: a string holding the owner id, with a
 *                      TTL (the semaphore: a sorted set, below)
 *   P lock-fence:{T}   the fencing counter: at each first acquire it
 *                      becomes the larger of itself + 1 and the server's
 *                      clock in microseconds, and lives as long as the
 *                      lease; so the token grows for each name (also past
 *                      tokens of the older, shared "lock:fence" counter,
 *                      which were far smaller) and no key stays behind,
 *                      as long as the server's clock does not step back
 *                      (two holders of one name are at least a script
 *                      apart: more than a microsecond)
 *   P lock-ch:{T}      the channel the release publishes on (SPUBLISH
 *                      on a cluster: sharded pub/sub, in T's slot)
 *   P lock-rel:{T}:OWNER  the last release's receipt: the hold's token,
 *                      for 5 * timeout_ms, so that a release asked again
 *                      after a lost answer answers the same
 *                      (lock-rel:r:{T}:OWNER and lock-rel:w:{T}:OWNER for
 *                      the two sides of a read-write lock, which share the
 *                      owner)
 * The other kinds (times are the server's clock, TIME, in ms):
 *   P lock-fair-q:{T}  fair lock: its waiters' owner ids, first in line
 *   P lock-fair-t:{T}  sorted set: waiter -> check-in deadline
 *   P lock-ch:{T}:w:OWNER  wakes that one waiter
 *   P lock-rw-r:{T}    read-write lock: sorted set reader -> lease deadline
 *   P lock-rw-q:{T}    sorted set: waiting writer -> check-in deadline
 *   K = P lock-sem:NAME  semaphore: sorted set holder -> lease deadline
 * The sorted sets and lists carry a TTL as long as their longest entry,
 * so an abandoned lock leaves nothing behind.
 */
#ifndef SECKILL_LOCK_RCONN_H
#define SECKILL_LOCK_RCONN_H

#include <pthread.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "common/redis.h"
#include "common/redis_cluster.h"
#include "lock/internal.h"

/* The kinds' key prefixes (after the client's). */
#define RCONN_FAIR_KEY "lock-fair:"
#define RCONN_RW_KEY "lock-rw-w:"
#define RCONN_SEM_KEY "lock-sem:"
/* What the names tagged with a lock's key start with (after P). */
#define RCONN_FENCE "lock-fence:"
#define RCONN_CHANNEL "lock-ch:"
#define RCONN_RECEIPT "lock-rel:"
#define RCONN_FAIR_QUEUE "lock-fair-q:"
#define RCONN_FAIR_TIMES "lock-fair-t:"
#define RCONN_RW_READERS "lock-rw-r:"
#define RCONN_RW_WAITING "lock-rw-q:"

/*
 * The backends' prepare hook: set l->rkey (see above). -EINVAL for a name
 * no tag can carry.
 */
int rconn_lock_prepare(struct lock *l);

/*
 * A name of l tagged with its key, into buf (LOCK_RKEY_MAX bytes): P,
 * what, {T}, suffix (may be NULL). Returns its length.
 */
size_t rconn_lock_name(const struct lock *l, char *buf, const char *what,
                       const char *suffix);

enum rconn_script {
    /* KEYS name, fence; ARGV owner, lease_ms.
     * {1, token} when taken, {0, pttl} when busy. */
    RCONN_ACQUIRE,
    /* KEYS name, channel; ARGV owner. 1 if deleted (and published). */
    RCONN_RELEASE,
    /* KEYS name; ARGV owner, lease_ms. 1 if still ours (TTL reset). */
    RCONN_RENEW,
    /* KEYS fence; ARGV token, keep_ms. Raise the counter to at least
     * token (then it lives keep_ms). */
    RCONN_FENCE_RAISE,
    /* No keys: 1. A health check that also proves scripts run. */
    RCONN_PING,
    /* KEYS name, channel, receipt; ARGV owner, token, receipt_ms.
     * RCONN_RELEASE that leaves a receipt: 1 if deleted now or by an
     * earlier call for the same token, else 0. */
    RCONN_RELEASE_ONCE,
    /* KEYS lock, queue, times, fence; ARGV owner, lease_ms, checkin_ms
     * (0: do not queue). {1, token} when taken, {0, pttl} when busy. */
    RCONN_FAIR_ACQUIRE,
    /* KEYS lock, queue, times, receipt; ARGV owner, token, receipt_ms,
     * wake channel prefix. As RCONN_RELEASE_ONCE, and wakes the first
     * live waiter only. */
    RCONN_FAIR_RELEASE,
    /* KEYS lock, queue, times; ARGV owner, wake channel prefix. A waiter
     * gives up, or an acquire of unknown outcome is undone: leave the
     * queue, delete the lock if it is ours, wake the next if the lock is
     * free. 1. */
    RCONN_FAIR_CANCEL,
    /* KEYS writer, readers, writers waiting, fence; ARGV owner, lease_ms.
     * {1, token}, or {0, ms to wait or -1} while a writer holds or
     * waits (the owner's own write lock does not count: downgrade). */
    RCONN_RW_READ,
    /* KEYS writer, readers, writers waiting, fence; ARGV owner, lease_ms,
     * checkin_ms (0: do not queue). {1, token}, or {0, ms to wait}. */
    RCONN_RW_WRITE,
    /* KEYS writer, writers waiting, channel; ARGV owner. A writer gives
     * up, or its acquire of unknown outcome is undone: leave the waiting
     * set, delete the writer if it is ours, publish. 1. */
    RCONN_RW_CANCEL,
    /* KEYS holders, fence; ARGV owner, lease_ms, permits. {1, token}, or
     * {0, ms until the first lease ends}. */
    RCONN_SEM_ACQUIRE,
    /* KEYS holders, channel, receipt; ARGV owner, token, receipt_ms,
     * always (1: publish at every release; else when the set empties).
     * Release a member of a sorted set of leases (readers, semaphore). */
    RCONN_ZRELEASE,
    /* KEYS holders; ARGV owner, lease_ms. 1 if its lease was still on
     * (now renewed), else 0. */
    RCONN_ZRENEW,
    /* KEYS holders, channel; ARGV owner. Drop the owner's lease from a
     * sorted set of leases and publish: undoes a reader's or a permit's
     * acquire of unknown outcome. 1. */
    RCONN_ZLEAVE,
    /* KEYS name; ARGV owner, lease_ms. RCONN_ACQUIRE without a fencing
     * token, for lock_acquire_many(): {1, 0} when taken, {0, pttl} when
     * busy. */
    RCONN_TAKE,
    RCONN_NSCRIPTS
};

/* Not a script: rconn_mux_send_command()'s calls. */
#define RCONN_COMMAND RCONN_NSCRIPTS

/* Most keys and args a script call takes. */
#define RCONN_ARGS_MAX 8

/*
 * One connection to one server, shared by every thread of the client
 * (like Lettuce's): calls are written in order as they come and their
 * replies read back in the same order by whichever waiting caller is
 * reading at the time (leader/follower, no extra thread), so concurrent
 * lock operations travel pipelined and Redis serves them in batches.
 * Thread-safe. The connection opens on first use (common/redis.h:
 * redis_connect) and is checked before reuse after a second idle.
 *
 * Each call's reply is due timeout_ms after its command was written. A
 * call whose reply is late fails alone with -ETIMEDOUT; its reply, when
 * it comes, is dropped. The connection itself is dropped only when it is
 * broken: end of file, a protocol error, or nothing at all received for
 * RCONN_DEAD_TIMEOUTS timeouts (at least a second) while replies are
 * owed; then every call in flight fails and the next call reconnects. A
 * failed connect is not retried for 200 ms (a timeout, if the server
 * accepted but never answered); calls in that back-off get its error.
 */
struct rconn_mux;

#define RCONN_DEAD_TIMEOUTS 4

/* A mux for srv (its strings must outlive the mux). sharded: srv is a
 * node of a Redis Cluster, and the scripts publish with SPUBLISH instead
 * of PUBLISH (sharded pub/sub). Never NULL. */
struct rconn_mux *rconn_mux_new(const struct redis_server *srv,
                                uint32_t timeout_ms, int sharded);
void rconn_mux_free(struct rconn_mux *m);

/* A primary of a Redis Cluster (rcluster.c). */
struct rconn_node;

/* One call in flight: the caller's, usually on its stack, until
 * rconn_mux_wait() returns. Fields are private to rconn.c. */
struct rconn_call {
    struct rconn_slot *slot; /* its place in the reply queue */
    enum rconn_script script;
    int nkeys, argc, eval;
    const char **argv;
    const size_t *lens;
    redisReply *reply;
    int err, done;
    pthread_cond_t cv;
    struct rconn_mux *mux; /* where it was sent */
    /* Not NULL (set by the caller after sending): a MOVED, ASK, TRYAGAIN
     * or CLUSTERDOWN reply is read into it and rconn_mux_wait() fails
     * with -EAGAIN, without logging, for the caller to follow. */
    struct redis_cluster_redirect *redirect;
    int asking; /* ASKING is written right in front of the command */
    /* rcluster.c's: where a redirection is read, the call's slot, how
     * many redirections it followed, the node it is on (held until
     * rconn_cluster_wait() returns). */
    struct redis_cluster_redirect rd;
    unsigned cslot;
    int redirects;
    struct rconn_node *node;
};

/*
 * Send EVALSHA of script s with nkeys keys followed by the args (argc
 * strings with lengths, at most RCONN_ARGS_MAX; they must stay valid until
 * rconn_mux_wait() returns). Returns 0 once the command is on its way
 * (then wait for it), or an errno when it was not sent (-ECONNREFUSED,
 * -ETIMEDOUT, -ECONNRESET, -EACCES: the server refused the credentials)
 * and then the call must not be waited for.
 */
int rconn_mux_send(struct rconn_mux *m, struct rconn_call *call,
                   enum rconn_script s, int nkeys, int argc, const char **argv,
                   const size_t *lens);

/*
 * Send a call again, as it was set up by rconn_mux_send() (its script,
 * keys and args, its redirect), on m, with ASKING in front when asking:
 * after a cluster redirection, whose rconn_mux_wait() has returned. As
 * rconn_mux_send().
 */
int rconn_mux_resend(struct rconn_mux *m, struct rconn_call *call, int asking);

/*
 * Send a plain command (argc strings with lengths, at most
 * RCONN_ARGS_MAX + 3) on the shared connection, for commands a script may
 * not run, such as WAIT after a lock script. As rconn_mux_send().
 */
int rconn_mux_send_command(struct rconn_mux *m, struct rconn_call *call,
                           int argc, const char **argv, const size_t *lens);

/*
 * Wait for the reply of a sent call, at most about the timeout, running
 * EVAL if the server answered NOSCRIPT. Returns the reply (the caller
 * frees it with freeReplyObject) or NULL with *err set: -ETIMEDOUT (the
 * command may still run), -ECONNRESET (it may have run), or -EIO for an
 * error reply (logged).
 */
redisReply *rconn_mux_wait(struct rconn_mux *m, struct rconn_call *call,
                           int *err);

/*
 * Send script s (keys and args as above, copied) without waiting for its
 * reply, which is dropped (an error reply is logged). For undoing a
 * command whose outcome is unknown, such as an acquire whose reply timed
 * out: on a live connection it travels behind that command, so Redis runs
 * it after; when the connection is down it is kept (a bounded number) and
 * sent first on the next connection. Use it only for commands that are
 * harmless to run twice.
 */
void rconn_mux_send_detached(struct rconn_mux *m, enum rconn_script s,
                             int nkeys, int argc, const char **argv,
                             const size_t *lens);

/*
 * Check the server answers scripts (RCONN_PING), within the timeout.
 * Returns 0 or an errno as rconn_mux_send()/rconn_mux_wait().
 */
int rconn_mux_ping(struct rconn_mux *m);

/*
 * The servers of a redis:// or redlock:// lock URL, host by host, into
 * out[0..u->nhosts); of a redis-sentinel:// URL, its one master into
 * out[0] (release it with redis_server_release()). Returns 0, or -EINVAL
 * (logged) when a database, a master's name or a user is malformed.
 */
int rconn_url_servers(const struct url *u, struct redis_server *out);

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

/* Start a listener for srv (its strings must outlive the listener; its
 * thread connects lazily). sharded: srv is a node of a Redis Cluster, and
 * channels are subscribed with SSUBSCRIBE (sharded pub/sub: only the
 * owner of a channel's slot accepts it; when the slot leaves the node the
 * subscription ends, and its waiters are woken to subscribe again where
 * it went). */
struct rconn_psub *rconn_psub_new(struct rconn_hub *hub,
                                  const struct redis_server *srv,
                                  uint32_t timeout_ms, int sharded);
/* Ask ps's thread to end, without waiting for it (a connect it is in
 * the middle of finishes first); nobody may subscribe on ps any more.
 * Takes hub->mu. */
void rconn_psub_stop(struct rconn_psub *ps);
/* Stop ps, wait for its thread to end, and free it. Accepts NULL. */
void rconn_psub_free(struct rconn_psub *ps);

/*
 * Subscribe to channel name (refcounted), waiting up to
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

/*
 * The redis backend on a Redis Cluster (rcluster.c): one multiplexed
 * connection (sharded scripts) and one sharded listener per primary, made
 * as the slot map (CLUSTER SHARDS, asked of the seeds and then of the
 * known primaries) or a redirection names them, and kept while the map
 * names them: a primary that a new map leaves out (a pod that came back
 * at another address) is forgotten, its connection closed and its
 * listener's thread stopped, as soon as no call in flight and no waiter
 * on its listener uses it any more. A call
 * goes to the primary that owns its slot (its first key's, which carries
 * the lock's hash tag); rconn_cluster_wait() follows a MOVED reply (the
 * slot's owner is updated at once, the whole map asked for again before
 * the next call), an ASK (sent once more to the target behind ASKING),
 * and TRYAGAIN or CLUSTERDOWN (sent again after a short, growing pause)
 * within the client's timeout. A call that cannot be sent (the owner is
 * down) asks for the map again and tries the new owner within the
 * timeout; a connection that breaks under a call marks the map stale,
 * and the call fails as on one server (its outcome is unknown).
 * Thread-safe.
 */
struct rconn_cluster;

/* What a cluster client has followed since it was made. */
struct rconn_cluster_stats {
    uint64_t moved, ask, tryagain, refresh;
};

/* A client of the cluster with seeds[0..nseeds) (copied; their strings,
 * the credentials of seeds[0] for every node, must outlive it); its
 * listeners share hub. Nothing connects before the first call. */
struct rconn_cluster *rconn_cluster_new(const struct redis_server *seeds,
                                        int nseeds, struct rconn_hub *hub,
                                        uint32_t timeout_ms);
void rconn_cluster_free(struct rconn_cluster *cl);

/* As rconn_mux_send(), on the owner of slot. */
int rconn_cluster_send(struct rconn_cluster *cl, struct rconn_call *call,
                       unsigned slot, enum rconn_script s, int nkeys, int argc,
                       const char **argv, const size_t *lens);

/* As rconn_mux_wait(), following the cluster's redirections. */
redisReply *rconn_cluster_wait(struct rconn_cluster *cl,
                               struct rconn_call *call, int *err);

/* As rconn_mux_send_detached(), on the owner of slot (dropped when the
 * map names none). */
void rconn_cluster_send_detached(struct rconn_cluster *cl, unsigned slot,
                                 enum rconn_script s, int nkeys, int argc,
                                 const char **argv, const size_t *lens);

/* The listener of slot's owner (it changes when the slot moves: a waiter
 * asks again at each wake-up), or NULL when no map could be had. It is
 * held for the caller, who gives it back with rconn_cluster_psub_put()
 * once it is done with it (after unsubscribing). */
struct rconn_psub *rconn_cluster_psub(struct rconn_cluster *cl, unsigned slot);

/* Give back a listener rconn_cluster_psub() returned. Accepts NULL. */
void rconn_cluster_psub_put(struct rconn_cluster *cl, struct rconn_psub *ps);

/* Check every primary that owns slots answers scripts (asking for the
 * map first when there is none yet, or it is stale). 0 or an errno. */
int rconn_cluster_ping(struct rconn_cluster *cl);

struct rconn_cluster_stats rconn_cluster_stats(struct rconn_cluster *cl);

/*
 * Install the slot map m (borrowed) as a refresh does once a node has
 * answered CLUSTER SHARDS: every slot goes to the primary m names, and
 * the map is fresh. Also the way to give cl a map without a cluster.
 */
void rconn_cluster_map_install(struct rconn_cluster *cl,
                               const struct redis_cluster_map *m);

/* How many nodes cl keeps, each with a connection and a listener thread:
 * those of the map, those redirections named since, and those a newer
 * map left out that are still in use or whose thread is not yet
 * joined. */
int rconn_cluster_nodes(struct rconn_cluster *cl);

#endif
