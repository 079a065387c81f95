/*
 * metrics.c - per-thread counter blocks, summed and rendered in the
 * Prometheus text format when scraped (see metrics.h).
 *
 * Each cell of a block has one writer, the thread that owns the block, so
 * a record is a relaxed load plus a relaxed store: no lock prefix, no
 * contended cache line. A scrape reads the cells with relaxed loads from
 * another thread; that is a data race only in the everyday sense (it may
 * miss a count in flight), never in the C11 sense. A block changes owner
 * only under list_mutex, after its old owner has exited, and that mutex
 * orders the old owner's last stores before the new owner's first.
 */
#include "common/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

/* ---- what is counted ---- */

/* Latency buckets (le, seconds), as the Prometheus client defaults but
 * reaching down to 0.5 ms: a healthz or a refused purchase is that fast. */
#define LAT_BUCKETS 14
static const uint64_t lat_bound_ns[LAT_BUCKETS] = {
    500000,     1000000,    2500000,    5000000,    10000000,
    25000000,   50000000,   100000000,  250000000,  500000000,
    1000000000, 2500000000, 5000000000, 10000000000};
static const char *const lat_bound_text[LAT_BUCKETS] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",  "0.5",    "1",     "2.5",  "5",     "10"};

/* Purchases per transaction: powers of two up to 256. */
#define BATCH_BUCKETS 9

/* The statuses the service sends get their own cell; the rest share one.
 * 0 is a request that ended without a reply (the client went away). */
static const unsigned status_codes[] = {0,   200, 201, 204, 304, 400, 401,
                                        403, 404, 405, 408, 409, 413, 414,
                                        415, 429, 431, 500, 501, 503, 504};
#define STATUSES (sizeof(status_codes) / sizeof(status_codes[0]))
#define STATUS_OTHER STATUSES

/* How each counter is rendered: family, label, label value. */
static const struct {
    const char *family;
    const char *label;
    const char *value;
} counter_info[METRIC_COUNTERS] = {
    [METRIC_LOCK_ACQUIRED] = {"lock_acquisitions", "outcome", "acquired"},
    [METRIC_LOCK_BUSY] = {"lock_acquisitions", "outcome", "busy"},
    [METRIC_LOCK_ERROR] = {"lock_acquisitions", "outcome", "error"},
    [METRIC_PURCHASE_OK] = {"purchases", "outcome", "ok"},
    [METRIC_PURCHASE_SOLD_OUT] = {"purchases", "outcome", "sold_out"},
    [METRIC_PURCHASE_DUPLICATE] = {"purchases", "outcome", "duplicate"},
    [METRIC_PURCHASE_SOLD_OUT_CACHED] = {"purchases", "outcome",
                                         "sold_out_cached"},
    [METRIC_PURCHASE_SHED] = {"purchases", "outcome", "shed"},
    [METRIC_PURCHASE_EXPIRED] = {"purchases", "outcome", "expired"},
    [METRIC_ORDER_PAID] = {"order_transitions", "to", "paid"},
    [METRIC_ORDER_CANCELLED] = {"order_transitions", "to", "cancelled"},
    [METRIC_ORDER_EXPIRED] = {"order_transitions", "to", "expired"},
    [METRIC_PAYMENT_LATE] = {"payments_refused", "reason", "closed"},
    [METRIC_ASYNC_ACCEPTED] = {"async_orders", "event", "accepted"},
    [METRIC_ASYNC_UNCONFIRMED] = {"async_orders", "event", "unconfirmed"},
    [METRIC_ASYNC_WRITTEN] = {"async_orders", "event", "written"},
    [METRIC_ASYNC_DEAD] = {"async_orders", "event", "dead_lettered"},
    [METRIC_ASYNC_REPAIRS] = {"async_repairs", "what", "sale_state"},
    [METRIC_CONN_ERROR_MYSQL] = {"connection_errors", "backend", "mysql"},
    [METRIC_CONN_ERROR_REDIS] = {"connection_errors", "backend", "redis"},
    [METRIC_VOUCHER_READ_REPLICA] = {"voucher_reads", "server", "replica"},
    [METRIC_VOUCHER_READ_PRIMARY] = {"voucher_reads", "server", "primary"},
    [METRIC_LISTING_REFRESH] = {"listing_refreshes", "what", "sales"},
    [METRIC_REDIS_MOVED] = {"redis_cluster_redirections", "kind", "moved"},
    [METRIC_REDIS_ASK] = {"redis_cluster_redirections", "kind", "ask"},
    [METRIC_REDIS_TRYAGAIN] = {"redis_cluster_redirections", "kind",
                               "tryagain"},
    [METRIC_REDIS_REFRESH] = {"redis_cluster_redirections", "kind", "refresh"},
    [METRIC_SMS_SENT] = {"sms_codes", "outcome", "sent"},
    [METRIC_SMS_NOT_SENT] = {"sms_codes", "outcome", "not_sent"},
    [METRIC_SMS_UNCONFIRMED] = {"sms_codes", "outcome", "unconfirmed"},
    [METRIC_SMS_QUEUE_FULL] = {"sms_codes", "outcome", "queue_full"},
    [METRIC_SMS_OVER_BUDGET] = {"sms_refused", "why", "over_budget"},
    [METRIC_SMS_REGION] = {"sms_refused", "why", "region"},
    /* Rendered on their own: */
    [METRIC_HTTP_CONN_OPENED] = {"", "", ""},
    [METRIC_HTTP_CONN_CLOSED] = {"", "", ""},
};

/* HELP text per counter family, in the order they are first met. */
static const struct {
    const char *family;
    const char *help;
} family_help[] = {
    {"lock_acquisitions", "Purchase lock attempts by outcome."},
    {"purchases", "Purchase attempts that reached a decision, by outcome."},
    {"connection_errors",
     "MySQL and Redis connections that failed to open or broke."},
    {"order_transitions",
     "Unpaid orders that were paid, cancelled or expired."},
    {"async_orders",
     "Asynchronous purchases: accepted (202), unconfirmed (sold, not "
     "confirmed by Redis' replicas in time: 503), written to MySQL from "
     "the stream, moved to the dead-letter stream."},
    {"async_repairs",
     "Times an asynchronous sale's Redis state was rebuilt from MySQL."},
    {"payments_refused",
     "Payments refused because the order was closed or its deadline had "
     "passed (the payment must be refunded)."},
    {"voucher_reads",
     "Voucher reads and lists by the MySQL server that answered them."},
    {"listing_refreshes",
     "Queries that refreshed the instance's snapshot of the sales listed "
     "by GET /api/sales (at most one a second)."},
    {"redis_cluster_redirections",
     "Redis Cluster routing: MOVED and ASK replies followed, TRYAGAIN and "
     "CLUSTERDOWN replies waited out, slot maps asked for (refresh)."},
    {"sms_codes",
     "Login codes sent to the SMS webhook: taken (sent), surely not taken "
     "(not_sent: refused or not reached), perhaps taken (unconfirmed: "
     "reached, no answer within 4 s), or refused at once because the "
     "sender held its most (queue_full); all but sent answered 503."},
    {"sms_refused",
     "Login codes refused before any SMS: the calling code's budget of "
     "codes a minute spent (over_budget, SECKILL_SMS_PER_MIN), or a number "
     "outside SECKILL_SMS_REGIONS (region)."},
};

/* ---- the per-thread block ---- */

typedef _Atomic uint64_t cell;

struct route_cells {
    cell status[STATUSES + 1];
    cell lat[LAT_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    cell lat_sum_ns;
};

struct wait_cells {
    cell lat[LAT_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    cell sum_ns;
};

struct block {
    char pad_head[64]; /* keep the cells off a neighbour's cache line */
    cell counters[METRIC_COUNTERS];
    struct wait_cells waits[METRIC_WAITS];
    cell batch[BATCH_BUCKETS + 1];
    cell batch_sum;
    struct route_cells routes[METRICS_ROUTES_MAX];
    char pad_tail[64];
    /* Under list_mutex: */
    struct block *next;
    bool in_use;
};

static pthread_mutex_t list_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct block *list_head;
static pthread_key_t block_key;
static pthread_once_t block_key_once = PTHREAD_ONCE_INIT;
static _Thread_local struct block *my_block;
static struct timespec start_time;

__attribute__((constructor)) static void start_time_record(void)
{
    clock_gettime(CLOCK_MONOTONIC, &start_time);
}

/* The owner exited: its counts stay, the next new thread writes on. */
static void block_release(void *p)
{
    struct block *b = p;

    pthread_mutex_lock(&list_mutex);
    b->in_use = false;
    pthread_mutex_unlock(&list_mutex);
    my_block = NULL;
}

static void block_key_create(void)
{
    if (pthread_key_create(&block_key, block_release) != 0)
        abort();
}

static struct block *block_claim(void)
{
    struct block *b;

    pthread_once(&block_key_once, block_key_create);
    pthread_mutex_lock(&list_mutex);
    for (b = list_head; b; b = b->next)
        if (!b->in_use)
            break;
    if (!b) {
        b = xcalloc(1, sizeof(*b));
        b->next = list_head;
        list_head = b;
    }
    b->in_use = true;
    pthread_mutex_unlock(&list_mutex);
    pthread_setspecific(block_key, b);
    my_block = b;
    return b;
}

static inline struct block *block_mine(void)
{
    struct block *b = my_block;
    return b ? b : block_claim();
}

/* One writer per cell: a plain add, made of atomics only for the reader. */
static inline void cell_add(cell *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t cell_get(cell *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- recording ---- */

void metrics_count(enum metric_counter c, uint64_t n)
{
    if ((unsigned)c >= METRIC_COUNTERS)
        return;
    cell_add(&block_mine()->counters[c], n);
}

static unsigned batch_bucket(unsigned n)
{
    unsigned i = 0;

    /* le = 1, 2, 4, ..., 256, then +Inf */
    while (i < BATCH_BUCKETS && n > (1u << i))
        i++;
    return i;
}

void metrics_observe_batch(unsigned purchases_in_tx)
{
    struct block *b = block_mine();

    cell_add(&b->batch[batch_bucket(purchases_in_tx)], 1);
    cell_add(&b->batch_sum, purchases_in_tx);
}

static unsigned lat_bucket(uint64_t ns)
{
    unsigned i = 0;

    while (i < LAT_BUCKETS && ns > lat_bound_ns[i])
        i++;
    return i;
}

void metrics_observe_wait(enum metric_wait w, uint64_t ns)
{
    struct block *b;

    if ((unsigned)w >= METRIC_WAITS)
        return;
    b = block_mine();
    cell_add(&b->waits[w].lat[lat_bucket(ns)], 1);
    cell_add(&b->waits[w].sum_ns, ns);
}

static unsigned status_slot(unsigned status)
{
    for (unsigned i = 0; i < STATUSES; i++)
        if (status_codes[i] == status)
            return i;
    return STATUS_OTHER;
}

void metrics_request_observe(unsigned route, unsigned status,
                             uint64_t duration_ns)
{
    struct block *b = block_mine();
    struct route_cells *r;
    unsigned i = 0;

    if (route >= METRICS_ROUTES_MAX)
        route = METRICS_ROUTES_MAX - 1;
    r = &b->routes[route];
    cell_add(&r->status[status_slot(status)], 1);
    i = lat_bucket(duration_ns);
    cell_add(&r->lat[i], 1);
    cell_add(&r->lat_sum_ns, duration_ns);
}

/* ---- summing ---- */

struct sums {
    uint64_t counters[METRIC_COUNTERS];
    struct {
        uint64_t lat[LAT_BUCKETS + 1];
        uint64_t sum_ns;
    } waits[METRIC_WAITS];
    uint64_t batch[BATCH_BUCKETS + 1];
    uint64_t batch_sum;
    struct {
        uint64_t status[STATUSES + 1];
        uint64_t lat[LAT_BUCKETS + 1];
        uint64_t lat_sum_ns;
    } routes[METRICS_ROUTES_MAX];
};

static void sums_collect(struct sums *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_lock(&list_mutex);
    for (struct block *b = list_head; b; b = b->next) {
        for (unsigned i = 0; i < METRIC_COUNTERS; i++)
            s->counters[i] += cell_get(&b->counters[i]);
        for (unsigned w = 0; w < METRIC_WAITS; w++) {
            for (unsigned i = 0; i <= LAT_BUCKETS; i++)
                s->waits[w].lat[i] += cell_get(&b->waits[w].lat[i]);
            s->waits[w].sum_ns += cell_get(&b->waits[w].sum_ns);
        }
        for (unsigned i = 0; i <= BATCH_BUCKETS; i++)
            s->batch[i] += cell_get(&b->batch[i]);
        s->batch_sum += cell_get(&b->batch_sum);
        for (unsigned r = 0; r < METRICS_ROUTES_MAX; r++) {
            struct route_cells *rc = &b->routes[r];
            for (unsigned i = 0; i <= STATUSES; i++)
                s->routes[r].status[i] += cell_get(&rc->status[i]);
            for (unsigned i = 0; i <= LAT_BUCKETS; i++)
                s->routes[r].lat[i] += cell_get(&rc->lat[i]);
            s->routes[r].lat_sum_ns += cell_get(&rc->lat_sum_ns);
        }
    }
    pthread_mutex_unlock(&list_mutex);
}

uint64_t metrics_counter_get(enum metric_counter c)
{
    uint64_t n = 0;

    if ((unsigned)c >= METRIC_COUNTERS)
        return 0;
    pthread_mutex_lock(&list_mutex);
    for (struct block *b = list_head; b; b = b->next)
        n += cell_get(&b->counters[c]);
    pthread_mutex_unlock(&list_mutex);
    return n;
}

/* ---- rendering ---- */

struct out {
    char *buf;
    size_t len, cap;
};

__attribute__((format(printf, 2, 3))) static void
out_printf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            abort(); /* only a bad format */
        if ((size_t)n < o->cap - o->len)
            break;
        o->cap = (o->cap + (size_t)n + 1) * 2;
        o->buf = xrealloc(o->buf, o->cap);
    }
    o->len += (size_t)n;
}

static void out_meta(struct out *o, const char *name, const char *type,
                     const char *help)
{
    out_printf(o, "# HELP seckill_%s %s\n# TYPE seckill_%s %s\n", name, help,
               name, type);
}

/* A label value with \, " and newline escaped, as the format wants. */
static void out_label_value(struct out *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            out_printf(o, "\\\\");
        else if (*v == '"')
            out_printf(o, "\\\"");
        else if (*v == '\n')
            out_printf(o, "\\n");
        else
            out_printf(o, "%c", *v);
    }
}

static void out_route_label(struct out *o, const struct metrics_extra *extra,
                            unsigned r)
{
    out_printf(o, "route=\"");
    if (extra && r < extra->routes && extra->route_names[r])
        out_label_value(o, extra->route_names[r]);
    else
        out_printf(o, "%u", r);
    out_printf(o, "\"");
}

static void render_counters(struct out *o, const struct sums *s)
{
    for (size_t f = 0; f < sizeof(family_help) / sizeof(family_help[0]); f++) {
        char name[64];
        snprintf(name, sizeof(name), "%s_total", family_help[f].family);
        out_meta(o, name, "counter", family_help[f].help);
        for (unsigned c = 0; c < METRIC_COUNTERS; c++)
            if (strcmp(counter_info[c].family, family_help[f].family) == 0)
                out_printf(o, "seckill_%s{%s=\"%s\"} %llu\n", name,
                           counter_info[c].label, counter_info[c].value,
                           (unsigned long long)s->counters[c]);
    }
}

/* Routes with something recorded, and every named route. */
static bool route_shown(const struct sums *s, const struct metrics_extra *extra,
                        unsigned r)
{
    if (extra && r < extra->routes)
        return true;
    for (unsigned i = 0; i <= STATUSES; i++)
        if (s->routes[r].status[i])
            return true;
    return false;
}

static void render_requests(struct out *o, const struct sums *s,
                            const struct metrics_extra *extra)
{
    out_meta(o, "http_requests_total", "counter",
             "HTTP requests by route pattern and status code sent "
             "(code \"0\": no reply, the client went away).");
    for (unsigned r = 0; r < METRICS_ROUTES_MAX; r++) {
        for (unsigned i = 0; i <= STATUSES; i++) {
            uint64_t n = s->routes[r].status[i];
            if (!n)
                continue;
            out_printf(o, "seckill_http_requests_total{");
            out_route_label(o, extra, r);
            if (i == STATUS_OTHER)
                out_printf(o, ",code=\"other\"} %llu\n", (unsigned long long)n);
            else
                out_printf(o, ",code=\"%u\"} %llu\n", status_codes[i],
                           (unsigned long long)n);
        }
    }

    out_meta(o, "http_request_duration_seconds", "histogram",
             "Time from the request's first callback to its reply being "
             "queued (or its end, without one), by route pattern.");
    for (unsigned r = 0; r < METRICS_ROUTES_MAX; r++) {
        uint64_t cum = 0;
        if (!route_shown(s, extra, r))
            continue;
        for (unsigned i = 0; i <= LAT_BUCKETS; i++) {
            cum += s->routes[r].lat[i];
            out_printf(o, "seckill_http_request_duration_seconds_bucket{");
            out_route_label(o, extra, r);
            out_printf(o, ",le=\"%s\"} %llu\n",
                       i < LAT_BUCKETS ? lat_bound_text[i] : "+Inf",
                       (unsigned long long)cum);
        }
        out_printf(o, "seckill_http_request_duration_seconds_sum{");
        out_route_label(o, extra, r);
        out_printf(o, "} %.9f\n", (double)s->routes[r].lat_sum_ns / 1e9);
        out_printf(o, "seckill_http_request_duration_seconds_count{");
        out_route_label(o, extra, r);
        out_printf(o, "} %llu\n", (unsigned long long)cum);
    }
}

static void render_batch(struct out *o, const struct sums *s)
{
    uint64_t cum = 0;

    out_meta(o, "purchase_batch_size", "histogram",
             "Purchases written per database transaction.");
    for (unsigned i = 0; i <= BATCH_BUCKETS; i++) {
        cum += s->batch[i];
        if (i < BATCH_BUCKETS)
            out_printf(o,
                       "seckill_purchase_batch_size_bucket{le=\"%u\"} %llu\n",
                       1u << i, (unsigned long long)cum);
        else
            out_printf(o,
                       "seckill_purchase_batch_size_bucket{le=\"+Inf\"} %llu\n",
                       (unsigned long long)cum);
    }
    out_printf(o, "seckill_purchase_batch_size_sum %llu\n",
               (unsigned long long)s->batch_sum);
    out_printf(o, "seckill_purchase_batch_size_count %llu\n",
               (unsigned long long)cum);
}

static void render_waits(struct out *o, const struct sums *s)
{
    static const struct {
        const char *name, *help;
    } info[METRIC_WAITS] = {
        [METRIC_WAIT_ACCEPT] = {"http_accept_wait_seconds",
                                "Time from a connection's accept to the "
                                "first callback of its first request."},
        [METRIC_WAIT_QUEUE] = {"purchase_queue_wait_seconds",
                               "Time a purchase waited in its voucher's "
                               "queue for its batch to start."},
        [METRIC_WAIT_EXPIRY_LAG] = {"order_expiry_lag_seconds",
                                    "Time from an unpaid order's pay "
                                    "deadline to its expiry."},
    };

    for (unsigned w = 0; w < METRIC_WAITS; w++) {
        uint64_t cum = 0;

        out_meta(o, info[w].name, "histogram", info[w].help);
        for (unsigned i = 0; i <= LAT_BUCKETS; i++) {
            cum += s->waits[w].lat[i];
            out_printf(o, "seckill_%s_bucket{le=\"%s\"} %llu\n", info[w].name,
                       i < LAT_BUCKETS ? lat_bound_text[i] : "+Inf",
                       (unsigned long long)cum);
        }
        out_printf(o, "seckill_%s_sum %.9f\n", info[w].name,
                   (double)s->waits[w].sum_ns / 1e9);
        out_printf(o, "seckill_%s_count %llu\n", info[w].name,
                   (unsigned long long)cum);
    }
}

/* One gauge of every replica, labelled by shard with sharded sales. */
static void replica_gauge(struct out *o, const struct metrics_extra *extra,
                          const char *name, const char *help, bool lag)
{
    char label[32] = "";

    out_meta(o, name, "gauge", help);
    for (size_t i = 0; i < extra->nreplicas; i++) {
        const struct metrics_replica *r = &extra->replicas[i];

        if (extra->replicas_by_shard)
            snprintf(label, sizeof(label), "{shard=\"%u\"}", r->shard);
        out_printf(o, "seckill_%s%s %lld\n", name, label,
                   lag ? (long long)r->lag_s : (long long)r->up);
    }
}

static void render_replica(struct out *o, const struct metrics_extra *extra)
{
    if (!extra || !extra->nreplicas)
        return;
    replica_gauge(o, extra, "mysql_replica_up",
                  "1 while voucher reads go to the MySQL read replica (of "
                  "the shard, with sharded sales): it answers, replicates "
                  "and lags no more than the bound.",
                  false);
    replica_gauge(o, extra, "mysql_replica_lag_seconds",
                  "How far the read replica is behind its primary "
                  "(Seconds_Behind_Master); -1 when unknown.",
                  true);
}

static void render_queues(struct out *o, const struct metrics_extra *extra)
{
    out_meta(o, "purchase_queue_depth", "gauge",
             "Purchases waiting in a voucher's queue, for the deepest "
             "queues.");
    for (size_t i = 0; extra && i < extra->queues; i++)
        out_printf(o, "seckill_purchase_queue_depth{voucher=\"%lld\"} %u\n",
                   (long long)extra->queue_ids[i], extra->queue_depths[i]);
    out_meta(o, "purchase_queues", "gauge",
             "Per-voucher purchase queues in memory; one unused for "
             "SECKILL_IDLE_FREE_S is freed.");
    out_printf(o, "seckill_purchase_queues %zu\n",
               extra ? extra->queues_kept : 0);
    out_meta(o, "voucher_states", "gauge",
             "Vouchers whose stock state (segments) is in memory; one unused "
             "for SECKILL_IDLE_FREE_S is freed.");
    out_printf(o, "seckill_voucher_states %zu\n",
               extra ? extra->voucher_states : 0);
}

static void render_async(struct out *o, const struct metrics_extra *extra)
{
    out_meta(o, "async_backlog", "gauge",
             "Orders of an async sale sold in Redis and not yet written to "
             "MySQL, for the deepest backlogs (sampled every 2 s).");
    for (size_t i = 0; extra && i < extra->backlogs; i++)
        out_printf(o, "seckill_async_backlog{voucher=\"%lld\"} %u\n",
                   (long long)extra->backlog_ids[i], extra->backlog_depths[i]);
    out_meta(o, "async_writer_lag_seconds", "gauge",
             "Age of the oldest async order waiting for MySQL (0: none).");
    out_printf(o, "seckill_async_writer_lag_seconds %.3f\n",
               extra ? extra->writer_lag_s : 0.0);
}

/* Resident set size in bytes from /proc/self/statm, or -1. */
static long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size, resident;
    long long ret = -1;

    if (!f)
        return -1;
    if (fscanf(f, "%llu %llu", &size, &resident) == 2)
        ret = (long long)resident * sysconf(_SC_PAGESIZE);
    fclose(f);
    return ret;
}

static void render_process(struct out *o)
{
    struct timespec now;
    long long rss = rss_bytes();

    clock_gettime(CLOCK_MONOTONIC, &now);
    out_meta(o, "process_uptime_seconds", "gauge",
             "Seconds since the process started.");
    out_printf(o, "seckill_process_uptime_seconds %.3f\n",
               (double)(now.tv_sec - start_time.tv_sec) +
                   (double)(now.tv_nsec - start_time.tv_nsec) / 1e9);
    if (rss >= 0) {
        out_meta(o, "process_resident_memory_bytes", "gauge",
                 "Resident memory size in bytes.");
        out_printf(o, "seckill_process_resident_memory_bytes %lld\n", rss);
    }
}

static void render_connections(struct out *o, const struct sums *s)
{
    uint64_t opened = s->counters[METRIC_HTTP_CONN_OPENED];
    uint64_t closed = s->counters[METRIC_HTTP_CONN_CLOSED];

    out_meta(o, "http_connections_total", "counter",
             "HTTP client connections accepted.");
    out_printf(o, "seckill_http_connections_total %llu\n",
               (unsigned long long)opened);
    /* Both are read while they move: never show a negative count. */
    out_meta(o, "http_open_connections", "gauge",
             "HTTP client connections open now.");
    out_printf(o, "seckill_http_open_connections %llu\n",
               (unsigned long long)(opened > closed ? opened - closed : 0));
}

char *metrics_render(const struct metrics_extra *extra, size_t *len)
{
    struct sums *s = xmalloc(sizeof(*s));
    struct out o = {xmalloc(16384), 0, 16384};

    o.buf[0] = '\0';
    sums_collect(s);
    render_counters(&o, s);
    render_requests(&o, s, extra);
    render_batch(&o, s);
    render_waits(&o, s);
    render_queues(&o, extra);
    render_async(&o, extra);
    render_replica(&o, extra);
    render_connections(&o, s);
    render_process(&o);
    free(s);
    if (len)
        *len = o.len;
    return o.buf;
}
