/*
 * multi.c - several locks taken all or none (Curator's
 * InterProcessMultiLock, Redisson's RedissonMultiLock).
 *
 * Two callers that take overlapping sets in different orders can deadlock:
 * each holds one lock and waits for the other's. Sorting every set into
 * one canonical order (by name, then backend and servers, then kind, then
 * owner) before taking it means any two callers meet their common locks in
 * the same order, so the first to take the first common lock gets them
 * all. The order only depends on what the locks are, never on the
 * caller's array, so it is the same in every process.
 */
#include "lock/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* Within one name: a writer before a reader, so that a read-write pair of
 * one owner downgrades instead of asking for an upgrade. */
static int kind_rank(enum lock_kind k)
{
    switch (k) {
    case LOCK_KIND_MUTEX:
        return 0;
    case LOCK_KIND_FAIR:
        return 1;
    case LOCK_KIND_WRITE:
        return 2;
    case LOCK_KIND_READ:
        return 3;
    case LOCK_KIND_SEMAPHORE:
        break;
    }
    return 4;
}

/* Same lock name on the same servers of the same backend. */
static int same_place(const struct lock *a, const struct lock *b)
{
    return a->name_len == b->name_len &&
           memcmp(a->name, b->name, a->name_len) == 0 &&
           strcmp(a->c->be->name, b->c->be->name) == 0 &&
           strcmp(a->c->where, b->c->where) == 0;
}

static int canonical_cmp(const void *pa, const void *pb)
{
    const struct lock *a = *(struct lock *const *)pa;
    const struct lock *b = *(struct lock *const *)pb;
    size_t n = a->name_len < b->name_len ? a->name_len : b->name_len;
    int d = memcmp(a->name, b->name, n);

    if (d)
        return d;
    if (a->name_len != b->name_len)
        return a->name_len < b->name_len ? -1 : 1;
    if ((d = strcmp(a->c->be->name, b->c->be->name)) != 0)
        return d;
    if ((d = strcmp(a->c->where, b->c->where)) != 0)
        return d;
    if ((d = kind_rank(a->kind) - kind_rank(b->kind)) != 0)
        return d;
    return strcmp(a->owner, b->owner);
}

/*
 * Whether a and b (same place) could never both be held by this caller:
 * two owners of an exclusive lock, or a writer and a reader of different
 * owners. One struct lock twice is refused by the caller.
 */
static int excludes(const struct lock *a, const struct lock *b)
{
    int a_rw = a->kind == LOCK_KIND_READ || a->kind == LOCK_KIND_WRITE;
    int b_rw = b->kind == LOCK_KIND_READ || b->kind == LOCK_KIND_WRITE;

    if (a_rw && b_rw)
        return (a->kind == LOCK_KIND_WRITE || b->kind == LOCK_KIND_WRITE) &&
               strcmp(a->owner, b->owner) != 0;
    if (a->kind != b->kind)
        return 0; /* separate namespaces */
    return a->kind == LOCK_KIND_MUTEX || a->kind == LOCK_KIND_FAIR;
}

/* Copy locks into out, sorted; -EINVAL for a set that cannot be taken. */
static int canonical(struct lock *const *locks, size_t n, struct lock **out)
{
    if (!locks || n == 0 || n > LOCK_MULTI_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!locks[i])
            return -EINVAL;
        out[i] = locks[i];
    }
    qsort(out, n, sizeof(*out), canonical_cmp);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n && same_place(out[i], out[j]); j++)
            if (out[i] == out[j] || excludes(out[i], out[j]))
                return -EINVAL;
    }
    return 0;
}

int lock_multi_acquire(struct lock *const *locks, size_t n, uint32_t wait_ms,
                       uint32_t lease_ms, enum lock_status *status)
{
    struct lock *order[LOCK_MULTI_MAX];
    int64_t deadline = lock__mono_ms() + wait_ms;
    size_t taken = 0;
    int err;

    if (!status)
        return -EINVAL;
    err = canonical(locks, n, order);
    if (err)
        return err;
    *status = LOCK_ACQUIRED;
    for (; taken < n; taken++) {
        int64_t left = deadline - lock__mono_ms();
        enum lock_status st = LOCK_BUSY;

        err = lock_acquire(order[taken], left > 0 ? (uint32_t)left : 0,
                           lease_ms, &st);
        if (err || st != LOCK_ACQUIRED) {
            *status = LOCK_BUSY;
            break;
        }
    }
    if (taken == n)
        return 0;
    /* All or none: give back what this call took, newest first. */
    while (taken > 0) {
        int rerr = lock_release(order[--taken], NULL);
        if (rerr)
            log_warn("multi-lock undo failed", "name=\"%s\" err=%d",
                     order[taken]->name, rerr);
    }
    return err;
}

int lock_multi_release(struct lock *const *locks, size_t n, int *held)
{
    struct lock *order[LOCK_MULTI_MAX];
    int all = 1, first = 0;
    int err = canonical(locks, n, order);

    if (held)
        *held = 0;
    if (err)
        return err;
    for (size_t i = n; i-- > 0;) {
        int h = 0;
        err = lock_release(order[i], &h);
        if (err && !first)
            first = err;
        all &= !err && h;
    }
    if (held)
        *held = all;
    return first;
}
