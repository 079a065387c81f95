/*
 * config_table.h - the one table of seckilld's settings, shared by the
 * parser (cmd/config.c) and the writers of its documentation (cmd/
 * config_doc.c: --help, docs/configuration.md's table, seckilld(8)).
 * Internal to cmd/.
 */
#ifndef SECKILL_CONFIG_TABLE_H
#define SECKILL_CONFIG_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct config;
struct config_setting;

/* The commands a setting applies to (enum config_cmd, as bits). */
#define CONFIG_FOR_SERVE 1u
#define CONFIG_FOR_TOKEN 2u
#define CONFIG_FOR_TOKENS 4u
#define CONFIG_FOR_ADMIN_ADD 8u
#define CONFIG_FOR_USERS_NORMALIZE 16u
#define CONFIG_FOR_SMS_SINK 32u
#define CONFIG_FOR_MIGRATE 64u

/*
 * Parse v into cfg for setting s; name is how the user gave it
 * ("SECKILL_PORT" or "--port"), for the message. Return 0, or -EINVAL with
 * one line in err that starts with name.
 */
typedef int (*config_parse_fn)(struct config *cfg,
                               const struct config_setting *s, const char *name,
                               const char *v, char *err, size_t errlen);

/*
 * One setting. Texts marked (markdown) may hold `code` spans and
 * [links](purchase.md#a-section), relative to docs/ where the table
 * goes, and "{range}", which the writers replace with
 * "min..max".
 */
struct config_setting {
    const char *flag; /* the flag without its "--" */
    const char *env;  /* NULL: an option of the token commands only */
    const char *arg;  /* the value's name in --help: "N", "URL" */
    const char *def;  /* the value when unset; NULL: required */
    /* The default in words (markdown) when def alone would not say it
     * ("" computed, or off); NULL: `def`. */
    const char *def_doc;
    const char *bare; /* the value of the flag alone; NULL: needs one */
    unsigned scope;   /* CONFIG_FOR_* bits */
    config_parse_fn parse;
    int64_t min, max; /* the range of the number parsers */
    const char *unit; /* "seconds" after that range; NULL: none */
    size_t off, size; /* where the value goes in struct config */
    const char *help; /* the --help line (markdown, kept short) */
    const char *doc;  /* what it means: docs/configuration.md, the man page */
};

extern const struct config_setting config_settings[];
extern const size_t config_settings_count;

#endif
