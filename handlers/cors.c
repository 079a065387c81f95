/*
 * cors.c - Cross-Origin Resource Sharing: which web pages on other origins
 * may call the API from a browser (cfg->cors_origins, SECKILL_CORS_ORIGINS).
 *
 * The API authenticates with a bearer token in the Authorization header,
 * never with cookies, so a listed origin gets its own origin echoed in
 * Access-Control-Allow-Origin and nothing about credentials: no "*", no
 * Access-Control-Allow-Credentials. A request from an origin that is not
 * listed is still served (a browser keeps the answer from the page; curl
 * and servers are not subject to CORS), but without those headers; its
 * preflight is refused with 403. Every reply carries Vary: Origin while
 * CORS is on, since the headers then depend on the Origin.
 *
 * The pages the service serves itself (/, /admin) are on its own origin
 * and need none of this.
 */
#include "handlers/cors.h"

#include <string.h>
#include <microhttpd.h>

/* Response headers a page on a listed origin may read: the server clock
 * (the pages' countdown) and how long to wait after a 429 or 503. */
#define EXPOSED_HEADERS "Date, Retry-After, Idempotent-Replayed"
#define ALLOWED_HEADERS                                                        \
    "Authorization, Content-Type, Seckill-PoW, Seckill-Ticket, "               \
    "Idempotency-Key"
/* Chromium caps a preflight's cache at two hours. */
#define PREFLIGHT_MAX_AGE_S "7200"

/* req's Origin header when cfg->cors_origins lists it exactly, else NULL. */
static const char *listed_origin(struct request *req)
{
    const char *list = req->cfg->cors_origins, *origin;
    size_t len;

    if (!list || !*list)
        return NULL;
    origin = req_header_value(req, MHD_HTTP_HEADER_ORIGIN);
    if (!origin || !*origin)
        return NULL;
    len = strlen(origin);
    /* The list was validated at start-up: origins separated by commas,
     * optionally with spaces around them. */
    while (*list) {
        list += strspn(list, " ,");
        size_t n = strcspn(list, ",");
        size_t m = n;
        while (m && list[m - 1] == ' ')
            m--;
        if (m && m == len && memcmp(list, origin, len) == 0)
            return origin;
        list += n;
    }
    return NULL;
}

void cors_reply_headers(struct request *req)
{
    const char *origin;

    if (!req->cfg->cors_origins || !*req->cfg->cors_origins)
        return;
    req_header_add(req, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ORIGIN);
    /* A preflight's answer has set its own. */
    if (req->method == HTTP_OPTIONS)
        return;
    origin = listed_origin(req);
    if (!origin)
        return;
    req_header_add(req, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    req_header_add(req, MHD_HTTP_HEADER_ACCESS_CONTROL_EXPOSE_HEADERS,
                   EXPOSED_HEADERS);
}

unsigned cors_options(struct request *req, const struct route *route)
{
    const char *origin = req_header_value(req, MHD_HTTP_HEADER_ORIGIN);
    const char *method =
        req_header_value(req, MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_METHOD);

    if (!origin || !method) {
        /* A plain OPTIONS asks what the resource supports. */
        req_header_add(req, MHD_HTTP_HEADER_ALLOW, route->allow);
        return req_reply_raw(req, 204, NULL, NULL, 0);
    }
    origin = listed_origin(req);
    if (!origin)
        return req_error(req, ERR_FORBIDDEN,
                         "this origin may not call the API from a browser "
                         "(SECKILL_CORS_ORIGINS)");
    /* The route's methods whatever was asked: the browser compares. */
    req_header_add(req, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    req_header_add(req, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS,
                   route->allow);
    req_header_add(req, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS,
                   ALLOWED_HEADERS);
    req_header_add(req, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE,
                   PREFLIGHT_MAX_AGE_S);
    return req_reply_raw(req, 204, NULL, NULL, 0);
}
