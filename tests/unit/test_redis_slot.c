/*
 * test_redis_slot.c - Redis Cluster's key slots (common/redis_slot.h):
 * the CRC16 check value, slots that real clusters report for known keys
 * (CLUSTER KEYSLOT), and the hash-tag rules of the cluster specification.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/redis_slot.h"

static void test_crc16(void **state)
{
    (void)state;
    /* The XMODEM check value, and the specification's example. */
    assert_int_equal(0x31C3, redis_crc16("123456789", 9));
    assert_int_equal(0, redis_crc16("", 0));
}

static void test_known_slots(void **state)
{
    (void)state;
    /* As CLUSTER KEYSLOT answers on Redis 7.0. */
    assert_int_equal(12182, redis_key_slot_str("foo"));
    assert_int_equal(5061, redis_key_slot_str("bar"));
    assert_int_equal(866, redis_key_slot_str("hello"));
    assert_int_equal(15495, redis_key_slot_str("a"));
    assert_int_equal(3443, redis_key_slot_str("{user1000}.following"));
    assert_int_equal(4015, redis_key_slot_str("foo{{bar}}zap"));
    assert_int_equal(8363, redis_key_slot_str("foo{}{bar}"));
}

static void test_hash_tags(void **state)
{
    (void)state;
    /* The tag is hashed, wherever it stands. */
    assert_int_equal(redis_key_slot_str("user1000"),
                     redis_key_slot_str("{user1000}.following"));
    assert_int_equal(redis_key_slot_str("user1000"),
                     redis_key_slot_str("x{user1000}y"));
    /* Only the first '{' and the first '}' after it. */
    assert_int_equal(redis_key_slot_str("{bar"),
                     redis_key_slot_str("foo{{bar}}zap"));
    assert_int_equal(redis_key_slot_str("bar"),
                     redis_key_slot_str("foo{bar}{zap}"));
    /* An empty tag is no tag; an unclosed one neither. */
    assert_int_not_equal(redis_key_slot_str(""),
                         redis_key_slot_str("foo{}{bar}"));
    assert_int_equal(redis_crc16("foo{}{bar}", 10) & 16383,
                     redis_key_slot_str("foo{}{bar}"));
    assert_int_equal(redis_crc16("foo{bar", 7) & 16383,
                     redis_key_slot_str("foo{bar"));
    /* Binary keys: the length, not a NUL, ends the key. */
    assert_int_equal(redis_key_slot("ab\0c", 4),
                     redis_crc16("ab\0c", 4) & 16383);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16),
        cmocka_unit_test(test_known_slots),
        cmocka_unit_test(test_hash_tags),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
