/*
 * redis.c - connecting to Redis and running Lua scripts (see redis.h).
 */
#include "common/redis.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int redis_server_from_url(const struct url *u, int host,
                          struct redis_server *out, char *err, size_t errlen)
{
    unsigned long db = 0;
    size_t n = strlen(u->path);

    if (host < 0 || host >= u->nhosts) {
        snprintf(err, errlen, "no host %d", host);
        return -EINVAL;
    }
    if (n) {
        char *end;

        if (strspn(u->path, "0123456789") != n || n > 2 ||
            (db = strtoul(u->path, &end, 10)) > REDIS_DB_MAX) {
            snprintf(err, errlen, "the database must be a number 0..%d",
                     REDIS_DB_MAX);
            return -EINVAL;
        }
    }
    if (u->has_user && u->user[0] && !u->has_pass) {
        snprintf(err, errlen, "a user needs a password (user:pass@)");
        return -EINVAL;
    }
    out->host = u->hosts[host].host;
    out->port = u->hosts[host].port ? u->hosts[host].port : 6379;
    out->user = u->user[0] ? u->user : NULL;
    out->pass = u->has_pass ? u->pass : NULL;
    out->db = (unsigned)db;
    return 0;
}

int redis_errno(const redisContext *rc)
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

bool redis_reply_is_auth_error(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "WRONGPASS", 9) == 0 ||
            strncmp(r->str, "NOAUTH", 6) == 0 ||
            strncmp(r->str, "NOPERM", 6) == 0 ||
            strstr(r->str, "invalid password") ||
            strstr(r->str, "without any password configured"));
}

bool redis_reply_is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR &&
           strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static struct timeval ms_tv(unsigned ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/*
 * One setup command's reply: 0 when it is not an error, else the errno
 * (and its text, for the log, in why).
 */
static int setup_reply(redisContext *rc, redisReply *r, char *why,
                       size_t whylen)
{
    int err = 0;

    if (!r) {
        err = redis_errno(rc);
        snprintf(why, whylen, "%s", rc->errstr);
    } else if (r->type == REDIS_REPLY_ERROR) {
        err = redis_reply_is_auth_error(r) ? -EACCES : -EIO;
        snprintf(why, whylen, "%s", r->str);
    }
    freeReplyObject(r);
    return err;
}

/* Log the outcome of a connect: failures once per change, recovery once. */
static void connect_logged(const struct redis_server *s, const char *who,
                           struct redis_connect_log *log, int err,
                           const char *step, const char *why)
{
    if (!err) {
        if (log && log->last_err)
            log_info("redis connection restored", "who=%s host=%s port=%u", who,
                     s->host, s->port);
        if (log)
            log->last_err = 0;
        return;
    }
    if (log && log->last_err == err)
        return;
    if (log)
        log->last_err = err;
    if (err == -EACCES)
        log_error("redis refused the credentials",
                  "who=%s host=%s port=%u user=%s err=\"%s\"", who, s->host,
                  s->port, s->user ? s->user : "default", why);
    else
        log_warn("redis connect failed",
                 "who=%s host=%s port=%u step=%s err=\"%s\"", who, s->host,
                 s->port, step, why);
}

redisContext *redis_connect(const struct redis_server *s, unsigned connect_ms,
                            unsigned io_ms, const char *who,
                            struct redis_connect_log *log, int *err)
{
    char why[160] = "";
    const char *step = "connect";
    redisContext *rc =
        redisConnectWithTimeout(s->host, (int)s->port, ms_tv(connect_ms));

    *err = 0;
    if (!rc || rc->err) {
        *err = rc ? redis_errno(rc) : -ENOMEM;
        snprintf(why, sizeof(why), "%s", rc ? rc->errstr : "out of memory");
        goto fail;
    }
    redisSetTimeout(rc, ms_tv(io_ms));
    redisEnableKeepAlive(rc);
    if (s->pass) {
        step = "auth";
        *err = setup_reply(
            rc,
            s->user ? redisCommand(rc, "AUTH %s %s", s->user, s->pass)
                    : redisCommand(rc, "AUTH %s", s->pass),
            why, sizeof(why));
        if (*err)
            goto fail;
    }
    /* SELECT also tells a server that wants a password we did not send
     * (NOAUTH) from one that takes us: a PING otherwise. */
    step = "select";
    *err = setup_reply(rc,
                       s->db ? redisCommand(rc, "SELECT %u", s->db)
                             : redisCommand(rc, "PING"),
                       why, sizeof(why));
    if (*err)
        goto fail;
    connect_logged(s, who, log, 0, step, why);
    return rc;
fail:
    connect_logged(s, who, log, *err, step, why);
    redisFree(rc);
    return NULL;
}

/* Guards the writing of every script's sha (once each). */
static pthread_mutex_t sha_mu = PTHREAD_MUTEX_INITIALIZER;

int redis_script_load(redisContext *rc, struct redis_script *s)
{
    redisReply *r;
    int err = 0;

    if (atomic_load_explicit(&s->ready, memory_order_acquire))
        return 0;
    r = redisCommand(rc, "SCRIPT LOAD %s", s->src);
    if (!r)
        return redis_errno(rc);
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        log_warn("redis script load failed", "err=\"%s\"",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        err = redis_reply_is_auth_error(r) ? -EACCES : -EIO;
    } else {
        pthread_mutex_lock(&sha_mu);
        if (!atomic_load_explicit(&s->ready, memory_order_relaxed)) {
            memcpy(s->sha, r->str, 41);
            atomic_store_explicit(&s->ready, 1, memory_order_release);
        }
        pthread_mutex_unlock(&sha_mu);
    }
    freeReplyObject(r);
    return err;
}

#define SCRIPT_ARGS_MAX 64

/* The argument vector of EVALSHA/EVAL s (eval: the source). */
static int script_argv(const struct redis_script *s, bool eval, int nkeys,
                       int argc, const char **argv, const size_t *lens,
                       const char **v, size_t *l, char nk[12])
{
    bool sha = !eval && atomic_load_explicit(&s->ready, memory_order_acquire);

    if (argc < 0 || argc > SCRIPT_ARGS_MAX - 3 || nkeys < 0 || nkeys > argc)
        abort(); /* a caller's mistake */
    v[0] = sha ? "EVALSHA" : "EVAL";
    v[1] = sha ? s->sha : s->src;
    snprintf(nk, 12, "%d", nkeys);
    v[2] = nk;
    for (int i = 0; i < argc; i++)
        v[3 + i] = argv[i];
    for (int i = 0; i < 3 + argc; i++)
        l[i] = i >= 3 && lens ? lens[i - 3] : strlen(v[i]);
    return 3 + argc;
}

int redis_script_format(const struct redis_script *s, bool eval, int nkeys,
                        int argc, const char **argv, const size_t *lens,
                        char **cmd)
{
    const char *v[SCRIPT_ARGS_MAX];
    size_t l[SCRIPT_ARGS_MAX];
    char nk[12];
    int n = script_argv(s, eval, nkeys, argc, argv, lens, v, l, nk);
    long long len = redisFormatCommandArgv(cmd, n, v, l);

    if (len < 0)
        abort(); /* only out of memory */
    return (int)len;
}

redisReply *redis_script_run(redisContext *rc, struct redis_script *s,
                             int nkeys, int argc, const char **argv,
                             const size_t *lens, int *err)
{
    const char *v[SCRIPT_ARGS_MAX];
    size_t l[SCRIPT_ARGS_MAX];
    char nk[12];
    redisReply *r;
    int n;

    *err = 0;
    /* Learn the SHA on first use; if that fails, EVAL still works. */
    if (!atomic_load_explicit(&s->ready, memory_order_acquire) &&
        redis_script_load(rc, s) && rc->err) {
        *err = redis_errno(rc);
        return NULL;
    }
    n = script_argv(s, false, nkeys, argc, argv, lens, v, l, nk);
    r = redisCommandArgv(rc, n, v, l);
    if (redis_reply_is_noscript(r)) {
        freeReplyObject(r);
        n = script_argv(s, true, nkeys, argc, argv, lens, v, l, nk);
        r = redisCommandArgv(rc, n, v, l);
    }
    if (!r)
        *err = redis_errno(rc);
    return r;
}
