/*
 * seckill.c - POST /api/vouchers/{id}/seckill, the purchase: the buyer's
 * token, then sale_buy() (sale/buy.c says how a purchase is decided). It
 * runs on the HTTP thread (route.h): what the sale layer refuses from
 * memory (a sold-out voucher, one not on sale) is answered at once; the
 * rest parks the request, and bought() answers it.
 *
 * The answers: 201 {"orderId"} for an order committed in MySQL; 202
 * {"orderId","status":"pending"} for an async sale's (a promise that the
 * order will be in MySQL shortly: GET /api/orders/{id} shows it pending
 * until then); 503 "the outcome is unknown" when Redis' replicas did not
 * confirm an async sale in time (the order may yet be written: it then
 * shows in GET /api/orders); 409 for a refusal, 429 BUSY for a full queue
 * or a second purchase of the same buyer at once.
 */
#include <errno.h>

#include "handlers/endpoints.h"
#include "handlers/ratelimit.h"

/* The reply of a decided purchase. */
static void buy_reply(struct request *req, const struct sale_buy *b)
{
    switch (b->outcome) {
    case SALE_ORDERED:
        req_reply(req, 201,
                  json_pack("{s:o}", "orderId", json_id(b->order_id)));
        break;
    case SALE_PENDING:
        req_reply(req, 202,
                  json_pack("{s:o,s:s}", "orderId", json_id(b->order_id),
                            "status", "pending"));
        break;
    case SALE_NOT_FOUND:
        req_error(req, ERR_NOT_FOUND, "no voucher with this id");
        break;
    case SALE_NOT_SECKILL:
        req_error(req, ERR_NOT_SECKILL, NULL);
        break;
    case SALE_NOT_STARTED:
        req_error(req, ERR_NOT_STARTED, NULL);
        break;
    case SALE_ENDED:
        req_error(req, ERR_ENDED, NULL);
        break;
    case SALE_PAUSED:
        req_error(req, ERR_SALE_PAUSED, NULL);
        break;
    case SALE_SOLD_OUT:
        req_error(req, ERR_SOLD_OUT, NULL);
        break;
    case SALE_DUPLICATE:
        req_error(req, ERR_ALREADY_PURCHASED, NULL);
        break;
    case SALE_BUSY:
        req_error(req, ERR_BUSY, NULL);
        break;
    case SALE_QUEUE_FULL:
        req_error(req, ERR_BUSY,
                  "too many purchases of this voucher are waiting; retry");
        req->retry_after = 1;
        break;
    case SALE_BACKLOG:
        req_error(req, ERR_BUSY,
                  "too many orders of this voucher wait to be written; "
                  "retry");
        req->retry_after = 1;
        break;
    case SALE_UNCONFIRMED:
        /* Not undone: it may yet reach the replica and be written. */
        req_error(req, ERR_UNAVAILABLE,
                  "the order was taken but not yet confirmed by Redis' "
                  "replica; the outcome is unknown: check your orders");
        break;
    case SALE_RATE_LIMITED:
        req_error(req, ERR_RATE_LIMITED, NULL);
        req->retry_after = b->retry_s;
        break;
    case SALE_TICKET_REQUIRED:
        req_error(req, ERR_TICKET_REQUIRED,
                  b->ticket ? "the ticket is not this buyer's for this "
                              "voucher, or it has expired"
                            : NULL);
        break;
    case SALE_FAILED:
        if (b->err == -EAGAIN)
            req_error(req, ERR_UNAVAILABLE,
                      "the sale is being repaired or moved; nothing was "
                      "bought, retry");
        else if (b->err == -EPERM)
            req_error(req, ERR_UNAVAILABLE,
                      "this instance's Redis may lose acknowledged writes, "
                      "so it does not sell this voucher; nothing was bought");
        else
            req_backend_error(req, b->err, "purchase");
        break;
    }
}

static struct request *buy_request(struct sale_buy *b)
{
    return (struct request *)((char *)b - offsetof(struct request, call.buy));
}

static void buy_park(struct sale_buy *b)
{
    req_park(buy_request(b));
}

/* The sale layer's answer, from wherever it was decided. */
static void bought(struct sale_buy *b)
{
    struct request *req = buy_request(b);

    buy_reply(req, b);
    req_resume(req);
}

unsigned voucher_seckill_post(struct request *req)
{
    struct sale_buy *b = &req->call.buy;
    unsigned status;

    if ((status = req_buyer_or_reply(req)))
        return status;
    *b = (struct sale_buy){
        .voucher_id = req->id,
        .user_id = req->auth.user_id,
        .arrived_ms = (int64_t)(req->start_ns / 1000000u),
        .ticket = req_header_value(req, "Seckill-Ticket"),
        .park = buy_park,
        .done = bought,
    };
    ratelimit_buckets(req, &b->limit);
    if (!sale_buy(req->sale, b))
        return 0; /* parked: bought() answers */
    buy_reply(req, b);
    return req->status;
}
