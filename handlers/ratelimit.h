/*
 * ratelimit.h - per-user and per-client-address token buckets
 * (ratelimit.c): which buckets a request counts against, and charging
 * them through the sale layer (sale_limit_take()).
 */
#ifndef SECKILL_HANDLERS_RATELIMIT_H
#define SECKILL_HANDLERS_RATELIMIT_H

#include <stdbool.h>

#include "handlers/request.h"

/*
 * Whether req counts against a bucket: its client address when
 * cfg->rate_ip is on, its user when cfg->rate_user is on and it carries a
 * valid user token (admins are exempt). Checks the token; no I/O.
 */
bool ratelimit_applies(struct request *req);

/* The buckets req counts against, into *l (l->n 0 when none). No I/O. */
void ratelimit_buckets(struct request *req, struct sale_limit *l);

/*
 * Spend one token from each bucket req counts against, or from none. Off
 * the HTTP thread (it waits for Redis). Returns 0 to go on, or sets 429
 * RATE_LIMITED with Retry-After (seconds until a token is due) and
 * returns 429. Fails open (sale_limit_take()).
 */
unsigned ratelimit_or_reply(struct request *req);

#endif
