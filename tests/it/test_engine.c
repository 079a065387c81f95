/*
 * test_engine.c - purchases parked while the purchase engine works
 * (libmicrohttpd suspend/resume), against the real binary:
 *
 *   - a client that hangs up while its purchase is parked: the server
 *     carries on, the purchase completes consistently in MySQL and the
 *     user's lock is released;
 *   - SIGTERM with purchases parked: each gets an answer (201 when its
 *     batch was running, else 503 with nothing written) and the process
 *     exits 0;
 *   - the queue bound: a crowd larger than SECKILL_QUEUE_MAX gets 429
 *     BUSY with Retry-After at once for the excess, nothing written for
 *     them, and the rest buy;
 *   - /metrics shows the depth of a voucher's queue;
 *   - cheap requests keep being answered while a crowd waits.
 *
 * Purchases are kept parked by holding the voucher's stock row locked
 * from the test's own MySQL session (SELECT ... FOR UPDATE): the batch
 * waits for the row, the rest of the crowd queues behind it.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "sale/sale.h"
#include "tests/it/harness.h"
#include "tests/it/promtext.h"

#define USER_BASE 240000000000LL
#define CROWD_MAX 64

/* Creates the vouchers; also the subject of the disconnect test. */
static struct it_server srv;
static int64_t next_user;

static int group_setup(void **state)
{
    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    return it_server_start(&srv, "engine", NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* Hold voucher v's stock row in an open transaction of the test's own
 * session until row_release(). */
static void row_hold(int64_t v)
{
    assert_int_equal(0, it_sql_exec("START TRANSACTION"));
    assert_true(it_sql_scalar("SELECT stock FROM seckill_vouchers WHERE "
                              "voucher_id = %lld FOR UPDATE",
                              (long long)v) >= 0);
}

static void row_release(void)
{
    assert_int_equal(0, it_sql_exec("ROLLBACK"));
}

/* Whether user u's purchase lock of voucher v is set in the service's
 * Redis. */
static bool locked(int64_t v, int64_t u)
{
    redisContext *rc = it_redis_connect();
    char name[SALE_LOCK_NAME_LEN];
    redisReply *r;
    bool set;

    sale_lock_name(name, v, u);
    r = redisCommand(rc, "EXISTS %s", name);

    assert_non_null(r);
    set = r->integer != 0;
    freeReplyObject(r);
    redisFree(rc);
    return set;
}

/* Poll a MySQL count until it reaches want or timeout_ms passes. */
static int64_t wait_orders(int64_t v, int64_t want, int timeout_ms)
{
    int64_t deadline = util_mono_ms() + timeout_ms, n;

    while ((n = it_sql_order_count(v)) != want && util_mono_ms() < deadline)
        usleep(50 * 1000);
    return n;
}

/*
 * The client gives up after a second while its purchase waits for the
 * row; the row is freed; the purchase commits anyway (its outcome does
 * not depend on the client), the lock is released, and the same user
 * is then told ALREADY_PURCHASED, consistently.
 */
static void test_client_hangs_up(void **state)
{
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    int64_t u = next_user++;
    char tok[TOKEN_STR_LEN], path[96];
    struct it_req req = {
        .method = "POST", .path = path, .token = tok, .timeout_s = 1};
    struct it_resp resp;

    (void)state;
    it_token(u, TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    row_hold(v);
    it_http_do(&srv, &req, &resp);
    assert_int_equal(0, resp.status); /* curl gave up */
    it_resp_free(&resp);
    row_release();

    assert_int_equal(1, wait_orders(v, 1, 5000));
    for (int i = 0; i < 50 && locked(v, u); i++)
        usleep(50 * 1000);
    assert_false(locked(v, u));
    assert_true(it_server_alive(&srv));
    it_purchase(&srv, v, u, &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);
    assert_int_equal(1, it_sql_order_count(v));
    assert_int_equal(9, it_sql_stock(v));
}

/* n purchases of voucher v by fresh users, all at once, from a child
 * process that writes their statuses to fd (a 429 with "Retry-After: 1"
 * as 4291). Returns the child's pid. */
static pid_t crowd_in_child(const struct it_server *s, int64_t v, int64_t first,
                            size_t n, int fd)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        struct it_req reqs[CROWD_MAX];
        struct it_resp resps[CROWD_MAX];
        const struct it_server *to[CROWD_MAX];
        char toks[CROWD_MAX][TOKEN_STR_LEN], path[96];
        long status[CROWD_MAX];

        snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
                 (long long)v);
        for (size_t i = 0; i < n; i++) {
            it_token(first + (int64_t)i, TOKEN_ROLE_USER, 3600, toks[i]);
            reqs[i] = (struct it_req){.method = "POST",
                                      .path = path,
                                      .token = toks[i],
                                      .timeout_s = 20};
            to[i] = s;
        }
        it_http_run_all(reqs, to, resps, n);
        for (size_t i = 0; i < n; i++)
            status[i] =
                resps[i].status == 429 && strcmp(resps[i].retry_after, "1") == 0
                    ? 4291
                    : resps[i].status;
        _exit(write(fd, status, n * sizeof(long)) == (ssize_t)(n * sizeof(long))
                  ? 0
                  : 1);
    }
    return pid;
}

static void crowd_collect(pid_t pid, int fd, long *status, size_t n)
{
    int ws;

    assert_int_equal((ssize_t)(n * sizeof(long)),
                     read(fd, status, n * sizeof(long)));
    assert_int_equal(pid, waitpid(pid, &ws, 0));
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

static size_t count(const long *status, size_t n, long want)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        k += status[i] == want;
    return k;
}

/*
 * SIGTERM while 20 purchases are parked: the batch that runs finishes
 * once the row is free (201), the purchases still queued are answered
 * 503 with nothing written, every client gets an answer, and the process
 * exits 0.
 */
static void test_sigterm_with_parked_purchases(void **state)
{
    enum { N = 20 };
    int64_t v = it_seckill_create(&srv, 1, 100, -60, 3600);
    int64_t first = next_user;
    struct it_server inst;
    long status[N];
    int fds[2];
    pid_t child;

    (void)state;
    next_user += N;
    assert_int_equal(0, it_server_start(&inst, "engine-term", NULL));
    row_hold(v);
    assert_int_equal(0, pipe(fds));
    child = crowd_in_child(&inst, v, first, N, fds[1]);
    usleep(500 * 1000); /* all parked: one batch waits for the row */
    assert_int_equal(0, kill(inst.pid, SIGTERM));
    usleep(300 * 1000);
    row_release();
    crowd_collect(child, fds[0], status, N);
    close(fds[0]);
    close(fds[1]);
    /* Exited 0 (it_server_stop reaps it; SIGTERM again is harmless). */
    assert_int_equal(0, it_server_stop(&inst));

    print_message("      after SIGTERM: %zu x 201, %zu x 503\n",
                  count(status, N, 201), count(status, N, 503));
    assert_int_equal(N, count(status, N, 201) + count(status, N, 503));
    assert_true(count(status, N, 201) >= 1);
    assert_int_equal((int64_t)count(status, N, 201), it_sql_order_count(v));
    assert_int_equal(100 - (int64_t)count(status, N, 201), it_sql_stock(v));
}

/*
 * SECKILL_QUEUE_MAX=5: 40 buyers at once while the row is held. One batch
 * waits for the row, five wait behind it, every other buyer is told 429
 * BUSY with Retry-After at once. Nothing is written for them; the rest
 * buy once the row is free.
 */
/* One series of s's /metrics (-1 when absent). */
static double metric(const struct it_server *s, const char *name,
                     const char *labels)
{
    struct it_resp resp;
    struct prom_doc doc;
    double v;

    it_http(s, "GET", "/metrics", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    if (prom_parse(resp.body, &doc) != 0) {
        print_error("/metrics: %s\n", doc.error);
        fail();
    }
    v = prom_value(&doc, name, labels);
    prom_free(&doc);
    it_resp_free(&resp);
    return v;
}

static void test_queue_bound(void **state)
{
    enum { N = 40 };
    static const char *const env[] = {"SECKILL_QUEUE_MAX=5",
                                      "SECKILL_RATE_USER=0", NULL};
    int64_t v = it_seckill_create(&srv, 1, 100, -60, 3600);
    int64_t first = next_user;
    struct it_server inst;
    long status[N];
    size_t created, busy;
    int fds[2];
    pid_t child;

    (void)state;
    next_user += N;
    assert_int_equal(0, it_server_start(&inst, "engine-queue", env));
    row_hold(v);
    assert_int_equal(0, pipe(fds));
    child = crowd_in_child(&inst, v, first, N, fds[1]);
    usleep(1000 * 1000);
    row_release();
    crowd_collect(child, fds[0], status, N);
    close(fds[0]);
    close(fds[1]);
    created = count(status, N, 201);
    busy = count(status, N, 4291);
    print_message("      queue bound 5: %zu x 201, %zu x 429 BUSY with "
                  "Retry-After\n",
                  created, busy);
    assert_int_equal(N, created + busy);
    /* One batch running, at most five behind it. */
    assert_true(busy >= N - 1 - 5 - 5);
    assert_int_equal((int64_t)created, it_sql_order_count(v));
    assert_int_equal(100 - (int64_t)created, it_sql_stock(v));
    /* What /metrics shows of it: every refusal counted as shed, every
     * purchase that ran timed in the queue, every connection's wait in
     * front of the service. */
    assert_true(metric(&inst, "seckill_purchases_total", "outcome=\"shed\"") ==
                (double)busy);
    assert_true(metric(&inst, "seckill_purchase_queue_wait_seconds_count",
                       "") == (double)created);
    assert_true(metric(&inst, "seckill_http_accept_wait_seconds_count", "") >=
                N);
    assert_int_equal(0, it_server_stop(&inst));
}

/*
 * /metrics shows a queue's depth, read without the engine's lock: one
 * purchase's batch waits for the held row, then seven more purchases of
 * the voucher wait behind it, and seckill_purchase_queue_depth says 7.
 * Once the row is free all eight buy.
 */
static void test_queue_depth_metric(void **state)
{
    enum { N = 8 };
    static const char *const env[] = {"SECKILL_RATE_USER=0", NULL};
    int64_t v = it_seckill_create(&srv, 1, 100, -60, 3600);
    int64_t first = next_user, deadline;
    struct it_server inst;
    long status[N];
    char labels[64];
    double depth = -1;
    int fds[2][2];
    pid_t child[2];

    (void)state;
    next_user += N;
    snprintf(labels, sizeof(labels), "voucher=\"%lld\"", (long long)v);
    assert_int_equal(0, it_server_start(&inst, "engine-depth", env));
    row_hold(v);
    assert_int_equal(0, pipe(fds[0]));
    assert_int_equal(0, pipe(fds[1]));
    child[0] = crowd_in_child(&inst, v, first, 1, fds[0][1]);
    /* Its batch waits for the row lock. */
    deadline = util_mono_ms() + 5000;
    while (it_sql_scalar("SELECT COUNT(*) FROM "
                         "information_schema.INNODB_LOCK_WAITS") < 1 &&
           util_mono_ms() < deadline)
        usleep(50 * 1000);
    child[1] = crowd_in_child(&inst, v, first + 1, N - 1, fds[1][1]);
    deadline = util_mono_ms() + 5000;
    while ((depth = metric(&inst, "seckill_purchase_queue_depth", labels)) !=
               N - 1 &&
           util_mono_ms() < deadline)
        usleep(50 * 1000);
    row_release();
    crowd_collect(child[0], fds[0][0], status, 1);
    crowd_collect(child[1], fds[1][0], status + 1, N - 1);
    for (int i = 0; i < 2; i++) {
        close(fds[i][0]);
        close(fds[i][1]);
    }
    print_message("      queue depth shown: %.0f\n", depth);
    assert_true(depth == N - 1);
    assert_int_equal(N, count(status, N, 201));
    assert_int_equal(N, it_sql_order_count(v));
    /* The queue is empty now: no series for it. */
    assert_true(metric(&inst, "seckill_purchase_queue_depth", labels) == -1);
    assert_int_equal(0, it_server_stop(&inst));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_hangs_up),
        cmocka_unit_test(test_sigterm_with_parked_purchases),
        cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_queue_depth_metric),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "engine", tests, group_setup, group_teardown));
}
