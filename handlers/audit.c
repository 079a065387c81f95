/*
 * audit.c - GET /api/audit (admin): the audit log, newest first, what
 * every admin did (vouchers created and changed, buyers banned, refunds
 * done, logins), by whom and from which address, with keyset pages.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "handlers/endpoints.h"

#define PAGE_MAX 100

static json_t *record_json(const struct store_audit_row *r)
{
    json_t *change = NULL;

    if (r->change[0])
        change = json_loads(r->change, 0, NULL);
    return json_pack(
        "{s:o,s:o,s:o,s:s,s:s,s:{s:s,s:o},s:o}", "id", json_id(r->id), "time",
        json_time(r->time_ms / 1000), "admin",
        r->admin_id ? json_pack("{s:o,s:s}", "id", json_id(r->admin_id),
                                "username", r->admin_name)
                    : json_null(),
        "address", r->addr, "action", r->action, "target", "type",
        r->target_type, "id",
        r->target_id ? json_id(r->target_id) : json_null(), "change",
        change ? change : json_null());
}

unsigned audit_get(struct request *req)
{
    static const char *const types[] = {"voucher", "user", "refund", "admin"};
    const char *type = req_query(req, "targetType");
    struct store_audit_row *rows;
    int64_t limit, target = 0, before = 0;
    bool given, more;
    unsigned code;
    json_t *items;
    size_t n;
    int err;

    if ((code = req_admin_or_reply(req)))
        return code;
    if (!query_int_or_reply(req, "limit", 50, 1, PAGE_MAX, &limit) ||
        !query_int_or_reply(req, "targetId", 0, 1, INT64_MAX, &target))
        return req->status;
    if (type) {
        bool known = false;

        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            known |= strcmp(type, types[i]) == 0;
        if (!known)
            return req_error(req, ERR_BAD_REQUEST,
                             "targetType: must be voucher, user, refund or "
                             "admin");
    } else if (target) {
        return req_error(req, ERR_BAD_REQUEST, "targetId: needs targetType");
    }
    if (!query_cursor_or_reply(req, 1, &before, &given))
        return req->status;
    /* One more than the page: whether another page follows. */
    rows = xcalloc((size_t)limit + 1, sizeof(*rows));
    err = sale_audit_list(req->sale, before, type, target, rows,
                          (size_t)limit + 1, &n);
    if (err) {
        free(rows);
        return req_backend_error(req, err, "audit_list");
    }
    more = n > (size_t)limit;
    if (more)
        n = (size_t)limit;
    items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, record_json(&rows[i]));
    code = req_reply(req, 200,
                     json_pack("{s:o,s:o}", "items", items, "nextCursor",
                               json_cursor(more, 1, &rows[n ? n - 1 : 0].id)));
    free(rows);
    return code;
}
