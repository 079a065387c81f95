/*
 * nemesis.c - the faults of make soak. Every 3 to 8 s, while fewer than
 * one or two (drawn each time) are active, the nemesis draws a kind and a
 * target, injects it and heals it after a random while (2 to 15 s): an
 * instance SIGKILLed (restarted on its port) or SIGSTOPped (continued),
 * a rolling restart (each instance SIGTERMed, drained and started again
 * once haproxy has the previous one back), a shard's MariaDB SIGKILLed
 * and restarted, a shard's MariaDB replica or the replication into a
 * Redis replica held back, an instance's link to MySQL (one shard or
 * all) or Redis (one cluster primary or all) slowed, lossy or cut (its
 * own proxies), and an instance's clock stepped (libfaketime's file).
 * Redis under Sentinel: the master SIGKILLed (Sentinel promotes the
 * replica; the old master comes back as a replica of the new one). A
 * Redis Cluster: a primary SIGKILLed (its replica takes over; the old one
 * comes back as its replica), and the slot of a live async sale moved to
 * another primary while it sells. And the SMS webhook slow, hung, failing
 * or refusing (outside.c). It also notices an instance that died by
 * itself: reported, and started again.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/redis_slot.h"
#include "tests/soak/soak.h"

#define ACTIVE_MAX 4

const char *const fault_names[F_KIND_COUNT] = {
    [F_KILL] = "instance-kill",
    [F_STOP] = "instance-stop",
    [F_ROLL] = "rolling-restart",
    [F_REDIS_KILL] = "redis-master-kill",
    [F_MYSQL_KILL] = "mariadb-kill",
    [F_MYSQL_LAG] = "mariadb-replica-lag",
    [F_REDIS_LAG] = "redis-replica-lag",
    [F_LATENCY] = "latency",
    [F_LOSS] = "loss",
    [F_PARTITION] = "partition",
    [F_CLOCK] = "clock-step",
    [F_PRIMARY_KILL] = "redis-primary-kill",
    [F_SLOT_MOVE] = "redis-slot-move",
    [F_SMS] = "sms-webhook",
};

/* How often each kind is drawn, out of their sum: the Sentinel shape's
 * failover, or the cluster's two faults. */
static const int weight[F_KIND_COUNT] = {
    [F_KILL] = 10,      [F_STOP] = 10,      [F_ROLL] = 4,
    [F_REDIS_KILL] = 8, [F_MYSQL_KILL] = 7, [F_MYSQL_LAG] = 6,
    [F_REDIS_LAG] = 7,  [F_LATENCY] = 10,   [F_LOSS] = 8,
    [F_PARTITION] = 10, [F_CLOCK] = 8,      [F_PRIMARY_KILL] = 8,
    [F_SLOT_MOVE] = 8,  [F_SMS] = 8,
};

static int kind_weight(enum fault_kind k)
{
    bool cluster = soak_cfg.redis == SOAK_REDIS_CLUSTER;

    if ((k == F_REDIS_KILL && cluster) ||
        ((k == F_PRIMARY_KILL || k == F_SLOT_MOVE) && !cluster))
        return 0;
    return weight[k];
}

bool fault_fails_over(enum fault_kind k)
{
    return k == F_REDIS_KILL || k == F_PRIMARY_KILL;
}

bool fault_delays_returns(enum fault_kind k)
{
    return k != F_MYSQL_LAG && k != F_REDIS_LAG && k != F_CLOCK;
}

struct active {
    size_t idx; /* in nem.f */
    enum fault_kind kind;
    int inst;
    int redis; /* the Redis server killed, or whose proxy holds back */
    int shard; /* the MariaDB shard killed or held back */
    int64_t heal_at;
    struct it_proxy *px[2 * SOAK_REDIS_MAX];
    int npx;
};

/* A slot on the move, in a thread of its own (it takes seconds). */
struct move {
    size_t idx;
    int64_t voucher;
    unsigned slot;
    int from, to, batch, pause_ms;
    char what[128]; /* its fault's (nem.f may move meanwhile) */
};

static struct {
    pthread_mutex_t mu; /* f, n, and the roll's request and exit */
    pthread_cond_t cond;
    struct fault *f;
    size_t n, cap;
    pthread_t th, roll_th, move_th;
    /* The roll's thread takes one request at a time. */
    bool roll_req, exit, healed;
    size_t roll_idx;
    atomic_int roll_running;
    atomic_int move_running; /* move_th runs (joined before the next) */
    bool move_joinable;
    struct move move;
    atomic_int stop;
    struct active act[ACTIVE_MAX];
    int nact;
    struct rng r;
} nem = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static size_t fault_add(enum fault_kind kind, int inst, const char *what)
{
    size_t idx;

    pthread_mutex_lock(&nem.mu);
    if (nem.n == nem.cap) {
        nem.cap = nem.cap ? nem.cap * 2 : 256;
        nem.f = xrealloc(nem.f, nem.cap * sizeof(*nem.f));
    }
    idx = nem.n++;
    memset(&nem.f[idx], 0, sizeof(nem.f[idx]));
    nem.f[idx].kind = kind;
    nem.f[idx].inst = inst;
    nem.f[idx].start_ms = soak_ms();
    snprintf(nem.f[idx].what, sizeof(nem.f[idx].what), "%s", what);
    pthread_mutex_unlock(&nem.mu);
    say("fault %s: %s", fault_names[kind], what);
    return idx;
}

static void fault_healed(size_t idx)
{
    pthread_mutex_lock(&nem.mu);
    nem.f[idx].heal_ms = soak_ms();
    pthread_mutex_unlock(&nem.mu);
}

const struct fault *faults_all(size_t *n)
{
    *n = nem.n;
    return nem.f;
}

/* ---- instances ---- */

/* Instance i's pid (0: down), under the world's lock. */
static pid_t inst_pid(int i)
{
    return instance_get(i).pid;
}

static bool inst_busy(int i)
{
    for (int k = 0; k < nem.nact; k++)
        if (nem.act[k].inst == i)
            return true;
    return false;
}

/* An instance that died while nobody was killing it: a crash, reported
 * and started again; and one down that no fault holds down (its start
 * failed): started again, every few seconds. */
static void crashes_look(void)
{
    static int64_t retry_at[SOAK_INSTANCES];

    for (int i = 0; i < SOAK_INSTANCES; i++) {
        struct instance *in = &world.inst[i];
        pid_t pid, died;
        int status;

        if (atomic_load(&nem.roll_running))
            return; /* the roll waits for its own */
        pthread_mutex_lock(&world.mu);
        pid = died = in->srv.pid;
        if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid)
            in->srv.pid = pid = 0;
        else
            died = 0;
        pthread_mutex_unlock(&world.mu);
        if (died)
            soak_problem("instance-crashed",
                         "instance %d (pid %d) died by itself (status 0x%x) "
                         "at %.1f s; log %s",
                         i + 1, (int)died, (unsigned)status, soak_ms() / 1e3,
                         in->srv.log_path);
        if (pid == 0 && !inst_busy(i) && soak_ms() >= retry_at[i]) {
            retry_at[i] = soak_ms() + 3000;
            instance_start(i);
        }
    }
}

/* One rolling restart. */
static void roll(size_t idx)
{
    for (int i = 0; i < SOAK_INSTANCES && !atomic_load(&nem.stop); i++) {
        int64_t deadline;
        char st[32] = "";
        int status;

        if (instance_term(i, &status) != 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            soak_problem("instance-unclean-exit",
                         "instance %d did not exit cleanly on SIGTERM in a "
                         "rolling restart at %.1f s (status 0x%x); log %s",
                         i + 1, soak_ms() / 1e3, (unsigned)status,
                         world.inst[i].srv.log_path);
        instance_start(i);
        deadline = util_mono_ms() + 15000;
        while (strncmp(st, "UP", 2) != 0 && util_mono_ms() < deadline) {
            sleep_ms(250);
            lb_status(i, st, sizeof(st));
        }
    }
    fault_healed(idx);
    atomic_store(&nem.roll_running, 0);
}

/*
 * The processes a thread starts die with it (the harness's children
 * have PR_SET_PDEATHSIG), so the threads that start instances and
 * backends live until nemesis_exit(): this one runs the rolls.
 */
static void *roll_run(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&nem.mu);
    for (;;) {
        while (!nem.roll_req && !nem.exit)
            pthread_cond_wait(&nem.cond, &nem.mu);
        if (nem.exit)
            break;
        size_t idx = nem.roll_idx;

        nem.roll_req = false;
        pthread_mutex_unlock(&nem.mu);
        roll(idx);
        pthread_mutex_lock(&nem.mu);
    }
    pthread_mutex_unlock(&nem.mu);
    return NULL;
}

/* ---- inject and heal ---- */

static void proxies_ctl(struct active *a, const char *cmd)
{
    for (int k = 0; k < a->npx; k++)
        if (it_proxy_ctl(a->px[k], cmd) != 0)
            say("proxy command %s failed", cmd);
}

static void clock_write(int i, const char *offset)
{
    FILE *f = fopen(world.inst[i].clock_file, "w");

    if (f) {
        fprintf(f, "%s\n", offset);
        fclose(f);
    }
}

/* A shard drawn (no draw with one shard, so that the seeds of the
 * one-shard shape keep their sequence). */
static int shard_draw(void)
{
    return soak_cfg.shards > 1 ? (int)rng_range(&nem.r, 0, soak_cfg.shards - 1)
                               : 0;
}

/* A cluster primary drawn, other than not (-1: any); -1 when none
 * answers. */
static int primary_draw(int not )
{
    struct cnode n[SOAK_REDIS_MAX];
    int p[SOAK_REDIS_MAX], np = 0;

    if (cluster_nodes_read(n) != 0)
        return -1;
    for (int k = 0; k < world.nredis; k++)
        if (n[k].up && n[k].primary && k != not )
            p[np++] = k;
    return np ? p[rng_range(&nem.r, 0, np - 1)] : -1;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* One of the three newest async sales on sale now (the service keeps
 * its times in UTC), 0 when none. */
static int64_t sale_draw(void)
{
    int64_t ids[3 * SOAK_SHARDS_MAX];
    int n = 0;

    for (int s = 0; s < soak_cfg.shards; s++) {
        MYSQL *my = world_mysql(s, 2);
        MYSQL_RES *res = NULL;
        MYSQL_ROW row;

        if (my &&
            mysql_query(my, "SELECT voucher_id FROM seckill_vouchers WHERE "
                            "purchase_mode = 1 AND begin_time <= "
                            "UTC_TIMESTAMP() AND end_time > UTC_TIMESTAMP() "
                            "ORDER BY voucher_id DESC LIMIT 3") == 0 &&
            (res = mysql_store_result(my)))
            while ((row = mysql_fetch_row(res)) && n < 3 * SOAK_SHARDS_MAX)
                ids[n++] = strtoll(row[0], NULL, 10);
        if (res)
            mysql_free_result(res);
        if (my)
            mysql_close(my);
    }
    if (!n)
        return 0;
    qsort(ids, (size_t)n, sizeof(ids[0]), cmp_desc);
    return ids[rng_range(&nem.r, 0, (n < 3 ? n : 3) - 1)];
}

/* Whether a fault of kind is active (in nem.act). */
static bool kind_active(enum fault_kind kind)
{
    for (int k = 0; k < nem.nact; k++)
        if (nem.act[k].kind == kind)
            return true;
    return false;
}

/* Whether kind can be injected now; picks its target into a. */
static bool pick_target(enum fault_kind kind, struct active *a)
{
    int free_inst[SOAK_INSTANCES], nfree = 0, up = 0;
    bool moving = atomic_load(&nem.move_running);

    /* The SMS webhook fails alone: what it may not delay is judged
     * while nothing else could (check_outside.c). */
    for (int k = 0; k < nem.nact; k++)
        if (nem.act[k].kind == F_SMS || kind == F_SMS)
            return false;
    if (kind == F_SMS && moving)
        return false;
    /* One of each backend fault at a time. */
    if ((kind == F_REDIS_KILL || kind == F_MYSQL_KILL || kind == F_MYSQL_LAG ||
         kind == F_REDIS_LAG || kind == F_PRIMARY_KILL) &&
        kind_active(kind))
        return false;
    /* A slot moves between two primaries that stay up, and its keys
     * travel through the replication proxies: no primary killed, and no
     * replication held back, meanwhile. */
    if ((kind == F_SLOT_MOVE &&
         (moving || kind_active(F_PRIMARY_KILL) || kind_active(F_REDIS_LAG))) ||
        ((kind == F_PRIMARY_KILL || kind == F_REDIS_LAG) && moving &&
         soak_cfg.redis == SOAK_REDIS_CLUSTER))
        return false;
    /* A roll has every instance in turn: no other fault of one now. */
    if (atomic_load(&nem.roll_running) &&
        (kind == F_ROLL || kind == F_KILL || kind == F_STOP ||
         kind == F_CLOCK || kind == F_LATENCY || kind == F_LOSS ||
         kind == F_PARTITION))
        return false;
    for (int i = 0; i < SOAK_INSTANCES; i++) {
        bool busy = inst_busy(i);

        if (!busy)
            free_inst[nfree++] = i;
        if (inst_pid(i) > 0 && !world.inst[i].stopped)
            up++;
    }
    switch (kind) {
    case F_ROLL:
        return nfree == SOAK_INSTANCES;
    case F_KILL:
    case F_STOP:
        /* At least one instance keeps serving. */
        if (up < 2 || !nfree)
            return false;
        /* fall through */
    case F_CLOCK:
    case F_LATENCY:
    case F_LOSS:
    case F_PARTITION:
        if (!nfree)
            return false;
        a->inst = free_inst[rng_range(&nem.r, 0, nfree - 1)];
        return inst_pid(a->inst) > 0 || kind != F_KILL;
    case F_REDIS_KILL:
        if (soak_cfg.canary)
            return false; /* a failover may explain away a repair */
        a->redis = redis_master_now();
        return a->redis >= 0;
    case F_PRIMARY_KILL:
        if (soak_cfg.canary)
            return false;
        a->redis = primary_draw(-1);
        return a->redis >= 0;
    case F_REDIS_LAG:
        a->redis = soak_cfg.redis == SOAK_REDIS_CLUSTER ? primary_draw(-1)
                                                        : redis_master_now();
        return a->redis >= 0;
    case F_SLOT_MOVE: {
        struct cnode n[SOAK_REDIS_MAX];
        int64_t v = sale_draw();
        char tag[40];

        if (!v || cluster_nodes_read(n) != 0)
            return false;
        for (int k = 0; k < world.nredis; k++)
            if (!n[k].up)
                return false; /* a node on its way back */
        snprintf(tag, sizeof(tag), "{v:%lld}", (long long)v);
        nem.move.slot = redis_key_slot_str(tag);
        nem.move.from = cluster_owner(nem.move.slot);
        nem.move.to = primary_draw(nem.move.from);
        /* A slow move: the sale's few keys (about ten) split between
         * the two primaries for up to a few seconds. */
        nem.move.batch = (int)rng_range(&nem.r, 1, 5);
        nem.move.pause_ms = (int)rng_range(&nem.r, 50, 1000);
        nem.move.voucher = v;
        return nem.move.from >= 0 && nem.move.to >= 0;
    }
    case F_MYSQL_KILL:
    case F_MYSQL_LAG:
        a->shard = shard_draw();
        return true;
    default:
        return true;
    }
}

/* The slot move of nem.move, in its own thread. */
static void *move_main(void *arg)
{
    struct move *m = arg;
    char why[200] = "";

    if (cluster_slot_move(m->slot, m->from, m->to, m->batch, m->pause_ms, why,
                          sizeof(why)) != 0) {
        say("the move of slot %u failed (%s): redis-cli --cluster fix", m->slot,
            why);
        if (cluster_slot_fix() != 0)
            soak_problem("slot-move",
                         "slot %u could not be moved (%s) nor the cluster "
                         "fixed",
                         m->slot, why);
    }
    fault_healed(m->idx);
    say("healed: %s", m->what);
    atomic_store(&nem.move_running, 0);
    return NULL;
}

/* "redis node 3" and the like, for a fault's description. */
static const char *node_name(int k)
{
    static char name[SOAK_REDIS_MAX][40];

    snprintf(name[k], sizeof(name[k]), "redis node %d (%u)", k + 1,
             (unsigned)world.redis[k].port);
    return name[k];
}

/* "mariadb" with one shard, "mariadb shard 1" with more. */
static const char *shard_name(int s)
{
    static char name[SOAK_SHARDS_MAX][24];

    if (soak_cfg.shards == 1)
        return "mariadb";
    snprintf(name[s], sizeof(name[s]), "mariadb shard %d", s);
    return name[s];
}

/* An instance's links to MySQL or Redis (drawn), into a->px; what they
 * are into what. */
static void links_draw(struct active *a, struct instance *in, char *what,
                       size_t cap)
{
    bool mysql = rng_chance(&nem.r, 50);

    if (mysql) {
        /* One shard's links, or every shard's. */
        int s = soak_cfg.shards > 1 ? (int)rng_range(&nem.r, 0, soak_cfg.shards)
                                    : soak_cfg.shards;

        for (int k = 0; k < soak_cfg.shards; k++)
            if (s == soak_cfg.shards || s == k) {
                a->px[a->npx++] = &in->px_mysql[k];
                a->px[a->npx++] = &in->px_replica[k];
            }
        snprintf(what, cap, "%s",
                 s == soak_cfg.shards ? "mariadb" : shard_name(s));
    } else if (soak_cfg.redis == SOAK_REDIS_CLUSTER && rng_chance(&nem.r, 50)) {
        /* One primary's link (an instance talks to primaries only). */
        int k = primary_draw(-1);

        if (k < 0)
            k = 0;
        a->px[a->npx++] = &in->px_redis[k];
        snprintf(what, cap, "%s", node_name(k));
    } else {
        for (int k = 0; k < world.nredis; k++)
            a->px[a->npx++] = &in->px_redis[k];
        snprintf(what, cap, "redis");
    }
}

static void inject(enum fault_kind kind, struct active *a)
{
    struct instance *in = a->inst >= 0 ? &world.inst[a->inst] : NULL;
    char what[128], cmd[32], link[40];
    int64_t dur = rng_range(&nem.r, 3000, 15000);
    pid_t pid;

    a->kind = kind;
    switch (kind) {
    case F_KILL:
        pthread_mutex_lock(&world.mu);
        pid = in->srv.pid;
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            in->srv.pid = 0;
        }
        pthread_mutex_unlock(&world.mu);
        dur = rng_range(&nem.r, 1000, 8000);
        snprintf(what, sizeof(what), "instance %d SIGKILLed for %lld ms",
                 a->inst + 1, (long long)dur);
        break;
    case F_STOP:
        pthread_mutex_lock(&world.mu);
        if (in->srv.pid > 0) {
            kill(in->srv.pid, SIGSTOP);
            in->stopped = true;
        }
        pthread_mutex_unlock(&world.mu);
        dur = rng_range(&nem.r, 1000, 10000);
        snprintf(what, sizeof(what), "instance %d SIGSTOPped for %lld ms",
                 a->inst + 1, (long long)dur);
        break;
    case F_ROLL:
        a->idx = fault_add(kind, -1,
                           "every instance SIGTERMed and started "
                           "again, one after another");
        atomic_store(&nem.roll_running, 1);
        pthread_mutex_lock(&nem.mu);
        nem.roll_idx = a->idx;
        nem.roll_req = true;
        pthread_cond_broadcast(&nem.cond);
        pthread_mutex_unlock(&nem.mu);
        a->heal_at = -1; /* the roll heals itself */
        return;
    case F_SLOT_MOVE:
        if (nem.move_joinable)
            pthread_join(nem.move_th, NULL);
        snprintf(what, sizeof(what),
                 "slot %u (sale %lld) from %s to node %d, %d keys a "
                 "batch %d ms apart",
                 nem.move.slot, (long long)nem.move.voucher,
                 node_name(nem.move.from), nem.move.to + 1, nem.move.batch,
                 nem.move.pause_ms);
        snprintf(nem.move.what, sizeof(nem.move.what), "%s", what);
        nem.move.idx = a->idx = fault_add(kind, -1, what);
        atomic_store(&nem.move_running, 1);
        nem.move_joinable =
            pthread_create(&nem.move_th, NULL, move_main, &nem.move) == 0;
        if (!nem.move_joinable) {
            fault_healed(a->idx);
            atomic_store(&nem.move_running, 0);
        }
        a->heal_at = -1; /* the move heals itself */
        return;
    case F_REDIS_KILL:
        predis_kill(&world.redis[a->redis]);
        dur = rng_range(&nem.r, 4000, 15000);
        snprintf(what, sizeof(what),
                 "redis %c (the master) SIGKILLed for "
                 "%lld ms",
                 'a' + a->redis, (long long)dur);
        break;
    case F_PRIMARY_KILL:
        predis_kill(&world.redis[a->redis]);
        dur = rng_range(&nem.r, 4000, 15000);
        snprintf(what, sizeof(what), "%s (a primary) SIGKILLed for %lld ms",
                 node_name(a->redis), (long long)dur);
        break;
    case F_MYSQL_KILL:
        pmaria_kill(&world.db[a->shard]);
        dur = rng_range(&nem.r, 1000, 10000);
        snprintf(what, sizeof(what), "%s SIGKILLed for %lld ms",
                 shard_name(a->shard), (long long)dur);
        break;
    case F_MYSQL_LAG:
        if (pmaria_sql(&world.replica[a->shard], "STOP SLAVE SQL_THREAD"))
            say("could not stop the replica's SQL thread");
        snprintf(what, sizeof(what),
                 "the %s replica applies nothing "
                 "for %lld ms",
                 shard_name(a->shard), (long long)dur);
        break;
    case F_REDIS_LAG:
        a->px[a->npx++] = &world.px_repl[a->redis];
        if (rng_chance(&nem.r, 50)) {
            snprintf(cmd, sizeof(cmd), "stall");
        } else {
            snprintf(cmd, sizeof(cmd), "latency %lld",
                     (long long)rng_range(&nem.r, 200, 2000));
        }
        proxies_ctl(a, cmd);
        if (soak_cfg.redis == SOAK_REDIS_CLUSTER)
            snprintf(link, sizeof(link), "%s", node_name(a->redis));
        else
            snprintf(link, sizeof(link), "redis %c", 'a' + a->redis);
        snprintf(what, sizeof(what), "replication from %s: %s for %lld ms",
                 link, cmd, (long long)dur);
        break;
    case F_LATENCY:
    case F_LOSS:
    case F_PARTITION:
        links_draw(a, in, link, sizeof(link));
        if (kind == F_LATENCY) {
            snprintf(cmd, sizeof(cmd), "latency %lld",
                     (long long)rng_range(&nem.r, 20, 400));
            proxies_ctl(a, cmd);
        } else if (kind == F_LOSS) {
            snprintf(cmd, sizeof(cmd), "loss %lld",
                     (long long)rng_range(&nem.r, 5, 30));
            proxies_ctl(a, cmd);
        } else if (rng_chance(&nem.r, 70)) {
            snprintf(cmd, sizeof(cmd), "stall");
            proxies_ctl(a, cmd);
        } else {
            snprintf(cmd, sizeof(cmd), "refuse+cut");
            proxies_ctl(a, "refuse");
            proxies_ctl(a, "cut");
        }
        snprintf(what, sizeof(what),
                 "instance %d's link to %s: %s for "
                 "%lld ms",
                 a->inst + 1, link, cmd, (long long)dur);
        break;
    case F_CLOCK: {
        int64_t step = rng_range(&nem.r, 5, 300);

        snprintf(cmd, sizeof(cmd), "%c%lld", rng_chance(&nem.r, 50) ? '+' : '-',
                 (long long)step);
        clock_write(a->inst, cmd);
        snprintf(what, sizeof(what), "instance %d's clock %s s for %lld ms",
                 a->inst + 1, cmd, (long long)dur);
        break;
    }
    case F_SMS: {
        static const char *const how[] = {"slow", "hanging", "answering 500",
                                          "refusing connections"};
        int m = (int)rng_range(&nem.r, 0, 3), slow = 0;

        if (m == 0)
            slow = (int)rng_range(&nem.r, 500, 3000);
        sms_sink_set(m == 0   ? SMS_SLOW
                     : m == 1 ? SMS_HANG
                     : m == 2 ? SMS_ERROR
                              : SMS_REFUSE,
                     slow);
        if (slow)
            snprintf(what, sizeof(what),
                     "the SMS webhook slow (%d ms) for "
                     "%lld ms",
                     slow, (long long)dur);
        else
            snprintf(what, sizeof(what), "the SMS webhook %s for %lld ms",
                     how[m], (long long)dur);
        break;
    }
    default:
        return;
    }
    a->idx = fault_add(kind, a->inst, what);
    a->heal_at = soak_ms() + dur;
}

static void heal(struct active *a)
{
    char replicaof[32] = "";
    int m;

    switch (a->kind) {
    case F_KILL:
        instance_start(a->inst);
        break;
    case F_STOP:
        pthread_mutex_lock(&world.mu);
        if (world.inst[a->inst].srv.pid > 0)
            kill(world.inst[a->inst].srv.pid, SIGCONT);
        world.inst[a->inst].stopped = false;
        pthread_mutex_unlock(&world.mu);
        break;
    case F_REDIS_KILL:
        /* Back as a replica of whoever the sentinels promoted (as the
         * master again when they did not fail over). */
        m = redis_master_now();
        if (m >= 0 && m != a->redis)
            snprintf(replicaof, sizeof(replicaof), "127.0.0.1 %u",
                     (unsigned)world.redis[m].port);
        snprintf(world.redis[a->redis].replicaof,
                 sizeof(world.redis[a->redis].replicaof), "%s", replicaof);
        if (predis_start(&world.redis[a->redis]) != 0)
            soak_problem("backend-restart", "redis %c did not start again",
                         'a' + a->redis);
        break;
    case F_PRIMARY_KILL:
        /* Its nodes.conf brings it back into the cluster, where it finds
         * its replica promoted and follows it (or is the primary again
         * when the cluster had not failed it over yet). */
        if (cluster_node_start(a->redis) != 0)
            soak_problem("backend-restart", "%s did not start again",
                         node_name(a->redis));
        break;
    case F_MYSQL_KILL:
        if (pmaria_start(&world.db[a->shard]) != 0)
            soak_problem("backend-restart", "%s did not start again",
                         shard_name(a->shard));
        break;
    case F_MYSQL_LAG:
        pmaria_sql(&world.replica[a->shard], "START SLAVE SQL_THREAD");
        break;
    case F_REDIS_LAG:
    case F_LATENCY:
    case F_LOSS:
    case F_PARTITION:
        proxies_ctl(a, "heal");
        break;
    case F_CLOCK:
        clock_write(a->inst, "+0");
        break;
    case F_SMS:
        sms_sink_set(SMS_OK, 0);
        break;
    default:
        break;
    }
    fault_healed(a->idx);
    say("healed: %s", nem.f[a->idx].what);
}

static void act_remove(int k)
{
    nem.act[k] = nem.act[--nem.nact];
}

static void draw(void)
{
    int total = 0, x;
    enum fault_kind kind = F_KILL;
    struct active a;

    for (int k = 0; k < F_KIND_COUNT; k++)
        total += kind_weight((enum fault_kind)k);
    x = (int)rng_range(&nem.r, 0, total - 1);
    for (int k = 0; k < F_KIND_COUNT; k++) {
        if (x < kind_weight((enum fault_kind)k)) {
            kind = (enum fault_kind)k;
            break;
        }
        x -= kind_weight((enum fault_kind)k);
    }
    memset(&a, 0, sizeof(a));
    a.inst = -1;
    a.redis = -1;
    if (!pick_target(kind, &a))
        return; /* not now: the next draw */
    inject(kind, &a);
    if (a.heal_at >= 0 && nem.nact < ACTIVE_MAX)
        nem.act[nem.nact++] = a;
}

static void *nemesis_run(void *arg)
{
    int64_t next = soak_ms() + rng_range(&nem.r, 3000, 8000);
    int want = (int)rng_range(&nem.r, 1, 2);

    (void)arg;
    while (!atomic_load(&nem.stop)) {
        int64_t now = soak_ms();

        crashes_look();
        for (int k = 0; k < nem.nact;)
            if (now >= nem.act[k].heal_at) {
                heal(&nem.act[k]);
                act_remove(k);
            } else {
                k++;
            }
        if (now >= next) {
            int running = nem.nact + atomic_load(&nem.roll_running);

            if (running < want)
                draw();
            next = now + rng_range(&nem.r, 3000, 8000);
            want = (int)rng_range(&nem.r, 1, 2);
        }
        sleep_ms(100);
    }
    while (nem.nact) {
        heal(&nem.act[0]);
        act_remove(0);
    }
    while (atomic_load(&nem.roll_running) || atomic_load(&nem.move_running))
        sleep_ms(100);
    if (nem.move_joinable)
        pthread_join(nem.move_th, NULL);
    nem.move_joinable = false;
    crashes_look();
    /* Healed: stay until the end, for what this thread started. */
    pthread_mutex_lock(&nem.mu);
    nem.healed = true;
    pthread_cond_broadcast(&nem.cond);
    while (!nem.exit)
        pthread_cond_wait(&nem.cond, &nem.mu);
    pthread_mutex_unlock(&nem.mu);
    return NULL;
}

void nemesis_start(void)
{
    rng_seed(&nem.r, soak_cfg.seed, 7);
    if (pthread_create(&nem.th, NULL, nemesis_run, NULL) != 0 ||
        pthread_create(&nem.roll_th, NULL, roll_run, NULL) != 0)
        abort();
}

void nemesis_stop(void)
{
    atomic_store(&nem.stop, 1);
    pthread_mutex_lock(&nem.mu);
    while (!nem.healed)
        pthread_cond_wait(&nem.cond, &nem.mu);
    pthread_mutex_unlock(&nem.mu);
}

void nemesis_exit(void)
{
    pthread_mutex_lock(&nem.mu);
    nem.exit = true;
    pthread_cond_broadcast(&nem.cond);
    pthread_mutex_unlock(&nem.mu);
    pthread_join(nem.th, NULL);
    pthread_join(nem.roll_th, NULL);
}
