/*
 * test_url.c - unit tests of the one URL parser (common/url.h) and of the
 * Redis server a URL names (common/redis.h): every kind of URL the
 * service takes, decoded the same way, and every malformed form refused
 * with a reason.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/redis.h"
#include "common/url.h"

struct good {
    const char *in;
    const char *scheme, *user, *pass;
    int has_pass;
    int nhosts;
    const char *host0;
    unsigned port0;
    const char *host_last;
    unsigned port_last;
    const char *path;
};

static void test_good(void **state)
{
    static const struct good cases[] = {
        /* the store's URLs */
        {"mysql://seckill:seckill@127.0.0.1:13306/seckill", "mysql", "seckill",
         "seckill", 1, 1, "127.0.0.1", 13306, "127.0.0.1", 13306, "seckill"},
        {"redis://127.0.0.1:16379/1", "redis", "", "", 0, 1, "127.0.0.1", 16379,
         "127.0.0.1", 16379, "1"},
        {"redis://h", "redis", "", "", 0, 1, "h", 0, "h", 0, ""},
        /* percent-escapes, the same in every part and every scheme */
        {"redis://:p%40ss@h:6379/0", "redis", "", "p@ss", 1, 1, "h", 6379, "h",
         6379, "0"},
        {"redis://app:p%3As%2Fs%25@h", "redis", "app", "p:s/s%", 1, 1, "h", 0,
         "h", 0, ""},
        {"mysql://us%40r:p%3Ass@[::1]/shop", "mysql", "us@r", "p:ss", 1, 1,
         "::1", 0, "::1", 0, "shop"},
        {"redlock://:p%40ss@a:1,b:2,c:3/2", "redlock", "", "p@ss", 1, 3, "a", 1,
         "c", 3, "2"},
        {"zookeeper://z1:2181,z2:2182/seckill%2Dlocks/x", "zookeeper", "", "",
         0, 2, "z1", 2181, "z2", 2182, "seckill-locks/x"},
        /* an '@' in the password: the user info ends at the last '@' */
        {"redis://:p@ss@h", "redis", "", "p@ss", 1, 1, "h", 0, "h", 0, ""},
        /* an empty password is still a password */
        {"redis://user:@h", "redis", "user", "", 1, 1, "h", 0, "h", 0, ""},
        {"redis://[::1]:7000", "redis", "", "", 0, 1, "::1", 7000, "::1", 7000,
         ""},
    };
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct good *c = &cases[i];
        struct url u;

        if (url_parse(c->in, &u, err, sizeof(err)))
            fail_msg("refused \"%s\": %s", c->in, err);
        assert_string_equal(c->scheme, u.scheme);
        assert_string_equal(c->user, u.user);
        assert_string_equal(c->pass, u.pass);
        assert_int_equal(c->has_pass, u.has_pass);
        assert_int_equal(c->nhosts, u.nhosts);
        assert_string_equal(c->host0, u.hosts[0].host);
        assert_int_equal(c->port0, u.hosts[0].port);
        assert_string_equal(c->host_last, u.hosts[u.nhosts - 1].host);
        assert_int_equal(c->port_last, u.hosts[u.nhosts - 1].port);
        assert_string_equal(c->path, u.path);
    }
}

/* The path's segments, each decoded on its own. */
static void test_segments(void **state)
{
    static const struct {
        const char *in;
        int nsegs;
        const char *segs[URL_SEGS_MAX];
    } cases[] = {
        {"redis://h", 0, {NULL}},
        {"redis://h/", 0, {NULL}},
        {"redis://h/1", 1, {"1"}},
        {"redis-sentinel://a,b,c/mymaster", 1, {"mymaster"}},
        {"redis-sentinel://a,b,c/mymaster/2", 2, {"mymaster", "2"}},
        {"redis-sentinel://a/my%2Fmaster/2", 2, {"my/master", "2"}},
        {"redis-sentinel://a/m/", 2, {"m", ""}},
        {"zookeeper://z/seckill%2Dlocks/x?session_ms=9",
         2,
         {"seckill-locks", "x"}},
        {"zookeeper://z/a/b/c/d", 4, {"a", "b", "c", "d"}},
        /* Too many to split: the path is still there whole. */
        {"zookeeper://z/a/b/c/d/e", -1, {NULL}},
    };
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct url u;

        if (url_parse(cases[i].in, &u, err, sizeof(err)))
            fail_msg("refused \"%s\": %s", cases[i].in, err);
        if (u.nsegs != cases[i].nsegs)
            fail_msg("\"%s\": %d segments, want %d", cases[i].in, u.nsegs,
                     cases[i].nsegs);
        for (int k = 0; k < u.nsegs; k++)
            assert_string_equal(cases[i].segs[k], u.segs[k]);
    }
}

/* redis-sentinel:// URLs: every host a sentinel, the path the master. */
static void test_sentinel(void **state)
{
    static const struct {
        const char *in;
        const char *master, *user, *pass;
        unsigned db;
    } good[] = {
        {"redis-sentinel://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/"
         "mymaster",
         "mymaster", NULL, NULL, 0},
        {"redis-sentinel://s1,s2,s3/mymaster/3", "mymaster", NULL, NULL, 3},
        {"redis-sentinel://:p%40ss@s1/seckill-main/15", "seckill-main", NULL,
         "p@ss", 15},
        {"redis-sentinel://app:pw@[::1]:26379/m", "m", "app", "pw", 0},
        {"redis-sentinel://s/my%2Fmaster", "my/master", NULL, NULL, 0},
    };
    static const char *const bad[] = {
        "redis-sentinel://s1,s2",          /* no master */
        "redis-sentinel://s1/",            /* an empty master */
        "redis-sentinel://s1/m/16",        /* no database 16 */
        "redis-sentinel://s1/m/x",         /* not a number */
        "redis-sentinel://s1/m/1/2",       /* too many segments */
        "redis-sentinel://s1/my%20master", /* a space in the name */
        "redis-sentinel://user@s1/m",      /* a user without a password */
    };
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct url u;
        struct redis_server s;

        if (url_parse(good[i].in, &u, err, sizeof(err)))
            fail_msg("refused \"%s\": %s", good[i].in, err);
        if (redis_server_from_url(&u, 0, &s, err, sizeof(err)))
            fail_msg("no server in \"%s\": %s", good[i].in, err);
        assert_non_null(s.sentinel);
        assert_string_equal(good[i].master, s.host);
        assert_int_equal(0, s.port);
        if (good[i].user)
            assert_string_equal(good[i].user, s.user);
        else
            assert_null(s.user);
        if (good[i].pass)
            assert_string_equal(good[i].pass, s.pass);
        else
            assert_null(s.pass);
        assert_int_equal(good[i].db, s.db);
        assert_int_equal(0, redis_server_epoch(&s));
        /* Only host 0: the others are sentinels, not servers. */
        if (u.nhosts > 1) {
            struct redis_server other;
            assert_int_equal(-EINVAL, redis_server_from_url(&u, 1, &other, err,
                                                            sizeof(err)));
        }
        redis_server_release(&s);
        assert_null(s.sentinel);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct url u;
        struct redis_server s;

        if (url_parse(bad[i], &u, err, sizeof(err)))
            continue; /* refused by the grammar already */
        err[0] = '\0';
        if (redis_server_from_url(&u, 0, &s, err, sizeof(err)) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
        if (!err[0])
            fail_msg("no reason for \"%s\"", bad[i]);
        assert_null(s.sentinel);
    }
    /* A plain server has no sentinel and never changes epoch. */
    {
        struct url u;
        struct redis_server s;

        assert_int_equal(0, url_parse("redis://h/1", &u, err, sizeof(err)));
        assert_int_equal(0, redis_server_from_url(&u, 0, &s, err, sizeof(err)));
        assert_null(s.sentinel);
        assert_int_equal(0, redis_server_epoch(&s));
        redis_server_release(&s);
    }
}

static void test_query(void **state)
{
    struct url u;
    char err[160];

    (void)state;
    assert_int_equal(0, url_parse("redis://h/1?timeout_ms=50&x=a%26b", &u, err,
                                  sizeof(err)));
    assert_int_equal(2, u.nquery);
    assert_string_equal("50", url_query_get(&u, "timeout_ms"));
    assert_string_equal("a&b", url_query_get(&u, "x"));
    assert_null(url_query_get(&u, "session_ms"));
    assert_string_equal("1", u.path);
    /* A query without a path. */
    assert_int_equal(
        0, url_parse("zookeeper://h:1?session_ms=9", &u, err, sizeof(err)));
    assert_string_equal("", u.path);
    assert_string_equal("9", url_query_get(&u, "session_ms"));
}

static void test_bad(void **state)
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
        "redis://:p%4@h",    /* a truncated escape */
        "redis://:p%zz@h",   /* not hex */
        "redis://:p%00ss@h", /* NUL */
        "redis://h/%",       /* in the path too */
        "redis://h%41",      /* hosts are not decoded */
        "redis://h?timeout_ms",
        "redis://h?=1",
        "redis://h?a=1&a=2",
        "redlock://a,b,c,d,e,f,g,h,i,j",
        "averyveryverylongscheme://h",
    };
    struct url u;
    char err[160];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        if (url_parse(bad[i], &u, err, sizeof(err)) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
        if (!err[0])
            fail_msg("no reason for \"%s\"", bad[i]);
        if (strstr(err, "p%") || strstr(err, "ss@"))
            fail_msg("the reason repeats the password: %s", err);
    }
}

static void test_decode(void **state)
{
    char out[8];

    (void)state;
    assert_int_equal(0, url_decode("a%41%2f", 7, out, sizeof(out)));
    assert_string_equal("aA/", out);
    assert_int_equal(0, url_decode("", 0, out, sizeof(out)));
    assert_string_equal("", out);
    assert_int_equal(-EINVAL, url_decode("%4", 2, out, sizeof(out)));
    assert_int_equal(-EINVAL, url_decode("12345678", 8, out, sizeof(out)));
    assert_int_equal(0, url_decode("1234567", 7, out, sizeof(out)));
}

static void test_redis_server(void **state)
{
    struct url u;
    struct redis_server s;
    char err[160];

    (void)state;
    assert_int_equal(
        0, url_parse("redis://app:p%40ss@h:7000/3", &u, err, sizeof(err)));
    assert_int_equal(0, redis_server_from_url(&u, 0, &s, err, sizeof(err)));
    assert_string_equal("h", s.host);
    assert_int_equal(7000, s.port);
    assert_string_equal("app", s.user);
    assert_string_equal("p@ss", s.pass);
    assert_int_equal(3, s.db);

    assert_int_equal(0, url_parse("redis://h", &u, err, sizeof(err)));
    assert_int_equal(0, redis_server_from_url(&u, 0, &s, err, sizeof(err)));
    assert_int_equal(6379, s.port);
    assert_null(s.user);
    assert_null(s.pass);
    assert_int_equal(0, s.db);

    /* Password only; an empty one is sent as it is. */
    assert_int_equal(0, url_parse("redis://:@h", &u, err, sizeof(err)));
    assert_int_equal(0, redis_server_from_url(&u, 0, &s, err, sizeof(err)));
    assert_null(s.user);
    assert_string_equal("", s.pass);

    static const char *const bad[] = {"redis://h/x", "redis://h/16",
                                      "redis://h/-1", "redis://user@h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(0, url_parse(bad[i], &u, err, sizeof(err)));
        if (redis_server_from_url(&u, 0, &s, err, sizeof(err)) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),         cmocka_unit_test(test_query),
        cmocka_unit_test(test_bad),          cmocka_unit_test(test_decode),
        cmocka_unit_test(test_redis_server), cmocka_unit_test(test_segments),
        cmocka_unit_test(test_sentinel),
    };
    return cmocka_run_group_tests_name("url", tests, NULL, NULL);
}
