/*
 * test_pow.c - proof of work (common/pow.h): a known answer computed
 * elsewhere (Python's hashlib and hmac), the round trip, and every way a
 * solution must be refused: another key, an expired or too distant
 * expiry, a number above maxnumber, each field altered, the expiry
 * spliced with the number, not base64, not JSON.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>
#include <sodium.h>

#include "common/pow.h"

#define NOW 1900000000LL

static unsigned char key[POW_KEY_LEN], other[POW_KEY_LEN];

static int setup(void **state)
{
    (void)state;
    if (sodium_init() < 0)
        return -1;
    memset(key, 0x11, sizeof(key));
    memset(other, 0x22, sizeof(other));
    return 0;
}

/* base64 of a JSON text. */
static char *b64(const char *text)
{
    size_t n = strlen(text),
           cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(cap);

    sodium_bin2base64(out, cap, (const unsigned char *)text, n,
                      sodium_base64_VARIANT_ORIGINAL);
    return out;
}

static int verify(const char *sol, int64_t now, uint32_t maxnumber)
{
    char ch[POW_CHALLENGE_LEN];
    int64_t exp;
    uint32_t max;

    return pow_verify(key, sol, strlen(sol), maxnumber, 3600 * 24 * 365 * 10,
                      now, ch, &exp, &max);
}

#define KAT_SALT "0123456789abcdef01234567?expires=2000000000&"
#define KAT_CHALLENGE                                                          \
    "e00a7b6b13dfe6959bde7922f809a4f52524f3917d928f9395fd56790668ce11"
#define KAT_SIGNATURE                                                          \
    "49e8f80d10eaf7e54bbcc929e0f42cb1d48584b0077077a665bd640619fa39a9"

static void test_known_answer(void **state)
{
    const char *chal =
        "{\"algorithm\":\"SHA-256\",\"challenge\":\"" KAT_CHALLENGE
        "\",\"maxnumber\":100,\"salt\":\"" KAT_SALT
        "\",\"signature\":\"" KAT_SIGNATURE "\"}";
    char *sol = NULL, *raw;
    json_t *o;
    size_t n;

    (void)state;
    assert_int_equal(0, pow_solve(chal, &sol));
    raw = calloc(1, strlen(sol));
    assert_int_equal(0, sodium_base642bin((unsigned char *)raw, strlen(sol),
                                          sol, strlen(sol), NULL, &n, NULL,
                                          sodium_base64_VARIANT_ORIGINAL));
    o = json_loadb(raw, n, 0, NULL);
    assert_non_null(o);
    assert_int_equal(42, json_integer_value(json_object_get(o, "number")));
    json_decref(o);
    free(raw);
    assert_int_equal(0, verify(sol, NOW, 100));
    /* The number must be within maxnumber. */
    assert_int_equal(-EINVAL, verify(sol, NOW, 41));
    free(sol);
}

static void test_round_trip(void **state)
{
    char *chal = pow_challenge(key, 1000, 300, NOW), *sol = NULL;
    char ch[POW_CHALLENGE_LEN];
    int64_t exp = 0;
    uint32_t max = 0;

    (void)state;
    assert_non_null(chal);
    assert_int_equal(0, pow_solve(chal, &sol));
    assert_int_equal(
        0, pow_verify(key, sol, strlen(sol), 1000, 300, NOW, ch, &exp, &max));
    assert_int_equal(NOW + 300, exp);
    assert_int_equal(1000, max);
    assert_non_null(strstr(chal, ch));
    /* Another key; later than its expiry; an expiry further off than the
     * server gives. */
    assert_int_equal(-EPERM, pow_verify(other, sol, strlen(sol), 1000, 300, NOW,
                                        ch, &exp, &max));
    assert_int_equal(-ETIMEDOUT, pow_verify(key, sol, strlen(sol), 1000, 300,
                                            NOW + 300, ch, &exp, &max));
    assert_int_equal(-ETIMEDOUT, pow_verify(key, sol, strlen(sol), 1000, 100,
                                            NOW, ch, &exp, &max));
    /* Issued harder than the setting (up to the cap asked for): its own
     * maxnumber comes back. */
    free(chal);
    free(sol);
    chal = pow_challenge(key, 5000, 300, NOW);
    assert_int_equal(0, pow_solve(chal, &sol));
    assert_int_equal(
        0, pow_verify(key, sol, strlen(sol), 10000, 300, NOW, ch, &exp, &max));
    assert_int_equal(5000, max);
    free(chal);
    free(sol);
}

/* A solution with one field replaced by v (a JSON value's text). */
static char *altered(const char *field, const char *v)
{
    char buf[512];
    json_t *o;
    char *text, *out;

    snprintf(buf, sizeof(buf),
             "{\"algorithm\":\"SHA-256\",\"challenge\":\"" KAT_CHALLENGE
             "\",\"number\":42,\"salt\":\"" KAT_SALT
             "\",\"signature\":\"" KAT_SIGNATURE "\"}");
    o = json_loads(buf, 0, NULL);
    json_object_set_new(o, field, json_loads(v, JSON_DECODE_ANY, NULL));
    text = json_dumps(o, JSON_COMPACT);
    out = b64(text);
    free(text);
    json_decref(o);
    return out;
}

static void test_refused(void **state)
{
    static const struct {
        const char *field, *value;
        int err;
    } cases[] = {
        {"algorithm", "\"SHA-512\"", -EINVAL},
        {"algorithm", "1", -EINVAL},
        {"number", "43", -EPERM},
        {"number", "-1", -EINVAL},
        {"number", "\"42\"", -EINVAL},
        {"challenge", "\"" KAT_SIGNATURE "\"", -EPERM},
        {"challenge", "\"E00A\"", -EINVAL},
        {"signature", "\"" KAT_CHALLENGE "\"", -EPERM},
        {"salt", "\"0123456789abcdef01234567?expires=2000000001&\"", -EPERM},
        /* The number's first digit moved into the expiry: no '&' end. */
        {"salt", "\"0123456789abcdef01234567?expires=20000000004\"", -EINVAL},
        {"salt", "\"0123456789abcdef01234567\"", -EINVAL},
    };
    char *good = altered("number", "42");

    (void)state;
    assert_int_equal(0, verify(good, NOW, 100));
    free(good);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *sol = altered(cases[i].field, cases[i].value);
        int err = verify(sol, NOW, 100);

        if (err != cases[i].err)
            fail_msg("%s = %s: %d, expected %d", cases[i].field, cases[i].value,
                     err, cases[i].err);
        free(sol);
    }
    assert_int_equal(-EINVAL, verify("not base64 !", NOW, 100));
    {
        char *nj = b64("not json");
        assert_int_equal(-EINVAL, verify(nj, NOW, 100));
        free(nj);
        nj = b64("[1,2]");
        assert_int_equal(-EINVAL, verify(nj, NOW, 100));
        free(nj);
    }
    assert_int_equal(-EINVAL, verify("", NOW, 100));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answer),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
