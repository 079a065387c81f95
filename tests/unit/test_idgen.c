/*
 * test_idgen.c - the ID worker's client-side logic that needs no Redis:
 * the window of day keys the script is given around a guess of the
 * server's time; and the sharded layout of ids. (The script itself is tested
 * against a real Redis in tests/it/test_idgen.c and tests/faults.)
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

/* The last second the sharded layout can hold: t - epoch < 2^30. */
#define SHARDED_LAST_S (IDGEN_EPOCH + (1LL << 30) - 1)

/* Ids from before sharding decode as shard 0: AUTO_INCREMENT voucher
 * ids, and every worker id until the layout's last second. */
static void test_old_ids_are_shard_0(void **state)
{
    static const int64_t small[] = {
        1, 2, 63, 64, 65, 127, 1000003, (1LL << 32) + 5, (1LL << 40) + 63};
    (void)state;

    for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
        assert_false(idgen_is_sharded(small[i]));
        assert_int_equal(0, idgen_shard_of(small[i]));
    }
    for (int64_t t = IDGEN_EPOCH; t <= SHARDED_LAST_S; t += 86400 * 97 + 13)
        for (uint32_t seq = 0; seq < 64; seq++) {
            int64_t id = idgen_compose(t, seq | 0xffffffc0u);

            assert_false(idgen_is_sharded(id));
            assert_int_equal(0, idgen_shard_of(id));
        }
    assert_int_equal(0,
                     idgen_shard_of(idgen_compose(SHARDED_LAST_S, UINT32_MAX)));
    assert_false(idgen_is_sharded(0));
    assert_false(idgen_is_sharded(-5));
    assert_int_equal(0, idgen_shard_of(INT64_MIN));
}

/* A worker id on every shard: the shard, its time and its counter come
 * back; distinct shards give distinct ids. */
static void test_shard_round_trip(void **state)
{
    static const uint32_t seqs[] = {0, 1, 63, 64, 1000, IDGEN_SHARDED_SEQ_MAX};
    static const int64_t times[] = {IDGEN_EPOCH + 1, MIDNIGHT, MIDNIGHT + 1,
                                    SHARDED_LAST_S};
    (void)state;

    for (size_t t = 0; t < sizeof(times) / sizeof(times[0]); t++)
        for (size_t q = 0; q < sizeof(seqs) / sizeof(seqs[0]); q++) {
            int64_t w = idgen_compose(times[t], seqs[q]), prev = 0;

            for (unsigned shard = 0; shard < IDGEN_SHARDS_MAX; shard++) {
                int64_t id, epoch_s;
                uint32_t seq;

                assert_int_equal(0, idgen_shard_compose(w, shard, &id));
                assert_true(id > 0);
                assert_true(idgen_is_sharded(id));
                assert_int_equal(shard, idgen_shard_of(id));
                idgen_decode(id, &epoch_s, &seq);
                assert_int_equal(times[t], epoch_s);
                assert_int_equal(seqs[q], seq);
                assert_true(id > prev); /* distinct: the shard is below */
                prev = id;
            }
        }
}

/* What the layout cannot hold is refused, never wrapped. */
static void test_shard_compose_refuses(void **state)
{
    int64_t id, sharded;
    (void)state;

    assert_int_equal(
        -EOVERFLOW,
        idgen_shard_compose(idgen_compose(MIDNIGHT, IDGEN_SHARDED_SEQ_MAX + 1),
                            0, &id));
    assert_int_equal(-EINVAL, idgen_shard_compose(idgen_compose(MIDNIGHT, 1),
                                                  IDGEN_SHARDS_MAX, &id));
    /* Past 2056 the worker's own ids reach the marker. */
    assert_int_equal(
        -EINVAL,
        idgen_shard_compose(idgen_compose(SHARDED_LAST_S + 1, 1), 0, &id));
    assert_int_equal(
        0, idgen_shard_compose(idgen_compose(MIDNIGHT, 1), 3, &sharded));
    assert_int_equal(-EINVAL, idgen_shard_compose(sharded, 3, &id));
    assert_int_equal(-EINVAL, idgen_shard_compose(0, 3, &id));
}

/* Sharded ids keep growing with time: every sharded id is above every
 * id from before (the marker), and a later second or a later counter
 * value is above an earlier one whatever the shards. */
static void test_shard_ordering(void **state)
{
    int64_t a, b, old = idgen_compose(SHARDED_LAST_S, UINT32_MAX);
    (void)state;

    assert_int_equal(0,
                     idgen_shard_compose(idgen_compose(IDGEN_EPOCH, 1), 0, &a));
    assert_true(a > old);
    assert_int_equal(0,
                     idgen_shard_compose(idgen_compose(MIDNIGHT, 7), 63, &a));
    assert_int_equal(0, idgen_shard_compose(idgen_compose(MIDNIGHT, 8), 0, &b));
    assert_true(b > a);
    assert_int_equal(
        0, idgen_shard_compose(idgen_compose(MIDNIGHT, IDGEN_SHARDED_SEQ_MAX),
                               63, &a));
    assert_int_equal(
        0, idgen_shard_compose(idgen_compose(MIDNIGHT + 1, 0), 0, &b));
    assert_true(b > a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_window_matches_day_key),
        cmocka_unit_test(test_window_long_prefix),
        cmocka_unit_test(test_later_second_wins),
        cmocka_unit_test(test_old_ids_are_shard_0),
        cmocka_unit_test(test_shard_round_trip),
        cmocka_unit_test(test_shard_compose_refuses),
        cmocka_unit_test(test_shard_ordering),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
