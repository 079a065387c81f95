/*
 * fuzz_token.c - libFuzzer harness: bearer tokens (common/token.h).
 *
 * Input: one selector byte, then the rest. Selector even: verify. The rest
 * is a token string, verified under fuzz_key at a fixed time
 * (FUZZ_TOKEN_NOW, 2027-01-15). It may only verify if signing its claims
 * again under the key gives back exactly the same string (no second
 * spelling of a token, no forgery); it never verifies under another key;
 * the result is one of the documented errors.
 *
 * Selector odd: round trip. The rest gives a key (32 bytes), claims
 * (user id 8, role 1, expiry 8, big-endian), a time (8) and an edit (2:
 * position and byte), zero-filled when short. Signing refuses exactly the
 * invalid claims; a signed token is 83 base64url characters and verifies
 * to the same claims before its expiry, -ETIMEDOUT from it on, -EPERM
 * under another key, and never after the edit changed a character.
 *
 *     make fuzz
 *     build/fuzz/fuzz_token -max_len=256 DIR
 *
 * Seeds: tests/fuzz/corpus/token/ ('0' + tokens signed under fuzz_key that
 * expire in 2100, one expired, some broken; '1' + round-trip inputs).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

#include "common/util.h"
#include "tests/fuzz/fuzz.h"

#define FUZZ_TOKEN_NOW 1800000000LL
#define TOKEN_CHARS 83

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_driver_init();
    return 0;
}

static bool claims_equal(const struct token_claims *a,
                         const struct token_claims *b)
{
    return a->user_id == b->user_id && a->role == b->role &&
           a->expires == b->expires && a->gen == b->gen && a->jti == b->jti;
}

static void verify_string(const uint8_t *data, size_t size)
{
    static const unsigned char wrong_key[TOKEN_KEY_LEN] = {0x5e, 0xc4};
    struct token_claims c = {0}, c2 = {0};
    char again[TOKEN_STR_LEN];
    /* Exactly the token's bytes, so ASan sees any over-read. */
    char *tok = xmalloc(size ? size : 1);
    int err;

    memcpy(tok, data, size);
    err = token_verify(fuzz_key, tok, size, FUZZ_TOKEN_NOW, &c);
    FUZZ_CHECK(err == 0 || err == -EINVAL || err == -EPERM || err == -ETIMEDOUT,
               "token_verify returned %d", err);
    if (err == 0) {
        FUZZ_CHECK(
            c.user_id > 0 &&
                (c.role == TOKEN_ROLE_USER || c.role == TOKEN_ROLE_ADMIN) &&
                c.expires > FUZZ_TOKEN_NOW,
            "verified claims out of range");
        FUZZ_CHECK(token_sign(fuzz_key, &c, again) == 0, "re-sign");
        FUZZ_CHECK(size == strlen(again) && memcmp(again, tok, size) == 0,
                   "a second spelling of a token verified: %.*s",
                   (int)(size > 80 ? 80 : size), tok);
    }
    FUZZ_CHECK(token_verify(wrong_key, tok, size, FUZZ_TOKEN_NOW, &c2) != 0,
               "a token verified under the wrong key");
    free(tok);
}

static uint64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static bool base64url(const char *s)
{
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789-_") == strlen(s);
}

static void round_trip(const uint8_t *data, size_t size)
{
    uint8_t in[TOKEN_KEY_LEN + 8 + 1 + 8 + 8 + 2 + 4 + 8] = {0};
    unsigned char key[TOKEN_KEY_LEN], other[TOKEN_KEY_LEN];
    struct token_claims c = {0}, got;
    char tok[TOKEN_STR_LEN];
    const uint8_t *p = in;
    int err;

    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    memcpy(key, p, TOKEN_KEY_LEN);
    p += TOKEN_KEY_LEN;
    c.user_id = (int64_t)be64(p);
    p += 8;
    c.role = (enum token_role) * p++;
    c.expires = (int64_t)be64(p);
    p += 8;
    int64_t now = (int64_t)be64(p);
    p += 8;
    size_t pos = p[0] % TOKEN_CHARS;
    char edit = (char)p[1];
    p += 2;
    c.gen = (uint32_t)(be64(p) >> 32);
    p += 4;
    c.jti = be64(p); /* 0: token_sign draws one */

    memset(tok, 0x7f, sizeof(tok));
    err = token_sign(key, &c, tok);
    if (c.user_id <= 0 ||
        (c.role != TOKEN_ROLE_USER && c.role != TOKEN_ROLE_ADMIN)) {
        FUZZ_CHECK(err == -EINVAL, "token_sign accepted bad claims");
        return;
    }
    FUZZ_CHECK(err == 0, "token_sign refused good claims: %d", err);
    FUZZ_CHECK(strlen(tok) == TOKEN_CHARS && base64url(tok),
               "a token that is not 83 base64url characters: %s", tok);

    memset(&got, 0, sizeof(got));
    err = token_verify(key, tok, TOKEN_CHARS, now, &got);
    if (now < c.expires)
        FUZZ_CHECK(err == 0 && claims_equal(&c, &got),
                   "sign then verify lost the claims (%d)", err);
    else
        FUZZ_CHECK(err == -ETIMEDOUT, "an expired token gave %d", err);

    memcpy(other, key, sizeof(other));
    other[pos % TOKEN_KEY_LEN] ^= (unsigned char)(edit | 1);
    FUZZ_CHECK(token_verify(other, tok, TOKEN_CHARS, now, &got) == -EPERM,
               "a token verified under another key");

    if (tok[pos] != edit) {
        tok[pos] = edit;
        err = token_verify(key, tok, TOKEN_CHARS, now, &got);
        FUZZ_CHECK(err != 0, "an edited token still verified (char %zu)", pos);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        verify_string(data + 1, size - 1);
    else
        round_trip(data + 1, size - 1);
    return 0;
}
