/*
 * request.c - one request (see request.h): parking and resuming it, the
 * error table, replies, authentication and the input helpers that either
 * parse a value or set the 400 reply.
 */
#include "handlers/request.h"
#include "handlers/stream.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <microhttpd.h>

#include "common/cidr.h"
#include "common/util.h"
#include "handlers/deadline.h"

const struct api_error_info api_errors[ERR_COUNT] = {
    [ERR_BAD_REQUEST] = {400, "BAD_REQUEST", "the request is malformed"},
    [ERR_UNAUTHORIZED] = {401, "UNAUTHORIZED",
                          "a valid bearer token is required"},
    [ERR_FORBIDDEN] = {403, "FORBIDDEN", "this needs an admin token"},
    [ERR_TICKET_REQUIRED] = {403, "TICKET_REQUIRED",
                             "this sale admits buyers through its waiting "
                             "room: join it and buy with your ticket"},
    [ERR_POW_REQUIRED] = {403, "POW_REQUIRED",
                          "solve the proof of work in error.details and send "
                          "it in Seckill-PoW"},
    [ERR_NOT_FOUND] = {404, "NOT_FOUND", "no such resource"},
    [ERR_METHOD_NOT_ALLOWED] = {405, "METHOD_NOT_ALLOWED",
                                "method not allowed on this resource"},
    [ERR_NOT_SECKILL] = {409, "NOT_SECKILL",
                         "this voucher is not sold in a flash sale"},
    [ERR_NOT_STARTED] = {409, "NOT_STARTED", "the sale has not started yet"},
    [ERR_ENDED] = {409, "ENDED", "the sale has ended"},
    [ERR_SALE_PAUSED] = {409, "SALE_PAUSED",
                         "the sale is paused; it may resume"},
    [ERR_SALE_STARTED] = {409, "SALE_STARTED",
                          "the sale has started: this may only change "
                          "before its begin"},
    [ERR_SOLD_OUT] = {409, "SOLD_OUT", "the voucher is sold out"},
    [ERR_ALREADY_PURCHASED] = {409, "ALREADY_PURCHASED",
                               "you already bought this voucher"},
    [ERR_ORDER_PAID] = {409, "ORDER_PAID", "the order is paid already"},
    [ERR_ORDER_CLOSED] = {409, "ORDER_CLOSED",
                          "the order is closed (cancelled or expired)"},
    [ERR_IDEMPOTENCY_KEY_IN_USE] = {409, "IDEMPOTENCY_KEY_IN_USE",
                                    "a request with this Idempotency-Key "
                                    "is still running; retry in a moment"},
    [ERR_IDEMPOTENCY_KEY_REUSED] = {422, "IDEMPOTENCY_KEY_REUSED",
                                    "this Idempotency-Key was used for "
                                    "another request"},
    [ERR_PAYLOAD_TOO_LARGE] = {413, "PAYLOAD_TOO_LARGE",
                               "the request body is larger than 64 KiB"},
    [ERR_URI_TOO_LONG] = {414, "URI_TOO_LONG",
                          "the request's URI is longer than this server "
                          "takes"},
    [ERR_HEADERS_TOO_LARGE] = {431, "HEADERS_TOO_LARGE",
                               "the request's headers are larger than "
                               "this server takes"},
    [ERR_UNSUPPORTED_MEDIA_TYPE] = {415, "UNSUPPORTED_MEDIA_TYPE",
                                    "a request body must be sent as "
                                    "Content-Type: application/json"},
    [ERR_BUSY] = {429, "BUSY",
                  "another purchase of yours is in progress; retry"},
    [ERR_RATE_LIMITED] = {429, "RATE_LIMITED",
                          "too many requests; retry after Retry-After "
                          "seconds"},
    [ERR_SMS_BUDGET] = {429, "SMS_BUDGET",
                        "too many login codes are being sent to numbers of "
                        "this country right now: retry after Retry-After"},
    [ERR_INTERNAL] = {500, "INTERNAL", "internal error"},
    [ERR_UNAVAILABLE] = {503, "UNAVAILABLE",
                         "the service is temporarily unavailable; retry"},
    [ERR_NOT_IMPLEMENTED] = {501, "NOT_IMPLEMENTED",
                             "the request uses a feature this server does "
                             "not implement"},
};

uint64_t req_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void req_park(struct request *req)
{
    if (req->parked)
        return;
    /* The request has fully arrived: no deadline while it waits. */
    deadline_conn_busy(req->deadline);
    atomic_fetch_add(&req->srv->parked, 1);
    req->parked = true;
    MHD_suspend_connection(req->conn);
}

void req_resume(struct request *req)
{
    /* libmicrohttpd calls the access handler again, on the connection's
     * own thread, which sends the reply set here. */
    MHD_resume_connection(req->conn);
}

bool req_draining(const struct request *req)
{
    return req->srv &&
           atomic_load_explicit(&req->srv->draining, memory_order_relaxed);
}

void request_clear(struct request *req)
{
    free(req->body);
    req->body = NULL;
    json_decref(req->json);
    req->json = NULL;
    json_decref(req->reply);
    req->reply = NULL;
    stream_discard(req->stream);
    req->stream = NULL;
    sale_idem_release(&req->idem);
}

unsigned req_reply(struct request *req, unsigned status, json_t *body)
{
    json_decref(req->reply);
    req->raw = false;
    req->reply = body;
    req->status = status;
    return status;
}

unsigned req_error(struct request *req, enum api_error e, const char *message)
{
    const struct api_error_info *info = &api_errors[e];
    json_t *body = json_pack("{s:{s:s,s:s}}", "error", "code", info->code,
                             "message", message ? message : info->message);
    /* Every 503 says when to come back: in a second unless the caller
     * knows better. */
    if (info->status == 503 && !req->retry_after)
        req->retry_after = 1;
    return req_reply(req, info->status, body);
}

/* A backend that is down fails every request: say so at most once a
 * second per thread, not once per request. */
static bool log_due(void)
{
    static _Thread_local int64_t last_ms;
    int64_t now = util_mono_ms();

    if (last_ms && now - last_ms < 1000)
        return false;
    last_ms = now;
    return true;
}

unsigned req_backend_error(struct request *req, int err, const char *op)
{
    switch (err) {
    case -EALREADY:
    case -EBUSY:
        /* The change's Idempotency-Key was there, and nothing changed:
         * idem_finish() answers it (dispatch.c), once the handler
         * returned. */
        if (req->has_idem && (req->idem.found || req->idem.busy))
            return req_error(req, ERR_IDEMPOTENCY_KEY_IN_USE, NULL);
        log_error("backend failed", "op=%s err=%d", op, err);
        return req_error(req, ERR_INTERNAL, NULL);
    case -ENOTCONN:
    case -ECONNRESET:
    case -ECONNREFUSED:
    case -ETIMEDOUT:
    case -EDEADLK:
    case -EACCES: /* it refused our credentials: logged where it did */
        if (log_due())
            log_warn("backend unavailable", "op=%s err=%d", op, err);
        return req_error(req, ERR_UNAVAILABLE, NULL);
    case -ETIME:
        if (log_due())
            log_warn("purchase over its time budget", "op=%s", op);
        return req_error(req, ERR_UNAVAILABLE,
                         "the purchase took too long and nothing was "
                         "bought; try again");
    case -ECANCELED:
        /* It waited out its budget behind requests that wait for a
         * stalled backend: the client has been patient enough. */
        return req_error(req, ERR_UNAVAILABLE,
                         "the service could not get to this request in time; "
                         "nothing was done, retry");
    case -ESHUTDOWN:
        return req_error(req, ERR_UNAVAILABLE,
                         "the service is stopping; nothing was bought, retry");
    case -EAGAIN:
        /* Redis refused to run it for now (a Redis Cluster slot on the
         * move): nothing ran. */
        if (log_due())
            log_warn("backend refused for now", "op=%s", op);
        return req_error(req, ERR_UNAVAILABLE,
                         "the data is being moved; nothing was done, retry");
    case -EOVERFLOW:
        /* The ID worker's counter of the UTC day is used up (the sharded
         * layout keeps 26 bits of it): no order until the day turns. */
        log_error("order ids of the day used up", "op=%s", op);
        return req_error(req, ERR_UNAVAILABLE,
                         "no order ids are left for today (UTC); nothing was "
                         "bought");
    case -EINPROGRESS:
        log_error("commit outcome unknown", "op=%s", op);
        return req_error(req, ERR_UNAVAILABLE,
                         "the outcome is unknown; check your orders");
    default:
        log_error("backend failed", "op=%s err=%d", op, err);
        return req_error(req, ERR_INTERNAL, NULL);
    }
}

void req_header_add(struct request *req, const char *name, const char *value)
{
    if (req->n_headers >= REQ_HEADERS_MAX)
        abort(); /* programmer error: raise REQ_HEADERS_MAX */
    req->headers[req->n_headers].name = name;
    req->headers[req->n_headers++].value = value;
}

unsigned req_reply_raw(struct request *req, unsigned status, const char *type,
                       const void *data, size_t len)
{
    json_decref(req->reply);
    req->reply = NULL;
    req->raw = true;
    req->text_type = type;
    req->data = data;
    req->data_len = len;
    req->status = status;
    return status;
}

const char *req_header_value(const struct request *req, const char *name)
{
    if (!req->conn)
        return NULL;
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *req_query(struct request *req, const char *name)
{
    if (!req->conn)
        return NULL;
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

bool req_client_key(const struct request *req, char *out, size_t n)
{
    struct cidr a;
    char text[INET6_ADDRSTRLEN];

    if (!req_client_addr(req, &a))
        return false;
    if (!a.v6) {
        inet_ntop(AF_INET, a.addr, text, sizeof(text));
        snprintf(out, n, "%s", text);
        return true;
    }
    memset(&a.addr[8], 0, 8);
    inet_ntop(AF_INET6, a.addr, text, sizeof(text));
    snprintf(out, n, "%s/64", text);
    return true;
}

void req_actor(struct request *req, struct sale_actor *out)
{
    struct cidr a;

    out->admin_id = req->auth.user_id;
    out->addr[0] = '\0';
    out->idem = NULL;
    if (req->has_idem) {
        req->idem.admin_id = req->auth.user_id;
        out->idem = &req->idem;
    }
    if (req_client_addr(req, &a))
        inet_ntop(a.v6 ? AF_INET6 : AF_INET, a.addr, out->addr,
                  sizeof(out->addr));
}

bool req_peer_addr(const struct request *req, struct cidr *out)
{
    const union MHD_ConnectionInfo *ci;
    char text[INET6_ADDRSTRLEN];

    if (!req->conn)
        return false;
    ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return false;
    if (ci->client_addr->sa_family == AF_INET) {
        struct sockaddr_in sin;

        memcpy(&sin, ci->client_addr, sizeof(sin));
        inet_ntop(AF_INET, &sin.sin_addr, text, sizeof(text));
    } else if (ci->client_addr->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;

        memcpy(&sin6, ci->client_addr, sizeof(sin6));
        inet_ntop(AF_INET6, &sin6.sin6_addr, text, sizeof(text));
    } else {
        return false;
    }
    return cidr_addr_parse(text, out) == 0;
}

/* Every X-Forwarded-For header's value, in order: pointers into the
 * daemon's copy of the head, which the head's limit bounds
 * (SECKILL_HTTP_HEAD_MAX), so the whole chain is read, never a cut
 * copy of it. */
struct xff {
    const char **v;
    size_t n, cap;
};

static enum MHD_Result xff_add(void *cls, enum MHD_ValueKind kind,
                               const char *key, const char *value)
{
    struct xff *x = cls;

    (void)kind;
    if (!value || strcasecmp(key, "X-Forwarded-For") != 0)
        return MHD_YES;
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 4;
        x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
    }
    x->v[x->n++] = value;
    return MHD_YES;
}

/* The address of one hop, s[0..n) with blanks around it; false if it is
 * not one. */
static bool xff_hop(const char *s, size_t n, struct cidr *out)
{
    char text[INET6_ADDRSTRLEN + 8];

    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof(text))
        return false;
    memcpy(text, s, n);
    text[n] = '\0';
    return cidr_addr_parse(text, out) == 0;
}

bool req_client_addr(const struct request *req, struct cidr *out)
{
    const struct cidr_list *trusted = &req->cfg->trusted_proxies;
    struct xff x = {.n = 0};
    struct cidr hop;
    bool done = false;

    if (!req_peer_addr(req, out))
        return false;
    if (trusted->n == 0 || !cidr_list_has(trusted, out))
        return true;
    MHD_get_connection_values(req->conn, MHD_HEADER_KIND, xff_add, &x);
    /* From the proxy's end, the last header's last entry first: each hop
     * a trusted proxy added names the one before it; the first that is
     * not trusted is the client, and one that is not an address leaves
     * the last trusted hop. */
    for (size_t i = x.n; i-- > 0 && !done;) {
        const char *v = x.v[i];
        size_t end = strlen(v);

        for (;;) {
            const char *comma = memrchr(v, ',', end);
            size_t from = comma ? (size_t)(comma - v) + 1 : 0;

            if (!xff_hop(v + from, end - from, &hop)) {
                done = true;
                break;
            }
            *out = hop;
            if (!cidr_list_has(trusted, &hop)) {
                done = true;
                break;
            }
            if (!comma)
                break;
            end = (size_t)(comma - v);
        }
    }
    free(x.v);
    return true;
}

int req_auth(struct request *req)
{
    const char *h;

    if (req->auth_done)
        return req->auth_err;
    req->auth_done = true;
    h = req_header_value(req, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h)
        return req->auth_err = -ENOENT;
    if (strncasecmp(h, "Bearer ", 7) != 0)
        return req->auth_err = -EPROTONOSUPPORT;
    h += 7;
    while (*h == ' ')
        h++;
    req->auth_err = token_verify(req->cfg->secret, h, strlen(h),
                                 util_now_ms() / 1000, &req->auth);
    if (req->auth_err == 0) {
        switch (sale_session_check(req->sale, &req->auth)) {
        case SALE_SESSION_REVOKED:
            req->auth_err = -EKEYREVOKED;
            break;
        case SALE_SESSION_BANNED:
            req->auth_err = -EACCES;
            break;
        case SALE_SESSION_OK:
            break;
        }
    }
    return req->auth_err;
}

unsigned req_user_or_reply(struct request *req)
{
    int err = req_auth(req);

    if (err == -ENOENT)
        return req_error(req, ERR_UNAUTHORIZED,
                         "missing Authorization: Bearer token");
    if (err == -EPROTONOSUPPORT)
        return req_error(req, ERR_UNAUTHORIZED,
                         "the Authorization scheme must be Bearer");
    if (err == -ETIMEDOUT)
        return req_error(req, ERR_UNAUTHORIZED, "the token has expired");
    if (err == -EKEYREVOKED)
        return req_error(req, ERR_UNAUTHORIZED, "the token was logged out");
    if (err == -EACCES)
        return req_error(req, ERR_FORBIDDEN, "this account is banned");
    if (err)
        return req_error(req, ERR_UNAUTHORIZED, "the token is not valid");
    return 0;
}

unsigned req_buyer_or_reply(struct request *req)
{
    unsigned status = req_user_or_reply(req);

    if (status)
        return status;
    /* An admin's id is not a buyer's: admins have an id space of their
     * own. */
    if (req->auth.role != TOKEN_ROLE_USER)
        return req_error(req, ERR_FORBIDDEN,
                         "this needs a buyer's token, not an admin's");
    return 0;
}

unsigned req_admin_or_reply(struct request *req)
{
    unsigned status = req_user_or_reply(req);

    if (status)
        return status;
    if (req->auth.role != TOKEN_ROLE_ADMIN)
        return req_error(req, ERR_FORBIDDEN, NULL);
    /* An admin's change that carries an Idempotency-Key it cannot take:
     * said once the caller is known to be an admin. */
    if (req->idem_bad)
        return req_error(req, ERR_BAD_REQUEST,
                         "Idempotency-Key: one header, of 1 to 255 visible "
                         "ASCII characters");
    return 0;
}

static bool field_error(struct request *req, const char *name, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "%s: %s", name, what);
    req_error(req, ERR_BAD_REQUEST, msg);
    return false;
}

bool body_object_or_reply(struct request *req)
{
    json_error_t jerr;

    if (req->json)
        return true;
    if (!req->body || req->body_len == 0) {
        req_error(req, ERR_BAD_REQUEST, "a JSON object body is required");
        return false;
    }
    req->json =
        json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req->json) {
        char msg[200];
        /* jerr.text quotes the input, which need not be UTF-8 (and jansson
         * may cut it mid-character): json_pack would refuse such a message
         * and the 400 would go out as a 500. Keep its ASCII only. */
        for (char *p = jerr.text; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d: %s",
                 jerr.line, jerr.column, jerr.text);
        req_error(req, ERR_BAD_REQUEST, msg);
        return false;
    }
    if (!json_is_object(req->json)) {
        req_error(req, ERR_BAD_REQUEST, "the body must be a JSON object");
        return false;
    }
    return true;
}

bool body_has(struct request *req, const char *name)
{
    json_t *v = json_object_get(req->json, name);
    return v && !json_is_null(v);
}

static json_t *body_field(struct request *req, const char *name, bool required,
                          bool *ok)
{
    json_t *v = json_object_get(req->json, name);

    *ok = true;
    if (!v || json_is_null(v)) {
        if (required)
            *ok = field_error(req, name, "is required");
        return NULL;
    }
    return v;
}

bool body_int_or_reply(struct request *req, const char *name, bool required,
                       int64_t min, int64_t max, int64_t *out)
{
    bool ok;
    json_t *v = body_field(req, name, required, &ok);
    char what[96];

    if (!v)
        return ok;
    snprintf(what, sizeof(what), "must be an integer from %lld to %lld",
             (long long)min, (long long)max);
    if (!json_is_integer(v))
        return field_error(req, name, what);
    json_int_t n = json_integer_value(v);
    if (n < min || n > max)
        return field_error(req, name, what);
    *out = n;
    return true;
}

/* Count UTF-8 code points; jansson has already rejected invalid UTF-8. */
static size_t utf8_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            n++;
    return n;
}

bool body_str_or_reply(struct request *req, const char *name, bool required,
                       size_t max_chars, const char **out)
{
    bool ok;
    json_t *v = body_field(req, name, required, &ok);
    char what[96];

    if (!v)
        return ok;
    snprintf(what, sizeof(what), "must be a string of %s%zu characters",
             required ? "1 to " : "at most ", max_chars);
    if (!json_is_string(v))
        return field_error(req, name, what);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    size_t n = utf8_chars(s, len);
    /* An embedded NUL would be cut by C strings: refuse it. */
    if (strlen(s) != len || n > max_chars || (required && n == 0))
        return field_error(req, name, what);
    *out = s;
    return true;
}

/* The code point at s (valid UTF-8: jansson checked it) and its size. */
static uint32_t utf8_at(const unsigned char *s, size_t *size)
{
    if (s[0] < 0x80) {
        *size = 1;
        return s[0];
    }
    if (s[0] < 0xe0) {
        *size = 2;
        return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    }
    if (s[0] < 0xf0) {
        *size = 3;
        return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 |
               (s[2] & 0x3f);
    }
    *size = 4;
    return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
           (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
}

/* Whether c may stand in a text people read (lines: over several, with
 * line feeds and tabs). Joiners (U+200C, U+200D) stay: emoji sequences
 * and some scripts need them. */
static bool text_char_ok(uint32_t c, bool lines)
{
    if (c < 0x20)
        return lines && (c == '\n' || c == '\t');
    return !(c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == 0xad ||
             c == 0x034f || c == 0x061c || c == 0x115f || c == 0x1160 ||
             c == 0x180e || c == 0x200b || c == 0x200e || c == 0x200f ||
             (c >= 0x2028 && c <= 0x202e) || (c >= 0x2060 && c <= 0x206f) ||
             c == 0x3164 || (c >= 0xe000 && c <= 0xf8ff) ||
             (c >= 0xfdd0 && c <= 0xfdef) || c == 0xfeff || c == 0xffa0 ||
             (c >= 0xfff9 && c <= 0xfffb) || (c & 0xfffe) == 0xfffe ||
             (c >= 0x1d173 && c <= 0x1d17a) || c >= 0xf0000);
}

/* The blanks dropped around a text (lines: line feeds too). */
static bool text_space(uint32_t c, bool lines)
{
    return c == ' ' || c == '\t' || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x202f || c == 0x205f ||
           c == 0x2800 || c == 0x3000 || (lines && c == '\n');
}

bool body_text_or_reply(struct request *req, const char *name, bool required,
                        size_t max_chars, bool lines, const char **out)
{
    const unsigned char *s = NULL, *p, *start = NULL, *end = NULL;
    char what[96];
    size_t n = 0;

    const json_t *v = json_object_get(req->json, name);

    /* A string of any length here (the limit counts what is left once
     * trimmed); anything else is refused as body_str_or_reply() says. */
    if (!body_str_or_reply(req, name, required,
                           v && json_is_string(v) && json_string_length(v)
                               ? SIZE_MAX
                               : max_chars,
                           (const char **)&s))
        return false;
    if (!s)
        return true; /* absent: *out untouched */
    for (p = s; *p;) {
        size_t size;
        uint32_t c = utf8_at(p, &size);

        if (!text_char_ok(c, lines)) {
            snprintf(what, sizeof(what),
                     "holds a control or invisible character (U+%04X): send "
                     "%s",
                     (unsigned)c,
                     lines ? "text, line feeds and tabs"
                           : "one line of visible text");
            return field_error(req, name, what);
        }
        if (!text_space(c, lines)) {
            if (!start)
                start = p;
            end = p + size;
        }
        p += size;
    }
    if (!start) {
        if (required && *s)
            return field_error(req, name, "must not be only spaces");
        start = end = p;
    }
    for (p = start; p < end; p++)
        n += (*p & 0xc0) != 0x80;
    if (n > max_chars) {
        snprintf(what, sizeof(what), "must be a string of %s%zu characters",
                 required ? "1 to " : "at most ", max_chars);
        return field_error(req, name, what);
    }
    if (start != s || *end)
        json_string_setn(json_object_get(req->json, name), (const char *)start,
                         (size_t)(end - start));
    *out = json_string_value(json_object_get(req->json, name));
    return true;
}

bool body_time_or_reply(struct request *req, const char *name, bool required,
                        int64_t *out)
{
    bool ok;
    json_t *v = body_field(req, name, required, &ok);

    if (!v)
        return ok;
    if (!json_is_string(v) || util_time_parse(json_string_value(v), out))
        return field_error(req, name,
                           "must be an RFC 3339 time such as "
                           "\"2026-11-21T10:00:00Z\"");
    return true;
}

bool query_int_or_reply(struct request *req, const char *name, int64_t def,
                        int64_t min, int64_t max, int64_t *out)
{
    const char *s = req_query(req, name);
    char *end;
    char what[96];

    if (!s) {
        *out = def;
        return true;
    }
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max || s[0] == '+' ||
        s[0] == ' ') {
        snprintf(what, sizeof(what), "must be an integer from %lld to %lld",
                 (long long)min, (long long)max);
        return field_error(req, name, what);
    }
    *out = v;
    return true;
}

bool query_cursor_or_reply(struct request *req, size_t nkeys, int64_t *keys,
                           bool *given)
{
    const char *s = req_query(req, "cursor");

    *given = s != NULL;
    if (!s)
        return true;
    for (size_t i = 0; i < nkeys; i++) {
        char *end;
        long long v;

        errno = 0;
        if (*s < '0' || *s > '9')
            goto bad;
        v = strtoll(s, &end, 10);
        if (errno || end - s > 19 || v < 0)
            goto bad;
        keys[i] = v;
        s = end;
        if (i + 1 < nkeys) {
            if (*s != '.')
                goto bad;
            s++;
        }
    }
    if (*s == '\0')
        return true;
bad:
    return field_error(req, "cursor", "must be the nextCursor of a page");
}

json_t *json_cursor(bool more, size_t nkeys, const int64_t *keys)
{
    char buf[48];
    size_t len = 0;

    if (!more)
        return json_null();
    for (size_t i = 0; i < nkeys && i < 2; i++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%lld",
                                i ? "." : "", (long long)keys[i]);
    return json_string(buf);
}

json_t *json_id(int64_t id)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%lld", (long long)id);
    return json_string(buf);
}

json_t *json_time(int64_t epoch_s)
{
    char buf[UTIL_TIME_LEN];
    return json_string(util_time_format(epoch_s, buf));
}
