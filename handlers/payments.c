/*
 * payments.c - POST /api/payments/notify: the payment provider's
 * server-to-server callback that an order was paid.
 *
 * The body {"orderId":"...","amount":4750,"txnId":"..."} is signed: the
 * X-Signature header is the lower-case hex HMAC-SHA256 of the raw body,
 * keyed with the 32 bytes SECKILL_PAY_SECRET encodes. The service never
 * handles money; it records what the provider confirms, once: the same
 * txnId again is answered as the first time with nothing changed, a
 * payment for a closed (cancelled or expired) or late order is refused
 * with 409 ORDER_CLOSED and logged as one to refund. Without
 * SECKILL_PAY_SECRET the route does not exist (404).
 */
#include <string.h>
#include <microhttpd.h>
#include <sodium.h>

#include "common/util.h"
#include "handlers/endpoints.h"

#define MONEY_MAX 100000000000LL /* a billion in cents */
#define TXN_MAX SALE_TXN_MAX

/* A provider's transaction id: 1..64 printable ASCII characters. */
static bool txn_ok(const char *s)
{
    size_t n = strlen(s);

    if (n < 1 || n > TXN_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

/* The signature header checks against the raw body, in constant time. */
static bool signature_ok(struct request *req)
{
    const char *hex = req_header_value(req, "X-Signature");
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    size_t n = 0;

    if (!hex || strlen(hex) != 2 * sizeof(mac))
        return false;
    for (const char *p = hex; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false; /* lower-case hex only */
    if (sodium_hex2bin(mac, sizeof(mac), hex, strlen(hex), NULL, &n, NULL) ||
        n != sizeof(mac))
        return false;
    return crypto_auth_hmacsha256_verify(
               mac, (const unsigned char *)(req->body ? req->body : ""),
               req->body_len, req->cfg->pay_secret) == 0;
}

unsigned payment_notify_post(struct request *req)
{
    const char *order = NULL, *txn = NULL;
    int64_t order_id, amount;

    if (!req->cfg->has_pay_secret)
        return req_error(req, ERR_NOT_FOUND, "no such endpoint");
    if (!signature_ok(req))
        return req_error(req, ERR_UNAUTHORIZED,
                         "X-Signature is not the HMAC-SHA256 of the body");
    if (!body_object_or_reply(req) ||
        !body_str_or_reply(req, "orderId", true, 20, &order) ||
        !body_int_or_reply(req, "amount", true, 1, MONEY_MAX, &amount) ||
        !body_str_or_reply(req, "txnId", true, TXN_MAX, &txn))
        return req->status;
    if (util_parse_id(order, strlen(order), &order_id))
        return req_error(req, ERR_BAD_REQUEST,
                         "orderId: must be a positive integer (a string)");
    if (!txn_ok(txn))
        return req_error(req, ERR_BAD_REQUEST,
                         "txnId: 1 to 64 printable ASCII characters");
    return order_pay_start(req, order_id, 0, amount, txn);
}
