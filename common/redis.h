/*
 * redis.h - the Redis plumbing every module shares: which server to talk
 * to (from a URL), connecting and authenticating to it, mapping a failed
 * connection to an errno, and the Lua script cache.
 *
 * Every connection the service opens (the store's per-thread connection,
 * the lock's multiplexed ones, every pub/sub listener) goes through
 * redis_connect(), so a password is sent the same way everywhere and an
 * AUTH refusal reads the same everywhere: -EACCES.
 *
 * Redis Sentinel. A server may be named by its sentinels instead of its
 * address: redis-sentinel://[[user]:pass@]h1:p1,h2:p2,h3:p3/<master>[/db]
 * (port 26379 when absent). Then every connect first asks the sentinels
 * (the one that answered last first) for the master's address with
 * SENTINEL get-master-addr-by-name, connects there, and checks with ROLE
 * that the server calls itself a master: a connect never ends on a
 * replica. A failover is followed in three ways, all through the same
 * connect:
 *   - a connection to the old master breaks (it died, or Sentinel killed
 *     its clients when it demoted it): the user reconnects;
 *   - a watcher thread, one per sentinel object, subscribed to
 *     +switch-master on one sentinel, and asking again every few seconds
 *     in case it missed the message, bumps the object's epoch when the
 *     master's address changes; so does any connect that finds a new
 *     address. Every connection user remembers the epoch it connected
 *     under (redis_server_epoch(), read before redis_connect()) and
 *     drops a connection whose epoch is past, even when the old master
 *     is still reachable (a network partition).
 * Sentinels that ask for a password (NOAUTH) get the URL's credentials.
 */
#ifndef SECKILL_REDIS_H
#define SECKILL_REDIS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <hiredis/hiredis.h>

#include "common/url.h"

/* The sentinels of one master, shared by every connection to it. */
struct redis_sentinel;

/* One Redis server and how to log in to it. Strings are borrowed. */
struct redis_server {
    const char *host; /* with a sentinel: the master's name, for logs */
    unsigned port;    /* with a sentinel: 0 */
    const char *user; /* NULL: AUTH with the password only */
    const char *pass; /* NULL: no AUTH */
    unsigned db;      /* SELECTed when not 0 */
    /* Not NULL: the address is asked of these sentinels at each connect
     * (borrowed from whoever made it with redis_server_from_url()). */
    struct redis_sentinel *sentinel;
};

/* The URL scheme of a Redis Cluster, named by some of its nodes. */
#define REDIS_CLUSTER_SCHEME "redis-cluster"

/* Highest database number a URL may name. */
#define REDIS_DB_MAX 15
/* The URL scheme of a server found through its sentinels. */
#define REDIS_SENTINEL_SCHEME "redis-sentinel"
#define REDIS_SENTINEL_PORT 26379

/*
 * The server of host i of a parsed redis:// or redlock:// URL: port 6379
 * when absent, the path a database number 0..REDIS_DB_MAX (or empty).
 * For a redis-cluster://[[user]:pass@]h1:p1,h2:p2,...[/][?options] URL
 * host i is one seed node of the cluster (common/redis_cluster.h), port
 * 6379 when absent; a database number is refused (a cluster has only
 * database 0).
 * For a redis-sentinel:// URL the one master its path names (host must be
 * 0; every host is a sentinel): out->sentinel is then a new object,
 * released with redis_server_release(). out's strings point into u.
 * Returns 0, or -EINVAL with a reason in err.
 */
int redis_server_from_url(const struct url *u, int host,
                          struct redis_server *out, char *err, size_t errlen);

/*
 * Free what redis_server_from_url() made for s (its sentinel object and
 * watcher thread) and clear s->sentinel. Every copy of s must be out of
 * use. Accepts a server without a sentinel, and NULL.
 */
void redis_server_release(struct redis_server *s);

/*
 * How many times the master of s has been seen to change (0 without a
 * sentinel). Read it before redis_connect(); a connection made under an
 * older epoch than the current one must be dropped and made again.
 * Thread-safe, lock-free.
 */
unsigned redis_server_epoch(const struct redis_server *s);

/*
 * How many replicas of s's master its sentinels know, in any state (down,
 * syncing, online): every one a failover could promote. Asked with the
 * master's address (at each connect and every few seconds by the
 * watcher). -1 for a server without sentinels, or before they answered.
 */
int redis_server_replicas(const struct redis_server *s);

/*
 * Remembers what the last connect of one connection user logged, so that
 * a server that stays down (or keeps refusing the password) is logged
 * once, not at every retry, and its recovery once. Zero-initialise.
 */
struct redis_connect_log {
    int last_err; /* 0: the last connect worked (or none yet) */
};

/*
 * Connect to s, with keepalive, AUTH and SELECT, each step bounded by the
 * timeouts (milliseconds; io_ms is also left on the context for later
 * calls). With a sentinel, ask it for the master first and check ROLE
 * last (and start its watcher thread, once). who names the connection's
 * user in log lines ("store", "lock", ...); log (may be NULL: log every
 * failure) keeps them to one line per change. Returns the context, or
 * NULL with *err set:
 *   -ECONNREFUSED, -ETIMEDOUT, -ECONNRESET  cannot reach the server (or
 *            no sentinel answered, none knows the master, or the server
 *            it named says it is a replica);
 *   -EACCES  the server refused the credentials (or wants some);
 *   -EIO     any other error reply (SELECT of a missing database, ...).
 */
redisContext *redis_connect(const struct redis_server *s, unsigned connect_ms,
                            unsigned io_ms, const char *who,
                            struct redis_connect_log *log, int *err);

/* Map the error of a failed context to an errno (-ETIMEDOUT, ...). */
int redis_errno(const redisContext *rc);

/* True for the error replies that mean "not logged in" (-EACCES). */
bool redis_reply_is_auth_error(const redisReply *r);

/*
 * A Lua script, run with EVALSHA once its SHA-1 is known (learnt from
 * SCRIPT LOAD, once per process: the SHA is the same on every server),
 * and with EVAL before that and after a NOSCRIPT reply (a restarted
 * server, SCRIPT FLUSH), which caches it on the server again. Define each
 * as a static with REDIS_SCRIPT("...") and share it between threads.
 */
struct redis_script {
    const char *src;
    char sha[41];
    atomic_int ready; /* sha is set */
};
#define REDIS_SCRIPT(source)                                                   \
    {                                                                          \
        .src = (source)                                                        \
    }

/*
 * Learn s's SHA-1 with SCRIPT LOAD on rc (no round trip once known).
 * Returns 0, or -errno as redis_errno() / -EIO for an error reply.
 */
int redis_script_load(redisContext *rc, struct redis_script *s);

/* The most keys and arguments a script takes (an async sale's batch of
 * 256 purchases needs 519). */
#define REDIS_SCRIPT_ARGS_MAX 600

/*
 * Run s on the blocking connection rc with nkeys keys followed by the
 * other arguments (argc strings in all, with lengths; lens may be NULL
 * for NUL-terminated strings). Returns the reply, which the caller frees;
 * error replies other than NOSCRIPT are returned as they are. NULL when
 * the connection failed (*err as redis_errno(); the context is then
 * unusable).
 */
redisReply *redis_script_run(redisContext *rc, struct redis_script *s,
                             int nkeys, int argc, const char **argv,
                             const size_t *lens, int *err);

/*
 * redis_script_run(), followed in the same round trip by the commands
 * then[0..nthen), each a whole command as redisFormatCommand() makes it
 * (with no NUL byte in it), such as a WAIT for replicas: then_replies[i]
 * is each one's reply, the caller's to free, or NULL when it was lost
 * with the connection (the script's reply is returned still). When Redis
 * has forgotten the script it is sent again as EVAL, and the commands
 * after it again too.
 */
redisReply *redis_script_run_then(redisContext *rc, struct redis_script *s,
                                  int nkeys, int argc, const char **argv,
                                  const size_t *lens, const char *const *then,
                                  size_t nthen, redisReply **then_replies,
                                  int *err);

/*
 * Format the EVALSHA of s (or EVAL, when eval is true or the SHA is not
 * known yet) into a new command buffer for a pipelined connection;
 * returns its length and sets *cmd (free with redisFreeCommand()).
 */
int redis_script_format(const struct redis_script *s, bool eval, int nkeys,
                        int argc, const char **argv, const size_t *lens,
                        char **cmd);

/*
 * How many script calls this process formatted whose keys are not all in
 * one Redis Cluster hash slot: a cluster refuses them (CROSSSLOT), so each
 * is a bug, whatever server this one is; the first is logged. Thread-safe.
 */
unsigned long redis_script_crossslot_calls(void);

/* True for a NOSCRIPT error reply: send the EVAL form again. */
bool redis_reply_is_noscript(const redisReply *r);

#endif
