/*
 * internal.h - what the handler files share: the request, the error
 * table, reply helpers, input helpers that parse or queue the error reply,
 * and the route table. Not part of the module's API (see handlers.h).
 */
#ifndef SECKILL_HANDLERS_INTERNAL_H
#define SECKILL_HANDLERS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "common/token.h"
#include "engine/engine.h"
#include "handlers/handlers.h"
#include "lock/lock.h"
#include "store/store.h"

/* Bodies above this are refused with 413 without reading them. */
#define BODY_MAX (64 * 1024)

/* The one error table: every client-visible error is one of these. */
enum api_error {
    ERR_BAD_REQUEST,
    ERR_UNAUTHORIZED,
    ERR_FORBIDDEN,
    ERR_NOT_FOUND,
    ERR_METHOD_NOT_ALLOWED,
    ERR_NOT_SECKILL,
    ERR_NOT_STARTED,
    ERR_ENDED,
    ERR_SOLD_OUT,
    ERR_ALREADY_PURCHASED,
    ERR_ORDER_PAID,
    ERR_ORDER_CLOSED,
    ERR_PAYLOAD_TOO_LARGE,
    ERR_BUSY,
    ERR_RATE_LIMITED,
    ERR_INTERNAL,
    ERR_UNAVAILABLE,
    ERR_NOT_IMPLEMENTED,
    ERR_COUNT
};

struct api_error_info {
    unsigned status;
    const char *code;
    const char *message; /* default message */
};

extern const struct api_error_info api_errors[ERR_COUNT];

enum http_method { HTTP_GET, HTTP_POST, HTTP_OPTIONS, HTTP_OTHER };

/* Room for the extra headers of one reply (req_header_add). */
#define REQ_HEADERS_MAX 10

/* An extra reply header; both strings must outlive the reply. */
struct req_header {
    const char *name;
    const char *value;
};

struct handlers_server;

struct request {
    const struct handlers_config *cfg;
    struct handlers_server *srv; /* the server it arrived at */
    struct store *st;            /* this thread's store */
    struct lock_client *locks;   /* the server's, shared by all threads */
    struct vcache *vcache;       /* the server's voucher cache, or NULL */
    struct engine *engine;       /* the server's purchase engine */
    struct async *async;         /* the server's async writer, or NULL */
    void *conn;                  /* struct MHD_Connection *, NULL in tests */
    enum http_method method;
    const char *path;
    const char *version; /* "HTTP/1.1"; libmicrohttpd's, like path */
    int64_t id;          /* the {id} of the route, if any */
    char *body;          /* accumulated upload, NUL-terminated */
    size_t body_len;
    bool too_large;
    json_t *json;             /* parsed body object, owned */
    struct token_claims auth; /* valid after req_auth() returned 0 */
    bool auth_done;           /* req_auth() ran; its result is auth_err */
    int auth_err;
    /* the reply: */
    unsigned status;
    json_t *reply;        /* owned; dumped when sent */
    const char *allow;    /* Allow header for 405 */
    unsigned retry_after; /* Retry-After header when > 0 */
    char *text;           /* owned; sent instead of reply when set */
    size_t text_len;
    const char *text_type; /* Content-Type of text or data */
    /* A reply sent as is instead of JSON: an embedded file, or nothing
     * (204, 304). data is not owned and outlives the server. */
    bool raw;
    const void *data;
    size_t data_len;
    /* Extra reply headers (files, CORS), added to any kind of reply. */
    struct req_header headers[REQ_HEADERS_MAX];
    unsigned n_headers;
    /* for the metrics (http.c): */
    uint64_t start_ns; /* monotonic, at the first callback */
    unsigned route_id; /* route_index(), or route_count() for no route */
    bool observed;     /* counted (when its reply was queued) */
    /* A request parked while the purchase engine works (req_park()): */
    bool parked;
    /* While its handler runs on the I/O pool (req_offload()): set by a
     * req_park() there, which means the handler handed the request on (to
     * the purchase engine, to a task) and will not get it back. */
    bool *handed_on;
    struct engine_purchase purchase;
    uint64_t vcache_gen; /* of the voucher cache entry read at step 1 */
    /* An order's cancel or payment, run as an engine task (orders.c): */
    struct engine_task task;
    struct order_op *op;
};

/* An endpoint's handler: sets req's reply and returns its status (0 when
 * the request was parked: the reply comes later). */
typedef unsigned (*handler_fn)(struct request *req);

/* True once handlers_server_drain() was called (false for NULL). */
bool server_draining(const struct handlers_server *srv);

/*
 * Park the request: the handler returns without a reply, its HTTP thread
 * goes on serving other connections, and whoever finishes the work sets
 * the reply and calls req_resume(). Only from a handler (the thread that
 * runs the request).
 */
void req_park(struct request *req);
/* The reply of a parked request is set: send it. From any thread, once;
 * req must not be touched afterwards by the caller. */
void req_resume(struct request *req);

/*
 * Run fn(req) on a thread of the server's I/O pool, with that thread's
 * store, and park the request meanwhile: for whatever waits for MySQL or
 * Redis, which an HTTP thread (serving thousands of connections) must
 * never do. fn's reply is sent when it returns, unless fn parked the
 * request again to hand it on (whoever it went to answers it). From a
 * handler on the HTTP thread; on the pool already, runs fn at once.
 * Returns 0 (the status is not known yet).
 */
unsigned req_offload(struct request *req, handler_fn fn);

/* Release what a request owns (not the request itself). */
void request_clear(struct request *req);

/* Set a JSON reply (stealing body) and return its status. */
unsigned req_reply(struct request *req, unsigned status, json_t *body);

/*
 * Set the error reply for e with message (NULL: the table's default) and
 * return its status. 503 replies carry Retry-After.
 */
unsigned req_error(struct request *req, enum api_error e, const char *message);

/*
 * Map a store/lock/idgen -errno to the error reply: -ENOTCONN,
 * -ECONNRESET, -EINPROGRESS, -EDEADLK become 503, anything else 500.
 * op names the failed step for the log. Returns the status.
 */
unsigned req_backend_error(struct request *req, int err, const char *op);

/*
 * Add a header to the reply. name and value are not copied: string
 * literals, configuration, or libmicrohttpd's request strings. At most
 * REQ_HEADERS_MAX per request (more is a programmer error: abort).
 */
void req_header_add(struct request *req, const char *name, const char *value);

/* Set a raw reply of status: len bytes of data (not owned) of type. */
unsigned req_reply_raw(struct request *req, unsigned status, const char *type,
                       const void *data, size_t len);

/*
 * Check what libmicrohttpd accepted of the request's framing but a server
 * must refuse (protocol.c): HTTP/1.1 without exactly one Host, a header
 * name that is not a token, control characters in a header value, a
 * Content-Length beside Transfer-Encoding or twice, a transfer coding
 * other than chunked. Called when the headers are in, before the body.
 * Returns 0, or sets the 400 (501 for the coding) and returns its status.
 */
unsigned req_protocol_or_reply(struct request *req);

/* A query-string argument, or NULL. */
const char *req_query(struct request *req, const char *name);

/*
 * Verify the bearer token into req->auth, once per request (later calls
 * return the first result). Returns 0, -ENOENT without an Authorization
 * header, -EPROTONOSUPPORT for a scheme other than Bearer, or the error
 * of token_verify(). Sets no reply.
 */
int req_auth(struct request *req);

/*
 * Authenticate the bearer token into req->auth. Returns 0, or sets the
 * 401 reply and returns 401. The admin variant also sets 403 for users.
 */
unsigned req_user_or_reply(struct request *req);
unsigned req_admin_or_reply(struct request *req);

/*
 * Body field helpers: each reads one field of req->json, checks its type
 * and range, and either stores it and returns true, or sets a 400 reply
 * naming the field and returns false. A field that is absent or null is
 * left untouched and accepted unless required.
 */
bool body_object_or_reply(struct request *req);
bool body_int_or_reply(struct request *req, const char *name, bool required,
                       int64_t min, int64_t max, int64_t *out);
/* Strings: UTF-8 of 1..max_chars code points (0..max when !required). */
bool body_str_or_reply(struct request *req, const char *name, bool required,
                       size_t max_chars, const char **out);
bool body_time_or_reply(struct request *req, const char *name, bool required,
                        int64_t *out);
/* true when the field is present and not null. */
bool body_has(struct request *req, const char *name);

/*
 * Parse a query argument as an integer in [min, max]; absent means def.
 * Returns true, or sets a 400 reply and returns false.
 */
bool query_int_or_reply(struct request *req, const char *name, int64_t def,
                        int64_t min, int64_t max, int64_t *out);

/* JSON value of an id: a decimal string. */
json_t *json_id(int64_t id);
/* JSON value of a time: an RFC 3339 UTC string. */
json_t *json_time(int64_t epoch_s);

/* ---- abuse limits (ratelimit.c, deadline.c) ---- */

/*
 * Spend one token from each bucket this request counts against: its
 * client address when cfg->rate_ip is on, its user when cfg->rate_user is
 * on and it carries a valid user token (admins are exempt). One EVALSHA
 * on this thread's Redis connection (req->st must be set); the script
 * takes from all buckets or from none. Returns 0 to go on, or sets 429
 * RATE_LIMITED with Retry-After (seconds until a token is due) and
 * returns 429. Fails open: when Redis is unreachable or answers an error
 * the request goes on, with a log line at most once a second per thread.
 */
unsigned ratelimit_or_reply(struct request *req);

/* Whether ratelimit_or_reply() has a bucket to charge for req (and so a
 * Redis round trip to make). */
bool ratelimit_applies(struct request *req);

/*
 * Request deadlines against slow clients. libmicrohttpd's connection
 * timeout is an idle timeout: a client that sends a byte before each
 * timeout keeps its connection forever (slowloris). A connection waiting
 * for a request (from its start, or from the end of its previous request)
 * must deliver the whole request, headers and body, within timeout_s;
 * otherwise a reaper thread shuts its socket down, and libmicrohttpd then
 * closes it. Thread-safe.
 */
struct deadlines;
struct deadline_conn;

/* Start the reaper. Never returns NULL (aborts if no thread starts). */
struct deadlines *deadlines_start(unsigned timeout_s);
/* Stop the reaper and free d; every connection must be removed. NULL ok. */
void deadlines_stop(struct deadlines *d);
/* Track connection socket fd, waiting for its first request. */
struct deadline_conn *deadline_conn_add(struct deadlines *d, int fd);
/* Stop tracking c (before its socket is closed) and free it. NULL ok. */
void deadline_conn_remove(struct deadlines *d, struct deadline_conn *c);
/* The request of c has arrived: no deadline until it completes. */
void deadline_conn_busy(struct deadline_conn *c);
/* The request of c completed: the next one is due within the timeout. */
void deadline_conn_idle(struct deadlines *d, struct deadline_conn *c);

/* ---- the voucher cache of the purchase (vcache.c) ---- */

/*
 * A per-instance cache of what step 1 of a purchase needs about a voucher,
 * with a sold-out flag, so that refusals (sold out, not started, ended,
 * not a seckill voucher, no such voucher) need no MySQL or Redis round
 * trip. Flags and 404s are trusted for SECKILL_SOLDOUT_TTL_MS and dropped
 * on every instance at once when stock changes (vcache_voucher_changed()
 * publishes on Redis; each instance runs one subscriber thread). vcache.c
 * says exactly how stale an answer can be and why that never oversells.
 * Every function is thread-safe and accepts a NULL cache (no caching, no
 * publishing: the fuzz builds).
 */
struct vcache;

/* What the cache knows about one voucher. */
struct vcache_voucher {
    bool found; /* false: there is no voucher with this id */
    enum voucher_type type;
    int64_t begin_time; /* epoch seconds, seckill vouchers only */
    int64_t end_time;   /* epoch seconds, exclusive */
    bool sold_out;      /* seckill vouchers only */
    enum purchase_mode mode;
};

/*
 * The server's cache: cfg->soldout_ttl_ms (0: nothing is cached, but
 * changes are still published for other instances), the Redis server of
 * cfg->store for the subscriber thread (it connects in the background and
 * retries with back-off) and the MySQL of cfg->store for the refresher
 * thread, both started here. cfg must outlive the cache. Never returns
 * NULL.
 */
struct vcache *vcache_new(const struct handlers_config *cfg);
/* Stop the subscriber and free vc. NULL ok. */
void vcache_free(struct vcache *vc);

/*
 * Look voucher id up without I/O or locks. True and *v when the cache has
 * a usable entry (an entry due for a refresh is still usable while the
 * cache's refresher thread re-reads it); false when the caller must read
 * the row and store it with vcache_entry_put(). *gen is always set: pass
 * it to the put or vcache_sold_out_set() of this request, so that what it
 * learned is dropped if the voucher changed meanwhile.
 */
bool vcache_entry_get(struct vcache *vc, int64_t id, struct vcache_voucher *v,
                      uint64_t *gen);
/* Store what a read of the row found (v->found false: no such row). */
void vcache_entry_put(struct vcache *vc, int64_t id,
                      const struct vcache_voucher *v, uint64_t gen);
/* A purchase found no stock left: flag voucher id as sold out. */
void vcache_sold_out_set(struct vcache *vc, int64_t id, uint64_t gen);
/* What a voucher row (s; NULL: no such row) says, in the cache's terms. */
void vcache_voucher_from_row(struct vcache_voucher *v,
                             const struct store_seckill *s);

/*
 * Voucher id was created or its stock or row changed (after the commit):
 * drop it here and publish it to every instance, on st's Redis
 * connection. A failed publish is logged; the other instances then
 * catch up within the TTL.
 */
void vcache_voucher_changed(struct vcache *vc, struct store *st, int64_t id);

/* ---- browsers: CORS (cors.c) ---- */

struct route;

/*
 * Add the CORS headers of an answer to req when cfg->cors_origins is set:
 * Vary: Origin always, and Access-Control-Allow-Origin (the request's
 * Origin, never "*") with Access-Control-Expose-Headers when the Origin
 * is one of the listed ones. Called once per reply, by http.c.
 */
void cors_reply_headers(struct request *req);

/*
 * Answer OPTIONS on route: a CORS preflight (Origin and
 * Access-Control-Request-Method present) from a listed origin gets 204
 * with the route's methods, the Authorization and Content-Type request
 * headers and Access-Control-Max-Age; from any other origin 403
 * FORBIDDEN. A plain OPTIONS gets 204 with Allow. Returns the status.
 */
unsigned cors_options(struct request *req, const struct route *route);

/* ---- the pages (web.c) ---- */

/*
 * A file of web/ (or docs/openapi.json) compiled into the binary by
 * scripts/embed-web.sh, which writes the table web_files[] of
 * build/gen/web_files.c, sorted by path.
 */
struct web_file {
    const char *path; /* the URL path: "/", "/admin", "/static/app.js" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
    const char *etag; /* a strong entity tag from the content's SHA-256 */
};

extern const struct web_file web_files[];
extern const size_t web_file_count;

/* ---- routing ---- */

struct route {
    const char *pattern; /* "/api/vouchers/{id}/seckill", "/static/{file}" */
    handler_fn get;
    handler_fn post;
    const char *allow; /* the Allow header: "GET, POST, OPTIONS" */
    /* Run on the HTTP thread: its handlers answer from memory (or, like
     * the purchase, decide what they can from memory and hand the rest to
     * the I/O pool themselves). Every other route runs, rate limiter
     * included, on the I/O pool (req_offload()). */
    bool http_thread;
};

enum route_result { ROUTE_OK, ROUTE_NOT_FOUND, ROUTE_BAD_ID };

/*
 * Find the route for path. ROUTE_OK sets *route and *id (0 without an
 * {id}); ROUTE_BAD_ID sets *route for a path whose {id} segment is not a
 * positive integer. A "{file}" segment matches any non-empty segment (the
 * handler reads the path itself).
 */
enum route_result route_match(const char *path, const struct route **route,
                              int64_t *id);
/* Routes in the table; route_index() of each is below this. */
unsigned route_count(void);
/* The position of r in the table, a small integer for the metrics. */
unsigned route_index(const struct route *r);
/* The pattern of the route at index i < route_count(). */
const char *route_pattern(unsigned i);

/* Endpoint handlers, one file per group. */
unsigned health_get(struct request *req);
unsigned ready_get(struct request *req);
unsigned metrics_get(struct request *req);
unsigned auth_code_post(struct request *req);
unsigned auth_login_post(struct request *req);
unsigned vouchers_post(struct request *req);
unsigned vouchers_get(struct request *req);
unsigned voucher_get(struct request *req);
unsigned voucher_seckill_post(struct request *req);
unsigned orders_get(struct request *req);
unsigned order_get(struct request *req);
/* The pages, their files and /openapi.json, embedded at build time. */
unsigned web_get(struct request *req);
unsigned order_cancel_post(struct request *req);
unsigned order_pay_post(struct request *req);
unsigned payment_notify_post(struct request *req);
unsigned voucher_stats_get(struct request *req);

/*
 * An order as the API shows it: id, userId, voucherId, status ("unpaid",
 * "paid", "cancelled", "expired"), createTime, payDeadline, payTime and
 * closeTime (null until set). A new object.
 */
json_t *order_json(const struct store_order *o);

/*
 * Orders orders[0..n) of users[0..n) for voucher_id were closed
 * (cancelled, expired) and their units are back in MySQL's stock: give
 * them back to an async sale's Redis state too (the buyer may buy again;
 * once per order, however often this is called), and tell every
 * instance's voucher cache that the voucher sells again. On an engine
 * thread, with its store.
 */
void order_units_returned(struct vcache *vc, struct store *st,
                          int64_t voucher_id, const int64_t *orders,
                          const int64_t *users, size_t n);

/*
 * Record a payment for an order on an engine thread and reply with the
 * outcome (orders.c): for POST /api/payments/notify and the dev-mode
 * POST /api/orders/{id}/pay. user_id > 0: only that user's order (else
 * 404); amount < 0: the voucher's price (the simulated provider). Parks
 * req; returns 0.
 */
unsigned order_pay_park(struct request *req, int64_t order_id, int64_t user_id,
                        int64_t amount, const char *txn_id);

#endif
