/*
 * ratelimit.c - which token buckets a request counts against (see
 * ratelimit.h): its client's address (IPv4 per address, IPv6 per /64)
 * and its user. The buckets themselves are in Redis (store_rate_take(),
 * charged through sale_limit_take()); the script takes from every bucket
 * of the request or from none, so a client refused by its address does
 * not also drain its user's bucket.
 */
#include "handlers/ratelimit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* The bucket key of the client's address (req_client_addr()): IPv4 per
 * address, IPv6 per /64 (one host usually holds a whole /64). False if
 * unknown. */
static bool ip_key(const struct request *req, char *out, size_t n)
{
    struct cidr a;
    char text[INET6_ADDRSTRLEN];

    if (!req_client_addr(req, &a))
        return false;
    if (!a.v6) {
        inet_ntop(AF_INET, a.addr, text, sizeof(text));
        snprintf(out, n, "rate:ip:%s", text);
        return true;
    }
    memset(&a.addr[8], 0, 8);
    inet_ntop(AF_INET6, a.addr, text, sizeof(text));
    snprintf(out, n, "rate:ip:%s/64", text);
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
