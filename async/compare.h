/*
 * compare.h - the reconciliation's judgement of one async sale: whether
 * its Redis state agrees with MySQL, from numbers read on each side. Pure
 * functions, no I/O, so that the judgement can be tested without servers
 * (reconcile.c reads the numbers and acts on the answer).
 */
#ifndef SECKILL_ASYNC_COMPARE_H
#define SECKILL_ASYNC_COMPARE_H

#include <stdbool.h>
#include <stdint.h>

/* A sale's numbers in Redis, read at one moment (one script). */
struct async_redis_side {
    long long initial;   /* the stock it went on sale with; -1: no state */
    long long stock;     /* units left */
    long long buyers;    /* users with an active order */
    long long unsettled; /* orders sold and not yet settled by a writer */
    long long written;   /* orders settled as written to MySQL */
    uint64_t last_pos;   /* the stream's last position (async_stream_pos) */
    bool orphan;         /* an acknowledged order left in the stream */
    long long restocked; /* units restocks added to initial, as Redis has
                          * them */
    long long revision;  /* the controls' revision it has */
};

/* A sale's numbers in MySQL, counting only the orders at or before the
 * Redis side's last_pos (and those from before positions were kept). */
struct async_mysql_side {
    long long initial;   /* -1: unknown (a voucher from before) */
    long long active;    /* unpaid and paid orders */
    long long orders;    /* orders of any status */
    long long owed;      /* closed orders whose unit is still owed back to
                          * Redis (async_unit_returns): Redis keeps their
                          * buyer until the unit comes back */
    long long restocked; /* units restocks added to initial, in MySQL: more
                          * than Redis' while a restock is on its way */
};

/* How a sale disagrees, term by term (all 0 and false: it agrees). */
struct async_disagreement {
    bool missing;        /* Redis has no state for the sale */
    bool orphan;         /* see async_redis_side */
    long long initial;   /* Redis' initial stock minus MySQL's */
    long long units;     /* Redis: initial - stock - buyers */
    long long buyers;    /* Redis' buyers minus the orders that explain them */
    long long in_flight; /* written orders Redis has not settled, beyond
                          * what it has in flight (or below 0) */
};

/*
 * Compare r with m. d gets every term of the difference. True when the
 * two agree.
 */
bool async_sale_compare(const struct async_redis_side *r,
                        const struct async_mysql_side *m,
                        struct async_disagreement *d);

/* Whether a and b are the same disagreement, term by term. */
bool async_disagreement_same(const struct async_disagreement *a,
                             const struct async_disagreement *b);

/*
 * A stream entry id ("<ms>-<seq>") as one number that orders like the ids:
 * ms << 20 | seq (a sequence beyond 2^20 - 1 within one millisecond is
 * counted as 2^20 - 1). 0 for a malformed id.
 */
uint64_t async_stream_pos(const char *id);

#endif
