/*
 * sale.h - the sale: every way a flash sale changes, in one place, between
 * the HTTP handlers above and the engine, the async mode and the stores
 * below.
 *
 * A voucher is created (sale_voucher_create()), sync or async: a sync
 * sale is decided by a MySQL transaction per batch of purchases, an async
 * one by a Redis script, its orders carried to MySQL by a writer
 * (async/async.h); the mode is fixed at creation. A buyer logs in with a
 * code (sale_login_code_issue(), sale_login()) and buys
 * (sale_buy()): what can be refused from memory (the voucher cache,
 * sale/vcache.h) is refused at once; the rest goes through the task pool
 * when it needs a round trip (the rate limit, the voucher's row) and to
 * the purchase engine (engine/engine.h), whose batch functions are here
 * (sale/batch.c). An order then ends one way: paid (sale_pay()),
 * cancelled (sale_cancel()) or expired (sale/expiry.h); a cancelled or
 * expired order's unit goes back on sale (sale_units_returned()). The
 * reads (sale_order_get(), sale_orders_list(), the vouchers') show an
 * async sale's order as pending until the writer has it in MySQL.
 *
 * Threads. Nothing here runs on an HTTP thread except what says it never
 * waits: sale_buy(), sale_cancel(), sale_pay(), sale_gauges_read() and
 * sale_job_run(). The others wait for MySQL or Redis: call them only from
 * a job (sale_job_run()), on a thread of the task pool, where each thread
 * has its own store. Every function is thread-safe.
 *
 * Errors are 0 or -errno as in store/store.h (-ENOTCONN, -EINPROGRESS, ...);
 * business outcomes are the enums below and the store's (enum store_close,
 * enum store_pay), never errno.
 */
#ifndef SECKILL_SALE_H
#define SECKILL_SALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "common/phone.h"
#include "store/store.h"

struct engine;
struct pool;
struct async;
struct lock_client;
struct sessions;
struct vcache;
struct token_claims;
struct sale_actor;
struct outbound_queue;

/* The most time one purchase may take from its arrival to its answer. */
#define SALE_BUDGET_MS STORE_PURCHASE_BUDGET_MS

/*
 * The purchase lock's name for buyer user_id and voucher_id, into buf:
 * "lock:order:{v:VOUCHER}:USER". One lock per buyer and voucher, the unit
 * the one-active-order rule is kept per (a buyer's purchases of two
 * vouchers do not wait for each other). The hash tag {v:VOUCHER} is the
 * voucher's async sale's: on a Redis Cluster a batch's locks, all of one
 * voucher, go to one node in one round trip.
 */
#define SALE_LOCK_NAME_LEN 64
void sale_lock_name(char buf[SALE_LOCK_NAME_LEN], int64_t voucher_id,
                    int64_t user_id);

struct sale_config {
    const struct store_config *store;
    /* How new seckill vouchers sell unless their creator says. */
    enum purchase_mode mode;
    uint32_t lock_ttl_ms;       /* lease of a buyer's purchase lock */
    unsigned async_backlog_max; /* orders waiting for MySQL, per voucher */
    /* What the sale works with; all must outlive it. */
    struct engine *engine;     /* the purchase engine */
    struct pool *pool;         /* the task pool */
    struct async *async;       /* the writer of async sales, or NULL */
    struct lock_client *locks; /* the buyers' purchase locks */
    struct vcache *vcache;     /* the voucher cache, or NULL */
    struct sessions *sessions; /* the refused tokens' view, or NULL */
    /* Login codes: how often they are sent, how many wrong tries wait. */
    struct store_code_limits codes;
    /* Where login codes go (sale/sms.c): POSTed to webhook, signed with
     * secret; NULL: nowhere (the handlers show them in dev mode). */
    struct sale_sms_config {
        const char *webhook;
        unsigned char secret[32];
        struct outbound_queue *queue; /* the sender's, with a webhook */
        /* The country calling codes codes may be sent to (digits), and
         * the codes a minute each may have, over all instances. */
        char regions[PHONE_CALLING_CODES_MAX][4];
        unsigned nregions;
        unsigned per_min;
    } sms;
    /* The waiting rooms of queue sales (sale/waitroom.c). */
    struct sale_waitroom_config {
        unsigned open_s;       /* joins from this long before the begin */
        unsigned admit_rate;   /* places admitted a second, from the begin */
        unsigned ticket_ttl_s; /* a ticket is good this long after its
                                * place was admitted */
        unsigned poll_s;       /* a buyer polls at most this often */
        unsigned char ticket_key[32]; /* signs tickets: never a token's */
    } waitroom;
};

struct sale;

/* The sale of cfg (copied; what it points to must outlive it). No I/O,
 * no threads of its own. Never returns NULL. */
struct sale *sale_new(const struct sale_config *cfg);
/* Free s (not what its config points to). Accepts NULL. */
void sale_free(struct sale *s);

/* ---- work that waits, off the HTTP threads ---- */

/*
 * Run fn(arg, 0) on a thread of the task pool, where the calls below that
 * wait for MySQL or Redis may be made. Returns 0, and fn runs exactly
 * once, never inside this call (with err -ESHUTDOWN, on the stopping
 * thread, if the pool stops before its turn: it must then only answer);
 * or -ESHUTDOWN, and fn is not called.
 */
int sale_job_run(struct sale *s, void (*fn)(void *arg, int err), void *arg);

/* ---- rate limits ---- */

#define SALE_LIMIT_KEY_LEN 80

/* The token buckets a request counts against (its client's address, its
 * user), as the handlers choose them. */
struct sale_limit {
    unsigned n; /* 0..2 */
    struct {
        char key[SALE_LIMIT_KEY_LEN];
        double per_s;   /* > 0 */
        uint32_t burst; /* >= 1 */
    } bucket[2];
};

/*
 * Take one token from each bucket of l, or from none. True when refused:
 * *retry_s is when to come back (>= 1). Fails open: when Redis is
 * unreachable or answers an error, the request goes on (false), with a
 * log line at most once a second per thread. Waits for Redis.
 */
bool sale_limit_take(struct sale *s, const struct sale_limit *l,
                     unsigned *retry_s);

/* ---- buyers ---- */

/* A login code lives this long; wrong tries wait at most this long. */
#define SALE_CODE_TTL_S 300
#define SALE_LOGIN_WAIT_MAX_S 3600
/* The codes one address may have sent to a phone an hour (the config's)
 * times this: the phone's in all. And the tries a login with a code
 * request has at its code. */
#define SALE_CODE_PHONE_FACTOR 10
#define SALE_CODE_REQUEST_TRIES 3

/* The longest a login code may take to reach the SMS webhook: then it
 * is withdrawn and the request answered 503. */
#define SALE_SMS_DEADLINE_MS 4000

/* A login code being issued (sale_login_code_issue()). */
struct sale_code {
    /* Set by the caller: */
    char phone[PHONE_E164_MAX];      /* validated, E.164 */
    char cc[4];                      /* its calling code (sale_sms_region()) */
    char client[SALE_LIMIT_KEY_LEN]; /* its address's key, "" unknown */
    /* The code is decided: from another thread (see below). */
    void (*done)(struct sale_code *c);
    /* Set when it is decided: */
    int err;          /* 0: issued (and sent, with a webhook) */
    unsigned retry_s; /* > 0: not issued, the phone's limits: retry then */
    char code[7];     /* when issued */
    /* When issued: the code request's id, which a login may carry to be
     * checked against this code alone (sale_login()). */
    char request[STORE_CODE_REQUEST_LEN + 1];
    /* Private to the sale layer: */
    struct sale *sale;
};

/*
 * Issue a new six-digit login code for c->phone into c->code, unless the
 * phone had one too recently or too many this hour (the config's codes
 * limits): then c->retry_s says when. Earlier codes stay valid until they
 * expire. With a webhook (the config's sms) the code is sent there
 * through the SMS sender (common/outbound.h), without waiting for it:
 * -ECOMM when the webhook surely did not take it within
 * SALE_SMS_DEADLINE_MS (it refused, or was never reached), -EAGAIN when
 * the sender already holds as many codes as it may, -EUSERS when the
 * client's address has as many on their way as it may (at once): then
 * the code is not kept and does not count against the limits.
 * -ETIMEDOUT when the webhook was reached and did not answer in time:
 * the code may arrive, and is kept and counted. -EDQUOT when the codes
 * of c->cc had their budget this minute (cfg.sms.per_min; c->retry_s
 * says when to come back): nothing stored, nothing sent. Else 0 or
 * -errno in c->err.
 *
 * Waits for Redis (call it from a job). True: decided now, done() is not
 * called. False: handed to the sender; done() is called exactly once,
 * from another thread.
 */
bool sale_login_code_issue(struct sale *s, struct sale_code *c);

/* The calling code of SECKILL_SMS_REGIONS phone (E.164) is of, into cc;
 * false when it is of none (no code may be sent to it). From memory. */
bool sale_sms_region(const struct sale *s, const char *phone, char cc[4]);
/* Those calling codes as people write them ("+86, +852"), into out. */
void sale_sms_regions_text(const struct sale *s, char *out, size_t n);

/*
 * How much harder a code's proof of work for calling code cc is now: 1
 * while its codes of the last minute are at most half its budget
 * (cfg.sms.per_min), rising to SALE_POW_FACTOR_MAX at the budget. 1 when
 * Redis does not answer. Waits for Redis.
 */
#define SALE_POW_FACTOR_MAX 10
unsigned sale_sms_pow_factor(struct sale *s, const char *cc);

enum sale_login_outcome {
    SALE_LOGIN_OK,     /* user_id and gen are set */
    SALE_LOGIN_WRONG,  /* no live code of the phone matched */
    SALE_LOGIN_GONE,   /* the code request is used up or expired */
    SALE_LOGIN_LOCKED, /* too many wrong tries: wait retry_s */
    SALE_LOGIN_BANNED, /* the code was right, but the buyer is banned */
};

/* What a login found. */
struct sale_login {
    enum sale_login_outcome outcome;
    int64_t user_id;  /* the phone's user (made on its first login) */
    uint32_t gen;     /* its token generation, for its new token */
    unsigned retry_s; /* SALE_LOGIN_LOCKED */
};

/*
 * Check code against phone's live codes, tried from the client addr (a
 * key: an address, an IPv6 /64). Wrong tries are counted for the address
 * and for the phone, and make them wait (the config's codes limits). With
 * request (a code request's id, else NULL) only that request's code is
 * compared, SALE_CODE_REQUEST_TRIES times at most, and the waits neither
 * hold it nor count it: the owner of the phone, who has the request its
 * code came with, is not kept out by others' guesses. A match uses up
 * every code of the phone. 0 with *out, or -errno. Waits for Redis and
 * MySQL.
 */
int sale_login(struct sale *s, const char *phone, const char *code,
               const char *addr, const char *request, struct sale_login *out);

/*
 * A proof of work (its challenge, hex, good until expires_s) is used:
 * 0 the first time on any instance, -EALREADY after, or -errno. Waits
 * for Redis.
 */
int sale_pow_spend(struct sale *s, const char *challenge, int64_t expires_s);

/* ---- sessions: logging out, bans ---- */

enum sale_session {
    SALE_SESSION_OK,
    SALE_SESSION_REVOKED, /* the token was logged out */
    SALE_SESSION_BANNED,  /* its buyer is banned */
};

/*
 * What this instance knows of a verified token: from memory (see
 * sale/sessions.h for how soon another instance's change arrives). Never
 * waits.
 */
enum sale_session sale_session_check(struct sale *s,
                                     const struct token_claims *c);

/*
 * Log out the token of c, or (all) every token of its account issued
 * until now. Refused on every instance within a message's delay, on this
 * one at once. 0 or -errno (then it may or may not have happened: a retry
 * is harmless). Waits for MySQL and Redis.
 */
int sale_logout(struct sale *s, const struct token_claims *c, bool all);

/*
 * Ban (on) or unban buyer user_id, by who: a banned buyer's requests are
 * refused on every instance within a message's delay, and it cannot log
 * in. Idempotent; recorded in the audit log. 0 or -errno. Waits for MySQL
 * and Redis.
 */
int sale_user_ban(struct sale *s, int64_t user_id, const struct sale_actor *who,
                  bool on);

/* ---- who an admin action is by, and the audit log ---- */

/*
 * The admin behind an action and where it came from: every change an
 * admin makes is recorded with these in the audit log, in the change's own
 * transaction (a change that fails records nothing).
 */
struct sale_actor {
    int64_t admin_id; /* the admin token's id */
    char addr[64];    /* the client's address ("" when unknown) */
    /* The request's Idempotency-Key, or NULL: recorded with the change's
     * audit record, in its transaction (store_idem). A change whose key
     * was there already fails with -EALREADY, or -EBUSY while the first
     * is still running, and changes nothing; what the first recorded is
     * then in *idem. */
    struct store_idem *idem;
};

/* The first answer of a change that recorded idem (status, and the body
 * or NULL): kept for its retries. Waits for MySQL; a failure is logged
 * (a retry is then answered from the change's target as it is). */
void sale_idem_answer(struct sale *s, const struct store_idem *idem,
                      unsigned status, const char *body);
/* Free what a change left in idem. Never waits. */
void sale_idem_release(struct store_idem *idem);

/*
 * The audit log, newest first: records with id < before (0: from the
 * newest), of target_type (NULL: any) and target_id (0: any), at most max
 * into out. Waits for MySQL.
 */
int sale_audit_list(struct sale *s, int64_t before, const char *target_type,
                    int64_t target_id, struct store_audit_row *out, size_t max,
                    size_t *n);

/* ---- admins ---- */

/* Failed logins allowed within the window, refused before any password
 * is checked: per admin name from one client address (a guesser there is
 * stopped soon, and the admin elsewhere is not), per name from anywhere
 * (a slower line behind it), and per address (whatever the names). A
 * refusal for being busy counts against its address only. */
#define SALE_ADMIN_FAILS_PAIR 5
#define SALE_ADMIN_FAILS_NAME 50
#define SALE_ADMIN_FAILS_ADDR 20
#define SALE_ADMIN_FAILS_WINDOW_S 900
/* The hash's turns: one Argon2id (64 MiB, a core for about a tenth of a
 * second) per core, at most this many; a client address has one password
 * checked or waiting at a time, SALE_ADMIN_WAITING_MAX in all, and waits
 * at most SALE_ADMIN_WAIT_MS (64 a tenth of a second each on two cores
 * take 3.2 s). */
#define SALE_ADMIN_TURNS_MAX 4
#define SALE_ADMIN_WAITING_MAX 64
#define SALE_ADMIN_WAIT_MS 5000

enum sale_admin_outcome {
    SALE_ADMIN_OK,     /* admin_id and gen are set */
    SALE_ADMIN_WRONG,  /* no such admin, disabled, or a wrong password */
    SALE_ADMIN_LOCKED, /* too many failures: retry_s */
    SALE_ADMIN_BUSY,   /* this address has a login being checked, or the
                          turns are all taken for too long: retry_s */
};

/* An admin's login while it is decided (sale_admin_login()). */
struct sale_admin_call {
    /* Set by the caller: */
    const char *username;
    const char *password; /* len bytes; both kept until done() */
    size_t len;
    char addr[SALE_LIMIT_KEY_LEN]; /* the client's key (an address, a /64) */
    struct sale_actor who;         /* who->addr: what the audit records */
    /* Decided: from another thread (see below). */
    void (*done)(struct sale_admin_call *c);
    /* Set when it is decided: */
    int err; /* 0, or -errno: then out means nothing */
    enum sale_admin_outcome outcome;
    int64_t admin_id;
    uint32_t gen;     /* its token generation, for its new token */
    unsigned retry_s; /* SALE_ADMIN_LOCKED, SALE_ADMIN_BUSY */
    /* Private to the sale layer: */
    struct sale *sale;
    int lookup; /* store_admin_get()'s: 0, or -ENOENT */
    bool disabled, ok, busy;
    unsigned fails; /* its address's recent failures, when it asked */
    char hash[STORE_ADMIN_HASH_MAX];
    int64_t queued_ms;
    struct sale_admin_call *next;
};

/*
 * Check admin c->username's password from the client at c->addr. The
 * failures are counted (SALE_ADMIN_FAILS_*) and logged; the password is
 * checked on a turn of the instance's hash (SALE_ADMIN_TURNS_MAX), taken
 * in the order the addresses asked, one waiting per address, so that a
 * flood from a few addresses cannot take every turn. A login, and a wrong
 * password for an existing admin, are recorded in the audit log.
 *
 * Waits for Redis and MySQL (call it from a job). True: decided now,
 * done() is not called. False: waiting for a turn; done() is called
 * exactly once, from another thread.
 */
bool sale_admin_login(struct sale *s, struct sale_admin_call *c);

/* ---- vouchers ---- */

/*
 * Create voucher v (validated by the caller; v->mode is used when
 * mode_given, else the configured one), by who (recorded in the audit log
 * in the same transaction), and put an async sale's state into Redis;
 * every instance's cache hears of the new id. Sets v->id. 0; -EPERM, an
 * async sale this instance may not sell (its Redis may lose acknowledged
 * writes), or -EOPNOTSUPP, an async sale without a writer (none started),
 * nothing written; or -errno. Waits.
 */
int sale_voucher_create(struct sale *s, struct store_voucher *v,
                        bool mode_given, const struct sale_actor *who);

/* ---- the operator's controls of a sale (sale/controls.c) ----
 *
 * Each control is one MySQL transaction (store.h, "the operator's
 * controls"), decided on the voucher's locked rows and recorded in the
 * audit log, by who, in that transaction; for an async sale one Redis
 * script then brings its Redis state up to what MySQL committed
 * (async_sale_control(): retried for up to SALE_CONTROL_REDIS_MS, and
 * by the reconciliation after that). Then every instance's voucher cache
 * hears of the change (vcache_voucher_changed(): pub/sub, within a
 * message's delay; a lost message within the cache's TTL).
 *
 * What is guaranteed once a control answered 0 with STORE_CONTROL_DONE:
 *   - a pause or a stop: no purchase is sold after it, on any instance,
 *     whatever its cache says: a sync sale's CAS (store_purchase_batch())
 *     and an async sale's script refuse a halted sale themselves; a
 *     purchase decided before it (committed in MySQL, or sold in Redis
 *     before the script) stands, and an async one is still written to
 *     MySQL. The purchases then answer 409 PAUSED or ENDED.
 *   - a restock: MySQL's stock and initial stock grew together; an async
 *     sale's Redis too (its reconciliation never sees a disagreement:
 *     async/compare.h); sold-out flags are dropped on every instance (a
 *     segmented voucher's segments seen empty by another process sell
 *     again within a second).
 * When an async sale's Redis did not take it in time (frozen for a
 * rebuild, or away) the control is still done, and answered so: a frozen
 * sale and an unreachable Redis sell nothing, a rebuild makes the sale
 * from MySQL (control included), and the reconciliation applies what
 * MySQL committed once Redis answers; meanwhile every instance's voucher
 * cache refuses what the control forbids. Wait for MySQL and Redis: call
 * from a job. A control given an Idempotency-Key (who->idem) may also
 * fail with -EALREADY or -EBUSY (struct sale_actor).
 */

/* How long a control retries its Redis script before it leaves it to
 * the reconciliation. */
#define SALE_CONTROL_REDIS_MS 3000

/* Pause (pause) or resume voucher_id's sale; *out as the store says. */
int sale_voucher_pause(struct sale *s, int64_t voucher_id, bool pause,
                       const struct sale_actor *who, enum store_control *out);
/* End voucher_id's sale now. */
int sale_voucher_stop(struct sale *s, int64_t voucher_id,
                      const struct sale_actor *who, enum store_control *out);
/* Add units (1..) to voucher_id's stock and initial stock; *why names
 * a refusal. */
int sale_voucher_restock(struct sale *s, int64_t voucher_id, int64_t units,
                         const struct sale_actor *who, enum store_control *out,
                         const char **why);
/* Edit voucher_id (store_voucher_patch()); *why names a refused field. */
int sale_voucher_patch(struct sale *s, int64_t voucher_id,
                       const struct store_voucher_patch *p,
                       const struct sale_actor *who, enum store_control *out,
                       const char **why);
/* Delete voucher_id before its sale begins, with its Redis state (an
 * async sale's, a queue sale's waiting room); *why when refused. */
int sale_voucher_delete(struct sale *s, int64_t voucher_id,
                        const struct sale_actor *who, enum store_control *out,
                        const char **why);
/* Read voucher_id as just committed (the primary, never a replica). */
int sale_voucher_get_fresh(struct sale *s, int64_t id, struct store_voucher *v);

/* store_voucher_get(), store_voucher_list() (before: ids below it, 0
 * from the newest), store_voucher_stats(), on this thread's store.
 * Wait. */
int sale_voucher_get(struct sale *s, int64_t id, struct store_voucher *v);
int sale_vouchers_list(struct sale *s, int64_t shop_id, int64_t before,
                       unsigned limit, struct store_voucher **items, size_t *n);
int sale_voucher_stats(struct sale *s, int64_t id,
                       struct store_voucher_stats *out);

/*
 * Voucher voucher_id's orders of status (0: any), at most max into out
 * (*n): with desc, ids below from (0: the newest) newest first, else ids
 * above from, oldest first. From MySQL only: an async sale's orders on
 * their way there are not in it yet. Waits.
 */
int sale_voucher_orders(struct sale *s, int64_t voucher_id, int status,
                        bool desc, int64_t from, struct store_order *out,
                        size_t max, size_t *n);

/* ---- the listing of sales (listing.c) ---- */

/* The snapshot holds at most this many live sales and as many upcoming
 * ones: with more, the live ones that end last and the upcoming ones that
 * begin last are left out (logged, and the answer says truncated). */
#define SALE_LISTING_MAX 1000
/* The farthest ahead an upcoming sale is listed. */
#define SALE_LISTING_WINDOW_MAX_S (30 * 86400)
/* A snapshot is refreshed when older than this, by one query. */
#define SALE_LISTING_REFRESH_MS 1000

enum sale_listing_status { SALE_LISTING_LIVE, SALE_LISTING_UPCOMING };

/* What a request lists. */
struct sale_listing_query {
    enum sale_listing_status status;
    int64_t now_s;    /* the request's time (epoch s) */
    int64_t within_s; /* upcoming: beginning within this (1.._MAX_S) */
    int64_t shop_id;  /* > 0: only this shop's */
    /* The cursor: the last sale of the previous page, its key (live: its
     * end time, upcoming: its begin time) and id. */
    bool cursor_given;
    int64_t cursor_key, cursor_id;
    size_t limit; /* >= 1 */
};

/* One page of sales: pointers into a snapshot that the page holds. */
struct sale_sales_page {
    const struct store_voucher **items;
    int64_t *stock; /* items[i]'s stock to show (see sale_sales_list()) */
    size_t n;
    bool more;          /* another page follows */
    bool truncated;     /* the snapshot left sales out (SALE_LISTING_MAX) */
    int64_t snapshot_s; /* when the snapshot was taken (epoch s) */
    struct sale_snapshot *priv;
};

/*
 * The sales live at q->now_s (begin <= now < end), ending soonest first,
 * or upcoming (now < begin <= now + within), beginning soonest first;
 * ties by id. From the instance's snapshot, refreshed by at most one
 * MySQL query a second (listing.c): a sale created or changed shows
 * within about a second. Stock is MySQL's (an async sale's row lags
 * Redis by the writer's delay, usually well under a second), except
 * that an async sale this instance's voucher cache knows as sold out
 * shows 0. 0 with *page (release it with sale_sales_page_free()), or
 * -errno (no snapshot younger than a minute, and the query failed).
 * May wait for MySQL.
 */
int sale_sales_list(struct sale *s, const struct sale_listing_query *q,
                    struct sale_sales_page *page);
/* Release page. Accepts NULL and a page already released. */
void sale_sales_page_free(struct sale_sales_page *page);

/* ---- the purchase ---- */

enum sale_outcome {
    SALE_ORDERED,         /* order order_id is committed in MySQL */
    SALE_PENDING,         /* an async sale sold it: order order_id is on its
                           * way to MySQL (the writer will write it) */
    SALE_NOT_FOUND,       /* no voucher with this id */
    SALE_NOT_SECKILL,     /* not sold in a flash sale */
    SALE_NOT_STARTED,     /* before the sale's begin */
    SALE_ENDED,           /* at or after its end (or stopped) */
    SALE_PAUSED,          /* an operator paused the sale (nothing written) */
    SALE_SOLD_OUT,        /* no unit left (nothing written) */
    SALE_DUPLICATE,       /* the buyer has an order for it (nothing written) */
    SALE_BUSY,            /* the buyer's other purchase holds the lock */
    SALE_QUEUE_FULL,      /* too many purchases of the voucher wait: retry */
    SALE_BACKLOG,         /* too many of an async sale's orders wait for
                           * MySQL: retry */
    SALE_UNCONFIRMED,     /* sold in Redis, but its replicas did not confirm
                           * it in time: order order_id may be written, or
                           * lost with a failover (the outcome is unknown) */
    SALE_RATE_LIMITED,    /* a bucket of the request's limit is empty */
    SALE_TICKET_REQUIRED, /* a queue sale, and no good ticket of this
                           * buyer for it (missing, another's, expired) */
    SALE_FAILED,          /* err says what (nothing written unless it says):
                           * -EAGAIN the async sale is being repaired, or
                           * Redis refused its script (its cluster slot
                           * moving, say): nothing bought; -EPERM
                           * this instance may not sell async sales; -ETIME
                           * the budget ran out; -ECANCELED it waited out its
                           * budget before it could start; -ESHUTDOWN the
                           * service is stopping; -EINPROGRESS the outcome is
                           * unknown; a backend's -errno */
};

/* One purchase, owned by the caller until it is decided. */
struct sale_buy {
    /* Set by the caller: */
    int64_t voucher_id;
    int64_t user_id;
    int64_t arrived_ms;      /* monotonic: the budget counts from here */
    const char *ticket;      /* the waiting room's ticket, or NULL */
    struct sale_limit limit; /* charged before any round trip */
    /* Called once, on the calling thread inside sale_buy(), right before
     * the purchase goes to another thread: the caller parks its request
     * there, and the answer comes through done(). */
    void (*park)(struct sale_buy *b);
    /* The purchase is decided: from another thread, or from inside
     * sale_buy() after park() when the pool or the engine refused it. */
    void (*done)(struct sale_buy *b);
    /* Set when it is decided: */
    enum sale_outcome outcome;
    int err;          /* SALE_FAILED */
    int64_t order_id; /* SALE_ORDERED, SALE_PENDING, SALE_UNCONFIRMED */
    unsigned retry_s; /* SALE_RATE_LIMITED */
    /* Private to the sale layer: */
    struct sale_purchase *priv;
};

/*
 * Buy one unit of b->voucher_id for b->user_id. Never waits. True: decided
 * now, from memory (b->outcome; park() and done() are not called). False:
 * handed on: park() was called, and done() will be called exactly once.
 */
bool sale_buy(struct sale *s, struct sale_buy *b);

/* ---- the waiting room ---- */

enum sale_queue_outcome {
    SALE_QUEUE_OK,          /* the place is below */
    SALE_QUEUE_NOT_FOUND,   /* no such voucher */
    SALE_QUEUE_NOT_SECKILL, /* not sold in a flash sale */
    SALE_QUEUE_OPEN,        /* a sale without a waiting room */
    SALE_QUEUE_NOT_OPEN,    /* the room opens in retry_ms */
    SALE_QUEUE_ENDED,       /* the sale has ended */
    SALE_QUEUE_SOLD_OUT,    /* nothing left to wait for */
    SALE_QUEUE_NOT_JOINED,  /* a poll of a buyer without a place */
    SALE_QUEUE_TOO_SOON,    /* a poll too soon after the last: retry_ms */
};

/* A buyer's place in a sale's waiting room. */
struct sale_queue_place {
    enum sale_queue_outcome outcome;
    int64_t position;       /* 1-based; 0 before the begin (drawn then) */
    bool admitted;          /* it may buy, with ticket */
    int64_t eta_ms;         /* until it is admitted (0 when it is) */
    int64_t begin_in_ms;    /* until the sale begins (<= 0: it has) */
    int64_t retry_ms;       /* SALE_QUEUE_NOT_OPEN, SALE_QUEUE_TOO_SOON */
    char ticket[80];        /* admitted: the purchase's ticket */
    int64_t ticket_left_ms; /* admitted: how long it is good (<= 0: over) */
};

/*
 * Join voucher_id's waiting room as user_id (a place that exists is
 * kept: joining twice is joining once), or (poll) read the place. Before
 * the begin a place has no position yet: at the begin everyone who
 * joined before is in a random order (drawn when they joined), and
 * latecomers follow in the order they came. Places are admitted at the
 * configured rate from the begin, by Redis' clock, but none before its
 * buyer joined (a latecomer behind a short queue is admitted as it
 * joins); an admitted place gets a ticket good until ticket_ttl_s after
 * its admission, fixed by the place. 0 with *out, or -errno. Waits for
 * Redis (and MySQL when the voucher is not cached).
 */
int sale_queue_join(struct sale *s, int64_t voucher_id, int64_t user_id,
                    struct sale_queue_place *out);

/* When the waiting room of a queue sale beginning at begin_time opens
 * (epoch s). No I/O. */
int64_t sale_queue_opens_at(const struct sale *s, int64_t begin_time);
int sale_queue_poll(struct sale *s, int64_t voucher_id, int64_t user_id,
                    struct sale_queue_place *out);

/* A queue sale's joined places and the admitted ones (of voucher v's
 * stats: its window). Waits for Redis. */
int sale_queue_counts(struct sale *s, int64_t voucher_id,
                      const struct store_voucher_stats *v, int64_t *joined,
                      int64_t *admitted);

/* ---- orders ---- */

/*
 * Read order order_id, from MySQL or (*pending) as an async sale's order
 * on its way there (status unpaid, its times as they will be written); a
 * pending order reads even while MySQL is away. user_id > 0: only that
 * user's order (someone else's reads as absent, -ENOENT, so that ids
 * cannot be probed); 0: any. 0, -ENOENT or -errno. Waits.
 */
int sale_order_get(struct sale *s, int64_t order_id, int64_t user_id,
                   struct store_order *o, bool *pending);

/* One order of a list: as sale_order_get() reads it. */
struct sale_order_row {
    struct store_order order;
    bool pending;
};

/*
 * User user_id's orders with id < before (0: from the newest), newest
 * first by id, at most limit (1..100): MySQL's and those on their way
 * there (a 202, or a purchase whose outcome was unknown: the buyer sees
 * what became of it), merged by id. Order ids grow with time, and an
 * order keeps its id when the writer moves it into MySQL, so pages cut
 * at an id (the last one shown: the next page's before) show each order
 * once, wherever it is when each page is read. *more: orders below the
 * last one remain. *rows is a new array of *n (free(3) it; NULL when
 * empty). Redis unreachable: MySQL's alone. 0 or -errno. Waits.
 */
int sale_orders_list(struct sale *s, int64_t user_id, int64_t before,
                     unsigned limit, struct sale_order_row **rows, size_t *n,
                     bool *more);

#define SALE_TXN_MAX 64

/* A cancel or a payment, owned by the caller until done() is called. */
struct sale_order_op {
    /* Set by the caller: */
    int64_t order_id;
    int64_t user_id; /* > 0: only this user's order; 0: any (an admin) */
    /* A payment's: */
    int64_t amount;             /* cents; < 0: the voucher's price (a simulated
                                 * provider) */
    char txn[SALE_TXN_MAX + 1]; /* the provider's transaction id */
    void (*done)(struct sale_order_op *op);
    /* Set before done() is called: */
    int err;      /* -errno of the backends; the rest then unset */
    bool found;   /* false: no such order (or someone else's) */
    bool pending; /* an async sale's order not in MySQL yet: it cannot be
                   * cancelled or paid for a moment */
    union {
        enum store_close close; /* a cancel's */
        enum store_pay pay;     /* a payment's */
    } outcome;
    struct store_order order; /* as it is now */
    int64_t pay_value;        /* a payment's: the voucher's price */
    /* Private to the sale layer: */
    struct sale_order_task *priv;
};

/*
 * Cancel op->order_id: unpaid, it is cancelled and its unit goes back on
 * sale (STORE_CLOSE_DONE; a second cancel answers STORE_CLOSE_ALREADY).
 * Or record the payment op->txn of op->amount for it (enum store_pay: a
 * late or second payment is refused and logged as one to refund). Never
 * waits: the work runs on the purchase engine (it may wait for a row
 * another transaction holds). 0: done() will be called exactly once, from
 * an engine thread; or -ESHUTDOWN, refused at once (done() is not called).
 */
int sale_cancel(struct sale *s, struct sale_order_op *op);
int sale_pay(struct sale *s, struct sale_order_op *op);

/*
 * Orders orders[0..n) of users[0..n) of voucher_id were closed (cancelled,
 * expired) and their units are back in MySQL's stock: give them back to
 * an async sale's Redis state too (the buyer may buy again; once per
 * order, however often this is called), and tell every instance's voucher
 * cache that the voucher sells again. With st, the calling thread's store
 * (an engine thread's, the expiry's). Waits.
 */
void sale_units_returned(struct sale *s, struct store *st, int64_t voucher_id,
                         const int64_t *orders, const int64_t *users, size_t n);

/* ---- refunds ---- */

/* store_refunds_list() and store_refund_done() on this thread's store.
 * Wait for MySQL. */
int sale_refunds_list(struct sale *s, int status, int64_t before,
                      struct store_refund *out, size_t max, size_t *n);
int sale_refund_done(struct sale *s, int64_t id, const struct sale_actor *who,
                     struct store_refund *r);

/* ---- how the instance is doing ---- */

/* The backends a sale needs, as /readyz reports them. */
struct sale_health {
    bool mysql_ok, redis_ok;
    /* On a Redis Cluster: "ok" when every primary says cluster_state:ok,
     * else "fail" or "unreachable" (redis_ok is then false); NULL on one
     * Redis. */
    const char *redis_cluster;
    int lock_err;             /* 0, or the lock backend's ping error */
    const char *lock_backend; /* "redis", "zookeeper", ... ("none") */
    /* The read replicas, one per shard that has one, in shard order:
     * each one's state ("ok", "lagging", "down", ...). */
    struct {
        unsigned shard;
        const char *why;
    } replicas[STORE_SHARDS_MAX];
    size_t nreplicas;
    bool sharded; /* sales are sharded over several primaries */
};

/* Ping MySQL and Redis on this thread's store and the lock backend. Waits. */
void sale_health_check(struct sale *s, struct sale_health *h);

/* The deepest queues and backlogs shown by sale_gauges_read(). */
#define SALE_GAUGES_TOP 5

/* What /metrics shows of the sale's machinery. */
struct sale_gauges {
    int64_t queue_ids[SALE_GAUGES_TOP];
    unsigned queue_depths[SALE_GAUGES_TOP];
    int64_t backlog_ids[SALE_GAUGES_TOP];
    unsigned backlog_depths[SALE_GAUGES_TOP];
    struct metrics_replica replicas[STORE_SHARDS_MAX];
};

/*
 * Fill x's gauges (everything but the routes): the deepest purchase
 * queues, the queues and per-voucher states kept, the async backlogs and
 * the writer's lag, the read replica; g holds the arrays x points to.
 * Never waits (no I/O).
 */
void sale_gauges_read(struct sale *s, struct sale_gauges *g,
                      struct metrics_extra *x);

#endif
