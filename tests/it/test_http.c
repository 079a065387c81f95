/*
 * test_http.c - every endpoint and every client error code of the API,
 * over HTTP against one real seckilld started by the group setup.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "common/phone.h"
#include "idgen/idgen.h"
#include "tests/it/harness.h"

static struct it_server srv;
static char admin_tok[TOKEN_STR_LEN];
/* Minted user ids of this run: user_base + k. */
static int64_t user_base;

static int64_t now_s(void)
{
    return util_now_ms() / 1000;
}

static int64_t uid(int k)
{
    return user_base + k;
}

static void user_token(int64_t user_id, char out[TOKEN_STR_LEN])
{
    it_token(user_id, TOKEN_ROLE_USER, 3600, out);
}

/* Send a request and assert an error response, naming the request. */
static void expect_error_req(const struct it_req *req, long status,
                             const char *code)
{
    struct it_resp resp;
    const char *got;

    it_http_do(&srv, req, &resp);
    got = it_json_str(json_object_get(resp.json, "error"), "code");
    if (resp.status != status || !got || strcmp(got, code) != 0)
        print_error("request: %s %s body=%.200s auth=%s\n", req->method,
                    req->path, req->body ? req->body : "(none)",
                    req->authorization ? req->authorization
                    : req->token       ? "bearer"
                                       : "(none)");
    it_assert_error(&resp, status, code);
    it_resp_free(&resp);
}

static void expect_error(const char *method, const char *path, const char *body,
                         const char *token, long status, const char *code)
{
    struct it_req req = {
        .method = method, .path = path, .body = body, .token = token};

    expect_error_req(&req, status, code);
}

/* Assert a 200/201 JSON answer; returns it (caller frees). */
static void expect_ok(const char *method, const char *path, const char *body,
                      const char *token, long status, struct it_resp *resp)
{
    it_http(&srv, method, path, body, token, resp);
    if (resp->status != status)
        print_error("request: %s %s body=%.200s\n", method, path,
                    body ? body : "(none)");
    it_assert_status(resp, status);
    it_assert_json_type(resp);
    assert_true(json_is_object(resp->json));
}

/* Assert s is exactly "YYYY-MM-DDTHH:MM:SSZ" (RFC 3339, UTC). */
static void assert_utc_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    int64_t t;
    size_t i;

    assert_non_null(s);
    for (i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? (s[i] < '0' || s[i] > '9') : s[i] != shape[i])
            break;
    if (shape[i] || s[i]) {
        print_error("time \"%s\" is not YYYY-MM-DDTHH:MM:SSZ\n", s);
        fail();
    }
    assert_int_equal(0, util_time_parse(s, &t));
}

/* Assert s is an RFC 3339 UTC time within slack_s of now. */
static void assert_time_near_now(const char *s, int64_t slack_s)
{
    int64_t t;

    assert_utc_time(s);
    assert_int_equal(0, util_time_parse(s, &t));
    if (t < now_s() - slack_s || t > now_s() + slack_s) {
        print_error("time %s is not within %llds of now\n", s,
                    (long long)slack_s);
        fail();
    }
}

/* shopId may be carried as a number or an id string; compare the value. */
static void assert_json_int_or_id(const json_t *obj, const char *key,
                                  int64_t want)
{
    const json_t *v = json_object_get(obj, key);

    if (json_is_integer(v)) {
        assert_int_equal(want, json_integer_value(v));
        return;
    }
    assert_int_equal(want, it_json_id(obj, key));
}

static void assert_json_int(const json_t *obj, const char *key, int64_t want)
{
    const json_t *v = json_object_get(obj, key);

    if (!json_is_integer(v)) {
        print_error("\"%s\" is not an integer\n", key);
        fail();
    }
    assert_int_equal(want, json_integer_value(v));
}

static void assert_json_streq(const json_t *obj, const char *key,
                              const char *want)
{
    const char *got = it_json_str(obj, key);

    if (!got) {
        print_error("\"%s\" is not a string\n", key);
        fail();
    }
    assert_string_equal(want, got);
}

static int64_t purchase_ok(int64_t voucher_id, int64_t user_id)
{
    struct it_resp resp;
    int64_t order_id, t;
    uint32_t seq;

    it_purchase(&srv, voucher_id, user_id, &resp);
    it_assert_status(&resp, 201);
    it_assert_json_type(&resp);
    order_id = it_json_id(resp.json, "orderId");
    idgen_decode(order_id, &t, &seq);
    if (t < now_s() - 60 || t > now_s() + 60) {
        print_error("orderId %lld decodes to time %lld, now %lld\n",
                    (long long)order_id, (long long)t, (long long)now_s());
        fail();
    }
    it_resp_free(&resp);
    return order_id;
}

/* GET /api/vouchers/{id}; asserts 200 JSON (resp to free). */
static void get_voucher(int64_t id, struct it_resp *resp)
{
    char path[64];

    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)id);
    expect_ok("GET", path, NULL, NULL, 200, resp);
}

/* A purchase of voucher_id as user_id is refused: 409 with code. */
static void purchase_refused(int64_t voucher_id, int64_t user_id,
                             const char *code)
{
    char tok[TOKEN_STR_LEN], path[64];

    user_token(user_id, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher_id);
    expect_error("POST", path, NULL, tok, 409, code);
}

static int64_t voucher_stock(int64_t voucher_id)
{
    struct it_resp resp;
    int64_t stock;

    get_voucher(voucher_id, &resp);
    assert_true(json_is_integer(json_object_get(resp.json, "stock")));
    stock = json_integer_value(json_object_get(resp.json, "stock"));
    it_resp_free(&resp);
    return stock;
}

static char *unique_phone(void)
{
    return xasprintf("139%08lld", (long long)(it_unique() % 100000000));
}

/* POST /api/auth/code for phone; returns the code (dev mode echoes it). */
static char *request_code(const char *phone)
{
    struct it_resp resp;
    char *body = xasprintf("{\"phone\":\"%s\"}", phone);
    const char *code;
    char *out;

    expect_ok("POST", "/api/auth/code", body, NULL, 200, &resp);
    code = it_json_str(resp.json, "code");
    assert_non_null(code);
    assert_int_equal(6, strlen(code));
    assert_true(it_is_digits(code));
    out = xstrdup(code);
    it_resp_free(&resp);
    free(body);
    return out;
}

static char *login_body(const char *phone, const char *code)
{
    return xasprintf("{\"phone\":\"%s\",\"code\":\"%s\"}", phone, code);
}

/*
 * POST /api/auth/login with phone and code; asserts 200 with a token and
 * the user of that phone. Returns the user's id; copies the token into tok
 * unless it is NULL.
 */
static int64_t login_ok(const char *phone, const char *code,
                        char tok[TOKEN_STR_LEN])
{
    char *body = login_body(phone, code);
    struct it_resp resp;
    const json_t *user;
    const char *got;
    int64_t id;

    expect_ok("POST", "/api/auth/login", body, NULL, 200, &resp);
    got = it_json_str(resp.json, "token");
    assert_non_null(got);
    assert_true(strlen(got) < TOKEN_STR_LEN);
    if (tok)
        strcpy(tok, got);
    user = json_object_get(resp.json, "user");
    assert_true(json_is_object(user));
    id = it_json_id(user, "id");
    {
        /* Answers give the E.164 form (the default region is CN). */
        char e164[PHONE_E164_MAX];
        const char *why;

        assert_int_equal(0, phone_normalize(phone, "CN", e164, &why));
        assert_json_streq(user, "phone", e164);
    }
    it_resp_free(&resp);
    free(body);
    return id;
}

/* Request a new code for phone and log in with it, as login_ok(). */
static int64_t login_new_code(const char *phone, char tok[TOKEN_STR_LEN])
{
    char *code = request_code(phone);
    int64_t id = login_ok(phone, code, tok);

    free(code);
    return id;
}

/* POST /api/auth/login with phone and code; asserts 401 UNAUTHORIZED. */
static void login_refused(const char *phone, const char *code)
{
    char *body = login_body(phone, code);

    expect_error("POST", "/api/auth/login", body, NULL, 401, "UNAUTHORIZED");
    free(body);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    (void)state;
    it_init();
    /* Unique per run even without a database reset in between. */
    user_base = 100000000000LL + util_now_ms() % 100000000 * 100;
    /* Codes as often as asked: the tests here log in many times with a
     * phone; the limits themselves are test_login.c's. */
    static const char *const env[] = {"SECKILL_CODE_INTERVAL_S=0",
                                      "SECKILL_CODE_PER_HOUR=100",
                                      "SECKILL_SMS_REGIONS=86,1,44", NULL};
    if (it_server_start(&srv, "http", env) != 0)
        return -1;
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin_tok);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* ---- probes and routing ---- */

/* GET path answers 200 {"status":"ok"}. */
static void expect_status_ok(const char *path)
{
    struct it_resp resp;

    expect_ok("GET", path, NULL, NULL, 200, &resp);
    assert_json_streq(resp.json, "status", "ok");
    it_resp_free(&resp);
}

static void test_healthz(void **state)
{
    (void)state;
    expect_status_ok("/healthz");
}

static void test_readyz(void **state)
{
    (void)state;
    expect_status_ok("/readyz");
}

static void test_unknown_route(void **state)
{
    char tok[TOKEN_STR_LEN];

    (void)state;
    user_token(uid(1), tok);
    expect_error("GET", "/nope", NULL, NULL, 404, "NOT_FOUND");
    expect_error("GET", "/index.html", NULL, NULL, 404, "NOT_FOUND");
    expect_error("GET", "/api", NULL, NULL, 404, "NOT_FOUND");
    expect_error("GET", "/api/nope", NULL, tok, 404, "NOT_FOUND");
    expect_error("GET", "/api/vouchers/1/nope", NULL, tok, 404, "NOT_FOUND");
    expect_error("POST", "/api/orders/1/pay", "{}", tok, 404, "NOT_FOUND");
    expect_error("GET", "/healthz/x", NULL, NULL, 404, "NOT_FOUND");
}

static void test_method_not_allowed(void **state)
{
    static const struct {
        const char *method;
        const char *path;
        const char *allow[3];
    } cases[] = {
        {"POST", "/healthz", {"GET"}},
        {"DELETE", "/readyz", {"GET"}},
        {"GET", "/api/auth/code", {"POST"}},
        {"PUT", "/api/auth/login", {"POST"}},
        {"DELETE", "/api/vouchers", {"GET", "POST"}},
        {"PUT", "/api/vouchers/1", {"GET"}},
        {"GET", "/api/vouchers/1/seckill", {"POST"}},
        {"POST", "/api/orders", {"GET"}},
        {"DELETE", "/api/orders/1", {"GET"}},
    };
    char tok[TOKEN_STR_LEN];
    size_t i, j;

    (void)state;
    user_token(uid(1), tok);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct it_req req = {
            .method = cases[i].method, .path = cases[i].path, .token = tok};
        struct it_resp resp;

        it_http_do(&srv, &req, &resp);
        if (resp.status != 405)
            print_error("request: %s %s\n", req.method, req.path);
        it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
        for (j = 0; j < 3 && cases[i].allow[j]; j++) {
            if (!it_header_lists(resp.allow, cases[i].allow[j])) {
                print_error("%s %s: Allow \"%s\" lacks %s\n", req.method,
                            req.path, resp.allow, cases[i].allow[j]);
                fail();
            }
        }
        if (it_header_lists(resp.allow, req.method)) {
            print_error("%s %s: Allow \"%s\" lists the refused method\n",
                        req.method, req.path, resp.allow);
            fail();
        }
        it_resp_free(&resp);
    }
}

/* ---- login ---- */

static void test_auth_code(void **state)
{
    /* As written, and in E.164 form (the default region is CN). */
    static const char *const good[][2] = {
        {"13800138000", "+8613800138000"},
        {"+8613800138000", "+8613800138000"},
        {"008613800138000", "+8613800138000"},
        {"8613800138000", "+8613800138000"},
        {"013800138000", "+8613800138000"},
        {"+12025550143", "+12025550143"},
        {"+447700900123", "+447700900123"},
        {"+123456789012345", "+123456789012345"},
    };
    struct it_resp resp;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char *body = xasprintf("{\"phone\":\"%s\"}", good[i][0]);

        expect_ok("POST", "/api/auth/code", body, NULL, 200, &resp);
        assert_json_streq(resp.json, "phone", good[i][1]);
        assert_json_int(resp.json, "expiresIn", 300);
        assert_true(it_is_digits(it_json_str(resp.json, "code")));
        assert_int_equal(6, strlen(it_json_str(resp.json, "code")));
        it_resp_free(&resp);
        free(body);
    }
}

static void test_auth_code_bad_request(void **state)
{
    static const char *const bad[] = {
        "{\"phone\":\"12345\"}",
        "{\"phone\":\"123456\"}",
        "{\"phone\":\"+123456\"}",
        "{\"phone\":\"23800138000\"}",
        "{\"phone\":\"+8623800138000\"}",
        "{\"phone\":\"+0123456789\"}",
        "{\"phone\":\"1234567890123456\"}",
        "{\"phone\":\"+\"}",
        "{\"phone\":\"\"}",
        "{\"phone\":\"++8613800138000\"}",
        "{\"phone\":\"138 0013 8000\"}",
        "{\"phone\":\"1380013800a\"}",
        /* A country codes are not sent to (SECKILL_SMS_REGIONS). */
        "{\"phone\":\"+85261234567\"}",
        "{\"phone\":\"86+13800138000\"}",
        "{\"phone\":13800138000}",
        "{\"phone\":null}",
        "{\"phone\":[\"13800138000\"]}",
        "{}",
        "[]",
        "[\"13800138000\"]",
        "\"13800138000\"",
        "42",
        "null",
        "{\"phone\":\"13800138000\"",
        "{phone:\"13800138000\"}",
        "not json",
        " ",
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_error("POST", "/api/auth/code", bad[i], NULL, 400,
                     "BAD_REQUEST");
    /* No body at all is malformed JSON too. */
    expect_error("POST", "/api/auth/code", NULL, NULL, 400, "BAD_REQUEST");
}

static void test_login(void **state)
{
    char *phone = unique_phone(), *phone2 = unique_phone();
    char *code = request_code(phone);
    char tok[TOKEN_STR_LEN];
    struct token_claims c = {0};
    struct it_resp resp;
    int64_t id;

    (void)state;
    id = login_ok(phone, code, tok);

    /* The token works and names that user. */
    assert_int_equal(0,
                     token_verify(it_secret(), tok, strlen(tok), now_s(), &c));
    assert_int_equal(id, c.user_id);
    assert_int_equal(TOKEN_ROLE_USER, c.role);
    expect_ok("GET", "/api/orders", NULL, tok, 200, &resp);
    assert_true(json_is_array(json_object_get(resp.json, "items")));
    it_resp_free(&resp);

    /* A code is single-use. */
    login_refused(phone, code);

    /* The same phone logs in as the same user later. */
    assert_int_equal(id, login_new_code(phone, NULL));

    /* Another phone is another user. */
    assert_true(id != login_new_code(phone2, NULL));
    free(code);
    free(phone2);
    free(phone);
}

/* A six-digit code that differs from code in its last digit. */
static void wrong_code(const char *code, char out[7])
{
    memcpy(out, code, 6);
    out[5] = (char)('0' + (code[5] - '0' + 1) % 10);
    out[6] = '\0';
}

static void test_login_wrong_code(void **state)
{
    char *phone = unique_phone();
    char *code;
    char wrong[7];
    int i;

    (void)state;
    /* Wrong tries (fewer than make the address wait: test_login.c) leave
     * the code usable; once used it is gone. */
    code = request_code(phone);
    wrong_code(code, wrong);
    for (i = 0; i < 2; i++)
        login_refused(phone, wrong);
    login_ok(phone, code, NULL);
    login_refused(phone, code);
    free(code);

    /* A new code after that. */
    login_new_code(phone, NULL);
    free(phone);
}

/*
 * One number written six ways: the five forms of one Chinese mobile
 * number log in as one user, with one code (asked in one form, used in
 * another); with a "+" the leading 1 is a country code, another number.
 */
static void test_login_phone_forms(void **state)
{
    char *base = unique_phone();
    char *forms[5] = {xstrdup(base), xasprintf("86%s", base),
                      xasprintf("+86%s", base), xasprintf("0086%s", base),
                      xasprintf("0%s", base)};
    char *other = xasprintf("+%s", base), *code;
    int64_t id;

    (void)state;
    id = login_new_code(forms[0], NULL);
    for (size_t i = 1; i < 5; i++)
        assert_int_equal(id, login_new_code(forms[i], NULL));
    /* A code asked with one form is good with another. */
    code = request_code(forms[3]);
    assert_int_equal(id, login_ok(forms[4], code, NULL));
    free(code);
    assert_true(id != login_new_code(other, NULL));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM users WHERE "
                                      "phone = '+86%s'",
                                      base));
    for (size_t i = 0; i < 5; i++)
        free(forms[i]);
    free(other);
    free(base);
}

static void test_login_code_is_per_phone(void **state)
{
    char *a = unique_phone(), *b = unique_phone();
    char *code_a = request_code(a), *code_b = request_code(b);

    (void)state;
    /* Codes are random: make sure a's is not also b's. */
    while (strcmp(code_a, code_b) == 0) {
        free(code_a);
        code_a = request_code(a);
    }
    login_refused(b, code_a);
    /* That wrong try did not spend a's code. */
    login_ok(a, code_a, NULL);
    free(code_a);
    free(code_b);
    free(a);
    free(b);
}

/*
 * An expired code is refused. The phone's codes live in Redis under
 * login:{p:PHONE}:codes with a 300 s TTL (store.h); expire it early
 * rather than wait.
 */
static void test_login_code_expires(void **state)
{
    char *phone = unique_phone();
    char *code = request_code(phone), *key;
    redisContext *rc = it_redis_connect();
    redisReply *r;
    int64_t deadline;

    (void)state;
    key = xasprintf("login:{p:+86%s}:codes", phone);
    r = redisCommand(rc, "TTL %s", key);
    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    if (r->integer < 290 || r->integer > 300) {
        print_error("TTL of %s is %lld, expected about 300\n", key,
                    (long long)r->integer);
        fail();
    }
    freeReplyObject(r);
    r = redisCommand(rc, "PEXPIRE %s 1", key);
    assert_non_null(r);
    assert_int_equal(1, r->integer);
    freeReplyObject(r);
    deadline = util_mono_ms() + 2000;
    for (;;) {
        r = redisCommand(rc, "EXISTS %s", key);
        assert_non_null(r);
        if (r->integer == 0 || util_mono_ms() > deadline)
            break;
        freeReplyObject(r);
        usleep(5 * 1000);
    }
    assert_int_equal(0, r->integer);
    freeReplyObject(r);
    redisFree(rc);

    login_refused(phone, code);
    free(key);
    free(code);
    free(phone);
}

static void test_login_without_code(void **state)
{
    char *phone = unique_phone();

    (void)state;
    login_refused(phone, "123456");
    free(phone);
}

static void test_login_bad_request(void **state)
{
    static const char *const bad[] = {
        "{\"phone\":\"13800138000\",\"code\":\"12345\"}",
        "{\"phone\":\"13800138000\",\"code\":\"1234567\"}",
        "{\"phone\":\"13800138000\",\"code\":\"12a456\"}",
        "{\"phone\":\"13800138000\",\"code\":\"\"}",
        "{\"phone\":\"13800138000\",\"code\":123456}",
        "{\"phone\":\"13800138000\",\"code\":null}",
        "{\"phone\":\"13800138000\"}",
        "{\"code\":\"123456\"}",
        "{\"phone\":\"123\",\"code\":\"123456\"}",
        "{\"phone\":13800138000,\"code\":\"123456\"}",
        "[]",
        "{\"phone\":\"13800138000\",\"code\":\"123456\"",
        "",
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct it_req req = {.method = "POST",
                             .path = "/api/auth/login",
                             .body = bad[i][0] ? bad[i] : NULL};

        expect_error_req(&req, 400, "BAD_REQUEST");
    }
}

/* ---- tokens ---- */

static void test_token_rejected(void **state)
{
    char good[TOKEN_STR_LEN], tok[TOKEN_STR_LEN];
    unsigned char other_key[TOKEN_KEY_LEN];
    struct token_claims c = {0};
    struct it_resp resp;
    char *hdr;
    size_t i;

    (void)state;
    user_token(uid(2), good);
    /* The control: the good token is accepted. */
    expect_ok("GET", "/api/orders", NULL, good, 200, &resp);
    it_resp_free(&resp);

    expect_error("GET", "/api/orders", NULL, NULL, 401, "UNAUTHORIZED");
    {
        static const char *const raw[] = {
            "Bearer", "Bearer ", "Bearer not-a-token", "Token abc", ""};

        for (i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
            struct it_req req = {.method = "GET",
                                 .path = "/api/orders",
                                 .authorization = raw[i]};

            expect_error_req(&req, 401, "UNAUTHORIZED");
        }
    }
    /* A good token under another scheme. */
    hdr = xasprintf("Basic %s", good);
    {
        struct it_req req = {
            .method = "GET", .path = "/api/orders", .authorization = hdr};

        expect_error_req(&req, 401, "UNAUTHORIZED");
    }
    free(hdr);

    /* Tampered: one character of the payload changed. */
    strcpy(tok, good);
    tok[12] = tok[12] == 'A' ? 'B' : 'A';
    expect_error("GET", "/api/orders", NULL, tok, 401, "UNAUTHORIZED");
    /* Truncated and extended. */
    strcpy(tok, good);
    tok[strlen(tok) - 1] = '\0';
    expect_error("GET", "/api/orders", NULL, tok, 401, "UNAUTHORIZED");
    hdr = xasprintf("%sA", good);
    expect_error("GET", "/api/orders", NULL, hdr, 401, "UNAUTHORIZED");
    free(hdr);

    /* Expired. */
    it_token(uid(2), TOKEN_ROLE_USER, -10, tok);
    expect_error("GET", "/api/orders", NULL, tok, 401, "UNAUTHORIZED");

    /* Signed with another key. */
    memcpy(other_key, it_secret(), sizeof(other_key));
    other_key[0] ^= 0x5a;
    c.user_id = uid(2);
    c.role = TOKEN_ROLE_USER;
    c.expires = now_s() + 3600;
    assert_int_equal(0, token_sign(other_key, &c, tok));
    expect_error("GET", "/api/orders", NULL, tok, 401, "UNAUTHORIZED");
    c.role = TOKEN_ROLE_ADMIN;
    assert_int_equal(0, token_sign(other_key, &c, tok));
    expect_error("POST", "/api/vouchers",
                 "{\"shopId\":1,\"title\":\"t\",\"payValue\":1,"
                 "\"actualValue\":1}",
                 tok, 401, "UNAUTHORIZED");
}

/* ---- vouchers ---- */

static const char normal_body[] = "{\"shopId\":1,\"title\":\"normal\","
                                  "\"payValue\":100,\"actualValue\":200}";

static void test_voucher_create_auth(void **state)
{
    char tok[TOKEN_STR_LEN];
    struct it_resp resp;

    (void)state;
    expect_error("POST", "/api/vouchers", normal_body, NULL, 401,
                 "UNAUTHORIZED");
    user_token(uid(3), tok);
    expect_error("POST", "/api/vouchers", normal_body, tok, 403, "FORBIDDEN");
    expect_ok("POST", "/api/vouchers", normal_body, admin_tok, 201, &resp);
    assert_true(it_json_id(resp.json, "id") > 0);
    it_resp_free(&resp);
}

static char *repeat(const char *unit, size_t n)
{
    size_t ul = strlen(unit), i;
    char *s = xmalloc(ul * n + 1);

    for (i = 0; i < n; i++)
        memcpy(s + i * ul, unit, ul);
    s[ul * n] = '\0';
    return s;
}

/*
 * The fields of a voucher body as JSON texts, written in this order. NULL
 * takes the default: shopId 1, title "t", payValue 1 and actualValue 1
 * (a valid normal voucher), the rest absent. OMIT leaves a default out.
 */
struct voucher_fields {
    const char *shop_id, *title, *pay_value, *actual_value, *sub_title, *rules,
        *type, *stock, *begin_time, *end_time;
};
static const char OMIT[] = "(omit)";

/* The JSON text of f; free(3) it. */
static char *voucher_body(const struct voucher_fields *f)
{
    const struct {
        const char *key, *value;
    } kv[] = {
        {"shopId", f->shop_id ? f->shop_id : "1"},
        {"title", f->title ? f->title : "\"t\""},
        {"payValue", f->pay_value ? f->pay_value : "1"},
        {"actualValue", f->actual_value ? f->actual_value : "1"},
        {"subTitle", f->sub_title},
        {"rules", f->rules},
        {"type", f->type},
        {"stock", f->stock},
        {"beginTime", f->begin_time},
        {"endTime", f->end_time},
    };
    char *body = xstrdup("{"), *more;
    size_t i;

    for (i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
        if (!kv[i].value || kv[i].value == OMIT)
            continue;
        more = xasprintf("%s%s\"%s\":%s", body, body[1] ? "," : "", kv[i].key,
                         kv[i].value);
        free(body);
        body = more;
    }
    more = xasprintf("%s}", body);
    free(body);
    return more;
}

/* s in double quotes, as a JSON string; free(3) it. */
static char *quoted(const char *s)
{
    return xasprintf("\"%s\"", s);
}

static void test_voucher_create_bad_request(void **state)
{
    char tb[UTIL_TIME_LEN], te[UTIL_TIME_LEN];
    char tb2[UTIL_TIME_LEN];
    char *b = quoted(it_time(-60, tb)), *e = quoted(it_time(3600, te));
    char *b2h = quoted(it_time(-7200, tb2));
    char *a256 = repeat("a", 256), *r1025 = repeat("r", 1025);
    char *t256 = quoted(a256), *rules1025 = quoted(r1025);
    const char *sk = "\"seckill\"";
    const struct voucher_fields bad[] = {
        /* Missing or malformed required fields. */
        {.shop_id = OMIT},
        {.title = OMIT},
        {.pay_value = OMIT},
        {.actual_value = OMIT},
        {.shop_id = "0"},
        {.shop_id = "-1"},
        {.shop_id = "1.5"},
        {.shop_id = "\"x\""},
        {.title = "\"\""},
        {.title = "42"},
        {.title = t256},
        {.pay_value = "-1"},
        {.actual_value = "-5"},
        {.pay_value = "\"1\""},
        {.pay_value = "1.5"},
        /* The price: at least 1, at most the voucher's value. */
        {.pay_value = "0", .actual_value = "0"},
        {.pay_value = "0", .actual_value = "100"},
        {.pay_value = "101", .actual_value = "100"},
        {.sub_title = "42"},
        {.sub_title = t256},
        {.rules = rules1025},
        {.rules = "[]"},
        {.type = "\"other\""},
        {.type = "1"},
        /* A normal voucher has no stock nor window. */
        {.stock = "5"},
        {.type = "\"normal\"", .begin_time = "\"2026-01-01T00:00:00Z\""},
        {.end_time = "\"2026-01-01T00:00:00Z\""},
        /* A seckill voucher needs all three, well-formed. */
        {.type = sk, .begin_time = b, .end_time = e},
        {.type = sk, .stock = "1", .end_time = e},
        {.type = sk, .stock = "1", .begin_time = b},
        {.type = sk, .stock = "-1", .begin_time = b, .end_time = e},
        {.type = sk, .stock = "\"5\"", .begin_time = b, .end_time = e},
        {.type = sk, .stock = "1.5", .begin_time = b, .end_time = e},
        /* endTime must be after beginTime. */
        {.type = sk, .stock = "1", .begin_time = b, .end_time = b},
        {.type = sk, .stock = "1", .begin_time = e, .end_time = b},
        {.type = sk,
         .stock = "1",
         .begin_time = "\"yesterday\"",
         .end_time = e},
        {.type = sk,
         .stock = "1",
         .begin_time = b,
         .end_time = "\"2026-02-30T00:00:00Z\""},
        {.type = sk, .stock = "1", .begin_time = "1700000000", .end_time = e},
        /* A sale over before it is made. */
        {.type = sk, .stock = "1", .begin_time = b2h, .end_time = b},
        /* Texts the pages print: no controls, nothing that reorders or
         * hides text, not only spaces. */
        {.title = "\"bell\\u0007\""},
        {.title = "\"\\u001b[31mred\""},
        {.title = "\"\\u202eevil.exe\""},
        {.title = "\"two\\nlines\""},
        {.title = "\"zero\\u200bwidth\""},
        {.title = "\"   \""},
        {.title = "\"\\u3000\""},
        {.sub_title = "\"\\u0085\""},
        {.rules = "\"\\u001b[2J\""},
        {.rules = "\"a\\rb\""},
        {.title = "\"line\\u2028separator\""},
        {.title = "\"\\u3164\""},
        {.title = "\"\\u2003\\u2003\""},
        {.title = "\"\\u2800\\u1680\""},
        {.title = "\"soft\\u00adhyphen\""},
        {.title = "\"private\\ue000use\""},
        {.title = "\"\\ufdd0\""},
    };
    /* Not an object, or not JSON; NULL: no body at all. */
    static const char *const raw[] = {
        "[]", "\"voucher\"", "{\"shopId\":1,", "{'shopId':1}", NULL,
    };
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *body = voucher_body(&bad[i]);

        expect_error("POST", "/api/vouchers", body, admin_tok, 400,
                     "BAD_REQUEST");
        free(body);
    }
    for (i = 0; i < sizeof(raw) / sizeof(raw[0]); i++)
        expect_error("POST", "/api/vouchers", raw[i], admin_tok, 400,
                     "BAD_REQUEST");
    free(b);
    free(b2h);
    free(e);
    free(a256);
    free(r1025);
    free(t256);
    free(rules1025);
}

static void test_voucher_create_limits(void **state)
{
    char *t255 = repeat("a", 255);
    /* 255 two-byte characters: the limits count characters, not bytes. */
    char *u255 = repeat("\xc3\xa9", 255);
    char *r1024 = repeat("r", 1024);
    char *body;
    struct it_resp resp;
    int64_t id;

    (void)state;
    body = xasprintf("{\"shopId\":1,\"title\":\"%s\",\"subTitle\":\"%s\","
                     "\"rules\":\"%s\",\"payValue\":1,\"actualValue\":1,"
                     "\"somethingElse\":{\"ignored\":true}}",
                     t255, t255, r1024);
    id = it_voucher_create(&srv, body);
    get_voucher(id, &resp);
    assert_json_streq(resp.json, "title", t255);
    assert_json_streq(resp.json, "subTitle", t255);
    assert_json_streq(resp.json, "rules", r1024);
    assert_json_int(resp.json, "payValue", 1);
    assert_json_int(resp.json, "actualValue", 1);
    assert_json_streq(resp.json, "type", "normal");
    assert_null(json_object_get(resp.json, "somethingElse"));
    it_resp_free(&resp);
    free(body);

    body = xasprintf("{\"shopId\":1,\"title\":\"%s\",\"subTitle\":\"%s\","
                     "\"payValue\":1,\"actualValue\":2}",
                     u255, u255);
    id = it_voucher_create(&srv, body);
    get_voucher(id, &resp);
    assert_json_streq(resp.json, "title", u255);
    assert_json_streq(resp.json, "subTitle", u255);
    it_resp_free(&resp);
    free(body);

    /* Surrounding spaces go (an ideographic one too); rules keep their
     * lines and tabs; right-to-left text is text. */
    id = it_voucher_create(&srv,
                           "{\"shopId\":1,\"title\":\"  padded \\u3000\","
                           "\"subTitle\":\"\\u00a0\u05e9\u05dc\u05d5\u05dd \","
                           "\"rules\":\"\\n one\\n\\ttwo \\n\",\"payValue\":1,"
                           "\"actualValue\":1}");
    get_voucher(id, &resp);
    assert_json_streq(resp.json, "title", "padded");
    assert_json_streq(resp.json, "subTitle", "\u05e9\u05dc\u05d5\u05dd");
    assert_json_streq(resp.json, "rules", "one\n\ttwo");
    it_resp_free(&resp);
    /* An emoji joined by U+200D is text; the limit counts what is left
     * once the blanks go. */
    body = xasprintf("{\"shopId\":1,\"title\":\"  %s  \",\"subTitle\":"
                     "\"\\ud83d\\udc69\\u200d\\ud83d\\udcbb\","
                     "\"payValue\":1,\"actualValue\":1}",
                     t255);
    id = it_voucher_create(&srv, body);
    free(body);
    get_voucher(id, &resp);
    assert_json_streq(resp.json, "title", t255);
    assert_json_streq(resp.json, "subTitle",
                      "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb");
    it_resp_free(&resp);

    /* Stock 0 is a valid (sold-out) seckill voucher. */
    id = it_seckill_create(&srv, 1, 0, -60, 3600);
    assert_int_equal(0, voucher_stock(id));

    free(t255);
    free(u255);
    free(r1024);
}

static void test_voucher_get(void **state)
{
    char b[UTIL_TIME_LEN], e[UTIL_TIME_LEN];
    int64_t shop = it_unique();
    struct it_resp resp;
    char *body;
    int64_t id;

    (void)state;
    it_time(-120, b);
    it_time(7200, e);
    body = xasprintf("{\"shopId\":%lld,\"title\":\"50 off 47.50\","
                     "\"subTitle\":\"weekdays\",\"rules\":\"dine-in only\","
                     "\"payValue\":4750,\"actualValue\":5000,"
                     "\"type\":\"seckill\",\"stock\":7,"
                     "\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
                     (long long)shop, b, e);
    id = it_voucher_create(&srv, body);
    free(body);
    get_voucher(id, &resp);
    assert_int_equal(id, it_json_id(resp.json, "id"));
    assert_json_int_or_id(resp.json, "shopId", shop);
    assert_json_streq(resp.json, "title", "50 off 47.50");
    assert_json_streq(resp.json, "subTitle", "weekdays");
    assert_json_streq(resp.json, "rules", "dine-in only");
    assert_json_int(resp.json, "payValue", 4750);
    assert_json_int(resp.json, "actualValue", 5000);
    assert_json_streq(resp.json, "type", "seckill");
    assert_json_int(resp.json, "stock", 7);
    assert_json_streq(resp.json, "beginTime", b);
    assert_json_streq(resp.json, "endTime", e);
    assert_time_near_now(it_json_str(resp.json, "createTime"), 120);
    assert_time_near_now(it_json_str(resp.json, "updateTime"), 120);
    it_resp_free(&resp);

    /* A normal voucher: defaults, and no seckill fields. */
    body = xasprintf("{\"shopId\":%lld,\"title\":\"plain\","
                     "\"payValue\":100,\"actualValue\":150}",
                     (long long)shop);
    id = it_voucher_create(&srv, body);
    free(body);
    get_voucher(id, &resp);
    assert_int_equal(id, it_json_id(resp.json, "id"));
    assert_json_streq(resp.json, "title", "plain");
    assert_json_streq(resp.json, "subTitle", "");
    assert_json_streq(resp.json, "rules", "");
    assert_json_streq(resp.json, "type", "normal");
    assert_null(json_object_get(resp.json, "stock"));
    assert_null(json_object_get(resp.json, "beginTime"));
    assert_null(json_object_get(resp.json, "endTime"));
    assert_time_near_now(it_json_str(resp.json, "createTime"), 120);
    it_resp_free(&resp);
}

static const char *const bad_ids[] = {
    "abc",
    "0",
    "-1",
    "1.5",
    "99999999999999999999",
    "9223372036854775808",
    "1e3",
    "0x10",
    "12abc",
};
#define MISSING_ID "9223372036854775807"

static void test_bad_and_missing_ids(void **state)
{
    char tok[TOKEN_STR_LEN];
    char path[128];
    size_t i;

    (void)state;
    user_token(uid(4), tok);
    for (i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
        snprintf(path, sizeof(path), "/api/vouchers/%s", bad_ids[i]);
        expect_error("GET", path, NULL, NULL, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/vouchers/%s/seckill", bad_ids[i]);
        expect_error("POST", path, NULL, tok, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/orders/%s", bad_ids[i]);
        expect_error("GET", path, NULL, tok, 400, "BAD_REQUEST");
    }
    expect_error("GET", "/api/vouchers/" MISSING_ID, NULL, NULL, 404,
                 "NOT_FOUND");
    expect_error("POST", "/api/vouchers/" MISSING_ID "/seckill", NULL, tok, 404,
                 "NOT_FOUND");
    expect_error("GET", "/api/orders/" MISSING_ID, NULL, tok, 404, "NOT_FOUND");
    expect_error("GET", "/api/orders/" MISSING_ID, NULL, admin_tok, 404,
                 "NOT_FOUND");
}

/* GET path, assert 200 and the ids of its items, in order. */
static void expect_list(const char *path, const char *token, const int64_t *ids,
                        size_t n)
{
    struct it_resp resp;
    const json_t *items;
    size_t i;

    expect_ok("GET", path, NULL, token, 200, &resp);
    items = json_object_get(resp.json, "items");
    assert_true(json_is_array(items));
    if (json_array_size(items) != n) {
        print_error("GET %s: %zu items, expected %zu: %.1000s\n", path,
                    json_array_size(items), n, resp.body);
        fail();
    }
    for (i = 0; i < n; i++)
        assert_int_equal(ids[i], it_json_id(json_array_get(items, i), "id"));
    it_resp_free(&resp);
}

/* Create a normal voucher of shop with title; returns its id. */
static int64_t normal_create(int64_t shop, const char *title)
{
    char *body = xasprintf("{\"shopId\":%lld,\"title\":\"%s\","
                           "\"payValue\":1,\"actualValue\":2}",
                           (long long)shop, title);
    int64_t id = it_voucher_create(&srv, body);

    free(body);
    return id;
}

/* GET /api/vouchers?shopId=<shop><more>, asserting the ids as expect_list. */
static void expect_shop_list(int64_t shop, const char *more, const int64_t *ids,
                             size_t n)
{
    char path[128];

    snprintf(path, sizeof(path), "/api/vouchers?shopId=%lld%s", (long long)shop,
             more);
    expect_list(path, NULL, ids, n);
}

static void test_voucher_list(void **state)
{
    static const char *const bad_queries[] = {
        "limit=0",    "limit=101", "limit=-1",  "limit=abc",
        "shopId=abc", "shopId=0",  "shopId=-3", "shopId=99999999999999999999",
    };
    int64_t shop = it_unique(), shop2 = it_unique();
    int64_t ids[21], newest[21];
    char path[128];
    struct it_resp resp;
    const json_t *items;
    size_t i;

    (void)state;
    for (i = 0; i < 3; i++) {
        char title[16];

        snprintf(title, sizeof(title), "list %zu", i);
        ids[i] = normal_create(shop, title);
    }
    ids[3] = it_seckill_create(&srv, shop, 3, -60, 3600);
    for (i = 0; i < 4; i++)
        newest[i] = ids[3 - i];
    expect_shop_list(shop, "", newest, 4);
    expect_shop_list(shop, "&limit=2", newest, 2);
    snprintf(path, sizeof(path), "/api/vouchers?limit=1&shopId=%lld",
             (long long)shop);
    expect_list(path, NULL, newest, 1);
    expect_shop_list(shop, "&limit=100", newest, 4);
    /* Items carry the whole voucher. */
    snprintf(path, sizeof(path), "/api/vouchers?shopId=%lld", (long long)shop);
    expect_ok("GET", path, NULL, NULL, 200, &resp);
    items = json_object_get(resp.json, "items");
    assert_json_streq(json_array_get(items, 0), "type", "seckill");
    assert_json_int(json_array_get(items, 0), "stock", 3);
    assert_json_streq(json_array_get(items, 1), "title", "list 2");
    assert_json_int_or_id(json_array_get(items, 1), "shopId", shop);
    assert_json_int(json_array_get(items, 1), "payValue", 1);
    it_resp_free(&resp);

    /* An unknown shop has none. */
    expect_shop_list(it_unique(), "", NULL, 0);

    /* The default limit is 20. */
    for (i = 0; i < 21; i++)
        ids[i] = normal_create(shop2, "many");
    for (i = 0; i < 21; i++)
        newest[i] = ids[20 - i];
    expect_shop_list(shop2, "", newest, 20);
    expect_shop_list(shop2, "&limit=21", newest, 21);

    /* Without a shop: every shop, newest first, at most 20. */
    expect_ok("GET", "/api/vouchers", NULL, NULL, 200, &resp);
    items = json_object_get(resp.json, "items");
    assert_int_equal(20, json_array_size(items));
    assert_true(it_json_id(json_array_get(items, 0), "id") >= newest[0]);
    for (i = 1; i < 20; i++)
        assert_true(it_json_id(json_array_get(items, i), "id") <
                    it_json_id(json_array_get(items, i - 1), "id"));
    it_resp_free(&resp);

    for (i = 0; i < sizeof(bad_queries) / sizeof(bad_queries[0]); i++) {
        snprintf(path, sizeof(path), "/api/vouchers?%s", bad_queries[i]);
        expect_error("GET", path, NULL, NULL, 400, "BAD_REQUEST");
    }
}

/* ---- purchase ---- */

static void test_purchase(void **state)
{
    int64_t v = it_seckill_create(&srv, 1, 2, -60, 3600);
    int64_t o1, o2;
    struct it_resp resp;

    (void)state;
    o1 = purchase_ok(v, uid(10));
    assert_int_equal(1, voucher_stock(v));
    purchase_refused(v, uid(10), "ALREADY_PURCHASED");
    assert_int_equal(1, voucher_stock(v));

    o2 = purchase_ok(v, uid(11));
    assert_true(o2 != o1);
    assert_int_equal(0, voucher_stock(v));
    purchase_refused(v, uid(12), "SOLD_OUT");
    /* The owner of an order still hears ALREADY_PURCHASED or SOLD_OUT,
     * never a second order. */
    it_purchase(&srv, v, uid(11), &resp);
    assert_int_equal(409, resp.status);
    it_resp_free(&resp);

    assert_int_equal(2, it_sql_order_count(v));
    assert_int_equal(0, it_sql_stock(v));
    assert_int_equal(uid(10), it_sql_scalar("SELECT user_id FROM "
                                            "voucher_orders WHERE id = %lld",
                                            (long long)o1));
    assert_int_equal(v, it_sql_scalar("SELECT voucher_id FROM "
                                      "voucher_orders WHERE id = %lld",
                                      (long long)o2));
}

static void test_purchase_ignores_body(void **state)
{
    int64_t v = it_seckill_create(&srv, 1, 1, -60, 3600);
    char tok[TOKEN_STR_LEN], path[64];
    struct it_resp resp;

    (void)state;
    user_token(uid(13), tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    expect_ok("POST", path, "this is {not json", tok, 201, &resp);
    assert_non_null(it_json_str(resp.json, "orderId"));
    it_resp_free(&resp);
}

static void test_purchase_errors(void **state)
{
    char path[64];
    int64_t v;

    (void)state;
    /* No token. */
    v = it_seckill_create(&srv, 1, 5, -60, 3600);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    expect_error("POST", path, NULL, NULL, 401, "UNAUTHORIZED");
    assert_int_equal(5, voucher_stock(v));

    /* A normal voucher is not for sale here. */
    v = it_voucher_create(&srv, normal_body);
    purchase_refused(v, uid(20), "NOT_SECKILL");

    /* Outside the window. */
    v = it_seckill_create(&srv, 1, 5, 3600, 7200);
    purchase_refused(v, uid(20), "NOT_STARTED");
    assert_int_equal(5, voucher_stock(v));
    v = it_seckill_create(&srv, 1, 5, -7200, -5);
    purchase_refused(v, uid(20), "ENDED");
    assert_int_equal(5, voucher_stock(v));

    /* No stock. */
    v = it_seckill_create(&srv, 1, 0, -60, 3600);
    purchase_refused(v, uid(20), "SOLD_OUT");

    /* None of these made an order. */
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE user_id = %lld",
                                      (long long)uid(20)));
}

/* ---- orders ---- */

static void test_orders(void **state)
{
    char a[TOKEN_STR_LEN], b[TOKEN_STR_LEN], path[64];
    int64_t v[3], o[3], newest[3];
    struct it_resp resp;
    size_t i;

    (void)state;
    user_token(uid(30), a);
    user_token(uid(31), b);
    expect_list("/api/orders", a, NULL, 0);
    for (i = 0; i < 3; i++) {
        v[i] = it_seckill_create(&srv, 1, 10, -60, 3600);
        o[i] = purchase_ok(v[i], uid(30));
        newest[2 - i] = o[i];
    }

    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)o[0]);
    expect_ok("GET", path, NULL, a, 200, &resp);
    assert_int_equal(o[0], it_json_id(resp.json, "id"));
    assert_int_equal(uid(30), it_json_id(resp.json, "userId"));
    assert_int_equal(v[0], it_json_id(resp.json, "voucherId"));
    assert_json_streq(resp.json, "status", "unpaid");
    assert_time_near_now(it_json_str(resp.json, "createTime"), 120);
    it_resp_free(&resp);

    /* An admin sees it; another user does not, nor does nobody. */
    expect_ok("GET", path, NULL, admin_tok, 200, &resp);
    assert_int_equal(o[0], it_json_id(resp.json, "id"));
    assert_int_equal(uid(30), it_json_id(resp.json, "userId"));
    it_resp_free(&resp);
    expect_error("GET", path, NULL, b, 404, "NOT_FOUND");
    expect_error("GET", path, NULL, NULL, 401, "UNAUTHORIZED");

    /* The list: the caller's own, newest first. */
    expect_list("/api/orders", a, newest, 3);
    expect_list("/api/orders?limit=2", a, newest, 2);
    expect_list("/api/orders?limit=100", a, newest, 3);
    expect_list("/api/orders", b, NULL, 0);
    expect_ok("GET", "/api/orders", NULL, a, 200, &resp);
    for (i = 0; i < 3; i++) {
        const json_t *it =
            json_array_get(json_object_get(resp.json, "items"), i);

        assert_int_equal(uid(30), it_json_id(it, "userId"));
        assert_int_equal(v[2 - i], it_json_id(it, "voucherId"));
        assert_json_streq(it, "status", "unpaid");
    }
    it_resp_free(&resp);

    expect_error("GET", "/api/orders", NULL, NULL, 401, "UNAUTHORIZED");
    expect_error("GET", "/api/orders?limit=0", NULL, a, 400, "BAD_REQUEST");
    expect_error("GET", "/api/orders?limit=101", NULL, a, 400, "BAD_REQUEST");
    expect_error("GET", "/api/orders?limit=x", NULL, a, 400, "BAD_REQUEST");
}

static void test_orders_default_limit(void **state)
{
    char tok[TOKEN_STR_LEN];
    int64_t o[21], newest[21];
    size_t i;

    (void)state;
    user_token(uid(32), tok);
    for (i = 0; i < 21; i++) {
        o[i] = purchase_ok(it_seckill_create(&srv, 1, 1, -60, 3600), uid(32));
        newest[20 - i] = o[i];
    }
    expect_list("/api/orders", tok, newest, 20);
    expect_list("/api/orders?limit=21", tok, newest, 21);
}

/* ---- body size ---- */

/* A voucher body of exactly size bytes, padded with an unknown field. */
static char *body_of_size(size_t size)
{
    static const char head[] = "{\"shopId\":1,\"title\":\"big\","
                               "\"payValue\":1,\"actualValue\":1,\"pad\":\"";
    size_t fixed = strlen(head) + 2;
    char *s = xmalloc(size + 1);

    assert_true(size > fixed);
    memcpy(s, head, strlen(head));
    memset(s + strlen(head), 'x', size - fixed);
    memcpy(s + size - 2, "\"}", 2);
    s[size] = '\0';
    return s;
}

static void test_payload_too_large(void **state)
{
    char *body;
    struct it_resp resp;

    (void)state;
    body = body_of_size(64 * 1024);
    expect_ok("POST", "/api/vouchers", body, admin_tok, 201, &resp);
    it_resp_free(&resp);
    free(body);

    body = body_of_size(64 * 1024 + 1);
    expect_error("POST", "/api/vouchers", body, admin_tok, 413,
                 "PAYLOAD_TOO_LARGE");
    free(body);

    body = body_of_size(80 * 1024);
    expect_error("POST", "/api/auth/code", body, NULL, 413,
                 "PAYLOAD_TOO_LARGE");
    free(body);

    /* The server still serves afterwards. */
    expect_ok("GET", "/healthz", NULL, NULL, 200, &resp);
    it_resp_free(&resp);
}

/* ---- the CLI ---- */

/* Trim trailing newlines in place. */
static char *chomp(char *s)
{
    size_t n = strlen(s);

    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static void run_cli(char *const argv[], char **out)
{
    int status = it_run_capture(argv, out);

    if (status != 0) {
        print_error("%s %s %s ... exited with wait status %d\n", argv[0],
                    argv[1], argv[2] ? argv[2] : "", status);
        fail();
    }
}

static void test_cli_token(void **state)
{
    char user_arg[32];
    char *argv[8], *out;
    struct token_claims c = {0};
    struct it_resp resp;
    int64_t v, o;
    char path[64];

    (void)state;
    snprintf(user_arg, sizeof(user_arg), "%lld", (long long)uid(40));
    argv[0] = (char *)it_bin();
    argv[1] = (char *)"token";
    argv[2] = (char *)"--user";
    argv[3] = user_arg;
    argv[4] = (char *)"--ttl";
    argv[5] = (char *)"3600";
    argv[6] = NULL;
    run_cli(argv, &out);
    chomp(out);
    assert_null(strchr(out, '\n'));
    assert_int_equal(0,
                     token_verify(it_secret(), out, strlen(out), now_s(), &c));
    assert_int_equal(uid(40), c.user_id);
    assert_int_equal(TOKEN_ROLE_USER, c.role);
    assert_true(c.expires >= now_s() + 3600 - 60 &&
                c.expires <= now_s() + 3600 + 60);

    /* It works against the server, as that user. */
    v = it_seckill_create(&srv, 1, 1, -60, 3600);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    expect_ok("POST", path, NULL, out, 201, &resp);
    o = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)o);
    expect_ok("GET", path, NULL, out, 200, &resp);
    assert_int_equal(uid(40), it_json_id(resp.json, "userId"));
    it_resp_free(&resp);
    expect_error("POST", "/api/vouchers", normal_body, out, 403, "FORBIDDEN");
    free(out);

    /* --admin */
    argv[4] = (char *)"--admin";
    argv[5] = NULL;
    run_cli(argv, &out);
    chomp(out);
    assert_int_equal(0,
                     token_verify(it_secret(), out, strlen(out), now_s(), &c));
    assert_int_equal(uid(40), c.user_id);
    assert_int_equal(TOKEN_ROLE_ADMIN, c.role);
    expect_ok("POST", "/api/vouchers", normal_body, out, 201, &resp);
    it_resp_free(&resp);
    free(out);
}

static void test_cli_tokens(void **state)
{
    char first_arg[32];
    char *argv[7], *out, *line, *save = NULL;
    struct token_claims c = {0};
    struct it_resp resp;
    int n = 0;

    (void)state;
    snprintf(first_arg, sizeof(first_arg), "%lld", (long long)uid(50));
    argv[0] = (char *)it_bin();
    argv[1] = (char *)"tokens";
    argv[2] = (char *)"--first";
    argv[3] = first_arg;
    argv[4] = (char *)"--count";
    argv[5] = (char *)"3";
    argv[6] = NULL;
    run_cli(argv, &out);
    for (line = strtok_r(out, "\r\n", &save); line;
         line = strtok_r(NULL, "\r\n", &save), n++) {
        char *comma;
        int64_t id;

        if (n == 0) {
            assert_string_equal("user_id,token", line);
            continue;
        }
        assert_true(n <= 3);
        comma = strchr(line, ',');
        assert_non_null(comma);
        assert_int_equal(0, util_parse_id(line, (size_t)(comma - line), &id));
        assert_int_equal(uid(50) + n - 1, id);
        assert_int_equal(0, token_verify(it_secret(), comma + 1,
                                         strlen(comma + 1), now_s(), &c));
        assert_int_equal(id, c.user_id);
        assert_int_equal(TOKEN_ROLE_USER, c.role);
        expect_ok("GET", "/api/orders", NULL, comma + 1, 200, &resp);
        it_resp_free(&resp);
    }
    assert_int_equal(4, n);
    free(out);
}

/* Run the binary with args (split by the shell), its stderr into *out
 * too. Returns the wait status. */
static int run_cli_merged(const char *args, char **out)
{
    char *const argv[] = {
        (char *)"/bin/sh", (char *)"-c", (char *)"exec \"$0\" $1 2>&1",
        (char *)it_bin(),  (char *)args, NULL};

    return it_run_capture(argv, out);
}

/*
 * An unknown or abbreviated flag, a token command's option with the other
 * command, or a bad value stops the binary with exit status 2 and one line
 * naming it; --help and its kin exit 0.
 */
static void test_cli_refuses_bad_flags(void **state)
{
    static const struct {
        const char *args, *expect;
    } cases[] = {
        {"--por 8080", "seckilld: unknown option --por (see --help)\n"},
        {"--bind=127.0.0.1 --thread 3", "unknown option --thread "},
        {"--threads=0", "seckilld: --threads: must be 1..1024"},
        {"token --user 1 --count 2", "--count: only with tokens\n"},
        {"serve --dev=yes", "--dev: must be 0 or 1"},
    };
    char *out;
    int status;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        status = run_cli_merged(cases[i].args, &out);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 2 ||
            !strstr(out, cases[i].expect) ||
            strchr(out, '\n') != out + strlen(out) - 1) {
            print_error("seckilld %s: wait status %d, output \"%s\"; want "
                        "exit 2 and one line with \"%s\"\n",
                        cases[i].args, status, out, cases[i].expect);
            fail();
        }
        free(out);
    }
    status = run_cli_merged("--help", &out);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_non_null(strstr(out, "SECKILL_MYSQL_REPLICA_MAX_LAG_S"));
    free(out);
}

/* The man page renders without a warning from groff. */
static void test_cli_man_page(void **state)
{
    char *argv[] = {(char *)"/bin/sh", (char *)"-c",
                    (char *)"page=$(\"$0\" --help-man) || exit 3; "
                            "printf '%s\\n' \"$page\" | "
                            "groff -man -Tutf8 -ww -z 2>&1",
                    (char *)it_bin(), NULL};
    char *out;
    int status;

    (void)state;
    if (!it_which("groff")) {
        print_message("groff not found: the man page is not rendered\n");
        skip();
    }
    status = it_run_capture(argv, &out);
    if (status != 0 || out[0]) {
        print_error("groff: wait status %d, \"%s\"\n", status, out);
        fail();
    }
    free(out);
}

/*
 * Last: SIGTERM makes the server finish and exit 0 within
 * IT_STOP_TIMEOUT_MS (under ASan, also without leaks).
 */
static void test_clean_shutdown(void **state)
{
    (void)state;
    assert_int_equal(0, it_server_stop(&srv));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthz),
        cmocka_unit_test(test_readyz),
        cmocka_unit_test(test_unknown_route),
        cmocka_unit_test(test_method_not_allowed),
        cmocka_unit_test(test_auth_code),
        cmocka_unit_test(test_auth_code_bad_request),
        cmocka_unit_test(test_login),
        cmocka_unit_test(test_login_wrong_code),
        cmocka_unit_test(test_login_phone_forms),
        cmocka_unit_test(test_login_code_is_per_phone),
        cmocka_unit_test(test_login_code_expires),
        cmocka_unit_test(test_login_without_code),
        cmocka_unit_test(test_login_bad_request),
        cmocka_unit_test(test_token_rejected),
        cmocka_unit_test(test_voucher_create_auth),
        cmocka_unit_test(test_voucher_create_bad_request),
        cmocka_unit_test(test_voucher_create_limits),
        cmocka_unit_test(test_voucher_get),
        cmocka_unit_test(test_bad_and_missing_ids),
        cmocka_unit_test(test_voucher_list),
        cmocka_unit_test(test_purchase),
        cmocka_unit_test(test_purchase_ignores_body),
        cmocka_unit_test(test_purchase_errors),
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_orders_default_limit),
        cmocka_unit_test(test_payload_too_large),
        cmocka_unit_test(test_cli_token),
        cmocka_unit_test(test_cli_tokens),
        cmocka_unit_test(test_cli_refuses_bad_flags),
        cmocka_unit_test(test_cli_man_page),
        cmocka_unit_test(test_clean_shutdown),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "http", tests, group_setup, group_teardown));
}
