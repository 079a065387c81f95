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

/*
 * redis_link_command() with the command made by a printf-like format, as
 * redisCommand() (%s, %b, %lld ...). On one server it is redisCommand()
 * itself; on a cluster the command is formatted, split back into its
 * arguments and routed by key.
 */
redisReply *redis_link_commandf(struct redis_link *l, const char *key, int *err,
                                const char *fmt, ...);

/*
 * redis_link_script(), followed by the commands then[0..nthen) (at most
 * 8), each a whole command as redisFormatCommand() makes it, with the
 * replies in then_replies[i] (NULL when lost; the caller frees each). On
 * one server it is redis_script_run_then(): one round trip. On a cluster
 * a command with then_keys[i] NULL (a WAIT: about the script's own
 * writes) rides behind the script on the connection that runs it, in the
 * same round trip, following the script wherever it is redirected
 * (redis_cluster_script_then()); once the script has answered (and not
 * with an error) the others go at once, each to the owner of
 * then_keys[i]'s slot: one round trip more. then_keys may be NULL (every
 * command behind the script). budget_ms: on a cluster, how long
 * redirections and refusals of the script are followed (0: the link's
 * budget_ms).
 */
redisReply *redis_link_script_then(struct redis_link *l, struct redis_script *s,
                                   int nkeys, int argc, const char **argv,
                                   const size_t *lens, const char *const *then,
                                   const char *const *then_keys, size_t nthen,
                                   redisReply **then_replies,
                                   unsigned budget_ms, int *err);

/*
 * How many primaries a command about every node (SCAN, CONFIG GET, INFO)
 * goes to: 1 on one server, redis_cluster_primaries() on a cluster (or
 * -errno when no map could be had).
 */
int redis_link_nodes(struct redis_link *l);

/*
 * redis_link_commandf() on node i (0..redis_link_nodes()) itself: the one
 * server, or primary i of the cluster's map. Reply and *err as
 * redis_link_command().
 */
redisReply *redis_link_node_commandf(struct redis_link *l, int i, int *err,
                                     const char *fmt, ...);

/*
 * redis_link_command() on node i (0..redis_link_nodes()) itself.
 */
redisReply *redis_link_node_command(struct redis_link *l, int i, int argc,
                                    const char **argv, const size_t *lens,
                                    int *err);

/* A word for node i in log lines: "host:port" on a cluster, "redis" on
 * one server (buf of cap bytes). */
const char *redis_link_node_name(const struct redis_link *l, int i, char *buf,
                                 size_t cap);

/*
 * A pipeline written as on one connection: commands appended, then their
 * replies read in order (more may be appended between reads). On one
 * server each call is redisAppendCommand() / redisGetReply() on the
 * connection itself: nothing is kept here. On a cluster the commands are
 * kept until the first read after them, then sent as one
 * redis_cluster_pipeline() (one round trip per primary, all at once;
 * commands of one primary in order, none across primaries), and their
 * replies handed out in order.
 */
struct redis_link_batch {
    struct redis_link *l;
    /* A cluster's: commands appended, not sent yet, and replies not read
     * yet (formatted commands with their keys' slots). */
    char **cmds;
    size_t *cmdlens;
    int *slots;
    size_t ncmds, cap;
    redisReply **replies;
    size_t nreplies, next;
    int err; /* of the last round, for the replies it lacks */
};

/* Start a batch on l. */
void redis_link_batch_init(struct redis_link_batch *b, struct redis_link *l);

/* Append a command (format as redisCommand()) for the owner of key's
 * slot (NULL: any primary). */
void redis_link_appendf(struct redis_link_batch *b, const char *key,
                        const char *fmt, ...);

/* The next reply in order, into *r (the caller frees it). REDIS_OK, or
 * REDIS_ERR with *r NULL: on one server the connection broke (as
 * redisGetReply()); on a cluster this command has no reply. */
int redis_link_get_reply(struct redis_link_batch *b, redisReply **r);

/* Free what a batch keeps (replies not read are dropped). */
void redis_link_batch_end(struct redis_link_batch *b);

/* What failed for a log line: the context's error text on one server,
 * strerror(-err) on a cluster (its own log lines say which node). */
const char *redis_link_errstr(const struct redis_link *l, int err);

#endif
