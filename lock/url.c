/*
 * url.c - the lock URL's own settings. Every lock URL is parsed by the
 * service's one URL parser (common/url.h: percent-escapes decoded the same
 * way as in the MySQL and Redis URLs); the query keys a lock URL may carry
 * are checked here.
 */
#include "lock/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A decimal in [1, 3600000] (milliseconds). */
static int parse_ms(const char *s, uint32_t *out)
{
    unsigned long v = 0;
    size_t n = strlen(s);

    if (n == 0 || n > 7 || strspn(s, "0123456789") != n)
        return -1;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (unsigned long)(s[i] - '0');
    if (v < 1 || v > 3600000)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int lock__url_settings(const struct url *u, uint32_t *timeout_ms,
                       uint32_t *session_ms, char *err, size_t errlen)
{
    *timeout_ms = 0;
    *session_ms = 0;
    for (int i = 0; i < u->nquery; i++) {
        const char *k = u->query[i].key;
        uint32_t *dst = strcmp(k, "timeout_ms") == 0   ? timeout_ms
                        : strcmp(k, "session_ms") == 0 ? session_ms
                                                       : NULL;

        if (!dst) {
            snprintf(err, errlen, "unknown query key \"%s\"", k);
            return -EINVAL;
        }
        if (parse_ms(u->query[i].value, dst)) {
            snprintf(err, errlen, "bad value for %s (1..3600000 ms)", k);
            return -EINVAL;
        }
    }
    return 0;
}
