/*
 * config.h - the command line and SECKILL_* environment of seckilld.
 * Every setting is an environment variable and a --flag (the flag wins).
 * One table in config.c declares them all; config_doc_write() writes it
 * out as --help, as the table of docs/configuration.md and as the man
 * page seckilld(8).
 */
#ifndef SECKILL_CONFIG_H
#define SECKILL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/redis.h"
#include "common/url.h"
#include "cmd/server.h"

enum config_cmd {
    CMD_SERVE,
    CMD_TOKEN,
    CMD_TOKENS,
    CMD_ADMIN_ADD,
    CMD_POW,
    CMD_USERS_NORMALIZE,
    CMD_SMS_SINK,
    CMD_MIGRATE,
    CMD_HELP
};

/* The most MariaDB primaries SECKILL_MYSQL_SHARDS may name. */
#define CONFIG_SHARDS_MAX 64

/*
 * One MariaDB primary of the sales, with its read replica: the URLs as
 * parsed (the store configs' strings point into them), and store configs
 * that carry the rest of the service's settings.
 */
struct config_shard {
    struct url url;
    struct url replica_url;
    struct store_config store;   /* .replica is &replica, or NULL: none */
    struct store_config replica; /* mysql_host NULL: no replica */
};

/* The documents of the settings: --help, --help-markdown, --help-man. */
enum config_doc { CONFIG_DOC_HELP, CONFIG_DOC_MARKDOWN, CONFIG_DOC_MAN };

struct config {
    enum config_cmd cmd;
    enum config_doc doc;         /* what CMD_HELP prints */
    struct handlers_config http; /* store strings point into the URLs */
    /* token / tokens subcommands */
    int64_t token_user;
    int token_admin;
    int64_t token_ttl_s;
    int64_t tokens_first;
    int64_t tokens_count;
    /* admin add */
    const char *admin_username;
    /* users normalize */
    int users_dry_run;
    /* migrate */
    int64_t migrate_lock_wait_s;
    /* the parsed URLs (common/url.h), decoded */
    struct url mysql_url;
    struct url redis_url;
    /* A redis-cluster:// URL's seed nodes (http.store's
     * redis_cluster_seeds point here; strings in redis_url). */
    struct redis_server redis_seeds[URL_HOSTS_MAX];
    struct url mysql_replica_url;
    /* The replica's store config (http.store.replica points here). */
    struct store_config replica_store;
    /*
     * The MariaDB primaries, shard 0 first: the URLs of
     * SECKILL_MYSQL_SHARDS, or the one of SECKILL_MYSQL_URL. Set for
     * the commands that read a MySQL URL (nshards >= 1), NULL and 0 for
     * the others. Shard 0 is what http.store names (users, logins and
     * everything that is not a sale live there), and shards[0].store is
     * a copy of http.store; the others differ from it only in their
     * mysql_* and their replica. Owned by cfg (config_free()).
     */
    unsigned nshards;
    struct config_shard *shards;
    /* With several shards, what http.store.shards points at: each
     * shard's store config, [0] http.store itself. Owned by cfg. */
    const struct store_config **shard_stores;
};

/*
 * Parse argv (argv[0] is the program) and the environment into cfg.
 * Flags are matched whole: an unknown or abbreviated one is refused.
 * Returns 0, or -EINVAL with a one-line message in err (errlen bytes)
 * naming the setting (as given: variable or flag) and what is wrong with
 * it. Release cfg with config_free() either way.
 */
int config_parse(struct config *cfg, int argc, char **argv, char *err,
                 size_t errlen);
void config_free(struct config *cfg);

/*
 * Write the settings' document doc to f: CONFIG_DOC_HELP the --help text;
 * CONFIG_DOC_MARKDOWN the table of docs/configuration.md; CONFIG_DOC_MAN the
 * man page seckilld(8) in troff (docs/seckilld.8). `make config-docs`
 * writes the last two into the tree, and test_config checks they are in
 * sync. Returns 0, or -EIO if f failed.
 */
int config_doc_write(FILE *f, enum config_doc doc);

/*
 * Parse "mysql://user:pass@host:port/db" and "redis://[[user]:pass@]host
 * [:port][/db]" into sc; strings point into cfg's URLs. Exposed for
 * the unit tests. Return 0 or -EINVAL with err set.
 */
int config_mysql_url(struct config *cfg, const char *url,
                     struct store_config *sc, char *err, size_t errlen);
int config_redis_url(struct config *cfg, const char *url,
                     struct store_config *sc, char *err, size_t errlen);

#endif
