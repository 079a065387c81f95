/*
 * http.c - libmicrohttpd wiring: the daemon and its thread pool, per-thread
 * stores, connection limits and request deadlines, body accumulation with
 * the 64 KiB cap, rate limits and dispatch through the route table,
 * parking a request while the purchase engine or the I/O pool works
 * (suspend/resume; the pool is an engine of its own that runs the
 * handlers that wait for MySQL or Redis, req_offload()), and sending the
 * reply (JSON, the metrics' text, or a page's file) with its
 * extra headers (CORS, files).
 */
#include "handlers/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <microhttpd.h>

#include "common/metrics.h"
#include "common/util.h"

struct handlers_server {
    struct MHD_Daemon *daemon;
    const struct handlers_config *cfg;
    struct lock_client *locks;
    struct vcache *vcache;
    struct engine *engine;
    struct engine_config engine_cfg;
    /* The I/O pool: an engine used for its tasks only (req_offload()). */
    struct engine *io;
    struct engine_config io_cfg;
    struct async *async; /* the writer of async sales' orders */
    struct async_config async_cfg;
    struct deadlines *deadlines;
    struct store_replica_monitor *replica; /* NULL: no read replica */
    uint16_t port;
    /* Requests parked and not yet completed (sent or abandoned). */
    atomic_uint parked;
    atomic_bool draining; /* handlers_server_drain() was called */
};

/* What the service keeps per client connection. */
struct conn_info {
    struct deadline_conn *deadline;
    uint64_t accept_ns; /* monotonic; 0 once its first request started */
};

/* Each worker thread owns one store, freed when the thread exits. */
static pthread_key_t store_key;
static pthread_once_t store_key_once = PTHREAD_ONCE_INIT;

static void store_key_destroy(void *p)
{
    store_free(p);
}

static void store_key_create(void)
{
    if (pthread_key_create(&store_key, store_key_destroy) != 0)
        abort();
}

static struct store *thread_store(const struct handlers_config *cfg)
{
    struct store *st = pthread_getspecific(store_key);

    if (!st) {
        st = store_new(&cfg->store);
        pthread_setspecific(store_key, st);
    }
    return st;
}

bool server_draining(const struct handlers_server *srv)
{
    return srv && atomic_load_explicit(&srv->draining, memory_order_relaxed);
}

/* Add req's extra headers to resp, queue it and drop our reference; while
 * draining, the connection closes after it. */
/* Monotonic nanoseconds, for request durations. */
static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static enum MHD_Result queue_reply(struct MHD_Connection *conn,
                                   struct request *req,
                                   struct MHD_Response *resp)
{
    enum MHD_Result ret;

    for (unsigned i = 0; i < req->n_headers; i++)
        MHD_add_response_header(resp, req->headers[i].name,
                                req->headers[i].value);
    if (server_draining(req->srv))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    /* Counted now, not when the connection is done with it: a client
     * that has its answer and then scrapes /metrics finds it there. */
    metrics_request_observe(req->route_id, req->status,
                            now_ns() - req->start_ns);
    req->observed = true;
    ret = MHD_queue_response(conn, req->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_reply(struct MHD_Connection *conn,
                                  struct request *req)
{
    char *text;
    struct MHD_Response *resp;

    cors_reply_headers(req);
    if (req->raw) {
        /* An embedded file, or no body (204, 304): not ours to free. */
        resp = MHD_create_response_from_buffer(req->data_len, (void *)req->data,
                                               MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        if (req->text_type)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    req->text_type);
        return queue_reply(conn, req, resp);
    }
    if (req->text) {
        /* A text reply (GET /metrics): the response takes the buffer. */
        resp = MHD_create_response_from_buffer(req->text_len, req->text,
                                               MHD_RESPMEM_MUST_FREE);
        if (!resp)
            return MHD_NO;
        req->text = NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                req->text_type);
        return queue_reply(conn, req, resp);
    }
    if (!req->reply)
        req_error(req, ERR_INTERNAL, NULL);
    text = json_dumps(req->reply, JSON_COMPACT);
    if (!text)
        abort(); /* only out of memory */
    /* A trailing newline keeps curl output readable in a terminal. */
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len++] = '\n';
    text[len] = '\0';
    resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    if (req->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, req->allow);
    if (req->retry_after) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", req->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    return queue_reply(conn, req, resp);
}

static unsigned offload(struct request *req, handler_fn fn, bool limit);

static void dispatch(struct request *req)
{
    const struct route *route;
    handler_fn fn = NULL;

    switch (route_match(req->path, &route, &req->id)) {
    case ROUTE_NOT_FOUND:
        req_error(req, ERR_NOT_FOUND, "no such endpoint");
        return;
    case ROUTE_BAD_ID:
        req->route_id = route_index(route);
        req_error(req, ERR_BAD_REQUEST, "the id must be a positive integer");
        return;
    case ROUTE_OK:
        req->route_id = route_index(route);
        break;
    }
    if (req->method == HTTP_OPTIONS) {
        cors_options(req, route);
        return;
    }
    if (req->method == HTTP_GET)
        fn = route->get;
    else if (req->method == HTTP_POST)
        fn = route->post;
    if (!fn) {
        req->allow = route->allow;
        req_error(req, ERR_METHOD_NOT_ALLOWED, NULL);
        return;
    }
    if (!route->http_thread) {
        /* The limiter (a Redis script) and the handler, on the pool. The
         * readiness probe is not limited: it always answers. */
        offload(req, fn, fn != ready_get);
        return;
    }
    /* From memory: the probe, /metrics, the pages' files (a page load
     * must not eat a client's API budget), and the purchase, which runs
     * the limiter itself after what it can refuse from memory (a
     * sold-out voucher must not cost a Redis round trip). */
    req->st = thread_store(req->cfg);
    fn(req);
}

/* What was kept for conn when it was accepted, or NULL. */
static struct conn_info *conn_info_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The deadline record of conn (set when it was accepted), or NULL. */
static struct deadline_conn *conn_deadline(struct MHD_Connection *conn)
{
    struct conn_info *info = conn_info_of(conn);
    return info ? info->deadline : NULL;
}

void req_park(struct request *req)
{
    struct handlers_server *srv = req->srv;

    if (req->parked) {
        /* On the I/O pool: its handler hands the request on, and the pool
         * must not touch it again. */
        if (req->handed_on)
            *req->handed_on = true;
        req->handed_on = NULL;
        return;
    }
    /* The request has fully arrived: no deadline while it waits. */
    deadline_conn_busy(conn_deadline(req->conn));
    atomic_fetch_add(&srv->parked, 1);
    req->parked = true;
    MHD_suspend_connection(req->conn);
}

void req_resume(struct request *req)
{
    /* libmicrohttpd calls on_request() again, on the connection's own
     * thread, which sends the reply set here. */
    MHD_resume_connection(req->conn);
}

/* ---- the I/O pool ---- */

/* A handler run on the pool; the task first (offload_run's cast). */
struct offload {
    struct engine_task task;
    struct request *req;
    handler_fn fn;
    bool limit; /* run the rate limiter first */
};

static void offload_run(struct engine_task *t, struct store *st)
{
    struct offload *o = (struct offload *)t;
    struct request *req = o->req;
    bool handed_on = false;

    req->st = st;
    req->handed_on = &handed_on;
    if ((now_ns() - req->start_ns) / 1000000u > STORE_PURCHASE_BUDGET_MS)
        /* It waited out its budget behind requests that wait for a
         * stalled backend: the client has been patient enough. */
        req_error(req, ERR_UNAVAILABLE,
                  "the service could not get to this request in time; "
                  "nothing was done, retry");
    else if (!o->limit || !ratelimit_or_reply(req))
        o->fn(req);
    /* Handed on, req is someone else's now (it may be gone already). */
    if (!handed_on) {
        req->handed_on = NULL;
        req_resume(req);
    }
}

static void offload_done(struct engine_task *t)
{
    struct offload *o = (struct offload *)t;

    if (t->err) {
        /* The pool stopped before it ran: nothing was done. */
        req_backend_error(o->req, t->err, "request");
        req_resume(o->req);
    }
    free(o);
}

static unsigned offload(struct request *req, handler_fn fn, bool limit)
{
    struct offload *o;

    if (req->handed_on) /* on the pool already */
        return (!limit || !ratelimit_or_reply(req)) ? fn(req) : req->status;
    o = xcalloc(1, sizeof(*o));
    o->task = (struct engine_task){.run = offload_run, .done = offload_done};
    o->req = req;
    o->fn = fn;
    o->limit = limit;
    req_park(req);
    if (engine_run(req->srv->io, &o->task) != 0) {
        free(o);
        req_backend_error(req, -ESHUTDOWN, "request");
        req_resume(req);
    }
    return 0;
}

unsigned req_offload(struct request *req, handler_fn fn)
{
    return offload(req, fn, false);
}

/* A response is about to be queued: the request has fully arrived. */
static enum MHD_Result reply_now(struct MHD_Connection *conn,
                                 struct request *req)
{
    deadline_conn_busy(conn_deadline(conn));
    return send_reply(conn, req);
}

/* Declared length above the cap: refuse before reading the body. */
static bool declared_too_large(struct MHD_Connection *conn)
{
    const char *cl = MHD_lookup_connection_value(
        conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl && strtoull(cl, NULL, 10) > BODY_MAX;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    struct handlers_server *srv = cls;
    struct request *req = *req_cls;

    if (!req) {
        struct conn_info *info = conn_info_of(conn);

        req = xcalloc(1, sizeof(*req));
        req->start_ns = now_ns();
        if (info && info->accept_ns) {
            metrics_observe_wait(METRIC_WAIT_ACCEPT,
                                 req->start_ns - info->accept_ns);
            info->accept_ns = 0;
        }
        req->route_id = route_count(); /* "unmatched" until dispatch */
        req->cfg = srv->cfg;
        req->srv = srv;
        req->locks = srv->locks;
        req->vcache = srv->vcache;
        req->engine = srv->engine;
        req->async = srv->async;
        req->conn = conn;
        req->path = url;
        req->version = version;
        req->method = strcmp(method, "GET") == 0       ? HTTP_GET
                      : strcmp(method, "POST") == 0    ? HTTP_POST
                      : strcmp(method, "OPTIONS") == 0 ? HTTP_OPTIONS
                                                       : HTTP_OTHER;
        *req_cls = req;
        if (req_protocol_or_reply(req))
            return reply_now(conn, req);
        if (declared_too_large(conn)) {
            req_error(req, ERR_PAYLOAD_TOO_LARGE, NULL);
            return reply_now(conn, req);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!req->too_large && req->body_len + *upload_size > BODY_MAX) {
            /* Chunked bodies have no Content-Length: stop keeping them. */
            req->too_large = true;
            free(req->body);
            req->body = NULL;
        }
        if (!req->too_large) {
            req->body = xrealloc(req->body, req->body_len + *upload_size + 1);
            memcpy(req->body + req->body_len, upload, *upload_size);
            req->body_len += *upload_size;
            req->body[req->body_len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    /* Back from the purchase engine: its reply is set. */
    if (req->parked)
        return send_reply(conn, req);
    if (req->too_large)
        req_error(req, ERR_PAYLOAD_TOO_LARGE, NULL);
    else
        dispatch(req);
    if (req->parked)
        return MHD_YES; /* suspended: req_resume() brings it back */
    return reply_now(conn, req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct handlers_server *srv = cls;
    struct request *req = *req_cls;
    (void)toe;

    /* Keep-alive: the next request is due within the timeout. */
    deadline_conn_idle(srv->deadlines, conn_deadline(conn));
    if (!req)
        return;
    if (req->parked)
        atomic_fetch_sub(&srv->parked, 1);
    if (!req->observed) /* ended before a reply was queued */
        metrics_request_observe(req->route_id, req->status,
                                now_ns() - req->start_ns);
    request_clear(req);
    free(req->text);
    free(req);
    *req_cls = NULL;
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
        info->accept_ns = now_ns();
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
 * libmicrohttpd does, except "%00": a decoded NUL would cut the C string
 * short, so "/api/orders/1%00x" would read as order 1 and "limit=5%00x"
 * as 5. Left encoded, it makes such a value invalid. Returns the length.
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

        if (lo >= 0 && (hi | lo)) {
            *w++ = (char)(hi << 4 | lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    (void)cls;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    buf[strcspn(buf, "\n")] = '\0';
    log_warn("http server error", "detail=\"%s\"", buf);
}

/* The engine's expiry closed orders (on the expiry thread, with its
 * store): their units are back on sale. */
static void units_returned(void *ctx, struct store *st, int64_t voucher_id,
                           const int64_t *orders, const int64_t *users,
                           size_t n)
{
    struct handlers_server *srv = ctx;

    order_units_returned(srv->vcache, st, voucher_id, orders, users, n);
}

/* An async sale was rebuilt (on the writer thread, with its store). */
static void async_stock_changed(void *ctx, struct store *st, int64_t voucher_id)
{
    struct handlers_server *srv = ctx;

    vcache_voucher_changed(srv->vcache, st, voucher_id);
}

/* Async mode promises that a 202 is written: on a Redis that may lose an
 * acknowledged write, refuse to start unless the operator accepts it. */
static int async_durability_check(const struct handlers_config *cfg)
{
    struct store *st;
    redisContext *rc;
    char why[96];
    int err;

    if (cfg->purchase_mode != PURCHASE_ASYNC || cfg->async_accept_loss)
        return 0;
    st = store_new(&cfg->store);
    rc = store_redis(st);
    err = rc ? async_redis_durable(rc, why, sizeof(why)) : 0;
    store_free(st);
    if (err == -EPERM) {
        log_error("async purchase mode refused: redis may lose acknowledged "
                  "writes; set appendonly yes and appendfsync always, or "
                  "SECKILL_ASYNC_ACCEPT_LOSS=1",
                  "redis=\"%s\"", why);
        return -EPERM;
    }
    return 0; /* durable, or unknown now: the writer looks again */
}

/*
 * The assembly, each part before what uses it: the lock client, the
 * voucher cache, the replica monitor, the async writer, the purchase
 * engine (which calls the writer), the I/O pool (which hands work to the
 * engine), the request deadlines, and last the daemon, since requests
 * reach everything above as soon as it listens. handlers_server_stop()
 * takes it apart in the opposite order.
 */
int handlers_server_start(const struct handlers_config *cfg,
                          struct handlers_server **out)
{
    struct sockaddr_storage ss = {0};
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    struct handlers_server *srv;

    if (inet_pton(AF_INET, cfg->bind, &((struct sockaddr_in *)&ss)->sin_addr) ==
        1) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(cfg->port);
    } else if (inet_pton(AF_INET6, cfg->bind,
                         &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        return -EINVAL;
    }
    pthread_once(&store_key_once, store_key_create);

    srv = xcalloc(1, sizeof(*srv));
    srv->cfg = cfg;
    int err = lock_client_open(cfg->lock_url, NULL, &srv->locks);
    if (err) {
        log_error("lock backend refused", "err=%d", err);
        free(srv);
        return err;
    }
    err = async_durability_check(cfg);
    if (err) {
        lock_client_close(srv->locks);
        free(srv);
        return err;
    }
    srv->vcache = vcache_new(cfg);
    srv->replica = store_replica_monitor_start(&cfg->store);
    srv->engine_cfg = (struct engine_config){
        .store = &cfg->store,
        .locks = srv->locks,
        .workers = cfg->engine_threads,
        .batch_max =
            cfg->store.batch_max ? cfg->store.batch_max : STORE_BATCH_DEFAULT,
        .batch_linger_us = cfg->store.batch_linger_us,
        .queue_max = cfg->queue_max,
        .lock_ttl_ms = cfg->lock_ttl_ms,
        .units_returned = units_returned,
        .units_returned_ctx = srv,
        .expiry = true,
        .async_backlog_max = cfg->async_backlog_max,
        .idle_free_ms = cfg->idle_free_s * 1000u,
    };
    srv->async_cfg = (struct async_config){
        .store = &cfg->store,
        .locks = srv->locks,
        .batch = 256,
        .claim_ms = ASYNC_CLAIM_MS,
        .reconcile_ms = cfg->async_reconcile_ms,
        .lookback_s = cfg->async_lookback_s,
        .stock_changed = async_stock_changed,
        .ctx = srv,
        .accept_loss = cfg->async_accept_loss,
        .replicas = cfg->async_replicas,
        .wait_ms = cfg->async_wait_ms,
    };
    srv->async = async_start(&srv->async_cfg);
    srv->engine_cfg.async = srv->async;
    srv->engine = engine_start(&srv->engine_cfg);
    /* Its threads block on MySQL and Redis one request at a time, as many
     * as the engine's: a stalled backend holds them, never an HTTP
     * thread, and never a purchase batch. */
    srv->io_cfg = (struct engine_config){
        .store = &cfg->store,
        .workers = cfg->engine_threads,
        .batch_max = 1,
        .queue_max = 1,
    };
    srv->io = engine_start(&srv->io_cfg);
    srv->deadlines = deadlines_start(cfg->conn_timeout_s);
    /* MHD splits the connection limit between the threads of the pool;
     * the per-address limit is counted over all of them. */
    srv->daemon = MHD_start_daemon(
        flags, cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)cfg->threads, MHD_OPTION_CONNECTION_LIMIT, cfg->max_conn,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_conn_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, cfg->conn_timeout_s,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, srv,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        err = errno ? -errno : -EIO;
        log_error("http server start failed", "bind=%s port=%u err=\"%s\"",
                  cfg->bind, cfg->port, strerror(-err));
        deadlines_stop(srv->deadlines);
        engine_free(srv->io);
        engine_free(srv->engine);
        async_stop(srv->async);
        store_replica_monitor_stop(srv->replica);
        vcache_free(srv->vcache);
        lock_client_close(srv->locks);
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
    if (srv && !atomic_exchange(&srv->draining, true))
        log_info("draining", "readyz=503 port=%u", srv->port);
}

/*
 * The stop, in the order that keeps every request's memory alive for as
 * long as a request can reach it: refuse new work, resume every parked
 * request, stop the daemon, then free what the requests used.
 */
void handlers_server_stop(struct handlers_server *srv)
{
    MHD_socket lfd;

    if (!srv)
        return;
    /* 1. No new connections: the listener is ours to close (libmicrohttpd
     * leaves it open), so that new clients are refused at once, which a
     * load balancer retries elsewhere, rather than left in the backlog
     * until the stop resets them. The connections already open are still
     * served until step 3; from now on every reply closes its connection,
     * as while draining. */
    lfd = MHD_quiesce_daemon(srv->daemon);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    atomic_store(&srv->draining, true);
    /* 2. The engines refuse new work (503 at once, nothing written), let
     * the batches and tasks that run finish, and answer what still waits
     * (503, nothing written): every parked request is resumed with its
     * reply. The pool first: a request it runs may still hand a purchase
     * or a task to the engine. Both stay allocated until step 4, since
     * a request that arrives meanwhile still calls them. */
    engine_stop(srv->io);
    engine_stop(srv->engine);
    /* 3. Give those replies a moment to go out, then stop the daemon: it
     * closes every connection and joins its threads (whose thread-exit
     * destructor closes each thread's store). Nothing is suspended any
     * more: a request parks now only for as long as its own callback. */
    for (int i = 0; i < 300 && atomic_load(&srv->parked) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(srv->daemon);
    /* 4. No request runs any more: free what they used. The writer after
     * the engine: nothing sells any more; what it holds is claimed by
     * another instance, or by this one after a restart. */
    deadlines_stop(srv->deadlines);
    engine_free(srv->io);
    engine_free(srv->engine);
    async_stop(srv->async);
    store_replica_monitor_stop(srv->replica);
    vcache_free(srv->vcache);
    lock_client_close(srv->locks);
    free(srv);
}
