/*
 * test_async_reconcile.c - the reconciliation of async sales (async/async.h)
 * under a crowd: three instances that compare each sale's Redis state
 * with MySQL every 200 ms (SECKILL_ASYNC_RECONCILE_MS) while their three
 * writers commit its batches concurrently and out of order. A healthy
 * sale must never be taken for a disagreement: no freeze, no rebuild, and
 * Redis equals MySQL once the writers have drained it. Orders keep the
 * default time to pay, so that no expiry returns units meanwhile.
 */
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
#include <curl/curl.h>

#include "tests/it/harness.h"

#define USER_BASE 280000000000LL
#define INSTANCES 3
/* Two of them take the crowd; every one writes and reconciles. */
#define LOADED 2
#define CROWD_S 60
/* Connections of the crowd, each kept alive, one purchase at a time. */
#define CLIENTS 64
#define STOCK 1000000000LL
/* The writers may be far behind when the crowd stops. */
#define DRAIN_MS 120000

static struct it_server srv[INSTANCES];
static int64_t next_user;

static int group_setup(void **state)
{
    static const char *const tags[INSTANCES] = {"reconcile-a", "reconcile-b",
                                                "reconcile-c"};
    const char *env[] = {"SECKILL_PURCHASE_MODE=async",
                         "SECKILL_ASYNC_ACCEPT_LOSS=1",
                         "SECKILL_ASYNC_RECONCILE_MS=200",
                         "SECKILL_DEV=1",
                         "SECKILL_RATE_USER=0",
                         "SECKILL_PAY_TIMEOUT_S",
                         NULL};

    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 1000;
    for (int i = 0; i < INSTANCES; i++)
        if (it_server_start(&srv[i], tags[i], env) != 0) {
            it_group_teardown(srv, (size_t)i);
            return -1;
        }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, INSTANCES);
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

/*
 * Wait until v's stream is empty and nothing is pending, then check that
 * MySQL keeps its invariants and Redis agrees with it.
 */
static void assert_drained(int64_t v, int64_t initial)
{
    redisContext *rc = it_redis_connect();
    int64_t until = util_mono_ms() + DRAIN_MS, t0 = util_mono_ms();
    long long backlog, pending;

    do {
        backlog = redis_int(rc, "XLEN {v:%lld}:stream", v);
        pending = redis_int(rc, "HLEN {v:%lld}:pending", v);
        if (backlog == 0 && pending == 0)
            break;
        usleep(100 * 1000);
    } while (util_mono_ms() < until);
    print_message("drained %lld ms after the crowd\n",
                  (long long)(util_mono_ms() - t0));
    assert_int_equal(0, backlog);
    assert_int_equal(0, pending);

    int64_t stock = it_sql_stock(v);
    int64_t active = it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                   "voucher_id = %lld AND status IN (1, 2)",
                                   (long long)v);
    assert_int_equal(initial, stock + active);
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT user_id "
                                      "FROM voucher_orders WHERE voucher_id "
                                      "= %lld GROUP BY user_id HAVING "
                                      "COUNT(*) > 1) d",
                                      (long long)v));
    assert_int_equal(stock, redis_int(rc, "GET {v:%lld}:stock", v));
    assert_int_equal(active, redis_int(rc, "SCARD {v:%lld}:buyers", v));
    assert_int_equal(0, redis_int(rc, "XLEN {v:%lld}:dead", v));
    redisFree(rc);
}

/* One client connection of the crowd: a purchase at a time, kept alive. */
struct slot {
    CURL *h;
    struct curl_slist *hdrs;
    char body[512];
    size_t len;
};

static size_t slot_body(char *p, size_t size, size_t n, void *ctx)
{
    struct slot *s = ctx;
    size_t k = size * n, room = sizeof(s->body) - 1 - s->len;

    memcpy(s->body + s->len, p, k < room ? k : room);
    s->len += k < room ? k : room;
    s->body[s->len] = '\0';
    return k;
}

/* Send the next purchase, by a new user, on s. */
static void slot_send(CURLM *m, struct slot *s)
{
    char tok[TOKEN_STR_LEN], auth[TOKEN_STR_LEN + 32];

    it_token(next_user++, TOKEN_ROLE_USER, 3600, tok);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    curl_slist_free_all(s->hdrs);
    s->hdrs = curl_slist_append(NULL, auth);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, s->hdrs);
    s->len = 0;
    s->body[0] = '\0';
    assert_int_equal(CURLM_OK, curl_multi_add_handle(m, s->h));
}

/*
 * A crowd at full speed for a minute, every buyer new, against a sale of
 * 10^9 units, over CLIENTS kept-alive connections: every purchase is a
 * 202, the sale is never frozen or rebuilt (not even found in
 * disagreement), and at the end every 202 is an order and Redis equals
 * MySQL.
 */
static void test_reconciled_crowd(void **state)
{
    struct slot *slots = xcalloc(CLIENTS, sizeof(*slots));
    size_t n202 = 0, busy = 0, other = 0;
    int frozen = 0, disagreed = 0, rebuilt = 0, running = 0, left;
    size_t inflight = CLIENTS;
    int64_t v, t0, secs;
    char body[512], b[40], e[40], url[128];
    CURLM *m = curl_multi_init();
    CURLMsg *msg;

    (void)state;
    snprintf(body, sizeof(body),
             "{\"shopId\":1,\"title\":\"reconciled\",\"payValue\":100,"
             "\"actualValue\":200,\"type\":\"seckill\",\"stock\":%lld,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\","
             "\"purchaseMode\":\"async\"}",
             STOCK, it_time(-60, b), it_time(CROWD_S + 600, e));
    v = it_voucher_create(&srv[0], body);
    for (size_t i = 0; i < CLIENTS; i++) {
        struct slot *s = &slots[i];

        snprintf(url, sizeof(url),
                 "http://127.0.0.1:%u/api/vouchers/%lld/"
                 "seckill",
                 (unsigned)srv[i % LOADED].port, (long long)v);
        s->h = curl_easy_init();
        curl_easy_setopt(s->h, CURLOPT_URL, url);
        curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(s->h, CURLOPT_POST, 1L);
        curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(s->h, CURLOPT_TIMEOUT, IT_HTTP_TIMEOUT_S);
        curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, slot_body);
        curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
        slot_send(m, s);
    }
    t0 = util_mono_ms();
    do {
        bool more = util_mono_ms() - t0 < CROWD_S * 1000;

        assert_int_equal(CURLM_OK, curl_multi_perform(m, &running));
        while ((msg = curl_multi_info_read(m, &left))) {
            struct slot *s = NULL;
            long status = 0;

            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &s);
            curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
            curl_multi_remove_handle(m, s->h);
            inflight--;
            if (msg->data.result == CURLE_OK && status == 202)
                n202++;
            else if (status == 429 && strstr(s->body, "\"BUSY\""))
                busy++;
            else if (other++ < 10)
                print_error("purchase: curl %d, %ld %s\n",
                            (int)msg->data.result, status, s->body);
            if (more) {
                slot_send(m, s);
                inflight++;
            }
        }
        if (running)
            assert_int_equal(CURLM_OK, curl_multi_poll(m, NULL, 0, 1000, NULL));
    } while (inflight > 0);
    secs = (util_mono_ms() - t0) / 1000;
    print_message("%lld s: %zu 202s (%lld/s), %zu busy, %zu other\n",
                  (long long)secs, n202,
                  (long long)(n202 / (size_t)(secs ? secs : 1)), busy, other);
    for (size_t i = 0; i < CLIENTS; i++) {
        curl_easy_cleanup(slots[i].h);
        curl_slist_free_all(slots[i].hdrs);
    }
    curl_multi_cleanup(m);
    free(slots);
    assert_drained(v, STOCK);
    for (int i = 0; i < INSTANCES; i++) {
        frozen += it_log_voucher_count(srv[i].log_path,
                                       "async sale frozen for a rebuild", v);
        disagreed += it_log_voucher_count(srv[i].log_path,
                                          "async sale disagrees with mysql", v);
        rebuilt += it_log_voucher_count(srv[i].log_path,
                                        "async sale rebuilt from mysql", v);
    }
    print_message("disagreements %d, freezes %d, rebuilds %d\n", disagreed,
                  frozen, rebuilt);
    assert_int_equal(0, disagreed);
    assert_int_equal(0, frozen);
    assert_int_equal(0, rebuilt);
    assert_int_equal(0, other);
    assert_int_equal((int64_t)n202, it_sql_order_count(v));
    /* Hundreds of thousands of unpaid orders would expire in 15 minutes,
     * in the instances of later tests: they never do. In slices: one
     * statement over them all can pass the row locks MariaDB's buffer
     * pool holds. */
    for (size_t done = 0; done <= n202; done += 50000)
        assert_int_equal(0, it_sql_exec("UPDATE voucher_orders SET "
                                        "pay_deadline = NULL WHERE "
                                        "voucher_id = %lld AND status = 1 "
                                        "AND pay_deadline IS NOT NULL "
                                        "LIMIT 50000",
                                        (long long)v));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE voucher_id = %lld AND status = "
                                      "1 AND pay_deadline IS NOT NULL",
                                      (long long)v));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reconciled_crowd),
    };

    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
