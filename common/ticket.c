/*
 * ticket.c - waiting-room tickets (see ticket.h).
 */
#include "common/ticket.h"

#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "common/util.h"

#define VERSION 1
#define PAYLOAD_LEN (1 + 8 + 8 + 8)
#define RAW_LEN (PAYLOAD_LEN + crypto_auth_BYTES)
#define B64 sodium_base64_VARIANT_URLSAFE_NO_PADDING

_Static_assert(TICKET_KEY_LEN == crypto_auth_KEYBYTES, "key size");
_Static_assert(TICKET_STR_LEN >= sodium_base64_ENCODED_LEN(RAW_LEN, B64),
               "ticket buffer");

void ticket_sign(const unsigned char key[TICKET_KEY_LEN], int64_t user_id,
                 int64_t voucher_id, int64_t expires_ms, char *out)
{
    unsigned char raw[RAW_LEN];

    raw[0] = VERSION;
    util_put_be64(raw + 1, (uint64_t)user_id);
    util_put_be64(raw + 9, (uint64_t)voucher_id);
    util_put_be64(raw + 17, (uint64_t)expires_ms);
    crypto_auth(raw + PAYLOAD_LEN, raw, PAYLOAD_LEN, key);
    sodium_bin2base64(out, TICKET_STR_LEN, raw, RAW_LEN, B64);
}

int ticket_verify(const unsigned char key[TICKET_KEY_LEN], const char *ticket,
                  size_t len, int64_t user_id, int64_t voucher_id,
                  int64_t now_ms)
{
    unsigned char raw[RAW_LEN + 1];
    size_t n = 0;
    const char *end = NULL;

    if (len != sodium_base64_ENCODED_LEN(RAW_LEN, B64) - 1 ||
        strspn(ticket, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                       "0123456789-_") < len)
        return -EINVAL;
    if (sodium_base642bin(raw, sizeof(raw), ticket, len, NULL, &n, &end, B64) !=
            0 ||
        n != RAW_LEN || end != ticket + len)
        return -EINVAL;
    if (crypto_auth_verify(raw + PAYLOAD_LEN, raw, PAYLOAD_LEN, key) != 0)
        return -EPERM;
    if (raw[0] != VERSION)
        return -EINVAL;
    if (util_get_be64(raw + 1) != (uint64_t)user_id ||
        util_get_be64(raw + 9) != (uint64_t)voucher_id)
        return -EPERM;
    if (now_ms >= (int64_t)util_get_be64(raw + 17))
        return -ETIMEDOUT;
    return 0;
}
