/*
 * test_pow.c - the proof of work before a login code, across instances:
 * a challenge from GET /api/pow, solved, buys one code on any instance,
 * once; a missing, altered, expired, reused or foreign solution is 403
 * POW_REQUIRED with a fresh challenge, and no code is stored (checked in
 * Redis). `seckilld pow` solves what the API hands out.
 *
 * A and B: maxnumber 1000, challenges good for 2 s. C: another secret.
 * D: no proof of work asked.
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
#include <sodium.h>

#include "common/pow.h"
#include "tests/it/harness.h"

enum { SRV_A, SRV_B, SRV_C, SRV_D, SRV_COUNT };
static struct it_server srvs[SRV_COUNT];
static struct it_server *const srv_a = &srvs[SRV_A];
static struct it_server *const srv_b = &srvs[SRV_B];
static struct it_server *const srv_c = &srvs[SRV_C];
static struct it_server *const srv_d = &srvs[SRV_D];
static unsigned next_phone;

static int group_setup(void **state)
{
    const char *env[] = {"SECKILL_POW_MAXNUMBER=1000", "SECKILL_POW_TTL_S=2",
                         "SECKILL_CODE_INTERVAL_S=0",
                         "SECKILL_CODE_PER_HOUR=100", NULL};
    const char *env_c[] = {
        "SECKILL_POW_MAXNUMBER=1000", "SECKILL_POW_TTL_S=2",
        "SECKILL_SECRET="
        "0000000000000000000000000000000000000000000000000000000000000001",
        NULL};
    const char *env_d[] = {"SECKILL_POW_MAXNUMBER=0", NULL};

    (void)state;
    it_init();
    next_phone = (unsigned)(util_now_ms() / 10 % 1000000);
    if (it_server_start(srv_a, "pow-a", env) ||
        it_server_start(srv_b, "pow-b", env) ||
        it_server_start(srv_c, "pow-c", env_c) ||
        it_server_start(srv_d, "pow-d", env_d))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srvs, SRV_COUNT);
}

static void fresh_phone(char out[24])
{
    snprintf(out, 24, "+86135%08u", next_phone++ % 100000000u);
}

/* A challenge of srv, as JSON text (free it). */
static char *challenge_of(const struct it_server *srv)
{
    struct it_resp resp;
    char *text;

    it_http(srv, "GET", "/api/pow", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    text = json_dumps(resp.json, JSON_COMPACT);
    it_resp_free(&resp);
    return text;
}

/* A solution of a challenge of srv (free it). */
static char *solved(const struct it_server *srv)
{
    char *chal = challenge_of(srv), *sol = NULL;

    assert_int_equal(0, pow_solve(chal, &sol));
    free(chal);
    return sol;
}

/* POST /api/auth/code for phone with sol (NULL: no header) on srv. */
static long ask(const struct it_server *srv, const char *phone, const char *sol,
                struct it_resp *resp)
{
    char body[64], hdr[POW_SOLUTION_MAX + 32];
    struct it_req req = {.method = "POST", .path = "/api/auth/code"};

    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    req.body = body;
    if (sol) {
        snprintf(hdr, sizeof(hdr), "Seckill-PoW: %s", sol);
        req.header = hdr;
    }
    return it_http_do(srv, &req, resp);
}

static bool code_stored(const char *phone)
{
    redisContext *rc = it_redis_connect();
    redisReply *r = redisCommand(rc, "EXISTS login:{p:%s}:codes", phone);
    bool stored = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;

    freeReplyObject(r);
    redisFree(rc);
    return stored;
}

/* Asks srv for a code with sol and expects 403 POW_REQUIRED with a fresh
 * challenge in error.details; no code stored. */
static void refused(const struct it_server *srv, const char *sol)
{
    char phone[24];
    struct it_resp resp;
    const json_t *d;

    fresh_phone(phone);
    ask(srv, phone, sol, &resp);
    it_assert_error(&resp, 403, "POW_REQUIRED");
    d = json_object_get(json_object_get(resp.json, "error"), "details");
    assert_non_null(d);
    assert_string_equal("SHA-256", it_json_str(d, "algorithm"));
    assert_int_equal(64, strlen(it_json_str(d, "challenge")));
    assert_int_equal(64, strlen(it_json_str(d, "signature")));
    assert_non_null(strstr(it_json_str(d, "salt"), "?expires="));
    assert_int_equal(1000, json_integer_value(json_object_get(d, "maxnumber")));
    it_resp_free(&resp);
    assert_false(code_stored(phone));
}

static void test_pow_good(void **state)
{
    char phone[24], *sol = solved(srv_a);
    struct it_resp resp;

    (void)state;
    fresh_phone(phone);
    ask(srv_a, phone, sol, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    assert_true(code_stored(phone));
    free(sol);
}

/* Good once, on any instance. */
static void test_pow_reused(void **state)
{
    char phone[24], *sol = solved(srv_a);
    struct it_resp resp;

    (void)state;
    fresh_phone(phone);
    ask(srv_b, phone, sol, &resp); /* B takes A's: one key, one secret */
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    refused(srv_b, sol);
    refused(srv_a, sol);
    free(sol);
}

static void test_pow_expired(void **state)
{
    char *sol = solved(srv_a);

    (void)state;
    sleep(3);
    refused(srv_a, sol);
    free(sol);
}

/* Solved for an instance with another secret. */
static void test_pow_foreign(void **state)
{
    char *sol = solved(srv_c);

    (void)state;
    refused(srv_a, sol);
    free(sol);
}

static void test_pow_missing_or_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "x",
        "not base64 at all!",
        "e30",                              /* {} */
        "eyJhbGdvcml0aG0iOiJTSEEtMjU2In0=", /* only the algorithm */
    };

    (void)state;
    refused(srv_a, NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        refused(srv_a, bad[i]);
}

/* One field of a good solution changed: refused. */
static void test_pow_altered(void **state)
{
    char *sol = solved(srv_a), raw[POW_SOLUTION_MAX];
    size_t n = 0;
    json_t *o;

    (void)state;
    assert_int_equal(0, sodium_base642bin((unsigned char *)raw, sizeof(raw) - 1,
                                          sol, strlen(sol), NULL, &n, NULL,
                                          sodium_base64_VARIANT_ORIGINAL));
    raw[n] = '\0';
    free(sol);
    o = json_loads(raw, 0, NULL);
    assert_non_null(o);
    json_object_set_new(
        o, "number",
        json_integer(json_integer_value(json_object_get(o, "number")) ^ 1));
    {
        char *text = json_dumps(o, JSON_COMPACT), *b;
        size_t cap = sodium_base64_ENCODED_LEN(strlen(text),
                                               sodium_base64_VARIANT_ORIGINAL);

        b = malloc(cap);
        sodium_bin2base64(b, cap, (unsigned char *)text, strlen(text),
                          sodium_base64_VARIANT_ORIGINAL);
        refused(srv_a, b);
        free(b);
        free(text);
    }
    json_decref(o);
}

/* Off: no header needed, and the challenge says maxnumber 0. */
static void test_pow_off(void **state)
{
    char phone[24], *chal = challenge_of(srv_d);
    struct it_resp resp;

    (void)state;
    assert_non_null(strstr(chal, "\"maxnumber\":0"));
    free(chal);
    fresh_phone(phone);
    ask(srv_d, phone, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* `seckilld pow` solves a challenge of the API. */
static void test_cli_pow(void **state)
{
    char cmd[512], *out = NULL, phone[24];
    struct it_resp resp;
    FILE *p;
    size_t cap = 0;
    ssize_t n;

    (void)state;
    snprintf(cmd, sizeof(cmd), "curl -s http://127.0.0.1:%u/api/pow | '%s' pow",
             (unsigned)srv_a->port, it_bin());
    p = popen(cmd, "r");
    assert_non_null(p);
    n = getline(&out, &cap, p);
    assert_int_equal(0, pclose(p));
    assert_true(n > 10);
    out[strcspn(out, "\n")] = '\0';
    fresh_phone(phone);
    ask(srv_a, phone, out, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pow_good),
        cmocka_unit_test(test_pow_reused),
        cmocka_unit_test(test_pow_expired),
        cmocka_unit_test(test_pow_foreign),
        cmocka_unit_test(test_pow_missing_or_malformed),
        cmocka_unit_test(test_pow_altered),
        cmocka_unit_test(test_pow_off),
        cmocka_unit_test(test_cli_pow),
    };
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
