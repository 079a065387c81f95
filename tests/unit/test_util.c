/*
 * test_util.c - id parsing, RFC 3339 times, hex, and the ID worker's pure
 * layout (compose, decode, day key).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>
#include <cmocka.h>

#include "common/util.h"
#include "common/redis_keys.h"
#include "idgen/idgen.h"

static void test_parse_id(void **state)
{
    int64_t v;
    (void)state;

    assert_int_equal(util_parse_id("1", 1, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(util_parse_id("9223372036854775807", 19, &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(util_parse_id("9223372036854775808", 19, &v), -EINVAL);
    assert_int_equal(util_parse_id("99999999999999999999", 20, &v), -EINVAL);
    assert_int_equal(util_parse_id("0", 1, &v), -EINVAL);
    assert_int_equal(util_parse_id("-1", 2, &v), -EINVAL);
    assert_int_equal(util_parse_id("+1", 2, &v), -EINVAL);
    assert_int_equal(util_parse_id("1.5", 3, &v), -EINVAL);
    assert_int_equal(util_parse_id("abc", 3, &v), -EINVAL);
    assert_int_equal(util_parse_id("", 0, &v), -EINVAL);
    assert_int_equal(util_parse_id("12 ", 3, &v), -EINVAL);
    /* Only len bytes are read. */
    assert_int_equal(util_parse_id("12/seckill", 2, &v), 0);
    assert_int_equal(v, 12);
}

static void test_time(void **state)
{
    char buf[UTIL_TIME_LEN];
    int64_t t;
    (void)state;

    assert_int_equal(util_time_parse("2022-01-01T00:00:00Z", &t), 0);
    assert_int_equal(t, 1640995200);
    assert_string_equal(util_time_format(t, buf), "2022-01-01T00:00:00Z");
    assert_int_equal(util_time_parse("2022-01-01T08:00:00+08:00", &t), 0);
    assert_int_equal(t, 1640995200);
    assert_int_equal(util_time_parse("2021-12-31T19:00:00.123-05:00", &t), 0);
    assert_int_equal(t, 1640995200);
    assert_int_equal(util_time_parse("2024-02-29T12:00:00Z", &t), 0);

    const char *bad[] = {"2023-02-29T12:00:00Z",  "2022-13-01T00:00:00Z",
                         "2022-01-01 00:00:00Z",  "2022-01-01T00:00:00",
                         "2022-01-01T24:00:00Z",  "2022-01-01T00:00:00Zjunk",
                         "2022-1-01T00:00:00Z",   "",
                         "2022-01-01T00:00:00.Z", "1969-12-31T23:59:59Z"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(util_time_parse(bad[i], &t), -EINVAL);
}

static void test_hex(void **state)
{
    unsigned char out[2];
    (void)state;

    assert_int_equal(util_hex_decode("a0Ff", out, 2), 0);
    assert_int_equal(out[0], 0xa0);
    assert_int_equal(out[1], 0xff);
    assert_int_equal(util_hex_decode("a0F", out, 2), -EINVAL);
    assert_int_equal(util_hex_decode("a0Fg", out, 2), -EINVAL);
}

static void test_id_layout(void **state)
{
    int64_t now = 1763700000; /* 2025-11-21 */
    int64_t t;
    uint32_t seq;
    (void)state;

    int64_t id = idgen_compose(now, 5);
    assert_true(id > 0);
    assert_true(id == ((now - 1640995200LL) << 32 | 5));
    idgen_decode(id, &t, &seq);
    assert_int_equal(t, now);
    assert_int_equal(seq, 5);

    /* Later seconds sort after earlier ones whatever the sequence. */
    assert_true(idgen_compose(now + 1, 1) > idgen_compose(now, UINT32_MAX));
    idgen_decode(idgen_compose(now, UINT32_MAX), &t, &seq);
    assert_int_equal(seq, UINT32_MAX);
    assert_int_equal(t, now);
}

static void test_day_key(void **state)
{
    char key[64];
    (void)state;

    assert_int_equal(idgen_day_key("order", 1640995200, key, sizeof(key)), 0);
    assert_string_equal(key, "icr:{order}:2022:01:01");
    /* UTC day: one second before midnight is still the old day. */
    assert_int_equal(idgen_day_key("order", 1640995199, key, sizeof(key)), 0);
    assert_string_equal(key, "icr:{order}:2021:12:31");
    assert_int_equal(
        idgen_legacy_day_key("order", 1640995199, key, sizeof(key)), 0);
    assert_string_equal(key, "icr:order:2021:12:31");
    assert_int_equal(idgen_day_key("order", 1640995200, key, 8), -ENAMETOOLONG);
    /* Every counter carries the Redis prefix, the old names too: two
     * deployments with their own prefixes on one Redis never count on a
     * counter of the other's. */
    assert_int_equal(0, redis_prefix_set("shop2:"));
    assert_int_equal(idgen_day_key("order", 1640995200, key, sizeof(key)), 0);
    assert_string_equal(key, "shop2:icr:{order}:2022:01:01");
    assert_int_equal(
        idgen_legacy_day_key("order", 1640995199, key, sizeof(key)), 0);
    assert_string_equal(key, "shop2:icr:order:2021:12:31");
    assert_int_equal(0, redis_prefix_set(""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_id), cmocka_unit_test(test_time),
        cmocka_unit_test(test_hex),      cmocka_unit_test(test_id_layout),
        cmocka_unit_test(test_day_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
