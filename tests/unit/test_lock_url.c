/*
 * test_lock_url.c - unit tests of a lock URL's own settings (lock/url.c;
 * the grammar itself is common/url.h's, tested in test_url.c) and of the
 * checks lock_client_open() makes before any I/O: schemes, host counts,
 * databases, query settings.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lock/internal.h"

/* The query settings a lock URL may carry, and nothing else. */
static void test_settings(void **state)
{
    static const struct {
        const char *in;
        int ok;
        uint32_t timeout_ms, session_ms;
    } cases[] = {
        {"redis://127.0.0.1:16379/1", 1, 0, 0},
        {"redlock://a:1,b,[::1]:3/2?timeout_ms=50&session_ms=4000", 1, 50,
         4000},
        {"zookeeper://z:2181/a/b?session_ms=3600000", 1, 0, 3600000},
        {"redis://h?timeout_ms=0", 0, 0, 0},
        {"redis://h?timeout_ms=abc", 0, 0, 0},
        {"redis://h?timeout_ms=3600001", 0, 0, 0},
        {"redis://h?timeout_ms=-1", 0, 0, 0},
        {"redis://h?bogus=1", 0, 0, 0},
    };
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct url u;
        uint32_t t = 7, s = 7;

        assert_int_equal(0, url_parse(cases[i].in, &u, err, sizeof(err)));
        err[0] = '\0';
        int rc = lock__url_settings(&u, &t, &s, err, sizeof(err));
        if (cases[i].ok) {
            if (rc)
                fail_msg("refused \"%s\": %s", cases[i].in, err);
            assert_int_equal(cases[i].timeout_ms, t);
            assert_int_equal(cases[i].session_ms, s);
        } else if (rc != -EINVAL || !err[0]) {
            fail_msg("accepted \"%s\"", cases[i].in);
        }
    }
}

/* What lock_client_open() refuses before connecting to anything. */
static void test_client_open_refuses(void **state)
{
    static const char *const bad[] = {
        "nosuch://h:1",
        "redis://h:1/notadb",
        "redis://a:1,b:2",         /* one server only */
        "redlock://a:1,b:2",       /* RedLock needs at least three */
        "redlock://a:1,b:2,c:3/x", /* database must be a number */
        "redis://:p%4@h",          /* a bad percent-escape */
        "redis://h?timeout_ms=0",
        "zookeeper://h?bogus=1",
        "redis-sentinel://s1,s2,s3",     /* no master's name */
        "redis-sentinel://s1/m/99",      /* no such database */
        "redis-sentinel://s1/m?bogus=1", /* an unknown setting */
    };
    struct lock_client *c = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (lock_client_open(bad[i], NULL, &c) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
    assert_int_equal(-EINVAL, lock_client_open(NULL, NULL, &c));

    /* Valid URLs open without any server: connections are lazy. */
    assert_int_equal(0, lock_client_open("redis://127.0.0.1:1/0", NULL, &c));
    assert_string_equal("redis", lock_client_backend(c));
    struct lock *l = NULL;
    assert_int_equal(-EINVAL, lock_new(c, "", &l));
    char longname[LOCK_NAME_MAX + 2];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(-EINVAL, lock_new(c, longname, &l));
    longname[LOCK_NAME_MAX] = '\0';
    assert_int_equal(0, lock_new(c, longname, &l));
    assert_int_equal(32, strlen(lock_owner(l)));
    assert_int_equal(0, lock_holds(l));
    assert_int_equal(0, lock_fence(l));
    int held = 1;
    assert_int_equal(-ENOLCK, lock_release(l, &held));
    lock_free(l);
    lock_client_close(c);

    /* A Redis found through its sentinels is the redis backend. */
    assert_int_equal(0, lock_client_open("redis-sentinel://127.0.0.1:1,"
                                         "127.0.0.1:2,127.0.0.1:3/main/1",
                                         NULL, &c));
    assert_string_equal("redis", lock_client_backend(c));
    lock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_client_open_refuses),
    };
    return cmocka_run_group_tests_name("lock_url", tests, NULL, NULL);
}
