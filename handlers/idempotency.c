/*
 * idempotency.c - the Idempotency-Key of an admin's change (request.h),
 * as payment APIs take it: the key, read and hashed with its request
 * before the handler runs; after it, the answer to a retry of a change
 * that committed (the first answer again, with Idempotent-Replayed:
 * true), to a key of a request still running (409), or of another
 * request (422); and the first answer of a change kept for its retries.
 * The key itself is written by the change, in its own transaction
 * (store_idem, through the sale layer's audit record).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <microhttpd.h>
#include <sodium.h>

#include "common/util.h"
#include "handlers/endpoints.h"

/* A change's answer not recorded this long after it committed was lost
 * with its instance (before: it is still being made). */
#define IDEM_ANSWER_WAIT_MS 10000

static const char *method_name(enum http_method m)
{
    switch (m) {
    case HTTP_POST:
        return "POST";
    case HTTP_PATCH:
        return "PATCH";
    case HTTP_DELETE:
        return "DELETE";
    default:
        return "GET";
    }
}

/* MHD_KeyValueIterator: count the Idempotency-Key headers into *cls. */
static enum MHD_Result count_keys(void *cls, enum MHD_ValueKind kind,
                                  const char *name, const char *value)
{
    (void)kind;
    (void)value;
    if (strcasecmp(name, "Idempotency-Key") == 0)
        (*(unsigned *)cls)++;
    return MHD_YES;
}

void idem_parse(struct request *req)
{
    const char *key = req_header_value(req, "Idempotency-Key");
    const char *m = method_name(req->method);
    crypto_hash_sha256_state h;
    unsigned keys = 0;
    size_t len;

    if (!key || (req->method != HTTP_POST && req->method != HTTP_PATCH &&
                 req->method != HTTP_DELETE))
        return;
    /* Two keys: which one the client meant is a guess. */
    if (req->conn)
        MHD_get_connection_values(req->conn, MHD_HEADER_KIND, count_keys,
                                  &keys);
    if (keys > 1) {
        req->idem_bad = true;
        return;
    }
    len = strlen(key);
    for (size_t i = 0; i < len; i++)
        if (key[i] < 0x21 || key[i] > 0x7e)
            len = 0;
    if (len == 0 || len > STORE_IDEM_KEY_MAX) {
        req->idem_bad = true;
        return;
    }
    /* The request it names: method, path and body as sent. */
    crypto_hash_sha256_init(&h);
    crypto_hash_sha256_update(&h, (const unsigned char *)m, strlen(m) + 1);
    crypto_hash_sha256_update(&h, (const unsigned char *)req->path,
                              strlen(req->path) + 1);
    if (req->body)
        crypto_hash_sha256_update(&h, (const unsigned char *)req->body,
                                  req->body_len);
    crypto_hash_sha256_final(&h, req->idem.hash);
    req->idem.key = key;
    req->has_idem = true;
}

/* The first answer is gone (its instance died between the commit and
 * recording it): answer from what the change made, as it is now. */
static void answer_from_target(struct request *req)
{
    const struct store_idem *k = &req->idem;

    if (strcmp(k->action, "voucher.delete") == 0 ||
        strcmp(k->target_type, "user") == 0) {
        req_reply_raw(req, 204, NULL, NULL, 0);
    } else if (strcmp(k->target_type, "voucher") == 0) {
        struct store_voucher *v = xmalloc(sizeof(*v));
        int err = sale_voucher_get_fresh(req->sale, k->target_id, v);

        if (err == -ENOENT)
            req_error(req, ERR_NOT_FOUND, "no voucher with this id");
        else if (err)
            req_backend_error(req, err, "idempotent_replay");
        else
            req_reply(req, strcmp(k->action, "voucher.create") == 0 ? 201 : 200,
                      voucher_json(req, v));
        free(v);
    } else if (strcmp(k->target_type, "refund") == 0) {
        /* Done is done: asked again without the key, it changes nothing
         * and answers the refund. */
        struct sale_actor who = {.admin_id = k->admin_id};
        struct store_refund r;
        int err = sale_refund_done(req->sale, k->target_id, &who, &r);

        if (err)
            req_backend_error(req, err, "idempotent_replay");
        else
            req_reply(req, 200, refund_json(&r));
    } else {
        req_error(req, ERR_INTERNAL, NULL);
    }
}

/* The answer to a change whose key was there: nothing was changed. */
static void replay(struct request *req)
{
    const struct store_idem *k = &req->idem;

    if (k->busy || (k->same && !k->status && k->age_ms < IDEM_ANSWER_WAIT_MS)) {
        req->retry_after = 1;
        req_error(req, ERR_IDEMPOTENCY_KEY_IN_USE, NULL);
        return;
    }
    if (!k->same) {
        req_error(req, ERR_IDEMPOTENCY_KEY_REUSED,
                  "this Idempotency-Key was used for another request: use a "
                  "new key for a new request");
        return;
    }
    req_header_add(req, "Idempotent-Replayed", "true");
    if (!k->status) {
        answer_from_target(req);
        return;
    }
    if (!k->answer || !k->answer[0]) {
        req_reply_raw(req, k->status, NULL, NULL, 0);
        return;
    }
    json_decref(req->reply);
    req->reply = NULL;
    req->raw = false;
    free(req->text);
    req->text = xasprintf("%s\n", k->answer);
    req->text_len = strlen(req->text);
    req->text_type = "application/json";
    req->status = k->status;
}

void idem_finish(struct request *req)
{
    struct store_idem *k = &req->idem;
    char *body = NULL;

    if (!req->has_idem)
        return;
    if (k->found || k->busy) {
        replay(req);
        return;
    }
    if (!k->recorded || req->status < 200 || req->status > 299)
        return;
    if (req->reply && !req->raw)
        body = json_dumps(req->reply, JSON_COMPACT);
    sale_idem_answer(req->sale, k, req->status, body ? body : "");
    free(body);
}
