/*
 * crowd.c - the idle crowd of `make bench`'s crowd phase (bench/run.sh):
 * tens of thousands of keep-alive connections to one instance that each
 * make a request now and then, as the browsers of a sale's audience do
 * while they wait.
 *
 *   crowd --port P --conns N --voucher ID [--token T] [--seconds S]
 *         [--percent X] [--ready FILE] [--json FILE]
 *
 * Opens N connections to 127.0.0.1:P from the source addresses 127.0.0.2
 * to 127.0.0.20 in turn (one address has about 28,000 ephemeral ports),
 * at most 1,000 connecting at a time. Each sends one request as soon as
 * it is open, then X percent of the connections (default 1) send one a
 * second: each connection every 100/X seconds, its first at a random
 * moment of that period. The requests alternate between a voucher read
 * (GET /api/vouchers/ID) and a queue poll (GET /api/vouchers/ID/queue,
 * with "Authorization: Bearer T" when --token is given); any answer
 * counts as one. A connection the server closes is opened again.
 *
 * When every connection has been answered once, FILE (--ready) is
 * created: the crowd stands. After S seconds (default 60) or on SIGTERM
 * or SIGINT it stops and prints (and writes to --json) one JSON object:
 * the connections asked for and open, requests, answers by class, their
 * latency p50/p99/max in ms, connection errors and reconnections.
 *
 * A process holds at most its descriptor limit (raised to the hard
 * limit) of connections, so the crowd forks as many workers as that
 * takes; they share their counters through an anonymous shared mapping.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOURCES 19          /* 127.0.0.2 .. 127.0.0.20 */
#define CONNECTING_MAX 1000 /* connects in flight per worker */
#define SLOT_MS 50          /* the timer wheel's granularity */
#define HIST_MS 10000       /* latency histogram: 0.1 ms buckets to 10 s */
#define HIST_N (HIST_MS * 10 + 1)
#define HEAD_CAP 2048

enum state { C_IDLE, C_CONNECTING, C_WAITING, C_DOWN };

struct conn {
    int fd;
    uint8_t state;
    uint8_t kind;      /* the next request: 0 voucher read, 1 queue poll */
    bool answered;     /* its first request was answered */
    uint32_t head_len; /* bytes of the reply's head read so far */
    int64_t body_left; /* after the head: body bytes still to read */
    int64_t sent_us;
    int64_t due_ms; /* next request (idle) or reconnection (down) */
    int32_t next;   /* in its timer slot's list */
    char *head;     /* while waiting for a reply */
};

struct stats {
    atomic_long open, answered_first, requests, ok2xx, c4xx, c5xx, other;
    atomic_long connect_errors, closed_by_server, reconnects;
    atomic_uint hist[HIST_N];
};

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- one worker: conns [first, first + n) of the crowd ---- */

struct worker {
    struct conn *c;
    int n, first, epfd, connecting;
    int32_t *slot; /* head of each timer slot's list, -1 if empty */
    int slots;
    int64_t wheel_ms;  /* the slot time the wheel has reached */
    int32_t open_next; /* the next connection never opened yet */
    struct stats *st;
    const char *voucher, *token;
    uint16_t port;
    int64_t period_ms;
    unsigned seed;
};

static void timer_add(struct worker *w, int i, int64_t due_ms)
{
    int64_t t = due_ms < w->wheel_ms ? w->wheel_ms : due_ms;
    int s = (int)((t / SLOT_MS) % w->slots);

    w->c[i].due_ms = t;
    w->c[i].next = w->slot[s];
    w->slot[s] = i;
}

static void conn_open(struct worker *w, int i)
{
    struct conn *c = &w->c[i];
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = src;
    int one = 1, g = w->first + i;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.u32 = i};

    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        goto failed;
    setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(g % SOURCES));
    dst.sin_addr.s_addr = htonl(0x7f000001u);
    dst.sin_port = htons(w->port);
    if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
        (connect(c->fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 &&
         errno != EINPROGRESS) ||
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        goto failed;
    c->state = C_CONNECTING;
    w->connecting++;
    return;
failed:
    atomic_fetch_add(&w->st->connect_errors, 1);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = C_DOWN;
    timer_add(w, i, now_us() / 1000 + 1000);
}

/* The connection is gone: open it again in a second. */
static void conn_down(struct worker *w, int i, bool by_server)
{
    struct conn *c = &w->c[i];

    if (c->state == C_CONNECTING)
        w->connecting--;
    else if (c->state != C_DOWN)
        atomic_fetch_sub(&w->st->open, 1);
    if (by_server)
        atomic_fetch_add(&w->st->closed_by_server, 1);
    close(c->fd);
    c->fd = -1;
    free(c->head);
    c->head = NULL;
    c->state = C_DOWN;
    timer_add(w, i, now_us() / 1000 + 1000);
}

static void conn_send(struct worker *w, int i)
{
    struct conn *c = &w->c[i];
    char req[768];
    int n;

    if (c->kind == 0)
        n = snprintf(req, sizeof(req),
                     "GET /api/vouchers/%s HTTP/1.1\r\nHost: crowd\r\n"
                     "Accept: application/json\r\n\r\n",
                     w->voucher);
    else
        n = snprintf(req, sizeof(req),
                     "GET /api/vouchers/%s/queue HTTP/1.1\r\nHost: crowd\r\n"
                     "Accept: application/json\r\n%s%s%s\r\n",
                     w->voucher, w->token ? "Authorization: Bearer " : "",
                     w->token ? w->token : "", w->token ? "\r\n" : "");
    c->kind ^= 1;
    if (send(c->fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        conn_down(w, i, false);
        return;
    }
    atomic_fetch_add(&w->st->requests, 1);
    c->head = malloc(HEAD_CAP);
    if (!c->head)
        abort();
    c->head_len = 0;
    c->body_left = -1;
    c->sent_us = now_us();
    c->state = C_WAITING;
}

/* One reply is in: count it, and schedule the connection's next. */
static void conn_answered(struct worker *w, int i, unsigned status)
{
    struct conn *c = &w->c[i];
    int64_t now = now_us(), us = now - c->sent_us;
    long b = us / 100 < HIST_N - 1 ? (long)(us / 100) : HIST_N - 1;

    atomic_fetch_add(&w->st->hist[b], 1);
    if (status >= 200 && status < 300)
        atomic_fetch_add(&w->st->ok2xx, 1);
    else if (status >= 400 && status < 500)
        atomic_fetch_add(&w->st->c4xx, 1);
    else if (status >= 500)
        atomic_fetch_add(&w->st->c5xx, 1);
    else
        atomic_fetch_add(&w->st->other, 1);
    free(c->head);
    c->head = NULL;
    c->state = C_IDLE;
    if (!c->answered) {
        c->answered = true;
        atomic_fetch_add(&w->st->answered_first, 1);
        timer_add(w, i,
                  now / 1000 + (int64_t)(rand_r(&w->seed) % w->period_ms));
    } else {
        timer_add(w, i, now / 1000 + w->period_ms);
    }
}

static void conn_readable(struct worker *w, int i)
{
    struct conn *c = &w->c[i];
    char buf[8192];

    for (;;) {
        ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
        size_t at = 0;

        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_down(w, i, true);
            return;
        }
        if (r < 0)
            return;
        if (c->state != C_WAITING)
            continue; /* nothing is asked: ignore */
        if (c->body_left < 0) {
            size_t take = (size_t)r;
            char *end;

            if (take > HEAD_CAP - 1 - c->head_len)
                take = HEAD_CAP - 1 - c->head_len;
            memcpy(c->head + c->head_len, buf, take);
            c->head_len += (uint32_t)take;
            c->head[c->head_len] = '\0';
            end = strstr(c->head, "\r\n\r\n");
            if (!end) {
                if (c->head_len >= HEAD_CAP - 1)
                    conn_down(w, i, false);
                continue;
            }
            const char *cl = strcasestr(c->head, "\r\ncontent-length:");
            size_t head = (size_t)(end + 4 - c->head);

            c->body_left = cl ? strtoll(cl + 17, NULL, 10) : 0;
            /* What of this read lies after the head. */
            at = take - (c->head_len - head);
        }
        c->body_left -= (int64_t)((size_t)r - at);
        if (c->body_left <= 0) {
            unsigned status = 0;

            sscanf(c->head, "HTTP/1.%*d %u", &status);
            conn_answered(w, i, status);
        }
    }
}

static void conn_writable(struct worker *w, int i)
{
    struct conn *c = &w->c[i];
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
    int err = 0;
    socklen_t len = sizeof(err);

    if (c->state != C_CONNECTING)
        return;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
        atomic_fetch_add(&w->st->connect_errors, 1);
        conn_down(w, i, false);
        return;
    }
    w->connecting--;
    epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    atomic_fetch_add(&w->st->open, 1);
    conn_send(w, i);
}

/* Run the timers up to now: requests due, connections to open again. */
static void wheel_run(struct worker *w, int64_t now_ms)
{
    while (w->wheel_ms <= now_ms) {
        int s = (int)((w->wheel_ms / SLOT_MS) % w->slots);
        int32_t i = w->slot[s], keep = -1;

        w->slot[s] = -1;
        while (i >= 0) {
            struct conn *c = &w->c[i];
            int32_t next = c->next;

            if (c->due_ms > w->wheel_ms + SLOT_MS - 1) {
                c->next = keep; /* a later round of the wheel */
                keep = i;
            } else if (c->state == C_IDLE) {
                conn_send(w, i);
            } else if (c->state == C_DOWN) {
                if (w->connecting < CONNECTING_MAX) {
                    atomic_fetch_add(&w->st->reconnects, 1);
                    conn_open(w, i);
                } else {
                    c->next = keep;
                    keep = i;
                    c->due_ms += SLOT_MS;
                }
            }
            i = next;
        }
        /* Kept ones go back to this slot, which the wheel reaches next
         * round (or, when deferred, the next slot). */
        while (keep >= 0) {
            int32_t next = w->c[keep].next;
            timer_add(w, keep, w->c[keep].due_ms);
            keep = next;
        }
        if (w->wheel_ms + SLOT_MS > now_ms)
            break;
        w->wheel_ms += SLOT_MS;
    }
}

static void worker_run(struct worker *w)
{
    struct epoll_event ev[512];

    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    w->slots = (int)(w->period_ms / SLOT_MS) + 64;
    w->slot = malloc(sizeof(*w->slot) * (size_t)w->slots);
    w->c = calloc((size_t)w->n, sizeof(*w->c));
    if (w->epfd < 0 || !w->slot || !w->c)
        abort();
    for (int s = 0; s < w->slots; s++)
        w->slot[s] = -1;
    w->wheel_ms = now_us() / 1000 / SLOT_MS * SLOT_MS;
    while (!stopping) {
        int n;

        while (w->open_next < w->n && w->connecting < CONNECTING_MAX)
            conn_open(w, w->open_next++);
        n = epoll_wait(w->epfd, ev, 512, 10);
        for (int k = 0; k < n; k++) {
            int i = (int)ev[k].data.u32;

            if (w->c[i].fd < 0)
                continue;
            if (ev[k].events & (EPOLLOUT | EPOLLERR | EPOLLHUP) &&
                w->c[i].state == C_CONNECTING)
                conn_writable(w, i);
            else if (ev[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_readable(w, i);
        }
        wheel_run(w, now_us() / 1000);
    }
}

/* ---- the parent ---- */

static long total(struct stats *st, int workers, size_t off)
{
    long sum = 0;

    for (int k = 0; k < workers; k++)
        sum += atomic_load((atomic_long *)((char *)&st[k] + off));
    return sum;
}

#define TOTAL(field) total(st, workers, offsetof(struct stats, field))

static double percentile(struct stats *st, int workers, double p, long n)
{
    long want = (long)(p * (double)n + 0.5), seen = 0;

    if (n == 0)
        return 0;
    if (want < 1)
        want = 1;
    for (long b = 0; b < HIST_N; b++) {
        for (int k = 0; k < workers; k++)
            seen += atomic_load(&st[k].hist[b]);
        if (seen >= want)
            return (double)b / 10.0;
    }
    return HIST_MS;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: crowd --port P --conns N --voucher ID [--token T] "
            "[--seconds S] [--percent X] [--ready FILE] [--json FILE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"port", required_argument, NULL, 'p'},
        {"conns", required_argument, NULL, 'n'},
        {"voucher", required_argument, NULL, 'v'},
        {"token", required_argument, NULL, 't'},
        {"seconds", required_argument, NULL, 's'},
        {"percent", required_argument, NULL, 'x'},
        {"ready", required_argument, NULL, 'r'},
        {"json", required_argument, NULL, 'j'},
        {NULL, 0, NULL, 0}};
    struct worker proto = {0};
    const char *ready = NULL, *json = NULL;
    long conns = 0, seconds = 60, per_worker;
    double percent = 1;
    struct rlimit rl;
    struct stats *st;
    int workers, o;
    pid_t *pids;
    bool stood = false;
    int64_t t0 = now_us(), stood_ms = -1;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'p':
            proto.port = (uint16_t)atoi(optarg);
            break;
        case 'n':
            conns = atol(optarg);
            break;
        case 'v':
            proto.voucher = optarg;
            break;
        case 't':
            proto.token = optarg;
            break;
        case 's':
            seconds = atol(optarg);
            break;
        case 'x':
            percent = atof(optarg);
            break;
        case 'r':
            ready = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        default:
            usage();
        }
    }
    if (!proto.port || conns <= 0 || !proto.voucher || percent <= 0)
        usage();
    proto.period_ms = (int64_t)(100000.0 / percent);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    per_worker = (long)rl.rlim_cur - 64;
    if (per_worker < 1)
        per_worker = 1;
    workers = (int)((conns + per_worker - 1) / per_worker);
    st = mmap(NULL, sizeof(*st) * (size_t)workers, PROT_READ | PROT_WRITE,
              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pids = calloc((size_t)workers, sizeof(*pids));
    if (st == MAP_FAILED || !pids)
        abort();
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    for (int k = 0; k < workers; k++) {
        long first = conns * k / workers, last = conns * (k + 1) / workers;

        pids[k] = fork();
        if (pids[k] == 0) {
            struct worker w = proto;

            w.first = (int)first;
            w.n = (int)(last - first);
            w.st = &st[k];
            w.seed = (unsigned)(getpid() ^ (unsigned)t0);
            worker_run(&w);
            _exit(0);
        }
    }
    while (!stopping && now_us() - t0 < (int64_t)seconds * 1000000) {
        if (!stood && TOTAL(answered_first) >= conns) {
            stood = true;
            stood_ms = (now_us() - t0) / 1000;
            if (ready) {
                FILE *f = fopen(ready, "w");
                if (f) {
                    fprintf(f, "%ld\n", (long)stood_ms);
                    fclose(f);
                }
            }
            fprintf(stderr,
                    "crowd: %ld connections open and answered in %ld ms\n",
                    conns, (long)stood_ms);
        }
        usleep(50000);
    }
    long open_now = TOTAL(open);
    for (int k = 0; k < workers; k++)
        kill(pids[k], SIGTERM);
    for (int k = 0; k < workers; k++)
        waitpid(pids[k], NULL, 0);

    long answers = TOTAL(ok2xx) + TOTAL(c4xx) + TOTAL(c5xx) + TOTAL(other);
    char out[1024];
    snprintf(out, sizeof(out),
             "{\"conns\":%ld,\"open\":%ld,\"workers\":%d,\"stood_ms\":%ld,"
             "\"percent_per_s\":%.2f,\"requests\":%ld,\"answers\":%ld,"
             "\"ok_2xx\":%ld,\"client_4xx\":%ld,\"server_5xx\":%ld,"
             "\"other\":%ld,\"p50_ms\":%.1f,\"p99_ms\":%.1f,\"max_ms\":%.1f,"
             "\"connect_errors\":%ld,\"closed_by_server\":%ld,"
             "\"reconnects\":%ld,\"seconds\":%.1f}",
             conns, open_now, workers, (long)stood_ms, percent, TOTAL(requests),
             answers, TOTAL(ok2xx), TOTAL(c4xx), TOTAL(c5xx), TOTAL(other),
             percentile(st, workers, 0.50, answers),
             percentile(st, workers, 0.99, answers),
             percentile(st, workers, 1.0, answers), TOTAL(connect_errors),
             TOTAL(closed_by_server), TOTAL(reconnects),
             (double)(now_us() - t0) / 1e6);
    printf("%s\n", out);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "%s\n", out);
            fclose(f);
        }
    }
    return stood ? 0 : 1;
}
