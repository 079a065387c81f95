/*
 * health.c - GET /healthz (the process answers) and GET /readyz (MySQL and
 * Redis answer from this worker thread's connections).
 */
#include "handlers/internal.h"

unsigned health_get(struct request *req)
{
    return req_reply(req, 200, json_pack("{s:s}", "status", "ok"));
}

unsigned ready_get(struct request *req)
{
    bool mysql_ok, redis_ok;

    store_ping(req->st, &mysql_ok, &redis_ok);
    if (!mysql_ok && !redis_ok)
        return req_error(req, ERR_UNAVAILABLE, "mysql and redis are down");
    if (!mysql_ok)
        return req_error(req, ERR_UNAVAILABLE, "mysql is down");
    if (!redis_ok)
        return req_error(req, ERR_UNAVAILABLE, "redis is down");
    return req_reply(req, 200,
                     json_pack("{s:s,s:s,s:s}", "status", "ok", "mysql", "ok",
                               "redis", "ok"));
}
