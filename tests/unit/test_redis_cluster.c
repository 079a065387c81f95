/*
 * test_redis_cluster.c - the parts of the Redis Cluster routing
 * (common/redis_cluster.h) that need no cluster: the slot map read from a
 * CLUSTER SHARDS reply recorded on a real Redis 7.0 cluster, the text of
 * MOVED/ASK/TRYAGAIN replies, the order a batch is sent in, and the
 * redis-cluster:// URL.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/redis.h"
#include "common/redis_cluster.h"
#include "common/url.h"

/*
 * CLUSTER SHARDS as a three-primary, three-replica cluster on loopback
 * (scripts/redis-cluster.sh) answered it in RESP2, after slot 0 was
 * moved from the first primary to the second with redis-cli --cluster
 * reshard: the second primary owns two ranges.
 */
static const char recorded_shards[] =
    "*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:1\r\n:5460\r\n$5\r\nnodes\r\n"
    "*2\r\n*14\r\n$2\r\nid\r\n$40\r\n"
    "b1dcfe8eb492f5ff82b265978cbd25fac00b3a2b\r\n$4\r\nport\r\n"
    ":47001\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n"
    "4e69dabada696f285c6b1f84809ead7be6ee978d\r\n$4\r\nport\r\n"
    ":47004\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*4\r\n:0\r\n:0\r\n:5461\r\n:10922\r\n$5\r\n"
    "nodes\r\n*2\r\n*14\r\n$2\r\nid\r\n$40\r\n"
    "4d164efd733e891fa83557743d13227800e0cd52\r\n$4\r\nport\r\n"
    ":47002\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n"
    "6aeec4c2fb69838c9d6b7cc09209a6cae6fa117b\r\n$4\r\nport\r\n"
    ":47005\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n"
    "*2\r\n*14\r\n$2\r\nid\r\n$40\r\n"
    "9cefbe273d7d78d0852c83f206b00b95ad6eab5c\r\n$4\r\nport\r\n"
    ":47003\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$18\r\n"
    "replication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n"
    "ee68253c2be257ae83e08ce08843fcaca9256bab\r\n$4\r\nport\r\n"
    ":47006\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n"
    "127.0.0.1\r\n$4\r\nrole\r\n$7\r\nreplica\r\n$18\r\n"
    "replication-offset\r\n:14\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

/* The reply tree of RESP text, as hiredis reads it off a connection. */
static redisReply *resp(const char *text, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;

    assert_int_equal(REDIS_OK, redisReaderFeed(rd, text, len));
    assert_int_equal(REDIS_OK, redisReaderGetReply(rd, &r));
    assert_non_null(r);
    redisReaderFree(rd);
    return r;
}

static struct redis_cluster_map *map_of(const char *text, size_t len, int want)
{
    struct redis_cluster_map *m = calloc(1, sizeof(*m));
    redisReply *r = resp(text, len);
    char err[160] = "";

    assert_int_equal(want, redis_cluster_map_parse(r, m, err, sizeof(err)));
    if (want)
        assert_true(err[0] != '\0');
    freeReplyObject(r);
    return m;
}

/* The port of slot's owner in m, 0 when none. */
static unsigned owner_port(const struct redis_cluster_map *m, unsigned slot)
{
    uint16_t n = m->slot_node[slot];

    return n == REDIS_CLUSTER_NO_NODE ? 0 : m->nodes[n].port;
}

static void test_recorded_map(void **state)
{
    struct redis_cluster_map *m =
        map_of(recorded_shards, sizeof(recorded_shards) - 1, 0);

    (void)state;
    /* Only the primaries are nodes of the map; replicas take nothing. */
    assert_int_equal(3, m->nnodes);
    for (int i = 0; i < m->nnodes; i++) {
        assert_string_equal("127.0.0.1", m->nodes[i].host);
        assert_true(m->nodes[i].port >= 47001 && m->nodes[i].port <= 47003);
    }
    assert_int_equal(47002, owner_port(m, 0));
    assert_int_equal(47001, owner_port(m, 1));
    assert_int_equal(47001, owner_port(m, 5460));
    assert_int_equal(47002, owner_port(m, 5461));
    assert_int_equal(47002, owner_port(m, 10922));
    assert_int_equal(47003, owner_port(m, 10923));
    assert_int_equal(47003, owner_port(m, 16383));
    /* Every slot has an owner: the map covers the cluster. */
    for (unsigned s = 0; s < REDIS_SLOTS; s++)
        assert_int_not_equal(REDIS_CLUSTER_NO_NODE, m->slot_node[s]);
    /* A key's slot, then its owner (redis_slot.h: "foo" is 12182). */
    assert_int_equal(47003, owner_port(m, redis_key_slot_str("foo")));
    assert_int_equal(47001, owner_port(m, redis_key_slot_str("hello")));
    free(m);
}

/* One shard: slots lo..hi, then the nodes given as RESP text. */
#define SHARD(lo, hi, nnodes, nodes)                                           \
    "*4\r\n$5\r\nslots\r\n*2\r\n:" #lo "\r\n:" #hi "\r\n$5\r\nnodes\r\n"       \
    "*" #nnodes "\r\n" nodes
/* A node of a shard with the fields the parser reads. */
#define NODE(endpoint, ip, port, role, health)                                 \
    "*10\r\n$8\r\nendpoint\r\n$" endpoint "\r\n$2\r\nip\r\n$" ip               \
    "\r\n$4\r\nport\r\n:" #port "\r\n$4\r\nrole\r\n$" role                     \
    "\r\n$6\r\nhealth\r\n$" health "\r\n"

static void test_map_shapes(void **state)
{
    /* Mid-failover: the old primary (failed) and the promoted one are
     * both "master"; the online one is routed to. The endpoint "?" is
     * not an address: the ip is. A shard without a primary owns nothing
     * in the map. */
    static const char failover[] = "*3\r\n" SHARD(
        0, 99, 2,
        NODE("8\r\n10.0.0.1", "8\r\n10.0.0.1", 7001, "6\r\nmaster", "4\r\nfail")
            NODE("8\r\n10.0.0.4", "8\r\n10.0.0.4", 7004, "6\r\nmaster",
                 "6\r\nonline")) SHARD(100, 16383, 1,
                                       NODE("1\r\n?", "8\r\n10.0.0.2", 7002,
                                            "6\r\nmaster", "6\r\nonline"))
        SHARD(0, 0, 1,
              NODE("8\r\n10.0.0.3", "8\r\n10.0.0.3", 7003, "7\r\nreplica",
                   "6\r\nonline"));
    struct redis_cluster_map *m;

    (void)state;
    /* The third shard's slots overlap the first's; with no primary it
     * must not take slot 0. */
    m = map_of(failover, sizeof(failover) - 1, 0);
    assert_int_equal(2, m->nnodes);
    assert_int_equal(7004, owner_port(m, 0));
    assert_string_equal("10.0.0.4", m->nodes[m->slot_node[0]].host);
    assert_int_equal(7002, owner_port(m, 100));
    assert_string_equal("10.0.0.2", m->nodes[m->slot_node[100]].host);
    free(m);

    /* A cluster being set up: no slots assigned yet. */
    m = map_of("*0\r\n", 4, 0);
    assert_int_equal(0, m->nnodes);
    assert_int_equal(0, owner_port(m, 0));
    free(m);

    /* Not a map. */
    free(map_of("-ERR unknown command 'CLUSTER SHARDS'\r\n", 39, -EINVAL));
    free(map_of(":1\r\n", 4, -EINVAL));
    free(map_of("*1\r\n*2\r\n$5\r\nnodes\r\n*0\r\n", 23, -EINVAL));
    /* A slot past 16383. */
    {
        static const char bad[] = "*1\r\n" SHARD(
            0, 16384, 1,
            NODE("1\r\nh", "1\r\nh", 1, "6\r\nmaster", "6\r\nonline"));
        free(map_of(bad, sizeof(bad) - 1, -EINVAL));
    }
}

static void test_redirect_text(void **state)
{
    struct redis_cluster_redirect rd;

    (void)state;
    assert_int_equal(
        REDIS_CLUSTER_MOVED,
        redis_cluster_redirect_parse("MOVED 3999 127.0.0.1:6381", &rd));
    assert_int_equal(3999, rd.slot);
    assert_string_equal("127.0.0.1", rd.host);
    assert_int_equal(6381, rd.port);

    assert_int_equal(REDIS_CLUSTER_ASK, redis_cluster_redirect_parse(
                                            "ASK 0 node-b.local:7002", &rd));
    assert_int_equal(0, rd.slot);
    assert_string_equal("node-b.local", rd.host);
    assert_int_equal(7002, rd.port);

    /* An IPv6 address keeps its colons: the port is after the last. */
    assert_int_equal(REDIS_CLUSTER_MOVED,
                     redis_cluster_redirect_parse("MOVED 16383 ::1:7003", &rd));
    assert_string_equal("::1", rd.host);
    assert_int_equal(7003, rd.port);
    assert_int_equal(16383, rd.slot);

    /* A node that does not know its address sends none: "" means the
     * host the command was sent to. */
    assert_int_equal(REDIS_CLUSTER_MOVED,
                     redis_cluster_redirect_parse("MOVED 5 :7001", &rd));
    assert_string_equal("", rd.host);
    assert_int_equal(7001, rd.port);

    assert_int_equal(
        REDIS_CLUSTER_TRYAGAIN,
        redis_cluster_redirect_parse(
            "TRYAGAIN Multiple keys request during rehashing of slot", &rd));
    assert_int_equal(
        REDIS_CLUSTER_TRYAGAIN,
        redis_cluster_redirect_parse("CLUSTERDOWN The cluster is down", &rd));

    /* Anything else, and malformed redirections, are plain errors. */
    static const char *const plain[] = {
        "ERR wrong number of arguments",
        "NOSCRIPT No matching script",
        "CROSSSLOT Keys in request don't hash to the same slot",
        "MOVED",
        "MOVED ",
        "MOVED x 127.0.0.1:1",
        "MOVED 16384 127.0.0.1:1",
        "MOVED 1 127.0.0.1",
        "MOVED 1 127.0.0.1:0",
        "MOVED 1 127.0.0.1:65536",
        "MOVED 1 127.0.0.1:1x",
        "MOVED -1 127.0.0.1:1",
        "ASK 1  127.0.0.1:1 ",
        "MOVEDX 1 h:1",
    };
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        if (redis_cluster_redirect_parse(plain[i], &rd) !=
            REDIS_CLUSTER_NOT_REDIRECT)
            fail_msg("\"%s\" read as a redirection", plain[i]);
}

static void test_batch_order(void **state)
{
    /* Nodes of a batch of nine, as the slot map names them. */
    static const uint16_t node[] = {
        2, 0, 2, 1, 0, 0, 2, 1, REDIS_CLUSTER_NO_NODE};
    static const size_t want[] = {0, 2, 6, 1, 4, 5, 3, 7, 8};
    size_t order[9];

    (void)state;
    redis_cluster_batch_order(node, 9, order);
    for (size_t i = 0; i < 9; i++)
        assert_int_equal(want[i], order[i]);
    /* Every position once. */
    {
        int seen[9] = {0};
        for (size_t i = 0; i < 9; i++)
            seen[order[i]]++;
        for (size_t i = 0; i < 9; i++)
            assert_int_equal(1, seen[i]);
    }
    redis_cluster_batch_order(node, 0, order);
}

static void test_cluster_url(void **state)
{
    struct url u;
    struct redis_server s;
    char err[160];

    (void)state;
    assert_int_equal(0, url_parse("redis-cluster://app:p%40ss@h1:7001,h2,"
                                  "[::1]:7003?timeout_ms=200",
                                  &u, err, sizeof(err)));
    assert_int_equal(3, u.nhosts);
    for (int i = 0; i < 3; i++) {
        static const char *const host[] = {"h1", "h2", "::1"};
        static const unsigned port[] = {7001, 6379, 7003};

        assert_int_equal(0, redis_server_from_url(&u, i, &s, err, sizeof(err)));
        assert_string_equal(host[i], s.host);
        assert_int_equal(port[i], s.port);
        assert_string_equal("app", s.user);
        assert_string_equal("p@ss", s.pass);
        assert_int_equal(0, s.db);
        assert_null(s.sentinel);
    }
    assert_int_equal(-EINVAL,
                     redis_server_from_url(&u, 3, &s, err, sizeof(err)));
    /* A trailing '/' names nothing; a database number is refused with a
     * reason that says why. */
    assert_int_equal(0, url_parse("redis-cluster://h1/", &u, err, sizeof(err)));
    assert_int_equal(0, redis_server_from_url(&u, 0, &s, err, sizeof(err)));
    static const char *const bad[] = {
        "redis-cluster://h1:7001,h2:7002/0",
        "redis-cluster://h1/1",
        "redis-cluster://h1/x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(0, url_parse(bad[i], &u, err, sizeof(err)));
        err[0] = '\0';
        assert_int_equal(-EINVAL,
                         redis_server_from_url(&u, 0, &s, err, sizeof(err)));
        assert_non_null(strstr(err, "only database 0"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_map),
        cmocka_unit_test(test_map_shapes),
        cmocka_unit_test(test_redirect_text),
        cmocka_unit_test(test_batch_order),
        cmocka_unit_test(test_cluster_url),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
