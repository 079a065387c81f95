/*
 * internal.h - what the files of the sale layer share (see sale.h for the
 * layer itself): the sale object, each pool thread's store, a purchase's
 * state while it is handed on, and the batch functions the engine runs.
 * Not part of the layer's API.
 */
#ifndef SECKILL_SALE_INTERNAL_H
#define SECKILL_SALE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "engine/pool.h"
#include "lock/lock.h"
#include "sale/sale.h"
#include "sale/vcache.h"
#include "store/store.h"

struct sale {
    struct sale_config cfg;
    struct sale_listing *listing; /* the sales' snapshot (listing.c) */
};

/* The sales listing's snapshot (listing.c says how it is used): what
 * one query found, immutable once published, reference counted. */
struct sale_snapshot {
    atomic_uint refs;
    int64_t taken_ms; /* monotonic: when its query began */
    int64_t taken_s;  /* epoch seconds: the "now" of its query */
    bool truncated;   /* more than SALE_LISTING_MAX matched */
    size_t n;
    struct store_voucher *items;  /* by begin time, then id */
    struct store_voucher **ended; /* the same, by end time, then id */
};

struct sale_listing {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    struct sale_snapshot *cur; /* NULL until the first query answers */
    bool refreshing;
    int64_t tried_ms; /* monotonic: the last query's start (0: none) */
    int last_err;     /* of the last query */
};

/* Drop a reference to sn (freed with the last). Accepts NULL. */
void sale__snapshot_unref(struct sale_snapshot *sn);
/* The snapshot holder (snapshot.c): made empty, freed with its
 * snapshot. */
struct sale_listing *sale__listing_new(void);
void sale__listing_free(struct sale_listing *l);

/*
 * The calling thread's store (made on its first use, freed when the
 * thread exits): for the calls that wait, on the task pool's threads.
 */
struct store *sale__store(struct sale *s);

/* A purchase while it is handed on (sale_buy() to its answer). */
struct sale_purchase {
    struct sale *sale;
    struct sale_buy *buy;
    struct pool_task task;    /* the round trips before the engine */
    struct engine_purchase p; /* in the engine */
    bool cached;              /* the voucher cache knew the voucher */
    bool async;               /* the voucher sells in async mode */
    uint64_t vcache_gen;      /* of the cache entry read (vcache.h) */
    /* In a batch (batch.c): */
    struct lock *lock; /* the buyer's purchase lock, while held */
    struct store_purchase_item item;
    bool settled; /* its outcome is decided */
    enum sale_outcome outcome;
    int err;
};

/* Whether b carries a good ticket (sale/waitroom.c) of its buyer for its
 * voucher at now_ms. From memory. */
bool sale__ticket_ok(const struct sale *s, const struct sale_buy *b,
                     int64_t now_ms);

/*
 * The engine's batch functions (engine_purchase.batch) of the two modes:
 * a sync sale's takes the buyers' locks, order ids, and runs one MySQL
 * transaction; an async sale's takes order ids and runs one Redis script.
 * Each settles every purchase it gets (outcome, err, item.order_id).
 */
void sale__batch_sync(struct store *st, int64_t voucher_id,
                      struct engine_purchase **ps, size_t n);
void sale__batch_async(struct store *st, int64_t voucher_id,
                       struct engine_purchase **ps, size_t n);

/*
 * The audit record (audit.c) of an admin action by who (NULL: nobody) on
 * target_type target_id, with change (a JSON object, or NULL; its
 * reference is taken). Give it to the store, then sale__audit_done().
 */
void sale__audit_make(struct store_audit *a, const struct sale_actor *who,
                      const char *action, const char *target_type,
                      int64_t target_id, json_t *change);
void sale__audit_done(struct store_audit *a);
/*
 * Send c's code to the config's SMS webhook (POSTed on its sender queue,
 * signed), good SALE_CODE_TTL_S, with c's client slot taken
 * (sale__sms_slot_take()). True: decided now (c->err: -EAGAIN, the queue
 * is full; done() not called; the caller gives the slot back). False:
 * c->done() will be called once, from another thread, with c->err 0,
 * -ECOMM (not sent: the code withdrawn) or -ETIMEDOUT (perhaps sent: the
 * code kept), the slot given back.
 */
bool sale__sms_send(struct sale *s, struct sale_code *c);

/* A slot for one more code on its way from client (a key of its address;
 * "" takes none): false when it has SMS_PER_CLIENT_MAX already. Give it
 * back once the code is decided. Thread-safe. */
bool sale__sms_slot_take(const char *client);
void sale__sms_slot_give(const char *client);

/* A time in the change of a record: ISO 8601, as the API writes it. */
json_t *sale__audit_time(int64_t epoch_s);

#endif
