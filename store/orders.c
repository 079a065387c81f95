/*
 * orders.c - the purchase: the one-purchase transaction (naive, or on a
 * stock segment), the choice between it and the merged transaction
 * (batch.c), and order reads.
 */
#include "store/internal.h"

#include <errno.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/metrics.h"
#include "common/sqlflavour.h"
#include "common/util.h"

struct purchase_args {
    int64_t order_id;
    int64_t user_id;
    int64_t voucher_id;
    struct voucher_state *vs;
    unsigned segments; /* > 1: CAS a segment, not the stock row */
    enum store_purchase *outcome;
};

int store_tx_rollback(struct store *st, int err)
{
    if (st->my && mysql_rollback(st->my))
        store_mysql_error(st, NULL, "rollback");
    return err;
}

/*
 * The CAS of a segmented voucher: take 1 from segment user_id % N, else
 * from the next ones in turn, skipping those seen empty before. A failed
 * UPDATE saw the segment's committed 0 (it waits for a holder of the row
 * lock), so the segment stays empty. Sets *taken.
 */
static int segment_take(struct store *st, struct purchase_args *a, bool *taken)
{
    unsigned n = a->segments, first = (unsigned)(a->user_id % n);
    MYSQL_BIND p[2];
    MYSQL_STMT *s;
    int64_t seg;
    int err;

    *taken = false;
    for (unsigned k = 0; k < n; k++) {
        unsigned j = (first + k) % n;

        if (store_segment_is_empty(a->vs, j))
            continue;
        memset(p, 0, sizeof(p));
        seg = j;
        bind_i64(&p[0], &a->voucher_id);
        bind_i64(&p[1], &seg);
        err = store_stmt_exec(st, STMT_SEGMENT_DECR, p, NULL, &s);
        if (err)
            return err;
        if (mysql_stmt_affected_rows(s) == 1) {
            *taken = true;
            return 0;
        }
        store_segment_mark_empty(a->vs, j);
    }
    return 0;
}

static int purchase_once(struct store *st, void *arg)
{
    struct purchase_args *a = arg;
    MYSQL_BIND p[3] = {0}, r[1] = {0};
    int64_t one = 0;
    MYSQL_STMT *s;
    bool taken;
    size_t n;
    int err;

    err = store_query(st, "START TRANSACTION");
    if (err)
        return err;

    /* 1. one order per user: the Redis lock serialises this user, the
     *    unique key catches anyone who got past an expired lock. */
    bind_i64(&p[0], &a->user_id);
    bind_i64(&p[1], &a->voucher_id);
    bind_i64(&r[0], &one);
    err = store_stmt_rows(st, STMT_ORDER_EXISTS, p, r, 1, NULL, NULL, &n);
    if (err)
        return store_tx_rollback(st, err);
    if (n) {
        *a->outcome = STORE_PURCHASE_DUPLICATE;
        return store_tx_rollback(st, 0);
    }

    /* 2. the order row. */
    MYSQL_BIND q[4] = {0};
    int64_t pay_timeout_s = store_pay_timeout_s(st);

    bind_i64(&q[0], &a->order_id);
    bind_i64(&q[1], &a->user_id);
    bind_i64(&q[2], &a->voucher_id);
    bind_i64(&q[3], &pay_timeout_s);
    err = store_stmt_exec(st, STMT_ORDER_INSERT, q, NULL, &s);
    if (err == -EEXIST) {
        /* Which key? The unique (user, voucher) key is the business
         * outcome; the primary key means the ID worker handed out an id
         * twice (its Redis counter was lost): the caller retries. */
        const char *m = mysql_stmt_error(st->stmts[STMT_ORDER_INSERT]);
        if (strstr(m, "uk_orders_active")) {
            *a->outcome = STORE_PURCHASE_DUPLICATE;
            return store_tx_rollback(st, 0);
        }
        log_error("order id already used", "id=%lld", (long long)a->order_id);
        return store_tx_rollback(st, -EEXIST);
    }
    if (err)
        return store_tx_rollback(st, err);

    /* 3. the CAS on the hot row (or a segment), last, so its row lock is
     *    held only for this statement and the COMMIT. */
    if (a->segments > 1) {
        err = segment_take(st, a, &taken);
    } else {
        memset(p, 0, sizeof(p));
        bind_i64(&p[0], &a->voucher_id);
        err = store_stmt_exec(st, STMT_STOCK_DECR, p, NULL, &s);
        taken = !err && mysql_stmt_affected_rows(s) == 1;
    }
    if (err)
        return store_tx_rollback(st, err);
    if (!taken) {
        *a->outcome = STORE_PURCHASE_SOLD_OUT;
        return store_tx_rollback(st, 0);
    }
    FAILPOINT("after_update");

    if (mysql_commit(st->my)) {
        err = store_mysql_error(st, NULL, "commit");
        /* The COMMIT may or may not have happened: never report either. */
        return err == -ENOTCONN ? -EINPROGRESS : store_tx_rollback(st, err);
    }
    FAILPOINT("after_commit");
    metrics_observe_batch(1);
    *a->outcome = STORE_PURCHASE_OK;
    return 0;
}

/* Every segment of a segmented voucher seen empty lately: sold out. */
static bool segments_all_empty(struct voucher_state *vs, unsigned n)
{
    for (unsigned j = 0; j < n; j++)
        if (!store_segment_is_empty(vs, j))
            return false;
    return true;
}

bool store_attempt_fits(int64_t deadline_ms)
{
    return util_mono_ms() + SQL_LOCK_WAIT_S * 1000 <= deadline_ms;
}

int store_purchase_single(struct store *st, struct voucher_state *vs,
                          unsigned segments, int64_t order_id, int64_t user_id,
                          int64_t voucher_id, int64_t deadline_ms,
                          enum store_purchase *outcome)
{
    struct purchase_args a = {order_id, user_id,  voucher_id,
                              vs,       segments, outcome};
    int err = -EDEADLK;

    if (segments > 1 && segments_all_empty(vs, segments)) {
        *outcome = STORE_PURCHASE_SOLD_OUT;
        return 0;
    }
    for (int i = 0; i < PURCHASE_ATTEMPTS && err == -EDEADLK; i++) {
        if (!store_attempt_fits(deadline_ms))
            return -ETIME; /* every attempt so far rolled back */
        err = store_retry(st, purchase_once, &a);
    }
    return err;
}

void store_purchase_batch(struct store *st, int64_t voucher_id,
                          struct store_purchase_item **items, size_t n)
{
    static const enum metric_counter counter[] = {
        [STORE_PURCHASE_OK] = METRIC_PURCHASE_OK,
        [STORE_PURCHASE_SOLD_OUT] = METRIC_PURCHASE_SOLD_OUT,
        [STORE_PURCHASE_DUPLICATE] = METRIC_PURCHASE_DUPLICATE,
    };
    struct voucher_state *vs = store_voucher_state_get(voucher_id);
    unsigned segments, batch_max = st->cfg->batch_max;
    int err;

    for (size_t i = 0; i < n; i++) {
        items[i]->settled = false;
        items[i]->err = 0;
        items[i]->outcome = STORE_PURCHASE_SOLD_OUT;
    }
    err = store_voucher_segments_get(st, vs, &segments);
    if (err) {
        for (size_t i = 0; i < n; i++)
            items[i]->err = err;
        goto out;
    }
    if (batch_max == 0)
        batch_max = STORE_BATCH_DEFAULT;
    if (segments > 1 || batch_max == 1) {
        for (size_t i = 0; i < n; i++)
            items[i]->err = store_purchase_single(
                st, vs, segments, items[i]->order_id, items[i]->user_id,
                voucher_id, items[i]->deadline_ms, &items[i]->outcome);
    } else {
        store_batch_run(st, vs, items, n);
    }
    for (size_t i = 0; i < n; i++)
        if (!items[i]->err)
            metrics_count(counter[items[i]->outcome], 1);
out:
    store_voucher_state_put(vs);
}

/* Result buffers for one row of the order SELECTs (ORDER_COLUMNS). */
struct order_row {
    MYSQL_BIND b[8];
    int64_t status;
    MYSQL_TIME created, deadline, paid, closed;
    char deadline_null, paid_null, closed_null;
};

static void order_row_bind(struct order_row *r, struct store_order *o)
{
    memset(r, 0, sizeof(*r));
    bind_i64(&r->b[0], &o->id);
    bind_i64(&r->b[1], &o->user_id);
    bind_i64(&r->b[2], &o->voucher_id);
    bind_i64(&r->b[3], &r->status);
    bind_time(&r->b[4], &r->created);
    bind_time_null(&r->b[5], &r->deadline, &r->deadline_null);
    bind_time_null(&r->b[6], &r->paid, &r->paid_null);
    bind_time_null(&r->b[7], &r->closed, &r->closed_null);
}

static void order_row_finish(struct order_row *r, struct store_order *o)
{
    o->status = (enum order_status)r->status;
    o->created = time_to_epoch(&r->created);
    o->pay_deadline_ms = r->deadline_null ? 0 : time_to_epoch_ms(&r->deadline);
    o->pay_time_ms = r->paid_null ? 0 : time_to_epoch_ms(&r->paid);
    o->close_time_ms = r->closed_null ? 0 : time_to_epoch_ms(&r->closed);
}

/* Fetch context of the order SELECTs, as in vouchers.c. */
struct order_fetch {
    struct order_row row;
    struct store_order *one;
    struct store_order *items;
};

static void order_fetched(void *ctx, size_t i)
{
    struct order_fetch *f = ctx;

    order_row_finish(&f->row, f->one);
    if (f->items)
        f->items[i] = *f->one;
}

struct get_args {
    int64_t id;
    struct store_order *o;
};

static int order_get_once(struct store *st, void *arg)
{
    struct get_args *a = arg;
    MYSQL_BIND p[1] = {0};
    struct order_fetch f = {.one = a->o};
    size_t n;
    int err;

    bind_i64(&p[0], &a->id);
    order_row_bind(&f.row, a->o);
    err = store_stmt_rows(st, STMT_ORDER_GET, p, f.row.b, 1, order_fetched, &f,
                          &n);
    return err ? err : n ? 0 : -ENOENT;
}

int store_order_get(struct store *st, int64_t id, struct store_order *o)
{
    struct get_args a = {id, o};
    return store_retry(st, order_get_once, &a);
}

struct list_args {
    int64_t user_id;
    int64_t limit;
    struct store_order **items;
    size_t *count;
};

static int order_list_once(struct store *st, void *arg)
{
    struct list_args *a = arg;
    MYSQL_BIND p[2] = {0};
    struct store_order one;
    struct order_fetch f = {.one = &one};
    int err;

    bind_i64(&p[0], &a->user_id);
    bind_i64(&p[1], &a->limit);
    order_row_bind(&f.row, &one);
    f.items = xcalloc((size_t)a->limit, sizeof(*f.items));
    err = store_stmt_rows(st, STMT_ORDER_LIST, p, f.row.b, (size_t)a->limit,
                          order_fetched, &f, a->count);
    if (*a->count == 0) {
        free(f.items);
        f.items = NULL;
    }
    *a->items = f.items;
    return err;
}

int store_order_list(struct store *st, int64_t user_id, unsigned limit,
                     struct store_order **items, size_t *count)
{
    struct list_args a = {user_id, limit, items, count};

    *items = NULL;
    *count = 0;
    if (limit < 1 || limit > 100)
        return -EINVAL;
    return store_retry(st, order_list_once, &a);
}
