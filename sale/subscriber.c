/*
 * subscriber.c - one Redis pub/sub channel, listened to by a thread of
 * its own (see subscriber.h).
 */
#include "sale/subscriber.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/redis.h"
#include "common/redis_cluster.h"
#include "common/util.h"

/* Reconnects: from MIN doubling up to MAX. */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
/* TCP keepalive of the connection: a dead peer is noticed after about
 * IDLE + INTVL * CNT seconds (a subscriber sends nothing). */
#define KEEPALIVE_IDLE_S 5
#define KEEPALIVE_INTVL_S 2
#define KEEPALIVE_CNT 3
/* How often a quiet subscriber checks whether the sentinels named a new
 * master (its own connection would still be to the old one). */
#define EPOCH_CHECK_MS 1000

struct subscriber {
    struct subscriber_config cfg;
    char channel[64];
    int stop_pipe[2]; /* written once by subscriber_stop() */
    pthread_t thread;
    atomic_bool listening;
    int64_t next_tick_ms; /* monotonic */
};

/* on_tick when it is due; the milliseconds until the next one (-1: no
 * ticks). */
static int tick(struct subscriber *s)
{
    int64_t now;

    if (!s->cfg.tick_ms)
        return -1;
    now = util_mono_ms();
    if (now >= s->next_tick_ms) {
        s->cfg.on_tick(s->cfg.ctx);
        now = util_mono_ms();
        s->next_tick_ms = now + s->cfg.tick_ms;
    }
    return (int)(s->next_tick_ms - now);
}

/* Wait up to ms (-1: forever) for fd (< 0: none) or a stop. Returns 1
 * when stopped, 0 otherwise (*ready: fd is readable), -1 on a failed
 * poll. */
static int wait_for(struct subscriber *s, int fd, int ms, bool *ready)
{
    struct pollfd p[2] = {{.fd = s->stop_pipe[0], .events = POLLIN},
                          {.fd = fd, .events = POLLIN}};
    int n;

    *ready = false;
    n = poll(p, fd >= 0 ? 2 : 1, ms);
    if (n < 0)
        return errno == EINTR ? 0 : -1;
    if (p[0].revents)
        return 1;
    *ready = fd >= 0 && p[1].revents;
    return 0;
}

/* Sleep ms, ticking meanwhile; true when stopped. */
static bool sleep_or_stop(struct subscriber *s, int ms)
{
    int64_t until = util_mono_ms() + ms;
    bool ready;

    for (;;) {
        int64_t left = until - util_mono_ms();
        int t = tick(s);

        if (left <= 0)
            return false;
        if (t >= 0 && t < left)
            left = t;
        if (wait_for(s, -1, (int)left, &ready) == 1)
            return true;
    }
}

static bool reply_ok(struct subscriber *s, redisContext *rc, redisReply *r)
{
    bool ok = r && r->type != REDIS_REPLY_ERROR;

    if (!ok)
        log_warn("subscriber failed", "what=\"%s\" step=subscribe err=\"%s\"",
                 s->cfg.what, r ? r->str : rc->errstr);
    freeReplyObject(r);
    return ok;
}

/*
 * On a cluster: the primary that owns the channel's slot now, from a
 * fresh slot map (asked of the seeds at each subscription: a rare event),
 * into rs (host in host, cap bytes), with the seeds' credentials. 0 or
 * -errno (logged).
 */
static int channel_owner(struct subscriber *s, struct redis_server *rs,
                         char *host, size_t cap)
{
    const struct store_config *c = s->cfg.store;
    struct redis_cluster *cl =
        redis_cluster_new(c->redis_cluster_seeds, c->redis_cluster_nseeds,
                          c->connect_timeout_ms, c->io_timeout_ms, s->cfg.what);
    unsigned port = 0;
    int err = redis_cluster_slot_owner(cl, redis_key_slot_str(s->channel), host,
                                       cap, &port);

    redis_cluster_free(cl);
    if (err) {
        log_warn("subscriber failed",
                 "what=\"%s\" step=slot_owner channel=%s err=%d", s->cfg.what,
                 s->channel, err);
        return err;
    }
    *rs = c->redis_cluster_seeds[0];
    rs->host = host;
    rs->port = port;
    return 0;
}

/* Connect (common/redis.h: one log line per streak of failures) and
 * SUBSCRIBE, with the store's timeouts; on a cluster SSUBSCRIBE at the
 * channel's slot owner (sharded pub/sub: the publisher's SPUBLISH reaches
 * that node and its replicas only). NULL: failed. */
static redisContext *subscribe(struct subscriber *s,
                               struct redis_connect_log *log)
{
    const struct store_config *c = s->cfg.store;
    bool sharded = store_redis_is_cluster(c);
    int on = 1, idle = KEEPALIVE_IDLE_S, intvl = KEEPALIVE_INTVL_S,
        cnt = KEEPALIVE_CNT, err;
    char host[REDIS_CLUSTER_HOST_LEN];
    struct redis_server rs;
    redisContext *rc;
    redisReply *r;

    if (!sharded)
        store_redis_server(c, &rs);
    else if (channel_owner(s, &rs, host, sizeof(host)))
        return NULL;
    rc = redis_connect(&rs, c->connect_timeout_ms, c->io_timeout_ms,
                       s->cfg.what, log, &err);
    if (!rc)
        return NULL;
    setsockopt(rc->fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    setsockopt(rc->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(rc->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(rc->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    /* The reply is the subscription's confirmation: from here on no
     * message is missed. */
    r = redisCommand(rc, "%sSUBSCRIBE %s", sharded ? "S" : "", s->channel);
    if (!reply_ok(s, rc, r)) {
        redisFree(rc);
        return NULL;
    }
    return rc;
}

/* One message to the owner. False when the node ended the subscription
 * (a cluster node that gave the channel's slot away sends SUNSUBSCRIBE):
 * subscribe again, at the slot's new owner. */
static bool on_reply(struct subscriber *s, redisReply *r)
{
    const char *kind;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return true;
    kind = r->element[0]->str;
    if (strcmp(kind, "sunsubscribe") == 0)
        return false;
    if ((strcmp(kind, "message") == 0 || strcmp(kind, "smessage") == 0) &&
        r->element[2]->type == REDIS_REPLY_STRING)
        s->cfg.on_message(s->cfg.ctx, r->element[2]->str, r->element[2]->len);
    return true;
}

/* Handle messages until the connection fails, the Redis master changes
 * (epoch: redis_server_epoch() at its connect) or the thread is stopped.
 * True: stop. */
static bool listen_until_error(struct subscriber *s, redisContext *rc,
                               unsigned epoch)
{
    struct redis_server rs;

    store_redis_server(s->cfg.store, &rs);
    for (;;) {
        void *reply = NULL;
        bool ready;
        int ms, t, w;

        while (redisGetReplyFromReader(rc, &reply) == REDIS_OK && reply) {
            bool still = on_reply(s, reply);

            freeReplyObject(reply);
            reply = NULL;
            if (!still) {
                log_info("subscriber follows the channel's new slot owner",
                         "what=\"%s\" channel=%s", s->cfg.what, s->channel);
                return false;
            }
        }
        if (rc->err)
            break;
        if (redis_server_epoch(&rs) != epoch) {
            log_info("subscriber follows the new redis master",
                     "what=\"%s\" channel=%s", s->cfg.what, s->channel);
            return false;
        }
        ms = rs.sentinel ? EPOCH_CHECK_MS : -1;
        t = tick(s);
        if (t >= 0 && (ms < 0 || t < ms))
            ms = t;
        w = wait_for(s, rc->fd, ms, &ready);
        if (w == 1)
            return true;
        if (w < 0)
            break;
        if (ready && redisBufferRead(rc) != REDIS_OK)
            break;
    }
    log_warn("subscriber lost", "what=\"%s\" err=\"%s\"", s->cfg.what,
             rc->err ? rc->errstr : "poll failed");
    return false;
}

static void *subscriber_main(void *arg)
{
    struct subscriber *s = arg;
    struct redis_connect_log log = {0};
    int backoff = BACKOFF_MIN_MS;

    for (;;) {
        struct redis_server rs;
        unsigned epoch;
        redisContext *rc;

        store_redis_server(s->cfg.store, &rs);
        epoch = redis_server_epoch(&rs);
        rc = subscribe(s, &log);
        if (rc) {
            s->cfg.on_subscribed(s->cfg.ctx);
            atomic_store(&s->listening, true);
            log_info("subscribed", "what=\"%s\" channel=%s", s->cfg.what,
                     s->channel);
            backoff = BACKOFF_MIN_MS;
            bool stop = listen_until_error(s, rc, epoch);
            atomic_store(&s->listening, false);
            redisFree(rc);
            if (stop)
                break;
        }
        if (sleep_or_stop(s, backoff))
            break;
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

struct subscriber *subscriber_start(const struct subscriber_config *cfg)
{
    struct subscriber *s = xcalloc(1, sizeof(*s));
    int err;

    s->cfg = *cfg;
    snprintf(s->channel, sizeof(s->channel), "%s", cfg->channel);
    s->cfg.channel = s->channel;
    if (pipe2(s->stop_pipe, O_CLOEXEC) != 0) {
        err = errno;
    } else {
        err = pthread_create(&s->thread, NULL, subscriber_main, s);
        if (err) {
            close(s->stop_pipe[0]);
            close(s->stop_pipe[1]);
        }
    }
    if (err) {
        log_error("subscriber not started", "what=\"%s\" err=\"%s\"", cfg->what,
                  strerror(err));
        free(s);
        return NULL;
    }
    return s;
}

void subscriber_stop(struct subscriber *s)
{
    char c = 1;

    if (!s)
        return;
    while (write(s->stop_pipe[1], &c, 1) < 0 && errno == EINTR)
        ;
    pthread_join(s->thread, NULL);
    close(s->stop_pipe[0]);
    close(s->stop_pipe[1]);
    free(s);
}

bool subscriber_listening(const struct subscriber *s)
{
    return s && atomic_load(&s->listening);
}
