/*
 * redis_cluster.c - routing commands over a Redis Cluster (see
 * redis_cluster.h).
 */
#include "common/redis_cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/metrics.h"
#include "common/util.h"

/* MOVED and ASK followed in a row for one command before a pause and a
 * fresh map: a slot moves once at a time, so more means the nodes
 * disagree for now. */
#define REDIRECTS_MAX 16
/* The pauses before sending again after TRYAGAIN, CLUSTERDOWN or an
 * unreachable node: 1 ms, doubling, at most this much. */
#define PAUSE_MAX_MS 64

struct redis_cluster {
    struct redis_server cred; /* user and pass for every node (owned) */
    struct {
        char host[REDIS_CLUSTER_HOST_LEN];
        unsigned port;
        struct redis_connect_log log;
    } seeds[URL_HOSTS_MAX];
    int nseeds;
    unsigned connect_ms, io_ms;
    char who[32];
    bool have_map;
    bool stale; /* ask for the map again before the next command */
    struct redis_cluster_map map;
    /* The connection to map.nodes[i], and what its connects logged. */
    redisContext *rc[REDIS_CLUSTER_NODES_MAX];
    struct redis_connect_log log[REDIS_CLUSTER_NODES_MAX];
    /* A map being read, kept here rather than on the stack (40 KiB). */
    struct redis_cluster_map next;
    struct redis_cluster_stats st;
};

/* ---- parsing ---- */

static bool str_is(const redisReply *r, const char *s)
{
    return r &&
           (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
           strlen(s) == r->len && memcmp(r->str, s, r->len) == 0;
}

/* The value of field name in an array of field/value pairs, or NULL. */
static const redisReply *field(const redisReply *r, const char *name)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (str_is(r->element[i], name))
            return r->element[i + 1];
    return NULL;
}

/* An integer, or a string of digits (some fields come as either). */
static long long as_int(const redisReply *r, long long dflt)
{
    if (r && r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r && r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 12 &&
        strspn(r->str, "0123456789") == r->len)
        return strtoll(r->str, NULL, 10);
    return dflt;
}

/* The node of a shard's nodes to route to: its online primary. */
static const redisReply *shard_primary(const redisReply *nodes)
{
    const redisReply *best = NULL;

    for (size_t i = 0; nodes && i < nodes->elements; i++) {
        const redisReply *n = nodes->element[i];

        if (!str_is(field(n, "role"), "master"))
            continue;
        if (!best || str_is(field(n, "health"), "online"))
            best = n;
    }
    return best;
}

/* Index of host:port in m's nodes, added when absent; -1 when full. */
static int map_node(struct redis_cluster_map *m, const char *host,
                    unsigned port)
{
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            return i;
    if (m->nnodes == REDIS_CLUSTER_NODES_MAX)
        return -1;
    snprintf(m->nodes[m->nnodes].host, sizeof(m->nodes[0].host), "%s", host);
    m->nodes[m->nnodes].port = port;
    return m->nnodes++;
}

int redis_cluster_map_parse(const redisReply *r, struct redis_cluster_map *m,
                            char *err, size_t errlen)
{
    m->nnodes = 0;
    for (unsigned s = 0; s < REDIS_SLOTS; s++)
        m->slot_node[s] = REDIS_CLUSTER_NO_NODE;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "CLUSTER SHARDS: %s",
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
        return -EINVAL;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *shard = r->element[i];
        const redisReply *slots = field(shard, "slots");
        const redisReply *p = shard_primary(field(shard, "nodes"));
        const redisReply *host;
        long long port;
        char h[REDIS_CLUSTER_HOST_LEN];
        int idx;

        if (!slots || slots->type != REDIS_REPLY_ARRAY ||
            slots->elements % 2 != 0) {
            snprintf(err, errlen, "CLUSTER SHARDS: shard %zu has no slots", i);
            return -EINVAL;
        }
        if (!p || slots->elements == 0)
            continue;
        host = field(p, "endpoint");
        if (!host || host->type != REDIS_REPLY_STRING || host->len == 0 ||
            str_is(host, "?"))
            host = field(p, "ip");
        port = as_int(field(p, "port"), 0);
        if (port <= 0)
            port = as_int(field(p, "tls-port"), 0);
        if (!host || host->type != REDIS_REPLY_STRING || host->len == 0 ||
            host->len >= sizeof(h) || port <= 0 || port > 65535) {
            snprintf(err, errlen,
                     "CLUSTER SHARDS: shard %zu's primary has no address", i);
            return -EINVAL;
        }
        memcpy(h, host->str, host->len + 1);
        idx = map_node(m, h, (unsigned)port);
        if (idx < 0) {
            snprintf(err, errlen, "CLUSTER SHARDS: more than %d primaries",
                     REDIS_CLUSTER_NODES_MAX);
            return -EINVAL;
        }
        for (size_t k = 0; k < slots->elements; k += 2) {
            long long lo = as_int(slots->element[k], -1);
            long long hi = as_int(slots->element[k + 1], -1);

            if (lo < 0 || hi < lo || hi >= REDIS_SLOTS) {
                snprintf(err, errlen, "CLUSTER SHARDS: bad slot range");
                return -EINVAL;
            }
            for (long long s = lo; s <= hi; s++)
                m->slot_node[s] = (uint16_t)idx;
        }
    }
    return 0;
}

enum redis_cluster_redirect_kind
redis_cluster_redirect_parse(const char *text,
                             struct redis_cluster_redirect *out)
{
    const char *addr, *colon;
    char *end;
    unsigned long slot, port;
    size_t hlen;

    memset(out, 0, sizeof(*out));
    if (strncmp(text, "TRYAGAIN", 8) == 0 ||
        strncmp(text, "CLUSTERDOWN", 11) == 0)
        return out->kind = REDIS_CLUSTER_TRYAGAIN;
    if (strncmp(text, "MOVED ", 6) == 0)
        addr = text + 6;
    else if (strncmp(text, "ASK ", 4) == 0)
        addr = text + 4;
    else
        return REDIS_CLUSTER_NOT_REDIRECT;
    /* "<slot> <host>:<port>", the host maybe empty or an IPv6 address */
    if (*addr < '0' || *addr > '9')
        return REDIS_CLUSTER_NOT_REDIRECT;
    slot = strtoul(addr, &end, 10);
    if (*end != ' ' || slot >= REDIS_SLOTS)
        return REDIS_CLUSTER_NOT_REDIRECT;
    addr = end + 1;
    colon = strrchr(addr, ':');
    if (!colon || colon[1] < '0' || colon[1] > '9')
        return REDIS_CLUSTER_NOT_REDIRECT;
    port = strtoul(colon + 1, &end, 10);
    hlen = (size_t)(colon - addr);
    if (*end != '\0' || port == 0 || port > 65535 ||
        hlen >= sizeof(out->host) || memchr(addr, ' ', hlen))
        return REDIS_CLUSTER_NOT_REDIRECT;
    memcpy(out->host, addr, hlen);
    out->host[hlen] = '\0';
    out->slot = (unsigned)slot;
    out->port = (unsigned)port;
    return out->kind = text[0] == 'M' ? REDIS_CLUSTER_MOVED : REDIS_CLUSTER_ASK;
}

void redis_cluster_batch_order(const uint16_t *node, size_t n, size_t *order)
{
    size_t k = 0;

    /* Quadratic, but batches are a few hundred commands at most over a
     * handful of primaries: each first appearance gathers its group. */
    for (size_t i = 0; i < n; i++) {
        bool seen = false;

        for (size_t j = 0; j < i && !seen; j++)
            seen = node[j] == node[i];
        if (seen)
            continue;
        for (size_t j = i; j < n; j++)
            if (node[j] == node[i])
                order[k++] = j;
    }
}

/* ---- the client ---- */

struct redis_cluster *redis_cluster_new(const struct redis_server *seeds,
                                        int nseeds, unsigned connect_ms,
                                        unsigned io_ms, const char *who)
{
    struct redis_cluster *c = xcalloc(1, sizeof(*c));

    if (nseeds < 1 || nseeds > URL_HOSTS_MAX)
        abort(); /* a caller's mistake: the URL parser bounds it */
    c->cred.user = seeds[0].user ? xstrdup(seeds[0].user) : NULL;
    c->cred.pass = seeds[0].pass ? xstrdup(seeds[0].pass) : NULL;
    for (int i = 0; i < nseeds; i++) {
        snprintf(c->seeds[i].host, sizeof(c->seeds[i].host), "%s",
                 seeds[i].host);
        c->seeds[i].port = seeds[i].port;
    }
    c->nseeds = nseeds;
    c->connect_ms = connect_ms;
    c->io_ms = io_ms;
    snprintf(c->who, sizeof(c->who), "%s", who);
    return c;
}

void redis_cluster_free(struct redis_cluster *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->map.nnodes; i++)
        redisFree(c->rc[i]);
    free((char *)c->cred.user);
    free((char *)c->cred.pass);
    free(c);
}

struct redis_cluster_stats redis_cluster_stats(const struct redis_cluster *c)
{
    return c->st;
}

/* Count one redirection of kind k followed by c. */
static void count(struct redis_cluster *c, enum redis_cluster_redirect_kind k)
{
    switch (k) {
    case REDIS_CLUSTER_MOVED:
        c->st.moved++;
        metrics_count(METRIC_REDIS_MOVED, 1);
        break;
    case REDIS_CLUSTER_ASK:
        c->st.ask++;
        metrics_count(METRIC_REDIS_ASK, 1);
        break;
    case REDIS_CLUSTER_TRYAGAIN:
        c->st.tryagain++;
        metrics_count(METRIC_REDIS_TRYAGAIN, 1);
        break;
    case REDIS_CLUSTER_NOT_REDIRECT:
        break;
    }
}

/* A connection to host:port with c's credentials and timeouts. */
static redisContext *dial(struct redis_cluster *c, const char *host,
                          unsigned port, struct redis_connect_log *log,
                          int *err)
{
    struct redis_server s = c->cred;

    s.host = host;
    s.port = port;
    return redis_connect(&s, c->connect_ms, c->io_ms, c->who, log, err);
}

/* The connection to node i of the map, made when there is none. */
static redisContext *node_conn(struct redis_cluster *c, int i, int *err)
{
    *err = 0;
    /* Closed by the node while idle (it died or restarted, a link broke):
     * a command written there would meet the close with its outcome
     * unknown; a new connection serves it, or says at once that the node
     * cannot be reached. */
    if (c->rc[i] && (c->rc[i]->err || util_idle_conn_dead(c->rc[i]->fd))) {
        redisFree(c->rc[i]);
        c->rc[i] = NULL;
    }
    if (!c->rc[i])
        c->rc[i] = dial(c, c->map.nodes[i].host, c->map.nodes[i].port,
                        &c->log[i], err);
    return c->rc[i];
}

/* Drop the connection to node i (it broke) and ask for the map again. */
static void node_drop(struct redis_cluster *c, int i)
{
    redisFree(c->rc[i]);
    c->rc[i] = NULL;
    c->stale = true;
}

/*
 * Ask rc for the map into c->next; on success make it c's map, keeping
 * the connections to the primaries that stay. Returns 0 or -errno.
 */
static int map_take(struct redis_cluster *c, redisContext *rc)
{
    redisContext *keep[REDIS_CLUSTER_NODES_MAX] = {0};
    struct redis_connect_log logs[REDIS_CLUSTER_NODES_MAX] = {{0}};
    redisReply *r = redisCommand(rc, "CLUSTER SHARDS");
    char why[160];
    int err;

    if (!r)
        return redis_errno(rc);
    err = redis_cluster_map_parse(r, &c->next, why, sizeof(why));
    if (err)
        log_warn("redis cluster map unreadable", "who=%s err=\"%s\"", c->who,
                 why);
    freeReplyObject(r);
    if (err)
        return -EIO;
    for (int j = 0; j < c->next.nnodes; j++)
        for (int i = 0; i < c->map.nnodes; i++)
            if (c->map.nodes[i].port == c->next.nodes[j].port &&
                strcmp(c->map.nodes[i].host, c->next.nodes[j].host) == 0) {
                keep[j] = c->rc[i];
                logs[j] = c->log[i];
                c->rc[i] = NULL;
                break;
            }
    for (int i = 0; i < c->map.nnodes; i++)
        redisFree(c->rc[i]);
    memcpy(&c->map, &c->next, sizeof(c->map));
    memset(c->rc, 0, sizeof(c->rc));
    memcpy(c->rc, keep, sizeof(keep));
    memcpy(c->log, logs, sizeof(logs));
    c->have_map = true;
    c->stale = false;
    return 0;
}

/*
 * Ask for the slot map: of a primary already connected, then of the
 * other primaries, then of the seeds. Returns 0, or the errno of the
 * last failure.
 */
static int map_refresh(struct redis_cluster *c)
{
    bool failed[REDIS_CLUSTER_NODES_MAX];
    int err = -ECONNREFUSED, n = c->map.nnodes;

    c->st.refresh++;
    metrics_count(METRIC_REDIS_REFRESH, 1);
    /* A node whose last connect failed (a dead primary before its
     * failover) is tried last: on a real network it costs connect_ms. */
    for (int i = 0; i < n; i++)
        failed[i] = c->log[i].last_err != 0;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < n; i++) {
            bool connected = c->rc[i] && !c->rc[i]->err;
            redisContext *rc;

            if (pass == 0 ? !connected : connected || failed[i] != (pass == 2))
                continue;
            rc = node_conn(c, i, &err);
            if (!rc)
                continue;
            err = map_take(c, rc);
            if (!err)
                return 0;
            if (c->rc[i] && c->rc[i]->err)
                node_drop(c, i);
        }
    for (int i = 0; i < c->nseeds; i++) {
        redisContext *rc =
            dial(c, c->seeds[i].host, c->seeds[i].port, &c->seeds[i].log, &err);

        if (!rc)
            continue;
        err = map_take(c, rc);
        redisFree(rc);
        if (!err)
            return 0;
    }
    c->stale = true;
    return err;
}

/* The node of slot (any node for REDIS_CLUSTER_ANY_SLOT), or -1. */
static int slot_node(const struct redis_cluster *c, int slot)
{
    if (slot >= REDIS_SLOTS)
        abort(); /* a caller's mistake */
    if (slot < 0)
        return c->map.nnodes > 0 ? 0 : -1;
    return c->map.slot_node[slot] == REDIS_CLUSTER_NO_NODE
               ? -1
               : (int)c->map.slot_node[slot];
}

/* Format k (a script as EVAL when eval) into *buf; returns its length. */
static int cmd_format(const struct redis_cluster_cmd *k, bool eval, char **buf)
{
    int len;

    if (k->script)
        return redis_script_format(k->script, eval, k->nkeys, k->argc, k->argv,
                                   k->lens, buf);
    len = redisFormatCommandArgv(buf, k->argc, k->argv, k->lens);
    if (len < 0)
        abort(); /* only out of memory */
    return len;
}

/* Sleep *pause_ms (no longer than until deadline), then double it. */
static void pause_until(unsigned *pause_ms, int64_t deadline)
{
    int64_t left = deadline - util_mono_ms();
    unsigned ms = *pause_ms;
    struct timespec ts;

    if (left <= 0)
        return;
    if (ms > left)
        ms = (unsigned)left;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
    if (*pause_ms < PAUSE_MAX_MS)
        *pause_ms *= 2;
}

/* Commands written right behind a script on its connection, every time
 * it is sent, and their replies from the node that answered it (see
 * redis_cluster_script_then()). */
struct behind {
    const char *const *cmds; /* whole commands, as redisFormatCommand() */
    size_t n;
    redisReply **replies;
};

/* Read the replies of b's commands off rc into b->replies, dropping
 * them (keep false: the script they followed was not run there). False
 * when the connection broke before every reply was read. */
static bool behind_read(redisContext *rc, const struct behind *b, bool keep)
{
    for (size_t i = 0; b && i < b->n; i++) {
        redisReply *r = NULL;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            return false;
        if (keep)
            b->replies[i] = r;
        else
            freeReplyObject(r);
    }
    return true;
}

/* The end of a command that was never written to a node (no map, no
 * owner, no connection): err as the caller is told it. */
static int unsent(int err)
{
    return err == -EACCES ? err : -ENOTCONN;
}

/*
 * Send k until it has a reply that is not a redirection, or deadline
 * passes (see redis_cluster_command()). first, when not NULL, is a
 * redirection k already had from a node at host from_host (a batch's
 * reply; exec() takes it over); eval: send a script as EVAL from the
 * start; b (may be NULL): commands that go behind k on its connection.
 */
static redisReply *exec(struct redis_cluster *c,
                        const struct redis_cluster_cmd *k, redisReply *first,
                        const char *from_host, bool eval, int64_t deadline,
                        const struct behind *b, int *err)
{
    char from[REDIS_CLUSTER_HOST_LEN] = "";
    struct redis_cluster_redirect rd;
    redisReply *r = first;
    unsigned pause_ms = 1;
    bool asking = false;
    int node = -1, hops = 0;

    *err = 0;
    for (size_t i = 0; b && i < b->n; i++)
        b->replies[i] = NULL;
    for (;;) {
        redisContext *rc;
        char *cmd = NULL;
        int len;
        bool whole;

        if (r) {
            /* An error reply from node `from`: a redirection to follow,
             * or the answer. */
            enum redis_cluster_redirect_kind kind =
                redis_cluster_redirect_parse(r->str, &rd);
            int to;

            if (kind == REDIS_CLUSTER_NOT_REDIRECT)
                return r;
            count(c, kind);
            if (kind != REDIS_CLUSTER_TRYAGAIN && ++hops > REDIRECTS_MAX) {
                /* The nodes disagree where the slot is: a fresh map,
                 * after a pause, as for TRYAGAIN. */
                c->stale = true;
                kind = REDIS_CLUSTER_TRYAGAIN;
            }
            if (kind == REDIS_CLUSTER_TRYAGAIN) {
                /* Refused, nothing ran: again after a pause, from the
                 * slot's owner, while the budget lasts. */
                if (util_mono_ms() >= deadline) {
                    log_warn("redis cluster command refused until its "
                             "budget ran out",
                             "who=%s slot=%d err=\"%s\"", c->who, k->slot,
                             r->str);
                    freeReplyObject(r);
                    *err = -EAGAIN;
                    return NULL;
                }
                freeReplyObject(r);
                r = NULL;
                pause_until(&pause_ms, deadline);
                node = -1;
                hops = 0;
                asking = false;
            } else {
                freeReplyObject(r);
                r = NULL;
                if (from_host)
                    snprintf(from, sizeof(from), "%s", from_host);
                from_host = NULL;
                to = map_node(&c->map, rd.host[0] ? rd.host : from, rd.port);
                node = to;
                asking = kind == REDIS_CLUSTER_ASK;
                if (to < 0) {
                    c->stale = true;
                } else if (kind == REDIS_CLUSTER_MOVED) {
                    /* Right for this slot now; others may have moved as
                     * well: the whole map again before the next command. */
                    c->map.slot_node[rd.slot] = (uint16_t)to;
                    c->stale = true;
                }
            }
        }
        if (node < 0) {
            if (!c->have_map || c->stale) {
                int e = map_refresh(c);

                if (e && !c->have_map) {
                    /* Refused credentials do not get better by waiting. */
                    if (e == -EACCES || util_mono_ms() >= deadline) {
                        *err = unsent(e);
                        return NULL;
                    }
                    pause_until(&pause_ms, deadline);
                    continue;
                }
            }
            node = slot_node(c, k->slot);
            if (node < 0) {
                c->stale = true;
                if (util_mono_ms() >= deadline) {
                    log_warn("redis cluster slot has no primary",
                             "who=%s slot=%d", c->who, k->slot);
                    *err = -ENOTCONN;
                    return NULL;
                }
                pause_until(&pause_ms, deadline);
                continue;
            }
        }
        rc = node_conn(c, node, err);
        if (rc && k->script &&
            !atomic_load_explicit(&k->script->ready, memory_order_acquire) &&
            redis_script_load(rc, k->script) && rc->err) {
            *err = redis_errno(rc);
            rc = NULL;
        }
        if (!rc) {
            /* Nothing was written: safe to look for the owner again. */
            node_drop(c, node);
            node = -1;
            asking = false;
            if (*err == -EACCES || util_mono_ms() >= deadline) {
                *err = unsent(*err);
                return NULL;
            }
            *err = 0;
            pause_until(&pause_ms, deadline);
            continue;
        }
        len = cmd_format(k, eval, &cmd);
        if (asking)
            redisAppendCommand(rc, "ASKING");
        redisAppendFormattedCommand(rc, cmd, (size_t)len);
        redisFreeCommand(cmd);
        for (size_t i = 0; b && i < b->n; i++)
            redisAppendFormattedCommand(rc, b->cmds[i], strlen(b->cmds[i]));
        if (asking) {
            if (redisGetReply(rc, (void **)&r) == REDIS_OK)
                freeReplyObject(r);
            r = NULL;
        }
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
            *err = redis_errno(rc);
            log_warn("redis cluster node connection broke",
                     "who=%s host=%s port=%u err=\"%s\"", c->who,
                     c->map.nodes[node].host, c->map.nodes[node].port,
                     rc->errstr);
            node_drop(c, node);
            return NULL;
        }
        /* What went behind answers for this node only if the command
         * was answered here, not sent on. */
        whole = r->type != REDIS_REPLY_ERROR ||
                (redis_cluster_redirect_parse(r->str, &rd) ==
                     REDIS_CLUSTER_NOT_REDIRECT &&
                 !(k->script && !eval && redis_reply_is_noscript(r)));
        if (!behind_read(rc, b, whole)) {
            log_warn("redis cluster node connection broke",
                     "who=%s host=%s port=%u err=\"%s\"", c->who,
                     c->map.nodes[node].host, c->map.nodes[node].port,
                     rc->errstr);
            node_drop(c, node);
            if (whole)
                return r; /* its answer stands; the rest are lost */
        }
        if (r->type != REDIS_REPLY_ERROR)
            return r;
        if (k->script && !eval && redis_reply_is_noscript(r)) {
            /* This node lacks the script: the same node, as EVAL. */
            freeReplyObject(r);
            r = NULL;
            eval = true;
            continue;
        }
        snprintf(from, sizeof(from), "%s", c->map.nodes[node].host);
    }
}

redisReply *redis_cluster_command(struct redis_cluster *c, int slot, int argc,
                                  const char **argv, const size_t *lens,
                                  unsigned budget_ms, int *err)
{
    struct redis_cluster_cmd k = {
        .slot = slot, .argc = argc, .argv = argv, .lens = lens};

    return exec(c, &k, NULL, NULL, false, util_mono_ms() + budget_ms, NULL,
                err);
}

/* Script s with its arguments, as a command routed by its first key. */
static struct redis_cluster_cmd script_cmd(struct redis_script *s, int nkeys,
                                           int argc, const char **argv,
                                           const size_t *lens)
{
    return (struct redis_cluster_cmd){
        .slot = nkeys > 0 ? (int)redis_key_slot(argv[0], lens ? lens[0]
                                                              : strlen(argv[0]))
                          : REDIS_CLUSTER_ANY_SLOT,
        .script = s,
        .nkeys = nkeys,
        .argc = argc,
        .argv = argv,
        .lens = lens};
}

redisReply *redis_cluster_script_run(struct redis_cluster *c,
                                     struct redis_script *s, int nkeys,
                                     int argc, const char **argv,
                                     const size_t *lens, unsigned budget_ms,
                                     int *err)
{
    struct redis_cluster_cmd k = script_cmd(s, nkeys, argc, argv, lens);

    return exec(c, &k, NULL, NULL, false, util_mono_ms() + budget_ms, NULL,
                err);
}

redisReply *redis_cluster_script_then(
    struct redis_cluster *c, struct redis_script *s, int nkeys, int argc,
    const char **argv, const size_t *lens, const char *const *then,
    size_t nthen, redisReply **then_replies, unsigned budget_ms, int *err)
{
    struct redis_cluster_cmd k = script_cmd(s, nkeys, argc, argv, lens);
    struct behind b = {.cmds = then, .n = nthen, .replies = then_replies};

    return exec(c, &k, NULL, NULL, false, util_mono_ms() + budget_ms, &b, err);
}

int redis_cluster_slot_owner(struct redis_cluster *c, unsigned slot, char *host,
                             size_t cap, unsigned *port)
{
    int node, err = 0;

    if ((!c->have_map || c->stale) && (err = map_refresh(c)) && !c->have_map)
        return err;
    node = slot_node(c, (int)slot);
    if (node < 0)
        return -EIO;
    snprintf(host, cap, "%s", c->map.nodes[node].host);
    *port = c->map.nodes[node].port;
    return 0;
}

int redis_cluster_primaries(struct redis_cluster *c)
{
    int err;

    if ((!c->have_map || c->stale) && (err = map_refresh(c)) && !c->have_map)
        return err;
    return c->map.nnodes;
}

void redis_cluster_primary_addr(const struct redis_cluster *c, int i,
                                char *host, size_t cap, unsigned *port)
{
    if (i < 0 || i >= c->map.nnodes)
        abort(); /* a caller's mistake */
    snprintf(host, cap, "%s", c->map.nodes[i].host);
    *port = c->map.nodes[i].port;
}

redisReply *redis_cluster_primary_command(struct redis_cluster *c, int i,
                                          int argc, const char **argv,
                                          const size_t *lens, int *err)
{
    redisContext *rc;
    redisReply *r;

    if (i < 0 || i >= c->map.nnodes)
        abort(); /* a caller's mistake */
    rc = node_conn(c, i, err);
    if (!rc) {
        node_drop(c, i);
        return NULL;
    }
    r = redisCommandArgv(rc, argc, argv, lens);
    if (!r) {
        *err = redis_errno(rc);
        node_drop(c, i);
    }
    return r;
}

/* What became of one command of a batch after its first send. */
enum batch_state {
    BATCH_UNSENT,   /* not written: send on its own */
    BATCH_WRITTEN,  /* written to its node, the reply not read yet */
    BATCH_DONE,     /* replies[i] is its answer */
    BATCH_REDIRECT, /* replies[i] is a redirection to follow */
    BATCH_NOSCRIPT, /* its node lacks the script */
};

/*
 * Write the commands cmds[order[g..end)], all for node nd, to its
 * connection, marking each written one in state. Scripts whose SHA is
 * not known yet are loaded first (a round trip of its own, which must
 * not come between appended commands and their replies).
 */
static void batch_write(struct redis_cluster *c,
                        const struct redis_cluster_cmd *cmds,
                        const size_t *order, size_t g, size_t end, int nd,
                        unsigned char *state)
{
    redisContext *rc;
    int done = 0, err;

    rc = node_conn(c, nd, &err);
    for (size_t j = g; rc && j < end; j++) {
        struct redis_script *s = cmds[order[j]].script;

        if (s && !atomic_load_explicit(&s->ready, memory_order_acquire) &&
            redis_script_load(rc, s) && rc->err)
            rc = NULL;
    }
    if (!rc) {
        node_drop(c, nd); /* nothing written: each goes on its own */
        return;
    }
    for (size_t j = g; j < end; j++) {
        char *cmd;
        int len = cmd_format(&cmds[order[j]], false, &cmd);

        redisAppendFormattedCommand(rc, cmd, (size_t)len);
        redisFreeCommand(cmd);
        state[order[j]] = BATCH_WRITTEN;
    }
    while (!done && redisBufferWrite(rc, &done) == REDIS_OK) {
    }
}

int redis_cluster_pipeline(struct redis_cluster *c,
                           const struct redis_cluster_cmd *cmds, size_t n,
                           redisReply **replies, unsigned budget_ms)
{
    int64_t deadline = util_mono_ms() + budget_ms;
    size_t cap = n ? n : 1;
    uint16_t *node = xcalloc(cap, sizeof(*node));
    size_t *order = xcalloc(cap, sizeof(*order));
    unsigned char *state = xcalloc(cap, 1);
    int *lost = xcalloc(cap, sizeof(*lost));
    char **from = xcalloc(cap, sizeof(*from));
    int first_err = 0;

    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (!c->have_map || c->stale)
        map_refresh(c);
    for (size_t i = 0; i < n; i++) {
        int nd = c->have_map ? slot_node(c, cmds[i].slot) : -1;

        node[i] = nd < 0 ? REDIS_CLUSTER_NO_NODE : (uint16_t)nd;
    }
    redis_cluster_batch_order(node, n, order);
    /* Write every group, then read every group: the primaries work on
     * their parts at the same time. */
    for (size_t g = 0, end; g < n; g = end) {
        for (end = g; end < n && node[order[end]] == node[order[g]];)
            end++;
        if (node[order[g]] != REDIS_CLUSTER_NO_NODE)
            batch_write(c, cmds, order, g, end, node[order[g]], state);
    }
    for (size_t j = 0; j < n; j++) {
        size_t i = order[j];
        redisContext *rc = state[i] == BATCH_WRITTEN ? c->rc[node[i]] : NULL;
        redisReply *r = NULL;

        if (!rc)
            continue;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
            /* It, and the rest of its group, may have run. */
            lost[i] = redis_errno(rc);
            continue;
        }
        replies[i] = r;
        state[i] = BATCH_DONE;
        if (r->type != REDIS_REPLY_ERROR)
            continue;
        if (cmds[i].script && redis_reply_is_noscript(r)) {
            state[i] = BATCH_NOSCRIPT;
            freeReplyObject(r);
            replies[i] = NULL;
        } else {
            struct redis_cluster_redirect rd;

            if (redis_cluster_redirect_parse(r->str, &rd) !=
                REDIS_CLUSTER_NOT_REDIRECT) {
                state[i] = BATCH_REDIRECT;
                /* exec() below may read the map again and renumber it */
                from[i] = xstrdup(c->map.nodes[node[i]].host);
            }
        }
    }
    /* The broken connections first, while node[] still names them. */
    for (size_t i = 0; i < n; i++)
        if (state[i] == BATCH_WRITTEN && c->rc[node[i]] &&
            c->rc[node[i]]->err) {
            log_warn("redis cluster node connection broke",
                     "who=%s host=%s port=%u err=\"%s\"", c->who,
                     c->map.nodes[node[i]].host, c->map.nodes[node[i]].port,
                     c->rc[node[i]]->errstr);
            node_drop(c, node[i]);
        }
    for (size_t i = 0; i < n; i++) {
        int err = 0;

        switch (state[i]) {
        case BATCH_WRITTEN:
            err = lost[i] ? lost[i] : -ECONNRESET;
            break;
        case BATCH_REDIRECT:
            replies[i] = exec(c, &cmds[i], replies[i], from[i], false, deadline,
                              NULL, &err);
            break;
        case BATCH_NOSCRIPT:
            replies[i] =
                exec(c, &cmds[i], NULL, NULL, true, deadline, NULL, &err);
            break;
        case BATCH_UNSENT:
            replies[i] =
                exec(c, &cmds[i], NULL, NULL, false, deadline, NULL, &err);
            break;
        default:
            break;
        }
        if (!replies[i] && !first_err)
            first_err = err ? err : -EIO;
    }
    free(node);
    free(order);
    free(state);
    free(lost);
    for (size_t i = 0; i < n; i++)
        free(from[i]);
    free(from);
    return first_err;
}
