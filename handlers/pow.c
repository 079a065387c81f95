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

/* The setting's maxnumber, factor times (at most UINT32_MAX). */
static uint32_t max_of(const struct request *req, unsigned factor)
{
    uint64_t m = (uint64_t)req->cfg->pow_maxnumber * (factor ? factor : 1);

    return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

/* A new challenge of the instance's settings, factor times harder, as a
 * JSON object. */
static json_t *challenge_json(const struct request *req, unsigned factor)
{
    char *text = pow_challenge(req->cfg->pow_key, max_of(req, factor),
                               req->cfg->pow_ttl_s, util_now_ms() / 1000);
    json_t *o = json_loads(text, 0, NULL);

    free(text);
    return o;
}

unsigned pow_get(struct request *req)
{
    return req_reply(req, 200, challenge_json(req, 1));
}

/* 403 POW_REQUIRED with why, and a fresh challenge in error.details. */
static bool refuse(struct request *req, const char *why, unsigned factor)
{
    req_error(req, ERR_POW_REQUIRED, why);
    json_object_set_new(json_object_get(req->reply, "error"), "details",
                        challenge_json(req, factor));
    return false;
}

bool pow_or_reply(struct request *req, unsigned factor)
{
    const char *sol;
    char challenge[POW_CHALLENGE_LEN];
    int64_t expires;
    uint32_t issued;
    int err;

    if (req->cfg->pow_maxnumber == 0)
        return true;
    sol = req_header_value(req, "Seckill-PoW");
    if (!sol || !*sol)
        return refuse(req,
                      "a proof of work is required: solve "
                      "error.details and send it in Seckill-PoW",
                      factor);
    err = pow_verify(req->cfg->pow_key, sol, strlen(sol),
                     max_of(req, SALE_POW_FACTOR_MAX), req->cfg->pow_ttl_s,
                     util_now_ms() / 1000, challenge, &expires, &issued);
    if (err == -ETIMEDOUT)
        return refuse(req, "the proof of work has expired: solve error.details",
                      factor);
    if (err)
        return refuse(
            req, "the proof of work is not valid: solve error.details", factor);
    if (issued < max_of(req, factor))
        return refuse(req,
                      "many login codes are being asked for numbers of this "
                      "country: solve the harder proof of work in "
                      "error.details",
                      factor);
    err = sale_pow_spend(req->sale, challenge, expires);
    if (err == -EALREADY)
        return refuse(req,
                      "the proof of work was used already: solve "
                      "error.details",
                      factor);
    if (err) {
        req_backend_error(req, err, "pow_spend");
        return false;
    }
    return true;
}
