/*
 * site.c - GET /api/config: what the pages need to know of this service's
 * settings, public and from memory: the currency prices are in, whether
 * it runs in dev mode (login codes come back in the answer, and the
 * simulated payment route exists), and whether logging in asks for a
 * proof of work.
 */
#include "handlers/endpoints.h"

unsigned site_config_get(struct request *req)
{
    return req_reply(req, 200,
                     json_pack("{s:s,s:b,s:b}", "currency", req->cfg->currency,
                               "dev", req->cfg->dev, "pow",
                               req->cfg->pow_maxnumber > 0));
}
