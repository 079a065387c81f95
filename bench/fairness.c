/*
 * fairness.c - the load generator of `make bench-fairness`
 * (bench/fairness.sh): a crowd of people and bots buying one flash sale,
 * each an actor with a clock of its own, over a few hundred keep-alive
 * connections that all actors share.
 *
 *   fairness pow  --hosts H:P,... --count N --threads T --out FILE --json FILE
 *   fairness sale --hosts H:P,... --mode queue|open --voucher ID
 *                 --begin-ms MS [--open-ms MS] --tokens CSV --people N
 *                 --bots M [--pow FILE] --json FILE --actors CSV
 *                 [--conns C] [--join-window-ms W] [--reaction-ms LO,HI]
 *                 [--bot-every-ms B] [--poll-ms P] [--tail-ms T] [--seed S]
 *
 * pow: fetches N challenges (GET /api/pow) and solves them with
 * pow_solve() on T threads, as many clients would, each on its own
 * machine; writes one Seckill-PoW header value a line to --out, the cost
 * of one solve (ms: p50, p99, mean) to --json, and prints
 *   pow_solve_ms p50=<ms> p99=<ms> mean=<ms> solved=<n> wall_s=<s>
 *
 * sale: the first --people rows of --tokens (user_id,token, header
 * first) are people, the next --bots are bots; actor i talks to host
 * i mod hosts. In a queue sale (--mode queue):
 *   - a bot joins (POST /api/vouchers/ID/queue) at --open-ms, the room's
 *     first moment, again every --bot-every-ms while the room is not open;
 *     then reads its place (GET) every --poll-ms from its previous read,
 *     the fastest the room allows, ignoring Retry-After, and again
 *     --bot-every-ms after a 429; it buys the moment it is admitted;
 *   - a person joins once, at a uniform time in the --join-window-ms
 *     before --begin-ms, reads its place when Retry-After says, and buys
 *     once admitted;
 *   - a join carries the actor's line of --pow (its proof of work);
 *   - a purchase carries the ticket of the place (Seckill-Ticket).
 * In an open sale (--mode open):
 *   - a bot sends a purchase at --begin-ms and another every
 *     --bot-every-ms, whatever came back, until one is 201 or the answer
 *     is SOLD_OUT or ALREADY_PURCHASED;
 *   - a person buys once at --begin-ms plus a reaction time drawn
 *     uniformly from --reaction-ms, and again after a 429 or 503 when
 *     Retry-After says.
 * The sale mode ends when every actor is done, or --tail-ms after the
 * begin. It writes a summary (--json: outcomes per role, time from the
 * begin to each 201, the room's reads per second answered 200 and 429,
 * the replies by status) and one line per actor (--actors), and prints
 *   sale mode=<m> people_won=<n> bots_won=<n> people_p50_ms=<ms> ...
 *
 * Requests wait in one first-in first-out line per host for a free
 * connection; the time an actor's request waits there counts in its
 * timings, as the network's queueing would for a real client. A
 * connection the server closed while idle is opened again and the
 * request resent, once it is known that nothing was answered on it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/pow.h"
#include "common/util.h"

#define HOSTS_MAX 8
#define IN_MAX 16384
/* A request resent after its keep-alive connection turned out closed. */
#define RESEND_MAX 3
#define TICKET_MAX 256

/* ---- time and randomness ---- */

/* Wall-clock microseconds: the sale's begin is a wall-clock time, and the
 * service and Redis read the same clock on this machine. */
static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t rng_state;

/* splitmix64: reproducible from --seed. */
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (microseconds or anything else). */
static int64_t rng_between(int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The q-quantile of v[0..n) (sorted here), nearest rank; 0 when empty. */
static int64_t quantile(int64_t *v, size_t n, double q)
{
    size_t k;

    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_i64);
    k = (size_t)(q * (double)n);
    if ((double)k < q * (double)n)
        k++;
    return v[k == 0 ? 0 : k - 1];
}

/* ---- requests and connections ---- */

enum req_kind { K_POW, K_JOIN, K_POLL, K_BUY, K_KINDS };
static const char *const kind_names[K_KINDS] = {"pow", "join", "poll", "buy"};

struct actor;
struct req;

/* A reply as the callback sees it: status 0 when none came (the
 * connection failed); the body points into the connection's buffer and
 * lives until the callback returns. */
struct reply {
    int status;
    int retry_after_s; /* -1: no Retry-After */
    const char *body;
    size_t body_len;
};

typedef void req_done_fn(struct req *r, const struct reply *rp);

struct req {
    struct req *next;
    struct actor *a; /* NULL for a challenge */
    size_t index;    /* a challenge's number */
    enum req_kind kind;
    req_done_fn *done;
    char *text;
    size_t len;
    int64_t queued_us;
    int64_t sent_us;
    int resends; /* sent again after a closed keep-alive connection */
    int tries;   /* a challenge's earlier requests that got no answer */
};

enum conn_state { C_DOWN, C_CONNECTING, C_IDLE, C_BUSY };

struct host;

struct conn {
    int fd;
    enum conn_state state;
    struct host *h;
    struct req *req;
    size_t out_off;
    bool was_idle; /* open and idle before its request: the server may
                    * have closed it meanwhile */
    bool want_out;
    size_t in_len;
    char in[IN_MAX];
};

struct host {
    struct sockaddr_in sa;
    char name[64];
    struct conn *conns;
    int nconns;
    struct conn **idle; /* a ring: the longest idle is used first */
    int idle_head, idle_n;
    struct conn **down; /* a stack of closed connections */
    int down_n;
    struct req *pend_head, *pend_tail;
};

static struct host hosts[HOSTS_MAX];
static int nhosts;
static int epfd = -1;
/* Connections closed during one turn of the loop: they are opened again
 * only after it, so that an event of the turn for the old socket is not
 * taken for the new one's. */
static struct conn **closed;
static int closed_n;
static uint64_t stat_resent, stat_unanswered, stat_idle_closed;

/* Why a connection failed under a request. */
enum fail { F_CONNECT, F_RESET, F_CLOSED, F_MALFORMED, F_KINDS };
static const char *const fail_names[F_KINDS] = {
    "connect", "reset", "closed_before_reply", "malformed_reply"};
static uint64_t stat_fail[F_KINDS];
static uint64_t stat_status[K_KINDS][600];

static int parse_hosts(const char *list)
{
    char *dup = xstrdup(list), *save = NULL;

    for (char *t = strtok_r(dup, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(t, ':');
        struct host *h;

        if (!colon || nhosts == HOSTS_MAX)
            goto bad;
        h = &hosts[nhosts++];
        *colon = '\0';
        h->sa.sin_family = AF_INET;
        h->sa.sin_port = htons((uint16_t)atoi(colon + 1));
        if (inet_pton(AF_INET, t, &h->sa.sin_addr) != 1 || h->sa.sin_port == 0)
            goto bad;
        snprintf(h->name, sizeof(h->name), "%s:%s", t, colon + 1);
    }
    free(dup);
    return nhosts ? 0 : -EINVAL;
bad:
    free(dup);
    return -EINVAL;
}

static void conn_watch(struct conn *c, bool out)
{
    struct epoll_event ev = {
        .events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0), .data.ptr = c};

    if (c->want_out == out)
        return;
    c->want_out = out;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void hosts_open(int conns_per_host)
{
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        perror("fairness: epoll_create1");
        exit(2);
    }
    closed = xcalloc((size_t)(nhosts * conns_per_host), sizeof(*closed));
    for (int i = 0; i < nhosts; i++) {
        struct host *h = &hosts[i];

        h->nconns = conns_per_host;
        h->conns = xcalloc((size_t)conns_per_host, sizeof(*h->conns));
        h->idle = xcalloc((size_t)conns_per_host, sizeof(*h->idle));
        h->down = xcalloc((size_t)conns_per_host, sizeof(*h->down));
        for (int k = 0; k < conns_per_host; k++) {
            h->conns[k].fd = -1;
            h->conns[k].h = h;
            h->down[h->down_n++] = &h->conns[k];
        }
    }
}

static void idle_push(struct conn *c)
{
    struct host *h = c->h;

    c->state = C_IDLE;
    c->was_idle = true;
    h->idle[(h->idle_head + h->idle_n++) % h->nconns] = c;
}

static struct conn *idle_pop(struct host *h)
{
    struct conn *c = h->idle[h->idle_head];

    h->idle_head = (h->idle_head + 1) % h->nconns;
    h->idle_n--;
    return c;
}

/* Remove c from the idle ring (it closed while idle). */
static void idle_remove(struct conn *c)
{
    struct host *h = c->h;
    int n = h->idle_n, j = 0;

    for (int i = 0; i < n; i++) {
        struct conn *x = h->idle[(h->idle_head + i) % h->nconns];

        if (x != c)
            h->idle[(h->idle_head + j++) % h->nconns] = x;
    }
    h->idle_n = j;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    c->fd = -1;
    c->state = C_DOWN;
    c->req = NULL;
    c->in_len = 0;
    c->was_idle = false;
    c->want_out = false;
    closed[closed_n++] = c;
}

static void pend_push(struct host *h, struct req *r, bool front)
{
    r->next = NULL;
    if (!h->pend_head) {
        h->pend_head = h->pend_tail = r;
    } else if (front) {
        r->next = h->pend_head;
        h->pend_head = r;
    } else {
        h->pend_tail->next = r;
        h->pend_tail = r;
    }
}

static struct req *pend_pop(struct host *h)
{
    struct req *r = h->pend_head;

    h->pend_head = r->next;
    if (!h->pend_head)
        h->pend_tail = NULL;
    r->next = NULL;
    return r;
}

static void req_free(struct req *r)
{
    free(r->text);
    free(r);
}

/* Close every connection and drop what still waits (the end of a run:
 * an open sale's bots may have purchases in flight). */
static void hosts_close(void)
{
    for (int i = 0; i < nhosts; i++) {
        struct host *h = &hosts[i];

        while (h->pend_head)
            req_free(pend_pop(h));
        for (int k = 0; k < h->nconns; k++) {
            if (h->conns[k].fd >= 0)
                close(h->conns[k].fd);
            if (h->conns[k].req)
                req_free(h->conns[k].req);
        }
        free(h->conns);
        free(h->idle);
        free(h->down);
    }
    free(closed);
    close(epfd);
}

static void req_finish(struct req *r, const struct reply *rp)
{
    if (rp->status >= 0 && rp->status < 600)
        stat_status[r->kind][rp->status]++;
    r->done(r, rp);
    req_free(r);
}

static void conn_write(struct conn *c);

/* Start sending c's request: c is connected. */
static void conn_start(struct conn *c, struct req *r)
{
    c->req = r;
    c->state = C_BUSY;
    c->out_off = 0;
    c->in_len = 0;
    r->sent_us = now_us();
    conn_write(c);
}

static void conn_failed(struct conn *c, enum fail why);

/* Open c (closed) for r. */
static void conn_connect(struct conn *c, struct req *r)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP,
                             .data.ptr = c};
    int one = 1;

    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        perror("fairness: socket");
        exit(2);
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->req = r;
    c->state = C_CONNECTING;
    c->want_out = true;
    c->was_idle = false;
    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
    if (connect(c->fd, (struct sockaddr *)&c->h->sa, sizeof(c->h->sa)) == 0)
        conn_start(c, r);
    else if (errno != EINPROGRESS)
        conn_failed(c, F_CONNECT);
}

/* Give waiting requests of h to free connections. */
static void dispatch(struct host *h)
{
    while (h->pend_head && (h->idle_n || h->down_n)) {
        struct req *r = pend_pop(h);

        if (h->idle_n)
            conn_start(idle_pop(h), r);
        else
            conn_connect(h->down[--h->down_n], r);
    }
}

static void submit(struct host *h, struct req *r)
{
    r->queued_us = now_us();
    pend_push(h, r, false);
    dispatch(h);
}

/* c broke. Its request is sent again on another connection when nothing
 * came back on a connection that had been idle (the server closed it
 * while idle: the request was never read); otherwise it has no answer. */
static void conn_failed(struct conn *c, enum fail why)
{
    struct req *r = c->req;
    struct host *h = c->h;
    bool resend = r && c->was_idle && c->in_len == 0 && r->resends < RESEND_MAX;

    stat_fail[why]++;
    conn_close(c);
    if (resend) {
        r->resends++;
        stat_resent++;
        pend_push(h, r, true);
    } else if (r) {
        struct reply rp = {.status = 0, .retry_after_s = -1};

        stat_unanswered++;
        req_finish(r, &rp);
    }
    dispatch(h);
}

static void conn_write(struct conn *c)
{
    struct req *r = c->req;

    while (c->out_off < r->len) {
        ssize_t n = send(c->fd, r->text + c->out_off, r->len - c->out_off,
                         MSG_NOSIGNAL);

        if (n < 0 && errno == EAGAIN) {
            conn_watch(c, true);
            return;
        }
        if (n <= 0) {
            conn_failed(c, F_RESET);
            return;
        }
        c->out_off += (size_t)n;
    }
    conn_watch(c, false);
}

/* The header's value as a number (case-insensitive name), or -1. */
static long header_num(const char *head, const char *name)
{
    size_t nl = strlen(name);

    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p, "\r\n")) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':')
            return strtol(p + nl + 1, NULL, 10);
    }
    return -1;
}

static bool header_close(const char *head)
{
    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p, "\r\n")) {
        p += 2;
        if (strncasecmp(p, "connection:", 11) == 0) {
            const char *e = strstr(p, "\r\n");
            const char *v = strcasestr(p, "close");

            return v && (!e || v < e);
        }
    }
    return false;
}

/* Read what c has; finish its request when the whole reply is in. */
static void conn_read(struct conn *c)
{
    bool eof = false;

    for (;;) {
        ssize_t n;

        if (c->in_len >= IN_MAX - 1) {
            conn_failed(c, F_MALFORMED);
            return;
        }
        n = recv(c->fd, c->in + c->in_len, IN_MAX - 1 - c->in_len, 0);
        if (n < 0 && errno == EAGAIN)
            break;
        if (n < 0) {
            conn_failed(c, F_RESET);
            return;
        }
        if (n == 0) {
            eof = true;
            break;
        }
        c->in_len += (size_t)n;
    }
    c->in[c->in_len] = '\0';

    /* A reply may come with the server's close right behind it. */
    char *end = strstr(c->in, "\r\n\r\n");
    if (!end) {
        if (eof)
            conn_failed(c, F_CLOSED);
        return;
    }
    *end = '\0';

    long cl = header_num(c->in, "content-length");
    size_t head_len = (size_t)(end - c->in) + 4, total;
    int status = 0;

    if (cl < 0 || sscanf(c->in, "HTTP/1.%*d %d", &status) != 1) {
        *end = '\r';
        conn_failed(c, F_MALFORMED);
        return;
    }
    total = head_len + (size_t)cl;
    if (c->in_len < total) {
        *end = '\r'; /* look again when more came */
        if (eof)
            conn_failed(c, F_CLOSED);
        return;
    }

    struct reply rp = {.status = status,
                       .retry_after_s = (int)header_num(c->in, "retry-after"),
                       .body = c->in + head_len,
                       .body_len = (size_t)cl};
    struct req *r = c->req;
    struct host *h = c->h;
    bool close_after = eof || header_close(c->in) || c->in_len != total;

    /* c stays busy while the callback reads the body in c->in. */
    c->req = NULL;
    req_finish(r, &rp);
    c->in_len = 0;
    if (close_after)
        conn_close(c);
    else
        idle_push(c);
    dispatch(h);
}

static void conn_event(struct conn *c, uint32_t ev)
{
    if (c->state == C_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err || (ev & (EPOLLERR | EPOLLHUP))) {
            conn_failed(c, F_CONNECT);
            return;
        }
        conn_start(c, c->req);
        return;
    }
    if (c->state == C_IDLE) {
        /* The server closed it (its idle timeout): nothing else comes on
         * a connection without a request. */
        idle_remove(c);
        stat_idle_closed++;
        conn_close(c);
        return;
    }
    if (c->state != C_BUSY)
        return;
    if (ev & EPOLLOUT) {
        conn_write(c);
        if (c->state != C_BUSY)
            return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        conn_read(c);
}

/* One turn of the loop: wait at most timeout_ms for sockets. */
static void poll_sockets(int timeout_ms)
{
    struct epoll_event evs[512];
    int n = epoll_wait(epfd, evs, 512, timeout_ms);

    for (int i = 0; i < n; i++) {
        struct conn *c = evs[i].data.ptr;

        /* An earlier event of this turn may have closed it. */
        if (c->state == C_DOWN)
            continue;
        conn_event(c, evs[i].events);
    }
    for (int i = 0; i < closed_n; i++)
        closed[i]->h->down[closed[i]->h->down_n++] = closed[i];
    closed_n = 0;
    for (int i = 0; i < nhosts; i++)
        dispatch(&hosts[i]);
}

static bool pending_any(void)
{
    for (int i = 0; i < nhosts; i++) {
        if (hosts[i].pend_head ||
            hosts[i].idle_n + hosts[i].down_n < hosts[i].nconns)
            return true;
    }
    return closed_n > 0;
}

/* What went wrong on the connections, as a JSON object. */
static json_t *transport_json(void)
{
    json_t *f = json_object();

    for (int i = 0; i < F_KINDS; i++)
        json_object_set_new(f, fail_names[i],
                            json_integer((json_int_t)stat_fail[i]));
    return json_pack("{s:I,s:I,s:I,s:o}", "resent", (json_int_t)stat_resent,
                     "closed_while_idle", (json_int_t)stat_idle_closed,
                     "unanswered", (json_int_t)stat_unanswered, "failures", f);
}

/* Open every connection, before the load starts. */
static int hosts_connect(void)
{
    for (int i = 0; i < nhosts; i++) {
        struct host *h = &hosts[i];

        while (h->down_n) {
            struct conn *c = h->down[--h->down_n];
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
                                     .data.ptr = c};
            int one = 1, fl;

            c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (c->fd < 0 ||
                connect(c->fd, (struct sockaddr *)&h->sa, sizeof(h->sa))) {
                fprintf(stderr, "fairness: cannot connect to %s: %s\n", h->name,
                        strerror(errno));
                return -1;
            }
            fl = fcntl(c->fd, F_GETFL);
            fcntl(c->fd, F_SETFL, fl | O_NONBLOCK);
            setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
            idle_push(c);
        }
    }
    return 0;
}

/* A request text: method, path, Host, and extra header lines (each
 * ending "\r\n", or ""). */
static struct req *req_new(const struct host *h, enum req_kind kind,
                           const char *method, const char *path,
                           const char *extra, req_done_fn *done)
{
    struct req *r = xcalloc(1, sizeof(*r));

    r->kind = kind;
    r->done = done;
    r->text = xasprintf(
        "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n", method, path, h->name, extra,
        strcmp(method, "POST") == 0 ? "Content-Length: 0\r\n" : "");
    r->len = strlen(r->text);
    return r;
}

/* The error code of an error reply ("" when none). */
static void error_code(const struct reply *rp, char *out, size_t n)
{
    json_t *o = json_loadb(rp->body, rp->body_len, 0, NULL);
    const char *code =
        json_string_value(json_object_get(json_object_get(o, "error"), "code"));

    snprintf(out, n, "%s", code ? code : "");
    json_decref(o);
}

/* ---- pow: fetch challenges, solve them ---- */

static char **challenges;
static size_t challenges_got;

static void challenge_done(struct req *r, const struct reply *rp);

static void challenge_get(size_t i, int tries)
{
    struct host *h = &hosts[i % (size_t)nhosts];
    struct req *r = req_new(h, K_POW, "GET", "/api/pow", "", challenge_done);

    r->index = i;
    r->tries = tries;
    submit(h, r);
}

/* A challenge came, or not: a few more tries when not. */
static void challenge_done(struct req *r, const struct reply *rp)
{
    if (rp->status == 200) {
        challenges[r->index] = xstrndup(rp->body, rp->body_len);
        challenges_got++;
        return;
    }
    if (r->tries + 1 >= RESEND_MAX) {
        char *t = json_dumps(transport_json(), JSON_COMPACT);

        fprintf(stderr, "fairness: GET /api/pow answered %d (%s)\n", rp->status,
                t);
        exit(1);
    }
    challenge_get(r->index, r->tries + 1);
}

struct solver {
    pthread_t thread;
    size_t count;
    char **solutions;
    int64_t *us; /* each solve's time, microseconds */
};

static atomic_size_t solve_next;

static void *solver_main(void *arg)
{
    struct solver *s = arg;

    for (;;) {
        size_t i = atomic_fetch_add(&solve_next, 1);
        struct timespec t0, t1;

        if (i >= s->count)
            break;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (pow_solve(challenges[i], &s->solutions[i]) != 0) {
            fprintf(stderr, "fairness: challenge %zu has no solution\n", i);
            exit(1);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        s->us[i] = (t1.tv_sec - t0.tv_sec) * 1000000 +
                   (t1.tv_nsec - t0.tv_nsec) / 1000;
    }
    return NULL;
}

static int run_pow(size_t count, int threads, int conns, const char *out_path,
                   const char *json_path)
{
    struct solver *sv = xcalloc((size_t)threads, sizeof(*sv));
    char **solutions = xcalloc(count, sizeof(*solutions));
    int64_t *us = xcalloc(count, sizeof(*us));
    int64_t t0, t_fetched, t_solved, sum = 0;
    double p50, p99, mean, wall;
    json_t *o = NULL;
    FILE *f;
    int ret = 2;

    challenges = xcalloc(count, sizeof(*challenges));
    hosts_open(conns / nhosts > 0 ? conns / nhosts : 1);
    if (hosts_connect() != 0)
        goto out;
    t0 = now_us();
    for (size_t i = 0; i < count; i++)
        challenge_get(i, 0);
    while (challenges_got < count) {
        poll_sockets(100);
        if (challenges_got < count && !pending_any()) {
            fprintf(stderr, "fairness: challenges went missing\n");
            goto out;
        }
    }
    t_fetched = now_us();
    for (int i = 0; i < threads; i++) {
        sv[i].count = count;
        sv[i].solutions = solutions;
        sv[i].us = us;
        pthread_create(&sv[i].thread, NULL, solver_main, &sv[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(sv[i].thread, NULL);
    t_solved = now_us();

    f = fopen(out_path, "w");
    if (!f) {
        perror(out_path);
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        fprintf(f, "%s\n", solutions[i]);
        sum += us[i];
    }
    if (fclose(f) != 0) {
        perror(out_path);
        goto out;
    }

    p50 = (double)quantile(us, count, 0.50) / 1000.0;
    p99 = (double)quantile(us, count, 0.99) / 1000.0;
    mean = (double)sum / (double)count / 1000.0;
    wall = (double)(t_solved - t_fetched) / 1e6;
    o = json_pack("{s:I,s:i,s:{s:f,s:f,s:f,s:f},s:f,s:f}", "challenges",
                  (json_int_t)count, "threads", threads, "solve_ms", "p50", p50,
                  "p99", p99, "mean", mean, "max",
                  (double)us[count - 1] / 1000.0, "fetch_s",
                  (double)(t_fetched - t0) / 1e6, "solve_wall_s", wall);
    if (json_dump_file(o, json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6))) {
        fprintf(stderr, "fairness: cannot write %s\n", json_path);
        goto out;
    }
    printf("pow_solve_ms p50=%.1f p99=%.1f mean=%.1f solved=%zu wall_s=%.1f "
           "threads=%d\n",
           p50, p99, mean, count, wall, threads);
    ret = 0;
out:
    json_decref(o);
    for (size_t i = 0; i < count; i++) {
        free(solutions[i]);
        free(challenges[i]);
    }
    free(sv);
    free(solutions);
    free(us);
    free(challenges);
    hosts_close();
    return ret;
}

/* ---- sale: the actors ---- */

enum role { PERSON, BOT, ROLES };
static const char *const role_names[ROLES] = {"people", "bots"};

enum astate { A_JOIN, A_POLL, A_BUY, A_DONE };

enum outcome { O_UNFINISHED, O_WON, O_SOLD_OUT, O_ALREADY, O_FAILED, O_COUNT };
static const char *const outcome_names[O_COUNT] = {
    "unfinished", "won", "sold_out", "already_purchased", "failed"};

struct actor {
    int64_t user_id;
    char *token;
    const char *pow;
    enum role role;
    struct host *h;
    enum astate state;
    enum outcome outcome;
    int64_t due_us; /* its next step, when in the heap */
    bool in_heap;
    int64_t last_poll_sent_us;
    /* What it saw, for the summary (microseconds from the begin). */
    int64_t join_plan_us, joined_us, admitted_us, won_us;
    int64_t position;
    unsigned polls_ok, polls_limited, buys, errors;
    char ticket[TICKET_MAX];
};

static struct {
    bool queue;
    int64_t voucher;
    int64_t begin_us, open_us;
    int64_t join_window_us;
    int64_t reaction_lo_us, reaction_hi_us;
    int64_t bot_every_us;
    int64_t poll_us;
    int64_t tail_us;
    uint64_t seed;
} sc;

static struct actor *actors;
static size_t nactors, ndone;
static uint64_t pow_refused, ticket_refused;

/* Reads of the room per second from the begin, by role and answer (200,
 * 429): second k of the run is bucket k + bucket_shift. */
#define BUCKETS_MAX 4096
static uint32_t poll_buckets[ROLES][2][BUCKETS_MAX];
static int64_t bucket_shift;
static int64_t first_poll_us = INT64_MAX, last_poll_us = INT64_MIN;

/* The timer heap: actors by due_us. */
static struct actor **heap;
static size_t heap_n;

static void heap_swap(size_t i, size_t j)
{
    struct actor *t = heap[i];

    heap[i] = heap[j];
    heap[j] = t;
}

static void schedule(struct actor *a, int64_t at_us)
{
    size_t i;

    if (a->in_heap)
        return; /* already due earlier */
    a->due_us = at_us;
    a->in_heap = true;
    i = heap_n++;
    heap[i] = a;
    while (i > 0 && heap[(i - 1) / 2]->due_us > heap[i]->due_us) {
        heap_swap(i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static struct actor *heap_pop(void)
{
    struct actor *top = heap[0];
    size_t i = 0;

    heap[0] = heap[--heap_n];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < heap_n && heap[l]->due_us < heap[m]->due_us)
            m = l;
        if (r < heap_n && heap[r]->due_us < heap[m]->due_us)
            m = r;
        if (m == i)
            break;
        heap_swap(i, m);
        i = m;
    }
    top->in_heap = false;
    return top;
}

static void finish(struct actor *a, enum outcome o)
{
    if (a->state == A_DONE)
        return;
    a->state = A_DONE;
    a->outcome = o;
    ndone++;
}

static void actor_done_req(struct req *r, const struct reply *rp);

static void send_step(struct actor *a, enum req_kind kind)
{
    char path[96], extra[2048];
    const char *method = kind == K_POLL ? "GET" : "POST";
    int n;

    if (kind == K_BUY)
        snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
                 (long long)sc.voucher);
    else
        snprintf(path, sizeof(path), "/api/vouchers/%lld/queue",
                 (long long)sc.voucher);
    n = snprintf(extra, sizeof(extra), "Authorization: Bearer %s\r\n",
                 a->token);
    if (kind == K_JOIN && a->pow)
        n += snprintf(extra + n, sizeof(extra) - (size_t)n,
                      "Seckill-PoW: %s\r\n", a->pow);
    if (kind == K_BUY && a->ticket[0])
        snprintf(extra + n, sizeof(extra) - (size_t)n, "Seckill-Ticket: %s\r\n",
                 a->ticket);

    struct req *r = req_new(a->h, kind, method, path, extra, actor_done_req);

    r->a = a;
    if (kind == K_POLL)
        a->last_poll_sent_us = now_us();
    if (kind == K_BUY)
        a->buys++;
    submit(a->h, r);
}

/* The actor's timer went off. */
static void actor_wake(struct actor *a)
{
    switch (a->state) {
    case A_JOIN:
        send_step(a, K_JOIN);
        break;
    case A_POLL:
        send_step(a, K_POLL);
        break;
    case A_BUY:
        send_step(a, K_BUY);
        /* An open sale's bot does not wait for the answer. */
        if (!sc.queue && a->role == BOT)
            schedule(a, now_us() + sc.bot_every_us);
        break;
    case A_DONE:
        break;
    }
}

/* Wait as the role does: a bot at its own pace, a person as Retry-After
 * says (a second when it says nothing). */
static void again(struct actor *a, const struct reply *rp, int64_t bot_at_us)
{
    int64_t now = now_us();

    if (a->role == BOT)
        schedule(a, bot_at_us > now ? bot_at_us : now);
    else
        schedule(a, now + (rp->retry_after_s > 0 ? rp->retry_after_s : 1) *
                              1000000LL);
}

static void count_poll(struct actor *a, bool ok, int64_t t)
{
    int64_t k = (t - sc.begin_us) / 1000000 + bucket_shift;

    if (t < sc.begin_us)
        k = (t - sc.begin_us - 999999) / 1000000 + bucket_shift;
    if (k < 0)
        k = 0;
    if (k >= BUCKETS_MAX)
        k = BUCKETS_MAX - 1;
    poll_buckets[a->role][ok ? 0 : 1][k]++;
    if (t < first_poll_us)
        first_poll_us = t;
    if (t > last_poll_us)
        last_poll_us = t;
    if (ok)
        a->polls_ok++;
    else
        a->polls_limited++;
}

/* A place (200 or 202): remember it; buy at once when admitted. */
static void on_place(struct actor *a, const struct reply *rp, int64_t bot_at)
{
    json_t *o = json_loadb(rp->body, rp->body_len, 0, NULL);
    json_t *pos = json_object_get(o, "position");
    const char *ticket = json_string_value(json_object_get(o, "ticket"));
    bool admitted = json_is_true(json_object_get(o, "admitted"));

    if (json_is_integer(pos))
        a->position = json_integer_value(pos);
    if (admitted && ticket && strlen(ticket) < TICKET_MAX) {
        snprintf(a->ticket, sizeof(a->ticket), "%s", ticket);
        if (!a->admitted_us)
            a->admitted_us = now_us() - sc.begin_us;
        a->state = A_BUY;
        send_step(a, K_BUY);
    } else {
        a->state = A_POLL;
        again(a, rp, bot_at);
    }
    json_decref(o);
}

static void actor_done_req(struct req *r, const struct reply *rp)
{
    struct actor *a = r->a;
    int64_t now = now_us();
    char code[40] = "";

    if (a->state == A_DONE)
        return; /* an open sale's bot hears its other purchases late */
    if (rp->status >= 400)
        error_code(rp, code, sizeof(code));
    if (rp->status == 0 || rp->status >= 500)
        a->errors++;

    switch (r->kind) {
    case K_JOIN:
        if (rp->status == 202) {
            a->joined_us = now - sc.begin_us;
            /* A bot's reads follow a read interval apart from here. */
            on_place(a, rp, now + sc.poll_us);
        } else if (rp->status == 409 && strcmp(code, "NOT_STARTED") == 0) {
            again(a, rp, now + sc.bot_every_us); /* the room is not open */
        } else if (rp->status == 409) {
            finish(a, O_SOLD_OUT);
        } else if (rp->status == 403) {
            pow_refused++;
            finish(a, O_FAILED);
        } else {
            again(a, rp, now + sc.bot_every_us);
        }
        break;
    case K_POLL:
        if (rp->status == 200) {
            count_poll(a, true, now);
            on_place(a, rp, a->last_poll_sent_us + sc.poll_us);
        } else if (rp->status == 429) {
            count_poll(a, false, now);
            again(a, rp, now + sc.bot_every_us);
        } else if (rp->status == 409) {
            finish(a, O_SOLD_OUT);
        } else if (rp->status == 404) {
            finish(a, O_FAILED);
        } else {
            again(a, rp, now + sc.bot_every_us);
        }
        break;
    case K_BUY:
        if (rp->status == 201) {
            a->won_us = now - sc.begin_us;
            finish(a, O_WON);
        } else if (rp->status == 409 && strcmp(code, "SOLD_OUT") == 0) {
            finish(a, O_SOLD_OUT);
        } else if (rp->status == 409 &&
                   strcmp(code, "ALREADY_PURCHASED") == 0) {
            finish(a, O_ALREADY);
        } else if (rp->status == 409 && strcmp(code, "ENDED") == 0) {
            finish(a, O_FAILED);
        } else if (rp->status == 403 && sc.queue) {
            /* The ticket was refused (expired): read the place again. */
            ticket_refused++;
            a->ticket[0] = '\0';
            a->state = A_POLL;
            again(a, rp, a->last_poll_sent_us + sc.poll_us);
        } else if (!sc.queue && a->role == BOT) {
            /* Its timer sends the next one. */
        } else if (rp->status == 409) { /* NOT_STARTED: a clock apart */
            schedule(a, now + 100000);
        } else {
            again(a, rp, now + sc.bot_every_us);
        }
        break;
    default:
        break;
    }
}

/* Lines of a file, without their newlines. */
static char **read_lines(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    char **v = NULL, *line = NULL;
    size_t cap = 0, lcap = 0;
    ssize_t len;

    *n = 0;
    if (!f) {
        perror(path);
        exit(2);
    }
    while ((len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (*n == cap) {
            cap = cap ? cap * 2 : 1024;
            v = xrealloc(v, cap * sizeof(*v));
        }
        v[(*n)++] = xstrdup(line);
    }
    free(line);
    fclose(f);
    return v;
}

static void lines_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static json_t *percentiles(int64_t *ms, size_t n)
{
    int64_t p50 = quantile(ms, n, 0.50), p99 = quantile(ms, n, 0.99);

    return json_pack("{s:I,s:I,s:I,s:I}", "n", (json_int_t)n, "p50",
                     (json_int_t)p50, "p99", (json_int_t)p99, "max",
                     (json_int_t)(n ? ms[n - 1] : 0));
}

/* Reads per second over [from, to) seconds of the buckets, both roles. */
static json_t *poll_rates(int64_t from_s, int64_t to_s)
{
    uint64_t ok = 0, lim = 0, peak_ok = 0, peak_lim = 0;
    double secs;

    for (int64_t k = from_s + bucket_shift; k < to_s + bucket_shift; k++) {
        uint64_t o = 0, l = 0;

        if (k < 0 || k >= BUCKETS_MAX)
            continue;
        for (int r = 0; r < ROLES; r++) {
            o += poll_buckets[r][0][k];
            l += poll_buckets[r][1][k];
        }
        ok += o;
        lim += l;
        peak_ok = o > peak_ok ? o : peak_ok;
        peak_lim = l > peak_lim ? l : peak_lim;
    }
    secs = (double)(to_s - from_s);
    if (secs <= 0)
        secs = 1;
    return json_pack(
        "{s:I,s:I,s:I,s:f,s:f,s:I,s:I}", "seconds", (json_int_t)(to_s - from_s),
        "ok", (json_int_t)ok, "limited", (json_int_t)lim, "ok_per_s",
        (double)ok / secs, "limited_per_s", (double)lim / secs, "peak_ok_per_s",
        (json_int_t)peak_ok, "peak_limited_per_s", (json_int_t)peak_lim);
}

static json_t *status_counts(enum req_kind k)
{
    json_t *o = json_object();
    char s[16];

    for (int st = 0; st < 600; st++) {
        if (!stat_status[k][st])
            continue;
        snprintf(s, sizeof(s), "%d", st);
        json_object_set_new(o, s, json_integer((json_int_t)stat_status[k][st]));
    }
    return o;
}

static int write_results(const char *json_path, const char *actors_path,
                         bool finished)
{
    int64_t *won_ms[ROLES] = {NULL};
    size_t won_n[ROLES] = {0};
    json_t *roles = json_object(), *o = NULL, *req = json_object(), *pp;
    FILE *f = fopen(actors_path, "w");
    uint64_t bots_first_stock = 0, first_stock_known = 0;
    int ret = 2;

    if (!f) {
        perror(actors_path);
        goto out;
    }
    fprintf(f, "user_id,role,outcome,join_planned_ms,joined_ms,position,"
               "admitted_ms,won_ms,polls_ok,polls_limited,buys,errors\n");
    for (int r = 0; r < ROLES; r++)
        won_ms[r] = xcalloc(nactors + 1, sizeof(int64_t));
    for (int r = 0; r < ROLES; r++) {
        uint64_t out[O_COUNT] = {0}, polls_ok = 0, polls_lim = 0, buys = 0,
                 errors = 0, admitted = 0, actors_n = 0;

        for (size_t i = 0; i < nactors; i++) {
            struct actor *a = &actors[i];

            if (a->role != (enum role)r)
                continue;
            actors_n++;
            out[a->outcome]++;
            polls_ok += a->polls_ok;
            polls_lim += a->polls_limited;
            buys += a->buys;
            errors += a->errors;
            admitted += a->admitted_us != 0;
            if (a->outcome == O_WON)
                won_ms[r][won_n[r]++] = a->won_us / 1000;
        }
        o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "actors",
                      (json_int_t)actors_n, "admitted", (json_int_t)admitted,
                      "polls_ok", (json_int_t)polls_ok, "polls_limited",
                      (json_int_t)polls_lim, "purchases_sent", (json_int_t)buys,
                      "errors", (json_int_t)errors, "time_to_201_ms",
                      percentiles(won_ms[r], won_n[r]));
        for (int k = 0; k < O_COUNT; k++)
            json_object_set_new(o, outcome_names[k],
                                json_integer((json_int_t)out[k]));
        json_object_set_new(roles, role_names[r], o);
    }
    for (size_t i = 0; i < nactors; i++) {
        struct actor *a = &actors[i];

        fprintf(f, "%lld,%s,%s,%lld,%lld,%lld,%lld,%lld,%u,%u,%u,%u\n",
                (long long)a->user_id, a->role == BOT ? "bot" : "person",
                outcome_names[a->outcome], (long long)(a->join_plan_us / 1000),
                (long long)(a->joined_us / 1000), (long long)a->position,
                (long long)(a->admitted_us / 1000),
                (long long)(a->won_us / 1000), a->polls_ok, a->polls_limited,
                a->buys, a->errors);
    }
    if (fclose(f) != 0) {
        perror(actors_path);
        goto out;
    }
    for (int k = K_JOIN; k < K_KINDS; k++)
        json_object_set_new(req, kind_names[k], status_counts(k));

    /* Who holds the first places of the shuffle, among those seen. */
    size_t stock_places = 0;
    for (size_t i = 0; i < nactors; i++)
        stock_places += actors[i].outcome == O_WON;
    for (size_t i = 0; i < nactors; i++) {
        if (actors[i].position > 0 &&
            actors[i].position <= (int64_t)stock_places) {
            first_stock_known++;
            bots_first_stock += actors[i].role == BOT;
        }
    }

    int64_t before_from = 0, after_to = 0;
    if (first_poll_us != INT64_MAX) {
        before_from = (first_poll_us - sc.begin_us) / 1000000 - 1;
        after_to = (last_poll_us - sc.begin_us) / 1000000 + 1;
    }
    o = json_pack(
        "{s:s,s:I,s:I,s:I,s:I,s:b,s:f,s:o,s:{s:o,s:o},s:{s:I,s:I,s:I},s:o,"
        "s:o,s:{s:I,s:I}}",
        "mode", sc.queue ? "queue" : "open", "voucher", (json_int_t)sc.voucher,
        "begin_ms", (json_int_t)(sc.begin_us / 1000), "open_ms",
        (json_int_t)(sc.open_us / 1000), "seed", (json_int_t)sc.seed,
        "finished", finished, "seconds_from_begin",
        (double)(now_us() - sc.begin_us) / 1e6, "roles", json_incref(roles),
        "polls", "before_begin",
        poll_rates(before_from < 0 ? before_from : 0, 0), "after_begin",
        poll_rates(0, after_to > 0 ? after_to : 0), "first_places", "places",
        (json_int_t)stock_places, "seen", (json_int_t)first_stock_known, "bots",
        (json_int_t)bots_first_stock, "replies", json_incref(req), "transport",
        transport_json(), "refused", "pow", (json_int_t)pow_refused, "tickets",
        (json_int_t)ticket_refused);
    if (json_dump_file(o, json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6))) {
        fprintf(stderr, "fairness: cannot write %s\n", json_path);
        goto out;
    }

    pp = json_object_get(json_object_get(roles, "people"), "time_to_201_ms");
    printf("sale mode=%s people_won=%zu bots_won=%zu people_p50_ms=%lld "
           "people_p99_ms=%lld finished=%s\n",
           sc.queue ? "queue" : "open", won_n[PERSON], won_n[BOT],
           (long long)json_integer_value(json_object_get(pp, "p50")),
           (long long)json_integer_value(json_object_get(pp, "p99")),
           finished ? "yes" : "no");
    ret = 0;
out:
    json_decref(o);
    json_decref(roles);
    json_decref(req);
    for (int r = 0; r < ROLES; r++)
        free(won_ms[r]);
    return ret;
}

static int run_sale(const char *tokens_path, size_t people, size_t bots,
                    const char *pow_path, int conns, const char *json_path,
                    const char *actors_path)
{
    size_t ntok = 0, npow = 0;
    char **tok = read_lines(tokens_path, &ntok), **pows = NULL;
    int ret = 2;

    if (ntok < 1 + people + bots) {
        fprintf(stderr, "fairness: %s has %zu users, %zu needed\n", tokens_path,
                ntok ? ntok - 1 : 0, people + bots);
        goto free_lines;
    }
    if (pow_path) {
        pows = read_lines(pow_path, &npow);
        if (npow < people + bots) {
            fprintf(stderr, "fairness: %s has %zu solutions, %zu needed\n",
                    pow_path, npow, people + bots);
            goto free_lines;
        }
    }
    nactors = people + bots;
    actors = xcalloc(nactors, sizeof(*actors));
    heap = xcalloc(nactors, sizeof(*heap));
    hosts_open(conns / nhosts > 0 ? conns / nhosts : 1);
    rng_state = sc.seed;
    bucket_shift = (sc.begin_us - sc.open_us) / 1000000 + 10;

    for (size_t i = 0; i < nactors; i++) {
        struct actor *a = &actors[i];
        char *line = tok[1 + i], *comma = strchr(line, ',');

        if (!comma) {
            fprintf(stderr, "fairness: bad tokens line %zu\n", i + 2);
            goto close_hosts;
        }
        *comma = '\0';
        a->user_id = strtoll(line, NULL, 10);
        a->token = comma + 1;
        a->role = i < people ? PERSON : BOT;
        a->h = &hosts[i % (size_t)nhosts];
        a->pow = pows ? pows[i] : NULL;
        if (sc.queue) {
            a->state = A_JOIN;
            if (a->role == BOT)
                a->join_plan_us = sc.open_us;
            else
                a->join_plan_us =
                    sc.begin_us - rng_between(1, sc.join_window_us);
            if (a->join_plan_us < sc.open_us)
                a->join_plan_us = sc.open_us;
            schedule(a, a->join_plan_us);
            a->join_plan_us -= sc.begin_us;
        } else {
            a->state = A_BUY;
            schedule(a, a->role == BOT
                            ? sc.begin_us
                            : sc.begin_us + rng_between(sc.reaction_lo_us,
                                                        sc.reaction_hi_us));
        }
    }

    /* Every connection is open before the first actor wakes. */
    if (hosts_connect() != 0)
        goto close_hosts;

    for (;;) {
        int64_t now = now_us(), wait_ms = 100;

        while (heap_n && heap[0]->due_us <= now) {
            struct actor *a = heap_pop();

            if (a->state != A_DONE)
                actor_wake(a);
        }
        if (ndone == nactors || now >= sc.begin_us + sc.tail_us)
            break;
        if (heap_n) {
            int64_t d = (heap[0]->due_us - now + 999) / 1000;

            wait_ms = d < wait_ms ? d : wait_ms;
        }
        poll_sockets((int)wait_ms);
    }
    ret = write_results(json_path, actors_path, ndone == nactors);
close_hosts:
    hosts_close();
    free(actors);
    free(heap);
free_lines:
    lines_free(tok, ntok);
    lines_free(pows, npow);
    return ret;
}

/* ---- main ---- */

static void usage(void)
{
    fprintf(stderr,
            "usage: fairness pow --hosts H:P,... --count N --threads T "
            "--out FILE --json FILE\n"
            "       fairness sale --hosts H:P,... --mode queue|open "
            "--voucher ID --begin-ms MS [--open-ms MS]\n"
            "                     --tokens CSV --people N --bots M [--pow "
            "FILE] --json FILE --actors CSV\n"
            "                     [--conns C] [--join-window-ms W] "
            "[--reaction-ms LO,HI] [--bot-every-ms B]\n"
            "                     [--poll-ms P] [--tail-ms T] [--seed S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"hosts", required_argument, NULL, 'h'},
        {"count", required_argument, NULL, 'n'},
        {"threads", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"json", required_argument, NULL, 'j'},
        {"mode", required_argument, NULL, 'm'},
        {"voucher", required_argument, NULL, 'v'},
        {"begin-ms", required_argument, NULL, 'b'},
        {"open-ms", required_argument, NULL, 'O'},
        {"tokens", required_argument, NULL, 'T'},
        {"people", required_argument, NULL, 'p'},
        {"bots", required_argument, NULL, 'B'},
        {"pow", required_argument, NULL, 'P'},
        {"actors", required_argument, NULL, 'a'},
        {"conns", required_argument, NULL, 'c'},
        {"join-window-ms", required_argument, NULL, 'w'},
        {"reaction-ms", required_argument, NULL, 'r'},
        {"bot-every-ms", required_argument, NULL, 'e'},
        {"poll-ms", required_argument, NULL, 'l'},
        {"tail-ms", required_argument, NULL, 'x'},
        {"seed", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    const char *hosts_arg = NULL, *out = NULL, *json = NULL, *mode = NULL,
               *tokens = NULL, *pow = NULL, *actors_csv = NULL;
    long long count = 0, people = 0, bots = 0, lo = 200, hi = 1500;
    int threads = 2, conns = 256, opt;

    if (argc < 2 || (strcmp(argv[1], "pow") && strcmp(argv[1], "sale")))
        usage();
    sc.join_window_us = 60000000;
    sc.bot_every_us = 50000;
    sc.poll_us = 1000000;
    sc.tail_us = 60000000;
    sc.seed = (uint64_t)now_us();
    optind = 2;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            hosts_arg = optarg;
            break;
        case 'n':
            count = atoll(optarg);
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'o':
            out = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'm':
            mode = optarg;
            break;
        case 'v':
            sc.voucher = atoll(optarg);
            break;
        case 'b':
            sc.begin_us = atoll(optarg) * 1000;
            break;
        case 'O':
            sc.open_us = atoll(optarg) * 1000;
            break;
        case 'T':
            tokens = optarg;
            break;
        case 'p':
            people = atoll(optarg);
            break;
        case 'B':
            bots = atoll(optarg);
            break;
        case 'P':
            pow = optarg;
            break;
        case 'a':
            actors_csv = optarg;
            break;
        case 'c':
            conns = atoi(optarg);
            break;
        case 'w':
            sc.join_window_us = atoll(optarg) * 1000;
            break;
        case 'r':
            if (sscanf(optarg, "%lld,%lld", &lo, &hi) != 2 || lo < 0 || hi < lo)
                usage();
            break;
        case 'e':
            sc.bot_every_us = atoll(optarg) * 1000;
            break;
        case 'l':
            sc.poll_us = atoll(optarg) * 1000;
            break;
        case 'x':
            sc.tail_us = atoll(optarg) * 1000;
            break;
        case 's':
            sc.seed = strtoull(optarg, NULL, 10);
            break;
        default:
            usage();
        }
    }
    if (!hosts_arg || parse_hosts(hosts_arg) != 0 || !json || conns < 1)
        usage();
    if (strcmp(argv[1], "pow") == 0) {
        if (!out || count < 1 || threads < 1)
            usage();
        return run_pow((size_t)count, threads, conns, out, json);
    }
    if (!mode || (strcmp(mode, "queue") && strcmp(mode, "open")) || !tokens ||
        !actors_csv || sc.voucher <= 0 || sc.begin_us <= 0 || people < 0 ||
        bots < 0 || people + bots < 1 || sc.bot_every_us < 1000 ||
        sc.poll_us < 1000)
        usage();
    sc.queue = strcmp(mode, "queue") == 0;
    if (sc.queue && sc.open_us <= 0)
        usage();
    if (!sc.queue)
        sc.open_us = sc.begin_us;
    sc.reaction_lo_us = lo * 1000;
    sc.reaction_hi_us = hi * 1000;
    return run_sale(tokens, (size_t)people, (size_t)bots, pow, conns, json,
                    actors_csv);
}
