/*
 * reply.h - sending a request's reply (reply.c): JSON and a newline, the
 * metrics' text, or a page's file as embedded, with its headers.
 */
#ifndef SECKILL_HANDLERS_REPLY_H
#define SECKILL_HANDLERS_REPLY_H

#include <microhttpd.h>

#include "handlers/request.h"

/*
 * Turn req's reply into a libmicrohttpd response with its extra headers
 * (CORS, files, Allow, Retry-After; "Connection: close" while draining),
 * count it in the metrics and queue it on conn. A request without a reply
 * gets 500 INTERNAL. Returns what MHD_queue_response() does.
 */
enum MHD_Result reply_send(struct MHD_Connection *conn, struct request *req);

#endif
