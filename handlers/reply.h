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

/*
 * Send req's error reply (JSON, "Connection: close") straight to conn's
 * socket, count it, and return MHD_NO: the daemon closes the connection
 * without a reply of its own. For a request whose head was refused
 * (414, 431): the daemon builds a reply's headers in the connection's
 * buffer, which such a head may have filled, and with no room left it
 * would close the connection without a word. The socket has sent every
 * earlier reply to the kernel, so one short write takes the whole reply
 * (a client that reads nothing may miss it: it is closed either way).
 * On a connection without a socket (the fuzz driver's) it is reply_send().
 */
enum MHD_Result reply_refuse(struct MHD_Connection *conn, struct request *req);

#endif
