/*
 * lock_example.c - a starting point for C programs that take distributed
 * locks with libseckill-lock (<seckill/lock.h>), in the manner of
 * Redisson's RLock, RFairLock and RSemaphore. Three small demos, one
 * function each:
 *
 *   lock_example URL mutex FILE [ROUNDS]
 *       Four threads each add 1 to the number kept in FILE, ROUNDS times
 *       (default 10), under one mutex: read the file, pause, write it
 *       back. Start it from several processes at once (or machines that
 *       share FILE): no increment is lost. FILE also keeps the fencing
 *       token of its last write and refuses a write with a lower one, as
 *       any storage guarded by a lock should: a holder that stalled past
 *       its lease cannot overwrite the work of the holder after it.
 *
 *   lock_example URL fair [WAITERS]
 *       The main thread holds a fair lock while WAITERS threads (default 4)
 *       line up for it one after another; they are served in the order
 *       they came.
 *
 *   lock_example URL semaphore [PERMITS] [THREADS]
 *       THREADS threads (default 6) share a semaphore of PERMITS permits
 *       (default 2): never more than PERMITS of them inside at once.
 *
 * URL names the backend (docs/locks.md in the seckill sources lists them):
 * redis://host:port/db, redis-sentinel://..., redlock://h1:p1,h2:p2,h3:p3,
 * mysql://user:pass@host/db or zookeeper://host:port/path. The fair lock
 * and the semaphore need Redis or ZooKeeper; the others refuse them with
 * ENOTSUP.
 *
 * Build it against the installed library:
 *
 *   cc -o lock_example lock_example.c \
 *       $(pkg-config --cflags --libs seckill-lock)
 *
 * What to copy: one struct lock_client per process, shared by every thread;
 * one struct lock per thread and lock name; every call returns 0 or a
 * negative errno, and a lock someone else holds is LOCK_BUSY, not an error.
 * Exit status: 0 when every step did what it should, 1 on an error or a
 * broken promise, 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <seckill/lock.h>

/* How long a thread waits for a lock before it gives up (LOCK_BUSY). */
#define WAIT_MS 30000
/* A lease of 0 asks for the watchdog: the lock is kept while the process
 * lives and is freed LOCK_WATCHDOG_LEASE_MS after it dies. */
#define WATCHDOG 0
#define MUTEX_THREADS 4
#define THREADS_MAX 64

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Report a failed call: what failed and the errno's text. */
static int fail(const char *what, int err)
{
    fprintf(stderr, "lock_example: %s: %s\n", what, strerror(-err));
    return err;
}

/* Start a thread, or end the program: a demo has no way on without it. */
static void start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int err = pthread_create(t, NULL, fn, arg);

    if (err) {
        fail("pthread_create", -err);
        exit(1);
    }
}

/*
 * Acquire l, waiting up to WAIT_MS. Returns 0 once held, -EBUSY if others
 * held it for the whole wait, or the library's negative errno.
 */
static int take(struct lock *l, uint32_t lease_ms)
{
    enum lock_status st;
    int err = lock_acquire(l, WAIT_MS, lease_ms, &st);

    if (err)
        return fail("acquire", err);
    if (st != LOCK_ACQUIRED) {
        fprintf(stderr, "lock_example: %s busy for %d ms\n", lock_name(l),
                WAIT_MS);
        return -EBUSY;
    }
    return 0;
}

/* ---- mutex: a critical section over a file ---- */

struct mutex_demo {
    struct lock_client *c;
    const char *name;
    const char *path;
    int rounds;
    atomic_int err; /* a thread's error, if any */
};

/*
 * The critical section: FILE holds "count token". Add 1 to count, unless
 * token is higher than ours: then a newer holder has written and we must
 * not (the storage side of fencing).
 */
static int counter_add(const char *path, uint64_t token)
{
    unsigned long long count = 0, last = 0;
    char tmp[4096];
    FILE *f;

    f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &count, &last) != 2)
            count = last = 0;
        fclose(f);
    }
    if (token < last) {
        fprintf(stderr, "lock_example: token %" PRIu64 " below %llu: refused\n",
                token, last);
        return -ESTALE;
    }
    /* Without the lock, another writer would slip in here. */
    sleep_ms(1);
    snprintf(tmp, sizeof(tmp), "%s.%ld.%" PRIu64 ".tmp", path, (long)getpid(),
             token);
    f = fopen(tmp, "w");
    if (!f)
        return -errno;
    fprintf(f, "%llu %" PRIu64 "\n", count + 1, token);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return -errno;
    return 0;
}

static void *mutex_thread(void *arg)
{
    struct mutex_demo *d = arg;
    struct lock *l = NULL;
    int err, rerr, held;

    /* One struct lock per thread: each is an owner of its own. */
    err = lock_new(d->c, d->name, &l);
    if (err) {
        atomic_store(&d->err, fail("lock_new", err));
        return NULL;
    }
    for (int i = 0; i < d->rounds; i++) {
        err = take(l, WATCHDOG);
        if (err) {
            atomic_store(&d->err, err);
            break;
        }
        /* The watchdog renews the lease; if it ever finds the lock gone
         * (the process stalled, the server lost it), the work is void. */
        err = lock_lost(l) ? -ENOLCK : counter_add(d->path, lock_fence(l));
        if (err)
            atomic_store(&d->err, fail("critical section", err));
        held = 0;
        rerr = lock_release(l, &held);
        if (rerr)
            atomic_store(&d->err, fail("release", rerr));
        else if (!held)
            atomic_store(&d->err, fail("release: the lock was not ours "
                                       "any more",
                                       -ENOLCK));
        if (err || rerr || !held)
            break;
    }
    lock_free(l);
    return NULL;
}

static int demo_mutex(struct lock_client *c, const char *path, int rounds)
{
    char name[LOCK_NAME_MAX + 1];
    struct mutex_demo d = {
        .c = c, .name = name, .path = path, .rounds = rounds};
    pthread_t t[MUTEX_THREADS];
    unsigned long long count = 0, token = 0;
    FILE *f;

    /* Everyone who writes FILE takes the lock named after it. */
    if ((size_t)snprintf(name, sizeof(name), "lock-example:mutex:%s", path) >=
        sizeof(name))
        return fail("FILE: path too long for a lock name", -ENAMETOOLONG);
    for (int i = 0; i < MUTEX_THREADS; i++)
        start(&t[i], mutex_thread, &d);
    for (int i = 0; i < MUTEX_THREADS; i++)
        pthread_join(t[i], NULL);
    if (atomic_load(&d.err))
        return atomic_load(&d.err);
    f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &count, &token) != 2)
            count = token = 0;
        fclose(f);
    }
    printf("mutex: %d threads x %d rounds done; %s now counts %llu "
           "(last token %llu)\n",
           MUTEX_THREADS, rounds, path, count, token);
    return 0;
}

/* ---- fair: waiters served first come, first served ---- */

struct fair_demo {
    struct lock_client *c;
    const char *name;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int started;            /* waiters that are about to line up */
    int order[THREADS_MAX]; /* who got the lock, in turn */
    int served;
    int err;
};

struct fair_waiter {
    struct fair_demo *d;
    int index;
};

static void *fair_thread(void *arg)
{
    struct fair_waiter *w = arg;
    struct fair_demo *d = w->d;
    struct lock *l = NULL;
    int err;

    err = lock_fair_new(d->c, d->name, &l);
    pthread_mutex_lock(&d->mu);
    d->started++;
    if (err)
        d->err = fail("lock_fair_new", err);
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mu);
    if (err)
        return NULL;
    /* The first try with a wait joins the line; a release wakes only the
     * waiter at its head. */
    err = take(l, WATCHDOG);
    pthread_mutex_lock(&d->mu);
    if (err)
        d->err = err;
    else
        d->order[d->served++] = w->index;
    pthread_mutex_unlock(&d->mu);
    if (!err) {
        sleep_ms(20); /* the work */
        err = lock_release(l, NULL);
        if (err)
            fail("release", err);
    }
    lock_free(l);
    return NULL;
}

static int demo_fair(struct lock_client *c, int waiters)
{
    char name[64];
    struct fair_demo d = {.c = c, .name = name};
    struct fair_waiter w[THREADS_MAX];
    pthread_t t[THREADS_MAX];
    struct lock *holder = NULL;
    int err, in_order = 1;

    /* This run's own name: two runs at once do not share a line. */
    snprintf(name, sizeof(name), "lock-example:fair:%ld", (long)getpid());
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cond, NULL);
    err = lock_fair_new(c, name, &holder);
    if (err) {
        fail("lock_fair_new", err);
        goto out;
    }
    err = take(holder, WATCHDOG);
    if (err)
        goto free_holder;
    /* Start the waiters one by one, each once the one before it has had
     * time to line up behind the holder. */
    for (int i = 0; i < waiters; i++) {
        w[i] = (struct fair_waiter){.d = &d, .index = i};
        start(&t[i], fair_thread, &w[i]);
        pthread_mutex_lock(&d.mu);
        while (d.started <= i)
            pthread_cond_wait(&d.cond, &d.mu);
        pthread_mutex_unlock(&d.mu);
        sleep_ms(300);
    }
    err = lock_release(holder, NULL);
    if (err)
        fail("release", err);
    for (int i = 0; i < waiters; i++)
        pthread_join(t[i], NULL);
    if (!err)
        err = d.err;
    if (err)
        goto free_holder;
    for (int i = 0; i < d.served; i++)
        in_order &= d.order[i] == i;
    if (d.served == waiters && in_order) {
        printf("fair: %d waiters served in the order they came\n", waiters);
    } else {
        printf("fair: %d of %d waiters served, in the order", d.served,
               waiters);
        for (int i = 0; i < d.served; i++)
            printf(" %d", d.order[i]);
        printf(" (they came 0 to %d)\n", waiters - 1);
        err = -EPROTO;
    }
free_holder:
    lock_free(holder);
out:
    pthread_cond_destroy(&d.cond);
    pthread_mutex_destroy(&d.mu);
    return err;
}

/* ---- semaphore: at most N inside ---- */

struct sem_demo {
    struct lock_client *c;
    const char *name;
    uint32_t permits;
    atomic_int inside, most, err;
};

static void *sem_thread(void *arg)
{
    struct sem_demo *d = arg;
    struct lock *l = NULL;
    int err;

    /* One struct lock holds one permit; every user of the name passes the
     * same number of permits. */
    err = lock_semaphore_new(d->c, d->name, d->permits, &l);
    if (err) {
        atomic_store(&d->err, fail("lock_semaphore_new", err));
        return NULL;
    }
    for (int round = 0; round < 3 && !err; round++) {
        /* A fixed lease: a permit comes back 10 s after a crash. */
        err = take(l, 10000);
        if (err)
            break;
        int now = atomic_fetch_add(&d->inside, 1) + 1;
        int most = atomic_load(&d->most);
        while (now > most &&
               !atomic_compare_exchange_weak(&d->most, &most, now))
            ;
        sleep_ms(50); /* the work */
        atomic_fetch_sub(&d->inside, 1);
        err = lock_release(l, NULL);
        if (err)
            fail("release", err);
    }
    if (err)
        atomic_store(&d->err, err);
    lock_free(l);
    return NULL;
}

static int demo_semaphore(struct lock_client *c, int permits, int threads)
{
    char name[64];
    struct sem_demo d = {.c = c, .name = name, .permits = (uint32_t)permits};
    pthread_t t[THREADS_MAX];
    int err;

    snprintf(name, sizeof(name), "lock-example:semaphore:%ld", (long)getpid());
    for (int i = 0; i < threads; i++)
        start(&t[i], sem_thread, &d);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    err = atomic_load(&d.err);
    if (err)
        return err;
    printf("semaphore: %d threads, %d permits: at most %d inside at once\n",
           threads, permits, atomic_load(&d.most));
    return atomic_load(&d.most) <= permits ? 0 : -EPROTO;
}

/* ---- main ---- */

static int usage(void)
{
    fprintf(stderr, "usage: lock_example URL mutex FILE [ROUNDS]\n"
                    "       lock_example URL fair [WAITERS]\n"
                    "       lock_example URL semaphore [PERMITS] [THREADS]\n");
    return 2;
}

/* argv[i] as a number in [lo, hi], or def when absent; -1 when bad. */
static int arg_int(int argc, char **argv, int i, int def, int lo, int hi)
{
    char *end;
    long v;

    if (i >= argc)
        return def;
    errno = 0;
    v = strtol(argv[i], &end, 10);
    if (errno || end == argv[i] || *end || v < lo || v > hi)
        return -1;
    return (int)v;
}

int main(int argc, char **argv)
{
    struct lock_client *c = NULL;
    const char *demo;
    int err, a, b = 0;

    if (argc < 3)
        return usage();
    demo = argv[2];
    if (strcmp(demo, "mutex") == 0) {
        a = arg_int(argc, argv, 4, 10, 1, 1000000);
        if (argc < 4 || argc > 5 || a < 0)
            return usage();
    } else if (strcmp(demo, "fair") == 0) {
        a = arg_int(argc, argv, 3, 4, 1, THREADS_MAX);
        if (argc > 4 || a < 0)
            return usage();
    } else if (strcmp(demo, "semaphore") == 0) {
        a = arg_int(argc, argv, 3, 2, 1, LOCK_PERMITS_MAX);
        b = arg_int(argc, argv, 4, 6, 1, THREADS_MAX);
        if (argc > 5 || a < 0 || b < 0)
            return usage();
    } else {
        return usage();
    }

    /* A Redis server that closes a connection must not end the process
     * at the next write to it (see lock.h). */
    signal(SIGPIPE, SIG_IGN);
    /* Connections are made on first use: a server that is down shows up
     * as an error of the first acquire, not here. */
    err = lock_client_open(argv[1], NULL, &c);
    if (err) {
        fail("lock_client_open", err);
        return 1;
    }
    if (strcmp(demo, "mutex") == 0)
        err = demo_mutex(c, argv[3], a);
    else if (strcmp(demo, "fair") == 0)
        err = demo_fair(c, a);
    else
        err = demo_semaphore(c, a, b);
    /* Every struct lock is freed by now, as lock_client_close() asks. */
    lock_client_close(c);
    return err ? 1 : 0;
}
