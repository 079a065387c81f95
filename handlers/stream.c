/*
 * stream.c - a reply made page by page on the task pool while it is sent
 * (see stream.h).
 *
 * The stream is shared by the response (libmicrohttpd's reader and free
 * callbacks, on the connection's HTTP thread) and at most one job that
 * makes the next page (on a pool thread), under one mutex. Whichever of
 * the two lets go last frees it: the response's free callback marks it
 * gone, and a job still running frees it when it comes back. The reader
 * asks for the next page as soon as it starts sending one, so the pool
 * usually works while the network does.
 */
#include "handlers/stream.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <microhttpd.h>

#include "common/util.h"

/* The room libmicrohttpd gives the reader per call. */
#define STREAM_BLOCK (64 * 1024)

struct stream {
    pthread_mutex_t mu;
    struct sale *sale;
    struct MHD_Connection *conn;
    const struct stream_source *src;
    void *ctx;
    char header[2][96]; /* the extra header's name and value */
    const char *type;
    char *cur; /* the page being sent, from off */
    size_t cur_len, off;
    char *ready; /* the next page, made */
    size_t ready_len;
    bool fetching;  /* a job makes the next page */
    bool end;       /* the last page is made */
    int err;        /* a page failed: end incomplete */
    bool suspended; /* the reader waits for a page */
    bool gone;      /* the response let go */
    bool logged;
};

static void stream_free(struct stream *st)
{
    if (st->src && st->src->free)
        st->src->free(st->ctx);
    free(st->cur);
    free(st->ready);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

void stream_discard(struct stream *st)
{
    if (st)
        stream_free(st);
}

/* A job: make the next page. */
static void stream_fetch(void *arg, int err)
{
    struct stream *st = arg;
    struct MHD_Connection *resume = NULL;
    char *data = NULL;
    size_t len = 0;
    bool end = false, gone;

    pthread_mutex_lock(&st->mu);
    gone = st->gone;
    pthread_mutex_unlock(&st->mu);
    /* The client went away: make nothing more. */
    if (!err && !gone)
        err = st->src->next(st->ctx, st->sale, &data, &len, &end);

    pthread_mutex_lock(&st->mu);
    st->fetching = false;
    if (st->gone) {
        pthread_mutex_unlock(&st->mu);
        free(data);
        stream_free(st);
        return;
    }
    if (err) {
        st->err = err;
        free(data);
    } else {
        st->ready = data;
        st->ready_len = len;
        st->end = end;
    }
    if (st->suspended) {
        st->suspended = false;
        resume = st->conn;
    }
    pthread_mutex_unlock(&st->mu);
    /* A suspended connection is left alone by the daemon until this: the
     * stream cannot go meanwhile. */
    if (resume)
        MHD_resume_connection(resume);
}

/* Start the job for the next page, under st->mu. */
static void fetch_start(struct stream *st)
{
    if (st->fetching || st->end || st->err || st->ready)
        return;
    st->fetching = true;
    if (sale_job_run(st->sale, stream_fetch, st) != 0) {
        st->fetching = false;
        st->err = -ESHUTDOWN;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *st = cls;
    ssize_t n;

    (void)pos;
    pthread_mutex_lock(&st->mu);
    if (st->off == st->cur_len && st->ready) {
        free(st->cur);
        st->cur = st->ready;
        st->cur_len = st->ready_len;
        st->off = 0;
        st->ready = NULL;
        st->ready_len = 0;
    }
    /* Sending a page: the next one is made meanwhile. */
    fetch_start(st);
    if (st->off < st->cur_len) {
        size_t k = st->cur_len - st->off < max ? st->cur_len - st->off : max;

        memcpy(buf, st->cur + st->off, k);
        st->off += k;
        pthread_mutex_unlock(&st->mu);
        return (ssize_t)k;
    }
    if (st->err) {
        if (!st->logged)
            log_warn("stream ended incomplete: the body lacks its last "
                     "chunk",
                     "op=%s err=%d", st->src->op, st->err);
        st->logged = true;
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (st->end && !st->fetching) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* Nothing to send until the job is back: suspended until then,
         * so that the daemon does not call again and again. */
        st->suspended = true;
        MHD_suspend_connection(st->conn);
        n = 0;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

/* The response is done with the stream (sent, or the client gone). */
static void stream_release(void *cls)
{
    struct stream *st = cls;
    bool busy;

    pthread_mutex_lock(&st->mu);
    st->gone = true;
    busy = st->fetching;
    pthread_mutex_unlock(&st->mu);
    if (!busy)
        stream_free(st);
}

unsigned req_reply_stream(struct request *req, const char *type,
                          const char *header, const char *value, char *data,
                          size_t len, bool end, const struct stream_source *src,
                          void *ctx)
{
    struct stream *st = xcalloc(1, sizeof(*st));

    pthread_mutex_init(&st->mu, NULL);
    st->sale = req->sale;
    st->conn = (struct MHD_Connection *)req->conn;
    st->src = src;
    st->ctx = ctx;
    st->type = type;
    if (header) {
        snprintf(st->header[0], sizeof(st->header[0]), "%s", header);
        snprintf(st->header[1], sizeof(st->header[1]), "%s", value);
    }
    st->ready = data;
    st->ready_len = len;
    st->end = end;
    stream_discard(req->stream);
    req->stream = st;
    json_decref(req->reply);
    req->reply = NULL;
    req->status = 200;
    return 200;
}

struct MHD_Response *stream_response(struct request *req)
{
    struct stream *st = req->stream;
    struct MHD_Response *resp;

    req->stream = NULL;
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                             stream_read, st, stream_release);
    if (!resp) {
        stream_free(st);
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, st->type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (st->header[0][0])
        MHD_add_response_header(resp, st->header[0], st->header[1]);
    return resp;
}
