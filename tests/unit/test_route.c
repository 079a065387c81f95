/*
 * test_route.c - routing, the error table (and its copies in README.md and
 * docs/openapi.json), the body validators and the reading of a
 * Content-Type, without a server: requests are built by hand with no
 * connection. Run from the repository's root.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "handlers/errors.h"
#include "handlers/protocol.h"
#include "handlers/request.h"
#include "handlers/route.h"

static void test_routes(void **state)
{
    const struct route *r;
    int64_t id;
    (void)state;

    assert_int_equal(route_match("/healthz", &r, &id), ROUTE_OK);
    assert_ptr_equal(r->get, health_get);
    assert_int_equal(route_match("/api/vouchers", &r, &id), ROUTE_OK);
    assert_ptr_equal(r->post, vouchers_post);
    assert_string_equal(r->allow, "GET, POST, OPTIONS");
    assert_int_equal(route_match("/api/vouchers/42", &r, &id), ROUTE_OK);
    assert_ptr_equal(r->get, voucher_get);
    assert_int_equal(id, 42);
    assert_int_equal(route_match("/api/vouchers/7/seckill", &r, &id), ROUTE_OK);
    assert_ptr_equal(r->post, voucher_seckill_post);
    assert_null(r->get);
    assert_int_equal(id, 7);
    assert_int_equal(route_match("/api/orders/9223372036854775807", &r, &id),
                     ROUTE_OK);
    assert_true(id == INT64_MAX);

    const char *bad_ids[] = {"/api/vouchers/abc",
                             "/api/vouchers/0",
                             "/api/vouchers/-1",
                             "/api/vouchers/1.5",
                             "/api/orders/99999999999999999999",
                             "/api/vouchers/x/seckill"};
    for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++)
        assert_int_equal(route_match(bad_ids[i], &r, &id), ROUTE_BAD_ID);

    const char *missing[] = {"",
                             "/api",
                             "/api/vouchers/",
                             "/api/vouchers/1/",
                             "/api/vouchers/1/seckill/x",
                             "/healthzz",
                             "/API/vouchers",
                             "/api/orders/1/x",
                             "/admin/",
                             "/static",
                             "/static/",
                             "/static/a/b",
                             "/index.html"};
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++)
        assert_int_equal(route_match(missing[i], &r, &id), ROUTE_NOT_FOUND);

    /* The pages and their files: one handler, any file name. */
    const char *pages[] = {"/",
                           "/admin",
                           "/openapi.json",
                           "/static/app.css",
                           "/static/no-such-file",
                           "/static/..."};
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        assert_int_equal(route_match(pages[i], &r, &id), ROUTE_OK);
        assert_ptr_equal(r->get, web_get);
        assert_null(r->post);
        assert_int_equal(id, 0);
    }
}

static void test_error_table(void **state)
{
    (void)state;
    for (int i = 0; i < ERR_COUNT; i++) {
        assert_non_null(api_errors[i].code);
        assert_true(api_errors[i].status >= 400 && api_errors[i].status < 600);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(api_errors[i].code, api_errors[j].code);
    }
    assert_int_equal(api_errors[ERR_BUSY].status, 429);
    assert_int_equal(api_errors[ERR_SOLD_OUT].status, 409);
    assert_int_equal(api_errors[ERR_UNAVAILABLE].status, 503);
    assert_int_equal(api_errors[ERR_UNSUPPORTED_MEDIA_TYPE].status, 415);
}

/* The code's index in the table, or -1. */
static int error_index(const char *code)
{
    for (int i = 0; i < ERR_COUNT; i++)
        if (strcmp(api_errors[i].code, code) == 0)
            return i;
    return -1;
}

/* The OpenAPI document lists exactly the table's codes. */
static void test_error_table_in_openapi(void **state)
{
    json_error_t jerr;
    json_t *doc = json_load_file("docs/openapi.json", 0, &jerr);
    json_t *codes;
    bool seen[ERR_COUNT] = {false};
    size_t i;
    json_t *v;
    (void)state;

    if (!doc) {
        print_error("docs/openapi.json: %s\n", jerr.text);
        fail();
    }
    codes = json_object_get(
        json_object_get(
            json_object_get(json_object_get(doc, "components"), "schemas"),
            "ErrorCode"),
        "enum");
    assert_true(json_is_array(codes));
    json_array_foreach(codes, i, v)
    {
        int e = error_index(json_string_value(v));
        if (e < 0) {
            print_error("openapi lists %s, the table does not\n",
                        json_string_value(v));
            fail();
        }
        seen[e] = true;
    }
    for (int e = 0; e < ERR_COUNT; e++)
        if (!seen[e]) {
            print_error("openapi lacks %s\n", api_errors[e].code);
            fail();
        }
    json_decref(doc);
}

/* README's table of errors: every code with its status, once. */
static void test_error_table_in_readme(void **state)
{
    FILE *f = fopen("README.md", "r");
    char line[1024], code[64];
    int seen[ERR_COUNT] = {0};
    unsigned status;
    (void)state;

    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "| %u | `%63[A-Z_]` |", &status, code) != 2)
            continue;
        int e = error_index(code);
        if (e < 0 || api_errors[e].status != status) {
            print_error("README: %u %s is not in the table\n", status, code);
            fail();
        }
        seen[e]++;
    }
    fclose(f);
    for (int e = 0; e < ERR_COUNT; e++)
        if (seen[e] != 1) {
            print_error("README lists %s %d times\n", api_errors[e].code,
                        seen[e]);
            fail();
        }
}

static struct http_config cfg;

static void req_init(struct request *req, const char *body)
{
    memset(req, 0, sizeof(*req));
    req->cfg = &cfg;
    if (body) {
        req->body = strdup(body);
        req->body_len = strlen(body);
    }
}

static const char *err_code(struct request *req)
{
    return json_string_value(
        json_object_get(json_object_get(req->reply, "error"), "code"));
}

static void test_body_object(void **state)
{
    struct request req;
    (void)state;

    /* An escaped NUL would cut C strings: the parser refuses it. */
    const char *bad[] = {NULL,
                         "",
                         "{",
                         "[1]",
                         "\"x\"",
                         "1",
                         "{\"a\":\"x\\u0000y\"}",
                         "{\"a\":1,\"a\":2}",
                         "{\"a\":\"\xff\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        req_init(&req, bad[i]);
        assert_false(body_object_or_reply(&req));
        assert_int_equal(req.status, 400);
        assert_string_equal(err_code(&req), "BAD_REQUEST");
        request_clear(&req);
    }
    req_init(&req, "{\"a\":1}");
    assert_true(body_object_or_reply(&req));
    request_clear(&req);
}

static void test_body_fields(void **state)
{
    struct request req;
    int64_t n = -1;
    const char *s = NULL;
    (void)state;

    req_init(&req, "{\"n\":5,\"f\":1.5,\"s\":\"x\",\"big\":1e30,"
                   "\"neg\":-1,\"nul\":null,\"str\":\"5\"}");
    assert_true(body_object_or_reply(&req));
    assert_true(body_int_or_reply(&req, "n", true, 1, 10, &n));
    assert_int_equal(n, 5);
    assert_false(body_int_or_reply(&req, "n", true, 6, 10, &n));
    assert_false(body_int_or_reply(&req, "f", true, 0, 10, &n));
    assert_false(body_int_or_reply(&req, "s", true, 0, 10, &n));
    assert_false(body_int_or_reply(&req, "str", true, 0, 10, &n));
    assert_false(body_int_or_reply(&req, "big", true, 0, INT64_MAX, &n));
    assert_false(body_int_or_reply(&req, "neg", true, 0, 10, &n));
    assert_false(body_int_or_reply(&req, "absent", true, 0, 10, &n));
    assert_non_null(strstr(json_string_value(json_object_get(
                               json_object_get(req.reply, "error"), "message")),
                           "absent"));
    n = 77;
    assert_true(body_int_or_reply(&req, "absent", false, 0, 10, &n));
    assert_true(body_int_or_reply(&req, "nul", false, 0, 10, &n));
    assert_int_equal(n, 77);
    assert_false(body_str_or_reply(&req, "n", true, 10, &s));
    assert_true(body_str_or_reply(&req, "s", true, 1, &s));
    assert_string_equal(s, "x");
    assert_true(body_has(&req, "s"));
    assert_false(body_has(&req, "nul"));
    request_clear(&req);
}

static void test_body_strings(void **state)
{
    struct request req;
    const char *s = NULL;
    char body[4096];
    int64_t t;
    (void)state;

    /* 255 three-byte characters fit a 255-character field; 256 do not. */
    strcpy(body, "{\"ok\":\"");
    for (int i = 0; i < 255; i++)
        strcat(body, "\xe7\xa7\x92"); /* 秒 */
    strcat(body, "\",\"long\":\"");
    for (int i = 0; i < 256; i++)
        strcat(body, "a");
    strcat(body, "\",\"empty\":\"\","
                 "\"t\":\"2026-11-21T10:00:00Z\",\"badt\":\"tomorrow\"}");
    req_init(&req, body);
    assert_true(body_object_or_reply(&req));
    assert_true(body_str_or_reply(&req, "ok", true, 255, &s));
    assert_false(body_str_or_reply(&req, "long", true, 255, &s));
    assert_false(body_str_or_reply(&req, "empty", true, 255, &s));
    assert_true(body_str_or_reply(&req, "empty", false, 255, &s));
    assert_true(body_time_or_reply(&req, "t", true, &t));
    assert_false(body_time_or_reply(&req, "badt", true, &t));
    request_clear(&req);
}

/* Which Content-Type values say JSON (RFC 9110 8.3.1, charset utf-8). */
static void test_media_type(void **state)
{
    static const char *const json[] = {
        "application/json",
        "APPLICATION/JSON",
        "Application/Json",
        " application/json ",
        "application/json;",
        "application/json;;",
        "application/json; charset=utf-8",
        "APPLICATION/JSON; charset=UTF-8",
        "application/json;charset=Utf-8",
        "application/json ; charset=\"utf-8\"",
        "application/json\t;\tCHARSET=\"UTF-8\"\t",
        "application/json; charset=\"u\\tf-8\"",
        "application/json; version=1",
        "application/json; x=\"a;b\\\"c\"; charset=utf-8",
        "application/json; x=\"\"",
        "application/json; charset=utf-8; charset=utf-8",
    };
    static const char *const other[] = {
        "",
        " ",
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonx",
        "application/json-seq",
        "application/json+x",
        "application/merge-patch+json",
        "application/json/x",
        "application/jso",
        "xapplication/json",
        "application /json",
        "application/json, text/plain",
        "application/json; charset=utf-16",
        "application/json; charset=\"UTF-16\"",
        "application/json; charset=utf8",
        "application/json; charset=utf-8x",
        "application/json; charset=\"utf-8 \"",
        "application/json; charset=",
        "application/json; charset=\"\"",
        "application/json; charset",
        "application/json; charset=utf-8; charset=latin1",
        "application/json; =utf-8",
        "application/json; x=\"open",
        "application/json; x=\"a\\",
        "application/json; x=a b",
        "application/json; x=\"a\"b",
        "application/json; charsets=utf-16; charset=utf-16",
        "application/json charset=utf-8",
    };
    (void)state;

    assert_false(req_media_type_is_json(NULL));
    for (size_t i = 0; i < sizeof(json) / sizeof(json[0]); i++)
        if (!req_media_type_is_json(json[i])) {
            print_error("refused: [%s]\n", json[i]);
            fail();
        }
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        if (req_media_type_is_json(other[i])) {
            print_error("taken for JSON: [%s]\n", other[i]);
            fail();
        }
}

static void test_no_token(void **state)
{
    struct request req;
    (void)state;

    req_init(&req, NULL);
    assert_int_equal(req_user_or_reply(&req), 401);
    assert_string_equal(err_code(&req), "UNAUTHORIZED");
    request_clear(&req);
}

static void test_backend_errors(void **state)
{
    struct request req;
    (void)state;

    req_init(&req, NULL);
    assert_int_equal(req_backend_error(&req, -ENOTCONN, "t"), 503);
    assert_int_equal(req.retry_after, 1);
    assert_int_equal(req_backend_error(&req, -EINPROGRESS, "t"), 503);
    assert_int_equal(req_backend_error(&req, -EIO, "t"), 500);
    assert_string_equal(err_code(&req), "INTERNAL");
    request_clear(&req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_error_table),
        cmocka_unit_test(test_error_table_in_openapi),
        cmocka_unit_test(test_error_table_in_readme),
        cmocka_unit_test(test_body_object),
        cmocka_unit_test(test_body_fields),
        cmocka_unit_test(test_body_strings),
        cmocka_unit_test(test_media_type),
        cmocka_unit_test(test_no_token),
        cmocka_unit_test(test_backend_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
