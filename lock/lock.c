/*
 * lock.c - the backend-independent half of lock.h: picking the backend by
 * URL scheme, owners, the reentrant hold count, and the watchdog thread
 * that renews leases of locks taken with lease 0 (Redisson's
 * lockWatchdogTimeout: renew every third of the lease, owner-checked, and
 * stop at release).
 */
#include "lock/internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sodium.h>

#include "common/redis.h"
#include "common/util.h"

#define DEFAULT_TIMEOUT_MS 1000
#define DEFAULT_SESSION_MS 10000
/* A watchdog renewal that failed is retried after this share of a lease. */
#define WD_RETRY_DIV 10

static const struct {
    const char *scheme;
    const struct lock_backend *be;
} schemes[] = {
    {"redis", &lock__redis_backend},
    {REDIS_SENTINEL_SCHEME, &lock__redis_backend},
    {REDIS_CLUSTER_SCHEME, &lock__redis_backend},
    {"redlock", &lock__redlock_backend},
    {"mysql", &lock__mysql_backend},
    {"zookeeper", &lock__zk_backend},
    {"zk", &lock__zk_backend},
};

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

static void init_sodium(void)
{
    if (sodium_init() < 0) {
        log_error("libsodium init failed", NULL);
        abort();
    }
}

int64_t lock__mono_ms(void)
{
    return util_mono_ms();
}

uint32_t lock__jitter_ms(uint32_t base_ms, int64_t left_ms)
{
    uint32_t half = base_ms / 2;
    uint32_t ms = half + (half ? randombytes_uniform(half + 1) : 0);

    if (left_ms < 0)
        left_ms = 0;
    return (int64_t)ms > left_ms ? (uint32_t)left_ms : ms;
}

void lock__mark_lost(struct lock *l, const char *why)
{
    if (atomic_exchange(&l->lost, 1) == 0)
        log_warn("lock lost", "name=\"%s\" owner=%s backend=%s why=\"%s\"",
                 l->name, l->owner, l->c->be->name, why);
}

/* ---- the watchdog ---- */

static void abs_time(struct timespec *ts, int64_t mono_ms)
{
    ts->tv_sec = (time_t)(mono_ms / 1000);
    ts->tv_nsec = (long)(mono_ms % 1000) * 1000000L;
}

/*
 * Renew one due lock with c->wd_mu dropped, so that releases of other
 * locks do not wait for the network; watchdog_remove() waits while
 * wd_renewing points at its lock.
 */
static void watchdog_renew(struct lock_client *c, struct lock *l, int64_t now)
{
    int held = 0, err;

    c->wd_renewing = l;
    pthread_mutex_unlock(&c->wd_mu);
    err = c->be->renew(l, l->lease_ms, &held);
    pthread_mutex_lock(&c->wd_mu);
    c->wd_renewing = NULL;
    pthread_cond_broadcast(&c->wd_cond);

    now = lock__mono_ms();
    if (err == 0 && held) {
        l->renewed_ms = now;
        l->renew_at_ms = now + l->lease_ms / 3;
    } else if (err == 0) {
        lock__mark_lost(l, "watchdog renewal found it gone");
        l->renew_at_ms = INT64_MAX;
    } else if (now - l->renewed_ms >= (int64_t)l->lease_ms) {
        /* No renewal got through for a whole lease: it has expired. */
        lock__mark_lost(l, "watchdog could not renew within the lease");
        l->renew_at_ms = INT64_MAX;
    } else {
        l->renew_at_ms = now + l->lease_ms / WD_RETRY_DIV + 1;
    }
}

static void *watchdog_main(void *arg)
{
    struct lock_client *c = arg;

    pthread_mutex_lock(&c->wd_mu);
    while (!c->wd_stop) {
        int64_t now = lock__mono_ms();
        int64_t next = now + 1000;
        struct lock *due = NULL;

        for (struct lock *l = c->wd_head; l; l = l->wd_next) {
            if (l->renew_at_ms <= now && !due)
                due = l;
            else if (l->renew_at_ms < next)
                next = l->renew_at_ms;
        }
        if (due) {
            watchdog_renew(c, due, now);
            continue;
        }
        struct timespec ts;
        abs_time(&ts, next);
        pthread_cond_timedwait(&c->wd_cond, &c->wd_mu, &ts);
    }
    pthread_mutex_unlock(&c->wd_mu);
    return NULL;
}

static int watchdog_add(struct lock *l)
{
    struct lock_client *c = l->c;
    int err = 0;

    pthread_mutex_lock(&c->wd_mu);
    if (!c->wd_started) {
        err = -pthread_create(&c->wd_thread, NULL, watchdog_main, c);
        if (err) {
            pthread_mutex_unlock(&c->wd_mu);
            return err;
        }
        c->wd_started = 1;
    }
    l->renewed_ms = lock__mono_ms();
    l->renew_at_ms = l->renewed_ms + l->lease_ms / 3;
    l->wd_next = c->wd_head;
    c->wd_head = l;
    l->watched = 1;
    pthread_cond_broadcast(&c->wd_cond);
    pthread_mutex_unlock(&c->wd_mu);
    return 0;
}

static void watchdog_remove(struct lock *l)
{
    struct lock_client *c = l->c;

    pthread_mutex_lock(&c->wd_mu);
    while (c->wd_renewing == l)
        pthread_cond_wait(&c->wd_cond, &c->wd_mu);
    for (struct lock **pp = &c->wd_head; *pp; pp = &(*pp)->wd_next) {
        if (*pp == l) {
            *pp = l->wd_next;
            break;
        }
    }
    l->watched = 0;
    l->wd_next = NULL;
    pthread_mutex_unlock(&c->wd_mu);
}

/* ---- clients ---- */

/* "host:port,host:port/path" of u into buf. */
static void describe_where(const struct url *u, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (int i = 0; i < u->nhosts && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s:%u", i ? "," : "",
                                u->hosts[i].host, u->hosts[i].port);
    if (len < size)
        snprintf(buf + len, size - len, "/%s", u->path);
}

int lock_client_open(const char *url, const struct lock_options *opt,
                     struct lock_client **out)
{
    static const struct lock_options no_options;
    char why[160];
    struct lock_client *c;
    pthread_condattr_t attr;
    struct lock_url_settings set;
    int err;

    pthread_once(&sodium_once, init_sodium);
    if (!url || !out)
        return -EINVAL;
    if (!opt)
        opt = &no_options;
    c = xcalloc(1, sizeof(*c));
    err = url_parse(url, &c->url, why, sizeof(why));
    if (!err)
        err = lock__url_settings(&c->url, &set, why, sizeof(why));
    if (err)
        goto fail_free;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (strcmp(c->url.scheme, schemes[i].scheme) == 0)
            c->be = schemes[i].be;
    if (!c->be) {
        snprintf(why, sizeof(why), "unknown scheme \"%s\"", c->url.scheme);
        err = -EINVAL;
        goto fail_free;
    }
    c->timeout_ms = opt->timeout_ms  ? opt->timeout_ms
                    : set.timeout_ms ? set.timeout_ms
                                     : DEFAULT_TIMEOUT_MS;
    c->session_ms = opt->session_ms  ? opt->session_ms
                    : set.session_ms ? set.session_ms
                                     : DEFAULT_SESSION_MS;
    c->watchdog_lease_ms = opt->watchdog_lease_ms ? opt->watchdog_lease_ms
                                                  : LOCK_WATCHDOG_LEASE_MS;
    c->replicas = set.replicas;
    if (opt->prefix) {
        err = redis_prefix_check(opt->prefix, why, sizeof(why));
        if (err)
            goto fail_free;
        snprintf(c->prefix, sizeof(c->prefix), "%s", opt->prefix);
    }
    describe_where(&c->url, c->where, sizeof(c->where));
    /* Under two prefixes, one name is two locks. */
    if (c->prefix[0]) {
        size_t n = strlen(c->where);

        snprintf(c->where + n, sizeof(c->where) - n, " %s", c->prefix);
    }

    pthread_mutex_init(&c->wd_mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wd_cond, &attr);
    pthread_condattr_destroy(&attr);

    err = c->be->open(c);
    if (err) {
        snprintf(why, sizeof(why), "%s backend refused the URL", c->be->name);
        goto fail_sync;
    }
    *out = c;
    return 0;

fail_sync:
    pthread_cond_destroy(&c->wd_cond);
    pthread_mutex_destroy(&c->wd_mu);
fail_free:
    /* The URL may hold a password: log the reason only. */
    log_warn("lock url invalid", "why=\"%s\"", why);
    free(c);
    return err;
}

void lock_client_close(struct lock_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->wd_mu);
    c->wd_stop = 1;
    pthread_cond_broadcast(&c->wd_cond);
    pthread_mutex_unlock(&c->wd_mu);
    if (c->wd_started)
        pthread_join(c->wd_thread, NULL);
    c->be->close(c);
    pthread_cond_destroy(&c->wd_cond);
    pthread_mutex_destroy(&c->wd_mu);
    free(c);
}

int lock_client_ping(struct lock_client *c)
{
    return c->be->ping ? c->be->ping(c) : 0;
}

const char *lock_client_backend(const struct lock_client *c)
{
    return c->be->name;
}

/* ---- locks ---- */

int lock__new_kind(struct lock_client *c, const char *name, enum lock_kind kind,
                   struct lock **out)
{
    unsigned char raw[16];
    size_t len;
    struct lock *l;

    if (!c || !name || !out)
        return -EINVAL;
    len = strlen(name);
    if (len == 0 || len > LOCK_NAME_MAX)
        return -EINVAL;
    if (!(c->be->kinds & LOCK_KIND_BIT(kind)))
        return -ENOTSUP;
    l = xcalloc(1, sizeof(*l));
    l->c = c;
    l->kind = kind;
    memcpy(l->name, name, len + 1);
    l->name_len = len;
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(l->owner, sizeof(l->owner), raw, sizeof(raw));
    atomic_init(&l->lost, 0);
    if (c->be->prepare) {
        int err = c->be->prepare(l);

        if (err) {
            free(l);
            return err;
        }
    }
    *out = l;
    return 0;
}

int lock_new(struct lock_client *c, const char *name, struct lock **out)
{
    return lock__new_kind(c, name, LOCK_KIND_MUTEX, out);
}

/*
 * The last release of a hold, or the retry of a pending one: ask the
 * backend, and ask once more when its answer was lost. Leaves the release
 * pending if even that was lost.
 */
static int release_last(struct lock *l, int *held)
{
    /* Once an answer was lost, only an answer ends the uncertainty. */
    int h = 0, err, unknown = l->release_pending;

    l->release_unknown = 0;
    err = l->c->be->release(l, &h);
    if (err && l->release_unknown) {
        log_info("lock release answer lost; asking again",
                 "name=\"%s\" backend=%s err=%d", l->name, l->c->be->name, err);
        unknown = 1;
        l->release_unknown = 0;
        err = l->c->be->release(l, &h);
    }
    l->release_pending = err && (unknown || l->release_unknown);
    if (!l->release_pending)
        l->fence = 0;
    l->holds = 0;
    if (held)
        *held = err ? 0 : h;
    return err;
}

void lock_free(struct lock *l)
{
    int err = 0;

    if (!l)
        return;
    if (l->holds > 0) {
        l->holds = 1;
        err = lock_release(l, NULL);
    } else if (l->release_pending) {
        err = release_last(l, NULL);
    }
    if (l->release_pending && l->c->be->forget)
        l->c->be->forget(l);
    if (err)
        log_warn("lock release at free failed", "name=\"%s\" err=%d", l->name,
                 err);
    if (l->pair) {
        /* The other side of a read-write lock lives on alone. */
        if (l->pair->read == l)
            l->pair->read = NULL;
        else
            l->pair->write = NULL;
        if (!l->pair->read && !l->pair->write)
            free(l->pair);
    }
    free(l);
}

int lock_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease_ms,
                 enum lock_status *status)
{
    const struct lock_backend *be;
    uint32_t lease;
    int err;

    if (!l || !status)
        return -EINVAL;
    be = l->c->be;

    if (l->release_pending) {
        err = release_last(l, NULL);
        if (err)
            return err;
    }
    /* An upgrade: two readers doing it would each wait for the other. */
    if (l->kind == LOCK_KIND_WRITE && l->holds == 0 && l->pair &&
        l->pair->read && l->pair->read->holds > 0)
        return -EDEADLK;

    if (l->holds > 0) {
        if (atomic_load(&l->lost))
            return -ENOLCK;
        if (l->holds == UINT_MAX)
            return -EINVAL;
        /* A fixed lease is renewed to the new one, owner-checked, which
         * also finds out whether it expired meanwhile. */
        if (lease_ms > 0 && !l->watched && be->renew) {
            int held = 0;
            err = be->renew(l, lease_ms, &held);
            if (err)
                return err;
            if (!held) {
                lock__mark_lost(l, "gone at reentrant acquire");
                return -ENOLCK;
            }
            l->lease_ms = lease_ms;
        }
        l->holds++;
        *status = LOCK_ACQUIRED;
        return 0;
    }

    atomic_store(&l->lost, 0);
    lease = lease_ms ? lease_ms : l->c->watchdog_lease_ms;
    err = be->acquire(l, wait_ms, lease, status);
    if (err || *status != LOCK_ACQUIRED)
        return err;
    l->holds = 1;
    l->lease_ms = lease;
    if (lease_ms == 0 && be->renew) {
        err = watchdog_add(l);
        if (err) {
            int dummy;
            be->release(l, &dummy);
            l->holds = 0;
            l->fence = 0;
            return err;
        }
    }
    return 0;
}

int lock_release(struct lock *l, int *held)
{
    if (!l)
        return -EINVAL;
    if (l->release_pending)
        return release_last(l, held);
    if (l->holds == 0)
        return -ENOLCK;
    if (l->holds > 1) {
        l->holds--;
        if (held)
            *held = !atomic_load(&l->lost);
        return 0;
    }
    if (l->watched)
        watchdog_remove(l);
    return release_last(l, held);
}

int lock_acquire_many(struct lock **locks, size_t n, uint32_t lease_ms,
                      enum lock_status *status, int *err)
{
    const struct lock_backend *be;

    if (n == 0)
        return 0;
    if (!locks || !status || !err || lease_ms == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!locks[i] || locks[i]->holds || locks[i]->release_pending ||
            locks[i]->kind != LOCK_KIND_MUTEX || locks[i]->c != locks[0]->c)
            return -EINVAL;
    be = locks[0]->c->be;
    for (size_t i = 0; i < n; i++)
        atomic_store(&locks[i]->lost, 0);
    if (be->acquire_many) {
        be->acquire_many(locks, n, lease_ms, status, err);
    } else {
        for (size_t i = 0; i < n; i++)
            err[i] = be->acquire(locks[i], 0, lease_ms, &status[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (err[i] || status[i] != LOCK_ACQUIRED)
            continue;
        locks[i]->holds = 1;
        locks[i]->lease_ms = lease_ms;
        locks[i]->fence = 0; /* none promised (lock.h) */
    }
    return 0;
}

int lock_release_many(struct lock **locks, size_t n, int *held, int *err)
{
    const struct lock_backend *be;
    int *h;

    if (n == 0)
        return 0;
    if (!locks || !err)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!locks[i] || locks[i]->holds != 1 || locks[i]->watched ||
            locks[i]->kind != LOCK_KIND_MUTEX || locks[i]->c != locks[0]->c)
            return -EINVAL;
    be = locks[0]->c->be;
    h = xcalloc(n, sizeof(*h));
    for (size_t i = 0; i < n; i++)
        locks[i]->release_unknown = 0;
    if (be->release_many) {
        be->release_many(locks, n, h, err);
    } else {
        for (size_t i = 0; i < n; i++)
            err[i] = be->release(locks[i], &h[i]);
    }
    for (size_t i = 0; i < n; i++) {
        /* Nothing is kept pending: the lease or the session frees a lock
         * whose release could not be finished. */
        if (locks[i]->release_unknown && be->forget)
            be->forget(locks[i]);
        locks[i]->release_unknown = 0;
        locks[i]->holds = 0;
        locks[i]->fence = 0;
        if (held)
            held[i] = err[i] ? 0 : h[i];
    }
    free(h);
    return 0;
}

uint64_t lock_fence(const struct lock *l)
{
    return l && l->holds ? l->fence : 0;
}

unsigned lock_holds(const struct lock *l)
{
    return l ? l->holds : 0;
}

int lock_lost(const struct lock *l)
{
    return l ? atomic_load(&l->lost) : 0;
}

const char *lock_name(const struct lock *l)
{
    return l->name;
}

const char *lock_owner(const struct lock *l)
{
    return l->owner;
}

enum lock_kind lock_kind(const struct lock *l)
{
    return l->kind;
}

int lock_release_pending(const struct lock *l)
{
    return l ? l->release_pending : 0;
}
