/*
 * http.c - the libmicrohttpd daemon (see handlers.h): its thread pool,
 * connection limits and request deadlines, the percent-decoding of paths,
 * its log, and its callbacks, which hand each request to dispatch.c (one
 * request's way: body, route, handler, reply; parking and resuming it is
 * request.c's).
 */
#include "handlers/handlers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <microhttpd.h>

#include <stdatomic.h>

#include "common/metrics.h"
#include "common/util.h"
#include "handlers/deadline.h"
#include "handlers/dispatch.h"
#include "handlers/protocol.h"
#include "handlers/route.h"

struct handlers_server {
    struct req_server shared; /* what its requests see */
    struct MHD_Daemon *daemon;
    struct deadlines *deadlines;
    const char **route_names;
    uint16_t port;
};

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    struct handlers_server *srv = cls;

    return dispatch_access(&srv->shared, conn, url, method, version, upload,
                           upload_size, req_cls);
}

/* The deadline record of conn (set when it was accepted), or NULL. */
static struct deadline_conn *conn_deadline(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_info *info = ci ? ci->socket_context : NULL;

    return info ? info->deadline : NULL;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct handlers_server *srv = cls;
    (void)toe;

    /* Keep-alive: the next request is due within the timeout. */
    deadline_conn_idle(srv->deadlines, conn_deadline(conn));
    dispatch_completed(&srv->shared, req_cls);
}

static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct handlers_server *srv = cls;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct conn_info *info = xcalloc(1, sizeof(*info));
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

        metrics_count(METRIC_HTTP_CONN_OPENED, 1);
        info->accept_ns = req_now_ns();
        if (ci)
            info->deadline = deadline_conn_add(srv->deadlines, ci->connect_fd);
        *socket_context = info;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct conn_info *info = *socket_context;

        metrics_count(METRIC_HTTP_CONN_CLOSED, 1);
        /* Before libmicrohttpd closes the socket: see deadline.c. */
        if (info)
            deadline_conn_remove(srv->deadlines, info->deadline);
        free(info);
        *socket_context = NULL;
    }
}

/*
 * Percent-decode the path and the query arguments in place, as
 * libmicrohttpd does, except "%00" and "%2F". A decoded NUL would cut the
 * C string short, so "/api/orders/1%00x" would read as order 1 and
 * "limit=5%00x" as 5; left encoded, it makes such a value invalid. A
 * decoded "/" would join two segments of the path into one
 * ("/api/vouchers/360%2Fstats" is one segment, not the stats route);
 * left encoded, the dispatcher refuses it. Returns the length.
 */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    char *w = s;
    const char *r = s;
    (void)cls;
    (void)conn;

    while (*r) {
        int hi = r[0] == '%' ? util_hex_digit(r[1]) : -1;
        int lo = hi >= 0 ? util_hex_digit(r[2]) : -1;

        if (lo >= 0 && (hi | lo) && (hi << 4 | lo) != '/') {
            *w++ = (char)(hi << 4 | lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* The daemon's own complaints, at most one line a second (a client can
 * make it complain at will), with how many were left out before. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    static _Atomic int64_t last_ms;
    static atomic_uint dropped;
    int64_t now = util_mono_ms(), last = atomic_load(&last_ms);
    char buf[512];

    (void)cls;
    if (now - last < 1000 ||
        !atomic_compare_exchange_strong(&last_ms, &last, now)) {
        atomic_fetch_add(&dropped, 1);
        return;
    }
    vsnprintf(buf, sizeof(buf), fmt, ap);
    buf[strcspn(buf, "\n")] = '\0';
    log_warn("http server error", "detail=\"%s\" dropped=%u", buf,
             atomic_exchange(&dropped, 0));
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn_info *info = ci ? ci->socket_context : NULL;
    struct handlers_server *srv = cls;

    /* Its length as sent, for the head's size (protocol.h). */
    if (info) {
        info->target_len = strlen(uri);
        info->target = uri;
    }
    /* The daemon's own request buffer, writable: see dispatch_uri(). */
    return dispatch_uri(&srv->shared, (char *)uri);
}

/* The bind address of cfg into ss; false when it is not an IP literal. */
static bool bind_address(const struct http_config *cfg,
                         struct sockaddr_storage *ss, unsigned *flags)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, cfg->bind, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons(cfg->port);
        return true;
    }
    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET6, cfg->bind, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(cfg->port);
        *flags |= MHD_USE_IPv6;
        return true;
    }
    return false;
}

int handlers_server_start(const struct http_config *cfg, struct sale *sale,
                          struct handlers_server **out)
{
    struct sockaddr_storage ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    struct handlers_server *srv;
    unsigned n = route_count();
    int err;

    if (!bind_address(cfg, &ss, &flags))
        return -EINVAL;
    if (cfg->head_max < HTTP_HEAD_LIMIT_MIN ||
        cfg->head_max > HTTP_HEAD_LIMIT_MAX) {
        log_error("http server start failed", "head_max=%u range=%d..%d",
                  cfg->head_max, HTTP_HEAD_LIMIT_MIN, HTTP_HEAD_LIMIT_MAX);
        return -EINVAL;
    }
    srv = xcalloc(1, sizeof(*srv));
    srv->shared.cfg = cfg;
    srv->shared.limits = req_limits_of(cfg->head_max);
    srv->shared.sale = sale;
    /* The metrics' names of the routes, and of the requests of none. */
    srv->route_names = xcalloc(n + 1, sizeof(*srv->route_names));
    for (unsigned i = 0; i < n; i++)
        srv->route_names[i] = route_pattern(i);
    srv->route_names[n] = "unmatched";
    srv->shared.route_names = srv->route_names;
    srv->shared.routes = n + 1;
    srv->deadlines = deadlines_start(cfg->conn_timeout_s);
    /* MHD splits the connection limit between the threads of the pool;
     * the per-address limit is counted over all of them. Each connection
     * has a buffer of limits.conn_memory for its request's head and its
     * reply's (protocol.h), its resident memory while it is idle. */
    srv->daemon = MHD_start_daemon(
        flags, cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)cfg->threads, MHD_OPTION_CONNECTION_LIMIT, cfg->max_conn,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_conn_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->conn_timeout_s,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, srv->shared.limits.conn_memory,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, srv,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        err = errno ? -errno : -EIO;
        log_error("http server start failed", "bind=%s port=%u err=\"%s\"",
                  cfg->bind, cfg->port, strerror(-err));
        deadlines_stop(srv->deadlines);
        free(srv->route_names);
        free(srv);
        return err;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : cfg->port;
    *out = srv;
    return 0;
}

uint16_t handlers_server_port(const struct handlers_server *srv)
{
    return srv->port;
}

void handlers_server_drain(struct handlers_server *srv)
{
    if (srv && !atomic_exchange(&srv->shared.draining, true))
        log_info("draining", "readyz=503 port=%u", srv->port);
}

void handlers_server_quiesce(struct handlers_server *srv)
{
    MHD_socket lfd;

    if (!srv)
        return;
    /* The listener is ours to close (libmicrohttpd leaves it open). */
    lfd = MHD_quiesce_daemon(srv->daemon);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    atomic_store(&srv->shared.draining, true);
}

unsigned handlers_server_parked(const struct handlers_server *srv)
{
    return srv ? atomic_load(&srv->shared.parked) : 0;
}

void handlers_server_stop(struct handlers_server *srv)
{
    if (!srv)
        return;
    /* It closes every connection and joins its threads; then no request
     * runs any more. */
    MHD_stop_daemon(srv->daemon);
    deadlines_stop(srv->deadlines);
    free(srv->route_names);
    free(srv);
}
