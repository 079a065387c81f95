/*
 * voucher_state.c - the little the store keeps per voucher while it is in
 * use: the segments of a segmented voucher, which of them were seen empty
 * lately, and whether it sells in async mode. Each user holds a reference
 * from store_voucher_state_get() to store_voucher_state_put(); a state
 * nobody holds that has not been used for a while is freed by
 * store_voucher_states_free_idle(), and made again (its segments read
 * again) on its next use.
 */
#include "store/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/util.h"
struct voucher_state {
    int64_t voucher_id;
    /* Under states_mu: */
    struct voucher_state *next; /* hash chain */
    unsigned refs;              /* holders between get and put */
    int64_t used_ms;            /* monotonic: the last put */
    /* Atomics: the holders read and write them at the same time. */
    atomic_uint segments;        /* 0: not read yet */
    atomic_uint_fast64_t empty;  /* bit j: segment j seen at 0 */
    atomic_llong empty_since_ms; /* when the first of those was seen */
    atomic_uint mode;            /* 0: not read yet, else purchase_mode + 1 */
};

/* The states: a hash of chains under one mutex, held for a lookup (once
 * per batch, expiry or cancel: not per request) or a free. */
#define STATE_BUCKETS 1024
static struct voucher_state *states[STATE_BUCKETS];
static size_t states_kept;
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;

struct voucher_state *store_voucher_state_get(int64_t voucher_id)
{
    size_t h = (size_t)((uint64_t)voucher_id * 0x9e3779b97f4a7c15ULL >> 54);
    struct voucher_state *s;

    pthread_mutex_lock(&states_mu);
    for (s = states[h]; s && s->voucher_id != voucher_id; s = s->next)
        ;
    if (!s) {
        s = xcalloc(1, sizeof(*s));
        s->voucher_id = voucher_id;
        s->next = states[h];
        states[h] = s;
        states_kept++;
    }
    s->refs++;
    pthread_mutex_unlock(&states_mu);
    return s;
}

void store_voucher_state_put(struct voucher_state *vs)
{
    if (!vs)
        return;
    pthread_mutex_lock(&states_mu);
    vs->refs--;
    vs->used_ms = util_mono_ms();
    pthread_mutex_unlock(&states_mu);
}

void store_voucher_stocked(int64_t voucher_id)
{
    size_t h = (size_t)((uint64_t)voucher_id * 0x9e3779b97f4a7c15ULL >> 54);
    struct voucher_state *s;

    pthread_mutex_lock(&states_mu);
    for (s = states[h]; s && s->voucher_id != voucher_id; s = s->next)
        ;
    if (s)
        atomic_store_explicit(&s->empty, 0, memory_order_relaxed);
    pthread_mutex_unlock(&states_mu);
}

size_t store_voucher_states_free_idle(int64_t idle_ms)
{
    int64_t now = util_mono_ms();
    size_t freed = 0;

    for (size_t h = 0; h < STATE_BUCKETS; h++) {
        /* One chain per hold of the mutex: a batch never waits long. */
        pthread_mutex_lock(&states_mu);
        for (struct voucher_state **pp = &states[h]; *pp;) {
            struct voucher_state *s = *pp;

            if (s->refs || now - s->used_ms < idle_ms) {
                pp = &s->next;
                continue;
            }
            *pp = s->next;
            free(s);
            states_kept--;
            freed++;
        }
        pthread_mutex_unlock(&states_mu);
    }
    return freed;
}

size_t store_voucher_states_count(void)
{
    size_t n;

    pthread_mutex_lock(&states_mu);
    n = states_kept;
    pthread_mutex_unlock(&states_mu);
    return n;
}

struct segments_args {
    int64_t voucher_id;
    int64_t count;
};

static int segments_count_once(struct store *st, void *arg)
{
    struct segments_args *a = arg;
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    size_t n;

    bind_i64(&p[0], &a->voucher_id);
    bind_i64(&r[0], &a->count);
    return store_stmt_rows(st, STMT_SEGMENT_COUNT, p, r, 1, NULL, NULL, &n);
}

/* As store_voucher_segments_get(), the read done by fn (which may be
 * wrapped in store_retry() or not). */
static int segments_get(struct store *st, struct voucher_state *vs, unsigned *n,
                        bool retry)
{
    struct segments_args a = {vs->voucher_id, 0};
    unsigned known = atomic_load_explicit(&vs->segments, memory_order_relaxed);
    int err;

    if (known) {
        *n = known;
        return 0;
    }
    err = retry ? store_retry(st, segments_count_once, &a)
                : segments_count_once(st, &a);
    if (err)
        return err;
    if (a.count > STORE_SEGMENTS_MAX) {
        /* Not made by this service: the rows past the bitmap's reach
         * would never sell. */
        log_error("voucher has too many stock segments", "voucher=%lld n=%lld",
                  (long long)vs->voucher_id, (long long)a.count);
        return -EIO;
    }
    known = a.count > 1 ? (unsigned)a.count : 1;
    atomic_store_explicit(&vs->segments, known, memory_order_relaxed);
    *n = known;
    return 0;
}

int store_voucher_async_read(struct store *st, struct voucher_state *vs,
                             bool *async)
{
    unsigned known = atomic_load_explicit(&vs->mode, memory_order_relaxed);
    MYSQL_BIND p[1] = {0}, r[1] = {0};
    int64_t id = vs->voucher_id, mode = 0;
    size_t n = 0;
    int err;

    if (!known) {
        bind_i64(&p[0], &id);
        bind_i64(&r[0], &mode);
        err = store_stmt_rows(st, STMT_VOUCHER_MODE, p, r, 1, NULL, NULL, &n);
        if (err)
            return err;
        known = (unsigned)mode + 1; /* no row: not a seckill voucher */
        atomic_store_explicit(&vs->mode, known, memory_order_relaxed);
    }
    *async = known == PURCHASE_ASYNC + 1;
    return 0;
}

int store_voucher_segments_get(struct store *st, struct voucher_state *vs,
                               unsigned *n)
{
    return segments_get(st, vs, n, true);
}

int store_voucher_segments_read(struct store *st, struct voucher_state *vs,
                                unsigned *n)
{
    return segments_get(st, vs, n, false);
}

/* A segment seen empty is skipped for this long: a cancelled or expired
 * order may have given it a unit back meanwhile (on another instance). */
#define SEGMENT_EMPTY_TTL_MS 1000

bool store_segment_is_empty(struct voucher_state *vs, unsigned seg)
{
    uint_fast64_t bits = atomic_load_explicit(&vs->empty, memory_order_relaxed);

    if (!bits)
        return false;
    if (util_mono_ms() -
            atomic_load_explicit(&vs->empty_since_ms, memory_order_relaxed) >=
        SEGMENT_EMPTY_TTL_MS) {
        atomic_store_explicit(&vs->empty, 0, memory_order_relaxed);
        return false;
    }
    return seg < 64 && (bits >> seg & 1);
}

void store_segment_mark_empty(struct voucher_state *vs, unsigned seg)
{
    if (seg >= 64)
        return;
    if (!atomic_fetch_or_explicit(&vs->empty, (uint_fast64_t)1 << seg,
                                  memory_order_relaxed))
        atomic_store_explicit(&vs->empty_since_ms, util_mono_ms(),
                              memory_order_relaxed);
}

void store_segment_mark_stocked(struct voucher_state *vs, unsigned seg)
{
    if (seg < 64)
        atomic_fetch_and_explicit(&vs->empty, ~((uint_fast64_t)1 << seg),
                                  memory_order_relaxed);
}
