/*
 * store.h - data access for one thread: a MySQL connection with its
 * prepared statements and a Redis connection, both opened lazily and
 * reopened after a failure. A struct store is never shared between threads.
 *
 * Every function returns 0 or a negative errno:
 *   -ENOENT     the row asked for does not exist (lookups only);
 *   -ENOTCONN   MySQL or Redis is unreachable or the connection broke before
 *               anything was committed (retrying later is safe);
 *   -EINPROGRESS the COMMIT was sent but its outcome is unknown (the
 *               connection broke while waiting for the answer);
 *   -EIO        the server answered with an unexpected error (logged).
 * Business outcomes of the purchase are enum store_purchase, never errno.
 */
#ifndef SECKILL_STORE_H
#define SECKILL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

struct store_config {
    const char *mysql_host;
    unsigned mysql_port;
    const char *mysql_user;
    const char *mysql_pass;
    const char *mysql_db;
    const char *redis_host;
    unsigned redis_port;
    const char *redis_user; /* NULL: AUTH with password only */
    const char *redis_pass; /* NULL: no AUTH */
    unsigned redis_db;
    /* Not NULL: redis_host is the master's name and its address is asked
     * of these sentinels at each connect (common/redis.h). */
    struct redis_sentinel *redis_sentinel;
    /* Not 0: the Redis is a Redis Cluster, reached first through these
     * seed nodes (redis_cluster_seeds[0..n), common/redis_cluster.h; the
     * one-server redis_* fields above are then unused). */
    const struct redis_server *redis_cluster_seeds;
    int redis_cluster_nseeds;
    unsigned connect_timeout_ms;
    unsigned io_timeout_ms;
    /* The purchase (README, Configuration; 0 reads as the default): */
    unsigned batch_max;       /* purchases per transaction; 1: no merging */
    unsigned batch_linger_us; /* a batch waits this long for more */
    unsigned stock_segments;  /* new vouchers' stock rows; 1: one row */
    unsigned pay_timeout_s;   /* a new order's time to pay; 0: default */
    /* A MySQL read replica for voucher reads and lists (NULL: none): its
     * own config, whose mysql_* name the replica (see store_voucher_get()
     * and store_replica_monitor_start()). */
    const struct store_config *replica;
    unsigned replica_max_lag_s; /* a replica further behind is skipped */
    bool read_only; /* this config's sessions are READ ONLY (a replica) */
    /*
     * The MySQL primaries sales are sharded over (nshards > 1), or none
     * (nshards 0 or 1: this config's primary holds everything). shards[i]
     * is shard i's config (its primary and its replica; the rest as this
     * one's) for i >= 1; shard 0 is this config itself, and holds users,
     * logins, admins, bans, the audit log and refunds besides its sales.
     * Only the config a store is made with carries the list.
     */
    const struct store_config *const *shards;
    unsigned nshards;
};

/* The most shards (cfg->nshards): the shard bits of an id
 * (idgen/idgen.h). */
#define STORE_SHARDS_MAX 64

/* Bounds of the purchase settings above. */
#define STORE_BATCH_MAX 256
#define STORE_BATCH_DEFAULT 64
#define STORE_BATCH_LINGER_MAX_US 10000
#define STORE_SEGMENTS_MAX 64
/* The most time one purchase may take from its arrival to its answer. */
#define STORE_PURCHASE_BUDGET_MS 10000
/* A new order's time to pay, by default, and the bounds of the setting. */
#define STORE_PAY_TIMEOUT_DEFAULT_S 900
#define STORE_PAY_TIMEOUT_MAX_S 86400

struct store;

/*
 * Create a store for the calling thread. No I/O happens here; connections
 * open on first use. cfg and its strings must outlive the store. Never
 * returns NULL.
 */
struct store *store_new(const struct store_config *cfg);
/* Close both connections and free the store. Accepts NULL. */
void store_free(struct store *st);

/*
 * This thread's Redis: one server's connection or a cluster client
 * (common/redis_link.h), for redis_link_command(), redis_link_script()
 * and redis_link_pipeline(), which route each call by its key's slot on a
 * cluster. NULL when one server is unreachable (a cluster's client is
 * always there; its calls fail instead). Borrowed: valid until the next
 * store call; never free it, never share it. After an error on it the
 * next call reconnects.
 */
struct redis_link;
struct redis_link *store_redis_link(struct store *st);

/* True when cfg's Redis is a Redis Cluster. */
bool store_redis_is_cluster(const struct store_config *cfg);

/*
 * The calls of redis_link.h on this thread's Redis (store_redis_link()),
 * each logging a failure once: a command (key: the key whose slot it
 * goes to on a cluster, NULL for any node), a script (its first key's
 * slot), a batch. Replies are the caller's to free (freeReplyObject());
 * NULL with *err -ENOTCONN when Redis is unreachable, else as
 * redis_link_command().
 */
struct redis_script;
struct redis_cluster_cmd;
redisReply *store_redis_command(struct store *st, const char *key, int argc,
                                const char **argv, const size_t *lens,
                                int *err);
redisReply *store_redis_script(struct store *st, struct redis_script *s,
                               int nkeys, int argc, const char **argv,
                               const size_t *lens, int *err);
int store_redis_pipeline(struct store *st, const struct redis_cluster_cmd *cmds,
                         size_t n, redisReply **replies);

/*
 * On a cluster, CLUSTER INFO of every primary (for /readyz): "ok" when
 * each says cluster_state:ok, "fail" when one does not, "unreachable"
 * when one (or the map) cannot be had. NULL on one server.
 */
const char *store_redis_cluster_check(struct store *st);

/* The Redis server of cfg, for connections of their own. */
struct redis_server;
void store_redis_server(const struct store_config *cfg,
                        struct redis_server *out);

/* ---- shards (shard.c) ----
 *
 * With several primaries (cfg->nshards > 1) a voucher, its stock and its
 * orders live on one shard, named by the voucher's id and by each of its
 * orders' ids (idgen/idgen.h, "Sharded ids"); a store call about a voucher
 * or an order runs on that shard, on the thread's connection to it (made
 * on first use, one per shard per thread), and lists that span vouchers
 * or a user's orders read every shard and merge. A new voucher goes to
 * the shards in turn (store_voucher_insert()).
 */

/* How many shards the store's config names (1 without sharding). */
unsigned store_shard_count(const struct store *st);

/*
 * The shard a voucher or order id lives on: its shard bits when it has
 * the sharded layout and that shard is configured, else 0 (ids from
 * before sharding, and ids of a shard that is not configured, which are
 * then looked up on shard 0 and not found). Always 0 with one shard.
 */
unsigned store_shard_of(const struct store *st, int64_t id);

/*
 * A new order's id for a worker id of idgen_next(): with several shards
 * the sharded id of voucher_id's shard (idgen_shard_compose()), with one
 * *id unchanged. 0, or as idgen_shard_compose().
 */
int store_order_id_place(const struct store *st, int64_t voucher_id,
                         int64_t *id);

/*
 * Refunds and the audit log are shard 0's. A refund or an audit record
 * that a transaction on another shard decides on is written into that
 * shard's outbox in the transaction (so it commits or rolls back with the
 * change it belongs to) and moved to shard 0 right after the commit. What
 * a crash or an unreachable shard 0 left there, store_outbox_move() moves:
 * up to a batch of shard's oldest rows, each copied to shard 0 (a second
 * copy of a row changes nothing) and then deleted; *moved counts them.
 * 0, or the first error (the rest stay for the next call). Shard 0 and a
 * store of one shard have nothing to move.
 */
int store_outbox_move(struct store *st, unsigned shard, size_t *moved);

/* Check both backends with a round trip each (for /readyz). */
void store_ping(struct store *st, bool *mysql_ok, bool *redis_ok);

/* ---- the read replica ---- */

/*
 * The replica monitor: one thread with its own connection to the replica
 * of cfg (cfg->replica), and one for each other shard's that has one
 * (cfg->shards[i]->replica), which reads the replica's lag every second
 * (SHOW REPLICA STATUS, Seconds_Behind_Master; SHOW SLAVE STATUS on
 * servers that predate it) and decides for the whole process whether
 * voucher reads of its shard may go there: only while it answers, replicates
 * (both replication threads running) and lags no more than
 * cfg->replica_max_lag_s. Until its first look, and whenever it cannot
 * tell, reads go to the primary. Its MySQL user needs the REPLICA MONITOR
 * privilege (SLAVE MONITOR; REPLICATION CLIENT on MySQL) besides SELECT.
 *
 * Start it once per process after cfg is final; NULL when no shard of cfg
 * has a replica. Stop accepts NULL.
 */
struct store_replica_monitor;
struct store_replica_monitor *
store_replica_monitor_start(const struct store_config *cfg);
void store_replica_monitor_stop(struct store_replica_monitor *m);

/* What the monitor knows of one shard's replica, for /metrics and
 * /readyz. */
struct store_replica_state {
    unsigned shard;  /* whose replica: 0 without sharded sales */
    bool usable;     /* voucher reads go to the replica */
    int64_t lag_s;   /* its last lag; -1: unknown (down, not replicating) */
    const char *why; /* "ok", "lagging", "down", "not replicating", ... */
};

/* The monitor's last findings, one per shard that has a replica, in
 * shard order, into out (at most max): how many. Lock-free; no I/O. */
size_t store_replica_states(struct store_replica_state *out, size_t max);

/* ---- the schema and its migrations (migrate.c) ---- */

/*
 * One schema migration, sql/migrations/NNNN-name.sql compiled in by
 * scripts/embed-sql.sh: version NNNN, name the file's name without
 * ".sql", sql its text (NUL-terminated, len bytes), checksum the SHA-256
 * of the file as 64 lower-case hex digits.
 */
struct store_migration {
    unsigned version;
    const char *name;
    const char *sql;
    size_t len;
    const char *checksum;
};

/* Every migration, by version: store_migrations[i].version == i + 1. */
extern const struct store_migration store_migrations[];
extern const size_t store_migration_count;

/*
 * The highest version recorded in cfg's database (its schema_version
 * table), on a connection of its own that logs nothing. Returns 0 with
 * *version set (0: the table is empty); -ENOENT when the database has no
 * schema_version table (never migrated); -ENOTCONN unreachable; -EIO
 * another error. why (whylen bytes) says what failed.
 */
int store_schema_version(const struct store_config *cfg, unsigned *version,
                         char *why, size_t whylen);

/* What store_migrate() tells as it goes. */
struct store_migrate_report {
    void *ctx;
    /* m was applied and recorded, in ms milliseconds. */
    void (*applied)(void *ctx, const struct store_migration *m, int64_t ms);
    /* Filled in by store_migrate(): */
    unsigned applied_count; /* migrations applied by this run */
    unsigned version;       /* the database's highest version at the end */
    const struct store_migration *failed; /* the one that failed, or NULL */
    char why[512]; /* on failure: what failed (the server's error) */
};

/*
 * Bring cfg's database up to the newest migration: under the server's
 * named lock seckill-migrate:<database> (GET_LOCK, waiting lock_wait_s
 * seconds for another run to finish), create schema_version if missing,
 * then apply each migration it does not record, in order, and record it
 * (version, name, checksum). A migration runs statement by statement in
 * one transaction with its record; MariaDB and MySQL commit DDL at once,
 * so a run cut short may leave part of a file applied without its record:
 * every file is idempotent (IF [NOT] EXISTS, updates of what is still
 * NULL) and the next run applies it again. A database made before
 * schema_version existed is adopted that way: every file runs and finds
 * its change in place.
 *
 * Returns 0; -EBADMSG when a recorded checksum differs from the compiled
 * file's (nothing applied; r->failed names it); -ETIMEDOUT when the lock
 * stayed taken; -ENOTCONN when the server is unreachable; -EIO when a
 * statement failed (r->failed, r->why: the server's error). Logs nothing.
 */
int store_migrate(const struct store_config *cfg, unsigned lock_wait_s,
                  struct store_migrate_report *r);

/* ---- rate limits (ratelimit.c) ---- */

/* A token bucket to charge: per_s (> 0) tokens a second, at most burst
 * (>= 1) saved up, kept in Redis under key. */
struct store_rate_bucket {
    const char *key;
    double per_s;
    uint32_t burst;
};

#define STORE_RATE_BUCKETS_MAX 2

/*
 * Take one token from each bucket of b[0..n) (n <= STORE_RATE_BUCKETS_MAX)
 * or from none: one script per bucket, in order, on Redis' clock
 * (instances with skewed clocks share one view of each bucket); a bucket
 * that refuses gets the earlier ones' tokens given back. *retry_ms is 0
 * when they were taken, else the milliseconds until a token is due in the
 * bucket that refused (nothing was kept). Returns 0, or -errno when Redis
 * failed or answered an error (what earlier buckets took stays taken),
 * with why (why_len bytes) saying what failed: the caller decides whether
 * to go on without a limit.
 */
int store_rate_take(struct store *st, const struct store_rate_bucket *b,
                    size_t n, int64_t *retry_ms, char *why, size_t why_len);

/* ---- users ---- */

/*
 * Return the id of the user with this phone, creating the user on first
 * login, in one statement.
 */
int store_user_login(struct store *st, const char *phone, int64_t *user_id);

/* ---- phones stored before E.164 (users.c) ---- */

#define STORE_PHONE_LEN 21

struct store_legacy_user {
    int64_t id;
    char phone[STORE_PHONE_LEN];
};

/* Up to max users with id > after_id whose phone is not in E.164 form,
 * by id, into out; *n how many. */
int store_users_legacy(struct store *st, int64_t after_id,
                       struct store_legacy_user *out, size_t max, size_t *n);

/* Whether any user's phone is not in E.164 form: 1 yes, 0 no, -errno. */
int store_users_legacy_any(struct store *st);

enum store_phone_move {
    STORE_PHONE_MOVED,  /* the row has its E.164 phone now */
    STORE_PHONE_MERGED, /* another row had it: the younger of the two gave
                         * up its phone (merged_into the older, its tokens
                         * logged out); *kept is the older's id */
};

/*
 * Give user id (a phone in an older form) the phone e164, in one
 * transaction: when no row has it, this one takes it (its old form kept
 * in phone_raw); when one has, the older of the two keeps it (*kept) and
 * the other is merged into it (*merged). Orders are not moved. 0 with
 * *outcome, or -errno.
 */
int store_user_phone_move(struct store *st, int64_t id, const char *e164,
                          enum store_phone_move *outcome, int64_t *kept,
                          int64_t *merged);

/*
 * Login codes, in Redis under the phone's hash tag (one slot per phone):
 *   login:{p:PHONE}:codes   every live code, scored by its expiry (ms);
 *                           a new code replaces none
 *   login:{p:PHONE}:sent    when the codes of the last hour were sent
 *   login:{p:PHONE}:s:ADDR  the same, of the codes one client address
 *                           asked for
 *   login:{p:PHONE}:r:ID    a code request: its code and the tries made
 *                           with it (lives as long as the code)
 *   login:{p:PHONE}:fails   wrong tries for the phone: n, until (ms)
 *   login:{p:PHONE}:a:ADDR  wrong tries for the phone from one client
 *                           address: n, until (ms)
 */
struct store_code_limits {
    unsigned ttl_s;          /* a code lives this long */
    unsigned interval_s;     /* at least this long between two codes */
    unsigned per_hour;       /* at most this many codes an hour */
    unsigned phone_per_hour; /* ... and this many for the phone in all */
    unsigned addr_tries;     /* wrong tries from one address before waits */
    unsigned phone_tries;    /* wrong tries in all before waits */
    unsigned wait_max_s;     /* the longest wait */
    unsigned request_tries;  /* tries with one code request */
};

/*
 * Store code for phone, asked for from addr (a client key, "" unknown) as
 * the code request id (STORE_CODE_REQUEST_LEN hex digits), unless addr
 * had one for the phone less than interval_s ago or per_hour in the last
 * hour, or the phone phone_per_hour from anywhere: then *retry_ms says
 * when one may be (0: it was stored).
 */
#define STORE_CODE_REQUEST_LEN 32
int store_code_put(struct store *st, const char *phone, const char *code,
                   const char *addr, const char *request,
                   const struct store_code_limits *l, int64_t *retry_ms);

/* Take back code for phone, stored by store_code_put() (with addr and
 * request) but never sent: it no longer logs in, nor counts against the
 * limits. */
int store_code_revoke(struct store *st, const char *phone, const char *code,
                      const char *addr, const char *request);

/*
 * The login codes a minute to the numbers of calling code cc, over all
 * instances (sms:budget:CC: a hash of minute -> codes; the last minute's
 * count weighted by how much of it is still within 60 s, plus this
 * minute's, is the recent count). take > 0: one more, unless the recent
 * count is per_min already (*ok false, *retry_ms until the minute's
 * end); take < 0: one given back; 0: only read. *recent: the count.
 */
int store_sms_budget(struct store *st, const char *cc, unsigned per_min,
                     int take, bool *ok, int64_t *retry_ms, unsigned *recent);

enum store_code {
    STORE_CODE_OK,     /* one of the phone's live codes: all of them and
                        * the counts of wrong tries are deleted */
    STORE_CODE_WRONG,  /* none matched (or none is live): a wrong try,
                        * counted for the phone and for the address */
    STORE_CODE_LOCKED, /* wrong tries made the phone or the address wait:
                        * the code was not compared (*retry_ms) */
    STORE_CODE_GONE,   /* the code request is used up or expired */
};

/*
 * Check code for phone, tried from addr (a client key). Without request
 * (NULL): wrong tries make the address wait 1 s, 2 s, 4 s ... (up to
 * wait_max_s) from its addr_tries-th on, and the phone from its
 * phone_tries-th on; a wait answers STORE_CODE_LOCKED without comparing;
 * codes are never voided by wrong tries. With request: only that
 * request's code is compared, request_tries times at most (then the
 * request is void), never held by those waits nor counted in them. One
 * script.
 */
int store_code_check(struct store *st, const char *phone, const char *code,
                     const char *addr, const char *request,
                     const struct store_code_limits *l,
                     enum store_code *outcome, int64_t *retry_ms);

/* ---- accounts: token generations and bans (accounts.c) ---- */

/*
 * An account is a role (1 a buyer, 2 an admin: the token's role) and an
 * id. MySQL's account_state holds what outlives a token: the account's
 * token generation (tokens issued before the last "log out everywhere"
 * carry an older one) and, for buyers, a ban. No row: generation 0, not
 * banned (load-test users minted by `seckilld tokens` have no users row
 * either).
 */
int store_account_get(struct store *st, unsigned role, int64_t id,
                      uint32_t *gen, bool *banned);

/* Raise the account's token generation by one; *gen is the new one. */
int store_account_logout_all(struct store *st, unsigned role, int64_t id,
                             uint32_t *gen);

/* Ban (on) or unban buyer user_id, by audit->admin_id, and record audit
 * (struct store_audit, below) in the same transaction. The ban is
 * idempotent; -EINPROGRESS when the COMMIT's answer was lost. */
struct store_audit;
int store_account_ban(struct store *st, int64_t user_id, bool on,
                      const struct store_audit *audit);

/* Every account with a generation above 0 or a ban, one call each. */
int store_accounts_load(struct store *st,
                        void (*row)(void *ctx, unsigned role, int64_t id,
                                    uint32_t gen, bool banned),
                        void *ctx);

/*
 * Tokens logged out one by one, in Redis until they expire: add token jti
 * (expiring at exp_s, epoch seconds), drop the expired ones, and publish
 * msg on channel, in one script (so the entry is there before any
 * instance hears of it).
 */
int store_token_deny(struct store *st, uint64_t jti, int64_t exp_s,
                     const char *channel, const char *msg);

/* Every token on the denylist that expires after now_s. */
int store_tokens_denied_load(struct store *st, int64_t now_s,
                             void (*row)(void *ctx, uint64_t jti,
                                         int64_t exp_s),
                             void *ctx);

/*
 * A proof of work's challenge (hex) is used, until expires_s (epoch s):
 * 0 the first time, -EALREADY for any later one, on any instance.
 */
int store_pow_spend(struct store *st, const char *challenge, int64_t expires_s);

/*
 * Publish msg on channel: PUBLISH on one server, SPUBLISH at the
 * channel's slot owner on a cluster (sale/subscriber.c listens there with
 * SSUBSCRIBE). Returns 0, -ENOTCONN or -EIO (an error reply, logged).
 */
int store_publish(struct store *st, const char *channel, const char *msg);

/* ---- admins (admins.c) ---- */

#define STORE_ADMIN_NAME_MAX 64
#define STORE_ADMIN_HASH_MAX 128

/* Add admin username with password hash pw_hash; *id its id. -EEXIST
 * when the name is taken. */
int store_admin_insert(struct store *st, const char *username,
                       const char *pw_hash, int64_t *id);

/* The admin called username: 0 with *id, its hash (STORE_ADMIN_HASH_MAX
 * bytes) and *disabled; -ENOENT when there is none. */
int store_admin_get(struct store *st, const char *username, int64_t *id,
                    char *pw_hash, bool *disabled);

/*
 * Failed admin logins, counted in Redis over a sliding window of
 * window_ms in three sorted sets of failure times: per name from one
 * address, per name, per address. check: true and *retry_ms when one of
 * them has its max failures in the window (when the oldest of them
 * leaves it), else *addr_fails the address's failures in the window.
 * add: one more failure for all three; name NULL: for the address only
 * (a refusal for being busy).
 */
int store_admin_fails_check(struct store *st, const char *name,
                            const char *addr, unsigned max_pair,
                            unsigned max_name, unsigned max_addr,
                            unsigned window_ms, bool *locked, int64_t *retry_ms,
                            unsigned *addr_fails);
int store_admin_fails_add(struct store *st, const char *name, const char *addr,
                          unsigned window_ms);
/* A good login forgets its name's failures, from its address and from
 * everywhere (not its address's). */
int store_admin_fails_clear(struct store *st, const char *name,
                            const char *addr);

/* ---- the audit log (audit.c) ---- */

/* The longest change text a record keeps, with its NUL. */
#define STORE_AUDIT_CHANGE_MAX 8192

/* ---- the Idempotency-Keys of admin writes (idempotency.c) ---- */

#define STORE_IDEM_KEY_MAX 255
/* The longest first answer kept for a replay (a longer one is answered
 * from its target as it is then). */
#define STORE_IDEM_ANSWER_MAX 16384

/*
 * An admin write's Idempotency-Key, given with the write's audit record
 * (store_audit.idem): recorded first in the write's own transaction, on
 * the write's shard, unique per admin and key, so that the key exists
 * exactly when the write committed. When the key is there already the
 * write changes nothing and fails with -EALREADY (found: what the first
 * recorded is below), or, when the first write's transaction stays open
 * longer than a lock wait, with -EBUSY (busy). The writes that take one:
 * store_voucher_insert(), the controls, store_account_ban() and
 * store_refund_done().
 */
struct store_idem {
    /* Set by the caller: */
    int64_t admin_id;
    const char *key;        /* 1..STORE_IDEM_KEY_MAX bytes */
    unsigned char hash[32]; /* of the request: method, path, body */
    /* Set by the write: */
    bool recorded;     /* inserted in its transaction (on shard shard_no) */
    unsigned shard_no; /* where it was inserted or found */
    bool busy;         /* a write with this key is still running */
    bool found;        /* the key was there: */
    bool same;         /* the same request (hash) */
    unsigned status;   /* the first answer's status; 0: none recorded */
    char *answer;      /* its body (owned, "" for none), NULL without one */
    int64_t age_ms;    /* since the first write */
    char action[33];   /* the first write's audit action and target */
    char target_type[17];
    int64_t target_id; /* found, or as recorded */
};

/* Free what a write left in k (its answer); k stays usable. */
void store_idem_release(struct store_idem *k);

/*
 * The first answer of the write that recorded k (k->recorded): status and
 * body (NULL: none; longer than STORE_IDEM_ANSWER_MAX: not kept), on
 * k's shard, once. 0 or -errno (the key then stays without an answer,
 * and a retry is answered from its target).
 */
int store_idem_answer(struct store *st, const struct store_idem *k,
                      unsigned status, const char *body);

/* Delete keys older than age_s, up to a thousand on every shard; the
 * count into *deleted. 0 or -errno. */
int store_idem_sweep(struct store *st, int64_t age_s, size_t *deleted);

/* One admin action, as the audit log records it. */
struct store_audit {
    int64_t admin_id;        /* who; 0 for nobody (a failed login) */
    const char *addr;        /* the client's address; "" when unknown */
    const char *action;      /* "voucher.create", "user.ban", ... */
    const char *target_type; /* "voucher", "user", "refund", "admin" */
    int64_t target_id;       /* 0: none */
    const char *change;      /* a JSON object's text, or NULL */
    struct store_idem *idem; /* the request's Idempotency-Key, or NULL */
};

/*
 * Record a: inside the transaction open on st, if there is one (the record
 * then commits or rolls back with the change it describes), else on its
 * own; on a store of another shard than 0, into that shard's outbox
 * (store_outbox_move()). A change of STORE_AUDIT_CHANGE_MAX bytes or more is
 * -EINVAL, and nothing is written. 0 or as store_mysql_error(). Not retried:
 * for use inside the caller's operation.
 */
int store_audit_add(struct store *st, const struct store_audit *a);

/* One record of the audit log, as read back. */
struct store_audit_row {
    int64_t id, time_ms, admin_id, target_id;  /* 0: none */
    char admin_name[STORE_ADMIN_NAME_MAX + 1]; /* "" for none */
    char addr[64];
    char action[33];
    char target_type[17];
    char change[STORE_AUDIT_CHANGE_MAX]; /* "" for none */
};

/*
 * The log, newest first: records with id < before (0: from the newest),
 * of target_type (NULL: any) and target_id (0: any), at most max into
 * out. 0 or -errno.
 */
int store_audit_list(struct store *st, int64_t before, const char *target_type,
                     int64_t target_id, struct store_audit_row *out, size_t max,
                     size_t *n);

/* ---- vouchers ---- */

enum voucher_type { VOUCHER_NORMAL = 0, VOUCHER_SECKILL = 1 };

/*
 * How a seckill voucher sells, fixed when it goes on sale: sync (each
 * sale decided by a MySQL transaction) or async (decided by a Redis
 * script; a Redis Stream carries the orders to MySQL: async/async.h).
 */
enum purchase_mode { PURCHASE_SYNC = 0, PURCHASE_ASYNC = 1 };

/*
 * Who may buy a seckill voucher, fixed when it goes on sale: anyone who
 * asks (open), or only buyers the waiting room admitted, each with a
 * ticket (queue: sale/waitroom.c).
 */
enum admission { ADMISSION_OPEN = 0, ADMISSION_QUEUE = 1 };

/*
 * Whether an operator halted a seckill voucher's sale (store_sale_halt(),
 * store_sale_stop()): a paused sale sells again when resumed; a stopped
 * one has ended (its end time is when it was stopped). Every purchase
 * checks it where it is decided (the CAS of a sync sale, the script of an
 * async one).
 */
enum store_halt { HALT_NONE = 0, HALT_PAUSED = 1, HALT_STOPPED = 2 };

/* Text sizes: the schema's VARCHAR lengths in utf8mb4 bytes, plus NUL. */
#define STORE_TITLE_LEN (255 * 4 + 1)
#define STORE_RULES_LEN (1024 * 4 + 1)

struct store_voucher {
    int64_t id;
    int64_t shop_id;
    char title[STORE_TITLE_LEN];
    char sub_title[STORE_TITLE_LEN];
    char rules[STORE_RULES_LEN];
    int64_t pay_value;    /* cents */
    int64_t actual_value; /* cents */
    enum voucher_type type;
    /* seckill vouchers only (zero otherwise): */
    int64_t stock;
    int64_t begin_time; /* epoch seconds */
    int64_t end_time;   /* epoch seconds, exclusive */
    enum purchase_mode mode;
    enum admission admission;
    enum store_halt halt;
    /* An async sale's creation stamp: a random number (> 0) that
     * store_voucher_insert() draws and stores with it, and that its state
     * in Redis carries (async/async.h); 0 for any other voucher. */
    int64_t sale_stamp;
    int64_t created;
    int64_t updated;
};

/*
 * Insert v (and its stock row when it is a seckill voucher) in one
 * transaction; sets v->id. Strings must fit the schema (the caller
 * validates lengths). With cfg->stock_segments N > 1 a seckill voucher's
 * stock goes into N rows of seckill_stock_segments instead (the first
 * stock % N rows one more than the others) and its seckill_vouchers row
 * holds 0: concurrent purchases then lock different rows.
 * Either way a voucher's stock is its seckill_vouchers.stock plus the sum
 * of its segments, which is what every read below reports. audit (NULL:
 * none) is recorded in the same transaction, its target_id the new id.
 *
 * With several shards the voucher goes to the next shard in turn (each
 * process its own turn), with an id from the ID worker (prefix "voucher",
 * one Redis round trip) that names that shard; its audit record is shard
 * 0's, written to its shard's outbox and moved there after the commit
 * (store_outbox_move()). With one shard, a sharded id of shard 0 too
 * when the table's AUTO_INCREMENT has reached the sharded layout (a
 * database that was shard 0 of sharded sales). -ENOTCONN also when Redis
 * is unreachable.
 */
int store_voucher_insert(struct store *st, struct store_voucher *v,
                         const struct store_audit *audit);

/*
 * Read one voucher with its current stock. -ENOENT if absent.
 *
 * With a read replica (cfg->replica) that the monitor finds usable, the
 * read goes there: its stock may then be up to replica_max_lag_s behind.
 * A voucher the replica does not have yet (created moments ago) is read
 * from the primary, so whoever just created one can read it back; so is
 * everything after a replica error (and the thread skips the replica for
 * a second). Reads inside a purchase (store_seckill_get()) and a user's
 * own orders always go to the primary.
 */
int store_voucher_get(struct store *st, int64_t id, struct store_voucher *v);

/* The most rows one page of a list asks for: a page of 100 and one more
 * that says whether another page follows. */
#define STORE_LIST_MAX 101

/*
 * List vouchers, newest first, with id < before (0: from the newest), at
 * most limit (1..STORE_LIST_MAX), of one shop when shop_id > 0. *items is
 * a new array of *count entries that the caller releases with free(3)
 * (NULL when empty). From the replica as store_voucher_get() says (a
 * voucher created moments ago may be missing for up to the lag bound).
 * With several shards, every shard's page, one after the other, merged
 * by id (sharded ids sort by time across shards).
 */
int store_voucher_list(struct store *st, int64_t shop_id, int64_t before,
                       unsigned limit, struct store_voucher **items,
                       size_t *count);

/*
 * The seckill vouchers whose sale is on at now_s (epoch seconds), at
 * most max of them, those ending soonest (ties by id); then those
 * beginning after now_s and before until_s, at most max, those beginning
 * soonest: at most 2 * max in *items, as in store_voucher_list(), in no
 * order the caller may count on. From the replica as store_voucher_get()
 * says. One statement.
 */
int store_sales_list(struct store *st, int64_t now_s, int64_t until_s,
                     unsigned max, struct store_voucher **items, size_t *count);

/* What the purchase needs to know before it takes the lock. */
struct store_seckill {
    enum voucher_type type;
    int64_t stock;
    int64_t begin_time;
    int64_t end_time;
    enum purchase_mode mode;
    enum admission admission;
    enum store_halt halt;
};

/* Read a voucher's type, stock and sale window. -ENOENT if absent. */
int store_seckill_get(struct store *st, int64_t voucher_id,
                      struct store_seckill *s);

/* ---- the waiting room (waitroom.c) ---- */

/*
 * A queue sale's waiting room in Redis, every key under the sale's hash
 * tag {v:ID} (one slot), kept until a day after its end:
 *   {v:ID}:wr:pre       buyers who joined before the begin, each scored
 *                       by a random 52-bit number: at the begin, their
 *                       order by score is a uniform shuffle, drawn when
 *                       they joined and hidden until then
 *   {v:ID}:wr:late      buyers who joined after the begin, in order
 *   {v:ID}:wr:seq       the latecomers' counter
 *   {v:ID}:wr:joined    when each latecomer joined (epoch ms, a hash)
 *   {v:ID}:wr:poll:UID  a buyer's last poll (lives one poll interval)
 *   {v:ID}:wr:queue     marks the sale as one with a waiting room
 * Places are admitted at rate per second from the begin, by the clock of
 * Redis, but none before its buyer joined: place p is admitted from
 * begin + ceil(p * 1000 / rate) ms, or from its join if that is later (a
 * latecomer behind a short queue). Both are fixed when the place is
 * given, and an earlier joiner is never admitted after a later one.
 */
struct store_waitroom {
    /* The sale's, set by the caller: */
    int64_t open_ms, begin_ms, end_ms; /* epoch ms: joins from open_ms */
    unsigned rate;                     /* places admitted a second */
    unsigned poll_ms;                  /* a buyer polls at most this often */
};

enum store_wr_outcome {
    STORE_WR_OK,         /* the buyer has a place (below) */
    STORE_WR_NOT_OPEN,   /* before open_ms: retry_ms */
    STORE_WR_ENDED,      /* at or after end_ms */
    STORE_WR_NOT_JOINED, /* a poll of a buyer who has no place */
    STORE_WR_TOO_SOON,   /* a poll within poll_ms of the last: retry_ms */
};

struct store_wr_place {
    enum store_wr_outcome outcome;
    int64_t position; /* 1-based; 0 before the begin (not drawn yet) */
    bool admitted;
    int64_t admit_at_ms; /* epoch ms its place is admitted from */
    int64_t now_ms;      /* Redis' clock */
    int64_t retry_ms;
};

/*
 * Join (join: the buyer gets a place unless it has one; the place is
 * kept) or poll (no place is made) user's place in voucher_id's waiting
 * room, in one script. Every read of an existing place (a poll, or a join
 * of a buyer who has one) is limited to one per poll_ms. 0 with *out, or
 * -errno.
 */
int store_waitroom_place(struct store *st, int64_t voucher_id,
                         const struct store_waitroom *w, int64_t user_id,
                         bool join, struct store_wr_place *out);

/* Mark voucher_id as a sale with a waiting room, until expire_at_ms. */
int store_waitroom_mark(struct store *st, int64_t voucher_id,
                        int64_t expire_at_ms);

/* Remove voucher_id's waiting room and its mark (a voucher deleted
 * before its begin; the buyers' poll keys run out by themselves). */
int store_waitroom_forget(struct store *st, int64_t voucher_id);

/* Whether voucher_id is marked as a sale with a waiting room: 1 yes, 0
 * no, or -errno. */
int store_waitroom_marked(struct store *st, int64_t voucher_id);

/* How many joined voucher_id's waiting room, and how many of those
 * places are admitted by now. */
int store_waitroom_counts(struct store *st, int64_t voucher_id,
                          const struct store_waitroom *w, int64_t *joined,
                          int64_t *admitted);

/* ---- orders ---- */

enum store_purchase {
    STORE_PURCHASE_OK,        /* order inserted, stock decremented, commit */
    STORE_PURCHASE_SOLD_OUT,  /* CAS matched no row: rolled back */
    STORE_PURCHASE_DUPLICATE, /* this user already has an order: rolled back */
    STORE_PURCHASE_PAUSED,    /* the sale is paused: rolled back */
    STORE_PURCHASE_STOPPED,   /* the sale was stopped: rolled back */
};

/* One purchase handed to store_purchase_batch(). */
struct store_purchase_item {
    int64_t order_id;
    int64_t user_id;
    int64_t deadline_ms; /* monotonic: the end of its time budget */
    /* Set by store_purchase_batch(): */
    enum store_purchase outcome; /* valid when err is 0 */
    int err;
    bool settled; /* private to the store */
};

/*
 * The purchases items[0..n) of voucher_id, in arrival order (the caller
 * holds each user's purchase lock). Each item gets its own answer: err 0
 * with the outcome, which is then durable (committed or rolled back), or
 * one of the errors below; nothing else is reported for it. The
 * transaction inserts the orders and then CASes the stock as its last
 * statement before COMMIT, so the hot row is locked briefly; the unique
 * (user_id, voucher_id) key backs up the one-order-per-user rule.
 *
 * Three ways, chosen per voucher:
 *   - segmented (created with stock_segments > 1): one transaction per
 *     purchase whose CAS takes 1 from the segment user_id % N, falling
 *     through to the next segments when one is empty; sold out when every
 *     segment is 0 (segments seen empty are remembered per process);
 *   - cfg->batch_max 1: one transaction per purchase, CAS stock = stock - 1
 *     WHERE stock > 0 (the naive design, kept as the baseline);
 *   - else merged: one transaction for all of them: one
 *     multi-row INSERT, one CAS stock = stock - k WHERE stock >= k,
 *     COMMIT. If the INSERT hits the unique key, the users' existing
 *     orders are looked up (DUPLICATE) and the rest retried; if the CAS
 *     matches nothing, the stock s is read and the first s by arrival are
 *     retried (the rest SOLD_OUT). A broken connection before COMMIT
 *     retries on a fresh one, a deadlock retries, and any other key clash
 *     in the INSERT (a user twice, an order id taken before) falls back to
 *     one transaction per purchase: each item gets the answer it would
 *     have got alone.
 *
 * A purchase is bounded in time: an item whose deadline_ms has passed, or
 * leaves too little for an attempt that may wait for a row lock
 * (SQL_LOCK_WAIT_S), gets -ETIME with nothing written for it.
 *
 * Errors per item: -ENOTCONN (MySQL unreachable; nothing written),
 * -EINPROGRESS (its COMMIT went unanswered: the outcome is unknown), -ETIME,
 * -EEXIST (its order_id is taken already, the ID worker's counter was
 * lost: nothing written, retry it with a fresh id), -EIO. Counts the
 * outcomes and transaction sizes in common/metrics.h. st is the calling
 * thread's own.
 */
void store_purchase_batch(struct store *st, int64_t voucher_id,
                          struct store_purchase_item **items, size_t n);

/*
 * The process keeps a little state per voucher that purchases, cancels and
 * expiries use (how its stock is segmented, which segments were seen
 * empty). Free the state of every voucher that nothing has used for
 * idle_ms; a later use reads it again. Returns how many were freed.
 * Thread-safe; holds its lock for one short hash chain at a time.
 */
size_t store_voucher_states_free_idle(int64_t idle_ms);

/* Voucher voucher_id's stock changed elsewhere (another process's
 * restock or returned unit): forget which of its segments this process
 * saw empty, so that they sell again at once. Thread-safe; no I/O. */
void store_voucher_stocked(int64_t voucher_id);

/* How many vouchers' state the process keeps now. Thread-safe. */
size_t store_voucher_states_count(void);

/* An order's status: unpaid -> paid, cancelled or expired (final). */
enum order_status {
    ORDER_UNPAID = 1,
    ORDER_PAID = 2,
    ORDER_CANCELLED = 4,
    ORDER_EXPIRED = 7,
};

struct store_order {
    int64_t id;
    int64_t user_id;
    int64_t voucher_id;
    enum order_status status;
    int64_t created;         /* epoch seconds */
    int64_t pay_deadline_ms; /* epoch milliseconds; 0: none */
    int64_t pay_time_ms;     /* 0 until paid */
    int64_t close_time_ms;   /* 0 until cancelled or expired */
};

/* Read one order. -ENOENT if absent. */
int store_order_get(struct store *st, int64_t id, struct store_order *o);

/*
 * A user's orders, newest first (by id), with id < before (0: from the
 * newest), at most limit (1..STORE_LIST_MAX). *items as in
 * store_voucher_list(). With several shards, every shard's page below
 * before, one after the other on the calling thread, merged by id: the
 * cursor (the last id) pages through all shards as through one.
 */
int store_order_list(struct store *st, int64_t user_id, int64_t before,
                     unsigned limit, struct store_order **items, size_t *count);

/*
 * Voucher voucher_id's orders of status (0: any), at most max into out
 * (*n of them): with desc, those with id < from (0: from the newest),
 * newest first; else those with id > from, oldest first. One statement
 * on the primary (an admin's view and the CSV export: no lag).
 */
int store_voucher_orders(struct store *st, int64_t voucher_id, int status,
                         bool desc, int64_t from, struct store_order *out,
                         size_t max, size_t *n);

/* ---- the order lifecycle (lifecycle.c) ----
 *
 * An unpaid order ends exactly one way: paid, cancelled or expired. Each
 * is one transaction that locks the order row and changes it only while it
 * is unpaid (a CAS on status), so whichever comes first wins and the others
 * see the result. Cancelling and expiring give the unit back to the stock
 * in the same transaction (the voucher's row, or the segment user_id % N of
 * a segmented voucher): at every moment stock + unpaid + paid orders =
 * the voucher's initial stock. Many payments (cancels) can share one
 * transaction, each decided as in one of its own (store_orders_pay(),
 * store_orders_cancel()).
 */

enum store_close {
    STORE_CLOSE_DONE,      /* it was unpaid: now cancelled, unit returned */
    STORE_CLOSE_ALREADY,   /* it was cancelled already (nothing changed) */
    STORE_CLOSE_PAID,      /* it is paid: not cancelled */
    STORE_CLOSE_EXPIRED,   /* it expired before: not cancelled */
    STORE_CLOSE_NOT_FOUND, /* no such order */
};

/*
 * Cancel order_id. On return *o holds the order as it is now (unless
 * NOT_FOUND). Returns 0 with *outcome, or an error as the other calls
 * (-EINPROGRESS: the COMMIT went unanswered).
 */
int store_order_cancel(struct store *st, int64_t order_id,
                       enum store_close *outcome, struct store_order *o);

enum store_pay {
    STORE_PAY_DONE,      /* it was unpaid and in time: now paid */
    STORE_PAY_SAME,      /* paid already by this very transaction */
    STORE_PAY_OTHER,     /* paid already by another transaction */
    STORE_PAY_CLOSED,    /* cancelled or expired: refused */
    STORE_PAY_LATE,      /* unpaid but past its deadline: expired now */
    STORE_PAY_AMOUNT,    /* amount is not the voucher's pay value */
    STORE_PAY_TXN_USED,  /* txn_id paid another order already */
    STORE_PAY_NOT_FOUND, /* no such order */
};

/* Why a payment is to be given back (refunds.reason). */
enum store_refund_reason {
    STORE_REFUND_LATE = 1,   /* after the pay deadline: the order expired */
    STORE_REFUND_CLOSED = 2, /* for a cancelled or expired order */
    STORE_REFUND_SECOND = 3, /* another transaction paid the order */
};

struct store_refund {
    int64_t id, order_id, amount;
    char txn[65];
    enum store_refund_reason reason;
    bool done;
    int64_t created_ms, done_ms; /* epoch ms; done_ms 0 while pending */
};

/* Refunds, newest first, with id < before (0: from the newest); status
 * 0 pending, 1 done, -1 both; at most max into out. */
int store_refunds_list(struct store *st, int status, int64_t before,
                       struct store_refund *out, size_t max, size_t *n);

/* Refund id's money went back (admin audit->admin_id): 0 with *r as it
 * is now (done once, recorded with audit in the same transaction; again
 * changes and records nothing), -ENOENT when there is none, -EINPROGRESS
 * when the COMMIT's answer was lost. */
int store_refund_done(struct store *st, int64_t id,
                      const struct store_audit *audit, struct store_refund *r);

/*
 * Record the payment txn_id (1..64 bytes) of amount cents for order_id. A
 * payment that arrives after the deadline expires the order then and
 * there (STORE_PAY_LATE: the unit goes back on sale) rather than letting a
 * late payment win. A txn_id pays one order: STORE_PAY_TXN_USED when it
 * paid another (with several shards: when shard 0 has it reserved for
 * another order, on any shard; the reservation, made before the payment
 * is recorded, is kept, so a retry for the same order goes on). On
 * return *o holds the order as it is now (unless NOT_FOUND) and
 * *pay_value the voucher's price in cents. Returns 0 with *outcome, or an
 * error.
 */
int store_order_pay(struct store *st, int64_t order_id, int64_t amount,
                    const char *txn_id, enum store_pay *outcome,
                    struct store_order *o, int64_t *pay_value);

/*
 * Merged payments and cancels: many calls, one transaction. The orders
 * are locked in the order of their ids (SELECT ... IN (...) FOR UPDATE,
 * up to 64 a statement), the members are decided in their order in the
 * array exactly as store_order_pay() or store_order_cancel() would one
 * after the other (an order twice sees what the first left: the same
 * notification twice is one payment), the units of the orders closed
 * (cancelled, or expired by a late payment) go back per voucher (per
 * segment) in one UPDATE each, last, and the async sales' owed returns
 * are recorded, all before the one COMMIT. The payments are written 64
 * an UPDATE (each its txn id), the cancels' closes likewise. A deadlock
 * or a lock wait that timed out runs the whole batch again (nothing of
 * it was kept). When a txn id of the batch is another order's (or two
 * members name one), the batch runs again with one UPDATE a payment,
 * which tells the refused one apart (STORE_PAY_TXN_USED, as alone).
 *
 * Returns 0 with every item's outcome set and, unless NOT_FOUND, its
 * order as it is now (read after the COMMIT); or an error for the whole
 * batch as store_order_pay(): nothing was written, except -EINPROGRESS
 * (the COMMIT went unanswered) and an error of the read after the COMMIT.
 * n <= STORE_ORDER_BATCH_MAX. Items' strings are the caller's.
 *
 * With several shards a batch is one transaction on its orders' shard;
 * items on several shards run as one transaction per shard, so an error
 * then says nothing of the shards before it: callers keep a batch to
 * one shard (sale/orders.c's lanes). A refund a shard other than 0
 * decides is written to shard 0 after its commit. The txn ids of the
 * members that may pay are reserved on shard 0 first, as in
 * store_order_pay(), 64 a statement.
 */
#define STORE_ORDER_BATCH_MAX 256

struct store_pay_item {
    /* Set by the caller: */
    int64_t order_id;
    int64_t user_id; /* > 0: only this user's order (else NOT_FOUND) */
    int64_t amount;  /* < 0: the voucher's pay value (set to it) */
    const char *txn; /* 1..64 characters, else the batch is -EINVAL */
    /* Set by store_orders_pay(): */
    enum store_pay outcome;
    int64_t pay_value; /* the voucher's price */
    struct store_order order;
};

int store_orders_pay(struct store *st, struct store_pay_item *items, size_t n);

struct store_cancel_item {
    /* Set by the caller: */
    int64_t order_id;
    int64_t user_id; /* > 0: only this user's order (else NOT_FOUND) */
    /* Set by store_orders_cancel(): */
    enum store_close outcome;
    struct store_order order;
};

int store_orders_cancel(struct store *st, struct store_cancel_item *items,
                        size_t n);

/* What one expiry batch did. */
#define STORE_EXPIRE_BATCH_MAX 64
struct store_expired {
    size_t orders;                            /* closed */
    int64_t vouchers[STORE_EXPIRE_BATCH_MAX]; /* that got units back */
    size_t nvouchers;
    int64_t lag_us[STORE_EXPIRE_BATCH_MAX]; /* deadline to close, each */
    /* Each closed order, its voucher and buyer, grouped by voucher. */
    int64_t order_id[STORE_EXPIRE_BATCH_MAX];
    int64_t order_voucher[STORE_EXPIRE_BATCH_MAX];
    int64_t order_user[STORE_EXPIRE_BATCH_MAX];
};

/*
 * Expire up to max (<= STORE_EXPIRE_BATCH_MAX) unpaid orders whose
 * deadline has passed, oldest deadline first, in one transaction: the
 * orders' rows are taken with FOR UPDATE SKIP LOCKED (rows another
 * instance is expiring are left to it, never waited for), each becomes
 * expired, and each voucher (each segment) gets its units back in one
 * UPDATE stock = stock + k. Returns 0 with *out filled (out->orders == max
 * means there may be more), or an error (nothing closed). On shard
 * shard (< store_shard_count()): each shard has its own orders to expire.
 */
int store_orders_expire(struct store *st, unsigned shard, unsigned max,
                        struct store_expired *out);

/* ---- the asynchronous mode (async_orders.c): the orders to MySQL ---- */

/* One order a Redis Stream carried. */
struct store_async_order {
    int64_t order_id;
    int64_t user_id;
    int64_t accepted_ms; /* Redis' clock when it sold it: the pay deadline
                          * counts from there */
    /* Its place in the sale's stream (the entry id as one number that
     * orders like the ids, async/compare.h), kept on the order's row: the
     * reconciliation counts MySQL's orders up to a place in the stream. */
    int64_t stream_pos;
    /* Set by store_async_write(): 0 written (now or before); -EEXIST the
     * database refused it (the user has another active order, or its id
     * is another order's: it can never be written); -ERANGE no stock
     * left for it in MySQL. */
    int result;
};

/*
 * Write orders o[0..n) of voucher_id (at most 256) in one transaction:
 * those already in MySQL (a replay) are left as they are, the others are
 * inserted unpaid with their deadline and stream position, and the
 * voucher's stock goes down
 * by how many were inserted (stock = stock - k WHERE stock >= k). An order
 * that can never be written gets its result; the rest are written still.
 * Returns 0 (see each result) or an error with nothing written (retry).
 */
int store_async_write(struct store *st, int64_t voucher_id,
                      struct store_async_order *o, size_t n);

/* The async vouchers on sale, ahead, or ended less than lookback_s
 * seconds ago, however many, newest first: *out is a new array of *n ids
 * (free(3) it; NULL when there is none). 0 or -errno. */
int store_async_vouchers(struct store *st, unsigned lookback_s, int64_t **out,
                         size_t *n);

/* What the Redis side of an async sale is rebuilt from. */
struct store_async_sale {
    int64_t initial_stock, stock;
    int64_t begin_time, end_time; /* epoch seconds */
    int64_t *users;               /* with an active order; free(3) it */
    int64_t *orders;              /* users[i]'s active order; free(3) it */
    size_t nusers;
    int64_t written;  /* its orders of any status */
    int64_t last_pos; /* the highest stream position among them (0: none) */
    /* Its creation stamp (store_voucher.sale_stamp; 0: a voucher from
     * before stamps). */
    int64_t stamp;
    enum store_halt halt;
    int64_t revision;  /* the controls applied to the row */
    int64_t restocked; /* units added to the initial stock since */
};

/* Read voucher_id's sale, all of it in one snapshot (-ENOENT: not an
 * async seckill voucher). The controls' state comes with it: */
int store_async_sale_read(struct store *st, int64_t voucher_id,
                          struct store_async_sale *out);

/* ---- units owed to async sales (unit_returns.c) ---- */

/*
 * A cancel or an expiry of an async sale's order (store_order_cancel(),
 * store_order_pay() when late, store_orders_expire()) records in its
 * transaction that the sale's Redis state is owed the unit; the record
 * stays until the unit is back in Redis (async_units_return()).
 */
struct store_unit_return {
    int64_t order_id, voucher_id, user_id;
};

/* Up to max owed returns recorded at least min_age_ms ago, oldest first,
 * into out (*n of them). 0 or -errno. */
int store_unit_returns_list(struct store *st, unsigned min_age_ms,
                            struct store_unit_return *out, size_t max,
                            size_t *n);

/* Redis has the units of orders ids[0..n): drop their records. 0 or
 * -errno. */
int store_unit_returns_done(struct store *st, const int64_t *ids, size_t n);

/* An async sale's orders up to a place in its stream. */
struct store_async_counts {
    int64_t initial_stock; /* -1: unknown (a voucher from before) */
    int64_t active;        /* unpaid and paid */
    int64_t orders;        /* of any status */
    int64_t owed;          /* closed, their unit still owed back to Redis
                            * (async_unit_returns) */
    int64_t restocked;     /* of initial_stock, added by restocks */
    int64_t revision;      /* the controls applied to the row */
};

/*
 * Count voucher_id's orders whose stream position is at most pos_max, and
 * those written before positions were kept, and among them the closed
 * ones whose unit is owed, in one statement (one snapshot). -ENOENT: no
 * seckill voucher with this id.
 */
int store_async_counts_read(struct store *st, int64_t voucher_id,
                            int64_t pos_max, struct store_async_counts *out);

/* The creation stamp of async voucher voucher_id (0: one from before
 * stamps). 0, -ENOENT (no async voucher of that id), or -errno. */
int store_async_stamp_read(struct store *st, int64_t voucher_id,
                           int64_t *stamp);

struct store_voucher_stats {
    int64_t initial_stock; /* -1: unknown (a voucher from before) */
    int64_t stock;
    int64_t unpaid, paid, cancelled, expired;
    enum admission admission;
    int64_t begin_time, end_time; /* epoch s */
};

/* The numbers a shop watches during a sale. -ENOENT: no seckill voucher
 * with this id. */
int store_voucher_stats(struct store *st, int64_t voucher_id,
                        struct store_voucher_stats *out);

/* ---- the operator's controls of a sale (controls.c) ----
 *
 * Each control is one transaction in one function below: it locks the
 * voucher's rows (SELECT ... FOR UPDATE: whether the sale began is
 * decided there, by the caller's clock now_s), checks what may change,
 * changes it, and bumps the sale row's revision. *after is the sale's
 * control state as committed, which an async sale's Redis state then
 * takes (async_sale_control()). The invariant stock + unpaid + paid =
 * initial stock holds at every commit: a restock adds to the stock and
 * the initial stock together. Each records its audit (NULL: none) in
 * the same transaction, when it changed something.
 */

enum store_control {
    STORE_CONTROL_DONE,        /* committed */
    STORE_CONTROL_NOT_FOUND,   /* no voucher with this id */
    STORE_CONTROL_NOT_SECKILL, /* a normal voucher has no sale */
    STORE_CONTROL_STARTED,     /* only allowed before the begin: why */
    STORE_CONTROL_ENDED,       /* the sale has ended (or was stopped) */
    STORE_CONTROL_INVALID,     /* the values disagree with the row: why */
};

/* A seckill voucher's sale as a control left it. */
struct store_sale_control {
    enum voucher_type type;
    enum purchase_mode mode;
    enum admission admission;
    enum store_halt halt;
    int64_t begin_time, end_time; /* epoch s */
    int64_t initial_stock;        /* -1: unknown (a voucher from before) */
    int64_t revision, restocked;
    unsigned segments; /* stock rows of a segmented voucher; 0 or 1: none */
    const char *why;   /* STORE_CONTROL_STARTED, _INVALID: what, a field */
};

/* The most stock (and initial stock) a voucher may have. */
#define STORE_STOCK_MAX 1000000000LL

/* Pause (HALT_PAUSED) or resume (HALT_NONE) voucher_id's sale, unless it
 * has ended. Pausing twice is pausing once. 0 with *out, or -errno. */
int store_sale_halt(struct store *st, int64_t voucher_id, enum store_halt halt,
                    int64_t now_s, enum store_control *out,
                    struct store_sale_control *after,
                    const struct store_audit *audit);

/* End voucher_id's sale now: its end time becomes now_s (its begin too
 * if later), and purchases are refused on its stock rows. */
int store_sale_stop(struct store *st, int64_t voucher_id, int64_t now_s,
                    enum store_control *out, struct store_sale_control *after,
                    const struct store_audit *audit);

/* Add units (>= 1) to voucher_id's stock and initial stock (a segmented
 * voucher's spread over its segments as at its creation), unless its sale
 * has ended, or the stock would pass STORE_STOCK_MAX (INVALID). */
int store_sale_restock(struct store *st, int64_t voucher_id, int64_t units,
                       int64_t now_s, enum store_control *out,
                       struct store_sale_control *after,
                       const struct store_audit *audit);

/* The fields of a voucher an edit may set (set: STORE_PATCH_* bits). */
enum {
    STORE_PATCH_TITLE = 1 << 0,
    STORE_PATCH_SUB_TITLE = 1 << 1,
    STORE_PATCH_RULES = 1 << 2,
    STORE_PATCH_PAY_VALUE = 1 << 3,
    STORE_PATCH_ACTUAL_VALUE = 1 << 4,
    STORE_PATCH_BEGIN = 1 << 5,
    STORE_PATCH_END = 1 << 6,
    STORE_PATCH_STOCK = 1 << 7,
};

/*
 * Edit voucher_id with the fields of p that p->set names (p's strings
 * fit the schema; the caller checked each value alone). Before the
 * begin everything p holds may change (a new stock replaces the stock
 * and the initial stock, a segmented voucher's segments rewritten); after
 * it only the texts and the end time (not before now_s, and not once
 * the sale ended): STORE_CONTROL_STARTED or _ENDED names the first
 * field that may not change. Then the values together: the pay value
 * 1..the actual value, the end after the begin (STORE_CONTROL_INVALID).
 */
struct store_voucher_patch {
    unsigned set;
    /* A field that never changes was given: why, refused (STARTED after
     * the begin, INVALID before). NULL: none. */
    const char *fixed;
    const char *title, *sub_title, *rules;
    int64_t pay_value, actual_value, begin_time, end_time, stock;
};
int store_voucher_patch(struct store *st, int64_t voucher_id,
                        const struct store_voucher_patch *p, int64_t now_s,
                        enum store_control *out,
                        struct store_sale_control *after,
                        const struct store_audit *audit);

/* Delete voucher_id with its sale rows before its sale began
 * (STORE_CONTROL_STARTED after, or when it has orders). *after says what
 * it was. */
int store_voucher_delete(struct store *st, int64_t voucher_id, int64_t now_s,
                         enum store_control *out,
                         struct store_sale_control *after,
                         const struct store_audit *audit);

/* The control state of voucher_id's sale as committed (autocommit): for
 * the reconciliation, which brings an async sale's Redis state up to
 * it. -ENOENT: no seckill voucher with this id. */
int store_sale_control_read(struct store *st, int64_t voucher_id,
                            struct store_sale_control *out);

/* Read voucher_id from the primary (never a replica): what a control just
 * committed. As store_voucher_get() otherwise. */
int store_voucher_get_primary(struct store *st, int64_t id,
                              struct store_voucher *v);

#endif
