/*
 * test_lb.c - what Debian's haproxy, running the shipped
 * deploy/haproxy.cfg, sends twice. Server app1 is a fake instance in a
 * child process: it answers GET /readyz 200, so haproxy keeps it in
 * rotation, and closes every other request's connection without an
 * answer, as an instance SIGKILLed after its work and before its reply
 * would (a purchase it swallowed may have been sold). Server app2 is the
 * real binary.
 *
 * A purchase is not safe to send twice: one swallowed by app1 must reach
 * its client as an unknown outcome (haproxy's 502, or no answer), and
 * never be sent on to app2, whose answer (201, or 409 ENDED or 429 BUSY
 * once the sale or the dead instance's lock says so) would be a definite
 * answer to a purchase whose outcome nobody knows. Checked in MySQL: no
 * order for those buyers. A read is safe to repeat: one swallowed by app1
 * is answered by app2. A connection refused (app1 gone) sent nothing, so
 * a purchase is still tried on app2.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "tests/it/harness.h"

#define USER_BASE 410000000000LL
#define STOCK 100000
/* Purchases and voucher reads sent through haproxy at once. */
#define BUYS 32
#define READS 16
/* haproxy takes a server in after two good checks a second apart. */
#define UP_WAIT_MS 15000
/* The longest request the fake reads (haproxy's are a few hundred bytes). */
#define FAKE_REQ_MAX 16384
/* A bearer token as the fake records it, and its scanf conversion. */
#define FAKE_TOKEN_MAX 128
#define FAKE_TOKEN_SCAN "%127s"

static struct it_server app;       /* app2, the real instance */
static struct it_server lb, stats; /* haproxy's front and stats page */
static uint16_t fake_port;
static pid_t fake_pid, haproxy_pid;
static int64_t user_base, next_user;
static char fake_log[IT_PATH_MAX], haproxy_log[IT_PATH_MAX];

/* app2 counts reads per client address, believing haproxy (on loopback)
 * about its clients: a bucket of 1,000 that refills one a second, far too
 * big to refuse anything here, and slow enough to be seen in Redis. */
static const char *const app_env[] = {
    "SECKILL_RATE_USER=0", "SECKILL_RATE_IP=1,1000",
    "SECKILL_TRUSTED_PROXIES=127.0.0.1", NULL};

/*
 * Read one request from fd into buf (NUL-terminated): its head and as
 * much of its body as Content-Length says. Returns its length, or -1 if
 * the peer closed or was silent for 2 s before the head was complete.
 */
static ssize_t fake_read_request(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    const char *end = NULL;

    while (!end) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);

        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
        if (!end && len == cap - 1)
            return -1;
    }
    for (const char *h = strstr(buf, "\r\n"); h && h < end;
         h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0) {
            size_t want = (size_t)(end + 4 - buf) + strtoul(h + 17, NULL, 10);

            while (len < want && len < cap - 1) {
                ssize_t n = read(fd, buf + len, cap - 1 - len);

                if (n <= 0)
                    break;
                len += (size_t)n;
            }
            buf[len] = '\0';
            break;
        }
    }
    return (ssize_t)len;
}

/*
 * The fake instance, in a child process, on the listening socket lfd:
 * one connection at a time, GET /readyz answered 200, every other
 * request's connection closed unanswered after a line "<method> <path>
 * <bearer token|->" appended to fake_log. No cmocka here; never returns.
 */
static void fake_serve(int lfd)
{
    static const char ready[] = "HTTP/1.1 200 OK\r\nContent-Type: "
                                "application/json\r\nContent-Length: "
                                "17\r\nConnection: close\r\n\r\n"
                                "{\"status\":\"ok\"}\r\n";
    static char buf[FAKE_REQ_MAX];
    struct timeval tv = {.tv_sec = 2};
    FILE *out = fopen(fake_log, "a");

    if (!out)
        _exit(2);
    for (;;) {
        char method[16] = "", path[256] = "", token[FAKE_TOKEN_MAX] = "-";
        int fd = accept(lfd, NULL, NULL);
        const char *auth;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            _exit(3);
        }
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (fake_read_request(fd, buf, sizeof(buf)) < 0) {
            close(fd);
            continue;
        }
        sscanf(buf, "%15s %255s", method, path);
        if (strcmp(method, "GET") == 0 && strcmp(path, "/readyz") == 0) {
            if (write(fd, ready, sizeof(ready) - 1) < 0)
                fprintf(out, "readyz: write: %s\n", strerror(errno));
            close(fd);
            continue;
        }
        auth = strcasestr(buf, "\r\nAuthorization: Bearer ");
        if (auth)
            sscanf(auth + 24, FAKE_TOKEN_SCAN, token);
        /* Recorded before the close, so that the test, which reads the
         * file once every answer is in, sees every swallowed request. */
        fprintf(out, "%s %s %s\n", method, path, token);
        fflush(out);
        close(fd);
    }
}

/* What haproxy's stats page says of appN. */
static void server_status(int n, char *out, size_t cap, long *retries,
                          long *redispatches)
{
    it_lb_status(&stats, "seckilld", n, out, cap, retries, redispatches);
}

/* Wait until haproxy reports appN UP. */
static int await_up(int n)
{
    int64_t deadline = util_mono_ms() + UP_WAIT_MS;
    char st[32] = "";

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
    char val[64];
    int lfd;
    (void)state;

    it_init();
    user_base = USER_BASE + util_now_ms() % 100000000 * 100;
    if (!it_which("haproxy")) {
        fprintf(stderr, "haproxy not found: run scripts/deps.sh\n");
        return -1;
    }
    if (it_server_start(&app, "lb", app_env))
        return -1;

    /* A listening socket that the fake, unlike a blackhole, accepts on;
     * only the child keeps it, so that its death refuses connections. */
    lfd = it_blackhole_listen(&fake_port);
    if (lfd < 0)
        return -1;
    snprintf(fake_log, sizeof(fake_log), "%s/lb-fake-%u.txt", it_log_dir(),
             (unsigned)fake_port);
    unlink(fake_log);
    fflush(NULL);
    fake_pid = fork();
    if (fake_pid < 0) {
        fprintf(stderr, "fork: %s\n", strerror(errno));
        close(lfd);
        return -1;
    }
    if (fake_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fake_serve(lfd);
    }
    close(lfd);

    lb.port = it_free_port();
    stats.port = it_free_port();
    snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)lb.port);
    setenv("SECKILL_LB_BIND", val, 1);
    snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)stats.port);
    setenv("SECKILL_LB_STATS", val, 1);
    snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)fake_port);
    setenv("SECKILL_LB_SERVER_1", val, 1);
    snprintf(val, sizeof(val), "127.0.0.1:%u", (unsigned)app.port);
    setenv("SECKILL_LB_SERVER_2", val, 1);
    for (int i = 3; i <= 8; i++) {
        char var[32];

        snprintf(var, sizeof(var), "SECKILL_LB_SERVER_%d", i);
        unsetenv(var);
    }
    snprintf(haproxy_log, sizeof(haproxy_log), "%s/lb-haproxy-%u.log",
             it_log_dir(), (unsigned)lb.port);
    unlink(haproxy_log);
    /* The tests run from the repository's root. */
    char *argv[] = {(char *)it_which("haproxy"), "-db", "-f",
                    "deploy/haproxy.cfg", NULL};
    haproxy_pid = it_spawn(argv, NULL, haproxy_log);
    if (haproxy_pid < 0 || it_wait_tcp(lb.port, 5000)) {
        fprintf(stderr, "haproxy did not start; log: %s\n", haproxy_log);
        return -1;
    }
    if (await_up(1) || await_up(2))
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
    if (fake_pid > 0) {
        kill(fake_pid, SIGKILL);
        waitpid(fake_pid, NULL, 0);
    }
    return it_group_teardown(&app, 1);
}

/* The requests app1 swallowed so far: how many were `method`, and, when
 * token is not NULL, whether one of them carried it. */
static long fake_swallowed(const char *method, const char *token, bool *seen)
{
    char line[512], m[16], path[256], tok[FAKE_TOKEN_MAX];
    long n = 0;
    FILE *f = fopen(fake_log, "r");

    if (seen)
        *seen = false;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "%15s %255s " FAKE_TOKEN_SCAN, m, path, tok) == 3 &&
            strcmp(m, method) == 0) {
            n++;
            if (token && seen && strcmp(tok, token) == 0)
                *seen = true;
        }
    fclose(f);
    return n;
}

/*
 * BUYS purchases by fresh users and READS voucher reads through haproxy
 * at once; users[i] is request i's buyer. Fills resps.
 */
static void send_crowd(int64_t voucher, struct it_resp *resps,
                       char (*tokens)[TOKEN_STR_LEN], int64_t *users)
{
    struct it_req reqs[BUYS + READS];
    const struct it_server *to[BUYS + READS];
    char vpath[64], rpath[64];

    snprintf(vpath, sizeof(vpath), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    snprintf(rpath, sizeof(rpath), "/api/vouchers/%lld", (long long)voucher);
    for (int i = 0; i < BUYS + READS; i++) {
        to[i] = &lb;
        if (i < BUYS) {
            users[i] = user_base + next_user++;
            it_token(users[i], TOKEN_ROLE_USER, 3600, tokens[i]);
            reqs[i] = (struct it_req){
                .method = "POST", .path = vpath, .token = tokens[i]};
        } else {
            reqs[i] = (struct it_req){.method = "GET", .path = rpath};
        }
    }
    it_http_run_all(reqs, to, resps, BUYS + READS);
}

static int64_t orders_of(int64_t voucher, int64_t user)
{
    return it_sql_scalar("SELECT COUNT(*) FROM voucher_orders WHERE "
                         "voucher_id = %lld AND user_id = %lld",
                         (long long)voucher, (long long)user);
}

/*
 * A purchase app1 swallowed comes back unknown and is not bought on
 * app2; a read app1 swallowed is answered by app2.
 */
static void test_purchase_not_sent_twice(void **state)
{
    static struct it_resp resps[BUYS + READS];
    char tokens[BUYS][TOKEN_STR_LEN];
    int64_t users[BUYS + READS], voucher;
    long sold = 0, unknown = 0, swallowed_buys = 0, twice = 0, bad = 0;
    long retries = 0, redispatches = 0;
    char st[32];
    (void)state;

    /* Made on app2 directly: through haproxy app1 would swallow it. */
    voucher = it_seckill_create(&app, 1, STOCK, -5, 3600);
    send_crowd(voucher, resps, tokens, users);

    for (int i = 0; i < BUYS; i++) {
        bool swallowed;
        int64_t orders = orders_of(voucher, users[i]);
        long status = resps[i].status;

        fake_swallowed("POST", tokens[i], &swallowed);
        swallowed_buys += swallowed;
        if (status == 201) {
            sold++;
            if (orders != 1) {
                print_error("user %lld: 201, %lld orders in MySQL\n",
                            (long long)users[i], (long long)orders);
                bad++;
            }
        } else if (status == 502 || status == 0) {
            unknown++;
        }
        if (swallowed && (status != 502 && status != 0)) {
            /* app1 took it and app2 answered it too. */
            print_error("user %lld: purchase swallowed by app1, then "
                        "answered %ld by app2 (%lld orders in MySQL)\n",
                        (long long)users[i], status, (long long)orders);
            twice++;
        } else if (swallowed && orders != 0) {
            print_error("user %lld: purchase swallowed by app1 and told "
                        "%ld, yet has %lld orders in MySQL\n",
                        (long long)users[i], status, (long long)orders);
            twice++;
        } else if (!swallowed && status != 201) {
            print_error("user %lld: purchase sent to app2 only answered "
                        "%ld: %s\n",
                        (long long)users[i], status,
                        resps[i].body ? resps[i].body : "");
            bad++;
        }
    }
    long reads_ok = 0;
    for (int i = BUYS; i < BUYS + READS; i++) {
        if (resps[i].status == 200)
            reads_ok++;
        else
            print_error("voucher read %d: %ld, not 200\n", i - BUYS,
                        resps[i].status);
    }
    long swallowed_reads = fake_swallowed("GET", NULL, NULL);
    server_status(1, st, sizeof(st), &retries, &redispatches);
    printf("%d purchases through haproxy: %ld swallowed by app1, %ld "
           "answered as unknown (502 or none), %ld sold; %d reads: %ld "
           "swallowed by app1, %ld answered 200; haproxy retried %ld, "
           "redispatched %ld away from app1\n",
           BUYS, swallowed_buys, unknown, sold, READS, swallowed_reads,
           reads_ok, retries, redispatches);
    for (int i = 0; i < BUYS + READS; i++)
        it_resp_free(&resps[i]);

    /* Round robin over two servers: app1 had its share of each. */
    assert_true(swallowed_buys > 0);
    assert_true(swallowed_reads > 0);
    assert_int_equal(0, twice);
    assert_int_equal(0, bad);
    assert_int_equal(swallowed_buys, unknown);
    assert_int_equal(READS, reads_ok);
    /* MySQL has the 201s and nothing else. */
    assert_int_equal(sold, it_sql_order_count(voucher));
    assert_int_equal(STOCK - sold, it_sql_stock(voucher));
}

/*
 * app1 gone (its port refuses): purchases are tried on app2 and sold.
 * Runs last: it kills the fake. The crowd follows the kill at once, and
 * haproxy needs two failed checks a second apart to take app1 out, so it
 * still sends app1 its share (its redispatch count shows it).
 */
/*
 * The shipped config drops a client's own X-Forwarded-For before adding
 * the address it saw: the probe's 2 KiB chain ending in a made-up
 * address, sent through haproxy, counts against the test's own address
 * (127.0.0.1, what haproxy saw), never the made-up one.
 */
static void test_forwarded_for_is_haproxys(void **state)
{
    char *forged = it_forged_xff("203.0.113.77");
    const char *const hdrs[] = {forged, NULL};
    struct it_req req = {
        .method = "GET", .path = "/api/vouchers?limit=1", .headers = hdrs};
    struct it_resp resp;
    (void)state;

    it_redis_int(0, "DEL %s", "rate:ip:203.0.113.77");
    it_redis_int(0, "DEL %s", "rate:ip:127.0.0.1");
    it_http_do(&lb, &req, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    free(forged);
    if (it_redis_int(-2, "PTTL %s", "rate:ip:203.0.113.77") > 0)
        fail_msg("the read counted against the address the client made up");
    assert_true(it_redis_int(-2, "PTTL %s", "rate:ip:127.0.0.1") > 0);
}

static void test_refused_purchase_tried_elsewhere(void **state)
{
    static struct it_resp resps[BUYS + READS];
    char tokens[BUYS][TOKEN_STR_LEN];
    int64_t users[BUYS + READS], voucher;
    long before = 0, after = 0, sold = 0;
    char st[32];
    (void)state;

    voucher = it_seckill_create(&app, 1, STOCK, -5, 3600);
    server_status(1, st, sizeof(st), NULL, &before);
    assert_int_equal(0, strncmp(st, "UP", 2));
    kill(fake_pid, SIGKILL);
    waitpid(fake_pid, NULL, 0);
    fake_pid = 0;
    send_crowd(voucher, resps, tokens, users);
    server_status(1, st, sizeof(st), NULL, &after);

    for (int i = 0; i < BUYS + READS; i++) {
        long want = i < BUYS ? 201 : 200;

        if (resps[i].status != want)
            print_error("request %d: %ld, not %ld: %s\n", i, resps[i].status,
                        want, resps[i].body ? resps[i].body : "");
        sold += i < BUYS && resps[i].status == 201;
        assert_int_equal(want, resps[i].status);
        it_resp_free(&resps[i]);
    }
    printf("app1 refusing: %d purchases and %d reads all answered by app2; "
           "haproxy redispatched %ld refused connections away from app1 "
           "(now %s)\n",
           BUYS, READS, after - before, st);
    assert_true(after > before);
    assert_int_equal(BUYS, sold);
    assert_int_equal(sold, it_sql_order_count(voucher));
    for (int i = 0; i < BUYS; i++)
        assert_int_equal(1, orders_of(voucher, users[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purchase_not_sent_twice),
        cmocka_unit_test(test_forwarded_for_is_haproxys),
        cmocka_unit_test(test_refused_purchase_tried_elsewhere),
    };
    return it_exit_status(
        cmocka_run_group_tests_name("lb", tests, group_setup, group_teardown));
}
