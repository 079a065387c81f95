/*
 * protocol.h - what libmicrohttpd accepts of a request's framing but a
 * server must refuse (protocol.c).
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

#endif
