/*
 * test_idgen.c - the ID worker's client-side logic that needs no Redis:
 * the window of day keys the script is given around a guess of the
 * server's time. (The script itself is tested against a real Redis in
 * tests/it/test_idgen.c and tests/faults.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>
#include <cmocka.h>

#include "idgen/idgen.h"

/* 2026-11-21T00:00:00Z, a day boundary. */
#define MIDNIGHT 1795219200LL

static void expect_window(int64_t hint, int64_t first_day, const char *k0,
                          const char *k1, const char *k2)
{
    char keys[IDGEN_WINDOW][IDGEN_KEY_MAX];
    int64_t first;

    assert_int_equal(0, idgen_window("order", hint, keys, &first));
    assert_int_equal(first, first_day);
    assert_string_equal(keys[0], k0);
    assert_string_equal(keys[1], k1);
    assert_string_equal(keys[2], k2);
}

static void test_window(void **state)
{
    (void)state;
    /* The day before, the day of the guess, the day after. */
    expect_window(MIDNIGHT, MIDNIGHT / 86400 - 1, "icr:{order}:2026:11:20",
                  "icr:{order}:2026:11:21", "icr:{order}:2026:11:22");
    /* One second earlier is the previous day's window. */
    expect_window(MIDNIGHT - 1, MIDNIGHT / 86400 - 2, "icr:{order}:2026:11:19",
                  "icr:{order}:2026:11:20", "icr:{order}:2026:11:21");
    expect_window(MIDNIGHT + 86399, MIDNIGHT / 86400 - 1,
                  "icr:{order}:2026:11:20", "icr:{order}:2026:11:21",
                  "icr:{order}:2026:11:22");
    /* Across a year and a leap day. */
    expect_window(1830297600LL /* 2028-01-01 */, 1830297600LL / 86400 - 1,
                  "icr:{order}:2027:12:31", "icr:{order}:2028:01:01",
                  "icr:{order}:2028:01:02");
    expect_window(1835395200LL /* 2028-02-29 */, 1835395200LL / 86400 - 1,
                  "icr:{order}:2028:02:28", "icr:{order}:2028:02:29",
                  "icr:{order}:2028:03:01");
}

/* The script picks key i for a server time t when t's day is
 * first_day + i: every key is the day key of the times of its day. */
static void test_window_matches_day_key(void **state)
{
    char keys[IDGEN_WINDOW][IDGEN_KEY_MAX], want[IDGEN_KEY_MAX];
    int64_t first;
    (void)state;

    for (int64_t hint = MIDNIGHT - 3 * 86400; hint < MIDNIGHT + 3 * 86400;
         hint += 3607) {
        assert_int_equal(0, idgen_window("order", hint, keys, &first));
        for (int i = 0; i < IDGEN_WINDOW; i++) {
            for (int64_t off = 0; off < 86400; off += 43199) {
                int64_t t = (first + i) * 86400 + off;

                assert_int_equal(0,
                                 idgen_day_key("order", t, want, sizeof(want)));
                assert_string_equal(keys[i], want);
                assert_int_equal(t / 86400 - first, i);
            }
        }
    }
}

static void test_window_long_prefix(void **state)
{
    char keys[IDGEN_WINDOW][IDGEN_KEY_MAX];
    char prefix[IDGEN_KEY_MAX];
    int64_t first;
    (void)state;

    memset(prefix, 'p', sizeof(prefix) - 1);
    prefix[sizeof(prefix) - 1] = '\0';
    assert_int_equal(-ENAMETOOLONG,
                     idgen_window(prefix, MIDNIGHT, keys, &first));
}

/* After a loss, ids of a later second sort after every id of the earlier
 * second, whatever their counters: the property the pause relies on. */
static void test_later_second_wins(void **state)
{
    (void)state;
    assert_true(idgen_compose(MIDNIGHT + 1, 1) >
                idgen_compose(MIDNIGHT, UINT32_MAX));
    assert_true(idgen_compose(MIDNIGHT, 1) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_window_matches_day_key),
        cmocka_unit_test(test_window_long_prefix),
        cmocka_unit_test(test_later_second_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
