/*
 * users.c - users in MySQL and their login codes in Redis.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

struct login_args {
    const char *phone;
    int64_t *user_id;
};

static int user_login_once(struct store *st, void *arg)
{
    struct login_args *a = arg;
    MYSQL_BIND p[1] = {0};
    unsigned long len;
    MYSQL_STMT *s;
    int err;

    bind_str_in(&p[0], a->phone, &len);
    err = store_stmt_exec(st, STMT_USER_LOGIN, p, NULL, &s);
    if (err)
        return err;
    /* ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id) makes the insert id
     * the existing user's id too. */
    *a->user_id = (int64_t)mysql_stmt_insert_id(s);
    return *a->user_id > 0 ? 0 : -EIO;
}

int store_user_login(struct store *st, const char *phone, int64_t *user_id)
{
    struct login_args a = {phone, user_id};
    return store_retry(st, user_login_once, &a);
}

/* Replace the code and its try count, and set the TTL, atomically. */
static struct redis_script code_put_script =
    REDIS_SCRIPT("redis.call('del', KEYS[1]) "
                 "redis.call('hset', KEYS[1], 'code', ARGV[1], 'tries', 0) "
                 "redis.call('expire', KEYS[1], ARGV[2]) "
                 "return 1");

/* 0 = match (deleted), 1 = wrong (try counted), 2 = none. */
static struct redis_script code_check_script = REDIS_SCRIPT(
    "local c = redis.call('hget', KEYS[1], 'code') "
    "if not c then return 2 end "
    "if c == ARGV[1] then redis.call('del', KEYS[1]) return 0 end "
    "local t = redis.call('hincrby', KEYS[1], 'tries', 1) "
    "if t >= tonumber(ARGV[2]) then redis.call('del', KEYS[1]) end "
    "return 1");

static int code_eval(struct store *st, struct redis_script *script,
                     const char *phone, const char *a1, unsigned a2,
                     long long *result)
{
    char key[64], n[16];
    const char *argv[3] = {key, a1, n};
    redisContext *rc = store_redis(st);
    int err = 0;

    if (!rc)
        return -ENOTCONN;
    snprintf(key, sizeof(key), "login:code:%s", phone);
    snprintf(n, sizeof(n), "%u", a2);
    redisReply *r = redis_script_run(rc, script, 1, 3, argv, NULL, &err);
    if (!r) {
        log_warn("redis command failed", "op=login_code err=\"%s\"",
                 rc->errstr);
        return -ENOTCONN;
    }
    err = 0;
    if (r->type != REDIS_REPLY_INTEGER) {
        log_error("redis reply unexpected", "op=login_code type=%d", r->type);
        err = -EIO;
    } else {
        *result = r->integer;
    }
    freeReplyObject(r);
    return err;
}

int store_code_put(struct store *st, const char *phone, const char *code,
                   unsigned ttl_s)
{
    long long r;
    return code_eval(st, &code_put_script, phone, code, ttl_s, &r);
}

int store_code_check(struct store *st, const char *phone, const char *code,
                     unsigned max_tries, enum store_code *outcome)
{
    long long r;
    int err = code_eval(st, &code_check_script, phone, code, max_tries, &r);

    if (err)
        return err;
    *outcome = r == 0   ? STORE_CODE_OK
               : r == 1 ? STORE_CODE_WRONG
                        : STORE_CODE_MISSING;
    return 0;
}
