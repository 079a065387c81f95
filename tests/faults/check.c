/*
 * check.c - the end of every scenario: the recovery probe (each instance
 * gives a definite answer again within a bound, without a restart), the
 * drain (after healing, demand >= stock must sell the stock out; an async
 * sale's writers then empty its stream), and the invariants of
 * docs/reliability.md, checked once the system is quiet against MySQL,
 * Redis, the client's record of every attempt and the instances' logs.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idgen/idgen.h"
#include "tests/faults/faults.h"

void run_note(struct run *r, const char *fmt, ...)
{
    size_t len = strlen(r->note);
    va_list ap;

    if (len && len + 2 < sizeof(r->note)) {
        memcpy(r->note + len, "; ", 3);
        len += 2;
    }
    va_start(ap, fmt);
    vsnprintf(r->note + len, sizeof(r->note) - len, fmt, ap);
    va_end(ap);
}

void run_extra_fail(struct run *r, enum inv i, const char *fmt, ...)
{
    va_list ap;

    if (!r->extra_ok[i])
        return; /* keep the first reason */
    r->extra_ok[i] = false;
    va_start(ap, fmt);
    vsnprintf(r->extra_why[i], sizeof(r->extra_why[i]), fmt, ap);
    va_end(ap);
}

static void fail_inv(struct run *r, enum inv i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_inv(struct run *r, enum inv i, const char *fmt, ...)
{
    va_list ap;

    if (!r->ok[i])
        return;
    r->ok[i] = false;
    va_start(ap, fmt);
    vsnprintf(r->why[i], sizeof(r->why[i]), fmt, ap);
    va_end(ap);
}

int64_t voucher_create(const struct it_server *srv, int64_t stock, bool async)
{
    char tok[TOKEN_STR_LEN], begin[UTIL_TIME_LEN], end[UTIL_TIME_LEN];
    struct it_resp resp;
    int64_t id = -1;
    char *body;

    it_token(1, TOKEN_ROLE_ADMIN, 3600, tok);
    /* On sale from a day ago for a week: clock jumps stay inside. */
    body = xasprintf("{\"shopId\":1,\"title\":\"fault suite\","
                     "\"payValue\":100,\"actualValue\":200,"
                     "\"type\":\"seckill\",\"stock\":%lld,"
                     "\"beginTime\":\"%s\",\"endTime\":\"%s\"%s}",
                     (long long)stock, it_time(-86400, begin),
                     it_time(7 * 86400, end),
                     async ? ",\"purchaseMode\":\"async\"" : "");
    if (it_http(srv, "POST", "/api/vouchers", body, tok, &resp) == 201) {
        const char *s = it_json_str(resp.json, "id");

        if (!s || util_parse_id(s, strlen(s), &id) != 0)
            id = -1;
    } else {
        fprintf(stderr, "faults: voucher create: %ld %s\n", resp.status,
                resp.body ? resp.body : "");
    }
    it_resp_free(&resp);
    free(body);
    return id;
}

/* ---- an async sale's state in Redis ---- */

/* One integer of a pipelined reply (a numeric string counts; a missing
 * key reads 0 for GET); -1 if it is something else. */
static long long reply_num(const redisReply *r)
{
    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1) /* XPENDING */
        return reply_num(r->element[0]);
    return -1;
}

void async_state_read(uint16_t port, unsigned db, int64_t v,
                      struct async_state *out)
{
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    long long *field[] = {&out->stock,        &out->buyers,        &out->stream,
                          &out->pending_hash, &out->pending_group, &out->dead};
    const int nfield = (int)(sizeof(field) / sizeof(field[0]));
    long long id = (long long)v;

    for (int i = 0; i < nfield; i++)
        *field[i] = -1;
    if (!rc || rc->err)
        goto out;
    redisSetTimeout(rc, tv);
    if (db)
        freeReplyObject(redisCommand(rc, "SELECT %u", db));
    redisAppendCommand(rc, "GET {v:%lld}:stock", id);
    redisAppendCommand(rc, "SCARD {v:%lld}:buyers", id);
    redisAppendCommand(rc, "XLEN {v:%lld}:stream", id);
    redisAppendCommand(rc, "HLEN {v:%lld}:pending", id);
    redisAppendCommand(rc, "XPENDING {v:%lld}:stream writers", id);
    redisAppendCommand(rc, "XLEN {v:%lld}:dead", id);
    for (int i = 0; i < nfield; i++) {
        redisReply *r = NULL;

        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            break;
        /* No group (nothing was ever read): nothing pending. */
        if (i == 4 && r->type == REDIS_REPLY_ERROR && strstr(r->str, "NOGROUP"))
            *field[i] = 0;
        else
            *field[i] = reply_num(r);
        freeReplyObject(r);
    }
out:
    if (rc)
        redisFree(rc);
}

int64_t async_wait_drained(uint16_t port, unsigned db, int64_t v,
                           int timeout_ms)
{
    int64_t start = util_mono_ms();

    for (;;) {
        struct async_state st;

        async_state_read(port, db, v, &st);
        if (st.stream == 0 && st.pending_hash == 0 && st.pending_group == 0)
            return util_mono_ms() - start;
        if (util_mono_ms() - start >= timeout_ms)
            return -1;
        sleep_ms(50);
    }
}

/* The sale is over for the suite: end it in MySQL an hour and more ago,
 * so that the writers of later scenarios no longer look after it, and
 * drop its state from the instances' Redis (checked by then). */
static void async_retire(struct run *r)
{
    MYSQL *my = fdb_connect(&r->db, 5);
    long long v = (long long)r->voucher;

    if (!my || fdb_exec(my,
                        "UPDATE seckill_vouchers SET end_time = NOW() - "
                        "INTERVAL 2 HOUR WHERE voucher_id = %lld",
                        v) != 0)
        say("could not retire async voucher %lld", v);
    if (my)
        mysql_close(my);
    if (predis_run(r->lock_redis_port, r->lock_redis_db,
                   "DEL {v:%lld}:info {v:%lld}:stock {v:%lld}:buyers "
                   "{v:%lld}:stream {v:%lld}:pending {v:%lld}:dead "
                   "{v:%lld}:frozen",
                   v, v, v, v, v, v, v) != 0)
        say("could not drop async voucher %lld's keys", v);
}

/* ---- recovery and drain ---- */

/* Time until instance i gives a definite answer to a purchase, or -1. */
static int64_t probe_instance(struct run *r, int i, int bound_ms,
                              int64_t *probe_user)
{
    int64_t start = util_mono_ms();

    for (;;) {
        struct it_server s = fleet_get(&r->fleet, i);
        struct attempt a;

        purchase_once(&s, i, r->voucher, (*probe_user)++, 2, &a);
        load_record(&r->load, &a);
        if (attempt_served(&a))
            return util_mono_ms() - start;
        if (util_mono_ms() - start >= bound_ms)
            return -1;
        sleep_ms(100);
    }
}

void run_finish(struct run *r, int bound_ms, int drain_ms)
{
    int64_t probe_user = r->user_first + 5000000, deadline, stock = -1;
    MYSQL *my = NULL;

    r->recovered = true;
    r->recover_ms = 0;
    r->stock_at_heal = -1;
    for (int tries = 0; tries < 20 && r->stock_at_heal < 0; tries++) {
        my = fdb_connect(&r->db, 2);
        if (!my || fdb_scalar(my, &r->stock_at_heal, STOCK_SQL,
                              (long long)r->voucher) != 0)
            sleep_ms(100);
        if (my)
            mysql_close(my);
        my = NULL;
    }
    for (int i = 0; i < r->fleet.n; i++) {
        int64_t ms;

        if (fleet_dead(&r->fleet, i))
            continue;
        ms = probe_instance(r, i, bound_ms, &probe_user);
        if (ms < 0) {
            r->recovered = false;
            r->recover_ms = bound_ms;
            say("instance %d gave no definite answer within %d ms", i,
                bound_ms);
        } else if (ms > r->recover_ms) {
            r->recover_ms = ms;
        }
    }

    /* Demand >= stock from here on: every instance takes load, flat out. */
    for (int i = 0; i < r->fleet.n; i++)
        fleet_set_load(&r->fleet, i, true);
    atomic_store(&r->load.think_ms, 0);
    deadline = util_mono_ms() + drain_ms;
    while (util_mono_ms() < deadline) {
        if (!my)
            my = fdb_connect(&r->db, 2);
        if (my &&
            fdb_scalar(my, &stock, STOCK_SQL, (long long)r->voucher) == 0 &&
            stock == 0)
            break;
        sleep_ms(200);
    }
    if (my)
        mysql_close(my);
    load_stop(&r->load);
    if (r->async) {
        /* Every 202 waits in the stream until a writer has it in MySQL:
         * the instances stay up until none is left. */
        int64_t ms = async_wait_drained(r->lock_redis_port, r->lock_redis_db,
                                        r->voucher, ASYNC_DRAIN_MS);

        if (ms < 0)
            run_extra_fail(r, INV_ASYNC,
                           "orders still waiting in the stream %d ms after "
                           "the load stopped",
                           ASYNC_DRAIN_MS);
        else
            say("the writers drained the stream %lld ms after the load "
                "stopped",
                (long long)ms);
    }
    sampler_stop(&r->sampler);
    /* Quiet: no instance is left working on an abandoned request. */
    if (fleet_stop(&r->fleet) != 0)
        run_extra_fail(r, INV_LIVE,
                       "an instance did not exit cleanly on "
                       "SIGTERM");
    check_invariants(r);
    if (r->async)
        async_retire(r);
}

/* ---- the invariants ---- */

struct order {
    int64_t id, user;
};

static int cmp_order_id(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static int cmp_order_user(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    return (x->user > y->user) - (x->user < y->user);
}

static int cmp_attempt(const void *a, const void *b)
{
    const struct attempt *x = a, *y = b;

    if (x->user != y->user)
        return (x->user > y->user) - (x->user < y->user);
    return (x->sent_ms > y->sent_ms) - (x->sent_ms < y->sent_ms);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* All orders of the voucher; *n of them in a new array. */
static struct order *load_orders(MYSQL *my, int64_t voucher, size_t *n)
{
    char sql[160];
    MYSQL_RES *res;
    MYSQL_ROW row;
    struct order *o;
    size_t k = 0;

    *n = 0;
    snprintf(sql, sizeof(sql),
             "SELECT id, user_id FROM voucher_orders WHERE voucher_id = %lld",
             (long long)voucher);
    if (mysql_query(my, sql) != 0 || !(res = mysql_store_result(my)))
        return NULL;
    o = xcalloc(mysql_num_rows(res) + 1, sizeof(*o));
    while ((row = mysql_fetch_row(res))) {
        o[k].id = strtoll(row[0], NULL, 10);
        o[k].user = strtoll(row[1], NULL, 10);
        k++;
    }
    mysql_free_result(res);
    *n = k;
    return o;
}

/* Lock keys of the lock Redis that have no TTL. -1 if Redis failed. */
static int locks_without_ttl(struct run *r, int *scanned)
{
    struct timeval tv = {2, 0};
    redisContext *rc =
        redisConnectWithTimeout("127.0.0.1", r->lock_redis_port, tv);
    char cursor[32] = "0";
    int bad = 0;

    *scanned = 0;
    if (!rc || rc->err) {
        if (rc)
            redisFree(rc);
        return -1;
    }
    redisSetTimeout(rc, tv);
    if (r->lock_redis_db)
        freeReplyObject(redisCommand(rc, "SELECT %u", r->lock_redis_db));
    do {
        redisReply *s =
            redisCommand(rc, "SCAN %s MATCH lock:order:* COUNT 1000", cursor);

        if (!s || s->type != REDIS_REPLY_ARRAY || s->elements != 2) {
            freeReplyObject(s);
            bad = -1;
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", s->element[0]->str);
        for (size_t k = 0; k < s->element[1]->elements; k++) {
            redisReply *t =
                redisCommand(rc, "PTTL %s", s->element[1]->element[k]->str);

            (*scanned)++;
            if (t && t->type == REDIS_REPLY_INTEGER && t->integer == -1)
                bad++;
            freeReplyObject(t);
        }
        freeReplyObject(s);
    } while (strcmp(cursor, "0") != 0);
    redisFree(rc);
    return bad;
}

static void check_ids(struct run *r, struct attempt *att, size_t n)
{
    int64_t *ids = xcalloc(n + 1, sizeof(*ids));
    size_t k = 0;
    int reused;

    for (size_t i = 0; i < n; i++)
        if (attempt_sold(&att[i]) && att[i].order_id > 0)
            ids[k++] = att[i].order_id;
    qsort(ids, k, sizeof(*ids), cmp_i64);
    for (size_t i = 1; i < k; i++)
        if (ids[i] == ids[i - 1])
            fail_inv(r, INV_IDS, "order id %lld answered twice",
                     (long long)ids[i]);
    free(ids);

    /* The primary key refused an id the worker had handed out before. */
    reused = fleet_log_count(&r->fleet, "order id already used", NULL);
    if (reused)
        fail_inv(r, INV_IDS, "the id worker repeated %d id(s) (logs)", reused);

    /* Across a loss of the counter: every id taken once the blocks
     * reserved before it aged out is greater (idgen/idgen.h). */
    for (int l = 0; l < r->nloss; l++) {
        int64_t max_before = 0, min_after = INT64_MAX;
        int64_t after = r->loss[l].before_ms + IDGEN_BLOCK_MAX_AGE_MS;

        if (after < r->loss[l].after_ms)
            after = r->loss[l].after_ms;
        for (size_t i = 0; i < n; i++) {
            if (!attempt_sold(&att[i]) || att[i].order_id <= 0)
                continue;
            if (att[i].done_ms < r->loss[l].before_ms &&
                att[i].order_id > max_before)
                max_before = att[i].order_id;
            if (att[i].sent_ms > after && att[i].order_id < min_after)
                min_after = att[i].order_id;
        }
        if (max_before && min_after != INT64_MAX && min_after <= max_before)
            fail_inv(r, INV_IDS,
                     "after counter loss %d: id %lld <= %lld from before", l,
                     (long long)min_after, (long long)max_before);
    }
}

/* The dead letters of an async sale: their order ids, sorted; *n of them
 * (0 when there are none or Redis failed). */
static int64_t *dead_orders(struct run *r, size_t *n)
{
    struct timeval tv = {2, 0};
    redisContext *rc =
        redisConnectWithTimeout("127.0.0.1", r->lock_redis_port, tv);
    redisReply *x = NULL;
    int64_t *ids = NULL;

    *n = 0;
    if (!rc || rc->err)
        goto out;
    redisSetTimeout(rc, tv);
    if (r->lock_redis_db)
        freeReplyObject(redisCommand(rc, "SELECT %u", r->lock_redis_db));
    x = redisCommand(rc, "XRANGE {v:%lld}:dead - +", (long long)r->voucher);
    if (!x || x->type != REDIS_REPLY_ARRAY)
        goto out;
    ids = xcalloc(x->elements + 1, sizeof(*ids));
    for (size_t i = 0; i < x->elements; i++) {
        const redisReply *f = x->element[i]->element[1];

        for (size_t k = 0; k + 1 < f->elements; k += 2)
            if (strcmp(f->element[k]->str, "o") == 0)
                ids[(*n)++] = strtoll(f->element[k + 1]->str, NULL, 10);
    }
    qsort(ids, *n, sizeof(*ids), cmp_i64);
out:
    freeReplyObject(x);
    if (rc)
        redisFree(rc);
    return ids;
}

/*
 * A 201 or 202 whose order is not in MySQL. Only an async sale whose
 * Redis came back from an older file may have those, and only two kinds,
 * each counted: the 202s of the window the file did not hold (lost), and
 * 202s that the older state sold again to a buyer it had forgotten,
 * which the writer could only move to the dead letters (resold; the
 * buyer holds the other order).
 */
static void sold_missing(struct run *r, const struct attempt *a, bool has,
                         const int64_t *dead, size_t ndead)
{
    bool window = r->lost_from_ms && a->status == 202 &&
                  a->done_ms >= r->lost_from_ms && a->sent_ms <= r->lost_to_ms;

    if (window) {
        r->lost++;
        return;
    }
    if (r->lost_from_ms && a->status == 202 && has &&
        bsearch(&a->order_id, dead, ndead, sizeof(*dead), cmp_i64)) {
        r->resold++;
        return;
    }
    fail_inv(r, INV_201_KEPT, "%ld order %lld of user %lld not in MySQL",
             a->status, (long long)a->order_id, (long long)a->user);
}

/* Invariants 3 and 4, user by user. */
static void check_users(struct run *r, struct attempt *att, size_t n,
                        struct order *by_id, struct order *by_user,
                        size_t norders)
{
    size_t ndead = 0;
    int64_t *dead = r->lost_from_ms ? dead_orders(r, &ndead) : NULL;

    for (size_t i = 0; i < n;) {
        size_t j = i;
        int nsold = 0, already = 0, indef = 0;
        int64_t already_done = 0;
        struct order key = {.user = att[i].user}, *has;

        while (j < n && att[j].user == att[i].user)
            j++;
        has = bsearch(&key, by_user, norders, sizeof(*by_user), cmp_order_user);
        for (size_t k = i; k < j; k++) {
            struct attempt *a = &att[k];

            if (attempt_sold(a)) {
                struct order oid = {.id = a->order_id}, *o;

                nsold++;
                if (r->lost_from_ms && a->status == 202 &&
                    a->done_ms >= r->lost_from_ms &&
                    a->sent_ms <= r->lost_to_ms)
                    r->lost_window++;
                o = bsearch(&oid, by_id, norders, sizeof(*by_id), cmp_order_id);
                if (!o)
                    sold_missing(r, a, has != NULL, dead, ndead);
                else if (o->user != a->user)
                    fail_inv(r, INV_201_KEPT,
                             "%ld order %lld of user %lld is user %lld's",
                             a->status, (long long)a->order_id,
                             (long long)a->user, (long long)o->user);
                if (already && already_done <= a->sent_ms)
                    fail_inv(r, INV_4XX_CLEAN,
                             "user %lld: %ld after ALREADY_PURCHASED",
                             (long long)a->user, a->status);
            } else if (!attempt_definite(a)) {
                indef++;
            } else if (strcmp(a->code, "ALREADY_PURCHASED") == 0) {
                if (!already++)
                    already_done = a->done_ms;
            }
        }
        if (nsold > 1)
            fail_inv(r, INV_ONE_EACH, "user %lld was sold %d times (201, 202)",
                     (long long)att[i].user, nsold);
        if (has && !nsold && !indef)
            fail_inv(r, INV_4XX_CLEAN,
                     "user %lld has an order, all answers definite (4xx, "
                     "503)",
                     (long long)att[i].user);
        if (!has && already)
            fail_inv(r, INV_4XX_CLEAN,
                     "user %lld: ALREADY_PURCHASED without an order",
                     (long long)att[i].user);
        i = j;
    }
    free(dead);
}

/* 7: an async sale's writers drained it, and Redis agrees with MySQL. */
static void check_async(struct run *r)
{
    struct async_state st;

    async_state_read(r->lock_redis_port, r->lock_redis_db, r->voucher, &st);
    if (st.stream != 0 || st.pending_hash != 0 || st.pending_group != 0)
        fail_inv(r, INV_ASYNC,
                 "not drained: %lld in the stream, %lld in the pending hash, "
                 "%lld pending in the group",
                 st.stream, st.pending_hash, st.pending_group);
    if (st.dead != (long long)r->resold)
        fail_inv(r, INV_ASYNC, "%lld dead letters (%zu accounted for)", st.dead,
                 r->resold);
    if (st.stock != r->stock_final)
        fail_inv(r, INV_ASYNC, "Redis stock %lld, MySQL stock %lld", st.stock,
                 (long long)r->stock_final);
    if (st.buyers != r->orders)
        fail_inv(r, INV_ASYNC,
                 "Redis has %lld buyers, MySQL %lld active "
                 "orders",
                 st.buyers, (long long)r->orders);
}

void check_invariants(struct run *r)
{
    struct order *by_id = NULL, *by_user = NULL;
    struct attempt *att;
    MYSQL *my = NULL;
    int64_t dups = -1;
    size_t n, norders = 0;
    int bad, scanned;

    for (int i = 0; i < INV_COUNT; i++) {
        r->ok[i] = true;
        r->why[i][0] = '\0';
    }
    n = r->load.n;
    att = r->load.att;
    r->requests = n;
    r->nsold = r->n4xx = r->n503 = r->nindef = 0;
    r->lost_window = r->lost = r->resold = 0;
    for (size_t i = 0; i < n; i++) {
        if (attempt_sold(&att[i]))
            r->nsold++;
        else if (att[i].status >= 400 && att[i].status < 500)
            r->n4xx++;
        else if (attempt_definite(&att[i]))
            r->n503++;
        else
            r->nindef++;
    }

    for (int tries = 0; !my && tries < 50; tries++) {
        my = fdb_connect(&r->db, 5);
        if (!my)
            sleep_ms(200);
    }
    if (!my ||
        fdb_scalar(my, &r->orders,
                   "SELECT COUNT(*) FROM voucher_orders WHERE "
                   "voucher_id = %lld AND status IN (1, 2)",
                   (long long)r->voucher) ||
        fdb_scalar(my, &r->stock_final, STOCK_SQL, (long long)r->voucher) ||
        fdb_scalar(my, &dups,
                   "SELECT COUNT(*) FROM (SELECT user_id FROM voucher_orders "
                   "WHERE voucher_id = %lld AND status IN (1, 2) GROUP BY "
                   "user_id HAVING COUNT(*) > 1) d",
                   (long long)r->voucher) ||
        !(by_id = load_orders(my, r->voucher, &norders))) {
        for (int i = 0; i < INV_COUNT; i++)
            fail_inv(r, (enum inv)i, "MySQL unreachable for the checks");
        goto out;
    }

    /* 1. */
    r->min_stock = atomic_load(&r->sampler.min_stock);
    /* Unpaid and paid orders hold a unit each; cancelled and expired
     * ones gave theirs back: stock + unpaid + paid = initial. */
    if (r->orders != r->stock0 - r->stock_final)
        fail_inv(r, INV_STOCK, "%lld active orders, stock %lld -> %lld",
                 (long long)r->orders, (long long)r->stock0,
                 (long long)r->stock_final);
    if (r->stock_final < 0 || r->min_stock < 0)
        fail_inv(r, INV_STOCK, "stock went negative (%lld)",
                 (long long)r->min_stock);
    if (atomic_load(&r->sampler.samples) == 0)
        fail_inv(r, INV_STOCK, "the stock was never sampled");

    /* 2. */
    if (dups != 0)
        fail_inv(r, INV_ONE_EACH, "%lld users with two orders",
                 (long long)dups);

    /* 3, 4 (and 2 from the client's side). */
    by_user = xcalloc(norders + 1, sizeof(*by_user));
    memcpy(by_user, by_id, norders * sizeof(*by_id));
    qsort(by_id, norders, sizeof(*by_id), cmp_order_id);
    qsort(by_user, norders, sizeof(*by_user), cmp_order_user);
    qsort(att, n, sizeof(*att), cmp_attempt);
    check_users(r, att, n, by_id, by_user, norders);
    for (size_t i = 1; i < norders; i++)
        if (by_id[i].id == by_id[i - 1].id)
            fail_inv(r, INV_IDS, "order id %lld twice in MySQL",
                     (long long)by_id[i].id);

    /* 5. */
    check_ids(r, att, n);
    r->ambiguous = fleet_log_count(&r->fleet, "commit outcome unknown", NULL);

    /* 6. */
    if (r->stock_final != 0)
        fail_inv(r, INV_LIVE, "stock %lld left after healing",
                 (long long)r->stock_final);
    bad = locks_without_ttl(r, &scanned);
    if (bad < 0)
        fail_inv(r, INV_LIVE, "could not scan the lock keys");
    else if (bad > 0)
        fail_inv(r, INV_LIVE, "%d of %d lock keys without a TTL", bad, scanned);

    /* 7. */
    if (r->async)
        check_async(r);
    if (r->lost_from_ms)
        run_note(r,
                 "%zu 202s answered between the copy of Redis' file and "
                 "its restart from it, %zu of them lost (allowed here "
                 "only); %zu 202s sold again to buyers the older file "
                 "forgot (dead letters; each buyer holds one order)",
                 r->lost_window, r->lost, r->resold);

out:
    for (int i = 0; i < INV_COUNT; i++)
        if (!r->extra_ok[i])
            fail_inv(r, (enum inv)i, "%s", r->extra_why[i]);
    free(by_id);
    free(by_user);
    if (my)
        mysql_close(my);
}
