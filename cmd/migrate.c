/*
 * migrate.c - `seckilld migrate` and the start-up check (migrate.h) over
 * the store's migrations (store.h, store_migrate()). Every primary is
 * migrated, shard 0 first (SECKILL_MYSQL_SHARDS, or the one of
 * SECKILL_MYSQL_URL); a read replica gets the changes by replication.
 */
#include "cmd/migrate.h"

#include <errno.h>
#include <mysql.h>
#include <stdio.h>

#include "common/util.h"
#include "store/store.h"

/* What one shard's run applied, for its line when there are several. */
struct shard_run {
    const struct store_migration *first, *last;
    int64_t ms;
};

/* One primary: each migration on a line of its own as it is applied. */
static void print_applied(void *ctx, const struct store_migration *m,
                          int64_t ms)
{
    (void)ctx;
    printf("applied %s (%lld ms)\n", m->name, (long long)ms);
    fflush(stdout);
}

/* Several: gathered into the shard's one line. */
static void note_applied(void *ctx, const struct store_migration *m, int64_t ms)
{
    struct shard_run *run = ctx;

    if (!run->first)
        run->first = m;
    run->last = m;
    run->ms += ms;
}

/*
 * The failure err of store_migrate() on standard error: at names the
 * database (at_port with its port, for a server that cannot be reached or
 * locked).
 */
static void print_failure(const char *at, const char *at_port, int err,
                          const struct store_migrate_report *r)
{
    if (err == -EBADMSG)
        fprintf(stderr, "seckilld: migrate: %s: refused: migration %s %s\n", at,
                r->failed->name, r->why);
    else if (r->failed)
        fprintf(stderr,
                "seckilld: migrate: %s: migration %s failed: %s (%u "
                "applied before it)\n",
                at, r->failed->name, r->why, r->applied_count);
    else
        fprintf(stderr, "seckilld: migrate: %s: %s\n", at_port, r->why);
}

/* The one primary of SECKILL_MYSQL_URL (or a list of one). */
static int migrate_one(const struct config *cfg)
{
    const struct store_config *sc = &cfg->shards[0].store;
    struct store_migrate_report r = {.applied = print_applied};
    unsigned latest = (unsigned)store_migration_count;
    int err = store_migrate(sc, (unsigned)cfg->migrate_lock_wait_s, &r);

    if (err) {
        char at[256], at_port[256];

        snprintf(at, sizeof(at), "%s/%s", sc->mysql_host, sc->mysql_db);
        snprintf(at_port, sizeof(at_port), "%s:%u/%s", sc->mysql_host,
                 sc->mysql_port, sc->mysql_db);
        print_failure(at, at_port, err, &r);
        return 1;
    }
    if (r.version > latest)
        printf("%s: %u applied; at version %u, newer than this binary's %u\n",
               sc->mysql_db, r.applied_count, r.version, latest);
    else
        printf("%s: %u applied; at version %u\n", sc->mysql_db, r.applied_count,
               r.version);
    return 0;
}

/* Shard i of several: one line on standard output, or one on standard
 * error that names it. */
static int migrate_shard(const struct config *cfg, unsigned i)
{
    const struct store_config *sc = &cfg->shards[i].store;
    struct shard_run run = {NULL, NULL, 0};
    struct store_migrate_report r = {.ctx = &run, .applied = note_applied};
    unsigned latest = (unsigned)store_migration_count;
    char where[256], what[256] = "";
    int err = store_migrate(sc, (unsigned)cfg->migrate_lock_wait_s, &r);

    snprintf(where, sizeof(where), "shard %u (%s:%u/%s)", i, sc->mysql_host,
             sc->mysql_port, sc->mysql_db);
    if (err) {
        print_failure(where, where, err, &r);
        if (i + 2 == cfg->nshards)
            fprintf(stderr,
                    "seckilld: migrate: stopped there: shard %u not "
                    "migrated\n",
                    i + 1);
        else if (i + 1 < cfg->nshards)
            fprintf(stderr,
                    "seckilld: migrate: stopped there: shards %u to %u not "
                    "migrated\n",
                    i + 1, cfg->nshards - 1);
        return 1;
    }
    if (run.first == run.last && run.first)
        snprintf(what, sizeof(what), " (%s, %lld ms)", run.first->name,
                 (long long)run.ms);
    else if (run.first)
        snprintf(what, sizeof(what), " (%s .. %s, %lld ms)", run.first->name,
                 run.last->name, (long long)run.ms);
    printf("%s: %u applied%s; at version %u", where, r.applied_count, what,
           r.version);
    if (r.version > latest)
        printf(", newer than this binary's %u", latest);
    printf("\n");
    fflush(stdout);
    return 0;
}

int migrate_run(const struct config *cfg)
{
    int rc = 0;

    if (mysql_library_init(0, NULL, NULL)) {
        fprintf(stderr, "seckilld: migrate: mysql library init failed\n");
        return 1;
    }
    if (cfg->nshards == 1)
        rc = migrate_one(cfg);
    for (unsigned i = 0; cfg->nshards > 1 && i < cfg->nshards && !rc; i++)
        rc = migrate_shard(cfg, i);
    mysql_library_end();
    if (rc)
        return rc;
    return fflush(stdout) == 0 ? 0 : 1;
}

int migrate_check(const struct store_config *sc)
{
    unsigned latest = (unsigned)store_migration_count, v = 0;
    char why[256];
    int err = store_schema_version(sc, &v, why, sizeof(why));

    if (err == -ENOENT) {
        fprintf(stderr,
                "seckilld: database %s has no schema_version (made before "
                "migrations), this binary needs version %u: run seckilld "
                "migrate\n",
                sc->mysql_db, latest);
        return -ESTALE;
    }
    if (!err && v < latest) {
        fprintf(stderr,
                "seckilld: database %s is at schema version %u, this binary "
                "needs %u: run seckilld migrate\n",
                sc->mysql_db, v, latest);
        return -ESTALE;
    }
    if (err)
        log_warn("schema version not checked", "%s", why);
    return 0;
}
