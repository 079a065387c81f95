/*
 * conn.c - the store's connections: MySQL (Connector/C, prepared
 * statements, no auto-reconnect) and Redis (hiredis), each opened lazily,
 * dropped on a connection error and reopened on next use; with sales
 * sharded over several primaries, the thread's store of each other shard
 * (its own MySQL connection, made on first use). Also every SQL
 * statement the service runs, in one table.
 */
#include "store/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <errmsg.h>
#include <mysqld_error.h>

#include "common/metrics.h"
#include "common/sqlflavour.h"
#include "common/util.h"

/* A dead server is retried at most this often, so requests fail fast. */
#define RETRY_BACKOFF_MS 200

/*
 * A voucher's stock: its seckill_vouchers row plus its segments (0 rows
 * unless it was created with SECKILL_STOCK_SEGMENTS > 1). NULL for a
 * voucher without a stock row, as before.
 */
#define STOCK_TOTAL                                                            \
    "CAST(s.stock + COALESCE((SELECT SUM(g.stock) FROM "                       \
    "seckill_stock_segments g WHERE g.voucher_id = s.voucher_id), 0) "         \
    "AS SIGNED)"

/* Fixed lists of placeholders (2^i) and order rows (1..16, 32, 64) for the
 * merged purchase: the SQL text stays constant, a batch binds its rows
 * into one or a few of them. */
#define LIST_1 "?"
#define LIST_2 LIST_1 ", " LIST_1
#define LIST_4 LIST_2 ", " LIST_2
#define LIST_8 LIST_4 ", " LIST_4
#define LIST_16 LIST_8 ", " LIST_8
#define LIST_32 LIST_16 ", " LIST_16
#define LIST_64 LIST_32 ", " LIST_32
#define ROWS_1 "(?, ?, ?, 1, NOW(3) + INTERVAL ? SECOND)"
#define ROWS_2 ROWS_1 ", " ROWS_1
#define ROWS_3 ROWS_2 ", " ROWS_1
#define ROWS_4 ROWS_2 ", " ROWS_2
#define ROWS_5 ROWS_4 ", " ROWS_1
#define ROWS_6 ROWS_4 ", " ROWS_2
#define ROWS_7 ROWS_4 ", " ROWS_3
#define ROWS_8 ROWS_4 ", " ROWS_4
#define ROWS_9 ROWS_8 ", " ROWS_1
#define ROWS_10 ROWS_8 ", " ROWS_2
#define ROWS_11 ROWS_8 ", " ROWS_3
#define ROWS_12 ROWS_8 ", " ROWS_4
#define ROWS_13 ROWS_8 ", " ROWS_5
#define ROWS_14 ROWS_8 ", " ROWS_6
#define ROWS_15 ROWS_8 ", " ROWS_7
#define ROWS_16 ROWS_8 ", " ROWS_8
#define ROWS_32 ROWS_16 ", " ROWS_16
#define ROWS_64 ROWS_32 ", " ROWS_32
/* Active orders only: a cancelled or expired one does not stop a re-buy. */
#define ORDERS_EXIST                                                           \
    "SELECT user_id FROM voucher_orders WHERE voucher_id = ? AND status IN "   \
    "(1, 2) AND user_id IN "
#define ORDERS_INSERT                                                          \
    "INSERT INTO voucher_orders (id, user_id, voucher_id, status, "            \
    "pay_deadline) VALUES "
/* The async writer's rows: the deadline is computed from when Redis
 * accepted the order, and the row keeps its place in the sale's stream. */
#define ASYNC_INSERT                                                           \
    "INSERT INTO voucher_orders (id, user_id, voucher_id, status, "            \
    "pay_deadline, stream_pos) VALUES "
#define AROWS_1 "(?, ?, ?, 1, ?, ?)"
#define AROWS_2 AROWS_1 ", " AROWS_1
#define AROWS_3 AROWS_2 ", " AROWS_1
#define AROWS_4 AROWS_2 ", " AROWS_2
#define AROWS_8 AROWS_4 ", " AROWS_4
#define AROWS_16 AROWS_8 ", " AROWS_8
#define AROWS_32 AROWS_16 ", " AROWS_16
#define AROWS_64 AROWS_32 ", " AROWS_32
#define IDS_EXIST                                                              \
    "SELECT id, user_id, voucher_id FROM voucher_orders WHERE id IN "
#define RETURNS_DONE "DELETE FROM async_unit_returns WHERE order_id IN "
/* The orders of a merged payment or cancel, locked in the order of
 * their ids (two batches that share orders cannot deadlock on them). */
#define ORDERS_LOCK                                                            \
    "SELECT o.id, o.user_id, o.voucher_id, o.status, COALESCE(o.txn_id, ''), " \
    "o.pay_deadline IS NOT NULL AND o.pay_deadline <= NOW(3), v.pay_value, "   \
    "CAST(NOW(3) AS CHAR) FROM voucher_orders o JOIN vouchers v ON v.id = "    \
    "o.voucher_id WHERE o.id "                                                 \
    "IN "
#define ORDERS_LOCK_END ") ORDER BY o.id FOR UPDATE"
/* Merged payments: each order its own txn_id; unpaid ones only. */
#define WHEN_1 "WHEN ? THEN ? "
#define WHEN_2 WHEN_1 WHEN_1
#define WHEN_4 WHEN_2 WHEN_2
#define WHEN_8 WHEN_4 WHEN_4
#define WHEN_16 WHEN_8 WHEN_8
#define WHEN_32 WHEN_16 WHEN_16
#define WHEN_64 WHEN_32 WHEN_32
#define ORDERS_PAY(w, list)                                                    \
    "UPDATE voucher_orders SET status = 2, pay_time = ?, txn_id = CASE id " w  \
    "END WHERE status = 1 AND id IN (" list ")"
#define ORDERS_CLOSE                                                           \
    "UPDATE voucher_orders SET status = ?, close_time = NOW(3) WHERE status "  \
    "= "                                                                       \
    "1 AND id IN "
/* Payments' transaction ids reserved for their orders (shard.c): the
 * ids of a statement are distinct (a padded repeat changes nothing), and
 * the rows exist by the time they are read back, so the read locks no
 * gap. */
#define TXNS_RESERVE "INSERT INTO payment_txns (txn_id, order_id) VALUES "
#define TXNS_RESERVE_END " ON DUPLICATE KEY UPDATE txn_id = txn_id"
#define PAIRS_1 "(?, ?)"
#define PAIRS_2 PAIRS_1 ", " PAIRS_1
#define PAIRS_4 PAIRS_2 ", " PAIRS_2
#define PAIRS_8 PAIRS_4 ", " PAIRS_4
#define PAIRS_16 PAIRS_8 ", " PAIRS_8
#define PAIRS_32 PAIRS_16 ", " PAIRS_16
#define PAIRS_64 PAIRS_32 ", " PAIRS_32
#define TXNS_OWNER "SELECT txn_id, order_id FROM payment_txns WHERE txn_id IN ("
#define TXNS_OWNER_END ") FOR UPDATE"
/* An order as every read returns it. */
#define ORDER_COLUMNS                                                          \
    "id, user_id, voucher_id, status, created, pay_deadline, pay_time, "       \
    "close_time "

static const char *const stmt_sql[STMT_COUNT] = {
    [STMT_USER_LOGIN] = "INSERT INTO users (phone) VALUES (?) "
                        "ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)",
    /* Phones stored before they were kept in E.164 form (`seckilld users
     * normalize`): keyset pages of them, the owner of a phone (locked),
     * a phone rewritten (the old form kept), a row merged into another. */
    [STMT_USERS_LEGACY] = "SELECT id, phone FROM users WHERE id > ? AND "
                          "phone NOT LIKE '+%' ORDER BY id LIMIT ?",
    [STMT_USERS_LEGACY_ANY] =
        "SELECT 1 FROM users WHERE phone NOT LIKE '+%' LIMIT 1",
    [STMT_USER_BY_PHONE_LOCK] = "SELECT id FROM users WHERE phone = ? "
                                "FOR UPDATE",
    [STMT_USER_PHONE_SET] = "UPDATE users SET phone_raw = COALESCE(phone_raw, "
                            "phone), phone = ? WHERE id = ?",
    [STMT_USER_MERGE] = "UPDATE users SET phone_raw = COALESCE(phone_raw, "
                        "phone), phone = NULL, merged_into = ? WHERE id = ?",
    [STMT_VOUCHER_INSERT] =
        "INSERT INTO vouchers (shop_id, title, sub_title, rules, pay_value, "
        "actual_value, type) VALUES (?, ?, ?, ?, ?, ?, ?)",
    [STMT_VOUCHER_INSERT_ID] =
        "INSERT INTO vouchers (shop_id, title, sub_title, rules, pay_value, "
        "actual_value, type, id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    [STMT_SECKILL_INSERT] =
        "INSERT INTO seckill_vouchers (voucher_id, stock, initial_stock, "
        "begin_time, end_time, purchase_mode, sale_stamp, admission) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?)",
    [STMT_VOUCHER_GET] =
        "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, "
        "v.actual_value, v.type, " STOCK_TOTAL ", s.begin_time, s.end_time, "
        "v.created, v.updated, s.purchase_mode, s.admission, s.halt FROM "
        "vouchers v LEFT JOIN seckill_vouchers s ON s.voucher_id = v.id "
        "WHERE v.id = ?",
    [STMT_VOUCHER_LIST_SHOP] =
        "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, "
        "v.actual_value, v.type, " STOCK_TOTAL ", s.begin_time, s.end_time, "
        "v.created, v.updated, s.purchase_mode, s.admission, s.halt FROM "
        "vouchers v LEFT JOIN seckill_vouchers s ON s.voucher_id = v.id "
        "WHERE v.shop_id = ? AND v.id < ? ORDER BY v.id DESC LIMIT ?",
    [STMT_VOUCHER_LIST_ALL] =
        "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, "
        "v.actual_value, v.type, " STOCK_TOTAL ", s.begin_time, s.end_time, "
        "v.created, v.updated, s.purchase_mode, s.admission, s.halt FROM "
        "vouchers v LEFT JOIN seckill_vouchers s ON s.voucher_id = v.id "
        "WHERE v.id < ? ORDER BY v.id DESC LIMIT ?",
    /* The listing's snapshot, in two parts of at most ? rows each: the
     * sales on at ? (begun, not ended), ending soonest first; then those
     * beginning after it and before ?, beginning soonest first. */
    [STMT_SALES_LIST] =
        "(SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, "
        "v.actual_value, v.type, " STOCK_TOTAL ", s.begin_time, s.end_time, "
        "v.created, v.updated, s.purchase_mode, s.admission, s.halt FROM "
        "seckill_vouchers s JOIN vouchers v ON v.id = s.voucher_id "
        "WHERE v.type = 1 AND s.begin_time <= ? AND s.end_time > ? "
        "ORDER BY s.end_time, s.voucher_id LIMIT ?) UNION ALL "
        "(SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, "
        "v.actual_value, v.type, " STOCK_TOTAL ", s.begin_time, s.end_time, "
        "v.created, v.updated, s.purchase_mode, s.admission, s.halt FROM "
        "seckill_vouchers s JOIN vouchers v ON v.id = s.voucher_id "
        "WHERE v.type = 1 AND s.begin_time > ? AND s.begin_time < ? "
        "ORDER BY s.begin_time, s.voucher_id LIMIT ?)",
    [STMT_SECKILL_GET] =
        "SELECT v.type, " STOCK_TOTAL ", s.begin_time, s.end_time, "
        "s.purchase_mode, s.admission, s.halt FROM vouchers v "
        "LEFT JOIN seckill_vouchers s ON s.voucher_id = v.id WHERE v.id = ?",
    [STMT_ORDER_EXISTS] =
        "SELECT 1 FROM voucher_orders WHERE user_id = ? AND voucher_id = ? "
        "AND status IN (1, 2) LIMIT 1",
    [STMT_ORDER_INSERT] = ORDERS_INSERT ROWS_1,
    /* The CAS of seed 002 (2.3): only decrement while stock remains, and
     * while the sale is neither paused nor stopped (halt). */
    [STMT_STOCK_DECR] = "UPDATE seckill_vouchers SET stock = stock - 1 "
                        "WHERE voucher_id = ? AND stock > 0 AND halt = 0",
    [STMT_ORDER_GET] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id = ?",
    [STMT_ORDER_LIST] = "SELECT " ORDER_COLUMNS "FROM voucher_orders "
                        "WHERE user_id = ? AND id < ? ORDER BY id DESC "
                        "LIMIT ?",
    /* A sale's orders (status 0: all), keyset pages by id both ways. */
    [STMT_VOUCHER_ORDERS_DESC] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE voucher_id = ? "
        "AND (? = 0 OR status = ?) AND id < ? ORDER BY id DESC LIMIT ?",
    [STMT_VOUCHER_ORDERS_ASC] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE voucher_id = ? "
        "AND (? = 0 OR status = ?) AND id > ? ORDER BY id LIMIT ?",
    [STMT_STOCK_GET] =
        "SELECT stock, halt FROM seckill_vouchers WHERE voucher_id = ?",
    /* The merged CAS: k purchases at once, or none. */
    [STMT_STOCK_TAKE] = "UPDATE seckill_vouchers SET stock = stock - ? "
                        "WHERE voucher_id = ? AND stock >= ?",
    [STMT_ORDERS_EXIST_1] = ORDERS_EXIST "(" LIST_1 ")",
    [STMT_ORDERS_EXIST_2] = ORDERS_EXIST "(" LIST_2 ")",
    [STMT_ORDERS_EXIST_4] = ORDERS_EXIST "(" LIST_4 ")",
    [STMT_ORDERS_EXIST_8] = ORDERS_EXIST "(" LIST_8 ")",
    [STMT_ORDERS_EXIST_16] = ORDERS_EXIST "(" LIST_16 ")",
    [STMT_ORDERS_EXIST_32] = ORDERS_EXIST "(" LIST_32 ")",
    [STMT_ORDERS_EXIST_64] = ORDERS_EXIST "(" LIST_64 ")",
    [STMT_ORDERS_INSERT_2] = ORDERS_INSERT ROWS_2,
    [STMT_ORDERS_INSERT_3] = ORDERS_INSERT ROWS_3,
    [STMT_ORDERS_INSERT_4] = ORDERS_INSERT ROWS_4,
    [STMT_ORDERS_INSERT_5] = ORDERS_INSERT ROWS_5,
    [STMT_ORDERS_INSERT_6] = ORDERS_INSERT ROWS_6,
    [STMT_ORDERS_INSERT_7] = ORDERS_INSERT ROWS_7,
    [STMT_ORDERS_INSERT_8] = ORDERS_INSERT ROWS_8,
    [STMT_ORDERS_INSERT_9] = ORDERS_INSERT ROWS_9,
    [STMT_ORDERS_INSERT_10] = ORDERS_INSERT ROWS_10,
    [STMT_ORDERS_INSERT_11] = ORDERS_INSERT ROWS_11,
    [STMT_ORDERS_INSERT_12] = ORDERS_INSERT ROWS_12,
    [STMT_ORDERS_INSERT_13] = ORDERS_INSERT ROWS_13,
    [STMT_ORDERS_INSERT_14] = ORDERS_INSERT ROWS_14,
    [STMT_ORDERS_INSERT_15] = ORDERS_INSERT ROWS_15,
    [STMT_ORDERS_INSERT_16] = ORDERS_INSERT ROWS_16,
    [STMT_ORDERS_INSERT_32] = ORDERS_INSERT ROWS_32,
    [STMT_ORDERS_INSERT_64] = ORDERS_INSERT ROWS_64,
    [STMT_SEGMENT_INSERT] = "INSERT INTO seckill_stock_segments (voucher_id, "
                            "segment, stock) VALUES (?, ?, ?)",
    [STMT_SEGMENT_COUNT] =
        "SELECT COUNT(*) FROM seckill_stock_segments WHERE voucher_id = ?",
    /* The CAS of one segment (seed 003, section 8). */
    [STMT_SEGMENT_DECR] = "UPDATE seckill_stock_segments SET stock = stock - 1 "
                          "WHERE voucher_id = ? AND segment = ? AND stock > 0 "
                          "AND halt = 0",
    /* The order lifecycle (lifecycle.c). The order row is locked first,
     * the voucher's stock row last, as in a purchase. */
    [STMT_ORDER_LOCK] =
        "SELECT o.user_id, o.voucher_id, o.status, COALESCE(o.txn_id, ''), "
        "o.pay_deadline IS NOT NULL AND o.pay_deadline <= NOW(3), "
        "v.pay_value, CAST(NOW(3) AS CHAR) FROM voucher_orders o JOIN "
        "vouchers v ON v.id = o.voucher_id WHERE o.id = ? FOR UPDATE",
    [STMT_ORDER_CLOSE] = "UPDATE voucher_orders SET status = ?, close_time = "
                         "NOW(3) WHERE id = ? AND status = 1",
    [STMT_ORDER_PAY] = "UPDATE voucher_orders SET status = 2, pay_time = ?, "
                       "txn_id = ? WHERE id = ? AND status = 1",
    [STMT_STOCK_RETURN] = "UPDATE seckill_vouchers SET stock = stock + ? "
                          "WHERE voucher_id = ?",
    [STMT_SEGMENT_RETURN] = "UPDATE seckill_stock_segments SET stock = "
                            "stock + ? WHERE voucher_id = ? AND segment = ?",
    /* Unpaid orders past their deadline, oldest first; rows another
     * instance's expiry holds are skipped, not waited for. Found by a
     * read of the index alone (a range that starts past the orders
     * without a deadline, which sort first), then locked by id: a
     * locking read in the index's order from its start locked every
     * unpaid order without a deadline each round, however many. */
    [STMT_EXPIRE_SCAN] =
        "SELECT o.id, o.user_id, o.voucher_id, TIMESTAMPDIFF(MICROSECOND, "
        "o.pay_deadline, NOW(3)) FROM (SELECT id FROM voucher_orders WHERE "
        "status = 1 AND pay_deadline <= NOW(3) ORDER BY pay_deadline "
        "LIMIT ?) d JOIN voucher_orders o ON o.id = d.id WHERE o.status = 1 "
        "AND o.pay_deadline <= NOW(3) ORDER BY o.pay_deadline "
        "FOR UPDATE SKIP LOCKED",
    /* Units owed to async sales (unit_returns.c). */
    [STMT_VOUCHER_MODE] =
        "SELECT purchase_mode FROM seckill_vouchers WHERE voucher_id = ?",
    [STMT_UNIT_RETURN_OWE] = "INSERT IGNORE INTO async_unit_returns "
                             "(order_id, voucher_id, user_id) VALUES (?, ?, ?)",
    [STMT_UNIT_RETURNS_LIST] =
        "SELECT order_id, voucher_id, user_id FROM async_unit_returns WHERE "
        "owed_since <= NOW(3) - INTERVAL ? MICROSECOND ORDER BY owed_since "
        "LIMIT ?",
    [STMT_UNIT_RETURNS_DONE_1] = RETURNS_DONE "(" LIST_1 ")",
    [STMT_UNIT_RETURNS_DONE_2] = RETURNS_DONE "(" LIST_2 ")",
    [STMT_UNIT_RETURNS_DONE_4] = RETURNS_DONE "(" LIST_4 ")",
    [STMT_UNIT_RETURNS_DONE_8] = RETURNS_DONE "(" LIST_8 ")",
    [STMT_UNIT_RETURNS_DONE_16] = RETURNS_DONE "(" LIST_16 ")",
    [STMT_UNIT_RETURNS_DONE_32] = RETURNS_DONE "(" LIST_32 ")",
    [STMT_UNIT_RETURNS_DONE_64] = RETURNS_DONE "(" LIST_64 ")",
    [STMT_ORDERS_LOCK_1] = ORDERS_LOCK "(" LIST_1 ORDERS_LOCK_END,
    [STMT_ORDERS_LOCK_2] = ORDERS_LOCK "(" LIST_2 ORDERS_LOCK_END,
    [STMT_ORDERS_LOCK_4] = ORDERS_LOCK "(" LIST_4 ORDERS_LOCK_END,
    [STMT_ORDERS_LOCK_8] = ORDERS_LOCK "(" LIST_8 ORDERS_LOCK_END,
    [STMT_ORDERS_LOCK_16] = ORDERS_LOCK "(" LIST_16 ORDERS_LOCK_END,
    [STMT_ORDERS_LOCK_32] = ORDERS_LOCK "(" LIST_32 ORDERS_LOCK_END,
    [STMT_ORDERS_LOCK_64] = ORDERS_LOCK "(" LIST_64 ORDERS_LOCK_END,
    [STMT_ORDERS_GET_1] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_1 ")",
    [STMT_ORDERS_GET_2] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_2 ")",
    [STMT_ORDERS_GET_4] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_4 ")",
    [STMT_ORDERS_GET_8] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_8 ")",
    [STMT_ORDERS_GET_16] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_16 ")",
    [STMT_ORDERS_GET_32] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_32 ")",
    [STMT_ORDERS_GET_64] =
        "SELECT " ORDER_COLUMNS "FROM voucher_orders WHERE id IN (" LIST_64 ")",
    [STMT_ORDERS_PAY_1] = ORDERS_PAY(WHEN_1, LIST_1),
    [STMT_ORDERS_PAY_2] = ORDERS_PAY(WHEN_2, LIST_2),
    [STMT_ORDERS_PAY_4] = ORDERS_PAY(WHEN_4, LIST_4),
    [STMT_ORDERS_PAY_8] = ORDERS_PAY(WHEN_8, LIST_8),
    [STMT_ORDERS_PAY_16] = ORDERS_PAY(WHEN_16, LIST_16),
    [STMT_ORDERS_PAY_32] = ORDERS_PAY(WHEN_32, LIST_32),
    [STMT_ORDERS_PAY_64] = ORDERS_PAY(WHEN_64, LIST_64),
    [STMT_ORDERS_CLOSE_1] = ORDERS_CLOSE "(" LIST_1 ")",
    [STMT_ORDERS_CLOSE_2] = ORDERS_CLOSE "(" LIST_2 ")",
    [STMT_ORDERS_CLOSE_4] = ORDERS_CLOSE "(" LIST_4 ")",
    [STMT_ORDERS_CLOSE_8] = ORDERS_CLOSE "(" LIST_8 ")",
    [STMT_ORDERS_CLOSE_16] = ORDERS_CLOSE "(" LIST_16 ")",
    [STMT_ORDERS_CLOSE_32] = ORDERS_CLOSE "(" LIST_32 ")",
    [STMT_ORDERS_CLOSE_64] = ORDERS_CLOSE "(" LIST_64 ")",
    /* The asynchronous mode (async_orders.c). */
    [STMT_IDS_EXIST_1] = IDS_EXIST "(" LIST_1 ")",
    [STMT_IDS_EXIST_2] = IDS_EXIST "(" LIST_2 ")",
    [STMT_IDS_EXIST_4] = IDS_EXIST "(" LIST_4 ")",
    [STMT_IDS_EXIST_8] = IDS_EXIST "(" LIST_8 ")",
    [STMT_IDS_EXIST_16] = IDS_EXIST "(" LIST_16 ")",
    [STMT_IDS_EXIST_32] = IDS_EXIST "(" LIST_32 ")",
    [STMT_IDS_EXIST_64] = IDS_EXIST "(" LIST_64 ")",
    [STMT_ASYNC_INSERT_1] = ASYNC_INSERT AROWS_1,
    [STMT_ASYNC_INSERT_2] = ASYNC_INSERT AROWS_2,
    [STMT_ASYNC_INSERT_4] = ASYNC_INSERT AROWS_4,
    [STMT_ASYNC_INSERT_8] = ASYNC_INSERT AROWS_8,
    [STMT_ASYNC_INSERT_16] = ASYNC_INSERT AROWS_16,
    [STMT_ASYNC_INSERT_32] = ASYNC_INSERT AROWS_32,
    [STMT_ASYNC_INSERT_64] = ASYNC_INSERT AROWS_64,
    [STMT_ASYNC_VOUCHERS] =
        "SELECT voucher_id FROM seckill_vouchers WHERE purchase_mode = 1 "
        "AND end_time > NOW() - INTERVAL ? SECOND ORDER BY voucher_id DESC",
    [STMT_ASYNC_SALE] =
        "SELECT COALESCE(s.initial_stock, s.stock), s.stock, s.begin_time, "
        "s.end_time, (SELECT COUNT(*) FROM voucher_orders o WHERE "
        "o.voucher_id = s.voucher_id), (SELECT COALESCE(MAX(o.stream_pos), 0) "
        "FROM voucher_orders o WHERE o.voucher_id = s.voucher_id), "
        "COALESCE(s.sale_stamp, 0), s.halt, s.revision, s.restocked "
        "FROM seckill_vouchers s WHERE s.voucher_id = ? AND "
        "s.purchase_mode = 1",
    /* Orders from before stream positions were kept (NULL) count as
     * earlier than any place in the stream. */
    [STMT_ASYNC_COUNTS] =
        "SELECT COALESCE(s.initial_stock, -1), "
        "COALESCE(SUM(o.status IN (1, 2)), 0), COUNT(o.id), s.restocked, "
        "s.revision, "
        "(SELECT COUNT(*) FROM async_unit_returns u JOIN voucher_orders r "
        "ON r.id = u.order_id WHERE u.voucher_id = s.voucher_id AND "
        "(r.stream_pos IS NULL OR r.stream_pos <= ?)) "
        "FROM seckill_vouchers s LEFT JOIN voucher_orders o ON "
        "o.voucher_id = s.voucher_id AND (o.stream_pos IS NULL OR "
        "o.stream_pos <= ?) WHERE s.voucher_id = ? "
        "GROUP BY s.voucher_id, s.initial_stock, s.restocked, s.revision",
    [STMT_ASYNC_STAMP] = "SELECT COALESCE(sale_stamp, 0) FROM seckill_vouchers "
                         "WHERE voucher_id = ? AND purchase_mode = 1",
    [STMT_ACTIVE_USERS] = "SELECT user_id, id FROM voucher_orders WHERE "
                          "voucher_id = ? AND status IN (1, 2)",
    [STMT_ACCOUNT_GET] = "SELECT token_gen, banned_at IS NOT NULL FROM "
                         "account_state WHERE role = ? AND account_id = ?",
    /* On a new row the insert id is 0: generation 1. */
    [STMT_ACCOUNT_LOGOUT_ALL] =
        "INSERT INTO account_state (role, account_id, token_gen) "
        "VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE "
        "token_gen = LAST_INSERT_ID(token_gen + 1)",
    [STMT_ACCOUNT_BAN] =
        "INSERT INTO account_state (role, account_id, banned_at, banned_by) "
        "VALUES (1, ?, IF(? = 1, NOW(3), NULL), ?) ON DUPLICATE KEY UPDATE "
        "banned_at = IF(? = 1, COALESCE(banned_at, NOW(3)), NULL), "
        "banned_by = VALUES(banned_by)",
    /* One refund per transaction: the same notification again adds none. */
    [STMT_REFUND_INSERT] =
        "INSERT INTO refunds (order_id, txn_id, amount, reason) VALUES "
        "(?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
    [STMT_REFUNDS_LIST] =
        "SELECT id, order_id, txn_id, amount, reason, status, created, "
        "done_at FROM refunds WHERE (? < 0 OR status = ?) AND id < ? "
        "ORDER BY id DESC LIMIT ?",
    [STMT_REFUND_DONE] = "UPDATE refunds SET status = 1, done_at = NOW(3), "
                         "done_by = ? WHERE id = ? AND status = 0",
    [STMT_REFUND_GET] =
        "SELECT id, order_id, txn_id, amount, reason, status, created, "
        "done_at FROM refunds WHERE id = ?",
    /* 0 for the admin or the target: none. */
    [STMT_AUDIT_INSERT] =
        "INSERT INTO audit_log (admin_id, addr, action, target_type, "
        "target_id, change_json) VALUES (NULLIF(?, 0), ?, ?, ?, "
        "NULLIF(?, 0), ?)",
    [STMT_IDEM_INSERT] =
        "INSERT INTO idempotency_keys (admin_id, idem_key, request_hash, "
        "action, target_type, target_id) VALUES (?, ?, ?, ?, ?, ?)",
    /* A locking read: the row as committed now, not as the transaction's
     * snapshot had it. */
    [STMT_IDEM_GET] =
        "SELECT request_hash, COALESCE(status, 0), COALESCE(answer, ''), "
        "action, target_type, target_id, "
        "TIMESTAMPDIFF(MICROSECOND, created, NOW(3)) DIV 1000 "
        "FROM idempotency_keys WHERE admin_id = ? AND idem_key = ? "
        "LOCK IN SHARE MODE",
    [STMT_IDEM_ANSWER] =
        "UPDATE idempotency_keys SET status = ?, answer = ? "
        "WHERE admin_id = ? AND idem_key = ? AND status IS NULL",
    [STMT_IDEM_TARGET] =
        "UPDATE idempotency_keys SET target_id = ? WHERE admin_id = ? AND "
        "idem_key = ?",
    [STMT_IDEM_SWEEP] =
        "DELETE FROM idempotency_keys WHERE created < NOW(3) - INTERVAL ? "
        "SECOND LIMIT 1000",
    [STMT_OUTBOX_REFUND] =
        "INSERT INTO shard_outbox (kind, order_id, txn_id, amount, reason) "
        "VALUES (1, ?, ?, ?, ?)",
    [STMT_OUTBOX_AUDIT] =
        "INSERT INTO shard_outbox (kind, admin_id, addr, action, "
        "target_type, target_id, change_json) VALUES (2, NULLIF(?, 0), ?, ?, "
        "?, NULLIF(?, 0), ?)",
    [STMT_OUTBOX_LIST] =
        "SELECT id, kind, created, COALESCE(order_id, 0), "
        "COALESCE(txn_id, ''), COALESCE(amount, 0), COALESCE(reason, 0), "
        "COALESCE(admin_id, 0), COALESCE(addr, ''), COALESCE(action, ''), "
        "COALESCE(target_type, ''), COALESCE(target_id, 0), change_json "
        "FROM shard_outbox ORDER BY id LIMIT ?",
    [STMT_OUTBOX_DELETE] = "DELETE FROM shard_outbox WHERE id = ?",
    [STMT_REFUND_MOVE] =
        "INSERT INTO refunds (order_id, txn_id, amount, reason, created) "
        "VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
    [STMT_TXNS_RESERVE_1] = TXNS_RESERVE PAIRS_1 TXNS_RESERVE_END,
    [STMT_TXNS_RESERVE_2] = TXNS_RESERVE PAIRS_2 TXNS_RESERVE_END,
    [STMT_TXNS_RESERVE_4] = TXNS_RESERVE PAIRS_4 TXNS_RESERVE_END,
    [STMT_TXNS_RESERVE_8] = TXNS_RESERVE PAIRS_8 TXNS_RESERVE_END,
    [STMT_TXNS_RESERVE_16] = TXNS_RESERVE PAIRS_16 TXNS_RESERVE_END,
    [STMT_TXNS_RESERVE_32] = TXNS_RESERVE PAIRS_32 TXNS_RESERVE_END,
    [STMT_TXNS_RESERVE_64] = TXNS_RESERVE PAIRS_64 TXNS_RESERVE_END,
    [STMT_TXNS_OWNER_1] = TXNS_OWNER LIST_1 TXNS_OWNER_END,
    [STMT_TXNS_OWNER_2] = TXNS_OWNER LIST_2 TXNS_OWNER_END,
    [STMT_TXNS_OWNER_4] = TXNS_OWNER LIST_4 TXNS_OWNER_END,
    [STMT_TXNS_OWNER_8] = TXNS_OWNER LIST_8 TXNS_OWNER_END,
    [STMT_TXNS_OWNER_16] = TXNS_OWNER LIST_16 TXNS_OWNER_END,
    [STMT_TXNS_OWNER_32] = TXNS_OWNER LIST_32 TXNS_OWNER_END,
    [STMT_TXNS_OWNER_64] = TXNS_OWNER LIST_64 TXNS_OWNER_END,
    [STMT_AUDIT_MOVE] =
        "INSERT INTO audit_log (created, admin_id, addr, action, "
        "target_type, target_id, change_json, origin_shard, origin_id) "
        "VALUES (?, NULLIF(?, 0), ?, ?, ?, NULLIF(?, 0), ?, ?, ?) "
        "ON DUPLICATE KEY UPDATE id = id",
    [STMT_AUDIT_LIST] =
        "SELECT a.id, a.created, COALESCE(a.admin_id, 0), "
        "COALESCE(m.username, ''), a.addr, a.action, a.target_type, "
        "COALESCE(a.target_id, 0), COALESCE(a.change_json, '') "
        "FROM audit_log a LEFT JOIN admins m ON m.id = a.admin_id "
        "WHERE a.id < ? AND (? = '' OR a.target_type = ?) "
        "AND (? = 0 OR a.target_id = ?) ORDER BY a.id DESC LIMIT ?",
    [STMT_ADMIN_INSERT] = "INSERT INTO admins (username, pw_hash) "
                          "VALUES (?, ?)",
    [STMT_ADMIN_GET] = "SELECT id, pw_hash, disabled FROM admins "
                       "WHERE username = ?",
    [STMT_ACCOUNTS_LOAD] =
        "SELECT role, account_id, token_gen, banned_at IS NOT NULL FROM "
        "account_state WHERE token_gen > 0 OR banned_at IS NOT NULL",
    [STMT_VOUCHER_STATS] =
        "SELECT COALESCE(s.initial_stock, -1), " STOCK_TOTAL ", "
        "COALESCE(SUM(o.status = 1), 0), COALESCE(SUM(o.status = 2), 0), "
        "COALESCE(SUM(o.status = 4), 0), COALESCE(SUM(o.status = 7), 0), "
        "s.admission, s.begin_time, s.end_time "
        "FROM seckill_vouchers s LEFT JOIN voucher_orders o ON "
        "o.voucher_id = s.voucher_id WHERE s.voucher_id = ? "
        "GROUP BY s.voucher_id, s.initial_stock, s.stock, s.admission, "
        "s.begin_time, s.end_time",
    /* The merged CAS of the purchase: k at once, or none, while the sale
     * is neither paused nor stopped. */
    [STMT_SALE_TAKE] = "UPDATE seckill_vouchers SET stock = stock - ? "
                       "WHERE voucher_id = ? AND stock >= ? AND halt = 0",
    /* The operator's controls (controls.c): the voucher and its sale row
     * locked first, then the segments, as no purchase does the other way
     * round (a purchase locks only its stock row or one segment). */
    [STMT_CTL_LOCK] =
        "SELECT v.type, s.voucher_id IS NOT NULL, s.begin_time, s.end_time, "
        "COALESCE(s.purchase_mode, 0), COALESCE(s.admission, 0), "
        "COALESCE(s.halt, 0), COALESCE(s.initial_stock, -1), "
        "COALESCE(" STOCK_TOTAL ", 0), v.pay_value, v.actual_value, "
        "(SELECT COUNT(*) FROM seckill_stock_segments g WHERE g.voucher_id "
        "= v.id) FROM vouchers v LEFT JOIN seckill_vouchers s ON "
        "s.voucher_id = v.id WHERE v.id = ? FOR UPDATE",
    [STMT_CTL_READ] = "SELECT revision, restocked, halt, begin_time, end_time, "
                      "COALESCE(initial_stock, -1) FROM seckill_vouchers WHERE "
                      "voucher_id = ?",
    [STMT_CTL_HALT] = "UPDATE seckill_vouchers SET halt = ?, revision = "
                      "revision + 1 WHERE voucher_id = ?",
    [STMT_CTL_SEGMENTS_HALT] =
        "UPDATE seckill_stock_segments SET halt = ? WHERE voucher_id = ?",
    [STMT_CTL_STOP] = "UPDATE seckill_vouchers SET halt = 2, end_time = ?, "
                      "begin_time = LEAST(begin_time, ?), revision = "
                      "revision + 1 WHERE voucher_id = ?",
    /* Stock on the row (0 for a segmented voucher: the segments get it),
     * the initial stock and the restocks by the same number. */
    [STMT_CTL_RESTOCK] =
        "UPDATE seckill_vouchers SET stock = stock + ?, initial_stock = "
        "initial_stock + ?, restocked = restocked + ?, revision = revision "
        "+ 1 WHERE voucher_id = ?",
    [STMT_CTL_VOUCHER_SET] =
        "UPDATE vouchers SET title = ?, sub_title = ?, rules = ?, "
        "pay_value = ?, actual_value = ?, updated = NOW() WHERE id = ?",
    [STMT_CTL_SALE_SET] =
        "UPDATE seckill_vouchers SET begin_time = ?, end_time = ?, revision "
        "= revision + 1 WHERE voucher_id = ?",
    [STMT_CTL_SEGMENT_SET] = "UPDATE seckill_stock_segments SET stock = ? "
                             "WHERE voucher_id = ? AND segment = ?",
    [STMT_CTL_ORDERS_ANY] =
        "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = ?",
    /* Its sale row and segments go with it (ON DELETE CASCADE). */
    [STMT_CTL_DELETE] = "DELETE FROM vouchers WHERE id = ?",
};

struct store *store_new(const struct store_config *cfg)
{
    struct store *st = xcalloc(1, sizeof(*st));
    st->cfg = cfg;
    return st;
}

static void mysql_drop(struct store *st)
{
    for (int i = 0; i < STMT_COUNT; i++) {
        if (st->stmts[i])
            mysql_stmt_close(st->stmts[i]);
        st->stmts[i] = NULL;
    }
    if (st->my)
        mysql_close(st->my);
    st->my = NULL;
    st->my_nonblock = false;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    mysql_drop(st);
    if (st->link.rc)
        redisFree(st->link.rc);
    redis_cluster_free(st->link.cluster);
    store_free(st->replica);
    if (st->shard)
        for (unsigned i = 1; i < store_shard_count(st); i++)
            store_free(st->shard[i]);
    free(st->shard);
    free(st);
}

/* Logged once per process: which server the store talks to. */
static atomic_int flavour_logged;

int store_mysql_open(const struct store_config *c, unsigned read_timeout_s,
                     MYSQL **out, char *why, size_t whylen)
{
    unsigned ct = (c->connect_timeout_ms + 999) / 1000;
    unsigned wt = (c->io_timeout_ms + 999) / 1000;
    unsigned proto = MYSQL_PROTOCOL_TCP;
    enum sql_flavour flavour;
    MYSQL *my = mysql_init(NULL);

    *out = NULL;
    if (!my) {
        snprintf(why, whylen, "mysql_init failed");
        return -ENOTCONN;
    }
    mysql_options(my, MYSQL_OPT_PROTOCOL, &proto);
    mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    if (read_timeout_s)
        mysql_options(my, MYSQL_OPT_READ_TIMEOUT, &read_timeout_s);
    mysql_options(my, MYSQL_OPT_WRITE_TIMEOUT, &wt);
    mysql_options(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    /* DATETIME columns hold UTC; CURRENT_TIMESTAMP must agree. */
    mysql_options(my, MYSQL_INIT_COMMAND, "SET time_zone = '+00:00'");
    if (!mysql_real_connect(my, c->mysql_host, c->mysql_user, c->mysql_pass,
                            c->mysql_db, c->mysql_port, NULL, 0))
        goto fail;
    /* A client cut off in the middle of a purchase must not hold the hot
     * row's lock until the server notices the dead socket, and a purchase
     * waiting for a row lock gives up after a few seconds (retried, then
     * 503) instead of MariaDB's 50 s: the settings this server knows. */
    flavour = sql_flavour_of(mysql_get_server_info(my));
    if (mysql_real_query(my, sql_session_settings(flavour),
                         strlen(sql_session_settings(flavour))))
        goto fail;
    /* A replica's connections only read: make sure of it. */
    if (c->read_only &&
        mysql_real_query(my, "SET SESSION TRANSACTION READ ONLY",
                         strlen("SET SESSION TRANSACTION READ ONLY")))
        goto fail;
    *out = my;
    return 0;
fail:
    snprintf(why, whylen, "errno=%u err=\"%s\"", mysql_errno(my),
             mysql_error(my));
    mysql_close(my);
    return -ENOTCONN;
}

int store_mysql_ensure(struct store *st)
{
    const struct store_config *c = st->cfg;
    int64_t now = util_mono_ms();
    char why[256];
    MYSQL *my;

    if (st->my)
        return 0;
    if (now < st->my_next_try_ms)
        return -ENOTCONN;
    /* Longer than the server's own bounds on lock waits and idle
     * transactions (common/sqlflavour.h): the server ends a stuck
     * statement first, so a retry never races its own first attempt. */
    if (store_mysql_open(c, SQL_READ_TIMEOUT_S, &my, why, sizeof(why))) {
        log_warn("mysql connect failed", "host=%s port=%u %s", c->mysql_host,
                 c->mysql_port, why);
        metrics_count(METRIC_CONN_ERROR_MYSQL, 1);
        st->my_next_try_ms = now + RETRY_BACKOFF_MS;
        return -ENOTCONN;
    }
    if (!atomic_exchange(&flavour_logged, 1))
        log_info("mysql server", "flavour=%s version=\"%s\" host=%s port=%u",
                 sql_flavour_name(sql_flavour_of(mysql_get_server_info(my))),
                 mysql_get_server_info(my), c->mysql_host, c->mysql_port);
    st->my = my;
    return 0;
}

int store_mysql_error(struct store *st, MYSQL_STMT *stmt, const char *op)
{
    unsigned e = stmt ? mysql_stmt_errno(stmt) : mysql_errno(st->my);
    const char *msg = stmt ? mysql_stmt_error(stmt) : mysql_error(st->my);

    if (sql_error_is_disconnect(e)) {
        log_warn("mysql connection lost", "op=%s errno=%u err=\"%s\"", op, e,
                 msg);
        metrics_count(METRIC_CONN_ERROR_MYSQL, 1);
        mysql_drop(st);
        return -ENOTCONN;
    }
    if (e == ER_LOCK_DEADLOCK || e == ER_LOCK_WAIT_TIMEOUT) {
        log_warn("mysql transaction aborted", "op=%s errno=%u", op, e);
        return -EDEADLK;
    }
    if (e == ER_DUP_ENTRY)
        return -EEXIST;
    log_error("mysql statement failed", "op=%s errno=%u err=\"%s\"", op, e,
              msg);
    return -EIO;
}

MYSQL_STMT *store_stmt_get(struct store *st, enum stmt_id id, int *err)
{
    MYSQL_STMT *s = st->stmts[id];

    if (s)
        return s;
    s = mysql_stmt_init(st->my);
    if (!s) {
        *err = store_mysql_error(st, NULL, "stmt_init");
        return NULL;
    }
    if (mysql_stmt_prepare(s, stmt_sql[id], strlen(stmt_sql[id]))) {
        *err = store_mysql_error(st, s, "stmt_prepare");
        mysql_stmt_close(s); /* safe even if the connection was dropped */
        return NULL;
    }
    st->stmts[id] = s;
    return s;
}

int store_stmt_exec(struct store *st, enum stmt_id id, MYSQL_BIND *params,
                    MYSQL_BIND *results, MYSQL_STMT **out)
{
    int err = store_mysql_ensure(st);
    MYSQL_STMT *s;

    if (err)
        return err;
    s = store_stmt_get(st, id, &err);
    if (!s)
        return err;
    if ((params && mysql_stmt_bind_param(s, params)) || mysql_stmt_execute(s) ||
        (results &&
         (mysql_stmt_bind_result(s, results) || mysql_stmt_store_result(s))))
        return store_mysql_error(st, s, stmt_sql[id]);
    *out = s;
    return 0;
}

int store_stmt_fetch(struct store *st, MYSQL_STMT *s, enum stmt_id id,
                     size_t max, void (*on_row)(void *ctx, size_t i), void *ctx,
                     size_t *count)
{
    size_t n = 0;
    int rc = MYSQL_NO_DATA, err = 0;

    while (n < max && (rc = mysql_stmt_fetch(s)) == 0) {
        if (on_row)
            on_row(ctx, n);
        n++;
    }
    if (rc != 0 && rc != MYSQL_NO_DATA)
        err = store_mysql_error(st, s, stmt_sql[id]);
    /* A dropped connection has closed s already. */
    if (st->my)
        mysql_stmt_free_result(s);
    *count = err ? 0 : n;
    return err;
}

int store_stmt_rows(struct store *st, enum stmt_id id, MYSQL_BIND *params,
                    MYSQL_BIND *results, size_t max,
                    void (*on_row)(void *ctx, size_t i), void *ctx,
                    size_t *count)
{
    MYSQL_STMT *s;
    int err = store_stmt_exec(st, id, params, results, &s);

    *count = 0;
    return err ? err : store_stmt_fetch(st, s, id, max, on_row, ctx, count);
}

const char *store_stmt_sql(enum stmt_id id)
{
    return stmt_sql[id];
}

int store_query(struct store *st, const char *sql)
{
    int err = store_mysql_ensure(st);

    if (err)
        return err;
    if (mysql_real_query(st->my, sql, strlen(sql)))
        return store_mysql_error(st, NULL, sql);
    return 0;
}

int store_tx_rollback(struct store *st, int err)
{
    if (st->my && mysql_rollback(st->my))
        store_mysql_error(st, NULL, "rollback");
    return err;
}

int store_tx_commit(struct store *st)
{
    int err;

    if (!mysql_commit(st->my))
        return 0;
    err = store_mysql_error(st, NULL, "commit");
    return err == -ENOTCONN ? -EINPROGRESS : err;
}

int store_retry(struct store *st, int (*fn)(struct store *, void *), void *arg)
{
    /* Only here, between operations: inside a transaction a silent
     * reconnect would run the rest of it outside the transaction. */
    if (st->my && util_idle_conn_dead((int)mysql_get_socket(st->my))) {
        log_warn("mysql connection lost", "op=idle_check");
        metrics_count(METRIC_CONN_ERROR_MYSQL, 1);
        mysql_drop(st);
    }
    int was_open = st->my != NULL;
    int err;

    err = fn(st, arg);
    if (err == -ENOTCONN && was_open)
        err = fn(st, arg);
    return err;
}

void bind_i64(MYSQL_BIND *b, int64_t *v)
{
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
}

void bind_str_in(MYSQL_BIND *b, const char *s, unsigned long *len)
{
    *len = strlen(s);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

void bind_str_out(MYSQL_BIND *b, char *buf, size_t cap, unsigned long *len)
{
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = buf;
    b->buffer_length = cap - 1; /* room for the NUL we add after fetch */
    b->length = len;
}

void bind_time(MYSQL_BIND *b, MYSQL_TIME *t)
{
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = t;
}

void bind_time_null(MYSQL_BIND *b, MYSQL_TIME *t, char *is_null)
{
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = t;
    b->is_null = (my_bool *)is_null;
}

int64_t store_pay_timeout_s(const struct store *st)
{
    return st->cfg->pay_timeout_s ? st->cfg->pay_timeout_s
                                  : STORE_PAY_TIMEOUT_DEFAULT_S;
}

void time_from_epoch(MYSQL_TIME *t, int64_t epoch_s)
{
    struct tm tm;
    time_t tt = (time_t)epoch_s;

    gmtime_r(&tt, &tm);
    memset(t, 0, sizeof(*t));
    t->year = (unsigned)tm.tm_year + 1900;
    t->month = (unsigned)tm.tm_mon + 1;
    t->day = (unsigned)tm.tm_mday;
    t->hour = (unsigned)tm.tm_hour;
    t->minute = (unsigned)tm.tm_min;
    t->second = (unsigned)tm.tm_sec;
    t->time_type = MYSQL_TIMESTAMP_DATETIME;
}

void time_from_epoch_ms(MYSQL_TIME *t, int64_t epoch_ms)
{
    time_from_epoch(t, epoch_ms / 1000);
    t->second_part = (unsigned long)(epoch_ms % 1000) * 1000u;
}

int64_t time_to_epoch_ms(const MYSQL_TIME *t)
{
    return time_to_epoch(t) * 1000 + (int64_t)(t->second_part / 1000);
}

int64_t time_to_epoch(const MYSQL_TIME *t)
{
    struct tm tm = {0};

    tm.tm_year = (int)t->year - 1900;
    tm.tm_mon = (int)t->month - 1;
    tm.tm_mday = (int)t->day;
    tm.tm_hour = (int)t->hour;
    tm.tm_min = (int)t->minute;
    tm.tm_sec = (int)t->second;
    return (int64_t)timegm(&tm);
}

/* ---- shards: the thread's store of each (store.h, "shards") ---- */

struct store *store_home(struct store *st)
{
    return st->home ? st->home : st;
}

unsigned store_shard_count(const struct store *st)
{
    const struct store *h = st->home ? st->home : st;

    return h->cfg->nshards > 1 ? h->cfg->nshards : 1;
}

struct store *store_shard(struct store *st, unsigned i)
{
    struct store *h = store_home(st);
    unsigned n = store_shard_count(h);

    if (i == 0 || i >= n)
        return h;
    if (!h->shard)
        h->shard = xcalloc(n, sizeof(*h->shard));
    if (!h->shard[i]) {
        struct store *s = store_new(h->cfg->shards[i]);

        s->home = h;
        s->shard_no = i;
        h->shard[i] = s;
    }
    return h->shard[i];
}

/* ---- Redis ---- */

void store_redis_server(const struct store_config *c, struct redis_server *out)
{
    out->host = c->redis_host;
    out->port = c->redis_port;
    out->user = c->redis_user;
    out->pass = c->redis_pass;
    out->db = c->redis_db;
    out->sentinel = c->redis_sentinel;
}

/* One server: the thread's connection, reconnected when it broke or the
 * sentinels named a new master. NULL while the server is unreachable. */
static redisContext *redis_one(struct store *st)
{
    st = store_home(st); /* one Redis connection a thread, not a shard */
    const struct store_config *c = st->cfg;
    int64_t now = util_mono_ms();
    struct redis_server rs;
    redisContext *rc = st->link.rc;
    int err;

    store_redis_server(c, &rs);
    if (rc && (rc->err || util_idle_conn_dead(rc->fd))) {
        log_warn("redis connection lost", "err=\"%s\"",
                 rc->err ? rc->errstr : "closed while idle");
        metrics_count(METRIC_CONN_ERROR_REDIS, 1);
        redisFree(rc);
        rc = st->link.rc = NULL;
    }
    /* The sentinels named a new master since this connection was made. */
    if (rc && redis_server_epoch(&rs) != st->rc_epoch) {
        redisFree(rc);
        rc = st->link.rc = NULL;
        st->rc_next_try_ms = 0;
    }
    if (rc)
        return rc;
    if (now < st->rc_next_try_ms)
        return NULL;
    st->rc_epoch = redis_server_epoch(&rs);
    st->link.rc = redis_connect(&rs, c->connect_timeout_ms, c->io_timeout_ms,
                                "store", &st->rc_log, &err);
    if (!st->link.rc) {
        metrics_count(METRIC_CONN_ERROR_REDIS, 1);
        st->rc_next_try_ms = now + RETRY_BACKOFF_MS;
    }
    return st->link.rc;
}

struct redis_link *store_redis_link(struct store *st)
{
    const struct store_config *c;

    st = store_home(st); /* one Redis link a thread, whatever the shard */
    c = st->cfg;
    if (!c->redis_cluster_nseeds)
        return redis_one(st) ? &st->link : NULL;
    if (!st->link.cluster) {
        st->link.cluster =
            redis_cluster_new(c->redis_cluster_seeds, c->redis_cluster_nseeds,
                              c->connect_timeout_ms, c->io_timeout_ms, "store");
        st->link.budget_ms = c->io_timeout_ms;
    }
    return &st->link;
}

bool store_redis_is_cluster(const struct store_config *cfg)
{
    return cfg->redis_cluster_nseeds > 0;
}

redisReply *store_redis_command(struct store *st, const char *key, int argc,
                                const char **argv, const size_t *lens, int *err)
{
    struct redis_link *l = store_redis_link(st);
    redisReply *r;

    if (!l) {
        *err = -ENOTCONN;
        return NULL;
    }
    r = redis_link_command(l, key, argc, argv, lens, err);
    if (!r)
        log_warn("redis command failed", "op=%s err=\"%s\"", argv[0],
                 redis_link_errstr(l, *err));
    return r;
}

redisReply *store_redis_script(struct store *st, struct redis_script *s,
                               int nkeys, int argc, const char **argv,
                               const size_t *lens, int *err)
{
    struct redis_link *l = store_redis_link(st);
    redisReply *r;

    if (!l) {
        *err = -ENOTCONN;
        return NULL;
    }
    r = redis_link_script(l, s, nkeys, argc, argv, lens, err);
    if (!r)
        log_warn("redis command failed", "op=script key=%s err=\"%s\"",
                 nkeys ? argv[0] : "", redis_link_errstr(l, *err));
    return r;
}

int store_redis_pipeline(struct store *st, const struct redis_cluster_cmd *cmds,
                         size_t n, redisReply **replies)
{
    struct redis_link *l = store_redis_link(st);
    int err;

    if (!l) {
        for (size_t i = 0; i < n; i++)
            replies[i] = NULL;
        return -ENOTCONN;
    }
    err = redis_link_pipeline(l, cmds, n, replies);
    if (err)
        log_warn("redis pipeline failed", "commands=%zu err=\"%s\"", n,
                 redis_link_errstr(l, err));
    return err;
}

/* Whether CLUSTER INFO (r) says cluster_state:ok. */
static bool cluster_info_ok(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_STRING &&
           strstr(r->str, "cluster_state:ok") != NULL;
}

const char *store_redis_cluster_check(struct store *st)
{
    const char *argv[2] = {"CLUSTER", "INFO"};
    struct redis_link *l;
    const char *state = "ok";
    int n;

    if (!store_redis_is_cluster(st->cfg))
        return NULL;
    l = store_redis_link(st);
    n = redis_cluster_primaries(l->cluster);
    if (n <= 0)
        return "unreachable";
    for (int i = 0; i < n; i++) {
        int err;
        redisReply *r =
            redis_cluster_primary_command(l->cluster, i, 2, argv, NULL, &err);

        if (!r) {
            char host[REDIS_CLUSTER_HOST_LEN];
            unsigned port;

            redis_cluster_primary_addr(l->cluster, i, host, sizeof(host),
                                       &port);
            log_warn("redis cluster node unreachable", "node=%s:%u err=%d",
                     host, port, err);
            return "unreachable";
        }
        if (!cluster_info_ok(r))
            state = "fail";
        freeReplyObject(r);
    }
    return state;
}

static bool mysql_ping_ok(struct store *st)
{
    /* A connection the server dropped while idle fails its first ping;
     * one fresh try then tells whether the server itself is up. */
    for (int i = 0; i < 2; i++) {
        if (store_mysql_ensure(st))
            break;
        if (mysql_ping(st->my) == 0)
            return true;
        store_mysql_error(st, NULL, "ping");
    }
    return false;
}

void store_ping(struct store *st, bool *mysql_ok, bool *redis_ok)
{
    /* MySQL is up when every shard's primary is. */
    *mysql_ok = true;
    for (unsigned i = 0; i < store_shard_count(st) && *mysql_ok; i++)
        *mysql_ok = mysql_ping_ok(store_shard(st, i));

    *redis_ok = false;
    for (int i = 0; i < 2 && !*redis_ok; i++) {
        const char *argv[1] = {"PING"};
        struct redis_link *l = store_redis_link(st);
        int err;

        if (!l)
            break;
        redisReply *r = redis_link_command(l, NULL, 1, argv, NULL, &err);
        *redis_ok = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
}
