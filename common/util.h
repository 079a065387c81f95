/*
 * util.h - allocation wrappers, logging and small helpers shared by every
 * module. Out-of-memory aborts here, so nothing else checks for it.
 */
#ifndef SECKILL_UTIL_H
#define SECKILL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Allocate or abort the process with a log line: never return NULL. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a new string that the caller frees with free(3). */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

/*
 * Write one log line to stderr: "ts=... level=... msg=\"<msg>\" <fields>".
 * msg is a short lower-case text leading with what failed; fields is a
 * printf format of key=value pairs (may be NULL). Thread-safe: one write(2)
 * per line. Never log secrets or tokens.
 */
void log_write(enum log_level level, const char *msg, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));
/* Lines below this level are dropped (default LOG_INFO). */
void log_set_level(enum log_level level);

#define log_debug(msg, ...) log_write(LOG_DEBUG, msg, __VA_ARGS__)
#define log_info(msg, ...) log_write(LOG_INFO, msg, __VA_ARGS__)
#define log_warn(msg, ...) log_write(LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) log_write(LOG_ERROR, msg, __VA_ARGS__)

/* Wall-clock time in milliseconds since the Unix epoch. */
int64_t util_now_ms(void);
/* Monotonic time in milliseconds, for durations. */
int64_t util_mono_ms(void);

/*
 * Whether the idle request/response connection on fd is dead: it has
 * nothing to read, so a readable socket means the server closed it (or
 * sent a farewell error), and a request written there now would meet the
 * close, its outcome unknown, where a new connection would have served
 * it. Never waits. True for fd < 0.
 */
bool util_idle_conn_dead(int fd);

/*
 * Parse a decimal id: digits only, no sign, no spaces, 1 <= value <=
 * INT64_MAX. Returns 0 and stores the value, or -EINVAL.
 */
int util_parse_id(const char *s, size_t len, int64_t *out);

/*
 * Format seconds since the epoch as RFC 3339 UTC ("2026-11-21T05:35:00Z")
 * into buf, which holds at least UTIL_TIME_LEN bytes. Returns buf.
 */
#define UTIL_TIME_LEN 32
char *util_time_format(int64_t epoch_s, char *buf);
/*
 * Parse an RFC 3339 date-time ("2026-11-21T05:35:00Z", optional fraction,
 * 'Z' or a +hh:mm / -hh:mm offset) into epoch seconds (fraction dropped).
 * Returns 0, or -EINVAL for anything else, including impossible dates and
 * times outside 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59Z (what
 * util_time_format writes back and a DATETIME column holds).
 */
int util_time_parse(const char *s, int64_t *out);

/* Big-endian integers in byte buffers (the wire formats of tokens and
 * tickets). */
static inline void util_put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

static inline uint64_t util_get_be64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static inline void util_put_be32(unsigned char *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

static inline uint32_t util_get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* The value of a hex digit (either case), or -1. */
int util_hex_digit(char c);

/* Decode hex into out (exactly outlen bytes). Returns 0 or -EINVAL. */
int util_hex_decode(const char *hex, unsigned char *out, size_t outlen);

#endif
