/*
 * dispatch.c - one request from its first callback to its completion (see
 * dispatch.h): the framing checks and the 64 KiB body cap, routing (404,
 * 400 for a bad id, 405, OPTIONS), the body's media type (415 unless
 * JSON), its Idempotency-Key (idempotency.c), and its handler, run where
 * its route says (route.h): on the HTTP thread when it answers from
 * memory, else on the task pool through the sale layer (sale_job_run()),
 * after the rate limit, with the request parked meanwhile. A handler runs once;
 * one that hands its request on to the sale layer returns 0, and the callback
 * of that call answers it.
 */
#include "handlers/dispatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics.h"
#include "common/util.h"
#include "handlers/cors.h"
#include "handlers/deadline.h"
#include "handlers/protocol.h"
#include "handlers/ratelimit.h"
#include "handlers/reply.h"
#include "handlers/route.h"

/* A handler on a pool thread: the rate limit, the handler, the reply. */
static void pooled_run(void *arg, int err)
{
    struct request *req = arg;

    if (err)
        /* The pool stopped before it ran: nothing was done. */
        req_backend_error(req, err, "request");
    else if ((req_now_ns() - req->start_ns) / 1000000u > SALE_BUDGET_MS)
        /* It waited out its budget behind requests that wait for a
         * stalled backend. */
        req_backend_error(req, -ECANCELED, "request");
    else if ((!req->pooled_limited || !ratelimit_or_reply(req)) &&
             req->pooled(req) == 0)
        return; /* handed on: req is someone else's now (maybe gone) */
    else
        idem_finish(req);
    req_resume(req);
}

/* Park req and run fn (after the rate limit when limited) on the pool. */
static void offload(struct request *req, handler_fn fn, bool limited)
{
    req->pooled = fn;
    req->pooled_limited = limited;
    req_park(req);
    if (sale_job_run(req->sale, pooled_run, req) != 0) {
        req_backend_error(req, -ESHUTDOWN, "request");
        req_resume(req);
    }
}

/*
 * A body is JSON and says so: anything else is refused before a handler
 * or a backend sees it. Read as JSON whatever its label, a text/plain or
 * form body (which a page on any site may send without a preflight)
 * would act like the JSON request CORS keeps it from sending.
 */
static bool body_type_ok_or_reply(struct request *req)
{
    const char *type = req_header_value(req, MHD_HTTP_HEADER_CONTENT_TYPE);

    if (req_media_type_is_json(type))
        return true;
    req_error(req, ERR_UNSUPPORTED_MEDIA_TYPE,
              type ? "the body must be application/json, in UTF-8"
                   : "a request body needs Content-Type: application/json");
    return false;
}

static void dispatch(struct request *req)
{
    const struct route *route;
    handler_fn fn = NULL;

    /* The path is routed segment by segment as sent: a "/" encoded
     * inside a segment (left encoded by the server's unescape) would
     * make another path of it. */
    if (strcasestr(req->path, "%2f")) {
        req_error(req, ERR_BAD_REQUEST,
                  "an encoded / (%2F) in the path: segments may not hold one");
        return;
    }
    switch (route_match(req->path, &route, &req->id)) {
    case ROUTE_NOT_FOUND:
        req_error(req, ERR_NOT_FOUND, "no such endpoint");
        return;
    case ROUTE_BAD_ID:
        req->route_id = route_index(route);
        req_error(req, ERR_BAD_REQUEST, "the id must be a positive integer");
        return;
    case ROUTE_OK:
        req->route_id = route_index(route);
        break;
    }
    if (req->method == HTTP_OPTIONS) {
        cors_options(req, route);
        return;
    }
    if (req->method == HTTP_GET)
        fn = route->get;
    else if (req->method == HTTP_POST)
        fn = route->post;
    else if (req->method == HTTP_PATCH)
        fn = route->patch;
    else if (req->method == HTTP_DELETE)
        fn = route->del;
    if (!fn) {
        req->allow = route->allow;
        req_error(req, ERR_METHOD_NOT_ALLOWED, NULL);
        return;
    }
    if (req->body_len > 0 && !body_type_ok_or_reply(req))
        return;
    idem_parse(req);
    switch (route->run) {
    case ROUTE_RUN_HERE_WITH_TOKEN:
        if (req_auth(req) == 0 || !ratelimit_applies(req))
            break;
        /* fall through */
    case ROUTE_RUN_POOL_LIMITED:
        offload(req, fn, true);
        return;
    case ROUTE_RUN_POOL:
        offload(req, fn, false);
        return;
    case ROUTE_RUN_HERE:
        break;
    }
    fn(req);
}

/* The marks of a request whose target was cut off (dispatch_uri()). */
static char query_too_long, target_too_long;

/* Whether *req_cls is one of dispatch_uri()'s marks, not a request. */
static bool is_mark(const void *p)
{
    return p == &query_too_long || p == &target_too_long;
}

void *dispatch_uri(const struct req_server *srv, char *uri)
{
    const unsigned args_max = srv->limits.query_args_max;
    char *q = strchr(uri, '?');
    unsigned args = 1;
    void *mark = &query_too_long;

    if (strlen(uri) > srv->limits.target_max)
        mark = &target_too_long;
    else if (!q)
        return NULL;
    else {
        for (const char *p = q + 1; *p && args <= args_max; p++)
            args += *p == '&';
        if (args <= args_max)
            return NULL;
    }
    /* The daemon splits the query off at this '?' (it found it before
     * calling): an empty string after it leaves nothing to parse. */
    if (q)
        q[1] = '\0';
    return mark;
}

/* What the daemon kept for conn when it was accepted, or NULL. */
static struct conn_info *conn_info_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A reply is about to be queued: the request has fully arrived. */
static enum MHD_Result reply_now(struct MHD_Connection *conn,
                                 struct request *req)
{
    deadline_conn_busy(req->deadline);
    return reply_send(conn, req);
}

/* Declared length above the cap: refuse before reading the body. */
static bool declared_too_large(const struct request *req)
{
    const char *cl = req_header_value(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl && strtoull(cl, NULL, 10) > BODY_MAX;
}

static struct request *request_new(struct req_server *srv,
                                   struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version)
{
    struct conn_info *info = conn_info_of(conn);
    struct request *req = xcalloc(1, sizeof(*req));

    req->start_ns = req_now_ns();
    if (info && info->accept_ns) {
        metrics_observe_wait(METRIC_WAIT_ACCEPT,
                             req->start_ns - info->accept_ns);
        info->accept_ns = 0;
    }
    req->route_id = route_count(); /* "unmatched" until dispatch */
    req->cfg = srv->cfg;
    req->srv = srv;
    req->sale = srv->sale;
    req->conn = conn;
    req->deadline = info ? info->deadline : NULL;
    req->path = url;
    req->version = version;
    req->head = method;
    req->method = strcmp(method, "GET") == 0       ? HTTP_GET
                  : strcmp(method, "POST") == 0    ? HTTP_POST
                  : strcmp(method, "PATCH") == 0   ? HTTP_PATCH
                  : strcmp(method, "DELETE") == 0  ? HTTP_DELETE
                  : strcmp(method, "OPTIONS") == 0 ? HTTP_OPTIONS
                                                   : HTTP_OTHER;
    return req;
}

enum MHD_Result dispatch_access(struct req_server *srv,
                                struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload, size_t *upload_size,
                                void **req_cls)
{
    struct request *req = *req_cls;
    void *mark = is_mark(req) ? (void *)req : NULL;

    if (!req || mark) {
        struct conn_info *info = conn_info_of(conn);
        char msg[80];

        req = request_new(srv, conn, url, method, version);
        *req_cls = req;
        /* Refused heads are answered past the daemon's buffer, which
         * may have no room left for a reply (reply_refuse()). */
        if (mark == &query_too_long) {
            snprintf(msg, sizeof(msg), "more than %u query arguments",
                     srv->limits.query_args_max);
            req_error(req, ERR_URI_TOO_LONG, msg);
            return reply_refuse(conn, req);
        }
        if (mark == &target_too_long) {
            snprintf(msg, sizeof(msg),
                     "the request target is longer than %zu bytes",
                     srv->limits.target_max);
            req_error(req, ERR_URI_TOO_LONG, msg);
            return reply_refuse(conn, req);
        }
        if (req_head_size_or_reply(
                req, strlen(method) + (info ? info->target_len : strlen(url)) +
                         strlen(version) + 4))
            return reply_refuse(conn, req);
        /* The target runs up to the space before the version: a NUL in
         * it would cut the path that is routed short of what was sent. */
        if (info && info->target && version && version > info->target &&
            info->target_len < (size_t)(version - 1 - info->target)) {
            req_error(req, ERR_BAD_REQUEST,
                      "the request target holds a NUL byte");
            return reply_now(conn, req);
        }
        if (req_protocol_or_reply(req))
            return reply_now(conn, req);
        if (declared_too_large(req)) {
            req_error(req, ERR_PAYLOAD_TOO_LARGE, NULL);
            return reply_now(conn, req);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!req->too_large && req->body_len + *upload_size > BODY_MAX) {
            /* Chunked bodies have no Content-Length: stop keeping them. */
            req->too_large = true;
            free(req->body);
            req->body = NULL;
        }
        if (!req->too_large) {
            req->body = xrealloc(req->body, req->body_len + *upload_size + 1);
            memcpy(req->body + req->body_len, upload, *upload_size);
            req->body_len += *upload_size;
            req->body[req->body_len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    /* Back after req_resume(): its reply is set. */
    if (req->parked)
        return reply_send(conn, req);
    if (req->too_large)
        req_error(req, ERR_PAYLOAD_TOO_LARGE, NULL);
    else
        dispatch(req);
    if (req->parked)
        return MHD_YES; /* suspended: req_resume() brings it back */
    return reply_now(conn, req);
}

void dispatch_completed(struct req_server *srv, void **req_cls)
{
    struct request *req = *req_cls;

    if (!req || is_mark(req))
        return;
    if (req->parked)
        atomic_fetch_sub(&srv->parked, 1);
    if (!req->observed) /* ended before a reply was queued */
        metrics_request_observe(req->route_id, req->status,
                                req_now_ns() - req->start_ns);
    request_clear(req);
    free(req->text);
    free(req);
    *req_cls = NULL;
}
