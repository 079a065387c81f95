/*
 * buyers.c - a buyer's login and sessions (see sale.h): a six-digit code
 * kept in Redis for the phone, checked once, and the phone's user, made
 * on its first login (the handlers turn it into a signed token); logging
 * out and bans, written to MySQL or Redis and then told to every
 * instance's view (sale/sessions.h).
 */
#include "sale/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sodium.h>

#include "common/metrics.h"
#include "common/token.h"
#include "common/util.h"
#include "sale/sessions.h"

static unsigned seconds_up(int64_t ms)
{
    return ms <= 1000 ? 1 : (unsigned)((ms + 999) / 1000);
}

bool sale_sms_region(const struct sale *s, const char *phone, char cc[4])
{
    for (unsigned i = 0; i < s->cfg.sms.nregions; i++) {
        const char *r = s->cfg.sms.regions[i];

        /* Calling codes are prefix-free: the first that starts the
         * number is its own. */
        if (phone[0] == '+' && strncmp(phone + 1, r, strlen(r)) == 0) {
            snprintf(cc, 4, "%s", r);
            return true;
        }
    }
    return false;
}

void sale_sms_regions_text(const struct sale *s, char *out, size_t n)
{
    size_t len = 0;

    out[0] = '\0';
    for (unsigned i = 0; i < s->cfg.sms.nregions && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s+%s", i ? ", " : "",
                                s->cfg.sms.regions[i]);
}

unsigned sale_sms_pow_factor(struct sale *s, const char *cc)
{
    unsigned per_min = s->cfg.sms.per_min, half = per_min / 2, recent = 0;
    int64_t retry_ms;
    bool ok;

    if (!per_min ||
        store_sms_budget(sale__store(s), cc, per_min, 0, &ok, &retry_ms,
                         &recent) ||
        recent <= half)
        return 1;
    if (recent >= per_min)
        return SALE_POW_FACTOR_MAX;
    return 1 + (unsigned)((uint64_t)(SALE_POW_FACTOR_MAX - 1) *
                          (recent - half) / (per_min - half));
}

/* One more code of c's calling code this minute; false (c decided:
 * -EDQUOT, or the error) when its budget is spent. */
static bool budget_take(struct sale *s, struct sale_code *c)
{
    int64_t retry_ms = 0;
    unsigned recent;
    bool ok = true;

    if (!s->cfg.sms.per_min)
        return true;
    c->err = store_sms_budget(sale__store(s), c->cc, s->cfg.sms.per_min, 1, &ok,
                              &retry_ms, &recent);
    if (c->err)
        return false;
    if (!ok) {
        metrics_count(METRIC_SMS_OVER_BUDGET, 1);
        log_warn("login code refused: the calling code's budget is spent",
                 "cc=%s per_min=%u", c->cc, s->cfg.sms.per_min);
        c->err = -EDQUOT;
        c->retry_s = seconds_up(retry_ms);
        return false;
    }
    return true;
}

/* Give back what budget_take() took (the code was not stored). */
static void budget_give(struct sale *s, struct sale_code *c)
{
    int64_t retry_ms;
    unsigned recent;
    bool ok;

    if (s->cfg.sms.per_min)
        store_sms_budget(sale__store(s), c->cc, s->cfg.sms.per_min, -1, &ok,
                         &retry_ms, &recent);
}

bool sale_login_code_issue(struct sale *s, struct sale_code *c)
{
    int64_t retry_ms = 0;

    c->retry_s = 0;
    if (s->cfg.sms.webhook && !sale__sms_slot_take(c->client)) {
        c->err = -EUSERS;
        return true;
    }
    if (!budget_take(s, c)) {
        if (s->cfg.sms.webhook)
            sale__sms_slot_give(c->client);
        return true;
    }
    snprintf(c->code, sizeof(c->code), "%06u", randombytes_uniform(1000000));
    {
        unsigned char id[STORE_CODE_REQUEST_LEN / 2];

        randombytes_buf(id, sizeof(id));
        sodium_bin2hex(c->request, sizeof(c->request), id, sizeof(id));
    }
    c->err = store_code_put(sale__store(s), c->phone, c->code, c->client,
                            c->request, &s->cfg.codes, &retry_ms);
    c->retry_s = retry_ms ? seconds_up(retry_ms) : 0;
    if (c->err || retry_ms)
        budget_give(s, c);
    if (c->err || retry_ms || !s->cfg.sms.webhook) {
        if (s->cfg.sms.webhook)
            sale__sms_slot_give(c->client);
        return true;
    }
    /* Kept first, so that the limits hold for concurrent requests; taken
     * back when it surely was not sent (a code nobody has is of no use,
     * and the buyer may ask again at once). */
    if (!sale__sms_send(s, c))
        return false;
    sale__sms_slot_give(c->client);
    if (store_code_revoke(sale__store(s), c->phone, c->code, c->client,
                          c->request))
        log_warn("a login code not sent could not be taken back: it stays "
                 "until it expires",
                 "ttl_s=%u", SALE_CODE_TTL_S);
    return true;
}

int sale_login(struct sale *s, const char *phone, const char *code,
               const char *addr, const char *request, struct sale_login *out)
{
    struct store *st = sale__store(s);
    enum store_code outcome;
    int64_t retry_ms = 0;
    bool banned = false;
    int err;

    memset(out, 0, sizeof(*out));
    err = store_code_check(st, phone, code, addr, request, &s->cfg.codes,
                           &outcome, &retry_ms);
    if (err)
        return err;
    if (outcome == STORE_CODE_LOCKED) {
        out->outcome = SALE_LOGIN_LOCKED;
        out->retry_s = seconds_up(retry_ms);
        log_warn("login code refused: too many wrong tries",
                 "addr=%s retry_s=%u", addr, out->retry_s);
        return 0;
    }
    if (outcome == STORE_CODE_WRONG || outcome == STORE_CODE_GONE) {
        out->outcome =
            outcome == STORE_CODE_GONE ? SALE_LOGIN_GONE : SALE_LOGIN_WRONG;
        return 0;
    }
    err = store_user_login(st, phone, &out->user_id);
    if (!err)
        err = store_account_get(st, TOKEN_ROLE_USER, out->user_id, &out->gen,
                                &banned);
    if (err)
        return err;
    out->outcome = banned ? SALE_LOGIN_BANNED : SALE_LOGIN_OK;
    return 0;
}

int sale_pow_spend(struct sale *s, const char *challenge, int64_t expires_s)
{
    return store_pow_spend(sale__store(s), challenge, expires_s);
}

enum sale_session sale_session_check(struct sale *s,
                                     const struct token_claims *c)
{
    switch (sessions_check(s->cfg.sessions, c)) {
    case SESSION_REVOKED:
        return SALE_SESSION_REVOKED;
    case SESSION_BANNED:
        return SALE_SESSION_BANNED;
    default:
        return SALE_SESSION_OK;
    }
}

/* Tell every instance (this one at once): msg is already true in MySQL
 * or Redis. The change is made, so a notice that cannot be published
 * (Redis away) does not fail it: an error would invite a retry of what
 * is done, and the other instances learn it at their next reload
 * (sale/sessions.c), as a token denial not published. */
static void tell(struct sale *s, struct store *st, const char *msg)
{
    sessions_apply(s->cfg.sessions, msg);
    if (store_publish(st, sessions_channel(s->cfg.sessions), msg))
        log_warn("account change not published: the others learn it at "
                 "their next reload",
                 "change=\"%s\"", msg);
}

int sale_logout(struct sale *s, const struct token_claims *c, bool all)
{
    struct store *st = sale__store(s);
    char msg[80];
    uint32_t gen;
    int err;

    if (!all) {
        snprintf(msg, sizeof(msg), "d %016" PRIx64 " %lld", c->jti,
                 (long long)c->expires);
        err = store_token_deny(st, c->jti, c->expires,
                               sessions_channel(s->cfg.sessions), msg);
        if (!err)
            sessions_apply(s->cfg.sessions, msg);
        return err;
    }
    err = store_account_logout_all(st, c->role, c->user_id, &gen);
    if (err)
        return err;
    snprintf(msg, sizeof(msg), "g %u %lld %u", (unsigned)c->role,
             (long long)c->user_id, gen);
    tell(s, st, msg);
    return 0;
}

int sale_user_ban(struct sale *s, int64_t user_id, const struct sale_actor *who,
                  bool on)
{
    struct store *st = sale__store(s);
    struct store_audit audit;
    char msg[48];
    int err;

    sale__audit_make(&audit, who, on ? "user.ban" : "user.unban", "user",
                     user_id, NULL);
    err = store_account_ban(st, user_id, on, &audit);
    sale__audit_done(&audit);
    if (err)
        return err;
    snprintf(msg, sizeof(msg), "b %lld %d", (long long)user_id, on ? 1 : 0);
    tell(s, st, msg);
    return 0;
}
