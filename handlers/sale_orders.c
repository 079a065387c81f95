/*
 * sale_orders.c - GET /api/vouchers/{id}/orders (admin): one sale's
 * orders, newest first in pages (cursor: the last order's id), or with
 * Accept: text/csv all of them, oldest first, as a CSV file streamed
 * page by page (stream.h) in constant memory. The status argument
 * (unpaid, paid, cancelled, expired, all) filters both.
 *
 * The orders are MySQL's: an async sale's orders still on their way
 * there (the writer's delay) are not in the list yet.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "handlers/endpoints.h"
#include "handlers/stream.h"

#define PAGE_MAX 100
/* Orders per page of the CSV: one MySQL query each. */
#define CSV_PAGE 1000

static const char csv_header[] =
    "orderId,userId,status,amount,createTime,payDeadline,payTime,closeTime\n";

/* The status argument: 0 for all, else the order status; -1 bad. */
static int status_arg(const char *s)
{
    static const struct {
        const char *name;
        int status;
    } names[] = {{"all", 0},
                 {"unpaid", ORDER_UNPAID},
                 {"paid", ORDER_PAID},
                 {"cancelled", ORDER_CANCELLED},
                 {"expired", ORDER_EXPIRED}};

    if (!s)
        return 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].status;
    return -1;
}

/* Whether the client asks for CSV (Accept names text/csv). */
static bool wants_csv(const struct request *req)
{
    const char *a = req_header_value(req, "Accept");

    return a && strcasestr(a, "text/csv") != NULL;
}

/* ---- the CSV ---- */

/* A growing buffer of one page's text. */
struct text {
    char *p;
    size_t len, cap;
};

static void text_add(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->p = xrealloc(t->p, t->cap);
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

/* An epoch-ms time as the JSON shows it, or nothing for 0 (NULL). */
static void csv_time(struct text *t, int64_t ms)
{
    char buf[UTIL_TIME_LEN];

    if (!ms)
        return;
    util_time_format(ms / 1000, buf);
    text_add(t, buf, strlen(buf));
}

static void csv_row(struct text *t, const struct store_order *o, int64_t amount)
{
    char buf[96];
    int n = snprintf(buf, sizeof(buf), "%lld,%lld,%s,%lld,", (long long)o->id,
                     (long long)o->user_id, order_status_name(o->status),
                     (long long)amount);

    text_add(t, buf, (size_t)n);
    csv_time(t, o->created * 1000);
    text_add(t, ",", 1);
    csv_time(t, o->pay_deadline_ms);
    text_add(t, ",", 1);
    csv_time(t, o->pay_time_ms);
    text_add(t, ",", 1);
    csv_time(t, o->close_time_ms);
    text_add(t, "\n", 1);
}

/* Where the export is: the pages after order id after. */
struct csv_export {
    int64_t voucher_id;
    int status;
    int64_t amount; /* the voucher's pay value: orders keep none */
    int64_t after;
    struct store_order rows[CSV_PAGE];
};

/* One page into *data; with header, the header line first. */
static int csv_page(struct csv_export *x, struct sale *s, bool header,
                    char **data, size_t *len, bool *end)
{
    struct text t = {0};
    size_t n;
    int err = sale_voucher_orders(s, x->voucher_id, x->status, false, x->after,
                                  x->rows, CSV_PAGE, &n);

    if (err)
        return err;
    if (header)
        text_add(&t, csv_header, sizeof(csv_header) - 1);
    for (size_t i = 0; i < n; i++)
        csv_row(&t, &x->rows[i], x->amount);
    if (n)
        x->after = x->rows[n - 1].id;
    *end = n < CSV_PAGE;
    *data = t.p;
    *len = t.len;
    return 0;
}

static int csv_next(void *ctx, struct sale *s, char **data, size_t *len,
                    bool *end)
{
    return csv_page(ctx, s, false, data, len, end);
}

static const struct stream_source csv_source = {
    .next = csv_next,
    .free = free,
    .op = "orders_csv",
};

static unsigned csv_reply(struct request *req, const struct store_voucher *v,
                          int status)
{
    struct csv_export *x = xcalloc(1, sizeof(*x));
    char disposition[80];
    char *data;
    size_t len;
    bool end;
    int err;

    x->voucher_id = v->id;
    x->status = status;
    x->amount = v->pay_value;
    /* The first page here, so that a failure is still an error reply. */
    err = csv_page(x, req->sale, true, &data, &len, &end);
    if (err) {
        free(x);
        return req_backend_error(req, err, "orders_csv");
    }
    snprintf(disposition, sizeof(disposition),
             "attachment; filename=\"voucher-%lld-orders.csv\"",
             (long long)v->id);
    return req_reply_stream(req, "text/csv; charset=utf-8",
                            "Content-Disposition", disposition, data, len, end,
                            &csv_source, x);
}

/* ---- the JSON pages ---- */

unsigned voucher_orders_get(struct request *req)
{
    struct store_voucher *v = NULL;
    struct store_order *rows = NULL;
    int64_t limit, before = 0;
    bool given, more;
    json_t *items;
    unsigned code;
    size_t n;
    int status, err;

    if ((code = req_admin_or_reply(req)))
        return code;
    status = status_arg(req_query(req, "status"));
    if (status < 0)
        return req_error(req, ERR_BAD_REQUEST,
                         "status: must be unpaid, paid, cancelled, expired "
                         "or all");
    if (!query_int_or_reply(req, "limit", 50, 1, PAGE_MAX, &limit) ||
        !query_cursor_or_reply(req, 1, &before, &given))
        return req->status;
    v = xmalloc(sizeof(*v));
    err = sale_voucher_get(req->sale, req->id, v);
    if (err == -ENOENT) {
        req_error(req, ERR_NOT_FOUND, "no voucher with this id");
        goto out;
    }
    if (err) {
        req_backend_error(req, err, "voucher_get");
        goto out;
    }
    if (wants_csv(req)) {
        csv_reply(req, v, status);
        goto out;
    }
    /* One more than the page: whether another page follows. */
    rows = xcalloc((size_t)limit + 1, sizeof(*rows));
    err = sale_voucher_orders(req->sale, req->id, status, true, before, rows,
                              (size_t)limit + 1, &n);
    if (err) {
        req_backend_error(req, err, "voucher_orders");
        goto out;
    }
    more = n > (size_t)limit;
    if (more)
        n = (size_t)limit;
    items = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *o = order_json(&rows[i], false);

        json_object_set_new(o, "amount", json_integer(v->pay_value));
        json_array_append_new(items, o);
    }
    req_reply(req, 200,
              json_pack("{s:o,s:o}", "items", items, "nextCursor",
                        json_cursor(more, 1, n ? &rows[n - 1].id : &before)));
out:
    free(rows);
    free(v);
    return req->status;
}
