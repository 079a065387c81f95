/*
 * users.h - `seckilld users normalize [--dry-run]`: the phones of users
 * stored before phones were kept in E.164 form, rewritten.
 */
#ifndef SECKILL_CMD_USERS_H
#define SECKILL_CMD_USERS_H

#include "cmd/config.h"

/* Run the command; the process's exit status: 0 done (or counted), 1 a
 * backend failed. */
int users_normalize(const struct config *cfg);

#endif
