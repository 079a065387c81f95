/*
 * test_faults.c - losing a backend and getting it back: an instance whose
 * Redis or MySQL is unreachable stays alive, says so on /readyz and answers
 * 503 UNAVAILABLE with Retry-After; a restarted Redis and killed MySQL
 * connections are recovered from without restarting seckilld.
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
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <sodium.h>

#include "idgen/idgen.h"
#include "tests/it/harness.h"

/* Far from the ids of the other tests. */
#define USER_BASE 200000000000LL
/* How long a recovered backend may take to be noticed. */
#define RECOVER_MS 5000

/* The healthy instance: creates vouchers, and is the subject of (c). */
static struct it_server srv;

/* Minted user ids of this run: user_base + k. */
static int64_t user_base;

static int group_setup(void **state)
{
    (void)state;
    it_init();
    if (sodium_init() < 0)
        return -1;
    /* Unique per run even without a database reset in between. */
    user_base = USER_BASE + util_now_ms() % 100000000 * 100;
    return it_server_start(&srv, "faults", NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

static int64_t user_id(int k)
{
    return user_base + k;
}

/*
 * The instance of (b) takes its order ids from a private Redis whose day
 * counter would start at 1 on every start, and so repeat ids that the
 * shared Redis (or another run of this test) handed out in the same second.
 * Start the counters of today and tomorrow at a random point far above
 * anything the shared Redis reaches.
 */
static void redis_seed_idgen_auth(uint16_t port, const char *pass)
{
    int64_t now = util_now_ms() / 1000;
    redisContext *rc = redisConnect("127.0.0.1", port);
    char key[64];
    int d;

    assert_non_null(rc);
    assert_int_equal(0, rc->err);
    if (pass)
        freeReplyObject(redisCommand(rc, "AUTH %s", pass));
    for (d = 0; d < 2; d++) {
        unsigned long long seed = (1ULL << 31) + randombytes_uniform(1U << 30);
        redisReply *r;

        assert_int_equal(
            0, idgen_day_key("order", now + d * 86400, key, sizeof(key)));
        r = redisCommand(rc, "SET %s %llu", key, seed);
        assert_non_null(r);
        assert_int_equal(REDIS_REPLY_STATUS, r->type);
        freeReplyObject(r);
    }
    redisFree(rc);
}

static void redis_seed_idgen(uint16_t port)
{
    redis_seed_idgen_auth(port, NULL);
}

/* Assert 503 UNAVAILABLE with a Retry-After of whole seconds. */
static void assert_unavailable(const struct it_resp *resp)
{
    it_assert_error(resp, 503, "UNAVAILABLE");
    if (!it_is_digits(resp->retry_after)) {
        print_error("503 without a Retry-After of seconds: \"%s\"\n",
                    resp->retry_after);
        fail();
    }
}

static void expect_unavailable(const struct it_server *s, const char *method,
                               const char *path, const char *body,
                               const char *token)
{
    struct it_resp resp;

    it_http(s, method, path, body, token, &resp);
    if (resp.status != 503)
        print_error("request: %s %s\n", method, path);
    assert_unavailable(&resp);
    it_resp_free(&resp);
}

static long get_status(const struct it_server *s, const char *path)
{
    struct it_resp resp;
    long status = it_http(s, "GET", path, NULL, NULL, &resp);

    it_resp_free(&resp);
    return status;
}

static void expect_status(const struct it_server *s, const char *path,
                          long status)
{
    struct it_resp resp;

    it_http(s, "GET", path, NULL, NULL, &resp);
    if (resp.status != status)
        print_error("request: GET %s\n", path);
    it_assert_status(&resp, status);
    it_resp_free(&resp);
}

/* A purchase of voucher v as user on s succeeds (201). */
static void expect_sold(const struct it_server *s, int64_t v, int64_t user)
{
    struct it_resp resp;

    it_purchase(s, v, user, &resp);
    if (resp.status != 201)
        print_error("purchase of voucher %lld as user %lld\n", (long long)v,
                    (long long)user);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
}

/* Poll GET path until it answers status; false after timeout_ms. */
static bool wait_status(const struct it_server *s, const char *path,
                        long status, int timeout_ms)
{
    int64_t deadline = util_mono_ms() + timeout_ms;

    for (;;) {
        if (get_status(s, path) == status)
            return true;
        if (util_mono_ms() >= deadline)
            return false;
        usleep(100 * 1000);
    }
}

/* ---- (a) a backend that is not there ---- */

static void test_redis_unreachable(void **state)
{
    struct it_server down;
    char *url = xasprintf("SECKILL_REDIS_URL=redis://127.0.0.1:%u/0",
                          (unsigned)it_free_port());
    const char *env[] = {url, NULL};
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    char tok[TOKEN_STR_LEN], path[96];

    (void)state;
    assert_int_equal(0, it_server_start(&down, "faults-noredis", env));
    expect_status(&down, "/healthz", 200);
    expect_unavailable(&down, "GET", "/readyz", NULL, NULL);

    it_token(user_id(1), TOKEN_ROLE_USER, 3600, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    expect_unavailable(&down, "POST", path, NULL, tok);
    expect_unavailable(&down, "POST", "/api/auth/code",
                       "{\"phone\":\"13900000001\"}", NULL);
    /* Still alive and still refusing after a second round. */
    expect_unavailable(&down, "POST", path, NULL, tok);
    assert_true(it_server_alive(&down));
    assert_int_equal(0, it_server_stop(&down));

    /* Nothing was sold: the healthy instance still sells all 10. */
    expect_sold(&srv, v, user_id(1));
    free(url);
}

static void test_mysql_unreachable(void **state)
{
    struct it_server down;
    const char *orig = getenv("SECKILL_MYSQL_URL");
    char *rewritten, *url;
    const char *env[2];
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    char tok[TOKEN_STR_LEN], path[96];

    (void)state;
    assert_non_null(orig);
    rewritten = it_mysql_url_with_port(orig, it_free_port());
    assert_non_null(rewritten);
    url = xasprintf("SECKILL_MYSQL_URL=%s", rewritten);
    env[0] = url;
    env[1] = NULL;
    assert_int_equal(0, it_server_start(&down, "faults-nomysql", env));
    expect_status(&down, "/healthz", 200);
    expect_unavailable(&down, "GET", "/readyz", NULL, NULL);
    expect_unavailable(&down, "GET", "/api/vouchers/1", NULL, NULL);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);
    expect_unavailable(&down, "GET", path, NULL, NULL);
    expect_unavailable(&down, "GET", "/api/vouchers", NULL, NULL);
    it_token(user_id(2), TOKEN_ROLE_USER, 3600, tok);
    expect_unavailable(&down, "GET", "/api/orders", NULL, tok);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    expect_unavailable(&down, "POST", path, NULL, tok);
    assert_true(it_server_alive(&down));
    assert_int_equal(0, it_server_stop(&down));
    assert_int_equal(0, it_sql_order_count(v));
    free(url);
    free(rewritten);
}

/* ---- (b) Redis goes away and comes back ---- */

/* Start a private redis-server on port, with a password when pass is not
 * NULL. */
static pid_t redis_start_auth(uint16_t port, const char *log_path,
                              const char *pass)
{
    pid_t pid = it_redis_start(port, log_path, pass);

    assert_true(pid > 0);
    return pid;
}

static pid_t redis_start(uint16_t port, const char *log_path)
{
    return redis_start_auth(port, log_path, NULL);
}

static void redis_kill(pid_t pid)
{
    int status;

    kill(pid, SIGKILL);
    assert_int_equal(0, it_wait_exit(pid, 5000, &status));
}

/*
 * Purchase as user_id, retrying while the answer is 503. Each worker thread
 * has its own Redis connection: one that failed to connect during the
 * outage waits a short backoff before it tries again, so for a moment
 * after /readyz (served by another thread) says 200 a purchase may still
 * answer 503 (retryable, nothing sold). Bounded by RECOVER_MS.
 */
static void purchase_after_recovery(const struct it_server *s, int64_t v,
                                    int64_t user, struct it_resp *resp)
{
    int64_t deadline = util_mono_ms() + RECOVER_MS;
    int unavailable = 0;

    for (;;) {
        it_purchase(s, v, user, resp);
        if (resp->status != 503 || util_mono_ms() >= deadline)
            break;
        assert_unavailable(resp);
        it_resp_free(resp);
        unavailable++;
    }
    if (unavailable)
        print_message("      purchase answered 503 %d time(s) after redis "
                      "came back\n",
                      unavailable);
}

static void test_redis_reconnect(void **state)
{
    uint16_t port = it_free_port();
    char *log_path = xasprintf("%s/redis-%u.log", it_log_dir(), (unsigned)port);
    char *url =
        xasprintf("SECKILL_REDIS_URL=redis://127.0.0.1:%u/0", (unsigned)port);
    const char *env[] = {url, NULL};
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    struct it_server inst;
    struct it_resp resp;
    pid_t redis;

    (void)state;
    unlink(log_path);
    redis = redis_start(port, log_path);
    redis_seed_idgen(port);
    assert_int_equal(0, it_server_start(&inst, "faults-redis", env));
    expect_status(&inst, "/readyz", 200);
    expect_sold(&inst, v, user_id(10));

    /* Redis dies: not ready, purchases refused, process alive. */
    redis_kill(redis);
    if (!wait_status(&inst, "/readyz", 503, RECOVER_MS)) {
        print_error("/readyz still not 503 %d ms after redis died\n",
                    RECOVER_MS);
        fail();
    }
    expect_unavailable(&inst, "GET", "/readyz", NULL, NULL);
    it_purchase(&inst, v, user_id(11), &resp);
    assert_unavailable(&resp);
    it_resp_free(&resp);
    expect_status(&inst, "/healthz", 200);
    assert_true(it_server_alive(&inst));

    /* Redis is back on the same port: ready again, without a restart. */
    redis = redis_start(port, log_path);
    redis_seed_idgen(port);
    if (!wait_status(&inst, "/readyz", 200, RECOVER_MS)) {
        print_error("/readyz not 200 within %d ms of redis restarting; "
                    "log: %s\n",
                    RECOVER_MS, inst.log_path);
        fail();
    }
    purchase_after_recovery(&inst, v, user_id(11), &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
    /* The one-per-user rule holds after the reconnect. */
    purchase_after_recovery(&inst, v, user_id(10), &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);
    assert_true(it_server_alive(&inst));

    assert_int_equal(0, it_server_stop(&inst));
    redis_kill(redis);
    assert_int_equal(2, it_sql_order_count(v));
    free(url);
    free(log_path);
}

/* ---- (c) MySQL drops the service's connections ---- */

/* How many lines of the file at path hold needle. */
static int log_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/*
 * A Redis with a password that needs percent-encoding in a URL ("p@ss" is
 * "p%40ss"): the store and the purchase lock (whose URL defaults to the
 * Redis URL) both log in with it, so purchases work. A lock backend that
 * refuses its credentials makes /readyz say so and purchases answer 503,
 * logged once, never 500.
 */
static void test_redis_password(void **state)
{
    uint16_t port = it_free_port();
    char *log_path = xasprintf("%s/redis-%u.log", it_log_dir(), (unsigned)port);
    char *url = xasprintf("SECKILL_REDIS_URL=redis://:p%%40ss@127.0.0.1:%u/0",
                          (unsigned)port);
    char *bad_lock = xasprintf("SECKILL_LOCK_URL=redis://:wrong@127.0.0.1:%u/0",
                               (unsigned)port);
    const char *env[] = {url, NULL};
    const char *env_bad[] = {url, bad_lock, NULL};
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    struct it_server good, bad;
    struct it_resp resp;
    const json_t *details;
    pid_t redis;

    (void)state;
    unlink(log_path);
    redis = redis_start_auth(port, log_path, "p@ss");
    redis_seed_idgen_auth(port, "p@ss");

    assert_int_equal(0, it_server_start(&good, "faults-redis-pass", env));
    it_http(&good, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_string_equal("ok", it_json_str(resp.json, "lock"));
    it_resp_free(&resp);
    expect_sold(&good, v, user_id(20));
    it_purchase(&good, v, user_id(20), &resp);
    it_assert_error(&resp, 409, "ALREADY_PURCHASED");
    it_resp_free(&resp);
    assert_int_equal(0, it_server_stop(&good));

    /* The lock's own URL with a wrong password. */
    assert_int_equal(0, it_server_start(&bad, "faults-lock-badpass", env_bad));
    it_http(&bad, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_error(&resp, 503, "UNAVAILABLE");
    details = json_object_get(json_object_get(resp.json, "error"), "details");
    assert_string_equal("ok", it_json_str(details, "mysql"));
    assert_string_equal("ok", it_json_str(details, "redis"));
    assert_string_equal("credentials refused", it_json_str(details, "lock"));
    it_resp_free(&resp);
    for (int i = 0; i < 5; i++) {
        it_purchase(&bad, v, user_id(21 + i), &resp);
        assert_unavailable(&resp);
        it_resp_free(&resp);
    }
    assert_true(it_server_alive(&bad));
    assert_int_equal(0, it_server_stop(&bad));
    /* Six refusals (the probe and five purchases), one log line. */
    assert_int_equal(1, log_count(bad.log_path, "who=lock"));
    assert_int_equal(1, log_count(bad.log_path, "refused the credentials"));

    redis_kill(redis);
    assert_int_equal(1, it_sql_order_count(v));
    free(bad_lock);
    free(url);
    free(log_path);
}

/*
 * Only the purchase lock's backend is unreachable (its own URL points at a
 * closed port): /readyz says so (503, details.lock "unreachable") while
 * MySQL and Redis answer, and purchases are 503 with nothing written.
 */
static void test_lock_unreachable(void **state)
{
    char *lock_url =
        xasprintf("SECKILL_LOCK_URL=redis://127.0.0.1:%u/0?timeout_ms=200",
                  (unsigned)it_free_port());
    const char *env[] = {lock_url, NULL};
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    struct it_server inst;
    struct it_resp resp;
    const json_t *details;

    (void)state;
    assert_int_equal(0, it_server_start(&inst, "faults-nolock", env));
    it_http(&inst, "GET", "/readyz", NULL, NULL, &resp);
    it_assert_error(&resp, 503, "UNAVAILABLE");
    details = json_object_get(json_object_get(resp.json, "error"), "details");
    assert_string_equal("ok", it_json_str(details, "mysql"));
    assert_string_equal("ok", it_json_str(details, "redis"));
    assert_string_equal("unreachable", it_json_str(details, "lock"));
    assert_string_equal("redis", it_json_str(details, "lockBackend"));
    it_resp_free(&resp);
    it_purchase(&inst, v, user_id(30), &resp);
    assert_unavailable(&resp);
    it_resp_free(&resp);
    assert_int_equal(0, it_server_stop(&inst));
    assert_int_equal(0, it_sql_order_count(v));
    free(lock_url);
}

static void test_mysql_reconnect(void **state)
{
    const struct store_config *sc = it_store_config();
    int64_t ids[256];
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    char path[96];
    uint16_t ports[64];
    size_t n, nports, i, left = 0;
    char *hosts;
    int64_t deadline;

    (void)state;
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)v);

    /* Let the worker threads open their connections. */
    for (i = 0; i < 16; i++)
        expect_status(&srv, path, 200);
    expect_sold(&srv, v, user_id(20));

    /*
     * Only this instance's connections are killed (matched by their client
     * port), so that other test processes sharing the database are left
     * alone; the helper's own connection is never among them.
     */
    nports = it_proc_tcp_ports(srv.pid, (uint16_t)sc->mysql_port, ports,
                               sizeof(ports) / sizeof(ports[0]));
    if (nports == 0 || nports > sizeof(ports) / sizeof(ports[0])) {
        print_error("found %zu MySQL connections of seckilld pid %d\n", nports,
                    (int)srv.pid);
        fail();
    }
    hosts = xstrdup("''");
    for (i = 0; i < nports; i++) {
        char *more = xasprintf("%s,'127.0.0.1:%u'", hosts, ports[i]);

        free(hosts);
        hosts = more;
    }
    n = it_sql_column(ids, sizeof(ids) / sizeof(ids[0]),
                      "SELECT id FROM information_schema.processlist "
                      "WHERE user = '%s' AND id <> CONNECTION_ID() AND "
                      "host IN (%s)",
                      sc->mysql_user, hosts);
    free(hosts);
    print_message("      killing %zu of %zu MySQL connections\n", n, nports);
    assert_true(n >= 1 && n == nports);
    for (i = 0; i < n; i++) {
        unsigned err = it_sql_exec("KILL CONNECTION %lld", (long long)ids[i]);

        /* 1094: unknown thread, it went away by itself. */
        if (err != 0 && err != 1094) {
            print_error("KILL CONNECTION %lld: error %u\n", (long long)ids[i],
                        err);
            fail();
        }
    }
    /* Wait until the server has really closed them. */
    deadline = util_mono_ms() + 5000;
    do {
        int64_t still[256];
        size_t m, j, k;

        left = 0;
        m = it_sql_column(still, sizeof(still) / sizeof(still[0]),
                          "SELECT id FROM information_schema.processlist "
                          "WHERE user = '%s' AND id <> CONNECTION_ID()",
                          sc->mysql_user);
        for (j = 0; j < m && j < 256; j++)
            for (k = 0; k < n; k++)
                if (still[j] == ids[k])
                    left++;
        if (left)
            usleep(50 * 1000);
    } while (left && util_mono_ms() < deadline);
    assert_int_equal(0, left);

    /* Every read succeeds: a broken idle connection is retried once. */
    for (i = 0; i < 16; i++)
        expect_status(&srv, path, 200);

    /* And purchases still work. */
    expect_sold(&srv, v, user_id(21));
    assert_int_equal(2, it_sql_order_count(v));
    assert_true(it_server_alive(&srv));
}

/* ---- the ID worker lost its counter ---- */

/*
 * If Redis loses the day's counter, INCR starts over and ids handed out
 * before in the same second come back. The primary key refuses a reused
 * id and the purchase takes a fresh one: a user who never bought must get
 * 201, not 409 ALREADY_PURCHASED. Here the next two counter values of
 * this second and the next two are already taken, so the first try fails
 * and a later one (with a fresh block of ids) succeeds.
 */
static void test_id_reuse(void **state)
{
    int64_t v = it_seckill_create(&srv, 1, 10, -60, 3600);
    int64_t other = it_seckill_create(&srv, 1, 10, -60, 3600);
    int64_t now = util_now_ms() / 1000, t, id, sec;
    /* A counter value no other test reaches today. */
    int64_t c = 3000000000LL + (it_unique() % 100000) * 16;
    redisContext *rc = it_redis_connect();
    struct it_resp resp;
    uint32_t seq;
    char key[64];
    int k = 0;

    (void)state;
    for (t = now; t <= now + 2; t++) {
        for (int64_t n = 1; n <= 2; n++)
            assert_int_equal(
                0, it_sql_exec("INSERT INTO voucher_orders (id, user_id, "
                               "voucher_id) VALUES (%lld, %lld, %lld)",
                               (long long)idgen_compose(t, (uint32_t)(c + n)),
                               (long long)user_id(40 + k++), (long long)other));
        /* Both names of the day's counter: the script hands out the
         * larger of the two (idgen_legacy_keys()), and an earlier run of
         * this test on the same Redis today may have left the old name
         * above c. */
        assert_int_equal(0, idgen_day_key("order", t, key, sizeof(key)));
        redisReply *r = redisCommand(rc, "SET %s %lld", key, (long long)c);
        assert_non_null(r);
        freeReplyObject(r);
        assert_int_equal(0, idgen_legacy_day_key("order", t, key, sizeof(key)));
        r = redisCommand(rc, "SET %s %lld", key, (long long)c);
        assert_non_null(r);
        freeReplyObject(r);
    }
    redisFree(rc);
    /* The server's block of ids from before the counter was set must
     * have aged out, so that the next id comes from the counter. */
    {
        struct timespec ts = {0, (IDGEN_BLOCK_MAX_AGE_MS + 50) * 1000000L};
        nanosleep(&ts, NULL);
    }

    it_purchase(&srv, v, user_id(30), &resp);
    it_assert_status(&resp, 201);
    id = it_json_id(resp.json, "orderId");
    it_resp_free(&resp);
    idgen_decode(id, &sec, &seq);
    /* Its first reservation starts at c + 1 (taken); the clash drops the
     * block and the next reservation (of 1) lies past that block: c + 2
     * (taken, if the first block held only c + 1) or later. */
    assert_true(seq >= c + 3 && seq <= c + 2 + IDGEN_BLOCK_MAX);
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                      "WHERE id = %lld AND user_id = %lld AND "
                                      "voucher_id = %lld",
                                      (long long)id, (long long)user_id(30),
                                      (long long)v));
    assert_int_equal(9, it_sql_stock(v));
}

/*
 * Last: SIGTERM makes the server finish and exit 0 within
 * IT_STOP_TIMEOUT_MS (under ASan, also without leaks).
 */
static void test_clean_shutdown(void **state)
{
    (void)state;
    assert_int_equal(0, it_server_stop(&srv));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_unreachable),
        cmocka_unit_test(test_mysql_unreachable),
        cmocka_unit_test(test_redis_reconnect),
        cmocka_unit_test(test_redis_password),
        cmocka_unit_test(test_lock_unreachable),
        cmocka_unit_test(test_mysql_reconnect),
        cmocka_unit_test(test_id_reuse),
        cmocka_unit_test(test_clean_shutdown),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "faults", tests, group_setup, group_teardown));
}
