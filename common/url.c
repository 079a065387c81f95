/*
 * url.c - the service's URL parser (see url.h).
 */
#include "common/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int url_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (c == '%') {
            if (i + 2 >= n)
                return -EINVAL;
            int h = util_hex_digit(s[i + 1]), l = util_hex_digit(s[i + 2]);
            if (h < 0 || l < 0 || (h | l) == 0)
                return -EINVAL;
            c = (char)(h << 4 | l);
            i += 2;
        }
        if (o + 1 >= cap)
            return -EINVAL;
        out[o++] = c;
    }
    if (cap == 0)
        return -EINVAL;
    out[o] = '\0';
    return 0;
}

/* Copy [s, s+n) into dst (cap bytes). Returns -1 if it does not fit. */
static int copy_part(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* Parse a decimal port 1..65535 from [s, s+n). */
static int parse_port(const char *s, size_t n, unsigned *out)
{
    unsigned long v = 0;

    if (n == 0 || n > 5)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* One "host[:port]" of [s, s+n) into u->hosts[u->nhosts++]. */
static int parse_host(struct url *u, const char *s, size_t n, char *err,
                      size_t errlen)
{
    const char *host = s, *port = NULL;
    size_t hlen = n, plen = 0;

    if (u->nhosts == URL_HOSTS_MAX) {
        snprintf(err, errlen, "more than %d hosts", URL_HOSTS_MAX);
        return -EINVAL;
    }
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close) {
            snprintf(err, errlen, "unclosed '[' in host");
            return -EINVAL;
        }
        host = s + 1;
        hlen = (size_t)(close - host);
        if (close + 1 < s + n) {
            if (close[1] != ':') {
                snprintf(err, errlen, "junk after ']' in host");
                return -EINVAL;
            }
            port = close + 2;
            plen = (size_t)(s + n - port);
        }
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon) {
            hlen = (size_t)(colon - s);
            port = colon + 1;
            plen = (size_t)(s + n - port);
        }
    }
    if (hlen == 0 || copy_part(u->hosts[u->nhosts].host,
                               sizeof(u->hosts[0].host), host, hlen)) {
        snprintf(err, errlen, "empty or over-long host");
        return -EINVAL;
    }
    if (memchr(host, '%', hlen) || memchr(host, '@', hlen)) {
        snprintf(err, errlen, "bad character in host");
        return -EINVAL;
    }
    u->hosts[u->nhosts].port = 0;
    if (port && parse_port(port, plen, &u->hosts[u->nhosts].port)) {
        snprintf(err, errlen, "bad port \"%.*s\" (1..65535)", (int)plen, port);
        return -EINVAL;
    }
    u->nhosts++;
    return 0;
}

/* Split the raw path [s, s+n) into u->segs, each decoded (see url.h). */
static void split_path(struct url *u, const char *s, size_t n)
{
    const char *end = s + n;

    u->nsegs = 0;
    if (n == 0)
        return;
    for (;;) {
        const char *slash = memchr(s, '/', (size_t)(end - s));
        const char *seg_end = slash ? slash : end;

        if (u->nsegs == URL_SEGS_MAX) {
            u->nsegs = -1;
            return;
        }
        if (url_decode(s, (size_t)(seg_end - s), u->segs[u->nsegs],
                       URL_SEG_LEN)) {
            /* The escapes were checked with the whole path: too long. */
            u->nsegs = -1;
            return;
        }
        u->nsegs++;
        if (!slash)
            return;
        s = slash + 1;
    }
}

/* The query: "k=v&k=v" of [s, s+n). */
static int parse_query(struct url *u, const char *s, size_t n, char *err,
                       size_t errlen)
{
    const char *end = s + n;

    while (s < end) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *item_end = amp ? amp : end;
        const char *eq = memchr(s, '=', (size_t)(item_end - s));

        if (!eq || eq == s) {
            snprintf(err, errlen, "query item without a key and '='");
            return -EINVAL;
        }
        if (u->nquery == URL_QUERY_MAX) {
            snprintf(err, errlen, "more than %d query items", URL_QUERY_MAX);
            return -EINVAL;
        }
        if (url_decode(s, (size_t)(eq - s), u->query[u->nquery].key,
                       sizeof(u->query[0].key)) ||
            url_decode(eq + 1, (size_t)(item_end - eq - 1),
                       u->query[u->nquery].value, sizeof(u->query[0].value))) {
            snprintf(err, errlen, "bad or over-long query item \"%.*s\"",
                     (int)(eq - s), s);
            return -EINVAL;
        }
        for (int i = 0; i < u->nquery; i++)
            if (strcmp(u->query[i].key, u->query[u->nquery].key) == 0) {
                snprintf(err, errlen, "query key \"%s\" given twice",
                         u->query[i].key);
                return -EINVAL;
            }
        u->nquery++;
        s = item_end + (amp ? 1 : 0);
    }
    return 0;
}

int url_parse(const char *s, struct url *u, char *err, size_t errlen)
{
    const char *sep = strstr(s, "://"), *p, *end, *at = NULL;

    memset(u, 0, sizeof(*u));
    if (!sep || sep == s ||
        copy_part(u->scheme, sizeof(u->scheme), s, (size_t)(sep - s))) {
        snprintf(err, errlen, "expected scheme://...");
        return -EINVAL;
    }
    p = sep + 3;
    end = p + strcspn(p, "/?");
    for (const char *q = p; q < end; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(at - p);

        u->has_user = true;
        if (url_decode(p, ulen, u->user, sizeof(u->user))) {
            snprintf(err, errlen, "bad percent-escape or over-long user");
            return -EINVAL;
        }
        if (colon) {
            if (url_decode(colon + 1, (size_t)(at - colon - 1), u->pass,
                           sizeof(u->pass))) {
                snprintf(err, errlen,
                         "bad percent-escape or over-long password");
                return -EINVAL;
            }
            u->has_pass = true;
        }
        p = at + 1;
    }
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *hend = comma ? comma : end;
        int rc = parse_host(u, p, (size_t)(hend - p), err, errlen);

        if (rc)
            return rc;
        p = hend + (comma ? 1 : 0);
        if (comma && p == end) {
            snprintf(err, errlen, "empty host after ','");
            return -EINVAL;
        }
    }
    if (u->nhosts == 0) {
        snprintf(err, errlen, "no host");
        return -EINVAL;
    }
    if (*p == '/') {
        size_t plen;

        p++;
        plen = strcspn(p, "?");
        u->has_path = true;
        if (url_decode(p, plen, u->path, sizeof(u->path))) {
            snprintf(err, errlen, "bad percent-escape or over-long path");
            return -EINVAL;
        }
        split_path(u, p, plen);
        p += plen;
    }
    if (*p == '?')
        return parse_query(u, p + 1, strlen(p + 1), err, errlen);
    return 0;
}

const char *url_query_get(const struct url *u, const char *key)
{
    for (int i = 0; i < u->nquery; i++)
        if (strcmp(u->query[i].key, key) == 0)
            return u->query[i].value;
    return NULL;
}
