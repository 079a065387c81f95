/*
 * test_phone.c - phone numbers in E.164 form (common/phone.h): the ways
 * one Chinese mobile number is written become one, other countries keep
 * their own code, and what is not a number is refused with a reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/phone.h"

static void expect(const char *in, const char *region, const char *want)
{
    char out[PHONE_E164_MAX];
    const char *why = NULL;

    if (phone_normalize(in, region, out, &why) != 0 || strcmp(out, want)) {
        print_error("%s (%s): got \"%s\" (%s), want %s\n", in, region, out,
                    why ? why : "", want);
        fail();
    }
}

static void refused(const char *in, const char *region)
{
    char out[PHONE_E164_MAX];
    const char *why = NULL;

    if (phone_normalize(in, region, out, &why) != -22 || !why) {
        print_error("%s (%s): not refused (got \"%s\")\n", in, region, out);
        fail();
    }
}

/* The six ways of the black-box probe: five are the same CN number. */
static void test_one_number_many_ways(void **state)
{
    (void)state;
    expect("13955500003", "CN", "+8613955500003");
    expect("8613955500003", "CN", "+8613955500003");
    expect("+8613955500003", "CN", "+8613955500003");
    expect("008613955500003", "CN", "+8613955500003");
    expect("013955500003", "CN", "+8613955500003");
    /* With a "+", 1 is the country code: another number. */
    expect("+13955500003", "CN", "+13955500003");
}

static void test_regions(void **state)
{
    (void)state;
    expect("2025550143", "US", "+12025550143");
    expect("12025550143", "US", "+12025550143");
    expect("07700900123", "GB", "+447700900123");
    expect("91234567", "SG", "+6591234567");
    expect("13955500003", "cn", "+8613955500003");
    /* International numbers need no region. */
    expect("+447700900123", "", "+447700900123");
    assert_true(phone_region_known("CN"));
    assert_false(phone_region_known("XX"));
}

static void test_refused(void **state)
{
    (void)state;
    refused("", "CN");
    refused("+", "CN");
    refused("+0123456789", "CN");
    refused("1395550000x", "CN");
    refused("139 5550 0003", "CN");
    refused("23955500003", "CN"); /* not a mobile number */
    refused("1395550000", "CN");  /* 10 digits */
    refused("+86123", "CN");
    refused("+1234567890123456", "CN"); /* 16 digits */
    refused("+12345", "CN");            /* 5 digits */
    refused("2025550143", "XX");        /* national, unknown region */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_number_many_ways),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
