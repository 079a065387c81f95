/*
 * i64map.c - open addressing with linear probing (see i64map.h).
 */
#include "common/i64map.h"

#include <stdlib.h>

#include "common/util.h"

/* A 64-bit mixer (splitmix64's finaliser): ids that differ only in their
 * low or high bits spread over the table. */
static size_t slot_of(const struct i64map *m, uint64_t k)
{
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return (size_t)k & (m->cap - 1);
}

static void grow(struct i64map *m)
{
    struct i64map n = {.cap = m->cap ? m->cap * 2 : 16};

    n.keys = xcalloc(n.cap, sizeof(*n.keys));
    n.vals = xcalloc(n.cap, sizeof(*n.vals));
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i])
            i64map_put(&n, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    *m = n;
}

void i64map_put(struct i64map *m, uint64_t key, uint64_t val)
{
    size_t i;

    if ((m->len + 1) * 2 > m->cap)
        grow(m);
    for (i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return;
        }
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
}

bool i64map_get(const struct i64map *m, uint64_t key, uint64_t *val)
{
    if (!m->len)
        return false;
    for (size_t i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            if (val)
                *val = m->vals[i];
            return true;
        }
    return false;
}

/* Empty slot i and move later entries of its run back into the gap, so
 * that every entry stays reachable from its home slot. */
static void remove_at(struct i64map *m, size_t i)
{
    size_t mask = m->cap - 1, j = i;

    for (;;) {
        j = (j + 1) & mask;
        if (!m->keys[j])
            break;
        size_t home = slot_of(m, m->keys[j]);
        /* Leave j where it is when its home lies cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        i = j;
    }
    m->keys[i] = 0;
    m->vals[i] = 0;
    m->len--;
}

bool i64map_del(struct i64map *m, uint64_t key)
{
    if (!m->len)
        return false;
    for (size_t i = slot_of(m, key); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key) {
            remove_at(m, i);
            return true;
        }
    return false;
}

void i64map_filter(struct i64map *m,
                   bool (*keep)(void *ctx, uint64_t key, uint64_t val),
                   void *ctx)
{
    uint64_t *gone;
    size_t n = 0;

    if (!m->len)
        return;
    /* The keys first: a deletion moves entries around. */
    gone = xcalloc(m->len, sizeof(*gone));
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && !keep(ctx, m->keys[i], m->vals[i]))
            gone[n++] = m->keys[i];
    for (size_t i = 0; i < n; i++)
        i64map_del(m, gone[i]);
    free(gone);
}

void i64map_clear(struct i64map *m)
{
    free(m->keys);
    free(m->vals);
    *m = (struct i64map){0};
}
