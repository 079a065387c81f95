/*
 * listing.c - the sales on now and those about to begin, across shops
 * (see sale.h, sale_sales_list()), served from a snapshot per instance.
 *
 * A crowd opening the home page must not become a crowd of MySQL
 * queries: the instance keeps the last answer of one query (every sale
 * not ended and beginning within SALE_LISTING_WINDOW_MAX_S: at most
 * SALE_LISTING_MAX live ones, those ending soonest, and as many upcoming
 * ones, those beginning soonest) with the time it was taken. A request finds
 * it fresh (younger than SALE_LISTING_REFRESH_MS) and reads it; or stale,
 * and then one request, on its pool thread, runs the query while the
 * others read the stale snapshot meanwhile (a request that finds no
 * snapshot at all waits for the first, on its pool thread). A query is
 * never started sooner than SALE_LISTING_REFRESH_MS after the last one,
 * failed or not: at most one query a second, whatever the crowd. Which
 * sale is live and which upcoming is decided per request, at the
 * request's time, from the snapshot's begin and end times.
 *
 * A snapshot is immutable once published and reference counted: a
 * request holds it while it builds its answer, a refresh replaces it.
 */
#include "sale/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics.h"
#include "common/util.h"

/* A stale snapshot is served while a refresh fails, at most this old;
 * beyond, the request gets the backend's error. Its window has this much
 * room for requests made after it was taken. */
#define STALE_MAX_MS 60000

static int by_end(const void *a, const void *b)
{
    const struct store_voucher *x = *(struct store_voucher *const *)a,
                               *y = *(struct store_voucher *const *)b;

    if (x->end_time != y->end_time)
        return x->end_time < y->end_time ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Sales by end (the live ones to keep: ending soonest), and by begin
 * (the upcoming ones to keep, and the snapshot's order), ties by id. */
static int item_by_end(const void *a, const void *b)
{
    const struct store_voucher *x = a, *y = b;

    if (x->end_time != y->end_time)
        return x->end_time < y->end_time ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int item_by_begin(const void *a, const void *b)
{
    const struct store_voucher *x = a, *y = b;

    if (x->begin_time != y->begin_time)
        return x->begin_time < y->begin_time ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Of the query's two parts (each at most SALE_LISTING_MAX + 1 rows), keep
 * at most SALE_LISTING_MAX live sales, those ending soonest, and as many
 * upcoming ones, those beginning soonest, in items[0..) ordered by begin;
 * their number. *truncated when either part had more.
 */
static size_t parts_keep(struct store_voucher *items, size_t n, int64_t now_s,
                         bool *truncated)
{
    size_t live = 0, up;

    for (size_t i = 0; i < n; i++)
        if (items[i].begin_time <= now_s) {
            struct store_voucher t = items[live];

            items[live++] = items[i];
            items[i] = t;
        }
    up = n - live;
    qsort(items, live, sizeof(*items), item_by_end);
    qsort(items + live, up, sizeof(*items), item_by_begin);
    *truncated = live > SALE_LISTING_MAX || up > SALE_LISTING_MAX;
    if (up > SALE_LISTING_MAX)
        up = SALE_LISTING_MAX;
    if (live > SALE_LISTING_MAX) {
        memmove(items + SALE_LISTING_MAX, items + live, up * sizeof(*items));
        live = SALE_LISTING_MAX;
    }
    qsort(items, live + up, sizeof(*items), item_by_begin);
    return live + up;
}

/* Run the query: a new snapshot (one reference), or NULL and *err. */
static struct sale_snapshot *snapshot_query(struct sale *s, int64_t mono_ms,
                                            int *err)
{
    struct sale_snapshot *sn;
    struct store_voucher *items;
    int64_t now_s = util_now_ms() / 1000;
    size_t n;

    metrics_count(METRIC_LISTING_REFRESH, 1);
    *err = store_sales_list(sale__store(s), now_s,
                            now_s + SALE_LISTING_WINDOW_MAX_S +
                                STALE_MAX_MS / 1000,
                            SALE_LISTING_MAX + 1, &items, &n);
    if (*err)
        return NULL;
    sn = xcalloc(1, sizeof(*sn));
    atomic_init(&sn->refs, 1);
    sn->taken_ms = mono_ms;
    sn->taken_s = now_s;
    sn->n = parts_keep(items, n, now_s, &sn->truncated);
    /* Only the rows found stay: the list was sized for the most. */
    sn->items = sn->n ? xrealloc(items, sn->n * sizeof(*items)) : NULL;
    if (!sn->n)
        free(items);
    sn->ended = xcalloc(sn->n ? sn->n : 1, sizeof(*sn->ended));
    for (size_t i = 0; i < sn->n; i++)
        sn->ended[i] = &sn->items[i];
    qsort(sn->ended, sn->n, sizeof(*sn->ended), by_end);
    return sn;
}

/*
 * A snapshot to read (a reference: sale__snapshot_unref() it), or NULL and
 * *err. Refreshes it when it is stale and no query ran within the last
 * SALE_LISTING_REFRESH_MS, on this thread, once at a time.
 */
static struct sale_snapshot *snapshot_get(struct sale *s, int *err)
{
    struct sale_listing *l = s->listing;
    struct sale_snapshot *sn = NULL, *old = NULL;
    bool was_truncated;
    int64_t now;

    pthread_mutex_lock(&l->mu);
    for (;;) {
        now = util_mono_ms();
        if (l->cur && now - l->cur->taken_ms < SALE_LISTING_REFRESH_MS)
            goto take;
        if (l->refreshing ||
            (l->tried_ms && now - l->tried_ms < SALE_LISTING_REFRESH_MS)) {
            /* Someone queries now, or a query failed moments ago. */
            if (l->cur && now - l->cur->taken_ms < STALE_MAX_MS)
                goto take;
            if (!l->refreshing) {
                *err = l->last_err ? l->last_err : -ENOTCONN;
                pthread_mutex_unlock(&l->mu);
                return NULL;
            }
            pthread_cond_wait(&l->changed, &l->mu);
            continue;
        }
        break;
    }
    l->refreshing = true;
    l->tried_ms = now;
    was_truncated = l->cur && l->cur->truncated;
    pthread_mutex_unlock(&l->mu);

    sn = snapshot_query(s, now, err);
    if (sn && sn->truncated && !was_truncated)
        log_warn("sales listing truncated: the live sales ending last or "
                 "the upcoming ones beginning last are left out",
                 "max=%d", SALE_LISTING_MAX);

    pthread_mutex_lock(&l->mu);
    l->refreshing = false;
    l->last_err = sn ? 0 : *err;
    if (sn) {
        old = l->cur;
        l->cur = sn;
    } else {
        log_warn("sales listing not refreshed", "err=%d", *err);
    }
    pthread_cond_broadcast(&l->changed);
    if (!l->cur || util_mono_ms() - l->cur->taken_ms >= STALE_MAX_MS) {
        pthread_mutex_unlock(&l->mu);
        sale__snapshot_unref(old);
        return NULL;
    }
take:
    sn = l->cur;
    atomic_fetch_add(&sn->refs, 1);
    pthread_mutex_unlock(&l->mu);
    sale__snapshot_unref(old);
    *err = 0;
    return sn;
}

/* Whether v is past the cursor (key, id) of its list. */
static bool after_cursor(const struct sale_listing_query *q, int64_t key,
                         int64_t id)
{
    if (!q->cursor_given)
        return true;
    return key > q->cursor_key || (key == q->cursor_key && id > q->cursor_id);
}

int sale_sales_list(struct sale *s, const struct sale_listing_query *q,
                    struct sale_sales_page *page)
{
    struct sale_snapshot *sn;
    int64_t t = q->now_s;
    int err;

    memset(page, 0, sizeof(*page));
    sn = snapshot_get(s, &err);
    if (!sn)
        return err;
    page->priv = sn;
    page->items = xcalloc(q->limit ? q->limit : 1, sizeof(*page->items));
    page->stock = xcalloc(q->limit ? q->limit : 1, sizeof(*page->stock));
    for (size_t i = 0; i < sn->n; i++) {
        const struct store_voucher *v;
        int64_t key;

        if (q->status == SALE_LISTING_LIVE) {
            v = sn->ended[i];
            key = v->end_time;
            if (!(v->begin_time <= t && t < v->end_time))
                continue;
        } else {
            v = &sn->items[i];
            key = v->begin_time;
            if (!(t < v->begin_time && v->begin_time <= t + q->within_s))
                continue;
        }
        if ((q->shop_id > 0 && v->shop_id != q->shop_id) ||
            !after_cursor(q, key, v->id))
            continue;
        if (page->n == q->limit) {
            page->more = true;
            break;
        }
        page->items[page->n] = v;
        page->stock[page->n] = v->stock;
        /* An async sale's row lags Redis by the writer's delay: a sale
         * this instance saw sell out shows none left now. */
        if (v->stock > 0 && v->mode == PURCHASE_ASYNC) {
            struct vcache_voucher c;
            uint64_t gen;

            if (vcache_entry_get(s->cfg.vcache, v->id, &c, &gen) && c.found &&
                c.sold_out)
                page->stock[page->n] = 0;
        }
        page->n++;
    }
    page->snapshot_s = sn->taken_s;
    page->truncated = sn->truncated;
    return 0;
}

void sale_sales_page_free(struct sale_sales_page *page)
{
    if (!page)
        return;
    free(page->items);
    free(page->stock);
    sale__snapshot_unref(page->priv);
    memset(page, 0, sizeof(*page));
}
