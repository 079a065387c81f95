/*
 * fuzz.h - what the libFuzzer harnesses share: a driver that runs one HTTP
 * request through the service's own request code (handlers/dispatch.c's
 * access handler, with a fake libmicrohttpd connection) and the real
 * sale layer, a fake backend in place of what lies below it (store/, the
 * engine and the task pool, async/, lock/, idgen/) whose outcomes a
 * script chooses, and the checks every reply must pass.
 *
 * Only for the fuzz builds (make fuzz): nothing here is linked into
 * seckilld or the tests.
 */
#ifndef SECKILL_FUZZ_H
#define SECKILL_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "common/token.h"

/*
 * Abort with a message when cond is false: libFuzzer reports the abort as
 * a crash and saves the input. For broken invariants, never for input.
 */
#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond))                                                           \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                 \
    } while (0)

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt,
               ...) __attribute__((noreturn, format(printf, 4, 5)));

/* The key the driver's http_config holds, and the "now" of tokens. */
extern const unsigned char fuzz_key[TOKEN_KEY_LEN];

/* The origins the driver's configuration lets call the API (CORS). */
#define FUZZ_CORS_ORIGIN_A "https://a.example"
#define FUZZ_CORS_ORIGIN_B "http://b.example:8080"
#define FUZZ_CORS_ORIGINS FUZZ_CORS_ORIGIN_A ", " FUZZ_CORS_ORIGIN_B

/* Token users the driver signs for "@user" / "@admin" markers. */
#define FUZZ_USER_ID 42
#define FUZZ_ADMIN_ID 1

/* One name/value pair: a request header or a query-string argument. */
struct fuzz_kv {
    const char *key;
    const char *value; /* NULL for a query argument without '=' */
};

#define FUZZ_KV_MAX 32

/*
 * A request as libmicrohttpd hands it to the access handler: the method,
 * the path without the query string, the parsed query arguments and
 * headers, and the body delivered in pieces of chunk bytes (0: all at
 * once). In header values, "@user", "@admin", "@expired" and "@otherkey"
 * are replaced by a token signed for that case (see fuzz_http_run).
 */
struct fuzz_request {
    const char *method;
    const char *path;
    const char *version; /* "HTTP/1.1" when NULL */
    struct fuzz_kv args[FUZZ_KV_MAX];
    size_t nargs;
    struct fuzz_kv headers[FUZZ_KV_MAX];
    size_t nheaders;
    const char *body;
    size_t body_len;
    size_t chunk;
};

/* The reply as it would go on the wire, parsed back. */
struct fuzz_reply {
    unsigned status;
    json_t *json; /* the parsed body, owned; released by fuzz_reply_clear */
    char *content_type;
    char *allow;
    char *retry_after;
    char *allow_origin; /* Access-Control-Allow-Origin */
    bool credentials;   /* an Access-Control-Allow-Credentials header */
    /* what the request carried, as the driver saw it: */
    bool user_token;  /* a valid "@user" token */
    bool admin_token; /* a valid "@admin" token */
};

/*
 * Set up once before the first request (from LLVMFuzzerInitialize). With
 * FUZZ_VERBOSE=1 in the environment each reply is printed to stderr, for
 * replaying an input by hand.
 */
void fuzz_driver_init(void);

/*
 * Run rq through the service's access handler the way libmicrohttpd calls
 * it (headers, then body pieces, then the final call, then the completion
 * callback), check the reply against the invariants every reply keeps
 * (fuzz_reply_check) and return it in *out. Aborts on a broken invariant.
 */
void fuzz_http_run(const struct fuzz_request *rq, struct fuzz_reply *out);

/* Free what a reply owns. */
void fuzz_reply_clear(struct fuzz_reply *rep);

/* The error code of an error reply, or NULL. */
const char *fuzz_reply_code(const struct fuzz_reply *rep);

/* ---- the fake backend (fake_backend.c) ---- */

struct lock_client;
struct store_voucher;

/*
 * The script for the next request: each backend call takes the next byte
 * and answers accordingly (past the end: plain success):
 *   'n' -ENOTCONN  'r' -ECONNRESET  't' -ETIMEDOUT  'p' -EINPROGRESS
 *   'd' -EDEADLK   'e' -ENOENT      'x' -EEXIST     'i' -EIO
 *   '1'..'9' success with an alternative outcome (wrong code, sold out,
 *   lock busy, someone else's order, n items, ...), anything else plain
 *   success. The script is copied. Call it before every request.
 */
void fuzz_backend_script(const char *script, size_t len);

/*
 * Checks after a request: every purchase submitted to the engine was
 * answered. Aborts otherwise. Also resets the per-request state.
 */
void fuzz_backend_finish(void);

/*
 * Answer the purchase the fake engine holds (its done() callback runs, as
 * an engine thread would). False when none is held.
 */
bool fuzz_backend_engine_run(void);

/* The lock client the fake lock calls expect (the server's). */
struct lock_client *fuzz_backend_lock_client(void);

/* Backend operations since the last fuzz_backend_finish (not store_new). */
unsigned fuzz_backend_calls(void);

/*
 * The voucher the last successful store_voucher_insert received (checked
 * there against the API's rules), or NULL. Valid until the next
 * fuzz_backend_script.
 */
const struct store_voucher *fuzz_backend_last_voucher(void);

/* Strict UTF-8 check (no overlong forms, surrogates or > U+10FFFF). */
bool fuzz_utf8_valid(const char *s, size_t len);

#endif
