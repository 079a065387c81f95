/*
 * url.c - parse a lock URL:
 *
 *   scheme://[user[:pass]@]host[:port][,host[:port]...][/path][?k=v[&k=v]]
 *
 * Hosts may be bracketed IPv6 literals ("[::1]:6379"). The only query keys
 * are timeout_ms, session_ms (1..3600000 ms) and replicas (0..64).
 * Percent-escapes are not decoded: a
 * password with '@', ',' or '/' in it is not supported.
 */
#include "lock/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy [s, s+n) into dst (cap bytes). Returns -1 if it does not fit. */
static int copy_part(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* Parse a decimal in [min, max] from [s, s+n). */
static int parse_uint(const char *s, size_t n, unsigned long min,
                      unsigned long max, unsigned long *out)
{
    char buf[16];
    char *end;

    if (n == 0 || n >= sizeof(buf) || s[0] < '0' || s[0] > '9')
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    unsigned long v = strtoul(buf, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* One "host[:port]" of [s, s+n) into u->hosts[u->nhosts++]. */
static int parse_host(struct lock_url *u, const char *s, size_t n, char *err,
                      size_t errlen)
{
    const char *host = s, *port = NULL;
    size_t hlen = n, plen = 0;

    if (u->nhosts == LOCK_URL_HOSTS_MAX) {
        snprintf(err, errlen, "more than %d hosts", LOCK_URL_HOSTS_MAX);
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
    unsigned long p = 0;
    if (port && parse_uint(port, plen, 1, 65535, &p)) {
        snprintf(err, errlen, "bad port \"%.*s\"", (int)plen, port);
        return -EINVAL;
    }
    u->hosts[u->nhosts].port = (unsigned)p;
    u->nhosts++;
    return 0;
}

/* The query: "k=v&k=v" of [s, s+n). */
static int parse_query(struct lock_url *u, const char *s, size_t n, char *err,
                       size_t errlen)
{
    const char *end = s + n;

    while (s < end) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *item_end = amp ? amp : end;
        const char *eq = memchr(s, '=', (size_t)(item_end - s));
        unsigned long v;

        if (!eq) {
            snprintf(err, errlen, "query item without '='");
            return -EINVAL;
        }
        size_t klen = (size_t)(eq - s);
        const char *val = eq + 1;
        size_t vlen = (size_t)(item_end - eq - 1);
        uint32_t *dst;
        unsigned long min = 1, max = 3600000;
        if (klen == 10 && memcmp(s, "timeout_ms", 10) == 0) {
            dst = &u->timeout_ms;
        } else if (klen == 10 && memcmp(s, "session_ms", 10) == 0) {
            dst = &u->session_ms;
        } else if (klen == 8 && memcmp(s, "replicas", 8) == 0) {
            dst = &u->replicas;
            min = 0;
            max = 64;
        } else {
            snprintf(err, errlen, "unknown query key \"%.*s\"", (int)klen, s);
            return -EINVAL;
        }
        if (parse_uint(val, vlen, min, max, &v)) {
            snprintf(err, errlen, "bad value for %.*s (%lu..%lu)", (int)klen, s,
                     min, max);
            return -EINVAL;
        }
        *dst = (uint32_t)v;
        s = item_end + (amp ? 1 : 0);
    }
    return 0;
}

int lock__url_parse(const char *url, struct lock_url *u, char *err,
                    size_t errlen)
{
    memset(u, 0, sizeof(*u));
    const char *sep = strstr(url, "://");
    if (!sep ||
        copy_part(u->scheme, sizeof(u->scheme), url, (size_t)(sep - url)) ||
        sep == url) {
        snprintf(err, errlen, "expected scheme://...");
        return -EINVAL;
    }
    const char *p = sep + 3;
    const char *end = p + strcspn(p, "/?");
    const char *at = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == '@')
            at = q;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(at - p);
        if (copy_part(u->user, sizeof(u->user), p, ulen)) {
            snprintf(err, errlen, "over-long user");
            return -EINVAL;
        }
        if (colon) {
            if (copy_part(u->pass, sizeof(u->pass), colon + 1,
                          (size_t)(at - colon - 1))) {
                snprintf(err, errlen, "over-long password");
                return -EINVAL;
            }
            u->has_pass = 1;
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
        p++;
        size_t plen = strcspn(p, "?");
        if (copy_part(u->path, sizeof(u->path), p, plen)) {
            snprintf(err, errlen, "over-long path");
            return -EINVAL;
        }
        p += plen;
    }
    if (*p == '?')
        return parse_query(u, p + 1, strlen(p + 1), err, errlen);
    return 0;
}
