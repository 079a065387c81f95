/*
 * migrate.h - `seckilld migrate`: the database of SECKILL_MYSQL_URL
 * brought up to the schema this binary needs, and the start-up check
 * that it is.
 */
#ifndef SECKILL_CMD_MIGRATE_H
#define SECKILL_CMD_MIGRATE_H

#include "cmd/config.h"

/* Run the command; the process's exit status: 0 up to date, 1 a
 * migration failed, a recorded one differs from its file, or the server
 * could not be reached or locked. */
int migrate_run(const struct config *cfg);

/*
 * At the service's start: 0 when the database has every migration this
 * binary has (or a newer one), or cannot be reached (logged: the service
 * starts and reports MySQL down as usual); -ESTALE when it is behind or
 * has no schema_version, with one line on standard error telling to run
 * `seckilld migrate`.
 */
int migrate_check(const struct store_config *sc);

#endif
