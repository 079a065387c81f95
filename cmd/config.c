/*
 * config.c - settings from SECKILL_* variables and --flags, validated up
 * front so that a bad setting is one clear line at start-up.
 */
#include "cmd/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/redis.h"
#include "common/url.h"
#include "common/util.h"

const char config_usage[] =
    "usage: seckilld [serve] [options]\n"
    "       seckilld token --user ID [--admin] [--ttl SECONDS]\n"
    "       seckilld tokens --first N --count M [--ttl SECONDS]\n"
    "\n"
    "Every option is also an environment variable; the flag wins.\n"
    "  --port N            SECKILL_PORT         listen port (8080)\n"
    "  --bind ADDR         SECKILL_BIND         listen address (127.0.0.1)\n"
    "  --mysql-url URL     SECKILL_MYSQL_URL    "
    "mysql://user:pass@host:port/db (required)\n"
    "  --redis-url URL     SECKILL_REDIS_URL    "
    "redis://[:pass@]host:port/db or\n"
    "                                           "
    "redis-sentinel://h1:p1,h2:p2/master/db\n"
    "                                           "
    "(required)\n"
    "  --secret HEX        SECKILL_SECRET       "
    "64 hex chars, the token signing key (required)\n"
    "  --threads N         SECKILL_THREADS      "
    "HTTP threads (one per core, at least 2)\n"
    "  --engine-threads N  SECKILL_ENGINE_THREADS\n"
    "                                           "
    "purchase engine threads (2 per core)\n"
    "  --queue-max N       SECKILL_QUEUE_MAX    "
    "purchases waiting per voucher; more get\n"
    "                                           "
    "429 BUSY at once (20000)\n"
    "  --idle-free-s N     SECKILL_IDLE_FREE_S  "
    "free a voucher's queue and state after\n"
    "                                           "
    "N s unused, 1..86400 (60)\n"
    "  --lock-ttl-ms N     SECKILL_LOCK_TTL_MS  "
    "per-user purchase lock lease (10000)\n"
    "  --lock-url URL      SECKILL_LOCK_URL     "
    "lock backend: redis://, redis-sentinel://,\n"
    "                                           "
    "redlock://, mysql://, zookeeper:// (the\n"
    "                                           "
    "Redis URL)\n"
    "  --dev[=0|1]         SECKILL_DEV          "
    "1: echo login codes in responses (0)\n"
    "  --rate-user R,B     SECKILL_RATE_USER    "
    "per-user token bucket: R a second,\n"
    "                                           "
    "burst B; 0 off (20,40)\n"
    "  --rate-ip R,B       SECKILL_RATE_IP      "
    "the same per client address (0)\n"
    "  --conn-timeout-s N  SECKILL_CONN_TIMEOUT_S\n"
    "                                           "
    "idle timeout, request deadline (30)\n"
    "  --max-conn N        SECKILL_MAX_CONN     "
    "open connections in all (60000)\n"
    "  --max-conn-per-ip N SECKILL_MAX_CONN_PER_IP\n"
    "                                           "
    "per client address; 0 off (0)\n"
    "  --soldout-ttl-ms N  SECKILL_SOLDOUT_TTL_MS\n"
    "                                           "
    "trust a cached sold-out flag this long;\n"
    "                                           "
    "0: no voucher cache (1000)\n"
    "  --batch-max N       SECKILL_BATCH_MAX    "
    "purchases of a voucher merged into one\n"
    "                                           "
    "transaction, 1..256; 1 off (64)\n"
    "  --batch-linger-us N SECKILL_BATCH_LINGER_US\n"
    "                                           "
    "a batch waits this long for more (0)\n"
    "  --stock-segments N  SECKILL_STOCK_SEGMENTS\n"
    "                                           "
    "new vouchers' stock in N rows, 1..64 (1)\n"
    "  --cors-origins LIST SECKILL_CORS_ORIGINS\n"
    "                                           "
    "web pages on these origins may call the\n"
    "                                           "
    "API: https://a.example,http://b:3000;\n"
    "                                           "
    "empty: off ()\n"
    "  --pay-timeout-s N   SECKILL_PAY_TIMEOUT_S\n"
    "                                           "
    "an unpaid order expires after N s (900)\n"
    "  --pay-secret HEX    SECKILL_PAY_SECRET   "
    "64 hex chars, the payment provider's\n"
    "                                           "
    "notify key; none: no notify route\n"
    "  --purchase-mode M   SECKILL_PURCHASE_MODE\n"
    "                                           "
    "sync or async: how new flash sales sell\n"
    "                                           "
    "unless created with purchaseMode (sync)\n"
    "  --async-backlog-max N\n"
    "                      SECKILL_ASYNC_BACKLOG_MAX\n"
    "                                           "
    "an async sale's orders waiting for MySQL\n"
    "                                           "
    "beyond which purchases get 429 (100000)\n"
    "  --async-accept-loss 0|1\n"
    "                      SECKILL_ASYNC_ACCEPT_LOSS\n"
    "                                           "
    "sell async on a Redis that may lose\n"
    "                                           "
    "acknowledged writes (0)\n"
    "  --async-replicas N|auto\n"
    "                      SECKILL_ASYNC_REPLICAS\n"
    "                                           "
    "Redis replicas that must have an async\n"
    "                                           "
    "batch before its 202s; 0: none (auto:\n"
    "                                           "
    "those the primary has, at most 1)\n"
    "  --async-wait-ms N   SECKILL_ASYNC_WAIT_MS\n"
    "                                           "
    "how long they may take (200)\n"
    "  --async-reconcile-ms N\n"
    "                      SECKILL_ASYNC_RECONCILE_MS\n"
    "                                           "
    "compare async sales' Redis state with\n"
    "                                           "
    "MySQL every N ms (2000)\n"
    "  --async-lookback-s N\n"
    "                      SECKILL_ASYNC_LOOKBACK_S\n"
    "                                           "
    "an async sale is reconciled with MySQL\n"
    "                                           "
    "until N s after its end (3600)\n"
    "  --drain-s N         SECKILL_DRAIN_S      "
    "after SIGTERM, /readyz answers 503 and\n"
    "                                           "
    "serving goes on N s before the stop (5)\n"
    "  --mysql-replica-url URL\n"
    "                      SECKILL_MYSQL_REPLICA_URL\n"
    "                                           "
    "a read replica for voucher reads (none)\n"
    "  --mysql-replica-max-lag-s N\n"
    "                      SECKILL_MYSQL_REPLICA_MAX_LAG_S\n"
    "                                           "
    "skip the replica when further behind (5)\n"
    "  --help                                   this text\n"
    "\n"
    "token prints one bearer token; tokens prints CSV user_id,token for\n"
    "load tests (ttl defaults to 86400 s). Both need only the secret.\n";

enum setting_id {
    SET_PORT,
    SET_BIND,
    SET_MYSQL_URL,
    SET_REDIS_URL,
    SET_SECRET,
    SET_THREADS,
    SET_ENGINE_THREADS,
    SET_QUEUE_MAX,
    SET_IDLE_FREE,
    SET_LOCK_TTL,
    SET_LOCK_URL,
    SET_DEV,
    SET_RATE_USER,
    SET_RATE_IP,
    SET_CONN_TIMEOUT,
    SET_MAX_CONN,
    SET_MAX_CONN_PER_IP,
    SET_SOLDOUT_TTL,
    SET_BATCH_MAX,
    SET_BATCH_LINGER,
    SET_STOCK_SEGMENTS,
    SET_CORS_ORIGINS,
    SET_PAY_TIMEOUT,
    SET_PAY_SECRET,
    SET_PURCHASE_MODE,
    SET_ASYNC_BACKLOG,
    SET_ASYNC_ACCEPT_LOSS,
    SET_ASYNC_REPLICAS,
    SET_ASYNC_WAIT,
    SET_ASYNC_RECONCILE,
    SET_ASYNC_LOOKBACK,
    SET_DRAIN,
    SET_MYSQL_REPLICA_URL,
    SET_REPLICA_MAX_LAG,
    SET_COUNT
};

static const struct {
    const char *flag;
    const char *env;
    const char *def; /* NULL: required for serving */
} settings[SET_COUNT] = {
    [SET_PORT] = {"port", "SECKILL_PORT", "8080"},
    [SET_BIND] = {"bind", "SECKILL_BIND", "127.0.0.1"},
    [SET_MYSQL_URL] = {"mysql-url", "SECKILL_MYSQL_URL", NULL},
    [SET_REDIS_URL] = {"redis-url", "SECKILL_REDIS_URL", NULL},
    [SET_SECRET] = {"secret", "SECKILL_SECRET", NULL},
    [SET_THREADS] = {"threads", "SECKILL_THREADS", ""},
    [SET_ENGINE_THREADS] = {"engine-threads", "SECKILL_ENGINE_THREADS", ""},
    [SET_QUEUE_MAX] = {"queue-max", "SECKILL_QUEUE_MAX", "20000"},
    [SET_IDLE_FREE] = {"idle-free-s", "SECKILL_IDLE_FREE_S", "60"},
    [SET_LOCK_TTL] = {"lock-ttl-ms", "SECKILL_LOCK_TTL_MS", "10000"},
    [SET_LOCK_URL] = {"lock-url", "SECKILL_LOCK_URL", ""},
    [SET_DEV] = {"dev", "SECKILL_DEV", "0"},
    [SET_RATE_USER] = {"rate-user", "SECKILL_RATE_USER", "20,40"},
    [SET_RATE_IP] = {"rate-ip", "SECKILL_RATE_IP", "0"},
    [SET_CONN_TIMEOUT] = {"conn-timeout-s", "SECKILL_CONN_TIMEOUT_S", "30"},
    [SET_MAX_CONN] = {"max-conn", "SECKILL_MAX_CONN", "60000"},
    [SET_MAX_CONN_PER_IP] = {"max-conn-per-ip", "SECKILL_MAX_CONN_PER_IP", "0"},
    [SET_SOLDOUT_TTL] = {"soldout-ttl-ms", "SECKILL_SOLDOUT_TTL_MS", "1000"},
    [SET_BATCH_MAX] = {"batch-max", "SECKILL_BATCH_MAX", "64"},
    [SET_BATCH_LINGER] = {"batch-linger-us", "SECKILL_BATCH_LINGER_US", "0"},
    [SET_STOCK_SEGMENTS] = {"stock-segments", "SECKILL_STOCK_SEGMENTS", "1"},
    [SET_CORS_ORIGINS] = {"cors-origins", "SECKILL_CORS_ORIGINS", ""},
    [SET_PAY_TIMEOUT] = {"pay-timeout-s", "SECKILL_PAY_TIMEOUT_S", "900"},
    [SET_PAY_SECRET] = {"pay-secret", "SECKILL_PAY_SECRET", ""},
    [SET_PURCHASE_MODE] = {"purchase-mode", "SECKILL_PURCHASE_MODE", "sync"},
    [SET_ASYNC_BACKLOG] = {"async-backlog-max", "SECKILL_ASYNC_BACKLOG_MAX",
                           "100000"},
    [SET_ASYNC_ACCEPT_LOSS] = {"async-accept-loss", "SECKILL_ASYNC_ACCEPT_LOSS",
                               "0"},
    [SET_ASYNC_REPLICAS] = {"async-replicas", "SECKILL_ASYNC_REPLICAS", "auto"},
    [SET_ASYNC_WAIT] = {"async-wait-ms", "SECKILL_ASYNC_WAIT_MS", "200"},
    [SET_ASYNC_RECONCILE] = {"async-reconcile-ms", "SECKILL_ASYNC_RECONCILE_MS",
                             "2000"},
    [SET_ASYNC_LOOKBACK] = {"async-lookback-s", "SECKILL_ASYNC_LOOKBACK_S",
                            "3600"},
    [SET_DRAIN] = {"drain-s", "SECKILL_DRAIN_S", "5"},
    [SET_MYSQL_REPLICA_URL] = {"mysql-replica-url", "SECKILL_MYSQL_REPLICA_URL",
                               ""},
    [SET_REPLICA_MAX_LAG] = {"mysql-replica-max-lag-s",
                             "SECKILL_MYSQL_REPLICA_MAX_LAG_S", "5"},
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* A 0/1 setting ("true"/"false" too; empty: 0). */
static int parse_flag(const char *v, const char *env, bool *out, char *err,
                      size_t errlen)
{
    if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
        *out = true;
    else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || !v[0])
        *out = false;
    else
        return fail(err, errlen, "%s: must be 0 or 1 (got \"%s\")", env, v);
    return 0;
}

void config_free(struct config *cfg)
{
    /* The URL parts live in cfg itself; a Redis URL that names sentinels
     * made their shared object. */
    struct redis_server rs = {.sentinel = cfg->http.store.redis_sentinel};

    redis_server_release(&rs);
    cfg->http.store.redis_sentinel = NULL;
}

/* Whole-string integer in [min, max]. */
static int parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

/*
 * A token bucket "RATE,BURST" (RATE a second, decimals allowed, from 0.001
 * to 1000000; BURST 1..1000000), or "0" for no limit.
 */
static int parse_rate(const char *s, struct handlers_rate *r)
{
    char *end;
    int64_t burst;

    if (strcmp(s, "0") == 0) {
        r->per_s = 0;
        r->burst = 0;
        return 0;
    }
    if (s[0] < '0' || s[0] > '9')
        return -EINVAL; /* strtod would take spaces, "inf" and "nan" */
    errno = 0;
    double per_s = strtod(s, &end);
    if (errno || *end != ',' || !(per_s >= 0.001 && per_s <= 1e6) ||
        parse_int(end + 1, 1, 1000000, &burst))
        return -EINVAL;
    r->per_s = per_s;
    r->burst = (uint32_t)burst;
    return 0;
}

/* A mysql:// URL of setting env, parsed into u, into sc's mysql_*. */
static int mysql_url(const char *env, struct url *u, const char *url,
                     struct store_config *sc, char *err, size_t errlen)
{
    char why[160];

    if (url_parse(url, u, why, sizeof(why)))
        return fail(err, errlen, "%s: %s", env, why);
    if (strcmp(u->scheme, "mysql") != 0 || u->nhosts != 1 || !u->user[0] ||
        !u->path[0] || strchr(u->path, '/') || u->nquery)
        return fail(err, errlen, "%s: expected mysql://user:pass@host:port/db",
                    env);
    sc->mysql_host = u->hosts[0].host;
    sc->mysql_port = u->hosts[0].port ? u->hosts[0].port : 3306;
    sc->mysql_user = u->user;
    sc->mysql_pass = u->pass;
    sc->mysql_db = u->path;
    return 0;
}

int config_mysql_url(struct config *cfg, const char *url,
                     struct store_config *sc, char *err, size_t errlen)
{
    return mysql_url("SECKILL_MYSQL_URL", &cfg->mysql_url, url, sc, err,
                     errlen);
}

int config_redis_url(struct config *cfg, const char *url,
                     struct store_config *sc, char *err, size_t errlen)
{
    struct url *u = &cfg->redis_url;
    struct redis_server rs;
    char why[160];

    if (url_parse(url, u, why, sizeof(why)))
        return fail(err, errlen, "SECKILL_REDIS_URL: %s", why);
    if (strcmp(u->scheme, REDIS_SENTINEL_SCHEME) == 0) {
        if (u->nquery || redis_server_from_url(u, 0, &rs, why, sizeof(why)))
            return fail(err, errlen,
                        "SECKILL_REDIS_URL: expected "
                        "redis-sentinel://[[user]:pass@]h1[:p1],h2[:p2],.../"
                        "<master>[/db] with db 0..%d",
                        REDIS_DB_MAX);
    } else if (strcmp(u->scheme, "redis") != 0 || u->nhosts != 1 || u->nquery ||
               redis_server_from_url(u, 0, &rs, why, sizeof(why))) {
        return fail(err, errlen,
                    "SECKILL_REDIS_URL: expected "
                    "redis://[[user]:pass@]host[:port][/db] with db 0..%d",
                    REDIS_DB_MAX);
    }
    sc->redis_host = rs.host;
    sc->redis_port = rs.port;
    sc->redis_user = rs.user;
    sc->redis_pass = rs.pass;
    sc->redis_db = rs.db;
    sc->redis_sentinel = rs.sentinel;
    return 0;
}

/*
 * One origin as a browser writes it in its Origin header: scheme "http" or
 * "https", "://", a host in lower case (name, IPv4 or [IPv6]), and a port
 * only when it is not the scheme's default; no path, no trailing slash. n
 * bytes of s. Returns NULL when it is one, else what is wrong.
 */
static const char *origin_problem(const char *s, size_t n)
{
    size_t skip, host;
    const char *p, *end = s + n;
    int64_t port;

    if (n == 1 && s[0] == '*')
        return "\"*\" would let every site call the API; list the origins";
    if (n == 4 && memcmp(s, "null", 4) == 0)
        return "\"null\" is the origin of sandboxed and local pages, "
               "which any site can make";
    if (n > 7 && memcmp(s, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && memcmp(s, "https://", 8) == 0)
        skip = 8;
    else
        return "an origin starts with http:// or https://";
    p = s + skip;
    if (*p == '[') {
        host = 1 + strspn(p + 1, "0123456789abcdef:.");
        if (p + host >= end || p[host] != ']' || host < 3)
            return "a bracketed IPv6 host is hex digits and colons";
        host++;
    } else {
        host = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789-.");
        if (host == 0 || (p + host < end && p[host] != ':'))
            return "the host is lower-case letters, digits, '-' and '.', "
                   "without a path or a trailing slash";
    }
    p += host;
    if (p == end)
        return NULL;
    if (*p != ':')
        return "an origin has no path and no trailing slash";
    char buf[8];
    size_t pn = (size_t)(end - p - 1);
    if (pn == 0 || pn >= sizeof(buf) || strspn(p + 1, "0123456789") < pn)
        return "the port is a number 1..65535";
    memcpy(buf, p + 1, pn);
    buf[pn] = '\0';
    if (parse_int(buf, 1, 65535, &port))
        return "the port is a number 1..65535";
    if ((skip == 7 && port == 80) || (skip == 8 && port == 443))
        return "browsers leave the scheme's default port out: drop it";
    return NULL;
}

/* A comma-separated list of origins (spaces around them are allowed);
 * empty or only spaces: none. */
static int parse_origins(const char *v, const char *env, char *err,
                         size_t errlen)
{
    const char *p = v;

    if (!v[strspn(v, " ")])
        return 0;
    for (;;) {
        p += strspn(p, " ");
        size_t n = strcspn(p, ","), m = n;
        while (m && p[m - 1] == ' ')
            m--;
        if (m == 0)
            return fail(err, errlen, "%s: an empty origin in \"%s\"", env, v);
        const char *why = origin_problem(p, m);
        if (why)
            return fail(err, errlen, "%s: \"%.*s\": %s", env, (int)m, p, why);
        p += n;
        if (!*p)
            return 0;
        p++; /* the comma */
    }
}

static int apply(struct config *cfg, enum setting_id id, const char *v,
                 char *err, size_t errlen)
{
    struct handlers_config *h = &cfg->http;
    const char *env = settings[id].env;
    int64_t n;

    switch (id) {
    case SET_PORT:
        if (parse_int(v, 0, 65535, &n))
            return fail(err, errlen, "%s: must be a port 0..65535 (got \"%s\")",
                        env, v);
        h->port = (uint16_t)n;
        return 0;
    case SET_BIND: {
        unsigned char buf[16];
        if (inet_pton(AF_INET, v, buf) != 1 && inet_pton(AF_INET6, v, buf) != 1)
            return fail(err, errlen,
                        "%s: must be an IPv4 or IPv6 address (got \"%s\")", env,
                        v);
        h->bind = v;
        return 0;
    }
    case SET_MYSQL_URL:
        return config_mysql_url(cfg, v, &h->store, err, errlen);
    case SET_REDIS_URL:
        return config_redis_url(cfg, v, &h->store, err, errlen);
    case SET_SECRET:
        if (util_hex_decode(v, h->secret, TOKEN_KEY_LEN))
            return fail(err, errlen, "%s: must be 64 hex characters", env);
        return 0;
    case SET_THREADS:
    case SET_ENGINE_THREADS: {
        unsigned *dst = id == SET_THREADS ? &h->threads : &h->engine_threads;
        long cores = sysconf(_SC_NPROCESSORS_ONLN);

        if (cores < 1)
            cores = 1;
        /* HTTP threads only parse, route and reply (purchases wait in the
         * engine, not on them): one per core, two at least so that one
         * request's own short round trip never stalls all the others.
         * Engine threads each run one batch of one voucher at a time. */
        if (!v[0]) {
            *dst = (unsigned)(id == SET_THREADS ? (cores < 2 ? 2 : cores)
                                                : 2 * cores);
            return 0;
        }
        if (parse_int(v, 1, 1024, &n))
            return fail(err, errlen, "%s: must be 1..1024 (got \"%s\")", env,
                        v);
        *dst = (unsigned)n;
        return 0;
    }
    case SET_QUEUE_MAX:
        if (parse_int(v, 1, 1000000, &n))
            return fail(err, errlen, "%s: must be 1..1000000 (got \"%s\")", env,
                        v);
        h->queue_max = (unsigned)n;
        return 0;
    case SET_IDLE_FREE:
        if (parse_int(v, 1, 86400, &n))
            return fail(err, errlen,
                        "%s: must be 1..86400 seconds (got \"%s\")", env, v);
        h->idle_free_s = (unsigned)n;
        return 0;
    case SET_LOCK_TTL:
        if (parse_int(v, 100, 3600000, &n))
            return fail(err, errlen,
                        "%s: must be 100..3600000 milliseconds (got \"%s\")",
                        env, v);
        h->lock_ttl_ms = (uint32_t)n;
        return 0;
    case SET_LOCK_URL:
        /* Empty: the Redis URL, applied after every setting. The URL
         * itself is checked when the lock client opens at start-up. */
        h->lock_url = v[0] ? v : NULL;
        return 0;
    case SET_DEV:
        return parse_flag(v, env, &h->dev, err, errlen);
    case SET_ASYNC_ACCEPT_LOSS:
        return parse_flag(v, env, &h->async_accept_loss, err, errlen);
    case SET_PURCHASE_MODE:
        if (strcmp(v, "sync") == 0)
            h->purchase_mode = PURCHASE_SYNC;
        else if (strcmp(v, "async") == 0)
            h->purchase_mode = PURCHASE_ASYNC;
        else
            return fail(err, errlen, "%s: must be sync or async (got \"%s\")",
                        env, v);
        return 0;
    case SET_ASYNC_REPLICAS:
        if (strcmp(v, "auto") == 0) {
            h->async_replicas = -1;
            return 0;
        }
        if (parse_int(v, 0, 16, &n))
            return fail(err, errlen, "%s: must be auto or 0..16 (got \"%s\")",
                        env, v);
        h->async_replicas = (int)n;
        return 0;
    case SET_ASYNC_WAIT:
        /* Below the Redis I/O timeout (5 s): the WAIT's answer must
         * come before the connection gives up on it. */
        if (parse_int(v, 1, 4000, &n))
            return fail(err, errlen,
                        "%s: must be 1..4000 milliseconds (got \"%s\")", env,
                        v);
        h->async_wait_ms = (unsigned)n;
        return 0;
    case SET_ASYNC_BACKLOG:
        if (parse_int(v, 1, 10000000, &n))
            return fail(err, errlen, "%s: must be 1..10000000 (got \"%s\")",
                        env, v);
        h->async_backlog_max = (unsigned)n;
        return 0;
    case SET_ASYNC_RECONCILE:
        if (parse_int(v, 100, 60000, &n))
            return fail(err, errlen,
                        "%s: must be 100..60000 milliseconds (got \"%s\")", env,
                        v);
        h->async_reconcile_ms = (unsigned)n;
        return 0;
    case SET_ASYNC_LOOKBACK:
        if (parse_int(v, 0, 31536000, &n))
            return fail(err, errlen,
                        "%s: must be 0..31536000 seconds (got \"%s\")", env, v);
        h->async_lookback_s = (unsigned)n;
        return 0;
    case SET_RATE_USER:
    case SET_RATE_IP:
        if (parse_rate(v, id == SET_RATE_USER ? &h->rate_user : &h->rate_ip))
            return fail(err, errlen,
                        "%s: must be 0 (off) or RATE,BURST such as 20,40 "
                        "(got \"%s\")",
                        env, v);
        return 0;
    case SET_CONN_TIMEOUT:
        if (parse_int(v, 1, 3600, &n))
            return fail(err, errlen, "%s: must be 1..3600 seconds (got \"%s\")",
                        env, v);
        h->conn_timeout_s = (unsigned)n;
        return 0;
    case SET_MAX_CONN:
        /* Split between the threads, so at least one each. */
        if (parse_int(v, 1, 1000000, &n) || n < h->threads)
            return fail(err, errlen,
                        "%s: must be %u..1000000, at least one per thread "
                        "(got \"%s\")",
                        env, h->threads, v);
        h->max_conn = (unsigned)n;
        return 0;
    case SET_MAX_CONN_PER_IP:
        if (parse_int(v, 0, 1000000, &n))
            return fail(err, errlen, "%s: must be 0..1000000 (got \"%s\")", env,
                        v);
        h->max_conn_per_ip = (unsigned)n;
        return 0;
    case SET_SOLDOUT_TTL:
        if (parse_int(v, 0, 60000, &n))
            return fail(err, errlen,
                        "%s: must be 0..60000 milliseconds (got \"%s\")", env,
                        v);
        h->soldout_ttl_ms = (unsigned)n;
        return 0;
    case SET_BATCH_MAX:
        if (parse_int(v, 1, STORE_BATCH_MAX, &n))
            return fail(err, errlen, "%s: must be 1..%d (got \"%s\")", env,
                        STORE_BATCH_MAX, v);
        h->store.batch_max = (unsigned)n;
        return 0;
    case SET_BATCH_LINGER:
        if (parse_int(v, 0, STORE_BATCH_LINGER_MAX_US, &n))
            return fail(err, errlen,
                        "%s: must be 0..%d microseconds (got \"%s\")", env,
                        STORE_BATCH_LINGER_MAX_US, v);
        h->store.batch_linger_us = (unsigned)n;
        return 0;
    case SET_STOCK_SEGMENTS:
        if (parse_int(v, 1, STORE_SEGMENTS_MAX, &n))
            return fail(err, errlen, "%s: must be 1..%d (got \"%s\")", env,
                        STORE_SEGMENTS_MAX, v);
        h->store.stock_segments = (unsigned)n;
        return 0;
    case SET_CORS_ORIGINS:
        if (parse_origins(v, env, err, errlen))
            return -EINVAL;
        h->cors_origins = v[strspn(v, " ")] ? v : NULL;
        return 0;
    case SET_PAY_TIMEOUT:
        if (parse_int(v, 1, STORE_PAY_TIMEOUT_MAX_S, &n))
            return fail(err, errlen, "%s: must be 1..%d seconds (got \"%s\")",
                        env, STORE_PAY_TIMEOUT_MAX_S, v);
        h->store.pay_timeout_s = (unsigned)n;
        return 0;
    case SET_PAY_SECRET:
        h->has_pay_secret = v[0] != '\0';
        if (h->has_pay_secret &&
            util_hex_decode(v, h->pay_secret, sizeof(h->pay_secret)))
            return fail(err, errlen, "%s: must be 64 hex characters", env);
        return 0;
    case SET_DRAIN:
        if (parse_int(v, 0, 3600, &n))
            return fail(err, errlen, "%s: must be 0..3600 seconds (got \"%s\")",
                        env, v);
        h->drain_s = (unsigned)n;
        return 0;
    case SET_MYSQL_REPLICA_URL:
        /* Applied after every setting: the replica's config copies the
         * primary's timeouts. */
        if (v[0] && mysql_url(env, &cfg->mysql_replica_url, v,
                              &cfg->replica_store, err, errlen))
            return -EINVAL;
        return 0;
    case SET_REPLICA_MAX_LAG:
        if (parse_int(v, 0, 86400, &n))
            return fail(err, errlen,
                        "%s: must be 0..86400 seconds (got \"%s\")", env, v);
        h->store.replica_max_lag_s = (unsigned)n;
        return 0;
    case SET_COUNT:
        break;
    }
    return -EINVAL;
}

/* Subcommand flags, with their values. */
static int sub_flag(struct config *cfg, const char *name, const char *v,
                    char *err, size_t errlen)
{
    if (strcmp(name, "user") == 0 && cfg->cmd == CMD_TOKEN) {
        if (!v || parse_int(v, 1, INT64_MAX, &cfg->token_user))
            return fail(err, errlen, "--user: must be a positive integer");
    } else if (strcmp(name, "ttl") == 0 && cfg->cmd != CMD_SERVE) {
        if (!v || parse_int(v, 1, 10 * 365 * 86400LL, &cfg->token_ttl_s))
            return fail(err, errlen, "--ttl: must be 1..315360000 seconds");
    } else if (strcmp(name, "first") == 0 && cfg->cmd == CMD_TOKENS) {
        if (!v || parse_int(v, 1, INT64_MAX / 2, &cfg->tokens_first))
            return fail(err, errlen, "--first: must be a positive integer");
    } else if (strcmp(name, "count") == 0 && cfg->cmd == CMD_TOKENS) {
        if (!v || parse_int(v, 1, 10000000, &cfg->tokens_count))
            return fail(err, errlen, "--count: must be 1..10000000");
    } else {
        return fail(err, errlen, "unknown option --%s (see --help)", name);
    }
    return 0;
}

int config_parse(struct config *cfg, int argc, char **argv, char *err,
                 size_t errlen)
{
    const char *val[SET_COUNT];
    int i = 1, ret;

    memset(cfg, 0, sizeof(*cfg));
    cfg->cmd = CMD_SERVE;
    cfg->token_ttl_s = 86400;
    cfg->http.store.connect_timeout_ms = 1000;
    cfg->http.store.io_timeout_ms = 5000;
    for (int s = 0; s < SET_COUNT; s++) {
        const char *e = getenv(settings[s].env);
        val[s] = e ? e : settings[s].def;
    }

    if (argc > 1 && argv[1][0] != '-') {
        if (strcmp(argv[1], "serve") == 0)
            cfg->cmd = CMD_SERVE;
        else if (strcmp(argv[1], "token") == 0)
            cfg->cmd = CMD_TOKEN;
        else if (strcmp(argv[1], "tokens") == 0)
            cfg->cmd = CMD_TOKENS;
        else if (strcmp(argv[1], "help") == 0)
            cfg->cmd = CMD_HELP;
        else
            return fail(err, errlen, "unknown command \"%s\" (see --help)",
                        argv[1]);
        i = 2;
    }

    for (; i < argc; i++) {
        const char *a = argv[i], *eq, *v = NULL;
        char name[32];
        int s;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cfg->cmd = CMD_HELP;
            return 0;
        }
        if (strncmp(a, "--", 2) != 0)
            return fail(err, errlen, "unexpected argument \"%s\"", a);
        a += 2;
        eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        if (n >= sizeof(name))
            return fail(err, errlen, "unknown option --%s", a);
        memcpy(name, a, n);
        name[n] = '\0';
        if (eq)
            v = eq + 1;

        /* Boolean flags take no separate value. */
        if (strcmp(name, "dev") == 0 || strcmp(name, "admin") == 0) {
            if (strcmp(name, "admin") == 0) {
                if (cfg->cmd != CMD_TOKEN)
                    return fail(err, errlen, "--admin: only with token");
                cfg->token_admin = 1;
            } else {
                val[SET_DEV] = v ? v : "1";
            }
            continue;
        }
        if (!v) {
            if (i + 1 >= argc)
                return fail(err, errlen, "--%s: needs a value", name);
            v = argv[++i];
        }
        for (s = 0; s < SET_COUNT; s++)
            if (strcmp(name, settings[s].flag) == 0)
                break;
        if (s < SET_COUNT) {
            val[s] = v;
            continue;
        }
        if ((ret = sub_flag(cfg, name, v, err, errlen)))
            return ret;
    }
    if (cfg->cmd == CMD_HELP)
        return 0;

    if (cfg->cmd == CMD_TOKEN && !cfg->token_user)
        return fail(err, errlen, "token: --user ID is required");
    if (cfg->cmd == CMD_TOKENS && (!cfg->tokens_first || !cfg->tokens_count))
        return fail(err, errlen,
                    "tokens: --first N and --count M are required");

    for (int s = 0; s < SET_COUNT; s++) {
        bool needed = cfg->cmd == CMD_SERVE || s == SET_SECRET;
        if (!val[s] || (!val[s][0] && !settings[s].def)) {
            if (!needed)
                continue;
            return fail(err, errlen, "%s (--%s) is required", settings[s].env,
                        settings[s].flag);
        }
        if (!needed)
            continue;
        if ((ret = apply(cfg, (enum setting_id)s, val[s], err, errlen)))
            return ret;
    }
    if (cfg->cmd == CMD_SERVE && !cfg->http.lock_url)
        cfg->http.lock_url = val[SET_REDIS_URL];
    if (cfg->cmd == CMD_SERVE && cfg->replica_store.mysql_host) {
        struct store_config *r = &cfg->replica_store;

        r->connect_timeout_ms = cfg->http.store.connect_timeout_ms;
        r->io_timeout_ms = cfg->http.store.io_timeout_ms;
        r->read_only = true;
        cfg->http.store.replica = r;
    }
    return 0;
}
