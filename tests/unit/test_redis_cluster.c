/*
 * test_redis_cluster.c - the parts of the Redis Cluster routing
 * (common/redis_cluster.h) that need no cluster: the slot map read from a
 * CLUSTER SHARDS reply recorded on a real Redis 7.0 cluster, the text of
 * MOVED/ASK/TRYAGAIN replies, the order a batch is sent in, and the
 * redis-cluster:// URL. Then the client itself against fake nodes in
 * this process (loopback sockets that answer as a primary would): a WAIT
 * behind a script goes to the node that ran the script, wherever the
 * script was redirected; a script every node refuses (ASK then TRYAGAIN
 * while its slot moves) is sent again for the whole budget and reported
 * as refused, apart from a connection lost after the script was written.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "common/redis.h"
#include "common/redis_cluster.h"
#include "common/redis_link.h"
#include "common/url.h"
#include "common/util.h"

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

/* ---- the client against fake nodes ---- */

/* What a fake node answers to a script (EVALSHA or EVAL). */
enum fake_script {
    FAKE_RUN,      /* runs it: :1 */
    FAKE_ASK,      /* ASK to the node at to_port */
    FAKE_MOVED,    /* MOVED to the node at to_port */
    FAKE_TRYAGAIN, /* TRYAGAIN: its keys are split by a move */
    FAKE_CLOSE,    /* reads it and closes the connection */
};

#define FAKE_CONNS 8

/*
 * A primary on a loopback port of its own, served by a thread: PING,
 * SCRIPT LOAD, ASKING, and any other command (:1); WAIT with its
 * wait_reply (which node answered it); CLUSTER SHARDS names the node at
 * map_port as the owner of every slot (a map that may be stale); a
 * script is answered as script says.
 */
struct fake_node {
    int lfd;
    unsigned port;
    pthread_t thread;
    pthread_mutex_t mu;
    enum fake_script script;
    unsigned to_port, map_port;
    int wait_reply;
    int stop;
    int drop; /* close every connection now, as a restarted node would */
    /* Counted: */
    int ran;       /* scripts run */
    int refused;   /* scripts redirected or refused */
    int waits;     /* WAITs received */
    int waits_ran; /* of them, right behind a script it ran, on the same
                      connection */
};

static void fake_write(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);

        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void fake_say(int fd, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fake_write(fd, buf, (size_t)n);
}

/* CLUSTER SHARDS in RESP2: one shard of every slot, its primary at
 * 127.0.0.1:port. */
static void fake_shards(int fd, unsigned port)
{
    fake_say(fd,
             "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n"
             "$5\r\nnodes\r\n*1\r\n*10\r\n$8\r\nendpoint\r\n$9\r\n"
             "127.0.0.1\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nport\r\n"
             ":%u\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n"
             "$6\r\nonline\r\n",
             port);
}

/* One command c on connection fd; *ran: the previous command there was
 * a script this node ran (updated for the next). False: close fd. */
static bool fake_answer(struct fake_node *fk, int fd, const redisReply *c,
                        bool *ran)
{
    const char *name = c->type == REDIS_REPLY_ARRAY && c->elements > 0
                           ? c->element[0]->str
                           : "";
    bool was_ran = *ran;

    *ran = false;
    pthread_mutex_lock(&fk->mu);
    if (strncasecmp(name, "EVAL", 4) == 0) {
        /* The slot of the first key: EVAL[SHA] body numkeys key ... */
        unsigned slot =
            c->elements > 3 ? redis_key_slot_str(c->element[3]->str) : 0;

        switch (fk->script) {
        case FAKE_RUN:
            fk->ran++;
            *ran = true;
            fake_say(fd, ":1\r\n");
            break;
        case FAKE_ASK:
        case FAKE_MOVED:
            fk->refused++;
            fake_say(fd, "-%s %u 127.0.0.1:%u\r\n",
                     fk->script == FAKE_ASK ? "ASK" : "MOVED", slot,
                     fk->to_port);
            break;
        case FAKE_TRYAGAIN:
            fk->refused++;
            fake_say(fd, "-TRYAGAIN Multiple keys request during rehashing "
                         "of slot\r\n");
            break;
        case FAKE_CLOSE:
            pthread_mutex_unlock(&fk->mu);
            return false;
        }
    } else if (strcasecmp(name, "WAIT") == 0) {
        fk->waits++;
        fk->waits_ran += was_ran;
        fake_say(fd, ":%d\r\n", fk->wait_reply);
    } else if (strcasecmp(name, "PING") == 0) {
        fake_say(fd, "+PONG\r\n");
    } else if (strcasecmp(name, "ASKING") == 0) {
        fake_say(fd, "+OK\r\n");
    } else if (strcasecmp(name, "SCRIPT") == 0) {
        fake_say(fd, "$40\r\n0123456789012345678901234567890123456789\r\n");
    } else if (strcasecmp(name, "CLUSTER") == 0) {
        fake_shards(fd, fk->map_port);
    } else {
        fake_say(fd, ":1\r\n");
    }
    pthread_mutex_unlock(&fk->mu);
    return true;
}

static void *fake_main(void *arg)
{
    struct fake_node *fk = arg;
    int fd[FAKE_CONNS], n = 0;
    redisReader *rd[FAKE_CONNS];
    bool ran[FAKE_CONNS];

    for (;;) {
        struct pollfd p[FAKE_CONNS + 1];
        int stop;

        pthread_mutex_lock(&fk->mu);
        stop = fk->stop;
        if (fk->drop) {
            for (int i = 0; i < n; i++) {
                close(fd[i]);
                redisReaderFree(rd[i]);
            }
            n = 0;
            fk->drop = 0;
        }
        pthread_mutex_unlock(&fk->mu);
        if (stop)
            break;
        p[0] = (struct pollfd){.fd = fk->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++)
            p[i + 1] = (struct pollfd){.fd = fd[i], .events = POLLIN};
        if (poll(p, (nfds_t)n + 1, 20) <= 0)
            continue;
        for (int i = n - 1; i >= 0; i--) {
            char buf[4096];
            ssize_t got;
            void *cmd = NULL;
            bool keep = true;

            if (!(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            got = read(fd[i], buf, sizeof(buf));
            if (got > 0) {
                redisReaderFeed(rd[i], buf, (size_t)got);
                while (keep && redisReaderGetReply(rd[i], &cmd) == REDIS_OK &&
                       cmd) {
                    keep = fake_answer(fk, fd[i], cmd, &ran[i]);
                    freeReplyObject(cmd);
                    cmd = NULL;
                }
            }
            if (got <= 0 || !keep) {
                close(fd[i]);
                redisReaderFree(rd[i]);
                fd[i] = fd[n - 1];
                rd[i] = rd[n - 1];
                ran[i] = ran[n - 1];
                n--;
            }
        }
        if ((p[0].revents & POLLIN) && n < FAKE_CONNS) {
            fd[n] = accept(fk->lfd, NULL, NULL);
            if (fd[n] >= 0) {
                rd[n] = redisReaderCreate();
                ran[n++] = false;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        close(fd[i]);
        redisReaderFree(rd[i]);
    }
    return NULL;
}

static void fake_start(struct fake_node *fk, enum fake_script script)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);

    memset(fk, 0, sizeof(*fk));
    pthread_mutex_init(&fk->mu, NULL);
    fk->script = script;
    fk->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fk->lfd >= 0);
    assert_int_equal(0, bind(fk->lfd, (struct sockaddr *)&a, sizeof(a)));
    assert_int_equal(0, listen(fk->lfd, 8));
    assert_int_equal(0, getsockname(fk->lfd, (struct sockaddr *)&a, &len));
    fk->port = ntohs(a.sin_port);
    fk->map_port = fk->port;
    fk->wait_reply = 1;
    assert_int_equal(0, pthread_create(&fk->thread, NULL, fake_main, fk));
}

static void fake_stop(struct fake_node *fk)
{
    pthread_mutex_lock(&fk->mu);
    fk->stop = 1;
    pthread_mutex_unlock(&fk->mu);
    pthread_join(fk->thread, NULL);
    close(fk->lfd);
    pthread_mutex_destroy(&fk->mu);
}

/* A count of fk's, read under its lock. */
static int fake_count(struct fake_node *fk, const int *v)
{
    int n;

    pthread_mutex_lock(&fk->mu);
    n = *v;
    pthread_mutex_unlock(&fk->mu);
    return n;
}

/* A client whose only seed is the node at port. */
static struct redis_cluster *fake_client(unsigned port)
{
    struct redis_server seed = {.host = "127.0.0.1", .port = port};

    return redis_cluster_new(&seed, 1, 1000, 1000, "unit");
}

static struct redis_script fake_script = REDIS_SCRIPT("return 1");

/*
 * A purchase's round trip on a cluster: the script on its key's slot,
 * then an SADD elsewhere and a WAIT about the script. Node A owns the
 * slot in every node's map (a map still stale) but sends the script to
 * B (MOVED, or ASK during a move), which runs it. The WAIT that answers
 * must be B's, asked on the connection that ran the script: B's replicas
 * are the ones that must have the write, and WAIT counts those that have
 * its own connection's writes. (A, asked for its replicas, would say 5:
 * a WAIT that rode behind the script to A is dropped with A's refusal.)
 */
static void wait_follows(enum fake_script redirect)
{
    struct fake_node a, b;
    struct redis_link l = {.budget_ms = 2000};
    const char *argv[] = {"{v:1}:info", "x"};
    const char *then_keys[] = {"idx", NULL};
    char *then[2];
    redisReply *r, *then_r[2];
    int err;

    fake_start(&a, redirect);
    fake_start(&b, FAKE_RUN);
    a.to_port = b.port;
    a.wait_reply = 5;
    b.map_port = a.port;
    l.cluster = fake_client(a.port);
    assert_true(redisFormatCommand(&then[0], "SADD idx 1") > 0);
    assert_true(redisFormatCommand(&then[1], "WAIT 1 100") > 0);
    r = redis_link_script_then(&l, &fake_script, 1, 2, argv, NULL,
                               (const char *const *)then, then_keys, 2, then_r,
                               0, &err);
    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    assert_int_equal(1, fake_count(&b, &b.ran));
    assert_int_equal(0, fake_count(&a, &a.ran));
    assert_non_null(then_r[1]);
    assert_int_equal(REDIS_REPLY_INTEGER, then_r[1]->type);
    if (then_r[1]->integer != 1 || fake_count(&b, &b.waits_ran) != 1)
        fail_msg("the WAIT answered %lld: asked of the node the map names "
                 "(%d WAITs there), not on the connection that ran the "
                 "script (%d WAITs right behind it)",
                 then_r[1]->integer, fake_count(&a, &a.waits),
                 fake_count(&b, &b.waits_ran));
    freeReplyObject(r);
    for (int i = 0; i < 2; i++) {
        freeReplyObject(then_r[i]);
        redisFreeCommand(then[i]);
    }
    redis_cluster_free(l.cluster);
    fake_stop(&a);
    fake_stop(&b);
}

static void test_wait_follows_moved(void **state)
{
    (void)state;
    wait_follows(FAKE_MOVED);
}

static void test_wait_follows_ask(void **state)
{
    (void)state;
    wait_follows(FAKE_ASK);
}

/*
 * A slot in the middle of a move: its owner A sends the script to B
 * (ASK: the keys it has are gone), and B refuses it (TRYAGAIN: a key the
 * script names is at neither, so its keys are split), again and again.
 * Nothing ran: the script is sent again, with pauses, for the whole
 * budget, then reported refused (-EAGAIN), not as a failure whose
 * outcome is unknown. The same when only the owner answers TRYAGAIN.
 */
static void test_refused_while_moving(void **state)
{
    const char *argv[] = {"{v:1}:info", "x"};
    enum { BUDGET_MS = 1500 };

    (void)state;
    for (int ask = 1; ask >= 0; ask--) {
        struct fake_node a, b;
        struct redis_cluster *c;
        redisReply *r;
        int64_t t0;
        int err = 0;

        fake_start(&a, ask ? FAKE_ASK : FAKE_TRYAGAIN);
        fake_start(&b, FAKE_TRYAGAIN);
        a.to_port = b.port;
        b.map_port = a.port;
        c = fake_client(a.port);
        t0 = util_mono_ms();
        r = redis_cluster_script_run(c, &fake_script, 1, 2, argv, NULL,
                                     BUDGET_MS, &err);
        if (r)
            fail_msg("a refused script answered: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str : "a reply");
        if (err != -EAGAIN)
            fail_msg("%s: a refused script failed with %d (%s) after %lld ms",
                     ask ? "ASK then TRYAGAIN" : "TRYAGAIN", err,
                     strerror(-err), (long long)(util_mono_ms() - t0));
        assert_true(util_mono_ms() - t0 >= BUDGET_MS - 5);
        assert_true(fake_count(&a, &a.refused) > (ask ? 16 : 2));
        assert_int_equal(0, fake_count(&a, &a.ran) + fake_count(&b, &b.ran));
        redis_cluster_free(c);
        fake_stop(&a);
        fake_stop(&b);
    }
}

/*
 * What a failed script tells its caller: -ENOTCONN when its slot's owner
 * could not be reached (nothing was written), -ECONNRESET when the
 * connection broke after it was written (it may have run).
 */
static void test_unsent_or_lost(void **state)
{
    const char *argv[] = {"{v:1}:info", "x"};
    struct fake_node a, gone;
    struct redis_cluster *c;
    redisReply *r;
    int err = 0;

    (void)state;
    /* A map that names a node nobody listens on. */
    fake_start(&gone, FAKE_RUN);
    fake_stop(&gone);
    fake_start(&a, FAKE_RUN);
    a.map_port = gone.port;
    c = fake_client(a.port);
    r = redis_cluster_script_run(c, &fake_script, 1, 2, argv, NULL, 300, &err);
    assert_null(r);
    assert_int_equal(-ENOTCONN, err);
    redis_cluster_free(c);
    fake_stop(&a);

    fake_start(&a, FAKE_CLOSE);
    c = fake_client(a.port);
    r = redis_cluster_script_run(c, &fake_script, 1, 2, argv, NULL, 300, &err);
    assert_null(r);
    assert_int_equal(-ECONNRESET, err);
    redis_cluster_free(c);
    fake_stop(&a);
}

/*
 * A node that closed its connections while the client was idle (it
 * restarted, or came back after a failover) costs the next script
 * nothing: the client sees the close before it writes and dials again.
 * Written on the closed connection, the script met the close and its
 * outcome was unknown (-ECONNRESET), though it never reached the node.
 */
static void test_idle_close_redialed(void **state)
{
    const char *argv[] = {"{v:1}:info", "x"};
    struct fake_node a;
    struct redis_cluster *c;
    redisReply *r;
    int err = 0;

    (void)state;
    fake_start(&a, FAKE_RUN);
    c = fake_client(a.port);
    r = redis_cluster_script_run(c, &fake_script, 1, 2, argv, NULL, 300, &err);
    assert_non_null(r);
    freeReplyObject(r);
    pthread_mutex_lock(&a.mu);
    a.drop = 1;
    pthread_mutex_unlock(&a.mu);
    usleep(200 * 1000); /* the FIN reaches the client's socket */
    r = redis_cluster_script_run(c, &fake_script, 1, 2, argv, NULL, 300, &err);
    if (!r)
        print_error("after an idle close: err %d\n", err);
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(2, fake_count(&a, &a.ran));
    redis_cluster_free(c);
    fake_stop(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_map),
        cmocka_unit_test(test_map_shapes),
        cmocka_unit_test(test_redirect_text),
        cmocka_unit_test(test_batch_order),
        cmocka_unit_test(test_cluster_url),
        cmocka_unit_test(test_wait_follows_moved),
        cmocka_unit_test(test_wait_follows_ask),
        cmocka_unit_test(test_refused_while_moving),
        cmocka_unit_test(test_unsent_or_lost),
        cmocka_unit_test(test_idle_close_redialed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
