/*
 * fair.c - the fair (FIFO) lock: lock_fair_new(), and its Redis scripts
 * (Redisson's RFairLock, simplified). On ZooKeeper the mutex recipe is
 * already first come, first served (zk.c).
 *
 * Redis keeps, next to the lock itself (lock-fair:NAME, the holder's owner
 * id with a TTL as a mutex), a queue of waiters (a list,
 * lock-fair-q:{lock-fair:NAME}) and each waiter's check-in deadline (a
 * sorted set, lock-fair-t:{lock-fair:NAME}; rconn.h has the names). A
 * waiter joins the queue at its first try and checks in at every retry;
 * the lock goes to the queue's head only, and a try that would jump the
 * queue (a fail-fast acquire while others wait) is refused. Waiters that
 * missed their check-in (crashed, paused) are dropped by whoever runs a
 * script next, so a dead waiter holds the queue up for at most
 * LOCK_CHECKIN_MS plus two timeouts. A release publishes on the head
 * waiter's own channel, lock-ch:{lock-fair:NAME}:w:OWNER: it wakes that waiter
 * and nobody else.
 */
#include "lock/redis_kind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int lock_fair_new(struct lock_client *c, const char *name, struct lock **out)
{
    return lock__new_kind(c, name, LOCK_KIND_FAIR, out);
}

/* The three keys of l: lock, queue, check-in deadlines; and what a
 * waiter's wake-up channel starts with. */
struct fair_keys {
    const char *lock;
    char queue[REDIS_KEY_MAX], times[REDIS_KEY_MAX], wake[REDIS_KEY_MAX];
    size_t lock_len, queue_len, times_len, wake_len;
};

static void fair_keys(const struct lock *l, struct fair_keys *k)
{
    k->lock = l->rkey;
    k->lock_len = l->rkey_len;
    k->queue_len = rconn_lock_name(l, k->queue, RCONN_FAIR_QUEUE, NULL);
    k->times_len = rconn_lock_name(l, k->times, RCONN_FAIR_TIMES, NULL);
    k->wake_len = rconn_lock_name(l, k->wake, RCONN_CHANNEL, ":w:");
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
    const char *argv[5];
    size_t lens[5];

    fair_keys(l, &k);
    argv[0] = k.lock;
    argv[1] = k.queue;
    argv[2] = k.times;
    argv[3] = l->owner;
    argv[4] = k.wake;
    lens[0] = k.lock_len;
    lens[1] = k.queue_len;
    lens[2] = k.times_len;
    lens[3] = strlen(l->owner);
    lens[4] = k.wake_len;
    /* If this is lost, the missed check-ins drop us from the queue and
     * the lease frees the lock. */
    lock__redis_detach(ri, RCONN_FAIR_CANCEL, 3, 5, argv, lens);
}

static int fair_release(struct redis_impl *ri, struct lock *l, int *held)
{
    struct fair_keys k;
    char receipt[REDIS_KEY_MAX], token[24], ms[16];
    const char *argv[8];
    size_t lens[8];

    fair_keys(l, &k);
    argv[0] = k.lock;
    argv[1] = k.queue;
    argv[2] = k.times;
    argv[3] = receipt;
    argv[4] = l->owner;
    argv[5] = token;
    argv[6] = ms;
    argv[7] = k.wake;
    lens[0] = k.lock_len;
    lens[1] = k.queue_len;
    lens[2] = k.times_len;
    lens[3] = lock__redis_receipt(l, receipt, "");
    lens[4] = strlen(l->owner);
    lens[5] = (size_t)snprintf(token, sizeof(token), "%llu",
                               (unsigned long long)l->fence);
    lens[6] = (size_t)snprintf(ms, sizeof(ms), "%u", (unsigned)ri->receipt_ms);
    lens[7] = k.wake_len;
    return lock__redis_run_bool(ri, l, RCONN_FAIR_RELEASE, 4, 8, argv, lens,
                                held);
}

static int fair_renew(struct redis_impl *ri, struct lock *l, uint32_t lease,
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

/* A waiter listens on a channel of its own: a release wakes the head. */
static void fair_channel(const struct lock *l, char *buf)
{
    char suffix[LOCK_OWNER_LEN + 4];

    snprintf(suffix, sizeof(suffix), ":w:%s", l->owner);
    rconn_lock_name(l, buf, RCONN_CHANNEL, suffix);
}

const struct redis_kind lock__redis_fair = {
    .try_once = fair_try,
    .undo = fair_undo,
    .queues = 1,
    .release = fair_release,
    .renew = fair_renew,
    .channel = fair_channel,
};
