/*
 * rconn.c - the multiplexed connection and the lock scripts of the Redis
 * backends (see rconn.h). The pub/sub listener is in psub.c.
 */
#include "lock/rconn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"

/* After a failed connect, fail fast for this long instead of retrying. */
#define CONNECT_BACKOFF_MS 200
/* A connection idle for longer than this is checked before reuse (the
 * server may have closed it: restart, timeout). */
#define IDLE_CHECK_MS 1000
#define READ_CHUNK 16384
/* Detached commands kept for the next connection while there is none. */
#define RESEND_MAX 4096

/*
 * fence(k, lease): the next fencing token of the lock whose counter is k
 * (rconn.h): the larger of the counter + 1 and the server's clock in
 * microseconds (exact in a Lua number until the year 2255), kept as long
 * as the lease.
 */
#define FENCE_FN                                                               \
    "local function fence(k, lease) "                                          \
    "local c = redis.call('time') "                                            \
    "local v = math.max((tonumber(redis.call('get', k)) or 0) + 1, "           \
    "tonumber(c[1]) * 1000000 + tonumber(c[2])) "                              \
    "redis.call('set', k, string.format('%.0f', v), 'PX', lease) "             \
    "return v end "

static struct redis_script scripts[RCONN_NSCRIPTS] = {
    [RCONN_ACQUIRE] = REDIS_SCRIPT(
        FENCE_FN
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
        "return {1, fence(KEYS[2], ARGV[2])} end "
        "return {0, redis.call('pttl', KEYS[1])}"),
    [RCONN_TAKE] = REDIS_SCRIPT(
        "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
        "return {1, 0} end "
        "return {0, redis.call('pttl', KEYS[1])}"),
    [RCONN_RELEASE] = REDIS_SCRIPT("if redis.call('get', KEYS[1]) == ARGV[1] "
                                   "then "
                                   "redis.call('del', KEYS[1]) "
                                   "redis.call('publish', KEYS[2], '1') "
                                   "return 1 end return 0"),
    [RCONN_RENEW] = REDIS_SCRIPT("if redis.call('get', KEYS[1]) == ARGV[1] "
                                 "then "
                                 "return redis.call('pexpire', KEYS[1], "
                                 "ARGV[2]) end "
                                 "return 0"),
    [RCONN_FENCE_RAISE] = REDIS_SCRIPT(
        "local v = tonumber(redis.call('get', KEYS[1]) or '0') "
        "local t = tonumber(ARGV[1]) "
        "if t > v then "
        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return t end "
        "return v"),
    [RCONN_PING] = REDIS_SCRIPT("return 1"),
    [RCONN_RELEASE_ONCE] = REDIS_SCRIPT(
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "redis.call('del', KEYS[1]) "
        "redis.call('publish', KEYS[2], '1') "
        "redis.call('set', KEYS[3], ARGV[2], 'PX', ARGV[3]) "
        "return 1 end "
        "if redis.call('get', KEYS[3]) == ARGV[2] then return 1 end "
        "return 0"),
    /* Waiters that missed their check-in are dropped first; the queue
     * and the deadlines share one TTL, the longest check-in. */
    [RCONN_FAIR_ACQUIRE] = REDIS_SCRIPT(
        FENCE_FN
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
        "return {1, fence(KEYS[4], ARGV[2])} end "
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
        "return {0, p}"),
    [RCONN_FAIR_RELEASE] = REDIS_SCRIPT(
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
        "return 0"),
    [RCONN_FAIR_CANCEL] = REDIS_SCRIPT(
        "redis.call('lrem', KEYS[2], 0, ARGV[1]) "
        "redis.call('zrem', KEYS[3], ARGV[1]) "
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "redis.call('del', KEYS[1]) end "
        "if redis.call('exists', KEYS[1]) == 0 then "
        "local head = redis.call('lindex', KEYS[2], 0) "
        "if head then redis.call('publish', ARGV[2] .. head, '1') end end "
        "return 1"),
    /* A waiting writer keeps new readers out (they would starve it). */
    [RCONN_RW_READ] = REDIS_SCRIPT(
        FENCE_FN
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
        "return {1, fence(KEYS[4], ARGV[2])}"),
    [RCONN_RW_WRITE] = REDIS_SCRIPT(
        FENCE_FN
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
        "redis.call('zremrangebyscore', KEYS[3], '-inf', now) "
        "redis.call('zrem', KEYS[2], ARGV[1]) "
        "local w = redis.call('get', KEYS[1]) "
        "if (not w or w == ARGV[1]) and redis.call('zcard', KEYS[2]) == 0 then "
        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
        "redis.call('zrem', KEYS[3], ARGV[1]) "
        "return {1, fence(KEYS[4], ARGV[2])} end "
        "local ck = tonumber(ARGV[3]) "
        "if ck > 0 then "
        "redis.call('zadd', KEYS[3], now + ck, ARGV[1]) "
        "if redis.call('pttl', KEYS[3]) < ck then "
        "redis.call('pexpire', KEYS[3], ck) end end "
        "if w then return {0, redis.call('pttl', KEYS[1])} end "
        "local last = redis.call('zrange', KEYS[2], -1, -1, 'WITHSCORES') "
        "return {0, tonumber(last[2]) - now}"),
    [RCONN_RW_CANCEL] =
        REDIS_SCRIPT("redis.call('zrem', KEYS[2], ARGV[1]) "
                     "if redis.call('get', KEYS[1]) == ARGV[1] then "
                     "redis.call('del', KEYS[1]) end "
                     "redis.call('publish', KEYS[3], '1') "
                     "return 1"),
    [RCONN_SEM_ACQUIRE] = REDIS_SCRIPT(
        FENCE_FN
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
        "return {1, fence(KEYS[2], ARGV[2])}"),
    [RCONN_ZRELEASE] = REDIS_SCRIPT(
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
        "return 0"),
    [RCONN_ZRENEW] = REDIS_SCRIPT(
        "local t = redis.call('time') "
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
        "local s = redis.call('zscore', KEYS[1], ARGV[1]) "
        "if s and tonumber(s) > now then "
        "local l = tonumber(ARGV[2]) "
        "redis.call('zadd', KEYS[1], now + l, ARGV[1]) "
        "if redis.call('pttl', KEYS[1]) < l then "
        "redis.call('pexpire', KEYS[1], l) end "
        "return 1 end "
        "return 0"),
    [RCONN_ZLEAVE] = REDIS_SCRIPT("redis.call('zrem', KEYS[1], ARGV[1]) "
                                  "redis.call('publish', KEYS[2], '1') "
                                  "return 1"),
};

/*
 * The same scripts for a client of a Redis Cluster: their releases publish
 * with SPUBLISH (sharded pub/sub, on the slot of the lock's channel), so
 * that only the node that owns the lock's slot carries the message. Made
 * once from scripts[] by rewriting every call of 'publish'.
 */
static struct redis_script sharded_scripts[RCONN_NSCRIPTS];
static pthread_once_t sharded_once = PTHREAD_ONCE_INIT;

static void sharded_make(void)
{
    static const char from[] = "redis.call('publish'";
    static const char to[] = "redis.call('spublish'";

    for (int i = 0; i < RCONN_NSCRIPTS; i++) {
        const char *src = scripts[i].src;
        size_t n = 0;

        for (const char *p = src; (p = strstr(p, from)); p += sizeof(from) - 1)
            n++;
        char *out = xmalloc(strlen(src) + n + 1), *o = out;
        for (const char *p = src, *q; *p; p = q + sizeof(from) - 1) {
            q = strstr(p, from);
            if (!q) {
                strcpy(o, p);
                o += strlen(p);
                break;
            }
            memcpy(o, p, (size_t)(q - p));
            o += q - p;
            memcpy(o, to, sizeof(to) - 1);
            o += sizeof(to) - 1;
        }
        *o = '\0';
        sharded_scripts[i].src = out; /* kept for the process's life */
    }
}

/* The script table of m: scripts[], or its sharded copy. */
static struct redis_script *script_table(const struct rconn_mux *m);

int rconn_lock_prepare(struct lock *l)
{
    static const char *const kinds[] = {
        [LOCK_KIND_MUTEX] = "",
        [LOCK_KIND_FAIR] = RCONN_FAIR_KEY,
        [LOCK_KIND_READ] = RCONN_RW_KEY,
        [LOCK_KIND_WRITE] = RCONN_RW_KEY,
        [LOCK_KIND_SEMAPHORE] = RCONN_SEM_KEY,
    };
    char probe[LOCK_RKEY_MAX];
    int n = snprintf(l->rkey, sizeof(l->rkey), "%s%s%s", l->c->prefix,
                     kinds[l->kind], l->name);

    if (n < 0 || (size_t)n >= sizeof(l->rkey))
        return -EINVAL;
    l->rkey_len = (size_t)n;
    /* A name that no tag can carry fails here, once, not at each use. */
    if (redis_key_tagged(probe, sizeof(probe), "", "", l->rkey, l->rkey_len,
                         NULL) < 0)
        return -EINVAL;
    return 0;
}

size_t rconn_lock_name(const struct lock *l, char *buf, const char *what,
                       const char *suffix)
{
    /* Cannot fail after rconn_lock_prepare(): LOCK_RKEY_MAX holds the
     * longest. */
    int n = redis_key_tagged(buf, LOCK_RKEY_MAX, l->c->prefix, what, l->rkey,
                             l->rkey_len, suffix);

    return n < 0 ? 0 : (size_t)n;
}

int rconn_url_servers(const struct url *u, struct redis_server *out)
{
    int n = strcmp(u->scheme, REDIS_SENTINEL_SCHEME) == 0 ? 1 : u->nhosts;
    char why[120];

    for (int i = 0; i < n; i++)
        if (redis_server_from_url(u, i, &out[i], why, sizeof(why))) {
            log_warn("lock url invalid", "why=\"%s\"", why);
            while (i-- > 0)
                redis_server_release(&out[i]);
            return -EINVAL;
        }
    return 0;
}

/* ---- the multiplexed connection ---- */

/*
 * One reply owed by the server, in the order the commands were written.
 * A slot whose call is NULL has nobody waiting: a detached command, or a
 * call that gave up on its late reply. Its reply is read and dropped.
 */
struct rconn_slot {
    struct rconn_slot *next;
    struct rconn_call *call;
    int64_t due_ms; /* 0 until written; then the time its reply is late */
    char *cmd;      /* a detached command (re-sent after a reset) */
    size_t len;
    enum rconn_script script;
};

struct rconn_mux {
    pthread_mutex_t mu; /* guards every field below */
    struct redis_server srv;
    struct redis_connect_log log;
    unsigned epoch; /* redis_server_epoch() when rc was made */
    uint32_t timeout_ms;
    int64_t dead_ms;  /* silence that means the connection is gone */
    redisContext *rc; /* NULL while disconnected; only its fd is used */
    redisReader *reader;
    struct rconn_slot *head, *tail; /* replies owed, oldest first */
    struct rconn_slot *unstamped;   /* first slot not written yet */
    struct rconn_slot *resend;      /* detached, for the next connection */
    unsigned nresend;
    int reading;  /* a caller is reading for everyone */
    int flushing; /* a caller is writing for everyone */
    int broken;   /* a write failed or a reset came mid-I/O */
    /* Commands not yet written: callers append (no system call), and
     * whoever finds nobody flushing writes them all (one send() for many
     * commands under load). wbuf is the flusher's spare. */
    char *obuf, *wbuf;
    size_t olen, ocap, wcap;
    int64_t next_try_ms; /* connect back-off */
    int backoff_err;     /* what calls get until then */
    int64_t used_ms;     /* last reply or send */
    int64_t rx_ms;       /* last bytes read, or when replies became owed */
    int sharded;         /* a cluster node: the SPUBLISH scripts */
};

static struct redis_script *script_table(const struct rconn_mux *m)
{
    if (!m->sharded)
        return scripts;
    pthread_once(&sharded_once, sharded_make);
    return sharded_scripts;
}

struct rconn_mux *rconn_mux_new(const struct redis_server *srv,
                                uint32_t timeout_ms, int sharded)
{
    struct rconn_mux *m = xcalloc(1, sizeof(*m));

    m->sharded = sharded;
    pthread_mutex_init(&m->mu, NULL);
    m->srv = *srv;
    m->timeout_ms = timeout_ms;
    m->dead_ms = (int64_t)timeout_ms * RCONN_DEAD_TIMEOUTS;
    if (m->dead_ms < 1000)
        m->dead_ms = 1000;
    return m;
}

static void slot_free(struct rconn_slot *s)
{
    free(s->cmd);
    free(s);
}

/* With m->mu held: append slot s to the reply queue. */
static void queue_push(struct rconn_mux *m, struct rconn_slot *s)
{
    s->next = NULL;
    s->due_ms = 0;
    if (!m->head)
        m->rx_ms = lock__mono_ms(); /* silence counts from now */
    if (m->tail)
        m->tail->next = s;
    else
        m->head = s;
    m->tail = s;
    if (!m->unstamped)
        m->unstamped = s;
}

/* With m->mu held: keep detached slot s for the next connection. */
static void resend_keep(struct rconn_mux *m, struct rconn_slot *s)
{
    if (m->nresend >= RESEND_MAX) {
        log_warn("redis lock command dropped",
                 "host=%s why=\"too many "
                 "queued while disconnected\"",
                 m->srv.host);
        slot_free(s);
        return;
    }
    s->next = m->resend;
    m->resend = s;
    m->nresend++;
}

/*
 * With m->mu held: fail every call in flight with err and drop the
 * connection; the next send reconnects. Detached commands are kept for
 * the next connection. While a caller is in read() or send() on it, the
 * socket is only shut down (which ends that call) and marked broken; that
 * caller closes it when it comes back.
 */
static void mux_reset(struct rconn_mux *m, int err)
{
    while (m->head) {
        struct rconn_slot *s = m->head;

        m->head = s->next;
        if (s->call) {
            s->call->err = err;
            s->call->done = 1;
            s->call->slot = NULL;
            pthread_cond_signal(&s->call->cv);
            slot_free(s);
        } else if (s->cmd) {
            resend_keep(m, s);
        } else {
            slot_free(s);
        }
    }
    m->tail = m->unstamped = NULL;
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
    while (m->resend) {
        struct rconn_slot *s = m->resend;
        m->resend = s->next;
        slot_free(s);
    }
    pthread_mutex_destroy(&m->mu);
    free(m->obuf);
    free(m->wbuf);
    free(m);
}

/* With m->mu held: add len bytes of cmd to the output buffer. */
static void obuf_append(struct rconn_mux *m, const char *cmd, size_t len)
{
    if (m->olen + len > m->ocap) {
        m->ocap = (m->olen + len) * 2;
        m->obuf = xrealloc(m->obuf, m->ocap);
    }
    memcpy(m->obuf + m->olen, cmd, len);
    m->olen += len;
}

/* With m->mu held: the first slot somebody waits for, or NULL. */
static struct rconn_slot *first_waited(struct rconn_mux *m)
{
    struct rconn_slot *s = m->head;

    while (s && !s->call)
        s = s->next;
    return s;
}

/* Connect, log in, and learn the scripts' SHAs (once per process). */
static redisContext *connect_one(struct rconn_mux *m, int *err)
{
    redisContext *rc = redis_connect(&m->srv, m->timeout_ms, m->timeout_ms,
                                     "lock", &m->log, err);

    if (!rc)
        return NULL;
    for (int i = 0; i < RCONN_NSCRIPTS; i++) {
        *err = redis_script_load(rc, &script_table(m)[i]);
        if (*err) {
            redisFree(rc);
            return NULL;
        }
    }
    return rc;
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
    /* Replies owed for a long time to callers who gave up on them, and
     * nobody read since: the server is gone, start afresh. */
    if (m->rc && m->head && !first_waited(m) && !m->reading &&
        now - m->rx_ms >= m->dead_ms)
        mux_reset(m, -ETIMEDOUT);
    /* The sentinels named a new master: the calls in flight fail (their
     * outcome is unknown, as after any reset) and the next connects
     * there. */
    if (m->rc && redis_server_epoch(&m->srv) != m->epoch) {
        mux_reset(m, -ECONNRESET);
        m->next_try_ms = 0;
    }
    if (m->broken && !m->reading && !m->flushing)
        mux_reset(m, -ECONNRESET);
    if (m->broken)
        return -ECONNRESET;
    if (m->rc)
        return 0;
    if (now < m->next_try_ms)
        return m->backoff_err;
    m->epoch = redis_server_epoch(&m->srv);
    m->rc = connect_one(m, &err);
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
    m->used_ms = lock__mono_ms();
    /* Undo commands kept while disconnected go first. */
    while (m->resend) {
        struct rconn_slot *s = m->resend;

        m->resend = s->next;
        m->nresend--;
        queue_push(m, s);
        obuf_append(m, s->cmd, s->len);
    }
    return 0;
}

/*
 * With m->mu held: write the output buffer out until it is empty, unless
 * another caller is already at it, dropping m->mu around each send().
 * The replies of what is written become due a timeout after it is taken.
 * A failed write marks the connection broken: a half-written command
 * poisons the stream, so whoever reads next fails the calls in flight and
 * resets it.
 */
static void mux_flush(struct rconn_mux *m)
{
    int err = 0;

    if (m->flushing)
        return;
    m->flushing = 1;
    while (m->olen > 0 && !m->broken) {
        /* Take the pending bytes; appenders fill the spare meanwhile. */
        char *buf = m->obuf;
        size_t n = m->olen, cap = m->ocap;
        int64_t due = lock__mono_ms() + m->timeout_ms;

        for (struct rconn_slot *s = m->unstamped; s; s = s->next)
            s->due_ms = due;
        m->unstamped = NULL;
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
    m->used_ms = lock__mono_ms();
    if (m->broken && !m->reading)
        mux_reset(m, err ? err : -ECONNRESET);
}

static int mux_send_cmd(struct rconn_mux *m, struct rconn_call *call)
{
    char *cmd = NULL;
    int len;
    struct rconn_slot *s = xcalloc(1, sizeof(*s));

    if (call->script == RCONN_COMMAND) {
        len = redisFormatCommandArgv(&cmd, call->argc, call->argv, call->lens);
        if (len < 0)
            abort(); /* only out of memory */
    } else {
        len = redis_script_format(&script_table(m)[call->script], call->eval,
                                  call->nkeys, call->argc, call->argv,
                                  call->lens, &cmd);
    }

    pthread_mutex_lock(&m->mu);
    int err = mux_connect(m);
    if (!err) {
        /* Queued before its bytes go out, so that its reply, however
         * fast, finds it. A write failure fails it with the rest. */
        call->done = 0;
        call->reply = NULL;
        call->slot = s;
        s->call = call;
        s->script = call->script;
        if (call->asking) {
            /* ASKING holds for the next command only: written right in
             * front of it, in the same critical section. Its +OK is
             * dropped. */
            struct rconn_slot *a = xcalloc(1, sizeof(*a));
            a->script = RCONN_COMMAND;
            queue_push(m, a);
            obuf_append(m, "*1\r\n$6\r\nASKING\r\n", 16);
        }
        queue_push(m, s);
        obuf_append(m, cmd, (size_t)len);
        mux_flush(m);
        s = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    free(s);
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
    call->slot = NULL;
    call->mux = m;
    call->redirect = NULL;
    call->asking = 0;
    pthread_cond_init(&call->cv, NULL);
    int err = mux_send_cmd(m, call);
    if (err)
        pthread_cond_destroy(&call->cv);
    return err;
}

int rconn_mux_resend(struct rconn_mux *m, struct rconn_call *call, int asking)
{
    struct redis_cluster_redirect *rd = call->redirect;
    int err;

    call->eval = 0;
    call->err = 0;
    call->slot = NULL;
    call->mux = m;
    call->redirect = rd;
    call->asking = asking;
    pthread_cond_init(&call->cv, NULL);
    err = mux_send_cmd(m, call);
    if (err)
        pthread_cond_destroy(&call->cv);
    return err;
}

int rconn_mux_send_command(struct rconn_mux *m, struct rconn_call *call,
                           int argc, const char **argv, const size_t *lens)
{
    return rconn_mux_send(m, call, RCONN_COMMAND, 0, argc, argv, lens);
}

void rconn_mux_send_detached(struct rconn_mux *m, enum rconn_script script,
                             int nkeys, int argc, const char **argv,
                             const size_t *lens)
{
    struct rconn_slot *s = xcalloc(1, sizeof(*s));
    char *cmd = NULL;
    /* EVAL, not EVALSHA: nobody is there to answer a NOSCRIPT. */
    int len = redis_script_format(&script_table(m)[script], true, nkeys, argc,
                                  argv, lens, &cmd);

    s->cmd = xmalloc((size_t)len);
    memcpy(s->cmd, cmd, (size_t)len);
    s->len = (size_t)len;
    s->script = script;
    redisFreeCommand(cmd);

    pthread_mutex_lock(&m->mu);
    if (mux_connect(m) == 0) {
        queue_push(m, s);
        obuf_append(m, s->cmd, s->len);
        mux_flush(m);
    } else {
        resend_keep(m, s);
    }
    pthread_mutex_unlock(&m->mu);
}

/* With m->mu held: fail the calls whose replies are late by now. Replies
 * come in order, so they are the oldest ones. */
static void give_up_late(struct rconn_mux *m, int64_t now)
{
    for (struct rconn_slot *s = m->head; s && s->due_ms; s = s->next) {
        if (!s->call)
            continue;
        if (s->due_ms > now)
            break;
        s->call->err = -ETIMEDOUT;
        s->call->done = 1;
        s->call->slot = NULL;
        pthread_cond_signal(&s->call->cv);
        s->call = NULL;
    }
}

/* With m->mu held: hand every complete reply to its slot, in order.
 * Returns 0, or -EIO when the stream makes no sense any more. */
static int deliver(struct rconn_mux *m)
{
    for (;;) {
        void *r = NULL;

        if (redisReaderGetReply(m->reader, &r) != REDIS_OK)
            return -EIO;
        if (!r)
            return 0;
        struct rconn_slot *s = m->head;
        if (!s) { /* a reply nobody asked for: the stream is lost */
            freeReplyObject(r);
            return -EIO;
        }
        m->head = s->next;
        if (!m->head)
            m->tail = NULL;
        if (s->call) {
            s->call->reply = r;
            s->call->done = 1;
            s->call->slot = NULL;
            pthread_cond_signal(&s->call->cv);
        } else {
            redisReply *rr = r;
            if (rr->type == REDIS_REPLY_ERROR && s->cmd)
                log_warn("redis lock command failed",
                         "host=%s script=%d reply=\"%.*s\"", m->srv.host,
                         (int)s->script, (int)rr->len, rr->str);
            freeReplyObject(r);
        }
        slot_free(s);
    }
}

/*
 * With m->mu held, as the reader: wait for bytes until the oldest waited
 * call's reply is late (or the connection has been silent too long),
 * then hand out what arrived. m->mu is dropped around poll() and read()
 * so that others can keep sending.
 */
static void mux_read(struct rconn_mux *m)
{
    char buf[READ_CHUNK];
    int fd = m->rc->fd;
    redisReader *reader = m->reader;
    struct rconn_slot *w = first_waited(m);
    int64_t now = lock__mono_ms();
    int64_t until = m->rx_ms + m->dead_ms;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    ssize_t n = 0;
    int ready, rerr = 0;

    if (w) {
        int64_t due = w->due_ms ? w->due_ms : now + m->timeout_ms;
        if (due < until)
            until = due;
    }
    m->reading = 1;
    pthread_mutex_unlock(&m->mu);
    do
        ready = poll(&pfd, 1, until > now ? (int)(until - now) : 0);
    while (ready < 0 && errno == EINTR);
    if (ready > 0) {
        do
            n = read(fd, buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        if (n == 0)
            rerr = -ECONNRESET;
        else if (n < 0)
            rerr = errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -ECONNRESET;
    }
    pthread_mutex_lock(&m->mu);
    m->reading = 0;
    now = lock__mono_ms();

    if (m->broken) {
        mux_reset(m, -ECONNRESET);
        return;
    }
    if (rerr) {
        log_warn("redis lock connection lost", "host=%s port=%u err=%d",
                 m->srv.host, m->srv.port, rerr);
        mux_reset(m, rerr);
        return;
    }
    if (n > 0) {
        m->rx_ms = now;
        m->used_ms = now;
        if (redisReaderFeed(reader, buf, (size_t)n) != REDIS_OK || deliver(m)) {
            log_warn("redis lock connection lost", "host=%s err=\"protocol\"",
                     m->srv.host);
            mux_reset(m, -EIO);
            return;
        }
    }
    if (m->head && now - m->rx_ms >= m->dead_ms) {
        log_warn("redis lock connection silent", "host=%s port=%u ms=%lld",
                 m->srv.host, m->srv.port, (long long)(now - m->rx_ms));
        mux_reset(m, -ETIMEDOUT);
        return;
    }
    give_up_late(m, now);
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
        if (!m->reading) {
            struct rconn_slot *w = first_waited(m);
            if (w)
                pthread_cond_signal(&w->call->cv);
        }
        r = call->reply;
        if (call->err || call->eval || !redis_reply_is_noscript(r))
            break;
        /* The server lost its script cache (SCRIPT FLUSH, a restart):
         * EVAL runs the script and caches it again. */
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
    } else if (r && r->type == REDIS_REPLY_ERROR && call->redirect &&
               redis_cluster_redirect_parse(r->str, call->redirect) !=
                   REDIS_CLUSTER_NOT_REDIRECT) {
        /* The cluster layer follows it (rcluster.c). */
        *err = -EAGAIN;
        freeReplyObject(r);
        r = NULL;
    } else if (r && r->type == REDIS_REPLY_ERROR) {
        log_warn("redis lock script failed", "script=%d reply=\"%.*s\"",
                 (int)call->script, (int)r->len, r->str);
        *err = redis_reply_is_auth_error(r) ? -EACCES : -EIO;
        freeReplyObject(r);
        r = NULL;
    } else if (!r) {
        *err = -EIO;
    }
    call->reply = NULL;
    return r;
}

int rconn_mux_ping(struct rconn_mux *m)
{
    struct rconn_call call;
    redisReply *r;
    int err = rconn_mux_send(m, &call, RCONN_PING, 0, 0, NULL, NULL);

    if (err)
        return err;
    r = rconn_mux_wait(m, &call, &err);
    freeReplyObject(r);
    return err;
}
