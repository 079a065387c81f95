/*
 * async.c - the asynchronous purchase mode (see async.h): the Redis
 * scripts of a sale, and one instance's writer thread, which also runs
 * the reconciliation when it holds the reconciliation lock.
 */
#include "async/async.h"

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
#define RECONCILE_MS 2000
/* The rebuild of one sale: how long its purchases are held at most. */
#define FREEZE_MS 60000
#define DRAIN_WAIT_MS 30000
/* An idle writer looks again this often; a sale on this instance wakes
 * it at once (async_voucher_hint()). */
#define IDLE_SLEEP_MS 200

/* ---- keys and scripts ---- */

static void key(char *buf, int64_t voucher_id, const char *what)
{
    snprintf(buf, KEY_MAX, "{v:%lld}:%s", (long long)voucher_id, what);
}

/* KEYS info, stock, buyers, stream, pending, dead, frozen; ARGV begin,
 * end, stock, stamp. 1 put in; 0 left alone: the sale is there with this
 * stamp already (a reconciliation made it from MySQL first, and it may
 * be selling). Any other sale of the id is a stale one (from an earlier
 * database on the same Redis): it is replaced. */
static struct redis_script preheat_script = REDIS_SCRIPT(
    "if redis.call('hget', KEYS[1], 'stamp') == ARGV[4] then return 0 end "
    "redis.call('del', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], "
    "KEYS[7]) "
    "redis.call('hset', KEYS[1], 'begin', ARGV[1], 'end', ARGV[2], "
    "'initial', ARGV[3], 'stamp', ARGV[4]) "
    "redis.call('set', KEYS[2], ARGV[3]) "
    "return 1");

/* KEYS info, stock, buyers, stream, pending, frozen; ARGV backlog_max,
 * then (order, user) pairs. {ms, code...}: a code per pair (1 sold, 2
 * sold out, 3 duplicate), or {-n} for the whole batch. */
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
    "    out[#out + 1] = 1 "
    "  end "
    "end "
    "if sold > 0 then redis.call('decrby', KEYS[2], sold) end "
    "return out");

/* KEYS info, stock, buyers; ARGV user. */
static struct redis_script return_script =
    REDIS_SCRIPT("if redis.call('exists', KEYS[1]) == 0 then return 0 end "
                 "if redis.call('srem', KEYS[3], ARGV[1]) == 1 then "
                 "redis.call('incr', KEYS[2]) return 1 end "
                 "return 0");

/* KEYS info, stock, buyers, rebuild (this rebuilder's set of buyers),
 * frozen; ARGV begin, end, initial, stock, users (how many are in
 * rebuild), the rebuilder's token, the sale's stamp. 1, or 0 (changed
 * nothing) when the freeze is not this rebuilder's any more or its set
 * is gone. */
static struct redis_script rebuild_script = REDIS_SCRIPT(
    "if redis.call('get', KEYS[5]) ~= ARGV[6] or (tonumber(ARGV[5]) > 0 and "
    "redis.call('exists', KEYS[4]) == 0) then "
    "redis.call('del', KEYS[4]) return 0 end "
    "redis.call('del', KEYS[3]) "
    "if tonumber(ARGV[5]) > 0 then redis.call('rename', KEYS[4], KEYS[3]) "
    "else redis.call('del', KEYS[4]) end "
    "redis.call('set', KEYS[2], ARGV[4]) "
    "redis.call('hset', KEYS[1], 'begin', ARGV[1], 'end', ARGV[2], "
    "'initial', ARGV[3], 'stamp', ARGV[7]) "
    "redis.call('del', KEYS[5]) "
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
    static const char *const names[7] = {"info",    "stock", "buyers", "stream",
                                         "pending", "dead",  "frozen"};
    char k[7][KEY_MAX], b[24], e[24], n[24], st[24];
    const char *argv[11];
    long long v = 0;
    int err;

    for (int i = 0; i < 7; i++) {
        key(k[i], voucher_id, names[i]);
        argv[i] = k[i];
    }
    snprintf(b, sizeof(b), "%lld", (long long)begin_s);
    snprintf(e, sizeof(e), "%lld", (long long)end_s);
    snprintf(n, sizeof(n), "%lld", (long long)stock);
    snprintf(st, sizeof(st), "%lld", (long long)stamp);
    argv[7] = b;
    argv[8] = e;
    argv[9] = n;
    argv[10] = st;
    redisReply *r =
        redis_script_run(rc, &preheat_script, 7, 11, argv, NULL, &err);
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

/*
 * Run the purchase script (argc arguments, its 6 keys first) and, in the
 * same round trip, add the sale to the index of sales with work. The
 * index command follows the script: a writer that takes the sale out of
 * the index and then finds its stream empty cannot miss what the script
 * added (see index_prune()). If the index command is lost (the
 * connection broke after the script), the writers' sweeps put the sale
 * back. Returns the script's reply, or NULL with *err.
 */
static redisReply *purchase_run(redisContext *rc, int64_t voucher_id, int argc,
                                const char **argv, int *err)
{
    bool eval = false;

    *err = 0;
    if (!atomic_load(&purchase_script.ready) &&
        redis_script_load(rc, &purchase_script) && rc->err) {
        *err = redis_errno(rc);
        return NULL;
    }
    for (;;) {
        redisReply *r = NULL, *x = NULL;
        char *cmd;
        int len = redis_script_format(&purchase_script, eval, 6, argc, argv,
                                      NULL, &cmd);

        redisAppendFormattedCommand(rc, cmd, (size_t)len);
        redisFreeCommand(cmd);
        redisAppendCommand(rc, "SADD " INDEX_KEY " %lld",
                           (long long)voucher_id);
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
            *err = redis_errno(rc);
            return NULL;
        }
        if (redisGetReply(rc, (void **)&x) != REDIS_OK ||
            x->type == REDIS_REPLY_ERROR)
            log_warn("async sale not added to the index of sales with work",
                     "voucher=%lld err=\"%s\"", (long long)voucher_id,
                     x ? x->str : rc->errstr);
        freeReplyObject(x);
        if (eval || !redis_reply_is_noscript(r))
            return r;
        freeReplyObject(r); /* a restarted Redis: EVAL caches it again */
        eval = true;
    }
}

int async_purchase(redisContext *rc, int64_t voucher_id, unsigned backlog_max,
                   const int64_t *order_ids, const int64_t *users, size_t n,
                   enum async_outcome *out)
{
    static const char *const names[6] = {"info",   "stock",   "buyers",
                                         "stream", "pending", "frozen"};
    char keys[6][KEY_MAX], backlog[16], (*nums)[24];
    const char **argv;
    redisReply *r;
    int err = 0;

    if (n == 0)
        return 0;
    if (n > BATCH_MAX)
        return -EINVAL;
    nums = xcalloc(2 * n, sizeof(*nums));
    argv = xcalloc(7 + 2 * n, sizeof(*argv));
    for (int i = 0; i < 6; i++) {
        key(keys[i], voucher_id, names[i]);
        argv[i] = keys[i];
    }
    snprintf(backlog, sizeof(backlog), "%u", backlog_max);
    argv[6] = backlog;
    for (size_t i = 0; i < n; i++) {
        snprintf(nums[2 * i], sizeof(nums[0]), "%lld", (long long)order_ids[i]);
        snprintf(nums[2 * i + 1], sizeof(nums[0]), "%lld", (long long)users[i]);
        argv[7 + 2 * i] = nums[2 * i];
        argv[8 + 2 * i] = nums[2 * i + 1];
    }
    r = purchase_run(rc, voucher_id, (int)(7 + 2 * n), argv, &err);
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
    }
    freeReplyObject(r);
    return 0;
}

int async_unit_return(redisContext *rc, int64_t voucher_id, int64_t user_id)
{
    char k[3][KEY_MAX], u[24];
    const char *argv[4] = {k[0], k[1], k[2], u};
    long long v;
    int err;

    key(k[0], voucher_id, "info");
    key(k[1], voucher_id, "stock");
    key(k[2], voucher_id, "buyers");
    snprintf(u, sizeof(u), "%lld", (long long)user_id);
    redisReply *r =
        redis_script_run(rc, &return_script, 3, 4, argv, NULL, &err);
    return reply_int(rc, r, err, &v, "unit_return");
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
            const char *colon = r->type == REDIS_REPLY_STRING
                                    ? memchr(r->str, ':', r->len)
                                    : NULL;

            if (ret == -ENOENT && colon &&
                util_parse_id(r->str, (size_t)(colon - r->str), user_id) == 0) {
                *voucher_id = ids[i + j];
                *accepted_ms = strtoll(colon + 1, NULL, 10);
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
    bool group_ready;
    bool own_pending;  /* re-read what this consumer holds first */
    unsigned backlog;  /* XLEN, at the last look */
    int64_t oldest_ms; /* Redis time of the oldest order waiting */
    int mismatch;      /* consecutive disagreements seen */
    long long delta;   /* by how much */
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
    atomic_bool may_sell; /* see async_may_sell() */
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
    e->valid = have == 7;
}

/*
 * After the write: acknowledge and delete every entry, drop the pending
 * records, and move the refused ones (and unreadable ones) to the dead
 * letters, in one pipelined round trip.
 */
static void settle(redisContext *rc, int64_t voucher_id, struct entry *e,
                   size_t n)
{
    char k_stream[KEY_MAX], k_pending[KEY_MAX], k_dead[KEY_MAX];
    size_t sent = 0;

    key(k_stream, voucher_id, "stream");
    key(k_pending, voucher_id, "pending");
    key(k_dead, voucher_id, "dead");
    for (size_t i = 0; i < n; i++) {
        char o[24], u[24], t[24], why[32];
        bool dead = !e[i].valid || e[i].o.result;

        if (dead) {
            snprintf(o, sizeof(o), "%lld", (long long)e[i].o.order_id);
            snprintf(u, sizeof(u), "%lld", (long long)e[i].o.user_id);
            snprintf(t, sizeof(t), "%lld", (long long)e[i].o.accepted_ms);
            snprintf(why, sizeof(why), "%s",
                     !e[i].valid                ? "unreadable"
                     : e[i].o.result == -EEXIST ? "refused by a unique key"
                                                : "no stock in mysql");
            redisAppendCommand(rc, "XADD %s * o %s u %s t %s id %s why %s",
                               k_dead, o, u, t, e[i].id, why);
            sent++;
            metrics_count(METRIC_ASYNC_DEAD, 1);
            log_error("async order can never be written, dead-lettered",
                      "voucher=%lld order=%s user=%s why=\"%s\"",
                      (long long)voucher_id, o, u, why);
        }
    }
    /* One command each for the whole batch: acknowledged, deleted, no
     * longer pending (in that order: a crash in between leaves an order
     * that is written and still pending, which is only read again). */
    const char **v = xcalloc(n + 3, sizeof(*v));
    char(*oid)[24] = xcalloc(n, sizeof(*oid));

    v[0] = "XACK";
    v[1] = k_stream;
    v[2] = GROUP;
    for (size_t i = 0; i < n; i++)
        v[3 + i] = e[i].id;
    redisAppendCommandArgv(rc, (int)(n + 3), v, NULL);
    v[0] = "XDEL";
    for (size_t i = 0; i < n; i++)
        v[2 + i] = e[i].id;
    redisAppendCommandArgv(rc, (int)(n + 2), v, NULL);
    v[0] = "HDEL";
    v[1] = k_pending;
    for (size_t i = 0; i < n; i++) {
        snprintf(oid[i], sizeof(oid[i]), "%lld", (long long)e[i].o.order_id);
        v[2 + i] = oid[i];
    }
    redisAppendCommandArgv(rc, (int)(n + 2), v, NULL);
    sent += 3;
    free(oid);
    free(v);
    for (size_t i = 0; i < sent; i++) {
        redisReply *r = NULL;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            break; /* the connection broke: the entries stay pending and are
                    * written again (idempotently) later */
        freeReplyObject(r);
    }
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

/* Read a voucher's Redis numbers: initial (-1: no state), stock, buyers,
 * stream length, frozen. 0 or -errno. */
static int redis_numbers(redisContext *rc, int64_t v, long long *initial,
                         long long *stock, long long *buyers,
                         long long *backlog)
{
    static const char *const what[4] = {"info", "stock", "buyers", "stream"};
    char k[4][KEY_MAX];
    redisReply *r[4] = {0};
    int err = 0;

    for (int i = 0; i < 4; i++)
        key(k[i], v, what[i]);
    redisAppendCommand(rc, "HGET %s initial", k[0]);
    redisAppendCommand(rc, "GET %s", k[1]);
    redisAppendCommand(rc, "SCARD %s", k[2]);
    redisAppendCommand(rc, "XLEN %s", k[3]);
    for (int i = 0; i < 4; i++)
        if (redisGetReply(rc, (void **)&r[i]) != REDIS_OK) {
            err = redis_errno(rc);
            break;
        }
    if (!err) {
        *initial = r[0]->type == REDIS_REPLY_STRING ? atoll(r[0]->str) : -1;
        *stock = r[1]->type == REDIS_REPLY_STRING ? atoll(r[1]->str) : 0;
        *buyers = r[2]->type == REDIS_REPLY_INTEGER ? r[2]->integer : 0;
        *backlog = r[3]->type == REDIS_REPLY_INTEGER ? r[3]->integer : 0;
    }
    for (int i = 0; i < 4; i++)
        freeReplyObject(r[i]);
    return err;
}

/* Pending entries of the group (handed out, not acknowledged). */
static long long pending_count(redisContext *rc, int64_t v)
{
    char k[KEY_MAX];
    long long n = -1;
    redisReply *r;

    key(k, v, "stream");
    r = redisCommand(rc, "XPENDING %s " GROUP, k);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER)
        n = r->element[0]->integer;
    else if (r && r->type == REDIS_REPLY_ERROR)
        n = 0; /* no group: nothing handed out */
    freeReplyObject(r);
    return n;
}

/*
 * Rebuild s's Redis state from MySQL: freeze its purchases, let every
 * writer drain the stream (this one helps), then, with nothing in
 * flight, set the buyers to MySQL's active users and the stock to the
 * initial stock minus them. Returns 0 when rebuilt.
 */
static int rebuild(struct async *a, struct store *st, redisContext *rc,
                   struct sale *s)
{
    char k[6][KEY_MAX + 64], b[24], e[24], in[24], sk[24], nu[24], sp[24];
    const char *argv[12];
    struct store_async_sale sale;
    int64_t deadline = util_mono_ms() + DRAIN_WAIT_MS;
    long long initial, stock, buyers, backlog = -1, pend = -1;
    redisReply *r;
    int err;

    key(k[0], s->voucher_id, "info");
    key(k[1], s->voucher_id, "stock");
    key(k[2], s->voucher_id, "buyers");
    snprintf(k[3], sizeof(k[3]), "{v:%lld}:rebuild:%s",
             (long long)s->voucher_id, a->consumer);
    key(k[4], s->voucher_id, "frozen");
    /* One rebuilder per sale, even if two instances reconcile at once (a
     * lock lease that ran out, instances on different lock backends):
     * the freeze carries its owner, and only the owner's rebuild lands. */
    r = redisCommand(rc, "SET %s %s PX %d NX", k[4], a->consumer, FREEZE_MS);
    bool ours = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!ours) {
        r = redisCommand(rc, "GET %s", k[4]);
        ours = r && r->type == REDIS_REPLY_STRING &&
               strcmp(r->str, a->consumer) == 0;
        freeReplyObject(r);
        if (!ours)
            return -EBUSY; /* another rebuilds it */
        freeReplyObject(redisCommand(rc, "PEXPIRE %s %d", k[4], FREEZE_MS));
    }
    log_warn("async sale frozen for a rebuild", "voucher=%lld",
             (long long)s->voucher_id);
    while (util_mono_ms() < deadline) {
        pump(a, st, rc, s);
        claim(a, st, rc, s);
        if (redis_numbers(rc, s->voucher_id, &initial, &stock, &buyers,
                          &backlog) == 0 &&
            backlog == 0 && (pend = pending_count(rc, s->voucher_id)) == 0)
            break;
        if (sleep_or_stop(a, 50))
            return -ECANCELED;
    }
    if (backlog != 0 || pend != 0) {
        log_warn("async rebuild waits: orders still in the stream",
                 "voucher=%lld backlog=%lld pending=%lld",
                 (long long)s->voucher_id, backlog, pend);
        return -EAGAIN; /* stays frozen; tried again next round */
    }
    err = store_async_sale_read(st, s->voucher_id, &sale);
    if (err)
        return err;
    freeReplyObject(redisCommand(rc, "DEL %s", k[3]));
    for (size_t i = 0; i < sale.nusers; i += 500) {
        size_t m = sale.nusers - i < 500 ? sale.nusers - i : 500;
        const char **v = xcalloc(m + 2, sizeof(*v));
        char(*num)[24] = xcalloc(m, sizeof(*num));

        v[0] = "SADD";
        v[1] = k[3];
        for (size_t j = 0; j < m; j++) {
            snprintf(num[j], sizeof(num[j]), "%lld",
                     (long long)sale.users[i + j]);
            v[2 + j] = num[j];
        }
        r = redisCommandArgv(rc, (int)(m + 2), v, NULL);
        freeReplyObject(r);
        free(num);
        free(v);
    }
    snprintf(b, sizeof(b), "%lld", (long long)sale.begin_time);
    snprintf(e, sizeof(e), "%lld", (long long)sale.end_time);
    snprintf(in, sizeof(in), "%lld", (long long)sale.initial_stock);
    snprintf(sk, sizeof(sk), "%lld",
             (long long)(sale.initial_stock - (int64_t)sale.nusers));
    snprintf(nu, sizeof(nu), "%zu", sale.nusers);
    for (int i = 0; i < 5; i++)
        argv[i] = k[i];
    argv[5] = b;
    argv[6] = e;
    argv[7] = in;
    argv[8] = sk;
    argv[9] = nu;
    argv[10] = a->consumer;
    snprintf(sp, sizeof(sp), "%lld", (long long)sale.stamp);
    argv[11] = sp;
    r = redis_script_run(rc, &rebuild_script, 5, 12, argv, NULL, &err);
    bool landed = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    free(sale.users);
    if (err)
        return err;
    if (!landed) {
        log_warn("async rebuild dropped: the freeze is not ours any more",
                 "voucher=%lld", (long long)s->voucher_id);
        return -EAGAIN;
    }
    metrics_count(METRIC_ASYNC_REPAIRS, 1);
    log_warn("async sale rebuilt from mysql",
             "voucher=%lld buyers=%zu "
             "stock=%s",
             (long long)s->voucher_id, sale.nusers, sk);
    if (a->cfg.stock_changed)
        a->cfg.stock_changed(a->cfg.ctx, st, s->voucher_id);
    return 0;
}

/*
 * Compare s's Redis state with MySQL: Redis' units taken are its buyers,
 * and they are MySQL's active orders plus the orders still in the stream.
 * Moments of disagreement are normal (an order being written, a unit
 * being returned); the same disagreement twice in a row, a missing state
 * or a frozen one left behind is not, and s is rebuilt.
 */
static void reconcile_one(struct async *a, struct store *st, redisContext *rc,
                          struct sale *s)
{
    struct store_voucher_stats stats;
    long long initial, stock, buyers, backlog, delta;
    char k[KEY_MAX];
    bool frozen = false;
    redisReply *r;

    if (redis_numbers(rc, s->voucher_id, &initial, &stock, &buyers, &backlog) !=
            0 ||
        store_voucher_stats(st, s->voucher_id, &stats) != 0)
        return;
    key(k, s->voucher_id, "frozen");
    r = redisCommand(rc, "EXISTS %s", k);
    frozen = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    delta = initial < 0 ? 1
                        : (initial - stock - buyers) * 1000000 +
                              (buyers - stats.unpaid - stats.paid - backlog);
    if (delta == 0 && !frozen) {
        s->mismatch = 0;
        return;
    }
    /* Orders handed to a writer and not acknowledged may be in MySQL and
     * in the stream at once, for up to a claim period if that writer died
     * between its COMMIT and its XACK: such a disagreement must outlast
     * the claim before it counts. */
    int need =
        pending_count(rc, s->voucher_id) > 0
            ? 2 + (int)((a->cfg.claim_ms + CLAIM_EVERY_MS) / RECONCILE_MS)
            : 2;
    if (initial >= 0 && !frozen && (s->mismatch == 0 || s->delta != delta)) {
        s->mismatch = 1;
        s->delta = delta;
        return;
    }
    if (initial >= 0 && !frozen && ++s->mismatch < need)
        return;
    log_warn("async sale disagrees with mysql",
             "voucher=%lld initial=%lld stock=%lld buyers=%lld backlog=%lld "
             "mysql_unpaid=%lld mysql_paid=%lld frozen=%d",
             (long long)s->voucher_id, initial, stock, buyers, backlog,
             (long long)stats.unpaid, (long long)stats.paid, frozen);
    if (rebuild(a, st, rc, s) == 0)
        s->mismatch = 0;
}

static void reconcile(struct async *a, struct store *st, redisContext *rc)
{
    enum lock_status ls;

    if (a->nsales == 0)
        return;
    if (!a->reconcile_lock &&
        lock_new(a->cfg.locks, "seckill:async:reconcile", &a->reconcile_lock))
        return;
    if (lock_acquire(a->reconcile_lock, 0, 4 * RECONCILE_MS, &ls) != 0 ||
        ls != LOCK_ACQUIRED)
        return;
    for (size_t i = 0; i < a->nsales; i++)
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

/* Look at Redis' durability again: an operator may change it at run time. */
static void durability_look(struct async *a, redisContext *rc)
{
    char why[96];
    bool ok =
        a->cfg.accept_loss || async_redis_durable(rc, why, sizeof(why)) == 0;

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
    for (size_t i = 0; !have_index && i < a->nsales; i++)
        if (a->sales[i].indexed)
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
            if (a->sales[i].backlog || a->sales[i].own_pending)
                did += pump(a, st, rc, &a->sales[i]);
        if (now >= next_claim && now >= a->retry_ms) {
            for (size_t i = 0; i < a->nsales; i++)
                if (a->sales[i].backlog)
                    claim(a, st, rc, &a->sales[i]);
            next_claim = now + CLAIM_EVERY_MS;
        }
        index_prune(a, rc);
        if (now >= next_reconcile) {
            reconcile(a, st, rc);
            next_reconcile = now + RECONCILE_MS;
        }
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
