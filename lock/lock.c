/*
 * lock.c - the Redis lock: SET NX PX with a random owner, released by a Lua
 * compare-and-delete so that a holder whose lease ran out cannot delete the
 * lock someone else took since (seed 002, section 4.2).
 */
#include "lock/lock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "common/util.h"

static const char release_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) "
    "else return 0 end";

/* SHA-1 of release_script, learnt from the first SCRIPT LOAD. */
static char release_sha[41];
static pthread_mutex_t sha_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

static void init_sodium(void)
{
    if (sodium_init() < 0) {
        log_error("libsodium init failed", NULL);
        abort();
    }
}

/* Map a NULL reply (connection failure) or an error reply to -errno. */
static int reply_error(redisContext *rc, redisReply *r, const char *what)
{
    if (!r) {
        log_warn("redis command failed", "op=%s err=\"%s\"", what, rc->errstr);
        return -ECONNRESET;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        log_warn("redis command failed", "op=%s reply=\"%.*s\"", what,
                 (int)r->len, r->str);
        return -EIO;
    }
    return 0;
}

int lock_acquire(redisContext *rc, const char *key, uint32_t ttl_ms,
                 struct lock_handle *h, enum lock_status *status)
{
    unsigned char raw[16];
    size_t klen = strlen(key);
    int err;

    if (klen == 0 || klen >= LOCK_KEY_MAX || ttl_ms == 0)
        return -EINVAL;
    pthread_once(&sodium_once, init_sodium);
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(h->owner, sizeof(h->owner), raw, sizeof(raw));
    memcpy(h->key, key, klen + 1);

    redisReply *r = redisCommand(rc, "SET %s %s NX PX %u", h->key, h->owner,
                                 (unsigned)ttl_ms);
    err = reply_error(rc, r, "lock_acquire");
    if (err)
        goto out;
    if (r->type == REDIS_REPLY_STATUS) {
        *status = LOCK_ACQUIRED;
    } else if (r->type == REDIS_REPLY_NIL) {
        *status = LOCK_BUSY;
    } else {
        log_warn("redis reply unexpected", "op=lock_acquire type=%d", r->type);
        err = -EIO;
    }
out:
    freeReplyObject(r);
    return err;
}

/* The script's SHA-1, from one SCRIPT LOAD per process; "" if unknown. */
static void release_sha_get(redisContext *rc, char sha[41])
{
    pthread_mutex_lock(&sha_mutex);
    memcpy(sha, release_sha, 41);
    pthread_mutex_unlock(&sha_mutex);
    if (sha[0])
        return;

    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", release_script);
    if (r && r->type == REDIS_REPLY_STRING && r->len == 40) {
        memcpy(sha, r->str, 40);
        sha[40] = '\0';
        pthread_mutex_lock(&sha_mutex);
        memcpy(release_sha, sha, 41);
        pthread_mutex_unlock(&sha_mutex);
    }
    freeReplyObject(r);
}

int lock_release(redisContext *rc, const struct lock_handle *h, int *released)
{
    char sha[41];
    redisReply *r = NULL;
    int err;

    release_sha_get(rc, sha);
    if (sha[0] && !rc->err)
        r = redisCommand(rc, "EVALSHA %s 1 %s %s", sha, h->key, h->owner);
    /* NOSCRIPT: the server lost its script cache (restart, SCRIPT FLUSH);
     * EVAL runs the script and caches it again. */
    if (!rc->err && (!r || (r->type == REDIS_REPLY_ERROR &&
                            strncmp(r->str, "NOSCRIPT", 8) == 0))) {
        freeReplyObject(r);
        r = redisCommand(rc, "EVAL %s 1 %s %s", release_script, h->key,
                         h->owner);
    }
    err = reply_error(rc, r, "lock_release");
    if (err)
        goto out;
    if (r->type != REDIS_REPLY_INTEGER) {
        log_warn("redis reply unexpected", "op=lock_release type=%d", r->type);
        err = -EIO;
        goto out;
    }
    if (released)
        *released = r->integer == 1;
out:
    freeReplyObject(r);
    return err;
}
