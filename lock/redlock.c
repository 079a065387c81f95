/*
 * redlock.c - RedLock over N independent Redis masters, as the Redis
 * documentation describes it (https://redis.io/docs/latest/develop/use/
 * patterns/distributed-locks/):
 *
 *   1. note the time; send the acquire script (SET NX PX with one random
 *      owner) to all N servers at once, each with a short timeout;
 *   2. the lock is ours if a quorum (N/2+1) granted it and the validity
 *      left, lease - elapsed - drift (drift = 1% of the lease + 2 ms), is
 *      positive;
 *   3. otherwise release it on every server (also the ones that did not
 *      answer: they may have set it) and retry after a random delay.
 *
 * Fencing, which plain RedLock lacks (Kleppmann's objection): each server
 * INCRs its own lock:fence counter in the same script; the token is the
 * highest value among the granting quorum, and it is then written back to
 * those servers (raised, never lowered) before the acquire returns. Any
 * later quorum shares a server with this one, so its INCR there exceeds
 * this token. This holds as long as servers do not lose their counter
 * (the same assumption RedLock's safety already makes: persistence with
 * fsync, or restarted servers kept out for a lease).
 */
#include "lock/rconn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define FALLBACK_MS 500

struct redlock_impl {
    int n, quorum;
    struct redis_server srv[URL_HOSTS_MAX]; /* strings: the client's URL */
    struct rconn_mux *mux[URL_HOSTS_MAX];
    struct rconn_hub hub;
    struct rconn_psub *ps[URL_HOSTS_MAX];
};

static int redlock_open(struct lock_client *c)
{
    struct redlock_impl *ri;

    /* One server is a plain Redis lock; two cannot survive a failure. */
    if (c->url.nhosts < 3)
        return -EINVAL;
    ri = xcalloc(1, sizeof(*ri));
    if (rconn_url_servers(&c->url, ri->srv)) {
        free(ri);
        return -EINVAL;
    }
    ri->n = c->url.nhosts;
    ri->quorum = ri->n / 2 + 1;
    rconn_hub_init(&ri->hub);
    for (int i = 0; i < ri->n; i++) {
        ri->mux[i] = rconn_mux_new(&ri->srv[i], c->timeout_ms, 0);
        ri->ps[i] = rconn_psub_new(&ri->hub, &ri->srv[i], c->timeout_ms, 0);
    }
    c->impl = ri;
    return 0;
}

static void redlock_close(struct lock_client *c)
{
    struct redlock_impl *ri = c->impl;

    for (int i = 0; i < ri->n; i++) {
        rconn_psub_free(ri->ps[i]);
        rconn_mux_free(ri->mux[i]);
    }
    rconn_hub_destroy(&ri->hub);
    free(ri);
}

/* The outcome of one script on one server. */
struct answer {
    int err;       /* 0, or the server did not answer usefully */
    int sent;      /* the command went out (it may have run) */
    redisReply *r; /* the reply when err == 0; freed by fan_out_free */
};

/*
 * Run script s on every server at once: append to all, then read all, so
 * the whole round costs one round trip and at most one timeout.
 */
static void fan_out(struct redlock_impl *ri, enum rconn_script s, int nkeys,
                    int argc, const char **argv, const size_t *lens,
                    const int *only, struct answer *a)
{
    struct rconn_call call[URL_HOSTS_MAX];
    int sent[URL_HOSTS_MAX] = {0};

    for (int i = 0; i < ri->n; i++) {
        a[i].r = NULL;
        a[i].sent = 0;
        a[i].err = -ENOTCONN;
        if (only && !only[i])
            continue;
        a[i].err =
            rconn_mux_send(ri->mux[i], &call[i], s, nkeys, argc, argv, lens);
        sent[i] = a[i].sent = a[i].err == 0;
    }
    for (int i = 0; i < ri->n; i++)
        if (sent[i])
            a[i].r = rconn_mux_wait(ri->mux[i], &call[i], &a[i].err);
}

static void fan_out_free(struct redlock_impl *ri, struct answer *a)
{
    for (int i = 0; i < ri->n; i++)
        freeReplyObject(a[i].r);
}

/*
 * Release on every server (only on those in only[] when not NULL);
 * returns how many still held it for us. A release of a hold (not the
 * undo of a failed round) leaves a receipt on each server, so that asked
 * again after a lost answer each server answers the same; *unknown is
 * set when a server took the command without answering.
 */
static int release_on(struct redlock_impl *ri, struct lock *l, const int *only,
                      int receipt, int *err, int *unknown)
{
    char channel[LOCK_RKEY_MAX], rkey[LOCK_RKEY_MAX],
        suffix[LOCK_OWNER_LEN + 2];
    char token[24], ms[16];
    const char *argv[6] = {l->rkey, channel, rkey, l->owner, token, ms};
    size_t lens[6];
    struct answer a[URL_HOSTS_MAX];
    int held = 0, answered = 0;
    uint32_t receipt_ms =
        l->c->timeout_ms * 5 > 5000 ? l->c->timeout_ms * 5 : 5000;

    lens[0] = l->rkey_len;
    lens[1] = rconn_lock_name(l, channel, RCONN_CHANNEL, NULL);
    snprintf(suffix, sizeof(suffix), ":%s", l->owner);
    lens[2] = rconn_lock_name(l, rkey, RCONN_RECEIPT, suffix);
    lens[3] = strlen(l->owner);
    lens[4] = (size_t)snprintf(token, sizeof(token), "%llu",
                               (unsigned long long)l->fence);
    lens[5] = (size_t)snprintf(ms, sizeof(ms), "%u", (unsigned)receipt_ms);
    if (receipt) {
        fan_out(ri, RCONN_RELEASE_ONCE, 3, 6, argv, lens, only, a);
    } else {
        argv[2] = l->owner;
        lens[2] = lens[3];
        fan_out(ri, RCONN_RELEASE, 2, 3, argv, lens, only, a);
    }
    *err = 0;
    *unknown = 0;
    for (int i = 0; i < ri->n; i++) {
        if (a[i].err) {
            *err = a[i].err;
            *unknown |= a[i].sent;
            continue;
        }
        answered++;
        held += a[i].r->type == REDIS_REPLY_INTEGER && a[i].r->integer == 1;
    }
    if (answered >= ri->quorum)
        *err = 0;
    fan_out_free(ri, a);
    return held;
}

/*
 * Raise l's counter on every granting server to token, so that any later
 * quorum's next token exceeds it (kept for the lease, as the acquire
 * keeps it). Returns how many servers confirmed.
 */
static int raise_fence(struct redlock_impl *ri, const struct lock *l,
                       const int *granted, uint64_t token, uint32_t lease)
{
    char fence[LOCK_RKEY_MAX], tok[24], keep[16];
    const char *argv[3] = {fence, tok, keep};
    size_t lens[3];
    struct answer a[URL_HOSTS_MAX];
    int ok = 0;

    lens[0] = rconn_lock_name(l, fence, RCONN_FENCE, NULL);
    lens[1] =
        (size_t)snprintf(tok, sizeof(tok), "%llu", (unsigned long long)token);
    lens[2] = (size_t)snprintf(keep, sizeof(keep), "%u", (unsigned)lease);
    fan_out(ri, RCONN_FENCE_RAISE, 1, 3, argv, lens, granted, a);
    for (int i = 0; i < ri->n; i++)
        ok += granted[i] && a[i].err == 0;
    fan_out_free(ri, a);
    return ok;
}

/*
 * One RedLock round. Returns 0 with *taken, or an errno when fewer than a
 * quorum of servers answered at all (the lock service is unavailable).
 * *pttl is the longest TTL seen on a busy server.
 */
static int try_once(struct redlock_impl *ri, struct lock *l, uint32_t lease,
                    int *taken, int64_t *pttl)
{
    char lease_s[16], fence[LOCK_RKEY_MAX];
    const char *argv[4] = {l->rkey, fence, l->owner, lease_s};
    size_t lens[4];
    struct answer a[URL_HOSTS_MAX];
    int granted[URL_HOSTS_MAX] = {0};
    int undo[URL_HOSTS_MAX] = {0};
    int ngranted = 0, nundo = 0, answered = 0, err = 0, rel_err, rel_unknown;
    uint64_t token = 0;
    int64_t start = lock__mono_ms();

    lens[0] = l->rkey_len;
    lens[1] = rconn_lock_name(l, fence, RCONN_FENCE, NULL);
    lens[2] = strlen(l->owner);
    lens[3] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    fan_out(ri, RCONN_ACQUIRE, 2, 4, argv, lens, NULL, a);
    *taken = 0;
    *pttl = -1;
    for (int i = 0; i < ri->n; i++) {
        redisReply *r = a[i].r;
        /* Granted, or sent without a usable answer (it may have run):
         * to be undone unless the lock is ours. */
        undo[i] =
            a[i].sent &&
            (a[i].err || (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                          r->element[0]->type == REDIS_REPLY_INTEGER &&
                          r->element[0]->integer == 1));
        nundo += undo[i];
        if (a[i].err) {
            err = a[i].err;
            continue;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER) {
            err = -EIO;
            continue;
        }
        answered++;
        if (r->element[0]->integer == 1) {
            granted[i] = 1;
            ngranted++;
            if ((uint64_t)r->element[1]->integer > token)
                token = (uint64_t)r->element[1]->integer;
        } else if (r->element[1]->integer > *pttl) {
            *pttl = r->element[1]->integer;
        }
    }
    fan_out_free(ri, a);

    int64_t drift = lease / 100 + 2;
    int64_t validity = (int64_t)lease - (lock__mono_ms() - start) - drift;
    if (ngranted >= ri->quorum && validity > 0 &&
        raise_fence(ri, l, granted, token, lease) >= ri->quorum) {
        l->fence = token;
        *taken = 1;
        return 0;
    }
    /* Undo partial grants, including on servers that took the command
     * but timed out (they may have set the key). A server the command
     * never reached has nothing to undo, and asking it again would cost
     * another timeout. */
    if (nundo > 0)
        release_on(ri, l, undo, 0, &rel_err, &rel_unknown);
    if (answered < ri->quorum) {
        log_warn("redlock quorum unreachable",
                 "name=\"%s\" answered=%d "
                 "quorum=%d",
                 l->name, answered, ri->quorum);
        return err ? err : -EIO;
    }
    return 0;
}

static void subscribe_all(struct redlock_impl *ri, const char *name,
                          int64_t until, uint64_t *gen)
{
    for (int i = 0; i < ri->n; i++)
        gen[i] = rconn_psub_subscribe(ri->ps[i], name, until);
}

static void wait_message(struct redlock_impl *ri, const char *name,
                         uint64_t *gen, int64_t wake_at)
{
    struct timespec ts = {(time_t)(wake_at / 1000),
                          (long)(wake_at % 1000) * 1000000L};
    int changed = 0;

    pthread_mutex_lock(&ri->hub.mu);
    while (!changed && lock__mono_ms() < wake_at) {
        for (int i = 0; i < ri->n; i++)
            changed |= rconn_psub_changed(ri->ps[i], name, &gen[i]);
        if (!changed)
            pthread_cond_timedwait(&ri->hub.cond, &ri->hub.mu, &ts);
    }
    pthread_mutex_unlock(&ri->hub.mu);
}

static int redlock_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease,
                           enum lock_status *status)
{
    struct redlock_impl *ri = l->c->impl;
    uint64_t gen[URL_HOSTS_MAX];
    int taken = 0, err;
    int64_t pttl;

    err = try_once(ri, l, lease, &taken, &pttl);
    if (err || taken || wait_ms == 0)
        goto out;

    int64_t now = lock__mono_ms();
    int64_t deadline = now + wait_ms;
    int64_t confirm_by = now + l->c->timeout_ms;
    char chan[LOCK_RKEY_MAX];
    rconn_lock_name(l, chan, RCONN_CHANNEL, NULL);
    subscribe_all(ri, chan, confirm_by < deadline ? confirm_by : deadline, gen);
    for (;;) {
        err = try_once(ri, l, lease, &taken, &pttl);
        now = lock__mono_ms();
        if (err || taken || now >= deadline)
            break;
        /* A random delay, so that clients that split the vote do not
         * collide again; a release message ends it early. */
        int64_t sleep_ms = lock__jitter_ms(FALLBACK_MS, deadline - now);
        if (pttl >= 0 && pttl + 1 < sleep_ms)
            sleep_ms = pttl + 1;
        wait_message(ri, chan, gen, now + sleep_ms);
    }
    for (int i = 0; i < ri->n; i++)
        rconn_psub_unsubscribe(ri->ps[i], chan);
out:
    if (err == 0)
        *status = taken ? LOCK_ACQUIRED : LOCK_BUSY;
    return err;
}

/* Reachable when a quorum of servers runs scripts. */
static int redlock_ping(struct lock_client *c)
{
    struct redlock_impl *ri = c->impl;
    struct answer a[URL_HOSTS_MAX];
    int ok = 0, err = 0;

    fan_out(ri, RCONN_PING, 0, 0, NULL, NULL, NULL, a);
    for (int i = 0; i < ri->n; i++) {
        if (a[i].err)
            err = a[i].err;
        else
            ok++;
    }
    fan_out_free(ri, a);
    return ok >= ri->quorum ? 0 : err ? err : -EIO;
}

static int redlock_release(struct lock *l, int *held)
{
    struct redlock_impl *ri = l->c->impl;
    int err, unknown;
    int n = release_on(ri, l, NULL, 1, &err, &unknown);

    *held = n >= ri->quorum;
    if (err)
        l->release_unknown = unknown;
    return err;
}

static int redlock_renew(struct lock *l, uint32_t lease, int *held)
{
    struct redlock_impl *ri = l->c->impl;
    char lease_s[16];
    const char *argv[3] = {l->rkey, l->owner, lease_s};
    size_t lens[3];
    struct answer a[URL_HOSTS_MAX];
    int renewed = 0, answered = 0, err = 0;

    lens[0] = l->rkey_len;
    lens[1] = strlen(l->owner);
    lens[2] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    fan_out(ri, RCONN_RENEW, 1, 3, argv, lens, NULL, a);
    for (int i = 0; i < ri->n; i++) {
        if (a[i].err) {
            err = a[i].err;
            continue;
        }
        answered++;
        renewed += a[i].r->type == REDIS_REPLY_INTEGER && a[i].r->integer == 1;
    }
    fan_out_free(ri, a);
    if (renewed >= ri->quorum) {
        *held = 1;
        return 0;
    }
    /* Too few answers to tell: an error, which the watchdog retries
     * until a whole lease has passed. */
    if (answered - renewed < ri->quorum &&
        renewed + (ri->n - answered) >= ri->quorum)
        return err ? err : -EIO;
    *held = 0;
    return 0;
}

const struct lock_backend lock__redlock_backend = {
    .name = "redlock",
    .kinds = LOCK_KIND_BIT(LOCK_KIND_MUTEX),
    .open = redlock_open,
    .close = redlock_close,
    .acquire = redlock_acquire,
    .release = redlock_release,
    .renew = redlock_renew,
    .ping = redlock_ping,
    .prepare = rconn_lock_prepare,
};
