/*
 * test_async.c - the asynchronous purchase mode over HTTP against the real
 * binary, checked in MySQL and Redis once the writers have drained: every
 * 202 becomes exactly one order, orders = initial stock - stock, no user
 * twice, the stock never negative, and Redis' state agrees with MySQL.
 *
 * Instances: A and B (async by default, sharing the test Redis, which
 * keeps writes with appendfsync everysec, so they accept that loss) for
 * the crowd over two processes; C (the same, with a backlog bound of 12).
 * All three reach MySQL through a proxy the test cuts, since every
 * instance's writer drains every sale: MySQL away while sales go on. All
 * three look after a sale from MySQL's list until LOOKBACK_S after its
 * end; orders still waiting after that are found through the index of
 * sales with work. Two more, started by test_twins_*, run in UTS and PID
 * namespaces of their own (it_server_start_ns(), as root), as two
 * containers of one deployment, and reach MySQL directly while the
 * proxy keeps A, B and C away. Start-up refusal runs the binary against
 * a Redis without durable writes and one with them.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/it/harness.h"
#include "tests/it/promtext.h"

#define USER_BASE 270000000000LL
#define CROWD_STOCK 100
#define CROWD_USERS 500
#define CROWD_PER_USER 3
#define CROWD_REQUESTS (CROWD_USERS * CROWD_PER_USER)
#define PAY_TIMEOUT_S 3
#define C_BACKLOG 12
/* How long the writers get to drain a sale. */
#define DRAIN_MS 15000
/* A sale repaired by the reconciliation sells again this soon (it looks
 * every 2 s and acts on the same disagreement seen twice). */
#define REPAIR_MS 15000

static struct it_server srv[3]; /* A, B, C */
/* Two instances in namespaces of their own (test_twins_*). */
static struct it_server twin[2];
static struct it_proxy mysql_proxy;
static char mysql_set[1024];
static int64_t next_user;

/* The writers look after a sale until 2 s after its end (in MySQL); what
 * is still to be written after that they find through the index of sales
 * with work. */
#define LOOKBACK_S 2
static const char *env_ab[] = {"SECKILL_PURCHASE_MODE=async",
                               "SECKILL_ASYNC_ACCEPT_LOSS=1",
                               "SECKILL_PAY_TIMEOUT_S=3",
                               "SECKILL_DEV=1",
                               "SECKILL_RATE_USER=0",
                               "SECKILL_ASYNC_LOOKBACK_S=2",
                               mysql_set,
                               NULL};

/* A trigger that refuses some sales' orders in MySQL (their writes fail
 * and are retried, while everything else, reads included, works). */
#define HOLD_TRIGGER "test_async_hold"

static int group_setup(void **state)
{
    const struct store_config *sc;
    char *url;
    const char *env_c[] = {"SECKILL_PURCHASE_MODE=async",
                           "SECKILL_ASYNC_ACCEPT_LOSS=1",
                           "SECKILL_ASYNC_BACKLOG_MAX=12",
                           "SECKILL_RATE_USER=0",
                           "SECKILL_DEV=1",
                           "SECKILL_ASYNC_LOOKBACK_S=2",
                           mysql_set,
                           NULL};

    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    sc = it_store_config();
    if (it_proxy_start(&mysql_proxy, "async-mysql", (uint16_t)sc->mysql_port))
        return -1;
    url = it_mysql_url_with_port(getenv("SECKILL_MYSQL_URL"), mysql_proxy.port);
    snprintf(mysql_set, sizeof(mysql_set), "SECKILL_MYSQL_URL=%s", url);
    free(url);
    if (it_server_start(&srv[0], "async-a", env_ab) != 0)
        return -1;
    if (it_server_start(&srv[1], "async-b", env_ab) != 0 ||
        it_server_start(&srv[2], "async-c", env_c) != 0) {
        it_group_teardown(srv, 3);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    it_sql_exec("DROP TRIGGER IF EXISTS " HOLD_TRIGGER);
    it_proxy_ctl(&mysql_proxy, "heal");
    for (int i = 0; i < 2; i++)
        it_server_stop(&twin[i]);
    int rc = it_group_teardown(srv, 3);
    it_proxy_stop(&mysql_proxy);
    return rc;
}

/* ---- helpers ---- */

/* A seckill voucher in mode ("async", "sync", or NULL: the default). The
 * sales end within minutes: every instance on the test database keeps
 * reconciling an async sale until its look-back after its end (an hour
 * by default). */
static int64_t sale_create(const struct it_server *s, int64_t stock,
                           int64_t begin_off_s, int64_t end_off_s,
                           const char *mode)
{
    char body[512], b[40], e[40], m[40] = "";

    if (mode)
        snprintf(m, sizeof(m), ",\"purchaseMode\":\"%s\"", mode);
    snprintf(body, sizeof(body),
             "{\"shopId\":1,\"title\":\"async\",\"payValue\":100,"
             "\"actualValue\":200,\"type\":\"seckill\",\"stock\":%lld,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\"%s}",
             (long long)stock, it_time(begin_off_s, b), it_time(end_off_s, e),
             m);
    return it_voucher_create(s, body);
}

/* A 202 from s for user: the pending order's id. */
static int64_t buy(const struct it_server *s, int64_t v, int64_t user)
{
    struct it_resp resp;
    int64_t id;

    it_purchase(s, v, user, &resp);
    it_assert_status(&resp, 202);
    assert_string_equal("pending", it_json_str(resp.json, "status"));
    id = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    return id;
}

static long long redis_int(redisContext *rc, const char *fmt, int64_t v)
{
    redisReply *r = redisCommand(rc, fmt, (long long)v);
    long long n = -1;

    assert_non_null(r);
    if (r->type == REDIS_REPLY_INTEGER)
        n = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        n = atoll(r->str);
    freeReplyObject(r);
    return n;
}

static int64_t active_orders(int64_t v)
{
    return it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                         "voucher_id = %lld AND status IN (1, 2)",
                         (long long)v);
}

/*
 * Wait until v's stream is empty, nothing is pending and no unit is owed
 * back to Redis (a cancel or an expiry returns it just after its commit),
 * then check the invariants in MySQL and that Redis agrees: stock +
 * active orders = initial, stock >= 0, no user twice, Redis' stock and
 * buyers = MySQL's.
 */
static void assert_drained(int64_t v, int64_t initial)
{
    redisContext *rc = it_redis_connect();
    int64_t until = util_mono_ms() + DRAIN_MS;
    long long backlog, pending, owed = 0;

    do {
        backlog = redis_int(rc, "XLEN {v:%lld}:stream", v);
        pending = redis_int(rc, "HLEN {v:%lld}:pending", v);
        owed = it_sql_scalar("SELECT COUNT(*) FROM async_unit_returns "
                             "WHERE voucher_id = %lld",
                             (long long)v);
        if (backlog == 0 && pending == 0 && owed == 0)
            break;
        usleep(50 * 1000);
    } while (util_mono_ms() < until);
    if (backlog || pending)
        print_error("voucher %lld: %lld orders still in the stream, %lld "
                    "pending after %d ms\n",
                    (long long)v, backlog, pending, DRAIN_MS);
    assert_int_equal(0, backlog);
    assert_int_equal(0, pending);
    assert_int_equal(0, owed);

    int64_t stock = it_sql_stock(v), active = active_orders(v);
    if (stock + active != initial)
        print_error("voucher %lld: stock %lld + active orders %lld != %lld\n",
                    (long long)v, (long long)stock, (long long)active,
                    (long long)initial);
    assert_int_equal(initial, stock + active);
    assert_true(stock >= 0);
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT user_id "
                                      "FROM voucher_orders WHERE voucher_id "
                                      "= %lld AND status IN (1, 2) GROUP BY "
                                      "user_id HAVING COUNT(*) > 1) d",
                                      (long long)v));
    assert_int_equal(stock, redis_int(rc, "GET {v:%lld}:stock", v));
    assert_int_equal(active, redis_int(rc, "SCARD {v:%lld}:buyers", v));
    redisFree(rc);
}

static int64_t order_status(int64_t order)
{
    return it_sql_scalar(
        "SELECT COALESCE(MAX(status), 0) FROM voucher_orders WHERE id = %lld",
        (long long)order);
}

/* Wait until order is in MySQL (status != 0); its status. */
static int64_t order_written(int64_t order)
{
    int64_t until = util_mono_ms() + DRAIN_MS, st;

    while ((st = order_status(order)) == 0 && util_mono_ms() < until)
        usleep(20 * 1000);
    return st;
}

static long order_read(const struct it_server *s, int64_t order, int64_t user,
                       struct it_resp *resp)
{
    char tok[TOKEN_STR_LEN], path[64];

    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)order);
    return it_http(s, "GET", path, NULL, tok, resp);
}

static long order_post(const struct it_server *s, int64_t order,
                       const char *action, int64_t user, struct it_resp *resp)
{
    char tok[TOKEN_STR_LEN], path[96];

    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/orders/%lld/%s", (long long)order,
             action);
    return it_http(s, "POST", path, NULL, tok, resp);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* ---- the sale ---- */

static void test_voucher_mode(void **state)
{
    int64_t a = sale_create(&srv[0], 5, -60, 600, NULL);
    int64_t s = sale_create(&srv[0], 5, -60, 600, "sync");
    struct it_resp resp;
    char path[64];

    (void)state;
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)a);
    it_http(&srv[1], "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("async", it_json_str(resp.json, "purchaseMode"));
    it_resp_free(&resp);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)s);
    it_http(&srv[1], "GET", path, NULL, NULL, &resp);
    assert_string_equal("sync", it_json_str(resp.json, "purchaseMode"));
    it_resp_free(&resp);
    /* A sync voucher on an async instance answers 201 as ever. */
    it_purchase(&srv[0], s, next_user++, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);

    char tok[TOKEN_STR_LEN], b[40], e[40], body[512];
    it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
    snprintf(body, sizeof(body),
             "{\"shopId\":1,\"title\":\"x\",\"payValue\":1,\"actualValue\":2,"
             "\"type\":\"seckill\",\"stock\":1,\"beginTime\":\"%s\","
             "\"endTime\":\"%s\",\"purchaseMode\":\"later\"}",
             it_time(-60, b), it_time(60, e));
    it_http(&srv[0], "POST", "/api/vouchers", body, tok, &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    assert_non_null(
        strstr(it_json_str(json_object_get(resp.json, "error"), "message"),
               "purchaseMode"));
    it_resp_free(&resp);
}

static void test_crowd(void **state)
{
    struct it_req *reqs = xcalloc(CROWD_REQUESTS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(CROWD_REQUESTS, sizeof(*resps));
    const struct it_server **to = xcalloc(CROWD_REQUESTS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(CROWD_USERS, sizeof(*tokens));
    int64_t ids[CROWD_STOCK], base = next_user;
    int wins[CROWD_USERS] = {0};
    size_t n202 = 0, other = 0;
    int64_t v = sale_create(&srv[0], CROWD_STOCK, -60, 600, "async");
    char path[96];

    (void)state;
    next_user += CROWD_USERS;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (size_t i = 0; i < CROWD_USERS; i++)
        it_token(base + (int64_t)i, TOKEN_ROLE_USER, 3600, tokens[i]);
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        reqs[i].method = "POST";
        reqs[i].path = path;
        reqs[i].token = tokens[i / CROWD_PER_USER];
        to[i] = &srv[i % 2];
    }
    it_http_run_all(reqs, to, resps, CROWD_REQUESTS);
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        struct it_resp *r = &resps[i];
        const char *code =
            it_json_str(json_object_get(r->json, "error"), "code");

        if (r->status == 202) {
            assert_true(n202 < CROWD_STOCK);
            assert_string_equal("pending", it_json_str(r->json, "status"));
            ids[n202++] = it_json_id(r->json, "orderId");
            wins[i / CROWD_PER_USER]++;
        } else if ((r->status == 409 && code &&
                    (strcmp(code, "SOLD_OUT") == 0 ||
                     strcmp(code, "ALREADY_PURCHASED") == 0)) ||
                   (r->status == 429 && code && strcmp(code, "BUSY") == 0)) {
            other++;
        } else {
            print_error("request %zu: %ld %s\n", i, r->status,
                        r->body ? r->body : "");
            fail();
        }
    }
    print_message("202: %zu, others: %zu\n", n202, other);
    assert_int_equal(CROWD_STOCK, n202);
    for (size_t i = 0; i < CROWD_USERS; i++)
        assert_true(wins[i] <= 1);
    qsort(ids, n202, sizeof(ids[0]), cmp_i64);
    for (size_t i = 1; i < n202; i++)
        assert_true(ids[i] != ids[i - 1]);

    assert_drained(v, CROWD_STOCK);
    /* Every 202 is exactly one order, of the user it was sold to. */
    assert_int_equal(CROWD_STOCK, it_sql_order_count(v));
    assert_int_equal(0, it_sql_stock(v));
    for (size_t i = 0; i < n202; i++) {
        int64_t user = it_sql_scalar("SELECT COALESCE(MAX(user_id), -1) FROM "
                                     "voucher_orders WHERE id = %lld AND "
                                     "voucher_id = %lld AND status = 1",
                                     (long long)ids[i], (long long)v);
        assert_true(user >= base && user < base + CROWD_USERS);
        assert_int_equal(1, wins[user - base]);
    }
    for (size_t i = 0; i < CROWD_REQUESTS; i++)
        it_resp_free(&resps[i]);
    free(tokens);
    free(to);
    free(resps);
    free(reqs);
}

/* The same purchase 50 times at once, over both instances: one 202. */
static void test_same_request(void **state)
{
    enum { N = 50 };
    struct it_req reqs[N] = {0};
    struct it_resp resps[N];
    const struct it_server *to[N];
    char tok[TOKEN_STR_LEN], path[96];
    int64_t v = sale_create(&srv[0], 10, -60, 600, "async");
    int64_t user = next_user++, order = 0;
    size_t n202 = 0;

    (void)state;
    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (size_t i = 0; i < N; i++) {
        reqs[i] = (struct it_req){.method = "POST", .path = path, .token = tok};
        to[i] = &srv[i % 2];
    }
    it_http_run_all(reqs, to, resps, N);
    for (size_t i = 0; i < N; i++) {
        if (resps[i].status == 202) {
            n202++;
            order = it_json_id(resps[i].json, "orderId");
        } else if (resps[i].status == 429) {
            it_assert_error(&resps[i], 429, "BUSY");
        } else {
            it_assert_error(&resps[i], 409, "ALREADY_PURCHASED");
        }
        it_resp_free(&resps[i]);
    }
    assert_int_equal(1, n202);
    assert_drained(v, 10);
    assert_int_equal(1, it_sql_order_count(v));
    assert_int_equal(user, it_sql_scalar("SELECT user_id FROM voucher_orders "
                                         "WHERE id = %lld",
                                         (long long)order));
}

/* The window is Redis' to judge for an async sale, the same as MySQL's. */
static void test_window(void **state)
{
    int64_t early = sale_create(&srv[0], 5, 30, 600, "async");
    int64_t over = sale_create(&srv[0], 5, -60, 2, "async");
    struct it_resp resp;

    (void)state;
    it_purchase(&srv[1], early, next_user++, &resp);
    it_assert_error(&resp, 409, "NOT_STARTED");
    it_resp_free(&resp);
    buy(&srv[1], over, next_user++);
    sleep(3);
    it_purchase(&srv[1], over, next_user++, &resp);
    it_assert_error(&resp, 409, "ENDED");
    it_resp_free(&resp);
    assert_drained(over, 5);
    assert_int_equal(1, it_sql_order_count(over));
}

/* ---- the order's life ---- */

static void test_cancel_returns_unit(void **state)
{
    int64_t v = sale_create(&srv[0], 1, -60, 600, "async");
    int64_t u = next_user++, w = next_user++;
    int64_t o = buy(&srv[0], v, u);
    struct it_resp resp;

    (void)state;
    assert_int_equal(1, order_written(o));
    it_purchase(&srv[1], v, w, &resp);
    it_assert_error(&resp, 409, "SOLD_OUT");
    it_resp_free(&resp);
    order_post(&srv[1], o, "cancel", u, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("cancelled", it_json_str(resp.json, "status"));
    it_resp_free(&resp);
    assert_drained(v, 1);
    /* The unit is back in Redis: another user buys it (the sold-out cache
     * heard about it too). */
    int64_t o2 = buy(&srv[0], v, w);
    assert_int_equal(1, order_written(o2));
    assert_drained(v, 1);
}

/*
 * Cancels of one async sale at once, merged into few transactions: every
 * order cancelled once, each unit owed to Redis in the cancelling
 * transaction and given back after it, so Redis' stock and buyers end
 * equal to MySQL's and nothing stays owed.
 */
static void test_cancel_crowd_returns_units(void **state)
{
    enum { N = 20 };
    int64_t v = sale_create(&srv[0], N, -60, 600, "async");
    int64_t users[N], orders[N];
    char toks[N][TOKEN_STR_LEN], paths[N][64];
    struct it_req reqs[N];
    const struct it_server *to[N];
    struct it_resp resps[N];

    (void)state;
    for (size_t i = 0; i < N; i++) {
        users[i] = next_user++;
        orders[i] = buy(&srv[i % 2], v, users[i]);
    }
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(1, order_written(orders[i]));
        it_token(users[i], TOKEN_ROLE_USER, 3600, toks[i]);
        snprintf(paths[i], sizeof(paths[i]), "/api/orders/%lld/cancel",
                 (long long)orders[i]);
        reqs[i] = (struct it_req){
            .method = "POST", .path = paths[i], .token = toks[i]};
        to[i] = &srv[i % 2];
    }
    it_http_run_all(reqs, to, resps, N);
    for (size_t i = 0; i < N; i++) {
        it_assert_status(&resps[i], 200);
        assert_string_equal("cancelled", it_json_str(resps[i].json, "status"));
        it_resp_free(&resps[i]);
        assert_int_equal(4, order_status(orders[i]));
    }
    assert_drained(v, N);
    assert_int_equal(N, it_sql_stock(v));
}

static void test_expiry_returns_unit(void **state)
{
    int64_t v = sale_create(&srv[0], 1, -60, 600, "async");
    int64_t u = next_user++;
    int64_t o = buy(&srv[1], v, u), until;
    struct it_resp resp;

    (void)state;
    assert_int_equal(1, order_written(o));
    until = util_mono_ms() + (PAY_TIMEOUT_S + 5) * 1000;
    while (order_status(o) == 1 && util_mono_ms() < until)
        usleep(100 * 1000);
    assert_int_equal(7, order_status(o)); /* expired */
    assert_drained(v, 1);
    /* The same user may buy again: the buyer set forgot them. */
    o = buy(&srv[0], v, u);
    assert_int_equal(1, order_written(o));
    order_post(&srv[0], o, "pay", u, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("paid", it_json_str(resp.json, "status"));
    it_resp_free(&resp);
    assert_drained(v, 1);
}

/* ---- MySQL away: Redis sells, the backlog waits, then drains ---- */

static void test_mysql_away(void **state)
{
    int64_t v = sale_create(&srv[2], 40, -60, 600, "async");
    int64_t users[C_BACKLOG], orders[C_BACKLOG];
    struct it_resp resp;

    (void)state;
    /* Warm C's voucher cache while MySQL is there. */
    orders[0] = buy(&srv[2], v, users[0] = next_user++);
    assert_int_equal(1, order_written(orders[0]));
    /* Settled in Redis too (the writer does that just after its commit),
     * so that it no longer counts against the backlog bound below. */
    {
        redisContext *rc = it_redis_connect();
        int64_t until = util_mono_ms() + DRAIN_MS;

        while ((redis_int(rc, "XLEN {v:%lld}:stream", v) != 0 ||
                redis_int(rc, "HLEN {v:%lld}:pending", v) != 0) &&
               util_mono_ms() < until)
            usleep(20 * 1000);
        redisFree(rc);
    }
    assert_true(it_proxy_ctl(&mysql_proxy, "cut") == 0);
    assert_true(it_proxy_ctl(&mysql_proxy, "refuse") == 0);
    for (size_t i = 1; i < C_BACKLOG; i++)
        orders[i] = buy(&srv[2], v, users[i] = next_user++);
    /* Pending, and readable as such while MySQL is away. */
    order_read(&srv[2], orders[5], users[5], &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("pending", it_json_str(resp.json, "status"));
    it_resp_free(&resp);
    /* Someone else's pending order reads as absent. */
    order_read(&srv[2], orders[5], users[6], &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    /* Not yet cancellable: in a moment. */
    order_post(&srv[2], orders[5], "cancel", users[5], &resp);
    it_assert_error(&resp, 429, "BUSY");
    assert_string_equal("1", resp.retry_after);
    it_resp_free(&resp);
    /* The backlog bound: 11 wait, at most 12 may. Fill it, then 429. */
    int64_t extra = buy(&srv[2], v, next_user++);
    it_purchase(&srv[2], v, next_user++, &resp);
    it_assert_error(&resp, 429, "BUSY");
    assert_string_equal("1", resp.retry_after);
    it_resp_free(&resp);
    assert_int_equal(1,
                     it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                   "voucher_id = %lld",
                                   (long long)v));

    assert_true(it_proxy_ctl(&mysql_proxy, "heal") == 0);
    assert_drained(v, 40);
    for (size_t i = 0; i < C_BACKLOG; i++)
        assert_int_equal(1, order_status(orders[i]));
    assert_int_equal(1, order_status(extra));
    assert_int_equal(C_BACKLOG + 1, it_sql_order_count(v));
}

/* The status of order in user's GET /api/orders on s, "" when it is not
 * listed (asserts it is listed at most once). */
static void listed_status(const struct it_server *s, int64_t user,
                          int64_t order, char *out, size_t len)
{
    char tok[TOKEN_STR_LEN], id[24];
    struct it_resp resp;
    json_t *items, *item;
    size_t i, seen = 0;

    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    it_http(s, "GET", "/api/orders", NULL, tok, &resp);
    it_assert_status(&resp, 200);
    items = json_object_get(resp.json, "items");
    assert_true(json_is_array(items));
    snprintf(id, sizeof(id), "%lld", (long long)order);
    out[0] = '\0';
    json_array_foreach(items, i, item)
    {
        if (strcmp(it_json_str(item, "id"), id) != 0)
            continue;
        seen++;
        snprintf(out, len, "%s", it_json_str(item, "status"));
    }
    assert_true(seen <= 1);
    it_resp_free(&resp);
}

/* An order on its way to MySQL shows in its buyer's list, as pending (a
 * buyer told "the outcome is unknown" looks there); once written, once,
 * as unpaid. The writers are held back by a lock on the voucher's row. */
static void test_pending_listed(void **state)
{
    int64_t v = sale_create(&srv[0], 5, -60, 600, "async");
    int64_t u = next_user++, o;
    char status[32];

    (void)state;
    assert_int_equal(0, it_sql_exec("START TRANSACTION"));
    assert_true(it_sql_scalar("SELECT stock FROM seckill_vouchers WHERE "
                              "voucher_id = %lld FOR UPDATE",
                              (long long)v) == 5);
    o = buy(&srv[0], v, u);
    listed_status(&srv[0], u, o, status, sizeof(status));
    int64_t in_mysql = order_status(o);
    /* Before any assertion: the next tests need MySQL as it is. */
    assert_int_equal(0, it_sql_exec("ROLLBACK"));
    assert_string_equal("pending", status);
    assert_int_equal(0, in_mysql);
    assert_int_equal(1, order_written(o));
    listed_status(&srv[0], u, o, status, sizeof(status));
    assert_string_equal("unpaid", status);
    assert_drained(v, 5);
}

/* ---- repairs ---- */

/* A Redis that lost a sale's state (say a restart from an older file) is
 * rebuilt from MySQL: nothing sold twice. */
static void test_rebuild(void **state)
{
    int64_t v = sale_create(&srv[0], 5, -60, 600, "async");
    int64_t u[3];
    redisContext *rc = it_redis_connect();
    redisReply *r;
    struct it_resp resp;

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(1, order_written(buy(&srv[0], v, u[i] = next_user++)));
    r = redisCommand(rc, "DEL {v:%lld}:info {v:%lld}:stock {v:%lld}:buyers",
                     (long long)v, (long long)v, (long long)v);
    freeReplyObject(r);
    /* Until rebuilt, nothing sells; then the buyers are known again. */
    int64_t until = util_mono_ms() + DRAIN_MS;
    while (redis_int(rc, "EXISTS {v:%lld}:info", v) == 0 &&
           util_mono_ms() < until)
        usleep(100 * 1000);
    assert_int_equal(1, redis_int(rc, "EXISTS {v:%lld}:info", v));
    it_purchase(&srv[1], v, u[1], &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);
    buy(&srv[1], v, next_user++);
    buy(&srv[1], v, next_user++);
    it_purchase(&srv[1], v, next_user++, &resp);
    it_assert_error(&resp, 409, "SOLD_OUT");
    it_resp_free(&resp);
    assert_drained(v, 5);
    assert_int_equal(5, it_sql_order_count(v));
    redisFree(rc);
}

/* An order that can never be written goes to the dead letters once, and
 * the unit it took comes back. */
static void test_dead_letter(void **state)
{
    int64_t v = sale_create(&srv[0], 5, -60, 600, "async");
    int64_t u = next_user++, o = buy(&srv[0], v, u);
    redisContext *rc = it_redis_connect();
    redisReply *r;

    (void)state;
    assert_int_equal(1, order_written(o));
    /* A second order of the same user, as a broken client of the stream
     * might write it: the database refuses it (one active order). */
    r = redisCommand(rc, "XADD {v:%lld}:stream * o %lld u %lld t %lld",
                     (long long)v, (long long)(o + 1), (long long)u,
                     (long long)util_now_ms());
    freeReplyObject(r);
    int64_t until = util_mono_ms() + DRAIN_MS;
    while (redis_int(rc, "XLEN {v:%lld}:dead", v) < 1 && util_mono_ms() < until)
        usleep(50 * 1000);
    assert_int_equal(1, redis_int(rc, "XLEN {v:%lld}:dead", v));
    assert_drained(v, 5);
    assert_int_equal(1, it_sql_order_count(v));
    assert_int_equal(0, order_status(o + 1));
    redisFree(rc);
}

/*
 * Another deployment's sale on the same Redis database (a second MySQL
 * database, or a test run beside this one): its voucher is not in this
 * MySQL, yet it is in the index of sales with work. The writers here
 * leave it alone: its orders stay in its stream, not written here and not
 * dead-lettered, so that its own writers can still write them.
 */
static void test_other_database(void **state)
{
    int64_t v = it_sql_scalar("SELECT COALESCE(MAX(voucher_id), 0) FROM "
                              "seckill_vouchers") +
                1000000;
    redisContext *rc = it_redis_connect();
    int64_t now = util_now_ms();

    (void)state;
    freeReplyObject(redisCommand(rc,
                                 "HSET {v:%lld}:info begin %lld end %lld "
                                 "initial 10 stamp 4242",
                                 (long long)v, (long long)(now / 1000 - 60),
                                 (long long)(now / 1000 + 600)));
    freeReplyObject(redisCommand(rc, "SET {v:%lld}:stock 7", (long long)v));
    for (int i = 0; i < 3; i++) {
        long long o = 9000000000000LL + i, u = next_user++;

        freeReplyObject(
            redisCommand(rc, "SADD {v:%lld}:buyers %lld", (long long)v, u));
        freeReplyObject(redisCommand(rc,
                                     "XADD {v:%lld}:stream * o %lld u %lld "
                                     "t %lld",
                                     (long long)v, o, u, (long long)now));
        freeReplyObject(redisCommand(rc, "HSET {v:%lld}:pending %lld %lld:%lld",
                                     (long long)v, o, u, (long long)now));
    }
    freeReplyObject(
        redisCommand(rc, "SADD seckill:async:work %lld", (long long)v));
    /* Several rounds of every writer, and a reconciliation or two. */
    sleep(5);
    assert_int_equal(3, redis_int(rc, "XLEN {v:%lld}:stream", v));
    assert_int_equal(3, redis_int(rc, "HLEN {v:%lld}:pending", v));
    assert_int_equal(0, redis_int(rc, "XLEN {v:%lld}:dead", v));
    assert_int_equal(0, redis_int(rc, "EXISTS {v:%lld}:frozen", v));
    assert_int_equal(7, redis_int(rc, "GET {v:%lld}:stock", v));
    assert_int_equal(0, it_sql_order_count(v));
    freeReplyObject(redisCommand(rc,
                                 "DEL {v:%lld}:info {v:%lld}:stock "
                                 "{v:%lld}:buyers {v:%lld}:stream "
                                 "{v:%lld}:pending",
                                 (long long)v, (long long)v, (long long)v,
                                 (long long)v, (long long)v));
    freeReplyObject(
        redisCommand(rc, "SREM seckill:async:work %lld", (long long)v));
    redisFree(rc);
}

/*
 * A sale whose stream holds an order acknowledged and never deleted (a
 * writer whose connection broke between the two) and whose Redis forgot
 * a buyer (and put the unit back on sale): the reconciliation rebuilds
 * it from MySQL and it sells again within seconds, the leftover entry
 * and its pending record gone, nothing sold twice.
 */
static void test_rebuild_acked_entry(void **state)
{
    static const char plant[] =
        "local id = redis.call('xadd', KEYS[1], '*', 'o', ARGV[1], 'u', "
        "ARGV[2], 't', ARGV[3]) "
        "redis.call('hset', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3]) "
        "redis.call('xreadgroup', 'GROUP', 'writers', 'it-test', 'COUNT', 1, "
        "'STREAMS', KEYS[1], '>') "
        "return redis.call('xack', KEYS[1], 'writers', id)";
    int64_t v = sale_create(&srv[0], 10, -60, 600, "async");
    int64_t u[3], o[3], t0, rebuilt_ms = -1, until;
    redisContext *rc = it_redis_connect();
    struct it_resp resp;
    redisReply *r;
    char k[2][48];

    (void)state;
    /* Paid: A and B give orders 3 s to pay, and these must stay. */
    for (int i = 0; i < 3; i++) {
        o[i] = buy(&srv[0], v, u[i] = next_user++);
        assert_int_equal(1, order_written(o[i]));
        order_post(&srv[2], o[i], "pay", u[i], &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    assert_drained(v, 10);
    snprintf(k[0], sizeof(k[0]), "{v:%lld}:stream", (long long)v);
    snprintf(k[1], sizeof(k[1]), "{v:%lld}:pending", (long long)v);
    r = redisCommand(rc, "EVAL %s 2 %s %s %lld %lld %lld", plant, k[0], k[1],
                     (long long)o[0], (long long)u[0],
                     (long long)util_now_ms());
    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    assert_int_equal(1, r->integer);
    freeReplyObject(r);
    assert_int_equal(1, redis_int(rc, "XLEN {v:%lld}:stream", v));
    r = redisCommand(rc, "XPENDING %s writers", k[0]);
    assert_true(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                r->element[0]->type == REDIS_REPLY_INTEGER);
    assert_int_equal(0, r->element[0]->integer); /* acknowledged */
    freeReplyObject(r);
    /* Redis forgets u[1]: its unit is on sale again there. */
    r = redisCommand(rc, "SREM {v:%lld}:buyers %lld", (long long)v,
                     (long long)u[1]);
    assert_true(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    freeReplyObject(redisCommand(rc, "INCR {v:%lld}:stock", (long long)v));

    /* Rebuilt from MySQL: u[1] is a buyer again. */
    t0 = util_mono_ms();
    until = t0 + REPAIR_MS;
    while (util_mono_ms() < until) {
        r = redisCommand(rc, "SISMEMBER {v:%lld}:buyers %lld", (long long)v,
                         (long long)u[1]);
        bool back = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        freeReplyObject(r);
        if (back && redis_int(rc, "EXISTS {v:%lld}:frozen", v) == 0) {
            rebuilt_ms = util_mono_ms() - t0;
            break;
        }
        usleep(50 * 1000);
    }
    if (rebuilt_ms < 0)
        print_error("voucher %lld not rebuilt after %d ms: frozen %lld, "
                    "stream %lld, pending %lld\n",
                    (long long)v, REPAIR_MS,
                    redis_int(rc, "EXISTS {v:%lld}:frozen", v),
                    redis_int(rc, "XLEN {v:%lld}:stream", v),
                    redis_int(rc, "HLEN {v:%lld}:pending", v));
    /* It sells again at once, and to nobody twice. */
    it_purchase(&srv[1], v, next_user++, &resp);
    if (resp.status != 202)
        print_error("a purchase after the repair: %ld %s\n", resp.status,
                    resp.body ? resp.body : "");
    assert_true(rebuilt_ms >= 0);
    it_assert_status(&resp, 202);
    it_resp_free(&resp);
    print_message("rebuilt and selling %lld ms after the disagreement\n",
                  (long long)rebuilt_ms);
    for (int i = 0; i < 3; i++) {
        it_purchase(&srv[i % 2], v, u[i], &resp);
        it_assert_error(&resp, 409, "ALREADY_PURCHASED");
        it_resp_free(&resp);
    }
    for (int i = 0; i < 6; i++)
        buy(&srv[i % 2], v, next_user++);
    it_purchase(&srv[0], v, next_user++, &resp);
    it_assert_error(&resp, 409, "SOLD_OUT");
    it_resp_free(&resp);
    assert_drained(v, 10);
    assert_int_equal(10, it_sql_order_count(v));
    assert_int_equal(0, redis_int(rc, "XLEN {v:%lld}:dead", v));
    redisFree(rc);
}

/* ---- many sales, and sales past their look-back ---- */

#define MANY_SALES 300
#define MANY_EACH 3

/*
 * More async sales with orders on their way at once than a fixed list of
 * sales would hold: 300 sales, three buyers each, all in one crowd over
 * A and B. Every 202 reads back from C (which sold none of them) as
 * pending or written, and becomes its order in MySQL.
 */
static void test_many_sales(void **state)
{
    enum { N = MANY_SALES * MANY_EACH };
    struct it_req *reqs = xcalloc(N, sizeof(*reqs));
    struct it_resp *resps = xcalloc(N, sizeof(*resps));
    const struct it_server **to = xcalloc(N, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(N, sizeof(*tokens));
    char(*paths)[96] = xcalloc(N, sizeof(*paths));
    int64_t *v = xcalloc(MANY_SALES, sizeof(*v));
    int64_t *orders = xcalloc(N, sizeof(*orders)), base = next_user;
    int64_t until, written = 0;
    size_t unread = 0;

    (void)state;
    next_user += N;
    for (size_t i = 0; i < MANY_SALES; i++)
        v[i] = sale_create(&srv[i % 2], MANY_EACH, -60, 600, "async");
    /* Created ahead of the crowd: the writers have looked at MySQL since. */
    sleep(3);
    for (size_t j = 0; j < N; j++) {
        it_token(base + (int64_t)j, TOKEN_ROLE_USER, 3600, tokens[j]);
        snprintf(paths[j], sizeof(paths[j]), "/api/vouchers/%lld/seckill",
                 (long long)v[j / MANY_EACH]);
        reqs[j] = (struct it_req){
            .method = "POST", .path = paths[j], .token = tokens[j]};
        to[j] = &srv[j % 2];
    }
    it_http_run_all(reqs, to, resps, N);
    for (size_t j = 0; j < N; j++) {
        /* A full engine queue may say BUSY: the buyer tries again. */
        for (int k = 0; resps[j].status == 429 && k < 20; k++) {
            it_resp_free(&resps[j]);
            usleep(100 * 1000);
            it_http_do(to[j], &reqs[j], &resps[j]);
        }
        if (resps[j].status != 202)
            print_error("purchase %zu of sale %lld: %ld %s\n", j,
                        (long long)v[j / MANY_EACH], resps[j].status,
                        resps[j].body ? resps[j].body : "");
        it_assert_status(&resps[j], 202);
        orders[j] = it_json_id(resps[j].json, "orderId");
        it_resp_free(&resps[j]);
    }

    /* Readable at once from an instance that sold none of them. */
    for (size_t j = 0; j < N; j++) {
        snprintf(paths[j], sizeof(paths[j]), "/api/orders/%lld",
                 (long long)orders[j]);
        reqs[j] = (struct it_req){
            .method = "GET", .path = paths[j], .token = tokens[j]};
        to[j] = &srv[2];
    }
    it_http_run_all(reqs, to, resps, N);
    for (size_t j = 0; j < N; j++) {
        if (resps[j].status != 200) {
            if (unread++ < 5)
                print_error("order %lld of sale %lld reads %ld %s\n",
                            (long long)orders[j], (long long)v[j / MANY_EACH],
                            resps[j].status,
                            resps[j].body ? resps[j].body : "");
        }
        it_resp_free(&resps[j]);
    }

    /* Written, every one. */
    until = util_mono_ms() + 4 * DRAIN_MS;
    do {
        written = it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                "voucher_id BETWEEN %lld AND %lld",
                                (long long)v[0], (long long)v[MANY_SALES - 1]);
        if (written == N)
            break;
        usleep(200 * 1000);
    } while (util_mono_ms() < until);
    print_message("%d orders of %d sales: %zu did not read back, %lld "
                  "written\n",
                  N, MANY_SALES, unread, (long long)written);
    assert_int_equal(0, unread);
    assert_int_equal(N, written);
    for (size_t i = 0; i < MANY_SALES; i++)
        assert_drained(v[i], MANY_EACH);
    for (size_t j = 0; j < N; j++)
        assert_int_equal(base + (int64_t)j,
                         it_sql_scalar("SELECT COALESCE(MAX(user_id), -1) "
                                       "FROM voucher_orders WHERE id = %lld",
                                       (long long)orders[j]));
    free(orders);
    free(v);
    free(paths);
    free(tokens);
    free(to);
    free(resps);
    free(reqs);
}

static bool index_has(redisContext *rc, int64_t v)
{
    return redis_int(rc, "SISMEMBER seckill:async:work %lld", v) == 1;
}

#define HELD 4

/*
 * One sale whose orders MySQL refuses (a trigger here; a shard that is
 * down, or a row held by a long transaction, alike) holds up no other
 * sale's: while the older sale's writes keep failing, a newer sale's
 * orders are written as usual, on every writer. Then the trigger goes and
 * the held sale drains too.
 */
static void test_held_sale_holds_no_other(void **state)
{
    int64_t held, free_sale, orders[HELD], until, written = 0;

    (void)state;
    held = sale_create(&srv[0], 10, -60, 600, "async");
    free_sale = sale_create(&srv[0], 10, -60, 600, "async");
    /* Both sold once with MySQL there: every writer knows both. */
    assert_int_equal(1, order_written(buy(&srv[0], held, next_user++)));
    assert_int_equal(1, order_written(buy(&srv[1], free_sale, next_user++)));
    assert_int_equal(0, it_sql_exec("CREATE OR REPLACE TRIGGER " HOLD_TRIGGER
                                    " BEFORE INSERT ON voucher_orders FOR "
                                    "EACH ROW IF NEW.voucher_id = %lld THEN "
                                    "SIGNAL SQLSTATE '45000' SET "
                                    "MESSAGE_TEXT = 'held back by the test'; "
                                    "END IF",
                                    (long long)held));
    for (int i = 0; i < HELD; i++)
        buy(&srv[i % 3], held, next_user++);
    /* The held sale's writes fail on every writer, over and over. */
    usleep(1500 * 1000);
    for (int i = 0; i < HELD; i++)
        orders[i] = buy(&srv[i % 3], free_sale, next_user++);
    until = util_mono_ms() + 5000;
    do {
        written = 0;
        for (int i = 0; i < HELD; i++)
            written += order_status(orders[i]) != 0;
        if (written == HELD)
            break;
        usleep(50 * 1000);
    } while (util_mono_ms() < until);
    if (written != HELD)
        print_error("%lld of %d orders of the free sale written in 5 s while "
                    "another sale's writes failed\n",
                    (long long)written, HELD);
    assert_int_equal(HELD, written);
    assert_int_equal(1, it_sql_order_count(held));
    assert_int_equal(0, it_sql_exec("DROP TRIGGER " HOLD_TRIGGER));
    assert_drained(held, 10);
    assert_drained(free_sale, 10);
    assert_int_equal(HELD + 1, it_sql_order_count(held));
}

/*
 * Orders that cannot reach MySQL until well after their sale's end plus
 * the look-back are still written. Sale 0's end is moved to the moment
 * its orders are in, sale 1's two hours back in MySQL (as after an outage
 * longer than the default look-back of an hour). A trigger refuses both
 * sales' orders while they sell and until the look-back has passed: the
 * writers no longer list them from MySQL, yet the pending orders read
 * back, and a writer that starts finds sale 1 again after it was dropped
 * from the index of sales with work (as a connection lost between the
 * purchase and its index command would leave it). Then the trigger goes,
 * and every order is written.
 */
static void test_backlog_outlives_lookback(void **state)
{
    int64_t s[2], users[2][HELD], orders[2][HELD], end_ms, until;
    redisContext *rc = it_redis_connect();
    struct it_server d;
    struct it_resp resp;
    size_t unread = 0;
    bool found = false;

    (void)state;
    s[0] = sale_create(&srv[0], 5, -60, 600, "async");
    s[1] = sale_create(&srv[0], 5, -60, 600, "async");
    /* The first order of each with MySQL there: the caches are warm. */
    for (int k = 0; k < 2; k++)
        assert_int_equal(
            1, order_written(orders[k][0] = buy(&srv[k], s[k],
                                                users[k][0] = next_user++)));
    assert_int_equal(0, it_sql_exec("CREATE OR REPLACE TRIGGER " HOLD_TRIGGER
                                    " BEFORE INSERT ON voucher_orders FOR "
                                    "EACH ROW IF NEW.voucher_id IN (%lld, "
                                    "%lld) THEN SIGNAL SQLSTATE '45000' SET "
                                    "MESSAGE_TEXT = 'held back by the test'; "
                                    "END IF",
                                    (long long)s[0], (long long)s[1]));
    for (int k = 0; k < 2; k++)
        for (int i = 1; i < HELD; i++)
            orders[k][i] = buy(&srv[i % 2], s[k], users[k][i] = next_user++);
    /* Sale 0 ends now, sale 1 two hours ago (in MySQL, where the writers
     * list sales from; the instances have sold what they sell). */
    assert_int_equal(0, it_sql_exec("UPDATE seckill_vouchers SET end_time = "
                                    "NOW() WHERE voucher_id = %lld",
                                    (long long)s[0]));
    end_ms = util_now_ms();
    assert_int_equal(0, it_sql_exec("UPDATE seckill_vouchers SET end_time = "
                                    "NOW() - INTERVAL 2 HOUR WHERE "
                                    "voucher_id = %lld",
                                    (long long)s[1]));
    /* Past the end and the look-back, and a look at MySQL after that. */
    until = end_ms + (LOOKBACK_S + 4) * 1000;
    while (util_now_ms() < until)
        usleep(100 * 1000);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(1, it_sql_order_count(s[k]));
        assert_true(redis_int(rc, "XLEN {v:%lld}:stream", s[k]) > 0);
    }

    /* Pending, and readable as such from C, which sold none of them. */
    for (int k = 0; k < 2; k++)
        for (int i = 1; i < HELD; i++) {
            const char *status;

            order_read(&srv[2], orders[k][i], users[k][i], &resp);
            status =
                resp.status == 200 ? it_json_str(resp.json, "status") : NULL;
            if (!status || strcmp(status, "pending") != 0) {
                unread++;
                print_error("sale %d's order %lld reads %ld %s\n", k,
                            (long long)orders[k][i], resp.status,
                            resp.body ? resp.body : "");
            }
            it_resp_free(&resp);
        }

    /* Dropped from the index: a writer that starts sweeps it back in. */
    freeReplyObject(
        redisCommand(rc, "SREM seckill:async:work %lld", (long long)s[1]));
    assert_int_equal(0, it_server_start(&d, "async-d", env_ab));
    until = util_mono_ms() + DRAIN_MS;
    while (!(found = index_has(rc, s[1])) && util_mono_ms() < until)
        usleep(100 * 1000);
    assert_int_equal(0, it_server_stop(&d));
    if (!found)
        print_error("sale %lld was not found again by a starting writer\n",
                    (long long)s[1]);

    assert_int_equal(0, it_sql_exec("DROP TRIGGER " HOLD_TRIGGER));
    for (int k = 0; k < 2; k++) {
        assert_drained(s[k], 5);
        /* Written; unpaid, or expired already (their deadline counts
         * from the sale). */
        for (int i = 0; i < HELD; i++)
            assert_true(order_status(orders[k][i]) != 0);
        assert_int_equal(HELD, it_sql_order_count(s[k]));
    }
    assert_int_equal(0, unread);
    assert_true(found);
    redisFree(rc);
}

/* ---- two instances that look alike ---- */

/*
 * The host name of the two instances below, each in UTS and PID
 * namespaces of its own: the same 50 bytes for both, as containers of one
 * deployment may have, and pid 1 in both.
 */
#define TWIN_HOST "seckilld-production-api-deployment-7d9f8b6c5-k2x4q"
#define TWIN_STOCK 40
/* Orders sold through each while the sale's orders are held back. */
#define TWIN_HELD 8
/* A dead instance's orders are claimed after 5 s; its freeze of a sale
 * lifts by itself within 15 s, and the sale is then rebuilt. */
#define TWIN_REPAIR_MS 45000

/* pid's own pid in its PID namespace (the last number of NSpid in
 * /proc/<pid>/status), or -1. */
static long ns_pid(pid_t pid)
{
    char path[64], line[256], *at, *end;
    long last = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "NSpid:", 6) == 0)
            for (at = line + 6;; at = end) {
                long x = strtol(at, &end, 10);

                if (end == at)
                    break;
                last = x;
            }
    fclose(f);
    return last;
}

/*
 * The consumers of v's group "writers" named after TWIN_HOST (by its
 * first 31 bytes: an older name held no more): how many; the orders each
 * holds (pending) go to held (up to max of them).
 */
static size_t twin_consumers(redisContext *rc, int64_t v, long long *held,
                             size_t max)
{
    redisReply *r = redisCommand(rc, "XINFO CONSUMERS {v:%lld}:stream writers",
                                 (long long)v);
    size_t n = 0;

    assert_non_null(r);
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        const redisReply *c = r->element[i];
        const char *name = NULL;
        long long pending = 0;

        for (size_t j = 0; c->type == REDIS_REPLY_ARRAY && j + 1 < c->elements;
             j += 2) {
            const redisReply *f = c->element[j], *x = c->element[j + 1];

            if (f->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(f->str, "name") == 0 && x->type == REDIS_REPLY_STRING)
                name = x->str;
            else if (strcmp(f->str, "pending") == 0 &&
                     x->type == REDIS_REPLY_INTEGER)
                pending = x->integer;
        }
        if (!name || strncmp(name, TWIN_HOST, 31) != 0)
            continue;
        if (n < max)
            held[n] = pending;
        n++;
    }
    freeReplyObject(r);
    return n;
}

static int freezes_logged(const struct it_server *s, int64_t v)
{
    return it_log_voucher_count(s->log_path, "async sale frozen for a rebuild",
                                v);
}

/*
 * Two instances that look alike: each in UTS and PID namespaces of its
 * own, with the same 50-byte host name and pid 1, as two containers of
 * one deployment. Each must be a consumer of its own in a sale's group,
 * and the owner of its own freezes: while a trigger holds the sale's
 * orders back, both hold some, and a disagreement planted in Redis
 * freezes the sale for one rebuild only (the other instance leaves a sale
 * another froze alone). Then one is SIGKILLed (the rebuilder, or the
 * other) and the trigger goes: the survivor claims the dead one's orders
 * and writes them, rebuilds the sale (once the dead one's freeze has
 * lifted, if it held it), and every 202 is an order in MySQL, nothing
 * pending in the group. The group's instances are kept off the sale
 * meanwhile: their link to MySQL is cut, and a writer leaves alone a sale
 * it cannot ask MySQL about.
 */
static void twins_one_killed(bool kill_rebuilder)
{
    const char *env[] = {"SECKILL_PURCHASE_MODE=async",
                         "SECKILL_ASYNC_ACCEPT_LOSS=1",
                         "SECKILL_DEV=1",
                         "SECKILL_RATE_USER=0",
                         "SECKILL_ASYNC_RECONCILE_MS=200",
                         "SECKILL_ASYNC_LOOKBACK_S=2",
                         NULL};
    int64_t v, u0 = 0, orders[TWIN_STOCK], until;
    size_t n202 = 0, ours = 0;
    long long held[4] = {0};
    int frozen[2], others = 0, status = 0, victim;
    struct it_server *survivor;
    redisContext *rc;
    struct it_resp resp;
    redisReply *r;

    /* What an earlier test that failed may have left. */
    for (int i = 0; i < 2; i++)
        it_server_stop(&twin[i]);
    it_sql_exec("DROP TRIGGER IF EXISTS " HOLD_TRIGGER);
    if (!it_ns_available()) {
        print_message("skipped: no new UTS and PID namespaces here (they "
                      "need root)\n");
        skip();
    }
    /* New connections refused first, then the open ones cut: none can
     * be made in between. */
    assert_int_equal(0, it_proxy_ctl(&mysql_proxy, "refuse"));
    assert_int_equal(0, it_proxy_ctl(&mysql_proxy, "cut"));
    assert_int_equal(
        0, it_server_start_ns(&twin[0], "async-twin-x", env, TWIN_HOST));
    assert_int_equal(
        0, it_server_start_ns(&twin[1], "async-twin-y", env, TWIN_HOST));
    for (int i = 0; i < 2; i++)
        assert_int_equal(1, ns_pid(twin[i].pid));
    rc = it_redis_connect();
    v = sale_create(&twin[0], TWIN_STOCK, -60, 600, "async");
    /* A written order through each: their caches are warm. */
    for (int i = 0; i < 2; i++) {
        int64_t u = next_user++;

        if (i == 0)
            u0 = u;
        orders[n202] = buy(&twin[i], v, u);
        assert_int_equal(1, order_written(orders[n202++]));
    }
    assert_int_equal(0, it_sql_exec("CREATE OR REPLACE TRIGGER " HOLD_TRIGGER
                                    " BEFORE INSERT ON voucher_orders FOR "
                                    "EACH ROW IF NEW.voucher_id = %lld THEN "
                                    "SIGNAL SQLSTATE '45000' SET "
                                    "MESSAGE_TEXT = 'held back by the test'; "
                                    "END IF",
                                    (long long)v));
    for (int i = 0; i < 2 * TWIN_HELD; i++)
        orders[n202++] = buy(&twin[i % 2], v, next_user++);
    /* Each writer reads some and holds them. One that holds orders it
     * could not write reads nothing new: should one have read them all,
     * what sells next goes to the other. */
    until = util_mono_ms() + DRAIN_MS;
    while ((ours = twin_consumers(rc, v, held, 4)) != 2 || !held[0] ||
           !held[1]) {
        if (util_mono_ms() >= until || n202 + 4 > TWIN_STOCK)
            break;
        usleep(200 * 1000);
        orders[n202] = buy(&twin[n202 % 2], v, next_user++);
        n202++;
    }

    /* Redis forgets u0 (and puts its unit back on sale): a disagreement
     * with MySQL, repaired by a rebuild that waits for the orders held. */
    r = redisCommand(rc, "SREM {v:%lld}:buyers %lld", (long long)v,
                     (long long)u0);
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        print_error("SREM of buyer %lld: type %d integer %lld \"%s\"; %lld "
                    "buyers, frozen %lld\n",
                    (long long)u0, r ? r->type : -1, r ? r->integer : -1,
                    r && r->str ? r->str : "",
                    redis_int(rc, "SCARD {v:%lld}:buyers", v),
                    redis_int(rc, "EXISTS {v:%lld}:frozen", v));
    assert_true(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    freeReplyObject(redisCommand(rc, "INCR {v:%lld}:stock", (long long)v));
    until = util_mono_ms() + REPAIR_MS;
    while (redis_int(rc, "EXISTS {v:%lld}:frozen", v) == 0 &&
           util_mono_ms() < until)
        usleep(50 * 1000);
    assert_int_equal(1, redis_int(rc, "EXISTS {v:%lld}:frozen", v));
    /* Both reconcile the frozen sale meanwhile, every 200 ms, whichever
     * holds the reconciliation's lock. */
    sleep(4);
    for (int i = 0; i < 2; i++)
        frozen[i] = freezes_logged(&twin[i], v);
    print_message("consumers named after the host: %zu (holding %lld and "
                  "%lld orders); freezes: %d and %d\n",
                  ours, held[0], held[1], frozen[0], frozen[1]);
    assert_int_equal(2, ours);
    assert_true(held[0] > 0 && held[1] > 0);
    assert_int_equal(1, frozen[0] + frozen[1]);
    assert_int_equal(1, redis_int(rc, "EXISTS {v:%lld}:frozen", v));

    /* SIGKILL one; the orders go through again. */
    victim = kill_rebuilder ? frozen[1] : !frozen[1];
    survivor = &twin[!victim];
    assert_int_equal(0, kill(twin[victim].pid, SIGKILL));
    assert_int_equal(
        0, it_wait_exit(twin[victim].pid, IT_STOP_TIMEOUT_MS, &status));
    twin[victim].pid = 0;
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(0, it_sql_exec("DROP TRIGGER " HOLD_TRIGGER));
    /* Rebuilt: u0 is a buyer again, and the sale is not frozen. */
    until = util_mono_ms() + TWIN_REPAIR_MS;
    for (;;) {
        r = redisCommand(rc, "SISMEMBER {v:%lld}:buyers %lld", (long long)v,
                         (long long)u0);
        assert_true(r && r->type == REDIS_REPLY_INTEGER);
        bool back = r->integer == 1;
        freeReplyObject(r);
        if ((back && redis_int(rc, "EXISTS {v:%lld}:frozen", v) == 0) ||
            util_mono_ms() >= until) {
            assert_true(back);
            break;
        }
        usleep(100 * 1000);
    }
    assert_int_equal(0, redis_int(rc, "EXISTS {v:%lld}:frozen", v));
    /* It sells again, through the survivor, and to nobody twice. */
    orders[n202++] = buy(survivor, v, next_user++);
    it_purchase(survivor, v, u0, &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);

    assert_drained(v, TWIN_STOCK);
    r = redisCommand(rc, "XPENDING {v:%lld}:stream writers", (long long)v);
    assert_true(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                r->element[0]->type == REDIS_REPLY_INTEGER);
    assert_int_equal(0, r->element[0]->integer);
    freeReplyObject(r);
    /* Every 202 is its order in MySQL. */
    assert_int_equal((int64_t)n202, it_sql_order_count(v));
    for (size_t i = 0; i < n202; i++)
        assert_int_equal(1, order_status(orders[i]));
    /* One rebuild at a time: the survivor froze the sale once (at first,
     * or once the dead rebuilder's freeze lifted), no other instance did. */
    assert_int_equal(1, freezes_logged(survivor, v));
    for (int i = 0; i < 3; i++)
        others += freezes_logged(&srv[i], v);
    assert_int_equal(0, others);
    assert_int_equal(0, it_server_stop(survivor));
    assert_int_equal(0, it_proxy_ctl(&mysql_proxy, "heal"));
    redisFree(rc);
}

static void test_twins_kill_rebuilder(void **state)
{
    (void)state;
    twins_one_killed(true);
}

static void test_twins_kill_other(void **state)
{
    (void)state;
    twins_one_killed(false);
}

/* ---- start-up ---- */

static void test_startup_refusal(void **state)
{
    char *argv[] = {(char *)it_bin(), "--port", "0", NULL};
    char *env[64], log[IT_PATH_MAX], rlog[IT_PATH_MAX], url[256];
    const struct store_config *sc = it_store_config();
    size_t n = 0;
    int status = -1;
    pid_t pid, redis;
    uint16_t port = it_free_port();
    struct it_server s;

    (void)state;
    /* The test Redis keeps writes with appendfsync everysec. */
    for (char **e = environ; *e && n < 60; e++)
        if (strncmp(*e, "SECKILL_PURCHASE_MODE=", 22) != 0 &&
            strncmp(*e, "SECKILL_ASYNC_ACCEPT_LOSS=", 26) != 0)
            env[n++] = *e;
    env[n++] = "SECKILL_PURCHASE_MODE=async";
    env[n] = NULL;
    snprintf(log, sizeof(log), "%s/async-refused.log", it_log_dir());
    pid = it_spawn(argv, env, log);
    assert_true(pid > 0);
    assert_int_equal(0, it_wait_exit(pid, 10000, &status));
    assert_true(WIFEXITED(status));
    assert_int_equal(2, WEXITSTATUS(status));
    char *text = NULL;
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    text = xcalloc(1, 65536);
    fread(text, 1, 65535, f);
    fclose(f);
    assert_non_null(strstr(text, "SECKILL_ASYNC_ACCEPT_LOSS=1"));
    free(text);

    /* A Redis that fsyncs every write: accepted. */
    char dir[IT_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/async-redis", it_log_dir());
    mkdir(dir, 0700);
    const char *const durable[] = {
        "--appendonly", "yes", "--appendfsync", "always", "--dir", dir, NULL};
    snprintf(rlog, sizeof(rlog), "%s/async-redis.log", it_log_dir());
    redis = it_redis_start_with(port, rlog, NULL, durable);
    assert_true(redis > 0);
    snprintf(url, sizeof(url), "SECKILL_REDIS_URL=redis://127.0.0.1:%u/0",
             (unsigned)port);
    const char *ov[] = {"SECKILL_PURCHASE_MODE=async",
                        "SECKILL_ASYNC_ACCEPT_LOSS=0", url, "SECKILL_LOCK_URL",
                        NULL};
    (void)sc;
    assert_int_equal(0, it_server_start(&s, "async-durable", ov));
    int64_t v = sale_create(&s, 2, -60, 600, NULL);
    buy(&s, v, next_user++);
    assert_int_equal(0, it_server_stop(&s));
    kill(redis, SIGKILL);
    waitpid(redis, NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_voucher_mode),
        cmocka_unit_test(test_crowd),
        cmocka_unit_test(test_same_request),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_cancel_returns_unit),
        cmocka_unit_test(test_cancel_crowd_returns_units),
        cmocka_unit_test(test_expiry_returns_unit),
        cmocka_unit_test(test_mysql_away),
        cmocka_unit_test(test_pending_listed),
        cmocka_unit_test(test_rebuild),
        cmocka_unit_test(test_dead_letter),
        cmocka_unit_test(test_other_database),
        cmocka_unit_test(test_rebuild_acked_entry),
        cmocka_unit_test(test_many_sales),
        cmocka_unit_test(test_held_sale_holds_no_other),
        cmocka_unit_test(test_backlog_outlives_lookback),
        cmocka_unit_test(test_twins_kill_rebuilder),
        cmocka_unit_test(test_twins_kill_other),
        cmocka_unit_test(test_startup_refusal),
    };
    /* SECKILL_IT_FILTER=test_x runs the tests whose names match. */
    const char *filter = getenv("SECKILL_IT_FILTER");

    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
