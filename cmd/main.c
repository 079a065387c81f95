/*
 * main.c - seckilld: parse the configuration, then either run one of the
 * commands (tokens, admin add, migrate, ...) or start the HTTP service and
 * run until SIGTERM or SIGINT.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <curl/curl.h>
#include <mysql.h>
#include <sodium.h>

#include "cmd/admin.h"
#include "cmd/config.h"
#include "cmd/migrate.h"
#include "cmd/sms_sink.h"
#include "cmd/users.h"
#include "cmd/server.h"
#include "common/pow.h"
#include "common/redis.h"
#include "common/redis_keys.h"
#include "common/token.h"
#include "common/util.h"
#include "idgen/idgen.h"

/* `seckilld pow`: the challenge of GET /api/pow on standard input, its
 * solution (the Seckill-PoW header's value) on standard output. */
static int solve_pow(void)
{
    char buf[4096], *sol = NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, stdin);
    int err;

    buf[n] = '\0';
    err = pow_solve(buf, &sol);
    if (err) {
        fprintf(stderr, "seckilld: pow: %s\n",
                err == -ENOENT ? "no number solves this challenge"
                               : "standard input is not a challenge of "
                                 "GET /api/pow");
        return 1;
    }
    printf("%s\n", sol);
    free(sol);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int print_tokens(const struct config *cfg)
{
    struct token_claims c = {0};
    char tok[TOKEN_STR_LEN];
    int64_t now = util_now_ms() / 1000;

    c.role = cfg->token_admin ? TOKEN_ROLE_ADMIN : TOKEN_ROLE_USER;
    c.expires = now + cfg->token_ttl_s;
    if (cfg->cmd == CMD_TOKEN) {
        c.user_id = cfg->token_user;
        token_sign(cfg->http.secret, &c, tok);
        printf("%s\n", tok);
        return 0;
    }
    printf("user_id,token\n");
    for (int64_t i = 0; i < cfg->tokens_count; i++) {
        c.user_id = cfg->tokens_first + i;
        c.jti = 0; /* a new one each */
        token_sign(cfg->http.secret, &c, tok);
        printf("%lld,%s\n", (long long)c.user_id, tok);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* A crowd needs more descriptors than the usual soft limit of 1024: one
 * per connection (max_conn of them) and a few hundred for the backends'
 * connections, logs and the daemon's own. Raised to the hard limit; a
 * hard limit below that is said once at start-up, since connections
 * beyond it wait in the listen backlog however high max_conn is. */
static void raise_fd_limit(unsigned max_conn)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < (rlim_t)max_conn + 512)
        log_warn("descriptor limit below the connection limit",
                 "nofile=%llu max_conn=%u hint=\"raise LimitNOFILE or "
                 "ulimit -n\"",
                 (unsigned long long)rl.rlim_cur, max_conn);
}

/*
 * A graceful stop's first step, on SIGTERM (what orchestrators send):
 * /readyz answers 503 while the instance goes on serving for drain_s
 * seconds, so that a load balancer checking it moves its traffic away
 * before the listener closes. SIGINT (Ctrl-C at a terminal) and a second
 * signal during the drain stop at once.
 */
static void drain(struct server *srv, unsigned drain_s, const sigset_t *set,
                  int sig)
{
    int64_t until;

    if (sig != SIGTERM || drain_s == 0)
        return;
    server_drain(srv);
    log_info("draining before the stop", "signal=%d drain_s=%u", sig, drain_s);
    until = util_mono_ms() + (int64_t)drain_s * 1000;
    for (;;) {
        int64_t left = until - util_mono_ms();
        struct timespec ts = {(time_t)(left / 1000),
                              (long)(left % 1000) * 1000000L};

        if (left <= 0)
            return;
        if (sigtimedwait(set, NULL, &ts) > 0) {
            log_info("drain cut short by a second signal", NULL);
            return;
        }
    }
}

static int serve(const struct config *cfg)
{
    struct server *srv;
    sigset_t set;
    int sig = 0, err;

    /* Block the stop signals before any thread starts, so that every
     * thread inherits the mask and only sigwait() below sees them. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (mysql_library_init(0, NULL, NULL)) {
        log_error("mysql library init failed", NULL);
        return 1;
    }
    /* Once, before anything starts: a binary newer than its database's
     * schema would fail request by request. Its refusal is the one line
     * the service prints, so the descriptor limit's warning comes after. */
    for (unsigned i = 0; i < cfg->nshards; i++) {
        /* Every shard's schema: shard 0's config is http.store. */
        if (migrate_check(i ? &cfg->shards[i].store : &cfg->http.store) ==
            -ESTALE) {
            mysql_library_end();
            return 2;
        }
    }
    raise_fd_limit(cfg->http.max_conn);

    err = server_start(&cfg->http, &srv);
    if (err == -EPERM) {
        fprintf(stderr,
                "seckilld: SECKILL_PURCHASE_MODE=async needs a Redis that "
                "keeps acknowledged writes (appendonly yes, appendfsync "
                "always); or set SECKILL_ASYNC_ACCEPT_LOSS=1\n");
        mysql_library_end();
        return 2;
    }
    if (err) {
        fprintf(stderr, "seckilld: cannot listen on %s:%u: %s\n",
                cfg->http.bind, cfg->http.port, strerror(-err));
        mysql_library_end();
        return 1;
    }
    log_info("listening",
             "bind=%s port=%u threads=%u mysql=%s:%u/%s "
             "redis=%s%s:%u/%u dev=%d drain_s=%u head_max=%u",
             cfg->http.bind, server_port(srv), cfg->http.threads,
             cfg->http.store.mysql_host, cfg->http.store.mysql_port,
             cfg->http.store.mysql_db,
             cfg->http.store.redis_sentinel         ? "sentinel:"
             : cfg->http.store.redis_cluster_nseeds ? "cluster:"
                                                    : "",
             cfg->http.store.redis_host, cfg->http.store.redis_port,
             cfg->http.store.redis_db, cfg->http.dev, cfg->http.drain_s,
             cfg->http.head_max);
    /* Reach both servers once now: the log then says at start-up which
     * SQL server this is (MariaDB or MySQL) or that one is down. */
    struct store *probe = store_new(&cfg->http.store);
    bool mysql_ok, redis_ok;
    store_ping(probe, &mysql_ok, &redis_ok);
    /* Users of an older version whose phones are in another form log in
     * as new users until they are rewritten. */
    if (mysql_ok && store_users_legacy_any(probe) == 1)
        log_warn("users with phones not in E.164 form: run seckilld users "
                 "normalize",
                 NULL);
    store_free(probe);

    sigwait(&set, &sig);
    drain(srv, cfg->http.drain_s, &set, sig);
    log_info("stopping", "signal=%d", sig);
    server_stop(srv);
    mysql_library_end();
    log_info("stopped", NULL);
    return 0;
}

int main(int argc, char **argv)
{
    struct config cfg;
    char err[256];
    int ret;

    if (sodium_init() < 0) {
        fprintf(stderr, "seckilld: libsodium failed to initialise\n");
        return 1;
    }
    /* Before any thread: the SMS webhook's client (sale/sms.c). */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "seckilld: libcurl failed to initialise\n");
        return 1;
    }
    if (config_parse(&cfg, argc, argv, err, sizeof(err))) {
        fprintf(stderr, "seckilld: %s\n", err);
        config_free(&cfg);
        return 2;
    }
    /* Before any thread: every Redis name starts with the prefix. The
     * id worker's names from before its hash tag are counted on too, but
     * not on a cluster, where they are in other slots. */
    redis_prefix_set(cfg.http.redis_prefix ? cfg.http.redis_prefix : "");
    idgen_legacy_keys(strcmp(cfg.redis_url.scheme, "redis") == 0 ||
                      strcmp(cfg.redis_url.scheme, REDIS_SENTINEL_SCHEME) == 0);
    switch (cfg.cmd) {
    case CMD_HELP:
        ret = config_doc_write(stdout, cfg.doc) ? 1 : 0;
        break;
    case CMD_TOKEN:
    case CMD_TOKENS:
        ret = print_tokens(&cfg);
        break;
    case CMD_ADMIN_ADD:
        ret = admin_add(&cfg);
        break;
    case CMD_POW:
        ret = solve_pow();
        break;
    case CMD_USERS_NORMALIZE:
        ret = users_normalize(&cfg);
        break;
    case CMD_SMS_SINK:
        ret = sms_sink_run(&cfg);
        break;
    case CMD_MIGRATE:
        ret = migrate_run(&cfg);
        break;
    default:
        ret = serve(&cfg);
        break;
    }
    config_free(&cfg);
    return ret;
}
