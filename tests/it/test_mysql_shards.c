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
 *   - the service serves a list of one from that shard's server, whose
 *     schema it checks at start-up (every shard's, on two);
 *   - sales routed over two shards (test_sales_on_shards): new vouchers
 *     land on both, each on the shard its id names and on no other; a
 *     crowd on a voucher of each shard at once keeps every invariant in
 *     each shard's own tables; a voucher and an order read back by id;
 *     a buyer's orders merged across the shards newest first, page by
 *     page; pay, cancel and expiry of orders on shard 1, there, and the
 *     refund and audit record they make, on shard 0; a
 *     voucher made before sharding (an AUTO_INCREMENT id) still sells,
 *     on shard 0;
 *   - async sales on two shards (test_async_on_shards): the writer puts
 *     each sale's orders on its shard, and a unit a cancel on shard 1
 *     gives back reaches Redis again (its record there dropped);
 *   - the rows of shard 0 that shard 1's transactions decide on (an
 *     audit record, a refund) survive an instance killed between the
 *     shard's commit and their move (test_shard0_rows_survive_a_crash,
 *     with the failpoint build: SECKILL_FP_BIN);
 *   - a buyer's orders are asked of both shards at once: with shard 0's
 *     link stalled, shard 1 still gets the statement
 *     (test_orders_read_every_shard_at_once);
 *   - a database whose vouchers' AUTO_INCREMENT was pushed into the
 *     sharded range (it was shard 0 of sharded sales), served alone,
 *     gives new vouchers sharded ids of shard 0, found there once sales
 *     are sharded again (test_auto_increment_in_the_sharded_range);
 *   - a provider's transaction pays one order over the shards: one txnId
 *     notified for an order of each shard, one after the other (both
 *     ways) or at once, pays one, the other is a 400 and unpaid
 *     (test_txn_pays_one_order_over_shards); an instance killed between
 *     the txnId's reservation on shard 0 and the payment on shard 1
 *     leaves the order unpaid and the retry pays it, and still no other
 *     order (test_txn_reserved_then_crash, with SECKILL_FP_BIN);
 *   - a payment decided in time records the time it was decided: one
 *     whose reservation on shard 0 waits past the order's deadline is
 *     paid, with a pay time before that deadline
 *     (test_pay_time_is_the_decision).
 *
 * Not part of make test: make test-cluster.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <mysql.h>
#include <sodium.h>

#include "common/url.h"
#include "common/util.h"
#include "idgen/idgen.h"
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
    /* The tokens the tests mint are for the secret the services get. */
    setenv("SECKILL_SECRET", SECRET, 1);
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
    static const char *const names[] = {"every",  "stop",  "one",
                                        "serve",  "sales", "async",
                                        "outbox", "txn",   "txnkill"};
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
 * The service on the shards: a list of one is served from that shard's
 * server, whose schema is checked at start-up as SECKILL_MYSQL_URL's is;
 * on two, every shard's is.
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

    /* Two shards, the second without the schema: every shard's is
     * checked. */
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "serve", u0, sizeof(u0)),
             url_on(1, "one", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};
        char want[LINE_CAP], db[96];

        assert_int_equal(run("serve-unmigrated-1", NULL, env, &out), 2);
        snprintf(want, sizeof(want),
                 "seckilld: database %s has no schema_version",
                 db_name("one", db, sizeof(db)));
        assert_one_line(out, want);
        free(out);
    }
}

/* ---- sales routed over two shards ---- */

/* The service's settings on the "sales" databases: BASE_ENV's (whose
 * secret the tests' tokens use), no rate limits. */
#define SERVE_ENV(redis)                                                       \
    BASE_ENV(redis), "SECKILL_RATE_USER=0", "SECKILL_RATE_IP=0",               \
        "SECKILL_PAY_SECRET=" SECRET

#define CROWD_USERS 300
#define CROWD_PER_USER 3
#define CROWD_STOCK 100
#define CROWD_VOUCHERS 2
#define CROWD_REQUESTS (CROWD_USERS * CROWD_PER_USER * CROWD_VOUCHERS)
#define SHARD_USER_BASE 9300000000LL

/* The scratch database sales_scalar() reads. */
static const char *sales_db = "sales";

/* A number of shard i's sales_db database: the first column of the first
 * row of the query (a printf format). */
static int64_t sales_scalar(int i, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int64_t sales_scalar(int i, const char *fmt, ...)
{
    char sql[1024], db[96], use[160];
    MYSQL *m = shard_connect(i);
    MYSQL_RES *res;
    MYSQL_ROW row;
    int64_t v;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    snprintf(use, sizeof(use), "USE `%s`", db_name(sales_db, db, sizeof(db)));
    if (mysql_query(m, use) || mysql_query(m, sql) ||
        !(res = mysql_store_result(m))) {
        print_error("shard %d: %s: %s\n", i, sql, mysql_error(m));
        mysql_close(m);
        fail();
    }
    row = mysql_fetch_row(res);
    assert_non_null(row);
    v = row[0] ? strtoll(row[0], NULL, 10) : -1;
    mysql_free_result(res);
    mysql_close(m);
    return v;
}

/* The shard that holds voucher v: exactly one has its row, and its id
 * names that shard. */
static int voucher_shard(int64_t v)
{
    int on = -1;

    for (int i = 0; i < SHARDS; i++)
        if (sales_scalar(i, "SELECT COUNT(*) FROM vouchers WHERE id = %lld",
                         (long long)v) == 1) {
            assert_int_equal(on, -1);
            on = i;
        }
    assert_true(on >= 0);
    return on;
}

/* The status of order o on shard i (-1: not there). */
static int64_t order_status(int i, int64_t o)
{
    return sales_scalar(i,
                        "SELECT COALESCE(MAX(status), -1) FROM voucher_orders "
                        "WHERE id = %lld",
                        (long long)o);
}

/* stock + unpaid + paid = initial for voucher v on shard i, at most one
 * active order per buyer, and nothing of v on the other shard. */
static void assert_voucher_whole(int64_t v, int i, int64_t initial)
{
    int64_t stock = sales_scalar(
        i, "SELECT stock FROM seckill_vouchers WHERE voucher_id = %lld",
        (long long)v);
    int64_t active = sales_scalar(i,
                                  "SELECT COUNT(*) FROM voucher_orders WHERE "
                                  "voucher_id = %lld AND status IN (1, 2)",
                                  (long long)v);

    assert_int_equal(initial, stock + active);
    assert_int_equal(0, sales_scalar(i,
                                     "SELECT COUNT(*) FROM (SELECT user_id "
                                     "FROM voucher_orders WHERE voucher_id = "
                                     "%lld AND status IN (1, 2) GROUP BY "
                                     "user_id HAVING COUNT(*) > 1) d",
                                     (long long)v));
    for (int j = 0; j < SHARDS; j++) {
        if (j == i)
            continue;
        assert_int_equal(0, sales_scalar(j,
                                         "SELECT COUNT(*) FROM voucher_orders "
                                         "WHERE voucher_id = %lld",
                                         (long long)v));
        assert_int_equal(0,
                         sales_scalar(j,
                                      "SELECT COUNT(*) FROM seckill_vouchers "
                                      "WHERE voucher_id = %lld",
                                      (long long)v));
    }
}

/* GET path as user (0: an admin) on s: the status; resp keeps the answer. */
static long get_as(const struct it_server *s, const char *path, int64_t user,
                   struct it_resp *resp)
{
    char tok[TOKEN_STR_LEN];

    it_token(user ? user : 1, user ? TOKEN_ROLE_USER : TOKEN_ROLE_ADMIN, 3600,
             tok);
    return it_http(s, "GET", path, NULL, tok, resp);
}

static long order_act(const struct it_server *s, int64_t o, const char *what,
                      int64_t user)
{
    char tok[TOKEN_STR_LEN], path[96];
    struct it_resp resp;
    long st;

    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/orders/%lld/%s", (long long)o, what);
    st = it_http(s, "POST", path, NULL, tok, &resp);
    it_resp_free(&resp);
    return st;
}

/* A payment notification's body and signature header. */
struct notice {
    char body[256], header[160];
};

/* The notification of amount with txn for order o, signed with the pay
 * secret: the request, whose strings are n's. */
static struct it_req notice_make(struct notice *n, int64_t o, int64_t amount,
                                 const char *txn)
{
    unsigned char key[32], mac[crypto_auth_hmacsha256_BYTES];
    char hex[2 * sizeof(mac) + 1];

    snprintf(n->body, sizeof(n->body),
             "{\"orderId\":\"%lld\",\"amount\":%lld,\"txnId\":\"%s\"}",
             (long long)o, (long long)amount, txn);
    assert_int_equal(
        0, sodium_hex2bin(key, sizeof(key), SECRET, 64, NULL, NULL, NULL));
    crypto_auth_hmacsha256(mac, (const unsigned char *)n->body, strlen(n->body),
                           key);
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    snprintf(n->header, sizeof(n->header), "X-Signature: %s", hex);
    return (struct it_req){.method = "POST",
                           .path = "/api/payments/notify",
                           .body = n->body,
                           .header = n->header};
}

/* A payment notification of amount with txn for order o on s, signed
 * with the pay secret: the status. */
static long notify(const struct it_server *s, int64_t o, int64_t amount,
                   const char *txn)
{
    struct notice n;
    struct it_req req = notice_make(&n, o, amount, txn);
    struct it_resp resp;
    long st;

    st = it_http_do(s, &req, &resp);
    it_resp_free(&resp);
    return st;
}

/* 300 buyers x 3 requests on each of two vouchers, one on each shard,
 * all at once: each shard's tables keep the invariants. */
static void crowd_on_shards(const struct it_server *s, const int64_t *v,
                            const int *on)
{
    struct it_req *reqs = xcalloc(CROWD_REQUESTS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(CROWD_REQUESTS, sizeof(*resps));
    const struct it_server **to = xcalloc(CROWD_REQUESTS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(CROWD_USERS, sizeof(*tokens));
    char paths[CROWD_VOUCHERS][64];
    size_t created[CROWD_VOUCHERS] = {0};
    int64_t t0;

    for (int k = 0; k < CROWD_VOUCHERS; k++)
        snprintf(paths[k], sizeof(paths[k]), "/api/vouchers/%lld/seckill",
                 (long long)v[k]);
    for (size_t u = 0; u < CROWD_USERS; u++)
        it_token(SHARD_USER_BASE + (int64_t)u, TOKEN_ROLE_USER, 3600,
                 tokens[u]);
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        reqs[i].method = "POST";
        reqs[i].path = paths[i % CROWD_VOUCHERS];
        reqs[i].token = tokens[(i / CROWD_VOUCHERS) % CROWD_USERS];
        to[i] = s;
    }
    t0 = util_mono_ms();
    it_http_run_all(reqs, to, resps, CROWD_REQUESTS);
    print_message("%d purchases on two shards in %lld ms\n", CROWD_REQUESTS,
                  (long long)(util_mono_ms() - t0));
    for (size_t i = 0; i < CROWD_REQUESTS; i++) {
        struct it_resp *r = &resps[i];
        int k = (int)(i % CROWD_VOUCHERS);
        const char *code;

        if (r->status == 201) {
            int64_t o = it_json_id(r->json, "orderId");

            /* Its order, on the voucher's shard. */
            assert_int_equal((int)idgen_shard_of(o), on[k]);
            assert_int_equal(1, order_status(on[k], o));
            assert_int_equal(v[k], sales_scalar(on[k],
                                                "SELECT voucher_id FROM "
                                                "voucher_orders WHERE id = "
                                                "%lld",
                                                (long long)o));
            created[k]++;
        } else {
            code = it_json_str(json_object_get(r->json, "error"), "code");
            if (!(r->status == 409 && code &&
                  (!strcmp(code, "SOLD_OUT") ||
                   !strcmp(code, "ALREADY_PURCHASED"))) &&
                r->status != 429) {
                print_error("purchase %zu: %ld %s\n", i, r->status,
                            r->body ? r->body : "");
                fail();
            }
        }
        it_resp_free(r);
    }
    for (int k = 0; k < CROWD_VOUCHERS; k++) {
        assert_int_equal(CROWD_STOCK, created[k]);
        assert_int_equal(0, sales_scalar(on[k],
                                         "SELECT stock FROM seckill_vouchers "
                                         "WHERE voucher_id = %lld",
                                         (long long)v[k]));
        assert_voucher_whole(v[k], on[k], CROWD_STOCK);
    }
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
}

/* The ids of a buyer's orders, page after page of 2 (GET /api/orders). */
static size_t my_orders(const struct it_server *s, int64_t user, int64_t *out,
                        size_t max)
{
    char path[96] = "/api/orders?limit=2";
    size_t n = 0;

    for (int pages = 0; pages < 20; pages++) {
        struct it_resp resp;
        const json_t *items, *next, *it;
        size_t i;

        assert_int_equal(200, get_as(s, path, user, &resp));
        items = json_object_get(resp.json, "items");
        assert_true(json_array_size(items) <= 2);
        json_array_foreach(items, i, it)
        {
            assert_true(n < max);
            out[n++] = it_json_id(it, "id");
        }
        next = json_object_get(resp.json, "nextCursor");
        if (json_is_null(next)) {
            it_resp_free(&resp);
            return n;
        }
        assert_int_equal(2, json_array_size(items));
        snprintf(path, sizeof(path), "/api/orders?limit=2&cursor=%s",
                 json_string_value(next));
        it_resp_free(&resp);
    }
    fail_msg("more than 20 pages");
    return n;
}

static void test_sales_on_shards(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], one[ENV_CAP], path[96],
        *out;
    struct it_server srv = {0}, quick = {0};
    struct it_resp resp = {0};
    int64_t shop = it_unique(), old_v, old_o, v[4], crowd_v[2], mine[8], got[8],
            o;
    int on[4], crowd_on[2], used[SHARDS] = {0};
    int64_t buyer = SHARD_USER_BASE + 1000 + it_unique() % 1000;
    (void)state;

    make_db("sales");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "sales", u0, sizeof(u0)),
             url_on(1, "sales", u1, sizeof(u1)));
    snprintf(one, sizeof(one), "SECKILL_MYSQL_SHARDS=%s", u0);
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(run("sales-migrate", "migrate", env, &out), 0);
        free(out);
    }

    /* Before sharding: shard 0 alone, AUTO_INCREMENT voucher ids and the
     * ID worker's order ids as they are. */
    {
        const char *const env[] = {SERVE_ENV(redis_env), one, NULL};

        assert_int_equal(it_server_start(&srv, "shards-before", env), 0);
        old_v = it_seckill_create(&srv, shop, 5, -60, 3600);
        old_o = it_buy(&srv, old_v, buyer);
        assert_int_equal(it_server_stop(&srv), 0);
    }
    assert_false(idgen_is_sharded(old_v));
    assert_false(idgen_is_sharded(old_o));
    assert_true(old_v < 1000000);

    /* Two shards: a normal instance and one whose orders must be paid
     * within 2 s (for the expiry), both on the same shards. */
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, NULL};
        const char *const env_quick[] = {SERVE_ENV(redis_env), shards,
                                         "SECKILL_PAY_TIMEOUT_S=2", NULL};

        assert_int_equal(it_server_start(&srv, "shards-two", env), 0);
        assert_int_equal(it_server_start(&quick, "shards-quick", env_quick), 0);
    }

    /* New vouchers: sharded ids, on both shards, each on the one its id
     * names and nowhere else. */
    for (int k = 0; k < 4; k++) {
        v[k] = it_seckill_create(&srv, shop, 10, -60, 3600);
        assert_true(idgen_is_sharded(v[k]));
        on[k] = voucher_shard(v[k]);
        assert_int_equal((int)idgen_shard_of(v[k]), on[k]);
        used[on[k]]++;
        snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v[k]);
        assert_int_equal(200, get_as(&srv, path, buyer, &resp));
        assert_int_equal(v[k], it_json_id(resp.json, "id"));
        assert_int_equal(
            10, json_integer_value(json_object_get(resp.json, "stock")));
        it_resp_free(&resp);
    }
    for (int i = 0; i < SHARDS; i++)
        assert_true(used[i] > 0);

    /* The old voucher still sells, on shard 0, and its old order reads. */
    o = it_buy(&srv, old_v, buyer + 1);
    assert_int_equal(0, (int)idgen_shard_of(o));
    assert_int_equal(1, order_status(0, o));
    assert_int_equal(-1, order_status(1, o));
    assert_voucher_whole(old_v, 0, 5);
    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)old_o);
    assert_int_equal(200, get_as(&srv, path, buyer, &resp));
    assert_int_equal(old_v, it_json_id(resp.json, "voucherId"));
    it_resp_free(&resp);

    /* The admin's list of the shop's vouchers has them all, newest
     * first, from both shards. */
    snprintf(path, sizeof(path), "/api/vouchers?shopId=%lld&limit=100",
             (long long)shop);
    assert_int_equal(200, get_as(&srv, path, 0, &resp));
    {
        const json_t *items = json_object_get(resp.json, "items");

        assert_int_equal(5, json_array_size(items));
        for (int k = 0; k < 4; k++)
            assert_int_equal(
                v[3 - k], it_json_id(json_array_get(items, (size_t)k), "id"));
        assert_int_equal(old_v, it_json_id(json_array_get(items, 4), "id"));
    }
    it_resp_free(&resp);

    /* My orders: bought on the shards in turn, read back merged, newest
     * first, two a page. */
    mine[0] = old_o;
    for (int k = 0; k < 4; k++) {
        mine[k + 1] = it_buy(&srv, v[k], buyer);
        assert_int_equal((int)idgen_shard_of(mine[k + 1]), on[k]);
        snprintf(path, sizeof(path), "/api/orders/%lld",
                 (long long)mine[k + 1]);
        assert_int_equal(200, get_as(&srv, path, buyer, &resp));
        assert_int_equal(v[k], it_json_id(resp.json, "voucherId"));
        it_resp_free(&resp);
    }
    assert_int_equal(5, my_orders(&srv, buyer, got, 8));
    for (int k = 0; k < 5; k++)
        assert_int_equal(mine[4 - k], got[k]);

    /* Pay and cancel on shard 1, there. */
    {
        int k1 = on[0] == 1 ? 0 : on[1] == 1 ? 1 : on[2] == 1 ? 2 : 3;
        int64_t paid = it_buy(&srv, v[k1], buyer + 2);
        int64_t gone = it_buy(&srv, v[k1], buyer + 3);

        assert_int_equal(1, idgen_shard_of(paid));
        assert_int_equal(200, order_act(&srv, paid, "pay", buyer + 2));
        assert_int_equal(2, order_status(1, paid));
        assert_int_equal(200, order_act(&srv, gone, "cancel", buyer + 3));
        assert_int_equal(4, order_status(1, gone));
        assert_voucher_whole(v[k1], 1, 10);

        /* Shard 0's rows that shard 1's transactions decided on: the
         * refund of a payment for the cancelled order, the voucher's
         * audit record. */
        snprintf(path, sizeof(path), "late-%lld", (long long)gone);
        assert_int_equal(409, notify(&srv, gone, 4750, path));
        assert_int_equal(4, order_status(1, gone));
        assert_int_equal(1, sales_scalar(0,
                                         "SELECT COUNT(*) FROM refunds WHERE "
                                         "order_id = %lld AND txn_id = '%s'",
                                         (long long)gone, path));
        assert_int_equal(0, sales_scalar(1,
                                         "SELECT COUNT(*) FROM refunds WHERE "
                                         "order_id = %lld",
                                         (long long)gone));
        assert_int_equal(1, sales_scalar(0,
                                         "SELECT COUNT(*) FROM audit_log "
                                         "WHERE action = 'voucher.create' "
                                         "AND target_id = %lld",
                                         (long long)v[k1]));
        assert_int_equal(0, sales_scalar(1, "SELECT COUNT(*) FROM audit_log"));

        /* Expiry on shard 1: an order of the quick instance, unpaid. */
        o = it_buy(&quick, v[k1], buyer + 4);
        assert_int_equal(1, idgen_shard_of(o));
        for (int t = 0; t < 100 && order_status(1, o) == 1; t++)
            usleep(100 * 1000);
        assert_int_equal(7, order_status(1, o));
        assert_voucher_whole(v[k1], 1, 10);
    }

    /* The crowd: a fresh voucher on each shard, sold out at once. */
    for (int k = 0; k < 2;) {
        int64_t c = it_seckill_create(&srv, shop, CROWD_STOCK, -60, 3600);
        int i = voucher_shard(c);

        if (k == 0 || i != crowd_on[0]) {
            crowd_v[k] = c;
            crowd_on[k++] = i;
        }
    }
    crowd_on_shards(&srv, crowd_v, crowd_on);

    assert_int_equal(it_server_stop(&quick), 0);
    assert_int_equal(it_server_stop(&srv), 0);
}

/* How many orders of voucher v shard i has, of any status. */
static int64_t orders_of(int i, int64_t v)
{
    return sales_scalar(i,
                        "SELECT COUNT(*) FROM voucher_orders WHERE "
                        "voucher_id = %lld",
                        (long long)v);
}

/* Wait up to 15 s for shard i to have n orders of voucher v and no unit
 * of it owed to Redis; asserts. */
static void await_written(int i, int64_t v, int64_t n)
{
    int64_t until = util_mono_ms() + 15000;

    while ((orders_of(i, v) != n ||
            sales_scalar(i,
                         "SELECT COUNT(*) FROM async_unit_returns WHERE "
                         "voucher_id = %lld",
                         (long long)v) != 0) &&
           util_mono_ms() < until)
        usleep(50 * 1000);
    assert_int_equal(n, orders_of(i, v));
    assert_int_equal(0, sales_scalar(i,
                                     "SELECT COUNT(*) FROM async_unit_returns "
                                     "WHERE voucher_id = %lld",
                                     (long long)v));
}

/* Buy async voucher v as user on s: the pending order's id (202). */
static int64_t buy_pending(const struct it_server *s, int64_t v, int64_t user)
{
    struct it_resp resp;
    int64_t id;

    it_purchase(s, v, user, &resp);
    it_assert_status(&resp, 202);
    id = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    return id;
}

static void test_async_on_shards(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], *out;
    struct it_server srv = {0};
    struct it_resp resp = {0};
    int64_t shop = it_unique(), v[2], o[2][3];
    int64_t user = SHARD_USER_BASE + 5000 + (it_unique() % 1000) * 10;
    int on[2];
    (void)state;

    sales_db = "async";
    make_db("async");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "async", u0, sizeof(u0)),
             url_on(1, "async", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(run("async-migrate", "migrate", env, &out), 0);
        free(out);
    }
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards,
                                   "SECKILL_PURCHASE_MODE=async",
                                   "SECKILL_ASYNC_ACCEPT_LOSS=1", NULL};

        assert_int_equal(it_server_start(&srv, "shards-async", env), 0);
    }
    /* A sale on each shard. */
    for (int k = 0; k < 2;) {
        int64_t c = it_seckill_create(&srv, shop, 3, -60, 3600);
        int i = voucher_shard(c);

        assert_int_equal(1, sales_scalar(i,
                                         "SELECT purchase_mode FROM "
                                         "seckill_vouchers WHERE voucher_id = "
                                         "%lld",
                                         (long long)c));
        if (k == 0 || i != on[0]) {
            v[k] = c;
            on[k++] = i;
        }
    }
    /* Each sold out in Redis; the writer puts its orders on its shard. */
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 3; j++) {
            o[k][j] = buy_pending(&srv, v[k], user + j);
            assert_int_equal(on[k], (int)idgen_shard_of(o[k][j]));
        }
        it_purchase(&srv, v[k], user + 3, &resp);
        it_assert_error(&resp, 409, "SOLD_OUT");
        it_resp_free(&resp);
    }
    for (int k = 0; k < 2; k++) {
        await_written(on[k], v[k], 3);
        for (int j = 0; j < 3; j++)
            assert_int_equal(1, order_status(on[k], o[k][j]));
        assert_voucher_whole(v[k], on[k], 3);
    }

    /* A cancel on shard 1 gives its unit back to Redis: another buyer
     * gets it, written on shard 1. */
    {
        int k = on[0] == 1 ? 0 : 1;
        int64_t again;

        assert_int_equal(200, order_act(&srv, o[k][0], "cancel", user));
        assert_int_equal(4, order_status(1, o[k][0]));
        await_written(1, v[k], 3);
        again = buy_pending(&srv, v[k], user + 4);
        assert_int_equal(1, (int)idgen_shard_of(again));
        await_written(1, v[k], 4);
        assert_int_equal(1, order_status(1, again));
        assert_voucher_whole(v[k], 1, 3);
    }
    assert_int_equal(it_server_stop(&srv), 0);
    sales_db = "sales";
}

/*
 * The sharded layout keeps IDGEN_SHARDED_SEQ_MAX order ids a UTC day (26
 * bits of the day counter). Past them a purchase is a 503 UNAVAILABLE
 * that says why and wrote nothing, not a 500. The instance takes its ids
 * from keys of its own (SECKILL_REDIS_PREFIX), so the other tests'
 * counters are untouched.
 */
static void test_ids_of_the_day_run_out(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], key[96];
    struct it_server srv = {0};
    struct it_resp resp = {0};
    int64_t shop = it_unique(), v;
    int64_t user = SHARD_USER_BASE + 9000 + it_unique() % 1000;
    const char *msg;
    redisContext *rc;
    redisReply *r;
    struct tm tm;
    time_t now;
    int on;
    (void)state;

    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "sales", u0, sizeof(u0)),
             url_on(1, "sales", u1, sizeof(u1)));
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards,
                                   "SECKILL_REDIS_PREFIX=ids-out:", NULL};

        assert_int_equal(it_server_start(&srv, "shards-ids-out", env), 0);
    }
    v = it_seckill_create(&srv, shop, 3, -60, 3600);
    on = voucher_shard(v);

    /* Today's order counter (the day of Redis' clock) at its last id. */
    rc = redisConnect("127.0.0.1", redis_port);
    assert_true(rc && !rc->err);
    r = redisCommand(rc, "TIME");
    assert_true(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    now = (time_t)strtoll(r->element[0]->str, NULL, 10);
    freeReplyObject(r);
    gmtime_r(&now, &tm);
    snprintf(key, sizeof(key), "ids-out:icr:{order}:%04d:%02d:%02d",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    r = redisCommand(rc, "SET %s %u EX 86400", key,
                     (unsigned)IDGEN_SHARDED_SEQ_MAX);
    assert_non_null(r);
    freeReplyObject(r);
    redisFree(rc);

    it_purchase(&srv, v, user, &resp);
    it_assert_error(&resp, 503, "UNAVAILABLE");
    msg = it_json_str(json_object_get(resp.json, "error"), "message");
    assert_non_null(msg);
    assert_non_null(strstr(msg, "order ids"));
    it_resp_free(&resp);
    assert_int_equal(3, sales_scalar(on,
                                     "SELECT stock FROM seckill_vouchers "
                                     "WHERE voucher_id = %lld",
                                     (long long)v));
    assert_int_equal(0, sales_scalar(on,
                                     "SELECT COUNT(*) FROM voucher_orders "
                                     "WHERE voucher_id = %lld",
                                     (long long)v));
    assert_int_equal(it_server_stop(&srv), 0);
}

/* POST a seckill voucher of shop on s: the status (0 when the instance
 * died before answering). */
static long create_status(const struct it_server *s, int64_t shop)
{
    char begin[UTIL_TIME_LEN], end[UTIL_TIME_LEN], admin[TOKEN_STR_LEN];
    struct it_resp resp;
    char *body;
    long st;

    body = xasprintf("{\"shopId\":%lld,\"title\":\"outbox\","
                     "\"subTitle\":\"sub\",\"rules\":\"one per user\","
                     "\"payValue\":4750,\"actualValue\":5000,"
                     "\"type\":\"seckill\",\"stock\":5,"
                     "\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
                     (long long)shop, it_time(-60, begin), it_time(3600, end));
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin);
    st = it_http(s, "POST", "/api/vouchers", body, admin, &resp);
    it_resp_free(&resp);
    free(body);
    return st;
}

/* Start the failpoint build (SECKILL_FP_BIN) on the shards with
 * failpoints fps. */
static void start_fp(struct it_server *srv, const char *tag, const char *shards,
                     const char *fps)
{
    const char *fp_bin = getenv("SECKILL_FP_BIN");
    char *bin = xstrdup(it_bin()), fpenv[128];

    if (!fp_bin || !*fp_bin)
        fail_msg("SECKILL_FP_BIN (the failpoint build's binary) is not set: "
                 "make test-cluster sets it");
    snprintf(fpenv, sizeof(fpenv), "SECKILL_FAILPOINTS=%s", fps);
    setenv("SECKILL_BIN", fp_bin, 1);
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, fpenv, NULL};

        assert_int_equal(it_server_start(srv, tag, env), 0);
    }
    setenv("SECKILL_BIN", bin, 1);
    free(bin);
}

/* Wait up to 10 s for the count sql reads on shard i to be want. */
static void await_count(int i, int64_t want, const char *sql)
{
    int64_t n = -1;

    for (int t = 0; t < 100; t++) {
        if ((n = sales_scalar(i, "%s", sql)) == want)
            return;
        usleep(100 * 1000);
    }
    fail_msg("shard %d: %s: %lld, not %lld after 10 s", i, sql, (long long)n,
             (long long)want);
}

/*
 * The rows of shard 0 that a transaction of shard 1 decided on (the audit
 * record of a voucher made there, the refund of a payment for an order
 * cancelled there) survive an instance killed between the shard's commit
 * and their arrival on shard 0, and one killed after they arrived but
 * before the shard forgot them: an instance started afterwards brings
 * each to shard 0 exactly once. The kills are failpoints of the failpoint
 * build (SECKILL_FP_BIN). Runs last: it reads its own databases.
 */
static void test_shard0_rows_survive_a_crash(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], sql[256], txn[64], *out;
    struct it_server srv = {0};
    int64_t shop = it_unique(), v, o;
    int64_t buyer = SHARD_USER_BASE + 8000 + it_unique() % 1000;
    long st = 201;
    (void)state;

    sales_db = "outbox";
    make_db("outbox");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "outbox", u0, sizeof(u0)),
             url_on(1, "outbox", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(run("outbox-migrate", "migrate", env, &out), 0);
        free(out);
    }

    /* A voucher made on shard 1: killed once it committed there, before
     * its audit record reached shard 0. */
    start_fp(&srv, "outbox-kill-1", shards, "shard0_rows_before_move=kill");
    for (int k = 0; k < 4 && st == 201; k++)
        st = create_status(&srv, shop);
    assert_int_equal(0, st);
    for (int t = 0; t < 50 && it_server_alive(&srv); t++)
        usleep(100 * 1000);
    assert_false(it_server_alive(&srv));
    v = sales_scalar(1, "SELECT COALESCE(MAX(id), 0) FROM vouchers");
    assert_true(v > 0);
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM audit_log WHERE action = "
             "'voucher.create' AND target_id = %lld",
             (long long)v);
    assert_int_equal(0, sales_scalar(0, "%s", sql));

    /* Started again, the instance brings it to shard 0, once. */
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, NULL};

        assert_int_equal(it_server_start(&srv, "outbox-after-1", env), 0);
    }
    await_count(0, 1, sql);
    await_count(1, 0, "SELECT COUNT(*) FROM shard_outbox");
    assert_int_equal(0, sales_scalar(1, "SELECT COUNT(*) FROM audit_log"));

    /* An order on that voucher, cancelled; then its late payment, whose
     * refund is shard 0's: killed after the refund reached shard 0 and
     * before shard 1 forgot it. */
    o = it_buy(&srv, v, buyer);
    assert_int_equal(1, idgen_shard_of(o));
    assert_int_equal(200, order_act(&srv, o, "cancel", buyer));
    assert_int_equal(it_server_stop(&srv), 0);
    start_fp(&srv, "outbox-kill-2", shards, "shard0_rows_before_forget=kill");
    snprintf(txn, sizeof(txn), "late-%lld", (long long)o);
    assert_int_equal(0, notify(&srv, o, 4750, txn));
    for (int t = 0; t < 50 && it_server_alive(&srv); t++)
        usleep(100 * 1000);
    assert_false(it_server_alive(&srv));
    assert_int_equal(1, sales_scalar(1, "SELECT COUNT(*) FROM shard_outbox"));
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, NULL};

        assert_int_equal(it_server_start(&srv, "outbox-after-2", env), 0);
    }
    await_count(1, 0, "SELECT COUNT(*) FROM shard_outbox");
    snprintf(sql, sizeof(sql),
             "SELECT COUNT(*) FROM refunds WHERE order_id = %lld AND "
             "txn_id = '%s' AND amount = 4750",
             (long long)o, txn);
    assert_int_equal(1, sales_scalar(0, "%s", sql));
    assert_int_equal(0, sales_scalar(1, "SELECT COUNT(*) FROM refunds"));
    assert_int_equal(4, order_status(1, o));
    assert_voucher_whole(v, 1, 5);
    assert_int_equal(it_server_stop(&srv), 0);
    sales_db = "sales";
}

/* ---- a provider's transaction pays one order, over every shard ---- */

#define TXN_STOCK 20
#define TXN_PAIRS 6

/* Vouchers of shop made on s until each shard has one: v[i] is shard
 * i's (asserts). */
static void voucher_per_shard(const struct it_server *s, int64_t shop,
                              int64_t *v)
{
    int have = 0;

    for (int i = 0; i < SHARDS; i++)
        v[i] = 0;
    for (int k = 0; k < 4 * SHARDS && have < SHARDS; k++) {
        int64_t x = it_seckill_create(s, shop, TXN_STOCK, -60, 3600);
        int i = voucher_shard(x);

        if (!v[i]) {
            v[i] = x;
            have++;
        }
    }
    assert_int_equal(SHARDS, have);
}

/* How many orders of every shard the transaction txn paid. */
static int64_t paid_with(const char *txn)
{
    int64_t n = 0;

    for (int i = 0; i < SHARDS; i++)
        n += sales_scalar(i,
                          "SELECT COUNT(*) FROM voucher_orders WHERE txn_id "
                          "= '%s'",
                          txn);
    return n;
}

/* How many refunds of txn there are, on shard 0 or on their way there. */
static int64_t refunds_of(const char *txn)
{
    int64_t n = 0;

    for (int i = 0; i < SHARDS; i++)
        n += sales_scalar(i, "SELECT COUNT(*) FROM refunds WHERE txn_id = '%s'",
                          txn) +
             sales_scalar(i,
                          "SELECT COUNT(*) FROM shard_outbox WHERE txn_id = "
                          "'%s'",
                          txn);
    return n;
}

/* Migrate the scratch databases name on both shards and point
 * SECKILL_MYSQL_SHARDS at them (into shards, ENV_CAP bytes). */
static void shards_ready(const char *name, char *shards)
{
    char u0[URL_CAP], u1[URL_CAP], *out;

    sales_db = name;
    make_db(name);
    snprintf(shards, ENV_CAP, "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, name, u0, sizeof(u0)), url_on(1, name, u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(run(name, "migrate", env, &out), 0);
        free(out);
    }
}

/*
 * TXN_PAIRS pairs of orders, one on each shard's voucher v[i], bought on
 * buy by buyers from first on: each pair's two notifications with one
 * txnId, every one sent to pay at once. Exactly one order of each pair
 * is paid (200), the other refused (400) and unpaid; nothing to refund.
 */
static void pairs_at_once(const struct it_server *buy,
                          const struct it_server *pay, const int64_t *v,
                          int64_t first)
{
    struct notice n[2 * TXN_PAIRS];
    struct it_req reqs[2 * TXN_PAIRS];
    struct it_resp resps[2 * TXN_PAIRS];
    const struct it_server *to[2 * TXN_PAIRS];
    int64_t q[TXN_PAIRS][SHARDS];
    char txns[TXN_PAIRS][64];

    for (int k = 0; k < TXN_PAIRS; k++) {
        for (int i = 0; i < SHARDS; i++)
            q[k][i] = it_buy(buy, v[i], first + k);
        snprintf(txns[k], sizeof(txns[k]), "pair-%lld", (long long)q[k][0]);
        for (int i = 0; i < SHARDS; i++) {
            reqs[2 * k + i] =
                notice_make(&n[2 * k + i], q[k][i], 4750, txns[k]);
            to[2 * k + i] = pay;
        }
    }
    it_http_run_all(reqs, to, resps, 2 * TXN_PAIRS);
    for (int k = 0; k < TXN_PAIRS; k++) {
        long a = resps[2 * k].status, b = resps[2 * k + 1].status;

        if (!((a == 200 && b == 400) || (a == 400 && b == 200)))
            fail_msg("pair %d: %ld and %ld, not one 200 and one 400", k, a, b);
        assert_int_equal(1, paid_with(txns[k]));
        for (int i = 0; i < SHARDS; i++)
            assert_int_equal(resps[2 * k + i].status == 200 ? 2 : 1,
                             order_status(i, q[k][i]));
        assert_int_equal(0, refunds_of(txns[k]));
    }
    for (int k = 0; k < 2 * TXN_PAIRS; k++)
        it_resp_free(&resps[k]);
}

/*
 * The provider's transaction id names one payment, so it pays one order
 * wherever the orders live: the same txnId notified for an order of
 * shard 0 and then for one of shard 1 (and the other way round) pays the
 * first, and the second is the 400 of a transaction that paid another
 * order: unpaid, and nothing to refund. Each notification again gets the
 * same answer and changes nothing; the refused order is paid by a
 * transaction of its own. Then pairs notified at once, one order on each
 * shard and one txnId a pair (pairs_at_once()), merged with others and
 * alone.
 */
static void test_txn_pays_one_order_over_shards(void **state)
{
    char shards[ENV_CAP], txn[64], own[64];
    struct it_server srv = {0}, alone = {0};
    int64_t shop = it_unique(), v[SHARDS], o[SHARDS], p[SHARDS];
    int64_t buyer = SHARD_USER_BASE + 20000 + (it_unique() % 1000) * 100;
    (void)state;

    shards_ready("txn", shards);
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, NULL};

        assert_int_equal(it_server_start(&srv, "shards-txn", env), 0);
    }
    voucher_per_shard(&srv, shop, v);

    /* Shard 0's order first, then shard 1's. */
    for (int i = 0; i < SHARDS; i++)
        o[i] = it_buy(&srv, v[i], buyer);
    snprintf(txn, sizeof(txn), "one-%lld", (long long)o[0]);
    assert_int_equal(200, notify(&srv, o[0], 4750, txn));
    assert_int_equal(400, notify(&srv, o[1], 4750, txn));
    assert_int_equal(2, order_status(0, o[0]));
    assert_int_equal(1, order_status(1, o[1]));
    assert_int_equal(1, paid_with(txn));
    assert_int_equal(200, notify(&srv, o[0], 4750, txn));
    assert_int_equal(400, notify(&srv, o[1], 4750, txn));
    assert_int_equal(1, paid_with(txn));
    assert_int_equal(0, refunds_of(txn));

    /* Shard 1's first, then shard 0's. */
    for (int i = 0; i < SHARDS; i++)
        p[i] = it_buy(&srv, v[i], buyer + 1);
    snprintf(txn, sizeof(txn), "two-%lld", (long long)p[1]);
    assert_int_equal(200, notify(&srv, p[1], 4750, txn));
    assert_int_equal(400, notify(&srv, p[0], 4750, txn));
    assert_int_equal(2, order_status(1, p[1]));
    assert_int_equal(1, order_status(0, p[0]));
    assert_int_equal(1, paid_with(txn));
    assert_int_equal(0, refunds_of(txn));

    /* The refused orders are paid by transactions of their own. */
    snprintf(own, sizeof(own), "own-%lld", (long long)o[1]);
    assert_int_equal(200, notify(&srv, o[1], 4750, own));
    assert_int_equal(2, order_status(1, o[1]));
    snprintf(own, sizeof(own), "own-%lld", (long long)p[0]);
    assert_int_equal(200, notify(&srv, p[0], 4750, own));
    assert_int_equal(2, order_status(0, p[0]));

    /* Pairs at once, merged in the shards' lanes; then on an instance
     * whose lanes hold one call, so that some run alone. */
    pairs_at_once(&srv, &srv, v, buyer + 2);
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards,
                                   "SECKILL_QUEUE_MAX=1", NULL};

        assert_int_equal(it_server_start(&alone, "shards-txn-alone", env), 0);
    }
    pairs_at_once(&srv, &alone, v, buyer + 2 + TXN_PAIRS);
    assert_int_equal(it_server_stop(&alone), 0);
    for (int i = 0; i < SHARDS; i++)
        assert_voucher_whole(v[i], i, TXN_STOCK);
    assert_int_equal(it_server_stop(&srv), 0);
    sales_db = "sales";
}

struct late_notice {
    const struct it_server *srv;
    int64_t order;
    const char *txn;
    long status;
};

static void *late_notice_send(void *arg)
{
    struct late_notice *n = arg;

    n->status = notify(n->srv, n->order, 4750, n->txn);
    return NULL;
}

/*
 * A payment is decided when its order is locked and found in time; what
 * follows (here the transaction's reservation on shard 0, held up by
 * another session past the deadline) does not make it late. The order
 * is paid, and its pay time is the moment it was decided: never after
 * its deadline, as the order history and the expiry both read it.
 */
static void test_pay_time_is_the_decision(void **state)
{
    char shards[ENV_CAP], txn[64], db[96], sql[256];
    struct it_server srv = {0};
    int64_t shop = it_unique(), v[SHARDS], o, left_ms;
    int64_t buyer = SHARD_USER_BASE + 40000 + (it_unique() % 1000) * 10;
    struct late_notice n = {0};
    pthread_t t;
    MYSQL *blocker;
    (void)state;

    shards_ready("paytime", shards);
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards,
                                   "SECKILL_PAY_TIMEOUT_S=3", NULL};

        assert_int_equal(it_server_start(&srv, "shards-paytime", env), 0);
    }
    voucher_per_shard(&srv, shop, v);
    o = it_buy(&srv, v[1], buyer);
    snprintf(txn, sizeof(txn), "late-%lld", (long long)o);

    /* Another session holds the reservation's row until after the
     * deadline. */
    blocker = shard_connect(0);
    snprintf(sql, sizeof(sql), "USE `%s`", db_name(sales_db, db, sizeof(db)));
    assert_int_equal(0, mysql_query(blocker, sql));
    assert_int_equal(0, mysql_query(blocker, "START TRANSACTION"));
    snprintf(sql, sizeof(sql),
             "INSERT INTO payment_txns (txn_id, order_id) VALUES ('%s', %lld)",
             txn, (long long)o);
    assert_int_equal(0, mysql_query(blocker, sql));

    left_ms = sales_scalar(1,
                           "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), "
                           "pay_deadline) DIV 1000 FROM voucher_orders WHERE "
                           "id = %lld",
                           (long long)o);
    assert_true(left_ms > 1000);
    usleep((useconds_t)(left_ms - 700) * 1000);
    n = (struct late_notice){&srv, o, txn, 0};
    assert_int_equal(0, pthread_create(&t, NULL, late_notice_send, &n));
    usleep(1500 * 1000); /* the deadline passes meanwhile */
    assert_int_equal(0, mysql_query(blocker, "ROLLBACK"));
    mysql_close(blocker);
    pthread_join(t, NULL);

    assert_int_equal(200, n.status);
    assert_int_equal(2, order_status(1, o));
    /* Milliseconds from the pay time to the deadline: not negative. */
    left_ms = sales_scalar(1,
                           "SELECT TIMESTAMPDIFF(MICROSECOND, pay_time, "
                           "pay_deadline) DIV 1000 FROM voucher_orders WHERE "
                           "id = %lld",
                           (long long)o);
    if (left_ms < 0)
        fail_msg("order %lld paid %lld ms after its deadline", (long long)o,
                 (long long)-left_ms);
    assert_int_equal(it_server_stop(&srv), 0);
}

/*
 * An instance killed after a payment's transaction id was reserved for
 * its order and before the order's shard recorded the payment (the
 * failpoint pay_txn_reserved of the failpoint build, SECKILL_FP_BIN):
 * the order is unpaid, the reservation its own, so the provider's retry
 * of the same notification pays it; the transaction still pays no other
 * order.
 */
static void test_txn_reserved_then_crash(void **state)
{
    char shards[ENV_CAP], txn[64];
    struct it_server srv = {0};
    int64_t shop = it_unique(), v[SHARDS], q[SHARDS];
    int64_t buyer = SHARD_USER_BASE + 30000 + (it_unique() % 1000) * 10;
    (void)state;

    shards_ready("txnkill", shards);
    start_fp(&srv, "txn-kill", shards, "pay_txn_reserved=kill");
    voucher_per_shard(&srv, shop, v);
    for (int i = 0; i < SHARDS; i++)
        q[i] = it_buy(&srv, v[i], buyer);
    snprintf(txn, sizeof(txn), "kill-%lld", (long long)q[1]);
    assert_int_equal(0, notify(&srv, q[1], 4750, txn));
    for (int t = 0; t < 50 && it_server_alive(&srv); t++)
        usleep(100 * 1000);
    assert_false(it_server_alive(&srv));
    /* Reserved for the order on shard 0, not paid on shard 1. */
    assert_int_equal(q[1], sales_scalar(0,
                                        "SELECT order_id FROM payment_txns "
                                        "WHERE txn_id = '%s'",
                                        txn));
    assert_int_equal(1, order_status(1, q[1]));
    assert_int_equal(0, paid_with(txn));

    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, NULL};

        assert_int_equal(it_server_start(&srv, "txn-after-kill", env), 0);
    }
    assert_int_equal(400, notify(&srv, q[0], 4750, txn));
    assert_int_equal(1, order_status(0, q[0]));
    assert_int_equal(200, notify(&srv, q[1], 4750, txn));
    assert_int_equal(2, order_status(1, q[1]));
    assert_int_equal(200, notify(&srv, q[1], 4750, txn));
    assert_int_equal(1, paid_with(txn));
    assert_int_equal(0, refunds_of(txn));
    for (int i = 0; i < SHARDS; i++)
        assert_voucher_whole(v[i], i, TXN_STOCK);
    assert_int_equal(it_server_stop(&srv), 0);
    sales_db = "sales";
}

/* "mysql://user:pass@127.0.0.1:PORT/<db_prefix><name>": shard i's
 * credentials, through a proxy at port. */
static const char *url_via(int i, uint16_t port, const char *name, char *buf,
                           size_t cap)
{
    snprintf(buf, cap, "mysql://%s:%s@127.0.0.1:%u/%s%s", shard_url[i].user,
             shard_url[i].pass, port, db_prefix, name);
    return buf;
}

/* The bytes proxy p has forwarded so far. */
static int64_t proxy_bytes(const struct it_proxy *p)
{
    char reply[160];
    const char *b;

    assert_int_equal(0, it_proxy_ask(p, "stats", reply, sizeof(reply)));
    b = strstr(reply, "bytes=");
    assert_non_null(b);
    return strtoll(b + 6, NULL, 10);
}

/*
 * A buyer's orders are asked of every shard at once, not one shard after
 * the other: with shard 0's link stalled (a proxy that forwards nothing),
 * the list's statement still reaches shard 1 (its proxy forwards bytes
 * once the request is sent), and the page, once shard 0 answers again,
 * has the orders of both.
 */
static void test_orders_read_every_shard_at_once(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], shards[ENV_CAP], tok[TOKEN_STR_LEN],
        req[1024], *out = NULL;
    struct it_proxy px[SHARDS] = {0};
    struct it_server srv = {0};
    int64_t shop = it_unique(), v[SHARDS] = {0}, o[SHARDS];
    int64_t buyer = SHARD_USER_BASE + 7000 + it_unique() % 1000;
    int64_t before, after = -1;
    int fd;
    (void)state;

    sales_db = "fan";
    make_db("fan");
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_on(0, "fan", u0, sizeof(u0)),
             url_on(1, "fan", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), shards, NULL};

        assert_int_equal(run("fan-migrate", "migrate", env, &out), 0);
        free(out);
    }
    for (int i = 0; i < SHARDS; i++)
        assert_int_equal(0, it_proxy_start(&px[i], i ? "fan-1" : "fan-0",
                                           shard_url[i].hosts[0].port));
    snprintf(shards, sizeof(shards), "SECKILL_MYSQL_SHARDS=%s,%s",
             url_via(0, px[0].port, "fan", u0, sizeof(u0)),
             url_via(1, px[1].port, "fan", u1, sizeof(u1)));
    {
        const char *const env[] = {SERVE_ENV(redis_env), shards, NULL};

        assert_int_equal(it_server_start(&srv, "shards-fan", env), 0);
    }
    /* An order on each shard. */
    for (int k = 0; k < 4 && (!v[0] || !v[1]); k++) {
        int64_t x = it_seckill_create(&srv, shop, 5, -60, 3600);

        v[voucher_shard(x)] = x;
    }
    for (int i = 0; i < SHARDS; i++) {
        assert_true(v[i] > 0);
        o[i] = it_buy(&srv, v[i], buyer);
    }
    /* Every task thread's connections to both shards open (the list
     * reads both), so that the stalled shard is not met at a connect. */
    it_token(buyer, TOKEN_ROLE_USER, 3600, tok);
    {
        enum { WARM = 24 };
        struct it_req reqs[WARM];
        struct it_resp resps[WARM];
        const struct it_server *to[WARM];

        for (int k = 0; k < WARM; k++) {
            reqs[k] = (struct it_req){
                .method = "GET", .path = "/api/orders?limit=10", .token = tok};
            to[k] = &srv;
        }
        for (int r = 0; r < 3; r++) {
            it_http_run_all(reqs, to, resps, WARM);
            for (int k = 0; k < WARM; k++) {
                assert_int_equal(200, resps[k].status);
                it_resp_free(&resps[k]);
            }
        }
    }

    /* Shard 0 silent; the threads that talk to the shards on their own
     * (the expiry, the async writer) settle waiting for it. */
    assert_int_equal(0, it_proxy_ctl(&px[0], "stall"));
    usleep(1500 * 1000);
    before = proxy_bytes(&px[1]);
    snprintf(req, sizeof(req),
             "GET /api/orders?limit=10 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
             tok);
    fd = it_raw_connect(srv.port);
    assert_true(fd >= 0);
    assert_true(it_raw_send_str(fd, req));
    for (int t = 0; t < 30 && after <= before; t++) {
        usleep(100 * 1000);
        after = proxy_bytes(&px[1]);
    }
    assert_int_equal(0, it_proxy_ctl(&px[0], "heal"));
    assert_true(it_raw_read_to_close(fd, 10000, &out));
    close(fd);
    /* Shard 1 was asked while shard 0 was silent. */
    assert_true(after > before);
    assert_non_null(strstr(out, " 200 "));
    for (int i = 0; i < SHARDS; i++) {
        char id[32];

        snprintf(id, sizeof(id), "\"%lld\"", (long long)o[i]);
        assert_non_null(strstr(out, id));
    }
    free(out);
    assert_int_equal(it_server_stop(&srv), 0);
    for (int i = 0; i < SHARDS; i++)
        it_proxy_stop(&px[i]);
    sales_db = "sales";
}

/*
 * A database that was shard 0 of sharded sales has its vouchers'
 * AUTO_INCREMENT past the sharded ids it holds. Served alone again (a
 * list of one), a new voucher must not take the next AUTO_INCREMENT
 * value, whose low bits would name another shard once sales are sharded
 * again: it gets a sharded id of shard 0, and two shards find it there.
 */
static void test_auto_increment_in_the_sharded_range(void **state)
{
    char u0[URL_CAP], u1[URL_CAP], one[ENV_CAP], two[ENV_CAP], path[96], *out;
    struct it_server srv = {0};
    struct it_resp resp = {0};
    int64_t shop = it_unique(), v;
    (void)state;

    sales_db = "autoinc";
    make_db("autoinc");
    snprintf(one, sizeof(one), "SECKILL_MYSQL_SHARDS=%s",
             url_on(0, "autoinc", u0, sizeof(u0)));
    snprintf(two, sizeof(two), "SECKILL_MYSQL_SHARDS=%s,%s", u0,
             url_on(1, "autoinc", u1, sizeof(u1)));
    {
        const char *const env[] = {BASE_ENV(redis_env), two, NULL};

        assert_int_equal(run("autoinc-migrate", "migrate", env, &out), 0);
        free(out);
    }
    /* Where a sharded voucher id of shard 0 leaves the counter. */
    assert_int_equal(0, sales_scalar(0, "SELECT COUNT(*) FROM vouchers"));
    {
        char db[96], sql[256];

        snprintf(sql, sizeof(sql),
                 "ALTER TABLE `%s`.vouchers AUTO_INCREMENT = %llu",
                 db_name("autoinc", db, sizeof(db)),
                 (unsigned long long)((1ULL << IDGEN_SHARDED_BIT) +
                                      (1ULL << 20) * 64 + 1));
        shard_exec(0, "%s", sql);
    }
    {
        const char *const env[] = {SERVE_ENV(redis_env), one, NULL};

        assert_int_equal(it_server_start(&srv, "autoinc-one", env), 0);
    }
    v = it_seckill_create(&srv, shop, 3, -60, 3600);
    assert_true(idgen_is_sharded(v));
    assert_int_equal(0, (int)idgen_shard_of(v));
    assert_int_equal(it_server_stop(&srv), 0);
    {
        const char *const env[] = {SERVE_ENV(redis_env), two, NULL};

        assert_int_equal(it_server_start(&srv, "autoinc-two", env), 0);
    }
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);
    assert_int_equal(200, get_as(&srv, path, 1, &resp));
    it_resp_free(&resp);
    it_buy(&srv, v, SHARD_USER_BASE + 6000 + it_unique() % 1000);
    assert_voucher_whole(v, 0, 3);
    assert_int_equal(it_server_stop(&srv), 0);
    sales_db = "sales";
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_every_shard),
        cmocka_unit_test(test_migrate_stops_at_failing_shard),
        cmocka_unit_test(test_one_shard_as_before),
        cmocka_unit_test(test_refuses_both_urls),
        cmocka_unit_test(test_service_on_shards),
        cmocka_unit_test(test_sales_on_shards),
        cmocka_unit_test(test_async_on_shards),
        cmocka_unit_test(test_ids_of_the_day_run_out),
        cmocka_unit_test(test_shard0_rows_survive_a_crash),
        cmocka_unit_test(test_orders_read_every_shard_at_once),
        cmocka_unit_test(test_auto_increment_in_the_sharded_range),
        cmocka_unit_test(test_txn_pays_one_order_over_shards),
        cmocka_unit_test(test_txn_reserved_then_crash),
        cmocka_unit_test(test_pay_time_is_the_decision),
    };
    int failed;

    failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    return it_exit_status(failed);
}
