/*
 * config.h - the command line and SECKILL_* environment of seckilld.
 * Every setting is an environment variable and a --flag (the flag wins).
 */
#ifndef SECKILL_CONFIG_H
#define SECKILL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/url.h"
#include "cmd/server.h"

enum config_cmd { CMD_SERVE, CMD_TOKEN, CMD_TOKENS, CMD_HELP };

struct config {
    enum config_cmd cmd;
    struct handlers_config http; /* store strings point into the URLs */
    /* token / tokens subcommands */
    int64_t token_user;
    int token_admin;
    int64_t token_ttl_s;
    int64_t tokens_first;
    int64_t tokens_count;
    /* the parsed URLs (common/url.h), decoded */
    struct url mysql_url;
    struct url redis_url;
    struct url mysql_replica_url;
    /* The replica's store config (http.store.replica points here). */
    struct store_config replica_store;
};

/*
 * Parse argv (argv[0] is the program) and the environment into cfg.
 * Returns 0, or -EINVAL with a one-line message in err (errlen bytes)
 * naming the setting and what is wrong with it. Release cfg with
 * config_free() either way.
 */
int config_parse(struct config *cfg, int argc, char **argv, char *err,
                 size_t errlen);
void config_free(struct config *cfg);

/* The --help text. */
extern const char config_usage[];

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
