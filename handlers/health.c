/*
 * health.c - GET /healthz (the process answers) and GET /readyz (every
 * backend a purchase needs answers: MySQL and Redis from this worker
 * thread's connections, and the purchase lock's backend).
 */
#include "handlers/internal.h"

#include <errno.h>
#include <stdio.h>

unsigned health_get(struct request *req)
{
    return req_reply(req, 200, json_pack("{s:s}", "status", "ok"));
}

/* "ok", or what is wrong with a lock backend that failed its ping. */
static const char *lock_state(int err)
{
    switch (err) {
    case 0:
        return "ok";
    case -EACCES:
        return "credentials refused";
    case -ETIMEDOUT:
        return "timed out";
    default:
        return "unreachable";
    }
}

unsigned ready_get(struct request *req)
{
    bool mysql_ok, redis_ok;
    int lock_err = 0;
    const char *lock_ok;
    char msg[160];
    json_t *checks;

    /* Shutting down: out of rotation, whatever the backends say. */
    if (server_draining(req->srv)) {
        req_error(req, ERR_UNAVAILABLE,
                  "not ready: this instance is shutting down");
        json_object_set_new(json_object_get(req->reply, "error"), "details",
                            json_pack("{s:s}", "instance", "draining"));
        return req->status;
    }
    store_ping(req->st, &mysql_ok, &redis_ok);
    if (req->locks)
        lock_err = lock_client_ping(req->locks);
    lock_ok = lock_state(lock_err);
    checks = json_pack("{s:s,s:s,s:s,s:s}", "mysql", mysql_ok ? "ok" : "down",
                       "redis", redis_ok ? "ok" : "down", "lock", lock_ok,
                       "lockBackend",
                       req->locks ? lock_client_backend(req->locks) : "none");
    /* The read replica is optional: without it reads go to the primary,
     * so it is reported but never makes the instance unready. */
    struct store_replica_state rs;
    store_replica_state_get(&rs);
    if (rs.configured)
        json_object_set_new(checks, "mysqlReplica", json_string(rs.why));
    if (mysql_ok && redis_ok && !lock_err) {
        json_t *body =
            json_pack("{s:s,s:s,s:s,s:s,s:o}", "status", "ok", "mysql", "ok",
                      "redis", "ok", "lock", "ok", "checks", checks);
        return req_reply(req, 200, body);
    }
    snprintf(msg, sizeof(msg), "not ready:%s%s%s%s%s%s",
             mysql_ok ? "" : " mysql is down;",
             redis_ok ? "" : " redis is down;",
             lock_err ? " the purchase lock backend (" : "",
             lock_err ? lock_client_backend(req->locks) : "",
             lock_err ? ") is " : "", lock_err ? lock_ok : "");
    req_error(req, ERR_UNAVAILABLE, msg);
    json_object_set_new(json_object_get(req->reply, "error"), "details",
                        checks);
    return req->status;
}
