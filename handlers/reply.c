/*
 * reply.c - sending a request's reply (see reply.h).
 */
#include "handlers/reply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/metrics.h"
#include "common/util.h"
#include "handlers/cors.h"
#include "handlers/stream.h"

/* Add req's extra headers to resp, queue it and drop our reference; while
 * draining, the connection closes after it. */
static enum MHD_Result queue_reply(struct MHD_Connection *conn,
                                   struct request *req,
                                   struct MHD_Response *resp)
{
    enum MHD_Result ret;

    for (unsigned i = 0; i < req->n_headers; i++)
        MHD_add_response_header(resp, req->headers[i].name,
                                req->headers[i].value);
    if (req_draining(req))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    /* Every answer is of the type it says it is. */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_X_CONTENT_TYPE_OPTIONS,
                            "nosniff");
    /* Counted now, not when the connection is done with it: a client
     * that has its answer and then scrapes /metrics finds it there. */
    metrics_request_observe(req->route_id, req->status,
                            req_now_ns() - req->start_ns);
    req->observed = true;
    ret = MHD_queue_response(conn, req->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result reply_send(struct MHD_Connection *conn, struct request *req)
{
    char *text;
    struct MHD_Response *resp;

    cors_reply_headers(req);
    if (req->stream) {
        resp = stream_response(req);
        if (!resp)
            return MHD_NO;
        return queue_reply(conn, req, resp);
    }
    if (req->raw) {
        /* An embedded file, or no body (204, 304): not ours to free. */
        resp = MHD_create_response_from_buffer(req->data_len, (void *)req->data,
                                               MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        if (req->text_type)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    req->text_type);
        return queue_reply(conn, req, resp);
    }
    if (req->text) {
        /* A text reply (GET /metrics): the response takes the buffer. */
        resp = MHD_create_response_from_buffer(req->text_len, req->text,
                                               MHD_RESPMEM_MUST_FREE);
        if (!resp)
            return MHD_NO;
        req->text = NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                req->text_type);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                                "no-store");
        return queue_reply(conn, req, resp);
    }
    if (!req->reply)
        req_error(req, ERR_INTERNAL, NULL);
    text = json_dumps(req->reply, JSON_COMPACT);
    if (!text)
        abort(); /* only out of memory */
    /* A trailing newline keeps curl output readable in a terminal. */
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len++] = '\n';
    text[len] = '\0';
    resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    /* API answers carry users' orders and tokens, and stock that changes
     * by the second: no cache, shared or private, keeps them. */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (req->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, req->allow);
    if (req->retry_after) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", req->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    return queue_reply(conn, req, resp);
}

enum MHD_Result reply_refuse(struct MHD_Connection *conn, struct request *req)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    /* The statuses a refused head gets (the fuzz driver's fake
     * libmicrohttpd has no table of reasons). */
    const char *reason = req->status == 414 ? "URI Too Long"
                         : req->status == 431
                             ? "Request Header Fields Too Large"
                             : "Bad Request";
    char head[384], date[40];
    struct tm tm;
    time_t now = time(NULL);
    char *text;
    int n;

    if (!ci || !req->reply)
        return reply_send(conn, req);
    text = json_dumps(req->reply, JSON_COMPACT);
    if (!text)
        abort(); /* only out of memory */
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    n = snprintf(head, sizeof(head),
                 "HTTP/1.1 %u %s\r\nDate: %s\r\nConnection: close\r\n"
                 "Content-Type: application/json\r\n"
                 "Cache-Control: no-store\r\n"
                 "X-Content-Type-Options: nosniff\r\n"
                 "Content-Length: %zu\r\n\r\n",
                 req->status, reason, date, strlen(text) + 1);
    if (n > 0 && (size_t)n < sizeof(head)) {
        size_t len = (size_t)n + strlen(text) + 1;
        char *all = xmalloc(len + 1);

        snprintf(all, len + 1, "%s%s\n", head, text);
        (void)!send(ci->connect_fd, all, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        free(all);
    }
    free(text);
    metrics_request_observe(req->route_id, req->status,
                            req_now_ns() - req->start_ns);
    req->observed = true;
    return MHD_NO;
}
