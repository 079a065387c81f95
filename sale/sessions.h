/*
 * sessions.h - each instance's view of the tokens it must refuse although
 * they verify: those of an account logged out everywhere (its token
 * generation went up), single tokens logged out (their ids, until they
 * expire) and banned buyers. Requests are checked from memory
 * (sessions_check()); the view is loaded from MySQL and Redis whenever
 * its subscriber (re)subscribes and every resync_s, and every change is
 * published on the channel seckill:auth-changed:<redis db>, so that each
 * instance applies it within a message's delay.
 *
 * Staleness: while an instance's subscriber is away (Redis down, a
 * failover), changes made elsewhere reach it only when it subscribes
 * again; meanwhile it keeps the view it has (fails open: a logout cannot
 * be made by an instance that cannot reach Redis either, see sale.h).
 *
 * Messages (each carries absolute state, so that applying one twice, or
 * one already loaded, changes nothing):
 *   "d <token id, 16 hex> <expiry s>"  that token is logged out
 *   "g <role> <id> <generation>"       tokens of an older generation are
 *   "b <user id> <1|0>"                the buyer is banned, or not
 */
#ifndef SECKILL_SALE_SESSIONS_H
#define SECKILL_SALE_SESSIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/token.h"
#include "store/store.h"

struct sessions_config {
    const struct store_config *store; /* outlives the view */
    unsigned resync_s;                /* full reload at least this often */
};

enum session_state {
    SESSION_OK,
    SESSION_REVOKED, /* logged out */
    SESSION_BANNED,  /* a banned buyer's */
};

struct sessions;

/* The view of cfg and its subscriber thread. Never returns NULL. */
struct sessions *sessions_new(const struct sessions_config *cfg);
/* Stop the thread and free v. Accepts NULL. */
void sessions_free(struct sessions *v);

/* What the view says of a verified token's claims. From memory; never
 * waits for more than other readers. NULL view: SESSION_OK. */
enum session_state sessions_check(struct sessions *v,
                                  const struct token_claims *c);

/* The channel changes are published on (NULL view: a name nobody
 * listens to). */
const char *sessions_channel(const struct sessions *v);

/* The channel of the instances that use the Redis of sc, into out (48
 * bytes), for a change made by another program (`seckilld users
 * normalize`). */
void sessions_channel_of(const struct store_config *sc, char *out, size_t n);

/* Apply a message (as above) to this instance's view at once, as its
 * subscriber will when it arrives. */
void sessions_apply(struct sessions *v, const char *msg);

/* True while the subscriber listens (changes arrive). */
bool sessions_listening(const struct sessions *v);

#endif
