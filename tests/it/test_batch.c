/*
 * test_batch.c - merged purchases and segmented stock (issue 4).
 *
 * Over HTTP, against the real binary: a crowd of 1,000 users, all in
 * flight at once over two instances, buying a voucher of 300 (merged
 * transactions: exactly 300 orders, one per user, and batches of more
 * than one purchase really happened, per GET /metrics); the same crowd on
 * a voucher created with 8 stock segments by a third instance; and a
 * stock of 5 for 20 buyers, both ways.
 *
 * In the test process, through store_purchase_batch() as the purchase
 * engine calls it, one batch at a time: a batch holding
 * users who already have an order and users present twice (the unique
 * key clash, answered per purchase), a batch larger than the stock (the
 * CAS fails, the first 5 are retried), a batch with an order id that is
 * already taken (that member alone retries with a fresh id), a batch
 * where some users have an order (they are found, the rest still buy
 * together), the naive
 * transaction (SECKILL_BATCH_MAX=1), and segments that run empty.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mysql.h>

#include "common/metrics.h"
#include "common/redis_link.h"
#include "idgen/idgen.h"
#include "tests/it/harness.h"
#include "tests/it/promtext.h"

/* Far from the users of the other tests. */
#define USER_BASE 9300000000LL
#define CROWD 1000
#define CROWD_STOCK 300
#define SEGMENTS 8

/* A and B: defaults (merged purchases); S creates segmented vouchers; T
 * merges at most two purchases per transaction. */
static struct it_server srv[4];
static int64_t next_user = USER_BASE;

static int group_setup(void **state)
{
    static const char *const plain[] = {"SECKILL_RATE_USER=0",
                                        "SECKILL_THREADS",
                                        "SECKILL_BATCH_MAX",
                                        "SECKILL_BATCH_LINGER_US",
                                        "SECKILL_STOCK_SEGMENTS",
                                        "SECKILL_LOCK_URL",
                                        NULL};
    static const char *const segmented[] = {
        "SECKILL_RATE_USER=0",      "SECKILL_THREADS",  "SECKILL_BATCH_MAX",
        "SECKILL_STOCK_SEGMENTS=8", "SECKILL_LOCK_URL", NULL};
    static const char *const two[] = {"SECKILL_RATE_USER=0",
                                      "SECKILL_THREADS",
                                      "SECKILL_BATCH_MAX=2",
                                      "SECKILL_BATCH_LINGER_US=0",
                                      "SECKILL_STOCK_SEGMENTS",
                                      "SECKILL_LOCK_URL",
                                      NULL};

    (void)state;
    it_init();
    if (mysql_library_init(0, NULL, NULL))
        return -1;
    next_user += (it_unique() % 100000) * 10000;
    if (it_server_start(&srv[0], "batch-a", plain) != 0)
        return -1;
    if (it_server_start(&srv[1], "batch-b", plain) != 0 ||
        it_server_start(&srv[2], "batch-s", segmented) != 0 ||
        it_server_start(&srv[3], "batch-t", two) != 0) {
        it_group_teardown(srv, 4);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srv, 4);
}

/* ---- over HTTP ---- */

/* Purchases in transactions and transactions so far, from /metrics. */
struct batches {
    double purchases, transactions;
};

static void batches_get(const struct it_server *s, struct batches *b)
{
    struct it_resp resp;
    struct prom_doc doc;

    it_http(s, "GET", "/metrics", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    if (prom_parse(resp.body, &doc) != 0) {
        print_error("/metrics: %s\n", doc.error);
        fail();
    }
    b->purchases = prom_value(&doc, "seckill_purchase_batch_size_sum", "");
    b->transactions = prom_value(&doc, "seckill_purchase_batch_size_count", "");
    prom_free(&doc);
    it_resp_free(&resp);
    assert_true(b->purchases >= 0 && b->transactions >= 0);
}

/* The stock as the API reports it (GET /api/vouchers/{id}). */
static int64_t api_stock(int64_t voucher)
{
    struct it_resp resp;
    char path[64];
    json_t *stock;
    int64_t v;

    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)voucher);
    it_http(&srv[0], "GET", path, NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    stock = json_object_get(resp.json, "stock");
    assert_true(json_is_integer(stock));
    v = json_integer_value(stock);
    it_resp_free(&resp);
    return v;
}

/* Stock in MySQL: the voucher's row plus its segments. */
static int64_t sql_stock_total(int64_t voucher)
{
    return it_sql_stock(voucher) +
           it_sql_scalar("SELECT COALESCE(SUM(stock), 0) FROM "
                         "seckill_stock_segments WHERE voucher_id = %lld",
                         (long long)voucher);
}

/*
 * users buyers, one request each, all at once, alternating between A and
 * B (crowd) or the servers given (crowd_on). Asserts exactly stock 201s, every
 * other answer 409 SOLD_OUT, and the invariants in MySQL: orders == stock sold,
 * one per user, every 201's id is that user's order, nothing left, nothing
 * negative.
 */
static void crowd_on(const struct it_server *on, size_t non, long timeout_s,
                     int64_t voucher, int64_t stock, size_t users);

static void crowd(int64_t voucher, int64_t stock, size_t users)
{
    crowd_on(srv, 2, 0, voucher, stock, users);
}

/* The same over the servers on[0..non), each request given timeout_s
 * (0: the harness's default). */
static void crowd_on(const struct it_server *on, size_t non, long timeout_s,
                     int64_t voucher, int64_t stock, size_t users)
{
    struct it_req *reqs = xcalloc(users, sizeof(*reqs));
    struct it_resp *resps = xcalloc(users, sizeof(*resps));
    const struct it_server **to = xcalloc(users, sizeof(*to));
    char(*tokens)[TOKEN_STR_LEN] = xcalloc(users, sizeof(*tokens));
    int64_t first = next_user, t0;
    size_t created = 0, sold_out = 0;
    char path[96];

    next_user += (int64_t)users;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    for (size_t i = 0; i < users; i++) {
        it_token(first + (int64_t)i, TOKEN_ROLE_USER, 3600, tokens[i]);
        reqs[i].method = "POST";
        reqs[i].path = path;
        reqs[i].token = tokens[i];
        reqs[i].timeout_s = timeout_s;
        to[i] = &on[i % non];
    }
    t0 = util_mono_ms();
    it_http_run_all(reqs, to, resps, users);
    print_message("      %zu purchases in %lld ms\n", users,
                  (long long)(util_mono_ms() - t0));

    for (size_t i = 0; i < users; i++) {
        struct it_resp *r = &resps[i];

        if (r->status == 201) {
            int64_t id = it_json_id(r->json, "orderId");

            created++;
            assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM "
                                              "voucher_orders WHERE id = %lld "
                                              "AND user_id = %lld AND "
                                              "voucher_id = %lld",
                                              (long long)id,
                                              (long long)(first + (int64_t)i),
                                              (long long)voucher));
        } else {
            it_assert_error(r, 409, "SOLD_OUT");
            sold_out++;
        }
        it_resp_free(r);
    }
    print_message("      201: %zu, SOLD_OUT: %zu\n", created, sold_out);
    assert_int_equal(stock, created);
    assert_int_equal(stock, it_sql_order_count(voucher));
    assert_int_equal(stock, it_sql_scalar("SELECT COUNT(DISTINCT user_id) "
                                          "FROM voucher_orders WHERE "
                                          "voucher_id = %lld",
                                          (long long)voucher));
    assert_int_equal(0, sql_stock_total(voucher));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM "
                                      "seckill_stock_segments WHERE "
                                      "voucher_id = %lld AND stock < 0",
                                      (long long)voucher));
    assert_int_equal(0, api_stock(voucher));
    free(reqs);
    free(resps);
    free(to);
    free(tokens);
}

/* The crowd on the merged transaction: batches of more than one. */
static void test_crowd_merged(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, CROWD_STOCK, -60, 3600);
    struct batches a0, b0, a1, b1;
    double purchases, transactions;

    (void)state;
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM "
                                      "seckill_stock_segments WHERE "
                                      "voucher_id = %lld",
                                      (long long)v));
    batches_get(&srv[0], &a0);
    batches_get(&srv[1], &b0);
    crowd(v, CROWD_STOCK, CROWD);
    batches_get(&srv[0], &a1);
    batches_get(&srv[1], &b1);
    purchases = a1.purchases - a0.purchases + b1.purchases - b0.purchases;
    transactions =
        a1.transactions - a0.transactions + b1.transactions - b0.transactions;
    print_message("      %.0f purchases in %.0f transactions (%.1f each)\n",
                  purchases, transactions,
                  transactions > 0 ? purchases / transactions : 0.0);
    assert_true(purchases == CROWD_STOCK);
    assert_true(transactions <= purchases / 4);
}

/*
 * The crowd on one instance: what merging promises is batches of several
 * purchases, here at least four on average (transactions at most a
 * quarter of the purchases).
 */
static void test_crowd_merged_one_instance(void **state)
{
    int64_t v = it_seckill_create(&srv[0], 1, CROWD_STOCK, -60, 3600);
    struct batches a0, a1;
    double purchases, transactions;

    (void)state;
    batches_get(&srv[0], &a0);
    crowd_on(&srv[0], 1, 0, v, CROWD_STOCK, CROWD);
    batches_get(&srv[0], &a1);
    purchases = a1.purchases - a0.purchases;
    transactions = a1.transactions - a0.transactions;
    print_message("      one instance: %.0f purchases in %.0f transactions "
                  "(%.1f each)\n",
                  purchases, transactions,
                  transactions > 0 ? purchases / transactions : 0.0);
    assert_true(purchases == CROWD_STOCK);
    assert_true(transactions <= purchases / 4);
}

/*
 * Batches of at most two (no linger): 50 buyers at once on T, so the
 * queue always holds more than one batch and every batch ends by handing
 * the queue to the next leader. Each buyer must be answered within 10 s
 * (a lost hand-off would leave the rest waiting forever).
 */
static void test_handoff_batch_max_2(void **state)
{
    int64_t v = it_seckill_create(&srv[3], 1, 30, -60, 3600);
    struct batches t0, t1;

    (void)state;
    batches_get(&srv[3], &t0);
    crowd_on(&srv[3], 1, 10, v, 30, 50);
    batches_get(&srv[3], &t1);
    print_message("      %.0f purchases in %.0f transactions\n",
                  t1.purchases - t0.purchases,
                  t1.transactions - t0.transactions);
    assert_true(t1.purchases - t0.purchases == 30);
    /* Never more than two in one transaction. */
    assert_true(t1.transactions - t0.transactions >= 15);
}

/*
 * A purchase is bounded in time: while another session holds the hot
 * row's lock for longer than a purchase may take, a crowd on one instance
 * is answered 503 within the budget (10 s, plus one statement), with
 * nothing written, instead of queueing batch after batch behind row-lock
 * timeouts; and sells once the lock is gone.
 */
static void test_purchase_budget(void **state)
{
    enum { N = 24 };
    int64_t v = it_seckill_create(&srv[0], 1, 100, -60, 3600);
    struct it_req reqs[N];
    struct it_resp resps[N];
    const struct it_server *to[N];
    char tokens[N][TOKEN_STR_LEN], path[96];
    int64_t first = next_user, t0, took;
    double slowest = 0;

    (void)state;
    next_user += N;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (int i = 0; i < N; i++) {
        it_token(first + i, TOKEN_ROLE_USER, 3600, tokens[i]);
        reqs[i] = (struct it_req){.method = "POST",
                                  .path = path,
                                  .token = tokens[i],
                                  .timeout_s = 25};
        to[i] = &srv[0];
    }
    assert_int_equal(0, it_sql_exec("START TRANSACTION"));
    assert_int_equal(100, it_sql_scalar("SELECT stock FROM seckill_vouchers "
                                        "WHERE voucher_id = %lld FOR UPDATE",
                                        (long long)v));
    t0 = util_mono_ms();
    it_http_run_all(reqs, to, resps, N);
    took = util_mono_ms() - t0;
    assert_int_equal(0, it_sql_exec("ROLLBACK"));
    for (int i = 0; i < N; i++) {
        if (resps[i].elapsed_ms > slowest)
            slowest = resps[i].elapsed_ms;
        it_assert_error(&resps[i], 503, "UNAVAILABLE");
        it_resp_free(&resps[i]);
    }
    print_message("      %d purchases against a locked row: all 503, the "
                  "slowest in %.0f ms (%lld ms in all)\n",
                  N, slowest, (long long)took);
    assert_true(slowest <= STORE_PURCHASE_BUDGET_MS + 4000);
    assert_int_equal(0, it_sql_order_count(v));
    assert_int_equal(100, it_sql_stock(v));
    /* The row is free again: the same buyers get their orders. */
    crowd_on(&srv[0], 1, 0, v, 100, 100);
}

/* A voucher made by S is split into segments; A and B sell it as such. */
static void test_crowd_segmented(void **state)
{
    int64_t v = it_seckill_create(&srv[2], 1, CROWD_STOCK, -60, 3600);

    (void)state;
    assert_int_equal(SEGMENTS, it_sql_scalar("SELECT COUNT(*) FROM "
                                             "seckill_stock_segments WHERE "
                                             "voucher_id = %lld",
                                             (long long)v));
    /* 300 over 8: four of 38 and four of 37; the row itself holds 0. */
    assert_int_equal(38, it_sql_scalar("SELECT MAX(stock) FROM "
                                       "seckill_stock_segments WHERE "
                                       "voucher_id = %lld",
                                       (long long)v));
    assert_int_equal(37, it_sql_scalar("SELECT MIN(stock) FROM "
                                       "seckill_stock_segments WHERE "
                                       "voucher_id = %lld",
                                       (long long)v));
    assert_int_equal(0, it_sql_stock(v));
    assert_int_equal(CROWD_STOCK, api_stock(v));
    assert_int_equal(CROWD_STOCK, sql_stock_total(v));
    crowd(v, CROWD_STOCK, CROWD);
}

/* Sold out in the middle: 5 in stock, 20 buyers at once. */
static void test_sold_out_mid_batch(void **state)
{
    (void)state;
    crowd(it_seckill_create(&srv[0], 1, 5, -60, 3600), 5, 20);
    /* Segmented: three of the eight segments start empty. */
    crowd(it_seckill_create(&srv[2], 1, 5, -60, 3600), 5, 20);
}

/* ---- in the test process, through the store ---- */

struct buyer {
    int64_t voucher;
    int64_t user;
    int64_t order_id; /* given, or 0: from the ID worker */
    int first_err;    /* of the first try */
    int err;          /* of the last try */
    enum store_purchase outcome;
};

/*
 * The buyers b[0..n) as one batch of the voucher of b[0], as the purchase
 * engine hands it to the store: one store_purchase_batch() call, then the
 * members whose order id was taken already again with a fresh one (3
 * tries in all, as the engine does).
 */
static void buyers_run(struct buyer *b, size_t n, const struct store_config *c)
{
    struct store *st = store_new(c);
    struct store_purchase_item *items = xcalloc(n, sizeof(*items));
    struct store_purchase_item **pending = xcalloc(n, sizeof(*pending));

    for (size_t i = 0; i < n; i++) {
        items[i].user_id = b[i].user;
        items[i].order_id = b[i].order_id;
        items[i].deadline_ms = util_mono_ms() + STORE_PURCHASE_BUDGET_MS;
        b[i].first_err = 1; /* not tried yet */
    }
    for (int attempt = 0; attempt < 3; attempt++) {
        size_t k = 0;

        for (size_t i = 0; i < n; i++) {
            if (attempt > 0 && b[i].err != -EEXIST)
                continue;
            if (attempt > 0 || !items[i].order_id) {
                if (attempt > 0)
                    idgen_discard("order");
                assert_int_equal(0, idgen_next(store_redis_link(st), "order",
                                               &items[i].order_id));
            }
            pending[k++] = &items[i];
        }
        if (k == 0)
            break;
        store_purchase_batch(st, b[0].voucher, pending, k);
        for (size_t i = 0; i < n; i++) {
            if (attempt > 0 && b[i].err != -EEXIST)
                continue;
            b[i].err = items[i].err;
            b[i].outcome = items[i].outcome;
            if (attempt == 0)
                b[i].first_err = items[i].err;
        }
    }
    free(pending);
    free(items);
    store_free(st);
}

/* The test backends with the purchase settings given. */
static struct store_config store_cfg(unsigned batch_max)
{
    struct store_config c = *it_store_config();

    c.batch_max = batch_max;
    c.stock_segments = 1;
    return c;
}

static size_t count_outcome(const struct buyer *b, size_t n,
                            enum store_purchase o)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        assert_int_equal(0, b[i].err);
        k += b[i].outcome == o;
    }
    return k;
}

/*
 * One batch with five users who already have an order (the SELECT finds
 * them), five users present twice (both pass the SELECT; the multi-row
 * INSERT hits the unique key and the batch goes one transaction each)
 * and five new users: 10 new orders, one per user.
 */
static void test_store_duplicates_in_batch(void **state)
{
    struct store_config c = store_cfg(64);
    int64_t v = it_seckill_create(&srv[0], 1, 100, -60, 3600);
    int64_t u = next_user;
    struct buyer pre[5] = {0}, b[20] = {0};
    size_t n = 0;

    (void)state;
    next_user += 15;
    for (int i = 0; i < 5; i++) {
        pre[i].voucher = v;
        pre[i].user = u + i;
    }
    buyers_run(pre, 5, &c);
    assert_int_equal(5, count_outcome(pre, 5, STORE_PURCHASE_OK));

    for (int i = 0; i < 5; i++)
        b[n++] = (struct buyer){.voucher = v, .user = u + i};
    for (int i = 5; i < 10; i++) {
        b[n++] = (struct buyer){.voucher = v, .user = u + i};
        b[n++] = (struct buyer){.voucher = v, .user = u + i};
    }
    for (int i = 10; i < 15; i++)
        b[n++] = (struct buyer){.voucher = v, .user = u + i};
    buyers_run(b, n, &c);
    assert_int_equal(10, count_outcome(b, n, STORE_PURCHASE_OK));
    assert_int_equal(10, count_outcome(b, n, STORE_PURCHASE_DUPLICATE));
    for (int i = 0; i < 5; i++)
        assert_int_equal(STORE_PURCHASE_DUPLICATE, b[i].outcome);
    for (int i = 5; i < 10; i++)
        assert_int_equal(1,
                         (b[5 + 2 * (i - 5)].outcome == STORE_PURCHASE_OK) +
                             (b[6 + 2 * (i - 5)].outcome == STORE_PURCHASE_OK));
    for (size_t i = 15; i < n; i++)
        assert_int_equal(STORE_PURCHASE_OK, b[i].outcome);
    assert_int_equal(15, it_sql_order_count(v));
    assert_int_equal(85, it_sql_stock(v));
}

/* Purchases in transactions and transactions of this process so far. */
static void local_batches(struct batches *b)
{
    char *text = metrics_render(NULL, NULL);
    struct prom_doc doc;

    assert_int_equal(0, prom_parse(text, &doc));
    b->purchases = prom_value(&doc, "seckill_purchase_batch_size_sum", "");
    b->transactions = prom_value(&doc, "seckill_purchase_batch_size_count", "");
    prom_free(&doc);
    free(text);
}

/*
 * A batch with five users who have an order already and five who do not:
 * the INSERT hits the unique key, the existing orders are looked up, and
 * the other five still buy together, in one transaction (or two, if they
 * did not all make the same batch), not one each.
 */
static void test_store_existing_orders_in_batch(void **state)
{
    struct store_config c = store_cfg(64);
    int64_t v = it_seckill_create(&srv[0], 1, 100, -60, 3600);
    int64_t u = next_user;
    struct buyer pre[5] = {0}, b[10] = {0};
    struct batches before, after;

    (void)state;
    next_user += 10;
    for (int i = 0; i < 5; i++)
        pre[i] = (struct buyer){.voucher = v, .user = u + i};
    buyers_run(pre, 5, &c);
    assert_int_equal(5, count_outcome(pre, 5, STORE_PURCHASE_OK));

    for (int i = 0; i < 10; i++)
        b[i] = (struct buyer){.voucher = v, .user = u + i};
    local_batches(&before);
    buyers_run(b, 10, &c);
    local_batches(&after);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(0, b[i].err);
        assert_int_equal(i < 5 ? STORE_PURCHASE_DUPLICATE : STORE_PURCHASE_OK,
                         b[i].outcome);
    }
    print_message("      5 new orders in %.0f transaction(s)\n",
                  after.transactions - before.transactions);
    assert_true(after.purchases - before.purchases == 5);
    assert_true(after.transactions - before.transactions <= 2);
    assert_int_equal(10, it_sql_order_count(v));
    assert_int_equal(90, it_sql_stock(v));
}

/* 20 buyers in one batch, 5 in stock: the CAS for 20 fails, 5 buy. */
static void stock_5_for_20(const struct store_config *c, int64_t v)
{
    struct buyer b[20] = {0};

    for (int i = 0; i < 20; i++)
        b[i] = (struct buyer){.voucher = v, .user = next_user++};
    buyers_run(b, 20, c);
    assert_int_equal(5, count_outcome(b, 20, STORE_PURCHASE_OK));
    assert_int_equal(15, count_outcome(b, 20, STORE_PURCHASE_SOLD_OUT));
    assert_int_equal(5, it_sql_order_count(v));
    assert_int_equal(0, sql_stock_total(v));
}

static void test_store_sold_out_mid_batch(void **state)
{
    struct store_config c = store_cfg(64);

    (void)state;
    stock_5_for_20(&c, it_seckill_create(&srv[0], 1, 5, -60, 3600));
}

/* The naive transaction, one purchase each (SECKILL_BATCH_MAX=1). */
static void test_store_naive(void **state)
{
    struct store_config c = store_cfg(1);

    (void)state;
    stock_5_for_20(&c, it_seckill_create(&srv[0], 1, 5, -60, 3600));
}

/* Segments: 5 over 8 (three start empty), purchases fall through. */
static void test_store_segments(void **state)
{
    struct store_config c = store_cfg(64);
    int64_t v = it_seckill_create(&srv[2], 1, 5, -60, 3600);

    (void)state;
    assert_int_equal(SEGMENTS, it_sql_scalar("SELECT COUNT(*) FROM "
                                             "seckill_stock_segments WHERE "
                                             "voucher_id = %lld",
                                             (long long)v));
    stock_5_for_20(&c, v);
}

/*
 * An order id that is taken already (the ID worker's counter was lost):
 * the multi-row INSERT hits the PRIMARY key, the batch goes one
 * transaction each, the member with that id is told -EEXIST and buys
 * with a fresh id, and the others buy at their first try.
 */
static void test_store_id_clash(void **state)
{
    struct store_config c = store_cfg(64);
    int64_t v = it_seckill_create(&srv[0], 1, 10, -60, 3600);
    int64_t other = it_seckill_create(&srv[0], 1, 10, -60, 3600);
    int64_t taken = 0, taker = next_user++;
    struct buyer b[8] = {0};
    redisContext *rc = it_redis_connect();

    (void)state;
    assert_int_equal(
        0, idgen_next(&(struct redis_link){.rc = rc}, "order", &taken));
    redisFree(rc);
    assert_int_equal(0, it_sql_exec("INSERT INTO voucher_orders (id, "
                                    "user_id, voucher_id) VALUES (%lld, "
                                    "%lld, %lld)",
                                    (long long)taken, (long long)taker,
                                    (long long)other));
    for (int i = 0; i < 8; i++)
        b[i] = (struct buyer){.voucher = v, .user = next_user++};
    b[3].order_id = taken;
    buyers_run(b, 8, &c);
    assert_int_equal(-EEXIST, b[3].first_err);
    for (int i = 0; i < 8; i++)
        if (i != 3)
            assert_int_equal(0, b[i].first_err);
    assert_int_equal(8, count_outcome(b, 8, STORE_PURCHASE_OK));
    assert_int_equal(8, it_sql_order_count(v));
    assert_int_equal(2, it_sql_stock(v));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE id = %lld AND user_id = %lld",
                                      (long long)taken, (long long)taker));
}

/* Last: both instances exit cleanly (under ASan, without leaks). */
static void test_clean_shutdown(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(0, it_server_stop(&srv[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crowd_merged),
        cmocka_unit_test(test_crowd_merged_one_instance),
        cmocka_unit_test(test_handoff_batch_max_2),
        cmocka_unit_test(test_purchase_budget),
        cmocka_unit_test(test_crowd_segmented),
        cmocka_unit_test(test_sold_out_mid_batch),
        cmocka_unit_test(test_store_duplicates_in_batch),
        cmocka_unit_test(test_store_existing_orders_in_batch),
        cmocka_unit_test(test_store_sold_out_mid_batch),
        cmocka_unit_test(test_store_naive),
        cmocka_unit_test(test_store_segments),
        cmocka_unit_test(test_store_id_clash),
        cmocka_unit_test(test_clean_shutdown),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "batch", tests, group_setup, group_teardown));
}
