/*
 * route.c - the route table and path matching. A path matches a pattern
 * segment by segment; "{id}" matches any segment and must hold a positive
 * integer, else the request is a 400 rather than a 404; "{file}" matches
 * any non-empty segment.
 */
#include "handlers/route.h"

#include <string.h>

#include "common/metrics.h"
#include "common/util.h"

#define HERE ROUTE_RUN_HERE
#define POOL ROUTE_RUN_POOL
#define LIMITED ROUTE_RUN_POOL_LIMITED

/* The last field: where the handler runs (route.h). From memory on the
 * HTTP thread: the probe, the counters, the pages' files (a page load must
 * not eat a client's API budget), and the purchase's first step (a
 * sold-out voucher must not cost a Redis round trip). */
static const struct route routes[] = {
    {"/healthz", health_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    {"/readyz", ready_get, NULL, "GET, OPTIONS", POOL, NULL, NULL},
    {"/metrics", metrics_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    /* What the pages need to know of the settings: from memory. */
    {"/api/config", site_config_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    /* A proof-of-work challenge, signed: from memory. */
    {"/api/pow", pow_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    {"/api/auth/code", NULL, auth_code_post, "POST, OPTIONS", LIMITED, NULL,
     NULL},
    {"/api/auth/login", NULL, auth_login_post, "POST, OPTIONS", LIMITED, NULL,
     NULL},
    {"/api/auth/logout", NULL, auth_logout_post, "POST, OPTIONS", LIMITED, NULL,
     NULL},
    {"/api/vouchers", vouchers_get, vouchers_post, "GET, POST, OPTIONS",
     LIMITED, NULL, NULL},
    /* An admin edits a voucher, or deletes it, before its sale begins
     * (controls.c). */
    {"/api/vouchers/{id}", voucher_get, NULL, "GET, PATCH, DELETE, OPTIONS",
     LIMITED, voucher_delete, voucher_patch},
    {"/api/vouchers/{id}/seckill", NULL, voucher_seckill_post, "POST, OPTIONS",
     ROUTE_RUN_HERE_WITH_TOKEN, NULL, NULL},
    /* A queue sale's waiting room: join (POST), the place (GET). */
    {"/api/vouchers/{id}/queue", voucher_queue_get, voucher_queue_post,
     "GET, POST, OPTIONS", LIMITED, NULL, NULL},
    {"/api/vouchers/{id}/stats", voucher_stats_get, NULL, "GET, OPTIONS",
     LIMITED, NULL, NULL},
    /* The operator's controls of a sale (admin, controls.c). */
    {"/api/vouchers/{id}/pause", NULL, voucher_pause_post, "POST, OPTIONS",
     LIMITED, NULL, NULL},
    {"/api/vouchers/{id}/resume", NULL, voucher_resume_post, "POST, OPTIONS",
     LIMITED, NULL, NULL},
    {"/api/vouchers/{id}/stop", NULL, voucher_stop_post, "POST, OPTIONS",
     LIMITED, NULL, NULL},
    {"/api/vouchers/{id}/restock", NULL, voucher_restock_post, "POST, OPTIONS",
     LIMITED, NULL, NULL},
    /* A sale's orders (admin): pages, or all of them as CSV. */
    {"/api/vouchers/{id}/orders", voucher_orders_get, NULL, "GET, OPTIONS",
     LIMITED, NULL, NULL},
    /* The sales on now and soon, from the instance's snapshot. */
    {"/api/sales", sales_get, NULL, "GET, OPTIONS", LIMITED, NULL, NULL},
    {"/api/orders", orders_get, NULL, "GET, OPTIONS", LIMITED, NULL, NULL},
    {"/api/orders/{id}", order_get, NULL, "GET, OPTIONS", LIMITED, NULL, NULL},
    {"/api/orders/{id}/cancel", NULL, order_cancel_post, "POST, OPTIONS",
     LIMITED, NULL, NULL},
    {"/api/orders/{id}/pay", NULL, order_pay_post, "POST, OPTIONS", LIMITED,
     NULL, NULL},
    {"/api/payments/notify", NULL, payment_notify_post, "POST, OPTIONS",
     LIMITED, NULL, NULL},
    /* Payments to give back (admin). */
    {"/api/refunds", refunds_get, NULL, "GET, OPTIONS", LIMITED, NULL, NULL},
    {"/api/refunds/{id}/done", NULL, refund_done_post, "POST, OPTIONS", LIMITED,
     NULL, NULL},
    /* What admins did (admin). */
    {"/api/audit", audit_get, NULL, "GET, OPTIONS", LIMITED, NULL, NULL},
    {"/api/admin/login", NULL, admin_login_post, "POST, OPTIONS", LIMITED, NULL,
     NULL},
    {"/api/admin/users/{id}/ban", NULL, admin_ban_post, "POST, DELETE, OPTIONS",
     LIMITED, admin_ban_delete, NULL},
    /* The counters for the admin page: a token check, from memory. */
    {"/api/admin/metrics", admin_metrics_get, NULL, "GET, OPTIONS", HERE, NULL,
     NULL},
    /* The buyer's and the admin's pages (web/), their files and the API
     * description, served from the binary. */
    {"/", web_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    {"/admin", web_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    {"/static/{file}", web_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
    {"/openapi.json", web_get, NULL, "GET, OPTIONS", HERE, NULL, NULL},
};

/* Match path against pattern; 1 = match, 0 = no, -1 = match but bad id. */
static int match(const char *pattern, const char *path, int64_t *id)
{
    const char *p = pattern, *s = path;
    int bad = 0;

    while (*p && *s) {
        if (strncmp(p, "{id}", 4) == 0) {
            size_t n = strcspn(s, "/");
            if (n == 0)
                return 0;
            if (util_parse_id(s, n, id))
                bad = 1;
            p += 4;
            s += n;
        } else if (strncmp(p, "{file}", 6) == 0) {
            size_t n = strcspn(s, "/");
            if (n == 0)
                return 0;
            p += 6;
            s += n;
        } else if (*p == *s) {
            p++;
            s++;
        } else {
            return 0;
        }
    }
    if (*p || *s)
        return 0;
    return bad ? -1 : 1;
}

enum route_result route_match(const char *path, const struct route **route,
                              int64_t *id)
{
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        int64_t v = 0;
        int m = match(routes[i].pattern, path, &v);
        if (m == 0)
            continue;
        *route = &routes[i];
        *id = v;
        return m > 0 ? ROUTE_OK : ROUTE_BAD_ID;
    }
    return ROUTE_NOT_FOUND;
}

/* Each route and "unmatched" need their own slot in the metrics. */
_Static_assert(sizeof(routes) / sizeof(routes[0]) < METRICS_ROUTES_MAX,
               "raise METRICS_ROUTES_MAX in common/metrics.h");

unsigned route_count(void)
{
    return sizeof(routes) / sizeof(routes[0]);
}

unsigned route_index(const struct route *r)
{
    return (unsigned)(r - routes);
}

const char *route_pattern(unsigned i)
{
    return i < route_count() ? routes[i].pattern : NULL;
}
