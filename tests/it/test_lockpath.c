/*
 * test_lockpath.c - the purchase lock when its Redis is slow:
 *
 *   (a) one late reply (DEBUG SLEEP longer than the lock's timeout) fails
 *       only the purchases whose own reply was due while Redis slept; the
 *       purchases sent after them, while it still sleeps, are answered
 *       once it wakes, and nothing is refused for a back-off afterwards;
 *   (b) an acquire whose reply came too late may still have set the lock:
 *       it is undone at once (a compare-and-delete sent behind it), so the
 *       same user can buy again long before the lease would have ended.
 *
 * Each test runs the lock on a private redis-server (DEBUG SLEEP stops the
 * whole server), reached directly or through tests/tools/tcpproxy.c.
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

/* Far from the ids of the other tests. */
#define USER_BASE 230000000000LL
#define GROUP 10

/* The instance that creates vouchers (the shared backends). */
static struct it_server srv;
static int64_t user_base;
static int next_user;

static int64_t fresh_user(void)
{
    return user_base + next_user++;
}

static int group_setup(void **state)
{
    (void)state;
    it_init();
    user_base = USER_BASE + util_now_ms() % 100000000 * 100;
    return it_server_start(&srv, "lockpath", NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* Buy voucher v as each of users[0..n) at once on s; statuses out. */
static void buy_all(const struct it_server *s, int64_t v, const int64_t *users,
                    size_t n, long *status)
{
    struct it_req reqs[GROUP];
    struct it_resp resps[GROUP];
    const struct it_server *to[GROUP];
    char toks[GROUP][TOKEN_STR_LEN], path[96];

    assert_true(n <= GROUP);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    for (size_t i = 0; i < n; i++) {
        it_token(users[i], TOKEN_ROLE_USER, 3600, toks[i]);
        reqs[i] =
            (struct it_req){.method = "POST", .path = path, .token = toks[i]};
        to[i] = s;
    }
    it_http_run_all(reqs, to, resps, n);
    for (size_t i = 0; i < n; i++) {
        status[i] = resps[i].status;
        if (status[i] != 201 && status[i] != 503 && status[i] != 409)
            it_assert_error(&resps[i], status[i], "BUSY"); /* dumps it */
        it_resp_free(&resps[i]);
    }
}

static int count(const long *status, size_t n, long want)
{
    int k = 0;

    for (size_t i = 0; i < n; i++)
        k += status[i] == want;
    return k;
}

/* The lock key of user u for voucher v is gone from the Redis on port. */
static void assert_unlocked(uint16_t port, int64_t v, int64_t u)
{
    redisContext *rc = redisConnect("127.0.0.1", port);
    char name[SALE_LOCK_NAME_LEN];
    redisReply *r;

    assert_non_null(rc);
    assert_int_equal(0, rc->err);
    sale_lock_name(name, v, u);
    r = redisCommand(rc, "EXISTS %s", name);
    assert_non_null(r);
    if (r->integer != 0)
        print_error("%s is still set\n", name);
    assert_int_equal(0, r->integer);
    freeReplyObject(r);
    redisFree(rc);
}

/*
 * (a) The lock's Redis sleeps 0.65 s under a 400 ms lock timeout. Group A
 * is sent as it falls asleep: its replies are late (503). Group B is sent
 * while it still sleeps, 0.45 s in, after A's deadlines: its replies come
 * when it wakes, in time (201). Group C, A's users again: their locks (set
 * after all, when Redis woke) were undone, so they buy (201), not 429.
 * Before, A's late replies reset the shared connection and a back-off
 * refused B and C too.
 */
static void test_late_reply(void **state)
{
    uint16_t port = it_free_port();
    char *log_path =
        xasprintf("%s/redis-lockpath-%u.log", it_log_dir(), (unsigned)port);
    char *lock_url =
        xasprintf("SECKILL_LOCK_URL=redis://127.0.0.1:%u/0?timeout_ms=400",
                  (unsigned)port);
    const char *env[] = {lock_url, "SECKILL_THREADS=32", NULL};
    int64_t v = it_seckill_create(&srv, 1, 1000, -60, 3600);
    int64_t a[GROUP], b[GROUP], warm = fresh_user();
    long sa[GROUP], sb[GROUP], sc[GROUP];
    struct timeval probe_tv = {0, 50 * 1000};
    struct it_server inst;
    struct it_resp resp;
    redisContext *sleeper, *probe;
    redisReply *r;
    int done = 0;
    pid_t redis;

    (void)state;
    unlink(log_path);
    redis = it_redis_start(port, log_path, NULL);
    assert_true(redis > 0);
    assert_int_equal(0, it_server_start(&inst, "lockpath-late", env));
    /* The lock's connection is open before the sleep. */
    it_purchase(&inst, v, warm, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
    for (int i = 0; i < GROUP; i++) {
        a[i] = fresh_user();
        b[i] = fresh_user();
    }

    sleeper = redisConnect("127.0.0.1", port);
    assert_non_null(sleeper);
    assert_int_equal(0, sleeper->err);
    redisAppendCommand(sleeper, "DEBUG SLEEP 0.65");
    while (!done)
        assert_int_equal(REDIS_OK, redisBufferWrite(sleeper, &done));
    /* Asleep once a PING from elsewhere goes unanswered. */
    probe = redisConnectWithTimeout("127.0.0.1", port, probe_tv);
    assert_non_null(probe);
    redisSetTimeout(probe, probe_tv);
    r = redisCommand(probe, "PING");
    assert_null(r);
    redisFree(probe);

    /* B from a child process 450 ms into the sleep, whenever A ends. */
    int fds[2];
    assert_int_equal(0, pipe(fds));
    int64_t t0 = util_mono_ms();
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(fds[0]);
        usleep((useconds_t)((t0 + 450 - util_mono_ms()) * 1000));
        buy_all(&inst, v, b, GROUP, sb);
        ssize_t w = write(fds[1], sb, sizeof(sb));
        _exit(w == (ssize_t)sizeof(sb) ? 0 : 1);
    }
    close(fds[1]);
    buy_all(&inst, v, a, GROUP, sa); /* in flight as Redis falls asleep */
    assert_int_equal((ssize_t)sizeof(sb), read(fds[0], sb, sizeof(sb)));
    close(fds[0]);
    int wstatus;
    assert_int_equal(child, waitpid(child, &wstatus, 0));
    assert_true(count(sa, GROUP, 503) >= 1);
    buy_all(&inst, v, a, GROUP, sc); /* A's users again */
    print_message("      A (late): %d x 503, %d x 201; B (sent during the "
                  "sleep): %d x 201; A again: %d x 201, %d x 409\n",
                  count(sa, GROUP, 503), count(sa, GROUP, 201),
                  count(sb, GROUP, 201), count(sc, GROUP, 201),
                  count(sc, GROUP, 409));
    assert_int_equal(GROUP, count(sb, GROUP, 201));
    for (int i = 0; i < GROUP; i++) {
        /* A 503 wrote nothing, so that user buys now; one who got 201
         * (the reply beat its deadline) has an order already. */
        long want = sa[i] == 201 ? 409 : 201;
        if (sc[i] != want)
            print_error("user %lld: first %ld, then %ld (want %ld)\n",
                        (long long)a[i], sa[i], sc[i], want);
        assert_int_equal(want, sc[i]);
    }
    assert_int_equal(1 + count(sa, GROUP, 201) + GROUP + count(sc, GROUP, 201),
                     it_sql_order_count(v));
    for (int i = 0; i < GROUP; i++)
        assert_unlocked(port, v, a[i]);

    redisFree(sleeper);
    assert_int_equal(0, it_server_stop(&inst));
    kill(redis, SIGKILL);
    waitpid(redis, NULL, 0);
    free(lock_url);
    free(log_path);
}

/*
 * (b) Through a proxy that delays every chunk 400 ms each way, a 300 ms
 * lock timeout expires before the acquire's reply: 503, nothing written,
 * but the SET reaches Redis. Once the link is healed the same user buys
 * within two seconds, not after the 10 s lease, and no lock key is left.
 */
static void test_unknown_acquire_undone(void **state)
{
    uint16_t port = it_free_port();
    char *log_path =
        xasprintf("%s/redis-lockpath-%u.log", it_log_dir(), (unsigned)port);
    struct it_proxy proxy;
    char *lock_url;
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    int64_t warm = fresh_user(), u = fresh_user();
    struct it_server inst;
    struct it_resp resp;
    int64_t healed, deadline;
    long status;
    int busy = 0;
    pid_t redis;

    (void)state;
    unlink(log_path);
    redis = it_redis_start(port, log_path, NULL);
    assert_true(redis > 0);
    assert_int_equal(0, it_proxy_start(&proxy, "lockpath", port));
    lock_url =
        xasprintf("SECKILL_LOCK_URL=redis://127.0.0.1:%u/0?timeout_ms=300",
                  (unsigned)proxy.port);
    const char *env[] = {lock_url, NULL};
    assert_int_equal(0, it_server_start(&inst, "lockpath-undo", env));
    it_purchase(&inst, v, warm, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);

    assert_int_equal(0, it_proxy_ctl(&proxy, "latency 400"));
    it_purchase(&inst, v, u, &resp);
    it_assert_error(&resp, 503, "UNAVAILABLE");
    it_resp_free(&resp);
    assert_int_equal(1, it_sql_order_count(v));
    assert_int_equal(0, it_proxy_ctl(&proxy, "heal"));

    healed = util_mono_ms();
    deadline = healed + 2000;
    for (;;) {
        status = it_purchase(&inst, v, u, &resp);
        if (status == 201 || util_mono_ms() >= deadline)
            break;
        busy += status == 429;
        it_resp_free(&resp);
        usleep(50 * 1000);
    }
    print_message("      bought again %lld ms after the link healed (%d x "
                  "429 before)\n",
                  (long long)(util_mono_ms() - healed), busy);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
    assert_int_equal(2, it_sql_order_count(v));
    assert_unlocked(port, v, u);

    assert_int_equal(0, it_server_stop(&inst));
    it_proxy_stop(&proxy);
    kill(redis, SIGKILL);
    waitpid(redis, NULL, 0);
    free(lock_url);
    free(log_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_reply),
        cmocka_unit_test(test_unknown_acquire_undone),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "lockpath", tests, group_setup, group_teardown));
}
