/*
 * test_redis_keys.c - every script and multi-key command the service
 * sends keeps its keys in one Redis Cluster hash slot, with keys built by
 * the service's own functions (so a renamed key is checked as renamed),
 * with and without the Redis prefix; and the prefix's own rules.
 *
 * The list, by module (docs/scaling.md has the table):
 *   lock/    every kind's acquire, release, renew and undo scripts, the
 *            redlock fence raise, and each lock's channels;
 *   idgen/   the id script (the names from before the hash tag go as
 *            arguments, not keys);
 *   async/   every script of an async sale and its DEL, all on the
 *            sale's {v:ID} keys (the index of sales with work is written
 *            by its own single-key commands);
 *   store/   the login-code scripts, the waiting room's script, its DEL
 *            and its two counts (one pipelined call to the slot of the
 *            first); the rate limiter, the token denylist and the admin
 *            login failures run one call per key.
 * No server is needed: the lock clients never connect.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "async/internal.h"
#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/redis_slot.h"
#include "idgen/idgen.h"
#include "lock/redis_kind.h"
#include "store/internal.h"

/* The prefixes every check runs under. */
static const char *const prefixes[] = {"", "shop1:", "a.b-c_d:"};

/* Assert that the n keys in k share one slot and start with prefix;
 * what names the call in the failure message. */
static void one_slot(const char *what, const char *prefix, const char *const *k,
                     size_t n)
{
    unsigned slot = redis_key_slot_str(k[0]);

    for (size_t i = 0; i < n; i++) {
        if (strncmp(k[i], prefix, strlen(prefix)) != 0) {
            print_error("%s: \"%s\" does not start with \"%s\"\n", what, k[i],
                        prefix);
            fail();
        }
        if (redis_key_slot_str(k[i]) != slot) {
            print_error("%s: \"%s\" (slot %u) and \"%s\" (slot %u)\n", what,
                        k[0], slot, k[i], redis_key_slot_str(k[i]));
            fail();
        }
    }
}

#define ONE_SLOT(what, prefix, ...)                                            \
    do {                                                                       \
        const char *const keys_[] = {__VA_ARGS__};                             \
        one_slot(what, prefix, keys_, sizeof(keys_) / sizeof(keys_[0]));       \
    } while (0)

/* ---- the prefix ---- */

static void test_prefix_rules(void **state)
{
    char buf[64], why[96];
    (void)state;

    assert_int_equal(0, redis_prefix_check("", why, sizeof(why)));
    assert_int_equal(0, redis_prefix_check("shop-1.eu_west:", why, 96));
    /* A brace would change the slots; a glob character SCAN patterns. */
    assert_int_equal(-EINVAL, redis_prefix_check("{x}", why, sizeof(why)));
    assert_int_equal(-EINVAL, redis_prefix_check("a*", why, sizeof(why)));
    assert_int_equal(-EINVAL, redis_prefix_check("a b", why, sizeof(why)));
    assert_int_equal(-EINVAL,
                     redis_prefix_check("123456789012345678901234567890123",
                                        why, sizeof(why)));
    assert_int_equal(-EINVAL, redis_prefix_set("a?"));

    assert_int_equal(0, redis_prefix_set("p:"));
    assert_int_equal(6, redis_key(buf, sizeof(buf), "k:%d", 42));
    assert_string_equal("p:k:42", buf);
    assert_int_equal(-ENAMETOOLONG, redis_key(buf, 4, "k:%d", 42));
    assert_int_equal(0, redis_prefix_set(""));
    redis_key(buf, sizeof(buf), "seckill:voucher-changed:%u", 3);
    /* No prefix: the name of before, byte for byte. */
    assert_string_equal("seckill:voucher-changed:3", buf);
}

static void test_tagged(void **state)
{
    char buf[64];
    (void)state;

    assert_int_equal(
        10, redis_key_tagged(buf, sizeof(buf), "p:", "f:", "ab", 2, ":x"));
    assert_string_equal("p:f:{ab}:x", buf);
    /* A key with a tag of its own lends the tag. */
    redis_key_tagged(buf, sizeof(buf), "", "f:", "o:{42}:z", 8, NULL);
    assert_string_equal("f:{42}", buf);
    assert_int_equal(redis_key_slot_str("o:{42}:z"), redis_key_slot_str(buf));
    /* No '}' after the '{': the whole key is hashed, and carried. */
    redis_key_tagged(buf, sizeof(buf), "", "f:", "a{b", 3, NULL);
    assert_string_equal("f:{a{b}", buf);
    assert_int_equal(redis_key_slot_str("a{b"), redis_key_slot_str(buf));
    /* Hashed whole and holding '}' (an empty tag is none): no tag can
     * carry it. */
    assert_int_equal(
        -EINVAL, redis_key_tagged(buf, sizeof(buf), "", "f:", "a}b", 3, NULL));
    assert_int_equal(
        -EINVAL, redis_key_tagged(buf, sizeof(buf), "", "f:", "{}a", 3, NULL));
    assert_int_equal(-ENAMETOOLONG,
                     redis_key_tagged(buf, 8, "", "f:", "abcdef", 6, NULL));
}

/* The check every script call goes through counts a call across slots. */
static void test_script_calls_checked(void **state)
{
    static struct redis_script s = REDIS_SCRIPT("return 1");
    const char *same[3] = {"{v:1}:a", "{v:1}:b", "arg"};
    const char *apart[2] = {"foo", "bar"};
    unsigned long before = redis_script_crossslot_calls();
    char *cmd;
    (void)state;

    redisFreeCommand(
        (redis_script_format(&s, true, 2, 3, same, NULL, &cmd), cmd));
    assert_int_equal(before, redis_script_crossslot_calls());
    redisFreeCommand(
        (redis_script_format(&s, true, 2, 2, apart, NULL, &cmd), cmd));
    assert_int_equal(before + 1, redis_script_crossslot_calls());
}

/* ---- lock/ ---- */

static const char *const lock_names[] = {
    "lock:order:42",           "x", "order:{42}:y", "a{b", "{a}}b", "}{z}",
    "seckill:async:reconcile",
};

/* The mutex's (and RedLock's) scripts, for one lock. */
static void check_mutex(const struct lock *l, const char *p)
{
    char fence[REDIS_KEY_MAX], chan[REDIS_KEY_MAX], receipt[REDIS_KEY_MAX];

    rconn_lock_name(l, fence, RCONN_FENCE, NULL);
    rconn_lock_name(l, chan, RCONN_CHANNEL, NULL);
    lock__redis_receipt(l, receipt, "");
    ONE_SLOT("RCONN_ACQUIRE", p, l->rkey, fence);
    ONE_SLOT("RCONN_TAKE", p, l->rkey);
    ONE_SLOT("RCONN_RELEASE", p, l->rkey, chan);
    ONE_SLOT("RCONN_RELEASE_ONCE", p, l->rkey, chan, receipt);
    ONE_SLOT("RCONN_FENCE_RAISE", p, fence);
}

static void check_fair(const struct lock *l, const char *p)
{
    char q[REDIS_KEY_MAX], t[REDIS_KEY_MAX], fence[REDIS_KEY_MAX];
    char receipt[REDIS_KEY_MAX], wake[REDIS_KEY_MAX + 40];
    char suffix[LOCK_OWNER_LEN + 4];

    rconn_lock_name(l, q, RCONN_FAIR_QUEUE, NULL);
    rconn_lock_name(l, t, RCONN_FAIR_TIMES, NULL);
    rconn_lock_name(l, fence, RCONN_FENCE, NULL);
    lock__redis_receipt(l, receipt, "");
    /* The release publishes to the wake prefix and the head's owner id:
     * a sharded channel must be in the keys' slot too. */
    snprintf(suffix, sizeof(suffix), ":w:%s", l->owner);
    rconn_lock_name(l, wake, RCONN_CHANNEL, suffix);
    ONE_SLOT("RCONN_FAIR_ACQUIRE", p, l->rkey, q, t, fence);
    ONE_SLOT("RCONN_FAIR_RELEASE", p, l->rkey, q, t, receipt, wake);
    ONE_SLOT("RCONN_FAIR_CANCEL", p, l->rkey, q, t, wake);
}

static void check_rw(const struct lock *r, const struct lock *w, const char *p)
{
    char rs[REDIS_KEY_MAX], q[REDIS_KEY_MAX], fence[REDIS_KEY_MAX];
    char chan[REDIS_KEY_MAX], rr[REDIS_KEY_MAX], wr[REDIS_KEY_MAX];

    assert_string_equal(r->rkey, w->rkey);
    rconn_lock_name(r, rs, RCONN_RW_READERS, NULL);
    rconn_lock_name(r, q, RCONN_RW_WAITING, NULL);
    rconn_lock_name(r, fence, RCONN_FENCE, NULL);
    rconn_lock_name(r, chan, RCONN_CHANNEL, NULL);
    lock__redis_receipt(r, rr, "r:");
    lock__redis_receipt(w, wr, "w:");
    ONE_SLOT("RCONN_RW_READ/WRITE", p, r->rkey, rs, q, fence);
    ONE_SLOT("RCONN_RW_CANCEL", p, w->rkey, q, chan);
    ONE_SLOT("RCONN_ZRELEASE (read)", p, rs, chan, rr);
    ONE_SLOT("RCONN_ZLEAVE (read)", p, rs, chan);
    ONE_SLOT("RCONN_RELEASE_ONCE (write)", p, w->rkey, chan, wr);
}

static void check_sem(const struct lock *l, const char *p)
{
    char fence[REDIS_KEY_MAX], chan[REDIS_KEY_MAX], receipt[REDIS_KEY_MAX];

    rconn_lock_name(l, fence, RCONN_FENCE, NULL);
    rconn_lock_name(l, chan, RCONN_CHANNEL, NULL);
    lock__redis_receipt(l, receipt, "");
    ONE_SLOT("RCONN_SEM_ACQUIRE", p, l->rkey, fence);
    ONE_SLOT("RCONN_ZRELEASE", p, l->rkey, chan, receipt);
    ONE_SLOT("RCONN_ZLEAVE", p, l->rkey, chan);
}

static void test_lock_keys(void **state)
{
    (void)state;
    for (size_t pi = 0; pi < sizeof(prefixes) / sizeof(prefixes[0]); pi++) {
        const char *p = prefixes[pi];
        struct lock_options o = {.prefix = p};
        struct lock_client *c, *rl;

        assert_int_equal(0, lock_client_open("redis://127.0.0.1:1", &o, &c));
        assert_int_equal(0, lock_client_open("redlock://127.0.0.1:1,"
                                             "127.0.0.1:2,127.0.0.1:3",
                                             &o, &rl));
        for (size_t i = 0; i < sizeof(lock_names) / sizeof(lock_names[0]);
             i++) {
            struct lock *m, *f, *r, *w, *s, *x;

            assert_int_equal(0, lock_new(c, lock_names[i], &m));
            /* The lock's key is its name after the prefix. */
            assert_int_equal(strlen(p) + strlen(lock_names[i]), m->rkey_len);
            assert_int_equal(0, lock_fair_new(c, lock_names[i], &f));
            assert_int_equal(0, lock_rw_new(c, lock_names[i], &r, &w));
            assert_int_equal(0, lock_semaphore_new(c, lock_names[i], 3, &s));
            assert_int_equal(0, lock_new(rl, lock_names[i], &x));
            check_mutex(m, p);
            check_fair(f, p);
            check_rw(r, w, p);
            check_sem(s, p);
            check_mutex(x, p);
            lock_free(x);
            lock_free(s);
            lock_free(w);
            lock_free(r);
            lock_free(f);
            lock_free(m);
        }
        /* A name whose whole is hashed and holds '}' cannot be tagged. */
        {
            struct lock *l = NULL;

            assert_int_equal(-EINVAL, lock_new(c, "a}b", &l));
            assert_int_equal(-EINVAL, lock_new(c, "{}a", &l));
            assert_int_equal(-EINVAL, lock_new(rl, "a}b", &l));
            assert_null(l);
        }
        lock_client_close(rl);
        lock_client_close(c);
    }
}

/* The purchase's lock names: one slot per user, spread over users. */
static void test_purchase_locks_spread(void **state)
{
    struct lock_client *c;
    unsigned seen[16] = {0}, distinct = 0;
    (void)state;

    assert_int_equal(0, lock_client_open("redis://127.0.0.1:1", NULL, &c));
    for (int u = 1; u <= 64; u++) {
        char name[64];
        struct lock *l;

        snprintf(name, sizeof(name), "lock:order:%d", u);
        assert_int_equal(0, lock_new(c, name, &l));
        seen[redis_key_slot(l->rkey, l->rkey_len) % 16]++;
        lock_free(l);
    }
    for (int i = 0; i < 16; i++)
        distinct += seen[i] > 0;
    assert_true(distinct >= 12);
    lock_client_close(c);
}

/* ---- idgen/ ---- */

static void test_idgen_keys(void **state)
{
    (void)state;
    for (size_t pi = 0; pi < sizeof(prefixes) / sizeof(prefixes[0]); pi++) {
        assert_int_equal(0, redis_prefix_set(prefixes[pi]));
        for (int legacy = 0; legacy < 2; legacy++) {
            struct idgen_args bufs;
            const char *argv[IDGEN_ARGS_MAX];
            int nkeys, argc;

            idgen_legacy_keys(legacy);
            argc = idgen_script_args("order", 1795680000, 1024, &bufs, argv,
                                     &nkeys);
            assert_int_equal(1 + IDGEN_WINDOW, nkeys);
            assert_int_equal(nkeys + 3 + (legacy ? IDGEN_WINDOW : 0), argc);
            one_slot("idgen script", prefixes[pi], argv, (size_t)nkeys);
            /* The names of before, after the prefix (none: the names
             * older versions counted on), passed as arguments. */
            if (legacy) {
                char want[64];

                snprintf(want, sizeof(want), "%sicr:order:2026:11:26",
                         prefixes[pi]);
                assert_string_equal(want, argv[nkeys + 3 + 1]);
            }
        }
    }
    idgen_legacy_keys(true);
    assert_int_equal(0, redis_prefix_set(""));
}

/* ---- async/ ---- */

static void test_async_keys(void **state)
{
    /* Every name a sale's scripts, its DEL and its reconciliation use. */
    static const char *const names[] = {
        "info", "stock",  "buyers",  "stream",     "pending",
        "dead", "frozen", "holders", "rebuild:c1", "rebuild-holders:c1",
    };
    char k[sizeof(names) / sizeof(names[0])][KEY_MAX], idx[KEY_MAX];
    const char *v[sizeof(names) / sizeof(names[0])];
    (void)state;

    for (size_t pi = 0; pi < sizeof(prefixes) / sizeof(prefixes[0]); pi++) {
        assert_int_equal(0, redis_prefix_set(prefixes[pi]));
        for (int64_t id = 1; id < 1000000000000LL; id *= 37) {
            for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                async__key(k[i], id, names[i]);
                v[i] = k[i];
            }
            one_slot("async sale scripts", prefixes[pi], v,
                     sizeof(names) / sizeof(names[0]));
        }
        /* The index is its own key, written by its own commands. */
        async__index_key(idx);
        assert_true(strncmp(idx, prefixes[pi], strlen(prefixes[pi])) == 0);
    }
    assert_int_equal(0, redis_prefix_set(""));
    async__key(k[0], 7, "stock");
    assert_string_equal("{v:7}:stock", k[0]);
}

/* The longest key of a sale, whole: the longest prefix, the largest id,
 * and a rebuild's hash named after the longest consumer name (a host
 * name of HOST_NAME_MAX bytes). */
static void test_async_key_longest(void **state)
{
    char prefix[REDIS_PREFIX_MAX + 1], consumer[CONSUMER_MAX];
    char what[KEY_MAX], want[2 * KEY_MAX], k[KEY_MAX];
    (void)state;

    memset(prefix, 'p', REDIS_PREFIX_MAX);
    prefix[REDIS_PREFIX_MAX] = '\0';
    memset(consumer, 'h', HOST_NAME_MAX);
    snprintf(consumer + HOST_NAME_MAX, sizeof(consumer) - HOST_NAME_MAX,
             "-%d-%s", INT_MAX, "0123456789abcdef");
    assert_int_equal(CONSUMER_MAX - 1, strlen(consumer));
    snprintf(what, sizeof(what), "rebuild-holders:%s", consumer);
    assert_int_equal(0, redis_prefix_set(prefix));
    async__key(k, INT64_MIN, what);
    snprintf(want, sizeof(want), "%s{v:%lld}:%s", prefix, (long long)INT64_MIN,
             what);
    assert_string_equal(want, k);
    assert_int_equal(0, redis_prefix_set(""));
}

/* ---- store/ ---- */

static void test_store_keys(void **state)
{
    char c1[STORE_KEY_MAX], c2[STORE_KEY_MAX], c3[STORE_KEY_MAX];
    char f[3][STORE_FAIL_KEY_MAX];
    char w[6][STORE_KEY_MAX];
    (void)state;

    for (size_t pi = 0; pi < sizeof(prefixes) / sizeof(prefixes[0]); pi++) {
        const char *p = prefixes[pi];

        assert_int_equal(0, redis_prefix_set(p));
        /* The login-code scripts: put and revoke, then check. */
        store_code_keys("+8613800138000", NULL, c1, c2, c3);
        store_code_request_keys("+8613800138000", "2001:db8::/64",
                                "00112233445566778899aabbccddeeff", f[0], f[1]);
        ONE_SLOT("code put/revoke", p, c1, c2, f[0], f[1]);
        store_code_keys("+8613800138000", "2001:db8::/64", c1, c2, c3);
        ONE_SLOT("code check", p, c1, c2, c3, f[1]);
        /* The waiting room's script and its DEL. */
        store_waitroom_key(w[0], 12345, "pre");
        store_waitroom_key(w[1], 12345, "late");
        store_waitroom_key(w[2], 12345, "seq");
        store_waitroom_poll_key(w[3], 12345, 987654321);
        store_waitroom_key(w[4], 12345, "queue");
        store_waitroom_key(w[5], 12345, "joined");
        ONE_SLOT("waiting room place", p, w[0], w[1], w[2], w[5], w[3]);
        ONE_SLOT("waiting room DEL", p, w[0], w[1], w[2], w[5], w[4]);
        ONE_SLOT("waiting room counts", p, w[0], w[1]);
        /* The admin login failures: three sets, each its own call. */
        store_admin_fail_keys("root", "192.0.2.1", f[0], f[1], f[2],
                              STORE_FAIL_KEY_MAX);
        ONE_SLOT("admin fails by name from an address", p, f[0]);
        ONE_SLOT("admin fails by name", p, f[1]);
        ONE_SLOT("admin fails by address", p, f[2]);
    }
    assert_int_equal(0, redis_prefix_set(""));
    store_waitroom_key(w[0], 5, "pre");
    assert_string_equal("{v:5}:wr:pre", w[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_rules),
        cmocka_unit_test(test_tagged),
        cmocka_unit_test(test_script_calls_checked),
        cmocka_unit_test(test_lock_keys),
        cmocka_unit_test(test_purchase_locks_spread),
        cmocka_unit_test(test_idgen_keys),
        cmocka_unit_test(test_async_keys),
        cmocka_unit_test(test_async_key_longest),
        cmocka_unit_test(test_store_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
