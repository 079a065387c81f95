/*
 * test_config.c - settings from the environment and flags: defaults,
 * precedence, URL parsing and one-line errors for bad values; also the
 * abuse limits (rate limits, connection timeout and limits), the purchase
 * settings (batching, stock segments), the sold-out cache's TTL and the
 * CORS origins; and that the table of settings in docs/configuration.md
 * and the man page docs/seckilld.8 are what the settings table says.
 */
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cmd/config.h"
#include "cmd/config_table.h"
#include "common/url.h"

#define SECRET                                                                 \
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static int reset_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < config_settings_count; i++)
        if (config_settings[i].env)
            unsetenv(config_settings[i].env);
    setenv("SECKILL_MYSQL_URL", "mysql://u:p@127.0.0.1:13306/db", 1);
    setenv("SECKILL_REDIS_URL", "redis://127.0.0.1:16379/1", 1);
    setenv("SECKILL_SECRET", SECRET, 1);
    /* Login codes must go somewhere: a webhook, or (here) dev mode. */
    setenv("SECKILL_DEV", "1", 1);
    return 0;
}

static int parse(struct config *cfg, char *err, int argc, ...)
{
    char *argv[16] = {"seckilld"};
    va_list ap;
    va_start(ap, argc);
    for (int i = 1; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return config_parse(cfg, argc, argv, err, 256);
}

/* The same with the flags in an array (argc counts the program). */
static int parse_argv(struct config *cfg, char *err, int argc, char **rest)
{
    char *argv[16] = {"seckilld"};

    for (int i = 1; i < argc && i < 16; i++)
        argv[i] = rest[i - 1];
    return config_parse(cfg, argc, argv, err, 256);
}

static void test_defaults(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.cmd, CMD_SERVE);
    assert_int_equal(c.http.port, 8080);
    assert_string_equal(c.http.bind, "127.0.0.1");
    assert_int_equal(c.http.lock_ttl_ms, 10000);
    assert_true(c.http.dev);
    {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        /* One HTTP thread per core (two at least), two engine threads
         * per core, and a queue that drains in about a second. */
        assert_int_equal(c.http.threads, cores < 2 ? 2 : cores);
        assert_int_equal(c.http.engine_threads, 2 * cores);
        assert_int_equal(c.http.queue_max, 20000);
    }
    assert_int_equal(c.http.async_lookback_s, 3600);
    assert_string_equal(c.http.store.mysql_host, "127.0.0.1");
    assert_int_equal(c.http.store.mysql_port, 13306);
    assert_string_equal(c.http.store.mysql_user, "u");
    assert_string_equal(c.http.store.mysql_pass, "p");
    assert_string_equal(c.http.store.mysql_db, "db");
    assert_string_equal(c.http.store.redis_host, "127.0.0.1");
    assert_int_equal(c.http.store.redis_port, 16379);
    assert_int_equal(c.http.store.redis_db, 1);
    assert_null(c.http.store.redis_pass);
    assert_int_equal(c.http.secret[0], 0x00);
    assert_int_equal(c.http.secret[31], 0xff);
    config_free(&c);
}

static void test_flags_win(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_PORT", "9000", 1);
    setenv("SECKILL_DEV", "0", 1);
    assert_int_equal(parse(&c, err, 8, "--port", "9001", "--threads=3", "--dev",
                           "--lock-ttl-ms", "500", "--bind=::1"),
                     0);
    assert_int_equal(c.http.port, 9001);
    assert_int_equal(c.http.threads, 3);
    assert_true(c.http.dev);
    assert_int_equal(c.http.lock_ttl_ms, 500);
    assert_string_equal(c.http.bind, "::1");
    config_free(&c);
}

static void test_bad_values(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    struct {
        const char *var, *val, *expect;
    } cases[] = {
        {"SECKILL_PORT", "80a", "SECKILL_PORT"},
        {"SECKILL_PORT", "70000", "SECKILL_PORT"},
        {"SECKILL_BIND", "localhost", "SECKILL_BIND"},
        {"SECKILL_SECRET", "abc", "SECKILL_SECRET"},
        {"SECKILL_SECRET", "", "SECKILL_SECRET"},
        {"SECKILL_THREADS", "0", "SECKILL_THREADS"},
        {"SECKILL_LOCK_TTL_MS", "10", "SECKILL_LOCK_TTL_MS"},
        {"SECKILL_DEV", "yes", "SECKILL_DEV"},
        {"SECKILL_ASYNC_LOOKBACK_S", "-1", "SECKILL_ASYNC_LOOKBACK_S"},
        {"SECKILL_ASYNC_LOOKBACK_S", "1h", "SECKILL_ASYNC_LOOKBACK_S"},
        {"SECKILL_MYSQL_URL", "postgres://u:p@h/db", "SECKILL_MYSQL_URL"},
        {"SECKILL_MYSQL_URL", "mysql://u:p@h:1/", "SECKILL_MYSQL_URL"},
        {"SECKILL_MYSQL_URL", "mysql://h/db", "SECKILL_MYSQL_URL"},
        {"SECKILL_MYSQL_URL", "mysql://u:p@h:99999/db", "SECKILL_MYSQL_URL"},
        {"SECKILL_REDIS_URL", "redis://h:1/16", "SECKILL_REDIS_URL"},
        {"SECKILL_REDIS_URL", "redis://:1", "SECKILL_REDIS_URL"},
        {"SECKILL_REDIS_URL", "http://h:1/0", "SECKILL_REDIS_URL"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        reset_env(NULL);
        setenv(cases[i].var, cases[i].val, 1);
        err[0] = '\0';
        assert_int_not_equal(parse(&c, err, 1), 0);
        assert_non_null(strstr(err, cases[i].expect));
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
    reset_env(NULL);
}

static void test_missing(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    unsetenv("SECKILL_MYSQL_URL");
    assert_int_not_equal(parse(&c, err, 1), 0);
    assert_non_null(strstr(err, "SECKILL_MYSQL_URL"));
    config_free(&c);

    /* token needs only the secret. */
    assert_int_equal(parse(&c, err, 4, "token", "--user", "5"), 0);
    assert_int_equal(c.cmd, CMD_TOKEN);
    assert_int_equal(c.token_user, 5);
    config_free(&c);

    unsetenv("SECKILL_SECRET");
    assert_int_not_equal(parse(&c, err, 4, "token", "--user", "5"), 0);
    assert_non_null(strstr(err, "SECKILL_SECRET"));
    config_free(&c);
}

static void test_urls(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_MYSQL_URL", "mysql://us%40r:p%3Ass@[::1]/shop", 1);
    setenv("SECKILL_REDIS_URL", "redis://:s3cret@10.0.0.1", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_string_equal(c.http.store.mysql_user, "us@r");
    assert_string_equal(c.http.store.mysql_pass, "p:ss");
    assert_string_equal(c.http.store.mysql_host, "::1");
    assert_int_equal(c.http.store.mysql_port, 3306);
    assert_string_equal(c.http.store.mysql_db, "shop");
    assert_string_equal(c.http.store.redis_pass, "s3cret");
    assert_null(c.http.store.redis_user);
    assert_int_equal(c.http.store.redis_port, 6379);
    assert_int_equal(c.http.store.redis_db, 0);
    config_free(&c);

    setenv("SECKILL_REDIS_URL", "redis://app:pw@h:1/2", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_string_equal(c.http.store.redis_user, "app");
    assert_string_equal(c.http.store.redis_pass, "pw");
    assert_int_equal(c.http.store.redis_db, 2);
    config_free(&c);

    /* The lock's URL defaults to the Redis URL, and the lock decodes it
     * with the same parser: the same password reaches both. */
    setenv("SECKILL_REDIS_URL", "redis://:p%40ss@h:1/0", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_string_equal(c.http.store.redis_pass, "p@ss");
    assert_string_equal(c.http.lock_url, "redis://:p%40ss@h:1/0");
    struct url u;
    assert_int_equal(url_parse(c.http.lock_url, &u, err, sizeof(err)), 0);
    assert_string_equal(u.pass, "p@ss");
    config_free(&c);

    /* Sentinels: the master's name and database from the path, the
     * sentinels' object made once and released with the config. */
    setenv("SECKILL_REDIS_URL",
           "redis-sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/main/4", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_non_null(c.http.store.redis_sentinel);
    assert_string_equal(c.http.store.redis_host, "main");
    assert_string_equal(c.http.store.redis_pass, "pw");
    assert_int_equal(c.http.store.redis_db, 4);
    assert_string_equal(c.http.lock_url,
                        "redis-sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/"
                        "main/4");
    config_free(&c);
    assert_null(c.http.store.redis_sentinel);
    setenv("SECKILL_REDIS_URL", "redis-sentinel://s1,s2,s3", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "redis-sentinel://"));
    config_free(&c);
    setenv("SECKILL_REDIS_URL", "redis://a:1,b:2/0", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    config_free(&c);
    /* A cluster URL is read as one (a database number refused): its
     * hosts are the store's seeds, and the lock follows it. The async
     * purchase mode is taken on it as on one Redis. */
    setenv("SECKILL_REDIS_URL", "redis-cluster://a:1,b:2/1", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "only database 0"));
    config_free(&c);
    setenv("SECKILL_REDIS_URL", "redis-cluster://:pw@a:1,b:2", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.store.redis_cluster_nseeds, 2);
    assert_string_equal(c.http.store.redis_cluster_seeds[0].host, "a");
    assert_int_equal(c.http.store.redis_cluster_seeds[1].port, 2);
    assert_string_equal(c.http.store.redis_cluster_seeds[1].pass, "pw");
    assert_string_equal(c.http.lock_url, "redis-cluster://:pw@a:1,b:2");
    config_free(&c);
    setenv("SECKILL_PURCHASE_MODE", "async", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.purchase_mode, PURCHASE_ASYNC);
    config_free(&c);
    unsetenv("SECKILL_PURCHASE_MODE");
    setenv("SECKILL_REDIS_URL", "redis://h/2", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.store.redis_cluster_nseeds, 0);
    config_free(&c);

    /* A bad escape is a start-up error naming the setting. */
    setenv("SECKILL_REDIS_URL", "redis://:p%4@h", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_REDIS_URL"));
    config_free(&c);
    reset_env(NULL);
}

static void test_commands(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 2, "--help"), 0);
    assert_int_equal(c.cmd, CMD_HELP);
    config_free(&c);
    assert_int_equal(parse(&c, err, 7, "tokens", "--first", "10", "--count",
                           "3", "--ttl=60"),
                     0);
    assert_int_equal(c.cmd, CMD_TOKENS);
    assert_int_equal(c.tokens_first, 10);
    assert_int_equal(c.tokens_count, 3);
    assert_int_equal(c.token_ttl_s, 60);
    config_free(&c);
    assert_int_equal(parse(&c, err, 5, "token", "--user", "1", "--admin"), 0);
    assert_true(c.token_admin);
    config_free(&c);

    assert_int_not_equal(parse(&c, err, 2, "token"), 0);
    assert_non_null(strstr(err, "--user"));
    config_free(&c);
    assert_int_not_equal(parse(&c, err, 2, "frobnicate"), 0);
    config_free(&c);
    assert_int_not_equal(parse(&c, err, 2, "--nope"), 0);
    assert_non_null(strstr(err, "--nope"));
    config_free(&c);
    assert_int_not_equal(parse(&c, err, 2, "--port"), 0);
    config_free(&c);
    assert_int_not_equal(parse(&c, err, 3, "--admin", "x"), 0);
    config_free(&c);
}

/*
 * Flags are matched whole: an abbreviation or an unknown name is refused
 * with one line naming it as given, and a token command's option with the
 * wrong command names the command it belongs to.
 */
static void test_flags_whole(void **state)
{
    static const struct {
        const char *args[3];
        const char *expect;
    } cases[] = {
        {{"--po", "80"}, "--po"},
        {{"--por=80"}, "--por"},
        {{"--mysql", "mysql://u:p@h/db"}, "--mysql"},
        {{"--threads3"}, "--threads3"},
        {{"--help-mark"}, "--help-mark"},
        {{"--h"}, "--h"},
        {{"--nope"}, "--nope"},
        {{"--PORT", "80"}, "--PORT"},
        {{"--user", "5"}, "--user: only with token"},
        {{"token", "--user=5", "--count=2"}, "--count: only with tokens"},
        {{"token", "--us", "5"}, "--us"},
        {{"tokens", "--first", "1"}, "--count M is required"},
        {{"port", "80"}, "unknown command \"port\""},
        {{"-p", "80"}, "unexpected argument \"-p\""},
    };
    struct config c;
    char err[256];
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[4];
        int argc = 1;

        for (int a = 0; a < 3 && cases[i].args[a]; a++)
            argv[argc++ - 1] = (char *)cases[i].args[a];
        err[0] = '\0';
        if (parse_argv(&c, err, argc, argv) != -EINVAL ||
            !strstr(err, cases[i].expect) || strchr(err, '\n')) {
            print_error(
                "%s %s: \"%s\", not a line with \"%s\"\n", cases[i].args[0],
                cases[i].args[1] ? cases[i].args[1] : "", err, cases[i].expect);
            fail();
        }
        config_free(&c);
    }
}

/* A bad value names the setting the way it was given: its variable or its
 * flag. */
static void test_errors_name_the_source(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 3, "--port", "x"), -EINVAL);
    assert_string_equal(err, "--port: must be 0..65535 (got \"x\")");
    config_free(&c);
    setenv("SECKILL_IDLE_FREE_S", "0", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_string_equal(err,
                        "SECKILL_IDLE_FREE_S: must be 1..86400 seconds (got "
                        "\"0\")");
    config_free(&c);
    assert_int_equal(parse(&c, err, 2, "--idle-free-s=86401"), -EINVAL);
    assert_non_null(strstr(err, "--idle-free-s: must be 1..86400 seconds"));
    config_free(&c);
    assert_int_equal(parse(&c, err, 2, "--redis-url=http://h"), -EINVAL);
    assert_non_null(strstr(err, "--redis-url: expected redis://"));
    config_free(&c);
    assert_int_equal(parse(&c, err, 4, "token", "--user", "0"), -EINVAL);
    assert_string_equal(err, "--user: must be a positive integer (got \"0\")");
    config_free(&c);
    assert_int_equal(
        parse(&c, err, 6, "tokens", "--first=1", "--count=1", "--ttl", "0"),
        -EINVAL);
    assert_non_null(strstr(err, "--ttl: must be 1..315360000 seconds"));
    config_free(&c);
}

/* The token commands read only the secret: the service's settings may be
 * unset or wrong, and their flags are taken and ignored. */
static void test_token_reads_only_the_secret(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    unsetenv("SECKILL_MYSQL_URL");
    setenv("SECKILL_PORT", "not a port", 1);
    assert_int_equal(parse(&c, err, 8, "tokens", "--first=7", "--count", "2",
                           "--threads", "x", "--ttl=5"),
                     0);
    assert_int_equal(c.cmd, CMD_TOKENS);
    assert_int_equal(c.tokens_first, 7);
    assert_int_equal(c.tokens_count, 2);
    assert_int_equal(c.token_ttl_s, 5);
    assert_false(c.token_admin);
    config_free(&c);
    assert_int_equal(parse(&c, err, 4, "token", "--user=3", "--admin=0"), 0);
    assert_int_equal(c.token_user, 3);
    assert_false(c.token_admin);
    assert_int_equal(c.token_ttl_s, 86400);
    config_free(&c);
    assert_int_equal(parse(&c, err, 2, "help"), 0);
    assert_int_equal(c.cmd, CMD_HELP);
    config_free(&c);
}

/* ---- MariaDB shards ---- */

#define SHARD_A "mysql://u:p@10.0.0.1:3306/sales"
#define SHARD_B "mysql://u:p@10.0.0.2:3307/sales"
#define SHARD_C "mysql://v:q@10.0.0.3/other"

/*
 * SECKILL_MYSQL_SHARDS instead of SECKILL_MYSQL_URL: shard 0 is the
 * primary of everything that is not a sale (http.store), each shard's
 * store config carries the service's settings with its own server, and
 * SECKILL_MYSQL_URL alone is one shard.
 */
static void test_shards(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    /* The one primary of SECKILL_MYSQL_URL is shard 0 of one. */
    assert_int_equal(parse(&c, err, 2, "--batch-max=7"), 0);
    assert_int_equal(c.nshards, 1);
    assert_string_equal(c.shards[0].store.mysql_host, "127.0.0.1");
    assert_int_equal(c.shards[0].store.mysql_port, 13306);
    assert_string_equal(c.shards[0].store.mysql_db, "db");
    assert_int_equal(c.shards[0].store.batch_max, 7);
    assert_null(c.shards[0].store.replica);
    config_free(&c);
    assert_null(c.shards);

    /* Several, for migrate: in their order, spaces around them dropped. */
    unsetenv("SECKILL_MYSQL_URL");
    setenv("SECKILL_MYSQL_SHARDS", SHARD_A ", " SHARD_B " ," SHARD_C, 1);
    assert_int_equal(parse(&c, err, 3, "migrate", "--lock-wait=5"), 0);
    assert_int_equal(c.nshards, 3);
    assert_string_equal(c.http.store.mysql_host, "10.0.0.1");
    assert_string_equal(c.shards[0].store.mysql_host, "10.0.0.1");
    assert_string_equal(c.shards[1].store.mysql_host, "10.0.0.2");
    assert_int_equal(c.shards[1].store.mysql_port, 3307);
    assert_string_equal(c.shards[2].store.mysql_host, "10.0.0.3");
    assert_int_equal(c.shards[2].store.mysql_port, 3306);
    assert_string_equal(c.shards[2].store.mysql_user, "v");
    assert_string_equal(c.shards[2].store.mysql_pass, "q");
    assert_string_equal(c.shards[2].store.mysql_db, "other");
    assert_int_equal(c.shards[2].store.connect_timeout_ms,
                     c.http.store.connect_timeout_ms);
    config_free(&c);
    assert_null(c.shards);
    assert_int_equal(c.nshards, 0);

    /* The service runs on a list of one, as on SECKILL_MYSQL_URL; the
     * other commands that read MySQL take shard 0. */
    setenv("SECKILL_MYSQL_SHARDS", SHARD_B, 1);
    assert_int_equal(parse(&c, err, 2, "--batch-max=9"), 0);
    assert_int_equal(c.nshards, 1);
    assert_string_equal(c.http.store.mysql_host, "10.0.0.2");
    assert_int_equal(c.http.store.mysql_port, 3307);
    assert_string_equal(c.shards[0].store.mysql_host, "10.0.0.2");
    assert_int_equal(c.shards[0].store.batch_max, 9);
    config_free(&c);
    setenv("SECKILL_MYSQL_SHARDS", SHARD_A "," SHARD_B, 1);
    assert_int_equal(parse(&c, err, 4, "admin", "add", "--username=root"), 0);
    assert_string_equal(c.http.store.mysql_host, "10.0.0.1");
    config_free(&c);

    /* The service on several: its store config lists every shard's,
     * shard 0 its own. */
    err[0] = '\0';
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.store.nshards, 2);
    assert_ptr_equal(c.http.store.shards[0], &c.http.store);
    assert_ptr_equal(c.http.store.shards[1], &c.shards[1].store);
    assert_string_equal(c.http.store.shards[1]->mysql_host, "10.0.0.2");
    assert_int_equal(c.shards[1].store.nshards, 0);
    config_free(&c);
    assert_null(c.http.store.shards);

    /* The async mode too. */
    setenv("SECKILL_PURCHASE_MODE", "async", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.store.nshards, 2);
    config_free(&c);
    unsetenv("SECKILL_PURCHASE_MODE");

    /* Neither set: the one that was always required is named. */
    unsetenv("SECKILL_MYSQL_SHARDS");
    assert_int_equal(parse(&c, err, 2, "migrate"), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_MYSQL_URL"));
    assert_non_null(strstr(err, "SECKILL_MYSQL_SHARDS"));
    config_free(&c);
    /* An empty SECKILL_MYSQL_URL is not set. */
    setenv("SECKILL_MYSQL_URL", "", 1);
    setenv("SECKILL_MYSQL_SHARDS", SHARD_A, 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_string_equal(c.http.store.mysql_host, "10.0.0.1");
    config_free(&c);
    reset_env(NULL);
}

/* The list's bounds and bad entries: one line naming the setting (and the
 * shard) as given. */
static void test_shards_bad(void **state)
{
    struct config c;
    char err[256], many[66 * 40];
    (void)state;

    static const struct {
        const char *val, *expect;
    } cases[] = {
        {SHARD_A ",," SHARD_B, "SECKILL_MYSQL_SHARDS: shard 1 has no URL"},
        {SHARD_A ",", "SECKILL_MYSQL_SHARDS: shard 1 has no URL"},
        {SHARD_A ",mysql://h/db", "SECKILL_MYSQL_SHARDS, shard 1: expected"},
        {"redis://h:1/0", "SECKILL_MYSQL_SHARDS, shard 0: expected"},
        {SHARD_A ",mysql://u:p%4@h/db", "SECKILL_MYSQL_SHARDS, shard 1: "},
        {SHARD_A "," SHARD_B ",mysql://x:y@10.0.0.1:3306/sales",
         "shards 0 and 2 are the same database (10.0.0.1:3306/sales)"},
    };
    unsetenv("SECKILL_MYSQL_URL");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv("SECKILL_MYSQL_SHARDS", cases[i].val, 1);
        err[0] = '\0';
        assert_int_equal(parse(&c, err, 2, "migrate"), -EINVAL);
        if (!strstr(err, cases[i].expect)) {
            print_error("%s: got \"%s\"\n", cases[i].val, err);
            fail();
        }
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }

    /* 64 shards, and not one more; the flag's name when given as one. */
    many[0] = '\0';
    for (int i = 0; i < 64; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many),
                 "%smysql://u:p@h:%d/d", i ? "," : "", 1000 + i);
    setenv("SECKILL_MYSQL_SHARDS", many, 1);
    assert_int_equal(parse(&c, err, 2, "migrate"), 0);
    assert_int_equal(c.nshards, 64);
    assert_int_equal(c.shards[63].store.mysql_port, 1063);
    config_free(&c);
    strcat(many, ",mysql://u:p@h:2000/d");
    unsetenv("SECKILL_MYSQL_SHARDS");
    {
        char flag[sizeof(many) + 32];

        snprintf(flag, sizeof(flag), "--mysql-shards=%s", many);
        assert_int_equal(parse(&c, err, 3, "migrate", flag), -EINVAL);
        assert_string_equal(err, "--mysql-shards: at most 64 shards");
        config_free(&c);
    }
    reset_env(NULL);
}

/* The shards' replicas: in the shards' order, an empty entry a shard
 * without one, never more entries than shards. */
static void test_shard_replicas(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    unsetenv("SECKILL_MYSQL_URL");
    setenv("SECKILL_MYSQL_SHARDS", SHARD_A "," SHARD_B "," SHARD_C, 1);
    setenv("SECKILL_MYSQL_SHARD_REPLICAS",
           "mysql://r:s@10.0.1.1/sales, ,mysql://r:s@10.0.1.3/other", 1);
    assert_int_equal(parse(&c, err, 2, "migrate"), 0);
    /* migrate reads no replica. */
    assert_null(c.shards[0].store.replica);
    assert_null(c.shards[2].store.replica);
    config_free(&c);
    /* The service does: shard 0's replica is the one of http.store. */
    setenv("SECKILL_MYSQL_SHARDS", SHARD_A, 1);
    setenv("SECKILL_MYSQL_SHARD_REPLICAS", "mysql://r:s@10.0.1.1/sales", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_non_null(c.http.store.replica);
    assert_string_equal(c.http.store.replica->mysql_host, "10.0.1.1");
    assert_true(c.http.store.replica->read_only);
    assert_non_null(c.shards[0].store.replica);
    assert_string_equal(c.shards[0].store.replica->mysql_user, "r");
    config_free(&c);
    setenv("SECKILL_MYSQL_SHARD_REPLICAS", " ", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_null(c.http.store.replica);
    config_free(&c);

    static const struct {
        const char *shards, *replicas, *expect;
    } bad[] = {
        /* More entries than shards, even empty ones. */
        {SHARD_A, "mysql://r:s@h/d,mysql://r:s@h2/d",
         "SECKILL_MYSQL_SHARD_REPLICAS: more entries than "
         "SECKILL_MYSQL_SHARDS has shards (1)"},
        {SHARD_A, ",", "more entries than SECKILL_MYSQL_SHARDS has shards"},
        {SHARD_A, "mysql://r@/d", "SECKILL_MYSQL_SHARD_REPLICAS, shard 0: "},
        /* With the one URL, the replica has its own setting. */
        {NULL, "mysql://r:s@h/d", "only with SECKILL_MYSQL_SHARDS"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        reset_env(NULL);
        if (bad[i].shards) {
            unsetenv("SECKILL_MYSQL_URL");
            setenv("SECKILL_MYSQL_SHARDS", bad[i].shards, 1);
        }
        setenv("SECKILL_MYSQL_SHARD_REPLICAS", bad[i].replicas, 1);
        err[0] = '\0';
        assert_int_equal(parse(&c, err, 1), -EINVAL);
        if (!strstr(err, bad[i].expect)) {
            print_error("%s: got \"%s\"\n", bad[i].replicas, err);
            fail();
        }
        config_free(&c);
    }

    /* Three shards' replicas for the service: each shard is wired to
     * its replica. */
    reset_env(NULL);
    unsetenv("SECKILL_MYSQL_URL");
    setenv("SECKILL_MYSQL_SHARDS", SHARD_A "," SHARD_B "," SHARD_C, 1);
    setenv("SECKILL_MYSQL_SHARD_REPLICAS", ",,mysql://r:s@10.0.1.3/other", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.nshards, 3);
    assert_ptr_equal(c.http.store.shards[2]->replica, &c.shards[2].replica);
    assert_null(c.shards[0].store.replica);
    assert_null(c.http.store.replica);
    assert_null(c.shards[1].store.replica);
    assert_non_null(c.shards[2].store.replica);
    assert_string_equal(c.shards[2].store.replica->mysql_host, "10.0.1.3");
    assert_string_equal(c.shards[2].store.replica->mysql_db, "other");
    assert_true(c.shards[2].store.replica->read_only);
    assert_int_equal(c.shards[2].store.replica->io_timeout_ms,
                     c.http.store.io_timeout_ms);
    config_free(&c);
    reset_env(NULL);
}

/*
 * The one server and the list name the same thing: both given (in the
 * environment or as flags) is one line naming both as given, for the
 * commands that read them; an empty one is not given.
 */
static void test_shards_exclusive(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_MYSQL_SHARDS", SHARD_A, 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_string_equal(err, "SECKILL_MYSQL_URL and SECKILL_MYSQL_SHARDS are "
                             "both set: set one (the first URL of the list "
                             "is shard 0)");
    config_free(&c);
    assert_int_equal(parse(&c, err, 2, "migrate"), -EINVAL);
    assert_non_null(strstr(err, "are both set"));
    config_free(&c);
    unsetenv("SECKILL_MYSQL_URL");
    assert_int_equal(parse(&c, err, 3, "migrate", "--mysql-url=" SHARD_B),
                     -EINVAL);
    assert_string_equal(err, "--mysql-url and SECKILL_MYSQL_SHARDS are both "
                             "set: set one (the first URL of the list is "
                             "shard 0)");
    config_free(&c);
    unsetenv("SECKILL_MYSQL_SHARDS");
    assert_int_equal(parse(&c, err, 4, "migrate", "--mysql-url=" SHARD_B,
                           "--mysql-shards=" SHARD_A),
                     -EINVAL);
    assert_non_null(strstr(err, "--mysql-url and --mysql-shards are both set"));
    config_free(&c);
    /* The token commands read neither. */
    setenv("SECKILL_MYSQL_URL", SHARD_A, 1);
    setenv("SECKILL_MYSQL_SHARDS", SHARD_B, 1);
    assert_int_equal(parse(&c, err, 4, "token", "--user", "5"), 0);
    config_free(&c);

    /* The replica and the replicas' list. */
    unsetenv("SECKILL_MYSQL_URL");
    setenv("SECKILL_MYSQL_REPLICA_URL", "mysql://r:s@h/d", 1);
    setenv("SECKILL_MYSQL_SHARD_REPLICAS", "mysql://r:s@h/d", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_string_equal(err,
                        "SECKILL_MYSQL_REPLICA_URL and "
                        "SECKILL_MYSQL_SHARD_REPLICAS are both set: set one "
                        "(the first entry of the list is shard 0's replica)");
    config_free(&c);
    /* migrate reads neither. */
    assert_int_equal(parse(&c, err, 2, "migrate"), 0);
    config_free(&c);
    setenv("SECKILL_MYSQL_REPLICA_URL", "", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_string_equal(c.http.store.replica->mysql_host, "h");
    config_free(&c);
    reset_env(NULL);
}

/* ---- abuse limits ---- */

/* The defaults keep loopback load tests working: per-user on, per-address
 * limits off (docs/configuration.md). */
static void test_limits_defaults(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 1), 0);
    assert_true(c.http.rate_user.per_s > 19.999 &&
                c.http.rate_user.per_s < 20.001);
    assert_int_equal(c.http.rate_user.burst, 40);
    assert_true(c.http.rate_ip.per_s == 0);
    assert_int_equal(c.http.conn_timeout_s, 30);
    assert_int_equal(c.http.max_conn, 60000);
    assert_int_equal(c.http.max_conn_per_ip, 0);
    assert_int_equal(c.http.head_max, 4096);
    config_free(&c);
}

static void test_limits_values(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_RATE_IP", "100,200", 1);
    setenv("SECKILL_MAX_CONN_PER_IP", "256", 1);
    setenv("SECKILL_HTTP_HEAD_MAX", "8192", 1);
    assert_int_equal(parse(&c, err, 9, "--rate-user=0.5,3", "--conn-timeout-s",
                           "5", "--max-conn", "1000", "--threads", "4",
                           "--rate-ip=0"),
                     0);
    assert_true(c.http.rate_user.per_s > 0.499 &&
                c.http.rate_user.per_s < 0.501);
    assert_int_equal(c.http.rate_user.burst, 3);
    /* The flag wins over the environment. */
    assert_true(c.http.rate_ip.per_s == 0);
    assert_int_equal(c.http.conn_timeout_s, 5);
    assert_int_equal(c.http.max_conn, 1000);
    assert_int_equal(c.http.max_conn_per_ip, 256);
    assert_int_equal(c.http.head_max, 8192);
    config_free(&c);
    assert_int_equal(parse(&c, err, 2, "--http-head-max=32768"), 0);
    assert_int_equal(c.http.head_max, 32768);
    config_free(&c);

    setenv("SECKILL_RATE_USER", "0", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_true(c.http.rate_user.per_s == 0);
    config_free(&c);
    reset_env(NULL);
}

static void test_limits_bad_values(void **state)
{
    static const struct {
        const char *var, *val;
    } cases[] = {
        {"SECKILL_RATE_USER", ""},          {"SECKILL_RATE_USER", "20"},
        {"SECKILL_RATE_USER", "20,"},       {"SECKILL_RATE_USER", ",40"},
        {"SECKILL_RATE_USER", "20,0"},      {"SECKILL_RATE_USER", "0,40"},
        {"SECKILL_RATE_USER", "-1,40"},     {"SECKILL_RATE_USER", " 20,40"},
        {"SECKILL_RATE_USER", "inf,40"},    {"SECKILL_RATE_USER", "nan,40"},
        {"SECKILL_RATE_USER", "20,40,60"},  {"SECKILL_RATE_USER", "20/s,40"},
        {"SECKILL_RATE_USER", "0.0001,1"},  {"SECKILL_RATE_USER", "2000000,1"},
        {"SECKILL_RATE_IP", "1,1000001"},   {"SECKILL_RATE_IP", "off"},
        {"SECKILL_CONN_TIMEOUT_S", "0"},    {"SECKILL_CONN_TIMEOUT_S", "3601"},
        {"SECKILL_CONN_TIMEOUT_S", "1s"},   {"SECKILL_MAX_CONN", "0"},
        {"SECKILL_MAX_CONN", "1000001"},    {"SECKILL_MAX_CONN_PER_IP", "-1"},
        {"SECKILL_MAX_CONN_PER_IP", "x"},   {"SECKILL_HTTP_HEAD_MAX", "2047"},
        {"SECKILL_HTTP_HEAD_MAX", "32769"}, {"SECKILL_HTTP_HEAD_MAX", "4k"},
    };
    struct config c;
    char err[256];
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        reset_env(NULL);
        setenv(cases[i].var, cases[i].val, 1);
        err[0] = '\0';
        if (parse(&c, err, 1) == 0) {
            print_error("%s=\"%s\" was accepted\n", cases[i].var, cases[i].val);
            fail();
        }
        assert_non_null(strstr(err, cases[i].var));
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
    /* Fewer connections than threads would leave a thread with none. */
    reset_env(NULL);
    setenv("SECKILL_THREADS", "8", 1);
    setenv("SECKILL_MAX_CONN", "7", 1);
    assert_int_not_equal(parse(&c, err, 1), 0);
    assert_non_null(strstr(err, "SECKILL_MAX_CONN"));
    config_free(&c);
    reset_env(NULL);
}

/* ---- purchase settings ---- */

/* Merged transactions of up to 64 by default, no linger, no segments. */
static void test_purchase_defaults(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.store.batch_max, STORE_BATCH_DEFAULT);
    assert_int_equal(c.http.store.batch_linger_us, 0);
    assert_int_equal(c.http.store.stock_segments, 1);
    config_free(&c);
}

static void test_purchase_values(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    setenv("SECKILL_BATCH_MAX", "1", 1);
    setenv("SECKILL_STOCK_SEGMENTS", "64", 1);
    assert_int_equal(
        parse(&c, err, 3, "--batch-linger-us=200", "--stock-segments=16"), 0);
    assert_int_equal(c.http.store.batch_max, 1);
    assert_int_equal(c.http.store.batch_linger_us, 200);
    /* The flag wins over the environment. */
    assert_int_equal(c.http.store.stock_segments, 16);
    config_free(&c);

    assert_int_equal(parse(&c, err, 3, "--batch-max", "256"), 0);
    assert_int_equal(c.http.store.batch_max, STORE_BATCH_MAX);
    assert_int_equal(c.http.store.stock_segments, 64);
    config_free(&c);

    setenv("SECKILL_QUEUE_MAX", "5", 1);
    assert_int_equal(parse(&c, err, 2, "--engine-threads=7"), 0);
    assert_int_equal(c.http.engine_threads, 7);
    assert_int_equal(c.http.queue_max, 5);
    /* Per-voucher state is freed after a minute unused by default. */
    assert_int_equal(c.http.idle_free_s, 60);
    config_free(&c);

    setenv("SECKILL_IDLE_FREE_S", "86400", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.idle_free_s, 86400);
    config_free(&c);
    assert_int_equal(parse(&c, err, 2, "--idle-free-s=1"), 0);
    assert_int_equal(c.http.idle_free_s, 1);
    config_free(&c);
}

static void test_purchase_bad_values(void **state)
{
    static const struct {
        const char *var, *val;
    } cases[] = {
        {"SECKILL_BATCH_MAX", "0"},
        {"SECKILL_BATCH_MAX", "257"},
        {"SECKILL_BATCH_MAX", "x"},
        {"SECKILL_BATCH_MAX", ""},
        {"SECKILL_BATCH_LINGER_US", "-1"},
        {"SECKILL_BATCH_LINGER_US", "10001"},
        {"SECKILL_BATCH_LINGER_US", "1ms"},
        {"SECKILL_STOCK_SEGMENTS", "0"},
        {"SECKILL_STOCK_SEGMENTS", "65"},
        {"SECKILL_STOCK_SEGMENTS", "2.5"},
        {"SECKILL_ENGINE_THREADS", "0"},
        {"SECKILL_ENGINE_THREADS", "1025"},
        {"SECKILL_QUEUE_MAX", "0"},
        {"SECKILL_QUEUE_MAX", "1000001"},
        {"SECKILL_QUEUE_MAX", "many"},
        {"SECKILL_IDLE_FREE_S", "0"},
        {"SECKILL_IDLE_FREE_S", "86401"},
        {"SECKILL_IDLE_FREE_S", "1m"},
    };
    struct config c;
    char err[256];
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        reset_env(NULL);
        setenv(cases[i].var, cases[i].val, 1);
        err[0] = '\0';
        if (parse(&c, err, 1) == 0) {
            print_error("%s=\"%s\" was accepted\n", cases[i].var, cases[i].val);
            fail();
        }
        assert_non_null(strstr(err, cases[i].var));
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
    reset_env(NULL);
}

/* ---- the replicas' confirmation of an async batch ---- */

static void test_async_confirm(void **state)
{
    static const char *const bad[][2] = {
        {"SECKILL_ASYNC_REPLICAS", "-1"},  {"SECKILL_ASYNC_REPLICAS", "17"},
        {"SECKILL_ASYNC_REPLICAS", "one"}, {"SECKILL_ASYNC_REPLICAS", ""},
        {"SECKILL_ASYNC_WAIT_MS", "0"},    {"SECKILL_ASYNC_WAIT_MS", "4001"},
        {"SECKILL_ASYNC_WAIT_MS", "1s"},
    };
    struct config c;
    char err[256];
    (void)state;

    /* By default: as many replicas as the primary has, 200 ms. */
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.async_replicas, -1);
    assert_int_equal(c.http.async_wait_ms, 200);
    config_free(&c);
    setenv("SECKILL_ASYNC_REPLICAS", "auto", 1);
    setenv("SECKILL_ASYNC_WAIT_MS", "4000", 1);
    assert_int_equal(parse(&c, err, 2, "--async-replicas=0"), 0);
    assert_int_equal(c.http.async_replicas, 0);
    assert_int_equal(c.http.async_wait_ms, 4000);
    config_free(&c);
    setenv("SECKILL_ASYNC_REPLICAS", "2", 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_int_equal(c.http.async_replicas, 2);
    config_free(&c);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        reset_env(NULL);
        setenv(bad[i][0], bad[i][1], 1);
        err[0] = '\0';
        if (parse(&c, err, 1) == 0) {
            print_error("%s=\"%s\" was accepted\n", bad[i][0], bad[i][1]);
            fail();
        }
        assert_non_null(strstr(err, bad[i][0]));
        config_free(&c);
    }
    reset_env(NULL);
}

/* ---- the sold-out cache ---- */

static void test_soldout_default_and_values(void **state)
{
    char *flag[] = {"--soldout-ttl-ms", "0"};
    struct config c;
    char err[256];

    (void)state;
    assert_int_equal(parse_argv(&c, err, 1, NULL), 0);
    assert_int_equal(c.http.soldout_ttl_ms, 1000);
    config_free(&c);

    setenv("SECKILL_SOLDOUT_TTL_MS", "60000", 1);
    assert_int_equal(parse_argv(&c, err, 1, NULL), 0);
    assert_int_equal(c.http.soldout_ttl_ms, 60000);
    config_free(&c);

    /* The flag wins; 0 turns the cache off. */
    assert_int_equal(parse_argv(&c, err, 3, flag), 0);
    assert_int_equal(c.http.soldout_ttl_ms, 0);
    config_free(&c);
}

/* SECKILL_REDIS_PREFIX: none by default; letters, digits and "_:.-" up to
 * 32 bytes; no brace (it would move keys between hash slots) and no glob
 * character. */
static void test_redis_prefix(void **state)
{
    static const char *const bad[] = {
        "{x}", "a}", "a*", "a b", "ä", "123456789012345678901234567890123"};
    struct config c;
    char err[256];

    (void)state;
    assert_int_equal(parse_argv(&c, err, 1, NULL), 0);
    assert_null(c.http.redis_prefix);
    config_free(&c);
    setenv("SECKILL_REDIS_PREFIX", "shop-1.eu_west:", 1);
    assert_int_equal(parse_argv(&c, err, 1, NULL), 0);
    assert_string_equal(c.http.redis_prefix, "shop-1.eu_west:");
    config_free(&c);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SECKILL_REDIS_PREFIX", bad[i], 1);
        err[0] = '\0';
        if (parse_argv(&c, err, 1, NULL) == 0) {
            print_error("SECKILL_REDIS_PREFIX=\"%s\" was accepted\n", bad[i]);
            fail();
        }
        assert_non_null(strstr(err, "SECKILL_REDIS_PREFIX"));
        config_free(&c);
    }
    unsetenv("SECKILL_REDIS_PREFIX");
}

static void test_soldout_bad_values(void **state)
{
    static const char *const bad[] = {"", "-1", "60001", "1s", "1.5", "x"};
    struct config c;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SECKILL_SOLDOUT_TTL_MS", bad[i], 1);
        err[0] = '\0';
        if (parse_argv(&c, err, 1, NULL) == 0) {
            print_error("SECKILL_SOLDOUT_TTL_MS=\"%s\" was accepted\n", bad[i]);
            fail();
        }
        assert_non_null(strstr(err, "SECKILL_SOLDOUT_TTL_MS"));
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
}

static void test_cors_default_and_values(void **state)
{
    static const char *const good[] = {
        "https://shop.example.com",
        "http://localhost:3000",
        "https://a.example, http://127.0.0.1:8081 ,http://[::1]:9000",
        "http://xn--fsq.example",
    };
    struct config c;
    char err[256];
    char *flag[] = {"--cors-origins", "https://flag.example"};

    (void)state;
    assert_int_equal(parse_argv(&c, err, 1, NULL), 0);
    assert_null(c.http.cors_origins);
    config_free(&c);

    /* Empty, or only spaces: off. */
    setenv("SECKILL_CORS_ORIGINS", " ", 1);
    assert_int_equal(parse_argv(&c, err, 1, NULL), 0);
    assert_null(c.http.cors_origins);
    config_free(&c);

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        setenv("SECKILL_CORS_ORIGINS", good[i], 1);
        if (parse_argv(&c, err, 1, NULL) != 0) {
            print_error("\"%s\" refused: %s\n", good[i], err);
            fail();
        }
        assert_string_equal(c.http.cors_origins, good[i]);
        config_free(&c);
    }
    /* The flag wins over the environment. */
    assert_int_equal(parse_argv(&c, err, 3, flag), 0);
    assert_string_equal(c.http.cors_origins, "https://flag.example");
    config_free(&c);
}

static void test_cors_bad_values(void **state)
{
    /* Each with a word of the reason the message must give. */
    static const struct {
        const char *value, *why;
    } bad[] = {
        {"*", "every site"},
        {"null", "sandboxed"},
        {"https://shop.example/", "trailing slash"},
        {"https://shop.example/app", "path"},
        {"shop.example", "http:// or https://"},
        {"ftp://shop.example", "http:// or https://"},
        {"https://Shop.example", "lower-case"},
        {"https://shop.example:443", "default port"},
        {"http://shop.example:80", "default port"},
        {"http://shop.example:0", "port"},
        {"http://shop.example:99999", "port"},
        {"http://shop.example:8a", "port"},
        {"http://", "http:// or https://"},
        {"http://[zz]:1", "IPv6"},
        {"https://a.example,", "empty origin"},
        {"https://a.example,,https://b.example", "empty origin"},
        {"https://a.example https://b.example", "lower-case"},
    };
    struct config c;
    char err[256];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SECKILL_CORS_ORIGINS", bad[i].value, 1);
        err[0] = '\0';
        if (parse_argv(&c, err, 1, NULL) == 0) {
            print_error("SECKILL_CORS_ORIGINS=\"%s\" was accepted\n",
                        bad[i].value);
            fail();
        }
        if (!strstr(err, "SECKILL_CORS_ORIGINS") || !strstr(err, bad[i].why)) {
            print_error("\"%s\": message \"%s\" lacks \"%s\"\n", bad[i].value,
                        err, bad[i].why);
            fail();
        }
        assert_null(strchr(err, '\n'));
        config_free(&c);
    }
}

/* ---- the documents written from the settings table ---- */

/* What config_doc_write() writes, NUL-terminated; free(3) it. */
static char *doc_text(enum config_doc doc)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    assert_non_null(f);
    assert_int_equal(config_doc_write(f, doc), 0);
    assert_int_equal(fclose(f), 0);
    return text;
}

/* A file of the tree (the tests run from its root); free(3) it. */
static char *file_text(const char *path)
{
    char *text = NULL;
    size_t len = 0;
    FILE *in = fopen(path, "r"), *out = open_memstream(&text, &len);
    char buf[4096];
    size_t n;

    if (!in) {
        print_error("%s: cannot open (run the tests from the tree's root)\n",
                    path);
        fail();
    }
    assert_non_null(out);
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    return text;
}

/* Fail, showing the first line where have (line first of path on)
 * differs from want. */
static void expect_same_text(const char *path, int first, const char *have,
                             const char *want)
{
    const char *h = have, *w = want;
    int line = first;

    while (*h && *h == *w) {
        if (*h == '\n')
            line++;
        h++, w++;
    }
    if (!*h && !*w)
        return;
    while (h > have && h[-1] != '\n')
        h--;
    while (w > want && w[-1] != '\n')
        w--;
    print_error("%s:%d differs from the settings table of cmd/config.c "
                "(make config-docs writes it):\n"
                "  has:       %.*s\n"
                "  should be: %.*s\n",
                path, line, (int)strcspn(h, "\n"), h, (int)strcspn(w, "\n"), w);
    fail();
}

/* docs/configuration.md's table between its markers is --help-markdown. */
static void test_config_doc_table_in_sync(void **state)
{
    static const char begin[] = "\n<!-- settings:begin -->\n\n",
                      end[] = "\n<!-- settings:end -->\n";
    char *doc = file_text("docs/configuration.md"),
         *table = doc_text(CONFIG_DOC_MARKDOWN);
    char *from, *to;
    int line = 1;
    (void)state;

    from = strstr(doc, begin);
    assert_non_null(from);
    from += strlen(begin);
    to = strstr(from, end);
    assert_non_null(to);
    to[0] = '\0'; /* the blank line's newline */
    for (const char *p = doc; p < from; p++)
        line += *p == '\n';
    expect_same_text("docs/configuration.md", line, from, table);
    free(doc);
    free(table);
}

/* docs/seckilld.8 is --help-man. */
static void test_man_page_in_sync(void **state)
{
    char *page = file_text("docs/seckilld.8"), *want = doc_text(CONFIG_DOC_MAN);
    (void)state;

    expect_same_text("docs/seckilld.8", 1, page, want);
    free(page);
    free(want);
}

/*
 * The table itself: every flag and variable once (the parser takes the
 * first match), each with its texts, and --help within 80 columns naming
 * every one of them.
 */
static void test_settings_table(void **state)
{
    char *help = doc_text(CONFIG_DOC_HELP), *line, *save = NULL;
    (void)state;

    for (size_t i = 0; i < config_settings_count; i++) {
        const struct config_setting *s = &config_settings[i];
        char flag[64];

        assert_non_null(s->flag);
        assert_non_null(s->arg);
        assert_non_null(s->parse);
        assert_non_null(s->help);
        assert_true(s->min <= s->max);
        assert_true(s->env ? s->doc != NULL : s->doc == NULL);
        assert_true(s->env ? strncmp(s->env, "SECKILL_", 8) == 0 : 1);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(s->flag, config_settings[j].flag) == 0 ||
                (s->env && config_settings[j].env &&
                 strcmp(s->env, config_settings[j].env) == 0)) {
                print_error("--%s is in the table twice\n", s->flag);
                fail();
            }
        }
        snprintf(flag, sizeof(flag), "  --%s%s", s->flag, s->bare ? "[" : " ");
        if (!strstr(help, flag) || (s->env && !strstr(help, s->env))) {
            print_error("--help lacks --%s\n", s->flag);
            fail();
        }
    }
    for (line = strtok_r(help, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strlen(line) > 80) {
            print_error("--help line over 80 columns: %s\n", line);
            fail();
        }
    }
    free(help);
}

/* Without dev mode a login code needs the SMS webhook and its key; the
 * currency is an ISO 4217 code. */
static void test_sms_and_currency(void **state)
{
    struct config c;
    char err[256];
    (void)state;

    assert_int_equal(parse(&c, err, 1), 0);
    assert_null(c.http.sms_webhook && c.http.sms_webhook[0] ? "set" : NULL);
    assert_string_equal(c.http.currency, "CNY");
    config_free(&c);
    setenv("SECKILL_DEV", "0", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_SMS_WEBHOOK: must be set unless "
                                "SECKILL_DEV=1"));
    config_free(&c);
    setenv("SECKILL_SMS_WEBHOOK", "https://sms.example.com/send", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_SMS_SECRET: must be set with"));
    config_free(&c);
    setenv("SECKILL_SMS_SECRET", SECRET, 1);
    assert_int_equal(parse(&c, err, 1), 0);
    assert_string_equal(c.http.sms_webhook, "https://sms.example.com/send");
    assert_true(c.http.has_sms_secret);
    assert_int_equal(0x11, c.http.sms_secret[1]);
    config_free(&c);
    setenv("SECKILL_SMS_WEBHOOK", "ftp://sms.example.com/", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_SMS_WEBHOOK: must be an http://"));
    config_free(&c);
    setenv("SECKILL_SMS_WEBHOOK", "http://127.0.0.1:9/", 1);
    setenv("SECKILL_SMS_SECRET", "abc", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_SMS_SECRET: must be 64 hex"));
    config_free(&c);
    setenv("SECKILL_SMS_SECRET", SECRET, 1);
    setenv("SECKILL_CURRENCY", "cny", 1);
    assert_int_equal(parse(&c, err, 1), -EINVAL);
    assert_non_null(strstr(err, "SECKILL_CURRENCY: must be an ISO 4217"));
    config_free(&c);
    assert_int_equal(parse(&c, err, 3, "--currency", "EUR"), 0);
    assert_string_equal(c.http.currency, "EUR");
    config_free(&c);
    /* The SMS regions: whole country calling codes only. */
    unsetenv("SECKILL_CURRENCY");
    {
        static const char *const good[] = {"86", "1,44", "852,853,886", "7",
                                           "880"};
        static const char *const bad[] = {"8",   "88",   "17",  "086",
                                          "86,", "1234", "44,x"};

        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
            assert_int_equal(parse(&c, err, 3, "--sms-regions", good[i]), 0);
            assert_string_equal(c.http.sms_regions, good[i]);
            config_free(&c);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            assert_int_equal(parse(&c, err, 3, "--sms-regions", bad[i]),
                             -EINVAL);
            assert_non_null(strstr(err, "country calling codes"));
            config_free(&c);
        }
        assert_int_equal(parse(&c, err, 1), 0);
        assert_int_equal(20000, c.http.sms_per_min);
        config_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, reset_env),
        cmocka_unit_test_setup(test_flags_win, reset_env),
        cmocka_unit_test_setup(test_bad_values, reset_env),
        cmocka_unit_test_setup(test_missing, reset_env),
        cmocka_unit_test_setup(test_urls, reset_env),
        cmocka_unit_test_setup(test_commands, reset_env),
        cmocka_unit_test_setup(test_flags_whole, reset_env),
        cmocka_unit_test_setup(test_errors_name_the_source, reset_env),
        cmocka_unit_test_setup(test_token_reads_only_the_secret, reset_env),
        cmocka_unit_test_setup(test_shards, reset_env),
        cmocka_unit_test_setup(test_shards_bad, reset_env),
        cmocka_unit_test_setup(test_shard_replicas, reset_env),
        cmocka_unit_test_setup(test_shards_exclusive, reset_env),
        cmocka_unit_test_setup(test_limits_defaults, reset_env),
        cmocka_unit_test_setup(test_limits_values, reset_env),
        cmocka_unit_test_setup(test_limits_bad_values, reset_env),
        cmocka_unit_test_setup(test_purchase_defaults, reset_env),
        cmocka_unit_test_setup(test_purchase_values, reset_env),
        cmocka_unit_test_setup(test_purchase_bad_values, reset_env),
        cmocka_unit_test_setup(test_async_confirm, reset_env),
        cmocka_unit_test_setup(test_soldout_default_and_values, reset_env),
        cmocka_unit_test_setup(test_soldout_bad_values, reset_env),
        cmocka_unit_test_setup(test_redis_prefix, reset_env),
        cmocka_unit_test_setup(test_cors_default_and_values, reset_env),
        cmocka_unit_test_setup(test_cors_bad_values, reset_env),
        cmocka_unit_test_setup(test_sms_and_currency, reset_env),
        cmocka_unit_test(test_config_doc_table_in_sync),
        cmocka_unit_test(test_man_page_in_sync),
        cmocka_unit_test(test_settings_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
