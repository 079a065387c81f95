/*
 * rconn.c - connection pools and lock scripts for the Redis backends (see
 * rconn.h). The pub/sub listener is in psub.c.
 */
#include "lock/rconn.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
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
    [RCONN_RELEASE_ONCE] =
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "redis.call('del', KEYS[1]) "
        "redis.call('publish', KEYS[2], '1') "
        "redis.call('set', KEYS[3], ARGV[2], 'PX', ARGV[3]) "
        "return 1 end "
        "if redis.call('get', KEYS[3]) == ARGV[2] then return 1 end "
        "return 0",
    /* Waiters that missed their check-in are dropped first; the queue
     * and the deadlines share one TTL, the longest check-in. */
    [RCONN_FAIR_ACQUIRE] =
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "for _, w in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) "
        "do redis.call('lrem', KEYS[2], 0, w) redis.call('zrem', KEYS[3], w) "
        "end "
        "local head = redis.call('lindex', KEYS[2], 0) "
        "while head and not redis.call('zscore', KEYS[3], head) do "
        "redis.call('lpop', KEYS[2]) head = redis.call('lindex', KEYS[2], 0) "
        "end "
        "if not redis.call('get', KEYS[1]) and "
        "(not head or head == ARGV[1]) then "
        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
        "if head then redis.call('lpop', KEYS[2]) "
        "redis.call('zrem', KEYS[3], ARGV[1]) end "
        "return {1, redis.call('incr', KEYS[4])} end "
        "local ck = tonumber(ARGV[3]) "
        "if ck > 0 then "
        "redis.call('zadd', KEYS[3], now + ck, ARGV[1]) "
        "if not redis.call('lpos', KEYS[2], ARGV[1]) then "
        "redis.call('rpush', KEYS[2], ARGV[1]) end "
        "local keep = math.max(ck, redis.call('pttl', KEYS[2]), "
        "redis.call('pttl', KEYS[3])) "
        "redis.call('pexpire', KEYS[2], keep) "
        "redis.call('pexpire', KEYS[3], keep) end "
        "local p = redis.call('pttl', KEYS[1]) "
        "if p < 0 and head and head ~= ARGV[1] then "
        "p = tonumber(redis.call('zscore', KEYS[3], head)) - now end "
        "return {0, p}",
    [RCONN_FAIR_RELEASE] =
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "redis.call('del', KEYS[1]) "
        "redis.call('set', KEYS[4], ARGV[2], 'PX', ARGV[3]) "
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "for _, w in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) "
        "do redis.call('lrem', KEYS[2], 0, w) redis.call('zrem', KEYS[3], w) "
        "end "
        "local head = redis.call('lindex', KEYS[2], 0) "
        "if head then redis.call('publish', ARGV[4] .. head, '1') end "
        "return 1 end "
        "if redis.call('get', KEYS[4]) == ARGV[2] then return 1 end "
        "return 0",
    [RCONN_FAIR_CANCEL] =
        "redis.call('lrem', KEYS[2], 0, ARGV[1]) "
        "redis.call('zrem', KEYS[3], ARGV[1]) "
        "if redis.call('exists', KEYS[1]) == 0 then "
        "local head = redis.call('lindex', KEYS[2], 0) "
        "if head then redis.call('publish', ARGV[2] .. head, '1') end end "
        "return 1",
    /* A waiting writer keeps new readers out (they would starve it). */
    [RCONN_RW_READ] =
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
        "redis.call('zremrangebyscore', KEYS[3], '-inf', now) "
        "local w = redis.call('get', KEYS[1]) "
        "if w and w ~= ARGV[1] then return {0, redis.call('pttl', KEYS[1])} "
        "end "
        "if not w and redis.call('zcard', KEYS[3]) > 0 then return {0, -1} end "
        "local l = tonumber(ARGV[2]) "
        "redis.call('zadd', KEYS[2], now + l, ARGV[1]) "
        "if redis.call('pttl', KEYS[2]) < l then "
        "redis.call('pexpire', KEYS[2], l) end "
        "return {1, redis.call('incr', KEYS[4])}",
    [RCONN_RW_WRITE] =
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
        "redis.call('zremrangebyscore', KEYS[3], '-inf', now) "
        "redis.call('zrem', KEYS[2], ARGV[1]) "
        "local w = redis.call('get', KEYS[1]) "
        "if (not w or w == ARGV[1]) and redis.call('zcard', KEYS[2]) == 0 then "
        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
        "redis.call('zrem', KEYS[3], ARGV[1]) "
        "return {1, redis.call('incr', KEYS[4])} end "
        "local ck = tonumber(ARGV[3]) "
        "if ck > 0 then "
        "redis.call('zadd', KEYS[3], now + ck, ARGV[1]) "
        "if redis.call('pttl', KEYS[3]) < ck then "
        "redis.call('pexpire', KEYS[3], ck) end end "
        "if w then return {0, redis.call('pttl', KEYS[1])} end "
        "local last = redis.call('zrange', KEYS[2], -1, -1, 'WITHSCORES') "
        "return {0, tonumber(last[2]) - now}",
    [RCONN_RW_CANCEL] = "redis.call('zrem', KEYS[1], ARGV[1]) "
                        "redis.call('publish', KEYS[2], '1') "
                        "return 1",
    [RCONN_SEM_ACQUIRE] =
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
        "if not redis.call('zscore', KEYS[1], ARGV[1]) and "
        "redis.call('zcard', KEYS[1]) >= tonumber(ARGV[3]) then "
        "local first = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES') "
        "return {0, tonumber(first[2]) - now} end "
        "local l = tonumber(ARGV[2]) "
        "redis.call('zadd', KEYS[1], now + l, ARGV[1]) "
        "if redis.call('pttl', KEYS[1]) < l then "
        "redis.call('pexpire', KEYS[1], l) end "
        "return {1, redis.call('incr', KEYS[2])}",
    [RCONN_ZRELEASE] =
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "local s = redis.call('zscore', KEYS[1], ARGV[1]) "
        "if s then redis.call('zrem', KEYS[1], ARGV[1]) end "
        "if s and tonumber(s) > now then "
        "redis.call('set', KEYS[3], ARGV[2], 'PX', ARGV[3]) "
        "redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
        "if ARGV[4] == '1' or redis.call('zcard', KEYS[1]) == 0 then "
        "redis.call('publish', KEYS[2], '1') end "
        "return 1 end "
        "if redis.call('get', KEYS[3]) == ARGV[2] then return 1 end "
        "return 0",
    [RCONN_ZRENEW] =
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "local s = redis.call('zscore', KEYS[1], ARGV[1]) "
        "if s and tonumber(s) > now then "
        "local l = tonumber(ARGV[2]) "
        "redis.call('zadd', KEYS[1], now + l, ARGV[1]) "
        "if redis.call('pttl', KEYS[1]) < l then "
        "redis.call('pexpire', KEYS[1], l) end "
        "return 1 end "
        "return 0",
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

int rconn_url_check(const struct lock_url *u)
{
    size_t n = strlen(u->path);

    if (n > 5 || strspn(u->path, "0123456789") != n) {
        log_warn("lock url invalid", "why=\"redis db must be a number\"");
        return -EINVAL;
    }
    return 0;
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

/* ---- the multiplexed connection ---- */

/* A connection idle for longer than this is checked before reuse (the
 * server may have closed it: restart, timeout). */
#define IDLE_CHECK_MS 1000
#define READ_CHUNK 16384

struct rconn_mux {
    pthread_mutex_t mu; /* guards every field below */
    const struct lock_url *url;
    int host;
    uint32_t timeout_ms;
    redisContext *rc; /* NULL while disconnected; only its fd is used */
    redisReader *reader;
    struct rconn_call *head, *tail; /* sent, waiting for their replies */
    int reading;                    /* a caller is reading for everyone */
    int flushing;                   /* a caller is writing for everyone */
    int broken;                     /* a write failed: reset when idle */
    /* Commands not yet written: callers append (no system call), and
     * whoever finds nobody flushing writes them all (one send() for many
     * commands under load). wbuf is the flusher's spare. */
    char *obuf, *wbuf;
    size_t olen, ocap, wcap;
    int64_t next_try_ms; /* connect back-off */
    int backoff_err;     /* what calls get until then */
    int64_t used_ms;     /* last reply or send */
};

struct rconn_mux *rconn_mux_new(const struct lock_url *url, int host,
                                uint32_t timeout_ms)
{
    struct rconn_mux *m = xcalloc(1, sizeof(*m));

    pthread_mutex_init(&m->mu, NULL);
    m->url = url;
    m->host = host;
    m->timeout_ms = timeout_ms;
    return m;
}

/*
 * With m->mu held: fail every call in flight with err and drop the
 * connection; the next send reconnects. While a caller is in read() or
 * send() on it, the socket is only shut down (which ends that call) and
 * marked broken; that caller closes it when it comes back.
 */
static void mux_reset(struct rconn_mux *m, int err)
{
    while (m->head) {
        struct rconn_call *c = m->head;
        m->head = c->next;
        c->err = err;
        c->done = 1;
        pthread_cond_signal(&c->cv);
    }
    m->tail = NULL;
    if (m->reading || m->flushing) {
        if (m->rc && !m->broken)
            shutdown(m->rc->fd, SHUT_RDWR);
        m->broken = 1;
        return;
    }
    if (m->rc) {
        redisFree(m->rc);
        m->rc = NULL;
    }
    if (m->reader) {
        redisReaderFree(m->reader);
        m->reader = NULL;
    }
    m->olen = 0;
    m->broken = 0;
}

void rconn_mux_free(struct rconn_mux *m)
{
    if (!m)
        return;
    mux_reset(m, -ECONNRESET);
    pthread_mutex_destroy(&m->mu);
    free(m->obuf);
    free(m->wbuf);
    free(m);
}

/* With m->mu held: a usable connection, or an errno. */
static int mux_connect(struct rconn_mux *m)
{
    int64_t now = lock__mono_ms();
    int err;

    if (m->rc && !m->head && !m->reading && !m->flushing &&
        now - m->used_ms >= IDLE_CHECK_MS) {
        struct pollfd pfd = {.fd = m->rc->fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) != 0)
            mux_reset(m, -ECONNRESET);
    }
    if (m->broken && !m->reading && !m->flushing)
        mux_reset(m, -ECONNRESET);
    if (m->broken)
        return -ECONNRESET;
    if (m->rc)
        return 0;
    if (now < m->next_try_ms)
        return m->backoff_err;
    m->rc = connect_one(m->url, m->host, m->timeout_ms, &err);
    if (!m->rc) {
        /* A server that accepts but does not answer costs a whole
         * timeout per try: wait at least that long before the next. */
        uint32_t ms = err == -ETIMEDOUT && m->timeout_ms > CONNECT_BACKOFF_MS
                          ? m->timeout_ms
                          : CONNECT_BACKOFF_MS;
        m->next_try_ms = lock__mono_ms() + ms;
        m->backoff_err = err;
        return err;
    }
    m->reader = redisReaderCreate();
    if (!m->reader)
        abort();
    return 0;
}

/*
 * With m->mu held: append cmd to the output buffer, then, unless another
 * caller is already at it, write the buffer out until it is empty,
 * dropping m->mu around each send(). A failed write marks the connection
 * broken: a half-written command poisons the stream, so whoever reads next
 * fails the calls in flight and resets it.
 */
static int mux_write(struct rconn_mux *m, const char *cmd, size_t len)
{
    int err = 0;

    if (m->olen + len > m->ocap) {
        m->ocap = (m->olen + len) * 2;
        m->obuf = realloc(m->obuf, m->ocap);
        if (!m->obuf)
            abort();
    }
    memcpy(m->obuf + m->olen, cmd, len);
    m->olen += len;
    if (m->flushing)
        return 0;

    m->flushing = 1;
    while (m->olen > 0 && !m->broken) {
        /* Take the pending bytes; appenders fill the spare meanwhile. */
        char *buf = m->obuf;
        size_t n = m->olen, cap = m->ocap;
        m->obuf = m->wbuf;
        m->ocap = m->wcap;
        m->olen = 0;
        int fd = m->rc->fd;
        pthread_mutex_unlock(&m->mu);

        size_t off = 0;
        while (off < n) {
            ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                err = (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                          ? -ETIMEDOUT
                          : -ECONNRESET;
                shutdown(fd, SHUT_RDWR);
                break;
            }
            off += (size_t)w;
        }

        pthread_mutex_lock(&m->mu);
        m->wbuf = buf;
        m->wcap = cap;
        if (err)
            m->broken = 1;
    }
    m->flushing = 0;
    if (m->broken && !m->reading)
        mux_reset(m, err ? err : -ECONNRESET);
    return err;
}

static int mux_send_cmd(struct rconn_mux *m, struct rconn_call *call)
{
    const char *v[3 + RCONN_ARGS_MAX];
    size_t l[3 + RCONN_ARGS_MAX];
    char nk[4], *cmd = NULL;
    int len;

    if (call->script == RCONN_COMMAND) {
        len = redisFormatCommandArgv(&cmd, call->argc, call->argv, call->lens);
    } else {
        int ready = atomic_load(&shas_ready) && !call->eval;
        script_argv(call->script, ready, nk, call->nkeys, call->argc,
                    call->argv, call->lens, v, l,
                    ready ? shas[call->script] : NULL);
        len = redisFormatCommandArgv(&cmd, 3 + call->argc, v, l);
    }
    if (len < 0)
        abort();

    pthread_mutex_lock(&m->mu);
    int err = mux_connect(m);
    if (!err) {
        /* Queued before its bytes go out, so that its reply, however
         * fast, finds it. A write failure fails it with the rest. */
        call->next = NULL;
        call->done = 0;
        call->reply = NULL;
        call->due_ms = lock__mono_ms() + m->timeout_ms;
        if (m->tail)
            m->tail->next = call;
        else
            m->head = call;
        m->tail = call;
        m->used_ms = lock__mono_ms();
        mux_write(m, cmd, (size_t)len);
    }
    pthread_mutex_unlock(&m->mu);
    redisFreeCommand(cmd);
    return err;
}

int rconn_mux_send(struct rconn_mux *m, struct rconn_call *call,
                   enum rconn_script s, int nkeys, int argc, const char **argv,
                   const size_t *lens)
{
    call->script = s;
    call->nkeys = nkeys;
    call->argc = argc;
    call->argv = argv;
    call->lens = lens;
    call->eval = 0;
    call->err = 0;
    pthread_cond_init(&call->cv, NULL);
    int err = mux_send_cmd(m, call);
    if (err)
        pthread_cond_destroy(&call->cv);
    return err;
}

int rconn_mux_send_command(struct rconn_mux *m, struct rconn_call *call,
                           int argc, const char **argv, const size_t *lens)
{
    return rconn_mux_send(m, call, RCONN_COMMAND, 0, argc, argv, lens);
}

/*
 * With m->mu held, as the reader: one read(), then hand every complete
 * reply to its call in order. m->mu is dropped around the read() so that
 * others can keep sending.
 */
static void mux_read(struct rconn_mux *m)
{
    char buf[READ_CHUNK];
    int fd = m->rc->fd;
    redisReader *reader = m->reader;
    /* The oldest call's reply is due timeout_ms after it was sent, so a
     * caller waiting on several servers (RedLock) waits about one timeout
     * in all, not one per server. */
    int64_t left = m->head ? m->head->due_ms - lock__mono_ms() : 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    ssize_t n = -1;
    int rerr = -ETIMEDOUT;

    m->reading = 1;
    pthread_mutex_unlock(&m->mu);
    int ready;
    do
        ready = poll(&pfd, 1, left > 0 ? (int)left : 0);
    while (ready < 0 && errno == EINTR);
    if (ready > 0) {
        do
            n = read(fd, buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        rerr = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? -ETIMEDOUT
                                                                  : -ECONNRESET;
    }
    pthread_mutex_lock(&m->mu);
    m->reading = 0;

    if (n <= 0 || redisReaderFeed(reader, buf, (size_t)n) != REDIS_OK) {
        log_warn("redis lock connection lost", "host=%s err=%d",
                 m->url->hosts[m->host].host, n <= 0 ? rerr : -EIO);
        /* A server that stopped answering is not tried again at once
         * (the release that follows a failed RedLock round would wait
         * for it a second time). */
        if (rerr == -ETIMEDOUT) {
            uint32_t ms = m->timeout_ms > CONNECT_BACKOFF_MS
                              ? m->timeout_ms
                              : CONNECT_BACKOFF_MS;
            m->next_try_ms = lock__mono_ms() + ms;
            m->backoff_err = -ETIMEDOUT;
        }
        mux_reset(m, n <= 0 ? rerr : -EIO);
        return;
    }
    m->used_ms = lock__mono_ms();
    for (;;) {
        void *r = NULL;
        if (redisReaderGetReply(reader, &r) != REDIS_OK) {
            mux_reset(m, -EIO);
            return;
        }
        if (!r)
            break;
        struct rconn_call *c = m->head;
        if (!c) { /* a reply nobody asked for: the stream is lost */
            freeReplyObject(r);
            mux_reset(m, -EIO);
            return;
        }
        m->head = c->next;
        if (!m->head)
            m->tail = NULL;
        c->reply = r;
        c->done = 1;
        pthread_cond_signal(&c->cv);
    }
}

redisReply *rconn_mux_wait(struct rconn_mux *m, struct rconn_call *call,
                           int *err)
{
    redisReply *r;

    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!call->done) {
            if (!m->reading && m->rc)
                mux_read(m);
            else if (!m->reading)
                mux_reset(m, -ECONNRESET); /* cannot happen; never hang */
            else
                pthread_cond_wait(&call->cv, &m->mu);
        }
        /* Leader/follower: pass the reading on to the oldest waiter. */
        if (!m->reading && m->head)
            pthread_cond_signal(&m->head->cv);
        r = call->reply;
        if (call->err || !r || r->type != REDIS_REPLY_ERROR ||
            strncmp(r->str, "NOSCRIPT", 8) != 0 || call->eval)
            break;
        /* The server lost its script cache (SCRIPT FLUSH): EVAL runs the
         * script and caches it again. */
        freeReplyObject(r);
        call->reply = NULL;
        call->eval = 1;
        pthread_mutex_unlock(&m->mu);
        call->err = mux_send_cmd(m, call);
        pthread_mutex_lock(&m->mu);
        if (call->err)
            break;
    }
    pthread_mutex_unlock(&m->mu);
    pthread_cond_destroy(&call->cv);

    *err = call->err;
    r = call->err ? NULL : call->reply;
    if (call->err) {
        freeReplyObject(call->reply);
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        log_warn("redis lock script failed", "script=%d reply=\"%.*s\"",
                 (int)call->script, (int)r->len, r->str);
        freeReplyObject(r);
        *err = -EIO;
        r = NULL;
    } else if (!r) {
        *err = -EIO;
    }
    call->reply = NULL;
    return r;
}
