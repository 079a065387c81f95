/*
 * internal.h - what the generic lock layer (lock.c) and the backends
 * (redis.c, redlock.c, mysql.c, zk.c) share. Not part of the API.
 *
 * The generic layer owns reentrancy (the hold count), the watchdog thread
 * and argument checks; a backend only takes the lock for the first hold,
 * releases it at the last, and renews or checks it for the watchdog.
 */
#ifndef SECKILL_LOCK_INTERNAL_H
#define SECKILL_LOCK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/url.h"
#include "lock/lock.h"

#define LOCK_OWNER_LEN 33 /* 32 hex characters and NUL */

/*
 * Check the query settings of a parsed lock URL (common/url.h): only
 * timeout_ms and session_ms, each 1..3600000, which go to *timeout_ms and
 * *session_ms (0 when absent). Returns 0, or -EINVAL with a reason in err.
 */
int lock__url_settings(const struct url *u, uint32_t *timeout_ms,
                       uint32_t *session_ms, char *err, size_t errlen);

struct lock_backend;

struct lock_client {
    const struct lock_backend *be;
    void *impl; /* the backend's state */
    struct url url;
    uint32_t timeout_ms;        /* resolved: option, URL, or 1000 */
    uint32_t session_ms;        /* resolved: option, URL, or 10000 */
    uint32_t watchdog_lease_ms; /* resolved: option or the default */

    /* The watchdog: locks with a lease of 0, renewed by one thread. */
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cond;   /* CLOCK_MONOTONIC; broadcast */
    struct lock *wd_renewing; /* renewed right now, wd_mu dropped */
    pthread_t wd_thread;
    int wd_started;
    int wd_stop;
    struct lock *wd_head;
};

struct lock {
    struct lock_client *c;
    char name[LOCK_NAME_MAX + 1];
    size_t name_len;
    char owner[LOCK_OWNER_LEN];
    unsigned holds;
    uint64_t fence;
    uint32_t lease_ms;   /* of the current hold: fixed, or the watchdog's */
    int watched;         /* on the watchdog's list */
    int64_t renew_at_ms; /* watchdog: next renewal, monotonic ms */
    int64_t renewed_ms;  /* watchdog: last successful renewal */
    struct lock *wd_next;
    atomic_int lost;
    void *bs; /* the backend's per-lock state (a node path, a session) */
};

/*
 * One backend. Every function returns 0 or a negative errno as in lock.h,
 * and returns within a bounded time.
 *
 * acquire: take l (not held; l->owner, l->name set) for lease_ms (> 0;
 *   ignored by session backends), waiting up to wait_ms. On LOCK_ACQUIRED
 *   set l->fence (> 0, only growing for the name).
 * release: free l (held), only if still its owner; *held = 1 if it was.
 *   Also wake waiters.
 * renew: extend the lease to lease_ms if l still owns it (session
 *   backends: check the session still holds it); *held = 0 if not.
 *   Called from the watchdog thread; may be NULL (nothing to renew).
 *   Never called while acquire or release of the same lock runs.
 * ping: check the backend answers (a quorum of servers, a session),
 *   within about one timeout. Thread-safe.
 * acquire_many, release_many: as acquire (wait 0) and release for each
 *   of n locks of this client, in one round trip; may be NULL (then the
 *   generic layer calls acquire and release in turn).
 */
struct lock_backend {
    const char *name;
    int (*open)(struct lock_client *c);
    void (*close)(struct lock_client *c);
    int (*acquire)(struct lock *l, uint32_t wait_ms, uint32_t lease_ms,
                   enum lock_status *status);
    int (*release)(struct lock *l, int *held);
    int (*renew)(struct lock *l, uint32_t lease_ms, int *held);
    int (*ping)(struct lock_client *c);
    void (*acquire_many)(struct lock **l, size_t n, uint32_t lease_ms,
                         enum lock_status *status, int *err);
    void (*release_many)(struct lock **l, size_t n, int *held, int *err);
};

extern const struct lock_backend lock__redis_backend;
extern const struct lock_backend lock__redlock_backend;
extern const struct lock_backend lock__mysql_backend;
extern const struct lock_backend lock__zk_backend;

/* Mark l lost (thread-safe); logs once. For the watchdog and backends. */
void lock__mark_lost(struct lock *l, const char *why);

/* Monotonic milliseconds. */
int64_t lock__mono_ms(void);

/*
 * A jittered fallback sleep for waiters: a random value in
 * [base_ms/2, base_ms], never more than left_ms.
 */
uint32_t lock__jitter_ms(uint32_t base_ms, int64_t left_ms);

#endif
