/*
 * redis_link.c - one Redis server or a Redis Cluster behind the same
 * calls (see redis_link.h).
 */
#include "common/redis_link.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/redis_slot.h"
#include "common/util.h"

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

/*
 * Split a command as redisFormatCommand() makes it ("*N\r\n" then N times
 * "$len\r\n<bytes>\r\n") into *argv and *lens, new arrays pointing into
 * cmd (free(3) both). Returns the argument count, or -EINVAL.
 */
static int formatted_split(const char *cmd, size_t len, const char ***argv,
                           size_t **lens)
{
    const char *p = cmd, *end = cmd + len;
    char *q;
    long n = 0;

    if (len < 4 || *p != '*')
        return -EINVAL;
    n = strtol(p + 1, &q, 10);
    if (n <= 0 || n > 1 << 20 || q + 2 > end || q[0] != '\r')
        return -EINVAL;
    p = q + 2;
    *argv = xcalloc((size_t)n, sizeof(**argv));
    *lens = xcalloc((size_t)n, sizeof(**lens));
    for (long i = 0; i < n; i++) {
        long l;

        if (p >= end || *p != '$')
            goto bad;
        l = strtol(p + 1, &q, 10);
        if (l < 0 || q + 2 > end || q[0] != '\r' || q + 2 + l + 2 > end)
            goto bad;
        (*argv)[i] = q + 2;
        (*lens)[i] = (size_t)l;
        p = q + 2 + l + 2;
    }
    return (int)n;
bad:
    free(*argv);
    free(*lens);
    return -EINVAL;
}

/* A cluster's command from a formatted one, routed by key (NULL: any). */
static redisReply *cluster_formatted(struct redis_link *l, const char *key,
                                     const char *cmd, size_t len, int *err)
{
    const char **argv;
    size_t *lens;
    int argc = formatted_split(cmd, len, &argv, &lens);
    redisReply *r;

    if (argc < 0) {
        *err = argc;
        return NULL;
    }
    r = redis_cluster_command(
        l->cluster, key ? (int)redis_key_slot_str(key) : REDIS_CLUSTER_ANY_SLOT,
        argc, argv, lens, l->budget_ms, err);
    free(argv);
    free(lens);
    return r;
}

redisReply *redis_link_commandf(struct redis_link *l, const char *key, int *err,
                                const char *fmt, ...)
{
    redisReply *r;
    va_list ap;

    *err = 0;
    va_start(ap, fmt);
    if (!l->cluster) {
        r = redisvCommand(l->rc, fmt, ap);
        if (!r)
            *err = redis_errno(l->rc);
    } else {
        char *cmd;
        int len = redisvFormatCommand(&cmd, fmt, ap);

        if (len < 0) {
            *err = -ENOMEM;
            r = NULL;
        } else {
            r = cluster_formatted(l, key, cmd, (size_t)len, err);
            redisFreeCommand(cmd);
        }
    }
    va_end(ap);
    return r;
}

redisReply *redis_link_script_then(struct redis_link *l, struct redis_script *s,
                                   int nkeys, int argc, const char **argv,
                                   const size_t *lens, const char *const *then,
                                   const char *const *then_keys, size_t nthen,
                                   redisReply **then_replies,
                                   unsigned budget_ms, int *err)
{
    struct redis_cluster_cmd cmds[8];
    redisReply *r, *got[8];
    const char *behind[8] = {0};
    const char **targv[8] = {0};
    size_t *tlens[8] = {0}, at[8], nbehind = 0, n = 0;
    size_t routed[8];

    if (!l->cluster)
        return redis_script_run_then(l->rc, s, nkeys, argc, argv, lens, then,
                                     nthen, then_replies, err);
    for (size_t i = 0; i < nthen; i++)
        then_replies[i] = NULL;
    if (nthen > 8) {
        *err = -EINVAL;
        return NULL;
    }
    /* A cluster: the commands without a key ride behind the script on
     * its connection, wherever it is redirected; the others go once it
     * has answered (and not with an error), each to its own primary. */
    for (size_t i = 0; i < nthen; i++)
        if (!then_keys || !then_keys[i]) {
            at[i] = nbehind;
            behind[nbehind++] = then[i];
        }
    r = redis_cluster_script_then(l->cluster, s, nkeys, argc, argv, lens,
                                  behind, nbehind, got,
                                  budget_ms ? budget_ms : l->budget_ms, err);
    for (size_t i = 0; i < nthen; i++)
        if (!then_keys || !then_keys[i])
            then_replies[i] = got[at[i]];
    if (!r || r->type == REDIS_REPLY_ERROR)
        return r;
    for (size_t i = 0; then_keys && i < nthen; i++) {
        int targc;

        if (!then_keys[i])
            continue;
        targc = formatted_split(then[i], strlen(then[i]), &targv[i], &tlens[i]);
        if (targc < 0)
            continue;
        routed[n] = i;
        cmds[n++] = (struct redis_cluster_cmd){
            .slot = (int)redis_key_slot_str(then_keys[i]),
            .argc = targc,
            .argv = targv[i],
            .lens = tlens[i]};
    }
    if (n)
        redis_cluster_pipeline(l->cluster, cmds, n, got, l->budget_ms);
    for (size_t j = 0; j < n; j++) {
        then_replies[routed[j]] = got[j];
        free(targv[routed[j]]);
        free(tlens[routed[j]]);
    }
    return r;
}

int redis_link_nodes(struct redis_link *l)
{
    return l->cluster ? redis_cluster_primaries(l->cluster) : 1;
}

redisReply *redis_link_node_command(struct redis_link *l, int i, int argc,
                                    const char **argv, const size_t *lens,
                                    int *err)
{
    redisReply *r;

    *err = 0;
    if (l->cluster)
        return redis_cluster_primary_command(l->cluster, i, argc, argv, lens,
                                             err);
    r = redisCommandArgv(l->rc, argc, argv, lens);
    if (!r)
        *err = redis_errno(l->rc);
    return r;
}

redisReply *redis_link_node_commandf(struct redis_link *l, int i, int *err,
                                     const char *fmt, ...)
{
    redisReply *r = NULL;
    va_list ap;

    *err = 0;
    va_start(ap, fmt);
    if (!l->cluster) {
        r = redisvCommand(l->rc, fmt, ap);
        if (!r)
            *err = redis_errno(l->rc);
    } else {
        char *cmd;
        int len = redisvFormatCommand(&cmd, fmt, ap);
        const char **argv;
        size_t *lens;
        int argc;

        if (len < 0) {
            *err = -ENOMEM;
        } else {
            argc = formatted_split(cmd, (size_t)len, &argv, &lens);
            if (argc < 0) {
                *err = argc;
            } else {
                r = redis_cluster_primary_command(l->cluster, i, argc, argv,
                                                  lens, err);
                free(argv);
                free(lens);
            }
            redisFreeCommand(cmd);
        }
    }
    va_end(ap);
    return r;
}

const char *redis_link_node_name(const struct redis_link *l, int i, char *buf,
                                 size_t cap)
{
    char host[REDIS_CLUSTER_HOST_LEN];
    unsigned port;

    if (!l->cluster)
        return "redis";
    redis_cluster_primary_addr(l->cluster, i, host, sizeof(host), &port);
    snprintf(buf, cap, "%s:%u", host, port);
    return buf;
}

void redis_link_batch_init(struct redis_link_batch *b, struct redis_link *l)
{
    *b = (struct redis_link_batch){.l = l};
}

void redis_link_appendf(struct redis_link_batch *b, const char *key,
                        const char *fmt, ...)
{
    va_list ap;
    char *cmd;
    int len;

    va_start(ap, fmt);
    if (!b->l->cluster) {
        redisvAppendCommand(b->l->rc, fmt, ap);
        va_end(ap);
        return;
    }
    len = redisvFormatCommand(&cmd, fmt, ap);
    if (len < 0)
        cmd = NULL; /* its reply will be missing */
    va_end(ap);
    if (b->ncmds == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        b->cmds = xrealloc(b->cmds, b->cap * sizeof(*b->cmds));
        b->slots = xrealloc(b->slots, b->cap * sizeof(*b->slots));
        b->cmdlens = xrealloc(b->cmdlens, b->cap * sizeof(*b->cmdlens));
    }
    b->cmdlens[b->ncmds] = len < 0 ? 0 : (size_t)len;
    b->cmds[b->ncmds] = cmd;
    b->slots[b->ncmds++] =
        key ? (int)redis_key_slot_str(key) : REDIS_CLUSTER_ANY_SLOT;
}

/* A cluster's batch: send what was appended, its replies after those
 * not read yet. */
static void batch_send(struct redis_link_batch *b)
{
    struct redis_cluster_cmd *cmds;
    const char ***argv;
    size_t **lens, n = b->ncmds, m = 0, *at;
    redisReply **got;
    size_t left = b->nreplies - b->next;

    if (!n)
        return;
    cmds = xcalloc(n, sizeof(*cmds));
    argv = xcalloc(n, sizeof(*argv));
    lens = xcalloc(n, sizeof(*lens));
    at = xcalloc(n, sizeof(*at));
    got = xcalloc(n, sizeof(*got));
    /* Replies not read yet move to the front, the new ones after. */
    if (left)
        memmove(b->replies, b->replies + b->next, left * sizeof(*b->replies));
    b->replies = xrealloc(b->replies, (left + n) * sizeof(*b->replies));
    b->nreplies = left + n;
    b->next = 0;
    for (size_t i = 0; i < n; i++) {
        int argc = b->cmds[i] ? formatted_split(b->cmds[i], b->cmdlens[i],
                                                &argv[i], &lens[i])
                              : -EINVAL;

        b->replies[left + i] = NULL;
        if (argc < 0)
            continue;
        cmds[m] = (struct redis_cluster_cmd){.slot = b->slots[i],
                                             .argc = argc,
                                             .argv = argv[i],
                                             .lens = lens[i]};
        at[m++] = i;
    }
    b->err =
        m ? redis_cluster_pipeline(b->l->cluster, cmds, m, got, b->l->budget_ms)
          : 0;
    for (size_t j = 0; j < m; j++)
        b->replies[left + at[j]] = got[j];
    for (size_t i = 0; i < n; i++) {
        free(argv[i]);
        free(lens[i]);
        redisFreeCommand(b->cmds[i]);
    }
    b->ncmds = 0;
    free(got);
    free(at);
    free(lens);
    free(argv);
    free(cmds);
}

int redis_link_get_reply(struct redis_link_batch *b, redisReply **r)
{
    *r = NULL;
    if (!b->l->cluster)
        return redisGetReply(b->l->rc, (void **)r);
    if (b->next == b->nreplies)
        batch_send(b);
    if (b->next == b->nreplies)
        return REDIS_ERR;
    *r = b->replies[b->next++];
    return *r ? REDIS_OK : REDIS_ERR;
}

void redis_link_batch_end(struct redis_link_batch *b)
{
    if (!b->l->cluster)
        return;
    for (size_t i = b->next; i < b->nreplies; i++)
        freeReplyObject(b->replies[i]);
    for (size_t i = 0; i < b->ncmds; i++)
        redisFreeCommand(b->cmds[i]);
    free(b->replies);
    free(b->cmds);
    free(b->slots);
    free(b->cmdlens);
    *b = (struct redis_link_batch){.l = b->l};
}

const char *redis_link_errstr(const struct redis_link *l, int err)
{
    if (!l->cluster && l->rc && l->rc->err)
        return l->rc->errstr;
    return strerror(err < 0 ? -err : err);
}
