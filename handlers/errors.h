/*
 * errors.h - the one error table: every client-visible error is one of
 * these, a status with a stable code and a default message, sent as
 * {"error":{"code":"...","message":"..."}} (README, Errors).
 */
#ifndef SECKILL_HANDLERS_ERRORS_H
#define SECKILL_HANDLERS_ERRORS_H

enum api_error {
    ERR_BAD_REQUEST,
    ERR_UNAUTHORIZED,
    ERR_FORBIDDEN,
    ERR_POW_REQUIRED,
    ERR_TICKET_REQUIRED,
    ERR_NOT_FOUND,
    ERR_METHOD_NOT_ALLOWED,
    ERR_NOT_SECKILL,
    ERR_NOT_STARTED,
    ERR_ENDED,
    ERR_SALE_PAUSED,
    ERR_SALE_STARTED,
    ERR_SOLD_OUT,
    ERR_ALREADY_PURCHASED,
    ERR_ORDER_PAID,
    ERR_ORDER_CLOSED,
    ERR_IDEMPOTENCY_KEY_IN_USE,
    ERR_IDEMPOTENCY_KEY_REUSED,
    ERR_PAYLOAD_TOO_LARGE,
    ERR_URI_TOO_LONG,
    ERR_HEADERS_TOO_LARGE,
    ERR_UNSUPPORTED_MEDIA_TYPE,
    ERR_BUSY,
    ERR_RATE_LIMITED,
    ERR_SMS_BUDGET,
    ERR_INTERNAL,
    ERR_UNAVAILABLE,
    ERR_NOT_IMPLEMENTED,
    ERR_COUNT
};

struct api_error_info {
    unsigned status;
    const char *code;
    const char *message; /* default message */
};

/* In request.c, beside the functions that send them. */
extern const struct api_error_info api_errors[ERR_COUNT];

#endif
