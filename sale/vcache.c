/*
 * vcache.c - the per-instance voucher cache of the purchase (see
 * vcache.h): what step 1 of a purchase needs to know about a voucher
 * (does it exist, its type, its sale window) and whether it is sold out,
 * so that the crowd that
 * keeps buying after a sale has sold out (or before it starts, after it
 * ends, or for an id that does not exist) is answered from memory,
 * without a MySQL or Redis round trip.
 *
 * How stale it can be, and why that is safe. MySQL decides every sale
 * (the CAS "stock = stock - 1 WHERE stock > 0" of the purchase
 * transaction); this cache only decides which requests are refused
 * before they get there.
 *
 *   - The sold-out flag is set when a purchase found no stock (its CAS
 *     matched no row) or step 1 read stock <= 0. It goes away
 *       (1) at once, on every instance, when stock changes: whoever
 *           changes it calls vcache_voucher_changed(), which publishes
 *           the voucher id on the Redis channel
 *           seckill:voucher-changed:<redis db>, and each instance's
 *           subscriber thread drops the entry;
 *       (2) after ttl_ms (SECKILL_SOLDOUT_TTL_MS, default 1 s), because a
 *           message can be lost (Redis down, the subscriber reconnecting,
 *           a change made by hand without a publish);
 *       (3) with the whole cache whenever the subscriber (re)subscribes,
 *           since it may have missed messages while it was away.
 *     A voucher that gets stock again is therefore refused for as long as
 *     the message takes to arrive, or when it is lost for ttl_ms plus one
 *     background MySQL read (see the refresh below), at most 2 * ttl_ms.
 *     A stale "sold out" can only refuse a sale, never make one: it
 *     cannot oversell.
 *   - An entry without the flag ("has stock") lets purchases go on to the
 *     transaction without re-reading the row; when the stock ran out
 *     meanwhile, the transaction answers SOLD_OUT and sets the flag. A
 *     stale "has stock" costs one transaction per instance.
 *   - An unknown id (404) is remembered for ttl_ms like the flag, and
 *     creating a voucher publishes its id like a stock change.
 *   - The sale window and the pause change through the operator's
 *     controls (sale/controls.c), which publish the id like a stock
 *     change; they are re-read at least every META_TTL_MS (a paused
 *     entry every ttl_ms) in case a message was lost or someone edited
 *     the row by hand. NOT_STARTED, ENDED and PAUSED are decided from
 *     the cached entry and the clock; a stale entry cannot sell what a
 *     pause or a stop forbids: the purchase's own CAS or script checks
 *     the sale's halt.
 *   - An invalidation that races with a fill (a request read the row
 *     before the change and stores it after the message was handled) is
 *     caught by a generation number: every invalidation bumps it, and a
 *     fill or a flag whose request started under an older generation is
 *     not stored.
 * Refresh: when an entry's time is up, the first request that sees it
 * queues its id for the refresher thread (which has its own MySQL
 * connection) and every request keeps answering from the entry until the
 * new row is in, for at most another ttl_ms; only then (MySQL down or
 * slower than that) do requests read the row themselves, as without the
 * cache. So a crowd costs one MySQL read per voucher per ttl_ms, and the
 * request threads (each serves many connections) never wait for it.
 *
 * Structure: a fixed table of SETS sets of WAYS entries (bounded: a crowd
 * of random ids only evicts each other), the set picked by a hash of the
 * id. Readers take no lock and (once an entry is warm) write nothing
 * shared: each set is a seqlock (a counter that is odd while a writer
 * changes the set; a reader retries when it changed under it). Writers
 * (fills, flags, claims, invalidations: rare) take the set's mutex.
 * Eviction is CLOCK: a read sets the entry's reference bit (only if
 * clear), and the eviction hand passes over referenced entries once, so
 * the hot voucher stays.
 */
#include "sale/vcache.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/util.h"
#include "sale/subscriber.h"

#define SET_BITS 8
#define SETS (1u << SET_BITS)
#define WAYS 8 /* SETS * WAYS = 2048 vouchers */
/* Type and sale window are re-read at least this often. */
#define META_TTL_MS 30000
/* A refresh that did not arrive is asked for again after this. */
#define RETRY_MAX_MS 100
/* Ids waiting for the refresher; when full, the next request asks again. */
#define QUEUE_LEN 64

/* Entry bits: kind, then the sold-out flag, the voucher type (one bit),
 * its purchase mode and its admission. */
enum { KIND_EMPTY = 0, KIND_MISSING = 1, KIND_VOUCHER = 2, KIND_MASK = 3 };
#define BIT_SOLD_OUT 4u
#define TYPE_SHIFT 3
#define BIT_ASYNC 16u
#define BIT_QUEUE 32u
#define BIT_PAUSED 64u

/*
 * Every field is atomic so that readers racing a writer are not a data
 * race; the seqlock tells them to throw such a read away. Writers store
 * the fields with release after making the counter odd, readers load them
 * with acquire before checking the counter again: a reader that sees any
 * store of a writer also sees its odd counter and retries. (No fences:
 * plain moves on x86, and ThreadSanitizer understands it.)
 */
struct slot {
    _Atomic int64_t id; /* 0: empty */
    _Atomic int64_t begin_time;
    _Atomic int64_t end_time;
    _Atomic int64_t expires_ms; /* monotonic: refresh from then on */
    _Atomic int64_t dead_ms;    /* monotonic: unusable from then on */
    _Atomic uint32_t bits;
    atomic_uchar ref; /* CLOCK reference bit, outside the seqlock */
};

struct set {
    pthread_mutex_t mu; /* writers */
    atomic_uint seq;    /* odd while a writer changes the slots */
    unsigned hand;      /* CLOCK hand, under mu */
    struct slot slot[WAYS];
};

struct vcache {
    unsigned ttl_ms; /* 0: lookups always miss, no threads */
    unsigned retry_ms;
    atomic_uint_fast64_t gen; /* bumped by every invalidation */
    struct set *sets;
    const struct store_config *sc;
    char channel[REDIS_PREFIX_MAX + 64];
    struct subscriber *subscriber; /* NULL: not started */
    /* the refresher thread and its queue, under queue_mu */
    pthread_mutex_t queue_mu;
    pthread_cond_t queue_cond;
    int64_t queue[QUEUE_LEN];
    unsigned queue_head, queue_len;
    bool stopping;
    pthread_t refresher;
    bool refresher_started;
};

/* A copy of one entry, read under the seqlock. */
struct snap {
    int64_t begin_time, end_time, expires_ms, dead_ms;
    uint32_t bits;
    int way;
};

static struct set *set_of(struct vcache *vc, int64_t id)
{
    /* Fibonacci hashing: consecutive ids spread over the sets. */
    uint64_t h = (uint64_t)id * UINT64_C(0x9E3779B97F4A7C15);
    return &vc->sets[h >> (64 - SET_BITS)];
}

/* Find id in s without a lock. False if it is not there. */
static bool set_read(struct set *s, int64_t id, struct snap *out)
{
    for (unsigned tries = 0;; tries++) {
        unsigned seq = atomic_load_explicit(&s->seq, memory_order_acquire);

        if (!(seq & 1)) {
            out->way = -1;
            for (int w = 0; w < WAYS; w++) {
                struct slot *e = &s->slot[w];
                if (atomic_load_explicit(&e->id, memory_order_acquire) != id)
                    continue;
                out->begin_time =
                    atomic_load_explicit(&e->begin_time, memory_order_acquire);
                out->end_time =
                    atomic_load_explicit(&e->end_time, memory_order_acquire);
                out->expires_ms =
                    atomic_load_explicit(&e->expires_ms, memory_order_acquire);
                out->dead_ms =
                    atomic_load_explicit(&e->dead_ms, memory_order_acquire);
                out->bits =
                    atomic_load_explicit(&e->bits, memory_order_acquire);
                out->way = w;
                break;
            }
            if (atomic_load_explicit(&s->seq, memory_order_relaxed) == seq)
                return out->way >= 0;
        }
        /* A writer is in the middle (a few stores): let it finish, also
         * when it was preempted on this core. */
        if (tries >= 8)
            sched_yield();
    }
}

/* Writers, under s->mu: bracket changes to the slots. */
static void write_begin(struct set *s)
{
    unsigned seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
}

static void write_end(struct set *s)
{
    unsigned seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_release);
}

/* Under s->mu: the way holding id, or -1. */
static int find_way(struct set *s, int64_t id)
{
    for (int w = 0; w < WAYS; w++)
        if (atomic_load_explicit(&s->slot[w].id, memory_order_relaxed) == id)
            return w;
    return -1;
}

/* Under s->mu: a way for a new entry: an empty one, else CLOCK's pick. */
static int victim_way(struct set *s)
{
    int w = find_way(s, 0);

    if (w >= 0)
        return w;
    /* After one sweep every reference bit is clear: at most 2 * WAYS. */
    for (;;) {
        struct slot *e = &s->slot[s->hand];
        w = (int)s->hand;
        s->hand = (s->hand + 1) % WAYS;
        if (!atomic_load_explicit(&e->ref, memory_order_relaxed))
            return w;
        atomic_store_explicit(&e->ref, 0, memory_order_relaxed);
    }
}

/* Under s->mu, between write_begin and write_end. */
static void slot_store(struct slot *e, int64_t id, int64_t begin_time,
                       int64_t end_time, int64_t expires_ms, int64_t dead_ms,
                       uint32_t bits)
{
    atomic_store_explicit(&e->id, id, memory_order_release);
    atomic_store_explicit(&e->begin_time, begin_time, memory_order_release);
    atomic_store_explicit(&e->end_time, end_time, memory_order_release);
    atomic_store_explicit(&e->expires_ms, expires_ms, memory_order_release);
    atomic_store_explicit(&e->dead_ms, dead_ms, memory_order_release);
    atomic_store_explicit(&e->bits, bits, memory_order_release);
}

/* Under s->mu: drop id's entry if there is one. */
static void slot_drop(struct set *s, int64_t id)
{
    int w = find_way(s, id);

    if (w < 0)
        return;
    write_begin(s);
    slot_store(&s->slot[w], 0, 0, 0, 0, 0, KIND_EMPTY);
    write_end(s);
    atomic_store_explicit(&s->slot[w].ref, 0, memory_order_relaxed);
}

/*
 * The entry of id is due for a refresh: claim it (the next claim can come
 * retry_ms later, in case this refresh never arrives). True if this
 * caller must queue it.
 */
static bool refresh_claim(struct vcache *vc, struct set *s, int64_t id,
                          int64_t now)
{
    bool claimed = false;
    int w;

    /* Busy: another writer, most likely a claim or the refresh itself. */
    if (pthread_mutex_trylock(&s->mu) != 0)
        return false;
    w = find_way(s, id);
    if (w >= 0 && atomic_load_explicit(&s->slot[w].expires_ms,
                                       memory_order_relaxed) <= now) {
        write_begin(s);
        atomic_store_explicit(&s->slot[w].expires_ms, now + vc->retry_ms,
                              memory_order_release);
        write_end(s);
        claimed = true;
    }
    pthread_mutex_unlock(&s->mu);
    return claimed;
}

/* Hand id to the refresher; dropped when the queue is full. */
static void refresh_queue(struct vcache *vc, int64_t id)
{
    pthread_mutex_lock(&vc->queue_mu);
    if (vc->queue_len < QUEUE_LEN) {
        vc->queue[(vc->queue_head + vc->queue_len++) % QUEUE_LEN] = id;
        pthread_cond_signal(&vc->queue_cond);
    }
    pthread_mutex_unlock(&vc->queue_mu);
}

bool vcache_entry_get(struct vcache *vc, int64_t id, struct vcache_voucher *v,
                      uint64_t *gen)
{
    struct set *s;
    struct snap sn;
    int64_t now;

    /* Before the lookup: a fill by this caller must lose against any
     * invalidation that comes after it. */
    *gen = vc ? atomic_load(&vc->gen) : 0;
    if (!vc || !vc->ttl_ms)
        return false;
    s = set_of(vc, id);
    if (!set_read(s, id, &sn))
        return false;
    now = util_mono_ms();
    if (sn.dead_ms <= now)
        return false; /* not refreshed in time: read it yourself */
    if (sn.expires_ms <= now && vc->refresher_started &&
        refresh_claim(vc, s, id, now))
        refresh_queue(vc, id);

    struct slot *e = &s->slot[sn.way];
    if (!atomic_load_explicit(&e->ref, memory_order_relaxed))
        atomic_store_explicit(&e->ref, 1, memory_order_relaxed);
    memset(v, 0, sizeof(*v));
    v->found = (sn.bits & KIND_MASK) == KIND_VOUCHER;
    v->type = (enum voucher_type)(sn.bits >> TYPE_SHIFT & 1u);
    v->mode = sn.bits & BIT_ASYNC ? PURCHASE_ASYNC : PURCHASE_SYNC;
    v->queue = (sn.bits & BIT_QUEUE) != 0;
    v->paused = (sn.bits & BIT_PAUSED) != 0;
    v->begin_time = sn.begin_time;
    v->end_time = sn.end_time;
    v->sold_out = (sn.bits & BIT_SOLD_OUT) != 0;
    return true;
}

void vcache_entry_put(struct vcache *vc, int64_t id,
                      const struct vcache_voucher *v, uint64_t gen)
{
    struct set *s;
    uint32_t bits;
    int64_t expires;
    int w;

    if (!vc || !vc->ttl_ms)
        return;
    s = set_of(vc, id);
    if (!v->found) {
        bits = KIND_MISSING;
        expires = vc->ttl_ms;
    } else {
        bits = KIND_VOUCHER | (uint32_t)v->type << TYPE_SHIFT;
        if (v->mode == PURCHASE_ASYNC)
            bits |= BIT_ASYNC;
        if (v->queue)
            bits |= BIT_QUEUE;
        if (v->sold_out)
            bits |= BIT_SOLD_OUT;
        if (v->paused)
            bits |= BIT_PAUSED;
        /* A pause, like a sold-out flag, is trusted only briefly: its
         * resume must not wait for the window's re-read if its message
         * is lost. */
        expires = v->sold_out || v->paused ? vc->ttl_ms : META_TTL_MS;
    }
    expires += util_mono_ms();

    pthread_mutex_lock(&s->mu);
    if (atomic_load(&vc->gen) != gen) {
        /* The row may have changed after it was read: keep nothing. */
        slot_drop(s, id);
    } else {
        w = find_way(s, id);
        if (w < 0)
            w = victim_way(s);
        /* Answered while its refresh is on the way, for one more TTL. */
        write_begin(s);
        slot_store(&s->slot[w], id, v->begin_time, v->end_time, expires,
                   expires + vc->ttl_ms, bits);
        write_end(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void vcache_sold_out_set(struct vcache *vc, int64_t id, uint64_t gen)
{
    struct set *s;
    int w;

    if (!vc || !vc->ttl_ms)
        return;
    s = set_of(vc, id);
    pthread_mutex_lock(&s->mu);
    w = find_way(s, id);
    if (atomic_load(&vc->gen) != gen) {
        slot_drop(s, id);
    } else if (w >= 0) {
        struct slot *e = &s->slot[w];
        uint32_t bits = atomic_load_explicit(&e->bits, memory_order_relaxed);
        if ((bits & KIND_MASK) == KIND_VOUCHER) {
            write_begin(s);
            atomic_store_explicit(&e->bits, bits | BIT_SOLD_OUT,
                                  memory_order_release);
            int64_t expires = util_mono_ms() + vc->ttl_ms;
            atomic_store_explicit(&e->expires_ms, expires,
                                  memory_order_release);
            atomic_store_explicit(&e->dead_ms, expires + vc->ttl_ms,
                                  memory_order_release);
            write_end(s);
        }
    }
    /* No entry (evicted since step 1): the next request reads the row. */
    pthread_mutex_unlock(&s->mu);
}

/* Drop id's entry and make fills that started before this lose. */
static void invalidate(struct vcache *vc, int64_t id)
{
    struct set *s = set_of(vc, id);

    pthread_mutex_lock(&s->mu);
    atomic_fetch_add(&vc->gen, 1);
    slot_drop(s, id);
    pthread_mutex_unlock(&s->mu);
}

/* Drop every entry (messages may have been missed). */
static void flush(struct vcache *vc)
{
    /* First, so that a fill that read the row before now is not kept. */
    atomic_fetch_add(&vc->gen, 1);
    for (unsigned i = 0; i < SETS; i++) {
        struct set *s = &vc->sets[i];

        pthread_mutex_lock(&s->mu);
        write_begin(s);
        for (int w = 0; w < WAYS; w++)
            slot_store(&s->slot[w], 0, 0, 0, 0, 0, KIND_EMPTY);
        write_end(s);
        pthread_mutex_unlock(&s->mu);
    }
}

void vcache_voucher_changed(struct vcache *vc, struct store *st, int64_t id)
{
    char msg[24];

    if (!vc)
        return;
    /* This instance at once, without waiting for its own message. */
    store_voucher_stocked(id);
    if (vc->ttl_ms)
        invalidate(vc, id);
    snprintf(msg, sizeof(msg), "%lld", (long long)id);
    /* PUBLISH, or SPUBLISH at the channel's owner on a cluster. */
    if (store_publish(st, vc->channel, msg))
        log_warn("voucher change not published", "id=%lld heals_within_ms=%u",
                 (long long)id, vc->ttl_ms);
}

/* ---- what the subscriber hears ---- */

/* Whatever changed while it was not listening. */
static void on_subscribed(void *ctx)
{
    flush(ctx);
}

/* One message: an id drops its entry, "*" the whole cache. */
static void on_message(void *ctx, const char *msg, size_t len)
{
    struct vcache *vc = ctx;
    int64_t id;

    if (strcmp(msg, "*") == 0)
        flush(vc);
    else if (util_parse_id(msg, len, &id) == 0) {
        /* Stock may be back: the segments seen empty sell again too. */
        store_voucher_stocked(id);
        invalidate(vc, id);
    } else
        log_warn("voucher cache message ignored", "channel=%s len=%zu",
                 vc->channel, len);
}

/* ---- the refresher thread ---- */

/* The next queued id, or 0 when vcache_free() asks to stop. */
static int64_t refresh_next(struct vcache *vc)
{
    int64_t id = 0;

    pthread_mutex_lock(&vc->queue_mu);
    while (!vc->stopping && vc->queue_len == 0)
        pthread_cond_wait(&vc->queue_cond, &vc->queue_mu);
    if (!vc->stopping) {
        id = vc->queue[vc->queue_head];
        vc->queue_head = (vc->queue_head + 1) % QUEUE_LEN;
        vc->queue_len--;
    }
    pthread_mutex_unlock(&vc->queue_mu);
    return id;
}

/* Re-read the rows of queued ids on this thread's own store. */
static void *refresher_main(void *arg)
{
    struct vcache *vc = arg;
    struct store *st = store_new(vc->sc);
    int64_t id, last_log_ms = 0;

    while ((id = refresh_next(vc)) != 0) {
        struct vcache_voucher v;
        struct store_seckill s;
        uint64_t gen = atomic_load(&vc->gen);
        int err = store_seckill_get(st, id, &s);

        if (err && err != -ENOENT) {
            /* Asked for again after retry_ms; until the entry's dead
             * time requests answer from it, then read it themselves. */
            int64_t now = util_mono_ms();
            if (now - last_log_ms >= 1000) {
                last_log_ms = now;
                log_warn("voucher cache refresh failed", "id=%lld err=%d",
                         (long long)id, err);
            }
            continue;
        }
        vcache_voucher_from_row(&v, err ? NULL : &s);
        vcache_entry_put(vc, id, &v, gen);
    }
    store_free(st);
    return NULL;
}

void vcache_voucher_from_row(struct vcache_voucher *v,
                             const struct store_seckill *s)
{
    memset(v, 0, sizeof(*v));
    if (!s)
        return;
    v->found = true;
    v->type = s->type;
    v->begin_time = s->begin_time;
    v->end_time = s->end_time;
    v->mode = s->mode;
    v->queue = s->type == VOUCHER_SECKILL && s->admission == ADMISSION_QUEUE;
    v->sold_out = s->type == VOUCHER_SECKILL && s->stock <= 0;
    v->paused = s->type == VOUCHER_SECKILL && s->halt == HALT_PAUSED;
}

struct vcache *vcache_new(const struct vcache_config *cfg)
{
    struct vcache *vc = xcalloc(1, sizeof(*vc));
    int err;

    vc->ttl_ms = cfg->ttl_ms;
    vc->retry_ms = vc->ttl_ms < RETRY_MAX_MS ? vc->ttl_ms : RETRY_MAX_MS;
    vc->sc = cfg->store;
    /* Pub/sub ignores the database: the number keeps deployments on two
     * databases of one server apart, and the prefix those on a cluster. */
    redis_key(vc->channel, sizeof(vc->channel), "seckill:voucher-changed:%u",
              cfg->store->redis_db);
    if (!vc->ttl_ms)
        return vc; /* publishes only */

    vc->sets = xcalloc(SETS, sizeof(*vc->sets));
    for (unsigned i = 0; i < SETS; i++)
        pthread_mutex_init(&vc->sets[i].mu, NULL);
    pthread_mutex_init(&vc->queue_mu, NULL);
    pthread_cond_init(&vc->queue_cond, NULL);
    /* Without the subscriber, flags still end after their TTL; without
     * the refresher, requests re-read expired entries themselves. */
    vc->subscriber = subscriber_start(&(struct subscriber_config){
        .store = vc->sc,
        .channel = vc->channel,
        .what = "voucher cache",
        .on_subscribed = on_subscribed,
        .on_message = on_message,
        .ctx = vc,
    });
    err = pthread_create(&vc->refresher, NULL, refresher_main, vc);
    if (err)
        log_error("voucher cache refresher not started", "err=\"%s\"",
                  strerror(err));
    vc->refresher_started = !err;
    return vc;
}

void vcache_free(struct vcache *vc)
{
    if (!vc)
        return;
    subscriber_stop(vc->subscriber);
    if (vc->refresher_started) {
        pthread_mutex_lock(&vc->queue_mu);
        vc->stopping = true;
        pthread_cond_signal(&vc->queue_cond);
        pthread_mutex_unlock(&vc->queue_mu);
        pthread_join(vc->refresher, NULL);
    }
    if (vc->sets) {
        for (unsigned i = 0; i < SETS; i++)
            pthread_mutex_destroy(&vc->sets[i].mu);
        pthread_mutex_destroy(&vc->queue_mu);
        pthread_cond_destroy(&vc->queue_cond);
    }
    free(vc->sets);
    free(vc);
}
