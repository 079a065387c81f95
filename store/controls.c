/*
 * controls.c - the operator's controls of a sale (see store.h): pause,
 * resume, stop, restock, edit and delete, each one transaction that
 * locks the voucher's rows first and decides there whether the sale
 * began, so that two controls, or a control and the clock, cannot both
 * act on a state the other changed.
 */
#include "store/internal.h"

#include <errno.h>
#include <string.h>

#include "common/failpoint.h"

/* What the control locked: the voucher's row and its sale's. */
struct ctl_row {
    enum voucher_type type;
    bool seckill; /* it has a sale row */
    int64_t begin_time, end_time;
    enum purchase_mode mode;
    enum admission admission;
    enum store_halt halt;
    int64_t initial_stock, stock, pay_value, actual_value, segments;
};

/* The arguments of every control: which, and what it reports. */
struct ctl_args {
    int64_t id, now_s;
    enum store_halt halt;                /* store_sale_halt() */
    int64_t units;                       /* store_sale_restock() */
    const struct store_voucher_patch *p; /* store_voucher_patch() */
    enum store_control *out;
    struct store_sale_control *after;
    const struct store_audit *audit; /* recorded with the change */
};

/* Lock voucher a->id's rows (SELECT ... FOR UPDATE) into *r. 0, or
 * -ENOENT (no such voucher), or as store_mysql_error(). */
static int ctl_lock(struct store *st, int64_t id, struct ctl_row *r)
{
    MYSQL_BIND p[1] = {0}, b[12] = {0};
    char null[12] = {0};
    int64_t type = 0, seckill = 0, mode = 0, admission = 0, halt = 0;
    MYSQL_TIME bt, et;
    size_t n;
    int err;

    memset(r, 0, sizeof(*r));
    bind_i64(&p[0], &id);
    bind_i64(&b[0], &type);
    bind_i64(&b[1], &seckill);
    bind_time(&b[2], &bt);
    bind_time(&b[3], &et);
    bind_i64(&b[4], &mode);
    bind_i64(&b[5], &admission);
    bind_i64(&b[6], &halt);
    bind_i64(&b[7], &r->initial_stock);
    bind_i64(&b[8], &r->stock);
    bind_i64(&b[9], &r->pay_value);
    bind_i64(&b[10], &r->actual_value);
    bind_i64(&b[11], &r->segments);
    for (int i = 0; i < 12; i++)
        b[i].is_null = &null[i];
    err = store_stmt_rows(st, STMT_CTL_LOCK, p, b, 1, NULL, NULL, &n);
    if (err)
        return err;
    if (n == 0)
        return -ENOENT;
    r->seckill = type == VOUCHER_SECKILL && seckill && !null[2];
    r->type = r->seckill ? VOUCHER_SECKILL : VOUCHER_NORMAL;
    r->mode = mode == PURCHASE_ASYNC ? PURCHASE_ASYNC : PURCHASE_SYNC;
    r->admission =
        admission == ADMISSION_QUEUE ? ADMISSION_QUEUE : ADMISSION_OPEN;
    r->halt = (enum store_halt)halt;
    if (r->seckill) {
        r->begin_time = time_to_epoch(&bt);
        r->end_time = time_to_epoch(&et);
    }
    return 0;
}

/* The sale row's control state (inside the transaction: its own writes)
 * into *c. */
static int ctl_read(struct store *st, int64_t id, struct store_sale_control *c)
{
    MYSQL_BIND p[1] = {0}, b[6] = {0};
    int64_t halt = 0;
    MYSQL_TIME bt, et;
    size_t n;
    int err;

    bind_i64(&p[0], &id);
    bind_i64(&b[0], &c->revision);
    bind_i64(&b[1], &c->restocked);
    bind_i64(&b[2], &halt);
    bind_time(&b[3], &bt);
    bind_time(&b[4], &et);
    bind_i64(&b[5], &c->initial_stock);
    err = store_stmt_rows(st, STMT_CTL_READ, p, b, 1, NULL, NULL, &n);
    if (err)
        return err;
    if (n == 0)
        return -ENOENT;
    c->halt = (enum store_halt)halt;
    c->begin_time = time_to_epoch(&bt);
    c->end_time = time_to_epoch(&et);
    return 0;
}

/* What the lock found, for the caller (before the change). */
static void ctl_after_set(struct store_sale_control *c, const struct ctl_row *r)
{
    memset(c, 0, sizeof(*c));
    c->type = r->type;
    c->mode = r->mode;
    c->admission = r->admission;
    c->halt = r->halt;
    c->begin_time = r->begin_time;
    c->end_time = r->end_time;
    c->initial_stock = r->initial_stock;
    c->segments = (unsigned)r->segments;
}

/* The sale has ended: stopped, or its end time passed. */
static bool ctl_ended(const struct ctl_row *r, int64_t now_s)
{
    return r->halt == HALT_STOPPED || now_s >= r->end_time;
}

/* Finish a control that changed something: its audit record in the same
 * transaction, then the commit. */
static int ctl_record_commit(struct store *st, struct ctl_args *a)
{
    int err = a->audit ? store_audit_add(st, a->audit) : 0;

    if (err)
        return store_tx_rollback(st, err);
    if (mysql_commit(st->my)) {
        err = store_mysql_error(st, NULL, "commit");
        return err == -ENOTCONN ? -EINPROGRESS : store_tx_rollback(st, err);
    }
    *a->out = STORE_CONTROL_DONE;
    return 0;
}

/* Finish a control of a sale: read its state back, record, commit. */
static int ctl_commit(struct store *st, struct ctl_args *a)
{
    int err = ctl_read(st, a->id, a->after);

    if (err)
        return store_tx_rollback(st, err);
    return ctl_record_commit(st, a);
}

/* Start a control: the transaction, the rows locked, the common
 * refusals. 1: go on; 0: answered (*a->out, rolled back); or -errno. */
static int ctl_begin(struct store *st, struct ctl_args *a, struct ctl_row *r,
                     bool seckill_only)
{
    int err = store_tx_begin_keyed(st, a->audit);

    if (err)
        return err;
    err = ctl_lock(st, a->id, r);
    if (err == -ENOENT) {
        *a->out = STORE_CONTROL_NOT_FOUND;
        return store_tx_rollback(st, 0);
    }
    if (err)
        return store_tx_rollback(st, err);
    ctl_after_set(a->after, r);
    if (seckill_only && !r->seckill) {
        *a->out = STORE_CONTROL_NOT_SECKILL;
        return store_tx_rollback(st, 0);
    }
    return 1;
}

/* Set the halt h on the sale row (a new revision) and its segments. */
static int halt_set(struct store *st, int64_t id, int64_t h)
{
    MYSQL_BIND p[2] = {0};
    MYSQL_STMT *s;
    int err;

    bind_i64(&p[0], &h);
    bind_i64(&p[1], &id);
    err = store_stmt_exec(st, STMT_CTL_HALT, p, NULL, &s);
    if (!err)
        err = store_stmt_exec(st, STMT_CTL_SEGMENTS_HALT, p, NULL, &s);
    return err;
}

static int halt_once(struct store *st, void *arg)
{
    struct ctl_args *a = arg;
    struct ctl_row r;
    int err = ctl_begin(st, a, &r, true);

    if (err <= 0)
        return err;
    if (ctl_ended(&r, a->now_s)) {
        *a->out = STORE_CONTROL_ENDED;
        return store_tx_rollback(st, 0);
    }
    err = halt_set(st, a->id, a->halt);
    if (err)
        return store_tx_rollback(st, err);
    return ctl_commit(st, a);
}

static int patch_refuse(struct store *st, struct ctl_args *a,
                        enum store_control o, const char *why);

/* A control's transaction, its deadlocks retried. */
static int ctl_run(struct store *st, int (*fn)(struct store *, void *),
                   struct ctl_args *a)
{
    int err = -EDEADLK;

    /* On the voucher's shard; its audit record is shard 0's. */
    st = store_by_id(st, a->id);
    for (int i = 0; i < PURCHASE_ATTEMPTS && err == -EDEADLK; i++)
        err = store_retry(st, fn, a);
    return store_outbox_flush(st, err);
}

int store_sale_halt(struct store *st, int64_t voucher_id, enum store_halt halt,
                    int64_t now_s, enum store_control *out,
                    struct store_sale_control *after,
                    const struct store_audit *audit)
{
    struct ctl_args a = {.id = voucher_id,
                         .now_s = now_s,
                         .halt = halt,
                         .out = out,
                         .after = after,
                         .audit = audit};

    if (halt == HALT_STOPPED)
        return -EINVAL;
    return ctl_run(st, halt_once, &a);
}

static int stop_once(struct store *st, void *arg)
{
    struct ctl_args *a = arg;
    MYSQL_BIND p[3] = {0};
    MYSQL_TIME now;
    MYSQL_STMT *s;
    struct ctl_row r;
    int64_t h = HALT_STOPPED;
    int err = ctl_begin(st, a, &r, true);

    if (err <= 0)
        return err;
    if (ctl_ended(&r, a->now_s)) {
        *a->out = STORE_CONTROL_ENDED;
        return store_tx_rollback(st, 0);
    }
    time_from_epoch(&now, a->now_s);
    bind_time(&p[0], &now);
    bind_time(&p[1], &now);
    bind_i64(&p[2], &a->id);
    err = store_stmt_exec(st, STMT_CTL_STOP, p, NULL, &s);
    if (!err) {
        MYSQL_BIND q[2] = {0};

        bind_i64(&q[0], &h);
        bind_i64(&q[1], &a->id);
        err = store_stmt_exec(st, STMT_CTL_SEGMENTS_HALT, q, NULL, &s);
    }
    if (err)
        return store_tx_rollback(st, err);
    return ctl_commit(st, a);
}

int store_sale_stop(struct store *st, int64_t voucher_id, int64_t now_s,
                    enum store_control *out, struct store_sale_control *after,
                    const struct store_audit *audit)
{
    struct ctl_args a = {.id = voucher_id,
                         .now_s = now_s,
                         .out = out,
                         .after = after,
                         .audit = audit};

    return ctl_run(st, stop_once, &a);
}

/*
 * Change the stock and the initial stock of a sale of r by delta (units
 * sold are not touched: stock + unpaid + paid = initial stays true).
 * Segmented: the row keeps 0 and the segments share delta as at the
 * creation (the first delta % N one more); a negative delta (an edit
 * before the begin, with no orders) sets each segment to its share of
 * the new stock instead.
 */
static int stock_change(struct store *st, int64_t id, const struct ctl_row *r,
                        int64_t delta)
{
    MYSQL_BIND p[4] = {0};
    int64_t row = r->segments > 1 ? 0 : delta;
    MYSQL_STMT *s;
    int err;

    bind_i64(&p[0], &row);
    bind_i64(&p[1], &delta);
    bind_i64(&p[2], &delta);
    bind_i64(&p[3], (int64_t *)&id);
    err = store_stmt_exec(st, STMT_CTL_RESTOCK, p, NULL, &s);
    for (int64_t j = 0; !err && r->segments > 1 && j < r->segments; j++) {
        MYSQL_BIND q[3] = {0};
        int64_t n = r->segments, seg = j, v;

        if (delta >= 0) {
            v = delta / n + (j < delta % n);
            if (v == 0)
                continue;
            bind_i64(&q[0], &v);
            bind_i64(&q[1], (int64_t *)&id);
            bind_i64(&q[2], &seg);
            err = store_stmt_exec(st, STMT_SEGMENT_RETURN, q, NULL, &s);
        } else {
            int64_t total = r->stock + delta;

            v = total / n + (j < total % n);
            bind_i64(&q[0], &v);
            bind_i64(&q[1], (int64_t *)&id);
            bind_i64(&q[2], &seg);
            err = store_stmt_exec(st, STMT_CTL_SEGMENT_SET, q, NULL, &s);
        }
    }
    return err;
}

static int restock_once(struct store *st, void *arg)
{
    struct ctl_args *a = arg;
    struct ctl_row r;
    int err = ctl_begin(st, a, &r, true);

    if (err <= 0)
        return err;
    if (ctl_ended(&r, a->now_s)) {
        *a->out = STORE_CONTROL_ENDED;
        return store_tx_rollback(st, 0);
    }
    if (r.stock + a->units > STORE_STOCK_MAX ||
        r.initial_stock + a->units > STORE_STOCK_MAX)
        return patch_refuse(st, a, STORE_CONTROL_INVALID,
                            "add: the stock would pass 1000000000");
    err = stock_change(st, a->id, &r, a->units);
    if (!err && FAILPOINT_FAILS("restock_apply_twice")) /* a planted bug */
        err = stock_change(st, a->id, &r, a->units);
    if (err)
        return store_tx_rollback(st, err);
    err = ctl_commit(st, a);
    if (!err && r.segments > 1) {
        /* This process's segments seen empty sell again at once (other
         * processes' marks run out within a second). */
        struct voucher_state *vs = store_voucher_state_get(a->id);

        for (unsigned j = 0; j < (unsigned)r.segments; j++)
            store_segment_mark_stocked(vs, j);
        store_voucher_state_put(vs);
    }
    return err;
}

int store_sale_restock(struct store *st, int64_t voucher_id, int64_t units,
                       int64_t now_s, enum store_control *out,
                       struct store_sale_control *after,
                       const struct store_audit *audit)
{
    struct ctl_args a = {.id = voucher_id,
                         .now_s = now_s,
                         .units = units,
                         .out = out,
                         .after = after,
                         .audit = audit};

    if (units < 1)
        return -EINVAL;
    return ctl_run(st, restock_once, &a);
}

/* An edit refused: why names the field. */
static int patch_refuse(struct store *st, struct ctl_args *a,
                        enum store_control o, const char *why)
{
    *a->out = o;
    a->after->why = why;
    return store_tx_rollback(st, 0);
}

static int patch_once(struct store *st, void *arg)
{
    struct ctl_args *a = arg;
    const struct store_voucher_patch *p = a->p;
    struct ctl_row r;
    struct store_voucher cur;
    MYSQL_BIND q[6] = {0};
    unsigned long len[3];
    MYSQL_STMT *s;
    int64_t pay, actual, begin, end;
    bool started;
    int err = ctl_begin(st, a, &r, false);

    if (err <= 0)
        return err;
    if (p->fixed)
        return patch_refuse(st, a,
                            r.seckill && a->now_s >= r.begin_time
                                ? STORE_CONTROL_STARTED
                                : STORE_CONTROL_INVALID,
                            p->fixed);
    if (!r.seckill &&
        (p->set & (STORE_PATCH_BEGIN | STORE_PATCH_END | STORE_PATCH_STOCK)))
        return patch_refuse(st, a, STORE_CONTROL_INVALID,
                            "stock, beginTime and endTime are only for "
                            "seckill vouchers");
    started = r.seckill && a->now_s >= r.begin_time;
    if (started) {
        static const struct {
            unsigned bit;
            const char *why;
        } fixed[] = {
            {STORE_PATCH_PAY_VALUE, "payValue: the sale has started"},
            {STORE_PATCH_ACTUAL_VALUE, "actualValue: the sale has started"},
            {STORE_PATCH_BEGIN, "beginTime: the sale has started"},
            {STORE_PATCH_STOCK, "stock: the sale has started (restock it)"},
        };

        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
            if (p->set & fixed[i].bit)
                return patch_refuse(st, a, STORE_CONTROL_STARTED, fixed[i].why);
        if ((p->set & STORE_PATCH_END) && ctl_ended(&r, a->now_s))
            return patch_refuse(st, a, STORE_CONTROL_ENDED,
                                "endTime: the sale has ended");
        if ((p->set & STORE_PATCH_END) && p->end_time < a->now_s)
            return patch_refuse(st, a, STORE_CONTROL_INVALID,
                                "endTime: must not be in the past");
    }
    pay = p->set & STORE_PATCH_PAY_VALUE ? p->pay_value : r.pay_value;
    actual =
        p->set & STORE_PATCH_ACTUAL_VALUE ? p->actual_value : r.actual_value;
    if (pay < 1 || pay > actual)
        return patch_refuse(st, a, STORE_CONTROL_INVALID,
                            p->set & STORE_PATCH_PAY_VALUE
                                ? "payValue: must be at least 1 and at most "
                                  "actualValue"
                                : "actualValue: must be at least payValue");
    begin = p->set & STORE_PATCH_BEGIN ? p->begin_time : r.begin_time;
    end = p->set & STORE_PATCH_END ? p->end_time : r.end_time;
    if (r.seckill && end <= begin)
        return patch_refuse(st, a, STORE_CONTROL_INVALID,
                            p->set & STORE_PATCH_END
                                ? "endTime: must be after beginTime"
                                : "beginTime: must be before endTime");

    /* The texts and prices: the row as it is, with the fields given. */
    err = store_voucher_get_locked(st, a->id, &cur);
    if (err)
        return store_tx_rollback(st, err == -ENOENT ? -EIO : err);
    bind_str_in(&q[0], p->set & STORE_PATCH_TITLE ? p->title : cur.title,
                &len[0]);
    bind_str_in(&q[1],
                p->set & STORE_PATCH_SUB_TITLE ? p->sub_title : cur.sub_title,
                &len[1]);
    bind_str_in(&q[2], p->set & STORE_PATCH_RULES ? p->rules : cur.rules,
                &len[2]);
    bind_i64(&q[3], &pay);
    bind_i64(&q[4], &actual);
    bind_i64(&q[5], &a->id);
    err = store_stmt_exec(st, STMT_CTL_VOUCHER_SET, q, NULL, &s);
    if (!err && r.seckill) {
        MYSQL_BIND t[3] = {0};
        MYSQL_TIME bt, et;

        time_from_epoch(&bt, begin);
        time_from_epoch(&et, end);
        bind_time(&t[0], &bt);
        bind_time(&t[1], &et);
        bind_i64(&t[2], &a->id);
        err = store_stmt_exec(st, STMT_CTL_SALE_SET, t, NULL, &s);
    }
    if (!err && r.seckill && (p->set & STORE_PATCH_STOCK) &&
        p->stock != r.stock)
        err = stock_change(st, a->id, &r, p->stock - r.stock);
    if (err)
        return store_tx_rollback(st, err);
    if (!r.seckill)
        return ctl_record_commit(st, a);
    return ctl_commit(st, a);
}

int store_voucher_patch(struct store *st, int64_t voucher_id,
                        const struct store_voucher_patch *p, int64_t now_s,
                        enum store_control *out,
                        struct store_sale_control *after,
                        const struct store_audit *audit)
{
    struct ctl_args a = {.id = voucher_id,
                         .now_s = now_s,
                         .p = p,
                         .out = out,
                         .after = after,
                         .audit = audit};

    return ctl_run(st, patch_once, &a);
}

static int delete_once(struct store *st, void *arg)
{
    struct ctl_args *a = arg;
    MYSQL_BIND p[1] = {0}, b[1] = {0};
    int64_t orders = 0;
    struct ctl_row r;
    MYSQL_STMT *s;
    size_t n;
    int err = ctl_begin(st, a, &r, false);

    if (err <= 0)
        return err;
    if (r.seckill && a->now_s >= r.begin_time)
        return patch_refuse(st, a, STORE_CONTROL_STARTED,
                            "the sale has started");
    bind_i64(&p[0], &a->id);
    bind_i64(&b[0], &orders);
    err = store_stmt_rows(st, STMT_CTL_ORDERS_ANY, p, b, 1, NULL, NULL, &n);
    if (err)
        return store_tx_rollback(st, err);
    if (orders > 0)
        return patch_refuse(st, a, STORE_CONTROL_STARTED,
                            "the voucher has orders");
    err = store_stmt_exec(st, STMT_CTL_DELETE, p, NULL, &s);
    if (err)
        return store_tx_rollback(st, err);
    return ctl_record_commit(st, a);
}

int store_voucher_delete(struct store *st, int64_t voucher_id, int64_t now_s,
                         enum store_control *out,
                         struct store_sale_control *after,
                         const struct store_audit *audit)
{
    struct ctl_args a = {.id = voucher_id,
                         .now_s = now_s,
                         .out = out,
                         .after = after,
                         .audit = audit};

    return ctl_run(st, delete_once, &a);
}

static int control_read_once(struct store *st, void *arg)
{
    struct ctl_args *a = arg;

    return ctl_read(st, a->id, a->after);
}

int store_sale_control_read(struct store *st, int64_t voucher_id,
                            struct store_sale_control *out)
{
    struct ctl_args a = {.id = voucher_id, .after = out};

    memset(out, 0, sizeof(*out));
    return store_retry(store_by_id(st, voucher_id), control_read_once, &a);
}
