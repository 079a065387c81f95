/*
 * test_readme.c - the README's curl walk-through, run as a new user would
 * run it (bash, curl, jq, build/seckilld token), against a test instance.
 * Only the address is changed, from :8080 to the test instance's port.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "tests/it/harness.h"

#define BEGIN_MARK "<!-- walkthrough:begin -->"
#define END_MARK "<!-- walkthrough:end -->"

static struct it_server srv;

static int setup(void **state)
{
    redisContext *rc;
    redisReply *r;

    (void)state;
    it_init();
    /* A new user's first run: the walk-through's phone has asked for no
     * code yet (other tests use the same number from the same address,
     * which gets one code a minute for it). */
    rc = it_redis_connect();
    r = redisCommand(rc, "KEYS login:{p:+8613800138000}:*");
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements;
         i++)
        freeReplyObject(redisCommand(rc, "DEL %s", r->element[i]->str));
    freeReplyObject(r);
    redisFree(rc);
    /* As a new user runs it: every setting at its default, the proof of
     * work too. */
    static const char *const env[] = {"SECKILL_POW_MAXNUMBER", NULL};
    return it_server_start(&srv, "readme", env);
}

/* A safety net only: cmocka ignores a failing group teardown. */
static int teardown(void **state)
{
    (void)state;
    it_server_stop(&srv);
    return 0;
}

/* Last: SIGTERM stops the instance cleanly (exit 0, no leaks under ASan). */
static void test_clean_shutdown(void **state)
{
    (void)state;
    assert_int_equal(0, it_server_stop(&srv));
}

/* The shell lines between the markers, with the ``` fences dropped. */
static char *walkthrough(void)
{
    FILE *f = fopen("README.md", "r");
    char line[1024];
    size_t cap = 1 << 16, len = 0;
    char *out = calloc(1, cap);
    int in = 0;

    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, BEGIN_MARK, strlen(BEGIN_MARK)) == 0) {
            in = 1;
            continue;
        }
        if (strncmp(line, END_MARK, strlen(END_MARK)) == 0)
            break;
        if (!in || strncmp(line, "```", 3) == 0)
            continue;
        size_t n = strlen(line);
        assert_true(len + n < cap);
        memcpy(out + len, line, n);
        len += n;
    }
    fclose(f);
    assert_true(in);
    assert_true(len > 0);
    return out;
}

static void test_walkthrough(void **state)
{
    char *script = walkthrough(), *out = NULL, *fixed, *p;
    char addr[64];
    (void)state;

    /* Point the walk-through at the test instance. */
    p = strstr(script, "127.0.0.1:8080");
    assert_non_null(p);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", srv.port);
    fixed = malloc(strlen(script) + 16);
    memcpy(fixed, script, (size_t)(p - script));
    strcpy(fixed + (p - script), addr);
    strcat(fixed, p + strlen("127.0.0.1:8080"));
    assert_null(strstr(fixed, ":8080"));

    char *argv[] = {"/bin/bash", "-euo", "pipefail", "-c", fixed, NULL};
    int status = it_run_capture(argv, &out);
    printf("%s", out ? out : "");
    assert_int_equal(status, 0);
    assert_non_null(out);
    /* The voucher, the second purchase's 409, the order, my orders, the
     * payment and the stats. */
    assert_non_null(strstr(out, "\"type\":\"seckill\""));
    assert_non_null(strstr(out, "\"stock\":100"));
    assert_non_null(strstr(out, "ALREADY_PURCHASED"));
    assert_non_null(strstr(out, "\"status\":\"unpaid\""));
    assert_non_null(strstr(out, "\"payDeadline\":\""));
    assert_non_null(strstr(out, "{\"items\":[{"));
    /* Paid, and the stats count it. */
    assert_non_null(strstr(out, "\"status\":\"paid\""));
    assert_non_null(strstr(out, "\"initialStock\":100"));
    assert_non_null(strstr(out, "\"paid\":1"));
    free(out);
    free(fixed);
    free(script);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walkthrough),
        cmocka_unit_test(test_clean_shutdown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
