/*
 * protocol.h - what libmicrohttpd accepts of a request's framing but a
 * server must refuse, and the reading of a Content-Type (protocol.c).
 */
#ifndef SECKILL_HANDLERS_PROTOCOL_H
#define SECKILL_HANDLERS_PROTOCOL_H

#include "handlers/request.h"

/*
 * What a request's head may hold. libmicrohttpd keeps a request's line
 * and headers, a record of each header, query argument and cookie
 * (HTTP_FIELD_COST bytes), a copy of the Cookie header and then the
 * reply's status line and headers in one buffer per connection
 * (HTTP_CONN_MEMORY), allocated at accept and kept while the connection
 * lives: a small one (libmicrohttpd's default is 32 KiB) is what lets
 * an instance hold tens of thousands of idle keep-alive connections. The
 * head it takes is a browser's behind a proxy with cookies: 8 KiB in 96
 * fields (the 64 query arguments a route may take, and headers), which
 * with the records and a reply's headers (HTTP_REPLY_HEAD_MAX) needs
 * about 15 KiB: the limits below leave that reply room, so a head within
 * them is always served, one beyond is answered 414 (the target) or 431
 * (the head) at once.
 */
#define HTTP_CONN_MEMORY 16384
#define REQUEST_TARGET_MAX 4096 /* the path and query, as sent */
#define REQUEST_HEAD_MAX 8192   /* request line and header lines */
#define REQUEST_FIELDS_MAX 96   /* header lines, query arguments, cookies */
#define HTTP_FIELD_COST 64
#define HTTP_REPLY_HEAD_MAX 768
_Static_assert(REQUEST_HEAD_MAX + REQUEST_FIELDS_MAX * HTTP_FIELD_COST +
                       HTTP_REPLY_HEAD_MAX <=
                   HTTP_CONN_MEMORY,
               "a head within the limits leaves its reply room");

/*
 * Check the request's framing: HTTP/1.1 without exactly one Host, a
 * header name that is not a token, control characters in a header value,
 * a Content-Length beside Transfer-Encoding or twice, a transfer coding
 * other than chunked. Called when the headers are in, before the body.
 * Returns 0, or sets the 400 (501 for the coding) and returns its status.
 */
unsigned req_protocol_or_reply(struct request *req);

/*
 * Check the size of the request's head against the limits above: the
 * request line (line_len bytes as sent) and the header lines, a Cookie
 * header's bytes twice (the daemon keeps a parsed copy), at most
 * REQUEST_HEAD_MAX; the header lines, query arguments and cookies at most
 * REQUEST_FIELDS_MAX. Called with the headers in, before the framing
 * checks. Returns 0, or sets the 431 and returns its status.
 */
unsigned req_head_size_or_reply(struct request *req, size_t line_len);

/*
 * Whether a Content-Type value says JSON the handlers can read (RFC 9110
 * 8.3.1): application/json in any case, then parameters, each
 * `; name=value` with optional blanks around the `;`, the value a token
 * or a quoted string; a charset among them must be utf-8 (in any case,
 * quoted or not). False for NULL, another media type, another charset
 * or a value that does not parse. Pure: any thread.
 */
bool req_media_type_is_json(const char *value);

#endif
