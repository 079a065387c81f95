/*
 * protocol.c - the checks of a request's framing that libmicrohttpd leaves
 * to the application, answered with the JSON error envelope like every
 * other client error.
 *
 * libmicrohttpd (0.9.75, Debian 12) parses the request line and the
 * headers itself. What it refuses never reaches the service: it sends a
 * fixed HTML page of its own (without a Content-Type header) and closes
 * the connection. It has no option or callback to replace those pages
 * (they are compiled into its connection.c), so these stay as they are:
 *
 *   - a request line without a space: closed without an answer;
 *   - a malformed HTTP version ("HTTP/x", "FOO"): 400;
 *   - HTTP/0.x, HTTP/2 and up: 505;
 *   - a header line without a colon: 400;
 *   - a Content-Length that is not a number: 400; one above 2^64-1: 413;
 *   - malformed chunked encoding: 400; a chunk size above 2^64-1: 413;
 *   - a request line or headers beyond its memory pool (conn_memory in
 *     struct req_limits, 8 KiB by default): 414 or 431.
 *
 * At its default strictness it accepts more than a server should, and
 * hands those requests on; req_protocol_or_reply() refuses them here (see
 * protocol.h for the list). docs/api.md ("Malformed requests") says the same
 * and tests/it/test_web.c checks both lists on the wire.
 *
 * It also reads a Content-Type by the same grammar (RFC 9110 5.6 and
 * 8.3.1), for the rule that a request body is JSON and says so
 * (req_media_type_is_json(), used by dispatch.c).
 */
#include "handlers/protocol.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <microhttpd.h>

#include "handlers/request.h"

/* What one pass over the request headers found. */
struct header_scan {
    unsigned hosts;
    unsigned lengths;   /* Content-Length headers */
    unsigned encodings; /* Transfer-Encoding headers */
    unsigned auths;     /* Authorization headers */
    const char *encoding;
    const char *bad_name;  /* the first name that is not a token */
    const char *bad_value; /* the name of the first value with a CTL */
    const char *last_key;  /* the header seen last, and its value's end */
    const char *last_end;
};

/* RFC 9110 5.6.2: a token is one or more tchar. */
static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool is_token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s))
            return false;
    return true;
}

/* Field values may hold tabs and obs-text, never other controls (NUL
 * included: see scan_header()). */
static bool has_ctl(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return true;
    return false;
}

/*
 * A NUL byte inside a header. libmicrohttpd 0.9.75 keeps each header
 * where it read it, in the connection's buffer, in the order sent; it
 * ends a value with a NUL at the line's end and gives its size as the C
 * string's, so "a\0b" reads as "a" (a Content-Length of "2\0 999" as 2,
 * a Transfer-Encoding of "chunked\0, identity" as chunked), which is not
 * what a proxy in front may have read. It turns a line's end into NULs
 * in place: CR LF into two, a bare LF or CR into one. So what lies
 * between the end of one value and the next header's name is one or two
 * NULs; anything else (another byte, or a third NUL) is the rest of a
 * value a NUL cut short. After the last value come its line's end and
 * the empty line's, two to four NULs, up to the head's end, which the
 * library gives as the head's size from the method's first byte
 * (head_end()). One NUL sent right before a bare LF is the one spelling
 * this cannot tell from CR LF: it only ends the value where a proxy would
 * see a NUL, which haproxy refuses. tests/it/test_web.c checks this on
 * the wire, so a library that keeps headers elsewhere fails the test
 * instead of letting a NUL by.
 */
static bool line_end_only(const char *p, const char *end, int max_nuls)
{
    int nuls = 0;

    for (; p < end; p++) {
        if (*p != '\0' && *p != '\r' && *p != '\n' && *p != ' ' && *p != '\t')
            return false;
        if (*p == '\0' && ++nuls > max_nuls)
            return false;
    }
    return true;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind,
                                   const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    struct header_scan *scan = cls;
    (void)kind;
    (void)key_size;

    if (!scan->bad_name && !is_token(key))
        scan->bad_name = key;
    if (!scan->bad_value && scan->last_end && key > scan->last_end &&
        key - scan->last_end < 8192 && !line_end_only(scan->last_end, key, 2))
        scan->bad_value = scan->last_key;
    if (!scan->bad_value && value && has_ctl(value))
        scan->bad_value = key;
    scan->last_key = key;
    scan->last_end = value ? value + value_size : NULL;
    if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        scan->hosts++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        scan->lengths++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0)
        scan->auths++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        scan->encodings++;
        scan->encoding = value ? value : "";
    }
    return MHD_YES;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* RFC 9110 5.6.4: qdtext, what a quoted string holds unescaped. */
static bool is_qdtext(unsigned char c)
{
    return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) ||
           (c >= 0x5d && c <= 0x7e) || c >= 0x80;
}

/*
 * Read one parameter value at *p, a token or a quoted string, and leave
 * *p after it. Whether it is "utf-8" (any case, escapes undone) goes to
 * *utf8. False when it does not parse.
 */
static bool param_value(const char **p, bool *utf8)
{
    static const char want[] = "utf-8";
    const char *s = *p;
    size_t n = 0;
    bool same = true;

    if (*s != '"') {
        for (; is_tchar((unsigned char)*s); s++, n++)
            same = same && n < sizeof(want) - 1 &&
                   tolower((unsigned char)*s) == want[n];
        *utf8 = same && n == sizeof(want) - 1;
        *p = s;
        return n > 0;
    }
    for (s++;; s++, n++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"')
            break;
        /* A quoted-pair: a backslash and one visible character (or a
         * blank, or obs-text) that stands for itself. */
        if (c == '\\') {
            c = (unsigned char)*++s;
            if (!is_qdtext(c) && c != '"' && c != '\\')
                return false;
        } else if (!is_qdtext(c)) {
            return false; /* NUL: the string never closes */
        }
        same = same && n < sizeof(want) - 1 && tolower(c) == want[n];
    }
    *utf8 = same && n == sizeof(want) - 1;
    *p = s + 1;
    return true;
}

bool req_media_type_is_json(const char *value)
{
    static const char json[] = "application/json";
    const char *p = value;

    if (!p)
        return false;
    while (is_ows(*p))
        p++;
    if (strncasecmp(p, json, sizeof(json) - 1) != 0)
        return false;
    p += sizeof(json) - 1;
    /* parameters = *( OWS ";" OWS [ parameter ] ): empty ones allowed. */
    for (;;) {
        const char *name;
        size_t name_len;
        bool utf8;

        while (is_ows(*p))
            p++;
        if (!*p)
            return true;
        if (*p++ != ';')
            return false; /* "application/jsonx", "application/json, x" */
        while (is_ows(*p))
            p++;
        if (!*p || *p == ';')
            continue;
        for (name = p; is_tchar((unsigned char)*p); p++)
            ;
        name_len = (size_t)(p - name);
        if (name_len == 0 || *p++ != '=' || !param_value(&p, &utf8))
            return false;
        /* Bodies are read as UTF-8: one in another charset would be
         * misread, so it is refused instead. */
        if (name_len == 7 && strncasecmp(name, "charset", 7) == 0 && !utf8)
            return false;
    }
}

struct req_limits req_limits_of(size_t head_max)
{
    struct req_limits l = {
        .head_max = head_max,
        .fields_max = (unsigned)(head_max / 128 + 16),
        .target_max = head_max / 2,
    };
    size_t need;

    l.query_args_max = l.fields_max / 2;
    need = l.head_max + (size_t)l.fields_max * HTTP_FIELD_COST +
           HTTP_REPLY_HEAD_MAX;
    l.conn_memory = (need + 1023) / 1024 * 1024;
    return l;
}

/* The bytes and the fields of a request's head (req_head_size_or_reply). */
struct head_size {
    size_t bytes;
    unsigned fields;
};

static enum MHD_Result count_field(void *cls, enum MHD_ValueKind kind,
                                   const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    struct head_size *size = cls;

    size->fields++;
    if (kind != MHD_HEADER_KIND)
        return MHD_YES; /* a query argument or cookie: in a line counted */
    /* "name: value" and its line end; the daemon copies a Cookie. */
    size->bytes += key_size + value_size + 4;
    if (value && strcasecmp(key, MHD_HTTP_HEADER_COOKIE) == 0)
        size->bytes += value_size;
    return MHD_YES;
}

unsigned req_head_size_or_reply(struct request *req, size_t line_len)
{
    struct head_size size = {line_len + 2, 0}; /* and the empty line */
    const struct req_limits *lim;
    char msg[120];

    if (!req->conn || !req->srv)
        return 0;
    lim = &req->srv->limits;
    MHD_get_connection_values_n(
        req->conn, MHD_HEADER_KIND | MHD_COOKIE_KIND | MHD_GET_ARGUMENT_KIND,
        count_field, &size);
    if (size.bytes <= lim->head_max && size.fields <= lim->fields_max)
        return 0;
    snprintf(msg, sizeof(msg),
             "the request line and headers take at most %zu bytes in %u "
             "fields (header lines, query arguments and cookies)",
             lim->head_max, lim->fields_max);
    return req_error(req, ERR_HEADERS_TOO_LARGE, msg);
}

/* Quote client text into a message: printable ASCII, at most 40 bytes. */
static void quote(char *out, size_t cap, const char *s)
{
    size_t n = 0;

    for (; *s && n + 1 < cap && n < 40; s++)
        out[n++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
    out[n] = '\0';
}

/* Where the request's head ends (after the empty line) in the daemon's
 * buffer, which holds it from the method on; NULL if unknown. */
static const char *head_end(const struct request *req)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        req->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);

    return req->head && ci && ci->header_size ? req->head + ci->header_size
                                              : NULL;
}

unsigned req_protocol_or_reply(struct request *req)
{
    struct header_scan scan = {0};
    char msg[160], name[48];
    const char *end;

    if (!req->conn)
        return 0;
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, scan_header, &scan);
    /* The last value: nothing but its line's end and the empty line up
     * to the head's end. */
    end = head_end(req);
    if (!scan.bad_value && scan.last_end &&
        (!end || end < scan.last_end || end - scan.last_end > 8192
             ? !line_end_only(scan.last_end, scan.last_end + 2, 2)
             : !line_end_only(scan.last_end, end, 4)))
        scan.bad_value = scan.last_key;
    if (scan.bad_name) {
        quote(name, sizeof(name), scan.bad_name);
        snprintf(msg, sizeof(msg),
                 "malformed header name \"%s\": names are tokens "
                 "(RFC 9110), without spaces",
                 name);
        return req_error(req, ERR_BAD_REQUEST, msg);
    }
    if (scan.bad_value) {
        quote(name, sizeof(name), scan.bad_value);
        snprintf(msg, sizeof(msg),
                 "header %s: the value holds control characters or is "
                 "folded over lines",
                 name);
        return req_error(req, ERR_BAD_REQUEST, msg);
    }
    /* HTTP/1.0 may leave Host out; every later 1.x must send one. */
    if (scan.hosts == 0 && req->version &&
        strcmp(req->version, MHD_HTTP_VERSION_1_0) != 0)
        return req_error(req, ERR_BAD_REQUEST,
                         "an HTTP/1.1 request needs a Host header");
    if (scan.hosts > 1)
        return req_error(req, ERR_BAD_REQUEST, "more than one Host header");
    /* Read as the first here, maybe as the last by a proxy in front. */
    if (scan.auths > 1)
        return req_error(req, ERR_BAD_REQUEST,
                         "more than one Authorization header");
    /* Two lengths, or a length beside chunked coding, are read one way
     * here and another way by a proxy in front: request smuggling. */
    if (scan.lengths > 1)
        return req_error(req, ERR_BAD_REQUEST,
                         "more than one Content-Length header");
    if (scan.encodings > 1)
        return req_error(req, ERR_BAD_REQUEST,
                         "more than one Transfer-Encoding header");
    if (scan.encodings && scan.lengths)
        return req_error(req, ERR_BAD_REQUEST,
                         "Content-Length and Transfer-Encoding together");
    if (scan.encodings && strcasecmp(scan.encoding, "chunked") != 0) {
        /* libmicrohttpd would read such a body until the client closes. */
        quote(name, sizeof(name), scan.encoding);
        snprintf(msg, sizeof(msg),
                 "Transfer-Encoding \"%s\" is not supported; send chunked or "
                 "a Content-Length",
                 name);
        return req_error(req, ERR_NOT_IMPLEMENTED, msg);
    }
    return 0;
}
