/*
 * redis_keys.c - the prefix of every Redis name the service uses, and
 * names that share another key's hash slot (redis_keys.h).
 */
#include "common/redis_keys.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/redis_slot.h"

/* Written once at start-up, before the threads that read it exist. */
static char prefix[REDIS_PREFIX_MAX + 1];

int redis_prefix_check(const char *p, char *why, size_t whylen)
{
    size_t n = strlen(p);

    if (n > REDIS_PREFIX_MAX) {
        snprintf(why, whylen, "longer than %d bytes", REDIS_PREFIX_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        char c = p[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || strchr("_:.-", c))) {
            snprintf(why, whylen,
                     "'%c' is not a letter, digit, '_', ':', '.' or '-'", c);
            return -EINVAL;
        }
    }
    return 0;
}

int redis_prefix_set(const char *p)
{
    char why[80];

    if (redis_prefix_check(p, why, sizeof(why)))
        return -EINVAL;
    memcpy(prefix, p, strlen(p) + 1);
    return 0;
}

const char *redis_prefix(void)
{
    return prefix;
}

int redis_key(char *buf, size_t size, const char *fmt, ...)
{
    size_t p = strlen(prefix);
    va_list ap;
    int n;

    if (p >= size) {
        if (size)
            buf[0] = '\0';
        return -ENAMETOOLONG;
    }
    memcpy(buf, prefix, p);
    va_start(ap, fmt);
    n = vsnprintf(buf + p, size - p, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - p)
        return -ENAMETOOLONG;
    return (int)p + n;
}

int redis_key_tagged(char *buf, size_t size, const char *pre, const char *what,
                     const char *key, size_t key_len, const char *suffix)
{
    size_t off, n = redis_key_hashed(key, key_len, &off);
    int len;

    if (memchr(key + off, '}', n))
        return -EINVAL;
    len = snprintf(buf, size, "%s%s{%.*s}%s", pre, what, (int)n, key + off,
                   suffix ? suffix : "");
    if (len < 0 || (size_t)len >= size)
        return -ENAMETOOLONG;
    return len;
}
