/*
 * internal.h - what the store's files share: the per-thread connection
 * state, the prepared statement table and small MYSQL_BIND helpers. Not
 * part of the store's API.
 */
#ifndef SECKILL_STORE_INTERNAL_H
#define SECKILL_STORE_INTERNAL_H

#include <mysql.h>

#include "store/store.h"

enum stmt_id {
    STMT_USER_LOGIN,
    STMT_VOUCHER_INSERT,
    STMT_SECKILL_INSERT,
    STMT_VOUCHER_GET,
    STMT_VOUCHER_LIST_SHOP,
    STMT_VOUCHER_LIST_ALL,
    STMT_SECKILL_GET,
    STMT_ORDER_EXISTS,
    STMT_ORDER_INSERT,
    STMT_STOCK_DECR,
    STMT_ORDER_GET,
    STMT_ORDER_LIST,
    STMT_COUNT
};

struct store {
    const struct store_config *cfg;
    MYSQL *my;                     /* NULL while disconnected */
    MYSQL_STMT *stmts[STMT_COUNT]; /* prepared on first use */
    int64_t my_next_try_ms;        /* no reconnect before (monotonic) */
    redisContext *rc;              /* NULL while disconnected */
    int64_t rc_next_try_ms;
};

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

/* Run a fixed statement such as "START TRANSACTION" or "ROLLBACK". */
int store_query(struct store *st, const char *sql);

/*
 * Run fn(st, arg) as one operation: first drop the MySQL connection if the
 * server closed it while idle; then, if fn failed with -ENOTCONN on a
 * connection that was open before, run it once more on a fresh one. fn
 * must have had no durable effect when it returns -ENOTCONN.
 */
int store_retry(struct store *st, int (*fn)(struct store *, void *), void *arg);

/* MYSQL_BIND fillers; the bind must be zeroed first. */
void bind_i64(MYSQL_BIND *b, int64_t *v);
void bind_str_in(MYSQL_BIND *b, const char *s, unsigned long *len);
void bind_str_out(MYSQL_BIND *b, char *buf, size_t cap, unsigned long *len);
void bind_time(MYSQL_BIND *b, MYSQL_TIME *t);

void time_from_epoch(MYSQL_TIME *t, int64_t epoch_s);
int64_t time_to_epoch(const MYSQL_TIME *t);

#endif
