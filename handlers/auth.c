/*
 * auth.c - POST /api/auth/code and POST /api/auth/login: phone login with
 * a six-digit code kept in Redis, answered with a signed bearer token.
 */
#include <stdio.h>
#include <string.h>

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

unsigned auth_code_post(struct request *req)
{
    char phone[PHONE_E164_MAX];
    char code[8];
    json_t *body;
    int err;

    if (!body_object_or_reply(req) || !phone_or_reply(req, phone))
        return req->status;
    err = sale_login_code_issue(req->sale, phone, code);
    if (err)
        return req_backend_error(req, err, "code_put");
    /* Sending the SMS is out of scope: dev mode shows the code instead. */
    log_info("login code issued", "dev=%d", req->cfg->dev);
    body = json_pack("{s:s,s:i}", "phone", phone, "expiresIn", SALE_CODE_TTL_S);
    if (req->cfg->dev)
        json_object_set_new(body, "code", json_string(code));
    return req_reply(req, 200, body);
}

unsigned auth_login_post(struct request *req)
{
    char phone[PHONE_E164_MAX];
    const char *code;
    struct token_claims claims;
    char token[TOKEN_STR_LEN];
    int64_t user_id;
    bool ok;
    int err;

    if (!body_object_or_reply(req) || !phone_or_reply(req, phone) ||
        !body_str_or_reply(req, "code", true, 6, &code))
        return req->status;
    if (strlen(code) != 6 || strspn(code, "0123456789") != 6)
        return req_error(req, ERR_BAD_REQUEST, "code: must be 6 digits");
    err = sale_login(req->sale, phone, code, &ok, &user_id);
    if (err)
        return req_backend_error(req, err, "login");
    if (!ok)
        return req_error(req, ERR_UNAUTHORIZED,
                         "the login code is wrong or expired");

    claims.user_id = user_id;
    claims.role = TOKEN_ROLE_USER;
    claims.expires = util_now_ms() / 1000 + LOGIN_TOKEN_TTL_S;
    token_sign(req->cfg->secret, &claims, token);
    return req_reply(req, 200,
                     json_pack("{s:s,s:i,s:{s:o,s:s}}", "token", token,
                               "expiresIn", LOGIN_TOKEN_TTL_S, "user", "id",
                               json_id(user_id), "phone", phone));
}
