/*
 * faults.c - make test-faults: crash, stop, restart, slow down and cut
 * seckilld's instances and backends while clients buy, then check that
 * nothing was lost (docs/reliability.md). Each scenario starts its own
 * instances of the failpoint build (build/fp), sells one new voucher under
 * load from several client threads, injects its faults, heals, proves
 * every instance answers again without a restart, sells the rest of the
 * stock, and checks the six invariants. Prints a table; exits non-zero on
 * any violation.
 *
 *   faults [SCENARIO...]     (run from the repository root with
 *                             .run/env.test sourced; tests/faults/run.sh)
 *
 * The orders live in a private MariaDB the suite creates (and kills, in
 * one scenario); ids and locks in database 2 of the shared Redis, or in a
 * private redis-server where Redis is killed or paused. The shared servers
 * of scripts/services.sh are only ever slowed or cut through the proxy.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "idgen/idgen.h"
#include "sale/sale.h"
#include "tests/faults/faults.h"

static int64_t user_base;
struct pmaria suite_db;

/* ---- set-up helpers ---- */

static void run_init(struct run *r, const char *name, int index)
{
    const struct store_config *sc = it_store_config();

    memset(r, 0, sizeof(*r));
    r->name = name;
    r->index = index;
    for (int i = 0; i < INV_COUNT; i++)
        r->extra_ok[i] = true;
    fleet_init(&r->fleet);
    r->user_first = user_base + (int64_t)index * 10000000LL;
    pmaria_target(&suite_db, &r->db);
    r->lock_redis_port = (uint16_t)sc->redis_port;
    r->lock_redis_db = FAULTS_REDIS_DB;
    r->stock0 = STOCK;
}

void setup_fail(struct run *r, const char *fmt, ...)
{
    va_list ap;

    if (r->setup_failed)
        return;
    r->setup_failed = true;
    va_start(ap, fmt);
    vsnprintf(r->setup_why, sizeof(r->setup_why), fmt, ap);
    va_end(ap);
    say("SET-UP FAILED: %s", r->setup_why);
}

struct load_cfg default_load(void)
{
    struct load_cfg c = {
        .threads = 8,
        .think_ms = 150, /* ~50 users/s: stock left through the faults */
        .timeout_s = 5,
        .max_attempts = 6,
        .retry_ms = 300,
    };
    return c;
}

int pair_start(struct run *r, const char *const *env, struct load_cfg cfg)
{
    if (fleet_add(&r->fleet, "a", env, true) < 0 ||
        fleet_add(&r->fleet, "b", env, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return -1;
    }
    if (run_start(r, cfg)) {
        run_abort(r);
        return -1;
    }
    return 0;
}

int run_start(struct run *r, struct load_cfg cfg)
{
    struct it_server s = fleet_get(&r->fleet, 0);

    r->voucher = voucher_create(&s, r->stock0, r->async);
    if (r->voucher < 0) {
        setup_fail(r, "could not create the voucher");
        return -1;
    }
    cfg.voucher = r->voucher;
    cfg.user_first = r->user_first;
    sampler_start(&r->sampler, &r->db, r->voucher);
    load_start(&r->load, &r->fleet, &cfg);
    say("%svoucher %lld, stock %lld, %d client threads",
        r->async ? "async " : "", (long long)r->voucher, (long long)r->stock0,
        cfg.threads);
    return 0;
}

void run_abort(struct run *r)
{
    if (r->load.cfg.threads) {
        load_stop(&r->load);
        sampler_stop(&r->sampler);
    }
    fleet_stop(&r->fleet);
}

bool proc_stopped(pid_t pid)
{
    char path[64], buf[512];
    FILE *f;
    char *p;
    bool stopped = false;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return false;
    if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) && p[1] == ' ')
        stopped = p[2] == 'T' || p[2] == 't';
    fclose(f);
    return stopped;
}

/* GET key on the lock Redis into buf ("" when absent); -1 on failure. */
static int lock_get(struct run *r, const char *key, char *buf, size_t len,
                    long long *pttl)
{
    struct timeval tv = {2, 0};
    redisContext *rc =
        redisConnectWithTimeout("127.0.0.1", r->lock_redis_port, tv);
    redisReply *g = NULL, *t = NULL;
    int rcode = -1;

    if (!rc || rc->err)
        goto out;
    if (r->lock_redis_db)
        freeReplyObject(redisCommand(rc, "SELECT %u", r->lock_redis_db));
    g = redisCommand(rc, "GET %s", key);
    t = redisCommand(rc, "PTTL %s", key);
    if (!g || !t)
        goto out;
    snprintf(buf, len, "%s", g->type == REDIS_REPLY_STRING ? g->str : "");
    *pttl = t->type == REDIS_REPLY_INTEGER ? t->integer : -3;
    rcode = 0;
out:
    freeReplyObject(g);
    freeReplyObject(t);
    if (rc)
        redisFree(rc);
    return rcode;
}

/* ---- a request in a thread of its own ---- */

struct bg_purchase {
    pthread_t th;
    struct it_server srv;
    int inst;
    int64_t voucher, user;
    struct attempt a;
};

static void *bg_run(void *arg)
{
    struct bg_purchase *b = arg;

    purchase_once(&b->srv, b->inst, b->voucher, b->user, 60, &b->a);
    return NULL;
}

static void bg_start(struct bg_purchase *b, struct run *r, int inst,
                     int64_t user)
{
    memset(b, 0, sizeof(*b));
    b->srv = fleet_get(&r->fleet, inst);
    b->inst = inst;
    b->voucher = r->voucher;
    b->user = user;
    if (pthread_create(&b->th, NULL, bg_run, b) != 0)
        abort();
}

/* ---- the same request many times at once (curl multi) ---- */

#define BURST_MAX 64

static void burst(struct run *r, int64_t user, int copies)
{
    struct it_resp resp[BURST_MAX];
    struct attempt att[BURST_MAX];
    CURL *h[BURST_MAX];
    CURLM *m = curl_multi_init();
    char tok[TOKEN_STR_LEN], path[96];
    struct it_req req = {
        .method = "POST", .path = path, .token = tok, .timeout_s = 30};
    int running = 0, inst[BURST_MAX];
    CURLMsg *msg;
    int left;

    if (copies > BURST_MAX)
        copies = BURST_MAX;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)r->voucher);
    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    for (int i = 0; i < copies; i++) {
        struct it_server s;

        inst[i] = i % r->fleet.n;
        s = fleet_get(&r->fleet, inst[i]);
        h[i] = it_http_prepare(&s, &req, &resp[i]);
        curl_multi_add_handle(m, h[i]);
        memset(&att[i], 0, sizeof(att[i]));
        att[i].user = user;
        att[i].inst = inst[i];
        att[i].sent_ms = util_now_ms();
    }
    do {
        curl_multi_perform(m, &running);
        if (running)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    } while (running);
    while ((msg = curl_multi_info_read(m, &left))) {
        for (int i = 0; i < copies; i++) {
            if (msg->msg != CURLMSG_DONE || msg->easy_handle != h[i])
                continue;
            curl_multi_remove_handle(m, h[i]);
            it_http_complete(h[i], msg->data.result, &resp[i]);
            h[i] = NULL;
        }
    }
    for (int i = 0; i < copies; i++) {
        att[i].done_ms = util_now_ms();
        attempt_from_resp(&att[i], &resp[i]);
        load_record(&r->load, &att[i]);
        it_resp_free(&resp[i]);
    }
    curl_multi_cleanup(m);
}

/* Print what user was told, for a failed check. */
static void describe_user(struct run *r, int64_t user)
{
    char line[1024] = "";
    size_t len = 0;

    pthread_mutex_lock(&r->load.mu);
    for (size_t i = 0; i < r->load.n && len < sizeof(line) - 40; i++) {
        const struct attempt *a = &r->load.att[i];

        if (a->user == user)
            len += (size_t)snprintf(line + len, sizeof(line) - len,
                                    " %d:%ld%s%s", a->inst, a->status,
                                    a->code[0] ? "/" : "", a->code);
    }
    pthread_mutex_unlock(&r->load.mu);
    say("user %lld was told (instance:status/code):%s", (long long)user, line);
}

/* Exactly one order for each of n users from user_first (bursts). */
static void expect_one_order_each(struct run *r, int64_t user_first, int n)
{
    MYSQL *my = fdb_connect(&r->db, 5);
    int64_t count = -1;

    for (int u = 0; my && u < n; u++) {
        int64_t c = -1;

        if (fdb_scalar(my, &c,
                       "SELECT COUNT(*) FROM voucher_orders WHERE "
                       "voucher_id = %lld AND user_id = %lld",
                       (long long)r->voucher,
                       (long long)(user_first + u)) == 0 &&
            c != 1) {
            say("user %lld has %lld orders", (long long)(user_first + u),
                (long long)c);
            describe_user(r, user_first + u);
        }
    }

    if (!my ||
        fdb_scalar(my, &count,
                   "SELECT COUNT(*) FROM voucher_orders WHERE "
                   "voucher_id = %lld AND user_id BETWEEN %lld AND "
                   "%lld",
                   (long long)r->voucher, (long long)user_first,
                   (long long)(user_first + n - 1)) ||
        count != n)
        run_extra_fail(r, INV_ONE_EACH,
                       "%d users sent duplicates: %lld orders, want one "
                       "each",
                       n, (long long)count);
    if (my)
        mysql_close(my);
}

/* ---- the scenarios ---- */

/*
 * SIGKILL instance A at a failpoint of the purchase, three times, under
 * load on A and B; A is restarted each time, like a supervisor would.
 */
static void sc_kill_at(struct run *r, const char *point)
{
    char fp[96];
    const char *armed[] = {"SECKILL_THREADS=8", "SECKILL_LOCK_TTL_MS=2000", fp,
                           NULL};
    const char *plain[] = {"SECKILL_THREADS=8", "SECKILL_LOCK_TTL_MS=2000",
                           "SECKILL_FAILPOINTS", NULL};

    snprintf(fp, sizeof(fp), "SECKILL_FAILPOINTS=%s=kill@15", point);
    if (fleet_add(&r->fleet, "a", armed, true) < 0 ||
        fleet_add(&r->fleet, "b", plain, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return;
    }
    if (run_start(r, default_load()))
        return run_abort(r);
    for (int k = 0; k < 3; k++) {
        if (!fleet_wait_dead(&r->fleet, 0, 20000)) {
            setup_fail(r, "failpoint %s never fired", point);
            return run_abort(r);
        }
        r->faults++;
        say("instance a killed at %s (%d)", point, r->faults);
        sleep_ms(300);
        if (fleet_restart(&r->fleet, 0, k < 2 ? NULL : plain) != 0) {
            setup_fail(r, "instance a did not restart");
            return run_abort(r);
        }
    }
    sleep_ms(1000);
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
}

static void sc_kill_after_lock(struct run *r)
{
    sc_kill_at(r, "after_lock");
}

static void sc_kill_after_update(struct run *r)
{
    sc_kill_at(r, "after_update");
}

static void sc_kill_after_commit(struct run *r)
{
    sc_kill_at(r, "after_commit");
}

/*
 * A stops itself (SIGSTOP) holding user U's lock (lease 1 s); after the
 * lease, B takes U's lock and sleeps on it; A is continued and buys, and
 * its release must leave B's lock alone; B then finds the order.
 */
static void sc_sigstop(struct run *r)
{
    const char *a_env[] = {"SECKILL_THREADS=8", "SECKILL_LOCK_TTL_MS=1000",
                           "SECKILL_FAILPOINTS=after_lock=stop", NULL};
    const char *b_env[] = {"SECKILL_THREADS=8", "SECKILL_LOCK_TTL_MS=10000",
                           "SECKILL_FAILPOINTS=after_lock=sleep:2500", NULL};
    const char *c_env[] = {"SECKILL_THREADS=8", "SECKILL_FAILPOINTS", NULL};
    int64_t user = r->user_first + 9000000, deadline;
    struct bg_purchase pa, pb;
    char key[64], owner_b[64] = "", now[64];
    long long pttl = 0;
    struct it_server a;

    if (fleet_add(&r->fleet, "c", c_env, true) < 0 ||
        fleet_add(&r->fleet, "a", a_env, false) < 0 ||
        fleet_add(&r->fleet, "b", b_env, false) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return;
    }
    if (run_start(r, default_load()))
        return run_abort(r);
    sale_lock_name(key, r->voucher, user);
    a = fleet_get(&r->fleet, 1);

    bg_start(&pa, r, 1, user);
    deadline = util_mono_ms() + 5000;
    while (!proc_stopped(a.pid) && util_mono_ms() < deadline)
        sleep_ms(5);
    if (!proc_stopped(a.pid)) {
        setup_fail(r, "instance a did not stop at after_lock");
        kill(a.pid, SIGCONT);
        pthread_join(pa.th, NULL);
        return run_abort(r);
    }
    r->faults++;
    say("instance a stopped holding %s", key);
    sleep_ms(1300); /* past A's lease */
    if (lock_get(r, key, now, sizeof(now), &pttl) == 0 && now[0])
        run_extra_fail(r, INV_LIVE, "A's lock outlived its lease");

    bg_start(&pb, r, 2, user);
    deadline = util_mono_ms() + 3000;
    while (util_mono_ms() < deadline &&
           (lock_get(r, key, owner_b, sizeof(owner_b), &pttl) || !owner_b[0]))
        sleep_ms(5);
    if (!owner_b[0]) {
        setup_fail(r, "instance b did not take the lock");
        kill(a.pid, SIGCONT);
        pthread_join(pa.th, NULL);
        pthread_join(pb.th, NULL);
        return run_abort(r);
    }
    say("instance b holds %s; continuing a", key);
    kill(a.pid, SIGCONT);
    pthread_join(pa.th, NULL);
    load_record(&r->load, &pa.a);
    say("a answered %ld %s", pa.a.status, pa.a.code);
    if (lock_get(r, key, now, sizeof(now), &pttl) != 0 ||
        strcmp(now, owner_b) != 0 || pttl <= 0)
        run_extra_fail(r, INV_ONE_EACH,
                       "A's release removed B's lock (now \"%s\", pttl %lld)",
                       now, pttl);
    pthread_join(pb.th, NULL);
    load_record(&r->load, &pb.a);
    say("b answered %ld %s", pb.a.status, pb.a.code);
    if (!((pa.a.status == 201 && pb.a.status == 409) ||
          (pa.a.status == 409 && pb.a.status == 201)))
        run_extra_fail(r, INV_ONE_EACH, "A answered %ld, B %ld: want one 201",
                       pa.a.status, pb.a.status);
    expect_one_order_each(r, user, 1);
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
}

void private_redis_env(const struct predis *rd, char *url, size_t len)
{
    snprintf(url, len, "SECKILL_REDIS_URL=redis://127.0.0.1:%u/0",
             (unsigned)rd->port);
}

/* The instances' Redis (ids and locks) is SIGKILLed and restarted empty,
 * twice, under load. Ids after each loss must be greater than before. */
static void sc_redis_restart(struct run *r)
{
    struct predis rd = {0};
    char url[96];
    const char *env[] = {"SECKILL_THREADS=8", "SECKILL_LOCK_TTL_MS=2000", url,
                         "SECKILL_LOCK_URL", NULL};

    if (predis_start(&rd) != 0) {
        setup_fail(r, "private redis did not start");
        return;
    }
    private_redis_env(&rd, url, sizeof(url));
    r->lock_redis_port = rd.port;
    r->lock_redis_db = 0;
    if (pair_start(r, env, default_load())) {
        predis_kill(&rd);
        return;
    }
    sleep_ms(2000);
    for (int k = 0; k < 2; k++) {
        r->loss[r->nloss].before_ms = util_now_ms();
        predis_kill(&rd);
        r->faults++;
        say("redis killed");
        sleep_ms(300);
        if (predis_start(&rd) != 0) {
            setup_fail(r, "private redis did not restart");
            run_abort(r);
            return;
        }
        r->loss[r->nloss++].after_ms = util_now_ms();
        say("redis restarted empty");
        sleep_ms(2500);
    }
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    predis_kill(&rd);
}

/* Redis stops answering for longer than the clients' timeouts: DEBUG
 * SLEEP 6, then CLIENT PAUSE 6000. */
static void sc_redis_pause(struct run *r)
{
    struct predis rd = {0};
    char url[96];
    const char *env[] = {"SECKILL_THREADS=8", url, "SECKILL_LOCK_URL", NULL};

    if (predis_start(&rd) != 0) {
        setup_fail(r, "private redis did not start");
        return;
    }
    private_redis_env(&rd, url, sizeof(url));
    r->lock_redis_port = rd.port;
    r->lock_redis_db = 0;
    if (pair_start(r, env, default_load())) {
        predis_kill(&rd);
        return;
    }
    sleep_ms(1500);
    predis_fire(&rd, "DEBUG SLEEP 6");
    r->faults++;
    say("redis: DEBUG SLEEP 6");
    sleep_ms(7000);
    if (predis_run(rd.port, 0, "CLIENT PAUSE 6000 ALL") != 0)
        setup_fail(r, "CLIENT PAUSE failed");
    r->faults++;
    say("redis: CLIENT PAUSE 6000 ALL");
    sleep_ms(6500);
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    predis_kill(&rd);
}

/* The suite's MariaDB is SIGKILLed and restarted (crash recovery),
 * twice, under load. */
static void sc_mariadb_kill(struct run *r)
{
    const char *env[] = {"SECKILL_THREADS=8", "SECKILL_LOCK_TTL_MS=2000", NULL};

    if (pair_start(r, env, default_load()))
        return;
    sleep_ms(2000);
    for (int k = 0; k < 2; k++) {
        pmaria_kill(&suite_db);
        r->faults++;
        say("mariadb killed");
        sleep_ms(500);
        if (pmaria_start(&suite_db) != 0) {
            setup_fail(r, "mariadb did not restart");
            return run_abort(r);
        }
        say("mariadb restarted");
        sleep_ms(2500);
    }
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
}

/* Proxies in front of the shared Redis and the suite's MariaDB; env for
 * instances behind them. */
struct netpair {
    struct proxy redis, mysql;
    char redis_url[96], mysql_url[256];
};

static int netpair_start(struct run *r, struct netpair *np)
{
    const struct store_config *sc = it_store_config();

    if (proxy_start(&np->redis, "redis", (uint16_t)sc->redis_port) != 0 ||
        proxy_start(&np->mysql, "mysql", suite_db.port) != 0) {
        setup_fail(r, "tcpproxy did not start");
        return -1;
    }
    snprintf(np->redis_url, sizeof(np->redis_url),
             "SECKILL_REDIS_URL=redis://127.0.0.1:%u/%d",
             (unsigned)np->redis.port, FAULTS_REDIS_DB);
    snprintf(np->mysql_url, sizeof(np->mysql_url),
             "SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:%u/"
             "seckill_fault",
             (unsigned)np->mysql.port);
    return 0;
}

static void netpair_stop(struct netpair *np)
{
    proxy_stop(&np->redis);
    proxy_stop(&np->mysql);
}

static void ctl(struct run *r, struct proxy *p, const char *cmd)
{
    if (proxy_ctl(p, cmd) != 0)
        setup_fail(r, "proxy command %s failed", cmd);
}

/* Both instances reach Redis and MySQL through the proxy: latency 20 ms,
 * then 200 ms, then 1 s on MySQL (past the clients' patience). */
static void sc_slow_network(struct run *r)
{
    struct netpair np;
    const char *env[] = {"SECKILL_THREADS=8", np.redis_url, np.mysql_url,
                         "SECKILL_LOCK_URL", NULL};
    struct load_cfg cfg = default_load();

    if (netpair_start(r, &np) != 0)
        return netpair_stop(&np);
    if (pair_start(r, env, cfg))
        return netpair_stop(&np);
    sleep_ms(1000);
    ctl(r, &np.redis, "latency 20");
    ctl(r, &np.mysql, "latency 20");
    r->faults++;
    say("latency 20 ms");
    sleep_ms(2000);
    ctl(r, &np.redis, "latency 200");
    ctl(r, &np.mysql, "latency 200");
    r->faults++;
    say("latency 200 ms");
    sleep_ms(2500);
    ctl(r, &np.redis, "latency 0");
    ctl(r, &np.mysql, "latency 1000");
    r->faults++;
    say("mysql latency 1000 ms");
    sleep_ms(3000);
    ctl(r, &np.redis, "heal");
    ctl(r, &np.mysql, "heal");
    say("healed");
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    netpair_stop(&np);
}

/*
 * Instance A is behind the proxy, B talks to the backends directly: A's
 * MySQL link stalls for 6 s (past its 5 s read timeout, so COMMITs go
 * unanswered), every connection is cut, new ones are refused, then A's
 * Redis link stalls for 3 s.
 */
static void sc_broken_network(struct run *r)
{
    struct netpair np;
    const char *a_env[] = {"SECKILL_THREADS=8", np.redis_url, np.mysql_url,
                           "SECKILL_LOCK_URL", NULL};
    const char *b_env[] = {"SECKILL_THREADS=8", NULL};

    if (netpair_start(r, &np) != 0)
        return netpair_stop(&np);
    if (fleet_add(&r->fleet, "a", a_env, true) < 0 ||
        fleet_add(&r->fleet, "b", b_env, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return netpair_stop(&np);
    }
    if (run_start(r, default_load())) {
        run_abort(r);
        return netpair_stop(&np);
    }
    sleep_ms(1500);
    ctl(r, &np.mysql, "stall");
    r->faults++;
    say("a's mysql link stalled");
    sleep_ms(6000);
    ctl(r, &np.mysql, "resume");
    sleep_ms(1000);
    ctl(r, &np.mysql, "cut");
    ctl(r, &np.redis, "cut");
    r->faults++;
    say("a's connections cut");
    ctl(r, &np.mysql, "refuse");
    ctl(r, &np.redis, "refuse");
    r->faults++;
    say("a's new connections refused");
    sleep_ms(1500);
    ctl(r, &np.mysql, "accept");
    ctl(r, &np.redis, "accept");
    sleep_ms(1000);
    ctl(r, &np.redis, "stall");
    r->faults++;
    say("a's redis link stalled");
    sleep_ms(3000);
    ctl(r, &np.redis, "heal");
    ctl(r, &np.mysql, "heal");
    say("healed");
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    netpair_stop(&np);
}

/* 20 users each send the same purchase 50 times at once, over A and B,
 * beside the load: exactly one order each. */
static void sc_same_request(struct run *r)
{
    const char *env[] = {"SECKILL_THREADS=8", NULL};
    int64_t first = r->user_first + 8000000;
    struct load_cfg cfg = default_load();

    cfg.threads = 4;
    if (pair_start(r, env, cfg))
        return;
    for (int u = 0; u < 20; u++) {
        burst(r, first + u, 50);
        r->faults++;
    }
    say("20 bursts of 50 sent");
    expect_one_order_each(r, first, 20);
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
}

/*
 * A's MySQL link gets 700 ms of latency, so a purchase on A takes longer
 * than the clients' 2 s timeout: clients give up and retry, on A or on B
 * (direct). Exactly one order per user, whatever they were told.
 */
static void sc_retry_after_timeout(struct run *r)
{
    struct netpair np;
    const char *a_env[] = {"SECKILL_THREADS=8", np.mysql_url, NULL};
    const char *b_env[] = {"SECKILL_THREADS=8", NULL};
    struct load_cfg cfg = default_load();

    if (netpair_start(r, &np) != 0)
        return netpair_stop(&np);
    if (fleet_add(&r->fleet, "a", a_env, true) < 0 ||
        fleet_add(&r->fleet, "b", b_env, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return netpair_stop(&np);
    }
    cfg.timeout_s = 2;
    cfg.retry_ms = 200;
    cfg.max_attempts = 8;
    if (run_start(r, cfg)) {
        run_abort(r);
        return netpair_stop(&np);
    }
    sleep_ms(500);
    ctl(r, &np.mysql, "latency 700");
    r->faults++;
    say("a's mysql latency 700 ms, clients time out after 2 s");
    sleep_ms(7000);
    ctl(r, &np.mysql, "heal");
    say("healed");
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    netpair_stop(&np);
}

static int write_file(const char *path, const char *text)
{
    char tmp[IT_PATH_MAX + 8];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    return rename(tmp, path);
}

/* Every 201 id's time is the Redis server's, not a faked service clock. */
static void check_id_times(struct run *r)
{
    pthread_mutex_lock(&r->load.mu);
    for (size_t i = 0; i < r->load.n; i++) {
        const struct attempt *a = &r->load.att[i];
        int64_t t;
        uint32_t seq;

        if (a->status != 201)
            continue;
        idgen_decode(a->order_id, &t, &seq);
        if (t < a->sent_ms / 1000 - 5 || t > a->done_ms / 1000 + 5) {
            run_extra_fail(r, INV_IDS,
                           "id %lld has time %lld, answered at %lld",
                           (long long)a->order_id, (long long)t,
                           (long long)(a->done_ms / 1000));
            break;
        }
    }
    pthread_mutex_unlock(&r->load.mu);
}

/*
 * B runs under libfaketime, its clock read from a file that jumps: back
 * 90 s, ahead an hour, ahead a day, back a day, back to true. Same-user
 * bursts over A and B meanwhile. Ids stay unique and keep Redis' time;
 * the locks (leases kept by Redis) stay safe.
 */
static void sc_clock_jump(struct run *r)
{
    static const char *const jumps[] = {"-90", "+3600", "+1d", "-1d", "+0"};
    char file[IT_PATH_MAX], file_env[IT_PATH_MAX + 32];
    const char *lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    char preload[IT_PATH_MAX];
    const char *a_env[] = {"SECKILL_THREADS=8", NULL};
    const char *b_env[] = {"SECKILL_THREADS=8", preload, file_env,
                           "FAKETIME_CACHE_DURATION=1", NULL};
    int64_t first = r->user_first + 8000000;
    struct load_cfg cfg = default_load();
    int u = 0;

    if (access(lib, R_OK) != 0) {
        setup_fail(r, "%s missing (apt-get install faketime)", lib);
        return;
    }
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", lib);
    snprintf(file, sizeof(file), "%s/faketime-%d.rc", it_log_dir(),
             (int)getpid());
    snprintf(file_env, sizeof(file_env), "FAKETIME_TIMESTAMP_FILE=%s", file);
    if (write_file(file, "+0\n") != 0) {
        setup_fail(r, "cannot write %s", file);
        return;
    }
    if (fleet_add(&r->fleet, "a", a_env, true) < 0 ||
        fleet_add(&r->fleet, "b", b_env, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return;
    }
    cfg.threads = 6;
    if (run_start(r, cfg))
        return run_abort(r);
    for (size_t j = 0; j < sizeof(jumps) / sizeof(jumps[0]); j++) {
        char text[32];

        sleep_ms(1500);
        snprintf(text, sizeof(text), "%s\n", jumps[j]);
        write_file(file, text);
        r->faults++;
        say("instance b's clock: %s", jumps[j]);
        sleep_ms(1200); /* the cache duration, and some */
        for (int k = 0; k < 4; k++)
            burst(r, first + u++, 20);
    }
    expect_one_order_each(r, first, u);
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    check_id_times(r);
    unlink(file);
}

int log_lines(struct run *r, int i, const char *needle)
{
    struct it_server s = fleet_get(&r->fleet, i);
    FILE *f = fopen(s.log_path, "r");
    char line[4096];
    int n = 0;

    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

/*
 * A COMMIT is sent into a stalled link: A (behind the proxy, no load)
 * sleeps 1 s after the stock UPDATE (a failpoint), the link stalls
 * meanwhile, the COMMIT goes unanswered and A must answer 503 "outcome
 * unknown", never 201. The first time the link then resumes (the COMMIT
 * arrives late and commits), the second time it is cut (MySQL rolls back);
 * each user retries on B and must end with exactly one order.
 */
static void sc_ambiguous_commit(struct run *r)
{
    struct netpair np;
    const char *a_env[] = {"SECKILL_THREADS=8", np.mysql_url,
                           "SECKILL_FAILPOINTS=after_update=sleep:1000@1,"
                           "after_update=sleep:1000@2",
                           NULL};
    const char *b_env[] = {"SECKILL_THREADS=8", "SECKILL_FAILPOINTS", NULL};
    static const char *const ends[] = {"resume", "cut"};
    int64_t first = r->user_first + 8000000;

    if (netpair_start(r, &np) != 0)
        return netpair_stop(&np);
    if (fleet_add(&r->fleet, "b", b_env, true) < 0 ||
        fleet_add(&r->fleet, "a", a_env, false) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return netpair_stop(&np);
    }
    if (run_start(r, default_load())) {
        run_abort(r);
        return netpair_stop(&np);
    }
    for (int k = 0; k < 2; k++) {
        struct bg_purchase pa;
        struct attempt retry;
        struct it_server b = fleet_get(&r->fleet, 0);
        int64_t deadline = util_mono_ms() + 5000;

        sleep_ms(1000);
        bg_start(&pa, r, 1, first + k);
        while (log_lines(r, 1, "failpoint fired") <= k &&
               util_mono_ms() < deadline)
            sleep_ms(5);
        ctl(r, &np.mysql, "stall");
        r->faults++;
        say("a sleeps before its COMMIT; its mysql link stalled");
        pthread_join(pa.th, NULL);
        load_record(&r->load, &pa.a);
        say("a answered %ld %s%s", pa.a.status, pa.a.code,
            pa.a.ambiguous ? " (outcome unknown)" : "");
        if (pa.a.status != 503 || !pa.a.ambiguous)
            run_extra_fail(r, INV_201_KEPT,
                           "an unanswered COMMIT was answered %ld %s",
                           pa.a.status, pa.a.code);
        ctl(r, &np.mysql, ends[k]);
        say("a's link: %s", ends[k]);
        ctl(r, &np.mysql, "heal");
        sleep_ms(300);
        purchase_once(&b, 0, r->voucher, first + k, 5, &retry);
        load_record(&r->load, &retry);
        say("the retry on b answered %ld %s", retry.status, retry.code);
    }
    expect_one_order_each(r, first, 2);
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
    netpair_stop(&np);
}

/* ---- the order lifecycle: expiry under faults ---- */

/* How many of the scenario's orders have status st. -1 if MySQL failed. */
static int64_t orders_with_status(struct run *r, int st)
{
    MYSQL *my = fdb_connect(&r->db, 2);
    int64_t n = -1;

    if (my && fdb_scalar(my, &n,
                         "SELECT COUNT(*) FROM voucher_orders WHERE "
                         "voucher_id = %lld AND status = %d",
                         (long long)r->voucher, st) != 0)
        n = -1;
    if (my)
        mysql_close(my);
    return n;
}

/* Poll until the voucher has no unpaid order (every one expired), at most
 * timeout_ms; true if so. */
static bool wait_all_expired(struct run *r, int timeout_ms)
{
    int64_t deadline = util_mono_ms() + timeout_ms;

    while (util_mono_ms() < deadline) {
        if (orders_with_status(r, 1) == 0)
            return true;
        sleep_ms(200);
    }
    return false;
}

/* Sell the voucher out fast (no pause between users), then pause the
 * load; false if it did not sell out within 20 s. */
static bool sell_out_then_pause(struct run *r)
{
    struct load_cfg c = default_load();
    int64_t deadline;

    c.think_ms = 0;
    if (run_start(r, c))
        return false;
    deadline = util_mono_ms() + 20000;
    while (util_mono_ms() < deadline && orders_with_status(r, 1) < STOCK)
        sleep_ms(100);
    for (int i = 0; i < r->fleet.n; i++)
        fleet_set_load(&r->fleet, i, false);
    return orders_with_status(r, 1) == STOCK;
}

/* Replace instance i (alive or not) by one with env. 0 or -1. */
static int fleet_replace(struct fleet *f, int i, const char *const *env)
{
    struct it_server s = fleet_get(f, i);

    if (s.pid > 0 && !fleet_dead(f, i)) {
        kill(s.pid, SIGTERM);
        if (!fleet_wait_dead(f, i, 15000))
            return -1;
    }
    return fleet_restart(f, i, env);
}

/* After the expiry phase: every order of the first sale expired exactly
 * once (stock back to the full STOCK: no unit returned twice, none
 * lost), then the instances come back with the default pay timeout and
 * the drain sells the stock again. */
static void expiry_then_drain(struct run *r, const char *const *env)
{
    int64_t expired;

    if (!wait_all_expired(r, 20000)) {
        run_extra_fail(r, INV_LIVE,
                       "%lld orders still unpaid 20 s after "
                       "their deadline",
                       (long long)orders_with_status(r, 1));
    }
    expired = orders_with_status(r, 7);
    say("expired %lld of %d orders", (long long)expired, STOCK);
    if (expired != STOCK)
        run_extra_fail(r, INV_STOCK, "%lld of %d orders expired",
                       (long long)expired, STOCK);
    for (int i = 0; i < r->fleet.n; i++)
        if (fleet_replace(&r->fleet, i, env) != 0) {
            setup_fail(r, "instance %d did not restart", i);
            return run_abort(r);
        }
    run_finish(r, RECOVER_BOUND_MS, DRAIN_MS);
}

/*
 * Instance a is SIGKILLed in the middle of an expiry batch (its orders
 * closed, nothing committed): MySQL rolls that batch back when a's
 * connection drops, and b's expiry, which skipped the rows a held,
 * closes them instead. Every order expires once; the stock is whole.
 */
static void sc_kill_mid_expiry(struct run *r)
{
    const char *armed[] = {
        "SECKILL_LOCK_TTL_MS=2000", "SECKILL_PAY_TIMEOUT_S=4",
        "SECKILL_FAILPOINTS=expire_before_commit=kill@1", NULL};
    const char *plain4[] = {"SECKILL_LOCK_TTL_MS=2000",
                            "SECKILL_PAY_TIMEOUT_S=4", "SECKILL_FAILPOINTS",
                            NULL};
    const char *after[] = {"SECKILL_LOCK_TTL_MS=2000", "SECKILL_PAY_TIMEOUT_S",
                           "SECKILL_FAILPOINTS", NULL};

    if (fleet_add(&r->fleet, "a", armed, true) < 0 ||
        fleet_add(&r->fleet, "b", plain4, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return;
    }
    if (!sell_out_then_pause(r)) {
        setup_fail(r, "the first sale did not sell out");
        return run_abort(r);
    }
    if (!fleet_wait_dead(&r->fleet, 0, 15000)) {
        setup_fail(r, "failpoint expire_before_commit never fired");
        return run_abort(r);
    }
    r->faults++;
    say("instance a killed in the middle of an expiry batch");
    expiry_then_drain(r, after);
}

/*
 * The suite's MariaDB is SIGKILLed while orders are expiring (right at
 * the first deadlines, and again a second later) and restarted: the
 * expiry picks up after the crash recovery, and every order expires
 * exactly once.
 */
static void sc_mariadb_kill_expiry(struct run *r)
{
    const char *env4[] = {"SECKILL_LOCK_TTL_MS=2000", "SECKILL_PAY_TIMEOUT_S=4",
                          NULL};
    const char *after[] = {"SECKILL_LOCK_TTL_MS=2000", "SECKILL_PAY_TIMEOUT_S",
                           NULL};
    int64_t sold_at;

    if (fleet_add(&r->fleet, "a", env4, true) < 0 ||
        fleet_add(&r->fleet, "b", env4, true) < 0) {
        setup_fail(r, "instances did not start");
        fleet_stop(&r->fleet);
        return;
    }
    if (!sell_out_then_pause(r)) {
        setup_fail(r, "the first sale did not sell out");
        return run_abort(r);
    }
    sold_at = util_mono_ms();
    /* The first orders were bought about a second before the last. */
    while (orders_with_status(r, 7) <= 0 && util_mono_ms() < sold_at + 8000)
        sleep_ms(50);
    for (int k = 0; k < 2; k++) {
        pmaria_kill(&suite_db);
        r->faults++;
        say("mariadb killed while orders expire");
        sleep_ms(500);
        if (pmaria_start(&suite_db) != 0) {
            setup_fail(r, "mariadb did not restart");
            return run_abort(r);
        }
        say("mariadb restarted");
        sleep_ms(1000);
    }
    expiry_then_drain(r, after);
}

/* ---- the table ---- */

struct scenario {
    const char *name;
    void (*fn)(struct run *r);
};

static const struct scenario scenarios[] = {
    {"kill-after-lock", sc_kill_after_lock},
    {"kill-after-update", sc_kill_after_update},
    {"kill-after-commit", sc_kill_after_commit},
    {"sigstop-lock-holder", sc_sigstop},
    {"redis-restart", sc_redis_restart},
    {"redis-pause", sc_redis_pause},
    {"mariadb-kill", sc_mariadb_kill},
    {"slow-network", sc_slow_network},
    {"broken-network", sc_broken_network},
    {"ambiguous-commit", sc_ambiguous_commit},
    {"same-request-x50", sc_same_request},
    {"retry-after-timeout", sc_retry_after_timeout},
    {"clock-jump", sc_clock_jump},
    {"kill-mid-expiry", sc_kill_mid_expiry},
    {"mariadb-kill-expiry", sc_mariadb_kill_expiry},
    /* Last: their vouchers are retired when they end, but a writer that
     * met one could still look after it. */
    {"async-kill-writer", sc_async_kill_writer},
    {"async-mysql-down", sc_async_mysql_down},
    {"async-redis-aof", sc_async_redis_aof},
    {"async-redis-older", sc_async_redis_older},
    {"async-pause-writer", sc_async_pause_writer},
    {"async-unit-returns", sc_async_unit_returns},
    {"async-owed-unit", sc_async_owed_unit},
    {"async-return-between-reads", sc_async_return_between_reads},
    {"async-late-preheat", sc_async_late_preheat},
};

#define NSCEN (sizeof(scenarios) / sizeof(scenarios[0]))

static bool run_passed(const struct run *r)
{
    if (r->setup_failed || !r->recovered)
        return false;
    for (int i = 0; i < INV_COUNT; i++)
        if (!r->ok[i])
            return false;
    return true;
}

static void print_table(struct run *runs, size_t n)
{
    printf("\n%-20s %5s %6s %5s %5s %4s %4s %4s %6s %12s %7s  %-20s %4s "
           "%s\n",
           "scenario", "reqs", "faults", "2xx", "4xx", "503", "unkn", "amb",
           "orders", "stock", "recover", "inv 1 2 3 4 5 6 7", "secs", "result");
    for (size_t k = 0; k < n; k++) {
        struct run *r = &runs[k];
        char stock[24], inv[40] = "", rec[16];

        snprintf(stock, sizeof(stock), "%lld>%lld>%lld", (long long)r->stock0,
                 (long long)r->stock_at_heal, (long long)r->stock_final);
        if (r->recovered)
            snprintf(rec, sizeof(rec), "%lldms", (long long)r->recover_ms);
        else
            snprintf(rec, sizeof(rec), "NO");
        for (int i = 0; i < INV_COUNT; i++)
            strcat(inv, r->setup_failed || (i == INV_ASYNC && !r->async) ? " -"
                        : r->ok[i]                                       ? " ok"
                                   : " XX");
        printf("%-20s %5zu %6d %5zu %5zu %4zu %4zu %4d %6lld %12s %7s %-21s "
               "%4lld %s\n",
               r->name, r->requests, r->faults, r->nsold, r->n4xx, r->n503,
               r->nindef, r->ambiguous, (long long)r->orders, stock, rec, inv,
               (long long)r->secs, run_passed(r) ? "PASS" : "FAIL");
    }
    printf("\ninvariants: 1 stock + unpaid + paid == initial, never "
           "negative; 2 one active order per user;\n  3 every 201 and 202 "
           "an order in MySQL, of its user; 4 a definite 4xx (or 503\n  "
           "unavailable) left no order; 5 ids never reused; 6 stock sold "
           "out after healing, no lock key\n  without a TTL; 7 (async "
           "sales) the stream and pending orders drained, no dead letter,\n"
           "  Redis' stock and buyers equal MySQL's stock and active orders.\n"
           "2xx = 201 (an order) or 202 (pending: an async sale's order); "
           "503 = backend unavailable\n  (nothing written); unkn = no "
           "answer, 500, or 503 \"outcome unknown\"; amb = purchases whose "
           "COMMIT\n  or script went unanswered (logs); stock = "
           "initial>when healed>final (MySQL); secs = run time.\n");
    for (size_t k = 0; k < n; k++) {
        struct run *r = &runs[k];

        if (r->note[0])
            printf("%s: %s\n", r->name, r->note);
        if (r->setup_failed)
            printf("%s: set-up failed: %s\n", r->name, r->setup_why);
        if (!r->setup_failed && !r->recovered)
            printf("%s: an instance gave no definite answer within %d ms of "
                   "healing\n",
                   r->name, RECOVER_BOUND_MS);
        for (int i = 0; i < INV_COUNT; i++)
            if (!r->setup_failed && !r->ok[i])
                printf("%s: invariant %d: %s\n", r->name, i + 1, r->why[i]);
    }
}

/*
 * The suite's MariaDB is new each run, so its voucher ids would start at
 * 1 again, while an async sale's state in the shared Redis ({v:ID}:...)
 * outlives the run: a new sale would find an old one's. Start this run's
 * ids at first instead. 0 or -1.
 */
static int voucher_ids_start(int64_t first)
{
    struct db_target t;
    MYSQL *my;
    unsigned err = 1;

    pmaria_target(&suite_db, &t);
    my = fdb_connect(&t, 5);
    if (my)
        err = fdb_exec(my, "ALTER TABLE vouchers AUTO_INCREMENT = %lld",
                       (long long)first);
    if (err)
        fprintf(stderr, "faults: could not set the first voucher id\n");
    if (my)
        mysql_close(my);
    return err ? -1 : 0;
}

static bool wanted(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

int main(int argc, char **argv)
{
    static struct run runs[NSCEN];
    size_t n = 0;
    int64_t start = util_mono_ms();
    bool all = true;

    it_init();
    if (mysql_library_init(0, NULL, NULL) != 0) {
        fprintf(stderr, "faults: mysql_library_init failed\n");
        return 1;
    }
    if (!getenv("SECKILL_MYSQL_URL") || !getenv("SECKILL_SECRET")) {
        fprintf(stderr, "faults: source .run/env.test first "
                        "(tests/faults/run.sh does)\n");
        return 2;
    }
    it_store_config();
    it_secret();
    snprintf(faults_redis_env, sizeof(faults_redis_env),
             "SECKILL_REDIS_URL=redis://%s:%u/%d",
             it_store_config()->redis_host, it_store_config()->redis_port,
             FAULTS_REDIS_DB);
    say("starting the suite's MariaDB");
    if (pmaria_create(&suite_db) != 0) {
        pmaria_destroy(&suite_db);
        return 1;
    }
    snprintf(faults_mysql_env, sizeof(faults_mysql_env),
             "SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:%u/"
             "seckill_fault",
             (unsigned)suite_db.port);
    /* Users of this run, far from the other tests' (and other runs'). */
    user_base = 400000000000LL + util_now_ms() % 1000000 * 1000000000LL;
    if (voucher_ids_start(util_now_ms() % 1000000000 * 1000 + 1) != 0) {
        pmaria_destroy(&suite_db);
        return 1;
    }
    for (size_t k = 0; k < NSCEN; k++) {
        struct run *r = &runs[n];
        int64_t t0 = util_mono_ms();

        if (!wanted(argc, argv, scenarios[k].name))
            continue;
        fprintf(stderr, "=== %s\n", scenarios[k].name);
        run_init(r, scenarios[k].name, (int)k);
        scenarios[k].fn(r);
        if (!r->setup_failed && r->load.n == 0)
            setup_fail(r, "no requests were sent");
        if (!r->setup_failed && r->stock_at_heal == 0)
            setup_fail(r, "sold out before the faults healed: they met no "
                          "purchase (lower the load or raise the stock)");
        r->secs = (util_mono_ms() - t0 + 500) / 1000;
        fprintf(stderr, "=== %s: %s (%lld s)\n", r->name,
                run_passed(r) ? "pass" : "FAIL", (long long)r->secs);
        all = all && run_passed(r);
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "faults: no scenario matches\n");
        pmaria_destroy(&suite_db);
        return 2;
    }
    print_table(runs, n);
    printf("%zu scenario(s) in %lld s: %s\n", n,
           (long long)(util_mono_ms() - start) / 1000,
           all ? "all invariants held" : "VIOLATIONS");
    for (size_t k = 0; k < n; k++)
        load_free(&runs[k].load);
    pmaria_destroy(&suite_db);
    mysql_library_end();
    return all ? 0 : 1;
}
