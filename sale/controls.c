/*
 * controls.c - the operator's controls of a sale (see sale.h): each one
 * transaction in MySQL (store/controls.c), then, for an async sale, its
 * Redis state brought up to what MySQL committed, then every instance's
 * voucher cache told.
 */
#include "sale/internal.h"

#include <errno.h>
#include <time.h>

#include "async/async.h"
#include "common/util.h"

/* Between two tries of a control's Redis script. */
#define CONTROL_RETRY_MS 50

/*
 * An async sale's Redis state to the control state c (committed): retried
 * while Redis is away or the sale frozen for a rebuild, up to
 * SALE_CONTROL_REDIS_MS. Then left to the reconciliation, which applies
 * what MySQL committed once Redis answers and the freeze ends (a rebuild
 * makes the state from MySQL, control included): the control is done
 * either way, and is answered so. Meanwhile the sale sells nothing the
 * control forbids: a frozen sale and an unreachable Redis sell nothing.
 */
static void redis_catch_up(struct store *st, int64_t voucher_id,
                           const struct store_sale_control *c)
{
    int64_t until = util_mono_ms() + SALE_CONTROL_REDIS_MS;
    int err;

    for (;;) {
        struct redis_link *rl = store_redis_link(st);

        err = rl ? async_sale_control(rl, voucher_id, c) : -ENOTCONN;
        if (err >= 0 || err == -ENOENT)
            return;
        if (util_mono_ms() >= until)
            break;
        nanosleep(&(struct timespec){0, CONTROL_RETRY_MS * 1000000L}, NULL);
    }
    log_warn("async sale control not in redis yet: the reconciliation "
             "applies it",
             "voucher=%lld revision=%lld err=%d", (long long)voucher_id,
             (long long)c->revision, err);
}

/* After a control committed: Redis (async), the waiting room's mark (a
 * queue sale's end may have moved), the caches. */
static int control_done(struct sale *s, struct store *st, int64_t voucher_id,
                        const struct store_sale_control *c, const char *what)
{
    if (c->type == VOUCHER_SECKILL && c->mode == PURCHASE_ASYNC)
        redis_catch_up(st, voucher_id, c);
    if (c->type == VOUCHER_SECKILL && c->admission == ADMISSION_QUEUE &&
        store_waitroom_mark(st, voucher_id, c->end_time * 1000) != 0)
        log_warn("waiting room not marked in redis", "voucher=%lld",
                 (long long)voucher_id);
    vcache_voucher_changed(s->cfg.vcache, st, voucher_id);
    log_info("sale control",
             "voucher=%lld what=%s revision=%lld halt=%d "
             "end=%lld restocked=%lld",
             (long long)voucher_id, what, (long long)c->revision, (int)c->halt,
             (long long)c->end_time, (long long)c->restocked);
    return 0;
}

/* What the audit log keeps of an edit: the fields it set, as sent. */
static json_t *patch_change(const struct store_voucher_patch *p)
{
    json_t *o = json_object();

    if (p->set & STORE_PATCH_TITLE)
        json_object_set_new(o, "title", json_string(p->title));
    if (p->set & STORE_PATCH_SUB_TITLE)
        json_object_set_new(o, "subTitle", json_string(p->sub_title));
    if (p->set & STORE_PATCH_RULES)
        json_object_set_new(o, "rules", json_string(p->rules));
    if (p->set & STORE_PATCH_PAY_VALUE)
        json_object_set_new(o, "payValue", json_integer(p->pay_value));
    if (p->set & STORE_PATCH_ACTUAL_VALUE)
        json_object_set_new(o, "actualValue", json_integer(p->actual_value));
    if (p->set & STORE_PATCH_BEGIN)
        json_object_set_new(o, "beginTime", sale__audit_time(p->begin_time));
    if (p->set & STORE_PATCH_END)
        json_object_set_new(o, "endTime", sale__audit_time(p->end_time));
    if (p->set & STORE_PATCH_STOCK)
        json_object_set_new(o, "stock", json_integer(p->stock));
    return o;
}

int sale_voucher_pause(struct sale *s, int64_t voucher_id, bool pause,
                       const struct sale_actor *who, enum store_control *out)
{
    struct store *st = sale__store(s);
    struct store_sale_control c = {0};
    struct store_audit audit;
    int err;

    sale__audit_make(&audit, who, pause ? "voucher.pause" : "voucher.resume",
                     "voucher", voucher_id, NULL);
    err = store_sale_halt(st, voucher_id, pause ? HALT_PAUSED : HALT_NONE,
                          util_now_ms() / 1000, out, &c, &audit);
    sale__audit_done(&audit);

    if (err || *out != STORE_CONTROL_DONE)
        return err;
    return control_done(s, st, voucher_id, &c, pause ? "pause" : "resume");
}

int sale_voucher_stop(struct sale *s, int64_t voucher_id,
                      const struct sale_actor *who, enum store_control *out)
{
    struct store *st = sale__store(s);
    struct store_sale_control c = {0};
    int64_t now = util_now_ms() / 1000;
    struct store_audit audit;
    int err;

    sale__audit_make(&audit, who, "voucher.stop", "voucher", voucher_id,
                     json_pack("{s:o}", "endTime", sale__audit_time(now)));
    err = store_sale_stop(st, voucher_id, now, out, &c, &audit);
    sale__audit_done(&audit);

    if (err || *out != STORE_CONTROL_DONE)
        return err;
    return control_done(s, st, voucher_id, &c, "stop");
}

int sale_voucher_restock(struct sale *s, int64_t voucher_id, int64_t units,
                         const struct sale_actor *who, enum store_control *out,
                         const char **why)
{
    struct store *st = sale__store(s);
    struct store_sale_control c = {0};
    struct store_audit audit;
    int err;

    sale__audit_make(&audit, who, "voucher.restock", "voucher", voucher_id,
                     json_pack("{s:I}", "add", (json_int_t)units));
    err = store_sale_restock(st, voucher_id, units, util_now_ms() / 1000, out,
                             &c, &audit);
    sale__audit_done(&audit);

    *why = c.why;
    if (err || *out != STORE_CONTROL_DONE)
        return err;
    return control_done(s, st, voucher_id, &c, "restock");
}

int sale_voucher_patch(struct sale *s, int64_t voucher_id,
                       const struct store_voucher_patch *p,
                       const struct sale_actor *who, enum store_control *out,
                       const char **why)
{
    struct store *st = sale__store(s);
    struct store_sale_control c = {0};
    struct store_audit audit;
    int err;

    sale__audit_make(&audit, who, "voucher.patch", "voucher", voucher_id,
                     patch_change(p));
    err = store_voucher_patch(st, voucher_id, p, util_now_ms() / 1000, out, &c,
                              &audit);
    sale__audit_done(&audit);

    *why = c.why;
    if (err || *out != STORE_CONTROL_DONE)
        return err;
    return control_done(s, st, voucher_id, &c, "edit");
}

int sale_voucher_delete(struct sale *s, int64_t voucher_id,
                        const struct sale_actor *who, enum store_control *out,
                        const char **why)
{
    struct store *st = sale__store(s);
    struct store_sale_control c = {0};
    struct store_audit audit;
    int err;

    sale__audit_make(&audit, who, "voucher.delete", "voucher", voucher_id,
                     NULL);
    err = store_voucher_delete(st, voucher_id, util_now_ms() / 1000, out, &c,
                               &audit);
    sale__audit_done(&audit);

    *why = c.why;
    if (err || *out != STORE_CONTROL_DONE)
        return err;
    if (c.type == VOUCHER_SECKILL && c.mode == PURCHASE_ASYNC) {
        struct redis_link *rl = store_redis_link(st);

        /* Left behind, it is nobody's: the reconciliation leaves a sale
         * without its MySQL row alone, and nothing sells it. */
        if (!rl || async_sale_forget(rl, voucher_id) != 0)
            log_warn("deleted async sale left in redis", "voucher=%lld",
                     (long long)voucher_id);
    }
    if (c.type == VOUCHER_SECKILL && c.admission == ADMISSION_QUEUE &&
        store_waitroom_forget(st, voucher_id) != 0)
        log_warn("deleted sale's waiting room left in redis", "voucher=%lld",
                 (long long)voucher_id);
    vcache_voucher_changed(s->cfg.vcache, st, voucher_id);
    log_info("voucher deleted", "voucher=%lld", (long long)voucher_id);
    return 0;
}

int sale_voucher_get_fresh(struct sale *s, int64_t id, struct store_voucher *v)
{
    return store_voucher_get_primary(sale__store(s), id, v);
}
