/*
 * mysql.c - the MySQL/MariaDB lock backend: GET_LOCK/RELEASE_LOCK on a
 * session of its own per held lock, and a fencing token from the
 * lock_fences table.
 *
 * A user lock belongs to the session that took it, and one session taking
 * a name twice would re-enter its own lock; so each held lock keeps one
 * connection (in l->bs) from acquire to release, and idle connections wait
 * in a small pool. The lock lives as long as the session: a crashed
 * client's connection closes and the server frees its locks, and so does a
 * KILL; the holder finds out at its next renew or release (held = 0).
 *
 * Lock names. User locks are server-wide (not per database), MySQL refuses
 * names over 64 characters and compares them case-insensitively, and ours
 * are any bytes. So every name maps, one scheme for all, to
 *
 *     "seckill:" + lower-case hex of BLAKE2b-192(database NUL name)
 *
 * (libsodium's crypto_generichash, 24 bytes: 56 ASCII characters). The
 * database from the URL scopes the names, as it scopes lock_fences: the
 * service and the tests on one server do not contend. The fence row is
 * keyed by the name itself.
 *
 * Timeouts. Connector/C's timeout options are whole seconds and fixed at
 * connect, too coarse for timeout_ms and unable to cover a GET_LOCK that
 * waits. So every call that can touch the network runs through the
 * non-blocking API (MYSQL_OPT_NONBLOCK) and our own poll(2) against a
 * millisecond deadline: timeout_ms per call, plus the wait budget for
 * GET_LOCK. A call past its deadline is abandoned and its connection
 * closed. Host names are resolved by getaddrinfo(3), which is not bounded.
 */
#include "lock/internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <sodium.h>

#include "common/sqlflavour.h"
#include "common/util.h"

#define MYSQL_DEFAULT_PORT 3306
/* Idle connections kept for later locks; more are closed on release. */
#define POOL_IDLE_MAX 32
/* The non-blocking API runs each call on a stack of its own. */
#define ASYNC_STACK_SIZE ((size_t)128 * 1024)
/* After a deadline, how many times an abandoned call is told so. */
#define ABORT_ROUNDS 16

#define KEY_PREFIX "seckill:"
#define KEY_HASH_BYTES 24
#define KEY_LEN (sizeof(KEY_PREFIX) - 1 + 2 * KEY_HASH_BYTES)

enum my_stmt { ST_GET, ST_RELEASE, ST_CHECK, ST_FENCE, ST_COUNT };

static const char *const stmt_sql[ST_COUNT] = {
    [ST_GET] = "SELECT GET_LOCK(?, ?)",
    [ST_RELEASE] = "SELECT RELEASE_LOCK(?)",
    [ST_CHECK] = "SELECT IS_USED_LOCK(?) = CONNECTION_ID()",
    /* LAST_INSERT_ID(expr) hands the new token back in the OK packet. */
    [ST_FENCE] = "INSERT INTO lock_fences (name, token) "
                 "VALUES (?, LAST_INSERT_ID(1)) "
                 "ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)",
};

/* Their names in logs. */
static const char *const stmt_op[ST_COUNT] = {
    [ST_GET] = "get_lock",
    [ST_RELEASE] = "release_lock",
    [ST_CHECK] = "is_used_lock",
    [ST_FENCE] = "fence_insert",
};

/* As in sql/schema.sql; made here too for databases loaded without it. */
static const char fences_ddl[] =
    "CREATE TABLE IF NOT EXISTS lock_fences ("
    "name VARBINARY(255) NOT NULL PRIMARY KEY, "
    "token BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB";

/* One session: idle in the pool, or held by one lock (l->bs). */
struct my_conn {
    MYSQL *my;
    MYSQL_STMT *stmts[ST_COUNT];
    struct my_conn *next;
    char key[KEY_LEN + 1]; /* the GET_LOCK name of the lock held */
};

/* The backend's state, c->impl. */
struct my_backend {
    const struct lock_client *c;
    const char *host, *user, *pass, *db;
    unsigned port;
    pthread_mutex_t mu; /* guards idle and nidle */
    struct my_conn *idle;
    unsigned nidle;
    atomic_int fences_ready; /* lock_fences made or known to exist */
};

enum call_op {
    CALL_CONNECT,
    CALL_QUERY,
    CALL_PREPARE,
    CALL_EXECUTE,
    CALL_STORE,
    CALL_FETCH,
    CALL_CLOSE,
    CALL_PING,
};

/* One library call to run without blocking: its arguments and result. */
struct call {
    enum call_op op;
    const struct my_backend *b; /* CALL_CONNECT */
    MYSQL_STMT *stmt;           /* CALL_PREPARE .. CALL_FETCH */
    const char *sql;            /* CALL_QUERY, CALL_PREPARE */
    MYSQL *ret_my;              /* CALL_CONNECT */
    int ret;
};

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_ok;

static void lib_init(void)
{
    /* Not thread-safe in the library, hence once; main() may have done
     * it already, which is harmless. */
    lib_ok = mysql_library_init(0, NULL, NULL) == 0 && sodium_init() >= 0;
}

/* Start (start = 1) or continue the call with the events that occurred. */
static int call_step(MYSQL *my, struct call *c, int start, int ev)
{
    const struct my_backend *b = c->b;

    switch (c->op) {
    case CALL_CONNECT:
        return start
                   ? mysql_real_connect_start(&c->ret_my, my, b->host, b->user,
                                              b->pass, b->db, b->port, NULL, 0)
                   : mysql_real_connect_cont(&c->ret_my, my, ev);
    case CALL_QUERY:
        return start
                   ? mysql_real_query_start(&c->ret, my, c->sql, strlen(c->sql))
                   : mysql_real_query_cont(&c->ret, my, ev);
    case CALL_PREPARE:
        return start ? mysql_stmt_prepare_start(&c->ret, c->stmt, c->sql,
                                                strlen(c->sql))
                     : mysql_stmt_prepare_cont(&c->ret, c->stmt, ev);
    case CALL_EXECUTE:
        return start ? mysql_stmt_execute_start(&c->ret, c->stmt)
                     : mysql_stmt_execute_cont(&c->ret, c->stmt, ev);
    case CALL_STORE:
        return start ? mysql_stmt_store_result_start(&c->ret, c->stmt)
                     : mysql_stmt_store_result_cont(&c->ret, c->stmt, ev);
    case CALL_FETCH:
        return start ? mysql_stmt_fetch_start(&c->ret, c->stmt)
                     : mysql_stmt_fetch_cont(&c->ret, c->stmt, ev);
    case CALL_CLOSE:
        return start ? mysql_close_start(my) : mysql_close_cont(my, ev);
    case CALL_PING:
        return start ? mysql_ping_start(&c->ret, my)
                     : mysql_ping_cont(&c->ret, my, ev);
    }
    return 0;
}

/*
 * Wait for what a suspended call asked for (status), until deadline or
 * the library's own timer. Returns the MYSQL_WAIT_* events that occurred;
 * MYSQL_WAIT_TIMEOUT when time ran out.
 */
static int call_wait(MYSQL *my, int status, int64_t deadline)
{
    struct pollfd pfd = {.fd = (int)mysql_get_socket(my), .events = 0};
    int64_t end = deadline;

    if (status & MYSQL_WAIT_READ)
        pfd.events |= POLLIN;
    if (status & MYSQL_WAIT_WRITE)
        pfd.events |= POLLOUT;
    if (status & MYSQL_WAIT_EXCEPT)
        pfd.events |= POLLPRI;
    if (status & MYSQL_WAIT_TIMEOUT) {
        int64_t lib = lock__mono_ms() + mysql_get_timeout_value_ms(my);
        if (lib < end)
            end = lib;
    }
    for (;;) {
        int64_t left = end - lock__mono_ms();
        if (left <= 0)
            return MYSQL_WAIT_TIMEOUT;
        int n = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n < 0 && errno != EINTR)
            return MYSQL_WAIT_TIMEOUT;
        if (n <= 0)
            continue;
        int ev = 0;
        if (pfd.revents & (POLLIN | POLLHUP | POLLERR))
            ev |= MYSQL_WAIT_READ;
        if (pfd.revents & (POLLOUT | POLLHUP | POLLERR))
            ev |= MYSQL_WAIT_WRITE;
        if (pfd.revents & POLLPRI)
            ev |= MYSQL_WAIT_EXCEPT;
        ev &= status;
        return ev ? ev : status & ~MYSQL_WAIT_TIMEOUT;
    }
}

/*
 * Run c on my until it completes or deadline passes. Returns 0 (c->ret
 * and the library's error tell how the call went), or -ETIMEDOUT: the call
 * was abandoned (it fails as on a read timeout) and the connection is fit
 * only for closing.
 */
static int call_run(MYSQL *my, struct call *c, int64_t deadline)
{
    int status = call_step(my, c, 1, 0);
    int timed_out = 0;
    int aborts = 0;

    while (status != 0) {
        int ev = MYSQL_WAIT_TIMEOUT;
        if (!timed_out) {
            ev = call_wait(my, status, deadline);
            timed_out = ev == MYSQL_WAIT_TIMEOUT && lock__mono_ms() >= deadline;
        } else if (++aborts > ABORT_ROUNDS) {
            /* Still going: cut the connection so that every read and
             * write fails at once. */
            int fd = (int)mysql_get_socket(my);
            if (fd >= 0)
                shutdown(fd, SHUT_RDWR);
            if (status & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE))
                ev = status & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE);
        }
        status = call_step(my, c, 0, ev);
    }
    return timed_out ? -ETIMEDOUT : 0;
}

/*
 * Map the failure of the last call on k (of statement s, or NULL) to
 * -errno and log it. timed_out: the call ran past its deadline.
 */
static int conn_error(const struct my_backend *b, const struct my_conn *k,
                      MYSQL_STMT *s, int timed_out, const char *op)
{
    unsigned e = s ? mysql_stmt_errno(s) : mysql_errno(k->my);
    const char *msg = s ? mysql_stmt_error(s) : mysql_error(k->my);
    int err;

    if (timed_out)
        err = -ETIMEDOUT;
    else if (e == CR_CONNECTION_ERROR || e == CR_CONN_HOST_ERROR ||
             e == CR_UNKNOWN_HOST)
        err = -ECONNREFUSED;
    else if (e == ER_ACCESS_DENIED_ERROR || e == ER_DBACCESS_DENIED_ERROR)
        err = -EACCES;
    else if (sql_error_is_disconnect(e))
        err = -ECONNRESET;
    else
        err = -EIO;
    log_warn("mysql lock call failed",
             "op=%s host=%s port=%u timeout_ms=%u timed_out=%d errno=%u "
             "err=\"%s\"",
             op, b->host, b->port, (unsigned)b->c->timeout_ms, timed_out, e,
             msg);
    return err;
}

static int64_t deadline_after(const struct my_backend *b, uint64_t extra_ms)
{
    return lock__mono_ms() + (int64_t)b->c->timeout_ms + (int64_t)extra_ms;
}

/* Close k's session (which frees any lock it holds) and free k. */
static void conn_close(const struct my_backend *b, struct my_conn *k)
{
    if (!k)
        return;
    if (k->my) {
        struct call c = {.op = CALL_CLOSE};
        /* After an abandoned call the library has dropped the socket
         * already; otherwise this sends COM_QUIT and does not wait. */
        call_run(k->my, &c, deadline_after(b, 0));
    }
    /* With the connection gone, closing a statement only frees it. */
    for (int i = 0; i < ST_COUNT; i++)
        if (k->stmts[i])
            mysql_stmt_close(k->stmts[i]);
    free(k);
}

/* Logged once per process: which server the lock talks to. */
static atomic_int flavour_logged;

/* Open a session within timeout_ms. Returns it, or NULL with *err set. */
static struct my_conn *conn_open(const struct my_backend *b, int *err)
{
    struct my_conn *k = xcalloc(1, sizeof(*k));
    size_t stack = ASYNC_STACK_SIZE;
    unsigned proto = MYSQL_PROTOCOL_TCP;
    struct call c = {.op = CALL_CONNECT, .b = b};
    int timed_out;

    k->my = mysql_init(NULL);
    if (!k->my) {
        log_error("mysql lock init failed", NULL);
        *err = -EIO;
        goto fail;
    }
    if (mysql_options(k->my, MYSQL_OPT_NONBLOCK, &stack)) {
        log_error("mysql lock init failed", "op=nonblock");
        *err = -EIO;
        goto fail;
    }
    mysql_options(k->my, MYSQL_OPT_PROTOCOL, &proto);
    mysql_options(k->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    /* The fence insert must commit on its own, whatever the server's
     * default. */
    mysql_options(k->my, MYSQL_INIT_COMMAND, "SET SESSION autocommit = 1");
    timed_out = call_run(k->my, &c, deadline_after(b, 0)) != 0;
    if (!c.ret_my) {
        *err = conn_error(b, k, NULL, timed_out, "connect");
        goto fail;
    }
    /* GET_LOCK and the fence table work alike on MariaDB and MySQL: no
     * flavour-specific session settings, but say which one it is. */
    if (!atomic_exchange(&flavour_logged, 1))
        log_info("mysql lock server", "flavour=%s version=\"%s\" host=%s",
                 sql_flavour_name(sql_flavour_of(mysql_get_server_info(k->my))),
                 mysql_get_server_info(k->my), b->host);
    return k;
fail:
    conn_close(b, k);
    return NULL;
}

/*
 * An idle session has nothing to read: if its socket is readable, the
 * server closed it (KILL, shutdown, wait_timeout) or sent a farewell
 * error, and the session's locks are gone.
 */
static int conn_dead(const struct my_conn *k)
{
    struct pollfd pfd = {.fd = (int)mysql_get_socket(k->my), .events = POLLIN};

    return pfd.fd < 0 || poll(&pfd, 1, 0) != 0;
}

/* A live idle session from the pool, or NULL. */
static struct my_conn *pool_take(struct my_backend *b)
{
    for (;;) {
        pthread_mutex_lock(&b->mu);
        struct my_conn *k = b->idle;
        if (k) {
            b->idle = k->next;
            b->nidle--;
        }
        pthread_mutex_unlock(&b->mu);
        if (!k || !conn_dead(k))
            return k;
        log_info("mysql lock connection closed while idle", "host=%s port=%u",
                 b->host, b->port);
        conn_close(b, k);
    }
}

/* Give k (holding no lock) back to the pool, or close it if full. */
static void pool_put(struct my_backend *b, struct my_conn *k)
{
    k->key[0] = '\0';
    pthread_mutex_lock(&b->mu);
    if (b->nidle < POOL_IDLE_MAX) {
        k->next = b->idle;
        b->idle = k;
        b->nidle++;
        k = NULL;
    }
    pthread_mutex_unlock(&b->mu);
    conn_close(b, k);
}

/* Statement id on k, prepared on first use. Returns 0 or -errno. */
static int conn_stmt(const struct my_backend *b, struct my_conn *k,
                     enum my_stmt id, int64_t deadline, MYSQL_STMT **out)
{
    MYSQL_STMT *s = k->stmts[id];
    struct call c = {.op = CALL_PREPARE, .sql = stmt_sql[id]};
    int timed_out;

    if (s) {
        *out = s;
        return 0;
    }
    s = mysql_stmt_init(k->my);
    if (!s)
        return conn_error(b, k, NULL, 0, "stmt_init");
    /* Kept even if the prepare fails: conn_close() frees it. */
    k->stmts[id] = s;
    c.stmt = s;
    timed_out = call_run(k->my, &c, deadline) != 0;
    if (timed_out || c.ret)
        return conn_error(b, k, s, timed_out, stmt_op[id]);
    *out = s;
    return 0;
}

/*
 * Execute statement id on k with params (may be NULL) before deadline.
 * With result non-NULL, fetch the one row the statement returns into it.
 * Returns 0 or -errno (logged); after an error, k is fit only for closing.
 */
static int conn_exec(const struct my_backend *b, struct my_conn *k,
                     enum my_stmt id, MYSQL_BIND *params, MYSQL_BIND *result,
                     int64_t deadline)
{
    MYSQL_STMT *s;
    struct call c = {.op = CALL_EXECUTE};
    int err = conn_stmt(b, k, id, deadline, &s);
    int timed_out;

    if (err)
        return err;
    c.stmt = s;
    if (params && mysql_stmt_bind_param(s, params))
        return conn_error(b, k, s, 0, stmt_op[id]);
    timed_out = call_run(k->my, &c, deadline) != 0;
    if (timed_out || c.ret)
        return conn_error(b, k, s, timed_out, stmt_op[id]);
    if (!result)
        return 0;
    if (mysql_stmt_bind_result(s, result))
        return conn_error(b, k, s, 0, stmt_op[id]);
    c.op = CALL_STORE;
    timed_out = call_run(k->my, &c, deadline) != 0;
    if (timed_out || c.ret)
        return conn_error(b, k, s, timed_out, stmt_op[id]);
    /* The row is stored: fetching it reads no more from the network. */
    c.op = CALL_FETCH;
    timed_out = call_run(k->my, &c, deadline) != 0;
    if (timed_out || (c.ret != 0 && c.ret != MYSQL_NO_DATA))
        err = conn_error(b, k, s, timed_out, stmt_op[id]);
    else if (c.ret == MYSQL_NO_DATA) {
        log_warn("mysql lock call failed", "op=%s err=\"no row\"", stmt_op[id]);
        err = -EIO;
    }
    mysql_stmt_free_result(s);
    return err;
}

/*
 * Run a statement that takes the lock key and returns one integer or
 * NULL (*is_null). Returns 0 or -errno, as conn_exec().
 */
static int conn_key_call(const struct my_backend *b, struct my_conn *k,
                         enum my_stmt id, double wait_s, int64_t deadline,
                         long long *v, my_bool *is_null)
{
    MYSQL_BIND params[2];
    MYSQL_BIND result[1];
    unsigned long key_len = (unsigned long)strlen(k->key);

    memset(params, 0, sizeof(params));
    memset(result, 0, sizeof(result));
    params[0].buffer_type = MYSQL_TYPE_STRING;
    params[0].buffer = k->key;
    params[0].buffer_length = key_len;
    params[0].length = &key_len;
    params[1].buffer_type = MYSQL_TYPE_DOUBLE;
    params[1].buffer = &wait_s;
    result[0].buffer_type = MYSQL_TYPE_LONGLONG;
    result[0].buffer = v;
    result[0].is_null = is_null;
    *v = 0;
    *is_null = 1;
    return conn_exec(b, k, id, params, result, deadline);
}

/* The GET_LOCK name of a lock name (see the top of the file). */
static void key_derive(const struct my_backend *b, const char *name, size_t len,
                       char key[KEY_LEN + 1])
{
    crypto_generichash_state st;
    unsigned char h[KEY_HASH_BYTES];
    size_t plen = sizeof(KEY_PREFIX) - 1;

    crypto_generichash_init(&st, NULL, 0, sizeof(h));
    crypto_generichash_update(&st, (const unsigned char *)b->db,
                              strlen(b->db) + 1);
    crypto_generichash_update(&st, (const unsigned char *)name, len);
    crypto_generichash_final(&st, h, sizeof(h));
    memcpy(key, KEY_PREFIX, plen);
    sodium_bin2hex(key + plen, KEY_LEN + 1 - plen, h, sizeof(h));
}

static int error_is_permission(unsigned e)
{
    return e == ER_TABLEACCESS_DENIED_ERROR || e == ER_DBACCESS_DENIED_ERROR ||
           e == ER_SPECIFIC_ACCESS_DENIED_ERROR;
}

/*
 * Make lock_fences on k, once per client. Without the CREATE privilege
 * the table must exist already: preparing the fence insert checks it.
 */
static int fences_ensure(struct my_backend *b, struct my_conn *k)
{
    struct call c = {.op = CALL_QUERY, .sql = fences_ddl};
    int64_t deadline = deadline_after(b, 0);
    MYSQL_STMT *s;
    int timed_out;

    if (atomic_load(&b->fences_ready))
        return 0;
    timed_out = call_run(k->my, &c, deadline) != 0;
    if (timed_out || c.ret) {
        unsigned e = mysql_errno(k->my);
        if (timed_out || !error_is_permission(e))
            return conn_error(b, k, NULL, timed_out, "create_lock_fences");
        log_info("mysql lock cannot create lock_fences, using it as is",
                 "errno=%u", e);
        int err = conn_stmt(b, k, ST_FENCE, deadline, &s);
        if (err)
            return err;
    }
    atomic_store(&b->fences_ready, 1);
    return 0;
}

/* Draw the next fencing token of l's name on k (which holds the lock). */
static int fence_next(const struct my_backend *b, struct my_conn *k,
                      const struct lock *l, uint64_t *token)
{
    MYSQL_BIND params[1];
    unsigned long name_len = (unsigned long)l->name_len;
    int err;

    memset(params, 0, sizeof(params));
    /* A BLOB parameter is sent as binary: the name is any bytes. */
    params[0].buffer_type = MYSQL_TYPE_BLOB;
    params[0].buffer = (void *)l->name;
    params[0].buffer_length = name_len;
    params[0].length = &name_len;
    err = conn_exec(b, k, ST_FENCE, params, NULL, deadline_after(b, 0));
    if (err)
        return err;
    *token = mysql_stmt_insert_id(k->stmts[ST_FENCE]);
    if (*token == 0) {
        log_warn("mysql lock call failed", "op=fence err=\"token 0\"");
        return -EIO;
    }
    return 0;
}

/*
 * Try to take l on the session k, waiting until start + wait_ms. k ends
 * up in l->bs (acquired), back in the pool (busy) or closed (error).
 */
static int acquire_on(struct my_backend *b, struct my_conn *k, struct lock *l,
                      int64_t start, uint32_t wait_ms, enum lock_status *status)
{
    int64_t left;
    long long v;
    my_bool is_null;
    uint64_t token;
    int err;

    key_derive(b, l->name, l->name_len, k->key);
    err = fences_ensure(b, k);
    if (err)
        goto close;
    /* The wait budget counts from the start, connecting included. */
    left = start + (int64_t)wait_ms - lock__mono_ms();
    if (left < 0)
        left = 0; /* GET_LOCK(name, 0) tries once */
    err = conn_key_call(b, k, ST_GET, (double)left / 1000.0,
                        deadline_after(b, (uint64_t)left), &v, &is_null);
    if (err)
        goto close;
    if (is_null) {
        log_warn("mysql lock call failed", "op=get_lock err=\"null\"");
        err = -EIO;
        goto close;
    }
    if (v != 1) {
        pool_put(b, k);
        *status = LOCK_BUSY;
        return 0;
    }
    /* On failure, closing the session releases the lock. */
    err = fence_next(b, k, l, &token);
    if (err)
        goto close;
    l->fence = token;
    l->bs = k;
    *status = LOCK_ACQUIRED;
    return 0;
close:
    conn_close(b, k);
    return err;
}

static int mysql_lock_acquire(struct lock *l, uint32_t wait_ms,
                              uint32_t lease_ms, enum lock_status *status)
{
    struct my_backend *b = l->c->impl;
    int64_t start = lock__mono_ms();
    int err;

    (void)lease_ms; /* the session is the lease */
    for (int attempt = 0;; attempt++) {
        struct my_conn *k = pool_take(b);
        int reused = k != NULL;
        if (!k && !(k = conn_open(b, &err)))
            return err;
        err = acquire_on(b, k, l, start, wait_ms, status);
        /* A pooled session can die unseen (say, the server restarted
         * between the idle check and the call); one fresh try. */
        if (err == -ECONNRESET && reused && attempt == 0)
            continue;
        return err;
    }
}

/*
 * l->bs after a release whose answer was lost. The call closed the
 * session, and a closed session frees its locks whether or not the
 * RELEASE_LOCK ran; until then the lock was this session's (GET_LOCK locks
 * belong to a session, and a session ended by the server reports an error
 * at once, not a timeout). So asked again, the release answers "held"
 * unless the lock was found lost before.
 */
static struct my_conn released_by_close;

static int mysql_lock_release(struct lock *l, int *held)
{
    struct my_backend *b = l->c->impl;
    struct my_conn *k = l->bs;
    long long v;
    my_bool is_null;
    int err;

    *held = 0;
    l->bs = NULL;
    if (!k)
        return 0; /* the watchdog found the session gone */
    if (k == &released_by_close) {
        *held = !atomic_load(&l->lost);
        return 0;
    }
    if (conn_dead(k)) {
        log_warn("mysql lock session ended while held", "op=release");
        conn_close(b, k);
        return 0;
    }
    err =
        conn_key_call(b, k, ST_RELEASE, 0, deadline_after(b, 0), &v, &is_null);
    if (err) {
        conn_close(b, k);
        /* The session ended (killed, server restarted): so did the lock,
         * before this release. */
        if (err == -ECONNRESET)
            return 0;
        l->bs = &released_by_close;
        l->release_unknown = 1;
        return err;
    }
    *held = !is_null && v == 1;
    pool_put(b, k);
    return 0;
}

static int mysql_lock_renew(struct lock *l, uint32_t lease_ms, int *held)
{
    struct my_backend *b = l->c->impl;
    struct my_conn *k = l->bs;
    long long v;
    my_bool is_null;

    (void)lease_ms;
    *held = 0;
    if (!k)
        return 0;
    if (!conn_dead(k) && conn_key_call(b, k, ST_CHECK, 0, deadline_after(b, 0),
                                       &v, &is_null) == 0) {
        *held = !is_null && v == 1;
        return 0;
    }
    /* Dead, or unusable after the error: closing it ends the session
     * and the lock with it, so the lock is lost either way. */
    log_warn("mysql lock session ended while held", "op=renew");
    conn_close(b, k);
    l->bs = NULL;
    return 0;
}

static int mysql_lock_open(struct lock_client *c)
{
    const struct url *u = &c->url;
    struct my_backend *b;

    if (u->nhosts != 1 || !u->path[0]) {
        log_error("lock url invalid",
                  "scheme=mysql reason=\"one host and a database needed\"");
        return -EINVAL;
    }
    pthread_once(&lib_once, lib_init);
    if (!lib_ok) {
        log_error("mysql lock init failed", "op=library_init");
        return -EIO;
    }
    b = xcalloc(1, sizeof(*b));
    b->c = c;
    b->host = u->hosts[0].host;
    b->port = u->hosts[0].port ? u->hosts[0].port : MYSQL_DEFAULT_PORT;
    b->user = u->user;
    b->pass = u->has_pass ? u->pass : NULL;
    b->db = u->path;
    pthread_mutex_init(&b->mu, NULL);
    atomic_init(&b->fences_ready, 0);
    c->impl = b;
    return 0;
}

static void mysql_lock_close(struct lock_client *c)
{
    struct my_backend *b = c->impl;

    if (!b)
        return;
    while (b->idle) {
        struct my_conn *k = b->idle;
        b->idle = k->next;
        conn_close(b, k);
    }
    pthread_mutex_destroy(&b->mu);
    free(b);
    c->impl = NULL;
}

/* Ready when a session (pooled, or new) answers a ping. */
static int mysql_lock_ping(struct lock_client *c)
{
    struct my_backend *b = c->impl;
    struct call call = {.op = CALL_PING};
    struct my_conn *k = pool_take(b);
    int err = 0, timed_out;

    if (!k && !(k = conn_open(b, &err)))
        return err;
    timed_out = call_run(k->my, &call, deadline_after(b, 0)) != 0;
    if (timed_out || call.ret) {
        err = conn_error(b, k, NULL, timed_out, "ping");
        conn_close(b, k);
        return err;
    }
    pool_put(b, k);
    return 0;
}

const struct lock_backend lock__mysql_backend = {
    .name = "mysql",
    .kinds = LOCK_KIND_BIT(LOCK_KIND_MUTEX),
    .open = mysql_lock_open,
    .close = mysql_lock_close,
    .acquire = mysql_lock_acquire,
    .release = mysql_lock_release,
    .renew = mysql_lock_renew,
    .ping = mysql_lock_ping,
};
