/*
 * config.c - settings from SECKILL_* variables and --flags, validated up
 * front so that a bad setting is one clear line at start-up. Every setting
 * is one row of config_settings[] below: its names, default, parser and
 * range, and the texts that config_doc.c writes into --help,
 * docs/configuration.md and the man page.
 */
#include "cmd/config.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/config_table.h"
#include "common/cidr.h"
#include "common/phone.h"
#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/url.h"
#include "common/util.h"

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

void config_free(struct config *cfg)
{
    /* The URL parts live in cfg itself; a Redis URL that names sentinels
     * made their shared object. */
    struct redis_server rs = {.sentinel = cfg->http.store.redis_sentinel};

    redis_server_release(&rs);
    cfg->http.store.redis_sentinel = NULL;
    free(cfg->shards);
    cfg->shards = NULL;
    cfg->nshards = 0;
    free(cfg->shard_stores);
    cfg->shard_stores = NULL;
    cfg->http.store.shards = NULL;
    cfg->http.store.nshards = 0;
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

/* Where setting s's value goes in cfg. */
static void *setting_at(struct config *cfg, const struct config_setting *s)
{
    return (char *)cfg + s->off;
}

/* Store v into s's field, a bool or an integer of 2, 4 or 8 bytes (the
 * parser has checked that v fits). */
static void setting_store(struct config *cfg, const struct config_setting *s,
                          int64_t v)
{
    void *p = setting_at(cfg, s);

    switch (s->size) {
    case sizeof(bool):
        *(bool *)p = v != 0;
        break;
    case sizeof(uint16_t):
        *(uint16_t *)p = (uint16_t)v;
        break;
    case sizeof(uint32_t):
        *(uint32_t *)p = (uint32_t)v;
        break;
    case sizeof(int64_t):
        *(int64_t *)p = v;
        break;
    default:
        assert(!"a number setting's field is 1, 2, 4 or 8 bytes");
    }
}

/* s's range in words, for a message: "1..86400 seconds". */
static void range_words(const struct config_setting *s, char *buf, size_t n)
{
    if (s->max >= INT64_MAX / 2)
        snprintf(buf, n, "%s",
                 s->min == 1 ? "a positive integer" : "a whole number");
    else
        snprintf(buf, n, "%lld..%lld%s%s", (long long)s->min, (long long)s->max,
                 s->unit ? " " : "", s->unit ? s->unit : "");
}

/* A whole number in s's range. */
static int set_int(struct config *cfg, const struct config_setting *s,
                   const char *name, const char *v, char *err, size_t errlen)
{
    char range[64];
    int64_t n;

    if (parse_int(v, s->min, s->max, &n)) {
        range_words(s, range, sizeof(range));
        return fail(err, errlen, "%s: must be %s (got \"%s\")", name, range, v);
    }
    setting_store(cfg, s, n);
    return 0;
}

/* A 0/1 setting ("true"/"false" too; empty: 0). */
static int set_bool(struct config *cfg, const struct config_setting *s,
                    const char *name, const char *v, char *err, size_t errlen)
{
    if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
        setting_store(cfg, s, 1);
    else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || !v[0])
        setting_store(cfg, s, 0);
    else
        return fail(err, errlen, "%s: must be 0 or 1 (got \"%s\")", name, v);
    return 0;
}

/* Text kept as given (it points into the environment, argv or the table);
 * empty: NULL. */
static int set_text(struct config *cfg, const struct config_setting *s,
                    const char *name, const char *v, char *err, size_t errlen)
{
    (void)name;
    (void)err;
    (void)errlen;
    assert(s->size == sizeof(const char *));
    *(const char **)setting_at(cfg, s) = v[0] ? v : NULL;
    return 0;
}

/* The Redis prefix: common/redis_keys.h's rule; empty: NULL. */
static int set_redis_prefix(struct config *cfg, const struct config_setting *s,
                            const char *name, const char *v, char *err,
                            size_t errlen)
{
    char why[96];

    if (redis_prefix_check(v, why, sizeof(why)))
        return fail(err, errlen, "%s: %s", name, why);
    return set_text(cfg, s, name, v, err, errlen);
}

/* An admin's name: 1 to 64 of letters, digits, '.', '_' and '-'. */
static int set_username(struct config *cfg, const struct config_setting *s,
                        const char *name, const char *v, char *err,
                        size_t errlen)
{
    size_t n = strlen(v);

    if (n < 1 || n > 64 ||
        strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                  "0123456789._-") != n)
        return fail(err, errlen,
                    "%s: letters, digits, '.', '_' and '-', 1 to 64 of them",
                    name);
    return set_text(cfg, s, name, v, err, errlen);
}

static long cores_online(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    return cores < 1 ? 1 : cores;
}

/* HTTP threads only parse, route and reply (purchases wait in the engine,
 * not on them): by default one per core, two at least so that one
 * request's own short round trip never stalls all the others. */
static int set_http_threads(struct config *cfg, const struct config_setting *s,
                            const char *name, const char *v, char *err,
                            size_t errlen)
{
    long cores = cores_online();

    if (!v[0]) {
        setting_store(cfg, s, cores < 2 ? 2 : cores);
        return 0;
    }
    return set_int(cfg, s, name, v, err, errlen);
}

/* Engine threads each run one batch of one voucher at a time: by default
 * two per core. */
static int set_engine_threads(struct config *cfg,
                              const struct config_setting *s, const char *name,
                              const char *v, char *err, size_t errlen)
{
    if (!v[0]) {
        setting_store(cfg, s, 2 * cores_online());
        return 0;
    }
    return set_int(cfg, s, name, v, err, errlen);
}

/* Connections are split between the HTTP threads, so at least one each:
 * the table puts the threads first. */
static int set_max_conn(struct config *cfg, const struct config_setting *s,
                        const char *name, const char *v, char *err,
                        size_t errlen)
{
    int64_t n;

    if (parse_int(v, s->min, s->max, &n) || n < cfg->http.threads)
        return fail(err, errlen,
                    "%s: must be %u..%lld, at least one per thread "
                    "(got \"%s\")",
                    name, cfg->http.threads, (long long)s->max, v);
    setting_store(cfg, s, n);
    return 0;
}

static int set_bind(struct config *cfg, const struct config_setting *s,
                    const char *name, const char *v, char *err, size_t errlen)
{
    unsigned char buf[16];

    if (inet_pton(AF_INET, v, buf) != 1 && inet_pton(AF_INET6, v, buf) != 1)
        return fail(err, errlen,
                    "%s: must be an IPv4 or IPv6 address (got \"%s\")", name,
                    v);
    return set_text(cfg, s, name, v, err, errlen);
}

/* 64 hex characters, into the 32-byte key at s's field. */
static int set_key(struct config *cfg, const struct config_setting *s,
                   const char *name, const char *v, char *err, size_t errlen)
{
    if (util_hex_decode(v, setting_at(cfg, s), s->size))
        return fail(err, errlen, "%s: must be %zu hex characters", name,
                    2 * s->size);
    return 0;
}

/* The payment provider's key is optional: empty, no notify route. */
static int set_pay_secret(struct config *cfg, const struct config_setting *s,
                          const char *name, const char *v, char *err,
                          size_t errlen)
{
    cfg->http.has_pay_secret = v[0] != '\0';
    return v[0] ? set_key(cfg, s, name, v, err, errlen) : 0;
}

static int set_purchase_mode(struct config *cfg, const struct config_setting *s,
                             const char *name, const char *v, char *err,
                             size_t errlen)
{
    (void)s;
    if (strcmp(v, "sync") == 0)
        cfg->http.purchase_mode = PURCHASE_SYNC;
    else if (strcmp(v, "async") == 0)
        cfg->http.purchase_mode = PURCHASE_ASYNC;
    else
        return fail(err, errlen, "%s: must be sync or async (got \"%s\")", name,
                    v);
    return 0;
}

/* "auto" (-1: as many as the primary has, at most 1) or a count. */
static int set_async_replicas(struct config *cfg,
                              const struct config_setting *s, const char *name,
                              const char *v, char *err, size_t errlen)
{
    int64_t n;

    if (strcmp(v, "auto") == 0) {
        setting_store(cfg, s, -1);
        return 0;
    }
    if (parse_int(v, s->min, s->max, &n))
        return fail(err, errlen, "%s: must be auto or %lld..%lld (got \"%s\")",
                    name, (long long)s->min, (long long)s->max, v);
    setting_store(cfg, s, n);
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

static int set_rate(struct config *cfg, const struct config_setting *s,
                    const char *name, const char *v, char *err, size_t errlen)
{
    assert(s->size == sizeof(struct handlers_rate));
    if (parse_rate(v, setting_at(cfg, s)))
        return fail(err, errlen,
                    "%s: must be 0 (off) or RATE,BURST such as 20,40 "
                    "(got \"%s\")",
                    name, v);
    return 0;
}

/* A mysql:// URL of setting name, parsed into u, into sc's mysql_*. */
static int mysql_url(const char *name, struct url *u, const char *url,
                     struct store_config *sc, char *err, size_t errlen)
{
    char why[160];

    if (url_parse(url, u, why, sizeof(why)))
        return fail(err, errlen, "%s: %s", name, why);
    if (strcmp(u->scheme, "mysql") != 0 || u->nhosts != 1 || !u->user[0] ||
        !u->path[0] || strchr(u->path, '/') || u->nquery)
        return fail(err, errlen, "%s: expected mysql://user:pass@host:port/db",
                    name);
    sc->mysql_host = u->hosts[0].host;
    sc->mysql_port = u->hosts[0].port ? u->hosts[0].port : 3306;
    sc->mysql_user = u->user;
    sc->mysql_pass = u->pass;
    sc->mysql_db = u->path;
    return 0;
}

/* A redis://, redis-sentinel:// or redis-cluster:// URL of setting name,
 * parsed into cfg's redis_url (and a cluster's seeds into redis_seeds),
 * into sc's redis_*. */
static int redis_url(const char *name, struct config *cfg, const char *url,
                     struct store_config *sc, char *err, size_t errlen)
{
    struct url *u = &cfg->redis_url;
    struct redis_server rs;
    char why[160];

    if (url_parse(url, u, why, sizeof(why)))
        return fail(err, errlen, "%s: %s", name, why);
    sc->redis_cluster_seeds = NULL;
    sc->redis_cluster_nseeds = 0;
    if (strcmp(u->scheme, REDIS_CLUSTER_SCHEME) == 0) {
        /* Each host a seed node (a database number refused). */
        if (u->nquery)
            return fail(err, errlen,
                        "%s: expected "
                        "redis-cluster://[[user]:pass@]h1[:p1],h2[:p2],...",
                        name);
        for (int i = 0; i < u->nhosts; i++)
            if (redis_server_from_url(u, i, &cfg->redis_seeds[i], why,
                                      sizeof(why)))
                return fail(err, errlen, "%s: %s", name, why);
        rs = cfg->redis_seeds[0];
        sc->redis_host = rs.host;
        sc->redis_port = rs.port;
        sc->redis_user = rs.user;
        sc->redis_pass = rs.pass;
        sc->redis_db = 0;
        sc->redis_sentinel = NULL;
        sc->redis_cluster_seeds = cfg->redis_seeds;
        sc->redis_cluster_nseeds = u->nhosts;
        return 0;
    }
    if (strcmp(u->scheme, REDIS_SENTINEL_SCHEME) == 0) {
        if (u->nquery || redis_server_from_url(u, 0, &rs, why, sizeof(why)))
            return fail(err, errlen,
                        "%s: expected "
                        "redis-sentinel://[[user]:pass@]h1[:p1],h2[:p2],.../"
                        "<master>[/db] with db 0..%d",
                        name, REDIS_DB_MAX);
    } else if (strcmp(u->scheme, "redis") != 0 || u->nhosts != 1 || u->nquery ||
               redis_server_from_url(u, 0, &rs, why, sizeof(why))) {
        return fail(err, errlen,
                    "%s: expected "
                    "redis://[[user]:pass@]host[:port][/db] with db 0..%d",
                    name, REDIS_DB_MAX);
    }
    sc->redis_host = rs.host;
    sc->redis_port = rs.port;
    sc->redis_user = rs.user;
    sc->redis_pass = rs.pass;
    sc->redis_db = rs.db;
    sc->redis_sentinel = rs.sentinel;
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
    return redis_url("SECKILL_REDIS_URL", cfg, url, sc, err, errlen);
}

/* Empty: the primaries are SECKILL_MYSQL_SHARDS's (set_mysql_shards()
 * says when neither is set). */
static int set_mysql_url(struct config *cfg, const struct config_setting *s,
                         const char *name, const char *v, char *err,
                         size_t errlen)
{
    (void)s;
    if (!v[0])
        return 0;
    return mysql_url(name, &cfg->mysql_url, v, &cfg->http.store, err, errlen);
}

/* One entry of a comma-separated list: n bytes at p, spaces around it
 * dropped. */
struct list_item {
    const char *p;
    size_t n;
};

/*
 * Split v at its commas into items (at most max of them; spaces around an
 * item dropped, an item may be empty). Returns how many, or -E2BIG when v
 * has more than max.
 */
static int list_split(const char *v, struct list_item *items, int max)
{
    int n = 0;

    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        const char *q = p;

        if (n == max)
            return -E2BIG;
        while (len && *q == ' ')
            q++, len--;
        while (len && q[len - 1] == ' ')
            len--;
        items[n].p = q;
        items[n].n = len;
        n++;
        p += strcspn(p, ",");
        if (!*p)
            return n;
    }
}

/* Item i of setting name, a mysql:// URL, into u and sc's mysql_*. */
static int mysql_url_item(const char *name, int i, const struct list_item *it,
                          struct url *u, struct store_config *sc, char *err,
                          size_t errlen)
{
    char label[64], *one = xstrndup(it->p, it->n);
    int ret;

    snprintf(label, sizeof(label), "%s, shard %d", name, i);
    ret = mysql_url(label, u, one, sc, err, errlen);
    free(one);
    return ret;
}

/*
 * SECKILL_MYSQL_SHARDS: the primaries the sales are sharded over, as
 * mysql:// URLs separated by commas (a comma of a password is written
 * %2C), shard 0 first; shard 0 is also http.store's primary. Empty: the
 * one primary is SECKILL_MYSQL_URL's, which this setting, parsed right
 * after it, then requires.
 */
static int set_mysql_shards(struct config *cfg, const struct config_setting *s,
                            const char *name, const char *v, char *err,
                            size_t errlen)
{
    struct list_item items[CONFIG_SHARDS_MAX];
    int n;

    (void)s;
    if (!v[strspn(v, " ")]) {
        if (!cfg->http.store.mysql_host)
            return fail(err, errlen,
                        "SECKILL_MYSQL_URL (--mysql-url) is required, or "
                        "SECKILL_MYSQL_SHARDS");
        return 0;
    }
    if ((n = list_split(v, items, CONFIG_SHARDS_MAX)) < 0)
        return fail(err, errlen, "%s: at most %d shards", name,
                    CONFIG_SHARDS_MAX);
    cfg->shards = xcalloc((size_t)n, sizeof(*cfg->shards));
    cfg->nshards = (unsigned)n;
    for (int i = 0; i < n; i++) {
        struct config_shard *sh = &cfg->shards[i];

        if (!items[i].n)
            return fail(err, errlen, "%s: shard %d has no URL", name, i);
        if (mysql_url_item(name, i, &items[i], &sh->url, &sh->store, err,
                           errlen))
            return -EINVAL;
        for (int j = 0; j < i; j++) {
            const struct store_config *a = &cfg->shards[j].store;

            if (strcmp(a->mysql_host, sh->store.mysql_host) == 0 &&
                a->mysql_port == sh->store.mysql_port &&
                strcmp(a->mysql_db, sh->store.mysql_db) == 0)
                return fail(err, errlen,
                            "%s: shards %d and %d are the same database "
                            "(%s:%u/%s)",
                            name, j, i, a->mysql_host, a->mysql_port,
                            a->mysql_db);
        }
    }
    cfg->http.store.mysql_host = cfg->shards[0].store.mysql_host;
    cfg->http.store.mysql_port = cfg->shards[0].store.mysql_port;
    cfg->http.store.mysql_user = cfg->shards[0].store.mysql_user;
    cfg->http.store.mysql_pass = cfg->shards[0].store.mysql_pass;
    cfg->http.store.mysql_db = cfg->shards[0].store.mysql_db;
    return 0;
}

static int set_redis_url(struct config *cfg, const struct config_setting *s,
                         const char *name, const char *v, char *err,
                         size_t errlen)
{
    (void)s;
    return redis_url(name, cfg, v, &cfg->http.store, err, errlen);
}

/* Optional; config_parse() gives the replica the primary's timeouts once
 * every setting is in. */
static int set_replica_url(struct config *cfg, const struct config_setting *s,
                           const char *name, const char *v, char *err,
                           size_t errlen)
{
    (void)s;
    if (!v[0])
        return 0;
    return mysql_url(name, &cfg->mysql_replica_url, v, &cfg->replica_store, err,
                     errlen);
}

/*
 * SECKILL_MYSQL_SHARD_REPLICAS: the shards' read replicas in the order of
 * SECKILL_MYSQL_SHARDS (parsed before it), an empty entry for a shard
 * without one, and none for the shards past the last entry. Shard 0's is
 * the replica of http.store, as SECKILL_MYSQL_REPLICA_URL's would be.
 */
static int set_shard_replicas(struct config *cfg,
                              const struct config_setting *s, const char *name,
                              const char *v, char *err, size_t errlen)
{
    struct list_item items[CONFIG_SHARDS_MAX];
    int n;

    (void)s;
    if (!v[strspn(v, " ")])
        return 0;
    if (!cfg->nshards)
        return fail(err, errlen,
                    "%s: only with SECKILL_MYSQL_SHARDS (the replica of "
                    "SECKILL_MYSQL_URL is SECKILL_MYSQL_REPLICA_URL)",
                    name);
    n = list_split(v, items, (int)cfg->nshards);
    if (n < 0)
        return fail(err, errlen,
                    "%s: more entries than SECKILL_MYSQL_SHARDS has shards "
                    "(%u)",
                    name, cfg->nshards);
    for (int i = 0; i < n; i++) {
        struct config_shard *sh = &cfg->shards[i];

        if (items[i].n && mysql_url_item(name, i, &items[i], &sh->replica_url,
                                         &sh->replica, err, errlen))
            return -EINVAL;
    }
    cfg->replica_store = cfg->shards[0].replica;
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

/* Empty or only spaces: CORS off. */
static int set_origins(struct config *cfg, const struct config_setting *s,
                       const char *name, const char *v, char *err,
                       size_t errlen)
{
    if (parse_origins(v, name, err, errlen))
        return -EINVAL;
    return set_text(cfg, s, name, v[strspn(v, " ")] ? v : "", err, errlen);
}

static int set_cidrs(struct config *cfg, const struct config_setting *s,
                     const char *name, const char *v, char *err, size_t errlen)
{
    struct cidr_list l;
    char why[128];

    if (cidr_list_parse(v, &l, why, sizeof(why))) {
        snprintf(err, errlen, "%s: %s", name, why);
        return -EINVAL;
    }
    return set_text(cfg, s, name, v[strspn(v, " ")] ? v : "", err, errlen);
}

static int set_region(struct config *cfg, const struct config_setting *s,
                      const char *name, const char *v, char *err, size_t errlen)
{
    if (!phone_region_known(v)) {
        snprintf(err, errlen,
                 "%s: \"%.8s\" is not a region this version knows (CN, HK, "
                 "MO, TW, SG, JP, KR, IN, GB, DE, FR, US, CA, AU)",
                 name, v);
        return -EINVAL;
    }
    return set_text(cfg, s, name, v, err, errlen);
}

/* Where login codes are POSTed: an http:// or https:// URL, or "" (none). */
static int set_webhook(struct config *cfg, const struct config_setting *s,
                       const char *name, const char *v, char *err,
                       size_t errlen)
{
    if (v[0] && strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
        return fail(err, errlen, "%s: must be an http:// or https:// URL",
                    name);
    if (strpbrk(v, " \t\r\n"))
        return fail(err, errlen, "%s: must not contain spaces", name);
    return set_text(cfg, s, name, v, err, errlen);
}

/* Whether the n digits at p can be a country calling code: codes are
 * prefix-free, so 1 and 7 are the only ones of one digit, the two-digit
 * ones are these, and a three-digit one starts with neither. ("8" or "88"
 * would admit every number they begin, +882 and +883's too.) */
static bool calling_code_ok(const char *p, size_t n)
{
    static const char two[] = "20 27 30 31 32 33 34 36 39 40 41 43 44 45 "
                              "46 47 48 49 51 52 53 54 55 56 57 58 60 61 "
                              "62 63 64 65 66 81 82 84 86 90 91 92 93 94 "
                              "95 98";
    char pair[3] = {p[0], n > 1 ? p[1] : '\0', '\0'};
    bool listed = n > 1 && strstr(two, pair) != NULL;

    if (n == 1)
        return p[0] == '1' || p[0] == '7';
    if (n == 2)
        return listed;
    return p[0] != '1' && p[0] != '7' && !listed;
}

/* Country calling codes, comma-separated: 1 to 3 digits each, each one
 * that can be a country's (calling_code_ok()), at most
 * PHONE_CALLING_CODES_MAX. */
static int set_calling_codes(struct config *cfg, const struct config_setting *s,
                             const char *name, const char *v, char *err,
                             size_t errlen)
{
    const char *p = v;
    unsigned n = 0;

    while (*p) {
        size_t len = strspn(p, "0123456789");

        if (len < 1 || len > 3 || *p == '0' || (p[len] && p[len] != ',') ||
            (p[len] == ',' && !p[len + 1]) || !calling_code_ok(p, len) ||
            ++n > PHONE_CALLING_CODES_MAX)
            return fail(err, errlen,
                        "%s: country calling codes such as 86,852,1 (a "
                        "country's whole code, 1 to 3 digits, at most %d)",
                        name, PHONE_CALLING_CODES_MAX);
        p += len + (p[len] == ',');
    }
    return set_text(cfg, s, name, v, err, errlen);
}

/* The webhook's key is needed only with a webhook (checked after all
 * settings are read). */
static int set_sms_secret(struct config *cfg, const struct config_setting *s,
                          const char *name, const char *v, char *err,
                          size_t errlen)
{
    cfg->http.has_sms_secret = v[0] != '\0';
    return v[0] ? set_key(cfg, s, name, v, err, errlen) : 0;
}

/* An ISO 4217 code: three capital letters. */
static int set_currency(struct config *cfg, const struct config_setting *s,
                        const char *name, const char *v, char *err,
                        size_t errlen)
{
    if (strlen(v) != 3 || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 3)
        return fail(err, errlen,
                    "%s: must be an ISO 4217 code such as CNY, USD or EUR",
                    name);
    return set_text(cfg, s, name, v, err, errlen);
}

#define STR_(x) #x
#define STR(x) STR_(x)
/* Where a setting's value goes: .off and .size of a field of cfg. */
#define FIELD(m)                                                               \
    .off = offsetof(struct config, m), .size = sizeof(((struct config *)0)->m)

/*
 * Every setting, in the order of --help and docs/configuration.md. Values are
 * parsed in this order too: the HTTP threads before the connection limit that
 * must give each one at least one.
 */
const struct config_setting config_settings[] = {
    {.flag = "port",
     .env = "SECKILL_PORT",
     .arg = "N",
     .def = "8080",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_SMS_SINK,
     .parse = set_int,
     .min = 0,
     .max = 65535,
     FIELD(http.port),
     .help = "listen port",
     .doc = "listen port ({range}; `0` picks a free one)"},
    {.flag = "bind",
     .env = "SECKILL_BIND",
     .arg = "ADDR",
     .def = "127.0.0.1",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_SMS_SINK,
     .parse = set_bind,
     FIELD(http.bind),
     .help = "listen address, an IPv4 or IPv6 literal",
     .doc = "listen address (IPv4 or IPv6 literal)"},
    {.flag = "mysql-url",
     .env = "SECKILL_MYSQL_URL",
     .arg = "URL",
     .def = "",
     .def_doc = "required, unless `SECKILL_MYSQL_SHARDS`",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_ADMIN_ADD |
              CONFIG_FOR_USERS_NORMALIZE | CONFIG_FOR_MIGRATE,
     .parse = set_mysql_url,
     FIELD(http.store),
     .help = "mysql://user:pass@host:port/db",
     .doc = "`mysql://user:pass@host:port/db` (user and password may be "
            "%-encoded): the one MySQL/MariaDB primary"},
    /* After mysql-url: it tells when neither is set. */
    {.flag = "mysql-shards",
     .env = "SECKILL_MYSQL_SHARDS",
     .arg = "URLS",
     .def = "",
     .def_doc = "none: `SECKILL_MYSQL_URL`",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_ADMIN_ADD |
              CONFIG_FOR_USERS_NORMALIZE | CONFIG_FOR_MIGRATE,
     .parse = set_mysql_shards,
     .min = 1,
     .max = CONFIG_SHARDS_MAX,
     FIELD(nshards),
     .help = "the MariaDB primaries of sharded sales, url1,url2,...",
     .doc = "the MariaDB primaries that sales are sharded over: {range} "
            "`mysql://` URLs separated by commas (a comma in a password "
            "written `%2C`), shard 0 first, instead of `SECKILL_MYSQL_URL` "
            "(both set is refused). Shard 0 holds users, logins and "
            "everything that is not a sale; a voucher, its stock and its "
            "orders live on one shard, named by their ids, and new "
            "vouchers go to the shards in turn. `seckilld migrate` "
            "migrates every shard ([MariaDB "
            "shards](scaling.md#mariadb-shards-configuration))"},
    {.flag = "redis-url",
     .env = "SECKILL_REDIS_URL",
     .arg = "URL",
     .def = NULL,
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_USERS_NORMALIZE,
     .parse = set_redis_url,
     FIELD(http.store),
     .help = "redis://[:pass@]host[:port][/db], "
             "redis-sentinel://h1:p1,h2:p2/name/db or "
             "redis-cluster://h1:p1,h2:p2,...",
     .doc = "`redis://[[user]:pass@]host[:port][/db]`, or "
            "`redis-sentinel://[[user]:pass@]h1[:p1],h2[:p2],.../<master>[/"
            "db]` to find the master through Sentinel (sentinel port 26379 by "
            "default; see [Redis Sentinel](operations.md#redis-sentinel)), or "
            "`redis-cluster://[[user]:pass@]h1[:p1],h2[:p2],...` for a Redis "
            "Cluster (7.0 or later) reached first through those nodes, in "
            "either purchase mode "
            "([Redis Cluster](scaling.md#redis-cluster-what-runs-on-it))"},
    {.flag = "secret",
     .env = "SECKILL_SECRET",
     .arg = "HEX",
     .def = NULL,
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_TOKEN | CONFIG_FOR_TOKENS,
     .parse = set_key,
     FIELD(http.secret),
     .help = "64 hex characters, the token signing key",
     .doc = "64 hex characters: the token signing key"},
    {.flag = "threads",
     .env = "SECKILL_THREADS",
     .arg = "N",
     .def = "",
     .def_doc = "1 per core, at least 2",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_http_threads,
     .min = 1,
     .max = 1024,
     FIELD(http.threads),
     .help = "HTTP threads",
     .doc = "HTTP threads ({range}): they parse, route and reply from memory, "
            "and never wait for MySQL, Redis or a purchase"},
    {.flag = "engine-threads",
     .env = "SECKILL_ENGINE_THREADS",
     .arg = "N",
     .def = "",
     .def_doc = "2 per core",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_engine_threads,
     .min = 1,
     .max = 1024,
     FIELD(http.engine_threads),
     .help = "purchase engine threads",
     .doc = "purchase engine threads ({range}): each runs one batch of one "
            "voucher at a time, with its own MySQL and Redis connection ([How "
            "a purchase works](purchase.md#how-a-purchase-works)); as many "
            "again form the "
            "task pool, which runs every other request that reads or writes "
            "MySQL or Redis (logins, vouchers, orders, the rate limiter), one "
            "at a time each, with its own connections"},
    {.flag = "queue-max",
     .env = "SECKILL_QUEUE_MAX",
     .arg = "N",
     .def = "20000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 1000000,
     FIELD(http.queue_max),
     .help = "purchases waiting per voucher; more get 429 BUSY at once",
     .doc = "purchases waiting per voucher in this instance ({range}); more "
            "are answered 429 `BUSY` with `Retry-After: 1` at once (about a "
            "second of selling at the rates of "
            "[performance.md](performance.md))"},
    {.flag = "idle-free-s",
     .env = "SECKILL_IDLE_FREE_S",
     .arg = "N",
     .def = "60",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 86400,
     .unit = "seconds",
     FIELD(http.idle_free_s),
     .help = "free a voucher's queue and state after N s unused, {range}",
     .doc = "a voucher's purchase queue and the little state kept about its "
            "stock are freed once unused this long ({range}), and the memory "
            "goes back to the system: a voucher bought later makes them again "
            "(under 200 bytes a voucher; see `seckill_purchase_queues`)"},
    {.flag = "lock-ttl-ms",
     .env = "SECKILL_LOCK_TTL_MS",
     .arg = "N",
     .def = "10000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 100,
     .max = 3600000,
     .unit = "milliseconds",
     FIELD(http.lock_ttl_ms),
     .help = "per-user purchase lock lease",
     .doc = "lease of the per-user purchase lock ({range} ms)"},
    {.flag = "lock-url",
     .env = "SECKILL_LOCK_URL",
     .arg = "URL",
     .def = "",
     .def_doc = "the Redis URL",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_text,
     FIELD(http.lock_url),
     .help = "lock backend: redis://, redis-sentinel://, redis-cluster://, "
             "redlock://, mysql://, zookeeper://",
     .doc = "backend of the purchase lock: `redis://…` or `redis-sentinel://…` "
            "(add `?replicas=N` to wait for N replicas at each acquire), "
            "`redis-cluster://h1:p1,h2:p2,h3:p3` (a Redis Cluster, named by "
            "some of its nodes), `redlock://h1:p1,h2:p2,h3:p3`, `mysql://…`, "
            "`zookeeper://host:port/path` (see [locks.md](locks.md))"},
    {.flag = "redis-prefix",
     .env = "SECKILL_REDIS_PREFIX",
     .arg = "TEXT",
     .def = "",
     .def_doc = "none",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_USERS_NORMALIZE,
     .parse = set_redis_prefix,
     FIELD(http.redis_prefix),
     .help = "put in front of every Redis key and channel",
     .doc = "put in front of every Redis key and channel the service uses "
            "(the purchase locks' too), so that deployments can share one "
            "Redis or one Redis Cluster, which has only database 0: up to "
            "32 letters, digits, `_`, `:`, `.` or `-`, such as `shop1:`. "
            "Channels keep the database number after it. Change it only "
            "with every instance stopped: the new names start empty (see "
            "[scaling.md](scaling.md#redis-cluster-keys))"},
    {.flag = "dev",
     .env = "SECKILL_DEV",
     .arg = "0|1",
     .def = "0",
     .bare = "1",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_bool,
     FIELD(http.dev),
     .help = "1: echo login codes in responses",
     .doc = "`1` returns login codes in responses (never in production)"},
    {.flag = "rate-user",
     .env = "SECKILL_RATE_USER",
     .arg = "R,B",
     .def = "20,40",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_rate,
     FIELD(http.rate_user),
     .help = "per-user token bucket: R a second, burst B; 0 off",
     .doc =
         "per-user token bucket `RATE,BURST`: RATE requests a second (decimals "
         "allowed, e.g. `0.5`), up to BURST at once; `0` turns it off"},
    {.flag = "rate-ip",
     .env = "SECKILL_RATE_IP",
     .arg = "R,B",
     .def = "0",
     .def_doc = "`0` (off)",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_rate,
     FIELD(http.rate_ip),
     .help = "the same per client address",
     .doc = "the same per client address (IPv6: per /64)"},
    {.flag = "conn-timeout-s",
     .env = "SECKILL_CONN_TIMEOUT_S",
     .arg = "N",
     .def = "30",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 3600,
     .unit = "seconds",
     FIELD(http.conn_timeout_s),
     .help = "idle timeout, request deadline",
     .doc = "a connection idle this long ({range} s) is closed, and so is one "
            "whose request (headers and body) has not fully arrived this long "
            "after it started waiting for it"},
    {.flag = "max-conn",
     .env = "SECKILL_MAX_CONN",
     .arg = "N",
     .def = "60000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_max_conn,
     .min = 1,
     .max = 1000000,
     FIELD(http.max_conn),
     .help = "open connections in all",
     .doc = "open connections in all, {range} (split between the threads, so "
            "at least one per thread); new ones wait in the listen backlog"},
    {.flag = "max-conn-per-ip",
     .env = "SECKILL_MAX_CONN_PER_IP",
     .arg = "N",
     .def = "0",
     .def_doc = "`0` (off)",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 1000000,
     FIELD(http.max_conn_per_ip),
     .help = "open connections per client address",
     .doc = "open connections per client address ({range}); more are accepted "
            "and closed at once"},
    {.flag = "http-head-max",
     .env = "SECKILL_HTTP_HEAD_MAX",
     .arg = "N",
     .def = STR(HTTP_HEAD_LIMIT_DEFAULT),
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = HTTP_HEAD_LIMIT_MIN,
     .max = HTTP_HEAD_LIMIT_MAX,
     .unit = "bytes",
     FIELD(http.head_max),
     .help = "bytes of request line and headers served, {range}",
     .doc = "the request line and header lines a request may send and be "
            "served, in bytes ({range}); a larger head is answered 431 "
            "`HEADERS_TOO_LARGE` (a target above half of it, or too many "
            "query arguments: 414 `URI_TOO_LONG`). Each connection keeps a "
            "buffer of about twice this while it lives, its memory while "
            "idle: about 9 KiB at 4096, 15 KiB at 8192, 27 KiB at 16384. "
            "Raise it behind a proxy that adds large cookies or headers "
            "([Malformed requests](api.md#malformed-requests))"},
    {.flag = "batch-max",
     .env = "SECKILL_BATCH_MAX",
     .arg = "N",
     .def = STR(STORE_BATCH_DEFAULT),
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = STORE_BATCH_MAX,
     FIELD(http.store.batch_max),
     .help =
         "purchases of a voucher merged into one transaction, {range}; 1 off",
     .doc = "waiting purchases of one voucher run as one batch: one lock round "
            "trip and one transaction ({range}); `1` turns merging off: one "
            "purchase per batch and transaction ([How a purchase "
            "works](purchase.md#how-a-purchase-works))"},
    {.flag = "batch-linger-us",
     .env = "SECKILL_BATCH_LINGER_US",
     .arg = "N",
     .def = "0",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = STORE_BATCH_LINGER_MAX_US,
     .unit = "microseconds",
     FIELD(http.store.batch_linger_us),
     .help = "a batch waits this long for more",
     .doc = "a batch waits this many microseconds ({range}) for more purchases "
            "before it starts"},
    {.flag = "stock-segments",
     .env = "SECKILL_STOCK_SEGMENTS",
     .arg = "N",
     .def = "1",
     .def_doc = "`1` (off)",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = STORE_SEGMENTS_MAX,
     FIELD(http.store.stock_segments),
     .help = "new vouchers' stock in N rows, {range}",
     .doc = "vouchers created by this instance keep their stock in this many "
            "rows ({range}), so purchases lock different rows; every instance "
            "sells such a voucher the same way"},
    {.flag = "pay-timeout-s",
     .env = "SECKILL_PAY_TIMEOUT_S",
     .arg = "N",
     .def = "900",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = STORE_PAY_TIMEOUT_MAX_S,
     .unit = "seconds",
     FIELD(http.store.pay_timeout_s),
     .help = "an unpaid order expires after N s",
     .doc = "an order not paid this many seconds ({range}) after its purchase "
            "expires and its unit goes back on sale ([Orders and "
            "payment](purchase.md#orders-and-payment))"},
    {.flag = "pay-secret",
     .env = "SECKILL_PAY_SECRET",
     .arg = "HEX",
     .def = "",
     .def_doc = "none",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_pay_secret,
     FIELD(http.pay_secret),
     .help = "the payment provider's key, 64 hex characters; without it, "
             "no notify route",
     .doc = "64 hex characters: the payment provider's key for `POST "
            "/api/payments/notify`; without it that route does not exist"},
    {.flag = "purchase-mode",
     .env = "SECKILL_PURCHASE_MODE",
     .arg = "M",
     .def = "sync",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_purchase_mode,
     FIELD(http.purchase_mode),
     .help = "sync or async: how new flash sales sell unless created with "
             "purchaseMode",
     .doc = "how seckill vouchers created without `purchaseMode` sell: `sync` "
            "(a MySQL transaction decides, 201) or `async` (a Redis script "
            "decides, 202; [Async "
            "mode](purchase.md#async-mode-redis-decides-a-stream-carries-the-"
            "orders)). "
            "With `async` the service refuses to start, with one line and exit "
            "status 2, unless its Redis has `appendonly yes` and `appendfsync "
            "always` or `SECKILL_ASYNC_ACCEPT_LOSS=1` (on a "
            "`redis-cluster://` URL: every primary)"},
    {.flag = "async-accept-loss",
     .env = "SECKILL_ASYNC_ACCEPT_LOSS",
     .arg = "0|1",
     .def = "0",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_bool,
     FIELD(http.async_accept_loss),
     .help = "sell async on a Redis that may lose acknowledged writes",
     .doc = "`1`: sell async vouchers even on a Redis that may lose "
            "acknowledged writes (a Redis crash can then lose up to a second "
            "of 202s: see below)"},
    {.flag = "async-backlog-max",
     .env = "SECKILL_ASYNC_BACKLOG_MAX",
     .arg = "N",
     .def = "100000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 10000000,
     FIELD(http.async_backlog_max),
     .help = "an async sale's orders waiting for MySQL beyond which purchases "
             "get 429",
     .doc =
         "orders of one async voucher waiting for MySQL ({range}) beyond which "
         "its purchases are answered 429 `BUSY` with `Retry-After: 1`"},
    {.flag = "async-replicas",
     .env = "SECKILL_ASYNC_REPLICAS",
     .arg = "N|auto",
     .def = "auto",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_async_replicas,
     .min = 0,
     .max = 16,
     FIELD(http.async_replicas),
     .help = "Redis replicas that must have an async batch before its 202s; 0: "
             "none; auto: those the primary has, at most 1",
     .doc = "Redis replicas that must have an async batch (`WAIT`) before its "
            "purchases are answered 202 ({range}); `auto`: the primary's "
            "online replicas at the last look (every 2 s) or, behind "
            "Sentinel, every replica the sentinels know, down or still "
            "copying too (a failover may promote one that never got the "
            "batch), at most 1; `0`: "
            "none, and a failover to a replica that had not received the last "
            "batches loses their 202s (see [Async "
            "mode](purchase.md#async-mode-redis-decides-a-stream-carries-the-"
            "orders))"},
    {.flag = "async-wait-ms",
     .env = "SECKILL_ASYNC_WAIT_MS",
     .arg = "N",
     .def = "200",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 4000,
     .unit = "milliseconds",
     FIELD(http.async_wait_ms),
     .help = "how long they may take",
     .doc = "how long those replicas may take ({range}); a batch they do not "
            "confirm in time is answered 503 `UNAVAILABLE`, outcome unknown"},
    {.flag = "async-reconcile-ms",
     .env = "SECKILL_ASYNC_RECONCILE_MS",
     .arg = "N",
     .def = "2000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 100,
     .max = 60000,
     .unit = "milliseconds",
     FIELD(http.async_reconcile_ms),
     .help = "compare async sales' Redis state with MySQL every N ms",
     .doc = "how often ({range} ms) the instance holding the reconciliation "
            "lock compares each async sale's Redis state with MySQL ([Async "
            "mode](purchase.md#async-mode-redis-decides-a-stream-carries-the-"
            "orders)); "
            "the tests shorten it"},
    {.flag = "async-lookback-s",
     .env = "SECKILL_ASYNC_LOOKBACK_S",
     .arg = "N",
     .def = "3600",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 31536000,
     .unit = "seconds",
     FIELD(http.async_lookback_s),
     .help = "an async sale is reconciled with MySQL until N s after its end",
     .doc = "an async sale is reconciled with MySQL (and its Redis state made "
            "again if it is missing) until this many seconds after its end, "
            "{range}. Its orders are written whatever its age: the writers "
            "find the sales with orders waiting through an index in Redis, not "
            "through this look-back"},
    {.flag = "soldout-ttl-ms",
     .env = "SECKILL_SOLDOUT_TTL_MS",
     .arg = "N",
     .def = "1000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 60000,
     .unit = "milliseconds",
     FIELD(http.soldout_ttl_ms),
     .help = "trust a cached sold-out flag this long; 0: no voucher cache",
     .doc =
         "how long a cached sold-out flag or unknown voucher id is trusted "
         "without an invalidation message ({range}; `0` turns the voucher "
         "cache off) ([the sold-out cache](purchase.md#the-sold-out-cache))"},
    {.flag = "pow-maxnumber",
     .env = "SECKILL_POW_MAXNUMBER",
     .arg = "N",
     .def = "100000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 10000000,
     FIELD(http.pow_maxnumber),
     .help = "proof of work before a login code: up to N hashes; 0: none",
     .doc = "a login code needs a proof of work (`Seckill-PoW`, ALTCHA's "
            "format): the client tries up to this many SHA-256 hashes, half on "
            "average, {range}; `0` asks for none "
            "([abuse limits](accounts.md#abuse-limits))"},
    {.flag = "pow-ttl-s",
     .env = "SECKILL_POW_TTL_S",
     .arg = "N",
     .def = "300",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 3600,
     .unit = "seconds",
     FIELD(http.pow_ttl_s),
     .help = "a proof-of-work challenge is good this long",
     .doc = "a proof-of-work challenge is good this long after it was given, "
            "{range}, and once"},
    {.flag = "waitroom-open-s",
     .env = "SECKILL_WAITROOM_OPEN_S",
     .arg = "N",
     .def = "600",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 86400,
     .unit = "seconds",
     FIELD(http.waitroom_open_s),
     .help = "a queue sale's waiting room opens N s before its begin",
     .doc = "a queue sale's waiting room takes buyers from this many seconds "
            "before the sale begins, {range}; everyone who joins before the "
            "begin is shuffled at the begin ([waiting "
            "room](purchase.md#waiting-room))"},
    {.flag = "waitroom-admit-rate",
     .env = "SECKILL_WAITROOM_ADMIT_RATE",
     .arg = "N",
     .def = "2000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 1000000,
     FIELD(http.waitroom_admit_rate),
     .help = "places of a waiting room admitted a second",
     .doc = "how many places of a queue sale's waiting room are admitted a "
            "second from the begin, {range} (size it to the sale's purchase "
            "rate: [waiting room](purchase.md#waiting-room))"},
    {.flag = "waitroom-ticket-ttl-s",
     .env = "SECKILL_WAITROOM_TICKET_TTL_S",
     .arg = "N",
     .def = "60",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 3600,
     .unit = "seconds",
     FIELD(http.waitroom_ticket_ttl_s),
     .help = "an admitted buyer's ticket is good N s",
     .doc = "an admitted buyer's purchase ticket is good this long after its "
            "place was admitted, {range}"},
    {.flag = "waitroom-poll-s",
     .env = "SECKILL_WAITROOM_POLL_S",
     .arg = "N",
     .def = "1",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 60,
     .unit = "seconds",
     FIELD(http.waitroom_poll_s),
     .help = "a buyer reads its place at most every N s",
     .doc = "a buyer may read its place in a waiting room at most once in "
            "this many seconds, {range}; sooner is 429 `RATE_LIMITED` with "
            "`Retry-After`"},
    {.flag = "code-interval-s",
     .env = "SECKILL_CODE_INTERVAL_S",
     .arg = "N",
     .def = "60",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 3600,
     .unit = "seconds",
     FIELD(http.code_interval_s),
     .help = "at least N s between two login codes of a phone asked for "
             "from one address",
     .doc = "a client address gets at most one login code for a phone in "
            "this many seconds, {range}; an earlier request is answered 429 "
            "`RATE_LIMITED` with `Retry-After` ([abuse "
            "limits](accounts.md#abuse-limits))"},
    {.flag = "code-per-hour",
     .env = "SECKILL_CODE_PER_HOUR",
     .arg = "N",
     .def = "5",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 100,
     FIELD(http.code_per_hour),
     .help = "at most N login codes an hour for a phone from one address "
             "(10 N from all)",
     .doc = "a client address gets at most this many login codes for a "
            "phone in an hour, {range}, and a phone ten times this many "
            "from all addresses ([abuse limits](accounts.md#abuse-limits))"},
    {.flag = "login-addr-tries",
     .env = "SECKILL_LOGIN_ADDR_TRIES",
     .arg = "N",
     .def = "3",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 100,
     FIELD(http.login_addr_tries),
     .help = "wrong login codes for a phone from one address before waits",
     .doc =
         "wrong login codes for one phone from one client address before "
         "that address waits (1 s, doubling with each further wrong code, "
         "up to an hour), {range} ([abuse limits](accounts.md#abuse-limits))"},
    {.flag = "login-phone-tries",
     .env = "SECKILL_LOGIN_PHONE_TRIES",
     .arg = "N",
     .def = "10",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 1000,
     FIELD(http.login_phone_tries),
     .help = "wrong login codes for a phone in all before waits",
     .doc =
         "wrong login codes for one phone from all addresses before every "
         "login of that phone waits (1 s, doubling, up to an hour), {range}; "
         "a wait never voids the phone's codes "
         "([abuse limits](accounts.md#abuse-limits))"},
    {.flag = "admin-token-ttl-s",
     .env = "SECKILL_ADMIN_TOKEN_TTL_S",
     .arg = "N",
     .def = "3600",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 60,
     .max = 86400,
     .unit = "seconds",
     FIELD(http.admin_token_ttl_s),
     .help = "an admin login's token is valid this long",
     .doc = "how long the token of `POST /api/admin/login` is valid, {range} "
            "([accounts and sessions](accounts.md#accounts-and-sessions))"},
    {.flag = "auth-resync-s",
     .env = "SECKILL_AUTH_RESYNC_S",
     .arg = "N",
     .def = "30",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 3600,
     .unit = "seconds",
     FIELD(http.auth_resync_s),
     .help = "reload the logged-out tokens and bans at least every N s",
     .doc = "each instance reloads the logged-out tokens, token generations "
            "and bans from MySQL and Redis at least this often, {range}, "
            "besides hearing each change at once over Redis pub/sub "
            "([accounts and sessions](accounts.md#accounts-and-sessions))"},
    {.flag = "cors-origins",
     .env = "SECKILL_CORS_ORIGINS",
     .arg = "LIST",
     .def = "",
     .def_doc = "empty (off)",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_origins,
     FIELD(http.cors_origins),
     .help = "web pages on these origins may call the API: "
             "https://a.example,http://b:3000",
     .doc = "web pages on these origins may call the API from a browser: exact "
            "origins, comma-separated, such as "
            "`https://shop.example.com,http://localhost:3000` "
            "([CORS](api.md#cors))"},
    {.flag = "sms-webhook",
     .env = "SECKILL_SMS_WEBHOOK",
     .arg = "URL",
     .def = "",
     .def_doc = "none",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_webhook,
     FIELD(http.sms_webhook),
     .help = "POST each login code here (JSON, signed with the SMS secret); "
             "needed unless in dev mode",
     .doc = "where each login code is POSTed as JSON `{\"phone\",\"code\","
            "\"expiresIn\"}` with `X-Signature` (the hex HMAC-SHA256 of the "
            "body, keyed by `SECKILL_SMS_SECRET`), for a service that sends it "
            "by SMS; it has 4 s to answer 2xx, else the request is answered "
            "503. Without it and without `SECKILL_DEV=1` the service refuses "
            "to start ([Sending login "
            "codes](accounts.md#sending-login-codes))"},
    {.flag = "sms-queue-max",
     .env = "SECKILL_SMS_QUEUE_MAX",
     .arg = "N",
     .def = "256",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 100000,
     FIELD(http.sms_queue_max),
     .help = "at most N login codes on their way to the SMS webhook",
     .doc = "at most this many login codes on their way to "
            "`SECKILL_SMS_WEBHOOK` at once ({range}), on up to 64 "
            "connections: a code request beyond them is answered 503 at "
            "once. They wait on a sender of their own, never on a thread "
            "that serves requests ([Sending login "
            "codes](accounts.md#sending-login-codes))"},
    {.flag = "sms-regions",
     .env = "SECKILL_SMS_REGIONS",
     .arg = "LIST",
     .def = "",
     .def_doc = "`SECKILL_PHONE_REGION`'s (86)",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_calling_codes,
     FIELD(http.sms_regions),
     .help = "the country calling codes login codes may be sent to",
     .doc = "the country calling codes login codes may be sent to, "
            "comma-separated (`86,852,853`); a code for any other number is "
            "400, and no SMS goes out ([SMS "
            "pumping](accounts.md#sms-pumping))"},
    {.flag = "sms-per-min",
     .env = "SECKILL_SMS_PER_MIN",
     .arg = "N",
     .def = "20000",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 1,
     .max = 10000000,
     FIELD(http.sms_per_min),
     .help = "at most N login codes a minute to each calling code",
     .doc = "at most this many login codes a minute to the numbers of each "
            "calling code, over all instances ({range}; the default fits a "
            "sale of 100,000 buyers logging in over ten minutes twice over); "
            "past it 429 `SMS_BUDGET` with `Retry-After`, and the proof of "
            "work of that calling code grows from half of it on, up to ten "
            "times `SECKILL_POW_MAXNUMBER` ([SMS "
            "pumping](accounts.md#sms-pumping))"},
    {.flag = "sms-secret",
     .env = "SECKILL_SMS_SECRET",
     .arg = "HEX",
     .def = "",
     .def_doc = "none",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_SMS_SINK,
     .parse = set_sms_secret,
     FIELD(http.sms_secret),
     .help = "the SMS webhook's key, 64 hex characters",
     .doc = "64 hex characters: the key of `X-Signature` on the login codes "
            "sent to `SECKILL_SMS_WEBHOOK` (needed with it)"},
    {.flag = "currency",
     .env = "SECKILL_CURRENCY",
     .arg = "CODE",
     .def = "CNY",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_currency,
     FIELD(http.currency),
     .help = "the currency of prices (ISO 4217), for the pages",
     .doc = "the currency (ISO 4217) the pages show prices in; "
            "`GET /api/config` tells them"},
    {.flag = "phone-region",
     .env = "SECKILL_PHONE_REGION",
     .arg = "CC",
     .def = "CN",
     .scope = CONFIG_FOR_SERVE | CONFIG_FOR_USERS_NORMALIZE,
     .parse = set_region,
     FIELD(http.phone_region),
     .help = "the country of phone numbers written without + or 00",
     .doc = "the country (ISO 3166 code) of a phone number written without "
            "`+` or `00`: its trunk prefix is dropped and its country code "
            "put in front, so that every way of writing a number logs in "
            "as one user ([phone numbers](api.md#logins-and-phone-numbers))"},
    {.flag = "trusted-proxies",
     .env = "SECKILL_TRUSTED_PROXIES",
     .arg = "LIST",
     .def = "",
     .def_doc = "empty (none)",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_cidrs,
     FIELD(http.trusted_proxies),
     .help = "take the client's address from X-Forwarded-For on connections "
             "from these: 10.0.0.0/8,127.0.0.1",
     .doc = "load balancers whose `X-Forwarded-For` names the client: "
            "addresses or blocks, comma-separated, such as "
            "`10.0.0.0/8,::1`. On a connection from one of them the client "
            "is the address nearest the end of that header that is not one "
            "of them; per-address limits count it. Empty: the connection's "
            "peer is the client, and the header is ignored"},
    {.flag = "metrics-allow",
     .env = "SECKILL_METRICS_ALLOW",
     .arg = "LIST",
     .def = "127.0.0.0/8,::1",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_cidrs,
     FIELD(http.metrics_allow),
     .help = "GET /metrics answers connections from these only: "
             "127.0.0.0/8,10.1.0.0/16",
     .doc = "the connection peers `GET /metrics` answers (addresses or "
            "blocks, comma-separated; the peer itself, never "
            "`X-Forwarded-For`); others get 403 `FORBIDDEN`. Empty: "
            "nobody. Admins read the same counters at "
            "`GET /api/admin/metrics`"},
    {.flag = "drain-s",
     .env = "SECKILL_DRAIN_S",
     .arg = "N",
     .def = "5",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 3600,
     .unit = "seconds",
     FIELD(http.drain_s),
     .help = "after SIGTERM, /readyz answers 503 and serving goes on N s "
             "before the stop",
     .doc =
         "on `SIGTERM`, answer `/readyz` 503 and close each connection after "
         "its reply, but keep serving this many seconds ({range}) before "
         "stopping, so a load balancer checking `/readyz` moves away first "
         "(the shipped haproxy config needs at most about 3 s); `SIGINT` and a "
         "second signal stop at once ([graceful "
         "drain](operations.md#graceful-drain)). "
         "`make services` writes `0` into `.run/env` for instances started by "
         "hand, the tests and the benchmarks"},
    {.flag = "mysql-replica-url",
     .env = "SECKILL_MYSQL_REPLICA_URL",
     .arg = "URL",
     .def = "",
     .def_doc = "none",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_replica_url,
     FIELD(replica_store),
     .help = "a read replica for voucher reads",
     .doc =
         "a MySQL/MariaDB read replica, `mysql://user:pass@host:port/db`, for "
         "voucher reads and lists ([read "
         "replica](operations.md#mysql-read-replica)); its "
         "user needs `SELECT` and `REPLICA MONITOR`"},
    {.flag = "mysql-replica-max-lag-s",
     .env = "SECKILL_MYSQL_REPLICA_MAX_LAG_S",
     .arg = "N",
     .def = "5",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_int,
     .min = 0,
     .max = 86400,
     .unit = "seconds",
     FIELD(http.store.replica_max_lag_s),
     .help = "skip the replica when further behind",
     .doc = "a replica further behind than this ({range} s of "
            "`Seconds_Behind_Master`), or not replicating, or down, is "
            "skipped: reads go to the primary"},
    {.flag = "mysql-shard-replicas",
     .env = "SECKILL_MYSQL_SHARD_REPLICAS",
     .arg = "URLS",
     .def = "",
     .def_doc = "none",
     .scope = CONFIG_FOR_SERVE,
     .parse = set_shard_replicas,
     FIELD(nshards),
     .help = "the shards' read replicas, in their order (empty: none)",
     .doc = "the read replicas of the shards of `SECKILL_MYSQL_SHARDS`, in "
            "the same order, separated by commas; an empty entry (or none "
            "past the last) is a shard without one, and more entries than "
            "shards are refused. Instead of `SECKILL_MYSQL_REPLICA_URL` "
            "(both set is refused): shard 0's replica is the one it would "
            "name"},
    /* The token commands' options: flags only. */
    {.flag = "user",
     .arg = "ID",
     .def = NULL,
     .scope = CONFIG_FOR_TOKEN,
     .parse = set_int,
     .min = 1,
     .max = INT64_MAX,
     FIELD(token_user),
     .help = "the user the token is for"},
    {.flag = "admin",
     .arg = "0|1",
     .def = "0",
     .def_doc = "a user's token",
     .bare = "1",
     .scope = CONFIG_FOR_TOKEN,
     .parse = set_bool,
     FIELD(token_admin),
     .help = "an admin's token"},
    {.flag = "first",
     .arg = "N",
     .def = NULL,
     .scope = CONFIG_FOR_TOKENS,
     .parse = set_int,
     .min = 1,
     .max = INT64_MAX / 2,
     FIELD(tokens_first),
     .help = "the first user id"},
    {.flag = "count",
     .arg = "M",
     .def = NULL,
     .scope = CONFIG_FOR_TOKENS,
     .parse = set_int,
     .min = 1,
     .max = 10000000,
     FIELD(tokens_count),
     .help = "tokens for users N to N+M-1, {range}"},
    {.flag = "username",
     .arg = "NAME",
     .def = NULL,
     .scope = CONFIG_FOR_ADMIN_ADD,
     .parse = set_username,
     FIELD(admin_username),
     .help = "the new admin's name: letters, digits, '.', '_', '-', at most "
             "64"},
    {.flag = "dry-run",
     .arg = "0|1",
     .def = "0",
     .def_doc = "write",
     .bare = "1",
     .scope = CONFIG_FOR_USERS_NORMALIZE,
     .parse = set_bool,
     FIELD(users_dry_run),
     .help = "count what would change, write nothing"},
    {.flag = "lock-wait",
     .arg = "SECONDS",
     .def = "600",
     .scope = CONFIG_FOR_MIGRATE,
     .parse = set_int,
     .min = 0,
     .max = 86400,
     .unit = "seconds",
     FIELD(migrate_lock_wait_s),
     .help = "how long to wait for another migrate of the database, {range} "
             "s"},
    {.flag = "ttl",
     .arg = "SECONDS",
     .def = "86400",
     .scope = CONFIG_FOR_TOKEN | CONFIG_FOR_TOKENS,
     .parse = set_int,
     .min = 1,
     .max = 10 * 365 * 86400LL,
     .unit = "seconds",
     FIELD(token_ttl_s),
     .help = "how long the tokens are valid, {range} s"},
};

const size_t config_settings_count =
    sizeof(config_settings) / sizeof(config_settings[0]);

#define NSETTINGS (sizeof(config_settings) / sizeof(config_settings[0]))

/* The values given so far, and whether each came from its flag. */
struct values {
    const char *v[NSETTINGS];
    bool by_flag[NSETTINGS];
};

static const char *const command_names[] = {
    [CMD_SERVE] = "serve",       [CMD_TOKEN] = "token",
    [CMD_TOKENS] = "tokens",     [CMD_ADMIN_ADD] = "admin add",
    [CMD_POW] = "pow",           [CMD_USERS_NORMALIZE] = "users normalize",
    [CMD_SMS_SINK] = "sms-sink", [CMD_MIGRATE] = "migrate",
    [CMD_HELP] = "help",
};

/* The CONFIG_FOR_* bit of a command; help reads no setting. */
static unsigned command_scope(enum config_cmd cmd)
{
    switch (cmd) {
    case CMD_SERVE:
        return CONFIG_FOR_SERVE;
    case CMD_TOKEN:
        return CONFIG_FOR_TOKEN;
    case CMD_TOKENS:
        return CONFIG_FOR_TOKENS;
    case CMD_ADMIN_ADD:
        return CONFIG_FOR_ADMIN_ADD;
    case CMD_USERS_NORMALIZE:
        return CONFIG_FOR_USERS_NORMALIZE;
    case CMD_SMS_SINK:
        return CONFIG_FOR_SMS_SINK;
    case CMD_MIGRATE:
        return CONFIG_FOR_MIGRATE;
    case CMD_POW:
    case CMD_HELP:
        break;
    }
    return 0;
}

/* The commands of a command's option, in words. */
static const char *scope_words(unsigned scope)
{
    if (scope & CONFIG_FOR_ADMIN_ADD)
        return "admin add";
    if (scope & CONFIG_FOR_USERS_NORMALIZE)
        return "users normalize";
    if (scope & CONFIG_FOR_MIGRATE)
        return "migrate";
    if ((scope & CONFIG_FOR_TOKEN) && (scope & CONFIG_FOR_TOKENS))
        return "token and tokens";
    return scope & CONFIG_FOR_TOKEN ? "token" : "tokens";
}

/* The setting whose flag is exactly the n bytes at name, or NULL: no
 * abbreviations, so that a flag added later never changes what an old
 * command line means. */
static const struct config_setting *setting_find(const char *name, size_t n)
{
    for (size_t i = 0; i < NSETTINGS; i++) {
        const char *flag = config_settings[i].flag;

        if (strlen(flag) == n && memcmp(flag, name, n) == 0)
            return &config_settings[i];
    }
    return NULL;
}

/* The value of the setting with this flag. */
static const char *value_of(const struct values *vals, const char *flag)
{
    const struct config_setting *s = setting_find(flag, strlen(flag));

    assert(s);
    return vals->v[s - config_settings];
}

/* The command word, if argv[1] is one. Returns the index of the first
 * option, or -EINVAL. */
static int parse_command(struct config *cfg, int argc, char **argv, char *err,
                         size_t errlen)
{
    if (argc < 2 || argv[1][0] == '-')
        return 1;
    /* The commands of two words. */
    if (strcmp(argv[1], "admin") == 0) {
        if (argc < 3 || strcmp(argv[2], "add") != 0)
            return fail(err, errlen, "admin: the command is \"admin add\"");
        cfg->cmd = CMD_ADMIN_ADD;
        return 3;
    }
    if (strcmp(argv[1], "users") == 0) {
        if (argc < 3 || strcmp(argv[2], "normalize") != 0)
            return fail(err, errlen,
                        "users: the command is \"users normalize\"");
        cfg->cmd = CMD_USERS_NORMALIZE;
        return 3;
    }
    for (size_t c = 0; c < sizeof(command_names) / sizeof(command_names[0]);
         c++) {
        if (strcmp(argv[1], command_names[c]) == 0) {
            cfg->cmd = (enum config_cmd)c;
            return 2;
        }
    }
    return fail(err, errlen, "unknown command \"%s\" (see --help)", argv[1]);
}

/* The options argv[i..argc-1] into vals; --help and its kin stop there. */
static int parse_flags(struct config *cfg, int argc, char **argv, int i,
                       struct values *vals, char *err, size_t errlen)
{
    static const struct {
        const char *flag;
        enum config_doc doc;
    } helps[] = {{"--help", CONFIG_DOC_HELP},
                 {"-h", CONFIG_DOC_HELP},
                 {"--help-markdown", CONFIG_DOC_MARKDOWN},
                 {"--help-man", CONFIG_DOC_MAN}};

    for (; i < argc; i++) {
        const char *a = argv[i], *v;
        const struct config_setting *s;
        size_t n;

        for (size_t h = 0; h < sizeof(helps) / sizeof(helps[0]); h++) {
            if (strcmp(a, helps[h].flag) == 0) {
                cfg->cmd = CMD_HELP;
                cfg->doc = helps[h].doc;
                return 0;
            }
        }
        if (strncmp(a, "--", 2) != 0)
            return fail(err, errlen, "unexpected argument \"%s\"", a);
        a += 2;
        n = strcspn(a, "=");
        if (!(s = setting_find(a, n)))
            return fail(err, errlen, "unknown option --%.*s (see --help)",
                        (int)n, a);
        if (!s->env && !(s->scope & command_scope(cfg->cmd)))
            return fail(err, errlen, "--%s: only with %s", s->flag,
                        scope_words(s->scope));
        if (a[n] == '=')
            v = a + n + 1;
        else if (s->bare)
            v = s->bare;
        else if (i + 1 < argc)
            v = argv[++i];
        else
            return fail(err, errlen, "--%s: needs a value", s->flag);
        vals->v[s - config_settings] = v;
        vals->by_flag[s - config_settings] = true;
    }
    return 0;
}

/* Parse every setting of the command, in the table's order. */
static int apply_all(struct config *cfg, const struct values *vals, char *err,
                     size_t errlen)
{
    unsigned scope = command_scope(cfg->cmd);

    for (size_t i = 0; i < NSETTINGS; i++) {
        const struct config_setting *s = &config_settings[i];
        const char *v = vals->v[i];
        char name[48];
        int ret;

        if (!(s->scope & scope))
            continue;
        if (!v || (!v[0] && !s->def)) {
            if (!s->env)
                return fail(err, errlen, "%s: --%s %s is required",
                            command_names[cfg->cmd], s->flag, s->arg);
            return fail(err, errlen, "%s (--%s) is required", s->env, s->flag);
        }
        if (vals->by_flag[i] || !s->env)
            snprintf(name, sizeof(name), "--%s", s->flag);
        else
            snprintf(name, sizeof(name), "%s", s->env);
        if ((ret = s->parse(cfg, s, name, v, err, errlen)))
            return ret;
    }
    return 0;
}

/* The pairs of settings that name one thing two ways: the one server,
 * or a list of shards. */
static const struct {
    const char *one, *many, *hint;
} exclusive[] = {
    {"mysql-url", "mysql-shards", "the first URL of the list is shard 0"},
    {"mysql-replica-url", "mysql-shard-replicas",
     "the first entry of the list is shard 0's replica"},
};

/* Both settings of such a pair given (in the environment or as flags,
 * not empty) is refused, rather than one silently winning. */
static int check_exclusive(const struct config *cfg, const struct values *vals,
                           char *err, size_t errlen)
{
    unsigned scope = command_scope(cfg->cmd);

    for (size_t i = 0; i < sizeof(exclusive) / sizeof(exclusive[0]); i++) {
        const struct config_setting *a =
            setting_find(exclusive[i].one, strlen(exclusive[i].one));
        const struct config_setting *b =
            setting_find(exclusive[i].many, strlen(exclusive[i].many));
        size_t ai = (size_t)(a - config_settings),
               bi = (size_t)(b - config_settings);
        const char *av = vals->v[ai], *bv = vals->v[bi];

        if (!(a->scope & b->scope & scope) || !av || !av[strspn(av, " ")] ||
            !bv || !bv[strspn(bv, " ")])
            continue;
        return fail(err, errlen, "%s%s and %s%s are both set: set one (%s)",
                    vals->by_flag[ai] ? "--" : "",
                    vals->by_flag[ai] ? a->flag : a->env,
                    vals->by_flag[bi] ? "--" : "",
                    vals->by_flag[bi] ? b->flag : b->env, exclusive[i].hint);
    }
    return 0;
}

/*
 * Each shard's store config, once every setting is in: the service's
 * settings (timeouts, batching, ...) with the shard's own primary and
 * replica. With SECKILL_MYSQL_URL the one shard is http.store's.
 */
static void shards_finish(struct config *cfg)
{
    if (!cfg->shards) {
        cfg->shards = xcalloc(1, sizeof(*cfg->shards));
        cfg->nshards = 1;
    }
    cfg->shards[0].replica = cfg->replica_store;
    for (unsigned i = 0; i < cfg->nshards; i++) {
        struct config_shard *sh = &cfg->shards[i];
        struct store_config own = i ? sh->store : cfg->http.store;

        sh->store = cfg->http.store;
        sh->store.mysql_host = own.mysql_host;
        sh->store.mysql_port = own.mysql_port;
        sh->store.mysql_user = own.mysql_user;
        sh->store.mysql_pass = own.mysql_pass;
        sh->store.mysql_db = own.mysql_db;
        sh->store.replica = NULL;
        if (sh->replica.mysql_host) {
            sh->replica.connect_timeout_ms = cfg->http.store.connect_timeout_ms;
            sh->replica.io_timeout_ms = cfg->http.store.io_timeout_ms;
            sh->replica.read_only = true;
            sh->store.replica = &sh->replica;
        }
    }
    /* The service's store reaches the other shards through http.store
     * (store.h): only it carries the list. */
    if (cfg->nshards > 1) {
        cfg->shard_stores = xcalloc(cfg->nshards, sizeof(*cfg->shard_stores));
        cfg->shard_stores[0] = &cfg->http.store;
        for (unsigned i = 1; i < cfg->nshards; i++)
            cfg->shard_stores[i] = &cfg->shards[i].store;
        cfg->http.store.shards = cfg->shard_stores;
        cfg->http.store.nshards = cfg->nshards;
    }
}

int config_parse(struct config *cfg, int argc, char **argv, char *err,
                 size_t errlen)
{
    struct values vals = {{NULL}, {false}};
    int i, ret;

    memset(cfg, 0, sizeof(*cfg));
    cfg->cmd = CMD_SERVE;
    cfg->http.store.connect_timeout_ms = 1000;
    cfg->http.store.io_timeout_ms = 5000;
    for (size_t s = 0; s < NSETTINGS; s++) {
        const char *env = config_settings[s].env;
        const char *e = env ? getenv(env) : NULL;

        vals.v[s] = e ? e : config_settings[s].def;
    }

    if ((i = parse_command(cfg, argc, argv, err, errlen)) < 0)
        return i;
    if ((ret = parse_flags(cfg, argc, argv, i, &vals, err, errlen)))
        return ret;
    if (cfg->cmd == CMD_HELP)
        return 0;
    if ((ret = check_exclusive(cfg, &vals, err, errlen)))
        return ret;
    if ((ret = apply_all(cfg, &vals, err, errlen)))
        return ret;
    if (cfg->replica_store.mysql_host) {
        struct store_config *r = &cfg->replica_store;

        r->connect_timeout_ms = cfg->http.store.connect_timeout_ms;
        r->io_timeout_ms = cfg->http.store.io_timeout_ms;
        r->read_only = true;
        cfg->http.store.replica = r;
    }
    if (cfg->http.store.mysql_host)
        shards_finish(cfg);

    if (cfg->cmd != CMD_SERVE)
        return 0;
    /* A login code must go somewhere: to the buyer's phone, or (dev mode)
     * back in the answer. */
    if (!cfg->http.dev && !(cfg->http.sms_webhook && cfg->http.sms_webhook[0]))
        return fail(err, errlen,
                    "SECKILL_SMS_WEBHOOK: must be set unless SECKILL_DEV=1 "
                    "(login codes would reach nobody)");
    if (cfg->http.sms_webhook && cfg->http.sms_webhook[0] &&
        !cfg->http.has_sms_secret)
        return fail(err, errlen,
                    "SECKILL_SMS_SECRET: must be set with SECKILL_SMS_WEBHOOK "
                    "(64 hex characters)");
    /* The lock is on the Redis URL unless it has its own. */
    if (!cfg->http.lock_url)
        cfg->http.lock_url = value_of(&vals, "redis-url");
    return 0;
}
