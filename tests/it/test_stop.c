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
#include <strings.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "tests/it/harness.h"

#define USER_BASE 610000000000LL
#define CLIENTS 64
#define STOCK 1000000
/* The crowd runs this long before the SIGTERM, so that every client has
 * a request in flight and the engines are busy. */
#define WARM_MS 1500
/* After the SIGTERM: the service has this long to close every connection
 * (it exits within IT_STOP_TIMEOUT_MS). */
#define AFTER_MS 15000
/* 201s remembered per client. */
#define CREATED_MAX 4096

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

/* One keep-alive client: a request in flight at a time, a purchase by a
 * fresh user and a read of the voucher in turn. */
struct client {
    int fd; /* -1 once the service closed the connection */
    bool in_flight;
    bool purchase; /* the request in flight is a purchase */
    char out[1024];
    size_t out_len, out_off;
    char in[8192];
    size_t in_len;
    unsigned sent, answered;
    bool closing;                 /* the last answer said "Connection: close" */
    int64_t created[CREATED_MAX]; /* order ids of its 201s */
    size_t ncreated;
};

struct tally {
    unsigned status[600];
    unsigned bad;             /* an answer that is not HTTP */
    unsigned closing;         /* answers that closed their connection */
    unsigned lost, lost_buys; /* requests the closed connections took */
};

static void client_next(struct client *c, int64_t v)
{
    char tok[TOKEN_STR_LEN];
    int n;

    c->purchase = !c->purchase;
    if (c->purchase) {
        it_token(next_user++, TOKEN_ROLE_USER, 3600, tok);
        n = snprintf(c->out, sizeof(c->out),
                     "POST /api/vouchers/%lld/seckill HTTP/1.1\r\n"
                     "Host: t\r\nAuthorization: Bearer %s\r\n"
                     "Content-Length: 0\r\n\r\n",
                     (long long)v, tok);
    } else {
        n = snprintf(c->out, sizeof(c->out),
                     "GET /api/vouchers/%lld HTTP/1.1\r\nHost: t\r\n\r\n",
                     (long long)v);
    }
    assert_true(n > 0 && (size_t)n < sizeof(c->out));
    c->out_len = (size_t)n;
    c->out_off = 0;
    c->in_len = 0;
    c->in_flight = true;
    c->sent++;
}

/* A whole answer in c->in: its status, and its length in *len; 0 while
 * it is not all there yet, -1 when it is not HTTP. */
static long answer_parse(struct client *c, size_t *len)
{
    char *end, *cl;
    long status;
    size_t body;

    c->in[c->in_len] = '\0';
    end = strstr(c->in, "\r\n\r\n");
    if (!end)
        return c->in_len >= sizeof(c->in) - 1 ? -1 : 0;
    if (sscanf(c->in, "HTTP/1.1 %ld", &status) != 1)
        return -1;
    cl = strcasestr(c->in, "\r\nContent-Length:");
    if (!cl || cl > end)
        return -1;
    body = strtoul(cl + 17, NULL, 10);
    if ((size_t)(end + 4 - c->in) + body > c->in_len)
        return 0;
    *len = (size_t)(end + 4 - c->in) + body;
    return status;
}

static void client_answered(struct client *c, long status, struct tally *t)
{
    c->answered++;
    c->in_flight = false;
    if (status < 100 || status >= 600) {
        t->bad++;
        return;
    }
    t->status[status]++;
    if (status == 201) {
        const char *body = strstr(c->in, "\r\n\r\n") + 4;
        json_t *j = json_loads(body, JSON_DISABLE_EOF_CHECK, NULL);
        const char *id = j ? it_json_str(j, "orderId") : NULL;

        assert_non_null(id);
        assert_true(c->ncreated < CREATED_MAX);
        c->created[c->ncreated++] = strtoll(id, NULL, 10);
        json_decref(j);
    }
}

static void client_closed(struct client *c, struct tally *t)
{
    if (c->in_flight) {
        t->lost++;
        t->lost_buys += c->purchase;
    }
    close(c->fd);
    c->fd = -1;
    c->in_flight = false;
}

/* One round of the event loop over every open client: send what is due,
 * read what came. Returns how many clients are still open. */
static size_t crowd_step(struct client *cs, size_t n, int64_t v,
                         struct tally *t)
{
    struct pollfd p[CLIENTS];
    size_t open = 0;

    for (size_t i = 0; i < n; i++) {
        p[i].fd = cs[i].fd;
        p[i].events = cs[i].out_off < cs[i].out_len ? POLLOUT : POLLIN;
        p[i].revents = 0;
        open += cs[i].fd >= 0;
    }
    if (!open)
        return 0;
    if (poll(p, n, 50) < 0)
        return open;
    for (size_t i = 0; i < n; i++) {
        struct client *c = &cs[i];
        ssize_t r;

        if (c->fd < 0 || !p[i].revents)
            continue;
        if (c->out_off < c->out_len) {
            r = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                     MSG_NOSIGNAL);
            if (r > 0)
                c->out_off += (size_t)r;
            else if (r < 0 && errno != EAGAIN && errno != EINTR)
                client_closed(c, t);
            continue;
        }
        r = recv(c->fd, c->in + c->in_len, sizeof(c->in) - 1 - c->in_len, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0) {
            client_closed(c, t);
            continue;
        }
        c->in_len += (size_t)r;
        size_t len = 0;
        long status = answer_parse(c, &len);
        if (status == 0)
            continue;
        client_answered(c, status, t);
        if (status < 0) {
            client_closed(c, t);
            continue;
        }
        /* As HTTP clients do: after "Connection: close", nothing more on
         * this connection (wait for the service to close it). */
        if (strcasestr(c->in, "\r\nConnection: close\r\n")) {
            c->closing = true;
            t->closing++;
        } else {
            client_next(c, v);
        }
    }
    open = 0;
    for (size_t i = 0; i < n; i++)
        open += cs[i].fd >= 0;
    return open;
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
    static struct client cs[CLIENTS];
    struct tally t = {0};
    size_t created = 0, open;
    unsigned sent = 0, answered = 0;
    int64_t v, deadline, orders, missing;

    (void)state;
    assert_int_equal(0, it_server_start(&srv, "stop", env));
    v = it_seckill_create(&srv, 1, STOCK, -60, 3600);
    for (size_t i = 0; i < CLIENTS; i++) {
        memset(&cs[i], 0, sizeof(cs[i]));
        cs[i].fd = it_raw_connect(srv.port);
        assert_int_equal(0, fcntl(cs[i].fd, F_SETFL, O_NONBLOCK));
        /* Half start with a read, half with a purchase. */
        cs[i].purchase = i % 2;
        client_next(&cs[i], v);
    }
    deadline = util_mono_ms() + WARM_MS;
    while (util_mono_ms() < deadline)
        crowd_step(cs, CLIENTS, v, &t);
    assert_int_equal(0, kill(srv.pid, SIGTERM));
    deadline = util_mono_ms() + AFTER_MS;
    do
        open = crowd_step(cs, CLIENTS, v, &t);
    while (open && util_mono_ms() < deadline);

    for (size_t i = 0; i < CLIENTS; i++) {
        sent += cs[i].sent;
        answered += cs[i].answered;
        created += cs[i].ncreated;
    }
    print_message("      %u requests sent, %u answered (201: %u, 200: %u, "
                  "503: %u, 429: %u; %u with Connection: close), %u lost "
                  "with their connection (%u purchases), %zu connections "
                  "still open\n",
                  sent, answered, t.status[201], t.status[200], t.status[503],
                  t.status[429], t.closing, t.lost, t.lost_buys, open);
    /* Every connection ended: nothing hangs. */
    assert_int_equal(0, open);
    /* Exit status 0, and no report of the sanitizers. */
    assert_int_equal(0, it_server_stop(&srv));
    assert_false(log_has_report(srv.log_path));
    /* Every request answered in full, or taken by its connection. */
    assert_int_equal(0, t.bad);
    assert_int_equal(sent, answered + t.lost);
    /* What a request may be answered while the service stops. */
    assert_int_equal(answered, t.status[200] + t.status[201] + t.status[503] +
                                   t.status[429]);
    assert_true(t.status[201] > 0);
    /* MySQL: every 201 is an order; orders = initial - stock; no more
     * orders than 201s and the purchases that lost their answer. */
    missing = 0;
    for (size_t i = 0; i < CLIENTS; i++)
        for (size_t k = 0; k < cs[i].ncreated; k++)
            missing +=
                it_sql_scalar("SELECT COUNT(*) FROM voucher_orders "
                              "WHERE id = %lld AND voucher_id = %lld",
                              (long long)cs[i].created[k], (long long)v) != 1;
    assert_int_equal(0, missing);
    orders = it_sql_order_count(v);
    assert_int_equal(orders, STOCK - it_sql_stock(v));
    assert_true(orders >= (int64_t)created);
    assert_true(orders <= (int64_t)created + t.lost_buys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_keepalive_crowd),
    };
    return it_exit_status(cmocka_run_group_tests_name(
        "stop", tests, group_setup, group_teardown));
}
