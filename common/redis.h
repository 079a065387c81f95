/*
 * redis.h - the Redis plumbing every module shares: which server to talk
 * to (from a URL), connecting and authenticating to it, mapping a failed
 * connection to an errno, and the Lua script cache.
 *
 * Every connection the service opens (the store's per-thread connection,
 * the lock's multiplexed ones, every pub/sub listener) goes through
 * redis_connect(), so a password is sent the same way everywhere and an
 * AUTH refusal reads the same everywhere: -EACCES.
 */
#ifndef SECKILL_REDIS_H
#define SECKILL_REDIS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <hiredis/hiredis.h>

#include "common/url.h"

/* One Redis server and how to log in to it. Strings are borrowed. */
struct redis_server {
    const char *host;
    unsigned port;
    const char *user; /* NULL: AUTH with the password only */
    const char *pass; /* NULL: no AUTH */
    unsigned db;      /* SELECTed when not 0 */
};

/* Highest database number a URL may name. */
#define REDIS_DB_MAX 15

/*
 * The server of host i of a parsed redis:// or redlock:// URL: port 6379
 * when absent, the path a database number 0..REDIS_DB_MAX (or empty).
 * out's strings point into u. Returns 0, or -EINVAL with a reason in err.
 */
int redis_server_from_url(const struct url *u, int host,
                          struct redis_server *out, char *err, size_t errlen);

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
 * calls). who names the connection's user in log lines ("store",
 * "lock", ...); log (may be NULL: log every failure) keeps them to one
 * line per change. Returns the context, or NULL with *err set:
 *   -ECONNREFUSED, -ETIMEDOUT, -ECONNRESET  cannot reach the server;
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
 * Format the EVALSHA of s (or EVAL, when eval is true or the SHA is not
 * known yet) into a new command buffer for a pipelined connection;
 * returns its length and sets *cmd (free with redisFreeCommand()).
 */
int redis_script_format(const struct redis_script *s, bool eval, int nkeys,
                        int argc, const char **argv, const size_t *lens,
                        char **cmd);

/* True for a NOSCRIPT error reply: send the EVAL form again. */
bool redis_reply_is_noscript(const redisReply *r);

#endif
