/*
 * metrics.c - GET /metrics: the counters of common/metrics.h in the
 * Prometheus text format, with the route table's patterns as route
 * labels. No token and no rate limit: it is for a scraper on the
 * operator's network, and answers only the connection peers of
 * SECKILL_METRICS_ALLOW (README). GET /api/admin/metrics: the same text
 * for an admin token, from anywhere (the admin page's counters).
 */
#include <stdlib.h>

#include "handlers/endpoints.h"

static unsigned metrics_reply(struct request *req)
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

unsigned metrics_get(struct request *req)
{
    struct cidr peer;

    /* The peer, not X-Forwarded-For: a proxy in front must not pass
     * /metrics on (deploy/haproxy.cfg refuses it). */
    if (!req_peer_addr(req, &peer) ||
        !cidr_list_has(&req->cfg->metrics_allow, &peer))
        return req_error(req, ERR_FORBIDDEN,
                         "GET /metrics answers only the addresses of "
                         "SECKILL_METRICS_ALLOW; an admin token reads GET "
                         "/api/admin/metrics");
    return metrics_reply(req);
}

unsigned admin_metrics_get(struct request *req)
{
    unsigned status = req_admin_or_reply(req);

    return status ? status : metrics_reply(req);
}
