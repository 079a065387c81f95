/*
 * internal.h - what the store's files share: the per-thread connection
 * state, the prepared statement table and small MYSQL_BIND helpers. Not
 * part of the store's API.
 */
#ifndef SECKILL_STORE_INTERNAL_H
#define SECKILL_STORE_INTERNAL_H

#include <stdbool.h>
#include <mysql.h>

#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/redis_link.h"
#include "store/store.h"

/*
 * The Redis names of the store's multi-key scripts, each after the Redis
 * prefix (common/redis_keys.h), so that tests/unit/test_redis_keys.c can
 * check that each script's keys share a hash slot.
 */
#define STORE_KEY_MAX (REDIS_PREFIX_MAX + 192)
#define STORE_FAIL_KEY_MAX (REDIS_PREFIX_MAX + 240)

/* A failed admin login's three sets: the name's from the address, the
 * name's and the address's (three slots: each its own script call). */
void store_admin_fail_keys(const char *name, const char *addr, char *kp,
                           char *kn, char *ka, size_t n);

/* A phone's login-code keys (one slot: the {p:PHONE} tag): its codes,
 * then its send log (addr NULL) or its wrong tries, and the address's
 * wrong tries on that phone. Each STORE_KEY_MAX bytes. */
void store_code_keys(const char *phone, const char *addr, char *codes,
                     char *second, char *by_addr);
/* The send log of the codes addr asked for, and code request id's key
 * (the same slot). */
void store_code_request_keys(const char *phone, const char *addr,
                             const char *id, char *sent_by_addr, char *req);

/* A queue sale's waiting-room key what ("pre", "late", "seq", "queue")
 * (one slot per sale: the {v:ID} tag); STORE_KEY_MAX bytes. */
void store_waitroom_key(char *buf, int64_t voucher_id, const char *what);

/* A buyer's poll limiter in the waiting room: the same slot. */
void store_waitroom_poll_key(char *buf, int64_t voucher_id, int64_t user_id);

enum stmt_id {
    STMT_USER_LOGIN,
    STMT_USERS_LEGACY,
    STMT_USERS_LEGACY_ANY,
    STMT_USER_BY_PHONE_LOCK,
    STMT_USER_PHONE_SET,
    STMT_USER_MERGE,
    STMT_VOUCHER_INSERT,
    STMT_VOUCHER_INSERT_ID, /* with its id: a sharded voucher */
    STMT_SECKILL_INSERT,
    STMT_VOUCHER_GET,
    STMT_VOUCHER_LIST_SHOP,
    STMT_VOUCHER_LIST_ALL,
    STMT_SALES_LIST,
    STMT_SECKILL_GET,
    STMT_ORDER_EXISTS,
    STMT_ORDER_INSERT,
    STMT_STOCK_DECR,
    STMT_ORDER_GET,
    STMT_ORDER_LIST,
    STMT_VOUCHER_ORDERS_DESC,
    STMT_VOUCHER_ORDERS_ASC,
    /* merged purchases (purchase.c): */
    STMT_STOCK_GET,
    STMT_STOCK_TAKE,
    STMT_ORDERS_EXIST_1, /* ..._64: user_id IN a list of 2^i */
    STMT_ORDERS_EXIST_2,
    STMT_ORDERS_EXIST_4,
    STMT_ORDERS_EXIST_8,
    STMT_ORDERS_EXIST_16,
    STMT_ORDERS_EXIST_32,
    STMT_ORDERS_EXIST_64,
    /* n rows for n = 2..16, 32, 64 (one row is STMT_ORDER_INSERT): a
     * batch of up to 16 is one statement. */
    STMT_ORDERS_INSERT_2,
    STMT_ORDERS_INSERT_3,
    STMT_ORDERS_INSERT_4,
    STMT_ORDERS_INSERT_5,
    STMT_ORDERS_INSERT_6,
    STMT_ORDERS_INSERT_7,
    STMT_ORDERS_INSERT_8,
    STMT_ORDERS_INSERT_9,
    STMT_ORDERS_INSERT_10,
    STMT_ORDERS_INSERT_11,
    STMT_ORDERS_INSERT_12,
    STMT_ORDERS_INSERT_13,
    STMT_ORDERS_INSERT_14,
    STMT_ORDERS_INSERT_15,
    STMT_ORDERS_INSERT_16,
    STMT_ORDERS_INSERT_32,
    STMT_ORDERS_INSERT_64,
    /* segmented stock: */
    STMT_SEGMENT_INSERT,
    STMT_SEGMENT_COUNT,
    STMT_SEGMENT_DECR,
    /* the order lifecycle: */
    STMT_ORDER_LOCK,
    STMT_ORDER_CLOSE,
    STMT_ORDER_PAY,
    STMT_STOCK_RETURN,
    STMT_SEGMENT_RETURN,
    STMT_EXPIRE_SCAN,
    STMT_VOUCHER_STATS,
    /* units owed to async sales (unit_returns.c): */
    STMT_VOUCHER_MODE,
    STMT_UNIT_RETURN_OWE,
    STMT_UNIT_RETURNS_LIST,
    STMT_UNIT_RETURNS_DONE_1, /* ..._64: order_id IN a list of 2^i */
    STMT_UNIT_RETURNS_DONE_2,
    STMT_UNIT_RETURNS_DONE_4,
    STMT_UNIT_RETURNS_DONE_8,
    STMT_UNIT_RETURNS_DONE_16,
    STMT_UNIT_RETURNS_DONE_32,
    STMT_UNIT_RETURNS_DONE_64,
    /* merged payments and cancels (lifecycle.c): order id IN a list of
     * 2^i, locked; and read back after the COMMIT. */
    STMT_ORDERS_LOCK_1,
    STMT_ORDERS_LOCK_2,
    STMT_ORDERS_LOCK_4,
    STMT_ORDERS_LOCK_8,
    STMT_ORDERS_LOCK_16,
    STMT_ORDERS_LOCK_32,
    STMT_ORDERS_LOCK_64,
    STMT_ORDERS_GET_1,
    STMT_ORDERS_GET_2,
    STMT_ORDERS_GET_4,
    STMT_ORDERS_GET_8,
    STMT_ORDERS_GET_16,
    STMT_ORDERS_GET_32,
    STMT_ORDERS_GET_64,
    /* k orders paid at once (txn_id by CASE id), k = 2^i */
    STMT_ORDERS_PAY_1,
    STMT_ORDERS_PAY_2,
    STMT_ORDERS_PAY_4,
    STMT_ORDERS_PAY_8,
    STMT_ORDERS_PAY_16,
    STMT_ORDERS_PAY_32,
    STMT_ORDERS_PAY_64,
    /* k unpaid orders closed at once (status ?), k = 2^i */
    STMT_ORDERS_CLOSE_1,
    STMT_ORDERS_CLOSE_2,
    STMT_ORDERS_CLOSE_4,
    STMT_ORDERS_CLOSE_8,
    STMT_ORDERS_CLOSE_16,
    STMT_ORDERS_CLOSE_32,
    STMT_ORDERS_CLOSE_64,
    /* the asynchronous mode: */
    STMT_IDS_EXIST_1, /* ..._64: id IN a list of 2^i */
    STMT_IDS_EXIST_2,
    STMT_IDS_EXIST_4,
    STMT_IDS_EXIST_8,
    STMT_IDS_EXIST_16,
    STMT_IDS_EXIST_32,
    STMT_IDS_EXIST_64,
    STMT_ASYNC_INSERT_1, /* ..._64: 2^i rows with their deadlines */
    STMT_ASYNC_INSERT_2,
    STMT_ASYNC_INSERT_4,
    STMT_ASYNC_INSERT_8,
    STMT_ASYNC_INSERT_16,
    STMT_ASYNC_INSERT_32,
    STMT_ASYNC_INSERT_64,
    STMT_ASYNC_VOUCHERS,
    STMT_ASYNC_SALE,
    STMT_ASYNC_COUNTS,
    STMT_ASYNC_STAMP,
    STMT_ACTIVE_USERS,
    STMT_ACCOUNT_GET,
    STMT_ACCOUNT_LOGOUT_ALL,
    STMT_ACCOUNT_BAN,
    STMT_ACCOUNTS_LOAD,
    STMT_REFUND_INSERT,
    STMT_REFUNDS_LIST,
    STMT_REFUND_DONE,
    STMT_REFUND_GET,
    STMT_ADMIN_INSERT,
    STMT_ADMIN_GET,
    STMT_AUDIT_INSERT,
    STMT_AUDIT_LIST,
    /* the Idempotency-Keys of admin writes (idempotency.c) */
    STMT_IDEM_INSERT,
    STMT_IDEM_GET,
    STMT_IDEM_ANSWER,
    STMT_IDEM_TARGET,
    STMT_IDEM_SWEEP,
    /* rows of shard 0 a transaction of another shard decided on
     * (shard.c): into its outbox, and moved from there to shard 0 */
    STMT_OUTBOX_REFUND,
    STMT_OUTBOX_AUDIT,
    STMT_OUTBOX_LIST,
    STMT_OUTBOX_DELETE,
    STMT_REFUND_MOVE,
    STMT_AUDIT_MOVE,
    /* payments' transaction ids reserved on shard 0 (shard.c): 2^i
     * rows; and whom 2^i of them are reserved for */
    STMT_TXNS_RESERVE_1,
    STMT_TXNS_RESERVE_2,
    STMT_TXNS_RESERVE_4,
    STMT_TXNS_RESERVE_8,
    STMT_TXNS_RESERVE_16,
    STMT_TXNS_RESERVE_32,
    STMT_TXNS_RESERVE_64,
    STMT_TXNS_OWNER_1,
    STMT_TXNS_OWNER_2,
    STMT_TXNS_OWNER_4,
    STMT_TXNS_OWNER_8,
    STMT_TXNS_OWNER_16,
    STMT_TXNS_OWNER_32,
    STMT_TXNS_OWNER_64,
    /* the purchase's CAS of the merged batch (the writer's is STOCK_TAKE) */
    STMT_SALE_TAKE,
    /* the operator's controls (controls.c): */
    STMT_CTL_LOCK,
    STMT_CTL_READ,
    STMT_CTL_HALT,
    STMT_CTL_SEGMENTS_HALT,
    STMT_CTL_STOP,
    STMT_CTL_RESTOCK,
    STMT_CTL_VOUCHER_SET,
    STMT_CTL_SALE_SET,
    STMT_CTL_SEGMENT_SET,
    STMT_CTL_ORDERS_ANY,
    STMT_CTL_DELETE,
    STMT_COUNT
};

/* The largest list of STMT_ORDERS_EXIST_* and STMT_ORDERS_INSERT_*. */
#define STMT_ROWS_MAX 64

struct store {
    const struct store_config *cfg;
    MYSQL *my;        /* NULL while disconnected */
    bool my_nonblock; /* my can make non-blocking calls (fanout.c) */
    MYSQL_STMT *stmts[STMT_COUNT]; /* prepared on first use */
    int64_t my_next_try_ms;        /* no reconnect before (monotonic) */
    /* Redis: link.rc on one server (NULL while disconnected), or
     * link.cluster on a cluster (made on first use; it connects to each
     * primary itself). */
    struct redis_link link;
    int64_t rc_next_try_ms;
    unsigned rc_epoch; /* redis_server_epoch() when link.rc was made */
    struct redis_connect_log rc_log;
    /* The thread's connection to the read replica (replica.c), made on
     * its first voucher read there; skipped until this after a failure. */
    struct store *replica;
    int64_t replica_skip_until_ms;
    /* Shards (shard.c). The thread's store of shard 0 (made with the
     * config that lists the shards) owns the stores of the others,
     * shard[i] made on first use; each of those has home set to it. */
    struct store *home;   /* NULL: this is the thread's shard 0 store */
    struct store **shard; /* [nshards], NULL until needed; home only */
    unsigned shard_no;    /* which shard this store's primary is */
    /* An operation on this shard (not shard 0) wrote rows of shard 0 (an
     * audit record, a refund) into the shard's outbox: store_outbox_flush()
     * moves them once it committed. */
    bool outbox_written;
};

/* ---- shards (shard.c; each shard's store is conn.c's) ---- */

/* The thread's store of shard i (< store_shard_count()): st's home for
 * 0, else its store of that shard, made on first use. Never NULL. */
struct store *store_shard(struct store *st, unsigned i);

/* The store of the shard id lives on (store_shard_of()). */
struct store *store_by_id(struct store *st, int64_t id);

/* The thread's store of shard 0 (st itself, or its home). */
struct store *store_home(struct store *st);

/*
 * Start the transaction of an admin's write described by audit (NULL:
 * none): START TRANSACTION, then, when audit carries an Idempotency-Key,
 * that key, first, on st's shard (idempotency.c). The key's row then
 * stays locked by this transaction until it ends, so that a second write
 * with the key waits for it, and finds it once it committed. 0; -EALREADY
 * or -EBUSY (store_idem; rolled back); or as store_mysql_error().
 */
int store_tx_begin_keyed(struct store *st, const struct store_audit *audit);

/* The shard of a new voucher made with Idempotency-Key k, of n shards:
 * from the admin and the key alone, the same on every instance. */
unsigned store_idem_shard(const struct store_idem *k, unsigned n);

/* Record the target of k's write, known only once it was made (a new
 * voucher's id), in the write's transaction. 0 or as
 * store_mysql_error(). */
int store_idem_target_set(struct store *st, const struct store_idem *k,
                          int64_t target_id);

/* Record a refused payment's refund (shard.c): in st's open
 * transaction, on shard 0 itself or into another shard's outbox, to be
 * moved to shard 0 (below). */
int store_refund_insert(struct store *st, int64_t order_id, const char *txn,
                        int64_t amount, int64_t reason);

/* A payment's transaction id and the order it is for
 * (store_txns_reserve()). */
struct txn_reservation {
    const char *txn; /* the caller's; NULL: left out */
    int64_t order_id;
    int64_t owner; /* set: the order txn is reserved for */
};

/*
 * With several shards, reserve the transaction id of each r[0..n) for
 * its order on shard 0 (the table payment_txns), before st records the
 * payments: a provider's transaction then pays one order, whichever
 * shards the orders are on. Each r[i].owner is set to the order its txn
 * is reserved for: r[i].order_id, unless another order had it first (a
 * txn named twice in r is reserved for the first of them). A reservation
 * is kept: the order it is for finds it again when its payment is
 * retried, and any other order is refused. With st of shard 0 the rows
 * join st's open transaction and commit with the payment; from another
 * shard they are committed on their own, first. With one shard there is
 * nothing to reserve: each owner is its order (the shard's unique key on
 * the orders' txn_id is the check). Entries whose txn is NULL are left
 * out (owner 0). Returns 0 or as store_mysql_error().
 */
int store_txns_reserve(struct store *st, struct txn_reservation *r, size_t n);

/*
 * After an operation on st that ended with err: when it wrote rows into
 * its shard's outbox and may have committed (err 0, or -EINPROGRESS: the
 * COMMIT's answer was lost), move them to shard 0 now
 * (store_outbox_move(); a failure is logged and left to the expiry
 * thread's sweep). Returns err.
 */
int store_outbox_flush(struct store *st, int err);

/*
 * Open a MySQL connection to c's server as every connection of the store
 * is opened (TCP, utf8mb4, UTC, the session settings of its flavour, READ
 * ONLY for a replica); read_timeout_s 0: the client waits for an answer
 * as long as it takes (schema migrations). Returns 0 with *out set (the
 * caller closes it), or -ENOTCONN with why (whylen bytes) holding the
 * server's error; nothing is logged.
 */
int store_mysql_open(const struct store_config *c, unsigned read_timeout_s,
                     MYSQL **out, char *why, size_t whylen);

/*
 * Connect MySQL if needed. Returns 0 or -ENOTCONN (logged; further tries
 * are skipped for a short back-off so a dead server answers fast).
 */
int store_mysql_ensure(struct store *st);

/*
 * Classify the error of the last call on st->my or stmt (may be NULL):
 * a lost connection closes it and returns -ENOTCONN; deadlock and lock
 * wait timeout return -EDEADLK; a duplicate key -EEXIST; anything else is
 * logged with op and returns -EIO.
 */
int store_mysql_error(struct store *st, MYSQL_STMT *stmt, const char *op);

/*
 * Prepare (once per connection) and execute statement id with params
 * bound, then bind results (may be NULL) and buffer the rows. Returns 0
 * with *out set (call mysql_stmt_free_result() when done), or as
 * store_mysql_error().
 */
int store_stmt_exec(struct store *st, enum stmt_id id, MYSQL_BIND *params,
                    MYSQL_BIND *results, MYSQL_STMT **out);

/*
 * Execute statement id and fetch at most max rows into results, calling
 * on_row(ctx, i) (may be NULL) after each row is fetched; *count is the
 * number of rows fetched. Returns 0 or as store_mysql_error().
 */
int store_stmt_rows(struct store *st, enum stmt_id id, MYSQL_BIND *params,
                    MYSQL_BIND *results, size_t max,
                    void (*on_row)(void *ctx, size_t i), void *ctx,
                    size_t *count);

/* Statement id prepared on st's connection (once per connection), or
 * NULL with *err as store_mysql_error(). The connection must be open. */
MYSQL_STMT *store_stmt_get(struct store *st, enum stmt_id id, int *err);

/* Statement id's text. */
const char *store_stmt_sql(enum stmt_id id);

/* The row-fetching half of store_stmt_rows(), on statement s of id whose
 * result is stored: at most max rows, on_row after each. */
int store_stmt_fetch(struct store *st, MYSQL_STMT *s, enum stmt_id id,
                     size_t max, void (*on_row)(void *ctx, size_t i), void *ctx,
                     size_t *count);

/* One store's part of store_stmt_rows_each(): store_stmt_rows()'s
 * arguments, and what it returned (err) and fetched (count). */
struct store_rows_call {
    struct store *st;
    MYSQL_BIND *params, *results;
    size_t max;
    void (*on_row)(void *ctx, size_t i);
    void *ctx;
    size_t count;
    int err;
};

/*
 * store_stmt_rows() of statement id on n stores of different servers at
 * once (fanout.c): every statement is sent before any answer is awaited
 * (Connector/C's non-blocking calls, with one poll() over the sockets),
 * so the servers work on them together and the time is the slowest one's
 * round trip, not the sum. Each store as through store_retry(): an idle
 * connection the server closed is reopened, and a call that lost its
 * connection is tried once more on a new one. Sets each c[i].err and
 * c[i].count; returns the first error in c's order, or 0.
 */
int store_stmt_rows_each(enum stmt_id id, struct store_rows_call *c, size_t n);

/* Run a fixed statement such as "START TRANSACTION" or "ROLLBACK". */
int store_query(struct store *st, const char *sql);

/* Roll back the open transaction, if any; returns err unchanged. */
int store_tx_rollback(struct store *st, int err);

/* Commit the open transaction: 0; -EINPROGRESS when the connection was
 * lost on the way (it may or may not have committed: not to be retried);
 * or as store_mysql_error(). */
int store_tx_commit(struct store *st);

/*
 * Run fn(st, arg) as one operation: first drop the MySQL connection if the
 * server closed it while idle; then, if fn failed with -ENOTCONN on a
 * connection that was open before, run it once more on a fresh one. fn
 * must have had no durable effect when it returns -ENOTCONN.
 */
int store_retry(struct store *st, int (*fn)(struct store *, void *), void *arg);

/* ---- the read replica (replica.c) ---- */

/*
 * The store a voucher read should use: st's replica store when the
 * monitor finds the replica usable and this thread has not seen it fail
 * within the last second, else st itself.
 */
struct store *store_reader(struct store *st);

/*
 * After a read on reader (from store_reader(st)) that returned err:
 * count it, and after a failure on the replica skip it for a while (the
 * caller then reads the primary).
 */
void store_reader_done(struct store *st, struct store *reader, int err);

/* Deadlocks and lock wait timeouts are retried this many times in all
 * (the purchases, the lifecycle, the async writes). */
#define PURCHASE_ATTEMPTS 3

/* ---- per-voucher state (voucher_state.c) ---- */

/*
 * What this process knows about one voucher's stock: its number of stock
 * segments and which of them were seen empty. Created on first use, freed
 * once unused for a while (store_voucher_states_free_idle()).
 */
struct voucher_state;

/* The state of voucher_id, with a reference the caller gives back with
 * store_voucher_state_put() (the state stays while it is held). Never
 * NULL. Thread-safe. */
struct voucher_state *store_voucher_state_get(int64_t voucher_id);
/* Give back the reference of store_voucher_state_get(). NULL ok. */
void store_voucher_state_put(struct voucher_state *vs);

/*
 * The voucher's number of stock segments (1: not segmented), read from
 * MySQL on first use and then remembered (segments are made with the
 * voucher and never change). Returns 0 or as store_mysql_error().
 */
int store_voucher_segments_get(struct store *st, struct voucher_state *vs,
                               unsigned *n);

/* The same without store_retry(): for use inside a transaction. */
int store_voucher_segments_read(struct store *st, struct voucher_state *vs,
                                unsigned *n);

/*
 * Whether the voucher sells in async mode, read from MySQL on first use
 * (a plain read, no lock: for use inside a transaction) and then
 * remembered (the mode is fixed when it goes on sale). 0 or as
 * store_mysql_error().
 */
int store_voucher_async_read(struct store *st, struct voucher_state *vs,
                             bool *async);

/*
 * Segment seg was seen at 0: skip it for a second (a returned unit makes
 * it sell again; this process clears the mark when it returns one, other
 * processes' marks run out).
 */
bool store_segment_is_empty(struct voucher_state *vs, unsigned seg);
void store_segment_mark_empty(struct voucher_state *vs, unsigned seg);
void store_segment_mark_stocked(struct voucher_state *vs, unsigned seg);

/*
 * Read orders ids[0..n) (ascending, no repeats) as every read returns
 * them into out[i], found[i] set when id i exists (orders.c). No lock;
 * 0 or as store_mysql_error().
 */
int store_orders_read(struct store *st, const int64_t *ids, size_t n,
                      struct store_order *out, bool *found);

/* ---- units owed to async sales (unit_returns.c) ---- */

/*
 * Inside the transaction that closes order_id of user_id (cancelled or
 * expired, its unit back in MySQL): if voucher_id sells in async mode,
 * record that its Redis sale is owed the unit. 0 or as
 * store_mysql_error().
 */
int store_unit_return_owe(struct store *st, int64_t order_id,
                          int64_t voucher_id, int64_t user_id);

/* Read voucher id inside the caller's transaction (no retry). */
int store_voucher_get_locked(struct store *st, int64_t id,
                             struct store_voucher *v);

/* MYSQL_BIND fillers; the bind must be zeroed first. */
void bind_i64(MYSQL_BIND *b, int64_t *v);
void bind_str_in(MYSQL_BIND *b, const char *s, unsigned long *len);
void bind_str_out(MYSQL_BIND *b, char *buf, size_t cap, unsigned long *len);
void bind_time(MYSQL_BIND *b, MYSQL_TIME *t);
/* A DATETIME result that may be NULL: *is_null says which after a fetch. */
void bind_time_null(MYSQL_BIND *b, MYSQL_TIME *t, char *is_null);

void time_from_epoch(MYSQL_TIME *t, int64_t epoch_s);
int64_t time_to_epoch(const MYSQL_TIME *t);
/* The same with the fraction: milliseconds since the epoch. */
int64_t time_to_epoch_ms(const MYSQL_TIME *t);
void time_from_epoch_ms(MYSQL_TIME *t, int64_t epoch_ms);

/* How long a new order may stay unpaid (cfg->pay_timeout_s or the
 * default), for the INSERTs' deadline. */
int64_t store_pay_timeout_s(const struct store *st);

#endif
