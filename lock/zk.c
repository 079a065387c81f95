/*
 * zk.c - the ZooKeeper lock backend: Curator's InterProcessMutex recipe over
 * the multi-threaded C client (libzookeeper_mt).
 *
 * A lock called NAME is the directory /<root>/<escaped NAME>: a container
 * node (as Curator's creatingParentContainersIfNeeded), which the server
 * deletes some time after it empties. A contender creates an ephemeral
 * sequential child "lock-<owner>-<attempt>-<seq>" holding its owner id,
 * lists the children and holds the lock when its sequence number is the
 * lowest. Otherwise it watches only its immediate predecessor (no herd:
 * one release wakes one waiter) and looks again when that node goes.
 * The fencing token is our node's czxid: the zxid of the transaction that
 * created it, which only grows across the whole ensemble.
 *
 * The client handle (one ZooKeeper session) is shared by every lock of a
 * lock_client. All requests use the asynchronous API and a deadline of our
 * own, so a call returns after about timeout_ms even when the server hangs
 * (the synchronous calls would wait up to two thirds of the session).
 *
 * Sessions:
 *   - The session starts on first use; each call waits up to timeout_ms for
 *     it to be connected.
 *   - Expired: every lock held through it is marked lost (its nodes are
 *     gone) and the next call starts a new session.
 *   - Disconnected (CONNECTING): the locks are at risk but not lost yet;
 *     Curator calls this SUSPENDED. The client reconnects within the same
 *     session on its own and the server keeps our nodes until the session
 *     expires. The server cannot expire it sooner than a third of the
 *     session after we notice the disconnection (the client gives up on a
 *     silent server after two thirds of the session), so for that long
 *     renew() answers with an error when it cannot check (the watchdog
 *     retries), and after it reports the lock gone: from then on the
 *     session may have expired and someone else may hold the lock. That is
 *     about when the server can first expire it, not before: fencing
 *     tokens cover the moment in between.
 *
 * Nodes left behind: a create or delete whose reply was lost with the
 * connection may or may not have happened. The attempt tag in the node's
 * name makes the node findable; such (directory, name prefix) pairs are
 * remembered as orphans and deleted as soon as the session is connected
 * again, so that a live session never keeps a lock nobody holds.
 */
#include "lock/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zookeeper/zookeeper.h>

#include "common/util.h"

#define ZK_DEFAULT_PORT 2181
#define ZK_DEFAULT_ROOT "seckill-locks"
/* A waiter looks again this often (jittered) even without a watch event. */
#define ZK_FALLBACK_MS 1000
/* Creating our node retries this often when its directory vanishes. */
#define ZK_CREATE_TRIES 3
/* Our own result code: no reply before the deadline. */
#define ZK_NO_REPLY (-1000)
/* A sequential node's name ends in this many digits. */
#define ZK_SEQ_DIGITS 10

enum zk_op {
    ZK_OP_CREATE,
    ZK_OP_DELETE,
    ZK_OP_CHILDREN,
    ZK_OP_GET,
    ZK_OP_EXISTS
};

struct zk;

/* One ZooKeeper session (one zhandle_t). */
struct zk_sess {
    struct zk *zk;
    zhandle_t *zh;
    uint64_t gen;          /* numbers the sessions of one client */
    int refs;              /* zk->mu: zk->cur's and each call in progress */
    int connected;         /* zk->mu: the last session event was CONNECTED */
    int expired;           /* zk->mu: expired or auth failed: dead for good */
    int64_t down_since;    /* zk->mu: when the connection dropped, or 0 */
    int64_t negotiated_ms; /* zk->mu: the session timeout the server gave */
};

/* A held lock (l->bs): our node, and the session that made it. */
struct zk_hold {
    struct lock *l;
    char *path;   /* our node */
    char *dir;    /* the lock's directory */
    char *prefix; /* our node's name without the sequence number */
    uint64_t gen;
    struct zk_hold *prev, *next; /* zk->holds */
};

/* An acquire waiting for its predecessor's node to go. */
struct zk_waiter {
    const char *path;
    int fired;
    struct zk_waiter *next;
};

/* A node of ours that may exist without a holder: children of dir whose
 * names start with prefix, made by session gen. */
struct zk_orphan {
    struct zk *zk;
    char *dir;
    char *prefix;
    uint64_t gen;
    int busy;      /* zk->mu: a sweep is in flight (it owns the struct) */
    int dead;      /* zk->mu: unlinked while busy: the sweep frees it */
    zhandle_t *zh; /* the sweep's session */
    int pending;   /* zk->mu: the sweep's deletes in flight */
    int failed;    /* zk->mu: one of them failed */
    struct zk_orphan *next;       /* zk->orphans */
    struct zk_orphan *sweep_next; /* a batch to sweep */
};

/* One asynchronous request. The caller waits for it until its deadline;
 * the completion always comes (with ZCLOSING at the latest), so whichever
 * of the two lets go last frees it. */
struct zk_call {
    struct zk *zk;
    pthread_cond_t cond; /* with zk->mu */
    zhandle_t *zh;
    uint64_t gen;
    enum zk_op op;
    int refs; /* zk->mu */
    int done; /* zk->mu */
    int rc;
    struct Stat stat;
    char *made;  /* create: the node's path */
    char **kids; /* children: names */
    int nkids;
    char *dir, *prefix; /* set when the request is about one of our nodes */
};

struct zk {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* session events, fired watches, closers done */
    char *hosts;         /* "h1:p1,h2:p2" */
    char *root;          /* "/seckill-locks" */
    uint32_t timeout_ms;
    uint32_t session_ms;
    /* All below under mu. */
    struct zk_sess *cur;
    uint64_t gen;
    uint64_t attempts;
    int closers; /* threads closing an expired session */
    struct zk_hold *holds;
    struct zk_waiter *waiters;
    struct zk_orphan *orphans;
};

/* ---- time ---- */

/* CLOCK_MONOTONIC ms, the clock our condition variables wait on. */
static int64_t zk_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void zk_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* Wait on cond until signalled or deadline (zk_now_ms() time). */
static void zk_cond_wait(pthread_cond_t *cond, pthread_mutex_t *mu,
                         int64_t deadline)
{
    struct timespec ts = {.tv_sec = deadline / 1000,
                          .tv_nsec = (deadline % 1000) * 1000000};

    pthread_cond_timedwait(cond, mu, &ts);
}

/* ---- errors ---- */

/* Map a ZooKeeper result to -errno and log one line. */
static int zk_fail(const char *op, const char *path, int rc)
{
    int err;

    if (rc == ZK_NO_REPLY || rc == ZOPERATIONTIMEOUT)
        err = -ETIMEDOUT;
    else if (rc == ZCONNECTIONLOSS || rc == ZSESSIONEXPIRED ||
             rc == ZSESSIONMOVED || rc == ZINVALIDSTATE || rc == ZCLOSING)
        err = -ECONNRESET;
    else
        err = -EIO;
    log_warn("zookeeper request failed", "op=%s path=\"%s\" rc=%d err=\"%s\"",
             op, path, rc, rc == ZK_NO_REPLY ? "no reply in time" : zerror(rc));
    return err;
}

/* The outcome of a create or delete that got this result is unknown. */
static int zk_rc_unknown(int rc)
{
    return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

/* ---- orphans ---- */

static void zk_orphan_free(struct zk_orphan *o)
{
    if (!o)
        return;
    free(o->dir);
    free(o->prefix);
    free(o);
}

/* Unlink o from zk->orphans (zk->mu held). */
static void zk_orphan_unlink(struct zk *zk, struct zk_orphan *o)
{
    for (struct zk_orphan **pp = &zk->orphans; *pp; pp = &(*pp)->next) {
        if (*pp == o) {
            *pp = o->next;
            return;
        }
    }
}

/* The sweep is over and o may still have nodes: try again on reconnect. */
static void zk_orphan_idle(struct zk_orphan *o)
{
    struct zk *zk = o->zk;
    int dead;

    pthread_mutex_lock(&zk->mu);
    o->busy = 0;
    dead = o->dead;
    pthread_mutex_unlock(&zk->mu);
    if (dead)
        zk_orphan_free(o);
}

/* The sweep found nothing of o's left. */
static void zk_orphan_done(struct zk_orphan *o)
{
    struct zk *zk = o->zk;

    pthread_mutex_lock(&zk->mu);
    if (!o->dead)
        zk_orphan_unlink(zk, o);
    pthread_mutex_unlock(&zk->mu);
    log_info("zookeeper lock node left behind is gone", "dir=\"%s\" node=%s*",
             o->dir, o->prefix);
    zk_orphan_free(o);
}

static void zk_orphan_sweep(struct zk_orphan *o, zhandle_t *zh);

/* Under zk->mu: pending and failed can change from two threads when the
 * handle closes (its flushed completions run on the closing thread). */
static void zk_orphan_deleted(int rc, const void *data)
{
    struct zk_orphan *o = (struct zk_orphan *)data;
    struct zk *zk = o->zk;
    int last, failed;

    pthread_mutex_lock(&zk->mu);
    if (rc != ZOK && rc != ZNONODE)
        o->failed = 1;
    last = --o->pending == 0;
    failed = o->failed;
    pthread_mutex_unlock(&zk->mu);
    if (!last)
        return;
    if (failed)
        zk_orphan_idle(o);
    else
        zk_orphan_done(o);
}

/* Completion thread: delete the children that are o's. */
static void zk_orphan_listed(int rc, const struct String_vector *kids,
                             const void *data)
{
    struct zk_orphan *o = (struct zk_orphan *)data;
    size_t plen = strlen(o->prefix);
    int n = 0;

    if (rc == ZNONODE) {
        zk_orphan_done(o);
        return;
    }
    if (rc != ZOK || !kids) {
        zk_orphan_idle(o);
        return;
    }
    for (int i = 0; i < kids->count; i++)
        n += strncmp(kids->data[i], o->prefix, plen) == 0;
    if (n == 0) {
        zk_orphan_done(o);
        return;
    }
    /* One extra count, dropped at the end, so that deletes completing
     * meanwhile cannot finish the sweep under our feet. */
    pthread_mutex_lock(&o->zk->mu);
    o->pending = n + 1;
    o->failed = 0;
    pthread_mutex_unlock(&o->zk->mu);
    for (int i = 0; i < kids->count; i++) {
        if (strncmp(kids->data[i], o->prefix, plen) != 0)
            continue;
        char *path = xasprintf("%s/%s", o->dir, kids->data[i]);
        if (zoo_adelete(o->zh, path, -1, zk_orphan_deleted, o) != ZOK)
            zk_orphan_deleted(ZSYSTEMERROR, o);
        free(path);
    }
    zk_orphan_deleted(ZOK, o);
}

/* Start sweeping o (marked busy by the caller) over zh. */
static void zk_orphan_sweep(struct zk_orphan *o, zhandle_t *zh)
{
    o->zh = zh;
    if (zoo_aget_children(zh, o->dir, 0, zk_orphan_listed, o) != ZOK)
        zk_orphan_idle(o);
}

static void zk_session_put(struct zk_sess *s, int in_callback);

/*
 * Remember that children of dir named prefix* made by session gen may
 * exist with no holder, and delete them now if connected. zh is that
 * session's handle, alive for the duration of the call (a callback's, or
 * one the caller holds a reference to); NULL from a thread that holds
 * none.
 */
static void zk_orphan_add(struct zk *zk, zhandle_t *zh, uint64_t gen,
                          const char *dir, const char *prefix)
{
    struct zk_orphan *o = xcalloc(1, sizeof(*o));
    struct zk_sess *ref = NULL;
    int sweep = 0;

    o->zk = zk;
    o->dir = xstrdup(dir);
    o->prefix = xstrdup(prefix);
    o->gen = gen;
    pthread_mutex_lock(&zk->mu);
    if (!zk->cur || zk->cur->gen != gen || zk->cur->expired) {
        /* The session is gone, and its ephemeral nodes with it. */
        pthread_mutex_unlock(&zk->mu);
        zk_orphan_free(o);
        return;
    }
    o->next = zk->orphans;
    zk->orphans = o;
    if (zk->cur->connected) {
        sweep = o->busy = 1;
        if (!zh) {
            ref = zk->cur;
            ref->refs++;
            zh = ref->zh;
        }
    }
    pthread_mutex_unlock(&zk->mu);
    log_warn("zookeeper lock node may be left behind; deleting it",
             "dir=\"%s\" node=%s*", dir, prefix);
    if (sweep)
        zk_orphan_sweep(o, zh);
    if (ref)
        zk_session_put(ref, 0);
}

/* ---- asynchronous requests with a deadline ---- */

static struct zk_call *zk_call_new(struct zk *zk, struct zk_sess *s,
                                   enum zk_op op)
{
    struct zk_call *call = xcalloc(1, sizeof(*call));

    call->zk = zk;
    zk_cond_init(&call->cond);
    call->zh = s->zh;
    call->gen = s->gen;
    call->op = op;
    call->refs = 2;
    return call;
}

static void zk_call_free(struct zk_call *call)
{
    if (!call)
        return;
    pthread_cond_destroy(&call->cond);
    free(call->made);
    for (int i = 0; i < call->nkids; i++)
        free(call->kids[i]);
    free(call->kids);
    free(call->dir);
    free(call->prefix);
    free(call);
}

static void zk_delete_async(struct zk *zk, zhandle_t *zh, uint64_t gen,
                            const char *path, const char *dir,
                            const char *prefix);

/*
 * Completion thread: the request is over. If the caller gave up waiting,
 * clean up after it: delete a node it made too late, and remember a node
 * whose create or delete has an unknown outcome.
 */
static void zk_call_complete(struct zk_call *call, int rc)
{
    struct zk *zk = call->zk;
    int abandoned;

    pthread_mutex_lock(&zk->mu);
    call->rc = rc;
    call->done = 1;
    abandoned = --call->refs == 0;
    if (!abandoned)
        pthread_cond_signal(&call->cond);
    pthread_mutex_unlock(&zk->mu);
    /* From here on, only an abandoned call is ours to read. */
    if (!abandoned)
        return;
    if (call->prefix && zk_rc_unknown(rc))
        zk_orphan_add(zk, call->zh, call->gen, call->dir, call->prefix);
    else if (call->prefix && call->op == ZK_OP_CREATE && rc == ZOK)
        zk_delete_async(zk, call->zh, call->gen, call->made, call->dir,
                        call->prefix);
    zk_call_free(call);
}

/* The request was never sent (zoo_a* failed): no completion will come. */
static int zk_call_unsent(struct zk_call *call, int rc)
{
    zk_call_free(call);
    return rc;
}

/*
 * Wait until call completes or deadline. Returns its result, having freed
 * it; or ZK_NO_REPLY, leaving it to the completion. A lost reply to a
 * create or delete of one of our nodes makes it an orphan.
 */
static int zk_call_wait(struct zk_call *call, int64_t deadline)
{
    struct zk *zk = call->zk;
    int done;

    pthread_mutex_lock(&zk->mu);
    while (!call->done && zk_now_ms() < deadline)
        zk_cond_wait(&call->cond, &zk->mu, deadline);
    done = call->done;
    call->refs--;
    pthread_mutex_unlock(&zk->mu);
    if (!done)
        return ZK_NO_REPLY;
    if (call->prefix && zk_rc_unknown(call->rc))
        zk_orphan_add(zk, call->zh, call->gen, call->dir, call->prefix);
    return call->rc;
}

static void zk_created(int rc, const char *path, const struct Stat *stat,
                       const void *data)
{
    struct zk_call *call = (struct zk_call *)data;

    if (rc == ZOK && path)
        call->made = xstrdup(path);
    if (rc == ZOK && stat)
        call->stat = *stat;
    zk_call_complete(call, rc);
}

static void zk_void_done(int rc, const void *data)
{
    zk_call_complete((struct zk_call *)data, rc);
}

static void zk_stat_done(int rc, const struct Stat *stat, const void *data)
{
    struct zk_call *call = (struct zk_call *)data;

    if (rc == ZOK && stat)
        call->stat = *stat;
    zk_call_complete(call, rc);
}

static void zk_data_done(int rc, const char *value, int len,
                         const struct Stat *stat, const void *data)
{
    (void)value;
    (void)len;
    zk_stat_done(rc, stat, data);
}

static void zk_children_done(int rc, const struct String_vector *kids,
                             const void *data)
{
    struct zk_call *call = (struct zk_call *)data;

    if (rc == ZOK && kids && kids->count > 0) {
        call->kids = xcalloc((size_t)kids->count, sizeof(char *));
        for (int i = 0; i < kids->count; i++)
            call->kids[i] = xstrdup(kids->data[i]);
        call->nkids = kids->count;
    }
    zk_call_complete(call, rc);
}

/* Mark call as about our node dir/prefix* (for the orphan rules). */
static void zk_call_ours(struct zk_call *call, const char *dir,
                         const char *prefix)
{
    if (!prefix)
        return;
    call->dir = xstrdup(dir);
    call->prefix = xstrdup(prefix);
}

/*
 * Create path (a prefix when mode is sequential) holding data. On ZOK,
 * *made (to free) is the node's path and *stat its Stat. dir and prefix,
 * when not NULL, say it is one of our lock nodes.
 */
static int zk_create(struct zk_sess *s, const char *path, const char *data,
                     int mode, const char *dir, const char *prefix,
                     int64_t deadline, char **made, struct Stat *stat)
{
    struct zk_call *call = zk_call_new(s->zk, s, ZK_OP_CREATE);
    int rc;

    zk_call_ours(call, dir, prefix);
    rc = zoo_acreate2(s->zh, path, data, (int)strlen(data),
                      &ZOO_OPEN_ACL_UNSAFE, mode, zk_created, call);
    if (rc != ZOK)
        return zk_call_unsent(call, rc);
    rc = zk_call_wait(call, deadline);
    if (rc == ZK_NO_REPLY)
        return rc;
    if (rc == ZOK) {
        *made = call->made;
        call->made = NULL;
        *stat = call->stat;
    }
    zk_call_free(call);
    return rc;
}

static int zk_delete(struct zk_sess *s, const char *path, const char *dir,
                     const char *prefix, int64_t deadline)
{
    struct zk_call *call = zk_call_new(s->zk, s, ZK_OP_DELETE);
    int rc;

    zk_call_ours(call, dir, prefix);
    rc = zoo_adelete(s->zh, path, -1, zk_void_done, call);
    if (rc != ZOK)
        return zk_call_unsent(call, rc);
    rc = zk_call_wait(call, deadline);
    if (rc != ZK_NO_REPLY)
        zk_call_free(call);
    return rc;
}

/* Delete path without waiting (from the completion thread). */
static void zk_delete_async(struct zk *zk, zhandle_t *zh, uint64_t gen,
                            const char *path, const char *dir,
                            const char *prefix)
{
    struct zk_call *call = xcalloc(1, sizeof(*call));

    call->zk = zk;
    zk_cond_init(&call->cond);
    call->zh = zh;
    call->gen = gen;
    call->op = ZK_OP_DELETE;
    call->refs = 1; /* nobody waits */
    zk_call_ours(call, dir, prefix);
    if (zoo_adelete(zh, path, -1, zk_void_done, call) != ZOK)
        zk_call_free(call);
}

/* List dir's children: *kids (to free with zk_kids_free), *n. */
static int zk_children(struct zk_sess *s, const char *dir, int64_t deadline,
                       char ***kids, int *n)
{
    struct zk_call *call = zk_call_new(s->zk, s, ZK_OP_CHILDREN);
    int rc;

    rc = zoo_aget_children(s->zh, dir, 0, zk_children_done, call);
    if (rc != ZOK)
        return zk_call_unsent(call, rc);
    rc = zk_call_wait(call, deadline);
    if (rc == ZK_NO_REPLY)
        return rc;
    if (rc == ZOK) {
        *kids = call->kids;
        *n = call->nkids;
        call->kids = NULL;
        call->nkids = 0;
    }
    zk_call_free(call);
    return rc;
}

static void zk_kids_free(char **kids, int n)
{
    for (int i = 0; i < n; i++)
        free(kids[i]);
    free(kids);
}

static void zk_node_watcher(zhandle_t *zh, int type, int state,
                            const char *path, void *ctx);

/*
 * Read path's Stat; with watch, also leave a watch on it that wakes the
 * waiters registered for path. A data watch (not an exists watch, as in
 * Curator) so that a node already gone leaves no watch behind.
 */
static int zk_stat(struct zk_sess *s, const char *path, int watch,
                   int64_t deadline, struct Stat *stat)
{
    struct zk_call *call =
        zk_call_new(s->zk, s, watch ? ZK_OP_GET : ZK_OP_EXISTS);
    int rc;

    if (watch)
        rc = zoo_awget(s->zh, path, zk_node_watcher, s->zk, zk_data_done, call);
    else
        rc = zoo_aexists(s->zh, path, 0, zk_stat_done, call);
    if (rc != ZOK)
        return zk_call_unsent(call, rc);
    rc = zk_call_wait(call, deadline);
    if (rc == ZK_NO_REPLY)
        return rc;
    if (rc == ZOK && stat)
        *stat = call->stat;
    zk_call_free(call);
    return rc;
}

/* ---- sessions ---- */

static void *zk_closer_main(void *arg)
{
    struct zk_sess *s = arg;
    struct zk *zk = s->zk;

    zookeeper_close(s->zh);
    free(s);
    pthread_mutex_lock(&zk->mu);
    zk->closers--;
    pthread_cond_broadcast(&zk->cond);
    pthread_mutex_unlock(&zk->mu);
    return NULL;
}

/*
 * Drop a reference to s; the last one closes it. A ZooKeeper callback may
 * not close its own handle, so from one (in_callback) a thread does it.
 * zk->mu must not be held: closing waits for the handle's callbacks.
 */
static void zk_session_put(struct zk_sess *s, int in_callback)
{
    struct zk *zk = s->zk;
    pthread_attr_t attr;
    pthread_t t;
    int last;

    pthread_mutex_lock(&zk->mu);
    last = --s->refs == 0;
    if (last && in_callback)
        zk->closers++;
    pthread_mutex_unlock(&zk->mu);
    if (!last)
        return;
    if (!in_callback) {
        zookeeper_close(s->zh);
        free(s);
        return;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, zk_closer_main, s) != 0) {
        /* Leak the dead handle rather than close it from its own thread. */
        log_error("zookeeper session close failed", "err=\"no thread\"");
        pthread_mutex_lock(&zk->mu);
        zk->closers--;
        pthread_mutex_unlock(&zk->mu);
    }
    pthread_attr_destroy(&attr);
}

/* The client's own log lines, at debug level: connection attempts to a
 * server that is down would otherwise flood stderr. */
static void zk_log_line(const char *message)
{
    size_t n = strlen(message);

    while (n > 0 && (message[n - 1] == '\n' || message[n - 1] == '\r'))
        n--;
    log_debug("zookeeper client", "text=\"%.*s\"", (int)n, message);
}

static void zk_session_watcher(zhandle_t *zh, int type, int state,
                               const char *path, void *ctx)
{
    struct zk *zk = ctx;
    struct zk_orphan *sweep = NULL;
    struct zk_sess *s, *dead = NULL;
    int64_t down_ms = -1;
    int dropped = 0;

    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    pthread_mutex_lock(&zk->mu);
    s = zk->cur;
    if (!s || s->zh != zh) {
        pthread_mutex_unlock(&zk->mu); /* a session we let go of */
        return;
    }
    if (state == ZOO_CONNECTED_STATE) {
        if (s->down_since)
            down_ms = zk_now_ms() - s->down_since;
        s->connected = 1;
        s->down_since = 0;
        s->negotiated_ms = zoo_recv_timeout(zh);
        for (struct zk_orphan *o = zk->orphans; o; o = o->next) {
            if (!o->busy && o->gen == s->gen) {
                o->busy = 1;
                o->sweep_next = sweep;
                sweep = o;
            }
        }
    } else if (state == ZOO_EXPIRED_SESSION_STATE ||
               state == ZOO_AUTH_FAILED_STATE) {
        s->expired = 1;
        s->connected = 0;
        for (struct zk_hold *h = zk->holds; h; h = h->next) {
            if (h->gen == s->gen)
                lock__mark_lost(h->l, "zookeeper session expired");
        }
        /* Their nodes went with the session. */
        for (struct zk_orphan **pp = &zk->orphans; *pp;) {
            struct zk_orphan *o = *pp;
            if (o->gen != s->gen) {
                pp = &o->next;
                continue;
            }
            *pp = o->next;
            if (o->busy)
                o->dead = 1;
            else
                zk_orphan_free(o);
        }
        /* The next call starts a new session; close this one now, as the
         * client's I/O thread spins on a dead handle. */
        zk->cur = NULL;
        dead = s;
    } else if (s->connected) {
        /* CONNECTING/ASSOCIATING: the client is reconnecting. */
        s->connected = 0;
        s->down_since = zk_now_ms();
        dropped = 1;
    }
    pthread_cond_broadcast(&zk->cond);
    pthread_mutex_unlock(&zk->mu);
    if (dropped)
        log_warn("zookeeper connection lost; reconnecting", "hosts=\"%s\"",
                 zk->hosts);
    if (down_ms >= 0)
        log_info("zookeeper reconnected", "hosts=\"%s\" down_ms=%" PRId64,
                 zk->hosts, down_ms);
    if (dead) {
        log_warn("zookeeper session expired", "state=%d", state);
        zk_session_put(dead, 1);
    }
    while (sweep) {
        struct zk_orphan *o = sweep;
        sweep = o->sweep_next;
        zk_orphan_sweep(o, zh);
    }
}

/*
 * Take a reference to a connected session, waiting until deadline; start
 * one if there is none (or the last one expired). Returns 0 with *out set,
 * or -ECONNREFUSED when none connected in time, -ECONNRESET when one
 * expired and no time was left to start another.
 */
static int zk_session_get(struct zk *zk, int64_t deadline, struct zk_sess **out)
{
    struct zk_sess *s;
    int connected, expired, err;

    for (;;) {
        pthread_mutex_lock(&zk->mu);
        if (!zk->cur) {
            s = xcalloc(1, sizeof(*s));
            s->zk = zk;
            s->gen = ++zk->gen;
            s->refs = 1; /* zk->cur's */
            /* Not blocking: it only starts the client's threads. Under mu,
             * so that the watcher sees zk->cur set. */
            s->zh =
                zookeeper_init2(zk->hosts, zk_session_watcher,
                                (int)zk->session_ms, NULL, zk, 0, zk_log_line);
            if (!s->zh) {
                err = errno ? -errno : -EINVAL;
                pthread_mutex_unlock(&zk->mu);
                log_warn("zookeeper session start failed",
                         "hosts=\"%s\" errno=%d", zk->hosts, -err);
                free(s);
                return err;
            }
            zk->cur = s;
        }
        s = zk->cur;
        s->refs++;
        while (!s->connected && !s->expired && zk_now_ms() < deadline)
            zk_cond_wait(&zk->cond, &zk->mu, deadline);
        connected = s->connected;
        expired = s->expired;
        pthread_mutex_unlock(&zk->mu);
        if (connected) {
            *out = s;
            return 0;
        }
        zk_session_put(s, 0);
        /* Expired while we waited: the watcher dropped it, so the next
         * round starts a new session. */
        if (!expired || zk_now_ms() >= deadline)
            break;
    }
    log_warn("zookeeper not connected", "hosts=\"%s\" timeout_ms=%u", zk->hosts,
             (unsigned)zk->timeout_ms);
    return expired ? -ECONNRESET : -ECONNREFUSED;
}

/* ---- names and paths ---- */

/* The lock's directory: root + "/" + name, percent-encoded. */
static char *zk_dir_path(const struct zk *zk, const char *name, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    /* "." and ".." are not node names: encode their dots too. */
    int dots = (len == 1 || len == 2) && strspn(name, ".") == len;
    size_t rlen = strlen(zk->root);
    char *p = xmalloc(rlen + 1 + 3 * len + 1);
    char *q = p + rlen;

    memcpy(p, zk->root, rlen);
    *q++ = '/';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.') &&
            !dots) {
            *q++ = (char)c;
        } else {
            *q++ = '%';
            *q++ = hex[c >> 4];
            *q++ = hex[c & 15];
        }
    }
    *q = '\0';
    return p;
}

/* The sequence number of a lock node's name, or -1 if it is not one. */
static int64_t zk_seq(const char *name)
{
    size_t n = strlen(name);
    int64_t v = 0;

    if (n < ZK_SEQ_DIGITS + 6 || strncmp(name, "lock-", 5) != 0 ||
        name[n - ZK_SEQ_DIGITS - 1] != '-')
        return -1;
    for (size_t i = n - ZK_SEQ_DIGITS; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

/*
 * Find mine among kids. Returns 1 if present, setting *pred to the child
 * just before it (NULL when mine is the lowest); 0 if mine is missing.
 */
static int zk_predecessor(char **kids, int n, const char *mine,
                          const char **pred)
{
    int64_t my_seq = zk_seq(mine), best = -1;
    int found = 0;

    *pred = NULL;
    for (int i = 0; i < n; i++) {
        int64_t seq = zk_seq(kids[i]);
        if (strcmp(kids[i], mine) == 0)
            found = 1;
        else if (seq >= 0 && seq < my_seq && seq > best) {
            best = seq;
            *pred = kids[i];
        }
    }
    return found;
}

/* Create dir and its parents as container nodes. */
static int zk_mkdirs(struct zk_sess *s, const char *dir)
{
    struct zk *zk = s->zk;
    char *path = xstrdup(dir);
    int err = 0;

    for (char *slash = path + 1;; slash++) {
        slash = strchr(slash, '/');
        if (slash)
            *slash = '\0';
        char *made = NULL;
        struct Stat st;
        int rc = zk_create(s, path, "", ZOO_CONTAINER, NULL, NULL,
                           zk_now_ms() + zk->timeout_ms, &made, &st);
        free(made);
        if (rc != ZOK && rc != ZNODEEXISTS) {
            err = zk_fail("create_dir", path, rc);
            break;
        }
        if (!slash)
            break;
        *slash = '/';
    }
    free(path);
    return err;
}

/* ---- the backend ---- */

/* Check the URL's path (the root): node names joined by '/'. */
static int zk_root_valid(const char *root)
{
    const char *p = root;

    if (!*root || strspn(root, "abcdefghijklmnopqrstuvwxyz"
                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789-_./") != strlen(root))
        return 0;
    if (strcmp(root, "zookeeper") == 0 || strncmp(root, "zookeeper/", 10) == 0)
        return 0; /* the server's own */
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.'))
            return 0;
        p += n;
        if (*p == '/')
            p++;
        if (!*p && p[-1] == '/')
            return 0;
    }
    return 1;
}

static int zk_open(struct lock_client *c)
{
    const struct lock_url *u = &c->url;
    const char *root = u->path[0] ? u->path : ZK_DEFAULT_ROOT;
    struct zk *zk;
    char *hosts = NULL;

    if (u->user[0] || u->has_pass) {
        log_warn("lock url refused", "backend=zookeeper "
                                     "reason=\"no credentials are supported\"");
        return -EINVAL;
    }
    if (u->nhosts < 1 || !zk_root_valid(root)) {
        log_warn("lock url refused",
                 "backend=zookeeper reason=\"bad hosts or path\" path=\"%s\"",
                 root);
        return -EINVAL;
    }
    for (int i = 0; i < u->nhosts; i++) {
        const char *h = u->hosts[i].host;
        unsigned port = u->hosts[i].port ? u->hosts[i].port : ZK_DEFAULT_PORT;
        int v6 = strchr(h, ':') != NULL;
        char *next =
            xasprintf("%s%s%s%s%s:%u", hosts ? hosts : "", hosts ? "," : "",
                      v6 ? "[" : "", h, v6 ? "]" : "", port);
        free(hosts);
        hosts = next;
    }
    zk = xcalloc(1, sizeof(*zk));
    pthread_mutex_init(&zk->mu, NULL);
    zk_cond_init(&zk->cond);
    zk->hosts = hosts;
    zk->root = xasprintf("/%s", root);
    zk->timeout_ms = c->timeout_ms;
    zk->session_ms = c->session_ms;
    c->impl = zk;
    return 0;
}

static void zk_close(struct lock_client *c)
{
    struct zk *zk = c->impl;
    struct zk_sess *s;

    if (!zk)
        return;
    pthread_mutex_lock(&zk->mu);
    s = zk->cur;
    zk->cur = NULL;
    pthread_mutex_unlock(&zk->mu);
    /* Closing ends the session: the server deletes our nodes at once. */
    if (s)
        zk_session_put(s, 0);
    pthread_mutex_lock(&zk->mu);
    while (zk->closers > 0)
        pthread_cond_wait(&zk->cond, &zk->mu);
    pthread_mutex_unlock(&zk->mu);
    /* No handle is left, so no callback runs any more. */
    while (zk->orphans) {
        struct zk_orphan *o = zk->orphans;
        zk->orphans = o->next;
        zk_orphan_free(o);
    }
    pthread_cond_destroy(&zk->cond);
    pthread_mutex_destroy(&zk->mu);
    free(zk->hosts);
    free(zk->root);
    free(zk);
    c->impl = NULL;
}

static void zk_hold_free(struct zk_hold *h)
{
    if (!h)
        return;
    free(h->path);
    free(h->dir);
    free(h->prefix);
    free(h);
}

static void zk_waiter_unlink(struct zk *zk, struct zk_waiter *w)
{
    pthread_mutex_lock(&zk->mu);
    for (struct zk_waiter **pp = &zk->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&zk->mu);
}

/* Watch on a predecessor: wake the acquires waiting for that node. */
static void zk_node_watcher(zhandle_t *zh, int type, int state,
                            const char *path, void *ctx)
{
    struct zk *zk = ctx;
    int woke = 0;

    (void)zh;
    (void)state;
    if (type == ZOO_SESSION_EVENT || !path)
        return; /* zk_session_watcher's business */
    pthread_mutex_lock(&zk->mu);
    for (struct zk_waiter *w = zk->waiters; w; w = w->next) {
        if (strcmp(w->path, path) == 0)
            woke = w->fired = 1;
    }
    if (woke)
        pthread_cond_broadcast(&zk->cond);
    pthread_mutex_unlock(&zk->mu);
}

/*
 * Wait for the node pred (our predecessor) to go, until wait_end. Returns
 * 0 to look again (it went, the fallback timer ran out or the deadline
 * passed), or a negative errno.
 */
static int zk_wait_for(struct zk_sess *s, const char *pred, int64_t wait_end)
{
    struct zk *zk = s->zk;
    struct zk_waiter w = {.path = pred};
    int64_t now = zk_now_ms(), until;
    int rc, expired;

    if (now >= wait_end)
        return 0;

    /* Registered before the watch is set, so no event can slip by. */
    pthread_mutex_lock(&zk->mu);
    w.next = zk->waiters;
    zk->waiters = &w;
    pthread_mutex_unlock(&zk->mu);
    rc = zk_stat(s, pred, 1, now + zk->timeout_ms, NULL);
    if (rc != ZOK) {
        zk_waiter_unlink(zk, &w);
        /* ZNONODE: it went before we could watch it; look again now. */
        return rc == ZNONODE ? 0 : zk_fail("watch", pred, rc);
    }
    now = zk_now_ms();
    until = wait_end;
    if (now < wait_end)
        until = now + lock__jitter_ms(ZK_FALLBACK_MS, wait_end - now);
    pthread_mutex_lock(&zk->mu);
    while (!w.fired && !s->expired && zk_now_ms() < until)
        zk_cond_wait(&zk->cond, &zk->mu, until);
    expired = s->expired;
    pthread_mutex_unlock(&zk->mu);
    zk_waiter_unlink(zk, &w);
    if (expired) {
        log_warn("zookeeper session expired while waiting", "node=\"%s\"",
                 pred);
        return -ECONNRESET;
    }
    return 0;
}

/* Create our node in dir, making dir first if needed. */
static int zk_create_node(struct zk_sess *s, const char *dir,
                          const char *prefix, const char *owner, char **made,
                          struct Stat *stat)
{
    struct zk *zk = s->zk;
    char *path = xasprintf("%s/%s", dir, prefix);
    int rc = ZNONODE, err = 0;

    for (int i = 0; i < ZK_CREATE_TRIES && rc == ZNONODE; i++) {
        /* The first time, dir probably exists; after that, a container
         * emptied meanwhile may have been deleted by the server. */
        if (i > 0 && (err = zk_mkdirs(s, dir)) != 0)
            break;
        rc = zk_create(s, path, owner, ZOO_EPHEMERAL_SEQUENTIAL, dir, prefix,
                       zk_now_ms() + zk->timeout_ms, made, stat);
    }
    if (!err && rc != ZOK)
        err = zk_fail("create", path, rc);
    free(path);
    return err;
}

static int zk_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease_ms,
                      enum lock_status *status)
{
    struct zk *zk = l->c->impl;
    int64_t wait_end = zk_now_ms() + wait_ms;
    struct zk_sess *s = NULL;
    struct zk_hold *h = NULL;
    char *dir, *prefix, *made = NULL, **kids = NULL;
    const char *mine, *pred;
    struct Stat st;
    uint64_t attempt;
    int err, nkids = 0;

    (void)lease_ms; /* held as long as the session, or until released */
    dir = zk_dir_path(zk, l->name, l->name_len);
    pthread_mutex_lock(&zk->mu);
    attempt = ++zk->attempts;
    pthread_mutex_unlock(&zk->mu);
    /* The owner and attempt make our node findable after a lost reply. */
    prefix = xasprintf("lock-%s-%" PRIu64 "-", l->owner, attempt);
    err = zk_session_get(zk, zk_now_ms() + zk->timeout_ms, &s);
    if (err)
        goto out;
    err = zk_create_node(s, dir, prefix, l->owner, &made, &st);
    if (err)
        goto out;
    mine = strrchr(made, '/') + 1;
    for (;;) {
        int rc =
            zk_children(s, dir, zk_now_ms() + zk->timeout_ms, &kids, &nkids);
        if (rc != ZOK) {
            err = zk_fail("children", dir, rc);
            goto drop;
        }
        if (!zk_predecessor(kids, nkids, mine, &pred)) {
            /* Only the session's end deletes it behind our back. */
            log_warn("zookeeper lock node vanished", "node=\"%s\"", made);
            err = -ECONNRESET;
            goto drop;
        }
        if (!pred)
            break;
        if (wait_ms == 0 || zk_now_ms() >= wait_end) {
            *status = LOCK_BUSY;
            goto drop;
        }
        char *pred_path = xasprintf("%s/%s", dir, pred);
        zk_kids_free(kids, nkids);
        kids = NULL;
        nkids = 0;
        err = zk_wait_for(s, pred_path, wait_end);
        free(pred_path);
        if (err)
            goto drop;
    }

    h = xcalloc(1, sizeof(*h));
    h->l = l;
    h->path = made;
    h->dir = dir;
    h->prefix = prefix;
    h->gen = s->gen;
    pthread_mutex_lock(&zk->mu);
    if (s->expired) {
        pthread_mutex_unlock(&zk->mu);
        free(h);
        err = -ECONNRESET;
        goto drop;
    }
    h->next = zk->holds;
    if (zk->holds)
        zk->holds->prev = h;
    zk->holds = h;
    pthread_mutex_unlock(&zk->mu);
    made = dir = prefix = NULL;
    l->bs = h;
    /* czxid: the creating transaction's id; ensemble-wide and growing. */
    l->fence = (uint64_t)st.czxid;
    *status = LOCK_ACQUIRED;
    goto out;

drop:
    /* Not ours (busy, or failed): take our node out of the queue. If the
     * reply is lost, the orphan rules delete it later. */
    if (made) {
        int rc = zk_delete(s, made, dir, prefix, zk_now_ms() + zk->timeout_ms);
        if (rc != ZOK && rc != ZNONODE)
            zk_fail("delete", made, rc);
    }
out:
    zk_kids_free(kids, nkids);
    if (s)
        zk_session_put(s, 0);
    free(made);
    free(dir);
    free(prefix);
    return err;
}

/* Unlink h from zk->holds. Returns 1 if its session is still current. */
static int zk_hold_unlink(struct zk *zk, struct zk_hold *h)
{
    int live;

    pthread_mutex_lock(&zk->mu);
    if (h->prev)
        h->prev->next = h->next;
    else
        zk->holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    live = zk->cur && zk->cur->gen == h->gen && !zk->cur->expired;
    pthread_mutex_unlock(&zk->mu);
    return live;
}

static int zk_release(struct lock *l, int *held)
{
    struct zk *zk = l->c->impl;
    struct zk_hold *h = l->bs;
    struct zk_sess *s = NULL;
    int err = 0, rc, mine = 0;

    l->bs = NULL;
    if (!h)
        goto out;
    /* An expired session took our node with it. */
    if (!zk_hold_unlink(zk, h))
        goto out;
    err = zk_session_get(zk, zk_now_ms() + zk->timeout_ms, &s);
    if (err == -ECONNRESET || (!err && s->gen != h->gen)) {
        err = 0; /* the session expired and took our node with it */
        goto out;
    }
    if (err) {
        /* Not connected in time: delete it once the session reconnects
         * (dropped if the session expires instead). */
        zk_orphan_add(zk, NULL, h->gen, h->dir, h->prefix);
        goto out;
    }
    rc = zk_delete(s, h->path, h->dir, h->prefix, zk_now_ms() + zk->timeout_ms);
    if (rc == ZOK)
        mine = 1;
    else if (rc != ZNONODE)
        err = zk_fail("delete", h->path, rc);
out:
    if (s)
        zk_session_put(s, 0);
    if (held)
        *held = mine;
    zk_hold_free(h);
    return err;
}

static int zk_renew(struct lock *l, uint32_t lease_ms, int *held)
{
    struct zk *zk = l->c->impl;
    struct zk_hold *h = l->bs;
    struct zk_sess *s;
    struct Stat st;
    int64_t deadline, lost_at = 0;
    int64_t sid;
    int rc;

    (void)lease_ms;
    *held = 0;
    if (!h)
        return 0;
    pthread_mutex_lock(&zk->mu);
    s = zk->cur;
    if (!s || s->gen != h->gen || s->expired) {
        pthread_mutex_unlock(&zk->mu);
        return 0;
    }
    s->refs++;
    deadline = zk_now_ms() + zk->timeout_ms;
    if (!s->connected) {
        /* See the top of the file: after a third of the session without
         * a connection the server may have expired it. */
        int64_t ms = s->negotiated_ms ? s->negotiated_ms : zk->session_ms;
        lost_at = s->down_since + ms / 3;
        if (lost_at < deadline)
            deadline = lost_at;
    }
    while (!s->connected && !s->expired && zk_now_ms() < deadline)
        zk_cond_wait(&zk->cond, &zk->mu, deadline);
    if (s->expired) {
        rc = ZSESSIONEXPIRED;
    } else if (!s->connected) {
        rc = zk_now_ms() >= lost_at ? ZSESSIONEXPIRED : ZCONNECTIONLOSS;
    } else {
        rc = ZOK;
    }
    pthread_mutex_unlock(&zk->mu);
    if (rc == ZSESSIONEXPIRED) {
        log_warn("zookeeper lock may be lost", "node=\"%s\" reason=\"%s\"",
                 h->path, s->expired ? "session expired" : "disconnected");
        zk_session_put(s, 0);
        return 0;
    }
    if (rc != ZOK) {
        zk_session_put(s, 0);
        log_warn("zookeeper not connected", "hosts=\"%s\" timeout_ms=%u",
                 zk->hosts, (unsigned)zk->timeout_ms);
        return -ECONNREFUSED;
    }
    sid = zoo_client_id(s->zh)->client_id;
    rc = zk_stat(s, h->path, 0, zk_now_ms() + zk->timeout_ms, &st);
    zk_session_put(s, 0);
    if (rc == ZOK) {
        *held = st.ephemeralOwner == sid;
        return 0;
    }
    if (rc == ZNONODE)
        return 0;
    return zk_fail("exists", h->path, rc);
}

const struct lock_backend lock__zk_backend = {
    .name = "zookeeper",
    .kinds = LOCK_KIND_BIT(LOCK_KIND_MUTEX),
    .open = zk_open,
    .close = zk_close,
    .acquire = zk_acquire,
    .release = zk_release,
    .renew = zk_renew,
};
