/*
 * sqlflavour.c - MariaDB or MySQL (see sqlflavour.h).
 */
#include "common/sqlflavour.h"

#include <string.h>
#include <errmsg.h>
#include <mysqld_error.h>

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

int sql_error_is_disconnect(unsigned e)
{
    switch (e) {
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_CONN_HOST_ERROR:
    case CR_CONNECTION_ERROR:
    case CR_COMMANDS_OUT_OF_SYNC:
    case CR_SERVER_LOST_EXTENDED:
    case ER_CONNECTION_KILLED:
    case ER_SERVER_SHUTDOWN:
    case ER_NET_READ_ERROR:
    case ER_NET_READ_INTERRUPTED:
    case ER_NET_ERROR_ON_WRITE:
    case ER_NET_WRITE_INTERRUPTED:
    case ER_NET_PACKETS_OUT_OF_ORDER:
        return 1;
    default:
        return 0;
    }
}
