/*
 * endpoints.h - the endpoint handlers, one file per group of endpoints.
 * A handler parses and authorizes its request, calls one function of the
 * sale layer (sale/sale.h) and sets the reply; it runs once per request,
 * where the route table says (route.h). A handler that hands its request
 * on parks it and returns 0: the callback of the sale call it made sets
 * the reply and resumes it.
 */
#ifndef SECKILL_HANDLERS_ENDPOINTS_H
#define SECKILL_HANDLERS_ENDPOINTS_H

#include <jansson.h>

#include "handlers/request.h"

/* An endpoint's handler: sets req's reply and returns its status (0 when
 * the request was parked: the reply comes later). */
typedef unsigned (*handler_fn)(struct request *req);

unsigned health_get(struct request *req);           /* health.c */
unsigned ready_get(struct request *req);            /* health.c */
unsigned metrics_get(struct request *req);          /* metrics.c */
unsigned admin_metrics_get(struct request *req);    /* metrics.c */
unsigned pow_get(struct request *req);              /* pow.c */
unsigned auth_code_post(struct request *req);       /* auth.c */
unsigned auth_login_post(struct request *req);      /* auth.c */
unsigned auth_logout_post(struct request *req);     /* auth.c */
unsigned admin_login_post(struct request *req);     /* admin.c */
unsigned refunds_get(struct request *req);          /* refunds.c */
unsigned refund_done_post(struct request *req);     /* refunds.c */
unsigned audit_get(struct request *req);            /* audit.c */
unsigned site_config_get(struct request *req);      /* site.c */
unsigned admin_ban_post(struct request *req);       /* admin.c */
unsigned admin_ban_delete(struct request *req);     /* admin.c */
unsigned vouchers_post(struct request *req);        /* vouchers.c */
unsigned vouchers_get(struct request *req);         /* vouchers.c */
unsigned voucher_get(struct request *req);          /* vouchers.c */
unsigned voucher_stats_get(struct request *req);    /* vouchers.c */
unsigned voucher_orders_get(struct request *req);   /* sale_orders.c */
unsigned sales_get(struct request *req);            /* sales.c */
unsigned voucher_patch(struct request *req);        /* controls.c */
unsigned voucher_delete(struct request *req);       /* controls.c */
unsigned voucher_pause_post(struct request *req);   /* controls.c */
unsigned voucher_resume_post(struct request *req);  /* controls.c */
unsigned voucher_stop_post(struct request *req);    /* controls.c */
unsigned voucher_restock_post(struct request *req); /* controls.c */
unsigned voucher_seckill_post(struct request *req); /* seckill.c */
unsigned voucher_queue_post(struct request *req);   /* queue.c */
unsigned voucher_queue_get(struct request *req);    /* queue.c */
unsigned orders_get(struct request *req);           /* orders.c */
unsigned order_get(struct request *req);            /* orders.c */
unsigned order_cancel_post(struct request *req);    /* orders.c */
unsigned order_pay_post(struct request *req);       /* orders.c */
unsigned payment_notify_post(struct request *req);  /* payments.c */
/* The pages, their files and /openapi.json, embedded at build time. */
unsigned web_get(struct request *req); /* web.c */

/*
 * The proof of work of the request (Seckill-PoW), checked and spent: true
 * to go on; false with the reply set (403 POW_REQUIRED with a fresh
 * challenge in error.details, or 503). factor (1 to SALE_POW_FACTOR_MAX)
 * asks for a challenge that many times harder than the setting: one
 * issued easier is refused with a harder one. True at once when the
 * instance asks for none. Waits for Redis (pow.c).
 */
bool pow_or_reply(struct request *req, unsigned factor);

/* Bounds of a voucher's money (cents) and stock, as created or edited. */
#define MONEY_MAX 100000000000LL /* a billion in cents */
#define STOCK_MAX 1000000000LL

/* A refund as GET /api/refunds lists it (refunds.c). A new object. */
json_t *refund_json(const struct store_refund *r);

/*
 * An order as the API shows it: id, userId, voucherId, status ("unpaid",
 * "paid", "cancelled", "expired"; "pending" when pending), createTime,
 * payDeadline, payTime and closeTime (null until set). A new object.
 */
json_t *order_json(const struct store_order *o, bool pending);
/* An order status's name in the API ("unpaid", ...). */
const char *order_status_name(enum order_status s);

/*
 * A voucher as the API shows it (GET /api/vouchers/{id}): its fields,
 * and a seckill voucher's stock, times, mode and admission. A new
 * object (vouchers.c).
 */
json_t *voucher_json(const struct request *req, const struct store_voucher *v);

/*
 * Record a payment for an order (sale_pay()) and reply with the outcome
 * when it is done (orders.c): for POST /api/payments/notify and the
 * dev-mode POST /api/orders/{id}/pay. user_id > 0: only that user's order
 * (else 404); amount < 0: the voucher's price (the simulated provider).
 * Parks req; returns 0, or the status of a reply set at once.
 */
unsigned order_pay_start(struct request *req, int64_t order_id, int64_t user_id,
                         int64_t amount, const char *txn_id);

#endif
