/*
 * test_i64map.c - the hash map of common/i64map.h against a plain array
 * that does the same puts, deletes and filters, over many random steps
 * with keys drawn from a small range (so that runs of collisions, moves
 * on deletion and growth all happen).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/i64map.h"

#define KEYS 3000

static bool has[KEYS + 1];
static uint64_t val[KEYS + 1];

static bool keep_odd_vals(void *ctx, uint64_t key, uint64_t v)
{
    (void)ctx;
    (void)key;
    return v % 2 == 1;
}

static void check_all(const struct i64map *m)
{
    size_t n = 0;

    for (uint64_t k = 1; k <= KEYS; k++) {
        uint64_t v = 0;
        bool got = i64map_get(m, k, &v);

        assert_int_equal(has[k], got);
        if (got) {
            assert_true(v == val[k]);
            n++;
        }
    }
    assert_int_equal(n, m->len);
}

static void test_against_array(void **state)
{
    struct i64map m = {0};
    unsigned seed = 12345;

    (void)state;
    assert_false(i64map_get(&m, 7, NULL));
    assert_false(i64map_del(&m, 7));
    for (int step = 0; step < 200000; step++) {
        uint64_t k = (uint64_t)(rand_r(&seed) % KEYS) + 1;
        int op = rand_r(&seed) % 10;

        if (op < 6) {
            uint64_t v = (uint64_t)rand_r(&seed);
            i64map_put(&m, k, v);
            has[k] = true;
            val[k] = v;
        } else {
            assert_int_equal(has[k], i64map_del(&m, k));
            has[k] = false;
        }
        if (step % 20000 == 0)
            check_all(&m);
    }
    check_all(&m);
    i64map_filter(&m, keep_odd_vals, NULL);
    for (uint64_t k = 1; k <= KEYS; k++)
        if (has[k] && val[k] % 2 == 0)
            has[k] = false;
    check_all(&m);
    /* Keys far apart, and the largest. */
    i64map_put(&m, UINT64_MAX, 1);
    i64map_put(&m, 1ULL << 63, 3);
    assert_true(i64map_get(&m, UINT64_MAX, NULL));
    assert_true(i64map_del(&m, 1ULL << 63));
    assert_true(i64map_del(&m, UINT64_MAX));
    check_all(&m);
    i64map_clear(&m);
    assert_int_equal(0, m.len);
    assert_false(i64map_get(&m, 1, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
