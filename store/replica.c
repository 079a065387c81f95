/*
 * replica.c - the MySQL read replica: the monitor thread that decides
 * whether voucher reads may go there (see store.h), and the choice, per
 * read, between a thread's replica connection and its primary one.
 *
 * The decision is process-wide, one per shard (each shard's replica has
 * a watch of its own: one thread, one connection): a few atomics that
 * every thread reads without a lock. A thread whose
 * own read on the replica fails skips it for a second on its own,
 * whatever the monitor last said, so a replica that dies between two
 * looks costs each thread one failed read, not one per request.
 */
#include "store/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <mysqld_error.h>

#include "common/metrics.h"
#include "common/util.h"

/* How often the monitor looks. */
#define CHECK_MS 1000
/* How long a thread skips the replica after its own read there failed. */
#define SKIP_MS 1000

enum verdict {
    VERDICT_UNKNOWN, /* not looked yet */
    VERDICT_OK,
    VERDICT_LAGGING,
    VERDICT_DOWN,
    VERDICT_NOT_REPLICATING, /* a replication thread stopped: lag unknown */
    VERDICT_NOT_A_REPLICA,   /* the server has no replication configured */
    VERDICT_NO_PRIVILEGE,    /* the user may not ask (REPLICA MONITOR) */
    VERDICT_ERROR,
};

static const char *const verdict_names[] = {
    [VERDICT_UNKNOWN] = "unknown",
    [VERDICT_OK] = "ok",
    [VERDICT_LAGGING] = "lagging",
    [VERDICT_DOWN] = "down",
    [VERDICT_NOT_REPLICATING] = "not replicating",
    [VERDICT_NOT_A_REPLICA] = "not a replica",
    [VERDICT_NO_PRIVILEGE] = "no privilege",
    [VERDICT_ERROR] = "error",
};

/* The process's view of one shard's replica; written by its watch only. */
struct view {
    atomic_bool running;
    atomic_int verdict;
    atomic_llong lag_s;
};

static struct view views[STORE_SHARDS_MAX];

/* The watch of one shard's replica. */
struct watch {
    const struct store_config *cfg; /* the shard's; cfg->replica set */
    unsigned shard;
    struct store *st; /* the watch's own replica store */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool stop;
    bool old_syntax; /* the server wants SHOW SLAVE STATUS */
};

struct store_replica_monitor {
    struct watch *w[STORE_SHARDS_MAX]; /* NULL: that shard has no replica */
};

/* The index of the first of names (NULL-terminated) among the fields. */
static int field_index(MYSQL_FIELD *f, unsigned n, const char *const *names)
{
    for (unsigned i = 0; i < n; i++)
        for (int k = 0; names[k]; k++)
            if (strcmp(f[i].name, names[k]) == 0)
                return (int)i;
    return -1;
}

/* Ask the replica how far behind it is: a verdict, with *lag set (-1:
 * unknown). */
static enum verdict look(struct watch *m, int64_t *lag)
{
    static const char *const lag_names[] = {"Seconds_Behind_Master",
                                            "Seconds_Behind_Source", NULL};
    static const char *const io_names[] = {"Slave_IO_Running",
                                           "Replica_IO_Running", NULL};
    static const char *const sql_names[] = {"Slave_SQL_Running",
                                            "Replica_SQL_Running", NULL};
    const char *sql;
    MYSQL_RES *res;
    MYSQL_ROW row;
    enum verdict v;
    int li, ii, si;

    *lag = -1;
    if (store_mysql_ensure(m->st))
        return VERDICT_DOWN;
    sql = m->old_syntax ? "SHOW SLAVE STATUS" : "SHOW REPLICA STATUS";
    if (mysql_real_query(m->st->my, sql, strlen(sql))) {
        unsigned e = mysql_errno(m->st->my);

        if (e == ER_PARSE_ERROR && !m->old_syntax) {
            m->old_syntax = true;
            return look(m, lag);
        }
        if (e == ER_SPECIFIC_ACCESS_DENIED_ERROR ||
            e == ER_ACCESS_DENIED_ERROR || e == ER_DBACCESS_DENIED_ERROR)
            return VERDICT_NO_PRIVILEGE;
        return store_mysql_error(m->st, NULL, sql) == -ENOTCONN ? VERDICT_DOWN
                                                                : VERDICT_ERROR;
    }
    res = mysql_store_result(m->st->my);
    if (!res)
        return store_mysql_error(m->st, NULL, sql) == -ENOTCONN ? VERDICT_DOWN
                                                                : VERDICT_ERROR;
    row = mysql_fetch_row(res);
    if (!row) {
        mysql_free_result(res);
        return VERDICT_NOT_A_REPLICA;
    }
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    unsigned n = mysql_num_fields(res);
    li = field_index(f, n, lag_names);
    ii = field_index(f, n, io_names);
    si = field_index(f, n, sql_names);
    if (li < 0 || ii < 0 || si < 0) {
        v = VERDICT_ERROR;
    } else if (!row[ii] || strcmp(row[ii], "Yes") != 0 || !row[si] ||
               strcmp(row[si], "Yes") != 0 || !row[li]) {
        /* An IO thread still connecting reports "Connecting" and a lag
         * computed from what it has: not to be trusted. */
        v = VERDICT_NOT_REPLICATING;
    } else {
        *lag = strtoll(row[li], NULL, 10);
        v = *lag <= (int64_t)m->cfg->replica_max_lag_s ? VERDICT_OK
                                                       : VERDICT_LAGGING;
    }
    mysql_free_result(res);
    return v;
}

static void publish(struct watch *m, enum verdict v, int64_t lag)
{
    struct view *w = &views[m->shard];
    int old = atomic_exchange(&w->verdict, (int)v);

    atomic_store(&w->lag_s, lag);
    if (old == (int)v)
        return;
    if (v == VERDICT_OK)
        log_info("mysql replica in use for voucher reads",
                 "shard=%u host=%s port=%u lag_s=%lld max_lag_s=%u", m->shard,
                 m->cfg->replica->mysql_host, m->cfg->replica->mysql_port,
                 (long long)lag, m->cfg->replica_max_lag_s);
    else
        log_warn("mysql replica skipped: voucher reads go to the primary",
                 "shard=%u host=%s port=%u why=\"%s\" lag_s=%lld "
                 "max_lag_s=%u%s",
                 m->shard, m->cfg->replica->mysql_host,
                 m->cfg->replica->mysql_port, verdict_names[v], (long long)lag,
                 m->cfg->replica_max_lag_s,
                 v == VERDICT_NO_PRIVILEGE
                     ? " hint=\"GRANT REPLICA MONITOR ON *.* TO the user\""
                     : "");
}

static void *monitor_main(void *arg)
{
    struct watch *m = arg;

    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        int64_t lag;
        enum verdict v;
        struct timespec ts;

        pthread_mutex_unlock(&m->mu);
        v = look(m, &lag);
        publish(m, v, lag);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += CHECK_MS / 1000;
        pthread_mutex_lock(&m->mu);
        if (!m->stop)
            pthread_cond_timedwait(&m->cond, &m->mu, &ts);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Start the watch of shard's replica (cfg, the shard's, has one). */
static struct watch *watch_start(const struct store_config *cfg, unsigned shard)
{
    struct watch *m = xcalloc(1, sizeof(*m));
    struct view *w = &views[shard];
    pthread_condattr_t attr;

    m->cfg = cfg;
    m->shard = shard;
    m->st = store_new(cfg->replica);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &attr);
    pthread_condattr_destroy(&attr);
    atomic_store(&w->verdict, VERDICT_UNKNOWN);
    atomic_store(&w->lag_s, -1);
    atomic_store(&w->running, true);
    if (pthread_create(&m->thread, NULL, monitor_main, m) != 0) {
        log_error("mysql replica monitor start failed", "errno=%d", errno);
        abort();
    }
    return m;
}

static void watch_stop(struct watch *m)
{
    struct view *w;

    if (!m)
        return;
    w = &views[m->shard];
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->cond);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    atomic_store(&w->running, false);
    atomic_store(&w->verdict, VERDICT_UNKNOWN);
    store_free(m->st);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

struct store_replica_monitor *
store_replica_monitor_start(const struct store_config *cfg)
{
    struct store_replica_monitor *m = NULL;
    unsigned n = cfg->nshards > 1 ? cfg->nshards : 1;

    for (unsigned i = 0; i < n && i < STORE_SHARDS_MAX; i++) {
        const struct store_config *c = i ? cfg->shards[i] : cfg;

        if (!c->replica)
            continue;
        if (!m)
            m = xcalloc(1, sizeof(*m));
        m->w[i] = watch_start(c, i);
    }
    return m;
}

void store_replica_monitor_stop(struct store_replica_monitor *m)
{
    if (!m)
        return;
    for (unsigned i = 0; i < STORE_SHARDS_MAX; i++)
        watch_stop(m->w[i]);
    free(m);
}

size_t store_replica_states(struct store_replica_state *out, size_t max)
{
    size_t n = 0;

    for (unsigned i = 0; i < STORE_SHARDS_MAX && n < max; i++) {
        struct view *w = &views[i];
        int v;

        if (!atomic_load(&w->running))
            continue;
        v = atomic_load(&w->verdict);
        out[n++] = (struct store_replica_state){.shard = i,
                                                .usable = v == VERDICT_OK,
                                                .lag_s = atomic_load(&w->lag_s),
                                                .why = verdict_names[v]};
    }
    return n;
}

struct store *store_reader(struct store *st)
{
    struct view *w = &views[st->shard_no];

    if (!st->cfg->replica || !atomic_load(&w->running) ||
        atomic_load(&w->verdict) != VERDICT_OK ||
        util_mono_ms() < st->replica_skip_until_ms)
        return st;
    if (!st->replica)
        st->replica = store_new(st->cfg->replica);
    return st->replica;
}

void store_reader_done(struct store *st, struct store *reader, int err)
{
    if (reader == st) {
        metrics_count(METRIC_VOUCHER_READ_PRIMARY, 1);
        return;
    }
    if (err == 0 || err == -ENOENT) {
        metrics_count(METRIC_VOUCHER_READ_REPLICA, 1);
        return;
    }
    st->replica_skip_until_ms = util_mono_ms() + SKIP_MS;
    log_warn("mysql replica read failed: this thread reads the primary",
             "err=%d skip_ms=%d", err, SKIP_MS);
}
