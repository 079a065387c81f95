/*
 * fanout.c - one statement on several servers at once (internal.h,
 * store_stmt_rows_each()): the reads that span the shards send their
 * statement to every shard before waiting for any answer, with
 * Connector/C's non-blocking calls (mysql_stmt_execute_start() and
 * mysql_stmt_store_result_start(), continued as poll() finds each socket
 * ready), so a page costs the slowest shard's round trip rather than the
 * sum of them. The rows, once stored, are fetched as store_stmt_rows()
 * fetches them.
 */
#include "store/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>

#include "common/util.h"

/* Where one store's call is. */
enum step { STEP_EXECUTE, STEP_STORE, STEP_DONE };

struct fan {
    struct store_rows_call *c;
    enum stmt_id id;
    MYSQL_STMT *s;
    enum step step;
    bool sent;           /* the statement went out without blocking */
    int status;          /* what the last _start() or _cont() waits for */
    int64_t deadline_ms; /* when status has MYSQL_WAIT_TIMEOUT */
};

/* Connect, prepare and bind f's statement (through store_retry()). */
static int fan_prepare_once(struct store *st, void *arg)
{
    struct fan *f = arg;
    int err = store_mysql_ensure(st);

    if (err)
        return err;
    if (!st->my_nonblock) {
        /* The connection's context for non-blocking calls; its blocking
         * calls work as before. */
        if (mysql_options(st->my, MYSQL_OPT_NONBLOCK, 0))
            return store_mysql_error(st, NULL, "nonblock");
        st->my_nonblock = true;
    }
    f->s = store_stmt_get(st, f->id, &err);
    if (!f->s)
        return err;
    if ((f->c->params && mysql_stmt_bind_param(f->s, f->c->params)) ||
        mysql_stmt_bind_result(f->s, f->c->results))
        return store_mysql_error(st, f->s, store_stmt_sql(f->id));
    return 0;
}

/* The blocking way: a call whose connection was lost on the way. */
static int fan_rows_once(struct store *st, void *arg)
{
    struct fan *f = arg;
    struct store_rows_call *c = f->c;

    return store_stmt_rows(st, f->id, c->params, c->results, c->max, c->on_row,
                           c->ctx, &c->count);
}

/* After a _start() or _cont() of f that returned f->status (0: done, with
 * ret its result): start the next step, or fetch the rows and finish. */
static void fan_advance(struct fan *f, int ret)
{
    struct store_rows_call *c = f->c;

    while (f->status == 0 && f->step != STEP_DONE) {
        if (ret) {
            c->err = store_mysql_error(c->st, f->s, store_stmt_sql(f->id));
            f->step = STEP_DONE;
        } else if (f->step == STEP_EXECUTE) {
            f->step = STEP_STORE;
            f->status = mysql_stmt_store_result_start(&ret, f->s);
        } else {
            c->err = store_stmt_fetch(c->st, f->s, f->id, c->max, c->on_row,
                                      c->ctx, &c->count);
            f->step = STEP_DONE;
        }
    }
    if (f->step != STEP_DONE && (f->status & MYSQL_WAIT_TIMEOUT))
        f->deadline_ms =
            util_mono_ms() + (int64_t)mysql_get_timeout_value_ms(c->st->my);
}

/* What poll() saw on f's socket, as the events its _cont() takes. */
static int fan_events(const struct fan *f, short revents, int64_t now)
{
    int ev = 0;

    if (revents & POLLIN)
        ev |= MYSQL_WAIT_READ;
    if (revents & POLLOUT)
        ev |= MYSQL_WAIT_WRITE;
    if (revents & POLLPRI)
        ev |= MYSQL_WAIT_EXCEPT;
    /* A closed or failed socket: the read or write it waits for fails. */
    if (revents & (POLLERR | POLLHUP | POLLNVAL))
        ev |= f->status & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE);
    if (!ev && (f->status & MYSQL_WAIT_TIMEOUT) && now >= f->deadline_ms)
        ev = MYSQL_WAIT_TIMEOUT;
    return ev;
}

int store_stmt_rows_each(enum stmt_id id, struct store_rows_call *c, size_t n)
{
    struct fan *f = xcalloc(n, sizeof(*f));
    struct pollfd *pf = xcalloc(n, sizeof(*pf));
    size_t *who = xcalloc(n, sizeof(*who));
    int first = 0;

    for (size_t i = 0; i < n; i++) {
        int ret = 0;

        f[i] = (struct fan){.c = &c[i], .id = id};
        c[i].count = 0;
        c[i].err = store_retry(c[i].st, fan_prepare_once, &f[i]);
        if (c[i].err) {
            f[i].step = STEP_DONE;
            continue;
        }
        f[i].sent = true;
        f[i].status = mysql_stmt_execute_start(&ret, f[i].s);
        fan_advance(&f[i], ret);
    }
    for (;;) {
        int64_t now = util_mono_ms();
        int timeout = -1;
        size_t np = 0;

        for (size_t i = 0; i < n; i++) {
            if (f[i].step == STEP_DONE)
                continue;
            pf[np] = (struct pollfd){
                .fd = (int)mysql_get_socket(c[i].st->my),
                .events =
                    (short)(((f[i].status & MYSQL_WAIT_READ) ? POLLIN : 0) |
                            ((f[i].status & MYSQL_WAIT_WRITE) ? POLLOUT : 0) |
                            ((f[i].status & MYSQL_WAIT_EXCEPT) ? POLLPRI : 0))};
            who[np++] = i;
            if (f[i].status & MYSQL_WAIT_TIMEOUT) {
                int64_t left = f[i].deadline_ms - now;
                int t = left < 0 ? 0 : (int)left;

                timeout = timeout < 0 || t < timeout ? t : timeout;
            }
        }
        if (np == 0)
            break;
        if (poll(pf, (nfds_t)np, timeout) < 0 && errno != EINTR)
            for (size_t k = 0; k < np; k++) /* not expected: fail them */
                pf[k].revents = POLLERR;
        now = util_mono_ms();
        for (size_t k = 0; k < np; k++) {
            struct fan *x = &f[who[k]];
            int ev = fan_events(x, pf[k].revents, now), ret = 0;

            if (!ev)
                continue;
            x->status = x->step == STEP_EXECUTE
                            ? mysql_stmt_execute_cont(&ret, x->s, ev)
                            : mysql_stmt_store_result_cont(&ret, x->s, ev);
            fan_advance(x, ret);
        }
    }
    for (size_t i = 0; i < n; i++) {
        /* Lost on the way (a server restarted): once more, blocking, on a
         * new connection, as store_retry() does. */
        if (c[i].err == -ENOTCONN && f[i].sent)
            c[i].err = store_retry(c[i].st, fan_rows_once, &f[i]);
        if (c[i].err && !first)
            first = c[i].err;
    }
    free(who);
    free(pf);
    free(f);
    return first;
}
