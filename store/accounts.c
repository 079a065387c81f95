/*
 * accounts.c - what outlives a bearer token: each account's token
 * generation and a buyer's ban in MySQL, single tokens logged out in a
 * Redis denylist, and the messages that tell every instance (store.h).
 */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* The denylist: token ids (16 hex digits) scored by their expiry. */
/* The denylist of tokens (after the Redis prefix). */
#define DENIED_KEY "seckill:{auth}:denied"

struct account_args {
    int64_t role, id;
    uint32_t *gen;
    bool *banned;
};

static int account_get_once(struct store *st, void *arg)
{
    struct account_args *a = arg;
    MYSQL_BIND p[2] = {0}, r[2] = {0};
    int64_t gen = 0, banned = 0;
    size_t n = 0;
    int err;

    bind_i64(&p[0], &a->role);
    bind_i64(&p[1], &a->id);
    bind_i64(&r[0], &gen);
    bind_i64(&r[1], &banned);
    err = store_stmt_rows(st, STMT_ACCOUNT_GET, p, r, 1, NULL, NULL, &n);
    if (err)
        return err;
    *a->gen = n ? (uint32_t)gen : 0;
    *a->banned = n && banned;
    return 0;
}

int store_account_get(struct store *st, unsigned role, int64_t id,
                      uint32_t *gen, bool *banned)
{
    struct account_args a = {role, id, gen, banned};
    return store_retry(st, account_get_once, &a);
}

static int logout_all_once(struct store *st, void *arg)
{
    struct account_args *a = arg;
    MYSQL_BIND p[2] = {0};
    MYSQL_STMT *s;
    int err;

    bind_i64(&p[0], &a->role);
    bind_i64(&p[1], &a->id);
    err = store_stmt_exec(st, STMT_ACCOUNT_LOGOUT_ALL, p, NULL, &s);
    if (err)
        return err;
    /* LAST_INSERT_ID(token_gen + 1) on an existing row; 0 on a new one,
     * whose generation is 1. */
    uint64_t id = mysql_stmt_insert_id(s);
    *a->gen = id ? (uint32_t)id : 1;
    return 0;
}

int store_account_logout_all(struct store *st, unsigned role, int64_t id,
                             uint32_t *gen)
{
    struct account_args a = {role, id, gen, NULL};
    /* Not retried on a lost connection: the bump may have happened. A
     * second one is harmless, but the caller decides. */
    return logout_all_once(st, &a);
}

struct ban_args {
    int64_t user_id, admin_id, on;
    const struct store_audit *audit;
};

static int ban_once(struct store *st, void *arg)
{
    struct ban_args *a = arg;
    MYSQL_BIND p[4] = {0};
    MYSQL_STMT *s;
    int err;

    err = store_tx_begin_keyed(st, a->audit);
    if (err)
        return err;
    bind_i64(&p[0], &a->user_id);
    bind_i64(&p[1], &a->on);
    bind_i64(&p[2], &a->admin_id);
    bind_i64(&p[3], &a->on);
    err = store_stmt_exec(st, STMT_ACCOUNT_BAN, p, NULL, &s);
    if (!err)
        err = store_audit_add(st, a->audit);
    if (err)
        return store_tx_rollback(st, err);
    return store_tx_commit(st);
}

int store_account_ban(struct store *st, int64_t user_id, bool on,
                      const struct store_audit *audit)
{
    struct ban_args a = {user_id, audit->admin_id, on ? 1 : 0, audit};
    /* Retried only when nothing was written (store_retry()): a lost
     * COMMIT is -EINPROGRESS, so the record is never written twice. */
    return store_retry(st, ban_once, &a);
}

struct load_args {
    int64_t role, id, gen, banned;
    void (*row)(void *ctx, unsigned role, int64_t id, uint32_t gen,
                bool banned);
    void *ctx;
};

static void account_loaded(void *ctx, size_t i)
{
    struct load_args *a = ctx;

    (void)i;
    a->row(a->ctx, (unsigned)a->role, a->id, (uint32_t)a->gen, a->banned != 0);
}

static int load_once(struct store *st, void *arg)
{
    struct load_args *a = arg;
    MYSQL_BIND r[4] = {0};
    size_t n;

    bind_i64(&r[0], &a->role);
    bind_i64(&r[1], &a->id);
    bind_i64(&r[2], &a->gen);
    bind_i64(&r[3], &a->banned);
    return store_stmt_rows(st, STMT_ACCOUNTS_LOAD, NULL, r, SIZE_MAX,
                           account_loaded, a, &n);
}

int store_accounts_load(struct store *st,
                        void (*row)(void *ctx, unsigned role, int64_t id,
                                    uint32_t gen, bool banned),
                        void *ctx)
{
    struct load_args a = {.row = row, .ctx = ctx};
    return store_retry(st, load_once, &a);
}

/* ---- Redis: the denylist and the messages ---- */

/* KEYS[1] the denylist; ARGV: token id, its expiry (s), channel (empty:
 * publish nothing), message.
 * The expired entries go; the key lives as long as its last entry. */
static struct redis_script deny_script = REDIS_SCRIPT(
    "local now = tonumber(redis.call('time')[1]) "
    "redis.call('zadd', KEYS[1], ARGV[2], ARGV[1]) "
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
    "local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores') "
    "if last[2] then redis.call('expireat', KEYS[1], last[2] + 1) end "
    "if ARGV[3] ~= '' then redis.call('publish', ARGV[3], ARGV[4]) end "
    "return 1");

int store_token_deny(struct store *st, uint64_t jti, int64_t exp_s,
                     const char *channel, const char *msg)
{
    char id[20], exp[24], key[STORE_KEY_MAX];
    /* On a cluster the script's channel would be in another slot than
     * its key: it publishes nothing there, and the notice follows it
     * (store_publish(): sharded pub/sub). */
    bool cluster = store_redis_is_cluster(st->cfg);
    const char *argv[5] = {key, id, exp, cluster ? "" : channel, msg};
    redisReply *r;
    int err = 0;

    redis_key(key, sizeof(key), DENIED_KEY);
    snprintf(id, sizeof(id), "%016" PRIx64, jti);
    snprintf(exp, sizeof(exp), "%lld", (long long)exp_s);
    r = store_redis_script(st, &deny_script, 1, 5, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    err = r->type == REDIS_REPLY_ERROR ? -EIO : 0;
    if (err)
        log_error("redis command failed", "op=token_deny err=\"%s\"", r->str);
    freeReplyObject(r);
    /* Denied already; a notice lost here is healed by the sessions'
     * periodic reload (sale/sessions.c). */
    if (!err && cluster && store_publish(st, channel, msg))
        log_warn("token denial not published", NULL);
    return err;
}

int store_tokens_denied_load(struct store *st, int64_t now_s,
                             void (*row)(void *ctx, uint64_t jti,
                                         int64_t exp_s),
                             void *ctx)
{
    char key[STORE_KEY_MAX], min[24];
    const char *argv[5] = {"ZRANGEBYSCORE", key, min, "+inf", "WITHSCORES"};
    redisReply *r;
    int err = 0;

    redis_key(key, sizeof(key), DENIED_KEY);
    snprintf(min, sizeof(min), "(%lld", (long long)now_s);
    r = store_redis_command(st, key, 5, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
        log_error("redis reply unexpected", "op=tokens_denied type=%d",
                  r->type);
        err = -EIO;
    } else {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *k = r->element[i], *v = r->element[i + 1];
            char *end;
            uint64_t jti;

            if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
                continue;
            jti = strtoull(k->str, &end, 16);
            if (*end || !jti)
                continue;
            row(ctx, jti, strtoll(v->str, NULL, 10));
        }
    }
    freeReplyObject(r);
    return err;
}

int store_pow_spend(struct store *st, const char *challenge, int64_t expires_s)
{
    char key[STORE_KEY_MAX], at[24];
    const char *argv[6] = {"SET", key, "1", "NX", "PXAT", at};
    redisReply *r;
    int err;

    if (redis_key(key, sizeof(key), "pow:spent:%s", challenge) < 0)
        return -EINVAL;
    snprintf(at, sizeof(at), "%lld", (long long)expires_s * 1000 + 1000);
    r = store_redis_command(st, key, 6, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    err = r->type == REDIS_REPLY_NIL ? -EALREADY
          : r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING
              ? 0
              : -EIO;
    freeReplyObject(r);
    return err;
}

int store_publish(struct store *st, const char *channel, const char *msg)
{
    /* A cluster's sharded pub/sub: the message goes to the channel's
     * slot owner and its replicas only, where the subscribers listen,
     * not over the whole cluster bus. */
    const char *argv[3] = {
        store_redis_is_cluster(st->cfg) ? "SPUBLISH" : "PUBLISH", channel, msg};
    redisReply *r;
    int err;

    r = store_redis_command(st, channel, 3, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    err = r->type == REDIS_REPLY_ERROR ? -EIO : 0;
    if (err)
        log_warn("redis command failed", "op=publish err=\"%s\"", r->str);
    freeReplyObject(r);
    return err;
}
