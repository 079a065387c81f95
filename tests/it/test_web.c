/*
 * test_web.c - what browsers rely on, over HTTP against the real binary:
 * the pages and their files (types, entity tags and 304s, the security
 * headers, the same bytes as web/, outside the rate limits), CORS for
 * listed origins (answers, preflights, refusals, and nothing while it is
 * off), and malformed requests: the JSON answers for what libmicrohttpd
 * passes on, and the library's own answers for what it does not (docs/api.md,
 * "Malformed requests"; handlers/protocol.c).
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/it/harness.h"

enum { SRV_CORS, SRV_PLAIN, SRV_RATE, SRV_BIG_HEAD, SRV_SMALL_HEAD, SRV_COUNT };

static struct it_server servers[SRV_COUNT];

#define ORIGIN_A "https://shop.example"
#define ORIGIN_B "http://127.0.0.1:3000"

static int group_setup(void **state)
{
    static const char *const cors_env[] = {
        "SECKILL_CORS_ORIGINS=" ORIGIN_A ", " ORIGIN_B, NULL};
    static const char *const plain_env[] = {"SECKILL_CORS_ORIGINS", NULL};
    /* Per address: 1 a second, bursts of 3 (every test client is
     * 127.0.0.1). */
    static const char *const rate_env[] = {"SECKILL_RATE_IP=1,3", NULL};
    /* An operator's larger request heads (behind a proxy adding cookies),
     * and the smallest. */
    static const char *const big_head_env[] = {
        "SECKILL_CORS_ORIGINS=" ORIGIN_A ", " ORIGIN_B,
        "SECKILL_HTTP_HEAD_MAX=8192", NULL};
    static const char *const small_head_env[] = {
        "SECKILL_CORS_ORIGINS=" ORIGIN_A ", " ORIGIN_B,
        "SECKILL_HTTP_HEAD_MAX=2048", NULL};
    static const struct {
        const char *tag;
        const char *const *env;
    } start[SRV_COUNT] = {
        [SRV_CORS] = {"web-cors", cors_env},
        [SRV_PLAIN] = {"web-plain", plain_env},
        [SRV_RATE] = {"web-rate", rate_env},
        [SRV_BIG_HEAD] = {"web-big-head", big_head_env},
        [SRV_SMALL_HEAD] = {"web-small-head", small_head_env},
    };
    (void)state;

    it_init();
    for (int i = 0; i < SRV_COUNT; i++)
        if (it_server_start(&servers[i], start[i].tag, start[i].env) != 0)
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(servers, SRV_COUNT);
}

/* ---- helpers ---- */

/* GET path from srv with extra request headers (NULL-terminated). */
static long get(const struct it_server *srv, const char *path,
                const char *const *headers, struct it_resp *resp)
{
    struct it_req req = {.method = "GET", .path = path, .headers = headers};

    return it_http_do(srv, &req, resp);
}

/* The value of response header name (asserts there is exactly one). */
static const char *header1(const struct it_resp *resp, const char *name,
                           char *buf, size_t cap)
{
    size_t n = it_resp_header(resp, name, buf, cap);

    if (n != 1) {
        print_error("%zu %s headers in:\n%s\n", n, name,
                    resp->headers ? resp->headers : "");
        fail();
    }
    return buf;
}

static void assert_no_header(const struct it_resp *resp, const char *name)
{
    char buf[256];

    if (it_resp_header(resp, name, buf, sizeof(buf))) {
        print_error("unexpected %s: %s\n", name, buf);
        fail();
    }
}

/* True if a comma-separated header value lists token (any case). */
static bool lists(const char *value, const char *token)
{
    size_t n = strlen(token);

    for (const char *p = value; *p;) {
        p += strspn(p, " ,");
        size_t len = strcspn(p, ",");
        size_t m = len;
        while (m && p[m - 1] == ' ')
            m--;
        if (m == n && strncasecmp(p, token, n) == 0)
            return true;
        p += len;
    }
    return false;
}

/* The whole of file (repository-relative); *len its size. */
static char *slurp(const char *file, size_t *len)
{
    FILE *f = fopen(file, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;

    if (!f) {
        print_error("cannot open %s\n", file);
        fail();
    }
    for (;;) {
        if (n + 4096 + 1 > cap)
            buf = xrealloc(buf, cap = cap * 2 + 8192);
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The Content-Type each file of the pages must have. */
static const char *type_of(const char *path)
{
    const char *dot = strrchr(path, '.');

    if (strcmp(path, "/") == 0 || strcmp(path, "/admin") == 0)
        return "text/html; charset=utf-8";
    if (!dot)
        return "";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".json") == 0)
        return "application/json";
    return "";
}

/* The repository file served at path. */
static void file_of(const char *path, char *out, size_t cap)
{
    if (strcmp(path, "/") == 0)
        snprintf(out, cap, "web/index.html");
    else if (strcmp(path, "/admin") == 0)
        snprintf(out, cap, "web/admin.html");
    else if (strcmp(path, "/openapi.json") == 0)
        snprintf(out, cap, "docs/openapi.json");
    else
        snprintf(out, cap, "web%s", path);
}

/*
 * GET path and check it the way a browser relies on: 200, its type, the
 * bytes of its file, an entity tag, no-cache, the security headers.
 */
static void check_file(const char *path, struct it_resp *resp)
{
    char buf[512], file[256];
    size_t len;

    get(&servers[SRV_PLAIN], path, NULL, resp);
    if (resp->status != 200)
        print_error("GET %s\n", path);
    it_assert_status(resp, 200);
    assert_string_equal(resp->content_type, type_of(path));
    file_of(path, file, sizeof(file));
    char *want = slurp(file, &len);
    if (resp->len != len || memcmp(resp->body, want, len) != 0) {
        print_error("%s differs from %s (%zu bytes, want %zu): rebuild\n", path,
                    file, resp->len, len);
        fail();
    }
    free(want);
    header1(resp, "ETag", buf, sizeof(buf));
    assert_true(strlen(buf) == 22 && buf[0] == '"' && buf[21] == '"');
    for (int i = 1; i < 21; i++)
        assert_true(isxdigit((unsigned char)buf[i]));
    assert_string_equal(header1(resp, "Cache-Control", buf, sizeof(buf)),
                        "no-cache");
    header1(resp, "Content-Security-Policy", buf, sizeof(buf));
    assert_non_null(strstr(buf, "default-src 'self'"));
    assert_non_null(strstr(buf, "frame-ancestors 'none'"));
    assert_null(strstr(buf, "unsafe"));
    assert_string_equal(
        header1(resp, "X-Content-Type-Options", buf, sizeof(buf)), "nosniff");
}

/* Collect the /static/ URLs that html's src= and href= attributes name. */
static size_t static_links(const char *html, char out[][128], size_t max)
{
    size_t n = 0;

    for (const char *p = html; (p = strstr(p, "=\"/static/")) && n < max; p++) {
        size_t len = strcspn(p + 2, "\"");
        if (len < 128)
            snprintf(out[n++], 128, "%.*s", (int)len, p + 2);
    }
    return n;
}

/*
 * Add the files script js names by a relative URL to list as /static/x.js:
 * the modules it imports (from "./x.js") and the workers it starts (new
 * URL("./x.js", import.meta.url)).
 */
static size_t js_imports(const char *js, char list[][128], size_t n, size_t max)
{
    static const char *const marks[] = {"from \"./", "new URL(\"./"};

    for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
        size_t skip = strlen(marks[m]);

        for (const char *p = js; (p = strstr(p, marks[m])) && n < max; p++) {
            size_t len = strcspn(p + skip, "\"");
            char url[128];
            bool dup = false;

            snprintf(url, sizeof(url), "/static/%.*s", (int)len, p + skip);
            for (size_t i = 0; i < n; i++)
                dup |= strcmp(list[i], url) == 0;
            if (!dup)
                snprintf(list[n++], 128, "%s", url);
        }
    }
    return n;
}

/* ---- the pages ---- */

static void test_files_served(void **state)
{
    static const char *const pages[] = {"/", "/admin"};
    char links[32][128];
    size_t n = 0;
    struct it_resp resp;
    (void)state;

    for (size_t i = 0; i < 2; i++) {
        check_file(pages[i], &resp);
        /* Only the page's own files: no inline code or style. */
        assert_null(strstr(resp.body, "<script>"));
        assert_null(strstr(resp.body, "<style"));
        assert_null(strstr(resp.body, " style="));
        assert_null(strstr(resp.body, " onclick="));
        assert_null(strstr(resp.body, "http://"));
        assert_null(strstr(resp.body, "https://"));
        size_t got = static_links(resp.body, links + n, 32 - n);
        assert_true(got >= 3); /* icon, style sheet, script */
        n += got;
        it_resp_free(&resp);
    }
    /* Every file a page names, and every module or worker a script names. */
    for (size_t i = 0; i < n; i++) {
        check_file(links[i], &resp);
        if (strcmp(type_of(links[i]), "text/javascript; charset=utf-8") == 0)
            n = js_imports(resp.body, links, n, 32);
        it_resp_free(&resp);
    }
    /* icon, css, both pages' scripts, api, chart, the proof-of-work
     * worker */
    assert_true(n >= 7);
    bool worker = false;
    for (size_t i = 0; i < n; i++)
        worker |= strcmp(links[i], "/static/pow-worker.js") == 0;
    assert_true(worker);

    /* The API description, as committed. */
    check_file("/openapi.json", &resp);
    assert_non_null(resp.json);
    assert_string_equal(it_json_str(resp.json, "openapi"), "3.1.0");
    it_resp_free(&resp);
}

static void test_not_modified(void **state)
{
    const struct it_server *srv = &servers[SRV_PLAIN];
    char etag[64], got[64], inm[4][160];
    struct it_resp resp;
    (void)state;

    get(srv, "/static/app.css", NULL, &resp);
    it_assert_status(&resp, 200);
    header1(&resp, "ETag", etag, sizeof(etag));
    it_resp_free(&resp);

    /* The tag, weakly, in a list, or any: 304 without a body. */
    snprintf(inm[0], sizeof(inm[0]), "If-None-Match: %s", etag);
    snprintf(inm[1], sizeof(inm[1]), "If-None-Match: W/%s", etag);
    snprintf(inm[2], sizeof(inm[2]), "If-None-Match: \"0\", %s", etag);
    snprintf(inm[3], sizeof(inm[3]), "If-None-Match: *");
    for (int i = 0; i < 4; i++) {
        const char *h[] = {inm[i], NULL};
        get(srv, "/static/app.css", h, &resp);
        if (resp.status != 304)
            print_error("%s\n", inm[i]);
        it_assert_status(&resp, 304);
        assert_int_equal(resp.len, 0);
        assert_string_equal(header1(&resp, "ETag", got, sizeof(got)), etag);
        assert_string_equal(header1(&resp, "Cache-Control", got, sizeof(got)),
                            "no-cache");
        it_resp_free(&resp);
    }
    /* Another file's tag, another tag, or a malformed value: the file. */
    const char *other[][2] = {{"If-None-Match: \"0123456789abcdef0123\"", NULL},
                              {"If-None-Match: nonsense", NULL},
                              {"If-None-Match: \"unterminated", NULL}};
    for (int i = 0; i < 3; i++) {
        get(srv, "/static/app.css", other[i], &resp);
        it_assert_status(&resp, 200);
        assert_true(resp.len > 0);
        it_resp_free(&resp);
    }
    /* The tag of one file does not match another. */
    const char *h[] = {inm[0], NULL};
    get(srv, "/static/api.js", h, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

static void test_file_errors(void **state)
{
    const struct it_server *srv = &servers[SRV_PLAIN];
    struct it_resp resp;
    struct it_raw_resp raw;
    (void)state;

    get(srv, "/static/no-such-file.js", NULL, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    get(srv, "/static/", NULL, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
    get(srv, "/admin/", NULL, &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);

    it_http(srv, "POST", "/", "{}", NULL, &resp);
    it_assert_error(&resp, 405, "METHOD_NOT_ALLOWED");
    assert_string_equal(resp.allow, "GET, OPTIONS");
    it_resp_free(&resp);

    /* Paths that leave the folder (curl would tidy them up): the files
     * are compiled in, there is nothing else to reach. */
    const char *const escapes[] = {
        "GET /static/../web/index.html HTTP/1.1\r\nHost: t\r\n"
        "Connection: close\r\n\r\n",
        "GET /static/%2e%2e HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "GET /static/.. HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"};
    for (size_t i = 0; i < 3; i++) {
        it_raw_request(srv->port, escapes[i], strlen(escapes[i]), 10000, &raw);
        it_raw_assert_error(&raw, 404, "NOT_FOUND");
        it_raw_resp_free(&raw);
    }
    /* An encoded "/" is refused before any route is looked at. */
    static const char slash[] = "GET /static/..%2fadmin HTTP/1.1\r\nHost: "
                                "t\r\nConnection: close\r\n\r\n";
    it_raw_request(srv->port, slash, strlen(slash), 10000, &raw);
    it_raw_assert_error(&raw, 400, "BAD_REQUEST");
    it_raw_resp_free(&raw);
}

/* Files cost the API's per-address budget nothing; the API still has one. */
static void test_files_not_rate_limited(void **state)
{
    const struct it_server *srv = &servers[SRV_RATE];
    const char *const files[] = {"/", "/static/app.css", "/static/buyer.js",
                                 "/static/api.js", "/openapi.json"};
    struct it_resp resp;
    int limited = 0;
    (void)state;

    /* Start from a full bucket: the address is every test's, and earlier
     * tests may have left it with other limits. */
    redisContext *rc = it_redis_connect();
    freeReplyObject(redisCommand(rc, "DEL rate:ip:127.0.0.1"));
    redisFree(rc);

    for (int round = 0; round < 6; round++)
        for (size_t i = 0; i < 5; i++) {
            get(srv, files[i], NULL, &resp);
            it_assert_status(&resp, 200);
            it_resp_free(&resp);
        }
    /* The bucket (burst 3) is still full. */
    get(srv, "/api/vouchers?limit=1", NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    for (int i = 0; i < 8; i++) {
        get(srv, "/api/vouchers?limit=1", NULL, &resp);
        if (resp.status == 429) {
            it_assert_error(&resp, 429, "RATE_LIMITED");
            limited++;
        } else {
            it_assert_status(&resp, 200);
        }
        it_resp_free(&resp);
    }
    assert_true(limited > 0);
}

/* ---- CORS ---- */

static void test_cors_listed_origins(void **state)
{
    const char *const origins[] = {ORIGIN_A, ORIGIN_B};
    char h[160], buf[256];
    struct it_resp resp;
    (void)state;

    for (size_t i = 0; i < 2; i++) {
        snprintf(h, sizeof(h), "Origin: %s", origins[i]);
        const char *hdrs[] = {h, NULL};
        get(&servers[SRV_CORS], "/api/vouchers?limit=1", hdrs, &resp);
        it_assert_status(&resp, 200);
        assert_string_equal(
            header1(&resp, "Access-Control-Allow-Origin", buf, sizeof(buf)),
            origins[i]);
        header1(&resp, "Access-Control-Expose-Headers", buf, sizeof(buf));
        assert_true(lists(buf, "Date") && lists(buf, "Retry-After"));
        assert_true(lists(header1(&resp, "Vary", buf, sizeof(buf)), "Origin"));
        /* Bearer tokens, never cookies: nothing about credentials. */
        assert_no_header(&resp, "Access-Control-Allow-Credentials");
        it_resp_free(&resp);
    }

    /* Errors carry the headers too, or the page could not read them. */
    struct it_req req = {.method = "POST",
                         .path = "/api/vouchers/1/seckill",
                         .headers =
                             (const char *[]){"Origin: " ORIGIN_A, NULL}};
    it_http_do(&servers[SRV_CORS], &req, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    assert_string_equal(
        header1(&resp, "Access-Control-Allow-Origin", buf, sizeof(buf)),
        ORIGIN_A);
    it_resp_free(&resp);

    /* Also the 413 sent before the body is read. */
    static const char big[] =
        "POST /api/auth/code HTTP/1.1\r\nHost: t\r\nOrigin: " ORIGIN_A
        "\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n";
    struct it_raw_resp raw;
    it_raw_request(servers[SRV_CORS].port, big, strlen(big), 10000, &raw);
    it_raw_assert_error(&raw, 413, "PAYLOAD_TOO_LARGE");
    assert_non_null(
        strstr(raw.text, "Access-Control-Allow-Origin: " ORIGIN_A "\r\n"));
    it_raw_resp_free(&raw);
}

static void test_cors_other_origins(void **state)
{
    /* Near misses: the match is exact, scheme, host and port. */
    const char *const origins[] = {"https://evil.example",
                                   "https://shop.example.evil",
                                   "http://shop.example",
                                   "https://shop.example:8443",
                                   "https://SHOP.example",
                                   "https://shop.example/",
                                   "null",
                                   "http://127.0.0.1:30000",
                                   "http://127.0.0.1:300",
                                   "https://shop.example, " ORIGIN_B,
                                   "*",
                                   ""};
    char h[160], buf[256];
    struct it_resp resp;
    (void)state;

    for (size_t i = 0; i < sizeof(origins) / sizeof(origins[0]); i++) {
        snprintf(h, sizeof(h), "Origin: %s", origins[i]);
        const char *hdrs[] = {h, NULL};
        get(&servers[SRV_CORS], "/healthz", hdrs, &resp);
        /* Served as ever; the browser keeps it from the page. */
        it_assert_status(&resp, 200);
        if (it_resp_header(&resp, "Access-Control-Allow-Origin", buf,
                           sizeof(buf))) {
            print_error("Origin \"%s\" was allowed\n", origins[i]);
            fail();
        }
        assert_true(lists(header1(&resp, "Vary", buf, sizeof(buf)), "Origin"));
        it_resp_free(&resp);
    }
}

/* OPTIONS with Origin (and Access-Control-Request-Method when method is
 * not NULL) to path of srv. */
static void options(const struct it_server *srv, const char *path,
                    const char *origin, const char *method,
                    struct it_resp *resp)
{
    char o[160], m[160];
    const char *hdrs[4] = {NULL};
    size_t n = 0;

    if (origin) {
        snprintf(o, sizeof(o), "Origin: %s", origin);
        hdrs[n++] = o;
    }
    if (method) {
        snprintf(m, sizeof(m), "Access-Control-Request-Method: %s", method);
        hdrs[n++] = m;
        hdrs[n++] = "Access-Control-Request-Headers: authorization,"
                    "content-type";
    }
    struct it_req req = {.method = "OPTIONS", .path = path, .headers = hdrs};
    it_http_do(srv, &req, resp);
}

static void test_cors_preflight(void **state)
{
    const struct it_server *srv = &servers[SRV_CORS];
    static const struct {
        const char *path, *methods;
    } paths[] = {
        {"/api/vouchers/7/seckill", "POST, OPTIONS"},
        {"/api/vouchers", "GET, POST, OPTIONS"},
        {"/api/orders/9", "GET, OPTIONS"},
        {"/api/auth/login", "POST, OPTIONS"},
    };
    char buf[256];
    struct it_resp resp;
    (void)state;

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        options(srv, paths[i].path, ORIGIN_B, "POST", &resp);
        it_assert_status(&resp, 204);
        assert_int_equal(resp.len, 0);
        assert_string_equal(
            header1(&resp, "Access-Control-Allow-Origin", buf, sizeof(buf)),
            ORIGIN_B);
        assert_string_equal(
            header1(&resp, "Access-Control-Allow-Methods", buf, sizeof(buf)),
            paths[i].methods);
        header1(&resp, "Access-Control-Allow-Headers", buf, sizeof(buf));
        assert_true(lists(buf, "Authorization") && lists(buf, "Content-Type") &&
                    lists(buf, "Seckill-PoW"));
        header1(&resp, "Access-Control-Max-Age", buf, sizeof(buf));
        assert_true(atoi(buf) > 0);
        assert_true(lists(header1(&resp, "Vary", buf, sizeof(buf)), "Origin"));
        assert_no_header(&resp, "Access-Control-Allow-Credentials");
        it_resp_free(&resp);
    }

    /* From an origin that is not listed: refused, in JSON. */
    options(srv, "/api/vouchers", "https://evil.example", "POST", &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    assert_no_header(&resp, "Access-Control-Allow-Origin");
    assert_true(lists(header1(&resp, "Vary", buf, sizeof(buf)), "Origin"));
    it_resp_free(&resp);

    /* A plain OPTIONS (no preflight): the path's methods. */
    options(srv, "/api/vouchers", NULL, NULL, &resp);
    it_assert_status(&resp, 204);
    assert_string_equal(header1(&resp, "Allow", buf, sizeof(buf)),
                        "GET, POST, OPTIONS");
    assert_no_header(&resp, "Access-Control-Allow-Origin");
    it_resp_free(&resp);
    options(srv, "/healthz", ORIGIN_A, NULL, &resp);
    it_assert_status(&resp, 204);
    assert_string_equal(header1(&resp, "Allow", buf, sizeof(buf)),
                        "GET, OPTIONS");
    it_resp_free(&resp);

    /* Paths that do not exist stay 404s. */
    options(srv, "/nope", ORIGIN_A, "GET", &resp);
    it_assert_error(&resp, 404, "NOT_FOUND");
    it_resp_free(&resp);
}

static void test_cors_off(void **state)
{
    const struct it_server *srv = &servers[SRV_PLAIN];
    struct it_resp resp;
    const char *hdrs[] = {"Origin: " ORIGIN_A, NULL};
    (void)state;

    get(srv, "/api/vouchers?limit=1", hdrs, &resp);
    it_assert_status(&resp, 200);
    assert_no_header(&resp, "Access-Control-Allow-Origin");
    assert_no_header(&resp, "Vary");
    it_resp_free(&resp);
    options(srv, "/api/vouchers", ORIGIN_A, "GET", &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    assert_no_header(&resp, "Access-Control-Allow-Origin");
    it_resp_free(&resp);
}

/*
 * POST /api/auth/code to srv as a page on origin would send it without a
 * preflight, its body of type; asserts the 415 (with the CORS header
 * when origin is listed) and that no login code was stored.
 */
static void simple_post_refused(const struct it_server *srv, const char *origin,
                                const char *type, bool listed, redisContext *rc)
{
    char *phone = xasprintf("135%08lld", (long long)(it_unique() % 100000000));
    char *body = xasprintf("{\"phone\":\"%s\"}", phone);
    char *req = xasprintf("POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
                          "Origin: %s\r\nContent-Type: %s\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                          origin, type, strlen(body), body);
    struct it_raw_resp raw;
    redisReply *r;

    it_raw_request(srv->port, req, strlen(req), 10000, &raw);
    if (raw.status != 415)
        print_error("%s from %s: %.300s\n", type, origin, raw.text);
    it_raw_assert_error(&raw, 415, "UNSUPPORTED_MEDIA_TYPE");
    /* A listed origin's page may read why. */
    if (listed) {
        char *allow =
            xasprintf("\r\nAccess-Control-Allow-Origin: %s\r\n", origin);
        assert_non_null(strstr(raw.text, allow));
        free(allow);
    }
    it_raw_resp_free(&raw);
    r = redisCommand(rc, "EXISTS login:{p:+86%s}:codes", phone);
    assert_non_null(r);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    assert_int_equal(0, r->integer);
    freeReplyObject(r);
    free(req);
    free(body);
    free(phone);
}

/*
 * A cross-site "simple request": a page on any site may POST a body
 * labelled text/plain, form-urlencoded or multipart without a preflight,
 * and the browser sends it whatever CORS says (it only hides the answer).
 * Such a body is refused before anything is done, with CORS on or off,
 * from a listed origin or not: a login code asked this way is not stored.
 */
static void test_cors_text_plain_post_refused(void **state)
{
    static const char *const types[] = {
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=----x",
    };
    redisContext *rc = it_redis_connect();
    (void)state;

    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        simple_post_refused(&servers[SRV_CORS], "https://evil.example",
                            types[t], false, rc);
        simple_post_refused(&servers[SRV_CORS], ORIGIN_A, types[t], true, rc);
        simple_post_refused(&servers[SRV_PLAIN], "https://evil.example",
                            types[t], false, rc);
    }
    redisFree(rc);
}

/* ---- malformed requests ---- */

/* What libmicrohttpd passes on and the service refuses in JSON. */
static void test_malformed_json(void **state)
{
    static const struct {
        const char *request;
        long status;
        const char *code;
        const char *message; /* a part of it */
    } cases[] = {
        {"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400,
         "BAD_REQUEST", "Host"},
        {"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "more than one Host"},
        {"GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400,
         "BAD_REQUEST", "more than one Host"},
        {"GET /healthz HTTP/1.1\r\nHost: t\r\nBad Name: 1\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "header name"},
        {"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Space : 1\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "header name"},
        {"GET /healthz HTTP/1.1\r\nHost: t\r\nX(y): 1\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "header name"},
        {"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Ctl: a\x01z\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "control characters"},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
         "Content-Length: 2\r\nConnection: close\r\n\r\n{}",
         400, "BAD_REQUEST", "Content-Length"},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
         "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
         400, "BAD_REQUEST", "Transfer-Encoding"},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
         "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"
         "Connection: close\r\n\r\n0\r\n\r\n",
         400, "BAD_REQUEST", "Transfer-Encoding"},
        /* Not read to the end of the connection: answered at once. */
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
         "Transfer-Encoding: gzip\r\n\r\nabc",
         501, "NOT_IMPLEMENTED", "gzip"},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
         "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
         501, "NOT_IMPLEMENTED", "gzip"},
        /* An encoded "/" does not make another path of a segment. */
        {"GET /api/vouchers/360%2Fstats HTTP/1.1\r\nHost: t\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "encoded /"},
        {"GET /api%2fvouchers HTTP/1.1\r\nHost: t\r\n"
         "Connection: close\r\n\r\n",
         400, "BAD_REQUEST", "encoded /"},
        /* A raw space in the target is taken whole, and routed. */
        {"GET /health z HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 404,
         "NOT_FOUND", "endpoint"},
    };
    struct it_raw_resp raw;
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        it_raw_request(servers[SRV_PLAIN].port, cases[i].request,
                       strlen(cases[i].request), 10000, &raw);
        const char *msg =
            it_json_str(json_object_get(raw.json, "error"), "message");
        if (raw.status != cases[i].status || !msg ||
            !strstr(msg, cases[i].message))
            print_error("request %zu: %.80s\n", i, cases[i].request);
        it_raw_assert_error(&raw, cases[i].status, cases[i].code);
        assert_non_null(strstr(msg, cases[i].message));
        it_raw_resp_free(&raw);
    }

    /* NUL bytes in a value: refused, not cut short where they are (a
     * proxy in front may have read the rest). */
    static const char nul_value[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n"
                                    "X-Foo: a\0b\r\nConnection: close\r\n\r\n";
    static const char nul_length[] =
        "POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
        "Content-Length: 2\0 999\r\nConnection: close\r\n\r\n{}";
    static const char nul_chunked[] =
        "POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
        "Transfer-Encoding: chunked\0, identity\r\nConnection: close\r\n"
        "\r\n2\r\n{}\r\n0\r\n\r\n";
    const struct {
        const char *data;
        size_t len;
    } nuls[] = {{nul_value, sizeof(nul_value) - 1},
                {nul_length, sizeof(nul_length) - 1},
                {nul_chunked, sizeof(nul_chunked) - 1}};
    for (size_t i = 0; i < sizeof(nuls) / sizeof(nuls[0]); i++) {
        it_raw_request(servers[SRV_PLAIN].port, nuls[i].data, nuls[i].len,
                       10000, &raw);
        const char *msg =
            it_json_str(json_object_get(raw.json, "error"), "message");
        if (raw.status != 400 || !msg || !strstr(msg, "control characters"))
            print_error("NUL request %zu: %ld %.200s\n", i, raw.status,
                        raw.text);
        it_raw_assert_error(&raw, 400, "BAD_REQUEST");
        assert_non_null(strstr(msg, "control characters"));
        it_raw_resp_free(&raw);
    }

    /* The same in the last header, behind as many NULs as a client
     * likes: a buyer's token with more after it, and a length that a
     * proxy in front may read as 35, with a second request behind it
     * (two answers if the first were served). */
    {
        char token[TOKEN_STR_LEN], *auth, *two_auth;
        size_t auth_len;
        static const char nul_last_length[] =
            "POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
            "Content-Length: 2\0\0 35\r\n\r\n{}"
            "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

        it_token(4242, TOKEN_ROLE_USER, 600, token);
        auth = xasprintf("GET /api/orders HTTP/1.1\r\nHost: t\r\n"
                         "Connection: close\r\nAuthorization: Bearer "
                         "%s@@junk\r\n\r\n",
                         token);
        auth_len = strlen(auth);
        *strchr(auth, '@') = '\0';
        *(strchr(auth + strlen(auth) + 1, '@')) = '\0';
        it_raw_request(servers[SRV_PLAIN].port, auth, auth_len, 10000, &raw);
        if (raw.status != 400)
            print_error("a NUL in the last header: %ld %.200s\n", raw.status,
                        raw.text);
        it_raw_assert_error(&raw, 400, "BAD_REQUEST");
        it_raw_resp_free(&raw);
        free(auth);

        it_raw_request(servers[SRV_PLAIN].port, nul_last_length,
                       sizeof(nul_last_length) - 1, 10000, &raw);
        if (raw.status != 400 || strstr(raw.body, "HTTP/1.1 "))
            print_error("a NUL in the last Content-Length: %.400s\n", raw.text);
        it_raw_assert_error(&raw, 400, "BAD_REQUEST");
        assert_null(strstr(raw.body, "HTTP/1.1 "));
        it_raw_resp_free(&raw);

        /* A NUL right at the end of a value (before CR LF), in the
         * middle header and the last; and in the request target, which
         * would route a path cut short. Trailing blanks are no NUL. */
        {
            static const char *const refused[] = {
                "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\0\r\n"
                "Connection: close\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                "X-A: a\0\0\r\n\r\n",
                "GET /api/vouchers/1\0/../../admin HTTP/1.1\r\nHost: t\r\n"
                "Connection: close\r\n\r\n",
                /* A line of a NUL alone, which would end the head there
                 * and make a second request of the rest. */
                "GET /healthz HTTP/1.1\r\nHost: t\r\n\0\r\nX-A: b\r\n"
                "Connection: close\r\n\r\n",
            };
            static const size_t lens[] = {62, 63, 73, 64};
            static const char blanks[] =
                "GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a  \r\n"
                "Connection: close\r\n\r\n";

            for (size_t i = 0; i < 4; i++) {
                it_raw_request(servers[SRV_PLAIN].port, refused[i], lens[i],
                               10000, &raw);
                if (raw.status != 400 || strstr(raw.body, "HTTP/1.1 "))
                    print_error("NUL case %zu: %.200s\n", i, raw.text);
                it_raw_assert_error(&raw, 400, "BAD_REQUEST");
                assert_null(strstr(raw.body, "HTTP/1.1 "));
                it_raw_resp_free(&raw);
            }
            it_raw_request(servers[SRV_PLAIN].port, blanks, sizeof(blanks) - 1,
                           10000, &raw);
            assert_int_equal(200, raw.status);
            it_raw_resp_free(&raw);
        }

        /* Two Authorization headers: the first here, perhaps the last
         * in front. */
        two_auth = xasprintf("GET /api/orders HTTP/1.1\r\nHost: t\r\n"
                             "Authorization: Bearer %s\r\n"
                             "Authorization: Bearer x\r\n"
                             "Connection: close\r\n\r\n",
                             token);
        it_raw_request(servers[SRV_PLAIN].port, two_auth, strlen(two_auth),
                       10000, &raw);
        it_raw_assert_error(&raw, 400, "BAD_REQUEST");
        assert_non_null(strstr(raw.body, "more than one Authorization"));
        it_raw_resp_free(&raw);
        free(two_auth);
    }

    /* HTTP/1.0 may leave Host out. */
    static const char old[] = "GET /healthz HTTP/1.0\r\n\r\n";
    it_raw_request(servers[SRV_PLAIN].port, old, strlen(old), 10000, &raw);
    assert_int_equal(raw.status, 200);
    it_raw_resp_free(&raw);
}

/*
 * What libmicrohttpd refuses itself, with its own HTML and no
 * Content-Type: the service never sees these. docs/api.md lists the same; if
 * a new library answers one of them differently, this test says so.
 */
static void test_malformed_library(void **state)
{
    char *long_header = xasprintf(
        "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: %0*d\r\n\r\n", 40000, 0);
    char *long_target =
        xasprintf("GET /%0*d HTTP/1.1\r\nHost: t\r\n\r\n", 40000, 0);
    const struct {
        const char *request;
        long status;
    } cases[] = {
        {"GET /healthz HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n", 400},
        {"GET /healthz HTTP/x.y\r\nHost: t\r\n\r\n", 400},
        {"GET /healthz FOO\r\nHost: t\r\n\r\n", 400},
        {"GET /healthz HTTP/2.0\r\nHost: t\r\n\r\n", 505},
        {"GET /healthz HTTP/0.9\r\nHost: t\r\n\r\n", 505},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n"
         "\r\n",
         400},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
         "Content-Length: 99999999999999999999999\r\n\r\n",
         413},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
         "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
         400},
        {"POST /api/auth/code HTTP/1.1\r\nHost: t\r\n"
         "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n",
         413},
        {long_header, 431},
        {long_target, 414},
    };
    struct it_raw_resp raw;
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        it_raw_request(servers[SRV_PLAIN].port, cases[i].request,
                       strlen(cases[i].request), 10000, &raw);
        if (raw.status != cases[i].status || !strstr(raw.body, "<html>") ||
            strcasestr(raw.text, "\r\nContent-Type:") || !raw.closed) {
            print_error("request %zu (%.60s): expected libmicrohttpd's %ld "
                        "page; got:\n%.400s\n",
                        i, cases[i].request, cases[i].status, raw.text);
            fail();
        }
        it_raw_resp_free(&raw);
    }
    free(long_header);
    free(long_target);

    /* No space in the request line: closed without an answer. */
    static const char garbage[] = "GARBAGE\r\n\r\n";
    it_raw_request(servers[SRV_PLAIN].port, garbage, strlen(garbage), 10000,
                   &raw);
    assert_true(raw.closed);
    assert_int_equal(raw.text[0], '\0');
    it_raw_resp_free(&raw);

    /* The server is fine afterwards. */
    struct it_resp resp;
    get(&servers[SRV_PLAIN], "/healthz", NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/*
 * pad_head(buf, first, fields, size): a request head of exactly size
 * bytes (request line, header lines and the empty line) that starts
 * with first (its request line and headers, each ending "\r\n") and has
 * fields header lines in all, the last an X-Pad filling it up.
 */
static char *pad_head(const char *first, int fields, size_t size)
{
    char *head = xcalloc(1, size + 1);
    size_t len = strlen(first);
    int have = 0;

    memcpy(head, first, len);
    for (const char *p = strchr(first, '\n'); p && p[1];
         p = strchr(p + 1, '\n'))
        have++; /* the lines after the request line */
    for (int i = have; i < fields - 1; i++)
        len += (size_t)sprintf(head + len, "X-F%d: v\r\n", i);
    assert_true(len + 11 <= size);
    len += (size_t)sprintf(head + len, "X-Pad: ");
    memset(head + len, 'p', size - len - 4);
    memcpy(head + size - 4, "\r\n\r\n", 4);
    return head;
}

/*
 * The limits of a request's head (docs/api.md, Malformed requests), as
 * documented for a SECKILL_HTTP_HEAD_MAX: its bytes of request line and
 * headers, the fields (header lines, query arguments, cookies), the
 * target, the query arguments, and the connection's buffer.
 */
struct head_limits {
    size_t head;
    int fields;
    size_t target;
    int args;
    size_t buffer;
};

/* The default, 4096; 8192; and the smallest, 2048. */
static const struct head_limits head_default = {4096, 48, 2048, 24, 8192};
static const struct head_limits head_8k = {8192, 80, 4096, 40, 14336};
static const struct head_limits head_2k = {2048, 32, 1024, 16, 5120};

/* GET /healthz with a head of exactly size bytes in fields header lines,
 * the reply's status (0: none), closing the connection after it. */
static long healthz_head(uint16_t port, int fields, size_t size)
{
    struct it_raw_resp raw;
    char *head =
        pad_head("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n",
                 fields, size);
    long status;

    it_raw_request(port, head, strlen(head), 10000, &raw);
    status = raw.status;
    it_raw_resp_free(&raw);
    free(head);
    return status;
}

/*
 * The request head an instance with limits lim takes: up to lim->head
 * bytes of request line and headers in lim->fields fields, a target of up
 * to lim->target bytes with lim->args query arguments (a browser behind a
 * proxy, with its cookies, sends 2 to 4 KiB in 25 or more). Larger heads
 * are answered at once, 431 HEADERS_TOO_LARGE or 414 URI_TOO_LONG in the
 * JSON envelope stating the limits, and closed; beyond the connection's
 * buffer the library answers its own 431 or 414 page. Every size in
 * between gets one of those, never a closed connection without an answer
 * (the library has no room left for a reply's headers near the buffer's
 * end). cors and plain: an instance with CORS (for the largest reply, a
 * preflight's) and one without, or the same one twice.
 */
static void check_head_limits(uint16_t cors, uint16_t plain,
                              const struct head_limits *lim)
{
    struct it_raw_resp raw;
    char *head, msg[160];

    /* The largest head served, with the largest reply: a preflight. */
    head = pad_head("OPTIONS /api/vouchers/1/seckill HTTP/1.1\r\nHost: t\r\n"
                    "Connection: close\r\nOrigin: " ORIGIN_A "\r\n"
                    "Access-Control-Request-Method: POST\r\n"
                    "Access-Control-Request-Headers: authorization, "
                    "content-type, seckill-pow, seckill-ticket\r\n",
                    lim->fields, lim->head);
    it_raw_request(cors, head, strlen(head), 10000, &raw);
    if (raw.status != 204)
        print_error("%zu-byte preflight: %.300s\n", lim->head, raw.text);
    assert_int_equal(raw.status, 204);
    assert_non_null(strcasestr(raw.text, "Access-Control-Allow-Headers:"));
    it_raw_resp_free(&raw);
    free(head);
    assert_int_equal(200, healthz_head(plain, lim->fields, lim->head));
    {
        /* The most query arguments, the rest of the fields headers. */
        char first[1024];
        size_t len = (size_t)snprintf(first, sizeof(first), "GET /healthz?");

        for (int a = 0; a < lim->args; a++)
            len += (size_t)snprintf(first + len, sizeof(first) - len, "%sa%d=1",
                                    a ? "&" : "", a);
        snprintf(first + len, sizeof(first) - len,
                 " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
        head = pad_head(first, lim->fields - lim->args, lim->head);
        it_raw_request(plain, head, strlen(head), 10000, &raw);
        assert_int_equal(raw.status, 200);
        it_raw_resp_free(&raw);
        free(head);
    }

    /* One byte more, one field more (a header, a query argument), a
     * Cookie of half the limit in a head of three quarters (counted
     * twice, it is over). */
    size_t cookie_len = lim->head / 2;
    char *cookie = xcalloc(1, cookie_len + 64);
    size_t clen = (size_t)sprintf(
        cookie, "GET /healthz HTTP/1.1\r\nHost: t\r\nCookie: a=1; b=2; c=");
    memset(cookie + clen, '7', cookie_len);
    memcpy(cookie + clen + cookie_len, "\r\n", 3);
    const size_t few = (size_t)lim->fields * 12 + 200;
    const struct {
        const char *first;
        int fields;
        size_t size;
    } over[] = {
        {"GET /healthz HTTP/1.1\r\nHost: t\r\n", lim->fields, lim->head + 1},
        {"GET /healthz HTTP/1.1\r\nHost: t\r\n", lim->fields + 1, few},
        {"GET /healthz?a=1 HTTP/1.1\r\nHost: t\r\n", lim->fields, few},
        {cookie, 6, lim->head * 3 / 4},
    };
    snprintf(msg, sizeof(msg), "at most %zu bytes in %d fields", lim->head,
             lim->fields);
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        head = pad_head(over[i].first, over[i].fields, over[i].size);
        it_raw_request(plain, head, strlen(head), 10000, &raw);
        if (raw.status != 431 || !raw.closed)
            print_error("head %zu: closed %d %.300s\n", i, raw.closed,
                        raw.text);
        it_raw_assert_error(&raw, 431, "HEADERS_TOO_LARGE");
        assert_true(raw.closed);
        assert_non_null(
            strcasestr(raw.text, "\r\nContent-Type: application/json"));
        assert_non_null(strstr(raw.body, msg));
        it_raw_resp_free(&raw);
        free(head);
    }
    free(cookie);

    /* The target: lim->target bytes are routed (a 404 here), one more is
     * not; nor lim->args + 1 query arguments. */
    char *target = xcalloc(1, lim->target + 2), *req;
    memset(target, 'a', lim->target + 1);
    memcpy(target, "/x", 2);
    target[lim->target] = '\0';
    req = xasprintf("GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                    target);
    it_raw_request(plain, req, strlen(req), 10000, &raw);
    it_raw_assert_error(&raw, 404, "NOT_FOUND");
    it_raw_resp_free(&raw);
    free(req);
    target[lim->target] = 'a';
    req = xasprintf("GET %s HTTP/1.1\r\nHost: t\r\n\r\n", target);
    it_raw_request(plain, req, strlen(req), 10000, &raw);
    it_raw_assert_error(&raw, 414, "URI_TOO_LONG");
    assert_true(raw.closed);
    snprintf(msg, sizeof(msg), "longer than %zu bytes", lim->target);
    assert_non_null(strstr(raw.body, msg));
    it_raw_resp_free(&raw);
    free(req);
    free(target);
    {
        char first[1024];
        size_t len = (size_t)snprintf(first, sizeof(first), "GET /healthz?");

        for (int a = 0; a <= lim->args; a++)
            len += (size_t)snprintf(first + len, sizeof(first) - len, "%sa%d=1",
                                    a ? "&" : "", a);
        snprintf(first + len, sizeof(first) - len,
                 " HTTP/1.1\r\nHost: t\r\n\r\n");
        it_raw_request(plain, first, strlen(first), 10000, &raw);
        it_raw_assert_error(&raw, 414, "URI_TOO_LONG");
        snprintf(msg, sizeof(msg), "more than %d query arguments", lim->args);
        assert_non_null(strstr(raw.body, msg));
        it_raw_resp_free(&raw);
    }

    /* Every size from the limit to past the buffer: 431, then. */
    for (size_t size = lim->head + 1; size <= lim->buffer + 1000; size += 127) {
        head = pad_head("GET /healthz HTTP/1.1\r\nHost: t\r\n", 3, size);
        it_raw_request(plain, head, strlen(head), 10000, &raw);
        if (raw.status != 431 || !raw.closed)
            print_error("a head of %zu bytes: closed %d %.300s\n", size,
                        raw.closed, raw.text);
        assert_int_equal(raw.status, 431);
        it_raw_resp_free(&raw);
        free(head);
    }
    for (size_t size = lim->target + 1; size <= lim->buffer + 1000;
         size += 127) {
        head = xcalloc(1, size + 64);
        sprintf(head, "GET /");
        memset(head + 5, 'a', size - 1);
        strcpy(head + 4 + size, " HTTP/1.1\r\nHost: t\r\n\r\n");
        it_raw_request(plain, head, strlen(head), 10000, &raw);
        if ((raw.status != 414 && raw.status != 431) || !raw.closed)
            print_error("a target of %zu bytes: closed %d %.300s\n", size,
                        raw.closed, raw.text);
        assert_true(raw.status == 414 || raw.status == 431);
        it_raw_resp_free(&raw);
        free(head);
    }
}

/* The default limits (SECKILL_HTTP_HEAD_MAX unset). */
static void test_request_head_limits(void **state)
{
    struct it_resp resp;
    (void)state;

    check_head_limits(servers[SRV_CORS].port, servers[SRV_PLAIN].port,
                      &head_default);
    /* The server is fine afterwards. */
    get(&servers[SRV_PLAIN], "/healthz", NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* SECKILL_HTTP_HEAD_MAX=8192: a head the default refuses is served, and
 * the limits that follow from it hold. */
static void test_request_head_limits_raised(void **state)
{
    const uint16_t big = servers[SRV_BIG_HEAD].port;
    struct it_resp resp;
    (void)state;

    assert_int_equal(431, healthz_head(servers[SRV_PLAIN].port, 20, 6000));
    assert_int_equal(200, healthz_head(big, 20, 6000));
    check_head_limits(big, big, &head_8k);
    get(&servers[SRV_BIG_HEAD], "/healthz", NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* SECKILL_HTTP_HEAD_MAX=2048, the smallest: a head the default serves is
 * refused, and the smaller buffer still holds the largest head it takes
 * with its reply. */
static void test_request_head_limits_lowered(void **state)
{
    const uint16_t small = servers[SRV_SMALL_HEAD].port;
    struct it_resp resp;
    (void)state;

    assert_int_equal(200, healthz_head(servers[SRV_PLAIN].port, 20, 3000));
    assert_int_equal(431, healthz_head(small, 20, 3000));
    check_head_limits(small, small, &head_2k);
    get(&servers[SRV_SMALL_HEAD], "/healthz", NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* API answers, with a user's data or not, errors too, are never cached
 * and never sniffed; the pages' files are not sniffed either. */
static void test_api_not_cached(void **state)
{
    char tok[TOKEN_STR_LEN], auth[TOKEN_STR_LEN + 32], buf[128];
    const char *const with_token[] = {auth, NULL};
    static const char *const paths[] = {"/api/orders", "/api/vouchers/1",
                                        "/api/nothing-here", "/healthz"};
    struct it_resp resp;

    (void)state;
    it_token(41, TOKEN_ROLE_USER, 3600, tok);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tok);
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        get(&servers[SRV_PLAIN], paths[i], with_token, &resp);
        assert_true(resp.status > 0);
        assert_string_equal("no-store",
                            header1(&resp, "Cache-Control", buf, sizeof(buf)));
        assert_string_equal("nosniff", header1(&resp, "X-Content-Type-Options",
                                               buf, sizeof(buf)));
        it_resp_free(&resp);
    }
    get(&servers[SRV_PLAIN], "/", NULL, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal(
        "nosniff", header1(&resp, "X-Content-Type-Options", buf, sizeof(buf)));
    it_resp_free(&resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_served),
        cmocka_unit_test(test_not_modified),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_files_not_rate_limited),
        cmocka_unit_test(test_cors_listed_origins),
        cmocka_unit_test(test_cors_other_origins),
        cmocka_unit_test(test_cors_preflight),
        cmocka_unit_test(test_cors_off),
        cmocka_unit_test(test_cors_text_plain_post_refused),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_malformed_library),
        cmocka_unit_test(test_request_head_limits),
        cmocka_unit_test(test_request_head_limits_raised),
        cmocka_unit_test(test_request_head_limits_lowered),
        cmocka_unit_test(test_api_not_cached),
    };

    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
