/*
 * deadline.c - request deadlines against slow clients (slowloris); see
 * deadline.h. Connections are kept in one list under a mutex (added and
 * removed once per connection); a reaper thread walks it a few times per
 * timeout and shuts down the sockets whose request is overdue.
 *
 * shutdown(2) from another thread is safe because libmicrohttpd calls the
 * "closed" notification, which removes the connection here under the same
 * mutex, before it closes the socket: a socket in the list is never one
 * that was closed and whose descriptor was reused.
 */
#include "handlers/deadline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "common/util.h"

struct deadline_conn {
    struct deadline_conn *prev, *next;
    int fd;
    /* Monotonic ms by which the request must have arrived; 0 while a
     * request is being served. Written by its worker, read by the reaper. */
    _Atomic int64_t due_ms;
};

struct deadlines {
    pthread_mutex_t mu; /* guards list, stop */
    pthread_cond_t cv;
    pthread_t reaper;
    bool stop;
    int64_t timeout_ms;
    int64_t tick_ms;
    struct deadline_conn list; /* sentinel of a circular list */
};

/* Shut down the overdue sockets; returns how many. Holds d->mu. */
static size_t reap(struct deadlines *d, int64_t now)
{
    size_t n = 0;

    for (struct deadline_conn *c = d->list.next; c != &d->list; c = c->next) {
        int64_t due = atomic_load(&c->due_ms);
        /* Only a connection still due: a worker may have taken its
         * request in the meantime. */
        if (due && now >= due &&
            atomic_compare_exchange_strong(&c->due_ms, &due, 0)) {
            shutdown(c->fd, SHUT_RDWR);
            n++;
        }
    }
    return n;
}

static void *reaper_main(void *arg)
{
    struct deadlines *d = arg;

    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += d->tick_ms / 1000;
        ts.tv_nsec += (d->tick_ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        if (d->stop)
            break;
        size_t n = reap(d, util_mono_ms());
        if (n)
            log_info("slow clients disconnected", "count=%zu timeout_ms=%lld",
                     n, (long long)d->timeout_ms);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

struct deadlines *deadlines_start(unsigned timeout_s)
{
    struct deadlines *d = xcalloc(1, sizeof(*d));
    pthread_condattr_t ca;

    d->timeout_ms = (int64_t)timeout_s * 1000;
    /* A few looks per timeout: a slow client is cut within a quarter of
     * it past its deadline. */
    d->tick_ms = d->timeout_ms / 4;
    if (d->tick_ms < 100)
        d->tick_ms = 100;
    if (d->tick_ms > 1000)
        d->tick_ms = 1000;
    d->list.next = d->list.prev = &d->list;
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&d->reaper, NULL, reaper_main, d) != 0)
        abort(); /* out of threads at start-up */
    return d;
}

void deadlines_stop(struct deadlines *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->reaper, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

struct deadline_conn *deadline_conn_add(struct deadlines *d, int fd)
{
    struct deadline_conn *c = xcalloc(1, sizeof(*c));

    c->fd = fd;
    atomic_store(&c->due_ms, util_mono_ms() + d->timeout_ms);
    pthread_mutex_lock(&d->mu);
    c->next = d->list.next;
    c->prev = &d->list;
    d->list.next->prev = c;
    d->list.next = c;
    pthread_mutex_unlock(&d->mu);
    return c;
}

void deadline_conn_remove(struct deadlines *d, struct deadline_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&d->mu);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    pthread_mutex_unlock(&d->mu);
    free(c);
}

void deadline_conn_busy(struct deadline_conn *c)
{
    if (c)
        atomic_store(&c->due_ms, 0);
}

void deadline_conn_idle(struct deadlines *d, struct deadline_conn *c)
{
    if (c)
        atomic_store(&c->due_ms, util_mono_ms() + d->timeout_ms);
}
