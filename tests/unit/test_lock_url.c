/*
 * test_lock_url.c - unit tests of a lock URL's own settings (lock/url.c;
 * the grammar itself is common/url.h's, tested in test_url.c) and of the
 * checks lock_client_open() makes before any I/O: schemes, host counts,
 * databases, query settings; and the lock kinds' constructors and the
 * multi-lock's checks, which need no server either.
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
        uint32_t timeout_ms, session_ms, replicas;
    } cases[] = {
        {"redis://127.0.0.1:16379/1", 1, 0, 0, 0},
        {"redlock://a:1,b,[::1]:3/2?timeout_ms=50&session_ms=4000", 1, 50, 4000,
         0},
        {"zookeeper://z:2181/a/b?session_ms=3600000", 1, 0, 3600000, 0},
        {"redis://h?timeout_ms=0", 0, 0, 0, 0},
        {"redis://h?timeout_ms=abc", 0, 0, 0, 0},
        {"redis://h?timeout_ms=3600001", 0, 0, 0, 0},
        {"redis://h?timeout_ms=-1", 0, 0, 0, 0},
        {"redis://h?bogus=1", 0, 0, 0, 0},
        /* ?replicas=N: how many replicas an acquire waits for; 0 is off. */
        {"redis://h:1/0?replicas=2", 1, 0, 0, 2},
        {"redis://h:1/3?timeout_ms=50&replicas=1", 1, 50, 0, 1},
        {"redis://h?replicas=0", 1, 0, 0, 0},
        {"redis://h?replicas=64", 1, 0, 0, 64},
        {"redis://h?replicas=0&replicas=64", 0, 0, 0, 0},
        {"redis-sentinel://s1,s2,s3/m/1?replicas=1", 1, 0, 0, 1},
        {"redis://h?replicas", 0, 0, 0, 0},
        {"redis://h?replicas=", 0, 0, 0, 0},
        {"redis://h?replicas=-1", 0, 0, 0, 0},
        {"redis://h?replicas=65", 0, 0, 0, 0},
        {"redis://h?replicas=1x", 0, 0, 0, 0},
        {"redis://h?timeout_ms=10&replicas=2&replicas", 0, 0, 0, 0},
        /* Replica confirmation is a single Redis server's. */
        {"redlock://a:1,b:2,c:3/0?replicas=1", 0, 0, 0, 0},
        /* A cluster: no one server to WAIT for either. */
        {"redis-cluster://a:1,b:2,c:3?timeout_ms=50", 1, 50, 0, 0},
        {"redis-cluster://a:1,b:2,c:3?replicas=1", 0, 0, 0, 0},
        {"mysql://u:p@h:1/db?replicas=0", 0, 0, 0, 0},
        {"zookeeper://h:1/locks?replicas=1", 0, 0, 0, 0},
    };
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct url u;
        struct lock_url_settings set = {7, 7, 7};

        /* Some bad settings are already bad grammar ("?replicas"). */
        if (url_parse(cases[i].in, &u, err, sizeof(err))) {
            if (cases[i].ok)
                fail_msg("url_parse refused \"%s\": %s", cases[i].in, err);
            continue;
        }
        err[0] = '\0';
        int rc = lock__url_settings(&u, &set, err, sizeof(err));
        if (cases[i].ok) {
            if (rc)
                fail_msg("refused \"%s\": %s", cases[i].in, err);
            assert_int_equal(cases[i].timeout_ms, set.timeout_ms);
            assert_int_equal(cases[i].session_ms, set.session_ms);
            assert_int_equal(cases[i].replicas, set.replicas);
        } else if (rc != -EINVAL || !err[0]) {
            fail_msg("accepted \"%s\"", cases[i].in);
        }
    }
}

/* What lock_client_open() refuses before connecting to anything. */
static void test_client_open_refuses(void **state)
{
    static const char *const bad[] = {
        "nosuch://h:1", "redis://h:1/notadb",
        "redis://a:1,b:2",         /* one server only */
        "redlock://a:1,b:2",       /* RedLock needs at least three */
        "redlock://a:1,b:2,c:3/x", /* database must be a number */
        "redis://:p%4@h",          /* a bad percent-escape */
        "redis://h?timeout_ms=0", "zookeeper://h?bogus=1",
        "redis-sentinel://s1,s2,s3",     /* no master's name */
        "redis-sentinel://s1/m/99",      /* no such database */
        "redis-sentinel://s1/m?bogus=1", /* an unknown setting */
        /* Replica confirmation is a single Redis server's. */
        "redlock://a:1,b:2,c:3/0?replicas=1", "mysql://u:p@h:1/db?replicas=1",
        "zookeeper://h:1/locks?replicas=1",
        "redis-cluster://a:1,b:2?replicas=1",
        "redis-cluster://a:1,b:2/1", /* a cluster has only database 0 */
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

    /* So is a Redis Cluster named by some of its nodes. */
    assert_int_equal(0, lock_client_open("redis-cluster://127.0.0.1:1,"
                                         "127.0.0.1:2,127.0.0.1:3",
                                         NULL, &c));
    assert_string_equal("redis", lock_client_backend(c));
    assert_int_equal(0, lock_new(c, "x", &l));
    lock_free(l);
    lock_client_close(c);
}

/* The kinds' constructors and the multi-lock's checks: all before any
 * I/O, so no server is needed. */
static void test_kinds_offline(void **state)
{
    static const char *const refuse[] = {
        "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0",
        "mysql://u:p@127.0.0.1:1/db",
    };
    struct lock_client *c = NULL, *z = NULL;
    struct lock *f = NULL, *r = NULL, *w = NULL, *s = NULL, *m = NULL,
                *m2 = NULL;
    enum lock_status st;
    int held = 1;

    (void)state;
    for (size_t i = 0; i < sizeof(refuse) / sizeof(refuse[0]); i++) {
        assert_int_equal(0, lock_client_open(refuse[i], NULL, &c));
        assert_int_equal(-ENOTSUP, lock_fair_new(c, "x", &f));
        assert_int_equal(-ENOTSUP, lock_rw_new(c, "x", &r, &w));
        assert_int_equal(-ENOTSUP, lock_semaphore_new(c, "x", 2, &s));
        assert_null(f);
        assert_null(r);
        assert_null(s);
        assert_int_equal(0, lock_new(c, "x", &m));
        assert_int_equal(LOCK_KIND_MUTEX, lock_kind(m));
        lock_free(m);
        lock_client_close(c);
    }

    assert_int_equal(0,
                     lock_client_open("zookeeper://127.0.0.1:1/l", NULL, &z));
    assert_int_equal(0, lock_fair_new(z, "x", &f));
    assert_int_equal(LOCK_KIND_FAIR, lock_kind(f));
    lock_free(f);
    lock_client_close(z);

    assert_int_equal(0, lock_client_open("redis://127.0.0.1:1/0", NULL, &c));
    assert_int_equal(-EINVAL, lock_fair_new(c, "", &f));
    assert_int_equal(-EINVAL, lock_rw_new(c, "x", NULL, &w));
    assert_int_equal(-EINVAL, lock_semaphore_new(c, "x", 0, &s));
    assert_int_equal(-EINVAL,
                     lock_semaphore_new(c, "x", LOCK_PERMITS_MAX + 1, &s));
    assert_int_equal(0, lock_semaphore_new(c, "x", LOCK_PERMITS_MAX, &s));
    assert_int_equal(LOCK_KIND_SEMAPHORE, lock_kind(s));
    /* The two sides of a read-write lock are one owner. */
    assert_int_equal(0, lock_rw_new(c, "x", &r, &w));
    assert_int_equal(LOCK_KIND_READ, lock_kind(r));
    assert_int_equal(LOCK_KIND_WRITE, lock_kind(w));
    assert_string_equal(lock_owner(r), lock_owner(w));
    assert_int_equal(0, lock_new(c, "x", &m));
    assert_int_equal(0, lock_new(c, "x", &m2));
    assert_string_not_equal(lock_owner(m), lock_owner(m2));

    /* Sets that can never be held. */
    struct lock *none[] = {NULL}, *twice[] = {m, r, m}, *twins[] = {m, m2},
                *mixed[] = {r, m, w}, *big[LOCK_MULTI_MAX + 1];
    assert_int_equal(-EINVAL, lock_multi_acquire(twice, 0, 0, 1000, &st));
    assert_int_equal(-EINVAL, lock_multi_acquire(none, 1, 0, 1000, &st));
    assert_int_equal(-EINVAL, lock_multi_acquire(twice, 3, 0, 1000, &st));
    assert_int_equal(-EINVAL, lock_multi_acquire(twins, 2, 0, 1000, &st));
    for (size_t i = 0; i < LOCK_MULTI_MAX + 1; i++)
        big[i] = m;
    assert_int_equal(-EINVAL,
                     lock_multi_acquire(big, LOCK_MULTI_MAX + 1, 0, 1000, &st));
    assert_int_equal(-EINVAL, lock_multi_acquire(mixed, 3, 0, 1000, NULL));
    /* The batch calls (the purchase engine's) take mutexes only. */
    struct lock *not_mutexes[] = {m, s};
    enum lock_status bst[2];
    int berr[2];
    assert_int_equal(-EINVAL,
                     lock_acquire_many(not_mutexes, 2, 1000, bst, berr));
    /* Releasing a set nobody holds: -ENOLCK, not held. */
    assert_int_equal(-ENOLCK, lock_multi_release(mixed, 3, &held));
    assert_int_equal(0, held);
    assert_int_equal(0, lock_release_pending(m));

    /* Either side of a read-write lock can go first. */
    lock_free(w);
    lock_free(r);
    lock_free(s);
    lock_free(m);
    lock_free(m2);
    lock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_client_open_refuses),
        cmocka_unit_test(test_kinds_offline),
    };
    return cmocka_run_group_tests_name("lock_url", tests, NULL, NULL);
}
