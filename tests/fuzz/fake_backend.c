/*
 * fake_backend.c - what lies below the sale layer, for the fuzz builds:
 * store/, the purchase engine and the task pool, the async mode's calls,
 * the lock client and the ids. No MySQL, Redis or lock server, just
 * answers chosen by a per-request script (see fuzz_backend_script in
 * fuzz.h), so that every branch of the handlers and of the sale layer can
 * be reached from fuzz input.
 *
 * Each fake also checks what it is handed: that is the point where input
 * validation must already have happened. A phone not in E.164 form (+
 * and 7 to 15 digits), a voucher title longer than the schema allows, a
 * purchase of an invalid voucher or user, or a parked purchase never answered
 * abort the run. fuzz_fail() and fuzz_utf8_valid(), which every harness uses,
 * live here too.
 */
#include "store/store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "common/redis_link.h"
#include "common/util.h"
#include "engine/engine.h"
#include "engine/pool.h"
#include "idgen/idgen.h"
#include "lock/lock.h"
#include "tests/fuzz/fuzz.h"

/* The API's limits (docs/api.md, "Requests"), restated here on purpose: a
 * change in the handlers that lets more through must trip these checks. */
#define MONEY_MAX 100000000000LL
#define STOCK_MAX 1000000000LL
/* Times the store can write: 1970-01-01 to 9999-12-31T23:59:59Z. */
#define TIME_MAX 253402300799LL

struct store {
    int unused;
};

struct lock_client {
    int unused;
};

struct lock {
    int unused;
};

static struct store fake_store;
static struct lock_client fake_locks;
static redisContext fake_redis;
static struct redis_link fake_link = {.rc = &fake_redis};

static char script[256];
static size_t script_len, script_pos;
static unsigned calls;
/* The purchase or task the engine holds, or the task the pool holds:
 * run by fuzz_backend_engine_run(). */
static struct engine_purchase *pending;
static struct engine_task *pending_task;
static struct pool_task *pending_pool;
static struct store_voucher last_voucher;
static bool have_last_voucher;

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt,
               ...)
{
    va_list ap;

    fprintf(stderr, "fuzz invariant broken at %s:%d (%s): ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

bool fuzz_utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;

    while (i < len) {
        unsigned c = s[i], n;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (len - i <= n) /* truncated sequence */
            return false;
        for (unsigned k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

void fuzz_backend_script(const char *s, size_t len)
{
    if (len > sizeof(script))
        len = sizeof(script);
    memcpy(script, s, len);
    script_len = len;
    script_pos = 0;
    have_last_voucher = false;
}

/*
 * Take the next script step: a -errno, or 0 with *variant set to the
 * alternative outcome (0 for the plain one).
 */
static int step(unsigned *variant)
{
    char c = script_pos < script_len ? script[script_pos++] : '.';

    calls++;
    *variant = 0;
    switch (c) {
    case 'n':
        return -ENOTCONN;
    case 'r':
        return -ECONNRESET;
    case 't':
        return -ETIMEDOUT;
    case 'p':
        return -EINPROGRESS;
    case 'd':
        return -EDEADLK;
    case 'e':
        return -ENOENT;
    case 'x':
        return -EEXIST;
    case 'i':
        return -EIO;
    default:
        if (c >= '1' && c <= '9')
            *variant = (unsigned)(c - '0');
        return 0;
    }
}

unsigned fuzz_backend_calls(void)
{
    return calls;
}

struct lock_client *fuzz_backend_lock_client(void)
{
    return &fake_locks;
}

const struct store_voucher *fuzz_backend_last_voucher(void)
{
    return have_last_voucher ? &last_voucher : NULL;
}

void fuzz_backend_finish(void)
{
    FUZZ_CHECK(!pending, "a purchase was submitted and never answered");
    FUZZ_CHECK(!pending_task, "a task was queued and never run");
    FUZZ_CHECK(!pending_pool, "a pool task was queued and never run");
    script_len = script_pos = 0;
    calls = 0;
}

static void check_store(const struct store *st)
{
    FUZZ_CHECK(st == &fake_store, "a handler used a store it did not get");
}

static void check_phone(const char *phone)
{
    const char *p = phone + 1;
    size_t n = strlen(p);

    FUZZ_CHECK(phone[0] == '+' && n >= 7 && n <= 15 && p[0] != '0' &&
                   strspn(p, "0123456789") == n,
               "phone reached the store not in E.164 form: \"%.40s\"", phone);
}

static void check_code(const char *code)
{
    FUZZ_CHECK(strlen(code) == 6 && strspn(code, "0123456789") == 6,
               "login code reached the store unvalidated");
}

/* Text for a VARCHAR(max_chars) utf8mb4 column that fits buf of cap. */
static void check_text(const char *what, const char *s, size_t cap,
                       size_t max_chars, bool required)
{
    size_t len = strnlen(s, cap);
    size_t chars = 0;

    FUZZ_CHECK(len < cap, "%s overflows its buffer", what);
    FUZZ_CHECK(fuzz_utf8_valid(s, len), "%s is not valid UTF-8", what);
    for (size_t i = 0; i < len; i++)
        chars += ((unsigned char)s[i] & 0xc0) != 0x80;
    FUZZ_CHECK(chars <= max_chars, "%s has %zu characters", what, chars);
    FUZZ_CHECK(!required || chars > 0, "%s is empty", what);
}

static void check_id(const char *what, int64_t id)
{
    FUZZ_CHECK(id > 0, "%s %lld reached the store", what, (long long)id);
}

struct store *store_new(const struct store_config *cfg)
{
    (void)cfg;
    return &fake_store;
}

void store_free(struct store *st)
{
    (void)st;
}

struct redis_link *store_redis_link(struct store *st)
{
    unsigned variant;

    check_store(st);
    return step(&variant) ? NULL : &fake_link;
}

bool store_redis_is_cluster(const struct store_config *cfg)
{
    (void)cfg;
    return false;
}

const char *store_redis_cluster_check(struct store *st)
{
    check_store(st);
    return NULL;
}

void store_ping(struct store *st, bool *mysql_ok, bool *redis_ok)
{
    unsigned variant;
    int err;

    check_store(st);
    err = step(&variant);
    *mysql_ok = !err && variant != 1 && variant != 3;
    *redis_ok = !err && variant != 2 && variant != 3;
}

int store_user_login(struct store *st, const char *phone, int64_t *user_id)
{
    unsigned variant;
    int err;

    check_store(st);
    check_phone(phone);
    if ((err = step(&variant)))
        return err;
    *user_id = FUZZ_USER_ID + variant;
    return 0;
}

int store_code_put(struct store *st, const char *phone, const char *code,
                   const char *addr, const char *request,
                   const struct store_code_limits *l, int64_t *retry_ms)
{
    unsigned variant;
    int err;

    check_store(st);
    check_phone(phone);
    check_code(code);
    FUZZ_CHECK(addr && request && strlen(request) == STORE_CODE_REQUEST_LEN,
               "a login code without its request");
    FUZZ_CHECK(l->ttl_s > 0 && l->phone_per_hour >= l->per_hour,
               "a login code without a lifetime or limits");
    if ((err = step(&variant)))
        return err;
    *retry_ms = variant == 1 ? 30000 : 0;
    return 0;
}

int store_code_revoke(struct store *st, const char *phone, const char *code,
                      const char *addr, const char *request)
{
    unsigned variant;

    (void)addr;
    (void)request;
    check_store(st);
    check_phone(phone);
    check_code(code);
    return step(&variant);
}

int store_sms_budget(struct store *st, const char *cc, unsigned per_min,
                     int take, bool *ok, int64_t *retry_ms, unsigned *recent)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(cc && cc[0] && strspn(cc, "0123456789") == strlen(cc) &&
                   per_min > 0,
               "an SMS budget of no calling code");
    if ((err = step(&variant)))
        return err;
    *ok = take <= 0 || variant != 1;
    *retry_ms = *ok ? 0 : 30000;
    *recent = variant == 2 ? per_min : 0;
    return 0;
}

int store_code_check(struct store *st, const char *phone, const char *code,
                     const char *addr, const char *request,
                     const struct store_code_limits *l,
                     enum store_code *outcome, int64_t *retry_ms)
{
    FUZZ_CHECK(!request || strlen(request) == STORE_CODE_REQUEST_LEN,
               "a code request of %zu characters", strlen(request));
    unsigned variant;
    int err;

    check_store(st);
    check_phone(phone);
    check_code(code);
    FUZZ_CHECK(addr && addr[0], "a login without the client's address");
    FUZZ_CHECK(l->addr_tries > 0 && l->phone_tries > 0,
               "login codes without limits");
    if ((err = step(&variant)))
        return err;
    *outcome = variant == 0   ? STORE_CODE_OK
               : variant == 1 ? STORE_CODE_WRONG
                              : STORE_CODE_LOCKED;
    *retry_ms = *outcome == STORE_CODE_LOCKED ? 2000 : 0;
    return 0;
}

int store_account_get(struct store *st, unsigned role, int64_t id,
                      uint32_t *gen, bool *banned)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK((role == 1 || role == 2) && id > 0, "account %u:%lld", role,
               (long long)id);
    if ((err = step(&variant)))
        return err;
    *gen = variant;
    *banned = variant == 1;
    return 0;
}

int store_account_logout_all(struct store *st, unsigned role, int64_t id,
                             uint32_t *gen)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK((role == 1 || role == 2) && id > 0, "account %u:%lld", role,
               (long long)id);
    if ((err = step(&variant)))
        return err;
    *gen = variant + 1;
    return 0;
}

/* An admin's change comes with its record: by an admin, of its target. */
static void check_audit(const struct store_audit *a, const char *type)
{
    FUZZ_CHECK(a && a->admin_id > 0 && a->addr && a->action &&
                   strcmp(a->target_type, type) == 0,
               "an audit record of a %s change missing or without its admin",
               type);
    FUZZ_CHECK(!a->change || a->change[0] == '{',
               "an audit record's change is not a JSON object");
    if (a->idem) {
        size_t len = a->idem->key ? strlen(a->idem->key) : 0;

        FUZZ_CHECK(len >= 1 && len <= STORE_IDEM_KEY_MAX &&
                       a->idem->admin_id == a->admin_id,
                   "an Idempotency-Key of %zu bytes, or of another admin", len);
        for (size_t i = 0; i < len; i++)
            FUZZ_CHECK(a->idem->key[i] > 0x20 && a->idem->key[i] < 0x7f,
                       "an Idempotency-Key with an invisible character");
    }
}

int store_idem_answer(struct store *st, const struct store_idem *k,
                      unsigned status, const char *body)
{
    unsigned variant;

    check_store(st);
    FUZZ_CHECK(k && k->key && status >= 200 && status < 300,
               "an Idempotency-Key's answer recorded with status %u", status);
    (void)body;
    return step(&variant);
}

void store_idem_release(struct store_idem *k)
{
    free(k->answer);
    k->answer = NULL;
}

int store_account_ban(struct store *st, int64_t user_id, bool on,
                      const struct store_audit *audit)
{
    unsigned variant;

    (void)on;
    check_store(st);
    check_audit(audit, "user");
    FUZZ_CHECK(user_id > 0 && audit->target_id == user_id,
               "a ban of %lld recorded for %lld", (long long)user_id,
               (long long)audit->target_id);
    return step(&variant);
}

int store_audit_add(struct store *st, const struct store_audit *a)
{
    unsigned variant;

    check_store(st);
    FUZZ_CHECK(a->action && a->target_type && a->target_id > 0,
               "an audit record without its action or target");
    return step(&variant);
}

int store_audit_list(struct store *st, int64_t before, const char *target_type,
                     int64_t target_id, struct store_audit_row *out, size_t max,
                     size_t *n)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(before >= 0 && target_id >= 0 && max >= 1 && max <= 101 &&
                   (target_type || !target_id),
               "audit listed before %lld max %zu", (long long)before, max);
    if ((err = step(&variant)))
        return err;
    *n = variant % 2;
    if (*n) {
        memset(out, 0, sizeof(*out));
        out->id = 5;
        out->time_ms = 1700000000000LL;
        out->admin_id = 1;
        snprintf(out->admin_name, sizeof(out->admin_name), "ops");
        snprintf(out->action, sizeof(out->action), "user.ban");
        snprintf(out->target_type, sizeof(out->target_type), "user");
        out->target_id = 7;
        /* Not JSON: a record the page must still show. */
        snprintf(out->change, sizeof(out->change), "{bad");
    }
    return 0;
}

int store_admin_insert(struct store *st, const char *username,
                       const char *pw_hash, int64_t *id)
{
    (void)st;
    (void)username;
    (void)pw_hash;
    *id = 1;
    return 0;
}

int store_admin_get(struct store *st, const char *username, int64_t *id,
                    char *pw_hash, bool *disabled)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(strlen(username) >= 1 && strlen(username) <= 64,
               "an admin name of %zu bytes", strlen(username));
    if ((err = step(&variant)))
        return err;
    if (variant == 1)
        return -ENOENT;
    *id = 1;
    /* A hash that verifies nothing, cheaply (no Argon2 run). */
    snprintf(pw_hash, STORE_ADMIN_HASH_MAX, "not-a-hash");
    *disabled = variant == 2;
    return 0;
}

int store_admin_fails_check(struct store *st, const char *name,
                            const char *addr, unsigned max_pair,
                            unsigned max_name, unsigned max_addr,
                            unsigned window_ms, bool *locked, int64_t *retry_ms,
                            unsigned *addr_fails)
{
    unsigned variant;
    int err;

    (void)name;
    (void)addr;
    check_store(st);
    FUZZ_CHECK(max_pair > 0 && max_name > 0 && max_addr > 0 && window_ms > 0,
               "admin login limits off");
    if ((err = step(&variant)))
        return err;
    *locked = variant == 1;
    *retry_ms = *locked ? 1500 : 0;
    *addr_fails = variant == 2 ? 3 : 0;
    return 0;
}

int store_admin_fails_add(struct store *st, const char *name, const char *addr,
                          unsigned window_ms)
{
    (void)name;
    (void)addr;
    (void)window_ms;
    check_store(st);
    return 0;
}

int store_admin_fails_clear(struct store *st, const char *name,
                            const char *addr)
{
    (void)name;
    (void)addr;
    check_store(st);
    return 0;
}

int store_accounts_load(struct store *st,
                        void (*row)(void *ctx, unsigned role, int64_t id,
                                    uint32_t gen, bool banned),
                        void *ctx)
{
    (void)st;
    (void)row;
    (void)ctx;
    return 0;
}

int store_token_deny(struct store *st, uint64_t jti, int64_t exp_s,
                     const char *channel, const char *msg)
{
    unsigned variant;

    check_store(st);
    FUZZ_CHECK(jti != 0 && exp_s > 0 && channel && msg, "a bad token logout");
    return step(&variant);
}

int store_tokens_denied_load(struct store *st, int64_t now_s,
                             void (*row)(void *ctx, uint64_t jti,
                                         int64_t exp_s),
                             void *ctx)
{
    (void)st;
    (void)now_s;
    (void)row;
    (void)ctx;
    return 0;
}

int store_pow_spend(struct store *st, const char *challenge, int64_t expires_s)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(strlen(challenge) == 64 && expires_s > 0,
               "a proof of work spent unchecked");
    if ((err = step(&variant)))
        return err;
    return variant == 1 ? -EALREADY : 0;
}

int store_waitroom_place(struct store *st, int64_t voucher_id,
                         const struct store_waitroom *w, int64_t user_id,
                         bool join, struct store_wr_place *out)
{
    unsigned variant;
    int err;

    (void)join;
    check_store(st);
    FUZZ_CHECK(voucher_id > 0 && user_id > 0 && w->rate > 0 &&
                   w->begin_ms < w->end_ms,
               "a waiting room place of %lld for %lld", (long long)voucher_id,
               (long long)user_id);
    if ((err = step(&variant)))
        return err;
    memset(out, 0, sizeof(*out));
    out->outcome = (enum store_wr_outcome)(variant % 5);
    out->position = variant == 0 ? 3 : 0;
    out->admitted = variant == 0;
    out->now_ms = w->begin_ms + 100;
    out->admit_at_ms = w->begin_ms + 50;
    out->retry_ms = 1500;
    return 0;
}

int store_refunds_list(struct store *st, int status, int64_t before,
                       struct store_refund *out, size_t max, size_t *n)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(status >= -1 && status <= 1 && before >= 0 && max >= 1 &&
                   max <= STORE_LIST_MAX,
               "refunds listed with status %d before %lld max %zu", status,
               (long long)before, max);
    if ((err = step(&variant)))
        return err;
    *n = variant % 2;
    if (*n) {
        memset(out, 0, sizeof(*out));
        out->id = 3;
        out->order_id = 4;
        out->amount = 4750;
        snprintf(out->txn, sizeof(out->txn), "t");
        out->reason = STORE_REFUND_CLOSED;
        out->created_ms = 1700000000000LL;
    }
    return 0;
}

int store_refund_done(struct store *st, int64_t id,
                      const struct store_audit *audit, struct store_refund *r)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("refund id", id);
    check_audit(audit, "refund");
    if ((err = step(&variant)))
        return err;
    if (variant == 1)
        return -ENOENT;
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->order_id = 4;
    snprintf(r->txn, sizeof(r->txn), "t");
    r->reason = STORE_REFUND_SECOND;
    r->done = true;
    r->created_ms = r->done_ms = 1700000000000LL;
    return 0;
}

int store_waitroom_counts(struct store *st, int64_t voucher_id,
                          const struct store_waitroom *w, int64_t *joined,
                          int64_t *admitted)
{
    (void)voucher_id;
    (void)w;
    check_store(st);
    *joined = 7;
    *admitted = 3;
    return 0;
}

int store_waitroom_mark(struct store *st, int64_t voucher_id,
                        int64_t expire_at_ms)
{
    (void)voucher_id;
    (void)expire_at_ms;
    check_store(st);
    return 0;
}

int store_waitroom_marked(struct store *st, int64_t voucher_id)
{
    (void)voucher_id;
    check_store(st);
    return 0;
}

int store_publish(struct store *st, const char *channel, const char *msg)
{
    check_store(st);
    FUZZ_CHECK(channel && msg, "publish nothing");
    return 0;
}

int store_voucher_insert(struct store *st, struct store_voucher *v,
                         const struct store_audit *audit)
{
    unsigned variant;
    int err;

    check_store(st);
    check_audit(audit, "voucher");
    check_id("shopId", v->shop_id);
    check_text("title", v->title, sizeof(v->title), 255, true);
    check_text("subTitle", v->sub_title, sizeof(v->sub_title), 255, false);
    check_text("rules", v->rules, sizeof(v->rules), 1024, false);
    FUZZ_CHECK(v->pay_value >= 0 && v->pay_value <= MONEY_MAX &&
                   v->actual_value >= 0 && v->actual_value <= MONEY_MAX,
               "money out of range");
    if (v->type == VOUCHER_SECKILL) {
        FUZZ_CHECK(v->stock >= 0 && v->stock <= STOCK_MAX, "stock %lld",
                   (long long)v->stock);
        FUZZ_CHECK(v->begin_time >= 0 && v->end_time <= TIME_MAX,
                   "sale window %lld..%lld is outside what the store holds",
                   (long long)v->begin_time, (long long)v->end_time);
        FUZZ_CHECK(v->begin_time < v->end_time, "empty sale window");
    } else {
        FUZZ_CHECK(v->type == VOUCHER_NORMAL, "voucher type %d", v->type);
        FUZZ_CHECK(!v->stock && !v->begin_time && !v->end_time,
                   "a normal voucher with seckill fields");
    }
    if ((err = step(&variant)))
        return err;
    v->id = 1000 + variant;
    last_voucher = *v;
    have_last_voucher = true;
    return 0;
}

static void fill_voucher(struct store_voucher *v, int64_t id, unsigned variant)
{
    int64_t now = util_now_ms() / 1000;

    memset(v, 0, sizeof(*v));
    v->id = id;
    v->shop_id = 1;
    strcpy(v->title, "50 off 47.50 \"quoted\" \xe7\xa7\x92\xe6\x9d\x80");
    v->pay_value = 4750;
    v->actual_value = 5000;
    v->type = variant % 2 ? VOUCHER_NORMAL : VOUCHER_SECKILL;
    if (v->type == VOUCHER_SECKILL) {
        v->stock = variant;
        v->begin_time = now - 60;
        v->end_time = now + 3600;
    }
    v->created = v->updated = now - 120;
}

int store_voucher_get(struct store *st, int64_t id, struct store_voucher *v)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("voucher id", id);
    if ((err = step(&variant)))
        return err;
    fill_voucher(v, id, variant);
    return 0;
}

int store_voucher_list(struct store *st, int64_t shop_id, int64_t before,
                       unsigned limit, struct store_voucher **items,
                       size_t *count)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(shop_id >= 0 && before >= 0, "shopId %lld before %lld",
               (long long)shop_id, (long long)before);
    FUZZ_CHECK(limit >= 1 && limit <= STORE_LIST_MAX, "limit %u", limit);
    if ((err = step(&variant)))
        return err;
    *count = variant < limit ? variant : limit;
    *items = xcalloc(*count ? *count : 1, sizeof(**items));
    for (size_t i = 0; i < *count; i++)
        fill_voucher(&(*items)[i], (int64_t)(i + 1), (unsigned)i);
    return 0;
}

int store_seckill_get(struct store *st, int64_t voucher_id,
                      struct store_seckill *s)
{
    int64_t now = util_now_ms() / 1000;
    unsigned variant;
    int err;

    check_store(st);
    check_id("voucher id", voucher_id);
    if ((err = step(&variant)))
        return err;
    /* 0 on sale, 1 normal, 2 not started, 3 ended, 4 sold out, 5 on sale
     * through a waiting room. */
    s->type = variant == 1 ? VOUCHER_NORMAL : VOUCHER_SECKILL;
    s->admission = variant == 5 ? ADMISSION_QUEUE : ADMISSION_OPEN;
    s->stock = variant == 4 ? 0 : 10;
    s->begin_time = variant == 2 ? now + 60 : now - 60;
    s->end_time = variant == 3 ? now : now + 3600;
    s->mode = PURCHASE_SYNC; /* no async sales here (async_may_sell()) */
    if (s->type == VOUCHER_NORMAL)
        s->stock = s->begin_time = s->end_time = 0;
    return 0;
}

static void fill_order(struct store_order *o, int64_t id, int64_t user_id,
                       unsigned variant);

int engine_submit(struct engine *e, struct engine_purchase *p)
{
    unsigned variant;
    int err;

    (void)e;
    /* A purchase's queue is its voucher's; cancels and payments queue
     * under keys below zero (sale/orders.c's lanes). */
    if (p->voucher_id > 0)
        check_id("voucher id", p->voucher_id);
    else
        FUZZ_CHECK(p->voucher_id < 0, "a queue key of 0");
    FUZZ_CHECK(p->done && p->batch, "a purchase without its functions");
    FUZZ_CHECK(p->deadline_ms > util_mono_ms(), "a purchase already late");
    FUZZ_CHECK(!pending && !pending_task, "a second purchase in one request");
    err = step(&variant);
    /* 5: its queue is full; 6: stopping. Else queued: a failed step is
     * answered with its error without a batch, as a purchase the engine
     * gave up on. */
    if (!err && variant == 5)
        return -EAGAIN;
    if (!err && variant == 6)
        return -ESHUTDOWN;
    p->err = err;
    pending = p;
    return 0;
}

void store_redis_server(const struct store_config *cfg,
                        struct redis_server *out)
{
    (void)cfg;
    (void)out;
    FUZZ_CHECK(0, "a Redis connection of its own in a fuzz build");
}

/* No read replica in a fuzz build. */
size_t store_replica_states(struct store_replica_state *out, size_t max)
{
    (void)out;
    (void)max;
    return 0;
}

size_t engine_queue_top(struct engine *e, int64_t *ids, unsigned *depths,
                        size_t max)
{
    (void)e;
    (void)ids;
    (void)depths;
    (void)max;
    return 0;
}

size_t engine_queue_count(struct engine *e)
{
    (void)e;
    return 0;
}

size_t store_voucher_states_count(void)
{
    return 0;
}

int engine_run(struct engine *e, struct engine_task *t)
{
    (void)e;
    FUZZ_CHECK(t->run && t->done, "a task without its functions");
    FUZZ_CHECK(!pending && !pending_task, "a second task in one request");
    t->err = 0;
    pending_task = t;
    return 0;
}

int pool_run(struct pool *p, struct pool_task *t)
{
    (void)p;
    FUZZ_CHECK(t->run, "a pool task without its function");
    FUZZ_CHECK(!pending_pool, "a second pool task in one request");
    pending_pool = t;
    return 0;
}

bool fuzz_backend_engine_run(void)
{
    struct engine_purchase *p = pending;
    struct engine_task *t = pending_task;
    struct pool_task *pt = pending_pool;

    if (pt) {
        pending_pool = NULL;
        pt->run(pt, 0);
        return true;
    }
    if (t) {
        pending_task = NULL;
        t->run(t, &fake_store);
        t->done(t);
        return true;
    }
    if (!p)
        return false;
    pending = NULL;
    /* A batch of one, as an engine thread runs it. */
    if (!p->err)
        p->batch(&fake_store, p->voucher_id, &p, 1);
    p->done(p);
    return true;
}

/* ---- what a sync sale's batch calls ---- */

int lock_new(struct lock_client *c, const char *name, struct lock **out)
{
    FUZZ_CHECK(c == &fake_locks, "an unknown lock client");
    FUZZ_CHECK(strncmp(name, "lock:order:", 11) == 0, "lock %s", name);
    *out = xcalloc(1, sizeof(**out));
    return 0;
}

void lock_free(struct lock *l)
{
    free(l);
}

const char *lock_name(const struct lock *l)
{
    (void)l;
    return "lock:order:fuzz";
}

/* One step for the batch: an error for every lock, or 3: all busy. */
int lock_acquire_many(struct lock **ls, size_t n, uint32_t ttl_ms,
                      enum lock_status *st, int *err)
{
    unsigned variant;
    int e;

    (void)ls;
    FUZZ_CHECK(ttl_ms > 0, "a lock without a lease");
    e = step(&variant);
    for (size_t i = 0; i < n; i++) {
        err[i] = e;
        st[i] = variant == 3 ? LOCK_BUSY : LOCK_ACQUIRED;
    }
    return 0;
}

int lock_release_many(struct lock **ls, size_t n, int *held, int *err)
{
    (void)ls;
    for (size_t i = 0; i < n; i++) {
        held[i] = 1;
        err[i] = 0;
    }
    return 0;
}

int idgen_next(struct redis_link *l, const char *name, int64_t *id)
{
    unsigned variant;
    int err;

    FUZZ_CHECK(l == &fake_link, "an id from another connection");
    FUZZ_CHECK(strcmp(name, "order") == 0, "an id of %s", name);
    if ((err = step(&variant)))
        return err;
    *id = 1000 + (int64_t)variant;
    return 0;
}

void idgen_discard(const char *name)
{
    (void)name;
}

/* One shard: ids are the worker's as they are. */
bool idgen_is_sharded(int64_t id)
{
    (void)id;
    return false;
}

unsigned idgen_shard_of(int64_t id)
{
    (void)id;
    return 0;
}

unsigned store_shard_count(const struct store *st)
{
    (void)st;
    return 1;
}

int store_order_id_place(const struct store *st, int64_t voucher_id,
                         int64_t *id)
{
    (void)st;
    (void)voucher_id;
    (void)id;
    return 0;
}

/* 1: sold out, 2: the buyer has one, x: its id was taken (-EEXIST), any
 * other error for every purchase of the batch. */
void store_purchase_batch(struct store *st, int64_t voucher_id,
                          struct store_purchase_item **items, size_t n)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("voucher id", voucher_id);
    err = step(&variant);
    for (size_t i = 0; i < n; i++) {
        check_id("user id", items[i]->user_id);
        check_id("order id", items[i]->order_id);
        items[i]->err = err;
        items[i]->outcome = variant == 1   ? STORE_PURCHASE_SOLD_OUT
                            : variant == 2 ? STORE_PURCHASE_DUPLICATE
                                           : STORE_PURCHASE_OK;
    }
}

/* No rate limits in the fuzz builds' configuration. */
int store_rate_take(struct store *st, const struct store_rate_bucket *b,
                    size_t n, int64_t *retry_ms, char *why, size_t why_len)
{
    (void)st;
    (void)b;
    (void)n;
    (void)why;
    (void)why_len;
    *retry_ms = 0;
    FUZZ_CHECK(0, "a rate limit in a fuzz build");
    return 0;
}

int store_order_cancel(struct store *st, int64_t order_id,
                       enum store_close *outcome, struct store_order *o)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("order id", order_id);
    if ((err = step(&variant)))
        return err;
    *outcome = (enum store_close)(variant % 5);
    fill_order(o, order_id, FUZZ_USER_ID, variant);
    return 0;
}

int store_order_pay(struct store *st, int64_t order_id, int64_t amount,
                    const char *txn_id, enum store_pay *outcome,
                    struct store_order *o, int64_t *pay_value)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("order id", order_id);
    FUZZ_CHECK(amount >= 0 && amount <= MONEY_MAX, "amount %lld",
               (long long)amount);
    FUZZ_CHECK(txn_id && *txn_id && strlen(txn_id) <= 64,
               "a transaction id of %zu bytes", txn_id ? strlen(txn_id) : 0);
    FUZZ_CHECK(fuzz_utf8_valid(txn_id, strlen(txn_id)), "txn id not UTF-8");
    *pay_value = 4750;
    if ((err = step(&variant)))
        return err;
    *outcome = (enum store_pay)(variant % 8);
    fill_order(o, order_id, FUZZ_USER_ID, variant);
    return 0;
}

/* The merged calls: each member as its own call would be. */
int store_orders_cancel(struct store *st, struct store_cancel_item *items,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int err = store_order_cancel(st, items[i].order_id, &items[i].outcome,
                                     &items[i].order);
        if (err)
            return err;
    }
    return 0;
}

int store_orders_pay(struct store *st, struct store_pay_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int err;

        if (items[i].amount < 0)
            items[i].amount = 4750;
        err = store_order_pay(st, items[i].order_id, items[i].amount,
                              items[i].txn, &items[i].outcome, &items[i].order,
                              &items[i].pay_value);
        if (err)
            return err;
    }
    return 0;
}

int store_voucher_stats(struct store *st, int64_t voucher_id,
                        struct store_voucher_stats *out)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("voucher id", voucher_id);
    if ((err = step(&variant)))
        return err;
    out->initial_stock = variant == 1 ? -1 : 10;
    out->stock = 3;
    out->unpaid = 2;
    out->paid = 4;
    out->cancelled = 1;
    out->expired = variant;
    return 0;
}

static void fill_order(struct store_order *o, int64_t id, int64_t user_id,
                       unsigned variant)
{
    o->id = id;
    o->user_id = user_id;
    o->voucher_id = 7;
    static const enum order_status st[] = {ORDER_UNPAID, ORDER_PAID,
                                           ORDER_CANCELLED, ORDER_EXPIRED};
    o->status = st[variant % 4];
    o->pay_deadline_ms = variant % 2 ? 0 : util_now_ms() + 900000;
    o->pay_time_ms = o->status == ORDER_PAID ? util_now_ms() : 0;
    o->close_time_ms =
        o->status == ORDER_CANCELLED || o->status == ORDER_EXPIRED
            ? util_now_ms()
            : 0;
    o->created = util_now_ms() / 1000;
}

int store_order_get(struct store *st, int64_t id, struct store_order *o)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("order id", id);
    if ((err = step(&variant)))
        return err;
    /* Odd variants: someone else's order. */
    fill_order(o, id, FUZZ_USER_ID + variant % 2, variant);
    return 0;
}

int store_order_list(struct store *st, int64_t user_id, int64_t before,
                     unsigned limit, struct store_order **items, size_t *count)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("user id", user_id);
    FUZZ_CHECK(before >= 0, "before %lld", (long long)before);
    FUZZ_CHECK(limit >= 1 && limit <= STORE_LIST_MAX, "limit %u", limit);
    if ((err = step(&variant)))
        return err;
    *count = variant < limit ? variant : limit;
    *items = xcalloc(*count ? *count : 1, sizeof(**items));
    for (size_t i = 0; i < *count; i++)
        fill_order(&(*items)[i], (int64_t)(100 - i), user_id, (unsigned)i);
    return 0;
}

int store_voucher_orders(struct store *st, int64_t voucher_id, int status,
                         bool desc, int64_t from, struct store_order *out,
                         size_t max, size_t *n)
{
    unsigned variant;
    int err;

    check_store(st);
    check_id("voucher id", voucher_id);
    FUZZ_CHECK(status >= 0 && from >= 0 && max >= 1,
               "sale orders status %d from %lld max %zu", status,
               (long long)from, max);
    (void)desc;
    *n = 0;
    if ((err = step(&variant)))
        return err;
    *n = variant < max ? variant : max;
    for (size_t i = 0; i < *n; i++)
        fill_order(&out[i], (int64_t)(100 - i), FUZZ_USER_ID, (unsigned)i);
    return 0;
}

int store_sales_list(struct store *st, int64_t now_s, int64_t until_s,
                     unsigned max, struct store_voucher **items, size_t *count)
{
    unsigned variant;
    int err;

    check_store(st);
    FUZZ_CHECK(now_s > 0 && until_s > now_s && max >= 1,
               "sales list now %lld until %lld max %u", (long long)now_s,
               (long long)until_s, max);
    *items = NULL;
    *count = 0;
    if ((err = step(&variant)))
        return err;
    *count = variant % 4;
    *items = xcalloc(*count ? *count : 1, sizeof(**items));
    for (size_t i = 0; i < *count; i++)
        fill_voucher(&(*items)[i], (int64_t)(i + 1), (unsigned)i);
    return 0;
}

int lock_client_open(const char *url, const struct lock_options *opt,
                     struct lock_client **out)
{
    (void)url;
    (void)opt;
    *out = &fake_locks;
    return 0;
}

void lock_client_close(struct lock_client *c)
{
    (void)c;
}

int lock_client_ping(struct lock_client *c)
{
    unsigned variant;

    FUZZ_CHECK(c == &fake_locks, "an unknown lock client");
    return step(&variant);
}

const char *lock_client_backend(const struct lock_client *c)
{
    (void)c;
    return "redis";
}

/* No async sales in a fuzz build: the writer is never started, so an
 * async voucher is refused at creation and no order is ever pending. */
bool async_may_sell(const struct async *a)
{
    (void)a;
    return false;
}

void async_voucher_hint(struct async *a, int64_t voucher_id)
{
    (void)a;
    check_id("voucher id", voucher_id);
}

int async_pending_find(struct redis_link *rc, int64_t order_id,
                       int64_t *voucher_id, int64_t *user_id,
                       int64_t *accepted_ms)
{
    (void)accepted_ms;
    (void)rc;
    (void)voucher_id;
    (void)user_id;
    check_id("order id", order_id);
    return -ENOENT;
}

int async_units_return(struct store *st, int64_t voucher_id,
                       const int64_t *orders, const int64_t *users, size_t n,
                       size_t *returned)
{
    (void)st;
    check_id("voucher id", voucher_id);
    for (size_t i = 0; i < n; i++) {
        check_id("order id", orders[i]);
        check_id("user id", users[i]);
    }
    if (returned)
        *returned = 0;
    return 0;
}

int async_pending_of_user(struct redis_link *rc, int64_t user_id,
                          struct async_pending *out, size_t max, size_t *found)
{
    (void)rc;
    (void)out;
    (void)max;
    check_id("user id", user_id);
    *found = 0;
    return 0;
}

int async_sale_preheat(struct redis_link *rc, int64_t voucher_id,
                       int64_t begin_s, int64_t end_s, int64_t stock,
                       int64_t stamp)
{
    (void)rc;
    (void)stamp;
    (void)begin_s;
    (void)end_s;
    (void)stock;
    check_id("voucher id", voucher_id);
    FUZZ_CHECK(0, "an async sale preheated in a fuzz build");
    return 0;
}

size_t async_backlog_top(struct async *a, int64_t *ids, unsigned *depths,
                         size_t max, int64_t *oldest_ms)
{
    (void)a;
    (void)ids;
    (void)depths;
    (void)max;
    *oldest_ms = 0;
    return 0;
}

/* No async sale ever sells here (async_may_sell() is false). */
int async_purchase(struct redis_link *rc, int64_t voucher_id,
                   unsigned backlog_max, const int64_t *order_ids,
                   const int64_t *users, size_t n,
                   const struct async_confirm *confirm, int64_t deadline_ms,
                   enum async_outcome *out)
{
    (void)rc;
    (void)voucher_id;
    (void)backlog_max;
    (void)order_ids;
    (void)users;
    (void)n;
    (void)confirm;
    (void)deadline_ms;
    (void)out;
    FUZZ_CHECK(0, "an async purchase in a fuzz build");
    return -EIO;
}

void async_confirm_get(const struct async *a, struct async_confirm *out)
{
    (void)a;
    out->replicas = 0;
    out->wait_ms = 0;
}

int async_sale_window(struct redis_link *rc, int64_t voucher_id,
                      int64_t *begin_s, int64_t *end_s)
{
    (void)rc;
    (void)begin_s;
    (void)end_s;
    check_id("voucher id", voucher_id);
    return -ENOENT;
}

int store_waitroom_forget(struct store *st, int64_t voucher_id)
{
    check_store(st);
    check_id("voucher id", voucher_id);
    return 0;
}

void store_voucher_stocked(int64_t voucher_id)
{
    check_id("voucher id", voucher_id);
}

int store_voucher_get_primary(struct store *st, int64_t id,
                              struct store_voucher *v)
{
    return store_voucher_get(st, id, v);
}

/* ---- the operator's controls: an outcome per variant ---- */

static int control_outcome(struct store *st, int64_t voucher_id,
                           const struct store_audit *audit,
                           enum store_control *out,
                           struct store_sale_control *after)
{
    static const enum store_control outcomes[] = {
        STORE_CONTROL_DONE,    STORE_CONTROL_NOT_FOUND,
        STORE_CONTROL_ENDED,   STORE_CONTROL_NOT_SECKILL,
        STORE_CONTROL_STARTED, STORE_CONTROL_INVALID};
    unsigned variant;
    int err;

    check_store(st);
    check_id("voucher id", voucher_id);
    check_audit(audit, "voucher");
    FUZZ_CHECK(audit->target_id == voucher_id,
               "a control of %lld recorded for %lld", (long long)voucher_id,
               (long long)audit->target_id);
    if ((err = step(&variant)))
        return err;
    memset(after, 0, sizeof(*after));
    after->type = VOUCHER_SECKILL;
    after->mode = PURCHASE_SYNC;
    after->admission = ADMISSION_OPEN;
    after->begin_time = 1700000000;
    after->end_time = 1700003600;
    after->initial_stock = 10;
    *out = outcomes[variant % (sizeof(outcomes) / sizeof(outcomes[0]))];
    if (*out == STORE_CONTROL_STARTED || *out == STORE_CONTROL_INVALID)
        after->why = "title: a reason";
    return 0;
}

int store_sale_halt(struct store *st, int64_t voucher_id, enum store_halt halt,
                    int64_t now_s, enum store_control *out,
                    struct store_sale_control *after,
                    const struct store_audit *audit)
{
    FUZZ_CHECK(halt != HALT_STOPPED && now_s > 0, "a halt of %d", (int)halt);
    return control_outcome(st, voucher_id, audit, out, after);
}

int store_sale_stop(struct store *st, int64_t voucher_id, int64_t now_s,
                    enum store_control *out, struct store_sale_control *after,
                    const struct store_audit *audit)
{
    FUZZ_CHECK(now_s > 0, "a stop at %lld", (long long)now_s);
    return control_outcome(st, voucher_id, audit, out, after);
}

int store_sale_restock(struct store *st, int64_t voucher_id, int64_t units,
                       int64_t now_s, enum store_control *out,
                       struct store_sale_control *after,
                       const struct store_audit *audit)
{
    FUZZ_CHECK(units >= 1 && units <= STORE_STOCK_MAX && now_s > 0,
               "a restock of %lld", (long long)units);
    return control_outcome(st, voucher_id, audit, out, after);
}

int store_voucher_patch(struct store *st, int64_t voucher_id,
                        const struct store_voucher_patch *p, int64_t now_s,
                        enum store_control *out,
                        struct store_sale_control *after,
                        const struct store_audit *audit)
{
    FUZZ_CHECK(p->set || p->fixed, "an edit of nothing");
    if (p->set & STORE_PATCH_TITLE)
        check_text("title", p->title, strlen(p->title) + 1, 255, true);
    if (p->set & STORE_PATCH_SUB_TITLE)
        check_text("subTitle", p->sub_title, strlen(p->sub_title) + 1, 255,
                   false);
    if (p->set & STORE_PATCH_RULES)
        check_text("rules", p->rules, strlen(p->rules) + 1, 1024, false);
    FUZZ_CHECK(now_s > 0, "an edit at %lld", (long long)now_s);
    return control_outcome(st, voucher_id, audit, out, after);
}

int store_voucher_delete(struct store *st, int64_t voucher_id, int64_t now_s,
                         enum store_control *out,
                         struct store_sale_control *after,
                         const struct store_audit *audit)
{
    FUZZ_CHECK(now_s > 0, "a deletion at %lld", (long long)now_s);
    return control_outcome(st, voucher_id, audit, out, after);
}

int async_sale_control(struct redis_link *rc, int64_t voucher_id,
                       const struct store_sale_control *c)
{
    (void)rc;
    (void)c;
    check_id("voucher id", voucher_id);
    FUZZ_CHECK(0, "an async sale's control in a fuzz build");
    return -EIO;
}

int async_sale_forget(struct redis_link *rc, int64_t voucher_id)
{
    (void)rc;
    check_id("voucher id", voucher_id);
    FUZZ_CHECK(0, "an async sale forgotten in a fuzz build");
    return -EIO;
}
