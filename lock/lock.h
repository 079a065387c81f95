/*
 * lock.h - the distributed lock that guards one user's purchase across
 * processes: SET key owner NX PX ttl to take it, a Lua compare-and-delete
 * to release it, so only the owner can release and a holder that dies
 * releases by expiry.
 *
 * The caller passes a connected hiredis context it owns (one per thread,
 * see store_redis()); this module never keeps it. On a connection error the
 * context's err field is set and the caller must not reuse it.
 */
#ifndef SECKILL_LOCK_H
#define SECKILL_LOCK_H

#include <stdint.h>
#include <hiredis/hiredis.h>

#define LOCK_KEY_MAX 128
/* 128 random bits from libsodium, as 32 hex characters plus NUL. */
#define LOCK_OWNER_LEN 33

struct lock_handle {
    char key[LOCK_KEY_MAX];
    char owner[LOCK_OWNER_LEN];
};

enum lock_status {
    LOCK_ACQUIRED, /* the handle now owns the key */
    LOCK_BUSY,     /* someone else holds it */
};

/*
 * Try once, without waiting, to take the lock named key for ttl_ms
 * milliseconds (ttl_ms > 0). On LOCK_ACQUIRED, h holds the key and a fresh
 * random owner, to pass to lock_release(). Returns 0 with *status set, or
 * -EINVAL for a bad key or ttl, -EIO when Redis answered with an error,
 * -ECONNRESET when the connection failed (rc->err is then set).
 */
int lock_acquire(redisContext *rc, const char *key, uint32_t ttl_ms,
                 struct lock_handle *h, enum lock_status *status);

/*
 * Release a lock taken with lock_acquire(): delete the key only if it still
 * holds h->owner (EVALSHA of a compare-and-delete script, falling back to
 * EVAL when the server answers NOSCRIPT). *released (may be NULL) is set
 * to 1 if the key was ours and is now deleted, 0 if it had expired or
 * belongs to another owner. Returns 0, -EIO or -ECONNRESET as above.
 */
int lock_release(redisContext *rc, const struct lock_handle *h, int *released);

#endif
