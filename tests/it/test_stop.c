/*
 * test_stop.c - a stop under load is clean: SIGTERM while 64 keep-alive
 * clients keep sending purchases and voucher reads on their open
 * connections, right through the stop. libmicrohttpd's quiesce closes only
 * the listening socket, so those connections are still served while the
 * service stops; a request that arrives then must be answered from memory
 * that is still there (503, nothing written) or have its connection
 * closed. The process exits 0 with no sanitizer report in its log, every
 * request either got a whole answer or lost its connection, and MySQL
 * holds the order of every 201 (and no more orders than 201s plus the
 * purchases whose answer the closed connections took with them).
 *
 * Under the sanitizer build (make test runs this binary there too) the
 * service is the ASan binary, so a use after free during the stop is a
 * report in its log and a non-zero exit.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/it/harness.h"
#include "tests/it/keepalive.h"

#define USER_BASE 610000000000LL
#define CLIENTS 64
#define STOCK 1000000
/* The crowd runs this long before the SIGTERM, so that every client has
 * a request in flight and the engines are busy. */
#define WARM_MS 1500
/* After the SIGTERM: the service has this long to close every connection
 * (it exits within IT_STOP_TIMEOUT_MS). */
#define AFTER_MS 15000

static struct it_server srv;
static int64_t next_user;

static int group_setup(void **state)
{
    (void)state;
    it_init();
    next_user = USER_BASE + util_now_ms() % 100000000 * 100;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return it_group_teardown(&srv, 1);
}

/* What the crowd did; per connection, what it has in flight. */
struct crowd {
    int64_t voucher_id;
    bool purchase[CLIENTS]; /* the request in flight is a purchase */
    unsigned sent, answered;
    unsigned status[600];
    unsigned bad;             /* an answer that is not HTTP */
    unsigned closing;         /* answers that closed their connection */
    unsigned lost, lost_buys; /* requests the closed connections took */
    int64_t *created;         /* order ids of the 201s */
    size_t ncreated, cap;
};

/* A purchase by a fresh user and a read of the voucher in turn, on every
 * connection, for as long as the service serves it. */
static size_t crowd_next(void *ctx, size_t i, char *buf, size_t cap)
{
    struct crowd *cr = ctx;
    char tok[TOKEN_STR_LEN];
    int n;

    cr->purchase[i] = !cr->purchase[i];
    if (cr->purchase[i]) {
        it_token(next_user++, TOKEN_ROLE_USER, 3600, tok);
        n = snprintf(buf, cap,
                     "POST /api/vouchers/%lld/seckill HTTP/1.1\r\n"
                     "Host: t\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 0\r\n\r\n",
                     (long long)cr->voucher_id, tok);
    } else {
        n = snprintf(buf, cap,
                     "GET /api/vouchers/%lld HTTP/1.1\r\nHost: t\r\n\r\n",
                     (long long)cr->voucher_id);
    }
    assert_true(n > 0 && (size_t)n < cap);
    cr->sent++;
    return (size_t)n;
}

static void crowd_answer(void *ctx, size_t i, long status, const char *text,
                         size_t len)
{
    struct crowd *cr = ctx;
    (void)i;
    (void)len;

    cr->answered++;
    if (status < 100 || status >= 600) {
        cr->bad++;
        return;
    }
    cr->status[status]++;
    if (strcasestr(text, "\r\nConnection: close\r\n"))
        cr->closing++;
    if (status == 201) {
        json_t *j = json_loads(strstr(text, "\r\n\r\n") + 4, 0, NULL);
        const char *id = j ? it_json_str(j, "orderId") : NULL;

        assert_non_null(id);
        if (cr->ncreated == cr->cap)
            cr->created = xrealloc(cr->created, (cr->cap = cr->cap * 2 + 1024) *
                                                    sizeof(*cr->created));
        cr->created[cr->ncreated++] = strtoll(id, NULL, 10);
        json_decref(j);
    }
}

static void crowd_lost(void *ctx, size_t i)
{
    struct crowd *cr = ctx;

    cr->lost++;
    cr->lost_buys += cr->purchase[i];
}

/* Whether the service's log has a sanitizer report. */
static bool log_has_report(const char *path)
{
    static const char *const marks[] = {"AddressSanitizer", "LeakSanitizer",
                                        "runtime error:", "ThreadSanitizer"};
    char line[1024];
    bool found = false;
    FILE *f = fopen(path, "r");

    if (!f)
        return false;
    while (!found && fgets(line, sizeof(line), f))
        for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
            if (strstr(line, marks[i])) {
                fprintf(stderr, "%s: %s", path, line);
                found = true;
            }
    fclose(f);
    return found;
}

static void test_sigterm_keepalive_crowd(void **state)
{
    static const char *const env[] = {
        "SECKILL_RATE_USER=0", "SECKILL_RATE_IP=0", "SECKILL_DRAIN_S=0", NULL};
    static const struct it_ka_ops ops = {crowd_next, crowd_answer, crowd_lost};
    struct crowd cr = {0};
    struct it_ka *ka;
    size_t open;
    int64_t deadline, orders, missing;

    (void)state;
    assert_int_equal(0, it_server_start(&srv, "stop", env));
    cr.voucher_id = it_seckill_create(&srv, 1, STOCK, -60, 3600);
    /* Half start with a read, half with a purchase. */
    for (size_t i = 0; i < CLIENTS; i++)
        cr.purchase[i] = i % 2;
    ka = it_ka_open(srv.port, CLIENTS, &ops, &cr);
    deadline = util_mono_ms() + WARM_MS;
    while (util_mono_ms() < deadline)
        it_ka_step(ka, 50);
    assert_int_equal(0, kill(srv.pid, SIGTERM));
    deadline = util_mono_ms() + AFTER_MS;
    do
        open = it_ka_step(ka, 50);
    while (open && util_mono_ms() < deadline);
    it_ka_close(ka);

    print_message("      %u requests sent, %u answered (201: %u, 200: %u, "
                  "503: %u, 429: %u; %u with Connection: close), %u lost "
                  "with their connection (%u purchases), %zu connections "
                  "still open\n",
                  cr.sent, cr.answered, cr.status[201], cr.status[200],
                  cr.status[503], cr.status[429], cr.closing, cr.lost,
                  cr.lost_buys, open);
    /* Every connection ended: nothing hangs. */
    assert_int_equal(0, open);
    /* Exit status 0, and no report of the sanitizers. */
    assert_int_equal(0, it_server_stop(&srv));
    assert_false(log_has_report(srv.log_path));
    /* Every request answered in full, or taken by its connection. */
    assert_int_equal(0, cr.bad);
    assert_int_equal(cr.sent, cr.answered + cr.lost);
    /* What a request may be answered while the service stops. */
    assert_int_equal(cr.answered, cr.status[200] + cr.status[201] +
                                      cr.status[503] + cr.status[429]);
    assert_true(cr.status[201] > 0);
    /* MySQL: every 201 is an order; orders = initial - stock; no more
     * orders than 201s and the purchases that lost their answer. */
    missing = 0;
    for (size_t k = 0; k < cr.ncreated; k++)
        missing += it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                                 "WHERE id = %lld AND voucher_id = %lld",
                                 (long long)cr.created[k],
                                 (long long)cr.voucher_id) != 1;
    assert_int_equal(0, missing);
    orders = it_sql_order_count(cr.voucher_id);
    assert_int_equal(orders, STOCK - it_sql_stock(cr.voucher_id));
    assert_true(orders >= (int64_t)cr.ncreated);
    assert_true(orders <= (int64_t)cr.ncreated + cr.lost_buys);
    free(cr.created);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_keepalive_crowd),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "stop", tests, group_setup, group_teardown));
}
