/*
 * rwlock.c - the read-write lock: lock_rw_new(), and its Redis scripts.
 * On ZooKeeper it is Curator's recipe (zk.c).
 *
 * The two sides are struct locks of one owner; lock.c refuses an upgrade
 * (write while holding only read) before any I/O, and each side keeps its
 * own hold count, so reentrancy and downgrade (write, then read, then
 * release the write) need nothing from the server but this:
 *
 *   lock-rw-w:NAME   the writer's owner id with a TTL, as a mutex
 *   lock-rw-r:{lock-rw-w:NAME}  readers: a sorted set of owner -> lease
 *                    deadline (each reader has its own lease, renewed by
 *                    its own watchdog; expired ones are dropped by any
 *                    script)
 *   lock-rw-q:{lock-rw-w:NAME}  writers waiting: owner -> check-in
 *                    deadline
 *
 * A reader gets in when no other owner writes and no writer waits (the
 * write holder itself may read: downgrade). A writer gets in when nobody
 * writes and no other reader is inside; while it waits it stays in the
 * waiting set, which keeps new readers out, so a stream of readers cannot
 * starve it: it waits only for the readers already inside. A waiting
 * writer that stops checking in (crashed) is dropped after
 * LOCK_CHECKIN_MS plus two timeouts. Releases publish on
 * lock-ch:{lock-rw-w:NAME}: the writer's always, a reader's when it was
 * the last one inside. (rconn.h has every name, with the prefix.)
 */
#include "lock/redis_kind.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

int lock_rw_new(struct lock_client *c, const char *name, struct lock **read,
                struct lock **write)
{
    struct lock *r = NULL, *w = NULL;
    int err;

    if (!read || !write)
        return -EINVAL;
    err = lock__new_kind(c, name, LOCK_KIND_READ, &r);
    if (err)
        return err;
    err = lock__new_kind(c, name, LOCK_KIND_WRITE, &w);
    if (err) {
        lock_free(r);
        return err;
    }
    /* One owner: the server must see the writer and the reader as the
     * same client, or a downgrade would wait for itself. */
    memcpy(w->owner, r->owner, sizeof(w->owner));
    r->pair = w->pair = xcalloc(1, sizeof(*r->pair));
    r->pair->read = r;
    r->pair->write = w;
    *read = r;
    *write = w;
    return 0;
}

struct rw_keys {
    const char *w;
    char r[REDIS_KEY_MAX], q[REDIS_KEY_MAX];
    char chan[REDIS_KEY_MAX];
    size_t w_len, r_len, q_len, chan_len;
};

/* Both sides' key is the writer's (rconn_lock_prepare()). */
static void rw_keys(const struct lock *l, struct rw_keys *k)
{
    k->w = l->rkey;
    k->w_len = l->rkey_len;
    k->r_len = rconn_lock_name(l, k->r, RCONN_RW_READERS, NULL);
    k->q_len = rconn_lock_name(l, k->q, RCONN_RW_WAITING, NULL);
    k->chan_len = rconn_lock_name(l, k->chan, RCONN_CHANNEL, NULL);
}

/* Receipts per side: the two share the owner id. */
static size_t rw_receipt(char *buf, const struct lock *l)
{
    return lock__redis_receipt(l, buf, l->kind == LOCK_KIND_READ ? "r:" : "w:");
}

static void rw_channel(const struct lock *l, char *buf)
{
    rconn_lock_name(l, buf, RCONN_CHANNEL, NULL);
}

/* One try of either side: KEYS writer, readers, waiting writers, fence;
 * a writer also checks in (its place keeps new readers out). */
static int rw_take(struct redis_impl *ri, struct lock *l, enum rconn_script s,
                   uint32_t lease, int checkin, int waiting, int *taken,
                   int64_t *pttl)
{
    struct rw_keys k;

    rw_keys(l, &k);
    return lock__redis_take3(ri, l, s, (const char *const[3]){k.w, k.r, k.q},
                             (const size_t[3]){k.w_len, k.r_len, k.q_len},
                             lease, checkin, waiting, taken, pttl);
}

/* ---- the read side ---- */

static int read_try(struct redis_impl *ri, struct lock *l, uint32_t lease,
                    int waiting, int *taken, int64_t *pttl)
{
    return rw_take(ri, l, RCONN_RW_READ, lease, 0, waiting, taken, pttl);
}

static int read_release(struct redis_impl *ri, struct lock *l, int *held)
{
    struct rw_keys k;
    char receipt[REDIS_KEY_MAX];
    size_t receipt_len = rw_receipt(receipt, l);

    rw_keys(l, &k);
    /* Only the last reader out can let a writer in. */
    return lock__redis_zset_release(ri, l, k.r, k.r_len, k.chan, k.chan_len,
                                    receipt, receipt_len, 0, held);
}

static int read_renew(struct redis_impl *ri, struct lock *l, uint32_t lease,
                      int *held)
{
    struct rw_keys k;

    rw_keys(l, &k);
    return lock__redis_zset_renew(ri, l, k.r, k.r_len, lease, held);
}

static void read_undo(struct redis_impl *ri, const struct lock *l)
{
    struct rw_keys k;

    rw_keys(l, &k);
    lock__redis_zset_undo(ri, l, k.r, k.r_len, k.chan, k.chan_len);
}

const struct redis_kind lock__redis_read = {
    .try_once = read_try,
    .undo = read_undo,
    .release = read_release,
    .renew = read_renew,
    .channel = rw_channel,
};

/* ---- the write side ---- */

static int write_try(struct redis_impl *ri, struct lock *l, uint32_t lease,
                     int waiting, int *taken, int64_t *pttl)
{
    return rw_take(ri, l, RCONN_RW_WRITE, lease, 1, waiting, taken, pttl);
}

/* A writer that gave up lets the readers it kept out in; one whose
 * answer was lost also drops the lock if it had taken it. */
static void write_undo(struct redis_impl *ri, const struct lock *l)
{
    struct rw_keys k;
    const char *argv[4] = {l->rkey, k.q, k.chan, l->owner};
    size_t lens[4];

    rw_keys(l, &k);
    lens[0] = k.w_len;
    lens[1] = k.q_len;
    lens[2] = k.chan_len;
    lens[3] = strlen(l->owner);
    /* If this is lost, its missed check-ins drop it. */
    lock__redis_detach(ri, RCONN_RW_CANCEL, 3, 4, argv, lens);
}

static int write_release(struct redis_impl *ri, struct lock *l, int *held)
{
    struct rw_keys k;
    char receipt[REDIS_KEY_MAX], token[24], ms[16];
    const char *argv[6] = {l->rkey, k.chan, receipt, l->owner, token, ms};
    size_t lens[6];

    rw_keys(l, &k);
    lens[0] = k.w_len;
    lens[1] = k.chan_len;
    lens[2] = rw_receipt(receipt, l);
    lens[3] = strlen(l->owner);
    lens[4] = (size_t)snprintf(token, sizeof(token), "%llu",
                               (unsigned long long)l->fence);
    lens[5] = (size_t)snprintf(ms, sizeof(ms), "%u", (unsigned)ri->receipt_ms);
    return lock__redis_run_bool(ri, l, RCONN_RELEASE_ONCE, 3, 6, argv, lens,
                                held);
}

static int write_renew(struct redis_impl *ri, struct lock *l, uint32_t lease,
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

const struct redis_kind lock__redis_write = {
    .try_once = write_try,
    .undo = write_undo,
    .queues = 1,
    .release = write_release,
    .renew = write_renew,
    .channel = rw_channel,
};
