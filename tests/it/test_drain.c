/*
 * test_drain.c - graceful drain behind a real haproxy: three instances
 * behind Debian's haproxy running the shipped deploy/haproxy.cfg, a crowd
 * buying through it, and every instance restarted one after another
 * (SIGTERM, haproxy takes it out of rotation while it still serves, it
 * exits 0 after its drain, it starts again on its port, haproxy has it
 * back). No request may fail except with a documented retryable status
 * (503 UNAVAILABLE or 429 BUSY, both with Retry-After), and with the
 * drain none even needs that; MySQL agrees with every 201. Also what one
 * instance does on SIGTERM: /readyz says draining at once while requests
 * are still served (with Connection: close), it exits after
 * SECKILL_DRAIN_S, and a second signal cuts the drain short.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

#include "tests/it/harness.h"

#define INSTANCES 3
/* More than haproxy needs to see two failed checks a second apart. */
#define DRAIN "SECKILL_DRAIN_S=3"
#define USER_BASE 400000000000LL
#define STOCK 1000000
/* Purchases (and voucher reads) the crowd has in flight at once. */
#define WAVE_BUY 24
#define WAVE_READ 8
/* haproxy takes a server back after two good checks a second apart. */
#define UP_WAIT_MS 15000

static struct it_server apps[INSTANCES];
static struct it_server lb, stats; /* haproxy's front and stats page */
static pid_t haproxy_pid;
static int64_t user_base;
static char haproxy_log[IT_PATH_MAX];

static const char *const app_env[] = {DRAIN, "SECKILL_RATE_USER=0", NULL};

/* The status haproxy reports for server appN ("UP", "DOWN", ...). */
static void server_status(int n, char *out, size_t cap, long *retries,
                          long *redispatches)
{
    it_lb_status(&stats, "seckilld", n, out, cap, retries, redispatches);
}

/* Wait until haproxy reports appN UP. */
static int await_up(int n)
{
    int64_t deadline = util_mono_ms() + UP_WAIT_MS;
    char st[32];

    while (util_mono_ms() < deadline) {
        server_status(n, st, sizeof(st), NULL, NULL);
        if (strncmp(st, "UP", 2) == 0)
            return 0;
        usleep(100 * 1000);
    }
    fprintf(stderr, "haproxy did not report app%d UP within %d ms (%s)\n", n,
            UP_WAIT_MS, st);
    return -1;
}

static int group_setup(void **state)
{
    char var[64], val[64], cfg[IT_PATH_MAX];
    (void)state;

    it_init();
    user_base = USER_BASE + util_now_ms() % 100000000 * 100;
    if (!it_which("haproxy")) {
        fprintf(stderr, "haproxy not found: run scripts/deps.sh\n");
        return -1;
    }
    for (int i = 0; i < INSTANCES; i++)
        if (it_server_start(&apps[i], "drain", app_env))
            return -1;
    lb.port = it_free_port();
    stats.port = it_free_port();
    snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)lb.port);
    setenv("SECKILL_LB_BIND", val, 1);
    snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)stats.port);
    setenv("SECKILL_LB_STATS", val, 1);
    for (int i = 0; i < INSTANCES; i++) {
        snprintf(var, sizeof(var), "SECKILL_LB_SERVER_%d", i + 1);
        snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)apps[i].port);
        setenv(var, val, 1);
    }
    /* The tests run from the repository's root. */
    snprintf(cfg, sizeof(cfg), "deploy/haproxy.cfg");
    snprintf(haproxy_log, sizeof(haproxy_log), "%s/drain-haproxy-%u.log",
             it_log_dir(), (unsigned)lb.port);
    unlink(haproxy_log);
    char *argv[] = {(char *)it_which("haproxy"), "-db", "-f", cfg, NULL};
    haproxy_pid = it_spawn(argv, NULL, haproxy_log);
    if (haproxy_pid < 0 || it_wait_tcp(lb.port, 5000)) {
        fprintf(stderr, "haproxy did not start; log: %s\n", haproxy_log);
        return -1;
    }
    for (int i = 0; i < INSTANCES; i++)
        if (await_up(i + 1))
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (haproxy_pid > 0) {
        kill(haproxy_pid, SIGTERM);
        waitpid(haproxy_pid, NULL, 0);
    }
    return it_group_teardown(apps, INSTANCES);
}

/*
 * The crowd, in a child process (the parent restarts the instances
 * meanwhile): waves of WAVE_BUY purchases by fresh users and WAVE_READ
 * voucher reads through haproxy, until stop_fd reads end of file. One line
 * per answer into out: "<B|R> <status> <error code|-> <Retry-After|->
 * <orderId|->". No cmocka here.
 */
static void crowd(int stop_fd, FILE *out, int64_t voucher)
{
    struct pollfd p = {.fd = stop_fd, .events = POLLIN};
    int64_t next_user = 0;
    char vpath[64], rpath[64];

    snprintf(vpath, sizeof(vpath), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    snprintf(rpath, sizeof(rpath), "/api/vouchers/%lld", (long long)voucher);
    while (poll(&p, 1, 0) == 0) {
        enum { N = WAVE_BUY + WAVE_READ };
        static struct it_resp resps[N];
        char tokens[WAVE_BUY][TOKEN_STR_LEN];
        struct it_req reqs[N];
        CURLM *m = curl_multi_init();
        int running = 0;

        for (int i = 0; i < N; i++) {
            if (i < WAVE_BUY) {
                it_token(user_base + next_user++, TOKEN_ROLE_USER, 3600,
                         tokens[i]);
                reqs[i] = (struct it_req){
                    .method = "POST", .path = vpath, .token = tokens[i]};
            } else {
                reqs[i] = (struct it_req){.method = "GET", .path = rpath};
            }
            curl_multi_add_handle(m, it_http_prepare(&lb, &reqs[i], &resps[i]));
        }
        do {
            curl_multi_perform(m, &running);
            if (running)
                curl_multi_poll(m, NULL, 0, 1000, NULL);
        } while (running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            struct it_resp *r;

            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            curl_multi_remove_handle(m, msg->easy_handle);
            it_http_complete(msg->easy_handle, msg->data.result, r);
        }
        curl_multi_cleanup(m);
        for (int i = 0; i < N; i++) {
            json_t *e =
                resps[i].json ? json_object_get(resps[i].json, "error") : NULL;
            const char *code = e ? it_json_str(e, "code") : NULL;
            const char *order =
                resps[i].json ? it_json_str(resps[i].json, "orderId") : NULL;

            fprintf(out, "%c %ld %s %s %s\n", i < WAVE_BUY ? 'B' : 'R',
                    resps[i].status, code ? code : "-",
                    resps[i].retry_after[0] ? resps[i].retry_after : "-",
                    order ? order : "-");
            if (resps[i].status == 0 || !resps[i].json)
                fprintf(stderr, "crowd: %s %s: status %ld, curl: %s, %s\n",
                        reqs[i].method, reqs[i].path, resps[i].status,
                        resps[i].curl_error,
                        resps[i].body ? resps[i].body : "");
            it_resp_free(&resps[i]);
        }
        fflush(out);
    }
}

static void test_rolling_restart(void **state)
{
    char path[IT_PATH_MAX], line[256];
    int pipefd[2];
    int64_t voucher, t0;
    pid_t child;
    FILE *f;
    long buys = 0, reads = 0, ok = 0, retryable = 0, other = 0;
    long retries = 0, redispatches = 0;
    (void)state;

    voucher = it_seckill_create(&apps[0], 1, STOCK, -5, 3600);
    snprintf(path, sizeof(path), "%s/drain-crowd-%u.txt", it_log_dir(),
             (unsigned)lb.port);
    assert_int_equal(0, pipe2(pipefd, O_CLOEXEC));
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        FILE *out = fopen(path, "w");

        close(pipefd[1]);
        if (!out)
            _exit(2);
        crowd(pipefd[0], out, voucher);
        fclose(out);
        _exit(0);
    }
    close(pipefd[0]);

    /* Let the crowd get going, then restart each instance in turn. */
    t0 = util_mono_ms();
    usleep(1000 * 1000);
    for (int i = 0; i < INSTANCES; i++) {
        char tag[32], st[32] = "";
        uint16_t port = apps[i].port;
        int64_t t = util_mono_ms(), out_ms = -1;

        /* SIGTERM: haproxy must take it out while it still serves. */
        assert_int_equal(0, kill(apps[i].pid, SIGTERM));
        while (util_mono_ms() - t < UP_WAIT_MS) {
            server_status(i + 1, st, sizeof(st), NULL, NULL);
            if (strncmp(st, "DOWN", 4) == 0) {
                out_ms = util_mono_ms() - t;
                break;
            }
            usleep(50 * 1000);
        }
        if (out_ms < 0 || !it_server_alive(&apps[i])) {
            print_error("app%d: out of rotation after %lld ms (%s), alive: "
                        "%d\n",
                        i + 1, (long long)out_ms, st,
                        it_server_alive(&apps[i]));
            fail();
        }
        /* Then it stops by itself, cleanly, after its drain. */
        int status;
        assert_int_equal(0, it_wait_exit(apps[i].pid, 15000, &status));
        apps[i].pid = 0;
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        int64_t stopped = util_mono_ms();
        assert_true(stopped - t >= 2900);
        snprintf(tag, sizeof(tag), "drain-r%d", i + 1);
        assert_int_equal(0, it_server_start_port(&apps[i], port, tag, app_env));
        assert_int_equal(0, await_up(i + 1));
        printf("app%d: out of rotation %lld ms after SIGTERM, exited after "
               "%lld ms, back in rotation %lld ms later\n",
               i + 1, (long long)out_ms, (long long)(stopped - t),
               (long long)(util_mono_ms() - stopped));
    }
    usleep(1000 * 1000);
    close(pipefd[1]);
    int status;
    assert_int_equal(child, waitpid(child, &status, 0));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    for (int i = 0; i < INSTANCES; i++) {
        long r = 0, d = 0;
        char st[32];

        server_status(i + 1, st, sizeof(st), &r, &d);
        retries += r;
        redispatches += d;
    }

    /* Every answer: a success, a business answer, or retryable. */
    f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        char kind, code[64], ra[32], order[32];
        long st;

        assert_int_equal(5, sscanf(line, "%c %ld %63s %31s %31s", &kind, &st,
                                   code, ra, order));
        if (kind == 'B')
            buys++;
        else
            reads++;
        if ((kind == 'B' && st == 201 && strcmp(order, "-") != 0) ||
            (kind == 'R' && st == 200))
            ok++;
        else if ((st == 503 && strcmp(code, "UNAVAILABLE") == 0 &&
                  strcmp(ra, "-") != 0) ||
                 (st == 429 && strcmp(code, "BUSY") == 0 &&
                  strcmp(ra, "-") != 0))
            retryable++;
        else {
            other++;
            print_error("not allowed during a rolling restart: %s", line);
        }
    }
    fclose(f);
    printf("rolling restart of %d instances in %lld ms: %ld purchases, %ld "
           "reads, %ld succeeded, %ld retryable (503/429), %ld failed; "
           "haproxy retried %ld, redispatched %ld\n",
           INSTANCES, (long long)(util_mono_ms() - t0), buys, reads, ok,
           retryable, other, retries, redispatches);
    assert_int_equal(0, other);
    assert_true(buys > 0);
    /* The drain's point: haproxy moved away before anything had to be
     * refused, so nothing even needed a retry. */
    assert_int_equal(0, retryable);

    /* MySQL agrees with every 201. */
    long sold = 0;
    f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        if (line[0] == 'B' && strncmp(line + 2, "201 ", 4) == 0)
            sold++;
    fclose(f);
    assert_int_equal(sold, it_sql_order_count(voucher));
    assert_int_equal(STOCK - sold, it_sql_stock(voucher));
    assert_int_equal(sold,
                     it_sql_scalar("SELECT COUNT(DISTINCT user_id) FROM "
                                   "voucher_orders WHERE voucher_id = %lld",
                                   (long long)voucher));
}

/* One instance on SIGTERM: draining, still serving, then gone. */
static void test_sigterm_drains(void **state)
{
    static const char *const env[] = {"SECKILL_DRAIN_S=2", NULL};
    struct it_server one;
    struct it_resp resp;
    int64_t t0;
    int status;
    (void)state;

    assert_int_equal(0, it_server_start(&one, "drain-one", env));
    it_http(&one, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);

    t0 = util_mono_ms();
    assert_int_equal(0, kill(one.pid, SIGTERM));
    usleep(200 * 1000);
    it_http(&one, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_error(&resp, 503, "UNAVAILABLE");
    json_t *details =
        json_object_get(json_object_get(resp.json, "error"), "details");
    assert_string_equal("draining", it_json_str(details, "instance"));
    it_resp_free(&resp);
    /* Still serving: a request of any other kind works. */
    it_http(&one, "GET", "/api/vouchers?limit=1", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    assert_true(it_server_alive(&one));

    assert_int_equal(0, it_wait_exit(one.pid, 10000, &status));
    one.pid = 0;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int64_t took = util_mono_ms() - t0;
    assert_true(took >= 1800);

    /* A second signal cuts the drain short. */
    static const char *const env_long[] = {"SECKILL_DRAIN_S=60", NULL};
    assert_int_equal(0, it_server_start(&one, "drain-cut", env_long));
    t0 = util_mono_ms();
    assert_int_equal(0, kill(one.pid, SIGTERM));
    usleep(300 * 1000);
    it_http(&one, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_error(&resp, 503, "UNAVAILABLE");
    it_resp_free(&resp);
    assert_int_equal(0, kill(one.pid, SIGTERM));
    assert_int_equal(0, it_wait_exit(one.pid, 10000, &status));
    one.pid = 0;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(util_mono_ms() - t0 < 5000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_drains),
        cmocka_unit_test(test_rolling_restart),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "drain", tests, group_setup, group_teardown));
}
