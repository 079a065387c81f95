/*
 * main.c - make soak: a randomized, history-checked run of three
 * seckilld instances behind haproxy under a mixed workload while a
 * nemesis breaks things (soak.h). Run from the repository's root with
 * .run/env.test sourced (tests/soak/run.sh does).
 *
 *   SOAK_SEED     the seed (printed at the start; random when unset)
 *   SOAK_MINUTES  how long the faults and the load run (10; decimals)
 *   SOAK_CANARY   1: plant the failpoints the checker must catch (a
 *                 FAILPOINTS=1 build); the run must then fail
 *   SOAK_BUYERS   buyer threads (6)
 *   SOAK_REDIS    sentinel or cluster: how the instances reach Redis
 *   SOAK_MYSQL_SHARDS  1 or 2: MariaDB primaries the sales are sharded over
 *   SOAK_HOSTNAME shared: the instances in namespaces of their own with
 *                 one long host name, as a deployment's pods; own: the
 *                 machine's
 *
 * The deployment's shape (SOAK_REDIS, SOAK_MYSQL_SHARDS, SOAK_HOSTNAME) is
 * drawn from the seed when unset: a cluster three times in ten, two shards
 * three times in ten, each on its own, so that about half the seeds run the
 * first shape (Sentinel, one primary) and every shape comes up. A canary run
 * keeps that first shape unless told otherwise. The first line printed says
 * which shape the run has, so that the seed alone replays it. The host
 * name is drawn from a stream of its own, half the runs shared.
 *
 * Exit status: 0 every invariant held, 1 a violation (the seed and the
 * window of history that shows it are printed), 2 the set-up failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "tests/soak/soak.h"

/* Out of 100: how often the seed draws a cluster, and two shards. */
#define DRAW_CLUSTER_PCT 30
#define DRAW_SHARDS_PCT 30

/* Settling: what the end waits for before it checks. */
#define SETTLE_BACKENDS_MS 60000
#define SETTLE_ASYNC_MS 60000

struct soak_cfg soak_cfg;
int64_t soak_t0_ms;

/* ---- random ---- */

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
    r->s = seed ^ (stream * 0x9e3779b97f4a7c15ULL);
}

uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int64_t rng_range(struct rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

bool rng_chance(struct rng *r, int pct)
{
    return (int)(rng_next(r) % 100) < pct;
}

int64_t soak_ms(void)
{
    return util_now_ms() - soak_t0_ms;
}

/* ---- settings ---- */

/* SOAK_REDIS and SOAK_MYSQL_SHARDS, or the seed's draw of what is
 * unset. 0 or -1 (said why). */
static int shape_read(void)
{
    const char *redis = getenv("SOAK_REDIS"),
               *shards = getenv("SOAK_MYSQL_SHARDS");
    struct rng r;

    rng_seed(&r, soak_cfg.seed, 3);
    /* Both drawn always, so that setting one keeps the other's draw. */
    bool cluster = rng_chance(&r, DRAW_CLUSTER_PCT);
    bool sharded = rng_chance(&r, DRAW_SHARDS_PCT);

    if (soak_cfg.canary)
        cluster = sharded = false;
    if (redis && *redis) {
        if (strcmp(redis, "sentinel") != 0 && strcmp(redis, "cluster") != 0) {
            fprintf(stderr, "soak: SOAK_REDIS must be sentinel or cluster\n");
            return -1;
        }
        cluster = strcmp(redis, "cluster") == 0;
    }
    if (shards && *shards) {
        if (strcmp(shards, "1") != 0 && strcmp(shards, "2") != 0) {
            fprintf(stderr, "soak: SOAK_MYSQL_SHARDS must be 1 or 2\n");
            return -1;
        }
        sharded = strcmp(shards, "2") == 0;
    }
    soak_cfg.redis = cluster ? SOAK_REDIS_CLUSTER : SOAK_REDIS_SENTINEL;
    soak_cfg.shards = sharded ? 2 : 1;
    {
        const char *hn = getenv("SOAK_HOSTNAME");
        struct rng h;

        rng_seed(&h, soak_cfg.seed, 7);
        soak_cfg.shared_hostname = rng_chance(&h, 50);
        if (hn && *hn) {
            if (strcmp(hn, "shared") != 0 && strcmp(hn, "own") != 0) {
                fprintf(stderr, "soak: SOAK_HOSTNAME must be shared or own\n");
                return -1;
            }
            soak_cfg.shared_hostname = strcmp(hn, "shared") == 0;
        }
        if (soak_cfg.shared_hostname && !it_ns_available()) {
            fprintf(stderr, "soak: SOAK_HOSTNAME=shared needs UTS and PID "
                            "namespaces (root)\n");
            return -1;
        }
    }
    return 0;
}

static int settings_read(void)
{
    const char *seed = getenv("SOAK_SEED"), *min = getenv("SOAK_MINUTES");
    const char *canary = getenv("SOAK_CANARY"), *buyers = getenv("SOAK_BUYERS");
    char *end;

    if (seed && *seed) {
        soak_cfg.seed = strtoull(seed, &end, 10);
        if (*end) {
            fprintf(stderr, "soak: SOAK_SEED must be a number\n");
            return -1;
        }
    } else {
        randombytes_buf(&soak_cfg.seed, sizeof(soak_cfg.seed));
        soak_cfg.seed %= 1000000000ULL;
    }
    soak_cfg.minutes = min && *min ? strtod(min, &end) : 10;
    if ((min && *min && *end) || soak_cfg.minutes <= 0 ||
        soak_cfg.minutes > 24 * 60) {
        fprintf(stderr, "soak: SOAK_MINUTES must be a number of minutes\n");
        return -1;
    }
    soak_cfg.canary = canary && strcmp(canary, "1") == 0;
    soak_cfg.buyers = buyers && *buyers ? atoi(buyers) : 6;
    if (shape_read() != 0)
        return -1;
    if (soak_cfg.buyers < 1 || soak_cfg.buyers > 24) {
        fprintf(stderr, "soak: SOAK_BUYERS must be 1..24\n");
        return -1;
    }
    return shape_read();
}

/* ---- settling ---- */

/* Whether some async sale still has orders on their way to MySQL, or is
 * frozen (read in Redis, at the node that holds its keys). */
static bool async_busy(void)
{
    bool busy = false;

    for (int s = 0; s < soak_cfg.shards && !busy; s++) {
        MYSQL *my = world_mysql(s, 5);
        MYSQL_RES *res = NULL;
        MYSQL_ROW row;

        if (my &&
            mysql_query(my, "SELECT voucher_id FROM seckill_vouchers WHERE "
                            "purchase_mode = 1") == 0 &&
            (res = mysql_store_result(my))) {
            while ((row = mysql_fetch_row(res)) && !busy) {
                struct async_state st;
                long long v = strtoll(row[0], NULL, 10);
                uint16_t port = redis_port_of_sale(v);

                if (!port) {
                    busy = true;
                    break;
                }
                async_state_read(port, 0, v, &st);
                busy = st.stream || st.pending_hash || st.pending_group ||
                       predis_int(port, 0, "EXISTS {v:%lld}:frozen", v) != 0;
            }
        } else {
            busy = true;
        }
        if (res)
            mysql_free_result(res);
        if (my)
            mysql_close(my);
    }
    return busy;
}

/* After the faults healed: the backends are whole again, every instance
 * is back in haproxy, every unpaid order expired (the state stops
 * changing) and every async sale's writers drained it. */
static void settle(void)
{
    int64_t deadline = util_mono_ms() + SETTLE_BACKENDS_MS;
    char why[128] = "";

    while (!redis_whole(why, sizeof(why))) {
        if (util_mono_ms() > deadline) {
            soak_problem("not-settled",
                         "Redis is not whole %d s after "
                         "healing: %s",
                         SETTLE_BACKENDS_MS / 1000, why);
            break;
        }
        sleep_ms(500);
    }
    for (int i = 0; i < SOAK_INSTANCES; i++) {
        char st[32] = "";

        deadline = util_mono_ms() + 30000;
        while (strncmp(st, "UP", 2) != 0) {
            if (util_mono_ms() > deadline) {
                soak_problem("not-settled",
                             "haproxy has instance %d %s 30 s after healing",
                             i + 1, st);
                break;
            }
            lb_status(i, st, sizeof(st));
            if (strncmp(st, "UP", 2) != 0)
                sleep_ms(500);
        }
    }
    say("settling: every unpaid order expires (%d s), every async sale "
        "drains",
        SOAK_PAY_TIMEOUT_S + 5);
    sleep_ms((SOAK_PAY_TIMEOUT_S + 5) * 1000);
    deadline = util_mono_ms() + SETTLE_ASYNC_MS;
    while (async_busy()) {
        if (util_mono_ms() > deadline) {
            say("an async sale has not drained %d s after healing",
                SETTLE_ASYNC_MS / 1000);
            break;
        }
        sleep_ms(1000);
    }
}

int main(void)
{
    int64_t end_ms, next_say = 30000;
    int rc;

    it_init();
    if (sodium_init() < 0 || mysql_library_init(0, NULL, NULL) != 0)
        return 2;
    if (!getenv("SECKILL_SECRET")) {
        fprintf(stderr, "soak: source .run/env.test first (tests/soak/run.sh "
                        "does)\n");
        return 2;
    }
    if (settings_read() != 0)
        return 2;
    it_secret();
    /* Queue sales' settings (soak.h), inherited by every instance. */
    {
        char v[16];

        snprintf(v, sizeof(v), "%d", SOAK_TICKET_TTL_S);
        setenv("SECKILL_WAITROOM_TICKET_TTL_S", v, 1);
        snprintf(v, sizeof(v), "%d", SOAK_ADMIT_RATE);
        setenv("SECKILL_WAITROOM_ADMIT_RATE", v, 1);
    }
    soak_t0_ms = util_now_ms();
    printf("soak: seed=%llu minutes=%g canary=%d buyers=%d redis=%s "
           "mysql-shards=%d hostname=%s (replay: SOAK_SEED=%llu)\n",
           (unsigned long long)soak_cfg.seed, soak_cfg.minutes, soak_cfg.canary,
           soak_cfg.buyers,
           soak_cfg.redis == SOAK_REDIS_CLUSTER ? "cluster" : "sentinel",
           soak_cfg.shards, soak_cfg.shared_hostname ? "shared" : "own",
           (unsigned long long)soak_cfg.seed);
    fflush(stdout);
    if (world_start() != 0) {
        fprintf(stderr, "soak: set-up failed; logs in %s\n", it_log_dir());
        instances_stop();
        world_stop();
        return 2;
    }
    /* SOAK_MINUTES are of load and faults: the set-up (longer for a
     * cluster and shards) does not count. */
    soak_t0_ms = util_now_ms();
    log_watch_start();
    sampler_run_start();
    workload_start();
    nemesis_start();
    end_ms = (int64_t)(soak_cfg.minutes * 60000);
    while (soak_ms() < end_ms) {
        sleep_ms(500);
        if (soak_ms() >= next_say) {
            say("%.0f s: %zu requests", soak_ms() / 1e3, hist_count());
            next_say += 30000;
        }
    }
    say("time is up: healing every fault, stopping the load");
    nemesis_stop();
    workload_stop();
    settle();
    sampler_run_stop();
    instances_stop();
    log_watch_stop();
    rc = checker_run();
    world_stop();
    nemesis_exit();
    mysql_library_end();
    return rc;
}
