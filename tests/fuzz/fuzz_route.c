/*
 * fuzz_route.c - libFuzzer harness: whole HTTP requests through routing,
 * authentication, query and body validation and the endpoint handlers.
 *
 * Input: a request in HTTP/1.1 shape, as libmicrohttpd would have parsed
 * it:
 *
 *     METHOD SP TARGET [SP VERSION [anything]] LF
 *     Name: value LF          (any number, up to FUZZ_KV_MAX)
 *     LF
 *     body                    (any bytes, up to the end)
 *
 * TARGET is the path, then optionally '?' and a query string of k=v pairs
 * separated by '&' ('+' and %XX decoded as libmicrohttpd does). VERSION
 * is passed on when it is HTTP/1.0 to HTTP/1.9 (the versions libmicrohttpd
 * hands over), else HTTP/1.1 is. Two
 * headers steer the harness instead of reaching the service:
 * "X-Fuzz-Backend: <script>" chooses each backend call's outcome (see
 * fuzz_backend_script in fuzz.h) and "X-Fuzz-Chunk: N" delivers the body
 * in pieces of N bytes. In header values "@user", "@admin", "@expired" and
 * "@otherkey" become signed tokens. A CR before LF is dropped.
 *
 * Checked: every invariant of fuzz_http_run (driver.c) and of the fake
 * backend, no sanitizer report or leak, and util_parse_id against a
 * reference on every path segment.
 *
 *     make fuzz                       # all harnesses, FUZZ_SECONDS each
 *     build/fuzz/fuzz_route -max_len=70000 -dict=tests/fuzz/route.dict \
 *         build/fuzz/run/route/corpus   # by hand
 *
 * Seeds: tests/fuzz/corpus/route/, one request per file.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_driver_init();
    return 0;
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decode '+' and %XX in place; "%00" ends the string, as in a C API. */
static void unescape(char *s)
{
    char *w = s;

    for (char *p = s; *p; p++) {
        int hi, lo;
        if (*p == '+') {
            *w++ = ' ';
        } else if (*p == '%' && (hi = hex_value((unsigned char)p[1])) >= 0 &&
                   (lo = hex_value((unsigned char)p[2])) >= 0) {
            *w++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
}

static void parse_query(char *q, struct fuzz_request *rq)
{
    char *save = NULL;

    for (char *kv = strtok_r(q, "&", &save); kv && rq->nargs < FUZZ_KV_MAX;
         kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        if (eq) {
            *eq = '\0';
            unescape(eq + 1);
        }
        unescape(kv);
        rq->args[rq->nargs].key = kv;
        rq->args[rq->nargs++].value = eq ? eq + 1 : NULL;
    }
}

/* Reference for util_parse_id: 1 to 19 digits, 1 <= value <= INT64_MAX. */
static void check_parse_id(const char *s, size_t len)
{
    int64_t id = 0;
    int got = util_parse_id(s, len, &id);
    bool digits = len >= 1 && len <= 19;
    unsigned long long v = 0;

    for (size_t i = 0; digits && i < len; i++) {
        digits = s[i] >= '0' && s[i] <= '9';
        v = v * 10 + (unsigned long long)(s[i] - '0');
    }
    if (digits && v >= 1 && v <= INT64_MAX)
        FUZZ_CHECK(got == 0 && (unsigned long long)id == v,
                   "util_parse_id(\"%.*s\") = %d, %lld", (int)len, s, got,
                   (long long)id);
    else
        FUZZ_CHECK(got == -EINVAL, "util_parse_id(\"%.*s\") accepted %lld",
                   (int)len, s, (long long)id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_request rq = {0};
    struct fuzz_reply rep;
    const uint8_t *sep = NULL;
    size_t head_len = size;
    char *head, *line, *save = NULL, *target, *body = NULL;
    char *method = NULL, *path = NULL;
    const char *script = "";
    size_t script_len = 0;

    /* The head ends at the first empty line; the rest is the body. */
    for (size_t i = 0; i + 1 < size; i++) {
        if (data[i] == '\n' &&
            (data[i + 1] == '\n' ||
             (data[i + 1] == '\r' && i + 2 < size && data[i + 2] == '\n'))) {
            sep = data + i;
            break;
        }
    }
    if (sep) {
        const uint8_t *b = sep + (sep[1] == '\r' ? 3 : 2);
        head_len = (size_t)(sep - data);
        rq.body_len = size - (size_t)(b - data);
        /* Exactly the body's bytes, so ASan sees any over-read. */
        body = xmalloc(rq.body_len ? rq.body_len : 1);
        memcpy(body, b, rq.body_len);
        rq.body = body;
    }
    head = xstrndup((const char *)data, head_len);

    /* The request line. */
    line = strtok_r(head, "\n", &save);
    if (!line)
        goto out;
    line[strcspn(line, "\r")] = '\0';
    char *sp = strchr(line, ' ');
    if (!sp)
        goto out;
    *sp = '\0';
    target = sp + 1;
    char *version = target + strcspn(target, " ");
    if (*version)
        *version++ = '\0';
    version[strcspn(version, " ")] = '\0';
    if (strlen(version) == 8 && strncmp(version, "HTTP/1.", 7) == 0 &&
        version[7] >= '0' && version[7] <= '9')
        rq.version = version;
    char *q = strchr(target, '?');
    if (q)
        *q++ = '\0';
    /* Own copies of exactly their size, like libmicrohttpd's. */
    method = xstrdup(line);
    path = xstrdup(target);
    rq.method = method;
    rq.path = path;
    if (q)
        parse_query(q, &rq);

    /* Headers, and the harness's own two. */
    while ((line = strtok_r(NULL, "\n", &save))) {
        line[strcspn(line, "\r")] = '\0';
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *value = colon + 1;
        value += strspn(value, " \t");
        if (strcasecmp(line, "X-Fuzz-Backend") == 0) {
            script = value;
            script_len = strlen(value);
        } else if (strcasecmp(line, "X-Fuzz-Chunk") == 0) {
            rq.chunk = strtoul(value, NULL, 10);
        } else if (rq.nheaders < FUZZ_KV_MAX) {
            rq.headers[rq.nheaders].key = line;
            rq.headers[rq.nheaders++].value = value;
        }
    }

    /* libmicrohttpd hands over what one read(2) brought, kilobytes at a
     * time; at most 1024 pieces keeps one input fast. */
    if (rq.chunk && rq.body_len / rq.chunk > 1024)
        rq.chunk = rq.body_len / 1024 + 1;

    for (char *seg = path; *seg == '/'; seg += strcspn(seg + 1, "/") + 1)
        check_parse_id(seg + 1, strcspn(seg + 1, "/"));

    fuzz_backend_script(script, script_len);
    fuzz_http_run(&rq, &rep);
    fuzz_reply_clear(&rep);
out:
    free(method);
    free(path);
    free(head);
    free(body);
    return 0;
}
