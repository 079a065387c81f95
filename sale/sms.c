/*
 * sms.c - sending a login code (see sale.h): POSTed as JSON
 * {"phone","code","expiresIn"} to the configured webhook, which sends the
 * SMS, with X-Signature: the lower-case hex HMAC-SHA256 of the body, keyed
 * by the configured secret (as the payment provider signs its
 * notifications). The call goes out on the SMS queue of the outbound
 * sender (common/outbound.h): each try has 2 s, a failed one is tried
 * again, and the whole has SALE_SMS_DEADLINE_MS; nothing here waits for
 * it. A code the webhook did not take is withdrawn from Redis by a job of
 * the task pool, before its request is answered.
 */
#include "sale/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "common/outbound.h"
#include "common/util.h"

#define SMS_TRY_MS 2000
#define SMS_TRIES 2

/* On the pool: take back the code nobody got, then answer. */
static void code_withdraw(void *arg, int err)
{
    struct sale_code *c = arg;

    if (err || store_code_revoke(sale__store(c->sale), c->phone, c->code))
        log_warn("a login code not sent could not be taken back: it stays "
                 "until it expires",
                 "ttl_s=%u", SALE_CODE_TTL_S);
    c->done(c);
}

/* On the sender's thread: it must not wait, so a withdrawal goes to the
 * pool (a stopped pool: answered here, the code left to expire). */
static void sms_done(void *arg, const struct outbound_result *r)
{
    struct sale_code *c = arg;

    if (!r->err) {
        c->err = 0;
        c->done(c);
        return;
    }
    log_warn("login code not sent", "err=%d tries=%u status=%ld", r->err,
             r->tries, r->status);
    c->err = -ECOMM;
    if (sale_job_run(c->sale, code_withdraw, c) != 0)
        code_withdraw(c, -ESHUTDOWN);
}

bool sale__sms_send(struct sale *s, struct sale_code *c)
{
    const struct sale_sms_config *cfg = &s->cfg.sms;
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    char body[128], sig[2 * sizeof(mac) + 16], hex[2 * sizeof(mac) + 1];
    const char *headers[] = {"Content-Type: application/json", sig, NULL};
    int n, err;

    n = snprintf(body, sizeof(body),
                 "{\"phone\":\"%s\",\"code\":\"%s\",\"expiresIn\":%u}",
                 c->phone, c->code, SALE_CODE_TTL_S);
    if (n < 0 || (size_t)n >= sizeof(body)) {
        c->err = -EINVAL;
        return true;
    }
    crypto_auth_hmacsha256(mac, (const unsigned char *)body, (size_t)n,
                           cfg->secret);
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    snprintf(sig, sizeof(sig), "X-Signature: %s", hex);
    c->sale = s;
    err = outbound_post(cfg->queue, &(struct outbound_call){
                                        .url = cfg->webhook,
                                        .body = body,
                                        .body_len = (size_t)n,
                                        .headers = headers,
                                        .deadline_ms = SALE_SMS_DEADLINE_MS,
                                        .try_ms = SMS_TRY_MS,
                                        .tries = SMS_TRIES,
                                        .done = sms_done,
                                        .arg = c,
                                    });
    if (!err)
        return false;
    c->err = err == -EAGAIN ? -EAGAIN : -ESHUTDOWN;
    log_warn("login code not sent: the sender refused it", "err=%d", err);
    return true;
}
