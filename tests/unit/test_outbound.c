/*
 * test_outbound.c - the sender of calls to the outside (common/outbound.h)
 * against receivers on loopback inside this process: one that never
 * answers (its socket listens and never accepts), one that answers every
 * request with a fixed status. Deadlines, the queue's bound, tries, a
 * full queue that does not delay another, and the stop.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>
#include <curl/curl.h>

#include "common/outbound.h"
#include "common/util.h"

/* A socket listening on a free loopback port; its port into *port. */
static int listener(uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(0, bind(fd, (struct sockaddr *)&a, sizeof(a)));
    assert_int_equal(0, listen(fd, 256));
    assert_int_equal(0, getsockname(fd, (struct sockaddr *)&a, &len));
    *port = ntohs(a.sin_port);
    return fd;
}

/* A receiver that answers each request with status (a thread). */
struct answerer {
    int fd;
    int status;
    atomic_uint requests;
    pthread_t thread;
};

static void *answer_main(void *arg)
{
    struct answerer *w = arg;
    char buf[4096], reply[128];
    int c;

    snprintf(reply, sizeof(reply),
             "HTTP/1.1 %d X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
             w->status);
    while ((c = accept(w->fd, NULL, NULL)) >= 0) {
        size_t got = 0;
        ssize_t n;

        /* The head and the small body: until the blank line and a
         * moment for the body (it comes in the same write here). */
        while (got < sizeof(buf) - 1 &&
               (n = read(c, buf + got, sizeof(buf) - 1 - got)) > 0) {
            got += (size_t)n;
            buf[got] = '\0';
            if (strstr(buf, "\r\n\r\n") && strstr(buf, "}"))
                break;
        }
        atomic_fetch_add(&w->requests, 1);
        if (write(c, reply, strlen(reply)) < 0)
            break;
        close(c);
    }
    return NULL;
}

static void answerer_start(struct answerer *w, int status, uint16_t *port)
{
    w->fd = listener(port);
    w->status = status;
    atomic_init(&w->requests, 0);
    assert_int_equal(0, pthread_create(&w->thread, NULL, answer_main, w));
}

static void answerer_stop(struct answerer *w)
{
    shutdown(w->fd, SHUT_RDWR);
    close(w->fd);
    pthread_join(w->thread, NULL);
}

/* What a call's done() saw. */
struct seen {
    pthread_mutex_t mu;
    int n;
    int err[64];
    long status[64];
    unsigned tries[64];
    bool arrived[64];
    int64_t at_ms[64];
};

static void on_done(void *arg, const struct outbound_result *r)
{
    struct seen *s = arg;

    pthread_mutex_lock(&s->mu);
    if (s->n < 64) {
        s->err[s->n] = r->err;
        s->status[s->n] = r->status;
        s->tries[s->n] = r->tries;
        s->arrived[s->n] = r->maybe_arrived;
        s->at_ms[s->n] = util_mono_ms();
        s->n++;
    }
    pthread_mutex_unlock(&s->mu);
}

static int seen_count(struct seen *s)
{
    int n;

    pthread_mutex_lock(&s->mu);
    n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Wait up to ms for s to hold n calls. */
static void seen_wait(struct seen *s, int n, int ms)
{
    for (int i = 0; i < ms / 10 && seen_count(s) < n; i++)
        usleep(10 * 1000);
    assert_int_equal(n, seen_count(s));
}

static int post_tries(struct outbound_queue *q, uint16_t port,
                      unsigned deadline_ms, unsigned try_ms, unsigned tries,
                      bool retry_unanswered, struct seen *s)
{
    char url[64];

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hook", (unsigned)port);
    return outbound_post(q, &(struct outbound_call){
                                .url = url,
                                .body = "{}",
                                .body_len = 2,
                                .deadline_ms = deadline_ms,
                                .try_ms = try_ms,
                                .tries = tries,
                                .retry_unanswered = retry_unanswered,
                                .done = on_done,
                                .arg = s,
                            });
}

static int post(struct outbound_queue *q, uint16_t port, unsigned deadline_ms,
                unsigned tries, struct seen *s)
{
    char url[64];
    const char *headers[] = {"Content-Type: application/json", NULL};

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/hook", (unsigned)port);
    return outbound_post(q, &(struct outbound_call){
                                .url = url,
                                .body = "{\"a\":1}",
                                .body_len = 7,
                                .headers = headers,
                                .deadline_ms = deadline_ms,
                                .try_ms = 0,
                                .tries = tries,
                                .done = on_done,
                                .arg = s,
                            });
}

/* A receiver that never answers: every call ends at its deadline,
 * time in the queue included, and a full queue refuses at once. */
static void test_deadline_and_bound(void **state)
{
    struct outbound *o = outbound_start();
    struct outbound_queue *q = outbound_queue_new(o, "hung", 4, 2);
    struct seen s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    uint16_t port;
    int fd = listener(&port);
    int64_t t0 = util_mono_ms();

    (void)state;
    for (int i = 0; i < 4; i++)
        assert_int_equal(0, post(q, port, 600, 3, &s));
    assert_int_equal(-EAGAIN, post(q, port, 600, 1, &s));
    assert_int_equal(4, (int)outbound_queue_depth(q));
    seen_wait(&s, 4, 5000);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(-ETIMEDOUT, s.err[i]);
        assert_true(s.at_ms[i] - t0 >= 550 && s.at_ms[i] - t0 < 3000);
    }
    assert_int_equal(0, (int)outbound_queue_depth(q));
    /* Room again. */
    assert_int_equal(0, post(q, port, 100, 1, &s));
    seen_wait(&s, 5, 5000);
    outbound_free(o);
    close(fd);
}

/* A receiver that answers 500: tried as often as allowed, then -ECOMM
 * with the last status; one that answers 204: done at once. */
static void test_tries(void **state)
{
    struct outbound *o = outbound_start();
    struct outbound_queue *q = outbound_queue_new(o, "tries", 8, 8);
    struct seen s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct answerer bad, good;
    uint16_t bad_port, good_port;

    (void)state;
    answerer_start(&bad, 500, &bad_port);
    answerer_start(&good, 204, &good_port);
    assert_int_equal(0, post(q, bad_port, 5000, 3, &s));
    seen_wait(&s, 1, 5000);
    assert_int_equal(-ECOMM, s.err[0]);
    assert_int_equal(500, s.status[0]);
    assert_int_equal(3, s.tries[0]);
    assert_int_equal(3, (int)atomic_load(&bad.requests));
    assert_int_equal(0, post(q, good_port, 5000, 3, &s));
    seen_wait(&s, 2, 5000);
    assert_int_equal(0, s.err[1]);
    assert_int_equal(204, s.status[1]);
    assert_int_equal(1, s.tries[1]);
    outbound_free(o);
    answerer_stop(&bad);
    answerer_stop(&good);
}

/* One kind's backlog (every connection of its queue held by a receiver
 * that hangs) does not delay another kind's calls. */
static void test_queues_apart(void **state)
{
    struct outbound *o = outbound_start();
    struct outbound_queue *slow = outbound_queue_new(o, "slow", 32, 4);
    struct outbound_queue *fast = outbound_queue_new(o, "fast", 32, 4);
    struct seen hung = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct seen ok = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct answerer good;
    uint16_t hung_port, good_port;
    int fd = listener(&hung_port);
    int64_t t0;

    (void)state;
    answerer_start(&good, 200, &good_port);
    for (int i = 0; i < 32; i++)
        assert_int_equal(0, post(slow, hung_port, 3000, 1, &hung));
    t0 = util_mono_ms();
    for (int i = 0; i < 8; i++)
        assert_int_equal(0, post(fast, good_port, 3000, 1, &ok));
    seen_wait(&ok, 8, 2000);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(0, ok.err[i]);
        assert_true(ok.at_ms[i] - t0 < 1500);
    }
    assert_int_equal(0, seen_count(&hung));
    /* The stop ends what is still held, before it returns. */
    outbound_stop(o);
    assert_int_equal(32, seen_count(&hung));
    for (int i = 0; i < 32; i++)
        assert_int_equal(-ESHUTDOWN, hung.err[i]);
    assert_int_equal(-ESHUTDOWN, post(slow, hung_port, 100, 1, &hung));
    outbound_free(o);
    answerer_stop(&good);
    close(fd);
}

/* What a failed call tells of its effect: a receiver never reached
 * (nothing listens) is tried again and did not get it; one reached that
 * does not answer may have it, and is tried again only when the caller
 * says a second call is harmless. */
static void test_maybe_arrived(void **state)
{
    struct outbound *o = outbound_start();
    struct outbound_queue *q = outbound_queue_new(o, "arrived", 8, 8);
    struct seen s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    uint16_t hung_port, closed_port;
    int hung = listener(&hung_port), closed = listener(&closed_port);
    int64_t t0;

    (void)state;
    close(closed); /* now nothing listens there: refused */
    assert_int_equal(0, post_tries(q, closed_port, 3000, 500, 3, false, &s));
    seen_wait(&s, 1, 5000);
    assert_int_equal(-ECOMM, s.err[0]);
    assert_int_equal(3, s.tries[0]);
    assert_false(s.arrived[0]);

    t0 = util_mono_ms();
    assert_int_equal(0, post_tries(q, hung_port, 3000, 400, 3, false, &s));
    seen_wait(&s, 2, 5000);
    assert_int_equal(-ETIMEDOUT, s.err[1]);
    assert_int_equal(1, s.tries[1]);
    assert_true(s.arrived[1]);
    assert_true(s.at_ms[1] - t0 < 2000);

    assert_int_equal(0, post_tries(q, hung_port, 1500, 400, 3, true, &s));
    seen_wait(&s, 3, 5000);
    assert_int_equal(3, s.tries[2]);
    assert_true(s.arrived[2]);
    outbound_free(o);
    close(hung);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_and_bound),
        cmocka_unit_test(test_tries),
        cmocka_unit_test(test_queues_apart),
        cmocka_unit_test(test_maybe_arrived),
    };

    curl_global_init(CURL_GLOBAL_DEFAULT);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
