/*
 * test_queue.c - a queue sale's waiting room across two instances, at 20
 * places a second and tickets good for 3 s: joining before the begin
 * gives a place drawn at random (checked: the positions are a
 * permutation of 1..N, uncorrelated with the order of joining), joining
 * after it a place behind them in order; a rejoin keeps the place;
 * places are admitted at the rate, each with a ticket that is the only
 * way to buy (another buyer's, another voucher's or an expired one is
 * refused); a buyer who joins a ticket's life after the begin is admitted
 * as it joins and buys; polls are limited; the sale never sells more
 * than its stock (checked in MySQL), in both purchase modes. Open sales
 * are unchanged.
 */
#include <math.h>
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

#include "tests/it/harness.h"

#define RATE 20
#define TICKET_TTL_S 3

enum { SRV_A, SRV_B, SRV_COUNT };
static struct it_server srvs[SRV_COUNT];
static struct it_server *const srv_a = &srvs[SRV_A];
static struct it_server *const srv_b = &srvs[SRV_B];
static int64_t user_base;
static int next_user;

static int group_setup(void **state)
{
    const char *env[] = {
        "SECKILL_WAITROOM_ADMIT_RATE=20", "SECKILL_WAITROOM_TICKET_TTL_S=3",
        "SECKILL_WAITROOM_POLL_S=1", "SECKILL_WAITROOM_OPEN_S=600",
        "SECKILL_RATE_USER", "SECKILL_RATE_IP", "SECKILL_PURCHASE_MODE",
        /* The test's Redis does not fsync every write. */
        "SECKILL_ASYNC_ACCEPT_LOSS=1", NULL};

    (void)state;
    it_init();
    user_base = 700000000000LL + util_now_ms() % 100000000 * 100;
    if (it_server_start(srv_a, "queue-a", env) ||
        it_server_start(srv_b, "queue-b", env))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srvs, SRV_COUNT);
}

static int64_t fresh_user(void)
{
    return user_base + next_user++;
}

/* A queue voucher with stock, beginning in begin_s and ending in end_s
 * (seconds from now), in mode ("sync", "async"). */
static int64_t queue_voucher(int64_t stock, int64_t begin_s, int64_t end_s,
                             const char *mode)
{
    char body[512], b[UTIL_TIME_LEN], e[UTIL_TIME_LEN];

    snprintf(body, sizeof(body),
             "{\"shopId\":%lld,\"title\":\"queued\",\"payValue\":1,"
             "\"actualValue\":2,\"type\":\"seckill\",\"stock\":%lld,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\",\"purchaseMode\":\"%s\","
             "\"admission\":\"queue\"}",
             (long long)it_unique(), (long long)stock, it_time(begin_s, b),
             it_time(end_s, e), mode);
    return it_voucher_create(srv_a, body);
}

struct place {
    long status;
    int64_t position; /* 0: null */
    bool admitted;
    char ticket[96];
    long retry_after;
    char code[32];
};

/* POST (join) or GET the queue of v as user on srv. */
static struct place queue(const struct it_server *srv, int64_t v, int64_t user,
                          bool join)
{
    char path[80], tok[TOKEN_STR_LEN];
    struct it_resp resp;
    struct place p = {0};

    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/queue", (long long)v);
    p.status = it_http(srv, join ? "POST" : "GET", path, NULL, tok, &resp);
    p.retry_after = strtol(resp.retry_after, NULL, 10);
    if (p.status == 200 || p.status == 202) {
        const json_t *pos = json_object_get(resp.json, "position");
        const char *t = json_string_value(json_object_get(resp.json, "ticket"));

        p.position = json_is_integer(pos) ? json_integer_value(pos) : 0;
        p.admitted = json_is_true(json_object_get(resp.json, "admitted"));
        snprintf(p.ticket, sizeof(p.ticket), "%s", t ? t : "");
    } else if (resp.json) {
        const char *c =
            it_json_str(json_object_get(resp.json, "error"), "code");
        snprintf(p.code, sizeof(p.code), "%s", c ? c : "");
    }
    it_resp_free(&resp);
    return p;
}

/* Buy v as user on srv with ticket (NULL: none): the status, and the
 * error code into code. */
static long buy(const struct it_server *srv, int64_t v, int64_t user,
                const char *ticket, char code[32])
{
    char path[80], tok[TOKEN_STR_LEN], hdr[128];
    struct it_req req = {.method = "POST"};
    struct it_resp resp;
    long st;

    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    req.path = path;
    req.token = tok;
    if (ticket) {
        snprintf(hdr, sizeof(hdr), "Seckill-Ticket: %s", ticket);
        req.header = hdr;
    }
    st = it_http_do(srv, &req, &resp);
    if (code) {
        const char *c =
            resp.json ? it_json_str(json_object_get(resp.json, "error"), "code")
                      : NULL;
        snprintf(code, 32, "%s", c ? c : "");
    }
    it_resp_free(&resp);
    return st;
}

/* Wait until the sale of v has begun (its begin is in begin_at_ms). */
static void wait_until(int64_t at_ms)
{
    int64_t left = at_ms - util_now_ms();

    if (left > 0)
        usleep((useconds_t)left * 1000);
}

/* Poll user's place until admitted (respecting the poll limit), or until
 * the room answers 409 (sold out: returned as it is). */
static struct place admitted(const struct it_server *srv, int64_t v,
                             int64_t user, int limit_s)
{
    int64_t t0 = util_mono_ms();

    for (;;) {
        struct place p = queue(srv, v, user, false);

        if ((p.status == 200 && p.admitted) || p.status == 409)
            return p;
        if (util_mono_ms() - t0 > limit_s * 1000)
            fail_msg("user %lld not admitted within %d s (status %ld, "
                     "position %lld)",
                     (long long)user, limit_s, p.status, (long long)p.position);
        usleep(1050 * 1000);
    }
}

/* ---- tests ---- */

static void test_voucher_admission_field(void **state)
{
    char body[512], b[UTIL_TIME_LEN], e[UTIL_TIME_LEN], path[64];
    struct it_resp resp;
    int64_t q, o;

    (void)state;
    q = queue_voucher(5, 3600, 7200, "sync");
    o = it_seckill_create(srv_a, it_unique(), 5, 3600, 7200);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)q);
    it_http(srv_b, "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("queue", it_json_str(resp.json, "admission"));
    {
        int64_t begin, opens;

        assert_int_equal(
            0, util_time_parse(it_json_str(resp.json, "beginTime"), &begin));
        assert_int_equal(
            0, util_time_parse(it_json_str(resp.json, "queueOpensAt"), &opens));
        assert_int_equal(600, begin - opens);
    }
    it_resp_free(&resp);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)o);
    it_http(srv_b, "GET", path, NULL, NULL, &resp);
    assert_string_equal("open", it_json_str(resp.json, "admission"));
    assert_null(json_object_get(resp.json, "queueOpensAt"));
    it_resp_free(&resp);
    assert_int_equal(1, it_sql_scalar("SELECT admission FROM seckill_vouchers "
                                      "WHERE voucher_id = %lld",
                                      (long long)q));
    /* Refused: another value; on a normal voucher. */
    snprintf(body, sizeof(body),
             "{\"shopId\":1,\"title\":\"t\",\"payValue\":1,\"actualValue\":2,"
             "\"type\":\"seckill\",\"stock\":1,\"beginTime\":\"%s\","
             "\"endTime\":\"%s\",\"admission\":\"lottery\"}",
             it_time(10, b), it_time(20, e));
    {
        char tok[TOKEN_STR_LEN];

        it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
        it_http(srv_a, "POST", "/api/vouchers", body, tok, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        it_http(srv_a, "POST", "/api/vouchers",
                "{\"shopId\":1,\"title\":\"t\",\"payValue\":1,"
                "\"actualValue\":2,\"admission\":\"queue\"}",
                tok, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
    }
}

/* An open sale has no room, and sells without a ticket. */
static void test_open_voucher_unchanged(void **state)
{
    int64_t v = it_seckill_create(srv_a, it_unique(), 5, -60, 3600);
    struct place p;

    (void)state;
    p = queue(srv_a, v, fresh_user(), true);
    assert_int_equal(404, p.status);
    assert_int_equal(201, buy(srv_a, v, fresh_user(), NULL, NULL));
}

/* Before the room opens: 409 NOT_STARTED with Retry-After; an early buy
 * is NOT_STARTED, not TICKET_REQUIRED. */
static void test_room_not_open(void **state)
{
    int64_t v = queue_voucher(5, 7200, 9000, "sync");
    struct place p;
    char code[32];

    (void)state;
    p = queue(srv_a, v, fresh_user(), true);
    assert_int_equal(409, p.status);
    assert_string_equal("NOT_STARTED", p.code);
    assert_true(p.retry_after > 3500);
    assert_int_equal(409, buy(srv_a, v, fresh_user(), NULL, code));
    assert_string_equal("NOT_STARTED", code);
}

/* Spearman's rank correlation of x and y (both permutations of 1..n). */
static double spearman(const int64_t *x, const int64_t *y, int n)
{
    double d2 = 0;

    for (int i = 0; i < n; i++)
        d2 += (double)(x[i] - y[i]) * (double)(x[i] - y[i]);
    return 1.0 - 6.0 * d2 / ((double)n * ((double)n * n - 1.0));
}

/* 200 join before the begin (alternating instances): no position until
 * it; then a permutation of 1..200 uncorrelated with the joining order
 * (|rho| < 0.25: for independent orders rho has a standard deviation of
 * 1/sqrt(199) = 0.071, so a false failure is about 5e-4); a rejoin keeps
 * the place; latecomers follow in order. */
static void test_shuffle_and_latecomers(void **state)
{
    enum { N = 200, LATE = 5 };
    int64_t v, begin_at, users[N], pos[N], order[N], late[LATE];
    bool seen[N + 1] = {false};
    double rho;

    (void)state;
    v = queue_voucher(1000, 6, 3600, "sync");
    begin_at = (util_now_ms() / 1000 + 6) * 1000;
    for (int i = 0; i < N; i++) {
        struct place p;

        users[i] = fresh_user();
        p = queue(i % 2 ? srv_b : srv_a, v, users[i], true);
        assert_int_equal(202, p.status);
        assert_int_equal(0, p.position);
        assert_true(p.retry_after >= 1 && p.retry_after <= 30);
        order[i] = i + 1;
    }
    assert_true(util_now_ms() < begin_at);
    wait_until(begin_at + 200);
    for (int i = 0; i < N; i++) {
        struct place p = queue(i % 2 ? srv_a : srv_b, v, users[i], false);

        assert_int_equal(200, p.status);
        assert_true(p.position >= 1 && p.position <= N);
        assert_false(seen[p.position]);
        seen[p.position] = true;
        pos[i] = p.position;
    }
    rho = spearman(order, pos, N);
    print_message("200 places drawn at the begin: Spearman rho against the "
                  "order of joining %.3f\n",
                  rho);
    assert_true(fabs(rho) < 0.25);
    /* A rejoin keeps the place (once the poll interval has passed: it is
     * a read of the place). */
    usleep(1100 * 1000);
    {
        struct place p = queue(srv_a, v, users[7], true);

        assert_int_equal(202, p.status);
        assert_int_equal(pos[7], p.position);
    }
    for (int i = 0; i < LATE; i++) {
        struct place p;

        late[i] = fresh_user();
        p = queue(i % 2 ? srv_a : srv_b, v, late[i], true);
        assert_int_equal(202, p.status);
        assert_int_equal(N + 1 + i, p.position);
    }
}

/* Admitted places get a ticket: the only way to buy; it is the buyer's,
 * for this voucher, until its expiry; it works on any instance. */
static void test_tickets(void **state)
{
    int64_t v, w, a = fresh_user(), b = fresh_user(), begin_at;
    struct place pa, pb, pw;
    char code[32];

    (void)state;
    v = queue_voucher(10, 2, 3600, "sync");
    w = queue_voucher(10, 2, 3600, "sync");
    begin_at = (util_now_ms() / 1000 + 2) * 1000;
    assert_int_equal(202, queue(srv_a, v, a, true).status);
    assert_int_equal(202, queue(srv_a, v, b, true).status);
    assert_int_equal(202, queue(srv_a, w, a, true).status);
    wait_until(begin_at + 200);
    pa = admitted(srv_a, v, a, 10);
    pb = admitted(srv_b, v, b, 10);
    pw = admitted(srv_a, w, a, 10);
    assert_int_equal(76, strlen(pa.ticket));

    assert_int_equal(403, buy(srv_a, v, a, NULL, code));
    assert_string_equal("TICKET_REQUIRED", code);
    assert_int_equal(403, buy(srv_a, v, a, pb.ticket, code)); /* b's */
    assert_string_equal("TICKET_REQUIRED", code);
    assert_int_equal(403, buy(srv_a, v, a, pw.ticket, code)); /* w's */
    assert_int_equal(403, buy(srv_a, v, a, "garbage", code));
    assert_int_equal(0, it_sql_order_count(v));
    /* Its own, on the other instance. */
    assert_int_equal(201, buy(srv_b, v, a, pa.ticket, NULL));
    /* b waits out its ticket. */
    sleep(TICKET_TTL_S + 1);
    assert_int_equal(403, buy(srv_a, v, b, pb.ticket, code));
    assert_string_equal("TICKET_REQUIRED", code);
    assert_int_equal(1, it_sql_order_count(v));
}

/* A buyer who joins long after the begin, behind a short queue: its
 * place's turn by the rate (begin + p / rate) went by before it joined,
 * so it is admitted when it joins, and its ticket is good TICKET_TTL_S
 * from then: it buys, in mode. The admission is fixed by the place: a
 * buyer who lets the ticket run out gets the same ticket from a later
 * read, refused. */
static void late_joiner(const char *mode)
{
    int64_t v = queue_voucher(5, -(TICKET_TTL_S + 5), 3600, mode);
    int64_t a = fresh_user(), b = fresh_user();
    struct place pa, pb, again;
    char code[32];
    long st;

    pa = queue(srv_a, v, a, true);
    assert_int_equal(202, pa.status);
    assert_int_equal(1, pa.position);
    assert_true(pa.admitted);
    st = buy(srv_b, v, a, pa.ticket, code);
    if (st != 201 && st != 202)
        fail_msg("%s: the late joiner's purchase answered %ld %s", mode, st,
                 code);
    pb = queue(srv_b, v, b, true);
    assert_int_equal(202, pb.status);
    assert_int_equal(2, pb.position);
    assert_true(pb.admitted);
    sleep(TICKET_TTL_S + 1);
    again = queue(srv_a, v, b, false);
    assert_int_equal(200, again.status);
    assert_true(again.admitted);
    assert_string_equal(pb.ticket, again.ticket);
    assert_int_equal(403, buy(srv_a, v, b, again.ticket, code));
    assert_string_equal("TICKET_REQUIRED", code);
    /* Async orders reach MySQL shortly. */
    for (int t = 0; t < 100 && it_sql_order_count(v) < 1; t++)
        usleep(100 * 1000);
    assert_int_equal(1, it_sql_order_count(v));
    assert_int_equal(4, it_sql_stock(v));
}

static void test_late_joiner_sync(void **state)
{
    (void)state;
    late_joiner("sync");
}

static void test_late_joiner_async(void **state)
{
    (void)state;
    late_joiner("async");
}

/* A second read within the poll interval: 429 with Retry-After, also when
 * the read is a join again; a buyer without a place: 404. */
static void test_poll_limited(void **state)
{
    int64_t v = queue_voucher(10, -1, 3600, "sync"), u = fresh_user();
    struct place p;

    (void)state;
    assert_int_equal(202, queue(srv_a, v, u, true).status);
    assert_int_equal(200, queue(srv_a, v, u, false).status);
    p = queue(srv_b, v, u, false);
    assert_int_equal(429, p.status);
    assert_string_equal("RATE_LIMITED", p.code);
    assert_int_equal(1, p.retry_after);
    p = queue(srv_a, v, fresh_user(), false);
    assert_int_equal(404, p.status);
    sleep(1);
    assert_int_equal(200, queue(srv_a, v, u, false).status);
    p = queue(srv_b, v, u, true);
    assert_int_equal(429, p.status);
    assert_string_equal("RATE_LIMITED", p.code);
}

/* 30 buyers for 10 units, each buying once admitted: 10 orders, the
 * stock at 0, the others SOLD_OUT, and the room says so afterwards. */
static void not_oversold(const char *mode)
{
    enum { N = 30, STOCK = 10 };
    int64_t v = queue_voucher(STOCK, 2, 3600, mode), users[N], begin_at;
    int bought = 0, sold_out = 0;
    struct place p;

    begin_at = (util_now_ms() / 1000 + 2) * 1000;
    for (int i = 0; i < N; i++) {
        users[i] = fresh_user();
        assert_int_equal(
            202, queue(i % 2 ? srv_b : srv_a, v, users[i], true).status);
    }
    wait_until(begin_at + 200);
    for (int i = 0; i < N; i++) {
        char code[32];
        long st;

        p = admitted(i % 2 ? srv_a : srv_b, v, users[i], 15);
        if (p.status == 409) {
            /* Sold out before this place came: the room says so. */
            assert_string_equal("SOLD_OUT", p.code);
            sold_out++;
            continue;
        }
        st = buy(i % 2 ? srv_b : srv_a, v, users[i], p.ticket, code);
        if (st == 201 || st == 202)
            bought++;
        else if (st == 409 && strcmp(code, "SOLD_OUT") == 0)
            sold_out++;
        else
            fail_msg("%s: buyer %d answered %ld %s", mode, i, st, code);
    }
    assert_int_equal(STOCK, bought);
    assert_int_equal(N - STOCK, sold_out);
    /* Async orders reach MySQL shortly. */
    for (int t = 0; t < 100 && it_sql_order_count(v) < STOCK; t++)
        usleep(100 * 1000);
    assert_int_equal(STOCK, it_sql_order_count(v));
    assert_int_equal(0, it_sql_stock(v));
    p = queue(srv_a, v, fresh_user(), true);
    assert_int_equal(409, p.status);
    assert_string_equal("SOLD_OUT", p.code);
    /* The admin's numbers: everyone who joined, all of them admitted by
     * now (30 places at 20 a second). */
    {
        char path[80], tok[TOKEN_STR_LEN];
        struct it_resp resp;
        const json_t *q;

        it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
        snprintf(path, sizeof(path), "/api/vouchers/%lld/stats", (long long)v);
        it_http(srv_b, "GET", path, NULL, tok, &resp);
        it_assert_status(&resp, 200);
        q = json_object_get(resp.json, "queue");
        assert_int_equal(N, json_integer_value(json_object_get(q, "length")));
        assert_int_equal(N, json_integer_value(json_object_get(q, "admitted")));
        assert_int_equal(
            STOCK, json_integer_value(json_object_get(resp.json, "sold")));
        it_resp_free(&resp);
    }
}

static void test_not_oversold_sync(void **state)
{
    (void)state;
    not_oversold("sync");
}

static void test_not_oversold_async(void **state)
{
    (void)state;
    not_oversold("async");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_voucher_admission_field),
        cmocka_unit_test(test_open_voucher_unchanged),
        cmocka_unit_test(test_room_not_open),
        cmocka_unit_test(test_shuffle_and_latecomers),
        cmocka_unit_test(test_tickets),
        cmocka_unit_test(test_late_joiner_sync),
        cmocka_unit_test(test_late_joiner_async),
        cmocka_unit_test(test_poll_limited),
        cmocka_unit_test(test_not_oversold_sync),
        cmocka_unit_test(test_not_oversold_async),
    };
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
