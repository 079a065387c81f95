/*
 * waitroom.c - a queue sale's waiting room (see sale.h): who may buy is
 * decided by a place in Redis (store/waitroom.c), not by who clicks
 * first. Buyers join from SECKILL_WAITROOM_OPEN_S before the begin; at
 * the begin those who joined early are in a random order drawn as they
 * joined (so a script that joins first gains nothing), and latecomers
 * follow. Places are admitted at admit_rate a second from the begin,
 * none before its buyer joined, each with a signed ticket
 * (common/ticket.h) that the purchase checks from memory (buy.c).
 * Nothing here keeps state of its own.
 */
#include "sale/internal.h"

#include <errno.h>
#include <string.h>

#include "common/ticket.h"
#include "common/util.h"

/* The room of a sale with begin and end (epoch s). */
static struct store_waitroom room_of(const struct sale *s, int64_t begin_s,
                                     int64_t end_s)
{
    const struct sale_waitroom_config *c = &s->cfg.waitroom;

    return (struct store_waitroom){
        .open_ms = (begin_s - (int64_t)c->open_s) * 1000,
        .begin_ms = begin_s * 1000,
        .end_ms = end_s * 1000,
        .rate = c->admit_rate ? c->admit_rate : 1,
        .poll_ms = (c->poll_s ? c->poll_s : 1) * 1000,
    };
}

/* What the sale layer knows of voucher_id (the cache, else MySQL). */
static int voucher_of(struct sale *s, struct store *st, int64_t id,
                      struct vcache_voucher *v)
{
    struct store_seckill row;
    uint64_t gen;
    int err;

    if (vcache_entry_get(s->cfg.vcache, id, v, &gen))
        return 0;
    err = store_seckill_get(st, id, &row);
    if (err && err != -ENOENT)
        return err;
    vcache_voucher_from_row(v, err ? NULL : &row);
    vcache_entry_put(s->cfg.vcache, id, v, gen);
    return 0;
}

static int place(struct sale *s, int64_t voucher_id, int64_t user_id, bool join,
                 struct sale_queue_place *out)
{
    struct store *st = sale__store(s);
    struct store_waitroom room;
    struct store_wr_place p;
    struct vcache_voucher v;
    int err;

    memset(out, 0, sizeof(*out));
    err = voucher_of(s, st, voucher_id, &v);
    if (err)
        return err;
    if (!v.found) {
        out->outcome = SALE_QUEUE_NOT_FOUND;
        return 0;
    }
    if (v.type != VOUCHER_SECKILL) {
        out->outcome = SALE_QUEUE_NOT_SECKILL;
        return 0;
    }
    if (!v.queue) {
        out->outcome = SALE_QUEUE_OPEN;
        return 0;
    }
    if (v.sold_out && util_now_ms() / 1000 < v.end_time) {
        out->outcome = SALE_QUEUE_SOLD_OUT;
        return 0;
    }
    room = room_of(s, v.begin_time, v.end_time);
    err = store_waitroom_place(st, voucher_id, &room, user_id, join, &p);
    if (err)
        return err;
    switch (p.outcome) {
    case STORE_WR_OK:
        break;
    case STORE_WR_NOT_OPEN:
        out->outcome = SALE_QUEUE_NOT_OPEN;
        out->retry_ms = p.retry_ms;
        return 0;
    case STORE_WR_ENDED:
        out->outcome = SALE_QUEUE_ENDED;
        return 0;
    case STORE_WR_NOT_JOINED:
        out->outcome = SALE_QUEUE_NOT_JOINED;
        return 0;
    case STORE_WR_TOO_SOON:
        out->outcome = SALE_QUEUE_TOO_SOON;
        out->retry_ms = p.retry_ms;
        return 0;
    }
    out->outcome = SALE_QUEUE_OK;
    out->position = p.position;
    out->admitted = p.admitted;
    out->begin_in_ms = room.begin_ms - p.now_ms;
    out->eta_ms = p.position && !p.admitted ? p.admit_at_ms - p.now_ms : 0;
    if (p.position == 0)
        out->eta_ms = out->begin_in_ms;
    if (p.admitted) {
        /* Fixed by the place, not by this poll: polling again cannot
         * stretch it. */
        int64_t until =
            p.admit_at_ms + (int64_t)s->cfg.waitroom.ticket_ttl_s * 1000;

        ticket_sign(s->cfg.waitroom.ticket_key, user_id, voucher_id, until,
                    out->ticket);
        out->ticket_left_ms = until - p.now_ms;
    }
    return 0;
}

int64_t sale_queue_opens_at(const struct sale *s, int64_t begin_time)
{
    return begin_time - (int64_t)s->cfg.waitroom.open_s;
}

int sale_queue_join(struct sale *s, int64_t voucher_id, int64_t user_id,
                    struct sale_queue_place *out)
{
    return place(s, voucher_id, user_id, true, out);
}

int sale_queue_poll(struct sale *s, int64_t voucher_id, int64_t user_id,
                    struct sale_queue_place *out)
{
    return place(s, voucher_id, user_id, false, out);
}

int sale_queue_counts(struct sale *s, int64_t voucher_id,
                      const struct store_voucher_stats *v, int64_t *joined,
                      int64_t *admitted)
{
    struct store_waitroom room = room_of(s, v->begin_time, v->end_time);

    return store_waitroom_counts(sale__store(s), voucher_id, &room, joined,
                                 admitted);
}

bool sale__ticket_ok(const struct sale *s, const struct sale_buy *b,
                     int64_t now_ms)
{
    return b->ticket && ticket_verify(s->cfg.waitroom.ticket_key, b->ticket,
                                      strlen(b->ticket), b->user_id,
                                      b->voucher_id, now_ms) == 0;
}
