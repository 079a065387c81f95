/*
 * redis_slot.h - which of Redis Cluster's 16,384 hash slots a key is in
 * (the cluster specification's HASH_SLOT: CRC16/XMODEM of the key, or of
 * its hash tag, modulo 16384).
 *
 * A hash tag is the part between the first '{' and the next '}' after it,
 * when that part is not empty: "{v:7}:stock" and "{v:7}:buyers" share a
 * slot, so one script may take both. Keys without a tag are hashed whole.
 */
#ifndef SECKILL_REDIS_SLOT_H
#define SECKILL_REDIS_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define REDIS_SLOTS 16384

/* CRC16/XMODEM (polynomial 0x1021, initial 0) of len bytes. */
uint16_t redis_crc16(const char *buf, size_t len);

/*
 * The part of a key of len bytes that decides its slot: its hash tag, or
 * the whole key. Returns its length and sets *off to where it starts.
 */
size_t redis_key_hashed(const char *key, size_t len, size_t *off);

/* The slot of a key of len bytes. */
unsigned redis_key_slot(const char *key, size_t len);

/* The slot of a NUL-terminated key. */
unsigned redis_key_slot_str(const char *key);

#endif
