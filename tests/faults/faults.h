/*
 * faults.h - what the fault suite's files share (make test-faults): the
 * backends it breaks (a private Redis, a private MariaDB, the TCP proxy),
 * the fleet of seckilld instances, the client load, and the invariants
 * checked after every scenario (docs/reliability.md).
 *
 * backends.c  private redis-server and mariadbd, the proxy, MySQL helpers
 * load.c      the fleet, client threads, the stock sampler
 * check.c     the invariants and the recovery probe
 * faults.c    the scenarios, the table, main()
 * async.c     the scenarios of the asynchronous purchase mode (async/async.h)
 *
 * Threads: the load's client threads and the sampler run beside the
 * scenario's own thread; everything they share is behind a mutex or
 * atomic. The harness (tests/it/harness.h) is used for processes, HTTP and
 * tokens only.
 */
#ifndef SECKILL_FAULTS_H
#define SECKILL_FAULTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <mysql.h>

#include "tests/it/harness.h"

/* ---- MySQL ---- */

/* Where a scenario's data lives: the shared test database or a private
 * server. */
struct db_target {
    char host[64];
    unsigned port;
    char user[64];
    char pass[64];
    char db[64];
};

/* Connect with connect/read timeouts of timeout_s; NULL on failure. */
MYSQL *fdb_connect(const struct db_target *t, unsigned timeout_s);

/*
 * A voucher's stock (format argument: its id): its seckill_vouchers row
 * plus its segments, so that the suite also runs against vouchers created
 * with SECKILL_STOCK_SEGMENTS > 1 (store/store.h).
 */
#define STOCK_SQL                                                              \
    "SELECT s.stock + COALESCE((SELECT SUM(g.stock) FROM "                     \
    "seckill_stock_segments g WHERE g.voucher_id = s.voucher_id), 0) "         \
    "FROM seckill_vouchers s WHERE s.voucher_id = %lld"

/* First column of the first row as an integer (NULL reads -1). 0 or -1. */
int fdb_scalar(MYSQL *my, int64_t *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Run a statement without a result. 0 or the MySQL errno. */
unsigned fdb_exec(MYSQL *my, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- a private redis-server (DEBUG allowed) ---- */

struct predis {
    uint16_t port;
    pid_t pid;
    char log[IT_PATH_MAX];
    /* Set before the first start: keep every write in an append-only file
     * in this directory, fsynced before each reply (appendfsync always),
     * and load it at each start. Empty: no persistence. */
    char dir[IT_PATH_MAX];
    /* Set before a start: replicate "127.0.0.1 PORT" (empty: a master),
     * and environment overrides as it_env_build() takes them (NULL:
     * none), such as an LD_PRELOAD. */
    char replicaof[32];
    const char *const *env;
};

/* Start it (on a new port the first time, the same port after). 0 or -1. */
int predis_start(struct predis *r);
/* Copy r's append-only files (r->dir) into the directory to, replacing
 * what is there; while it runs, the copy ends at a whole command or in
 * the middle of the last one (which the server drops when it loads the
 * file). 0 or -1. */
int predis_copy_aof(const struct predis *r, const char *to);
/* Put the copy in from back in place of r's append-only files (r must be
 * down; its next start loads them). 0 or -1. */
int predis_restore_aof(struct predis *r, const char *from);
/* The integer answer to one command (a string that is a number counts),
 * -1 if it failed or answered something else. */
long long predis_int(uint16_t port, unsigned db, const char *fmt, ...);
/* SIGKILL it and reap it. */
void predis_kill(struct predis *r);
/* Send one command and do not wait for the answer (DEBUG SLEEP). */
int predis_fire(struct predis *r, const char *cmd);
/* Run one command and wait for the answer; 0 unless it failed. */
int predis_run(uint16_t port, unsigned db, const char *fmt, ...);

/* ---- a private MariaDB in a temporary directory ---- */

struct pmaria {
    char dir[64]; /* /tmp/seckill-faults-XXXXXX */
    char sock[IT_PATH_MAX];
    char log[IT_PATH_MAX];
    uint16_t port;
    pid_t pid;
    /* Set before pmaria_create() (0 and false otherwise): a server id
     * above 0 keeps a binary log (row format) and a relay log, for
     * replication; a replica is read-only and gets no database of its
     * own (it receives the primary's). */
    unsigned server_id;
    bool replica;
};

/* mariadb-install-db, start, then (unless a replica) database
 * seckill_fault with the schema and user seckill/seckill. 0 or -1. */
int pmaria_create(struct pmaria *m);
/* Run statements (several, separated by ';') as root over m's socket.
 * 0, or -1 with MariaDB's message on stderr. */
int pmaria_sql(struct pmaria *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Start the server on its port (after a kill: crash recovery). 0 or -1. */
int pmaria_start(struct pmaria *m);
/* SIGKILL mariadbd and reap it. */
void pmaria_kill(struct pmaria *m);
/* Stop it and remove its directory. */
void pmaria_destroy(struct pmaria *m);
/* Its database as a target. */
void pmaria_target(const struct pmaria *m, struct db_target *t);

/* ---- the TCP proxy: the harness's (tests/it/harness.h) ---- */

#define proxy it_proxy
#define proxy_start it_proxy_start
#define proxy_ctl it_proxy_ctl
#define proxy_stop it_proxy_stop

/* ---- the fleet of seckilld instances ---- */

#define FLEET_MAX 4
#define FLEET_ENV_MAX 12

struct fleet {
    pthread_mutex_t mu;
    struct it_server srv[FLEET_MAX];
    char *env[FLEET_MAX][FLEET_ENV_MAX + 1]; /* overrides, owned */
    char tag[FLEET_MAX][32];
    bool load[FLEET_MAX]; /* the load may send here */
    bool up[FLEET_MAX];
    int n;
    unsigned rr;
    /* every log an instance wrote during the scenario */
    char logs[32][IT_PATH_MAX];
    int nlogs;
};

/*
 * "SECKILL_REDIS_URL=..." given to every instance whose env does not name
 * one: the shared Redis, but a database of the suite's own (2), so that
 * the ids and locks of other tests running at the same time (db 1) never
 * mix with the suite's. Set by main().
 */
extern char faults_redis_env[128];
/* The same for SECKILL_MYSQL_URL: the suite's private MariaDB (see main()),
 * so that no other test's reset of seckill_test can pull a voucher away
 * mid-scenario. */
extern char faults_mysql_env[160];
/* That database's number. */
#define FAULTS_REDIS_DB 2

void fleet_init(struct fleet *f);
/*
 * Start instance number f->n with env overrides (NULL-terminated, copied);
 * load says whether the client load may use it. Returns its index or -1.
 */
int fleet_add(struct fleet *f, const char *tag, const char *const *env,
              bool load);
/* Restart instance i (after it died) with its env, or with env if not NULL.
 * 0 or -1. */
int fleet_restart(struct fleet *f, int i, const char *const *env);
/* Reap instance i if it died; true if it is gone. */
bool fleet_dead(struct fleet *f, int i);
/* Wait up to timeout_ms for instance i to die. true if it did. */
bool fleet_wait_dead(struct fleet *f, int i, int timeout_ms);
/* A copy of instance i (port and pid). */
struct it_server fleet_get(struct fleet *f, int i);
/* Allow or forbid the load on instance i. */
void fleet_set_load(struct fleet *f, int i, bool load);
/* Lines containing needle (and also, unless NULL) in every log the
 * fleet's instances wrote. */
int fleet_log_count(struct fleet *f, const char *needle, const char *also);
/* SIGTERM every instance; -1 if one did not exit cleanly. */
int fleet_stop(struct fleet *f);

/* ---- requests ---- */

/* One purchase attempt as the client saw it. */
struct attempt {
    int64_t user;
    long status;   /* 0: no answer (timeout, reset, refused) */
    char code[24]; /* the error code, "" for 201, 202 or no answer */
    int64_t order_id;
    bool ambiguous;  /* 503 "the outcome is unknown" (a COMMIT unanswered) */
    int64_t sent_ms; /* wall clock */
    int64_t done_ms;
    int inst;
};

/*
 * The request's outcome is known: 2xx, 4xx, or a 503 that says the backend
 * was unreachable (nothing was written). Not: no answer, a 500, or a 503
 * "the outcome is unknown".
 */
bool attempt_definite(const struct attempt *a);
/* A business answer: 2xx or 4xx other than 429 (the backends work). */
bool attempt_served(const struct attempt *a);
/* The purchase was answered bought: 201 (an order), or 202 (pending: an
 * async sale's order, promised to be written). */
bool attempt_sold(const struct attempt *a);
/* Fill a's status, code, order id (of a 201 or 202) and ambiguity from a
 * response. */
void attempt_from_resp(struct attempt *a, const struct it_resp *resp);

/*
 * POST /api/vouchers/{v}/seckill as user on srv with a timeout; fills a.
 */
void purchase_once(const struct it_server *srv, int inst, int64_t voucher,
                   int64_t user, long timeout_s, struct attempt *a);

/* ---- the load ---- */

struct load_cfg {
    int64_t voucher;
    int64_t user_first; /* users user_first, user_first + 1, ... */
    int threads;
    int think_ms;     /* pause between users per thread */
    long timeout_s;   /* client timeout per attempt */
    int max_attempts; /* per user: retries on 429, 5xx and no answer */
    int retry_ms;
};

#define LOAD_THREADS_MAX 32

struct load {
    struct load_cfg cfg;
    struct fleet *fleet;
    pthread_t th[LOAD_THREADS_MAX];
    atomic_int stop;
    atomic_int think_ms;
    atomic_llong next_user;
    pthread_mutex_t mu;
    struct attempt *att;
    size_t n, cap;
};

void load_start(struct load *l, struct fleet *f, const struct load_cfg *cfg);
/* Stop the clients (each finishes its current user) and join them. */
void load_stop(struct load *l);
/* Record an attempt made outside the client threads (probes, bursts). */
void load_record(struct load *l, const struct attempt *a);
/* Requests sent so far. */
size_t load_count(struct load *l);
/* Release the attempts. */
void load_free(struct load *l);

/* Samples the voucher's stock every 50 ms while the scenario runs. */
struct sampler {
    struct db_target db;
    int64_t voucher;
    pthread_t th;
    atomic_int stop;
    atomic_llong min_stock;
    atomic_long samples;
};

void sampler_start(struct sampler *s, const struct db_target *db,
                   int64_t voucher);
void sampler_stop(struct sampler *s);

/* ---- a scenario and its invariants ---- */

enum inv {
    INV_STOCK,     /* 1: stock + unpaid + paid == initial; never < 0 */
    INV_ONE_EACH,  /* 2: no (user, voucher) twice */
    INV_201_KEPT,  /* 3: every 201 order id is in MySQL */
    INV_4XX_CLEAN, /* 4: a definite 4xx left no order */
    INV_IDS,       /* 5: order ids never reused */
    INV_LIVE,      /* 6: stock reaches 0, no lock key without a TTL */
    INV_ASYNC,     /* 7: an async sale drained; Redis agrees with MySQL */
    INV_COUNT
};

#define LOSS_MAX 4

struct run {
    const char *name;
    int index;
    struct db_target db;
    /* Where the lock keys live, and an async sale's keys (the instances'
     * Redis). */
    uint16_t lock_redis_port;
    unsigned lock_redis_db;
    /* The voucher sells in async mode (202 pending, written by the
     * instances' writers): run_finish() waits for its stream to drain
     * and invariant 7 applies. */
    bool async;
    struct fleet fleet;
    int64_t voucher;
    int64_t stock0;
    int64_t user_first;
    struct load load;
    struct sampler sampler;
    int faults;
    int64_t recover_ms; /* slowest instance back to a definite answer */
    bool recovered;
    /* Times around a loss of the ID counter: ids answered before
     * loss[i].before_ms must all be smaller than ids sent after
     * loss[i].after_ms. */
    struct {
        int64_t before_ms, after_ms;
    } loss[LOSS_MAX];
    int nloss;
    /* A window (wall clock) whose 202s may be missing from MySQL: the
     * instances' Redis came back from an older file and forgot them. A
     * 202 whose reply came before lost_from_ms, or that was sent after
     * lost_to_ms, must be an order like any other. 0: no such window. */
    int64_t lost_from_ms, lost_to_ms;
    size_t lost_window; /* 202s in that window */
    size_t lost;        /* of them, not in MySQL */
    size_t resold;      /* 202s dead-lettered: the buyer already had the
                         * order the older file forgot */
    /* Scenario-specific check, folded into the invariant it names. */
    bool extra_ok[INV_COUNT];
    char extra_why[INV_COUNT][200];
    /* results */
    bool ok[INV_COUNT];
    char why[INV_COUNT][200];
    size_t requests, nsold, n4xx, n503, nindef; /* nsold: 201 or 202 */
    /* Purchases answered 503 "outcome unknown" (logs: a COMMIT, or an
     * async sale's script, went unanswered). */
    int ambiguous;
    int64_t orders, stock_final, min_stock;
    int64_t stock_at_heal; /* 0 would mean the faults met no purchase */
    bool setup_failed;
    char setup_why[200];
    int64_t secs;   /* the scenario's run time */
    char note[400]; /* printed below the table */
};

/* Mark a scenario-specific failure of invariant i. */
void run_extra_fail(struct run *r, enum inv i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Add to the scenario's note (printf-like, "; " between parts). */
void run_note(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * After the faults healed: every instance answers a purchase with a
 * definite answer within bound_ms (sets recover_ms), then the load runs
 * flat out until the stock is 0 (at most drain_ms), stops, an async
 * sale's writers drain its stream, and the invariants are checked. Stops
 * the fleet.
 */
void run_finish(struct run *r, int bound_ms, int drain_ms);

/* Check the invariants once the system is quiet (fills ok/why). */
void check_invariants(struct run *r);

/* ---- misc ---- */

void sleep_ms(int ms);
/* Log a line of the scenario's progress to stderr. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An admin POST /api/vouchers of a seckill voucher (purchaseMode async
 * if async); its id or -1. */
int64_t voucher_create(const struct it_server *srv, int64_t stock, bool async);

/* ---- an async sale's state in Redis ---- */

/* The numbers of voucher v's sale in the Redis at port/db; -1 where a
 * command failed. */
struct async_state {
    long long stock, buyers, stream, pending_hash, pending_group, dead;
};

void async_state_read(uint16_t port, unsigned db, int64_t v,
                      struct async_state *out);
/* Wait up to timeout_ms until v's stream, pending hash and the group's
 * pending list are empty; how long it took, or -1. */
int64_t async_wait_drained(uint16_t port, unsigned db, int64_t v,
                           int timeout_ms);

/* The async scenarios (async.c). */
void sc_async_kill_writer(struct run *r);
void sc_async_mysql_down(struct run *r);
void sc_async_redis_aof(struct run *r);
void sc_async_redis_older(struct run *r);
void sc_async_pause_writer(struct run *r);
void sc_async_unit_returns(struct run *r);
void sc_async_owed_unit(struct run *r);
void sc_async_return_between_reads(struct run *r);
void sc_async_late_preheat(struct run *r);

/* ---- what faults.c shares with async.c ---- */

/* The scenario could not set up its faults: it fails, saying why. */
void setup_fail(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* 8 client threads, ~50 users a second, 5 s timeout, 6 attempts each. */
struct load_cfg default_load(void);
/* Create the voucher through instance 0 (async if r->async), start the
 * sampler and the load. 0 or -1 (set-up failed). */
int run_start(struct run *r, struct load_cfg cfg);
/* Abandon a scenario whose set-up failed after the load started. */
void run_abort(struct run *r);
/* Instances "a" and "b" with env, then run_start(). 0; or -1 with the
 * scenario failed and what started stopped (the caller's own backends are
 * its to stop). */
int pair_start(struct run *r, const char *const *env, struct load_cfg cfg);
/* Whether pid is stopped (SIGSTOP). */
bool proc_stopped(pid_t pid);
/* Lines of instance i's current log that contain needle. */
int log_lines(struct run *r, int i, const char *needle);
/* "SECKILL_REDIS_URL=" for instances that use rd (database 0). */
void private_redis_env(const struct predis *rd, char *url, size_t len);
/* The suite's MariaDB (every scenario's orders live there). */
extern struct pmaria suite_db;
/* Every instance must give a definite answer this soon after healing. */
#define RECOVER_BOUND_MS 10000
/* The rest of the stock must sell within this after healing. */
#define DRAIN_MS 30000
/* An async sale's writers must empty its stream within this after the
 * load stopped. */
#define ASYNC_DRAIN_MS 20000
#define STOCK 1000

#endif
