/*
 * rcluster.c - the redis backend on a Redis Cluster (see rconn.h): one
 * multiplexed connection and one sharded pub/sub listener per primary of
 * the current slot map (common/redis_cluster.h reads CLUSTER SHARDS and
 * the redirections), and the following of MOVED, ASK, TRYAGAIN and
 * CLUSTERDOWN around each call.
 */
#include "lock/rconn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/metrics.h"
#include "common/util.h"

/* Entries of the node table: a map's primaries (REDIS_CLUSTER_NODES_MAX
 * at most) and room as large for the ones redirections name before the
 * map does. */
#define NODES_MAX (2 * REDIS_CLUSTER_NODES_MAX)
/* The map is asked for again at most this often. */
#define REFRESH_MIN_MS 100
/* First pause after TRYAGAIN/CLUSTERDOWN or an unreachable owner; it
 * doubles up to PAUSE_MAX_MS while the call's timeout lasts. */
#define PAUSE_MS 10
#define PAUSE_MAX_MS 200
/* MOVED and ASK replies followed by one call at most. */
#define REDIRECTS_MAX 16

/*
 * A primary: its connection and its listener. It stays in the table while
 * the map names it (or a redirection named it since the last map). When a
 * new map leaves it out it leaves the table; whoever still uses it (a
 * call in flight, a waiter on its listener: refs) keeps it whole, and the
 * last of them closes its connection and stops its listener, whose thread
 * is joined when the next map is installed (or the client closes).
 */
struct rconn_node {
    char host[REDIS_CLUSTER_HOST_LEN];
    struct redis_server srv; /* host: the field above */
    struct rconn_mux *mux;   /* NULL once closed */
    struct rconn_psub *ps;
    int refs;                /* users right now; cl->mu */
    int gone;                /* out of the table; cl->mu */
    struct rconn_node *next; /* on cl->gone */
};

struct rconn_cluster {
    pthread_mutex_t mu;         /* guards the nodes, their refs and the map */
    pthread_mutex_t refresh_mu; /* one map refresh at a time */
    struct redis_server seeds[URL_HOSTS_MAX];
    int nseeds;
    struct rconn_hub *hub;
    uint32_t timeout_ms;
    struct rconn_node *nodes[NODES_MAX]; /* NULL: a free entry */
    struct rconn_node *gone;             /* out of the table, not yet freed */
    uint16_t slot_node[REDIS_SLOTS];     /* index in nodes, or _NO_NODE */
    int have_map;
    int stale;          /* ask for the map before the next command */
    int64_t refresh_ms; /* last refresh */
    struct redis_connect_log log;
    struct rconn_cluster_stats stats;
};

struct rconn_cluster *rconn_cluster_new(const struct redis_server *seeds,
                                        int nseeds, struct rconn_hub *hub,
                                        uint32_t timeout_ms)
{
    struct rconn_cluster *cl = xcalloc(1, sizeof(*cl));

    pthread_mutex_init(&cl->mu, NULL);
    pthread_mutex_init(&cl->refresh_mu, NULL);
    if (nseeds > URL_HOSTS_MAX)
        nseeds = URL_HOSTS_MAX;
    memcpy(cl->seeds, seeds, (size_t)nseeds * sizeof(*seeds));
    cl->nseeds = nseeds;
    cl->hub = hub;
    cl->timeout_ms = timeout_ms;
    for (int i = 0; i < REDIS_SLOTS; i++)
        cl->slot_node[i] = REDIS_CLUSTER_NO_NODE;
    return cl;
}

/* Free the nodes of the list head (linked by next): every listener is
 * asked to stop before the first is waited for. */
static void nodes_free(struct rconn_node *head)
{
    for (struct rconn_node *n = head; n; n = n->next)
        rconn_psub_stop(n->ps);
    while (head) {
        struct rconn_node *n = head;

        head = n->next;
        rconn_psub_free(n->ps);
        rconn_mux_free(n->mux);
        free(n);
    }
}

void rconn_cluster_free(struct rconn_cluster *cl)
{
    if (!cl)
        return;
    for (int i = 0; i < NODES_MAX; i++)
        if (cl->nodes[i]) {
            cl->nodes[i]->next = cl->gone;
            cl->gone = cl->nodes[i];
        }
    nodes_free(cl->gone);
    pthread_mutex_destroy(&cl->refresh_mu);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

/* With cl->mu held: the entry of the node at host:port, made on first
 * sight; -1 when the table is full. */
static int node_get(struct rconn_cluster *cl, const char *host, unsigned port)
{
    int free_at = -1;

    for (int i = 0; i < NODES_MAX; i++) {
        struct rconn_node *n = cl->nodes[i];

        if (!n) {
            if (free_at < 0)
                free_at = i;
        } else if (n->srv.port == port && strcmp(n->host, host) == 0) {
            return i;
        }
    }
    if (free_at < 0)
        return -1;

    struct rconn_node *n = xcalloc(1, sizeof(*n));
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->srv = cl->seeds[0]; /* the credentials */
    n->srv.host = n->host;
    n->srv.port = port;
    n->srv.db = 0;
    n->srv.sentinel = NULL;
    n->mux = rconn_mux_new(&n->srv, cl->timeout_ms, 1);
    n->ps = rconn_psub_new(cl->hub, &n->srv, cl->timeout_ms, 1);
    cl->nodes[free_at] = n;
    return free_at;
}

/*
 * Let go of n (NULL: nothing), held by node_hold(). The last user of a
 * node that left the table closes its connection (there is no call in
 * flight on it any more) and stops its listener, without waiting for
 * its thread: that is for the next map's install.
 */
static void node_put(struct rconn_cluster *cl, struct rconn_node *n)
{
    struct rconn_mux *closed = NULL;

    if (!n)
        return;
    pthread_mutex_lock(&cl->mu);
    if (--n->refs == 0 && n->gone) {
        closed = n->mux;
        n->mux = NULL;
        rconn_psub_stop(n->ps);
    }
    pthread_mutex_unlock(&cl->mu);
    rconn_mux_free(closed);
}

/* With cl->mu held: n, now used by one more caller (until node_put()). */
static struct rconn_node *node_hold(struct rconn_node *n)
{
    n->refs++;
    return n;
}

void rconn_cluster_map_install(struct rconn_cluster *cl,
                               const struct redis_cluster_map *m)
{
    uint16_t idx[REDIS_CLUSTER_NODES_MAX];
    struct rconn_node *done = NULL;

    pthread_mutex_lock(&cl->mu);
    /* The nodes the map leaves out leave the table first, so that the
     * map's own always find room. */
    for (int i = 0; i < NODES_MAX; i++) {
        struct rconn_node *n = cl->nodes[i];
        int named = 0;

        for (int j = 0; n && j < m->nnodes && !named; j++)
            named = n->srv.port == m->nodes[j].port &&
                    strcmp(n->host, m->nodes[j].host) == 0;
        if (!n || named)
            continue;
        cl->nodes[i] = NULL;
        n->gone = 1;
        if (n->refs > 0) {
            n->next = cl->gone;
            cl->gone = n;
        } else {
            n->next = done;
            done = n;
        }
    }
    /* Those whose last user has let go since the last map. */
    for (struct rconn_node **pp = &cl->gone; *pp;) {
        struct rconn_node *n = *pp;

        if (n->refs > 0) {
            pp = &n->next;
            continue;
        }
        *pp = n->next;
        n->next = done;
        done = n;
    }
    for (int i = 0; i < m->nnodes; i++) {
        int k = node_get(cl, m->nodes[i].host, m->nodes[i].port);
        idx[i] = k < 0 ? REDIS_CLUSTER_NO_NODE : (uint16_t)k;
    }
    for (int s = 0; s < REDIS_SLOTS; s++)
        cl->slot_node[s] = m->slot_node[s] == REDIS_CLUSTER_NO_NODE
                               ? REDIS_CLUSTER_NO_NODE
                               : idx[m->slot_node[s]];
    cl->have_map = 1;
    cl->stale = 0;
    pthread_mutex_unlock(&cl->mu);
    /* A listener may be in the middle of a connect: not under cl->mu. */
    nodes_free(done);
}

int rconn_cluster_nodes(struct rconn_cluster *cl)
{
    int n = 0;

    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < NODES_MAX; i++)
        n += cl->nodes[i] != NULL;
    for (struct rconn_node *g = cl->gone; g; g = g->next)
        n++;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

/* Ask srv for the slot map into m. Returns 0 or an errno. */
static int map_ask(struct rconn_cluster *cl, const struct redis_server *srv,
                   struct redis_cluster_map *m)
{
    char why[160];
    int err = 0;
    redisContext *rc = redis_connect(srv, cl->timeout_ms, cl->timeout_ms,
                                     "lock", &cl->log, &err);

    if (!rc)
        return err;
    redisReply *r = redisCommand(rc, "CLUSTER SHARDS");
    if (!r) {
        err = redis_errno(rc);
    } else if (redis_cluster_map_parse(r, m, why, sizeof(why))) {
        log_warn("lock cluster map unreadable", "host=%s port=%u why=\"%s\"",
                 srv->host, srv->port, why);
        err = -EIO;
    }
    freeReplyObject(r);
    redisFree(rc);
    return err;
}

/*
 * Ask the known primaries, then the seeds, for the slot map, and install
 * the first one that answers. At most once per REFRESH_MIN_MS unless
 * force. Returns 0 or the last errno.
 */
static int map_refresh(struct rconn_cluster *cl, int force)
{
    struct redis_cluster_map *m = xmalloc(sizeof(*m));
    struct redis_server cand[NODES_MAX + URL_HOSTS_MAX];
    char hosts[NODES_MAX][REDIS_CLUSTER_HOST_LEN];
    int n = 0, err = -ECONNREFUSED;

    pthread_mutex_lock(&cl->refresh_mu);
    pthread_mutex_lock(&cl->mu);
    if (!force && cl->have_map && !cl->stale) {
        pthread_mutex_unlock(&cl->mu);
        err = 0;
        goto out;
    }
    if (!force && lock__mono_ms() - cl->refresh_ms < REFRESH_MIN_MS &&
        cl->have_map) {
        pthread_mutex_unlock(&cl->mu);
        err = 0;
        goto out;
    }
    for (int i = 0; i < NODES_MAX; i++) {
        if (!cl->nodes[i])
            continue;
        memcpy(hosts[n], cl->nodes[i]->host, REDIS_CLUSTER_HOST_LEN);
        cand[n] = cl->nodes[i]->srv;
        cand[n].host = hosts[n];
        n++;
    }
    for (int i = 0; i < cl->nseeds; i++)
        cand[n++] = cl->seeds[i];
    pthread_mutex_unlock(&cl->mu);

    for (int i = 0; i < n; i++) {
        err = map_ask(cl, &cand[i], m);
        if (err == 0)
            break;
    }
    if (err == 0)
        rconn_cluster_map_install(cl, m);
    pthread_mutex_lock(&cl->mu);
    cl->refresh_ms = lock__mono_ms();
    cl->stats.refresh++;
    metrics_count(METRIC_REDIS_REFRESH, 1);
    pthread_mutex_unlock(&cl->mu);
out:
    pthread_mutex_unlock(&cl->refresh_mu);
    free(m);
    return err;
}

/* The node that owns slot (refreshing a stale or missing map first),
 * held for the caller (node_put()), or NULL with *err. */
static struct rconn_node *owner_node(struct rconn_cluster *cl, unsigned slot,
                                     int *err)
{
    struct rconn_node *n = NULL;

    pthread_mutex_lock(&cl->mu);
    int need = !cl->have_map || cl->stale;
    pthread_mutex_unlock(&cl->mu);
    *err = need ? map_refresh(cl, 0) : 0;

    pthread_mutex_lock(&cl->mu);
    uint16_t k = cl->slot_node[slot % REDIS_SLOTS];
    if (k != REDIS_CLUSTER_NO_NODE && cl->nodes[k])
        n = node_hold(cl->nodes[k]);
    pthread_mutex_unlock(&cl->mu);
    if (!n && !*err)
        *err = -EIO;
    return n;
}

static void mark_stale(struct rconn_cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    cl->stale = 1;
    pthread_mutex_unlock(&cl->mu);
}

/* Sleep ms milliseconds. */
static void pause_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

int rconn_cluster_send(struct rconn_cluster *cl, struct rconn_call *call,
                       unsigned slot, enum rconn_script s, int nkeys, int argc,
                       const char **argv, const size_t *lens)
{
    int64_t until = lock__mono_ms() + cl->timeout_ms;
    int64_t pause = PAUSE_MS;

    for (;;) {
        int err;
        struct rconn_node *n = owner_node(cl, slot, &err);

        if (n) {
            err = rconn_mux_send(n->mux, call, s, nkeys, argc, argv, lens);
            if (err == 0) {
                /* The call holds its node until rconn_cluster_wait()
                 * returns. */
                call->node = n;
                call->redirect = &call->rd;
                call->cslot = slot;
                call->redirects = 0;
                return 0;
            }
            node_put(cl, n);
        }
        /* Never sent: the owner may have failed over; ask for the map
         * again and try its new owner while the timeout lasts. */
        if (err == -EACCES)
            return err;
        mark_stale(cl);
        if (lock__mono_ms() + pause >= until)
            return err;
        pause_ms(pause);
        pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
    }
}

/*
 * The node a MOVED or ASK reply rd names (the call's own node when it
 * names no host), held for the caller, or NULL when the table is full.
 * A MOVED also gives it the slot at once.
 */
static struct rconn_node *redirect_node(struct rconn_cluster *cl,
                                        const struct rconn_call *call,
                                        const struct redis_cluster_redirect *rd)
{
    struct rconn_node *n = NULL;

    pthread_mutex_lock(&cl->mu);
    int k = node_get(cl, rd->host[0] ? rd->host : call->node->host, rd->port);
    if (k >= 0) {
        n = node_hold(cl->nodes[k]);
        if (rd->kind == REDIS_CLUSTER_MOVED) {
            cl->slot_node[rd->slot % REDIS_SLOTS] = (uint16_t)k;
            cl->stale = 1;
            cl->stats.moved++;
            metrics_count(METRIC_REDIS_MOVED, 1);
        } else {
            cl->stats.ask++;
            metrics_count(METRIC_REDIS_ASK, 1);
        }
    }
    pthread_mutex_unlock(&cl->mu);
    return n;
}

redisReply *rconn_cluster_wait(struct rconn_cluster *cl,
                               struct rconn_call *call, int *err)
{
    int64_t until = lock__mono_ms() + cl->timeout_ms;
    int64_t pause = PAUSE_MS;
    redisReply *r = NULL;

    for (;;) {
        struct redis_cluster_redirect rd;
        struct rconn_node *n = NULL;
        int asking = 0;

        r = rconn_mux_wait(call->mux, call, err);
        if (r || *err != -EAGAIN) {
            /* A connection that broke may mean a failed primary. */
            if (!r && (*err == -ECONNRESET || *err == -ETIMEDOUT))
                mark_stale(cl);
            goto out;
        }
        rd = call->rd;
        /* TRYAGAIN is bounded by the timeout; a chain of MOVED and ASK
         * by this count. */
        if (rd.kind != REDIS_CLUSTER_TRYAGAIN &&
            ++call->redirects > REDIRECTS_MAX) {
            log_warn("lock cluster redirections without end", "slot=%u kind=%d",
                     call->cslot, (int)rd.kind);
            *err = -EIO;
            goto out;
        }
        if (rd.kind == REDIS_CLUSTER_MOVED || rd.kind == REDIS_CLUSTER_ASK) {
            n = redirect_node(cl, call, &rd);
            asking = rd.kind == REDIS_CLUSTER_ASK;
        } else {
            /* TRYAGAIN, CLUSTERDOWN: wait a little and ask the owner
             * (which may have changed) again. */
            pthread_mutex_lock(&cl->mu);
            cl->stats.tryagain++;
            metrics_count(METRIC_REDIS_TRYAGAIN, 1);
            pthread_mutex_unlock(&cl->mu);
            if (lock__mono_ms() + pause >= until) {
                *err = -ETIMEDOUT;
                goto out;
            }
            pause_ms(pause);
            pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
            n = owner_node(cl, call->cslot, err);
        }
        /* The reply is in: the call is off its node's connection. */
        node_put(cl, call->node);
        call->node = n;
        if (!n) {
            if (!*err)
                *err = -EIO;
            goto out;
        }
        *err = rconn_mux_resend(n->mux, call, asking);
        if (*err)
            goto out;
    }
out:
    node_put(cl, call->node);
    call->node = NULL;
    return r;
}

void rconn_cluster_send_detached(struct rconn_cluster *cl, unsigned slot,
                                 enum rconn_script s, int nkeys, int argc,
                                 const char **argv, const size_t *lens)
{
    int err;
    struct rconn_node *n = owner_node(cl, slot, &err);

    /* Without an owner there is nowhere to keep it: the undo is lost,
     * and the lease's end does its work instead. */
    if (n)
        rconn_mux_send_detached(n->mux, s, nkeys, argc, argv, lens);
    node_put(cl, n);
}

struct rconn_psub *rconn_cluster_psub(struct rconn_cluster *cl, unsigned slot)
{
    int err;
    struct rconn_node *n = owner_node(cl, slot, &err);

    return n ? n->ps : NULL;
}

void rconn_cluster_psub_put(struct rconn_cluster *cl, struct rconn_psub *ps)
{
    struct rconn_node *n = NULL;

    if (!ps)
        return;
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < NODES_MAX && !n; i++)
        if (cl->nodes[i] && cl->nodes[i]->ps == ps)
            n = cl->nodes[i];
    for (struct rconn_node *g = cl->gone; g && !n; g = g->next)
        if (g->ps == ps)
            n = g;
    pthread_mutex_unlock(&cl->mu);
    /* A listener the caller holds is always found. */
    node_put(cl, n);
}

int rconn_cluster_ping(struct rconn_cluster *cl)
{
    struct rconn_node *held[NODES_MAX];
    char seen[NODES_MAX] = {0};
    int n = 0, err = map_refresh(cl, 0); /* only when missing or stale */

    if (err)
        return err;
    /* Every primary that owns a slot must answer scripts. */
    pthread_mutex_lock(&cl->mu);
    for (int s = 0; s < REDIS_SLOTS; s++) {
        uint16_t k = cl->slot_node[s];

        if (k == REDIS_CLUSTER_NO_NODE || seen[k] || !cl->nodes[k])
            continue;
        seen[k] = 1;
        held[n++] = node_hold(cl->nodes[k]);
    }
    pthread_mutex_unlock(&cl->mu);
    for (int i = 0; i < n; i++) {
        if (!err)
            err = rconn_mux_ping(held[i]->mux);
        node_put(cl, held[i]);
    }
    return err;
}

struct rconn_cluster_stats rconn_cluster_stats(struct rconn_cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    struct rconn_cluster_stats st = cl->stats;
    pthread_mutex_unlock(&cl->mu);
    return st;
}
