/*
 * check_outside.c - the promise about services outside seckilld: a
 * webhook that is slow, hangs, fails or refuses delays only the requests
 * that need it. While an SMS fault was the only fault (none other active
 * from a few seconds before a request was sent until it was answered),
 * every request but a code request was answered within OTHERS_BUDGET_MS,
 * and every code request within the sender's 4 s deadline and a margin.
 */
#include <stdio.h>

#include "tests/soak/soak.h"

/* A request that does not need the webhook, on a healthy deployment. */
#define OTHERS_BUDGET_MS 3000
/* The code's deadline at the webhook (4 s), and the round trips around
 * it. */
#define CODE_BUDGET_MS 6000
/* After another fault heals, the deployment may still be catching up
 * (an instance restarting, a failover settling). */
#define SETTLE_MS 5000

/* Whether an SMS fault covered [from, to], and no other fault came near
 * it. */
static bool only_sms(const struct fault *f, size_t nf, int64_t from, int64_t to,
                     int64_t end_ms)
{
    bool sms = false;

    for (size_t i = 0; i < nf; i++) {
        int64_t heal = f[i].heal_ms ? f[i].heal_ms : end_ms;

        if (f[i].kind == F_SMS) {
            sms = sms || (f[i].start_ms <= to && heal >= from);
            continue;
        }
        if (f[i].start_ms <= to && heal + SETTLE_MS >= from)
            return false;
    }
    return sms;
}

void check_outside(const struct hist *h, size_t nh, const struct fault *f,
                   size_t nf)
{
    int64_t end_ms = soak_ms(), slowest = 0, slowest_code = 0;
    size_t others = 0, codes = 0, late = 0;
    long sent = 0, bad = 0;

    sms_sink_counts(&sent, &bad);
    if (bad)
        soak_violation("sms-bad-signature", 0, 0, 0, end_ms,
                       "%ld of the %ld login codes the SMS webhook read had "
                       "a wrong X-Signature",
                       bad, sent);

    for (size_t i = 0; i < nh; i++) {
        int64_t took = h[i].done_ms - h[i].sent_ms;

        if (!h[i].status || h[i].op == OP_SALE ||
            !only_sms(f, nf, h[i].sent_ms - SETTLE_MS, h[i].done_ms, end_ms))
            continue;
        if (h[i].op == OP_CODE) {
            codes++;
            if (took > slowest_code)
                slowest_code = took;
            if (took > CODE_BUDGET_MS)
                soak_violation("code-request-slow", h[i].user, 0, 0,
                               h[i].sent_ms,
                               "a login code request took %lld ms (its "
                               "deadline at the webhook is 4 s) while only "
                               "the SMS webhook failed",
                               (long long)took);
            continue;
        }
        others++;
        if (took > slowest)
            slowest = took;
        if (took > OTHERS_BUDGET_MS) {
            late++;
            soak_violation("outside-delayed-others", h[i].user, h[i].voucher,
                           h[i].order, h[i].sent_ms,
                           "a %s request took %lld ms while only the SMS "
                           "webhook failed (budget %d ms)",
                           op_names[h[i].op], (long long)took,
                           OTHERS_BUDGET_MS);
        }
    }
    printf("\nthe SMS webhook read %ld login codes; while it was the only "
           "fault: %zu requests that do not need it (slowest %lld ms, %zu "
           "over %d ms), %zu code requests (slowest %lld ms)\n",
           sent, others, (long long)slowest, late, OTHERS_BUDGET_MS, codes,
           (long long)slowest_code);
}
