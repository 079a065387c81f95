/*
 * request.h - one HTTP request as the handlers see it: what arrived, the
 * reply being built, parking it while the sale layer works, and the
 * helpers every handler uses: replies and the error table, the bearer
 * token, input helpers that either parse a value or set the 400 reply.
 */
#ifndef SECKILL_HANDLERS_REQUEST_H
#define SECKILL_HANDLERS_REQUEST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "common/token.h"
#include "handlers/errors.h"
#include "handlers/handlers.h"
#include "handlers/protocol.h"
#include "sale/sale.h"

/* Bodies above this are refused with 413 without reading them. */
#define BODY_MAX (64 * 1024)

enum http_method {
    HTTP_GET,
    HTTP_POST,
    HTTP_PATCH,
    HTTP_DELETE,
    HTTP_OPTIONS,
    HTTP_OTHER
};

/* Room for the extra headers of one reply (req_header_add). */
#define REQ_HEADERS_MAX 10

/* An extra reply header; both strings must outlive the reply. */
struct req_header {
    const char *name;
    const char *value;
};

/* What the requests of one server share; owned by whoever serves them
 * (http.c), it outlives them. */
struct req_server {
    const struct http_config *cfg;
    struct req_limits limits; /* of a request's head, from cfg->head_max */
    struct sale *sale;
    /* The names requests are counted under in the metrics: the route
     * table's patterns, and "unmatched" last (route_count() + 1 of them;
     * NULL: counted by number). */
    const char *const *route_names;
    unsigned routes;
    atomic_uint parked;   /* requests parked and not yet completed */
    atomic_bool draining; /* replies close their connections */
};

struct deadline_conn;
struct stream;

struct request {
    const struct http_config *cfg;
    struct req_server *srv;         /* the server it arrived at */
    struct sale *sale;              /* the server's sale layer */
    void *conn;                     /* struct MHD_Connection *, NULL in tests */
    struct deadline_conn *deadline; /* its connection's, or NULL */
    enum http_method method;
    const char *path;
    const char *version; /* "HTTP/1.1"; libmicrohttpd's, like path */
    const char *head;    /* the method: where the request's head begins */
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
    /* A body made page by page while it is sent (stream.h), instead of
     * any of the above; owned until the reply is sent. */
    struct stream *stream;
    /* Extra reply headers (files, CORS), added to any kind of reply. */
    struct req_header headers[REQ_HEADERS_MAX];
    unsigned n_headers;
    /* for the metrics: */
    uint64_t start_ns; /* monotonic, at the first callback */
    unsigned route_id; /* route_index(), or route_count() for no route */
    bool observed;     /* counted (when its reply was queued) */
    /* Parked (req_park()): its reply comes from another thread. */
    bool parked;
    /* The handler it runs on the task pool (dispatch.c). */
    unsigned (*pooled)(struct request *req);
    bool pooled_limited; /* the rate limit first */
    /* Its Idempotency-Key (idempotency.c), when it has one: given to the
     * change it makes (req_actor()), which records it or finds it. */
    bool has_idem;
    bool idem_bad; /* sent one that is not a key: 400 once an admin */
    struct store_idem idem;
    /* The call of the sale layer it was handed on with, answered by a
     * callback of the handler that made it. */
    union {
        struct sale_buy buy;
        struct sale_order_op op;
        struct sale_code code;
        struct sale_admin_call admin;
    } call;
};

/*
 * The request's Idempotency-Key header, if any, into req->idem with the
 * hash of its method, path and body (idempotency.c). A key that is not
 * 1..255 visible ASCII characters sets req->idem_bad instead, which
 * req_admin_or_reply() answers 400 once the caller proved to be an admin
 * (a client without a token still gets 401 first). For POST, PATCH and
 * DELETE; only an admin's change records it.
 */
void idem_parse(struct request *req);

/*
 * After the handler set its reply (idempotency.c): a change whose key was
 * there already is answered as its first request was (the same request,
 * its answer recorded), 409 IDEMPOTENCY_KEY_IN_USE (the first still
 * running, or its answer not recorded yet), 422 IDEMPOTENCY_KEY_REUSED
 * (another request), or from its target as it is now (the first answer
 * lost with its instance); a change that recorded its key keeps its 2xx
 * answer for the retries. Waits for MySQL: on the task pool.
 */
void idem_finish(struct request *req);

/* Monotonic nanoseconds, for request durations. */
uint64_t req_now_ns(void);

/*
 * Park the request: its handler returns without a reply (status 0), its
 * HTTP thread goes on serving other connections, and whoever finishes the
 * work sets the reply and calls req_resume(). From the thread that runs
 * the request; parking a parked request changes nothing.
 */
void req_park(struct request *req);
/* The reply of a parked request is set: send it. From any thread, once;
 * req must not be touched afterwards by the caller. */
void req_resume(struct request *req);

/* True once the server drains or stops (replies close connections). */
bool req_draining(const struct request *req);

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
 * Map a backend's -errno (store/store.h, sale/sale.h) to the error reply:
 * -ENOTCONN, -ECONNRESET, -ECONNREFUSED, -ETIMEDOUT, -EDEADLK, -EACCES,
 * -ETIME, -ECANCELED, -ESHUTDOWN, -EINPROGRESS, -EAGAIN become 503 (each
 * with its message), anything else 500. op names the failed step for the log.
 * Returns the status.
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
 * The value of request header name (compared without case; the first
 * when it was sent more than once), or NULL when there is none or no
 * connection. libmicrohttpd's string, valid for the request's life.
 */
const char *req_header_value(const struct request *req, const char *name);

/* A query-string argument, or NULL. */
const char *req_query(struct request *req, const char *name);

/*
 * The client's address: the connection's peer, or, when the peer is one
 * of cfg->trusted_proxies, the address nearest the end of X-Forwarded-For
 * (every such header, in order) that is not one of them (all of them:
 * the first). An entry that is not an address ends the walk: the last
 * trusted hop is the client then. False when the peer is unknown.
 */
bool req_client_addr(const struct request *req, struct cidr *out);

/*
 * The client (req_client_addr()) as a key for counting its requests:
 * an IPv4 address, or an IPv6 address's /64 ("2001:db8:1:2::/64": one
 * host usually holds a whole /64). False when unknown.
 */
bool req_client_key(const struct request *req, char *out, size_t n);

/* Who an admin's change is by, for the audit log: the token's admin (after
 * req_admin_or_reply()), the client's address (req_client_addr(), the
 * whole address; "" when unknown) and the request's Idempotency-Key (with
 * the admin's id), if it has one. */
void req_actor(struct request *req, struct sale_actor *out);

/* The connection's peer (whatever X-Forwarded-For says). False when
 * unknown. */
bool req_peer_addr(const struct request *req, struct cidr *out);

/*
 * Verify the bearer token into req->auth, once per request (later calls
 * return the first result). Returns 0, -ENOENT without an Authorization
 * header, -EPROTONOSUPPORT for a scheme other than Bearer, the error of
 * token_verify(), -EKEYREVOKED for a token logged out, or -EACCES for a
 * banned buyer's (sale_session_check()). Sets no reply.
 */
int req_auth(struct request *req);

/*
 * Authenticate the bearer token into req->auth. Returns 0, or sets the
 * 401 reply and returns 401 (403 for a banned buyer). The admin variant
 * also sets 403 for users.
 */
unsigned req_user_or_reply(struct request *req);
unsigned req_admin_or_reply(struct request *req);
/* As req_user_or_reply(), and 403 for an admin's token: what only a
 * buyer does (buy, list its orders, pay). */
unsigned req_buyer_or_reply(struct request *req);

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
/*
 * Text that people read on the pages (a title, a voucher's rules): a
 * string as above, refused when it holds a control character (C0 but,
 * with lines, line feeds and tabs; DEL; C1), a line or paragraph
 * separator, a format character that reorders or hides text (U+00AD,
 * U+034F, U+061C, U+180E, U+200B, U+200E, U+200F, U+202A..U+202E,
 * U+2060..U+206F, U+FEFF, U+FFF9..U+FFFB, U+1D173..U+1D17A), a Hangul
 * filler, a private-use character or a noncharacter (the joiners, the
 * variation selectors and the tags emoji use stay); its surrounding
 * blanks (ASCII, U+00A0, U+1680, U+2000..U+200A, U+202F, U+205F, U+2800,
 * U+3000; with lines, line feeds too) are dropped, in the body itself,
 * before its length is counted, and a required one must hold more than
 * blanks.
 */
bool body_text_or_reply(struct request *req, const char *name, bool required,
                        size_t max_chars, bool lines, const char **out);
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

/*
 * Keyset pages (README, "Pagination"): a list answers at most limit items
 * and a nextCursor, the key of its last item (one or two integers joined
 * by '.': "1234", "1764158400.1234"), or null on the last page; the
 * client sends it back as the cursor argument for the items after it.
 * Parse the cursor argument into keys[0..nkeys) (nkeys 1 or 2; each an
 * integer from 0 to 2^63-1): true (*given false when it is absent), or a
 * 400 reply and false.
 */
bool query_cursor_or_reply(struct request *req, size_t nkeys, int64_t *keys,
                           bool *given);
/* A page's nextCursor: keys[0..nkeys) when more follow, else null. */
json_t *json_cursor(bool more, size_t nkeys, const int64_t *keys);

/* JSON value of an id: a decimal string. */
json_t *json_id(int64_t id);
/* JSON value of a time: an RFC 3339 UTC string. */
json_t *json_time(int64_t epoch_s);

#endif
