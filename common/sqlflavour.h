/*
 * sqlflavour.h - which SQL server a connection reached (MariaDB or
 * MySQL), told from the version string the server sends at connect
 * (mysql_get_server_info()), the session settings each one knows, and
 * which of their error codes mean the session is gone.
 *
 * The service bounds how long a purchase can hold or wait for the hot
 * row's lock with session variables, and the two servers differ:
 *   - MariaDB: innodb_lock_wait_timeout, and idle_write_transaction_timeout
 *     (a client that stops in the middle of a write transaction has it
 *     rolled back, releasing its row locks);
 *   - MySQL 8: innodb_lock_wait_timeout only. MySQL has no idle-write
 *     timeout: a client cut off mid-transaction holds its row locks until
 *     the server notices the dead socket (docs/reliability.md).
 * Sending MySQL a MariaDB-only variable would fail every connect.
 */
#ifndef SECKILL_SQLFLAVOUR_H
#define SECKILL_SQLFLAVOUR_H

enum sql_flavour { SQL_MARIADB, SQL_MYSQL };

/* Row-lock waits end after this many seconds (both flavours). */
#define SQL_LOCK_WAIT_S 3
/* An idle open write transaction is rolled back after this (MariaDB). */
#define SQL_IDLE_WRITE_S 3
/*
 * The client's read timeout on its MySQL connections: clearly longer than
 * both bounds above, so that the server always ends a stuck statement
 * (and rolls its transaction back) before the client gives up on it and
 * retries on another connection while the first still holds locks.
 */
#define SQL_READ_TIMEOUT_S (2 * SQL_LOCK_WAIT_S)

/* The flavour of a server version string such as "10.11.6-MariaDB-0+
 * deb12u1", "5.5.5-10.11.6-MariaDB" or "8.0.36" (anything that does not
 * say MariaDB is taken for MySQL). NULL reads as MySQL. */
enum sql_flavour sql_flavour_of(const char *server_info);

/* "mariadb" or "mysql". */
const char *sql_flavour_name(enum sql_flavour f);

/* The SET SESSION statement with the bounds above that f understands. */
const char *sql_session_settings(enum sql_flavour f);

/* Whether the client or server error code e (mysql_errno()) means the
 * session is gone or could not be made (both flavours): drop the
 * connection and open a new one. */
int sql_error_is_disconnect(unsigned e);

#endif
