/*
 * queue.c - a queue sale's waiting room: POST /api/vouchers/{id}/queue
 * joins it (a buyer's token, and a proof of work when the instance asks
 * for one), GET reads the buyer's place; both answer the place, and once
 * it is admitted the ticket to send with the purchase (Seckill-Ticket).
 * Retry-After says when to look again: before the begin, when the
 * positions are drawn; while waiting, about half the way to admission.
 */
#include <stdio.h>

#include "handlers/endpoints.h"

static unsigned clamp_s(int64_t ms, unsigned lo, unsigned hi)
{
    int64_t s = (ms + 999) / 1000;

    return s < lo ? lo : s > hi ? hi : (unsigned)s;
}

static unsigned place_reply(struct request *req, unsigned status,
                            const struct sale_queue_place *p)
{
    char msg[96];

    switch (p->outcome) {
    case SALE_QUEUE_OK:
        break;
    case SALE_QUEUE_NOT_FOUND:
        return req_error(req, ERR_NOT_FOUND, "no voucher with this id");
    case SALE_QUEUE_NOT_SECKILL:
        return req_error(req, ERR_NOT_SECKILL, NULL);
    case SALE_QUEUE_OPEN:
        return req_error(req, ERR_NOT_FOUND,
                         "this voucher has no waiting room: buy it directly");
    case SALE_QUEUE_NOT_OPEN:
        snprintf(msg, sizeof(msg), "the waiting room opens in %u s",
                 clamp_s(p->retry_ms, 1, UINT32_MAX));
        req->retry_after = clamp_s(p->retry_ms, 1, 3600);
        return req_error(req, ERR_NOT_STARTED, msg);
    case SALE_QUEUE_ENDED:
        return req_error(req, ERR_ENDED, NULL);
    case SALE_QUEUE_SOLD_OUT:
        return req_error(req, ERR_SOLD_OUT, NULL);
    case SALE_QUEUE_NOT_JOINED:
        return req_error(req, ERR_NOT_FOUND,
                         "you have no place in this waiting room: join it");
    case SALE_QUEUE_TOO_SOON:
        req->retry_after = clamp_s(p->retry_ms, 1, 60);
        return req_error(req, ERR_RATE_LIMITED,
                         "you read your place a moment ago: see Retry-After");
    }
    if (p->position == 0)
        req->retry_after = clamp_s(p->begin_in_ms, 1, 30);
    else if (!p->admitted)
        req->retry_after = clamp_s(p->eta_ms / 2, 1, 10);
    return req_reply(
        req, status,
        json_pack(
            "{s:o,s:o,s:b,s:I,s:o,s:o}", "voucherId", json_id(req->id),
            "position", p->position ? json_integer(p->position) : json_null(),
            "admitted", p->admitted, "etaSeconds",
            (json_int_t)((p->eta_ms + 999) / 1000), "ticket",
            p->admitted ? json_string(p->ticket) : json_null(),
            "ticketExpiresIn",
            !p->admitted ? json_null()
            : p->ticket_left_ms > 0
                ? json_integer((json_int_t)((p->ticket_left_ms + 999) / 1000))
                : json_integer(0)));
}

unsigned voucher_queue_post(struct request *req)
{
    struct sale_queue_place p;
    unsigned status;
    int err;

    if ((status = req_buyer_or_reply(req)))
        return status;
    if (!pow_or_reply(req, 1))
        return req->status;
    err = sale_queue_join(req->sale, req->id, req->auth.user_id, &p);
    if (err)
        return req_backend_error(req, err, "queue_join");
    return place_reply(req, 202, &p);
}

unsigned voucher_queue_get(struct request *req)
{
    struct sale_queue_place p;
    unsigned status;
    int err;

    if ((status = req_buyer_or_reply(req)))
        return status;
    err = sale_queue_poll(req->sale, req->id, req->auth.user_id, &p);
    if (err)
        return req_backend_error(req, err, "queue_poll");
    return place_reply(req, 200, &p);
}
