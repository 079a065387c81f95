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
    /* A delete went out and its answer was lost: the release is asked
     * again, and a node found gone is then taken to be our doing. */
    int asked;
    struct zk_hold *prev, *next; /* zk->holds; unlinked at release */
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

static void zk_node_watcher(zhandle_t *zh, int type, int state,
                            const char *path, void *ctx);

/*
 * List dir's children: *kids (to free with zk_kids_free), *n. With watch,
 * also leave a watch on the list that wakes the waiters registered for
 * dir when a child comes or goes.
 */
static int zk_children(struct zk_sess *s, const char *dir, int watch,
                       int64_t deadline, char ***kids, int *n)
{
    struct zk_call *call = zk_call_new(s->zk, s, ZK_OP_CHILDREN);
    int rc;

    if (watch)
        rc = zoo_awget_children(s->zh, dir, zk_node_watcher, s->zk,
                                zk_children_done, call);
    else
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

/*
 * The lock's directory: root + "/" + name, percent-encoded, + suffix. The
 * encoding never makes a '~', so the kinds' suffixes ("~fair", "~rw",
 * "~sem") keep them apart from the mutexes and from each other.
 */
static char *zk_dir_path(const struct zk *zk, const char *name, size_t len,
                         const char *suffix)
{
    static const char hex[] = "0123456789ABCDEF";
    /* "." and ".." are not node names: encode their dots too. */
    int dots = (len == 1 || len == 2) && strspn(name, ".") == len;
    size_t rlen = strlen(zk->root);
    char *p = xmalloc(rlen + 1 + 3 * len + strlen(suffix) + 1);
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
    strcpy(q, suffix);
    return p;
}

/*
 * Contender nodes are named TAG-OWNER-ATTEMPT-SEQUENCE, the tag saying
 * what the node asks for:
 *   lock    a mutex or fair lock; also the semaphore's own mutex
 *   write   the write side of a read-write lock
 *   read    the read side
 *   dread   the read side taken by the write holder (a downgrade): held
 *           at once, and a writer waits for it wherever it is in line
 *   lease   a semaphore's permit
 */
enum zk_tag {
    ZK_TAG_NONE,
    ZK_TAG_LOCK,
    ZK_TAG_WRITE,
    ZK_TAG_READ,
    ZK_TAG_DREAD,
    ZK_TAG_LEASE
};

static const char *const zk_tag_names[] = {
    [ZK_TAG_LOCK] = "lock",   [ZK_TAG_WRITE] = "write", [ZK_TAG_READ] = "read",
    [ZK_TAG_DREAD] = "dread", [ZK_TAG_LEASE] = "lease",
};

/* A contender node's name taken apart. */
struct zk_node {
    enum zk_tag tag; /* ZK_TAG_NONE: not a contender node */
    int64_t seq;
    const char *owner; /* LOCK_OWNER_LEN - 1 characters */
};

static struct zk_node zk_node_parse(const char *name)
{
    struct zk_node nd = {ZK_TAG_NONE, -1, NULL};
    size_t n = strlen(name), tlen = strcspn(name, "-");
    int64_t v = 0;
    enum zk_tag tag = ZK_TAG_NONE;

    for (int t = ZK_TAG_LOCK; t <= ZK_TAG_LEASE; t++)
        if (strlen(zk_tag_names[t]) == tlen &&
            strncmp(name, zk_tag_names[t], tlen) == 0)
            tag = (enum zk_tag)t;
    /* TAG-, the owner, -N-, the sequence */
    if (tag == ZK_TAG_NONE ||
        n < tlen + 1 + (LOCK_OWNER_LEN - 1) + 3 + ZK_SEQ_DIGITS ||
        name[n - ZK_SEQ_DIGITS - 1] != '-')
        return nd;
    for (size_t i = n - ZK_SEQ_DIGITS; i < n; i++) {
        if (name[i] < '0' || name[i] > '9')
            return nd;
        v = v * 10 + (name[i] - '0');
    }
    nd.tag = tag;
    nd.seq = v;
    nd.owner = name + tlen + 1;
    return nd;
}

static int zk_node_owned(const struct zk_node *nd, const char *owner)
{
    return strncmp(nd->owner, owner, LOCK_OWNER_LEN - 1) == 0;
}

/*
 * Decide, from the directory's children, whether the node mine (ours,
 * made for l) holds the lock: 1, or 0 with *watch set to the node whose
 * deletion may change that. Curator's lock drivers.
 */
typedef int (*zk_decide_fn)(const struct lock *l, char **kids, int n,
                            const char *mine, const char **watch);

/* Mutex and fair lock: the lowest sequence holds; watch the one before. */
static int zk_decide_lowest(const struct lock *l, char **kids, int n,
                            const char *mine, const char **watch)
{
    int64_t my_seq = zk_node_parse(mine).seq, best = -1;

    (void)l;
    *watch = NULL;
    for (int i = 0; i < n; i++) {
        struct zk_node nd = zk_node_parse(kids[i]);
        if (nd.tag != ZK_TAG_NONE && nd.seq < my_seq && nd.seq > best) {
            best = nd.seq;
            *watch = kids[i];
        }
    }
    return *watch == NULL;
}

/*
 * Writer: first in line among readers and writers, and no downgraded
 * reader of another owner anywhere (it holds the read lock although it
 * came after us).
 */
static int zk_decide_write(const struct lock *l, char **kids, int n,
                           const char *mine, const char **watch)
{
    if (!zk_decide_lowest(l, kids, n, mine, watch))
        return 0;
    for (int i = 0; i < n; i++) {
        struct zk_node nd = zk_node_parse(kids[i]);
        if (nd.tag == ZK_TAG_DREAD && !zk_node_owned(&nd, l->owner)) {
            *watch = kids[i];
            return 0;
        }
    }
    return 1;
}

/*
 * Reader: no other owner's writer before us in line, so readers that
 * come after a waiting writer queue behind it. A downgraded reader holds
 * at once: its owner holds the write lock.
 */
static int zk_decide_read(const struct lock *l, char **kids, int n,
                          const char *mine, const char **watch)
{
    struct zk_node me = zk_node_parse(mine);
    int64_t best = -1;

    *watch = NULL;
    if (me.tag == ZK_TAG_DREAD)
        return 1;
    for (int i = 0; i < n; i++) {
        struct zk_node nd = zk_node_parse(kids[i]);
        if (nd.tag == ZK_TAG_WRITE && nd.seq < me.seq && nd.seq > best &&
            !zk_node_owned(&nd, l->owner)) {
            best = nd.seq;
            *watch = kids[i];
        }
    }
    return *watch == NULL;
}

/* Whether mine is among kids. */
static int zk_has_child(char **kids, int n, const char *mine)
{
    for (int i = 0; i < n; i++)
        if (strcmp(kids[i], mine) == 0)
            return 1;
    return 0;
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
    const struct url *u = &c->url;
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

/* Register w (for its path) before setting the watch that fires it, so
 * that no event can slip by. */
static void zk_waiter_link(struct zk *zk, struct zk_waiter *w)
{
    pthread_mutex_lock(&zk->mu);
    w->next = zk->waiters;
    zk->waiters = w;
    pthread_mutex_unlock(&zk->mu);
}

/*
 * Sleep until w fires, the jittered fallback timer runs out or wait_end,
 * then unlink w. Returns 0 to look again, or -ECONNRESET when the session
 * expired meanwhile.
 */
static int zk_wait_fired(struct zk_sess *s, struct zk_waiter *w,
                         int64_t wait_end)
{
    struct zk *zk = s->zk;
    int64_t now = zk_now_ms(), until = wait_end;
    int expired;

    if (now < wait_end)
        until = now + lock__jitter_ms(ZK_FALLBACK_MS, wait_end - now);
    pthread_mutex_lock(&zk->mu);
    while (!w->fired && !s->expired && zk_now_ms() < until)
        zk_cond_wait(&zk->cond, &zk->mu, until);
    expired = s->expired;
    pthread_mutex_unlock(&zk->mu);
    zk_waiter_unlink(zk, w);
    if (expired) {
        log_warn("zookeeper session expired while waiting", "node=\"%s\"",
                 w->path);
        return -ECONNRESET;
    }
    return 0;
}

/*
 * Wait for the node pred (the one in our way) to go, until wait_end.
 * Returns 0 to look again (it went, the fallback timer ran out or the
 * deadline passed), or a negative errno.
 */
static int zk_wait_for(struct zk_sess *s, const char *pred, int64_t wait_end)
{
    struct zk *zk = s->zk;
    struct zk_waiter w = {.path = pred};
    int rc;

    if (zk_now_ms() >= wait_end)
        return 0;
    zk_waiter_link(zk, &w);
    rc = zk_stat(s, pred, 1, zk_now_ms() + zk->timeout_ms, NULL);
    if (rc != ZOK) {
        zk_waiter_unlink(zk, &w);
        /* ZNONODE: it went before we could watch it; look again now. */
        return rc == ZNONODE ? 0 : zk_fail("watch", pred, rc);
    }
    return zk_wait_fired(s, &w, wait_end);
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

/* Our node's name prefix: the owner and a fresh attempt number make it
 * findable after a lost reply. */
static char *zk_prefix(struct zk *zk, enum zk_tag tag, const struct lock *l)
{
    uint64_t attempt;

    pthread_mutex_lock(&zk->mu);
    attempt = ++zk->attempts;
    pthread_mutex_unlock(&zk->mu);
    return xasprintf("%s-%s-%" PRIu64 "-", zk_tag_names[tag], l->owner,
                     attempt);
}

/* Delete a node of ours that does not hold anything (or no longer). If the
 * reply is lost, the orphan rules delete it later. */
static void zk_drop_node(struct zk_sess *s, const char *path, const char *dir,
                         const char *prefix)
{
    int rc = zk_delete(s, path, dir, prefix, zk_now_ms() + s->zk->timeout_ms);

    if (rc != ZOK && rc != ZNONODE)
        zk_fail("delete", path, rc);
}

/* A contender node of ours: the path made, its directory and prefix. */
struct zk_node_of {
    char *path, *dir, *prefix;
    struct Stat st;
};

static void zk_node_of_free(struct zk_node_of *n)
{
    free(n->path);
    free(n->dir);
    free(n->prefix);
    memset(n, 0, sizeof(*n));
}

/*
 * Curator's LockInternals: create our node (tag) in n->dir, then until
 * decide says it holds, watch the node in the way and look again, until
 * wait_end (wait: 0 to try once). Returns 0 with *status; on LOCK_BUSY or
 * an error our node is deleted again. n->dir is the caller's; on success
 * n->path and n->prefix are set.
 */
static int zk_contend(struct zk_sess *s, struct lock *l, enum zk_tag tag,
                      zk_decide_fn decide, int wait, int64_t wait_end,
                      struct zk_node_of *n, enum lock_status *status)
{
    struct zk *zk = s->zk;
    char **kids = NULL;
    const char *mine, *in_way;
    int err, nkids = 0;

    n->prefix = zk_prefix(zk, tag, l);
    err = zk_create_node(s, n->dir, n->prefix, l->owner, &n->path, &n->st);
    if (err)
        return err;
    mine = strrchr(n->path, '/') + 1;
    for (;;) {
        int rc = zk_children(s, n->dir, 0, zk_now_ms() + zk->timeout_ms, &kids,
                             &nkids);
        if (rc != ZOK) {
            err = zk_fail("children", n->dir, rc);
            goto drop;
        }
        if (!zk_has_child(kids, nkids, mine)) {
            /* Only the session's end deletes it behind our back. */
            log_warn("zookeeper lock node vanished", "node=\"%s\"", n->path);
            err = -ECONNRESET;
            goto drop;
        }
        if (decide(l, kids, nkids, mine, &in_way))
            break;
        if (!wait || zk_now_ms() >= wait_end) {
            *status = LOCK_BUSY;
            goto drop;
        }
        char *watch = xasprintf("%s/%s", n->dir, in_way);
        zk_kids_free(kids, nkids);
        kids = NULL;
        nkids = 0;
        err = zk_wait_for(s, watch, wait_end);
        free(watch);
        if (err)
            goto drop;
    }
    zk_kids_free(kids, nkids);
    *status = LOCK_ACQUIRED;
    return 0;

drop:
    /* Not ours (busy, or failed): take our node out of the line. */
    zk_kids_free(kids, nkids);
    zk_drop_node(s, n->path, n->dir, n->prefix);
    free(n->path);
    free(n->prefix);
    n->path = n->prefix = NULL;
    return err;
}

/* How many permits are taken: the lease nodes among kids. */
static int zk_leases(char **kids, int n)
{
    int count = 0;

    for (int i = 0; i < n; i++)
        count += zk_node_parse(kids[i]).tag == ZK_TAG_LEASE;
    return count;
}

/*
 * Curator's InterProcessSemaphoreV2. The semaphore's directory has two:
 * locks/ (a mutex, taken with the usual recipe) and leases/ (one node per
 * permit taken). Holding the mutex, a contender adds its lease node and,
 * while there are more lease nodes than permits, waits for the list to
 * change; then it lets the mutex go. Only the mutex holder ever has a
 * lease node that does not hold a permit, so at most permits do. Waiters
 * queue on the mutex (each watching its predecessor), and only its holder
 * watches the leases: a release wakes one client, not all.
 */
static int zk_sem_contend(struct zk_sess *s, struct lock *l, int wait,
                          int64_t wait_end, struct zk_node_of *n,
                          enum lock_status *status)
{
    struct zk *zk = s->zk;
    char *semdir = n->dir;
    struct zk_node_of mu = {.dir = xasprintf("%s/locks", semdir)};
    char **kids = NULL;
    int err, nkids = 0;

    n->dir = xasprintf("%s/leases", semdir);
    free(semdir);
    err = zk_contend(s, l, ZK_TAG_LOCK, zk_decide_lowest, wait, wait_end, &mu,
                     status);
    if (err || *status != LOCK_ACQUIRED)
        goto out;
    n->prefix = zk_prefix(zk, ZK_TAG_LEASE, l);
    err = zk_create_node(s, n->dir, n->prefix, l->owner, &n->path, &n->st);
    if (err)
        goto unlock;
    for (;;) {
        struct zk_waiter w = {.path = n->dir};
        zk_waiter_link(zk, &w);
        int rc = zk_children(s, n->dir, 1, zk_now_ms() + zk->timeout_ms, &kids,
                             &nkids);
        if (rc != ZOK) {
            zk_waiter_unlink(zk, &w);
            err = zk_fail("children", n->dir, rc);
            goto drop;
        }
        if (!zk_has_child(kids, nkids, strrchr(n->path, '/') + 1)) {
            zk_waiter_unlink(zk, &w);
            log_warn("zookeeper lock node vanished", "node=\"%s\"", n->path);
            err = -ECONNRESET;
            goto drop;
        }
        if (zk_leases(kids, nkids) <= (int)l->permits) {
            zk_waiter_unlink(zk, &w);
            *status = LOCK_ACQUIRED;
            goto unlock;
        }
        zk_kids_free(kids, nkids);
        kids = NULL;
        nkids = 0;
        if (!wait || zk_now_ms() >= wait_end) {
            zk_waiter_unlink(zk, &w);
            *status = LOCK_BUSY;
            goto drop;
        }
        err = zk_wait_fired(s, &w, wait_end);
        if (err)
            goto drop;
    }

drop:
    zk_drop_node(s, n->path, n->dir, n->prefix);
    free(n->path);
    free(n->prefix);
    n->path = n->prefix = NULL;
unlock:
    zk_drop_node(s, mu.path, mu.dir, mu.prefix);
out:
    zk_kids_free(kids, nkids);
    zk_node_of_free(&mu);
    return err;
}

/*
 * Whether l (a reader) is a downgrade: its owner's write lock is held, and
 * its node is still there in this session. A downgraded reader holds at
 * once, so a write hold lost unnoticed must not make one.
 */
static int zk_write_still_ours(struct zk_sess *s, const struct lock *l)
{
    const struct lock *w = l->pair ? l->pair->write : NULL;
    const struct zk_hold *h = w && w->holds > 0 ? w->bs : NULL;
    struct Stat st;

    if (!h || h->gen != s->gen || atomic_load(&w->lost))
        return 0;
    if (zk_stat(s, h->path, 0, zk_now_ms() + s->zk->timeout_ms, &st) != ZOK)
        return 0;
    return st.ephemeralOwner == zoo_client_id(s->zh)->client_id;
}

static int zk_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease_ms,
                      enum lock_status *status)
{
    struct zk *zk = l->c->impl;
    int64_t wait_end = zk_now_ms() + wait_ms;
    struct zk_sess *s = NULL;
    struct zk_node_of n = {0};
    struct zk_hold *h;
    int err;

    (void)lease_ms; /* held as long as the session, or until released */
    err = zk_session_get(zk, zk_now_ms() + zk->timeout_ms, &s);
    if (err)
        return err;
    switch (l->kind) {
    case LOCK_KIND_MUTEX:
        n.dir = zk_dir_path(zk, l->name, l->name_len, "");
        err = zk_contend(s, l, ZK_TAG_LOCK, zk_decide_lowest, wait_ms > 0,
                         wait_end, &n, status);
        break;
    case LOCK_KIND_FAIR:
        /* The mutex recipe is first come, first served already. */
        n.dir = zk_dir_path(zk, l->name, l->name_len, "~fair");
        err = zk_contend(s, l, ZK_TAG_LOCK, zk_decide_lowest, wait_ms > 0,
                         wait_end, &n, status);
        break;
    case LOCK_KIND_WRITE:
        n.dir = zk_dir_path(zk, l->name, l->name_len, "~rw");
        err = zk_contend(s, l, ZK_TAG_WRITE, zk_decide_write, wait_ms > 0,
                         wait_end, &n, status);
        break;
    case LOCK_KIND_READ:
        n.dir = zk_dir_path(zk, l->name, l->name_len, "~rw");
        err = zk_contend(s, l,
                         zk_write_still_ours(s, l) ? ZK_TAG_DREAD : ZK_TAG_READ,
                         zk_decide_read, wait_ms > 0, wait_end, &n, status);
        break;
    case LOCK_KIND_SEMAPHORE:
        n.dir = zk_dir_path(zk, l->name, l->name_len, "~sem");
        err = zk_sem_contend(s, l, wait_ms > 0, wait_end, &n, status);
        break;
    }
    if (err || *status != LOCK_ACQUIRED)
        goto out;

    h = xcalloc(1, sizeof(*h));
    h->l = l;
    h->gen = s->gen;
    pthread_mutex_lock(&zk->mu);
    if (s->expired) {
        pthread_mutex_unlock(&zk->mu);
        free(h);
        err = -ECONNRESET;
        zk_drop_node(s, n.path, n.dir, n.prefix);
        goto out;
    }
    h->next = zk->holds;
    if (zk->holds)
        zk->holds->prev = h;
    zk->holds = h;
    pthread_mutex_unlock(&zk->mu);
    h->path = n.path;
    h->dir = n.dir;
    h->prefix = n.prefix;
    l->bs = h;
    /* czxid: the creating transaction's id; ensemble-wide and growing. */
    l->fence = (uint64_t)n.st.czxid;
    memset(&n, 0, sizeof(n));
    *status = LOCK_ACQUIRED;
out:
    zk_node_of_free(&n);
    zk_session_put(s, 0);
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

/* Whether a delete that ended with rc may have run (or may still). */
static int zk_rc_lost(int rc)
{
    return rc == ZK_NO_REPLY || zk_rc_unknown(rc) || rc == ZINVALIDSTATE ||
           rc == ZCLOSING;
}

/*
 * Delete our node. Idempotent: if the answer is lost, the hold stays in
 * l->bs (out of zk->holds) for the next call, which deletes it again and
 * takes a node already gone as its own earlier delete: in a live session
 * nobody else deletes our nodes.
 */
static int zk_release(struct lock *l, int *held)
{
    struct zk *zk = l->c->impl;
    struct zk_hold *h = l->bs;
    struct zk_sess *s = NULL;
    int err = 0, rc;

    *held = 0;
    if (!h)
        return 0;
    /* An expired session took our node with it. */
    if (!h->asked && !zk_hold_unlink(zk, h))
        goto done;
    err = zk_session_get(zk, zk_now_ms() + zk->timeout_ms, &s);
    if (err == -ECONNRESET || (!err && s->gen != h->gen)) {
        err = 0; /* the session expired and took our node with it */
        goto done;
    }
    if (err)
        goto again; /* not connected in time: nothing went out */
    rc = zk_delete(s, h->path, h->dir, h->prefix, zk_now_ms() + zk->timeout_ms);
    if (rc == ZOK) {
        *held = 1;
    } else if (rc == ZNONODE) {
        *held = h->asked && !atomic_load(&l->lost);
    } else if (zk_rc_lost(rc)) {
        err = zk_fail("delete", h->path, rc);
        h->asked = 1;
        goto again;
    } else {
        err = zk_fail("delete", h->path, rc);
    }
done:
    if (s)
        zk_session_put(s, 0);
    l->bs = NULL;
    zk_hold_free(h);
    return err;
again:
    if (s)
        zk_session_put(s, 0);
    l->release_unknown = 1;
    return err;
}

/* A release left pending is given up: delete the node once the session
 * is connected (nothing to do if it expires first). */
static void zk_forget(struct lock *l)
{
    struct zk *zk = l->c->impl;
    struct zk_hold *h = l->bs;

    if (!h)
        return;
    zk_orphan_add(zk, NULL, h->gen, h->dir, h->prefix);
    l->bs = NULL;
    zk_hold_free(h);
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

/* Ready when a session is connected (started, if need be, and waited
 * for within the timeout). */
static int zk_ping(struct lock_client *c)
{
    struct zk *zk = c->impl;
    struct zk_sess *s;
    int err = zk_session_get(zk, zk_now_ms() + zk->timeout_ms, &s);

    if (!err)
        zk_session_put(s, 0);
    return err;
}

const struct lock_backend lock__zk_backend = {
    .name = "zookeeper",
    .kinds = LOCK_KIND_BIT(LOCK_KIND_MUTEX) | LOCK_KIND_BIT(LOCK_KIND_FAIR) |
             LOCK_KIND_BIT(LOCK_KIND_READ) | LOCK_KIND_BIT(LOCK_KIND_WRITE) |
             LOCK_KIND_BIT(LOCK_KIND_SEMAPHORE),
    .open = zk_open,
    .close = zk_close,
    .acquire = zk_acquire,
    .release = zk_release,
    .renew = zk_renew,
    .forget = zk_forget,
    .ping = zk_ping,
};
