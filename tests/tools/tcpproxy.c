/*
 * tcpproxy.c - a loopback TCP proxy for fault tests: it forwards every
 * connection made to 127.0.0.1:LISTEN to TARGET, and takes commands on a
 * control port to make that network slow or broken (tc netem is not
 * available on these machines).
 *
 *   tcpproxy --listen PORT --target HOST:PORT --control PORT
 *
 * Once both ports listen it prints one line "ready" on stdout. The control
 * port speaks lines of text, one command per line, each answered with one
 * line "ok ..." or "err ...":
 *
 *   latency MS   hold every chunk MS milliseconds before forwarding it
 *                (each direction: a round trip gets 2 * MS)
 *   loss PCT     lose PCT percent (0..90) of the chunks, as TCP would
 *                see lost packets: a lost chunk arrives after a
 *                retransmission timeout (200 ms, doubling while it is
 *                lost again), never out of order and never missing
 *   stall        stop forwarding, like a partition: nothing is read or
 *                written, also not a FIN, and new connections are
 *                accepted and stalled too
 *   resume       forward again (what was held is delivered)
 *   mute         forward requests but drop every answer: the server
 *                sees the commands and runs them, the client never hears
 *                back (a reply lost on the way)
 *   unmute       deliver answers again (the ones dropped are gone)
 *   cut          reset (RST) every open connection, both sides
 *   refuse       reset new connections as soon as they are accepted
 *   accept       take new connections again
 *   heal         latency 0, loss 0, resume, accept, unmute
 *   stats        "ok open=N accepted=N refused=N cut=N bytes=N"
 *
 * e.g. `exec 3<>/dev/tcp/127.0.0.1/$CTL; echo stall >&3; head -1 <&3`.
 * Two threads per connection, blocking I/O: simple, and plenty for tests.
 * Test tool only: it trusts its control port, which listens on loopback.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#define CHUNK 16384
/* How often a blocked pump looks at the proxy's state. */
#define TICK_MS 20
/* Linux's least retransmission timeout: what one lost segment costs. */
#define RTO_MS 200

struct conn {
    int cfd, sfd; /* client side, server side */
    atomic_int dead;
    atomic_int refs; /* the two pumps */
    struct conn *next;
};

struct pump {
    struct conn *c;
    int from, to;
};

static atomic_int latency_ms;
static atomic_int loss_pct;
static atomic_int stalled;
static atomic_int muted;
static atomic_int refusing;
static atomic_long n_accepted, n_refused, n_cut, n_bytes;
static atomic_int n_open;

static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns;

static struct sockaddr_storage target;
static socklen_t target_len;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int listen_on(unsigned port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(fd, 512) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Close fd so that the peer sees a reset, not a FIN. */
static void close_reset(int fd)
{
    struct linger lg = {1, 0};

    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

static void conn_unlink(struct conn *c)
{
    pthread_mutex_lock(&conns_mu);
    for (struct conn **p = &conns; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&conns_mu);
}

/* A pump is done: the last one out closes both sockets. */
static void conn_put(struct conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    conn_unlink(c);
    if (atomic_load(&c->dead)) {
        close_reset(c->cfd);
        close_reset(c->sfd);
    } else {
        close(c->cfd);
        close(c->sfd);
    }
    atomic_fetch_sub(&n_open, 1);
    free(c);
}

/* Wait while stalled; false if the connection died meanwhile. */
static bool wait_unstalled(struct conn *c)
{
    while (atomic_load(&stalled) && !atomic_load(&c->dead))
        sleep_ms(TICK_MS);
    return !atomic_load(&c->dead);
}

static bool write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

/* Kill both directions of c: the other pump notices within a tick. */
static void conn_kill(struct conn *c)
{
    atomic_store(&c->dead, 1);
    shutdown(c->cfd, SHUT_RD);
    shutdown(c->sfd, SHUT_RD);
}

static void *pump_run(void *arg)
{
    struct pump *p = arg;
    struct conn *c = p->c;
    char *buf = malloc(CHUNK);
    unsigned seed = (unsigned)(uintptr_t)p ^ (unsigned)time(NULL);

    while (buf && wait_unstalled(c)) {
        struct pollfd pfd = {.fd = p->from, .events = POLLIN};
        int r = poll(&pfd, 1, TICK_MS);
        ssize_t n;

        if (r == 0 || (r < 0 && errno == EINTR))
            continue;
        if (atomic_load(&c->dead) || atomic_load(&stalled))
            continue;
        n = recv(p->from, buf, CHUNK, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0) {
            /* An orderly close travels on (half-close). */
            shutdown(p->to, SHUT_WR);
            break;
        }
        if (n < 0) {
            conn_kill(c);
            break;
        }
        int lat = atomic_load(&latency_ms);

        for (int rto = RTO_MS, pct = atomic_load(&loss_pct);
             pct > 0 && (int)(rand_r(&seed) % 100) < pct; rto *= 2)
            lat += rto;
        for (int waited = 0; waited < lat && !atomic_load(&c->dead);
             waited += TICK_MS)
            sleep_ms(lat - waited < TICK_MS ? lat - waited : TICK_MS);
        /* Muted: the answer is read off the server's socket and lost. */
        if (p->from == c->sfd && atomic_load(&muted))
            continue;
        if (!wait_unstalled(c) || !write_all(p->to, buf, (size_t)n)) {
            conn_kill(c);
            break;
        }
        atomic_fetch_add(&n_bytes, n);
    }
    free(buf);
    conn_put(c);
    free(p);
    return NULL;
}

static void start_pump(struct conn *c, int from, int to)
{
    struct pump *p = malloc(sizeof(*p));
    pthread_t th;

    if (!p)
        abort();
    p->c = c;
    p->from = from;
    p->to = to;
    if (pthread_create(&th, NULL, pump_run, p) != 0)
        abort();
    pthread_detach(th);
}

static int connect_target(void)
{
    int fd = socket(target.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&target, target_len) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void *accept_run(void *arg)
{
    int lfd = *(int *)arg;

    for (;;) {
        int one = 1, sfd, cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        struct conn *c;

        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            perror("tcpproxy: accept");
            exit(1);
        }
        atomic_fetch_add(&n_accepted, 1);
        if (atomic_load(&refusing)) {
            atomic_fetch_add(&n_refused, 1);
            close_reset(cfd);
            continue;
        }
        sfd = connect_target();
        if (sfd < 0) {
            close_reset(cfd);
            continue;
        }
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c = calloc(1, sizeof(*c));
        if (!c)
            abort();
        c->cfd = cfd;
        c->sfd = sfd;
        atomic_init(&c->refs, 2);
        pthread_mutex_lock(&conns_mu);
        c->next = conns;
        conns = c;
        pthread_mutex_unlock(&conns_mu);
        atomic_fetch_add(&n_open, 1);
        start_pump(c, cfd, sfd);
        start_pump(c, sfd, cfd);
    }
    return NULL;
}

static int cut_all(void)
{
    int n = 0;

    pthread_mutex_lock(&conns_mu);
    for (struct conn *c = conns; c; c = c->next) {
        if (!atomic_load(&c->dead)) {
            conn_kill(c);
            n++;
        }
    }
    pthread_mutex_unlock(&conns_mu);
    atomic_fetch_add(&n_cut, n);
    return n;
}

/* Run one control command; writes the answer line into out. */
static void control_command(char *line, char *out, size_t len)
{
    char *arg = strchr(line, ' ');

    if (arg)
        *arg++ = '\0';
    if (strcmp(line, "latency") == 0 && arg) {
        char *end;
        long ms = strtol(arg, &end, 10);

        if (*end || ms < 0 || ms > 600000) {
            snprintf(out, len, "err latency wants 0..600000 ms\n");
            return;
        }
        atomic_store(&latency_ms, (int)ms);
        snprintf(out, len, "ok latency %ld\n", ms);
    } else if (strcmp(line, "loss") == 0 && arg) {
        char *end;
        long pct = strtol(arg, &end, 10);

        if (*end || pct < 0 || pct > 90) {
            snprintf(out, len, "err loss wants 0..90 percent\n");
            return;
        }
        atomic_store(&loss_pct, (int)pct);
        snprintf(out, len, "ok loss %ld\n", pct);
    } else if (strcmp(line, "stall") == 0) {
        atomic_store(&stalled, 1);
        snprintf(out, len, "ok stalled\n");
    } else if (strcmp(line, "resume") == 0) {
        atomic_store(&stalled, 0);
        snprintf(out, len, "ok resumed\n");
    } else if (strcmp(line, "mute") == 0) {
        atomic_store(&muted, 1);
        snprintf(out, len, "ok muted\n");
    } else if (strcmp(line, "unmute") == 0) {
        atomic_store(&muted, 0);
        snprintf(out, len, "ok unmuted\n");
    } else if (strcmp(line, "cut") == 0) {
        snprintf(out, len, "ok cut %d\n", cut_all());
    } else if (strcmp(line, "refuse") == 0) {
        atomic_store(&refusing, 1);
        snprintf(out, len, "ok refusing\n");
    } else if (strcmp(line, "accept") == 0) {
        atomic_store(&refusing, 0);
        snprintf(out, len, "ok accepting\n");
    } else if (strcmp(line, "heal") == 0) {
        atomic_store(&latency_ms, 0);
        atomic_store(&loss_pct, 0);
        atomic_store(&stalled, 0);
        atomic_store(&refusing, 0);
        atomic_store(&muted, 0);
        snprintf(out, len, "ok healed\n");
    } else if (strcmp(line, "stats") == 0) {
        snprintf(out, len,
                 "ok open=%d accepted=%ld refused=%ld cut=%ld bytes=%ld\n",
                 atomic_load(&n_open), atomic_load(&n_accepted),
                 atomic_load(&n_refused), atomic_load(&n_cut),
                 atomic_load(&n_bytes));
    } else {
        snprintf(out, len, "err unknown command\n");
    }
}

static void *control_client_run(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[256], out[256];
    size_t have = 0;

    for (;;) {
        ssize_t n = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
        char *nl;

        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        while ((nl = strchr(buf, '\n'))) {
            *nl = '\0';
            if (nl > buf && nl[-1] == '\r')
                nl[-1] = '\0';
            control_command(buf, out, sizeof(out));
            fprintf(stderr, "tcpproxy: %s -> %s", buf, out);
            if (!write_all(fd, out, strlen(out)))
                goto out;
            have -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, have + 1);
        }
        if (have == sizeof(buf) - 1)
            break; /* a line too long */
    }
out:
    close(fd);
    return NULL;
}

static int parse_port(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    return *s && !*end && v > 0 && v < 65536 ? (int)v : -1;
}

static int resolve_target(const char *spec)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;

    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host) ||
        parse_port(colon + 1) < 0)
        return -1;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    memcpy(&target, ai->ai_addr, ai->ai_addrlen);
    target_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: tcpproxy --listen PORT --target HOST:PORT "
                    "--control PORT\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int listen_port = -1, control_port = -1, lfd, cfd;
    const char *target_spec = NULL;
    pthread_t th;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            listen_port = parse_port(argv[i + 1]);
        else if (strcmp(argv[i], "--control") == 0)
            control_port = parse_port(argv[i + 1]);
        else if (strcmp(argv[i], "--target") == 0)
            target_spec = argv[i + 1];
        else
            usage();
    }
    if (argc % 2 == 0 || listen_port < 0 || control_port < 0 || !target_spec)
        usage();
    if (resolve_target(target_spec) != 0) {
        fprintf(stderr, "tcpproxy: bad target %s\n", target_spec);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    lfd = listen_on((unsigned)listen_port);
    cfd = listen_on((unsigned)control_port);
    if (lfd < 0 || cfd < 0) {
        perror("tcpproxy: listen");
        return 1;
    }
    if (pthread_create(&th, NULL, accept_run, &lfd) != 0)
        return 1;
    pthread_detach(th);
    printf("ready\n");
    fflush(stdout);
    fprintf(stderr, "tcpproxy: 127.0.0.1:%d -> %s, control 127.0.0.1:%d\n",
            listen_port, target_spec, control_port);
    for (;;) {
        int fd = accept4(cfd, NULL, NULL, SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("tcpproxy: accept control");
            return 1;
        }
        if (pthread_create(&th, NULL, control_client_run,
                           (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(th);
    }
}
