/*
 * harness.h - shared helpers of the integration tests: start and stop the
 * real seckilld binary, talk to it over HTTP with libcurl, mint tokens,
 * query MySQL directly, spawn helper processes (redis-server).
 *
 * The tests read their backends from the environment written by
 * scripts/services.sh (. .run/env.test): SECKILL_MYSQL_URL,
 * SECKILL_REDIS_URL, SECKILL_SECRET, SECKILL_DEV. SECKILL_BIN names the
 * binary under test (default build/seckilld); child logs go to
 * $SECKILL_IT_LOGDIR (default: an it-logs/ folder next to the binary).
 *
 * Functions documented "asserts" report failures through cmocka and must
 * only be called from a cmocka test, setup or teardown. None of this is
 * thread-safe: the tests are single-threaded.
 */
#ifndef SECKILL_IT_HARNESS_H
#define SECKILL_IT_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <jansson.h>

#include "common/token.h"
#include "common/util.h"
#include "store/store.h"

#define IT_PATH_MAX 512
/* Per-request timeout: generous, the suite also runs under ASan. */
#define IT_HTTP_TIMEOUT_S 30L
/* How long a started server may take to answer GET /healthz. */
#define IT_START_TIMEOUT_MS 10000
/* How long a SIGTERMed server may take to exit. */
#define IT_STOP_TIMEOUT_MS 10000

/*
 * Once per process, before anything else: raise RLIMIT_NOFILE to the hard
 * limit, ignore SIGPIPE, initialise libcurl. Idempotent.
 */
void it_init(void);

/* The binary under test ($SECKILL_BIN or "build/seckilld"). */
const char *it_bin(void);
/* The log folder (created on first use). */
const char *it_log_dir(void);

/* A loopback TCP port that was free a moment ago (bind port 0, close). */
uint16_t it_free_port(void);

/* ---- processes ---- */

/*
 * Fork and exec argv[0] (a path) with envp (NULL: the current environment),
 * stdout and stderr appended to log_path (NULL: /dev/null). The child dies
 * with the test process (PR_SET_PDEATHSIG) and starts with SIGPIPE at its
 * default. Returns the pid, or -1 with a message on stderr.
 */
pid_t it_spawn(char *const argv[], char *const envp[], const char *log_path);

/*
 * it_spawn() into new UTS and PID namespaces, as a container starts its
 * process: the child's host name is hostname and its pid is 1 there (the
 * pid returned is its pid here, to signal and wait for as any child;
 * SIGKILL ends it and everything it started). Needs CAP_SYS_ADMIN (root).
 * Returns the pid, or -1 with a message on stderr.
 */
pid_t it_spawn_ns(char *const argv[], char *const envp[], const char *log_path,
                  const char *hostname);

/* Whether it_spawn_ns() works here (asked once: a child that exits). */
bool it_ns_available(void);

/*
 * Wait up to timeout_ms for pid to exit. Returns 0 and stores its wait
 * status, or -ETIMEDOUT (the child is left running), or -ECHILD.
 */
int it_wait_exit(pid_t pid, int timeout_ms, int *status);

/*
 * Run argv to completion (at most 30 s) and capture its stdout into *out
 * (NUL-terminated, free(3) it); stderr is passed through. Returns the wait
 * status, or -1 if it could not be run or timed out.
 */
int it_run_capture(char *const argv[], char **out);

/*
 * The current environment with overrides applied (see it_server_start():
 * "NAME=value" sets, "NAME" unsets), for it_spawn(). Release it with
 * it_env_free().
 */
char **it_env_build(const char *const *overrides);
void it_env_free(char **env);

/* The absolute path of prog in $PATH, else in /usr/sbin (a static
 * buffer), or NULL. */
const char *it_which(const char *prog);

/*
 * Start a private redis-server on 127.0.0.1:port: no persistence, DEBUG
 * allowed from loopback, `requirepass pass` unless pass is NULL, output
 * appended to log_path. Waits until it answers PING. Returns the pid, or
 * -1 after printing why (the child is then killed). Does not use cmocka.
 */
pid_t it_redis_start(uint16_t port, const char *log_path, const char *pass);

/*
 * it_redis_start() with more arguments for redis-server (a NULL-terminated
 * array, may be NULL), such as {"--replicaof", "127.0.0.1 6379", NULL}.
 */
pid_t it_redis_start_with(uint16_t port, const char *log_path, const char *pass,
                          const char *const *extra);

/* it_redis_start_with() in the current environment with overrides (as
 * it_env_build() takes them; NULL: none), e.g. an LD_PRELOAD. */
pid_t it_redis_start_env(uint16_t port, const char *log_path, const char *pass,
                         const char *const *extra,
                         const char *const *overrides);

/*
 * Start redis-server in sentinel mode on 127.0.0.1:port, monitoring the
 * master called name at 127.0.0.1:master_port with a quorum of 2, down
 * after down_ms without an answer, a failover timeout of 10 s. Its
 * configuration file (which Sentinel rewrites) goes next to log_path.
 * Waits until it answers PING. Returns the pid, or -1 after printing why.
 * Does not use cmocka.
 */
pid_t it_sentinel_start(uint16_t port, const char *name, uint16_t master_port,
                        unsigned down_ms, const char *log_path);

/* Wait up to timeout_ms until something accepts TCP on 127.0.0.1:port. */
int it_wait_tcp(uint16_t port, int timeout_ms);

/*
 * The local ports of pid's established IPv4 TCP connections to remote_port
 * (read from /proc/<pid>/fd and /proc/<pid>/net/tcp). Stores up to max of
 * them in out; returns how many there are.
 */
size_t it_proc_tcp_ports(pid_t pid, uint16_t remote_port, uint16_t *out,
                         size_t max);

/* ---- seckilld ---- */

struct it_server {
    pid_t pid; /* 0 when not running */
    uint16_t port;
    char log_path[IT_PATH_MAX];
};

/*
 * Start the binary on a free loopback port (`--port N`) with the current
 * environment plus overrides: a NULL-terminated array (may be NULL) of
 * "NAME=value" to set or "NAME" to unset. tag names the log file. Waits
 * until GET /healthz answers 200. Returns 0, or -1 after printing why and
 * where the child's log is (the child is then killed).
 */
int it_server_start(struct it_server *srv, const char *tag,
                    const char *const *overrides);

/* it_server_start() on a given port (0: a free one), e.g. to restart an
 * instance where a load balancer expects it. */
int it_server_start_port(struct it_server *srv, uint16_t port, const char *tag,
                         const char *const *overrides);

/*
 * it_server_start() in namespaces of its own (it_spawn_ns()), with
 * hostname as its host name and pid 1 there: two such instances with the
 * same hostname look to each other as two containers of one deployment
 * do. srv->pid is its pid here: it_server_stop() and the rest work as
 * for any instance.
 */
int it_server_start_ns(struct it_server *srv, const char *tag,
                       const char *const *overrides, const char *hostname);
/* it_server_start_ns() on a given port (0: a free one). */
int it_server_start_port_ns(struct it_server *srv, uint16_t port,
                            const char *tag, const char *const *overrides,
                            const char *hostname);

/* True while the child has not exited (reaps it if it has). */
bool it_server_alive(struct it_server *srv);

/*
 * SIGTERM the child and wait up to IT_STOP_TIMEOUT_MS. Returns 0 if it
 * exited with status 0, else -1 after printing how it ended (a child still
 * running after the timeout is SIGKILLed). Accepts a stopped server
 * (returns 0).
 */
int it_server_stop(struct it_server *srv);

/*
 * The group teardown of a binary's n servers: stop every one of srvs (also
 * after one failed) and close the SQL helper. Returns 0, or -1 if a server
 * did not exit cleanly. cmocka (1.1) does not count a failed group
 * teardown in its exit status, so the failure is also remembered for
 * it_exit_status().
 */
int it_group_teardown(struct it_server *srvs, size_t n);

/*
 * What main() returns: failed (cmocka's count of failed tests) when
 * non-zero, else 1 if an it_group_teardown() failed, else 0.
 */
int it_exit_status(int failed);

/* ---- HTTP ---- */

struct it_req {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* "/api/vouchers/1" */
    const char *body;   /* NULL: no body */
    size_t body_len;    /* 0: strlen(body) */
    const char *token;  /* NULL: no Authorization header */
    /* Raw Authorization value ("Basic x"); overrides token. */
    const char *authorization;
    long timeout_s;     /* 0: IT_HTTP_TIMEOUT_S */
    const char *header; /* one more header, "Name: value", or NULL */
    /* Yet more, "Name: value" each, NULL-terminated; or NULL. */
    const char *const *headers;
};

struct it_resp {
    CURLcode curl_rc; /* CURLE_OK unless the transport failed */
    long status;      /* 0 on a transport failure */
    char *body;       /* NUL-terminated, owned */
    size_t len;
    json_t *json; /* the parsed body, or NULL if it is not JSON; owned */
    /* Selected response headers, "" when absent. */
    char allow[256];
    char retry_after[64];
    char content_type[256];
    /* Every header line of the (final) answer, "Name: value\r\n" each;
     * owned. Read one with it_resp_header(). */
    char *headers;
    size_t headers_len;
    double elapsed_ms; /* from the start of the request to its end */
    char curl_error[CURL_ERROR_SIZE]; /* why the transport failed, or "" */
    /* private */
    struct curl_slist *hdrs_;
    char errbuf_[CURL_ERROR_SIZE];
};

/*
 * Build an easy handle for req against srv whose output goes to resp
 * (zeroed here), for use with a multi handle: a fresh connection, not
 * reused. Finish with it_http_complete().
 */
CURL *it_http_prepare(const struct it_server *srv, const struct it_req *req,
                      struct it_resp *resp);
/* Record rc and the status, parse the body, free the easy handle h. */
void it_http_complete(CURL *h, CURLcode rc, struct it_resp *resp);

/*
 * Send reqs[i] to to[i] for every i < n all at once on one multi handle
 * (every request in flight together) and wait for them all; resps[i] gets
 * each answer. Fails the test (cmocka) if curl itself fails. When a
 * request got no answer (a transport error, a timeout) it prints each
 * such request with curl's error and time, and the slowest request's
 * time, before the caller's assertions look at the statuses.
 */
void it_http_run_all(struct it_req *reqs, const struct it_server **to,
                     struct it_resp *resps, size_t n);

/* The report of it_http_run_all(): nothing when every request got an
 * answer. For crowds sent some other way. */
void it_http_report(const struct it_req *reqs, const struct it_server **to,
                    const struct it_resp *resps, size_t n);

/* Perform req synchronously. Returns the HTTP status (0 on failure). */
long it_http_do(const struct it_server *srv, const struct it_req *req,
                struct it_resp *resp);
/* Shorthand for it_http_do() with a method, path, body and token. */
long it_http(const struct it_server *srv, const char *method, const char *path,
             const char *body, const char *token, struct it_resp *resp);
/* Release what resp owns; zeroes it. */
void it_resp_free(struct it_resp *resp);

/*
 * How many headers called name (any case) the answer has; the value of
 * the first (trimmed, cut to cap - 1 bytes) goes to buf, "" when there is
 * none.
 */
size_t it_resp_header(const struct it_resp *resp, const char *name, char *buf,
                      size_t cap);

/*
 * The assertions below are macros so that a failure names the caller's
 * file and line; the _at functions take them explicitly.
 */

/* Asserts: the transport worked and the status is status (dumps the body). */
#define it_assert_status(resp, status)                                         \
    it_assert_status_at((resp), (status), __FILE__, __LINE__)
void it_assert_status_at(const struct it_resp *resp, long status,
                         const char *file, int line);
/*
 * Asserts the exact error shape: the status, Content-Type application/json,
 * a body that is exactly {"error":{"code":code,"message":<non-empty
 * string>}}.
 */
#define it_assert_error(resp, status, code)                                    \
    it_assert_error_at((resp), (status), (code), __FILE__, __LINE__)
void it_assert_error_at(const struct it_resp *resp, long status,
                        const char *code, const char *file, int line);
/* Asserts Content-Type is application/json (parameters allowed). */
#define it_assert_json_type(resp)                                              \
    it_assert_json_type_at((resp), __FILE__, __LINE__)
void it_assert_json_type_at(const struct it_resp *resp, const char *file,
                            int line);

/* obj[key] when it is a string, else NULL. */
const char *it_json_str(const json_t *obj, const char *key);
/* True for a non-empty string of decimal digits. */
bool it_is_digits(const char *s);
/* Parse a JSON id string (digits) into an int64; asserts it is one. */
#define it_json_id(obj, key) it_json_id_at((obj), (key), __FILE__, __LINE__)
int64_t it_json_id_at(const json_t *obj, const char *key, const char *file,
                      int line);
/*
 * The probe's forged X-Forwarded-For header: "X-Forwarded-For: " and a
 * value of 2,040 bytes, made-up addresses (10.x.y.z) ending in last;
 * free(3) it. Behind it a proxy appends a line of its own.
 */
char *it_forged_xff(const char *last);
/* True if a comma-separated header value lists token (trimmed, exact). */
bool it_header_lists(const char *value, const char *token);

/* ---- raw sockets: what curl will not send ---- */

/* A TCP connection to 127.0.0.1:port; asserts it connects. */
int it_raw_connect(uint16_t port);
/* Send all n bytes of s; false if the peer has closed. */
bool it_raw_send(int fd, const char *s, size_t n);
bool it_raw_send_str(int fd, const char *s);
/*
 * Read from fd until the peer closes (EOF or reset) or timeout_ms passes.
 * Returns true if it closed. The data read so far goes to *out when out is
 * not NULL (NUL-terminated; free(3) it).
 */
bool it_raw_read_to_close(int fd, int timeout_ms, char **out);

/* An answer read off a raw socket. */
struct it_raw_resp {
    long status; /* 0: no HTTP answer */
    char *text;  /* the whole answer, headers and body */
    const char *body;
    json_t *json;
    bool closed;
};

/*
 * Send len bytes of request on a new connection and read the answer
 * until the server closes it or timeout_ms passes (so send a complete
 * request with "Connection: close", or one the server refuses).
 */
void it_raw_request(uint16_t port, const char *request, size_t len,
                    int timeout_ms, struct it_raw_resp *resp);
void it_raw_resp_free(struct it_raw_resp *resp);
/* Asserts a raw answer is the JSON error status/code. */
void it_raw_assert_error(const struct it_raw_resp *resp, long status,
                         const char *code);

/* ---- tokens ---- */

/* The 32-byte key decoded from SECKILL_SECRET (asserts it is valid). */
const unsigned char *it_secret(void);
/* Sign a token for user_id/role expiring ttl_s from now (may be < 0). */
void it_token(int64_t user_id, enum token_role role, int64_t ttl_s,
              char out[TOKEN_STR_LEN]);

/* ---- the backends ---- */

/*
 * SECKILL_MYSQL_URL and SECKILL_REDIS_URL parsed by the service's own
 * parser (config_mysql_url() and config_redis_url() of cmd/config.h), with
 * a 5 s connect and a 30 s I/O timeout. Parsed on the first call (asserts
 * both are set and valid); later calls, also in forked children, only
 * return it. Borrowed: valid until the process exits.
 */
const struct store_config *it_store_config(void);

/* ---- MySQL (the database of SECKILL_MYSQL_URL) ---- */

/*
 * Rewrite url so that it points at 127.0.0.1:port, keeping the user,
 * password and database. Returns a new string to free(3), or NULL if url
 * is not a mysql:// URL.
 */
char *it_mysql_url_with_port(const char *url, uint16_t port);

/*
 * Run a query returning one integer (the first column of the first row;
 * NULL reads as -1); asserts it ran and returned a row. The connection is
 * opened on first use and kept.
 */
int64_t it_sql_scalar(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* Run a query and store up to max integers of its first column; returns
 * the number of rows (may exceed max). Asserts it ran. */
size_t it_sql_column(int64_t *out, size_t max, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Run a statement without a result; returns 0 or the MySQL errno. */
unsigned it_sql_exec(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* Close the helper's connection (the next query reopens it). */
void it_sql_close(void);
/* How many orders voucher_id has in MySQL (asserts the query ran). */
int64_t it_sql_order_count(int64_t voucher_id);
/* The stock of seckill voucher voucher_id in MySQL (asserts it has one). */
int64_t it_sql_stock(int64_t voucher_id);

/* ---- Redis (the server of SECKILL_REDIS_URL) ---- */

/*
 * Connect to the Redis of sc with its timeouts, AUTH and SELECT done.
 * Does not use cmocka, so forked children may call it: returns NULL after
 * printing why on stderr. The caller frees the context with redisFree().
 */
redisContext *it_redis_open(const struct store_config *sc);

/* it_redis_open(it_store_config()) that asserts it worked. */
redisContext *it_redis_connect(void);
/* One command (hiredis' format) on a connection of its own: its integer
 * answer, or def when the answer is not one. */
long long it_redis_int(long long def, const char *fmt, ...);

/* ---- the API ---- */

/* now + offset_s formatted as RFC 3339 UTC into buf (UTIL_TIME_LEN). */
char *it_time(int64_t offset_s, char *buf);

/* A process-unique number for ids, phones and shop ids of one test run. */
int64_t it_unique(void);

/*
 * POST /api/vouchers with an admin token and body (a JSON object text);
 * asserts 201 and returns the new id.
 */
int64_t it_voucher_create(const struct it_server *srv, const char *body);

/*
 * Create a seckill voucher of shop shop_id with stock, selling from
 * now + begin_off_s until now + end_off_s. An end not after now (a sale
 * already over, which creation refuses) is made as one that ends in an
 * hour and is stopped at once: it ends now. Asserts; returns its id.
 */
int64_t it_seckill_create(const struct it_server *srv, int64_t shop_id,
                          int64_t stock, int64_t begin_off_s,
                          int64_t end_off_s);

/*
 * POST /api/vouchers/{voucher_id}/seckill as user_id (a freshly minted
 * token). Returns the status; resp holds the answer.
 */
long it_purchase(const struct it_server *srv, int64_t voucher_id,
                 int64_t user_id, struct it_resp *resp);

/* it_purchase() that must create an order (asserts 201): its id. */
int64_t it_buy(const struct it_server *srv, int64_t voucher_id,
               int64_t user_id);

/* ---- faults ---- */

/*
 * The pid written in a pid file (a decimal number, as redis-server and
 * scripts/services.sh write them), or -1 if the file cannot be read or
 * holds no positive number. Does not use cmocka.
 */
pid_t it_pidfile_read(const char *path);

/*
 * How many lines of the log at path hold msg and the field
 * "voucher=<voucher_id>" (the whole id, not a longer one that starts
 * with it); 0 when it cannot be read. Does not use cmocka.
 */
int it_log_voucher_count(const char *path, const char *msg, int64_t voucher_id);

/* The whole file at path, NUL-terminated (free(3) it); NULL if it cannot
 * be opened, "" if it cannot be read whole. Does not use cmocka. */
char *it_file_read(const char *path);

/*
 * A loopback TCP socket that listens but never accepts: connecting to it
 * succeeds (the kernel completes the handshake) and nothing ever answers,
 * like a stopped server. Stores its port in *port; returns the socket, to
 * close(2) after the test, or -1 with a message on stderr.
 */
int it_blackhole_listen(uint16_t *port);

/*
 * A loopback TCP proxy (tests/tools/tcpproxy.c, built beside the binary
 * under test, or $SECKILL_TCPPROXY) in front of 127.0.0.1:target, whose
 * control port makes the link slow, stalled or cut.
 */
struct it_proxy {
    uint16_t port; /* connect here to reach the target */
    uint16_t ctl;  /* the control port */
    pid_t pid;
    char log[IT_PATH_MAX];
};

/* Start one; tag names its log. Returns 0, or -1 with a message on stderr.
 * Does not use cmocka. */
int it_proxy_start(struct it_proxy *p, const char *tag, uint16_t target);
/* Send one control command ("stall", "latency 300", "heal"); 0 when it
 * answered "ok", else -1 with the answer on stderr. */
int it_proxy_ctl(const struct it_proxy *p, const char *cmd);
/* The same, with its answer line in reply (cap bytes; "" when none). */
int it_proxy_ask(const struct it_proxy *p, const char *cmd, char *reply,
                 size_t cap);
/* Kill it (accepts a stopped one). */
void it_proxy_stop(struct it_proxy *p);

/*
 * What haproxy's stats page (srv: its address) says of server appN of
 * backend: its status ("UP", "DOWN", "MAINT", ...) into out, "" when the
 * page did not say; its retries and redispatches (either may be NULL).
 */
void it_lb_status(const struct it_server *stats, const char *backend, int n,
                  char *out, size_t cap, long *retries, long *redispatches);

/*
 * KILL CONNECTION every MySQL session that process pid has open to
 * 127.0.0.1:port (its established TCP connections, matched to
 * information_schema.PROCESSLIST by HOST), except the helper's own
 * connection. Asserts the queries ran; returns how many were killed.
 */
size_t it_sql_kill_sessions_of(pid_t pid, uint16_t port);

#endif
