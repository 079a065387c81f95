/*
 * workload.c - the clients of make soak, all through haproxy, and the
 * history of every request they made.
 *
 * A sales manager keeps about three sales open or coming: sync and async
 * vouchers with a stock of 20 to 120, on sale from within a few seconds
 * for 20 to 50 s, created through the admin API. Buyer threads act as
 * users picked at random: a purchase (retried like a real client on 429,
 * 5xx and no answer; sometimes the same request twice at once), a
 * payment through the provider's signed notification (a new transaction,
 * the same one again, or a second one for a paid order; an order's age
 * decides whether it comes late), a cancel (half the time followed by a
 * purchase of the same voucher), reads of orders and vouchers, and
 * logins. Orders not paid expire after SOAK_PAY_TIMEOUT_S. With the
 * canary, a crowd also buys one large async sale, so that every instance
 * meets its failpoint (one purchase in 1,000).
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
#define THREADS_MAX 32

const char *const op_names[OP_COUNT] = {
    [OP_BUY] = "buy",   [OP_PAY] = "pay",   [OP_CANCEL] = "cancel",
    [OP_READ] = "read", [OP_CODE] = "code", [OP_LOGIN] = "login",
    [OP_SALE] = "sale",
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
    atomic_llong crowd_next;
} wl;

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
        if (!sales.s[i].crowd && sales.s[i].begin_ms <= now &&
            now < sales.s[i].end_ms)
            open[nopen++] = i;
    if (nopen && rng_chance(r, 85)) {
        *out = sales.s[open[rng_range(r, 0, nopen - 1)]];
        found = true;
    } else if (sales.n) {
        int lo = sales.n > 8 ? sales.n - 8 : 0;

        *out = sales.s[rng_range(r, lo, sales.n - 1)];
        found = !out->crowd;
    }
    pthread_mutex_unlock(&sales.mu);
    return found;
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

/* POST /api/vouchers/{v}/seckill as u, retried like a real client. */
static void buy(struct user *u, const char *token, int64_t uid, int64_t voucher,
                struct rng *r, int attempts)
{
    char path[64];

    snprintf(path, sizeof(path), "/api/vouchers/%lld/seckill",
             (long long)voucher);
    for (int k = 0; k < attempts && !atomic_load(&wl.stop); k++) {
        struct hist h = {.op = OP_BUY, .user = uid, .voucher = voucher};
        struct it_resp resp;

        call(&h, "POST", path, NULL, token, NULL, &resp);
        buy_answered(u, &h, &resp);
        it_resp_free(&resp);
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
        cancelled = h.status == 200;
        if (!retryable(h.status))
            break;
        backoff(r);
    }
    /* Bought again after a cancel: the unit is back, the user may buy. */
    if (cancelled && rng_chance(r, 50))
        buy(u, token, u->id, o->voucher, r, 4);
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
            snprintf(u->token, sizeof(u->token), "%s", token);
            pthread_mutex_unlock(&u->mu);
        }
    }
    it_resp_free(&resp);
}

static void *buyer_run(void *arg)
{
    struct rng r;

    rng_seed(&r, soak_cfg.seed, 1000 + (uint64_t)(uintptr_t)arg);
    while (!atomic_load(&wl.stop)) {
        struct user *u = &users[rng_range(&r, 0, USERS - 1)];
        int what = (int)rng_range(&r, 0, 99);
        char token[256];
        struct uorder o;
        struct sale s;
        int64_t uid;

        pthread_mutex_lock(&u->mu);
        uid = u->id;
        snprintf(token, sizeof(token), "%s", u->token);
        pthread_mutex_unlock(&u->mu);
        if (!uid || (u - users >= USERS_MINTED && what < 3)) {
            login(u);
        } else if (what < 45) {
            if (sale_pick(&r, &s)) {
                if (rng_chance(&r, 10))
                    buy_twice(u, token, uid, s.id);
                else
                    buy(u, token, uid, s.id, &r, 4);
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

/* ---- the sales manager ---- */

static int64_t sale_create(bool async, int64_t stock, int64_t begin_off_s,
                           int64_t end_off_s, bool crowd)
{
    char tok[TOKEN_STR_LEN], begin[UTIL_TIME_LEN], end[UTIL_TIME_LEN];
    char body[400];
    int64_t id = -1;

    it_token(1, TOKEN_ROLE_ADMIN, 86400, tok);
    snprintf(body, sizeof(body),
             "{\"shopId\":1,\"title\":\"soak %s sale\",\"payValue\":%d,"
             "\"actualValue\":%d,\"type\":\"seckill\",\"stock\":%lld,"
             "\"beginTime\":\"%s\",\"endTime\":\"%s\","
             "\"purchaseMode\":\"%s\"}",
             async ? "async" : "sync", SOAK_PAY_VALUE, 2 * SOAK_PAY_VALUE,
             (long long)stock, it_time(begin_off_s, begin),
             it_time(end_off_s, end), async ? "async" : "sync");
    for (int k = 0; k < 3 && id < 0 && !atomic_load(&wl.stop); k++) {
        struct hist h = {.op = OP_SALE};
        struct it_resp resp;

        call(&h, "POST", "/api/vouchers", body, tok, NULL, &resp);
        if (resp.status == 201) {
            const char *s = it_json_str(resp.json, "id");

            if (s && util_parse_id(s, strlen(s), &id) != 0)
                id = -1;
        }
        h.voucher = id > 0 ? id : 0;
        hist_add(&h);
        it_resp_free(&resp);
        if (id < 0)
            sleep_ms(1000);
    }
    if (id > 0) {
        int64_t now = soak_ms(), wall = util_now_ms();

        pthread_mutex_lock(&sales.mu);
        if (sales.n < SALES_MAX) {
            struct sale *s = &sales.s[sales.n++];

            s->id = id;
            s->async = async;
            s->stock = stock;
            /* Whole seconds, as the API has them. */
            s->begin_ms = now + ((wall / 1000 + begin_off_s) * 1000 - wall);
            s->end_ms = now + ((wall / 1000 + end_off_s) * 1000 - wall);
            s->created_ms = now;
            s->crowd = crowd;
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
                    true);
    while (!atomic_load(&wl.stop)) {
        int64_t now = soak_ms();
        int coming = 0;

        pthread_mutex_lock(&sales.mu);
        for (int i = 0; i < sales.n; i++)
            if (!sales.s[i].crowd && sales.s[i].end_ms > now + 5000)
                coming++;
        pthread_mutex_unlock(&sales.mu);
        if (coming < SALES_OPEN) {
            int64_t begin = rng_range(&r, 0, 5);

            sale_create(soak_cfg.canary || rng_chance(&r, 50),
                        rng_range(&r, 20, 120), begin,
                        begin + rng_range(&r, 20, 50), false);
        }
        sleep_ms((int)rng_range(&r, 1000, 3000));
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
    if (sodium_init() < 0)
        abort();
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
    for (int i = 0; i < soak_cfg.buyers; i++)
        spawn(buyer_run, i);
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
