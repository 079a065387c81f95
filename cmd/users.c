/*
 * users.c - `seckilld users normalize` (users.h): every user whose phone
 * is not in E.164 form, in pages by id, gets its number in that form
 * (common/phone.h, with SECKILL_PHONE_REGION for national numbers). When
 * another row already has that number the two are one person: the older
 * row keeps the phone, the younger is marked merged into it and its
 * tokens are logged out; their orders stay where they are. A phone that
 * does not parse is left alone and counted. Running it again changes
 * nothing.
 */
#include "cmd/users.h"

#include <mysql.h>
#include <stdio.h>

#include "common/phone.h"
#include "common/token.h"
#include "common/util.h"
#include "sale/sessions.h"
#include "store/store.h"

#define PAGE 1000

/* Running instances refuse the merged row's tokens at once (they would
 * at their next reload anyway). */
static void tell_logged_out(struct store *st, const struct store_config *sc,
                            int64_t id)
{
    char channel[48], msg[64];
    uint32_t gen;
    bool banned;

    if (store_account_get(st, TOKEN_ROLE_USER, id, &gen, &banned) != 0)
        return;
    sessions_channel_of(sc, channel, sizeof(channel));
    snprintf(msg, sizeof(msg), "g %d %lld %u", TOKEN_ROLE_USER, (long long)id,
             gen);
    if (store_publish(st, channel, msg) != 0)
        log_warn("merged user not told to the instances", "user=%lld",
                 (long long)id);
}

int users_normalize(const struct config *cfg)
{
    static struct store_legacy_user page[PAGE];
    const char *region = cfg->http.phone_region ? cfg->http.phone_region : "CN";
    long changed = 0, merged = 0, unparseable = 0;
    int64_t after = 0;
    struct store *st;
    size_t n;
    int err = 0;

    if (mysql_library_init(0, NULL, NULL)) {
        fprintf(stderr, "seckilld: users normalize: mysql library init "
                        "failed\n");
        return 1;
    }
    st = store_new(&cfg->http.store);
    do {
        err = store_users_legacy(st, after, page, PAGE, &n);
        for (size_t i = 0; !err && i < n; i++) {
            char e164[PHONE_E164_MAX];
            const char *why;
            enum store_phone_move how;
            int64_t kept, gone;

            after = page[i].id;
            if (phone_normalize(page[i].phone, region, e164, &why) != 0) {
                /* Only the id: a phone number is personal data. */
                log_warn("phone left as it is", "user=%lld why=\"%s\"",
                         (long long)page[i].id, why);
                unparseable++;
                continue;
            }
            if (cfg->users_dry_run) {
                changed++;
                continue;
            }
            err =
                store_user_phone_move(st, page[i].id, e164, &how, &kept, &gone);
            if (err)
                break;
            if (how == STORE_PHONE_MERGED) {
                merged++;
                log_info("users merged", "user=%lld kept=%lld", (long long)gone,
                         (long long)kept);
                tell_logged_out(st, &cfg->http.store, gone);
            } else {
                changed++;
            }
        }
    } while (!err && n == PAGE);
    store_free(st);
    mysql_library_end();
    printf("%schanged=%ld merged=%ld unparseable=%ld\n",
           cfg->users_dry_run ? "dry run: " : "", changed, merged, unparseable);
    if (err) {
        fprintf(stderr, "seckilld: users normalize: MySQL failed (%d)\n", err);
        return 1;
    }
    return 0;
}
