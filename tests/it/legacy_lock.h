/*
 * legacy_lock.h - the SETNX + GETSET expiry lock of the flash-sale blog post
 * the lock library replaces, kept for tests only: test_legacy_lock.c shows
 * its races next to lock/ passing the same scenarios. Do not use it for
 * anything else.
 *
 * The lock is one key holding the holder's expiry time (the client's wall
 * clock, ms). A try: SETNX key (now + interval); if the key exists and the
 * time in it has passed, read it (GET) and swap in ours (GETSET), and own
 * the lock if GETSET returned what GET did. Unlock is a plain DEL.
 */
#ifndef SECKILL_IT_LEGACY_LOCK_H
#define SECKILL_IT_LEGACY_LOCK_H

#include <stdint.h>
#include <hiredis/hiredis.h>

/* Where a try can be paused (for interleaving two clients). */
enum legacy_step {
    LEGACY_CHECKED_EXPIRY, /* after the GET that found the lock expired */
};

struct legacy_lock {
    redisContext *rc; /* borrowed: the client's connection */
    const char *key;  /* borrowed */
    int64_t interval_ms;
    /* Called at each step of a try, if set. */
    void (*hook)(struct legacy_lock *l, enum legacy_step step, void *arg);
    void *hook_arg;
};

/* One try (the post's innerTryLock): 1 owned, 0 not, -1 Redis error. */
int legacy_try_lock(struct legacy_lock *l);

/* The post's tryLock(timeout): try every 200-240 ms until timeout_ms. */
int legacy_lock_wait(struct legacy_lock *l, int64_t timeout_ms);

/* The post's unLock: DEL the key, whoever holds it. */
void legacy_unlock(struct legacy_lock *l);

#endif
