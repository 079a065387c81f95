/*
 * ratelimit.c - which token buckets a request counts against (see
 * ratelimit.h): its client's address (IPv4 per address, IPv6 per /64)
 * and its user. The buckets themselves are in Redis (store_rate_take(),
 * charged through sale_limit_take()); the store takes from every bucket
 * of the request or from none (one script per bucket, the earlier ones
 * given back when a later one refuses), so a client refused by its user's
 * bucket does not also drain its address's.
 */
#include "handlers/ratelimit.h"

#include <stdio.h>
#include <string.h>

/* The bucket key of the client's address. False if unknown. */
static bool ip_key(const struct request *req, char *out, size_t n)
{
    char key[64];

    if (!req_client_key(req, key, sizeof(key)))
        return false;
    snprintf(out, n, "rate:ip:%s", key);
    return true;
}

static void bucket_add(struct sale_limit *l, const struct handlers_rate *r)
{
    l->bucket[l->n].per_s = r->per_s;
    l->bucket[l->n].burst = r->burst;
    l->n++;
}

bool ratelimit_applies(struct request *req)
{
    const struct http_config *cfg = req->cfg;

    return cfg->rate_ip.per_s > 0 ||
           (cfg->rate_user.per_s > 0 && req_auth(req) == 0 &&
            req->auth.role == TOKEN_ROLE_USER);
}

void ratelimit_buckets(struct request *req, struct sale_limit *l)
{
    const struct http_config *cfg = req->cfg;

    memset(l, 0, sizeof(*l));
    if (cfg->rate_ip.per_s > 0 &&
        ip_key(req, l->bucket[l->n].key, sizeof(l->bucket[0].key)))
        bucket_add(l, &cfg->rate_ip);
    if (cfg->rate_user.per_s > 0 && req_auth(req) == 0 &&
        req->auth.role == TOKEN_ROLE_USER) {
        snprintf(l->bucket[l->n].key, sizeof(l->bucket[0].key),
                 "rate:user:%lld", (long long)req->auth.user_id);
        bucket_add(l, &cfg->rate_user);
    }
}

unsigned ratelimit_or_reply(struct request *req)
{
    struct sale_limit l;
    unsigned retry_s;
    unsigned status;

    ratelimit_buckets(req, &l);
    if (l.n == 0 || !sale_limit_take(req->sale, &l, &retry_s))
        return 0;
    status = req_error(req, ERR_RATE_LIMITED, NULL);
    req->retry_after = retry_s;
    return status;
}
