/*
 * ratelimit.c - token buckets in Redis, one Lua script per bucket (see
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
 * the first token is due.
 *
 * Each bucket is its own script call: a user's and an address's bucket
 * are in different Redis Cluster slots, which one script cannot take
 * together. The buckets are taken in order, and a request refused by a
 * later bucket gives back the token an earlier one took (its TAT moves
 * back by T, which undoes the take whatever was taken since), so a
 * client refused by its address does not also drain its user's bucket:
 * every bucket or none, as one script did. What one script gave and this
 * does not: between the take and the give-back another request may see
 * the earlier bucket one token lower, and if Redis fails in between, the
 * token stays taken (as for a request that was served).
 *
 * Redis' own clock (TIME) is used, so instances with skewed clocks share
 * one view of each bucket. Script effects are replicated (Redis >= 5).
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/util.h"

/* KEYS[1] the bucket; ARGV interval (us), burst. Returns {1, 0} (a token
 * taken) or {0, retry_ms}. */
static struct redis_script take_script =
    REDIS_SCRIPT("local t = redis.call('TIME') "
                 "local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
                 "local iv, burst = tonumber(ARGV[1]), tonumber(ARGV[2]) "
                 "local tat = tonumber(redis.call('GET', KEYS[1]) or '0') "
                 "if tat < now then tat = now end "
                 "tat = tat + iv "
                 "local wait = tat - burst * iv - now "
                 "if wait > 0 then return {0, math.ceil(wait / 1000)} end "
                 "redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', "
                 "           math.ceil((tat - now) / 1000)) "
                 "return {1, 0}");

/* KEYS[1] the bucket; ARGV interval (us). The token a take took, given
 * back: 1. */
static struct redis_script give_script = REDIS_SCRIPT(
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local tat = tonumber(redis.call('GET', KEYS[1]) or '0') - "
    "            tonumber(ARGV[1]) "
    "if tat <= now then redis.call('DEL', KEYS[1]) "
    "else redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', "
    "                math.ceil((tat - now) / 1000)) end "
    "return 1");

/* The longest bucket key: the prefix and a name the handlers chose. */
#define KEY_MAX (REDIS_PREFIX_MAX + 128)

/* Run script on one bucket; the reply's two integers into a and c. */
static int bucket_run(struct redis_link *l, struct redis_script *script,
                      const struct store_rate_bucket *b, int argc, long long *a,
                      long long *c, char *why, size_t why_len)
{
    char key[KEY_MAX], iv[24], burst[16];
    const char *argv[3] = {key, iv, burst};
    double us = 1e6 / b->per_s;
    redisReply *r;
    int err = 0;

    if (redis_key(key, sizeof(key), "%s", b->key) < 0) {
        snprintf(why, why_len, "bucket key too long");
        return -ENAMETOOLONG;
    }
    snprintf(iv, sizeof(iv), "%.0f", us < 1 ? 1 : us);
    snprintf(burst, sizeof(burst), "%u", b->burst);
    r = redis_link_script(l, script, 1, argc, argv, NULL, &err);
    if (!r) {
        snprintf(why, why_len, "redis failed: %s", redis_link_errstr(l, err));
        return err ? err : -EIO;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, why_len, "script failed: %s", r->str);
        err = -EIO;
    } else if (r->type == REDIS_REPLY_INTEGER && c == NULL) {
        *a = r->integer;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_INTEGER ||
               r->element[1]->type != REDIS_REPLY_INTEGER || c == NULL) {
        snprintf(why, why_len, "unexpected reply");
        err = -EIO;
    } else {
        *a = r->element[0]->integer;
        *c = r->element[1]->integer;
    }
    freeReplyObject(r);
    return err;
}

int store_rate_take(struct store *st, const struct store_rate_bucket *b,
                    size_t n, int64_t *retry_ms, char *why, size_t why_len)
{
    struct redis_link *l;
    long long taken = 0, wait = 0, one;
    int err = 0;
    size_t i;

    *retry_ms = 0;
    if (why_len)
        why[0] = '\0';
    if (n == 0)
        return 0;
    if (n > STORE_RATE_BUCKETS_MAX)
        return -EINVAL;
    l = store_redis_link(st);
    if (!l) {
        snprintf(why, why_len, "redis unreachable");
        return -ENOTCONN;
    }
    for (i = 0; i < n; i++) {
        err =
            bucket_run(l, &take_script, &b[i], 3, &taken, &wait, why, why_len);
        if (err || !taken)
            break;
    }
    if (err)
        return err; /* the caller goes on without a limit: keep what
                     * was taken, as for a request served */
    if (i == n)
        return 0;
    *retry_ms = wait > 0 ? wait : 1;
    /* Refused by bucket i: give back what the ones before it took. */
    while (i-- > 0) {
        char w[96];

        if (bucket_run(l, &give_script, &b[i], 2, &one, NULL, w, sizeof(w)))
            log_warn("rate limit token not given back", "why=\"%s\"", w);
    }
    return 0;
}
