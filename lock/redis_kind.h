/*
 * redis_kind.h - what the single-Redis backend (redis.c) shares with its
 * lock kinds (fair.c, rwlock.c, semaphore.c). Internal to lock/.
 *
 * redis.c runs the parts every kind has in common: the wait loop (one try,
 * subscribe, try again at every wake-up, the TTL or the fallback timer),
 * the undo of an acquire whose answer was lost, the replica confirmation
 * (WAIT), and the choice of scripts by l->kind. A kind supplies its scripts
 * through a struct redis_kind. (The generic layer, lock.c, asks again a release
 * whose answer was lost.)
 */
#ifndef SECKILL_LOCK_REDIS_KIND_H
#define SECKILL_LOCK_REDIS_KIND_H

#include "lock/rconn.h"

/* The backend's state (c->impl). */
struct redis_impl {
    /* Its strings: the client's URL. The one server, or a cluster's
     * seeds. */
    struct redis_server srv[URL_HOSTS_MAX];
    int nsrv;
    struct rconn_mux *mux; /* one server; NULL on a cluster */
    struct rconn_hub hub;
    struct rconn_psub *ps;    /* one server; NULL on a cluster */
    struct rconn_cluster *cl; /* a cluster; NULL on one server */
    uint32_t replicas;        /* WAIT for this many after each acquire; 0: no */
    uint32_t receipt_ms;      /* how long a release's receipt is kept */
};

/* A waiter retries at least this often (jittered down to half) even if no
 * release message arrives. */
#define REDIS_FALLBACK_MS 500

struct redis_kind {
    /*
     * One try at l with lease (ms). waiting: the caller waits if busy
     * (the kinds that keep a queue join it, or check in). Returns 0 with
     * *taken = 1 and l->fence set, or *taken = 0 and *pttl the ms after
     * which a retry may succeed (-1: unknown); or an errno.
     */
    int (*try_once)(struct redis_impl *ri, struct lock *l, uint32_t lease,
                    int waiting, int *taken, int64_t *pttl);
    /*
     * Take back an acquire of l whose answer never came (it may have
     * run), without waiting (rconn_mux_send_detached()): drop l's hold
     * if it has one and its place in any queue, and wake whoever that
     * lets in. Harmless if the acquire never ran. Kinds with a queue
     * also call it when a waiter gives up.
     */
    void (*undo)(struct redis_impl *ri, const struct lock *l);
    /* 1: a waiter keeps a place (a queue, a check-in) that undo gives
     * back when it stops waiting without the lock. */
    int queues;
    /*
     * Release l's hold (token l->fence), leaving a receipt: 0 with *held,
     * or an errno, with l->release_unknown set when asking again may
     * answer (lock__redis_run_bool()).
     */
    int (*release)(struct redis_impl *ri, struct lock *l, int *held);
    /* Renew l's lease to lease ms: *held = 0 if it is no longer ours. */
    int (*renew)(struct redis_impl *ri, struct lock *l, uint32_t lease,
                 int *held);
    /* The channel a waiter for l listens on (into buf, REDIS_KEY_MAX). */
    void (*channel)(const struct lock *l, char *buf);
};

extern const struct redis_kind lock__redis_fair;
extern const struct redis_kind lock__redis_read;
extern const struct redis_kind lock__redis_write;
extern const struct redis_kind lock__redis_semaphore;

/* Longest key or channel the kinds build (rconn.h lists them). */
#define REDIS_KEY_MAX LOCK_RKEY_MAX

/* l's release receipt (side: "" or "r:" / "w:" for a read-write lock's
 * two sides) into buf (REDIS_KEY_MAX bytes); returns the length. */
size_t lock__redis_receipt(const struct lock *l, char *buf, const char *side);

/*
 * Run script s and wait for its reply. Returns the reply (the caller
 * frees it) or NULL with *err set; *unknown (may be NULL) is set to 1 when
 * the script went out and may have run.
 */
redisReply *lock__redis_run(struct redis_impl *ri, enum rconn_script s,
                            int nkeys, int argc, const char **argv,
                            const size_t *lens, int *err, int *unknown);

/*
 * Wait for the answer of an acquire script sent as call, which answers
 * {1, token} or {0, pttl}: see try_once. An answer lost after the send
 * (-ETIMEDOUT, -ECONNRESET) leaves the outcome unknown: l's kind's undo
 * goes out behind the script, so this owner's next try is not BUSY for a
 * whole lease.
 */
int lock__redis_take_answer(struct redis_impl *ri, struct lock *l,
                            struct rconn_call *call, int *taken, int64_t *pttl);

/* Send an acquire script and wait for it (lock__redis_take_answer()). */
int lock__redis_run_take(struct redis_impl *ri, struct lock *l,
                         enum rconn_script s, int nkeys, int argc,
                         const char **argv, const size_t *lens, int *taken,
                         int64_t *pttl);

/*
 * One try (as try_once) of a kind whose acquire script s takes KEYS = the
 * three keys key[0..2] (lengths len[0..2]) and the fencing counter, and
 * ARGV = l's owner, lease and, with checkin, how long a waiter's place is
 * kept between two tries (0 when the caller does not wait).
 */
int lock__redis_take3(struct redis_impl *ri, struct lock *l,
                      enum rconn_script s, const char *const key[3],
                      const size_t len[3], uint32_t lease, int checkin,
                      int waiting, int *taken, int64_t *pttl);

/*
 * Run a script that answers 1 or 0: *yes. For releases: an answer lost
 * after the send, or a connection found reset before it, sets
 * l->release_unknown (asking again may answer).
 */
int lock__redis_run_bool(struct redis_impl *ri, struct lock *l,
                         enum rconn_script s, int nkeys, int argc,
                         const char **argv, const size_t *lens, int *yes);

/*
 * Release l's member of the sorted set of leases set (readers, a
 * semaphore's holders), leaving a receipt, and publish on chan: at every
 * release (always) or when the set empties. As redis_kind.release.
 */
int lock__redis_zset_release(struct redis_impl *ri, struct lock *l,
                             const char *set, size_t set_len, const char *chan,
                             size_t chan_len, const char *receipt,
                             size_t receipt_len, int always, int *held);

/* Renew l's member of set to lease ms: *held = 0 if its lease had ended. */
int lock__redis_zset_renew(struct redis_impl *ri, struct lock *l,
                           const char *set, size_t set_len, uint32_t lease,
                           int *held);

/* Send script s detached (rconn_mux_send_detached()): an undo. */
void lock__redis_detach(struct redis_impl *ri, enum rconn_script s, int nkeys,
                        int argc, const char **argv, const size_t *lens);

/* Undo l's acquire by dropping its member of set and publishing on chan
 * (RCONN_ZLEAVE, detached): readers, a semaphore's holders. */
void lock__redis_zset_undo(struct redis_impl *ri, const struct lock *l,
                           const char *set, size_t set_len, const char *chan,
                           size_t chan_len);

#endif
