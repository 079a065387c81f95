/*
 * sms_sink.h - `seckilld sms-sink`: a stand-in for an SMS gateway, for
 * development and the compose file. It receives the login codes that
 * SECKILL_SMS_WEBHOOK sends, checks their signature and prints them.
 */
#ifndef SECKILL_CMD_SMS_SINK_H
#define SECKILL_CMD_SMS_SINK_H

#include "cmd/config.h"

/* Serve on cfg's bind address and port until SIGTERM or SIGINT; the
 * process's exit status (0, or 1 when it could not listen). */
int sms_sink_run(const struct config *cfg);

#endif
