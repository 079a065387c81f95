/*
 * sqlflavour.c - MariaDB or MySQL (see sqlflavour.h).
 */
#include "common/sqlflavour.h"

#include <string.h>

/* The session settings per flavour, with the bounds of sqlflavour.h
 * written out (tests/unit/test_sqlflavour.c checks they agree). */
static const char *const stmt_sql[] = {
    [SQL_MARIADB] = "SET SESSION idle_write_transaction_timeout = 3, "
                    "innodb_lock_wait_timeout = 3",
    [SQL_MYSQL] = "SET SESSION innodb_lock_wait_timeout = 3",
};

enum sql_flavour sql_flavour_of(const char *server_info)
{
    if (server_info && strcasestr(server_info, "mariadb"))
        return SQL_MARIADB;
    return SQL_MYSQL;
}

const char *sql_flavour_name(enum sql_flavour f)
{
    return f == SQL_MARIADB ? "mariadb" : "mysql";
}

const char *sql_session_settings(enum sql_flavour f)
{
    return stmt_sql[f == SQL_MARIADB ? SQL_MARIADB : SQL_MYSQL];
}
