/*
 * faults.h - what the fault suite's files share (make test-faults): the
 * backends it breaks (a private Redis, a private MariaDB, the TCP proxy),
 * the fleet of seckilld instances, the client load, and the invariants
 * checked after every scenario (docs/reliability.md).
 *
 * backends.c  private redis-server and mariadbd, the proxy, MySQL helpers
 * load.c      the fleet, client threads, the stock sampler
 * check.c     the six invariants and the recovery probe
 * faults.c    the scenarios, the table, main()
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

/* ---- a private redis-server (no persistence, DEBUG allowed) ---- */

struct predis {
    uint16_t port;
    pid_t pid;
    char log[IT_PATH_MAX];
};

/* Start it (on a new port the first time, the same port after). 0 or -1. */
int predis_start(struct predis *r);
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
};

/* mariadb-install-db, start, then database seckill_fault with the schema
 * and user seckill/seckill. 0 or -1. */
int pmaria_create(struct pmaria *m);
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
/* SIGTERM every instance; -1 if one did not exit cleanly. */
int fleet_stop(struct fleet *f);

/* ---- requests ---- */

/* One purchase attempt as the client saw it. */
struct attempt {
    int64_t user;
    long status;   /* 0: no answer (timeout, reset, refused) */
    char code[24]; /* the error code, "" for 201 or no answer */
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
/* Fill a's status, code, order id and ambiguity from a response. */
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
    INV_COUNT
};

#define LOSS_MAX 4

struct run {
    const char *name;
    int index;
    struct db_target db;
    uint16_t lock_redis_port; /* where the lock keys live */
    unsigned lock_redis_db;
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
    /* Scenario-specific check, folded into the invariant it names. */
    bool extra_ok[INV_COUNT];
    char extra_why[INV_COUNT][200];
    /* results */
    bool ok[INV_COUNT];
    char why[INV_COUNT][200];
    size_t requests, n201, n4xx, n503, nindef;
    int ambiguous; /* COMMITs answered 503 "outcome unknown" (logs) */
    int64_t orders, stock_final, min_stock;
    int64_t stock_at_heal; /* 0 would mean the faults met no purchase */
    bool setup_failed;
    char setup_why[200];
};

/* Mark a scenario-specific failure of invariant i. */
void run_extra_fail(struct run *r, enum inv i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * After the faults healed: every instance answers a purchase with a
 * definite answer within bound_ms (sets recover_ms), then the load runs
 * flat out until the stock is 0 (at most drain_ms), stops, and the
 * invariants are checked. Stops the fleet.
 */
void run_finish(struct run *r, int bound_ms, int drain_ms);

/* Check the invariants once the system is quiet (fills ok/why). */
void check_invariants(struct run *r);

/* ---- misc ---- */

void sleep_ms(int ms);
/* Log a line of the scenario's progress to stderr. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An admin POST /api/vouchers of a seckill voucher; its id or -1. */
int64_t voucher_create(const struct it_server *srv, int64_t stock);

#endif
