/*
 * test_async_compare.c - the reconciliation's judgement of an async sale
 * (async/compare.h), without servers: a healthy sale agrees whatever a
 * writer has committed and not yet settled; a sale that lost a buyer, a
 * unit or settled orders, or that holds a dead letter, disagrees; the
 * terms of a disagreement are kept apart, however large.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "async/compare.h"

#define GIGA 1000000000LL
#define MEGA 1000000LL

/* A Redis side with initial stock and buyers, consistent with itself. */
static struct async_redis_side redis_side(long long initial, long long buyers,
                                          long long unsettled,
                                          long long written)
{
    struct async_redis_side r = {
        .initial = initial,
        .stock = initial - buyers,
        .buyers = buyers,
        .unsettled = unsettled,
        .written = written,
        .last_pos = 1,
    };
    return r;
}

static struct async_mysql_side mysql_side(long long initial, long long active,
                                          long long orders)
{
    struct async_mysql_side m = {initial, active, orders, 0, 0};
    return m;
}

/* Redis is one unit short of its buyers (1) and MySQL has a million
 * orders more than Redis can explain (-10^6): packed into one number as
 * 1 * 10^6 + (-10^6) the two cancel; compared term by term they do not. */
static void test_terms_do_not_alias(void **state)
{
    struct async_redis_side r = redis_side(GIGA, 2 * MEGA, 0, 3 * MEGA);
    struct async_mysql_side m = mysql_side(GIGA, 3 * MEGA, 3 * MEGA);
    struct async_disagreement d;

    (void)state;
    r.stock -= 1;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(1, d.units);
    assert_int_equal(-MEGA, d.buyers);
    assert_false(d.missing);
}

/* Two different disagreements are not "the same twice", even when a
 * packed number would make them equal. */
static void test_same_is_term_by_term(void **state)
{
    struct async_redis_side r1 = redis_side(GIGA, 5 * MEGA, 0, 5 * MEGA);
    struct async_redis_side r2 = redis_side(GIGA, 5 * MEGA, 0, 4 * MEGA);
    struct async_mysql_side m1 = mysql_side(GIGA, 5 * MEGA, 5 * MEGA);
    struct async_mysql_side m2 = mysql_side(GIGA, 4 * MEGA, 4 * MEGA);
    struct async_disagreement d1, d2, d3;

    (void)state;
    r1.stock -= 1; /* a unit missing: units 1 */
    assert_false(async_sale_compare(&r1, &m1, &d1));
    /* a million buyers MySQL does not have */
    assert_false(async_sale_compare(&r2, &m2, &d2));
    assert_int_equal(1, d1.units);
    assert_int_equal(0, d2.units);
    assert_int_equal(MEGA, d2.buyers);
    assert_false(async_disagreement_same(&d1, &d2));
    assert_false(async_sale_compare(&r1, &m1, &d3));
    assert_true(async_disagreement_same(&d1, &d3));
}

/* A writer committed a batch of 256 and has not settled it yet (it is
 * still in the stream): MySQL counts it, and so does Redis' unsettled
 * orders. That is no disagreement. */
static void test_committed_not_settled_agrees(void **state)
{
    struct async_redis_side r = redis_side(GIGA, 300, 256, 44);
    struct async_mysql_side all = mysql_side(GIGA, 300, 300);
    struct async_mysql_side none = mysql_side(GIGA, 44, 44);
    struct async_mysql_side half = mysql_side(GIGA, 172, 172);
    struct async_disagreement d;

    (void)state;
    assert_true(async_sale_compare(&r, &all, &d));
    assert_true(async_sale_compare(&r, &none, &d));
    assert_true(async_sale_compare(&r, &half, &d));
}

/* Orders cancelled or expired: their units and buyers went back. */
static void test_closed_orders_agree(void **state)
{
    struct async_redis_side r = redis_side(100, 95, 0, 100);
    struct async_mysql_side m = mysql_side(100, 95, 100);
    struct async_disagreement d;

    (void)state;
    assert_true(async_sale_compare(&r, &m, &d));
    /* One closed in MySQL, its unit not back in Redis yet, and no record
     * that it is owed (the record went with the return, and the return
     * has not landed: a moment). */
    m.active = 94;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(1, d.buyers);
}

/* Closed orders whose units MySQL still owes back to Redis (a return that
 * failed, waiting for the retry): Redis keeps their buyers and units for
 * as long as that takes, and agrees with MySQL all along. Once a unit is
 * back, its buyer goes too and the sale still agrees. */
static void test_owed_units_agree(void **state)
{
    struct async_redis_side r = redis_side(100, 95, 0, 100);
    struct async_mysql_side m = mysql_side(100, 92, 100);
    struct async_disagreement d;

    (void)state;
    m.owed = 3;
    assert_true(async_sale_compare(&r, &m, &d));
    /* One comes back: a buyer less in Redis, a record less in MySQL. */
    r.buyers--;
    r.stock++;
    m.owed--;
    assert_true(async_sale_compare(&r, &m, &d));
    /* A record of a unit owed while Redis has no buyer for it: Redis lost
     * the buyer (or the record outlived its return for a moment). */
    m.owed++;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(-1, d.buyers);
}

/* A buyer Redis forgot, with its unit back on sale: Redis agrees with
 * itself, not with MySQL. */
static void test_lost_buyer(void **state)
{
    struct async_redis_side r = redis_side(10, 2, 0, 3);
    struct async_mysql_side m = mysql_side(10, 3, 3);
    struct async_disagreement d;

    (void)state;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(0, d.units);
    assert_int_equal(-1, d.buyers);
}

/* A Redis back from an older file forgot 30 orders it had settled: more
 * written orders than it has in flight. */
static void test_rewind(void **state)
{
    struct async_redis_side r = redis_side(1000, 100, 10, 90);
    struct async_mysql_side m = mysql_side(1000, 130, 130);
    struct async_disagreement d;

    (void)state;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(30, d.in_flight);
    /* Redis settled more than MySQL has: below 0. */
    m = mysql_side(1000, 80, 80);
    r = redis_side(1000, 80, 0, 85);
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(-5, d.in_flight);
}

/* A dead letter: its buyer holds a unit, MySQL has no order for it. */
static void test_dead_letter(void **state)
{
    struct async_redis_side r = redis_side(100, 100, 0, 99);
    struct async_mysql_side m = mysql_side(100, 99, 99);
    struct async_disagreement d;

    (void)state;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(1, d.buyers);
}

static void test_missing_orphan_initial(void **state)
{
    struct async_redis_side r = redis_side(10, 3, 0, 3);
    struct async_mysql_side m = mysql_side(10, 3, 3);
    struct async_disagreement d;

    (void)state;
    assert_true(async_sale_compare(&r, &m, &d));
    r.orphan = true;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_true(d.orphan);
    r.orphan = false;
    m.initial = 11;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(-1, d.initial);
    m.initial = -1; /* unknown in MySQL: not compared */
    assert_true(async_sale_compare(&r, &m, &d));
    r.initial = -1;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_true(d.missing);
}

static void test_stream_pos(void **state)
{
    (void)state;
    assert_true(async_stream_pos("1700000000000-5") ==
                ((uint64_t)1700000000000ULL << 20 | 5));
    assert_true(async_stream_pos("1-0") < async_stream_pos("1-1"));
    assert_true(async_stream_pos("1-1048575") < async_stream_pos("2-0"));
    assert_true(async_stream_pos("1-99999999") ==
                async_stream_pos("1-1048575"));
    assert_true(async_stream_pos("0-0") == 0);
    assert_true(async_stream_pos("") == 0);
    assert_true(async_stream_pos("12") == 0);
    assert_true(async_stream_pos("12-") == 0);
    assert_true(async_stream_pos("-1-2") == 0);
    assert_true(async_stream_pos("1-2x") == 0);
    assert_true(async_stream_pos(NULL) == 0);
}

/* A restock of 10 committed in MySQL and not yet in Redis: MySQL's
 * initial is 10 more, its restocked too: they agree. Once Redis has it
 * (initial, stock and restocked up by 10 together) they agree again. A
 * MySQL initial 10 higher without the restock to explain it does not. */
static void test_restock_on_its_way(void **state)
{
    struct async_redis_side r = redis_side(100, 40, 0, 40);
    struct async_mysql_side m = mysql_side(110, 40, 40);
    struct async_disagreement d;

    (void)state;
    m.restocked = 10;
    assert_true(async_sale_compare(&r, &m, &d));
    r.initial += 10;
    r.stock += 10;
    r.restocked = 10;
    assert_true(async_sale_compare(&r, &m, &d));
    m.initial = 120;
    assert_false(async_sale_compare(&r, &m, &d));
    assert_int_equal(-10, d.initial);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_terms_do_not_alias),
        cmocka_unit_test(test_same_is_term_by_term),
        cmocka_unit_test(test_committed_not_settled_agrees),
        cmocka_unit_test(test_closed_orders_agree),
        cmocka_unit_test(test_owed_units_agree),
        cmocka_unit_test(test_lost_buyer),
        cmocka_unit_test(test_rewind),
        cmocka_unit_test(test_dead_letter),
        cmocka_unit_test(test_missing_orphan_initial),
        cmocka_unit_test(test_stream_pos),
        cmocka_unit_test(test_restock_on_its_way),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
