/*
 * idgen.c - the Redis ID worker (seed 002, section 1): a timestamp in the
 * high 32 bits and the day's counter in the low 32 bits, both picked by
 * one Lua script on the Redis server so that a restart that loses the
 * counter can never repeat an id (see idgen.h for the argument). The
 * script reserves a block of counter values at once (INCRBY); the
 * process hands them out from memory until the block is used up, too old
 * or of another day.
 */
#include "idgen/idgen.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/redis_link.h"
#include "common/util.h"

/*
 * KEYS[1] the clock hash; KEYS[2..4] the counters of days ARGV[1] + 0..2;
 * ARGV[2] the counters' TTL; ARGV[3] how many counter values to reserve;
 * optionally ARGV[4..6] the same days' counters under their names from
 * before the hash tag (idgen.h): in another slot, so not declared as keys,
 * which only a server that is not a cluster allows.
 * Replies {t, n}: the values n - ARGV[3] + 1 .. n of t's day are this
 * caller's. Or {-1, microseconds to wait} while ids are paused after a
 * change of server, or {-2, t} when t's day is not among the keys given
 * (the caller's guess of the day was wrong).
 */
static const char script[] =
    "local run = string.match(redis.call('INFO', 'server'), "
    "'run_id:(%x+)')\n"
    "local tm = redis.call('TIME')\n"
    "local now, us = tonumber(tm[1]), tonumber(tm[2])\n"
    "local c = redis.call('HMGET', KEYS[1], 'run', 'born', 'last')\n"
    "local last = tonumber(c[3]) or 0\n"
    "if c[1] ~= run then\n"
    /* A server that has not handed out ids yet (restarted, flushed,
     * promoted): ids handed out before used seconds up to now or last. */
    "  local born = math.max(now, last)\n"
    "  redis.call('HSET', KEYS[1], 'run', run, 'born', born, 'last', born)\n"
    "  return {-1, (born - now) * 1000000 + 1000000 - us}\n"
    "end\n"
    "local born = tonumber(c[2]) or 0\n"
    "local t = math.max(now, last)\n"
    "if t <= born then\n"
    "  return {-1, (born - now) * 1000000 + 1000000 - us}\n"
    "end\n"
    "local i = math.floor(t / 86400) - tonumber(ARGV[1])\n"
    "if i < 0 or i > 2 then\n"
    "  return {-2, t}\n"
    "end\n"
    "if t ~= last then\n"
    "  redis.call('HSET', KEYS[1], 'last', t)\n"
    "end\n"
    "local n = redis.call('INCRBY', KEYS[2 + i], ARGV[3])\n"
    "if #ARGV > 3 then\n"
    /* Both counters end at the larger value, so the other's next block
     * starts above this one. */
    "  local o = redis.call('INCRBY', ARGV[4 + i], ARGV[3])\n"
    "  if o > n then\n"
    "    n = o\n"
    "    redis.call('SET', KEYS[2 + i], n)\n"
    "  elseif n > o then\n"
    "    redis.call('SET', ARGV[4 + i], n)\n"
    "  end\n"
    "  redis.call('EXPIRE', ARGV[4 + i], ARGV[2])\n"
    "end\n"
    "redis.call('EXPIRE', KEYS[2 + i], ARGV[2])\n"
    "return {t, n}\n";

static struct redis_script id_script = REDIS_SCRIPT(script);

/* Server time minus local time, in seconds: the next guess of the day. */
static atomic_llong skew_s;

static atomic_bool legacy = true;

void idgen_legacy_keys(bool on)
{
    atomic_store(&legacy, on);
}

static int prefix_ok(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n > IDGEN_PREFIX_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
              p[i] == '_'))
            return 0;
    return 1;
}

int64_t idgen_compose(int64_t now_s, uint32_t seq)
{
    return (now_s - IDGEN_EPOCH) << IDGEN_SEQ_BITS | (int64_t)seq;
}

void idgen_decode(int64_t id, int64_t *epoch_s, uint32_t *seq)
{
    bool sharded = idgen_is_sharded(id);

    if (sharded)
        id &= ~(INT64_C(1) << IDGEN_SHARDED_BIT);
    *epoch_s = (id >> IDGEN_SEQ_BITS) + IDGEN_EPOCH;
    *seq = (uint32_t)(id & 0xffffffffLL);
    if (sharded)
        *seq >>= IDGEN_SHARD_BITS;
}

bool idgen_is_sharded(int64_t id)
{
    return id > 0 && (id >> IDGEN_SHARDED_BIT) == 1;
}

unsigned idgen_shard_of(int64_t id)
{
    return idgen_is_sharded(id) ? (unsigned)(id & (IDGEN_SHARDS_MAX - 1)) : 0;
}

int idgen_shard_compose(int64_t id, unsigned shard, int64_t *out)
{
    uint32_t seq = (uint32_t)(id & 0xffffffffLL);

    if (shard >= IDGEN_SHARDS_MAX || id <= 0 || id >> IDGEN_SHARDED_BIT != 0)
        return -EINVAL;
    if (seq > IDGEN_SHARDED_SEQ_MAX)
        return -EOVERFLOW;
    *out = INT64_C(1) << IDGEN_SHARDED_BIT |
           (id >> IDGEN_SEQ_BITS) << IDGEN_SEQ_BITS |
           (int64_t)seq << IDGEN_SHARD_BITS | (int64_t)shard;
    return 0;
}

int idgen_day_key(const char *prefix, int64_t now_s, char *buf, size_t len)
{
    struct tm tm;
    time_t t = (time_t)now_s;

    gmtime_r(&t, &tm);
    return redis_key(buf, len, "icr:{%s}:%04d:%02d:%02d", prefix,
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday) < 0
               ? -ENAMETOOLONG
               : 0;
}

int idgen_legacy_day_key(const char *prefix, int64_t now_s, char *buf,
                         size_t len)
{
    struct tm tm;
    time_t t = (time_t)now_s;

    gmtime_r(&t, &tm);
    return redis_key(buf, len, "icr:%s:%04d:%02d:%02d", prefix,
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday) < 0
               ? -ENAMETOOLONG
               : 0;
}

int idgen_clock_key(const char *prefix, char *buf, size_t len)
{
    return redis_key(buf, len, "icr:{%s}:clock", prefix) < 0 ? -ENAMETOOLONG
                                                             : 0;
}

int idgen_window(const char *prefix, int64_t hint_s,
                 char keys[IDGEN_WINDOW][IDGEN_KEY_MAX], int64_t *first_day)
{
    /* Floor division: the day of a time before 1970 is negative. */
    int64_t day = hint_s >= 0 ? hint_s / 86400 : -((-hint_s + 86399) / 86400);

    *first_day = day - 1;
    for (int i = 0; i < IDGEN_WINDOW; i++)
        if (idgen_day_key(prefix, (*first_day + i) * 86400, keys[i],
                          IDGEN_KEY_MAX))
            return -ENAMETOOLONG;
    return 0;
}

/*
 * Run the script once with the window of days around hint_s, reserving
 * count values. Returns 0 with *a and *b set to the reply's two integers,
 * or a negative errno.
 */
int idgen_script_args(const char *prefix, int64_t hint_s, uint32_t count,
                      struct idgen_args *bufs, const char *argv[IDGEN_ARGS_MAX],
                      int *nkeys)
{
    int64_t first_day;
    int argc = 0;

    if (idgen_clock_key(prefix, bufs->clock, IDGEN_KEY_MAX) ||
        idgen_window(prefix, hint_s, bufs->days, &first_day))
        return -ENAMETOOLONG;
    argv[argc++] = bufs->clock;
    for (int i = 0; i < IDGEN_WINDOW; i++)
        argv[argc++] = bufs->days[i];
    *nkeys = argc;
    snprintf(bufs->first, sizeof(bufs->first), "%lld", (long long)first_day);
    snprintf(bufs->ttl, sizeof(bufs->ttl), "%d", IDGEN_KEY_TTL_S);
    snprintf(bufs->cnt, sizeof(bufs->cnt), "%u", count);
    argv[argc++] = bufs->first;
    argv[argc++] = bufs->ttl;
    argv[argc++] = bufs->cnt;
    if (atomic_load(&legacy))
        for (int i = 0; i < IDGEN_WINDOW; i++) {
            if (idgen_legacy_day_key(prefix, (first_day + i) * 86400,
                                     bufs->legacy[i], IDGEN_KEY_MAX))
                return -ENAMETOOLONG;
            argv[argc++] = bufs->legacy[i];
        }
    return argc;
}

static int run_script(struct redis_link *l, const char *prefix, int64_t hint_s,
                      uint32_t count, long long *a, long long *b)
{
    struct idgen_args bufs;
    const char *argv[IDGEN_ARGS_MAX];
    redisReply *r;
    int argc, nkeys, err = 0;

    argc = idgen_script_args(prefix, hint_s, count, &bufs, argv, &nkeys);
    if (argc < 0)
        return -EINVAL;
    r = redis_link_script(l, &id_script, nkeys, argc, argv, NULL, &err);
    if (!r) {
        log_warn("redis command failed", "op=idgen_next err=\"%s\"",
                 redis_link_errstr(l, err));
        return -ECONNRESET;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER) {
        log_warn("redis reply unexpected", "op=idgen_next type=%d err=\"%s\"",
                 r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
        err = -EIO;
        goto out;
    }
    *a = r->element[0]->integer;
    *b = r->element[1]->integer;
out:
    freeReplyObject(r);
    return err;
}

/* A reserved range of counter values of one second's day. */
struct range {
    int64_t t;           /* the server second of the reservation */
    uint32_t next, last; /* values next..last; empty when next > last */
};

/*
 * Reserve count values for prefix: one script call, more after a change
 * of server (sleeping through the pause) or a wrong guess of the day.
 * Returns 0 with *out set (it may hold fewer than count values at the top
 * of the counter's range), or as idgen_next().
 */
static int reserve(struct redis_link *l, const char *prefix, uint32_t count,
                   struct range *out)
{
    int64_t deadline = util_mono_ms() + IDGEN_WAIT_MAX_MS;
    long long a, b, first;
    int misses = 0, err;

    for (;;) {
        int64_t local = util_now_ms() / 1000;

        err =
            run_script(l, prefix, local + atomic_load(&skew_s), count, &a, &b);
        if (err)
            return err;
        if (a == -2 && misses++ < 2) {
            /* This clock is off by a day or more: guess the server's. */
            atomic_store(&skew_s, b - local);
            continue;
        }
        if (a != -1)
            break;
        /* Ids are paused after a change of server: sleep past the
         * second it started in, then ask again. */
        if (b < 0 || util_mono_ms() + b / 1000 > deadline) {
            log_warn("id worker paused", "prefix=%s wait_us=%lld", prefix, b);
            return -ETIMEDOUT;
        }
        log_info("id worker waits for the next second after a redis change",
                 "prefix=%s wait_us=%lld", prefix, b);
        struct timespec ts = {(time_t)(b / 1000000),
                              (long)(b % 1000000) * 1000 + 1000000};
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        nanosleep(&ts, NULL);
    }
    if (a < IDGEN_EPOCH || a - IDGEN_EPOCH > INT32_MAX) {
        log_error("id worker time out of range", "t=%lld", a);
        return -EINVAL;
    }
    first = b - (long long)count + 1;
    if (first <= 0 || first > (long long)UINT32_MAX) {
        log_error("id counter overflow", "prefix=%s t=%lld n=%lld", prefix, a,
                  b);
        return -EOVERFLOW;
    }
    atomic_store(&skew_s, a - util_now_ms() / 1000);
    out->t = a;
    out->next = (uint32_t)first;
    /* The top of the range may pass 2^32 - 1: those values are lost. */
    out->last = b > (long long)UINT32_MAX ? UINT32_MAX : (uint32_t)b;
    return 0;
}

/*
 * The block of one prefix, shared by the process's threads. Invariant:
 * every value of [next, last] of t's day counter was reserved by this
 * process and not handed out yet.
 */
struct block {
    char prefix[IDGEN_PREFIX_MAX + 1];
    pthread_mutex_t mu;
    struct range r;
    int64_t taken_ms; /* monotonic time of the reservation */
    uint32_t used;    /* values handed out from r */
    uint32_t size;    /* size of the next reservation */
};

static struct block blocks[IDGEN_BLOCKS_MAX];
static atomic_int nblocks;
static pthread_mutex_t blocks_mu = PTHREAD_MUTEX_INITIALIZER;

/* The block of prefix, created on first use; NULL when the table is full
 * (that prefix then reserves one value per id). */
static struct block *block_of(const char *prefix)
{
    int n = atomic_load_explicit(&nblocks, memory_order_acquire);
    struct block *b = NULL;

    for (int i = 0; i < n; i++)
        if (strcmp(blocks[i].prefix, prefix) == 0)
            return &blocks[i];
    pthread_mutex_lock(&blocks_mu);
    n = atomic_load_explicit(&nblocks, memory_order_relaxed);
    for (int i = 0; i < n && !b; i++)
        if (strcmp(blocks[i].prefix, prefix) == 0)
            b = &blocks[i];
    if (!b && n < IDGEN_BLOCKS_MAX) {
        b = &blocks[n];
        snprintf(b->prefix, sizeof(b->prefix), "%s", prefix);
        pthread_mutex_init(&b->mu, NULL);
        b->r.next = 1; /* empty */
        b->size = IDGEN_BLOCK_MIN;
        atomic_store_explicit(&nblocks, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&blocks_mu);
    return b;
}

/* Floor division of a time by a day. */
static int64_t day_of(int64_t s)
{
    return s >= 0 ? s / 86400 : -((-s + 86399) / 86400);
}

/*
 * Whether b's block may still hand out ids at monotonic time now_ms: not
 * used up, younger than IDGEN_BLOCK_MAX_AGE_MS (a monotonic clock that
 * went backwards, as under libfaketime, counts as too old) and of the
 * day the server is in by our guess.
 */
static bool block_fresh(const struct block *b, int64_t now_ms)
{
    int64_t age = now_ms - b->taken_ms;
    int64_t server_s = util_now_ms() / 1000 + atomic_load(&skew_s);

    return b->r.next <= b->r.last && age >= 0 && age < IDGEN_BLOCK_MAX_AGE_MS &&
           day_of(server_s) == day_of(b->r.t);
}

/* The size of the reservation that replaces b's block. */
static uint32_t block_next_size(const struct block *b, int64_t now_ms)
{
    uint32_t size = IDGEN_BLOCK_MIN;

    if (b->used == 0)
        return b->size;
    if (b->r.next > b->r.last && now_ms - b->taken_ms >= 0 &&
        now_ms - b->taken_ms < IDGEN_BLOCK_MAX_AGE_MS)
        /* Used up while young: the demand is higher. */
        size = b->size * 2;
    else
        /* Aged out or a new day: as many as were used, rounded up. */
        while (size < b->used)
            size *= 2;
    return size < IDGEN_BLOCK_MAX ? size : IDGEN_BLOCK_MAX;
}

int idgen_next(struct redis_link *l, const char *prefix, int64_t *id)
{
    struct block *b;
    struct range r;
    int64_t now_ms;
    int err;

    if (!prefix_ok(prefix))
        return -EINVAL;
    b = block_of(prefix);
    if (!b) {
        err = reserve(l, prefix, 1, &r);
        if (!err)
            *id = idgen_compose(r.t, r.next);
        return err;
    }

    pthread_mutex_lock(&b->mu);
    now_ms = util_mono_ms();
    if (!block_fresh(b, now_ms)) {
        uint32_t size = block_next_size(b, now_ms);

        /* Under the mutex: the other threads would only wait for the
         * same round trip (or the same pause after a change of server). */
        err = reserve(l, prefix, size, &r);
        if (err)
            goto unlock;
        b->r = r;
        b->taken_ms = util_mono_ms();
        b->used = 0;
        b->size = size;
    }
    *id = idgen_compose(b->r.t, b->r.next);
    /* next passes last (empty) without wrapping: last < 2^32 - 1 or the
     * block is dropped below. */
    if (b->r.next == UINT32_MAX)
        b->r.last = 0;
    else
        b->r.next++;
    b->used++;
    err = 0;
unlock:
    pthread_mutex_unlock(&b->mu);
    return err;
}

void idgen_discard(const char *prefix)
{
    struct block *b;

    if (!prefix_ok(prefix) || !(b = block_of(prefix)))
        return;
    pthread_mutex_lock(&b->mu);
    b->r.next = 1;
    b->r.last = 0;
    b->used = 0;
    b->size = IDGEN_BLOCK_MIN;
    pthread_mutex_unlock(&b->mu);
}
