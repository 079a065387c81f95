/*
 * outbound.h - calls to services outside seckilld (an SMS provider's
 * webhook, a shop's systems), made by a sender of their own: one thread
 * running libcurl's multi interface, so that no thread that serves
 * requests ever waits for the outside, and one slow or hung receiver
 * delays nothing but its own calls.
 *
 * Each kind of call has a queue of its own (outbound_queue_new()) with a
 * bound on the calls it holds, in flight or waiting for a connection: a
 * full queue refuses at once, and the backlog of one kind never delays
 * another's (each queue has its own connections, started as soon as it
 * has room). A call has a deadline, counted from when it was posted
 * (time waiting in its queue included), and is tried again after a
 * failure while tries and time are left.
 *
 * Thread-safety: outbound_post() from any thread; a call's done() runs on
 * the sender's thread and must not wait.
 */
#ifndef SECKILL_COMMON_OUTBOUND_H
#define SECKILL_COMMON_OUTBOUND_H

#include <stdbool.h>
#include <stddef.h>

struct outbound;
struct outbound_queue;

/* How a call ended, given to its done(). */
struct outbound_result {
    int err;     /* 0: answered 2xx; -ETIMEDOUT: its deadline passed, or
                  * a try went unanswered; -ECOMM: the tries failed
                  * (refused, reset, not 2xx); -ESHUTDOWN: the sender
                  * stopped first */
    long status; /* the last answer's HTTP status, 0 when none came */
    unsigned tries;
    /* A try may have reached the receiver (it was answered, or it went
     * unanswered once connected): a failed call's effect is unknown
     * then, not absent. */
    bool maybe_arrived;
};

/* One POST. The strings are copied by outbound_post(). */
struct outbound_call {
    const char *url;
    const char *body;
    size_t body_len;
    /* Request headers, "Name: value" each, NULL-terminated, or NULL. */
    const char *const *headers;
    unsigned deadline_ms; /* from outbound_post() to giving up */
    unsigned try_ms;      /* one try at most (0: the whole deadline) */
    unsigned tries;       /* at most (0: one) */
    /* Try again after a try that may have arrived and went unanswered
     * (a timeout or a reset once connected)? Only when the receiver
     * takes the same call twice as once. Answered failures (not 2xx)
     * and tries that never connected are tried again regardless. */
    bool retry_unanswered;
    /* Called exactly once, unless outbound_post() refused the call. */
    void (*done)(void *arg, const struct outbound_result *r);
    void *arg;
};

/* Start the sender's thread. Never returns NULL. */
struct outbound *outbound_start(void);

/*
 * A queue for one kind of call on o, named name (a literal, for the
 * logs): at most max_calls held at once, of which at most max_conns in
 * flight. Made before calls are posted to it; freed with o.
 */
struct outbound_queue *outbound_queue_new(struct outbound *o, const char *name,
                                          unsigned max_calls,
                                          unsigned max_conns);

/*
 * Post c on q. Returns 0: c->done() will be called exactly once, never
 * inside this call. -EAGAIN: q holds its maximum; -ESHUTDOWN: the sender
 * has stopped. Then nothing was queued and done() is not called.
 */
int outbound_post(struct outbound_queue *q, const struct outbound_call *c);

/* The calls q holds now (in flight or waiting). */
unsigned outbound_queue_depth(struct outbound_queue *q);

/*
 * Refuse new calls, end every held one with -ESHUTDOWN (their done()
 * runs before this returns) and join the sender's thread. Idempotent;
 * accepts NULL. o stays valid (outbound_post() answers -ESHUTDOWN) until
 * outbound_free().
 */
void outbound_stop(struct outbound *o);

/* Stop o if not stopped yet, and free it with its queues. Accepts NULL. */
void outbound_free(struct outbound *o);

#endif
