/*
 * deadline.h - request deadlines against slow clients. libmicrohttpd's
 * connection timeout is an idle timeout: a client that sends a byte
 * before each timeout keeps its connection forever (slowloris). A
 * connection waiting for a request (from its start, or from the end of
 * its previous request) must deliver the whole request, headers and body,
 * within timeout_s; otherwise a reaper thread shuts its socket down, and
 * libmicrohttpd then closes it. Thread-safe.
 */
#ifndef SECKILL_HANDLERS_DEADLINE_H
#define SECKILL_HANDLERS_DEADLINE_H

struct deadlines;
struct deadline_conn;

/* Start the reaper. Never returns NULL (aborts if no thread starts). */
struct deadlines *deadlines_start(unsigned timeout_s);
/* Stop the reaper and free d; every connection must be removed. NULL ok. */
void deadlines_stop(struct deadlines *d);
/* Track connection socket fd, waiting for its first request. */
struct deadline_conn *deadline_conn_add(struct deadlines *d, int fd);
/* Stop tracking c (before its socket is closed) and free it. NULL ok. */
void deadline_conn_remove(struct deadlines *d, struct deadline_conn *c);
/* The request of c has arrived: no deadline until it completes. NULL ok. */
void deadline_conn_busy(struct deadline_conn *c);
/* The request of c completed: the next one is due within the timeout.
 * NULL ok. */
void deadline_conn_idle(struct deadlines *d, struct deadline_conn *c);

#endif
