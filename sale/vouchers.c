/*
 * vouchers.c - creating a voucher and reading vouchers (see sale.h). A
 * seckill voucher's mode is chosen here, once: sync unless its creator or
 * the configuration says async, and async only on an instance whose Redis
 * keeps acknowledged writes (or whose operator accepts the loss).
 */
#include "sale/internal.h"

#include <errno.h>

#include "async/async.h"
#include "common/failpoint.h"
#include "common/util.h"

/* What the audit log keeps of a new voucher: every field it was made
 * with. */
static json_t *voucher_created(const struct store_voucher *v)
{
    json_t *o = json_pack("{s:I,s:s,s:s,s:s,s:I,s:I,s:s}", "shopId",
                          (json_int_t)v->shop_id, "title", v->title, "subTitle",
                          v->sub_title, "rules", v->rules, "payValue",
                          (json_int_t)v->pay_value, "actualValue",
                          (json_int_t)v->actual_value, "type",
                          v->type == VOUCHER_SECKILL ? "seckill" : "normal");

    if (o && v->type == VOUCHER_SECKILL) {
        json_object_set_new(o, "stock", json_integer(v->stock));
        json_object_set_new(o, "beginTime", sale__audit_time(v->begin_time));
        json_object_set_new(o, "endTime", sale__audit_time(v->end_time));
        json_object_set_new(
            o, "purchaseMode",
            json_string(v->mode == PURCHASE_ASYNC ? "async" : "sync"));
        json_object_set_new(
            o, "admission",
            json_string(v->admission == ADMISSION_QUEUE ? "queue" : "open"));
    }
    return o;
}

int sale_voucher_create(struct sale *s, struct store_voucher *v,
                        bool mode_given, const struct sale_actor *who)
{
    struct store *st = sale__store(s);
    struct store_audit audit;
    int err;

    if (v->type == VOUCHER_SECKILL) {
        if (!mode_given)
            v->mode = s->cfg.mode;
        /* No writer started (cmd/server.c starts one on any Redis). */
        if (v->mode == PURCHASE_ASYNC && !s->cfg.async)
            return -EOPNOTSUPP;
        if (v->mode == PURCHASE_ASYNC && !async_may_sell(s->cfg.async))
            return -EPERM;
    } else {
        v->mode = PURCHASE_SYNC;
    }
    sale__audit_make(&audit, who, "voucher.create", "voucher", 0,
                     voucher_created(v));
    err = store_voucher_insert(st, v, &audit);
    sale__audit_done(&audit);
    if (err)
        return err;
    log_info("voucher created", "id=%lld type=%d stock=%lld mode=%s",
             (long long)v->id, v->type, (long long)v->stock,
             v->mode == PURCHASE_ASYNC ? "async" : "sync");
    if (v->mode == PURCHASE_ASYNC) {
        /* The sale's state in Redis. If Redis is away now, the writer's
         * reconciliation makes it from MySQL within seconds. */
        struct redis_link *rl = store_redis_link(st);

        FAILPOINT("async_before_preheat");
        err = rl ? async_sale_preheat(rl, v->id, v->begin_time, v->end_time,
                                      v->stock, v->sale_stamp)
                 : -ENOTCONN;
        async_voucher_hint(s->cfg.async, v->id);
        if (err == -EEXIST)
            log_info("async sale made by a reconciliation first: the "
                     "preheat left it as it is",
                     "voucher=%lld", (long long)v->id);
        else if (err)
            log_warn("async sale not preheated", "voucher=%lld err=%d",
                     (long long)v->id, err);
    }
    if (v->admission == ADMISSION_QUEUE) {
        /* What a purchase checks when MySQL cannot tell (buy.c). */
        err = store_waitroom_mark(st, v->id, v->end_time * 1000);
        if (err)
            log_warn("waiting room not marked in redis", "voucher=%lld err=%d",
                     (long long)v->id, err);
    }
    /* Instances that answered 404 for this id from their cache (someone
     * tried it early) drop that answer now instead of after the TTL. */
    vcache_voucher_changed(s->cfg.vcache, st, v->id);
    return 0;
}

int sale_voucher_get(struct sale *s, int64_t id, struct store_voucher *v)
{
    return store_voucher_get(sale__store(s), id, v);
}

int sale_vouchers_list(struct sale *s, int64_t shop_id, int64_t before,
                       unsigned limit, struct store_voucher **items, size_t *n)
{
    return store_voucher_list(sale__store(s), shop_id, before, limit, items, n);
}

int sale_voucher_orders(struct sale *s, int64_t voucher_id, int status,
                        bool desc, int64_t from, struct store_order *out,
                        size_t max, size_t *n)
{
    return store_voucher_orders(sale__store(s), voucher_id, status, desc, from,
                                out, max, n);
}

int sale_voucher_stats(struct sale *s, int64_t id,
                       struct store_voucher_stats *out)
{
    return store_voucher_stats(sale__store(s), id, out);
}
