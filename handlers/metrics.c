/*
 * metrics.c - GET /metrics: the counters of common/metrics.h in the
 * Prometheus text format, with the route table's patterns as route
 * labels. No token and no rate limit: it is for a scraper on the
 * operator's network (README).
 */
#include "handlers/internal.h"

#include <stdlib.h>

#include "common/metrics.h"
#include "common/util.h"

/* The deepest purchase queues shown; a bounded label set. */
#define QUEUES_SHOWN 5

unsigned metrics_get(struct request *req)
{
    unsigned n = route_count();
    const char **names = xcalloc(n + 1, sizeof(*names));
    struct metrics_extra extra = {0};
    int64_t queue_ids[QUEUES_SHOWN];
    unsigned queue_depths[QUEUES_SHOWN];

    for (unsigned i = 0; i < n; i++)
        names[i] = route_pattern(i);
    /* http.c counts requests without a route at index route_count(). */
    names[n] = "unmatched";
    extra.route_names = names;
    extra.routes = n + 1;
    extra.queues =
        engine_queue_top(req->engine, queue_ids, queue_depths, QUEUES_SHOWN);
    extra.queue_ids = queue_ids;
    extra.queue_depths = queue_depths;
    extra.queues_kept = engine_queue_count(req->engine);
    extra.voucher_states = store_voucher_states_count();
    int64_t backlog_ids[QUEUES_SHOWN], oldest_ms;
    unsigned backlog_depths[QUEUES_SHOWN];
    extra.backlogs = async_backlog_top(req->async, backlog_ids, backlog_depths,
                                       QUEUES_SHOWN, &oldest_ms);
    extra.backlog_ids = backlog_ids;
    extra.backlog_depths = backlog_depths;
    if (oldest_ms) {
        int64_t lag = util_now_ms() - oldest_ms;
        extra.writer_lag_s = lag > 0 ? (double)lag / 1000.0 : 0.0;
    }
    struct store_replica_state rs;
    store_replica_state_get(&rs);
    extra.replica = rs.configured;
    extra.replica_up = rs.usable;
    extra.replica_lag_s = rs.lag_s;
    req->text = metrics_render(&extra, &req->text_len);
    req->text_type = "text/plain; version=0.0.4; charset=utf-8";
    free(names);
    req->status = 200;
    return 200;
}
