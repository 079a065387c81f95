/*
 * stream.h - a reply whose body is made page by page while it is sent
 * (stream.c): the CSV export of a sale's orders. The pages are made on
 * the task pool (they wait for MySQL); the HTTP thread only copies the
 * bytes of a page that is ready. When none is, the connection is
 * suspended (libmicrohttpd calls nothing of it meanwhile) and resumed
 * when the next page is ready: no HTTP thread waits, none spins. At most
 * two pages are held at a time (the one being sent and the next), so a
 * body of any size takes constant memory.
 *
 * The body is sent chunked. A page that fails after the first bytes went
 * out cannot become an error status any more: the failure is logged and
 * the connection is closed without the last chunk, which an HTTP/1.1
 * client reports as an incomplete body. A client that goes away
 * mid-stream frees everything, and no further page is made.
 */
#ifndef SECKILL_HANDLERS_STREAM_H
#define SECKILL_HANDLERS_STREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "handlers/request.h"

/* What makes the pages. */
struct stream_source {
    /*
     * Make the next page: on a pool thread (it may wait), ctx's. Set *data
     * to a new buffer of *len bytes (free(3)d by the stream; NULL when
     * empty) and *end when nothing follows it. 0, or -errno: the stream
     * ends there, incomplete (op names it in the log).
     */
    int (*next)(void *ctx, struct sale *s, char **data, size_t *len, bool *end);
    /* Free ctx (called once, from any thread). */
    void (*free)(void *ctx);
    const char *op; /* for the log: "orders_csv" */
};

/*
 * Set req's reply to a stream of type (a string that outlives the
 * reply): first the first page (data, len: taken; end: nothing follows),
 * then src's pages. ctx is src's, taken too (freed by src->free). At
 * most one more header (name, value: copied) is sent with it. Returns
 * 200.
 */
unsigned req_reply_stream(struct request *req, const char *type,
                          const char *header, const char *value, char *data,
                          size_t len, bool end, const struct stream_source *src,
                          void *ctx);

/* For reply.c: req's stream as a libmicrohttpd response (it takes the
 * stream), or NULL without memory. */
struct MHD_Response *stream_response(struct request *req);

/* Free a stream that never became a response. Accepts NULL. */
void stream_discard(struct stream *st);

#endif
