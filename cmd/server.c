/*
 * server.c - the service assembled (see server.h): each part started
 * before what uses it, and taken apart in the one order that keeps a
 * request's memory alive for as long as a request can reach it.
 */
#include "cmd/server.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async/async.h"
#include "common/cidr.h"
#include <sodium.h>

#include "common/outbound.h"
#include "common/phone.h"
#include "common/util.h"
#include "engine/engine.h"
#include "engine/pool.h"
#include "lock/lock.h"
#include "sale/expiry.h"
#include "sale/sale.h"
#include "sale/sessions.h"
#include "sale/vcache.h"

/* Keys derived from SECKILL_SECRET (crypto_kdf ids). */
#define KDF_ID_POW 1
#define KDF_ID_TICKET 2

struct server {
    const struct handlers_config *cfg;
    struct lock_client *locks;
    struct vcache_config vcache_cfg;
    struct vcache *vcache;
    struct sessions_config sessions_cfg;
    struct sessions *sessions;
    struct store_replica_monitor *replica; /* NULL: no read replica */
    struct async_config async_cfg;
    struct async *async; /* the writer of async sales' orders */
    struct engine_config engine_cfg;
    struct engine *engine;
    struct pool *pool;
    struct outbound *outbound; /* calls to the outside (the SMS webhook) */
    struct sale_config sale_cfg;
    struct sale *sale;
    struct expiry *expiry;
    struct http_config http_cfg;
    struct handlers_server *http;
};

/* An async sale was rebuilt, or got units back late (on the writer's
 * thread, with its store): every instance's voucher cache hears of it. */
static void async_stock_changed(void *ctx, struct store *st, int64_t voucher_id)
{
    struct server *srv = ctx;

    vcache_voucher_changed(srv->vcache, st, voucher_id);
}

/* Async mode promises that a 202 is written: on a Redis that may lose an
 * acknowledged write, refuse to start unless the operator accepts it. */
static int async_durability_check(const struct handlers_config *cfg)
{
    struct store *st;
    struct redis_link *rl;
    char why[192];
    int err;

    if (cfg->purchase_mode != PURCHASE_ASYNC || cfg->async_accept_loss)
        return 0;
    st = store_new(&cfg->store);
    rl = store_redis_link(st);
    err = rl ? async_redis_durable(rl, why, sizeof(why)) : 0;
    store_free(st);
    if (err == -EPERM) {
        log_error("async purchase mode refused: redis may lose acknowledged "
                  "writes; set appendonly yes and appendfsync always, or "
                  "SECKILL_ASYNC_ACCEPT_LOSS=1",
                  "redis=\"%s\"", why);
        return -EPERM;
    }
    return 0; /* durable, or unknown now: the writer looks again */
}

/* The HTTP service's part of the settings. */
static void http_config_of(const struct handlers_config *cfg,
                           struct http_config *h)
{
    *h = (struct http_config){
        .bind = cfg->bind,
        .port = cfg->port,
        .threads = cfg->threads,
        .conn_timeout_s = cfg->conn_timeout_s,
        .max_conn = cfg->max_conn,
        .max_conn_per_ip = cfg->max_conn_per_ip,
        .head_max = cfg->head_max,
        .dev = cfg->dev,
        .rate_user = cfg->rate_user,
        .rate_ip = cfg->rate_ip,
        .cors_origins = cfg->cors_origins,
        .phone_region = cfg->phone_region ? cfg->phone_region : "CN",
        .currency = cfg->currency ? cfg->currency : "CNY",
        .admin_token_ttl_s = cfg->admin_token_ttl_s,
        .pow_maxnumber = cfg->pow_maxnumber,
        .pow_ttl_s = cfg->pow_ttl_s,
        .has_pay_secret = cfg->has_pay_secret,
    };
    memcpy(h->secret, cfg->secret, sizeof(h->secret));
    /* Its own key: a proof of work can never pass for a token, nor the
     * reverse. */
    crypto_kdf_derive_from_key(h->pow_key, sizeof(h->pow_key), KDF_ID_POW,
                               "seckilld", cfg->secret);
    memcpy(h->pay_secret, cfg->pay_secret, sizeof(h->pay_secret));
    /* Both checked when the settings were read: cannot fail here. */
    if (cfg->trusted_proxies) {
        char why[96];

        cidr_list_parse(cfg->trusted_proxies, &h->trusted_proxies, why,
                        sizeof(why));
    }
    if (cfg->metrics_allow) {
        char why[96];

        cidr_list_parse(cfg->metrics_allow, &h->metrics_allow, why,
                        sizeof(why));
    }
}

/* Free what server_start() made, in the reverse order (NULLs skipped). */
static void parts_free(struct server *srv)
{
    expiry_stop(srv->expiry);
    pool_free(srv->pool);
    outbound_free(srv->outbound);
    engine_free(srv->engine);
    /* The writer after the engine: nothing sells any more; what it holds
     * is claimed by another instance, or by this one after a restart. */
    async_stop(srv->async);
    sale_free(srv->sale);
    store_replica_monitor_stop(srv->replica);
    sessions_free(srv->sessions);
    vcache_free(srv->vcache);
    lock_client_close(srv->locks);
    free(srv);
}

/*
 * The assembly, each part before what uses it: the lock client, the
 * voucher cache, the sessions' view, the replica monitor, the async writer, the
 * purchase engine, the task pool and the outbound sender, the sale layer (which
 * calls them all), the expiry (which calls the sale layer), and last the HTTP
 * service, since requests reach everything above as soon as it listens.
 */
int server_start(const struct handlers_config *cfg, struct server **out)
{
    struct server *srv = xcalloc(1, sizeof(*srv));
    int err;

    srv->cfg = cfg;
    err = lock_client_open(cfg->lock_url,
                           &(struct lock_options){.prefix = cfg->redis_prefix},
                           &srv->locks);
    if (err) {
        log_error("lock backend refused", "err=%d", err);
        goto fail;
    }
    err = async_durability_check(cfg);
    if (err)
        goto fail;
    srv->vcache_cfg = (struct vcache_config){
        .ttl_ms = cfg->soldout_ttl_ms,
        .store = &cfg->store,
    };
    srv->vcache = vcache_new(&srv->vcache_cfg);
    srv->sessions_cfg = (struct sessions_config){
        .store = &cfg->store,
        .resync_s = cfg->auth_resync_s,
    };
    srv->sessions = sessions_new(&srv->sessions_cfg);
    srv->replica = store_replica_monitor_start(&cfg->store);
    srv->async_cfg = (struct async_config){
        .store = &cfg->store,
        .locks = srv->locks,
        .batch = 256,
        .claim_ms = ASYNC_CLAIM_MS,
        .reconcile_ms = cfg->async_reconcile_ms,
        .lookback_s = cfg->async_lookback_s,
        .stock_changed = async_stock_changed,
        .ctx = srv,
        .accept_loss = cfg->async_accept_loss,
        .replicas = cfg->async_replicas,
        .wait_ms = cfg->async_wait_ms,
    };
    /* On one Redis or a cluster alike (a cluster's sales are spread over
     * its primaries by their {v:ID} slots). */
    srv->async = async_start(&srv->async_cfg);
    srv->engine_cfg = (struct engine_config){
        .store = &cfg->store,
        .workers = cfg->engine_threads,
        .batch_max =
            cfg->store.batch_max ? cfg->store.batch_max : STORE_BATCH_DEFAULT,
        .batch_linger_us = cfg->store.batch_linger_us,
        .queue_max = cfg->queue_max,
        .idle_free_ms = cfg->idle_free_s * 1000u,
    };
    srv->engine = engine_start(&srv->engine_cfg);
    /* As many threads as the engine's: whatever waits for a stalled
     * backend holds them, never an HTTP thread, never a purchase batch. */
    srv->pool = pool_start(cfg->engine_threads);
    /* Its own thread: nothing that serves requests waits for the
     * outside. */
    srv->outbound = outbound_start();
    srv->sale_cfg = (struct sale_config){
        .store = &cfg->store,
        .mode = cfg->purchase_mode,
        .lock_ttl_ms = cfg->lock_ttl_ms,
        .async_backlog_max = cfg->async_backlog_max,
        .engine = srv->engine,
        .pool = srv->pool,
        .async = srv->async,
        .locks = srv->locks,
        .vcache = srv->vcache,
        .sessions = srv->sessions,
        .codes =
            {
                .ttl_s = SALE_CODE_TTL_S,
                .interval_s = cfg->code_interval_s,
                .per_hour = cfg->code_per_hour,
                .phone_per_hour = cfg->code_per_hour * SALE_CODE_PHONE_FACTOR,
                .addr_tries = cfg->login_addr_tries,
                .phone_tries = cfg->login_phone_tries,
                .wait_max_s = SALE_LOGIN_WAIT_MAX_S,
                .request_tries = SALE_CODE_REQUEST_TRIES,
            },
        .sms =
            {
                .webhook = cfg->sms_webhook && cfg->sms_webhook[0]
                               ? cfg->sms_webhook
                               : NULL,
            },
        .waitroom =
            {
                .open_s = cfg->waitroom_open_s,
                .admit_rate = cfg->waitroom_admit_rate,
                .ticket_ttl_s = cfg->waitroom_ticket_ttl_s,
                .poll_s = cfg->waitroom_poll_s,
            },
    };
    if (srv->sale_cfg.sms.webhook)
        srv->sale_cfg.sms.queue = outbound_queue_new(
            srv->outbound, "sms", cfg->sms_queue_max,
            cfg->sms_queue_max < 64 ? cfg->sms_queue_max : 64);
    memcpy(srv->sale_cfg.sms.secret, cfg->sms_secret,
           sizeof(srv->sale_cfg.sms.secret));
    /* The calling codes codes may go to: the setting's, or the phone
     * region's (the configuration validated both). */
    {
        const char *list =
            cfg->sms_regions && cfg->sms_regions[0]
                ? cfg->sms_regions
                : phone_region_cc(cfg->phone_region ? cfg->phone_region : "CN");

        for (const char *p = list;
             p && *p && srv->sale_cfg.sms.nregions < PHONE_CALLING_CODES_MAX;) {
            size_t len = strspn(p, "0123456789");

            snprintf(srv->sale_cfg.sms.regions[srv->sale_cfg.sms.nregions++],
                     sizeof(srv->sale_cfg.sms.regions[0]), "%.*s", (int)len, p);
            p += len + (p[len] == ',');
        }
        srv->sale_cfg.sms.per_min = cfg->sms_per_min;
        /* Numbers written without + are of the phone region: say so when
         * codes may not go there. */
        {
            const char *home =
                phone_region_cc(cfg->phone_region ? cfg->phone_region : "CN");
            bool listed = false;

            for (unsigned i = 0; i < srv->sale_cfg.sms.nregions; i++)
                listed =
                    listed ||
                    (home && strcmp(home, srv->sale_cfg.sms.regions[i]) == 0);
            if (!listed)
                log_warn("login codes may not go to the phone region's "
                         "numbers: add its calling code to "
                         "SECKILL_SMS_REGIONS if they should",
                         "phone_region=%s cc=%s sms_regions=%s",
                         cfg->phone_region ? cfg->phone_region : "CN",
                         home ? home : "?", list ? list : "");
        }
    }
    /* Tickets have a key of their own: never a token's, nor the reverse. */
    crypto_kdf_derive_from_key(srv->sale_cfg.waitroom.ticket_key,
                               sizeof(srv->sale_cfg.waitroom.ticket_key),
                               KDF_ID_TICKET, "seckilld", cfg->secret);
    srv->sale = sale_new(&srv->sale_cfg);
    srv->expiry = expiry_start(srv->sale, &cfg->store);
    http_config_of(cfg, &srv->http_cfg);
    err = handlers_server_start(&srv->http_cfg, srv->sale, &srv->http);
    if (err)
        goto fail;
    *out = srv;
    return 0;

fail:
    parts_free(srv);
    return err;
}

uint16_t server_port(const struct server *srv)
{
    return handlers_server_port(srv->http);
}

void server_drain(struct server *srv)
{
    if (srv)
        handlers_server_drain(srv->http);
}

void server_stop(struct server *srv)
{
    if (!srv)
        return;
    /* 1. No new connections: new clients are refused at once, which a
     * load balancer retries elsewhere, rather than left in the backlog
     * until the stop resets them. The connections already open are still
     * served until step 3; from now on every reply closes its
     * connection. */
    handlers_server_quiesce(srv->http);
    /* 2. Refuse new work (503 at once, nothing written), let what runs
     * finish, and answer what still waits (503, nothing written): every
     * parked request is resumed with its reply. The pool first: a request
     * it runs may still hand a purchase or a task to the engine. Both stay
     * allocated until step 4, since a request that arrives meanwhile
     * still calls them. The expiry too: it is work of its own. */
    pool_stop(srv->pool);
    /* After the pool (whose requests post to it): what it still holds is
     * answered 503 now. */
    outbound_stop(srv->outbound);
    engine_stop(srv->engine);
    expiry_stop(srv->expiry);
    srv->expiry = NULL;
    /* 3. Give those replies a moment to go out, then stop the daemon: it
     * closes every connection and joins its threads. Nothing is suspended
     * any more: a request parks now only for as long as its own
     * callback. */
    for (int i = 0; i < 300 && handlers_server_parked(srv->http) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    handlers_server_stop(srv->http);
    /* 4. No request runs any more: free what they used. */
    parts_free(srv);
}
