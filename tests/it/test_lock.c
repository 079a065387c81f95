/*
 * test_lock.c - the lock contract suite: the same tests of lock/lock.h,
 * registered once per backend (one cmocka group each, tests named
 * "<backend>: <test>"), against the servers of .run/env.test:
 *
 *   redis      SECKILL_REDIS_URL
 *   redlock    SECKILL_LOCK_REDLOCK_URL (three redis-servers, their pids in
 *              .run/redlock-<port>.pid)
 *   mysql      SECKILL_MYSQL_URL
 *   zookeeper  SECKILL_LOCK_ZK_URL
 *
 * Compiled again with LOCK_TEST_CLUSTER (make test-cluster), it has one
 * group, "cluster": the redis backend on SECKILL_LOCK_CLUSTER_URL (the
 * redis-cluster:// URL of scripts/redis-cluster.sh; the test's own access
 * goes to the primaries the cluster names, whichever nodes the URL has),
 * with the tests of a slot moved under a held lock and of the scripts'
 * spread over the primaries.
 *
 * A missing URL fails every test of its group: `make test` must cover all
 * four. Checked: mutual exclusion across processes and threads, owner-only
 * release, reentrancy, a SIGKILLed holder, the watchdog, fencing tokens
 * against a MySQL-guarded write from a SIGSTOPped holder, RedLock's quorum
 * with stopped servers, wake-up by release, a backend that is down, and the
 * input checks.
 *
 * Other processes hold locks through "agents": children (this program
 * again, exec'd with --agent) with their own client and one struct lock,
 * driven over pipes (acquire, release, ...).
 * Forked children never call cmocka (its asserts would longjmp into the
 * child's copy of the runner): they answer through pipes and exit statuses,
 * and an alarm bounds how long they live. Lock names start with
 * "it-lock-<pid>-<n>-" so runs don't collide; teardowns delete what the
 * backends keep (Redis keys, ZooKeeper nodes, rows).
 *
 * The tests reach behind the API only to break things: delete a Redis key
 * whose name contains the lock name, delete a ZooKeeper node whose path
 * does, KILL a process's MySQL sessions, stop a RedLock server.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <mysql.h>
/* The synchronous API (zoo_get_children, ...) is only declared with it. */
#define THREADED
#include <zookeeper/zookeeper.h>

#include "common/redis.h"         /* redis_script_crossslot_calls() */
#include "common/redis_cluster.h" /* the map: who owns a slot */
#include "common/redis_slot.h"
#include "lock/internal.h" /* lock__url_parse(): where the servers are */
#include "lock/lock.h"
#include "tests/it/harness.h"

/* Every backend's per-operation timeout (?timeout_ms=). */
#define TIMEOUT_MS 500
/*
 * ZooKeeper's session timeout (?session_ms=): a dead or paused holder frees
 * its lock after about this long. The server must allow it (tickTime of
 * 1000 ms or less: sessions are clamped to 2..20 ticks).
 */
#define ZK_SESSION_MS 2000
/* The watchdog's lease (lock_options): renewals every 200 ms. */
#define WD_LEASE_MS 600
/* A lease no test outlives. */
#define LONG_LEASE_MS 30000
/* Leases that the tests wait out: owner-only release, SIGKILL, fencing. */
#define OWNER_LEASE_MS 300
#define KILL_LEASE_MS 1000
#define FENCE_LEASE_MS 800
/* Slack on top of a lease or session before a freed lock must be taken. */
#define EXPIRY_SLACK_MS 700
#define ZK_EXPIRY_SLACK_MS 2000
/* Slack on top of the timeouts a failing call may take. */
#define FAIL_SLACK_MS 700
/* Release to acquire by a blocked waiter: below the shortest retry timer
 * (a jittered 250..500 ms), so only a wake-up can make it, with room for
 * a loaded machine (one hand-over of 53 ms was seen under ASan with a
 * load average of 10; they are about 1 ms otherwise). */
#define HANDOVER_MAX_MS 200
#define HANDOVER_ROUNDS 5
/* Mutual exclusion: processes x threads x iterations, and the hold. */
#define MX_PROCS 4
#define MX_THREADS 4
#define MX_ITERS 100
#define MX_HOLD_US 100
/* How long an agent may take to answer, and a forked child to live. */
#define AGENT_REPLY_MS 20000
#define CHILD_ALARM_S 120

enum backend_kind { BK_REDIS, BK_REDLOCK, BK_MYSQL, BK_ZK };

struct backend {
    enum backend_kind kind;
    const char *name; /* lock_client_backend() and the group name */
    const char *env;  /* the variable holding its URL */
    int all_kinds;    /* fair, read-write and semaphore, or -ENOTSUP */
    /* The redis backend on a Redis Cluster (redis-cluster:// URL, its
     * seeds the primaries): the group is called "cluster". */
    int cluster;
};

#ifdef LOCK_TEST_CLUSTER
/* Built a second time for make test-cluster: the redis backend on the
 * cluster of scripts/redis-cluster.sh, whose URL is in
 * SECKILL_LOCK_CLUSTER_URL. */
static struct backend backends[] = {
    {BK_REDIS, "redis", "SECKILL_LOCK_CLUSTER_URL", 1, 1},
};
#else
static struct backend backends[] = {
    {BK_REDIS, "redis", "SECKILL_REDIS_URL", 1, 0},
    {BK_REDLOCK, "redlock", "SECKILL_LOCK_REDLOCK_URL", 0, 0},
    {BK_MYSQL, "mysql", "SECKILL_MYSQL_URL", 0, 0},
    {BK_ZK, "zookeeper", "SECKILL_LOCK_ZK_URL", 1, 0},
};
#endif

/* The name of b's cmocka group and tests. */
static const char *group_name(const struct backend *b)
{
    return b->cluster ? "cluster" : b->name;
}

/* A lock of one kind: its name in messages, and for a semaphore how many
 * permits. */
struct kind_spec {
    enum lock_kind kind;
    uint32_t permits;
};

static const char *kind_str(enum lock_kind k)
{
    switch (k) {
    case LOCK_KIND_MUTEX:
        return "mutex";
    case LOCK_KIND_FAIR:
        return "fair";
    case LOCK_KIND_READ:
        return "read";
    case LOCK_KIND_WRITE:
        return "write";
    case LOCK_KIND_SEMAPHORE:
        break;
    }
    return "semaphore";
}

/*
 * Make a struct lock of kind ks on c. For a side of a read-write lock the
 * other side is made too, into *other (free both); else *other is NULL.
 * Returns lock_*_new()'s result. No cmocka.
 */
static int make_kind(struct lock_client *c, struct kind_spec ks,
                     const char *name, struct lock **l, struct lock **other)
{
    struct lock *r, *w;
    int rc;

    *other = NULL;
    switch (ks.kind) {
    case LOCK_KIND_MUTEX:
        return lock_new(c, name, l);
    case LOCK_KIND_FAIR:
        return lock_fair_new(c, name, l);
    case LOCK_KIND_SEMAPHORE:
        return lock_semaphore_new(c, name, ks.permits, l);
    case LOCK_KIND_READ:
    case LOCK_KIND_WRITE:
        break;
    }
    rc = lock_rw_new(c, name, &r, &w);
    if (rc == 0) {
        *l = ks.kind == LOCK_KIND_READ ? r : w;
        *other = ks.kind == LOCK_KIND_READ ? w : r;
    }
    return rc;
}

static const struct kind_spec MUTEX = {LOCK_KIND_MUTEX, 0};

/* ---- small helpers (no cmocka: children use them too) ---- */

static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};

    while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Sleep until the monotonic time until_us. */
static void sleep_until_us(int64_t until_us)
{
    int64_t left = until_us - mono_us();

    if (left > 0)
        sleep_ms((left + 999) / 1000);
}

/* Write or read exactly n bytes. read_full: 0, 1 on EOF first, -1. */
static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;

    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    size_t got = 0;

    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            return got == 0 ? 1 : -1;
        got += (size_t)r;
    }
    return 0;
}

/* "exited with 3", "killed by signal 9" into buf. */
static const char *describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, size, "status 0x%x", status);
    return buf;
}

static const char *rc_str(int rc)
{
    return rc == 0 ? "ok" : strerror(-rc);
}

/*
 * The guarded write of the fencing test: store value under name only if no
 * higher token was accepted before. Returns the affected rows (1: accepted,
 * 0: refused) or -1 after printing why. A prepared statement on a
 * connection of its own, so forked children can call it.
 */
static long long fenced_write(const struct store_config *sc, const char *name,
                              long long value, uint64_t fence)
{
    static const char sql[] = "UPDATE fenced_resource SET value = ?, "
                              "fence = ? WHERE name = ? AND fence <= ?";
    unsigned timeout_s = 10;
    unsigned long name_len = strlen(name);
    MYSQL_BIND bind[4];
    MYSQL_STMT *stmt = NULL;
    long long rows = -1;
    MYSQL *db;

    db = mysql_init(NULL);
    if (!db)
        return -1;
    mysql_options(db, MYSQL_OPT_CONNECT_TIMEOUT, &timeout_s);
    mysql_options(db, MYSQL_OPT_READ_TIMEOUT, &timeout_s);
    mysql_options(db, MYSQL_OPT_WRITE_TIMEOUT, &timeout_s);
    if (!mysql_real_connect(db, sc->mysql_host, sc->mysql_user, sc->mysql_pass,
                            sc->mysql_db, sc->mysql_port, NULL, 0)) {
        fprintf(stderr, "fenced_write: connect: %s\n", mysql_error(db));
        goto out;
    }
    stmt = mysql_stmt_init(db);
    if (!stmt || mysql_stmt_prepare(stmt, sql, sizeof(sql) - 1) != 0)
        goto stmt_error;
    memset(bind, 0, sizeof(bind));
    bind[0].buffer_type = MYSQL_TYPE_LONGLONG;
    bind[0].buffer = &value;
    bind[1].buffer_type = MYSQL_TYPE_LONGLONG;
    bind[1].buffer = &fence;
    bind[1].is_unsigned = 1;
    bind[2].buffer_type = MYSQL_TYPE_STRING;
    bind[2].buffer = (char *)name;
    bind[2].buffer_length = name_len;
    bind[2].length = &name_len;
    bind[3] = bind[1];
    if (mysql_stmt_bind_param(stmt, bind) != 0 || mysql_stmt_execute(stmt) != 0)
        goto stmt_error;
    rows = (long long)mysql_stmt_affected_rows(stmt);
    goto out;

stmt_error:
    fprintf(stderr, "fenced_write: %s\n",
            stmt ? mysql_stmt_error(stmt) : mysql_error(db));
out:
    if (stmt)
        mysql_stmt_close(stmt);
    mysql_close(db);
    return rows;
}

/* ---- agents: a struct lock in another process ---- */

enum agent_op {
    AG_ACQUIRE = 1, /* lock_acquire(wait_ms, lease_ms) */
    AG_RELEASE,     /* lock_release() */
    AG_STATE,       /* holds, fence, lost */
    AG_WRITE,       /* fenced_write(arg) with the token of the last acquire */
    AG_WAIT_LOST,   /* poll lock_lost() for up to arg ms */
};

struct agent_cmd {
    int op;
    uint32_t wait_ms;
    uint32_t lease_ms;
    int64_t arg;
};

struct agent_reply {
    int rc;
    int status; /* enum lock_status after AG_ACQUIRE */
    int held;   /* after AG_RELEASE */
    int lost;
    unsigned holds;
    uint64_t fence;
    int64_t value; /* AG_WRITE: affected rows */
    int64_t t0_us; /* monotonic, when the operation started */
    int64_t t_us;  /* and when it ended */
};

struct agent {
    pid_t pid; /* 0 once reaped */
    int to_fd;
    int from_fd;
    int stopped; /* SIGSTOPped by the test */
};

/* The MySQL of AG_WRITE, set by the parent before the agent forks. */
static const struct store_config *agent_sc;

/*
 * The agent's life: open a client for url, make one struct lock of kind ks
 * for name, then serve commands until EOF. Returns the exit code.
 */
static int agent_main(const char *url, const struct lock_options *opt,
                      struct kind_spec ks, const char *name, int in, int out)
{
    struct lock_client *c = NULL;
    struct lock *l = NULL, *other = NULL;
    uint64_t token = 0;
    struct agent_cmd cmd;
    int rc;

    if (lock_client_open(url, opt, &c) != 0)
        return 10;
    if (make_kind(c, ks, name, &l, &other) != 0)
        return 11;
    while ((rc = read_full(in, &cmd, sizeof(cmd))) == 0) {
        struct agent_reply r;
        enum lock_status st = LOCK_BUSY;
        int64_t until;

        memset(&r, 0, sizeof(r));
        r.t0_us = mono_us();
        switch (cmd.op) {
        case AG_ACQUIRE:
            r.rc = lock_acquire(l, cmd.wait_ms, cmd.lease_ms, &st);
            r.status = (int)st;
            if (r.rc == 0 && st == LOCK_ACQUIRED)
                token = lock_fence(l);
            break;
        case AG_RELEASE:
            r.held = -1;
            r.rc = lock_release(l, &r.held);
            break;
        case AG_STATE:
            break;
        case AG_WRITE:
            r.value = fenced_write(agent_sc, name, cmd.arg, token);
            r.fence = token;
            break;
        case AG_WAIT_LOST:
            until = r.t0_us + cmd.arg * 1000;
            while (!lock_lost(l) && mono_us() < until)
                sleep_ms(2);
            break;
        default:
            return 12;
        }
        r.t_us = mono_us();
        r.lost = lock_lost(l);
        r.holds = lock_holds(l);
        if (cmd.op != AG_WRITE)
            r.fence = lock_fence(l);
        if (write_full(out, &r, sizeof(r)) != 0)
            return 13;
    }
    lock_free(l);
    lock_free(other);
    lock_client_close(c);
    return rc == 1 ? 0 : 14;
}

/*
 * Become an agent in a fresh image of this program (the child of fork()
 * execs it): a fork of the test process, which runs the clients' threads,
 * may inherit a lock some thread held at that moment (the sanitizers'
 * allocator has no fork handlers), and an agent that takes it hangs. The
 * pipes' ends pass as their numbers, the rest as arguments.
 */
static void agent_exec(const char *url, const struct lock_options *opt,
                       struct kind_spec ks, const char *name, int in, int out)
{
    char a[7][24];
    char *argv[] = {"it_test_lock", "--agent", (char *)url, (char *)name,
                    a[0],           a[1],      a[2],        a[3],
                    a[4],           a[5],      a[6],        NULL};

    snprintf(a[0], sizeof(a[0]), "%d", (int)ks.kind);
    snprintf(a[1], sizeof(a[1]), "%u", ks.permits);
    snprintf(a[2], sizeof(a[2]), "%u", opt->timeout_ms);
    snprintf(a[3], sizeof(a[3]), "%u", opt->session_ms);
    snprintf(a[4], sizeof(a[4]), "%u", opt->watchdog_lease_ms);
    snprintf(a[5], sizeof(a[5]), "%d", in);
    snprintf(a[6], sizeof(a[6]), "%d", out);
    execv("/proc/self/exe", argv);
    _exit(15);
}

/* main() of an exec'd agent: argv as agent_exec() made it. */
static int agent_exec_main(int argc, char **argv)
{
    struct lock_options opt = {0};
    struct kind_spec ks;

    if (argc != 11)
        return 16;
    ks.kind = (enum lock_kind)atoi(argv[4]);
    ks.permits = (uint32_t)strtoul(argv[5], NULL, 10);
    opt.timeout_ms = (uint32_t)strtoul(argv[6], NULL, 10);
    opt.session_ms = (uint32_t)strtoul(argv[7], NULL, 10);
    opt.watchdog_lease_ms = (uint32_t)strtoul(argv[8], NULL, 10);
    agent_sc = it_store_config();
    return agent_main(argv[2], &opt, ks, argv[3], atoi(argv[9]),
                      atoi(argv[10]));
}

/* ---- the fixture ---- */

#define FX_LOCKS_MAX 32
#define FX_CLIENTS_MAX 4
#define FX_AGENTS_MAX 12
#define FX_FDS_MAX 8

struct fx {
    const struct backend *b;
    char url[1024];    /* the backend's URL with our settings */
    char why_not[256]; /* why url is unusable, or "" */
    struct url u;      /* url parsed: where the servers are */
    char prefix[64];   /* of every lock name of this test */
    struct lock_options opt;

    struct lock_client *c;                       /* opened on first use */
    struct lock_client *clients[FX_CLIENTS_MAX]; /* other clients */
    size_t nclients;
    struct lock *locks[FX_LOCKS_MAX]; /* freed by the teardown */
    size_t nlocks;
    struct agent agents[FX_AGENTS_MAX];
    size_t nagents;
    int fds[FX_FDS_MAX]; /* blackhole listeners */
    size_t nfds;

    /* Raw access to the servers, opened on first use. */
    redisContext *rc[URL_HOSTS_MAX];
    zhandle_t *zh;
    atomic_int zk_state;

    /* SIGSTOPped RedLock servers, and the process that resumes them if we
     * die first. */
    pid_t stopped[URL_HOSTS_MAX];
    size_t nstopped;
    pid_t guard_pid;
    int guard_fd;

    int used_table; /* rows of fenced_resource to delete */

    /* Proxies in front of the servers, stopped by the teardown. */
    struct it_proxy proxies[URL_HOSTS_MAX];
    size_t nproxies;
};

static unsigned fx_seq;

static void fx_cluster_primaries(struct fx *f);

static int fx_setup(void **state)
{
    const struct backend *b = *state;
    const char *env = getenv(b->env);
    struct fx *f = calloc(1, sizeof(*f));
    char err[256] = "";
    int n;

    if (!f)
        return -1;
    f->b = b;
    f->guard_fd = -1;
    f->opt.watchdog_lease_ms = WD_LEASE_MS;
    snprintf(f->prefix, sizeof(f->prefix), "it-lock-%ld-%u-", (long)getpid(),
             ++fx_seq);
    if (!env || !*env) {
        snprintf(f->why_not, sizeof(f->why_not),
                 "%s is not set (source .run/env.test; scripts/services.sh "
                 "starts every backend's server)",
                 b->env);
    } else {
        n = snprintf(f->url, sizeof(f->url), "%s%ctimeout_ms=%u", env,
                     strchr(env, '?') ? '&' : '?', TIMEOUT_MS);
        if (n > 0 && (size_t)n < sizeof(f->url) && b->kind == BK_ZK)
            n += snprintf(f->url + n, sizeof(f->url) - (size_t)n,
                          "&session_ms=%u", ZK_SESSION_MS);
        if (n <= 0 || (size_t)n >= sizeof(f->url))
            snprintf(f->why_not, sizeof(f->why_not), "%s is too long", b->env);
        else if (url_parse(f->url, &f->u, err, sizeof(err)) != 0)
            snprintf(f->why_not, sizeof(f->why_not), "%s: %s", b->env, err);
    }
    if (b->cluster && !f->why_not[0])
        fx_cluster_primaries(f);
    *state = f;
    return 0;
}

/*
 * On a cluster the test reaches behind the API on every primary (to count,
 * break and clean up a lock's keys; to move slots): the URL's hosts in
 * f->u are replaced by the primaries of the map that the first seed to
 * answer gives, since a seed may be a replica by now (a failover, such as
 * the one make test-cluster's routing test causes). No cmocka: a failure
 * goes to f->why_not.
 */
static void fx_cluster_primaries(struct fx *f)
{
    struct redis_cluster_map *m = calloc(1, sizeof(*m));
    char why[160] = "no seed answered CLUSTER SHARDS";
    int i, got = 0;

    if (!m)
        abort();
    for (i = 0; i < f->u.nhosts && !got; i++) {
        struct timeval tv = {.tv_sec = 2};
        redisContext *rc = redisConnectWithTimeout(f->u.hosts[i].host,
                                                   (int)f->u.hosts[i].port, tv);
        redisReply *r = NULL;

        if (rc && !rc->err) {
            redisSetTimeout(rc, tv);
            if (f->u.has_pass)
                freeReplyObject(
                    f->u.user[0]
                        ? redisCommand(rc, "AUTH %s %s", f->u.user, f->u.pass)
                        : redisCommand(rc, "AUTH %s", f->u.pass));
            r = redisCommand(rc, "CLUSTER SHARDS");
        }
        if (r && redis_cluster_map_parse(r, m, why, sizeof(why)) == 0)
            got = 1;
        freeReplyObject(r);
        redisFree(rc);
    }
    if (got && m->nnodes > URL_HOSTS_MAX) {
        snprintf(why, sizeof(why), "%d primaries", m->nnodes);
        got = 0;
    }
    if (!got) {
        snprintf(f->why_not, sizeof(f->why_not), "%s: %s", f->b->env, why);
    } else {
        for (i = 0; i < m->nnodes; i++) {
            snprintf(f->u.hosts[i].host, sizeof(f->u.hosts[i].host), "%s",
                     m->nodes[i].host);
            f->u.hosts[i].port = m->nodes[i].port;
        }
        f->u.nhosts = m->nnodes;
    }
    free(m);
}

/* Every test starts here: the backend's URL must be there. */
static struct fx *fx_begin(void **state)
{
    struct fx *f = *state;

    if (f->why_not[0])
        fail_msg("backend %s: %s", f->b->name, f->why_not);
    return f;
}

/* prefix + suffix into name (LOCK_NAME_MAX + 1 bytes). */
static void fx_name(const struct fx *f, const char *suffix, char *name)
{
    int n = snprintf(name, LOCK_NAME_MAX + 1, "%s%s", f->prefix, suffix);

    assert_true(n > 0 && n <= LOCK_NAME_MAX);
}

static struct lock_client *fx_client(struct fx *f)
{
    int rc;

    if (!f->c) {
        rc = lock_client_open(f->url, &f->opt, &f->c);
        if (rc != 0)
            fail_msg("lock_client_open(%s backend) = %d (%s)", f->b->name, rc,
                     rc_str(rc));
        assert_string_equal(lock_client_backend(f->c), f->b->name);
    }
    return f->c;
}

/* A struct lock for name on c (NULL: the test's client), freed by the
 * teardown. */
static struct lock *fx_lock_on(struct fx *f, struct lock_client *c,
                               const char *name)
{
    struct lock *l = NULL;

    assert_true(f->nlocks < FX_LOCKS_MAX);
    assert_int_equal(lock_new(c ? c : fx_client(f), name, &l), 0);
    assert_non_null(l);
    f->locks[f->nlocks++] = l;
    return l;
}

static struct lock *fx_lock(struct fx *f, const char *name)
{
    return fx_lock_on(f, NULL, name);
}

/* A struct lock of kind ks for name on c (NULL: the test's client; and
 * the other side of a read-write lock, if any), freed by the teardown. */
static struct lock *fx_lock_kind_on(struct fx *f, struct lock_client *c,
                                    struct kind_spec ks, const char *name)
{
    struct lock *l = NULL, *other = NULL;
    int rc;

    assert_true(f->nlocks + 2 <= FX_LOCKS_MAX);
    rc = make_kind(c ? c : fx_client(f), ks, name, &l, &other);
    if (rc != 0)
        fail_msg("new %s lock on %s = %d (%s)", kind_str(ks.kind), f->b->name,
                 rc, rc_str(rc));
    assert_int_equal(lock_kind(l), ks.kind);
    f->locks[f->nlocks++] = l;
    if (other)
        f->locks[f->nlocks++] = other;
    return l;
}

static struct lock *fx_lock_kind(struct fx *f, struct kind_spec ks,
                                 const char *name)
{
    return fx_lock_kind_on(f, NULL, ks, name);
}

/* Both sides of a read-write lock called name. */
static void fx_lock_rw(struct fx *f, const char *name, struct lock **r,
                       struct lock **w)
{
    assert_true(f->nlocks + 2 <= FX_LOCKS_MAX);
    assert_int_equal(lock_rw_new(fx_client(f), name, r, w), 0);
    f->locks[f->nlocks++] = *r;
    f->locks[f->nlocks++] = *w;
}

/* Acquire l and assert the outcome; returns how long it took in ms. */
#define acquire_expect(l, wait_ms, lease_ms, want)                             \
    acquire_expect_at((l), (wait_ms), (lease_ms), (want), __FILE__, __LINE__)
static int64_t acquire_expect_at(struct lock *l, uint32_t wait_ms,
                                 uint32_t lease_ms, enum lock_status want,
                                 const char *file, int line)
{
    enum lock_status st = want == LOCK_BUSY ? LOCK_ACQUIRED : LOCK_BUSY;
    int64_t t0 = mono_us();
    int rc = lock_acquire(l, wait_ms, lease_ms, &st);
    int64_t ms = (mono_us() - t0) / 1000;

    if (rc != 0 || st != want) {
        print_error("lock_acquire(%s, wait %u, lease %u) = %d (%s), %s after "
                    "%lld ms; expected %s\n",
                    lock_name(l), wait_ms, lease_ms, rc, rc_str(rc),
                    st == LOCK_ACQUIRED ? "ACQUIRED" : "BUSY", (long long)ms,
                    want == LOCK_ACQUIRED ? "ACQUIRED" : "BUSY");
        _fail(file, line);
    }
    return ms;
}

/* Release l and assert it was still ours. */
#define release_held(l) release_held_at((l), __FILE__, __LINE__)
static void release_held_at(struct lock *l, const char *file, int line)
{
    int held = -1;
    int rc = lock_release(l, &held);

    if (rc != 0 || held != 1) {
        print_error("lock_release(%s) = %d (%s), held %d; expected 0, "
                    "held 1\n",
                    lock_name(l), rc, rc_str(rc), held);
        _fail(file, line);
    }
}

/*
 * A release of a hold that is no longer ours: 0 with held 0 (it expired or
 * was taken), or -ENOLCK when the lock was marked lost.
 */
#define assert_release_not_ours(rc, held)                                      \
    do {                                                                       \
        if ((rc) != -ENOLCK) {                                                 \
            assert_int_equal((rc), 0);                                         \
            assert_int_equal((held), 0);                                       \
        }                                                                      \
    } while (0)

/* ---- agents, the parent's side ---- */

static struct agent *agent_start_kind(struct fx *f, const char *url,
                                      struct kind_spec ks, const char *name)
{
    struct agent *ag;
    int to[2], from[2];
    pid_t pid;
    size_t i;

    assert_true(f->nagents < FX_AGENTS_MAX);
    assert_int_equal(pipe(to), 0);
    assert_int_equal(pipe(from), 0);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(CHILD_ALARM_S);
        close(to[1]);
        close(from[0]);
        for (i = 0; i < f->nagents; i++) {
            close(f->agents[i].to_fd);
            close(f->agents[i].from_fd);
        }
        agent_exec(url, &f->opt, ks, name, to[0], from[1]);
    }
    close(to[0]);
    close(from[1]);
    ag = &f->agents[f->nagents++];
    ag->pid = pid;
    ag->to_fd = to[1];
    ag->from_fd = from[0];
    ag->stopped = 0;
    return ag;
}

static struct agent *agent_start_url(struct fx *f, const char *url,
                                     const char *name)
{
    return agent_start_kind(f, url, MUTEX, name);
}

static struct agent *agent_start(struct fx *f, const char *name)
{
    return agent_start_url(f, f->url, name);
}

static void agent_send(struct agent *ag, int op, uint32_t wait_ms,
                       uint32_t lease_ms, int64_t arg)
{
    struct agent_cmd cmd = {
        .op = op, .wait_ms = wait_ms, .lease_ms = lease_ms, .arg = arg};

    assert_int_equal(write_full(ag->to_fd, &cmd, sizeof(cmd)), 0);
}

/* The agent's answer to the last command; fails after timeout_ms, or if it
 * died. */
static struct agent_reply agent_recv(struct agent *ag, int timeout_ms)
{
    struct pollfd pfd = {.fd = ag->from_fd, .events = POLLIN};
    struct agent_reply r;
    char why[64];
    int status, n;

    do
        n = poll(&pfd, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    if (n == 0)
        fail_msg("agent %d did not answer within %d ms (hung)", (int)ag->pid,
                 timeout_ms);
    if (read_full(ag->from_fd, &r, sizeof(r)) != 0) {
        if (waitpid(ag->pid, &status, 0) == ag->pid) {
            ag->pid = 0;
            fail_msg("agent died: %s",
                     describe_status(status, why, sizeof(why)));
        }
        fail_msg("agent %d: broken pipe", (int)ag->pid);
    }
    return r;
}

static struct agent_reply agent_call(struct agent *ag, int op, uint32_t wait_ms,
                                     uint32_t lease_ms, int64_t arg)
{
    agent_send(ag, op, wait_ms, lease_ms, arg);
    return agent_recv(ag, AGENT_REPLY_MS);
}

#define assert_agent_acquired(r)                                               \
    do {                                                                       \
        if ((r).rc != 0 || (r).status != LOCK_ACQUIRED)                        \
            fail_msg("agent acquire = %d (%s), status %d", (r).rc,             \
                     rc_str((r).rc), (r).status);                              \
    } while (0)

static void agent_signal(struct agent *ag, int sig)
{
    assert_int_equal(kill(ag->pid, sig), 0);
    if (sig == SIGSTOP)
        ag->stopped = 1;
    else if (sig == SIGCONT)
        ag->stopped = 0;
}

/* SIGKILL and reap. */
static void agent_kill(struct agent *ag)
{
    int status;

    if (ag->pid <= 0)
        return;
    kill(ag->pid, SIGKILL);
    while (waitpid(ag->pid, &status, 0) < 0 && errno == EINTR)
        ;
    ag->pid = 0;
}

/*
 * Close the agent's command pipe: it frees its lock (releasing it if held),
 * closes its client and exits. Asserts it exits with 0 within timeout_ms;
 * returns how long that took in ms.
 */
static int64_t agent_finish(struct agent *ag, int timeout_ms)
{
    int64_t t0 = mono_us();
    char why[64];
    int status = 0;

    close(ag->to_fd);
    ag->to_fd = -1;
    if (it_wait_exit(ag->pid, timeout_ms, &status) != 0) {
        agent_kill(ag);
        fail_msg("agent did not exit within %d ms of EOF", timeout_ms);
    }
    ag->pid = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("agent %s", describe_status(status, why, sizeof(why)));
    return (mono_us() - t0) / 1000;
}

/* ---- raw access to the servers ---- */

static unsigned fx_port(const struct fx *f, int i)
{
    static const unsigned defaults[] = {[BK_REDIS] = 6379,
                                        [BK_REDLOCK] = 6379,
                                        [BK_MYSQL] = 3306,
                                        [BK_ZK] = 2181};

    return f->u.hosts[i].port ? f->u.hosts[i].port : defaults[f->b->kind];
}

/* Connect to Redis server i of f's URL, AUTH and SELECT done; NULL after
 * printing why. No cmocka. */
static redisContext *raw_redis_open(const struct fx *f, int i)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *rc;
    redisReply *r = NULL;

    rc = redisConnectWithTimeout(f->u.hosts[i].host, (int)fx_port(f, i), tv);
    if (!rc || rc->err)
        goto fail;
    redisSetTimeout(rc, tv);
    if (f->u.has_pass) {
        r = f->u.user[0] ? redisCommand(rc, "AUTH %s %s", f->u.user, f->u.pass)
                         : redisCommand(rc, "AUTH %s", f->u.pass);
        if (!r || r->type == REDIS_REPLY_ERROR)
            goto fail;
        freeReplyObject(r);
    }
    r = redisCommand(rc, "SELECT %s", f->u.path[0] ? f->u.path : "0");
    if (!r || r->type == REDIS_REPLY_ERROR)
        goto fail;
    freeReplyObject(r);
    return rc;

fail:
    fprintf(stderr, "test_lock: redis %s:%u: %s\n", f->u.hosts[i].host,
            fx_port(f, i),
            r && r->type == REDIS_REPLY_ERROR ? r->str
            : rc                              ? rc->errstr
                                              : "out of memory");
    freeReplyObject(r);
    redisFree(rc);
    return NULL;
}

/*
 * Visit every key of every server whose name contains needle (a plain
 * string: no glob characters), on the connections in rcs. With del, delete
 * those with a TTL, or with del_all every one. Returns how many had a TTL,
 * their largest PTTL in *max_pttl (may be NULL), or -1 on a server error.
 * Not counted, since they outlive a release by design: the fencing
 * counter (lock-fence:{name}, as long as the lease it was last taken
 * with, so that the next token is greater than the last) and release
 * receipts (lock-rel:{name}:owner, a few seconds).
 */
static long long redis_keys(redisContext **rcs, int n, const char *needle,
                            int del, int del_all, long long *max_pttl)
{
    long long count = 0, max = -1;
    int i;

    for (i = 0; i < n; i++) {
        char cursor[32] = "0";

        do {
            redisReply *r = redisCommand(
                rcs[i], "SCAN %s MATCH *%s* COUNT 1000", cursor, needle);
            size_t k;

            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
                freeReplyObject(r);
                return -1;
            }
            snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
            for (k = 0; k < r->element[1]->elements; k++) {
                const char *key = r->element[1]->element[k]->str;
                redisReply *t = redisCommand(rcs[i], "PTTL %s", key);
                long long pttl =
                    t && t->type == REDIS_REPLY_INTEGER ? t->integer : -1;

                freeReplyObject(t);
                if (pttl > 0 && !strstr(key, "lock-fence:") &&
                    !strstr(key, "lock-rel:")) {
                    count++;
                    if (pttl > max)
                        max = pttl;
                }
                if (del_all || (del && pttl > 0))
                    freeReplyObject(redisCommand(rcs[i], "DEL %s", key));
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
    }
    if (max_pttl)
        *max_pttl = max;
    return count;
}

/* The test's connections to every Redis server of f's URL. */
static redisContext **fx_redis(struct fx *f)
{
    int i;

    assert_true(f->b->kind == BK_REDIS || f->b->kind == BK_REDLOCK);
    for (i = 0; i < f->u.nhosts; i++) {
        if (!f->rc[i])
            f->rc[i] = raw_redis_open(f, i);
        if (!f->rc[i])
            fail_msg("cannot reach redis %s:%u (see above)", f->u.hosts[i].host,
                     fx_port(f, i));
    }
    return f->rc;
}

static void zk_watcher(zhandle_t *zh, int type, int state, const char *path,
                       void *ctx)
{
    (void)zh;
    (void)path;
    if (type == ZOO_SESSION_EVENT)
        atomic_store((atomic_int *)ctx, state);
}

/* "h1:p1,h2:p2" of f's URL into buf. */
static void zk_hosts(const struct fx *f, char *buf, size_t size)
{
    size_t len = 0;
    int i;

    buf[0] = '\0';
    for (i = 0; i < f->u.nhosts && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s:%u", i ? "," : "",
                                f->u.hosts[i].host, fx_port(f, i));
}

/* The test's own ZooKeeper session, connected (no cmocka); NULL on
 * failure. */
static zhandle_t *raw_zk_open(struct fx *f)
{
    char hosts[1024];
    zhandle_t *zh;
    int64_t until = mono_us() + 5000000;

    zk_hosts(f, hosts, sizeof(hosts));
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    atomic_store(&f->zk_state, 0);
    zh = zookeeper_init(hosts, zk_watcher, 10000, NULL, &f->zk_state, 0);
    if (!zh)
        return NULL;
    while (atomic_load(&f->zk_state) != ZOO_CONNECTED_STATE &&
           mono_us() < until)
        sleep_ms(5);
    if (atomic_load(&f->zk_state) != ZOO_CONNECTED_STATE) {
        fprintf(stderr, "test_lock: zookeeper %s: not connected in 5 s\n",
                hosts);
        zookeeper_close(zh);
        return NULL;
    }
    return zh;
}

static zhandle_t *fx_zk(struct fx *f)
{
    assert_int_equal(f->b->kind, BK_ZK);
    if (!f->zh)
        f->zh = raw_zk_open(f);
    if (!f->zh)
        fail_msg("cannot reach zookeeper (see above)");
    return f->zh;
}

/* The lock path of f's URL: "/" + path. */
static void zk_base(const struct fx *f, char *buf, size_t size)
{
    snprintf(buf, size, "/%s", f->u.path);
}

/*
 * Walk the tree under path (depth first, children before their parent).
 * Counts the ephemeral nodes whose path contains needle; with del deletes
 * them, with del_all deletes every node whose path contains needle.
 * Returns the count, or -1 on an error.
 */
static long long zk_walk(zhandle_t *zh, const char *path, const char *needle,
                         int del, int del_all, int depth)
{
    struct String_vector kids = {0};
    long long count = 0, sub;
    char child[1024];
    int32_t i;
    int rc;

    rc = zoo_get_children(zh, path, 0, &kids);
    if (rc == ZNONODE)
        return 0;
    if (rc != ZOK) {
        fprintf(stderr, "test_lock: zoo_get_children(%s): %s\n", path,
                zerror(rc));
        return -1;
    }
    for (i = 0; i < kids.count && count >= 0; i++) {
        struct Stat st;

        snprintf(child, sizeof(child), "%s/%s",
                 strcmp(path, "/") == 0 ? "" : path, kids.data[i]);
        if (depth < 4) {
            sub = zk_walk(zh, child, needle, del, del_all, depth + 1);
            count = sub < 0 ? -1 : count + sub;
        }
        if (!strstr(child, needle))
            continue;
        rc = zoo_exists(zh, child, 0, &st);
        if (rc != ZOK)
            continue;
        if (st.ephemeralOwner != 0 && count >= 0)
            count++;
        if (del_all || (del && st.ephemeralOwner != 0))
            zoo_delete(zh, child, -1);
    }
    deallocate_String_vector(&kids);
    return count;
}

/*
 * How many backend records of a held lock called name exist: Redis keys
 * with a TTL (on all RedLock servers together), ephemeral ZooKeeper nodes.
 * -1 for MySQL, where the test cannot see GET_LOCK names.
 */
static long long fx_lock_records(struct fx *f, const char *name,
                                 long long *max_pttl)
{
    char base[300];
    long long n = -1;

    switch (f->b->kind) {
    case BK_REDIS:
    case BK_REDLOCK:
        n = redis_keys(fx_redis(f), f->u.nhosts, name, 0, 0, max_pttl);
        assert_true(n >= 0);
        break;
    case BK_ZK:
        zk_base(f, base, sizeof(base));
        n = zk_walk(fx_zk(f), base, name, 0, 0, 0);
        assert_true(n >= 0);
        break;
    case BK_MYSQL:
        break;
    }
    return n;
}

/*
 * Take the lock called name away from its holder behind the API: delete
 * its Redis keys or ZooKeeper node, or KILL the MySQL sessions of holder
 * (a pid). Asserts something was there to break.
 */
static void fx_break(struct fx *f, const char *name, pid_t holder)
{
    char base[300];
    long long n = 0;

    switch (f->b->kind) {
    case BK_REDIS:
    case BK_REDLOCK:
        n = redis_keys(fx_redis(f), f->u.nhosts, name, 1, 0, NULL);
        break;
    case BK_ZK:
        zk_base(f, base, sizeof(base));
        n = zk_walk(fx_zk(f), base, name, 1, 0, 0);
        break;
    case BK_MYSQL:
        n = (long long)it_sql_kill_sessions_of(holder, (uint16_t)fx_port(f, 0));
        break;
    }
    if (n <= 0)
        fail_msg("%s: found nothing of lock %s to break (%lld)", f->b->name,
                 name, n);
}

/* ---- stopped RedLock servers ---- */

/*
 * SIGSTOP pid. The first time, fork a guard that SIGCONTs every stopped
 * server when our end of its pipe closes: in the teardown, or when this
 * process dies.
 */
static void fx_stop_server(struct fx *f, pid_t pid)
{
    int32_t p = (int32_t)pid;
    int fds[2];

    assert_true(f->nstopped < URL_HOSTS_MAX);
    if (f->guard_fd < 0) {
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        f->guard_pid = fork();
        assert_true(f->guard_pid >= 0);
        if (f->guard_pid == 0) {
            pid_t got[URL_HOSTS_MAX];
            size_t n = 0, i;

            close(fds[1]);
            while (n < URL_HOSTS_MAX && read_full(fds[0], &p, sizeof(p)) == 0)
                got[n++] = (pid_t)p;
            for (i = 0; i < n; i++)
                kill(got[i], SIGCONT);
            _exit(0);
        }
        close(fds[0]);
        f->guard_fd = fds[1];
    }
    assert_int_equal(write_full(f->guard_fd, &p, sizeof(p)), 0);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    f->stopped[f->nstopped++] = pid;
}

static void fx_resume_servers(struct fx *f)
{
    int status;
    size_t i;

    for (i = 0; i < f->nstopped; i++)
        kill(f->stopped[i], SIGCONT);
    f->nstopped = 0;
    if (f->guard_fd >= 0) {
        close(f->guard_fd);
        f->guard_fd = -1;
        it_wait_exit(f->guard_pid, 5000, &status);
    }
}

/* ---- teardown ---- */

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    char base[300];
    size_t i;

    fx_resume_servers(f);
    for (i = 0; i < f->nagents; i++) {
        struct agent *ag = &f->agents[i];

        if (ag->to_fd >= 0)
            close(ag->to_fd);
        close(ag->from_fd);
        if (ag->pid > 0) {
            int status;

            if (ag->stopped)
                kill(ag->pid, SIGCONT);
            if (it_wait_exit(ag->pid, 5000, &status) != 0)
                agent_kill(ag);
        }
    }
    for (i = 0; i < f->nproxies; i++)
        it_proxy_ctl(&f->proxies[i], "heal");
    while (f->nlocks > 0)
        lock_free(f->locks[--f->nlocks]);
    for (i = 0; i < f->nclients; i++)
        lock_client_close(f->clients[i]);
    lock_client_close(f->c);
    for (i = 0; i < f->nfds; i++)
        close(f->fds[i]);
    for (i = 0; i < f->nproxies; i++)
        it_proxy_stop(&f->proxies[i]);

    /* Every script this process sent had its keys in one hash slot, as a
     * Redis Cluster requires (every kind, every call, errors included). */
    assert_int_equal(0, redis_script_crossslot_calls());

    /* What the backends keep of our names: lock keys, fence counters. */
    if (f->b->kind == BK_REDIS || f->b->kind == BK_REDLOCK) {
        for (i = 0; i < (size_t)f->u.nhosts; i++) {
            if (f->rc[i] && f->rc[i]->err) {
                redisFree(f->rc[i]);
                f->rc[i] = NULL;
            }
            if (!f->rc[i])
                f->rc[i] = raw_redis_open(f, (int)i);
            if (f->rc[i])
                redis_keys(&f->rc[i], 1, f->prefix, 1, 1, NULL);
            redisFree(f->rc[i]);
        }
    }
    if (f->b->kind == BK_ZK && !f->why_not[0]) {
        if (!f->zh)
            f->zh = raw_zk_open(f);
        if (f->zh) {
            zk_base(f, base, sizeof(base));
            zk_walk(f->zh, base, f->prefix, 1, 1, 0);
            zookeeper_close(f->zh);
        }
    }
    if (f->used_table)
        it_sql_exec("DELETE FROM fenced_resource WHERE name LIKE '%s%%'",
                    f->prefix);
    /* The MySQL backend's fence rows (keyed by the name; no error if the
     * table is not there). */
    if (f->b->kind == BK_MYSQL && !f->why_not[0])
        it_sql_exec("DELETE FROM lock_fences WHERE name LIKE '%s%%'",
                    f->prefix);
    free(f);
    return 0;
}

/* ---- 1. mutual exclusion ---- */

/* The shared counter, in a file: the count and the last fence seen. */
struct mx_slot {
    int64_t count;
    uint64_t fence;
};

struct mx_proc {
    struct lock_client *c; /* NULL: no lock */
    const char *name;
    int fd;
    atomic_int err;
};

static void mx_fail(struct mx_proc *p, int code, const char *what, int rc)
{
    int none = 0;

    if (atomic_compare_exchange_strong(&p->err, &none, code))
        fprintf(stderr, "test_lock: mutual exclusion child %ld: %s (%d, %s)\n",
                (long)getpid(), what, rc, rc_str(rc));
}

/*
 * One thread: MX_ITERS times take the lock (its own struct lock), read the
 * counter, sleep, write it back plus one; check the fence grew past the
 * last one written. Without a client it skips the lock.
 */
static void *mx_thread(void *arg)
{
    struct mx_proc *p = arg;
    struct lock *l = NULL;
    int i, rc;

    if (p->c && (rc = lock_new(p->c, p->name, &l)) != 0) {
        mx_fail(p, 31, "lock_new", rc);
        return NULL;
    }
    for (i = 0; i < MX_ITERS && !atomic_load(&p->err); i++) {
        enum lock_status st = LOCK_BUSY;
        struct mx_slot s;
        int held = -1;

        if (l) {
            rc = lock_acquire(l, 60000, LONG_LEASE_MS, &st);
            if (rc != 0 || st != LOCK_ACQUIRED) {
                mx_fail(p, 32, "acquire (60 s wait)", rc);
                break;
            }
        }
        if (pread(p->fd, &s, sizeof(s), 0) != (ssize_t)sizeof(s)) {
            mx_fail(p, 33, "pread", -errno);
            break;
        }
        if (l) {
            if (lock_fence(l) <= s.fence) {
                mx_fail(p, 34, "fence did not grow", (int)lock_fence(l));
                break;
            }
            s.fence = lock_fence(l);
        }
        usleep(MX_HOLD_US);
        s.count++;
        if (pwrite(p->fd, &s, sizeof(s), 0) != (ssize_t)sizeof(s)) {
            mx_fail(p, 35, "pwrite", -errno);
            break;
        }
        if (l && ((rc = lock_release(l, &held)) != 0 || held != 1)) {
            mx_fail(p, 36, "release not held", rc ? rc : held);
            break;
        }
    }
    lock_free(l);
    return NULL;
}

/* One process: a client shared by MX_THREADS threads; starts when the
 * barrier pipe reaches EOF. Returns the exit code. */
static int mx_child(const struct fx *f, const char *name, int fd, int use_lock,
                    int barrier)
{
    pthread_t th[MX_THREADS];
    struct mx_proc p = {.name = name, .fd = fd};
    char b;
    int i, rc;

    atomic_init(&p.err, 0);
    if (use_lock && (rc = lock_client_open(f->url, &f->opt, &p.c)) != 0)
        return 20;
    if (read(barrier, &b, 1) != 0)
        return 21;
    for (i = 0; i < MX_THREADS; i++)
        if (pthread_create(&th[i], NULL, mx_thread, &p) != 0)
            return 22;
    for (i = 0; i < MX_THREADS; i++)
        pthread_join(th[i], NULL);
    lock_client_close(p.c);
    return atomic_load(&p.err);
}

/* Run the workload in MX_PROCS processes; returns the final slot. */
static struct mx_slot mx_run(struct fx *f, const char *name, int use_lock,
                             int64_t *ms)
{
    char path[] = "/tmp/it-lock-counter-XXXXXX";
    struct mx_slot s = {0};
    pid_t pids[MX_PROCS];
    int codes[MX_PROCS], barrier[2], fd, i, status;
    int64_t t0;
    char why[64];

    fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(pwrite(fd, &s, sizeof(s), 0), (ssize_t)sizeof(s));
    assert_int_equal(pipe(barrier), 0);
    fflush(NULL);
    for (i = 0; i < MX_PROCS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            alarm(CHILD_ALARM_S);
            close(barrier[1]);
            _exit(mx_child(f, name, fd, use_lock, barrier[0]));
        }
    }
    close(barrier[0]);
    /* Let the children connect, then start them together. */
    sleep_ms(100);
    t0 = mono_us();
    close(barrier[1]);
    /* Reap every child before failing, so none outlives the test. */
    for (i = 0; i < MX_PROCS; i++) {
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
            ;
        codes[i] = status;
    }
    *ms = (mono_us() - t0) / 1000;
    for (i = 0; i < MX_PROCS; i++)
        if (!WIFEXITED(codes[i]) || WEXITSTATUS(codes[i]) != 0)
            fail_msg("child %d %s (see its message above)", i,
                     describe_status(codes[i], why, sizeof(why)));
    assert_int_equal(pread(fd, &s, sizeof(s), 0), (ssize_t)sizeof(s));
    close(fd);
    return s;
}

/*
 * MX_PROCS processes x MX_THREADS threads (a struct lock each, one client
 * per process) increment a counter in a file with a read-sleep-write under
 * the lock: no update is lost, and every hold's fence is higher than the
 * one before it, across processes. The same workload without the lock
 * loses updates, so the first check means something.
 */
static void test_mutual_exclusion(void **state)
{
    struct fx *f = fx_begin(state);
    const long long total = (long long)MX_PROCS * MX_THREADS * MX_ITERS;
    char name[LOCK_NAME_MAX + 1];
    struct mx_slot s;
    int64_t ms;

    fx_name(f, "mutex", name);
    s = mx_run(f, name, 1, &ms);
    print_message("      with the lock: %lld of %lld in %lld ms, last fence "
                  "%" PRIu64 "\n",
                  (long long)s.count, total, (long long)ms, s.fence);
    assert_int_equal(s.count, total);

    s = mx_run(f, name, 0, &ms);
    print_message("      without the lock: %lld of %lld in %lld ms\n",
                  (long long)s.count, total, (long long)ms);
    assert_true(s.count < total);
}

/* ---- 2. only the owner releases ---- */

/*
 * Another struct lock with the holder's name can neither release nor take
 * the lock. Once the holder's hold ended behind its back (its lease ran
 * out; MySQL: its session was killed; ZooKeeper: its node deleted) and
 * someone else took the lock, the old holder's release reports it was not
 * ours and leaves the new holder's lock alone.
 */
static void test_only_owner_releases(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct agent_reply r;
    struct lock *b, *c;
    struct agent *a;
    uint64_t fence_a;
    int held = -1;

    fx_name(f, "owner", name);
    a = agent_start(f, name);
    r = agent_call(a, AG_ACQUIRE, 0, OWNER_LEASE_MS, 0);
    assert_agent_acquired(r);
    fence_a = r.fence;
    assert_true(fence_a > 0);

    b = fx_lock(f, name);
    assert_int_equal(lock_release(b, &held), -ENOLCK);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);
    assert_int_equal(lock_holds(b), 0);
    assert_int_equal(lock_fence(b), 0);

    if (f->b->kind == BK_REDIS || f->b->kind == BK_REDLOCK)
        sleep_until_us(r.t_us + (OWNER_LEASE_MS + 100) * 1000);
    else
        fx_break(f, name, a->pid);
    acquire_expect(b, 2000, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_true(lock_fence(b) > fence_a);

    r = agent_call(a, AG_RELEASE, 0, 0, 0);
    print_message("      old holder's release: %d (%s), held %d\n", r.rc,
                  rc_str(r.rc), r.held);
    assert_release_not_ours(r.rc, r.held);
    assert_int_equal(r.holds, 0);

    /* The new holder's lock survived the old holder's release. */
    c = fx_lock(f, name);
    acquire_expect(c, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(b);
    acquire_expect(c, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(c);
    agent_finish(a, 10000);
}

/* ---- 3. reentrancy ---- */

/*
 * Acquire three times, release three times: held all along with one fence;
 * a fourth release is -ENOLCK. A reentrant acquire also renews a fixed
 * lease.
 */
static void test_reentrancy(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct lock *a, *b;
    uint64_t fence;
    int held = -1;

    fx_name(f, "reentrant", name);
    a = fx_lock(f, name);
    b = fx_lock(f, name);
    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    fence = lock_fence(a);
    assert_true(fence > 0);
    assert_int_equal(lock_holds(a), 1);
    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_int_equal(lock_holds(a), 3);
    assert_int_equal(lock_fence(a), fence);
    assert_int_equal(lock_lost(a), 0);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);

    release_held(a);
    assert_int_equal(lock_holds(a), 2);
    release_held(a);
    assert_int_equal(lock_holds(a), 1);
    assert_int_equal(lock_fence(a), fence);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(a);
    assert_int_equal(lock_holds(a), 0);
    assert_int_equal(lock_fence(a), 0);
    assert_int_equal(lock_release(a, &held), -ENOLCK);
    assert_int_equal(lock_holds(a), 0);

    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_true(lock_fence(b) > fence);
    release_held(b);

    /* A reentrant acquire renews a fixed lease to its own length. */
    acquire_expect(a, 0, 400, LOCK_ACQUIRED);
    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    sleep_ms(700);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(a);
    release_held(a);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(b);
}

/* ---- 4. a holder killed with SIGKILL ---- */

/*
 * A holder process dies without releasing: the lock frees when its lease
 * runs out (Redis, RedLock), its session times out (ZooKeeper) or at once
 * (MySQL: the server ends the session with the connection), and a waiter
 * with a wait budget gets it then.
 */
static void test_killed_holder_frees(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    int64_t t_kill, t_got, after_kill, after_acquire;
    struct agent_reply r;
    struct lock *l, *probe;
    struct agent *a;

    fx_name(f, "killed", name);
    a = agent_start(f, name);
    r = agent_call(a, AG_ACQUIRE, 0, KILL_LEASE_MS, 0);
    assert_agent_acquired(r);
    agent_kill(a);
    t_kill = mono_us();

    l = fx_lock(f, name);
    if (f->b->kind != BK_MYSQL) {
        probe = fx_lock(f, name);
        acquire_expect(probe, 0, LONG_LEASE_MS, LOCK_BUSY);
    }
    acquire_expect(l, 15000, LONG_LEASE_MS, LOCK_ACQUIRED);
    t_got = mono_us();
    assert_true(lock_fence(l) > r.fence);
    after_kill = (t_got - t_kill) / 1000;
    after_acquire = (t_got - r.t_us) / 1000;
    print_message("      killed holder: lock taken %lld ms after SIGKILL, "
                  "%lld ms after the holder's acquire\n",
                  (long long)after_kill, (long long)after_acquire);
    switch (f->b->kind) {
    case BK_REDIS:
    case BK_REDLOCK:
        assert_true(after_acquire >= KILL_LEASE_MS - 100);
        assert_true(after_acquire <= KILL_LEASE_MS + EXPIRY_SLACK_MS);
        break;
    case BK_ZK:
        assert_true(after_kill >= ZK_SESSION_MS / 2);
        assert_true(after_kill <= ZK_SESSION_MS + ZK_EXPIRY_SLACK_MS);
        break;
    case BK_MYSQL:
        assert_true(after_kill <= FAIL_SLACK_MS);
        break;
    }
    release_held(l);
}

/* ---- 5. the watchdog ---- */

/*
 * Lease 0 (watchdog lease WD_LEASE_MS): held for 3x the lease, others stay
 * out and the lock is not lost. After the release nothing renews it: its
 * records are gone, the next holder's lease is left alone and the old
 * handle is not marked lost by a stale renewal.
 */
static void test_watchdog_keeps_then_stops(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    int is_redis = f->b->kind == BK_REDIS || f->b->kind == BK_REDLOCK;
    long long n, pttl = -1;
    int64_t until;
    struct lock *a, *b;
    unsigned probes = 0;

    fx_name(f, "watchdog", name);
    a = fx_lock(f, name);
    b = fx_lock(f, name);
    acquire_expect(a, 0, 0, LOCK_ACQUIRED);
    until = mono_us() + 3 * WD_LEASE_MS * 1000;
    while (mono_us() < until) {
        acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_lost(a), 0);
        if (is_redis) {
            /* Renewed to the watchdog's lease, not anything longer. */
            n = fx_lock_records(f, name, &pttl);
            assert_true(n >= 1);
            assert_true(pttl > 0 && pttl <= WD_LEASE_MS);
        }
        probes++;
        sleep_ms(100);
    }
    print_message("      held %d ms under a %d ms watchdog lease, %u probes "
                  "busy\n",
                  3 * WD_LEASE_MS, WD_LEASE_MS, probes);
    assert_int_equal(lock_holds(a), 1);
    release_held(a);
    assert_int_equal(lock_lost(a), 0);
    if (f->b->kind != BK_MYSQL)
        assert_int_equal(fx_lock_records(f, name, NULL), 0);

    acquire_expect(b, 0, 3000, LOCK_ACQUIRED);
    sleep_ms(WD_LEASE_MS + 200);
    /* A renewal of a's hold would now find b's lock and mark a lost. */
    assert_int_equal(lock_lost(a), 0);
    if (is_redis) {
        n = fx_lock_records(f, name, &pttl);
        assert_true(n >= 1);
        assert_true(pttl > 3000 - (WD_LEASE_MS + 200) - 400);
    }
    release_held(b);
    if (f->b->kind != BK_MYSQL) {
        sleep_ms(WD_LEASE_MS / 2);
        assert_int_equal(fx_lock_records(f, name, NULL), 0);
    }
}

/*
 * A watched lock deleted behind its holder's back (Redis keys, the
 * ZooKeeper node, the MySQL session) is marked lost within a renewal
 * period; a reentrant acquire then fails with -ENOLCK and others can take
 * the lock.
 */
static void test_watchdog_detects_loss(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct agent_reply r;
    struct agent *a;
    struct lock *b;
    int64_t t_break, ms;

    fx_name(f, "lost", name);
    a = agent_start(f, name);
    r = agent_call(a, AG_ACQUIRE, 0, 0, 0);
    assert_agent_acquired(r);
    /* Let a renewal or two pass first: renewing works. */
    sleep_ms(WD_LEASE_MS / 2);
    r = agent_call(a, AG_STATE, 0, 0, 0);
    assert_int_equal(r.lost, 0);

    agent_send(a, AG_WAIT_LOST, 0, 0, 5000);
    fx_break(f, name, a->pid);
    t_break = mono_us();
    r = agent_recv(a, AGENT_REPLY_MS);
    ms = (r.t_us - t_break) / 1000;
    print_message("      lock deleted behind its back: marked lost after "
                  "%lld ms (renewals every %d ms)\n",
                  (long long)(ms < 0 ? 0 : ms), WD_LEASE_MS / 3);
    assert_int_equal(r.lost, 1);
    assert_true(ms <= WD_LEASE_MS / 3 + 400);

    r = agent_call(a, AG_ACQUIRE, 0, 0, 0);
    assert_int_equal(r.rc, -ENOLCK);
    r = agent_call(a, AG_RELEASE, 0, 0, 0);
    assert_release_not_ours(r.rc, r.held);
    assert_int_equal(r.holds, 0);

    b = fx_lock(f, name);
    acquire_expect(b, 2000, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(b);
    agent_finish(a, 10000);
}

/* ---- 6. fencing ---- */

/* The guarded table and name's row (value 0, fence 0). */
static void fenced_table_prepare(struct fx *f, const char *name)
{
    assert_int_equal(it_sql_exec("CREATE TABLE IF NOT EXISTS fenced_resource ("
                                 "name VARCHAR(64) PRIMARY KEY, "
                                 "value BIGINT NOT NULL, "
                                 "fence BIGINT UNSIGNED NOT NULL)"),
                     0);
    f->used_table = 1;
    assert_int_equal(it_sql_exec("REPLACE INTO fenced_resource VALUES "
                                 "('%s', 0, 0)",
                                 name),
                     0);
}

/*
 * Holder A is paused (SIGSTOP) until its lock is gone: its lease runs out
 * (Redis, RedLock), its session expires (ZooKeeper), or (MySQL, whose
 * session outlives a pause) its sessions are KILLed. B takes the lock with
 * a higher token and writes; A resumes and writes with its old token: the
 * guarded UPDATE refuses it and the row keeps B's value. A's exit does not
 * free B's lock.
 */
static void test_fencing_rejects_stale_holder(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    const struct store_config *sc = it_store_config();
    struct agent_reply r;
    struct lock *b, *c;
    struct agent *a;
    uint64_t fence_a, fence_b;
    int64_t ms;

    agent_sc = sc;
    fx_name(f, "fenced", name);
    fenced_table_prepare(f, name);
    a = agent_start(f, name);
    r = agent_call(a, AG_ACQUIRE, 0, FENCE_LEASE_MS, 0);
    assert_agent_acquired(r);
    fence_a = r.fence;

    agent_signal(a, SIGSTOP);
    if (f->b->kind == BK_MYSQL)
        fx_break(f, name, a->pid);
    b = fx_lock(f, name);
    ms = acquire_expect(b, 15000, LONG_LEASE_MS, LOCK_ACQUIRED);
    fence_b = lock_fence(b);
    print_message("      paused holder's lock taken after %lld ms; tokens "
                  "%" PRIu64 " then %" PRIu64 "\n",
                  (long long)ms, fence_a, fence_b);
    assert_true(fence_b > fence_a);
    assert_int_equal(fenced_write(sc, name, 2, fence_b), 1);

    agent_signal(a, SIGCONT);
    r = agent_call(a, AG_WRITE, 0, 0, 1);
    assert_int_equal(r.fence, fence_a);
    assert_int_equal(r.value, 0);
    assert_int_equal(
        it_sql_scalar("SELECT value FROM fenced_resource WHERE name = '%s'",
                      name),
        2);
    assert_int_equal(
        it_sql_scalar("SELECT fence FROM fenced_resource WHERE name = '%s'",
                      name),
        (int64_t)fence_b);

    /* A frees its stale hold on exit: that must not free B's lock. */
    agent_finish(a, 10000);
    c = fx_lock(f, name);
    acquire_expect(c, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(b);
}

/* ---- 7. RedLock's quorum ---- */

/*
 * With one of three servers stopped, acquire and release work; with two
 * stopped, acquire fails with an error within a bounded time; once they
 * are back, locks work again.
 */
static void test_redlock_quorum(void **state)
{
    struct fx *f = fx_begin(state);
    const int64_t bound = 2LL * f->u.nhosts * TIMEOUT_MS + FAIL_SLACK_MS;
    char name[LOCK_NAME_MAX + 1], path[64];
    pid_t pids[URL_HOSTS_MAX];
    enum lock_status st;
    struct lock *a, *b, *c, *d;
    int64_t t0, ms;
    int i, rc;

    assert_true(f->u.nhosts >= 3);
    for (i = 0; i < f->u.nhosts; i++) {
        snprintf(path, sizeof(path), ".run/redlock-%u.pid", fx_port(f, i));
        pids[i] = it_pidfile_read(path);
        if (pids[i] <= 0 || kill(pids[i], 0) != 0)
            fail_msg("no running redis-server in %s", path);
    }

    fx_stop_server(f, pids[0]);
    fx_name(f, "quorum", name);
    a = fx_lock(f, name);
    b = fx_lock(f, name);
    ms = acquire_expect(a, 0, 5000, LOCK_ACQUIRED);
    print_message("      one server stopped: acquire in %lld ms\n",
                  (long long)ms);
    assert_true(ms <= bound);
    acquire_expect(b, 0, 5000, LOCK_BUSY);
    release_held(a);
    acquire_expect(b, 0, 5000, LOCK_ACQUIRED);
    release_held(b);

    fx_stop_server(f, pids[1]);
    fx_name(f, "quorum-lost", name);
    c = fx_lock(f, name);
    t0 = mono_us();
    rc = lock_acquire(c, 0, 5000, &st);
    ms = (mono_us() - t0) / 1000;
    print_message("      two servers stopped: acquire = %d (%s) in %lld ms\n",
                  rc, rc_str(rc), (long long)ms);
    assert_true(rc < 0);
    assert_int_not_equal(rc, -EINVAL);
    assert_int_equal(lock_holds(c), 0);
    assert_true(ms <= bound);
    t0 = mono_us();
    rc = lock_acquire(c, 500, 5000, &st);
    ms = (mono_us() - t0) / 1000;
    print_message("      ... with a 500 ms wait: %d (%s) in %lld ms\n", rc,
                  rc_str(rc), (long long)ms);
    assert_true(rc < 0);
    assert_true(ms <= 500 + bound);

    fx_resume_servers(f);
    fx_name(f, "quorum-back", name);
    d = fx_lock(f, name);
    acquire_expect(d, 3000, 5000, LOCK_ACQUIRED);
    release_held(d);
}

/* ---- 8. wake-up ---- */

/*
 * A waiter in another process, blocked with a 5 s budget, takes the lock
 * within HANDOVER_MAX_MS of its release: woken by the release, not by its
 * retry timer.
 */
static void test_release_wakes_waiter(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    int64_t handover[HANDOVER_ROUNDS], worst = 0, t0;
    struct agent_reply r;
    struct agent *w;
    struct lock *a;
    int i;

    fx_name(f, "wakeup", name);
    w = agent_start(f, name);
    a = fx_lock(f, name);
    for (i = 0; i < HANDOVER_ROUNDS; i++) {
        acquire_expect(a, 3000, LONG_LEASE_MS, LOCK_ACQUIRED);
        agent_send(w, AG_ACQUIRE, 5000, LONG_LEASE_MS, 0);
        /* Long enough for the waiter to be asleep on the lock. */
        sleep_ms(200 + 37 * i);
        t0 = mono_us();
        release_held(a);
        r = agent_recv(w, AGENT_REPLY_MS);
        assert_agent_acquired(r);
        handover[i] = r.t_us - t0;
        if (handover[i] > worst)
            worst = handover[i];
        r = agent_call(w, AG_RELEASE, 0, 0, 0);
        assert_int_equal(r.rc, 0);
        assert_int_equal(r.held, 1);
    }
    print_message("      release -> waiter's acquire:");
    for (i = 0; i < HANDOVER_ROUNDS; i++)
        print_message(" %.1f", (double)handover[i] / 1000.0);
    print_message(" ms\n");
    assert_true(worst < HANDOVER_MAX_MS * 1000);
    agent_finish(w, 10000);
}

/* ---- 9. a backend that is down ---- */

/* f's scheme and credentials with every host replaced by 127.0.0.1:port. */
static void down_url(const struct fx *f, const uint16_t *ports, char *buf,
                     size_t size)
{
    size_t len;
    int i;

    len = (size_t)snprintf(buf, size, "%s://", f->u.scheme);
    if (f->u.user[0] || f->u.has_pass)
        len += (size_t)snprintf(buf + len, size - len, "%s%s%s@", f->u.user,
                                f->u.has_pass ? ":" : "", f->u.pass);
    for (i = 0; i < f->u.nhosts; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s127.0.0.1:%u",
                                i ? "," : "", (unsigned)ports[i]);
    len += (size_t)snprintf(buf + len, size - len, "%s%s?timeout_ms=%u",
                            f->u.path[0] ? "/" : "", f->u.path, TIMEOUT_MS);
    if (f->b->kind == BK_ZK)
        snprintf(buf + len, size - len, "&session_ms=%u", ZK_SESSION_MS);
}

/* Acquire a lock of kind ks through url in an agent (a hang there cannot
 * hang the test): errors within the bound, and the client closes quickly. */
static void check_down_kind(struct fx *f, const char *what, const char *url,
                            struct kind_spec ks)
{
    const int64_t bound =
        2LL * TIMEOUT_MS * (f->b->kind == BK_REDLOCK ? f->u.nhosts : 1) +
        FAIL_SLACK_MS;
    char name[LOCK_NAME_MAX + 1];
    struct agent_reply r;
    struct agent *ag;
    int64_t ms;

    fx_name(f, "down", name);
    ag = agent_start_kind(f, url, ks, name);
    r = agent_call(ag, AG_ACQUIRE, 0, 1000, 0);
    ms = (r.t_us - r.t0_us) / 1000;
    print_message("      %s, %s: acquire = %d (%s) in %lld ms\n", what,
                  kind_str(ks.kind), r.rc, rc_str(r.rc), (long long)ms);
    assert_true(r.rc < 0);
    assert_int_not_equal(r.rc, -EINVAL);
    assert_int_equal(r.holds, 0);
    assert_true(ms <= bound);

    r = agent_call(ag, AG_ACQUIRE, 1000, 1000, 0);
    ms = (r.t_us - r.t0_us) / 1000;
    print_message("      %s, %s: acquire with a 1 s wait = %d (%s) in %lld "
                  "ms\n",
                  what, kind_str(ks.kind), r.rc, rc_str(r.rc), (long long)ms);
    assert_true(r.rc < 0);
    assert_int_not_equal(r.rc, -EINVAL);
    assert_true(ms <= 1000 + bound);

    ms = agent_finish(ag, 10000);
    print_message("      %s, %s: client closed in %lld ms\n", what,
                  kind_str(ks.kind), (long long)ms);
    assert_true(ms <= bound);
}

/* The same for the mutex and, where offered, every other kind. */
static void check_down(struct fx *f, const char *what, const char *url)
{
    static const struct kind_spec kinds[] = {
        {LOCK_KIND_MUTEX, 0}, {LOCK_KIND_FAIR, 0},      {LOCK_KIND_READ, 0},
        {LOCK_KIND_WRITE, 0}, {LOCK_KIND_SEMAPHORE, 2},
    };

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (i == 0 || f->b->all_kinds)
            check_down_kind(f, what, url, kinds[i]);
}

/*
 * A client for a port nobody listens on, and for one that accepts but
 * never answers (a stopped server): acquire returns an error (not -EINVAL,
 * not BUSY) within about the timeouts, never hangs.
 */
static void test_backend_down_fails_fast(void **state)
{
    struct fx *f = fx_begin(state);
    uint16_t ports[URL_HOSTS_MAX];
    char url[1024];
    int i, fd;

    for (i = 0; i < f->u.nhosts; i++) {
        ports[i] = it_free_port();
        assert_int_not_equal(ports[i], 0);
    }
    down_url(f, ports, url, sizeof(url));
    check_down(f, "closed port", url);

    for (i = 0; i < f->u.nhosts; i++) {
        assert_true(f->nfds < FX_FDS_MAX);
        fd = it_blackhole_listen(&ports[i]);
        assert_true(fd >= 0);
        f->fds[f->nfds++] = fd;
    }
    down_url(f, ports, url, sizeof(url));
    check_down(f, "silent server", url);
}

/* ---- 10. input checks ---- */

/*
 * Names: empty, NULL or longer than LOCK_NAME_MAX are -EINVAL. Any other
 * bytes work and stay distinct: two LOCK_NAME_MAX names differing only in
 * their last byte, and names with '/', "..", '%', spaces, UTF-8 and
 * non-UTF-8 bytes are separate locks (no truncation, no encoding clash),
 * each excluding a second owner of the same name.
 */
static void test_names_checked(void **state)
{
    static const char *const odd[] = {
        "x/y", "x_y", "x%2Fy",     "x%2fy",     "x y",       "x/../y", "/x",
        "x/",  "x.",  "x\xc3\xa9", "x\x01\xff", "x\x01\xfe", "x\\y",   "x\ny",
    };
    enum { NODD = sizeof(odd) / sizeof(odd[0]) };
    struct fx *f = fx_begin(state);
    struct lock_client *c = fx_client(f);
    char name[LOCK_NAME_MAX + 2], name2[LOCK_NAME_MAX + 1];
    struct lock *l = NULL, *l1, *l2, *dup, *mine[NODD];
    size_t plen = strlen(f->prefix), i;

    assert_string_equal(lock_client_backend(c), f->b->name);
    assert_int_equal(lock_new(c, "", &l), -EINVAL);
    assert_int_equal(lock_new(c, NULL, &l), -EINVAL);
    memset(name, 'n', sizeof(name));
    memcpy(name, f->prefix, plen);
    name[LOCK_NAME_MAX + 1] = '\0';
    assert_int_equal(lock_new(c, name, &l), -EINVAL);

    /* Longest names, differing in the last byte only. */
    name[LOCK_NAME_MAX] = '\0';
    name[LOCK_NAME_MAX - 1] = 'A';
    memcpy(name2, name, sizeof(name2));
    name2[LOCK_NAME_MAX - 1] = 'B';
    l1 = fx_lock(f, name);
    l2 = fx_lock(f, name2);
    assert_string_equal(lock_name(l1), name);
    assert_int_equal(strlen(lock_owner(l1)), 32);
    assert_int_equal(strspn(lock_owner(l1), "0123456789abcdefABCDEF"), 32);
    assert_string_not_equal(lock_owner(l1), lock_owner(l2));
    acquire_expect(l1, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    acquire_expect(l2, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    dup = fx_lock(f, name);
    acquire_expect(dup, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(l1);
    release_held(l2);

    for (i = 0; i < NODD; i++) {
        fx_name(f, odd[i], name);
        mine[i] = fx_lock(f, name);
        acquire_expect(mine[i], 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    }
    for (i = 0; i < NODD; i++) {
        fx_name(f, odd[i], name);
        dup = fx_lock(f, name);
        acquire_expect(dup, 0, LONG_LEASE_MS, LOCK_BUSY);
    }
    for (i = 0; i < NODD; i++)
        release_held(mine[i]);
}

/* Asserts lock_client_open(url) is -EINVAL. */
#define url_refused(url) url_refused_at((url), __FILE__, __LINE__)
static void url_refused_at(const char *url, const char *file, int line)
{
    struct lock_client *c = NULL;
    int rc = lock_client_open(url, NULL, &c);

    if (rc != -EINVAL) {
        print_error("lock_client_open(\"%s\") = %d (%s), expected -EINVAL\n",
                    url ? url : "(null)", rc, rc_str(rc));
        if (rc == 0)
            lock_client_close(c);
        _fail(file, line);
    }
}

/* Asserts lock_client_open(url) works (no I/O: nothing needs to listen). */
#define url_accepted(url) url_accepted_at((url), __FILE__, __LINE__)
static void url_accepted_at(const char *url, const char *file, int line)
{
    struct lock_client *c = NULL;
    int rc = lock_client_open(url, NULL, &c);

    if (rc != 0) {
        print_error("lock_client_open(\"%s\") = %d (%s), expected 0\n", url, rc,
                    rc_str(rc));
        _fail(file, line);
    }
    lock_client_close(c);
}

/*
 * URLs: no scheme, an unknown one, no host, a bad port, an unknown or
 * malformed setting are -EINVAL; so are several hosts for a one-server
 * backend, a Redis database that is not a number, and for RedLock fewer
 * than three servers (two cannot outlive a failure) or more than
 * URL_HOSTS_MAX. Each bad URL differs from a good one in one place.
 */
static void test_urls_checked(void **state)
{
    struct fx *f = fx_begin(state);
    const char *s = f->u.scheme;
    const char *who = f->b->kind == BK_MYSQL ? "u:p@" : "";
    /* RedLock needs three hosts: the last one is the one made bad. */
    const char *more =
        f->b->kind == BK_REDLOCK ? "127.0.0.1:1,127.0.0.1:2," : "";
    const char *tail = f->b->kind == BK_ZK      ? "/locks"
                       : f->b->kind == BK_MYSQL ? "/db"
                       : f->b->cluster          ? ""
                                                : "/0";
    char url[1024];

    url_refused(NULL);
    url_refused("");
    url_refused("127.0.0.1:6379");
    url_refused("nosuch://127.0.0.1:1/0");
    snprintf(url, sizeof(url), "%s", s);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://", s);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s", s, who, tail);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s:1%s", s, who, more, tail);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s127.0.0.1:99999%s", s, who, more,
             tail);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s127.0.0.1:12ab%s", s, who, more, tail);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s127.0.0.1:3%s?bogus=1", s, who, more,
             tail);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s127.0.0.1:3%s?timeout_ms=abc", s, who,
             more, tail);
    url_refused(url);
    snprintf(url, sizeof(url), "%s://%s%s127.0.0.1:3%s?timeout_ms=", s, who,
             more, tail);
    url_refused(url);

    /* The good one they all differ from (no I/O at open). */
    snprintf(url, sizeof(url), "%s://%s%s127.0.0.1:3%s?timeout_ms=100", s, who,
             more, tail);
    url_accepted(url);
    switch (f->b->kind) {
    case BK_REDIS:
        if (f->b->cluster) {
            /* A cluster has only database 0, and no one server to WAIT
             * for. */
            url_refused("redis-cluster://127.0.0.1:1,127.0.0.1:2/1");
            url_refused("redis-cluster://127.0.0.1:1?replicas=1");
            url_accepted("redis-cluster://127.0.0.1:1,127.0.0.1:2,"
                         "127.0.0.1:3?timeout_ms=100");
            break;
        }
        url_refused("redis://127.0.0.1:1/notadb");
        url_refused("redis://127.0.0.1:1,127.0.0.1:2/0");
        break;
    case BK_MYSQL:
        url_refused("mysql://u:p@127.0.0.1:1,127.0.0.1:2/db");
        break;
    case BK_REDLOCK:
        url_refused("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/notadb");
        url_refused("redlock://127.0.0.1:1/0");
        url_refused("redlock://127.0.0.1:1,127.0.0.1:2/0");
        url_refused("redlock://127.0.0.1:1,,127.0.0.1:3/0");
        url_refused("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,"
                    "127.0.0.1:4,127.0.0.1:5,127.0.0.1:6,127.0.0.1:7,"
                    "127.0.0.1:8,127.0.0.1:9,127.0.0.1:10/0");
        break;
    case BK_ZK:
        url_refused("zookeeper://127.0.0.1:1/locks?session_ms=abc");
        break;
    }
}

/* ---- 11. kinds a backend does not offer ---- */

/*
 * RedLock and MySQL refuse the fair, read-write and semaphore kinds with
 * -ENOTSUP (no I/O), and leave the out-pointers alone.
 */
static void test_kinds_refused(void **state)
{
    struct fx *f = fx_begin(state);
    struct lock_client *c = fx_client(f);
    struct lock *l = NULL, *r = NULL, *w = NULL;
    char name[LOCK_NAME_MAX + 1];

    fx_name(f, "kinds", name);
    assert_int_equal(lock_fair_new(c, name, &l), -ENOTSUP);
    assert_int_equal(lock_rw_new(c, name, &r, &w), -ENOTSUP);
    assert_int_equal(lock_semaphore_new(c, name, 3, &l), -ENOTSUP);
    assert_null(l);
    assert_null(r);
    assert_null(w);
    /* The mutex is still there, and several of them make a multi-lock. */
    l = fx_lock(f, name);
    acquire_expect(l, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(l);
}

/* ---- shared helpers of the kind tests ---- */

/* Zeroed memory shared with forked children. */
static void *shared_map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    assert_true(p != MAP_FAILED);
    memset(p, 0, size);
    return p;
}

/* Raise *max to v. */
static void atomic_max(atomic_int *max, int v)
{
    int cur = atomic_load(max);

    while (v > cur && !atomic_compare_exchange_weak(max, &cur, v))
        ;
}

/* 1 if the agent has an answer waiting (it finished its command). */
static int agent_answered(struct agent *ag)
{
    struct pollfd pfd = {.fd = ag->from_fd, .events = POLLIN};

    return ag->pid > 0 && poll(&pfd, 1, 0) > 0;
}

/*
 * Run n forked children, each fn(arg, i), started together; fail if any
 * exits non-zero. Returns how long they took in ms.
 */
typedef int (*child_fn)(void *arg, int index);

static int64_t run_children(int n, child_fn fn, void *arg)
{
    pid_t pids[16];
    int status[16], barrier[2], i;
    int64_t t0;
    char why[64], b;

    assert_true(n <= 16);
    assert_int_equal(pipe(barrier), 0);
    fflush(NULL);
    for (i = 0; i < n; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            alarm(CHILD_ALARM_S);
            close(barrier[1]);
            if (read(barrier[0], &b, 1) != 0)
                _exit(21);
            _exit(fn(arg, i));
        }
    }
    close(barrier[0]);
    sleep_ms(50);
    t0 = mono_us();
    close(barrier[1]);
    for (i = 0; i < n; i++)
        while (waitpid(pids[i], &status[i], 0) < 0 && errno == EINTR)
            ;
    for (i = 0; i < n; i++)
        if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
            fail_msg("child %d %s (see its message above)", i,
                     describe_status(status[i], why, sizeof(why)));
    return (mono_us() - t0) / 1000;
}

/* ---- 12. the fair lock ---- */

#define FAIR_WAITERS 4
/* Between two waiters' first tries: their order in the queue. */
#define FAIR_GAP_MS 300
/* Release to the next live waiter's acquire, a dead waiter in between:
 * its check-in (Redis) or session (ZooKeeper) has to run out first. */
#define FAIR_DEAD_MAX_MS 6000
/* How long a waiter may take to answer at all: well past the above, so
 * that a slow machine fails the bound above with its figure rather than
 * this one with none. */
#define FAIR_ANSWER_MS 35000

/*
 * A holder and FAIR_WAITERS waiters in other processes, queued one after
 * the other; the second is SIGKILLed while it waits. Released, the lock
 * goes to the first waiter, then (once the dead one's place has lapsed)
 * the third, then the fourth: in the order they queued, each while the
 * later ones are still waiting. While the dead waiter still has its
 * place, a fail-fast acquire of a newcomer is refused although the lock
 * is free: it may not jump the queue.
 */
static void test_fair_order(void **state)
{
    static const int order[] = {0, 2, 3};
    const struct kind_spec ks = {LOCK_KIND_FAIR, 0};
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct agent *w[FAIR_WAITERS];
    int64_t t_rel, handover[3];
    struct agent_reply r;
    struct lock *h, *x;
    size_t k;
    int i;

    fx_name(f, "fair", name);
    h = fx_lock_kind(f, ks, name);
    x = fx_lock_kind(f, ks, name);
    acquire_expect(h, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    for (i = 0; i < FAIR_WAITERS; i++) {
        w[i] = agent_start_kind(f, f->url, ks, name);
        agent_send(w[i], AG_ACQUIRE, 30000, LONG_LEASE_MS, 0);
        sleep_ms(FAIR_GAP_MS);
    }
    agent_kill(w[1]);
    for (i = 0; i < FAIR_WAITERS; i++)
        assert_false(agent_answered(w[i]));

    t_rel = mono_us();
    release_held(h);
    for (k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        struct agent *e = w[order[k]];

        r = agent_recv(e, FAIR_ANSWER_MS);
        assert_agent_acquired(r);
        handover[k] = (r.t_us - t_rel) / 1000;
        for (size_t j = k + 1; j < sizeof(order) / sizeof(order[0]); j++)
            if (agent_answered(w[order[j]]))
                fail_msg("waiter %d got the lock before waiter %d", order[j],
                         order[k]);
        t_rel = mono_us();
        r = agent_call(e, AG_RELEASE, 0, 0, 0);
        assert_int_equal(r.rc, 0);
        assert_int_equal(r.held, 1);
        if (k == 0) {
            /* Free, but the dead waiter is still first in line. */
            acquire_expect(x, 0, LONG_LEASE_MS, LOCK_BUSY);
        }
    }
    print_message("      served in queue order 0, 2, 3 (1 killed): %lld, %lld "
                  "(past the dead one), %lld ms after each release\n",
                  (long long)handover[0], (long long)handover[1],
                  (long long)handover[2]);
    assert_true(handover[0] < HANDOVER_MAX_MS * 4);
    assert_true(handover[1] < FAIR_DEAD_MAX_MS);
    assert_true(handover[2] < HANDOVER_MAX_MS * 4);
    acquire_expect(x, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(x);
    for (i = 0; i < FAIR_WAITERS; i++)
        if (i != 1)
            agent_finish(w[i], 10000);
}

/* ---- 13. the read-write lock ---- */

#define RW_PROCS 3
#define RW_THREADS 3
#define RW_ITERS 30
#define RW_HOLD_US 300

/* The shared value: a writer sets a, sleeps, sets b; a reader reads a,
 * sleeps, reads b, and the two must match. */
struct rw_shared {
    _Atomic int64_t a, b;
    int64_t seq;
    atomic_int readers_in, writers_in, max_readers;
    atomic_int overlap, torn, reads, writes, err;
};

struct rw_run {
    const struct fx *f;
    const char *name;
    struct rw_shared *sh;
    int use_lock;
};

struct rw_thread_arg {
    struct rw_run *run;
    struct lock_client *c;
    int index;
};

static void rw_fail(struct rw_shared *sh, const char *what, int rc)
{
    int none = 0;

    if (atomic_compare_exchange_strong(&sh->err, &none, 40))
        fprintf(stderr, "test_lock: read-write child %ld: %s (%d, %s)\n",
                (long)getpid(), what, rc, rc_str(rc));
}

static void *rw_thread(void *arg)
{
    struct rw_thread_arg *ta = arg;
    struct rw_shared *sh = ta->run->sh;
    struct lock *r = NULL, *w = NULL;
    int rc, i;

    if (ta->c && (rc = lock_rw_new(ta->c, ta->run->name, &r, &w)) != 0) {
        rw_fail(sh, "lock_rw_new", rc);
        return NULL;
    }
    for (i = 0; i < RW_ITERS && !atomic_load(&sh->err); i++) {
        int write = (i + ta->index) % 5 == 0, held = -1;
        struct lock *l = write ? w : r;
        enum lock_status st = LOCK_BUSY;

        if (l && ((rc = lock_acquire(l, 60000, LONG_LEASE_MS, &st)) != 0 ||
                  st != LOCK_ACQUIRED)) {
            rw_fail(sh, "acquire (60 s wait)", rc);
            break;
        }
        if (write) {
            if (atomic_fetch_add(&sh->writers_in, 1) != 0 ||
                atomic_load(&sh->readers_in) != 0)
                atomic_fetch_add(&sh->overlap, 1);
            int64_t v = ++sh->seq;
            atomic_store_explicit(&sh->a, v, memory_order_relaxed);
            usleep(RW_HOLD_US);
            atomic_store_explicit(&sh->b, v, memory_order_relaxed);
            atomic_fetch_sub(&sh->writers_in, 1);
            atomic_fetch_add(&sh->writes, 1);
        } else {
            atomic_max(&sh->max_readers,
                       atomic_fetch_add(&sh->readers_in, 1) + 1);
            if (atomic_load(&sh->writers_in) != 0)
                atomic_fetch_add(&sh->overlap, 1);
            int64_t x = atomic_load_explicit(&sh->a, memory_order_relaxed);
            usleep(RW_HOLD_US);
            int64_t y = atomic_load_explicit(&sh->b, memory_order_relaxed);
            if (x != y)
                atomic_fetch_add(&sh->torn, 1);
            atomic_fetch_sub(&sh->readers_in, 1);
            atomic_fetch_add(&sh->reads, 1);
        }
        if (l && ((rc = lock_release(l, &held)) != 0 || held != 1)) {
            rw_fail(sh, "release not held", rc ? rc : held);
            break;
        }
    }
    lock_free(r);
    lock_free(w);
    return NULL;
}

static int rw_child(void *arg, int index)
{
    struct rw_run *run = arg;
    struct rw_thread_arg ta[RW_THREADS];
    pthread_t th[RW_THREADS];
    struct lock_client *c = NULL;
    int i, rc;

    if (run->use_lock &&
        (rc = lock_client_open(run->f->url, &run->f->opt, &c)) != 0)
        return 20;
    for (i = 0; i < RW_THREADS; i++) {
        ta[i] = (struct rw_thread_arg){run, c, index * RW_THREADS + i};
        if (pthread_create(&th[i], NULL, rw_thread, &ta[i]) != 0)
            return 22;
    }
    for (i = 0; i < RW_THREADS; i++)
        pthread_join(th[i], NULL);
    lock_client_close(c);
    return atomic_load(&run->sh->err);
}

/*
 * RW_PROCS processes x RW_THREADS threads (a read-write lock each) read
 * and write a two-part value: a writer sets one half, sleeps, sets the
 * other; a reader reads both halves around a sleep. Under the lock no
 * reader sees halves that differ, no writer meets anyone inside, and
 * readers are inside together (it is not a mutex). Without the lock the
 * readers see torn values, so the check means something.
 */
static void test_rw_exclusion(void **state)
{
    struct fx *f = fx_begin(state);
    const int total = RW_PROCS * RW_THREADS * RW_ITERS;
    char name[LOCK_NAME_MAX + 1];
    struct rw_shared *sh = shared_map(sizeof(*sh));
    struct rw_run run = {.f = f, .name = name, .sh = sh, .use_lock = 1};
    int64_t ms;

    fx_name(f, "rw", name);
    ms = run_children(RW_PROCS, rw_child, &run);
    print_message("      with the lock: %d reads, %d writes in %lld ms; "
                  "torn %d, overlaps %d, up to %d readers at once\n",
                  atomic_load(&sh->reads), atomic_load(&sh->writes),
                  (long long)ms, atomic_load(&sh->torn),
                  atomic_load(&sh->overlap), atomic_load(&sh->max_readers));
    assert_int_equal(atomic_load(&sh->reads) + atomic_load(&sh->writes), total);
    assert_int_equal(atomic_load(&sh->torn), 0);
    assert_int_equal(atomic_load(&sh->overlap), 0);
    assert_true(atomic_load(&sh->max_readers) >= 2);

    memset(sh, 0, sizeof(*sh));
    run.use_lock = 0;
    ms = run_children(RW_PROCS, rw_child, &run);
    print_message("      without the lock: torn %d, overlaps %d in %lld ms\n",
                  atomic_load(&sh->torn), atomic_load(&sh->overlap),
                  (long long)ms);
    assert_true(atomic_load(&sh->torn) > 0);
    munmap(sh, sizeof(*sh));
}

#define RS_READERS 3
#define RS_HOLD_MS 150
/* A reader that enters this long after the writer started waiting was
 * let past it. */
#define RS_MARGIN_MS 250
/* The writer's wait: the readers inside finish within RS_HOLD_MS; the
 * rest is wake-up and round trips, generous for the sanitizers. */
#define RS_WRITER_MAX_MS (RS_HOLD_MS + 2000)

struct rs_state {
    struct lock_client *c;
    const char *name;
    atomic_int stop, err, readers_in, entries, late_entries;
    atomic_llong writer_from_us, writer_got_us;
};

static void *rs_reader(void *arg)
{
    struct rs_state *rs = arg;
    struct lock *r = NULL, *w = NULL;
    int rc;

    if ((rc = lock_rw_new(rs->c, rs->name, &r, &w)) != 0) {
        atomic_store(&rs->err, rc);
        return NULL;
    }
    while (!atomic_load(&rs->stop)) {
        enum lock_status st = LOCK_BUSY;
        int held = -1;

        rc = lock_acquire(r, 20000, LONG_LEASE_MS, &st);
        if (rc != 0 || st != LOCK_ACQUIRED) {
            atomic_store(&rs->err, rc ? rc : -EBUSY);
            break;
        }
        int64_t now = mono_us(), from = atomic_load(&rs->writer_from_us);
        atomic_fetch_add(&rs->readers_in, 1);
        atomic_fetch_add(&rs->entries, 1);
        if (from && !atomic_load(&rs->writer_got_us) &&
            now > from + RS_MARGIN_MS * 1000)
            atomic_fetch_add(&rs->late_entries, 1);
        sleep_ms(RS_HOLD_MS);
        atomic_fetch_sub(&rs->readers_in, 1);
        if ((rc = lock_release(r, &held)) != 0 || held != 1) {
            atomic_store(&rs->err, rc ? rc : -ENOLCK);
            break;
        }
    }
    lock_free(r);
    lock_free(w);
    return NULL;
}

/*
 * RS_READERS threads read in overlapping turns (each holds RS_HOLD_MS and
 * comes straight back), so at any moment some reader is inside: a
 * read-preferring lock would keep a writer out for good. A writer asking
 * now gets the lock once the readers already inside leave: within about
 * one hold, no reader enters while it waits, none is inside while it
 * writes, and the readers go on afterwards.
 */
static void test_rw_writer_not_starved(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct rs_state rs = {0};
    pthread_t th[RS_READERS];
    struct lock *r, *w;
    int64_t t0, waited;
    int i, entries;

    fx_name(f, "starve", name);
    rs.c = fx_client(f);
    rs.name = name;
    for (i = 0; i < RS_READERS; i++) {
        assert_int_equal(pthread_create(&th[i], NULL, rs_reader, &rs), 0);
        sleep_ms(RS_HOLD_MS / RS_READERS);
    }
    sleep_ms(3 * RS_HOLD_MS);
    assert_true(atomic_load(&rs.readers_in) > 0);

    fx_lock_rw(f, name, &r, &w);
    t0 = mono_us();
    atomic_store(&rs.writer_from_us, t0);
    acquire_expect(w, 10000, LONG_LEASE_MS, LOCK_ACQUIRED);
    atomic_store(&rs.writer_got_us, mono_us());
    waited = (mono_us() - t0) / 1000;
    assert_int_equal(atomic_load(&rs.readers_in), 0);
    sleep_ms(RS_HOLD_MS);
    assert_int_equal(atomic_load(&rs.readers_in), 0);
    release_held(w);
    entries = atomic_load(&rs.entries);
    sleep_ms(3 * RS_HOLD_MS);
    atomic_store(&rs.stop, 1);
    for (i = 0; i < RS_READERS; i++)
        pthread_join(th[i], NULL);
    print_message("      writer waited %lld ms behind a stream of %d "
                  "readers holding %d ms each; readers let in after it "
                  "queued: %d; reads after it: %d\n",
                  (long long)waited, RS_READERS, RS_HOLD_MS,
                  atomic_load(&rs.late_entries),
                  atomic_load(&rs.entries) - entries);
    assert_int_equal(atomic_load(&rs.err), 0);
    assert_int_equal(atomic_load(&rs.late_entries), 0);
    assert_true(waited <= RS_WRITER_MAX_MS);
    assert_true(atomic_load(&rs.entries) > entries);
}

/*
 * One owner's read and write sides: reentrant writes; a downgrade (read
 * while writing, then release the write) keeps the lock shared with no
 * writer in between; an upgrade (write while only reading) is -EDEADLK at
 * once; every first acquire's fencing token is higher than the last. The
 * watchdog (lease 0) keeps a write and then a read lock for three leases
 * while another owner's writer stays out.
 */
static void test_rw_semantics(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct lock *r, *w, *r2, *w2, *r3, *w3;
    enum lock_status st;
    uint64_t f_w, f_r, f_w2;
    int64_t until;

    fx_name(f, "rwsem", name);
    fx_lock_rw(f, name, &r, &w);
    fx_lock_rw(f, name, &r2, &w2);
    fx_lock_rw(f, name, &r3, &w3);

    acquire_expect(w, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    acquire_expect(w, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_int_equal(lock_holds(w), 2);
    f_w = lock_fence(w);
    assert_true(f_w > 0);
    acquire_expect(r2, 0, LONG_LEASE_MS, LOCK_BUSY);
    acquire_expect(w2, 0, LONG_LEASE_MS, LOCK_BUSY);

    /* Downgrade. */
    acquire_expect(r, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    f_r = lock_fence(r);
    assert_true(f_r > f_w);
    release_held(w);
    release_held(w);
    assert_int_equal(lock_holds(w), 0);
    assert_int_equal(lock_holds(r), 1);
    acquire_expect(w3, 0, LONG_LEASE_MS, LOCK_BUSY);
    acquire_expect(r2, 0, LONG_LEASE_MS, LOCK_ACQUIRED);

    /* Upgrade: refused before any I/O, nothing changes. */
    assert_int_equal(lock_acquire(w, 1000, LONG_LEASE_MS, &st), -EDEADLK);
    assert_int_equal(lock_holds(w), 0);
    assert_int_equal(lock_holds(r), 1);
    acquire_expect(r, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_int_equal(lock_holds(r), 2);
    assert_int_equal(lock_fence(r), f_r);
    release_held(r);
    release_held(r);
    acquire_expect(w3, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(r2);
    acquire_expect(w2, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    f_w2 = lock_fence(w2);
    assert_true(f_w2 > f_r);
    release_held(w2);

    /* The watchdog keeps either side. */
    acquire_expect(w, 0, 0, LOCK_ACQUIRED);
    until = mono_us() + 3 * WD_LEASE_MS * 1000;
    while (mono_us() < until) {
        acquire_expect(r2, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_lost(w), 0);
        sleep_ms(100);
    }
    release_held(w);
    acquire_expect(r, 0, 0, LOCK_ACQUIRED);
    until = mono_us() + 3 * WD_LEASE_MS * 1000;
    while (mono_us() < until) {
        acquire_expect(w2, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_lost(r), 0);
        sleep_ms(100);
    }
    release_held(r);
    acquire_expect(w2, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_true(lock_fence(w2) > f_w2);
    release_held(w2);
    print_message("      tokens: write %" PRIu64
                  ", its downgraded read %" PRIu64 ", next writer %" PRIu64
                  "\n",
                  f_w, f_r, f_w2);

    /* A downgrade while another writer already waits: that writer stays
     * out until the downgraded reader is done, although it queued first. */
    const struct kind_spec wr = {LOCK_KIND_WRITE, 0};
    struct agent *q = agent_start_kind(f, f->url, wr, name);
    struct agent_reply rep;
    acquire_expect(w, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    agent_send(q, AG_ACQUIRE, 20000, LONG_LEASE_MS, 0);
    sleep_ms(300); /* queued behind w */
    acquire_expect(r, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(w);
    sleep_ms(500);
    assert_false(agent_answered(q));
    release_held(r);
    rep = agent_recv(q, 10000);
    assert_agent_acquired(rep);
    rep = agent_call(q, AG_RELEASE, 0, 0, 0);
    assert_int_equal(rep.held, 1);
    agent_finish(q, 10000);

    /* A downgrade needs the write lock still to be ours: taken away
     * behind our back and given to another writer, it does not let our
     * reader in beside that writer. */
    int held = -1;
    acquire_expect(w, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    fx_break(f, name, getpid());
    acquire_expect(w3, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    acquire_expect(r, 0, LONG_LEASE_MS, LOCK_BUSY);
    int rc = lock_release(w, &held);
    assert_release_not_ours(rc, held);
    release_held(w3);
}

/* ---- 14. the semaphore ---- */

#define SEM_PERMITS 3
#define SEM_PROCS 3
#define SEM_THREADS 3
#define SEM_ITERS 15
/* Long against an acquire (ZooKeeper's takes a mutex around the lease
 * count, a few ms under ASan), so that all the permits are held at once
 * at some point: the test checks they are. */
#define SEM_HOLD_US 20000

struct sem_shared {
    atomic_int inside, max, over, taken, err;
};

struct sem_run {
    const struct fx *f;
    const char *name;
    struct sem_shared *sh;
    struct lock_client *c;
};

static void *sem_thread(void *arg)
{
    struct sem_run *run = arg;
    struct sem_shared *sh = run->sh;
    struct lock *l = NULL;
    int rc, i;

    if ((rc = lock_semaphore_new(run->c, run->name, SEM_PERMITS, &l)) != 0) {
        atomic_store(&sh->err, 50);
        return NULL;
    }
    for (i = 0; i < SEM_ITERS && !atomic_load(&sh->err); i++) {
        enum lock_status st = LOCK_BUSY;
        int held = -1, n;

        rc = lock_acquire(l, 60000, LONG_LEASE_MS, &st);
        if (rc != 0 || st != LOCK_ACQUIRED) {
            fprintf(stderr, "test_lock: semaphore acquire: %d (%s)\n", rc,
                    rc_str(rc));
            atomic_store(&sh->err, 51);
            break;
        }
        n = atomic_fetch_add(&sh->inside, 1) + 1;
        atomic_max(&sh->max, n);
        if (n > SEM_PERMITS)
            atomic_fetch_add(&sh->over, 1);
        usleep(SEM_HOLD_US);
        atomic_fetch_sub(&sh->inside, 1);
        atomic_fetch_add(&sh->taken, 1);
        if ((rc = lock_release(l, &held)) != 0 || held != 1) {
            fprintf(stderr, "test_lock: semaphore release: %d held %d\n", rc,
                    held);
            atomic_store(&sh->err, 52);
            break;
        }
    }
    lock_free(l);
    return NULL;
}

static int sem_child(void *arg, int index)
{
    struct sem_run run = *(struct sem_run *)arg;
    pthread_t th[SEM_THREADS];
    int i;

    (void)index;
    if (lock_client_open(run.f->url, &run.f->opt, &run.c) != 0)
        return 20;
    for (i = 0; i < SEM_THREADS; i++)
        if (pthread_create(&th[i], NULL, sem_thread, &run) != 0)
            return 22;
    for (i = 0; i < SEM_THREADS; i++)
        pthread_join(th[i], NULL);
    lock_client_close(run.c);
    return atomic_load(&run.sh->err);
}

/*
 * SEM_PROCS processes x SEM_THREADS threads share a semaphore of
 * SEM_PERMITS permits: never more than that many inside at once, and
 * that many at some point (it is not a mutex).
 */
static void test_semaphore_limit(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct sem_shared *sh = shared_map(sizeof(*sh));
    struct sem_run run = {.f = f, .name = name, .sh = sh};
    int64_t ms;

    fx_name(f, "sem", name);
    ms = run_children(SEM_PROCS, sem_child, &run);
    print_message("      %d holds of %d permits by %d clients in %lld ms: "
                  "at most %d inside, %d times too many\n",
                  atomic_load(&sh->taken), SEM_PERMITS, SEM_PROCS * SEM_THREADS,
                  (long long)ms, atomic_load(&sh->max), atomic_load(&sh->over));
    assert_int_equal(atomic_load(&sh->taken),
                     SEM_PROCS * SEM_THREADS * SEM_ITERS);
    assert_int_equal(atomic_load(&sh->over), 0);
    assert_int_equal(atomic_load(&sh->max), SEM_PERMITS);
    munmap(sh, sizeof(*sh));
}

/* ---- 15. every kind: a SIGKILLed holder, the watchdog ---- */

/*
 * The holder of ks (a process) is SIGKILLed; a waiter of the kind that it
 * keeps out (waiter) gets in when the holder's lease ends (Redis) or its
 * session does (ZooKeeper).
 */
static void killed_holder_kind(struct fx *f, struct kind_spec ks,
                               struct kind_spec waiter, const char *suffix)
{
    char name[LOCK_NAME_MAX + 1];
    struct agent_reply r;
    struct agent *a;
    struct lock *l;
    int64_t t_kill, after_kill, after_acquire;

    fx_name(f, suffix, name);
    a = agent_start_kind(f, f->url, ks, name);
    r = agent_call(a, AG_ACQUIRE, 0, KILL_LEASE_MS, 0);
    assert_agent_acquired(r);
    agent_kill(a);
    t_kill = mono_us();
    l = fx_lock_kind(f, waiter, name);
    acquire_expect(l, 0, LONG_LEASE_MS, LOCK_BUSY);
    acquire_expect(l, 15000, LONG_LEASE_MS, LOCK_ACQUIRED);
    after_kill = (mono_us() - t_kill) / 1000;
    after_acquire = (mono_us() - r.t_us) / 1000;
    print_message("      %s holder killed: %s waiter in %lld ms after the "
                  "kill\n",
                  kind_str(ks.kind), kind_str(waiter.kind),
                  (long long)after_kill);
    if (f->b->kind == BK_REDIS) {
        assert_true(after_acquire >= KILL_LEASE_MS - 100);
        assert_true(after_acquire <= KILL_LEASE_MS + EXPIRY_SLACK_MS);
    } else {
        assert_true(after_kill >= ZK_SESSION_MS / 2);
        assert_true(after_kill <= ZK_SESSION_MS + ZK_EXPIRY_SLACK_MS);
    }
    assert_true(lock_fence(l) > r.fence);
    release_held(l);
}

/*
 * For the fair lock, both sides of the read-write lock and a semaphore's
 * permit: a crashed holder's lock (or permit) comes back. Then the
 * watchdog holds a semaphore's last permits for three leases while a
 * third client stays out.
 */
static void test_kinds_killed_holder(void **state)
{
    const struct kind_spec fair = {LOCK_KIND_FAIR, 0};
    const struct kind_spec rd = {LOCK_KIND_READ, 0};
    const struct kind_spec wr = {LOCK_KIND_WRITE, 0};
    const struct kind_spec sem1 = {LOCK_KIND_SEMAPHORE, 1};
    const struct kind_spec sem2 = {LOCK_KIND_SEMAPHORE, 2};
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct lock *p1, *p2, *p3;
    int64_t until;

    killed_holder_kind(f, fair, fair, "k-fair");
    killed_holder_kind(f, wr, rd, "k-write");
    killed_holder_kind(f, rd, wr, "k-read");
    killed_holder_kind(f, sem1, sem1, "k-sem");

    fx_name(f, "k-sem-wd", name);
    p1 = fx_lock_kind(f, sem2, name);
    p2 = fx_lock_kind(f, sem2, name);
    p3 = fx_lock_kind(f, sem2, name);
    acquire_expect(p1, 0, 0, LOCK_ACQUIRED);
    acquire_expect(p2, 0, 0, LOCK_ACQUIRED);
    until = mono_us() + 3 * WD_LEASE_MS * 1000;
    while (mono_us() < until) {
        acquire_expect(p3, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_lost(p1) | lock_lost(p2), 0);
        sleep_ms(100);
    }
    release_held(p1);
    acquire_expect(p3, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(p2);
    release_held(p3);
}

/* ---- 15b. many locks at once ---- */

/*
 * lock_acquire_many(), the purchase engine's batch of per-user locks:
 * each free lock is taken and a held one reported busy, in one call; the
 * locks taken exclude others like any hold and come back with
 * lock_release_many(). They carry no fencing token (lock_fence() 0), and
 * on Redis no fencing counter is written beside them (the token's write
 * was half of an acquire's time in Redis), nor a release receipt when
 * they are released.
 */
static void test_acquire_many(void **state)
{
    struct fx *f = fx_begin(state);
    char name[3][LOCK_NAME_MAX + 1];
    struct lock *l[3], *other, *again;
    enum lock_status st[3];
    int err[3], held[3];

    for (int i = 0; i < 3; i++) {
        char suffix[16];

        snprintf(suffix, sizeof(suffix), "many%d", i);
        fx_name(f, suffix, name[i]);
        l[i] = fx_lock(f, name[i]);
    }
    other = fx_lock(f, name[2]);
    acquire_expect(other, 0, LONG_LEASE_MS, LOCK_ACQUIRED);

    assert_int_equal(lock_acquire_many(l, 3, LONG_LEASE_MS, st, err), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(err[i], 0);
        assert_int_equal(st[i], LOCK_ACQUIRED);
        assert_int_equal(lock_holds(l[i]), 1);
        assert_int_equal(lock_fence(l[i]), 0);
    }
    assert_int_equal(err[2], 0);
    assert_int_equal(st[2], LOCK_BUSY);
    assert_int_equal(lock_holds(l[2]), 0);

    again = fx_lock(f, name[0]);
    acquire_expect(again, 0, LONG_LEASE_MS, LOCK_BUSY);
    if (f->b->kind == BK_REDIS) {
        redisContext **rcs = fx_redis(f);

        for (int i = 0; i < f->u.nhosts; i++) {
            redisReply *r =
                redisCommand(rcs[i], "KEYS *lock-fence:*%s*", name[0]);

            assert_non_null(r);
            assert_int_equal(r->type, REDIS_REPLY_ARRAY);
            assert_int_equal(r->elements, 0);
            freeReplyObject(r);
        }
    }

    assert_int_equal(lock_release_many(l, 2, held, err), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(err[i], 0);
        assert_int_equal(held[i], 1);
    }
    /* Nor is a release receipt left behind for them: a key written for
     * every purchase, kept for seconds. */
    if (f->b->kind == BK_REDIS) {
        redisContext **rcs = fx_redis(f);

        for (int i = 0; i < f->u.nhosts; i++)
            for (int k = 0; k < 2; k++) {
                redisReply *r =
                    redisCommand(rcs[i], "KEYS *lock-rel:*%s*", name[k]);

                assert_non_null(r);
                assert_int_equal(r->type, REDIS_REPLY_ARRAY);
                assert_int_equal(r->elements, 0);
                freeReplyObject(r);
            }
    }
    acquire_expect(again, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(again);
    release_held(other);
}

/* ---- 16. multi-locks ---- */

#define MULTI_LOCKS 3
#define MULTI_ITERS 25

struct multi_run {
    const struct fx *f;
    char names[MULTI_LOCKS][LOCK_NAME_MAX + 1];
    struct kind_spec kinds[MULTI_LOCKS];
    atomic_int *inside;
};

/*
 * Child index takes the set in array order (0) or reversed (1),
 * MULTI_ITERS times, each time checking nobody else holds it.
 */
static int multi_child(void *arg, int index)
{
    struct multi_run *run = arg;
    struct lock_client *c = NULL;
    struct lock *l[MULTI_LOCKS], *other[MULTI_LOCKS];
    int i, rc, code = 0;

    if (lock_client_open(run->f->url, &run->f->opt, &c) != 0)
        return 20;
    for (i = 0; i < MULTI_LOCKS; i++) {
        int k = index ? MULTI_LOCKS - 1 - i : i;
        if (make_kind(c, run->kinds[k], run->names[k], &l[i], &other[i]))
            return 21;
    }
    for (int it = 0; it < MULTI_ITERS && !code; it++) {
        enum lock_status st = LOCK_BUSY;
        int held = -1;

        rc = lock_multi_acquire(l, MULTI_LOCKS, 30000, LONG_LEASE_MS, &st);
        if (rc != 0 || st != LOCK_ACQUIRED) {
            fprintf(stderr, "test_lock: multi acquire %d: %d (%s) st %d\n", it,
                    rc, rc_str(rc), st);
            code = 30;
            break;
        }
        if (atomic_fetch_add(run->inside, 1) != 0)
            code = 31;
        usleep(1000);
        atomic_fetch_sub(run->inside, 1);
        rc = lock_multi_release(l, MULTI_LOCKS, &held);
        if (rc != 0 || held != 1)
            code = 32;
    }
    for (i = 0; i < MULTI_LOCKS; i++) {
        lock_free(l[i]);
        lock_free(other[i]);
    }
    lock_client_close(c);
    return code;
}

/*
 * Two processes take the same three locks (on Redis and ZooKeeper a mutex,
 * a fair lock and a write lock) in opposite array orders, over and over,
 * with a wait budget of 30 s: both finish every round (taken in one
 * canonical order, they cannot each hold one lock and wait for the other),
 * and never hold the set at the same time.
 */
static void test_multi_opposite_orders(void **state)
{
    struct fx *f = fx_begin(state);
    struct multi_run run = {.f = f};
    int64_t ms;
    int i;

    run.inside = shared_map(sizeof(*run.inside));
    for (i = 0; i < MULTI_LOCKS; i++) {
        char suffix[16];
        snprintf(suffix, sizeof(suffix), "multi-%c", 'a' + i);
        fx_name(f, suffix, run.names[i]);
        run.kinds[i] = MUTEX;
    }
    if (f->b->all_kinds) {
        run.kinds[1].kind = LOCK_KIND_FAIR;
        run.kinds[2].kind = LOCK_KIND_WRITE;
    }
    ms = run_children(2, multi_child, &run);
    print_message("      two clients, opposite orders: %d rounds each in "
                  "%lld ms\n",
                  MULTI_ITERS, (long long)ms);
    munmap(run.inside, sizeof(*run.inside));
}

/*
 * All or none: with one lock of the set held elsewhere, a fail-fast
 * multi-acquire is LOCK_BUSY and holds none of the others afterwards.
 * Sets that could never be held are -EINVAL: empty, a lock twice, two
 * owners of one exclusive lock. A multi-lock may mix backends (here with
 * one on the Redis of SECKILL_REDIS_URL) and, where offered, kinds: two
 * permits of one semaphore, or a read-write pair (taken write first, a
 * downgrade).
 */
static void test_multi_all_or_none(void **state)
{
    struct fx *f = fx_begin(state);
    char a_name[LOCK_NAME_MAX + 1], b_name[LOCK_NAME_MAX + 1];
    char x_name[LOCK_NAME_MAX + 1];
    const char *redis_env = getenv("SECKILL_REDIS_URL");
    struct lock *a, *b, *b_other, *a_twin, *x;
    struct lock_client *rc_client;
    enum lock_status st;
    int held = -1;

    fx_name(f, "mn-a", a_name);
    fx_name(f, "mn-b", b_name);
    a = fx_lock(f, a_name);
    a_twin = fx_lock(f, a_name);
    b = fx_lock(f, b_name);
    b_other = fx_lock(f, b_name);
    acquire_expect(b_other, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    {
        struct lock *set[] = {a, b};
        assert_int_equal(lock_multi_acquire(set, 2, 0, LONG_LEASE_MS, &st), 0);
        assert_int_equal(st, LOCK_BUSY);
    }
    assert_int_equal(lock_holds(a), 0);
    assert_int_equal(lock_holds(b), 0);
    acquire_expect(a_twin, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    release_held(a_twin);
    release_held(b_other);
    {
        struct lock *twice[] = {a, b, a}, *twins[] = {a, a_twin},
                    *null_in[] = {a, NULL};
        assert_int_equal(lock_multi_acquire(twice, 3, 0, 1000, &st), -EINVAL);
        assert_int_equal(lock_multi_acquire(twins, 2, 0, 1000, &st), -EINVAL);
        assert_int_equal(lock_multi_acquire(null_in, 2, 0, 1000, &st), -EINVAL);
        assert_int_equal(lock_multi_acquire(twice, 0, 0, 1000, &st), -EINVAL);
        assert_int_equal(lock_holds(a), 0);
    }

    /* Across backends. */
    assert_non_null(redis_env);
    assert_int_equal(lock_client_open(redis_env, &f->opt, &rc_client), 0);
    assert_true(f->nclients < FX_CLIENTS_MAX);
    f->clients[f->nclients++] = rc_client;
    fx_name(f, "mn-x", x_name);
    x = fx_lock_on(f, rc_client, x_name);
    {
        struct lock *mixed[] = {x, b, a};
        assert_int_equal(lock_multi_acquire(mixed, 3, 1000, LONG_LEASE_MS, &st),
                         0);
        assert_int_equal(st, LOCK_ACQUIRED);
        assert_true(lock_fence(x) > 0 && lock_fence(a) > 0);
        acquire_expect(a_twin, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_multi_release(mixed, 3, &held), 0);
        assert_int_equal(held, 1);
        assert_int_equal(lock_holds(x) + lock_holds(a) + lock_holds(b), 0);
    }

    if (f->b->all_kinds) {
        const struct kind_spec sem2 = {LOCK_KIND_SEMAPHORE, 2};
        char s_name[LOCK_NAME_MAX + 1];
        struct lock *r, *w, *r2, *w2, *p1, *p2, *p3;

        fx_name(f, "mn-rw", s_name);
        fx_lock_rw(f, s_name, &r, &w);
        fx_lock_rw(f, s_name, &r2, &w2);
        struct lock *pair[] = {r, w}, *foreign[] = {r, w2};
        assert_int_equal(lock_multi_acquire(foreign, 2, 0, 1000, &st), -EINVAL);
        assert_int_equal(lock_multi_acquire(pair, 2, 0, LONG_LEASE_MS, &st), 0);
        assert_int_equal(st, LOCK_ACQUIRED);
        assert_int_equal(lock_holds(r) + lock_holds(w), 2);
        acquire_expect(r2, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_multi_release(pair, 2, &held), 0);
        assert_int_equal(held, 1);

        fx_name(f, "mn-sem", s_name);
        p1 = fx_lock_kind(f, sem2, s_name);
        p2 = fx_lock_kind(f, sem2, s_name);
        p3 = fx_lock_kind(f, sem2, s_name);
        struct lock *permits[] = {p1, p2};
        assert_int_equal(lock_multi_acquire(permits, 2, 0, LONG_LEASE_MS, &st),
                         0);
        assert_int_equal(st, LOCK_ACQUIRED);
        acquire_expect(p3, 0, LONG_LEASE_MS, LOCK_BUSY);
        assert_int_equal(lock_multi_release(permits, 2, &held), 0);
        acquire_expect(p3, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
        release_held(p3);
    }
}

/* ---- 17. a release whose answer is lost ---- */

/* Start a tcpproxy in front of every server of f's URL, and write into
 * url the URL through them (session_ms as given). */
static void fx_proxied_url(struct fx *f, uint32_t session_ms, char *url,
                           size_t size)
{
    uint16_t ports[URL_HOSTS_MAX];
    int i;

    for (i = 0; i < f->u.nhosts; i++) {
        assert_true(f->nproxies < URL_HOSTS_MAX);
        struct it_proxy *p = &f->proxies[f->nproxies++];
        if (it_proxy_start(p, f->b->name, (uint16_t)fx_port(f, i)) != 0)
            fail_msg("proxy for %s:%u did not start", f->u.hosts[i].host,
                     fx_port(f, i));
        ports[i] = p->port;
    }
    down_url(f, ports, url, size);
    if (f->b->kind == BK_ZK) {
        /* down_url() set the test's short session: replace it. */
        char *s = strstr(url, "&session_ms=");
        assert_non_null(s);
        snprintf(s, size - (size_t)(s - url), "&session_ms=%u",
                 (unsigned)session_ms);
    }
}

static void fx_proxies(struct fx *f, const char *cmd)
{
    for (size_t i = 0; i < f->nproxies; i++)
        assert_int_equal(it_proxy_ctl(&f->proxies[i], cmd), 0);
}

/*
 * Release through proxies that lose the answer. Either lock_release()
 * asked again and got the answer, or it returns the error with the
 * release pending; then the lock is free all the same (the server ran the
 * release), someone else takes it, and asked again once the network is
 * back, the release answers held = want_held and leaves the new holder's
 * lock alone.
 */
static void lost_release(struct fx *f, struct lock *a, struct lock *b,
                         struct lock *c, int want_held, const char *what)
{
    int held = -1, rc, tries = 0;
    int64_t until;

    fx_proxies(f, "mute");
    rc = lock_release(a, &held);
    print_message("      %s: release with its answer lost = %d (%s), held "
                  "%d, pending %d\n",
                  what, rc, rc_str(rc), held, lock_release_pending(a));
    assert_int_equal(lock_holds(a), 0);
    assert_int_equal(lock_fence(a), 0);
    if (rc == 0) {
        assert_int_equal(held, want_held);
        assert_false(lock_release_pending(a));
        fx_proxies(f, "heal");
        if (want_held)
            acquire_expect(b, 3000, LONG_LEASE_MS, LOCK_ACQUIRED);
    } else {
        assert_true(lock_release_pending(a));
        if (want_held)
            acquire_expect(b, 3000, LONG_LEASE_MS, LOCK_ACQUIRED);
        else
            acquire_expect(c, 0, LONG_LEASE_MS, LOCK_BUSY);
        /* A fresh connection: the muted one has lost its place. */
        fx_proxies(f, "cut");
        fx_proxies(f, "heal");
        until = mono_us() + 15000000;
        do {
            if (tries++)
                sleep_ms(100);
            held = -1;
            rc = lock_release(a, &held);
        } while (rc != 0 && mono_us() < until);
        print_message("      %s: asked again %d times: %d (%s), held %d\n",
                      what, tries, rc, rc_str(rc), held);
        assert_int_equal(rc, 0);
        assert_int_equal(held, want_held);
        assert_false(lock_release_pending(a));
        assert_int_equal(lock_release(a, &held), -ENOLCK);
    }
    acquire_expect(c, 0, LONG_LEASE_MS, LOCK_BUSY);
    release_held(b);
}

/*
 * A release whose answer was lost and is asked again answers the same:
 * held when it freed our lock (also when someone else took the lock
 * since), not held when our lease had run out and someone else had it
 * (Redis and RedLock: the test cannot end a ZooKeeper or MySQL hold
 * behind its back without breaking the rules their answer relies on); and
 * it never frees the other holder's lock.
 */
static void test_release_idempotent(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1], url[1024];
    struct lock_client *pc;
    struct lock *a, *b, *c;

    fx_proxied_url(f, 10000, url, sizeof(url));
    assert_int_equal(lock_client_open(url, &f->opt, &pc), 0);
    assert_true(f->nclients < FX_CLIENTS_MAX);
    f->clients[f->nclients++] = pc;
    fx_name(f, "idem", name);
    a = fx_lock_on(f, pc, name);
    b = fx_lock(f, name);
    c = fx_lock(f, name);

    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    lost_release(f, a, b, c, 1, "held");

    if (f->b->kind == BK_REDIS || f->b->kind == BK_REDLOCK) {
        acquire_expect(a, 0, OWNER_LEASE_MS, LOCK_ACQUIRED);
        sleep_ms(OWNER_LEASE_MS + 100);
        acquire_expect(b, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
        lost_release(f, a, b, c, 0, "expired, taken");
    }
}

/* ---- 18. an acquire whose answer is lost ---- */

/*
 * Redis: an acquire whose answer is lost (the proxy drops every answer)
 * ran on the server and took the lock, or the permit, or a reader's
 * place; the client cannot know, so its kind's undo goes out behind it.
 * Another owner then gets in at once, not after the 30 s lease, for every
 * kind (a reader is checked with a writer, which readers keep out).
 */
static void test_lost_acquire_undone(void **state)
{
    static const struct {
        struct kind_spec kind, other;
    } cases[] = {
        {{LOCK_KIND_MUTEX, 0}, {LOCK_KIND_MUTEX, 0}},
        {{LOCK_KIND_FAIR, 0}, {LOCK_KIND_FAIR, 0}},
        {{LOCK_KIND_WRITE, 0}, {LOCK_KIND_WRITE, 0}},
        {{LOCK_KIND_READ, 0}, {LOCK_KIND_WRITE, 0}},
        {{LOCK_KIND_SEMAPHORE, 1}, {LOCK_KIND_SEMAPHORE, 1}},
    };
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1], url[1024], suffix[32];
    struct lock_client *pc;

    fx_proxied_url(f, 10000, url, sizeof(url));
    assert_int_equal(lock_client_open(url, &f->opt, &pc), 0);
    assert_true(f->nclients < FX_CLIENTS_MAX);
    f->clients[f->nclients++] = pc;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum lock_status st = LOCK_BUSY;
        struct lock *a, *b;
        int64_t ms;
        int rc;

        snprintf(suffix, sizeof(suffix), "lost-acq-%zu", i);
        fx_name(f, suffix, name);
        a = fx_lock_kind_on(f, pc, cases[i].kind, name);
        b = fx_lock_kind(f, cases[i].other, name);
        /* Connected (and the scripts loaded) before the answers go; the
         * first call after a cut may find the old connection reset. */
        rc = lock_client_ping(pc);
        if (rc)
            rc = lock_client_ping(pc);
        assert_int_equal(rc, 0);
        fx_proxies(f, "mute");
        rc = lock_acquire(a, 0, LONG_LEASE_MS, &st);
        assert_int_equal(rc, -ETIMEDOUT);
        assert_int_equal(lock_holds(a), 0);
        ms = acquire_expect(b, 5000, LONG_LEASE_MS, LOCK_ACQUIRED);
        print_message("      %s acquire with its answer lost: %s in after "
                      "%lld ms\n",
                      kind_str(cases[i].kind.kind),
                      kind_str(cases[i].other.kind), (long long)ms);
        release_held(b);
        /* A fresh connection for the next case. */
        fx_proxies(f, "cut");
        fx_proxies(f, "heal");
    }
}

/* ---- 18. on a Redis Cluster ---- */

/* A waiter whose wake-up was lost retries within its fallback interval
 * (500 ms, redis_kind.h), plus room for a loaded machine. */
#define REDIS_POLL_BOUND_MS 1500

/*
 * The port of the primary that owns slot, as the node of f's first seed
 * reads the map (CLUSTER SHARDS).
 */
static unsigned cluster_owner(struct fx *f, unsigned slot)
{
    redisContext **rc = fx_redis(f);
    redisReply *r = redisCommand(rc[0], "CLUSTER SHARDS");
    struct redis_cluster_map *m = calloc(1, sizeof(*m));
    char why[160];
    unsigned port = 0;

    assert_non_null(r);
    assert_non_null(m);
    if (redis_cluster_map_parse(r, m, why, sizeof(why)) != 0)
        fail_msg("CLUSTER SHARDS: %s", why);
    if (m->slot_node[slot] != REDIS_CLUSTER_NO_NODE)
        port = m->nodes[m->slot_node[slot]].port;
    freeReplyObject(r);
    free(m);
    assert_true(port > 0);
    return port;
}

/* The test's connection to the primary on port (f->u holds the
 * primaries: fx_cluster_primaries()). */
static redisContext *cluster_node(struct fx *f, unsigned port)
{
    redisContext **rc = fx_redis(f);

    for (int i = 0; i < f->u.nhosts; i++)
        if (fx_port(f, i) == port)
            return rc[i];
    fail_msg("%u is not a primary", port);
    return NULL;
}

/* calls= of cmdstat_<cmd> in INFO commandstats of rc (0 if absent). */
static long long cmd_calls(redisContext *rc, const char *cmd)
{
    redisReply *r = redisCommand(rc, "INFO commandstats");
    char needle[64];
    long long n = 0;

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(needle, sizeof(needle), "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, needle);
    if (p)
        n = strtoll(p + strlen(needle), NULL, 10);
    freeReplyObject(r);
    return n;
}

/*
 * Locks whose names hash to every primary's slots: each one's scripts
 * run on the primary that owns its slot (INFO commandstats of each
 * primary counts them), and its release publishes there with SPUBLISH,
 * never PUBLISH.
 */
static void test_cluster_spread(void **state)
{
    struct fx *f = fx_begin(state);
    long long scripts0[URL_HOSTS_MAX], spub0[URL_HOSTS_MAX],
        pub0[URL_HOSTS_MAX];
    int got[URL_HOSTS_MAX] = {0};
    char name[LOCK_NAME_MAX + 1], suffix[32];
    redisContext **rc = fx_redis(f);
    int i, n, todo = f->u.nhosts;

    for (i = 0; i < f->u.nhosts; i++) {
        scripts0[i] = cmd_calls(rc[i], "evalsha") + cmd_calls(rc[i], "eval");
        spub0[i] = cmd_calls(rc[i], "spublish");
        pub0[i] = cmd_calls(rc[i], "publish");
    }
    /* Names until each primary has had one. */
    for (n = 0; todo > 0 && n < 1000; n++) {
        snprintf(suffix, sizeof(suffix), "spread-%d", n);
        fx_name(f, suffix, name);
        unsigned port = cluster_owner(f, redis_key_slot_str(name));
        for (i = 0; i < f->u.nhosts; i++)
            if (fx_port(f, i) == port && !got[i]) {
                struct lock *l;
                int held = 0;

                assert_int_equal(lock_new(fx_client(f), name, &l), 0);
                acquire_expect(l, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
                assert_int_equal(lock_release(l, &held), 0);
                assert_int_equal(held, 1);
                lock_free(l);
                got[i] = 1;
                todo--;
            }
    }
    assert_int_equal(todo, 0);
    for (i = 0; i < f->u.nhosts; i++) {
        long long scripts = cmd_calls(rc[i], "evalsha") +
                            cmd_calls(rc[i], "eval") - scripts0[i];
        long long spub = cmd_calls(rc[i], "spublish") - spub0[i];
        long long pub = cmd_calls(rc[i], "publish") - pub0[i];

        print_message("      primary %u: %lld scripts, %lld SPUBLISH, %lld "
                      "PUBLISH\n",
                      fx_port(f, i), scripts, spub, pub);
        assert_true(scripts >= 2); /* the acquire and the release */
        assert_true(spub >= 1);
        assert_int_equal(pub, 0);
    }
}

/* What finishes a slot's move: the slot given to the target (node id)
 * on every primary. Runs on a thread of its own, beside a lock call that
 * waits for it: no cmocka there. */
struct slot_finish {
    redisContext **rc;
    int n;
    unsigned slot;
    char id[41];
    int64_t delay_ms;
    int failed;
};

static void *slot_finish_main(void *arg)
{
    struct slot_finish *sf = arg;

    sleep_ms(sf->delay_ms);
    for (int i = 0; i < sf->n; i++) {
        redisReply *r = redisCommand(sf->rc[i], "CLUSTER SETSLOT %u NODE %s",
                                     sf->slot, sf->id);
        if (!r || r->type != REDIS_REPLY_STATUS)
            sf->failed = 1;
        freeReplyObject(r);
    }
    return NULL;
}

/* Move slot from the primary on port from to the one on port to, keys and
 * all, as redis-cli --cluster reshard does. stop_after_keys: leave it
 * half-way (IMPORTING/MIGRATING, the keys at the target), for
 * struct slot_finish to end; the target's node id into idb. */
static void cluster_move_slot(struct fx *f, unsigned slot, unsigned from,
                              unsigned to, int stop_after_keys, char idb[41])
{
    redisContext *ra = cluster_node(f, from), *rb = cluster_node(f, to);
    char ida[41];
    redisReply *r;

    r = redisCommand(ra, "CLUSTER MYID");
    assert_true(r && r->len == 40);
    memcpy(ida, r->str, 41);
    freeReplyObject(r);
    r = redisCommand(rb, "CLUSTER MYID");
    assert_true(r && r->len == 40);
    memcpy(idb, r->str, 41);
    freeReplyObject(r);

    r = redisCommand(rb, "CLUSTER SETSLOT %u IMPORTING %s", slot, ida);
    assert_true(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(ra, "CLUSTER SETSLOT %u MIGRATING %s", slot, idb);
    assert_true(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    for (;;) {
        r = redisCommand(ra, "CLUSTER GETKEYSINSLOT %u 100", slot);
        assert_true(r && r->type == REDIS_REPLY_ARRAY);
        if (r->elements == 0) {
            freeReplyObject(r);
            break;
        }
        for (size_t k = 0; k < r->elements; k++) {
            redisReply *m =
                redisCommand(ra, "MIGRATE 127.0.0.1 %u %b 0 5000", to,
                             r->element[k]->str, r->element[k]->len);
            assert_non_null(m);
            if (m->type == REDIS_REPLY_ERROR)
                fail_msg("MIGRATE: %s", m->str);
            freeReplyObject(m);
        }
        freeReplyObject(r);
    }
    if (stop_after_keys)
        return;
    for (int i = 0; i < f->u.nhosts; i++) {
        r = redisCommand(fx_redis(f)[i], "CLUSTER SETSLOT %u NODE %s", slot,
                         idb);
        assert_true(r && r->type == REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
}

/*
 * A held lock's slot moved to another primary by hand, mid-hold: while
 * the slot is half-way (its keys at the target, ASK), another client
 * still finds it busy, the holder's release finds it there, and a waiter
 * in another process gets it (its wake-up, published at the target while
 * it listens at the source, may be lost: then its poll interval). After
 * the move (MOVED to clients with the old map) the lock still excludes,
 * tokens still grow, and a release wakes a waiter by SPUBLISH at the new
 * owner within the hand-over bound. The slot goes back at the end.
 */
static void test_cluster_slot_moved(void **state)
{
    struct fx *f = fx_begin(state);
    char name[LOCK_NAME_MAX + 1];
    struct lock_client *c2;
    struct lock *a, *b;
    struct agent *w;
    struct agent_reply r;
    struct slot_finish sf = {0};
    pthread_t th;
    unsigned slot, from, to = 0;
    uint64_t fence;
    int64_t t0, ms;
    int i;

    fx_name(f, "moved", name);
    slot = redis_key_slot_str(name);
    from = cluster_owner(f, slot);
    for (i = 0; i < f->u.nhosts && !to; i++)
        if (fx_port(f, i) != from)
            to = fx_port(f, i);
    assert_int_equal(lock_client_open(f->url, &f->opt, &c2), 0);
    assert_true(f->nclients < FX_CLIENTS_MAX);
    f->clients[f->nclients++] = c2;
    a = fx_lock(f, name);
    b = fx_lock_on(f, c2, name);
    w = agent_start(f, name);

    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    fence = lock_fence(a);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);

    /* Half-way: the lock's keys are at the target, the slot still the
     * source's. The lock is busy there (ASK), and a waiter waits. */
    cluster_move_slot(f, slot, from, to, 1, sf.id);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);
    agent_send(w, AG_ACQUIRE, 5000, LONG_LEASE_MS, 0);
    sleep_ms(200);
    /* A script on the half-moved slot whose keys are not all there (the
     * release's channel and receipt never are) gets TRYAGAIN until the
     * move ends: the release waits it out, as long as the move takes
     * less than its timeout. */
    sf.rc = fx_redis(f);
    sf.n = f->u.nhosts;
    sf.slot = slot;
    sf.delay_ms = TIMEOUT_MS / 4;
    assert_int_equal(pthread_create(&th, NULL, slot_finish_main, &sf), 0);
    t0 = mono_us();
    release_held(a);
    ms = (mono_us() - t0) / 1000;
    pthread_join(th, NULL);
    assert_int_equal(sf.failed, 0);
    print_message("      release while the slot moved: %lld ms\n",
                  (long long)ms);
    r = agent_recv(w, AGENT_REPLY_MS);
    assert_agent_acquired(r);
    ms = (r.t_us - t0) / 1000;
    print_message("      waiter in another process in %lld ms\n",
                  (long long)ms);
    /* Its wake-up may have been lost (it listened at the source): then
     * its poll interval, no more. */
    assert_true(ms < REDIS_POLL_BOUND_MS);
    assert_true(r.fence > fence);
    fence = r.fence;
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_BUSY);
    r = agent_call(w, AG_RELEASE, 0, 0, 0);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.held, 1);

    /* The slot is the target's now. */
    assert_int_equal(cluster_owner(f, slot), to);
    acquire_expect(b, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_true(lock_fence(b) > fence);
    fence = lock_fence(b);
    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_BUSY);
    for (i = 0; i < 3; i++) {
        agent_send(w, AG_ACQUIRE, 5000, LONG_LEASE_MS, 0);
        sleep_ms(200);
        t0 = mono_us();
        release_held(b);
        r = agent_recv(w, AGENT_REPLY_MS);
        assert_agent_acquired(r);
        ms = (r.t_us - t0) / 1000;
        print_message("      after the move: waiter woken in %lld ms\n",
                      (long long)ms);
        /* The first wait may have begun at the source (its try learnt the
         * MOVED, its subscription follows at the next wake-up); after
         * that, only SPUBLISH at the new owner is fast enough. */
        if (i > 0)
            assert_true(ms < HANDOVER_MAX_MS);
        assert_true(r.fence > fence);
        fence = r.fence;
        r = agent_call(w, AG_RELEASE, 0, 0, 0);
        assert_int_equal(r.held, 1);
        acquire_expect(b, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
        assert_true(lock_fence(b) > fence);
        fence = lock_fence(b);
    }
    release_held(b);
    agent_finish(w, 10000);

    /* Back where it was, for the tests after. */
    cluster_move_slot(f, slot, to, from, 0, sf.id);
    acquire_expect(a, 0, LONG_LEASE_MS, LOCK_ACQUIRED);
    assert_true(lock_fence(a) > fence);
    release_held(a);
}

/* ---- main ---- */

struct test_def {
    const char *name;
    CMUnitTestFunction fn;
    int only; /* a backend kind, or -1 for all */
    /* 1: only where the fair, read-write and semaphore kinds are offered;
     * -1: only where they are not; 0: everywhere. */
    int kinds;
    /* 1: only on a Redis Cluster; -1: never there; 0: everywhere. */
    int cluster;
};

static const struct test_def test_defs[] = {
    {"input: names", test_names_checked, -1, 0, 0},
    {"input: urls", test_urls_checked, -1, 0, 0},
    {"mutual exclusion", test_mutual_exclusion, -1, 0, 0},
    {"only the owner releases", test_only_owner_releases, -1, 0, 0},
    {"reentrancy", test_reentrancy, -1, 0, 0},
    {"killed holder frees the lock", test_killed_holder_frees, -1, 0, 0},
    {"watchdog keeps the lock, then stops", test_watchdog_keeps_then_stops, -1,
     0, 0},
    {"watchdog detects a lost lock", test_watchdog_detects_loss, -1, 0, 0},
    {"fencing rejects a paused holder", test_fencing_rejects_stale_holder, -1,
     0, 0},
    {"redlock quorum", test_redlock_quorum, BK_REDLOCK, 0, 0},
    {"release wakes a waiter", test_release_wakes_waiter, -1, 0, 0},
    {"backend down fails fast", test_backend_down_fails_fast, -1, 0, 0},
    {"release is idempotent", test_release_idempotent, -1, 0, -1},
    /* Their proxies sit in front of the URL's hosts, which a cluster
     * client leaves for the addresses the cluster names. */
    {"an acquire whose answer is lost is undone", test_lost_acquire_undone,
     BK_REDIS, 1, -1},
    {"many locks at once: no fencing token", test_acquire_many, -1, 0, 0},
    {"multi-lock: opposite orders both finish", test_multi_opposite_orders, -1,
     0, 0},
    {"multi-lock: all or none", test_multi_all_or_none, -1, 0, 0},
    {"kinds: refused with -ENOTSUP", test_kinds_refused, -1, -1, 0},
    {"fair: FIFO, also past a killed waiter", test_fair_order, -1, 1, 0},
    {"read-write: readers share, writers exclude", test_rw_exclusion, -1, 1, 0},
    {"read-write: a writer waits only for readers inside",
     test_rw_writer_not_starved, -1, 1, 0},
    {"read-write: reentrancy, downgrade, no upgrade, watchdog",
     test_rw_semantics, -1, 1, 0},
    {"semaphore: never more than N holders", test_semaphore_limit, -1, 1, 0},
    {"kinds: a killed holder's lock comes back", test_kinds_killed_holder, -1,
     1, 0},
    {"scripts run on every primary, releases SPUBLISH", test_cluster_spread,
     BK_REDIS, 0, 1},
    {"a slot moved under a held lock", test_cluster_slot_moved, BK_REDIS, 0, 1},
};
enum { NTESTS = sizeof(test_defs) / sizeof(test_defs[0]) };

int main(int argc, char **argv)
{
    static char names[NTESTS][128];
    struct CMUnitTest tests[NTESTS];
    const char *filter;
    int failed = 0;
    size_t i, k, n;

    if (argc > 1 && strcmp(argv[1], "--agent") == 0) {
        alarm(CHILD_ALARM_S);
        return agent_exec_main(argc, argv);
    }
    it_init();
    /* SECKILL_IT_FILTER="redis: *" runs only the tests matching it. */
    filter = getenv("SECKILL_IT_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        for (k = 0, n = 0; k < NTESTS; k++) {
            if (test_defs[k].only >= 0 &&
                test_defs[k].only != (int)backends[i].kind)
                continue;
            if ((test_defs[k].kinds > 0 && !backends[i].all_kinds) ||
                (test_defs[k].kinds < 0 && backends[i].all_kinds))
                continue;
            if ((test_defs[k].cluster > 0 && !backends[i].cluster) ||
                (test_defs[k].cluster < 0 && backends[i].cluster))
                continue;
            snprintf(names[n], sizeof(names[n]), "%s: %s",
                     group_name(&backends[i]), test_defs[k].name);
            tests[n] = (struct CMUnitTest){
                .name = names[n],
                .test_func = test_defs[k].fn,
                .setup_func = fx_setup,
                .teardown_func = fx_teardown,
                .initial_state = &backends[i],
            };
            n++;
        }
        failed += _cmocka_run_group_tests(group_name(&backends[i]), tests, n,
                                          NULL, NULL);
    }
    it_sql_close();
    return failed;
}
