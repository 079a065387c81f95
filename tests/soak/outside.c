/*
 * outside.c - the service outside seckilld that make soak stands in for:
 * the SMS webhook every instance POSTs its login codes to. A listening
 * socket and a thread per connection that reads one request, checks its
 * X-Signature and answers it the way the nemesis set: at once (204), slowly
 * (after 1 to 3 s), never (the connection held open until the caller gives
 * up or the fault heals), with 500, or not at all (the socket closed:
 * connections refused, opened again on the same port when healed).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <sodium.h>

#include "tests/soak/soak.h"

static struct {
    pthread_mutex_t mu; /* mode, slow_ms, fd */
    enum sms_mode mode;
    int slow_ms;
    int fd; /* -1 while refusing */
    uint16_t port;
    unsigned char key[32];
    pthread_t th;
    atomic_int stop;
    atomic_long requests, bad_signatures;
} sms = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static int listen_on(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(fd, 256) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static enum sms_mode mode_now(int *slow_ms)
{
    enum sms_mode m;

    pthread_mutex_lock(&sms.mu);
    m = sms.mode;
    if (slow_ms)
        *slow_ms = sms.slow_ms;
    pthread_mutex_unlock(&sms.mu);
    return m;
}

/* Whether the caller hung up (or the stop came), waiting up to ms. */
static bool gone_within(int c, int ms)
{
    struct pollfd p = {.fd = c, .events = POLLIN};
    char b;

    if (poll(&p, 1, ms) <= 0)
        return atomic_load(&sms.stop) != 0;
    return recv(c, &b, 1, MSG_PEEK) <= 0;
}

/* One request of connection c (the instances send one per connection
 * they open, and may send more on it). */
static bool serve_one(int c)
{
    char buf[4096], *body, *sig, hex[65];
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    const char *status = "204 No Content";
    size_t got = 0, want = 0;
    int slow_ms;
    ssize_t n;

    while (got < sizeof(buf) - 1) {
        n = read(c, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
        buf[got] = '\0';
        body = strstr(buf, "\r\n\r\n");
        if (body) {
            const char *cl = strcasestr(buf, "\r\nContent-Length:");

            want = (size_t)(body + 4 - buf) +
                   (cl ? strtoul(cl + 17, NULL, 10) : 0);
            if (got >= want)
                break;
        }
    }
    if (!want)
        return false;
    atomic_fetch_add(&sms.requests, 1);
    body = strstr(buf, "\r\n\r\n") + 4;
    crypto_auth_hmacsha256(mac, (const unsigned char *)body,
                           want - (size_t)(body - buf), sms.key);
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    sig = strcasestr(buf, "\r\nX-Signature: ");
    if (!sig || strncmp(sig + 15, hex, 64) != 0) {
        atomic_fetch_add(&sms.bad_signatures, 1);
        status = "401 Unauthorized";
    }
    switch (mode_now(&slow_ms)) {
    case SMS_HANG:
        /* Held until the caller gives up or the fault heals. */
        while (mode_now(NULL) == SMS_HANG)
            if (gone_within(c, 50))
                return false;
        break;
    case SMS_SLOW:
        if (gone_within(c, slow_ms))
            return false;
        break;
    case SMS_ERROR:
        status = "500 Internal Server Error";
        break;
    default:
        break;
    }
    snprintf(buf, sizeof(buf), "HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n",
             status);
    return write(c, buf, strlen(buf)) == (ssize_t)strlen(buf);
}

static void *conn_main(void *arg)
{
    int c = (int)(intptr_t)arg;

    while (!atomic_load(&sms.stop) && serve_one(c))
        ;
    close(c);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&sms.stop)) {
        struct pollfd p;
        pthread_t th;
        int fd, c;

        pthread_mutex_lock(&sms.mu);
        fd = sms.fd;
        pthread_mutex_unlock(&sms.mu);
        if (fd < 0) {
            sleep_ms(50);
            continue;
        }
        p = (struct pollfd){.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        if (pthread_create(&th, NULL, conn_main, (void *)(intptr_t)c) != 0) {
            close(c);
            continue;
        }
        pthread_detach(th);
    }
    return NULL;
}

int sms_sink_start(const char *secret_hex)
{
    if (util_hex_decode(secret_hex, sms.key, sizeof(sms.key)) != 0)
        return -1;
    for (int i = 0; i < 20 && sms.fd < 0; i++) {
        sms.port = it_free_port();
        sms.fd = listen_on(sms.port);
    }
    if (sms.fd < 0 || pthread_create(&sms.th, NULL, accept_main, NULL) != 0)
        return -1;
    return 0;
}

uint16_t sms_sink_port(void)
{
    return sms.port;
}

void sms_sink_set(enum sms_mode m, int slow_ms)
{
    pthread_mutex_lock(&sms.mu);
    if (m == SMS_REFUSE && sms.fd >= 0) {
        close(sms.fd);
        sms.fd = -1;
    } else if (m != SMS_REFUSE && sms.fd < 0) {
        /* Its port again: the instances were told this one. */
        for (int i = 0; i < 50 && sms.fd < 0; i++) {
            sms.fd = listen_on(sms.port);
            if (sms.fd < 0) {
                pthread_mutex_unlock(&sms.mu);
                sleep_ms(100);
                pthread_mutex_lock(&sms.mu);
            }
        }
        if (sms.fd < 0)
            soak_problem("sms-sink",
                         "the SMS sink could not listen on "
                         "port %u again",
                         (unsigned)sms.port);
    }
    sms.mode = m;
    sms.slow_ms = slow_ms;
    pthread_mutex_unlock(&sms.mu);
}

void sms_sink_counts(long *requests, long *bad_signatures)
{
    *requests = atomic_load(&sms.requests);
    *bad_signatures = atomic_load(&sms.bad_signatures);
}

void sms_sink_stop(void)
{
    atomic_store(&sms.stop, 1);
    pthread_join(sms.th, NULL);
    pthread_mutex_lock(&sms.mu);
    if (sms.fd >= 0)
        close(sms.fd);
    sms.fd = -1;
    pthread_mutex_unlock(&sms.mu);
}
