/*
 * test_legacy_lock.c - the SETNX + GETSET expiry lock (legacy_lock.h)
 * fails in the two ways its own source describes, and lock/ (the Redis
 * backend, SECKILL_REDIS_URL) passes the same scenarios:
 *
 *   1. Two clients both decide they own an expired lock. The old lock
 *      compares GETSET's answer with a value it read a moment before, not
 *      with the expired value it judged: a client that read the expiry,
 *      then let another take the lock, reads that client's fresh time and
 *      GETSET hands it back, "equal". Paused at that step (a hook), the
 *      race happens every time. lock/ takes the lock in one script (SET NX
 *      PX): nothing to interleave; two clients racing for a lock whose
 *      holder died get it exactly once, round after round.
 *   2. A holder deletes a lock that is no longer its own. It paused past
 *      its expiry, another client took the lock, and its unlock is a plain
 *      DEL: a third client gets in beside the second. lock/'s release
 *      deletes only its own owner id and says the lock was not held.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "lock/lock.h"
#include "tests/it/harness.h"
#include "tests/it/legacy_lock.h"

#define INTERVAL_MS 300
#define LEASE_MS 300
/* Rounds of two clients racing for a lock whose holder died. */
#define RACE_ROUNDS 100

static char key_base[64];

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void key_name(char *buf, size_t size, const char *what)
{
    snprintf(buf, size, "%s%s", key_base, what);
}

/* A holder that crashed long ago: its expiry time is in the past. */
static void plant_expired(redisContext *rc, const char *key)
{
    freeReplyObject(
        redisCommand(rc, "SET %s %lld", key, (long long)(wall_ms() - 1000)));
}

static struct lock_client *our_client(void)
{
    struct lock_client *c = NULL;

    assert_int_equal(lock_client_open(getenv("SECKILL_REDIS_URL"), NULL, &c),
                     0);
    return c;
}

/* ---- 1. two owners of an expired lock ---- */

struct other_try {
    struct legacy_lock *other;
    int result;
};

/* The hook: while client 1 is between its expiry check and its GET,
 * client 2 runs a whole try. */
static void let_other_in(struct legacy_lock *l, enum legacy_step step,
                         void *arg)
{
    struct other_try *o = arg;

    (void)l;
    if (step == LEGACY_CHECKED_EXPIRY)
        o->result = legacy_try_lock(o->other);
}

static void test_legacy_expired_lock_two_owners(void **state)
{
    redisContext *rc1 = it_redis_connect(), *rc2 = it_redis_connect();
    struct legacy_lock c[2];
    struct other_try o = {&c[1], -2};
    char key[128];
    int r1, r2;

    (void)state;
    key_name(key, sizeof(key), "expired");
    plant_expired(rc1, key);
    c[0] = (struct legacy_lock){rc1, key, INTERVAL_MS, let_other_in, &o};
    c[1] = (struct legacy_lock){rc2, key, INTERVAL_MS, NULL, NULL};
    r1 = legacy_try_lock(&c[0]);
    r2 = o.result;
    print_message("      legacy: client 2 took the expired lock (%d), then "
                  "client 1 took it too (%d)\n",
                  r2, r1);
    assert_int_equal(r2, 1);
    assert_int_equal(r1, 1);
    legacy_unlock(&c[0]);
    redisFree(rc1);
    redisFree(rc2);
}

struct race {
    pthread_barrier_t go;
    atomic_int owners;
    int legacy;
    const char *key;
    struct lock_client *c;
};

/* One racer: each round, wait for the other, try once, count a win. */
static void *racer(void *arg)
{
    struct race *rc = arg;
    redisContext *redis = NULL;
    struct lock *l = NULL;

    if (rc->legacy)
        redis = it_redis_open(it_store_config());
    else if (lock_new(rc->c, rc->key, &l) != 0)
        abort();
    for (int i = 0; i < RACE_ROUNDS; i++) {
        pthread_barrier_wait(&rc->go);
        if (rc->legacy) {
            struct legacy_lock ll = {redis, rc->key, INTERVAL_MS, NULL, NULL};
            if (redis && legacy_try_lock(&ll) == 1)
                atomic_fetch_add(&rc->owners, 1);
        } else {
            enum lock_status st = LOCK_BUSY;
            if (lock_acquire(l, 0, 30000, &st) == 0 && st == LOCK_ACQUIRED)
                atomic_fetch_add(&rc->owners, 1);
        }
        pthread_barrier_wait(&rc->go); /* the round is over */
        pthread_barrier_wait(&rc->go); /* the next is set up */
        if (l && lock_holds(l))
            lock_release(l, NULL);
    }
    lock_free(l);
    redisFree(redis);
    return NULL;
}

/*
 * RACE_ROUNDS rounds: the holder died (its lock expired), two clients try
 * at once. Returns in how many rounds both got it; asserts that at least
 * one did in each.
 */
static int race_rounds(int legacy, const char *key, struct lock_client *c)
{
    redisContext *rc = it_redis_connect();
    struct race r = {.legacy = legacy, .key = key, .c = c};
    pthread_t th[2];
    int doubled = 0;

    atomic_init(&r.owners, 0);
    pthread_barrier_init(&r.go, NULL, 3);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, racer, &r), 0);
    for (int i = 0; i < RACE_ROUNDS; i++) {
        if (legacy) {
            plant_expired(rc, key);
        } else {
            /* Our holder: a lease that has already run out. */
            freeReplyObject(redisCommand(rc, "SET %s dead-holder PX 1", key));
            sleep_ms(3);
        }
        atomic_store(&r.owners, 0);
        pthread_barrier_wait(&r.go);
        pthread_barrier_wait(&r.go);
        int owners = atomic_load(&r.owners);
        assert_true(owners >= 1);
        doubled += owners == 2;
        if (!legacy) {
            freeReplyObject(redisCommand(rc, "DEL %s", key));
        }
        pthread_barrier_wait(&r.go);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&r.go);
    freeReplyObject(redisCommand(rc, "DEL %s", key));
    redisFree(rc);
    return doubled;
}

/*
 * The same race for lock/: one client gets the lock whose holder died,
 * the other is refused, in every round; left to chance, the legacy lock
 * shows how often its race wins (printed: it depends on timing).
 */
static void test_ours_expired_lock_one_owner(void **state)
{
    struct lock_client *c = our_client();
    struct lock *a, *b;
    char key[128];
    enum lock_status st;
    int doubled;

    (void)state;
    key_name(key, sizeof(key), "race-ours");
    assert_int_equal(lock_new(c, key, &a), 0);
    assert_int_equal(lock_new(c, key, &b), 0);
    /* The holder's lease ran out while it was dead. */
    assert_int_equal(lock_acquire(a, 0, 50, &st), 0);
    assert_int_equal(st, LOCK_ACQUIRED);
    sleep_ms(100);
    assert_int_equal(lock_acquire(b, 0, 30000, &st), 0);
    assert_int_equal(st, LOCK_ACQUIRED);
    lock_free(a);
    assert_int_equal(lock_holds(b), 1);
    lock_free(b);

    doubled = race_rounds(0, key, c);
    print_message("      ours: two owners in %d of %d racing rounds\n", doubled,
                  RACE_ROUNDS);
    assert_int_equal(doubled, 0);
    key_name(key, sizeof(key), "race-legacy");
    doubled = race_rounds(1, key, NULL);
    print_message("      legacy, same race left to chance: two owners in %d "
                  "of %d rounds\n",
                  doubled, RACE_ROUNDS);
    lock_client_close(c);
}

/* ---- 2. an unlock that deletes someone else's lock ---- */

static void test_legacy_unlock_frees_other(void **state)
{
    redisContext *rc[3] = {it_redis_connect(), it_redis_connect(),
                           it_redis_connect()};
    struct legacy_lock c[3];
    char key[128];

    (void)state;
    key_name(key, sizeof(key), "unlock");
    for (int i = 0; i < 3; i++)
        c[i] = (struct legacy_lock){rc[i], key, INTERVAL_MS, NULL, NULL};
    assert_int_equal(legacy_try_lock(&c[0]), 1);
    sleep_ms(INTERVAL_MS + 100); /* client 1 pauses past its expiry */
    assert_int_equal(legacy_lock_wait(&c[1], 1000), 1);
    legacy_unlock(&c[0]); /* client 1 resumes and unlocks */
    int third = legacy_try_lock(&c[2]);
    print_message("      legacy: the paused holder's unlock deleted client "
                  "2's lock; client 3 took it too (%d)\n",
                  third);
    assert_int_equal(third, 1);
    legacy_unlock(&c[2]);
    for (int i = 0; i < 3; i++)
        redisFree(rc[i]);
}

static void test_ours_unlock_keeps_other(void **state)
{
    struct lock_client *c = our_client();
    struct lock *l[3];
    enum lock_status st;
    char key[128];
    int held = -1;

    (void)state;
    key_name(key, sizeof(key), "unlock-ours");
    for (int i = 0; i < 3; i++)
        assert_int_equal(lock_new(c, key, &l[i]), 0);
    assert_int_equal(lock_acquire(l[0], 0, LEASE_MS, &st), 0);
    assert_int_equal(st, LOCK_ACQUIRED);
    uint64_t fence1 = lock_fence(l[0]);
    sleep_ms(LEASE_MS + 100);
    assert_int_equal(lock_acquire(l[1], 1000, 30000, &st), 0);
    assert_int_equal(st, LOCK_ACQUIRED);
    assert_true(lock_fence(l[1]) > fence1);
    assert_int_equal(lock_release(l[0], &held), 0);
    assert_int_equal(held, 0);
    assert_int_equal(lock_acquire(l[2], 0, 30000, &st), 0);
    print_message("      ours: the paused holder's release said held=%d; "
                  "client 3 %s\n",
                  held, st == LOCK_BUSY ? "was refused" : "got in");
    assert_int_equal(st, LOCK_BUSY);
    assert_int_equal(lock_release(l[1], &held), 0);
    assert_int_equal(held, 1);
    for (int i = 0; i < 3; i++)
        lock_free(l[i]);
    lock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legacy_expired_lock_two_owners),
        cmocka_unit_test(test_ours_expired_lock_one_owner),
        cmocka_unit_test(test_legacy_unlock_frees_other),
        cmocka_unit_test(test_ours_unlock_keeps_other),
    };

    it_init();
    snprintf(key_base, sizeof(key_base), "it-legacy-%ld-", (long)getpid());
    return cmocka_run_group_tests_name("legacy_lock", tests, NULL, NULL);
}
