/*
 * audit.c - the audit log: what admins did, one row per action, written
 * by the caller inside the transaction of the action itself (store.h).
 */
#include "store/internal.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"

int store_audit_add(struct store *st, const struct store_audit *a)
{
    MYSQL_BIND p[6] = {0};
    unsigned long len[4];
    int64_t admin = a->admin_id, target = a->target_id;
    MYSQL_STMT *s;
    int err;

    if (a->change && strlen(a->change) >= STORE_AUDIT_CHANGE_MAX)
        return -EINVAL;
    /* A new voucher's id, not known when its key was recorded. */
    if (a->idem && a->idem->recorded && a->target_id != a->idem->target_id) {
        err = store_idem_target_set(st, a->idem, a->target_id);
        if (err)
            return err;
        a->idem->target_id = a->target_id;
    }
    bind_i64(&p[0], &admin);
    bind_str_in(&p[1], a->addr ? a->addr : "", &len[0]);
    bind_str_in(&p[2], a->action, &len[1]);
    bind_str_in(&p[3], a->target_type, &len[2]);
    bind_i64(&p[4], &target);
    if (a->change)
        bind_str_in(&p[5], a->change, &len[3]);
    else
        p[5].buffer_type = MYSQL_TYPE_NULL;
    if (!st->home)
        return store_stmt_exec(st, STMT_AUDIT_INSERT, p, NULL, &s);
    /* A change on another shard: the log is shard 0's, the record goes
     * there through this shard's outbox (shard.c). */
    err = store_stmt_exec(st, STMT_OUTBOX_AUDIT, p, NULL, &s);
    st->outbox_written |= !err;
    return err;
}

struct audit_args {
    int64_t before, target_id, max;
    const char *target_type;
    struct store_audit_row *out, one;
    size_t *n;
    MYSQL_TIME created;
    unsigned long len[5];
    MYSQL_BIND r[9];
};

/* Terminate a fetched string column (cut to nothing when it overflowed:
 * the buffers hold every value the columns allow). */
static void finish_str(char *buf, size_t cap, unsigned long len)
{
    buf[len < cap ? len : 0] = '\0';
}

static void audit_fetched(void *ctx, size_t i)
{
    struct audit_args *a = ctx;
    struct store_audit_row *r = &a->one;

    finish_str(r->admin_name, sizeof(r->admin_name), a->len[0]);
    finish_str(r->addr, sizeof(r->addr), a->len[1]);
    finish_str(r->action, sizeof(r->action), a->len[2]);
    finish_str(r->target_type, sizeof(r->target_type), a->len[3]);
    finish_str(r->change, sizeof(r->change), a->len[4]);
    r->time_ms = time_to_epoch_ms(&a->created);
    a->out[i] = *r;
}

static int audit_list_once(struct store *st, void *arg)
{
    struct audit_args *a = arg;
    struct store_audit_row *r = &a->one;
    MYSQL_BIND p[6] = {0};
    unsigned long tlen[2];
    const char *type = a->target_type ? a->target_type : "";

    bind_i64(&p[0], &a->before);
    bind_str_in(&p[1], type, &tlen[0]);
    bind_str_in(&p[2], type, &tlen[1]);
    bind_i64(&p[3], &a->target_id);
    bind_i64(&p[4], &a->target_id);
    bind_i64(&p[5], &a->max);
    memset(a->r, 0, sizeof(a->r));
    bind_i64(&a->r[0], &r->id);
    bind_time(&a->r[1], &a->created);
    bind_i64(&a->r[2], &r->admin_id);
    bind_str_out(&a->r[3], r->admin_name, sizeof(r->admin_name), &a->len[0]);
    bind_str_out(&a->r[4], r->addr, sizeof(r->addr), &a->len[1]);
    bind_str_out(&a->r[5], r->action, sizeof(r->action), &a->len[2]);
    bind_str_out(&a->r[6], r->target_type, sizeof(r->target_type), &a->len[3]);
    bind_i64(&a->r[7], &r->target_id);
    bind_str_out(&a->r[8], r->change, sizeof(r->change), &a->len[4]);
    return store_stmt_rows(st, STMT_AUDIT_LIST, p, a->r, (size_t)a->max,
                           audit_fetched, a, a->n);
}

int store_audit_list(struct store *st, int64_t before, const char *target_type,
                     int64_t target_id, struct store_audit_row *out, size_t max,
                     size_t *n)
{
    struct audit_args *a = xcalloc(1, sizeof(*a));
    int err;

    a->before = before > 0 ? before : INT64_MAX;
    a->target_type = target_type;
    a->target_id = target_id;
    a->max = (int64_t)max;
    a->out = out;
    a->n = n;
    *n = 0;
    err = store_retry(st, audit_list_once, a);
    free(a);
    return err;
}
