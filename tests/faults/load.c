/*
 * load.c - the fleet of seckilld instances a scenario runs, the client
 * threads that buy from it (each user one logical purchase, retried like a
 * real client on 429, 5xx and no answer) and the stock sampler.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "tests/faults/faults.h"

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "  [%lld] %s\n", (long long)(util_now_ms() % 100000), buf);
}

/* ---- fleet ---- */

void fleet_init(struct fleet *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
}

char faults_redis_env[128];
char faults_mysql_env[160];

static void fleet_set_env(struct fleet *f, int i, const char *const *env)
{
    bool redis = false, mysql = false;
    int k = 0;

    for (k = 0; f->env[i][k]; k++) {
        free(f->env[i][k]);
        f->env[i][k] = NULL;
    }
    if (!env)
        return;
    for (k = 0; env[k] && k < FLEET_ENV_MAX - 1; k++) {
        f->env[i][k] = xstrdup(env[k]);
        if (strncmp(env[k], "SECKILL_REDIS_URL=", 18) == 0)
            redis = true;
        if (strncmp(env[k], "SECKILL_MYSQL_URL=", 18) == 0)
            mysql = true;
    }
    if (!redis && faults_redis_env[0])
        f->env[i][k++] = xstrdup(faults_redis_env);
    if (!mysql && faults_mysql_env[0])
        f->env[i][k++] = xstrdup(faults_mysql_env);
    f->env[i][k] = NULL;
}

/* Start instance i from its stored env; the caller holds no lock. */
static int fleet_start(struct fleet *f, int i)
{
    struct it_server s;

    if (it_server_start(&s, f->tag[i], (const char *const *)f->env[i]) != 0)
        return -1;
    pthread_mutex_lock(&f->mu);
    f->srv[i] = s;
    f->up[i] = true;
    if (f->nlogs < (int)(sizeof(f->logs) / sizeof(f->logs[0])))
        snprintf(f->logs[f->nlogs++], IT_PATH_MAX, "%s", s.log_path);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int fleet_add(struct fleet *f, const char *tag, const char *const *env,
              bool load)
{
    int i = f->n;

    if (i >= FLEET_MAX)
        return -1;
    snprintf(f->tag[i], sizeof(f->tag[i]), "faults-%s", tag);
    fleet_set_env(f, i, env);
    f->load[i] = load;
    f->n++;
    return fleet_start(f, i) == 0 ? i : -1;
}

int fleet_restart(struct fleet *f, int i, const char *const *env)
{
    if (env)
        fleet_set_env(f, i, env);
    return fleet_start(f, i);
}

bool fleet_dead(struct fleet *f, int i)
{
    bool dead;
    int status;

    pthread_mutex_lock(&f->mu);
    if (f->srv[i].pid > 0 &&
        waitpid(f->srv[i].pid, &status, WNOHANG) == f->srv[i].pid) {
        f->srv[i].pid = 0;
        f->up[i] = false;
    }
    dead = f->srv[i].pid <= 0;
    pthread_mutex_unlock(&f->mu);
    return dead;
}

bool fleet_wait_dead(struct fleet *f, int i, int timeout_ms)
{
    int64_t deadline = util_mono_ms() + timeout_ms;

    while (!fleet_dead(f, i)) {
        if (util_mono_ms() >= deadline)
            return false;
        sleep_ms(10);
    }
    return true;
}

struct it_server fleet_get(struct fleet *f, int i)
{
    struct it_server s;

    pthread_mutex_lock(&f->mu);
    s = f->srv[i];
    pthread_mutex_unlock(&f->mu);
    return s;
}

void fleet_set_load(struct fleet *f, int i, bool load)
{
    pthread_mutex_lock(&f->mu);
    f->load[i] = load;
    pthread_mutex_unlock(&f->mu);
}

/* Round robin over the instances that are up and take load. */
static bool fleet_pick(struct fleet *f, struct it_server *out, int *idx)
{
    bool found = false;

    pthread_mutex_lock(&f->mu);
    for (int k = 0; k < f->n && !found; k++) {
        int i = (int)(f->rr++ % (unsigned)f->n);

        if (f->up[i] && f->load[i] && f->srv[i].pid > 0) {
            *out = f->srv[i];
            *idx = i;
            found = true;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return found;
}

int fleet_log_count(struct fleet *f, const char *needle, const char *also)
{
    int count = 0;

    for (int i = 0; i < f->nlogs; i++) {
        FILE *in = fopen(f->logs[i], "r");
        char line[4096];

        if (!in)
            continue;
        while (fgets(line, sizeof(line), in))
            if (strstr(line, needle) && (!also || strstr(line, also)))
                count++;
        fclose(in);
    }
    return count;
}

int fleet_stop(struct fleet *f)
{
    int rc = 0;

    for (int i = 0; i < f->n; i++) {
        if (fleet_dead(f, i))
            continue;
        kill(f->srv[i].pid, SIGCONT); /* a stopped one cannot exit */
        if (it_server_stop(&f->srv[i]) != 0)
            rc = -1;
        f->up[i] = false;
    }
    for (int i = 0; i < f->n; i++)
        fleet_set_env(f, i, NULL);
    return rc;
}

/* ---- requests ---- */

bool attempt_definite(const struct attempt *a)
{
    return (a->status >= 200 && a->status < 500) ||
           (a->status == 503 && !a->ambiguous);
}

bool attempt_served(const struct attempt *a)
{
    return a->status >= 200 && a->status < 500 && a->status != 429;
}

bool attempt_sold(const struct attempt *a)
{
    return a->status == 201 || a->status == 202;
}

void attempt_from_resp(struct attempt *a, const struct it_resp *resp)
{
    json_t *e = json_object_get(resp->json, "error");
    const char *code = it_json_str(e, "code");
    const char *msg = it_json_str(e, "message");

    a->status = resp->status;
    if (resp->status == 201 || resp->status == 202) {
        const char *id = it_json_str(resp->json, "orderId");

        if (!id || util_parse_id(id, strlen(id), &a->order_id) != 0)
            snprintf(a->code, sizeof(a->code), "BAD_%ld_BODY", resp->status);
    } else if (resp->json) {
        snprintf(a->code, sizeof(a->code), "%s", code ? code : "?");
    }
    a->ambiguous = resp->status == 503 && msg && strstr(msg, "unknown");
}

void purchase_once(const struct it_server *srv, int inst, int64_t voucher,
                   int64_t user, long timeout_s, struct attempt *a)
{
    char tok[TOKEN_STR_LEN], path[96];
    struct it_req req = {
        .method = "POST", .path = path, .token = tok, .timeout_s = timeout_s};
    struct it_resp resp;

    memset(a, 0, sizeof(*a));
    a->user = user;
    a->inst = inst;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    it_token(user, TOKEN_ROLE_USER, 3600, tok);
    a->sent_ms = util_now_ms();
    it_http_do(srv, &req, &resp);
    a->done_ms = util_now_ms();
    attempt_from_resp(a, &resp);
    it_resp_free(&resp);
}

/* ---- load ---- */

void load_record(struct load *l, const struct attempt *a)
{
    pthread_mutex_lock(&l->mu);
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 4096;
        l->att = xrealloc(l->att, l->cap * sizeof(*l->att));
    }
    l->att[l->n++] = *a;
    pthread_mutex_unlock(&l->mu);
}

size_t load_count(struct load *l)
{
    size_t n;

    pthread_mutex_lock(&l->mu);
    n = l->n;
    pthread_mutex_unlock(&l->mu);
    return n;
}

static void *client_run(void *arg)
{
    struct load *l = arg;

    while (!atomic_load(&l->stop)) {
        int64_t user = l->cfg.user_first + atomic_fetch_add(&l->next_user, 1);
        int think;

        for (int k = 0; k < l->cfg.max_attempts;) {
            struct it_server srv;
            struct attempt a;
            int idx;

            if (!fleet_pick(l->fleet, &srv, &idx)) {
                if (atomic_load(&l->stop))
                    break;
                sleep_ms(20);
                continue;
            }
            purchase_once(&srv, idx, l->cfg.voucher, user, l->cfg.timeout_s,
                          &a);
            load_record(l, &a);
            k++;
            /* 201 and every 4xx but 429 are final; a client retries the
             * rest (busy, unavailable, no answer). */
            if (a.status && a.status != 429 && a.status < 500)
                break;
            if (atomic_load(&l->stop))
                break;
            sleep_ms(l->cfg.retry_ms);
        }
        think = atomic_load(&l->think_ms);
        if (think > 0)
            sleep_ms(think);
    }
    return NULL;
}

void load_start(struct load *l, struct fleet *f, const struct load_cfg *cfg)
{
    memset(l, 0, sizeof(*l));
    l->cfg = *cfg;
    l->fleet = f;
    pthread_mutex_init(&l->mu, NULL);
    atomic_store(&l->think_ms, cfg->think_ms);
    for (int t = 0; t < cfg->threads && t < LOAD_THREADS_MAX; t++)
        if (pthread_create(&l->th[t], NULL, client_run, l) != 0)
            abort();
}

void load_stop(struct load *l)
{
    atomic_store(&l->stop, 1);
    for (int t = 0; t < l->cfg.threads && t < LOAD_THREADS_MAX; t++)
        if (l->th[t]) {
            pthread_join(l->th[t], NULL);
            l->th[t] = 0;
        }
}

void load_free(struct load *l)
{
    free(l->att);
    l->att = NULL;
    l->n = l->cap = 0;
}

/* ---- stock sampler ---- */

static void *sampler_run(void *arg)
{
    struct sampler *s = arg;
    MYSQL *my = NULL;

    while (!atomic_load(&s->stop)) {
        int64_t stock;

        if (!my)
            my = fdb_connect(&s->db, 2);
        if (my &&
            fdb_scalar(my, &stock, STOCK_SQL, (long long)s->voucher) == 0) {
            long long min = atomic_load(&s->min_stock);

            while (stock < min &&
                   !atomic_compare_exchange_weak(&s->min_stock, &min, stock))
                ;
            atomic_fetch_add(&s->samples, 1);
        } else if (my) {
            mysql_close(my);
            my = NULL;
        }
        sleep_ms(50);
    }
    if (my)
        mysql_close(my);
    return NULL;
}

void sampler_start(struct sampler *s, const struct db_target *db,
                   int64_t voucher)
{
    memset(s, 0, sizeof(*s));
    s->db = *db;
    s->voucher = voucher;
    atomic_store(&s->min_stock, INT64_MAX);
    if (pthread_create(&s->th, NULL, sampler_run, s) != 0)
        abort();
}

void sampler_stop(struct sampler *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
}
