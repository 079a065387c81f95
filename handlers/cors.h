/*
 * cors.h - browsers on other origins (cors.c): the CORS headers of every
 * reply and the answer to OPTIONS, for the origins cfg->cors_origins
 * lists (SECKILL_CORS_ORIGINS).
 */
#ifndef SECKILL_HANDLERS_CORS_H
#define SECKILL_HANDLERS_CORS_H

#include "handlers/request.h"
#include "handlers/route.h"

/*
 * Add the CORS headers of an answer to req when cfg->cors_origins is set:
 * Vary: Origin always, and Access-Control-Allow-Origin (the request's
 * Origin, never "*") with Access-Control-Expose-Headers when the Origin
 * is one of the listed ones. Called once per reply, when it is sent.
 */
void cors_reply_headers(struct request *req);

/*
 * Answer OPTIONS on route: a CORS preflight (Origin and
 * Access-Control-Request-Method present) from a listed origin gets 204
 * with the route's methods, the Authorization and Content-Type request
 * headers and Access-Control-Max-Age; from any other origin 403
 * FORBIDDEN. A plain OPTIONS gets 204 with Allow. Returns the status.
 */
unsigned cors_options(struct request *req, const struct route *route);

#endif
