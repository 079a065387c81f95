/*
 * admin.h - `seckilld admin add --username NAME`: an admin account, with
 * the password read from standard input.
 */
#ifndef SECKILL_CMD_ADMIN_H
#define SECKILL_CMD_ADMIN_H

#include "cmd/config.h"

/* Run the command; the process's exit status: 0 made, 1 failed (the name
 * is taken, MySQL refused), 2 a bad password. */
int admin_add(const struct config *cfg);

#endif
