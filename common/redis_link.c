/*
 * redis_link.c - one Redis server or a Redis Cluster behind the same
 * calls (see redis_link.h).
 */
#include "common/redis_link.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/redis_slot.h"

redisReply *redis_link_command(struct redis_link *l, const char *key, int argc,
                               const char **argv, const size_t *lens, int *err)
{
    redisReply *r;

    *err = 0;
    if (l->cluster)
        return redis_cluster_command(l->cluster,
                                     key ? (int)redis_key_slot_str(key)
                                         : REDIS_CLUSTER_ANY_SLOT,
                                     argc, argv, lens, l->budget_ms, err);
    r = redisCommandArgv(l->rc, argc, argv, lens);
    if (!r)
        *err = redis_errno(l->rc);
    return r;
}

redisReply *redis_link_script(struct redis_link *l, struct redis_script *s,
                              int nkeys, int argc, const char **argv,
                              const size_t *lens, int *err)
{
    if (l->cluster)
        return redis_cluster_script_run(l->cluster, s, nkeys, argc, argv, lens,
                                        l->budget_ms, err);
    return redis_script_run(l->rc, s, nkeys, argc, argv, lens, err);
}

/* One server: every command appended, then every reply read; a script
 * the server has forgotten (NOSCRIPT) is run again on its own. */
static int pipeline_one(redisContext *rc, const struct redis_cluster_cmd *cmds,
                        size_t n, redisReply **replies)
{
    int first = 0;

    for (size_t i = 0; i < n; i++) {
        const struct redis_cluster_cmd *c = &cmds[i];

        replies[i] = NULL;
        if (c->script) {
            char *buf;
            int len = redis_script_format(c->script, false, c->nkeys, c->argc,
                                          c->argv, c->lens, &buf);

            if (len < 0) {
                /* Commands appended before it would leave their replies
                 * unread: the connection is given up. */
                rc->err = REDIS_ERR_OOM;
                snprintf(rc->errstr, sizeof(rc->errstr), "out of memory");
                return -ENOMEM;
            }
            redisAppendFormattedCommand(rc, buf, (size_t)len);
            redisFreeCommand(buf);
        } else {
            redisAppendCommandArgv(rc, c->argc, c->argv, c->lens);
        }
    }
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;

        if (redisGetReply(rc, &r) != REDIS_OK) {
            if (!first)
                first = redis_errno(rc);
            continue;
        }
        replies[i] = r;
    }
    for (size_t i = 0; i < n && !first; i++) {
        const struct redis_cluster_cmd *c = &cmds[i];
        int err;

        if (!c->script || !redis_reply_is_noscript(replies[i]))
            continue;
        freeReplyObject(replies[i]);
        replies[i] = redis_script_run(rc, c->script, c->nkeys, c->argc, c->argv,
                                      c->lens, &err);
        if (!replies[i])
            first = err;
    }
    return first;
}

int redis_link_pipeline(struct redis_link *l,
                        const struct redis_cluster_cmd *cmds, size_t n,
                        redisReply **replies)
{
    if (l->cluster)
        return redis_cluster_pipeline(l->cluster, cmds, n, replies,
                                      l->budget_ms);
    return pipeline_one(l->rc, cmds, n, replies);
}

const char *redis_link_errstr(const struct redis_link *l, int err)
{
    if (!l->cluster && l->rc && l->rc->err)
        return l->rc->errstr;
    return strerror(err < 0 ? -err : err);
}
