/*
 * test_lock_url.c - unit tests of the lock URL parser (lock/url.c) and of
 * the checks lock_client_open() makes before any I/O: schemes, host lists,
 * IPv6 literals, credentials, query settings and every malformed form.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lock/internal.h"

static void test_single_redis(void **state)
{
    struct lock_url u;
    char err[160];

    (void)state;
    assert_int_equal(
        0, lock__url_parse("redis://127.0.0.1:16379/1", &u, err, sizeof(err)));
    assert_string_equal("redis", u.scheme);
    assert_int_equal(1, u.nhosts);
    assert_string_equal("127.0.0.1", u.hosts[0].host);
    assert_int_equal(16379, u.hosts[0].port);
    assert_string_equal("1", u.path);
    assert_int_equal(0, u.has_pass);
    assert_int_equal(0, u.timeout_ms);
}

static void test_credentials_and_hosts(void **state)
{
    struct lock_url u;
    char err[160];

    (void)state;
    assert_int_equal(0, lock__url_parse("redlock://bob:s3cr:t@a:1,b,[::1]:3/2"
                                        "?timeout_ms=50&session_ms=4000",
                                        &u, err, sizeof(err)));
    assert_string_equal("bob", u.user);
    assert_string_equal("s3cr:t", u.pass);
    assert_int_equal(1, u.has_pass);
    assert_int_equal(3, u.nhosts);
    assert_string_equal("a", u.hosts[0].host);
    assert_int_equal(1, u.hosts[0].port);
    assert_string_equal("b", u.hosts[1].host);
    assert_int_equal(0, u.hosts[1].port); /* the backend's default */
    assert_string_equal("::1", u.hosts[2].host);
    assert_int_equal(3, u.hosts[2].port);
    assert_string_equal("2", u.path);
    assert_int_equal(50, u.timeout_ms);
    assert_int_equal(4000, u.session_ms);

    /* Password only, as redis://:pass@host. */
    assert_int_equal(0, lock__url_parse("redis://:pw@h", &u, err, sizeof(err)));
    assert_string_equal("", u.user);
    assert_string_equal("pw", u.pass);
    assert_int_equal(1, u.has_pass);

    /* A ZooKeeper root path keeps its inner slashes. */
    assert_int_equal(
        0, lock__url_parse("zookeeper://z:2181/a/b", &u, err, sizeof(err)));
    assert_string_equal("a/b", u.path);
}

/* ?replicas=N: how many replicas an acquire waits for; 0 is off. */
static void test_replicas(void **state)
{
    struct lock_url u;
    char err[160];

    (void)state;
    assert_int_equal(0, lock__url_parse("redis://h:1/0", &u, err, sizeof(err)));
    assert_int_equal(0, u.replicas);
    assert_int_equal(
        0, lock__url_parse("redis://h:1/0?replicas=2", &u, err, sizeof(err)));
    assert_int_equal(2, u.replicas);
    assert_int_equal(0, u.timeout_ms);
    assert_int_equal(0, lock__url_parse("redis://h:1/3?timeout_ms=50&"
                                        "replicas=1",
                                        &u, err, sizeof(err)));
    assert_int_equal(1, u.replicas);
    assert_int_equal(50, u.timeout_ms);
    assert_string_equal("3", u.path);
    assert_int_equal(0, lock__url_parse("redis://h?replicas=0&replicas=64", &u,
                                        err, sizeof(err)));
    assert_int_equal(64, u.replicas);
}

static void test_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "redis",
        "://host",
        "redis://",
        "redis:///1",
        "redis://h:",
        "redis://h:0",
        "redis://h:65536",
        "redis://h:12ab",
        "redis://h,",
        "redis://h,,k",
        "redis://[::1",
        "redis://[::1]x",
        "redis://h?timeout_ms",
        "redis://h?timeout_ms=0",
        "redis://h?timeout_ms=abc",
        "redis://h?timeout_ms=3600001",
        "redis://h?bogus=1",
        "redis://h?replicas",
        "redis://h?replicas=",
        "redis://h?replicas=-1",
        "redis://h?replicas=65",
        "redis://h?replicas=1x",
        "redis://h?timeout_ms=10&replicas=2&replicas",
        "redlock://a,b,c,d,e,f,g,h,i,j",
        "averyveryverylongscheme://h",
    };
    struct lock_url u;
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (lock__url_parse(bad[i], &u, err, sizeof(err)) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
        if (!err[0])
            fail_msg("no reason for \"%s\"", bad[i]);
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
        /* Replica confirmation is a single Redis server's. */
        "redlock://a:1,b:2,c:3/0?replicas=1",
        "mysql://u:p@h:1/db?replicas=1",
        "zookeeper://h:1/locks?replicas=1",
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
        cmocka_unit_test(test_single_redis),
        cmocka_unit_test(test_credentials_and_hosts),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_client_open_refuses),
        cmocka_unit_test(test_kinds_offline),
    };
    return cmocka_run_group_tests_name("lock_url", tests, NULL, NULL);
}
