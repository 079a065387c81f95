/*
 * util.c - allocation wrappers that abort on out-of-memory, key=value
 * logging, clocks, id and RFC 3339 time parsing.
 */
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* 9999-12-31T23:59:59Z, the last second util_time_parse accepts. */
#define TIME_MAX 253402300799LL

static enum log_level min_level = LOG_INFO;

static void oom(size_t n)
{
    log_error("out of memory", "bytes=%zu", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        oom(count * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        oom(0);
    return s;
}

void log_set_level(enum log_level level)
{
    min_level = level;
}

void log_write(enum log_level level, const char *msg, const char *fields, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    char line[2048];
    char ts[UTIL_TIME_LEN];
    int n;

    if (level < min_level)
        return;
    n = snprintf(line, sizeof(line), "ts=%s level=%s msg=\"%s\"",
                 util_time_format(util_now_ms() / 1000, ts), names[level], msg);
    if (n < 0)
        return;
    if (fields && (size_t)n < sizeof(line) - 1) {
        va_list ap;
        line[n++] = ' ';
        va_start(ap, fields);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fields, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write(2) per line keeps lines from different threads whole. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

int64_t util_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t util_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int util_parse_id(const char *s, size_t len, int64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 19)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    /* 19 digits fit in uint64_t; reject what does not fit in int64_t. */
    if (v == 0 || v > (uint64_t)INT64_MAX)
        return -EINVAL;
    *out = (int64_t)v;
    return 0;
}

char *util_time_format(int64_t epoch_s, char *buf)
{
    struct tm tm;
    time_t t = (time_t)epoch_s;

    if (!gmtime_r(&t, &tm) ||
        strftime(buf, UTIL_TIME_LEN, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, UTIL_TIME_LEN, "1970-01-01T00:00:00Z");
    return buf;
}

/* Read exactly n digits at *p, advancing it. */
static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

static int days_in_month(int y, int m)
{
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 ? 28 + leap : d[m - 1];
}

int util_time_parse(const char *s, int64_t *out)
{
    int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
    int64_t t;
    const char *p = s;
    struct tm tm = {0};

    if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' ||
        digits(&p, 2, &d) || (*p != 'T' && *p != 't'))
        return -EINVAL;
    p++;
    if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) || *p++ != ':' ||
        digits(&p, 2, &sec))
        return -EINVAL;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '+' ? 1 : -1;
        if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) ||
            oh > 23 || om > 59)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    if (*p != '\0')
        return -EINVAL;
    if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 ||
        d > days_in_month(y, mo) || h > 23 || mi > 59 || sec > 60)
        return -EINVAL;
    if (sec == 60) /* a leap second reads as the next one */
        sec = 59;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    t = (int64_t)timegm(&tm) - sign * (oh * 3600 + om * 60);
    /* An offset can carry a time past either end of the years checked
     * above; MariaDB would store year 10000 as a zero date. */
    if (t < 0 || t > TIME_MAX)
        return -EINVAL;
    *out = t;
    return 0;
}

int util_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int util_hex_decode(const char *hex, unsigned char *out, size_t outlen)
{
    if (strlen(hex) != outlen * 2)
        return -EINVAL;
    for (size_t i = 0; i < outlen; i++) {
        int hi = util_hex_digit(hex[2 * i]),
            lo = util_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

bool util_idle_conn_dead(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    return fd < 0 || poll(&pfd, 1, 0) != 0;
}
