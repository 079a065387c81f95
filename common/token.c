/*
 * token.c - signing and verifying bearer tokens with crypto_auth.
 */
#include "common/token.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sodium.h>

#include "common/util.h"

#define TOKEN_VERSION 2
#define PAYLOAD_LEN (1 + 8 + 1 + 8 + 4 + 8)
#define RAW_LEN (PAYLOAD_LEN + crypto_auth_BYTES)
#define B64_VARIANT sodium_base64_VARIANT_URLSAFE_NO_PADDING

_Static_assert(TOKEN_KEY_LEN == crypto_auth_KEYBYTES, "key size");
_Static_assert(TOKEN_STR_LEN >= sodium_base64_ENCODED_LEN(RAW_LEN, B64_VARIANT),
               "token buffer");

/*
 * Only base64url characters: libsodium 1.0.18 decodes every byte from 0x80
 * up as '_' (a negative char passes its constant-time compares), which
 * would give a token up to 129 spellings per '_', all verifying.
 */
static bool b64url_only(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_'))
            return false;
    }
    return true;
}

int token_sign(const unsigned char key[TOKEN_KEY_LEN],
               struct token_claims *claims, char *out)
{
    unsigned char raw[RAW_LEN];

    if (claims->user_id <= 0 ||
        (claims->role != TOKEN_ROLE_USER && claims->role != TOKEN_ROLE_ADMIN))
        return -EINVAL;
    raw[0] = TOKEN_VERSION;
    util_put_be64(raw + 1, (uint64_t)claims->user_id);
    raw[9] = (unsigned char)claims->role;
    util_put_be64(raw + 10, (uint64_t)claims->expires);
    util_put_be32(raw + 18, claims->gen);
    while (!claims->jti)
        randombytes_buf(&claims->jti, sizeof(claims->jti));
    util_put_be64(raw + 22, claims->jti);
    crypto_auth(raw + PAYLOAD_LEN, raw, PAYLOAD_LEN, key);
    sodium_bin2base64(out, TOKEN_STR_LEN, raw, RAW_LEN, B64_VARIANT);
    return 0;
}

int token_verify(const unsigned char key[TOKEN_KEY_LEN], const char *tok,
                 size_t len, int64_t now, struct token_claims *claims)
{
    unsigned char raw[RAW_LEN + 1];
    size_t rawlen = 0;
    const char *end = NULL;

    if (len != sodium_base64_ENCODED_LEN(RAW_LEN, B64_VARIANT) - 1 ||
        !b64url_only(tok, len))
        return -EINVAL;
    if (sodium_base642bin(raw, sizeof(raw), tok, len, NULL, &rawlen, &end,
                          B64_VARIANT) != 0 ||
        rawlen != RAW_LEN || end != tok + len)
        return -EINVAL;
    /* Check the MAC before looking at anything the payload claims. */
    if (crypto_auth_verify(raw + PAYLOAD_LEN, raw, PAYLOAD_LEN, key) != 0)
        return -EPERM;
    if (raw[0] != TOKEN_VERSION)
        return -EINVAL;
    uint64_t uid = util_get_be64(raw + 1);
    int64_t exp = (int64_t)util_get_be64(raw + 10);
    if (uid == 0 || uid > INT64_MAX || util_get_be64(raw + 22) == 0 ||
        (raw[9] != TOKEN_ROLE_USER && raw[9] != TOKEN_ROLE_ADMIN))
        return -EINVAL;
    if (now >= exp)
        return -ETIMEDOUT;
    claims->user_id = (int64_t)uid;
    claims->role = (enum token_role)raw[9];
    claims->expires = exp;
    claims->gen = util_get_be32(raw + 18);
    claims->jti = util_get_be64(raw + 22);
    return 0;
}
