/*
 * keepalive.h - a crowd of keep-alive HTTP/1.1 connections to one server,
 * driven by one poll loop in the test's thread: each connection sends a
 * request, reads its whole answer (Content-Length framing, as seckilld
 * answers) and sends the next one on the same connection, the way load
 * balancers and browsers reuse theirs. Unlike curl's connection cache,
 * the test decides what every connection sends and sees when the server
 * closes one with a request still in flight.
 *
 * A connection honours "Connection: close": after such an answer it sends
 * nothing more and waits for the server to close it. Not thread-safe.
 */
#ifndef SECKILL_IT_KEEPALIVE_H
#define SECKILL_IT_KEEPALIVE_H

#include <stddef.h>
#include <stdint.h>

struct it_ka_ops {
    /* The next request of connection i, whole, into buf (cap bytes).
     * Returns its length, or 0 when it has nothing to send now (asked
     * again at the next step). */
    size_t (*next)(void *ctx, size_t i, char *buf, size_t cap);
    /* The answer to connection i's request: its status and its text,
     * headers and body, NUL-terminated (valid during the call). status is
     * -1 for an answer that is not HTTP (the connection is then closed). */
    void (*answer)(void *ctx, size_t i, long status, const char *text,
                   size_t len);
    /* Connection i was closed, or failed, with a request in flight: its
     * answer is lost. May be NULL. */
    void (*lost)(void *ctx, size_t i);
};

struct it_ka;

/* Open n connections to 127.0.0.1:port (asserts each connects); nothing is
 * sent before the first it_ka_step(). ops and ctx must outlive the crowd. */
struct it_ka *it_ka_open(uint16_t port, size_t n, const struct it_ka_ops *ops,
                         void *ctx);

/* One round: ask idle connections for their next request, send, wait up to
 * timeout_ms for something to happen, read and report what came. Returns
 * how many connections are still open. */
size_t it_ka_step(struct it_ka *k, int timeout_ms);

/* How many connections have a request in flight. */
size_t it_ka_busy(const struct it_ka *k);

/* Close every connection and free k. NULL ok. */
void it_ka_close(struct it_ka *k);

#endif
