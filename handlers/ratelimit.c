/*
 * ratelimit.c - per-user and per-client-address token buckets in Redis,
 * one Lua script per request.
 *
 * A bucket is kept in the GCRA form of a token bucket: one key holding
 * the "theoretical arrival time" (TAT, microseconds of Redis' clock) at
 * which the bucket would be full again. With an interval T = 1/rate, a
 * request at time now is allowed when TAT' = max(TAT, now) + T is at most
 * now + burst * T; it then stores TAT' with a TTL of TAT' - now, so a key
 * always carries a TTL and disappears exactly when its bucket is full. A
 * refused request changes nothing, and the Retry-After is the time until
 * the first token is due. The script takes from every bucket of the
 * request or from none, so a client refused by its address does not also
 * drain its user's bucket.
 *
 * Redis' own clock (TIME) is used, so instances with skewed clocks share
 * one view of each bucket. Script effects are replicated (Redis >= 5).
 */
#include "handlers/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "common/redis.h"
#include "common/util.h"

/*
 * KEYS: the buckets; ARGV[2i-1], ARGV[2i]: interval (us) and burst of
 * KEYS[i]. Returns {1, 0} (allowed, tokens taken) or {0, retry_ms}.
 */
static const char script[] =
    "local t = redis.call('TIME') "
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) "
    "local wait, tats = 0, {} "
    "for i, k in ipairs(KEYS) do "
    "  local iv = tonumber(ARGV[2 * i - 1]) "
    "  local burst = tonumber(ARGV[2 * i]) "
    "  local tat = tonumber(redis.call('GET', k) or '0') "
    "  if tat < now then tat = now end "
    "  tats[i] = tat + iv "
    "  local due = tats[i] - burst * iv "
    "  if due - now > wait then wait = due - now end "
    "end "
    "if wait > 0 then return {0, math.ceil(wait / 1000)} end "
    "for i, k in ipairs(KEYS) do "
    "  redis.call('SET', k, string.format('%.0f', tats[i]), 'PX', "
    "             math.ceil((tats[i] - now) / 1000)) "
    "end "
    "return {1, 0}";

static struct redis_script bucket_script = REDIS_SCRIPT(script);

#define KEYS_MAX 2
#define ARGV_MAX (3 * KEYS_MAX)

struct bucket_call {
    int nkeys;
    char keys[KEYS_MAX][80];
    char args[KEYS_MAX][2][24];
    const char *argv[ARGV_MAX];
    size_t lens[ARGV_MAX];
    int argc;
};

static void bucket_add(struct bucket_call *c, const struct handlers_rate *r)
{
    double iv = 1e6 / r->per_s;

    snprintf(c->args[c->nkeys][0], sizeof(c->args[0][0]), "%.0f",
             iv < 1 ? 1 : iv);
    snprintf(c->args[c->nkeys][1], sizeof(c->args[0][1]), "%u", r->burst);
    c->nkeys++;
}

/* The script's keys and arguments, from c's buckets. */
static void call_argv(struct bucket_call *c)
{
    int n = 0;

    for (int i = 0; i < c->nkeys; i++)
        c->argv[n++] = c->keys[i];
    for (int i = 0; i < c->nkeys; i++) {
        c->argv[n++] = c->args[i][0];
        c->argv[n++] = c->args[i][1];
    }
    for (int i = 0; i < n; i++)
        c->lens[i] = strlen(c->argv[i]);
    c->argc = n;
}

/* The bucket key of the client's address: IPv4 per address, IPv6 per
 * /64 (one host usually holds a whole /64). False if unknown. */
static bool ip_key(const struct request *req, char *out, size_t n)
{
    const union MHD_ConnectionInfo *ci;
    struct sockaddr_storage ss;
    char text[INET6_ADDRSTRLEN];

    if (!req->conn)
        return false;
    ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return false;
    if (ci->client_addr->sa_family == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, ci->client_addr, sizeof(sin));
        inet_ntop(AF_INET, &sin.sin_addr, text, sizeof(text));
        snprintf(out, n, "rate:ip:%s", text);
        return true;
    }
    if (ci->client_addr->sa_family != AF_INET6)
        return false;
    memcpy(&ss, ci->client_addr, sizeof(struct sockaddr_in6));
    struct in6_addr a = ((struct sockaddr_in6 *)&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
        inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
        snprintf(out, n, "rate:ip:%s", text);
        return true;
    }
    memset(&a.s6_addr[8], 0, 8);
    inet_ntop(AF_INET6, &a, text, sizeof(text));
    snprintf(out, n, "rate:ip:%s/64", text);
    return true;
}

/* Failing open: log why, at most once a second per thread. */
static unsigned fail_open(const char *why, const char *detail)
{
    static _Thread_local int64_t last_log_ms;
    int64_t now = util_mono_ms();

    if (now - last_log_ms >= 1000 || !last_log_ms) {
        last_log_ms = now;
        log_warn("rate limit skipped", "why=%s detail=\"%s\"", why, detail);
    }
    return 0;
}

bool ratelimit_applies(struct request *req)
{
    const struct handlers_config *cfg = req->cfg;

    return cfg->rate_ip.per_s > 0 ||
           (cfg->rate_user.per_s > 0 && req_auth(req) == 0 &&
            req->auth.role == TOKEN_ROLE_USER);
}

unsigned ratelimit_or_reply(struct request *req)
{
    const struct handlers_config *cfg = req->cfg;
    struct bucket_call c = {0};
    redisContext *rc;
    redisReply *r;
    unsigned status = 0;
    int err;

    if (cfg->rate_ip.per_s > 0 &&
        ip_key(req, c.keys[c.nkeys], sizeof(c.keys[0])))
        bucket_add(&c, &cfg->rate_ip);
    if (cfg->rate_user.per_s > 0 && req_auth(req) == 0 &&
        req->auth.role == TOKEN_ROLE_USER) {
        snprintf(c.keys[c.nkeys], sizeof(c.keys[0]), "rate:user:%lld",
                 (long long)req->auth.user_id);
        bucket_add(&c, &cfg->rate_user);
    }
    if (c.nkeys == 0)
        return 0;

    rc = store_redis(req->st);
    if (!rc)
        return fail_open("redis unreachable", "");
    call_argv(&c);
    r = redis_script_run(rc, &bucket_script, c.nkeys, c.argc, c.argv, c.lens,
                         &err);
    if (!r)
        return fail_open("redis failed", rc->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
        fail_open("script failed", r->str);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_INTEGER ||
               r->element[1]->type != REDIS_REPLY_INTEGER) {
        fail_open("unexpected reply", "");
    } else if (r->element[0]->integer == 0) {
        long long ms = r->element[1]->integer;
        status = req_error(req, ERR_RATE_LIMITED, NULL);
        req->retry_after = ms <= 1000 ? 1 : (unsigned)((ms + 999) / 1000);
    }
    freeReplyObject(r);
    return status;
}
