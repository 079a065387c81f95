/*
 * test_mysql_shards.c - SECKILL_MYSQL_SHARDS against two real MariaDB
 * primaries on loopback (scripts/mysql-shards.sh, which the group set-up
 * runs; make test-cluster). Each test works on scratch databases of its
 * own on both servers (seckill_mig_<pid>_*, which the script's user may
 * make), dropped at the end:
 *
 *   - `seckilld migrate` brings every shard to the newest migration, as
 *     each server's schema_version says, with one line per shard; a
 *     second run applies nothing;
 *   - it stops at the first shard that fails, names it, and leaves the
 *     shards after it untouched;
 *   - a list of one migrates and prints exactly as SECKILL_MYSQL_URL does;
 *   - SECKILL_MYSQL_URL and SECKILL_MYSQL_SHARDS together (and the two
 *     replica settings together) are refused with one line, exit 2;
 *   - the service refuses to start on two shards (exit 2, one line), and
 *     serves a list of one from that shard's server, whose schema it
 *     checks at start-up.
 *
 * Not part of make test: make test-cluster.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <mysql.h>

#include "common/url.h"
#include "tests/it/harness.h"

#define SHARDS 2
/* Room for a URL of the parser's longest parts, a setting of three, and
 * a line naming one. */
#define URL_CAP 640
#define ENV_CAP 2048
#define LINE_CAP 512
#define SECRET                                                                 \
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

/* The shards' servers, from `scripts/mysql-shards.sh urls`. */
static struct url shard_url[SHARDS];
static char db_prefix[48];
/* The private Redis of the service started on one shard. */
static pid_t redis_pid;
static uint16_t redis_port;

/* How many lines s has. */
static int line_count(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* The scratch database called name on every shard: db_prefix + name. */
static const char *db_name(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", db_prefix, name);
    return buf;
}

/* A connection to shard i's server as the script's user (asserts). */
static MYSQL *shard_connect(int i)
{
    MYSQL *m = mysql_init(NULL);
    unsigned timeout = 5;

    assert_non_null(m);
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    if (!mysql_real_connect(m, shard_url[i].hosts[0].host, shard_url[i].user,
                            shard_url[i].pass, NULL, shard_url[i].hosts[0].port,
                            NULL, 0)) {
        print_error("shard %d: %s\n", i, mysql_error(m));
        mysql_close(m);
        fail();
    }
    return m;
}

/* Run SQL on shard i (asserts it succeeds). */
static void shard_exec(int i, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void shard_exec(int i, const char *fmt, ...)
{
    MYSQL *m = shard_connect(i);
    char sql[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    if (mysql_query(m, sql)) {
        print_error("shard %d: %s: %s\n", i, sql, mysql_error(m));
        mysql_close(m);
        fail();
    }
    mysql_close(m);
}

/* The first column of the first row of a query on shard i, as text into
 * buf ("" for NULL; asserts the query succeeds and gives a row). */
static const char *shard_text(int i, char *buf, size_t cap, const char *fmt,
                              ...) __attribute__((format(printf, 4, 5)));
static const char *shard_text(int i, char *buf, size_t cap, const char *fmt,
                              ...)
{
    MYSQL *m = shard_connect(i);
    char sql[1024];
    MYSQL_RES *res;
    MYSQL_ROW row;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    if (mysql_query(m, sql) || !(res = mysql_store_result(m))) {
        print_error("shard %d: %s: %s\n", i, sql, mysql_error(m));
        mysql_close(m);
        fail();
    }
    row = mysql_fetch_row(res);
    assert_non_null(row);
    snprintf(buf, cap, "%s", row[0] ? row[0] : "");
    mysql_free_result(res);
    mysql_close(m);
    return buf;
}

static int64_t shard_scalar(int i, const char *sql)
{
    char buf[64];

    return strtoll(shard_text(i, buf, sizeof(buf), "%s", sql), NULL, 10);
}

/* "mysql://user:pass@host:port/<db_prefix><name>" of shard i. */
static const char *url_on(int i, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "mysql://%s:%s@%s:%u/%s%s", shard_url[i].user,
             shard_url[i].pass, shard_url[i].hosts[0].host,
             shard_url[i].hosts[0].port, db_prefix, name);
    return buf;
}

/* Make the scratch database name on every shard, empty. */
static void make_db(const char *name)
{
    char db[96];

    db_name(name, db, sizeof(db));
    for (int i = 0; i < SHARDS; i++) {
        shard_exec(i, "DROP DATABASE IF EXISTS `%s`", db);
        shard_exec(i,
                   "CREATE DATABASE `%s` CHARACTER SET utf8mb4 COLLATE "
                   "utf8mb4_bin",
                   db);
    }
}

/* Run `seckilld ARGS` (arg may be NULL: the service) with the
 * environment's overrides env; its exit status and its output (standard
 * output and error; free(3) it). Asserts it exits within 30 s. */
static int run(const char *tag, const char *arg, const char *const *env,
               char **out)
{
    char log[IT_PATH_MAX];
    char *argv[] = {(char *)it_bin(), (char *)arg, NULL};
    char **envp = it_env_build(env);
    int st = 0;
    pid_t p;

    snprintf(log, sizeof(log), "%s/shards-%s.log", it_log_dir(), tag);
    unlink(log);
    p = it_spawn(argv, envp, log);
    it_env_free(envp);
    assert_true(p > 0);
    if (it_wait_exit(p, 30000, &st) != 0) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
        print_error("seckilld %s (%s) still running after 30 s; log %s\n",
                    arg ? arg : "", tag, log);
        fail();
    }
    assert_true(WIFEXITED(st));
    *out = it_file_read(log);
    assert_non_null(*out);
    return WEXITSTATUS(st);
}

/* The settings every run gets besides its MySQL ones: the one primary and
 * replicas of the caller's environment unset, a Redis that is ours. */
#define BASE_ENV(redis)                                                        \
    "SECKILL_MYSQL_URL", "SECKILL_MYSQL_REPLICA_URL",                          \
        "SECKILL_MYSQL_SHARD_REPLICAS", (redis), "SECKILL_SECRET=" SECRET,     \
        "SECKILL_DEV=1", "SECKILL_DRAIN_S=0"

static char redis_env[64];

static int group_setup(void **state)
{
    char *argv[] = {"scripts/mysql-shards.sh", "up", NULL};
    char *urls_argv[] = {"scripts/mysql-shards.sh", "urls", NULL};
    char *out = NULL, *p, err[160], log[IT_PATH_MAX];
    int st;

    (void)state;
    it_init();
    snprintf(db_prefix, sizeof(db_prefix), "seckill_mig_%d_", (int)getpid());
    st = it_run_capture(argv, &out);
    free(out);
    if (st != 0) {
        fprintf(stderr, "scripts/mysql-shards.sh up failed (%d)\n", st);
        return -1;
    }
    st = it_run_capture(urls_argv, &out);
    if (st != 0 || !out) {
        fprintf(stderr, "scripts/mysql-shards.sh urls failed (%d)\n", st);
        free(out);
        return -1;
    }
    out[strcspn(out, "\n")] = '\0';
    p = out;
    for (int i = 0; i < SHARDS; i++) {
        size_t n = strcspn(p, ",");

        p[n] = '\0';
        if (url_parse(p, &shard_url[i], err, sizeof(err)) ||
            shard_url[i].nhosts != 1) {
            fprintf(stderr, "shard %d: bad URL from the script: %s\n", i, err);
            free(out);
            return -1;
        }
        p += n + (i + 1 < SHARDS);
    }
    free(out);
    redis_port = it_free_port();
    snprintf(log, sizeof(log), "%s/shards-redis.log", it_log_dir());
    redis_pid = it_redis_start(redis_port, log, NULL);
    if (redis_pid <= 0)
        return -1;
    snprintf(redis_env, sizeof(redis_env),
             "SECKILL_REDIS_URL=redis://127.0.0.1:%u/0", redis_port);
    return 0;
}

static int group_teardown(void **state)
{
    static const char *const names[] = {"every", "stop", "one", "serve"};
    (void)state;

    for (int i = 0; i < SHARDS; i++) {
        MYSQL *m = mysql_init(NULL);

        if (!mysql_real_connect(m, shard_url[i].hosts[0].host,
                                shard_url[i].user, shard_url[i].pass, NULL,
                                shard_url[i].hosts[0].port, NULL, 0)) {
            mysql_close(m);
            continue;
        }
        for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
            char sql[160];

            snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s%s`",
                     db_prefix, names[n]);
            mysql_query(m, sql);
        }
        mysql_close(m);
    }
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        waitpid(redis_pid, NULL, 0);
    }
    return 0;
}

/* Shard i's database name: at the newest migration by its own
 * schema_version, each recorded once, with the schema's tables. */
static void assert_latest(int i, const char *name)
{
    char db[96], sql[256];

    db_name(name, db, sizeof(db));
    snprintf(sql, sizeof(sql), "SELECT MAX(version) FROM `%s`.schema_version",
             db);
    assert_int_equal(shard_scalar(i, sql), (int64_t)store_migration_count);
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(DISTINCT version) FROM `%s`.schema_version", db);
    assert_int_equal(shard_scalar(i, sql), (int64_t)store_migration_count);
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM information_schema.tables WHERE "
             "table_schema = '%s' AND table_name IN ('vouchers', "
             "'seckill_vouchers', 'voucher_orders', 'users')",
             db);
    assert_int_equal(shard_scalar(i, sql), 4);
}

/* Whether shard i's database name has a schema_version table. */
static bool has_schema_version(int i, const char *name)
{
    char db[96], sql[256];

    db_name(name, db, sizeof(db));
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM information_schema.tables WHERE "
             "table_schema = '%s' AND table_name = 'schema_version'",
             db);
    return shard_scalar(i, sql) > 0;
}

/* The line shard i of database name starts with in migrate's output. */
static const char *shard_line(int i, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "shard %d (%s:%u/%s%s): ", i, shard_url[i].hosts[0].host,
             shard_url[i].hosts[0].port, db_prefix, name);
    return buf;
}

/* Every shard migrated, in order, one line each; a second run applies
 * nothing. Checked in each server's own schema_version. */
static void test_migrate_every_shard(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], want[LINE_CAP], *out,
        *second;
    char datadir0[512], datadir1[512];
    (void)state;

    /* Two servers, not one twice. */
    shard_text(0, datadir0, sizeof(datadir0), "SELECT @@datadir");
    shard_text(1, datadir1, sizeof(datadir1), "SELECT @@datadir");
    assert_string_not_equal(datadir0, datadir1);

    make_db("every");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "every", u0, sizeof(u0)),
             url_on(1, "every", u1, sizeof(u1)));
    const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

    assert_int_equal(run("migrate-every", "migrate", env, &out), 0);
    assert_int_equal(line_count(out), 2);
    shard_line(0, "every", want, sizeof(want));
    assert_ptr_equal(strstr(out, want), out);
    snprintf(want, sizeof(want), "%u applied (0001-initial .. ",
             (unsigned)store_migration_count);
    assert_non_null(strstr(out, want));
    shard_line(1, "every", want, sizeof(want));
    assert_ptr_equal(strstr(out, want), strchr(out, '\n') + 1);
    snprintf(want, sizeof(want), "; at version %u\n",
             (unsigned)store_migration_count);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(strchr(out, '\n') + 1, want));
    for (int i = 0; i < SHARDS; i++)
        assert_latest(i, "every");

    assert_int_equal(run("migrate-every-again", "migrate", env, &second), 0);
    assert_int_equal(line_count(second), 2);
    snprintf(want, sizeof(want), "0 applied; at version %u\n",
             (unsigned)store_migration_count);
    assert_non_null(strstr(second, want));
    assert_non_null(strstr(strchr(second, '\n') + 1, want));
    for (int i = 0; i < SHARDS; i++)
        assert_latest(i, "every");
    free(out);
    free(second);
}

/* A shard that cannot be reached stops the run there: the shards before
 * it are migrated, the ones after it untouched, and the line names it. */
static void test_migrate_stops_at_failing_shard(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], dead[URL_CAP], shards[ENV_CAP],
        want[LINE_CAP], *out;
    uint16_t port = it_free_port();
    (void)state;

    make_db("stop");
    snprintf(dead, sizeof(dead), "mysql://%s:%s@127.0.0.1:%u/%sstop",
             shard_url[0].user, shard_url[0].pass, port, db_prefix);
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s,%s",
             url_on(0, "stop", u0, sizeof(u0)), dead,
             url_on(1, "stop", u1, sizeof(u1)));
    const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

    assert_int_equal(run("migrate-stop", "migrate", env, &out), 1);
    shard_line(0, "stop", want, sizeof(want));
    assert_ptr_equal(strstr(out, want), out);
    snprintf(want, sizeof(want),
             "\nseckilld: migrate: shard 1 (127.0.0.1:%u/%sstop): ", port,
             db_prefix);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out,
                           "\nseckilld: migrate: stopped there: shard 2 not "
                           "migrated\n"));
    assert_int_equal(line_count(out), 3);
    assert_latest(0, "stop");
    assert_false(has_schema_version(1, "stop"));
    free(out);
}

/* A list of one is the one primary: the same output as with
 * SECKILL_MYSQL_URL, a line per migration and one for the database. */
static void test_one_shard_as_before(void **state)
{
    char u1[URL_CAP], shards[ENV_CAP], want[LINE_CAP], db[96], *out;
    (void)state;

    make_db("one");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s",
             url_on(1, "one", u1, sizeof(u1)));
    const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

    assert_int_equal(run("migrate-one", "migrate", env, &out), 0);
    assert_int_equal(line_count(out), (int)store_migration_count + 1);
    assert_ptr_equal(strstr(out, "applied 0001-initial ("), out);
    snprintf(want, sizeof(want), "\n%s: %u applied; at version %u\n",
             db_name("one", db, sizeof(db)), (unsigned)store_migration_count,
             (unsigned)store_migration_count);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, "shard"));
    assert_latest(1, "one");
    assert_false(has_schema_version(0, "one"));
    free(out);
}

/* Output of exactly one line, containing what. */
static void assert_one_line(const char *out, const char *what)
{
    if (line_count(out) != 1 || !strstr(out, what)) {
        print_error("expected one line with \"%s\", got:\n%s", what, out);
        fail();
    }
}

/* The one primary and the list together, for the service and for
 * migrate: one line, exit 2, nothing migrated; the same for the one
 * replica and the replicas' list. */
static void test_refuses_both_urls(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], url[ENV_CAP], shards[ENV_CAP], *out;
    (void)state;

    make_db("serve");
    snprintf(url, sizeof(url), "SECKILL_MYSQL_URL=%s",
             url_on(0, "serve", u0, sizeof(u0)));
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s",
             url_on(1, "serve", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), url, shards, NULL};

        assert_int_equal(run("both-serve", NULL, env, &out), 2);
        assert_one_line(out, "seckilld: SECKILL_MYSQL_URL and "
                             "SECKILL_MYSQL_SHARDS are both set: set one");
        free(out);
        assert_int_equal(run("both-migrate", "migrate", env, &out), 2);
        assert_one_line(out, "SECKILL_MYSQL_URL and SECKILL_MYSQL_SHARDS are "
                             "both set");
        free(out);
    }
    assert_false(has_schema_version(0, "serve"));
    assert_false(has_schema_version(1, "serve"));
    {
        char replica[ENV_CAP], replicas[ENV_CAP];

        snprintf(replica, sizeof(replica), "SECKILL_MYSQL_REPLICA_URL=%s", u0);
        snprintf(replicas, sizeof(replicas), "SECKILL_MYSQL_SHARD_REPLICAS=%s",
                 u1);
        const char *const env[] = {BASE_ENV(redis_env), shards, replica,
                                   replicas, NULL};

        assert_int_equal(run("both-replicas", NULL, env, &out), 2);
        assert_one_line(out, "seckilld: SECKILL_MYSQL_REPLICA_URL and "
                             "SECKILL_MYSQL_SHARD_REPLICAS are both set");
        free(out);
    }
}

/*
 * The service on the shards: two are refused until sales are routed by
 * shard (one line, exit 2, although both are migrated); a list of one is
 * served from that shard's server, whose schema is checked at start-up
 * as SECKILL_MYSQL_URL's is.
 */
static void test_service_on_shards(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], *out;
    struct it_server srv = {0};
    struct it_resp resp = {0};
    const json_t *checks;
    (void)state;

    make_db("serve");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "serve", u0, sizeof(u0)),
             url_on(1, "serve", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(run("serve-migrate", "migrate", env, &out), 0);
        free(out);
        assert_int_equal(run("serve-two", NULL, env, &out), 2);
        assert_one_line(out, "seckilld: SECKILL_MYSQL_SHARDS: 2 shards given, "
                             "but sharding sales over several primaries is not "
                             "served yet");
        free(out);
    }

    /* Shard 1 alone: migrated, so served; its MySQL is the one /readyz
     * reaches. */
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s", u1);
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(it_server_start(&srv, "shards-one", env), 0);
        assert_int_equal(it_http(&srv, "GET", "/readyz", NULL, NULL, &resp),
                         200);
        checks = json_object_get(resp.json, "checks");
        assert_string_equal(it_json_str(checks, "mysql"), "ok");
        it_resp_free(&resp);
        assert_int_equal(it_server_stop(&srv), 0);
    }

    /* A shard without the schema: the start-up check reads the list's
     * server, not another. */
    make_db("one");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s",
             url_on(0, "one", u0, sizeof(u0)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};
        char want[LINE_CAP], db[96];

        assert_int_equal(run("serve-unmigrated", NULL, env, &out), 2);
        snprintf(want, sizeof(want),
                 "seckilld: database %s has no "
                 "schema_version",
                 db_name("one", db, sizeof(db)));
        assert_one_line(out, want);
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_every_shard),
        cmocka_unit_test(test_migrate_stops_at_failing_shard),
        cmocka_unit_test(test_one_shard_as_before),
        cmocka_unit_test(test_refuses_both_urls),
        cmocka_unit_test(test_service_on_shards),
    };
    int failed;

    failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    return it_exit_status(failed);
}
