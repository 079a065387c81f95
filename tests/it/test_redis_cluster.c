/*
 * test_redis_cluster.c - the cluster routing (common/redis_cluster.h)
 * against a real Redis Cluster of three primaries and three replicas on
 * loopback (scripts/redis-cluster.sh; make test-cluster starts it): keys
 * on every primary, credentials on every node, a script on hash-tagged
 * keys, a slot moved by hand
 * (ASK while it moves, TRYAGAIN for a multi-key command split by the
 * move, MOVED once it has moved), a pipelined batch over every primary,
 * and a primary killed (its replica takes over; the map is asked for
 * again).
 *
 * Then the service itself on the cluster (the binary, SECKILL_BIN, with
 * SECKILL_REDIS_URL=redis-cluster://... and the MariaDB of make services,
 * .run/env.test): a crowd buying three vouchers whose {v:ID} slots sit on
 * three primaries, checked in MySQL and in every primary's INFO
 * commandstats; the rate limiter's "every bucket or none" with its two
 * buckets on two primaries; /readyz's checks.redisCluster; and the
 * voucher-change subscription following its channel's slot to another
 * primary; the async mode's crowd on three primaries, drained by the
 * writers; a sale through a failover and a reshard; and an async sale
 * whose slot is held half moved under a crowd, then moved, its new
 * primary killed.
 *
 * The nodes listen on SECKILL_REDIS_CLUSTER_PORT (17001) to that plus 5.
 * Each test checks what it routed by asking the owning node directly.
 * Not part of make test: make test-cluster.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "common/metrics.h"
#include "common/redis.h"
#include "common/redis_cluster.h"
#include "common/redis_keys.h"
#include "common/redis_slot.h"
#include "common/util.h"
#include "tests/it/harness.h"

#define NODES 6
#define BUDGET_MS 2000
/* A failover: the node timeout (2 s) and an election, with room. */
#define FAILOVER_BUDGET_MS 20000

static unsigned base_port;

static void ports_init(void)
{
    const char *p = getenv("SECKILL_REDIS_CLUSTER_PORT");

    base_port = p && *p ? (unsigned)strtoul(p, NULL, 10) : 17001;
}

/* A client seeded with the first three nodes, logging in as user with
 * pass (both NULL: as the default user, without AUTH). */
static struct redis_cluster *client_as(const char *user, const char *pass)
{
    struct redis_server seeds[3];

    memset(seeds, 0, sizeof(seeds));
    for (int i = 0; i < 3; i++) {
        seeds[i].host = "127.0.0.1";
        seeds[i].port = base_port + (unsigned)i;
        seeds[i].user = user;
        seeds[i].pass = pass;
    }
    return redis_cluster_new(seeds, 3, 1000, 1000, "it");
}

static struct redis_cluster *client(void)
{
    return client_as(NULL, NULL);
}

/* A direct connection to a node (asserts). */
static redisContext *direct(unsigned port)
{
    struct timeval tv = {15, 0}; /* WAIT below may take 10 s */
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", (int)port, tv);

    assert_non_null(rc);
    assert_int_equal(0, rc->err);
    redisSetTimeout(rc, tv);
    return rc;
}

/* A command on a direct connection; asserts a reply came. */
static redisReply *cmd(redisContext *rc, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (!r)
        fail_msg("redis: %s", rc->errstr);
    return r;
}

/* The port of the primary that owns slot, as the cluster's node at
 * base_port says (CLUSTER SHARDS read independently of the client:
 * CLUSTER NODES' "myself" is not needed, the slots line is). */
static unsigned owner_of(unsigned slot)
{
    for (unsigned p = base_port; p < base_port + NODES; p++) {
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", (int)p,
                                                   (struct timeval){1, 0});
        redisReply *r;
        unsigned got = 0;

        if (!rc || rc->err) {
            redisFree(rc);
            continue;
        }
        r = redisCommand(rc, "CLUSTER SHARDS");
        if (r && r->type == REDIS_REPLY_ARRAY) {
            struct redis_cluster_map *m = xcalloc(1, sizeof(*m));
            char err[160];

            if (redis_cluster_map_parse(r, m, err, sizeof(err)) == 0 &&
                m->slot_node[slot] != REDIS_CLUSTER_NO_NODE)
                got = m->nodes[m->slot_node[slot]].port;
            free(m);
        }
        freeReplyObject(r);
        redisFree(rc);
        if (got)
            return got;
    }
    fail_msg("no node says who owns slot %u", slot);
    return 0;
}

/* A key "<prefix><n>" whose slot's owner is port (the nth tried). */
static void key_on(unsigned port, const char *prefix, char *key, size_t cap)
{
    for (int n = 0; n < 10000; n++) {
        snprintf(key, cap, "%s%d", prefix, n);
        if (owner_of(redis_key_slot_str(key)) == port)
            return;
    }
    fail_msg("no key of prefix %s on %u", prefix, port);
}

/* The ports of the three primaries now. */
static void primaries(unsigned out[3])
{
    int n = 0;

    for (unsigned p = base_port; p < base_port + NODES; p++) {
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", (int)p,
                                                   (struct timeval){1, 0});
        redisReply *r = rc && !rc->err ? redisCommand(rc, "ROLE") : NULL;

        if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
            strcmp(r->element[0]->str, "master") == 0 && n < 3)
            out[n++] = p;
        freeReplyObject(r);
        redisFree(rc);
    }
    assert_int_equal(3, n);
}

static redisReply *run(struct redis_cluster *c, int slot, unsigned budget,
                       int argc, const char **argv)
{
    int err = 0;
    redisReply *r =
        redis_cluster_command(c, slot, argc, argv, NULL, budget, &err);

    if (!r)
        fail_msg("cluster command %s failed: %d", argv[0], err);
    return r;
}

static void set_get(struct redis_cluster *c, const char *key, const char *val)
{
    const char *set[] = {"SET", key, val}, *get[] = {"GET", key};
    int slot = (int)redis_key_slot_str(key);
    redisReply *r = run(c, slot, BUDGET_MS, 3, set);

    assert_int_equal(REDIS_REPLY_STATUS, r->type);
    freeReplyObject(r);
    r = run(c, slot, BUDGET_MS, 2, get);
    assert_int_equal(REDIS_REPLY_STRING, r->type);
    assert_string_equal(val, r->str);
    freeReplyObject(r);
}

/* Every primary gets a key; the owner itself holds it afterwards. */
static void test_routes_to_every_primary(void **state)
{
    struct redis_cluster *c = client();
    unsigned prim[3];
    char key[64], val[32];

    (void)state;
    primaries(prim);
    for (int i = 0; i < 3; i++) {
        redisContext *rc = direct(prim[i]);
        redisReply *r;

        key_on(prim[i], "route:", key, sizeof(key));
        snprintf(val, sizeof(val), "v%u", prim[i]);
        set_get(c, key, val);
        /* Asked directly, the owner has it (no redirection). */
        r = cmd(rc, "GET %s", key);
        assert_int_equal(REDIS_REPLY_STRING, r->type);
        assert_string_equal(val, r->str);
        freeReplyObject(r);
        redisFree(rc);
    }
    /* Every primary, asked on its own: the durability the async mode
     * wants, and a cluster in order. */
    assert_int_equal(3, redis_cluster_primaries(c));
    for (int i = 0; i < 3; i++) {
        const char *aof[] = {"CONFIG", "GET", "append*"};
        const char *info[] = {"CLUSTER", "INFO"};
        char host[64];
        unsigned port;
        int err;
        redisReply *r = redis_cluster_primary_command(c, i, 3, aof, NULL, &err);

        redis_cluster_primary_addr(c, i, host, sizeof(host), &port);
        assert_string_equal("127.0.0.1", host);
        assert_true(port == prim[0] || port == prim[1] || port == prim[2]);
        assert_non_null(r);
        assert_int_equal(REDIS_REPLY_ARRAY, r->type);
        for (size_t k = 0; k + 1 < r->elements; k += 2) {
            if (strcmp(r->element[k]->str, "appendonly") == 0)
                assert_string_equal("yes", r->element[k + 1]->str);
            if (strcmp(r->element[k]->str, "appendfsync") == 0)
                assert_string_equal("always", r->element[k + 1]->str);
        }
        freeReplyObject(r);
        r = redis_cluster_primary_command(c, i, 2, info, NULL, &err);
        assert_non_null(r);
        assert_non_null(strstr(r->str, "cluster_state:ok"));
        freeReplyObject(r);
    }
    /* One map read, no redirection: the map was right. */
    assert_int_equal(0, redis_cluster_stats(c).moved);
    assert_int_equal(0, redis_cluster_stats(c).ask);
    assert_int_equal(1, redis_cluster_stats(c).refresh);
    redis_cluster_free(c);
}

/*
 * Credentials reach every node: with an ACL user made on every node (the
 * default user keeps working for the other tests), a client logged in as
 * it routes to every primary; with a wrong password it fails at once
 * with -EACCES rather than waiting out its budget.
 */
static void test_auth(void **state)
{
    struct redis_cluster *c;
    unsigned prim[3];
    char key[64];
    const char *get[2] = {"GET", NULL};
    redisReply *r;
    int err;

    (void)state;
    for (unsigned p = base_port; p < base_port + NODES; p++) {
        redisContext *rc = direct(p);

        r = cmd(rc, "ACL SETUSER it-user reset on >it-pass ~* &* +@all");
        assert_int_equal(REDIS_REPLY_STATUS, r->type);
        freeReplyObject(r);
        redisFree(rc);
    }
    primaries(prim);
    c = client_as("it-user", "it-pass");
    for (int i = 0; i < 3; i++) {
        key_on(prim[i], "auth:", key, sizeof(key));
        set_get(c, key, "logged-in");
    }
    assert_int_equal(3, redis_cluster_primaries(c));
    redis_cluster_free(c);

    c = client_as("it-user", "wrong");
    get[1] = key;
    {
        int64_t t0 = util_mono_ms();

        r = redis_cluster_command(c, (int)redis_key_slot_str(key), 2, get, NULL,
                                  5000, &err);
        assert_null(r);
        assert_int_equal(-EACCES, err);
        assert_true(util_mono_ms() - t0 < 2000);
    }
    redis_cluster_free(c);
}

static struct redis_script incr2 =
    REDIS_SCRIPT("local a = redis.call('incr', KEYS[1]) "
                 "local b = redis.call('incrby', KEYS[2], ARGV[1]) "
                 "return {a, b}");

/* A script on two keys of one hash tag runs on the tag's owner; a node
 * that forgot it (SCRIPT FLUSH) is sent EVAL; keys of two slots are
 * CROSSSLOT, returned as they are. */
static void test_script_hash_tag(void **state)
{
    struct redis_cluster *c = client();
    char a[96], b[96], tag[72];
    const char *argv[3];
    unsigned prim[3];
    redisReply *r;
    int err;

    (void)state;
    primaries(prim);
    for (int i = 0; i < 3; i++) {
        char key[64];
        redisContext *rc = direct(prim[i]);

        key_on(prim[i], "tag", key, sizeof(key));
        snprintf(tag, sizeof(tag), "{%s}", key);
        snprintf(a, sizeof(a), "%s:a", tag);
        snprintf(b, sizeof(b), "%s:b", tag);
        freeReplyObject(cmd(rc, "DEL %s %s", a, b));
        freeReplyObject(cmd(rc, "SCRIPT FLUSH"));
        argv[0] = a;
        argv[1] = b;
        argv[2] = "10";
        for (int round = 1; round <= 2; round++) {
            r = redis_cluster_script_run(c, &incr2, 2, 3, argv, NULL, BUDGET_MS,
                                         &err);
            assert_non_null(r);
            assert_int_equal(REDIS_REPLY_ARRAY, r->type);
            assert_int_equal(round, r->element[0]->integer);
            assert_int_equal(10 * round, r->element[1]->integer);
            freeReplyObject(r);
        }
        r = cmd(rc, "GET %s", b);
        assert_string_equal("20", r->str);
        freeReplyObject(r);
        redisFree(rc);
    }
    argv[0] = "{x}:a";
    argv[1] = "{y}:b";
    r = redis_cluster_script_run(c, &incr2, 2, 3, argv, NULL, BUDGET_MS, &err);
    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_ERROR, r->type);
    assert_non_null(strstr(r->str, "CROSSSLOT"));
    freeReplyObject(r);
    redis_cluster_free(c);
}

/* The node id of the node on port. */
static void node_id(unsigned port, char id[41])
{
    redisContext *rc = direct(port);
    redisReply *r = cmd(rc, "CLUSTER MYID");

    assert_int_equal(40, r->len);
    memcpy(id, r->str, 41);
    freeReplyObject(r);
    redisFree(rc);
}

/*
 * Move one slot from its owner A to B by hand, as redis-cli --cluster
 * reshard does: B IMPORTING, A MIGRATING, the keys MIGRATEd one by one,
 * then the slot given to B on every primary. In the middle: a key
 * already at B is an ASK, a command on a moved and an unmoved key is
 * TRYAGAIN until the budget ends (then refused: -EAGAIN); at the end the
 * client's stale map gets a MOVED, and after one map read no more.
 */
static void test_slot_moved(void **state)
{
    struct redis_cluster *c = client(), *old;
    unsigned prim[3], from, to;
    char key[64], k1[80], k2[80], ida[41], idb[41];
    redisContext *ra, *rb;
    redisReply *r;
    unsigned slot;

    (void)state;
    primaries(prim);
    from = prim[0];
    to = prim[1];
    key_on(from, "move", key, sizeof(key));
    slot = redis_key_slot_str(key);
    snprintf(k1, sizeof(k1), "{%s}:1", key);
    snprintf(k2, sizeof(k2), "{%s}:2", key);
    set_get(c, k1, "one");
    set_get(c, k2, "two");
    assert_int_equal(1, redis_cluster_stats(c).refresh);
    /* A second client that learns the map now, before the move. */
    old = client();
    {
        char h[64];
        unsigned p;
        assert_int_equal(0,
                         redis_cluster_slot_owner(old, slot, h, sizeof(h), &p));
        assert_int_equal(from, p);
    }
    node_id(from, ida);
    node_id(to, idb);
    ra = direct(from);
    rb = direct(to);

    r = cmd(rb, "CLUSTER SETSLOT %u IMPORTING %s", slot, ida);
    assert_int_equal(REDIS_REPLY_STATUS, r->type);
    freeReplyObject(r);
    r = cmd(ra, "CLUSTER SETSLOT %u MIGRATING %s", slot, idb);
    assert_int_equal(REDIS_REPLY_STATUS, r->type);
    freeReplyObject(r);
    r = cmd(ra, "MIGRATE 127.0.0.1 %u %s 0 5000", to, k1);
    assert_int_equal(REDIS_REPLY_STATUS, r->type);
    freeReplyObject(r);

    /* k1 is at B now: A answers ASK, the client asks B once. */
    {
        const char *get[] = {"GET", k1};
        r = run(c, (int)slot, BUDGET_MS, 2, get);
        assert_int_equal(REDIS_REPLY_STRING, r->type);
        assert_string_equal("one", r->str);
        freeReplyObject(r);
        assert_int_equal(1, redis_cluster_stats(c).ask);
    }
    /* k2 still at A: answered there, no redirection. */
    {
        const char *get[] = {"GET", k2};
        r = run(c, (int)slot, BUDGET_MS, 2, get);
        assert_string_equal("two", r->str);
        freeReplyObject(r);
        assert_int_equal(1, redis_cluster_stats(c).ask);
    }
    /* The same in a batch: k1's ASK is followed on its own, k2 and a
     * key on another primary are answered in the batch. */
    {
        char other[64];
        const char *g1[] = {"GET", k1}, *g2[] = {"GET", k2};
        const char *g3[] = {"GET", other};
        struct redis_cluster_cmd b[3] = {
            {.slot = (int)slot, .argc = 2, .argv = g1},
            {.slot = (int)slot, .argc = 2, .argv = g2},
            {.argc = 2, .argv = g3},
        };
        redisReply *rep[3];

        key_on(prim[2], "other", other, sizeof(other));
        b[2].slot = (int)redis_key_slot_str(other);
        assert_int_equal(0, redis_cluster_pipeline(c, b, 3, rep, BUDGET_MS));
        assert_string_equal("one", rep[0]->str);
        assert_string_equal("two", rep[1]->str);
        assert_int_equal(REDIS_REPLY_NIL, rep[2]->type);
        for (int i = 0; i < 3; i++)
            freeReplyObject(rep[i]);
        assert_int_equal(2, redis_cluster_stats(c).ask);
    }
    /* Both keys in one command while they are split: TRYAGAIN, waited
     * out for the budget, then reported as a refusal (it never ran). */
    {
        const char *mget[] = {"MGET", k1, k2};
        int64_t t0 = util_mono_ms();
        int err = 0;

        r = redis_cluster_command(c, (int)slot, 3, mget, NULL, 200, &err);
        assert_null(r);
        assert_int_equal(-EAGAIN, err);
        assert_true(util_mono_ms() - t0 >= 190);
        assert_true(redis_cluster_stats(c).tryagain >= 2);
    }
    /* The rest moves and the slot is B's. */
    r = cmd(ra, "MIGRATE 127.0.0.1 %u %s 0 5000", to, k2);
    assert_int_equal(REDIS_REPLY_STATUS, r->type);
    freeReplyObject(r);
    for (int i = 0; i < 3; i++) {
        redisContext *rc = direct(prim[i]);

        r = cmd(rc, "CLUSTER SETSLOT %u NODE %s", slot, idb);
        assert_int_equal(REDIS_REPLY_STATUS, r->type);
        freeReplyObject(r);
        redisFree(rc);
    }
    /* A client whose map is from before the move, in a batch: both
     * commands come back MOVED and are followed. */
    {
        const char *g1[] = {"GET", k1}, *g2[] = {"GET", k2};
        struct redis_cluster_cmd b[2] = {
            {.slot = (int)slot, .argc = 2, .argv = g1},
            {.slot = (int)slot, .argc = 2, .argv = g2},
        };
        redisReply *rep[2];

        assert_int_equal(0, redis_cluster_pipeline(old, b, 2, rep, BUDGET_MS));
        assert_string_equal("one", rep[0]->str);
        assert_string_equal("two", rep[1]->str);
        freeReplyObject(rep[0]);
        freeReplyObject(rep[1]);
        assert_int_equal(2, redis_cluster_stats(old).moved);
        assert_int_equal(0, redis_cluster_stats(old).ask);
    }
    {
        const char *mget[] = {"MGET", k1, k2};
        struct redis_cluster_stats before = redis_cluster_stats(c);

        r = run(c, (int)slot, BUDGET_MS, 3, mget);
        assert_int_equal(REDIS_REPLY_ARRAY, r->type);
        assert_string_equal("one", r->element[0]->str);
        assert_string_equal("two", r->element[1]->str);
        freeReplyObject(r);
        assert_int_equal(before.moved + 1, redis_cluster_stats(c).moved);
        /* Followed by one map read, after which the map is right. */
        r = run(c, (int)slot, BUDGET_MS, 3, mget);
        freeReplyObject(r);
        assert_int_equal(before.moved + 1, redis_cluster_stats(c).moved);
        assert_int_equal(before.refresh + 1, redis_cluster_stats(c).refresh);
        assert_int_equal(to, owner_of(slot));
    }
    /* The same counts, summed over both clients, in /metrics' text. */
    {
        uint64_t moved =
            redis_cluster_stats(c).moved + redis_cluster_stats(old).moved;
        char *text = metrics_render(NULL, NULL), line[128];

        assert_true(metrics_counter_get(METRIC_REDIS_MOVED) >= moved);
        assert_true(metrics_counter_get(METRIC_REDIS_ASK) >= 2);
        snprintf(
            line, sizeof(line),
            "seckill_redis_cluster_redirections_total{kind=\"moved\"} %llu",
            (unsigned long long)metrics_counter_get(METRIC_REDIS_MOVED));
        assert_non_null(strstr(text, line));
        free(text);
    }
    redisFree(ra);
    redisFree(rb);
    redis_cluster_free(old);
    redis_cluster_free(c);
}

/* A batch over every primary, scripts among plain commands, its replies
 * in the caller's order; a second client with no map yet sends the same
 * batch after a SCRIPT FLUSH everywhere (NOSCRIPT, sent again as EVAL). */
static void test_pipeline(void **state)
{
    enum { N = 300 };
    struct redis_cluster *c = client();
    struct redis_cluster_cmd cmds[N];
    redisReply *replies[N];
    char keys[N][40], vals[N][16];
    const char *argv[N][3];
    unsigned prim[3];
    int seen[3] = {0};

    (void)state;
    primaries(prim);
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "{batch:%d}:k", i / 2);
        snprintf(vals[i], sizeof(vals[i]), "%d", i);
        memset(&cmds[i], 0, sizeof(cmds[i]));
        cmds[i].slot = (int)redis_key_slot_str(keys[i]);
        argv[i][0] = i % 2 ? keys[i] : "SET";
        if (i % 2 == 0) {
            /* SET {batch:j}:k <i> */
            argv[i][1] = keys[i];
            argv[i][2] = vals[i];
            cmds[i].argc = 3;
        } else {
            /* incr2 on {batch:j}:k and {batch:j}:k, by <i> */
            argv[i][1] = keys[i];
            argv[i][2] = vals[i];
            cmds[i].script = &incr2;
            cmds[i].nkeys = 2;
            cmds[i].argc = 3;
        }
        cmds[i].argv = argv[i];
        for (int p = 0; p < 3; p++)
            if (owner_of((unsigned)cmds[i].slot) == prim[p])
                seen[p]++;
    }
    for (int p = 0; p < 3; p++)
        assert_true(seen[p] > 0);
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            redis_cluster_free(c);
            c = client();
            for (int p = 0; p < 3; p++) {
                redisContext *rc = direct(prim[p]);
                freeReplyObject(cmd(rc, "SCRIPT FLUSH"));
                redisFree(rc);
            }
        }
        assert_int_equal(
            0, redis_cluster_pipeline(c, cmds, N, replies, BUDGET_MS));
        for (int i = 0; i < N; i++) {
            assert_non_null(replies[i]);
            if (i % 2 == 0) {
                assert_int_equal(REDIS_REPLY_STATUS, replies[i]->type);
            } else {
                /* SET to i-1, then incr once (i), then incrby i: i-1+1+i */
                assert_int_equal(REDIS_REPLY_ARRAY, replies[i]->type);
                assert_int_equal(2 * i, replies[i]->element[1]->integer);
            }
            freeReplyObject(replies[i]);
        }
    }
    assert_int_equal(0, redis_cluster_stats(c).moved);
    redis_cluster_free(c);
}

/* The pid of the node on port, from its pid file. */
static pid_t node_pid(unsigned port)
{
    char path[512];
    const char *run = getenv("SECKILL_RUN_DIR");
    FILE *f;
    long pid = 0;

    snprintf(path, sizeof(path), "%s/redis-cluster/%u/redis.pid",
             run && *run ? run : ".run", port);
    f = fopen(path, "r");
    if (!f)
        fail_msg("no pid file %s", path);
    if (fscanf(f, "%ld", &pid) != 1)
        pid = 0;
    fclose(f);
    assert_true(pid > 1);
    return (pid_t)pid;
}

/*
 * A primary killed. A client with the map but no connection to it yet
 * sends a batch with a key of the victim's: nothing is written there, so
 * that command waits within its budget, asking for the map again, until
 * the replica is promoted, and reads the key written before the kill
 * (replicated: WAIT). A client that was connected to the victim finds
 * that connection closed while idle and dials again before writing, so
 * its next command goes to the new primary (a command cut short by the
 * kill itself would be an unknown outcome: test_idle_close_redialed and
 * the unit tests cover that).
 */
static void test_primary_killed(void **state)
{
    struct redis_cluster *c = client(), *fresh = client();
    unsigned prim[3], victim, port;
    char key[64], other[64], host[64];
    const char *get[2] = {"GET", NULL}, *set[3] = {"SET", NULL, "after"};
    const char *get_other[2] = {"GET", NULL};
    redisReply *r;
    int slot, err;

    (void)state;
    primaries(prim);
    victim = prim[2];
    key_on(victim, "kill", key, sizeof(key));
    key_on(prim[0], "alive", other, sizeof(other));
    slot = (int)redis_key_slot_str(key);
    get[1] = key;
    set[1] = key;
    get_other[1] = other;
    set_get(c, key, "before");
    {
        /* The victim's replica may still be loading its first copy (the
         * node killed by the previous run came back as a replica). */
        redisContext *rc = direct(victim);
        r = cmd(rc, "WAIT 1 10000");
        assert_int_equal(1, r->integer);
        freeReplyObject(r);
        redisFree(rc);
    }
    assert_int_equal(0, redis_cluster_slot_owner(fresh, (unsigned)slot, host,
                                                 sizeof(host), &port));
    assert_int_equal(victim, port);
    assert_int_equal(0, kill(node_pid(victim), SIGKILL));
    {
        struct redis_cluster_cmd b[2] = {
            {.slot = slot, .argc = 2, .argv = get},
            {.slot = (int)redis_key_slot_str(other),
             .argc = 2,
             .argv = get_other},
        };
        redisReply *rep[2];
        int64_t t0 = util_mono_ms();

        assert_int_equal(
            0, redis_cluster_pipeline(fresh, b, 2, rep, FAILOVER_BUDGET_MS));
        assert_int_equal(REDIS_REPLY_STRING, rep[0]->type);
        assert_string_equal("before", rep[0]->str);
        assert_int_equal(REDIS_REPLY_NIL, rep[1]->type);
        freeReplyObject(rep[0]);
        freeReplyObject(rep[1]);
        print_message("failover followed in %lld ms, %llu map reads\n",
                      (long long)(util_mono_ms() - t0),
                      (unsigned long long)redis_cluster_stats(fresh).refresh);
        assert_true(redis_cluster_stats(fresh).refresh > 1);
    }
    /* The old connection, which the killed node closed while it was
     * idle: it is dialed again before a command is written on it, so
     * nothing is lost and the command reaches the new primary. */
    r = redis_cluster_command(c, slot, 3, set, NULL, BUDGET_MS, &err);
    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_STATUS, r->type);
    freeReplyObject(r);
    r = run(c, slot, BUDGET_MS, 2, get);
    assert_string_equal("after", r->str);
    freeReplyObject(r);
    assert_int_not_equal(victim, owner_of((unsigned)slot));
    redis_cluster_free(c);
    redis_cluster_free(fresh);
    /* The killed node back, as a replica of its successor. */
    assert_int_equal(0, system("scripts/redis-cluster.sh up >/dev/null"));
}

/* ---- the service on the cluster ---- */

/* The crowd: users, each sending PER_USER purchases of one of VOUCHERS
 * vouchers of STOCK units each (user u buys voucher u % VOUCHERS). */
#define CROWD_USERS 500
#define CROWD_PER_USER 3
#define CROWD_VOUCHERS 3
#define CROWD_STOCK 100
#define CROWD_REQUESTS (CROWD_USERS * CROWD_PER_USER)
#define CROWD_USER_BASE 700000000000LL

/* The service's instances: one for the crowd, one with tight rate
 * limits, and another plain one. */
enum { SRV_CROWD, SRV_RATE, SRV_B, SRV_ASYNC, SRV_COUNT };
static struct it_server srvs[SRV_COUNT];

/* SECKILL_REDIS_URL=redis-cluster://... of the first three nodes. */
static char cluster_env[256];

static int service_setup(void **state)
{
    const char *crowd[] = {cluster_env, "SECKILL_LOCK_URL", NULL};
    /* Each batch waits for its primary's replica (WAIT): room for a
     * loaded machine. */
    const char *async[] = {cluster_env, "SECKILL_LOCK_URL",
                           "SECKILL_PURCHASE_MODE=async",
                           "SECKILL_ASYNC_WAIT_MS=2000", NULL};
    /* The address's bucket holds 3 tokens, each user's 1; neither
     * refills within the test (one token per 1000 s). */
    const char *rate[] = {cluster_env, "SECKILL_LOCK_URL",
                          "SECKILL_RATE_IP=0.001,3",
                          "SECKILL_RATE_USER=0.001,1", NULL};

    (void)state;
    it_init();
    snprintf(cluster_env, sizeof(cluster_env),
             "SECKILL_REDIS_URL=redis-cluster://127.0.0.1:%u,127.0.0.1:%u,"
             "127.0.0.1:%u",
             base_port, base_port + 1, base_port + 2);
    if (it_server_start(&srvs[SRV_CROWD], "cluster-crowd", crowd) ||
        it_server_start(&srvs[SRV_RATE], "cluster-rate", rate) ||
        it_server_start(&srvs[SRV_B], "cluster-b", crowd))
        return -1;
    /* The async mode asks every primary for appendfsync always (the
     * cluster script starts its nodes so; a cluster started before is
     * set here), replicas too: a failover may promote one. */
    for (unsigned p = base_port; p < base_port + NODES; p++) {
        redisContext *rc = direct(p);

        freeReplyObject(cmd(rc, "CONFIG SET appendfsync always"));
        redisFree(rc);
    }
    if (it_server_start(&srvs[SRV_ASYNC], "cluster-async", async))
        return -1;
    return 0;
}

static int service_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srvs, SRV_COUNT);
}

/* Script calls (EVAL and EVALSHA) the node on port ran since its last
 * CONFIG RESETSTAT, from INFO commandstats. */
static long long script_calls(unsigned port)
{
    redisContext *rc = direct(port);
    redisReply *r = cmd(rc, "INFO commandstats");
    long long n = 0;

    assert_int_equal(REDIS_REPLY_STRING, r->type);
    for (const char *name = "cmdstat_eval:calls="; name;
         name = strcmp(name, "cmdstat_eval:calls=") == 0
                    ? "cmdstat_evalsha:calls="
                    : NULL) {
        const char *at = strstr(r->str, name);

        if (at)
            n += strtoll(at + strlen(name), NULL, 10);
    }
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* The owner of the slot of "{v:ID}", the hash tag of voucher id's keys. */
static unsigned voucher_owner(int64_t id)
{
    char key[64];

    snprintf(key, sizeof(key), "{v:%lld}", (long long)id);
    return owner_of(redis_key_slot_str(key));
}

/* The counter of kind in the instance's /metrics. */
static long long redirections(const struct it_server *srv, const char *kind)
{
    char name[96];
    struct it_resp m;
    const char *at;
    long long n = 0;

    snprintf(name, sizeof(name),
             "seckill_redis_cluster_redirections_total{kind=\"%s\"} ", kind);
    assert_int_equal(200, it_http(srv, "GET", "/metrics", NULL, NULL, &m));
    at = strstr(m.body, name);
    if (at)
        n = strtoll(at + strlen(name), NULL, 10);
    it_resp_free(&m);
    return n;
}

/*
 * A crowd of CROWD_USERS users, CROWD_PER_USER purchases each, all in
 * flight at once, on CROWD_VOUCHERS vouchers of CROWD_STOCK whose sale
 * slots are on three different primaries: each sells out exactly; in
 * MySQL orders = initial - stock, no user has two orders of one voucher,
 * every 201 is an order of that user and voucher; every primary ran
 * scripts (the purchase locks, the id worker and the rate buckets are
 * spread over slots); /readyz reports the cluster ok.
 */
static void test_service_crowd(void **state)
{
    const struct it_server *srv = &srvs[SRV_CROWD];
    struct it_req *reqs = xcalloc(CROWD_REQUESTS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(CROWD_REQUESTS, sizeof(*resps));
    const struct it_server **to = xcalloc(CROWD_REQUESTS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(CROWD_USERS, sizeof(*tokens));
    int64_t v[CROWD_VOUCHERS], user_base, shop = it_unique();
    unsigned prim[3], vport[CROWD_VOUCHERS];
    size_t created[CROWD_VOUCHERS] = {0}, n_sold_out = 0, n_dup = 0, n_busy = 0;
    char paths[CROWD_VOUCHERS][96];
    struct it_resp ready;
    long long moved0, ask0;
    int found = 0;

    (void)state;
    user_base = CROWD_USER_BASE + util_now_ms() % 100000000 * 1000;
    primaries(prim);
    /* Vouchers until one sale slot on each primary. */
    for (int tries = 0; found < CROWD_VOUCHERS && tries < 60; tries++) {
        int64_t id = it_seckill_create(srv, shop, CROWD_STOCK, -60, 3600);
        unsigned port = voucher_owner(id);
        bool taken = false;

        for (int i = 0; i < found; i++)
            taken |= vport[i] == port;
        if (taken)
            continue;
        vport[found] = port;
        v[found++] = id;
    }
    assert_int_equal(CROWD_VOUCHERS, found);
    for (int i = 0; i < 3; i++) {
        redisContext *rc = direct(prim[i]);

        freeReplyObject(cmd(rc, "CONFIG RESETSTAT"));
        redisFree(rc);
    }
    for (int i = 0; i < CROWD_VOUCHERS; i++)
        snprintf(paths[i], sizeof(paths[i]), "/api/vouchers/%lld/seckill",
                 (long long)v[i]);
    for (size_t u = 0; u < CROWD_USERS; u++)
        it_token(user_base + (int64_t)u, TOKEN_ROLE_USER, 3600, tokens[u]);
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        size_t u = i % CROWD_USERS;

        reqs[i].method = "POST";
        reqs[i].path = paths[u % CROWD_VOUCHERS];
        reqs[i].token = tokens[u];
        to[i] = srv;
    }
    /* Warmed up by the vouchers' creation: from here on every command
     * goes straight to its slot's owner. */
    moved0 = redirections(srv, "moved");
    ask0 = redirections(srv, "ask");
    it_http_run_all(reqs, to, resps, CROWD_REQUESTS);
    assert_int_equal(moved0, redirections(srv, "moved"));
    assert_int_equal(ask0, redirections(srv, "ask"));

    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        struct it_resp *r = &resps[i];
        size_t u = i % CROWD_USERS, k = u % CROWD_VOUCHERS;
        const char *code;

        assert_int_equal(CURLE_OK, r->curl_rc);
        if (r->status == 201) {
            int64_t id = it_json_id(r->json, "orderId");

            created[k]++;
            assert_int_equal(1,
                             it_sql_scalar("SELECT COUNT(*) FROM "
                                           "voucher_orders WHERE id = %lld "
                                           "AND user_id = %lld AND "
                                           "voucher_id = %lld",
                                           (long long)id,
                                           (long long)(user_base + (int64_t)u),
                                           (long long)v[k]));
            continue;
        }
        code = it_json_str(json_object_get(r->json, "error"), "code");
        if (!code) {
            print_error("request %zu: status %ld without an error code\n", i,
                        r->status);
            fail();
        }
        if (r->status == 409 && strcmp(code, "SOLD_OUT") == 0)
            n_sold_out++;
        else if (r->status == 409 && strcmp(code, "ALREADY_PURCHASED") == 0)
            n_dup++;
        else if (r->status == 429 && strcmp(code, "BUSY") == 0)
            n_busy++;
        else
            fail_msg("request %zu: %ld %s", i, r->status, code);
    }
    print_message("201: %zu %zu %zu, SOLD_OUT: %zu, ALREADY_PURCHASED: %zu, "
                  "BUSY: %zu\n",
                  created[0], created[1], created[2], n_sold_out, n_dup,
                  n_busy);
    for (int k = 0; k < CROWD_VOUCHERS; k++) {
        int64_t stock = it_sql_stock(v[k]);

        assert_int_equal(CROWD_STOCK, created[k]);
        assert_int_equal(0, stock);
        assert_int_equal(CROWD_STOCK - stock, it_sql_order_count(v[k]));
        assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT "
                                          "user_id FROM voucher_orders WHERE "
                                          "voucher_id = %lld GROUP BY user_id "
                                          "HAVING COUNT(*) > 1) d",
                                          (long long)v[k]));
    }
    for (int i = 0; i < 3; i++) {
        long long n = script_calls(prim[i]);

        print_message("primary %u: %lld script calls\n", prim[i], n);
        assert_true(n > 0);
    }
    /* The store's threads each read the slot map (and, outside a slot
     * move, were never redirected). */
    {
        const char *name =
            "seckill_redis_cluster_redirections_total{kind=\"refresh\"} ";
        struct it_resp m;
        const char *at;

        assert_int_equal(200, it_http(srv, "GET", "/metrics", NULL, NULL, &m));
        at = strstr(m.body, name);
        assert_non_null(at);
        assert_true(strtoll(at + strlen(name), NULL, 10) >= 1);
        it_resp_free(&m);
    }
    assert_int_equal(200, it_http(srv, "GET", "/readyz", NULL, NULL, &ready));
    assert_string_equal("ok", it_json_str(json_object_get(ready.json, "checks"),
                                          "redisCluster"));
    it_resp_free(&ready);
    for (size_t i = 0; i < CROWD_REQUESTS; i++)
        it_resp_free(&resps[i]);
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
}

/* One purchase of voucher by user on the rate-limited instance: its
 * status, and its error code in code (cap bytes; "" for none). */
static long rate_buy(int64_t voucher, int64_t user, char *code, size_t cap)
{
    struct it_resp r;
    const char *c;
    long status = it_purchase(&srvs[SRV_RATE], voucher, user, &r);

    c = it_json_str(json_object_get(r.json, "error"), "code");
    snprintf(code, cap, "%s", c ? c : "");
    it_resp_free(&r);
    return status;
}

/*
 * The rate limiter on a cluster: the address's bucket and a user's are
 * in two slots on two primaries, each taken by its own script; a request
 * the user's bucket refuses gives the address's token back, so buckets
 * are charged all or none. The address holds 3 tokens and each user 1:
 * user A buys (address 2 left), is refused three times by its own bucket
 * (the address keeps 2), then B and C buy (0 left) and D is refused by
 * the address. Without the give-back, B would already be refused.
 */
static void test_service_rate_all_or_none(void **state)
{
    char ip_key[64], code[64];
    unsigned ip_port;
    int64_t users[4],
        base = CROWD_USER_BASE + 900000000LL + util_now_ms() % 100000000 * 100;
    int64_t voucher =
        it_seckill_create(&srvs[SRV_CROWD], it_unique(), 10, -60, 3600);
    int n = 0;

    (void)state;
    snprintf(ip_key, sizeof(ip_key), "rate:ip:127.0.0.1");
    ip_port = owner_of(redis_key_slot_str(ip_key));
    /* Four users whose buckets are not on the address's primary. */
    for (int64_t u = base; n < 4; u++) {
        char k[64];

        snprintf(k, sizeof(k), "rate:user:%lld", (long long)u);
        if (owner_of(redis_key_slot_str(k)) != ip_port)
            users[n++] = u;
    }
    {
        /* A fresh address bucket: earlier runs' tokens are gone. */
        redisContext *rc = direct(ip_port);

        freeReplyObject(cmd(rc, "DEL %s", ip_key));
        redisFree(rc);
    }
    assert_int_equal(201, rate_buy(voucher, users[0], code, sizeof(code)));
    for (int i = 0; i < 3; i++) {
        assert_int_equal(429, rate_buy(voucher, users[0], code, sizeof(code)));
        assert_string_equal("RATE_LIMITED", code);
    }
    assert_int_equal(201, rate_buy(voucher, users[1], code, sizeof(code)));
    assert_int_equal(201, rate_buy(voucher, users[2], code, sizeof(code)));
    assert_int_equal(429, rate_buy(voucher, users[3], code, sizeof(code)));
    assert_string_equal("RATE_LIMITED", code);
    /* D's own bucket was not charged either: it is untouched. */
    {
        char k[64];
        redisContext *rc;
        redisReply *r;

        snprintf(k, sizeof(k), "rate:user:%lld", (long long)users[3]);
        rc = direct(owner_of(redis_key_slot_str(k)));
        r = cmd(rc, "EXISTS %s", k);
        assert_int_equal(0, r->integer);
        freeReplyObject(r);
        redisFree(rc);
    }
}

/* Subscribers of channel on the node on port (PUBSUB SHARDNUMSUB). */
static long long shard_subscribers(unsigned port, const char *channel)
{
    redisContext *rc = direct(port);
    redisReply *r = cmd(rc, "PUBSUB SHARDNUMSUB %s", channel);
    long long n = -1;

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        n = r->element[1]->integer;
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* Give slot from the primary on port from to the one on port to, keys
 * and all, on every primary (as test_slot_moved does, without pauses). */
static void slot_give(unsigned slot, unsigned from, unsigned to,
                      const unsigned prim[3])
{
    char ida[41], idb[41];
    redisContext *ra = direct(from), *rb = direct(to);
    redisReply *r;

    node_id(from, ida);
    node_id(to, idb);
    freeReplyObject(cmd(rb, "CLUSTER SETSLOT %u IMPORTING %s", slot, ida));
    freeReplyObject(cmd(ra, "CLUSTER SETSLOT %u MIGRATING %s", slot, idb));
    for (;;) {
        r = cmd(ra, "CLUSTER GETKEYSINSLOT %u 100", slot);
        size_t n = r->elements;

        for (size_t i = 0; i < n; i++)
            freeReplyObject(cmd(ra, "MIGRATE 127.0.0.1 %u %s 0 5000", to,
                                r->element[i]->str));
        freeReplyObject(r);
        if (n == 0)
            break;
    }
    /* The importing node first, the one giving it away last. */
    freeReplyObject(cmd(rb, "CLUSTER SETSLOT %u NODE %s", slot, idb));
    for (int i = 0; i < 3; i++) {
        if (prim[i] == from || prim[i] == to)
            continue;
        redisContext *rc = direct(prim[i]);

        freeReplyObject(cmd(rc, "CLUSTER SETSLOT %u NODE %s", slot, idb));
        redisFree(rc);
    }
    freeReplyObject(cmd(ra, "CLUSTER SETSLOT %u NODE %s", slot, idb));
    redisFree(ra);
    redisFree(rb);
}

/* Wait up to 10 s for the channel to have subscribers on port. */
static bool subscribed_at(unsigned port, const char *channel)
{
    for (int i = 0; i < 200; i++) {
        if (shard_subscribers(port, channel) >= SRV_COUNT)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

/*
 * The voucher-change notices on a cluster: each instance's voucher cache
 * listens with SSUBSCRIBE at the owner of the channel's slot; when that
 * primary gives the slot away it ends the subscription and the instances
 * subscribe at the new owner (and again when it comes back).
 */
static void test_service_notices_follow_slot(void **state)
{
    const char *channel = "seckill:voucher-changed:0";
    unsigned slot = redis_key_slot_str(channel), prim[3], from, to;

    (void)state;
    primaries(prim);
    from = owner_of(slot);
    to = prim[0] == from ? prim[1] : prim[0];
    assert_true(subscribed_at(from, channel));
    slot_give(slot, from, to, prim);
    assert_true(subscribed_at(to, channel));
    assert_int_equal(0, shard_subscribers(from, channel));
    slot_give(slot, to, from, prim);
    assert_true(subscribed_at(from, channel));
    /* The service kept answering throughout. */
    {
        struct it_resp r;

        assert_int_equal(
            200, it_http(&srvs[SRV_CROWD], "GET", "/readyz", NULL, NULL, &r));
        it_resp_free(&r);
    }
}

/* How long the async writers get to write every order of a sale. */
#define ASYNC_DRAIN_MS 20000

/* An integer (or a number in a string) from the node on port. */
static long long node_int(unsigned port, const char *fmt, int64_t v)
{
    redisContext *rc = direct(port);
    redisReply *r = cmd(rc, fmt, (long long)v);
    long long n = -1;

    if (r->type == REDIS_REPLY_INTEGER)
        n = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        n = atoll(r->str);
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

/* Wait (up to 30 s) until each primary of prim has a replica online: a
 * node brought back by test_primary_killed copies its primary first, and
 * until then the async mode answers its primary's batches 503 (a
 * failover could promote a replica without them). */
static void replicas_wait(const unsigned prim[3])
{
    int64_t until = util_mono_ms() + 30000;

    for (int i = 0; i < 3; i++) {
        for (;;) {
            redisContext *rc = direct(prim[i]);
            redisReply *r = cmd(rc, "INFO replication");
            bool online = r->type == REDIS_REPLY_STRING &&
                          strstr(r->str, "state=online") != NULL;

            freeReplyObject(r);
            redisFree(rc);
            if (online)
                break;
            if (util_mono_ms() > until)
                fail_msg("primary %u has no replica online", prim[i]);
            usleep(100 * 1000);
        }
    }
}

/* The writers have drained async voucher v: its stream and its pending
 * records are empty on its slot's owner within ASYNC_DRAIN_MS (asserts). */
static void assert_drained(int64_t v)
{
    int64_t until = util_mono_ms() + ASYNC_DRAIN_MS;
    long long backlog, pending;

    do {
        backlog = node_int(voucher_owner(v), "XLEN {v:%lld}:stream", v);
        pending = node_int(voucher_owner(v), "HLEN {v:%lld}:pending", v);
        if (backlog == 0 && pending == 0)
            break;
        usleep(50 * 1000);
    } while (util_mono_ms() < until);
    assert_int_equal(0, backlog);
    assert_int_equal(0, pending);
}

/*
 * The async mode on the cluster: an instance started with
 * SECKILL_PURCHASE_MODE=async (every primary durable) sells three
 * vouchers whose {v:ID} slots sit on three primaries to a crowd of
 * CROWD_USERS users x CROWD_PER_USER requests. Once the writers have
 * drained every stream: in MySQL orders = initial - stock, no user
 * twice, every 202 an order of its user (by order id), Redis' stock (on
 * the slot's owner) = MySQL's; every primary ran scripts.
 */
static void test_service_async_crowd(void **state)
{
    const struct it_server *srv = &srvs[SRV_ASYNC];
    struct it_req *reqs = xcalloc(CROWD_REQUESTS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(CROWD_REQUESTS, sizeof(*resps));
    const struct it_server **to = xcalloc(CROWD_REQUESTS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(CROWD_USERS, sizeof(*tokens));
    int64_t(*ids)[CROWD_STOCK] = xcalloc(CROWD_VOUCHERS, sizeof(*ids));
    int64_t v[CROWD_VOUCHERS], user_base, shop = it_unique();
    unsigned prim[3], vport[CROWD_VOUCHERS];
    size_t n202[CROWD_VOUCHERS] = {0}, others = 0;
    char paths[CROWD_VOUCHERS][96];
    long long moved0, ask0;
    int found = 0;

    (void)state;
    user_base = CROWD_USER_BASE + 50000000 + util_now_ms() % 1000000 * 1000;
    primaries(prim);
    replicas_wait(prim);
    /* The writer's look at the replicas (every 2 s) has seen them. */
    usleep(2500 * 1000);
    for (int tries = 0; found < CROWD_VOUCHERS && tries < 60; tries++) {
        int64_t id = it_seckill_create(srv, shop, CROWD_STOCK, -60, 3600);
        unsigned port = voucher_owner(id);
        bool taken = false;

        for (int i = 0; i < found; i++)
            taken |= vport[i] == port;
        if (taken)
            continue;
        vport[found] = port;
        v[found++] = id;
    }
    assert_int_equal(CROWD_VOUCHERS, found);
    for (int k = 0; k < CROWD_VOUCHERS; k++)
        assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM "
                                          "seckill_vouchers WHERE "
                                          "voucher_id = %lld AND "
                                          "purchase_mode = 1",
                                          (long long)v[k]));
    for (int i = 0; i < 3; i++) {
        redisContext *rc = direct(prim[i]);

        freeReplyObject(cmd(rc, "CONFIG RESETSTAT"));
        redisFree(rc);
    }
    for (int i = 0; i < CROWD_VOUCHERS; i++)
        snprintf(paths[i], sizeof(paths[i]), "/api/vouchers/%lld/seckill",
                 (long long)v[i]);
    for (size_t u = 0; u < CROWD_USERS; u++)
        it_token(user_base + (int64_t)u, TOKEN_ROLE_USER, 3600, tokens[u]);
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        size_t u = i % CROWD_USERS;

        reqs[i].method = "POST";
        reqs[i].path = paths[u % CROWD_VOUCHERS];
        reqs[i].token = tokens[u];
        to[i] = srv;
    }
    moved0 = redirections(srv, "moved");
    ask0 = redirections(srv, "ask");
    it_http_run_all(reqs, to, resps, CROWD_REQUESTS);
    assert_int_equal(moved0, redirections(srv, "moved"));
    assert_int_equal(ask0, redirections(srv, "ask"));
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        struct it_resp *r = &resps[i];
        size_t u = i % CROWD_USERS, k = u % CROWD_VOUCHERS;
        const char *code =
            it_json_str(json_object_get(r->json, "error"), "code");

        assert_int_equal(CURLE_OK, r->curl_rc);
        if (r->status == 202) {
            assert_true(n202[k] < CROWD_STOCK);
            assert_string_equal("pending", it_json_str(r->json, "status"));
            ids[k][n202[k]++] = it_json_id(r->json, "orderId");
        } else if ((r->status == 409 && code &&
                    (strcmp(code, "SOLD_OUT") == 0 ||
                     strcmp(code, "ALREADY_PURCHASED") == 0)) ||
                   (r->status == 429 && code && strcmp(code, "BUSY") == 0)) {
            others++;
        } else {
            fail_msg("request %zu: %ld %s", i, r->status,
                     r->body ? r->body : "");
        }
    }
    print_message("202: %zu %zu %zu, others: %zu\n", n202[0], n202[1], n202[2],
                  others);
    for (int k = 0; k < CROWD_VOUCHERS; k++) {
        int64_t stock;

        assert_int_equal(CROWD_STOCK, n202[k]);
        assert_drained(v[k]);
        stock = it_sql_stock(v[k]);
        assert_int_equal(0, stock);
        assert_int_equal(CROWD_STOCK - stock, it_sql_order_count(v[k]));
        assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT "
                                          "user_id FROM voucher_orders WHERE "
                                          "voucher_id = %lld GROUP BY user_id "
                                          "HAVING COUNT(*) > 1) d",
                                          (long long)v[k]));
        for (size_t i = 0; i < n202[k]; i++) {
            int64_t user = it_sql_scalar(
                "SELECT COALESCE(MAX(user_id), -1) FROM voucher_orders "
                "WHERE id = %lld AND voucher_id = %lld",
                (long long)ids[k][i], (long long)v[k]);

            assert_true(user >= user_base && user < user_base + CROWD_USERS);
            assert_int_equal((int64_t)k, (user - user_base) % CROWD_VOUCHERS);
        }
        assert_int_equal(
            stock, node_int(voucher_owner(v[k]), "GET {v:%lld}:stock", v[k]));
    }
    for (int i = 0; i < 3; i++) {
        long long n = script_calls(prim[i]);

        print_message("primary %u: %lld script calls\n", prim[i], n);
        assert_true(n > 0);
    }
    for (size_t i = 0; i < CROWD_REQUESTS; i++)
        it_resp_free(&resps[i]);
    free(ids);
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
}

/* GET /api/orders with tok on srv: the status. */
static long orders_status(const struct it_server *srv, const char *tok)
{
    struct it_resp r;
    long st = it_http(srv, "GET", "/api/orders", NULL, tok, &r);

    it_resp_free(&r);
    return st;
}

/*
 * A token logged out on one instance is refused on another within a
 * second: the denylist script runs at its key's slot owner, and its
 * notice (a separate SPUBLISH on a cluster: the channel is in another
 * slot) reaches the other instance's sessions listener.
 */
static void test_service_logout_spreads(void **state)
{
    const struct it_server *a = &srvs[SRV_CROWD], *b = &srvs[SRV_B];
    char tok[TOKEN_STR_LEN];
    int64_t t0;
    struct it_resp r;

    (void)state;
    it_token(CROWD_USER_BASE + it_unique(), TOKEN_ROLE_USER, 3600, tok);
    assert_int_equal(200, orders_status(b, tok));
    it_http(a, "POST", "/api/auth/logout", NULL, tok, &r);
    it_assert_status(&r, 204);
    it_resp_free(&r);
    assert_int_equal(401, orders_status(a, tok));
    t0 = util_mono_ms();
    while (orders_status(b, tok) != 401) {
        if (util_mono_ms() - t0 > 1000)
            fail_msg("the other instance still takes the token after 1 s");
        usleep(20 * 1000);
    }
    print_message("refused on the other instance after %lld ms\n",
                  (long long)(util_mono_ms() - t0));
}

/* ---- a sale through a failover and a reshard ---- */

#define FAULT_USERS 1000
#define FAULT_PER_USER 2
#define FAULT_REQUESTS (FAULT_USERS * FAULT_PER_USER)
#define FAULT_WAVE 100
/* The voucher on the killed primary sells out; the one whose slot is
 * resharded never does, so it is bought (and its keys used) throughout. */
#define FAULT_KILL_STOCK 300
#define FAULT_MOVE_STOCK 5000
/* The slots redis-cli --cluster reshard moves: the source's lowest. */
#define FAULT_MOVE_SLOTS 300
#define FAULT_USER_BASE 800000000000LL

/* The slot map as the first node that answers tells it (asserts). */
static void map_read(struct redis_cluster_map *m)
{
    for (unsigned p = base_port; p < base_port + NODES; p++) {
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", (int)p,
                                                   (struct timeval){1, 0});
        redisReply *r =
            rc && !rc->err ? redisCommand(rc, "CLUSTER SHARDS") : NULL;
        char err[160];
        int ok = r && r->type == REDIS_REPLY_ARRAY &&
                 redis_cluster_map_parse(r, m, err, sizeof(err)) == 0;

        freeReplyObject(r);
        redisFree(rc);
        if (ok)
            return;
    }
    fail_msg("no node answered CLUSTER SHARDS");
}

/* Whether slot is among the n lowest slots that port owns in m. */
static bool among_lowest(const struct redis_cluster_map *m, unsigned port,
                         unsigned slot, unsigned n)
{
    for (unsigned s = 0, seen = 0; s < REDIS_SLOTS && seen < n; s++) {
        uint16_t k = m->slot_node[s];

        if (k == REDIS_CLUSTER_NO_NODE || m->nodes[k].port != port)
            continue;
        if (s == slot)
            return true;
        seen++;
    }
    return false;
}

struct reshard_job {
    unsigned from, to;
    int status;
};

/* redis-cli --cluster reshard: FAULT_MOVE_SLOTS slots from one primary
 * to another, the way an operator moves them. */
static void *reshard_main(void *arg)
{
    struct reshard_job *j = arg;
    char from[41], to[41], *line;

    node_id(j->from, from);
    node_id(j->to, to);
    line = xasprintf("redis-cli --cluster reshard 127.0.0.1:%u "
                     "--cluster-from %s --cluster-to %s --cluster-slots %u "
                     "--cluster-yes >%s/cluster-reshard.log 2>&1",
                     j->from, from, to, FAULT_MOVE_SLOTS, it_log_dir());
    j->status = system(line);
    free(line);
    return NULL;
}

/*
 * A sale through faults: the crowd buys two vouchers in waves while the
 * primary that owns one voucher's sale slot is killed (its replica takes
 * over) and, once the cluster is whole again, while redis-cli --cluster
 * reshard moves the other voucher's slot to another primary. Every answer
 * is a 201 (async: a 202) or an error of the table (never a 500); in
 * MySQL each voucher keeps orders = initial - stock, no user has two
 * orders of one voucher, every 201 or 202 is that user's order with the
 * id it said (async: once the writers have drained the streams; no 202
 * lost), and a user who got neither has no order, unless an async
 * purchase's answer said its outcome was unknown (its replica did not
 * confirm it). Async: Redis' stock, on the slot's owner after the moves,
 * is MySQL's.
 */
static void sale_through_faults(const struct it_server *srv, bool async)
{
    struct it_req *reqs = xcalloc(FAULT_REQUESTS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(FAULT_REQUESTS, sizeof(*resps));
    const struct it_server **to = xcalloc(FAULT_REQUESTS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(FAULT_USERS, sizeof(*tokens));
    int64_t *said = xcalloc(FAULT_USERS, sizeof(*said));
    bool *unknown = xcalloc(FAULT_USERS, sizeof(*unknown));
    long ok_status = async ? 202 : 201;
    struct redis_cluster_map *m = xcalloc(1, sizeof(*m));
    int64_t v[2] = {0, 0}, user_base, shop = it_unique();
    int64_t stock0[2] = {FAULT_KILL_STOCK, FAULT_MOVE_STOCK};
    unsigned prim[3], victim, src = 0, kill_slot;
    char paths[2][96], key[64];
    size_t n201 = 0, n_sold = 0, n_dup = 0, n_busy = 0, n_503 = 0;
    struct reshard_job job = {0};
    pthread_t reshard;
    bool resharding = false;
    long long moved0 = redirections(srv, "moved"),
              ask0 = redirections(srv, "ask");

    user_base = FAULT_USER_BASE + (async ? 100000000000LL : 0) +
                util_now_ms() % 100000000 * 1000;
    primaries(prim);
    if (async) {
        replicas_wait(prim);
        usleep(2500 * 1000); /* the writer's look at the replicas */
    }
    victim = prim[1];
    /* The first voucher's sale slot on the victim; the second's among the
     * lowest slots of another primary (what reshard moves first). */
    for (int tries = 0; !v[0] && tries < 60; tries++) {
        int64_t id = it_seckill_create(srv, shop, FAULT_KILL_STOCK, -60, 3600);

        if (voucher_owner(id) == victim)
            v[0] = id;
    }
    map_read(m);
    for (int tries = 0; !v[1] && tries < 400; tries++) {
        int64_t id = it_seckill_create(srv, shop, FAULT_MOVE_STOCK, -60, 3600);
        unsigned slot, owner;

        snprintf(key, sizeof(key), "{v:%lld}", (long long)id);
        slot = redis_key_slot_str(key);
        owner = m->nodes[m->slot_node[slot]].port;
        if (owner != victim && among_lowest(m, owner, slot, FAULT_MOVE_SLOTS)) {
            v[1] = id;
            src = owner;
        }
    }
    assert_true(v[0] && v[1]);
    snprintf(key, sizeof(key), "{v:%lld}", (long long)v[0]);
    kill_slot = redis_key_slot_str(key);
    for (int k = 0; k < 2; k++)
        snprintf(paths[k], sizeof(paths[k]), "/api/vouchers/%lld/seckill",
                 (long long)v[k]);
    for (size_t u = 0; u < FAULT_USERS; u++)
        it_token(user_base + (int64_t)u, TOKEN_ROLE_USER, 3600, tokens[u]);
    for (size_t i = 0; i < FAULT_REQUESTS; i++) {
        size_t u = i % FAULT_USERS;

        reqs[i].method = "POST";
        reqs[i].path = paths[u % 2];
        reqs[i].token = tokens[u];
        to[i] = srv;
    }
    {
        /* The victim's replica has its copy before the kill. */
        redisContext *rc = direct(victim);
        redisReply *r = cmd(rc, "WAIT 1 10000");

        assert_int_equal(1, r->integer);
        freeReplyObject(r);
        redisFree(rc);
    }
    for (size_t w = 0; w * FAULT_WAVE < FAULT_REQUESTS; w++) {
        if (w == 2) {
            print_message("killing primary %u (voucher %lld's slot %u)\n",
                          victim, (long long)v[0], kill_slot);
            assert_int_equal(0, kill(node_pid(victim), SIGKILL));
        }
        if (w == 6) {
            int64_t t0 = util_mono_ms();
            unsigned now[3];

            while (owner_of(kill_slot) == victim) {
                assert_true(util_mono_ms() - t0 < FAILOVER_BUDGET_MS);
                usleep(100 * 1000);
            }
            assert_int_equal(0,
                             system("scripts/redis-cluster.sh up >/dev/null"));
            primaries(now);
            job.from = src;
            for (int i = 0; i < 3; i++)
                if (now[i] != src)
                    job.to = now[i];
            print_message("resharding %u slots from %u to %u\n",
                          FAULT_MOVE_SLOTS, job.from, job.to);
            assert_int_equal(
                0, pthread_create(&reshard, NULL, reshard_main, &job));
            resharding = true;
        }
        it_http_run_all(reqs + w * FAULT_WAVE, to + w * FAULT_WAVE,
                        resps + w * FAULT_WAVE, FAULT_WAVE);
    }
    if (resharding)
        pthread_join(reshard, NULL);
    assert_int_equal(0, job.status);

    for (size_t i = 0; i < FAULT_REQUESTS; i++) {
        struct it_resp *r = &resps[i];
        size_t u = i % FAULT_USERS;
        const char *code;

        assert_int_equal(CURLE_OK, r->curl_rc);
        if (r->status == ok_status) {
            int64_t id = it_json_id(r->json, "orderId");

            /* One order a user: a second success would be a second
             * order. */
            assert_int_equal(0, said[u]);
            said[u] = id;
            n201++;
            continue;
        }
        code = it_json_str(json_object_get(r->json, "error"), "code");
        if (!code)
            fail_msg("request %zu: status %ld without an error code", i,
                     r->status);
        if (r->status == 409 && strcmp(code, "SOLD_OUT") == 0)
            n_sold++;
        else if (r->status == 409 && strcmp(code, "ALREADY_PURCHASED") == 0)
            n_dup++;
        else if (r->status == 429 && strcmp(code, "BUSY") == 0)
            n_busy++;
        else if (r->status == 503 && strcmp(code, "UNAVAILABLE") == 0) {
            const char *msg =
                it_json_str(json_object_get(r->json, "error"), "message");

            n_503++;
            if (async && msg && strstr(msg, "unknown"))
                unknown[u] = true;
        } else
            fail_msg("request %zu: %ld %s", i, r->status, code);
    }
    print_message("%ld: %zu, SOLD_OUT: %zu, ALREADY_PURCHASED: %zu, BUSY: "
                  "%zu, 503: %zu; redirections moved %lld ask %lld\n",
                  ok_status, n201, n_sold, n_dup, n_busy, n_503,
                  redirections(srv, "moved") - moved0,
                  redirections(srv, "ask") - ask0);
    for (int k = 0; async && k < 2; k++) {
        assert_drained(v[k]);
        assert_int_equal(
            it_sql_stock(v[k]),
            node_int(voucher_owner(v[k]), "GET {v:%lld}:stock", v[k]));
    }
    for (int k = 0; k < 2; k++) {
        int64_t stock = it_sql_stock(v[k]);

        assert_true(stock >= 0);
        assert_int_equal(stock0[k] - stock, it_sql_order_count(v[k]));
        assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT "
                                          "user_id FROM voucher_orders WHERE "
                                          "voucher_id = %lld GROUP BY user_id "
                                          "HAVING COUNT(*) > 1) d",
                                          (long long)v[k]));
    }
    if (!async)
        assert_int_equal(0, it_sql_stock(v[0])); /* it sold out */
    for (size_t u = 0; u < FAULT_USERS; u++) {
        long long uid = (long long)(user_base + (int64_t)u);
        long long vid = (long long)v[u % 2];

        if (said[u])
            assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM "
                                              "voucher_orders WHERE id = %lld "
                                              "AND user_id = %lld AND "
                                              "voucher_id = %lld",
                                              (long long)said[u], uid, vid));
        else if (!unknown[u])
            assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM "
                                              "voucher_orders WHERE user_id = "
                                              "%lld AND voucher_id = %lld",
                                              uid, vid));
    }
    for (size_t i = 0; i < FAULT_REQUESTS; i++)
        it_resp_free(&resps[i]);
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
    free(said);
    free(unknown);
    free(m);
}

static void test_service_sale_through_faults(void **state)
{
    (void)state;
    sale_through_faults(&srvs[SRV_CROWD], false);
}

static void test_service_async_sale_through_faults(void **state)
{
    (void)state;
    sale_through_faults(&srvs[SRV_ASYNC], true);
}

/* ---- an async sale while its slot moves ---- */

/* Users of the crowd (one purchase each) and the sale's stock, which
 * never runs out; purchases made before the move, so that every key of
 * the sale exists but the one that never does (frozen); how long the
 * slot stays half moved under the crowd before the move is finished. */
#define MOVING_USERS 300
#define MOVING_STOCK 1000
#define MOVING_FIRST 20
#define MOVING_HOLD_MS 2500
#define MOVING_USER_BASE 900000000000LL

/* Where a slot this test is moving is written down ("slot home-port"),
 * so that a run that died mid-move is undone by the next one. */
static void moving_note_path(char *buf, size_t cap)
{
    const char *run = getenv("SECKILL_RUN_DIR");

    snprintf(buf, cap, "%s/redis-cluster/slot-moving-by-test",
             run && *run ? run : ".run");
}

/* The own line of CLUSTER NODES of the node on port (free(3) it). */
static char *myself_line(unsigned port)
{
    redisContext *rc = direct(port);
    redisReply *r = cmd(rc, "CLUSTER NODES");
    char *line = NULL;

    for (char *at = r->type == REDIS_REPLY_STRING ? r->str : NULL; at && *at;) {
        char *end = strchr(at, '\n');
        size_t len = end ? (size_t)(end - at) : strlen(at);

        if (memmem(at, len, "myself", 6)) {
            line = xcalloc(1, len + 1);
            memcpy(line, at, len);
            break;
        }
        at = end ? end + 1 : NULL;
    }
    freeReplyObject(r);
    redisFree(rc);
    assert_non_null(line);
    return line;
}

/* Whether the node on port answers PING. */
static bool node_answers(unsigned port)
{
    redisContext *rc =
        redisConnectWithTimeout("127.0.0.1", (int)port, (struct timeval){1, 0});
    redisReply *r = rc && !rc->err ? redisCommand(rc, "PING") : NULL;
    bool up = r && r->type == REDIS_REPLY_STATUS;

    freeReplyObject(r);
    redisFree(rc);
    return up;
}

/* The port of the primary that holds slot by its own account (the slots
 * of its own line of CLUSTER NODES; a replica may not know of a move
 * yet), 0 when none does. */
static unsigned slot_holder(unsigned slot)
{
    unsigned prim[3];

    primaries(prim);
    for (int i = 0; i < 3; i++) {
        char *line = myself_line(prim[i]), *save = NULL;
        bool holds = false;
        int field = 0;

        for (char *t = strtok_r(line, " \r", &save); t && !holds;
             t = strtok_r(NULL, " \r", &save)) {
            unsigned lo, hi;
            int n;

            /* id addr flags master ping pong epoch state, then slots */
            if (field++ < 8 || t[0] == '[')
                continue;
            n = sscanf(t, "%u-%u", &lo, &hi);
            if (n == 1)
                hi = lo;
            holds = n >= 1 && lo <= slot && slot <= hi;
        }
        free(line);
        if (holds)
            return prim[i];
    }
    return 0;
}

/* The port of the node whose id is id (asserts). */
static unsigned port_of_id(const char *id)
{
    for (unsigned p = base_port; p < base_port + NODES; p++) {
        redisContext *rc = redisConnectWithTimeout("127.0.0.1", (int)p,
                                                   (struct timeval){1, 0});
        redisReply *r =
            rc && !rc->err ? redisCommand(rc, "CLUSTER MYID") : NULL;
        bool it = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, id) == 0;

        freeReplyObject(r);
        redisFree(rc);
        if (it)
            return p;
    }
    fail_msg("no node answers with id %s", id);
    return 0;
}

/*
 * Put slot back on the primary at home, whatever state a move left it
 * in: a move still open (a primary MIGRATING it) is finished first, a
 * node still IMPORTING it without a migration is made stable, and then
 * the slot is given back to home with its keys.
 */
static void slot_bring_home(unsigned slot, unsigned home)
{
    unsigned prim[3], owner;
    char mark[32];
    int64_t t0 = util_mono_ms();

    /* After a kill, the cluster first promotes the replica. */
    while (!node_answers(owner_of(slot))) {
        assert_true(util_mono_ms() - t0 < FAILOVER_BUDGET_MS);
        usleep(100 * 1000);
    }
    primaries(prim);
    for (int i = 0; i < 3; i++) {
        char *line = myself_line(prim[i]), *at;

        snprintf(mark, sizeof(mark), "[%u->-", slot);
        if ((at = strstr(line, mark))) {
            char to[41] = "";

            memcpy(to, at + strlen(mark), 40);
            slot_give(slot, prim[i], port_of_id(to), prim);
        }
        free(line);
    }
    for (int i = 0; i < 3; i++) {
        char *line = myself_line(prim[i]);

        snprintf(mark, sizeof(mark), "[%u-<-", slot);
        if (strstr(line, mark)) {
            redisContext *rc = direct(prim[i]);

            freeReplyObject(cmd(rc, "CLUSTER SETSLOT %u STABLE", slot));
            redisFree(rc);
        }
        free(line);
    }
    owner = slot_holder(slot);
    assert_int_not_equal(0, owner);
    if (owner != home)
        slot_give(slot, owner, home, prim);
    assert_int_equal(home, slot_holder(slot));
}

/* Undo what a run that died mid-move left (see moving_note_path()). */
static void moving_undo(void)
{
    char path[512];
    unsigned slot, home;
    FILE *f;

    moving_note_path(path, sizeof(path));
    f = fopen(path, "r");
    if (!f)
        return;
    if (fscanf(f, "%u %u", &slot, &home) == 2) {
        print_message("giving slot %u back to %u\n", slot, home);
        slot_bring_home(slot, home);
    }
    fclose(f);
    unlink(path);
}

static int moving_teardown(void **state)
{
    (void)state;
    moving_undo();
    return 0;
}

/* The end of a move, from another thread while the crowd buys: the
 * slot given to the importing node on every primary, the importer
 * first, the node giving it away last. */
struct move_end {
    unsigned slot, ports[3]; /* the importer, the third, the giver */
    char to_id[41];
    int failed; /* commands not answered +OK */
};

static void *move_end_main(void *arg)
{
    struct move_end *m = arg;

    usleep(MOVING_HOLD_MS * 1000);
    for (int i = 0; i < 3; i++) {
        redisContext *rc = redisConnectWithTimeout(
            "127.0.0.1", (int)m->ports[i], (struct timeval){5, 0});
        redisReply *r = rc && !rc->err
                            ? redisCommand(rc, "CLUSTER SETSLOT %u NODE %s",
                                           m->slot, m->to_id)
                            : NULL;

        m->failed += !r || r->type != REDIS_REPLY_STATUS;
        freeReplyObject(r);
        redisFree(rc);
    }
    return NULL;
}

/*
 * An async sale while its {v:ID} slot moves to another primary: the
 * slot MIGRATING on its owner and IMPORTING at the other, every key of
 * the sale already moved (the owner answers ASK), and the one key the
 * purchase script names that never exists (frozen) at neither node, so
 * that the script is refused everywhere (TRYAGAIN) until the move ends.
 * A crowd buys meanwhile, and the move is finished under it. A refusal
 * ran nothing: no answer may say the outcome is unknown; purchases wait
 * the move out within their budget (202s once it ended). Then the
 * primary that took the slot is killed (its replica takes over), and
 * once the writers have drained the sale, every 202 is its user's order
 * in MySQL: each was confirmed by the replicas of the node that ran it.
 */
static void test_service_async_slot_moving(void **state)
{
    const struct it_server *srv = &srvs[SRV_ASYNC];
    struct it_req *reqs = xcalloc(MOVING_USERS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(MOVING_USERS, sizeof(*resps));
    const struct it_server **to = xcalloc(MOVING_USERS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(MOVING_USERS, sizeof(*tokens));
    int64_t *said = xcalloc(MOVING_USERS + MOVING_FIRST, sizeof(*said));
    int64_t user_base, v, stock;
    unsigned prim[3], slot, from, dest;
    size_t n202 = 0, n_unknown = 0, n_retry = 0, n_busy = 0;
    char key[64], path[96], note[512], from_id[41];
    struct move_end end = {0};
    pthread_t ender;
    redisContext *ra, *rb;
    FILE *f;

    (void)state;
    moving_undo();
    user_base = MOVING_USER_BASE + util_now_ms() % 100000000 * 1000;
    primaries(prim);
    replicas_wait(prim);
    usleep(2500 * 1000); /* the writer's look at the replicas */
    v = it_seckill_create(srv, it_unique(), MOVING_STOCK, -60, 3600);
    snprintf(key, sizeof(key), "{v:%lld}", (long long)v);
    slot = redis_key_slot_str(key);
    from = owner_of(slot);
    dest = prim[0] == from ? prim[1] : prim[0];
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (int i = 0; i < MOVING_FIRST; i++) {
        struct it_resp r;

        assert_int_equal(202,
                         it_purchase(srv, v, user_base + MOVING_USERS + i, &r));
        said[MOVING_USERS + i] = it_json_id(r.json, "orderId");
        it_resp_free(&r);
    }

    /* Half moved: every key of the slot at dest, the slot still from's. */
    moving_note_path(note, sizeof(note));
    f = fopen(note, "w");
    assert_non_null(f);
    fprintf(f, "%u %u\n", slot, from);
    fclose(f);
    node_id(from, from_id);
    node_id(dest, end.to_id);
    ra = direct(from);
    rb = direct(dest);
    freeReplyObject(cmd(rb, "CLUSTER SETSLOT %u IMPORTING %s", slot, from_id));
    freeReplyObject(
        cmd(ra, "CLUSTER SETSLOT %u MIGRATING %s", slot, end.to_id));
    for (;;) {
        redisReply *r = cmd(ra, "CLUSTER GETKEYSINSLOT %u 100", slot);
        size_t n = r->elements;

        for (size_t i = 0; i < n; i++) {
            redisReply *m = cmd(ra, "MIGRATE 127.0.0.1 %u %s 0 5000", dest,
                                r->element[i]->str);

            assert_int_equal(REDIS_REPLY_STATUS, m->type);
            freeReplyObject(m);
        }
        freeReplyObject(r);
        if (n == 0)
            break;
    }
    redisFree(ra);
    redisFree(rb);
    print_message("slot %u of voucher %lld half moved from %u to %u\n", slot,
                  (long long)v, from, dest);

    for (size_t u = 0; u < MOVING_USERS; u++) {
        it_token(user_base + (int64_t)u, TOKEN_ROLE_USER, 3600, tokens[u]);
        reqs[u].method = "POST";
        reqs[u].path = path;
        reqs[u].token = tokens[u];
        to[u] = srv;
    }
    end.slot = slot;
    end.ports[0] = dest;
    end.ports[2] = from;
    for (int i = 0; i < 3; i++)
        if (prim[i] != from && prim[i] != dest)
            end.ports[1] = prim[i];
    assert_int_equal(0, pthread_create(&ender, NULL, move_end_main, &end));
    it_http_run_all(reqs, to, resps, MOVING_USERS);
    pthread_join(ender, NULL);
    assert_int_equal(0, end.failed);
    assert_int_equal(dest, slot_holder(slot));

    for (size_t u = 0; u < MOVING_USERS; u++) {
        struct it_resp *r = &resps[u];
        const json_t *e = json_object_get(r->json, "error");
        const char *code = it_json_str(e, "code");
        const char *msg = it_json_str(e, "message");

        assert_int_equal(CURLE_OK, r->curl_rc);
        if (r->status == 202) {
            said[u] = it_json_id(r->json, "orderId");
            n202++;
        } else if (r->status == 503 && code &&
                   strcmp(code, "UNAVAILABLE") == 0) {
            if (msg && strstr(msg, "unknown"))
                n_unknown++;
            else
                n_retry++;
        } else if (r->status == 429 && code && strcmp(code, "BUSY") == 0) {
            n_busy++;
        } else {
            fail_msg("request %zu: %ld %s", u, r->status,
                     r->body ? r->body : "");
        }
    }
    print_message("202: %zu, 503 outcome unknown: %zu, 503 retry: %zu, "
                  "BUSY: %zu\n",
                  n202, n_unknown, n_retry, n_busy);
    assert_int_equal(0, n_unknown);
    assert_true(n202 > 0);

    /* The primary that took the slot dies; its replica takes over. */
    print_message("killing primary %u, the slot's new owner\n", dest);
    assert_int_equal(0, kill(node_pid(dest), SIGKILL));
    {
        int64_t t0 = util_mono_ms();

        while (owner_of(slot) == dest) {
            assert_true(util_mono_ms() - t0 < FAILOVER_BUDGET_MS);
            usleep(100 * 1000);
        }
    }
    assert_int_equal(0, system("scripts/redis-cluster.sh up >/dev/null"));
    assert_drained(v);
    stock = it_sql_stock(v);
    assert_int_equal(MOVING_STOCK - stock, it_sql_order_count(v));
    assert_int_equal(stock,
                     node_int(voucher_owner(v), "GET {v:%lld}:stock", v));
    for (size_t u = 0; u < MOVING_USERS + MOVING_FIRST; u++)
        if (said[u] &&
            it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE id = "
                          "%lld AND user_id = %lld AND voucher_id = %lld",
                          (long long)said[u],
                          (long long)(user_base + (int64_t)u),
                          (long long)v) != 1)
            fail_msg("the 202 of user %lld (order %lld) is not an order",
                     (long long)(user_base + (int64_t)u), (long long)said[u]);
    for (size_t u = 0; u < MOVING_USERS; u++)
        it_resp_free(&resps[u]);
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
    free(said);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes_to_every_primary),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_script_hash_tag),
        cmocka_unit_test(test_slot_moved),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_primary_killed),
    };

    const struct CMUnitTest service[] = {
        cmocka_unit_test(test_service_crowd),
        cmocka_unit_test(test_service_rate_all_or_none),
        cmocka_unit_test(test_service_notices_follow_slot),
        cmocka_unit_test(test_service_async_crowd),
        cmocka_unit_test(test_service_logout_spreads),
        cmocka_unit_test(test_service_sale_through_faults),
        cmocka_unit_test(test_service_async_sale_through_faults),
        cmocka_unit_test_teardown(test_service_async_slot_moving,
                                  moving_teardown),
    };
    const char *filter = getenv("SECKILL_IT_FILTER");
    int failed;

    /* SECKILL_IT_FILTER=test_x runs the tests whose names match. */
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    ports_init();
    signal(SIGPIPE, SIG_IGN);
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("service on the cluster", service,
                                          service_setup, service_teardown);
    return it_exit_status(failed);
}
