/*
 * url.h - the one parser for every URL the service takes: the MySQL and
 * Redis URLs, the lock backends (redis://, redlock:// host lists, mysql://,
 * zookeeper://). One grammar, one way of decoding:
 *
 *   scheme://[user[:pass]@]host[:port][,host[:port]...][/path][?k=v[&k=v]]
 *
 * The user, the password, the path and query values are percent-decoded
 * (RFC 3986: "%40" is '@'), so a password may hold any byte but NUL:
 * "redis://:p%40ss@host" logs in with "p@ss". A '%' not followed by two
 * hex digits, or "%00", is an error rather than a guess. Hosts may be
 * bracketed IPv6 literals ("[::1]:6379"); they are not decoded. The user
 * info ends at the last '@' before the first '/' or '?'.
 *
 * The path is also kept split at its '/' into segments, each decoded on
 * its own, so that "redis-sentinel://h/my%2Fname/1" names the master
 * "my/name" and database 1.
 *
 * What a URL must contain (a database, a port, no query) is the caller's
 * business; the parser only checks the grammar.
 */
#ifndef SECKILL_URL_H
#define SECKILL_URL_H

#include <stdbool.h>
#include <stddef.h>

#define URL_HOSTS_MAX 9
#define URL_QUERY_MAX 8
#define URL_SEGS_MAX 4
#define URL_SEG_LEN 128

/* A parsed URL. Strings are NUL-terminated, decoded copies. */
struct url {
    char scheme[16];
    char user[128]; /* "" when absent */
    char pass[128]; /* "" when absent */
    bool has_user;  /* "user@" or "user:pass@" or ":pass@" */
    bool has_pass;  /* a ':' in the user info, even with "" after it */
    struct {
        char host[256];
        unsigned port; /* 0 when absent: the caller's default */
    } hosts[URL_HOSTS_MAX];
    int nhosts;
    char path[256]; /* after the first '/', without it; "" when absent */
    bool has_path;
    /* The path's segments: "a/b" is {"a", "b"}, "" none, "a/" {"a", ""};
     * nsegs is -1 when the path has more than URL_SEGS_MAX segments or
     * one of URL_SEG_LEN bytes or more (path still holds it whole). */
    char segs[URL_SEGS_MAX][URL_SEG_LEN];
    int nsegs;
    struct {
        char key[32];
        char value[256];
    } query[URL_QUERY_MAX];
    int nquery;
};

/*
 * Parse s into u. Returns 0, or -EINVAL with a one-line reason in err
 * (errlen bytes) that never repeats the password.
 */
int url_parse(const char *s, struct url *u, char *err, size_t errlen);

/* The decoded value of query key, or NULL when the URL has none. */
const char *url_query_get(const struct url *u, const char *key);

/*
 * Percent-decode [s, s+n) into out (cap bytes, NUL-terminated). Returns
 * 0, or -EINVAL for a bad escape, "%00", or a result that does not fit.
 */
int url_decode(const char *s, size_t n, char *out, size_t cap);

#endif
