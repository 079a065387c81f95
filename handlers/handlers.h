/*
 * handlers.h - the HTTP service: libmicrohttpd with its internal thread
 * pool and the JSON API, in front of the sale layer (sale/sale.h). The
 * handlers speak HTTP only: they parse, authorize, call one function of
 * the sale layer and reply; nothing below the sale layer is theirs.
 * cmd/server.c assembles the service and decides the order of its stop.
 */
#ifndef SECKILL_HANDLERS_H
#define SECKILL_HANDLERS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/cidr.h"
#include "common/token.h"

struct sale;

/* A token bucket: per_s tokens a second, at most burst saved up. */
struct handlers_rate {
    double per_s;   /* 0: no limit */
    uint32_t burst; /* >= 1 when per_s > 0 */
};

/* The request heads an operator may ask to be served, in bytes of request
 * line and header lines (http_config.head_max). */
#define HTTP_HEAD_LIMIT_MIN 2048
#define HTTP_HEAD_LIMIT_MAX 32768
#define HTTP_HEAD_LIMIT_DEFAULT 4096

/* What the HTTP service is told (README, Configuration). */
struct http_config {
    const char *bind;         /* IPv4 or IPv6 literal */
    uint16_t port;            /* 0: pick a free one (handlers_server_port) */
    unsigned threads;         /* HTTP threads, >= 1 */
    unsigned conn_timeout_s;  /* idle timeout and request deadline */
    unsigned max_conn;        /* open connections in all, >= threads */
    unsigned max_conn_per_ip; /* 0: no limit */
    /* The request line and header lines, in bytes, that a request may
     * send and be served (HTTP_HEAD_LIMIT_MIN..HTTP_HEAD_LIMIT_MAX): the
     * other limits of a head and each connection's buffer, its memory
     * while idle, follow from it. */
    unsigned head_max;
    bool dev; /* echo login codes; POST /api/orders/{id}/pay */
    /* Abuse limits: */
    struct handlers_rate rate_user; /* per user token; admins are exempt */
    struct handlers_rate rate_ip;   /* per client address (IPv6: per /64) */
    /* Browsers on these origins may call the API (handlers/cors.c): exact
     * origins such as "https://shop.example.com", comma-separated; NULL:
     * CORS off. */
    const char *cors_origins;
    /* The region of phone numbers written without + or 00 ("CN"). */
    const char *phone_region;
    const char *currency; /* of prices, ISO 4217 ("CNY"): GET /api/config */
    unsigned admin_token_ttl_s; /* an admin login's token lives this long */
    /* Proof of work before a login code (handlers/pow.c): the largest
     * number of a challenge (0: none asked), how long one is good, and
     * its key (derived from the secret: never a token's). */
    unsigned pow_maxnumber;
    unsigned pow_ttl_s;
    unsigned char pow_key[32];
    /* Connections from these proxies name their client in
     * X-Forwarded-For (handlers/request.h, req_client_addr()); empty: the
     * peer is the client. */
    struct cidr_list trusted_proxies;
    /* The connection peers GET /metrics answers (handlers/metrics.c). */
    struct cidr_list metrics_allow;
    unsigned char secret[TOKEN_KEY_LEN]; /* signs and checks the tokens */
    /* The payment provider's key for POST /api/payments/notify (HMAC-
     * SHA256 of the body); without it the route does not exist. */
    bool has_pay_secret;
    unsigned char pay_secret[32];
};

struct handlers_server;

/*
 * Start listening and serving on cfg->threads threads, every request going
 * to sale. cfg and sale must outlive the server. Returns 0 and sets *out,
 * or -errno (-EINVAL for a bad bind address or a head_max out of its
 * range, -EADDRINUSE, ...) with a log line.
 */
int handlers_server_start(const struct http_config *cfg, struct sale *sale,
                          struct handlers_server **out);

/* The port actually bound. */
uint16_t handlers_server_port(const struct handlers_server *srv);

/*
 * Start draining, the first step of a graceful stop: from now on GET
 * /readyz answers 503 UNAVAILABLE with details {"instance":"draining"}, so
 * a load balancer that checks it takes the instance out of rotation, and
 * every reply carries "Connection: close", so clients (and the balancer's
 * pooled connections) reconnect elsewhere. Everything else is served as
 * before. Thread-safe; idempotent.
 */
void handlers_server_drain(struct handlers_server *srv);

/*
 * Accept no new connection: the listener closes at once (a client is
 * refused, and a load balancer retries elsewhere, rather than left in the
 * backlog), and from now on every reply closes its connection. The
 * connections already open are still served.
 */
void handlers_server_quiesce(struct handlers_server *srv);

/* Requests parked now (waiting for the sale layer's answer). */
unsigned handlers_server_parked(const struct handlers_server *srv);

/*
 * Stop the daemon: it closes every connection and joins its threads; a
 * request still parked is abandoned (call it once the sale layer has
 * answered them all). Frees srv. Accepts NULL.
 */
void handlers_server_stop(struct handlers_server *srv);

#endif
