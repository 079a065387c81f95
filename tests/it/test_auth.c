/*
 * test_auth.c - sessions across instances: logging out one token or every
 * token of an account, and an admin's ban of a buyer, each refused on the
 * instance that made the change at once and on another within a second;
 * the state survives a lost subscriber and a restart (it is in MySQL and
 * Redis, not only in the instances' memory). Checked in MySQL and Redis
 * too, not only in the answers.
 *
 * Two instances, A and B, on the same MariaDB and Redis.
 */
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
#include <hiredis/hiredis.h>

#include "tests/it/harness.h"

/* Another instance applies a change within this (the second). */
#define SPREAD_MS 1000
/* After a lost subscriber: its back-off, the reconnect and a reload. */
#define RELOAD_MS 3000

enum { SRV_A, SRV_B, SRV_COUNT };
static struct it_server srvs[SRV_COUNT];
static struct it_server *const srv_a = &srvs[SRV_A];
static struct it_server *const srv_b = &srvs[SRV_B];

static int64_t user_base;
static int next_user;

static int group_setup(void **state)
{
    /* Several logins a phone: codes as often as asked. */
    const char *env[] = {"SECKILL_RATE_USER", "SECKILL_RATE_IP",
                         "SECKILL_CODE_INTERVAL_S=0",
                         "SECKILL_CODE_PER_HOUR=100", NULL};

    (void)state;
    it_init();
    user_base = 600000000000LL + util_now_ms() % 100000000 * 100;
    if (it_server_start(srv_a, "auth-a", env) ||
        it_server_start(srv_b, "auth-b", env))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srvs, SRV_COUNT);
}

/* ---- helpers ---- */

/* A phone number nobody used in this run. */
static void fresh_phone(char out[24])
{
    snprintf(out, 24, "+861390%07lld",
             (long long)((util_now_ms() / 10 + next_user++) % 10000000));
}

/* Log in with a code on srv as phone: the user id, and its token. */
static int64_t login(const struct it_server *srv, const char *phone,
                     char tok[TOKEN_STR_LEN])
{
    char body[128];
    struct it_resp resp;
    int64_t id;

    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    it_http(srv, "POST", "/api/auth/code", body, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(body, sizeof(body), "{\"phone\":\"%s\",\"code\":\"%s\"}", phone,
             it_json_str(resp.json, "code"));
    it_resp_free(&resp);
    it_http(srv, "POST", "/api/auth/login", body, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(tok, TOKEN_STR_LEN, "%s", it_json_str(resp.json, "token"));
    id = it_json_id(json_object_get(resp.json, "user"), "id");
    it_resp_free(&resp);
    return id;
}

/* The status of GET /api/orders with tok on srv. */
static long orders_status(const struct it_server *srv, const char *tok)
{
    struct it_resp resp;
    long st = it_http(srv, "GET", "/api/orders", NULL, tok, &resp);

    it_resp_free(&resp);
    return st;
}

/* Poll GET /api/orders on srv until it answers status: the milliseconds
 * it took, or fails the test after limit_ms. */
static int64_t answers_within(const struct it_server *srv, const char *tok,
                              long status, int64_t limit_ms)
{
    int64_t t0 = util_mono_ms();
    long st;

    while ((st = orders_status(srv, tok)) != status) {
        if (util_mono_ms() - t0 > limit_ms)
            fail_msg("port %u still answers %ld (not %ld) after %lld ms",
                     (unsigned)srv->port, st, status, (long long)limit_ms);
        usleep(20 * 1000);
    }
    return util_mono_ms() - t0;
}

static void logout(const struct it_server *srv, const char *tok,
                   const char *body, long status)
{
    struct it_resp resp;

    it_http(srv, "POST", "/api/auth/logout", body, tok, &resp);
    it_assert_status(&resp, status);
    it_resp_free(&resp);
}

/* POST (on) or DELETE (off) the ban of user on srv with tok: status. */
static long ban(const struct it_server *srv, int64_t user, bool on,
                const char *tok)
{
    char path[64];
    struct it_resp resp;
    long st;

    snprintf(path, sizeof(path), "/api/admin/users/%lld/ban", (long long)user);
    st = it_http(srv, on ? "POST" : "DELETE", path, NULL, tok, &resp);
    it_resp_free(&resp);
    return st;
}

/* ---- tests ---- */

/* One token logged out: refused at once where it was done and within a
 * second elsewhere; the user's other token goes on working; the token's
 * id is on Redis' denylist. */
static void test_logout_one(void **state)
{
    char phone[24], tok1[TOKEN_STR_LEN], tok2[TOKEN_STR_LEN];
    struct it_resp resp;
    int64_t ms;

    (void)state;
    fresh_phone(phone);
    login(srv_a, phone, tok1);
    login(srv_b, phone, tok2);
    assert_int_equal(200, orders_status(srv_b, tok1));
    logout(srv_a, tok1, NULL, 204);
    it_http(srv_a, "GET", "/api/orders", NULL, tok1, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    assert_non_null(
        strstr(it_json_str(json_object_get(resp.json, "error"), "message"),
               "logged out"));
    it_resp_free(&resp);
    ms = answers_within(srv_b, tok1, 401, SPREAD_MS);
    print_message("a logged-out token refused on the other instance after "
                  "%lld ms\n",
                  (long long)ms);
    assert_int_equal(200, orders_status(srv_a, tok2));
    assert_int_equal(200, orders_status(srv_b, tok2));
    /* Once out, it cannot log out again. */
    logout(srv_b, tok1, NULL, 401);
    {
        redisContext *rc = it_redis_connect();
        redisReply *r = redisCommand(rc, "ZCARD seckill:{auth}:denied");

        assert_non_null(r);
        assert_true(r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
        freeReplyObject(r);
        redisFree(rc);
    }
}

/* Every token of the account: those issued before refused everywhere
 * (also one minted for the same user), one issued after works at once
 * on both instances; MySQL has the new generation. */
static void test_logout_all(void **state)
{
    char phone[24], tok1[TOKEN_STR_LEN], tok2[TOKEN_STR_LEN],
        minted[TOKEN_STR_LEN], tok3[TOKEN_STR_LEN];
    int64_t id, ms;

    (void)state;
    fresh_phone(phone);
    id = login(srv_a, phone, tok1);
    assert_int_equal(id, login(srv_a, phone, tok2));
    it_token(id, TOKEN_ROLE_USER, 3600, minted);
    assert_int_equal(200, orders_status(srv_a, minted));
    logout(srv_b, tok2, "{\"all\":true}", 204);
    assert_int_equal(401, orders_status(srv_b, tok1));
    assert_int_equal(401, orders_status(srv_b, minted));
    ms = answers_within(srv_a, tok1, 401, SPREAD_MS);
    assert_int_equal(401, orders_status(srv_a, tok2));
    assert_int_equal(401, orders_status(srv_a, minted));
    print_message("logged out everywhere: refused on the other instance "
                  "after %lld ms\n",
                  (long long)ms);
    assert_int_equal(1, it_sql_scalar("SELECT token_gen FROM account_state "
                                      "WHERE role = 1 AND account_id = %lld",
                                      (long long)id));
    /* A new login is good everywhere at once. */
    assert_int_equal(id, login(srv_a, phone, tok3));
    assert_int_equal(200, orders_status(srv_a, tok3));
    assert_int_equal(200, orders_status(srv_b, tok3));
    /* Again: generation 2, and {"all":false} is one token. */
    logout(srv_a, tok3, "{\"all\":false}", 204);
    assert_int_equal(id, login(srv_b, phone, tok3));
    logout(srv_b, tok3, "{\"all\":true}", 204);
    assert_int_equal(2, it_sql_scalar("SELECT token_gen FROM account_state "
                                      "WHERE role = 1 AND account_id = %lld",
                                      (long long)id));
}

/* Bad logouts change nothing. */
static void test_logout_refused(void **state)
{
    char tok[TOKEN_STR_LEN];
    int64_t id = user_base + next_user++;
    static const char *const bodies[] = {
        "{\"all\":\"yes\"}",      "{\"all\":1}", "{\"every\":true}",
        "{\"all\":true,\"x\":1}", "[true]",      "all"};

    (void)state;
    it_token(id, TOKEN_ROLE_USER, 3600, tok);
    logout(srv_a, NULL, NULL, 401);
    logout(srv_a, NULL, "{\"all\":true}", 401);
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        logout(srv_a, tok, bodies[i], 400);
    assert_int_equal(200, orders_status(srv_a, tok));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM account_state "
                                      "WHERE account_id = %lld",
                                      (long long)id));
}

/* A ban: every authenticated request of the buyer, on both instances, is
 * 403 within a second (reads, a purchase, logging out), a login too; an
 * unban lets it back. Only an admin bans. */
static void test_ban(void **state)
{
    char phone[24], tok[TOKEN_STR_LEN], admin[TOKEN_STR_LEN],
        other[TOKEN_STR_LEN], body[128];
    struct it_resp resp;
    int64_t id, v, ms;

    (void)state;
    fresh_phone(phone);
    id = login(srv_a, phone, tok);
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    it_token(user_base + next_user++, TOKEN_ROLE_USER, 3600, other);
    v = it_seckill_create(srv_a, it_unique(), 10, -60, 3600);

    assert_int_equal(403, ban(srv_a, id, true, other));
    assert_int_equal(401, ban(srv_a, id, true, NULL));
    assert_int_equal(200, orders_status(srv_b, tok));

    assert_int_equal(204, ban(srv_a, id, true, admin));
    assert_int_equal(204, ban(srv_b, id, true, admin)); /* idempotent */
    it_http(srv_a, "GET", "/api/orders", NULL, tok, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    ms = answers_within(srv_b, tok, 403, SPREAD_MS);
    print_message("a ban reached the other instance after %lld ms\n",
                  (long long)ms);
    {
        char path[64];

        snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
                 (long long)v);
        it_http(srv_b, "POST", path, NULL, tok, &resp);
        it_assert_error(&resp, 403, "FORBIDDEN");
        it_resp_free(&resp);
    }
    logout(srv_b, tok, NULL, 403);
    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    it_http(srv_b, "POST", "/api/auth/code", body, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(body, sizeof(body), "{\"phone\":\"%s\",\"code\":\"%s\"}", phone,
             it_json_str(resp.json, "code"));
    it_resp_free(&resp);
    it_http(srv_b, "POST", "/api/auth/login", body, NULL, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE user_id = %lld",
                                      (long long)id));
    assert_int_equal(1, it_sql_scalar("SELECT banned_at IS NOT NULL AND "
                                      "banned_by = 1 FROM account_state WHERE "
                                      "role = 1 AND account_id = %lld",
                                      (long long)id));

    assert_int_equal(204, ban(srv_b, id, false, admin));
    assert_int_equal(200, orders_status(srv_b, tok));
    answers_within(srv_a, tok, 200, SPREAD_MS);
    assert_int_equal(204, ban(srv_b, id, false, admin)); /* idempotent */
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM account_state "
                                      "WHERE role = 1 AND account_id = %lld "
                                      "AND banned_at IS NOT NULL",
                                      (long long)id));
}

/* The ban route: a bad id is 400, GET is 405 with the methods it has. */
static void test_ban_route(void **state)
{
    char admin[TOKEN_STR_LEN];
    struct it_resp resp;

    (void)state;
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    it_http(srv_a, "POST", "/api/admin/users/abc/ban", NULL, admin, &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
    it_http(srv_a, "GET", "/api/admin/users/5/ban", NULL, admin, &resp);
    it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
    assert_string_equal("POST, DELETE, OPTIONS", resp.allow);
    it_resp_free(&resp);
}

/* A subscriber that lost its connection (and so the messages sent
 * meanwhile) reloads the state when it subscribes again. */
static void test_change_while_unsubscribed(void **state)
{
    char tok[TOKEN_STR_LEN];
    redisContext *rc = it_redis_connect();
    redisReply *r;
    int64_t ms;

    (void)state;
    it_token(user_base + next_user++, TOKEN_ROLE_USER, 3600, tok);
    assert_int_equal(200, orders_status(srv_b, tok));
    /* Every subscriber (both instances' caches and views) loses its
     * connection; A's message may be sent before B is back. */
    r = redisCommand(rc, "CLIENT KILL TYPE pubsub");
    freeReplyObject(r);
    redisFree(rc);
    logout(srv_a, tok, NULL, 204);
    ms = answers_within(srv_b, tok, 401, RELOAD_MS);
    print_message("refused after the subscribers were cut: %lld ms\n",
                  (long long)ms);
}

/* A ban (and its lifting) that committed in MySQL while the instance
 * cannot reach Redis to tell the others is answered as done, not 503:
 * it changed something, and a retry with its Idempotency-Key would find
 * its first answer never recorded (409 for 10 s). The instance itself
 * refuses the buyer at once; the others learn it at their next reload. */
static void test_ban_redis_away(void **state)
{
    const struct store_config *sc = it_store_config();
    char redis_set[96], admin[TOKEN_STR_LEN], tok[TOKEN_STR_LEN];
    const char *env[] = {"SECKILL_RATE_USER", "SECKILL_RATE_IP", redis_set,
                         NULL};
    int64_t id = user_base + next_user++;
    char key[2][64];
    struct it_proxy px;
    struct it_server c;
    char path[64];

    (void)state;
    /* Keys of this run: the test database keeps them a day. */
    snprintf(key[0], sizeof(key[0]), "Idempotency-Key: away-ban-%lld",
             (long long)id);
    snprintf(key[1], sizeof(key[1]), "Idempotency-Key: away-unban-%lld",
             (long long)id);
    assert_int_equal(
        0, it_proxy_start(&px, "auth-redis", (uint16_t)sc->redis_port));
    snprintf(redis_set, sizeof(redis_set),
             "SECKILL_REDIS_URL=redis://127.0.0.1:%u/%u", (unsigned)px.port,
             sc->redis_db);
    memset(&c, 0, sizeof(c));
    assert_int_equal(0, it_server_start(&c, "auth-away", env));
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    it_token(id, TOKEN_ROLE_USER, 3600, tok);
    assert_int_equal(200, orders_status(&c, tok));
    assert_int_equal(0, it_proxy_ctl(&px, "refuse"));
    assert_int_equal(0, it_proxy_ctl(&px, "cut"));
    snprintf(path, sizeof(path), "/api/admin/users/%lld/ban", (long long)id);
    for (int on = 1; on >= 0; on--) {
        struct it_req req = {.method = on ? "POST" : "DELETE",
                             .path = path,
                             .token = admin,
                             .header = key[on ? 0 : 1]};
        struct it_resp resp;

        it_http_do(&c, &req, &resp);
        if (resp.status != 204)
            print_error("%s with Redis away: %ld %.200s\n", req.method,
                        resp.status, resp.body ? resp.body : "");
        assert_int_equal(204, resp.status);
        it_resp_free(&resp);
        assert_int_equal(on, it_sql_scalar("SELECT COUNT(*) FROM "
                                           "account_state WHERE role = 1 "
                                           "AND account_id = %lld AND "
                                           "banned_at IS NOT NULL",
                                           (long long)id));
        assert_int_equal(on ? 403 : 200, orders_status(&c, tok));
    }
    it_proxy_ctl(&px, "heal");
    assert_int_equal(0, it_server_stop(&c));
    it_proxy_stop(&px);
}

/* An instance started after the changes knows them. */
static void test_restart_knows(void **state)
{
    char tok[TOKEN_STR_LEN], banned[TOKEN_STR_LEN], admin[TOKEN_STR_LEN];
    int64_t bid = user_base + next_user++;
    const char *env[] = {"SECKILL_RATE_USER", "SECKILL_RATE_IP", NULL};
    struct it_server c;

    (void)state;
    it_token(user_base + next_user++, TOKEN_ROLE_USER, 3600, tok);
    it_token(bid, TOKEN_ROLE_USER, 3600, banned);
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    logout(srv_a, tok, NULL, 204);
    assert_int_equal(204, ban(srv_a, bid, true, admin));
    memset(&c, 0, sizeof(c));
    assert_int_equal(0, it_server_start(&c, "auth-c", env));
    answers_within(&c, tok, 401, SPREAD_MS);
    answers_within(&c, banned, 403, SPREAD_MS);
    assert_int_equal(0, it_server_stop(&c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logout_one),
        cmocka_unit_test(test_logout_all),
        cmocka_unit_test(test_logout_refused),
        cmocka_unit_test(test_ban),
        cmocka_unit_test(test_ban_route),
        cmocka_unit_test(test_change_while_unsubscribed),
        cmocka_unit_test(test_ban_redis_away),
        cmocka_unit_test(test_restart_knows),
    };
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
