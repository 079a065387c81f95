/*
 * protocol.h - what libmicrohttpd accepts of a request's framing but a
 * server must refuse, the limits of a request's head, and the reading of
 * a Content-Type (protocol.c).
 */
#ifndef SECKILL_HANDLERS_PROTOCOL_H
#define SECKILL_HANDLERS_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>

struct request;

/*
 * What a request's head may hold. libmicrohttpd keeps a request's line
 * and headers, a record of each header, query argument and cookie
 * (HTTP_FIELD_COST bytes), a copy of the Cookie header and then the
 * reply's status line and headers in one buffer per connection
 * (conn_memory), allocated at accept and kept while the connection
 * lives: it is what an idle keep-alive connection costs (libmicrohttpd
 * zeroes all of it after each request, so all of it stays resident), and
 * a small one (libmicrohttpd's default is 32 KiB) is what lets an
 * instance hold tens of thousands of them. The operator chooses the head
 * the service guarantees to serve (http_config.head_max); the rest is
 * derived from it by req_limits_of(), so that a head within the limits
 * always leaves its reply room in the buffer and is served, and one
 * beyond them is answered 414 (the target, or too many query arguments)
 * or 431 (the head) at once.
 */
#define HTTP_FIELD_COST 64
#define HTTP_REPLY_HEAD_MAX 768

struct req_limits {
    size_t head_max;         /* request line and header lines, as sent */
    unsigned fields_max;     /* header lines, query arguments, cookies */
    size_t target_max;       /* the path and query, as sent */
    unsigned query_args_max; /* of those fields, query arguments */
    size_t conn_memory;      /* the connection's buffer */
};

/*
 * The limits for a guaranteed head of head_max bytes (from
 * HTTP_HEAD_LIMIT_MIN to HTTP_HEAD_LIMIT_MAX, handlers.h): a field for
 * every 128 bytes of it and 16 more, half of them query arguments; a
 * target of half of it; and a buffer that holds the head, its fields'
 * records and a reply's headers, rounded up to a KiB, so that
 * head_max + fields_max * HTTP_FIELD_COST + HTTP_REPLY_HEAD_MAX <=
 * conn_memory by construction. 4,096 bytes: 48 fields (24 query
 * arguments), a target of 2,048, an 8 KiB buffer. Pure: any thread.
 */
struct req_limits req_limits_of(size_t head_max);

/*
 * Check the request's framing: HTTP/1.1 without exactly one Host, a
 * header name that is not a token, control characters in a header value
 * (a NUL anywhere in the head, the last header's value included), two
 * Authorization headers, a Content-Length beside Transfer-Encoding or
 * twice, a transfer coding other than chunked. Called when the headers
 * are in, before the body.
 * Returns 0, or sets the 400 (501 for the coding) and returns its status.
 */
unsigned req_protocol_or_reply(struct request *req);

/*
 * Check the size of the request's head against its server's limits
 * (req->srv->limits): the request line (line_len bytes as sent) and the
 * header lines, a Cookie header's bytes twice (the daemon keeps a parsed
 * copy), at most head_max; the header lines, query arguments and cookies
 * at most fields_max. Called with the headers in, before the framing
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
