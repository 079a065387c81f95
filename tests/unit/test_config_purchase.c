/*
 * test_config_purchase.c - the purchase settings: SECKILL_BATCH_MAX,
 * SECKILL_BATCH_LINGER_US and SECKILL_STOCK_SEGMENTS, with their defaults,
 * bounds and one-line errors.
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
    "SECKILL_BATCH_MAX",
    "SECKILL_BATCH_LINGER_US",
    "SECKILL_STOCK_SEGMENTS",
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

/* Merged transactions of up to 64 by default, no linger, no segments. */
static void test_defaults(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.store.batch_max, STORE_BATCH_DEFAULT);
    assert_int_equal(c.http.store.batch_linger_us, 0);
    assert_int_equal(c.http.store.stock_segments, 1);
    config_free(&c);
}

static void test_values(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_BATCH_MAX", "1", 1);
    setenv("SECKILL_STOCK_SEGMENTS", "64", 1);
    assert_int_equal(
        parse(&c, err, 3, "--batch-linger-us=200", "--stock-segments=16"), 0);
    assert_int_equal(c.http.store.batch_max, 1);
    assert_int_equal(c.http.store.batch_linger_us, 200);
    /* The flag wins over the environment. */
    assert_int_equal(c.http.store.stock_segments, 16);
    config_free(&c);

    assert_int_equal(parse(&c, err, 3, "--batch-max", "256"), 0);
    assert_int_equal(c.http.store.batch_max, STORE_BATCH_MAX);
    assert_int_equal(c.http.store.stock_segments, 64);
    config_free(&c);
}

static void test_bad_values(void **state)
{
    static const struct {
        const char *var, *val;
    } cases[] = {
        {"SECKILL_BATCH_MAX", "0"},
        {"SECKILL_BATCH_MAX", "257"},
        {"SECKILL_BATCH_MAX", "x"},
        {"SECKILL_BATCH_MAX", ""},
        {"SECKILL_BATCH_LINGER_US", "-1"},
        {"SECKILL_BATCH_LINGER_US", "10001"},
        {"SECKILL_BATCH_LINGER_US", "1ms"},
        {"SECKILL_STOCK_SEGMENTS", "0"},
        {"SECKILL_STOCK_SEGMENTS", "65"},
        {"SECKILL_STOCK_SEGMENTS", "2.5"},
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
