/*
 * sales.c - GET /api/sales: the flash sales on now (status=live) or
 * beginning soon (status=upcoming, within seconds), across shops or of
 * one (shopId), in keyset pages (cursor). No login: the buyer's home
 * page. Answered from the instance's snapshot of the sales, refreshed by
 * at most one MySQL query a second however many ask (sale_sales_list()).
 */
#include <string.h>

#include "common/util.h"
#include "handlers/endpoints.h"

#define PAGE_MAX 100

unsigned sales_get(struct request *req)
{
    struct sale_listing_query q = {0};
    struct sale_sales_page page;
    const char *st = req_query(req, "status");
    int64_t limit, key[2] = {0, 0};
    json_t *items, *next;
    int err;

    if (!st || strcmp(st, "live") == 0)
        q.status = SALE_LISTING_LIVE;
    else if (strcmp(st, "upcoming") == 0)
        q.status = SALE_LISTING_UPCOMING;
    else
        return req_error(req, ERR_BAD_REQUEST,
                         "status: must be live or upcoming");
    if (!query_int_or_reply(req, "within", 86400, 1, SALE_LISTING_WINDOW_MAX_S,
                            &q.within_s) ||
        !query_int_or_reply(req, "shopId", 0, 1, INT64_MAX, &q.shop_id) ||
        !query_int_or_reply(req, "limit", 20, 1, PAGE_MAX, &limit) ||
        !query_cursor_or_reply(req, 2, key, &q.cursor_given))
        return req->status;
    q.cursor_key = key[0];
    q.cursor_id = key[1];
    q.limit = (size_t)limit;
    q.now_s = util_now_ms() / 1000;
    err = sale_sales_list(req->sale, &q, &page);
    if (err)
        return req_backend_error(req, err, "sales_list");
    items = json_array();
    for (size_t i = 0; i < page.n; i++) {
        json_t *o = voucher_json(req, page.items[i]);

        json_object_set_new(o, "stock", json_integer(page.stock[i]));
        json_array_append_new(items, o);
    }
    if (page.n) {
        const struct store_voucher *last = page.items[page.n - 1];

        key[0] =
            q.status == SALE_LISTING_LIVE ? last->end_time : last->begin_time;
        key[1] = last->id;
    }
    next = json_cursor(page.more, 2, key);
    req_reply(req, 200,
              json_pack("{s:o,s:o,s:o,s:b}", "items", items, "nextCursor", next,
                        "snapshotTime", json_time(page.snapshot_s), "truncated",
                        page.truncated));
    sale_sales_page_free(&page);
    return req->status;
}
