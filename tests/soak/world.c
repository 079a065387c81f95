/*
 * world.c - the processes of make soak. A MariaDB primary (binary log)
 * and a read replica following it; two Redis servers, a master and a
 * replica, both with appendonly yes and appendfsync always (async sales
 * need it), watched by three sentinels; three seckilld instances that
 * find the master through the sentinels, each reaching MySQL, the
 * replica and each Redis server through a tcpproxy of its own (a preload,
 * tests/tools/redirect.c, sends the connections Sentinel's answer points
 * at to the instance's proxy), each under libfaketime with a clock file
 * of its own; and Debian's haproxy with the shipped deploy/haproxy.cfg in
 * front of them. Replication between the Redis servers also runs through
 * a proxy per master, so that it can be held back.
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
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/soak/soak.h"

#define MASTER_NAME "soak"
#define DRAIN_S 3
#define SENTINEL_DOWN_MS 2000

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
    for (int i = 0; i < 3; i++) {
        unsigned port = sentinel_master(i);

        for (int k = 0; k < 2; k++)
            if (port && port == world.redis[k].port) {
                pthread_mutex_lock(&world.mu);
                world.master = k;
                pthread_mutex_unlock(&world.mu);
                return k;
            }
    }
    return -1;
}

bool redis_replica_synced(int m)
{
    redisReply *r = redis_at(world.redis[1 - m].port, "INFO replication");
    bool up = r && r->type == REDIS_REPLY_STRING &&
              strstr(r->str, "master_link_status:up");

    freeReplyObject(r);
    return up;
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

static int redis_start_all(void)
{
    static char redirect[2][64], preload[IT_PATH_MAX + 16];
    static const char *env[4];

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
    /* Replication into a replica goes through the proxy of its master. */
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", world.redirect_lib);
    snprintf(redirect[0], sizeof(redirect[0]), "SECKILL_REDIRECT=%u:%u,%u:%u",
             (unsigned)world.redis[0].port, (unsigned)world.px_repl[0].port,
             (unsigned)world.redis[1].port, (unsigned)world.px_repl[1].port);
    env[0] = preload;
    env[1] = redirect[0];
    env[2] = NULL;
    for (int k = 0; k < 2; k++) {
        world.redis[k].env = env;
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

/* ---- MariaDB ---- */

static int mysql_start_all(void)
{
    MYSQL *my = NULL;

    world.db.server_id = 1;
    if (pmaria_create(&world.db) != 0)
        return -1;
    world.replica.server_id = 2;
    world.replica.replica = true;
    if (pmaria_create(&world.replica) != 0 ||
        pmaria_sql(&world.db,
                   "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';"
                   "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
                   "GRANT REPLICA MONITOR ON *.* TO 'seckill'@'127.0.0.1'") ||
        pmaria_sql(&world.replica,
                   "CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
                   "MASTER_PORT=%u, MASTER_USER='repl', "
                   "MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos, "
                   "MASTER_CONNECT_RETRY=1; START SLAVE",
                   (unsigned)world.db.port))
        return -1;
    pmaria_target(&world.db, &world.target);
    /* The replica has the schema and the user once it caught up. */
    for (int i = 0; i < 300 && !my; i++) {
        struct db_target t = world.target;
        int64_t n;

        t.port = world.replica.port;
        my = fdb_connect(&t, 2);
        if (my && fdb_scalar(my, &n, "SELECT COUNT(*) FROM voucher_orders")) {
            mysql_close(my);
            my = NULL;
        }
        if (!my)
            sleep_ms(100);
    }
    if (!my) {
        say_fail("the MariaDB replica did not catch up; log %s",
                 world.replica.log);
        return -1;
    }
    mysql_close(my);
    return 0;
}

/* ---- instances ---- */

static int instance_setup(int i)
{
    struct instance *in = &world.inst[i];
    char tag[32];
    int k = 0;

    snprintf(tag, sizeof(tag), "soak-app%d-mysql", i + 1);
    if (it_proxy_start(&in->px_mysql, tag, world.db.port))
        return -1;
    snprintf(tag, sizeof(tag), "soak-app%d-replica", i + 1);
    if (it_proxy_start(&in->px_replica, tag, world.replica.port))
        return -1;
    for (int r = 0; r < 2; r++) {
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
    ENV("SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:%u/"
        "seckill_fault",
        (unsigned)in->px_mysql.port);
    ENV("SECKILL_MYSQL_REPLICA_URL=mysql://seckill:seckill@127.0.0.1:%u/"
        "seckill_fault",
        (unsigned)in->px_replica.port);
    ENV("SECKILL_REDIS_URL=redis-sentinel://127.0.0.1:%u,127.0.0.1:%u,"
        "127.0.0.1:%u/" MASTER_NAME "/0",
        (unsigned)world.sentinel_port[0], (unsigned)world.sentinel_port[1],
        (unsigned)world.sentinel_port[2]);
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
    ENV("FAKETIME_TIMESTAMP_FILE=%s", in->clock_file);
    ENV("FAKETIME_CACHE_DURATION=1");
    ENV("FAKETIME_DONT_FAKE_MONOTONIC=1");
    /* A sanitizer build (tests/soak/run.sh sets these): the instances
     * report leaks at exit, and their runtime need not come first among
     * the preloads. */
    if (getenv("SOAK_ASAN_OPTIONS"))
        ENV("ASAN_OPTIONS=%s", getenv("SOAK_ASAN_OPTIONS"));
    ENV("SECKILL_REDIRECT=%u:%u,%u:%u", (unsigned)world.redis[0].port,
        (unsigned)in->px_redis[0].port, (unsigned)world.redis[1].port,
        (unsigned)in->px_redis[1].port);
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
    say("starting MariaDB, its replica, two Redis servers and three "
        "sentinels");
    if (mysql_start_all() || redis_start_all())
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

        it_proxy_stop(&in->px_mysql);
        it_proxy_stop(&in->px_replica);
        it_proxy_stop(&in->px_redis[0]);
        it_proxy_stop(&in->px_redis[1]);
    }
    for (int i = 0; i < 3; i++)
        if (world.sentinel[i] > 0) {
            kill(world.sentinel[i], SIGKILL);
            waitpid(world.sentinel[i], NULL, 0);
        }
    for (int k = 0; k < 2; k++) {
        predis_kill(&world.redis[k]);
        it_proxy_stop(&world.px_repl[k]);
    }
    pmaria_destroy(&world.replica);
    pmaria_destroy(&world.db);
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
