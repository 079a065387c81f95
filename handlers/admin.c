/*
 * admin.c - admins: POST /api/admin/login (a name and a password, for an
 * admin token), and what an admin does to buyers' accounts: POST and
 * DELETE /api/admin/users/{id}/ban. A banned buyer's requests are
 * answered 403 on every instance within about a second, and it cannot
 * log in; its orders stay as they are.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "handlers/endpoints.h"

/* What `seckilld admin add` accepts as a name. */
static bool username_ok(const char *s)
{
    size_t n = strlen(s);

    return n >= 1 && n <= 64 &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789._-") == n;
}

/* The reply to an admin's login once it is decided. */
static unsigned login_reply(struct request *req,
                            const struct sale_admin_call *c)
{
    struct token_claims claims = {0};
    char token[TOKEN_STR_LEN];

    if (c->err)
        return req_backend_error(req, c->err, "admin_login");
    switch (c->outcome) {
    case SALE_ADMIN_OK:
        break;
    case SALE_ADMIN_WRONG:
        return req_error(req, ERR_UNAUTHORIZED,
                         "the username or password is wrong");
    case SALE_ADMIN_LOCKED:
        req->retry_after = c->retry_s;
        return req_error(req, ERR_RATE_LIMITED,
                         "too many failed logins: try again later");
    case SALE_ADMIN_BUSY:
        req->retry_after = c->retry_s;
        return req_error(req, ERR_BUSY,
                         "a login from your address is being checked, or "
                         "too many are: retry");
    }
    claims.user_id = c->admin_id;
    claims.role = TOKEN_ROLE_ADMIN;
    claims.expires = util_now_ms() / 1000 + req->cfg->admin_token_ttl_s;
    claims.gen = c->gen;
    token_sign(req->cfg->secret, &claims, token);
    return req_reply(
        req, 200,
        json_pack("{s:s,s:i,s:{s:o,s:s}}", "token", token, "expiresIn",
                  (json_int_t)req->cfg->admin_token_ttl_s, "admin", "id",
                  json_id(c->admin_id), "username", c->username));
}

/* The password was checked (any thread). */
static void login_done(struct sale_admin_call *c)
{
    struct request *req =
        (struct request *)((char *)c - offsetof(struct request, call.admin));

    login_reply(req, c);
    req_resume(req);
}

unsigned admin_login_post(struct request *req)
{
    struct sale_admin_call *c = &req->call.admin;
    const char *name, *password;

    if (!body_object_or_reply(req) ||
        !body_str_or_reply(req, "username", true, 64, &name) ||
        !body_str_or_reply(req, "password", true, 1024, &password))
        return req->status;
    if (!username_ok(name))
        return req_error(req, ERR_BAD_REQUEST,
                         "username: letters, digits, '.', '_' and '-', at "
                         "most 64");
    memset(c, 0, sizeof(*c));
    c->username = name;
    c->password = password;
    c->len = strlen(password);
    if (!req_client_key(req, c->addr, sizeof(c->addr)))
        snprintf(c->addr, sizeof(c->addr), "unknown");
    req_actor(req, &c->who);
    c->done = login_done;
    if (!sale_admin_login(req->sale, c))
        return 0; /* waiting for a turn: login_done() answers */
    return login_reply(req, c);
}

static unsigned ban(struct request *req, bool on)
{
    struct sale_actor who;
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    req_actor(req, &who);
    /* Any buyer id: load-test buyers have no users row, and a ban made
     * before a first login still applies to it. */
    err = sale_user_ban(req->sale, req->id, &who, on);
    if (err)
        return req_backend_error(req, err, on ? "ban" : "unban");
    log_info(on ? "user banned" : "user unbanned", "user=%lld admin=%lld",
             (long long)req->id, (long long)req->auth.user_id);
    return req_reply_raw(req, 204, NULL, NULL, 0);
}

unsigned admin_ban_post(struct request *req)
{
    return ban(req, true);
}

unsigned admin_ban_delete(struct request *req)
{
    return ban(req, false);
}
