/*
 * async.c - the asynchronous purchase mode (see async.h): the Redis
 * scripts of a sale, and one instance's writer thread, which also runs
 * the reconciliation when it holds the reconciliation lock.
 */
#include "async/async.h"
#include "async/compare.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/redis.h"
#include "common/util.h"

#define GROUP "writers"
#define KEY_MAX 64
#define BATCH_MAX ASYNC_PURCHASE_BATCH_MAX
/* The index of sales with orders on their way (see async.h). */
#define INDEX_KEY "seckill:async:work"
/* Keys and members a SCAN or SSCAN asks for at once, and sales looked up
 * in one pipelined round trip. */
#define SCAN_COUNT "1000"
#define LOOKUP_MAX 256
/* How often the writer re-reads the async vouchers, claims what dead
 * consumers left, and (with the lock) reconciles. */
#define REFRESH_MS 2000
/* How often it walks the keyspace for sales with orders on their way
 * that the index lacks (and once when it starts). */
#define SWEEP_MS 60000
#define CLAIM_EVERY_MS 1000
/* The reconciliation's lock lasts this long unless released. */
#define RECONCILE_LEASE_MS 8000
/* A sale frozen for a rebuild stays frozen this long unless its
 * rebuilder renews the freeze (each step does), so that the freeze of a
 * rebuilder that died lifts by itself. */
#define FREEZE_MS 15000
/* A rebuild waiting for orders in flight looks again this often, and
 * says so in the log this often. */
#define REBUILD_STEP_MS 100
#define REBUILD_SAY_MS 5000
/* The orders with only a pending record left that one step queues again. */
#define REQUEUE_MAX 1000
/* The same disagreement seen this many rounds in a row is repaired. */
#define MISMATCH_ROUNDS 2
/* An idle writer looks again this often; a sale on this instance wakes
 * it at once (async_voucher_hint()). */
#define IDLE_SLEEP_MS 200
/* Units owed to Redis (async_units_return()): looked for this often, when
 * recorded at least this long ago, this many at a time. */
#define RETURNS_EVERY_MS 500
#define RETURNS_AGE_MS 500
#define RETURNS_SWEEP_MAX 256
/* A sale of another database is looked at again this often. */
#define OWNER_RECHECK_MS 10000

/* ---- keys and scripts ---- */

static void key(char *buf, int64_t voucher_id, const char *what)
{
    snprintf(buf, KEY_MAX, "{v:%lld}:%s", (long long)voucher_id, what);
}

/* KEYS info, stock, buyers, stream, pending, dead, frozen, holders;
 * ARGV begin, end, stock, stamp. 1 put in; 0 left alone: the sale is there with
 * this stamp already (a reconciliation made it from MySQL first, and it may be
 * selling). Any other sale of the id is a stale one (from an earlier database
 * on the same Redis): it is replaced. */
static struct redis_script preheat_script = REDIS_SCRIPT(
    "if redis.call('hget', KEYS[1], 'stamp') == ARGV[4] then return 0 end "
    "redis.call('del', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], "
    "KEYS[7], KEYS[8]) "
    "redis.call('hset', KEYS[1], 'begin', ARGV[1], 'end', ARGV[2], "
    "'initial', ARGV[3], 'stamp', ARGV[4]) "
    "redis.call('set', KEYS[2], ARGV[3]) "
    "return 1");

/* KEYS info, stock, buyers, stream, pending, frozen, holders; ARGV
 * backlog_max, then (order, user) pairs. {ms, code...}: a code per pair
 * (1 sold, 2 sold out, 3 duplicate), or {-n} for the whole batch. */
static struct redis_script purchase_script = REDIS_SCRIPT(
    "if redis.call('exists', KEYS[6]) == 1 then return {-1} end "
    "local info = redis.call('hmget', KEYS[1], 'begin', 'end') "
    "if not info[1] then return {-1} end "
    "local t = redis.call('time') "
    "local now = tonumber(t[1]) "
    "if now < tonumber(info[1]) then return {-3} end "
    "if now >= tonumber(info[2]) then return {-4} end "
    "if redis.call('xlen', KEYS[4]) >= tonumber(ARGV[1]) then "
    "return {-5} end "
    "local ms = now * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "local out = {ms} "
    "local stock = tonumber(redis.call('get', KEYS[2]) or '0') "
    "local sold = 0 "
    "for i = 2, #ARGV, 2 do "
    "  local o, u = ARGV[i], ARGV[i + 1] "
    "  if redis.call('sismember', KEYS[3], u) == 1 then "
    "    out[#out + 1] = 3 "
    "  elseif stock <= 0 then "
    "    out[#out + 1] = 2 "
    "  else "
    "    stock = stock - 1 "
    "    sold = sold + 1 "
    "    redis.call('sadd', KEYS[3], u) "
    "    redis.call('xadd', KEYS[4], '*', 'o', o, 'u', u, 't', ms) "
    "    redis.call('hset', KEYS[5], o, u .. ':' .. ms) "
    "    redis.call('hset', KEYS[7], u, o) "
    "    out[#out + 1] = 1 "
    "  end "
    "end "
    "if sold > 0 then redis.call('decrby', KEYS[2], sold) end "
    "return out");

/* KEYS info, stock, buyers, holders, frozen; ARGV order, user. 1: the
 * unit is back; 2: it was already (the user holds no order, or another
 * one); 0: no async sale in Redis; -1: frozen for a rebuild, try later
 * (the rebuild's snapshot of MySQL may predate the return). */
static struct redis_script return_script = REDIS_SCRIPT(
    "if redis.call('exists', KEYS[1]) == 0 then return 0 end "
    "if redis.call('exists', KEYS[5]) == 1 then return -1 end "
    "if redis.call('hget', KEYS[4], ARGV[2]) ~= ARGV[1] then return 2 end "
    "redis.call('hdel', KEYS[4], ARGV[2]) "
    "if redis.call('srem', KEYS[3], ARGV[2]) == 1 then "
    "redis.call('incr', KEYS[2]) end "
    "return 1");

/* A reply of an integer, or -EIO (logged) for anything else. */
static int reply_int(redisContext *rc, redisReply *r, int err, long long *v,
                     const char *what)
{
    int ret = 0;

    if (!r)
        return err ? err : redis_errno(rc);
    if (r->type == REDIS_REPLY_INTEGER) {
        *v = r->integer;
    } else {
        log_warn("async redis reply unexpected", "op=%s type=%d err=\"%s\"",
                 what, r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
        ret = -EIO;
    }
    freeReplyObject(r);
    return ret;
}

/* ---- the index of sales with work ---- */

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Sort ids[0..n) and drop repeats; returns how many are left. */
static size_t ids_unique(int64_t *ids, size_t n)
{
    size_t k = 0;

    if (n == 0)
        return 0;
    qsort(ids, n, sizeof(*ids), cmp_id);
    for (size_t i = 1; i < n; i++)
        if (ids[i] != ids[k])
            ids[++k] = ids[i];
    return k + 1;
}

static void ids_push(int64_t **ids, size_t *n, size_t *cap, int64_t id)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *ids = xrealloc(*ids, *cap * sizeof(**ids));
    }
    (*ids)[(*n)++] = id;
}

/*
 * Walk a cursor to its end: SSCAN of the set called set, or (set NULL)
 * SCAN of the keyspace for the keys that match. Each string of the
 * replies goes through id_of (NULL: the string is an id); the ids go
 * into *ids, a new array of *n, sorted, without repeats (free(3) it).
 * 0, or -errno with *ids NULL.
 */
static int scan_ids(redisContext *rc, const char *set, const char *match,
                    int (*id_of)(const char *s, size_t len, int64_t *id),
                    int64_t **ids, size_t *n)
{
    char cursor[32] = "0";
    size_t cap = 0;
    int err = 0;

    *ids = NULL;
    *n = 0;
    do {
        const char *argv[8] = {set ? "SSCAN" : "SCAN"};
        int argc = 1;

        if (set)
            argv[argc++] = set;
        argv[argc++] = cursor;
        if (match) {
            argv[argc++] = "MATCH";
            argv[argc++] = match;
        }
        argv[argc++] = "COUNT";
        argv[argc++] = SCAN_COUNT;
        redisReply *r = redisCommandArgv(rc, argc, argv, NULL);

        if (!r) {
            err = redis_errno(rc);
            break;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            log_warn("async redis reply unexpected",
                     "op=scan type=%d err=\"%s\"", r->type,
                     r->type == REDIS_REPLY_ERROR ? r->str : "");
            freeReplyObject(r);
            err = -EIO;
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *e = r->element[1]->element[i];
            int64_t id;

            if (e->type == REDIS_REPLY_STRING &&
                (id_of ? id_of : util_parse_id)(e->str, e->len, &id) == 0)
                ids_push(ids, n, &cap, id);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    if (err) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        return err;
    }
    *n = ids_unique(*ids, *n);
    return 0;
}

/* The sales in the index: see scan_ids(). */
static int index_read(redisContext *rc, int64_t **ids, size_t *n)
{
    return scan_ids(rc, INDEX_KEY, NULL, NULL, ids, n);
}

int async_sale_preheat(redisContext *rc, int64_t voucher_id, int64_t begin_s,
                       int64_t end_s, int64_t stock, int64_t stamp)
{
    static const char *const names[8] = {"info",   "stock",   "buyers",
                                         "stream", "pending", "dead",
                                         "frozen", "holders"};
    char k[8][KEY_MAX], b[24], e[24], n[24], st[24];
    const char *argv[12];
    long long v = 0;
    int err;

    for (int i = 0; i < 8; i++) {
        key(k[i], voucher_id, names[i]);
        argv[i] = k[i];
    }
    snprintf(b, sizeof(b), "%lld", (long long)begin_s);
    snprintf(e, sizeof(e), "%lld", (long long)end_s);
    snprintf(n, sizeof(n), "%lld", (long long)stock);
    snprintf(st, sizeof(st), "%lld", (long long)stamp);
    argv[8] = b;
    argv[9] = e;
    argv[10] = n;
    argv[11] = st;
    redisReply *r =
        redis_script_run(rc, &preheat_script, 8, 12, argv, NULL, &err);
    err = reply_int(rc, r, err, &v, "preheat");
    return err ? err : v == 0 ? -EEXIST : 0;
}

int async_sale_window(redisContext *rc, int64_t voucher_id, int64_t *begin_s,
                      int64_t *end_s)
{
    char k[KEY_MAX];
    redisReply *r;
    int ret = -ENOENT;

    key(k, voucher_id, "info");
    r = redisCommand(rc, "HMGET %s begin end", k);
    if (!r)
        return redis_errno(rc);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        *begin_s = strtoll(r->element[0]->str, NULL, 10);
        *end_s = strtoll(r->element[1]->str, NULL, 10);
        ret = 0;
    } else if (r->type == REDIS_REPLY_ERROR) {
        ret = -EIO;
    }
    freeReplyObject(r);
    return ret;
}

/* The replicas confirmed acked of the replicas wanted (-1: WAIT failed):
 * when short, the batch's sales are unconfirmed. Logged once a second. */
static void unconfirmed_mark(int64_t voucher_id, unsigned replicas,
                             long long acked, enum async_outcome *out, size_t n)
{
    static _Atomic int64_t logged_ms;
    size_t sold = 0;
    int64_t now;

    if (acked >= (long long)replicas)
        return;
    for (size_t i = 0; i < n; i++)
        if (out[i] == ASYNC_OK) {
            out[i] = ASYNC_UNCONFIRMED;
            sold++;
        }
    now = util_mono_ms();
    if (sold && now - atomic_load(&logged_ms) >= 1000) {
        atomic_store(&logged_ms, now);
        log_warn("async batch not confirmed by redis replicas: outcome "
                 "unknown",
                 "voucher=%lld sold=%zu replicas=%u acked=%lld",
                 (long long)voucher_id, sold, replicas, acked);
    }
}

int async_purchase(redisContext *rc, int64_t voucher_id, unsigned backlog_max,
                   const int64_t *order_ids, const int64_t *users, size_t n,
                   const struct async_confirm *confirm, enum async_outcome *out)
{
    static const char *const names[7] = {
        "info", "stock", "buyers", "stream", "pending", "frozen", "holders"};
    char keys[7][KEY_MAX], backlog[16], (*nums)[24];
    unsigned replicas = confirm ? confirm->replicas : 0;
    long long acked = 0;
    char *then[2];
    redisReply *r, *then_r[2];
    size_t nthen;
    const char **argv;
    int err = 0;

    if (n == 0)
        return 0;
    if (n > BATCH_MAX)
        return -EINVAL;
    nums = xcalloc(2 * n, sizeof(*nums));
    argv = xcalloc(8 + 2 * n, sizeof(*argv));
    for (int i = 0; i < 7; i++) {
        key(keys[i], voucher_id, names[i]);
        argv[i] = keys[i];
    }
    snprintf(backlog, sizeof(backlog), "%u", backlog_max);
    argv[7] = backlog;
    for (size_t i = 0; i < n; i++) {
        snprintf(nums[2 * i], sizeof(nums[0]), "%lld", (long long)order_ids[i]);
        snprintf(nums[2 * i + 1], sizeof(nums[0]), "%lld", (long long)users[i]);
        argv[8 + 2 * i] = nums[2 * i];
        argv[9 + 2 * i] = nums[2 * i + 1];
    }
    /* Behind the script, in the same round trip: the sale joins the
     * index of sales with work (see index_prune(): a writer that takes
     * it out and then finds the stream empty cannot miss what the script
     * added; if this command is lost with the connection, the writers'
     * sweeps put the sale back), and the replicas' WAIT (when they are
     * quick, confirming costs no extra wait). */
    nthen = 0;
    if (redisFormatCommand(&then[nthen++], "SADD " INDEX_KEY " %lld",
                           (long long)voucher_id) < 0 ||
        (replicas && redisFormatCommand(&then[nthen++], "WAIT %u %u", replicas,
                                        confirm->wait_ms) < 0))
        abort(); /* only out of memory */
    r = redis_script_run_then(rc, &purchase_script, 7, (int)(8 + 2 * n), argv,
                              NULL, (const char *const *)then, nthen, then_r,
                              &err);
    if (r && (!then_r[0] || then_r[0]->type == REDIS_REPLY_ERROR))
        log_warn("async sale not added to the index of sales with work",
                 "voucher=%lld err=\"%s\"", (long long)voucher_id,
                 then_r[0] ? then_r[0]->str : rc->errstr);
    if (replicas) {
        const redisReply *w = then_r[1];

        acked = w && w->type == REDIS_REPLY_INTEGER ? w->integer : -1;
        if (w && w->type != REDIS_REPLY_INTEGER)
            log_warn("redis wait refused", "err=\"%s\"",
                     w->type == REDIS_REPLY_ERROR ? w->str
                                                  : "unexpected reply");
    }
    for (size_t i = 0; i < nthen; i++) {
        freeReplyObject(then_r[i]);
        redisFreeCommand(then[i]);
    }
    free(argv);
    free(nums);
    if (!r)
        return err ? err : -EIO;
    if (r->type == REDIS_REPLY_ERROR) {
        /* Refused before it ran (out of memory, a read-only replica after
         * a failover, another script busy): nothing was sold. */
        log_warn("async purchase refused by redis", "voucher=%lld err=\"%s\"",
                 (long long)voucher_id, r->str);
        freeReplyObject(r);
        return -EAGAIN;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        (r->element[0]->integer > 0 && r->elements != n + 1)) {
        log_warn("async purchase reply unexpected", "voucher=%lld type=%d",
                 (long long)voucher_id, r->type);
        freeReplyObject(r);
        return -EIO;
    }
    if (r->element[0]->integer < 0) {
        enum async_outcome all =
            r->element[0]->integer == -3   ? ASYNC_NOT_STARTED
            : r->element[0]->integer == -4 ? ASYNC_ENDED
            : r->element[0]->integer == -5 ? ASYNC_BACKLOG
                                           : ASYNC_NOT_READY;
        for (size_t i = 0; i < n; i++)
            out[i] = all;
    } else {
        for (size_t i = 0; i < n; i++) {
            long long c = r->element[i + 1]->type == REDIS_REPLY_INTEGER
                              ? r->element[i + 1]->integer
                              : 0;
            out[i] = c == 1   ? ASYNC_OK
                     : c == 2 ? ASYNC_SOLD_OUT
                     : c == 3 ? ASYNC_DUPLICATE
                              : ASYNC_NOT_READY;
        }
        unconfirmed_mark(voucher_id, replicas, acked, out, n);
    }
    freeReplyObject(r);
    return 0;
}

/* How many returns one pipelined round trip carries. */
#define RETURNS_MAX 64

/*
 * Run the return script for orders[0..n) (n <= RETURNS_MAX) of voucher_id
 * in one pipelined round trip; res[i] its answer (-2 when it failed).
 * 0 or -errno when the connection failed (the rest unknown: -2).
 */
static int returns_run(redisContext *rc, int64_t voucher_id,
                       const int64_t *orders, const int64_t *users, size_t n,
                       long long *res)
{
    static const char *const names[5] = {"info", "stock", "buyers", "holders",
                                         "frozen"};
    char k[5][KEY_MAX], o[24], u[24];
    const char *argv[7];
    bool noscript = false;
    int err = 0;

    for (int i = 0; i < 5; i++) {
        key(k[i], voucher_id, names[i]);
        argv[i] = k[i];
    }
    argv[5] = o;
    argv[6] = u;
    if (!atomic_load_explicit(&return_script.ready, memory_order_acquire) &&
        (err = redis_script_load(rc, &return_script)) && rc->err)
        return err;
    for (size_t i = 0; i < n; i++) {
        char *cmd;
        int len;

        res[i] = -2;
        if (FAILPOINT_FAILS("unit_return_fails"))
            continue;
        if (FAILPOINT_FAILS("unit_return_skip")) {
            res[i] = 2; /* a planted bug: taken as back, and never is */
            continue;
        }
        snprintf(o, sizeof(o), "%lld", (long long)orders[i]);
        snprintf(u, sizeof(u), "%lld", (long long)users[i]);
        len =
            redis_script_format(&return_script, false, 5, 7, argv, NULL, &cmd);
        redisAppendFormattedCommand(rc, cmd, (size_t)len);
        redisFreeCommand(cmd);
        res[i] = -3; /* sent: its answer comes in order */
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;

        if (res[i] != -3)
            continue;
        res[i] = -2;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            return redis_errno(rc);
        if (r->type == REDIS_REPLY_INTEGER)
            res[i] = r->integer;
        else if (redis_reply_is_noscript(r))
            noscript = true;
        else
            log_warn("async unit return refused by redis",
                     "voucher=%lld order=%lld err=\"%s\"",
                     (long long)voucher_id, (long long)orders[i],
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected");
        freeReplyObject(r);
    }
    /* A restarted server forgot the script: load it for the next try. */
    if (noscript)
        freeReplyObject(redisCommand(rc, "SCRIPT LOAD %s", return_script.src));
    return 0;
}

/* async_units_return(); sweeping: a record of a sale that has no state
 * in Redis is dropped too (its state, when rebuilt, is read from MySQL,
 * which has the unit back; a sale retired long ago has none). */
static int units_return(struct store *st, int64_t voucher_id,
                        const int64_t *orders, const int64_t *users, size_t n,
                        bool sweeping, size_t *returned)
{
    redisContext *rc = store_redis(st);
    long long res[RETURNS_MAX];
    int64_t done[RETURNS_MAX];
    size_t back = 0;
    int err = 0;

    if (returned)
        *returned = 0;
    if (!rc)
        return -ENOTCONN;
    for (size_t i = 0; i < n && !err; i += RETURNS_MAX) {
        size_t m = n - i < RETURNS_MAX ? n - i : RETURNS_MAX, k = 0;

        err = returns_run(rc, voucher_id, orders + i, users + i, m, res);
        for (size_t j = 0; j < m; j++) {
            /* Back now, or before: no longer owed. A voucher without a
             * sale in Redis is left to the sweep (a sync voucher owes
             * nothing: no statement for it here). */
            if (res[j] == 1 || res[j] == 2 || (sweeping && res[j] == 0))
                done[k++] = orders[i + j];
            back += res[j] == 1;
            if (res[j] == -1 || res[j] == -2)
                log_info("async unit return deferred",
                         "voucher=%lld order=%lld why=%s",
                         (long long)voucher_id, (long long)orders[i + j],
                         res[j] == -1 ? "frozen" : "redis failed");
        }
        if (k && store_unit_returns_done(st, done, k) != 0)
            log_warn("async unit returns not dropped: mysql failed",
                     "voucher=%lld n=%zu", (long long)voucher_id, k);
    }
    if (returned)
        *returned = back;
    return err;
}

int async_units_return(struct store *st, int64_t voucher_id,
                       const int64_t *orders, const int64_t *users, size_t n,
                       size_t *returned)
{
    return units_return(st, voucher_id, orders, users, n, false, returned);
}

/* The pending record "user:t" of an order, parsed: 0, or -ENOENT. */
static int pending_parse(const redisReply *r, int64_t *user_id,
                         int64_t *accepted_ms)
{
    const char *colon =
        r->type == REDIS_REPLY_STRING ? memchr(r->str, ':', r->len) : NULL;

    if (!colon || util_parse_id(r->str, (size_t)(colon - r->str), user_id))
        return -ENOENT;
    *accepted_ms = strtoll(colon + 1, NULL, 10);
    return 0;
}

/*
 * The orders of user_id waiting in the streams of vouchers[0..n) (n at
 * most LOOKUP_MAX), appended to out while *found < max: which order the
 * user holds in each sale, then which of those still wait for MySQL. Two
 * pipelined round trips at most. 0 or -errno.
 */
static int pending_of_user_in(redisContext *rc, const int64_t *vouchers,
                              size_t n, int64_t user_id,
                              struct async_pending *out, size_t max,
                              size_t *found)
{
    char k[KEY_MAX];
    int64_t held[LOOKUP_MAX] = {0};
    size_t asked = 0;

    for (size_t i = 0; i < n; i++) {
        key(k, vouchers[i], "holders");
        redisAppendCommand(rc, "HGET %s %lld", k, (long long)user_id);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            return redis_errno(rc);
        if (r->type != REDIS_REPLY_STRING ||
            util_parse_id(r->str, r->len, &held[i]) != 0)
            held[i] = 0;
        freeReplyObject(r);
    }
    for (size_t i = 0; i < n; i++)
        if (held[i]) {
            key(k, vouchers[i], "pending");
            redisAppendCommand(rc, "HGET %s %lld", k, (long long)held[i]);
            asked++;
        }
    for (size_t i = 0; i < n && asked; i++) {
        redisReply *r = NULL;
        int64_t u, t;

        if (!held[i])
            continue;
        asked--;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            return redis_errno(rc);
        if (pending_parse(r, &u, &t) == 0 && u == user_id && *found < max)
            out[(*found)++] = (struct async_pending){.order_id = held[i],
                                                     .voucher_id = vouchers[i],
                                                     .accepted_ms = t};
        freeReplyObject(r);
    }
    return 0;
}

int async_pending_of_user(redisContext *rc, int64_t user_id,
                          struct async_pending *out, size_t max, size_t *found)
{
    int64_t *ids;
    size_t n;
    int err = index_read(rc, &ids, &n);

    *found = 0;
    for (size_t i = 0; !err && i < n && *found < max; i += LOOKUP_MAX)
        err = pending_of_user_in(rc, ids + i,
                                 n - i < LOOKUP_MAX ? n - i : LOOKUP_MAX,
                                 user_id, out, max, found);
    free(ids);
    return err;
}

int async_pending_find(redisContext *rc, int64_t order_id, int64_t *voucher_id,
                       int64_t *user_id, int64_t *accepted_ms)
{
    char k[KEY_MAX];
    int64_t *ids;
    size_t n;
    int ret = index_read(rc, &ids, &n);

    if (ret)
        return ret;
    ret = -ENOENT;
    for (size_t i = 0; i < n && ret == -ENOENT; i += LOOKUP_MAX) {
        size_t m = n - i < LOOKUP_MAX ? n - i : LOOKUP_MAX;

        for (size_t j = 0; j < m; j++) {
            key(k, ids[i + j], "pending");
            redisAppendCommand(rc, "HGET %s %lld", k, (long long)order_id);
        }
        for (size_t j = 0; j < m; j++) {
            redisReply *r = NULL;

            if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
                free(ids);
                return redis_errno(rc);
            }
            if (ret == -ENOENT && pending_parse(r, user_id, accepted_ms) == 0) {
                *voucher_id = ids[i + j];
                ret = 0;
            } else if (r->type == REDIS_REPLY_ERROR && ret == -ENOENT) {
                ret = -EIO;
            }
            freeReplyObject(r);
        }
    }
    free(ids);
    return ret;
}

/* One value of CONFIG GET name, or "" (a buffer of len). */
static int config_get(redisContext *rc, const char *name, char *out, size_t len)
{
    redisReply *r = redisCommand(rc, "CONFIG GET %s", name);
    int err = 0;

    out[0] = '\0';
    if (!r)
        return redis_errno(rc);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out, len, "%s", r->element[1]->str);
    else
        err = -ENOTSUP; /* CONFIG renamed or refused */
    freeReplyObject(r);
    return err;
}

int async_redis_durable(redisContext *rc, char *why, size_t len)
{
    char aof[16], fsync[16];
    int err = config_get(rc, "appendonly", aof, sizeof(aof));

    if (!err)
        err = config_get(rc, "appendfsync", fsync, sizeof(fsync));
    if (err) {
        snprintf(why, len, "CONFIG GET is not allowed: cannot tell");
        return err;
    }
    if (strcmp(aof, "yes") == 0 && strcmp(fsync, "always") == 0) {
        snprintf(why, len, "appendonly yes, appendfsync always");
        return 0;
    }
    snprintf(why, len, "appendonly %s, appendfsync %s", aof, fsync);
    return -EPERM;
}

/* ---- the writer ---- */

struct sale {
    int64_t voucher_id;
    bool indexed; /* in the index of sales with work, at the last look */
    /* 1: a sale of this service's database; -1: of another one that
     * shares this Redis database (its orders are not ours to write), as
     * seen at owner_ms; 0: not known yet (sale_ours()). */
    int owner;
    int64_t owner_ms;
    bool group_ready;
    bool own_pending;  /* re-read what this consumer holds first */
    unsigned backlog;  /* XLEN, at the last look */
    int64_t oldest_ms; /* Redis time of the oldest order waiting */
    int mismatch;      /* consecutive disagreements seen */
    /* The latest of them. */
    struct async_disagreement last;
    /* Frozen by this writer and being rebuilt (rebuild_step()). */
    bool rebuilding;
    int64_t rebuild_since_ms, rebuild_next_ms, rebuild_said_ms;
};

struct async {
    struct async_config cfg;
    char consumer[64];
    pthread_t thread;
    pthread_mutex_t mu; /* guards sales, nsales, hints, nhints, stop */
    pthread_cond_t cond;
    bool stop;
    /* The writer's working set, by voucher id: the sales in the index of
     * sales with work, those MySQL lists (on sale, ahead, or ended within
     * the look-back), and those hinted since MySQL was last read. Only
     * the writer changes it (under mu: /metrics reads it). */
    struct sale *sales;
    size_t nsales;
    /* MySQL's list at its last read, and the hints taken since (the
     * writer's own). */
    int64_t *listed, *hinted;
    size_t nlisted, nhinted, hinted_cap;
    /* Vouchers this instance just created or sold: the writer takes them
     * in at its next round (guarded by mu). */
    int64_t *hints;
    size_t nhints, hints_cap;
    bool kicked; /* something was sold here since the writer last looked */
    struct lock *reconcile_lock;
    /* When its lease was last renewed (monotonic). */
    int64_t lock_renewed_ms;
    atomic_bool may_sell; /* see async_may_sell() */
    /* Online replicas the Redis primary reported at the last look. */
    atomic_uint replicas_seen;
    int64_t next_returns_ms; /* the next look at the owed unit returns */
    /* MySQL refused the last write: no write before retry_ms (monotonic),
     * backing off up to a second; logged once an outage. */
    int64_t retry_ms;
    int backoff_ms;
};

/* One order of the stream, as read. */
struct entry {
    char id[48];
    struct store_async_order o;
    bool valid;
};

/* Sleep ms, or less when stopped or (kickable) kicked. True: stop. */
static bool sleep_or_kick(struct async *a, int ms, bool kickable)
{
    int64_t until = util_mono_ms() + ms;
    struct timespec ts = {(time_t)(until / 1000),
                          (long)(until % 1000) * 1000000L};
    bool stop;

    pthread_mutex_lock(&a->mu);
    while (!a->stop && !(kickable && a->kicked) && util_mono_ms() < until)
        pthread_cond_timedwait(&a->cond, &a->mu, &ts);
    a->kicked = false;
    stop = a->stop;
    pthread_mutex_unlock(&a->mu);
    return stop;
}

static bool sleep_or_stop(struct async *a, int ms)
{
    return sleep_or_kick(a, ms, false);
}

/* Parse one stream entry [id, [field, value, ...]]. */
static void entry_parse(const redisReply *r, struct entry *e)
{
    memset(e, 0, sizeof(*e));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    snprintf(e->id, sizeof(e->id), "%s", r->element[0]->str);
    const redisReply *f = r->element[1];
    if (f->type != REDIS_REPLY_ARRAY)
        return;
    int have = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        int64_t x;

        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            util_parse_id(v->str, v->len, &x))
            continue;
        if (strcmp(k->str, "o") == 0)
            e->o.order_id = x, have |= 1;
        else if (strcmp(k->str, "u") == 0)
            e->o.user_id = x, have |= 2;
        else if (strcmp(k->str, "t") == 0)
            e->o.accepted_ms = x, have |= 4;
    }
    e->o.stream_pos = (int64_t)async_stream_pos(e->id);
    e->valid = have == 7;
}

/*
 * KEYS stream, pending, dead, info; ARGV (entry id, record) pairs, the
 * record "<order>" for an order written to MySQL, "<order>:<user>:<t>:<why>"
 * for one that never can be. Settles each entry at once: the first to
 * acknowledge it (a claimed order may be settled twice) drops its pending
 * record, counts it in info's "written" or moves it to the dead letters;
 * the entry leaves the stream either way. {written, the 1-based numbers
 * of the pairs dead-lettered now...}.
 */
static struct redis_script settle_script = REDIS_SCRIPT(
    "local out, written, ids, settled = {0}, 0, {}, {} "
    "for i = 1, #ARGV, 2 do "
    "  local id, rec = ARGV[i], ARGV[i + 1] "
    "  local o, u, t, why = string.match(rec, "
    "'^([^:]*):([^:]*):([^:]*):(.*)$') "
    "  ids[#ids + 1] = id "
    "  if redis.call('xack', KEYS[1], 'writers', id) == 1 then "
    "    if o then "
    "      redis.call('xadd', KEYS[3], '*', 'o', o, 'u', u, 't', t, 'id', id, "
    "                 'why', why) "
    "      out[#out + 1] = (i + 1) / 2 "
    "    else "
    "      o = rec "
    "      written = written + 1 "
    "    end "
    "    settled[#settled + 1] = o "
    "  end "
    "end "
    /* One command each for the whole batch: a stream's XDEL costs several
     * times more one entry at a time. */
    "if #settled > 0 then redis.call('hdel', KEYS[2], unpack(settled)) end "
    "if #ids > 0 then redis.call('xdel', KEYS[1], unpack(ids)) end "
    "if written > 0 and redis.call('exists', KEYS[4]) == 1 then "
    "  redis.call('hincrby', KEYS[4], 'written', written) "
    "end "
    "out[1] = written "
    "return out");

/*
 * After the write: acknowledge and delete every entry, drop the pending
 * records, count the written orders and move the refused ones (and
 * unreadable ones) to the dead letters, in one script: an entry is never
 * left acknowledged in the stream, nor its order counted twice, whatever
 * the connection does.
 */
static void settle(redisContext *rc, int64_t voucher_id, struct entry *e,
                   size_t n)
{
    const char **argv = xcalloc(4 + 2 * n, sizeof(*argv));
    char k[4][KEY_MAX], (*rec)[96] = xcalloc(n, sizeof(*rec));
    size_t *at = xcalloc(n, sizeof(*at)), m = 0;
    redisReply *r;
    int err;

    key(k[0], voucher_id, "stream");
    key(k[1], voucher_id, "pending");
    key(k[2], voucher_id, "dead");
    key(k[3], voucher_id, "info");
    for (int i = 0; i < 4; i++)
        argv[i] = k[i];
    for (size_t i = 0; i < n; i++) {
        if (!e[i].id[0])
            continue; /* not an entry: nothing to settle */
        if (!e[i].valid || e[i].o.result)
            snprintf(rec[i], sizeof(rec[i]), "%lld:%lld:%lld:%s",
                     (long long)e[i].o.order_id, (long long)e[i].o.user_id,
                     (long long)e[i].o.accepted_ms,
                     !e[i].valid                ? "unreadable"
                     : e[i].o.result == -EEXIST ? "refused by a unique key"
                                                : "no stock in mysql");
        else
            snprintf(rec[i], sizeof(rec[i]), "%lld",
                     (long long)e[i].o.order_id);
        at[m] = i;
        argv[4 + 2 * m] = e[i].id;
        argv[5 + 2 * m] = rec[i];
        m++;
    }
    if (m == 0)
        goto out;
    /* A broken connection leaves the entries pending: they are written
     * again (idempotently) and settled later. */
    r = redis_script_run(rc, &settle_script, 4, (int)(4 + 2 * m), argv, NULL,
                         &err);
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t j = 1; j < r->elements; j++) {
            long long x = r->element[j]->integer - 1;
            size_t i;

            if (r->element[j]->type != REDIS_REPLY_INTEGER || x < 0 ||
                (size_t)x >= m)
                continue;
            i = at[x];
            metrics_count(METRIC_ASYNC_DEAD, 1);
            log_error("async order can never be written, dead-lettered",
                      "voucher=%lld order=%lld user=%lld why=\"%s\"",
                      (long long)voucher_id, (long long)e[i].o.order_id,
                      (long long)e[i].o.user_id,
                      strrchr(rec[i], ':') ? strrchr(rec[i], ':') + 1 : "");
        }
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        log_warn("async settle refused by redis", "voucher=%lld err=\"%s\"",
                 (long long)voucher_id, r->str);
    }
    freeReplyObject(r);
out:
    free(at);
    free(rec);
    free(argv);
}

/* Write entries of a reply (an array of entries) for sale s. Returns how
 * many there were. */
static size_t write_entries(struct async *a, struct store *st, redisContext *rc,
                            struct sale *s, const redisReply *list)
{
    struct entry *e;
    struct store_async_order o[BATCH_MAX];
    size_t n = 0, k = 0;
    int err;

    if (!list || list->type != REDIS_REPLY_ARRAY || list->elements == 0)
        return 0;
    n = list->elements < BATCH_MAX ? list->elements : BATCH_MAX;
    e = xcalloc(n, sizeof(*e));
    for (size_t i = 0; i < n; i++) {
        entry_parse(list->element[i], &e[i]);
        if (e[i].valid)
            o[k++] = e[i].o;
    }
    err = store_async_write(st, s->voucher_id, o, k);
    if (err) {
        /* MySQL is away: keep them, read them again later. */
        s->own_pending = true;
        if (!a->backoff_ms)
            log_warn("async orders not written yet: mysql failed",
                     "voucher=%lld n=%zu err=%d", (long long)s->voucher_id, k,
                     err);
        a->backoff_ms = a->backoff_ms ? a->backoff_ms * 2 : 50;
        if (a->backoff_ms > 1000)
            a->backoff_ms = 1000;
        a->retry_ms = util_mono_ms() + a->backoff_ms;
        free(e);
        return 0;
    }
    if (a->backoff_ms) {
        log_info("async orders written again", "voucher=%lld",
                 (long long)s->voucher_id);
        a->backoff_ms = 0;
    }
    FAILPOINT("async_write_after_commit");
    for (size_t i = 0, j = 0; i < n; i++)
        if (e[i].valid)
            e[i].o.result = o[j++].result;
    settle(rc, s->voucher_id, e, n);
    free(e);
    return n;
}

/*
 * Whether s is a sale of this service's MySQL database: its voucher is an
 * async voucher there, and the creation stamp in Redis, when the sale's
 * state has one, is that voucher's. The index of sales with work is per
 * Redis database, and another deployment that shares it (a second
 * database, a test run beside another) must not have its orders written,
 * dead-lettered or its sale rebuilt here. Asked of MySQL once per sale
 * of ours; again while MySQL cannot say, and every OWNER_RECHECK_MS for
 * another's (a stale sale of an earlier database is replaced by the
 * voucher's own preheat, and is ours from then on).
 */
static bool sale_ours(struct store *st, redisContext *rc, struct sale *s)
{
    char k[KEY_MAX];
    int64_t mine, theirs = 0, now = util_mono_ms();
    redisReply *r;
    int err;

    if (s->owner > 0 || (s->owner < 0 && now - s->owner_ms < OWNER_RECHECK_MS))
        return s->owner > 0;
    err = store_async_stamp_read(st, s->voucher_id, &mine);
    if (err && err != -ENOENT)
        return false; /* MySQL away: asked again next time */
    key(k, s->voucher_id, "info");
    r = err ? NULL : redisCommand(rc, "HGET %s stamp", k);
    if (!err && !r)
        return false; /* Redis away: asked again next time */
    if (r && r->type == REDIS_REPLY_STRING)
        util_parse_id(r->str, r->len, &theirs);
    freeReplyObject(r);
    bool ours = !err && (theirs == 0 || theirs == mine);

    if (!ours && s->owner == 0)
        log_warn("async sale of another database left alone: its orders "
                 "are not written here",
                 "voucher=%lld why=\"%s\"", (long long)s->voucher_id,
                 err ? "no async voucher of this id in mysql"
                     : "another creation stamp");
    s->owner = ours ? 1 : -1;
    s->owner_ms = now;
    return s->owner > 0;
}

/* Make the consumer group of s's stream (from its start). */
static void group_ensure(redisContext *rc, struct sale *s)
{
    char k[KEY_MAX];
    redisReply *r;

    if (s->group_ready)
        return;
    key(k, s->voucher_id, "stream");
    r = redisCommand(rc, "XGROUP CREATE %s " GROUP " 0 MKSTREAM", k);
    if (r &&
        (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "BUSYGROUP", 9) == 0))
        s->group_ready = true;
    freeReplyObject(r);
}

/* Read and write a batch of s's new orders (or of those this consumer
 * still holds). Returns how many. */
static size_t pump(struct async *a, struct store *st, redisContext *rc,
                   struct sale *s)
{
    char k[KEY_MAX], count[16];
    const char *start = s->own_pending ? "0" : ">";
    redisReply *r;
    size_t n = 0;

    group_ensure(rc, s);
    if (!s->group_ready)
        return 0;
    key(k, s->voucher_id, "stream");
    snprintf(count, sizeof(count), "%u", a->cfg.batch);
    r = redisCommand(rc, "XREADGROUP GROUP " GROUP " %s COUNT %s STREAMS %s %s",
                     a->consumer, count, k, start);
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "NOGROUP"))
        s->group_ready = false; /* the stream is gone (Redis lost it) */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[0]->elements == 2) {
        const redisReply *list = r->element[0]->element[1];

        n = write_entries(a, st, rc, s, list);
        if (s->own_pending && list->type == REDIS_REPLY_ARRAY &&
            list->elements == 0)
            s->own_pending = false; /* held nothing more */
    } else if (s->own_pending && r->type != REDIS_REPLY_ERROR) {
        s->own_pending = false;
    }
    freeReplyObject(r);
    return n;
}

/* Take over the orders other consumers (dead ones) left unacknowledged
 * for claim_ms, and write them. */
static void claim(struct async *a, struct store *st, redisContext *rc,
                  struct sale *s)
{
    char k[KEY_MAX];
    redisReply *r;

    if (!s->group_ready)
        return;
    key(k, s->voucher_id, "stream");
    r = redisCommand(rc, "XAUTOCLAIM %s " GROUP " %s %u 0-0 COUNT %u", k,
                     a->consumer, a->cfg.claim_ms, a->cfg.batch);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        r->element[1]->type == REDIS_REPLY_ARRAY &&
        r->element[1]->elements > 0) {
        log_info("async orders claimed from a silent writer",
                 "voucher=%lld n=%zu", (long long)s->voucher_id,
                 r->element[1]->elements);
        write_entries(a, st, rc, s, r->element[1]);
    }
    freeReplyObject(r);
}

/*
 * The backlog (XLEN) of every sale in the index, in one pipelined round
 * trip: the writer reads only the streams that hold something. With all
 * (on a round that read MySQL) of every sale of the working set too, and
 * the Redis time of each backlog's oldest order, for /metrics; a sale
 * with orders waiting that is not in the index (orders written into its
 * stream some other way, or whose purchase lost its index command) is
 * put in.
 */
static void backlogs_look(struct async *a, redisContext *rc, bool all)
{
    char k[KEY_MAX];
    size_t *at = xcalloc(a->nsales + 1, sizeof(*at)), m = 0, added = 0;

    for (size_t i = 0; i < a->nsales; i++)
        if (all || a->sales[i].indexed) {
            key(k, a->sales[i].voucher_id, "stream");
            redisAppendCommand(rc, "XLEN %s", k);
            at[m++] = i;
        }
    for (size_t j = 0; j < m; j++) {
        redisReply *r = NULL;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            goto out;
        /* Under mu: /metrics reads it (async_backlog_top). */
        pthread_mutex_lock(&a->mu);
        if (r->type == REDIS_REPLY_INTEGER)
            a->sales[at[j]].backlog = (unsigned)r->integer;
        pthread_mutex_unlock(&a->mu);
        freeReplyObject(r);
    }
    if (!all)
        goto out;
    m = 0;
    for (size_t i = 0; i < a->nsales; i++) {
        struct sale *s = &a->sales[i];

        if (!s->backlog)
            continue;
        key(k, s->voucher_id, "stream");
        redisAppendCommand(rc, "XRANGE %s - + COUNT 1", k);
        if (!s->indexed)
            redisAppendCommand(rc, "SADD " INDEX_KEY " %lld",
                               (long long)s->voucher_id);
        at[m++] = i;
    }
    for (size_t j = 0; j < m; j++) {
        struct sale *s = &a->sales[at[j]];
        redisReply *r = NULL;
        int64_t oldest = 0;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            goto out;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
            r->element[0]->type == REDIS_REPLY_ARRAY &&
            r->element[0]->elements >= 1 &&
            r->element[0]->element[0]->type == REDIS_REPLY_STRING)
            oldest = strtoll(r->element[0]->element[0]->str, NULL, 10);
        freeReplyObject(r);
        pthread_mutex_lock(&a->mu);
        s->oldest_ms = oldest;
        pthread_mutex_unlock(&a->mu);
        if (s->indexed)
            continue;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            goto out;
        if (r->type == REDIS_REPLY_INTEGER) {
            added += r->integer == 1;
            s->indexed = true;
        }
        freeReplyObject(r);
    }
    if (added)
        log_warn("async sales with orders waiting were not in the index of "
                 "sales with work: added",
                 "n=%zu", added);
out:
    free(at);
}

/*
 * Take the sales whose stream was empty at this round's look out of the
 * index of sales with work: each is removed first, and then its stream
 * is looked at again, and it goes back in if an order came in between. A
 * purchase adds its sale to the index after its script: an order the
 * second look misses came after it, and so did its SADD, after the
 * removal. One pipelined round trip, and one more for those put back. A
 * connection lost in between may leave a sale with work out of the
 * index: the next read of MySQL (within the look-back) or sweep puts it
 * back.
 */
static void index_prune(struct async *a, redisContext *rc)
{
    char k[KEY_MAX];
    size_t *at = xcalloc(a->nsales + 1, sizeof(*at)), m = 0, back = 0;

    for (size_t i = 0; i < a->nsales; i++) {
        const struct sale *s = &a->sales[i];

        if (!s->indexed || s->backlog)
            continue;
        key(k, s->voucher_id, "stream");
        redisAppendCommand(rc, "SREM " INDEX_KEY " %lld",
                           (long long)s->voucher_id);
        redisAppendCommand(rc, "XLEN %s", k);
        at[m++] = i;
    }
    for (size_t j = 0; j < m; j++) {
        struct sale *s = &a->sales[at[j]];
        redisReply *r[2] = {NULL, NULL};

        if (redisGetReply(rc, (void **)&r[0]) != REDIS_OK ||
            redisGetReply(rc, (void **)&r[1]) != REDIS_OK) {
            freeReplyObject(r[0]);
            goto out;
        }
        if (r[1]->type == REDIS_REPLY_INTEGER && r[1]->integer == 0) {
            s->indexed = false;
        } else {
            redisAppendCommand(rc, "SADD " INDEX_KEY " %lld",
                               (long long)s->voucher_id);
            back++;
        }
        freeReplyObject(r[0]);
        freeReplyObject(r[1]);
    }
    for (size_t j = 0; j < back; j++) {
        redisReply *r = NULL;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            break;
        freeReplyObject(r);
    }
out:
    free(at);
}

/* The voucher id of a key "{v:ID}:...". */
static int sale_key_id(const char *s, size_t len, int64_t *id)
{
    const char *end = memchr(s, '}', len);

    if (len < 4 || memcmp(s, "{v:", 3) != 0 || !end)
        return -EINVAL;
    return util_parse_id(s + 3, (size_t)(end - s - 3), id);
}

/*
 * Put back into the index the sales with orders on their way that it
 * lacks, wherever they are (a purchase whose index command was lost,
 * long ago): their pending hashes exist exactly while orders wait. A
 * walk of the whole keyspace, so it is rare: when the writer starts and
 * every SWEEP_MS.
 */
static void sweep(redisContext *rc)
{
    char k[KEY_MAX];
    int64_t *ids;
    size_t n, added = 0;

    if (scan_ids(rc, NULL, "{v:*}:pending", sale_key_id, &ids, &n) != 0)
        return;
    for (size_t i = 0; i < n; i += LOOKUP_MAX) {
        size_t m = n - i < LOOKUP_MAX ? n - i : LOOKUP_MAX, back = 0;

        for (size_t j = 0; j < m; j++) {
            key(k, ids[i + j], "stream");
            redisAppendCommand(rc, "XLEN %s", k);
        }
        for (size_t j = 0; j < m; j++) {
            redisReply *r = NULL;

            if (redisGetReply(rc, (void **)&r) != REDIS_OK)
                goto out;
            if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
                redisAppendCommand(rc, "SADD " INDEX_KEY " %lld",
                                   (long long)ids[i + j]);
                back++;
            }
            freeReplyObject(r);
        }
        for (size_t j = 0; j < back; j++) {
            redisReply *r = NULL;

            if (redisGetReply(rc, (void **)&r) != REDIS_OK)
                goto out;
            added += r->type == REDIS_REPLY_INTEGER && r->integer == 1;
            freeReplyObject(r);
        }
    }
out:
    if (added)
        log_warn("async sales with orders waiting were not in the index of "
                 "sales with work: added",
                 "n=%zu", added);
    free(ids);
}

/* ---- the reconciliation ---- */

/*
 * Helpers of the scripts below: id_le(a, b) orders two stream ids
 * ("<ms>-<seq>"); group(k) is the fields of the group "writers" of stream
 * k (nil: none); stream(k) those of XINFO STREAM k (nil: no stream).
 */
#define LUA_HELPERS                                                            \
    "local function id_le(a, b) "                                              \
    "  local am, as = string.match(a, '^(%d+)-(%d+)$') "                       \
    "  local bm, bs = string.match(b, '^(%d+)-(%d+)$') "                       \
    "  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), "            \
    "    tonumber(bs) "                                                        \
    "  return am < bm or (am == bm and as <= bs) "                             \
    "end "                                                                     \
    "local function fields(a) "                                                \
    "  local f = {} "                                                          \
    "  for i = 1, #a, 2 do f[a[i]] = a[i + 1] end "                            \
    "  return f "                                                              \
    "end "                                                                     \
    "local function group(k) "                                                 \
    "  local gs = redis.pcall('xinfo', 'groups', k) "                          \
    "  if type(gs) ~= 'table' or gs.err then return nil end "                  \
    "  for _, g in ipairs(gs) do "                                             \
    "    local f = fields(g) "                                                 \
    "    if f['name'] == 'writers' then return f end "                         \
    "  end "                                                                   \
    "  return nil "                                                            \
    "end "                                                                     \
    "local function stream(k) "                                                \
    "  if redis.call('exists', k) == 0 then return nil end "                   \
    "  return fields(redis.call('xinfo', 'stream', k)) "                       \
    "end "

/*
 * KEYS info, stock, buyers, stream, pending, frozen. A sale's numbers at
 * one moment: {initial (-1: no state), stock, buyers, unsettled (pending
 * records), written, the stream's last id, the freeze's owner ("" when
 * not frozen), 1 when the stream's oldest entry was acknowledged and left
 * there}. An entry acknowledged and left behind is always the oldest
 * sooner or later, as the entries around it are settled and deleted.
 */
static struct redis_script snapshot_script = REDIS_SCRIPT(
    LUA_HELPERS
    "local info = redis.call('hmget', KEYS[1], 'initial', 'written') "
    "local last, orphan = '0-0', 0 "
    "local s = stream(KEYS[4]) "
    "if s then "
    "  last = s['last-generated-id'] "
    "  local first, g = s['first-entry'], group(KEYS[4]) "
    "  if first and g and id_le(first[1], g['last-delivered-id']) and "
    "     #redis.call('xpending', KEYS[4], 'writers', first[1], first[1], "
    "                 1) == 0 then "
    "    orphan = 1 "
    "  end "
    "end "
    "return {tonumber(info[1]) or -1, "
    "  tonumber(redis.call('get', KEYS[2])) or 0, "
    "  redis.call('scard', KEYS[3]), redis.call('hlen', KEYS[5]), "
    "  tonumber(info[2]) or 0, last, redis.call('get', KEYS[6]) or '', "
    "  orphan}");

/*
 * KEYS stream, pending, frozen; ARGV the rebuilder's token, the freeze's
 * lease (ms), the most orders to queue again. One step of a rebuild's
 * wait: renews the freeze, and when no order is in flight (none pending
 * in the group, none waiting for delivery) removes what the stream still
 * holds (acknowledged: written or dead-lettered) and queues again the
 * orders that only have a pending record left (their settling was cut
 * short: the writers find them written, or write them; a record that
 * does not start with "<user>:<t>" cannot be and is dropped). {state,
 * pending, undelivered, removed, queued again}: state 1 when nothing is
 * in flight any more, 0 to wait, -1 when the freeze is not this
 * rebuilder's.
 */
static struct redis_script drain_script = REDIS_SCRIPT(
    LUA_HELPERS
    "if redis.call('get', KEYS[3]) ~= ARGV[1] then "
    "  return {-1, 0, 0, 0, 0} "
    "end "
    "redis.call('pexpire', KEYS[3], ARGV[2]) "
    "local g = group(KEYS[1]) "
    "if not g then "
    "  redis.call('xgroup', 'create', KEYS[1], 'writers', '0', 'MKSTREAM') "
    "  g = group(KEYS[1]) "
    "end "
    "if g['pending'] > 0 then return {0, g['pending'], 0, 0, 0} end "
    "local s = stream(KEYS[1]) "
    "local newest = s['last-entry'] "
    "if newest and not id_le(newest[1], g['last-delivered-id']) then "
    "  return {0, 0, 1, 0, 0} "
    "end "
    "local removed = s['length'] "
    "if removed > 0 then redis.call('xtrim', KEYS[1], 'MAXLEN', 0) end "
    "local queued, n = 0, redis.call('hlen', KEYS[2]) "
    "if n > 0 then "
    "  local kv "
    "  if n <= tonumber(ARGV[3]) then kv = redis.call('hgetall', KEYS[2]) "
    "  else kv = redis.call('hrandfield', KEYS[2], ARGV[3], 'WITHVALUES') end "
    "  for i = 1, #kv, 2 do "
    "    local u, t = string.match(kv[i + 1], '^(%d+):(%d+)') "
    "    if u then "
    "      redis.call('xadd', KEYS[1], '*', 'o', kv[i], 'u', u, 't', t) "
    "      queued = queued + 1 "
    "    else "
    "      redis.call('hdel', KEYS[2], kv[i]) "
    "    end "
    "  end "
    "end "
    "return {queued == 0 and 1 or 0, 0, 0, removed, queued}");

/*
 * KEYS info, stock, buyers, rebuild (this rebuilder's set of buyers),
 * frozen, stream, pending, holders, rebuild-holders (its hash of their
 * orders); ARGV begin, end, initial, stock, users (how many are in
 * rebuild), the rebuilder's token, written, the highest stream id among
 * MySQL's orders, the sale's creation stamp. 1 when rebuilt; 0 (changed
 * nothing) when the freeze is not this rebuilder's any more or its set is gone;
 * -1 (changed nothing) when orders are in flight again.
 */
static struct redis_script rebuild_script = REDIS_SCRIPT(
    LUA_HELPERS
    "if redis.call('get', KEYS[5]) ~= ARGV[6] or (tonumber(ARGV[5]) > 0 and "
    "    (redis.call('exists', KEYS[4]) == 0 or "
    "     redis.call('exists', KEYS[9]) == 0)) then "
    "  redis.call('del', KEYS[4], KEYS[9]) "
    "  return 0 "
    "end "
    "local g = group(KEYS[6]) "
    "if redis.call('hlen', KEYS[7]) > 0 or (g and g['pending'] > 0) then "
    "  redis.call('del', KEYS[4], KEYS[9]) "
    "  return -1 "
    "end "
    "redis.call('del', KEYS[3], KEYS[8]) "
    "if tonumber(ARGV[5]) > 0 then "
    "  redis.call('rename', KEYS[4], KEYS[3]) "
    "  redis.call('rename', KEYS[9], KEYS[8]) "
    "else redis.call('del', KEYS[4], KEYS[9]) end "
    "redis.call('set', KEYS[2], ARGV[4]) "
    "redis.call('hset', KEYS[1], 'begin', ARGV[1], 'end', ARGV[2], "
    "  'initial', ARGV[3], 'written', ARGV[7], 'stamp', ARGV[9]) "
    "local s = stream(KEYS[6]) "
    "if not s then "
    "  redis.call('xgroup', 'create', KEYS[6], 'writers', '0', 'MKSTREAM') "
    "  s = stream(KEYS[6]) "
    "end "
    "if not id_le(ARGV[8], s['last-generated-id']) then "
    "  redis.call('xsetid', KEYS[6], ARGV[8]) "
    "end "
    "redis.call('del', KEYS[5]) "
    "return 1");

/* KEYS frozen; ARGV token, lease (ms): renew the freeze if it is ours. */
static struct redis_script freeze_keep_script =
    REDIS_SCRIPT("if redis.call('get', KEYS[1]) == ARGV[1] then "
                 "return redis.call('pexpire', KEYS[1], ARGV[2]) end "
                 "return 0");

/*
 * s's Redis numbers at one moment (snapshot_script): 0 with *out and
 * frozen_by (the freeze's owner, "" when not frozen) set, or -errno.
 */
static int sale_snapshot(redisContext *rc, int64_t v,
                         struct async_redis_side *out, char *frozen_by,
                         size_t len)
{
    static const char *const names[6] = {"info",   "stock",   "buyers",
                                         "stream", "pending", "frozen"};
    char k[6][KEY_MAX];
    const char *argv[6];
    redisReply *r;
    int err = 0;

    for (int i = 0; i < 6; i++) {
        key(k[i], v, names[i]);
        argv[i] = k[i];
    }
    r = redis_script_run(rc, &snapshot_script, 6, 6, argv, NULL, &err);
    if (!r)
        return err ? err : -EIO;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 8 ||
        r->element[5]->type != REDIS_REPLY_STRING ||
        r->element[6]->type != REDIS_REPLY_STRING) {
        log_warn("async sale snapshot failed", "voucher=%lld err=\"%s\"",
                 (long long)v, r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        return -EIO;
    }
    out->initial = r->element[0]->integer;
    out->stock = r->element[1]->integer;
    out->buyers = r->element[2]->integer;
    out->unsettled = r->element[3]->integer;
    out->written = r->element[4]->integer;
    out->last_pos = async_stream_pos(r->element[5]->str);
    out->orphan = r->element[7]->integer == 1;
    snprintf(frozen_by, len, "%s", r->element[6]->str);
    freeReplyObject(r);
    return 0;
}

/*
 * Keep the reconciliation's lock while a long round works: a second hold
 * renews its lease (owner-checked), and dropping that hold keeps the
 * first. False when it could not be renewed (lost, or the lock backend
 * away): the round stops.
 */
static bool reconcile_lock_keep(struct async *a)
{
    enum lock_status ls;
    int64_t now = util_mono_ms();

    if (!a->reconcile_lock || lock_holds(a->reconcile_lock) == 0 ||
        now - a->lock_renewed_ms < RECONCILE_LEASE_MS / 3)
        return true;
    if (lock_acquire(a->reconcile_lock, 0, RECONCILE_LEASE_MS, &ls) != 0 ||
        ls != LOCK_ACQUIRED) {
        log_warn("async reconciliation stopped: its lock was not renewed",
                 NULL);
        return false;
    }
    lock_release(a->reconcile_lock, NULL);
    a->lock_renewed_ms = now;
    return true;
}

/*
 * The end of s's rebuild, with nothing in flight: set the buyers to
 * MySQL's active orders' users, the stock to the initial stock minus them,
 * the written orders to MySQL's, and the stream's next position past
 * every order MySQL has, and lift the freeze, in one script that checks
 * the freeze is still this rebuilder's and nothing went in flight.
 */
static void rebuild_finish(struct async *a, struct store *st, redisContext *rc,
                           struct sale *s)
{
    char k[9][KEY_MAX + 64], b[24], e[24], in[24], sk[24], nu[24], wr[24];
    char last[48], freeze_ms[16], sp[24];
    const char *argv[18];
    struct store_async_sale sale;
    redisReply *r;
    int err;

    key(k[0], s->voucher_id, "info");
    key(k[1], s->voucher_id, "stock");
    key(k[2], s->voucher_id, "buyers");
    snprintf(k[3], sizeof(k[3]), "{v:%lld}:rebuild:%s",
             (long long)s->voucher_id, a->consumer);
    key(k[4], s->voucher_id, "frozen");
    key(k[5], s->voucher_id, "stream");
    key(k[6], s->voucher_id, "pending");
    key(k[7], s->voucher_id, "holders");
    snprintf(k[8], sizeof(k[8]), "{v:%lld}:rebuild-holders:%s",
             (long long)s->voucher_id, a->consumer);
    err = store_async_sale_read(st, s->voucher_id, &sale);
    if (err == -ENOENT) {
        /* Not an async sale in MySQL (any more): nothing to rebuild from;
         * the freeze lifts by itself. */
        log_warn("async rebuild dropped: no async sale of that id in mysql",
                 "voucher=%lld", (long long)s->voucher_id);
        s->rebuilding = false;
        return;
    }
    if (err)
        return; /* MySQL away: tried again at the next step */
    snprintf(freeze_ms, sizeof(freeze_ms), "%d", FREEZE_MS);
    freeReplyObject(redisCommand(rc, "DEL %s %s", k[3], k[8]));
    for (size_t i = 0; i < sale.nusers; i += 500) {
        size_t m = sale.nusers - i < 500 ? sale.nusers - i : 500;
        const char **v = xcalloc(2 * m + 2, sizeof(*v));
        char(*num)[24] = xcalloc(2 * m, sizeof(*num));
        const char *keep[4] = {k[4], a->consumer, freeze_ms};

        v[0] = "SADD";
        v[1] = k[3];
        for (size_t j = 0; j < m; j++) {
            snprintf(num[j], sizeof(num[j]), "%lld",
                     (long long)sale.users[i + j]);
            v[2 + j] = num[j];
        }
        r = redisCommandArgv(rc, (int)(m + 2), v, NULL);
        freeReplyObject(r);
        /* Each buyer's order: a later return names it. */
        v[0] = "HSET";
        v[1] = k[8];
        for (size_t j = 0; j < m; j++) {
            snprintf(num[m + j], sizeof(num[0]), "%lld",
                     (long long)sale.orders[i + j]);
            v[2 + 2 * j] = num[j];
            v[3 + 2 * j] = num[m + j];
        }
        r = redisCommandArgv(rc, (int)(2 * m + 2), v, NULL);
        freeReplyObject(r);
        free(num);
        free(v);
        /* A large sale takes a while: the freeze and the lock are kept. */
        freeReplyObject(
            redis_script_run(rc, &freeze_keep_script, 1, 3, keep, NULL, &err));
        reconcile_lock_keep(a);
    }
    snprintf(b, sizeof(b), "%lld", (long long)sale.begin_time);
    snprintf(e, sizeof(e), "%lld", (long long)sale.end_time);
    snprintf(in, sizeof(in), "%lld", (long long)sale.initial_stock);
    snprintf(sk, sizeof(sk), "%lld",
             (long long)(sale.initial_stock - (int64_t)sale.nusers));
    snprintf(nu, sizeof(nu), "%zu", sale.nusers);
    snprintf(wr, sizeof(wr), "%lld", (long long)sale.written);
    snprintf(last, sizeof(last), "%llu-%llu",
             (unsigned long long)sale.last_pos >> 20,
             (unsigned long long)sale.last_pos & ((1u << 20) - 1));
    for (int i = 0; i < 9; i++)
        argv[i] = k[i];
    argv[9] = b;
    argv[10] = e;
    argv[11] = in;
    argv[12] = sk;
    argv[13] = nu;
    argv[14] = a->consumer;
    argv[15] = wr;
    argv[16] = last;
    snprintf(sp, sizeof(sp), "%lld", (long long)sale.stamp);
    argv[17] = sp;
    r = redis_script_run(rc, &rebuild_script, 9, 18, argv, NULL, &err);
    long long landed = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
    if (r && r->type == REDIS_REPLY_ERROR)
        log_warn("async rebuild refused by redis", "voucher=%lld err=\"%s\"",
                 (long long)s->voucher_id, r->str);
    freeReplyObject(r);
    free(sale.users);
    free(sale.orders);
    if (landed == 0) {
        log_warn("async rebuild dropped: the freeze is not ours any more",
                 "voucher=%lld", (long long)s->voucher_id);
        s->rebuilding = false;
        return;
    }
    if (landed != 1)
        return; /* orders went in flight, or Redis failed: the next step */
    s->rebuilding = false;
    s->mismatch = 0;
    metrics_count(METRIC_ASYNC_REPAIRS, 1);
    log_warn("async sale rebuilt from mysql",
             "voucher=%lld buyers=%zu stock=%s written=%s frozen_ms=%lld",
             (long long)s->voucher_id, sale.nusers, sk, wr,
             (long long)(util_mono_ms() - s->rebuild_since_ms));
    if (a->cfg.stock_changed)
        a->cfg.stock_changed(a->cfg.ctx, st, s->voucher_id);
}

/*
 * One step of s's rebuild (drain_script): while orders are in flight it
 * only renews the freeze, and the writers' loop comes back later; with
 * none, it finishes. Never waits.
 */
static void rebuild_step(struct async *a, struct store *st, redisContext *rc,
                         struct sale *s)
{
    char k[3][KEY_MAX], freeze_ms[16], most[16];
    const char *argv[6] = {k[0], k[1], k[2], a->consumer, freeze_ms, most};
    long long x[5] = {0};
    int64_t now = util_mono_ms();
    redisReply *r;
    int err;

    key(k[0], s->voucher_id, "stream");
    key(k[1], s->voucher_id, "pending");
    key(k[2], s->voucher_id, "frozen");
    snprintf(freeze_ms, sizeof(freeze_ms), "%d", FREEZE_MS);
    snprintf(most, sizeof(most), "%d", REQUEUE_MAX);
    r = redis_script_run(rc, &drain_script, 3, 6, argv, NULL, &err);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 5) {
        if (r && r->type == REDIS_REPLY_ERROR)
            log_warn("async rebuild step refused by redis",
                     "voucher=%lld err=\"%s\"", (long long)s->voucher_id,
                     r->str);
        freeReplyObject(r);
        return;
    }
    for (int i = 0; i < 5; i++)
        x[i] = r->element[i]->type == REDIS_REPLY_INTEGER
                   ? r->element[i]->integer
                   : 0;
    freeReplyObject(r);
    if (x[3] > 0)
        log_warn("async rebuild removed acknowledged orders left in the "
                 "stream",
                 "voucher=%lld n=%lld", (long long)s->voucher_id, x[3]);
    if (x[4] > 0)
        log_warn("async rebuild queued again orders whose settling was cut "
                 "short",
                 "voucher=%lld n=%lld", (long long)s->voucher_id, x[4]);
    if (x[0] < 0) {
        log_warn("async rebuild dropped: the freeze is not ours any more",
                 "voucher=%lld", (long long)s->voucher_id);
        s->rebuilding = false;
        return;
    }
    if (x[0] == 0) {
        if (now - s->rebuild_said_ms >= REBUILD_SAY_MS) {
            s->rebuild_said_ms = now;
            log_warn("async rebuild waits: orders still in flight",
                     "voucher=%lld pending=%lld undelivered=%lld "
                     "queued_again=%lld frozen_ms=%lld",
                     (long long)s->voucher_id, x[1], x[2], x[4],
                     (long long)(now - s->rebuild_since_ms));
        }
        return;
    }
    rebuild_finish(a, st, rc, s);
}

/*
 * Start rebuilding s's Redis state from MySQL: freeze its purchases (the
 * freeze carries this writer's name: one rebuilder per sale, even if two
 * instances reconcile at once, a lock lease that ran out, instances on
 * different lock backends), then take the first step. The writers'
 * loop takes the next ones (rebuilds_step()) until it is rebuilt.
 */
static void rebuild_start(struct async *a, struct store *st, redisContext *rc,
                          struct sale *s)
{
    char k[KEY_MAX];
    redisReply *r;

    key(k, s->voucher_id, "frozen");
    r = redisCommand(rc, "SET %s %s PX %d NX", k, a->consumer, FREEZE_MS);
    bool ours = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!ours) {
        r = redisCommand(rc, "GET %s", k);
        ours = r && r->type == REDIS_REPLY_STRING &&
               strcmp(r->str, a->consumer) == 0;
        freeReplyObject(r);
        if (!ours)
            return; /* another rebuilds it */
    }
    log_warn("async sale frozen for a rebuild", "voucher=%lld",
             (long long)s->voucher_id);
    s->rebuilding = true;
    s->rebuild_since_ms = s->rebuild_said_ms = util_mono_ms();
    s->rebuild_next_ms = s->rebuild_since_ms + REBUILD_STEP_MS;
    rebuild_step(a, st, rc, s);
}

/* The next step of every rebuild this writer has going, on its loop. */
static void rebuilds_step(struct async *a, struct store *st, redisContext *rc)
{
    int64_t now = util_mono_ms();

    for (size_t i = 0; i < a->nsales; i++) {
        struct sale *s = &a->sales[i];

        if (!s->rebuilding || now < s->rebuild_next_ms)
            continue;
        s->rebuild_next_ms = now + REBUILD_STEP_MS;
        rebuild_step(a, st, rc, s);
    }
}

/*
 * Compare s's Redis state with MySQL at one point of its stream: Redis'
 * numbers in one script, then MySQL's orders up to the stream position
 * Redis had reached (async/compare.h), so that batches the writers commit
 * meanwhile, in any order, change nothing. Moments of disagreement are
 * normal still (an order closed in MySQL whose unit is on its way back to
 * Redis); the same disagreement twice in a row, a missing state or an
 * acknowledged entry left in the stream is not, and s is rebuilt.
 */
static void reconcile_one(struct async *a, struct store *st, redisContext *rc,
                          struct sale *s)
{
    struct async_redis_side rs;
    struct async_mysql_side ms = {.initial = -1};
    struct store_async_counts c;
    struct async_disagreement d;
    char frozen_by[64];

    if (s->rebuilding)
        return; /* rebuilds_step() takes it on */
    if (!sale_ours(st, rc, s))
        return;
    if (sale_snapshot(rc, s->voucher_id, &rs, frozen_by, sizeof(frozen_by)))
        return;
    if (frozen_by[0] && strcmp(frozen_by, a->consumer) != 0) {
        s->mismatch = 0; /* another instance rebuilds it */
        return;
    }
    if (rs.initial >= 0) {
        if (store_async_counts_read(st, s->voucher_id, (int64_t)rs.last_pos,
                                    &c))
            return;
        ms.initial = c.initial_stock;
        ms.active = c.active;
        ms.orders = c.orders;
    }
    if (async_sale_compare(&rs, &ms, &d) && !frozen_by[0]) {
        s->mismatch = 0;
        return;
    }
    if (!frozen_by[0] && !d.missing &&
        (s->mismatch == 0 || !async_disagreement_same(&s->last, &d))) {
        s->mismatch = 1;
        s->last = d;
        return;
    }
    if (!frozen_by[0] && !d.missing && ++s->mismatch < MISMATCH_ROUNDS)
        return;
    log_warn("async sale disagrees with mysql",
             "voucher=%lld missing=%d orphan=%d initial=%lld units=%lld "
             "buyers=%lld in_flight=%lld redis_initial=%lld stock=%lld "
             "redis_buyers=%lld unsettled=%lld written=%lld "
             "mysql_active=%lld mysql_orders=%lld frozen=%d",
             (long long)s->voucher_id, d.missing, d.orphan, d.initial, d.units,
             d.buyers, d.in_flight, rs.initial, rs.stock, rs.buyers,
             rs.unsettled, rs.written, ms.active, ms.orders,
             frozen_by[0] != '\0');
    rebuild_start(a, st, rc, s);
}

static void reconcile(struct async *a, struct store *st, redisContext *rc)
{
    enum lock_status ls;

    if (a->nsales == 0)
        return;
    if (!a->reconcile_lock &&
        lock_new(a->cfg.locks, "seckill:async:reconcile", &a->reconcile_lock))
        return;
    if (lock_acquire(a->reconcile_lock, 0, RECONCILE_LEASE_MS, &ls) != 0 ||
        ls != LOCK_ACQUIRED)
        return;
    a->lock_renewed_ms = util_mono_ms();
    for (size_t i = 0; i < a->nsales && reconcile_lock_keep(a); i++)
        reconcile_one(a, st, rc, &a->sales[i]);
    lock_release(a->reconcile_lock, NULL);
}

static void sale_init(struct sale *s, int64_t voucher_id)
{
    memset(s, 0, sizeof(*s));
    s->voucher_id = voucher_id;
    s->own_pending = true; /* after a restart: ours first */
}

static int cmp_sale(const void *key, const void *elem)
{
    int64_t x = *(const int64_t *)key;
    int64_t y = ((const struct sale *)elem)->voucher_id;

    return (x > y) - (x < y);
}

/* voucher_id's sale in the working set, or NULL (writer, or under mu). */
static struct sale *sale_find(const struct async *a, int64_t voucher_id)
{
    return a->nsales ? bsearch(&voucher_id, a->sales, a->nsales,
                               sizeof(*a->sales), cmp_sale)
                     : NULL;
}

/* How many replicas the Redis of rc has online (INFO replication: the
 * slaveN lines with state=online), 0 when it cannot say. */
static unsigned replicas_online(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "INFO replication");
    unsigned n = 0;

    if (r && r->type == REDIS_REPLY_STRING)
        for (const char *p = r->str; (p = strstr(p, "\nslave")); p++) {
            const char *end = strchr(p + 1, '\n');
            const char *online = strstr(p, "state=online");

            if (online && (!end || online < end))
                n++;
        }
    freeReplyObject(r);
    return n;
}

/* Look at Redis' durability again: an operator may change it at run time. */
static void durability_look(struct async *a, redisContext *rc)
{
    char why[96];
    bool ok =
        a->cfg.accept_loss || async_redis_durable(rc, why, sizeof(why)) == 0;

    atomic_store(&a->replicas_seen, replicas_online(rc));
    if (atomic_exchange(&a->may_sell, ok) != ok)
        log_warn(ok ? "async sales allowed: redis keeps acknowledged writes"
                    : "async sales refused: redis may lose acknowledged writes",
                 "redis=\"%s\"", ok ? "durable" : why);
}

/* The async vouchers MySQL lists (on sale, ahead, or ended within the
 * look-back); kept as they were when MySQL cannot say. */
static void listed_refresh(struct async *a, struct store *st)
{
    int64_t *ids;
    size_t n;

    if (store_async_vouchers(st, a->cfg.lookback_s, &ids, &n) != 0)
        return;
    free(a->listed);
    a->listed = ids;
    a->nlisted = ids_unique(ids, n);
    /* Hinted sales are in MySQL (committed before the hint): listed now
     * if they are still to be looked after. */
    a->nhinted = 0;
}

/*
 * Make the working set anew: the sales in the index (read now; as they
 * were when Redis cannot say), those MySQL listed, and those hinted.
 * Sales that stay keep their state; new ones join with a fresh one.
 */
static void sales_update(struct async *a, redisContext *rc)
{
    int64_t *idx, *hints, *all;
    size_t nidx, nhints, n = 0;
    bool have_index = index_read(rc, &idx, &nidx) == 0;
    struct sale *next, *old;

    pthread_mutex_lock(&a->mu);
    hints = a->hints;
    nhints = a->nhints;
    a->hints = NULL;
    a->nhints = a->hints_cap = 0;
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < nhints; i++)
        ids_push(&a->hinted, &a->nhinted, &a->hinted_cap, hints[i]);
    free(hints);

    all = xcalloc(nidx + a->nlisted + a->nhinted + a->nsales + 1, sizeof(*all));
    for (size_t i = 0; i < nidx; i++)
        all[n++] = idx[i];
    for (size_t i = 0; i < a->nlisted; i++)
        all[n++] = a->listed[i];
    for (size_t i = 0; i < a->nhinted; i++)
        all[n++] = a->hinted[i];
    /* Kept: those indexed at the last look when the index cannot be read
     * now, and those this writer is rebuilding (their freeze is its). */
    for (size_t i = 0; i < a->nsales; i++)
        if ((!have_index && a->sales[i].indexed) || a->sales[i].rebuilding)
            all[n++] = a->sales[i].voucher_id;
    n = ids_unique(all, n);
    next = xcalloc(n + 1, sizeof(*next));
    for (size_t i = 0; i < n; i++) {
        const struct sale *s = sale_find(a, all[i]);

        if (s)
            next[i] = *s;
        else
            sale_init(&next[i], all[i]);
        if (have_index)
            next[i].indexed = nidx && bsearch(&all[i], idx, nidx, sizeof(*idx),
                                              cmp_id) != NULL;
    }
    pthread_mutex_lock(&a->mu);
    old = a->sales;
    a->sales = next;
    a->nsales = n;
    pthread_mutex_unlock(&a->mu);
    free(old);
    free(all);
    free(idx);
}

/*
 * At the stop: leave each group this consumer holds nothing in, so groups
 * do not collect a consumer per restart. One that still holds orders
 * stays (deleting it would drop them from the group's pending list: they
 * would never be claimed); another writer claims them.
 */
static void consumers_leave(struct async *a, redisContext *rc)
{
    char k[KEY_MAX];

    for (size_t i = 0; rc && i < a->nsales; i++) {
        redisReply *r;

        if (!a->sales[i].group_ready)
            continue;
        key(k, a->sales[i].voucher_id, "stream");
        r = redisCommand(rc, "XPENDING %s " GROUP " - + 1 %s", k, a->consumer);
        bool holds = !r || r->type != REDIS_REPLY_ARRAY || r->elements > 0;
        freeReplyObject(r);
        if (!holds)
            freeReplyObject(redisCommand(
                rc, "XGROUP DELCONSUMER %s " GROUP " %s", k, a->consumer));
    }
}

/*
 * Give Redis the units it is still owed: returns recorded in MySQL at
 * least RETURNS_AGE_MS ago (the closing request returns its own at once)
 * and not confirmed since, because the COMMIT's answer was lost, Redis
 * failed, the process died, or the sale was frozen. Every instance
 * sweeps; a return repeated changes nothing.
 */
static int by_voucher(const void *x, const void *y)
{
    const struct store_unit_return *a = x, *b = y;

    return (a->voucher_id > b->voucher_id) - (a->voucher_id < b->voucher_id);
}

static void returns_sweep(struct async *a, struct store *st)
{
    struct store_unit_return owed[RETURNS_SWEEP_MAX];
    int64_t orders[RETURNS_SWEEP_MAX], users[RETURNS_SWEEP_MAX];
    size_t n = 0;

    if (store_unit_returns_list(st, RETURNS_AGE_MS, owed, RETURNS_SWEEP_MAX,
                                &n) != 0 ||
        n == 0)
        return;
    qsort(owed, n, sizeof(owed[0]), by_voucher);
    for (size_t i = 0, j; i < n; i = j) {
        size_t k = 0, back = 0;

        for (j = i; j < n && owed[j].voucher_id == owed[i].voucher_id; j++) {
            orders[k] = owed[j].order_id;
            users[k++] = owed[j].user_id;
        }
        if (units_return(st, owed[i].voucher_id, orders, users, k, true,
                         &back) != 0)
            return; /* Redis failed: the next sweep */
        if (back) {
            log_info("async units returned to redis late", "voucher=%lld n=%zu",
                     (long long)owed[i].voucher_id, back);
            if (a->cfg.stock_changed)
                a->cfg.stock_changed(a->cfg.ctx, st, owed[i].voucher_id);
        }
    }
}

static void *writer_main(void *arg)
{
    struct async *a = arg;
    struct store *st = store_new(a->cfg.store);
    int64_t next_refresh = 0, next_claim = 0, next_reconcile = 0;
    int64_t next_sweep = 0;

    for (;;) {
        redisContext *rc = store_redis(st);
        int64_t now = util_mono_ms();
        bool look_all = false;
        size_t did = 0;

        pthread_mutex_lock(&a->mu);
        bool stop = a->stop;
        pthread_mutex_unlock(&a->mu);
        if (stop)
            break;
        if (!rc) {
            if (sleep_or_stop(a, 200))
                break;
            continue;
        }
        if (now >= next_refresh) {
            durability_look(a, rc);
            listed_refresh(a, st);
            next_refresh = now + REFRESH_MS;
            look_all = true;
        }
        if (now >= next_sweep) {
            sweep(rc);
            next_sweep = now + SWEEP_MS;
        }
        sales_update(a, rc);
        backlogs_look(a, rc, look_all);
        for (size_t i = 0; i < a->nsales && now >= a->retry_ms; i++)
            if ((a->sales[i].backlog || a->sales[i].own_pending) &&
                sale_ours(st, rc, &a->sales[i]))
                did += pump(a, st, rc, &a->sales[i]);
        if (now >= next_claim && now >= a->retry_ms) {
            for (size_t i = 0; i < a->nsales; i++)
                if (a->sales[i].backlog && sale_ours(st, rc, &a->sales[i]))
                    claim(a, st, rc, &a->sales[i]);
            next_claim = now + CLAIM_EVERY_MS;
        }
        index_prune(a, rc);
        if (now >= next_reconcile) {
            reconcile(a, st, rc);
            next_reconcile = now + a->cfg.reconcile_ms;
        }
        if (now >= a->next_returns_ms) {
            returns_sweep(a, st);
            a->next_returns_ms = now + RETURNS_EVERY_MS;
        }
        rebuilds_step(a, st, rc);
        if (!did && sleep_or_kick(a, IDLE_SLEEP_MS, true))
            break;
    }
    consumers_leave(a, store_redis(st));
    lock_free(a->reconcile_lock);
    a->reconcile_lock = NULL;
    store_free(st);
    return NULL;
}

struct async *async_start(const struct async_config *cfg)
{
    struct async *a = xcalloc(1, sizeof(*a));
    char host[32] = "host";

    a->cfg = *cfg;
    if (a->cfg.batch < 1 || a->cfg.batch > BATCH_MAX)
        a->cfg.batch = BATCH_MAX;
    if (a->cfg.claim_ms < 100)
        a->cfg.claim_ms = 100;
    if (a->cfg.reconcile_ms == 0)
        a->cfg.reconcile_ms = ASYNC_RECONCILE_MS;
    gethostname(host, sizeof(host) - 1);
    snprintf(a->consumer, sizeof(a->consumer), "%s-%ld", host, (long)getpid());
    pthread_mutex_init(&a->mu, NULL);
    /* The sleeps count on the monotonic clock (util_mono_ms()). */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (a->cfg.accept_loss) {
        atomic_store(&a->may_sell, true);
    } else {
        /* The first answer now, so sales need not wait for the thread. */
        struct store *st = store_new(a->cfg.store);
        redisContext *rc = store_redis(st);
        char why[96];

        atomic_store(&a->may_sell,
                     rc && async_redis_durable(rc, why, sizeof(why)) == 0);
        store_free(st);
    }
    {
        /* The replicas to wait for, known before the first sale. */
        struct store *st = store_new(a->cfg.store);
        redisContext *rc = store_redis(st);

        atomic_store(&a->replicas_seen, rc ? replicas_online(rc) : 0);
        store_free(st);
    }
    if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
        log_error("async writer start failed", NULL);
        abort();
    }
    return a;
}

void async_stop(struct async *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cond);
    pthread_mutex_destroy(&a->mu);
    free(a->sales);
    free(a->listed);
    free(a->hinted);
    free(a->hints);
    free(a);
}

void async_confirm_get(const struct async *a, struct async_confirm *out)
{
    unsigned seen;

    out->replicas = 0;
    out->wait_ms = 0;
    if (!a)
        return;
    out->wait_ms = a->cfg.wait_ms ? a->cfg.wait_ms : 200;
    if (a->cfg.replicas >= 0) {
        out->replicas = (unsigned)a->cfg.replicas;
        return;
    }
    seen = atomic_load_explicit(&a->replicas_seen, memory_order_relaxed);
    out->replicas = seen > 1 ? 1 : seen;
}

bool async_may_sell(const struct async *a)
{
    return a && atomic_load_explicit(&a->may_sell, memory_order_relaxed);
}

void async_voucher_hint(struct async *a, int64_t voucher_id)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    bool known = sale_find(a, voucher_id) != NULL;
    for (size_t i = 0; !known && i < a->nhints; i++)
        known = a->hints[i] == voucher_id;
    if (!known)
        ids_push(&a->hints, &a->nhints, &a->hints_cap, voucher_id);
    if (!a->kicked) {
        a->kicked = true;
        pthread_cond_signal(&a->cond);
    }
    pthread_mutex_unlock(&a->mu);
}

size_t async_backlog_top(struct async *a, int64_t *ids, unsigned *depths,
                         size_t max, int64_t *oldest_ms)
{
    size_t n = 0;

    *oldest_ms = 0;
    if (!a || max == 0)
        return 0;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < a->nsales; i++) {
        const struct sale *s = &a->sales[i];
        size_t j;

        if (!s->backlog)
            continue;
        if (s->oldest_ms && (!*oldest_ms || s->oldest_ms < *oldest_ms))
            *oldest_ms = s->oldest_ms;
        j = n < max ? n++ : max;
        while (j > 0 && depths[j - 1] < s->backlog) {
            if (j < max) {
                ids[j] = ids[j - 1];
                depths[j] = depths[j - 1];
            }
            j--;
        }
        if (j < max) {
            ids[j] = s->voucher_id;
            depths[j] = s->backlog;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return n;
}
