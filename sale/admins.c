/*
 * admins.c - an admin's login (see sale.h): a password checked against
 * its Argon2id hash, behind a count of failures per name and per client
 * address that refuses before any hash is computed, so that neither a
 * guessing loop nor a flood of wrong passwords gets far.
 */
#include "sale/internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "common/password.h"
#include "common/token.h"
#include "common/util.h"

/* One Argon2id at a time per instance: each takes 64 MiB and a core for
 * about a tenth of a second. */
static atomic_flag hashing = ATOMIC_FLAG_INIT;

static unsigned seconds_up(int64_t ms)
{
    return ms <= 1000 ? 1 : (unsigned)((ms + 999) / 1000);
}

/* Record a login of admin id (ok), or a wrong password for it, in the
 * audit log (on its own: there is no transaction to join). */
static int login_record(struct store *st, const struct sale_actor *who,
                        int64_t id, bool ok, const char *why)
{
    struct sale_actor by = *who;
    struct store_audit audit;
    int err;

    by.admin_id = ok ? id : 0;
    sale__audit_make(&audit, &by, ok ? "admin.login" : "admin.login_failed",
                     "admin", id, why ? json_pack("{s:s}", "why", why) : NULL);
    err = store_audit_add(st, &audit);
    sale__audit_done(&audit);
    return err;
}

int sale_admin_login(struct sale *s, const char *username, const char *password,
                     size_t len, const char *addr, const struct sale_actor *who,
                     struct sale_admin_login *out)
{
    struct store *st = sale__store(s);
    const unsigned window_ms = SALE_ADMIN_FAILS_WINDOW_S * 1000u;
    char hash[STORE_ADMIN_HASH_MAX];
    bool locked = false, disabled = false, banned, ok;
    int64_t retry_ms = 0, id = 0;
    int err;

    memset(out, 0, sizeof(*out));
    err = store_admin_fails_check(st, username, addr, SALE_ADMIN_FAILS_NAME,
                                  SALE_ADMIN_FAILS_ADDR, window_ms, &locked,
                                  &retry_ms);
    if (err)
        return err; /* no count of failures, no check: 503 */
    if (locked) {
        out->outcome = SALE_ADMIN_LOCKED;
        out->retry_s = seconds_up(retry_ms);
        log_warn("admin login refused: too many failures",
                 "username=%s addr=%s retry_s=%u", username, addr,
                 out->retry_s);
        return 0;
    }
    err = store_admin_get(st, username, &id, hash, &disabled);
    if (err && err != -ENOENT)
        return err;
    if (atomic_flag_test_and_set(&hashing)) {
        out->outcome = SALE_ADMIN_BUSY;
        out->retry_s = 1;
        return 0;
    }
    if (err == -ENOENT || disabled) {
        password_dummy_verify(password, len);
        ok = false;
    } else {
        ok = password_verify(hash, password, len);
    }
    atomic_flag_clear(&hashing);
    if (!ok) {
        out->outcome = SALE_ADMIN_WRONG;
        log_warn("admin login failed", "username=%s addr=%s why=%s", username,
                 addr,
                 err == -ENOENT ? "unknown"
                 : disabled     ? "disabled"
                                : "password");
        /* Counted when Redis answers (it just did, for the check). */
        store_admin_fails_add(st, username, addr, window_ms);
        /* An existing admin's failures are worth an operator's look; an
         * unknown name's are only the log's (anyone can make them up). */
        if (err != -ENOENT && login_record(st, who, id, false,
                                           disabled ? "disabled" : "password"))
            log_warn("admin login failure not recorded in the audit log",
                     "username=%s", username);
        return 0;
    }
    err = store_account_get(st, TOKEN_ROLE_ADMIN, id, &out->gen, &banned);
    if (err)
        return err;
    /* No token without its record. */
    err = login_record(st, who, id, true, NULL);
    if (err)
        return err;
    store_admin_fails_clear(st, username);
    out->outcome = SALE_ADMIN_OK;
    out->admin_id = id;
    log_info("admin logged in", "username=%s addr=%s admin=%lld", username,
             addr, (long long)id);
    return 0;
}
