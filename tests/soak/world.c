/*
 * world.c - the processes of make soak, in the shape the settings chose
 * (soak.h: SOAK_REDIS, SOAK_MYSQL_SHARDS).
 *
 * MySQL: one MariaDB primary (binary log) with a read replica following
 * it, or two such pairs, the sales sharded over the primaries
 * (SECKILL_MYSQL_SHARDS, each shard's replica in
 * SECKILL_MYSQL_SHARD_REPLICAS), every primary migrated by seckilld
 * migrate. Redis: two servers, a master and a replica, watched by three
 * sentinels (a redis-sentinel:// URL); or a Redis Cluster of three
 * primaries and three replicas (a redis-cluster:// URL naming every
 * node). Every Redis server runs with appendonly yes and appendfsync
 * always (async sales need it).
 *
 * Three seckilld instances, each reaching every MySQL server and every
 * Redis server through a tcpproxy of its own: the MySQL URLs name the
 * proxies, and a preload (tests/tools/redirect.c) sends the connections
 * to a Redis server's own port (which Sentinel's answers and the
 * cluster's slot maps name) to the instance's proxy for it. Each runs
 * under libfaketime with a clock file of its own, behind Debian's
 * haproxy with the shipped deploy/haproxy.cfg. The Redis servers are
 * preloaded too: what one sends to another's port (replication, a
 * slot's keys migrating) goes through a proxy per target, so that
 * replication can be held back.
 *
 * Also the log watcher: it reads every instance's log as it grows and
 * stamps the lines the checker needs with the driver's clock (the
 * instances' own time stamps follow their stepped clocks).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/redis_slot.h"
#include "tests/soak/soak.h"

#define MASTER_NAME "soak"
#define DRAIN_S 3
#define SENTINEL_DOWN_MS 2000
/* A cluster node that does not answer for this long is failed over. */
#define CLUSTER_NODE_TIMEOUT_MS 2000
/* What a cluster node's data port is to its bus port. */
#define CLUSTER_BUS_OFFSET 10000

struct world world;

static void say_fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void say_fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "soak: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

/* ---- Redis ---- */

/* One command on 127.0.0.1:port with a 1 s timeout; NULL on failure. */
static redisReply *redis_at(uint16_t port, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    va_list ap;

    if (rc && !rc->err) {
        redisSetTimeout(rc, tv);
        va_start(ap, fmt);
        r = redisvCommand(rc, fmt, ap);
        va_end(ap);
    }
    if (rc)
        redisFree(rc);
    return r;
}

/* The Redis server listening on port, -1 when none of ours. */
static int redis_by_port(unsigned port)
{
    for (int k = 0; k < world.nredis; k++)
        if (port && port == world.redis[k].port)
            return k;
    return -1;
}

/* The master's port sentinel i names, 0 when it cannot say. */
static unsigned sentinel_master(int i)
{
    redisReply *r = redis_at(world.sentinel_port[i],
                             "SENTINEL get-master-addr-by-name " MASTER_NAME);
    unsigned port = 0;

    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        port = (unsigned)strtoul(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    return port;
}

int redis_master_now(void)
{
    if (soak_cfg.redis != SOAK_REDIS_SENTINEL)
        return -1;
    for (int i = 0; i < 3; i++) {
        int k = redis_by_port(sentinel_master(i));

        if (k >= 0) {
            pthread_mutex_lock(&world.mu);
            world.master = k;
            pthread_mutex_unlock(&world.mu);
            return k;
        }
    }
    return -1;
}

/* Whether the Redis server on port is a replica whose link to its
 * master is up. */
static bool replica_linked(uint16_t port)
{
    redisReply *r = redis_at(port, "INFO replication");
    bool up = r && r->type == REDIS_REPLY_STRING &&
              strstr(r->str, "master_link_status:up");

    freeReplyObject(r);
    return up;
}

bool redis_replica_synced(int m)
{
    return replica_linked(world.redis[1 - m].port);
}

/* How many entries SENTINEL <what> has on sentinel i. */
static size_t sentinel_count(int i, const char *what)
{
    redisReply *r =
        redis_at(world.sentinel_port[i], "SENTINEL %s " MASTER_NAME, what);
    size_t n = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;

    freeReplyObject(r);
    return n;
}

/* The environment of every Redis server: what one sends to another's
 * port goes through the proxy of that target (world.px_repl). */
static const char *const *redis_env(void)
{
    static char redirect[32 + SOAK_REDIS_MAX * 12], preload[IT_PATH_MAX + 16];
    static const char *env[3];
    size_t len;

    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", world.redirect_lib);
    len = (size_t)snprintf(redirect, sizeof(redirect), "SECKILL_REDIRECT=");
    for (int k = 0; k < world.nredis; k++)
        len += (size_t)snprintf(
            redirect + len, sizeof(redirect) - len, "%s%u:%u", k ? "," : "",
            (unsigned)world.redis[k].port, (unsigned)world.px_repl[k].port);
    env[0] = preload;
    env[1] = redirect;
    env[2] = NULL;
    return env;
}

/* Two servers, a master and its replica, and three sentinels. */
static int sentinel_start_all(void)
{
    world.nredis = 2;
    for (int k = 0; k < 2; k++) {
        struct predis *r = &world.redis[k];

        r->port = it_free_port();
        snprintf(r->log, sizeof(r->log), "%s/soak-redis-%c-%u.log",
                 it_log_dir(), 'a' + k, (unsigned)r->port);
        unlink(r->log);
        snprintf(r->dir, sizeof(r->dir), "%s/soak-redis-%c", it_log_dir(),
                 'a' + k);
        if (it_proxy_start(&world.px_repl[k], k ? "soak-repl-b" : "soak-repl-a",
                           r->port) != 0)
            return -1;
    }
    for (int k = 0; k < 2; k++) {
        world.redis[k].env = redis_env();
        if (k == 1)
            snprintf(world.redis[1].replicaof, sizeof(world.redis[1].replicaof),
                     "127.0.0.1 %u", (unsigned)world.redis[0].port);
        if (predis_start(&world.redis[k]) != 0)
            return -1;
    }
    world.master = 0;
    for (int i = 0; i < 3; i++) {
        world.sentinel_port[i] = it_free_port();
        snprintf(world.sentinel_log[i], IT_PATH_MAX, "%s/soak-sentinel-%u.log",
                 it_log_dir(), (unsigned)world.sentinel_port[i]);
        world.sentinel[i] = it_sentinel_start(
            world.sentinel_port[i], MASTER_NAME, world.redis[0].port,
            SENTINEL_DOWN_MS, world.sentinel_log[i]);
        if (world.sentinel[i] < 0)
            return -1;
    }
    /* A failover needs the replica known, and sentinels that know each
     * other (they meet through hello messages every 2 s). */
    for (int64_t deadline = util_mono_ms() + 30000;;) {
        bool ready = true;

        for (int i = 0; i < 3; i++)
            ready = ready && sentinel_count(i, "replicas") == 1 &&
                    sentinel_count(i, "sentinels") == 2;
        if (ready)
            return 0;
        if (util_mono_ms() > deadline) {
            say_fail("the sentinels did not find each other and the "
                     "replica within 30 s");
            return -1;
        }
        sleep_ms(100);
    }
}

/* ---- the cluster ---- */

static bool port_bindable(unsigned port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok;

    if (fd < 0)
        return false;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* A free port for node k whose bus port is free too, and neither one of
 * the ports the nodes before it took. */
static uint16_t cluster_port_pick(int k)
{
    for (int tries = 0; tries < 500; tries++) {
        unsigned p = it_free_port();
        bool clash = !p || p + CLUSTER_BUS_OFFSET > 65535 ||
                     !port_bindable(p + CLUSTER_BUS_OFFSET);

        for (int j = 0; j < k && !clash; j++) {
            unsigned q = world.redis[j].port;

            clash = p == q || p == q + CLUSTER_BUS_OFFSET ||
                    p + CLUSTER_BUS_OFFSET == q;
        }
        if (!clash)
            return (uint16_t)p;
    }
    return 0;
}

int cluster_node_start(int k)
{
    struct predis *r = &world.redis[k];
    char timeout[16];
    const char *args[] = {"--dir",
                          r->dir,
                          "--appendonly",
                          "yes",
                          "--appendfsync",
                          "always",
                          "--cluster-enabled",
                          "yes",
                          "--cluster-config-file",
                          "nodes.conf",
                          "--cluster-node-timeout",
                          timeout,
                          NULL};

    snprintf(timeout, sizeof(timeout), "%d", CLUSTER_NODE_TIMEOUT_MS);
    if (mkdir(r->dir, 0700) != 0 && errno != EEXIST)
        return -1;
    r->pid = it_redis_start_env(r->port, r->log, NULL, args, r->env);
    return r->pid > 0 ? 0 : -1;
}

/* The value of field in an INFO-like text ("field:value\r\n"), into out. */
static void info_field(const char *text, const char *field, char *out,
                       size_t cap)
{
    const char *p = text ? strstr(text, field) : NULL;

    out[0] = '\0';
    if (p && p[strlen(field)] == ':') {
        p += strlen(field) + 1;
        snprintf(out, cap, "%.*s", (int)strcspn(p, "\r\n"), p);
    }
}

/* Whether node k says cluster_state:ok and knows every node. */
static bool cluster_node_ok(int k)
{
    redisReply *r = redis_at(world.redis[k].port, "CLUSTER INFO");
    char state[16], known[16];

    info_field(r && r->type == REDIS_REPLY_STRING ? r->str : NULL,
               "cluster_state", state, sizeof(state));
    info_field(r && r->type == REDIS_REPLY_STRING ? r->str : NULL,
               "cluster_known_nodes", known, sizeof(known));
    freeReplyObject(r);
    return strcmp(state, "ok") == 0 && atoi(known) == world.nredis;
}

int cluster_nodes_read(struct cnode out[SOAK_REDIS_MAX])
{
    int up = 0;

    for (int k = 0; k < world.nredis; k++) {
        redisReply *role = redis_at(world.redis[k].port, "ROLE");
        redisReply *id = redis_at(world.redis[k].port, "CLUSTER MYID");

        memset(&out[k], 0, sizeof(out[k]));
        out[k].of = -1;
        if (role && role->type == REDIS_REPLY_ARRAY && role->elements >= 3 &&
            role->element[0]->type == REDIS_REPLY_STRING && id &&
            id->type == REDIS_REPLY_STRING) {
            out[k].up = true;
            up++;
            snprintf(out[k].id, sizeof(out[k].id), "%s", id->str);
            out[k].primary = strcmp(role->element[0]->str, "master") == 0;
            if (!out[k].primary &&
                role->element[2]->type == REDIS_REPLY_INTEGER)
                out[k].of = redis_by_port((unsigned)role->element[2]->integer);
        }
        freeReplyObject(role);
        freeReplyObject(id);
    }
    return up ? 0 : -1;
}

int cluster_owner(unsigned slot)
{
    for (int k = 0; k < world.nredis; k++) {
        redisReply *r = redis_at(world.redis[k].port, "CLUSTER SLOTS");
        int owner = -1;
        bool answered = r && r->type == REDIS_REPLY_ARRAY;

        for (size_t i = 0; answered && i < r->elements; i++) {
            redisReply *e = r->element[i];

            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
                e->element[0]->integer <= (long long)slot &&
                (long long)slot <= e->element[1]->integer &&
                e->element[2]->type == REDIS_REPLY_ARRAY &&
                e->element[2]->elements >= 2)
                owner =
                    redis_by_port((unsigned)e->element[2]->element[1]->integer);
        }
        freeReplyObject(r);
        if (answered)
            return owner;
    }
    return -1;
}

/* Whether any node holds a slot half moved (CLUSTER NODES shows it as
 * [slot->-id] or [slot-<-id]). */
static bool cluster_slot_open(void)
{
    bool open = false;

    for (int k = 0; k < world.nredis && !open; k++) {
        redisReply *r = redis_at(world.redis[k].port, "CLUSTER NODES");

        open = r && r->type == REDIS_REPLY_STRING &&
               (strstr(r->str, "->-") || strstr(r->str, "-<-"));
        freeReplyObject(r);
    }
    return open;
}

static bool cluster_whole(char *why, size_t cap)
{
    struct cnode n[SOAK_REDIS_MAX];
    int primaries = 0;

    if (cluster_nodes_read(n) != 0) {
        snprintf(why, cap, "no cluster node answers");
        return false;
    }
    for (int k = 0; k < world.nredis; k++) {
        if (!n[k].up) {
            snprintf(why, cap, "node %u is down",
                     (unsigned)world.redis[k].port);
            return false;
        }
        if (!cluster_node_ok(k)) {
            snprintf(why, cap, "node %u is not cluster_state:ok",
                     (unsigned)world.redis[k].port);
            return false;
        }
        primaries += n[k].primary;
    }
    for (int k = 0; k < world.nredis; k++) {
        bool synced = false;

        if (!n[k].primary)
            continue;
        for (int j = 0; j < world.nredis && !synced; j++)
            synced = n[j].of == k && replica_linked(world.redis[j].port);
        if (!synced) {
            snprintf(why, cap, "primary %u has no replica in sync",
                     (unsigned)world.redis[k].port);
            return false;
        }
    }
    if (primaries != world.nredis / 2) {
        snprintf(why, cap, "%d primaries", primaries);
        return false;
    }
    if (cluster_slot_open()) {
        snprintf(why, cap, "a slot is still being moved");
        return false;
    }
    return true;
}

/* Six nodes, made a cluster by redis-cli --cluster create (the first
 * three primaries, each of the others a replica of one of them). */
static int cluster_start_all(void)
{
    char *argv[4 + SOAK_REDIS_MAX + 4], hosts[SOAK_REDIS_MAX][32], *out = NULL;
    char why[96] = "";
    int a = 0, status;

    world.nredis = SOAK_REDIS_MAX;
    for (int k = 0; k < world.nredis; k++) {
        struct predis *r = &world.redis[k];
        char tag[32];

        r->port = cluster_port_pick(k);
        if (!r->port) {
            say_fail("no free port for a cluster node and its bus");
            return -1;
        }
        snprintf(r->log, sizeof(r->log), "%s/soak-redis-node%d-%u.log",
                 it_log_dir(), k + 1, (unsigned)r->port);
        unlink(r->log);
        snprintf(r->dir, sizeof(r->dir), "%s/soak-redis-node%d", it_log_dir(),
                 k + 1);
        snprintf(tag, sizeof(tag), "soak-repl-node%d", k + 1);
        if (it_proxy_start(&world.px_repl[k], tag, r->port) != 0)
            return -1;
    }
    for (int k = 0; k < world.nredis; k++) {
        world.redis[k].env = redis_env();
        if (cluster_node_start(k) != 0) {
            say_fail("cluster node %d did not start; log %s", k + 1,
                     world.redis[k].log);
            return -1;
        }
    }
    argv[a++] = (char *)it_which("redis-cli");
    argv[a++] = "--cluster";
    argv[a++] = "create";
    for (int k = 0; k < world.nredis; k++) {
        snprintf(hosts[k], sizeof(hosts[k]), "127.0.0.1:%u",
                 (unsigned)world.redis[k].port);
        argv[a++] = hosts[k];
    }
    argv[a++] = "--cluster-replicas";
    argv[a++] = "1";
    argv[a++] = "--cluster-yes";
    argv[a] = NULL;
    if (!argv[0]) {
        say_fail("redis-cli not found: run scripts/deps.sh");
        return -1;
    }
    status = it_run_capture(argv, &out);
    if (status != 0) {
        say_fail("redis-cli --cluster create failed: %.400s", out ? out : "");
        free(out);
        return -1;
    }
    free(out);
    for (int64_t deadline = util_mono_ms() + 60000;;) {
        if (cluster_whole(why, sizeof(why)))
            return 0;
        if (util_mono_ms() > deadline) {
            say_fail("the cluster is not whole 60 s after its creation: %s",
                     why);
            return -1;
        }
        sleep_ms(200);
    }
}

/* One command on a connection of the move's, with its answer checked:
 * 0, or -1 with the error in why. */
static int move_cmd(redisContext *rc, char *why, size_t cap, int argc,
                    const char **argv)
{
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    int rc_ = 0;

    if (!r || r->type == REDIS_REPLY_ERROR) {
        snprintf(why, cap, "%s %s: %s", argv[0], argc > 1 ? argv[1] : "",
                 r ? r->str : rc->errstr);
        rc_ = -1;
    }
    freeReplyObject(r);
    return rc_;
}

int cluster_slot_move(unsigned slot, int from, int to, int batch, int pause_ms,
                      char *why, size_t cap)
{
    struct timeval tv = {8, 0};
    redisContext *c[SOAK_REDIS_MAX] = {0};
    struct cnode n[SOAK_REDIS_MAX];
    char slot_s[16], port_s[16];
    int rc = -1;

    snprintf(slot_s, sizeof(slot_s), "%u", slot);
    snprintf(port_s, sizeof(port_s), "%u", (unsigned)world.redis[to].port);
    if (cluster_nodes_read(n) != 0 || !n[from].up || !n[to].up) {
        snprintf(why, cap, "the source or the target does not answer");
        return -1;
    }
    for (int k = 0; k < world.nredis; k++) {
        if (!n[k].up)
            continue;
        c[k] = redisConnectWithTimeout("127.0.0.1", world.redis[k].port, tv);
        if (!c[k] || c[k]->err) {
            snprintf(why, cap, "no connection to node %u",
                     (unsigned)world.redis[k].port);
            goto out;
        }
        redisSetTimeout(c[k], tv);
    }
    {
        const char *imp[] = {"CLUSTER", "SETSLOT", slot_s, "IMPORTING",
                             n[from].id};
        const char *mig[] = {"CLUSTER", "SETSLOT", slot_s, "MIGRATING",
                             n[to].id};

        if (move_cmd(c[to], why, cap, 5, imp) ||
            move_cmd(c[from], why, cap, 5, mig))
            goto out;
    }
    /* The keys, batch at a time (redis-cli's default pipeline moves ten),
     * with a pause between: the sale keeps selling meanwhile, its keys
     * split between the two. */
    for (;;) {
        redisReply *keys =
            redisCommand(c[from], "CLUSTER GETKEYSINSLOT %u %d", slot, batch);
        const char *argv[7 + 10] = {"MIGRATE", "127.0.0.1", port_s,
                                    "",        "0",         "5000"};
        int argc = 6;
        size_t nkeys;

        if (!keys || keys->type != REDIS_REPLY_ARRAY) {
            snprintf(why, cap, "CLUSTER GETKEYSINSLOT: %s",
                     keys && keys->str ? keys->str : c[from]->errstr);
            freeReplyObject(keys);
            goto out;
        }
        nkeys = keys->elements;
        if (nkeys) {
            argv[argc++] = "KEYS";
            for (size_t i = 0; i < nkeys && argc < 7 + 10; i++)
                argv[argc++] = keys->element[i]->str;
        }
        rc = nkeys ? move_cmd(c[from], why, cap, argc, argv) : 0;
        freeReplyObject(keys);
        if (rc || !nkeys)
            break;
        rc = -1;
        if (pause_ms)
            sleep_ms(pause_ms);
    }
    if (rc)
        goto out;
    /* The slot is the target's: told to the target first, then to the
     * source, then to every other primary (the replicas learn it from
     * them). */
    {
        const char *own[] = {"CLUSTER", "SETSLOT", slot_s, "NODE", n[to].id};

        rc = move_cmd(c[to], why, cap, 5, own) ||
             move_cmd(c[from], why, cap, 5, own);
        for (int k = 0; k < world.nredis && !rc; k++)
            if (k != to && k != from && n[k].up && n[k].primary)
                rc = move_cmd(c[k], why, cap, 5, own);
        rc = rc ? -1 : 0;
    }
out:
    for (int k = 0; k < world.nredis; k++)
        if (c[k])
            redisFree(c[k]);
    return rc;
}

int cluster_slot_fix(void)
{
    char *argv[] = {(char *)it_which("redis-cli"),
                    "--cluster",
                    "fix",
                    NULL,
                    "--cluster-yes",
                    NULL};
    char host[32], *out = NULL;
    struct cnode n[SOAK_REDIS_MAX];
    int status = -1;

    if (!argv[0] || cluster_nodes_read(n) != 0)
        return -1;
    for (int k = 0; k < world.nredis && !argv[3]; k++)
        if (n[k].up) {
            snprintf(host, sizeof(host), "127.0.0.1:%u",
                     (unsigned)world.redis[k].port);
            argv[3] = host;
        }
    status = it_run_capture(argv, &out);
    if (status != 0)
        say("redis-cli --cluster fix failed: %.300s", out ? out : "");
    free(out);
    return status == 0 && !cluster_slot_open() ? 0 : -1;
}

bool redis_whole(char *why, size_t cap)
{
    int m;

    if (soak_cfg.redis == SOAK_REDIS_CLUSTER)
        return cluster_whole(why, cap);
    m = redis_master_now();
    if (m < 0) {
        snprintf(why, cap, "the sentinels name no master");
        return false;
    }
    if (!redis_replica_synced(m)) {
        snprintf(why, cap, "the replica is not in sync");
        return false;
    }
    return true;
}

uint16_t redis_port_of_sale(int64_t voucher)
{
    char tag[40];
    int k;

    if (soak_cfg.redis == SOAK_REDIS_SENTINEL) {
        k = redis_master_now();
    } else {
        snprintf(tag, sizeof(tag), "{v:%lld}", (long long)voucher);
        k = cluster_owner(redis_key_slot_str(tag));
    }
    return k >= 0 ? world.redis[k].port : 0;
}

/* ---- MariaDB ---- */

/* Shard s's primary and its read replica, which follows it by GTID. */
static int mysql_shard_start(int s)
{
    struct pmaria *db = &world.db[s], *rep = &world.replica[s];
    MYSQL *my = NULL;

    db->server_id = 2 * (unsigned)s + 1;
    if (pmaria_create(db) != 0)
        return -1;
    rep->server_id = 2 * (unsigned)s + 2;
    rep->replica = true;
    if (pmaria_create(rep) != 0 ||
        pmaria_sql(db,
                   "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';"
                   "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
                   "GRANT REPLICA MONITOR ON *.* TO 'seckill'@'127.0.0.1'") ||
        pmaria_sql(rep,
                   "CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
                   "MASTER_PORT=%u, MASTER_USER='repl', "
                   "MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos, "
                   "MASTER_CONNECT_RETRY=1; START SLAVE",
                   (unsigned)db->port))
        return -1;
    pmaria_target(db, &world.shard_target[s]);
    /* The replica has the schema and the user once it caught up. */
    for (int i = 0; i < 300 && !my; i++) {
        struct db_target t = world.shard_target[s];
        int64_t n;

        t.port = rep->port;
        my = fdb_connect(&t, 2);
        if (my && fdb_scalar(my, &n, "SELECT COUNT(*) FROM voucher_orders")) {
            mysql_close(my);
            my = NULL;
        }
        if (!my)
            sleep_ms(100);
    }
    if (!my) {
        say_fail("the MariaDB replica of shard %d did not catch up; log %s", s,
                 rep->log);
        return -1;
    }
    mysql_close(my);
    return 0;
}

/* A URL of shard s's database on port (the primary's, its replica's or
 * a proxy's), after prefix. */
static void mysql_url(char *out, size_t cap, const char *prefix, unsigned port)
{
    snprintf(out, cap, "%smysql://seckill:seckill@127.0.0.1:%u/seckill_fault",
             prefix, port);
}

/* seckilld migrate on every primary, shard 0 first. */
static int mysql_migrate(void)
{
    char shards[256], url[96], log[IT_PATH_MAX];
    const char *env[] = {"SECKILL_MYSQL_URL", "SECKILL_MYSQL_REPLICA_URL",
                         "SECKILL_MYSQL_SHARD_REPLICAS", shards, NULL};
    char *argv[] = {(char *)it_bin(), "migrate", NULL};
    char **envp;
    int status = -1;
    pid_t pid;

    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=");
    for (int s = 0; s < soak_cfg.shards; s++) {
        mysql_url(url, sizeof(url), s ? "," : "", world.db[s].port);
        snprintf(shards + strlen(shards), sizeof(shards) - strlen(shards), "%s",
                 url);
    }
    snprintf(log, sizeof(log), "%s/soak-migrate.log", it_log_dir());
    unlink(log);
    envp = it_env_build(env);
    pid = it_spawn(argv, envp, log);
    it_env_free(envp);
    if (pid > 0 && it_wait_exit(pid, 60000, &status) == -ETIMEDOUT) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (pid <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        say_fail("seckilld migrate failed; log %s", log);
        return -1;
    }
    return 0;
}

static int mysql_start_all(void)
{
    for (int s = 0; s < soak_cfg.shards; s++)
        if (mysql_shard_start(s) != 0)
            return -1;
    world.target = world.shard_target[0];
    return mysql_migrate();
}

MYSQL *world_mysql(int shard, unsigned timeout_s)
{
    return fdb_connect(&world.shard_target[shard], timeout_s);
}

/* ---- instances ---- */

static int instance_setup(int i)
{
    struct instance *in = &world.inst[i];
    char tag[40], list[2][512], url[96];
    size_t len;
    int k = 0;

    list[0][0] = list[1][0] = '\0';
    for (int s = 0; s < soak_cfg.shards; s++) {
        snprintf(tag, sizeof(tag), "soak-app%d-mysql%s", i + 1,
                 s ? "-shard1" : "");
        if (it_proxy_start(&in->px_mysql[s], tag, world.db[s].port))
            return -1;
        snprintf(tag, sizeof(tag), "soak-app%d-replica%s", i + 1,
                 s ? "-shard1" : "");
        if (it_proxy_start(&in->px_replica[s], tag, world.replica[s].port))
            return -1;
        mysql_url(url, sizeof(url), s ? "," : "", in->px_mysql[s].port);
        snprintf(list[0] + strlen(list[0]), sizeof(list[0]) - strlen(list[0]),
                 "%s", url);
        mysql_url(url, sizeof(url), s ? "," : "", in->px_replica[s].port);
        snprintf(list[1] + strlen(list[1]), sizeof(list[1]) - strlen(list[1]),
                 "%s", url);
    }
    for (int r = 0; r < world.nredis; r++) {
        if (soak_cfg.redis == SOAK_REDIS_CLUSTER)
            snprintf(tag, sizeof(tag), "soak-app%d-redis-node%d", i + 1, r + 1);
        else
            snprintf(tag, sizeof(tag), "soak-app%d-redis-%c", i + 1, 'a' + r);
        if (it_proxy_start(&in->px_redis[r], tag, world.redis[r].port))
            return -1;
    }
    snprintf(in->clock_file, sizeof(in->clock_file), "%s/soak-clock-%d",
             it_log_dir(), i + 1);
    FILE *f = fopen(in->clock_file, "w");
    if (!f)
        return -1;
    fputs("+0\n", f);
    fclose(f);
    in->port = it_free_port();

#define ENV(...) snprintf(in->env[k++], sizeof(in->env[0]), __VA_ARGS__)
    if (soak_cfg.shards == 1) {
        ENV("SECKILL_MYSQL_URL=%s", list[0]);
        ENV("SECKILL_MYSQL_REPLICA_URL=%s", list[1]);
    } else {
        ENV("SECKILL_MYSQL_URL");
        ENV("SECKILL_MYSQL_REPLICA_URL");
        ENV("SECKILL_MYSQL_SHARDS=%s", list[0]);
        ENV("SECKILL_MYSQL_SHARD_REPLICAS=%s", list[1]);
    }
    if (soak_cfg.redis == SOAK_REDIS_CLUSTER) {
        char seeds[SOAK_REDIS_MAX * 20] = "";

        for (int r = 0; r < world.nredis; r++) {
            len = strlen(seeds);
            snprintf(seeds + len, sizeof(seeds) - len, "%s127.0.0.1:%u",
                     r ? "," : "", (unsigned)world.redis[r].port);
        }
        ENV("SECKILL_REDIS_URL=redis-cluster://%s", seeds);
    } else {
        ENV("SECKILL_REDIS_URL=redis-sentinel://127.0.0.1:%u,127.0.0.1:%u,"
            "127.0.0.1:%u/" MASTER_NAME "/0",
            (unsigned)world.sentinel_port[0], (unsigned)world.sentinel_port[1],
            (unsigned)world.sentinel_port[2]);
    }
    ENV("SECKILL_LOCK_URL");
    ENV("SECKILL_PAY_SECRET=%s", world.pay_secret);
    /* Login codes go to the soak's SMS webhook (and, in dev mode, into
     * the answer too, where the buyers read them). */
    ENV("SECKILL_SMS_WEBHOOK=http://127.0.0.1:%u/sms",
        (unsigned)sms_sink_port());
    ENV("SECKILL_SMS_SECRET=%s", world.pay_secret);
    ENV("SECKILL_PAY_TIMEOUT_S=%d", SOAK_PAY_TIMEOUT_S);
    ENV("SECKILL_DRAIN_S=%d", DRAIN_S);
    ENV("SECKILL_THREADS=2");
    ENV("SECKILL_ENGINE_THREADS=2");
    ENV("LD_PRELOAD=%s:%s", world.faketime_lib, world.redirect_lib);
    ENV("FAKETIME_TIMESTAMP_FILE=%s/soak-clock-%d", it_log_dir(), i + 1);
    ENV("FAKETIME_CACHE_DURATION=1");
    ENV("FAKETIME_DONT_FAKE_MONOTONIC=1");
    /* Its "monotonic fix", on by default with this glibc, returns every
     * timed wait on a CLOCK_MONOTONIC condition at once: the instances'
     * sleeping threads (the expiry, the writer, the reaper) spun, three
     * instances used most of two cores, and the load the nemesis drives
     * met starved processes. */
    ENV("FAKETIME_FORCE_MONOTONIC_FIX=0");
    /* A sanitizer build (tests/soak/run.sh sets these): the instances
     * report leaks at exit, and their runtime need not come first among
     * the preloads. */
    if (getenv("SOAK_ASAN_OPTIONS"))
        ENV("ASAN_OPTIONS=%s", getenv("SOAK_ASAN_OPTIONS"));
    /* Its connections to each Redis server's port go to its own proxy. */
    len = (size_t)ENV("SECKILL_REDIRECT=");
    for (int r = 0; r < world.nredis; r++)
        len += (size_t)snprintf(in->env[k - 1] + len, sizeof(in->env[0]) - len,
                                "%s%u:%u", r ? "," : "",
                                (unsigned)world.redis[r].port,
                                (unsigned)in->px_redis[r].port);
    /* The canary: every instance drops one async purchase in 1,000 before
     * the sale's script, applies the first restock it makes twice and
     * admits every other waiting room place by the rate alone (a
     * latecomer's ticket expired); the first also skips its second unit
     * return. */
    if (soak_cfg.canary && i == 0)
        ENV("SECKILL_FAILPOINTS=async_sale_drop=fail%%1000,"
            "unit_return_skip=fail@2," SOAK_CANARY_CONTROLS_FAILPOINTS);
    else if (soak_cfg.canary)
        ENV("SECKILL_FAILPOINTS=async_sale_drop=fail%%"
            "1000," SOAK_CANARY_CONTROLS_FAILPOINTS);
    else
        ENV("SECKILL_FAILPOINTS");
#undef ENV
    return 0;
}

int instance_start(int i)
{
    struct instance *in = &world.inst[i];
    const char *env[sizeof(in->env) / sizeof(in->env[0]) + 1];
    struct it_server s;
    char tag[48];
    size_t k;

    for (k = 0; k < sizeof(in->env) / sizeof(in->env[0]) && in->env[k][0]; k++)
        env[k] = in->env[k];
    env[k] = NULL;
    snprintf(tag, sizeof(tag), "soak-app%d-run%d", i + 1, ++in->starts);
    if ((soak_cfg.shared_hostname
             ? it_server_start_port_ns(&s, in->port, tag, env,
                                       SOAK_SHARED_HOSTNAME)
             : it_server_start_port(&s, in->port, tag, env)) != 0) {
        soak_problem("instance-start", "instance %d did not start (run %d)",
                     i + 1, in->starts);
        return -1;
    }
    log_watch_add(i, s.log_path);
    pthread_mutex_lock(&world.mu);
    in->srv = s;
    in->stopped = false;
    pthread_mutex_unlock(&world.mu);
    return 0;
}

struct it_server instance_get(int i)
{
    struct it_server s;

    pthread_mutex_lock(&world.mu);
    s = world.inst[i].srv;
    pthread_mutex_unlock(&world.mu);
    return s;
}

int instance_term(int i, int *status)
{
    struct instance *in = &world.inst[i];
    pid_t pid;
    int rc;

    pthread_mutex_lock(&world.mu);
    pid = in->srv.pid;
    pthread_mutex_unlock(&world.mu);
    *status = 0;
    if (pid <= 0)
        return 0;
    kill(pid, SIGCONT);
    kill(pid, SIGTERM);
    rc = it_wait_exit(pid, (DRAIN_S + 12) * 1000, status);
    if (rc == -ETIMEDOUT) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    pthread_mutex_lock(&world.mu);
    in->srv.pid = 0;
    in->stopped = false;
    pthread_mutex_unlock(&world.mu);
    return rc == 0 ? 0 : -1;
}

void lb_status(int i, char *out, size_t cap)
{
    it_lb_status(&world.stats, "seckilld", i + 1, out, cap, NULL, NULL);
}

static int haproxy_start(void)
{
    char lb[40], stats[40], srv[SOAK_INSTANCES][48];
    const char *env[SOAK_INSTANCES + 3];
    const char *bin = it_which("haproxy");
    char **envp;

    if (!bin) {
        say_fail("haproxy not found: run scripts/deps.sh");
        return -1;
    }
    world.lb.port = it_free_port();
    world.stats.port = it_free_port();
    snprintf(lb, sizeof(lb), "SECKILL_LB_BIND=127.0.0.1:%u",
             (unsigned)world.lb.port);
    snprintf(stats, sizeof(stats), "SECKILL_LB_STATS=127.0.0.1:%u",
             (unsigned)world.stats.port);
    env[0] = lb;
    env[1] = stats;
    for (int i = 0; i < SOAK_INSTANCES; i++) {
        snprintf(srv[i], sizeof(srv[i]), "SECKILL_LB_SERVER_%d=127.0.0.1:%u",
                 i + 1, (unsigned)world.inst[i].port);
        env[2 + i] = srv[i];
    }
    env[2 + SOAK_INSTANCES] = NULL;
    snprintf(world.haproxy_log, sizeof(world.haproxy_log),
             "%s/soak-haproxy.log", it_log_dir());
    char *argv[] = {(char *)bin, "-db", "-f", "deploy/haproxy.cfg", NULL};
    envp = it_env_build(env);
    world.haproxy = it_spawn(argv, envp, world.haproxy_log);
    it_env_free(envp);
    if (world.haproxy < 0 || it_wait_tcp(world.lb.port, 5000)) {
        say_fail("haproxy did not start; log %s", world.haproxy_log);
        return -1;
    }
    for (int i = 0; i < SOAK_INSTANCES; i++) {
        int64_t deadline = util_mono_ms() + 15000;
        char st[32] = "";

        while (strncmp(st, "UP", 2) != 0) {
            if (util_mono_ms() > deadline) {
                say_fail("haproxy did not take instance %d (%s)", i + 1, st);
                return -1;
            }
            sleep_ms(200);
            lb_status(i, st, sizeof(st));
        }
    }
    return 0;
}

static const char *find_lib(const char *name)
{
    static const char *const dirs[] = {"/usr/lib/x86_64-linux-gnu/faketime",
                                       "/usr/lib/aarch64-linux-gnu/faketime",
                                       "/usr/lib/faketime"};
    static char path[IT_PATH_MAX];

    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dirs[i], name);
        if (access(path, R_OK) == 0)
            return path;
    }
    return NULL;
}

int world_start(void)
{
    const char *ft = find_lib("libfaketimeMT.so.1");
    const char *redirect = getenv("SECKILL_REDIRECT_LIB");
    struct rng r;

    pthread_mutex_init(&world.mu, NULL);
    if (!ft) {
        say_fail("libfaketime missing: run scripts/deps.sh (faketime)");
        return -1;
    }
    snprintf(world.faketime_lib, sizeof(world.faketime_lib), "%s", ft);
    if (!redirect || access(redirect, R_OK) != 0) {
        say_fail("SECKILL_REDIRECT_LIB does not name tests/tools/redirect.c "
                 "built (tests/soak/run.sh sets it)");
        return -1;
    }
    snprintf(world.redirect_lib, sizeof(world.redirect_lib), "%s", redirect);
    rng_seed(&r, soak_cfg.seed, 99);
    for (int i = 0; i < 64; i++)
        world.pay_secret[i] = "0123456789abcdef"[rng_next(&r) % 16];
    world.pay_secret[64] = '\0';
    say("starting %s, %s",
        soak_cfg.shards > 1 ? "two MariaDB shards, each with a replica"
                            : "MariaDB and its replica",
        soak_cfg.redis == SOAK_REDIS_CLUSTER
            ? "a Redis Cluster of three primaries and three replicas"
            : "two Redis servers and three sentinels");
    if (mysql_start_all() ||
        (soak_cfg.redis == SOAK_REDIS_CLUSTER ? cluster_start_all()
                                              : sentinel_start_all()))
        return -1;
    if (sms_sink_start(world.pay_secret) != 0) {
        say_fail("the SMS webhook did not start");
        return -1;
    }
    for (int i = 0; i < SOAK_INSTANCES; i++)
        if (instance_setup(i) || instance_start(i))
            return -1;
    say("starting haproxy in front of %d instances", SOAK_INSTANCES);
    return haproxy_start();
}

void instances_stop(void)
{
    for (int i = 0; i < SOAK_INSTANCES; i++) {
        int status = 0;

        if (instance_term(i, &status) != 0 ||
            (WIFEXITED(status) && WEXITSTATUS(status) != 0) ||
            WIFSIGNALED(status)) {
            soak_problem("instance-unclean-exit",
                         "instance %d did not exit cleanly on SIGTERM at the "
                         "end (status 0x%x); log %s",
                         i + 1, (unsigned)status, world.inst[i].srv.log_path);
        }
    }
}

void world_stop(void)
{
    sms_sink_stop();
    if (world.haproxy > 0) {
        kill(world.haproxy, SIGTERM);
        waitpid(world.haproxy, NULL, 0);
        world.haproxy = 0;
    }
    for (int i = 0; i < SOAK_INSTANCES; i++) {
        struct instance *in = &world.inst[i];

        for (int s = 0; s < SOAK_SHARDS_MAX; s++) {
            it_proxy_stop(&in->px_mysql[s]);
            it_proxy_stop(&in->px_replica[s]);
        }
        for (int k = 0; k < world.nredis; k++)
            it_proxy_stop(&in->px_redis[k]);
    }
    for (int i = 0; i < 3; i++)
        if (world.sentinel[i] > 0) {
            kill(world.sentinel[i], SIGKILL);
            waitpid(world.sentinel[i], NULL, 0);
        }
    for (int k = 0; k < world.nredis; k++) {
        predis_kill(&world.redis[k]);
        it_proxy_stop(&world.px_repl[k]);
    }
    for (int s = 0; s < SOAK_SHARDS_MAX; s++) {
        pmaria_destroy(&world.replica[s]);
        pmaria_destroy(&world.db[s]);
    }
}

/* ---- the log watcher ---- */

#define WATCH_MAX 256

static struct {
    pthread_mutex_t mu;
    pthread_t th;
    atomic_int stop;
    struct {
        int inst;
        char path[IT_PATH_MAX];
        long offset;
        char partial[4096];
    } files[WATCH_MAX];
    int nfiles;
    struct logline *lines;
    size_t n, cap;
} watch = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const struct {
    enum logev kind;
    const char *needle;
} patterns[] = {
    {LOGEV_REBUILT, "msg=\"async sale rebuilt from mysql\""},
    {LOGEV_DISAGREE, "msg=\"async sale disagrees with mysql\""},
    {LOGEV_REFUND, "msg=\"payment refused, to refund (GET /api/refunds)\""},
    {LOGEV_REFUND2,
     "msg=\"second payment of a paid order, to refund (GET /api/refunds)\""},
    {LOGEV_FAILPOINT, "msg=\"failpoint fired\""},
    {LOGEV_ID_REUSED, "order id already used"},
    {LOGEV_DEAD, "async order can never be written"},
    {LOGEV_NO_RETURN, "msg=\"async units not returned to redis yet\""},
    {LOGEV_SANITIZER, "Sanitizer"},
};

void log_watch_add(int inst, const char *path)
{
    pthread_mutex_lock(&watch.mu);
    if (watch.nfiles < WATCH_MAX) {
        watch.files[watch.nfiles].inst = inst;
        snprintf(watch.files[watch.nfiles].path, IT_PATH_MAX, "%s", path);
        watch.files[watch.nfiles].offset = 0;
        watch.files[watch.nfiles].partial[0] = '\0';
        watch.nfiles++;
    }
    pthread_mutex_unlock(&watch.mu);
}

/* The number after "key=" in line, 0 when absent. */
static int64_t field_num(const char *line, const char *key)
{
    const char *p = strstr(line, key);

    return p ? strtoll(p + strlen(key), NULL, 10) : 0;
}

static void line_take(int inst, const char *file, const char *line)
{
    for (size_t k = 0; k < sizeof(patterns) / sizeof(patterns[0]); k++) {
        struct logline *l;
        const char *t;

        if (!strstr(line, patterns[k].needle))
            continue;
        if (watch.n == watch.cap) {
            watch.cap = watch.cap ? watch.cap * 2 : 1024;
            watch.lines = xrealloc(watch.lines, watch.cap * sizeof(*l));
        }
        l = &watch.lines[watch.n++];
        memset(l, 0, sizeof(*l));
        l->at_ms = soak_ms();
        l->inst = inst;
        l->file = file;
        l->kind = patterns[k].kind;
        l->voucher = field_num(line, " voucher=");
        l->order = field_num(line, " order=");
        l->missing = field_num(line, " missing=") == 1;
        t = strstr(line, " txn=\"");
        if (t)
            snprintf(l->txn, sizeof(l->txn), "%.*s", (int)strcspn(t + 6, "\""),
                     t + 6);
        snprintf(l->text, sizeof(l->text), "%s", line);
        return;
    }
}

static void watch_once(void)
{
    pthread_mutex_lock(&watch.mu);
    for (int i = 0; i < watch.nfiles; i++) {
        FILE *f = fopen(watch.files[i].path, "r");
        char buf[4096];

        if (!f)
            continue;
        if (fseek(f, watch.files[i].offset, SEEK_SET) == 0)
            while (fgets(buf, sizeof(buf), f)) {
                size_t len = strlen(buf);
                char *p = watch.files[i].partial;

                watch.files[i].offset += (long)len;
                if (buf[len - 1] != '\n') {
                    /* The rest of the line comes later. */
                    snprintf(p + strlen(p),
                             sizeof(watch.files[i].partial) - strlen(p), "%s",
                             buf);
                    continue;
                }
                buf[len - 1] = '\0';
                if (p[0]) {
                    char whole[8192];

                    snprintf(whole, sizeof(whole), "%s%s", p, buf);
                    p[0] = '\0';
                    line_take(watch.files[i].inst, watch.files[i].path, whole);
                } else {
                    line_take(watch.files[i].inst, watch.files[i].path, buf);
                }
            }
        fclose(f);
    }
    pthread_mutex_unlock(&watch.mu);
}

static void *watch_run(void *arg)
{
    (void)arg;
    while (!atomic_load(&watch.stop)) {
        watch_once();
        sleep_ms(500);
    }
    return NULL;
}

void log_watch_start(void)
{
    if (pthread_create(&watch.th, NULL, watch_run, NULL) != 0)
        abort();
}

void log_watch_stop(void)
{
    atomic_store(&watch.stop, 1);
    pthread_join(watch.th, NULL);
    watch_once();
}

const struct logline *log_lines_all(size_t *n)
{
    *n = watch.n;
    return watch.lines;
}
