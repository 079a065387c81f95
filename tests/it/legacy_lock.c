/*
 * legacy_lock.c - the SETNX + GETSET lock (see legacy_lock.h), a faithful
 * short port of the blog post's Java RedisLock: same commands in the same
 * order, same treatment of a missing or unparsable value ("expired").
 */
#include "tests/it/legacy_lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* GET key as a string into buf ("" for nil); -1 on an error. */
static int get_str(struct legacy_lock *l, char *buf, size_t size, int *nil)
{
    redisReply *r = redisCommand(l->rc, "GET %s", l->key);

    if (!r)
        return -1;
    *nil = r->type != REDIS_REPLY_STRING;
    snprintf(buf, size, "%s", *nil ? "" : r->str);
    freeReplyObject(r);
    return 0;
}

/* checkIfLockTimeout: now > the time in the key; a missing or bad value
 * (the post catches the exception) counts as expired. */
static int check_timeout(struct legacy_lock *l, int64_t now)
{
    char buf[32], *end;
    int nil;

    if (get_str(l, buf, sizeof(buf), &nil) != 0 || nil)
        return 1;
    long long t = strtoll(buf, &end, 10);
    return *end != '\0' || now > t;
}

int legacy_try_lock(struct legacy_lock *l)
{
    int64_t now = wall_ms();
    char expire[32], expect[32];
    redisReply *r;
    int nil, owned;

    snprintf(expire, sizeof(expire), "%lld", (long long)(now + l->interval_ms));
    r = redisCommand(l->rc, "SETNX %s %s", l->key, expire);
    if (!r)
        return -1;
    owned = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (owned)
        return 1;
    if (!check_timeout(l, now))
        return 0;
    if (l->hook)
        l->hook(l, LEGACY_CHECKED_EXPIRY, l->hook_arg);
    if (get_str(l, expect, sizeof(expect), &nil) != 0)
        return -1;
    r = redisCommand(l->rc, "GETSET %s %s", l->key, expire);
    if (!r)
        return -1;
    owned = r->type == REDIS_REPLY_STRING && strcmp(r->str, expect) == 0;
    freeReplyObject(r);
    return owned;
}

int legacy_lock_wait(struct legacy_lock *l, int64_t timeout_ms)
{
    int64_t start = wall_ms();

    while (wall_ms() - start <= timeout_ms) {
        int rc = legacy_try_lock(l);
        if (rc != 0)
            return rc;
        struct timespec ts = {0, (200 + rand() % 40) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

void legacy_unlock(struct legacy_lock *l)
{
    freeReplyObject(redisCommand(l->rc, "DEL %s", l->key));
}
