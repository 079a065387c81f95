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

/* ---- phones stored before E.164 ---- */

struct legacy_args {
    int64_t after, max;
    struct store_legacy_user *out, row;
    unsigned long len;
    size_t *n;
};

static void legacy_row(void *ctx, size_t i)
{
    struct legacy_args *a = ctx;

    a->row.phone[a->len < sizeof(a->row.phone) ? a->len : 0] = '\0';
    a->out[i] = a->row;
}

static int legacy_once(struct store *st, void *arg)
{
    struct legacy_args *a = arg;
    MYSQL_BIND p[2] = {0}, r[2] = {0};

    bind_i64(&p[0], &a->after);
    bind_i64(&p[1], &a->max);
    bind_i64(&r[0], &a->row.id);
    bind_str_out(&r[1], a->row.phone, sizeof(a->row.phone), &a->len);
    return store_stmt_rows(st, STMT_USERS_LEGACY, p, r, (size_t)a->max,
                           legacy_row, a, a->n);
}

int store_users_legacy(struct store *st, int64_t after_id,
                       struct store_legacy_user *out, size_t max, size_t *n)
{
    struct legacy_args a = {
        .after = after_id, .max = (int64_t)max, .out = out, .n = n};

    *n = 0;
    return store_retry(st, legacy_once, &a);
}

static int legacy_any_once(struct store *st, void *arg)
{
    MYSQL_BIND r[1] = {0};
    int64_t one = 0;
    size_t n = 0;
    int err;

    bind_i64(&r[0], &one);
    err =
        store_stmt_rows(st, STMT_USERS_LEGACY_ANY, NULL, r, 1, NULL, NULL, &n);
    *(int *)arg = n ? 1 : 0;
    return err;
}

int store_users_legacy_any(struct store *st)
{
    int any = 0;
    int err = store_retry(st, legacy_any_once, &any);

    return err ? err : any;
}

struct move_args {
    int64_t id;
    const char *e164;
    enum store_phone_move *outcome;
    int64_t *kept, *merged;
};

/* UPDATE statement id with (a, b): a string or an id first, an id second. */
static int update2(struct store *st, enum stmt_id id, const char *s, int64_t a,
                   int64_t b)
{
    MYSQL_BIND p[2] = {0};
    unsigned long len;
    MYSQL_STMT *q;

    if (s)
        bind_str_in(&p[0], s, &len);
    else
        bind_i64(&p[0], &a);
    bind_i64(&p[1], &b);
    return store_stmt_exec(st, id, p, NULL, &q);
}

static int move_once(struct store *st, void *arg)
{
    struct move_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[1] = {0}, g[2] = {0};
    int64_t other = 0, role = 1, loser;
    unsigned long len;
    MYSQL_STMT *q;
    size_t n = 0;
    int err;

    if ((err = store_query(st, "START TRANSACTION")))
        return err;
    bind_str_in(&p[0], a->e164, &len);
    bind_i64(&r[0], &other);
    err = store_stmt_rows(st, STMT_USER_BY_PHONE_LOCK, p, r, 1, NULL, NULL, &n);
    if (err)
        return store_tx_rollback(st, err);
    if (n == 0 || other == a->id) {
        *a->outcome = STORE_PHONE_MOVED;
        *a->kept = a->id;
        *a->merged = 0;
        err = update2(st, STMT_USER_PHONE_SET, a->e164, 0, a->id);
    } else {
        *a->outcome = STORE_PHONE_MERGED;
        *a->kept = other < a->id ? other : a->id;
        loser = other < a->id ? a->id : other;
        *a->merged = loser;
        /* The phone is unique: the younger row lets go of it first. */
        err = update2(st, STMT_USER_MERGE, NULL, *a->kept, loser);
        if (!err && *a->kept == a->id)
            err = update2(st, STMT_USER_PHONE_SET, a->e164, 0, a->id);
        if (!err) {
            /* The merged row's tokens are logged out. */
            bind_i64(&g[0], &role);
            bind_i64(&g[1], &loser);
            err = store_stmt_exec(st, STMT_ACCOUNT_LOGOUT_ALL, g, NULL, &q);
        }
    }
    if (err)
        return store_tx_rollback(st, err);
    return store_query(st, "COMMIT");
}

int store_user_phone_move(struct store *st, int64_t id, const char *e164,
                          enum store_phone_move *outcome, int64_t *kept,
                          int64_t *merged)
{
    struct move_args a = {id, e164, outcome, kept, merged};
    return store_retry(st, move_once, &a);
}

/* KEYS: codes, sent, the address's sent, the request. ARGV: code, ttl
 * (ms), interval (ms), per hour (the address's), per hour (the phone's).
 * {1, 0} stored; {0, ms} refused until then. */
static struct redis_script code_put_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "local ttl, gap, max, pmax = tonumber(ARGV[2]), tonumber(ARGV[3]), "
    "                            tonumber(ARGV[4]), tonumber(ARGV[5]) "
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
    "redis.call('zremrangebyscore', KEYS[2], '-inf', now - 3600000) "
    "redis.call('zremrangebyscore', KEYS[3], '-inf', now - 3600000) "
    "local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores') "
    "if last[2] and now - tonumber(last[2]) < gap then "
    "  return {0, gap - (now - tonumber(last[2]))} "
    "end "
    "for i, m in ipairs({max, pmax}) do "
    "  local k = i == 1 and KEYS[3] or KEYS[2] "
    "  local n = redis.call('zcard', k) "
    "  if n >= m then "
    "    local o = redis.call('zrange', k, n - m, n - m, 'withscores') "
    "    return {0, tonumber(o[2]) + 3600000 - now} "
    "  end "
    "end "
    "local e = ARGV[1] .. ':' .. now .. ':' .. t[2] "
    "redis.call('zadd', KEYS[1], now + ttl, ARGV[1]) "
    "redis.call('zadd', KEYS[2], now, e) "
    "redis.call('zadd', KEYS[3], now, e) "
    "redis.call('hset', KEYS[4], 'code', ARGV[1], 'tries', 0) "
    "redis.call('pexpire', KEYS[1], ttl) "
    "redis.call('pexpire', KEYS[4], ttl) "
    "redis.call('pexpire', KEYS[2], 3600000) "
    "redis.call('pexpire', KEYS[3], 3600000) "
    "return {1, 0}");

/* KEYS: codes, fails, the address's fails. ARGV: code, address tries,
 * phone tries, longest wait (ms). {0} a match; {1} wrong; {2, ms}
 * waiting. A wait doubles with each wrong try from the limit on. */
static struct redis_script code_check_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
    "local u = math.max(tonumber(redis.call('hget', KEYS[2], 'until') or 0), "
    "                   tonumber(redis.call('hget', KEYS[3], 'until') or 0)) "
    "if u > now then return {2, u - now} end "
    "if redis.call('zscore', KEYS[1], ARGV[1]) then "
    "  redis.call('del', KEYS[1], KEYS[2], KEYS[3]) "
    "  return {0, 0} "
    "end "
    "local cap = tonumber(ARGV[4]) "
    "local limits = {0, tonumber(ARGV[3]), tonumber(ARGV[2])} "
    "for i = 2, 3 do "
    "  local n = redis.call('hincrby', KEYS[i], 'n', 1) "
    "  if n >= limits[i] then "
    "    local w = math.min(cap, 1000 * 2 ^ math.min(n - limits[i], 30)) "
    "    redis.call('hset', KEYS[i], 'until', now + w) "
    "  end "
    "  redis.call('pexpire', KEYS[i], 86400000) "
    "end "
    "return {1, 0}");

/* KEYS: codes, fails, the address's fails, the request. ARGV: code,
 * tries. The request's code only, and no wait: {0, 0} a match (every
 * code and count of the phone gone), {1, 0} wrong (the request void
 * after its tries), {3, 0} no such request (used up or expired). */
static struct redis_script code_check_request_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
    "local want = redis.call('hget', KEYS[4], 'code') "
    "if not want then return {3, 0} end "
    "if want == ARGV[1] and redis.call('zscore', KEYS[1], want) then "
    "  redis.call('del', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) "
    "  return {0, 0} "
    "end "
    "if redis.call('hincrby', KEYS[4], 'tries', 1) >= tonumber(ARGV[2]) then "
    "  redis.call('del', KEYS[4]) "
    "end "
    "return {1, 0}");

/* KEYS: codes, sent, the address's sent, the request. ARGV: code. The
 * code, its entries in the send logs (at most an hour's worth, each
 * "code:time:us") and its request removed: {1, 0}. */
static struct redis_script code_revoke_script = REDIS_SCRIPT(
    "redis.call('zrem', KEYS[1], ARGV[1]) "
    "local p = ARGV[1] .. ':' "
    "for i = 2, 3 do "
    "  for _, m in ipairs(redis.call('zrange', KEYS[i], 0, -1)) do "
    "    if string.sub(m, 1, #p) == p then redis.call('zrem', KEYS[i], m) end "
    "  end "
    "end "
    "redis.call('del', KEYS[4]) "
    "return {1, 0}");

void store_code_keys(const char *phone, const char *addr, char *codes,
                     char *second, char *by_addr)
{
    redis_key(codes, STORE_KEY_MAX, "login:{p:%s}:codes", phone);
    redis_key(second, STORE_KEY_MAX, "login:{p:%s}:%s", phone,
              addr ? "fails" : "sent");
    redis_key(by_addr, STORE_KEY_MAX, "login:{p:%s}:a:%s", phone,
              addr ? addr : "");
}

void store_code_request_keys(const char *phone, const char *addr,
                             const char *id, char *sent_by_addr, char *req)
{
    redis_key(sent_by_addr, STORE_KEY_MAX, "login:{p:%s}:s:%s", phone, addr);
    redis_key(req, STORE_KEY_MAX, "login:{p:%s}:r:%s", phone, id);
}

/* Run a code script on keys (nkeys of them); {a, b} into *a, *b. */
static int code_eval(struct store *st, struct redis_script *script,
                     const char *const *keys, int nkeys, const char **args,
                     int nargs, long long *a, long long *b)
{
    const char *argv[12];
    int argc = 0, err = 0;

    for (int i = 0; i < nkeys; i++)
        argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[argc++] = args[i];
    redisReply *r =
        store_redis_script(st, script, nkeys, argc, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        log_error("redis reply unexpected", "op=login_code type=%d err=\"%s\"",
                  r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
        err = -EIO;
    } else {
        *a = r->element[0]->integer;
        *b = r->element[1]->integer;
    }
    freeReplyObject(r);
    return err;
}

/* The four keys of a code's put and revoke: codes, sent, the address's
 * sent, the request. */
struct code_put_keys {
    char k[4][STORE_KEY_MAX];
    const char *p[4];
};

static void put_keys(struct code_put_keys *k, const char *phone,
                     const char *addr, const char *request)
{
    char unused[STORE_KEY_MAX];

    store_code_keys(phone, NULL, k->k[0], k->k[1], unused);
    store_code_request_keys(phone, addr, request, k->k[2], k->k[3]);
    for (int i = 0; i < 4; i++)
        k->p[i] = k->k[i];
}

int store_code_put(struct store *st, const char *phone, const char *code,
                   const char *addr, const char *request,
                   const struct store_code_limits *l, int64_t *retry_ms)
{
    char ttl[16], gap[16], max[16], pmax[16];
    const char *args[5] = {code, ttl, gap, max, pmax};
    struct code_put_keys k;
    long long stored, wait;
    int err;

    put_keys(&k, phone, addr, request);
    snprintf(ttl, sizeof(ttl), "%u", l->ttl_s * 1000u);
    snprintf(gap, sizeof(gap), "%u", l->interval_s * 1000u);
    snprintf(max, sizeof(max), "%u", l->per_hour);
    snprintf(pmax, sizeof(pmax), "%u", l->phone_per_hour);
    err = code_eval(st, &code_put_script, k.p, 4, args, 5, &stored, &wait);
    if (err)
        return err;
    *retry_ms = stored ? 0 : (wait > 0 ? wait : 1);
    return 0;
}

int store_code_revoke(struct store *st, const char *phone, const char *code,
                      const char *addr, const char *request)
{
    const char *args[1] = {code};
    struct code_put_keys k;
    long long a, b;

    put_keys(&k, phone, addr, request);
    return code_eval(st, &code_revoke_script, k.p, 4, args, 1, &a, &b);
}

int store_code_check(struct store *st, const char *phone, const char *code,
                     const char *addr, const char *request,
                     const struct store_code_limits *l,
                     enum store_code *outcome, int64_t *retry_ms)
{
    char k[4][STORE_KEY_MAX], unused[STORE_KEY_MAX];
    const char *keys[4] = {k[0], k[1], k[2], k[3]};
    char at[16], pt[16], cap[24], tries[16];
    const char *args[4] = {code, at, pt, cap};
    long long r, wait;
    int err;

    store_code_keys(phone, addr, k[0], k[1], k[2]);
    if (request) {
        store_code_request_keys(phone, addr, request, unused, k[3]);
        snprintf(tries, sizeof(tries), "%u", l->request_tries);
        args[1] = tries;
        err = code_eval(st, &code_check_request_script, keys, 4, args, 2, &r,
                        &wait);
    } else {
        snprintf(at, sizeof(at), "%u", l->addr_tries);
        snprintf(pt, sizeof(pt), "%u", l->phone_tries);
        snprintf(cap, sizeof(cap), "%llu",
                 (unsigned long long)l->wait_max_s * 1000);
        err = code_eval(st, &code_check_script, keys, 3, args, 4, &r, &wait);
    }
    if (err)
        return err;
    *retry_ms = 0;
    *outcome = r == 0   ? STORE_CODE_OK
               : r == 1 ? STORE_CODE_WRONG
               : r == 3 ? STORE_CODE_GONE
                        : STORE_CODE_LOCKED;
    if (*outcome == STORE_CODE_LOCKED)
        *retry_ms = wait > 0 ? wait : 1;
    return 0;
}

/* KEYS: the budget. ARGV: per minute, take (1, -1, 0). {ok, retry ms,
 * recent}. */
static struct redis_script sms_budget_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "local m = math.floor(now / 60000) "
    "local cur = tonumber(redis.call('hget', KEYS[1], m) or 0) "
    "local prev = tonumber(redis.call('hget', KEYS[1], m - 1) or 0) "
    "local recent = math.floor(prev * (1 - (now % 60000) / 60000) + cur) "
    "local take = tonumber(ARGV[2]) "
    "if take > 0 then "
    "  if recent >= tonumber(ARGV[1]) then "
    "    return {0, 60000 - now % 60000, recent} "
    "  end "
    "  if cur == 0 then "
    "    for _, f in ipairs(redis.call('hkeys', KEYS[1])) do "
    "      if tonumber(f) < m - 1 then redis.call('hdel', KEYS[1], f) end "
    "    end "
    "  end "
    "  redis.call('hincrby', KEYS[1], m, 1) "
    "  redis.call('pexpire', KEYS[1], 180000) "
    "  return {1, 0, recent + 1} "
    "elseif take < 0 and cur > 0 then "
    "  redis.call('hincrby', KEYS[1], m, -1) "
    "  return {1, 0, recent - 1} "
    "end "
    "return {1, 0, recent}");

int store_sms_budget(struct store *st, const char *cc, unsigned per_min,
                     int take, bool *ok, int64_t *retry_ms, unsigned *recent)
{
    char key[STORE_KEY_MAX], max[16], t[8];
    const char *argv[3] = {key, max, t};
    redisReply *r;
    int err = 0;

    redis_key(key, sizeof(key), "sms:budget:%s", cc);
    snprintf(max, sizeof(max), "%u", per_min);
    snprintf(t, sizeof(t), "%d", take > 0 ? 1 : take < 0 ? -1 : 0);
    r = store_redis_script(st, &sms_budget_script, 1, 3, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_INTEGER) {
        log_error("redis reply unexpected", "op=sms_budget type=%d err=\"%s\"",
                  r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
        err = -EIO;
    } else {
        *ok = r->element[0]->integer == 1;
        *retry_ms = r->element[1]->integer;
        *recent =
            r->element[2]->integer > 0 ? (unsigned)r->element[2]->integer : 0;
    }
    freeReplyObject(r);
    return err;
}
