/*
 * metrics.c - GET /metrics: the counters of common/metrics.h in the
 * Prometheus text format, with the route table's patterns as route
 * labels. No token and no rate limit: it is for a scraper on the
 * operator's network (README).
 */
#include <stdlib.h>

#include "handlers/endpoints.h"

unsigned metrics_get(struct request *req)
{
    struct metrics_extra extra = {0};
    struct sale_gauges g;

    /* The route table's patterns, and "unmatched" for requests without a
     * route. */
    if (req->srv) {
        extra.route_names = req->srv->route_names;
        extra.routes = req->srv->routes;
    }
    sale_gauges_read(req->sale, &g, &extra);
    req->text = metrics_render(&extra, &req->text_len);
    req->text_type = "text/plain; version=0.0.4; charset=utf-8";
    req->status = 200;
    return 200;
}
