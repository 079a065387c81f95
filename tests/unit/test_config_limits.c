/*
 * test_config_limits.c - the abuse-limit settings: rate limits
 * (SECKILL_RATE_USER, SECKILL_RATE_IP), the connection timeout and the
 * connection limits, with their defaults and one-line errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cmd/config.h"

#define SECRET                                                                 \
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static const char *const vars[] = {
    "SECKILL_RATE_USER",       "SECKILL_RATE_IP",  "SECKILL_CONN_TIMEOUT_S",
    "SECKILL_MAX_CONN",        "SECKILL_THREADS",  "SECKILL_PORT",
    "SECKILL_MAX_CONN_PER_IP", "SECKILL_LOCK_URL", "SECKILL_DEV",
};

static int reset_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    setenv("SECKILL_MYSQL_URL", "mysql://u:p@127.0.0.1:13306/db", 1);
    setenv("SECKILL_REDIS_URL", "redis://127.0.0.1:16379/1", 1);
    setenv("SECKILL_SECRET", SECRET, 1);
    return 0;
}

static int parse(struct config *cfg, char *err, int argc, ...)
{
    char *argv[16] = {"seckilld"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return config_parse(cfg, argc, argv, err, 256);
}

/* The defaults keep loopback load tests working: per-user on, per-address
 * limits off (README, Configuration). */
static void test_defaults(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 1), 0);
    assert_true(c.http.rate_user.per_s > 19.999 &&
                c.http.rate_user.per_s < 20.001);
    assert_int_equal(c.http.rate_user.burst, 40);
    assert_true(c.http.rate_ip.per_s == 0);
    assert_int_equal(c.http.conn_timeout_s, 30);
    assert_int_equal(c.http.max_conn, 60000);
    assert_int_equal(c.http.max_conn_per_ip, 0);
    config_free(&c);
}

static void test_values(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_RATE_IP", "100,200", 1);
    setenv("SECKILL_MAX_CONN_PER_IP", "256", 1);
    assert_int_equal(parse(&c, err, 9, "--rate-user=0.5,3", "--conn-timeout-s",
                           "5", "--max-conn", "1000", "--threads", "4",
                           "--rate-ip=0"),
                     0);
    assert_true(c.http.rate_user.per_s > 0.499 &&
                c.http.rate_user.per_s < 0.501);
    assert_int_equal(c.http.rate_user.burst, 3);
    /* The flag wins over the environment. */
    assert_true(c.http.rate_ip.per_s == 0);
    assert_int_equal(c.http.conn_timeout_s, 5);
    assert_int_equal(c.http.max_conn, 1000);
    assert_int_equal(c.http.max_conn_per_ip, 256);
    config_free(&c);

    setenv("SECKILL_RATE_USER", "0", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_true(c.http.rate_user.per_s == 0);
    config_free(&c);
    reset_env(NULL);
}

static void test_bad_values(void **state)
{
    static const struct {
        const char *var, *val;
    } cases[] = {
        {"SECKILL_RATE_USER", ""},         {"SECKILL_RATE_USER", "20"},
        {"SECKILL_RATE_USER", "20,"},      {"SECKILL_RATE_USER", ",40"},
        {"SECKILL_RATE_USER", "20,0"},     {"SECKILL_RATE_USER", "0,40"},
        {"SECKILL_RATE_USER", "-1,40"},    {"SECKILL_RATE_USER", " 20,40"},
        {"SECKILL_RATE_USER", "inf,40"},   {"SECKILL_RATE_USER", "nan,40"},
        {"SECKILL_RATE_USER", "20,40,60"}, {"SECKILL_RATE_USER", "20/s,40"},
        {"SECKILL_RATE_USER", "0.0001,1"}, {"SECKILL_RATE_USER", "2000000,1"},
        {"SECKILL_RATE_IP", "1,1000001"},  {"SECKILL_RATE_IP", "off"},
        {"SECKILL_CONN_TIMEOUT_S", "0"},   {"SECKILL_CONN_TIMEOUT_S", "3601"},
        {"SECKILL_CONN_TIMEOUT_S", "1s"},  {"SECKILL_MAX_CONN", "0"},
        {"SECKILL_MAX_CONN", "1000001"},   {"SECKILL_MAX_CONN_PER_IP", "-1"},
        {"SECKILL_MAX_CONN_PER_IP", "x"},
    };
    struct config c;
    char err[256];
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        reset_env(NULL);
        setenv(cases[i].var, cases[i].val, 1);
        err[0] = '\0';
        if (parse(&c, err, 1) == 0) {
            print_error("%s=\"%s\" was accepted\n", cases[i].var, cases[i].val);
            fail();
        }
        assert_non_null(strstr(err, cases[i].var));
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
    /* Fewer connections than threads would leave a thread with none. */
    reset_env(NULL);
    setenv("SECKILL_THREADS", "8", 1);
    setenv("SECKILL_MAX_CONN", "7", 1);
    assert_int_not_equal(parse(&c, err, 1), 0);
    assert_non_null(strstr(err, "SECKILL_MAX_CONN"));
    config_free(&c);
    reset_env(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, reset_env),
        cmocka_unit_test_setup(test_values, reset_env),
        cmocka_unit_test_setup(test_bad_values, reset_env),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
