/*
 * token.h - bearer tokens: a user id, a role and an expiry, signed with
 * libsodium crypto_auth (HMAC-SHA-512-256) under the service secret.
 * Verification is local: no database or Redis round trip.
 *
 * Wire format: base64url without padding of
 *   version(1) = 2 | user_id(8, big-endian) | role(1) | expires(8, BE)
 *   | gen(4, BE) | jti(8) | mac(32)
 * which is 83 characters. gen is the account's token generation when the
 * token was issued (a logout of every session raises it: older tokens are
 * refused); jti names this one token (a logout puts it on a denylist).
 * Both are checked by the sale layer's view of the sessions, not here.
 */
#ifndef SECKILL_TOKEN_H
#define SECKILL_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define TOKEN_KEY_LEN 32
/* Buffer size for a token string, NUL included. */
#define TOKEN_STR_LEN 88

enum token_role { TOKEN_ROLE_USER = 1, TOKEN_ROLE_ADMIN = 2 };

struct token_claims {
    int64_t user_id;
    enum token_role role;
    int64_t expires; /* epoch seconds */
    uint32_t gen;    /* the account's token generation at issue */
    uint64_t jti;    /* this token's id; 0 at signing: a random one */
};

/*
 * Sign claims with key into out (TOKEN_STR_LEN bytes); a jti of 0 is
 * replaced by a random non-zero one (written back to claims). Returns 0,
 * or -EINVAL for a non-positive user id or an unknown role. Thread-safe.
 */
int token_sign(const unsigned char key[TOKEN_KEY_LEN],
               struct token_claims *claims, char *out);

/*
 * Verify a token string of len bytes at time now (epoch seconds).
 * Returns 0 and fills claims, -EINVAL for a malformed token, -EPERM for a
 * bad signature (tampered, or another key), -ETIMEDOUT when expired.
 * Comparison of the MAC is constant-time. Thread-safe.
 */
int token_verify(const unsigned char key[TOKEN_KEY_LEN], const char *tok,
                 size_t len, int64_t now, struct token_claims *claims);

#endif
