/*
 * rcluster.c - the redis backend on a Redis Cluster (see rconn.h): one
 * multiplexed connection and one sharded pub/sub listener per primary,
 * the slot map (common/redis_cluster.h reads CLUSTER SHARDS and the
 * redirections), and the following of MOVED, ASK, TRYAGAIN and
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

/* Nodes remembered (primaries, old and new); their connections stay open
 * until the client closes. */
#define NODES_MAX (2 * REDIS_CLUSTER_NODES_MAX)
/* The map is asked for again at most this often. */
#define REFRESH_MIN_MS 100
/* First pause after TRYAGAIN/CLUSTERDOWN or an unreachable owner; it
 * doubles up to PAUSE_MAX_MS while the call's timeout lasts. */
#define PAUSE_MS 10
#define PAUSE_MAX_MS 200
/* MOVED and ASK replies followed by one call at most. */
#define REDIRECTS_MAX 16

struct rnode {
    char host[REDIS_CLUSTER_HOST_LEN];
    struct redis_server srv; /* host: the field above */
    struct rconn_mux *mux;
    struct rconn_psub *ps;
};

struct rconn_cluster {
    pthread_mutex_t mu;         /* guards the node table and the map */
    pthread_mutex_t refresh_mu; /* one map refresh at a time */
    struct redis_server seeds[URL_HOSTS_MAX];
    int nseeds;
    struct rconn_hub *hub;
    uint32_t timeout_ms;
    struct rnode *nodes[NODES_MAX];
    int nnodes;
    uint16_t slot_node[REDIS_SLOTS]; /* index in nodes, or _NO_NODE */
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

void rconn_cluster_free(struct rconn_cluster *cl)
{
    if (!cl)
        return;
    for (int i = 0; i < cl->nnodes; i++) {
        rconn_psub_free(cl->nodes[i]->ps);
        rconn_mux_free(cl->nodes[i]->mux);
        free(cl->nodes[i]);
    }
    pthread_mutex_destroy(&cl->refresh_mu);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

/* With cl->mu held: the node at host:port, made on first sight; -1 when
 * the table is full. */
static int node_get(struct rconn_cluster *cl, const char *host, unsigned port)
{
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->srv.port == port &&
            strcmp(cl->nodes[i]->host, host) == 0)
            return i;
    if (cl->nnodes == NODES_MAX)
        return -1;

    struct rnode *n = xcalloc(1, sizeof(*n));
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->srv = cl->seeds[0]; /* the credentials */
    n->srv.host = n->host;
    n->srv.port = port;
    n->srv.db = 0;
    n->srv.sentinel = NULL;
    n->mux = rconn_mux_new(&n->srv, cl->timeout_ms, 1);
    n->ps = rconn_psub_new(cl->hub, &n->srv, cl->timeout_ms, 1);
    cl->nodes[cl->nnodes] = n;
    return cl->nnodes++;
}

void rconn_cluster_map_install(struct rconn_cluster *cl,
                               const struct redis_cluster_map *m)
{
    uint16_t idx[REDIS_CLUSTER_NODES_MAX];

    pthread_mutex_lock(&cl->mu);
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
}

int rconn_cluster_nodes(struct rconn_cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    int n = cl->nnodes;
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
    for (int i = 0; i < cl->nnodes; i++) {
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

/* The node that owns slot (refreshing a stale or missing map first), or
 * NULL with *err. */
static struct rnode *owner_node(struct rconn_cluster *cl, unsigned slot,
                                int *err)
{
    struct rnode *n = NULL;

    pthread_mutex_lock(&cl->mu);
    int need = !cl->have_map || cl->stale;
    pthread_mutex_unlock(&cl->mu);
    *err = need ? map_refresh(cl, 0) : 0;

    pthread_mutex_lock(&cl->mu);
    uint16_t k = cl->slot_node[slot % REDIS_SLOTS];
    if (k != REDIS_CLUSTER_NO_NODE)
        n = cl->nodes[k];
    pthread_mutex_unlock(&cl->mu);
    if (!n && !*err)
        *err = -EIO;
    return n;
}

/* With cl->mu held: the host of the node whose connection is m (a
 * redirection that names no host means that one). */
static const char *mux_host(const struct rconn_cluster *cl,
                            const struct rconn_mux *m)
{
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->mux == m)
            return cl->nodes[i]->host;
    return "";
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
        struct rnode *n = owner_node(cl, slot, &err);

        if (n) {
            err = rconn_mux_send(n->mux, call, s, nkeys, argc, argv, lens);
            if (err == 0) {
                call->redirect = &call->rd;
                call->cslot = slot;
                call->redirects = 0;
                return 0;
            }
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

redisReply *rconn_cluster_wait(struct rconn_cluster *cl,
                               struct rconn_call *call, int *err)
{
    int64_t until = lock__mono_ms() + cl->timeout_ms;
    int64_t pause = PAUSE_MS;

    for (;;) {
        redisReply *r = rconn_mux_wait(call->mux, call, err);
        struct redis_cluster_redirect rd;
        struct rnode *n = NULL;
        int asking = 0;

        if (r || *err != -EAGAIN) {
            /* A connection that broke may mean a failed primary. */
            if (!r && (*err == -ECONNRESET || *err == -ETIMEDOUT))
                mark_stale(cl);
            return r;
        }
        rd = call->rd;
        /* TRYAGAIN is bounded by the timeout; a chain of MOVED and ASK
         * by this count. */
        if (rd.kind != REDIS_CLUSTER_TRYAGAIN &&
            ++call->redirects > REDIRECTS_MAX) {
            log_warn("lock cluster redirections without end", "slot=%u kind=%d",
                     call->cslot, (int)rd.kind);
            *err = -EIO;
            return NULL;
        }
        if (rd.kind == REDIS_CLUSTER_MOVED || rd.kind == REDIS_CLUSTER_ASK) {
            pthread_mutex_lock(&cl->mu);
            int k = node_get(cl, rd.host[0] ? rd.host : mux_host(cl, call->mux),
                             rd.port);
            if (k >= 0) {
                n = cl->nodes[k];
                if (rd.kind == REDIS_CLUSTER_MOVED) {
                    cl->slot_node[rd.slot % REDIS_SLOTS] = (uint16_t)k;
                    cl->stale = 1;
                    cl->stats.moved++;
                    metrics_count(METRIC_REDIS_MOVED, 1);
                } else {
                    cl->stats.ask++;
                    metrics_count(METRIC_REDIS_ASK, 1);
                }
            }
            pthread_mutex_unlock(&cl->mu);
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
                return NULL;
            }
            pause_ms(pause);
            pause = pause * 2 > PAUSE_MAX_MS ? PAUSE_MAX_MS : pause * 2;
            n = owner_node(cl, call->cslot, err);
        }
        if (!n) {
            if (!*err)
                *err = -EIO;
            return NULL;
        }
        *err = rconn_mux_resend(n->mux, call, asking);
        if (*err)
            return NULL;
    }
}

void rconn_cluster_send_detached(struct rconn_cluster *cl, unsigned slot,
                                 enum rconn_script s, int nkeys, int argc,
                                 const char **argv, const size_t *lens)
{
    int err;
    struct rnode *n = owner_node(cl, slot, &err);

    /* Without an owner there is nowhere to keep it: the undo is lost,
     * and the lease's end does its work instead. */
    if (n)
        rconn_mux_send_detached(n->mux, s, nkeys, argc, argv, lens);
}

struct rconn_psub *rconn_cluster_psub(struct rconn_cluster *cl, unsigned slot)
{
    int err;
    struct rnode *n = owner_node(cl, slot, &err);

    return n ? n->ps : NULL;
}

int rconn_cluster_ping(struct rconn_cluster *cl)
{
    struct rconn_mux *mux[NODES_MAX];
    int n = 0, err = map_refresh(cl, 0); /* only when missing or stale */

    if (err)
        return err;
    /* Every primary that owns a slot must answer scripts. */
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < cl->nnodes; i++)
        for (int s = 0; s < REDIS_SLOTS; s++)
            if (cl->slot_node[s] == i) {
                mux[n++] = cl->nodes[i]->mux;
                break;
            }
    pthread_mutex_unlock(&cl->mu);
    for (int i = 0; i < n && !err; i++)
        err = rconn_mux_ping(mux[i]);
    return err;
}

struct rconn_cluster_stats rconn_cluster_stats(struct rconn_cluster *cl)
{
    pthread_mutex_lock(&cl->mu);
    struct rconn_cluster_stats st = cl->stats;
    pthread_mutex_unlock(&cl->mu);
    return st;
}
