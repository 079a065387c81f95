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

#include "common/redis_keys.h"
#include "common/url.h"
#include "lock/lock.h"

#define LOCK_OWNER_LEN 33 /* 32 hex characters and NUL */
/* Longest Redis name a lock uses: a name tagged with the lock's key
 * (which is the prefix, a kind's prefix and the lock's name), the prefix
 * again, a few words and an owner id. */
#define LOCK_RKEY_MAX                                                          \
    (2 * (REDIS_PREFIX_MAX + LOCK_NAME_MAX) + LOCK_OWNER_LEN + 64)

/* Most replicas a redis:// lock URL's ?replicas= may ask for. */
#define LOCK_REPLICAS_MAX 64

/* The query settings of a lock URL; 0 when absent. */
struct lock_url_settings {
    uint32_t timeout_ms; /* every operation, 1..3600000 */
    uint32_t session_ms; /* ZooKeeper's session, 1..3600000 */
    uint32_t replicas;   /* redis://, redis-sentinel://: 0..64 */
};

/*
 * Check the query settings of a parsed lock URL (common/url.h) into *out:
 * only timeout_ms, session_ms and, on a single Redis server, replicas.
 * Returns 0, or -EINVAL with a reason in err (errlen bytes).
 */
int lock__url_settings(const struct url *u, struct lock_url_settings *out,
                       char *err, size_t errlen);

struct lock_backend;

struct lock_client {
    const struct lock_backend *be;
    void *impl; /* the backend's state */
    struct url url;
    uint32_t timeout_ms;               /* resolved: option, URL, or 1000 */
    uint32_t session_ms;               /* resolved: option, URL, or 10000 */
    uint32_t watchdog_lease_ms;        /* resolved: option or the default */
    uint32_t replicas;                 /* redis: WAIT for this many; 0: none */
    char prefix[REDIS_PREFIX_MAX + 1]; /* redis: of every key and channel */
    /* The servers, as "host:port,host:port/path": with the backend's name,
     * what makes two clients' locks of one name the same lock. */
    char where[URL_HOSTS_MAX * 264 + 264 + REDIS_PREFIX_MAX + 2];

    /* The watchdog: locks with a lease of 0, renewed by one thread. */
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cond;   /* CLOCK_MONOTONIC; broadcast */
    struct lock *wd_renewing; /* renewed right now, wd_mu dropped */
    pthread_t wd_thread;
    int wd_started;
    int wd_stop;
    struct lock *wd_head;
};

/* The two sides of a read-write lock: each points at the other until one
 * is freed. */
struct lock_rw_pair {
    struct lock *read, *write;
};

struct lock {
    struct lock_client *c;
    enum lock_kind kind;
    uint32_t permits;          /* semaphore */
    struct lock_rw_pair *pair; /* read and write: shared with the other */
    char name[LOCK_NAME_MAX + 1];
    size_t name_len;
    char owner[LOCK_OWNER_LEN];
    /* Redis: the lock's key (the client's prefix, the kind's, the name),
     * whose hash tag its other keys and channels carry. */
    char rkey[REDIS_PREFIX_MAX + LOCK_NAME_MAX + 16];
    size_t rkey_len;
    unsigned holds;
    uint64_t fence;
    /* A release whose answer was lost: the backend's state for it is
     * kept (bs, fence) until release is called again. */
    int release_pending;
    /* Set by a backend's release when it failed without knowing whether
     * the server ran it (or on a connection found reset, where a fresh
     * one may answer): the same release may be asked again. */
    int release_unknown;
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
 *   Idempotent: when it fails without knowing whether the server ran it,
 *   it sets l->release_unknown and keeps what it needs (l->bs, l->fence);
 *   a second call for the same hold then answers as the first would
 *   have, and never frees a lock someone else took meanwhile.
 * renew: extend the lease to lease_ms if l still owns it (session
 *   backends: check the session still holds it); *held = 0 if not.
 *   Called from the watchdog thread; may be NULL (nothing to renew).
 *   Never called while acquire or release of the same lock runs.
 * forget: drop what a pending release kept (lock_free() gives up on it):
 *   the lease or the session frees the lock. May be NULL.
 * acquire, release and renew serve every kind in kinds, by l->kind.
 * ping: check the backend answers (a quorum of servers, a session),
 *   within about one timeout. Thread-safe.
 * acquire_many, release_many: as acquire (wait 0) and release for each
 *   of n mutexes (LOCK_KIND_MUTEX) of this client, in one round trip; may
 *   be NULL (then the generic layer calls acquire and release in turn).
 *   release_many keeps nothing for a retry: a release it could not
 *   finish is left to the lease.
 */
struct lock_backend {
    const char *name;
    unsigned kinds; /* LOCK_KIND_BIT() of each kind offered */
    int (*open)(struct lock_client *c);
    void (*close)(struct lock_client *c);
    int (*acquire)(struct lock *l, uint32_t wait_ms, uint32_t lease_ms,
                   enum lock_status *status);
    int (*release)(struct lock *l, int *held);
    int (*renew)(struct lock *l, uint32_t lease_ms, int *held);
    void (*forget)(struct lock *l);
    /* Check and prepare a new l (name and kind set); NULL: nothing to do.
     * 0 or -EINVAL (a name the backend cannot use). */
    int (*prepare)(struct lock *l);
    int (*ping)(struct lock_client *c);
    void (*acquire_many)(struct lock **l, size_t n, uint32_t lease_ms,
                         enum lock_status *status, int *err);
    void (*release_many)(struct lock **l, size_t n, int *held, int *err);
};

#define LOCK_KIND_BIT(k) (1u << (unsigned)(k))

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

/*
 * Make a struct lock of kind on c (lock.c): checks name, that the backend
 * offers kind (-ENOTSUP), draws the owner. No I/O.
 */
int lock__new_kind(struct lock_client *c, const char *name, enum lock_kind kind,
                   struct lock **out);

#endif
