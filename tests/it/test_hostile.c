/*
 * test_hostile.c - hostile input and access against the real binary:
 * forged and mangled tokens on every authenticated route, SQL injection
 * and odd UTF-8 in every text field, oversized, nested, mistyped and
 * overflowing bodies, slow and flooding clients (the request deadline,
 * the per-address and the global connection limits) and the per-user and
 * per-address rate limits kept in Redis. tests/it/test_http.c has the
 * plain error cases; this file adds what an attacker would try.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "tests/it/harness.h"

/* The instance with the default limits, for the input tests. */
static struct it_server srv;
static char admin_tok[TOKEN_STR_LEN];
static int64_t user_base;

static int64_t uid(int k)
{
    return user_base + k;
}

static void user_token(int64_t user_id, char out[TOKEN_STR_LEN])
{
    it_token(user_id, TOKEN_ROLE_USER, 3600, out);
}

/* Send a request to s and assert an error answer with code. */
static void expect_error_on(const struct it_server *s, const struct it_req *req,
                            long status, const char *code)
{
    struct it_resp resp;
    const char *got;

    it_http_do(s, req, &resp);
    got = it_json_str(json_object_get(resp.json, "error"), "code");
    if (resp.status != status || !got || strcmp(got, code) != 0)
        print_error("request: %s %s body=%.120s auth=%.80s\n", req->method,
                    req->path, req->body ? req->body : "(none)",
                    req->authorization ? req->authorization
                    : req->token       ? req->token
                                       : "(none)");
    it_assert_error(&resp, status, code);
    it_resp_free(&resp);
}

static void expect_error(const char *method, const char *path, const char *body,
                         const char *token, long status, const char *code)
{
    struct it_req req = {
        .method = method, .path = path, .body = body, .token = token};

    expect_error_on(&srv, &req, status, code);
}

/* Assert a JSON answer with status; resp is the caller's to free. */
static void expect_ok(const char *method, const char *path, const char *body,
                      const char *token, long status, struct it_resp *resp)
{
    it_http(&srv, method, path, body, token, resp);
    if (resp->status != status)
        print_error("request: %s %s body=%.200s\n", method, path,
                    body ? body : "(none)");
    it_assert_status(resp, status);
    it_assert_json_type(resp);
}

/* Lower-case hex of n bytes of s, for comparing stored bytes in SQL. */
static char *hex_of(const char *s, size_t n)
{
    char *out = xmalloc(2 * n + 1);

    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)s[i]);
    out[2 * n] = '\0';
    return out;
}

/* JSON string literal of raw UTF-8 text (quotes and backslashes escaped,
 * everything else as is); free(3) it. */
static char *json_quote(const char *s)
{
    json_t *v = json_string(s);
    char *out;

    assert_non_null(v);
    out = json_dumps(v, JSON_ENCODE_ANY);
    json_decref(v);
    assert_non_null(out);
    return out;
}

static char *repeat(const char *unit, size_t n)
{
    size_t ul = strlen(unit);
    char *s = xmalloc(ul * n + 1);

    for (size_t i = 0; i < n; i++)
        memcpy(s + i * ul, unit, ul);
    s[ul * n] = '\0';
    return s;
}

/* ---- raw sockets: what curl will not send ---- */

/* A request of method with body and content_type (NULL: no such header)
 * to path, raw: the harness's curl adds a Content-Type of its own. */
static void raw_send(uint16_t port, const char *method, const char *path,
                     const char *content_type, const char *token,
                     const char *body, struct it_raw_resp *resp)
{
    char *ct = content_type ? xasprintf("Content-Type: %s\r\n", content_type)
                            : xstrdup("");
    char *auth =
        token ? xasprintf("Authorization: Bearer %s\r\n", token) : xstrdup("");
    char *req = xasprintf("%s %s HTTP/1.1\r\nHost: t\r\n%s%s"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                          method, path, ct, auth, strlen(body), body);

    it_raw_request(port, req, strlen(req), 10000, resp);
    free(req);
    free(auth);
    free(ct);
}

static void raw_post(uint16_t port, const char *path, const char *content_type,
                     const char *token, const char *body,
                     struct it_raw_resp *resp)
{
    raw_send(port, "POST", path, content_type, token, body, resp);
}

/* A mobile number of this run that nothing has used yet. */
static char *fresh_phone(void)
{
    return xasprintf("136%08lld", (long long)(it_unique() % 100000000));
}

/* Whether Redis holds a login code for phone (kept under its E.164
 * form). */
static bool code_stored(const char *phone)
{
    redisContext *rc = it_redis_connect();
    redisReply *r = redisCommand(rc, "EXISTS login:{p:+86%s}:codes", phone);
    bool stored;

    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    stored = r->integer == 1;
    freeReplyObject(r);
    redisFree(rc);
    return stored;
}

/* How many users have phone. */
static int64_t users_with(const char *phone)
{
    return it_sql_scalar("SELECT COUNT(*) FROM users WHERE phone = '+86%s'",
                         phone);
}

/* How many vouchers are called title. */
static int64_t vouchers_titled(const char *title)
{
    return it_sql_scalar("SELECT COUNT(*) FROM vouchers WHERE title = '%s'",
                         title);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    (void)state;
    it_init();
    if (sodium_init() < 0)
        return -1;
    user_base = 300000000000LL + util_now_ms() % 100000000 * 100;
    if (it_server_start(&srv, "hostile", NULL) != 0)
        return -1;
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin_tok);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* ---- tokens ---- */

/* The raw bytes of a token: version, user id, role, expiry, generation,
 * token id, MAC. */
#define TOK_BYTES 62
#define TOK_ROLE 9
#define TOK_EXPIRES 10
#define TOK_GEN 18
#define TOK_JTI 22
#define TOK_MAC 30

static void tok_decode(const char *tok, unsigned char raw[TOK_BYTES])
{
    size_t n = 0;

    assert_int_equal(
        0, sodium_base642bin(raw, TOK_BYTES, tok, strlen(tok), NULL, &n, NULL,
                             sodium_base64_VARIANT_URLSAFE_NO_PADDING));
    assert_int_equal(TOK_BYTES, n);
}

static void tok_encode(const unsigned char raw[TOK_BYTES],
                       char out[TOKEN_STR_LEN])
{
    sodium_bin2base64(out, TOKEN_STR_LEN, raw, TOK_BYTES,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

/* The authenticated routes, with a body where one is needed. */
struct route_case {
    const char *method;
    char path[96];
    const char *body;
};

static const char voucher_body[] =
    "{\"shopId\":1,\"title\":\"forged\",\"payValue\":1,\"actualValue\":1}";

/*
 * Every bad Authorization value is a 401 on every authenticated route,
 * and none of them changed anything.
 */
static void test_token_forgeries(void **state)
{
    int64_t v = it_seckill_create(&srv, 1, 5, -60, 3600);
    int64_t owner = uid(1), vouchers_before;
    struct route_case routes[4] = {
        {"POST", "/api/vouchers", voucher_body},
        {"POST", "", NULL},
        {"GET", "/api/orders", NULL},
        {"GET", "", NULL},
    };
    char good[TOKEN_STR_LEN], admin_other[TOKEN_STR_LEN];
    unsigned char raw[TOK_BYTES], key[TOKEN_KEY_LEN];
    char forged[16][TOKEN_STR_LEN];
    char *bad_auth[24];
    size_t nf = 0, nb = 0, i, j;
    struct token_claims c = {0};
    struct it_resp resp;
    int64_t order_id;

    (void)state;
    snprintf(routes[1].path, sizeof(routes[1].path),
             "/api/vouchers/%lld/seckill", (long long)v);
    /* One order that the forgeries try to read. */
    it_purchase(&srv, v, owner, &resp);
    it_assert_status(&resp, 201);
    order_id = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    snprintf(routes[3].path, sizeof(routes[3].path), "/api/orders/%lld",
             (long long)order_id);

    user_token(uid(2), good);
    tok_decode(good, raw);
    /* Each byte field changed, the MAC kept: privilege escalation (role),
     * impersonation (user id), a longer life (expiry), another version. */
    raw[TOK_ROLE] = TOKEN_ROLE_ADMIN;
    tok_encode(raw, forged[nf++]);
    tok_decode(good, raw);
    raw[8] ^= 0x01; /* the low byte of the user id */
    tok_encode(raw, forged[nf++]);
    tok_decode(good, raw);
    raw[TOK_EXPIRES + 3] ^= 0x10;
    tok_encode(raw, forged[nf++]);
    tok_decode(good, raw);
    raw[0] ^= 0x01;
    tok_encode(raw, forged[nf++]);
    /* An older token generation (past a logout of every session), another
     * token's id (past a logout of this one). */
    tok_decode(good, raw);
    raw[TOK_GEN + 3] ^= 0x01;
    tok_encode(raw, forged[nf++]);
    tok_decode(good, raw);
    raw[TOK_JTI + 7] ^= 0x01;
    tok_encode(raw, forged[nf++]);
    /* The MAC changed: its first byte, its last byte, all zero. */
    tok_decode(good, raw);
    raw[TOK_MAC] ^= 0x80;
    tok_encode(raw, forged[nf++]);
    tok_decode(good, raw);
    raw[TOK_BYTES - 1] ^= 0x01;
    tok_encode(raw, forged[nf++]);
    tok_decode(good, raw);
    memset(raw + TOK_MAC, 0, TOK_BYTES - TOK_MAC);
    tok_encode(raw, forged[nf++]);
    /* An admin token signed with another key. */
    memcpy(key, it_secret(), sizeof(key));
    key[31] ^= 0xff;
    c.user_id = 1;
    c.role = TOKEN_ROLE_ADMIN;
    c.expires = util_now_ms() / 1000 + 3600;
    assert_int_equal(0, token_sign(key, &c, admin_other));
    memcpy(forged[nf++], admin_other, TOKEN_STR_LEN);
    /* Expired a second ago, and an expired admin. */
    it_token(uid(2), TOKEN_ROLE_USER, -1, forged[nf++]);
    it_token(1, TOKEN_ROLE_ADMIN, -1, forged[nf++]);

    for (i = 0; i < nf; i++)
        bad_auth[nb++] = xasprintf("Bearer %s", forged[i]);
    /* Malformed: padding, the standard alphabet, truncated to the
     * payload, spaces inside, very long, control bytes. */
    bad_auth[nb++] = xasprintf("Bearer %s=", good);
    {
        char std[TOKEN_STR_LEN];

        strcpy(std, good);
        for (j = 0; std[j]; j++)
            std[j] = std[j] == '-' ? '+' : std[j] == '_' ? '/' : std[j];
        if (strcmp(std, good) != 0)
            bad_auth[nb++] = xasprintf("Bearer %s", std);
    }
    bad_auth[nb++] = xasprintf("Bearer %.24s", good);
    bad_auth[nb++] = xasprintf("Bearer %.30s %s", good, good + 30);
    bad_auth[nb++] = xasprintf("Bearer %s %s", good, good);
    {
        /* Far longer than a token, within the default request head's
         * limit (a longer head is 431: tests/it/test_web.c). */
        char *long_tok = repeat("A", 3000);

        bad_auth[nb++] = xasprintf("Bearer %s", long_tok);
        free(long_tok);
    }
    bad_auth[nb++] = xasprintf("Bearer\t%s", good);
    bad_auth[nb++] = xasprintf("Bearer ' OR '1'='1");
    bad_auth[nb++] = xasprintf("Bearer \xf0\x9f\x98\x80");
    assert_true(nb <= sizeof(bad_auth) / sizeof(bad_auth[0]));

    vouchers_before = it_sql_scalar("SELECT COUNT(*) FROM vouchers");
    for (i = 0; i < nb; i++) {
        for (j = 0; j < 4; j++) {
            struct it_req req = {.method = routes[j].method,
                                 .path = routes[j].path,
                                 .body = routes[j].body,
                                 .authorization = bad_auth[i]};

            expect_error_on(&srv, &req, 401, "UNAUTHORIZED");
        }
        free(bad_auth[i]);
    }
    /* Nothing was created, bought or shown. */
    assert_int_equal(vouchers_before,
                     it_sql_scalar("SELECT COUNT(*) FROM vouchers"));
    assert_int_equal(1, it_sql_order_count(v));
    assert_int_equal(4, it_sql_stock(v));

    /* The scheme is case-insensitive (RFC 9110); the token is not. */
    {
        char *h = xasprintf("bEaReR %s", good);
        struct it_req req = {
            .method = "GET", .path = "/api/orders", .authorization = h};

        it_http_do(&srv, &req, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
        free(h);
    }
}

/* A user token is 403 on the admin route, whatever the body says. */
static void test_token_user_on_admin_route(void **state)
{
    char tok[TOKEN_STR_LEN];
    char *body = xasprintf("{\"shopId\":1,\"title\":\"x\",\"payValue\":1,"
                           "\"actualValue\":1,\"role\":\"admin\","
                           "\"admin\":true,\"userId\":\"1\"}");

    (void)state;
    user_token(uid(3), tok);
    expect_error("POST", "/api/vouchers", body, tok, 403, "FORBIDDEN");
    free(body);
}

/*
 * Someone else's order reads exactly like a missing one, and no query
 * argument reaches another user's orders.
 */
static void test_orders_are_private(void **state)
{
    int64_t v = it_seckill_create(&srv, 1, 5, -60, 3600);
    char a[TOKEN_STR_LEN], b[TOKEN_STR_LEN], path[160], missing[64];
    struct it_resp theirs, absent, list;
    int64_t order_id;

    (void)state;
    user_token(uid(10), a);
    user_token(uid(11), b);
    it_purchase(&srv, v, uid(10), &theirs);
    it_assert_status(&theirs, 201);
    order_id = it_json_id(theirs.json, "orderId");
    it_resp_free(&theirs);

    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)order_id);
    /* An id next to it that does not exist. */
    snprintf(missing, sizeof(missing), "/api/orders/%lld",
             (long long)order_id + 1000000);
    it_http(&srv, "GET", path, NULL, b, &theirs);
    it_http(&srv, "GET", missing, NULL, b, &absent);
    it_assert_error(&theirs, 404, "NOT_FOUND");
    it_assert_error(&absent, 404, "NOT_FOUND");
    assert_string_equal(absent.body, theirs.body);
    it_resp_free(&theirs);
    it_resp_free(&absent);

    snprintf(path, sizeof(path),
             "/api/orders?userId=%lld&user_id=%lld&uid=%lld&limit=100",
             (long long)uid(10), (long long)uid(10), (long long)uid(10));
    expect_ok("GET", path, NULL, b, 200, &list);
    assert_int_equal(0, json_array_size(json_object_get(list.json, "items")));
    it_resp_free(&list);
}

/* ---- SQL injection and odd text ---- */

static const char *const injections[] = {
    "'; DROP TABLE vouchers; --",
    "\" OR \"1\"=\"1",
    "' OR '1'='1' -- -",
    "1; DELETE FROM voucher_orders WHERE 1=1",
    "Robert'); DROP TABLE users;--",
    "\\'; SELECT SLEEP(5); -- \\",
    "%' UNION SELECT id, phone FROM users -- _",
    "' AND (SELECT COUNT(*) FROM information_schema.tables) > 0 #",
    "/*! SELECT */ 0x27 \\0 \\Z \\b",
    "'||(SELECT CHAR(65))||'",
};

/* Text that is valid UTF-8 and must come back byte for byte. */
static const char *const odd_text[] = {
    "\xf0\x9f\x98\x80\xf0\x9f\x8f\xb3\xef\xb8\x8f\xe2\x80\x8d\xf0\x9f\x8c\x88",
    "e\xcc\x81\xcc\x81\xcc\x81", /* stacked combining accents */
    "\xe7\xa7\x92\xe6\x9d\x80 \xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a",
    "a\xe2\x80\x8d"
    "b", /* a zero-width joiner */
};

/* Valid UTF-8 that a page would print wrongly: refused in a voucher's
 * texts (docs/api.md, "Bodies and text"). */
static const char *const odd_refused[] = {
    "\xe2\x80\xae"
    "evil"
    "\xe2\x80\xac",             /* RTL override ... pop */
    "\xe2\x80\x8f\xe2\x80\x8e", /* RLM, LRM */
    "a\xef\xbb\xbf"
    "b",                /* BOM inside */
    "\xf4\x8f\xbf\xbf", /* U+10FFFF, a noncharacter */
    "\x01\x02\x1f\x7f", /* controls (escaped in JSON) */
    "line\nbreak\ttab\r\n",
};

/* Create a normal voucher with these three texts; returns its id. */
static int64_t create_with_texts(int64_t shop, const char *title,
                                 const char *sub_title, const char *rules)
{
    char *t = json_quote(title), *s = json_quote(sub_title),
         *r = json_quote(rules);
    char *body = xasprintf("{\"shopId\":%lld,\"title\":%s,\"subTitle\":%s,"
                           "\"rules\":%s,\"payValue\":1,\"actualValue\":2}",
                           (long long)shop, t, s, r);
    int64_t id = it_voucher_create(&srv, body);

    free(body);
    free(t);
    free(s);
    free(r);
    return id;
}

/* The voucher's three texts come back verbatim over HTTP and sit in MySQL
 * byte for byte. */
static void expect_texts(int64_t id, const char *title, const char *sub_title,
                         const char *rules)
{
    char path[64];
    struct it_resp resp;
    char *ht = hex_of(title, strlen(title)),
         *hs = hex_of(sub_title, strlen(sub_title)),
         *hr = hex_of(rules, strlen(rules));

    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)id);
    expect_ok("GET", path, NULL, NULL, 200, &resp);
    assert_non_null(it_json_str(resp.json, "title"));
    assert_string_equal(title, it_json_str(resp.json, "title"));
    assert_string_equal(sub_title, it_json_str(resp.json, "subTitle"));
    assert_string_equal(rules, it_json_str(resp.json, "rules"));
    it_resp_free(&resp);
    assert_int_equal(1, it_sql_scalar("SELECT HEX(title) = UPPER('%s') AND "
                                      "HEX(sub_title) = UPPER('%s') AND "
                                      "HEX(rules) = UPPER('%s') FROM vouchers "
                                      "WHERE id = %lld",
                                      ht, hs, hr, (long long)id));
    free(ht);
    free(hs);
    free(hr);
}

static void test_sql_injection_stored_verbatim(void **state)
{
    size_t n = sizeof(injections) / sizeof(injections[0]);
    int64_t shop = it_unique(), users, orders, ids[16];
    char path[96];
    struct it_resp resp;
    const json_t *items;
    size_t i;

    (void)state;
    users = it_sql_scalar("SELECT COUNT(*) FROM users");
    orders = it_sql_scalar("SELECT COUNT(*) FROM voucher_orders");
    for (i = 0; i < n; i++) {
        ids[i] = create_with_texts(shop, injections[i], injections[(i + 1) % n],
                                   injections[(i + 2) % n]);
        expect_texts(ids[i], injections[i], injections[(i + 1) % n],
                     injections[(i + 2) % n]);
    }
    /* The list returns them too, and only them for this shop. */
    snprintf(path, sizeof(path), "/api/vouchers?shopId=%lld&limit=100",
             (long long)shop);
    expect_ok("GET", path, NULL, NULL, 200, &resp);
    items = json_object_get(resp.json, "items");
    assert_int_equal(n, json_array_size(items));
    for (i = 0; i < n; i++)
        assert_string_equal(injections[n - 1 - i],
                            it_json_str(json_array_get(items, i), "title"));
    it_resp_free(&resp);

    /* Nothing was executed: every table is there, nothing was deleted. */
    assert_true(it_sql_scalar("SELECT COUNT(*) FROM users") >= users);
    assert_true(it_sql_scalar("SELECT COUNT(*) FROM voucher_orders") >= orders);
    assert_int_equal(4, it_sql_scalar("SELECT COUNT(*) FROM "
                                      "information_schema.tables WHERE "
                                      "table_schema = DATABASE() AND "
                                      "table_name IN ('users', 'vouchers', "
                                      "'seckill_vouchers', "
                                      "'voucher_orders')"));
}

/* Injections where the format is strict are refused with 400. */
static void test_sql_injection_refused(void **state)
{
    char tok[TOKEN_STR_LEN], path[256];
    size_t i;

    (void)state;
    user_token(uid(20), tok);
    for (i = 0; i < sizeof(injections) / sizeof(injections[0]); i++) {
        char *q = json_quote(injections[i]);
        char *body = xasprintf("{\"phone\":%s}", q);
        char *login = xasprintf("{\"phone\":\"13800138000\",\"code\":%s}", q);
        char *enc = curl_easy_escape(NULL, injections[i], 0);

        expect_error("POST", "/api/auth/code", body, NULL, 400, "BAD_REQUEST");
        expect_error("POST", "/api/auth/login", body, NULL, 400, "BAD_REQUEST");
        expect_error("POST", "/api/auth/login", login, NULL, 400,
                     "BAD_REQUEST");
        assert_non_null(enc);
        snprintf(path, sizeof(path), "/api/vouchers?shopId=%s", enc);
        expect_error("GET", path, NULL, NULL, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/vouchers?shopId=1&limit=%s", enc);
        expect_error("GET", path, NULL, NULL, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/orders?limit=%s", enc);
        expect_error("GET", path, NULL, tok, 400, "BAD_REQUEST");
        /* In a path: a bad id, or (with an encoded '/') a bad path. */
        snprintf(path, sizeof(path), "/api/vouchers/1%s", enc);
        expect_error("GET", path, NULL, NULL, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/orders/1%s", enc);
        expect_error("GET", path, NULL, tok, 400, "BAD_REQUEST");
        curl_free(enc);
        free(login);
        free(body);
        free(q);
    }
}

static void test_odd_utf8_stored_verbatim(void **state)
{
    size_t n = sizeof(odd_text) / sizeof(odd_text[0]);
    int64_t shop = it_unique(), id;
    char *e255, *body;
    struct it_resp resp;

    (void)state;
    for (size_t i = 0; i < n; i++) {
        id = create_with_texts(shop, odd_text[i], odd_text[(i + 1) % n],
                               odd_text[(i + 2) % n]);
        expect_texts(id, odd_text[i], odd_text[(i + 1) % n],
                     odd_text[(i + 2) % n]);
    }
    for (size_t i = 0; i < sizeof(odd_refused) / sizeof(odd_refused[0]); i++) {
        char *q = json_quote(odd_refused[i]);

        body = xasprintf("{\"shopId\":1,\"title\":%s,\"payValue\":1,"
                         "\"actualValue\":1}",
                         q);
        expect_error("POST", "/api/vouchers", body, admin_tok, 400,
                     "BAD_REQUEST");
        free(body);
        free(q);
    }
    /* A surrogate pair escape is one 4-byte character. */
    id = it_voucher_create(&srv, "{\"shopId\":1,\"title\":\"\\ud83d\\ude00\","
                                 "\"payValue\":1,\"actualValue\":1}");
    expect_texts(id, "\xf0\x9f\x98\x80", "", "");
    /* Limits count characters: 255 emoji fit a title, 256 do not. */
    e255 = repeat("\xf0\x9f\x98\x80", 255);
    id = create_with_texts(shop, e255, e255, e255);
    expect_texts(id, e255, e255, e255);
    body = xasprintf("{\"shopId\":1,\"title\":\"%s\xf0\x9f\x98\x80\","
                     "\"payValue\":1,\"actualValue\":1}",
                     e255);
    expect_error("POST", "/api/vouchers", body, admin_tok, 400, "BAD_REQUEST");
    free(body);
    free(e255);
    /* The phone is digits only: look-alike digits are not digits. */
    {
        static const char *const phones[] = {
            "\xef\xbc\x91\xef\xbc\x93\xef\xbc\x98\x30\x30\x31\x33\x38\x30\x30"
            "\x30", /* fullwidth 1, 3, 8 */
            "\xd9\xa1\xd9\xa3\xd9\xa8\xd9\xa0\xd9\xa0\xd9\xa1\xd9\xa3", /* ar */
            "\xe2\x80\xae"
            "13800138000",
            "13800138000\xe2\x80\x8b",
        };

        for (size_t i = 0; i < sizeof(phones) / sizeof(phones[0]); i++) {
            char *q = json_quote(phones[i]);

            body = xasprintf("{\"phone\":%s}", q);
            expect_error("POST", "/api/auth/code", body, NULL, 400,
                         "BAD_REQUEST");
            free(body);
            free(q);
        }
    }
    expect_ok("GET", "/healthz", NULL, NULL, 200, &resp);
    it_resp_free(&resp);
}

/* Bytes that are not UTF-8, and escapes of NUL or lone surrogates, are
 * refused with 400 in every text field (and never stored). */
static void test_bad_utf8_refused(void **state)
{
    static const char *const bad[] = {
        "\xff",                 /* never valid */
        "\xc0\xaf",             /* overlong '/' */
        "\xe0\x80\xaf",         /* overlong '/', 3 bytes */
        "\xf0\x80\x80\xaf",     /* overlong '/', 4 bytes */
        "\xc1\xbf",             /* overlong DEL */
        "\xed\xa0\x80",         /* a surrogate, encoded */
        "\xf4\x90\x80\x80",     /* above U+10FFFF */
        "\xf8\x88\x80\x80\x80", /* 5 bytes */
        "\xe2\x80",             /* truncated */
        "\x80",                 /* a lone continuation byte */
        "a\\u0000b",            /* NUL, escaped */
        "\\u0000",              /* only NUL */
        "\\ud800",              /* lone high surrogate */
        "\\udc00x",             /* lone low surrogate */
        "\\ud83d\\u0041",       /* high surrogate, then no low one */
    };
    static const char *const fields[] = {"title", "subTitle", "rules"};
    int64_t before = it_sql_scalar("SELECT COUNT(*) FROM vouchers");
    size_t i, f;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (f = 0; f < 3; f++) {
            /* The bad text in one field, "t" in the required title. */
            char *body =
                xasprintf("{\"shopId\":1,\"payValue\":1,\"actualValue\":1,"
                          "\"%s\":\"x%sy\"%s}",
                          fields[f], bad[i], f == 0 ? "" : ",\"title\":\"t\"");

            expect_error("POST", "/api/vouchers", body, admin_tok, 400,
                         "BAD_REQUEST");
            free(body);
        }
        {
            char *body = xasprintf("{\"phone\":\"138%s00138000\"}", bad[i]);
            expect_error("POST", "/api/auth/code", body, NULL, 400,
                         "BAD_REQUEST");
            free(body);
            /* Even in a field that would be ignored. */
            body = xasprintf("{\"phone\":\"13800138000\",\"note\":\"%s\"}",
                             bad[i]);
            expect_error("POST", "/api/auth/code", body, NULL, 400,
                         "BAD_REQUEST");
            free(body);
        }
    }
    assert_int_equal(before, it_sql_scalar("SELECT COUNT(*) FROM vouchers"));
    /* In a query string too. */
    expect_error("GET", "/api/vouchers?shopId=%ff", NULL, NULL, 400,
                 "BAD_REQUEST");
    expect_error("GET", "/api/vouchers?shopId=1%00", NULL, NULL, 400,
                 "BAD_REQUEST");
}

/* ---- bodies ---- */

/* Hundreds of query arguments would exhaust the connection's memory in
 * the HTTP library, which then answered nothing until the timeout: any
 * query of more than 24 arguments (at the default SECKILL_HTTP_HEAD_MAX)
 * is 414 URI_TOO_LONG at once (longer request lines get the library's own
 * 414), 24 are served, and a burst of them costs a log line a second at
 * most. Its own instance, for its log. */
static void test_many_query_arguments(void **state)
{
    static const int counts[] = {25, 460, 800, 2000};
    struct it_server s;
    struct it_resp resp;
    char *log = NULL;
    int lines = 0;
    FILE *f;

    (void)state;
    assert_int_equal(0, it_server_start(&s, "hostile-query", NULL));
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        size_t cap = (size_t)counts[i] * 8 + 64, len;
        char *path = xcalloc(1, cap);

        len = (size_t)snprintf(path, cap, "/api/vouchers?");
        for (int a = 0; a < counts[i]; a++)
            len += (size_t)snprintf(path + len, cap - len, "%sa%d=1",
                                    a ? "&" : "", a);
        for (int rep = 0; rep < (i == 1 ? 30 : 1); rep++) {
            it_http(&s, "GET", path, NULL, NULL, &resp);
            if (resp.status != 414 || resp.elapsed_ms > 2000)
                fail_msg("%d arguments: %ld after %.0f ms", counts[i],
                         resp.status, resp.elapsed_ms);
            if (counts[i] < 2000)
                it_assert_error(&resp, 414, "URI_TOO_LONG");
            it_resp_free(&resp);
        }
        free(path);
    }
    {
        char path[1024];
        size_t len = (size_t)snprintf(path, sizeof(path), "/api/vouchers?");

        for (int a = 0; a < 24; a++)
            len += (size_t)snprintf(path + len, sizeof(path) - len, "%sa%d=1",
                                    a ? "&" : "", a);
        it_http(&s, "GET", path, NULL, NULL, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    assert_int_equal(0, it_server_stop(&s));
    f = fopen(s.log_path, "r");
    assert_non_null(f);
    {
        size_t cap = 0;
        assert_true(getdelim(&log, &cap, '\0', f) > 0);
    }
    fclose(f);
    for (const char *p = log; (p = strstr(p, "http server error")); p++)
        lines++;
    print_message("      33 refused queries: %d log lines of the HTTP "
                  "library\n",
                  lines);
    assert_true(lines <= 3);
    free(log);
}

/* A declared 10 MB body is refused from its headers: 413 at once, and the
 * connection is closed without reading the body. */
static void test_body_declared_huge(void **state)
{
    char tok[TOKEN_STR_LEN], path[96];
    const char *paths[3];
    size_t i;

    (void)state;
    user_token(uid(30), tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)it_seckill_create(&srv, 1, 5, -60, 3600));
    paths[0] = "/api/auth/code";
    paths[1] = "/api/vouchers";
    paths[2] = path;
    for (i = 0; i < 3; i++) {
        char *head = xasprintf(
            "POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            "Authorization: Bearer %s\r\nContent-Length: 10485760\r\n\r\n",
            paths[i], i == 1 ? admin_tok : tok);
        int fd = it_raw_connect(srv.port);
        int64_t t0 = util_mono_ms();
        char *text;
        bool closed;
        long status = 0;

        assert_true(it_raw_send_str(fd, head));
        closed = it_raw_read_to_close(fd, 5000, &text);
        sscanf(text, "HTTP/1.1 %ld", &status);
        if (status != 413 || !closed || util_mono_ms() - t0 > 3000) {
            print_error("%s: status %ld closed %d after %lld ms:\n%.400s\n",
                        paths[i], status, closed,
                        (long long)(util_mono_ms() - t0), text);
            fail();
        }
        assert_non_null(strstr(text, "\"PAYLOAD_TOO_LARGE\""));
        free(text);
        free(head);
        close(fd);
    }
}

/*
 * A body must be labelled application/json: anything else is 415 before
 * the handler runs, whatever the bytes hold (a JSON object under another
 * label included), and nothing is stored. The label is checked after the
 * framing, the declared size, the path and the method, and only when
 * there is a body. A JSON label on what is not JSON stays a 400.
 */
static void test_body_content_types(void **state)
{
    /* fmt holds the phone (%s) the way its type would carry it. */
    static const struct {
        const char *type, *fmt;
    } refused[] = {
        {"application/x-www-form-urlencoded", "phone=%s"},
        {"multipart/form-data; boundary=XyZ",
         "--XyZ\r\nContent-Disposition: form-data; name=\"phone\"\r\n\r\n"
         "%s\r\n--XyZ--\r\n"},
        {"text/plain", "%s"},
        {"application/xml", "<phone>%s</phone>"},
        {NULL, "{\"phone\":\"%s\"}"},
        {"application/json; charset=utf-16", "{\"phone\":\"%s\"}"},
        {"application/json; charset=\"UTF-16\"", "{\"phone\":\"%s\"}"},
        {"application/json; charset=iso-8859-1", "{\"phone\":\"%s\"}"},
        {"application/json; charset=utf-8; charset=utf-16",
         "{\"phone\":\"%s\"}"},
        {"text/plain", "{\"phone\":\"%s\"}"},
        {"text/plain;charset=UTF-8", "{\"phone\":\"%s\"}"},
        {"application/jsonx", "{\"phone\":\"%s\"}"},
        {"application/json-seq", "{\"phone\":\"%s\"}"},
        {"application/merge-patch+json", "{\"phone\":\"%s\"}"},
        {"application/json; charset", "{\"phone\":\"%s\"}"},
        {"application/json, text/plain", "{\"phone\":\"%s\"}"},
        {"", "{\"phone\":\"%s\"}"},
    };
    char *phone, *body, *title;
    struct it_raw_resp resp;
    struct it_resp ok;
    const char *code;
    int64_t vouchers_before;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        phone = fresh_phone();
        body = xasprintf(refused[i].fmt, phone);
        raw_post(srv.port, "/api/auth/code", refused[i].type, NULL, body,
                 &resp);
        if (resp.status != 415)
            print_error("Content-Type %s: %.300s\n",
                        refused[i].type ? refused[i].type : "(none)",
                        resp.text);
        it_raw_assert_error(&resp, 415, "UNSUPPORTED_MEDIA_TYPE");
        it_raw_resp_free(&resp);
        assert_false(code_stored(phone));
        free(body);
        free(phone);
    }

    /* Labelled JSON, not JSON: the handler reads it and refuses it. */
    raw_post(srv.port, "/api/auth/code", "application/json", NULL,
             "phone: 13800138000", &resp);
    it_raw_assert_error(&resp, 400, "BAD_REQUEST");
    it_raw_resp_free(&resp);

    /* A login whose code is right, sent as text: no user is made, and
     * the code still works once the body is labelled JSON. */
    phone = fresh_phone();
    body = xasprintf("{\"phone\":\"%s\"}", phone);
    expect_ok("POST", "/api/auth/code", body, NULL, 200, &ok);
    free(body);
    code = it_json_str(ok.json, "code");
    assert_non_null(code);
    body = xasprintf("{\"phone\":\"%s\",\"code\":\"%s\"}", phone, code);
    it_resp_free(&ok);
    raw_post(srv.port, "/api/auth/login", "text/plain", NULL, body, &resp);
    it_raw_assert_error(&resp, 415, "UNSUPPORTED_MEDIA_TYPE");
    it_raw_resp_free(&resp);
    raw_post(srv.port, "/api/auth/login", NULL, NULL, body, &resp);
    it_raw_assert_error(&resp, 415, "UNSUPPORTED_MEDIA_TYPE");
    it_raw_resp_free(&resp);
    assert_int_equal(0, users_with(phone));
    expect_ok("POST", "/api/auth/login", body, NULL, 200, &ok);
    it_resp_free(&ok);
    assert_int_equal(1, users_with(phone));
    free(body);
    free(phone);

    /* An admin's voucher, sent as text or unlabelled: not created. */
    title = xasprintf("415-%lld", (long long)it_unique());
    body = xasprintf("{\"shopId\":1,\"title\":\"%s\",\"payValue\":1,"
                     "\"actualValue\":1}",
                     title);
    vouchers_before = it_sql_scalar("SELECT COUNT(*) FROM vouchers");
    raw_post(srv.port, "/api/vouchers", "text/plain", admin_tok, body, &resp);
    it_raw_assert_error(&resp, 415, "UNSUPPORTED_MEDIA_TYPE");
    it_raw_resp_free(&resp);
    raw_post(srv.port, "/api/vouchers", NULL, admin_tok, body, &resp);
    it_raw_assert_error(&resp, 415, "UNSUPPORTED_MEDIA_TYPE");
    it_raw_resp_free(&resp);
    assert_int_equal(0, vouchers_titled(title));
    assert_int_equal(vouchers_before,
                     it_sql_scalar("SELECT COUNT(*) FROM vouchers"));
    free(body);
    free(title);

    /* What is decided before the label keeps its answer. */
    phone = fresh_phone();
    body = xasprintf("{\"phone\":\"%s\"}", phone);
    raw_post(srv.port, "/api/nothing/here", "text/plain", NULL, body, &resp);
    it_raw_assert_error(&resp, 404, "NOT_FOUND");
    it_raw_resp_free(&resp);
    raw_send(srv.port, "PUT", "/api/auth/code", "text/plain", NULL, body,
             &resp);
    it_raw_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
    it_raw_resp_free(&resp);
    {
        char *twice =
            xasprintf("POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
                      "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                      strlen(body), strlen(body), body);
        char *huge = xasprintf("POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 10485760\r\n"
                               "Connection: close\r\n\r\n");

        it_raw_request(srv.port, twice, strlen(twice), 10000, &resp);
        it_raw_assert_error(&resp, 400, "BAD_REQUEST");
        it_raw_resp_free(&resp);
        it_raw_request(srv.port, huge, strlen(huge), 10000, &resp);
        it_raw_assert_error(&resp, 413, "PAYLOAD_TOO_LARGE");
        it_raw_resp_free(&resp);
        free(twice);
        free(huge);
    }
    assert_false(code_stored(phone));
    free(body);
    free(phone);

    /* No body, no label needed: a purchase is a bodiless POST. */
    {
        char tok[TOKEN_STR_LEN], path[96];
        int64_t v = it_seckill_create(&srv, 1, 5, -60, 3600);

        user_token(uid(40), tok);
        snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
                 (long long)v);
        raw_post(srv.port, path, NULL, tok, "", &resp);
        assert_int_equal(201, resp.status);
        it_raw_resp_free(&resp);
        raw_post(srv.port, path, "text/plain", tok, "", &resp);
        it_raw_assert_error(&resp, 409, "ALREADY_PURCHASED");
        it_raw_resp_free(&resp);
        assert_int_equal(1, it_sql_order_count(v));
    }
}

/*
 * application/json in any case, with blanks around the parameters and a
 * charset of utf-8 (in any case, quoted or not), is JSON: the request is
 * served and its writes happen.
 */
static void test_body_json_types_accepted(void **state)
{
    static const char *const types[] = {
        "APPLICATION/JSON; charset=UTF-8",
        "application/json ; charset=\"utf-8\"",
        "Application/Json;charset=utf-8",
        "application/json\t;\tCharset=Utf-8 ",
        "application/json;",
        "application/json; charset=utf-8; version=1",
        "application/json; x=\"a;b\\\"c\"",
    };
    struct it_raw_resp resp;
    char *phone, *body, *title;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        phone = fresh_phone();
        body = xasprintf("{\"phone\":\"%s\"}", phone);
        raw_post(srv.port, "/api/auth/code", types[i], NULL, body, &resp);
        if (resp.status != 200)
            print_error("Content-Type %s: %.300s\n", types[i], resp.text);
        assert_int_equal(200, resp.status);
        assert_non_null(it_json_str(resp.json, "code"));
        assert_true(code_stored(phone));

        /* The login with that code makes the user. */
        free(body);
        body = xasprintf("{\"phone\":\"%s\",\"code\":\"%s\"}", phone,
                         it_json_str(resp.json, "code"));
        it_raw_resp_free(&resp);
        raw_post(srv.port, "/api/auth/login", types[i], NULL, body, &resp);
        assert_int_equal(200, resp.status);
        it_raw_resp_free(&resp);
        assert_int_equal(1, users_with(phone));
        free(body);
        free(phone);
    }

    title = xasprintf("json-%lld", (long long)it_unique());
    body = xasprintf("{\"shopId\":1,\"title\":\"%s\",\"payValue\":1,"
                     "\"actualValue\":1}",
                     title);
    raw_post(srv.port, "/api/vouchers", types[0], admin_tok, body, &resp);
    assert_int_equal(201, resp.status);
    it_raw_resp_free(&resp);
    assert_int_equal(1, vouchers_titled(title));
    free(body);
    free(title);
}

/* JSON nested 10,000 deep, as arrays and as objects, in every body. */
static void test_body_deeply_nested(void **state)
{
    char *open_a = repeat("[", 10000), *close_a = repeat("]", 10000);
    char *open_o = repeat("{\"a\":", 10000), *close_o = repeat("}", 10000);
    char *bodies[4];
    const char *paths[] = {"/api/auth/code", "/api/auth/login",
                           "/api/vouchers"};
    struct it_resp resp;
    size_t i, j;

    (void)state;
    bodies[0] = xasprintf("%s%s", open_a, close_a);
    bodies[1] = xasprintf("%s1%s", open_o, close_o);
    /* Deep inside an otherwise valid body, in an ignored field. */
    bodies[2] = xasprintf("{\"phone\":\"13800138000\",\"shopId\":1,"
                          "\"title\":\"t\",\"payValue\":1,\"actualValue\":1,"
                          "\"x\":%s%s}",
                          open_a, close_a);
    bodies[3] = xasprintf("{\"phone\":\"13800138000\",\"shopId\":1,"
                          "\"title\":\"t\",\"payValue\":1,\"actualValue\":1,"
                          "\"x\":%s1%s}",
                          open_o, close_o);
    for (i = 0; i < 4; i++) {
        assert_true(strlen(bodies[i]) <= 64 * 1024);
        for (j = 0; j < 3; j++)
            expect_error("POST", paths[j], bodies[i], admin_tok, 400,
                         "BAD_REQUEST");
        free(bodies[i]);
    }
    free(open_a);
    free(close_a);
    free(open_o);
    free(close_o);
    expect_ok("GET", "/healthz", NULL, NULL, 200, &resp);
    it_resp_free(&resp);
}

/* Numbers a parser or a cast could get wrong, in every integer field. */
static void test_body_numbers(void **state)
{
    static const char *const bad[] = {
        "1e400",
        "-1e400",
        "9223372036854775808",
        "-9223372036854775809",
        "18446744073709551616",
        "1e2",
        "100.0",
        "-0.0",
        "0x10",
        "1e-400",
        "NaN",
        "Infinity",
        "-",
        "01",
        "+1",
        "\"1\"",
        "true",
        "null",
        "[1]",
        "{\"n\":1}",
        "100000000000000000000000000000000000000000000000000000000000000000",
    };
    char tb[UTIL_TIME_LEN], te[UTIL_TIME_LEN];
    int64_t before = it_sql_scalar("SELECT COUNT(*) FROM vouchers");
    size_t i, f;

    (void)state;
    it_time(-60, tb);
    it_time(3600, te);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (f = 0; f < 4; f++) {
            const char *v[4] = {"1", "1", "1", "1"};
            char *body;

            v[f] = bad[i];
            body = xasprintf("{\"shopId\":%s,\"title\":\"n\",\"payValue\":%s,"
                             "\"actualValue\":%s,\"type\":\"seckill\","
                             "\"stock\":%s,\"beginTime\":\"%s\","
                             "\"endTime\":\"%s\"}",
                             v[0], v[1], v[2], v[3], tb, te);
            expect_error("POST", "/api/vouchers", body, admin_tok, 400,
                         "BAD_REQUEST");
            free(body);
        }
    }
    /* -0 is the integer 0: refused where 0 is out of range. */
    expect_error("POST", "/api/vouchers",
                 "{\"shopId\":-0,\"title\":\"n\",\"payValue\":1,"
                 "\"actualValue\":1}",
                 admin_tok, 400, "BAD_REQUEST");
    /* Past the ranges of the columns. */
    expect_error("POST", "/api/vouchers",
                 "{\"shopId\":1,\"title\":\"n\",\"payValue\":100000000001,"
                 "\"actualValue\":1}",
                 admin_tok, 400, "BAD_REQUEST");
    assert_int_equal(before, it_sql_scalar("SELECT COUNT(*) FROM vouchers"));

    /* The largest shop id round-trips exactly (no double in between). */
    {
        int64_t id = it_voucher_create(
            &srv, "{\"shopId\":9223372036854775807,\"title\":\"max\","
                  "\"payValue\":1,\"actualValue\":100000000000}");
        char path[64];
        struct it_resp resp;

        snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)id);
        expect_ok("GET", path, NULL, NULL, 200, &resp);
        assert_true(strstr(resp.body, "9223372036854775807") != NULL);
        assert_int_equal(
            1, json_integer_value(json_object_get(resp.json, "payValue")));
        it_resp_free(&resp);
    }
}

/* Ids in paths: zero, negative, signs, spaces, encodings, overflow. */
static void test_body_ids_in_paths(void **state)
{
    static const char *const bad[] = {
        "-0",
        "+1",
        "%2B1",
        "%2D1",
        "%201",
        "1%20",
        "1%00",
        "0",
        "-1",
        "00",
        "1.0",
        "1e0",
        "18446744073709551617",
        "%31%00",
    };
    char tok[TOKEN_STR_LEN], path[128];
    size_t i;

    (void)state;
    user_token(uid(31), tok);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "/api/vouchers/%s", bad[i]);
        expect_error("GET", path, NULL, NULL, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/vouchers/%s/seckill", bad[i]);
        expect_error("POST", path, NULL, tok, 400, "BAD_REQUEST");
        snprintf(path, sizeof(path), "/api/orders/%s", bad[i]);
        expect_error("GET", path, NULL, tok, 400, "BAD_REQUEST");
    }
}

/* Unknown fields are ignored, and none of them sets what the server owns:
 * the id, the times, the stock of a normal voucher. Duplicate keys and
 * trailing data are refused. */
static void test_body_unknown_and_duplicate_fields(void **state)
{
    struct it_resp resp;
    char path[64];
    int64_t id;

    (void)state;
    id = it_voucher_create(
        &srv, "{\"id\":\"1\",\"shopId\":1,\"title\":\"mass\",\"payValue\":1,"
              "\"actualValue\":1,\"createTime\":\"2000-01-01T00:00:00Z\","
              "\"updateTime\":\"2000-01-01T00:00:00Z\",\"__proto__\":{},"
              "\"constructor\":{\"prototype\":{}},\"isAdmin\":true}");
    assert_true(id != 1);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)id);
    expect_ok("GET", path, NULL, NULL, 200, &resp);
    assert_int_equal(id, it_json_id(resp.json, "id"));
    assert_string_not_equal("2000-01-01T00:00:00Z",
                            it_json_str(resp.json, "createTime"));
    assert_null(json_object_get(resp.json, "isAdmin"));
    it_resp_free(&resp);

    expect_error("POST", "/api/vouchers",
                 "{\"shopId\":1,\"title\":\"a\",\"title\":\"b\","
                 "\"payValue\":1,\"actualValue\":1}",
                 admin_tok, 400, "BAD_REQUEST");
    expect_error("POST", "/api/auth/code",
                 "{\"phone\":\"13800138000\",\"phone\":\"13900139000\"}", NULL,
                 400, "BAD_REQUEST");
    expect_error("POST", "/api/auth/code",
                 "{\"phone\":\"13800138000\"} {\"phone\":\"1\"}", NULL, 400,
                 "BAD_REQUEST");
    expect_error("POST", "/api/auth/code", "{}", NULL, 400, "BAD_REQUEST");
}

/* ---- slow clients and connection floods ---- */

/* Wait until every one of fds is closed by the server or deadline_ms
 * (monotonic) passes; returns how many are closed. Discards data. */
static size_t wait_all_closed(const int *fds, size_t n, bool *closed,
                              int64_t deadline_ms)
{
    size_t done = 0;

    for (size_t i = 0; i < n; i++)
        done += closed[i];
    while (done < n && util_mono_ms() < deadline_ms) {
        struct pollfd *p = xcalloc(n, sizeof(*p));

        for (size_t i = 0; i < n; i++) {
            p[i].fd = closed[i] ? -1 : fds[i];
            p[i].events = POLLIN;
        }
        if (poll(p, n, 50) > 0) {
            for (size_t i = 0; i < n; i++) {
                char buf[512];

                if (closed[i] || !p[i].revents)
                    continue;
                ssize_t r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    closed[i] = true;
                    done++;
                }
            }
        }
        free(p);
    }
    return done;
}

/* GET /healthz within limit_ms; asserts 200 and returns how long it took. */
static int64_t healthz_within(const struct it_server *s, int64_t limit_ms)
{
    struct it_req req = {.method = "GET", .path = "/healthz", .timeout_s = 10};
    struct it_resp resp;
    int64_t t0 = util_mono_ms(), took;

    it_http_do(s, &req, &resp);
    took = util_mono_ms() - t0;
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    if (took > limit_ms) {
        print_error("GET /healthz took %lld ms (limit %lld)\n", (long long)took,
                    (long long)limit_ms);
        fail();
    }
    return took;
}

#define SLOW_TIMEOUT_S 2
#define STALLED 200
#define DRIPPING 10

/*
 * Slowloris against an instance with a 2 s timeout: 200 connections that
 * send half a request and stall, 10 that drip a header line every 300 ms
 * (never idle, so an idle timeout alone would keep them), 10 that send
 * headers and then drip the body. A normal client is served at once
 * meanwhile; every slow one is closed by the deadline, and not before
 * it; a keep-alive client that keeps sending requests is not.
 */
static void test_slowloris(void **state)
{
    char timeout_env[64];
    const char *env[] = {timeout_env, NULL};
    struct it_server s;
    int fds[STALLED + 2 * DRIPPING], keep;
    bool closed[STALLED + 2 * DRIPPING] = {false};
    size_t n = STALLED + 2 * DRIPPING, i, done;
    int64_t t0, early, deadline;
    int keep_requests = 0;

    (void)state;
    snprintf(timeout_env, sizeof(timeout_env), "SECKILL_CONN_TIMEOUT_S=%d",
             SLOW_TIMEOUT_S);
    assert_int_equal(0, it_server_start(&s, "hostile-slow", env));
    t0 = util_mono_ms();
    for (i = 0; i < n; i++) {
        fds[i] = it_raw_connect(s.port);
        if (i < STALLED)
            assert_true(it_raw_send_str(fds[i], "GET /api/vouchers HTTP/1.1\r\n"
                                                "Host: t\r\nX-Slow: "));
        else if (i < STALLED + DRIPPING)
            assert_true(it_raw_send_str(fds[i], "GET /healthz HTTP/1.1\r\n"));
        else
            assert_true(it_raw_send_str(fds[i],
                                        "POST /api/auth/code HTTP/1.1\r\n"
                                        "Host: t\r\nContent-Length: 100\r\n\r\n"
                                        "{\"phone\":"));
    }
    keep = it_raw_connect(s.port);

    /* Served at once while they hang on. */
    healthz_within(&s, 1000);

    /* Drip, and keep the keep-alive client busy, until shortly before the
     * deadline: nobody may be closed yet. */
    early = t0 + SLOW_TIMEOUT_S * 1000 - 600;
    while (util_mono_ms() < early) {
        char *text = NULL;

        for (i = STALLED; i < n; i++)
            it_raw_send_str(fds[i],
                            i < STALLED + DRIPPING ? "X-Drip: 1\r\n" : "1");
        assert_true(
            it_raw_send_str(keep, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
        it_raw_read_to_close(keep, 300, &text);
        assert_non_null(strstr(text, "HTTP/1.1 200"));
        free(text);
        keep_requests++;
    }
    done = wait_all_closed(fds, n, closed, util_mono_ms());
    if (done) {
        print_error("%zu slow connections closed before the deadline\n", done);
        fail();
    }

    /* Keep dripping past the deadline; all must be closed within it plus
     * the reaper's tick and some slack for a sanitizer build. */
    deadline = t0 + SLOW_TIMEOUT_S * 1000 + 3000;
    while (util_mono_ms() < deadline) {
        char *text = NULL;

        for (i = STALLED; i < n; i++)
            if (!closed[i])
                it_raw_send_str(fds[i],
                                i < STALLED + DRIPPING ? "X-Drip: 1\r\n" : "1");
        /* The keep-alive client sends a request every 300 ms: each one
         * restarts its clock, so it stays open throughout. */
        assert_true(
            it_raw_send_str(keep, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
        it_raw_read_to_close(keep, 300, &text);
        assert_non_null(strstr(text, "HTTP/1.1 200"));
        free(text);
        keep_requests++;
        if (wait_all_closed(fds, n, closed, util_mono_ms() + 1) == n)
            break;
    }
    done = wait_all_closed(fds, n, closed, deadline);
    print_message("      %zu of %zu slow connections closed after %lld ms; "
                  "keep-alive client sent %d requests\n",
                  done, n, (long long)(util_mono_ms() - t0), keep_requests);
    assert_int_equal(n, done);
    for (i = 0; i < n; i++)
        close(fds[i]);
    close(keep);
    healthz_within(&s, 1000);
    assert_int_equal(0, it_server_stop(&s));
}

/* Open n connections that each sent half a request. */
static void open_stalled(uint16_t port, int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fds[i] = it_raw_connect(port);
        assert_true(it_raw_send_str(fds[i], "GET /healthz HTTP/1.1\r\n"));
    }
}

/* A full request on a new connection: the status, or 0 if the server
 * closed it without an answer within timeout_ms. */
static long raw_healthz(uint16_t port, int timeout_ms)
{
    static const char req[] =
        "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    struct it_raw_resp resp;
    long status;

    it_raw_request(port, req, strlen(req), timeout_ms, &resp);
    status = resp.status;
    it_raw_resp_free(&resp);
    return status;
}

#define PER_IP 16

/* SECKILL_MAX_CONN_PER_IP: the address at its limit is refused at once
 * (accepted and closed), over all worker threads; a freed slot serves. */
static void test_conn_limit_per_ip(void **state)
{
    char limit_env[64];
    const char *env[] = {limit_env, "SECKILL_THREADS=4", NULL};
    struct it_server s;
    int fds[PER_IP];
    long status = 0;
    int64_t deadline;

    (void)state;
    snprintf(limit_env, sizeof(limit_env), "SECKILL_MAX_CONN_PER_IP=%d",
             PER_IP);
    assert_int_equal(0, it_server_start(&s, "hostile-perip", env));
    /* The start-up probe's connection may still count for a moment: a
     * stalled connection refused because of it is opened again. */
    open_stalled(s.port, fds, PER_IP);
    for (int round = 0; round < 20; round++) {
        bool closed[PER_IP] = {false};
        size_t n = wait_all_closed(fds, PER_IP, closed, util_mono_ms() + 300);

        if (n == 0)
            break;
        for (int i = 0; i < PER_IP; i++) {
            if (!closed[i])
                continue;
            close(fds[i]);
            open_stalled(s.port, &fds[i], 1);
        }
    }
    for (int i = 0; i < 5; i++) {
        int fd = it_raw_connect(s.port);
        int64_t t0 = util_mono_ms();
        char *text;

        it_raw_send_str(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
        if (!it_raw_read_to_close(fd, 2000, &text) || text[0] ||
            util_mono_ms() - t0 > 1500) {
            print_error("connection %d over the limit: after %lld ms "
                        "got \"%.100s\"\n",
                        PER_IP + 1 + i, (long long)(util_mono_ms() - t0), text);
            fail();
        }
        free(text);
        close(fd);
    }
    close(fds[0]);
    /* Freed asynchronously: the next connection is served soon. */
    deadline = util_mono_ms() + 3000;
    while (status != 200 && util_mono_ms() < deadline) {
        status = raw_healthz(s.port, 1000);
        if (status != 200)
            usleep(50 * 1000);
    }
    assert_int_equal(200, status);
    for (int i = 1; i < PER_IP; i++)
        close(fds[i]);
    assert_int_equal(0, it_server_stop(&s));
}

#define GLOBAL_MAX 8

/* SECKILL_MAX_CONN: at the limit new connections wait in the listen
 * backlog; the request deadline frees the slots the stalled clients
 * hold, and the waiting client is then served. */
static void test_conn_limit_global(void **state)
{
    char limit_env[64];
    const char *env[] = {limit_env, "SECKILL_THREADS=1",
                         "SECKILL_CONN_TIMEOUT_S=2", NULL};
    struct it_server s;
    int fds[GLOBAL_MAX];
    struct it_raw_resp resp;
    static const char req[] =
        "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    int64_t t0, took;
    int fd;
    char *text;

    (void)state;
    snprintf(limit_env, sizeof(limit_env), "SECKILL_MAX_CONN=%d", GLOBAL_MAX);
    assert_int_equal(0, it_server_start(&s, "hostile-global", env));
    open_stalled(s.port, fds, GLOBAL_MAX);
    usleep(200 * 1000);
    t0 = util_mono_ms();
    /* Not served while the slots are taken ... */
    fd = it_raw_connect(s.port);
    assert_true(it_raw_send_str(fd, req));
    assert_false(it_raw_read_to_close(fd, 700, &text));
    assert_int_equal(0, strlen(text));
    free(text);
    /* ... and served once the deadline frees them. */
    it_raw_read_to_close(fd, 6000, &text);
    took = util_mono_ms() - t0;
    print_message("      waiting client served after %lld ms\n",
                  (long long)took);
    assert_non_null(strstr(text, "HTTP/1.1 200"));
    free(text);
    close(fd);
    it_raw_request(s.port, req, strlen(req), 2000, &resp);
    assert_int_equal(200, resp.status);
    it_raw_resp_free(&resp);
    for (int i = 0; i < GLOBAL_MAX; i++)
        close(fds[i]);
    assert_int_equal(0, it_server_stop(&s));
}

/* ---- rate limits ---- */

/* Every rate:* key in Redis has a TTL; returns how many there are. */
static size_t assert_rate_keys_expire(redisContext *rc)
{
    unsigned long long cursor = 0;
    size_t n = 0;

    do {
        redisReply *r =
            redisCommand(rc, "SCAN %llu MATCH rate:* COUNT 1000", cursor);

        assert_non_null(r);
        assert_int_equal(REDIS_REPLY_ARRAY, r->type);
        cursor = strtoull(r->element[0]->str, NULL, 10);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *key = r->element[1]->element[i]->str;
            redisReply *t = redisCommand(rc, "PTTL %s", key);

            assert_non_null(t);
            /* -2: it expired between SCAN and PTTL, which is fine. */
            if (t->integer == -1) {
                print_error("rate key %s has no TTL\n", key);
                fail();
            }
            freeReplyObject(t);
            n++;
        }
        freeReplyObject(r);
    } while (cursor != 0);
    return n;
}

static long long redis_pttl(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "PTTL %s", key);
    long long v;

    assert_non_null(r);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static void redis_del(redisContext *rc, const char *key)
{
    freeReplyObject(redisCommand(rc, "DEL %s", key));
}

#define BOT_REQUESTS 80

/*
 * A bot hammers one voucher as one user, 80 requests at once, while
 * another user buys: the bot gets one order and RATE_LIMITED for most of
 * the rest, the other user's purchase succeeds, and the bucket key has a
 * TTL no longer than the time to refill.
 */
static void test_rate_limit_user_bot(void **state)
{
    const char *env[] = {"SECKILL_RATE_USER=5,10", NULL};
    struct it_server s;
    struct it_req reqs[BOT_REQUESTS + 1];
    struct it_resp resps[BOT_REQUESTS + 1];
    char bot_tok[TOKEN_STR_LEN], other_tok[TOKEN_STR_LEN], path[96], key[64];
    CURLM *multi = curl_multi_init();
    int running = 0, left, limited = 0, created = 0, passed = 0;
    int64_t v, t0, elapsed_ms;
    redisContext *rc = it_redis_connect();
    CURLMsg *msg;
    size_t i;

    (void)state;
    assert_int_equal(0, it_server_start(&s, "hostile-rate-user", env));
    v = it_seckill_create(&s, 1, 100, -60, 3600);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    user_token(uid(40), bot_tok);
    user_token(uid(41), other_tok);
    for (i = 0; i <= BOT_REQUESTS; i++) {
        reqs[i] = (struct it_req){.method = "POST",
                                  .path = path,
                                  .token = i == BOT_REQUESTS / 2 ? other_tok
                                                                 : bot_tok};
        assert_int_equal(CURLM_OK,
                         curl_multi_add_handle(
                             multi, it_http_prepare(&s, &reqs[i], &resps[i])));
    }
    t0 = util_mono_ms();
    do {
        assert_int_equal(CURLM_OK, curl_multi_perform(multi, &running));
        while ((msg = curl_multi_info_read(multi, &left))) {
            struct it_resp *resp = NULL;

            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &resp);
            curl_multi_remove_handle(multi, msg->easy_handle);
            it_http_complete(msg->easy_handle, msg->data.result, resp);
        }
        if (running)
            assert_int_equal(CURLM_OK,
                             curl_multi_poll(multi, NULL, 0, 1000, NULL));
    } while (running);
    elapsed_ms = util_mono_ms() - t0;
    curl_multi_cleanup(multi);

    /* The other user bought, once. */
    it_assert_status(&resps[BOT_REQUESTS / 2], 201);
    for (i = 0; i <= BOT_REQUESTS; i++) {
        const char *code;

        if (i == BOT_REQUESTS / 2)
            continue;
        code = it_json_str(json_object_get(resps[i].json, "error"), "code");
        if (resps[i].status == 429 && code &&
            strcmp(code, "RATE_LIMITED") == 0) {
            long ra = strtol(resps[i].retry_after, NULL, 10);

            it_assert_error(&resps[i], 429, "RATE_LIMITED");
            /* One token per 200 ms: due within a second. */
            assert_int_equal(1, ra);
            limited++;
        } else {
            passed++;
            created += resps[i].status == 201;
        }
    }
    print_message("      bot: %d passed (%d bought), %d rate-limited in "
                  "%lld ms\n",
                  passed, created, limited, (long long)elapsed_ms);
    assert_int_equal(1, created);
    /* At most the burst plus what refilled while the bot was at it. */
    assert_true(passed <= 10 + 5 * (elapsed_ms / 1000 + 1));
    assert_int_equal(2, it_sql_order_count(v));
    for (i = 0; i <= BOT_REQUESTS; i++)
        it_resp_free(&resps[i]);

    /* The bucket key has a TTL of at most the time to refill (10 tokens at
     * 5/s = 2 s), and so has every rate key. */
    snprintf(key, sizeof(key), "rate:user:%lld", (long long)uid(40));
    {
        long long ttl = redis_pttl(rc, key);

        if (ttl <= 0 || ttl > 2000) {
            print_error("PTTL %s = %lld\n", key, ttl);
            fail();
        }
    }
    assert_true(assert_rate_keys_expire(rc) >= 1);

    /* Another user still buys while the bot is limited. */
    {
        struct it_resp resp;

        it_purchase(&s, v, uid(42), &resp);
        it_assert_status(&resp, 201);
        it_resp_free(&resp);
    }
    redisFree(rc);
    assert_int_equal(0, it_server_stop(&s));
}

/* Retry-After is the time until the next token: 5 s at one per 5 s. Admin
 * tokens are exempt from the per-user bucket. */
static void test_rate_limit_retry_after(void **state)
{
    const char *env[] = {"SECKILL_RATE_USER=0.2,1", NULL};
    struct it_server s;
    char tok[TOKEN_STR_LEN];
    struct it_resp resp;
    long ra;

    (void)state;
    assert_int_equal(0, it_server_start(&s, "hostile-rate-ra", env));
    user_token(uid(50), tok);
    it_http(&s, "GET", "/api/orders", NULL, tok, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    it_http(&s, "GET", "/api/orders", NULL, tok, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    ra = strtol(resp.retry_after, NULL, 10);
    if (ra < 4 || ra > 5) {
        print_error("Retry-After: \"%s\", expected 4 or 5\n", resp.retry_after);
        fail();
    }
    it_resp_free(&resp);
    /* Every authenticated route counts, public ones too with a token. */
    expect_error_on(&s,
                    &(struct it_req){
                        .method = "GET", .path = "/api/vouchers", .token = tok},
                    429, "RATE_LIMITED");
    /* Without the token the public route answers. */
    it_http(&s, "GET", "/api/vouchers", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    /* Admins are not limited per user. */
    for (int i = 0; i < 5; i++) {
        it_http(&s, "GET", "/api/vouchers", NULL, admin_tok, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    assert_int_equal(0, it_server_stop(&s));
}

/* GET /api/vouchers with X-Forwarded-For headers xff (NULL-terminated);
 * the status. */
static long get_forwarded(const struct it_server *s, const char *const *xff)
{
    struct it_req req = {
        .method = "GET", .path = "/api/vouchers", .headers = xff};
    struct it_resp resp;
    long st = it_http_do(s, &req, &resp);

    it_resp_free(&resp);
    return st;
}

/*
 * SECKILL_TRUSTED_PROXIES: a connection from a listed proxy counts against
 * the address its X-Forwarded-For names (the last one that is not a
 * listed proxy, across every such header); from anywhere else the header
 * is ignored, so a client cannot pick its own bucket.
 */
static void test_rate_limit_behind_proxy(void **state)
{
    const char *trusted[] = {"SECKILL_RATE_IP=0.5,2",
                             "SECKILL_TRUSTED_PROXIES=127.0.0.0/8, 10.9.0.0/16",
                             NULL};
    const char *untrusted[] = {"SECKILL_RATE_IP=0.5,2",
                               "SECKILL_TRUSTED_PROXIES=10.9.0.0/16", NULL};
    static const char *const keys[] = {
        "rate:ip:127.0.0.1",    "rate:ip:198.51.100.7",
        "rate:ip:198.51.100.8", "rate:ip:203.0.113.5",
        "rate:ip:192.0.2.1",    "rate:ip:2001:db8:1:2::/64"};
    const char *const a[] = {"X-Forwarded-For: 198.51.100.7", NULL};
    const char *const b[] = {"X-Forwarded-For: 198.51.100.8", NULL};
    /* A client's own header, then the proxies': the client is the last
     * address no listed proxy has. */
    const char *const spoof[] = {"X-Forwarded-For: 192.0.2.1, 203.0.113.5",
                                 "X-Forwarded-For: 10.9.3.4", NULL};
    const char *const v6[] = {"X-Forwarded-For: 2001:db8:1:2::5", NULL};
    const char *const junk[] = {"X-Forwarded-For: 198.51.100.8, not-an-ip",
                                NULL};
    redisContext *rc = it_redis_connect();
    struct it_server s;

    (void)state;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        redis_del(rc, keys[i]);
    assert_int_equal(0, it_server_start(&s, "hostile-proxy", trusted));
    redis_del(rc, "rate:ip:127.0.0.1"); /* the start-up probes */
    /* Two clients behind the proxy: a bucket each. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(200, get_forwarded(&s, a));
        assert_int_equal(200, get_forwarded(&s, b));
    }
    assert_int_equal(429, get_forwarded(&s, a));
    assert_int_equal(429, get_forwarded(&s, b));
    assert_true(redis_pttl(rc, "rate:ip:198.51.100.7") > 0);
    assert_true(redis_pttl(rc, "rate:ip:127.0.0.1") < 0);
    /* The address the client wrote itself does not count. */
    assert_int_equal(200, get_forwarded(&s, spoof));
    assert_true(redis_pttl(rc, "rate:ip:203.0.113.5") > 0);
    assert_true(redis_pttl(rc, "rate:ip:192.0.2.1") < 0);
    /* IPv6: per /64. */
    assert_int_equal(200, get_forwarded(&s, v6));
    assert_true(redis_pttl(rc, "rate:ip:2001:db8:1:2::/64") > 0);
    /* Not an address: the last trusted hop (here the connection's peer,
     * as "not-an-ip" is the last entry). */
    assert_int_equal(200, get_forwarded(&s, junk));
    assert_true(redis_pttl(rc, "rate:ip:127.0.0.1") > 0);
    assert_int_equal(0, it_server_stop(&s));

    /* The peer is not a listed proxy: the header changes nothing. */
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        redis_del(rc, keys[i]);
    assert_int_equal(0, it_server_start(&s, "hostile-noproxy", untrusted));
    redis_del(rc, "rate:ip:127.0.0.1");
    assert_int_equal(200, get_forwarded(&s, a));
    assert_int_equal(200, get_forwarded(&s, b));
    assert_int_equal(429, get_forwarded(&s, spoof));
    assert_true(redis_pttl(rc, "rate:ip:198.51.100.7") < 0);
    assert_int_equal(0, it_server_stop(&s));
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        redis_del(rc, keys[i]);
    redisFree(rc);
}

/*
 * The chain is read whole from the proxy's end: a client's own
 * X-Forwarded-For of about 2 KiB ending in a made-up address, then the
 * proxy's line, counts against the proxy's line, the client it saw; a
 * made-up address that changes on every request gets no bucket of its
 * own.
 */
static void test_rate_limit_forwarded_chain(void **state)
{
    const char *trusted[] = {"SECKILL_RATE_IP=0.5,2",
                             "SECKILL_TRUSTED_PROXIES=127.0.0.0/8", NULL};
    redisContext *rc = it_redis_connect();
    struct it_server s;
    char last[32], key[48];
    long st[4];

    (void)state;
    redis_del(rc, "rate:ip:198.51.100.9");
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "rate:ip:203.0.113.%d", 70 + i);
        redis_del(rc, key);
    }
    assert_int_equal(0, it_server_start(&s, "hostile-chain", trusted));
    for (int i = 0; i < 4; i++) {
        char *forged;

        snprintf(last, sizeof(last), "203.0.113.%d", 70 + i);
        snprintf(key, sizeof(key), "rate:ip:%s", last);
        forged = it_forged_xff(last);
        {
            const char *const hdrs[] = {forged, "X-Forwarded-For: 198.51.100.9",
                                        NULL};

            st[i] = get_forwarded(&s, hdrs);
        }
        free(forged);
        assert_true(redis_pttl(rc, "rate:ip:198.51.100.9") > 0);
        if (redis_pttl(rc, key) > 0)
            fail_msg("request %d counted against its made-up address %s", i,
                     last);
    }
    /* A burst of 2 for the one client behind the proxy. */
    assert_int_equal(200, st[0]);
    assert_int_equal(200, st[1]);
    assert_int_equal(429, st[2]);
    assert_int_equal(429, st[3]);
    assert_int_equal(0, it_server_stop(&s));
    redis_del(rc, "rate:ip:198.51.100.9");
    redisFree(rc);
}

/*
 * SECKILL_RATE_IP: anonymous requests of one address are limited on every
 * route but the probes; the script also runs after SCRIPT FLUSH (EVAL on
 * NOSCRIPT).
 */
static void test_rate_limit_ip(void **state)
{
    const char *env[] = {"SECKILL_RATE_IP=0.5,3", NULL};
    redisContext *rc = it_redis_connect();
    struct it_server s;
    struct it_resp resp;
    long long ttl;
    int i;

    (void)state;
    /* Every instance of the suite shares this address's bucket. */
    redis_del(rc, "rate:ip:127.0.0.1");
    assert_int_equal(0, it_server_start(&s, "hostile-rate-ip", env));
    redis_del(rc, "rate:ip:127.0.0.1"); /* the start-up probes */
    for (i = 0; i < 3; i++) {
        it_http(&s, "GET", "/api/vouchers", NULL, NULL, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    it_http(&s, "GET", "/api/vouchers", NULL, NULL, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    assert_int_equal(2, strtol(resp.retry_after, NULL, 10));
    it_resp_free(&resp);
    expect_error_on(&s,
                    &(struct it_req){.method = "POST",
                                     .path = "/api/auth/code",
                                     .body = "{\"phone\":\"13800138000\"}"},
                    429, "RATE_LIMITED");
    /* The probes always answer. */
    for (i = 0; i < 10; i++) {
        it_http(&s, "GET", i % 2 ? "/healthz" : "/readyz", NULL, NULL, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    ttl = redis_pttl(rc, "rate:ip:127.0.0.1");
    assert_true(ttl > 0 && ttl <= 6000);
    assert_rate_keys_expire(rc);

    /* The script cache lost: the limiter still limits. */
    freeReplyObject(redisCommand(rc, "SCRIPT FLUSH"));
    it_http(&s, "GET", "/api/vouchers", NULL, NULL, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    it_resp_free(&resp);
    redis_del(rc, "rate:ip:127.0.0.1");
    it_http(&s, "GET", "/api/vouchers", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    redis_del(rc, "rate:ip:127.0.0.1");
    redisFree(rc);
    assert_int_equal(0, it_server_stop(&s));
}

/*
 * Every bucket or none: each bucket is its own script (a user's and an
 * address's are in different Redis Cluster slots), and a request refused
 * by its user's bucket gives back the token its address's bucket took, so
 * a user over its limit does not drain the address for the others behind
 * it.
 */
static void test_rate_limit_gives_back(void **state)
{
    const char *env[] = {"SECKILL_RATE_IP=0.01,4", "SECKILL_RATE_USER=0.01,1",
                         NULL};
    redisContext *rc = it_redis_connect();
    char tok[TOKEN_STR_LEN], key[64];
    struct it_server s;
    struct it_resp resp;
    int i;

    (void)state;
    redis_del(rc, "rate:ip:127.0.0.1");
    assert_int_equal(0, it_server_start(&s, "hostile-rate-back", env));
    redis_del(rc, "rate:ip:127.0.0.1"); /* the start-up probes */
    for (i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "rate:user:%lld", (long long)uid(43 + i));
        redis_del(rc, key);
    }
    user_token(uid(43), tok);
    it_http(&s, "GET", "/api/vouchers", NULL, tok, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    /* The user's bucket is empty now: refused, and the address keeps the
     * three tokens it has left. */
    for (i = 0; i < 5; i++) {
        it_http(&s, "GET", "/api/vouchers", NULL, tok, &resp);
        it_assert_error(&resp, 429, "RATE_LIMITED");
        it_resp_free(&resp);
    }
    for (i = 0; i < 3; i++) {
        user_token(uid(44 + i), tok);
        it_http(&s, "GET", "/api/vouchers", NULL, tok, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    /* Now the address is out of tokens. */
    it_http(&s, "GET", "/api/vouchers", NULL, NULL, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    it_resp_free(&resp);
    assert_rate_keys_expire(rc);
    redis_del(rc, "rate:ip:127.0.0.1");
    for (i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "rate:user:%lld", (long long)uid(43 + i));
        redis_del(rc, key);
    }
    redisFree(rc);
    assert_int_equal(0, it_server_stop(&s));
}

/* Redis down: the limiter fails open (logged), MySQL-only routes serve. */
static void test_rate_limit_fails_open(void **state)
{
    char *url = xasprintf("SECKILL_REDIS_URL=redis://127.0.0.1:%u/1",
                          (unsigned)it_free_port());
    const char *env[] = {url, "SECKILL_RATE_IP=1,1", "SECKILL_RATE_USER=1,1",
                         NULL};
    char tok[TOKEN_STR_LEN], path[64], *log = NULL;
    int64_t v = it_voucher_create(&srv, voucher_body);
    struct it_server s;
    struct it_resp resp;
    FILE *f;

    (void)state;
    assert_int_equal(0, it_server_start(&s, "hostile-rate-open", env));
    user_token(uid(60), tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);
    for (int i = 0; i < 10; i++) {
        it_http(&s, "GET", path, NULL, i % 2 ? tok : NULL, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
        it_http(&s, "GET", "/api/orders", NULL, tok, &resp);
        it_assert_status(&resp, 200);
        it_resp_free(&resp);
    }
    assert_int_equal(0, it_server_stop(&s));
    f = fopen(s.log_path, "r");
    assert_non_null(f);
    {
        size_t cap = 0;
        ssize_t got = getdelim(&log, &cap, '\0', f);
        assert_true(got > 0);
    }
    fclose(f);
    assert_non_null(strstr(log, "rate limit skipped"));
    free(log);
    free(url);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_forgeries),
        cmocka_unit_test(test_token_user_on_admin_route),
        cmocka_unit_test(test_orders_are_private),
        cmocka_unit_test(test_sql_injection_stored_verbatim),
        cmocka_unit_test(test_sql_injection_refused),
        cmocka_unit_test(test_odd_utf8_stored_verbatim),
        cmocka_unit_test(test_bad_utf8_refused),
        cmocka_unit_test(test_many_query_arguments),
        cmocka_unit_test(test_body_declared_huge),
        cmocka_unit_test(test_body_content_types),
        cmocka_unit_test(test_body_json_types_accepted),
        cmocka_unit_test(test_body_deeply_nested),
        cmocka_unit_test(test_body_numbers),
        cmocka_unit_test(test_body_ids_in_paths),
        cmocka_unit_test(test_body_unknown_and_duplicate_fields),
        cmocka_unit_test(test_slowloris),
        cmocka_unit_test(test_conn_limit_per_ip),
        cmocka_unit_test(test_conn_limit_global),
        cmocka_unit_test(test_rate_limit_user_bot),
        cmocka_unit_test(test_rate_limit_retry_after),
        cmocka_unit_test(test_rate_limit_ip),
        cmocka_unit_test(test_rate_limit_gives_back),
        cmocka_unit_test(test_rate_limit_behind_proxy),
        cmocka_unit_test(test_rate_limit_forwarded_chain),
        cmocka_unit_test(test_rate_limit_fails_open),
    };

    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
