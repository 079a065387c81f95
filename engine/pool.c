/*
 * pool.c - the task pool (see pool.h): one queue under one mutex, and
 * threads that take the task at its head.
 */
#include "engine/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/util.h"

struct pool {
    pthread_mutex_t mu; /* guards the queue and stopping */
    pthread_cond_t cond;
    struct pool_task *head, *tail;
    bool stopping;
    bool stopped; /* pool_stop() is done */
    pthread_t *threads;
    unsigned nthreads;
};

static void *worker_main(void *arg)
{
    struct pool *p = arg;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct pool_task *t;

        while (!p->stopping && !p->head)
            pthread_cond_wait(&p->cond, &p->mu);
        if (p->stopping)
            break;
        t = p->head;
        p->head = t->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        t->run(t, 0);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct pool *pool_start(unsigned threads)
{
    struct pool *p = xcalloc(1, sizeof(*p));

    if (threads < 1)
        threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->threads = xcalloc(threads, sizeof(*p->threads));
    for (unsigned i = 0; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            log_error("task pool start failed", "thread=%u", i);
            abort();
        }
        p->nthreads++;
    }
    return p;
}

int pool_run(struct pool *p, struct pool_task *t)
{
    t->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        return -ESHUTDOWN;
    }
    if (p->tail)
        p->tail->next = t;
    else
        p->head = t;
    p->tail = t;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void pool_stop(struct pool *p)
{
    struct pool_task *left;

    if (!p || p->stopped)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    /* No thread left, and nothing is queued any more: the queue is ours. */
    left = p->head;
    p->head = p->tail = NULL;
    while (left) {
        struct pool_task *t = left;

        left = t->next;
        t->run(t, -ESHUTDOWN);
    }
    p->stopped = true;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pool_stop(p);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
