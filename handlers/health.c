/*
 * health.c - GET /healthz (the process answers) and GET /readyz (every
 * backend a purchase needs answers: MySQL and Redis from this pool
 * thread's connections, and the purchase lock's backend).
 */
#include <errno.h>
#include <stdio.h>

#include "handlers/endpoints.h"

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
    struct sale_health h;
    const char *lock_ok;
    char msg[160];
    json_t *checks;

    /* Shutting down: out of rotation, whatever the backends say. */
    if (req_draining(req)) {
        req_error(req, ERR_UNAVAILABLE,
                  "not ready: this instance is shutting down");
        json_object_set_new(json_object_get(req->reply, "error"), "details",
                            json_pack("{s:s}", "instance", "draining"));
        return req->status;
    }
    sale_health_check(req->sale, &h);
    lock_ok = lock_state(h.lock_err);
    checks = json_pack("{s:s,s:s,s:s,s:s}", "mysql", h.mysql_ok ? "ok" : "down",
                       "redis", h.redis_ok ? "ok" : "down", "lock", lock_ok,
                       "lockBackend", h.lock_backend);
    /* The read replicas are optional: reported, never a reason to be
     * unready. Shard 0's (the one replica without sharded sales) as
     * mysqlReplica; with sharded sales every shard's by its number too. */
    if (h.nreplicas && h.replicas[0].shard == 0)
        json_object_set_new(checks, "mysqlReplica",
                            json_string(h.replicas[0].why));
    if (h.nreplicas && h.sharded) {
        json_t *by = json_object();

        for (size_t i = 0; i < h.nreplicas; i++) {
            char key[16];

            snprintf(key, sizeof(key), "%u", h.replicas[i].shard);
            json_object_set_new(by, key, json_string(h.replicas[i].why));
        }
        json_object_set_new(checks, "mysqlShardReplicas", by);
    }
    /* Only on a Redis Cluster: every primary's cluster_state. */
    if (h.redis_cluster)
        json_object_set_new(checks, "redisCluster",
                            json_string(h.redis_cluster));
    if (h.mysql_ok && h.redis_ok && !h.lock_err) {
        json_t *body =
            json_pack("{s:s,s:s,s:s,s:s,s:o}", "status", "ok", "mysql", "ok",
                      "redis", "ok", "lock", "ok", "checks", checks);
        return req_reply(req, 200, body);
    }
    snprintf(msg, sizeof(msg), "not ready:%s%s%s%s%s%s",
             h.mysql_ok ? "" : " mysql is down;",
             h.redis_ok        ? ""
             : h.redis_cluster ? " the redis cluster is not ok;"
                               : " redis is down;",
             h.lock_err ? " the purchase lock backend (" : "",
             h.lock_err ? h.lock_backend : "", h.lock_err ? ") is " : "",
             h.lock_err ? lock_ok : "");
    req_error(req, ERR_UNAVAILABLE, msg);
    json_object_set_new(json_object_get(req->reply, "error"), "details",
                        checks);
    return req->status;
}
