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

/* KEYS: the name's and the address's sets; ARGV: max for each, window
 * (ms). Returns the ms until a try is allowed, 0 now. */
static struct redis_script check_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "local wait = 0 "
    "for i = 1, 2 do "
    "  redis.call('zremrangebyscore', KEYS[i], '-inf', now - ARGV[3]) "
    "  local n = redis.call('zcard', KEYS[i]) "
    "  local max = tonumber(ARGV[i]) "
    "  if n >= max then "
    "    local oldest = redis.call('zrange', KEYS[i], n - max, n - max, "
    "                              'withscores') "
    "    local w = tonumber(oldest[2]) + ARGV[3] - now "
    "    if w > wait then wait = w end "
    "  end "
    "end "
    "return wait");

/* KEYS: both sets; ARGV: window (ms). One failure each, now. */
static struct redis_script add_script =
    REDIS_SCRIPT("local t = redis.call('time') "
                 "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
                 "for i = 1, 2 do "
                 "  redis.call('zadd', KEYS[i], now, now .. ':' .. t[2]) "
                 "  redis.call('pexpire', KEYS[i], ARGV[1]) "
                 "end "
                 "return 1");

static void fail_keys(const char *name, const char *addr, char *kn, char *ka,
                      size_t n)
{
    snprintf(kn, n, "admin:fails:u:%s", name);
    snprintf(ka, n, "admin:fails:ip:%s", addr);
}

/* Run script with keys kn and ka and ARGV args; its integer into *out. */
static int fails_eval(struct store *st, struct redis_script *script,
                      const char **argv, int argc, long long *out)
{
    redisContext *rc = store_redis(st);
    redisReply *r;
    int err = 0;

    if (!rc)
        return -ENOTCONN;
    r = redis_script_run(rc, script, 2, argc, argv, NULL, &err);
    if (!r) {
        log_warn("redis command failed", "op=admin_fails err=\"%s\"",
                 rc->errstr);
        return -ENOTCONN;
    }
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
                            const char *addr, unsigned max_name,
                            unsigned max_addr, unsigned window_ms, bool *locked,
                            int64_t *retry_ms)
{
    char kn[128], ka[128], a1[16], a2[16], a3[16];
    const char *argv[5] = {kn, ka, a1, a2, a3};
    long long wait = 0;
    int err;

    fail_keys(name, addr, kn, ka, sizeof(kn));
    snprintf(a1, sizeof(a1), "%u", max_name);
    snprintf(a2, sizeof(a2), "%u", max_addr);
    snprintf(a3, sizeof(a3), "%u", window_ms);
    err = fails_eval(st, &check_script, argv, 5, &wait);
    if (err)
        return err;
    *locked = wait > 0;
    *retry_ms = wait;
    return 0;
}

int store_admin_fails_add(struct store *st, const char *name, const char *addr,
                          unsigned window_ms)
{
    char kn[128], ka[128], a1[16];
    const char *argv[3] = {kn, ka, a1};
    long long r;

    fail_keys(name, addr, kn, ka, sizeof(kn));
    snprintf(a1, sizeof(a1), "%u", window_ms);
    return fails_eval(st, &add_script, argv, 3, &r);
}

int store_admin_fails_clear(struct store *st, const char *name)
{
    redisContext *rc = store_redis(st);
    redisReply *r;

    if (!rc)
        return -ENOTCONN;
    r = redisCommand(rc, "DEL admin:fails:u:%s", name);
    if (!r)
        return -ENOTCONN;
    freeReplyObject(r);
    return 0;
}
