/*
 * lock_bench.c - acquire+release pairs per second through lock/lock.h.
 *
 *   lock_bench URL CLIENTS SECONDS [contended] [kind=KIND]
 *
 * CLIENTS threads share one lock_client. Each has its own struct lock on
 * its own name and loops: fail-fast acquire (wait 0, fixed lease 30 s),
 * release. With "contended" every thread uses the same name and waits up
 * to 5 s instead, so the figure is lock handovers per second. KIND is the
 * kind of lock (default mutex):
 *   fair, write   as the mutex: a name of its own per thread
 *   read          every thread reads the same name (readers share it)
 *   semaphore     every thread takes a permit of one semaphore with
 *                 CLIENTS permits (never full), waiting up to 5 s (the
 *                 ZooKeeper recipe queues contenders on a mutex)
 * Prints one line:
 *
 *   pairs=N seconds=S rate=R p50_us=A p99_us=B busy=N errors=N
 *
 * Latency is of the whole pair. Exits 1 if a pair failed with an error.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lock/lock.h"

#define LEASE_MS 30000
#define CONTENDED_WAIT_MS 5000
/* Latency samples kept per thread (the rest are counted, not kept). */
#define SAMPLES_MAX 2000000

struct worker {
    pthread_t thread;
    struct lock_client *c;
    int id;
    int contended;
    enum lock_kind kind;
    int nclients;
    uint32_t *lat_us;
    size_t nlat;
    uint64_t pairs, busy, errors;
};

static atomic_int stop;
static char run_id[32];

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The thread's lock: the kind asked for (other, the read-write lock's
 * other side, to free too). */
static struct lock *make_lock(struct worker *w, const char *name,
                              struct lock **other)
{
    struct lock *l = NULL, *r, *wr;
    int err = 0;

    *other = NULL;
    switch (w->kind) {
    case LOCK_KIND_MUTEX:
        err = lock_new(w->c, name, &l);
        break;
    case LOCK_KIND_FAIR:
        err = lock_fair_new(w->c, name, &l);
        break;
    case LOCK_KIND_SEMAPHORE:
        err = lock_semaphore_new(w->c, name, (uint32_t)w->nclients, &l);
        break;
    case LOCK_KIND_READ:
    case LOCK_KIND_WRITE:
        err = lock_rw_new(w->c, name, &r, &wr);
        if (!err) {
            l = w->kind == LOCK_KIND_READ ? r : wr;
            *other = w->kind == LOCK_KIND_READ ? wr : r;
        }
        break;
    }
    if (err) {
        fprintf(stderr, "lock_bench: cannot make the lock: %d\n", err);
        exit(2);
    }
    return l;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    int shared = w->contended || w->kind == LOCK_KIND_READ ||
                 w->kind == LOCK_KIND_SEMAPHORE;
    uint32_t wait_ms =
        w->contended || w->kind == LOCK_KIND_SEMAPHORE ? CONTENDED_WAIT_MS : 0;
    char name[96];
    struct lock *l, *other;

    if (shared)
        snprintf(name, sizeof(name), "bench:lock:%s:shared", run_id);
    else
        snprintf(name, sizeof(name), "bench:lock:%s:%d", run_id, w->id);
    l = make_lock(w, name, &other);
    while (!atomic_load(&stop)) {
        enum lock_status st;
        int held;
        int64_t t0 = now_us();
        int err = lock_acquire(l, wait_ms, LEASE_MS, &st);
        if (err) {
            w->errors++;
            continue;
        }
        if (st == LOCK_BUSY) {
            w->busy++;
            continue;
        }
        if (lock_release(l, &held) || !held) {
            w->errors++;
            continue;
        }
        if (w->nlat < SAMPLES_MAX)
            w->lat_us[w->nlat++] = (uint32_t)(now_us() - t0);
        w->pairs++;
    }
    lock_free(l);
    lock_free(other);
    return NULL;
}

static int parse_kind(const char *s, enum lock_kind *kind)
{
    static const struct {
        const char *name;
        enum lock_kind kind;
    } kinds[] = {
        {"mutex", LOCK_KIND_MUTEX},         {"fair", LOCK_KIND_FAIR},
        {"read", LOCK_KIND_READ},           {"write", LOCK_KIND_WRITE},
        {"semaphore", LOCK_KIND_SEMAPHORE},
    };

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(s, kinds[i].name) == 0) {
            *kind = kinds[i].kind;
            return 0;
        }
    }
    return -1;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    struct lock_client *c;
    enum lock_kind kind = LOCK_KIND_MUTEX;
    int nclients, seconds, contended = 0;

    if (argc < 4) {
        fprintf(stderr, "usage: lock_bench URL CLIENTS SECONDS [contended] "
                        "[kind=mutex|fair|read|write|semaphore]\n");
        return 2;
    }
    nclients = atoi(argv[2]);
    seconds = atoi(argv[3]);
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "contended") == 0) {
            contended = 1;
        } else if (strncmp(argv[i], "kind=", 5) != 0 ||
                   parse_kind(argv[i] + 5, &kind) != 0) {
            fprintf(stderr, "lock_bench: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (nclients < 1 || nclients > 1024 || seconds < 1) {
        fprintf(stderr, "lock_bench: CLIENTS 1..1024, SECONDS >= 1\n");
        return 2;
    }
    snprintf(run_id, sizeof(run_id), "%d", (int)getpid());
    if (lock_client_open(argv[1], NULL, &c)) {
        fprintf(stderr, "lock_bench: bad URL\n");
        return 2;
    }

    struct worker *w = calloc((size_t)nclients, sizeof(*w));
    size_t per = SAMPLES_MAX / (size_t)nclients;
    for (int i = 0; i < nclients; i++) {
        w[i].c = c;
        w[i].id = i;
        w[i].contended = contended;
        w[i].kind = kind;
        w[i].nclients = nclients;
        w[i].lat_us = malloc(per * sizeof(uint32_t));
        if (!w[i].lat_us)
            abort();
    }
    /* Warm up one connection per client before timing. */
    int64_t t0 = now_us();
    for (int i = 0; i < nclients; i++)
        pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
    sleep((unsigned)seconds);
    atomic_store(&stop, 1);
    for (int i = 0; i < nclients; i++)
        pthread_join(w[i].thread, NULL);
    double elapsed = (double)(now_us() - t0) / 1e6;

    uint64_t pairs = 0, busy = 0, errors = 0;
    size_t n = 0;
    for (int i = 0; i < nclients; i++) {
        pairs += w[i].pairs;
        busy += w[i].busy;
        errors += w[i].errors;
        n += w[i].nlat < per ? w[i].nlat : per;
    }
    uint32_t *all = malloc((n ? n : 1) * sizeof(uint32_t));
    size_t k = 0;
    for (int i = 0; i < nclients; i++) {
        size_t m = w[i].nlat < per ? w[i].nlat : per;
        memcpy(all + k, w[i].lat_us, m * sizeof(uint32_t));
        k += m;
        free(w[i].lat_us);
    }
    qsort(all, n, sizeof(uint32_t), cmp_u32);
    printf("pairs=%llu seconds=%.2f rate=%.0f p50_us=%u p99_us=%u busy=%llu "
           "errors=%llu\n",
           (unsigned long long)pairs, elapsed, (double)pairs / elapsed,
           n ? all[n / 2] : 0, n ? all[n * 99 / 100] : 0,
           (unsigned long long)busy, (unsigned long long)errors);
    free(all);
    free(w);
    lock_client_close(c);
    return errors ? 1 : 0;
}
