/*
 * test_controls.c - the operator's controls of a sale over HTTP against
 * the real binary, checked in MySQL and Redis: pause and resume, stop,
 * restock, edit (PATCH) and delete, in both purchase modes, each route's
 * errors; and a crowd buying one sync and one async voucher on two
 * instances while an admin pauses, resumes, restocks and stops both:
 * afterwards every invariant holds, nothing sold while paused or after
 * the stop, and the async sale's Redis agrees with MySQL without a
 * rebuild.
 *
 * Instances: A (a voucher's stock in one row) and B (new sync vouchers'
 * stock in 4 segments), both selling async sales (accepting the test
 * Redis' everysec fsync), sharing MySQL and Redis.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "tests/it/harness.h"

#define USER_BASE 380000000000LL
#define DRAIN_MS 15000
/* How soon every instance's cache hears of a control. */
#define TOLD_MS 1000

static struct it_server srv[2]; /* A, B (segmented) */
static int64_t next_user;
static char admin[TOKEN_STR_LEN];

static const char *env_a[] = {
    "SECKILL_ASYNC_ACCEPT_LOSS=1", "SECKILL_RATE_USER=0",
    "SECKILL_RATE_IP=0",           "SECKILL_PAY_TIMEOUT_S=900",
    "SECKILL_ASYNC_LOOKBACK_S=5",  NULL};
static const char *env_b[] = {"SECKILL_ASYNC_ACCEPT_LOSS=1",
                              "SECKILL_RATE_USER=0",
                              "SECKILL_RATE_IP=0",
                              "SECKILL_PAY_TIMEOUT_S=900",
                              "SECKILL_ASYNC_LOOKBACK_S=5",
                              "SECKILL_STOCK_SEGMENTS=4",
                              NULL};

static int group_setup(void **state)
{
    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    if (it_server_start(&srv[0], "controls-a", env_a) != 0)
        return -1;
    if (it_server_start(&srv[1], "controls-b", env_b) != 0) {
        it_group_teardown(srv, 2);
        return -1;
    }
    it_sql_exec("SET time_zone = '+00:00'");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, 2);
}

/* ---- helpers ---- */

/* A seckill voucher made through instance s (B: segmented when sync). */
static int64_t sale_create(const struct it_server *s, const char *mode,
                           int64_t stock, int64_t begin_off_s,
                           int64_t end_off_s, const char *admission)
{
    char body[512], b[40], e[40];

    snprintf(body, sizeof(body),
             "{\"shopId\":7,\"title\":\"controls\",\"payValue\":100,"
             "\"actualValue\":200,\"type\":\"seckill\",\"stock\":%lld,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\",\"purchaseMode\":"
             "\"%s\",\"admission\":\"%s\"}",
             (long long)stock, it_time(begin_off_s, b), it_time(end_off_s, e),
             mode, admission ? admission : "open");
    return it_voucher_create(s, body);
}

/* An admin's control: method on /api/vouchers/{v}{tail} with body. */
static long control(const struct it_server *s, const char *method, int64_t v,
                    const char *tail, const char *body, struct it_resp *resp)
{
    char path[96];

    snprintf(path, sizeof(path), "/api/vouchers/%lld%s", (long long)v, tail);
    return it_http(s, method, path, body, admin, resp);
}

/* A control that must succeed (200): the voucher it answered with. */
static json_t *control_ok(const struct it_server *s, const char *method,
                          int64_t v, const char *tail, const char *body)
{
    struct it_resp resp;
    json_t *j;

    control(s, method, v, tail, body, &resp);
    it_assert_status(&resp, 200);
    assert_non_null(resp.json);
    j = json_incref(resp.json);
    it_resp_free(&resp);
    return j;
}

static void control_error(const struct it_server *s, const char *method,
                          int64_t v, const char *tail, const char *body,
                          long status, const char *code)
{
    struct it_resp resp;

    control(s, method, v, tail, body, &resp);
    it_assert_error(&resp, status, code);
    it_resp_free(&resp);
}

/* A purchase by a new buyer: the status; *code the error code. */
static long buy(const struct it_server *s, int64_t v, char *code, size_t cap)
{
    struct it_resp resp;
    long st = it_purchase(s, v, next_user++, &resp);

    if (code) {
        const char *c = NULL;

        if (resp.json) {
            json_t *e = json_object_get(resp.json, "error");
            c = e ? it_json_str(e, "code") : NULL;
        }
        snprintf(code, cap, "%s", c ? c : "");
    }
    it_resp_free(&resp);
    return st;
}

/* Purchases on both instances answer code (409) within TOLD_MS. */
static void assert_refused_with(int64_t v, long status, const char *code)
{
    for (int i = 0; i < 2; i++) {
        int64_t until = util_mono_ms() + TOLD_MS;
        char got[32];
        long st;

        do {
            st = buy(&srv[i], v, got, sizeof(got));
            if (st == status && strcmp(got, code) == 0)
                break;
            usleep(20 * 1000);
        } while (util_mono_ms() < until);
        if (st != status || strcmp(got, code) != 0)
            print_error("voucher %lld on instance %d: %ld %s, not %ld %s\n",
                        (long long)v, i, st, got, status, code);
        assert_int_equal(status, st);
        assert_string_equal(code, got);
    }
}

static void assert_refused_everywhere(int64_t v, const char *code)
{
    assert_refused_with(v, 409, code);
}

/* A purchase on each instance sells (201 sync, 202 async) within
 * TOLD_MS. */
static void assert_sells_everywhere(int64_t v, long ok)
{
    for (int i = 0; i < 2; i++) {
        int64_t until = util_mono_ms() + TOLD_MS;
        char got[32];
        long st;

        do {
            st = buy(&srv[i], v, got, sizeof(got));
            if (st == ok)
                break;
            usleep(20 * 1000);
        } while (util_mono_ms() < until);
        if (st != ok)
            print_error("voucher %lld on instance %d: %ld %s, not %ld\n",
                        (long long)v, i, st, got, ok);
        assert_int_equal(ok, st);
    }
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

/* v's stock: its row's and its segments'. */
static int64_t stock_of(int64_t v)
{
    return it_sql_scalar("SELECT s.stock + COALESCE((SELECT SUM(g.stock) "
                         "FROM seckill_stock_segments g WHERE g.voucher_id = "
                         "s.voucher_id), 0) FROM seckill_vouchers s WHERE "
                         "s.voucher_id = %lld",
                         (long long)v);
}

static int64_t initial_stock(int64_t v)
{
    return it_sql_scalar(
        "SELECT initial_stock FROM seckill_vouchers WHERE voucher_id = %lld",
        (long long)v);
}

static int64_t active_orders(int64_t v)
{
    return it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                         "voucher_id = %lld AND status IN (1, 2)",
                         (long long)v);
}

/* MySQL's invariants of v: stock + active = initial, no user twice. */
static void assert_invariants(int64_t v)
{
    int64_t stock = stock_of(v), active = active_orders(v),
            initial = initial_stock(v);

    if (stock + active != initial)
        print_error("voucher %lld: stock %lld + active %lld != initial %lld\n",
                    (long long)v, (long long)stock, (long long)active,
                    (long long)initial);
    assert_int_equal(initial, stock + active);
    assert_true(stock >= 0);
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT user_id "
                                      "FROM voucher_orders WHERE voucher_id "
                                      "= %lld GROUP BY user_id HAVING "
                                      "COUNT(*) > 1) d",
                                      (long long)v));
}

/* The writers drained v; then Redis agrees with MySQL. */
static void assert_async_agrees(int64_t v)
{
    redisContext *rc = it_redis_connect();
    int64_t until = util_mono_ms() + DRAIN_MS;
    long long backlog, pending;

    do {
        backlog = redis_int(rc, "XLEN {v:%lld}:stream", v);
        pending = redis_int(rc, "HLEN {v:%lld}:pending", v);
        if (backlog == 0 && pending == 0)
            break;
        usleep(50 * 1000);
    } while (util_mono_ms() < until);
    assert_int_equal(0, backlog);
    assert_int_equal(0, pending);
    assert_invariants(v);
    assert_int_equal(stock_of(v), redis_int(rc, "GET {v:%lld}:stock", v));
    assert_int_equal(active_orders(v),
                     redis_int(rc, "SCARD {v:%lld}:buyers", v));
    assert_int_equal(initial_stock(v),
                     redis_int(rc, "HGET {v:%lld}:info initial", v));
    redisFree(rc);
}

/* Whether an instance's log says it rebuilt (or found disagreeing) v. */
static bool rebuilt(int64_t v)
{
    char needle[64];
    bool found = false;

    snprintf(needle, sizeof(needle), "voucher=%lld ", (long long)v);
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(srv[i].log_path, "r");
        char line[4096];

        if (!f)
            continue;
        while (fgets(line, sizeof(line), f))
            if ((strstr(line, "disagrees with mysql") ||
                 strstr(line, "rebuilt from mysql") ||
                 strstr(line, "frozen for a rebuild")) &&
                strstr(line, needle)) {
                print_error("instance %d: %s", i, line);
                found = true;
            }
        fclose(f);
    }
    return found;
}

static bool json_bool(const json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key));
}

/* ---- errors common to every control ---- */

static void test_errors(void **state)
{
    static const struct {
        const char *method, *tail, *body, *allow;
    } routes[] = {
        {"PATCH", "", "{\"title\":\"x\"}", "GET, PATCH, DELETE, OPTIONS"},
        {"DELETE", "", NULL, "GET, PATCH, DELETE, OPTIONS"},
        {"POST", "/pause", NULL, "POST, OPTIONS"},
        {"POST", "/resume", NULL, "POST, OPTIONS"},
        {"POST", "/stop", NULL, "POST, OPTIONS"},
        {"POST", "/restock", "{\"add\":1}", "POST, OPTIONS"},
    };
    char buyer[TOKEN_STR_LEN], path[96];
    int64_t v = sale_create(&srv[0], "sync", 5, -1, 600, NULL);

    (void)state;
    it_token(next_user++, TOKEN_ROLE_USER, 3600, buyer);
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        struct it_resp resp;
        struct it_req req = {
            .method = routes[i].method, .path = path, .body = routes[i].body};

        snprintf(path, sizeof(path), "/api/vouchers/%lld%s", (long long)v,
                 routes[i].tail);
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
        req.token = buyer;
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 403, "FORBIDDEN");
        it_resp_free(&resp);
        snprintf(path, sizeof(path), "/api/vouchers/%lld%s",
                 (long long)(v + 1000000), routes[i].tail);
        req.token = admin;
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 404, "NOT_FOUND");
        it_resp_free(&resp);
        /* A method the route does not take: 405 with its Allow. */
        snprintf(path, sizeof(path), "/api/vouchers/%lld%s", (long long)v,
                 routes[i].tail);
        req.method = routes[i].tail[0] ? "PUT" : "POST";
        req.body = NULL;
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
        assert_string_equal(routes[i].allow, resp.allow);
        it_resp_free(&resp);
        req.method = "OPTIONS";
        it_http_do(&srv[0], &req, &resp);
        assert_true(resp.status == 204 || resp.status == 200);
        assert_true(it_header_lists(resp.allow, routes[i].method));
        it_resp_free(&resp);
    }
    /* PATCH where a route takes none: 405 with the route's Allow. */
    {
        struct it_resp resp;

        control(&srv[0], "PATCH", v, "/pause", "{}", &resp);
        it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
        assert_string_equal("POST, OPTIONS", resp.allow);
        it_resp_free(&resp);
        it_http(&srv[0], "PATCH", "/api/vouchers", "{}", admin, &resp);
        it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
        assert_string_equal("GET, POST, OPTIONS", resp.allow);
        it_resp_free(&resp);
    }
    /* A normal voucher has no sale to control. */
    int64_t n = it_voucher_create(&srv[0], "{\"shopId\":7,\"title\":\"n\","
                                           "\"payValue\":1,\"actualValue\":2}");
    control_error(&srv[0], "POST", n, "/pause", NULL, 400, "BAD_REQUEST");
    control_error(&srv[0], "POST", n, "/stop", NULL, 400, "BAD_REQUEST");
    control_error(&srv[0], "POST", n, "/restock", "{\"add\":3}", 400,
                  "BAD_REQUEST");
    /* A restock's add: 1..bounded, a number. */
    control_error(&srv[0], "POST", v, "/restock", "{\"add\":0}", 400,
                  "BAD_REQUEST");
    control_error(&srv[0], "POST", v, "/restock", "{\"add\":-2}", 400,
                  "BAD_REQUEST");
    control_error(&srv[0], "POST", v, "/restock", "{\"add\":10000001}", 400,
                  "BAD_REQUEST");
    control_error(&srv[0], "POST", v, "/restock", "{\"add\":\"3\"}", 400,
                  "BAD_REQUEST");
    control_error(&srv[0], "POST", v, "/restock", "{}", 400, "BAD_REQUEST");
    assert_int_equal(5, stock_of(v));
    /* No stock beyond the creation's bound. */
    int64_t big = sale_create(&srv[0], "sync", 999999500, -1, 600, NULL);
    control_error(&srv[0], "POST", big, "/restock", "{\"add\":1000}", 400,
                  "BAD_REQUEST");
    assert_int_equal(999999500, initial_stock(big));
}

/* ---- pause and resume ---- */

static void pause_resume(const char *mode, const struct it_server *maker,
                         long ok)
{
    int64_t v = sale_create(maker, mode, 50, -1, 600, NULL);
    json_t *j;

    assert_sells_everywhere(v, ok); /* both caches know it sells */
    j = control_ok(&srv[0], "POST", v, "/pause", NULL);
    assert_true(json_bool(j, "paused"));
    json_decref(j);
    assert_int_equal(1, it_sql_scalar("SELECT halt FROM seckill_vouchers "
                                      "WHERE voucher_id = %lld",
                                      (long long)v));
    if (strcmp(mode, "async") == 0) {
        redisContext *rc = it_redis_connect();

        assert_int_equal(1, redis_int(rc, "HGET {v:%lld}:info halt", v));
        redisFree(rc);
    }
    assert_refused_everywhere(v, "SALE_PAUSED");
    /* Pausing twice is pausing once. */
    json_decref(control_ok(&srv[1], "POST", v, "/pause", NULL));
    j = control_ok(&srv[1], "POST", v, "/resume", NULL);
    assert_false(json_bool(j, "paused"));
    json_decref(j);
    assert_sells_everywhere(v, ok);
    if (strcmp(mode, "async") == 0)
        assert_async_agrees(v);
    assert_invariants(v);
    assert_int_equal(4, active_orders(v));
    assert_false(rebuilt(v));
}

static void test_pause_sync(void **state)
{
    (void)state;
    pause_resume("sync", &srv[0], 201);
}

static void test_pause_sync_segmented(void **state)
{
    (void)state;
    pause_resume("sync", &srv[1], 201);
}

static void test_pause_async(void **state)
{
    (void)state;
    pause_resume("async", &srv[0], 202);
}

/* A queue sale is paused like any: a purchase with no ticket would be
 * TICKET_REQUIRED, a paused one is SALE_PAUSED first. */
static void test_pause_queue(void **state)
{
    int64_t v = sale_create(&srv[0], "sync", 5, -1, 600, "queue");

    (void)state;
    json_decref(control_ok(&srv[0], "POST", v, "/pause", NULL));
    assert_refused_everywhere(v, "SALE_PAUSED");
    json_decref(control_ok(&srv[0], "POST", v, "/resume", NULL));
    assert_refused_with(v, 403, "TICKET_REQUIRED");
}

/* ---- stop ---- */

static void stop(const char *mode, long ok)
{
    int64_t v = sale_create(&srv[0], mode, 50, -1, 600, NULL);
    int64_t before = util_now_ms() / 1000;
    char end[40];
    json_t *j;

    assert_sells_everywhere(v, ok);
    j = control_ok(&srv[1], "POST", v, "/stop", NULL);
    it_time(0, end);
    assert_non_null(it_json_str(j, "endTime"));
    json_decref(j);
    assert_true(it_sql_scalar("SELECT UNIX_TIMESTAMP(end_time) FROM "
                              "seckill_vouchers WHERE voucher_id = %lld",
                              (long long)v) <= util_now_ms() / 1000);
    assert_true(it_sql_scalar("SELECT UNIX_TIMESTAMP(end_time) FROM "
                              "seckill_vouchers WHERE voucher_id = %lld",
                              (long long)v) >= before);
    assert_int_equal(2, it_sql_scalar("SELECT halt FROM seckill_vouchers "
                                      "WHERE voucher_id = %lld",
                                      (long long)v));
    assert_refused_everywhere(v, "ENDED");
    if (strcmp(mode, "async") == 0) {
        redisContext *rc = it_redis_connect();

        assert_int_equal(2, redis_int(rc, "HGET {v:%lld}:info halt", v));
        redisFree(rc);
        assert_async_agrees(v);
    }
    /* Ended: every control of the sale is refused but the texts'. */
    control_error(&srv[0], "POST", v, "/stop", NULL, 409, "ENDED");
    control_error(&srv[0], "POST", v, "/pause", NULL, 409, "ENDED");
    control_error(&srv[0], "POST", v, "/resume", NULL, 409, "ENDED");
    control_error(&srv[0], "POST", v, "/restock", "{\"add\":5}", 409, "ENDED");
    control_error(&srv[0], "PATCH", v, "",
                  "{\"endTime\":\"2099-01-01T00:00:00Z\"}", 409, "ENDED");
    json_decref(control_ok(&srv[0], "PATCH", v, "", "{\"title\":\"over\"}"));
    control_error(&srv[0], "DELETE", v, "", NULL, 409, "SALE_STARTED");
    assert_invariants(v);
    assert_false(rebuilt(v));
}

static void test_stop_sync(void **state)
{
    (void)state;
    stop("sync", 201);
}

static void test_stop_async(void **state)
{
    (void)state;
    stop("async", 202);
}

/* ---- restock ---- */

static void restock(const char *mode, const struct it_server *maker, long ok)
{
    int64_t v = sale_create(maker, mode, 3, -1, 600, NULL);
    json_t *j;

    for (int i = 0; i < 3; i++)
        assert_int_equal(ok, buy(&srv[i % 2], v, NULL, 0));
    /* Sold out on both instances (their caches flag it). */
    assert_refused_everywhere(v, "SOLD_OUT");
    if (strcmp(mode, "async") == 0)
        assert_async_agrees(v);
    j = control_ok(&srv[0], "POST", v, "/restock", "{\"add\":5}");
    assert_int_equal(8, initial_stock(v));
    if (strcmp(mode, "async") != 0)
        assert_int_equal(5, json_integer_value(json_object_get(j, "stock")));
    json_decref(j);
    assert_invariants(v);
    /* Both instances sell again at once. */
    assert_sells_everywhere(v, ok);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ok, buy(&srv[i % 2], v, NULL, 0));
    assert_refused_everywhere(v, "SOLD_OUT");
    if (strcmp(mode, "async") == 0)
        assert_async_agrees(v);
    assert_invariants(v);
    assert_int_equal(8, active_orders(v));
    assert_int_equal(0, stock_of(v));
    assert_false(rebuilt(v));
}

static void test_restock_sync(void **state)
{
    (void)state;
    restock("sync", &srv[0], 201);
}

static void test_restock_sync_segmented(void **state)
{
    (void)state;
    restock("sync", &srv[1], 201);
    /* Segments: every unit in one of them, the row holding none. */
}

static void test_restock_async(void **state)
{
    (void)state;
    restock("async", &srv[0], 202);
}

/* A restock committed in MySQL whose Redis script never ran (its
 * instance died in between), written here by hand as the transaction
 * writes it: the reconciliation reads the units as on their way, not as
 * a disagreement, and brings Redis up to the revision itself, without a
 * rebuild. */
static void test_restock_caught_up(void **state)
{
    int64_t v = sale_create(&srv[0], "async", 4, -1, 600, NULL);
    redisContext *rc = it_redis_connect();
    int64_t until;

    (void)state;
    assert_int_equal(202, buy(&srv[0], v, NULL, 0));
    assert_async_agrees(v);
    assert_int_equal(0, it_sql_exec("UPDATE seckill_vouchers SET stock = "
                                    "stock + 6, initial_stock = "
                                    "initial_stock + 6, restocked = "
                                    "restocked + 6, revision = revision + 1 "
                                    "WHERE voucher_id = %lld",
                                    (long long)v));
    until = util_mono_ms() + 10000;
    while (redis_int(rc, "HGET {v:%lld}:info initial", v) != 10 &&
           util_mono_ms() < until)
        usleep(100 * 1000);
    assert_int_equal(10, redis_int(rc, "HGET {v:%lld}:info initial", v));
    assert_int_equal(9, redis_int(rc, "GET {v:%lld}:stock", v));
    assert_int_equal(6, redis_int(rc, "HGET {v:%lld}:info restocked", v));
    redisFree(rc);
    assert_async_agrees(v);
    assert_false(rebuilt(v));
}

/* A restock of an async sale frozen for a rebuild: its Redis refuses the
 * catch-up for longer than the control waits. The restock is committed,
 * so it is answered 200 (never an error that invites a retry, which
 * would restock again); one restock, one audit record, and Redis follows
 * once the freeze ends. */
static void test_restock_frozen(void **state)
{
    int64_t v = sale_create(&srv[0], "async", 3, -1, 600, NULL);
    redisContext *rc = it_redis_connect();
    struct it_resp resp;
    redisReply *r;
    int64_t until;

    (void)state;
    assert_int_equal(202, buy(&srv[0], v, NULL, 0));
    assert_async_agrees(v);
    /* Frozen by an instance that is not there: until it expires. */
    r = redisCommand(rc, "SET {v:%lld}:frozen test-holder PX 5000",
                     (long long)v);
    assert_non_null(r);
    freeReplyObject(r);
    control(&srv[0], "POST", v, "/restock", "{\"add\":5}", &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    assert_int_equal(8, initial_stock(v));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.restock'",
                                      (long long)v));
    until = util_mono_ms() + 20000;
    while (redis_int(rc, "HGET {v:%lld}:info initial", v) != 8 &&
           util_mono_ms() < until)
        usleep(100 * 1000);
    assert_int_equal(8, redis_int(rc, "HGET {v:%lld}:info initial", v));
    redisFree(rc);
    assert_async_agrees(v);
    assert_sells_everywhere(v, 202);
    assert_async_agrees(v);
}

/* An admin change sent with an Idempotency-Key and a path: status, and
 * the answer in resp. */
static long keyed(const char *method, const char *path, const char *body,
                  const char *key, struct it_resp *resp)
{
    char hdr[320];
    struct it_req req = {.method = method,
                         .path = path,
                         .body = body,
                         .token = admin,
                         .header = hdr};

    /* curl sends an empty header only in its "Name;" form. */
    if (key[0])
        snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", key);
    else
        snprintf(hdr, sizeof(hdr), "Idempotency-Key;");
    return it_http_do(&srv[0], &req, resp);
}

/* The same restock twice with one key: one restock, the first answer
 * again (Idempotent-Replayed); the key with another body: 422, nothing
 * changed. Also on a frozen async sale, and for two copies sent at
 * once. */
static void test_restock_idempotent(void **state)
{
    int64_t v = sale_create(&srv[0], "sync", 3, -1, 600, NULL);
    int64_t a = sale_create(&srv[0], "async", 3, -1, 600, NULL);
    char path[96], key[64], hdr[64];
    struct it_resp r1, r2;
    redisContext *rc;
    redisReply *rr;

    (void)state;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/restock", (long long)v);
    snprintf(key, sizeof(key), "restock-%lld", (long long)it_unique());
    assert_int_equal(200, keyed("POST", path, "{\"add\":5}", key, &r1));
    assert_int_equal(200, keyed("POST", path, "{\"add\":5}", key, &r2));
    assert_string_equal(r1.body, r2.body);
    it_resp_header(&r2, "Idempotent-Replayed", hdr, sizeof(hdr));
    assert_string_equal("true", hdr);
    it_resp_header(&r1, "Idempotent-Replayed", hdr, sizeof(hdr));
    assert_string_equal("", hdr);
    it_resp_free(&r1);
    it_resp_free(&r2);
    assert_int_equal(8, initial_stock(v));
    keyed("POST", path, "{\"add\":6}", key, &r1);
    it_assert_error(&r1, 422, "IDEMPOTENCY_KEY_REUSED");
    it_resp_free(&r1);
    assert_int_equal(8, initial_stock(v));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.restock'",
                                      (long long)v));
    assert_invariants(v);

    /* Frozen async sale: answered 200 the first time and again. */
    rc = it_redis_connect();
    rr = redisCommand(rc, "SET {v:%lld}:frozen test-holder PX 5000",
                      (long long)a);
    freeReplyObject(rr);
    redisFree(rc);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/restock", (long long)a);
    snprintf(key, sizeof(key), "restock-%lld", (long long)it_unique());
    assert_int_equal(200, keyed("POST", path, "{\"add\":5}", key, &r1));
    assert_int_equal(200, keyed("POST", path, "{\"add\":5}", key, &r2));
    assert_string_equal(r1.body, r2.body);
    it_resp_free(&r1);
    it_resp_free(&r2);
    assert_int_equal(8, initial_stock(a));

    /* Two copies at once: one restock; each answer the first's or 409
     * IDEMPOTENCY_KEY_IN_USE. */
    {
        struct it_req reqs[2];
        struct it_resp resps[2];
        const struct it_server *to[2] = {&srv[0], &srv[1]};
        char h[96];
        int ok = 0;

        snprintf(path, sizeof(path), "/api/vouchers/%lld/restock",
                 (long long)v);
        snprintf(h, sizeof(h), "Idempotency-Key: twin-%lld",
                 (long long)it_unique());
        for (int i = 0; i < 2; i++)
            reqs[i] = (struct it_req){.method = "POST",
                                      .path = path,
                                      .body = "{\"add\":1}",
                                      .token = admin,
                                      .header = h};
        it_http_run_all(reqs, to, resps, 2);
        for (int i = 0; i < 2; i++) {
            if (resps[i].status == 200)
                ok++;
            else
                it_assert_error(&resps[i], 409, "IDEMPOTENCY_KEY_IN_USE");
            it_resp_free(&resps[i]);
        }
        assert_true(ok >= 1);
        assert_int_equal(9, initial_stock(v));
    }
}

/* The key on the other admin writes: a create, a pause, a ban and a
 * delete, each sent twice, change once and answer twice alike; a key
 * that is not 1..255 visible characters is a 400. A key whose first
 * change committed but recorded no answer (its instance died in
 * between; written here by hand) is 409 while the first may still be
 * answering, then answered from the voucher as it is. */
static void test_idempotency_keys(void **state)
{
    char body[512], b[40], e[40], key[64], path[96], title[48];
    struct it_resp r1, r2;
    int64_t v;

    (void)state;
    snprintf(title, sizeof(title), "keyed-%lld", (long long)it_unique());
    snprintf(body, sizeof(body),
             "{\"shopId\":7,\"title\":\"%s\",\"payValue\":100,"
             "\"actualValue\":200,\"type\":\"seckill\",\"stock\":5,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
             title, it_time(3600, b), it_time(7200, e));
    snprintf(key, sizeof(key), "create-%lld", (long long)it_unique());
    assert_int_equal(201, keyed("POST", "/api/vouchers", body, key, &r1));
    assert_int_equal(201, keyed("POST", "/api/vouchers", body, key, &r2));
    assert_string_equal(r1.body, r2.body);
    v = it_json_id(r1.json, "id");
    it_resp_free(&r1);
    it_resp_free(&r2);
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM vouchers WHERE "
                                      "title = '%s'",
                                      title));

    snprintf(path, sizeof(path), "/api/vouchers/%lld/pause", (long long)v);
    snprintf(key, sizeof(key), "pause-%lld", (long long)it_unique());
    assert_int_equal(200, keyed("POST", path, NULL, key, &r1));
    assert_int_equal(200, keyed("POST", path, NULL, key, &r2));
    it_resp_free(&r1);
    it_resp_free(&r2);
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.pause'",
                                      (long long)v));

    snprintf(path, sizeof(path), "/api/admin/users/%lld/ban",
             (long long)(next_user++));
    snprintf(key, sizeof(key), "ban-%lld", (long long)it_unique());
    assert_int_equal(204, keyed("POST", path, NULL, key, &r1));
    assert_int_equal(204, keyed("POST", path, NULL, key, &r2));
    it_resp_free(&r1);
    it_resp_free(&r2);

    /* Bad keys. */
    keyed("POST", path, NULL, "", &r1);
    it_assert_error(&r1, 400, "BAD_REQUEST");
    it_resp_free(&r1);
    keyed("POST", path, NULL, "a b", &r1);
    it_assert_error(&r1, 400, "BAD_REQUEST");
    it_resp_free(&r1);
    /* Two keys: 400, whichever was meant. */
    {
        const char *two[] = {"Idempotency-Key: k1", "Idempotency-Key: k2",
                             NULL};
        struct it_req req = {
            .method = "POST", .path = path, .token = admin, .headers = two};

        it_http_do(&srv[0], &req, &r1);
        it_assert_error(&r1, 400, "BAD_REQUEST");
        it_resp_free(&r1);
    }
    /* Without a token: 401 first, whatever the key. */
    {
        struct it_req req = {
            .method = "POST", .path = path, .header = "Idempotency-Key: a b"};

        it_http_do(&srv[0], &req, &r1);
        it_assert_error(&r1, 401, "UNAUTHORIZED");
        it_resp_free(&r1);
    }
    {
        char longkey[300];

        memset(longkey, 'k', 256);
        longkey[256] = '\0';
        keyed("POST", path, NULL, longkey, &r1);
        it_assert_error(&r1, 400, "BAD_REQUEST");
        it_resp_free(&r1);
    }

    /* A key recorded without its answer: 409 for a moment, then the
     * voucher as it is now, and no second pause. */
    snprintf(path, sizeof(path), "/api/vouchers/%lld/resume", (long long)v);
    snprintf(key, sizeof(key), "lost-%lld", (long long)it_unique());
    {
        unsigned char h[32];
        char hex[65];
        crypto_hash_sha256_state st;

        crypto_hash_sha256_init(&st);
        crypto_hash_sha256_update(&st, (const unsigned char *)"POST", 5);
        crypto_hash_sha256_update(&st, (const unsigned char *)path,
                                  strlen(path) + 1);
        crypto_hash_sha256_final(&st, h);
        sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
        assert_int_equal(0,
                         it_sql_exec("INSERT INTO idempotency_keys (admin_id, "
                                     "idem_key, request_hash, action, "
                                     "target_type, target_id) VALUES (1, "
                                     "'%s', UNHEX('%s'), 'voucher.resume', "
                                     "'voucher', %lld)",
                                     key, hex, (long long)v));
    }
    keyed("POST", path, NULL, key, &r1);
    it_assert_error(&r1, 409, "IDEMPOTENCY_KEY_IN_USE");
    it_resp_free(&r1);
    assert_int_equal(0, it_sql_exec("UPDATE idempotency_keys SET created = "
                                    "NOW(3) - INTERVAL 1 MINUTE WHERE "
                                    "idem_key = '%s'",
                                    key));
    assert_int_equal(200, keyed("POST", path, NULL, key, &r1));
    assert_true(json_is_true(json_object_get(r1.json, "paused")));
    it_resp_free(&r1);
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.resume'",
                                      (long long)v));

    /* A delete, twice. */
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);
    snprintf(key, sizeof(key), "delete-%lld", (long long)it_unique());
    assert_int_equal(204, keyed("DELETE", path, NULL, key, &r1));
    assert_int_equal(204, keyed("DELETE", path, NULL, key, &r2));
    it_resp_free(&r1);
    it_resp_free(&r2);
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.delete'",
                                      (long long)v));
}

/* ---- edit ---- */

static void test_patch_before_start(void **state)
{
    const char *modes[] = {"sync", "sync", "async"};
    char body[512], b[40], e[40];

    (void)state;
    for (int m = 0; m < 3; m++) {
        /* sync on A, sync segmented on B, async */
        int64_t v = sale_create(&srv[m == 1], modes[m], 10, 3600, 7200, NULL);
        json_t *j;

        snprintf(body, sizeof(body),
                 "{\"title\":\"new\",\"subTitle\":\"sub\",\"rules\":\"r\","
                 "\"payValue\":150,\"actualValue\":300,\"beginTime\":\"%s\","
                 "\"endTime\":\"%s\",\"stock\":7}",
                 it_time(1800, b), it_time(9000, e));
        j = control_ok(&srv[0], "PATCH", v, "", body);
        assert_string_equal("new", it_json_str(j, "title"));
        assert_string_equal("sub", it_json_str(j, "subTitle"));
        assert_int_equal(150,
                         json_integer_value(json_object_get(j, "payValue")));
        assert_int_equal(7, json_integer_value(json_object_get(j, "stock")));
        assert_string_equal(b, it_json_str(j, "beginTime"));
        assert_string_equal(e, it_json_str(j, "endTime"));
        json_decref(j);
        assert_int_equal(7, stock_of(v));
        assert_int_equal(7, initial_stock(v));
        assert_int_equal(300, it_sql_scalar("SELECT actual_value FROM vouchers "
                                            "WHERE id = %lld",
                                            (long long)v));
        if (m == 1)
            assert_int_equal(4, it_sql_scalar("SELECT COUNT(*) FROM "
                                              "seckill_stock_segments WHERE "
                                              "voucher_id = %lld AND stock "
                                              "IN (1, 2)",
                                              (long long)v));
        if (m == 2) {
            redisContext *rc = it_redis_connect();

            assert_int_equal(7, redis_int(rc, "GET {v:%lld}:stock", v));
            assert_int_equal(7, redis_int(rc, "HGET {v:%lld}:info initial", v));
            assert_int_equal(util_now_ms() / 1000 + 1800,
                             redis_int(rc, "HGET {v:%lld}:info begin", v));
            redisFree(rc);
        }
        /* More stock again, and a stock of 0. */
        json_decref(control_ok(&srv[1], "PATCH", v, "", "{\"stock\":12}"));
        assert_int_equal(12, stock_of(v));
        assert_int_equal(12, initial_stock(v));
        json_decref(control_ok(&srv[1], "PATCH", v, "", "{\"stock\":0}"));
        assert_int_equal(0, stock_of(v));
        /* Each bad field: 400 naming it; nothing changed. */
        control_error(&srv[0], "PATCH", v, "", "{\"payValue\":301}", 400,
                      "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"payValue\":0}", 400,
                      "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"actualValue\":100}", 400,
                      "BAD_REQUEST");
        snprintf(body, sizeof(body), "{\"endTime\":\"%s\"}", it_time(10, e));
        control_error(&srv[0], "PATCH", v, "", body, 400, "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"beginTime\":\"soon\"}", 400,
                      "BAD_REQUEST");
        /* Both moved into the past: a sale over before its change. */
        {
            char pb[UTIL_TIME_LEN], pe[UTIL_TIME_LEN];

            snprintf(body, sizeof(body),
                     "{\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
                     it_time(-7200, pb), it_time(-3600, pe));
            control_error(&srv[0], "PATCH", v, "", body, 400, "BAD_REQUEST");
        }
        control_error(&srv[0], "PATCH", v, "", "{\"stock\":-1}", 400,
                      "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"title\":\"\"}", 400,
                      "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"colour\":\"red\"}", 400,
                      "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"type\":\"normal\"}", 400,
                      "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{\"purchaseMode\":\"sync\"}",
                      400, "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "[1]", 400, "BAD_REQUEST");
        control_error(&srv[0], "PATCH", v, "", "{}", 400, "BAD_REQUEST");
        assert_int_equal(150, it_sql_scalar("SELECT pay_value FROM vouchers "
                                            "WHERE id = %lld",
                                            (long long)v));
        assert_invariants(v);
        if (m == 2)
            assert_async_agrees(v);
        assert_false(rebuilt(v));
    }
}

static void test_patch_after_start(void **state)
{
    char body[256], e[40];

    (void)state;
    for (int m = 0; m < 2; m++) {
        int64_t v =
            sale_create(&srv[0], m ? "async" : "sync", 10, -1, 600, NULL);
        json_t *j;

        assert_int_equal(m ? 202 : 201, buy(&srv[1], v, NULL, 0));
        j = control_ok(&srv[1], "PATCH", v, "",
                       "{\"title\":\"t2\",\"subTitle\":\"s2\",\"rules\":"
                       "\"r2\"}");
        assert_string_equal("t2", it_json_str(j, "title"));
        json_decref(j);
        snprintf(body, sizeof(body), "{\"endTime\":\"%s\"}", it_time(1200, e));
        j = control_ok(&srv[0], "PATCH", v, "", body);
        assert_string_equal(e, it_json_str(j, "endTime"));
        json_decref(j);
        if (m) {
            redisContext *rc = it_redis_connect();

            assert_int_equal(util_now_ms() / 1000 + 1200,
                             redis_int(rc, "HGET {v:%lld}:info end", v));
            redisFree(rc);
        }
        control_error(&srv[0], "PATCH", v, "", "{\"payValue\":120}", 409,
                      "SALE_STARTED");
        control_error(&srv[0], "PATCH", v, "", "{\"actualValue\":220}", 409,
                      "SALE_STARTED");
        control_error(&srv[0], "PATCH", v, "", "{\"stock\":20}", 409,
                      "SALE_STARTED");
        snprintf(body, sizeof(body), "{\"beginTime\":\"%s\"}", it_time(60, e));
        control_error(&srv[0], "PATCH", v, "", body, 409, "SALE_STARTED");
        control_error(&srv[0], "PATCH", v, "", "{\"shopId\":8}", 409,
                      "SALE_STARTED");
        control_error(&srv[0], "PATCH", v, "", "{\"admission\":\"queue\"}", 409,
                      "SALE_STARTED");
        snprintf(body, sizeof(body), "{\"endTime\":\"%s\"}", it_time(-60, e));
        control_error(&srv[0], "PATCH", v, "", body, 400, "BAD_REQUEST");
        control_error(&srv[0], "DELETE", v, "", NULL, 409, "SALE_STARTED");
        /* "Now" ends it. */
        snprintf(body, sizeof(body), "{\"endTime\":\"%s\"}", it_time(0, e));
        json_decref(control_ok(&srv[0], "PATCH", v, "", body));
        assert_refused_everywhere(v, "ENDED");
        assert_invariants(v);
        if (m)
            assert_async_agrees(v);
        assert_false(rebuilt(v));
    }
}

/* ---- delete ---- */

static void test_delete(void **state)
{
    const char *modes[] = {"sync", "sync", "async"};
    struct it_resp resp;
    char path[64];

    (void)state;
    for (int m = 0; m < 3; m++) {
        int64_t v = sale_create(&srv[m == 1], modes[m], 10, 3600, 7200,
                                m == 2 ? "queue" : NULL);
        char got[32];

        /* Both caches know it (not started). */
        assert_int_equal(409, buy(&srv[0], v, got, sizeof(got)));
        assert_int_equal(409, buy(&srv[1], v, got, sizeof(got)));
        control(&srv[0], "DELETE", v, "", NULL, &resp);
        it_assert_status(&resp, 204);
        it_resp_free(&resp);
        snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);
        it_http(&srv[1], "GET", path, NULL, NULL, &resp);
        it_assert_error(&resp, 404, "NOT_FOUND");
        it_resp_free(&resp);
        assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM "
                                          "seckill_vouchers WHERE voucher_id "
                                          "= %lld",
                                          (long long)v));
        assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM "
                                          "seckill_stock_segments WHERE "
                                          "voucher_id = %lld",
                                          (long long)v));
        if (m == 2) {
            redisContext *rc = it_redis_connect();

            assert_int_equal(0, redis_int(rc, "EXISTS {v:%lld}:info", v));
            assert_int_equal(0, redis_int(rc, "EXISTS {v:%lld}:stock", v));
            assert_int_equal(0, redis_int(rc, "EXISTS {v:%lld}:wr:queue", v));
            redisFree(rc);
        }
        for (int i = 0; i < 2; i++) {
            int64_t until = util_mono_ms() + TOLD_MS;
            long st;

            while ((st = buy(&srv[i], v, got, sizeof(got))) != 404 &&
                   util_mono_ms() < until)
                usleep(20 * 1000);
            assert_int_equal(404, st);
        }
        control_error(&srv[0], "DELETE", v, "", NULL, 404, "NOT_FOUND");
    }
}

/* Every control that changed something is in the audit log with its
 * admin and address, in order; one refused writes nothing. */
static void test_audited(void **state)
{
    const char *want[] = {"voucher.patch", "voucher.pause", "voucher.resume",
                          "voucher.restock", "voucher.stop"};
    int64_t v = sale_create(&srv[0], "sync", 5, 3600, 7200, NULL);
    int64_t d = sale_create(&srv[0], "async", 5, 3600, 7200, NULL);
    int64_t got[8], before;
    json_t *j;

    (void)state;
    j = control_ok(&srv[0], "PATCH", v, "", "{\"title\":\"audited title\"}");
    json_decref(j);
    json_decref(control_ok(&srv[0], "POST", v, "/pause", NULL));
    json_decref(control_ok(&srv[0], "POST", v, "/resume", NULL));
    json_decref(control_ok(&srv[0], "POST", v, "/restock", "{\"add\":3}"));
    json_decref(control_ok(&srv[0], "POST", v, "/stop", NULL));
    before = it_sql_scalar("SELECT COUNT(*) FROM audit_log");
    control_error(&srv[0], "POST", v, "/restock", "{\"add\":3}", 409, "ENDED");
    assert_int_equal(before, it_sql_scalar("SELECT COUNT(*) FROM audit_log"));
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        size_t n = it_sql_column(got, 8,
                                 "SELECT id FROM audit_log WHERE "
                                 "target_type = 'voucher' AND target_id = "
                                 "%lld AND action = '%s' AND admin_id = 1 AND "
                                 "addr = '127.0.0.1'",
                                 (long long)v, want[i]);

        assert_int_equal(1, n);
    }
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.patch' AND JSON_VALUE("
                                      "change_json, '$.title') = "
                                      "'audited title'",
                                      (long long)v));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.restock' AND JSON_VALUE("
                                      "change_json, '$.add') = 3",
                                      (long long)v));
    /* The records in the order of the controls. */
    assert_int_equal(
        1, it_sql_scalar("SELECT MIN(id) = (SELECT id FROM audit_log WHERE "
                         "target_id = %lld AND action = 'voucher.patch') "
                         "AND MAX(id) = (SELECT id FROM audit_log WHERE "
                         "target_id = %lld AND action = 'voucher.stop') "
                         "FROM audit_log WHERE target_type = 'voucher' AND "
                         "target_id = %lld AND action <> 'voucher.create'",
                         (long long)v, (long long)v, (long long)v));
    /* A deletion keeps its record. */
    {
        struct it_resp resp;

        control(&srv[0], "DELETE", d, "", NULL, &resp);
        it_assert_status(&resp, 204);
        it_resp_free(&resp);
    }
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "target_id = %lld AND action = "
                                      "'voucher.delete' AND admin_id = 1",
                                      (long long)d));
}

/* ---- the crowd ---- */

#define CROWD_BUYERS 2000
#define CROWD_WAVE 64
#define CROWD_STOCK 400
#define CROWD_RESTOCK 200
#define WAVE_GAP_MS 180

struct crowd {
    int64_t v[2]; /* sync, async */
    int64_t base; /* buyer ids base + 0..CROWD_BUYERS */
    char (*tokens)[TOKEN_STR_LEN];
    long status[2][CROWD_BUYERS];
    char code[2][CROWD_BUYERS][24];
    int64_t order[2][CROWD_BUYERS];
    int64_t sent_ms[2][CROWD_BUYERS], done_ms[2][CROWD_BUYERS];
};

static void *crowd_run(void *arg)
{
    struct crowd *c = arg;
    struct it_req reqs[2 * CROWD_WAVE];
    struct it_resp resps[2 * CROWD_WAVE];
    const struct it_server *to[2 * CROWD_WAVE];
    char paths[2][64];

    for (int k = 0; k < 2; k++)
        snprintf(paths[k], sizeof(paths[k]), "/api/vouchers/%lld/seckill",
                 (long long)c->v[k]);
    for (int w = 0; w * CROWD_WAVE < CROWD_BUYERS; w++) {
        size_t n = 0;
        int64_t sent = util_now_ms();

        for (int i = w * CROWD_WAVE;
             i < (w + 1) * CROWD_WAVE && i < CROWD_BUYERS; i++)
            for (int k = 0; k < 2; k++) {
                reqs[n] = (struct it_req){
                    .method = "POST", .path = paths[k], .token = c->tokens[i]};
                to[n] = &srv[(i + k) % 2];
                n++;
            }
        it_http_run_all(reqs, to, resps, n);
        n = 0;
        for (int i = w * CROWD_WAVE;
             i < (w + 1) * CROWD_WAVE && i < CROWD_BUYERS; i++)
            for (int k = 0; k < 2; k++) {
                struct it_resp *r = &resps[n++];
                json_t *e = r->json ? json_object_get(r->json, "error") : NULL;
                const char *code = e ? it_json_str(e, "code") : NULL;
                const char *id =
                    r->json ? it_json_str(r->json, "orderId") : NULL;

                c->status[k][i] = r->status;
                snprintf(c->code[k][i], sizeof(c->code[k][i]), "%s",
                         code ? code : "");
                c->order[k][i] = id ? atoll(id) : 0;
                c->sent_ms[k][i] = sent;
                c->done_ms[k][i] = util_now_ms();
                it_resp_free(r);
            }
        if (getenv("CONTROLS_VERBOSE"))
            print_message("wave %d: sent %lld, %lld ms\n", w,
                          (long long)(sent % 100000),
                          (long long)(util_now_ms() - sent));
        usleep(WAVE_GAP_MS * 1000);
    }
    return NULL;
}

/* When each of the sale's orders was decided (epoch ms): a sync order's
 * INSERT time (its pay deadline less the 900 s to pay), an async one's
 * place in its stream (Redis' clock when the script sold it). */
static size_t orders_decided(int64_t v, bool async, int64_t *out, size_t max)
{
    return async ? it_sql_column(out, max,
                                 "SELECT stream_pos >> 20 FROM "
                                 "voucher_orders WHERE voucher_id = %lld",
                                 (long long)v)
                 : it_sql_column(out, max,
                                 "SELECT CAST(UNIX_TIMESTAMP(pay_deadline) * "
                                 "1000 AS SIGNED) - 900000 FROM "
                                 "voucher_orders WHERE voucher_id = %lld",
                                 (long long)v);
}

static void test_crowd(void **state)
{
    static struct crowd c;
    int64_t paused_at, resume_at, stopped_at, t0;
    pthread_t th;
    int64_t *decided = calloc(CROWD_BUYERS, sizeof(int64_t));

    (void)state;
    memset(&c, 0, sizeof(c));
    c.v[0] = sale_create(&srv[0], "sync", CROWD_STOCK, -1, 600, NULL);
    c.v[1] = sale_create(&srv[1], "async", CROWD_STOCK, -1, 600, NULL);
    c.base = next_user;
    next_user += CROWD_BUYERS;
    c.tokens = calloc(CROWD_BUYERS, TOKEN_STR_LEN);
    for (int i = 0; i < CROWD_BUYERS; i++)
        it_token(c.base + i, TOKEN_ROLE_USER, 3600, c.tokens[i]);

    t0 = util_mono_ms();
    assert_int_equal(0, pthread_create(&th, NULL, crowd_run, &c));
    usleep(700 * 1000);
    for (int k = 0; k < 2; k++)
        json_decref(control_ok(&srv[k], "POST", c.v[k], "/pause", NULL));
    paused_at = util_now_ms();
    usleep(1500 * 1000);
    resume_at = util_now_ms();
    for (int k = 0; k < 2; k++)
        json_decref(control_ok(&srv[1 - k], "POST", c.v[k], "/resume", NULL));
    usleep(700 * 1000);
    for (int k = 0; k < 2; k++)
        json_decref(
            control_ok(&srv[k], "POST", c.v[k], "/restock", "{\"add\":200}"));
    usleep(1200 * 1000);
    for (int k = 0; k < 2; k++)
        json_decref(control_ok(&srv[1 - k], "POST", c.v[k], "/stop", NULL));
    stopped_at = util_now_ms();
    if (getenv("CONTROLS_VERBOSE"))
        print_message("paused %lld resumed %lld stopped %lld\n",
                      (long long)(paused_at % 100000),
                      (long long)(resume_at % 100000),
                      (long long)(stopped_at % 100000));
    pthread_join(th, NULL);
    print_message("crowd: %d buyers x 2 vouchers in %lld ms\n", CROWD_BUYERS,
                  (long long)(util_mono_ms() - t0));

    for (int k = 0; k < 2; k++) {
        long ok = k ? 202 : 201;
        size_t sold = 0, paused = 0, ended = 0, sold_out = 0;

        for (int i = 0; i < CROWD_BUYERS; i++) {
            long st = c.status[k][i];
            const char *code = c.code[k][i];

            if (st == ok) {
                sold++;
                assert_true(c.order[k][i] > 0);
                /* Sent a second after the pause answered and answered
                 * before the resume was sent: refused; likewise after the
                 * stop. */
                if ((c.sent_ms[k][i] > paused_at + TOLD_MS &&
                     c.done_ms[k][i] < resume_at) ||
                    c.sent_ms[k][i] > stopped_at)
                    print_error("voucher %lld: buyer %d sold at %lld\n",
                                (long long)c.v[k], i,
                                (long long)c.sent_ms[k][i]);
                assert_false(c.sent_ms[k][i] > paused_at + TOLD_MS &&
                             c.done_ms[k][i] < resume_at);
                assert_false(c.sent_ms[k][i] > stopped_at);
                continue;
            }
            if (st != 409)
                print_error("voucher %lld: buyer %d got %ld %s\n",
                            (long long)c.v[k], i, st, code);
            assert_int_equal(409, st);
            if (strcmp(code, "SALE_PAUSED") == 0)
                paused++;
            else if (strcmp(code, "ENDED") == 0)
                ended++;
            else if (strcmp(code, "SOLD_OUT") == 0)
                sold_out++;
            else
                fail_msg("unexpected 409 %s", code);
            /* Every instance's answer a second after the pause (and
             * until the resume) is the pause's; after the stop, ENDED. */
            if (c.sent_ms[k][i] > paused_at + TOLD_MS &&
                c.done_ms[k][i] < resume_at)
                assert_string_equal("SALE_PAUSED", code);
            if (c.sent_ms[k][i] > stopped_at + TOLD_MS)
                assert_string_equal("ENDED", code);
        }
        print_message("voucher %lld (%s): %zu sold, %zu paused, %zu sold "
                      "out, %zu ended\n",
                      (long long)c.v[k], k ? "async" : "sync", sold, paused,
                      sold_out, ended);
        assert_true(paused > 0);
        assert_true(ended > 0);
        if (k)
            assert_async_agrees(c.v[k]);
        assert_invariants(c.v[k]);
        assert_int_equal(CROWD_STOCK + CROWD_RESTOCK, initial_stock(c.v[k]));
        /* Every answer that sold is an order in MySQL, and nothing else. */
        assert_int_equal((int64_t)sold, it_sql_order_count(c.v[k]));
        for (int i = 0; i < CROWD_BUYERS; i++)
            if (c.status[k][i] == ok)
                assert_int_equal(c.base + i,
                                 it_sql_scalar("SELECT user_id FROM "
                                               "voucher_orders WHERE id = "
                                               "%lld",
                                               (long long)c.order[k][i]));
        /* No order was decided while paused (from the pause's answer to
         * the resume) nor after the stop. */
        size_t n = orders_decided(c.v[k], k == 1, decided, CROWD_BUYERS);
        assert_int_equal(sold, n);
        for (size_t j = 0; j < n; j++) {
            if ((decided[j] > paused_at && decided[j] < resume_at) ||
                decided[j] > stopped_at)
                print_error("voucher %lld: an order decided at %lld (pause "
                            "%lld, resume %lld, stop %lld)\n",
                            (long long)c.v[k], (long long)decided[j],
                            (long long)paused_at, (long long)resume_at,
                            (long long)stopped_at);
            assert_false(decided[j] > paused_at && decided[j] < resume_at);
            assert_false(decided[j] > stopped_at);
        }
        assert_false(rebuilt(c.v[k]));
    }
    free(decided);
    free(c.tokens);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_pause_sync),
        cmocka_unit_test(test_pause_sync_segmented),
        cmocka_unit_test(test_pause_async),
        cmocka_unit_test(test_pause_queue),
        cmocka_unit_test(test_stop_sync),
        cmocka_unit_test(test_stop_async),
        cmocka_unit_test(test_restock_sync),
        cmocka_unit_test(test_restock_sync_segmented),
        cmocka_unit_test(test_restock_async),
        cmocka_unit_test(test_restock_caught_up),
        cmocka_unit_test(test_restock_frozen),
        cmocka_unit_test(test_restock_idempotent),
        cmocka_unit_test(test_idempotency_keys),
        cmocka_unit_test(test_patch_before_start),
        cmocka_unit_test(test_patch_after_start),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_audited),
        cmocka_unit_test(test_crowd),
    };
    /* SECKILL_IT_FILTER=test_x runs the tests whose names match. */
    const char *filter = getenv("SECKILL_IT_FILTER");

    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
