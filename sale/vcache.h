/*
 * vcache.h - a per-instance cache of what step 1 of a purchase needs about
 * a voucher, with a sold-out flag, so that refusals (sold out, not
 * started, ended, not a seckill voucher, no such voucher) need no MySQL
 * or Redis round trip. Flags and unknown ids are trusted for ttl_ms and
 * dropped on every instance at once when stock changes
 * (vcache_voucher_changed() publishes on Redis; each instance runs one
 * subscriber thread). vcache.c says exactly how stale an answer can be
 * and why that never oversells.
 *
 * Used by the sale layer (sale/buy.c and the code that changes stock).
 * Every function is thread-safe and accepts a NULL cache (no caching, no
 * publishing).
 */
#ifndef SECKILL_VCACHE_H
#define SECKILL_VCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

struct vcache_config {
    /* How long a sold-out flag or an unknown id is trusted without a
     * message (SECKILL_SOLDOUT_TTL_MS); 0: nothing is cached, but changes
     * are still published for other instances. */
    unsigned ttl_ms;
    /* The Redis of the subscriber thread (it connects in the background
     * and retries with back-off) and the MySQL of the refresher thread. */
    const struct store_config *store;
};

/* What the cache knows about one voucher. */
struct vcache_voucher {
    bool found; /* false: there is no voucher with this id */
    enum voucher_type type;
    int64_t begin_time; /* epoch seconds, seckill vouchers only */
    int64_t end_time;   /* epoch seconds, exclusive */
    bool sold_out;      /* seckill vouchers only */
    enum purchase_mode mode;
    bool queue;  /* admission through the waiting room (a ticket) */
    bool paused; /* an operator paused the sale */
};

struct vcache;

/*
 * Start the cache of cfg and its threads. cfg and what it points to must
 * outlive the cache. Never returns NULL.
 */
struct vcache *vcache_new(const struct vcache_config *cfg);
/* Stop the threads and free vc. NULL ok. */
void vcache_free(struct vcache *vc);

/*
 * Look voucher id up without I/O or locks. True and *v when the cache has
 * a usable entry (an entry due for a refresh is still usable while the
 * cache's refresher thread re-reads it); false when the caller must read
 * the row and store it with vcache_entry_put(). *gen is always set: pass
 * it to the put or vcache_sold_out_set() of this request, so that what it
 * learned is dropped if the voucher changed meanwhile.
 */
bool vcache_entry_get(struct vcache *vc, int64_t id, struct vcache_voucher *v,
                      uint64_t *gen);
/* Store what a read of the row found (v->found false: no such row). */
void vcache_entry_put(struct vcache *vc, int64_t id,
                      const struct vcache_voucher *v, uint64_t gen);
/* A purchase found no stock left: flag voucher id as sold out. */
void vcache_sold_out_set(struct vcache *vc, int64_t id, uint64_t gen);
/* What a voucher row (s; NULL: no such row) says, in the cache's terms. */
void vcache_voucher_from_row(struct vcache_voucher *v,
                             const struct store_seckill *s);

/*
 * Voucher id was created or its stock or row changed (after the commit):
 * drop it here and publish it to every instance, on st's Redis
 * connection. A failed publish is logged; the other instances then
 * catch up within the TTL.
 */
void vcache_voucher_changed(struct vcache *vc, struct store *st, int64_t id);

#endif
