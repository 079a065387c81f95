/*
 * test_sqlflavour.c - which session settings go to which SQL server: a
 * MariaDB gets both bounds, a MySQL only the one it knows (a variable it
 * does not know would fail every connect), and the client's read timeout
 * outlasts both.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <errmsg.h>
#include <mysqld_error.h>

#include "common/sqlflavour.h"

static void test_flavour_of(void **state)
{
    static const struct {
        const char *info;
        enum sql_flavour f;
    } cases[] = {
        {"10.11.6-MariaDB-0+deb12u1", SQL_MARIADB},
        {"5.5.5-10.11.6-MariaDB-log", SQL_MARIADB}, /* as MySQL clients see */
        {"11.4.2-MariaDB-ubu2404", SQL_MARIADB},
        {"10.6.18-mariadb", SQL_MARIADB},
        {"8.0.36", SQL_MYSQL},
        {"8.4.0-commercial", SQL_MYSQL},
        {"5.7.44-log", SQL_MYSQL},
        {"", SQL_MYSQL},
        {NULL, SQL_MYSQL},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (sql_flavour_of(cases[i].info) != cases[i].f)
            fail_msg("\"%s\" read as %s", cases[i].info ? cases[i].info : "",
                     sql_flavour_name(sql_flavour_of(cases[i].info)));
    assert_string_equal("mariadb", sql_flavour_name(SQL_MARIADB));
    assert_string_equal("mysql", sql_flavour_name(SQL_MYSQL));
}

static void test_settings(void **state)
{
    const char *maria = sql_session_settings(SQL_MARIADB);
    const char *my = sql_session_settings(SQL_MYSQL);
    char want[64];

    (void)state;
    snprintf(want, sizeof(want), "innodb_lock_wait_timeout = %d",
             SQL_LOCK_WAIT_S);
    assert_non_null(strstr(maria, want));
    assert_non_null(strstr(my, want));
    snprintf(want, sizeof(want), "idle_write_transaction_timeout = %d",
             SQL_IDLE_WRITE_S);
    assert_non_null(strstr(maria, want));
    /* MySQL 8 has no such variable: sending it fails the connect. */
    assert_null(strstr(my, "idle_write_transaction_timeout"));
    assert_null(strstr(my, "idle_"));
    /* The server ends a stuck statement before the client gives up. */
    assert_true(SQL_READ_TIMEOUT_S > SQL_LOCK_WAIT_S);
    assert_true(SQL_READ_TIMEOUT_S > SQL_IDLE_WRITE_S);
}

/* Lost sessions are told from statement errors: only the former make
 * the store and the lock drop the connection. */
static void test_disconnect(void **state)
{
    (void)state;
    assert_true(sql_error_is_disconnect(CR_SERVER_GONE_ERROR));
    assert_true(sql_error_is_disconnect(CR_SERVER_LOST));
    assert_true(sql_error_is_disconnect(CR_CONN_HOST_ERROR));
    assert_true(sql_error_is_disconnect(ER_CONNECTION_KILLED));
    assert_true(sql_error_is_disconnect(ER_SERVER_SHUTDOWN));
    assert_false(sql_error_is_disconnect(0));
    assert_false(sql_error_is_disconnect(ER_DUP_ENTRY));
    assert_false(sql_error_is_disconnect(ER_LOCK_WAIT_TIMEOUT));
    assert_false(sql_error_is_disconnect(ER_LOCK_DEADLOCK));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flavour_of),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_disconnect),
    };
    return cmocka_run_group_tests_name("sqlflavour", tests, NULL, NULL);
}
