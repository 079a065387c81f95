/*
 * scripts.c - the Redis side of an async sale (see async.h): its scripts
 * (the preheat, the purchase, the return of a unit), the lookups of
 * orders on their way to MySQL, the durability check, and the helpers
 * the writer shares (keys, the index of sales with work).
 */
#include "async/internal.h"

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

/* Keys and members a SCAN or SSCAN asks for at once. */
#define SCAN_COUNT "1000"

/* ---- keys and scripts ---- */

void async__key(char *buf, int64_t voucher_id, const char *what)
{
    redis_key(buf, KEY_MAX, "{v:%lld}:%s", (long long)voucher_id, what);
}

void async__index_key(char *buf)
{
    redis_key(buf, KEY_MAX, INDEX_KEY);
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
 * (1 sold, 2 sold out, 3 duplicate), or {-n} for the whole batch (-6:
 * paused; a stopped sale is ended). Each sold unit costs one command of
 * its own, the stream's entry; the buyers are looked up and the buyer
 * set and both hashes written once for the batch (a user twice in one
 * batch is a duplicate the second time, as across batches). */
static struct redis_script purchase_script = REDIS_SCRIPT(
    "if redis.call('exists', KEYS[6]) == 1 then return {-1} end "
    "local info = redis.call('hmget', KEYS[1], 'begin', 'end', 'halt') "
    "if not info[1] then return {-1} end "
    "if info[3] == '1' then return {-6} end "
    "if info[3] == '2' then return {-4} end "
    "local t = redis.call('time') "
    "local now = tonumber(t[1]) "
    "if now < tonumber(info[1]) then return {-3} end "
    "if now >= tonumber(info[2]) then return {-4} end "
    "if redis.call('xlen', KEYS[4]) >= tonumber(ARGV[1]) then "
    "return {-5} end "
    "local ms = now * 1000 + math.floor(tonumber(t[2]) / 1000) "
    "local out = {ms} "
    "local stock = tonumber(redis.call('get', KEYS[2]) or '0') "
    "local users = {} "
    "for i = 3, #ARGV, 2 do users[#users + 1] = ARGV[i] end "
    "if #users == 0 then return out end "
    "local had = redis.call('smismember', KEYS[3], unpack(users)) "
    "local sold, pend, hold, taken = {}, {}, {}, {} "
    "for j = 1, #users do "
    "  local o, u = ARGV[2 * j], users[j] "
    "  if had[j] == 1 or taken[u] then "
    "    out[j + 1] = 3 "
    "  elseif stock <= 0 then "
    "    out[j + 1] = 2 "
    "  else "
    "    stock = stock - 1 "
    "    taken[u] = true "
    "    sold[#sold + 1] = u "
    "    redis.call('xadd', KEYS[4], '*', 'o', o, 'u', u, 't', ms) "
    "    pend[#pend + 1] = o "
    "    pend[#pend + 1] = u .. ':' .. ms "
    "    hold[#hold + 1] = u "
    "    hold[#hold + 1] = o "
    "    out[j + 1] = 1 "
    "  end "
    "end "
    "if #sold > 0 then "
    "  redis.call('sadd', KEYS[3], unpack(sold)) "
    "  redis.call('hset', KEYS[5], unpack(pend)) "
    "  redis.call('hset', KEYS[7], unpack(hold)) "
    "  redis.call('decrby', KEYS[2], #sold) "
    "end "
    "return out");

/* KEYS info, stock, frozen; ARGV revision, begin, end, halt, restocked.
 * 1 applied, 0 had it (or a later revision), -1 no state, -2 frozen. The
 * restocks' difference goes to initial and stock together, so that
 * initial = stock + buyers holds at every moment. */
static struct redis_script control_script = REDIS_SCRIPT(
    "local info = redis.call('hmget', KEYS[1], 'initial', 'rev', "
    "'restocked') "
    "if not info[1] then return -1 end "
    "if redis.call('exists', KEYS[3]) == 1 then return -2 end "
    "if (tonumber(info[2]) or 0) >= tonumber(ARGV[1]) then return 0 end "
    "local d = tonumber(ARGV[5]) - (tonumber(info[3]) or 0) "
    "if d ~= 0 then "
    "  redis.call('hincrby', KEYS[1], 'initial', d) "
    "  redis.call('incrby', KEYS[2], d) "
    "end "
    "redis.call('hset', KEYS[1], 'begin', ARGV[2], 'end', ARGV[3], "
    "'halt', ARGV[4], 'restocked', ARGV[5], 'rev', ARGV[1]) "
    "return 1");

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
int async__reply_int(redisReply *r, int err, long long *v, const char *what)
{
    int ret = 0;

    if (!r)
        return err ? err : -EIO;
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

int async__cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

size_t async__ids_unique(int64_t *ids, size_t n)
{
    size_t k = 0;

    if (n == 0)
        return 0;
    qsort(ids, n, sizeof(*ids), async__cmp_id);
    for (size_t i = 1; i < n; i++)
        if (ids[i] != ids[k])
            ids[++k] = ids[i];
    return k + 1;
}

void async__ids_push(int64_t **ids, size_t *n, size_t *cap, int64_t id)
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
int async__scan_ids(struct redis_link *rl, const char *set, const char *match,
                    int (*id_of)(const char *s, size_t len, int64_t *id),
                    int64_t **ids, size_t *n)
{
    size_t cap = 0;
    int err = 0;
    /* A set is one key, on its slot's owner; the keyspace is every
     * primary's (each one walked to its end). */
    int nodes = set ? 1 : redis_link_nodes(rl);

    *ids = NULL;
    *n = 0;
    if (nodes < 0)
        return nodes;
    for (int node = 0; node < nodes && !err; node++) {
        char cursor[32] = "0";
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
            redisReply *r =
                set ? redis_link_command(rl, set, argc, argv, NULL, &err)
                    : redis_link_node_command(rl, node, argc, argv, NULL, &err);

            if (!r) {
                err = err ? err : -EIO;
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
                    async__ids_push(ids, n, &cap, id);
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
    }
    if (err) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        return err;
    }
    *n = async__ids_unique(*ids, *n);
    return 0;
}

int async__index_read(struct redis_link *rl, int64_t **ids, size_t *n)
{
    char idx[KEY_MAX];

    async__index_key(idx);
    return async__scan_ids(rl, idx, NULL, NULL, ids, n);
}

int async_sale_preheat(struct redis_link *rl, int64_t voucher_id,
                       int64_t begin_s, int64_t end_s, int64_t stock,
                       int64_t stamp)
{
    static const char *const names[8] = {"info",   "stock",   "buyers",
                                         "stream", "pending", "dead",
                                         "frozen", "holders"};
    char k[8][KEY_MAX], b[24], e[24], n[24], st[24];
    const char *argv[12];
    long long v = 0;
    int err;

    for (int i = 0; i < 8; i++) {
        async__key(k[i], voucher_id, names[i]);
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
        redis_link_script(rl, &preheat_script, 8, 12, argv, NULL, &err);
    err = async__reply_int(r, err, &v, "preheat");
    return err ? err : v == 0 ? -EEXIST : 0;
}

int async_sale_control(struct redis_link *rl, int64_t voucher_id,
                       const struct store_sale_control *c)
{
    char k[3][KEY_MAX], a[5][24];
    const char *argv[8];
    long long v = 0;
    int err;

    async__key(k[0], voucher_id, "info");
    async__key(k[1], voucher_id, "stock");
    async__key(k[2], voucher_id, "frozen");
    snprintf(a[0], sizeof(a[0]), "%lld", (long long)c->revision);
    snprintf(a[1], sizeof(a[1]), "%lld", (long long)c->begin_time);
    snprintf(a[2], sizeof(a[2]), "%lld", (long long)c->end_time);
    snprintf(a[3], sizeof(a[3]), "%d", (int)c->halt);
    snprintf(a[4], sizeof(a[4]), "%lld", (long long)c->restocked);
    for (int i = 0; i < 3; i++)
        argv[i] = k[i];
    for (int i = 0; i < 5; i++)
        argv[3 + i] = a[i];
    redisReply *r =
        redis_link_script(rl, &control_script, 3, 8, argv, NULL, &err);
    err = async__reply_int(r, err, &v, "control");
    if (err)
        return err;
    return v == -1 ? -ENOENT : v == -2 ? -EBUSY : (int)v;
}

int async_sale_forget(struct redis_link *rl, int64_t voucher_id)
{
    static const char *const names[8] = {"info",   "stock",   "buyers",
                                         "stream", "pending", "dead",
                                         "frozen", "holders"};
    char k[8][KEY_MAX], idx[KEY_MAX];
    const char *argv[9] = {"DEL"};
    redisReply *r;
    int ret = 0, err;

    async__index_key(idx);
    for (int i = 0; i < 8; i++) {
        async__key(k[i], voucher_id, names[i]);
        argv[1 + i] = k[i];
    }
    r = redis_link_command(rl, k[0], 9, argv, NULL, &err);
    if (!r)
        return err;
    if (r->type == REDIS_REPLY_ERROR)
        ret = -EIO;
    freeReplyObject(r);
    r = redis_link_commandf(rl, idx, &err, "SREM %s %lld", idx,
                            (long long)voucher_id);
    if (!r)
        return err;
    freeReplyObject(r);
    return ret;
}

int async_sale_window(struct redis_link *rl, int64_t voucher_id,
                      int64_t *begin_s, int64_t *end_s)
{
    char k[KEY_MAX];
    redisReply *r;
    int ret = -ENOENT, err;

    async__key(k, voucher_id, "info");
    r = redis_link_commandf(rl, k, &err, "HMGET %s begin end", k);
    if (!r)
        return err;
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

int async_purchase(struct redis_link *rl, int64_t voucher_id,
                   unsigned backlog_max, const int64_t *order_ids,
                   const int64_t *users, size_t n,
                   const struct async_confirm *confirm, int64_t deadline_ms,
                   enum async_outcome *out)
{
    static const char *const names[7] = {
        "info", "stock", "buyers", "stream", "pending", "frozen", "holders"};
    char keys[7][KEY_MAX], idx[KEY_MAX], backlog[16], (*nums)[24];
    unsigned replicas = confirm ? confirm->replicas : 0;
    long long acked = 0;
    char *then[2];
    const char *then_keys[2] = {idx, NULL};
    redisReply *r, *then_r[2];
    size_t nthen;
    const char **argv;
    int64_t left = deadline_ms ? deadline_ms - util_mono_ms() : 0;
    int err = 0;

    if (n == 0)
        return 0;
    if (n > BATCH_MAX)
        return -EINVAL;
    nums = xcalloc(2 * n, sizeof(*nums));
    argv = xcalloc(8 + 2 * n, sizeof(*argv));
    async__index_key(idx);
    for (int i = 0; i < 7; i++) {
        async__key(keys[i], voucher_id, names[i]);
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
     * quick, confirming costs no extra wait). On a cluster the WAIT
     * stays behind the script on the connection that runs it, wherever
     * a slot move sends it: it must count the replicas of the node that
     * took the writes. The SADD (at the index's slot owner) follows the
     * script's answer, one round trip more. A script the cluster refuses
     * while the sale's slot moves ran nothing: it is sent again until
     * the batch's deadline. */
    nthen = 0;
    if (redisFormatCommand(&then[nthen++], "SADD %s %lld", idx,
                           (long long)voucher_id) < 0 ||
        (replicas && redisFormatCommand(&then[nthen++], "WAIT %u %u", replicas,
                                        confirm->wait_ms) < 0))
        abort(); /* only out of memory */
    r = redis_link_script_then(
        rl, &purchase_script, 7, (int)(8 + 2 * n), argv, NULL,
        (const char *const *)then, then_keys, nthen, then_r,
        deadline_ms ? (unsigned)(left > 1 ? left : 1) : 0, &err);
    if (r && (!then_r[0] || then_r[0]->type == REDIS_REPLY_ERROR))
        log_warn("async sale not added to the index of sales with work",
                 "voucher=%lld err=\"%s\"", (long long)voucher_id,
                 then_r[0] ? then_r[0]->str : redis_link_errstr(rl, -EIO));
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
            : r->element[0]->integer == -6 ? ASYNC_PAUSED
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
static int returns_run(struct redis_link *rl, int64_t voucher_id,
                       const int64_t *orders, const int64_t *users, size_t n,
                       long long *res)
{
    static const char *const names[5] = {"info", "stock", "buyers", "holders",
                                         "frozen"};
    char k[5][KEY_MAX], o[RETURNS_MAX][24], u[RETURNS_MAX][24];
    const char *argv[RETURNS_MAX][7];
    struct redis_cluster_cmd cmds[RETURNS_MAX];
    redisReply *replies[RETURNS_MAX];
    size_t sent[RETURNS_MAX], m = 0;
    int slot, err;

    for (int i = 0; i < 5; i++)
        async__key(k[i], voucher_id, names[i]);
    slot = (int)redis_key_slot_str(k[0]);
    for (size_t i = 0; i < n; i++) {
        res[i] = -2;
        if (FAILPOINT_FAILS("unit_return_fails"))
            continue;
        if (FAILPOINT_FAILS("unit_return_skip")) {
            res[i] = 2; /* a planted bug: taken as back, and never is */
            continue;
        }
        snprintf(o[m], sizeof(o[m]), "%lld", (long long)orders[i]);
        snprintf(u[m], sizeof(u[m]), "%lld", (long long)users[i]);
        for (int j = 0; j < 5; j++)
            argv[m][j] = k[j];
        argv[m][5] = o[m];
        argv[m][6] = u[m];
        cmds[m] = (struct redis_cluster_cmd){.slot = slot,
                                             .script = &return_script,
                                             .nkeys = 5,
                                             .argc = 7,
                                             .argv = argv[m]};
        sent[m++] = i;
    }
    if (m == 0)
        return 0;
    /* One round trip (on a cluster, to the sale's primary); each answer
     * in order. */
    err = redis_link_pipeline(rl, cmds, m, replies);
    for (size_t j = 0; j < m; j++) {
        redisReply *r = replies[j];
        size_t i = sent[j];

        if (!r)
            continue;
        if (r->type == REDIS_REPLY_INTEGER)
            res[i] = r->integer;
        else
            log_warn("async unit return refused by redis",
                     "voucher=%lld order=%lld err=\"%s\"",
                     (long long)voucher_id, (long long)orders[i],
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected");
        freeReplyObject(r);
    }
    return err;
}

/* async_units_return(); sweeping: a record of a sale that has no state
 * in Redis is dropped too (its state, when rebuilt, is read from MySQL,
 * which has the unit back; a sale retired long ago has none). */
int async__units_return(struct store *st, int64_t voucher_id,
                        const int64_t *orders, const int64_t *users, size_t n,
                        bool sweeping, size_t *returned)
{
    struct redis_link *rl = store_redis_link(st);
    long long res[RETURNS_MAX];
    int64_t done[RETURNS_MAX];
    size_t back = 0;
    int err = 0;

    if (returned)
        *returned = 0;
    if (!rl)
        return -ENOTCONN;
    for (size_t i = 0; i < n && !err; i += RETURNS_MAX) {
        size_t m = n - i < RETURNS_MAX ? n - i : RETURNS_MAX, k = 0;

        err = returns_run(rl, voucher_id, orders + i, users + i, m, res);
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
    return async__units_return(st, voucher_id, orders, users, n, false,
                               returned);
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
 * HGET fields[i] of the key "what" of each sale vouchers[i], i < n (at
 * most LOOKUP_MAX; a NULL field is skipped, its reply NULL), in one
 * pipelined round trip (on a cluster, one per primary, all at once):
 * replies[i] (the caller frees each). 0 or -errno as
 * redis_link_pipeline().
 */
static int hget_each(struct redis_link *rl, const int64_t *vouchers,
                     const char *const *fields, size_t n, const char *what,
                     redisReply **replies)
{
    char k[LOOKUP_MAX][KEY_MAX];
    const char *argv[LOOKUP_MAX][3];
    struct redis_cluster_cmd cmds[LOOKUP_MAX];
    redisReply *got[LOOKUP_MAX];
    size_t m = 0;
    int err;

    for (size_t i = 0; i < n; i++) {
        replies[i] = NULL;
        if (!fields[i])
            continue;
        async__key(k[m], vouchers[i], what);
        argv[m][0] = "HGET";
        argv[m][1] = k[m];
        argv[m][2] = fields[i];
        cmds[m] = (struct redis_cluster_cmd){
            .slot = (int)redis_key_slot_str(k[m]), .argc = 3, .argv = argv[m]};
        m++;
    }
    err = m ? redis_link_pipeline(rl, cmds, m, got) : 0;
    for (size_t i = 0, j = 0; i < n; i++)
        if (fields[i])
            replies[i] = got[j++];
    return err;
}

static void replies_free(redisReply **r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        freeReplyObject(r[i]);
}

/*
 * The orders of user_id waiting in the streams of vouchers[0..n) (n at
 * most LOOKUP_MAX), appended to out while *found < max: which order the
 * user holds in each sale, then which of those still wait for MySQL. Two
 * pipelined round trips at most. 0 or -errno.
 */
static int pending_of_user_in(struct redis_link *rl, const int64_t *vouchers,
                              size_t n, int64_t user_id,
                              struct async_pending *out, size_t max,
                              size_t *found)
{
    char user[24], held_s[LOOKUP_MAX][24];
    const char *fields[LOOKUP_MAX];
    int64_t held[LOOKUP_MAX] = {0};
    redisReply *r[LOOKUP_MAX];
    int err;

    snprintf(user, sizeof(user), "%lld", (long long)user_id);
    for (size_t i = 0; i < n; i++)
        fields[i] = user;
    err = hget_each(rl, vouchers, fields, n, "holders", r);
    for (size_t i = 0; i < n; i++) {
        if (!r[i] || r[i]->type != REDIS_REPLY_STRING ||
            util_parse_id(r[i]->str, r[i]->len, &held[i]) != 0)
            held[i] = 0;
        snprintf(held_s[i], sizeof(held_s[i]), "%lld", (long long)held[i]);
        fields[i] = held[i] ? held_s[i] : NULL;
    }
    replies_free(r, n);
    if (err)
        return err;
    err = hget_each(rl, vouchers, fields, n, "pending", r);
    for (size_t i = 0; i < n; i++) {
        int64_t u, t;

        if (r[i] && pending_parse(r[i], &u, &t) == 0 && u == user_id &&
            *found < max)
            out[(*found)++] = (struct async_pending){.order_id = held[i],
                                                     .voucher_id = vouchers[i],
                                                     .accepted_ms = t};
    }
    replies_free(r, n);
    return err;
}

int async_pending_of_user(struct redis_link *rl, int64_t user_id,
                          struct async_pending *out, size_t max, size_t *found)
{
    int64_t *ids;
    size_t n;
    int err = async__index_read(rl, &ids, &n);

    *found = 0;
    for (size_t i = 0; !err && i < n && *found < max; i += LOOKUP_MAX)
        err = pending_of_user_in(rl, ids + i,
                                 n - i < LOOKUP_MAX ? n - i : LOOKUP_MAX,
                                 user_id, out, max, found);
    free(ids);
    return err;
}

int async_pending_find(struct redis_link *rl, int64_t order_id,
                       int64_t *voucher_id, int64_t *user_id,
                       int64_t *accepted_ms)
{
    char order[24];
    const char *fields[LOOKUP_MAX];
    redisReply *r[LOOKUP_MAX];
    int64_t *ids;
    size_t n;
    int ret = async__index_read(rl, &ids, &n);

    if (ret)
        return ret;
    snprintf(order, sizeof(order), "%lld", (long long)order_id);
    for (size_t j = 0; j < LOOKUP_MAX; j++)
        fields[j] = order;
    ret = -ENOENT;
    for (size_t i = 0; i < n && ret == -ENOENT; i += LOOKUP_MAX) {
        size_t m = n - i < LOOKUP_MAX ? n - i : LOOKUP_MAX;
        int err = hget_each(rl, ids + i, fields, m, "pending", r);

        for (size_t j = 0; j < m; j++) {
            if (!r[j])
                continue;
            if (ret == -ENOENT &&
                pending_parse(r[j], user_id, accepted_ms) == 0) {
                *voucher_id = ids[i + j];
                ret = 0;
            } else if (r[j]->type == REDIS_REPLY_ERROR && ret == -ENOENT) {
                ret = -EIO;
            }
        }
        replies_free(r, m);
        if (err && ret == -ENOENT) {
            ret = err;
            break;
        }
    }
    free(ids);
    return ret;
}

/* One value of CONFIG GET name on node i, or "" (a buffer of len). */
static int config_get(struct redis_link *rl, int i, const char *name, char *out,
                      size_t len)
{
    int err;
    redisReply *r =
        redis_link_node_commandf(rl, i, &err, "CONFIG GET %s", name);

    out[0] = '\0';
    if (!r)
        return err ? err : -EIO;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(out, len, "%s", r->element[1]->str);
    else
        err = -ENOTSUP; /* CONFIG renamed or refused */
    freeReplyObject(r);
    return err;
}

int async_redis_durable(struct redis_link *rl, char *why, size_t len)
{
    char aof[16], fsync[16], name[REDIS_CLUSTER_HOST_LEN + 8];
    int nodes = redis_link_nodes(rl);

    if (nodes < 0) {
        snprintf(why, len, "no cluster slot map: cannot tell");
        return nodes;
    }
    /* Every primary: each holds the sales of its slots. */
    for (int i = 0; i < nodes; i++) {
        int err = config_get(rl, i, "appendonly", aof, sizeof(aof));
        const char *who = "";

        if (redis_link_is_cluster(rl)) {
            redis_link_node_name(rl, i, name, sizeof(name) - 2);
            strcat(name, ": ");
            who = name;
        }

        if (!err)
            err = config_get(rl, i, "appendfsync", fsync, sizeof(fsync));
        if (err == -ENOTSUP) {
            snprintf(why, len, "%sCONFIG GET is not allowed: cannot tell", who);
            return err;
        }
        if (err) {
            snprintf(why, len, "%sno answer (err %d): cannot tell now", who,
                     err);
            return err;
        }
        if (strcmp(aof, "yes") != 0 || strcmp(fsync, "always") != 0) {
            snprintf(why, len, "%sappendonly %s, appendfsync %s", who, aof,
                     fsync);
            return -EPERM;
        }
    }
    snprintf(why, len, "appendonly yes, appendfsync always");
    return 0;
}
