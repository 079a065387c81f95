/*
 * sms.c - sending a login code (see sale.h): POSTed as JSON
 * {"phone","code","expiresIn"} to the configured webhook, which sends the
 * SMS, with X-Signature: the lower-case hex HMAC-SHA256 of the body, keyed
 * by the configured secret (as the payment provider signs its
 * notifications). The call goes out on the SMS queue of the outbound
 * sender (common/outbound.h): each try has 2 s, and the whole has
 * SALE_SMS_DEADLINE_MS; nothing here waits for it.
 *
 * What the webhook did decides what happens to the code. Taken (2xx): it
 * stands. Surely not taken (refused, answered otherwise, never reached):
 * tried again while time is left, then withdrawn from Redis by a job of
 * the task pool, so it is not counted against the phone's limits. Perhaps
 * taken (connected, then no answer in time): never tried again, and kept,
 * so that it counts: otherwise a slow webhook would let anyone send a
 * phone as many codes as it likes, each withdrawn and each sent.
 *
 * A client address has at most SMS_PER_CLIENT_MAX codes on their way at
 * once, so that one address cannot hold the sender's whole queue while
 * the webhook is slow.
 */
#include "sale/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/metrics.h"
#include "common/outbound.h"
#include "common/util.h"

/* A try has the whole deadline: one that goes unanswered is not
 * repeated. */
#define SMS_TRY_MS 0
#define SMS_TRIES 2
#define SMS_PER_CLIENT_MAX 4

/* ---- codes on their way, per client address ---- */

struct client_slots {
    char key[SALE_LIMIT_KEY_LEN];
    unsigned n;
    struct client_slots *next;
};

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static struct client_slots *slots; /* a few hundred at most */

bool sale__sms_slot_take(const char *client)
{
    struct client_slots *e;
    bool ok = true;

    if (!client[0])
        return true;
    pthread_mutex_lock(&slots_mu);
    for (e = slots; e && strcmp(e->key, client) != 0; e = e->next)
        ;
    if (!e) {
        e = xcalloc(1, sizeof(*e));
        snprintf(e->key, sizeof(e->key), "%s", client);
        e->next = slots;
        slots = e;
    }
    if (e->n >= SMS_PER_CLIENT_MAX)
        ok = false;
    else
        e->n++;
    pthread_mutex_unlock(&slots_mu);
    return ok;
}

void sale__sms_slot_give(const char *client)
{
    struct client_slots **p, *e;

    if (!client[0])
        return;
    pthread_mutex_lock(&slots_mu);
    for (p = &slots; *p && strcmp((*p)->key, client) != 0; p = &(*p)->next)
        ;
    e = *p;
    if (e && --e->n == 0) {
        *p = e->next;
        free(e);
    }
    pthread_mutex_unlock(&slots_mu);
}

/* c is decided: its client's slot back, and its answer. */
static void code_decided(struct sale_code *c)
{
    sale__sms_slot_give(c->client);
    c->done(c);
}

/* On the pool: take back the code nobody got, then answer. With the
 * pool stopped (err), on the stopping thread, with a store of its own. */
static void code_withdraw(void *arg, int err)
{
    struct sale_code *c = arg;
    struct store *own = err ? store_new(c->sale->cfg.store) : NULL;

    if (store_code_revoke(own ? own : sale__store(c->sale), c->phone, c->code,
                          c->client, c->request))
        log_warn("a login code not sent could not be taken back: it stays "
                 "until it expires",
                 "ttl_s=%u", SALE_CODE_TTL_S);
    store_free(own);
    code_decided(c);
}

/* On the sender's thread: it must not wait, so a withdrawal goes to the
 * pool (a stopped pool: done on this thread). */
static void sms_done(void *arg, const struct outbound_result *r)
{
    struct sale_code *c = arg;
    /* Answered otherwise than 2xx: the webhook said it did not take it. */
    bool unknown = r->err && r->maybe_arrived && r->status == 0;

    if (!r->err) {
        metrics_count(METRIC_SMS_SENT, 1);
        c->err = 0;
        code_decided(c);
        return;
    }
    log_warn("login code not sent", "why=%s tries=%u status=%ld outcome=%s",
             r->err == -ETIMEDOUT   ? "no answer in time"
             : r->err == -ESHUTDOWN ? "stopping"
                                    : "refused",
             r->tries, r->status, unknown ? "unknown" : "not sent");
    if (unknown) {
        /* Kept: it may arrive, and it counts against the limits. */
        metrics_count(METRIC_SMS_UNCONFIRMED, 1);
        c->err = -ETIMEDOUT;
        /* When the phone may have another (the limits count this one). */
        c->retry_s = c->sale->cfg.codes.interval_s;
        code_decided(c);
        return;
    }
    metrics_count(METRIC_SMS_NOT_SENT, 1);
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
    err =
        outbound_post(cfg->queue, &(struct outbound_call){
                                      .url = cfg->webhook,
                                      .body = body,
                                      .body_len = (size_t)n,
                                      .headers = headers,
                                      .deadline_ms = SALE_SMS_DEADLINE_MS,
                                      .try_ms = SMS_TRY_MS,
                                      .tries = SMS_TRIES,
                                      /* A second SMS of one code is an SMS paid
                                       * twice, and a free one for a pumper. */
                                      .retry_unanswered = false,
                                      .done = sms_done,
                                      .arg = c,
                                  });
    if (!err)
        return false;
    c->err = err == -EAGAIN ? -EAGAIN : -ESHUTDOWN;
    metrics_count(err == -EAGAIN ? METRIC_SMS_QUEUE_FULL : METRIC_SMS_NOT_SENT,
                  1);
    log_warn("login code not sent: the sender refused it", "why=%s",
             err == -EAGAIN ? "queue full" : "stopping");
    return true;
}
