/*
 * check.c - the end of every scenario: the recovery probe (each instance
 * gives a definite answer again within a bound, without a restart), the
 * drain (after healing, demand >= stock must sell the stock out), and the
 * six invariants of docs/reliability.md, checked once the system is
 * quiet against MySQL, Redis, the client's record of every attempt and
 * the instances' logs.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/faults/faults.h"

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

int64_t voucher_create(const struct it_server *srv, int64_t stock)
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
                     "\"beginTime\":\"%s\",\"endTime\":\"%s\"}",
                     (long long)stock, it_time(-86400, begin),
                     it_time(7 * 86400, end));
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
    sampler_stop(&r->sampler);
    /* Quiet: no instance is left working on an abandoned request. */
    if (fleet_stop(&r->fleet) != 0)
        run_extra_fail(r, INV_LIVE,
                       "an instance did not exit cleanly on "
                       "SIGTERM");
    check_invariants(r);
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

/* How many lines of the instances' logs contain needle. */
static int log_count(struct run *r, const char *needle)
{
    int count = 0;

    for (int i = 0; i < r->fleet.nlogs; i++) {
        FILE *f = fopen(r->fleet.logs[i], "r");
        char line[4096];

        if (!f)
            continue;
        while (fgets(line, sizeof(line), f))
            if (strstr(line, needle))
                count++;
        fclose(f);
    }
    return count;
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
        if (att[i].status == 201 && att[i].order_id > 0)
            ids[k++] = att[i].order_id;
    qsort(ids, k, sizeof(*ids), cmp_i64);
    for (size_t i = 1; i < k; i++)
        if (ids[i] == ids[i - 1])
            fail_inv(r, INV_IDS, "order id %lld answered twice",
                     (long long)ids[i]);
    free(ids);

    /* The primary key refused an id the worker had handed out before. */
    reused = log_count(r, "order id already used");
    if (reused)
        fail_inv(r, INV_IDS, "the id worker repeated %d id(s) (logs)", reused);

    /* Across a loss of the counter: every id after it is greater. */
    for (int l = 0; l < r->nloss; l++) {
        int64_t max_before = 0, min_after = INT64_MAX;

        for (size_t i = 0; i < n; i++) {
            if (att[i].status != 201 || att[i].order_id <= 0)
                continue;
            if (att[i].done_ms < r->loss[l].before_ms &&
                att[i].order_id > max_before)
                max_before = att[i].order_id;
            if (att[i].sent_ms > r->loss[l].after_ms &&
                att[i].order_id < min_after)
                min_after = att[i].order_id;
        }
        if (max_before && min_after != INT64_MAX && min_after <= max_before)
            fail_inv(r, INV_IDS,
                     "after counter loss %d: id %lld <= %lld from before", l,
                     (long long)min_after, (long long)max_before);
    }
}

/* Invariants 3 and 4, user by user. */
static void check_users(struct run *r, struct attempt *att, size_t n,
                        struct order *by_id, struct order *by_user,
                        size_t norders)
{
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int n201 = 0, already = 0, indef = 0;
        int64_t already_done = 0;
        struct order key = {.user = att[i].user}, *has;

        while (j < n && att[j].user == att[i].user)
            j++;
        has = bsearch(&key, by_user, norders, sizeof(*by_user), cmp_order_user);
        for (size_t k = i; k < j; k++) {
            struct attempt *a = &att[k];

            if (a->status == 201) {
                struct order oid = {.id = a->order_id}, *o;

                n201++;
                o = bsearch(&oid, by_id, norders, sizeof(*by_id), cmp_order_id);
                if (!o || o->user != a->user)
                    fail_inv(r, INV_201_KEPT,
                             "201 order %lld of user %lld not in MySQL",
                             (long long)a->order_id, (long long)a->user);
                if (already && already_done <= a->sent_ms)
                    fail_inv(r, INV_4XX_CLEAN,
                             "user %lld: 201 after ALREADY_PURCHASED",
                             (long long)a->user);
            } else if (!attempt_definite(a)) {
                indef++;
            } else if (strcmp(a->code, "ALREADY_PURCHASED") == 0) {
                if (!already++)
                    already_done = a->done_ms;
            }
        }
        if (n201 > 1)
            fail_inv(r, INV_ONE_EACH, "user %lld got %d answers 201",
                     (long long)att[i].user, n201);
        if (has && !n201 && !indef)
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
    r->n201 = r->n4xx = r->n503 = r->nindef = 0;
    for (size_t i = 0; i < n; i++) {
        if (att[i].status == 201)
            r->n201++;
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
    r->ambiguous = log_count(r, "commit outcome unknown");

    /* 6. */
    if (r->stock_final != 0)
        fail_inv(r, INV_LIVE, "stock %lld left after healing",
                 (long long)r->stock_final);
    bad = locks_without_ttl(r, &scanned);
    if (bad < 0)
        fail_inv(r, INV_LIVE, "could not scan the lock keys");
    else if (bad > 0)
        fail_inv(r, INV_LIVE, "%d of %d lock keys without a TTL", bad, scanned);

out:
    for (int i = 0; i < INV_COUNT; i++)
        if (!r->extra_ok[i])
            fail_inv(r, (enum inv)i, "%s", r->extra_why[i]);
    free(by_id);
    free(by_user);
    if (my)
        mysql_close(my);
}
