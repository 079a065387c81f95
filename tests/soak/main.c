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
 *   SOAK_HOSTNAME shared: the instances in namespaces of their own with
 *                 one long host name, as a deployment's pods; own: the
 *                 machine's (drawn by the seed when unset)
 *
 * Exit status: 0 every invariant held, 1 a violation (the seed and the
 * window of history that shows it are printed), 2 the set-up failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "tests/soak/soak.h"

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

/* The deployment's shape: what SOAK_HOSTNAME says, else what the seed
 * draws (its own stream, so that the shape does not change the rest of
 * the seed's choices). */
static int shape_read(void)
{
    const char *hn = getenv("SOAK_HOSTNAME");
    struct rng r;

    rng_seed(&r, soak_cfg.seed, 7);
    if (!hn || !*hn) {
        soak_cfg.shared_hostname = rng_chance(&r, 50);
    } else if (strcmp(hn, "shared") == 0 || strcmp(hn, "own") == 0) {
        soak_cfg.shared_hostname = strcmp(hn, "shared") == 0;
    } else {
        fprintf(stderr, "soak: SOAK_HOSTNAME must be shared or own\n");
        return -1;
    }
    if (soak_cfg.shared_hostname && !it_ns_available()) {
        fprintf(stderr, "soak: SOAK_HOSTNAME=shared needs UTS and PID "
                        "namespaces (root)\n");
        return -1;
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
    return 0;
}

/* ---- settling ---- */

/* After the faults healed: the backends are whole again, every instance
 * is back in haproxy, every unpaid order expired (the state stops
 * changing) and every async sale's writers drained it. */
static void settle(void)
{
    int64_t deadline = util_mono_ms() + SETTLE_BACKENDS_MS;
    int m;

    while ((m = redis_master_now()) < 0 || !redis_replica_synced(m)) {
        if (util_mono_ms() > deadline) {
            soak_problem("not-settled",
                         "Redis has no master with a synced "
                         "replica %d s after healing",
                         SETTLE_BACKENDS_MS / 1000);
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
    for (;;) {
        MYSQL *my = fdb_connect(&world.target, 5);
        MYSQL_RES *res = NULL;
        MYSQL_ROW row;
        bool busy = false;

        m = redis_master_now();
        if (my && m >= 0 &&
            mysql_query(my, "SELECT voucher_id FROM seckill_vouchers WHERE "
                            "purchase_mode = 1") == 0 &&
            (res = mysql_store_result(my))) {
            while ((row = mysql_fetch_row(res)) && !busy) {
                struct async_state st;
                long long v = strtoll(row[0], NULL, 10);

                async_state_read(world.redis[m].port, 0, v, &st);
                busy = st.stream || st.pending_hash || st.pending_group ||
                       predis_int(world.redis[m].port, 0,
                                  "EXISTS {v:%lld}:frozen", v) != 0;
            }
        } else {
            busy = true;
        }
        if (res)
            mysql_free_result(res);
        if (my)
            mysql_close(my);
        if (!busy)
            break;
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
    printf("soak: seed=%llu minutes=%g canary=%d buyers=%d hostname=%s "
           "(replay: SOAK_SEED=%llu)\n",
           (unsigned long long)soak_cfg.seed, soak_cfg.minutes, soak_cfg.canary,
           soak_cfg.buyers, soak_cfg.shared_hostname ? "shared" : "own",
           (unsigned long long)soak_cfg.seed);
    fflush(stdout);
    if (world_start() != 0) {
        fprintf(stderr, "soak: set-up failed; logs in %s\n", it_log_dir());
        instances_stop();
        world_stop();
        return 2;
    }
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
