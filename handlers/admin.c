/*
 * admin.c - what an admin does to buyers' accounts: POST and DELETE
 * /api/admin/users/{id}/ban. A banned buyer's requests are answered 403
 * on every instance within about a second, and it cannot log in; its
 * orders stay as they are.
 */
#include "common/util.h"
#include "handlers/endpoints.h"

static unsigned ban(struct request *req, bool on)
{
    unsigned status;
    int err;

    if ((status = req_admin_or_reply(req)))
        return status;
    /* Any buyer id: load-test buyers have no users row, and a ban made
     * before a first login still applies to it. */
    err = sale_user_ban(req->sale, req->id, req->auth.user_id, on);
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
