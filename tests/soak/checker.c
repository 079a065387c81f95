/*
 * checker.c - the end of make soak: once every fault is healed and the
 * system has settled, the history of every request is held against
 * MySQL, Redis and the instances' logs (docs/reliability.md):
 *
 *   - every 201 and 202 is an order in MySQL, of that user and voucher
 *     (no window of documented loss is open in this set-up: Redis runs
 *     with appendfsync always and no SECKILL_ASYNC_ACCEPT_LOSS);
 *   - an order no 201 or 202 named comes from a purchase whose outcome
 *     was unknown (no answer, 500, 502, 504, 503 "outcome unknown");
 *     409 ALREADY_PURCHASED only while the user held an active order;
 *   - no user holds two active orders for one voucher, at the end or
 *     one after a paid one; no id is answered twice or reused;
 *   - for every voucher stock + unpaid + paid = initial, never < 0 (also
 *     sampled every second while the faults ran);
 *   - no order paid twice; a 200 to a payment or a cancel is what MySQL
 *     has; every payment refused as ORDER_CLOSED (or ORDER_PAID, a second
 *     transaction) is logged by the service for a refund;
 *   - every async sale ends unfrozen, with an empty backlog, no dead
 *     letter, and Redis' stock and buyers equal to MySQL's stock and
 *     active users; a sale rebuilt from MySQL needs a Redis failover to
 *     explain it (else Redis and MySQL disagreed on their own);
 *   - every request was answered within SOAK_ANSWER_MS; no instance
 *     crashed or stopped uncleanly;
 *   - the operator's changes (each with an Idempotency-Key, whose row in
 *     MySQL exists exactly when the change committed): none that
 *     committed was answered only with errors that invite a retry, none
 *     answered 2xx is missing; a paused sale decided no order from the
 *     pause's 200 to the resume's request, a stopped one none after the
 *     stop's 200; every sale's initial stock is its created (or edited)
 *     stock plus the units of each restock that committed, once, with
 *     one audit record each; a deleted sale is gone; a refund marked
 *     done is done; a banned buyer has no order decided from a second
 *     after the ban's 200 to the unban, and is not refused after the
 *     unban; a buyer with a waiting room's ticket (a latecomer's good
 *     for a ticket's life after it joined) is not refused it; no order
 *     is paid after its deadline.
 *
 * It prints the faults injected, the requests per outcome and the
 * verdict; for each kind of violation, the first few with the window of
 * history around them (the requests of that order, user and voucher, the
 * faults and the instances' log lines of those seconds).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idgen/idgen.h"
#include "tests/soak/soak.h"

#define VIOLATIONS_SHOWN 3
#define WINDOW_BEFORE_MS 15000
#define WINDOW_AFTER_MS 5000
#define WINDOW_LINES 16
/* A sale rebuilt this long after a Redis failover is the failover's. */
#define REPAIR_AFTER_FAILOVER_MS 30000
/* A sale found missing this soon after its creation was answered may
 * simply not have been preheated yet. */
#define PREHEAT_RACE_MS 10000
/* Decision times are read from MySQL's NOW(3) (a sync order's insert)
 * and Redis' TIME (an async order's stream id), the driver's from
 * gettimeofday: one machine's clock, which the nemesis never steps for
 * MySQL, Redis or the driver (only for the instances). This much covers
 * the rounding of the three readings. */
#define DECIDED_MARGIN_MS 100
/* The promise of a ban: on every instance within a second. */
#define BAN_TOLD_MS 1000
/* A ticket checked this close to its expiry may meet an instance clock
 * a second off (libfaketime re-reads its offset every second). */
#define TICKET_MARGIN_MS 1000

struct violation {
    char kind[32];
    int64_t user, voucher, order;
    int64_t at_ms; /* soak_ms() of the event around which to look */
    char text[320];
};

struct vrow {
    int64_t id, initial, stock, unpaid, paid;
    bool async;
};

struct orow {
    int64_t id, user, voucher, close_ms; /* close_ms: soak_ms(), 0 open */
    int status;
    char txn[64];
    /* soak_ms(): when it was decided (a sync order's insert, an async
     * one's place in its stream), paid (0: not) and its pay deadline. */
    int64_t decided_ms, paid_ms, deadline_ms;
};

static struct {
    pthread_mutex_t mu;
    struct violation *v;
    size_t n, cap;
} viol = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void violate(const char *kind, int64_t user, int64_t voucher,
                    int64_t order, int64_t at_ms, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void violate(const char *kind, int64_t user, int64_t voucher,
                    int64_t order, int64_t at_ms, const char *fmt, ...)
{
    struct violation *x;
    va_list ap;

    pthread_mutex_lock(&viol.mu);
    if (viol.n == viol.cap) {
        viol.cap = viol.cap ? viol.cap * 2 : 64;
        viol.v = xrealloc(viol.v, viol.cap * sizeof(*x));
    }
    x = &viol.v[viol.n++];
    memset(x, 0, sizeof(*x));
    snprintf(x->kind, sizeof(x->kind), "%s", kind);
    x->user = user;
    x->voucher = voucher;
    x->order = order;
    x->at_ms = at_ms;
    va_start(ap, fmt);
    vsnprintf(x->text, sizeof(x->text), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&viol.mu);
}

void soak_violation(const char *kind, int64_t user, int64_t voucher,
                    int64_t order, int64_t at_ms, const char *fmt, ...)
{
    char text[320];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    violate(kind, user, voucher, order, at_ms, "%s", text);
}

void soak_problem(const char *kind, const char *fmt, ...)
{
    char text[320];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    say("PROBLEM %s: %s", kind, text);
    violate(kind, 0, 0, 0, soak_ms(), "%s", text);
}

/* ---- the stock sampler ---- */

static struct {
    pthread_t th;
    atomic_int stop;
    atomic_long samples;
} samp;

/* Every voucher: stock + unpaid + paid = initial, stock >= 0, in one
 * statement (one snapshot: a purchase, a cancel and an expiry each change
 * the stock and the order in one transaction). */
#define BALANCE_SQL                                                            \
    "SELECT s.voucher_id, COALESCE(s.initial_stock, -1), s.stock + "           \
    "COALESCE((SELECT SUM(g.stock) FROM seckill_stock_segments g WHERE "       \
    "g.voucher_id = s.voucher_id), 0), (SELECT COUNT(*) FROM voucher_orders "  \
    "o WHERE o.voucher_id = s.voucher_id AND o.status = 1), (SELECT COUNT(*) " \
    "FROM voucher_orders o WHERE o.voucher_id = s.voucher_id AND o.status = "  \
    "2), s.purchase_mode FROM seckill_vouchers s ORDER BY s.voucher_id"

static struct vrow *vouchers_read(MYSQL *my, size_t *n)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    struct vrow *v;
    size_t k = 0;

    *n = 0;
    if (mysql_query(my, BALANCE_SQL) != 0 || !(res = mysql_store_result(my)))
        return NULL;
    v = xcalloc(mysql_num_rows(res) + 1, sizeof(*v));
    while ((row = mysql_fetch_row(res))) {
        v[k].id = strtoll(row[0], NULL, 10);
        v[k].initial = strtoll(row[1], NULL, 10);
        v[k].stock = strtoll(row[2], NULL, 10);
        v[k].unpaid = strtoll(row[3], NULL, 10);
        v[k].paid = strtoll(row[4], NULL, 10);
        v[k].async = row[5] && strcmp(row[5], "1") == 0;
        k++;
    }
    mysql_free_result(res);
    *n = k;
    return v;
}

static void balance_check(const struct vrow *v, size_t n, const char *when)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].initial < 0)
            continue;
        if (v[i].stock < 0 ||
            v[i].stock + v[i].unpaid + v[i].paid != v[i].initial)
            violate("stock-unbalanced", 0, v[i].id, 0, soak_ms(),
                    "%s: voucher %lld has stock %lld + unpaid %lld + paid "
                    "%lld != initial %lld",
                    when, (long long)v[i].id, (long long)v[i].stock,
                    (long long)v[i].unpaid, (long long)v[i].paid,
                    (long long)v[i].initial);
    }
}

/* Every shard's vouchers every second (each voucher is on one shard, so
 * one statement per shard is a snapshot of each voucher). */
static void *sampler_main(void *arg)
{
    MYSQL *my[SOAK_SHARDS_MAX] = {0};

    (void)arg;
    while (!atomic_load(&samp.stop)) {
        bool all = true;

        for (int s = 0; s < soak_cfg.shards; s++) {
            struct vrow *v;
            size_t n;

            if (!my[s])
                my[s] = world_mysql(s, 2);
            v = my[s] ? vouchers_read(my[s], &n) : NULL;
            if (v) {
                balance_check(v, n, "sampled");
            } else if (my[s]) {
                mysql_close(my[s]);
                my[s] = NULL;
            }
            all = all && v;
            free(v);
        }
        if (all)
            atomic_fetch_add(&samp.samples, 1);
        sleep_ms(1000);
    }
    for (int s = 0; s < SOAK_SHARDS_MAX; s++)
        if (my[s])
            mysql_close(my[s]);
    return NULL;
}

void sampler_run_start(void)
{
    if (pthread_create(&samp.th, NULL, sampler_main, NULL) != 0)
        abort();
}

void sampler_run_stop(void)
{
    atomic_store(&samp.stop, 1);
    pthread_join(samp.th, NULL);
}

/* ---- reading MySQL ---- */

static struct orow *orders_read(MYSQL *my, size_t *n)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    struct orow *o;
    size_t k = 0;
    char q[640];

    *n = 0;

    snprintf(q, sizeof(q),
             "SELECT id, user_id, voucher_id, status, COALESCE(txn_id, ''), "
             "COALESCE(ROUND(UNIX_TIMESTAMP(close_time) * 1000), 0), "
             "IF(stream_pos IS NULL, COALESCE(ROUND(UNIX_TIMESTAMP("
             "pay_deadline) * 1000), 0) - %d, stream_pos >> 20), "
             "COALESCE(ROUND(UNIX_TIMESTAMP(pay_time) * 1000), 0), "
             "COALESCE(ROUND(UNIX_TIMESTAMP(pay_deadline) * 1000), 0) FROM "
             "voucher_orders",
             SOAK_PAY_TIMEOUT_S * 1000);
    if (mysql_query(my, q) != 0 || !(res = mysql_store_result(my)))
        return NULL;
    o = xcalloc(mysql_num_rows(res) + 1, sizeof(*o));
    while ((row = mysql_fetch_row(res))) {
        int64_t close = strtoll(row[5], NULL, 10);
        int64_t paid = strtoll(row[7], NULL, 10);

        o[k].id = strtoll(row[0], NULL, 10);
        o[k].user = strtoll(row[1], NULL, 10);
        o[k].voucher = strtoll(row[2], NULL, 10);
        o[k].status = atoi(row[3]);
        snprintf(o[k].txn, sizeof(o[k].txn), "%s", row[4]);
        o[k].close_ms = close ? close - soak_t0_ms : 0;
        o[k].decided_ms = strtoll(row[6], NULL, 10) - soak_t0_ms;
        o[k].paid_ms = paid ? paid - soak_t0_ms : 0;
        o[k].deadline_ms = strtoll(row[8], NULL, 10) - soak_t0_ms;
        k++;
    }
    mysql_free_result(res);
    *n = k;
    return o;
}

/* A connection to shard s's MariaDB (my for shard 0), in UTC; NULL after
 * ten seconds of trying. Close it with shard_done(). */
static MYSQL *shard_open(MYSQL *my, int s)
{
    MYSQL *c = s ? NULL : my;

    for (int tries = 0; !c && tries < 50; tries++) {
        c = world_mysql(s, 10);
        if (!c)
            sleep_ms(200);
    }
    if (c && s)
        mysql_query(c, "SET time_zone = '+00:00'");
    return c;
}

static void shard_done(MYSQL *c, int s)
{
    if (c && s)
        mysql_close(c);
}

/* Every shard's orders and vouchers, each in one list (a voucher and its
 * orders live on one shard); my is shard 0's. 0, or -1 with nothing
 * returned. */
static int shards_read(MYSQL *my, struct orow **o, size_t *no, struct vrow **v,
                       size_t *nv)
{
    *o = NULL;
    *v = NULL;
    *no = *nv = 0;
    for (int s = 0; s < soak_cfg.shards; s++) {
        MYSQL *c = shard_open(my, s);
        struct orow *so = NULL;
        struct vrow *sv = NULL;
        size_t nso = 0, nsv = 0;

        if (c)
            so = orders_read(c, &nso);
        if (so)
            sv = vouchers_read(c, &nsv);
        shard_done(c, s);
        if (!so || !sv) {
            free(so);
            free(*o);
            *o = NULL;
            free(*v);
            *v = NULL;
            return -1;
        }
        *o = xrealloc(*o, (*no + nso + 1) * sizeof(**o));
        memcpy(*o + *no, so, nso * sizeof(*so));
        *no += nso;
        *v = xrealloc(*v, (*nv + nsv + 1) * sizeof(**v));
        memcpy(*v + *nv, sv, nsv * sizeof(*sv));
        *nv += nsv;
        free(so);
        free(sv);
    }
    return 0;
}

static int cmp_orow_id(const void *a, const void *b)
{
    const struct orow *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static int cmp_orow_uv(const void *a, const void *b)
{
    const struct orow *x = a, *y = b;

    if (x->user != y->user)
        return (x->user > y->user) - (x->user < y->user);
    if (x->voucher != y->voucher)
        return (x->voucher > y->voucher) - (x->voucher < y->voucher);
    return (x->id > y->id) - (x->id < y->id);
}

static struct orow *order_find(struct orow *by_id, size_t n, int64_t id)
{
    struct orow key = {.id = id};

    return bsearch(&key, by_id, n, sizeof(key), cmp_orow_id);
}

/* When the order was sold, on the driver's clock (its id's second). */
static int64_t order_start_ms(int64_t id)
{
    int64_t s;
    uint32_t seq;

    idgen_decode(id, &s, &seq);
    return s * 1000 - soak_t0_ms;
}

/* ---- the history ---- */

static bool sold(const struct hist *h)
{
    return h->op == OP_BUY && (h->status == 201 || h->status == 202);
}

/* The purchase may have bought or not: no answer, 500, 502, 504, a 503
 * that says the outcome is unknown, or one that is not the service's. */
static bool indefinite(const struct hist *h)
{
    return h->status == 0 || h->status == 500 || h->status == 502 ||
           h->status == 504 ||
           (h->status == 503 && (h->ambiguous || strcmp(h->code, "-") == 0));
}

static int cmp_hist_uv(const void *a, const void *b)
{
    const struct hist *x = a, *y = b;

    if (x->user != y->user)
        return (x->user > y->user) - (x->user < y->user);
    if (x->voucher != y->voucher)
        return (x->voucher > y->voucher) - (x->voucher < y->voucher);
    return (x->sent_ms > y->sent_ms) - (x->sent_ms < y->sent_ms);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void check_answers(struct hist *h, size_t nh)
{
    size_t ns = 0;
    int64_t *ids = xcalloc(nh + 1, sizeof(*ids));

    for (size_t i = 0; i < nh; i++) {
        if (h[i].status == 0)
            violate("unanswered", h[i].user, h[i].voucher, h[i].order,
                    h[i].sent_ms,
                    "%s by user %lld sent at %.1f s got no answer within "
                    "%d s",
                    op_names[h[i].op], (long long)h[i].user, h[i].sent_ms / 1e3,
                    SOAK_CLIENT_TIMEOUT_S);
        else if (h[i].done_ms - h[i].sent_ms > SOAK_ANSWER_MS)
            violate("slow-answer", h[i].user, h[i].voucher, h[i].order,
                    h[i].sent_ms,
                    "%s by user %lld sent at %.1f s answered %ld after "
                    "%lld ms",
                    op_names[h[i].op], (long long)h[i].user, h[i].sent_ms / 1e3,
                    h[i].status, (long long)(h[i].done_ms - h[i].sent_ms));
        if (sold(&h[i]) && h[i].order > 0)
            ids[ns++] = h[i].order;
    }
    qsort(ids, ns, sizeof(*ids), cmp_i64);
    for (size_t i = 1; i < ns; i++)
        if (ids[i] == ids[i - 1])
            violate("id-answered-twice", 0, 0, ids[i], 0,
                    "order id %lld was answered to two purchases",
                    (long long)ids[i]);
    free(ids);
}

/* Every 201 and 202 an order of its user and voucher. */
static void check_sold(struct hist *h, size_t nh, struct orow *by_id, size_t n)
{
    for (size_t i = 0; i < nh; i++) {
        struct orow *o;

        if (!sold(&h[i]))
            continue;
        o = order_find(by_id, n, h[i].order);
        if (!o)
            violate("sold-not-in-mysql", h[i].user, h[i].voucher, h[i].order,
                    h[i].done_ms,
                    "%ld order %lld of user %lld, voucher %lld (answered at "
                    "%.1f s) is not in MySQL",
                    h[i].status, (long long)h[i].order, (long long)h[i].user,
                    (long long)h[i].voucher, h[i].done_ms / 1e3);
        else if (o->user != h[i].user || o->voucher != h[i].voucher)
            violate("sold-wrong-owner", h[i].user, h[i].voucher, h[i].order,
                    h[i].done_ms,
                    "%ld order %lld of user %lld, voucher %lld is user "
                    "%lld's, voucher %lld in MySQL",
                    h[i].status, (long long)h[i].order, (long long)h[i].user,
                    (long long)h[i].voucher, (long long)o->user,
                    (long long)o->voucher);
    }
}

/* Whether a fault between from_ms and to_ms may have held up a unit's
 * return to Redis: an instance stopped, killed or restarted, Redis
 * failing over or slow or cut off, MySQL killed (a close whose commit
 * went unanswered). */
static bool return_delayed(const struct fault *f, size_t nf, int64_t from_ms,
                           int64_t to_ms)
{
    for (size_t i = 0; i < nf; i++)
        if (fault_delays_returns(f[i].kind) && f[i].start_ms <= to_ms &&
            (!f[i].heal_ms || f[i].heal_ms >= from_ms - 1000))
            return true;
    return false;
}

/* One user and voucher: its purchases h[0..nh) (by time) and orders
 * o[0..no) (by id). */
static void check_user_voucher(const struct hist *h, size_t nh,
                               const struct orow *o, size_t no,
                               const struct fault *f, size_t nf)
{
    int unnamed = 0, unknown = 0, active = 0;
    int64_t paid = 0;

    for (size_t k = 0; k < no; k++) {
        bool named = false;

        for (size_t i = 0; i < nh && !named; i++)
            named = sold(&h[i]) && h[i].order == o[k].id;
        unnamed += !named;
        active += o[k].status == 1 || o[k].status == 2;
        if (paid && o[k].id > paid)
            violate("two-active-orders", o[k].user, o[k].voucher, o[k].id,
                    order_start_ms(o[k].id),
                    "user %lld bought voucher %lld again (order %lld) while "
                    "holding paid order %lld",
                    (long long)o[k].user, (long long)o[k].voucher,
                    (long long)o[k].id, (long long)paid);
        if (o[k].status == 2 && !paid)
            paid = o[k].id;
    }
    if (active > 1)
        violate("two-active-orders", o[0].user, o[0].voucher, 0, 0,
                "user %lld holds %d active orders of voucher %lld",
                (long long)o[0].user, active, (long long)o[0].voucher);
    /* An order nobody was told of needs a purchase of its own whose
     * outcome was unknown: a 409 ALREADY_PURCHASED names no purchase (a
     * purchase whose instance died unanswered is a 502 from haproxy, which
     * never sends it to another instance). */
    for (size_t i = 0; i < nh; i++)
        unknown += h[i].op == OP_BUY && indefinite(&h[i]);
    if (unnamed > unknown)
        violate("order-without-answer", o[0].user, o[0].voucher, 0,
                nh ? h[nh - 1].done_ms : 0,
                "user %lld holds %d order(s) of voucher %lld that no 201 or "
                "202 named, and only %d of its purchases had an unknown "
                "outcome (a definite answer wrote something)",
                (long long)o[0].user, unnamed, (long long)o[0].voucher,
                unknown);
    for (size_t i = 0; i < nh; i++) {
        bool held = false;

        if (h[i].op != OP_BUY || strcmp(h[i].code, "ALREADY_PURCHASED") != 0)
            continue;
        /* Active from its id's second to its close, and a second more
         * (the unit goes back to Redis right after the close commits),
         * or longer while a fault may hold that return up: a return that
         * never happens shows as a repair of the sale. */
        for (size_t k = 0; k < no && !held; k++)
            held = order_start_ms(o[k].id) <= h[i].done_ms + 1000 &&
                   (!o[k].close_ms || o[k].close_ms >= h[i].sent_ms - 1000 ||
                    return_delayed(f, nf, o[k].close_ms, h[i].done_ms));
        if (!held)
            violate("already-without-order", h[i].user, h[i].voucher, 0,
                    h[i].done_ms,
                    "409 ALREADY_PURCHASED to user %lld for voucher %lld at "
                    "%.1f s, when the user held no active order of it",
                    (long long)h[i].user, (long long)h[i].voucher,
                    h[i].done_ms / 1e3);
    }
}

static void check_users(struct hist *h, size_t nh, struct orow *o, size_t no,
                        const struct fault *f, size_t nf)
{
    struct hist *buys = xcalloc(nh + 1, sizeof(*buys));
    struct orow *uv = xcalloc(no + 1, sizeof(*uv));
    size_t nb = 0, i = 0, k = 0;

    for (size_t j = 0; j < nh; j++)
        if (h[j].op == OP_BUY)
            buys[nb++] = h[j];
    memcpy(uv, o, no * sizeof(*o));
    qsort(buys, nb, sizeof(*buys), cmp_hist_uv);
    qsort(uv, no, sizeof(*uv), cmp_orow_uv);
    /* Walk both, grouped by (user, voucher). */
    while (i < nb || k < no) {
        int64_t u, v;
        size_t i2 = i, k2 = k;

        if (k >= no || (i < nb && (buys[i].user < uv[k].user ||
                                   (buys[i].user == uv[k].user &&
                                    buys[i].voucher < uv[k].voucher)))) {
            u = buys[i].user;
            v = buys[i].voucher;
        } else {
            u = uv[k].user;
            v = uv[k].voucher;
        }
        while (i2 < nb && buys[i2].user == u && buys[i2].voucher == v)
            i2++;
        while (k2 < no && uv[k2].user == u && uv[k2].voucher == v)
            k2++;
        if (k2 > k)
            check_user_voucher(buys + i, i2 - i, uv + k, k2 - k, f, nf);
        else
            for (size_t j = i; j < i2; j++)
                if (strcmp(buys[j].code, "ALREADY_PURCHASED") == 0)
                    violate("already-without-order", u, v, 0, buys[j].done_ms,
                            "409 ALREADY_PURCHASED to user %lld for voucher "
                            "%lld at %.1f s; the user never had an order of "
                            "it",
                            (long long)u, (long long)v, buys[j].done_ms / 1e3);
        i = i2;
        k = k2;
    }
    free(buys);
    free(uv);
}

static bool logged(const struct logline *l, size_t nl, enum logev kind,
                   int64_t order, const char *txn)
{
    for (size_t i = 0; i < nl; i++)
        if (l[i].kind == kind && l[i].order == order &&
            strcmp(l[i].txn, txn) == 0)
            return true;
    return false;
}

/* Payments and cancels: what a 200 said is in MySQL; one transaction per
 * order; every refusal of money logged for a refund. */
static void check_lifecycle(struct hist *h, size_t nh, struct orow *by_id,
                            size_t n, const struct logline *l, size_t nl)
{
    for (size_t i = 0; i < nh; i++) {
        struct orow *o;

        if (h[i].op != OP_PAY && h[i].op != OP_CANCEL)
            continue;
        o = order_find(by_id, n, h[i].order);
        if (h[i].status == 200 && h[i].op == OP_PAY &&
            (!o || o->status != 2 || strcmp(o->txn, h[i].txn) != 0))
            violate("pay-200-not-kept", h[i].user, h[i].voucher, h[i].order,
                    h[i].done_ms,
                    "payment %s of order %lld answered 200 at %.1f s; MySQL "
                    "has status %d, transaction \"%s\"",
                    h[i].txn, (long long)h[i].order, h[i].done_ms / 1e3,
                    o ? o->status : -1, o ? o->txn : "");
        if (h[i].status == 200 && h[i].op == OP_CANCEL &&
            strcmp(h[i].ostatus, "cancelled") == 0 && (!o || o->status != 4))
            violate("cancel-200-not-kept", h[i].user, h[i].voucher, h[i].order,
                    h[i].done_ms,
                    "cancel of order %lld answered 200 cancelled at %.1f s; "
                    "MySQL has status %d",
                    (long long)h[i].order, h[i].done_ms / 1e3,
                    o ? o->status : -1);
        if (h[i].op == OP_PAY && h[i].status == 409 &&
            strcmp(h[i].code, "ORDER_CLOSED") == 0 &&
            !logged(l, nl, LOGEV_REFUND, h[i].order, h[i].txn))
            violate("refund-not-logged", h[i].user, h[i].voucher, h[i].order,
                    h[i].done_ms,
                    "payment %s of order %lld refused ORDER_CLOSED at %.1f s "
                    "with no \"payment refused, to refund\" in any log",
                    h[i].txn, (long long)h[i].order, h[i].done_ms / 1e3);
        if (h[i].op == OP_PAY && h[i].status == 409 &&
            strcmp(h[i].code, "ORDER_PAID") == 0 &&
            !logged(l, nl, LOGEV_REFUND2, h[i].order, h[i].txn))
            violate("refund-not-logged", h[i].user, h[i].voucher, h[i].order,
                    h[i].done_ms,
                    "second payment %s of order %lld refused ORDER_PAID at "
                    "%.1f s with no \"to refund\" in any log",
                    h[i].txn, (long long)h[i].order, h[i].done_ms / 1e3);
    }
    /* Paid by one transaction, and one we sent. */
    for (size_t i = 0; i < nh; i++) {
        if (h[i].op != OP_PAY || h[i].status != 200)
            continue;
        for (size_t j = i + 1; j < nh; j++)
            if (h[j].op == OP_PAY && h[j].status == 200 &&
                h[j].order == h[i].order && strcmp(h[j].txn, h[i].txn) != 0) {
                violate("paid-twice", h[i].user, h[i].voucher, h[i].order,
                        h[j].done_ms,
                        "order %lld answered paid to transactions %s and %s",
                        (long long)h[i].order, h[i].txn, h[j].txn);
                break;
            }
    }
}

/*
 * The dead letters of async sale vid (its Redis at port): an order MySQL
 * refused for good. Allowed only where no 202 named it and its buyer
 * holds another active order of the sale: a purchase answered 503
 * "outcome unknown" (its replica's WAIT timed out) that a writer still
 * wrote from the old master's stream, then a failover to a replica
 * without it, and the buyer's retry, unknown too, sold again by the new
 * master; MySQL keeps the first by its one-active-order key. *dead_ok
 * counts those.
 */
static void check_dead_letters(uint16_t port, int64_t vid, const struct hist *h,
                               size_t nh, const struct orow *o, size_t no,
                               int *dead_ok)
{
    redisContext *rc = redisConnect("127.0.0.1", port);
    redisReply *r =
        rc && !rc->err
            ? redisCommand(rc, "XRANGE {v:%lld}:dead - +", (long long)vid)
            : NULL;

    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements;
         i++) {
        const redisReply *e = r->element[i], *kv;
        int64_t order = 0, user = 0;
        bool answered = false, holds = false;

        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
            continue;
        kv = e->element[1];
        for (size_t k = 0;
             kv->type == REDIS_REPLY_ARRAY && k + 1 < kv->elements; k += 2) {
            if (strcmp(kv->element[k]->str, "o") == 0)
                order = strtoll(kv->element[k + 1]->str, NULL, 10);
            else if (strcmp(kv->element[k]->str, "u") == 0)
                user = strtoll(kv->element[k + 1]->str, NULL, 10);
        }
        for (size_t k = 0; k < nh && !answered; k++)
            answered =
                h[k].op == OP_BUY && h[k].status == 202 && h[k].order == order;
        for (size_t k = 0; k < no && !holds; k++)
            holds = o[k].voucher == vid && o[k].user == user &&
                    o[k].id != order && (o[k].status == 1 || o[k].status == 2);
        if (!answered && holds) {
            (*dead_ok)++;
            continue;
        }
        violate("dead-letters", user, vid, order, soak_ms(),
                "async sale %lld dead-lettered order %lld of user %lld%s",
                (long long)vid, (long long)order, (long long)user,
                answered ? ", which was answered 202"
                         : ", who holds no other order of the sale");
    }
    if (!r || r->type != REDIS_REPLY_ARRAY)
        violate("dead-letters", 0, vid, 0, soak_ms(),
                "async sale %lld's dead letters could not be read",
                (long long)vid);
    freeReplyObject(r);
    if (rc)
        redisFree(rc);
}

static void check_end_state(const struct vrow *v, size_t nv, struct orow *o,
                            size_t no, const struct hist *h, size_t nh,
                            int *dead_ok)
{
    balance_check(v, nv, "at the end");
    for (size_t i = 0; i < nv; i++) {
        struct async_state st;
        long long frozen;
        int64_t *users, *members;
        size_t nu = 0, nm = 0;
        redisContext *rc;
        redisReply *r;
        uint16_t port;

        if (!v[i].async)
            continue;
        port = redis_port_of_sale(v[i].id);
        if (!port) {
            violate("redis-unreachable", 0, v[i].id, 0, soak_ms(),
                    "no Redis master to check async sale %lld against",
                    (long long)v[i].id);
            return;
        }
        async_state_read(port, 0, v[i].id, &st);
        frozen =
            predis_int(port, 0, "EXISTS {v:%lld}:frozen", (long long)v[i].id);
        if (frozen != 0)
            violate("sale-frozen", 0, v[i].id, 0, soak_ms(),
                    "async sale %lld is still frozen at the end",
                    (long long)v[i].id);
        if (st.stream != 0 || st.pending_hash != 0 || st.pending_group != 0)
            violate("backlog-left", 0, v[i].id, 0, soak_ms(),
                    "async sale %lld: %lld in the stream, %lld in the pending "
                    "hash, %lld pending in the group at the end",
                    (long long)v[i].id, st.stream, st.pending_hash,
                    st.pending_group);
        if (st.dead != 0)
            check_dead_letters(port, v[i].id, h, nh, o, no, dead_ok);
        if (st.stock != v[i].stock)
            violate("redis-differs", 0, v[i].id, 0, soak_ms(),
                    "async sale %lld: Redis stock %lld, MySQL stock %lld",
                    (long long)v[i].id, st.stock, (long long)v[i].stock);
        /* The buyers, one by one. */
        users = xcalloc(no + 1, sizeof(*users));
        for (size_t k = 0; k < no; k++)
            if (o[k].voucher == v[i].id &&
                (o[k].status == 1 || o[k].status == 2))
                users[nu++] = o[k].user;
        qsort(users, nu, sizeof(*users), cmp_i64);
        members = NULL;
        rc = redisConnect("127.0.0.1", port);
        r = rc && !rc->err ? redisCommand(rc, "SMEMBERS {v:%lld}:buyers",
                                          (long long)v[i].id)
                           : NULL;
        if (r && r->type == REDIS_REPLY_ARRAY) {
            members = xcalloc(r->elements + 1, sizeof(*members));
            for (size_t k = 0; k < r->elements; k++)
                members[nm++] = strtoll(r->element[k]->str, NULL, 10);
            qsort(members, nm, sizeof(*members), cmp_i64);
        }
        freeReplyObject(r);
        if (rc)
            redisFree(rc);
        for (size_t a = 0, b = 0; a < nu || b < nm;) {
            if (b >= nm || (a < nu && users[a] < members[b])) {
                violate("redis-differs", users[a], v[i].id, 0, soak_ms(),
                        "async sale %lld: user %lld has an active order in "
                        "MySQL and is not a buyer in Redis (may buy twice)",
                        (long long)v[i].id, (long long)users[a]);
                a++;
            } else if (a >= nu || members[b] < users[a]) {
                violate("redis-differs", members[b], v[i].id, 0, soak_ms(),
                        "async sale %lld: user %lld is a buyer in Redis with "
                        "no active order in MySQL (a unit not returned)",
                        (long long)v[i].id, (long long)members[b]);
                b++;
            } else {
                a++;
                b++;
            }
        }
        free(users);
        free(members);
    }
}

/* A fault that may lose Redis writes: the master killed. */
static bool failover_near(const struct fault *f, size_t nf, int64_t at_ms)
{
    for (size_t i = 0; i < nf; i++)
        if (fault_fails_over(f[i].kind) && f[i].start_ms <= at_ms &&
            (!f[i].heal_ms || at_ms <= f[i].heal_ms + REPAIR_AFTER_FAILOVER_MS))
            return true;
    return false;
}

/* Whether the rebuild l[r] built a sale that was missing from Redis
 * (its instance's last disagreement about it says so) after a creation
 * that may have missed its preheat (no 201 named it, or a fault was on
 * while it was created) or not run it yet (another instance's
 * reconciliation can see the committed voucher first): the
 * reconciliation's job. What a late preheat then breaks shows in the
 * other checks. */
static bool preheat_missed(const struct logline *l, size_t r,
                           const struct hist *h, size_t nh,
                           const struct fault *f, size_t nf)
{
    const struct logline *d = NULL;

    for (size_t i = 0; i < r; i++)
        if (l[i].kind == LOGEV_DISAGREE && l[i].voucher == l[r].voucher &&
            l[i].inst == l[r].inst)
            d = &l[i];
    if (!d || !d->missing)
        return false;
    for (size_t i = 0; i < nh; i++)
        if (h[i].op == OP_SALE && h[i].voucher == l[r].voucher)
            return l[r].at_ms <= h[i].done_ms + PREHEAT_RACE_MS ||
                   return_delayed(f, nf, h[i].sent_ms, h[i].done_ms);
    return true;
}

static void check_logs(const struct logline *l, size_t nl,
                       const struct fault *f, size_t nf, const struct hist *h,
                       size_t nh, int *repairs_ok)
{
    *repairs_ok = 0;
    for (size_t i = 0; i < nl; i++) {
        switch (l[i].kind) {
        case LOGEV_REBUILT:
            if (failover_near(f, nf, l[i].at_ms) ||
                preheat_missed(l, i, h, nh, f, nf))
                (*repairs_ok)++;
            else
                violate("sale-repaired", 0, l[i].voucher, 0, l[i].at_ms,
                        "async sale %lld rebuilt from MySQL at %.1f s "
                        "(instance %d) with no Redis failover to explain it: "
                        "Redis and MySQL disagreed (a unit not returned, a "
                        "202 lost, or a false alarm)",
                        (long long)l[i].voucher, l[i].at_ms / 1e3,
                        l[i].inst + 1);
            break;
        case LOGEV_ID_REUSED:
            violate("id-reused", 0, 0, 0, l[i].at_ms, "instance %d: %s",
                    l[i].inst + 1, l[i].text);
            break;
        case LOGEV_SANITIZER:
            violate("sanitizer", 0, 0, 0, l[i].at_ms, "instance %d: %s (%s)",
                    l[i].inst + 1, l[i].text, l[i].file);
            break;
        default:
            break;
        }
    }
}

/* ---- the operator's features ---- */

/* An Idempotency-Key MySQL kept: its change committed. */
struct krow {
    char key[40];
    char action[32];
    int64_t target, created_ms; /* created: soak_ms() */
};

/* One admin change: every request sent with its key. */
struct change {
    const struct hist *first; /* its first request */
    enum ctl ctl;
    int64_t voucher, user, units, refund;
    int64_t sent_ms; /* the first request's */
    int64_t ok_ms;   /* the first 2xx answer's, INT64_MAX: none */
    bool fresh;      /* a 2xx that was not a replay */
    bool unknown;    /* an answer of unknown outcome (or none) */
    int attempts;
    const struct krow *kept; /* its key in MySQL, NULL: not committed */
    char answers[96];        /* "503 UNAVAILABLE, 200 (replay)" */
};

static int cmp_krow(const void *a, const void *b)
{
    return strcmp(((const struct krow *)a)->key, ((const struct krow *)b)->key);
}

/* The Idempotency-Keys of one shard's database. */
static struct krow *keys_read_one(MYSQL *my, size_t *n)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    struct krow *k;
    size_t i = 0;

    *n = 0;
    if (mysql_query(my, "SELECT idem_key, action, target_id, ROUND("
                        "UNIX_TIMESTAMP(created) * 1000) FROM "
                        "idempotency_keys") != 0 ||
        !(res = mysql_store_result(my)))
        return NULL;
    k = xcalloc(mysql_num_rows(res) + 1, sizeof(*k));
    while ((row = mysql_fetch_row(res))) {
        snprintf(k[i].key, sizeof(k[i].key), "%s", row[0]);
        snprintf(k[i].action, sizeof(k[i].action), "%s", row[1]);
        k[i].target = strtoll(row[2], NULL, 10);
        k[i].created_ms = strtoll(row[3], NULL, 10) - soak_t0_ms;
        i++;
    }
    mysql_free_result(res);
    *n = i;
    return k;
}

/* Every shard's Idempotency-Keys (a key is recorded on its change's
 * shard: a new voucher's is chosen from the key), sorted by key; NULL
 * when a shard could not be read. */
static struct krow *keys_read(MYSQL *my, size_t *n)
{
    struct krow *all = NULL;

    *n = 0;
    for (int s = 0; s < soak_cfg.shards; s++) {
        MYSQL *c = shard_open(my, s);
        struct krow *k = NULL;
        size_t nk = 0;

        if (c)
            k = keys_read_one(c, &nk);
        shard_done(c, s);
        if (!k) {
            free(all);
            *n = 0;
            return NULL;
        }
        all = xrealloc(all, (*n + nk + 1) * sizeof(*all));
        memcpy(all + *n, k, nk * sizeof(*k));
        *n += nk;
        free(k);
    }
    qsort(all, *n, sizeof(*all), cmp_krow);
    return all;
}

/* One number per row of a two-column query (id, value), sorted by id:
 * the audit's restocks per voucher, the refunds' status. */
struct pair {
    int64_t id, value;
};

static int cmp_pair(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static struct pair *pairs_read(MYSQL *my, const char *sql, size_t *n)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    struct pair *p;
    size_t i = 0;

    *n = 0;
    if (mysql_query(my, sql) != 0 || !(res = mysql_store_result(my)))
        return NULL;
    p = xcalloc(mysql_num_rows(res) + 1, sizeof(*p));
    while ((row = mysql_fetch_row(res))) {
        p[i].id = strtoll(row[0], NULL, 10);
        p[i].value = row[1] ? strtoll(row[1], NULL, 10) : 0;
        i++;
    }
    mysql_free_result(res);
    qsort(p, i, sizeof(*p), cmp_pair);
    *n = i;
    return p;
}

static const struct pair *pair_find(const struct pair *p, size_t n, int64_t id)
{
    struct pair key = {.id = id};

    return p ? bsearch(&key, p, n, sizeof(key), cmp_pair) : NULL;
}

static int cmp_hist_key(const void *a, const void *b)
{
    const struct hist *x = *(const struct hist *const *)a;
    const struct hist *y = *(const struct hist *const *)b;
    int c = strcmp(x->key, y->key);

    if (c)
        return c;
    return (x->sent_ms > y->sent_ms) - (x->sent_ms < y->sent_ms);
}

static int cmp_change_sent(const void *a, const void *b)
{
    const struct change *x = a, *y = b;
    return (x->sent_ms > y->sent_ms) - (x->sent_ms < y->sent_ms);
}

/* The history's admin changes, one per key, by their first request;
 * each with its key's row in MySQL (k, sorted) when it committed. */
static struct change *changes_build(const struct hist *h, size_t nh,
                                    const struct krow *k, size_t nk, size_t *n)
{
    const struct hist **p = xcalloc(nh + 1, sizeof(*p));
    struct change *c;
    size_t np = 0, nc = 0;

    for (size_t i = 0; i < nh; i++)
        if (h[i].key[0])
            p[np++] = &h[i];
    qsort(p, np, sizeof(*p), cmp_hist_key);
    c = xcalloc(np + 1, sizeof(*c));
    for (size_t i = 0; i < np;) {
        struct change *x = &c[nc++];
        struct krow key;
        size_t j = i;
        int len = 0;

        memset(x, 0, sizeof(*x));
        x->first = p[i];
        x->ctl = p[i]->ctl;
        x->voucher = p[i]->voucher;
        x->user = p[i]->user;
        x->units = p[i]->units;
        x->sent_ms = p[i]->sent_ms;
        x->ok_ms = INT64_MAX;
        for (; j < np && strcmp(p[j]->key, p[i]->key) == 0; j++) {
            const struct hist *a = p[j];

            x->attempts++;
            if (a->status / 100 == 2) {
                if (a->done_ms < x->ok_ms)
                    x->ok_ms = a->done_ms;
                x->fresh = x->fresh || !a->replayed;
            }
            x->unknown = x->unknown || indefinite(a);
            if (len < (int)sizeof(x->answers) - 1)
                len += snprintf(x->answers + len, sizeof(x->answers) - len,
                                "%s%ld %s%s", j > i ? ", " : "", a->status,
                                a->code, a->replayed ? "(replay)" : "");
        }
        snprintf(key.key, sizeof(key.key), "%s", p[i]->key);
        x->kept = k ? bsearch(&key, k, nk, sizeof(key), cmp_krow) : NULL;
        /* A create's voucher is the one its key names. */
        if (x->ctl == CTL_CREATE && x->kept)
            x->voucher = x->kept->target;
        if (x->ctl == CTL_REFUND_DONE)
            x->refund = x->units;
        i = j;
    }
    free(p);
    qsort(c, nc, sizeof(*c), cmp_change_sent);
    *n = nc;
    return c;
}

/* A change committed is never answered only with errors that invite a
 * retry: one of its requests was answered 2xx for the first time, or
 * its outcome was unknown. One answered 2xx committed. */
static void check_change_answers(const struct change *c, size_t nc,
                                 const struct pair *refunds, size_t nr)
{
    for (size_t i = 0; i < nc; i++) {
        const struct change *x = &c[i];

        if (x->kept && !x->fresh && !x->unknown)
            violate("retry-invited", x->user, x->voucher, 0, x->sent_ms,
                    "%s (key %s, voucher %lld, user %lld) committed in MySQL "
                    "but was answered only with errors: %s",
                    ctl_names[x->ctl], x->first->key, (long long)x->voucher,
                    (long long)x->user, x->answers);
        if (!x->kept && x->ok_ms != INT64_MAX && x->ctl != CTL_REFUND_DONE)
            violate("control-not-kept", x->user, x->voucher, 0, x->ok_ms,
                    "%s (key %s, voucher %lld, user %lld) was answered 2xx "
                    "at %.1f s and its key is not in MySQL: %s",
                    ctl_names[x->ctl], x->first->key, (long long)x->voucher,
                    (long long)x->user, x->ok_ms / 1e3, x->answers);
        if (x->ctl == CTL_REFUND_DONE && x->ok_ms != INT64_MAX) {
            const struct pair *r = pair_find(refunds, nr, x->refund);

            if (!r || r->value != 1)
                violate("control-not-kept", 0, 0, x->first->order, x->ok_ms,
                        "refund %lld marked done (answered at %.1f s) is %s "
                        "in MySQL",
                        (long long)x->refund, x->ok_ms / 1e3,
                        r ? "not done" : "missing");
        }
    }
}

/* The first committed change of kind ctl of voucher (or user) after
 * c[from]; NULL: none. */
static const struct change *change_next(const struct change *c, size_t nc,
                                        size_t from, enum ctl ctl,
                                        int64_t voucher, int64_t user)
{
    for (size_t i = from + 1; i < nc; i++)
        if (c[i].ctl == ctl && c[i].kept && c[i].voucher == voucher &&
            c[i].user == user)
            return &c[i];
    return NULL;
}

/* Nothing decided while a sale was paused: from the pause's first 2xx
 * to the request of the resume that committed after it; nothing after a
 * stop's first 2xx. Decision times are MySQL's and Redis' clocks, the
 * answers the driver's (DECIDED_MARGIN_MS). */
static void check_paused(const struct change *c, size_t nc,
                         const struct orow *o, size_t no)
{
    for (size_t i = 0; i < nc; i++) {
        const struct change *x = &c[i], *next;
        int64_t from, to;
        const char *kind;

        if ((x->ctl != CTL_PAUSE && x->ctl != CTL_STOP) || !x->kept ||
            x->ok_ms == INT64_MAX)
            continue;
        from = x->ok_ms + DECIDED_MARGIN_MS;
        to = INT64_MAX;
        kind = x->ctl == CTL_STOP ? "stopped-sold" : "paused-sold";
        if (x->ctl == CTL_PAUSE &&
            (next = change_next(c, nc, i, CTL_RESUME, x->voucher, 0)))
            to = next->sent_ms - DECIDED_MARGIN_MS;
        for (size_t k = 0; k < no; k++)
            if (o[k].voucher == x->voucher && o[k].decided_ms > from &&
                o[k].decided_ms < to)
                violate(kind, 0, x->voucher, o[k].id, o[k].decided_ms,
                        "order %lld of user %lld, voucher %lld decided at "
                        "%.3f s: the %s (key %s) was answered 2xx at %.3f s%s",
                        (long long)o[k].id, (long long)o[k].user,
                        (long long)x->voucher, o[k].decided_ms / 1e3,
                        ctl_names[x->ctl], x->first->key, x->ok_ms / 1e3,
                        to == INT64_MAX ? "" : ", the resume sent after it");
    }
}

/* Every sale's initial stock is its created stock, replaced by each
 * committed edit of the stock and grown by each committed restock, in
 * the order MySQL committed them; one audit record per restock. */
static void check_restocks(const struct change *c, size_t nc,
                           const struct vrow *v, size_t nv,
                           const struct pair *audit, size_t na, int *restocks)
{
    *restocks = 0;
    for (size_t i = 0; i < nv; i++) {
        const struct change *ev[256];
        size_t ne = 0;
        int64_t want = -1, applied = 0, edits = 0;
        const struct pair *a;
        bool created = false;

        for (size_t j = 0; j < nc; j++) {
            if (!c[j].kept || c[j].voucher != v[i].id)
                continue;
            if (c[j].ctl == CTL_CREATE) {
                want = c[j].units;
                created = true;
            } else if ((c[j].ctl == CTL_RESTOCK ||
                        (c[j].ctl == CTL_PATCH && c[j].units)) &&
                       ne < 256) {
                ev[ne++] = &c[j];
            }
        }
        if (!created)
            continue;
        /* In MySQL's order (the keys' creation times). */
        for (size_t a1 = 1; a1 < ne; a1++)
            for (size_t b = a1;
                 b > 0 && ev[b - 1]->kept->created_ms > ev[b]->kept->created_ms;
                 b--) {
                const struct change *t = ev[b];

                ev[b] = ev[b - 1];
                ev[b - 1] = t;
            }
        for (size_t j = 0; j < ne; j++) {
            if (ev[j]->ctl == CTL_PATCH) {
                want = ev[j]->units;
                edits++;
            } else {
                want += ev[j]->units;
                applied++;
            }
        }
        *restocks += (int)applied;
        if (v[i].initial != want)
            violate("restock-not-once", 0, v[i].id, 0,
                    ne ? ev[ne - 1]->sent_ms : soak_ms(),
                    "voucher %lld has initial stock %lld in MySQL; its "
                    "creation, %lld edit(s) of the stock and %lld "
                    "restock(s) that committed make %lld",
                    (long long)v[i].id, (long long)v[i].initial,
                    (long long)edits, (long long)applied, (long long)want);
        a = pair_find(audit, na, v[i].id);
        if ((a ? a->value : 0) != applied)
            violate("restock-not-once", 0, v[i].id, 0,
                    ne ? ev[ne - 1]->sent_ms : soak_ms(),
                    "voucher %lld: %lld restock(s) committed (their keys "
                    "are in MySQL) and %lld voucher.restock record(s) in "
                    "the audit log",
                    (long long)v[i].id, (long long)applied,
                    (long long)(a ? a->value : 0));
    }
}

/* A committed delete leaves no voucher behind. */
static void check_deletes(const struct change *c, size_t nc,
                          const struct vrow *v, size_t nv)
{
    for (size_t i = 0; i < nc; i++) {
        if (c[i].ctl != CTL_DELETE || !c[i].kept)
            continue;
        for (size_t k = 0; k < nv; k++)
            if (v[k].id == c[i].voucher)
                violate("control-not-kept", 0, c[i].voucher, 0, c[i].sent_ms,
                        "voucher %lld was deleted (key %s) and is still in "
                        "MySQL",
                        (long long)c[i].voucher, c[i].first->key);
    }
}

/* Whether a fault between from_ms and to_ms may have kept a ban from
 * an instance: a ban reaches the others through Redis, and an instance
 * that cannot reach it keeps the state it has (docs/accounts.md). */
static bool ban_delayed(const struct fault *f, size_t nf, int64_t from_ms,
                        int64_t to_ms)
{
    for (size_t i = 0; i < nf; i++)
        if ((f[i].kind == F_REDIS_KILL ||
             ((f[i].kind == F_PARTITION || f[i].kind == F_LOSS ||
               f[i].kind == F_LATENCY) &&
              strstr(f[i].what, "redis"))) &&
            f[i].start_ms <= to_ms &&
            (!f[i].heal_ms || f[i].heal_ms >= from_ms))
            return true;
    return false;
}

/* No order of a banned buyer decided from a second after the ban's
 * first 2xx to the request of the unban that committed after it; no
 * request of it refused 403 from a second after the unban's first 2xx
 * to its next ban. */
static void check_bans(const struct change *c, size_t nc, const struct orow *o,
                       size_t no, const struct hist *h, size_t nh,
                       const struct fault *f, size_t nf, int *excused)
{
    *excused = 0;
    for (size_t i = 0; i < nc; i++) {
        const struct change *x = &c[i], *next;
        int64_t from, to;

        if (!x->kept || x->ok_ms == INT64_MAX ||
            (x->ctl != CTL_BAN && x->ctl != CTL_UNBAN))
            continue;
        from = x->ok_ms + BAN_TOLD_MS;
        next = change_next(c, nc, i, x->ctl == CTL_BAN ? CTL_UNBAN : CTL_BAN, 0,
                           x->user);
        to = next ? next->sent_ms - DECIDED_MARGIN_MS : INT64_MAX;
        if (x->ctl == CTL_BAN) {
            for (size_t k = 0; k < no; k++) {
                if (o[k].user != x->user || o[k].decided_ms <= from ||
                    o[k].decided_ms >= to)
                    continue;
                if (ban_delayed(f, nf, x->sent_ms, o[k].decided_ms)) {
                    (*excused)++;
                    continue;
                }
                violate("banned-bought", x->user, o[k].voucher, o[k].id,
                        o[k].decided_ms,
                        "order %lld of user %lld (voucher %lld) decided at "
                        "%.3f s: the ban (key %s) was answered at %.3f s%s",
                        (long long)o[k].id, (long long)x->user,
                        (long long)o[k].voucher, o[k].decided_ms / 1e3,
                        x->first->key, x->ok_ms / 1e3,
                        next ? ", the unban sent after it" : "");
            }
            continue;
        }
        for (size_t k = 0; k < nh; k++) {
            if (h[k].user != x->user || h[k].sent_ms <= from ||
                h[k].sent_ms >= to || h[k].status != 403 ||
                strcmp(h[k].code, "FORBIDDEN") != 0)
                continue;
            if (ban_delayed(f, nf, x->sent_ms, h[k].done_ms)) {
                (*excused)++;
                continue;
            }
            violate("unbanned-refused", x->user, h[k].voucher, 0, h[k].done_ms,
                    "%s by user %lld sent at %.3f s refused 403 FORBIDDEN: "
                    "the unban (key %s) was answered at %.3f s",
                    op_names[h[k].op], (long long)x->user, h[k].sent_ms / 1e3,
                    x->first->key, x->ok_ms / 1e3);
        }
    }
}

/* Whether an instance's clock was stepped between from_ms and to_ms. */
static bool clock_stepped(const struct fault *f, size_t nf, int64_t from_ms,
                          int64_t to_ms)
{
    for (size_t i = 0; i < nf; i++)
        if (f[i].kind == F_CLOCK && f[i].start_ms <= to_ms &&
            (!f[i].heal_ms || f[i].heal_ms + TICKET_MARGIN_MS >= from_ms))
            return true;
    return false;
}

/* A purchase with a waiting room's ticket is not refused while the
 * ticket is good: until the expiry it carries, and for a latecomer (who
 * joined a ticket's life after the begin, when the rate's turn has long
 * passed) until a ticket's life after its first join was sent: a place
 * is admitted no earlier than its buyer joined (Redis' clock, which is
 * the driver's). The instance looks at the ticket when it gets to the
 * request, which may be as late as its answer (behind a stalled link, a
 * cold cache after a restart): a refusal answered after the ticket's
 * end is allowed. Not while an instance's clock was stepped. */
static void check_tickets(const struct hist *h, size_t nh,
                          const struct fault *f, size_t nf, int *late_bought)
{
    *late_bought = 0;
    for (size_t i = 0; i < nh; i++) {
        int64_t good = h[i].ticket_exp_ms, joined = h[i].joined_ms;

        if (h[i].op != OP_BUY || !h[i].joined_ms)
            continue;
        if (h[i].late && sold(&h[i]))
            (*late_bought)++;
        if (h[i].status != 403 || strcmp(h[i].code, "TICKET_REQUIRED") != 0)
            continue;
        /* The buyer's first join of this sale, in any flow. */
        for (size_t k = 0; k < nh; k++)
            if (h[k].op == OP_QUEUE && h[k].user == h[i].user &&
                h[k].voucher == h[i].voucher && h[k].sent_ms < joined &&
                strcmp(h[k].txn, "join") == 0)
                joined = h[k].sent_ms;
        if (h[i].late && joined + SOAK_TICKET_TTL_S * 1000 > good)
            good = joined + SOAK_TICKET_TTL_S * 1000;
        if (h[i].done_ms >= good - TICKET_MARGIN_MS ||
            clock_stepped(f, nf, h[i].sent_ms - TICKET_MARGIN_MS, h[i].done_ms))
            continue;
        violate(
            h[i].late ? "late-joiner-refused" : "ticket-refused", h[i].user,
            h[i].voucher, 0, h[i].done_ms,
            "user %lld, who joined voucher %lld's waiting room at %.1f s%s, "
            "was refused 403 TICKET_REQUIRED at %.1f s; its ticket "
            "expires at %.1f s and is good until %.1f s",
            (long long)h[i].user, (long long)h[i].voucher, joined / 1e3,
            h[i].late ? " (late)" : "", h[i].sent_ms / 1e3,
            h[i].ticket_exp_ms / 1e3, good / 1e3);
    }
}

/* No order paid after its deadline (both MySQL's clock). */
static void check_deadlines(const struct orow *o, size_t no)
{
    for (size_t k = 0; k < no; k++)
        if (o[k].status == 2 && o[k].paid_ms > o[k].deadline_ms)
            violate("paid-after-deadline", o[k].user, o[k].voucher, o[k].id,
                    o[k].paid_ms,
                    "order %lld paid at %.3f s, after its deadline %.3f s",
                    (long long)o[k].id, o[k].paid_ms / 1e3,
                    o[k].deadline_ms / 1e3);
}

struct ops_counts {
    int changes[CTL_COUNT], kept[CTL_COUNT], unknown[CTL_COUNT];
    int restocks, bans_excused, late_bought;
};

static void check_operator(MYSQL *my, const struct hist *h, size_t nh,
                           const struct orow *o, size_t no,
                           const struct vrow *v, size_t nv,
                           const struct fault *f, size_t nf,
                           struct ops_counts *oc)
{
    size_t nk = 0, na = 0, nr = 0, nc = 0;
    struct krow *k = keys_read(my, &nk);
    struct pair *audit =
        pairs_read(my,
                   "SELECT target_id, COUNT(*) FROM audit_log WHERE action = "
                   "'voucher.restock' GROUP BY target_id",
                   &na);
    struct pair *refunds =
        pairs_read(my, "SELECT id, status FROM refunds", &nr);
    struct change *c;

    if (!k || !audit || !refunds)
        violate("mysql-unreachable", 0, 0, 0, soak_ms(),
                "MySQL's keys, audit log or refunds could not be read");
    c = changes_build(h, nh, k, nk, &nc);
    for (size_t i = 0; i < nc; i++) {
        oc->changes[c[i].ctl]++;
        oc->kept[c[i].ctl] += c[i].kept != NULL;
        oc->unknown[c[i].ctl] += c[i].unknown;
    }
    check_change_answers(c, nc, refunds, nr);
    check_paused(c, nc, o, no);
    check_restocks(c, nc, v, nv, audit, na, &oc->restocks);
    check_deletes(c, nc, v, nv);
    check_bans(c, nc, o, no, h, nh, f, nf, &oc->bans_excused);
    check_tickets(h, nh, f, nf, &oc->late_bought);
    check_deadlines(o, no);
    free(c);
    free(k);
    free(audit);
    free(refunds);
}

static void print_operator(const struct ops_counts *oc)
{
    printf("\nadmin changes (one per Idempotency-Key):\n  %-12s %7s %9s "
           "%8s\n",
           "change", "count", "committed", "unknown");
    for (int i = 1; i < CTL_COUNT; i++)
        if (oc->changes[i])
            printf("  %-12s %7d %9d %8d\n", ctl_names[i], oc->changes[i],
                   oc->kept[i], oc->unknown[i]);
    printf("restocks applied: %d; late joiners who bought: %d; orders of "
           "banned buyers or refusals after an unban while a fault could "
           "keep the ban from an instance (allowed): %d\n",
           oc->restocks, oc->late_bought, oc->bans_excused);
}

/* ---- the report ---- */

static void print_faults(const struct fault *f, size_t nf)
{
    printf("\nfaults injected:\n  %-22s %6s %9s\n", "kind", "count", "seconds");
    for (int k = 0; k < F_KIND_COUNT; k++) {
        int count = 0;
        int64_t ms = 0;

        for (size_t i = 0; i < nf; i++)
            if (f[i].kind == (enum fault_kind)k) {
                count++;
                ms += (f[i].heal_ms ? f[i].heal_ms : soak_ms()) - f[i].start_ms;
            }
        printf("  %-22s %6d %9.1f\n", fault_names[k], count, ms / 1e3);
    }
    printf("  %-22s %6zu\n", "total", nf);
}

struct outcome {
    enum op op;
    long status;
    char code[24];
    size_t n;
};

static void print_requests(const struct hist *h, size_t nh)
{
    struct outcome *o = xcalloc(256, sizeof(*o));
    size_t no = 0;

    for (size_t i = 0; i < nh; i++) {
        size_t k;

        for (k = 0; k < no; k++)
            if (o[k].op == h[i].op && o[k].status == h[i].status &&
                strcmp(o[k].code, h[i].code) == 0)
                break;
        if (k == no && no < 256) {
            o[no].op = h[i].op;
            o[no].status = h[i].status;
            snprintf(o[no].code, sizeof(o[no].code), "%s", h[i].code);
            no++;
        }
        if (k < 256)
            o[k].n++;
    }
    printf("\nrequests per outcome (%zu in all; status 0: no answer):\n", nh);
    for (int op = 0; op < OP_COUNT; op++) {
        bool first = true;

        for (long st = 0; st < 600; st++)
            for (size_t k = 0; k < no; k++)
                if (o[k].op == (enum op)op && o[k].status == st) {
                    printf("  %-7s %3ld %-20s %7zu\n",
                           first ? op_names[op] : "", st,
                           o[k].code[0] ? o[k].code : "-", o[k].n);
                    first = false;
                }
    }
    free(o);
}

/* Whether h belongs in v's window: the same order, or the same user (and
 * voucher); for a sale's violation, what changed its units (not the
 * purchases that simply bought, nor reads). */
static bool hist_about(const struct hist *h, const struct violation *v)
{
    if (v->order && h->order == v->order)
        return true;
    if (v->user)
        return h->user == v->user && (!v->voucher || h->voucher == v->voucher);
    return v->voucher && h->voucher == v->voucher && h->op != OP_READ &&
           !(h->op == OP_BUY && (h->status == 201 || h->status == 202));
}

/* What the history's txn column says of h: its transaction, its
 * change and key, or its ticket. */
static void hist_what(const struct hist *h, char *out, size_t cap)
{
    if (h->key[0])
        snprintf(out, cap, "%s:%s:%lld%s", ctl_names[h->ctl], h->key,
                 (long long)h->units, h->replayed ? ":replay" : "");
    else if (h->op == OP_BUY && h->joined_ms)
        snprintf(out, cap, "ticket:%.1f-%.1f%s", h->joined_ms / 1e3,
                 h->ticket_exp_ms / 1e3, h->late ? ":late" : "");
    else
        snprintf(out, cap, "%s", h->txn);
}

static void print_window(const struct violation *v, const struct hist *h,
                         size_t nh, const struct fault *f, size_t nf,
                         const struct logline *l, size_t nl)
{
    int64_t from = v->at_ms - WINDOW_BEFORE_MS, to = v->at_ms + WINDOW_AFTER_MS;
    size_t *idx = xcalloc(nh + 1, sizeof(*idx)), n = 0;

    printf("    window %.1f..%.1f s:\n", from / 1e3, to / 1e3);
    for (size_t i = 0; i < nf; i++)
        if (f[i].start_ms <= to && (!f[i].heal_ms || f[i].heal_ms >= from))
            printf("      fault %7.1f..%-7.1f %s: %s\n", f[i].start_ms / 1e3,
                   f[i].heal_ms / 1e3, fault_names[f[i].kind], f[i].what);
    for (size_t i = 0; i < nl; i++)
        if (l[i].at_ms >= from && l[i].at_ms <= to &&
            ((v->voucher && l[i].voucher == v->voucher) ||
             (v->order && l[i].order == v->order) ||
             l[i].kind == LOGEV_FAILPOINT))
            printf("      log   %7.1f instance %d: %.220s\n", l[i].at_ms / 1e3,
                   l[i].inst + 1, l[i].text);
    /* The requests closest to the event. */
    for (size_t i = 0; i < nh; i++)
        if (hist_about(&h[i], v) && h[i].done_ms >= from && h[i].sent_ms <= to)
            idx[n++] = i;
    for (size_t k = n > WINDOW_LINES ? n - WINDOW_LINES : 0; k < n; k++) {
        const struct hist *x = &h[idx[k]];
        char what[80];

        hist_what(x, what, sizeof(what));
        printf("      %7.1f..%-7.1f %-6s user %lld voucher %lld order %lld%s%s "
               "-> %ld %s %.60s\n",
               x->sent_ms / 1e3, x->done_ms / 1e3, op_names[x->op],
               (long long)x->user, (long long)x->voucher, (long long)x->order,
               what[0] ? " " : "", what, x->status, x->code, x->body);
    }
    free(idx);
}

static int cmp_violation(const void *a, const void *b)
{
    const struct violation *x = a, *y = b;
    int c = strcmp(x->kind, y->kind);

    if (c)
        return c;
    return (x->at_ms > y->at_ms) - (x->at_ms < y->at_ms);
}

/* Every request of the history, one line each, into the log folder: for
 * a look at what the window left out. */
static void history_write(const struct hist *h, size_t nh)
{
    char path[IT_PATH_MAX + 32];
    FILE *f;

    snprintf(path, sizeof(path), "%s/soak-history.txt", it_log_dir());
    f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "# sent_s done_s op user voucher order txn status code body "
               "(txn: an admin's change:key:units[:replay], a purchase's "
               "ticket:joined-expiry[:late])\n");
    for (size_t i = 0; i < nh; i++) {
        char what[80];

        hist_what(&h[i], what, sizeof(what));
        fprintf(f, "%.3f %.3f %s %lld %lld %lld %s %ld %s %s\n",
                h[i].sent_ms / 1e3, h[i].done_ms / 1e3, op_names[h[i].op],
                (long long)h[i].user, (long long)h[i].voucher,
                (long long)h[i].order, what[0] ? what : "-", h[i].status,
                h[i].code[0] ? h[i].code : "-", h[i].body);
    }
    fclose(f);
    printf("the history: %s\n", path);
}

int checker_run(void)
{
    size_t nh, nf, nl, no = 0, nv = 0;
    struct hist *h = hist_all(&nh);
    const struct fault *f = faults_all(&nf);
    const struct logline *l = log_lines_all(&nl);
    struct orow *o = NULL;
    struct vrow *v = NULL;
    MYSQL *my = NULL;
    int repairs_ok = 0, sold202 = 0, dead_ok = 0;
    struct ops_counts oc = {.restocks = 0};

    for (int tries = 0; !my && tries < 50; tries++) {
        my = fdb_connect(&world.target, 10);
        if (!my)
            sleep_ms(200);
    }
    if (my)
        mysql_query(my, "SET time_zone = '+00:00'");
    if (!my || shards_read(my, &o, &no, &v, &nv) != 0) {
        violate("mysql-unreachable", 0, 0, 0, soak_ms(),
                "MySQL could not be read for the checks");
    } else {
        qsort(o, no, sizeof(*o), cmp_orow_id);
        check_answers(h, nh);
        check_sold(h, nh, o, no);
        check_users(h, nh, o, no, f, nf);
        check_lifecycle(h, nh, o, no, l, nl);
        check_end_state(v, nv, o, no, h, nh, &dead_ok);
        check_logs(l, nl, f, nf, h, nh, &repairs_ok);
        check_operator(my, h, nh, o, no, v, nv, f, nf, &oc);
    }
    check_outside(h, nh, f, nf);
    if (my)
        mysql_close(my);
    for (size_t i = 0; i < nh; i++)
        sold202 += h[i].op == OP_BUY && h[i].status == 202;

    history_write(h, nh);
    print_faults(f, nf);
    print_requests(h, nh);
    print_operator(&oc);
    printf("\n%zu vouchers (%zu orders in MySQL); stock sampled %ld times; "
           "%d async sales rebuilt after a Redis failover or a creation that "
           "may have missed Redis (allowed); %d dead letters of purchases "
           "answered \"outcome unknown\" whose buyer holds the order MySQL "
           "kept (allowed); 202s "
           "missing in a window of documented loss: 0 of %d (none opens here: "
           "Redis fsyncs every write and SECKILL_ASYNC_ACCEPT_LOSS is off)\n",
           nv, no, atomic_load(&samp.samples), repairs_ok, dead_ok, sold202);

    qsort(viol.v, viol.n, sizeof(*viol.v), cmp_violation);
    for (size_t i = 0; i < viol.n;) {
        size_t j = i;

        while (j < viol.n && strcmp(viol.v[j].kind, viol.v[i].kind) == 0)
            j++;
        printf("\nVIOLATION %s (%zu):\n", viol.v[i].kind, j - i);
        for (size_t k = i; k < j && k < i + VIOLATIONS_SHOWN; k++) {
            printf("  - %s\n", viol.v[k].text);
            if (viol.v[k].user || viol.v[k].voucher || viol.v[k].order)
                print_window(&viol.v[k], h, nh, f, nf, l, nl);
        }
        i = j;
    }
    printf("\n");
    if (viol.n) {
        printf("soak: FAIL seed=%llu minutes=%g canary=%d:",
               (unsigned long long)soak_cfg.seed, soak_cfg.minutes,
               soak_cfg.canary);
        for (size_t i = 0; i < viol.n;) {
            size_t j = i;

            while (j < viol.n && strcmp(viol.v[j].kind, viol.v[i].kind) == 0)
                j++;
            printf(" %s=%zu", viol.v[i].kind, j - i);
            i = j;
        }
        printf("\n");
    } else {
        printf("soak: PASS seed=%llu minutes=%g canary=%d: %zu requests, %zu "
               "faults, every invariant held\n",
               (unsigned long long)soak_cfg.seed, soak_cfg.minutes,
               soak_cfg.canary, nh, nf);
    }
    free(o);
    free(v);
    return viol.n ? 1 : 0;
}
