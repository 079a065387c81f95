/*
 * stress.c - `make stress`: the two-instance flash sale, many rounds in a
 * row, looking for the rare request that never gets an answer and for any
 * broken invariant.
 *
 * Each round: a fresh voucher with STRESS_STOCK (300) in stock, then
 * STRESS_CROWD (1,000) buyers, all in flight at once, alternating between
 * two instances of the binary under test (SECKILL_BIN) at their default
 * settings, each request with a 10 s client timeout. It prints one line per
 * round with the slowest request, and checks in MySQL: orders == initial -
 * final stock, exactly the stock sold, no user twice, stock never
 * negative, every 201's order id is that user's order, every other answer
 * a 409 SOLD_OUT. It fails on the first request without an answer (curl's
 * error and time are printed) or broken invariant.
 *
 *   build/tests/stress [ROUNDS]     (default STRESS_ROUNDS or 30)
 *
 * Runs against the test backends (. .run/env.test); tests/stress.sh runs it
 * for the plain and the sanitizer build.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/it/harness.h"

#define USER_BASE 250000000000LL
#define STOCK 300
#define CROWD 1000
#define TIMEOUT_S 10

static struct it_server srv[2];
static int rounds = 30;

static int setup(void **state)
{
    static const char *const env[] = {"SECKILL_RATE_USER=0", NULL};

    (void)state;
    it_init();
    if (it_server_start(&srv[0], "stress-a", env) != 0)
        return -1;
    if (it_server_start(&srv[1], "stress-b", env) != 0) {
        it_group_teardown(srv, 1);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, 2);
}

static void one_round(int round, int64_t first)
{
    struct it_req *reqs = xcalloc(CROWD, sizeof(*reqs));
    struct it_resp *resps = xcalloc(CROWD, sizeof(*resps));
    const struct it_server **to = xcalloc(CROWD, sizeof(*to));
    char(*toks)[TOKEN_STR_LEN] = xcalloc(CROWD, sizeof(*toks));
    int64_t v = it_seckill_create(&srv[0], 1, STOCK, -60, 3600), t0;
    size_t created = 0, slowest = 0;
    char path[96];

    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (size_t i = 0; i < CROWD; i++) {
        it_token(first + (int64_t)i, TOKEN_ROLE_USER, 3600, toks[i]);
        reqs[i] = (struct it_req){.method = "POST",
                                  .path = path,
                                  .token = toks[i],
                                  .timeout_s = TIMEOUT_S};
        to[i] = &srv[i % 2];
    }
    t0 = util_mono_ms();
    it_http_run_all(reqs, to, resps, CROWD);
    for (size_t i = 0; i < CROWD; i++) {
        struct it_resp *r = &resps[i];

        if (r->elapsed_ms > resps[slowest].elapsed_ms)
            slowest = i;
        if (r->status == 201) {
            int64_t id = it_json_id(r->json, "orderId");

            created++;
            assert_int_equal(
                1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                 "WHERE id = %lld AND user_id = %lld AND "
                                 "voucher_id = %lld",
                                 (long long)id, (long long)(first + (int64_t)i),
                                 (long long)v));
        } else {
            it_assert_error(r, 409, "SOLD_OUT");
        }
    }
    print_message("round %2d: %d purchases in %lld ms, %zu sold, slowest "
                  "request %.0f ms (to port %u)\n",
                  round, CROWD, (long long)(util_mono_ms() - t0), created,
                  resps[slowest].elapsed_ms, (unsigned)to[slowest]->port);
    assert_int_equal(STOCK, created);
    assert_int_equal(STOCK, it_sql_order_count(v));
    assert_int_equal(0, it_sql_stock(v));
    assert_int_equal(STOCK, it_sql_scalar("SELECT COUNT(DISTINCT user_id) "
                                          "FROM voucher_orders WHERE "
                                          "voucher_id = %lld",
                                          (long long)v));
    for (size_t i = 0; i < CROWD; i++)
        it_resp_free(&resps[i]);
    free(toks);
    free(to);
    free(resps);
    free(reqs);
}

static void test_rounds(void **state)
{
    int64_t first = USER_BASE + util_now_ms() % 1000000 * 100000;

    (void)state;
    for (int r = 1; r <= rounds; r++)
        one_round(r, first + (int64_t)r * CROWD);
}

int main(int argc, char **argv)
{
    const char *env = getenv("STRESS_ROUNDS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounds),
    };

    if (argc > 1)
        rounds = atoi(argv[1]);
    else if (env && *env)
        rounds = atoi(env);
    if (rounds < 1)
        rounds = 1;
    return it_exit_status(
        cmocka_run_group_tests_name("stress", tests, setup, teardown));
}
