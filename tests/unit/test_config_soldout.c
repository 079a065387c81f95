/*
 * test_config_soldout.c - SECKILL_SOLDOUT_TTL_MS / --soldout-ttl-ms, how
 * long the voucher cache trusts a sold-out flag (handlers/vcache.c): its
 * default, its range, and the one-line error naming it.
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

static int reset_env(void **state)
{
    (void)state;
    unsetenv("SECKILL_SOLDOUT_TTL_MS");
    setenv("SECKILL_MYSQL_URL", "mysql://u:p@127.0.0.1:13306/db", 1);
    setenv("SECKILL_REDIS_URL", "redis://127.0.0.1:16379/1", 1);
    setenv("SECKILL_SECRET", SECRET, 1);
    return 0;
}

static int parse(struct config *cfg, char *err, int argc, char **rest)
{
    char *argv[4] = {"seckilld"};

    for (int i = 1; i < argc; i++)
        argv[i] = rest[i - 1];
    return config_parse(cfg, argc, argv, err, 256);
}

static void test_default_and_values(void **state)
{
    char *flag[] = {"--soldout-ttl-ms", "0"};
    struct config c;
    char err[256];

    (void)state;
    assert_int_equal(parse(&c, err, 1, NULL), 0);
    assert_int_equal(c.http.soldout_ttl_ms, 1000);
    config_free(&c);

    setenv("SECKILL_SOLDOUT_TTL_MS", "60000", 1);
    assert_int_equal(parse(&c, err, 1, NULL), 0);
    assert_int_equal(c.http.soldout_ttl_ms, 60000);
    config_free(&c);

    /* The flag wins; 0 turns the cache off. */
    assert_int_equal(parse(&c, err, 3, flag), 0);
    assert_int_equal(c.http.soldout_ttl_ms, 0);
    config_free(&c);
}

static void test_bad_values(void **state)
{
    static const char *const bad[] = {"", "-1", "60001", "1s", "1.5", "x"};
    struct config c;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SECKILL_SOLDOUT_TTL_MS", bad[i], 1);
        err[0] = '\0';
        if (parse(&c, err, 1, NULL) == 0) {
            print_error("SECKILL_SOLDOUT_TTL_MS=\"%s\" was accepted\n", bad[i]);
            fail();
        }
        assert_non_null(strstr(err, "SECKILL_SOLDOUT_TTL_MS"));
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_default_and_values, reset_env),
        cmocka_unit_test_setup(test_bad_values, reset_env),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
