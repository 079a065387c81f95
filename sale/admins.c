/*
 * admins.c - an admin's login (see sale.h): a password checked against
 * its Argon2id hash, behind counts of failures (per name from one
 * address, per name, per address) that refuse before any hash is
 * computed, so that neither a guessing loop nor a flood of wrong
 * passwords gets far.
 *
 * The hash's turns. Each check takes 64 MiB and a core for about a tenth
 * of a second, so an instance runs at most one per core, on threads of
 * their own (the gate), never on the task pool. A login waits for a turn
 * in a queue that holds one login per client address: a second from an
 * address whose first is still there is refused BUSY at once, and that
 * counts against the address. Turns are then taken in the order the
 * addresses asked, each address once a round, so a flood from a few
 * addresses delays an admin elsewhere by a few checks at most; and the
 * flood's busy refusals soon lock its addresses out altogether. Only an
 * address's own second login counts so: a login refused because the
 * queue is full, or that waited it out, is the flood's doing, not its
 * client's, and is not counted (else a flood from many addresses would
 * lock the admin out of its own address). And a full queue makes room
 * for a newcomer whose address failed less lately than one waiting: the
 * one with the most failures gives up its place (busy, not counted), so
 * a flood that fills the queue, whose addresses fail with every try, is
 * passed by an admin whose address does not.
 */
#include "sale/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/password.h"
#include "common/token.h"
#include "common/util.h"

static unsigned seconds_up(int64_t ms)
{
    return ms <= 1000 ? 1 : (unsigned)((ms + 999) / 1000);
}

/* Record a login of admin id (ok), or a wrong password for it, in the
 * audit log (on its own: there is no transaction to join). */
static int login_record(struct store *st, const struct sale_actor *who,
                        int64_t id, bool ok, const char *why)
{
    struct sale_actor by = *who;
    struct store_audit audit;
    int err;

    by.admin_id = ok ? id : 0;
    sale__audit_make(&audit, &by, ok ? "admin.login" : "admin.login_failed",
                     "admin", id, why ? json_pack("{s:s}", "why", why) : NULL);
    err = store_audit_add(st, &audit);
    sale__audit_done(&audit);
    return err;
}

/* ---- the gate: the hash's turns ---- */

static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t work;
    struct sale_admin_call *head, *tail; /* waiting, oldest first */
    /* Client addresses with a login waiting or being checked. */
    char (*held)[SALE_LIMIT_KEY_LEN];
    size_t nheld;
    bool stopping; /* the task pool refused a job: answer the rest, until
                      one enters from a job again */
} gate = {.once = PTHREAD_ONCE_INIT,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER};

static void finish(void *arg, int err);

/* An address's hold on the gate, under gate.mu. */
static bool held(const char *addr)
{
    for (size_t i = 0; i < gate.nheld; i++)
        if (strcmp(gate.held[i], addr) == 0)
            return true;
    return false;
}

static void release(const char *addr)
{
    pthread_mutex_lock(&gate.mu);
    for (size_t i = 0; i < gate.nheld; i++)
        if (strcmp(gate.held[i], addr) == 0) {
            memcpy(gate.held[i], gate.held[--gate.nheld], sizeof(gate.held[i]));
            break;
        }
    pthread_mutex_unlock(&gate.mu);
}

/* A turn's thread: the oldest waiting login's password checked, then its
 * end on the task pool (which has a store). */
static void *turn_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct sale_admin_call *c;
        bool stopping;

        pthread_mutex_lock(&gate.mu);
        while (!gate.head)
            pthread_cond_wait(&gate.work, &gate.mu);
        c = gate.head;
        gate.head = c->next;
        if (!gate.head)
            gate.tail = NULL;
        stopping = gate.stopping;
        pthread_mutex_unlock(&gate.mu);

        if (stopping) {
            c->busy = false;
            release(c->addr);
            finish(c, -ESHUTDOWN);
            continue;
        }
        /* Waited out its time behind a queue: busy, not checked. */
        c->busy = util_mono_ms() - c->queued_ms > SALE_ADMIN_WAIT_MS;
        if (!c->busy) {
            if (c->lookup == -ENOENT || c->disabled) {
                password_dummy_verify(c->password, c->len);
                c->ok = false;
            } else {
                c->ok = password_verify(c->hash, c->password, c->len);
            }
        }
        release(c->addr);
        if (sale_job_run(c->sale, finish, c) != 0) {
            pthread_mutex_lock(&gate.mu);
            gate.stopping = true;
            pthread_mutex_unlock(&gate.mu);
            finish(c, -ESHUTDOWN);
        }
    }
    return NULL;
}

static void gate_start(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned turns = cores < 1                      ? 1
                     : cores > SALE_ADMIN_TURNS_MAX ? SALE_ADMIN_TURNS_MAX
                                                    : (unsigned)cores;

    gate.held = xcalloc(SALE_ADMIN_WAITING_MAX, sizeof(*gate.held));
    for (unsigned i = 0; i < turns; i++) {
        pthread_t th;

        if (pthread_create(&th, NULL, turn_main, NULL) == 0)
            pthread_detach(th);
    }
}

/* Take the waiting login whose address failed most out of the queue,
 * if more than fails; NULL if none did. Under gate.mu. */
static struct sale_admin_call *evict_over(unsigned fails)
{
    struct sale_admin_call **p, **worst = NULL, *w;

    for (p = &gate.head; *p; p = &(*p)->next)
        if ((*p)->fails > fails && (!worst || (*p)->fails > (*worst)->fails))
            worst = p;
    if (!worst)
        return NULL;
    w = *worst;
    *worst = w->next;
    if (gate.tail == w) {
        gate.tail = NULL;
        for (struct sale_admin_call *q = gate.head; q; q = q->next)
            gate.tail = q;
    }
    for (size_t i = 0; i < gate.nheld; i++)
        if (strcmp(gate.held[i], w->addr) == 0) {
            memcpy(gate.held[i], gate.held[--gate.nheld], sizeof(gate.held[i]));
            break;
        }
    return w;
}

/* Queue c for a turn; false (busy) when its address has one there or
 * being checked (*own), or the queue is full of addresses that failed no
 * more than c's. A login that gave its place up goes to *evicted. */
static bool gate_enter(struct sale_admin_call *c, bool *own,
                       struct sale_admin_call **evicted)
{
    bool ok;

    pthread_once(&gate.once, gate_start);
    pthread_mutex_lock(&gate.mu);
    /* Called from a job: the task pool runs (again, after a stop in a
     * process that made another). */
    gate.stopping = false;
    *own = held(c->addr);
    *evicted = NULL;
    if (!gate.stopping && !*own && gate.nheld >= SALE_ADMIN_WAITING_MAX)
        *evicted = evict_over(c->fails);
    ok = !gate.stopping && gate.nheld < SALE_ADMIN_WAITING_MAX && !*own;
    if (ok) {
        snprintf(gate.held[gate.nheld++], SALE_LIMIT_KEY_LEN, "%s", c->addr);
        c->queued_ms = util_mono_ms();
        c->next = NULL;
        if (gate.tail)
            gate.tail->next = c;
        else
            gate.head = c;
        gate.tail = c;
        pthread_cond_signal(&gate.work);
    }
    pthread_mutex_unlock(&gate.mu);
    return ok;
}

/* ---- the login ---- */

/* Busy: refused without a check; counted against the address when it
 * was its own other login in the way (own). */
static void busy(struct store *st, struct sale_admin_call *c, bool own)
{
    c->outcome = SALE_ADMIN_BUSY;
    c->retry_s = 1;
    if (own)
        store_admin_fails_add(st, NULL, c->addr,
                              SALE_ADMIN_FAILS_WINDOW_S * 1000u);
    log_warn("admin login refused: busy", "username=%s addr=%s why=%s",
             c->username, c->addr,
             own ? "its address's other login" : "the queue");
}

/* After the check: counted, recorded, decided. On the pool; with the
 * pool stopped (err), answered 503 with nothing written. */
static void finish(void *arg, int err)
{
    struct sale_admin_call *c = arg;
    struct store *st;
    bool banned;

    if (err) {
        c->err = err;
        c->done(c);
        return;
    }
    st = sale__store(c->sale);
    if (c->busy) {
        busy(st, c, false);
        c->done(c);
        return;
    }
    if (!c->ok) {
        c->outcome = SALE_ADMIN_WRONG;
        log_warn("admin login failed", "username=%s addr=%s why=%s",
                 c->username, c->addr,
                 c->lookup == -ENOENT ? "unknown"
                 : c->disabled        ? "disabled"
                                      : "password");
        /* Counted when Redis answers (it just did, for the check). */
        store_admin_fails_add(st, c->username, c->addr,
                              SALE_ADMIN_FAILS_WINDOW_S * 1000u);
        /* An existing admin's failures are worth an operator's look; an
         * unknown name's are only the log's (anyone can make them up). */
        if (c->lookup != -ENOENT &&
            login_record(st, &c->who, c->admin_id, false,
                         c->disabled ? "disabled" : "password"))
            log_warn("admin login failure not recorded in the audit log",
                     "username=%s", c->username);
        c->done(c);
        return;
    }
    err =
        store_account_get(st, TOKEN_ROLE_ADMIN, c->admin_id, &c->gen, &banned);
    /* No token without its record. */
    if (!err)
        err = login_record(st, &c->who, c->admin_id, true, NULL);
    if (err) {
        c->err = err;
        c->done(c);
        return;
    }
    store_admin_fails_clear(st, c->username, c->addr);
    c->outcome = SALE_ADMIN_OK;
    log_info("admin logged in", "username=%s addr=%s admin=%lld", c->username,
             c->addr, (long long)c->admin_id);
    c->done(c);
}

bool sale_admin_login(struct sale *s, struct sale_admin_call *c)
{
    struct store *st = sale__store(s);
    bool locked = false;
    int64_t retry_ms = 0;

    c->sale = s;
    c->err = 0;
    c->err = store_admin_fails_check(
        st, c->username, c->addr, SALE_ADMIN_FAILS_PAIR, SALE_ADMIN_FAILS_NAME,
        SALE_ADMIN_FAILS_ADDR, SALE_ADMIN_FAILS_WINDOW_S * 1000u, &locked,
        &retry_ms, &c->fails);
    if (c->err)
        return true; /* no count of failures, no check: 503 */
    if (locked) {
        c->outcome = SALE_ADMIN_LOCKED;
        c->retry_s = seconds_up(retry_ms);
        log_warn("admin login refused: too many failures",
                 "username=%s addr=%s retry_s=%u", c->username, c->addr,
                 c->retry_s);
        return true;
    }
    c->lookup =
        store_admin_get(st, c->username, &c->admin_id, c->hash, &c->disabled);
    if (c->lookup && c->lookup != -ENOENT) {
        c->err = c->lookup;
        return true;
    }
    {
        struct sale_admin_call *evicted;
        bool own, in = gate_enter(c, &own, &evicted);

        if (evicted) {
            evicted->busy = true;
            finish(evicted, 0);
        }
        if (!in) {
            busy(st, c, own);
            return true;
        }
    }
    return false;
}
