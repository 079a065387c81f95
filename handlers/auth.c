/*
 * auth.c - POST /api/auth/code and POST /api/auth/login: phone login with
 * a six-digit code kept in Redis, answered with a signed bearer token;
 * POST /api/auth/logout: that token, or every token of its account, is
 * refused from then on.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/metrics.h"
#include "common/phone.h"
#include "common/util.h"
#include "handlers/endpoints.h"

#define LOGIN_TOKEN_TTL_S (24 * 3600)

/* The body's phone in E.164 form (common/phone.h) into e164, so that
 * every way of writing one number names one user and one code. */
static bool phone_or_reply(struct request *req, char e164[PHONE_E164_MAX])
{
    const char *phone, *why;
    char msg[160];

    if (!body_str_or_reply(req, "phone", true, 20, &phone))
        return false;
    if (phone_normalize(phone, req->cfg->phone_region, e164, &why) != 0) {
        snprintf(msg, sizeof(msg), "phone: %s", why);
        req_error(req, ERR_BAD_REQUEST, msg);
        return false;
    }
    return true;
}

/* The reply to a code request once its code is decided. */
static unsigned code_reply(struct request *req, const struct sale_code *c)
{
    json_t *body;

    if (c->err == -ECOMM) {
        req->retry_after = 5;
        return req_error(req, ERR_UNAVAILABLE,
                         "the code could not be sent: try again in a moment");
    }
    if (c->err == -ETIMEDOUT) {
        /* The SMS service got it and did not say: it may arrive. */
        req->retry_after = c->retry_s ? c->retry_s : 60;
        return req_error(req, ERR_UNAVAILABLE,
                         "the code may have been sent: if it has not "
                         "arrived, ask again after Retry-After");
    }
    if (c->err == -EUSERS) {
        req->retry_after = 2;
        return req_error(req, ERR_RATE_LIMITED,
                         "too many login codes from your address are on "
                         "their way: retry in a moment");
    }
    if (c->err == -EDQUOT) {
        req->retry_after = c->retry_s ? c->retry_s : 60;
        return req_error(req, ERR_SMS_BUDGET, NULL);
    }
    if (c->err == -EAGAIN) {
        req->retry_after = 2;
        return req_error(req, ERR_UNAVAILABLE,
                         "too many login codes are being sent: try again in "
                         "a moment");
    }
    if (c->err)
        return req_backend_error(req, c->err, "code_put");
    if (c->retry_s) {
        req->retry_after = c->retry_s;
        return req_error(req, ERR_RATE_LIMITED,
                         "a code was sent to this phone a moment ago, or "
                         "too many this hour: retry later");
    }
    /* Sent to the SMS webhook when there is one; dev mode also shows it. */
    log_info("login code issued", "dev=%d", req->cfg->dev);
    body = json_pack("{s:s,s:i,s:s}", "phone", c->phone, "expiresIn",
                     SALE_CODE_TTL_S, "codeRequest", c->request);
    if (req->cfg->dev)
        json_object_set_new(body, "code", json_string(c->code));
    return req_reply(req, 200, body);
}

/* The SMS webhook took the code, or did not in time (any thread). */
static void code_done(struct sale_code *c)
{
    struct request *req =
        (struct request *)((char *)c - offsetof(struct request, call.code));

    code_reply(req, c);
    req_resume(req);
}

unsigned auth_code_post(struct request *req)
{
    struct sale_code *c = &req->call.code;

    char msg[160];

    if (!body_object_or_reply(req) || !phone_or_reply(req, c->phone))
        return req->status;
    /* Codes go to the configured countries only: no SMS to elsewhere. */
    if (!sale_sms_region(req->sale, c->phone, c->cc)) {
        metrics_count(METRIC_SMS_REGION, 1);
        char list[80];

        sale_sms_regions_text(req->sale, list, sizeof(list));
        snprintf(msg, sizeof(msg),
                 "phone: login codes are sent to numbers of %s only", list);
        return req_error(req, ERR_BAD_REQUEST, msg);
    }
    /* The proof of work grows with the codes that country had lately. */
    if (!pow_or_reply(req, req->cfg->pow_maxnumber
                               ? sale_sms_pow_factor(req->sale, c->cc)
                               : 1))
        return req->status;
    c->done = code_done;
    if (!req_client_key(req, c->client, sizeof(c->client)))
        c->client[0] = '\0';
    if (!sale_login_code_issue(req->sale, c))
        return 0; /* handed to the SMS sender: code_done() answers */
    return code_reply(req, c);
}

unsigned auth_login_post(struct request *req)
{
    char phone[PHONE_E164_MAX];
    const char *code, *request = NULL;
    struct token_claims claims = {0};
    char token[TOKEN_STR_LEN], addr[64];
    struct sale_login in;
    int err;

    if (!body_object_or_reply(req) || !phone_or_reply(req, phone) ||
        !body_str_or_reply(req, "code", true, 6, &code))
        return req->status;
    if (strlen(code) != 6 || strspn(code, "0123456789") != 6)
        return req_error(req, ERR_BAD_REQUEST, "code: must be 6 digits");
    if (!body_str_or_reply(req, "codeRequest", false, STORE_CODE_REQUEST_LEN,
                           &request))
        return req->status;
    if (request &&
        (strlen(request) != STORE_CODE_REQUEST_LEN ||
         strspn(request, "0123456789abcdef") != STORE_CODE_REQUEST_LEN))
        return req_error(req, ERR_BAD_REQUEST,
                         "codeRequest: the codeRequest POST /api/auth/code "
                         "answered (32 hex digits), or leave it out");
    if (!req_client_key(req, addr, sizeof(addr)))
        snprintf(addr, sizeof(addr), "unknown");
    err = sale_login(req->sale, phone, code, addr, request, &in);
    if (err)
        return req_backend_error(req, err, "login");
    switch (in.outcome) {
    case SALE_LOGIN_OK:
        break;
    case SALE_LOGIN_WRONG:
        return req_error(req, ERR_UNAUTHORIZED,
                         "the login code is wrong or expired");
    case SALE_LOGIN_GONE:
        return req_error(req, ERR_UNAUTHORIZED,
                         "this code request is used up or expired: ask for "
                         "a new code");
    case SALE_LOGIN_LOCKED:
        req->retry_after = in.retry_s;
        return req_error(req, ERR_RATE_LIMITED,
                         "too many wrong codes: try again later");
    case SALE_LOGIN_BANNED:
        return req_error(req, ERR_FORBIDDEN, "this account is banned");
    }

    claims.user_id = in.user_id;
    claims.role = TOKEN_ROLE_USER;
    claims.expires = util_now_ms() / 1000 + LOGIN_TOKEN_TTL_S;
    claims.gen = in.gen;
    token_sign(req->cfg->secret, &claims, token);
    return req_reply(req, 200,
                     json_pack("{s:s,s:i,s:{s:o,s:s}}", "token", token,
                               "expiresIn", LOGIN_TOKEN_TTL_S, "user", "id",
                               json_id(in.user_id), "phone", phone));
}

unsigned auth_logout_post(struct request *req)
{
    unsigned status;
    bool all = false;
    int err;

    if ((status = req_user_or_reply(req)))
        return status;
    /* No body: this token. {"all": true}: every token of the account. */
    if (req->body_len) {
        json_t *v;

        if (!body_object_or_reply(req))
            return req->status;
        v = json_object_get(req->json, "all");
        if (json_object_size(req->json) != (v ? 1u : 0u) ||
            (v && !json_is_boolean(v)))
            return req_error(req, ERR_BAD_REQUEST,
                             "the body may only be {\"all\": true|false}");
        all = v && json_is_true(v);
    }
    err = sale_logout(req->sale, &req->auth, all);
    if (err)
        return req_backend_error(req, err, "logout");
    log_info("logged out", "role=%d id=%lld all=%d", (int)req->auth.role,
             (long long)req->auth.user_id, all);
    return req_reply_raw(req, 204, NULL, NULL, 0);
}
