/*
 * redis_conn.c - connecting to Redis and running Lua scripts (see redis.h).
 */
#include "common/redis.h"
#include "common/redis_slot.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

/* Sentinels are asked again this often by the watcher, in case it
 * missed a +switch-master message (it subscribes on one sentinel). */
#define SENTINEL_CHECK_MS 5000
/* The watcher waits this long between tries while no sentinel answers. */
#define SENTINEL_RETRY_MS 500

struct redis_sentinel {
    pthread_mutex_t mu; /* guards the fields below but epoch */
    char master[URL_SEG_LEN];
    struct {
        char host[256];
        unsigned port;
    } hosts[URL_HOSTS_MAX];
    int nhosts;
    int first;           /* the sentinel that answered last: asked first */
    char *user, *pass;   /* for sentinels that want them; NULL: none */
    char addr[256];      /* the master as last seen; "" before */
    unsigned addr_port;  /* with addr */
    atomic_uint epoch;   /* changes of addr seen */
    atomic_int replicas; /* the master's replicas they know; -1 before */
    unsigned connect_ms; /* the watcher's timeouts: its starter's */
    unsigned io_ms;
    bool watching; /* the watcher thread runs */
    bool stop;     /* redis_server_release() asks it to end */
    int wake[2];   /* a pipe: wakes the watcher out of poll() */
    pthread_t thread;
};

/* A database number 0..REDIS_DB_MAX from a path or segment ("": 0). */
static int parse_db(const char *s, unsigned *db, char *err, size_t errlen)
{
    size_t n = strlen(s);
    unsigned long v = 0;

    if (n) {
        char *end;

        if (strspn(s, "0123456789") != n || n > 2 ||
            (v = strtoul(s, &end, 10)) > REDIS_DB_MAX) {
            snprintf(err, errlen, "the database must be a number 0..%d",
                     REDIS_DB_MAX);
            return -EINVAL;
        }
    }
    *db = (unsigned)v;
    return 0;
}

/* A master name as Sentinel takes it: one word of printable ASCII. */
static bool master_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s > '~')
            return false;
    return true;
}

static struct redis_sentinel *sentinel_new(const struct url *u,
                                           const char *master)
{
    struct redis_sentinel *sn = xcalloc(1, sizeof(*sn));

    pthread_mutex_init(&sn->mu, NULL);
    snprintf(sn->master, sizeof(sn->master), "%s", master);
    for (int i = 0; i < u->nhosts; i++) {
        snprintf(sn->hosts[i].host, sizeof(sn->hosts[i].host), "%s",
                 u->hosts[i].host);
        sn->hosts[i].port =
            u->hosts[i].port ? u->hosts[i].port : REDIS_SENTINEL_PORT;
    }
    sn->nhosts = u->nhosts;
    sn->user = u->user[0] ? xstrdup(u->user) : NULL;
    sn->pass = u->has_pass ? xstrdup(u->pass) : NULL;
    sn->wake[0] = sn->wake[1] = -1;
    atomic_init(&sn->replicas, -1);
    return sn;
}

int redis_server_from_url(const struct url *u, int host,
                          struct redis_server *out, char *err, size_t errlen)
{
    bool sentinel = strcmp(u->scheme, REDIS_SENTINEL_SCHEME) == 0;
    unsigned db = 0;

    memset(out, 0, sizeof(*out));
    if (host < 0 || host >= u->nhosts || (sentinel && host != 0)) {
        snprintf(err, errlen, "no host %d", host);
        return -EINVAL;
    }
    if (u->has_user && u->user[0] && !u->has_pass) {
        snprintf(err, errlen, "a user needs a password (user:pass@)");
        return -EINVAL;
    }
    out->user = u->user[0] ? u->user : NULL;
    out->pass = u->has_pass ? u->pass : NULL;
    if (strcmp(u->scheme, REDIS_CLUSTER_SCHEME) == 0 && u->path[0]) {
        snprintf(err, errlen,
                 "a Redis Cluster has only database 0: "
                 "redis-cluster://h1:p1,h2:p2,... takes no /db");
        return -EINVAL;
    }
    if (!sentinel) {
        if (parse_db(u->path, &db, err, errlen))
            return -EINVAL;
        out->host = u->hosts[host].host;
        out->port = u->hosts[host].port ? u->hosts[host].port : 6379;
        out->db = db;
        return 0;
    }
    /* "<master>" or "<master>/<db>", each segment decoded on its own. */
    if (u->nsegs < 1 || u->nsegs > 2 || !master_name_ok(u->segs[0])) {
        snprintf(err, errlen,
                 "expected the master's name as the path: "
                 "redis-sentinel://h1:p1,h2:p2/<master>[/db]");
        return -EINVAL;
    }
    if (u->nsegs == 2 && parse_db(u->segs[1], &db, err, errlen))
        return -EINVAL;
    out->sentinel = sentinel_new(u, u->segs[0]);
    out->host = u->segs[0];
    out->port = 0;
    out->db = db;
    return 0;
}

unsigned redis_server_epoch(const struct redis_server *s)
{
    return s && s->sentinel ? atomic_load(&s->sentinel->epoch) : 0;
}

int redis_server_replicas(const struct redis_server *s)
{
    return s && s->sentinel ? atomic_load(&s->sentinel->replicas) : -1;
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

/* ---- Sentinel ---- */

/*
 * Send a command with one argument to a sentinel; when it asks for a
 * password (NOAUTH), log in with the URL's credentials and send it again.
 * Returns the reply (the caller frees it), or NULL when the connection
 * failed.
 */
static redisReply *sentinel_command(struct redis_sentinel *sn, redisContext *rc,
                                    const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(rc, fmt, arg);

    if (r && redis_reply_is_auth_error(r) && sn->pass) {
        freeReplyObject(r);
        r = sn->user ? redisCommand(rc, "AUTH %s %s", sn->user, sn->pass)
                     : redisCommand(rc, "AUTH %s", sn->pass);
        if (!r || r->type == REDIS_REPLY_ERROR)
            return r;
        freeReplyObject(r);
        r = redisCommand(rc, fmt, arg);
    }
    return r;
}

/* Connect to sentinel i. NULL with *err and why set when that failed. */
static redisContext *sentinel_dial(struct redis_sentinel *sn, int i,
                                   unsigned connect_ms, unsigned io_ms,
                                   int *err, char *why, size_t whylen)
{
    redisContext *rc = redisConnectWithTimeout(
        sn->hosts[i].host, (int)sn->hosts[i].port, ms_tv(connect_ms));

    if (!rc || rc->err) {
        *err = rc ? redis_errno(rc) : -ENOMEM;
        snprintf(why, whylen, "sentinel %s:%u: %s", sn->hosts[i].host,
                 sn->hosts[i].port, rc ? rc->errstr : "out of memory");
        redisFree(rc);
        return NULL;
    }
    redisSetTimeout(rc, ms_tv(io_ms));
    redisEnableKeepAlive(rc);
    return rc;
}

/*
 * The master is at host:port, as sentinel i (-1: a +switch-master
 * message) says: remember it, ask that sentinel first from now on, and
 * bump the epoch when the address differs from the one seen before.
 */
static void sentinel_note(struct redis_sentinel *sn, int i, const char *host,
                          unsigned port)
{
    char old[sizeof(sn->addr)];
    unsigned old_port;
    bool changed;

    pthread_mutex_lock(&sn->mu);
    if (i >= 0)
        sn->first = i;
    changed =
        sn->addr[0] && (strcmp(sn->addr, host) != 0 || sn->addr_port != port);
    memcpy(old, sn->addr, sizeof(old));
    old_port = sn->addr_port;
    snprintf(sn->addr, sizeof(sn->addr), "%s", host);
    sn->addr_port = port;
    if (changed)
        atomic_fetch_add(&sn->epoch, 1);
    pthread_mutex_unlock(&sn->mu);
    if (changed)
        log_warn("redis master changed",
                 "master=%s from=%s:%u to=%s:%u epoch=%u", sn->master, old,
                 old_port, host, port, atomic_load(&sn->epoch));
}

/*
 * Ask sentinel rc how many replicas of the master it knows, whatever
 * their state: one that is down or still loading its first copy may come
 * back and be promoted (Sentinel promotes a replica that has not synced
 * yet), so whoever wants a write to outlive a failover counts them all.
 * Kept as it was when the sentinel cannot say.
 */
static void sentinel_count_replicas(struct redis_sentinel *sn, redisContext *rc)
{
    redisReply *r =
        sentinel_command(sn, rc, "SENTINEL REPLICAS %s", sn->master);

    if (r && r->type == REDIS_REPLY_ARRAY)
        atomic_store(&sn->replicas, (int)r->elements);
    freeReplyObject(r);
}

/*
 * Ask the sentinels, the one that answered last first, for the master's
 * address. Returns 0 with host (cap bytes) and *port set, or the errno of
 * the last failure with why set: -ECONNREFUSED and the like when no
 * sentinel answered or none knows the master, -EACCES when they refused
 * the credentials.
 */
static int sentinel_resolve(struct redis_sentinel *sn, unsigned connect_ms,
                            unsigned io_ms, char *host, size_t cap,
                            unsigned *port, char *why, size_t whylen)
{
    int first, err = -ECONNREFUSED;

    pthread_mutex_lock(&sn->mu);
    first = sn->first;
    pthread_mutex_unlock(&sn->mu);
    for (int k = 0; k < sn->nhosts; k++) {
        int i = (first + k) % sn->nhosts;
        redisContext *rc =
            sentinel_dial(sn, i, connect_ms, io_ms, &err, why, whylen);
        redisReply *r;
        bool ok = false;

        if (!rc)
            continue;
        r = sentinel_command(sn, rc, "SENTINEL get-master-addr-by-name %s",
                             sn->master);
        if (!r) {
            err = redis_errno(rc);
            snprintf(why, whylen, "sentinel %s:%u: %s", sn->hosts[i].host,
                     sn->hosts[i].port, rc->errstr);
        } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                   r->element[0]->type == REDIS_REPLY_STRING &&
                   r->element[1]->type == REDIS_REPLY_STRING &&
                   r->element[0]->len < cap) {
            unsigned long p = strtoul(r->element[1]->str, NULL, 10);

            if (p > 0 && p <= 65535) {
                memcpy(host, r->element[0]->str, r->element[0]->len + 1);
                *port = (unsigned)p;
                ok = true;
            }
        } else if (r->type == REDIS_REPLY_ERROR) {
            err = redis_reply_is_auth_error(r) ? -EACCES : -EIO;
            snprintf(why, whylen, "sentinel %s:%u: %s", sn->hosts[i].host,
                     sn->hosts[i].port, r->str);
        } else {
            err = -ECONNREFUSED;
            snprintf(why, whylen, "sentinel %s:%u knows no master \"%s\"",
                     sn->hosts[i].host, sn->hosts[i].port, sn->master);
        }
        freeReplyObject(r);
        if (ok)
            sentinel_count_replicas(sn, rc);
        redisFree(rc);
        if (ok) {
            sentinel_note(sn, i, host, *port);
            return 0;
        }
    }
    return err;
}

/* With the watcher's wake pipe: sleep ms, or less when asked to stop. */
static void watch_sleep(struct redis_sentinel *sn, int ms)
{
    struct pollfd p = {.fd = sn->wake[0], .events = POLLIN};

    while (poll(&p, 1, ms) < 0 && errno == EINTR) {
    }
}

static bool watch_stopping(struct redis_sentinel *sn)
{
    bool stop;

    pthread_mutex_lock(&sn->mu);
    stop = sn->stop;
    pthread_mutex_unlock(&sn->mu);
    return stop;
}

/* A connection to some sentinel subscribed to +switch-master, or NULL. */
static redisContext *watch_subscribe(struct redis_sentinel *sn)
{
    char why[160];
    int first, err;

    pthread_mutex_lock(&sn->mu);
    first = sn->first;
    pthread_mutex_unlock(&sn->mu);
    for (int k = 0; k < sn->nhosts; k++) {
        int i = (first + k) % sn->nhosts;
        redisContext *rc = sentinel_dial(sn, i, sn->connect_ms, sn->io_ms, &err,
                                         why, sizeof(why));
        redisReply *r;
        bool ok;

        if (!rc)
            continue;
        r = sentinel_command(sn, rc, "SUBSCRIBE %s", "+switch-master");
        ok = r && r->type == REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (ok)
            return rc;
        redisFree(rc);
    }
    return NULL;
}

/* One pub/sub reply: a +switch-master of our master moves it. */
static void watch_message(struct redis_sentinel *sn, const redisReply *r)
{
    char name[URL_SEG_LEN], host[256];
    unsigned port;

    /* "message" "+switch-master" "<name> <old ip> <old port> <ip> <port>" */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "message") != 0 ||
        r->element[2]->type != REDIS_REPLY_STRING ||
        sscanf(r->element[2]->str, "%127s %*s %*s %255s %u", name, host,
               &port) != 3 ||
        strcmp(name, sn->master) != 0 || port == 0 || port > 65535)
        return;
    log_info("redis sentinel announced a new master", "master=%s to=%s:%u",
             name, host, port);
    sentinel_note(sn, -1, host, port);
}

static void *watch_main(void *arg)
{
    struct redis_sentinel *sn = arg;
    char host[256], why[160];
    unsigned port;

    while (!watch_stopping(sn)) {
        redisContext *rc = watch_subscribe(sn);

        if (!rc) {
            watch_sleep(sn, SENTINEL_RETRY_MS);
            continue;
        }
        /* Subscribed first, so nothing is missed after this look. */
        sentinel_resolve(sn, sn->connect_ms, sn->io_ms, host, sizeof(host),
                         &port, why, sizeof(why));
        for (;;) {
            struct pollfd p[2] = {{.fd = rc->fd, .events = POLLIN},
                                  {.fd = sn->wake[0], .events = POLLIN}};
            void *reply = NULL;
            int n;

            while (redisGetReplyFromReader(rc, &reply) == REDIS_OK && reply) {
                watch_message(sn, reply);
                freeReplyObject(reply);
                reply = NULL;
            }
            if (rc->err)
                break;
            n = poll(p, 2, SENTINEL_CHECK_MS);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 || p[1].revents)
                break;
            if (n == 0) {
                sentinel_resolve(sn, sn->connect_ms, sn->io_ms, host,
                                 sizeof(host), &port, why, sizeof(why));
                continue;
            }
            if (redisBufferRead(rc) != REDIS_OK)
                break;
        }
        redisFree(rc);
    }
    return NULL;
}

/* Start the watcher of sn once, with the timeouts of its first user. */
static void watch_start(struct redis_sentinel *sn, unsigned connect_ms,
                        unsigned io_ms)
{
    pthread_mutex_lock(&sn->mu);
    if (!sn->watching && !sn->stop) {
        sn->connect_ms = connect_ms;
        sn->io_ms = io_ms;
        if (pipe2(sn->wake, O_CLOEXEC | O_NONBLOCK) != 0 ||
            pthread_create(&sn->thread, NULL, watch_main, sn) != 0) {
            log_error("redis sentinel watcher start failed", "errno=%d", errno);
            abort();
        }
        sn->watching = true;
    }
    pthread_mutex_unlock(&sn->mu);
}

void redis_server_release(struct redis_server *s)
{
    struct redis_sentinel *sn = s ? s->sentinel : NULL;
    bool watching;

    if (!sn)
        return;
    s->sentinel = NULL;
    pthread_mutex_lock(&sn->mu);
    sn->stop = true;
    watching = sn->watching;
    pthread_mutex_unlock(&sn->mu);
    if (watching) {
        char b = 1;
        ssize_t n = write(sn->wake[1], &b, 1);

        (void)n; /* a full pipe wakes it as well */
        pthread_join(sn->thread, NULL);
        close(sn->wake[0]);
        close(sn->wake[1]);
    }
    pthread_mutex_destroy(&sn->mu);
    free(sn->user);
    free(sn->pass);
    free(sn);
}

/* ---- connecting ---- */

redisContext *redis_connect(const struct redis_server *s, unsigned connect_ms,
                            unsigned io_ms, const char *who,
                            struct redis_connect_log *log, int *err)
{
    char why[160] = "", host[256];
    const char *step = "connect";
    struct redis_server at = *s;
    redisContext *rc = NULL;

    *err = 0;
    if (s->sentinel) {
        watch_start(s->sentinel, connect_ms, io_ms);
        step = "sentinel";
        *err = sentinel_resolve(s->sentinel, connect_ms, io_ms, host,
                                sizeof(host), &at.port, why, sizeof(why));
        if (*err)
            goto fail;
        at.host = host;
        step = "connect";
    }
    rc = redisConnectWithTimeout(at.host, (int)at.port, ms_tv(connect_ms));
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
    if (s->sentinel) {
        /* The sentinels may not have noticed a demotion yet, or the
         * address may be an old master back as a replica: never write
         * to a server that does not call itself the master. */
        redisReply *r = redisCommand(rc, "ROLE");

        step = "role";
        if (!r) {
            *err = redis_errno(rc);
            snprintf(why, sizeof(why), "%s", rc->errstr);
        } else if (r->type == REDIS_REPLY_ERROR) {
            *err = redis_reply_is_auth_error(r) ? -EACCES : -EIO;
            snprintf(why, sizeof(why), "%s", r->str);
        } else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
                   r->element[0]->type != REDIS_REPLY_STRING ||
                   strcmp(r->element[0]->str, "master") != 0) {
            *err = -ECONNREFUSED;
            snprintf(why, sizeof(why), "the server is not a master (%s)",
                     r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                             r->element[0]->type == REDIS_REPLY_STRING
                         ? r->element[0]->str
                         : "no role");
        }
        freeReplyObject(r);
        if (*err)
            goto fail;
    }
    connect_logged(&at, who, log, 0, step, why);
    return rc;
fail:
    connect_logged(&at, who, log, *err, step, why);
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

#define SCRIPT_ARGS_MAX (REDIS_SCRIPT_ARGS_MAX + 3)

static atomic_ulong crossslot_calls;

unsigned long redis_script_crossslot_calls(void)
{
    return atomic_load(&crossslot_calls);
}

/* Count (and log the first of) the calls whose keys are in more than one
 * hash slot: a Redis Cluster refuses them, so each is a bug, whatever
 * server this one is. */
static void check_slots(const struct redis_script *s, int nkeys,
                        const char **argv, const size_t *lens)
{
    unsigned first = 0;

    for (int i = 0; i < nkeys; i++) {
        size_t len = lens ? lens[i] : strlen(argv[i]);
        unsigned slot = redis_key_slot(argv[i], len);

        if (i == 0) {
            first = slot;
        } else if (slot != first) {
            if (atomic_fetch_add(&crossslot_calls, 1) == 0)
                log_error("redis script keys in several hash slots",
                          "script=\"%.40s\" key0=\"%.*s\" key%d=\"%.*s\"",
                          s->src, (int)(lens ? lens[0] : strlen(argv[0])),
                          argv[0], i, (int)len, argv[i]);
            return;
        }
    }
}

/* The argument vector of EVALSHA/EVAL s (eval: the source). */
static int script_argv(const struct redis_script *s, bool eval, int nkeys,
                       int argc, const char **argv, const size_t *lens,
                       const char **v, size_t *l, char nk[12])
{
    bool sha = !eval && atomic_load_explicit(&s->ready, memory_order_acquire);

    if (argc < 0 || argc > SCRIPT_ARGS_MAX - 3 || nkeys < 0 || nkeys > argc)
        abort(); /* a caller's mistake */
    check_slots(s, nkeys, argv, lens);
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

redisReply *redis_script_run_then(redisContext *rc, struct redis_script *s,
                                  int nkeys, int argc, const char **argv,
                                  const size_t *lens, const char *const *then,
                                  size_t nthen, redisReply **then_replies,
                                  int *err)
{
    const char *v[SCRIPT_ARGS_MAX];
    size_t l[SCRIPT_ARGS_MAX];
    char nk[12];
    redisReply *r = NULL;

    *err = 0;
    for (size_t i = 0; i < nthen; i++)
        then_replies[i] = NULL;
    if (!atomic_load_explicit(&s->ready, memory_order_acquire) &&
        redis_script_load(rc, s) && rc->err) {
        *err = redis_errno(rc);
        return NULL;
    }
    for (int eval = 0; eval < 2; eval++) {
        int n = script_argv(s, eval, nkeys, argc, argv, lens, v, l, nk);

        redisAppendCommandArgv(rc, n, v, l);
        for (size_t i = 0; i < nthen; i++)
            redisAppendFormattedCommand(rc, then[i], strlen(then[i]));
        if (redisGetReply(rc, (void **)&r) != REDIS_OK) {
            *err = redis_errno(rc);
            return NULL;
        }
        for (size_t i = 0; i < nthen; i++)
            if (redisGetReply(rc, (void **)&then_replies[i]) != REDIS_OK)
                return r; /* the script's answer stands; the rest are lost */
        if (eval || !redis_reply_is_noscript(r))
            break;
        freeReplyObject(r);
        for (size_t i = 0; i < nthen; i++) {
            freeReplyObject(then_replies[i]);
            then_replies[i] = NULL;
        }
    }
    return r;
}
