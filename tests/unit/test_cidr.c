/*
 * test_cidr.c - address blocks (common/cidr.h): parsing, membership at
 * and around a block's edges, IPv4 written as IPv6, and the refusals.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/cidr.h"

static bool in(const struct cidr_list *l, const char *addr)
{
    struct cidr a;

    assert_int_equal(0, cidr_addr_parse(addr, &a));
    return cidr_list_has(l, &a);
}

static void test_blocks(void **state)
{
    struct cidr_list l;
    char why[128];

    (void)state;
    assert_int_equal(0, cidr_list_parse(" 10.0.0.0/8, 192.168.1.7 ,"
                                        "2001:db8::/32,::1,172.16.0.0/12",
                                        &l, why, sizeof(why)));
    assert_int_equal(5, l.n);
    assert_true(in(&l, "10.0.0.0"));
    assert_true(in(&l, "10.255.255.255"));
    assert_false(in(&l, "11.0.0.0"));
    assert_false(in(&l, "9.255.255.255"));
    assert_true(in(&l, "192.168.1.7"));
    assert_false(in(&l, "192.168.1.8"));
    assert_true(in(&l, "172.31.255.1"));
    assert_false(in(&l, "172.32.0.1"));
    assert_true(in(&l, "2001:db8:ffff::1"));
    assert_false(in(&l, "2001:db9::1"));
    assert_true(in(&l, "::1"));
    assert_false(in(&l, "::2"));
    /* An IPv4 address written as IPv6 is the IPv4 one, both ways. */
    assert_true(in(&l, "::ffff:10.1.2.3"));
    assert_int_equal(
        0, cidr_list_parse("::ffff:127.0.0.0/104", &l, why, sizeof(why)));
    assert_true(in(&l, "127.9.9.9"));
    assert_false(in(&l, "128.0.0.1"));
}

static void test_edges(void **state)
{
    struct cidr_list l;
    char why[128];

    (void)state;
    /* /0 takes every address of its family, /32 one. */
    assert_int_equal(0, cidr_list_parse("0.0.0.0/0", &l, why, sizeof(why)));
    assert_true(in(&l, "203.0.113.9"));
    assert_false(in(&l, "2001:db8::1"));
    assert_int_equal(0,
                     cidr_list_parse("203.0.113.9/31", &l, why, sizeof(why)));
    assert_true(in(&l, "203.0.113.8"));
    assert_true(in(&l, "203.0.113.9"));
    assert_false(in(&l, "203.0.113.10"));
    /* Host bits in the block's address are cleared. */
    assert_int_equal(0, cidr_list_parse("10.1.2.3/16", &l, why, sizeof(why)));
    assert_true(in(&l, "10.1.200.200"));
    /* Empty text: the empty list. */
    assert_int_equal(0, cidr_list_parse("  ", &l, why, sizeof(why)));
    assert_int_equal(0, l.n);
    assert_false(in(&l, "127.0.0.1"));
}

static void test_refused(void **state)
{
    static const char *const bad[] = {
        "10.0.0.0/33", "::1/129",    "10.0.0.0/",   "10.0.0.0/x",
        "10.0.0",      "localhost",  "10.0.0.0,,",  "1.2.3.4/8/8",
        "[::1]",       "1.2.3.4:80", "10.0.0.0/-1",
    };
    struct cidr_list l;
    struct cidr a;
    char why[128];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why[0] = '\0';
        assert_int_equal(-22, cidr_list_parse(bad[i], &l, why, sizeof(why)));
        assert_true(why[0] != '\0');
    }
    assert_int_equal(-22, cidr_addr_parse("999.1.1.1", &a));
    assert_int_equal(-22, cidr_addr_parse("", &a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
