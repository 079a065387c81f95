/*
 * sessions.c - the view of refused tokens (see sessions.h): two hash maps
 * under a read-write lock, written by the subscriber thread (reloads and
 * messages) and by sessions_apply(), read by every authenticated request.
 * While both maps are empty (the usual state) a request takes no lock.
 */
#include "sale/sessions.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/i64map.h"
#include "common/redis_keys.h"
#include "common/util.h"
#include "sale/subscriber.h"

/* Bit 32 of an account's value: banned; the low 32 bits: its generation. */
#define BANNED_BIT (1ULL << 32)
/* The subscriber's tick: a failed reload is tried again this often. */
#define TICK_MS 1000

struct sessions {
    pthread_rwlock_t mu;
    struct i64map accounts; /* account key -> generation | BANNED_BIT */
    struct i64map denied;   /* token id -> expiry (epoch s) */
    atomic_bool empty;      /* both maps are empty: nothing to look up */
    /* the subscriber thread's: */
    const struct store_config *sc;
    unsigned resync_s;
    struct store *st;
    int64_t next_reload_ms; /* monotonic; 0: now */
    bool reload_failing;    /* said once per streak */
    char channel[REDIS_PREFIX_MAX + 64];
    struct subscriber *sub;
};

/* A map key for (role, id): ids are below 2^63. */
static uint64_t account_key(unsigned role, int64_t id)
{
    return (uint64_t)id << 1 | (role == TOKEN_ROLE_ADMIN);
}

static void update_empty(struct sessions *v)
{
    atomic_store(&v->empty, v->accounts.len == 0 && v->denied.len == 0);
}

enum session_state sessions_check(struct sessions *v,
                                  const struct token_claims *c)
{
    enum session_state st = SESSION_OK;
    uint64_t val;

    if (!v || atomic_load_explicit(&v->empty, memory_order_acquire))
        return SESSION_OK;
    pthread_rwlock_rdlock(&v->mu);
    if (i64map_get(&v->accounts, account_key(c->role, c->user_id), &val)) {
        if (val & BANNED_BIT)
            st = SESSION_BANNED;
        else if (c->gen < (uint32_t)val)
            st = SESSION_REVOKED;
    }
    if (st == SESSION_OK && i64map_get(&v->denied, c->jti, NULL))
        st = SESSION_REVOKED;
    pthread_rwlock_unlock(&v->mu);
    return st;
}

/* ---- changes, under the write lock ---- */

static void set_gen(struct i64map *m, unsigned role, int64_t id, uint32_t gen)
{
    uint64_t key = account_key(role, id), val = 0;

    i64map_get(m, key, &val);
    if (gen > (uint32_t)val)
        i64map_put(m, key, (val & BANNED_BIT) | gen);
}

static void set_ban(struct i64map *m, int64_t id, bool banned)
{
    uint64_t key = account_key(TOKEN_ROLE_USER, id), val = 0;

    i64map_get(m, key, &val);
    val = banned ? val | BANNED_BIT : val & ~BANNED_BIT;
    if (val)
        i64map_put(m, key, val);
    else
        i64map_del(m, key);
}

void sessions_apply(struct sessions *v, const char *msg)
{
    char kind;
    uint64_t jti;
    long long a, b;
    unsigned role;
    int64_t now = util_now_ms() / 1000;

    if (!v)
        return;
    pthread_rwlock_wrlock(&v->mu);
    if (sscanf(msg, "d %" SCNx64 " %lld", &jti, &a) == 2 && jti) {
        if (a > now)
            i64map_put(&v->denied, jti, (uint64_t)a);
    } else if (sscanf(msg, "g %u %lld %lld", &role, &a, &b) == 3 && a > 0 &&
               b >= 0 && b <= UINT32_MAX) {
        set_gen(&v->accounts, role, a, (uint32_t)b);
    } else if (sscanf(msg, "%c %lld %lld", &kind, &a, &b) == 3 && kind == 'b' &&
               a > 0) {
        set_ban(&v->accounts, a, b != 0);
    } else {
        log_warn("session message ignored", "channel=%s len=%zu", v->channel,
                 strlen(msg));
    }
    update_empty(v);
    pthread_rwlock_unlock(&v->mu);
}

/* ---- reloads, on the subscriber's thread ---- */

static void account_loaded(void *ctx, unsigned role, int64_t id, uint32_t gen,
                           bool banned)
{
    struct i64map *m = ctx;

    if (id > 0)
        i64map_put(m, account_key(role, id),
                   gen | (banned && role == TOKEN_ROLE_USER ? BANNED_BIT : 0));
}

static void denied_loaded(void *ctx, uint64_t jti, int64_t exp_s)
{
    i64map_put(ctx, jti, (uint64_t)exp_s);
}

/* Read the whole state and swap it in; on failure keep the old one and
 * try again at the next tick. */
static void reload(struct sessions *v)
{
    struct i64map accounts = {0}, denied = {0};
    int err;

    if (!v->st)
        v->st = store_new(v->sc);
    err = store_accounts_load(v->st, account_loaded, &accounts);
    if (!err)
        err = store_tokens_denied_load(v->st, util_now_ms() / 1000,
                                       denied_loaded, &denied);
    if (err) {
        i64map_clear(&accounts);
        i64map_clear(&denied);
        if (!v->reload_failing)
            log_warn("sessions not reloaded", "err=%d retry_ms=%d", err,
                     TICK_MS);
        v->reload_failing = true;
        v->next_reload_ms = 0;
        return;
    }
    pthread_rwlock_wrlock(&v->mu);
    i64map_clear(&v->accounts);
    i64map_clear(&v->denied);
    v->accounts = accounts;
    v->denied = denied;
    update_empty(v);
    pthread_rwlock_unlock(&v->mu);
    if (v->reload_failing)
        log_info("sessions reloaded", "accounts=%zu tokens=%zu",
                 v->accounts.len, v->denied.len);
    v->reload_failing = false;
    v->next_reload_ms = util_mono_ms() + (int64_t)v->resync_s * 1000;
}

static void on_subscribed(void *ctx)
{
    reload(ctx);
}

static void on_message(void *ctx, const char *msg, size_t len)
{
    (void)len;
    sessions_apply(ctx, msg);
}

static void on_tick(void *ctx)
{
    struct sessions *v = ctx;

    if (util_mono_ms() >= v->next_reload_ms)
        reload(v);
}

struct sessions *sessions_new(const struct sessions_config *cfg)
{
    struct sessions *v = xcalloc(1, sizeof(*v));

    pthread_rwlock_init(&v->mu, NULL);
    atomic_init(&v->empty, true);
    v->sc = cfg->store;
    v->resync_s = cfg->resync_s ? cfg->resync_s : 30;
    sessions_channel_of(cfg->store, v->channel, sizeof(v->channel));
    v->sub = subscriber_start(&(struct subscriber_config){
        .store = cfg->store,
        .channel = v->channel,
        .what = "sessions",
        .on_subscribed = on_subscribed,
        .on_message = on_message,
        .tick_ms = TICK_MS,
        .on_tick = on_tick,
        .ctx = v,
    });
    return v;
}

void sessions_free(struct sessions *v)
{
    if (!v)
        return;
    subscriber_stop(v->sub);
    store_free(v->st);
    i64map_clear(&v->accounts);
    i64map_clear(&v->denied);
    pthread_rwlock_destroy(&v->mu);
    free(v);
}

void sessions_channel_of(const struct store_config *sc, char *out, size_t n)
{
    redis_key(out, n, "seckill:auth-changed:%u", sc->redis_db);
}

const char *sessions_channel(const struct sessions *v)
{
    return v ? v->channel : "seckill:auth-changed";
}

bool sessions_listening(const struct sessions *v)
{
    return v && subscriber_listening(v->sub);
}
