/*
 * pow.c - ALTCHA-style proof of work (see pow.h): SHA-256 and
 * HMAC-SHA-256 from libsodium, the JSON by jansson.
 */
#include "common/pow.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SALT_MAX 64

static void sha256_hex(const char *salt, uint64_t number,
                       char out[POW_CHALLENGE_LEN])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    char num[24];
    crypto_hash_sha256_state st;

    snprintf(num, sizeof(num), "%" PRIu64, number);
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const unsigned char *)salt, strlen(salt));
    crypto_hash_sha256_update(&st, (const unsigned char *)num, strlen(num));
    crypto_hash_sha256_final(&st, h);
    sodium_bin2hex(out, POW_CHALLENGE_LEN, h, sizeof(h));
}

static void sign_hex(const unsigned char key[POW_KEY_LEN],
                     const char *challenge, char out[POW_CHALLENGE_LEN])
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, key, POW_KEY_LEN);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)challenge,
                                  strlen(challenge));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_bin2hex(out, POW_CHALLENGE_LEN, mac, sizeof(mac));
}

char *pow_challenge(const unsigned char key[POW_KEY_LEN], uint32_t maxnumber,
                    unsigned ttl_s, int64_t now_s)
{
    unsigned char rnd[12];
    char salt[SALT_MAX], hex[25], challenge[POW_CHALLENGE_LEN],
        signature[POW_CHALLENGE_LEN];
    uint32_t number;
    json_t *o;
    char *text;

    randombytes_buf(rnd, sizeof(rnd));
    sodium_bin2hex(hex, sizeof(hex), rnd, sizeof(rnd));
    snprintf(salt, sizeof(salt), "%s?expires=%lld&max=%lu&", hex,
             (long long)(now_s + ttl_s), (unsigned long)maxnumber);
    number = maxnumber == UINT32_MAX ? randombytes_random()
                                     : randombytes_uniform(maxnumber + 1);
    sha256_hex(salt, number, challenge);
    sign_hex(key, challenge, signature);
    o = json_pack("{s:s,s:s,s:I,s:s,s:s}", "algorithm", "SHA-256", "challenge",
                  challenge, "maxnumber", (json_int_t)maxnumber, "salt", salt,
                  "signature", signature);
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

/* The number after name= at p (at most 12 digits, then '&'): its value,
 * p moved past the '&'; -1 if none. */
static int64_t salt_param(const char **p, const char *name)
{
    size_t len = strlen(name);
    int64_t v = 0;
    int n = 0;
    const char *q = *p;

    if (strncmp(q, name, len) != 0 || q[len] != '=')
        return -1;
    for (q += len + 1; *q >= '0' && *q <= '9' && n < 12; q++, n++)
        v = v * 10 + (*q - '0');
    if (n == 0 || *q != '&')
        return -1;
    *p = q + 1;
    return v;
}

/* The expiry and the maxnumber a salt carries ("...?expires=N&max=M&";
 * an older one without max= has max_default); -1 if it has none in that
 * form. */
static int64_t salt_expiry(const char *salt, uint32_t max_default,
                           uint32_t *max)
{
    const char *p = strstr(salt, "?expires=");
    int64_t v, m;

    if (!p || strlen(salt) >= SALT_MAX)
        return -1;
    p++;
    v = salt_param(&p, "expires");
    if (v < 0)
        return -1;
    *max = max_default;
    if (*p) {
        m = salt_param(&p, "max");
        if (m < 0 || m > UINT32_MAX || *p)
            return -1;
        *max = (uint32_t)m;
    }
    return v;
}

static bool is_hex64(const char *s)
{
    return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* base64, standard or URL-safe, padded or not, into a NUL-terminated
 * buffer; its length, or -1. */
static long b64_decode(const char *in, size_t len, char *out, size_t cap)
{
    static const int variants[] = {sodium_base64_VARIANT_ORIGINAL,
                                   sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
                                   sodium_base64_VARIANT_URLSAFE,
                                   sodium_base64_VARIANT_URLSAFE_NO_PADDING};

    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        size_t n = 0;
        const char *end = NULL;

        if (sodium_base642bin((unsigned char *)out, cap - 1, in, len, NULL, &n,
                              &end, variants[i]) == 0 &&
            end == in + len) {
            out[n] = '\0';
            return (long)n;
        }
    }
    return -1;
}

int pow_verify(const unsigned char key[POW_KEY_LEN], const char *solution,
               size_t len, uint32_t maxnumber, unsigned ttl_max_s,
               int64_t now_s, char challenge[POW_CHALLENGE_LEN],
               int64_t *expires_s, uint32_t *issued_max)
{
    char raw[POW_SOLUTION_MAX], want[POW_CHALLENGE_LEN], sig[POW_CHALLENGE_LEN];
    const char *alg, *ch, *salt, *signature;
    json_int_t number;
    json_t *o;
    long n;
    int err = -EINVAL;

    if (len == 0 || len >= POW_SOLUTION_MAX)
        return -EINVAL;
    n = b64_decode(solution, len, raw, sizeof(raw));
    if (n <= 0 || strlen(raw) != (size_t)n)
        return -EINVAL;
    o = json_loads(raw, JSON_REJECT_DUPLICATES, NULL);
    if (!o || !json_is_object(o) ||
        json_unpack(o, "{s:s,s:s,s:I,s:s,s:s}", "algorithm", &alg, "challenge",
                    &ch, "number", &number, "salt", &salt, "signature",
                    &signature) != 0)
        goto out;
    if (strcmp(alg, "SHA-256") != 0 || number < 0 ||
        (uint64_t)number > maxnumber || !is_hex64(ch) || !is_hex64(signature))
        goto out;
    *expires_s = salt_expiry(salt, maxnumber, issued_max);
    if (*expires_s < 0 || (uint64_t)number > *issued_max)
        goto out;
    err = -ETIMEDOUT;
    if (*expires_s <= now_s || *expires_s > now_s + ttl_max_s)
        goto out;
    err = -EPERM;
    sha256_hex(salt, (uint64_t)number, want);
    sign_hex(key, ch, sig);
    if (sodium_memcmp(want, ch, 64) != 0 ||
        sodium_memcmp(sig, signature, 64) != 0)
        goto out;
    memcpy(challenge, ch, POW_CHALLENGE_LEN);
    err = 0;
out:
    json_decref(o);
    return err;
}

int pow_solve(const char *challenge_json, char **out)
{
    const char *alg, *ch, *salt, *signature;
    char got[POW_CHALLENGE_LEN];
    json_int_t maxnumber;
    json_t *o = json_loads(challenge_json, 0, NULL), *sol;
    int err = -EINVAL;

    *out = NULL;
    if (!o ||
        json_unpack(o, "{s:s,s:s,s:I,s:s,s:s}", "algorithm", &alg, "challenge",
                    &ch, "maxnumber", &maxnumber, "salt", &salt, "signature",
                    &signature) != 0 ||
        strcmp(alg, "SHA-256") != 0 || maxnumber < 0 || !is_hex64(ch))
        goto done;
    err = -ENOENT;
    for (json_int_t i = 0; i <= maxnumber; i++) {
        sha256_hex(salt, (uint64_t)i, got);
        if (memcmp(got, ch, 64) != 0)
            continue;
        sol = json_pack("{s:s,s:s,s:I,s:s,s:s}", "algorithm", alg, "challenge",
                        ch, "number", i, "salt", salt, "signature", signature);
        char *text = json_dumps(sol, JSON_COMPACT);
        size_t tl = strlen(text), cap = sodium_base64_ENCODED_LEN(
                                      tl, sodium_base64_VARIANT_ORIGINAL);

        *out = malloc(cap);
        if (*out)
            sodium_bin2base64(*out, cap, (const unsigned char *)text, tl,
                              sodium_base64_VARIANT_ORIGINAL);
        free(text);
        json_decref(sol);
        err = *out ? 0 : -ENOMEM;
        break;
    }
done:
    json_decref(o);
    return err;
}
