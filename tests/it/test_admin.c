/*
 * test_admin.c - admin accounts: `seckilld admin add` with the password
 * on standard input, POST /api/admin/login, its failures counted per name
 * and per client address (refused before any password is checked, and
 * logged without the password), an admin token that is never a
 * buyer's, and the audit log of what admins do. The instance trusts loopback as
 * a proxy, so that X-Forwarded-For can stand for many client addresses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "tests/it/harness.h"

#define PASSWORD "correct horse battery staple"

static struct it_server srv;
static char name[40], name2[40];
static int64_t admin_id;
static unsigned next_addr;

/* `seckilld admin add --username user` with password on its standard
 * input: its exit status. */
static int admin_add(const char *user, const char *password)
{
    char cmd[512];
    int st;

    snprintf(cmd, sizeof(cmd),
             "printf '%%s\\n' '%s' | '%s' admin add --username '%s' "
             ">/dev/null 2>&1",
             password, it_bin(), user);
    st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int group_setup(void **state)
{
    const char *env[] = {"SECKILL_TRUSTED_PROXIES=127.0.0.0/8",
                         "SECKILL_RATE_IP", "SECKILL_RATE_USER", NULL};
    int64_t t = util_now_ms() % 1000000000;

    (void)state;
    it_init();
    snprintf(name, sizeof(name), "ops-%lld", (long long)t);
    /* Client addresses of this run (failures are counted per address in
     * the shared Redis for 15 minutes). */
    next_addr = (unsigned)(t / 1000 % 200) * 250;
    snprintf(name2, sizeof(name2), "ops2-%lld", (long long)t);
    if (admin_add(name, PASSWORD) != 0 || admin_add(name2, PASSWORD) != 0) {
        fprintf(stderr, "admin: seckilld admin add failed\n");
        return -1;
    }
    admin_id =
        it_sql_scalar("SELECT id FROM admins WHERE username = '%s'", name);
    return it_server_start(&srv, "admin", env);
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* POST /api/admin/login as user with password from the client address
 * 10.20.x.y (a new one unless addr is given). */
static long login(const char *user, const char *password, const char *addr,
                  struct it_resp *resp)
{
    char body[256], xff[64], own[32];
    struct it_req req = {.method = "POST", .path = "/api/admin/login"};

    if (!addr) {
        next_addr++;
        snprintf(own, sizeof(own), "10.20.%u.%u", next_addr / 250,
                 next_addr % 250 + 1);
        addr = own;
    }
    snprintf(body, sizeof(body), "{\"username\":\"%s\",\"password\":\"%s\"}",
             user, password);
    snprintf(xff, sizeof(xff), "X-Forwarded-For: %s", addr);
    req.body = body;
    req.header = xff;
    return it_http_do(&srv, &req, resp);
}

/* The right pair: a token of an hour for the admin's id, good for an
 * admin's work. */
static void test_login_right(void **state)
{
    struct it_resp resp;
    char tok[TOKEN_STR_LEN], body[256];
    const json_t *admin;

    (void)state;
    login(name, PASSWORD, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(tok, sizeof(tok), "%s", it_json_str(resp.json, "token"));
    assert_int_equal(83, strlen(tok));
    assert_int_equal(
        3600, json_integer_value(json_object_get(resp.json, "expiresIn")));
    admin = json_object_get(resp.json, "admin");
    assert_int_equal(admin_id, it_json_id(admin, "id"));
    assert_string_equal(name, it_json_str(admin, "username"));
    it_resp_free(&resp);
    snprintf(body, sizeof(body),
             "{\"shopId\":%lld,\"title\":\"by a named admin\",\"payValue\":1,"
             "\"actualValue\":2}",
             (long long)it_unique());
    it_http(&srv, "POST", "/api/vouchers", body, tok, &resp);
    it_assert_status(&resp, 201);
    it_resp_free(&resp);
}

/* A wrong password and an unknown name look the same; the log names the
 * failure, never the password. */
static void test_login_wrong(void **state)
{
    struct it_resp r1, r2;
    const char *m1, *m2;
    char *log = NULL;
    FILE *f;
    long n;

    (void)state;
    login(name2, "wrong password here", NULL, &r1);
    it_assert_error(&r1, 401, "UNAUTHORIZED");
    login("nobody-by-this-name", "wrong password here", NULL, &r2);
    it_assert_error(&r2, 401, "UNAUTHORIZED");
    m1 = it_json_str(json_object_get(r1.json, "error"), "message");
    m2 = it_json_str(json_object_get(r2.json, "error"), "message");
    assert_string_equal(m1, m2);
    it_resp_free(&r1);
    it_resp_free(&r2);
    /* A name that no admin can have: 400. */
    login("bad name", "whatever it is", NULL, &r1);
    it_assert_error(&r1, 400, "BAD_REQUEST");
    it_resp_free(&r1);

    f = fopen(srv.log_path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    log = calloc(1, (size_t)n + 1);
    assert_int_equal((size_t)n, fread(log, 1, (size_t)n, f));
    fclose(f);
    assert_non_null(strstr(log, "admin login failed"));
    assert_non_null(strstr(log, "username=nobody-by-this-name"));
    assert_null(strstr(log, "wrong password here"));
    assert_null(strstr(log, PASSWORD));
    free(log);
}

/* A made-up address of this run in 10.a.x.y (the counts live 15 minutes
 * in the shared Redis, and the suite runs twice). */
static void run_addr(char *out, size_t n, unsigned a, unsigned i)
{
    unsigned r = (unsigned)(util_now_ms() / 1000 % 200) * 250 + i;

    snprintf(out, n, "10.%u.%u.%u", a, r / 250, r % 250 + 1);
}

/* Five failures for a name from one address lock the name there, even
 * against the right password, with a Retry-After of up to 15 minutes; the
 * admin elsewhere still logs in. Forty-nine from twenty addresses leave
 * the name open; fifty lock it everywhere. Twenty from one address lock
 * that address for every name. */
static void test_login_throttled(void **state)
{
    char user[40], other[64], guesser[32], addr[32];
    struct it_resp resp;
    long ra;

    (void)state;
    snprintf(user, sizeof(user), "lock-%lld",
             (long long)(util_now_ms() % 1000000000));
    assert_int_equal(0, admin_add(user, PASSWORD));
    run_addr(guesser, sizeof(guesser), 97, 0);
    for (int i = 0; i < 5; i++) {
        login(user, "not the password", guesser, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
    }
    login(user, "not the password", guesser, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    ra = strtol(resp.retry_after, NULL, 10);
    assert_true(ra > 800 && ra <= 900);
    it_resp_free(&resp);
    login(user, PASSWORD, guesser, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    it_resp_free(&resp);
    /* From the admin's own address: in. */
    login(user, PASSWORD, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);

    /* The name's slower line: 49 from 20 addresses (at most 3 each), and
     * the right password from another is still let in; 50, and it is
     * not. */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 49 + round; i++) {
            run_addr(addr, sizeof(addr), 96 - round, (unsigned)(i % 20));
            login(user, "not the password", addr, &resp);
            it_assert_error(&resp, 401, "UNAUTHORIZED");
            it_resp_free(&resp);
        }
        login(user, PASSWORD, NULL, &resp);
        if (round == 0) {
            it_assert_status(&resp, 200);
        } else {
            it_assert_error(&resp, 429, "RATE_LIMITED");
        }
        it_resp_free(&resp);
    }
    /* The other admin is not locked. */
    login(name, PASSWORD, NULL, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);

    /* One address, many names. */
    run_addr(guesser, sizeof(guesser), 99, 0);
    for (int i = 0; i < 20; i++) {
        snprintf(other, sizeof(other), "guess-%s-%d", user, i);
        login(other, "not the password", guesser, &resp);
        it_assert_error(&resp, 401, "UNAUTHORIZED");
        it_resp_free(&resp);
    }
    login(name, PASSWORD, guesser, &resp);
    it_assert_error(&resp, 429, "RATE_LIMITED");
    it_resp_free(&resp);
    login(name, PASSWORD, "10.98.0.2", &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* A connection of the flood (three for each of six addresses), logging
 * in as made-up names as fast as it is answered, until stop. */
struct flooder {
    char addr[32];
    atomic_bool *stop;
    unsigned sent, busy, locked;
};

static void *flood(void *arg)
{
    struct flooder *f = arg;

    while (!atomic_load(f->stop)) {
        char user[48];
        struct it_resp resp;

        snprintf(user, sizeof(user), "flood-%u", f->sent);
        login(user, "made up", f->addr, &resp);
        f->sent++;
        f->busy +=
            resp.status == 429 && resp.json &&
            strcmp(it_json_str(json_object_get(resp.json, "error"), "code"),
                   "BUSY") == 0;
        f->locked +=
            resp.status == 429 &&
            !(resp.json &&
              strcmp(it_json_str(json_object_get(resp.json, "error"), "code"),
                     "BUSY") == 0);
        it_resp_free(&resp);
    }
    return NULL;
}

/*
 * A flood of logins for made-up names from six addresses, three
 * connections each, cannot keep the admin out: from a seventh, the admin
 * logs in within three tries (a second apart) while the flood goes on.
 * Each address waits for the hash in turn; the flood's extra requests
 * are refused busy, which counts against their addresses.
 */
static void test_login_flood(void **state)
{
    struct flooder f[18];
    pthread_t th[18];
    atomic_bool stop = false;
    struct it_resp resp;
    char me[32];
    int tries = 0;
    long st = 0;

    (void)state;
    for (int i = 0; i < 18; i++) {
        memset(&f[i], 0, sizeof(f[i]));
        run_addr(f[i].addr, sizeof(f[i].addr), 95, (unsigned)(i % 6));
        f[i].stop = &stop;
        assert_int_equal(0, pthread_create(&th[i], NULL, flood, &f[i]));
    }
    usleep(500 * 1000);
    run_addr(me, sizeof(me), 95, 100);
    while (tries < 3 && st != 200) {
        if (tries)
            usleep(1000 * 1000);
        st = login(name, PASSWORD, me, &resp);
        tries++;
        if (st != 200)
            print_message("the admin's try %d: %ld %s\n", tries, st,
                          resp.body ? resp.body : "");
        it_resp_free(&resp);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 18; i++) {
        pthread_join(th[i], NULL);
        print_message("flood from %s: %u sent, %u busy, %u locked out\n",
                      f[i].addr, f[i].sent, f[i].busy, f[i].locked);
    }
    assert_int_equal(200, st);
}

/*
 * A flood that fills the queue of logins waiting for a turn (70
 * addresses, more than its 64 places) does not keep the admin out: once
 * the flood's addresses have failures, one of them gives its place up to
 * the admin's address, which has none. A refusal for the full queue is
 * never counted against the admin's address (only an address's own
 * second login is), so the admin logs in from it afterwards too.
 */
static void test_login_queue_full(void **state)
{
    struct flooder f[70];
    pthread_t th[70];
    atomic_bool stop = false;
    struct it_resp resp;
    char me[32], key[64];
    int busy = 0;

    (void)state;
    run_addr(me, sizeof(me), 94, 200);
    for (int i = 0; i < 70; i++) {
        memset(&f[i], 0, sizeof(f[i]));
        run_addr(f[i].addr, sizeof(f[i].addr), 94, (unsigned)i);
        f[i].stop = &stop;
        assert_int_equal(0, pthread_create(&th[i], NULL, flood, &f[i]));
    }
    usleep(500 * 1000);
    for (int i = 0; i < 25; i++) {
        long st = login(name, PASSWORD, me, &resp);

        busy += st == 429;
        it_resp_free(&resp);
        usleep(100 * 1000);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 70; i++)
        pthread_join(th[i], NULL);
    print_message("the admin, during a flood from 70 addresses: 25 tries, %d "
                  "refused busy\n",
                  busy);
    /* Past the flood's first tries its addresses have failures, and
     * give their places up to the admin's, which has none. */
    assert_true(busy < 25);
    snprintf(key, sizeof(key), "admin:fails:ip:%s", me);
    assert_int_equal(0, it_redis_int(-1, "ZCARD %s", key));
    login(name, PASSWORD, me, &resp);
    it_assert_status(&resp, 200);
    it_resp_free(&resp);
}

/* An admin's id is not a buyer's: its token cannot buy, list or pay as
 * one; it logs out like any token. */
static void test_admin_token(void **state)
{
    struct it_resp resp;
    char tok[TOKEN_STR_LEN], path[80];
    int64_t v;

    (void)state;
    login(name, PASSWORD, NULL, &resp);
    it_assert_status(&resp, 200);
    snprintf(tok, sizeof(tok), "%s", it_json_str(resp.json, "token"));
    it_resp_free(&resp);
    v = it_seckill_create(&srv, it_unique(), 5, -60, 3600);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill", (long long)v);
    it_http(&srv, "POST", path, NULL, tok, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    it_http(&srv, "GET", "/api/orders", NULL, tok, &resp);
    it_assert_error(&resp, 403, "FORBIDDEN");
    it_resp_free(&resp);
    assert_int_equal(0, it_sql_order_count(v));
    it_http(&srv, "POST", "/api/auth/logout", NULL, tok, &resp);
    it_assert_status(&resp, 204);
    it_resp_free(&resp);
    it_http(&srv, "GET", "/api/admin/metrics", NULL, tok, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
}

/* A request as the admin with token tok from the client address addr. */
static long as_admin(const char *method, const char *path, const char *body,
                     const char *tok, const char *addr, struct it_resp *resp)
{
    char xff[64];
    struct it_req req = {
        .method = method, .path = path, .body = body, .token = tok};

    snprintf(xff, sizeof(xff), "X-Forwarded-For: %s", addr);
    req.header = xff;
    return it_http_do(&srv, &req, resp);
}

/* How many audit records match the SQL condition cond. */
static int64_t audit_count(const char *cond)
{
    return it_sql_scalar("SELECT COUNT(*) FROM audit_log WHERE %s", cond);
}

/*
 * A client's own X-Forwarded-For as long as the instance's old 2 KiB
 * copy of the chain, ending in a made-up address, and the line a proxy
 * appends behind it: the audit records the proxy's line, the client the
 * proxy saw, never the made-up address.
 */
static void test_audit_forwarded_chain(void **state)
{
    char tok[TOKEN_STR_LEN], cond[256], body[160];
    char *forged = it_forged_xff("203.0.113.77");
    const char *hdrs[] = {forged, "X-Forwarded-For: 198.51.100.9", NULL};
    struct it_req req = {.method = "POST", .path = "/api/vouchers"};
    struct it_resp resp;
    int64_t v;

    (void)state;
    login(name, PASSWORD, "10.21.0.7", &resp);
    it_assert_status(&resp, 200);
    snprintf(tok, sizeof(tok), "%s", it_json_str(resp.json, "token"));
    it_resp_free(&resp);
    snprintf(body, sizeof(body),
             "{\"shopId\":%lld,\"title\":\"forwarded\",\"payValue\":3,"
             "\"actualValue\":9}",
             (long long)it_unique());
    req.body = body;
    req.token = tok;
    req.headers = hdrs;
    it_http_do(&srv, &req, &resp);
    it_assert_status(&resp, 201);
    v = it_json_id(resp.json, "id");
    it_resp_free(&resp);
    snprintf(cond, sizeof(cond),
             "action = 'voucher.create' AND target_id = %lld AND addr = "
             "'198.51.100.9'",
             (long long)v);
    if (audit_count(cond) != 1)
        fail_msg("the audit of voucher %lld names another address",
                 (long long)v);
    free(forged);
}

/* Every admin action is in the audit log, with the admin, the client's
 * address (the one X-Forwarded-For names behind a trusted proxy) and the
 * change; a refused change writes no record; GET /api/audit pages it. */
static void test_audit(void **state)
{
    char tok[TOKEN_STR_LEN], cond[512], path[128], body[256];
    struct it_resp resp;
    int64_t v, buyer = it_unique() % 1000000000 + 1, admin2, before;
    const json_t *items, *it, *target;

    (void)state;
    login(name, PASSWORD, "10.21.0.7", &resp);
    it_assert_status(&resp, 200);
    snprintf(tok, sizeof(tok), "%s", it_json_str(resp.json, "token"));
    it_resp_free(&resp);
    snprintf(cond, sizeof(cond),
             "action = 'admin.login' AND admin_id = %lld AND target_id = %lld "
             "AND addr = '10.21.0.7'",
             (long long)admin_id, (long long)admin_id);
    assert_int_equal(1, audit_count(cond));

    /* A voucher made, with what it was made with. */
    snprintf(body, sizeof(body),
             "{\"shopId\":%lld,\"title\":\"audited\",\"payValue\":3,"
             "\"actualValue\":9}",
             (long long)it_unique());
    as_admin("POST", "/api/vouchers", body, tok, "10.21.0.8", &resp);
    it_assert_status(&resp, 201);
    v = it_json_id(resp.json, "id");
    it_resp_free(&resp);
    snprintf(cond, sizeof(cond),
             "action = 'voucher.create' AND target_type = 'voucher' AND "
             "target_id = %lld AND admin_id = %lld AND addr = '10.21.0.8' AND "
             "JSON_VALUE(change_json, '$.title') = 'audited' AND "
             "JSON_VALUE(change_json, '$.payValue') = 3",
             (long long)v, (long long)admin_id);
    assert_int_equal(1, audit_count(cond));
    /* Refused: nothing made, nothing recorded. */
    before = audit_count("1");
    as_admin("POST", "/api/vouchers", "{\"shopId\":1,\"title\":\"x\"}", tok,
             "10.21.0.8", &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
    assert_int_equal(before, audit_count("1"));

    /* A ban and its end. */
    snprintf(path, sizeof(path), "/api/admin/users/%lld/ban", (long long)buyer);
    as_admin("POST", path, NULL, tok, "2001:db8::5", &resp);
    it_assert_status(&resp, 204);
    it_resp_free(&resp);
    as_admin("DELETE", path, NULL, tok, "2001:db8::5", &resp);
    it_assert_status(&resp, 204);
    it_resp_free(&resp);
    snprintf(cond, sizeof(cond),
             "target_type = 'user' AND target_id = %lld AND admin_id = %lld "
             "AND addr = '2001:db8::5' AND action IN ('user.ban', "
             "'user.unban')",
             (long long)buyer, (long long)admin_id);
    assert_int_equal(2, audit_count(cond));

    /* A wrong password for an existing admin: by nobody, about it. */
    admin2 =
        it_sql_scalar("SELECT id FROM admins WHERE username = '%s'", name2);
    login(name2, "not the password at all", "10.21.0.9", &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
    snprintf(cond, sizeof(cond),
             "action = 'admin.login_failed' AND admin_id IS NULL AND "
             "target_id = %lld AND addr = '10.21.0.9' AND "
             "JSON_VALUE(change_json, '$.why') = 'password'",
             (long long)admin2);
    assert_int_equal(1, audit_count(cond));

    /* Read back: the voucher's record, newest first, by target. */
    snprintf(path, sizeof(path), "/api/audit?targetType=voucher&targetId=%lld",
             (long long)v);
    it_http(&srv, "GET", path, NULL, tok, &resp);
    it_assert_status(&resp, 200);
    items = json_object_get(resp.json, "items");
    assert_int_equal(1, json_array_size(items));
    it = json_array_get(items, 0);
    assert_string_equal("voucher.create", it_json_str(it, "action"));
    assert_string_equal("10.21.0.8", it_json_str(it, "address"));
    assert_string_equal(name,
                        it_json_str(json_object_get(it, "admin"), "username"));
    target = json_object_get(it, "target");
    assert_string_equal("voucher", it_json_str(target, "type"));
    assert_int_equal(v, it_json_id(target, "id"));
    assert_string_equal("audited",
                        it_json_str(json_object_get(it, "change"), "title"));
    assert_true(json_is_null(json_object_get(resp.json, "nextCursor")));
    it_resp_free(&resp);

    /* Pages: the two ban records, one a page, newest first. */
    snprintf(path, sizeof(path),
             "/api/audit?targetType=user&targetId=%lld&limit=1",
             (long long)buyer);
    it_http(&srv, "GET", path, NULL, tok, &resp);
    it_assert_status(&resp, 200);
    items = json_object_get(resp.json, "items");
    assert_int_equal(1, json_array_size(items));
    assert_string_equal("user.unban",
                        it_json_str(json_array_get(items, 0), "action"));
    snprintf(path, sizeof(path),
             "/api/audit?targetType=user&targetId=%lld&limit=1&cursor=%s",
             (long long)buyer, it_json_str(resp.json, "nextCursor"));
    it_resp_free(&resp);
    it_http(&srv, "GET", path, NULL, tok, &resp);
    it_assert_status(&resp, 200);
    items = json_object_get(resp.json, "items");
    assert_int_equal(1, json_array_size(items));
    assert_string_equal("user.ban",
                        it_json_str(json_array_get(items, 0), "action"));
    it_resp_free(&resp);

    /* Admins only; bad filters are 400s. */
    it_http(&srv, "GET", "/api/audit", NULL, NULL, &resp);
    it_assert_error(&resp, 401, "UNAUTHORIZED");
    it_resp_free(&resp);
    {
        char buyer_tok[TOKEN_STR_LEN];

        it_token(buyer + 1, TOKEN_ROLE_USER, 3600, buyer_tok);
        it_http(&srv, "GET", "/api/audit", NULL, buyer_tok, &resp);
        it_assert_error(&resp, 403, "FORBIDDEN");
        it_resp_free(&resp);
    }
    it_http(&srv, "GET", "/api/audit?targetType=shop", NULL, tok, &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
    it_http(&srv, "GET", "/api/audit?targetId=5", NULL, tok, &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
    it_http(&srv, "GET", "/api/audit?cursor=abc", NULL, tok, &resp);
    it_assert_error(&resp, 400, "BAD_REQUEST");
    it_resp_free(&resp);
}

/* The command: a taken name exits 1, a short or missing password 2. */
static void test_cli(void **state)
{
    (void)state;
    assert_int_equal(1, admin_add(name, PASSWORD));
    assert_int_equal(2, admin_add("short-pw", "eleven char"));
    assert_int_equal(2, admin_add("empty-pw", ""));
    assert_int_equal(0, it_sql_scalar("SELECT COUNT(*) FROM admins WHERE "
                                      "username IN ('short-pw', 'empty-pw')"));
    assert_int_equal(1, it_sql_scalar("SELECT COUNT(*) FROM admins WHERE "
                                      "username = '%s' AND pw_hash LIKE "
                                      "'$argon2id$%%'",
                                      name));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_login_right),
        cmocka_unit_test(test_login_wrong),
        cmocka_unit_test(test_login_throttled),
        cmocka_unit_test(test_login_flood),
        cmocka_unit_test(test_login_queue_full),
        cmocka_unit_test(test_admin_token),
        cmocka_unit_test(test_audit),
        cmocka_unit_test(test_audit_forwarded_chain),
        cmocka_unit_test(test_cli),
    };
    return it_exit_status(
        cmocka_run_group_tests(tests, group_setup, group_teardown));
}
