/*
 * admins.c - admin accounts in MySQL and their failed logins in Redis
 * (store.h).
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

struct insert_args {
    const char *name, *hash;
    int64_t *id;
};

static int insert_once(struct store *st, void *arg)
{
    struct insert_args *a = arg;
    MYSQL_BIND p[2] = {0};
    unsigned long l0, l1;
    MYSQL_STMT *s;
    int err;

    bind_str_in(&p[0], a->name, &l0);
    bind_str_in(&p[1], a->hash, &l1);
    err = store_stmt_exec(st, STMT_ADMIN_INSERT, p, NULL, &s);
    if (err)
        return err;
    *a->id = (int64_t)mysql_stmt_insert_id(s);
    return 0;
}

int store_admin_insert(struct store *st, const char *username,
                       const char *pw_hash, int64_t *id)
{
    struct insert_args a = {username, pw_hash, id};
    /* A lost connection is not retried: the row may be in. */
    return insert_once(st, &a);
}

struct get_args {
    const char *name;
    int64_t *id;
    char *hash;
    bool *disabled;
};

static int get_once(struct store *st, void *arg)
{
    struct get_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[3] = {0};
    unsigned long l0, hlen = 0;
    int64_t disabled = 0;
    size_t n = 0;
    int err;

    bind_str_in(&p[0], a->name, &l0);
    bind_i64(&r[0], a->id);
    bind_str_out(&r[1], a->hash, STORE_ADMIN_HASH_MAX, &hlen);
    bind_i64(&r[2], &disabled);
    err = store_stmt_rows(st, STMT_ADMIN_GET, p, r, 1, NULL, NULL, &n);
    if (err)
        return err;
    if (!n)
        return -ENOENT;
    *a->disabled = disabled != 0;
    return 0;
}

int store_admin_get(struct store *st, const char *username, int64_t *id,
                    char *pw_hash, bool *disabled)
{
    struct get_args a = {username, id, pw_hash, disabled};
    return store_retry(st, get_once, &a);
}

/* ---- failed logins ---- */

/*
 * The failures of a name from an address, of a name and of an address
 * are three sorted sets in three Redis Cluster slots: each is its own
 * script call. A connection lost between the calls of an add counts the
 * failure against some of them only.
 */

/* KEYS: one set; ARGV: its max, window (ms). Returns the ms until a try
 * is allowed (> 0), or minus the failures in the window (a try is
 * allowed now). */
static struct redis_script check_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now - ARGV[2]) "
    "local n = redis.call('zcard', KEYS[1]) "
    "local max = tonumber(ARGV[1]) "
    "if n < max then return -n end "
    "local oldest = redis.call('zrange', KEYS[1], n - max, n - max, "
    "                          'withscores') "
    "return math.max(0, tonumber(oldest[2]) + ARGV[2] - now)");

/* KEYS: one set; ARGV: window (ms). One failure, now. */
static struct redis_script add_script =
    REDIS_SCRIPT("local t = redis.call('time') "
                 "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
                 "redis.call('zadd', KEYS[1], now, now .. ':' .. t[2]) "
                 "redis.call('pexpire', KEYS[1], ARGV[1]) "
                 "return 1");

void store_admin_fail_keys(const char *name, const char *addr, char *kp,
                           char *kn, char *ka, size_t n)
{
    redis_key(kp, n, "admin:fails:p:%s|%s", name, addr);
    redis_key(kn, n, "admin:fails:u:%s", name);
    redis_key(ka, n, "admin:fails:ip:%s", addr);
}

/* Run script with one key and ARGV args (argv[0] the key); its integer
 * into *out. */
static int fails_eval(struct store *st, struct redis_script *script,
                      const char **argv, int argc, long long *out)
{
    redisReply *r;
    int err = 0;

    r = store_redis_script(st, script, 1, argc, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    if (r->type != REDIS_REPLY_INTEGER) {
        log_error("redis reply unexpected", "op=admin_fails type=%d err=\"%s\"",
                  r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
        err = -EIO;
    } else {
        *out = r->integer;
    }
    freeReplyObject(r);
    return err;
}

int store_admin_fails_check(struct store *st, const char *name,
                            const char *addr, unsigned max_pair,
                            unsigned max_name, unsigned max_addr,
                            unsigned window_ms, bool *locked, int64_t *retry_ms,
                            unsigned *addr_fails)
{
    char k[3][STORE_FAIL_KEY_MAX], max[3][16], w[16];
    const unsigned maxes[3] = {max_pair, max_name, max_addr};
    int err = 0;

    store_admin_fail_keys(name, addr, k[0], k[1], k[2], sizeof(k[0]));
    snprintf(w, sizeof(w), "%u", window_ms);
    *retry_ms = 0;
    *addr_fails = 0;
    for (int i = 0; i < 3 && !err; i++) {
        const char *argv[3] = {k[i], max[i], w};
        long long wait = 0;

        snprintf(max[i], sizeof(max[i]), "%u", maxes[i]);
        err = fails_eval(st, &check_script, argv, 3, &wait);
        if (!err && wait > *retry_ms)
            *retry_ms = wait;
        if (!err && i == 2 && wait <= 0)
            *addr_fails = (unsigned)-wait;
    }
    *locked = *retry_ms > 0;
    return err;
}

int store_admin_fails_add(struct store *st, const char *name, const char *addr,
                          unsigned window_ms)
{
    char k[3][STORE_FAIL_KEY_MAX], w[16];
    int err = 0;

    store_admin_fail_keys(name ? name : "", addr, k[0], k[1], k[2],
                          sizeof(k[0]));
    snprintf(w, sizeof(w), "%u", window_ms);
    for (int i = name ? 0 : 2; i < 3 && !err; i++) {
        const char *argv[2] = {k[i], w};
        long long r;

        err = fails_eval(st, &add_script, argv, 2, &r);
    }
    return err;
}

int store_admin_fails_clear(struct store *st, const char *name,
                            const char *addr)
{
    char k[3][STORE_FAIL_KEY_MAX];
    int err = 0;

    store_admin_fail_keys(name, addr, k[0], k[1], k[2], sizeof(k[0]));
    for (int i = 0; i < 2; i++) {
        const char *argv[2] = {"DEL", k[i]};
        redisReply *r = store_redis_command(st, k[i], 2, argv, NULL, &err);

        if (!r)
            return -ENOTCONN;
        freeReplyObject(r);
    }
    return 0;
}
