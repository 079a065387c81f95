/*
 * idempotency.c - the Idempotency-Keys of admin writes (store.h): a key
 * inserted first in the write's own transaction (which its audit record
 * ends), what a second write with the key finds, the first answer written
 * after the commit, and the sweep of old keys.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* Bind the key's two columns of the WHERE clause. */
static void bind_key(MYSQL_BIND *p, struct store_idem *k, unsigned long *len)
{
    bind_i64(&p[0], &k->admin_id);
    bind_str_in(&p[1], k->key, len);
}

/* What the first write with k's key recorded, into k (found). */
static int idem_read(struct store *st, struct store_idem *k)
{
    MYSQL_BIND p[2] = {0}, r[7] = {0};
    unsigned long klen, len[4];
    char hash[sizeof(k->hash) + 1];
    char *answer = xmalloc(STORE_IDEM_ANSWER_MAX + 1);
    int64_t status = 0, target = 0, age = 0;
    size_t n = 0;
    int err;

    bind_key(p, k, &klen);
    bind_str_out(&r[0], hash, sizeof(hash), &len[0]);
    bind_i64(&r[1], &status);
    bind_str_out(&r[2], answer, STORE_IDEM_ANSWER_MAX + 1, &len[1]);
    bind_str_out(&r[3], k->action, sizeof(k->action), &len[2]);
    bind_str_out(&r[4], k->target_type, sizeof(k->target_type), &len[3]);
    bind_i64(&r[5], &target);
    bind_i64(&r[6], &age);
    err = store_stmt_rows(st, STMT_IDEM_GET, p, r, 1, NULL, NULL, &n);
    if (!err && n == 0)
        err = -EAGAIN; /* gone since the insert found it: rare, retry */
    if (err) {
        free(answer);
        return err;
    }
    k->found = true;
    k->shard_no = st->shard_no;
    k->same = len[0] == sizeof(k->hash) &&
              memcmp(hash, k->hash, sizeof(k->hash)) == 0;
    k->status = (unsigned)status;
    k->action[len[2] < sizeof(k->action) ? len[2] : 0] = '\0';
    k->target_type[len[3] < sizeof(k->target_type) ? len[3] : 0] = '\0';
    k->target_id = target;
    k->age_ms = age;
    if (status > 0 && len[1] <= STORE_IDEM_ANSWER_MAX) {
        answer[len[1]] = '\0';
        k->answer = answer;
    } else {
        free(answer);
    }
    return 0;
}

/* The key of audit's write, in st's open transaction. */
static int idem_insert(struct store *st, const struct store_audit *audit)
{
    struct store_idem *k = audit->idem;
    MYSQL_BIND p[6] = {0};
    unsigned long len[4];
    int64_t target = audit->target_id;
    MYSQL_STMT *s;
    int err;

    bind_key(p, k, &len[0]);
    p[2].buffer_type = MYSQL_TYPE_STRING;
    p[2].buffer = k->hash;
    p[2].buffer_length = sizeof(k->hash);
    len[1] = sizeof(k->hash);
    p[2].length = &len[1];
    bind_str_in(&p[3], audit->action, &len[2]);
    bind_str_in(&p[4], audit->target_type, &len[3]);
    bind_i64(&p[5], &target);
    err = store_stmt_exec(st, STMT_IDEM_INSERT, p, NULL, &s);
    if (!err) {
        k->recorded = true;
        k->shard_no = st->shard_no;
        k->target_id = target;
        return 0;
    }
    if (err == -EDEADLK) {
        /* Its row is another write's, whose transaction is still open
         * (the lock wait ran out). */
        k->busy = true;
        return -EBUSY;
    }
    if (err != -EEXIST)
        return err;
    err = idem_read(st, k);
    return err ? err : -EALREADY;
}

int store_tx_begin_keyed(struct store *st, const struct store_audit *audit)
{
    int err = store_query(st, "START TRANSACTION");

    if (err || !audit || !audit->idem)
        return err;
    audit->idem->recorded = false;
    err = idem_insert(st, audit);
    return err ? store_tx_rollback(st, err) : 0;
}

unsigned store_idem_shard(const struct store_idem *k, unsigned n)
{
    /* FNV-1a of the admin's id and the key. */
    uint64_t h = 14695981039346656037ull ^ (uint64_t)k->admin_id;

    for (const char *c = k->key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return (unsigned)(h % n);
}

int store_idem_target_set(struct store *st, const struct store_idem *k,
                          int64_t target_id)
{
    MYSQL_BIND p[3] = {0};
    unsigned long len;
    MYSQL_STMT *s;

    bind_i64(&p[0], &target_id);
    bind_key(&p[1], (struct store_idem *)k, &len);
    return store_stmt_exec(st, STMT_IDEM_TARGET, p, NULL, &s);
}

void store_idem_release(struct store_idem *k)
{
    free(k->answer);
    k->answer = NULL;
}

struct answer_args {
    struct store_idem *k;
    int64_t status;
    const char *body;
};

static int answer_once(struct store *st, void *arg)
{
    struct answer_args *a = arg;
    MYSQL_BIND p[4] = {0};
    unsigned long len[2];
    MYSQL_STMT *s;

    bind_i64(&p[0], &a->status);
    if (a->body)
        bind_str_in(&p[1], a->body, &len[0]);
    else
        p[1].buffer_type = MYSQL_TYPE_NULL;
    bind_key(&p[2], a->k, &len[1]);
    return store_stmt_exec(st, STMT_IDEM_ANSWER, p, NULL, &s);
}

int store_idem_answer(struct store *st, const struct store_idem *k,
                      unsigned status, const char *body)
{
    struct answer_args a = {(struct store_idem *)k, status, body};

    if (!k->recorded)
        return 0;
    if (body && strlen(body) > STORE_IDEM_ANSWER_MAX)
        a.body = NULL;
    return store_retry(store_shard(st, k->shard_no), answer_once, &a);
}

struct sweep_args {
    int64_t age_s;
    size_t deleted;
};

static int sweep_once(struct store *st, void *arg)
{
    struct sweep_args *a = arg;
    MYSQL_BIND p[1] = {0};
    MYSQL_STMT *s;
    int err;

    bind_i64(&p[0], &a->age_s);
    err = store_stmt_exec(st, STMT_IDEM_SWEEP, p, NULL, &s);
    if (!err)
        a->deleted += (size_t)mysql_stmt_affected_rows(s);
    return err;
}

int store_idem_sweep(struct store *st, int64_t age_s, size_t *deleted)
{
    struct sweep_args a = {age_s, 0};
    int first = 0;

    for (unsigned i = 0; i < store_shard_count(st); i++) {
        int err = store_retry(store_shard(st, i), sweep_once, &a);

        if (err && !first)
            first = err;
    }
    *deleted = a.deleted;
    return first;
}
