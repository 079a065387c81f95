/*
 * redis.c - the single-Redis backend: SET NX PX with the owner id and one
 * INCR of the fencing counter in one script, a compare-and-delete release
 * that publishes on the lock's channel, and an owner-checked PEXPIRE for
 * the watchdog. A waiter subscribes to the channel before it retries, so a
 * release between its try and its sleep still wakes it; it also wakes when
 * the holder's TTL runs out, and after a jittered fallback interval. The
 * server is named by its address or by its sentinels (common/redis.h); or
 * the backend runs on a Redis Cluster (rconn.h: struct rconn_cluster),
 * each call at the owner of its lock's slot and each waiter listening
 * there (sharded pub/sub).
 *
 * The other kinds (fair.c, rwlock.c, semaphore.c) bring their own scripts
 * through struct redis_kind and share this file's wait loop.
 *
 * An acquire whose answer never came may have taken the lock: its kind's
 * undo goes out behind it without waiting, so the owner is not locked out
 * by its own lost hold. Releases leave a receipt (the hold's token under
 * lock-rel:{NAME}:OWNER for a few seconds), so a release asked again after its
 * answer was lost answers the same: 1 if the first one deleted our lock,
 * even if someone else has taken it since (and their lock is left alone).
 *
 * What it does not survive: Redis losing the key (restart without
 * persistence, failover to a replica that had not received it) lets a
 * second owner in while the first still believes it holds the lock. The
 * fencing token is the defence (see docs/locks.md), and ?replicas=N the
 * mitigation: each acquire then waits (WAIT) until N replicas have the
 * lock, as Redisson's checkLockSyncedSlaves, and fails with -EIO if they
 * do not.
 */
#include "lock/redis_kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* Receipts live this many timeouts, and at least RECEIPT_MIN_MS. */
#define RECEIPT_TIMEOUTS 5
#define RECEIPT_MIN_MS 5000

static int redis_open(struct lock_client *c)
{
    struct redis_impl *ri;
    int cluster = strcmp(c->url.scheme, REDIS_CLUSTER_SCHEME) == 0;
    int nsrv = cluster ? c->url.nhosts : 1;

    /* One server: by its address, or by its sentinels (then every host
     * is a sentinel); or the seeds of a cluster. */
    if (!cluster && c->url.nhosts != 1 &&
        strcmp(c->url.scheme, REDIS_SENTINEL_SCHEME) != 0)
        return -EINVAL;
    ri = xcalloc(1, sizeof(*ri));
    if (rconn_url_servers(&c->url, ri->srv)) {
        free(ri);
        return -EINVAL;
    }
    ri->nsrv = nsrv;
    rconn_hub_init(&ri->hub);
    if (cluster) {
        ri->cl = rconn_cluster_new(ri->srv, nsrv, &ri->hub, c->timeout_ms);
    } else {
        ri->mux = rconn_mux_new(&ri->srv[0], c->timeout_ms, 0);
        ri->ps = rconn_psub_new(&ri->hub, &ri->srv[0], c->timeout_ms, 0);
    }
    ri->replicas = c->replicas;
    ri->receipt_ms = c->timeout_ms * RECEIPT_TIMEOUTS;
    if (ri->receipt_ms < RECEIPT_MIN_MS)
        ri->receipt_ms = RECEIPT_MIN_MS;
    c->impl = ri;
    return 0;
}

static int redis_ping(struct lock_client *c)
{
    struct redis_impl *ri = c->impl;

    return ri->cl ? rconn_cluster_ping(ri->cl) : rconn_mux_ping(ri->mux);
}

static void redis_close(struct lock_client *c)
{
    struct redis_impl *ri = c->impl;

    rconn_cluster_free(ri->cl);
    rconn_psub_free(ri->ps);
    rconn_hub_destroy(&ri->hub);
    rconn_mux_free(ri->mux);
    for (int i = 0; i < ri->nsrv; i++)
        redis_server_release(&ri->srv[i]);
    free(ri);
}

/* ---- one server, or the owner of the call's slot in a cluster ---- */

/* The slot of a call: its first key's (every script keeps its keys, and
 * its channels, in the slot of the lock's hash tag). */
static unsigned call_slot(int nkeys, const char **argv, const size_t *lens)
{
    return nkeys > 0 ? redis_key_slot(argv[0], lens[0]) : 0;
}

static int ri_send(struct redis_impl *ri, struct rconn_call *call,
                   enum rconn_script s, int nkeys, int argc, const char **argv,
                   const size_t *lens)
{
    if (ri->cl)
        return rconn_cluster_send(ri->cl, call, call_slot(nkeys, argv, lens), s,
                                  nkeys, argc, argv, lens);
    return rconn_mux_send(ri->mux, call, s, nkeys, argc, argv, lens);
}

static redisReply *ri_wait(struct redis_impl *ri, struct rconn_call *call,
                           int *err)
{
    if (ri->cl)
        return rconn_cluster_wait(ri->cl, call, err);
    return rconn_mux_wait(ri->mux, call, err);
}

/* The listener that carries chan's messages: the one server's, or the
 * current owner of the channel's slot (NULL: none known), held until
 * ri_psub_put(). */
static struct rconn_psub *ri_psub(struct redis_impl *ri, const char *chan)
{
    if (ri->cl)
        return rconn_cluster_psub(ri->cl, redis_key_slot_str(chan));
    return ri->ps;
}

/* Give back a listener of ri_psub() (NULL: nothing). */
static void ri_psub_put(struct redis_impl *ri, struct rconn_psub *ps)
{
    if (ri->cl)
        rconn_cluster_psub_put(ri->cl, ps);
}

/* ---- helpers for every kind ---- */

static const struct redis_kind *kind_of(const struct lock *l);

redisReply *lock__redis_run(struct redis_impl *ri, enum rconn_script s,
                            int nkeys, int argc, const char **argv,
                            const size_t *lens, int *err, int *unknown)
{
    struct rconn_call call;
    redisReply *r;

    if (unknown)
        *unknown = 0;
    *err = ri_send(ri, &call, s, nkeys, argc, argv, lens);
    if (*err) {
        /* Never sent; but a connection reset under us is worth asking
         * again on a fresh one. */
        if (unknown)
            *unknown = *err == -ECONNRESET;
        return NULL;
    }
    r = ri_wait(ri, &call, err);
    if (!r && unknown)
        *unknown = *err == -ETIMEDOUT || *err == -ECONNRESET;
    return r;
}

void lock__redis_detach(struct redis_impl *ri, enum rconn_script s, int nkeys,
                        int argc, const char **argv, const size_t *lens)
{
    if (ri->cl)
        rconn_cluster_send_detached(ri->cl, call_slot(nkeys, argv, lens), s,
                                    nkeys, argc, argv, lens);
    else
        rconn_mux_send_detached(ri->mux, s, nkeys, argc, argv, lens);
}

int lock__redis_take_answer(struct redis_impl *ri, struct lock *l,
                            struct rconn_call *call, int *taken, int64_t *pttl)
{
    int err = 0;
    redisReply *r = ri_wait(ri, call, &err);

    if (!r) {
        if (err == -ETIMEDOUT || err == -ECONNRESET)
            kind_of(l)->undo(ri, l);
        return err;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        log_warn("redis lock reply unexpected", "op=acquire script=%d type=%d",
                 (int)call->script, r->type);
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

int lock__redis_run_take(struct redis_impl *ri, struct lock *l,
                         enum rconn_script s, int nkeys, int argc,
                         const char **argv, const size_t *lens, int *taken,
                         int64_t *pttl)
{
    struct rconn_call call;
    int err = ri_send(ri, &call, s, nkeys, argc, argv, lens);

    if (err)
        return err; /* never sent: nothing to undo */
    return lock__redis_take_answer(ri, l, &call, taken, pttl);
}

int lock__redis_take3(struct redis_impl *ri, struct lock *l,
                      enum rconn_script s, const char *const key[3],
                      const size_t len[3], uint32_t lease, int checkin,
                      int waiting, int *taken, int64_t *pttl)
{
    char lease_s[16], ck_s[16], fence[REDIS_KEY_MAX];
    const char *argv[7] = {key[0],   key[1],  key[2], fence,
                           l->owner, lease_s, ck_s};
    size_t lens[7] = {len[0], len[1], len[2],
                      rconn_lock_name(l, fence, RCONN_FENCE, NULL),
                      strlen(l->owner)};
    /* A waiter retries at least every REDIS_FALLBACK_MS plus a round trip;
     * a check-in missed by a full LOCK_CHECKIN_MS means it is gone. */
    uint32_t ck = waiting ? LOCK_CHECKIN_MS + 2 * l->c->timeout_ms : 0;

    lens[5] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    lens[6] = (size_t)snprintf(ck_s, sizeof(ck_s), "%u", (unsigned)ck);
    return lock__redis_run_take(ri, l, s, 4, checkin ? 7 : 6, argv, lens, taken,
                                pttl);
}

int lock__redis_run_bool(struct redis_impl *ri, struct lock *l,
                         enum rconn_script s, int nkeys, int argc,
                         const char **argv, const size_t *lens, int *yes)
{
    int err = 0, unknown = 0;
    redisReply *r =
        lock__redis_run(ri, s, nkeys, argc, argv, lens, &err, &unknown);

    if (!r) {
        l->release_unknown = unknown;
        return err;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(r);
        return -EIO;
    }
    *yes = r->integer == 1;
    freeReplyObject(r);
    return 0;
}

int lock__redis_zset_release(struct redis_impl *ri, struct lock *l,
                             const char *set, size_t set_len, const char *chan,
                             size_t chan_len, const char *receipt,
                             size_t receipt_len, int always, int *held)
{
    char token[24], ms[16];
    const char *argv[7] = {set,   chan, receipt,           l->owner,
                           token, ms,   always ? "1" : "0"};
    size_t lens[7];

    lens[0] = set_len;
    lens[1] = chan_len;
    lens[2] = receipt_len;
    lens[3] = strlen(l->owner);
    lens[4] = (size_t)snprintf(token, sizeof(token), "%llu",
                               (unsigned long long)l->fence);
    lens[5] = (size_t)snprintf(ms, sizeof(ms), "%u", (unsigned)ri->receipt_ms);
    lens[6] = 1;
    return lock__redis_run_bool(ri, l, RCONN_ZRELEASE, 3, 7, argv, lens, held);
}

int lock__redis_zset_renew(struct redis_impl *ri, struct lock *l,
                           const char *set, size_t set_len, uint32_t lease,
                           int *held)
{
    char lease_s[16];
    const char *argv[3] = {set, l->owner, lease_s};
    size_t lens[3];

    lens[0] = set_len;
    lens[1] = strlen(l->owner);
    lens[2] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    return lock__redis_run_bool(ri, l, RCONN_ZRENEW, 1, 3, argv, lens, held);
}

void lock__redis_zset_undo(struct redis_impl *ri, const struct lock *l,
                           const char *set, size_t set_len, const char *chan,
                           size_t chan_len)
{
    const char *argv[3] = {set, chan, l->owner};
    size_t lens[3];

    lens[0] = set_len;
    lens[1] = chan_len;
    lens[2] = strlen(l->owner);
    lock__redis_detach(ri, RCONN_ZLEAVE, 2, 3, argv, lens);
}

/*
 * Sleep until the channel has a message since *gen on ps (NULL: no
 * listener, only the timer), or until wake_at (monotonic ms).
 */
static void wait_message(struct redis_impl *ri, struct rconn_psub *ps,
                         const char *chan, uint64_t *gen, int64_t wake_at)
{
    struct timespec ts = {(time_t)(wake_at / 1000),
                          (long)(wake_at % 1000) * 1000000L};

    pthread_mutex_lock(&ri->hub.mu);
    while (!(ps && rconn_psub_changed(ps, chan, gen)) &&
           lock__mono_ms() < wake_at)
        pthread_cond_timedwait(&ri->hub.cond, &ri->hub.mu, &ts);
    pthread_mutex_unlock(&ri->hub.mu);
}

/*
 * WAIT until ri->replicas replicas have every write this connection made
 * (the lock scripts' included), for at most half a timeout so that the
 * answer comes back before the call's own deadline. name is for the log.
 * Returns 0, -EIO when too few confirmed, or the connection's error.
 */
static int wait_replicas(struct redis_impl *ri, const struct lock_client *c,
                         const char *name)
{
    uint32_t ms = c->timeout_ms / 2 ? c->timeout_ms / 2 : 1;
    char n[16], t[16];
    const char *argv[3] = {"WAIT", n, t};
    size_t lens[3];
    struct rconn_call call;
    redisReply *r;
    int err;

    lens[0] = 4;
    lens[1] = (size_t)snprintf(n, sizeof(n), "%u", (unsigned)ri->replicas);
    lens[2] = (size_t)snprintf(t, sizeof(t), "%u", (unsigned)ms);
    err = rconn_mux_send_command(ri->mux, &call, 3, argv, lens);
    if (err)
        return err;
    r = rconn_mux_wait(ri->mux, &call, &err);
    if (!r)
        return err;
    long long got = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (got >= (long long)ri->replicas)
        return 0;
    log_warn("redis lock not confirmed by replicas",
             "name=\"%s\" replicas=%lld wanted=%u wait_ms=%u", name, got,
             (unsigned)ri->replicas, (unsigned)ms);
    return -EIO;
}

/* ---- the mutex ---- */

/* The acquire script's keys and arguments for l (lease_s: a buffer). */
struct acquire_args {
    char lease_s[16], fence[REDIS_KEY_MAX];
    const char *argv[4];
    size_t lens[4];
};

static void acquire_args(const struct lock *l, uint32_t lease,
                         struct acquire_args *a)
{
    a->argv[0] = l->rkey;
    a->argv[1] = a->fence;
    a->argv[2] = l->owner;
    a->argv[3] = a->lease_s;
    a->lens[0] = l->rkey_len;
    a->lens[1] = rconn_lock_name(l, a->fence, RCONN_FENCE, NULL);
    a->lens[2] = strlen(l->owner);
    a->lens[3] =
        (size_t)snprintf(a->lease_s, sizeof(a->lease_s), "%u", (unsigned)lease);
}

/* RCONN_TAKE's: the name, the owner, the lease (no fence key). */
static void take_args(const struct lock *l, uint32_t lease,
                      struct acquire_args *a)
{
    a->argv[0] = l->rkey;
    a->argv[1] = l->owner;
    a->argv[2] = a->lease_s;
    a->lens[0] = l->rkey_len;
    a->lens[1] = strlen(l->owner);
    a->lens[2] =
        (size_t)snprintf(a->lease_s, sizeof(a->lease_s), "%u", (unsigned)lease);
}

static int mutex_try(struct redis_impl *ri, struct lock *l, uint32_t lease,
                     int waiting, int *taken, int64_t *pttl)
{
    struct acquire_args a;

    (void)waiting;
    acquire_args(l, lease, &a);
    return lock__redis_run_take(ri, l, RCONN_ACQUIRE, 2, 4, a.argv, a.lens,
                                taken, pttl);
}

/* The release script's keys and args for l (buffers in r). */
struct release_args {
    char channel[REDIS_KEY_MAX], receipt[REDIS_KEY_MAX];
    char token[24], ms[16];
    const char *argv[6];
    size_t lens[6];
};

static void release_args(const struct redis_impl *ri, const struct lock *l,
                         struct release_args *r)
{
    r->argv[0] = l->rkey;
    r->argv[1] = r->channel;
    r->argv[2] = r->receipt;
    r->argv[3] = l->owner;
    r->argv[4] = r->token;
    r->argv[5] = r->ms;
    r->lens[0] = l->rkey_len;
    r->lens[1] = rconn_lock_name(l, r->channel, RCONN_CHANNEL, NULL);
    r->lens[2] = lock__redis_receipt(l, r->receipt, "");
    r->lens[3] = strlen(l->owner);
    r->lens[4] = (size_t)snprintf(r->token, sizeof(r->token), "%llu",
                                  (unsigned long long)l->fence);
    r->lens[5] =
        (size_t)snprintf(r->ms, sizeof(r->ms), "%u", (unsigned)ri->receipt_ms);
}

static int mutex_release(struct redis_impl *ri, struct lock *l, int *held)
{
    struct release_args r;

    release_args(ri, l, &r);
    return lock__redis_run_bool(ri, l, RCONN_RELEASE_ONCE, 3, 6, r.argv, r.lens,
                                held);
}

/* The arguments of RCONN_RELEASE for l: compare-and-delete and the
 * wake-up, no receipt. */
static void plain_release_args(const struct lock *l, struct release_args *r)
{
    r->argv[0] = l->rkey;
    r->argv[1] = r->channel;
    r->argv[2] = l->owner;
    r->lens[0] = l->rkey_len;
    r->lens[1] = rconn_lock_name(l, r->channel, RCONN_CHANNEL, NULL);
    r->lens[2] = strlen(l->owner);
}

/* Compare-and-delete l: harmless if the lock was never set or is someone
 * else's. */
static void mutex_undo(struct redis_impl *ri, const struct lock *l)
{
    struct release_args r;

    plain_release_args(l, &r);
    lock__redis_detach(ri, RCONN_RELEASE, 2, 3, r.argv, r.lens);
}

static int mutex_renew(struct redis_impl *ri, struct lock *l, uint32_t lease,
                       int *held)
{
    char lease_s[16];
    const char *argv[3] = {l->rkey, l->owner, lease_s};
    size_t lens[3];

    lens[0] = l->rkey_len;
    lens[1] = strlen(l->owner);
    lens[2] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    return lock__redis_run_bool(ri, l, RCONN_RENEW, 1, 3, argv, lens, held);
}

static void mutex_channel(const struct lock *l, char *buf)
{
    rconn_lock_name(l, buf, RCONN_CHANNEL, NULL);
}

size_t lock__redis_receipt(const struct lock *l, char *buf, const char *side)
{
    char suffix[LOCK_OWNER_LEN + 2];

    snprintf(suffix, sizeof(suffix), ":%s", l->owner);
    char what[sizeof(RCONN_RECEIPT) + 4];

    snprintf(what, sizeof(what), RCONN_RECEIPT "%s", side);
    return rconn_lock_name(l, buf, what, suffix);
}

static const struct redis_kind redis_mutex = {
    .try_once = mutex_try,
    .undo = mutex_undo,
    .release = mutex_release,
    .renew = mutex_renew,
    .channel = mutex_channel,
};

/* ---- the backend: every kind ---- */

static const struct redis_kind *kind_of(const struct lock *l)
{
    switch (l->kind) {
    case LOCK_KIND_FAIR:
        return &lock__redis_fair;
    case LOCK_KIND_READ:
        return &lock__redis_read;
    case LOCK_KIND_WRITE:
        return &lock__redis_write;
    case LOCK_KIND_SEMAPHORE:
        return &lock__redis_semaphore;
    case LOCK_KIND_MUTEX:
        break;
    }
    return &redis_mutex;
}

static int redis_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease,
                         enum lock_status *status)
{
    struct redis_impl *ri = l->c->impl;
    const struct redis_kind *k = kind_of(l);
    char chan[REDIS_KEY_MAX];
    int taken = 0, err;
    int64_t pttl = 0;

    err = k->try_once(ri, l, lease, wait_ms > 0, &taken, &pttl);
    if (err || taken || wait_ms == 0)
        goto out;

    int64_t now = lock__mono_ms();
    int64_t deadline = now + wait_ms;
    int64_t confirm_by = now + l->c->timeout_ms;
    k->channel(l, chan);
    struct rconn_psub *ps = ri_psub(ri, chan);
    uint64_t gen = 0;
    if (ps)
        gen = rconn_psub_subscribe(
            ps, chan, confirm_by < deadline ? confirm_by : deadline);
    for (;;) {
        err = k->try_once(ri, l, lease, 1, &taken, &pttl);
        now = lock__mono_ms();
        if (err || taken || now >= deadline)
            break;
        /* In a cluster the channel's slot may have moved (the try just
         * made learnt it from a MOVED): listen at its new owner. */
        struct rconn_psub *owner = ri_psub(ri, chan);
        if (owner != ps) {
            if (ps)
                rconn_psub_unsubscribe(ps, chan);
            ri_psub_put(ri, ps);
            ps = owner;
            if (ps)
                gen = rconn_psub_subscribe(ps, chan, now + l->c->timeout_ms);
            continue; /* a release may have gone by meanwhile */
        }
        ri_psub_put(ri, owner); /* the one already held */
        /* The holder's TTL ending publishes nothing: wake for it too. */
        int64_t sleep_ms = lock__jitter_ms(REDIS_FALLBACK_MS, deadline - now);
        if (pttl >= 0 && pttl + 1 < sleep_ms)
            sleep_ms = pttl + 1;
        wait_message(ri, ps, chan, &gen, now + sleep_ms);
    }
    if (ps)
        rconn_psub_unsubscribe(ps, chan);
    ri_psub_put(ri, ps);
    /* A lost answer was undone already; a plain give-up leaves the
     * queue here. */
    if (!taken && !err && k->queues)
        k->undo(ri, l);
out:
    if (err == 0 && taken && ri->replicas) {
        err = wait_replicas(ri, l->c, l->name);
        if (err) {
            /* Not on enough replicas to survive a failover: do not hold
             * it. If this undo is lost too, the lease frees the lock. */
            int held;
            k->release(ri, l, &held);
            l->release_unknown = 0;
            l->fence = 0;
        }
    }
    if (err == 0)
        *status = taken ? LOCK_ACQUIRED : LOCK_BUSY;
    return err;
}

/* Every acquire written before the first reply is read: one round trip
 * for the lot, however many there are (and one WAIT, with ?replicas=).
 * No fencing token (lock_acquire_many() promises none): RCONN_TAKE, the
 * acquire without the token's counter write. */
static void redis_acquire_many(struct lock **l, size_t n, uint32_t lease,
                               enum lock_status *status, int *err)
{
    struct redis_impl *ri = l[0]->c->impl;
    struct acquire_args *a = xcalloc(n, sizeof(*a));
    struct rconn_call *call = xcalloc(n, sizeof(*call));
    size_t ntaken = 0;

    for (size_t i = 0; i < n; i++) {
        take_args(l[i], lease, &a[i]);
        err[i] = ri_send(ri, &call[i], RCONN_TAKE, 1, 3, a[i].argv, a[i].lens);
    }
    for (size_t i = 0; i < n; i++) {
        int taken = 0;
        int64_t pttl = 0;

        if (err[i])
            continue;
        err[i] = lock__redis_take_answer(ri, l[i], &call[i], &taken, &pttl);
        if (!err[i]) {
            status[i] = taken ? LOCK_ACQUIRED : LOCK_BUSY;
            ntaken += taken;
        }
    }
    if (ntaken && ri->replicas) {
        int werr = wait_replicas(ri, l[0]->c, l[0]->name);

        for (size_t i = 0; werr && i < n; i++) {
            if (err[i] || status[i] != LOCK_ACQUIRED)
                continue;
            mutex_undo(ri, l[i]);
            l[i]->fence = 0;
            err[i] = werr;
        }
    }
    free(call);
    free(a);
}

static int redis_release(struct lock *l, int *held)
{
    return kind_of(l)->release(l->c->impl, l, held);
}

/* Every release written before the first reply is read. A release whose
 * answer was lost is asked once more, alone: its receipt makes the second
 * answer the one the first would have been. A hold without a token
 * (lock_acquire_many()'s) leaves no receipt: a key written for every
 * purchase and kept for seconds, for an answer only a log line reads;
 * asked again, such a release says not held when the first one had
 * deleted the lock. */
static void redis_release_many(struct lock **l, size_t n, int *held, int *err)
{
    struct redis_impl *ri = l[0]->c->impl;
    struct release_args *a = xcalloc(n, sizeof(*a));
    struct rconn_call *call = xcalloc(n, sizeof(*call));

    for (size_t i = 0; i < n; i++) {
        if (l[i]->fence == 0) {
            plain_release_args(l[i], &a[i]);
            err[i] = ri_send(ri, &call[i], RCONN_RELEASE, 2, 3, a[i].argv,
                             a[i].lens);
            continue;
        }
        release_args(ri, l[i], &a[i]);
        err[i] = ri_send(ri, &call[i], RCONN_RELEASE_ONCE, 3, 6, a[i].argv,
                         a[i].lens);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;

        if (!err[i])
            r = ri_wait(ri, &call[i], &err[i]);
        if (!r && (err[i] == -ECONNRESET || err[i] == -ETIMEDOUT ||
                   err[i] == -ECONNREFUSED)) {
            err[i] = l[i]->fence == 0
                         ? lock__redis_run_bool(ri, l[i], RCONN_RELEASE, 2, 3,
                                                a[i].argv, a[i].lens, &held[i])
                         : mutex_release(ri, l[i], &held[i]);
            l[i]->release_unknown = 0;
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
    free(a);
}

static int redis_renew(struct lock *l, uint32_t lease, int *held)
{
    struct redis_impl *ri = l->c->impl;
    int err = kind_of(l)->renew(ri, l, lease, held);

    /* A renewal the replicas lack would be undone by a failover. */
    if (err == 0 && *held && ri->replicas)
        err = wait_replicas(ri, l->c, l->name);
    return err;
}

const struct lock_backend lock__redis_backend = {
    .name = "redis",
    .kinds = LOCK_KIND_BIT(LOCK_KIND_MUTEX) | LOCK_KIND_BIT(LOCK_KIND_FAIR) |
             LOCK_KIND_BIT(LOCK_KIND_READ) | LOCK_KIND_BIT(LOCK_KIND_WRITE) |
             LOCK_KIND_BIT(LOCK_KIND_SEMAPHORE),
    .open = redis_open,
    .close = redis_close,
    .acquire = redis_acquire,
    .release = redis_release,
    .renew = redis_renew,
    .ping = redis_ping,
    .acquire_many = redis_acquire_many,
    .release_many = redis_release_many,
    .prepare = rconn_lock_prepare,
};
