/*
 * writer.c - one instance's writer of async sales (see async.h): a thread
 * that finds the sales with orders on their way (the index of sales with
 * work, MySQL's list, this instance's hints), reads their streams as a
 * consumer of the group "writers", writes the orders to MySQL and settles
 * them, claims what a silent writer left, keeps the index tidy, gives
 * Redis the units it is owed, looks at Redis' durability, and runs the
 * reconciliation (reconcile.c) on the same loop.
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

#include <sodium.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/redis.h"
#include "common/util.h"

/* How often the writer re-reads the async vouchers, claims what dead
 * consumers left, and (with the lock) reconciles. */
#define REFRESH_MS 2000
/* How often it walks the keyspace for sales with orders on their way
 * that the index lacks (and once when it starts). */
#define SWEEP_MS 60000
#define CLAIM_EVERY_MS 1000
/* An idle writer looks again this often; a sale on this instance wakes
 * it at once (async_voucher_hint()). */
#define IDLE_SLEEP_MS 200
/* Units owed to Redis (async_units_return()): looked for this often, when
 * recorded at least this long ago, this many at a time. */
#define RETURNS_EVERY_MS 500
#define RETURNS_AGE_MS 500
#define RETURNS_SWEEP_MAX 256

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
 * the entry leaves the stream either way, with every settled entry older
 * than the oldest still in flight. {written, the 1-based numbers
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
    /* One HDEL for the whole batch. The settled entries leave the stream
     * by a trim up to the oldest entry still in flight (the oldest pending
     * one, or the first not delivered yet), not by XDEL of their ids: that
     * finds each id in its stream node, and cost more than the rest of the
     * purchase's Redis work together. An entry settled while an older one
     * of another writer is in flight stays until that one is settled. */
    "if #settled > 0 then redis.call('hdel', KEYS[2], unpack(settled)) end "
    "if #ids > 0 then "
    "  local p = redis.pcall('xpending', KEYS[1], 'writers') "
    "  local keep = type(p) == 'table' and not p.err and p[2] "
    "  if type(p) == 'table' and not p.err and not keep then "
    "    for _, g in ipairs(redis.call('xinfo', 'groups', KEYS[1])) do "
    "      local f = {} "
    "      for j = 1, #g, 2 do f[g[j]] = g[j + 1] end "
    "      if f['name'] == 'writers' then "
    "        local ms, seq = string.match(f['last-delivered-id'], "
    "'^(%d+)-(%d+)$') "
    "        keep = ms .. '-' .. string.format('%d', tonumber(seq) + 1) "
    "      end "
    "    end "
    "  end "
    "  if keep then redis.call('xtrim', KEYS[1], 'MINID', keep) end "
    "end "
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
static void settle(struct redis_link *rl, int64_t voucher_id, struct entry *e,
                   size_t n)
{
    const char **argv = xcalloc(4 + 2 * n, sizeof(*argv));
    char k[4][KEY_MAX], (*rec)[96] = xcalloc(n, sizeof(*rec));
    size_t *at = xcalloc(n, sizeof(*at)), m = 0;
    redisReply *r;
    int err;

    async__key(k[0], voucher_id, "stream");
    async__key(k[1], voucher_id, "pending");
    async__key(k[2], voucher_id, "dead");
    async__key(k[3], voucher_id, "info");
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
    r = redis_link_script(rl, &settle_script, 4, (int)(4 + 2 * m), argv, NULL,
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
static size_t write_entries(struct store *st, struct redis_link *rl,
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
        /* MySQL refused this sale's orders (it is away, or its shard, or
         * this sale's rows): keep them, read them again later. The sale
         * waits; the others are written meanwhile. */
        s->own_pending = true;
        if (!s->backoff_ms)
            log_warn("async orders not written yet: mysql failed",
                     "voucher=%lld n=%zu err=%d", (long long)s->voucher_id, k,
                     err);
        s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : 50;
        if (s->backoff_ms > 1000)
            s->backoff_ms = 1000;
        s->retry_ms = util_mono_ms() + s->backoff_ms;
        free(e);
        return 0;
    }
    if (s->backoff_ms) {
        log_info("async orders written again", "voucher=%lld",
                 (long long)s->voucher_id);
        s->backoff_ms = 0;
    }
    FAILPOINT("async_write_after_commit");
    for (size_t i = 0, j = 0; i < n; i++)
        if (e[i].valid)
            e[i].o.result = o[j++].result;
    settle(rl, s->voucher_id, e, n);
    free(e);
    return n;
}

/* Make the consumer group of s's stream (from its start). */
static void group_ensure(struct redis_link *rl, struct sale *s)
{
    char k[KEY_MAX];
    redisReply *r;
    int err;

    if (s->group_ready)
        return;
    async__key(k, s->voucher_id, "stream");
    r = redis_link_commandf(rl, k, &err,
                            "XGROUP CREATE %s " GROUP " 0 MKSTREAM", k);
    if (r &&
        (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "BUSYGROUP", 9) == 0))
        s->group_ready = true;
    freeReplyObject(r);
}

/* Read and write a batch of s's new orders (or of those this consumer
 * still holds). Returns how many. */
static size_t pump(struct async *a, struct store *st, struct redis_link *rl,
                   struct sale *s)
{
    char k[KEY_MAX], count[16];
    const char *start = s->own_pending ? "0" : ">";
    redisReply *r;
    size_t n = 0;
    int err;

    group_ensure(rl, s);
    if (!s->group_ready)
        return 0;
    async__key(k, s->voucher_id, "stream");
    snprintf(count, sizeof(count), "%u", a->cfg.batch);
    r = redis_link_commandf(
        rl, k, &err, "XREADGROUP GROUP " GROUP " %s COUNT %s STREAMS %s %s",
        a->consumer, count, k, start);
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "NOGROUP"))
        s->group_ready = false; /* the stream is gone (Redis lost it) */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[0]->elements == 2) {
        const redisReply *list = r->element[0]->element[1];

        n = write_entries(st, rl, s, list);
        if (s->own_pending && list->type == REDIS_REPLY_ARRAY &&
            list->elements == 0)
            s->own_pending = false; /* held nothing more */
    } else if (s->own_pending && r->type != REDIS_REPLY_ERROR) {
        s->own_pending = false;
    }
    freeReplyObject(r);
    return n;
}

/* A consumer that has not read for this long and holds no order is
 * forgotten (looked for this often per sale). */
#define CONSUMER_FORGET_MS 60000

/* KEYS stream; ARGV group, idle_ms, me. Every consumer of the group but
 * me that holds no order and has not read for idle_ms is deleted, in one
 * step with the look (holding nothing, it loses nothing; one still alive
 * is made again by its next read). The number deleted. */
static struct redis_script consumers_forget_script = REDIS_SCRIPT(
    "local n = 0 "
    "for _, c in ipairs(redis.call('xinfo', 'consumers', KEYS[1], "
    "ARGV[1])) do "
    "local f = {} "
    "for i = 1, #c, 2 do f[c[i]] = c[i + 1] end "
    "if f['name'] ~= ARGV[3] and f['pending'] == 0 and "
    "f['idle'] >= tonumber(ARGV[2]) then "
    "redis.call('xgroup', 'delconsumer', KEYS[1], ARGV[1], f['name']) "
    "n = n + 1 end end "
    "return n");

/*
 * Each process names its consumer anew (a restarted one is a new
 * consumer), so a group would keep one consumer per process that ever
 * read it and then died: once their orders were claimed, forget them.
 */
static void consumers_forget(struct async *a, struct redis_link *rl,
                             struct sale *s)
{
    char k[KEY_MAX], idle[24];
    const char *argv[4];
    int64_t now = util_mono_ms();
    redisReply *r;
    int err;

    if (now < s->forget_at_ms)
        return;
    s->forget_at_ms = now + CONSUMER_FORGET_MS;
    async__key(k, s->voucher_id, "stream");
    snprintf(idle, sizeof(idle), "%d", CONSUMER_FORGET_MS);
    argv[0] = k;
    argv[1] = GROUP;
    argv[2] = idle;
    argv[3] = a->consumer;
    r = redis_link_script(rl, &consumers_forget_script, 1, 4, argv, NULL, &err);
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0)
        log_info("async consumers gone forgotten", "voucher=%lld n=%lld",
                 (long long)s->voucher_id, (long long)r->integer);
    freeReplyObject(r);
}

/* Take over the orders other consumers (dead ones) left unacknowledged
 * for claim_ms, and write them. */
static void claim(struct async *a, struct store *st, struct redis_link *rl,
                  struct sale *s)
{
    char k[KEY_MAX];
    redisReply *r;
    int err;

    if (!s->group_ready)
        return;
    async__key(k, s->voucher_id, "stream");
    r = redis_link_commandf(rl, k, &err,
                            "XAUTOCLAIM %s " GROUP " %s %u 0-0 COUNT %u", k,
                            a->consumer, a->cfg.claim_ms, a->cfg.batch);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        r->element[1]->type == REDIS_REPLY_ARRAY &&
        r->element[1]->elements > 0) {
        log_info("async orders claimed from a silent writer",
                 "voucher=%lld n=%zu", (long long)s->voucher_id,
                 r->element[1]->elements);
        write_entries(st, rl, s, r->element[1]);
    }
    freeReplyObject(r);
    consumers_forget(a, rl, s);
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
static void backlogs_look(struct async *a, struct redis_link *rl, bool all)
{
    char k[KEY_MAX], idx[KEY_MAX];
    size_t *at = xcalloc(a->nsales + 1, sizeof(*at)), m = 0, added = 0;
    struct redis_link_batch b;

    redis_link_batch_init(&b, rl);
    async__index_key(idx);
    for (size_t i = 0; i < a->nsales; i++)
        if (all || a->sales[i].indexed) {
            async__key(k, a->sales[i].voucher_id, "stream");
            redis_link_appendf(&b, k, "XLEN %s", k);
            at[m++] = i;
        }
    for (size_t j = 0; j < m; j++) {
        redisReply *r = NULL;

        if (redis_link_get_reply(&b, &r) != REDIS_OK)
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
        async__key(k, s->voucher_id, "stream");
        redis_link_appendf(&b, k, "XRANGE %s - + COUNT 1", k);
        if (!s->indexed)
            redis_link_appendf(&b, idx, "SADD %s %lld", idx,
                               (long long)s->voucher_id);
        at[m++] = i;
    }
    for (size_t j = 0; j < m; j++) {
        struct sale *s = &a->sales[at[j]];
        redisReply *r = NULL;
        int64_t oldest = 0;

        if (redis_link_get_reply(&b, &r) != REDIS_OK)
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
        if (redis_link_get_reply(&b, &r) != REDIS_OK)
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
    redis_link_batch_end(&b);
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
static void index_prune(struct async *a, struct redis_link *rl)
{
    char k[KEY_MAX], idx[KEY_MAX];
    size_t *at = xcalloc(a->nsales + 1, sizeof(*at)), m = 0, back = 0;
    redisReply **r = xcalloc(2 * a->nsales + 2, sizeof(*r));
    bool cluster = redis_link_is_cluster(rl);
    struct redis_link_batch b;

    redis_link_batch_init(&b, rl);
    async__index_key(idx);
    for (size_t i = 0; i < a->nsales; i++) {
        const struct sale *s = &a->sales[i];

        if (!s->indexed || s->backlog)
            continue;
        redis_link_appendf(&b, idx, "SREM %s %lld", idx,
                           (long long)s->voucher_id);
        /* One connection runs each XLEN after its SREM. */
        if (!cluster) {
            async__key(k, s->voucher_id, "stream");
            redis_link_appendf(&b, k, "XLEN %s", k);
        }
        at[m++] = i;
    }
    if (cluster) {
        /* The index and the streams are on other primaries: every
         * removal is done before any stream is looked at. */
        for (size_t j = 0; j < m; j++)
            if (redis_link_get_reply(&b, &r[2 * j]) != REDIS_OK)
                goto out;
        for (size_t j = 0; j < m; j++) {
            async__key(k, a->sales[at[j]].voucher_id, "stream");
            redis_link_appendf(&b, k, "XLEN %s", k);
        }
        for (size_t j = 0; j < m; j++)
            if (redis_link_get_reply(&b, &r[2 * j + 1]) != REDIS_OK)
                goto out;
    } else {
        for (size_t j = 0; j < 2 * m; j++)
            if (redis_link_get_reply(&b, &r[j]) != REDIS_OK)
                goto out;
    }
    for (size_t j = 0; j < m; j++) {
        struct sale *s = &a->sales[at[j]];

        if (r[2 * j + 1]->type == REDIS_REPLY_INTEGER &&
            r[2 * j + 1]->integer == 0) {
            s->indexed = false;
        } else {
            redis_link_appendf(&b, idx, "SADD %s %lld", idx,
                               (long long)s->voucher_id);
            back++;
        }
    }
    for (size_t j = 0; j < back; j++) {
        redisReply *x = NULL;

        if (redis_link_get_reply(&b, &x) != REDIS_OK)
            break;
        freeReplyObject(x);
    }
out:
    for (size_t j = 0; j < 2 * m; j++)
        freeReplyObject(r[j]);
    redis_link_batch_end(&b);
    free(r);
    free(at);
}

/* The voucher id of a key "{v:ID}:..." (after the Redis prefix). */
static int sale_key_id(const char *s, size_t len, int64_t *id)
{
    size_t p = strlen(redis_prefix());

    if (len < p || memcmp(s, redis_prefix(), p) != 0)
        return -EINVAL;
    s += p;
    len -= p;

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
static void sweep(struct redis_link *rl)
{
    char k[KEY_MAX], idx[KEY_MAX], match[KEY_MAX];
    int64_t *ids;
    size_t n, added = 0;
    struct redis_link_batch b;

    redis_link_batch_init(&b, rl);
    async__index_key(idx);
    /* The prefix holds no glob character (common/redis_keys.h). */
    redis_key(match, sizeof(match), "{v:*}:pending");
    if (async__scan_ids(rl, NULL, match, sale_key_id, &ids, &n) != 0)
        return;
    for (size_t i = 0; i < n; i += LOOKUP_MAX) {
        size_t m = n - i < LOOKUP_MAX ? n - i : LOOKUP_MAX, back = 0;

        for (size_t j = 0; j < m; j++) {
            async__key(k, ids[i + j], "stream");
            redis_link_appendf(&b, k, "XLEN %s", k);
        }
        for (size_t j = 0; j < m; j++) {
            redisReply *r = NULL;

            if (redis_link_get_reply(&b, &r) != REDIS_OK)
                goto out;
            if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
                redis_link_appendf(&b, idx, "SADD %s %lld", idx,
                                   (long long)ids[i + j]);
                back++;
            }
            freeReplyObject(r);
        }
        for (size_t j = 0; j < back; j++) {
            redisReply *r = NULL;

            if (redis_link_get_reply(&b, &r) != REDIS_OK)
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
    redis_link_batch_end(&b);
    free(ids);
}

static void sale_init(struct sale *s, int64_t voucher_id)
{
    memset(s, 0, sizeof(*s));
    s->voucher_id = voucher_id;
    /* What this writer may still hold of it first (a sale that left the
     * working set and came back). */
    s->own_pending = true;
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

/* How many replicas the Redis of rl has online (INFO replication: the
 * slaveN lines with state=online), 0 when it cannot say. On a cluster
 * the most any primary has: a batch's WAIT runs on its sale's primary,
 * and one count serves them all (a primary with fewer replicas answers
 * its batches UNCONFIRMED, never a 202 only it holds). */
static unsigned replicas_online(struct redis_link *rl)
{
    int nodes = redis_link_nodes(rl);
    unsigned most = 0;

    for (int i = 0; i < nodes; i++) {
        int err;
        redisReply *r =
            redis_link_node_commandf(rl, i, &err, "INFO replication");
        unsigned n = 0;

        if (r && r->type == REDIS_REPLY_STRING)
            for (const char *p = r->str; (p = strstr(p, "\nslave")); p++) {
                const char *end = strchr(p + 1, '\n');
                const char *online = strstr(p, "state=online");

                if (online && (!end || online < end))
                    n++;
            }
        freeReplyObject(r);
        most = n > most ? n : most;
    }
    return most;
}

/*
 * The replicas a batch must reach before its 202s: those online, or, when
 * Redis is found through sentinels, every replica they know if that is
 * more. A replica that is down or still waiting for its first copy does
 * not confirm anything, yet a failover may promote it: while it exists,
 * a batch answers 503 (outcome unknown) rather than a 202 that only the
 * primary holds.
 */
static unsigned replicas_to_reach(const struct async *a, struct redis_link *rl)
{
    struct redis_server rs;
    unsigned n = rl ? replicas_online(rl) : 0;
    int known;

    store_redis_server(a->cfg.store, &rs);
    known = redis_server_replicas(&rs);
    return known > (int)n ? (unsigned)known : n;
}

/* Look at Redis' durability again: an operator may change it at run time. */
static void durability_look(struct async *a, struct redis_link *rl)
{
    char why[192];
    int err =
        a->cfg.accept_loss ? 0 : async_redis_durable(rl, why, sizeof(why));
    bool ok = err == 0;

    atomic_store(&a->replicas_seen, replicas_to_reach(a, rl));
    /* A primary that does not answer now (a link cut, a failover) says
     * nothing of the others, nor of itself: the last verdict stands.
     * Only a primary that answers it may lose writes (-EPERM), or that
     * will not say (-ENOTSUP), changes it. */
    if (err && err != -EPERM && err != -ENOTSUP)
        return;
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
    a->nlisted = async__ids_unique(ids, n);
    /* Hinted sales are in MySQL (committed before the hint): listed now
     * if they are still to be looked after. */
    a->nhinted = 0;
}

/*
 * Make the working set anew: the sales in the index (read now; as they
 * were when Redis cannot say), those MySQL listed, and those hinted.
 * Sales that stay keep their state; new ones join with a fresh one.
 */
static void sales_update(struct async *a, struct redis_link *rl)
{
    int64_t *idx, *hints, *all;
    size_t nidx, nhints, n = 0;
    bool have_index = async__index_read(rl, &idx, &nidx) == 0;
    struct sale *next, *old;

    pthread_mutex_lock(&a->mu);
    hints = a->hints;
    nhints = a->nhints;
    a->hints = NULL;
    a->nhints = a->hints_cap = 0;
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < nhints; i++)
        async__ids_push(&a->hinted, &a->nhinted, &a->hinted_cap, hints[i]);
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
    n = async__ids_unique(all, n);
    next = xcalloc(n + 1, sizeof(*next));
    for (size_t i = 0; i < n; i++) {
        const struct sale *s = sale_find(a, all[i]);

        if (s)
            next[i] = *s;
        else
            sale_init(&next[i], all[i]);
        if (have_index)
            next[i].indexed = nidx && bsearch(&all[i], idx, nidx, sizeof(*idx),
                                              async__cmp_id) != NULL;
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
static void consumers_leave(struct async *a, struct redis_link *rl)
{
    char k[KEY_MAX];

    for (size_t i = 0; rl && i < a->nsales; i++) {
        redisReply *r;
        int err;

        if (!a->sales[i].group_ready)
            continue;
        async__key(k, a->sales[i].voucher_id, "stream");
        r = redis_link_commandf(rl, k, &err, "XPENDING %s " GROUP " - + 1 %s",
                                k, a->consumer);
        bool holds = !r || r->type != REDIS_REPLY_ARRAY || r->elements > 0;
        freeReplyObject(r);
        if (!holds)
            freeReplyObject(redis_link_commandf(
                rl, k, &err, "XGROUP DELCONSUMER %s " GROUP " %s", k,
                a->consumer));
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
        if (async__units_return(st, owed[i].voucher_id, orders, users, k, true,
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
    uint64_t map_seen = 0;

    for (;;) {
        struct redis_link *rl = store_redis_link(st);
        int64_t now = util_mono_ms();
        bool look_all = false;
        size_t did = 0;

        pthread_mutex_lock(&a->mu);
        bool stop = a->stop;
        pthread_mutex_unlock(&a->mu);
        if (stop)
            break;
        if (!rl) {
            if (sleep_or_stop(a, 200))
                break;
            continue;
        }
        /*
         * Every step below takes the connection afresh: a step that
         * talks to Redis through the store (a unit return, a rebuild)
         * may have replaced it, after a failover, and freed the one
         * taken before.
         */
#define RC_AGAIN()                                                             \
    if (!(rl = store_redis_link(st)))                                          \
    goto idle
        /* On a cluster, a new slot map may name a new primary (a
         * failover): its durability is looked at at once. */
        if (redis_link_is_cluster(rl) &&
            redis_cluster_stats(rl->cluster).refresh != map_seen) {
            map_seen = redis_cluster_stats(rl->cluster).refresh;
            next_refresh = now;
        }
        if (now >= next_refresh) {
            durability_look(a, rl);
            listed_refresh(a, st);
            next_refresh = now + REFRESH_MS;
            look_all = true;
        }
        RC_AGAIN();
        if (now >= next_sweep) {
            sweep(rl);
            next_sweep = now + SWEEP_MS;
        }
        sales_update(a, rl);
        backlogs_look(a, rl, look_all);
        for (size_t i = 0; i < a->nsales && !async__stopping(a); i++) {
            RC_AGAIN();
            if ((a->sales[i].backlog || a->sales[i].own_pending) &&
                now >= a->sales[i].retry_ms &&
                async__sale_ours(st, rl, &a->sales[i]))
                did += pump(a, st, rl, &a->sales[i]);
        }
        if (now >= next_claim) {
            for (size_t i = 0; i < a->nsales && !async__stopping(a); i++) {
                RC_AGAIN();
                if (a->sales[i].backlog && now >= a->sales[i].retry_ms &&
                    async__sale_ours(st, rl, &a->sales[i]))
                    claim(a, st, rl, &a->sales[i]);
            }
            next_claim = now + CLAIM_EVERY_MS;
        }
        RC_AGAIN();
        index_prune(a, rl);
        if (now >= next_reconcile) {
            async__reconcile(a, st);
            next_reconcile = now + a->cfg.reconcile_ms;
        }
        if (now >= a->next_returns_ms) {
            returns_sweep(a, st);
            a->next_returns_ms = now + RETURNS_EVERY_MS;
        }
        async__rebuilds_step(a, st);
#undef RC_AGAIN
    idle:
        if (!did && sleep_or_kick(a, IDLE_SLEEP_MS, true))
            break;
    }
    consumers_leave(a, store_redis_link(st));
    lock_free(a->reconcile_lock);
    a->reconcile_lock = NULL;
    store_free(st);
    return NULL;
}

/*
 * This process's consumer name into buf (CONSUMER_MAX): the whole host
 * name, the pid and 64 random bits drawn now, "<host>-<pid>-<hex>".
 * Neither of the first two is unique alone: in containers the pid is 1,
 * and the pods of one deployment may share a host name, or differ only
 * far into it. The random bits make the name this process start's own,
 * readable in XINFO CONSUMERS and the logs.
 */
static void consumer_name(char *buf)
{
    char host[HOST_NAME_MAX + 1] = "";
    unsigned char rnd[8];
    char hex[2 * sizeof(rnd) + 1];

    if (gethostname(host, sizeof(host)) != 0 || !host[0])
        snprintf(host, sizeof(host), "host");
    host[HOST_NAME_MAX] = '\0';
    randombytes_buf(rnd, sizeof(rnd));
    sodium_bin2hex(hex, sizeof(hex), rnd, sizeof(rnd));
    snprintf(buf, CONSUMER_MAX, "%s-%ld-%s", host, (long)getpid(), hex);
}

struct async *async_start(const struct async_config *cfg)
{
    struct async *a = xcalloc(1, sizeof(*a));

    a->cfg = *cfg;
    if (a->cfg.batch < 1 || a->cfg.batch > BATCH_MAX)
        a->cfg.batch = BATCH_MAX;
    if (a->cfg.claim_ms < 100)
        a->cfg.claim_ms = 100;
    if (a->cfg.reconcile_ms == 0)
        a->cfg.reconcile_ms = ASYNC_RECONCILE_MS;
    consumer_name(a->consumer);
    log_info("async writer started", "consumer=%s", a->consumer);
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
        struct redis_link *rl = store_redis_link(st);
        char why[192];

        atomic_store(&a->may_sell,
                     rl && async_redis_durable(rl, why, sizeof(why)) == 0);
        store_free(st);
    }
    {
        /* The replicas to wait for, known before the first sale. */
        struct store *st = store_new(a->cfg.store);
        struct redis_link *rl = store_redis_link(st);

        atomic_store(&a->replicas_seen, replicas_to_reach(a, rl));
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
        async__ids_push(&a->hints, &a->nhints, &a->hints_cap, voucher_id);
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
