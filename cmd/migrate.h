/*
 * migrate.h - `seckilld migrate`: the database of SECKILL_MYSQL_URL, or
 * of every shard of SECKILL_MYSQL_SHARDS, brought up to the schema this
 * binary needs, and the start-up check that it is.
 */
#ifndef SECKILL_CMD_MIGRATE_H
#define SECKILL_CMD_MIGRATE_H

#include "cmd/config.h"

/*
 * Run the command on cfg's shards in order, shard 0 first, each under
 * its own server's migration lock; the first that fails stops the run.
 * One primary prints each migration as it is applied and a line for the
 * database; several print one line per shard (its number, host:port/db,
 * what was applied). Returns the process's exit status: 0 every shard up
 * to date, 1 a migration failed, a recorded one differs from its file, or
 * a server could not be reached or locked (one line on standard error
 * that names the shard among several).
 */
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
