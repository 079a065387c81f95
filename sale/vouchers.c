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

int sale_voucher_create(struct sale *s, struct store_voucher *v,
                        bool mode_given)
{
    struct store *st = sale__store(s);
    int err;

    if (v->type == VOUCHER_SECKILL) {
        if (!mode_given)
            v->mode = s->cfg.mode;
        if (v->mode == PURCHASE_ASYNC && !async_may_sell(s->cfg.async))
            return -EPERM;
    } else {
        v->mode = PURCHASE_SYNC;
    }
    err = store_voucher_insert(st, v);
    if (err)
        return err;
    log_info("voucher created", "id=%lld type=%d stock=%lld mode=%s",
             (long long)v->id, v->type, (long long)v->stock,
             v->mode == PURCHASE_ASYNC ? "async" : "sync");
    if (v->mode == PURCHASE_ASYNC) {
        /* The sale's state in Redis. If Redis is away now, the writer's
         * reconciliation makes it from MySQL within seconds. */
        redisContext *rc = store_redis(st);

        FAILPOINT("async_before_preheat");
        err = rc ? async_sale_preheat(rc, v->id, v->begin_time, v->end_time,
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
