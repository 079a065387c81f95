/*
 * test_login.c - the limits of login codes, at the default settings: at
 * most one code a minute and five an hour for a phone; wrong codes make
 * the client address wait from its third on and the phone from its
 * tenth on (1 s, doubling), refusing before any comparison; no wrong try
 * and no new code ever voids a code the owner holds. Checked in Redis
 * too. The instances trust loopback as a proxy, so that X-Forwarded-For
 * stands for many client addresses.
 *
 * A: every limit at its default. B: codes as often as asked (interval
 * 0), to test the hourly count and codes that live side by side.
 *
 * And `seckilld users normalize`: rows of an older version, whose phones
 * are in other forms, get their E.164 form; two rows of one number
 * become one (the older keeps it), and a login by any form finds it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "common/pow.h"
#include "tests/it/harness.h"

enum { SRV_A, SRV_B, SRV_COUNT };
static struct it_server srvs[SRV_COUNT];
static struct it_server *const srv_a = &srvs[SRV_A];
static struct it_server *const srv_b = &srvs[SRV_B];
static unsigned next_phone, next_addr;

static int group_setup(void **state)
{
    const char *env_a[] = {"SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                           "SECKILL_RATE_IP",
                           "SECKILL_RATE_USER",
                           "SECKILL_CODE_INTERVAL_S",
                           "SECKILL_CODE_PER_HOUR",
                           "SECKILL_LOGIN_ADDR_TRIES",
                           "SECKILL_LOGIN_PHONE_TRIES",
                           NULL};
    const char *env_b[] = {"SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                           "SECKILL_RATE_IP",
                           "SECKILL_RATE_USER",
                           "SECKILL_CODE_INTERVAL_S=0",
                           "SECKILL_CODE_PER_HOUR",
                           "SECKILL_LOGIN_ADDR_TRIES",
                           "SECKILL_LOGIN_PHONE_TRIES",
                           NULL};

    (void)state;
    it_init();
    next_phone = (unsigned)(util_now_ms() / 10 % 1000000);
    if (it_server_start(srv_a, "login-a", env_a) ||
        it_server_start(srv_b, "login-b", env_b))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(srvs, SRV_COUNT);
}

/* A phone nobody used in this run, in E.164 form. */
static void fresh_phone(char out[24])
{
    snprintf(out, 24, "+86137%08u", next_phone++ % 100000000u);
}

/* A client address nobody used in this run (NULL: a new one). */
static const char *addr_of(const char *addr, char buf[32])
{
    if (addr)
        return addr;
    next_addr++;
    snprintf(buf, 32, "10.30.%u.%u", next_addr / 250 % 250,
             next_addr % 250 + 1);
    return buf;
}

static long post(const struct it_server *srv, const char *path,
                 const char *body, const char *addr, struct it_resp *resp)
{
    char xff[64], buf[32];
    struct it_req req = {.method = "POST", .path = path, .body = body};

    snprintf(xff, sizeof(xff), "X-Forwarded-For: %s", addr_of(addr, buf));
    req.header = xff;
    return it_http_do(srv, &req, resp);
}

/* Ask srv for a code for phone from addr (NULL: a new address): its
 * status; the code into code and its codeRequest into request (when 200
 * and not NULL), Retry-After into *ra (when 429). */
static long ask_from(const struct it_server *srv, const char *phone,
                     const char *addr, char code[8], char request[40], long *ra)
{
    char body[64];
    struct it_resp resp;
    long st;

    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    st = post(srv, "/api/auth/code", body, addr, &resp);
    if (st == 200 && code)
        snprintf(code, 8, "%s", it_json_str(resp.json, "code"));
    if (st == 200 && request)
        snprintf(request, 40, "%s", it_json_str(resp.json, "codeRequest"));
    if (st == 429) {
        it_assert_error(&resp, 429, "RATE_LIMITED");
        if (ra)
            *ra = strtol(resp.retry_after, NULL, 10);
    }
    it_resp_free(&resp);
    return st;
}

static long ask(const struct it_server *srv, const char *phone, char code[8],
                long *ra)
{
    return ask_from(srv, phone, NULL, code, NULL, ra);
}

/* Log in as phone with code from addr (NULL: a new address): status. */
static long try_code(const struct it_server *srv, const char *phone,
                     const char *code, const char *addr, long *ra)
{
    char body[96];
    struct it_resp resp;
    long st;

    snprintf(body, sizeof(body), "{\"phone\":\"%s\",\"code\":\"%s\"}", phone,
             code);
    st = post(srv, "/api/auth/login", body, addr, &resp);
    if (st == 429) {
        it_assert_error(&resp, 429, "RATE_LIMITED");
        if (ra)
            *ra = strtol(resp.retry_after, NULL, 10);
    }
    it_resp_free(&resp);
    return st;
}

/* A code that is not code. */
static const char *wrong_of(const char *code)
{
    return strcmp(code, "000000") == 0 ? "111111" : "000000";
}

static long long redis_int(const char *fmt, const char *phone)
{
    redisContext *rc = it_redis_connect();
    redisReply *r = redisCommand(rc, fmt, phone);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    freeReplyObject(r);
    redisFree(rc);
    return v;
}

/* Move every entry of addr's send log for phone ms into the past, as
 * if those codes had been asked for that long ago. */
static void move_sent_back(const char *phone, const char *addr, long ms)
{
    redisContext *rc = it_redis_connect();
    char key[160];
    redisReply *r;

    snprintf(key, sizeof(key), "login:{p:%s}:s:%s", phone, addr);
    r = redisCommand(rc, "ZRANGE %s 0 -1 WITHSCORES", key);
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements;
         i += 2)
        freeReplyObject(
            redisCommand(rc, "ZADD %s %lld %s", key,
                         strtoll(r->element[i + 1]->str, NULL, 10) - ms,
                         r->element[i]->str));
    freeReplyObject(r);
    redisFree(rc);
}

/* ---- tests ---- */

/* A second code within the minute for the same address is refused with
 * when to come back; another address gets one. */
static void test_code_interval(void **state)
{
    char phone[24], code[8], code2[8], me[32];
    long ra = 0;

    (void)state;
    fresh_phone(phone);
    addr_of(NULL, me);
    assert_int_equal(200, ask_from(srv_a, phone, me, code, NULL, NULL));
    assert_int_equal(429, ask_from(srv_a, phone, me, NULL, NULL, &ra));
    assert_true(ra >= 1 && ra <= 60);
    assert_int_equal(1, redis_int("ZCARD login:{p:%s}:codes", phone));
    assert_int_equal(200, ask(srv_a, phone, code2, NULL));
    assert_int_equal(200, try_code(srv_a, phone, code, NULL, NULL));
    assert_int_equal(0, redis_int("EXISTS login:{p:%s}:codes", phone));
}

/* Five codes an hour from one address; the sixth waits for the first to
 * be an hour old, while another address still gets one. Fifty for the
 * phone from anywhere. Every one of them is live, and a login uses them
 * all up. */
static void test_codes_per_hour(void **state)
{
    char phone[24], codes[5][8], me[32];
    long ra = 0;

    (void)state;
    fresh_phone(phone);
    addr_of(NULL, me);
    for (int i = 0; i < 5; i++) {
        /* (srv_b has no interval; the log moved back keeps the counts
         * honest anyway.) */
        assert_int_equal(200, ask_from(srv_b, phone, me, codes[i], NULL, NULL));
        move_sent_back(phone, me, 61000);
    }
    assert_int_equal(429, ask_from(srv_b, phone, me, NULL, NULL, &ra));
    assert_true(ra > 3200 && ra <= 3600);
    assert_int_equal(200, ask(srv_b, phone, NULL, NULL));
    /* The phone's own line: 50 an hour from anywhere (44 more here). */
    for (int i = 0; i < 44; i++)
        assert_int_equal(200, ask(srv_b, phone, NULL, NULL));
    assert_int_equal(429, ask(srv_b, phone, NULL, &ra));
    assert_true(ra > 3200 && ra <= 3600);
    assert_int_equal(200, try_code(srv_b, phone, codes[0], NULL, NULL));
    assert_int_equal(401, try_code(srv_b, phone, codes[4], NULL, NULL));
}

/*
 * The probe's attack on a buyer: from a new address each time, it asks
 * for codes for the buyer's phone and guesses, so the phone's wrong
 * tries make every guess without a code request wait, up to an hour. The
 * owner meanwhile asks for a code and logs in with it and its
 * codeRequest at the first try: its code request is checked alone,
 * never held by the waits the guesses built.
 */
static void test_owner_logs_in_through_guessing(void **state)
{
    char phone[24], code[8], request[40], mine[32], body[160];
    struct it_resp resp;
    int asked = 0, guessed = 0, held = 0;
    long ra = 0;
    int64_t t0;

    (void)state;
    fresh_phone(phone);
    t0 = util_mono_ms();
    for (int i = 0; util_mono_ms() - t0 < 3000; i++) {
        long st;

        /* A code now and then (each costs the attacker a proof of work
         * where they are on): fewer than the phone's 50 an hour. */
        if (i % 10 == 0 && asked < 40 && ask(srv_a, phone, NULL, NULL) == 200)
            asked++;
        st = try_code(srv_a, phone, "123456", NULL, &ra);
        guessed += st == 401;
        held += st == 429;
    }
    print_message("the attacker: %d codes sent to the phone, %d guesses "
                  "compared, %d held by the phone's wait\n",
                  asked, guessed, held);
    assert_true(held > 0);
    /* The owner, from an address of its own. */
    addr_of(NULL, mine);
    assert_int_equal(200, ask_from(srv_a, phone, mine, code, request, NULL));
    assert_int_equal(32, strlen(request));
    /* Without the request, the code waits like any guess. */
    assert_int_equal(429, try_code(srv_a, phone, code, mine, NULL));
    snprintf(body, sizeof(body),
             "{\"phone\":\"%s\",\"code\":\"%s\",\"codeRequest\":\"%s\"}", phone,
             code, request);
    post(srv_a, "/api/auth/login", body, mine, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* A code request of someone else's code: three wrong codes with it void
 * it, and its own code then does not log in with it (401 saying so); a
 * request id that is not one is a 400. */
static void test_code_request_tries(void **state)
{
    char phone[24], code[8], request[40], body[160];
    struct it_resp resp;

    (void)state;
    fresh_phone(phone);
    assert_int_equal(200, ask_from(srv_a, phone, NULL, code, request, NULL));
    for (int i = 0; i < 4; i++) {
        const char *m;

        snprintf(body, sizeof(body),
                 "{\"phone\":\"%s\",\"code\":\"%s\",\"codeRequest\":"
                 "\"%s\"}",
                 phone, i < 3 ? wrong_of(code) : code, request);
        post(srv_a, "/api/auth/login", body, NULL, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        m = it_json_str(json_object_get(resp.json, "error"), "message");
        /* The fourth says the request is void, not the code wrong. */
        assert_true((i == 3) == (strstr(m, "used up") != NULL));
        it_resp_free(&resp);
    }
    /* The code itself is still live: without the request it logs in. */
    assert_int_equal(200, try_code(srv_a, phone, code, NULL, NULL));
    snprintf(body, sizeof(body),
             "{\"phone\":\"%s\",\"code\":\"%s\",\"codeRequest\":\"xyz\"}",
             phone, code);
    post(srv_a, "/api/auth/login", body, NULL, &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
}

/* Someone else asking for the victim's phone adds a code; the victim's
 * own code still logs in. */
static void test_code_not_voided_by_new_code(void **state)
{
    char phone[24], mine[8], theirs[8];

    (void)state;
    fresh_phone(phone);
    assert_int_equal(200, ask(srv_b, phone, mine, NULL));
    assert_int_equal(200, ask(srv_b, phone, theirs, NULL));
    assert_int_equal(200, try_code(srv_b, phone, mine, NULL, NULL));
}

/* Three wrong codes from one address make it wait, before the code is
 * compared (even the right one is refused there); the owner, elsewhere,
 * logs in with the same code. */
static void test_wrong_tries_slow_address_first(void **state)
{
    char phone[24], code[8];
    long ra = 0;

    (void)state;
    fresh_phone(phone);
    assert_int_equal(200, ask(srv_a, phone, code, NULL));
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            401, try_code(srv_a, phone, wrong_of(code), "10.40.0.1", NULL));
    assert_int_equal(429, try_code(srv_a, phone, code, "10.40.0.1", &ra));
    assert_true(ra >= 1 && ra <= 2);
    assert_int_equal(200, try_code(srv_a, phone, code, "10.40.0.2", NULL));
}

/* Wrong codes from many addresses make the whole phone wait from the
 * tenth on, and the wait doubles with each; none of it voids the code:
 * once the wait is over the owner logs in with it. */
static void test_wrong_tries_never_void(void **state)
{
    char phone[24], code[8];
    long ra = 0, last_ra = 0;
    int compared = 0, refused = 0;
    int64_t t0;

    (void)state;
    fresh_phone(phone);
    assert_int_equal(200, ask(srv_a, phone, code, NULL));
    for (int i = 0; i < 10; i++)
        assert_int_equal(401,
                         try_code(srv_a, phone, wrong_of(code), NULL, NULL));
    assert_int_equal(429, try_code(srv_a, phone, code, NULL, &ra));
    assert_int_equal(1, ra);
    /* A guesser with an address per try, for 5 s: each wait doubles. */
    t0 = util_mono_ms();
    while (util_mono_ms() - t0 < 5000) {
        long st = try_code(srv_a, phone, wrong_of(code), NULL, &ra);

        if (st == 401)
            compared++;
        else if (st == 429) {
            refused++;
            assert_true(ra >= last_ra || ra >= 1);
            last_ra = ra;
        } else {
            fail_msg("a guess answered %ld", st);
        }
        usleep(20 * 1000);
    }
    print_message("a guesser with a new address each time, 5 s after the "
                  "tenth wrong code: %d compared, %d refused, last "
                  "Retry-After %ld s\n",
                  compared, refused, last_ra);
    /* 1 + 2 + 4 s of waits fit in 5 s: at most 3 or 4 more guesses. */
    assert_true(compared <= 4);
    assert_true(refused > 10);
    assert_true(redis_int("EXISTS login:{p:%s}:codes", phone) == 1);
    /* The owner waits and logs in with the code it has. */
    sleep((unsigned)ra);
    while (try_code(srv_a, phone, code, NULL, &ra) == 429)
        sleep((unsigned)ra);
    assert_int_equal(0, redis_int("EXISTS login:{p:%s}:fails", phone));
}

/* `seckilld users normalize [extra]`: its exit status, its output into
 * out. */
static int normalize(const char *extra, char *out, size_t cap)
{
    char cmd[512];
    FILE *p;
    size_t n;

    snprintf(cmd, sizeof(cmd), "'%s' users normalize %s 2>/dev/null", it_bin(),
             extra);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    return WEXITSTATUS(pclose(p));
}

static void test_users_normalize(void **state)
{
    /* One national number and one E.164 row of it (the national one is
     * older: it keeps the phone); the same the other way round; a
     * number alone in a long form; one that does not parse. */
    char n1[24], n2[24], n3[24], out[256], tok[TOKEN_STR_LEN], code[8];
    int64_t a, b, c, d, e, f;
    long st;

    (void)state;
    snprintf(n1, sizeof(n1), "1360%07u", next_phone++ % 10000000u);
    snprintf(n2, sizeof(n2), "1360%07u", next_phone++ % 10000000u);
    snprintf(n3, sizeof(n3), "1360%07u", next_phone++ % 10000000u);
    it_sql_exec("INSERT INTO users (phone) VALUES ('%s')", n1);
    a = it_sql_scalar("SELECT id FROM users WHERE phone = '%s'", n1);
    it_sql_exec("INSERT INTO users (phone) VALUES ('+86%s')", n1);
    b = it_sql_scalar("SELECT id FROM users WHERE phone = '+86%s'", n1);
    it_sql_exec("INSERT INTO users (phone) VALUES ('+86%s')", n2);
    c = it_sql_scalar("SELECT id FROM users WHERE phone = '+86%s'", n2);
    it_sql_exec("INSERT INTO users (phone) VALUES ('0086%s')", n2);
    d = it_sql_scalar("SELECT id FROM users WHERE phone = '0086%s'", n2);
    it_sql_exec("INSERT INTO users (phone) VALUES ('86%s')", n3);
    e = it_sql_scalar("SELECT id FROM users WHERE phone = '86%s'", n3);
    it_sql_exec("INSERT INTO users (phone) VALUES ('12-34')");
    f = it_sql_scalar("SELECT MAX(id) FROM users WHERE phone = '12-34'");

    assert_int_equal(0, normalize("--dry-run", out, sizeof(out)));
    assert_non_null(strstr(out, "dry run: "));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM users WHERE "
                                      "phone = '%s'",
                                      n1));
    assert_int_equal(0, normalize("", out, sizeof(out)));
    print_message("users normalize: %s", out);
    /* a (older) kept n1, b merged into it and logged out. */
    assert_int_equal(a, it_sql_scalar("SELECT id FROM users WHERE phone = "
                                      "'+86%s'",
                                      n1));
    assert_int_equal(a, it_sql_scalar("SELECT merged_into FROM users WHERE "
                                      "id = %lld",
                                      (long long)b));
    assert_int_equal(1, it_sql_scalar("SELECT token_gen FROM account_state "
                                      "WHERE role = 1 AND account_id = %lld",
                                      (long long)b));
    /* c (older, already E.164) kept n2; d merged into it, its old form
     * kept. */
    assert_int_equal(c, it_sql_scalar("SELECT id FROM users WHERE phone = "
                                      "'+86%s'",
                                      n2));
    assert_int_equal(c, it_sql_scalar("SELECT merged_into FROM users WHERE "
                                      "id = %lld AND phone IS NULL AND "
                                      "phone_raw = '0086%s'",
                                      (long long)d, n2));
    assert_int_equal(e, it_sql_scalar("SELECT id FROM users WHERE phone = "
                                      "'+86%s' AND phone_raw = '86%s'",
                                      n3, n3));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM users WHERE id = "
                                      "%lld AND phone = '12-34'",
                                      (long long)f));
    /* A token of the merged row is refused; a login by any form of the
     * number is the kept row. */
    it_token(b, TOKEN_ROLE_USER, 3600, tok);
    {
        struct it_resp resp;

        st = it_http(srv_a, "GET", "/api/orders", NULL, tok, &resp);
        it_resp_free(&resp);
        assert_int_equal(401, st);
    }
    {
        char body[96];
        struct it_resp resp;

        assert_int_equal(200, ask(srv_b, n1, code, NULL));
        snprintf(body, sizeof(body), "{\"phone\":\"0%s\",\"code\":\"%s\"}", n1,
                 code);
        post(srv_b, "/api/auth/login", body, NULL, &resp);
        it_assert_status(&resp, 200);
        assert_int_equal(a,
                         it_json_id(json_object_get(resp.json, "user"), "id"));
        it_resp_free(&resp);
    }
    /* Again: nothing left to do but the number that does not parse. */
    assert_int_equal(0, normalize("", out, sizeof(out)));
    assert_non_null(strstr(out, "changed=0 merged=0"));
    it_sql_exec("DELETE FROM users WHERE id = %lld", (long long)f);
}

/* ---- sending the code ---- */

#define SMS_SECRET                                                             \
    "5a5e0ff1c3e2d4b6a8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f"
#define OTHER_SECRET                                                           \
    "0000000000000000000000000000000000000000000000000000000000000001"

/* The code the sink printed for phone, within 5 s, into code; false when
 * none came. */
static bool sink_code(const char *log, const char *phone, char code[8])
{
    char want[64];

    snprintf(want, sizeof(want), "to %s: your login code is ", phone);
    for (int i = 0; i < 50; i++) {
        char *s = it_file_read(log), *at = s ? strstr(s, want) : NULL;

        if (at) {
            snprintf(code, 7, "%s", at + strlen(want));
            free(s);
            return strlen(code) == 6 && it_is_digits(code);
        }
        free(s);
        usleep(100 * 1000);
    }
    return false;
}

/* Start `seckilld sms-sink` (the SMS secret's), logging to log_name in
 * the log directory: its pid; the webhook setting for an instance into
 * hook (96 bytes) and its log's path into log (IT_PATH_MAX). */
static pid_t sink_start(const char *log_name, char *hook, char *log)
{
    char port_env[32];
    char *argv[] = {(char *)it_bin(), "sms-sink", NULL};
    const char *env[] = {port_env, "SECKILL_SMS_SECRET=" SMS_SECRET,
                         "SECKILL_BIND=127.0.0.1", NULL};
    uint16_t port = it_free_port();
    char **e;
    pid_t sink;

    snprintf(port_env, sizeof(port_env), "SECKILL_PORT=%u", (unsigned)port);
    snprintf(log, IT_PATH_MAX, "%s/%s", it_log_dir(), log_name);
    unlink(log);
    e = it_env_build(env);
    sink = it_spawn(argv, e, log);
    it_env_free(e);
    assert_true(sink > 0);
    assert_int_equal(0, it_wait_tcp(port, 5000));
    snprintf(hook, 96, "SECKILL_SMS_WEBHOOK=http://127.0.0.1:%u/sms",
             (unsigned)port);
    return sink;
}

/* POST /api/auth/code for phone from a new address, solving the proof of
 * work the 403 asks for: the status, the challenge's maxnumber into
 * *maxnumber, the error code (or "") into code, Retry-After into *ra. */
static long ask_solved(const struct it_server *srv, const char *phone,
                       long *maxnumber, char code[24], long *ra)
{
    char body[64], hdr[POW_SOLUTION_MAX + 32], *chal, *sol = NULL;
    struct it_req req = {.method = "POST", .path = "/api/auth/code"};
    const json_t *err;
    struct it_resp resp;
    long st;

    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    code[0] = '\0';
    *maxnumber = 0;
    st = post(srv, "/api/auth/code", body, NULL, &resp);
    if (st != 403) {
        err = json_object_get(resp.json, "error");
        if (err)
            snprintf(code, 24, "%s", it_json_str(err, "code"));
        it_resp_free(&resp);
        return st;
    }
    err = json_object_get(json_object_get(resp.json, "error"), "details");
    *maxnumber = (long)json_integer_value(json_object_get(err, "maxnumber"));
    chal = json_dumps(err, JSON_COMPACT);
    it_resp_free(&resp);
    assert_int_equal(0, pow_solve(chal, &sol));
    free(chal);
    snprintf(hdr, sizeof(hdr), "Seckill-PoW: %s", sol);
    free(sol);
    {
        char xff[64], buf[32];
        const char *hdrs[] = {hdr, xff, NULL};

        snprintf(xff, sizeof(xff), "X-Forwarded-For: %s", addr_of(NULL, buf));
        req.body = body;
        req.headers = hdrs;
        st = it_http_do(srv, &req, &resp);
    }
    err = json_object_get(resp.json, "error");
    if (err)
        snprintf(code, 24, "%s", it_json_str(err, "code"));
    if (ra)
        *ra = strtol(resp.retry_after, NULL, 10);
    it_resp_free(&resp);
    return st;
}

/*
 * SMS pumping: codes asked for random numbers, each behind its proof of
 * work, as fast as they are answered. Codes go to the listed calling
 * codes only (SECKILL_SMS_REGIONS; elsewhere 400 and no SMS); each has a
 * budget a minute (SECKILL_SMS_PER_MIN, here 20), past which 429
 * SMS_BUDGET with Retry-After; and its proof of work grows from half the
 * budget on, up to ten times the setting.
 */
static void test_sms_pumping(void **state)
{
    struct it_server srv;
    char sink_log[IT_PATH_MAX], hook[96], phone[24], code[24];
    const char *env[] = {"SECKILL_DEV=0",
                         hook,
                         "SECKILL_SMS_SECRET=" SMS_SECRET,
                         "SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                         "SECKILL_RATE_IP",
                         "SECKILL_POW_MAXNUMBER=1000",
                         "SECKILL_SMS_PER_MIN=20",
                         "SECKILL_SMS_REGIONS=86,852",
                         "SECKILL_CODE_INTERVAL_S=0",
                         NULL};
    long st, max, first_max = 0, top_max = 0, ra = 0;
    int sent = 0, budget = 0;
    pid_t sink;
    char *log;
    int status;

    (void)state;
    sink = sink_start("sms-pump-sink.log", hook, sink_log);
    /* +852 is this test's alone: its budget starts empty. */
    redis_int("DEL %s", "sms:budget:852");
    assert_int_equal(0, it_server_start(&srv, "sms-pump", env));

    for (int i = 0; i < 30; i++) {
        snprintf(
            phone, sizeof(phone), "+8526%07u",
            (unsigned)((util_now_ms() * 7 + (unsigned)i * 7919u) % 10000000u));
        st = ask_solved(&srv, phone, &max, code, &ra);
        if (i == 0)
            first_max = max;
        if (max > top_max)
            top_max = max;
        if (st == 200) {
            sent++;
        } else {
            if (st != 429 || strcmp(code, "SMS_BUDGET") != 0)
                fail_msg("code %d for %s: %ld %s", i, phone, st, code);
            assert_true(ra >= 1 && ra <= 60);
            budget++;
        }
    }
    print_message("pumping +852: %d codes sent, %d refused over the budget; "
                  "the proof of work's maxnumber from %ld to %ld\n",
                  sent, budget, first_max, top_max);
    /* 20 in the minute (a run across a minute's end may see the last
     * one's weight fade by a code or two). */
    assert_true(sent >= 20 && sent <= 22);
    assert_int_equal(30 - sent, budget);
    assert_int_equal(1000, first_max);
    assert_true(top_max >= 5000 && top_max <= 10000);

    /* Another country: 400 before anything is stored or sent. */
    for (int i = 0; i < 5; i++) {
        struct it_resp resp;
        char body[64];

        snprintf(body, sizeof(body), "{\"phone\":\"+1202555%04d\"}", i);
        post(&srv, "/api/auth/code", body, NULL, &resp);
        it_assert_error(&resp, 400, "BAD_REQUEST");
        assert_non_null(strstr(resp.body, "+86, +852"));
        it_resp_free(&resp);
    }
    it_server_stop(&srv);
    kill(sink, SIGTERM);
    assert_int_equal(0, it_wait_exit(sink, 5000, &status));
    log = it_file_read(sink_log);
    assert_non_null(log);
    assert_non_null(strstr(log, "to +852"));
    assert_null(strstr(log, "to +1"));
    free(log);
}

/* Without dev mode the code goes to the SMS webhook, signed, and never
 * into the answer; `seckilld sms-sink` receives it and the buyer logs in
 * with it. A webhook that refuses (a wrong signature here) is a 503 with
 * Retry-After, and the code is neither kept nor counted. Without dev mode
 * and without a webhook the service does not start. */
static void test_sms_webhook(void **state)
{
    struct it_server sms[2];
    char sink_log[IT_PATH_MAX], hook[96], phone[24], code[8], body[96], key[96];
    const char *env_ok[] = {"SECKILL_DEV=0",
                            hook,
                            "SECKILL_SMS_SECRET=" SMS_SECRET,
                            "SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                            "SECKILL_RATE_IP",
                            NULL};
    const char *env_bad[] = {"SECKILL_DEV=0",
                             hook,
                             "SECKILL_SMS_SECRET=" OTHER_SECRET,
                             "SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                             "SECKILL_RATE_IP",
                             NULL};
    struct it_resp resp;
    pid_t sink;
    char *log;
    int st;

    (void)state;
    sink = sink_start("sms-sink.log", hook, sink_log);
    assert_int_equal(0, it_server_start(&sms[0], "sms-ok", env_ok));
    assert_int_equal(0, it_server_start(&sms[1], "sms-bad", env_bad));

    /* Sent, and not in the answer; the code logs in. */
    fresh_phone(phone);
    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    post(&sms[0], "/api/auth/code", body, NULL, &resp);
    it_assert_status(&resp, 200);
    assert_null(json_object_get(resp.json, "code"));
    it_resp_free(&resp);
    assert_true(sink_code(sink_log, phone, code));
    assert_int_equal(200, try_code(&sms[0], phone, code, NULL, NULL));

    /* Refused by the webhook: 503, nothing kept, and the buyer may ask
     * again at once (the minute's limit did not count it). */
    fresh_phone(phone);
    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", phone);
    for (int i = 0; i < 2; i++) {
        post(&sms[1], "/api/auth/code", body, NULL, &resp);
        it_assert_error(&resp, 503, "UNAVAILABLE");
        assert_string_equal("5", resp.retry_after);
        it_resp_free(&resp);
    }
    assert_int_equal(0, redis_int("ZCARD login:{p:%s}:codes", phone));
    assert_int_equal(0, redis_int("ZCARD login:{p:%s}:sent", phone));
    log = it_file_read(sink_log);
    assert_non_null(strstr(log, "refused: X-Signature missing or wrong"));
    assert_null(strstr(log, phone));
    free(log);
    snprintf(key, sizeof(key), "%s", phone);
    /* The same phone through the right key: a code at once. */
    post(&sms[0], "/api/auth/code", body, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
    assert_true(sink_code(sink_log, key, code));

    it_server_stop(&sms[0]);
    it_server_stop(&sms[1]);
    kill(sink, SIGTERM);
    assert_int_equal(0, it_wait_exit(sink, 5000, &st));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* Neither dev mode nor a webhook: one line naming it, exit 2. */
    {
        const char *env_none[] = {"SECKILL_DEV=0", "SECKILL_SMS_WEBHOOK", NULL};
        char *argv[] = {(char *)it_bin(), NULL}, path[IT_PATH_MAX], **env;
        pid_t p;

        snprintf(path, sizeof(path), "%s/sms-none.log", it_log_dir());
        unlink(path);
        env = it_env_build(env_none);
        p = it_spawn(argv, env, path);
        it_env_free(env);
        assert_int_equal(0, it_wait_exit(p, 5000, &st));
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        log = it_file_read(path);
        assert_non_null(strstr(log, "SECKILL_SMS_WEBHOOK: must be set"));
        free(log);
    }
}

/* A listening socket on a free loopback port that never accepts: the
 * kernel completes connections to it and nothing ever answers them (a
 * hung webhook). Closing it resets them. */
static int hung_listener(uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(0, bind(fd, (struct sockaddr *)&a, sizeof(a)));
    assert_int_equal(0, listen(fd, 1024));
    assert_int_equal(0, getsockname(fd, (struct sockaddr *)&a, &len));
    *port = ntohs(a.sin_port);
    return fd;
}

/* Drive m for about ms (its requests go out; answers are read). */
static void multi_drive(CURLM *m, int ms)
{
    int64_t until = util_mono_ms() + ms;
    int running;

    do {
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 20, NULL);
    } while (running && util_mono_ms() < until);
}

/* One request of the probe against srv: its status, and the time it took
 * into *ms. */
static long probe(const struct it_server *srv, const char *method,
                  const char *path, const char *token, double *ms)
{
    struct it_req req = {.method = method, .path = path, .token = token};
    struct it_resp resp;
    long status = it_http_do(srv, &req, &resp);

    *ms = resp.elapsed_ms;
    if (*ms >= 1000)
        print_error("%s %s took %.0f ms (%ld)\n", method, path, *ms, status);
    it_resp_free(&resp);
    return status;
}

/* A webhook that hangs holds the code requests sent to it, and nothing
 * else: while 64 wait for it (4 s each, then 503 with the code taken
 * back), voucher reads, My orders, purchases and the readiness probe of
 * the same instance answer at once. Past the SMS queue's bound a code
 * request is refused at once. */
static void test_sms_webhook_hangs(void **state)
{
    enum { CODES = 64 };
    uint16_t hook_port;
    int hook_fd = hung_listener(&hook_port);
    char hook[96], tok[TOKEN_STR_LEN], path[96], phones[CODES][24],
        bodies[CODES][64], xff[CODES][48];
    const char *env[] = {"SECKILL_DEV=0",
                         hook,
                         "SECKILL_SMS_SECRET=" SMS_SECRET,
                         "SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                         "SECKILL_RATE_IP",
                         "SECKILL_RATE_USER",
                         NULL};
    struct it_req reqs[CODES];
    struct it_resp resps[CODES];
    CURL *easy[CODES];
    struct it_server srv;
    int64_t vid, start;
    CURLM *m;
    int running;

    (void)state;
    snprintf(hook, sizeof(hook), "SECKILL_SMS_WEBHOOK=http://127.0.0.1:%u/sms",
             (unsigned)hook_port);
    assert_int_equal(0, it_server_start(&srv, "sms-hung", env));
    vid = it_seckill_create(&srv, 1, 1000, -1, 3600);
    m = curl_multi_init();
    start = util_mono_ms();
    for (int i = 0; i < CODES; i++) {
        fresh_phone(phones[i]);
        snprintf(bodies[i], sizeof(bodies[i]), "{\"phone\":\"%.23s\"}",
                 phones[i]);
        snprintf(xff[i], sizeof(xff[i]), "X-Forwarded-For: 10.9.%d.%d", i / 200,
                 i % 200 + 1);
        reqs[i] = (struct it_req){.method = "POST",
                                  .path = "/api/auth/code",
                                  .body = bodies[i],
                                  .header = xff[i]};
        easy[i] = it_http_prepare(&srv, &reqs[i], &resps[i]);
        curl_multi_add_handle(m, easy[i]);
    }
    multi_drive(m, 500);

    /* Meanwhile, the other routes of the pool and the purchase. */
    for (int round = 0; round < 4; round++) {
        int64_t user = 7700000 + it_unique();
        double ms;

        it_token(user, TOKEN_ROLE_USER, 600, tok);
        snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)vid);
        assert_int_equal(200, probe(&srv, "GET", path, NULL, &ms));
        assert_true(ms < 1000);
        assert_int_equal(200, probe(&srv, "GET", "/api/orders", tok, &ms));
        assert_true(ms < 1000);
        snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
                 (long long)vid);
        assert_int_equal(201, probe(&srv, "POST", path, tok, &ms));
        assert_true(ms < 1000);
        assert_int_equal(200, probe(&srv, "GET", "/readyz", NULL, &ms));
        assert_true(ms < 1000);
        multi_drive(m, 400);
    }
    /* The codes: 503 once the deadline passed, and taken back. */
    do {
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 100, NULL);
    } while (running && util_mono_ms() - start < 20000);
    {
        CURLMsg *msg;
        int left;

        /* A message is its handle's: read it before the handle goes. */
        while ((msg = curl_multi_info_read(m, &left))) {
            CURL *h = msg->easy_handle;
            CURLcode rc = msg->data.result;

            if (msg->msg != CURLMSG_DONE)
                continue;
            for (int k = 0; k < CODES; k++)
                if (h == easy[k]) {
                    curl_multi_remove_handle(m, h);
                    it_http_complete(h, rc, &resps[k]);
                    easy[k] = NULL;
                    break;
                }
        }
    }
    /* Reached and never answered: the code may have arrived, so it is
     * kept and counts against the phone's limits (a slow webhook must
     * not let anyone send a phone code after code). */
    for (int i = 0; i < CODES; i++) {
        assert_null(easy[i]);
        it_assert_error(&resps[i], 503, "UNAVAILABLE");
        assert_non_null(strstr(resps[i].body, "may have been sent"));
        assert_true(resps[i].elapsed_ms >= 3500 && resps[i].elapsed_ms < 10000);
        assert_true(atoi(resps[i].retry_after) >= 10);
        assert_int_equal(1, redis_int("ZCARD login:{p:%s}:codes", phones[i]));
        it_resp_free(&resps[i]);
    }
    curl_multi_cleanup(m);
    {
        struct it_resp again;

        post(&srv, "/api/auth/code", bodies[0], "10.9.0.1", &again);
        it_assert_error(&again, 429, "RATE_LIMITED");
        it_resp_free(&again);
    }
    assert_int_equal(0, it_server_stop(&srv));

    /* A queue of 4: the 5th and 6th are refused at once. */
    {
        const char *env4[] = {"SECKILL_DEV=0",
                              hook,
                              "SECKILL_SMS_SECRET=" SMS_SECRET,
                              "SECKILL_SMS_QUEUE_MAX=4",
                              "SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                              "SECKILL_RATE_IP",
                              NULL};
        const struct it_server *to[6];
        unsigned quick = 0, late = 0;

        assert_int_equal(0, it_server_start(&srv, "sms-queue4", env4));
        for (int i = 0; i < 6; i++) {
            fresh_phone(phones[i]);
            snprintf(bodies[i], sizeof(bodies[i]), "{\"phone\":\"%.23s\"}",
                     phones[i]);
            reqs[i] = (struct it_req){.method = "POST",
                                      .path = "/api/auth/code",
                                      .body = bodies[i],
                                      .header = xff[i]};
            to[i] = &srv;
        }
        it_http_run_all(reqs, to, resps, 6);
        for (int i = 0; i < 6; i++) {
            it_assert_error(&resps[i], 503, "UNAVAILABLE");
            if (resps[i].elapsed_ms < 2000) {
                quick++;
                assert_string_equal("2", resps[i].retry_after);
                assert_int_equal(
                    0, redis_int("ZCARD login:{p:%s}:codes", phones[i]));
            } else {
                late++;
                assert_true(atoi(resps[i].retry_after) >= 10);
            }
            it_resp_free(&resps[i]);
        }
        assert_int_equal(2, quick);
        assert_int_equal(4, late);
        /* One address has at most 4 codes on their way: its 5th and 6th
         * are 429 at once, nothing kept. */
        for (int i = 0; i < 6; i++) {
            fresh_phone(phones[i]);
            snprintf(bodies[i], sizeof(bodies[i]), "{\"phone\":\"%.23s\"}",
                     phones[i]);
            reqs[i].header = xff[0];
        }
        it_http_run_all(reqs, to, resps, 6);
        quick = late = 0;
        for (int i = 0; i < 6; i++) {
            if (resps[i].status == 429) {
                quick++;
                it_assert_error(&resps[i], 429, "RATE_LIMITED");
                assert_int_equal(
                    0, redis_int("ZCARD login:{p:%s}:codes", phones[i]));
            } else {
                late++;
                it_assert_error(&resps[i], 503, "UNAVAILABLE");
            }
            it_resp_free(&resps[i]);
        }
        assert_int_equal(2, quick);
        assert_int_equal(4, late);
        /* A code on its way when the instance stops: answered 503; it
         * reached the webhook, so it may arrive and is kept. */
        {
            CURL *h;
            CURLMsg *msg;
            int left;

            fresh_phone(phones[0]);
            snprintf(bodies[0], sizeof(bodies[0]), "{\"phone\":\"%.23s\"}",
                     phones[0]);
            reqs[0] = (struct it_req){.method = "POST",
                                      .path = "/api/auth/code",
                                      .body = bodies[0],
                                      .header = xff[0]};
            m = curl_multi_init();
            h = it_http_prepare(&srv, &reqs[0], &resps[0]);
            curl_multi_add_handle(m, h);
            multi_drive(m, 500);
            assert_int_equal(0, it_server_stop(&srv));
            multi_drive(m, 5000);
            msg = curl_multi_info_read(m, &left);
            assert_non_null(msg);
            CURLcode rc = msg->data.result;
            curl_multi_remove_handle(m, h);
            it_http_complete(h, rc, &resps[0]);
            curl_multi_cleanup(m);
            it_assert_error(&resps[0], 503, "UNAVAILABLE");
            assert_non_null(strstr(resps[0].body, "may have been sent"));
            it_resp_free(&resps[0]);
            assert_int_equal(1,
                             redis_int("ZCARD login:{p:%s}:codes", phones[0]));
        }
    }
    close(hook_fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_code_interval),
        cmocka_unit_test(test_codes_per_hour),
        cmocka_unit_test(test_owner_logs_in_through_guessing),
        cmocka_unit_test(test_code_request_tries),
        cmocka_unit_test(test_code_not_voided_by_new_code),
        cmocka_unit_test(test_wrong_tries_slow_address_first),
        cmocka_unit_test(test_wrong_tries_never_void),
        cmocka_unit_test(test_users_normalize),
        cmocka_unit_test(test_sms_webhook),
        cmocka_unit_test(test_sms_webhook_hangs),
        cmocka_unit_test(test_sms_pumping),
    };
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
