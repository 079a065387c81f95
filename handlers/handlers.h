/*
 * handlers.h - the HTTP service: libmicrohttpd with its internal thread
 * pool, one struct store per worker thread, and the JSON API.
 */
#ifndef SECKILL_HANDLERS_H
#define SECKILL_HANDLERS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/token.h"
#include "store/store.h"

/* A token bucket: per_s tokens a second, at most burst saved up. */
struct handlers_rate {
    double per_s;   /* 0: no limit */
    uint32_t burst; /* >= 1 when per_s > 0 */
};

struct handlers_config {
    const char *bind;        /* IPv4 or IPv6 literal */
    uint16_t port;           /* 0: pick a free one (see handlers_server_port) */
    unsigned threads;        /* HTTP threads, >= 1 */
    unsigned engine_threads; /* purchase engine threads, >= 1 */
    unsigned queue_max;      /* purchases waiting per voucher */
    unsigned idle_free_s;    /* per-voucher state unused this long is freed */
    uint32_t lock_ttl_ms;
    const char *lock_url; /* lock/lock.h URL: the purchase lock's backend */
    bool dev;             /* echo login codes in responses */
    /* Abuse limits (README, Configuration): */
    struct handlers_rate rate_user; /* per user token; admins are exempt */
    struct handlers_rate rate_ip;   /* per client address (IPv6: per /64) */
    unsigned conn_timeout_s;        /* idle timeout and request deadline */
    unsigned max_conn;              /* open connections in all, >= threads */
    unsigned max_conn_per_ip;       /* 0: no limit */
    /* Voucher cache: how long a sold-out flag or an unknown id is trusted
     * without a message (handlers/vcache.c); 0: no cache. */
    unsigned soldout_ttl_ms;
    /* Browsers on these origins may call the API (handlers/cors.c): exact
     * origins such as "https://shop.example.com", comma-separated,
     * validated by the configuration; NULL: CORS off. */
    const char *cors_origins;
    /* Seconds between SIGTERM and the stop, /readyz answering 503 (see
     * handlers_server_drain()); cmd/main.c waits them out. */
    unsigned drain_s;
    /* How new seckill vouchers sell unless their request says (PURCHASE_SYNC
     * or PURCHASE_ASYNC: async/async.h); async sales' bounds and promise. */
    enum purchase_mode purchase_mode;
    unsigned async_backlog_max; /* orders waiting for MySQL, per voucher */
    bool async_accept_loss;     /* sell async on a Redis that may lose them */
    /* Redis replicas that must confirm an async batch before its 202s
     * (-1: as many as the primary has, at most 1; 0: none), and how long
     * they may take. */
    int async_replicas;
    unsigned async_wait_ms;
    /* How often async sales' Redis state is compared with MySQL. */
    unsigned async_reconcile_ms;
    unsigned async_lookback_s; /* sales looked after this long past their
                                * end (async_config.lookback_s) */
    unsigned char secret[TOKEN_KEY_LEN];
    /* The payment provider's key for POST /api/payments/notify (HMAC-
     * SHA256 of the body); without it the route does not exist. */
    bool has_pay_secret;
    unsigned char pay_secret[32];
    struct store_config store;
};

struct handlers_server;

/*
 * Open the lock client for cfg->lock_url, then start listening and serving
 * on cfg->threads threads. cfg must outlive the server. Returns 0 and sets
 * *out, or -errno (-EINVAL for a bad lock URL, -EADDRINUSE, -EPERM for
 * async mode on a Redis that may lose acknowledged writes, ...) with a log
 * line.
 */
int handlers_server_start(const struct handlers_config *cfg,
                          struct handlers_server **out);

/* The port actually bound. */
uint16_t handlers_server_port(const struct handlers_server *srv);

/*
 * Start draining, the first step of a graceful stop: from now on GET
 * /readyz answers 503 UNAVAILABLE with details {"instance":"draining"}, so
 * a load balancer that checks it takes the instance out of rotation, and
 * every reply carries "Connection: close", so clients (and the balancer's
 * pooled connections) reconnect elsewhere. Everything else is served as
 * before until handlers_server_stop(). Thread-safe; idempotent.
 */
void handlers_server_drain(struct handlers_server *srv);

/*
 * Stop: close the listener; make the engines refuse new work (503, nothing
 * written), finish the batches that run and answer every parked request;
 * stop the daemon (its threads close their connections) and only then
 * free what requests use, so that a request still arriving on an open
 * keep-alive connection meanwhile is answered, never served from freed
 * memory. Frees srv. Accepts NULL.
 */
void handlers_server_stop(struct handlers_server *srv);

#endif
