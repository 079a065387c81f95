/*
 * test_lock_replica.c - the Redis lock across a failover, with and without
 * ?replicas=N (lock/redis.c: WAIT after each acquire).
 *
 * Each test starts its own primary and replica (redis-server on free
 * loopback ports, no persistence, in a scratch directory); the replica
 * reaches the primary through a tests/tools/tcpproxy, so that the test can
 * hold replication back (stall) the way a lagging or partitioned replica
 * would. A failover is: SIGKILL the primary, cut the replication link,
 * REPLICAOF NO ONE on the replica, and clients move to it.
 *
 *   - Without replicas: a lock taken while replication lags is gone after
 *     the failover, and a second client takes it while the first still
 *     believes it holds it (asynchronous replication's known flaw).
 *   - With replicas=1: the acquire returns only once the replica has the
 *     lock, so after the failover the second client is refused; while
 *     replication is held back the acquire fails with -EIO instead, and
 *     leaves no lock behind on the primary.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "lock/lock.h"
#include "tests/it/harness.h"

/* Each lock call's timeout (?timeout_ms=): WAIT waits half of it. */
#define TIMEOUT_MS 1000
/* Delay on the replication link, each way: a replica that lags. Its round
 * trip fits well within WAIT's half timeout. */
#define LAG_MS 100
#define LEASE_MS 30000
/* How long a replica may take to sync with a fresh primary. */
#define SYNC_MS 15000

struct pair {
    pid_t primary, replica;
    uint16_t primary_port, replica_port;
    struct it_proxy link; /* the replica's way to the primary */
    char dir[64];         /* scratch: both servers' working directories */
};

/* The running test's servers, stopped by the teardown. */
static struct pair cur;

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static redisContext *redis_at(uint16_t port)
{
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);

    if (!rc || rc->err)
        fail_msg("cannot reach redis on %u: %s", (unsigned)port,
                 rc ? rc->errstr : "no memory");
    redisSetTimeout(rc, tv);
    return rc;
}

/* The reply to one command as a string ("" for nil), into buf. */
static const char *redis_str(uint16_t port, char *buf, size_t size,
                             const char *fmt, ...)
{
    redisContext *rc = redis_at(port);
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (!r)
        fail_msg("redis on %u: %s", (unsigned)port, rc->errstr);
    snprintf(buf, size, "%s",
             r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS
                 ? r->str
                 : "");
    freeReplyObject(r);
    redisFree(rc);
    return buf;
}

static pid_t start_redis(const struct pair *p, uint16_t port,
                         const char *replicaof, const char *tag)
{
    char dir[96], log[IT_PATH_MAX + 64];
    pid_t pid;

    snprintf(dir, sizeof(dir), "%s/%s", p->dir, tag);
    assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
    snprintf(log, sizeof(log), "%s/replica-test-%s-%u.log", it_log_dir(), tag,
             (unsigned)port);
    const char *const extra[] = {"--dir",
                                 dir,
                                 "--repl-diskless-load",
                                 "on-empty-db",
                                 replicaof ? "--replicaof" : NULL,
                                 replicaof,
                                 NULL};
    pid = it_redis_start_with(port, log, NULL, extra);
    if (pid < 0)
        fail_msg("redis-server on %u did not start; log %s", (unsigned)port,
                 log);
    return pid;
}

/* A primary, a proxy in front of it, a replica through the proxy, in
 * sync. */
static void pair_start(struct pair *p)
{
    char replicaof[64], info[4096];
    int64_t waited = 0;

    memset(p, 0, sizeof(*p));
    snprintf(p->dir, sizeof(p->dir), "/tmp/it-lock-replica-XXXXXX");
    assert_non_null(mkdtemp(p->dir));
    p->primary_port = it_free_port();
    p->primary = start_redis(p, p->primary_port, NULL, "primary");
    assert_int_equal(it_proxy_start(&p->link, "replication", p->primary_port),
                     0);
    p->replica_port = it_free_port();
    snprintf(replicaof, sizeof(replicaof), "127.0.0.1 %u",
             (unsigned)p->link.port);
    p->replica = start_redis(p, p->replica_port, replicaof, "replica");
    for (;;) {
        redis_str(p->replica_port, info, sizeof(info), "INFO replication");
        if (strstr(info, "master_link_status:up"))
            break;
        if (waited >= SYNC_MS)
            fail_msg("replica did not sync in %d ms:\n%s", SYNC_MS, info);
        sleep_ms(50);
        waited += 50;
    }
}

static void kill_wait(pid_t *pid)
{
    int status;

    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    it_wait_exit(*pid, 5000, &status);
    *pid = 0;
}

/*
 * The primary dies: SIGKILL it, cut the replication link (so that nothing
 * it held back arrives later), and promote the replica.
 */
static void pair_failover(struct pair *p)
{
    char buf[64];

    kill_wait(&p->primary);
    assert_int_equal(it_proxy_ctl(&p->link, "cut"), 0);
    it_proxy_stop(&p->link);
    assert_string_equal(
        redis_str(p->replica_port, buf, sizeof(buf), "REPLICAOF NO ONE"), "OK");
}

static int pair_stop(void **state)
{
    struct pair *p = &cur;
    char cmd[128];

    (void)state;
    kill_wait(&p->replica);
    kill_wait(&p->primary);
    it_proxy_stop(&p->link);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
    if (p->dir[0] && system(cmd) != 0)
        fprintf(stderr, "test_lock_replica: could not remove %s\n", p->dir);
    p->dir[0] = '\0';
    return 0;
}

static struct lock_client *client_at(uint16_t port, unsigned replicas)
{
    char url[128];
    struct lock_client *c = NULL;

    snprintf(url, sizeof(url),
             "redis://127.0.0.1:%u/0?timeout_ms=%u&replicas=%u", (unsigned)port,
             TIMEOUT_MS, replicas);
    assert_int_equal(lock_client_open(url, NULL, &c), 0);
    return c;
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static enum lock_status acquire(struct lock *l, int *rc)
{
    enum lock_status st = LOCK_BUSY;

    *rc = lock_acquire(l, 0, LEASE_MS, &st);
    return st;
}

/*
 * Without replicas: the lock is taken while replication lags, the primary
 * dies, and on the promoted replica a second client takes the same lock:
 * two holders, the first none the wiser.
 */
static void test_failover_loses_lock(void **state)
{
    struct pair *p = &cur;
    struct lock_client *c1, *c2;
    struct lock *l1, *l2;
    char buf[64];
    int rc;

    (void)state;
    pair_start(p);
    c1 = client_at(p->primary_port, 0);
    assert_int_equal(lock_new(c1, "order:42", &l1), 0);
    assert_int_equal(it_proxy_ctl(&p->link, "stall"), 0);
    assert_int_equal(acquire(l1, &rc), LOCK_ACQUIRED);
    assert_int_equal(rc, 0);
    assert_string_equal(
        redis_str(p->primary_port, buf, sizeof(buf), "GET order:42"),
        lock_owner(l1));

    pair_failover(p);
    c2 = client_at(p->replica_port, 0);
    assert_int_equal(lock_new(c2, "order:42", &l2), 0);
    assert_int_equal(acquire(l2, &rc), LOCK_ACQUIRED);
    assert_int_equal(rc, 0);
    print_message("      without replicas: after the failover a second "
                  "client holds order:42 too (first still holds %u, lost "
                  "%d)\n",
                  lock_holds(l1), lock_lost(l1));
    assert_int_equal(lock_holds(l1), 1);
    lock_free(l2);
    lock_client_close(c2);
    lock_free(l1);
    lock_client_close(c1);
}

/*
 * With replicas=1 and a replica that lags by LAG_MS: the acquire returns
 * once the replica has the lock; right after it the primary dies (what it
 * still had in flight is lost), and on the promoted replica the lock is
 * still there: a second client is refused. Without the confirmation the
 * acquire would return before the lock left the primary. The same holds
 * for a write lock of a read-write lock (every kind waits).
 */
static void test_failover_keeps_confirmed_lock(void **state)
{
    struct pair *p = &cur;
    struct lock_client *c1, *c2;
    struct lock *l1, *l2, *r1, *w1, *r2, *w2;
    char buf[64];
    int rc;

    (void)state;
    pair_start(p);
    c1 = client_at(p->primary_port, 1);
    assert_int_equal(lock_new(c1, "order:42", &l1), 0);
    assert_int_equal(lock_rw_new(c1, "order:43", &r1, &w1), 0);
    snprintf(buf, sizeof(buf), "latency %d", LAG_MS);
    assert_int_equal(it_proxy_ctl(&p->link, buf), 0);
    assert_int_equal(acquire(l1, &rc), LOCK_ACQUIRED);
    assert_int_equal(rc, 0);
    assert_int_equal(acquire(w1, &rc), LOCK_ACQUIRED);
    assert_int_equal(rc, 0);

    pair_failover(p);
    assert_string_equal(
        redis_str(p->replica_port, buf, sizeof(buf), "GET order:42"),
        lock_owner(l1));
    c2 = client_at(p->replica_port, 0);
    assert_int_equal(lock_new(c2, "order:42", &l2), 0);
    assert_int_equal(lock_rw_new(c2, "order:43", &r2, &w2), 0);
    assert_int_equal(acquire(l2, &rc), LOCK_BUSY);
    assert_int_equal(rc, 0);
    assert_int_equal(acquire(r2, &rc), LOCK_BUSY);
    assert_int_equal(rc, 0);
    print_message("      with replicas=1: after the failover the lock is on "
                  "the new primary; a second client is refused\n");
    lock_free(l2);
    lock_free(r2);
    lock_free(w2);
    lock_client_close(c2);
    lock_free(l1);
    lock_free(r1);
    lock_free(w1);
    lock_client_close(c1);
}

/* Wait up to a second for key to be gone from the server on port (an
 * undo sent without waiting for its answer). */
static void assert_key_gone(uint16_t port, const char *key)
{
    char cmd[64], buf[64];

    snprintf(cmd, sizeof(cmd), "GET %s", key);
    for (int i = 0; i < 20 && redis_str(port, buf, sizeof(buf), cmd)[0]; i++)
        sleep_ms(50);
    if (redis_str(port, buf, sizeof(buf), cmd)[0])
        fail_msg("%s is still on the primary: %s", key, buf);
}

/*
 * With replicas=1 and replication held back, the acquire fails with -EIO
 * within about the timeout and takes its lock back off the primary (the
 * holder does not believe in a lock a failover would lose); so does each
 * lock of a batch (lock_acquire_many(), one WAIT for all). Once
 * replication flows again, the same acquires succeed.
 */
static void test_unconfirmed_acquire_fails(void **state)
{
    struct pair *p = &cur;
    struct lock_client *c1;
    struct lock *l1, *batch[2];
    enum lock_status st[2];
    int err[2], bheld[2];
    char buf[64];
    int64_t t0, ms;
    int rc, held = -1;

    (void)state;
    pair_start(p);
    c1 = client_at(p->primary_port, 1);
    assert_int_equal(lock_new(c1, "order:42", &l1), 0);
    assert_int_equal(it_proxy_ctl(&p->link, "stall"), 0);
    t0 = mono_ms();
    acquire(l1, &rc);
    ms = mono_ms() - t0;
    print_message("      replication held back: acquire = %d (%s) in %lld "
                  "ms\n",
                  rc, strerror(-rc), (long long)ms);
    assert_int_equal(rc, -EIO);
    assert_int_equal(lock_holds(l1), 0);
    assert_true(ms <= 3 * TIMEOUT_MS);
    assert_string_equal(
        redis_str(p->primary_port, buf, sizeof(buf), "GET order:42"), "");

    assert_int_equal(lock_new(c1, "order:1", &batch[0]), 0);
    assert_int_equal(lock_new(c1, "order:2", &batch[1]), 0);
    assert_int_equal(lock_acquire_many(batch, 2, LEASE_MS, st, err), 0);
    print_message("      replication held back: a batch of two = %d, %d\n",
                  err[0], err[1]);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(err[i], -EIO);
        assert_int_equal(lock_holds(batch[i]), 0);
    }
    assert_key_gone(p->primary_port, "order:1");
    assert_key_gone(p->primary_port, "order:2");

    assert_int_equal(it_proxy_ctl(&p->link, "resume"), 0);
    assert_int_equal(acquire(l1, &rc), LOCK_ACQUIRED);
    assert_int_equal(rc, 0);
    assert_int_equal(lock_release(l1, &held), 0);
    assert_int_equal(held, 1);
    assert_int_equal(lock_acquire_many(batch, 2, LEASE_MS, st, err), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(err[i], 0);
        assert_int_equal(st[i], LOCK_ACQUIRED);
    }
    assert_int_equal(lock_release_many(batch, 2, bheld, err), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(err[i], 0);
        assert_int_equal(bheld[i], 1);
        lock_free(batch[i]);
    }
    lock_free(l1);
    lock_client_close(c1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_failover_loses_lock, pair_stop),
        cmocka_unit_test_teardown(test_failover_keeps_confirmed_lock,
                                  pair_stop),
        cmocka_unit_test_teardown(test_unconfirmed_acquire_fails, pair_stop),
    };

    it_init();
    return cmocka_run_group_tests_name("lock_replica", tests, NULL, NULL);
}
