/*
 * i64map.h - a hash map from non-zero 64-bit keys to 64-bit values, with
 * open addressing (linear probing, backward-shift deletion) in one array
 * that doubles when it is more than half full. Not thread-safe: its owner
 * locks.
 */
#ifndef SECKILL_I64MAP_H
#define SECKILL_I64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct i64map {
    uint64_t *keys; /* 0: a free slot */
    uint64_t *vals;
    size_t cap; /* a power of two, or 0 before the first put */
    size_t len;
};

/* An empty map needs no set-up: struct i64map m = {0}. */

/* Set key (non-zero) to val. */
void i64map_put(struct i64map *m, uint64_t key, uint64_t val);

/* True and *val (may be NULL) when key is in m. */
bool i64map_get(const struct i64map *m, uint64_t key, uint64_t *val);

/* Remove key; true when it was there. */
bool i64map_del(struct i64map *m, uint64_t key);

/* Remove every entry for which keep(ctx, key, val) is false. */
void i64map_filter(struct i64map *m,
                   bool (*keep)(void *ctx, uint64_t key, uint64_t val),
                   void *ctx);

/* Free the arrays; m is empty again. */
void i64map_clear(struct i64map *m);

#endif
