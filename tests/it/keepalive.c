/*
 * keepalive.c - the crowd of keep-alive connections of keepalive.h.
 */
#include "tests/it/keepalive.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "tests/it/harness.h"

#define OUT_MAX 2048
#define IN_MAX 16384

struct conn {
    int fd;         /* -1 once closed */
    bool in_flight; /* a request sent (or being sent), no answer yet */
    bool closing;   /* its last answer said "Connection: close" */
    char out[OUT_MAX];
    size_t out_len, out_off;
    char in[IN_MAX];
    size_t in_len;
};

struct it_ka {
    const struct it_ka_ops *ops;
    void *ctx;
    size_t n;
    struct conn *c;
    struct pollfd *p;
};

struct it_ka *it_ka_open(uint16_t port, size_t n, const struct it_ka_ops *ops,
                         void *ctx)
{
    struct it_ka *k = xcalloc(1, sizeof(*k));

    k->ops = ops;
    k->ctx = ctx;
    k->n = n;
    k->c = xcalloc(n, sizeof(*k->c));
    k->p = xcalloc(n, sizeof(*k->p));
    for (size_t i = 0; i < n; i++) {
        k->c[i].fd = it_raw_connect(port);
        assert_int_equal(0, fcntl(k->c[i].fd, F_SETFL, O_NONBLOCK));
    }
    return k;
}

static void conn_close(struct it_ka *k, size_t i)
{
    struct conn *c = &k->c[i];

    if (c->in_flight && k->ops->lost)
        k->ops->lost(k->ctx, i);
    close(c->fd);
    c->fd = -1;
    c->in_flight = false;
}

/* A whole answer in c->in: its status, and its length in *len; 0 while
 * it is not all there yet, -1 when it is not HTTP. */
static long answer_parse(struct conn *c, size_t *len)
{
    char *end, *cl;
    long status;
    size_t head, body;

    c->in[c->in_len] = '\0';
    end = strstr(c->in, "\r\n\r\n");
    if (!end)
        return c->in_len >= IN_MAX - 1 ? -1 : 0;
    if (sscanf(c->in, "HTTP/1.1 %ld", &status) != 1)
        return -1;
    cl = strcasestr(c->in, "\r\nContent-Length:");
    if (!cl || cl > end)
        return -1;
    head = (size_t)(end + 4 - c->in);
    body = strtoul(cl + 17, NULL, 10);
    if (head + body > c->in_len)
        return head + body >= IN_MAX ? -1 : 0;
    *len = head + body;
    return status;
}

/* Read what came on connection i and report a whole answer. */
static void conn_read(struct it_ka *k, size_t i)
{
    struct conn *c = &k->c[i];
    ssize_t r = recv(c->fd, c->in + c->in_len, IN_MAX - 1 - c->in_len, 0);
    size_t len = 0;
    long status;

    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        conn_close(k, i);
        return;
    }
    c->in_len += (size_t)r;
    status = answer_parse(c, &len);
    if (status == 0)
        return;
    c->in_flight = false;
    if (status > 0) {
        char *end = strstr(c->in, "\r\n\r\n");

        *end = '\0';
        c->closing = strcasestr(c->in, "\r\nConnection: close") != NULL;
        *end = '\r';
        c->in[len] = '\0';
    }
    k->ops->answer(k->ctx, i, status, c->in, status > 0 ? len : c->in_len);
    if (status < 0) {
        conn_close(k, i);
        return;
    }
    /* A second answer right behind it cannot be: one request at a time. */
    c->in_len = 0;
}

/* Send what is left of connection i's request, as far as the socket
 * takes it now. */
static void conn_send(struct it_ka *k, size_t i)
{
    struct conn *c = &k->c[i];
    ssize_t w =
        send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

    if (w > 0)
        c->out_off += (size_t)w;
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
        conn_close(k, i);
}

size_t it_ka_step(struct it_ka *k, int timeout_ms)
{
    size_t open = 0;

    for (size_t i = 0; i < k->n; i++) {
        struct conn *c = &k->c[i];

        if (c->fd >= 0 && !c->in_flight && !c->closing) {
            c->out_len = k->ops->next(k->ctx, i, c->out, OUT_MAX);
            assert_true(c->out_len < OUT_MAX);
            c->out_off = 0;
            c->in_len = 0;
            c->in_flight = c->out_len > 0;
            /* Usually all of it fits in the socket at once. */
            if (c->in_flight)
                conn_send(k, i);
        }
        k->p[i].fd = c->fd;
        k->p[i].events = c->out_off < c->out_len ? POLLOUT : POLLIN;
        k->p[i].revents = 0;
        open += c->fd >= 0;
    }
    if (!open)
        return 0;
    if (poll(k->p, k->n, timeout_ms) <= 0)
        return open;
    for (size_t i = 0; i < k->n; i++) {
        struct conn *c = &k->c[i];

        if (c->fd < 0 || !k->p[i].revents)
            continue;
        if (c->out_off < c->out_len)
            conn_send(k, i);
        else
            conn_read(k, i);
    }
    open = 0;
    for (size_t i = 0; i < k->n; i++)
        open += k->c[i].fd >= 0;
    return open;
}

size_t it_ka_busy(const struct it_ka *k)
{
    size_t busy = 0;

    for (size_t i = 0; i < k->n; i++)
        busy += k->c[i].in_flight;
    return busy;
}

void it_ka_close(struct it_ka *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->n; i++)
        if (k->c[i].fd >= 0)
            close(k->c[i].fd);
    free(k->p);
    free(k->c);
    free(k);
}
