/*
 * ratelimit.c - token buckets in Redis, one Lua script per request (see
 * store_rate_take() in store.h; the handlers choose the buckets: a
 * client's address, a user).
 *
 * A bucket is kept in the GCRA form of a token bucket: one key holding
 * the "theoretical arrival time" (TAT, microseconds of Redis' clock) at
 * which the bucket would be full again. With an interval T = 1/rate, a
 * request at time now is allowed when TAT' = max(TAT, now) + T is at most
 * now + burst * T; it then stores TAT' with a TTL of TAT' - now, so a key
 * always carries a TTL and disappears exactly when its bucket is full. A
 * refused request changes nothing, and the Retry-After is the time until
 * the first token is due. The script takes from every bucket of the
 * request or from none, so a client refused by its address does not also
 * drain its user's bucket.
 *
 * Redis' own clock (TIME) is used, so instances with skewed clocks share
 * one view of each bucket. Script effects are replicated (Redis >= 5).
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/redis.h"
#include "common/util.h"

/*
 * KEYS: the buckets; ARGV[2i-1], ARGV[2i]: interval (us) and burst of
 * KEYS[i]. Returns {1, 0} (allowed, tokens taken) or {0, retry_ms}.
 */
static const char script[] =
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local wait, tats = 0, {} "
    "for i, k in ipairs(KEYS) do "
    "  local iv = tonumber(ARGV[2 * i - 1]) "
    "  local burst = tonumber(ARGV[2 * i]) "
    "  local tat = tonumber(redis.call('GET', k) or '0') "
    "  if tat < now then tat = now end "
    "  tats[i] = tat + iv "
    "  local due = tats[i] - burst * iv "
    "  if due - now > wait then wait = due - now end "
    "end "
    "if wait > 0 then return {0, math.ceil(wait / 1000)} end "
    "for i, k in ipairs(KEYS) do "
    "  redis.call('SET', k, string.format('%.0f', tats[i]), 'PX', "
    "             math.ceil((tats[i] - now) / 1000)) "
    "end "
    "return {1, 0}";

static struct redis_script bucket_script = REDIS_SCRIPT(script);

int store_rate_take(struct store *st, const struct store_rate_bucket *b,
                    size_t n, int64_t *retry_ms, char *why, size_t why_len)
{
    char args[STORE_RATE_BUCKETS_MAX][2][24];
    const char *argv[3 * STORE_RATE_BUCKETS_MAX];
    size_t lens[3 * STORE_RATE_BUCKETS_MAX];
    redisContext *rc;
    redisReply *r;
    int argc = 0, err = 0;

    *retry_ms = 0;
    if (why_len)
        why[0] = '\0';
    if (n == 0)
        return 0;
    if (n > STORE_RATE_BUCKETS_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        argv[argc++] = b[i].key;
    for (size_t i = 0; i < n; i++) {
        double iv = 1e6 / b[i].per_s;

        snprintf(args[i][0], sizeof(args[i][0]), "%.0f", iv < 1 ? 1 : iv);
        snprintf(args[i][1], sizeof(args[i][1]), "%u", b[i].burst);
        argv[argc++] = args[i][0];
        argv[argc++] = args[i][1];
    }
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);

    rc = store_redis(st);
    if (!rc) {
        snprintf(why, why_len, "redis unreachable");
        return -ENOTCONN;
    }
    r = redis_script_run(rc, &bucket_script, (int)n, argc, argv, lens, &err);
    if (!r) {
        snprintf(why, why_len, "redis failed: %s", rc->errstr);
        return err ? err : -EIO;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, why_len, "script failed: %s", r->str);
        err = -EIO;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_INTEGER ||
               r->element[1]->type != REDIS_REPLY_INTEGER) {
        snprintf(why, why_len, "unexpected reply");
        err = -EIO;
    } else if (r->element[0]->integer == 0) {
        long long ms = r->element[1]->integer;
        *retry_ms = ms > 0 ? ms : 1;
    }
    freeReplyObject(r);
    return err;
}
