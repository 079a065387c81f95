/*
 * semaphore.c - the semaphore: lock_semaphore_new(), and its Redis scripts
 * (a lease per permit, as Redisson's RPermitExpirableSemaphore). On
 * ZooKeeper it is Curator's InterProcessSemaphoreV2 (zk.c).
 *
 * Redis keeps the holders in one sorted set, lock-sem:NAME, owner -> lease
 * deadline on the server's clock. A try first drops the expired leases
 * (a crashed holder's permit comes back when its lease ends), then joins
 * if fewer than permits holders are left. Each holder's lease is renewed
 * on its own, by the watchdog when it asked for lease 0. A release
 * publishes on lock-ch:{lock-sem:NAME}, waking the waiters; one of them gets
 * the permit, the others sleep again.
 */
#include "lock/redis_kind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int lock_semaphore_new(struct lock_client *c, const char *name,
                       uint32_t permits, struct lock **out)
{
    int err;

    if (permits < 1 || permits > LOCK_PERMITS_MAX)
        return -EINVAL;
    err = lock__new_kind(c, name, LOCK_KIND_SEMAPHORE, out);
    if (err == 0)
        (*out)->permits = permits;
    return err;
}

static int sem_try(struct redis_impl *ri, struct lock *l, uint32_t lease,
                   int waiting, int *taken, int64_t *pttl)
{
    char fence[REDIS_KEY_MAX], lease_s[16], permits[16];
    const char *argv[5] = {l->rkey, fence, l->owner, lease_s, permits};
    size_t lens[5];

    (void)waiting;
    lens[0] = l->rkey_len;
    lens[1] = rconn_lock_name(l, fence, RCONN_FENCE, NULL);
    lens[2] = strlen(l->owner);
    lens[3] = (size_t)snprintf(lease_s, sizeof(lease_s), "%u", (unsigned)lease);
    lens[4] =
        (size_t)snprintf(permits, sizeof(permits), "%u", (unsigned)l->permits);
    return lock__redis_run_take(ri, l, RCONN_SEM_ACQUIRE, 2, 5, argv, lens,
                                taken, pttl);
}

static int sem_release(struct redis_impl *ri, struct lock *l, int *held)
{
    char chan[REDIS_KEY_MAX], receipt[REDIS_KEY_MAX];
    size_t chan_len = rconn_lock_name(l, chan, RCONN_CHANNEL, NULL);
    size_t receipt_len = lock__redis_receipt(l, receipt, "");

    /* Every release frees a permit someone may be waiting for. */
    return lock__redis_zset_release(ri, l, l->rkey, l->rkey_len, chan, chan_len,
                                    receipt, receipt_len, 1, held);
}

static int sem_renew(struct redis_impl *ri, struct lock *l, uint32_t lease,
                     int *held)
{
    return lock__redis_zset_renew(ri, l, l->rkey, l->rkey_len, lease, held);
}

static void sem_undo(struct redis_impl *ri, const struct lock *l)
{
    char chan[REDIS_KEY_MAX];
    size_t chan_len = rconn_lock_name(l, chan, RCONN_CHANNEL, NULL);

    lock__redis_zset_undo(ri, l, l->rkey, l->rkey_len, chan, chan_len);
}

static void sem_channel(const struct lock *l, char *buf)
{
    rconn_lock_name(l, buf, RCONN_CHANNEL, NULL);
}

const struct redis_kind lock__redis_semaphore = {
    .try_once = sem_try,
    .undo = sem_undo,
    .release = sem_release,
    .renew = sem_renew,
    .channel = sem_channel,
};
