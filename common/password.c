/*
 * password.c - Argon2id through libsodium (see password.h).
 */
#include "common/password.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>

_Static_assert(PASSWORD_HASH_LEN >= crypto_pwhash_STRBYTES, "hash buffer");

int password_hash(const char *password, size_t len, char out[PASSWORD_HASH_LEN])
{
    if (crypto_pwhash_str(out, password, len,
                          crypto_pwhash_OPSLIMIT_INTERACTIVE,
                          crypto_pwhash_MEMLIMIT_INTERACTIVE) != 0)
        return -ENOMEM;
    return 0;
}

bool password_verify(const char *hash, const char *password, size_t len)
{
    return crypto_pwhash_str_verify(hash, password, len) == 0;
}

static char dummy[PASSWORD_HASH_LEN];
static pthread_once_t dummy_once = PTHREAD_ONCE_INIT;

static void dummy_make(void)
{
    if (password_hash("not a password", 14, dummy) != 0)
        dummy[0] = '\0';
}

void password_dummy_verify(const char *password, size_t len)
{
    int ignored;

    pthread_once(&dummy_once, dummy_make);
    if (!dummy[0])
        return;
    /* Only the time it takes matters. */
    ignored = crypto_pwhash_str_verify(dummy, password, len);
    (void)ignored;
}
