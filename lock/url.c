/*
 * url.c - the lock URL's own settings. Every lock URL is parsed by the
 * service's one URL parser (common/url.h: percent-escapes decoded the same
 * way as in the MySQL and Redis URLs); the query keys a lock URL may carry
 * are checked here: timeout_ms and session_ms (1..3600000 ms) on every
 * backend, replicas (0..64) on a single Redis server only.
 */
#include "lock/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/redis.h"

/* A decimal in [min, max]. */
static int parse_uint(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    unsigned long v = 0;
    size_t n = strlen(s);

    if (n == 0 || n > 7 || strspn(s, "0123456789") != n)
        return -1;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned long)(s[i] - '0');
    if (v < min || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int lock__url_settings(const struct url *u, struct lock_url_settings *out,
                       char *err, size_t errlen)
{
    /* WAIT counts the replicas of the one server the lock is on: there is
     * no such server behind RedLock's quorum, MySQL or ZooKeeper. */
    int one_redis = strcmp(u->scheme, "redis") == 0 ||
                    strcmp(u->scheme, REDIS_SENTINEL_SCHEME) == 0;

    memset(out, 0, sizeof(*out));
    for (int i = 0; i < u->nquery; i++) {
        const char *k = u->query[i].key;
        uint32_t *dst, min = 1, max = 3600000;

        if (strcmp(k, "timeout_ms") == 0) {
            dst = &out->timeout_ms;
        } else if (strcmp(k, "session_ms") == 0) {
            dst = &out->session_ms;
        } else if (strcmp(k, "replicas") == 0) {
            if (!one_redis) {
                snprintf(err, errlen, "replicas is for redis:// URLs only");
                return -EINVAL;
            }
            dst = &out->replicas;
            min = 0;
            max = LOCK_REPLICAS_MAX;
        } else {
            snprintf(err, errlen, "unknown query key \"%s\"", k);
            return -EINVAL;
        }
        if (parse_uint(u->query[i].value, min, max, dst)) {
            snprintf(err, errlen, "bad value for %s (%u..%u)", k, (unsigned)min,
                     (unsigned)max);
            return -EINVAL;
        }
    }
    return 0;
}
