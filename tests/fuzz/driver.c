/*
 * driver.c - run one request through seckilld's own request code and
 * check the reply.
 *
 * The request goes through handlers/dispatch.c, the unit the daemon's
 * callbacks call (the 64 KiB cap, body accumulation, routing, the
 * 405/404/400 answers, the endpoint handlers, the reply), and on through
 * the real sale layer (sale/), exactly as in the service; only the
 * libmicrohttpd daemon (handlers/http.c) is left out. The few
 * libmicrohttpd functions the request code calls are faked below over a
 * struct fuzz_request; what lies below the sale layer (the stores, the
 * engine and the task pool, the async mode, the locks, the ids) is faked
 * by fake_backend.c.
 *
 * Every reply must keep these invariants (fuzz_http_run aborts if not):
 * the body is one JSON object and a newline, or a page's file exactly as
 * embedded, or nothing (204, 304); errors are exactly
 * {"error":{"code","message"}} with a code from the README's table and its
 * status; Allow comes with 405 and plain OPTIONS only, Retry-After with
 * every 503; a request whose framing a server must refuse (checked here
 * against an independent reading of RFC 9110/9112) is 400 or 501 before
 * any backend call; an over-large body is 413 before any backend call;
 * unknown paths are 404, bad ids 400, wrong methods 405 with the route's
 * Allow; then a body whose Content-Type is not application/json (read
 * here independently of handlers/protocol.c) is 415 with no backend call,
 * and a 415 comes for nothing else; OPTIONS and the pages' files never
 * touch a backend; CORS allows only a listed origin, exactly, and never
 * credentials; the authenticated routes answer 401/403 without touching a
 * backend unless a token signed with the service key was sent, and a user
 * sees only their own order.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <microhttpd.h>
#include <sodium.h>

#include "common/util.h"
#include "handlers/dispatch.h"
#include "handlers/errors.h"
#include "handlers/route.h"
#include "handlers/web.h"
#include "sale/sale.h"
#include "tests/fuzz/fuzz.h"

const unsigned char fuzz_key[TOKEN_KEY_LEN] = {
    0x5e, 0xc4, 0x11, 0x1d, 0x0f, 0x02, 0x7a, 0x9b, 0x33, 0xe8, 0x41,
    0x6c, 0x90, 0x2d, 0xb7, 0x18, 0xa4, 0x55, 0x0e, 0xc9, 0x71, 0x3f,
    0x86, 0x2b, 0xd0, 0x64, 0x1a, 0xf3, 0x98, 0x47, 0xbe, 0x05};

static const unsigned char other_key[TOKEN_KEY_LEN] = {1};

static struct http_config cfg;
static struct store_config store_cfg; /* the fakes ignore it */
static struct req_server srv;
static bool verbose; /* FUZZ_VERBOSE=1: print each reply to stderr */

/* ---- a fake libmicrohttpd, just what the request code calls ---- */

#define RESP_HEADERS_MAX 16

struct MHD_Response {
    char *data;
    size_t len;
    bool owned;
    unsigned refs;
    char *names[RESP_HEADERS_MAX];
    char *values[RESP_HEADERS_MAX];
    unsigned nheaders;
    /* A callback response's (its body is never read here): */
    MHD_ContentReaderFreeCallback crfc;
    void *crc_cls;
};

struct MHD_Connection {
    const struct fuzz_request *rq;
    const char *header_values[FUZZ_KV_MAX]; /* after token markers */
    struct MHD_Response *response;
    unsigned status;
    unsigned queued;
    bool suspended, resumed;
};

/* Keys compare without case for every kind, as in libmicrohttpd. */
const char *MHD_lookup_connection_value(struct MHD_Connection *connection,
                                        enum MHD_ValueKind kind,
                                        const char *key)
{
    const struct fuzz_request *rq = connection->rq;

    if (!key)
        return NULL;
    if (kind & MHD_HEADER_KIND)
        for (size_t i = 0; i < rq->nheaders; i++)
            if (strcasecmp(rq->headers[i].key, key) == 0)
                return connection->header_values[i];
    if (kind & MHD_GET_ARGUMENT_KIND)
        for (size_t i = 0; i < rq->nargs; i++)
            if (strcasecmp(rq->args[i].key, key) == 0)
                return rq->args[i].value;
    return NULL;
}

int MHD_get_connection_values(struct MHD_Connection *connection,
                              enum MHD_ValueKind kind,
                              MHD_KeyValueIterator iterator, void *iterator_cls)
{
    const struct fuzz_request *rq = connection->rq;
    int n = 0;

    if (!(kind & MHD_HEADER_KIND))
        return 0;
    for (size_t i = 0; i < rq->nheaders; i++) {
        n++;
        if (iterator &&
            iterator(iterator_cls, MHD_HEADER_KIND, rq->headers[i].key,
                     connection->header_values[i]) != MHD_YES)
            break;
    }
    return n;
}

/* As libmicrohttpd keeps them: every header in one buffer, in the order
 * sent, "name\0 value\0\n" (handlers/protocol.c reads between them),
 * valid until the next call (libmicrohttpd's, for the request's life). */
int MHD_get_connection_values_n(struct MHD_Connection *connection,
                                enum MHD_ValueKind kind,
                                MHD_KeyValueIteratorN iterator,
                                void *iterator_cls)
{
    const struct fuzz_request *rq = connection->rq;
    static char *buf;
    size_t cap = 4, at = 0;
    int n = 0;

    if (!(kind & MHD_HEADER_KIND))
        return 0;
    for (size_t i = 0; i < rq->nheaders; i++)
        cap += strlen(rq->headers[i].key) +
               strlen(connection->header_values[i]) + 4;
    buf = xrealloc(buf, cap);
    memset(buf, 0, cap);
    for (size_t i = 0; i < rq->nheaders; i++) {
        const char *k = rq->headers[i].key, *v = connection->header_values[i];
        size_t kl = strlen(k), vl = strlen(v);
        char *key = buf + at, *value;

        memcpy(key, k, kl);
        at += kl + 1;
        buf[at++] = ' ';
        value = buf + at;
        memcpy(value, v, vl);
        at += vl + 1;
        buf[at++] = '\n';
        n++;
        if (iterator && iterator(iterator_cls, MHD_HEADER_KIND, key, kl, value,
                                 vl) != MHD_YES)
            break;
    }
    return n;
}

struct MHD_Response *
MHD_create_response_from_buffer(size_t size, void *buffer,
                                enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = xcalloc(1, sizeof(*r));

    r->len = size;
    r->refs = 1;
    switch (mode) {
    case MHD_RESPMEM_PERSISTENT:
        r->data = buffer;
        break;
    case MHD_RESPMEM_MUST_FREE:
        r->data = buffer;
        r->owned = true;
        break;
    case MHD_RESPMEM_MUST_COPY:
        r->data = xmalloc(size ? size : 1);
        memcpy(r->data, buffer, size);
        r->owned = true;
        break;
    }
    return r;
}

/* A streamed body (handlers/stream.c): not read, only released. */
struct MHD_Response *
MHD_create_response_from_callback(uint64_t size, size_t block_size,
                                  MHD_ContentReaderCallback crc, void *crc_cls,
                                  MHD_ContentReaderFreeCallback crfc)
{
    struct MHD_Response *r = xcalloc(1, sizeof(*r));

    (void)size;
    (void)block_size;
    FUZZ_CHECK(crc != NULL, "a callback response without a reader");
    r->refs = 1;
    r->crfc = crfc;
    r->crc_cls = crc_cls;
    return r;
}

enum MHD_Result MHD_add_response_header(struct MHD_Response *response,
                                        const char *header, const char *content)
{
    FUZZ_CHECK(response->nheaders < RESP_HEADERS_MAX, "too many headers");
    for (unsigned i = 0; i < response->nheaders; i++)
        FUZZ_CHECK(strcasecmp(response->names[i], header) != 0,
                   "header %s set twice", header);
    FUZZ_CHECK(!strpbrk(content, "\r\n"), "header %s breaks the line", header);
    response->names[response->nheaders] = xstrdup(header);
    response->values[response->nheaders++] = xstrdup(content);
    return MHD_YES;
}

void MHD_destroy_response(struct MHD_Response *response)
{
    if (--response->refs)
        return;
    for (unsigned i = 0; i < response->nheaders; i++) {
        free(response->names[i]);
        free(response->values[i]);
    }
    if (response->owned)
        free(response->data);
    if (response->crfc)
        response->crfc(response->crc_cls);
    free(response);
}

enum MHD_Result MHD_queue_response(struct MHD_Connection *connection,
                                   unsigned int status_code,
                                   struct MHD_Response *response)
{
    FUZZ_CHECK(!connection->queued, "a second reply for one request");
    connection->queued++;
    connection->status = status_code;
    connection->response = response;
    response->refs++;
    return MHD_YES;
}

void MHD_suspend_connection(struct MHD_Connection *connection)
{
    FUZZ_CHECK(!connection->suspended, "suspended twice");
    FUZZ_CHECK(!connection->queued, "suspended after its reply");
    connection->suspended = true;
}

void MHD_resume_connection(struct MHD_Connection *connection)
{
    FUZZ_CHECK(connection->suspended && !connection->resumed,
               "resumed without being suspended, or twice");
    connection->resumed = true;
}

/* No socket behind the fake: no deadline record, no client address. */
const union MHD_ConnectionInfo *
MHD_get_connection_info(struct MHD_Connection *connection,
                        enum MHD_ConnectionInfoType info_type, ...)
{
    (void)connection;
    (void)info_type;
    return NULL;
}

/* ---- the driver ---- */

enum mark { MARK_NONE = -1, MARK_ADMIN, MARK_USER, MARK_EXPIRED, MARK_OTHER };

static const struct {
    const char *text;
    int64_t user_id;
    enum token_role role;
    int64_t ttl_s;
    const unsigned char *key;
} marks[] = {
    [MARK_ADMIN] = {"@admin", FUZZ_ADMIN_ID, TOKEN_ROLE_ADMIN, 3600, fuzz_key},
    [MARK_USER] = {"@user", FUZZ_USER_ID, TOKEN_ROLE_USER, 3600, fuzz_key},
    [MARK_EXPIRED] = {"@expired", FUZZ_USER_ID, TOKEN_ROLE_USER, -10, fuzz_key},
    [MARK_OTHER] = {"@otherkey", FUZZ_ADMIN_ID, TOKEN_ROLE_ADMIN, 3600,
                    other_key},
};

/* Replace the first token marker in value; *which says which it was. */
static char *substitute(const char *value, enum mark *which)
{
    *which = MARK_NONE;
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
        const char *at = strstr(value, marks[i].text);
        if (!at)
            continue;
        struct token_claims c = {marks[i].user_id, marks[i].role,
                                 util_now_ms() / 1000 + marks[i].ttl_s, 0, 0};
        char tok[TOKEN_STR_LEN];
        FUZZ_CHECK(token_sign(marks[i].key, &c, tok) == 0, "token_sign");
        *which = (enum mark)i;
        return xasprintf("%.*s%s%s", (int)(at - value), value, tok,
                         at + strlen(marks[i].text));
    }
    return xstrdup(value);
}

void fuzz_driver_init(void)
{
    FUZZ_CHECK(sodium_init() >= 0, "sodium_init");
    /* The handlers log every backend error; a fuzzer makes millions. */
    log_set_level((enum log_level)(LOG_ERROR + 1));
    memcpy(cfg.secret, fuzz_key, sizeof(cfg.secret));
    cfg.bind = "127.0.0.1";
    cfg.threads = 1;
    cfg.head_max = HTTP_HEAD_LIMIT_DEFAULT;
    cfg.dev = true;
    cfg.cors_origins = FUZZ_CORS_ORIGINS;
    /* As the service's defaults: national numbers are Chinese ones. */
    cfg.phone_region = "CN";
    cfg.admin_token_ttl_s = 3600;
    /* The notify route exists; its signature cannot be forged. */
    cfg.has_pay_secret = true;
    memset(cfg.pay_secret, 0x5a, sizeof(cfg.pay_secret));
    /* The sale layer as the service makes it, on the fake backend: no
     * voucher cache, no async writer. */
    struct sale_config sc = {
        .store = &store_cfg,
        .mode = PURCHASE_SYNC,
        .lock_ttl_ms = 10000,
        .locks = fuzz_backend_lock_client(),
        .codes = {.ttl_s = SALE_CODE_TTL_S,
                  .interval_s = 60,
                  .per_hour = 5,
                  .addr_tries = 3,
                  .phone_tries = 10,
                  .wait_max_s = SALE_LOGIN_WAIT_MAX_S},
        .waitroom = {.open_s = 600,
                     .admit_rate = 2000,
                     .ticket_ttl_s = 60,
                     .poll_s = 1},
    };
    srv.cfg = &cfg;
    srv.limits = req_limits_of(cfg.head_max);
    srv.sale = sale_new(&sc);
    verbose = getenv("FUZZ_VERBOSE") && *getenv("FUZZ_VERBOSE") == '1';
}

void fuzz_reply_clear(struct fuzz_reply *rep)
{
    json_decref(rep->json);
    free(rep->content_type);
    free(rep->allow);
    free(rep->retry_after);
    free(rep->allow_origin);
    memset(rep, 0, sizeof(*rep));
}

const char *fuzz_reply_code(const struct fuzz_reply *rep)
{
    return json_string_value(
        json_object_get(json_object_get(rep->json, "error"), "code"));
}

static char *response_header(const struct MHD_Response *r, const char *name)
{
    for (unsigned i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->names[i], name) == 0)
            return xstrdup(r->values[i]);
    return NULL;
}

/* Read the queued response back as a client would. */
static void parse_response(const struct MHD_Connection *conn,
                           struct fuzz_reply *rep)
{
    const struct MHD_Response *r = conn->response;
    json_error_t jerr;

    rep->status = conn->status;
    rep->content_type = response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
    rep->allow = response_header(r, MHD_HTTP_HEADER_ALLOW);
    rep->retry_after = response_header(r, MHD_HTTP_HEADER_RETRY_AFTER);
    rep->allow_origin =
        response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN);
    char *cred =
        response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_CREDENTIALS);
    rep->credentials = cred != NULL;
    free(cred);
    /* No body: a 204 to OPTIONS, a 304 to a file's If-None-Match. */
    if (rep->status == 204 || rep->status == 304) {
        FUZZ_CHECK(r->len == 0 && !rep->content_type, "a body with %u",
                   rep->status);
        return;
    }
    /* A page's file (with its entity tag), as embedded: check_reply. */
    char *etag = response_header(r, MHD_HTTP_HEADER_ETAG);
    bool file = etag != NULL;
    free(etag);
    if (file) {
        FUZZ_CHECK(rep->status == 200, "an entity tag with %u", rep->status);
        return;
    }
    /* The one text reply: GET /metrics, Prometheus text format. */
    if (rep->status == 200 && rep->content_type &&
        strncmp(rep->content_type, "text/plain; version=0.0.4", 25) == 0) {
        FUZZ_CHECK(r->len > 0 && r->data[r->len - 1] == '\n' &&
                       !memchr(r->data, '\0', r->len),
                   "metrics text does not end in a newline");
        return;
    }
    FUZZ_CHECK(r->len >= 2 && r->data[r->len - 1] == '\n' &&
                   !memchr(r->data, '\0', r->len),
               "the body is not one line of text (%zu bytes)", r->len);
    rep->json = json_loadb(r->data, r->len - 1, JSON_REJECT_DUPLICATES, &jerr);
    FUZZ_CHECK(rep->json, "the reply is not JSON: %s: %.*s", jerr.text,
               (int)(r->len > 200 ? 200 : r->len), r->data);
    FUZZ_CHECK(json_is_object(rep->json), "the reply is not a JSON object");
}

static void check_error_body(const struct fuzz_reply *rep)
{
    json_t *err = json_object_get(rep->json, "error");
    json_t *code = json_object_get(err, "code");
    json_t *msg = json_object_get(err, "message");
    size_t i;

    json_t *details = json_object_get(err, "details");

    /* details: an object, on /readyz only (what is down). */
    FUZZ_CHECK(json_object_size(rep->json) == 1 && json_is_object(err) &&
                   json_object_size(err) == 2u + (details != NULL) &&
                   (!details || json_is_object(details)),
               "status %u without {\"error\":{\"code\",\"message\"}}",
               rep->status);
    FUZZ_CHECK(json_is_string(code) && json_is_string(msg) &&
                   json_string_length(msg) > 0,
               "error code or message missing");
    for (i = 0; i < ERR_COUNT; i++)
        if (strcmp(api_errors[i].code, json_string_value(code)) == 0)
            break;
    FUZZ_CHECK(i < ERR_COUNT, "code %s is not in the table",
               json_string_value(code));
    FUZZ_CHECK(api_errors[i].status == rep->status, "%s with status %u",
               api_errors[i].code, rep->status);
}

/* The id in a success reply member: a decimal string of a valid id. */
static int64_t reply_id(const struct fuzz_reply *rep, const char *name)
{
    const char *s = json_string_value(json_object_get(rep->json, name));
    int64_t id = 0;

    FUZZ_CHECK(s && util_parse_id(s, strlen(s), &id) == 0,
               "reply member %s is not an id", name);
    return id;
}

/* The value of request header name (any case), or NULL. */
static const char *request_header(const struct fuzz_request *rq,
                                  const char *const *values, const char *name)
{
    for (size_t i = 0; i < rq->nheaders; i++)
        if (strcasecmp(rq->headers[i].key, name) == 0)
            return values[i];
    return NULL;
}

/* RFC 9110 5.6.2: a tchar, what tokens are made of. */
static bool is_tchar(char c)
{
    return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/*
 * What a server must refuse of the request's framing, read from RFC 9110
 * and 9112 independently of handlers/protocol.c (and two Authorization
 * headers, which a proxy in front may read otherwise): 0 when nothing,
 * else the status (400, or 501 for a transfer coding other than
 * chunked).
 */
static unsigned framing_verdict(const struct fuzz_request *rq,
                                const char *const *values)
{
    unsigned hosts = 0, lengths = 0, codings = 0, auths = 0;
    const char *coding = "";

    for (size_t i = 0; i < rq->nheaders; i++) {
        const char *k = rq->headers[i].key;
        if (!*k)
            return 400;
        for (const char *c = k; *c; c++)
            if (!is_tchar(*c))
                return 400;
        for (const unsigned char *c = (const unsigned char *)values[i]; *c; c++)
            if ((*c < 0x20 && *c != '\t') || *c == 0x7f)
                return 400;
        hosts += strcasecmp(k, "Host") == 0;
        auths += strcasecmp(k, "Authorization") == 0;
        lengths += strcasecmp(k, "Content-Length") == 0;
        if (strcasecmp(k, "Transfer-Encoding") == 0) {
            codings++;
            coding = values[i];
        }
    }
    if (hosts == 0 &&
        strcmp(rq->version ? rq->version : "HTTP/1.1", "HTTP/1.0") != 0)
        return 400;
    if (hosts > 1 || auths > 1 || lengths > 1 || codings > 1 ||
        (codings && lengths))
        return 400;
    if (codings && strcasecmp(coding, "chunked") != 0)
        return 501;
    return 0;
}

/*
 * Whether a Content-Type says JSON, read from RFC 9110 (5.6, 8.3.1)
 * independently of handlers/protocol.c: "application/json" in any case,
 * then parameters, each OWS ";" OWS and either nothing or
 * token "=" (token / quoted-string); a charset parameter's value, its
 * quoted pairs undone, must be utf-8 in any case.
 */
static bool json_labelled(const char *ct)
{
    const char *p;

    if (!ct)
        return false;
    p = ct + strspn(ct, " \t");
    if (strncasecmp(p, "application/json", 16) != 0)
        return false;
    p += 16;
    for (;;) {
        char value[8];
        size_t name_len, n = 0;
        bool charset;

        p += strspn(p, " \t");
        if (*p == '\0')
            return true;
        if (*p != ';')
            return false;
        p++;
        p += strspn(p, " \t");
        if (*p == '\0' || *p == ';')
            continue;
        for (name_len = 0; is_tchar(p[name_len]); name_len++)
            ;
        if (name_len == 0 || p[name_len] != '=')
            return false;
        charset = name_len == 7 && strncasecmp(p, "charset", 7) == 0;
        p += name_len + 1;
        if (*p == '"') {
            for (p++; *p != '"'; p++, n++) {
                if (*p == '\\')
                    p++;
                unsigned char c = (unsigned char)*p;
                if (c == '\0' || (c < 0x20 && c != '\t') || c == 0x7f)
                    return false;
                if (n < sizeof(value))
                    value[n] = (char)tolower(c);
            }
            p++;
        } else {
            for (; is_tchar(*p); p++, n++)
                if (n < sizeof(value))
                    value[n] = (char)tolower((unsigned char)*p);
            if (n == 0)
                return false;
        }
        if (charset && (n != 5 || memcmp(value, "utf-8", 5) != 0))
            return false;
    }
}

/* True when origin is one of FUZZ_CORS_ORIGINS, byte for byte. */
static bool origin_listed(const char *origin)
{
    static const char *const listed[] = {FUZZ_CORS_ORIGIN_A,
                                         FUZZ_CORS_ORIGIN_B};

    for (size_t i = 0; origin && i < 2; i++)
        if (strcmp(origin, listed[i]) == 0)
            return true;
    return false;
}

/* A reply without JSON: a 204 to OPTIONS, or a page's file (200, 304). */
static void check_raw_reply(const struct fuzz_request *rq,
                            const char *const *values,
                            const struct MHD_Connection *conn,
                            const struct fuzz_reply *rep, unsigned calls)
{
    const struct route *route = NULL;
    const char *origin = request_header(rq, values, "Origin");
    const char *ask =
        request_header(rq, values, "Access-Control-Request-Method");
    int64_t id = 0;
    unsigned st = rep->status;

    FUZZ_CHECK(calls == 0, "%u backend calls for a %u", calls, st);
    FUZZ_CHECK(route_match(rq->path, &route, &id) == ROUTE_OK,
               "a %u reply to %s", st, rq->path);
    if (st == 204) {
        FUZZ_CHECK(strcmp(rq->method, "OPTIONS") == 0, "204 to %s", rq->method);
        if (origin && ask) /* a preflight: only from a listed origin */
            FUZZ_CHECK(origin_listed(origin) && rep->allow_origin &&
                           strcmp(rep->allow_origin, origin) == 0 &&
                           !rep->allow,
                       "preflight from %s allowed", origin);
        else
            FUZZ_CHECK(rep->allow && strcmp(rep->allow, route->allow) == 0,
                       "plain OPTIONS without the route's Allow");
        return;
    }
    FUZZ_CHECK(strcmp(rq->method, "GET") == 0 && route->get == web_get,
               "a file for %s %s", rq->method, rq->path);
    const struct web_file *f = NULL;
    for (size_t i = 0; i < web_file_count; i++)
        if (strcmp(web_files[i].path, rq->path) == 0)
            f = &web_files[i];
    FUZZ_CHECK(f, "%u for %s, which is no file", st, rq->path);
    char *etag = response_header(conn->response, MHD_HTTP_HEADER_ETAG);
    FUZZ_CHECK(etag && strcmp(etag, f->etag) == 0, "%s without its ETag",
               rq->path);
    free(etag);
    if (st == 304) {
        FUZZ_CHECK(request_header(rq, values, "If-None-Match"),
                   "304 without If-None-Match");
        return;
    }
    FUZZ_CHECK(st == 200 && strcmp(rep->content_type, f->type) == 0 &&
                   conn->response->len == f->len &&
                   memcmp(conn->response->data, f->data, f->len) == 0,
               "%s is not its embedded file", rq->path);
    char *csp = response_header(conn->response,
                                MHD_HTTP_HEADER_CONTENT_SECURITY_POLICY);
    FUZZ_CHECK(csp && strstr(csp, "default-src 'self'"), "%s without a CSP",
               rq->path);
    free(csp);
}

static void check_reply(const struct fuzz_request *rq,
                        const char *const *values,
                        const struct MHD_Connection *conn,
                        const struct fuzz_reply *rep, bool too_large,
                        unsigned calls)
{
    const struct route *route = NULL;
    handler_fn fn = NULL;
    int64_t id = 0;
    unsigned st = rep->status;
    const char *origin = request_header(rq, values, "Origin");

    /* CORS, on every reply: a listed origin exactly, never credentials. */
    FUZZ_CHECK(!rep->credentials, "Access-Control-Allow-Credentials");
    FUZZ_CHECK(!rep->allow_origin || (origin_listed(origin) &&
                                      strcmp(rep->allow_origin, origin) == 0),
               "Access-Control-Allow-Origin %s for Origin %s",
               rep->allow_origin, origin ? origin : "(none)");

    /* Refused for its media type once routed to a handler. */
    const char *type = request_header(rq, values, "Content-Type");
    bool bad_type = rq->body_len > 0 && !json_labelled(type);

    unsigned verdict = framing_verdict(rq, values);
    if (verdict) {
        FUZZ_CHECK(st == verdict && calls == 0 && rep->json,
                   "malformed framing answered %u (want %u), %u calls", st,
                   verdict, calls);
        check_error_body(rep);
        return;
    }
    FUZZ_CHECK(st != 501, "501 for a request a server may take");

    if (!rep->json) {
        /* A handler's answer (not a 204 to OPTIONS) for a body that is
         * not labelled JSON. */
        FUZZ_CHECK(!bad_type || strcmp(rq->method, "OPTIONS") == 0,
                   "a %u reply without JSON to %s %s with a body of type %s",
                   st, rq->method, rq->path, type ? type : "(none)");
        /* Text: GET /metrics; else nothing or a page's file. */
        if (rep->status == 200 && rep->content_type &&
            strncmp(rep->content_type, "text/plain; version=0.0.4", 25) == 0 &&
            strcmp(rq->path, "/metrics") == 0)
            FUZZ_CHECK(strcmp(rq->method, "GET") == 0 &&
                           strcmp(rq->path, "/metrics") == 0,
                       "a text reply to %s %s", rq->method, rq->path);
        else
            check_raw_reply(rq, values, conn, rep, calls);
        return;
    }
    FUZZ_CHECK(rep->content_type &&
                   strcmp(rep->content_type, "application/json") == 0,
               "Content-Type %s", rep->content_type);
    if (st >= 400) {
        check_error_body(rep);
    } else {
        FUZZ_CHECK(st == 200 || st == 201, "status %u", st);
        FUZZ_CHECK(!json_object_get(rep->json, "error"),
                   "a %u reply with an error member", st);
    }
    FUZZ_CHECK(!rep->allow == (st != 405), "Allow with status %u", st);
    FUZZ_CHECK(st != 503 ||
                   (rep->retry_after && strcmp(rep->retry_after, "1") == 0),
               "503 without Retry-After: 1");
    FUZZ_CHECK(!rep->retry_after || st == 503 || st == 429,
               "Retry-After with status %u", st);

    if (too_large) {
        FUZZ_CHECK(st == 413 && calls == 0, "over 64 KiB: %u, %u calls", st,
                   calls);
        return;
    }
    FUZZ_CHECK(st != 413, "413 for a body within the limit");

    if (strcasestr(rq->path, "%2f")) {
        FUZZ_CHECK(st == 400 && calls == 0, "an encoded / in the path: %u", st);
        return;
    }
    switch (route_match(rq->path, &route, &id)) {
    case ROUTE_NOT_FOUND:
        FUZZ_CHECK(st == 404 && calls == 0, "unknown path: %u", st);
        return;
    case ROUTE_BAD_ID:
        FUZZ_CHECK(st == 400 && calls == 0, "bad id: %u", st);
        return;
    case ROUTE_OK:
        break;
    }
    FUZZ_CHECK(id >= 0 && (id > 0) == (strstr(route->pattern, "{id}") != NULL),
               "route %s with id %lld", route->pattern, (long long)id);
    if (strcmp(rq->method, "GET") == 0)
        fn = route->get;
    else if (strcmp(rq->method, "POST") == 0)
        fn = route->post;
    if (strcmp(rq->method, "OPTIONS") == 0) {
        /* A 204 had no JSON; what is left is a refused preflight. */
        FUZZ_CHECK(st == 403 && calls == 0 &&
                       strcmp(fuzz_reply_code(rep), "FORBIDDEN") == 0 &&
                       !rep->allow_origin,
                   "OPTIONS %s answered %u", route->pattern, st);
        return;
    }
    if (!fn) {
        FUZZ_CHECK(st == 405 && calls == 0 && rep->allow &&
                       strcmp(rep->allow, route->allow) == 0,
                   "wrong method on %s: %u", route->pattern, st);
        return;
    }
    FUZZ_CHECK(st != 405, "405 for %s %s", rq->method, route->pattern);
    if (bad_type) {
        FUZZ_CHECK(st == 415 && calls == 0 &&
                       strcmp(fuzz_reply_code(rep), "UNSUPPORTED_MEDIA_TYPE") ==
                           0,
                   "a body of type %s to %s answered %u, %u backend calls",
                   type ? type : "(none)", route->pattern, st, calls);
        return;
    }
    FUZZ_CHECK(st != 415, "415 for %s %s, whose body is JSON or empty",
               rq->method, route->pattern);
    if (fn == web_get) {
        FUZZ_CHECK(st == 404 && calls == 0, "%s answered %u in JSON", rq->path,
                   st);
        return;
    }

    if (fn == vouchers_post || fn == voucher_seckill_post || fn == orders_get ||
        fn == order_get) {
        if (!rep->user_token)
            FUZZ_CHECK(st == 401 && calls == 0,
                       "%s answered %u (%u backend calls) without a token",
                       route->pattern, st, calls);
        if (fn == vouchers_post && !rep->admin_token)
            FUZZ_CHECK((st == 401 || st == 403) && calls == 0,
                       "voucher created without an admin token: %u", st);
    }
    if (fn == order_get && st == 200 && !rep->admin_token)
        FUZZ_CHECK(reply_id(rep, "userId") == FUZZ_USER_ID,
                   "a user read someone else's order");
    if (fn == voucher_seckill_post && st == 201)
        reply_id(rep, "orderId");
    if (fn == vouchers_post && st == 201) {
        const struct store_voucher *v = fuzz_backend_last_voucher();
        FUZZ_CHECK(v && reply_id(rep, "id") == v->id,
                   "201 without the voucher stored");
    }
}

void fuzz_http_run(const struct fuzz_request *rq, struct fuzz_reply *out)
{
    struct MHD_Connection conn = {.rq = rq};
    char *values[FUZZ_KV_MAX] = {0};
    enum mark auth = MARK_NONE;
    bool seen_auth = false;
    void *req_cls = NULL;
    size_t n = 0, off = 0;
    enum MHD_Result r;

    memset(out, 0, sizeof(*out));
    FUZZ_CHECK(rq->nheaders <= FUZZ_KV_MAX && rq->nargs <= FUZZ_KV_MAX,
               "too many headers or arguments");
    for (size_t i = 0; i < rq->nheaders; i++) {
        enum mark which;
        values[i] = substitute(rq->headers[i].value, &which);
        conn.header_values[i] = values[i];
        /* The handlers read the first Authorization header only. */
        if (!seen_auth &&
            strcasecmp(rq->headers[i].key, "Authorization") == 0) {
            seen_auth = true;
            auth = which;
        }
    }
    out->user_token = auth == MARK_USER || auth == MARK_ADMIN;
    out->admin_token = auth == MARK_ADMIN;
    const char *cl = MHD_lookup_connection_value(
        &conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    bool too_large =
        (cl && strtoull(cl, NULL, 10) > BODY_MAX) || rq->body_len > BODY_MAX;

    const char *version = rq->version ? rq->version : "HTTP/1.1";
    r = dispatch_access(&srv, &conn, rq->path, rq->method, version, NULL, &n,
                        &req_cls);
    while (r == MHD_YES && !conn.queued && off < rq->body_len) {
        size_t piece = rq->body_len - off;
        if (rq->chunk && piece > rq->chunk)
            piece = rq->chunk;
        /* A copy of exactly this piece, so ASan sees any over-read. */
        char *buf = xmalloc(piece);
        memcpy(buf, rq->body + off, piece);
        n = piece;
        r = dispatch_access(&srv, &conn, rq->path, rq->method, version, buf, &n,
                            &req_cls);
        free(buf);
        FUZZ_CHECK(n == 0, "the handler left %zu upload bytes", n);
        off += piece;
    }
    if (r == MHD_YES && !conn.queued) {
        n = 0;
        r = dispatch_access(&srv, &conn, rq->path, rq->method, version, NULL,
                            &n, &req_cls);
    }
    /* Parked for the task pool or the purchase engine (a handler on the
     * pool may hand the request on once more): they answer, and
     * libmicrohttpd calls the access handler again once the connection
     * is resumed. */
    if (r == MHD_YES && !conn.queued && conn.suspended) {
        for (int hops = 0; !conn.resumed; hops++) {
            FUZZ_CHECK(hops < 2, "parked more than twice");
            FUZZ_CHECK(fuzz_backend_engine_run(),
                       "parked with nothing to resume it");
        }
        n = 0;
        r = dispatch_access(&srv, &conn, rq->path, rq->method, version, NULL,
                            &n, &req_cls);
    }
    FUZZ_CHECK(r == MHD_YES && conn.queued == 1, "no reply queued");
    dispatch_completed(&srv, &req_cls);
    FUZZ_CHECK(!req_cls, "the request state outlived the request");

    unsigned calls = fuzz_backend_calls();
    if (verbose)
        fprintf(stderr, "%s %s -> %u, %u backend calls: %.*s", rq->method,
                rq->path, conn.status, calls,
                (int)(conn.response->len > 300 ? 300 : conn.response->len),
                conn.response->data);
    parse_response(&conn, out);
    check_reply(rq, (const char *const *)values, &conn, out, too_large, calls);
    fuzz_backend_finish();
    MHD_destroy_response(conn.response);
    for (size_t i = 0; i < rq->nheaders; i++)
        free(values[i]);
}
