/*
 * redis_cluster.h - talking to a Redis Cluster over blocking hiredis
 * connections: which primary owns which hash slot, sending each command to
 * the owner of its key's slot, and following the cluster when slots move
 * or a primary fails.
 *
 * A cluster is named by redis-cluster://[[user]:pass@]h1:p1,h2:p2,...
 * (common/redis.h: redis_server_from_url() gives each seed). The seeds
 * are only where the slot map is first asked for; the primaries are
 * learnt from CLUSTER SHARDS (Redis 7) and every connection to one is
 * made by redis_connect(), with the seeds' credentials and the caller's
 * timeouts, so a node logs in and logs its failures like any other Redis
 * connection of the service.
 *
 * What the routing follows:
 *   - MOVED <slot> <host:port>: the slot has a new owner for good. The
 *     slot's entry is updated at once, the command sent there, and the
 *     whole map asked for again before the next command.
 *   - ASK <slot> <host:port>: the slot is being moved and this key is
 *     already at the target. The command goes there once, behind ASKING;
 *     the map is not changed.
 *   - TRYAGAIN (a multi-key command or script whose keys are split
 *     during a move: some at each node, or some at neither, such as a key
 *     that does not exist yet) and CLUSTERDOWN (a failover in progress):
 *     sent again after a short, growing pause, from the slot's owner,
 *     while the caller's time budget lasts. A move can refuse a script
 *     in turns, ASK at the owner and TRYAGAIN at the target, for as long
 *     as it lasts; MOVED and ASK more than 16 times in a row (nodes that
 *     disagree) get the same pause and a fresh map.
 *   - a node that cannot be reached: the map is asked for again (of any
 *     other node or seed) and the command sent to the owner it names,
 *     while the budget lasts. A connection that breaks after a command
 *     was written is NOT retried: the command may have run, so the caller
 *     gets -ECONNRESET (or -ETIMEDOUT) and decides, as with one Redis; the
 *     map is asked for again before the next command.
 * So a failed call says whether the command may have run: refused by
 * every node until the budget ran out (-EAGAIN) or never written
 * (-ENOTCONN, -EACCES), it did not; lost after it was written, it may
 * have. Each redirection is counted (struct redis_cluster_stats, and the
 * seckill_redis_cluster_redirections_total{kind} counters of /metrics).
 *
 * Threads: a struct redis_cluster is used by one thread at a time, like
 * the store's per-thread connection (one object per thread: its own map,
 * its own connection per primary). Scripts (struct redis_script) are
 * shared between threads as everywhere; the SHA is the same on every node
 * and a node that lacks the script (NOSCRIPT) gets the EVAL form.
 *
 * How callers use it (the store, the ID worker, the rate limiter, the
 * async sale): where they hold a redisContext today they hold a struct
 * redis_cluster made from the same URL; a command or script names its
 * slot with redis_key_slot() of its first key (every script keeps its
 * keys in one slot by hash tags) and goes through redis_cluster_command()
 * or redis_cluster_script_run() (redis_cluster_script_then() when a WAIT
 * must follow the script); a batch (the per-user locks of a
 * purchase batch) goes through redis_cluster_pipeline(), which splits it
 * by primary and writes to all of them before reading any reply; what
 * must hold on every primary (the async mode's appendonly/appendfsync,
 * CLUSTER INFO for readiness) goes through redis_cluster_primaries() and
 * redis_cluster_primary_command(). The lock's multiplexed connections
 * keep their own event loop and take only the map and the reading of
 * redirections from here (redis_cluster_map_parse(),
 * redis_cluster_redirect_parse(); lock/rcluster.c). Sharded pub/sub
 * (SSUBSCRIBE on a channel's slot owner) is not covered here; the lock's
 * listeners do their own (lock/psub.c).
 *
 * On a newer base (hiredis 1.x) this module would give way to
 * hiredis-cluster, or its successor libvalkey's cluster API (valkeyCluster*),
 * which do the same routing, plus an asynchronous client.
 */
#ifndef SECKILL_REDIS_CLUSTER_H
#define SECKILL_REDIS_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "common/redis.h"
#include "common/redis_slot.h"

/* The most primaries a map holds (a larger cluster is refused). */
#define REDIS_CLUSTER_NODES_MAX 64
/* The longest node address kept (an IPv6 literal or a host name). */
#define REDIS_CLUSTER_HOST_LEN 128
/* A slot no primary owns in the map (a cluster still being set up). */
#define REDIS_CLUSTER_NO_NODE UINT16_MAX
/* Any node will do: a command without a key. */
#define REDIS_CLUSTER_ANY_SLOT -1

/* Which primary owns each slot. */
struct redis_cluster_map {
    int nnodes;
    struct {
        char host[REDIS_CLUSTER_HOST_LEN];
        unsigned port;
    } nodes[REDIS_CLUSTER_NODES_MAX];
    uint16_t slot_node[REDIS_SLOTS]; /* index in nodes, or _NO_NODE */
};

/*
 * Parse a CLUSTER SHARDS reply (r, borrowed: RESP2 arrays of field/value
 * pairs, as hiredis 0.14 reads them) into m: each shard's slot ranges go to its
 * primary (role "master"; the one whose health is "online" when a
 * failover leaves two), reached at its "endpoint" (its "ip" when the
 * endpoint is "?" or empty) and "port" (or "tls-port"). Shards without a
 * primary or without slots are skipped. Returns 0, or -EINVAL with a
 * reason in err for a reply of another shape or more than
 * REDIS_CLUSTER_NODES_MAX primaries.
 */
int redis_cluster_map_parse(const redisReply *r, struct redis_cluster_map *m,
                            char *err, size_t errlen);

/* What an error reply asks of a cluster client. */
enum redis_cluster_redirect_kind {
    REDIS_CLUSTER_NOT_REDIRECT, /* any other reply */
    REDIS_CLUSTER_MOVED,
    REDIS_CLUSTER_ASK,
    REDIS_CLUSTER_TRYAGAIN, /* also CLUSTERDOWN: wait and send again */
};

struct redis_cluster_redirect {
    enum redis_cluster_redirect_kind kind;
    unsigned slot;                     /* MOVED and ASK */
    char host[REDIS_CLUSTER_HOST_LEN]; /* "" when the node did not say:
                                          the host it was asked on */
    unsigned port;
};

/*
 * Read the error text of a reply ("MOVED 3999 127.0.0.1:6381", "ASK ...",
 * "TRYAGAIN ...", "CLUSTERDOWN ...") into out. The address is split at
 * its last ':' (so an IPv6 address keeps its colons). Returns out->kind;
 * malformed MOVED/ASK text is REDIS_CLUSTER_NOT_REDIRECT.
 */
enum redis_cluster_redirect_kind
redis_cluster_redirect_parse(const char *text,
                             struct redis_cluster_redirect *out);

/* One cluster client; see the top of this file. */
struct redis_cluster;

/*
 * A client of the cluster whose seeds are seeds[0..nseeds) (copied: the
 * caller may free them; all but their host and port, the credentials,
 * come from seeds[0]). Nothing is connected until the first command.
 * who names the client in log lines; connect_ms and io_ms bound every
 * connect and every reply as in redis_connect(). Never NULL.
 */
struct redis_cluster *redis_cluster_new(const struct redis_server *seeds,
                                        int nseeds, unsigned connect_ms,
                                        unsigned io_ms, const char *who);

/* Close every connection and free c. Accepts NULL. */
void redis_cluster_free(struct redis_cluster *c);

/*
 * Send the command argv[0..argc) (lens may be NULL for NUL-terminated
 * strings) to the primary of slot (REDIS_CLUSTER_ANY_SLOT: any primary),
 * following MOVED, ASK, TRYAGAIN and unreachable nodes as described above
 * for at most budget_ms milliseconds. Returns the reply, which the caller
 * frees (error replies other than redirections as they are), or NULL
 * with *err:
 *   -EAGAIN    refused (TRYAGAIN, CLUSTERDOWN, redirections that led
 *              nowhere) until the budget ran out: it did not run;
 *   -ENOTCONN  never written: no map owning the slot could be had, or
 *              its owner could not be reached, within the budget;
 *   -EACCES    never written: a node refused the credentials;
 *   -ECONNRESET, -ETIMEDOUT (as redis_errno())  the connection broke, or
 *              no reply came, after the command was written: it may have
 *              run.
 */
redisReply *redis_cluster_command(struct redis_cluster *c, int slot, int argc,
                                  const char **argv, const size_t *lens,
                                  unsigned budget_ms, int *err);

/*
 * Run script s (EVALSHA, EVAL where the node lacks it) with nkeys keys
 * followed by the other arguments (argc strings in all) on the primary
 * of the first key's slot (any primary when nkeys is 0). Redirections and
 * errors as redis_cluster_command(). Every key must hash to one slot
 * (else Redis answers CROSSSLOT, returned as it is).
 */
redisReply *redis_cluster_script_run(struct redis_cluster *c,
                                     struct redis_script *s, int nkeys,
                                     int argc, const char **argv,
                                     const size_t *lens, unsigned budget_ms,
                                     int *err);

/*
 * redis_cluster_script_run(), with the commands then[0..nthen) (each a
 * whole command as redisFormatCommand() makes it) written right behind
 * the script on the same connection, in the same write, each time the
 * script is sent: when it is redirected (MOVED, ASK) they follow it to
 * the next node. So what they ask about the script is asked of the node
 * that ran it, on the connection that ran it (a WAIT counts the replicas
 * of that node that have that connection's writes). then_replies[i] is
 * then[i]'s reply from the node that answered the script (the caller
 * frees each); NULL when the script has no answer, or when the
 * connection broke after the script's reply (which stands). Where the
 * script was sent on, their replies are dropped: they ran there too, so
 * they must be harmless on their own (WAIT is).
 */
redisReply *redis_cluster_script_then(
    struct redis_cluster *c, struct redis_script *s, int nkeys, int argc,
    const char **argv, const size_t *lens, const char *const *then,
    size_t nthen, redisReply **then_replies, unsigned budget_ms, int *err);

/*
 * One command of a batch: argv[0..argc) (lens may be NULL), or, when
 * script is not NULL, that script with nkeys keys first in argv. slot:
 * its first key's slot, or REDIS_CLUSTER_ANY_SLOT. Strings are borrowed
 * for the call.
 */
struct redis_cluster_cmd {
    int slot;
    struct redis_script *script;
    int nkeys;
    int argc;
    const char **argv;
    const size_t *lens;
};

/*
 * Send the n commands cmds[0..n): grouped by the primary that owns their
 * slot, each primary's group written in one go (in the batch's order),
 * every group written before any reply is read, so the primaries work
 * at once. replies[i] is cmds[i]'s reply (the caller frees each); a
 * command redirected (MOVED, ASK, TRYAGAIN) or refused NOSCRIPT is then
 * sent again on its own as redis_cluster_command() would, within what is
 * left of budget_ms. Commands on one primary run in the batch's order;
 * across primaries there is no order. Returns 0 when every command has a
 * reply; else the errno (as redis_cluster_command()) of the first that
 * has none, and replies[i] is NULL for each of those (a command whose
 * primary broke mid-batch may have run).
 */
int redis_cluster_pipeline(struct redis_cluster *c,
                           const struct redis_cluster_cmd *cmds, size_t n,
                           redisReply **replies, unsigned budget_ms);

/*
 * The primary that owns slot in c's map (after refreshing the map if it
 * is stale or empty), copied into host (cap bytes) and *port. Returns 0,
 * or -errno as redis_cluster_command() when no map could be had.
 */
int redis_cluster_slot_owner(struct redis_cluster *c, unsigned slot, char *host,
                             size_t cap, unsigned *port);

/*
 * The primaries of c's map, for what must be asked of each of them (the
 * async mode's durability settings, CLUSTER INFO for a readiness check):
 * how many there are (after refreshing the map if it is stale or empty),
 * or -errno as redis_cluster_command() when no map could be had. Indexes
 * 0..that-1 stay valid until the next call into c.
 */
int redis_cluster_primaries(struct redis_cluster *c);

/* The address of primary i, copied into host (cap bytes) and *port. */
void redis_cluster_primary_addr(const struct redis_cluster *c, int i,
                                char *host, size_t cap, unsigned *port);

/*
 * Send argv[0..argc) to primary i itself, following nothing (a command
 * about the node, not about a key). Returns the reply (the caller frees
 * it), or NULL with *err as redis_errno() when the node cannot be
 * reached or its connection broke (the map is then asked for again
 * before the next command).
 */
redisReply *redis_cluster_primary_command(struct redis_cluster *c, int i,
                                          int argc, const char **argv,
                                          const size_t *lens, int *err);

/*
 * The positions 0..n) of a batch of n commands whose primaries are
 * node[0..n) (indexes into a map's nodes), ordered as the batch is sent:
 * by primary in order of first appearance, each primary's commands in
 * batch order. Writes order[0..n).
 */
void redis_cluster_batch_order(const uint16_t *node, size_t n, size_t *order);

/* What a client has followed since it was made. */
struct redis_cluster_stats {
    uint64_t moved;    /* MOVED replies followed */
    uint64_t ask;      /* ASK replies followed */
    uint64_t tryagain; /* TRYAGAIN/CLUSTERDOWN replies waited out */
    uint64_t refresh;  /* slot maps asked for (the first one included) */
};

/* c's counts (also summed over every client in /metrics). */
struct redis_cluster_stats redis_cluster_stats(const struct redis_cluster *c);

#endif
