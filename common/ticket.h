/*
 * ticket.h - a waiting room's purchase ticket: a buyer may buy a voucher
 * until an expiry, signed with crypto_auth (HMAC-SHA-512-256) under a key
 * of its own (derived from the service's secret, so a ticket is never a
 * token). Checked from memory on any instance.
 *
 * Wire format: base64url without padding of
 *   version(1) = 1 | user_id(8, BE) | voucher_id(8, BE) | expires_ms(8, BE)
 *   | mac(32)
 * which is 76 characters.
 */
#ifndef SECKILL_TICKET_H
#define SECKILL_TICKET_H

#include <stddef.h>
#include <stdint.h>

#define TICKET_KEY_LEN 32
/* Buffer size for a ticket string, NUL included. */
#define TICKET_STR_LEN 80

/* Sign a ticket for user_id to buy voucher_id until expires_ms (epoch
 * ms) into out. */
void ticket_sign(const unsigned char key[TICKET_KEY_LEN], int64_t user_id,
                 int64_t voucher_id, int64_t expires_ms, char *out);

/*
 * Check ticket (len bytes) for user_id and voucher_id at now_ms: 0;
 * -EINVAL malformed, -EPERM a bad signature or another user's or
 * voucher's, -ETIMEDOUT expired. The MAC is compared in constant time.
 */
int ticket_verify(const unsigned char key[TICKET_KEY_LEN], const char *ticket,
                  size_t len, int64_t user_id, int64_t voucher_id,
                  int64_t now_ms);

#endif
