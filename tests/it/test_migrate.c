/*
 * test_migrate.c - `seckilld migrate` and the schema check at start-up,
 * on scratch databases of the test MariaDB (seckill_mig_<pid>_*; the user
 * may make them, scripts/services.sh grants it):
 *
 *   - a database of the first schema (sql/migrations/0001-initial.sql)
 *     holding that era's users, vouchers, segmented stock and orders, as
 *     the old schema.sql made it (no schema_version), is migrated: every
 *     migration recorded once, the rows kept, initial_stock backfilled as
 *     stock + segments + active orders; a second run applies nothing; two
 *     runs at once after schema_version is dropped (the adoption of a
 *     database made before migrations: every file again, idempotent) both
 *     succeed and apply each migration once between them; a recorded
 *     checksum unlike the file's is refused;
 *   - the service runs on it: 200 buyers for 50 units make 50 orders, no
 *     buyer twice, stock 0 in MySQL; a voucher of the old era sells too;
 *   - a database one migration behind, or without schema_version: the
 *     service exits 2 with one line telling to run seckilld migrate;
 *   - an empty database migrates to the same tables, columns and indexes
 *     as sql/schema.sql loaded into another one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "tests/it/harness.h"

#define CROWD_USERS 200
#define CROWD_STOCK 50

static char db_old[64], db_fresh[64], db_file[64];
static int64_t first_user;

/* SECKILL_MYSQL_URL=... of database db on the test MariaDB, into buf. */
static const char *url_of(const char *db, char *buf, size_t cap)
{
    const struct store_config *sc = it_store_config();

    snprintf(buf, cap, "SECKILL_MYSQL_URL=mysql://%s:%s@%s:%u/%s",
             sc->mysql_user, sc->mysql_pass, sc->mysql_host, sc->mysql_port,
             db);
    return buf;
}

/* Start `seckilld ARGS...` (NULL-terminated) on database db, its output
 * into the log named tag. */
static pid_t spawn_on(const char *db, const char *tag, char *log, size_t cap,
                      const char *arg)
{
    char url[512];
    const char *const env[] = {url_of(db, url, sizeof(url)), NULL};
    char *argv[] = {(char *)it_bin(), (char *)arg, NULL};
    char **envp = it_env_build(env);
    pid_t p;

    snprintf(log, cap, "%s/migrate-%s.log", it_log_dir(), tag);
    unlink(log);
    p = it_spawn(argv, envp, log);
    it_env_free(envp);
    assert_true(p > 0);
    return p;
}

/* Its exit status (asserts it exited within 60 s). */
static int exit_status(pid_t p)
{
    int st = 0;

    assert_int_equal(0, it_wait_exit(p, 60000, &st));
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* `seckilld migrate` on db: its exit status, its output (free(3) it). */
static int migrate(const char *db, const char *tag, char **out)
{
    char log[IT_PATH_MAX];
    int rc = exit_status(spawn_on(db, tag, log, sizeof(log), "migrate"));

    *out = it_file_read(log);
    assert_non_null(*out);
    return rc;
}

/* How many lines of s start with prefix. */
static int lines_starting(const char *s, const char *prefix)
{
    int n = 0;

    for (const char *l = s; l && *l;
         l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, strlen(prefix)) == 0)
            n++;
    return n;
}

static int64_t migration_files(void)
{
    return (int64_t)store_migration_count;
}

/* Load sql/migrations/0001-initial.sql (or another file) into db with
 * the mariadb client: the schema as an older version made it. */
static void load_file(const char *db, const char *file)
{
    const struct store_config *sc = it_store_config();
    char cmd[1024];

    snprintf(cmd, sizeof(cmd),
             "mariadb --no-defaults --protocol=tcp -h '%s' -P %u -u '%s' "
             "-p'%s' '%s' < '%s'",
             sc->mysql_host, sc->mysql_port, sc->mysql_user, sc->mysql_pass, db,
             file);
    assert_int_equal(0, system(cmd));
}

static int group_setup(void **state)
{
    (void)state;
    it_init();
    snprintf(db_old, sizeof(db_old), "seckill_mig_%d_old", (int)getpid());
    snprintf(db_fresh, sizeof(db_fresh), "seckill_mig_%d_new", (int)getpid());
    snprintf(db_file, sizeof(db_file), "seckill_mig_%d_file", (int)getpid());
    first_user = 7000000 + (it_unique() % 1000) * 1000;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    it_sql_exec("DROP DATABASE IF EXISTS %s", db_old);
    it_sql_exec("DROP DATABASE IF EXISTS %s", db_fresh);
    it_sql_exec("DROP DATABASE IF EXISTS %s", db_file);
    it_sql_close();
    return 0;
}

/* A database of the first schema with rows of its era: users by national
 * number; voucher 1 (stock 10 in its row) with an unpaid, a paid and a
 * cancelled order; voucher 2 segmented (row 0, segments 3 + 3) with two
 * unpaid orders; a normal voucher. */
static void make_old_database(void)
{
    assert_int_equal(0, it_sql_exec("CREATE DATABASE %s CHARACTER SET utf8mb4 "
                                    "COLLATE utf8mb4_bin",
                                    db_old));
    load_file(db_old, "sql/migrations/0001-initial.sql");
    assert_int_equal(0, it_sql_exec("INSERT INTO %s.users (id, phone) VALUES "
                                    "(1, '13800138001'), (2, '13800138002'), "
                                    "(3, '13800138003')",
                                    db_old));
    assert_int_equal(0,
                     it_sql_exec("INSERT INTO %s.vouchers (id, shop_id, title, "
                                 "pay_value, actual_value, type) VALUES "
                                 "(1, 5, 'old sale', 100, 200, 1), "
                                 "(2, 5, 'old segmented sale', 100, 200, 1), "
                                 "(3, 5, 'old normal voucher', 100, 200, 0)",
                                 db_old));
    assert_int_equal(
        0, it_sql_exec("INSERT INTO %s.seckill_vouchers (voucher_id, stock, "
                       "begin_time, end_time) VALUES "
                       "(1, 10, UTC_TIMESTAMP() - INTERVAL 1 HOUR, "
                       "UTC_TIMESTAMP() + INTERVAL 1 HOUR), "
                       "(2, 0, UTC_TIMESTAMP() - INTERVAL 1 HOUR, "
                       "UTC_TIMESTAMP() + INTERVAL 1 HOUR)",
                       db_old));
    assert_int_equal(0, it_sql_exec("INSERT INTO %s.seckill_stock_segments "
                                    "VALUES (2, 0, 3), (2, 1, 3)",
                                    db_old));
    assert_int_equal(
        0, it_sql_exec("INSERT INTO %s.voucher_orders (id, user_id, "
                       "voucher_id, status) VALUES (101, 1, 1, 1), "
                       "(102, 2, 1, 2), (103, 3, 1, 4), (104, 1, 2, 1), "
                       "(105, 2, 2, 1)",
                       db_old));
}

/* Each test is a step of one story on db_old, in order. */
static void test_upgrade_from_first_schema(void **state)
{
    char *out;
    int64_t n = migration_files();

    (void)state;
    make_old_database();
    assert_int_equal(0, migrate(db_old, "first", &out));
    /* No schema_version: adopted, every file run (0001 finds its tables). */
    assert_int_equal((int)n, lines_starting(out, "applied "));
    assert_non_null(strstr(out, "applied 0002-order-lifecycle ("));
    free(out);
    assert_int_equal(n, it_sql_scalar("SELECT COUNT(DISTINCT version) FROM "
                                      "%s.schema_version",
                                      db_old));
    assert_int_equal(n, it_sql_scalar("SELECT MAX(version) FROM "
                                      "%s.schema_version",
                                      db_old));
    assert_int_equal(n, it_sql_scalar("SELECT COUNT(*) FROM %s.schema_version "
                                      "WHERE checksum REGEXP '^[0-9a-f]{64}$' "
                                      "AND name REGEXP '^[0-9]{4}-'",
                                      db_old));
    /* The rows survived. */
    assert_int_equal(3, it_sql_scalar("SELECT COUNT(*) FROM %s.users", db_old));
    assert_int_equal(
        3, it_sql_scalar("SELECT COUNT(*) FROM %s.users WHERE phone LIKE "
                         "'1380013800_' AND phone_raw IS NULL AND "
                         "merged_into IS NULL",
                         db_old));
    assert_int_equal(
        5, it_sql_scalar("SELECT COUNT(*) FROM %s.voucher_orders", db_old));
    /* Backfills: stock + segments + active orders; the old era's mode and
     * admission; orders without a deadline, the cancelled one inactive. */
    assert_int_equal(12, it_sql_scalar("SELECT initial_stock FROM "
                                       "%s.seckill_vouchers WHERE "
                                       "voucher_id = 1",
                                       db_old));
    assert_int_equal(8, it_sql_scalar("SELECT initial_stock FROM "
                                      "%s.seckill_vouchers WHERE "
                                      "voucher_id = 2",
                                      db_old));
    assert_int_equal(0, it_sql_scalar("SELECT SUM(purchase_mode + admission) "
                                      "FROM %s.seckill_vouchers",
                                      db_old));
    assert_int_equal(4, it_sql_scalar("SELECT COUNT(active_user) FROM "
                                      "%s.voucher_orders WHERE pay_deadline "
                                      "IS NULL",
                                      db_old));
    assert_int_equal(-1, it_sql_scalar("SELECT active_user FROM "
                                       "%s.voucher_orders WHERE id = 103",
                                       db_old));

    /* A second run: nothing to apply. */
    assert_int_equal(0, migrate(db_old, "again", &out));
    assert_int_equal(0, lines_starting(out, "applied "));
    assert_non_null(strstr(out, ": 0 applied; at version"));
    free(out);
}

static void test_two_at_once(void **state)
{
    char log_a[IT_PATH_MAX], log_b[IT_PATH_MAX], *a, *b;
    int64_t n = migration_files();
    pid_t pa, pb;

    (void)state;
    /* As a database of the old schema.sql and upgrade (every change in
     * place, nothing recorded): both runs apply the files once between
     * them, the second waiting for the first's lock. */
    assert_int_equal(0, it_sql_exec("DROP TABLE %s.schema_version", db_old));
    pa = spawn_on(db_old, "concurrent-a", log_a, sizeof(log_a), "migrate");
    pb = spawn_on(db_old, "concurrent-b", log_b, sizeof(log_b), "migrate");
    assert_int_equal(0, exit_status(pa));
    assert_int_equal(0, exit_status(pb));
    a = it_file_read(log_a);
    b = it_file_read(log_b);
    assert_int_equal((int)n, lines_starting(a, "applied ") +
                                 lines_starting(b, "applied "));
    free(a);
    free(b);
    assert_int_equal(
        n, it_sql_scalar("SELECT COUNT(*) FROM %s.schema_version", db_old));
    /* Re-running every file changed no row. */
    assert_int_equal(12, it_sql_scalar("SELECT initial_stock FROM "
                                       "%s.seckill_vouchers WHERE "
                                       "voucher_id = 1",
                                       db_old));
}

static void test_changed_file_refused(void **state)
{
    char *out;

    (void)state;
    assert_int_equal(0, it_sql_exec("UPDATE %s.schema_version SET checksum "
                                    "= REPEAT('0', 64) WHERE version = 5",
                                    db_old));
    assert_int_equal(1, migrate(db_old, "changed", &out));
    assert_non_null(strstr(out, "refused: migration 0005-sale-stamp "));
    assert_non_null(strstr(out, "changed after it was applied"));
    assert_int_equal(0, lines_starting(out, "applied "));
    free(out);
    assert_int_equal(0, it_sql_exec("UPDATE %s.schema_version SET checksum "
                                    "= '%s' WHERE version = 5",
                                    db_old, store_migrations[4].checksum));
}

static void test_service_on_migrated(void **state)
{
    struct it_server srv = {0};
    struct it_req *reqs = xcalloc(CROWD_USERS, sizeof(*reqs));
    struct it_resp *resps = xcalloc(CROWD_USERS, sizeof(*resps));
    const struct it_server **to = xcalloc(CROWD_USERS, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(CROWD_USERS, sizeof(*tokens));
    char url[512], path[96];
    const char *const env[] = {url_of(db_old, url, sizeof(url)),
                               "SECKILL_RATE_USER=0", NULL};
    struct it_resp r = {0};
    int64_t v, won = 0;

    (void)state;
    assert_int_equal(0, it_server_start(&srv, "migrated", env));
    /* A sale of the old era sells on. */
    assert_int_equal(201, it_purchase(&srv, 1, first_user + 999, &r));
    it_resp_free(&r);
    assert_int_equal(9, it_sql_scalar("SELECT stock FROM %s.seckill_vouchers "
                                      "WHERE voucher_id = 1",
                                      db_old));

    v = it_seckill_create(&srv, 77, CROWD_STOCK, -60, 3600);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (size_t i = 0; i < CROWD_USERS; i++) {
        it_token(first_user + (int64_t)i, TOKEN_ROLE_USER, 3600, tokens[i]);
        reqs[i].method = "POST";
        reqs[i].path = path;
        reqs[i].token = tokens[i];
        to[i] = &srv;
    }
    it_http_run_all(reqs, to, resps, CROWD_USERS);
    for (size_t i = 0; i < CROWD_USERS; i++) {
        if (resps[i].status == 201)
            won++;
        else
            assert_true(resps[i].status == 409 || resps[i].status == 429 ||
                        resps[i].status == 503);
        it_resp_free(&resps[i]);
    }
    assert_int_equal(CROWD_STOCK, won);
    assert_int_equal(CROWD_STOCK,
                     it_sql_scalar("SELECT COUNT(*) FROM %s.voucher_orders "
                                   "WHERE voucher_id = %lld",
                                   db_old, (long long)v));
    assert_int_equal(CROWD_STOCK,
                     it_sql_scalar("SELECT COUNT(DISTINCT user_id) FROM "
                                   "%s.voucher_orders WHERE voucher_id = %lld",
                                   db_old, (long long)v));
    assert_int_equal(0, it_sql_scalar("SELECT stock FROM %s.seckill_vouchers "
                                      "WHERE voucher_id = %lld",
                                      db_old, (long long)v));
    assert_int_equal(0, it_server_stop(&srv));
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
}

/* The service on db exits 2 with exactly one line, which says to run
 * seckilld migrate. */
static void assert_refused(const char *tag)
{
    char log[IT_PATH_MAX], *out;
    const char *line;

    assert_int_equal(
        2, exit_status(spawn_on(db_old, tag, log, sizeof(log), "serve")));
    out = it_file_read(log);
    assert_non_null(out);
    line = strstr(out, "seckilld: database ");
    assert_non_null(line);
    assert_non_null(strstr(line, ": run seckilld migrate\n"));
    /* The one line and nothing else (no log line before it either). */
    assert_true(line == out);
    assert_true(strchr(out, '\n') == out + strlen(out) - 1);
    free(out);
}

static void test_refuses_older_schema(void **state)
{
    char *out;
    int64_t n = migration_files();

    (void)state;
    /* One migration behind (as if the newest were not yet applied). */
    assert_int_equal(0, it_sql_exec("DELETE FROM %s.schema_version WHERE "
                                    "version = %lld",
                                    db_old, (long long)n));
    assert_refused("behind");
    /* Made before migrations. */
    assert_int_equal(0, it_sql_exec("DROP TABLE %s.schema_version", db_old));
    assert_refused("unversioned");
    /* And migrate puts it right. */
    assert_int_equal(0, migrate(db_old, "after-refusal", &out));
    free(out);
    assert_int_equal(n, it_sql_scalar("SELECT MAX(version) FROM "
                                      "%s.schema_version",
                                      db_old));
}

/* The columns, indexes and constraints of db, as one MD5 to compare. */
static int64_t shape_of(const char *db)
{
    return it_sql_scalar(
        "SELECT CONV(LEFT(MD5(CONCAT("
        " (SELECT GROUP_CONCAT(CONCAT_WS('|', table_name, column_name,"
        "   ordinal_position, column_type, is_nullable,"
        "   IFNULL(column_default, 'NULL'), extra,"
        "   IFNULL(generation_expression, ''), collation_name)"
        "   ORDER BY table_name, ordinal_position SEPARATOR ';')"
        "  FROM information_schema.columns WHERE table_schema = '%s'),"
        " (SELECT GROUP_CONCAT(CONCAT_WS('|', table_name, index_name,"
        "   non_unique, seq_in_index, column_name)"
        "   ORDER BY table_name, index_name, seq_in_index SEPARATOR ';')"
        "  FROM information_schema.statistics WHERE table_schema = '%s'),"
        " (SELECT GROUP_CONCAT(CONCAT_WS('|', table_name, constraint_name,"
        "   constraint_type) ORDER BY table_name, constraint_name"
        "   SEPARATOR ';')"
        "  FROM information_schema.table_constraints"
        "  WHERE table_schema = '%s'))), 15), 16, 10)",
        db, db, db);
}

static void test_fresh_database(void **state)
{
    char *out;
    int64_t n = migration_files();

    (void)state;
    assert_int_equal(0, it_sql_exec("CREATE DATABASE %s CHARACTER SET utf8mb4 "
                                    "COLLATE utf8mb4_bin",
                                    db_fresh));
    assert_int_equal(0, migrate(db_fresh, "fresh", &out));
    assert_int_equal((int)n, lines_starting(out, "applied "));
    free(out);
    /* sql/schema.sql, loaded as it is, is the same schema at the same
     * version; and the upgraded database of the old era has it too. */
    assert_int_equal(0, it_sql_exec("CREATE DATABASE %s CHARACTER SET utf8mb4 "
                                    "COLLATE utf8mb4_bin",
                                    db_file));
    load_file(db_file, "sql/schema.sql");
    assert_int_equal(n, it_sql_scalar("SELECT MAX(version) FROM "
                                      "%s.schema_version",
                                      db_file));
    assert_true(shape_of(db_fresh) == shape_of(db_file));
    assert_true(shape_of(db_fresh) == shape_of(db_old));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upgrade_from_first_schema),
        cmocka_unit_test(test_two_at_once),
        cmocka_unit_test(test_changed_file_refused),
        cmocka_unit_test(test_service_on_migrated),
        cmocka_unit_test(test_refuses_older_schema),
        cmocka_unit_test(test_fresh_database),
    };
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
