/*
 * idgen.h - the Redis ID worker: 64-bit positive ids that are unique across
 * threads and processes and grow with time.
 *
 *   id = (now - IDGEN_EPOCH) << 32 | n
 *
 * where now is in epoch seconds and n comes from INCR icr:{prefix}:{yyyy:MM:dd}
 * on the UTC day of now; the day key expires after IDGEN_KEY_TTL_S. Ids
 * within one day differ by n, ids of different days by their timestamp.
 * JSON carries ids as decimal strings (JavaScript loses integers > 2^53).
 */
#ifndef SECKILL_IDGEN_H
#define SECKILL_IDGEN_H

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#define IDGEN_EPOCH 1640995200LL /* 2022-01-01T00:00:00Z */
#define IDGEN_SEQ_BITS 32
#define IDGEN_KEY_TTL_S (3 * 86400)

/*
 * Take the next id for prefix (a short [a-z0-9_] name such as "order") at
 * time now_s (epoch seconds, >= IDGEN_EPOCH) in one round trip (INCR and
 * EXPIRE pipelined). rc is the caller's connected context, not kept.
 * Returns 0 and stores the id, -EINVAL for a bad prefix or time,
 * -EOVERFLOW when the day's counter passed 2^32 - 1, -EIO on a Redis
 * error, -ECONNRESET when the connection failed (rc->err is then set).
 */
int idgen_next(redisContext *rc, const char *prefix, int64_t now_s,
               int64_t *id);

/* Compose an id from a time and a sequence number (pure). */
int64_t idgen_compose(int64_t now_s, uint32_t seq);

/* Split an id into its time (epoch seconds) and sequence number (pure). */
void idgen_decode(int64_t id, int64_t *epoch_s, uint32_t *seq);

/*
 * Write the counter key for prefix and the UTC day of now_s into buf
 * ("icr:order:2026:11:21"). Returns 0 or -ENAMETOOLONG if len is too small.
 */
int idgen_day_key(const char *prefix, int64_t now_s, char *buf, size_t len);

#endif
