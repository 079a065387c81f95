/*
 * test_lock_rcluster.c - the lock's Redis Cluster client (lock/rcluster.c)
 * keeps a connection and a listener thread per primary of the slot map:
 * fed slot map after slot map whose primaries have new addresses (pods
 * that come back elsewhere), it serves every new primary and keeps only
 * the current ones, while a node that left the map stays whole for a
 * call still in flight on it and is closed once that call is done. The
 * maps are installed directly (rconn_cluster_map_install()); the one
 * call in flight goes to a fake Redis on loopback in this process that
 * answers the connection's set-up and holds the call's reply back.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "lock/rconn.h"

/* Primaries in each map; maps fed, each with new addresses: past the
 * 128 nodes the client once kept at most. */
#define PRIMARIES 3
#define MAPS 200

/* Entries of a /proc/self directory (tasks, file descriptors). */
static int proc_count(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int threads_now(void)
{
    return proc_count("/proc/self/task");
}

/* Threads a sanitizer's runtime may start of its own at any time (TSan's
 * background thread): a margin on every count of threads. */
#define RUNTIME_THREADS 2

static int fds_now(void)
{
    return proc_count("/proc/self/fd") - 1; /* the opendir's own */
}

/* Map number i: PRIMARIES primaries at addresses no other map uses
 * (loopback, a port nothing listens on: nobody connects to them here),
 * each owning an equal run of slots. */
static void map_make(struct redis_cluster_map *m, int i)
{
    memset(m, 0, sizeof(*m));
    m->nnodes = PRIMARIES;
    for (int j = 0; j < PRIMARIES; j++) {
        int a = i * PRIMARIES + j + 1;
        snprintf(m->nodes[j].host, sizeof(m->nodes[j].host), "127.1.%d.%d",
                 a / 256, a % 256);
        m->nodes[j].port = 1;
    }
    for (unsigned s = 0; s < REDIS_SLOTS; s++)
        m->slot_node[s] = (uint16_t)(s * PRIMARIES / REDIS_SLOTS);
}

/* The first slot primary j of a map_make() map owns. */
static unsigned first_slot(int j)
{
    return (unsigned)((j * REDIS_SLOTS + PRIMARIES - 1) / PRIMARIES);
}

struct fixture {
    struct rconn_hub hub;
    struct redis_server seed;
    struct rconn_cluster *cl;
};

static struct fixture *fixture_new(const char *host, unsigned port)
{
    struct fixture *f = calloc(1, sizeof(*f));

    rconn_hub_init(&f->hub);
    f->seed.host = host;
    f->seed.port = port;
    f->cl = rconn_cluster_new(&f->seed, 1, &f->hub, 500);
    return f;
}

static void fixture_free(struct fixture *f)
{
    rconn_cluster_free(f->cl);
    rconn_hub_destroy(&f->hub);
    free(f);
}

/* Every primary of every map gets an entry: a listener for waiters on
 * its slots (and with it a connection for calls). */
static void test_every_primary_served(void **state)
{
    struct fixture *f = fixture_new("127.0.0.1", 1);
    struct redis_cluster_map *m = malloc(sizeof(*m));

    (void)state;
    for (int i = 0; i < MAPS; i++) {
        struct rconn_psub *ps[PRIMARIES];

        map_make(m, i);
        rconn_cluster_map_install(f->cl, m);
        for (int j = 0; j < PRIMARIES; j++) {
            ps[j] = rconn_cluster_psub(f->cl, first_slot(j));
            if (!ps[j])
                fail_msg("map %d: primary %s:%u (address %d) has no entry", i,
                         m->nodes[j].host, m->nodes[j].port,
                         i * PRIMARIES + j + 1);
            for (int k = 0; k < j; k++)
                assert_ptr_not_equal(ps[k], ps[j]);
        }
        for (int j = 0; j < PRIMARIES; j++)
            rconn_cluster_psub_put(f->cl, ps[j]);
    }
    free(m);
    fixture_free(f);
}

/* Only the current primaries are kept: as many nodes, listener threads
 * and descriptors after the last map as after the first. */
static void test_nodes_bounded(void **state)
{
    struct fixture *f = fixture_new("127.0.0.1", 1);
    struct redis_cluster_map *m = malloc(sizeof(*m));
    int threads0 = threads_now(), fds0 = fds_now();
    int fds1 = 0;

    (void)state;
    for (int i = 0; i < MAPS; i++) {
        map_make(m, i);
        rconn_cluster_map_install(f->cl, m);
        if (i == 0) {
            fds1 = fds_now();
            /* A listener thread per primary, which holds descriptors. */
            assert_true(threads_now() >= threads0 + PRIMARIES);
            assert_true(fds1 > fds0);
        }
        if (threads_now() > threads0 + PRIMARIES + RUNTIME_THREADS)
            fail_msg("map %d: %d listener threads for %d primaries", i,
                     threads_now() - threads0, PRIMARIES);
        if (fds_now() != fds1)
            fail_msg("map %d: %d descriptors more than after the first map", i,
                     fds_now() - fds1);
        assert_int_equal(PRIMARIES, rconn_cluster_nodes(f->cl));
    }
    free(m);
    fixture_free(f);
    assert_true(threads_now() <= threads0 + RUNTIME_THREADS);
    assert_int_equal(fds0, fds_now());
}

/* ---- a fake Redis for one call in flight ---- */

/*
 * Answers every command on every connection with a 40-character string
 * (what PING and SCRIPT LOAD need), except EVALSHA and EVAL, which it
 * counts and answers with :1 only once released.
 */
struct fake {
    int lfd;
    unsigned port;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int conns; /* open now */
    int evals; /* received */
    int release, stop;
};

#define FAKE_CONNS 8

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void *fake_main(void *arg)
{
    struct fake *fk = arg;
    int fd[FAKE_CONNS];
    redisReader *rd[FAKE_CONNS];
    int held[FAKE_CONNS];
    int n = 0;

    for (;;) {
        struct pollfd p[FAKE_CONNS + 1];

        pthread_mutex_lock(&fk->mu);
        int stop = fk->stop, release = fk->release;
        pthread_mutex_unlock(&fk->mu);
        if (stop)
            break;
        for (int i = 0; i < n; i++)
            if (release && held[i] > 0) {
                for (; held[i] > 0; held[i]--)
                    write_all(fd[i], ":1\r\n", 4);
            }
        p[0] = (struct pollfd){.fd = fk->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++)
            p[i + 1] = (struct pollfd){.fd = fd[i], .events = POLLIN};
        if (poll(p, (nfds_t)n + 1, 20) <= 0)
            continue;
        if ((p[0].revents & POLLIN) && n < FAKE_CONNS) {
            fd[n] = accept(fk->lfd, NULL, NULL);
            if (fd[n] >= 0) {
                rd[n] = redisReaderCreate();
                held[n] = 0;
                n++;
                pthread_mutex_lock(&fk->mu);
                fk->conns++;
                pthread_cond_broadcast(&fk->cv);
                pthread_mutex_unlock(&fk->mu);
            }
        }
        for (int i = n - 1; i >= 0; i--) {
            char buf[4096];
            ssize_t got;
            void *cmd = NULL;

            if (!(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            got = read(fd[i], buf, sizeof(buf));
            if (got <= 0) {
                close(fd[i]);
                redisReaderFree(rd[i]);
                fd[i] = fd[n - 1];
                rd[i] = rd[n - 1];
                held[i] = held[n - 1];
                n--;
                pthread_mutex_lock(&fk->mu);
                fk->conns--;
                pthread_cond_broadcast(&fk->cv);
                pthread_mutex_unlock(&fk->mu);
                continue;
            }
            redisReaderFeed(rd[i], buf, (size_t)got);
            while (redisReaderGetReply(rd[i], &cmd) == REDIS_OK && cmd) {
                redisReply *c = cmd;
                const char *name =
                    c->type == REDIS_REPLY_ARRAY && c->elements > 0
                        ? c->element[0]->str
                        : "";

                if (strncasecmp(name, "EVAL", 4) == 0) {
                    held[i]++;
                    pthread_mutex_lock(&fk->mu);
                    fk->evals++;
                    pthread_cond_broadcast(&fk->cv);
                    pthread_mutex_unlock(&fk->mu);
                } else {
                    write_all(fd[i],
                              "$40\r\n"
                              "0123456789012345678901234567890123456789\r\n",
                              47);
                }
                freeReplyObject(c);
                cmd = NULL;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        close(fd[i]);
        redisReaderFree(rd[i]);
    }
    return NULL;
}

static void fake_start(struct fake *fk)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);

    memset(fk, 0, sizeof(*fk));
    pthread_mutex_init(&fk->mu, NULL);
    pthread_cond_init(&fk->cv, NULL);
    fk->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fk->lfd >= 0);
    assert_int_equal(0, bind(fk->lfd, (struct sockaddr *)&a, sizeof(a)));
    assert_int_equal(0, listen(fk->lfd, 8));
    assert_int_equal(0, getsockname(fk->lfd, (struct sockaddr *)&a, &len));
    fk->port = ntohs(a.sin_port);
    assert_int_equal(0, pthread_create(&fk->thread, NULL, fake_main, fk));
}

static void fake_stop(struct fake *fk)
{
    pthread_mutex_lock(&fk->mu);
    fk->stop = 1;
    pthread_mutex_unlock(&fk->mu);
    pthread_join(fk->thread, NULL);
    close(fk->lfd);
    pthread_cond_destroy(&fk->cv);
    pthread_mutex_destroy(&fk->mu);
}

/* Wait up to 10 s for *v to become want. */
static int fake_wait(struct fake *fk, const int *v, int want)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&fk->mu);
    while (*v != want &&
           pthread_cond_timedwait(&fk->cv, &fk->mu, &ts) != ETIMEDOUT) {
    }
    int got = *v;
    pthread_mutex_unlock(&fk->mu);
    return got;
}

struct caller {
    struct rconn_cluster *cl;
    int err;
    long long answer;
};

static void *call_main(void *arg)
{
    struct caller *c = arg;
    struct rconn_call call;
    redisReply *r;

    c->answer = -1;
    c->err = rconn_cluster_send(c->cl, &call, 0, RCONN_PING, 0, 0, NULL, NULL);
    if (c->err)
        return NULL;
    r = rconn_cluster_wait(c->cl, &call, &c->err);
    if (r && r->type == REDIS_REPLY_INTEGER)
        c->answer = r->integer;
    freeReplyObject(r);
    return NULL;
}

/*
 * A primary that leaves the map while a call waits on it and a waiter
 * listens on it: both keep it (its connection stays open, the call gets
 * its answer); once they are done its connection closes, and the next
 * map keeps only the current primaries.
 */
static void test_node_in_use_kept(void **state)
{
    struct fake fk;
    struct fixture *f;
    struct redis_cluster_map *m = calloc(1, sizeof(*m));
    struct caller c;
    pthread_t t;

    (void)state;
    fake_start(&fk);
    f = fixture_new("127.0.0.1", fk.port);
    int threads0 = threads_now();

    m->nnodes = 1;
    snprintf(m->nodes[0].host, sizeof(m->nodes[0].host), "127.0.0.1");
    m->nodes[0].port = fk.port;
    for (unsigned s = 0; s < REDIS_SLOTS; s++)
        m->slot_node[s] = 0;
    rconn_cluster_map_install(f->cl, m);
    struct rconn_psub *ps = rconn_cluster_psub(f->cl, 0);
    assert_non_null(ps);

    c.cl = f->cl;
    assert_int_equal(0, pthread_create(&t, NULL, call_main, &c));
    assert_int_equal(1, fake_wait(&fk, &fk.evals, 1));

    /* The pod moved: the slots are elsewhere now. */
    map_make(m, 0);
    rconn_cluster_map_install(f->cl, m);
    assert_int_equal(PRIMARIES + 1, rconn_cluster_nodes(f->cl));
    assert_int_equal(1, fake_wait(&fk, &fk.conns, 1));

    pthread_mutex_lock(&fk.mu);
    fk.release = 1;
    pthread_mutex_unlock(&fk.mu);
    assert_int_equal(0, pthread_join(t, NULL));
    assert_int_equal(0, c.err);
    assert_int_equal(1, c.answer);

    /* The waiter still listens there. */
    assert_int_equal(PRIMARIES + 1, rconn_cluster_nodes(f->cl));
    assert_int_equal(1, fake_wait(&fk, &fk.conns, 1));
    rconn_cluster_psub_put(f->cl, ps);

    /* Nobody uses it any more: closed at once, forgotten at the next
     * map. */
    assert_int_equal(0, fake_wait(&fk, &fk.conns, 0));
    map_make(m, 1);
    rconn_cluster_map_install(f->cl, m);
    assert_int_equal(PRIMARIES, rconn_cluster_nodes(f->cl));
    assert_true(threads_now() <= threads0 + PRIMARIES + RUNTIME_THREADS);

    free(m);
    fixture_free(f);
    fake_stop(&fk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_primary_served),
        cmocka_unit_test(test_nodes_bounded),
        cmocka_unit_test(test_node_in_use_kept),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
