/*
 * redis.c - the single-Redis backend: SET NX PX with the owner id and one
 * INCR of the fencing counter in one script, a compare-and-delete release
 * that publishes on the lock's channel, and an owner-checked PEXPIRE for
 * the watchdog. A waiter subscribes to the channel before it retries, so a
 * release between its try and its sleep still wakes it; it also wakes when
 * the holder's TTL runs out, and after a jittered fallback interval.
 *
 * What it does not survive: Redis losing the key (restart without
 * persistence, failover to a replica that had not received it) lets a
 * second owner in while the first still believes it holds the lock. The
 * fencing token is the defence (see docs/locks.md).
 */
#include "lock/rconn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* A waiter retries at least this often (jittered down to half) even if no
 * release message arrives. */
#define FALLBACK_MS 500

struct redis_impl {
    struct redis_server srv; /* its strings: the client's URL */
    struct rconn_mux *mux;
    struct rconn_hub hub;
    struct rconn_psub *ps;
};

static int redis_open(struct lock_client *c)
{
    struct redis_impl *ri;
    struct redis_server srv;

    /* One server: by its address, or by its sentinels (then every host
     * is a sentinel). */
    if (c->url.nhosts != 1 && strcmp(c->url.scheme, REDIS_SENTINEL_SCHEME) != 0)
        return -EINVAL;
    if (rconn_url_servers(&c->url, &srv))
        return -EINVAL;
    ri = xcalloc(1, sizeof(*ri));
    ri->srv = srv;
    ri->mux = rconn_mux_new(&ri->srv, c->timeout_ms);
    rconn_hub_init(&ri->hub);
    ri->ps = rconn_psub_new(&ri->hub, &ri->srv, c->timeout_ms);
    c->impl = ri;
    return 0;
}

static int redis_ping(struct lock_client *c)
{
    struct redis_impl *ri = c->impl;

    return rconn_mux_ping(ri->mux);
}

static void redis_close(struct lock_client *c)
{
    struct redis_impl *ri = c->impl;

    rconn_psub_free(ri->ps);
    rconn_hub_destroy(&ri->hub);
    rconn_mux_free(ri->mux);
    redis_server_release(&ri->srv);
    free(ri);
}

/*
 * Run script s (keys and args as for rconn_mux_send()) and wait for its
 * reply. Returns the reply (caller frees) or NULL with *err set.
 */
static redisReply *run_script(struct rconn_mux *mux, enum rconn_script s,
                              int nkeys, int argc, const char **argv,
                              const size_t *lens, int *err)
{
    struct rconn_call call;

    *err = rconn_mux_send(mux, &call, s, nkeys, argc, argv, lens);
    if (*err)
        return NULL;
    return rconn_mux_wait(mux, &call, err);
}

/* The release script's keys and args for l (channel: the buffer). */
static void release_args(const struct lock *l, char *channel, size_t cap,
                         const char **argv, size_t *lens)
{
    argv[0] = l->name;
    argv[1] = channel;
    argv[2] = l->owner;
    lens[0] = l->name_len;
    lens[1] =
        (size_t)snprintf(channel, cap, RCONN_CHANNEL_PREFIX "%s", l->name);
    lens[2] = strlen(l->owner);
}

/* Compare-and-delete l without waiting: for an acquire of unknown
 * outcome. Harmless if the lock was never set or is someone else's. */
static void undo_acquire(struct redis_impl *ri, const struct lock *l)
{
    char channel[sizeof(RCONN_CHANNEL_PREFIX) + LOCK_NAME_MAX];
    const char *argv[3];
    size_t lens[3];

    release_args(l, channel, sizeof(channel), argv, lens);
    rconn_mux_send_detached(ri->mux, RCONN_RELEASE, 2, 3, argv, lens);
}

/* The acquire script's keys and arguments for l (lease_s: a buffer). */
struct acquire_args {
    char lease_s[16];
    const char *argv[4];
    size_t lens[4];
};

static void acquire_args(const struct lock *l, uint32_t lease,
                         struct acquire_args *a)
{
    a->argv[0] = l->name;
    a->argv[1] = RCONN_FENCE_KEY;
    a->argv[2] = l->owner;
    a->argv[3] = a->lease_s;
    a->lens[0] = l->name_len;
    a->lens[1] = strlen(RCONN_FENCE_KEY);
    a->lens[2] = strlen(l->owner);
    a->lens[3] =
        (size_t)snprintf(a->lease_s, sizeof(a->lease_s), "%u", (unsigned)lease);
}

/*
 * The answer to an acquire of l sent as call: *taken = 1 with l->fence
 * set, or 0 with *pttl (ms) left. A reply that never came (late, or its
 * connection lost after the send) leaves the outcome unknown: the SET may
 * have run, so the key is deleted if it is ours, behind the SET, and this
 * owner's next try is not BUSY for a whole lease.
 */
static int acquire_answer(struct redis_impl *ri, struct lock *l,
                          struct rconn_call *call, int *taken, int64_t *pttl)
{
    int err = 0;
    redisReply *r = rconn_mux_wait(ri->mux, call, &err);

    if (!r) {
        if (err == -ETIMEDOUT || err == -ECONNRESET)
            undo_acquire(ri, l);
        return err;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        log_warn("redis lock reply unexpected", "op=acquire type=%d", r->type);
        freeReplyObject(r);
        return -EIO;
    }
    *taken = r->element[0]->integer == 1;
    if (*taken)
        l->fence = (uint64_t)r->element[1]->integer;
    else
        *pttl = r->element[1]->integer;
    freeReplyObject(r);
    return 0;
}

/* One try: *taken = 1 with l->fence set, or 0 with *pttl (ms) left. */
static int try_once(struct redis_impl *ri, struct lock *l, uint32_t lease,
                    int *taken, int64_t *pttl)
{
    struct acquire_args a;
    struct rconn_call call;
    int err;

    acquire_args(l, lease, &a);
    err = rconn_mux_send(ri->mux, &call, RCONN_ACQUIRE, 2, 4, a.argv, a.lens);
    if (err)
        return err; /* never sent: nothing to undo */
    return acquire_answer(ri, l, &call, taken, pttl);
}

/* Every acquire written before the first reply is read: one round trip
 * for the lot, however many there are. */
static void redis_acquire_many(struct lock **l, size_t n, uint32_t lease,
                               enum lock_status *status, int *err)
{
    struct redis_impl *ri = l[0]->c->impl;
    struct acquire_args *a = xcalloc(n, sizeof(*a));
    struct rconn_call *call = xcalloc(n, sizeof(*call));

    for (size_t i = 0; i < n; i++) {
        acquire_args(l[i], lease, &a[i]);
        err[i] = rconn_mux_send(ri->mux, &call[i], RCONN_ACQUIRE, 2, 4,
                                a[i].argv, a[i].lens);
    }
    for (size_t i = 0; i < n; i++) {
        int taken = 0;
        int64_t pttl = 0;

        if (err[i])
            continue;
        err[i] = acquire_answer(ri, l[i], &call[i], &taken, &pttl);
        if (!err[i])
            status[i] = taken ? LOCK_ACQUIRED : LOCK_BUSY;
    }
    free(call);
    free(a);
}

/*
 * Sleep until the lock's channel has a message since *gen, or until
 * wake_at (monotonic ms).
 */
static void wait_message(struct redis_impl *ri, const char *name, uint64_t *gen,
                         int64_t wake_at)
{
    struct timespec ts = {(time_t)(wake_at / 1000),
                          (long)(wake_at % 1000) * 1000000L};

    pthread_mutex_lock(&ri->hub.mu);
    while (!rconn_psub_changed(ri->ps, name, gen) && lock__mono_ms() < wake_at)
        pthread_cond_timedwait(&ri->hub.cond, &ri->hub.mu, &ts);
    pthread_mutex_unlock(&ri->hub.mu);
}

static int redis_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease,
                         enum lock_status *status)
{
    struct redis_impl *ri = l->c->impl;
    int taken = 0, err;
    int64_t pttl = 0;

    err = try_once(ri, l, lease, &taken, &pttl);
    if (err || taken || wait_ms == 0)
        goto out;

    int64_t now = lock__mono_ms();
    int64_t deadline = now + wait_ms;
    int64_t confirm_by = now + l->c->timeout_ms;
    uint64_t gen = rconn_psub_subscribe(
        ri->ps, l->name, confirm_by < deadline ? confirm_by : deadline);
    for (;;) {
        err = try_once(ri, l, lease, &taken, &pttl);
        now = lock__mono_ms();
        if (err || taken || now >= deadline)
            break;
        /* The holder's TTL ending publishes nothing: wake for it too. */
        int64_t sleep_ms = lock__jitter_ms(FALLBACK_MS, deadline - now);
        if (pttl >= 0 && pttl + 1 < sleep_ms)
            sleep_ms = pttl + 1;
        wait_message(ri, l->name, &gen, now + sleep_ms);
    }
    rconn_psub_unsubscribe(ri->ps, l->name);
out:
    if (err == 0)
        *status = taken ? LOCK_ACQUIRED : LOCK_BUSY;
    return err;
}

static int redis_release(struct lock *l, int *held)
{
    struct redis_impl *ri = l->c->impl;
    char channel[sizeof(RCONN_CHANNEL_PREFIX) + LOCK_NAME_MAX];
    const char *argv[3];
    size_t lens[3];
    redisReply *r = NULL;
    int err = 0;

    release_args(l, channel, sizeof(channel), argv, lens);
    /* A reply lost with its connection (or late) leaves the outcome
     * unknown: ask once more, on a fresh connection if need be. The
     * compare-and-delete is harmless twice; the second answer then says
     * 0 when the first one had deleted the key. */
    for (int attempt = 0; attempt < 2 && !r; attempt++) {
        r = run_script(ri->mux, RCONN_RELEASE, 2, 3, argv, lens, &err);
        if (!r && err != -ECONNRESET && err != -ETIMEDOUT)
            break;
    }
    if (!r)
        return err;
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return -EIO;
    }
    *held = r->integer == 1;
    freeReplyObject(r);
    return 0;
}

/* Every release written before the first reply is read. A release whose
 * reply was lost is asked once more, alone, as in redis_release(). */
static void redis_release_many(struct lock **l, size_t n, int *held, int *err)
{
    struct redis_impl *ri = l[0]->c->impl;
    char(*channel)[sizeof(RCONN_CHANNEL_PREFIX) + LOCK_NAME_MAX] =
        xcalloc(n, sizeof(*channel));
    const char *(*argv)[3] = xcalloc(n, sizeof(*argv));
    size_t(*lens)[3] = xcalloc(n, sizeof(*lens));
    struct rconn_call *call = xcalloc(n, sizeof(*call));

    for (size_t i = 0; i < n; i++) {
        release_args(l[i], channel[i], sizeof(channel[i]), argv[i], lens[i]);
        err[i] = rconn_mux_send(ri->mux, &call[i], RCONN_RELEASE, 2, 3, argv[i],
                                lens[i]);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;

        if (!err[i])
            r = rconn_mux_wait(ri->mux, &call[i], &err[i]);
        if (!r && (err[i] == -ECONNRESET || err[i] == -ETIMEDOUT ||
                   err[i] == -ECONNREFUSED)) {
            err[i] = redis_release(l[i], &held[i]);
            continue;
        }
        if (!r)
            continue;
        if (r->type == REDIS_REPLY_INTEGER)
            held[i] = r->integer == 1;
        else
            err[i] = -EIO;
        freeReplyObject(r);
    }
    free(call);
    free(lens);
    free(argv);
    free(channel);
}

static int redis_renew(struct lock *l, uint32_t lease, int *held)
{
    struct redis_impl *ri = l->c->impl;
    char lease_s[16];
    const char *argv[3] = {l->name, l->owner, lease_s};
    size_t lens[3];
    int err = 0;

    snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    lens[0] = l->name_len;
    lens[1] = strlen(l->owner);
    lens[2] = strlen(lease_s);
    redisReply *r = run_script(ri->mux, RCONN_RENEW, 1, 3, argv, lens, &err);
    if (!r)
        return err;
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return -EIO;
    }
    *held = r->integer == 1;
    freeReplyObject(r);
    return 0;
}

const struct lock_backend lock__redis_backend = {
    .name = "redis",
    .open = redis_open,
    .close = redis_close,
    .acquire = redis_acquire,
    .release = redis_release,
    .renew = redis_renew,
    .ping = redis_ping,
    .acquire_many = redis_acquire_many,
    .release_many = redis_release_many,
};
