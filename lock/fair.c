/*
 * fair.c - the fair (FIFO) lock: lock_fair_new(), and its Redis scripts
 * (Redisson's RFairLock, simplified). On ZooKeeper the mutex recipe is
 * already first come, first served (zk.c).
 *
 * Redis keeps, next to the lock itself (lock-fair:NAME, the holder's owner
 * id with a TTL as a mutex), a queue of waiters (a list, lock-fair-q:NAME)
 * and each waiter's check-in deadline (a sorted set, lock-fair-t:NAME). A
 * waiter joins the queue at its first try and checks in at every retry;
 * the lock goes to the queue's head only, and a try that would jump the
 * queue (a fail-fast acquire while others wait) is refused. Waiters that
 * missed their check-in (crashed, paused) are dropped by whoever runs a
 * script next, so a dead waiter holds the queue up for at most
 * LOCK_CHECKIN_MS plus two timeouts. A release publishes on the head
 * waiter's own channel, lock-ch:lock-fair-w:OWNER: it wakes that waiter
 * and nobody else.
 */
#include "lock/redis_kind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define FAIR_KEY "lock-fair:"
#define FAIR_QUEUE "lock-fair-q:"
#define FAIR_TIMES "lock-fair-t:"
#define FAIR_WAKE "lock-fair-w:"

int lock_fair_new(struct lock_client *c, const char *name, struct lock **out)
{
    return lock__new_kind(c, name, LOCK_KIND_FAIR, out);
}

/* The three keys of l: lock, queue, check-in deadlines. */
struct fair_keys {
    char lock[REDIS_KEY_MAX], queue[REDIS_KEY_MAX], times[REDIS_KEY_MAX];
    size_t lock_len, queue_len, times_len;
};

static void fair_keys(const struct lock *l, struct fair_keys *k)
{
    k->lock_len = lock__redis_key(k->lock, FAIR_KEY, l);
    k->queue_len = lock__redis_key(k->queue, FAIR_QUEUE, l);
    k->times_len = lock__redis_key(k->times, FAIR_TIMES, l);
}

static int fair_try(struct redis_impl *ri, struct lock *l, uint32_t lease,
                    int waiting, int *taken, int64_t *pttl)
{
    struct fair_keys k;

    fair_keys(l, &k);
    return lock__redis_take3(
        ri, l, RCONN_FAIR_ACQUIRE,
        (const char *const[3]){k.lock, k.queue, k.times},
        (const size_t[3]){k.lock_len, k.queue_len, k.times_len}, lease, 1,
        waiting, taken, pttl);
}

/* Leave the queue, and drop the lock if an acquire whose answer was lost
 * had taken it. */
static void fair_undo(struct redis_impl *ri, const struct lock *l)
{
    struct fair_keys k;
    const char *argv[5] = {k.lock, k.queue, k.times, l->owner,
                           RCONN_CHANNEL_PREFIX FAIR_WAKE};
    size_t lens[5];

    fair_keys(l, &k);
    lens[0] = k.lock_len;
    lens[1] = k.queue_len;
    lens[2] = k.times_len;
    lens[3] = strlen(l->owner);
    lens[4] = strlen(argv[4]);
    /* If this is lost, the missed check-ins drop us from the queue and
     * the lease frees the lock. */
    lock__redis_detach(ri, RCONN_FAIR_CANCEL, 3, 5, argv, lens);
}

static int fair_release(struct redis_impl *ri, struct lock *l, int *held)
{
    struct fair_keys k;
    char receipt[REDIS_KEY_MAX], token[24], ms[16];
    const char *argv[8] = {
        k.lock,   k.queue, k.times, receipt,
        l->owner, token,   ms,      RCONN_CHANNEL_PREFIX FAIR_WAKE};
    size_t lens[8];

    fair_keys(l, &k);
    lens[0] = k.lock_len;
    lens[1] = k.queue_len;
    lens[2] = k.times_len;
    lens[3] =
        (size_t)snprintf(receipt, sizeof(receipt), "lock-rel:%s", l->owner);
    lens[4] = strlen(l->owner);
    lens[5] = (size_t)snprintf(token, sizeof(token), "%llu",
                               (unsigned long long)l->fence);
    lens[6] = (size_t)snprintf(ms, sizeof(ms), "%u", (unsigned)ri->receipt_ms);
    lens[7] = strlen(argv[7]);
    return lock__redis_run_bool(ri, l, RCONN_FAIR_RELEASE, 4, 8, argv, lens,
                                held);
}

static int fair_renew(struct redis_impl *ri, struct lock *l, uint32_t lease,
                      int *held)
{
    char key[REDIS_KEY_MAX], lease_s[16];
    const char *argv[3] = {key, l->owner, lease_s};
    size_t lens[3];

    lens[0] = lock__redis_key(key, FAIR_KEY, l);
    lens[1] = strlen(l->owner);
    lens[2] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    return lock__redis_run_bool(ri, l, RCONN_RENEW, 1, 3, argv, lens, held);
}

/* A waiter listens on a channel of its own: a release wakes the head. */
static void fair_channel(const struct lock *l, char *buf, size_t size)
{
    snprintf(buf, size, FAIR_WAKE "%s", l->owner);
}

const struct redis_kind lock__redis_fair = {
    .try_once = fair_try,
    .undo = fair_undo,
    .queues = 1,
    .release = fair_release,
    .renew = fair_renew,
    .channel = fair_channel,
};
