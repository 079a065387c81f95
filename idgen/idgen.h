/*
 * idgen.h - the Redis ID worker: 64-bit positive ids that are unique across
 * threads and processes, also across a Redis restart that loses the
 * counters, and that grow with time.
 *
 *   id = (t - IDGEN_EPOCH) << 32 | n
 *
 * t is a second of the Redis server's clock (TIME), n a value of the
 * counter icr:{<prefix>}:<yyyy:MM:dd> of the UTC day of t; the day key
 * expires after IDGEN_KEY_TTL_S. One Lua script picks t and reserves a
 * block of counter values with INCRBY atomically, and keeps a small hash
 * icr:{<prefix>}:clock (no TTL) with the run_id of the Redis process that
 * hands out ids, the last t used and the second that process started
 * handing out ids. The {<prefix>} hash tag keeps a prefix's keys in one
 * Redis Cluster slot; every name starts with the service's Redis prefix
 * (common/redis_keys.h).
 *
 * Before the hash tag the day counters were icr:<prefix>:<yyyy:MM:dd>. On
 * one server (not a cluster: idgen_legacy_keys()) the script also counts
 * on those, in the same call, and hands out the larger of the two values,
 * leaving both counters there: so an older instance still running beside
 * this one (a rolling upgrade) never gets a value this one got, nor the
 * other way round, and the first block after the upgrade is above every
 * value handed out before it. A renamed clock hash reads as a new server:
 * ids pause until the next second, which is harmless.
 *
 *   - t never goes backwards for one Redis data set: if the server's clock
 *     steps back, t stays at the last second used until the clock catches
 *     up (n keeps counting, so ids stay unique);
 *   - when the run_id differs from the stored one, or the hash is missing
 *     (a restart with or without persistence, FLUSHALL, a failover to a
 *     replica), the counters may have lost increments. The script records
 *     the new run_id and that second, and reserves nothing until the
 *     server clock has moved past it: every block reserved after the loss
 *     has a t strictly greater than every block reserved before it, so a
 *     restarted counter cannot repeat a (t, n) pair. idgen_next() sleeps
 *     through that wait (under a second).
 *
 * Blocks. Each process keeps one block per prefix, shared by its threads:
 * the values n..m of t's day that one script call reserved, handed out
 * from memory in order, each id (t, n) with the t of the reservation.
 * Why this stays unique: while the counter is not lost, INCRBY gives
 * every reservation of a day key values no other reservation has, and
 * ids with equal t use the same day key; values reserved before a loss
 * all carry a t below every t reserved after it (above). A block held
 * across a loss therefore still hands out ids nobody else gets.
 * A block is dropped, its unused values wasted, when it is
 * IDGEN_BLOCK_MAX_AGE_MS old, when our guess of the server's day is no
 * longer t's day, and by idgen_discard(). Hence the ordering promises:
 * ids from one process increase; ids of different processes are ordered
 * by time up to IDGEN_BLOCK_MAX_AGE_MS plus the one-second grain of t;
 * and every id taken more than IDGEN_BLOCK_MAX_AGE_MS after a loss of
 * the counter is greater than every id taken before it. Block sizes adapt
 * between IDGEN_BLOCK_MIN and IDGEN_BLOCK_MAX: doubled when a block is
 * used up while young, cut to the number used when it ages out, so at
 * low rates a purchase costs one round trip as before and at high rates
 * about one in a thousand does; the waste is bounded by what was used.
 *
 * Using the server's clock means the service instances' clocks (skewed,
 * stepped, or faked with faketime) never enter an id. What is not
 * guaranteed (docs/reliability.md): a Redis that loses keys while it keeps
 * running (eviction of a day key, a DEL by hand), two masters accepting
 * INCRBYs at once (split brain), a new master whose clock is behind the
 * old one's by more than the wait, or a server clock stepped back across a
 * restart. The orders' PRIMARY KEY refuses a repeated id and the purchase
 * retries with a fresh one (after idgen_discard()): the last line of
 * defence.
 *
 * JSON carries ids as decimal strings (JavaScript loses integers > 2^53).
 *
 * Sharded ids. When sales are spread over several MySQL primaries
 * (SECKILL_MYSQL_SHARDS with more than one URL), voucher and order ids
 * name their shard, so a request goes to one shard without a lookup:
 *
 *   bit  63     0 (ids are positive int64)
 *   bit  62     1: the sharded layout (IDGEN_SHARDED_BIT)
 *   bits 32..61 t - IDGEN_EPOCH, as above (30 bits: until 2056-01-10)
 *   bits 6..31  n, the day's counter, as above (26 bits: at most
 *               IDGEN_SHARDED_SEQ_MAX ids a UTC day for one prefix)
 *   bits 0..5   the shard, 0..63 (IDGEN_SHARD_BITS)
 *
 * A sharded id is the worker's id (t, n) with n moved up six bits, the
 * shard put under it and the marker set (idgen_shard_compose()). So:
 *   - ids that predate sharding decode as shard 0 (idgen_shard_of()):
 *     a voucher's AUTO_INCREMENT id is far below 2^62, and a worker id
 *     reaches bit 62 only with t - IDGEN_EPOCH >= 2^30, in 2056; an
 *     older deployment that turns sharding on before then has every old
 *     id below the marker. Those vouchers and their orders stay on
 *     shard 0;
 *   - every sharded id is above every id made before it without the
 *     marker, so ids keep growing with time across the switch;
 *   - sharded ids are unique: (t, n) is unique per prefix as above, and
 *     the shard only adds bits;
 *   - the shard sits below the time and the counter, so sharded ids of
 *     all shards still sort by time (to the second, as above): a list
 *     merged from several shards by id is in time order, and one id
 *     cursor pages through all of them.
 * With one shard nothing changes: the worker's ids are used as they are.
 */
#ifndef SECKILL_IDGEN_H
#define SECKILL_IDGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#define IDGEN_EPOCH 1640995200LL /* 2022-01-01T00:00:00Z */
#define IDGEN_SEQ_BITS 32
#define IDGEN_KEY_TTL_S (3 * 86400)
/* Longest waited for the server clock after a loss before giving up. */
#define IDGEN_WAIT_MAX_MS 2500
/* The script is given the day keys of this many days around a guess of
 * the server's day (the day before, the day, the day after). */
#define IDGEN_WINDOW 3
#define IDGEN_KEY_MAX 96
/* A prefix is 1..IDGEN_PREFIX_MAX characters of [a-z0-9_]. */
#define IDGEN_PREFIX_MAX 32
/* Reservation sizes, and the age at which a block is dropped. */
#define IDGEN_BLOCK_MIN 1
#define IDGEN_BLOCK_MAX 1024
#define IDGEN_BLOCK_MAX_AGE_MS 200
/* Prefixes with a block per process; more reserve one value per id. */
#define IDGEN_BLOCKS_MAX 16

/*
 * Take the next id for prefix (a short [a-z0-9_] name such as "order").
 * Usually from the process's block in memory, without I/O; otherwise one
 * round trip (EVALSHA) on l reserves a new block (on a cluster at the
 * owner of the {<prefix>} slot), during which the process's other callers
 * for prefix wait; after a Redis restart it sleeps until the server's
 * clock has passed the restart second (at most IDGEN_WAIT_MAX_MS). l is
 * the caller's connection or cluster client (common/redis_link.h), not
 * kept. Thread-safe (each thread with its own l).
 * Returns 0 and stores the id, -EINVAL for a bad prefix or a server time
 * outside the id range, -EOVERFLOW when the day's counter passed
 * 2^32 - 1, -ETIMEDOUT when the wait after a restart ran out (the server
 * clock is behind the last second used), -EIO on a Redis error,
 * -ECONNRESET when the connection failed (on one server l->rc->err
 * is then set).
 */
struct redis_link;
int idgen_next(struct redis_link *l, const char *prefix, int64_t *id);

/*
 * Drop the process's block for prefix (its unused values are wasted) and
 * start the next reservation small: after the PRIMARY KEY refused an id,
 * the rest of its block is suspect. Thread-safe; a bad prefix is ignored.
 */
void idgen_discard(const char *prefix);

/* Compose an id from a time and a sequence number (pure). */
int64_t idgen_compose(int64_t now_s, uint32_t seq);

/* Split an id into its time (epoch seconds) and sequence number (pure);
 * of a sharded id (below): its time and its day counter n. */
void idgen_decode(int64_t id, int64_t *epoch_s, uint32_t *seq);

/* The sharded layout (above). */
#define IDGEN_SHARDED_BIT 62
#define IDGEN_SHARD_BITS 6
#define IDGEN_SHARDS_MAX (1 << IDGEN_SHARD_BITS)
#define IDGEN_SHARDED_SEQ_MAX ((1u << (IDGEN_SEQ_BITS - IDGEN_SHARD_BITS)) - 1)

/*
 * The sharded id of shard (< IDGEN_SHARDS_MAX) for a worker id of
 * idgen_next() (pure). Returns 0 with *out set; -EINVAL for a bad shard
 * or an id that is not a worker id of the layout's range (sharded
 * already, or t past 2056); -EOVERFLOW when its day counter is above
 * IDGEN_SHARDED_SEQ_MAX (the day's ids of the sharded layout ran out).
 */
int idgen_shard_compose(int64_t id, unsigned shard, int64_t *out);

/* Whether id has the sharded layout (pure). */
bool idgen_is_sharded(int64_t id);

/* The shard id names: its shard bits when it has the sharded layout,
 * else 0 (an id from before sharding). Pure. */
unsigned idgen_shard_of(int64_t id);

/*
 * Write the counter key for prefix and the UTC day of now_s into buf
 * ("icr:{order}:2026:11:21", after the Redis prefix). Returns 0 or
 * -ENAMETOOLONG if len is too small.
 */
int idgen_day_key(const char *prefix, int64_t now_s, char *buf, size_t len);

/* The same day's counter under its name from before the hash tag
 * ("icr:order:2026:11:21", after the Redis prefix: with none, the name
 * older versions counted on; with one, a deployment of its own). */
int idgen_legacy_day_key(const char *prefix, int64_t now_s, char *buf,
                         size_t len);

/* The clock hash of prefix ("icr:{order}:clock", after the Redis prefix). */
int idgen_clock_key(const char *prefix, char *buf, size_t len);

/*
 * Whether the script also counts on the day counters' names from before
 * the hash tag (above): on by default; turn it off, at start-up, on a
 * Redis Cluster, where those names are in other slots (and where no
 * older instance ever ran).
 */
void idgen_legacy_keys(bool on);

/*
 * The keys the script is given for a guess hint_s of the server's time:
 * keys[i] is the counter key of UTC day *first_day + i (days since the
 * Unix epoch), *first_day being the day before hint_s's (pure).
 * Returns 0 or -ENAMETOOLONG.
 */
int idgen_window(const char *prefix, int64_t hint_s,
                 char keys[IDGEN_WINDOW][IDGEN_KEY_MAX], int64_t *first_day);

/*
 * The script's keys and arguments for prefix, a guess hint_s and count
 * values (pure but for idgen_legacy_keys()): argv[0..*nkeys) the keys
 * (the clock, the window's day counters: one slot), then the arguments,
 * the legacy counters' names last when on (not keys: another slot);
 * bufs holds the strings. Returns argc, or -ENAMETOOLONG.
 */
#define IDGEN_ARGS_MAX (1 + 2 * IDGEN_WINDOW + 3)
struct idgen_args {
    char clock[IDGEN_KEY_MAX];
    char days[IDGEN_WINDOW][IDGEN_KEY_MAX], legacy[IDGEN_WINDOW][IDGEN_KEY_MAX];
    char first[24], ttl[16], cnt[16];
};
int idgen_script_args(const char *prefix, int64_t hint_s, uint32_t count,
                      struct idgen_args *bufs, const char *argv[IDGEN_ARGS_MAX],
                      int *nkeys);

#endif
