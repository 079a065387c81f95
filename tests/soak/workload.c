/*
 * workload.c - the clients of make soak, all through haproxy, and the
 * history of every request they made.
 *
 * A sales manager keeps about three sales open or coming: sync and async
 * vouchers with a stock of 20 to 120, on sale from within a few seconds
 * (or, for the operator to edit or delete, from 10 to 20 s) for 20 to
 * 50 s, and one queue sale (admission through a waiting room), created
 * through the admin API. Buyer threads act as users picked at random: a
 * purchase (retried like a real client on 429, 5xx and no answer;
 * sometimes the same request twice at once), a payment through the
 * provider's signed notification (a new transaction, the same one again,
 * or a second one for a paid order; an order's age decides whether it
 * comes late; some orders are paid right at their deadline), a cancel
 * (half the time followed by a purchase of the same voucher), reads of
 * orders and vouchers, logins, and log-outs everywhere (the buyer logs
 * in again). Queue buyers join a queue sale's waiting room, early or
 * late, read their place once a second until admitted and buy with the
 * ticket. An operator, logged in as an admin made for the run, pauses
 * and resumes open sales, restocks and stops them, edits and deletes
 * sales that have not begun, bans buyers for a few seconds, and marks
 * refunds done; each change carries an Idempotency-Key and is sent again
 * with the same key while its outcome is open. Orders not paid expire
 * after SOAK_PAY_TIMEOUT_S. With the canary, a crowd also buys one large
 * async sale, so that every instance meets its failpoint (one purchase
 * in 1,000).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "tests/soak/soak.h"

#define USERS_MINTED 300
#define USERS_LOGIN 30
#define USERS (USERS_MINTED + USERS_LOGIN)
#define USER_BASE 1000000LL   /* minted users: 1000000, 1000001, ... */
#define CROWD_BASE 50000000LL /* the canary crowd's users */
#define ORDERS_KEPT 8
#define SALES_MAX 2048
#define SALES_OPEN 3
#define CROWD_THREADS 2
#define CROWD_WAVE 8
#define QUEUE_THREADS 2
#define THREADS_MAX 40
/* An admin's change is sent at most this often with its key. */
#define CONTROL_ATTEMPTS 8
/* Payments sent at an order's deadline, waiting for it. */
#define RACES_MAX 64
#define ADMIN_NAME "soak-ops"
#define ADMIN_PASSWORD "soak-ops-password"

const char *const op_names[OP_COUNT] = {
    [OP_BUY] = "buy",     [OP_PAY] = "pay",         [OP_CANCEL] = "cancel",
    [OP_READ] = "read",   [OP_CODE] = "code",       [OP_LOGIN] = "login",
    [OP_SALE] = "sale",   [OP_CONTROL] = "control", [OP_QUEUE] = "queue",
    [OP_ADMIN] = "admin", [OP_LOGOUT] = "logout",
};

const char *const ctl_names[CTL_COUNT] = {
    [CTL_NONE] = "",
    [CTL_CREATE] = "create",
    [CTL_PAUSE] = "pause",
    [CTL_RESUME] = "resume",
    [CTL_STOP] = "stop",
    [CTL_RESTOCK] = "restock",
    [CTL_PATCH] = "patch",
    [CTL_DELETE] = "delete",
    [CTL_BAN] = "ban",
    [CTL_UNBAN] = "unban",
    [CTL_REFUND_DONE] = "refund-done",
};

/* ---- the history ---- */

static struct {
    pthread_mutex_t mu;
    struct hist *h;
    size_t n, cap;
} history = {.mu = PTHREAD_MUTEX_INITIALIZER};

void hist_add(const struct hist *h)
{
    pthread_mutex_lock(&history.mu);
    if (history.n == history.cap) {
        history.cap = history.cap ? history.cap * 2 : 8192;
        history.h = xrealloc(history.h, history.cap * sizeof(*h));
    }
    history.h[history.n++] = *h;
    pthread_mutex_unlock(&history.mu);
}

struct hist *hist_all(size_t *n)
{
    *n = history.n;
    return history.h;
}

size_t hist_count(void)
{
    size_t n;

    pthread_mutex_lock(&history.mu);
    n = history.n;
    pthread_mutex_unlock(&history.mu);
    return n;
}

/* ---- users and sales ---- */

struct uorder {
    int64_t order, voucher, bought_ms;
    char txn[24]; /* the last transaction sent for it */
};

struct user {
    pthread_mutex_t mu;
    int64_t id; /* 0: a login user who has not logged in yet */
    char token[256];
    char phone[16];
    bool relogin; /* logged out everywhere (or told 401): log in again */
    struct uorder orders[ORDERS_KEPT];
    int norders, next; /* a ring of the latest orders */
};

static struct user users[USERS];

static struct {
    pthread_mutex_t mu;
    struct sale s[SALES_MAX];
    int n;
} sales = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct {
    pthread_t th[THREADS_MAX];
    int nth;
    atomic_int stop;
    atomic_long txn_seq;
    atomic_long key_seq;
    atomic_llong crowd_next;
} wl;

/* The operator's admin token: from its login, a minted one until then. */
static struct {
    pthread_mutex_t mu;
    char token[256];
} admin = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Payments to send right at their order's deadline. */
static struct {
    pthread_mutex_t mu;
    struct race {
        struct user *u;
        struct uorder o;
        int64_t due_ms;
    } q[RACES_MAX];
    int n;
} races = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void user_add_order(struct user *u, int64_t order, int64_t voucher)
{
    struct uorder *o;

    pthread_mutex_lock(&u->mu);
    o = &u->orders[u->next];
    u->next = (u->next + 1) % ORDERS_KEPT;
    if (u->norders < ORDERS_KEPT)
        u->norders++;
    memset(o, 0, sizeof(*o));
    o->order = order;
    o->voucher = voucher;
    o->bought_ms = soak_ms();
    pthread_mutex_unlock(&u->mu);
}

/* A copy of one of u's orders at random; false when it has none. */
static bool user_pick_order(struct user *u, struct rng *r, struct uorder *out)
{
    bool found = false;

    pthread_mutex_lock(&u->mu);
    if (u->norders) {
        *out = u->orders[rng_range(r, 0, u->norders - 1)];
        found = true;
    }
    pthread_mutex_unlock(&u->mu);
    return found;
}

static void user_set_txn(struct user *u, int64_t order, const char *txn)
{
    pthread_mutex_lock(&u->mu);
    for (int i = 0; i < u->norders; i++)
        if (u->orders[i].order == order)
            snprintf(u->orders[i].txn, sizeof(u->orders[i].txn), "%s", txn);
    pthread_mutex_unlock(&u->mu);
}

/* A sale to buy from: mostly one that is open now, else any recent one
 * (not started yet, or ended). false when there is none. */
static bool sale_pick(struct rng *r, struct sale *out)
{
    int64_t now = soak_ms();
    int open[SALES_MAX], nopen = 0;
    bool found = false;

    pthread_mutex_lock(&sales.mu);
    for (int i = 0; i < sales.n; i++)
        if (!sales.s[i].crowd && !sales.s[i].queue &&
            sales.s[i].begin_ms <= now && now < sales.s[i].end_ms)
            open[nopen++] = i;
    if (nopen && rng_chance(r, 85)) {
        *out = sales.s[open[rng_range(r, 0, nopen - 1)]];
        found = true;
    } else if (sales.n) {
        int lo = sales.n > 8 ? sales.n - 8 : 0;

        *out = sales.s[rng_range(r, lo, sales.n - 1)];
        found = !out->crowd && !out->queue;
    }
    pthread_mutex_unlock(&sales.mu);
    return found;
}

/* A sale chosen at random among those the caller may act on: what 'o'
 * open (begun a second ago, ending in more than 3 s; not a queue sale),
 * 'u' upcoming (beginning in more than 4 s), 'q' a queue sale a buyer can
 * still join (ending in more than 3 s). Never the crowd's, nor one the
 * operator stopped or deleted. false when there is none. */
static bool sale_pick_where(struct rng *r, char what, struct sale *out)
{
    int64_t now = soak_ms();
    int idx[SALES_MAX], n = 0;

    pthread_mutex_lock(&sales.mu);
    for (int i = 0; i < sales.n; i++) {
        const struct sale *s = &sales.s[i];

        if (s->crowd || s->gone)
            continue;
        if ((what == 'o' && !s->queue && s->begin_ms + 1000 <= now &&
             now < s->end_ms - 3000) ||
            (what == 'u' && s->begin_ms > now + 4000) ||
            (what == 'q' && s->queue && now < s->end_ms - 3000))
            idx[n++] = i;
    }
    if (n)
        *out = sales.s[idx[rng_range(r, 0, n - 1)]];
    pthread_mutex_unlock(&sales.mu);
    return n > 0;
}

/* The operator stopped or deleted sale id: it ends now for everyone. */
static void sale_gone(int64_t id)
{
    pthread_mutex_lock(&sales.mu);
    for (int i = 0; i < sales.n; i++)
        if (sales.s[i].id == id) {
            sales.s[i].gone = true;
            if (sales.s[i].end_ms > soak_ms())
                sales.s[i].end_ms = soak_ms();
        }
    pthread_mutex_unlock(&sales.mu);
}

/* ---- requests ---- */

/* Fill h's answer from resp. */
static void hist_answer(struct hist *h, const struct it_resp *resp)
{
    json_t *e = resp->json ? json_object_get(resp->json, "error") : NULL;
    const char *code = e ? it_json_str(e, "code") : NULL;
    const char *msg = e ? it_json_str(e, "message") : NULL;

    h->done_ms = soak_ms();
    h->status = resp->status;
    snprintf(h->code, sizeof(h->code), "%s",
             code                                                 ? code
             : !resp->json && resp->status && resp->status != 204 ? "-"
                                                                  : "");
    h->ambiguous = resp->status == 503 && msg && strstr(msg, "unknown");
    snprintf(h->body, sizeof(h->body), "%s", resp->body ? resp->body : "");
    for (char *p = h->body; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

/* One request through haproxy; the caller records h. */
static long call(struct hist *h, const char *method, const char *path,
                 const char *body, const char *token, const char *header,
                 struct it_resp *resp)
{
    struct it_req req = {.method = method,
                         .path = path,
                         .body = body,
                         .token = token,
                         .header = header,
                         .timeout_s = SOAK_CLIENT_TIMEOUT_S};

    h->sent_ms = soak_ms();
    it_http_do(&world.lb, &req, resp);
    hist_answer(h, resp);
    return resp->status;
}

/* Whether a client tries again: no answer, 429, any 5xx. */
static bool retryable(long status)
{
    return status == 0 || status == 429 || status >= 500;
}

static void backoff(struct rng *r)
{
    sleep_ms((int)rng_range(r, 300, 1000));
}

/* A purchase's 201 or 202: the order goes to the user's list. */
static void buy_answered(struct user *u, struct hist *h,
                         const struct it_resp *resp)
{
    if (resp->status == 201 || resp->status == 202) {
        const char *id = it_json_str(resp->json, "orderId");

        if (id)
            util_parse_id(id, strlen(id), &h->order);
    }
    hist_add(h);
    if (h->order > 0)
        user_add_order(u, h->order, h->voucher);
}

/* A token refused (401): a login user logs in again before its next
 * request (it logged out everywhere, or another thread of it did). */
static void user_refused(struct user *u, long status)
{
    if (status != 401 || u - users < USERS_MINTED)
        return;
    pthread_mutex_lock(&u->mu);
    u->relogin = true;
    pthread_mutex_unlock(&u->mu);
}

/* Pay order o at its deadline, give or take a second (sometimes). */
static void race_add(struct user *u, int64_t order, int64_t voucher,
                     int64_t answered_ms, struct rng *r)
{
    pthread_mutex_lock(&races.mu);
    if (races.n < RACES_MAX) {
        struct race *x = &races.q[races.n++];

        memset(x, 0, sizeof(*x));
        x->u = u;
        x->o.order = order;
        x->o.voucher = voucher;
        /* The deadline is SOAK_PAY_TIMEOUT_S after the order was decided,
         * a moment before its answer. */
        x->due_ms =
            answered_ms + SOAK_PAY_TIMEOUT_S * 1000 + rng_range(r, -900, 300);
    }
    pthread_mutex_unlock(&races.mu);
}

/* A queue sale's ticket, for the purchase and its history. */
struct qticket {
    char ticket[96];
    int64_t joined_ms, exp_ms;
    bool late;
};

/* POST /api/vouchers/{v}/seckill as u, retried like a real client; with
 * a waiting room's ticket when qt. */
static void buy(struct user *u, const char *token, int64_t uid, int64_t voucher,
                struct rng *r, int attempts, const struct qticket *qt)
{
    char path[64], header[128] = "";

    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    if (qt)
        snprintf(header, sizeof(header), "Seckill-Ticket: %s", qt->ticket);
    for (int k = 0; k < attempts && !atomic_load(&wl.stop); k++) {
        struct hist h = {.op = OP_BUY, .user = uid, .voucher = voucher};
        struct it_resp resp;

        if (qt) {
            h.joined_ms = qt->joined_ms;
            h.ticket_exp_ms = qt->exp_ms;
            h.late = qt->late;
        }
        call(&h, "POST", path, NULL, token, qt ? header : NULL, &resp);
        buy_answered(u, &h, &resp);
        it_resp_free(&resp);
        user_refused(u, h.status);
        if (h.order > 0 && u - users < USERS && rng_chance(r, 8))
            race_add(u, h.order, voucher, h.done_ms, r);
        if (!retryable(h.status))
            break;
        backoff(r);
    }
}

/* Purchases of voucher by users uids[i] (tokens[i]), i < n, all at once;
 * their orders go to u's list. */
static void buy_many(struct user *u, char (*tokens)[256], const int64_t *uids,
                     int n, int64_t voucher)
{
    char path[64];
    struct it_req req[CROWD_WAVE];
    struct it_resp resp[CROWD_WAVE];
    struct hist h[CROWD_WAVE];
    CURLM *m = curl_multi_init();
    CURLMsg *msg;
    int running = 0, left;

    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    for (int i = 0; i < n; i++) {
        req[i] = (struct it_req){.method = "POST",
                                 .path = path,
                                 .token = tokens[i],
                                 .timeout_s = SOAK_CLIENT_TIMEOUT_S};
        memset(&h[i], 0, sizeof(h[i]));
        h[i].op = OP_BUY;
        h[i].user = uids[i];
        h[i].voucher = voucher;
        h[i].sent_ms = soak_ms();
        curl_multi_add_handle(m, it_http_prepare(&world.lb, &req[i], &resp[i]));
    }
    do {
        curl_multi_perform(m, &running);
        if (running)
            curl_multi_poll(m, NULL, 0, 1000, NULL);
    } while (running);
    while ((msg = curl_multi_info_read(m, &left))) {
        struct it_resp *rp;

        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&rp);
        curl_multi_remove_handle(m, msg->easy_handle);
        it_http_complete(msg->easy_handle, msg->data.result, rp);
    }
    curl_multi_cleanup(m);
    for (int i = 0; i < n; i++) {
        hist_answer(&h[i], &resp[i]);
        buy_answered(u, &h[i], &resp[i]);
        it_resp_free(&resp[i]);
    }
}

/* The same purchase twice at once (a double click, a retry that races
 * its first attempt). */
static void buy_twice(struct user *u, const char *token, int64_t uid,
                      int64_t voucher)
{
    char tokens[2][256];
    int64_t uids[2] = {uid, uid};

    snprintf(tokens[0], sizeof(tokens[0]), "%s", token);
    snprintf(tokens[1], sizeof(tokens[1]), "%s", token);
    buy_many(u, tokens, uids, 2, voucher);
}

/* The order's status in a 200 of cancel or pay ("" otherwise). */
static void answer_status(struct hist *h, const struct it_resp *resp)
{
    const char *s =
        resp->status == 200 ? it_json_str(resp->json, "status") : NULL;

    snprintf(h->ostatus, sizeof(h->ostatus), "%s", s ? s : "");
}

/* The provider's notification of a payment of order, signed. */
static void pay(struct user *u, const struct uorder *o, struct rng *r)
{
    unsigned char key[32], mac[crypto_auth_hmacsha256_BYTES];
    char txn[24], body[160], sig[2 * sizeof(mac) + 1], header[96];

    if (o->txn[0] && rng_chance(r, 30))
        snprintf(txn, sizeof(txn), "%s", o->txn); /* the same one again */
    else
        snprintf(txn, sizeof(txn), "soak-%llx-%ld",
                 (unsigned long long)(soak_cfg.seed & 0xffffff),
                 atomic_fetch_add(&wl.txn_seq, 1));
    snprintf(body, sizeof(body),
             "{\"orderId\":\"%lld\",\"amount\":%d,\"txnId\":\"%s\"}",
             (long long)o->order, SOAK_PAY_VALUE, txn);
    sodium_hex2bin(key, sizeof(key), world.pay_secret, 64, NULL, NULL, NULL);
    crypto_auth_hmacsha256(mac, (const unsigned char *)body, strlen(body), key);
    sodium_bin2hex(sig, sizeof(sig), mac, sizeof(mac));
    snprintf(header, sizeof(header), "X-Signature: %s", sig);
    user_set_txn(u, o->order, txn);
    for (int k = 0; k < 5 && !atomic_load(&wl.stop); k++) {
        struct hist h = {.op = OP_PAY,
                         .user = u->id,
                         .voucher = o->voucher,
                         .order = o->order};
        struct it_resp resp;

        snprintf(h.txn, sizeof(h.txn), "%s", txn);
        call(&h, "POST", "/api/payments/notify", body, NULL, header, &resp);
        answer_status(&h, &resp);
        hist_add(&h);
        it_resp_free(&resp);
        if (!retryable(h.status))
            break;
        backoff(r);
    }
}

static void cancel(struct user *u, const char *token, const struct uorder *o,
                   struct rng *r)
{
    char path[64];
    bool cancelled = false;

    snprintf(path, sizeof(path), "/api/orders/%lld/cancel",
             (long long)o->order);
    for (int k = 0; k < 4 && !atomic_load(&wl.stop); k++) {
        struct hist h = {.op = OP_CANCEL,
                         .user = u->id,
                         .voucher = o->voucher,
                         .order = o->order};
        struct it_resp resp;

        call(&h, "POST", path, NULL, token, NULL, &resp);
        answer_status(&h, &resp);
        hist_add(&h);
        it_resp_free(&resp);
        user_refused(u, h.status);
        cancelled = h.status == 200;
        if (!retryable(h.status))
            break;
        backoff(r);
    }
    /* Bought again after a cancel: the unit is back, the user may buy. */
    if (cancelled && rng_chance(r, 50))
        buy(u, token, u->id, o->voucher, r, 4, NULL);
}

static void read_some(struct user *u, const char *token, struct rng *r)
{
    char path[64];
    struct uorder o;
    struct sale s;
    int what = (int)rng_range(r, 0, 9);
    struct hist h = {.op = OP_READ, .user = u->id};
    struct it_resp resp;

    if (what < 4 || (what < 7 && !user_pick_order(u, r, &o))) {
        call(&h, "GET", "/api/orders", NULL, token, NULL, &resp);
    } else if (what < 7) {
        snprintf(path, sizeof(path), "/api/orders/%lld", (long long)o.order);
        h.order = o.order;
        h.voucher = o.voucher;
        call(&h, "GET", path, NULL, token, NULL, &resp);
    } else if (what < 9 && sale_pick(r, &s)) {
        snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)s.id);
        h.voucher = s.id;
        call(&h, "GET", path, NULL, NULL, NULL, &resp);
    } else {
        call(&h, "GET", "/api/vouchers?shopId=1&limit=20", NULL, NULL, NULL,
             &resp);
    }
    hist_add(&h);
    it_resp_free(&resp);
}

/* Log in by phone (the code comes in the answer: SECKILL_DEV=1). */
static void login(struct user *u)
{
    char body[128];
    struct hist h = {.op = OP_CODE, .user = u->id};
    struct it_resp resp;
    const char *code, *token;
    json_t *user;

    snprintf(body, sizeof(body), "{\"phone\":\"%s\"}", u->phone);
    call(&h, "POST", "/api/auth/code", body, NULL, NULL, &resp);
    hist_add(&h);
    h.op = OP_LOGIN;
    code = resp.status == 200 ? it_json_str(resp.json, "code") : NULL;
    if (code) {
        snprintf(body, sizeof(body), "{\"phone\":\"%s\",\"code\":\"%s\"}",
                 u->phone, code);
        it_resp_free(&resp);
        call(&h, "POST", "/api/auth/login", body, NULL, NULL, &resp);
        hist_add(&h);
        token = resp.status == 200 ? it_json_str(resp.json, "token") : NULL;
        user = resp.status == 200 ? json_object_get(resp.json, "user") : NULL;
        const char *id = user ? it_json_str(user, "id") : NULL;
        int64_t uid = 0;

        if (token && id && util_parse_id(id, strlen(id), &uid) == 0) {
            pthread_mutex_lock(&u->mu);
            u->id = uid;
            u->relogin = false;
            snprintf(u->token, sizeof(u->token), "%s", token);
            pthread_mutex_unlock(&u->mu);
        }
    }
    it_resp_free(&resp);
}

/* Log out everywhere (a login user): every token of it is refused from
 * the answer on, and it logs in again. */
static void logout_all(struct user *u, const char *token)
{
    struct hist h = {.op = OP_LOGOUT, .user = u->id};
    struct it_resp resp;

    call(&h, "POST", "/api/auth/logout", "{\"all\":true}", token, NULL, &resp);
    hist_add(&h);
    it_resp_free(&resp);
    if (h.status == 204 || h.status == 401) {
        pthread_mutex_lock(&u->mu);
        u->relogin = true;
        pthread_mutex_unlock(&u->mu);
    }
}

static void *buyer_run(void *arg)
{
    struct rng r;

    rng_seed(&r, soak_cfg.seed, 1000 + (uint64_t)(uintptr_t)arg);
    while (!atomic_load(&wl.stop)) {
        struct user *u = &users[rng_range(&r, 0, USERS - 1)];
        int what = (int)rng_range(&r, 0, 99);
        bool relogin, login_user = u - users >= USERS_MINTED;
        char token[256];
        struct uorder o;
        struct sale s;
        int64_t uid;

        pthread_mutex_lock(&u->mu);
        uid = u->id;
        relogin = u->relogin;
        snprintf(token, sizeof(token), "%s", u->token);
        pthread_mutex_unlock(&u->mu);
        if (!uid || relogin || (login_user && what < 3)) {
            login(u);
        } else if (login_user && what < 10) {
            logout_all(u, token);
        } else if (what < 45) {
            if (sale_pick(&r, &s)) {
                if (rng_chance(&r, 10))
                    buy_twice(u, token, uid, s.id);
                else
                    buy(u, token, uid, s.id, &r, 4, NULL);
            }
        } else if (what < 65) {
            if (user_pick_order(u, &r, &o))
                pay(u, &o, &r);
        } else if (what < 77) {
            if (user_pick_order(u, &r, &o))
                cancel(u, token, &o, &r);
        } else {
            read_some(u, token, &r);
        }
        sleep_ms((int)rng_range(&r, 150, 500));
    }
    return NULL;
}

/* ---- the admin ---- */

/* `seckilld admin add` for the run's operator, against the primary. */
static void admin_add(void)
{
    char cmd[3 * IT_PATH_MAX];
    int st;

    snprintf(cmd, sizeof(cmd),
             "printf '%%s\n' '" ADMIN_PASSWORD "' | "
             "SECKILL_MYSQL_URL='mysql://%s:%s@%s:%u/%s' '%s' admin add "
             "--username '" ADMIN_NAME "' >>'%s/soak-admin-add.log' 2>&1",
             world.target.user, world.target.pass, world.target.host,
             world.target.port, world.target.db, it_bin(), it_log_dir());
    st = system(cmd);
    if (st != 0)
        say("seckilld admin add failed (%d): the operator uses a minted "
            "admin token",
            st);
}

/* POST /api/admin/login as the run's admin; its token from then on. */
static void admin_login(struct rng *r)
{
    const char *body =
        "{\"username\":\"" ADMIN_NAME "\",\"password\":\"" ADMIN_PASSWORD "\"}";

    for (int k = 0; k < 4 && !atomic_load(&wl.stop); k++) {
        struct hist h = {.op = OP_ADMIN};
        struct it_resp resp;
        const char *token;

        snprintf(h.txn, sizeof(h.txn), "login");
        call(&h, "POST", "/api/admin/login", body, NULL, NULL, &resp);
        hist_add(&h);
        token = h.status == 200 ? it_json_str(resp.json, "token") : NULL;
        if (token) {
            pthread_mutex_lock(&admin.mu);
            snprintf(admin.token, sizeof(admin.token), "%s", token);
            pthread_mutex_unlock(&admin.mu);
        }
        it_resp_free(&resp);
        if (!retryable(h.status))
            break;
        backoff(r);
    }
}

static void admin_token(char *out, size_t cap)
{
    pthread_mutex_lock(&admin.mu);
    snprintf(out, cap, "%s", admin.token);
    pthread_mutex_unlock(&admin.mu);
}

/* An admin's read (the audit, the refunds, a sale's stats); its JSON in
 * *out when out (the caller frees it). */
static long admin_get(const char *path, const char *what, json_t **out)
{
    char token[256];
    struct hist h = {.op = OP_ADMIN};
    struct it_resp resp;

    admin_token(token, sizeof(token));
    snprintf(h.txn, sizeof(h.txn), "%s", what);
    call(&h, "GET", path, NULL, token, NULL, &resp);
    hist_add(&h);
    if (out)
        *out = h.status == 200 && resp.json ? json_incref(resp.json) : NULL;
    it_resp_free(&resp);
    return h.status;
}

/* Whether an admin's change is still open after this answer: no answer,
 * a 5xx, 429, or its key's first request still running. */
static bool control_open(const struct hist *h)
{
    return retryable(h->status) ||
           (h->status == 409 && strcmp(h->code, "IDEMPOTENCY_KEY_IN_USE") == 0);
}

/*
 * An admin's change: method, path and body (or NULL) sent with a new
 * Idempotency-Key and the admin's token of now, and again with the same
 * key and token while its outcome is open (the docs' advice: the same
 * key changes nothing twice). h0 says what the history records (op,
 * ctl, voucher, user, units). Returns the last answer's status; its
 * JSON in *out when out and it was a 2xx (the caller frees it). Retried
 * after the stop too: the nemesis has healed by then, so the change
 * settles.
 */
static long control(const struct hist *h0, const char *method, const char *path,
                    const char *body, struct rng *r, json_t **out)
{
    char token[256], key[32], header[64];
    long status = 0;

    admin_token(token, sizeof(token));
    snprintf(key, sizeof(key), "soak-%llu-%ld",
             (unsigned long long)(soak_cfg.seed % 1000000000ULL),
             atomic_fetch_add(&wl.key_seq, 1));
    snprintf(header, sizeof(header), "Idempotency-Key: %s", key);
    if (out)
        *out = NULL;
    for (int k = 0; k < CONTROL_ATTEMPTS; k++) {
        struct hist h = *h0;
        struct it_resp resp;
        char replayed[16];

        snprintf(h.key, sizeof(h.key), "%s", key);
        call(&h, method, path, body, token, header, &resp);
        it_resp_header(&resp, "Idempotent-Replayed", replayed,
                       sizeof(replayed));
        h.replayed = strcmp(replayed, "true") == 0;
        if (h.op == OP_SALE && h.status == 201) {
            const char *id = it_json_str(resp.json, "id");

            if (id)
                util_parse_id(id, strlen(id), &h.voucher);
        }
        hist_add(&h);
        status = h.status;
        if (out && status / 100 == 2 && resp.json) {
            json_decref(*out);
            *out = json_incref(resp.json);
        }
        it_resp_free(&resp);
        if (!control_open(&h))
            break;
        backoff(r);
    }
    return status;
}

/* ---- the sales manager ---- */

static int64_t sale_create(bool async, int64_t stock, int64_t begin_off_s,
                           int64_t end_off_s, bool crowd, bool queue,
                           struct rng *r)
{
    char begin[UTIL_TIME_LEN], end[UTIL_TIME_LEN];
    char body[440];
    struct hist h0 = {.op = OP_SALE, .ctl = CTL_CREATE, .units = stock};
    json_t *j = NULL;
    int64_t id = -1;
    const char *s;

    snprintf(body, sizeof(body),
             "{\"shopId\":1,\"title\":\"soak %s sale\",\"payValue\":%d,"
             "\"actualValue\":%d,\"type\":\"seckill\",\"stock\":%lld,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\","
             "\"purchaseMode\":\"%s\"%s}",
             async ? "async" : "sync", SOAK_PAY_VALUE, 2 * SOAK_PAY_VALUE,
             (long long)stock, it_time(begin_off_s, begin),
             it_time(end_off_s, end), async ? "async" : "sync",
             queue ? ",\"admission\":\"queue\"" : "");
    if (control(&h0, "POST", "/api/vouchers", body, r, &j) == 201 && j &&
        (s = it_json_str(j, "id")) && util_parse_id(s, strlen(s), &id) != 0)
        id = -1;
    json_decref(j);
    if (id > 0) {
        int64_t now = soak_ms(), wall = util_now_ms();

        pthread_mutex_lock(&sales.mu);
        if (sales.n < SALES_MAX) {
            struct sale *x = &sales.s[sales.n++];

            memset(x, 0, sizeof(*x));
            x->id = id;
            x->async = async;
            x->stock = stock;
            /* Whole seconds, as the API has them. */
            x->begin_ms = now + ((wall / 1000 + begin_off_s) * 1000 - wall);
            x->end_ms = now + ((wall / 1000 + end_off_s) * 1000 - wall);
            x->created_ms = now;
            x->crowd = crowd;
            x->queue = queue;
        }
        pthread_mutex_unlock(&sales.mu);
    }
    return id;
}

static void *manager_run(void *arg)
{
    struct rng r;

    (void)arg;
    rng_seed(&r, soak_cfg.seed, 1);
    if (soak_cfg.canary)
        sale_create(true, 1000000, -2, (int64_t)(soak_cfg.minutes * 60) + 600,
                    true, false, &r);
    while (!atomic_load(&wl.stop)) {
        int64_t now = soak_ms();
        int coming = 0, queues = 0;

        pthread_mutex_lock(&sales.mu);
        for (int i = 0; i < sales.n; i++) {
            const struct sale *x = &sales.s[i];

            if (x->crowd || x->gone || x->end_ms <= now + 5000)
                continue;
            if (x->queue)
                queues++;
            else
                coming++;
        }
        pthread_mutex_unlock(&sales.mu);
        if (coming < SALES_OPEN) {
            /* Some begin later: the operator edits or deletes those. */
            int64_t begin = rng_chance(&r, 25) ? rng_range(&r, 10, 20)
                                               : rng_range(&r, 0, 5);

            sale_create(soak_cfg.canary || rng_chance(&r, 50),
                        rng_range(&r, 20, 120), begin,
                        begin + rng_range(&r, 20, 50), false, false, &r);
        } else if (queues < 1) {
            /* Early joiners until the begin, latecomers after. */
            int64_t begin = rng_range(&r, 5, 12);

            sale_create(soak_cfg.canary || rng_chance(&r, 50),
                        rng_range(&r, 20, 60), begin,
                        begin + rng_range(&r, 25, 45), false, true, &r);
        }
        sleep_ms((int)rng_range(&r, 1000, 3000));
    }
    return NULL;
}

/* ---- the operator ---- */

/* Pause an open sale, and resume it 1 to 4 s later (unless the pause was
 * refused for good). */
static void pause_resume(const struct sale *s, struct rng *r)
{
    char path[80];
    struct hist h0 = {.op = OP_CONTROL, .ctl = CTL_PAUSE, .voucher = s->id};
    long st;

    snprintf(path, sizeof(path), "/api/vouchers/%lld/pause", (long long)s->id);
    st = control(&h0, "POST", path, NULL, r, NULL);
    if (st / 100 == 4 && st != 429)
        return;
    sleep_ms((int)rng_range(r, 1000, 4000));
    h0.ctl = CTL_RESUME;
    snprintf(path, sizeof(path), "/api/vouchers/%lld/resume", (long long)s->id);
    control(&h0, "POST", path, NULL, r, NULL);
}

static void restock(const struct sale *s, struct rng *r)
{
    char path[80], body[40];
    struct hist h0 = {.op = OP_CONTROL,
                      .ctl = CTL_RESTOCK,
                      .voucher = s->id,
                      .units = rng_range(r, 1, 30)};

    snprintf(path, sizeof(path), "/api/vouchers/%lld/restock",
             (long long)s->id);
    snprintf(body, sizeof(body), "{\"add\":%lld}", (long long)h0.units);
    control(&h0, "POST", path, body, r, NULL);
}

static void stop(const struct sale *s, struct rng *r)
{
    char path[80];
    struct hist h0 = {.op = OP_CONTROL, .ctl = CTL_STOP, .voucher = s->id};

    snprintf(path, sizeof(path), "/api/vouchers/%lld/stop", (long long)s->id);
    if (control(&h0, "POST", path, NULL, r, NULL) == 200)
        sale_gone(s->id);
}

/* Edit a sale that has not begun: its title, and half the time its
 * stock. */
static void patch(const struct sale *s, struct rng *r)
{
    char path[64], body[96];
    struct hist h0 = {.op = OP_CONTROL, .ctl = CTL_PATCH, .voucher = s->id};

    if (rng_chance(r, 50))
        h0.units = rng_range(r, 20, 120);
    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)s->id);
    if (h0.units)
        snprintf(body, sizeof(body),
                 "{\"title\":\"soak sale, edited\",\"stock\":%lld}",
                 (long long)h0.units);
    else
        snprintf(body, sizeof(body), "{\"title\":\"soak sale, edited\"}");
    control(&h0, "PATCH", path, body, r, NULL);
}

static void delete_sale(const struct sale *s, struct rng *r)
{
    char path[64];
    struct hist h0 = {.op = OP_CONTROL, .ctl = CTL_DELETE, .voucher = s->id};
    long st;

    snprintf(path, sizeof(path), "/api/vouchers/%lld", (long long)s->id);
    st = control(&h0, "DELETE", path, NULL, r, NULL);
    if (st == 204 || st == 404)
        sale_gone(s->id);
}

/* The operator of sales: one change every few seconds. */
static void *ops_sales_run(void *arg)
{
    struct rng r;

    (void)arg;
    rng_seed(&r, soak_cfg.seed, 2);
    for (int round = 0; !atomic_load(&wl.stop); round++) {
        int what = (int)rng_range(&r, 0, 99);
        char path[96];
        struct sale s;

        sleep_ms((int)rng_range(&r, 1500, 4000));
        if (atomic_load(&wl.stop))
            break;
        /* The canary's restocks are planted bugs: every other round. */
        if (soak_cfg.canary && round % 2 == 0)
            what = 30;
        if (what < 28 && sale_pick_where(&r, 'o', &s)) {
            pause_resume(&s, &r);
        } else if (what < 50 && sale_pick_where(&r, 'o', &s)) {
            restock(&s, &r);
        } else if (what < 55 && sale_pick_where(&r, 'o', &s)) {
            stop(&s, &r);
        } else if (what < 68 && sale_pick_where(&r, 'u', &s)) {
            patch(&s, &r);
        } else if (what < 84 && sale_pick_where(&r, 'u', &s)) {
            delete_sale(&s, &r);
        } else if (sale_pick_where(&r, 'o', &s)) {
            snprintf(path, sizeof(path),
                     "/api/audit?targetType=voucher&targetId=%lld",
                     (long long)s.id);
            admin_get(path, "audit", NULL);
        }
    }
    return NULL;
}

/* Ban a buyer for 2 to 6 s, then lift the ban. */
static void ban_unban(struct rng *r)
{
    char path[64];
    struct hist h0 = {.op = OP_CONTROL,
                      .ctl = CTL_BAN,
                      .user = USER_BASE + rng_range(r, 0, USERS_MINTED - 1)};
    long st;

    snprintf(path, sizeof(path), "/api/admin/users/%lld/ban",
             (long long)h0.user);
    st = control(&h0, "POST", path, NULL, r, NULL);
    if (st / 100 == 4 && st != 429)
        return;
    sleep_ms((int)rng_range(r, 2000, 6000));
    h0.ctl = CTL_UNBAN;
    control(&h0, "DELETE", path, NULL, r, NULL);
}

/* Mark one or two pending refunds done. */
static void refunds_done(struct rng *r)
{
    json_t *j = NULL, *items;
    size_t n;

    admin_get("/api/refunds?status=pending&limit=20", "refunds", &j);
    items = j ? json_object_get(j, "items") : NULL;
    n = json_is_array(items) ? json_array_size(items) : 0;
    for (int k = 0; n && k < 2; k++) {
        json_t *it = json_array_get(items, (size_t)rng_range(r, 0, n - 1));
        const char *id = it_json_str(it, "id"),
                   *order = it_json_str(it, "orderId");
        struct hist h0 = {.op = OP_CONTROL, .ctl = CTL_REFUND_DONE};
        char path[64];

        if (!id || util_parse_id(id, strlen(id), &h0.units) != 0)
            continue;
        if (order)
            util_parse_id(order, strlen(order), &h0.order);
        snprintf(path, sizeof(path), "/api/refunds/%lld/done",
                 (long long)h0.units);
        control(&h0, "POST", path, NULL, r, NULL);
    }
    json_decref(j);
}

/* The operator of accounts and money: bans, refunds, its own logins. */
static void *ops_accounts_run(void *arg)
{
    struct rng r;

    (void)arg;
    rng_seed(&r, soak_cfg.seed, 3);
    admin_login(&r);
    while (!atomic_load(&wl.stop)) {
        int what = (int)rng_range(&r, 0, 99);
        char path[64];
        struct sale s;

        sleep_ms((int)rng_range(&r, 2000, 5000));
        if (atomic_load(&wl.stop))
            break;
        if (what < 40) {
            ban_unban(&r);
        } else if (what < 70) {
            refunds_done(&r);
        } else if (what < 80) {
            admin_login(&r);
        } else if (sale_pick_where(&r, 'o', &s)) {
            snprintf(path, sizeof(path), "/api/vouchers/%lld/stats",
                     (long long)s.id);
            admin_get(path, "stats", NULL);
        }
    }
    return NULL;
}

/* ---- payments at the deadline ---- */

static void *racer_run(void *arg)
{
    struct rng r;

    (void)arg;
    rng_seed(&r, soak_cfg.seed, 4);
    while (!atomic_load(&wl.stop)) {
        struct race due;
        bool found = false;

        pthread_mutex_lock(&races.mu);
        for (int i = 0; i < races.n && !found; i++)
            if (races.q[i].due_ms <= soak_ms()) {
                due = races.q[i];
                races.q[i] = races.q[--races.n];
                found = true;
            }
        pthread_mutex_unlock(&races.mu);
        if (found)
            pay(due.u, &due.o, &r);
        else
            sleep_ms(20);
    }
    return NULL;
}

/* ---- queue buyers ---- */

/* A ticket's expiry (soak_ms()), 0 when it does not parse
 * (common/ticket.h: base64url of version, user, voucher, expiry, MAC). */
static int64_t ticket_expiry(const char *t)
{
    unsigned char raw[64];
    size_t len = 0;
    int64_t exp = 0;

    if (sodium_base642bin(raw, sizeof(raw), t, strlen(t), NULL, &len, NULL,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
        len < 25)
        return 0;
    for (int i = 17; i < 25; i++)
        exp = exp << 8 | raw[i];
    return exp - soak_t0_ms;
}

/* Join queue sale s as u (minted), read the place once a second until it
 * is admitted (or the sale ends), and buy with the ticket. */
static void queue_buy(struct user *u, const struct sale *s, struct rng *r)
{
    char path[64], token[256];
    struct qticket qt = {.joined_ms = 0};
    int64_t uid, give_up = soak_ms() + 30000;
    bool joined = false;

    pthread_mutex_lock(&u->mu);
    uid = u->id;
    snprintf(token, sizeof(token), "%s", u->token);
    pthread_mutex_unlock(&u->mu);
    snprintf(path, sizeof(path), "/api/vouchers/%lld/queue", (long long)s->id);
    while (!qt.ticket[0] && soak_ms() < give_up && soak_ms() < s->end_ms &&
           !atomic_load(&wl.stop)) {
        struct hist h = {.op = OP_QUEUE, .user = uid, .voucher = s->id};
        struct it_resp resp;
        const char *t = NULL;

        snprintf(h.txn, sizeof(h.txn), joined ? "poll" : "join");
        call(&h, joined ? "GET" : "POST", path, NULL, token, NULL, &resp);
        /* The first attempt of the join may be the one that joined. */
        if (!qt.joined_ms)
            qt.joined_ms = h.sent_ms;
        h.joined_ms = qt.joined_ms;
        joined = joined || h.status == 202 || h.status == 200;
        if (h.status == 200 || h.status == 202)
            t = it_json_str(resp.json, "ticket");
        if (t && strlen(t) < sizeof(qt.ticket)) {
            snprintf(qt.ticket, sizeof(qt.ticket), "%s", t);
            qt.exp_ms = h.ticket_exp_ms = ticket_expiry(t);
        }
        hist_add(&h);
        it_resp_free(&resp);
        if (h.status / 100 == 4 && h.status != 429)
            return; /* sold out, ended, banned, gone */
        if (!qt.ticket[0])
            sleep_ms(h.status == 429 ? 1200 : (int)rng_range(r, 1000, 1300));
    }
    if (!qt.ticket[0])
        return;
    qt.late = qt.joined_ms >= s->begin_ms + SOAK_TICKET_TTL_S * 1000;
    buy(u, token, uid, s->id, r, 4, &qt);
}

static void *queue_run(void *arg)
{
    struct rng r;

    rng_seed(&r, soak_cfg.seed, 700 + (uint64_t)(uintptr_t)arg);
    while (!atomic_load(&wl.stop)) {
        struct sale s;

        if (sale_pick_where(&r, 'q', &s))
            queue_buy(&users[rng_range(&r, 0, USERS_MINTED - 1)], &s, &r);
        sleep_ms((int)rng_range(&r, 300, 1500));
    }
    return NULL;
}

/* ---- the canary's crowd ---- */

static void *crowd_run(void *arg)
{
    struct rng r;
    int64_t voucher = 0;

    rng_seed(&r, soak_cfg.seed, 500 + (uint64_t)(uintptr_t)arg);
    while (!voucher && !atomic_load(&wl.stop)) {
        pthread_mutex_lock(&sales.mu);
        for (int i = 0; i < sales.n; i++)
            if (sales.s[i].crowd)
                voucher = sales.s[i].id;
        pthread_mutex_unlock(&sales.mu);
        sleep_ms(200);
    }
    while (!atomic_load(&wl.stop)) {
        char tokens[CROWD_WAVE][256];
        int64_t uids[CROWD_WAVE];
        struct user none;

        /* Mostly new buyers, some who bought already (a duplicate). */
        for (int i = 0; i < CROWD_WAVE; i++) {
            int64_t n = atomic_load(&wl.crowd_next);
            char tok[TOKEN_STR_LEN];

            uids[i] = CROWD_BASE + (rng_chance(&r, 15) && n > 0
                                        ? rng_range(&r, 0, n - 1)
                                        : atomic_fetch_add(&wl.crowd_next, 1));
            it_token(uids[i], TOKEN_ROLE_USER, 86400, tok);
            snprintf(tokens[i], sizeof(tokens[i]), "%s", tok);
        }
        memset(&none, 0, sizeof(none));
        pthread_mutex_init(&none.mu, NULL);
        buy_many(&none, tokens, uids, CROWD_WAVE, voucher);
        pthread_mutex_destroy(&none.mu);
        sleep_ms(20);
    }
    return NULL;
}

/* ---- start and stop ---- */

static void spawn(void *(*fn)(void *), intptr_t arg)
{
    if (wl.nth >= THREADS_MAX ||
        pthread_create(&wl.th[wl.nth++], NULL, fn, (void *)arg) != 0)
        abort();
}

void workload_start(void)
{
    char minted[TOKEN_STR_LEN];

    if (sodium_init() < 0)
        abort();
    admin_add();
    it_token(1, TOKEN_ROLE_ADMIN, 86400, minted);
    snprintf(admin.token, sizeof(admin.token), "%s", minted);
    for (int i = 0; i < USERS; i++) {
        struct user *u = &users[i];

        pthread_mutex_init(&u->mu, NULL);
        if (i < USERS_MINTED) {
            char tok[TOKEN_STR_LEN];

            u->id = USER_BASE + i;
            it_token(u->id, TOKEN_ROLE_USER, 86400, tok);
            snprintf(u->token, sizeof(u->token), "%s", tok);
        } else {
            snprintf(u->phone, sizeof(u->phone), "1390%07d",
                     (int)(soak_cfg.seed % 1000) * 1000 + i);
        }
    }
    spawn(manager_run, 0);
    spawn(ops_sales_run, 0);
    spawn(ops_accounts_run, 0);
    spawn(racer_run, 0);
    for (int i = 0; i < soak_cfg.buyers; i++)
        spawn(buyer_run, i);
    for (int i = 0; i < QUEUE_THREADS; i++)
        spawn(queue_run, i);
    for (int i = 0; soak_cfg.canary && i < CROWD_THREADS; i++)
        spawn(crowd_run, i);
}

void workload_stop(void)
{
    atomic_store(&wl.stop, 1);
    for (int i = 0; i < wl.nth; i++)
        pthread_join(wl.th[i], NULL);
    wl.nth = 0;
}
