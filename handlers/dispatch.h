/*
 * dispatch.h - one request from its first callback to its completion
 * (dispatch.c): setting it up, the framing checks and the body cap,
 * routing, running its handler where the route says (the rate limit
 * first), and sending its reply. The libmicrohttpd daemon (http.c) calls
 * these from its callbacks; the fuzz harnesses call them over a fake
 * connection.
 */
#ifndef SECKILL_HANDLERS_DISPATCH_H
#define SECKILL_HANDLERS_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>

#include "handlers/request.h"

/* What the daemon keeps per client connection (its socket context),
 * which a request reads when it starts. */
struct conn_info {
    struct deadline_conn *deadline;
    uint64_t accept_ns; /* monotonic; 0 once its first request started */
    size_t target_len;  /* the request target as sent, of the request read */
    const char *target; /* where it began in the daemon's buffer */
};

/*
 * The access handler of srv's requests, called as libmicrohttpd's
 * MHD_AccessHandlerCallback is (*req_cls is the request, NULL at its first
 * call): the headers, then the upload in pieces, then the end of the
 * upload, then, for a parked request, once more after its req_resume().
 * Returns MHD_YES, or MHD_NO to close the connection.
 */
enum MHD_Result dispatch_access(struct req_server *srv,
                                struct MHD_Connection *conn, const char *url,
                                const char *method, const char *version,
                                const char *upload, size_t *upload_size,
                                void **req_cls);

/*
 * libmicrohttpd's URI callback (MHD_OPTION_URI_LOG_CALLBACK), called with
 * a request's URI before the daemon splits off its query arguments, each
 * of which takes room in the connection's memory pool: hundreds of them
 * exhaust it, and the daemon then cannot answer at all. A query of more
 * than srv's limits.query_args_max arguments (more than any route takes),
 * or a target longer than limits.target_max, is cut off here (in the
 * daemon's own buffer: nothing of the query is parsed), and the returned
 * mark (the request's first *req_cls) has dispatch_access() answer 414 at
 * once. NULL otherwise.
 */
void *dispatch_uri(const struct req_server *srv, char *uri);

/* The request of *req_cls is over (answered, or its connection gone):
 * count it if its reply was never queued, free it, clear *req_cls. */
void dispatch_completed(struct req_server *srv, void **req_cls);

#endif
