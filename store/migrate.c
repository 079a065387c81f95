/*
 * migrate.c - the schema's version and its migrations (store.h): the
 * files of sql/migrations/, compiled in, applied in order to a database
 * and recorded in its schema_version table, one run at a time per
 * database (a named lock of the server).
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mysqld_error.h>

#include "common/sqlflavour.h"
#include "common/sqlsplit.h"
#include "common/util.h"

/* What the service reads to know a database's schema. Created by the
 * first run of store_migrate() (and recorded by nothing else). */
static const char schema_version_sql[] =
    "CREATE TABLE IF NOT EXISTS schema_version ("
    " version    INT UNSIGNED NOT NULL,"
    " name       VARCHAR(128) NOT NULL,"
    " checksum   CHAR(64)     NOT NULL,"
    " applied_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),"
    " PRIMARY KEY (version)"
    ") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin";

/* A bulk backfill may wait for the rows a running purchase holds. */
#define MIGRATE_LOCK_WAIT_SQL "SET SESSION innodb_lock_wait_timeout = 60"

static int server_error(MYSQL *my, MYSQL_STMT *stmt, char *why, size_t whylen)
{
    unsigned e = stmt ? mysql_stmt_errno(stmt) : mysql_errno(my);

    snprintf(why, whylen, "%s (errno %u)",
             stmt ? mysql_stmt_error(stmt) : mysql_error(my), e);
    return sql_error_is_disconnect(e) ? -ENOTCONN : -EIO;
}

static int run(MYSQL *my, const char *sql, size_t len, char *why, size_t whylen)
{
    MYSQL_RES *res;

    if (mysql_real_query(my, sql, len))
        return server_error(my, NULL, why, whylen);
    /* A statement that answers rows (none of ours should) is drained. */
    if ((res = mysql_store_result(my)))
        mysql_free_result(res);
    return 0;
}

int store_schema_version(const struct store_config *cfg, unsigned *version,
                         char *why, size_t whylen)
{
    static const char sql[] = "SELECT COALESCE(MAX(version), 0) "
                              "FROM schema_version";
    MYSQL *my;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    int err;

    *version = 0;
    if ((err = store_mysql_open(cfg, SQL_READ_TIMEOUT_S, &my, why, whylen)))
        return err;
    if (mysql_real_query(my, sql, strlen(sql))) {
        err = mysql_errno(my) == ER_NO_SUCH_TABLE
                  ? -ENOENT
                  : server_error(my, NULL, why, whylen);
        if (err == -ENOENT)
            snprintf(why, whylen, "no schema_version table");
        goto out;
    }
    res = mysql_store_result(my);
    if (!res || !(row = mysql_fetch_row(res)) || !row[0]) {
        err = server_error(my, NULL, why, whylen);
        goto out;
    }
    *version = (unsigned)strtoul(row[0], NULL, 10);
out:
    if (res)
        mysql_free_result(res);
    mysql_close(my);
    return err;
}

/* Record m in schema_version (inside the migration's transaction). */
static int record(MYSQL *my, const struct store_migration *m, char *why,
                  size_t whylen)
{
    static const char sql[] = "INSERT INTO schema_version "
                              "(version, name, checksum) VALUES (?, ?, ?)";
    MYSQL_STMT *st = mysql_stmt_init(my);
    MYSQL_BIND b[3];
    unsigned long name_len = strlen(m->name), sum_len = strlen(m->checksum);
    int err = 0;

    if (!st)
        return server_error(my, NULL, why, whylen);
    memset(b, 0, sizeof(b));
    b[0].buffer_type = MYSQL_TYPE_LONG;
    b[0].buffer = (void *)&m->version;
    b[0].is_unsigned = 1;
    b[1].buffer_type = MYSQL_TYPE_STRING;
    b[1].buffer = (void *)m->name;
    b[1].length = &name_len;
    b[2].buffer_type = MYSQL_TYPE_STRING;
    b[2].buffer = (void *)m->checksum;
    b[2].length = &sum_len;
    if (mysql_stmt_prepare(st, sql, strlen(sql)) ||
        mysql_stmt_bind_param(st, b) || mysql_stmt_execute(st))
        err = server_error(my, st, why, whylen);
    mysql_stmt_close(st);
    return err;
}

/* Apply m: its statements and its record in one transaction (which DDL
 * commits as it goes: see store_migrate()). */
static int apply(MYSQL *my, const struct store_migration *m, char *why,
                 size_t whylen)
{
    const char *p = m->sql, *s;
    size_t len;
    int err;

    if ((err = run(my, "START TRANSACTION", 17, why, whylen)))
        return err;
    while (sql_split_next(&p, &s, &len)) {
        if ((err = run(my, s, len, why, whylen)))
            goto rollback;
    }
    if ((err = record(my, m, why, whylen)))
        goto rollback;
    if (mysql_commit(my))
        return server_error(my, NULL, why, whylen);
    return 0;
rollback:
    mysql_rollback(my);
    return err;
}

/* GET_LOCK(name, wait): 0 taken, -ETIMEDOUT not within wait, or as
 * server_error(). The lock is the connection's until it closes. */
static int lock_take(MYSQL *my, const char *name, unsigned wait, char *why,
                     size_t whylen)
{
    static const char sql[] = "SELECT GET_LOCK(?, ?)";
    MYSQL_STMT *st = mysql_stmt_init(my);
    unsigned long name_len = strlen(name);
    long long got = 0;
    my_bool got_null = 0;
    MYSQL_BIND b[2], out;
    int err = 0;

    if (!st)
        return server_error(my, NULL, why, whylen);
    memset(b, 0, sizeof(b));
    memset(&out, 0, sizeof(out));
    b[0].buffer_type = MYSQL_TYPE_STRING;
    b[0].buffer = (void *)name;
    b[0].length = &name_len;
    b[1].buffer_type = MYSQL_TYPE_LONG;
    b[1].buffer = &wait;
    b[1].is_unsigned = 1;
    out.buffer_type = MYSQL_TYPE_LONGLONG;
    out.buffer = &got;
    out.is_null = &got_null;
    if (mysql_stmt_prepare(st, sql, strlen(sql)) ||
        mysql_stmt_bind_param(st, b) || mysql_stmt_execute(st) ||
        mysql_stmt_bind_result(st, &out) || mysql_stmt_fetch(st) != 0) {
        err = server_error(my, st, why, whylen);
    } else if (got_null || got != 1) {
        snprintf(why, whylen,
                 "another seckilld migrate held the lock %s for %u s", name,
                 wait);
        err = -ETIMEDOUT;
    }
    mysql_stmt_close(st);
    return err;
}

/* Read schema_version into done[] (done[v - 1]: version v recorded) and
 * r->version; a recorded checksum unlike the compiled file's: -EBADMSG. */
static int read_recorded(MYSQL *my, bool *done, struct store_migrate_report *r)
{
    static const char sql[] = "SELECT version, checksum FROM schema_version "
                              "ORDER BY version";
    MYSQL_RES *res;
    MYSQL_ROW row;
    int err = 0;

    if (mysql_real_query(my, sql, strlen(sql)) ||
        !(res = mysql_store_result(my)))
        return server_error(my, NULL, r->why, sizeof(r->why));
    while (!err && (row = mysql_fetch_row(res))) {
        unsigned v = (unsigned)strtoul(row[0], NULL, 10);
        const struct store_migration *m;

        if (v > r->version)
            r->version = v;
        if (v == 0 || v > store_migration_count)
            continue; /* a newer binary's: not ours to judge */
        m = &store_migrations[v - 1];
        done[v - 1] = true;
        if (!row[1] || strcmp(row[1], m->checksum) != 0) {
            r->failed = m;
            snprintf(r->why, sizeof(r->why),
                     "recorded with checksum %.12s..., the file has "
                     "%.12s...: it was changed after it was applied",
                     row[1] ? row[1] : "NULL", m->checksum);
            err = -EBADMSG;
        }
    }
    mysql_free_result(res);
    return err;
}

int store_migrate(const struct store_config *cfg, unsigned lock_wait_s,
                  struct store_migrate_report *r)
{
    bool *done = xcalloc(store_migration_count, sizeof(*done));
    char lock_name[65];
    MYSQL *my;
    int err;

    r->applied_count = 0;
    r->version = 0;
    r->failed = NULL;
    r->why[0] = '\0';
    /* No read timeout: an ALTER of a big table takes what it takes. */
    if ((err = store_mysql_open(cfg, 0, &my, r->why, sizeof(r->why))))
        goto out_free;
    /* GET_LOCK is per server: one name per database (64 bytes at most). */
    snprintf(lock_name, sizeof(lock_name), "seckill-migrate:%s", cfg->mysql_db);
    if ((err = run(my, MIGRATE_LOCK_WAIT_SQL, strlen(MIGRATE_LOCK_WAIT_SQL),
                   r->why, sizeof(r->why))) ||
        (err = lock_take(my, lock_name, lock_wait_s, r->why, sizeof(r->why))) ||
        (err = run(my, schema_version_sql, strlen(schema_version_sql), r->why,
                   sizeof(r->why))) ||
        (err = read_recorded(my, done, r)))
        goto out_close;
    for (size_t i = 0; i < store_migration_count; i++) {
        const struct store_migration *m = &store_migrations[i];
        int64_t t0 = util_mono_ms();

        if (done[i])
            continue;
        if ((err = apply(my, m, r->why, sizeof(r->why)))) {
            r->failed = m;
            goto out_close;
        }
        r->applied_count++;
        if (m->version > r->version)
            r->version = m->version;
        if (r->applied)
            r->applied(r->ctx, m, util_mono_ms() - t0);
    }
out_close:
    /* Closing the connection releases the lock. */
    mysql_close(my);
out_free:
    free(done);
    return err;
}
