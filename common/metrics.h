/*
 * metrics.h - counters and histograms for GET /metrics, cheap enough for
 * the purchase path. Every thread that records something gets its own
 * block of counters (allocated and linked into a global list on its first
 * record, the only time a mutex is taken); a record is a relaxed load and
 * store on that thread's own cache lines, with no lock and no atomic
 * read-modify-write. metrics_render() sums the blocks when scraped. The
 * block of a thread that exits is kept (its counts stay in the sums) and
 * handed to the next new thread, so the number of blocks is bounded by
 * the number of threads alive at once.
 *
 * Every function here is thread-safe and may be called from any thread,
 * including before main() has set anything up.
 */
#ifndef SECKILL_METRICS_H
#define SECKILL_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Counters, rendered as seckill_lock_acquisitions_total{outcome=...},
 * seckill_purchases_total{outcome=...},
 * seckill_connection_errors_total{backend=...},
 * seckill_voucher_reads_total{server="replica"|"primary"},
 * seckill_redis_cluster_redirections_total{kind=...},
 * seckill_sms_codes_total{outcome=...}, and (the last two)
 * seckill_http_connections_total and the seckill_http_open_connections
 * gauge.
 */
enum metric_counter {
    METRIC_LOCK_ACQUIRED,            /* lock_acquire() got the lock */
    METRIC_LOCK_BUSY,                /* held by someone else: 429 BUSY */
    METRIC_LOCK_ERROR,               /* the lock backend failed */
    METRIC_PURCHASE_OK,              /* an order was written */
    METRIC_PURCHASE_SOLD_OUT,        /* the database said no stock left */
    METRIC_PURCHASE_DUPLICATE,       /* the user already had an order */
    METRIC_PURCHASE_SOLD_OUT_CACHED, /* refused from the sold-out cache */
    METRIC_PURCHASE_SHED,            /* its voucher's queue was full: 429 */
    METRIC_PURCHASE_EXPIRED,         /* over its time budget: 503 */
    METRIC_ORDER_PAID,               /* an order went unpaid -> paid */
    METRIC_ORDER_CANCELLED,          /* unpaid -> cancelled */
    METRIC_ORDER_EXPIRED,            /* unpaid -> expired */
    METRIC_PAYMENT_LATE,             /* a payment refused: closed or late */
    METRIC_ASYNC_ACCEPTED,           /* an async purchase answered 202 */
    METRIC_ASYNC_UNCONFIRMED,        /* sold, replicas did not confirm: 503 */
    METRIC_ASYNC_WRITTEN,            /* a streamed order written to MySQL */
    METRIC_ASYNC_DEAD,               /* a streamed order dead-lettered */
    METRIC_ASYNC_REPAIRS,            /* an async sale's Redis state rebuilt */
    METRIC_CONN_ERROR_MYSQL,         /* a MySQL connection failed or broke */
    METRIC_CONN_ERROR_REDIS,         /* a Redis connection failed or broke */
    METRIC_VOUCHER_READ_REPLICA,     /* a voucher read or list: the replica */
    METRIC_VOUCHER_READ_PRIMARY,     /* and the primary */
    METRIC_LISTING_REFRESH,          /* the sales listing's snapshot query */
    METRIC_REDIS_MOVED,              /* Redis Cluster: a MOVED followed */
    METRIC_REDIS_ASK,                /* an ASK followed */
    METRIC_REDIS_TRYAGAIN,           /* a TRYAGAIN/CLUSTERDOWN waited out */
    METRIC_REDIS_REFRESH,            /* the slot map asked for */
    METRIC_SMS_SENT,                 /* a login code the webhook took */
    METRIC_SMS_NOT_SENT,             /* surely not taken: 503 */
    METRIC_SMS_UNCONFIRMED,          /* perhaps taken, no answer: 503 */
    METRIC_SMS_QUEUE_FULL,           /* too many on their way: 503 at once */
    METRIC_SMS_OVER_BUDGET,          /* a calling code's budget spent: 429 */
    METRIC_SMS_REGION,               /* a number outside the regions: 400 */
    METRIC_HTTP_CONN_OPENED,         /* a client connection was accepted */
    METRIC_HTTP_CONN_CLOSED,         /* and closed (open = the difference) */
    METRIC_COUNTERS
};

/* Add n to counter c on the calling thread's block. Lock-free. */
void metrics_count(enum metric_counter c, uint64_t n);

/*
 * Record one database transaction that wrote purchases_in_tx purchases
 * (1 without batching) in the batch-size histogram. Lock-free.
 */
void metrics_observe_batch(unsigned purchases_in_tx);

/* Waits, rendered as histograms with the request latency buckets. */
enum metric_wait {
    /* seckill_http_accept_wait_seconds: from a connection's accept to
     * the first callback of its first request (queueing in front of the
     * service's code: a thread busy elsewhere, the request still
     * arriving). */
    METRIC_WAIT_ACCEPT,
    /* seckill_purchase_queue_wait_seconds: from a purchase's submission
     * to the start of its batch. */
    METRIC_WAIT_QUEUE,
    /* seckill_order_expiry_lag_seconds: from an unpaid order's pay
     * deadline to its expiry. */
    METRIC_WAIT_EXPIRY_LAG,
    METRIC_WAITS
};

/* Record one wait of w lasting ns nanoseconds. Lock-free. */
void metrics_observe_wait(enum metric_wait w, uint64_t ns);

/*
 * HTTP requests. Routes are small integers chosen by the caller (the
 * index in its route table, one more for "no route"), named only when
 * rendering; route >= METRICS_ROUTES_MAX is counted in the last slot.
 * status is the HTTP status sent (0: none); duration_ns the time from
 * the request's first callback (its headers read) to its completion.
 * Lock-free.
 */
#define METRICS_ROUTES_MAX 40
void metrics_request_observe(unsigned route, unsigned status,
                             uint64_t duration_ns);

/* One read replica's state, as /metrics shows it. */
struct metrics_replica {
    unsigned shard;
    bool up;       /* voucher reads go there */
    int64_t lag_s; /* -1: unknown */
};

/* What the caller knows that this module cannot see. */
struct metrics_extra {
    const char *const *route_names; /* route_names[i] names route i */
    unsigned routes;                /* entries in route_names */
    /* The deepest purchase queues (seckill_purchase_queue_depth by
     * voucher): queues of them, may be 0. */
    const int64_t *queue_ids;
    const unsigned *queue_depths;
    size_t queues;
    /* Per-voucher state in memory (seckill_purchase_queues and
     * seckill_voucher_states): the engine's queues, the store's states. */
    size_t queues_kept;
    size_t voucher_states;
    /* The async sales with the most orders waiting for MySQL
     * (seckill_async_backlog by voucher), and the age of the oldest such
     * order (seckill_async_writer_lag_seconds; 0: none waits): */
    const int64_t *backlog_ids;
    const unsigned *backlog_depths;
    size_t backlogs;
    double writer_lag_s;
    /* The read replicas (seckill_mysql_replica_up and
     * seckill_mysql_replica_lag_seconds), one per shard that has one;
     * labelled by shard with sharded sales, else shard 0's alone without
     * a label: */
    const struct metrics_replica *replicas;
    size_t nreplicas;
    bool replicas_by_shard;
};

/*
 * Sum every thread's block and render the Prometheus text exposition
 * format (version 0.0.4) with HELP and TYPE lines, names prefixed
 * "seckill_": the counters above, requests by route and status, the
 * latency histogram by route, the batch-size histogram, and process
 * gauges (resident memory, uptime, open connections). extra may be NULL
 * (routes are then named by number). Returns a NUL-terminated string,
 * never NULL, that the caller frees with free(3), and stores its length
 * in *len (len may be NULL). Counts recorded while it runs may or may not be
 * included; each histogram's _count equals its +Inf bucket.
 */
char *metrics_render(const struct metrics_extra *extra, size_t *len);

/*
 * The sum over all threads of counter c, for tests and logs. Counts
 * recorded while it runs may or may not be included.
 */
uint64_t metrics_counter_get(enum metric_counter c);

#endif
