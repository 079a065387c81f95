/*
 * server.h - the service assembled (server.c): its settings, and starting,
 * draining and stopping it. The one place that knows what starts in which
 * order and in which order it stops.
 */
#ifndef SECKILL_SERVER_H
#define SECKILL_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/token.h"
#include "handlers/handlers.h"
#include "store/store.h"

/*
 * The service's settings, as cmd/config.c reads them (README,
 * Configuration): server_start() hands each part its own (the HTTP
 * service's, the sale layer's, the engine's, the async writer's, the
 * voucher cache's, the stores').
 */
struct handlers_config {
    const char *bind;        /* IPv4 or IPv6 literal */
    uint16_t port;           /* 0: pick a free one (see server_port) */
    unsigned threads;        /* HTTP threads, >= 1 */
    unsigned engine_threads; /* purchase engine threads, >= 1 */
    unsigned queue_max;      /* purchases waiting per voucher */
    unsigned idle_free_s;    /* per-voucher state unused this long is freed */
    uint32_t lock_ttl_ms;
    const char *lock_url; /* lock/lock.h URL: the purchase lock's backend */
    /* In front of every Redis key and channel, the locks' too
     * (common/redis_keys.h); NULL: none. */
    const char *redis_prefix;
    bool dev; /* echo login codes in responses */
    /* Abuse limits (README, Configuration): */
    struct handlers_rate rate_user; /* per user token; admins are exempt */
    struct handlers_rate rate_ip;   /* per client address (IPv6: per /64) */
    unsigned conn_timeout_s;        /* idle timeout and request deadline */
    unsigned max_conn;              /* open connections in all, >= threads */
    unsigned max_conn_per_ip;       /* 0: no limit */
    unsigned head_max;              /* http_config.head_max */
    /* Voucher cache: how long a sold-out flag or an unknown id is trusted
     * without a message (sale/vcache.h); 0: no cache. */
    unsigned soldout_ttl_ms;
    /* Browsers on these origins may call the API (handlers/cors.c): exact
     * origins such as "https://shop.example.com", comma-separated,
     * validated by the configuration; NULL: CORS off. */
    const char *cors_origins;
    /* Proxies whose X-Forwarded-For names the client (common/cidr.h
     * blocks, comma-separated, validated by the configuration); NULL or
     * "": none, the peer is the client. */
    const char *trusted_proxies;
    /* The region of phone numbers written without + or 00
     * (common/phone.h; validated by the configuration). */
    const char *phone_region;
    /* Where login codes are POSTed (sale_config.sms; "" or NULL: nowhere,
     * dev mode only) and the key of their signature. */
    const char *sms_webhook;
    unsigned sms_queue_max; /* codes being sent at once, at most */
    /* The country calling codes codes may be sent to, comma-separated
     * (validated; "" or NULL: phone_region's), and the codes a minute
     * each may have. */
    const char *sms_regions;
    unsigned sms_per_min;
    bool has_sms_secret;
    unsigned char sms_secret[32];
    /* The currency of prices, ISO 4217 ("CNY"), for the pages. */
    const char *currency;
    unsigned admin_token_ttl_s; /* http_config.admin_token_ttl_s */
    unsigned pow_maxnumber;     /* http_config.pow_maxnumber */
    /* The waiting rooms (sale_config.waitroom). */
    unsigned waitroom_open_s, waitroom_admit_rate, waitroom_ticket_ttl_s,
        waitroom_poll_s;
    unsigned pow_ttl_s; /* http_config.pow_ttl_s */
    /* Login codes (sale_config.codes; the TTL and the longest wait are
     * the sale layer's). */
    unsigned code_interval_s, code_per_hour, login_addr_tries,
        login_phone_tries;
    /* Peers that may read GET /metrics (common/cidr.h blocks, validated by
     * the configuration); "": nobody (admins read /api/admin/metrics). */
    const char *metrics_allow;
    /* Seconds between SIGTERM and the stop, /readyz answering 503 (see
     * server_drain()); cmd/main.c waits them out. */
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
    unsigned auth_resync_s;    /* the sessions' view is reloaded this often */
    unsigned async_lookback_s; /* sales looked after this long past their
                                * end (async_config.lookback_s) */
    unsigned char secret[TOKEN_KEY_LEN];
    /* The payment provider's key for POST /api/payments/notify (HMAC-
     * SHA256 of the body); without it the route does not exist. */
    bool has_pay_secret;
    unsigned char pay_secret[32];
    struct store_config store;
};

struct server;

/*
 * Start the service of cfg: the lock client for cfg->lock_url, the voucher
 * cache, the read replica's monitor, the async writer, the purchase engine
 * and the task pool, the sale layer and the expiry of unpaid orders, and
 * last the HTTP service, listening. cfg must outlive the server. Returns 0
 * and sets *out, or -errno (-EINVAL for a bad lock URL or bind address,
 * -EADDRINUSE, -EPERM for async mode on a Redis that may lose acknowledged
 * writes, ...) with a log line; nothing is left running then.
 */
int server_start(const struct handlers_config *cfg, struct server **out);

/* The port the HTTP service listens on. */
uint16_t server_port(const struct server *srv);

/* Start draining: handlers_server_drain(). Thread-safe; idempotent. */
void server_drain(struct server *srv);

/*
 * Stop, in the order that keeps every request's memory alive for as long
 * as a request can reach it: refuse new work (no new connection; the
 * task pool and the purchase engine answer what still waits with 503,
 * nothing written), so that every parked request is resumed with its
 * answer; stop the daemon; then free what the requests used. Frees srv.
 * Accepts NULL.
 */
void server_stop(struct server *srv);

#endif
