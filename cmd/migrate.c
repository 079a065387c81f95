/*
 * migrate.c - `seckilld migrate` and the start-up check (migrate.h) over
 * the store's migrations (store.h, store_migrate()). Only the primary of
 * SECKILL_MYSQL_URL is migrated: a read replica gets the changes by
 * replication.
 */
#include "cmd/migrate.h"

#include <errno.h>
#include <mysql.h>
#include <stdio.h>

#include "common/util.h"
#include "store/store.h"

static void print_applied(void *ctx, const struct store_migration *m,
                          int64_t ms)
{
    (void)ctx;
    printf("applied %s (%lld ms)\n", m->name, (long long)ms);
    fflush(stdout);
}

int migrate_run(const struct config *cfg)
{
    const struct store_config *sc = &cfg->http.store;
    struct store_migrate_report r = {.applied = print_applied};
    unsigned latest = (unsigned)store_migration_count;
    int err;

    if (mysql_library_init(0, NULL, NULL)) {
        fprintf(stderr, "seckilld: migrate: mysql library init failed\n");
        return 1;
    }
    err = store_migrate(sc, (unsigned)cfg->migrate_lock_wait_s, &r);
    mysql_library_end();
    if (err == -EBADMSG) {
        fprintf(stderr, "seckilld: migrate: %s/%s: refused: migration %s %s\n",
                sc->mysql_host, sc->mysql_db, r.failed->name, r.why);
        return 1;
    }
    if (err && r.failed) {
        fprintf(stderr,
                "seckilld: migrate: %s/%s: migration %s failed: %s (%u "
                "applied before it)\n",
                sc->mysql_host, sc->mysql_db, r.failed->name, r.why,
                r.applied_count);
        return 1;
    }
    if (err) {
        fprintf(stderr, "seckilld: migrate: %s:%u/%s: %s\n", sc->mysql_host,
                sc->mysql_port, sc->mysql_db, r.why);
        return 1;
    }
    if (r.version > latest)
        printf("%s: %u applied; at version %u, newer than this binary's %u\n",
               sc->mysql_db, r.applied_count, r.version, latest);
    else
        printf("%s: %u applied; at version %u\n", sc->mysql_db, r.applied_count,
               r.version);
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
