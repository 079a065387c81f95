/*
 * internal.h - what the files of the asynchronous mode share (see async.h
 * for the mode itself): the names of a sale's keys, the reply and scan
 * helpers of scripts.c, and the writer's state, which the writer's loop
 * (writer.c) and the reconciliation it runs (reconcile.c) both work on.
 * Not part of the module's API.
 */
#ifndef SECKILL_ASYNC_INTERNAL_H
#define SECKILL_ASYNC_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "async/async.h"
#include "async/compare.h"
#include "common/redis_keys.h"
#include "lock/lock.h"
#include "store/store.h"

/* The consumer group of every sale's stream. */
#define GROUP "writers"
/*
 * Room for a writer's consumer name, "<host>-<pid>-<random>" (writer.c):
 * the whole host name (at most HOST_NAME_MAX, 64 bytes), a pid (at most
 * 10 digits), 16 hex digits and the NUL.
 */
#define CONSUMER_MAX (HOST_NAME_MAX + 1 + 10 + 1 + 16 + 1)
/* Room for a sale's key: the prefix, its tag "{v:<id>}:", and the longest
 * name after it, "rebuild-holders:<consumer>". */
#define KEY_MAX (REDIS_PREFIX_MAX + 48 + CONSUMER_MAX)
#define BATCH_MAX ASYNC_PURCHASE_BATCH_MAX
/* The index of sales with orders on their way (see async.h), after the
 * Redis prefix: its own key, written by its own single-key commands (a
 * sale's keys are in the sale's slot, the index in another). */
#define INDEX_KEY "seckill:async:work"
/* Sales looked up in one pipelined round trip. */
#define LOOKUP_MAX 256

/* ---- keys, replies, the index (scripts.c) ---- */

/* The key "{v:<voucher_id>}:<what>" of a sale, after the Redis prefix,
 * into buf (KEY_MAX): every key of a sale is in the sale's hash slot. */
void async__key(char *buf, int64_t voucher_id, const char *what);

/* The index's key (INDEX_KEY after the Redis prefix), into buf (KEY_MAX). */
void async__index_key(char *buf);

/*
 * A reply of an integer into *v, or -EIO (logged, op what) for anything
 * else; without a reply, err or the connection's error. Frees r.
 */
int async__reply_int(redisReply *r, int err, long long *v, const char *what);

/* qsort/bsearch order of int64_t ids. */
int async__cmp_id(const void *a, const void *b);
/* Sort ids[0..n) and drop repeats; returns how many are left. */
size_t async__ids_unique(int64_t *ids, size_t n);
/* Append id to *ids (*n of them, room for *cap), growing it. */
void async__ids_push(int64_t **ids, size_t *n, size_t *cap, int64_t id);

/*
 * Walk a cursor to its end: SSCAN of the set called set, or (set NULL)
 * SCAN of the keyspace for the keys that match. Each string of the
 * replies goes through id_of (NULL: the string is an id); the ids go
 * into *ids, a new array of *n, sorted, without repeats (free(3) it).
 * 0, or -errno with *ids NULL.
 */
int async__scan_ids(struct redis_link *rl, const char *set, const char *match,
                    int (*id_of)(const char *s, size_t len, int64_t *id),
                    int64_t **ids, size_t *n);

/* The sales in the index of sales with work: see async__scan_ids(). */
int async__index_read(struct redis_link *rl, int64_t **ids, size_t *n);

/*
 * async_units_return(); sweeping (the writer's sweep of owed returns): a
 * record of a sale that has no state in Redis is dropped too (its state,
 * when rebuilt, is read from MySQL, which has the unit back; a sale
 * retired long ago has none).
 */
int async__units_return(struct store *st, int64_t voucher_id,
                        const int64_t *orders, const int64_t *users, size_t n,
                        bool sweeping, size_t *returned);

/* ---- the writer's state (writer.c, reconcile.c) ---- */

struct sale {
    int64_t voucher_id;
    bool indexed; /* in the index of sales with work, at the last look */
    /* 1: a sale of this service's database; -1: of another one that
     * shares this Redis database (its orders are not ours to write), as
     * seen at owner_ms; 0: not known yet (sale_ours()). */
    int owner;
    int64_t owner_ms;
    bool group_ready;
    bool own_pending;     /* re-read what this consumer holds first */
    int64_t forget_at_ms; /* monotonic: next look for gone consumers */
    /* MySQL refused the sale's last write: none of its orders is written
     * before retry_ms (monotonic), backing off up to a second; logged
     * once an outage. Other sales are written meanwhile. */
    int64_t retry_ms;
    int backoff_ms;
    unsigned backlog;  /* XLEN, at the last look */
    int64_t oldest_ms; /* Redis time of the oldest order waiting */
    int mismatch;      /* consecutive disagreements seen */
    /* The latest of them. */
    struct async_disagreement last;
    /* Frozen by this writer and being rebuilt (rebuild_step()). */
    bool rebuilding;
    int64_t rebuild_since_ms, rebuild_next_ms, rebuild_said_ms;
};

struct async {
    struct async_config cfg;
    /* This writer's name, its own and no other process's: the consumer
     * in every sale's group, the owner of its freezes, part of the names
     * of its rebuilds' keys. */
    char consumer[CONSUMER_MAX];
    pthread_t thread;
    pthread_mutex_t mu; /* guards sales, nsales, hints, nhints, stop */
    pthread_cond_t cond;
    bool stop;
    /* The writer's working set, by voucher id: the sales in the index of
     * sales with work, those MySQL lists (on sale, ahead, or ended within
     * the look-back), and those hinted since MySQL was last read. Only
     * the writer changes it (under mu: /metrics reads it). */
    struct sale *sales;
    size_t nsales;
    /* MySQL's list at its last read, and the hints taken since (the
     * writer's own). */
    int64_t *listed, *hinted;
    size_t nlisted, nhinted, hinted_cap;
    /* Vouchers this instance just created or sold: the writer takes them
     * in at its next round (guarded by mu). */
    int64_t *hints;
    size_t nhints, hints_cap;
    bool kicked; /* something was sold here since the writer last looked */
    struct lock *reconcile_lock;
    /* When its lease was last renewed (monotonic). */
    int64_t lock_renewed_ms;
    atomic_bool may_sell; /* see async_may_sell() */
    /* The replicas a batch must reach, as of the last look: online ones,
     * or all the sentinels know if more (replicas_to_reach()). */
    atomic_uint replicas_seen;
    int64_t next_returns_ms; /* the next look at the owed unit returns */
};

/* ---- the reconciliation (reconcile.c), run by the writer's loop ---- */

/*
 * Whether s is a sale of this service's MySQL database (its voucher is an
 * async voucher there, with the creation stamp its Redis state carries):
 * the writer writes, and the reconciliation repairs, only those.
 */
bool async__sale_ours(struct store *st, struct redis_link *rl, struct sale *s);

/*
 * Compare every sale of the working set with MySQL, holding the
 * reconciliation's lock (one instance at a time), and start rebuilding
 * those that disagree.
 */
void async__reconcile(struct async *a, struct store *st);

/* Whether async_stop() asked the writer to stop: the loops over every
 * sale look between two sales, so that a stop never waits for all of them
 * (after a Redis that lost its state, every sale of the look-back is
 * rebuilt). */
static inline bool async__stopping(struct async *a)
{
    bool stop;

    pthread_mutex_lock(&a->mu);
    stop = a->stop;
    pthread_mutex_unlock(&a->mu);
    return stop;
}

/* The next step of every rebuild this writer has going. */
void async__rebuilds_step(struct async *a, struct store *st);

#endif
