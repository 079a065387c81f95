/*
 * rconn.c - connection pools and lock scripts for the Redis backends (see
 * rconn.h). The pub/sub listener is in psub.c.
 */
#include "lock/rconn.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* After a failed connect, fail fast for this long instead of retrying. */
#define CONNECT_BACKOFF_MS 200

static const char *const scripts[RCONN_NSCRIPTS] = {
    [RCONN_ACQUIRE] =
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
        "return {1, redis.call('incr', KEYS[2])} end "
        "return {0, redis.call('pttl', KEYS[1])}",
    [RCONN_RELEASE] = "if redis.call('get', KEYS[1]) == ARGV[1] then "
                      "redis.call('del', KEYS[1]) "
                      "redis.call('publish', KEYS[2], '1') "
                      "return 1 end return 0",
    [RCONN_RENEW] = "if redis.call('get', KEYS[1]) == ARGV[1] then "
                    "return redis.call('pexpire', KEYS[1], ARGV[2]) end "
                    "return 0",
    [RCONN_FENCE_RAISE] =
        "local v = tonumber(redis.call('get', KEYS[1]) or '0') "
        "local t = tonumber(ARGV[1]) "
        "if t > v then redis.call('set', KEYS[1], ARGV[1]) return t end "
        "return v",
};

/* SHA-1s of the scripts, as learnt from the first SCRIPT LOAD (the same
 * on every server, so one copy per process). Written once under sha_mu,
 * then published by shas_ready and only read. */
static char shas[RCONN_NSCRIPTS][41];
static atomic_int shas_ready;
static pthread_mutex_t sha_mu = PTHREAD_MUTEX_INITIALIZER;

int rconn_errno(const redisContext *rc)
{
    if (!rc)
        return -ENOMEM;
    switch (rc->err) {
    case REDIS_ERR_EOF:
        return -ECONNRESET;
    case REDIS_ERR_IO:
        if (strstr(rc->errstr, "temporarily") || strstr(rc->errstr, "timed"))
            return -ETIMEDOUT;
        if (strstr(rc->errstr, "refused"))
            return -ECONNREFUSED;
        return -ECONNRESET;
    default:
        return -EIO;
    }
}

static struct timeval ms_tv(uint32_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static int setup_ok(redisContext *rc, redisReply *r, const char *what)
{
    int ok = r && r->type != REDIS_REPLY_ERROR;

    if (!ok)
        log_warn("redis lock setup failed", "op=%s err=\"%s\"", what,
                 r ? r->str : rc->errstr);
    freeReplyObject(r);
    return ok;
}

/* Connect, AUTH, SELECT, and load the scripts in one pipelined batch. */
static redisContext *connect_one(const struct lock_url *u, int host,
                                 uint32_t timeout_ms, int *err)
{
    unsigned port = u->hosts[host].port ? u->hosts[host].port : 6379;
    redisContext *rc = redisConnectWithTimeout(u->hosts[host].host, (int)port,
                                               ms_tv(timeout_ms));
    if (!rc || rc->err) {
        *err = rc ? rconn_errno(rc) : -ENOMEM;
        log_warn("redis lock connect failed", "host=%s port=%u err=\"%s\"",
                 u->hosts[host].host, port, rc ? rc->errstr : "alloc");
        goto fail;
    }
    redisSetTimeout(rc, ms_tv(timeout_ms));
    redisEnableKeepAlive(rc);
    *err = -EIO;
    if (u->has_pass &&
        !setup_ok(rc,
                  u->user[0] ? redisCommand(rc, "AUTH %s %s", u->user, u->pass)
                             : redisCommand(rc, "AUTH %s", u->pass),
                  "auth"))
        goto fail;
    if (u->path[0] && strcmp(u->path, "0") != 0 &&
        !setup_ok(rc, redisCommand(rc, "SELECT %s", u->path), "select"))
        goto fail;
    for (int i = 0; i < RCONN_NSCRIPTS; i++)
        redisAppendCommand(rc, "SCRIPT LOAD %s", scripts[i]);
    int loaded = 0;
    pthread_mutex_lock(&sha_mu);
    for (int i = 0; i < RCONN_NSCRIPTS; i++) {
        redisReply *r = NULL;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
            *err = rconn_errno(rc);
            break;
        }
        if (r->type == REDIS_REPLY_STRING && r->len == 40) {
            if (!atomic_load(&shas_ready))
                memcpy(shas[i], r->str, 41);
            loaded++;
        }
        if (!setup_ok(rc, r, "script load"))
            break;
    }
    if (loaded == RCONN_NSCRIPTS)
        atomic_store(&shas_ready, 1);
    pthread_mutex_unlock(&sha_mu);
    if (loaded != RCONN_NSCRIPTS)
        goto fail;
    return rc;
fail:
    if (rc && rc->err)
        *err = rconn_errno(rc);
    redisFree(rc);
    return NULL;
}

void rconn_pool_init(struct rconn_pool *p, const struct lock_url *url, int host,
                     uint32_t timeout_ms)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    p->url = url;
    p->host = host;
    p->timeout_ms = timeout_ms;
}

void rconn_pool_destroy(struct rconn_pool *p)
{
    for (int i = 0; i < p->nidle; i++)
        redisFree(p->idle[i].rc);
    free(p->idle);
    pthread_mutex_destroy(&p->mu);
}

/* Connections idle for less than this are not checked (a poll() per
 * command would cost a third more system calls under load). */
#define IDLE_CHECK_MS 1000

/* A pooled connection the server closed while it sat idle (restart,
 * timeout) is readable: drop it rather than fail a request on it. */
static int idle_dead(const struct rconn_idle *e, int64_t now)
{
    struct pollfd pfd = {.fd = e->rc->fd, .events = POLLIN};
    return now - e->since_ms >= IDLE_CHECK_MS && poll(&pfd, 1, 0) != 0;
}

redisContext *rconn_pool_get(struct rconn_pool *p, int *err)
{
    redisContext *rc = NULL;
    int64_t now = lock__mono_ms();

    pthread_mutex_lock(&p->mu);
    while (p->nidle > 0 && !rc) {
        struct rconn_idle *e = &p->idle[--p->nidle];
        rc = e->rc;
        if (idle_dead(e, now)) {
            redisFree(rc);
            rc = NULL;
        }
    }
    int64_t next_try = p->next_try_ms;
    pthread_mutex_unlock(&p->mu);
    if (rc)
        return rc;
    if (now < next_try) {
        *err = -ECONNREFUSED;
        return NULL;
    }
    rc = connect_one(p->url, p->host, p->timeout_ms, err);
    if (!rc) {
        pthread_mutex_lock(&p->mu);
        p->next_try_ms = lock__mono_ms() + CONNECT_BACKOFF_MS;
        pthread_mutex_unlock(&p->mu);
    }
    return rc;
}

void rconn_pool_put(struct rconn_pool *p, redisContext *rc)
{
    if (!rc)
        return;
    if (rc->err) {
        redisFree(rc);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (p->nidle == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 16;
        p->idle = realloc(p->idle, (size_t)p->cap * sizeof(*p->idle));
        if (!p->idle)
            abort();
    }
    p->idle[p->nidle].rc = rc;
    p->idle[p->nidle++].since_ms = lock__mono_ms();
    pthread_mutex_unlock(&p->mu);
}

/* argv for EVAL[SHA] script nkeys args...: at most 8 keys and args. */
#define SCRIPT_ARGS_MAX 8

static void script_argv(enum rconn_script s, int use_sha, char nk[4], int nkeys,
                        int argc, const char **argv, const size_t *lens,
                        const char **out_v, size_t *out_l, const char *sha)
{
    out_v[0] = use_sha ? "EVALSHA" : "EVAL";
    out_l[0] = strlen(out_v[0]);
    if (use_sha) {
        out_v[1] = sha;
        out_l[1] = 40;
    } else {
        out_v[1] = scripts[s];
        out_l[1] = strlen(scripts[s]);
    }
    snprintf(nk, 4, "%d", nkeys);
    out_v[2] = nk;
    out_l[2] = strlen(nk);
    for (int i = 0; i < argc; i++) {
        out_v[3 + i] = argv[i];
        out_l[3 + i] = lens[i];
    }
}

int rconn_script_append(redisContext *rc, enum rconn_script s, int nkeys,
                        int argc, const char **argv, const size_t *lens)
{
    const char *v[3 + SCRIPT_ARGS_MAX];
    size_t l[3 + SCRIPT_ARGS_MAX];
    char nk[4];
    int ready = atomic_load(&shas_ready);

    script_argv(s, ready, nk, nkeys, argc, argv, lens, v, l,
                ready ? shas[s] : NULL);
    return redisAppendCommandArgv(rc, 3 + argc, v, l) == REDIS_OK
               ? 0
               : rconn_errno(rc);
}

redisReply *rconn_script_reply(redisContext *rc, enum rconn_script s, int nkeys,
                               int argc, const char **argv, const size_t *lens,
                               int *err)
{
    redisReply *r = NULL;

    if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
        *err = rconn_errno(rc);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* The server lost its script cache (SCRIPT FLUSH): EVAL runs the
         * script and caches it again. */
        const char *v[3 + SCRIPT_ARGS_MAX];
        size_t l[3 + SCRIPT_ARGS_MAX];
        char nk[4];

        freeReplyObject(r);
        script_argv(s, 0, nk, nkeys, argc, argv, lens, v, l, NULL);
        r = redisCommandArgv(rc, 3 + argc, v, l);
        if (!r) {
            *err = rconn_errno(rc);
            return NULL;
        }
    }
    if (r->type == REDIS_REPLY_ERROR) {
        log_warn("redis lock script failed", "script=%d reply=\"%.*s\"", (int)s,
                 (int)r->len, r->str);
        freeReplyObject(r);
        *err = -EIO;
        return NULL;
    }
    return r;
}
