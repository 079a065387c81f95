/*
 * test_concurrency.c - the flash sale itself: two seckilld processes, one
 * voucher with 100 in stock, 500 users each sending 3 purchases at once,
 * all 1500 requests in flight together and spread over both instances.
 * Exactly 100 orders, one per user at most, stock 0, nothing but 201, 409
 * and 429 on the wire. The whole sale runs once per lock backend
 * (SECKILL_LOCK_URL: Redis, RedLock, MySQL, ZooKeeper): the service must
 * behave the same on each.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/it/harness.h"

#define STOCK 100
#define USERS 500
#define PER_USER 3
#define REQUESTS (USERS * PER_USER)
/* Far from the ids of the other tests. */
#define USER_BASE 9100000000LL

static struct it_server srv[2];

/* The lock backend of the group being run, and the variable naming its
 * URL (NULL: the default, the Redis URL). */
static const char *backend;
static const char *backend_env;

static int group_setup(void **state)
{
    char tag[2][64], url_set[1024];
    const char *overrides[2] = {url_set, NULL};

    (void)state;
    it_init();
    if (backend_env) {
        const char *url = getenv(backend_env);
        if (!url || !url[0]) {
            fprintf(stderr, "concurrency: %s is not set (make services)\n",
                    backend_env);
            return -1;
        }
        snprintf(url_set, sizeof(url_set), "SECKILL_LOCK_URL=%s", url);
    } else {
        snprintf(url_set, sizeof(url_set), "SECKILL_LOCK_URL");
    }
    snprintf(tag[0], sizeof(tag[0]), "concurrency-%s-a", backend);
    snprintf(tag[1], sizeof(tag[1]), "concurrency-%s-b", backend);
    if (it_server_start(&srv[0], tag[0], overrides) != 0)
        return -1;
    if (it_server_start(&srv[1], tag[1], overrides) != 0) {
        it_server_stop(&srv[0]);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, 2);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static void test_flash_sale(void **state)
{
    struct it_req *reqs = xcalloc(REQUESTS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(REQUESTS, sizeof(*resps));
    const struct it_server **to = xcalloc(REQUESTS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(USERS, sizeof(*tokens));
    int64_t order_ids[STOCK];
    int wins[USERS] = {0};
    size_t n_created = 0, n_sold_out = 0, n_dup = 0, n_busy = 0;
    size_t per_instance[2] = {0, 0};
    int64_t voucher, t0;
    char path[96];
    size_t i;

    (void)state;
    voucher = it_seckill_create(&srv[0], 1, STOCK, -60, 3600);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    for (i = 0; i < USERS; i++)
        it_token(USER_BASE + (int64_t)i, TOKEN_ROLE_USER, 3600, tokens[i]);
    /* A user's three requests are adjacent, so they alternate between the
     * two instances. */
    for (i = 0; i < REQUESTS; i++) {
        reqs[i].method = "POST";
        reqs[i].path = path;
        reqs[i].token = tokens[i / PER_USER];
        to[i] = &srv[i % 2];
    }

    t0 = util_mono_ms();
    it_http_run_all(reqs, to, resps, REQUESTS);
    print_message("%d requests in %lld ms\n", REQUESTS,
                  (long long)(util_mono_ms() - t0));

    for (i = 0; i < REQUESTS; i++) {
        struct it_resp *r = &resps[i];
        const char *code;

        if (r->curl_rc != CURLE_OK || r->status == 0) {
            print_error("request %zu (user %lld, instance %zu): transport "
                        "failure: %s\n",
                        i, (long long)(USER_BASE + (int64_t)(i / PER_USER)),
                        i % 2, curl_easy_strerror(r->curl_rc));
            fail();
        }
        per_instance[i % 2]++;
        if (r->status == 201) {
            it_assert_json_type(r);
            assert_true(n_created < STOCK);
            order_ids[n_created++] = it_json_id(r->json, "orderId");
            wins[i / PER_USER]++;
            continue;
        }
        code = it_json_str(json_object_get(r->json, "error"), "code");
        if (r->status == 409 && code && strcmp(code, "SOLD_OUT") == 0) {
            it_assert_error(r, 409, "SOLD_OUT");
            n_sold_out++;
        } else if (r->status == 409 && code &&
                   strcmp(code, "ALREADY_PURCHASED") == 0) {
            it_assert_error(r, 409, "ALREADY_PURCHASED");
            n_dup++;
        } else if (r->status == 429) {
            it_assert_error(r, 429, "BUSY");
            n_busy++;
        } else {
            print_error("request %zu: unexpected answer\n", i);
            it_assert_status(r, 409);
            fail();
        }
    }
    print_message("201: %zu, SOLD_OUT: %zu, ALREADY_PURCHASED: %zu, "
                  "BUSY: %zu\n",
                  n_created, n_sold_out, n_dup, n_busy);
    assert_int_equal(REQUESTS / 2, per_instance[0]);
    assert_int_equal(REQUESTS / 2, per_instance[1]);
    assert_int_equal(STOCK, n_created);
    assert_int_equal(REQUESTS, n_created + n_sold_out + n_dup + n_busy);
    for (i = 0; i < USERS; i++) {
        if (wins[i] > 1) {
            print_error("user %lld got %d orders\n",
                        (long long)(USER_BASE + (int64_t)i), wins[i]);
            fail();
        }
    }
    /* Every order id is distinct and is in MySQL for this voucher. */
    qsort(order_ids, STOCK, sizeof(order_ids[0]), cmp_i64);
    for (i = 1; i < STOCK; i++)
        assert_true(order_ids[i] != order_ids[i - 1]);
    for (i = 0; i < STOCK; i++) {
        int64_t user =
            it_sql_scalar("SELECT COALESCE(MAX(user_id), -1) FROM "
                          "voucher_orders WHERE id = %lld AND "
                          "voucher_id = %lld",
                          (long long)order_ids[i], (long long)voucher);

        if (user < USER_BASE || user >= USER_BASE + USERS ||
            wins[user - USER_BASE] != 1) {
            print_error("orderId %lld: user %lld in MySQL\n",
                        (long long)order_ids[i], (long long)user);
            fail();
        }
    }

    /* The database agrees. */
    assert_int_equal(STOCK, it_sql_order_count(voucher));
    assert_int_equal(0, it_sql_stock(voucher));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM (SELECT user_id "
                                      "FROM voucher_orders WHERE voucher_id "
                                      "= %lld GROUP BY user_id HAVING "
                                      "COUNT(*) > 1) d",
                                      (long long)voucher));
    assert_int_equal(STOCK,
                     it_sql_scalar("SELECT COUNT(DISTINCT user_id) FROM "
                                   "voucher_orders WHERE voucher_id = %lld "
                                   "AND user_id BETWEEN %lld AND %lld",
                                   (long long)voucher, (long long)USER_BASE,
                                   (long long)(USER_BASE + USERS - 1)));

    /* Both instances still serve, and see the same stock. */
    for (i = 0; i < 2; i++) {
        struct it_resp r;
        char vpath[64];

        snprintf(vpath, sizeof(vpath), "/api/vouchers/%lld",
                 (long long)voucher);
        it_http(&srv[i], "GET", vpath, NULL, NULL, &r);
        it_assert_status(&r, 200);
        assert_int_equal(0,
                         json_integer_value(json_object_get(r.json, "stock")));
        it_resp_free(&r);
        assert_true(it_server_alive(&srv[i]));
    }

    for (i = 0; i < REQUESTS; i++)
        it_resp_free(&resps[i]);
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
}

/*
 * Last: SIGTERM makes the server finish and exit 0 within
 * IT_STOP_TIMEOUT_MS (under ASan, also without leaks).
 */
static void test_clean_shutdown(void **state)
{
    (void)state;
    assert_int_equal(0, it_server_stop(&srv[0]));
    assert_int_equal(0, it_server_stop(&srv[1]));
}

int main(void)
{
    static const struct {
        const char *name, *env;
    } backends[] = {
        {"redis", NULL},
        {"redlock", "SECKILL_LOCK_REDLOCK_URL"},
        {"mysql", "SECKILL_MYSQL_URL"},
        {"zookeeper", "SECKILL_LOCK_ZK_URL"},
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash_sale),
        cmocka_unit_test(test_clean_shutdown),
    };
    int failed = 0;

    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        char group[64];

        backend = backends[i].name;
        backend_env = backends[i].env;
        snprintf(group, sizeof(group), "concurrency-%s", backend);
        failed |= it_exit_status(cmocka_run_group_tests_name(
            group, tests, group_setup, group_teardown));
    }
    return failed;
}
