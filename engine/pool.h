/*
 * pool.h - a plain task pool: a few threads that run tasks first come,
 * first served. For the work that must not run on an HTTP thread because
 * it waits for MySQL or Redis, and is not a purchase (purchases go to the
 * purchase engine, engine.h, which batches them per voucher).
 *
 * A task is the caller's struct, usually embedded in its own state; the
 * pool only links it into its queue. Thread-safe: pool_run() from any
 * thread.
 */
#ifndef SECKILL_POOL_H
#define SECKILL_POOL_H

struct pool_task {
    /*
     * Called exactly once: on a pool thread with err 0, or, when the pool
     * stopped before the task's turn, with err -ESHUTDOWN on the thread
     * that stops it (then the task must only answer, not start its work).
     * The task belongs to the caller again as soon as run() is called.
     */
    void (*run)(struct pool_task *t, int err);
    /* Private to the pool: */
    struct pool_task *next;
};

struct pool;

/* Start threads (>= 1) threads. Never returns NULL. */
struct pool *pool_start(unsigned threads);

/*
 * Queue t. Returns 0: t->run() will be called exactly once, never from
 * inside this call. Or -ESHUTDOWN: the pool is stopping, nothing queued,
 * run() not called.
 */
int pool_run(struct pool *p, struct pool_task *t);

/*
 * Refuse new tasks, let the running ones finish, answer the queued ones
 * with -ESHUTDOWN and join the threads: every run() has returned when
 * this returns. p stays valid (pool_run() answers -ESHUTDOWN) until
 * pool_free(). Idempotent; accepts NULL.
 */
void pool_stop(struct pool *p);

/* Stop (pool_stop()) if not stopped yet, and free p. Accepts NULL. */
void pool_free(struct pool *p);

#endif
