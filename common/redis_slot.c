/*
 * redis_slot.c - Redis Cluster's key-to-slot function (redis_slot.h).
 * Bitwise CRC16/XMODEM: slots are computed per command, not per byte of
 * traffic, so a table buys nothing worth its 512 bytes here.
 */
#include "common/redis_slot.h"

#include <string.h>

uint16_t redis_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                                 : (uint16_t)(crc << 1);
    }
    return crc;
}

size_t redis_key_hashed(const char *key, size_t len, size_t *off)
{
    const char *open = memchr(key, '{', len);

    *off = 0;
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);

        /* "{}" is no tag: the whole key is hashed. */
        if (close && close > open + 1) {
            *off = from;
            return (size_t)(close - open - 1);
        }
    }
    return len;
}

unsigned redis_key_slot(const char *key, size_t len)
{
    size_t off, n = redis_key_hashed(key, len, &off);

    return redis_crc16(key + off, n) & (REDIS_SLOTS - 1);
}

unsigned redis_key_slot_str(const char *key)
{
    return redis_key_slot(key, strlen(key));
}
