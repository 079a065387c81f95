/*
 * route.h - the route table (route.c): which handler answers which path
 * and method, and where it runs.
 */
#ifndef SECKILL_HANDLERS_ROUTE_H
#define SECKILL_HANDLERS_ROUTE_H

#include <stdint.h>

#include "handlers/endpoints.h"

/* Where a route's handler runs (dispatch.c). */
enum route_run {
    /* On the HTTP thread: it answers from memory. */
    ROUTE_RUN_HERE,
    /* On the task pool (it waits for MySQL or Redis), after the rate
     * limit. */
    ROUTE_RUN_POOL_LIMITED,
    /* On the task pool, without a rate limit (the readiness probe: it
     * always answers). */
    ROUTE_RUN_POOL,
    /* On the HTTP thread when the request carries a valid token or no
     * limit applies to it: the purchase, which decides what it can from
     * memory and hands the rest to the sale layer, rate limit included.
     * Otherwise as ROUTE_RUN_POOL_LIMITED (its 401 counts against the
     * client's address). */
    ROUTE_RUN_HERE_WITH_TOKEN,
};

struct route {
    const char *pattern; /* "/api/vouchers/{id}/seckill", "/static/{file}" */
    handler_fn get;
    handler_fn post;
    const char *allow; /* the Allow header: "GET, POST, OPTIONS" */
    enum route_run run;
    handler_fn del;   /* DELETE */
    handler_fn patch; /* PATCH */
};

enum route_result { ROUTE_OK, ROUTE_NOT_FOUND, ROUTE_BAD_ID };

/*
 * Find the route for path. ROUTE_OK sets *route and *id (0 without an
 * {id}); ROUTE_BAD_ID sets *route for a path whose {id} segment is not a
 * positive integer. A "{file}" segment matches any non-empty segment (the
 * handler reads the path itself).
 */
enum route_result route_match(const char *path, const struct route **route,
                              int64_t *id);
/* Routes in the table; route_index() of each is below this. */
unsigned route_count(void);
/* The position of r in the table, a small integer for the metrics. */
unsigned route_index(const struct route *r);
/* The pattern of the route at index i < route_count(). */
const char *route_pattern(unsigned i);

#endif
