/*
 * audit.c - what the audit log records of each admin action (see sale.h):
 * a record made from the actor and a JSON object of the change, handed
 * to the store, which writes it in the change's own transaction, with
 * the request's Idempotency-Key when it has one, and that key's first
 * answer.
 */
#include "sale/internal.h"

#include <jansson.h>
#include <stdlib.h>

#include "common/util.h"

void sale__audit_make(struct store_audit *a, const struct sale_actor *who,
                      const char *action, const char *target_type,
                      int64_t target_id, json_t *change)
{
    a->admin_id = who ? who->admin_id : 0;
    a->addr = who ? who->addr : "";
    a->idem = who ? who->idem : NULL;
    a->action = action;
    a->target_type = target_type;
    a->target_id = target_id;
    /* Compact, keys in the order given: what the admin page shows. */
    a->change =
        change ? json_dumps(change, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(change);
}

void sale_idem_answer(struct sale *s, const struct store_idem *idem,
                      unsigned status, const char *body)
{
    int err = store_idem_answer(sale__store(s), idem, status, body);

    if (err)
        log_warn("idempotency key's answer not recorded: a retry is "
                 "answered from what the change made",
                 "err=%d", err);
}

void sale_idem_release(struct store_idem *idem)
{
    store_idem_release(idem);
}

void sale__audit_done(struct store_audit *a)
{
    free((char *)a->change);
    a->change = NULL;
}

json_t *sale__audit_time(int64_t epoch_s)
{
    char buf[UTIL_TIME_LEN];
    return json_string(util_time_format(epoch_s, buf));
}

int sale_audit_list(struct sale *s, int64_t before, const char *target_type,
                    int64_t target_id, struct store_audit_row *out, size_t max,
                    size_t *n)
{
    return store_audit_list(sale__store(s), before, target_type, target_id, out,
                            max, n);
}
