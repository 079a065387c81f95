/*
 * password.h - admins' passwords: Argon2id hashes in libsodium's string
 * form (crypto_pwhash_str: algorithm, parameters, salt and hash in one
 * string), at the "interactive" limits (64 MiB, about 0.1 s a check).
 */
#ifndef SECKILL_PASSWORD_H
#define SECKILL_PASSWORD_H

#include <stdbool.h>
#include <stddef.h>

/* Room for a hash string, NUL included. */
#define PASSWORD_HASH_LEN 128

/* Hash password (len bytes) into out. 0, or -ENOMEM (the memory limit). */
int password_hash(const char *password, size_t len,
                  char out[PASSWORD_HASH_LEN]);

/* True when password matches hash (constant time in the password). */
bool password_verify(const char *hash, const char *password, size_t len);

/* The same work as a verification that fails, for a name that has no
 * hash: a wrong name costs what a wrong password costs. */
void password_dummy_verify(const char *password, size_t len);

#endif
