/*
 * pow.c - proof of work (common/pow.h): GET /api/pow hands out a signed
 * challenge, from memory, to anyone; pow_or_reply() checks the solution
 * a request carries in Seckill-PoW, and spends it (once, on every
 * instance) before a login code is sent.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/pow.h"
#include "common/util.h"
#include "handlers/endpoints.h"

/* A new challenge of the instance's settings, as a JSON object. */
static json_t *challenge_json(const struct request *req)
{
    char *text = pow_challenge(req->cfg->pow_key, req->cfg->pow_maxnumber,
                               req->cfg->pow_ttl_s, util_now_ms() / 1000);
    json_t *o = json_loads(text, 0, NULL);

    free(text);
    return o;
}

unsigned pow_get(struct request *req)
{
    return req_reply(req, 200, challenge_json(req));
}

/* 403 POW_REQUIRED with why, and a fresh challenge in error.details. */
static bool refuse(struct request *req, const char *why)
{
    req_error(req, ERR_POW_REQUIRED, why);
    json_object_set_new(json_object_get(req->reply, "error"), "details",
                        challenge_json(req));
    return false;
}

bool pow_or_reply(struct request *req)
{
    const char *sol;
    char challenge[POW_CHALLENGE_LEN];
    int64_t expires;
    int err;

    if (req->cfg->pow_maxnumber == 0)
        return true;
    sol = req_header_value(req, "Seckill-PoW");
    if (!sol || !*sol)
        return refuse(req, "a proof of work is required: solve "
                           "error.details and send it in Seckill-PoW");
    err = pow_verify(req->cfg->pow_key, sol, strlen(sol),
                     req->cfg->pow_maxnumber, req->cfg->pow_ttl_s,
                     util_now_ms() / 1000, challenge, &expires);
    if (err == -ETIMEDOUT)
        return refuse(req, "the proof of work has expired: solve "
                           "error.details");
    if (err)
        return refuse(req, "the proof of work is not valid: solve "
                           "error.details");
    err = sale_pow_spend(req->sale, challenge, expires);
    if (err == -EALREADY)
        return refuse(req, "the proof of work was used already: solve "
                           "error.details");
    if (err) {
        req_backend_error(req, err, "pow_spend");
        return false;
    }
    return true;
}
