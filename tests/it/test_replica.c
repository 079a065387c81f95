/*
 * test_replica.c - a MariaDB read replica, with real replication between
 * two private MariaDB servers on loopback (a primary with a binary log, a
 * read-only replica following it by GTID) and seckilld given both
 * (SECKILL_MYSQL_URL, SECKILL_MYSQL_REPLICA_URL, a lag bound of 2 s).
 *
 * To see which server answered, the test changes rows on the replica
 * alone (sql_log_bin off there, so nothing flows back): a voucher title
 * that reads "on the replica" came from the replica. Voucher reads and
 * lists go to the replica; a voucher created a moment ago is still found
 * (read from the primary); a buyer's own orders and everything a purchase
 * reads come from the primary; the lag and whether the replica is used
 * are on /metrics; a replica that lags past the bound, and one that is
 * down, is skipped without a single failed request. With sales sharded
 * over two databases of the primary, shard 1's replica (the replica's
 * copy of its database) takes that shard's reads and is reported by its
 * shard on /metrics and /readyz.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "idgen/idgen.h"
#include "tests/it/harness.h"

#define DB "seckill_replica"
#define MAX_LAG "2"
/* How long the monitor (a look a second) may take to change its mind. */
#define NOTICE_MS 8000

struct mariadb {
    uint16_t port;
    pid_t pid;
    char dir[IT_PATH_MAX];
    char sock[IT_PATH_MAX];
    char log[IT_PATH_MAX + 8];
};

static struct mariadb primary, replica;
static struct it_server srv;
static char admin_token[TOKEN_STR_LEN];

/* Run sql as root over m's socket; its output (trimmed) into out. */
static int sql_at(const struct mariadb *m, char *out, size_t cap,
                  const char *fmt, ...)
{
    char sql[2048], *res = NULL;
    va_list ap;
    int st;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    char *argv[] = {"mariadb", "--no-defaults",
                    "-S",      (char *)m->sock,
                    "-uroot",  "-N",
                    "-B",      "-e",
                    sql,       NULL};
    argv[0] = (char *)it_which("mariadb");
    st = it_run_capture(argv, &res);
    if (out && cap) {
        snprintf(out, cap, "%s", res ? res : "");
        out[strcspn(out, "\n")] = '\0';
    }
    if (st != 0)
        fprintf(stderr, "sql on port %u failed (%d): %s\n", (unsigned)m->port,
                st, sql);
    free(res);
    return st == 0 ? 0 : -1;
}

static int mariadb_start(struct mariadb *m, const char *name, int server_id)
{
    char datadir[IT_PATH_MAX + 8], arg[8][IT_PATH_MAX + 32];
    char *res = NULL;

    char *logs = realpath(it_log_dir(), NULL);

    /* Absolute: mariadb-install-db resolves paths from its own base. */
    if (!logs)
        return -1;
    m->port = it_free_port();
    snprintf(m->dir, sizeof(m->dir), "%s/replica-%s-%u", logs, name,
             (unsigned)m->port);
    free(logs);
    snprintf(datadir, sizeof(datadir), "%s/data", m->dir);
    /* sun_path is short: the socket goes to /tmp. */
    snprintf(m->sock, sizeof(m->sock), "/tmp/seckill-it-%s-%u.sock", name,
             (unsigned)m->port);
    snprintf(m->log, sizeof(m->log), "%s.log", m->dir);
    if (mkdir(m->dir, 0700) && errno != EEXIST)
        return -1;
    char *install[] = {(char *)it_which("mariadb-install-db"),
                       "--no-defaults",
                       arg[0],
                       "--user=root",
                       "--auth-root-authentication-method=socket",
                       "--skip-test-db",
                       NULL};
    snprintf(arg[0], sizeof(arg[0]), "--datadir=%s", datadir);
    if (!install[0] || it_run_capture(install, &res) != 0) {
        free(res);
        fprintf(stderr, "mariadb-install-db failed for %s\n", datadir);
        return -1;
    }
    free(res);
    snprintf(arg[1], sizeof(arg[1]), "--port=%u", (unsigned)m->port);
    snprintf(arg[2], sizeof(arg[2]), "--socket=%s", m->sock);
    snprintf(arg[3], sizeof(arg[3]), "--server-id=%d", server_id);
    snprintf(arg[4], sizeof(arg[4]), "--log-bin=%s/binlog", m->dir);
    snprintf(arg[5], sizeof(arg[5]), "--relay-log=%s/relay", m->dir);
    char *argv[] = {(char *)it_which("mariadbd"),
                    "--no-defaults",
                    "--user=root",
                    arg[0],
                    arg[1],
                    "--bind-address=127.0.0.1",
                    arg[2],
                    arg[3],
                    arg[4],
                    "--binlog-format=ROW",
                    "--skip-name-resolve",
                    "--character-set-server=utf8mb4",
                    "--collation-server=utf8mb4_bin",
                    "--innodb-buffer-pool-size=32M",
                    "--innodb-log-file-size=8M",
                    arg[5],
                    server_id == 1 ? "--skip-slave-start" : "--read-only",
                    NULL};
    m->pid = it_spawn(argv, NULL, m->log);
    if (m->pid < 0)
        return -1;
    for (int i = 0; i < 300; i++) {
        if (access(m->sock, F_OK) == 0 && sql_at(m, NULL, 0, "SELECT 1") == 0)
            return 0;
        usleep(100 * 1000);
    }
    fprintf(stderr, "mariadbd %s did not start; log: %s\n", name, m->log);
    return -1;
}

static void mariadb_kill(struct mariadb *m)
{
    if (m->pid > 0) {
        kill(m->pid, SIGKILL);
        waitpid(m->pid, NULL, 0);
    }
    m->pid = 0;
}

/* Remove m's data (its log stays next to it). */
static void mariadb_remove(struct mariadb *m)
{
    char *out = NULL;
    char *argv[] = {"/bin/rm", "-rf", m->dir, NULL};

    mariadb_kill(m);
    if (m->dir[0])
        it_run_capture(argv, &out);
    free(out);
    unlink(m->sock);
}

/* Wait until the replica has applied everything the primary wrote. */
static int caught_up(void)
{
    char want[256], have[256];

    if (sql_at(&primary, want, sizeof(want), "SELECT @@gtid_binlog_pos"))
        return -1;
    for (int i = 0; i < 200; i++) {
        if (sql_at(&replica, have, sizeof(have),
                   "SELECT MASTER_GTID_WAIT('%s', 0.1)", want) == 0 &&
            strcmp(have, "0") == 0)
            return 0;
    }
    fprintf(stderr, "the replica did not reach %s\n", want);
    return -1;
}

static int group_setup(void **state)
{
    char schema[IT_PATH_MAX], url[256], rurl[256];
    (void)state;

    it_init();
    if (mariadb_start(&primary, "primary", 1) ||
        mariadb_start(&replica, "replica", 2))
        return -1;
    /* Replicate everything from the primary's first event on: the users
     * and the schema reach the replica the way data does. */
    if (sql_at(&primary, NULL, 0,
               "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'; "
               "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'") ||
        sql_at(&replica, NULL, 0,
               "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%u, "
               "MASTER_USER='repl', MASTER_PASSWORD='repl', "
               "MASTER_USE_GTID=slave_pos; START SLAVE",
               (unsigned)primary.port) ||
        sql_at(&primary, NULL, 0,
               "CREATE DATABASE " DB " CHARACTER SET utf8mb4 COLLATE "
               "utf8mb4_bin; "
               "CREATE USER 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill'; "
               "GRANT ALL ON " DB ".* TO 'seckill'@'127.0.0.1'; "
               "GRANT REPLICA MONITOR ON *.* TO 'seckill'@'127.0.0.1'"))
        return -1;
    /* The tests run from the repository's root. */
    snprintf(schema, sizeof(schema), "USE " DB ";\nsource sql/schema.sql");
    if (sql_at(&primary, NULL, 0, "%s", schema) || caught_up())
        return -1;

    snprintf(url, sizeof(url),
             "SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:%u/" DB,
             (unsigned)primary.port);
    snprintf(
        rurl, sizeof(rurl),
        "SECKILL_MYSQL_REPLICA_URL=mysql://seckill:seckill@127.0.0.1:%u/" DB,
        (unsigned)replica.port);
    const char *const env[] = {url, rurl,
                               "SECKILL_MYSQL_REPLICA_MAX_LAG_S=" MAX_LAG,
                               "SECKILL_RATE_USER=0", NULL};
    if (it_server_start(&srv, "replica", env))
        return -1;
    it_token(1, TOKEN_ROLE_ADMIN, 3600, admin_token);
    return 0;
}

static int group_teardown(void **state)
{
    int rc;
    (void)state;

    rc = it_server_stop(&srv);
    mariadb_remove(&replica);
    mariadb_remove(&primary);
    return rc;
}

/* One metric's value from /metrics of s (-1e9 when absent). */
static double metric_of(const struct it_server *s, const char *name)
{
    struct it_resp resp;
    double v = -1e9;
    char key[160];

    it_http(s, "GET", "/metrics", NULL, NULL, &resp);
    snprintf(key, sizeof(key), "\n%s ", name);
    const char *p = resp.body ? strstr(resp.body, key) : NULL;
    if (p)
        v = strtod(p + strlen(key), NULL);
    it_resp_free(&resp);
    return v;
}

/* One metric's value from the group's instance's /metrics. */
static double metric(const char *name)
{
    return metric_of(&srv, name);
}

/* Wait until /metrics says the replica is (up 1) or is not (up 0) used. */
static void await_replica_up(int up)
{
    int64_t deadline = util_mono_ms() + NOTICE_MS;

    while (metric("seckill_mysql_replica_up") != up) {
        if (util_mono_ms() > deadline) {
            print_error("seckill_mysql_replica_up did not become %d within "
                        "%d ms (lag %g)\n",
                        up, NOTICE_MS,
                        metric("seckill_mysql_replica_lag_seconds"));
            fail();
        }
        usleep(100 * 1000);
    }
}

/* The title GET /api/vouchers/{id} answers (asserts 200). */
static void voucher_title(int64_t id, char *out, size_t cap)
{
    struct it_resp resp;
    char path[64];

    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)id);
    it_http(&srv, "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(out, cap, "%s", it_json_str(resp.json, "title"));
    it_resp_free(&resp);
}

/* Change a voucher on the replica alone. */
static void replica_only(const char *fmt, int64_t id)
{
    char sql[512];

    snprintf(sql, sizeof(sql), fmt, (long long)id);
    assert_int_equal(0, sql_at(&replica, NULL, 0,
                               "SET sql_log_bin = 0; USE " DB "; %s", sql));
}

static int64_t shop;
static int64_t voucher; /* its title differs on the replica */

static void test_reads_go_to_the_replica(void **state)
{
    char title[256];
    struct it_resp resp;
    char path[96];
    (void)state;

    await_replica_up(1);
    shop = 700000 + util_now_ms() % 100000;
    voucher = it_seckill_create(&srv, shop, 100, -5, 3600);
    assert_int_equal(0, caught_up());
    replica_only("UPDATE vouchers SET title = 'on the replica' WHERE id = "
                 "%lld",
                 voucher);
    replica_only("UPDATE seckill_vouchers SET stock = 0 WHERE voucher_id = "
                 "%lld",
                 voucher);
    double before = metric("seckill_voucher_reads_total{server=\"replica\"}");

    voucher_title(voucher, title, sizeof(title));
    assert_string_equal("on the replica", title);
    snprintf(path, sizeof(path), "/api/vouchers?shopId=%lld", (long long)shop);
    it_http(&srv, "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    json_t *items = json_object_get(resp.json, "items");
    assert_int_equal(1, json_array_size(items));
    assert_string_equal("on the replica",
                        it_json_str(json_array_get(items, 0), "title"));
    it_resp_free(&resp);
    assert_true(metric("seckill_voucher_reads_total{server=\"replica\"}") >=
                before + 2);
    assert_true(metric("seckill_mysql_replica_lag_seconds") >= 0);

    /* A purchase reads the primary: the replica's stock of 0 is not
     * what decides. */
    assert_int_equal(201, it_purchase(&srv, voucher, 71, &resp));
    int64_t order = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    assert_int_equal(0, caught_up());
    /* A buyer's own orders come from the primary, even when the replica
     * lost them. */
    replica_only("DELETE FROM voucher_orders WHERE voucher_id = %lld", voucher);
    char token[TOKEN_STR_LEN];
    it_token(71, TOKEN_ROLE_USER, 3600, token);
    it_http(&srv, "GET", "/api/orders", NULL, token, &resp);
    it_assert_status(&resp, 200);
    items = json_object_get(resp.json, "items");
    assert_int_equal(1, json_array_size(items));
    assert_int_equal(order, it_json_id(json_array_get(items, 0), "id"));
    it_resp_free(&resp);
    snprintf(path, sizeof(path), "/api/orders/%lld", (long long)order);
    it_http(&srv, "GET", path, NULL, token, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);

    /* /readyz reports the replica without depending on it. */
    it_http(&srv, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("ok", it_json_str(json_object_get(resp.json, "checks"),
                                          "mysqlReplica"));
    it_resp_free(&resp);
}

#define DB_S0 DB "_s0"
#define DB_S1 DB "_s1"

/*
 * Sales sharded over two databases of the primary, shard 1 with the
 * replica's copy of its database as its replica and shard 0 with none:
 * shard 1's voucher reads go to its replica, and /metrics and /readyz
 * report that replica by its shard.
 */
static void test_shard_replica(void **state)
{
    char shards[512], replicas[512], title[256], path[96];
    struct it_server s2 = {0};
    struct it_resp resp;
    int64_t v = 0, shop2 = 800000 + util_now_ms() % 100000;
    int64_t deadline;
    (void)state;

    for (int i = 0; i < 2; i++) {
        const char *db = i ? DB_S1 : DB_S0;

        assert_int_equal(0, sql_at(&primary, NULL, 0,
                                   "CREATE DATABASE %s CHARACTER SET utf8mb4 "
                                   "COLLATE utf8mb4_bin; GRANT ALL ON %s.* "
                                   "TO 'seckill'@'127.0.0.1'; USE %s;\n"
                                   "source sql/schema.sql",
                                   db, db, db));
    }
    assert_int_equal(0, caught_up());
    snprintf(shards, sizeof(shards),
             "SECKILL_MYSQL_SHARDS=mysql://seckill:seckill@127.0.0.1:%u/" DB_S0
             ",mysql://seckill:seckill@127.0.0.1:%u/" DB_S1,
             (unsigned)primary.port, (unsigned)primary.port);
    snprintf(replicas, sizeof(replicas),
             "SECKILL_MYSQL_SHARD_REPLICAS=,mysql://seckill:seckill@"
             "127.0.0.1:%u/" DB_S1,
             (unsigned)replica.port);
    {
        const char *const env[] = {"SECKILL_MYSQL_URL",
                                   "SECKILL_MYSQL_REPLICA_URL",
                                   shards,
                                   replicas,
                                   "SECKILL_MYSQL_REPLICA_MAX_LAG_S=" MAX_LAG,
                                   "SECKILL_RATE_USER=0",
                                   NULL};

        assert_int_equal(0, it_server_start(&s2, "replica-shards", env));
    }
    deadline = util_mono_ms() + NOTICE_MS;
    while (metric_of(&s2, "seckill_mysql_replica_up{shard=\"1\"}") != 1) {
        if (util_mono_ms() > deadline)
            fail_msg("shard 1's replica not in use within %d ms", NOTICE_MS);
        usleep(100 * 1000);
    }
    assert_true(metric_of(&s2, "seckill_mysql_replica_lag_seconds{shard="
                               "\"1\"}") >= 0);
    /* Shard 0 has none, and nothing is reported without a shard. */
    assert_true(metric_of(&s2, "seckill_mysql_replica_up{shard=\"0\"}") ==
                -1e9);
    assert_true(metric_of(&s2, "seckill_mysql_replica_up") == -1e9);
    it_http(&s2, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    {
        const json_t *checks = json_object_get(resp.json, "checks");
        const json_t *by = json_object_get(checks, "mysqlShardReplicas");

        assert_null(json_object_get(checks, "mysqlReplica"));
        assert_int_equal(1, json_object_size(by));
        assert_string_equal("ok", it_json_str(by, "1"));
    }
    it_resp_free(&resp);

    /* A voucher of shard 1, changed on the replica alone: read there. */
    for (int k = 0; k < 4 && !(v && idgen_shard_of(v) == 1); k++)
        v = it_seckill_create(&s2, shop2, 5, -5, 3600);
    assert_int_equal(1, (int)idgen_shard_of(v));
    assert_int_equal(0, caught_up());
    assert_int_equal(0, sql_at(&replica, NULL, 0,
                               "SET sql_log_bin = 0; UPDATE " DB_S1
                               ".vouchers SET title = 'on the replica' "
                               "WHERE id = %lld",
                               (long long)v));
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);
    it_http(&s2, "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(title, sizeof(title), "%s", it_json_str(resp.json, "title"));
    it_resp_free(&resp);
    assert_string_equal("on the replica", title);
    assert_int_equal(0, it_server_stop(&s2));
}

/* A voucher the replica has not received yet is read back all the same. */
static void test_read_your_writes(void **state)
{
    char title[256], body[512], b[32], e[32];
    (void)state;

    /* Hold the replica's applier back: it receives but does not apply. */
    assert_int_equal(0, sql_at(&replica, NULL, 0,
                               "STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = "
                               "60; START SLAVE"));
    await_replica_up(1);
    snprintf(body, sizeof(body),
             "{\"shopId\":%lld,\"title\":\"fresh\",\"payValue\":100,"
             "\"actualValue\":200,\"type\":\"seckill\",\"stock\":5,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
             (long long)shop, it_time(-5, b), it_time(3600, e));
    int64_t fresh = it_voucher_create(&srv, body);
    double r0 = metric("seckill_voucher_reads_total{server=\"replica\"}");
    double p0 = metric("seckill_voucher_reads_total{server=\"primary\"}");
    voucher_title(fresh, title, sizeof(title));
    assert_string_equal("fresh", title);
    /* Asked of the replica, which said 404; then of the primary. */
    assert_true(metric("seckill_voucher_reads_total{server=\"replica\"}") ==
                r0 + 1);
    assert_true(metric("seckill_voucher_reads_total{server=\"primary\"}") ==
                p0 + 1);
}

/* A replica that lags past the bound is skipped, and taken back. */
static void test_lagging_replica_skipped(void **state)
{
    char title[256];
    (void)state;

    /* The delayed events of the test before make the lag grow. */
    await_replica_up(0);
    double lag = metric("seckill_mysql_replica_lag_seconds");
    printf("replica skipped at a lag of %g s (bound " MAX_LAG " s)\n", lag);
    assert_true(lag > atoi(MAX_LAG));
    voucher_title(voucher, title, sizeof(title));
    assert_string_not_equal("on the replica", title);

    assert_int_equal(0, sql_at(&replica, NULL, 0,
                               "STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = 0; "
                               "START SLAVE"));
    assert_int_equal(0, caught_up());
    await_replica_up(1);
    voucher_title(voucher, title, sizeof(title));
    assert_string_equal("on the replica", title);
}

/* A replica that is down is skipped; nothing fails. */
static void test_down_replica_skipped(void **state)
{
    char title[256];
    struct it_resp resp;
    (void)state;

    mariadb_kill(&replica);
    /* Until the monitor notices, a thread's own failed read falls back to
     * the primary: every read answers. */
    int64_t deadline = util_mono_ms() + NOTICE_MS;
    while (metric("seckill_mysql_replica_up") != 0) {
        voucher_title(voucher, title, sizeof(title));
        assert_true(util_mono_ms() < deadline);
        usleep(50 * 1000);
    }
    voucher_title(voucher, title, sizeof(title));
    assert_string_not_equal("on the replica", title);
    it_http(&srv, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal(
        "down",
        it_json_str(json_object_get(resp.json, "checks"), "mysqlReplica"));
    it_resp_free(&resp);
    assert_int_equal(-1, metric("seckill_mysql_replica_lag_seconds"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_go_to_the_replica),
        cmocka_unit_test(test_shard_replica),
        cmocka_unit_test(test_read_your_writes),
        cmocka_unit_test(test_lagging_replica_skipped),
        cmocka_unit_test(test_down_replica_skipped),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "replica", tests, group_setup, group_teardown));
}
