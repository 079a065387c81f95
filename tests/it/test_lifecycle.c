/*
 * test_lifecycle.c - an order after its purchase, over HTTP against the
 * real binary, checked in MySQL: unpaid -> paid (the provider's signed
 * notification, or the dev-mode pay route), unpaid -> cancelled (its
 * owner or an admin), unpaid -> expired (its pay deadline passed), each
 * exactly once, with the unit back on sale for a cancel or an expiry, so
 * that at every check stock + unpaid + paid = the initial stock.
 *
 * Instances: L (pay timeout 4 s, a pay secret, dev mode) and M (the same)
 * for races over two processes; P (no pay secret, not dev) for the routes
 * that must not exist there.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "store/internal.h"
#include "tests/it/harness.h"
#include "tests/it/promtext.h"

#define USER_BASE 260000000000LL
#define PAY_TIMEOUT_S 4
/* 32 bytes of 0x5c as hex. */
#define PAY_SECRET                                                             \
    "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c"

static struct it_server srv[3]; /* L, M, P */
static int64_t next_user;

static const char *const env_lm[] = {
    "SECKILL_PAY_TIMEOUT_S=4", "SECKILL_PAY_SECRET=" PAY_SECRET,
    "SECKILL_DEV=1", "SECKILL_RATE_USER=0", NULL};
/* Without dev mode: login codes go to a webhook (none answers here: no
 * test logs in through this one). */
static const char *const env_p[] = {
    "SECKILL_PAY_SECRET", "SECKILL_DEV=0",
    "SECKILL_SMS_WEBHOOK=http://127.0.0.1:9/sms",
    "SECKILL_SMS_SECRET=" PAY_SECRET, NULL};

static int servers_start(void)
{
    if (it_server_start(&srv[0], "life-l", env_lm) != 0)
        return -1;
    if (it_server_start(&srv[1], "life-m", env_lm) != 0 ||
        it_server_start(&srv[2], "life-p", env_p) != 0) {
        it_group_teardown(srv, 3);
        return -1;
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    it_init();
    if (sodium_init() < 0)
        return -1;
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    return servers_start();
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, 3);
}

/* ---- helpers ---- */

/* POST /api/orders/{id}/ACTION as user (admin: an admin token). */
static long order_post(const struct it_server *s, int64_t order,
                       const char *action, int64_t user, bool admin,
                       struct it_resp *resp)
{
    char tok[TOKEN_STR_LEN], path[96];

    it_token(user, admin ? TOKEN_ROLE_ADMIN : TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/orders/%lld/%s", (long long)order,
             action);
    return it_http(s, "POST", path, NULL, tok, resp);
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

static long notify_send(const struct it_server *s, const struct notify *n,
                        struct it_resp *resp)
{
    struct it_req req = {.method = "POST",
                         .path = "/api/payments/notify",
                         .body = n->body,
                         .header = n->header};

    return it_http_do(s, &req, resp);
}

/* stock + unpaid + paid == initial for voucher v, in MySQL. */
static void assert_conserved(int64_t v, int64_t initial)
{
    int64_t stock = it_sql_stock(v);
    int64_t active = it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                   "voucher_id = %lld AND status IN (1, 2)",
                                   (long long)v);

    if (stock + active != initial)
        print_error("voucher %lld: stock %lld + active orders %lld != %lld\n",
                    (long long)v, (long long)stock, (long long)active,
                    (long long)initial);
    assert_int_equal(initial, stock + active);
    assert_true(stock >= 0);
}

static int64_t status_of(int64_t order)
{
    return it_sql_scalar("SELECT status FROM voucher_orders WHERE id = %lld",
                         (long long)order);
}

/* ---- the order's JSON and the routes ---- */

static void test_order_json(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 10, -60, 3600);
    int64_t u = next_user++, o = it_buy(&srv[0], v, u), deadline;
    char tok[TOKEN_STR_LEN], path[64];
    struct it_resp resp;

    (void)state;
    it_token(u, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)o);
    it_http(&srv[0], "GET", path, NULL, tok, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("unpaid", it_json_str(resp.json, "status"));
    assert_true(
        util_time_parse(it_json_str(resp.json, "payDeadline"), &deadline) == 0);
    assert_true(deadline >= util_now_ms() / 1000 + PAY_TIMEOUT_S - 2 &&
                deadline <= util_now_ms() / 1000 + PAY_TIMEOUT_S + 1);
    assert_true(json_is_null(json_object_get(resp.json, "payTime")));
    assert_true(json_is_null(json_object_get(resp.json, "closeTime")));
    it_resp_free(&resp);
    assert_conserved(v, 10);
}

static void test_cancel(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 3, -60, 3600);
    int64_t u = next_user++, other = next_user++;
    int64_t o = it_buy(&srv[0], v, u);
    struct it_resp resp;

    (void)state;
    assert_int_equal(2, it_sql_stock(v));
    /* Someone else's order reads as absent. */
    order_post(&srv[0], o, "cancel", other, false, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    assert_int_equal(1, status_of(o));

    order_post(&srv[0], o, "cancel", u, false, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("cancelled", it_json_str(resp.json, "status"));
    assert_false(json_is_null(json_object_get(resp.json, "closeTime")));
    it_resp_free(&resp);
    assert_int_equal(4, status_of(o));
    assert_int_equal(3, it_sql_stock(v));
    assert_conserved(v, 3);

    /* Again: the same answer, nothing changed. */
    order_post(&srv[1], o, "cancel", u, false, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("cancelled", it_json_str(resp.json, "status"));
    it_resp_free(&resp);
    assert_int_equal(3, it_sql_stock(v));

    /* An admin may cancel anyone's. */
    o = it_buy(&srv[0], v, other);
    order_post(&srv[0], o, "cancel", 1, true, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    assert_int_equal(3, it_sql_stock(v));

    /* Unknown and malformed ids. */
    order_post(&srv[0], 999999999999LL, "cancel", u, false, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    it_http(&srv[0], "GET", "/api/orders/1/cancel", NULL, NULL, &resp);
    it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
    it_resp_free(&resp);
    it_http(&srv[0], "POST", "/api/orders/1/cancel", NULL, NULL, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
    assert_conserved(v, 3);
}

static void test_pay_dev_and_cancel_paid(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 3, -60, 3600);
    int64_t u = next_user++, o = it_buy(&srv[0], v, u);
    struct it_resp resp;
    const char *paid_at;
    char first[UTIL_TIME_LEN];

    (void)state;
    order_post(&srv[0], o, "pay", u, false, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("paid", it_json_str(resp.json, "status"));
    paid_at = it_json_str(resp.json, "payTime");
    assert_non_null(paid_at);
    snprintf(first, sizeof(first), "%s", paid_at);
    it_resp_free(&resp);
    /* Paying twice is the same payment: 200, nothing changed. */
    order_post(&srv[1], o, "pay", u, false, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal(first, it_json_str(resp.json, "payTime"));
    it_resp_free(&resp);
    order_post(&srv[0], o, "cancel", u, false, &resp);
    it_assert_error(&resp, 409, "ORDER_PAID");
    it_resp_free(&resp);
    assert_int_equal(2, status_of(o));
    assert_conserved(v, 3);

    /* Without dev mode the simulated provider does not exist. */
    o = it_buy(&srv[2], v, next_user++);
    order_post(&srv[2], o, "pay", u, false, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    assert_int_equal(1, status_of(o));
}

static void test_notify(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 5, -60, 3600);
    int64_t u = next_user++, o = it_buy(&srv[0], v, u);
    int64_t o2 = it_buy(&srv[0], v, next_user++);
    struct it_req req = {.method = "POST", .path = "/api/payments/notify"};
    struct notify n;
    struct it_resp resp;
    char txn[32];

    (void)state;
    snprintf(txn, sizeof(txn), "txn-%lld", (long long)o);
    /* No pay secret: no route. */
    notify_make(&n, o, 4750, txn);
    notify_send(&srv[2], &n, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);

    /* Bad signatures: none, another body's, upper-case hex, short. */
    req.body = n.body;
    it_http_do(&srv[0], &req, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
    {
        struct notify m;
        char upper[128];

        notify_make(&m, o, 4751, txn);
        req.header = m.header;
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
        snprintf(upper, sizeof(upper), "%s", n.header);
        for (char *p = upper + strlen("X-Signature: "); *p; p++)
            if (*p >= 'a' && *p <= 'f')
                *p = (char)(*p - 'a' + 'A');
        req.header = upper;
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
        req.header = "X-Signature: abcd";
        it_http_do(&srv[0], &req, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
    }
    assert_int_equal(1, status_of(o));

    /* Signed but malformed or wrong. */
    {
        struct notify m;

        snprintf(m.body, sizeof(m.body),
                 "{\"orderId\":%lld,\"amount\":4750,"
                 "\"txnId\":\"x\"}",
                 (long long)o);
        notify_make(&m, 0, 0, "");
        snprintf(m.body, sizeof(m.body), "{\"amount\":4750,\"txnId\":\"x\"}");
        {
            unsigned char key[32], mac[32];
            char hex[65];

            sodium_hex2bin(key, 32, PAY_SECRET, 64, NULL, NULL, NULL);
            crypto_auth_hmacsha256(mac, (const unsigned char *)m.body,
                                   strlen(m.body), key);
            sodium_bin2hex(hex, sizeof(hex), mac, 32);
            snprintf(m.header, sizeof(m.header), "X-Signature: %s", hex);
        }
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        notify_make(&m, o, 4700, txn); /* not the price */
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        notify_make(&m, o, 4750, "bad txn"); /* a space */
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        notify_make(&m, 999999999999LL, 4750, "t-unknown");
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 404, "NOT_FOUND");
        it_resp_free(&resp);
    }
    assert_int_equal(1, status_of(o));

    /* Paid; the same notification again changes nothing. */
    notify_send(&srv[0], &n, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("paid", it_json_str(resp.json, "status"));
    it_resp_free(&resp);
    notify_send(&srv[1], &n, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("paid", it_json_str(resp.json, "status"));
    it_resp_free(&resp);
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE txn_id = '%s'",
                                      txn));
    /* The same transaction with another amount is not the same
     * notification: refused like a wrong amount, the order left paid. */
    {
        struct notify m;

        notify_make(&m, o, 1, txn);
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        notify_make(&m, o, 4751, txn);
        notify_send(&srv[1], &m, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        assert_int_equal(2, status_of(o));
    }
    /* Another transaction for the paid order: a second payment. */
    {
        struct notify m;

        char txn2[40];

        snprintf(txn2, sizeof(txn2), "second-%lld", (long long)o);
        notify_make(&m, o, 4750, txn2);
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 409, "ORDER_PAID");
        it_resp_free(&resp);
        /* The first transaction for another order: refused. */
        notify_make(&m, o2, 4750, txn);
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        it_resp_free(&resp);
        assert_int_equal(1, status_of(o2));
        /* A payment for a cancelled order: closed, to refund. */
        order_post(&srv[0], o2, "cancel", 1, true, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
        snprintf(txn2, sizeof(txn2), "late-%lld", (long long)o2);
        notify_make(&m, o2, 4750, txn2);
        notify_send(&srv[0], &m, &resp);
        it_assert_error(&resp, 409, "ORDER_CLOSED");
        it_resp_free(&resp);
        assert_int_equal(4, status_of(o2));
    }
    assert_conserved(v, 5);
}

/* Pay o (as 4750) with txn on srv: the status. */
static long pay_as(int64_t o, const char *txn)
{
    struct notify m;
    struct it_resp resp;
    long st;

    notify_make(&m, o, 4750, txn);
    st = notify_send(&srv[0], &m, &resp);
    it_resp_free(&resp);
    return st;
}

/* GET path with an admin's token on M: its answer into resp. */
static long admin_get(const char *path, struct it_resp *resp)
{
    char tok[TOKEN_STR_LEN];

    it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
    return it_http(&srv[1], "GET", path, NULL, tok, resp);
}

/* Whether a list of refunds (GET /api/refunds) has the one of txn. */
static bool lists_txn(const json_t *items, const char *txn)
{
    size_t i;
    const json_t *r;

    json_array_foreach(items, i, r) if (strcmp(it_json_str(r, "txnId"), txn) ==
                                        0) return true;
    return false;
}

/* Payments refused for a closed or already paid order become refunds, in
 * the refusing transaction: a second payment, one for a cancelled order,
 * one after the deadline (which expires the order); the same
 * notification twice is one refund. Admins list them and mark them done
 * (once). Checked in MySQL. */
static void test_refunds(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 5, -60, 3600);
    int64_t o1 = it_buy(&srv[0], v, next_user++);
    int64_t o2 = it_buy(&srv[0], v, next_user++);
    int64_t o3 = it_buy(&srv[1], v, next_user++);
    char a[40], b[40], c[40], d[40], path[80], tok[TOKEN_STR_LEN];
    struct it_resp resp;
    int64_t rid;

    (void)state;
    snprintf(a, sizeof(a), "ref-a-%lld", (long long)o1);
    snprintf(b, sizeof(b), "ref-b-%lld", (long long)o1);
    snprintf(c, sizeof(c), "ref-c-%lld", (long long)o2);
    snprintf(d, sizeof(d), "ref-d-%lld", (long long)o3);
    assert_int_equal(200, pay_as(o1, a));
    assert_int_equal(409, pay_as(o1, b)); /* a second payment */
    assert_int_equal(409, pay_as(o1, b)); /* the same notification */
    order_post(&srv[0], o2, "cancel", 1, true, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    assert_int_equal(409, pay_as(o2, c));
    sleep(PAY_TIMEOUT_S + 1);
    assert_int_equal(409, pay_as(o3, d)); /* late: the order expires */
    assert_int_equal(7, it_sql_scalar("SELECT status FROM voucher_orders "
                                      "WHERE id = %lld",
                                      (long long)o3));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "txn_id = '%s'",
                                      a));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "txn_id = '%s' AND order_id = %lld "
                                      "AND reason = 3 AND amount = 4750 AND "
                                      "status = 0",
                                      b, (long long)o1));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "txn_id = '%s' AND reason = 2",
                                      c));
    /* Late (1) when the payment found it unpaid past its deadline, closed
     * (2) when the expiry got there first. */
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE "
                                      "txn_id = '%s' AND reason IN (1, 2)",
                                      d));
    rid = it_sql_scalar("SELECT id FROM refunds WHERE txn_id = '%s'", b);

    /* The admin's list, pending by default. */
    admin_get("/api/refunds?limit=100", &resp);
    it_assert_status(&resp, 200);
    assert_true(lists_txn(json_object_get(resp.json, "items"), b));
    assert_true(lists_txn(json_object_get(resp.json, "items"), d));
    it_resp_free(&resp);
    it_token(next_user, TOKEN_ROLE_USER, 3600, tok);
    it_http(&srv[1], "GET", "/api/refunds", NULL, tok, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    admin_get("/api/refunds?status=later", &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);

    /* Done, once. */
    it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
    snprintf(path, sizeof(path), "/api/refunds/%lld/done", (long long)rid);
    for (int i = 0; i < 2; i++) {
        it_http(&srv[0], "POST", path, NULL, tok, &resp);
        it_assert_status(&resp, 200);
        assert_string_equal("done", it_json_str(resp.json, "status"));
        assert_string_equal("second_payment", it_json_str(resp.json, "reason"));
        assert_non_null(it_json_str(resp.json, "doneTime"));
        it_resp_free(&resp);
    }
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM refunds WHERE id "
                                      "= %lld AND status = 1 AND done_by = 1",
                                      (long long)rid));
    /* In the audit log once: the second call changed nothing. */
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE "
                                      "action = 'refund.done' AND "
                                      "target_type = 'refund' AND target_id "
                                      "= %lld AND admin_id = 1 AND addr = "
                                      "'127.0.0.1'",
                                      (long long)rid));
    admin_get("/api/refunds?limit=100", &resp);
    assert_false(lists_txn(json_object_get(resp.json, "items"), b));
    it_resp_free(&resp);
    admin_get("/api/refunds?status=done&limit=100", &resp);
    assert_true(lists_txn(json_object_get(resp.json, "items"), b));
    it_resp_free(&resp);
    it_http(&srv[0], "POST", "/api/refunds/999999999999/done", NULL, tok,
            &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    assert_conserved(v, 5);
}

/* ---- back on sale ---- */

/* Buy again after a cancel; one active order per user under a crowd of
 * that user's own requests. */
static void test_rebuy(void **state)
{
    enum { N = 20 };
    int64_t v = it_seckill_create(&srv[0], 1, 10, -60, 3600);
    int64_t u = next_user++, o = it_buy(&srv[0], v, u), o2;
    struct it_req reqs[N];
    struct it_resp resps[N];
    const struct it_server *to[N];
    char tok[TOKEN_STR_LEN], path[96];
    struct it_resp resp;
    int created = 0;

    (void)state;
    it_purchase(&srv[0], v, u, &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);
    order_post(&srv[0], o, "cancel", u, false, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    o2 = it_buy(&srv[1], v, u);
    assert_true(o2 != o);
    order_post(&srv[0], o2, "cancel", u, false, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);

    /* The same user, 20 requests at once over two instances. */
    it_token(u, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (int i = 0; i < N; i++) {
        reqs[i] = (struct it_req){.method = "POST", .path = path, .token = tok};
        to[i] = &srv[i % 2];
    }
    it_http_run_all(reqs, to, resps, N);
    for (int i = 0; i < N; i++) {
        if (resps[i].status == 201)
            created++;
        else if (resps[i].status == 429)
            it_assert_error(&resps[i], 429, "BUSY");
        else
            it_assert_error(&resps[i], 409, "ALREADY_PURCHASED");
        it_resp_free(&resps[i]);
    }
    assert_int_equal(1, created);
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE voucher_id = %lld AND user_id = "
                                      "%lld AND status IN (1, 2)",
                                      (long long)v, (long long)u));
    assert_int_equal(3, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE voucher_id = %lld AND user_id = "
                                      "%lld",
                                      (long long)v, (long long)u));
    assert_conserved(v, 10);
}

/* Poll voucher v's purchase as fresh users until one buys (true) or
 * timeout_ms passes. */
static bool sells_within(const struct it_server *s, int64_t v, int timeout_ms,
                         int64_t *took_ms)
{
    int64_t t0 = util_mono_ms();

    for (;;) {
        struct it_resp resp;
        long st = it_purchase(s, v, next_user++, &resp);

        it_resp_free(&resp);
        *took_ms = util_mono_ms() - t0;
        if (st == 201)
            return true;
        if (*took_ms >= timeout_ms)
            return false;
        usleep(50 * 1000);
    }
}

/*
 * Sold out, then the unpaid orders expire: every instance sells again
 * within 2 s of the deadline (its cached "sold out" is dropped), the
 * expiry lag is small, and the numbers add up.
 */
static void test_expiry_returns_stock(void **state)
{
    enum { STOCK = 5 };
    int64_t v = it_seckill_create(&srv[0], 1, STOCK, -60, 3600);
    int64_t orders[STOCK], deadline_ms, took;
    struct it_resp resp;

    (void)state;
    for (int i = 0; i < STOCK; i++)
        orders[i] = it_buy(&srv[i % 2], v, next_user++);
    deadline_ms = util_now_ms() + PAY_TIMEOUT_S * 1000;
    /* Both instances learn "sold out" (and cache it). */
    for (int i = 0; i < 2; i++) {
        it_purchase(&srv[i], v, next_user++, &resp);
        it_assert_error(&resp, 409, "SOLD_OUT");
        it_resp_free(&resp);
    }
    while (util_now_ms() < deadline_ms)
        usleep(100 * 1000);
    for (int i = 0; i < 2; i++) {
        if (!sells_within(&srv[i], v, 2500, &took))
            fail_msg("instance %d did not sell again within 2.5 s of the "
                     "deadline",
                     i);
        print_message("      instance %d sells again %lld ms after the "
                      "deadline\n",
                      i, (long long)(util_now_ms() - deadline_ms));
    }
    /* Every order expires (the later ones' deadlines may be a poll
     * later than the first one's). */
    for (int i = 0; i < STOCK; i++) {
        for (int k = 0; k < 40 && status_of(orders[i]) != 7; k++)
            usleep(50 * 1000);
        assert_int_equal(7, status_of(orders[i]));
    }
    /* Closed within 2 s of the deadline (MySQL's own clock). */
    assert_int_equal(0,
                     it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                                   "voucher_id = %lld AND status = 7 AND "
                                   "TIMESTAMPDIFF(MICROSECOND, pay_deadline, "
                                   "close_time) > 2000000",
                                   (long long)v));
    assert_conserved(v, STOCK);
}

static void test_stats(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 10, -60, 3600);
    int64_t a = it_buy(&srv[0], v, next_user++),
            b = it_buy(&srv[0], v, next_user++);
    char tok[TOKEN_STR_LEN], path[96];
    struct it_resp resp;
    const json_t *orders;

    (void)state;
    (void)it_buy(&srv[0], v, next_user++);
    order_post(&srv[0], a, "cancel", 1, true, &resp);
    it_resp_free(&resp);
    {
        struct notify n;
        char txn[40];

        snprintf(txn, sizeof(txn), "stats-%lld", (long long)b);
        notify_make(&n, b, 4750, txn);
        notify_send(&srv[0], &n, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    snprintf(path, sizeof(path), "/api/vouchers/%lld/stats", (long long)v);
    it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
    it_http(&srv[0], "GET", path, NULL, tok, &resp);
    it_assert_status(&resp, 200);
    assert_int_equal(
        10, json_integer_value(json_object_get(resp.json, "initialStock")));
    assert_int_equal(8,
                     json_integer_value(json_object_get(resp.json, "stock")));
    orders = json_object_get(resp.json, "orders");
    assert_int_equal(1, json_integer_value(json_object_get(orders, "unpaid")));
    assert_int_equal(1, json_integer_value(json_object_get(orders, "paid")));
    assert_int_equal(1,
                     json_integer_value(json_object_get(orders, "cancelled")));
    assert_int_equal(0, json_integer_value(json_object_get(orders, "expired")));
    assert_int_equal(
        1, json_integer_value(json_object_get(resp.json, "returned")));
    it_resp_free(&resp);
    it_token(next_user, TOKEN_ROLE_USER, 3600, tok);
    it_http(&srv[0], "GET", path, NULL, tok, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
    it_http(&srv[0], "GET", "/api/vouchers/999999999/stats", NULL, tok, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
}

/* ---- races ---- */

/*
 * 300 unpaid orders over two instances. For each, a payment and a cancel
 * are sent at the same moment, to different instances, as the orders'
 * deadline comes due (the expiry competes too). Exactly one outcome per
 * order, the replies agree with MySQL, and the numbers add up.
 */
static void test_pay_cancel_expiry_race(void **state)
{
    enum { N = 300 };
    int64_t v = it_seckill_create(&srv[0], 1, N, -60, 3600);
    int64_t first = next_user, *orders = xcalloc(N, sizeof(*orders));
    struct it_req *reqs = xcalloc(2 * N, sizeof(*reqs));
    struct it_resp *resps = xcalloc(2 * N, sizeof(*resps));
    const struct it_server **to = xcalloc(2 * N, sizeof(*to));
    char(*toks)[TOKEN_STR_LEN] = xcalloc(N, sizeof(*toks));
    char(*paths)[64] = xcalloc(N, sizeof(*paths));
    struct notify *notes = xcalloc(N, sizeof(*notes));
    int paid = 0, cancelled = 0, expired = 0;
    int64_t t_buy;

    (void)state;
    next_user += N;
    {
        struct it_req *b = xcalloc(N, sizeof(*b));
        struct it_resp *br = xcalloc(N, sizeof(*br));
        char(*bpath)[96] = xcalloc(1, sizeof(*bpath));

        snprintf(bpath[0], sizeof(bpath[0]), "/api/vouchers/%lld/seckill",
                 (long long)v);
        for (int i = 0; i < N; i++) {
            it_token(first + i, TOKEN_ROLE_USER, 3600, toks[i]);
            b[i] = (struct it_req){
                .method = "POST", .path = bpath[0], .token = toks[i]};
            to[i] = &srv[i % 2];
        }
        t_buy = util_now_ms();
        it_http_run_all(b, to, br, N);
        for (int i = 0; i < N; i++) {
            it_assert_status(&br[i], 201);
            orders[i] = it_json_id(br[i].json, "orderId");
            it_resp_free(&br[i]);
        }
        free(bpath);
        free(br);
        free(b);
    }
    for (int i = 0; i < N; i++) {
        char txn[32];

        snprintf(txn, sizeof(txn), "race-%lld", (long long)orders[i]);
        notify_make(&notes[i], orders[i], 4750, txn);
        snprintf(paths[i], sizeof(paths[i]), "/api/orders/%lld/cancel",
                 (long long)orders[i]);
        reqs[2 * i] = (struct it_req){.method = "POST",
                                      .path = "/api/payments/notify",
                                      .body = notes[i].body,
                                      .header = notes[i].header};
        reqs[2 * i + 1] = (struct it_req){
            .method = "POST", .path = paths[i], .token = toks[i]};
        to[2 * i] = &srv[i % 2];
        to[2 * i + 1] = &srv[(i + 1) % 2];
    }
    /* Fire as the deadline comes due: some orders expire in the fray. */
    while (util_now_ms() < t_buy + PAY_TIMEOUT_S * 1000 - 150)
        usleep(10 * 1000);
    it_http_run_all(reqs, to, resps, 2 * N);

    for (int i = 0; i < N; i++) {
        struct it_resp *p = &resps[2 * i], *c = &resps[2 * i + 1];
        int64_t st = status_of(orders[i]);

        if (p->status == 200) {
            paid++;
            assert_int_equal(2, st);
            it_assert_error(c, 409, "ORDER_PAID");
        } else if (c->status == 200) {
            cancelled++;
            assert_int_equal(4, st);
            it_assert_error(p, 409, "ORDER_CLOSED");
        } else {
            /* Neither: the expiry won (or the payment came late). */
            expired++;
            assert_int_equal(7, st);
            it_assert_error(p, 409, "ORDER_CLOSED");
            it_assert_error(c, 409, "ORDER_CLOSED");
        }
        it_resp_free(p);
        it_resp_free(c);
    }
    print_message("      %d orders: %d paid, %d cancelled, %d expired\n", N,
                  paid, cancelled, expired);
    assert_int_equal(N, paid + cancelled + expired);
    assert_int_equal(paid, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                         "WHERE voucher_id = %lld AND "
                                         "status = 2",
                                         (long long)v));
    assert_conserved(v, N);
    assert_int_equal(N - paid, it_sql_stock(v));
    free(notes);
    free(paths);
    free(toks);
    free(to);
    free(resps);
    free(reqs);
    free(orders);
}

/*
 * The deadline lives in MySQL: with every instance stopped before it and
 * started after it, the orders still expire and the stock sells again.
 * (Every instance expires every voucher's orders: the group's instances
 * stop too, and start again at the end.)
 */
static void test_expiry_across_restarts(void **state)
{
    static const char *const env[] = {"SECKILL_PAY_TIMEOUT_S=3",
                                      "SECKILL_RATE_USER=0", NULL};
    enum { STOCK = 6 };
    struct it_server a, b;
    int64_t v, deadline_ms, took;
    int64_t orders[STOCK];

    (void)state;
    assert_int_equal(0, it_server_start(&a, "life-restart-a", env));
    assert_int_equal(0, it_server_start(&b, "life-restart-b", env));
    v = it_seckill_create(&a, 1, STOCK, -60, 3600);
    for (int i = 0; i < STOCK; i++)
        orders[i] = it_buy(i % 2 ? &b : &a, v, next_user++);
    deadline_ms = util_now_ms() + 3000;
    assert_int_equal(0, it_server_stop(&a));
    assert_int_equal(0, it_server_stop(&b));
    for (int i = 0; i < 3; i++)
        assert_int_equal(0, it_server_stop(&srv[i]));
    assert_true(util_now_ms() < deadline_ms);
    while (util_now_ms() < deadline_ms + 1000)
        usleep(100 * 1000);
    /* Nobody has expired them yet. */
    for (int i = 0; i < STOCK; i++)
        assert_int_equal(1, status_of(orders[i]));
    assert_int_equal(0, it_sql_stock(v));

    assert_int_equal(0, it_server_start(&a, "life-restart-a2", env));
    assert_int_equal(0, it_server_start(&b, "life-restart-b2", env));
    assert_true(sells_within(&a, v, 3000, &took));
    assert_true(sells_within(&b, v, 3000, &took));
    for (int i = 0; i < STOCK; i++)
        assert_int_equal(7, status_of(orders[i]));
    assert_conserved(v, STOCK);
    assert_int_equal(0, it_server_stop(&a));
    assert_int_equal(0, it_server_stop(&b));
    assert_int_equal(0, servers_start());
}

/*
 * The expiry's scan reads, and locks, only orders that can expire. Unpaid
 * orders without a deadline (they never expire) sort first in its index:
 * read in its order they were locked too, every round of every instance,
 * as many as a database holds (370,000 in a test database locked by each
 * round took MariaDB down: "Over 95 percent of the buffer pool is
 * occupied by lock heaps"). The scan as the service sends it, inside a
 * transaction, against 20,000 such orders.
 */
static void test_expiry_scan_skips_undated(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, 1, -60, 3600);
    int64_t base = (9000000000LL + it_unique() % 1000000) * 100000;
    char sql[512];
    const char *q = store_stmt_sql(STMT_EXPIRE_SCAN), *mark = strchr(q, '?');
    int64_t ids[64], locked;

    (void)state;
    assert_non_null(mark);
    snprintf(sql, sizeof(sql), "%.*s64%s", (int)(mark - q), q, mark + 1);
    assert_int_equal(0, it_sql_exec("INSERT INTO voucher_orders (id, user_id, "
                                    "voucher_id, status) SELECT %lld + seq, "
                                    "%lld + seq, %lld, 1 FROM seq_1_to_20000",
                                    (long long)base, (long long)base,
                                    (long long)v));
    assert_int_equal(0, it_sql_exec("START TRANSACTION"));
    it_sql_column(ids, 64, "%s", sql);
    locked = it_sql_scalar("SELECT trx_rows_locked FROM "
                           "information_schema.innodb_trx WHERE "
                           "trx_mysql_thread_id = CONNECTION_ID()");
    assert_int_equal(0, it_sql_exec("ROLLBACK"));
    assert_int_equal(0, it_sql_exec("DELETE FROM voucher_orders WHERE "
                                    "voucher_id = %lld",
                                    (long long)v));
    if (locked > 2 * 64 + 8)
        print_error("the expiry's scan locked %lld rows for a batch of "
                    "64\n",
                    (long long)locked);
    assert_true(locked <= 2 * 64 + 8);
}

/* What /metrics says of it. */
static void test_metrics(void **state)
{
    struct it_resp resp;
    struct prom_doc doc;

    (void)state;
    it_http(&srv[0], "GET", "/metrics", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_int_equal(0, prom_parse(resp.body, &doc));
    /* Earlier tests paid, cancelled and expired orders here. */
    assert_true(prom_value(&doc, "seckill_order_transitions_total",
                           "to=\"paid\"") >= 1);
    assert_true(prom_value(&doc, "seckill_order_transitions_total",
                           "to=\"cancelled\"") >= 1);
    assert_true(
        prom_value(&doc, "seckill_order_expiry_lag_seconds_count", "") >= 0);
    assert_true(prom_value(&doc, "seckill_payments_refused_total",
                           "reason=\"closed\"") >= 1);
    prom_free(&doc);
    it_resp_free(&resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_json),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_pay_dev_and_cancel_paid),
        cmocka_unit_test(test_notify),
        cmocka_unit_test(test_refunds),
        cmocka_unit_test(test_rebuy),
        cmocka_unit_test(test_expiry_returns_stock),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_pay_cancel_expiry_race),
        cmocka_unit_test(test_expiry_scan_skips_undated),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_expiry_across_restarts),
    };
    /* SECKILL_IT_FILTER=test_x runs the tests whose names match. */
    const char *filter = getenv("SECKILL_IT_FILTER");

    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return it_exit_status(cmocka_run_group_tests_name(
        "lifecycle", tests, group_setup, group_teardown));
}
