/*
 * test_metrics.c - GET /metrics against the real binary: the text passes
 * the Prometheus format checker (promtext.c) with HELP and TYPE for every
 * series; requests are counted by route pattern and status, with latency
 * histograms that agree with the counters; lock outcomes (acquired, busy,
 * error) and connection errors move when they happen; /metrics needs no
 * token and is not rate limited.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "lock/lock.h"
#include "sale/sale.h"
#include "tests/it/harness.h"
#include "tests/it/promtext.h"

#define SECKILL_ROUTE "/api/vouchers/{id}/seckill"

enum { SRV_MAIN, SRV_NOREDIS, SRV_NOMYSQL, SRV_LIMITED, SRV_COUNT };
static struct it_server servers[SRV_COUNT];
static int64_t user_base;

/* GET /metrics from srv, checked: 200, the content type, the format. */
static void scrape(const struct it_server *srv, struct prom_doc *doc)
{
    struct it_resp resp;

    it_http(srv, "GET", "/metrics", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_true(strncmp(resp.content_type, "text/plain; version=0.0.4", 25) ==
                0);
    if (prom_parse(resp.body, doc) != 0) {
        print_error("not the Prometheus text format: %s\n%s\n", doc->error,
                    resp.body);
        fail();
    }
    it_resp_free(&resp);
}

/* A series' value, 0 when absent (a counter not yet incremented). */
static double val(const struct prom_doc *doc, const char *name,
                  const char *labels)
{
    double v = prom_value(doc, name, labels);
    return v < 0 ? 0 : v;
}

static double requests(const struct prom_doc *doc, const char *route,
                       const char *code)
{
    char labels[256];

    snprintf(labels, sizeof(labels), "route=\"%s\",code=\"%s\"", route, code);
    return val(doc, "seckill_http_requests_total", labels);
}

static double latency_count(const struct prom_doc *doc, const char *route)
{
    char labels[256];

    snprintf(labels, sizeof(labels), "route=\"%s\"", route);
    return val(doc, "seckill_http_request_duration_seconds_count", labels);
}

static double lock_outcome(const struct prom_doc *doc, const char *outcome)
{
    char labels[64];

    snprintf(labels, sizeof(labels), "outcome=\"%s\"", outcome);
    return prom_value(doc, "seckill_lock_acquisitions_total", labels);
}

static double purchases(const struct prom_doc *doc, const char *outcome)
{
    char labels[64];

    snprintf(labels, sizeof(labels), "outcome=\"%s\"", outcome);
    return prom_value(doc, "seckill_purchases_total", labels);
}

static double conn_errors(const struct prom_doc *doc, const char *backend)
{
    char labels[64];

    snprintf(labels, sizeof(labels), "backend=\"%s\"", backend);
    return prom_value(doc, "seckill_connection_errors_total", labels);
}

static void get_expect(const struct it_server *srv, const char *path,
                       long status)
{
    struct it_resp resp;

    it_http(srv, "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, status);
    it_resp_free(&resp);
}

static int group_setup(void **state)
{
    char redis_url[64], *mysql_url;
    const char *noredis_env[2] = {redis_url, NULL};
    const char *nomysql_env[2] = {NULL, NULL};
    const char *limited_env[] = {"SECKILL_RATE_IP=0.5,3", NULL};
    int rc = 0;
    (void)state;

    it_init();
    user_base = 300000000000LL + util_now_ms() % 100000000 * 100;
    /* Nothing listens on a port that was free a moment ago. */
    snprintf(redis_url, sizeof(redis_url),
             "SECKILL_REDIS_URL=redis://127.0.0.1:%u/1",
             (unsigned)it_free_port());
    mysql_url =
        it_mysql_url_with_port(getenv("SECKILL_MYSQL_URL"), it_free_port());
    if (!mysql_url)
        return -1;
    char *mysql_env = xasprintf("SECKILL_MYSQL_URL=%s", mysql_url);
    nomysql_env[0] = mysql_env;
    if (it_server_start(&servers[SRV_MAIN], "metrics", NULL) ||
        it_server_start(&servers[SRV_NOREDIS], "metrics-noredis",
                        noredis_env) ||
        it_server_start(&servers[SRV_NOMYSQL], "metrics-nomysql",
                        nomysql_env) ||
        it_server_start(&servers[SRV_LIMITED], "metrics-limited", limited_env))
        rc = -1;
    free(mysql_env);
    free(mysql_url);
    return rc;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(servers, SRV_COUNT);
}

/* The whole document: format, names, HELP and TYPE, the fixed series. */
static void test_format(void **state)
{
    const struct it_server *srv = &servers[SRV_MAIN];
    struct prom_doc doc;
    static const char *const outcomes[] = {"acquired", "busy", "error"};
    static const char *const purchases[] = {"ok", "sold_out", "duplicate",
                                            "sold_out_cached"};
    char labels[64];
    (void)state;

    get_expect(srv, "/healthz", 200);
    scrape(srv, &doc);
    for (size_t i = 0; i < doc.n; i++) {
        if (strncmp(doc.samples[i].name, "seckill_", 8) != 0 ||
            !doc.samples[i].has_help || !doc.samples[i].has_type)
            print_error("series %s: no seckill_ prefix, HELP or TYPE\n",
                        doc.samples[i].name);
        assert_true(strncmp(doc.samples[i].name, "seckill_", 8) == 0);
        assert_true(doc.samples[i].has_help && doc.samples[i].has_type);
    }
    for (size_t i = 0; i < 3; i++)
        assert_true(lock_outcome(&doc, outcomes[i]) >= 0);
    for (size_t i = 0; i < 4; i++) {
        snprintf(labels, sizeof(labels), "outcome=\"%s\"", purchases[i]);
        assert_true(prom_value(&doc, "seckill_purchases_total", labels) >= 0);
    }
    assert_true(conn_errors(&doc, "mysql") == 0);
    assert_true(conn_errors(&doc, "redis") == 0);
    assert_true(prom_value(&doc, "seckill_purchase_batch_size_count", NULL) >=
                0);
    assert_true(prom_value(&doc, "seckill_process_uptime_seconds", NULL) > 0);
    assert_true(prom_value(&doc, "seckill_process_resident_memory_bytes",
                           NULL) > 1000000);
    /* This scrape's own connection at least. */
    assert_true(prom_value(&doc, "seckill_http_open_connections", NULL) >= 1);
    /* Every route of the table has a histogram, and "unmatched". */
    assert_true(latency_count(&doc, "/healthz") >= 1);
    assert_true(prom_value(&doc, "seckill_http_request_duration_seconds_bucket",
                           "route=\"" SECKILL_ROUTE "\",le=\"+Inf\"") >= 0);
    assert_true(prom_value(&doc, "seckill_http_request_duration_seconds_count",
                           "route=\"unmatched\"") >= 0);
    prom_free(&doc);
}

/* Requests by route pattern and status; the histogram counts each one
 * once, so per route it agrees with the sum over the status codes. */
static void test_requests_counted(void **state)
{
    const struct it_server *srv = &servers[SRV_MAIN];
    struct prom_doc a, b;
    (void)state;

    scrape(srv, &a);
    get_expect(srv, "/no/such/path", 404);
    get_expect(srv, "/no/such/path", 404);
    get_expect(srv, "/api/orders/abc", 400);
    get_expect(srv, "/healthz", 200);
    get_expect(srv, "/api/orders", 401);
    scrape(srv, &b);

    assert_true(requests(&b, "unmatched", "404") -
                    requests(&a, "unmatched", "404") ==
                2);
    assert_true(requests(&b, "/api/orders/{id}", "400") -
                    requests(&a, "/api/orders/{id}", "400") ==
                1);
    assert_true(
        requests(&b, "/healthz", "200") - requests(&a, "/healthz", "200") == 1);
    assert_true(requests(&b, "/api/orders", "401") -
                    requests(&a, "/api/orders", "401") ==
                1);
    /* The first scrape completed before the second began. */
    assert_true(
        requests(&b, "/metrics", "200") - requests(&a, "/metrics", "200") == 1);
    assert_true(
        latency_count(&b, "unmatched") - latency_count(&a, "unmatched") == 2);

    /* Per route: histogram _count == requests over all codes. */
    for (size_t i = 0; i < b.n; i++) {
        const struct prom_sample *s = &b.samples[i];
        const char *route = s->labels + strlen("route=\"");
        double sum = 0;
        char want[256];

        if (strcmp(s->name, "seckill_http_request_duration_seconds_count"))
            continue;
        snprintf(want, sizeof(want), "%.*s",
                 (int)(strlen(route) - 1 /* quote */), route);
        for (size_t j = 0; j < b.n; j++) {
            const struct prom_sample *t = &b.samples[j];
            char prefix[300];
            snprintf(prefix, sizeof(prefix), "route=\"%s\",", want);
            if (strcmp(t->name, "seckill_http_requests_total") == 0 &&
                strncmp(t->labels, prefix, strlen(prefix)) == 0)
                sum += t->value;
        }
        if (sum != s->value)
            print_error("route %s: %g requests, histogram count %g\n", want,
                        sum, s->value);
        assert_true(sum == s->value);
    }
    prom_free(&a);
    prom_free(&b);
}

/* A purchase 201, a duplicate and a SOLD_OUT 409, lock acquisitions. */
static void test_purchases(void **state)
{
    const struct it_server *srv = &servers[SRV_MAIN];
    struct prom_doc a, b;
    struct it_resp resp;
    int64_t voucher;
    (void)state;

    voucher = it_seckill_create(srv, it_unique(), 2, -60, 3600);
    scrape(srv, &a);
    assert_int_equal(it_purchase(srv, voucher, user_base + 1, &resp), 201);
    it_resp_free(&resp);
    it_purchase(srv, voucher, user_base + 1, &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);
    assert_int_equal(it_purchase(srv, voucher, user_base + 2, &resp), 201);
    it_resp_free(&resp);
    it_purchase(srv, voucher, user_base + 3, &resp);
    it_assert_error(&resp, 409, "SOLD_OUT");
    it_resp_free(&resp);
    scrape(srv, &b);

    assert_true(requests(&b, SECKILL_ROUTE, "201") -
                    requests(&a, SECKILL_ROUTE, "201") ==
                2);
    assert_true(requests(&b, SECKILL_ROUTE, "409") -
                    requests(&a, SECKILL_ROUTE, "409") ==
                2);
    assert_true(latency_count(&b, SECKILL_ROUTE) -
                    latency_count(&a, SECKILL_ROUTE) ==
                4);
    /* The two buyers and the duplicate took the lock; sold out is
     * refused before it. */
    assert_true(lock_outcome(&b, "acquired") - lock_outcome(&a, "acquired") >=
                3);
    assert_true(lock_outcome(&b, "busy") == lock_outcome(&a, "busy"));
    assert_true(lock_outcome(&b, "error") == lock_outcome(&a, "error"));
    /* Purchase outcomes (counted in sale/ and store/). */
    assert_true(purchases(&b, "ok") - purchases(&a, "ok") == 2);
    assert_true(purchases(&b, "duplicate") - purchases(&a, "duplicate") == 1);
    assert_true(purchases(&b, "sold_out") + purchases(&b, "sold_out_cached") -
                    purchases(&a, "sold_out") -
                    purchases(&a, "sold_out_cached") ==
                1);
    /* Two orders written in one or two transactions. */
    assert_true(val(&b, "seckill_purchase_batch_size_sum", NULL) -
                    val(&a, "seckill_purchase_batch_size_sum", NULL) >=
                2);
    assert_true(val(&b, "seckill_purchase_batch_size_count", NULL) -
                    val(&a, "seckill_purchase_batch_size_count", NULL) >=
                1);
    prom_free(&a);
    prom_free(&b);
}

/* The user's lock held elsewhere: 429 BUSY and a busy lock outcome. */
static void test_lock_busy(void **state)
{
    const struct it_server *srv = &servers[SRV_MAIN];
    struct lock_client *lc = NULL;
    struct lock *lk = NULL;
    enum lock_status ls;
    struct prom_doc a, b;
    struct it_resp resp;
    char name[SALE_LOCK_NAME_LEN];
    int64_t user = user_base + 10, voucher;
    (void)state;

    voucher = it_seckill_create(srv, it_unique(), 5, -60, 3600);
    assert_int_equal(lock_client_open(getenv("SECKILL_REDIS_URL"), NULL, &lc),
                     0);
    sale_lock_name(name, voucher, user);
    assert_int_equal(lock_new(lc, name, &lk), 0);
    assert_int_equal(lock_acquire(lk, 0, 30000, &ls), 0);
    assert_int_equal(ls, LOCK_ACQUIRED);

    scrape(srv, &a);
    it_purchase(srv, voucher, user, &resp);
    it_assert_error(&resp, 429, "BUSY");
    it_resp_free(&resp);
    scrape(srv, &b);
    assert_true(lock_outcome(&b, "busy") - lock_outcome(&a, "busy") == 1);
    assert_true(lock_outcome(&b, "acquired") == lock_outcome(&a, "acquired"));
    assert_true(requests(&b, SECKILL_ROUTE, "429") -
                    requests(&a, SECKILL_ROUTE, "429") ==
                1);

    lock_free(lk);
    lock_client_close(lc);
    prom_free(&a);
    prom_free(&b);
}

/* Redis on a closed port: connection errors count, and the purchase
 * lock (on that Redis) fails: a lock error and a 503. */
static void test_redis_unreachable(void **state)
{
    const struct it_server *srv = &servers[SRV_NOREDIS];
    struct prom_doc a, b;
    struct it_resp resp;
    int64_t voucher;
    (void)state;

    /* MySQL works: the voucher is made and the precheck passes. */
    voucher = it_seckill_create(srv, it_unique(), 5, -60, 3600);
    scrape(srv, &a);
    /* Past the store's reconnect back-off (200 ms), so the next request
     * tries to connect again, whichever worker thread it lands on. */
    usleep(300000);
    get_expect(srv, "/readyz", 503);
    assert_int_equal(it_purchase(srv, voucher, user_base + 20, &resp), 503);
    it_resp_free(&resp);
    scrape(srv, &b);
    assert_true(conn_errors(&b, "redis") > conn_errors(&a, "redis"));
    assert_true(conn_errors(&b, "mysql") == 0);
    assert_true(lock_outcome(&b, "error") - lock_outcome(&a, "error") == 1);
    assert_true(
        requests(&b, "/readyz", "503") - requests(&a, "/readyz", "503") == 1);
    prom_free(&a);
    prom_free(&b);
}

static void test_mysql_unreachable(void **state)
{
    const struct it_server *srv = &servers[SRV_NOMYSQL];
    struct prom_doc a, b;
    (void)state;

    scrape(srv, &a);
    usleep(300000); /* past the reconnect back-off, as above */
    get_expect(srv, "/readyz", 503);
    scrape(srv, &b);
    assert_true(conn_errors(&b, "mysql") > conn_errors(&a, "mysql"));
    prom_free(&a);
    prom_free(&b);
}

/* Idle client connections show in the open-connections gauge. */
static void test_open_connections(void **state)
{
    const struct it_server *srv = &servers[SRV_MAIN];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    int fds[6];
    double open = 0;
    (void)state;

    sin.sin_port = htons(srv->port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (size_t i = 0; i < 6; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sin, sizeof(sin)),
                         0);
    }
    /* Accepted asynchronously by the workers. */
    for (int i = 0; i < 100 && open < 7; i++) {
        struct prom_doc doc;
        scrape(srv, &doc);
        open = prom_value(&doc, "seckill_http_open_connections", NULL);
        prom_free(&doc);
        if (open < 7)
            usleep(20000);
    }
    for (size_t i = 0; i < 6; i++)
        close(fds[i]);
    if (open < 7)
        print_error("open connections: %g, want >= 7\n", open);
    assert_true(open >= 7);
}

/* No token, no rate limit: a scraper on a tight per-address limit. */
static void test_not_rate_limited(void **state)
{
    const struct it_server *srv = &servers[SRV_LIMITED];
    struct it_resp resp;
    long last = 0;
    (void)state;

    for (int i = 0; i < 20; i++) {
        struct prom_doc doc;
        scrape(srv, &doc);
        prom_free(&doc);
    }
    /* The limit is on: a rate-limited route runs out within 5 tries. */
    for (int i = 0; i < 5 && last != 429; i++) {
        last = it_http(srv, "GET", "/api/vouchers", NULL, NULL, &resp);
        it_resp_free(&resp);
    }
    assert_int_equal(last, 429);
}

/*
 * GET /metrics answers only the peers of SECKILL_METRICS_ALLOW (default
 * loopback: every other test here scrapes from 127.0.0.1); an admin token
 * reads the same text at /api/admin/metrics from anywhere.
 */
static void test_metrics_allow(void **state)
{
    const char *env[] = {"SECKILL_METRICS_ALLOW=10.0.0.0/8, ::1", NULL};
    char admin[TOKEN_STR_LEN], user[TOKEN_STR_LEN];
    struct it_server s;
    struct it_resp resp;
    (void)state;

    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    it_token(user_base + 77, TOKEN_ROLE_USER, 3600, user);
    assert_int_equal(0, it_server_start(&s, "metrics-allow", env));
    /* 127.0.0.1 is not listed; a forwarded address changes nothing. */
    it_http(&s, "GET", "/metrics", NULL, NULL, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    {
        const char *const xff[] = {"X-Forwarded-For: 10.1.2.3", NULL};
        struct it_req req = {
            .method = "GET", .path = "/metrics", .headers = xff};

        it_http_do(&s, &req, &resp);
        it_assert_error(&resp, 403, "FORBIDDEN");
        it_resp_free(&resp);
    }
    it_http(&s, "GET", "/api/admin/metrics", NULL, admin, &resp);
    it_assert_status(&resp, 200);
    assert_non_null(strstr(resp.content_type, "text/plain"));
    assert_non_null(strstr(resp.body, "seckill_http_requests_total"));
    it_resp_free(&resp);
    it_http(&s, "GET", "/api/admin/metrics", NULL, user, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    it_http(&s, "GET", "/api/admin/metrics", NULL, NULL, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
    assert_int_equal(0, it_server_stop(&s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_requests_counted),
        cmocka_unit_test(test_purchases),
        cmocka_unit_test(test_lock_busy),
        cmocka_unit_test(test_redis_unreachable),
        cmocka_unit_test(test_mysql_unreachable),
        cmocka_unit_test(test_open_connections),
        cmocka_unit_test(test_not_rate_limited),
        cmocka_unit_test(test_metrics_allow),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "metrics", tests, group_setup, group_teardown));
}
