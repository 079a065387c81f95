/*
 * test_soldout.c - the voucher cache of the purchase (sale/vcache.c):
 * once a voucher is sold out (or not started, ended, not a seckill
 * voucher, or does not exist), purchases are refused from memory without
 * MySQL or Redis, and not charged to the rate limiter; when stock comes
 * back every instance sells again at once when the change is published,
 * and within the TTL when the message is lost or the subscriber was away.
 *
 * The same stall shows that requests that do need MySQL or Redis wait on
 * the task pool, never on A's (single) HTTP thread: probes and refusals
 * from memory go on meanwhile, and the waiting requests end in 503.
 *
 * Three instances: A reaches MySQL and Redis only through two TCP proxies
 * (tests/tools/tcpproxy.c), so the test can stall both and show that
 * refusals keep coming at full speed (any MySQL or Redis round trip would
 * hang for the 5 s I/O timeout); B talks to them directly; A and B trust a
 * sold-out flag for a minute, so only a message can heal them in time; C
 * trusts it for TTL_C_MS, to show that a lost message heals by the TTL.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "tests/it/harness.h"

#define USER_BASE 500000000000LL
/* A and B: long enough that only an invalidation explains a quick heal. */
#define TTL_LONG_MS 60000
#define TTL_C_MS 400
/* Purchases in a burst that must not touch MySQL or Redis. */
#define BURST 200
/* A refusal from memory takes well under this, also under ASan; one that
 * waits for a stalled backend takes the 5 s I/O timeout. */
#define FAST_MS 2500

enum { SRV_A, SRV_B, SRV_C, SRV_COUNT };
static struct it_server srvs[SRV_COUNT];
static struct it_server *const srv_a = &srvs[SRV_A];
static struct it_server *const srv_b = &srvs[SRV_B];
static struct it_server *const srv_c = &srvs[SRV_C];

/* A's way to MySQL and Redis. */
static struct it_proxy mysql_proxy, redis_proxy;

static int64_t user_base;
static int next_user;

/* A user id nobody used in this run. */
static int64_t fresh_user(void)
{
    return user_base + next_user++;
}

/* ---- set-up ---- */

static int group_setup(void **state)
{
    const struct store_config *sc;
    char *mysql_url = NULL, redis_url[256], mysql_env[300], redis_env[300];
    char ttl_long[64], ttl_c[64];
    int rc = -1;

    (void)state;
    it_init();
    user_base = USER_BASE + util_now_ms() % 100000000 * 100;
    sc = it_store_config();
    if (it_proxy_start(&mysql_proxy, "mysql", (uint16_t)sc->mysql_port) ||
        it_proxy_start(&redis_proxy, "redis", (uint16_t)sc->redis_port))
        return -1;
    mysql_url =
        it_mysql_url_with_port(getenv("SECKILL_MYSQL_URL"), mysql_proxy.port);
    if (!mysql_url || sc->redis_user) {
        fprintf(stderr, "soldout: cannot rewrite the backend URLs\n");
        goto out;
    }
    snprintf(redis_url, sizeof(redis_url), "redis://%s%s%s127.0.0.1:%u/%u",
             sc->redis_pass ? ":" : "", sc->redis_pass ? sc->redis_pass : "",
             sc->redis_pass ? "@" : "", (unsigned)redis_proxy.port,
             sc->redis_db);
    snprintf(mysql_env, sizeof(mysql_env), "SECKILL_MYSQL_URL=%s", mysql_url);
    snprintf(redis_env, sizeof(redis_env), "SECKILL_REDIS_URL=%s", redis_url);
    snprintf(ttl_long, sizeof(ttl_long), "SECKILL_SOLDOUT_TTL_MS=%d",
             TTL_LONG_MS);
    snprintf(ttl_c, sizeof(ttl_c), "SECKILL_SOLDOUT_TTL_MS=%d", TTL_C_MS);

    /* The default per-user rate (20 a second, bursts of 40): the bursts
     * below would be refused 429 if they reached the limiter. */
    /* A has one HTTP thread, so that a request that waited for a stalled
     * backend on it would hold up every other (see test_http_thread_free). */
    const char *env_a[] = {
        mysql_env,          redis_env,           ttl_long, "SECKILL_THREADS=1",
        "SECKILL_LOCK_URL", "SECKILL_RATE_USER", NULL};
    const char *env_b[] = {ttl_long, "SECKILL_RATE_USER", NULL};
    const char *env_c[] = {ttl_c, "SECKILL_RATE_USER", NULL};
    if (it_server_start(srv_a, "soldout-a", env_a) ||
        it_server_start(srv_b, "soldout-b", env_b) ||
        it_server_start(srv_c, "soldout-c", env_c))
        goto out;
    rc = 0;
out:
    free(mysql_url);
    return rc;
}

static int group_teardown(void **state)
{
    int rc;

    (void)state;
    /* A must reach its backends to stop cleanly. */
    if (mysql_proxy.pid > 0)
        it_proxy_ctl(&mysql_proxy, "heal");
    if (redis_proxy.pid > 0)
        it_proxy_ctl(&redis_proxy, "heal");
    rc = it_group_teardown(srvs, SRV_COUNT);
    it_proxy_stop(&mysql_proxy);
    it_proxy_stop(&redis_proxy);
    return rc;
}

/* After each test, also a failed one: A's backends answer again. */
static int heal_proxies(void **state)
{
    (void)state;
    return it_proxy_ctl(&mysql_proxy, "heal") == 0 &&
                   it_proxy_ctl(&redis_proxy, "heal") == 0
               ? 0
               : -1;
}

/* ---- helpers ---- */

/* Asserts that user buys voucher v on srv (201). */
static void buy(const struct it_server *srv, int64_t v, int64_t user)
{
    struct it_resp resp;

    it_purchase(srv, v, user, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
}

/* Asserts that user's purchase of v on srv is refused with code. */
static void refused(const struct it_server *srv, int64_t v, int64_t user,
                    long status, const char *code)
{
    struct it_resp resp;

    it_purchase(srv, v, user, &resp);
    it_assert_error(&resp, status, code);
    it_resp_free(&resp);
}

/*
 * n purchases of v on srv (by n fresh users, or all by one user when
 * user > 0): asserts that each is refused with status and code, and
 * within FAST_MS. Returns the slowest in milliseconds.
 */
static int64_t burst(const struct it_server *srv, int64_t v, int n,
                     int64_t user, long status, const char *code)
{
    int64_t slowest = 0;

    for (int i = 0; i < n; i++) {
        struct it_resp resp;
        int64_t t0 = util_mono_ms();

        it_purchase(srv, v, user > 0 ? user : fresh_user(), &resp);
        int64_t ms = util_mono_ms() - t0;
        if (ms > slowest)
            slowest = ms;
        it_assert_error(&resp, status, code);
        it_resp_free(&resp);
        if (ms >= FAST_MS)
            fail_msg("purchase %d of voucher %lld took %lld ms: it waited "
                     "for a backend",
                     i, (long long)v, (long long)ms);
    }
    return slowest;
}

/* Try until a fresh user buys v on srv; the milliseconds it took, or -1
 * if nobody could within limit_ms. */
static int64_t sells_within(const struct it_server *srv, int64_t v,
                            int64_t limit_ms)
{
    int64_t t0 = util_mono_ms();

    for (;;) {
        struct it_resp resp;
        long st = it_purchase(srv, v, fresh_user(), &resp);
        const char *code = json_string_value(
            json_object_get(json_object_get(resp.json, "error"), "code"));

        /* 503: a connection the test cut is being replaced. SOLD_OUT and
         * NOT_FOUND: the invalidation, published by the other instance
         * after its commit, reaches this one's subscriber a moment later
         * (pub/sub is asynchronous); the caller bounds how long. */
        if (st != 201 && st != 503 &&
            !(st == 409 && code && !strcmp(code, "SOLD_OUT")) &&
            !(st == 404 && code && !strcmp(code, "NOT_FOUND")))
            it_assert_status(&resp, 201); /* anything else is a failure */
        it_resp_free(&resp);
        if (st == 201)
            return util_mono_ms() - t0;
        if (util_mono_ms() - t0 > limit_ms)
            return -1;
        usleep(10 * 1000);
    }
}

/* Put stock back by hand in MySQL, as an admin tool would. */
static void restock(int64_t v, int64_t stock)
{
    assert_int_equal(0, it_sql_exec("UPDATE seckill_vouchers SET stock = "
                                    "%lld WHERE voucher_id = %lld",
                                    (long long)stock, (long long)v));
}

/* What an instance that changes stock does: PUBLISH the voucher id. */
static void publish_changed(int64_t v)
{
    redisContext *rc = it_redis_connect();
    redisReply *r = redisCommand(rc, "PUBLISH seckill:voucher-changed:%u %lld",
                                 it_store_config()->redis_db, (long long)v);

    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    freeReplyObject(r);
    redisFree(rc);
}

/*
 * Returns once A and B have handled every message published before the
 * call. Redis delivers a channel's messages to a subscriber in the order
 * they were published, so an instance that has handled a later message
 * has handled the earlier ones; a later message is seen when it heals a
 * sold-out flag. (Any message after the call heals it: this barrier
 * voucher's own creation notice or the publish below; without one, the
 * flag lasts TTL_LONG_MS.)
 */
static void messages_delivered(void)
{
    int64_t w = it_seckill_create(srv_b, it_unique(), 1, -60, 3600);

    buy(srv_b, w, fresh_user());
    refused(srv_a, w, fresh_user(), 409, "SOLD_OUT");
    refused(srv_b, w, fresh_user(), 409, "SOLD_OUT");
    restock(w, 2);
    publish_changed(w);
    assert_true(sells_within(srv_a, w, 10000) >= 0);
    assert_true(sells_within(srv_b, w, 10000) >= 0);
}

/* A seckill voucher with stock, on sale now, sold out on A, B and C: each
 * has a flag (their last purchase found no stock). The voucher's creation
 * notice is handled first: arriving late, it would drop the flags. */
static int64_t sold_out_everywhere(int64_t stock)
{
    int64_t v = it_seckill_create(srv_b, it_unique(), stock, -60, 3600);

    messages_delivered();
    for (int64_t i = 0; i < stock; i++)
        buy(i % 2 ? srv_a : srv_b, v, fresh_user());
    refused(srv_a, v, fresh_user(), 409, "SOLD_OUT");
    refused(srv_b, v, fresh_user(), 409, "SOLD_OUT");
    refused(srv_c, v, fresh_user(), 409, "SOLD_OUT");
    assert_int_equal(0, it_sql_stock(v));
    return v;
}

/* ---- tests ---- */

/*
 * With A's MySQL and Redis stalled, refusals of a sold-out, not started,
 * ended or normal voucher, and of an unknown id, still come at once: they
 * never wait for a backend.
 */
static void test_refused_without_backends(void **state)
{
    char normal[256];
    int64_t sold, early, late, plain, unknown, slowest = 0, ms;

    (void)state;
    early = it_seckill_create(srv_b, it_unique(), 5, 3600, 7200);
    late = it_seckill_create(srv_b, it_unique(), 5, -7200, -5);
    snprintf(normal, sizeof(normal),
             "{\"shopId\":%lld,\"title\":\"plain\",\"payValue\":1,"
             "\"actualValue\":2}",
             (long long)it_unique());
    plain = it_voucher_create(srv_b, normal);
    /* After the three creations: its own wait for A's subscriber also
     * covers their notices (one channel, delivered in order), which would
     * otherwise drop A's entries in the middle of the stall. */
    sold = sold_out_everywhere(2);
    unknown =
        it_sql_scalar("SELECT COALESCE(MAX(id), 0) FROM vouchers") + 1000000000;
    /* Once each, so that A has read them. */
    refused(srv_a, early, fresh_user(), 409, "NOT_STARTED");
    refused(srv_a, late, fresh_user(), 409, "ENDED");
    refused(srv_a, plain, fresh_user(), 409, "NOT_SECKILL");
    refused(srv_a, unknown, fresh_user(), 404, "NOT_FOUND");

    assert_true(it_proxy_ctl(&mysql_proxy, "stall") == 0);
    assert_true(it_proxy_ctl(&redis_proxy, "stall") == 0);
    ms = burst(srv_a, sold, BURST, 0, 409, "SOLD_OUT");
    slowest = ms > slowest ? ms : slowest;
    /* One user, far over the rate limit: never 429, never the limiter. */
    ms = burst(srv_a, sold, BURST, fresh_user(), 409, "SOLD_OUT");
    slowest = ms > slowest ? ms : slowest;
    ms = burst(srv_a, early, 20, 0, 409, "NOT_STARTED");
    slowest = ms > slowest ? ms : slowest;
    ms = burst(srv_a, late, 20, 0, 409, "ENDED");
    slowest = ms > slowest ? ms : slowest;
    ms = burst(srv_a, plain, 20, 0, 409, "NOT_SECKILL");
    slowest = ms > slowest ? ms : slowest;
    ms = burst(srv_a, unknown, 20, 0, 404, "NOT_FOUND");
    slowest = ms > slowest ? ms : slowest;
    print_message("%d refusals with MySQL and Redis stalled, slowest %lld "
                  "ms\n",
                  2 * BURST + 80, (long long)slowest);
    /* And a token is still checked first. */
    {
        char path[64];
        struct it_resp resp;
        snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
                 (long long)sold);
        it_http(srv_a, "POST", path, NULL, NULL, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
    }
    assert_true(it_proxy_ctl(&mysql_proxy, "resume") == 0);
    assert_true(it_proxy_ctl(&redis_proxy, "resume") == 0);
}

/* How many requests that need MySQL or Redis wait at once: more than
 * the task pool has threads (two per core), so some wait for a thread. */
#define STALLED 16
/* Each is answered within the request budget (10 s; after it, 503 at
 * once when a pool thread gets to it) plus what one request started just
 * before it can take against stalled backends: up to two I/O timeouts
 * (5 s each: the query, then the reconnect's handshake). */
#define STALLED_MAX_MS (10000 + 2 * 5000 + 2500)

/* STALLED requests that need MySQL or Redis, sent to A at once; exits 0
 * when every one ended in 503 with Retry-After within STALLED_MAX_MS. */
static void stalled_requests(int64_t v)
{
    char token[TOKEN_STR_LEN], voucher_path[64], order_path[64];
    const char *code_body = "{\"phone\":\"13800000000\"}";
    const struct it_req kinds[5] = {
        {.method = "GET", .path = voucher_path},
        {.method = "GET", .path = "/api/orders", .token = token},
        {.method = "GET", .path = order_path, .token = token},
        {.method = "POST", .path = "/api/auth/code", .body = code_body},
        {.method = "GET", .path = "/api/vouchers"},
    };
    struct it_req reqs[STALLED];
    const struct it_server *to[STALLED];
    struct it_resp resps[STALLED];
    double slowest = 0;
    int bad = 0;

    it_token(fresh_user(), TOKEN_ROLE_USER, 3600, token);
    snprintf(voucher_path, sizeof(voucher_path), "/api/vouchers/%lld",
             (long long)v);
    snprintf(order_path, sizeof(order_path), "/api/orders/%lld",
             (long long)it_unique());
    for (int i = 0; i < STALLED; i++) {
        reqs[i] = kinds[i % 5];
        reqs[i].timeout_s = 60;
        to[i] = srv_a;
    }
    it_http_run_all(reqs, to, resps, STALLED);
    for (int i = 0; i < STALLED; i++) {
        if (resps[i].status != 503 || !resps[i].retry_after[0] ||
            resps[i].elapsed_ms > STALLED_MAX_MS) {
            fprintf(stderr, "stalled %s %s: HTTP %ld after %.0f ms: %s\n",
                    reqs[i].method, reqs[i].path, resps[i].status,
                    resps[i].elapsed_ms, resps[i].body ? resps[i].body : "");
            bad = 1;
        }
        slowest = resps[i].elapsed_ms > slowest ? resps[i].elapsed_ms : slowest;
        it_resp_free(&resps[i]);
    }
    fprintf(stderr,
            "      %d requests that waited for stalled backends: "
            "all 503, the last after %.0f ms\n",
            STALLED, slowest);
    _exit(bad);
}

/*
 * With A's MySQL and Redis stalled, STALLED requests that need them (a
 * voucher, the orders, an order, a login code, the voucher list) wait on
 * the task pool; meanwhile A's only HTTP thread answers probes and
 * refusals from memory at once. Those requests end in 503: when the
 * backends' I/O timeout passes, or at once when a pool thread gets to
 * one after its budget.
 */
static void test_http_thread_free(void **state)
{
    int64_t sold = sold_out_everywhere(1), slowest = 0, t0;
    int status = -1;
    pid_t child;

    (void)state;
    assert_true(it_proxy_ctl(&mysql_proxy, "stall") == 0);
    assert_true(it_proxy_ctl(&redis_proxy, "stall") == 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0)
        stalled_requests(sold);
    /* Let them arrive and start waiting. */
    usleep(500 * 1000);
    t0 = util_mono_ms();
    for (int i = 0; i < 20; i++) {
        struct it_resp resp;
        int64_t t = util_mono_ms();

        it_http(srv_a, "GET", "/healthz", NULL, NULL, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
        refused(srv_a, sold, fresh_user(), 409, "SOLD_OUT");
        t = util_mono_ms() - t;
        slowest = t > slowest ? t : slowest;
    }
    print_message("40 probes and refusals in %lld ms while %d requests "
                  "waited for stalled backends, slowest pair %lld ms\n",
                  (long long)(util_mono_ms() - t0), STALLED,
                  (long long)slowest);
    /* A blocked HTTP thread would hold each for the 5 s I/O timeout. */
    assert_true(slowest < FAST_MS);
    assert_int_equal(child, waitpid(child, &status, 0));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(it_proxy_ctl(&mysql_proxy, "resume") == 0);
    assert_true(it_proxy_ctl(&redis_proxy, "resume") == 0);
}

/*
 * B's limiter is the real one: a user's purchases of a sold-out voucher
 * are not charged to their bucket, so the same user is not throttled
 * afterwards and no bucket key was written.
 */
static void test_rate_limit_not_spent(void **state)
{
    int64_t v = sold_out_everywhere(1), user = fresh_user();
    redisContext *rc;
    redisReply *r;

    (void)state;
    burst(srv_b, v, 100, user, 409, "SOLD_OUT");
    rc = it_redis_connect();
    r = redisCommand(rc, "EXISTS rate:user:%lld", (long long)user);
    assert_non_null(r);
    assert_int_equal(0, r->integer);
    freeReplyObject(r);
    redisFree(rc);
}

/* Stock back and published: A and B sell again at once, not after their
 * minute-long TTL. */
static void test_restock_published(void **state)
{
    int64_t v = sold_out_everywhere(2), ms_a, ms_b;

    (void)state;
    restock(v, 2);
    /* Still refused: nothing told them. */
    refused(srv_a, v, fresh_user(), 409, "SOLD_OUT");
    refused(srv_b, v, fresh_user(), 409, "SOLD_OUT");
    publish_changed(v);
    ms_a = sells_within(srv_a, v, 3000);
    ms_b = sells_within(srv_b, v, 3000);
    print_message("after the publish: A sold in %lld ms, B in %lld ms\n",
                  (long long)ms_a, (long long)ms_b);
    assert_true(ms_a >= 0 && ms_a < 2000);
    assert_true(ms_b >= 0 && ms_b < 2000);
    assert_int_equal(0, it_sql_stock(v));
    assert_int_equal(4, it_sql_order_count(v));
}

/* Stock back without a message: C (short TTL) sells within its TTL, while
 * B (long TTL) still refuses from its flag. */
static void test_missed_invalidation_heals(void **state)
{
    int64_t v = sold_out_everywhere(1), ms;

    (void)state;
    restock(v, 1);
    ms = sells_within(srv_c, v, 5 * TTL_C_MS + 2000);
    print_message("without a message: C (TTL %d ms) sold in %lld ms\n",
                  TTL_C_MS, (long long)ms);
    assert_true(ms >= 0);
    /* The TTL plus one background read, with room for a slow run. */
    assert_true(ms <= TTL_C_MS + 100 + 1500);
    /* The stock is gone again; give B one unit to show its stale flag. */
    restock(v, 1);
    refused(srv_b, v, fresh_user(), 409, "SOLD_OUT");
    assert_int_equal(1, it_sql_stock(v));
    publish_changed(v);
    assert_true(sells_within(srv_b, v, 3000) >= 0);
}

/* A's subscriber loses its connection: while it was away it may have
 * missed messages, so on reconnecting it drops everything. */
static void test_resubscribe_flushes(void **state)
{
    int64_t v = sold_out_everywhere(1), ms;

    (void)state;
    restock(v, 1);
    refused(srv_a, v, fresh_user(), 409, "SOLD_OUT");
    /* Reset every connection of A to Redis, its subscriber's too. */
    assert_true(it_proxy_ctl(&redis_proxy, "cut") == 0);
    ms = sells_within(srv_a, v, 5000);
    print_message("after the subscriber reconnected: A sold in %lld ms\n",
                  (long long)ms);
    assert_true(ms >= 0 && ms < 4000);
}

/*
 * Someone tries ids before their voucher exists (A remembers the 404s for
 * a minute); creating the voucher on B publishes its id, so A sells it at
 * once.
 */
static void test_create_drops_cached_404(void **state)
{
    enum { PROBES = 50 };
    int64_t next = it_sql_scalar("SELECT COALESCE(MAX(id), 0) FROM vouchers");
    int64_t v, ms;

    (void)state;
    for (int i = 1; i <= PROBES; i++)
        refused(srv_a, next + i, fresh_user(), 404, "NOT_FOUND");
    v = it_seckill_create(srv_b, it_unique(), 1, -60, 3600);
    if (v > next + PROBES) {
        /* Other clients created vouchers meanwhile: not conclusive. */
        print_message("voucher %lld is past the %d ids tried; skipped\n",
                      (long long)v, PROBES);
        skip();
    }
    ms = sells_within(srv_a, v, 3000);
    print_message("a voucher created on B sold on A in %lld ms\n",
                  (long long)ms);
    assert_true(ms >= 0 && ms < 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_refused_without_backends, heal_proxies),
        cmocka_unit_test_teardown(test_rate_limit_not_spent, heal_proxies),
        cmocka_unit_test_teardown(test_http_thread_free, heal_proxies),
        cmocka_unit_test_teardown(test_restock_published, heal_proxies),
        cmocka_unit_test_teardown(test_missed_invalidation_heals, heal_proxies),
        cmocka_unit_test_teardown(test_resubscribe_flushes, heal_proxies),
        cmocka_unit_test_teardown(test_create_drops_cached_404, heal_proxies),
    };

    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
