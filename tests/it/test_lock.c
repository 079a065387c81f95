/*
 * test_lock.c - integration tests of lock/lock.h against the real Redis
 * named by SECKILL_REDIS_URL (redis://[[user]:pass@]host:port/db): mutual
 * exclusion, owner-only release, expiry of dead holders, the EVALSHA to
 * EVAL fallback, input checks and the error codes for a dead connection and
 * for error replies.
 *
 * Every key starts with "test:lock:<pid>:" so concurrent runs don't collide;
 * each test's teardown deletes them. Forked children never call cmocka
 * (its asserts would longjmp into the child's copy of the runner): they
 * report through their exit status, and an alarm bounds how long they run.
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
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <sodium.h>

#include "lock/lock.h"
#include "tests/it/harness.h"

#define TTL_MS 5000
/* Contention test: processes and iterations per process. */
#define NCHILD 4
#define NITER 200
/* Seconds a forked child may run before SIGALRM kills it. */
#define CHILD_ALARM_S 60

/*
 * SECKILL_REDIS_URL, parsed by the group setup before any fork. Tests and
 * forked children connect with it_redis_open(redis_cfg), which never calls
 * cmocka: NULL on failure.
 */
static const struct store_config *redis_cfg;

static char key_prefix[64];
/* The temporary ACL user of test_error_reply, dropped by every teardown. */
static char acl_user[64];

/* What each test gets in *state: one connection, its own. */
struct fixture {
    redisContext *rc;
};

/* Run a command, returning the reply or NULL; for children and helpers. */
static redisReply *cmd_try(redisContext *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static redisReply *cmd_try(redisContext *rc, const char *fmt, ...)
{
    va_list ap;
    void *r;

    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    return r;
}

/* Run a command that must get a non-error reply. Caller frees the reply. */
static redisReply *cmd(redisContext *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static redisReply *cmd(redisContext *rc, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (!r)
        fail_msg("redis command '%s' failed: %s", fmt, rc->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis command '%s' answered: %s", fmt, r->str);
    return r;
}

/* Run "verb key" (EXISTS, PTTL) and return its integer reply. */
static long long key_int(redisContext *rc, const char *verb, const char *key)
{
    redisReply *r = cmd(rc, "%s %s", verb, key);
    long long v;

    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

/*
 * GET key into buf (size bytes). Returns 1 if the key held a string, 0 if
 * it did not exist.
 */
static int get_str(redisContext *rc, const char *key, char *buf, size_t size)
{
    redisReply *r = cmd(rc, "GET %s", key);
    int found = 0;

    if (r->type == REDIS_REPLY_STRING) {
        assert_true(r->len < size);
        memcpy(buf, r->str, r->len);
        buf[r->len] = '\0';
        found = 1;
    } else {
        assert_int_equal(r->type, REDIS_REPLY_NIL);
        buf[0] = '\0';
    }
    freeReplyObject(r);
    return found;
}

static void make_key(char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s%s", key_prefix, name);

    assert_true(n > 0 && (size_t)n < size);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int is_owner_string(const char *s)
{
    size_t i;

    for (i = 0; s[i] != '\0'; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
              (c >= 'A' && c <= 'F')))
            return 0;
    }
    return i == LOCK_OWNER_LEN - 1;
}

/* Acquire key on rc and assert it was free. */
static void acquire_ok(redisContext *rc, const char *key, uint32_t ttl_ms,
                       struct lock_handle *h)
{
    enum lock_status st = LOCK_BUSY;

    assert_int_equal(lock_acquire(rc, key, ttl_ms, h, &st), 0);
    assert_int_equal(st, LOCK_ACQUIRED);
    assert_string_equal(h->key, key);
}

static void assert_busy(redisContext *rc, const char *key)
{
    struct lock_handle h;
    enum lock_status st = LOCK_ACQUIRED;

    assert_int_equal(lock_acquire(rc, key, TTL_MS, &h, &st), 0);
    assert_int_equal(st, LOCK_BUSY);
}

static int release(redisContext *rc, const struct lock_handle *h)
{
    int released = -1;

    assert_int_equal(lock_release(rc, h, &released), 0);
    assert_true(released == 0 || released == 1);
    return released;
}

/* Wait for a child and return its exit code, or 128+signal. */
static int wait_child(pid_t pid)
{
    int status;

    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    redisContext *rc;

    (void)state;
    redis_cfg = it_store_config();
    snprintf(key_prefix, sizeof(key_prefix), "test:lock:%ld:", (long)getpid());
    snprintf(acl_user, sizeof(acl_user), "test-lock-%ld", (long)getpid());
    /* Writing to a connection the server closed must fail, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    rc = it_redis_open(redis_cfg);
    if (!rc)
        return -1;
    redisFree(rc);
    return 0;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    f->rc = it_redis_open(redis_cfg);
    if (!f->rc) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

/* Delete every key of this run, on a fresh connection (f->rc may be dead). */
static int teardown(void **state)
{
    struct fixture *f = *state;
    redisContext *rc = it_redis_open(redis_cfg);
    char cursor[32] = "0", match[80];
    int ret = 0;

    snprintf(match, sizeof(match), "%s*", key_prefix);
    while (rc) {
        redisReply *r =
            cmd_try(rc, "SCAN %s MATCH %s COUNT 1000", cursor, match);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            ret = -1;
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++)
            freeReplyObject(
                cmd_try(rc, "DEL %s", r->element[1]->element[i]->str));
        freeReplyObject(r);
        if (strcmp(cursor, "0") == 0)
            break;
    }
    if (rc)
        freeReplyObject(cmd_try(rc, "ACL DELUSER %s", acl_user));
    else
        ret = -1;
    redisFree(rc);
    if (f) {
        redisFree(f->rc);
        free(f);
    }
    return ret;
}

/* ---- tests ---- */

/* The first acquire wins with a fresh random owner and a TTL; the second is
 * busy and leaves the key alone. */
static void test_acquire_then_busy(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h, h2;
    char key[LOCK_KEY_MAX], key2[LOCK_KEY_MAX], val[64];
    long long pttl;

    make_key(key, sizeof(key), "basic");
    acquire_ok(f->rc, key, TTL_MS, &h);
    assert_true(is_owner_string(h.owner));
    assert_true(get_str(f->rc, key, val, sizeof(val)));
    assert_string_equal(val, h.owner);
    pttl = key_int(f->rc, "PTTL", key);
    assert_true(pttl > 0);
    assert_true(pttl <= TTL_MS);

    assert_busy(f->rc, key);
    assert_true(get_str(f->rc, key, val, sizeof(val)));
    assert_string_equal(val, h.owner);

    /* Owners are random per acquire, not a constant. */
    make_key(key2, sizeof(key2), "basic2");
    acquire_ok(f->rc, key2, TTL_MS, &h2);
    assert_true(is_owner_string(h2.owner));
    assert_string_not_equal(h.owner, h2.owner);

    assert_int_equal(release(f->rc, &h), 1);
    assert_int_equal(release(f->rc, &h2), 1);
}

/* Releasing with the wrong owner leaves the lock held; the owner's release
 * deletes it exactly once. */
static void test_only_owner_releases(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h, other;
    char key[LOCK_KEY_MAX], val[64];

    make_key(key, sizeof(key), "owner");
    acquire_ok(f->rc, key, TTL_MS, &h);

    other = h;
    other.owner[0] = h.owner[0] == '0' ? '1' : '0';
    assert_string_not_equal(other.owner, h.owner);
    assert_int_equal(release(f->rc, &other), 0);
    assert_true(get_str(f->rc, key, val, sizeof(val)));
    assert_string_equal(val, h.owner);
    assert_busy(f->rc, key);

    assert_int_equal(release(f->rc, &h), 1);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);
    assert_int_equal(release(f->rc, &h), 0);

    /* released may be NULL. */
    acquire_ok(f->rc, key, TTL_MS, &h);
    assert_int_equal(lock_release(f->rc, &h, NULL), 0);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);
}

/* After SCRIPT FLUSH the cached script is gone: EVALSHA answers NOSCRIPT
 * and release must fall back to EVAL. */
static void test_release_after_script_flush(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h;
    char key[LOCK_KEY_MAX];

    make_key(key, sizeof(key), "flush");
    /* First make sure the script is cached, so the flush matters. */
    acquire_ok(f->rc, key, TTL_MS, &h);
    assert_int_equal(release(f->rc, &h), 1);

    acquire_ok(f->rc, key, TTL_MS, &h);
    freeReplyObject(cmd(f->rc, "SCRIPT FLUSH"));
    assert_int_equal(release(f->rc, &h), 1);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);

    /* And again right after, whatever the fallback left cached. */
    acquire_ok(f->rc, key, TTL_MS, &h);
    assert_int_equal(release(f->rc, &h), 1);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);
}

/* A holder that dies without releasing blocks others only until its TTL. */
static void test_dead_holder_expires(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h;
    char key[LOCK_KEY_MAX], child_owner[64];
    long long pttl;
    pid_t pid;

    make_key(key, sizeof(key), "dead");
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct lock_handle ch;
        enum lock_status st;
        redisContext *rc;

        alarm(CHILD_ALARM_S);
        rc = it_redis_open(redis_cfg);
        if (!rc)
            _exit(10);
        if (lock_acquire(rc, key, 300, &ch, &st) != 0)
            _exit(11);
        _exit(st == LOCK_ACQUIRED ? 0 : 12);
    }
    assert_int_equal(wait_child(pid), 0);

    /* The child took it; it is still held right after the child died. */
    assert_busy(f->rc, key);
    assert_true(get_str(f->rc, key, child_owner, sizeof(child_owner)));
    assert_true(is_owner_string(child_owner));
    pttl = key_int(f->rc, "PTTL", key);
    assert_true(pttl > 0);
    assert_true(pttl <= 300);

    /* More than the TTL after the child's acquire, it has expired. */
    sleep_ms(400);
    acquire_ok(f->rc, key, TTL_MS, &h);
    /* A forked process must not reuse its parent's random state. */
    assert_string_not_equal(h.owner, child_owner);
    assert_int_equal(release(f->rc, &h), 1);
}

/* Once a lock has expired and been re-taken, the old handle's release must
 * not delete the new owner's key. */
static void test_expired_lock_not_released_by_old_owner(void **state)
{
    struct fixture *f = *state;
    struct lock_handle old, cur;
    char key[LOCK_KEY_MAX], val[64];

    make_key(key, sizeof(key), "expired");
    acquire_ok(f->rc, key, 100, &old);
    sleep_ms(200);
    acquire_ok(f->rc, key, TTL_MS, &cur);
    assert_string_not_equal(old.owner, cur.owner);

    assert_int_equal(release(f->rc, &old), 0);
    assert_true(get_str(f->rc, key, val, sizeof(val)));
    assert_string_equal(val, cur.owner);
    assert_true(key_int(f->rc, "PTTL", key) > 0);

    assert_int_equal(release(f->rc, &cur), 1);
}

/*
 * One contending child: wait on the barrier pipe, then NITER times take the
 * lock (spinning with a short random sleep while busy), do a deliberately
 * non-atomic GET / +1 / SET of the counter, and release. With use_lock 0
 * it skips the lock and busy-waits between GET and SET instead. Returns the
 * exit code: 0, or which step failed.
 */
static int contend_child(const char *lock_key, const char *ctr_key,
                         int use_lock, int barrier_fd)
{
    redisContext *rc = it_redis_open(redis_cfg);
    char b;

    if (!rc)
        return 20;
    /* EOF once the parent has forked everyone and closed its end. */
    if (read(barrier_fd, &b, 1) != 0)
        return 21;
    for (int i = 0; i < NITER; i++) {
        struct lock_handle h;
        enum lock_status st = LOCK_BUSY;
        redisReply *r;
        long long v = 0;
        int released = -1;

        while (use_lock) {
            if (lock_acquire(rc, lock_key, TTL_MS, &h, &st) != 0)
                return 22;
            if (st == LOCK_ACQUIRED)
                break;
            usleep(100 + randombytes_uniform(401));
        }
        r = cmd_try(rc, "GET %s", ctr_key);
        if (!r)
            return 23;
        if (r->type == REDIS_REPLY_STRING)
            v = strtoll(r->str, NULL, 10);
        else if (r->type != REDIS_REPLY_NIL)
            return 24;
        freeReplyObject(r);
        if (use_lock) {
            usleep(50);
        } else {
            int64_t until = mono_us() + 200;
            while (mono_us() < until)
                ;
        }
        r = cmd_try(rc, "SET %s %lld", ctr_key, v + 1);
        if (!r || r->type == REDIS_REPLY_ERROR)
            return 25;
        freeReplyObject(r);
        if (use_lock) {
            if (lock_release(rc, &h, &released) != 0)
                return 26;
            if (released != 1)
                return 27;
        }
    }
    redisFree(rc);
    return 0;
}

/* Fork NCHILD contending children, start them together and return the final
 * counter. */
static long long run_contention(redisContext *rc, const char *name,
                                int use_lock)
{
    char lock_key[LOCK_KEY_MAX], ctr_key[LOCK_KEY_MAX], val[32];
    pid_t pids[NCHILD];
    int codes[NCHILD], fds[2], n;

    make_key(lock_key, sizeof(lock_key), name);
    n = snprintf(ctr_key, sizeof(ctr_key), "%s:counter", lock_key);
    assert_true(n > 0 && (size_t)n < sizeof(ctr_key));
    freeReplyObject(cmd(rc, "DEL %s %s", lock_key, ctr_key));
    assert_int_equal(pipe(fds), 0);
    for (int i = 0; i < NCHILD; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            alarm(CHILD_ALARM_S);
            close(fds[1]);
            _exit(contend_child(lock_key, ctr_key, use_lock, fds[0]));
        }
    }
    close(fds[0]);
    close(fds[1]);
    /* Reap every child before failing, so none outlives the test. */
    for (int i = 0; i < NCHILD; i++)
        codes[i] = wait_child(pids[i]);
    for (int i = 0; i < NCHILD; i++)
        if (codes[i] != 0)
            fail_msg("%s: child %d exited with %d", name, i, codes[i]);
    assert_true(get_str(rc, ctr_key, val, sizeof(val)));
    return strtoll(val, NULL, 10);
}

/* NCHILD processes incrementing one counter non-atomically under the lock
 * lose no update. The same run without the lock shows the test can fail. */
static void test_contention_no_lost_updates(void **state)
{
    struct fixture *f = *state;
    long long locked, unlocked;

    locked = run_contention(f->rc, "contend", 1);
    print_message("      with the lock: %lld of %d\n", locked, NCHILD * NITER);
    assert_int_equal(locked, NCHILD * NITER);

    /*
     * Companion check: the same loop without the lock must lose updates,
     * or the assertion above proves nothing. Four processes with a 200 us
     * window between GET and SET make a lost update all but certain (each
     * GET/SET round trip blocks, letting the others interleave even on one
     * CPU).
     */
    unlocked = run_contention(f->rc, "nolock", 0);
    print_message("      without the lock: %lld of %d\n", unlocked,
                  NCHILD * NITER);
    assert_true(unlocked < NCHILD * NITER);
}

/* Bad keys and a zero TTL are refused before touching Redis. */
static void test_invalid_input(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h;
    enum lock_status st;
    char key[LOCK_KEY_MAX + 8];
    size_t plen = strlen(key_prefix);

    assert_int_equal(lock_acquire(f->rc, "", TTL_MS, &h, &st), -EINVAL);

    /* LOCK_KEY_MAX - 1 characters is the longest key that fits. */
    memset(key, 'x', sizeof(key));
    memcpy(key, key_prefix, plen);
    key[LOCK_KEY_MAX] = '\0';
    assert_int_equal(strlen(key), LOCK_KEY_MAX);
    assert_int_equal(lock_acquire(f->rc, key, TTL_MS, &h, &st), -EINVAL);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);
    key[LOCK_KEY_MAX - 1] = '\0';
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);

    acquire_ok(f->rc, key, TTL_MS, &h);
    assert_int_equal(release(f->rc, &h), 1);

    make_key(key, sizeof(key), "ttl0");
    assert_int_equal(lock_acquire(f->rc, key, 0, &h, &st), -EINVAL);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);
    assert_int_equal(f->rc->err, 0);
}

/* Kill rc's own connection from the server side, through another one. */
static void kill_connection(redisContext *killer, redisContext *victim)
{
    redisReply *r = cmd(victim, "CLIENT ID");
    long long id;

    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    id = r->integer;
    freeReplyObject(r);
    r = cmd(killer, "CLIENT KILL ID %lld", id);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
}

/* A connection the server has closed gives -ECONNRESET with rc->err set,
 * for acquire and for release. */
static void test_dead_connection(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h;
    enum lock_status st;
    char key[LOCK_KEY_MAX];
    redisContext *rc;

    make_key(key, sizeof(key), "dead-conn");
    rc = it_redis_open(redis_cfg);
    assert_non_null(rc);
    kill_connection(f->rc, rc);
    assert_int_equal(lock_acquire(rc, key, TTL_MS, &h, &st), -ECONNRESET);
    assert_int_not_equal(rc->err, 0);
    redisFree(rc);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);

    rc = it_redis_open(redis_cfg);
    assert_non_null(rc);
    acquire_ok(rc, key, TTL_MS, &h);
    kill_connection(f->rc, rc);
    assert_int_equal(lock_release(rc, &h, NULL), -ECONNRESET);
    assert_int_not_equal(rc->err, 0);
    redisFree(rc);
    /* Not released: it is still there (teardown deletes it). */
    assert_int_equal(key_int(f->rc, "EXISTS", key), 1);
}

/*
 * An error reply gives -EIO and leaves the connection usable. A temporary
 * ACL user without write commands makes both SET and the script's DEL fail.
 */
static void test_error_reply(void **state)
{
    struct fixture *f = *state;
    struct lock_handle h, mine;
    enum lock_status st;
    char key[LOCK_KEY_MAX];
    redisContext *rc;
    redisReply *r;

    r = cmd_try(f->rc,
                "ACL SETUSER %s reset on nopass allkeys allchannels "
                "allcommands -@write",
                acl_user);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        print_message("      ACL SETUSER not available (%s): skipped\n",
                      r ? r->str : f->rc->errstr);
        freeReplyObject(r);
        skip();
    }
    freeReplyObject(r);

    make_key(key, sizeof(key), "readonly");
    rc = it_redis_open(redis_cfg);
    assert_non_null(rc);
    r = cmd_try(rc, "AUTH %s any", acl_user);
    assert_non_null(r);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);

    assert_int_equal(lock_acquire(rc, key, TTL_MS, &h, &st), -EIO);
    assert_int_equal(rc->err, 0);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 0);

    acquire_ok(f->rc, key, TTL_MS, &mine);
    assert_int_equal(lock_release(rc, &mine, NULL), -EIO);
    assert_int_equal(rc->err, 0);
    assert_int_equal(key_int(f->rc, "EXISTS", key), 1);
    r = cmd(rc, "PING");
    freeReplyObject(r);
    redisFree(rc);

    freeReplyObject(cmd(f->rc, "ACL DELUSER %s", acl_user));
    assert_int_equal(release(f->rc, &mine), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_acquire_then_busy, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_only_owner_releases, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_release_after_script_flush, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_dead_holder_expires, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_expired_lock_not_released_by_old_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_contention_no_lost_updates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_invalid_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_reply, setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, NULL);
}
