/*
 * protocol.h - what libmicrohttpd accepts of a request's framing but a
 * server must refuse, and the reading of a Content-Type (protocol.c).
 */
#ifndef SECKILL_HANDLERS_PROTOCOL_H
#define SECKILL_HANDLERS_PROTOCOL_H

#include "handlers/request.h"

/*
 * Check the request's framing: HTTP/1.1 without exactly one Host, a
 * header name that is not a token, control characters in a header value,
 * a Content-Length beside Transfer-Encoding or twice, a transfer coding
 * other than chunked. Called when the headers are in, before the body.
 * Returns 0, or sets the 400 (501 for the coding) and returns its status.
 */
unsigned req_protocol_or_reply(struct request *req);

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
