/*
 * test_memory.c - memory that a crowd of finished sales leaves behind is
 * given back: 100,000 vouchers (made by SQL, one unit each) are bought
 * once each over 64 keep-alive connections; once they have been idle for
 * SECKILL_IDLE_FREE_S (2 s here), the service's resident memory (VmRSS of
 * /proc/PID/status) is within 10 MiB of what it was before, /metrics
 * shows no per-voucher queue or state left, and a voucher whose state was
 * freed sells again as before. MySQL holds an order for every 201.
 *
 * "Before" is measured after a warm-up of 5,000 other vouchers bought the
 * same way and left idle as long: the threads' connections, buffers and
 * allocator arenas are then in place, so that the comparison sees what
 * the 100,000 vouchers leave, not the first use of each thread.
 *
 * Under AddressSanitizer (the san build of make test) resident memory
 * says nothing about the service's own memory: freed blocks wait in the
 * sanitizer's quarantine (256 MiB) and its shadow memory grows with every
 * address used. There the test buys 5,000 vouchers and checks everything
 * but the RSS: that the per-voucher state is freed while purchases come
 * and go, without a report of the sanitizers.
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

#include "tests/it/harness.h"
#include "tests/it/keepalive.h"
#include "tests/it/promtext.h"

#if defined(__SANITIZE_ADDRESS__)
#define RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_MEANINGFUL 0
#endif
#endif
#ifndef RSS_MEANINGFUL
#define RSS_MEANINGFUL 1
#endif

#define USER_BASE 620000000000LL
#define CLIENTS 64
#define VOUCHERS (RSS_MEANINGFUL ? 100000 : 5000)
#define WARM_VOUCHERS (RSS_MEANINGFUL ? 5000 : 1000)
/* Far fewer than the vouchers bought: see the end of the test. */
#define STATES_BESIDE 200
#define IDLE_S 2
/* The sweep runs every second at most: idle, plus a sweep, plus room. */
#define IDLE_WAIT_MS ((IDLE_S + 3) * 1000)
#define RSS_SLACK_KIB (10 * 1024)

static struct it_server srv;
static int64_t next_user;

static int group_setup(void **state)
{
    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 1000;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/*
 * n seckill vouchers of one unit each, on sale from a day ago for a day,
 * made by SQL (ids first..first + n - 1, consecutive: one INSERT each).
 * Returns first.
 */
static int64_t vouchers_make(int64_t n)
{
    int64_t shop = 900000000 + it_unique(), first, last;

    /* Ten digits crossed five times: 100,000 rows. */
    assert_int_equal(
        0, it_sql_exec(
               "INSERT INTO vouchers (shop_id, title, pay_value, "
               "actual_value, type) SELECT %lld, 'memory', 100, 200, 1 FROM "
               "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL "
               "SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL "
               "SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL "
               "SELECT 9) a, (SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT "
               "2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 "
               "UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 "
               "UNION ALL SELECT 9) b, (SELECT 0 d UNION ALL SELECT 1 UNION "
               "ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL "
               "SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL "
               "SELECT 8 UNION ALL SELECT 9) c, (SELECT 0 d UNION ALL SELECT "
               "1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 "
               "UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 "
               "UNION ALL SELECT 8 UNION ALL SELECT 9) d, (SELECT 0 d UNION "
               "ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL "
               "SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL "
               "SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) e "
               "WHERE a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d "
               "< %lld",
               (long long)shop, (long long)n));
    first = it_sql_scalar("SELECT MIN(id) FROM vouchers WHERE shop_id = %lld",
                          (long long)shop);
    last = it_sql_scalar("SELECT MAX(id) FROM vouchers WHERE shop_id = %lld",
                         (long long)shop);
    assert_int_equal(n, last - first + 1);
    assert_int_equal(
        0, it_sql_exec("INSERT INTO seckill_vouchers (voucher_id, stock, "
                       "initial_stock, begin_time, end_time) SELECT id, 1, 1, "
                       "UTC_TIMESTAMP() - INTERVAL 1 DAY, UTC_TIMESTAMP() + "
                       "INTERVAL 1 DAY FROM vouchers WHERE shop_id = %lld",
                       (long long)shop));
    return first;
}

/* The unpaid orders of vouchers first..first + n - 1 never expire: their
 * expiry, in SECKILL_PAY_TIMEOUT_S, would be load and per-voucher state
 * in whatever instance runs then (a later test's). */
static void orders_keep(int64_t first, int64_t n)
{
    assert_int_equal(0,
                     it_sql_exec("UPDATE voucher_orders SET pay_deadline "
                                 "= NULL WHERE voucher_id BETWEEN %lld AND "
                                 "%lld AND status = 1",
                                 (long long)first, (long long)(first + n - 1)));
}

/* Vouchers first..first + n - 1 bought once each, by a fresh user each. */
struct buy {
    int64_t first, n, next; /* next: the next voucher to buy */
    int64_t user0;          /* voucher first + i goes to user0 + i */
    int64_t answered, created, other;
    long other_status; /* the last answer that was not 201 */
};

static size_t buy_next(void *ctx, size_t i, char *buf, size_t cap)
{
    struct buy *b = ctx;
    char tok[TOKEN_STR_LEN];
    int64_t k;
    int n;
    (void)i;

    if (b->next == b->n)
        return 0;
    k = b->next++;
    it_token(b->user0 + k, TOKEN_ROLE_USER, 3600, tok);
    n = snprintf(buf, cap,
                 "POST /api/vouchers/%lld/seckill HTTP/1.1\r\nHost: t\r\n"
                 "Authorization: Bearer %s\r\nContent-Length: 0\r\n\r\n",
                 (long long)(b->first + k), tok);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static void buy_answer(void *ctx, size_t i, long status, const char *text,
                       size_t len)
{
    struct buy *b = ctx;
    (void)i;
    (void)text;
    (void)len;

    b->answered++;
    if (status == 201) {
        b->created++;
    } else {
        b->other++;
        b->other_status = status;
    }
}

static void buy_lost(void *ctx, size_t i)
{
    (void)ctx;
    print_error("connection %zu closed with a purchase in flight\n", i);
    fail();
}

/* Buy vouchers first..first + n - 1 once each over CLIENTS keep-alive
 * connections, then close them; asserts every purchase answered 201. */
static void buy_all(int64_t first, int64_t n)
{
    static const struct it_ka_ops ops = {buy_next, buy_answer, buy_lost};
    struct buy b = {.first = first, .n = n, .user0 = next_user};
    int64_t start = util_mono_ms();
    struct it_ka *ka;

    next_user += n;
    ka = it_ka_open(srv.port, CLIENTS, &ops, &b);
    while (b.next < b.n || it_ka_busy(ka))
        assert_true(it_ka_step(ka, 1000) > 0);
    it_ka_close(ka);
    orders_keep(first, n);
    print_message("      %lld vouchers bought in %.1f s\n", (long long)n,
                  (double)(util_mono_ms() - start) / 1000.0);
    if (b.other)
        print_error("%lld purchases not 201 (last: %ld)\n", (long long)b.other,
                    b.other_status);
    assert_int_equal(n, b.created);
}

/* VmRSS of the service, in KiB. */
static long rss_kib(void)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)srv.pid);
    f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    assert_true(kib > 0);
    return kib;
}

/* One series of the service's /metrics (-1 when absent). */
static double metric(const char *name)
{
    struct it_resp resp;
    struct prom_doc doc;
    double v;

    it_http(&srv, "GET", "/metrics", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    if (prom_parse(resp.body, &doc) != 0) {
        print_error("/metrics: %s\n", doc.error);
        fail();
    }
    v = prom_value(&doc, name, "");
    prom_free(&doc);
    it_resp_free(&resp);
    return v;
}

static void test_idle_vouchers_freed(void **state)
{
    /* Each purchase is a voucher of its own, so a transaction of its
     * own: more engine threads put more of them in each log flush. */
    static const char *const env[] = {
        "SECKILL_IDLE_FREE_S=2", "SECKILL_ENGINE_THREADS=16",
        "SECKILL_RATE_USER=0", "SECKILL_RATE_IP=0", NULL};
    int64_t warm, first, again;
    long before, after;
    struct it_resp resp;

    (void)state;
    warm = vouchers_make(WARM_VOUCHERS);
    first = vouchers_make(VOUCHERS);
    assert_int_equal(0, it_server_start(&srv, "memory", env));
    again = it_seckill_create(&srv, 1, 2, -60, 3600);
    it_purchase(&srv, again, next_user++, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);

    buy_all(warm, WARM_VOUCHERS);
    usleep(IDLE_WAIT_MS * 1000);
    before = rss_kib();

    buy_all(first, VOUCHERS);
    print_message("      while in use: RSS %ld KiB, %.0f queues, %.0f "
                  "voucher states\n",
                  rss_kib(), metric("seckill_purchase_queues"),
                  metric("seckill_voucher_states"));
    usleep(IDLE_WAIT_MS * 1000);
    after = rss_kib();
    print_message("      RSS before %ld KiB, after %ld KiB (%+ld KiB)%s\n",
                  before, after, after - before,
                  RSS_MEANINGFUL ? "" : " (not compared under ASan)");
    if (RSS_MEANINGFUL)
        assert_true(after - before <= RSS_SLACK_KIB);
    /* Nothing per voucher left once every sale is idle: no queue, and
     * no state but those of the orders the expiry may be closing right
     * now (other tests' unpaid orders in the same database: each such
     * voucher's state lives from its expiry until it is idle again). */
    assert_true(metric("seckill_purchase_queues") == 0);
    assert_true(metric("seckill_voucher_states") < STATES_BESIDE);

    /* A voucher whose queue and state were freed sells its last unit. */
    it_purchase(&srv, again, next_user++, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
    assert_int_equal(2, it_sql_order_count(again));
    assert_int_equal(0, it_sql_stock(again));
    assert_int_equal(VOUCHERS,
                     it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                   "voucher_id BETWEEN %lld AND %lld",
                                   (long long)first,
                                   (long long)(first + VOUCHERS - 1)));
    assert_int_equal(
        0, it_sql_scalar("SELECT SUM(stock) FROM seckill_vouchers WHERE "
                         "voucher_id BETWEEN %lld AND %lld",
                         (long long)first, (long long)(first + VOUCHERS - 1)));
    assert_int_equal(0, it_server_stop(&srv));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_vouchers_freed),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "memory", tests, group_setup, group_teardown));
}
