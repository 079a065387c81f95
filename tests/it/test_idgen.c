/*
 * test_idgen.c - the ID worker against the test Redis: ids unique and
 * increasing across threads, taken from blocks so that most need no round
 * trip, and never repeated when the counter is lost (a changed run_id or
 * a flushed clock hash stands in for a restart; the fault suite restarts
 * a real Redis). Each run uses its own prefix.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/redis.h"
#include "common/redis_link.h"
#include "idgen/idgen.h"
#include "tests/it/harness.h"

#define THREADS 4
#define PER_THREAD 1000

static char prefix[32];

static int group_setup(void **state)
{
    (void)state;
    it_init();
    snprintf(prefix, sizeof(prefix), "t%lld", (long long)it_unique());
    return 0;
}

static redisReply *cmd(redisContext *rc, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    assert_int_not_equal(REDIS_REPLY_ERROR, r->type);
    return r;
}

static int64_t next_id(redisContext *rc)
{
    int64_t id = 0;

    assert_int_equal(0,
                     idgen_next(&(struct redis_link){.rc = rc}, prefix, &id));
    assert_true(id > 0);
    return id;
}

struct worker {
    int64_t ids[PER_THREAD];
    int err;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    redisContext *rc = it_redis_open(it_store_config());

    if (!rc) {
        w->err = -ENOTCONN;
        return NULL;
    }
    for (int i = 0; i < PER_THREAD && !w->err; i++)
        w->err = idgen_next(&(struct redis_link){.rc = rc}, prefix, &w->ids[i]);
    redisFree(rc);
    return NULL;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Past the age at which a block is dropped. */
static void block_age_out(void)
{
    sleep_ms(IDGEN_BLOCK_MAX_AGE_MS + 50);
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void test_unique_across_threads(void **state)
{
    static struct worker w[THREADS];
    static int64_t all[THREADS * PER_THREAD];
    pthread_t th[THREADS];
    (void)state;

    it_store_config(); /* parsed here, not racing in the threads */
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(0, pthread_create(&th[t], NULL, worker_run, &w[t]));
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(0, pthread_join(th[t], NULL));
        assert_int_equal(0, w[t].err);
        for (int i = 1; i < PER_THREAD; i++)
            assert_true(w[t].ids[i] > w[t].ids[i - 1]);
        memcpy(&all[t * PER_THREAD], w[t].ids, sizeof(w[t].ids));
    }
    qsort(all, THREADS * PER_THREAD, sizeof(all[0]), cmp_id);
    for (int i = 1; i < THREADS * PER_THREAD; i++)
        assert_true(all[i] != all[i - 1]);
}

/*
 * Ids come from blocks: taken in a burst, most need no round trip (a
 * block holds up to IDGEN_BLOCK_MAX; sizes double from IDGEN_BLOCK_MIN).
 * Someone else bumps the day counter after every id, so every new
 * reservation shows as a gap in the counter values handed out, while ids
 * from the block in memory stay consecutive.
 */
static void test_blocks(void **state)
{
    redisContext *rc = it_redis_connect();
    int64_t prev = next_id(rc), id, t;
    char key[IDGEN_KEY_MAX];
    int breaks = 0;
    uint32_t seq;
    (void)state;

    for (int i = 0; i < 2000; i++) {
        idgen_decode(prev, &t, &seq);
        assert_int_equal(0, idgen_day_key(prefix, t, key, sizeof(key)));
        freeReplyObject(cmd(rc, "INCR %s", key));
        id = next_id(rc);
        assert_true(id > prev);
        breaks += id != prev + 1;
        prev = id;
    }
    print_message("      2000 ids from %d reservation(s)\n", breaks + 1);
    /* A reservation per id would be 2000; doubling from 1 to 1024 takes
     * about 11, and a block can age out or a second turn meanwhile. */
    assert_true(breaks < 60);

    /* A block older than IDGEN_BLOCK_MAX_AGE_MS is dropped: its unused
     * values are skipped and the next id has a fresh second. */
    idgen_decode(prev, &t, &seq);
    block_age_out();
    id = next_id(rc);
    {
        int64_t t1;
        uint32_t s1;

        idgen_decode(id, &t1, &s1);
        assert_true(t1 > t || s1 > seq);
    }
    assert_true(id > prev);

    /* idgen_discard() drops the block: the next id skips its rest.
     * After a discard the next block holds IDGEN_BLOCK_MIN (1) value,
     * the one after that, used up at once, twice as many. */
    idgen_discard(prefix);
    (void)next_id(rc);
    id = next_id(rc); /* the first of a block of 2 */
    idgen_discard(prefix);
    prev = next_id(rc);
    assert_true(prev > id + 1);
    redisFree(rc);
}

/* The clock hash has no TTL, the day counters have one. */
static void test_keys(void **state)
{
    redisContext *rc = it_redis_connect();
    char key[IDGEN_KEY_MAX];
    int64_t t, id = next_id(rc);
    uint32_t seq;
    redisReply *r;
    (void)state;

    idgen_decode(id, &t, &seq);
    assert_int_equal(0, idgen_day_key(prefix, t, key, sizeof(key)));
    r = cmd(rc, "TTL %s", key);
    assert_true(r->integer > 0 && r->integer <= IDGEN_KEY_TTL_S);
    freeReplyObject(r);
    assert_int_equal(0, idgen_clock_key(prefix, key, sizeof(key)));
    r = cmd(rc, "TTL %s", key);
    assert_int_equal(-1, r->integer);
    freeReplyObject(r);
    redisFree(rc);
}

/*
 * Before the hash tag a day's counter was icr:<prefix>:<day>. An older
 * instance still counting there (a rolling upgrade) and this one never
 * hand out the same value: each reservation here counts on both and
 * leaves both at the larger.
 */
static void test_legacy_counter(void **state)
{
    redisContext *rc = it_redis_connect();
    char key[IDGEN_KEY_MAX], old[IDGEN_KEY_MAX];
    int64_t t, t2, id = next_id(rc);
    uint32_t seq, seq2;
    redisReply *r;
    (void)state;

    idgen_decode(id, &t, &seq);
    assert_int_equal(0, idgen_day_key(prefix, t, key, sizeof(key)));
    assert_int_equal(0, idgen_legacy_day_key(prefix, t, old, sizeof(old)));
    /* The older instance is far ahead: the next block starts above it. */
    freeReplyObject(cmd(rc, "SET %s %u EX 600", old, seq + 100000));
    idgen_discard(prefix);
    id = next_id(rc);
    idgen_decode(id, &t2, &seq2);
    if (t2 / 86400 == t / 86400)
        assert_true(seq2 > seq + 100000);
    /* And it goes on above every value this instance reserved. */
    idgen_decode(id, &t, &seq);
    assert_int_equal(0, idgen_legacy_day_key(prefix, t, old, sizeof(old)));
    r = cmd(rc, "INCRBY %s 1", old);
    assert_int_equal(REDIS_REPLY_INTEGER, r->type);
    assert_true(r->integer > (long long)seq);
    freeReplyObject(r);
    redisFree(rc);
}

/*
 * A restart loses the counter: simulated by a foreign run_id in the clock
 * hash (what a restarted server sees, its own run_id being new) and the
 * day counters deleted. The block this process holds may still hand out
 * ids (reserved before the loss, nobody else has them); once it has aged
 * out, the next reservation waits for the next second, and every id
 * after that is greater than every id before the loss.
 */
static void lose_counter(redisContext *rc, int64_t before, bool flush_hash)
{
    char key[IDGEN_KEY_MAX];
    int64_t t, now_ms, id, after, held[8];
    uint32_t seq;

    idgen_decode(before, &t, &seq);
    assert_int_equal(0, idgen_day_key(prefix, t, key, sizeof(key)));
    freeReplyObject(cmd(rc, "DEL %s", key));
    assert_int_equal(0, idgen_legacy_day_key(prefix, t, key, sizeof(key)));
    freeReplyObject(cmd(rc, "DEL %s", key));
    assert_int_equal(0, idgen_clock_key(prefix, key, sizeof(key)));
    if (flush_hash)
        freeReplyObject(cmd(rc, "DEL %s", key));
    else
        freeReplyObject(cmd(rc, "HSET %s run 0000", key));
    /* Right after the loss: from the held block, or a new reservation;
     * unique either way. */
    for (int i = 0; i < 8; i++) {
        held[i] = next_id(rc);
        assert_true(held[i] > (i ? held[i - 1] : before));
    }
    block_age_out();
    now_ms = util_mono_ms();
    id = next_id(rc);
    after = util_mono_ms() - now_ms;
    print_message("      first id after the loss took %lld ms\n",
                  (long long)after);
    assert_true(id > before && id > held[7]);
    idgen_decode(id, &t, &seq);
    {
        int64_t t0;
        uint32_t s0;

        idgen_decode(before, &t0, &s0);
        assert_true(t > t0);
    }
    for (int i = 0; i < 100; i++) {
        int64_t more = next_id(rc);
        assert_true(more > id);
        id = more;
    }
}

static void test_restart_never_repeats(void **state)
{
    redisContext *rc = it_redis_connect();
    int64_t last = 0;
    (void)state;

    for (int i = 0; i < 100; i++)
        last = next_id(rc);
    lose_counter(rc, last, false);
    last = next_id(rc);
    lose_counter(rc, last, true);
    redisFree(rc);
}

/* A server clock behind the last second used (a step back): ids keep the
 * last second and go on counting, no pause. */
static void test_clock_behind(void **state)
{
    redisContext *rc = it_redis_connect();
    int64_t id = next_id(rc), t, t1;
    uint32_t seq, seq1;
    char key[IDGEN_KEY_MAX];
    redisReply *r;
    (void)state;

    idgen_decode(id, &t, &seq);
    assert_int_equal(0, idgen_clock_key(prefix, key, sizeof(key)));
    r = cmd(rc, "HSET %s last %lld", key, (long long)(t + 30));
    freeReplyObject(r);
    /* Else the block in memory would hand out ids of second t first. */
    idgen_discard(prefix);
    for (int i = 0; i < 50; i++) {
        int64_t next = next_id(rc);
        assert_true(next > id);
        idgen_decode(next, &t1, &seq1);
        assert_int_equal(t + 30, t1);
        id = next;
    }
    redisFree(rc);
}

static void test_bad_prefix(void **state)
{
    redisContext *rc = it_redis_connect();
    int64_t id;
    (void)state;

    assert_int_equal(-EINVAL,
                     idgen_next(&(struct redis_link){.rc = rc}, "Order", &id));
    assert_int_equal(-EINVAL,
                     idgen_next(&(struct redis_link){.rc = rc}, "", &id));
    redisFree(rc);
}

/* Every script call above had its keys in one hash slot (the names from
 * before the hash tag go as arguments, not keys). */
static void test_one_slot(void **state)
{
    (void)state;
    assert_int_equal(0, redis_script_crossslot_calls());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unique_across_threads),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_legacy_counter),
        cmocka_unit_test(test_restart_never_repeats),
        cmocka_unit_test(test_clock_behind),
        cmocka_unit_test(test_bad_prefix),
        cmocka_unit_test(test_one_slot),
    };
    return cmocka_run_group_tests_name("idgen", tests, group_setup, NULL);
}
