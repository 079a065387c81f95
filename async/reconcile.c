/*
 * reconcile.c - the reconciliation of async sales (see async.h): one
 * instance at a time, holding the reconciliation's lock, compares each
 * sale's Redis state with MySQL's orders up to the place in the stream
 * Redis had reached (async/compare.h); a sale that disagrees twice in a
 * row is frozen and rebuilt from MySQL, step by step on the writer's loop,
 * without ever holding it. Also whose sale a sale is (async__sale_ours()).
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
/* A sale of another database is looked at again this often. */
#define OWNER_RECHECK_MS 10000

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
bool async__sale_ours(struct store *st, struct redis_link *rl, struct sale *s)
{
    char k[KEY_MAX];
    int64_t mine, theirs = 0, now = util_mono_ms();
    redisReply *r;
    int err, rerr;

    if (s->owner > 0 || (s->owner < 0 && now - s->owner_ms < OWNER_RECHECK_MS))
        return s->owner > 0;
    err = store_async_stamp_read(st, s->voucher_id, &mine);
    if (err && err != -ENOENT)
        return false; /* MySQL away: asked again next time */
    async__key(k, s->voucher_id, "info");
    r = err ? NULL : redis_link_commandf(rl, k, &rerr, "HGET %s stamp", k);
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
 * there, restocked, the revision of the controls it has}. An entry acknowledged
 * and left behind is always the oldest sooner or later, as the entries around
 * it are settled and deleted.
 */
static struct redis_script snapshot_script = REDIS_SCRIPT(
    LUA_HELPERS
    "local info = redis.call('hmget', KEYS[1], 'initial', 'written', "
    "  'restocked', 'rev') "
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
    "  orphan, tonumber(info[3]) or 0, tonumber(info[4]) or 0}");

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
 * MySQL's orders, the sale's creation stamp, and the controls' state
 * (halt, revision, restocked) of the same snapshot. 1 when rebuilt; 0 (changed
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
    "  'initial', ARGV[3], 'written', ARGV[7], 'stamp', ARGV[9], "
    "  'halt', ARGV[10], 'rev', ARGV[11], 'restocked', ARGV[12]) "
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
/* KEYS frozen; ARGV rebuilder: lift the freeze if it is still its. */
static struct redis_script freeze_lift_script =
    REDIS_SCRIPT("if redis.call('get', KEYS[1]) == ARGV[1] then "
                 "return redis.call('del', KEYS[1]) end return 0");

static struct redis_script freeze_keep_script =
    REDIS_SCRIPT("if redis.call('get', KEYS[1]) == ARGV[1] then "
                 "return redis.call('pexpire', KEYS[1], ARGV[2]) end "
                 "return 0");

/*
 * s's Redis numbers at one moment (snapshot_script): 0 with *out and
 * frozen_by (the freeze's owner, "" when not frozen) set, or -errno.
 */
static int redis_state_read(struct redis_link *rl, int64_t v,
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
        async__key(k[i], v, names[i]);
        argv[i] = k[i];
    }
    r = redis_link_script(rl, &snapshot_script, 6, 6, argv, NULL, &err);
    if (!r)
        return err ? err : -EIO;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 10 ||
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
    out->restocked = r->element[8]->integer;
    out->revision = r->element[9]->integer;
    snprintf(frozen_by, len, "%s", r->element[6]->str);
    freeReplyObject(r);
    return 0;
}

/*
 * s's two sides as they are now: Redis' numbers, then MySQL's orders up
 * to the place in the stream Redis had reached (ms->initial -1 and
 * *revision 0 when Redis has no state for s). 0, or -errno: nothing to
 * compare.
 */
static int sides_read(struct store *st, struct redis_link *rl, int64_t v,
                      struct async_redis_side *rs, struct async_mysql_side *ms,
                      int64_t *revision, char *frozen_by, size_t len)
{
    struct store_async_counts c;
    int err = redis_state_read(rl, v, rs, frozen_by, len);

    *ms = (struct async_mysql_side){.initial = -1};
    *revision = 0;
    if (err || rs->initial < 0)
        return err;
    FAILPOINT("reconcile_between_reads");
    err = store_async_counts_read(st, v, (int64_t)rs->last_pos, &c);
    if (err)
        return err;
    ms->initial = c.initial_stock;
    ms->active = c.active;
    ms->orders = c.orders;
    ms->owed = c.owed;
    ms->restocked = c.restocked;
    *revision = c.revision;
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
 * Whether s, frozen by this rebuilder with nothing in flight, agrees with
 * MySQL after all; if so the freeze is lifted and the rebuild ends
 * without one. The reconciliation reads Redis before MySQL, so a unit
 * that came back to Redis between the two reads, its record in MySQL
 * dropped, looks like a unit never returned; under a slow link to MySQL
 * that can happen two rounds in a row. While the freeze lasts no unit
 * comes back and no purchase lands (the scripts refuse a frozen sale),
 * so what disagrees now disagrees for good.
 */
static bool agrees_frozen(struct async *a, struct store *st,
                          struct redis_link *rl, struct sale *s)
{
    struct async_redis_side rs;
    struct async_mysql_side ms;
    struct async_disagreement d;
    char frozen_by[CONSUMER_MAX], k[KEY_MAX];
    const char *argv[2] = {k, a->consumer};
    int64_t revision;
    redisReply *r;
    int err;

    if (sides_read(st, rl, s->voucher_id, &rs, &ms, &revision, frozen_by,
                   sizeof(frozen_by)) ||
        rs.initial < 0 || strcmp(frozen_by, a->consumer) != 0 ||
        revision > rs.revision || !async_sale_compare(&rs, &ms, &d))
        return false;
    async__key(k, s->voucher_id, "frozen");
    r = redis_link_script(rl, &freeze_lift_script, 1, 2, argv, NULL, &err);
    freeReplyObject(r);
    if (!r)
        return false; /* Redis away: the next step looks again */
    s->rebuilding = false;
    s->mismatch = 0;
    log_info("async sale agrees with mysql once frozen: not rebuilt",
             "voucher=%lld frozen_ms=%lld", (long long)s->voucher_id,
             (long long)(util_mono_ms() - s->rebuild_since_ms));
    return true;
}

/*
 * The end of s's rebuild, with nothing in flight: set the buyers to
 * MySQL's active orders' users, the stock to the initial stock minus them,
 * the written orders to MySQL's, and the stream's next position past
 * every order MySQL has, and lift the freeze, in one script that checks
 * the freeze is still this rebuilder's and nothing went in flight.
 */
static void rebuild_finish(struct async *a, struct store *st,
                           struct redis_link *rl, struct sale *s)
{
    char k[9][KEY_MAX + 64], b[24], e[24], in[24], sk[24], nu[24], wr[24];
    char last[48], freeze_ms[16], sp[24], ha[8], rv[24], rs[24], what[KEY_MAX];
    const char *argv[21];
    struct store_async_sale sale;
    redisReply *r;
    int err;

    if (agrees_frozen(a, st, rl, s))
        return;
    async__key(k[0], s->voucher_id, "info");
    async__key(k[1], s->voucher_id, "stock");
    async__key(k[2], s->voucher_id, "buyers");
    snprintf(what, sizeof(what), "rebuild:%s", a->consumer);
    async__key(k[3], s->voucher_id, what);
    async__key(k[4], s->voucher_id, "frozen");
    async__key(k[5], s->voucher_id, "stream");
    async__key(k[6], s->voucher_id, "pending");
    async__key(k[7], s->voucher_id, "holders");
    snprintf(what, sizeof(what), "rebuild-holders:%s", a->consumer);
    async__key(k[8], s->voucher_id, what);
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
    freeReplyObject(
        redis_link_commandf(rl, k[3], &err, "DEL %s %s", k[3], k[8]));
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
        r = redis_link_command(rl, k[3], (int)(m + 2), v, NULL, &err);
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
        r = redis_link_command(rl, k[8], (int)(2 * m + 2), v, NULL, &err);
        freeReplyObject(r);
        free(num);
        free(v);
        /* A large sale takes a while: the freeze and the lock are kept. */
        freeReplyObject(
            redis_link_script(rl, &freeze_keep_script, 1, 3, keep, NULL, &err));
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
    snprintf(ha, sizeof(ha), "%d", (int)sale.halt);
    snprintf(rv, sizeof(rv), "%lld", (long long)sale.revision);
    snprintf(rs, sizeof(rs), "%lld", (long long)sale.restocked);
    argv[18] = ha;
    argv[19] = rv;
    argv[20] = rs;
    r = redis_link_script(rl, &rebuild_script, 9, 21, argv, NULL, &err);
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
static void rebuild_step(struct async *a, struct store *st,
                         struct redis_link *rl, struct sale *s)
{
    char k[3][KEY_MAX], freeze_ms[16], most[16];
    const char *argv[6] = {k[0], k[1], k[2], a->consumer, freeze_ms, most};
    long long x[5] = {0};
    int64_t now = util_mono_ms();
    redisReply *r;
    int err;

    async__key(k[0], s->voucher_id, "stream");
    async__key(k[1], s->voucher_id, "pending");
    async__key(k[2], s->voucher_id, "frozen");
    snprintf(freeze_ms, sizeof(freeze_ms), "%d", FREEZE_MS);
    snprintf(most, sizeof(most), "%d", REQUEUE_MAX);
    r = redis_link_script(rl, &drain_script, 3, 6, argv, NULL, &err);
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
    rebuild_finish(a, st, rl, s);
}

/*
 * Start rebuilding s's Redis state from MySQL: freeze its purchases (the
 * freeze carries this writer's name: one rebuilder per sale, even if two
 * instances reconcile at once, a lock lease that ran out, instances on
 * different lock backends), then take the first step. The writers'
 * loop takes the next ones (async__rebuilds_step()) until it is rebuilt.
 */
static void rebuild_start(struct async *a, struct store *st,
                          struct redis_link *rl, struct sale *s)
{
    char k[KEY_MAX];
    redisReply *r;
    int err;

    async__key(k, s->voucher_id, "frozen");
    r = redis_link_commandf(rl, k, &err, "SET %s %s PX %d NX", k, a->consumer,
                            FREEZE_MS);
    bool ours = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!ours) {
        r = redis_link_commandf(rl, k, &err, "GET %s", k);
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
    rebuild_step(a, st, rl, s);
}

/* The next step of every rebuild this writer has going, on its loop. */
void async__rebuilds_step(struct async *a, struct store *st)
{
    int64_t now = util_mono_ms();

    for (size_t i = 0; i < a->nsales && !async__stopping(a); i++) {
        struct sale *s = &a->sales[i];
        struct redis_link *rl;

        if (!s->rebuilding || now < s->rebuild_next_ms)
            continue;
        /* Afresh for each sale: a finished rebuild tells the voucher
         * caches through the store, which may replace the connection. */
        if (!(rl = store_redis_link(st)))
            return;
        s->rebuild_next_ms = now + REBUILD_STEP_MS;
        rebuild_step(a, st, rl, s);
    }
}

/* Bring voucher_id's Redis state up to the controls committed in MySQL
 * (it had revision had). */
static void control_catch_up(struct store *st, struct redis_link *rl,
                             int64_t voucher_id, int64_t had)
{
    struct store_sale_control c;
    int err = store_sale_control_read(st, voucher_id, &c);

    if (!err)
        err = async_sale_control(rl, voucher_id, &c);
    if (err == 1)
        log_info("async sale brought up to its controls by the "
                 "reconciliation",
                 "voucher=%lld from=%lld to=%lld", (long long)voucher_id,
                 (long long)had, (long long)c.revision);
    else if (err < 0)
        log_warn("async sale controls not applied", "voucher=%lld err=%d",
                 (long long)voucher_id, err);
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
static void reconcile_one(struct async *a, struct store *st,
                          struct redis_link *rl, struct sale *s)
{
    struct async_redis_side rs;
    struct async_mysql_side ms;
    struct async_disagreement d;
    char frozen_by[CONSUMER_MAX];
    int64_t revision;

    if (s->rebuilding)
        return; /* async__rebuilds_step() takes it on */
    if (!async__sale_ours(st, rl, s))
        return;
    if (sides_read(st, rl, s->voucher_id, &rs, &ms, &revision, frozen_by,
                   sizeof(frozen_by)))
        return;
    if (frozen_by[0] && strcmp(frozen_by, a->consumer) != 0) {
        s->mismatch = 0; /* another instance rebuilds it */
        return;
    }
    if (rs.initial >= 0 && revision > rs.revision && !frozen_by[0]) {
        /* A control committed in MySQL that Redis does not have yet: its
         * instance applies it in a moment, or died first. */
        control_catch_up(st, rl, s->voucher_id, rs.revision);
        s->mismatch = 0;
        return;
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
             "mysql_active=%lld mysql_orders=%lld mysql_owed=%lld frozen=%d",
             (long long)s->voucher_id, d.missing, d.orphan, d.initial, d.units,
             d.buyers, d.in_flight, rs.initial, rs.stock, rs.buyers,
             rs.unsettled, rs.written, ms.active, ms.orders, ms.owed,
             frozen_by[0] != '\0');
    rebuild_start(a, st, rl, s);
}

void async__reconcile(struct async *a, struct store *st)
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
    /* The connection afresh for each sale: a rebuild tells the voucher
     * caches through the store, which may replace it after a failover. */
    for (size_t i = 0;
         i < a->nsales && !async__stopping(a) && reconcile_lock_keep(a); i++) {
        struct redis_link *rl = store_redis_link(st);

        if (!rl)
            break;
        reconcile_one(a, st, rl, &a->sales[i]);
    }
    lock_release(a->reconcile_lock, NULL);
}
