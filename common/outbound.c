/*
 * outbound.c - the sender of calls to the outside (see outbound.h): one
 * thread, one libcurl multi handle, and per queue a list of calls waiting
 * for a connection. Other threads only append to the incoming list under
 * the mutex and wake the thread (curl_multi_wakeup()); everything else is
 * the thread's own.
 */
#include "common/outbound.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "common/util.h"

/* The longest the thread sleeps with nothing to do: a bound, not a
 * clock (libcurl's own timers and the wake-up end it sooner). */
#define IDLE_POLL_MS 1000

struct ob_call {
    struct outbound_queue *q;
    char *url;
    char *body;
    size_t body_len;
    struct curl_slist *headers;
    int64_t deadline_ms; /* monotonic */
    unsigned try_ms, tries_max, tries;
    bool retry_unanswered; /* try again after a try that may have arrived */
    bool maybe_arrived;    /* a try may have reached the receiver */
    void (*done)(void *arg, const struct outbound_result *r);
    void *arg;
    long status;
    CURL *easy; /* while a try is in flight */
    char why[CURL_ERROR_SIZE];
    struct ob_call *next, *prev; /* in one list at a time */
};

/* A list of calls, oldest first. */
struct ob_list {
    struct ob_call *head, *tail;
};

struct outbound_queue {
    struct outbound *o;
    const char *name;
    unsigned max_calls, max_conns;
    unsigned held;          /* under o->mu: posted and not yet ended */
    unsigned in_flight;     /* the thread's */
    struct ob_list waiting; /* the thread's */
    struct outbound_queue *next;
};

struct outbound {
    pthread_mutex_t mu;
    pthread_t thread;
    CURLM *multi;
    bool stopping;                 /* under mu */
    bool joined;                   /* outbound_stop()'s */
    struct ob_list incoming;       /* under mu */
    struct outbound_queue *queues; /* under mu */
    struct ob_list active;         /* the thread's: tries in flight */
};

static void list_push(struct ob_list *l, struct ob_call *c)
{
    c->next = NULL;
    c->prev = l->tail;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* Put c back at the front: a call tried again keeps its turn. */
static void list_push_front(struct ob_list *l, struct ob_call *c)
{
    c->prev = NULL;
    c->next = l->head;
    if (l->head)
        l->head->prev = c;
    else
        l->tail = c;
    l->head = c;
}

static void list_remove(struct ob_list *l, struct ob_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->next = c->prev = NULL;
}

static void call_free(struct ob_call *c)
{
    curl_slist_free_all(c->headers);
    free(c->url);
    free(c->body);
    free(c);
}

/* c is over: tell its owner, then forget it. */
static void call_end(struct outbound *o, struct ob_call *c, int err)
{
    struct outbound_result r = {.err = err,
                                .status = c->status,
                                .tries = c->tries,
                                .maybe_arrived = c->maybe_arrived};

    pthread_mutex_lock(&o->mu);
    c->q->held--;
    pthread_mutex_unlock(&o->mu);
    c->done(c->arg, &r);
    call_free(c);
}

/* The answer's body is not read: only its status counts. */
static size_t discard(char *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    (void)ctx;
    return size * n;
}

/* Start a try of c, which has time left at now. */
static void try_start(struct outbound *o, struct ob_call *c, int64_t now)
{
    int64_t left = c->deadline_ms - now;
    long timeout = c->try_ms && c->try_ms < left ? (long)c->try_ms : (long)left;
    CURL *h = curl_easy_init();

    if (!h)
        abort(); /* out of memory, as the allocation wrapper would */
    c->why[0] = '\0';
    c->tries++;
    curl_easy_setopt(h, CURLOPT_URL, c->url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->why);
    /* Only the configured address: a redirect elsewhere is a failure. */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PRIVATE, c);
    c->easy = h;
    c->q->in_flight++;
    list_push(&o->active, c);
    curl_multi_add_handle(o->multi, h);
}

/*
 * Whether the try on h that ended with rc may have reached the receiver:
 * it was answered (whatever the answer), or it failed once connected (a
 * timeout or a reset after the request went out). A try that never
 * connected, or never left (the stop), did not.
 */
static bool try_may_have_arrived(CURL *h, CURLcode rc)
{
    curl_off_t connected = 0;

    if (rc == CURLE_OK)
        return true;
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_COULDNT_RESOLVE_PROXY)
        return false;
    curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connected);
    return connected > 0;
}

/* A try of c ended with rc: end c, or queue it for another try. */
static void try_ended(struct outbound *o, struct ob_call *c, CURLcode rc)
{
    bool unanswered = rc != CURLE_OK;
    int64_t now;

    c->status = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &c->status);
    if (try_may_have_arrived(c->easy, rc))
        c->maybe_arrived = true;
    else
        unanswered = false; /* it never left: a try again is safe */
    curl_multi_remove_handle(o->multi, c->easy);
    curl_easy_cleanup(c->easy);
    c->easy = NULL;
    c->q->in_flight--;
    list_remove(&o->active, c);
    if (rc == CURLE_OK && c->status >= 200 && c->status < 300) {
        call_end(o, c, 0);
        return;
    }
    if (rc != CURLE_OK)
        log_warn("outbound call failed", "queue=%s try=%u why=\"%s\"",
                 c->q->name, c->tries,
                 c->why[0] ? c->why : curl_easy_strerror(rc));
    else
        log_warn("outbound call failed", "queue=%s try=%u status=%ld",
                 c->q->name, c->tries, c->status);
    now = util_mono_ms();
    if (now >= c->deadline_ms ||
        (unanswered && !c->retry_unanswered && rc == CURLE_OPERATION_TIMEDOUT))
        call_end(o, c, -ETIMEDOUT);
    else if (c->tries >= c->tries_max || (unanswered && !c->retry_unanswered))
        call_end(o, c, -ECOMM);
    else
        list_push_front(&c->q->waiting, c);
}

/* End the waiting calls whose time is up; start what room allows. The
 * soonest deadline of a call left waiting into *next_ms. */
static void queues_run(struct outbound *o, struct outbound_queue *queues,
                       int64_t now, int64_t *next_ms)
{
    for (struct outbound_queue *q = queues; q; q = q->next) {
        struct ob_call *c = q->waiting.head;

        while (c) {
            struct ob_call *next = c->next;

            if (c->deadline_ms <= now) {
                list_remove(&q->waiting, c);
                log_warn("outbound call not sent in time", "queue=%s tries=%u",
                         q->name, c->tries);
                call_end(o, c, -ETIMEDOUT);
            } else if (q->in_flight < q->max_conns) {
                list_remove(&q->waiting, c);
                try_start(o, c, now);
            } else if (c->deadline_ms < *next_ms) {
                *next_ms = c->deadline_ms;
            }
            c = next;
        }
    }
}

/* What was posted since the last look, into its queues; true once the
 * sender stops (then nothing more arrives). */
static bool incoming_take(struct outbound *o, struct outbound_queue **queues)
{
    struct ob_list in;
    bool stopping;

    pthread_mutex_lock(&o->mu);
    in = o->incoming;
    o->incoming = (struct ob_list){0};
    stopping = o->stopping;
    *queues = o->queues;
    pthread_mutex_unlock(&o->mu);
    while (in.head) {
        struct ob_call *c = in.head;

        in.head = c->next;
        list_push(&c->q->waiting, c);
    }
    return stopping;
}

/* At the stop: every call still held ends with -ESHUTDOWN. */
static void drain_all(struct outbound *o, struct outbound_queue *queues)
{
    while (o->active.head) {
        struct ob_call *c = o->active.head;
        curl_off_t connected = 0;

        /* Cut short: connected, its request may have gone out. */
        curl_easy_getinfo(c->easy, CURLINFO_CONNECT_TIME_T, &connected);
        if (connected > 0)
            c->maybe_arrived = true;
        curl_multi_remove_handle(o->multi, c->easy);
        curl_easy_cleanup(c->easy);
        c->easy = NULL;
        c->q->in_flight--;
        list_remove(&o->active, c);
        call_end(o, c, -ESHUTDOWN);
    }
    for (struct outbound_queue *q = queues; q; q = q->next)
        while (q->waiting.head) {
            struct ob_call *c = q->waiting.head;

            list_remove(&q->waiting, c);
            call_end(o, c, -ESHUTDOWN);
        }
}

static void *sender_main(void *arg)
{
    struct outbound *o = arg;
    struct outbound_queue *queues;

    while (!incoming_take(o, &queues)) {
        int64_t now = util_mono_ms(), next = now + IDLE_POLL_MS;
        int running, left;
        CURLMsg *m;

        curl_multi_perform(o->multi, &running);
        while ((m = curl_multi_info_read(o->multi, &left)))
            if (m->msg == CURLMSG_DONE) {
                struct ob_call *c = NULL;

                curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &c);
                try_ended(o, c, m->data.result);
            }
        now = util_mono_ms();
        queues_run(o, queues, now, &next);
        /* Started tries are driven by the next perform: poll returns at
         * once for them (libcurl's own timer is due). */
        curl_multi_poll(o->multi, NULL, 0, next > now ? (int)(next - now) : 0,
                        NULL);
    }
    drain_all(o, queues);
    return NULL;
}

struct outbound *outbound_start(void)
{
    struct outbound *o = xcalloc(1, sizeof(*o));

    pthread_mutex_init(&o->mu, NULL);
    o->multi = curl_multi_init();
    if (!o->multi || pthread_create(&o->thread, NULL, sender_main, o) != 0)
        abort();
    return o;
}

struct outbound_queue *outbound_queue_new(struct outbound *o, const char *name,
                                          unsigned max_calls,
                                          unsigned max_conns)
{
    struct outbound_queue *q = xcalloc(1, sizeof(*q));

    q->o = o;
    q->name = name;
    q->max_calls = max_calls ? max_calls : 1;
    q->max_conns = max_conns ? max_conns : 1;
    pthread_mutex_lock(&o->mu);
    q->next = o->queues;
    o->queues = q;
    pthread_mutex_unlock(&o->mu);
    return q;
}

int outbound_post(struct outbound_queue *q, const struct outbound_call *call)
{
    struct outbound *o = q->o;
    struct ob_call *c = xcalloc(1, sizeof(*c));
    int err = 0;

    c->q = q;
    c->url = xstrdup(call->url);
    c->body = xmalloc(call->body_len + 1);
    memcpy(c->body, call->body, call->body_len);
    c->body[call->body_len] = '\0';
    c->body_len = call->body_len;
    for (const char *const *h = call->headers; h && *h; h++)
        c->headers = curl_slist_append(c->headers, *h);
    /* No "Expect: 100-continue" round trip for a body. */
    c->headers = curl_slist_append(c->headers, "Expect:");
    if (!c->headers)
        abort();
    c->deadline_ms = util_mono_ms() + call->deadline_ms;
    c->try_ms = call->try_ms;
    c->tries_max = call->tries ? call->tries : 1;
    c->retry_unanswered = call->retry_unanswered;
    c->done = call->done;
    c->arg = call->arg;
    /* Checked and queued at once: the thread's last look at the incoming
     * list, once it stops, sees every call accepted before. */
    pthread_mutex_lock(&o->mu);
    if (o->stopping)
        err = -ESHUTDOWN;
    else if (q->held >= q->max_calls)
        err = -EAGAIN;
    else {
        q->held++;
        list_push(&o->incoming, c);
    }
    pthread_mutex_unlock(&o->mu);
    if (err) {
        call_free(c);
        return err;
    }
    curl_multi_wakeup(o->multi);
    return 0;
}

unsigned outbound_queue_depth(struct outbound_queue *q)
{
    unsigned n;

    pthread_mutex_lock(&q->o->mu);
    n = q->held;
    pthread_mutex_unlock(&q->o->mu);
    return n;
}

void outbound_stop(struct outbound *o)
{
    if (!o || o->joined)
        return;
    pthread_mutex_lock(&o->mu);
    o->stopping = true;
    pthread_mutex_unlock(&o->mu);
    curl_multi_wakeup(o->multi);
    pthread_join(o->thread, NULL);
    o->joined = true;
}

void outbound_free(struct outbound *o)
{
    if (!o)
        return;
    outbound_stop(o);
    while (o->queues) {
        struct outbound_queue *q = o->queues;

        o->queues = q->next;
        free(q);
    }
    curl_multi_cleanup(o->multi);
    pthread_mutex_destroy(&o->mu);
    free(o);
}
