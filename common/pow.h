/*
 * pow.h - proof of work in ALTCHA's format (version 1): a challenge is
 *   {"algorithm":"SHA-256","challenge":HEX,"maxnumber":N,"salt":S,
 *    "signature":HEX}
 * where challenge = SHA-256(salt + decimal(number)) for a secret number
 * in 0..maxnumber, and signature = HMAC-SHA-256(key, challenge), so the
 * server keeps nothing until a solution comes back. A client finds the
 * number by trying them all (maxnumber / 2 hashes on average) and sends
 * base64 of {"algorithm","challenge","number","salt","signature"}.
 *
 * The salt is "<24 hex digits>?expires=<epoch s>&": the expiry is under
 * the hash and the signature, and the final '&' ends it, so that no digit
 * of the number can be moved into it. A solution is good once: the
 * caller records its challenge until it expires (store_pow_spend()).
 */
#ifndef SECKILL_POW_H
#define SECKILL_POW_H

#include <stddef.h>
#include <stdint.h>

#define POW_KEY_LEN 32
/* A challenge's hex text, NUL included. */
#define POW_CHALLENGE_LEN 65
/* The longest solution header accepted. */
#define POW_SOLUTION_MAX 1024

/* A new challenge, as a JSON object text of its own (free(3) it). */
char *pow_challenge(const unsigned char key[POW_KEY_LEN], uint32_t maxnumber,
                    unsigned ttl_s, int64_t now_s);

/*
 * Check a solution (the header's len bytes) at now_s: 0 with its
 * challenge (hex), its expiry (epoch s) and the maxnumber it was issued
 * with (its salt carries both, under the signature: "?expires=N&max=M&");
 * -EINVAL when it is not one
 * (not base64 of a JSON object with the five fields, another algorithm,
 * a number above maxnumber, a salt without a good expiry), -ETIMEDOUT
 * when expired or expiring further off than ttl_max_s, -EPERM when the
 * hash or the signature does not match. Constant time where it matters.
 */
int pow_verify(const unsigned char key[POW_KEY_LEN], const char *solution,
               size_t len, uint32_t maxnumber, unsigned ttl_max_s,
               int64_t now_s, char challenge[POW_CHALLENGE_LEN],
               int64_t *expires_s, uint32_t *issued_max);

/*
 * Solve a challenge (its JSON text): the solution's header value into
 * *out (free(3) it). 0, or -EINVAL for a text that is not a challenge,
 * -ENOENT when no number up to its maxnumber matches.
 */
int pow_solve(const char *challenge_json, char **out);

#endif
