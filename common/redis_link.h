/*
 * redis_link.h - one Redis server or a Redis Cluster behind the same few
 * calls: run this command, or this script, on the owner of this key's
 * slot. The store's per-thread connection is one of these (store.h:
 * store_redis_link()), and so is what the id worker is handed.
 *
 * On one server (rc set) a call is the plain blocking hiredis call it
 * always was: no allocation, no round trip beyond the command's own. On a
 * cluster (cluster set) the call goes through common/redis_cluster.h,
 * which routes by the key's slot and follows MOVED, ASK, TRYAGAIN and
 * CLUSTERDOWN within budget_ms.
 *
 * A link is used by one thread at a time, as the connection it wraps.
 */
#ifndef SECKILL_REDIS_LINK_H
#define SECKILL_REDIS_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <hiredis/hiredis.h>

#include "common/redis.h"
#include "common/redis_cluster.h"

struct redis_link {
    redisContext *rc;              /* one server; NULL on a cluster */
    struct redis_cluster *cluster; /* a cluster; NULL on one server */
    unsigned budget_ms;            /* a cluster call's time for redirections */
};

/* True when l is a cluster's. */
static inline bool redis_link_is_cluster(const struct redis_link *l)
{
    return l->cluster != NULL;
}

/*
 * Send argv[0..argc) (lens may be NULL for NUL-terminated strings) to the
 * server, or on a cluster to the primary of key's slot (key NULL: any
 * primary; key is NUL-terminated and usually argv[1]). Returns the reply,
 * which the caller frees (error replies as they are), or NULL with *err:
 * on one server redis_errno() of the broken context (which is then
 * unusable); on a cluster as redis_cluster_command().
 */
redisReply *redis_link_command(struct redis_link *l, const char *key, int argc,
                               const char **argv, const size_t *lens, int *err);

/*
 * Run script s with nkeys keys first in argv (argc strings in all), as
 * redis_script_run() on one server and redis_cluster_script_run() on a
 * cluster (on the primary of the first key's slot). Reply and *err as
 * redis_link_command().
 */
redisReply *redis_link_script(struct redis_link *l, struct redis_script *s,
                              int nkeys, int argc, const char **argv,
                              const size_t *lens, int *err);

/*
 * Send the n commands cmds[0..n) (struct redis_cluster_cmd: a command or
 * a script, with its first key's slot) in one round trip per server:
 * on one server pipelined on the one connection, in order; on a cluster
 * as redis_cluster_pipeline() (one pipeline per primary, all in flight
 * at once). replies[i] is cmds[i]'s reply, which the caller frees.
 * Returns 0, or the -errno of the first command without a reply (NULL in
 * replies; a command whose connection broke may have run).
 */
int redis_link_pipeline(struct redis_link *l,
                        const struct redis_cluster_cmd *cmds, size_t n,
                        redisReply **replies);

/* What failed for a log line: the context's error text on one server,
 * strerror(-err) on a cluster (its own log lines say which node). */
const char *redis_link_errstr(const struct redis_link *l, int err);

#endif
