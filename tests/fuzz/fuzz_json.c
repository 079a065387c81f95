/*
 * fuzz_json.c - libFuzzer harness: JSON request bodies, through the body
 * validators of handlers/request.c and the endpoints that use them.
 *
 * Input: one selector byte, then the body (any bytes). The selector, mod
 * 4, picks:
 *   0  POST /api/auth/code             (phone)
 *   1  POST /api/auth/login            (phone, code)
 *   2  POST /api/vouchers, admin token (the voucher rules of docs/api.md)
 *   3  the validators alone: body_object_or_reply, then body_int_, _str_
 *      and _time_or_reply on every member, against reference rules.
 * 0 to 2 go through the service's request code (driver.c) with every
 * backend call succeeding, so a 2xx means the body passed validation.
 *
 * Checked, besides every reply invariant of driver.c: the only answers are
 * success, 400 and 413 (over 64 KiB); a 2xx body obeys docs/api.md's rules
 * (checked on the raw JSON here and on what reached the store in
 * fake_backend.c); each validator accepts exactly what its header comment
 * promises; every string jansson hands over is valid UTF-8 without NUL;
 * accepted times survive a format/parse round trip. jansson's own depth
 * limit (2048) and the service's 64 KiB cap bound the work per input.
 *
 *     make fuzz
 *     build/fuzz/fuzz_json -max_len=70000 -dict=tests/fuzz/json.dict DIR
 *
 * Seeds: tests/fuzz/corpus/json/, selector byte '0'..'3' then the body.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tests/fuzz/fuzz.h"
#include "handlers/request.h"

/* util_time_parse's range: 1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z. */
#define TIME_MAX 253402300799LL

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_driver_init();
    return 0;
}

/* ---- through the endpoints ---- */

static const char *str_member(json_t *o, const char *name)
{
    return json_string_value(json_object_get(o, name));
}

static bool present(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    return v && !json_is_null(v);
}

/* A 201 voucher: docs/api.md's rules, on the body as the client sent it. */
static void check_voucher_body(json_t *body)
{
    const struct store_voucher *v = fuzz_backend_last_voucher();
    const char *type = str_member(body, "type");
    const char *sub = str_member(body, "subTitle");
    const char *rules = str_member(body, "rules");
    bool seckill = type && strcmp(type, "seckill") == 0;
    int64_t t;

    FUZZ_CHECK(v, "201 without a stored voucher");
    FUZZ_CHECK(json_integer_value(json_object_get(body, "shopId")) ==
                   v->shop_id,
               "shopId");
    FUZZ_CHECK(str_member(body, "title") &&
                   strcmp(str_member(body, "title"), v->title) == 0,
               "title stored differently");
    FUZZ_CHECK(strcmp(sub ? sub : "", v->sub_title) == 0, "subTitle");
    FUZZ_CHECK(strcmp(rules ? rules : "", v->rules) == 0, "rules");
    FUZZ_CHECK(json_is_integer(json_object_get(body, "payValue")) &&
                   json_is_integer(json_object_get(body, "actualValue")),
               "money must be integers");
    FUZZ_CHECK(!present(body, "type") || seckill || strcmp(type, "normal") == 0,
               "type \"%s\" accepted", type ? type : "(not a string)");
    if (seckill) {
        FUZZ_CHECK(v->type == VOUCHER_SECKILL, "seckill stored as normal");
        FUZZ_CHECK(util_time_parse(str_member(body, "beginTime"), &t) == 0 &&
                       t == v->begin_time,
                   "beginTime");
        FUZZ_CHECK(util_time_parse(str_member(body, "endTime"), &t) == 0 &&
                       t == v->end_time,
                   "endTime");
        FUZZ_CHECK(json_integer_value(json_object_get(body, "stock")) ==
                       v->stock,
                   "stock");
    } else {
        FUZZ_CHECK(!present(body, "stock") && !present(body, "beginTime") &&
                       !present(body, "endTime"),
                   "a normal voucher with seckill fields");
    }
}

static void run_endpoint(unsigned mode, const char *body, size_t len)
{
    static const char *const paths[] = {"/api/auth/code", "/api/auth/login",
                                        "/api/vouchers"};
    struct fuzz_request rq = {.method = "POST", .body = body, .body_len = len};
    struct fuzz_reply rep;
    unsigned ok = mode == 2 ? 201 : 200;

    rq.path = paths[mode];
    rq.headers[rq.nheaders].key = "Content-Type";
    rq.headers[rq.nheaders++].value = "application/json";
    if (mode == 2) {
        rq.headers[rq.nheaders].key = "Authorization";
        rq.headers[rq.nheaders++].value = "Bearer @admin";
    }
    fuzz_backend_script("", 0);
    fuzz_http_run(&rq, &rep);
    FUZZ_CHECK(rep.status == ok || rep.status == 400 ||
                   (rep.status == 413 && len > BODY_MAX),
               "%s answered %u with a healthy backend", rq.path, rep.status);
    if (rep.status == ok) {
        json_t *in = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
        FUZZ_CHECK(json_is_object(in), "%u for a body that is not an object",
                   ok);
        const char *phone = str_member(in, "phone");
        if (mode == 0) {
            FUZZ_CHECK(phone &&
                           strcmp(phone, str_member(rep.json, "phone")) == 0,
                       "the code reply names another phone");
        } else if (mode == 1) {
            const char *tok = str_member(rep.json, "token");
            struct token_claims c;
            FUZZ_CHECK(tok &&
                           token_verify(fuzz_key, tok, strlen(tok),
                                        util_now_ms() / 1000, &c) == 0 &&
                           c.role == TOKEN_ROLE_USER,
                       "login answered an invalid token");
        } else {
            check_voucher_body(in);
        }
        json_decref(in);
    }
    fuzz_reply_clear(&rep);
}

/* ---- the validators alone ---- */

/* Every string in v, keys included, is valid UTF-8 without a NUL. */
static void check_strings(json_t *v)
{
    const char *key;
    json_t *m;
    size_t i;

    switch (json_typeof(v)) {
    case JSON_OBJECT:
        json_object_foreach(v, key, m)
        {
            FUZZ_CHECK(fuzz_utf8_valid(key, strlen(key)), "a key in bad UTF-8");
            check_strings(m);
        }
        break;
    case JSON_ARRAY:
        json_array_foreach(v, i, m)
        {
            check_strings(m);
        }
        break;
    case JSON_STRING:
        FUZZ_CHECK(strlen(json_string_value(v)) == json_string_length(v),
                   "jansson let a NUL into a string");
        FUZZ_CHECK(fuzz_utf8_valid(json_string_value(v), json_string_length(v)),
                   "jansson let bad UTF-8 through");
        break;
    default:
        break;
    }
}

/* After a refusal: a 400 BAD_REQUEST naming the field. */
static void check_refused(struct request *req, const char *name)
{
    const char *msg = json_string_value(
        json_object_get(json_object_get(req->reply, "error"), "message"));
    size_t n = strlen(name);

    FUZZ_CHECK(req->status == 400 && msg, "a refusal without a 400 reply");
    FUZZ_CHECK(strncmp(msg, name, n) == 0 && msg[n] == ':',
               "the message does not name the field %s", name);
    req->status = 0;
}

static size_t utf8_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

/* k (0..63, from the selector byte) picks the validators' arguments. */
static void check_validators(struct request *req, const char *name, unsigned k)
{
    json_t *v = json_object_get(req->json, name);
    bool absent = !v || json_is_null(v);
    bool required = k & 1;
    const int64_t mins[] = {INT64_MIN, -1, 0, 1, 100};
    const int64_t maxs[] = {INT64_MAX, 0, 1, 100, 1000000000};
    int64_t min = mins[(k >> 1) % 5], max = maxs[(k >> 3) % 5];
    size_t max_chars = k % 20;
    int64_t n = 12345, t = 12345;
    const char *s = NULL;
    bool ok, want;

    /* Integers. */
    want = absent ? !required
                  : json_is_integer(v) && json_integer_value(v) >= min &&
                        json_integer_value(v) <= max;
    ok = body_int_or_reply(req, name, required, min, max, &n);
    FUZZ_CHECK(ok == want, "body_int_or_reply(%s) = %d", name, ok);
    if (!ok)
        check_refused(req, name);
    else
        FUZZ_CHECK(absent ? n == 12345 : n == json_integer_value(v),
                   "body_int_or_reply stored %lld", (long long)n);

    /* Strings. */
    if (absent) {
        want = !required;
    } else {
        want = json_is_string(v);
        if (want) {
            size_t len = json_string_length(v);
            size_t chars = utf8_chars(json_string_value(v), len);
            want = strlen(json_string_value(v)) == len && chars <= max_chars &&
                   (!required || chars > 0);
        }
    }
    ok = body_str_or_reply(req, name, required, max_chars, &s);
    FUZZ_CHECK(ok == want, "body_str_or_reply(%s) = %d", name, ok);
    if (!ok)
        check_refused(req, name);
    else
        FUZZ_CHECK(absent ? !s : s == json_string_value(v),
                   "body_str_or_reply stored another string");

    /* Times. */
    int64_t ref = 0;
    want = absent ? !required
                  : json_is_string(v) &&
                        util_time_parse(json_string_value(v), &ref) == 0;
    ok = body_time_or_reply(req, name, required, &t);
    FUZZ_CHECK(ok == want, "body_time_or_reply(%s) = %d", name, ok);
    if (!ok) {
        check_refused(req, name);
    } else if (!absent) {
        char buf[UTIL_TIME_LEN];
        int64_t back = -1;
        FUZZ_CHECK(t == ref && t >= 0 && t <= TIME_MAX,
                   "time %s parsed to %lld, outside 1970..9999",
                   json_string_value(v), (long long)t);
        FUZZ_CHECK(util_time_parse(util_time_format(t, buf), &back) == 0 &&
                       back == t,
                   "time %lld does not survive format and parse", (long long)t);
    }

    FUZZ_CHECK(body_has(req, name) == !absent, "body_has(%s)", name);
}

static void run_validators(unsigned k, const char *body, size_t len)
{
    struct request req = {0};
    json_t *ref;
    const char *key;
    json_t *m;

    /* As http.c keeps it: a NUL-terminated copy (NULL when empty). */
    if (len) {
        req.body = xmalloc(len + 1);
        memcpy(req.body, body, len);
        req.body[len] = '\0';
        req.body_len = len;
    }
    ref = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (!body_object_or_reply(&req)) {
        FUZZ_CHECK(!json_is_object(ref), "an object body refused");
        FUZZ_CHECK(req.status == 400, "a refused body answered %u", req.status);
        goto out;
    }
    FUZZ_CHECK(json_is_object(ref) && json_equal(ref, req.json),
               "body_object_or_reply parsed something else");
    check_strings(req.json);
    /* The service passes short constant names ("phone", "beginTime"); a
     * name past 64 bytes could be cut mid-character in the 160-byte
     * message, which no caller can cause. */
    json_object_foreach(req.json, key, m)
    {
        if (strlen(key) <= 64)
            check_validators(&req, key, k);
    }
    check_validators(&req, "absent", k);
out:
    json_decref(ref);
    request_clear(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body;
    size_t len;

    if (size < 1)
        return 0;
    /* Exactly the body's bytes, so ASan sees any over-read. */
    len = size - 1;
    body = xmalloc(len ? len : 1);
    memcpy(body, data + 1, len);
    if (data[0] % 4 < 3)
        run_endpoint(data[0] % 4, body, len);
    else
        run_validators(data[0] >> 2, body, len);
    free(body);
    return 0;
}
