/*
 * backends.c - the servers the fault suite breaks on purpose: a private
 * redis-server, a private MariaDB in a temporary directory (the shared
 * ones of scripts/services.sh are never killed or paused), the TCP proxy
 * of tests/tools/tcpproxy.c, and small MySQL helpers.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/faults/faults.h"

/* ---- MySQL ---- */

MYSQL *fdb_connect(const struct db_target *t, unsigned timeout_s)
{
    unsigned proto = MYSQL_PROTOCOL_TCP;
    MYSQL *my = mysql_init(NULL);

    if (!my)
        abort();
    mysql_options(my, MYSQL_OPT_PROTOCOL, &proto);
    mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &timeout_s);
    mysql_options(my, MYSQL_OPT_READ_TIMEOUT, &timeout_s);
    mysql_options(my, MYSQL_OPT_WRITE_TIMEOUT, &timeout_s);
    if (!mysql_real_connect(my, t->host, t->user, t->pass, t->db, t->port, NULL,
                            0)) {
        mysql_close(my);
        return NULL;
    }
    return my;
}

static char *vformat(const char *fmt, va_list ap)
{
    char *s = NULL;

    if (vasprintf(&s, fmt, ap) < 0)
        abort();
    return s;
}

int fdb_scalar(MYSQL *my, int64_t *out, const char *fmt, ...)
{
    va_list ap;
    char *sql;
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc = -1;

    va_start(ap, fmt);
    sql = vformat(fmt, ap);
    va_end(ap);
    if (mysql_query(my, sql) == 0 && (res = mysql_store_result(my))) {
        row = mysql_fetch_row(res);
        if (row) {
            *out = row[0] ? strtoll(row[0], NULL, 10) : -1;
            rc = 0;
        }
        mysql_free_result(res);
    }
    free(sql);
    return rc;
}

unsigned fdb_exec(MYSQL *my, const char *fmt, ...)
{
    va_list ap;
    char *sql;
    unsigned err = 0;

    va_start(ap, fmt);
    sql = vformat(fmt, ap);
    va_end(ap);
    if (mysql_query(my, sql) != 0)
        err = mysql_errno(my);
    free(sql);
    return err;
}

/* ---- helpers ---- */

static void reap_kill(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = 0;
}

/* ---- private Redis ---- */

int predis_start(struct predis *r)
{
    const char *args[12] = {0};
    int n = 0;

    if (!r->port) {
        r->port = it_free_port();
        snprintf(r->log, sizeof(r->log), "%s/redis-private-%u.log",
                 it_log_dir(), (unsigned)r->port);
        unlink(r->log);
    }
    if (r->dir[0] && mkdir(r->dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "faults: mkdir %s: %s\n", r->dir, strerror(errno));
        return -1;
    }
    if (r->dir[0]) {
        const char *aof[] = {"--appendonly", "yes",   "--appendfsync",
                             "always",       "--dir", r->dir};

        memcpy(args, aof, sizeof(aof));
        n = 6;
    }
    if (r->replicaof[0]) {
        args[n++] = "--replicaof";
        args[n++] = r->replicaof;
    }
    r->pid = it_redis_start_env(r->port, r->log, NULL, n ? args : NULL, r->env);
    return r->pid > 0 ? 0 : -1;
}

/* rm -rf dir (only a directory of the suite's logs), then cp -a from dir. */
static int dir_replace(const char *from, const char *dir)
{
    char *rm[] = {"/bin/rm", "-rf", (char *)dir, NULL};
    char *cp[] = {"/bin/cp", "-a", (char *)from, (char *)dir, NULL};
    char *out = NULL;
    int status;

    if (strncmp(dir, it_log_dir(), strlen(it_log_dir())) != 0)
        return -1;
    status = it_run_capture(rm, &out);
    free(out);
    out = NULL;
    if (status == 0)
        status = it_run_capture(cp, &out);
    free(out);
    return status == 0 ? 0 : -1;
}

int predis_copy_aof(const struct predis *r, const char *to)
{
    return r->dir[0] ? dir_replace(r->dir, to) : -1;
}

int predis_restore_aof(struct predis *r, const char *from)
{
    if (!r->dir[0] || r->pid > 0)
        return -1;
    return dir_replace(from, r->dir);
}

void predis_kill(struct predis *r)
{
    reap_kill(&r->pid);
}

struct fire {
    uint16_t port;
    char cmd[128];
};

static void *fire_run(void *arg)
{
    struct fire *f = arg;
    redisContext *rc = redisConnect("127.0.0.1", f->port);

    if (rc && !rc->err)
        freeReplyObject(redisCommand(rc, f->cmd));
    if (rc)
        redisFree(rc);
    free(f);
    return NULL;
}

int predis_fire(struct predis *r, const char *cmd)
{
    struct fire *f = xcalloc(1, sizeof(*f));
    pthread_t th;

    f->port = r->port;
    snprintf(f->cmd, sizeof(f->cmd), "%s", cmd);
    if (pthread_create(&th, NULL, fire_run, f) != 0) {
        free(f);
        return -1;
    }
    pthread_detach(th);
    return 0;
}

long long predis_int(uint16_t port, unsigned db, const char *fmt, ...)
{
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    long long n = -1;
    va_list ap;

    if (!rc || rc->err)
        goto out;
    redisSetTimeout(rc, tv);
    if (db)
        freeReplyObject(redisCommand(rc, "SELECT %u", db));
    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (r && r->type == REDIS_REPLY_INTEGER)
        n = r->integer;
    else if (r && r->type == REDIS_REPLY_STRING)
        n = strtoll(r->str, NULL, 10);
out:
    freeReplyObject(r);
    if (rc)
        redisFree(rc);
    return n;
}

int predis_run(uint16_t port, unsigned db, const char *fmt, ...)
{
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    va_list ap;
    int rcode = -1;

    if (!rc || rc->err)
        goto out;
    redisSetTimeout(rc, tv);
    if (db) {
        freeReplyObject(redisCommand(rc, "SELECT %u", db));
    }
    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    rcode = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
out:
    freeReplyObject(r);
    if (rc)
        redisFree(rc);
    return rcode;
}

/* ---- private MariaDB ---- */

static const char *admin_user(void)
{
    struct passwd *pw;

    if (geteuid() == 0)
        return "root";
    pw = getpwuid(geteuid());
    return pw ? pw->pw_name : "root";
}

/* A root-over-the-socket connection (unix_socket authentication). */
static MYSQL *pmaria_admin(struct pmaria *m)
{
    unsigned proto = MYSQL_PROTOCOL_SOCKET, t = 2;
    MYSQL *my = mysql_init(NULL);

    if (!my)
        abort();
    mysql_options(my, MYSQL_OPT_PROTOCOL, &proto);
    mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    if (!mysql_real_connect(my, NULL, admin_user(), NULL, NULL, 0, m->sock,
                            CLIENT_MULTI_STATEMENTS)) {
        mysql_close(my);
        return NULL;
    }
    return my;
}

int pmaria_start(struct pmaria *m)
{
    const char *bin = it_which("mariadbd");
    char datadir[IT_PATH_MAX + 16], sock[IT_PATH_MAX + 16],
        pidf[IT_PATH_MAX + 16], port[32], sid[32], binlog[IT_PATH_MAX + 16],
        relay[IT_PATH_MAX + 16];
    char *argv[24];
    int a = 0;

    if (!bin) {
        fprintf(stderr, "faults: mariadbd not found\n");
        return -1;
    }
    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", m->dir);
    snprintf(sock, sizeof(sock), "--socket=%s", m->sock);
    snprintf(pidf, sizeof(pidf), "--pid-file=%s/mariadb.pid", m->dir);
    snprintf(port, sizeof(port), "--port=%u", (unsigned)m->port);
    argv[a++] = (char *)bin;
    argv[a++] = "--no-defaults";
    if (geteuid() == 0)
        argv[a++] = "--user=root";
    argv[a++] = datadir;
    argv[a++] = port;
    argv[a++] = "--bind-address=127.0.0.1";
    argv[a++] = sock;
    argv[a++] = pidf;
    argv[a++] = "--skip-name-resolve";
    argv[a++] = "--character-set-server=utf8mb4";
    argv[a++] = "--collation-server=utf8mb4_bin";
    argv[a++] = "--innodb-buffer-pool-size=64M";
    argv[a++] = "--max-connections=500";
    if (m->server_id) {
        snprintf(sid, sizeof(sid), "--server-id=%u", m->server_id);
        snprintf(binlog, sizeof(binlog), "--log-bin=%s/binlog", m->dir);
        snprintf(relay, sizeof(relay), "--relay-log=%s/relay", m->dir);
        argv[a++] = sid;
        argv[a++] = binlog;
        argv[a++] = relay;
        argv[a++] = "--binlog-format=ROW";
    }
    if (m->replica)
        argv[a++] = "--read-only";
    argv[a] = NULL;
    m->pid = it_spawn(argv, NULL, m->log);
    if (m->pid < 0)
        return -1;
    for (int i = 0; i < 300; i++) {
        MYSQL *my = pmaria_admin(m);

        if (my) {
            mysql_close(my);
            return 0;
        }
        if (waitpid(m->pid, NULL, WNOHANG) == m->pid) {
            m->pid = 0;
            break;
        }
        sleep_ms(100);
    }
    fprintf(stderr, "faults: private mariadbd did not start; log %s\n", m->log);
    return -1;
}

static int pmaria_provision(struct pmaria *m)
{
    FILE *f = fopen("sql/schema.sql", "r");
    char *schema = NULL;
    size_t len = 0;
    int rc = -1;

    if (f && getdelim(&schema, &len, '\0', f) >= 0)
        rc = pmaria_sql(
            m,
            "CREATE DATABASE seckill_fault CHARACTER SET utf8mb4 "
            "COLLATE utf8mb4_bin;"
            "CREATE USER 'seckill'@'127.0.0.1' IDENTIFIED BY 'seckill';"
            "GRANT ALL PRIVILEGES ON seckill_fault.* TO "
            "'seckill'@'127.0.0.1';"
            "USE seckill_fault;%s",
            schema);
    if (rc)
        fprintf(stderr, "faults: provisioning the private MariaDB failed\n");
    free(schema);
    if (f)
        fclose(f);
    return rc;
}

int pmaria_create(struct pmaria *m)
{
    const char *bin = it_which("mariadb-install-db");
    char tmpl[] = "/tmp/seckill-faults-XXXXXX";
    char datadir[IT_PATH_MAX + 16], sockuser[128];
    char *argv[10], *out = NULL;
    int a = 0, status;

    unsigned server_id = m->server_id;
    bool replica = m->replica;

    memset(m, 0, sizeof(*m));
    m->server_id = server_id;
    m->replica = replica;
    if (!bin || !mkdtemp(tmpl)) {
        fprintf(stderr, "faults: mariadb-install-db or a temp dir missing\n");
        return -1;
    }
    snprintf(m->dir, sizeof(m->dir), "%s", tmpl);
    snprintf(m->sock, sizeof(m->sock), "%s/mysql.sock", m->dir);
    m->port = it_free_port();
    snprintf(m->log, sizeof(m->log), "%s/mariadb-private-%u.log", it_log_dir(),
             (unsigned)m->port);
    unlink(m->log);
    snprintf(datadir, sizeof(datadir), "--datadir=%s/data", m->dir);
    snprintf(sockuser, sizeof(sockuser), "--auth-root-socket-user=%s",
             admin_user());
    argv[a++] = (char *)bin;
    argv[a++] = "--no-defaults";
    argv[a++] = datadir;
    argv[a++] = "--auth-root-authentication-method=socket";
    argv[a++] = sockuser;
    argv[a++] = "--skip-test-db";
    if (geteuid() == 0)
        argv[a++] = "--user=root";
    argv[a] = NULL;
    status = it_run_capture(argv, &out);
    free(out);
    if (status != 0) {
        fprintf(stderr, "faults: mariadb-install-db failed (%d)\n", status);
        return -1;
    }
    if (pmaria_start(m) != 0 || (!m->replica && pmaria_provision(m) != 0))
        return -1;
    return 0;
}

int pmaria_sql(struct pmaria *m, const char *fmt, ...)
{
    MYSQL *my = pmaria_admin(m);
    va_list ap;
    char *sql;
    int rc;

    if (!my)
        return -1;
    va_start(ap, fmt);
    sql = vformat(fmt, ap);
    va_end(ap);
    rc = mysql_query(my, sql) ? -1 : 0;
    while (rc == 0) {
        MYSQL_RES *res = mysql_store_result(my);
        int next;

        mysql_free_result(res);
        next = mysql_next_result(my);
        if (next > 0)
            rc = -1;
        if (next != 0)
            break;
    }
    if (rc)
        fprintf(stderr, "faults: %.200s: %s\n", sql, mysql_error(my));
    free(sql);
    mysql_close(my);
    return rc;
}

void pmaria_kill(struct pmaria *m)
{
    reap_kill(&m->pid);
}

void pmaria_destroy(struct pmaria *m)
{
    int status;

    if (m->pid > 0) {
        kill(m->pid, SIGTERM);
        if (it_wait_exit(m->pid, 30000, &status) != 0)
            reap_kill(&m->pid);
        m->pid = 0;
    }
    if (m->dir[0] && strncmp(m->dir, "/tmp/seckill-faults-", 20) == 0) {
        char *argv[] = {"/bin/rm", "-rf", m->dir, NULL};
        char *out = NULL;

        it_run_capture(argv, &out);
        free(out);
    }
}

void pmaria_target(const struct pmaria *m, struct db_target *t)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->host, sizeof(t->host), "127.0.0.1");
    t->port = m->port;
    snprintf(t->user, sizeof(t->user), "seckill");
    snprintf(t->pass, sizeof(t->pass), "seckill");
    snprintf(t->db, sizeof(t->db), "seckill_fault");
}
