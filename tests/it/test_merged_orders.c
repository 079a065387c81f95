/*
 * test_merged_orders.c - payments and cancels that arrive together run as
 * one transaction per batch (store_orders_pay(), store_orders_cancel()),
 * over HTTP against the real binary, checked in MySQL: each answered
 * exactly as it would be alone, each applied once, the units of the
 * cancelled orders back in the same transaction (the stock row, or the
 * buyer's segment), and a batch that fails half-way (a lock wait that
 * times out, a connection killed under it) runs again or answers 503
 * with nothing of it written.
 *
 * A batch is made to happen: the test holds a row lock that the first
 * call of a lane needs, sends the crowd while that call waits (they queue
 * behind it in the lane), and lets go; the crowd then runs as one batch.
 * MySQL's COMMIT counter shows how many transactions the crowd took.
 *
 * Instances: B (pay timeout 120 s, a pay secret, dev mode, stock
 * segments 4 for the vouchers it creates) and S (the same, without
 * segments: it creates the plain vouchers).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <mysql.h>
#include <sodium.h>

#include "tests/it/harness.h"

#define USER_BASE 270000000000LL
#define LANES 4 /* sale/orders.c's ORDER_LANES */
/* 32 bytes of 0x5c as hex. */
#define PAY_SECRET                                                             \
    "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c"
#define PRICE 4750

static struct it_server srv[2]; /* B, S */
static int64_t next_user;

static const char *const env_b[] = {"SECKILL_PAY_TIMEOUT_S=120",
                                    "SECKILL_PAY_SECRET=" PAY_SECRET,
                                    "SECKILL_DEV=1",
                                    "SECKILL_RATE_USER=0",
                                    "SECKILL_STOCK_SEGMENTS=4",
                                    "SECKILL_BATCH_LINGER_US=10000",
                                    NULL};
static const char *const env_s[] = {
    "SECKILL_PAY_TIMEOUT_S=120", "SECKILL_PAY_SECRET=" PAY_SECRET,
    "SECKILL_DEV=1", "SECKILL_RATE_USER=0", NULL};

static int group_setup(void **state)
{
    (void)state;
    it_init();
    if (sodium_init() < 0)
        return -1;
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    if (it_server_start(&srv[0], "merged-b", env_b) != 0)
        return -1;
    if (it_server_start(&srv[1], "merged-s", env_s) != 0) {
        it_group_teardown(srv, 1);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, 2);
}

/* ---- helpers ---- */

/*
 * n orders of voucher v (each its own buyer) whose ids share one lane of
 * the merged calls, into out; buyers into users (may be NULL). Buys at
 * most 8n orders; the others stay unpaid.
 */
static void buy_in_lane(int64_t v, size_t n, int64_t *out, int64_t *users)
{
    int64_t lane[LANES][64], lane_users[LANES][64];
    size_t count[LANES] = {0};

    assert_true(n <= 64);
    for (size_t tries = 0; tries < 8 * n + 8; tries++) {
        int64_t u = next_user++, o = it_buy(&srv[1], v, u);
        unsigned l = (unsigned)(o % LANES);

        lane[l][count[l]] = o;
        lane_users[l][count[l]] = u;
        if (++count[l] == n) {
            memcpy(out, lane[l], n * sizeof(*out));
            if (users)
                memcpy(users, lane_users[l], n * sizeof(*users));
            return;
        }
    }
    fail_msg("no lane got %zu orders", n);
}

/* A notification body and its signature header for it. */
struct notify {
    char body[256];
    char header[128];
};

static void notify_make(struct notify *n, int64_t order, int64_t amount,
                        const char *txn)
{
    unsigned char key[32], mac[crypto_auth_hmacsha256_BYTES];
    char hex[2 * sizeof(mac) + 1];

    snprintf(n->body, sizeof(n->body),
             "{\"orderId\":\"%lld\",\"amount\":%lld,\"txnId\":\"%s\"}",
             (long long)order, (long long)amount, txn);
    assert_int_equal(
        0, sodium_hex2bin(key, sizeof(key), PAY_SECRET, 64, NULL, NULL, NULL));
    crypto_auth_hmacsha256(mac, (const unsigned char *)n->body, strlen(n->body),
                           key);
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    snprintf(n->header, sizeof(n->header), "X-Signature: %s", hex);
}

static void notify_req(struct it_req *r, const struct notify *n)
{
    *r = (struct it_req){.method = "POST",
                         .path = "/api/payments/notify",
                         .body = n->body,
                         .header = n->header};
}

/* A cancel of order o by an admin. */
struct cancel {
    char path[64];
    char token[TOKEN_STR_LEN];
};

static void cancel_req(struct it_req *r, struct cancel *c, int64_t o)
{
    snprintf(c->path, sizeof(c->path), "/api/orders/%lld/cancel", (long long)o);
    it_token(1, TOKEN_ROLE_ADMIN, 3600, c->token);
    *r = (struct it_req){.method = "POST", .path = c->path, .token = c->token};
}

static int64_t commits(void)
{
    return it_sql_scalar("SELECT VARIABLE_VALUE FROM "
                         "information_schema.GLOBAL_STATUS WHERE "
                         "VARIABLE_NAME = 'COM_COMMIT'");
}

static int64_t status_of(int64_t order)
{
    return it_sql_scalar("SELECT status FROM voucher_orders WHERE id = %lld",
                         (long long)order);
}

/* stock + unpaid + paid == initial for voucher v, in MySQL (the stock
 * of a segmented voucher is in its segments). */
static void assert_conserved(int64_t v, int64_t initial)
{
    int64_t stock =
        it_sql_stock(v) + it_sql_scalar("SELECT COALESCE(SUM(stock), 0) FROM "
                                        "seckill_stock_segments WHERE "
                                        "voucher_id = %lld",
                                        (long long)v);
    int64_t active = it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                   "voucher_id = %lld AND status IN (1, 2)",
                                   (long long)v);

    assert_int_equal(initial, stock + active);
    assert_true(stock >= 0);
}

/*
 * A second MySQL connection of the test's own, for the row locks a
 * batch is made to wait for (the helper's connection reads meanwhile).
 */
static MYSQL *locker_open(void)
{
    const struct store_config *sc = it_store_config();
    MYSQL *my = mysql_init(NULL);

    assert_non_null(my);
    assert_non_null(mysql_real_connect(my, sc->mysql_host, sc->mysql_user,
                                       sc->mysql_pass, sc->mysql_db,
                                       sc->mysql_port, NULL, 0));
    return my;
}

static void locker_query(MYSQL *my, const char *fmt, ...)
{
    char sql[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    if (mysql_query(my, sql))
        fail_msg("%s: %s", sql, mysql_error(my));
}

/* The request that waits for the test's lock, sent from a thread. */
struct blocked {
    pthread_t thread;
    struct it_req req;
    const struct it_server *to;
    struct it_resp resp;
};

static void *blocked_main(void *arg)
{
    struct blocked *b = arg;

    it_http_do(b->to, &b->req, &b->resp);
    return NULL;
}

static void blocked_start(struct blocked *b)
{
    assert_int_equal(0, pthread_create(&b->thread, NULL, blocked_main, b));
    usleep(300 * 1000); /* it has reached its lock wait */
}

static void blocked_join(struct blocked *b)
{
    pthread_join(b->thread, NULL);
}

/* Later, from a thread (the test's thread waits for its crowd): kill
 * the MySQL sessions of server kill (if not NULL), then roll back the
 * locker's transaction (letting go of its locks). */
struct later {
    pthread_t thread;
    MYSQL *locker;
    const struct it_server *kill;
    unsigned after_ms;
};

static void *later_main(void *arg)
{
    struct later *l = arg;

    usleep(l->after_ms * 1000);
    if (l->kill) {
        size_t k = it_sql_kill_sessions_of(
            l->kill->pid, (uint16_t)it_store_config()->mysql_port);
        print_message("      killed %zu mysql sessions\n", k);
        usleep(300 * 1000);
    }
    mysql_query(l->locker, "ROLLBACK");
    return NULL;
}

static void later_start(struct later *l)
{
    assert_int_equal(0, pthread_create(&l->thread, NULL, later_main, l));
}

static void later_join(struct later *l)
{
    pthread_join(l->thread, NULL);
}

/* ---- tests ---- */

/*
 * Everyone pays at once, some twice: every order is paid once with its
 * own transaction id, every answer is 200 paid, and the crowd took far
 * fewer COMMITs than payments.
 */
static void test_pay_crowd(void **state)
{
    enum { N = 96, TWICE = 16 };
    int64_t v = it_seckill_create(&srv[1], 1, N, -60, 3600);
    int64_t orders[N], before, after;
    struct notify n[N + TWICE];
    struct it_req reqs[N + TWICE];
    const struct it_server *to[N + TWICE];
    struct it_resp resps[N + TWICE];
    char txn[40];

    (void)state;
    for (size_t i = 0; i < N; i++)
        orders[i] = it_buy(&srv[1], v, next_user++);
    for (size_t i = 0; i < N + TWICE; i++) {
        int64_t o = orders[i % N];

        snprintf(txn, sizeof(txn), "crowd-%lld", (long long)o);
        notify_make(&n[i], o, PRICE, txn);
        notify_req(&reqs[i], &n[i]);
        to[i] = &srv[i % 2];
    }
    before = commits();
    it_http_run_all(reqs, to, resps, N + TWICE);
    after = commits();
    for (size_t i = 0; i < N + TWICE; i++) {
        it_assert_status(&resps[i], 200);
        assert_string_equal("paid", it_json_str(resps[i].json, "status"));
        it_resp_free(&resps[i]);
    }
    for (size_t i = 0; i < N; i++) {
        snprintf(txn, sizeof(txn), "crowd-%lld", (long long)orders[i]);
        assert_int_equal(2, status_of(orders[i]));
        assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                          "WHERE txn_id = '%s' AND id = %lld",
                                          txn, (long long)orders[i]));
    }
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM refunds r JOIN "
                                      "voucher_orders o ON o.id = r.order_id "
                                      "WHERE o.voucher_id = %lld",
                                      (long long)v));
    print_message("      %d payments (%d twice): %lld COMMITs\n", N + TWICE,
                  TWICE, (long long)(after - before));
    /* One transaction each would be N; merged, a lane's batch takes what
     * waited while the one before it ran. */
    assert_true(after - before <= N / 2);
    assert_conserved(v, N);
}

/*
 * One batch with every kind of answer, each as it would be alone: the
 * same transaction id for two orders (one paid, the other refused), a
 * transaction that paid another order before, a wrong amount, a late
 * order (expired now, the payment to refund), a paid order paid again by
 * the same notification and by another one, and an ordinary payment.
 */
static void test_pay_batch_outcomes(void **state)
{
    enum { K = 9 };
    int64_t v = it_seckill_create(&srv[1], 1, 80, -60, 3600);
    int64_t o[K + 1], before, after;
    struct notify n[K + 1];
    struct it_req reqs[K];
    const struct it_server *to[K];
    struct it_resp resps[K];
    struct blocked blk = {.to = &srv[0]};
    char t[K + 1][48], other[48];
    MYSQL *locker;

    (void)state;
    buy_in_lane(v, K + 1, o, NULL);
    /* o[0] waits for the test's lock; the crowd queues behind it. */
    for (int i = 0; i <= K; i++)
        snprintf(t[i], sizeof(t[i]), "batch-%lld-%d", (long long)o[0], i);
    /* Paid before: o[6] (by t[6]), and o[9] by the transaction o[3]'s
     * notification will name. */
    snprintf(other, sizeof(other), "other-%lld", (long long)o[0]);
    notify_make(&n[0], o[6], PRICE, t[6]);
    notify_req(&reqs[0], &n[0]);
    it_http_do(&srv[1], &reqs[0], &resps[0]);
    it_assert_status(&resps[0], 200);
    it_resp_free(&resps[0]);
    notify_make(&n[0], o[9], PRICE, other);
    notify_req(&reqs[0], &n[0]);
    it_http_do(&srv[1], &reqs[0], &resps[0]);
    it_assert_status(&resps[0], 200);
    it_resp_free(&resps[0]);
    /* o[5] is past its deadline (the expiry may close it first: the
     * answer is the same). */
    it_sql_exec("UPDATE voucher_orders SET pay_deadline = NOW(3) - INTERVAL "
                "1 SECOND WHERE id = %lld",
                (long long)o[5]);

    /* The COMMIT counter is the server's: no other sale's order may
     * expire meanwhile (the suites before leave unpaid orders due soon).
     * Before the locker's transaction: this statement locks what it
     * reads. */
    it_sql_exec("UPDATE voucher_orders SET pay_deadline = pay_deadline + "
                "INTERVAL 1 DAY WHERE status = 1 AND voucher_id <> %lld AND "
                "pay_deadline IS NOT NULL AND pay_deadline < NOW(3) + "
                "INTERVAL 1 MINUTE",
                (long long)v);
    locker = locker_open();
    locker_query(locker, "START TRANSACTION");
    locker_query(locker,
                 "UPDATE voucher_orders SET status = status WHERE id = %lld",
                 (long long)o[0]);
    notify_make(&n[0], o[0], PRICE, t[0]);
    notify_req(&blk.req, &n[0]);
    blocked_start(&blk);

    /* 0: o[1] and o[2] by one transaction id: one of them pays. */
    notify_make(&n[1], o[1], PRICE, t[1]);
    notify_make(&n[2], o[2], PRICE, t[1]);
    notify_make(&n[3], o[3], PRICE, other);    /* paid o[9] */
    notify_make(&n[4], o[4], PRICE + 1, t[4]); /* not the price */
    notify_make(&n[5], o[5], PRICE, t[5]);     /* late */
    notify_make(&n[6], o[6], PRICE, t[6]);     /* the same again */
    notify_make(&n[7], o[6], PRICE, t[7]);     /* a second payment */
    notify_make(&n[8], o[7], PRICE, t[8]);     /* ordinary */
    notify_make(&n[9], o[8], PRICE, t[9]);     /* ordinary */
    for (int i = 0; i < K; i++) {
        notify_req(&reqs[i], &n[i + 1]);
        to[i] = &srv[0];
    }
    before = commits();
    {
        /* Sent while o[0]'s payment waits; let go once they are queued
         * (2 s: under ASan on a loaded machine 700 ms was not always
         * enough for nine requests to arrive, and each then paid alone). */
        struct later l = {.locker = locker, .after_ms = 2000};

        later_start(&l);
        it_http_run_all(reqs, to, resps, K);
        later_join(&l);
    }
    blocked_join(&blk);
    after = commits();
    it_assert_status(&blk.resp, 200);
    it_resp_free(&blk.resp);

    /* One of o[1], o[2] paid with t[1]; the other refused. */
    {
        long a = resps[0].status, b = resps[1].status;

        assert_true((a == 200 && b == 400) || (a == 400 && b == 200));
        it_assert_error(a == 400 ? &resps[0] : &resps[1], 400, "BAD_REQUEST");
        assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                          "WHERE txn_id = '%s'",
                                          t[1]));
        assert_int_equal(a == 200 ? 2 : 1, status_of(o[1]));
        assert_int_equal(b == 200 ? 2 : 1, status_of(o[2]));
    }
    it_assert_error(&resps[2], 400, "BAD_REQUEST"); /* txn used */
    assert_int_equal(1, status_of(o[3]));
    it_assert_error(&resps[3], 400, "BAD_REQUEST"); /* amount */
    assert_int_equal(1, status_of(o[4]));
    it_assert_error(&resps[4], 409, "ORDER_CLOSED"); /* late */
    assert_int_equal(7, status_of(o[5]));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "order_id = %lld AND txn_id = '%s'",
                                      (long long)o[5], t[5]));
    it_assert_status(&resps[5], 200); /* the same notification */
    assert_string_equal("paid", it_json_str(resps[5].json, "status"));
    it_assert_error(&resps[6], 409, "ORDER_PAID"); /* another one */
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "order_id = %lld AND txn_id = '%s' AND "
                                      "reason = 3",
                                      (long long)o[6], t[7]));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "txn_id = '%s'",
                                      t[6]));
    it_assert_status(&resps[7], 200);
    it_assert_status(&resps[8], 200);
    assert_int_equal(2, status_of(o[7]));
    assert_int_equal(2, status_of(o[8]));
    assert_int_equal(2, status_of(o[0]));
    for (int i = 0; i < K; i++)
        it_resp_free(&resps[i]);
    print_message("      %d payments of one lane: %lld COMMITs\n", K + 1,
                  (long long)(after - before));
    /* o[0]'s transaction, then the crowd's (the expiry may add one). */
    assert_true(after - before <= 4);
    assert_conserved(v, 80);
    mysql_close(locker);
}

/*
 * Cancels at once, of a plain voucher and of a segmented one: every order
 * cancelled once, each unit back (the plain voucher's row; each buyer's
 * segment, user_id % 4), and a cancel of a paid order refused.
 */
static void test_cancel_crowd(void **state)
{
    enum { N = 24 };
    int64_t plain = it_seckill_create(&srv[1], 1, N, -60, 3600);
    int64_t seg = it_seckill_create(&srv[0], 1, 4 * N, -60, 3600);
    int64_t po[N], so[N], su[N], segstock[4], before, after;
    struct cancel c[2 * N];
    struct it_req reqs[2 * N];
    const struct it_server *to[2 * N];
    struct it_resp resps[2 * N];

    (void)state;
    assert_int_equal(4, it_sql_scalar("SELECT COUNT(*) FROM "
                                      "seckill_stock_segments WHERE "
                                      "voucher_id = %lld",
                                      (long long)seg));
    for (size_t i = 0; i < N; i++) {
        po[i] = it_buy(&srv[1], plain, next_user++);
        su[i] = next_user++;
        so[i] = it_buy(&srv[1], seg, su[i]);
    }
    for (int64_t s = 0; s < 4; s++)
        segstock[s] = it_sql_scalar("SELECT stock FROM seckill_stock_segments "
                                    "WHERE voucher_id = %lld AND segment = "
                                    "%lld",
                                    (long long)seg, (long long)s);
    for (size_t i = 0; i < N; i++) {
        cancel_req(&reqs[i], &c[i], po[i]);
        cancel_req(&reqs[N + i], &c[N + i], so[i]);
        to[i] = to[N + i] = &srv[i % 2];
    }
    before = commits();
    it_http_run_all(reqs, to, resps, 2 * N);
    after = commits();
    for (size_t i = 0; i < 2 * N; i++) {
        it_assert_status(&resps[i], 200);
        assert_string_equal("cancelled", it_json_str(resps[i].json, "status"));
        it_resp_free(&resps[i]);
    }
    print_message("      %d cancels: %lld COMMITs\n", 2 * N,
                  (long long)(after - before));
    assert_true(after - before <= N);
    assert_int_equal(N, it_sql_stock(plain));
    assert_conserved(plain, N);
    assert_conserved(seg, 4 * N);
    for (int64_t s = 0; s < 4; s++) {
        int64_t back = 0;

        for (size_t i = 0; i < N; i++)
            back += su[i] % 4 == s;
        assert_int_equal(segstock[s] + back,
                         it_sql_scalar("SELECT stock FROM "
                                       "seckill_stock_segments WHERE "
                                       "voucher_id = %lld AND segment = %lld",
                                       (long long)seg, (long long)s));
    }
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE voucher_id IN (%lld, %lld) AND "
                                      "status <> 4",
                                      (long long)plain, (long long)seg));
}

/*
 * A cancel batch that fails half-way: its orders are closed and it waits
 * for the stock row, which the test holds. Killed under it (its MySQL
 * connection), it runs again on a new one; held past every attempt's
 * lock wait, it answers 503 and nothing of it is written; let go in
 * time, every cancel is done once.
 */
static void test_cancel_batch_fails(void **state)
{
    enum { N = 6 };
    int64_t v = it_seckill_create(&srv[1], 1, 40, -60, 3600);
    int64_t o[N], stock;
    struct cancel c[N];
    struct it_req reqs[N];
    const struct it_server *to[N];
    struct it_resp resps[N];
    MYSQL *locker;

    (void)state;
    buy_in_lane(v, N, o, NULL);
    stock = it_sql_stock(v);
    for (size_t i = 0; i < N; i++) {
        cancel_req(&reqs[i], &c[i], o[i]);
        to[i] = &srv[0];
    }
    locker = locker_open();

    /* 1. Held through every attempt (3 lock waits of 3 s): 503, and not
     *    one order closed, not one unit back. */
    locker_query(locker, "START TRANSACTION");
    locker_query(locker,
                 "UPDATE seckill_vouchers SET stock = stock WHERE "
                 "voucher_id = %lld",
                 (long long)v);
    for (size_t i = 0; i < N; i++)
        reqs[i].timeout_s = 30;
    it_http_run_all(reqs, to, resps, N);
    locker_query(locker, "ROLLBACK");
    for (size_t i = 0; i < N; i++) {
        it_assert_error(&resps[i], 503, "UNAVAILABLE");
        it_resp_free(&resps[i]);
        assert_int_equal(1, status_of(o[i]));
    }
    assert_int_equal(stock, it_sql_stock(v));
    assert_conserved(v, 40);

    /* 2. The batch's connection killed while it waits, the lock let go
     *    a moment later: run again, every cancel done once. */
    locker_query(locker, "START TRANSACTION");
    locker_query(locker,
                 "UPDATE seckill_vouchers SET stock = stock WHERE "
                 "voucher_id = %lld",
                 (long long)v);
    {
        struct later l = {.locker = locker, .kill = &srv[0], .after_ms = 800};

        later_start(&l);
        it_http_run_all(reqs, to, resps, N);
        later_join(&l);
    }
    for (size_t i = 0, ok = 0; i < N; i++) {
        /* Every 200 is committed; a 503 wrote nothing. */
        long st = resps[i].status;

        ok += st == 200;
        if (i == N - 1)
            print_message("      after the kill: %zu of %d cancels done\n", ok,
                          N);
        assert_true(st == 200 || st == 503);
        assert_int_equal(st == 200 ? 4 : 1, status_of(o[i]));
        it_resp_free(&resps[i]);
    }
    assert_conserved(v, 40);
    mysql_close(locker);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pay_crowd),
        cmocka_unit_test(test_pay_batch_outcomes),
        cmocka_unit_test(test_cancel_crowd),
        cmocka_unit_test(test_cancel_batch_fails),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "merged_orders", tests, group_setup, group_teardown));
}
