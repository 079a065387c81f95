/*
 * psub.c - the pub/sub listener of rconn.h: one connection and one thread
 * per Redis server, subscribed to the channels of the locks this process
 * is waiting for (refcounted, as Redisson's LockPubSub). Each message bumps
 * its channel's generation and wakes every waiter of the hub; a waiter
 * checks its own channel. A reconnect bumps every generation, since a
 * release may have been published while the listener was away.
 */
#include "lock/rconn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define RECONNECT_MS 200
#define POLL_MS 1000

struct chan {
    struct chan *next;
    char *name; /* the channel */
    int refs;
    int confirmed; /* the server confirmed SUBSCRIBE */
    int sent;      /* SUBSCRIBE sent on the current connection */
    uint64_t gen;
};

struct rconn_psub {
    struct rconn_hub *hub;   /* hub->mu guards every field below */
    struct redis_server srv; /* its strings: the client's URL */
    struct redis_connect_log log;
    unsigned epoch; /* redis_server_epoch() when the connection was made */
    uint32_t timeout_ms;
    struct chan *chans;
    int dirty; /* subscriptions to send */
    int stop;
    int sharded; /* a cluster node: SSUBSCRIBE, on the channel's slot */
    int wake[2]; /* a pipe: wakes the thread out of poll() */
    pthread_t thread;
};

void rconn_hub_init(struct rconn_hub *h)
{
    pthread_condattr_t attr;

    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &attr);
    pthread_condattr_destroy(&attr);
}

void rconn_hub_destroy(struct rconn_hub *h)
{
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->mu);
}

static struct chan *chan_find(struct rconn_psub *ps, const char *name,
                              size_t len)
{
    for (struct chan *ch = ps->chans; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

static void poke(struct rconn_psub *ps)
{
    char b = 1;
    ssize_t n = write(ps->wake[1], &b, 1);
    (void)n; /* a full pipe already wakes the thread */
}

static void bump_all(struct rconn_psub *ps)
{
    for (struct chan *ch = ps->chans; ch; ch = ch->next)
        ch->gen++;
    pthread_cond_broadcast(&ps->hub->cond);
}

/* With hub->mu held: send SUBSCRIBE for new channels, UNSUBSCRIBE and
 * forget the ones nobody waits on. */
static int send_changes(struct rconn_psub *ps, redisContext *rc)
{
    int done = 0;

    for (struct chan **pp = &ps->chans; *pp;) {
        struct chan *ch = *pp;
        if (ch->refs == 0) {
            if (ch->sent)
                redisAppendCommand(rc, "%sUNSUBSCRIBE %s",
                                   ps->sharded ? "S" : "", ch->name);
            *pp = ch->next;
            free(ch->name);
            free(ch);
            continue;
        }
        if (!ch->sent) {
            redisAppendCommand(rc, "%sSUBSCRIBE %s", ps->sharded ? "S" : "",
                               ch->name);
            ch->sent = 1;
        }
        pp = &ch->next;
    }
    ps->dirty = 0;
    while (!done)
        if (redisBufferWrite(rc, &done) != REDIS_OK)
            return -1;
    return 0;
}

/* With hub->mu held: one reply from the server. */
static void handle_reply(struct rconn_psub *ps, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    struct chan *ch = chan_find(ps, r->element[1]->str, r->element[1]->len);
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0 || strcmp(kind, "smessage") == 0) {
        ch->gen++;
        pthread_cond_broadcast(&ps->hub->cond);
    } else if (strcmp(kind, "sunsubscribe") == 0 && ch->refs > 0 && ch->sent &&
               ch->confirmed) {
        /* The node gave the channel's slot away (a slot move, a
         * failover) and dropped the subscription: wake the waiters, who
         * subscribe again at the slot's new owner (a release in between
         * costs them their fallback interval, no more). Before the
         * confirmation it is the answer to our own SUNSUBSCRIBE of an
         * earlier incarnation of the channel (replies come in order). */
        ch->sent = ch->confirmed = 0;
        ch->gen++;
        pthread_cond_broadcast(&ps->hub->cond);
    } else if (strcmp(kind, "subscribe") == 0 ||
               strcmp(kind, "ssubscribe") == 0) {
        /* A confirmation from an earlier, since unsubscribed, incarnation
         * of this channel can land here; the waiter's timer covers the
         * short window that leaves. */
        ch->confirmed = 1;
        pthread_cond_broadcast(&ps->hub->cond);
    }
}

static redisContext *listener_connect(struct rconn_psub *ps)
{
    int err;

    return redis_connect(&ps->srv, ps->timeout_ms, ps->timeout_ms,
                         "lock listener", &ps->log, &err);
}

static void sleep_locked(struct rconn_psub *ps, int64_t ms)
{
    struct timespec ts;
    int64_t until = lock__mono_ms() + ms;

    ts.tv_sec = (time_t)(until / 1000);
    ts.tv_nsec = (long)(until % 1000) * 1000000L;
    while (!ps->stop && !ps->dirty && lock__mono_ms() < until)
        pthread_cond_timedwait(&ps->hub->cond, &ps->hub->mu, &ts);
}

static void *listener_main(void *arg)
{
    struct rconn_psub *ps = arg;
    redisContext *rc = NULL;

    pthread_mutex_lock(&ps->hub->mu);
    while (!ps->stop) {
        if (!rc) {
            int wanted = 0;
            for (struct chan *ch = ps->chans; ch; ch = ch->next)
                wanted |= ch->refs > 0;
            if (!wanted && !ps->dirty) {
                /* Connect only while someone waits. */
                sleep_locked(ps, POLL_MS);
                continue;
            }
            pthread_mutex_unlock(&ps->hub->mu);
            ps->epoch = redis_server_epoch(&ps->srv);
            rc = listener_connect(ps);
            pthread_mutex_lock(&ps->hub->mu);
            if (!rc) {
                sleep_locked(ps, RECONNECT_MS);
                continue;
            }
            for (struct chan *ch = ps->chans; ch; ch = ch->next)
                ch->sent = ch->confirmed = 0;
            ps->dirty = 1;
            bump_all(ps);
        }
        if (ps->dirty && send_changes(ps, rc))
            goto lost;

        struct pollfd pfd[2] = {{.fd = rc->fd, .events = POLLIN},
                                {.fd = ps->wake[0], .events = POLLIN}};
        pthread_mutex_unlock(&ps->hub->mu);
        int n = poll(pfd, 2, POLL_MS);
        if (n > 0 && (pfd[1].revents & POLLIN)) {
            char buf[64];
            while (read(ps->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        int rd = n > 0 && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
                     ? redisBufferRead(rc)
                     : REDIS_OK;
        pthread_mutex_lock(&ps->hub->mu);
        if (rd != REDIS_OK)
            goto lost;
        /* Releases are published on the master: follow it when the
         * sentinels name a new one. */
        if (redis_server_epoch(&ps->srv) != ps->epoch) {
            redisFree(rc);
            rc = NULL;
            for (struct chan *ch = ps->chans; ch; ch = ch->next)
                ch->sent = ch->confirmed = 0;
            bump_all(ps);
            continue;
        }
        for (;;) {
            redisReply *r = NULL;
            if (redisGetReplyFromReader(rc, (void **)&r) != REDIS_OK)
                goto lost;
            if (!r)
                break;
            handle_reply(ps, r);
            freeReplyObject(r);
        }
        continue;
    lost:
        log_warn("redis lock listener lost its connection",
                 "host=%s port=%u err=\"%s\"", ps->srv.host, ps->srv.port,
                 rc->errstr);
        redisFree(rc);
        rc = NULL;
        for (struct chan *ch = ps->chans; ch; ch = ch->next)
            ch->sent = ch->confirmed = 0;
        bump_all(ps);
        sleep_locked(ps, RECONNECT_MS);
    }
    pthread_mutex_unlock(&ps->hub->mu);
    redisFree(rc);
    return NULL;
}

struct rconn_psub *rconn_psub_new(struct rconn_hub *hub,
                                  const struct redis_server *srv,
                                  uint32_t timeout_ms, int sharded)
{
    struct rconn_psub *ps = xcalloc(1, sizeof(*ps));

    ps->sharded = sharded;
    ps->hub = hub;
    ps->srv = *srv;
    ps->timeout_ms = timeout_ms;
    if (pipe2(ps->wake, O_CLOEXEC | O_NONBLOCK) != 0 ||
        pthread_create(&ps->thread, NULL, listener_main, ps) != 0) {
        log_error("lock listener start failed", "errno=%d", errno);
        abort();
    }
    return ps;
}

void rconn_psub_stop(struct rconn_psub *ps)
{
    pthread_mutex_lock(&ps->hub->mu);
    ps->stop = 1;
    pthread_cond_broadcast(&ps->hub->cond);
    pthread_mutex_unlock(&ps->hub->mu);
    poke(ps);
}

void rconn_psub_free(struct rconn_psub *ps)
{
    if (!ps)
        return;
    rconn_psub_stop(ps);
    pthread_join(ps->thread, NULL);
    while (ps->chans) {
        struct chan *ch = ps->chans;
        ps->chans = ch->next;
        free(ch->name);
        free(ch);
    }
    close(ps->wake[0]);
    close(ps->wake[1]);
    free(ps);
}

uint64_t rconn_psub_subscribe(struct rconn_psub *ps, const char *name,
                              int64_t until_ms)
{
    size_t len = strlen(name);
    struct timespec ts;
    struct chan *ch;
    uint64_t gen;

    ts.tv_sec = (time_t)(until_ms / 1000);
    ts.tv_nsec = (long)(until_ms % 1000) * 1000000L;
    pthread_mutex_lock(&ps->hub->mu);
    ch = chan_find(ps, name, len);
    if (!ch || ch->refs == 0) {
        if (!ch) {
            ch = xcalloc(1, sizeof(*ch));
            ch->name = xstrdup(name);
            ch->next = ps->chans;
            ps->chans = ch;
        }
        ps->dirty = 1;
        pthread_cond_broadcast(&ps->hub->cond);
        poke(ps);
    }
    ch->refs++;
    while (!ch->confirmed && !ps->stop && lock__mono_ms() < until_ms)
        pthread_cond_timedwait(&ps->hub->cond, &ps->hub->mu, &ts);
    gen = ch->gen;
    pthread_mutex_unlock(&ps->hub->mu);
    return gen;
}

void rconn_psub_unsubscribe(struct rconn_psub *ps, const char *name)
{
    pthread_mutex_lock(&ps->hub->mu);
    struct chan *ch = chan_find(ps, name, strlen(name));
    if (ch && ch->refs > 0 && --ch->refs == 0) {
        ps->dirty = 1;
        poke(ps);
    }
    pthread_mutex_unlock(&ps->hub->mu);
}

int rconn_psub_changed(struct rconn_psub *ps, const char *name, uint64_t *gen)
{
    struct chan *ch = chan_find(ps, name, strlen(name));

    if (!ch || ch->gen == *gen)
        return 0;
    *gen = ch->gen;
    return 1;
}
