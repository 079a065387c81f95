/*
 * web.c - GET of the pages and their files: the buyer's page at /, the
 * admin's at /admin, their scripts and styles under /static/, and the API
 * description at /openapi.json, all compiled into the binary from web/
 * and docs/ (scripts/embed-web.sh), so a running seckilld needs no files.
 *
 * Every file goes out with its entity tag (a hash of its content) and
 * Cache-Control: no-cache: a browser keeps its copy and asks each time
 * whether it is still current, and a matching If-None-Match is a 304
 * without a body. The file names carry no hash, so this is what keeps a
 * page and its scripts from different builds apart. The pages run only
 * their own scripts and styles (Content-Security-Policy: no inline code,
 * nothing from another origin, no framing).
 */
#include <string.h>
#include <microhttpd.h>

#include "handlers/endpoints.h"
#include "handlers/web.h"

#define CSP                                                                    \
    "default-src 'self'; object-src 'none'; base-uri 'none'; "                 \
    "form-action 'self'; frame-ancestors 'none'"

static const struct web_file *file_find(const char *path)
{
    size_t lo = 0, hi = web_file_count;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(path, web_files[mid].path);
        if (c == 0)
            return &web_files[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/*
 * True when an If-None-Match value lists etag: "*", or the tag in a
 * comma-separated list, compared weakly (a W/ prefix is ignored) as RFC
 * 9110 13.1.2 asks.
 */
static bool etag_listed(const char *value, const char *etag)
{
    size_t elen = strlen(etag);
    const char *p = value;

    for (;;) {
        p += strspn(p, " \t,");
        if (!*p)
            return false;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (*p != '"')
            return false; /* malformed: no match, send the file */
        const char *end = strchr(p + 1, '"');
        if (!end)
            return false;
        if ((size_t)(end + 1 - p) == elen && memcmp(p, etag, elen) == 0)
            return true;
        p = end + 1;
    }
}

unsigned web_get(struct request *req)
{
    const struct web_file *f = file_find(req->path);
    const char *inm;

    if (!f)
        return req_error(req, ERR_NOT_FOUND, "no such file");
    req_header_add(req, MHD_HTTP_HEADER_ETAG, f->etag);
    req_header_add(req, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    inm = req_header_value(req, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm && etag_listed(inm, f->etag))
        return req_reply_raw(req, 304, NULL, NULL, 0);
    req_header_add(req, MHD_HTTP_HEADER_CONTENT_SECURITY_POLICY, CSP);
    req_header_add(req, "Referrer-Policy", "no-referrer");
    return req_reply_raw(req, 200, f->type, f->data, f->len);
}
