/*
 * test_listings.c - the lists, over HTTP against the real binary, checked
 * in MySQL: GET /api/sales (live and upcoming sales across shops, from
 * a snapshot refreshed by at most one query a second however many ask),
 * GET /api/vouchers/{id}/orders (an admin's pages of one sale's orders,
 * and all of them as a CSV streamed in constant memory), and the keyset
 * pages (cursor, nextCursor) of GET /api/vouchers and GET /api/orders.
 *
 * One instance, S, dev mode, no rate limits.
 */
#include <errno.h>
#include <setjmp.h>
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

#include <cmocka.h>
#include <curl/curl.h>

#include "common/util.h"
#include "tests/it/harness.h"
#include "tests/it/promtext.h"

/* Under AddressSanitizer freed memory waits in its quarantine (256 MiB)
 * before it is reused: resident memory says nothing about a leak or a
 * buffer there, and is not compared (the sanitizer checks leaks). */
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

#define USER_BASE 270000000000LL
/* The export's sale: this many orders, written straight into MySQL. */
#define CSV_ORDERS 100000

static struct it_server srv;
static char admin_tok[TOKEN_STR_LEN];
static int64_t next_user;

static const char *const env_s[] = {"SECKILL_DEV=1", "SECKILL_RATE_USER=0",
                                    "SECKILL_RATE_IP=0",
                                    "SECKILL_ASYNC_ACCEPT_LOSS=1", NULL};
/* The export's sale of CSV_ORDERS orders (test_sale_orders_csv). */
static int64_t csv_voucher;

static int group_setup(void **state)
{
    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin_tok);
    return it_server_start(&srv, "listings", env_s);
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* ---- helpers ---- */

/* GET path (formatted) as tok (NULL: none); the status. */
static long get(struct it_resp *resp, const char *tok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static long get(struct it_resp *resp, const char *tok, const char *fmt, ...)
{
    char path[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    return it_http(&srv, "GET", path, NULL, tok, resp);
}

static double metric(const char *name, const char *labels)
{
    struct it_resp resp;
    struct prom_doc doc;
    double v;

    get(&resp, NULL, "/metrics");
    it_assert_status(&resp, 200);
    if (prom_parse(resp.body, &doc) != 0) {
        print_error("/metrics: %s\n", doc.error);
        fail();
    }
    v = prom_value(&doc, name, labels);
    prom_free(&doc);
    it_resp_free(&resp);
    return v;
}

static double refreshes(void)
{
    return metric("seckill_listing_refreshes_total", "what=\"sales\"");
}

/* The ids of a page's items, in order, appended to ids (*n). */
static void page_ids(const struct it_resp *resp, int64_t *ids, size_t *n,
                     size_t max)
{
    json_t *items = json_object_get(resp->json, "items");
    size_t i;
    json_t *it;

    assert_true(json_is_array(items));
    json_array_foreach(items, i, it)
    {
        assert_true(*n < max);
        ids[(*n)++] = it_json_id(it, "id");
    }
}

/* A page's nextCursor, copied into buf, or false when it is null. */
static bool next_cursor(const struct it_resp *resp, char *buf, size_t cap)
{
    json_t *c = json_object_get(resp->json, "nextCursor");

    assert_non_null(c);
    if (json_is_null(c))
        return false;
    assert_true(json_is_string(c));
    snprintf(buf, cap, "%s", json_string_value(c));
    return true;
}

/* GET /api/sales?query until shop's sales include want (new sales show
 * within about a second: the snapshot). */
static void sales_wait(const char *query, int64_t want)
{
    for (int tries = 0; tries < 40; tries++) {
        struct it_resp resp;
        int64_t ids[100];
        size_t n = 0;

        get(&resp, NULL, "/api/sales?%s", query);
        it_assert_status(&resp, 200);
        page_ids(&resp, ids, &n, 100);
        it_resp_free(&resp);
        for (size_t i = 0; i < n; i++)
            if (ids[i] == want)
                return;
        usleep(100 * 1000);
    }
    print_error("sale %lld never listed by /api/sales?%s\n", (long long)want,
                query);
    fail();
}

/* Order ids for up to 100,000 orders written by hand: below the ID
 * worker's (seconds << 32), and a new range at each call. */
static int64_t ids_base(void)
{
    return 3000000000000000LL + it_unique() % 10000000 * 100000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static bool has(const int64_t *ids, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* ---- GET /api/sales ---- */

/* Live, upcoming, ended and normal vouchers of one shop, each where it
 * belongs; another shop's sales are filtered out; stock shown. */
static void test_sales_classified(void **state)
{
    int64_t shop = it_unique(), other = shop + 1;
    int64_t live, soon, later, ended, normal, elsewhere;
    struct it_resp resp;
    char q[128];
    int64_t ids[100];
    size_t n = 0;
    (void)state;

    live = it_seckill_create(&srv, shop, 7, -60, 3600);
    soon = it_seckill_create(&srv, shop, 5, 600, 7200);
    later = it_seckill_create(&srv, shop, 5, 3 * 86400, 4 * 86400);
    ended = it_seckill_create(&srv, shop, 5, -7200, -60);
    char body[160];
    snprintf(body, sizeof(body),
             "{\"shopId\":%lld,\"title\":\"plain\",\"payValue\":100,"
             "\"actualValue\":200}",
             (long long)shop);
    normal = it_voucher_create(&srv, body);
    elsewhere = it_seckill_create(&srv, other, 5, -60, 3600);

    snprintf(q, sizeof(q), "status=live&shopId=%lld", (long long)shop);
    sales_wait(q, live);
    get(&resp, NULL, "/api/sales?%s", q);
    it_assert_status(&resp, 200);
    page_ids(&resp, ids, &n, 100);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], live);
    json_t *it = json_array_get(json_object_get(resp.json, "items"), 0);
    assert_int_equal(json_integer_value(json_object_get(it, "stock")), 7);
    assert_string_equal(it_json_str(it, "type"), "seckill");
    assert_non_null(json_object_get(resp.json, "snapshotTime"));
    assert_true(json_is_null(json_object_get(resp.json, "nextCursor")));
    it_resp_free(&resp);

    /* Upcoming within the default day: soon, not later (3 days). */
    n = 0;
    get(&resp, NULL, "/api/sales?status=upcoming&shopId=%lld", (long long)shop);
    it_assert_status(&resp, 200);
    page_ids(&resp, ids, &n, 100);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], soon);
    it_resp_free(&resp);

    /* Within a week: both, beginning soonest first. */
    n = 0;
    get(&resp, NULL, "/api/sales?status=upcoming&within=604800&shopId=%lld",
        (long long)shop);
    it_assert_status(&resp, 200);
    page_ids(&resp, ids, &n, 100);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], soon);
    assert_int_equal(ids[1], later);
    assert_false(has(ids, n, normal));
    it_resp_free(&resp);

    /* Within 5 minutes: none. */
    n = 0;
    get(&resp, NULL, "/api/sales?status=upcoming&within=300&shopId=%lld",
        (long long)shop);
    it_assert_status(&resp, 200);
    page_ids(&resp, ids, &n, 100);
    assert_int_equal(n, 0);
    it_resp_free(&resp);

    /* Across shops (every page of them): both live sales, never the
     * ended or the upcoming one. */
    size_t cap = 20000;
    int64_t *all = xcalloc(cap, sizeof(*all));
    for (int tries = 0; tries < 40; tries++) {
        char cur[64] = "";
        bool more = true;

        n = 0;
        while (more) {
            get(&resp, NULL, "/api/sales?status=live&limit=100%s%s",
                cur[0] ? "&cursor=" : "", cur);
            it_assert_status(&resp, 200);
            page_ids(&resp, all, &n, cap);
            more = next_cursor(&resp, cur, sizeof(cur));
            it_resp_free(&resp);
        }
        if (has(all, n, live) && has(all, n, elsewhere))
            break;
        usleep(100 * 1000);
    }
    assert_true(has(all, n, live));
    assert_true(has(all, n, elsewhere));
    assert_false(has(all, n, ended));
    assert_false(has(all, n, soon));
    free(all);
}

/* A cursor walk returns each sale exactly once, in the list's order. */
static void test_sales_pages(void **state)
{
    int64_t shop = it_unique();
    int64_t live[7], up[5], ids[32];
    char cur[64];
    size_t n;
    bool more;
    (void)state;

    /* Ends: two pairs end at the same second (ties go by id). */
    static const int64_t ends[7] = {3600, 1800, 1800, 7200, 600, 7200, 900};
    for (int i = 0; i < 7; i++)
        live[i] = it_seckill_create(&srv, shop, 3, -60, ends[i]);
    for (int i = 0; i < 5; i++)
        up[i] = it_seckill_create(&srv, shop, 3, 1000 + 100 * (5 - i), 20000);

    char q[96];
    snprintf(q, sizeof(q), "status=upcoming&shopId=%lld", (long long)shop);
    sales_wait(q, up[4]);
    snprintf(q, sizeof(q), "status=live&shopId=%lld", (long long)shop);
    sales_wait(q, live[6]);

    /* live, 3 a page: 7 in three pages. */
    n = 0;
    cur[0] = '\0';
    int pages = 0;
    do {
        struct it_resp resp;

        get(&resp, NULL, "/api/sales?%s&limit=3%s%s", q,
            cur[0] ? "&cursor=" : "", cur);
        it_assert_status(&resp, 200);
        page_ids(&resp, ids, &n, 32);
        more = next_cursor(&resp, cur, sizeof(cur));
        it_resp_free(&resp);
        pages++;
    } while (more && pages < 10);
    assert_int_equal(pages, 3);
    assert_int_equal(n, 7);
    /* Ending soonest first, ties by id. */
    static const int order[7] = {4, 6, 1, 2, 0, 3, 5};
    for (int i = 0; i < 7; i++)
        assert_int_equal(ids[i], live[order[i]]);

    /* upcoming, 2 a page: 5, beginning soonest first (up[4] first). */
    snprintf(q, sizeof(q), "status=upcoming&shopId=%lld", (long long)shop);
    n = 0;
    cur[0] = '\0';
    pages = 0;
    do {
        struct it_resp resp;

        get(&resp, NULL, "/api/sales?%s&limit=2%s%s", q,
            cur[0] ? "&cursor=" : "", cur);
        it_assert_status(&resp, 200);
        page_ids(&resp, ids, &n, 32);
        more = next_cursor(&resp, cur, sizeof(cur));
        it_resp_free(&resp);
        pages++;
    } while (more && pages < 10);
    assert_int_equal(pages, 3);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ids[i], up[4 - i]);
}

static void test_sales_bad_params(void **state)
{
    static const struct {
        const char *query, *message;
    } bad[] = {
        {"status=ended", "status: must be live or upcoming"},
        {"status=upcoming&within=0", "within: must be an integer from 1 to "
                                     "2592000"},
        {"within=2592001", "within: must be an integer from 1 to 2592000"},
        {"limit=0", "limit: must be an integer from 1 to 100"},
        {"limit=101", "limit: must be an integer from 1 to 100"},
        {"shopId=-1", "shopId: must be an integer from 1 to "
                      "9223372036854775807"},
        {"cursor=abc", "cursor: must be the nextCursor of a page"},
        {"cursor=17", "cursor: must be the nextCursor of a page"},
        {"cursor=1.2.3", "cursor: must be the nextCursor of a page"},
        {"cursor=-1.2", "cursor: must be the nextCursor of a page"},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct it_resp resp;

        get(&resp, NULL, "/api/sales?%s", bad[i].query);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        json_t *e = json_object_get(resp.json, "error");
        if (strcmp(it_json_str(e, "message"), bad[i].message) != 0) {
            print_error("?%s: %s\n", bad[i].query, it_json_str(e, "message"));
            fail();
        }
        it_resp_free(&resp);
    }
}

/* A crowd of 2,000 requests over about 2.5 s: at most one snapshot
 * query a second (elapsed seconds + 1), and every request answered. */
static void test_sales_crowd(void **state)
{
    enum { WAVES = 10, PER_WAVE = 200 };
    struct it_req reqs[PER_WAVE];
    struct it_resp resps[PER_WAVE];
    const struct it_server *to[PER_WAVE];
    double before, after;
    int64_t t0, t1;
    (void)state;

    for (int i = 0; i < PER_WAVE; i++) {
        reqs[i] = (struct it_req){.method = "GET",
                                  .path = i % 2 ? "/api/sales?status=upcoming"
                                                : "/api/sales"};
        to[i] = &srv;
    }
    before = refreshes();
    t0 = util_mono_ms();
    for (int w = 0; w < WAVES; w++) {
        int64_t due = t0 + w * 250;

        while (util_mono_ms() < due)
            usleep(5000);
        it_http_run_all(reqs, to, resps, PER_WAVE);
        for (int i = 0; i < PER_WAVE; i++) {
            it_assert_status(&resps[i], 200);
            it_resp_free(&resps[i]);
        }
    }
    t1 = util_mono_ms();
    after = refreshes();
    print_message("crowd: %d requests in %lld ms, %.0f snapshot queries\n",
                  WAVES * PER_WAVE, (long long)(t1 - t0), after - before);
    assert_true(after - before >= 1);
    assert_true(after - before <= (double)(t1 - t0) / 1000.0 + 1.0);
}

/* ---- GET /api/vouchers and GET /api/orders: cursors ---- */

static void test_vouchers_cursor(void **state)
{
    int64_t shop = it_unique(), made[5], ids[16];
    char cur[64] = "";
    size_t n = 0;
    bool more;
    int pages = 0;
    (void)state;

    for (int i = 0; i < 5; i++)
        made[i] = it_seckill_create(&srv, shop, 1, -60, 3600);
    do {
        struct it_resp resp;

        get(&resp, NULL, "/api/vouchers?shopId=%lld&limit=2%s%s",
            (long long)shop, cur[0] ? "&cursor=" : "", cur);
        it_assert_status(&resp, 200);
        page_ids(&resp, ids, &n, 16);
        more = next_cursor(&resp, cur, sizeof(cur));
        it_resp_free(&resp);
        pages++;
    } while (more && pages < 10);
    assert_int_equal(pages, 3);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(ids[i], made[4 - i]);
}

static void test_orders_cursor(void **state)
{
    int64_t user = next_user++, ids[16], bought[6];
    char tok[TOKEN_STR_LEN], cur[64] = "";
    size_t n = 0;
    bool more;
    int pages = 0;
    (void)state;

    /* Sync and async sales in turn: an async order may still be on its
     * way to MySQL while the pages are read, and must show once all the
     * same. */
    for (int i = 0; i < 6; i++) {
        struct it_resp resp;
        char body[512], b[UTIL_TIME_LEN], e[UTIL_TIME_LEN];
        int64_t v;

        snprintf(body, sizeof(body),
                 "{\"shopId\":%lld,\"title\":\"t\",\"payValue\":100,"
                 "\"actualValue\":200,\"type\":\"seckill\",\"stock\":2,"
                 "\"beginTime\":\"%s\",\"endTime\":\"%s\","
                 "\"purchaseMode\":\"%s\"}",
                 (long long)it_unique(), it_time(-60, b), it_time(3600, e),
                 i % 2 ? "async" : "sync");
        v = it_voucher_create(&srv, body);
        long st = it_purchase(&srv, v, user, &resp);
        assert_true(st == 201 || st == 202);
        bought[i] = it_json_id(resp.json, "orderId");
        it_resp_free(&resp);
    }
    /* Newest first by id. */
    qsort(bought, 6, sizeof(bought[0]), cmp_i64);
    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    do {
        struct it_resp resp;

        get(&resp, tok, "/api/orders?limit=4%s%s", cur[0] ? "&cursor=" : "",
            cur);
        it_assert_status(&resp, 200);
        page_ids(&resp, ids, &n, 16);
        more = next_cursor(&resp, cur, sizeof(cur));
        it_resp_free(&resp);
        pages++;
    } while (more && pages < 10);
    assert_int_equal(pages, 2);
    assert_int_equal(n, 6);
    /* Newest first: the order ids, descending. */
    for (int i = 0; i < 6; i++)
        assert_int_equal(ids[i], bought[5 - i]);
}

/* ---- GET /api/vouchers/{id}/orders ---- */

/*
 * Write n orders of voucher v straight into MySQL, ids from id0 and
 * users from user0, by status in turn (unpaid, paid, cancelled,
 * expired), with the stock row kept consistent: stock + unpaid + paid =
 * the initial stock.
 */
static void orders_insert(int64_t v, int64_t id0, int64_t user0, int n)
{
    enum { ROWS = 1000 };
    char *sql = xmalloc((size_t)ROWS * 200 + 256);

    for (int from = 0; from < n; from += ROWS) {
        size_t len = (size_t)sprintf(
            sql, "INSERT INTO voucher_orders (id, user_id, voucher_id, "
                 "status, pay_deadline, pay_time, close_time) VALUES ");
        for (int i = from; i < n && i < from + ROWS; i++) {
            static const char *const rest[4] = {
                "1, NOW(3) + INTERVAL 1 DAY, NULL, NULL",
                "2, NOW(3) + INTERVAL 1 DAY, NOW(3), NULL",
                "4, NOW(3) + INTERVAL 1 DAY, NULL, NOW(3)",
                "7, NOW(3), NULL, NOW(3)"};
            len += (size_t)sprintf(sql + len, "%s(%lld, %lld, %lld, %s)",
                                   i > from ? ", " : "", (long long)(id0 + i),
                                   (long long)(user0 + i), (long long)v,
                                   rest[i % 4]);
        }
        assert_int_equal(it_sql_exec("%s", sql), 0);
    }
    free(sql);
    /* unpaid and paid: half of them hold a unit. */
    assert_int_equal(
        it_sql_exec("UPDATE seckill_vouchers SET stock = initial_stock - %d "
                    "WHERE voucher_id = %lld",
                    (n + 3) / 4 + (n + 2) / 4, (long long)v),
        0);
}

static void test_sale_orders_pages(void **state)
{
    int64_t v = it_seckill_create(&srv, it_unique(), 1000, -60, 3600);
    int64_t id0 = ids_base(), ids[300];
    char tok[TOKEN_STR_LEN], cur[64] = "";
    struct it_resp resp;
    size_t n = 0;
    bool more;
    int pages = 0;
    (void)state;

    orders_insert(v, id0, next_user, 250);
    next_user += 250;
    do {
        get(&resp, admin_tok, "/api/vouchers/%lld/orders?limit=100%s%s",
            (long long)v, cur[0] ? "&cursor=" : "", cur);
        it_assert_status(&resp, 200);
        page_ids(&resp, ids, &n, 300);
        if (pages == 0) {
            json_t *o = json_array_get(json_object_get(resp.json, "items"), 0);
            assert_int_equal(json_integer_value(json_object_get(o, "amount")),
                             4750);
            /* The newest is the 250th: i % 4 == 1, paid. */
            assert_string_equal(it_json_str(o, "status"), "paid");
        }
        more = next_cursor(&resp, cur, sizeof(cur));
        it_resp_free(&resp);
        pages++;
    } while (more && pages < 10);
    assert_int_equal(pages, 3);
    assert_int_equal(n, 250);
    for (int i = 0; i < 250; i++)
        assert_int_equal(ids[i], id0 + 249 - i); /* newest first */

    /* A status: the paid ones (i % 4 == 1). */
    n = 0;
    get(&resp, admin_tok, "/api/vouchers/%lld/orders?status=paid&limit=100",
        (long long)v);
    it_assert_status(&resp, 200);
    page_ids(&resp, ids, &n, 300);
    it_resp_free(&resp);
    assert_int_equal(n, 63);
    assert_int_equal(n, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE voucher_id = %lld AND status = 2",
                                      (long long)v));

    /* Who may: an admin; a buyer 403, nobody 401; no voucher 404. */
    it_token(next_user++, TOKEN_ROLE_USER, 3600, tok);
    get(&resp, tok, "/api/vouchers/%lld/orders", (long long)v);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    get(&resp, NULL, "/api/vouchers/%lld/orders", (long long)v);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
    get(&resp, admin_tok, "/api/vouchers/%lld/orders", (long long)v + 1000000);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    get(&resp, admin_tok, "/api/vouchers/%lld/orders?status=lost",
        (long long)v);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
}

/* VmRSS of the instance, in KiB. */
static long rss_kib(void)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)srv.pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* The CSV as it arrives: its lines' first field, the header, the
 * instance's largest RSS while it came. */
struct csv_read {
    int64_t *ids;
    size_t n, max;
    char line[256];
    size_t line_len;
    bool header_seen;
    char header[256];
    size_t bytes;
    long rss_max;
    unsigned calls;
};

static size_t csv_write(char *p, size_t size, size_t nmemb, void *arg)
{
    struct csv_read *r = arg;
    size_t len = size * nmemb;

    r->bytes += len;
    if (r->calls++ % 16 == 0) {
        long k = rss_kib();
        if (k > r->rss_max)
            r->rss_max = k;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '\n') {
            if (r->line_len < sizeof(r->line) - 1)
                r->line[r->line_len++] = p[i];
            continue;
        }
        r->line[r->line_len] = '\0';
        if (!r->header_seen) {
            snprintf(r->header, sizeof(r->header), "%s", r->line);
            r->header_seen = true;
        } else if (r->n < r->max) {
            r->ids[r->n++] = strtoll(r->line, NULL, 10);
        }
        r->line_len = 0;
    }
    return len;
}

/* GET the CSV of v (query: "" or "?status=..."), read into *r. */
static long csv_get(int64_t v, const char *query, struct csv_read *r,
                    char *ctype, size_t cap)
{
    char url[256], auth[TOKEN_STR_LEN + 32];
    struct curl_slist *h = NULL;
    CURL *c = curl_easy_init();
    long status = 0;
    char *ct = NULL;
    CURLcode rc;

    snprintf(url, sizeof(url), "http://127.0.0.1:%u/api/vouchers/%lld/orders%s",
             srv.port, (long long)v, query);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", admin_tok);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Accept: text/csv");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, csv_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    rc = curl_easy_perform(c);
    assert_int_equal(rc, CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(ctype, cap, "%s", ct ? ct : "");
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

static void test_sale_orders_csv(void **state)
{
    int64_t v = it_seckill_create(&srv, it_unique(), CSV_ORDERS, -60, 3600);
    int64_t id0 = ids_base(), *mine;
    struct csv_read r = {0};
    char ctype[128];
    long before;
    size_t m;
    (void)state;

    orders_insert(v, id0, next_user, CSV_ORDERS);
    next_user += CSV_ORDERS;
    csv_voucher = v;
    assert_int_equal(it_sql_scalar("SELECT initial_stock - stock - "
                                   "(SELECT COUNT(*) FROM voucher_orders "
                                   "WHERE voucher_id = %lld AND status IN "
                                   "(1, 2)) FROM seckill_vouchers WHERE "
                                   "voucher_id = %lld",
                                   (long long)v, (long long)v),
                     0);
    r.max = CSV_ORDERS + 10;
    r.ids = xcalloc(r.max, sizeof(*r.ids));
    before = rss_kib();
    r.rss_max = before;
    assert_int_equal(csv_get(v, "", &r, ctype, sizeof(ctype)), 200);
    print_message("csv: %zu bytes, %zu rows; rss %ld KiB before, %ld max\n",
                  r.bytes, r.n, before, r.rss_max);
    assert_string_equal(ctype, "text/csv; charset=utf-8");
    assert_string_equal(r.header, "orderId,userId,status,amount,createTime,"
                                  "payDeadline,payTime,closeTime");
    assert_int_equal(r.line_len, 0); /* the last line is whole */
    assert_int_equal(r.n, CSV_ORDERS);
    /* The very ids MySQL has, each once. */
    mine = xcalloc(CSV_ORDERS + 10, sizeof(*mine));
    m = it_sql_column(mine, CSV_ORDERS + 10,
                      "SELECT id FROM voucher_orders WHERE voucher_id = %lld",
                      (long long)v);
    assert_int_equal(m, CSV_ORDERS);
    qsort(mine, m, sizeof(*mine), cmp_i64);
    qsort(r.ids, r.n, sizeof(*r.ids), cmp_i64);
    assert_memory_equal(mine, r.ids, m * sizeof(*mine));
    /* Constant memory: far less growth than the body's ~10 MB. */
    assert_true(r.bytes > 8 * 1024 * 1024);
    if (RSS_MEANINGFUL)
        assert_true(r.rss_max - before < 4 * 1024);

    /* A status filters the export too. */
    free(r.ids);
    memset(&r, 0, sizeof(r));
    r.max = CSV_ORDERS;
    r.ids = xcalloc(r.max, sizeof(*r.ids));
    assert_int_equal(csv_get(v, "?status=expired", &r, ctype, sizeof(ctype)),
                     200);
    assert_int_equal(r.n, CSV_ORDERS / 4);
    free(r.ids);
    free(mine);
}

/* A client that goes away after the first bytes: the instance frees the
 * export (the sanitizer build checks it at exit) and answers on. */
static void test_sale_orders_csv_gone(void **state)
{
    int64_t v = it_seckill_create(&srv, it_unique(), 20000, -60, 3600);
    char req[512];
    struct it_resp resp;
    (void)state;

    orders_insert(v, ids_base(), next_user, 20000);
    next_user += 20000;
    snprintf(req, sizeof(req),
             "GET /api/vouchers/%lld/orders HTTP/1.1\r\nHost: x\r\n"
             "Accept: text/csv\r\nAuthorization: Bearer %s\r\n\r\n",
             (long long)v, admin_tok);
    for (int i = 0; i < 5; i++) {
        int fd = it_raw_connect(srv.port);
        char buf[4096];

        assert_true(fd >= 0);
        assert_true(it_raw_send_str(fd, req));
        assert_true(read(fd, buf, sizeof(buf)) > 0);
        close(fd);
    }
    usleep(300 * 1000);
    assert_true(it_server_alive(&srv));
    get(&resp, admin_tok, "/api/vouchers/%lld/orders?limit=1", (long long)v);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* Read fd until the peer closes it (or 20 s pass): the bytes, how many. */
static size_t read_all(int fd, char **out)
{
    size_t len = 0, cap = 1 << 20;
    char *buf = xmalloc(cap);
    int64_t until = util_mono_ms() + 20000;

    for (;;) {
        ssize_t k;

        if (len + 65536 > cap)
            buf = xrealloc(buf, cap *= 2);
        k = read(fd, buf + len, 65536);
        if (k <= 0 || util_mono_ms() > until)
            break;
        len += (size_t)k;
    }
    *out = buf;
    return len;
}

/*
 * MySQL fails in the middle of the export (the orders' table is renamed
 * away while the client holds the stream back): the bytes sent stay sent,
 * the instance logs it, and the stream ends without its last chunk, so
 * the client can tell the file is incomplete.
 */
static void test_sale_orders_csv_broken(void **state)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    char req[512], *body = NULL, first[2048];
    int fd, small = 4096;
    size_t len, lines = 0;
    (void)state;

    assert_true(csv_voucher > 0); /* made by test_sale_orders_csv */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    /* A small window: the instance cannot push the whole file ahead. */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    sa.sin_port = htons(srv.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    snprintf(req, sizeof(req),
             "GET /api/vouchers/%lld/orders HTTP/1.1\r\nHost: x\r\n"
             "Accept: text/csv\r\nAuthorization: Bearer %s\r\n\r\n",
             (long long)csv_voucher, admin_tok);
    assert_true(it_raw_send_str(fd, req));
    assert_true(read(fd, first, sizeof(first)) > 0);
    assert_int_equal(
        it_sql_exec("RENAME TABLE voucher_orders TO voucher_orders_away"), 0);
    len = read_all(fd, &body);
    assert_int_equal(
        it_sql_exec("RENAME TABLE voucher_orders_away TO voucher_orders"), 0);
    close(fd);
    for (size_t i = 0; i < len; i++)
        lines += body[i] == '\n';
    print_message("broken csv: %zu more bytes, %zu lines\n", len, lines);
    /* Not the whole file, and no last chunk ("0" and an empty line). */
    assert_true(lines < CSV_ORDERS);
    assert_false(len >= 5 && memcmp(body + len - 5, "0\r\n\r\n", 5) == 0);
    free(body);
    /* The instance serves on, the export too. */
    struct it_resp resp;
    get(&resp, admin_tok, "/api/vouchers/%lld/orders?limit=1",
        (long long)csv_voucher);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sales_classified),
        cmocka_unit_test(test_sales_pages),
        cmocka_unit_test(test_sales_bad_params),
        cmocka_unit_test(test_sales_crowd),
        cmocka_unit_test(test_vouchers_cursor),
        cmocka_unit_test(test_orders_cursor),
        cmocka_unit_test(test_sale_orders_pages),
        cmocka_unit_test(test_sale_orders_csv),
        cmocka_unit_test(test_sale_orders_csv_broken),
        cmocka_unit_test(test_sale_orders_csv_gone),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "listings", tests, group_setup, group_teardown));
}
