/*
 * soak.h - what the files of make soak share: a randomized run in the
 * spirit of Jepsen's nemesis. Three seckilld instances behind haproxy,
 * their backends in one of the deployment shapes the seed draws (Redis:
 * two servers watched by three sentinels, or a cluster of three
 * primaries and three replicas; MySQL: one MariaDB primary, or two
 * shards, each with a read replica; a proxy per instance and backend) and a
 * mixed workload of sales, purchases, payments, cancels and logins; a
 * nemesis that breaks something every few seconds and heals it again; a
 * history of every request; and at the end a checker that holds the
 * history against MySQL, Redis and the instances' logs
 * (docs/reliability.md, "The nemesis").
 *
 * world.c     the processes: backends, proxies, instances, haproxy, and a
 *             watcher that stamps the instances' log lines with the time
 * workload.c  the sales, the buyers, the history
 * nemesis.c   the faults: drawn, injected, healed
 * outside.c   the SMS webhook the instances send login codes to, which
 *             the nemesis makes slow, hang, fail or refuse
 * checker.c   the invariants, the tables, the windows of history
 * check_outside.c  what a failing outside service may not delay
 * main.c      settings (SOAK_SEED, SOAK_MINUTES, SOAK_CANARY, SOAK_REDIS,
 *             SOAK_MYSQL_SHARDS, SOAK_HOSTNAME), main()
 *
 * Every random choice comes from the seed (one generator per thread,
 * seeded from it), so a seed replays the same decisions; the timing of
 * the machine still differs from run to run. Threads: the buyers, the
 * sales manager, the nemesis, the log watcher and the stock sampler run
 * beside main(); what they share is behind the mutexes named below.
 */
#ifndef SECKILL_SOAK_H
#define SECKILL_SOAK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "tests/faults/faults.h"

#define SOAK_INSTANCES 3
/* The most Redis servers (a cluster's six nodes; Sentinel's shape has
 * two) and MariaDB shards of a shape. */
#define SOAK_REDIS_MAX 6
#define SOAK_SHARDS_MAX 2
/* The client gives up on a request after this; the checker wants every
 * answer within SOAK_ANSWER_MS (haproxy's server timeout is 15 s). */
#define SOAK_CLIENT_TIMEOUT_S 25
#define SOAK_ANSWER_MS 16000
#define SOAK_PAY_TIMEOUT_S 20
#define SOAK_PAY_VALUE 100
/* Queue sales: a short ticket and a slow admission, so that latecomers
 * (who join more than a ticket's life after the begin) are common. */
#define SOAK_TICKET_TTL_S 8
#define SOAK_ADMIT_RATE 5
/* The canary's failpoints for the operator's features (a format string
 * of world.c's instance environment): the first restock an instance
 * makes is applied twice, every other waiting room place is admitted by
 * the rate alone (a latecomer's ticket has expired when it is given). */
#define SOAK_CANARY_CONTROLS_FAILPOINTS                                        \
    "restock_apply_twice=fail,waitroom_rate_only=fail%%2"

/* ---- settings (main.c) ---- */

/* How the instances reach Redis (SOAK_REDIS). */
enum soak_redis {
    SOAK_REDIS_SENTINEL, /* a master and a replica under three sentinels */
    SOAK_REDIS_CLUSTER,  /* three primaries, each with a replica */
};

struct soak_cfg {
    uint64_t seed;
    double minutes;
    /* Plant the failpoints the checker must catch: every instance drops
     * one async purchase in 1,000 before the sale's script (answered 202,
     * never sold), applies its first restock twice and admits every other
     * waiting room place by the rate alone; instance 1 skips its second
     * unit return. */
    bool canary;
    int buyers; /* client threads */
    /* The deployment's shape: SOAK_REDIS and SOAK_MYSQL_SHARDS, or drawn
     * from the seed when unset. */
    enum soak_redis redis;
    int shards; /* MariaDB primaries the sales are sharded over: 1 or 2 */
    /* The instances run in UTS and PID namespaces of their own with one
     * long host name, as the pods of one deployment do (SOAK_HOSTNAME
     * shared; own: each its machine's; chosen by the seed when unset). */
    bool shared_hostname;
};

/* The host name of every instance when they share one. */
#define SOAK_SHARED_HOSTNAME                                                   \
    "seckilld-production-api-deployment-7d9f8b6c5-k2x4q"

extern struct soak_cfg soak_cfg;

/* A generator of the seed's sequence (splitmix64), one per thread. */
struct rng {
    uint64_t s;
};

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(struct rng *r);
/* Uniform in [lo, hi]. */
int64_t rng_range(struct rng *r, int64_t lo, int64_t hi);
/* True with probability pct/100. */
bool rng_chance(struct rng *r, int pct);

/* Milliseconds since the run started (the driver's real clock). */
int64_t soak_ms(void);
extern int64_t soak_t0_ms; /* util_now_ms() at the start */

/* ---- the world (world.c) ---- */

struct instance {
    struct it_server srv; /* pid 0 while down */
    uint16_t port;        /* fixed: haproxy expects it there */
    int starts;
    bool stopped; /* SIGSTOP */
    /* Its own links: each shard's MySQL primary and replica, each Redis
     * server (the redirect preload sends its connections to
     * world.redis[k] to px_redis[k]). */
    struct it_proxy px_mysql[SOAK_SHARDS_MAX], px_replica[SOAK_SHARDS_MAX];
    struct it_proxy px_redis[SOAK_REDIS_MAX];
    char clock_file[IT_PATH_MAX]; /* libfaketime's offset, "+0" */
    char env[32][2 * IT_PATH_MAX + 64];
};

struct world {
    pthread_mutex_t mu; /* instances' pids, redis roles */
    /* Shard s's primary and its read replica; one shard unless
     * soak_cfg.shards says two. */
    struct pmaria db[SOAK_SHARDS_MAX], replica[SOAK_SHARDS_MAX];
    struct db_target shard_target[SOAK_SHARDS_MAX];
    /* The Redis servers: Sentinel's master and replica, or the cluster's
     * nodes (their roles change with failovers: cluster_nodes_read()). */
    struct predis redis[SOAK_REDIS_MAX];
    int nredis;
    /* Connections from one Redis server to redis[i] (replication, a
     * slot's keys migrating) come here. */
    struct it_proxy px_repl[SOAK_REDIS_MAX];
    int master; /* which redis the sentinels named last */
    pid_t sentinel[3];
    uint16_t sentinel_port[3];
    char sentinel_log[3][IT_PATH_MAX];
    struct instance inst[SOAK_INSTANCES];
    pid_t haproxy;
    struct it_server lb, stats; /* haproxy's front and stats page */
    char haproxy_log[IT_PATH_MAX];
    struct db_target target; /* shard 0: everything that is not a sale */
    char redirect_lib[IT_PATH_MAX];
    char faketime_lib[IT_PATH_MAX];
    char pay_secret[65];
};

extern struct world world;

/* Start everything; 0 or -1 (said why). */
int world_start(void);
/* SIGTERM every instance (one that does not exit cleanly is reported to
 * the checker). */
void instances_stop(void);
/* Stop haproxy, the proxies and the backends. */
void world_stop(void);
/* (Re)start instance i on its port with its environment. 0 or -1. */
int instance_start(int i);
/* SIGTERM instance i and wait for it; its exit status in *status. 0, or
 * -1 when it did not exit within the drain and a bit. */
int instance_term(int i, int *status);
/* haproxy's status of instance i ("UP", "DOWN", ...) into out. */
void lb_status(int i, char *out, size_t cap);
/* Which redis server the sentinels name as master now (0 or 1), -1 when
 * they cannot say (or the shape is a cluster). */
int redis_master_now(void);
/* True when the replica redis[1 - m] is connected and in sync with m. */
bool redis_replica_synced(int m);
/* Whether Redis is whole again: Sentinel names a master whose replica is
 * in sync; or every cluster node is up and says cluster_state:ok, every
 * primary has a replica in sync and no slot is being moved. Says what is
 * missing into why when not. */
bool redis_whole(char *why, size_t cap);
/* The port of the Redis server that holds voucher's async sale keys
 * ({v:ID}): Sentinel's master, or the primary that owns the tag's slot.
 * 0 when nobody can say. */
uint16_t redis_port_of_sale(int64_t voucher);
/* A connection to shard s's primary (timeouts of timeout_s), NULL when it
 * does not answer. */
MYSQL *world_mysql(int shard, unsigned timeout_s);

/* ---- the cluster (world.c) ---- */

/* One node as the cluster sees it. */
struct cnode {
    bool up;      /* it answers */
    bool primary; /* it says it is one (ROLE) */
    int of;       /* a replica: which node it replicates, else -1 */
    char id[41];
};

/* Every node's role, asked of each (the nodes that do not answer are
 * down). 0, or -1 when no node answered. */
int cluster_nodes_read(struct cnode out[SOAK_REDIS_MAX]);
/* The node that owns slot, -1 when none answers. */
int cluster_owner(unsigned slot);
/* Start node k again on its port, with its files (its nodes.conf says
 * where it belongs). 0 or -1. */
int cluster_node_start(int k);
/* Move slot from node from to node to, as redis-cli --cluster reshard
 * does (the target IMPORTING, the source MIGRATING, the keys MIGRATEd
 * batch at a time with pause_ms between, then the slot assigned on every
 * primary). 0, or -1 (said why into why). */
int cluster_slot_move(unsigned slot, int from, int to, int batch, int pause_ms,
                      char *why, size_t cap);
/* redis-cli --cluster fix: close a move left half done. 0 or -1. */
int cluster_slot_fix(void);
/* A copy of instance i's server (port, pid). */
struct it_server instance_get(int i);

/* ---- the log watcher (world.c) ---- */

enum logev {
    LOGEV_REBUILT,   /* async sale rebuilt from mysql */
    LOGEV_DISAGREE,  /* async sale disagrees with mysql */
    LOGEV_REFUND,    /* payment refused, to refund */
    LOGEV_REFUND2,   /* second payment of a paid order, to refund */
    LOGEV_FAILPOINT, /* failpoint fired */
    LOGEV_ID_REUSED, /* order id already used */
    LOGEV_DEAD,      /* async order can never be written */
    LOGEV_NO_RETURN, /* async units not returned to redis yet (owed) */
    LOGEV_SANITIZER, /* AddressSanitizer or UndefinedBehaviorSanitizer */
    LOGEV_COUNT
};

struct logline {
    int64_t at_ms; /* soak_ms() when the watcher read it (within 0.5 s) */
    int inst;
    const char *file; /* the log it is in (the watcher's) */
    enum logev kind;
    int64_t voucher, order;
    bool missing; /* a disagreement: Redis had no state for the sale */
    char txn[40];
    char text[240];
};

/* Start the watcher; log_watch_stop() reads what is left and stops. */
void log_watch_start(void);
void log_watch_stop(void);
/* Every instance log started so far is watched: world.c adds each. */
void log_watch_add(int inst, const char *path);
/* The lines seen (owned by the watcher; valid after log_watch_stop()). */
const struct logline *log_lines_all(size_t *n);

/* ---- the history (workload.c) ---- */

enum op {
    OP_BUY,
    OP_PAY,
    OP_CANCEL,
    OP_READ,
    OP_CODE,    /* a login code asked for (POST /api/auth/code) */
    OP_LOGIN,   /* the login with it */
    OP_SALE,    /* an admin creates a voucher */
    OP_CONTROL, /* an admin's change of a sale, a ban, a refund (ctl) */
    OP_QUEUE,   /* a join of a waiting room, or a read of the place */
    OP_ADMIN,   /* an admin's login, or a read of refunds or the audit */
    OP_LOGOUT,  /* a buyer logs out everywhere */
    OP_COUNT
};

extern const char *const op_names[OP_COUNT];

/* What an admin's change (OP_CONTROL, and OP_SALE's create) was. */
enum ctl {
    CTL_NONE,
    CTL_CREATE,
    CTL_PAUSE,
    CTL_RESUME,
    CTL_STOP,
    CTL_RESTOCK,
    CTL_PATCH,
    CTL_DELETE,
    CTL_BAN,
    CTL_UNBAN,
    CTL_REFUND_DONE,
    CTL_COUNT
};

extern const char *const ctl_names[CTL_COUNT];

struct hist {
    int64_t sent_ms, done_ms; /* soak_ms() */
    enum op op;
    long status;   /* 0: no answer */
    char code[24]; /* error code, "" */
    int64_t user, voucher, order;
    char txn[24];
    bool ambiguous;   /* 503 "the outcome is unknown" */
    char ostatus[12]; /* the order's status in a 200 of cancel or pay */
    char body[120];   /* the start of the answer */
    /* An admin's change: which, its Idempotency-Key (the same on each
     * retry), a restock's units or an edit's new stock (0: none), and
     * whether the answer was a replay (Idempotent-Replayed: true). */
    enum ctl ctl;
    char key[32];
    int64_t units;
    bool replayed;
    /* A purchase of a queue sale with a ticket (and OP_QUEUE): when its
     * join was sent, the ticket's expiry (soak_ms(); 0: no ticket) and
     * whether the buyer joined late (a ticket's life after the begin). */
    int64_t joined_ms, ticket_exp_ms;
    bool late;
};

/* Record one request (thread-safe). */
void hist_add(const struct hist *h);
/* Everything recorded (valid once the workload stopped). */
struct hist *hist_all(size_t *n);

/* A sale the workload made. */
struct sale {
    int64_t id;
    bool async;
    int64_t stock;
    int64_t begin_ms, end_ms; /* soak_ms() */
    int64_t created_ms;
    bool crowd; /* the canary's big sale */
    bool queue; /* admission through a waiting room */
    bool gone;  /* deleted, or stopped: the operator leaves it alone */
};

void workload_start(void);
/* Stop the clients (each finishes its request) and join them. */
void workload_stop(void);
/* Requests sent so far. */
size_t hist_count(void);

/* ---- the nemesis (nemesis.c) ---- */

enum fault_kind {
    F_KILL,         /* SIGKILL an instance, restart it later */
    F_STOP,         /* SIGSTOP an instance, SIGCONT later */
    F_ROLL,         /* rolling restart: SIGTERM, drain, start, one by one */
    F_REDIS_KILL,   /* SIGKILL the Redis master: Sentinel fails over */
    F_MYSQL_KILL,   /* SIGKILL a shard's MariaDB, restart it (crash recovery) */
    F_MYSQL_LAG,    /* a shard's MariaDB read replica stops applying */
    F_REDIS_LAG,    /* replication into a Redis replica stalls */
    F_LATENCY,      /* an instance's link to MySQL or Redis is slow */
    F_LOSS,         /* ... loses packets (retransmission delays) */
    F_PARTITION,    /* ... is cut off (stalled, new connections too) */
    F_CLOCK,        /* an instance's clock steps */
    F_PRIMARY_KILL, /* SIGKILL a cluster primary: its replica takes over */
    F_SLOT_MOVE,    /* a live async sale's slot moves to another primary */
    F_SMS,          /* the SMS webhook is slow, hangs, fails or refuses */
    F_KIND_COUNT
};

extern const char *const fault_names[F_KIND_COUNT];

/* Whether a fault of kind k fails Redis over to a replica, which may
 * lack the last writes: it explains an async sale rebuilt from MySQL. */
bool fault_fails_over(enum fault_kind k);
/* Whether a fault of kind k may hold up a unit's return to Redis (an
 * instance down, Redis or MySQL away, a slot on the move). */
bool fault_delays_returns(enum fault_kind k);

struct fault {
    enum fault_kind kind;
    int inst;         /* the instance, or -1 */
    int64_t start_ms; /* soak_ms() */
    int64_t heal_ms;  /* when it was healed, 0 while active */
    char what[128];   /* e.g. "instance 2's link to redis: 300 ms" */
};

/* Draw faults until nemesis_stop(), which heals every one. The
 * processes the nemesis restarted live until nemesis_exit(), after
 * world_stop(). */
void nemesis_start(void);
void nemesis_stop(void);
void nemesis_exit(void);
/* Every fault injected (valid after nemesis_stop()). */
const struct fault *faults_all(size_t *n);

/* ---- the outside service (outside.c) ---- */

enum sms_mode { SMS_OK, SMS_SLOW, SMS_HANG, SMS_ERROR, SMS_REFUSE };

/* Start the SMS webhook on a free loopback port (sms_sink_port()),
 * checking signatures with secret_hex (64 hex digits). 0 or -1. */
int sms_sink_start(const char *secret_hex);
uint16_t sms_sink_port(void);
/* How it answers from now on (slow_ms for SMS_SLOW). */
void sms_sink_set(enum sms_mode m, int slow_ms);
/* The requests it read so far, and those with a wrong signature. */
void sms_sink_counts(long *requests, long *bad_signatures);
void sms_sink_stop(void);

/* ---- the checker (checker.c) ---- */

/* Record a violation of kind about user, voucher or order (0: none) at
 * at_ms (soak_ms()), for the checker's report (thread-safe). */
void soak_violation(const char *kind, int64_t user, int64_t voucher,
                    int64_t order, int64_t at_ms, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* While only the SMS webhook failed, the requests that do not need it
 * were answered within their budget, and every code request within its
 * 4 s deadline (check_outside.c). */
void check_outside(const struct hist *h, size_t nh, const struct fault *f,
                   size_t nf);

/* Check the history against MySQL, Redis and the logs (with the
 * instances stopped and the backends up), print the tables and the
 * verdict. 0 when every invariant held, else 1. */
int checker_run(void);
/* The stock sampler: every voucher's stock, every second, never < 0. */
void sampler_run_start(void);
void sampler_run_stop(void);
/* A problem seen while running (an instance that died by itself, one
 * that did not come back): reported with the violations. */
void soak_problem(const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
