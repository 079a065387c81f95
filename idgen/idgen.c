/*
 * idgen.c - the Redis ID worker (seed 002, section 1): a timestamp in the
 * high 32 bits and the day's INCR counter in the low 32 bits.
 */
#include "idgen/idgen.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

static int prefix_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > 32)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
              p[i] == '_'))
            return 0;
    return 1;
}

int64_t idgen_compose(int64_t now_s, uint32_t seq)
{
    return (now_s - IDGEN_EPOCH) << IDGEN_SEQ_BITS | (int64_t)seq;
}

void idgen_decode(int64_t id, int64_t *epoch_s, uint32_t *seq)
{
    *epoch_s = (id >> IDGEN_SEQ_BITS) + IDGEN_EPOCH;
    *seq = (uint32_t)(id & 0xffffffffLL);
}

int idgen_day_key(const char *prefix, int64_t now_s, char *buf, size_t len)
{
    struct tm tm;
    time_t t = (time_t)now_s;

    gmtime_r(&t, &tm);
    int n = snprintf(buf, len, "icr:%s:%04d:%02d:%02d", prefix,
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int idgen_next(redisContext *rc, const char *prefix, int64_t now_s, int64_t *id)
{
    char key[64];
    redisReply *incr = NULL, *expire = NULL;
    int err = 0;

    /* The timestamp must fit in 31 bits so the id stays positive. */
    if (!prefix_ok(prefix) || now_s < IDGEN_EPOCH ||
        now_s - IDGEN_EPOCH > INT32_MAX)
        return -EINVAL;
    if (idgen_day_key(prefix, now_s, key, sizeof(key)))
        return -EINVAL;

    /* INCR and EXPIRE in one round trip; the TTL keeps old day keys from
     * piling up and is refreshed while the day is in use. */
    redisAppendCommand(rc, "INCR %s", key);
    redisAppendCommand(rc, "EXPIRE %s %d", key, IDGEN_KEY_TTL_S);
    if (redisGetReply(rc, (void **)&incr) != REDIS_OK ||
        redisGetReply(rc, (void **)&expire) != REDIS_OK) {
        log_warn("redis command failed", "op=idgen_next err=\"%s\"",
                 rc->errstr);
        err = -ECONNRESET;
        goto out;
    }
    if (incr->type != REDIS_REPLY_INTEGER) {
        log_warn("redis reply unexpected", "op=idgen_next type=%d", incr->type);
        err = -EIO;
        goto out;
    }
    if (incr->integer <= 0 || incr->integer > (long long)UINT32_MAX) {
        log_error("id counter overflow", "key=%s n=%lld", key, incr->integer);
        err = -EOVERFLOW;
        goto out;
    }
    *id = idgen_compose(now_s, (uint32_t)incr->integer);
out:
    freeReplyObject(incr);
    freeReplyObject(expire);
    return err;
}
