/*
 * compare.c - the reconciliation's judgement of one async sale (see
 * compare.h).
 */
#include "async/compare.h"

#include <stdlib.h>
#include <string.h>

bool async_sale_compare(const struct async_redis_side *r,
                        const struct async_mysql_side *m,
                        struct async_disagreement *d)
{
    memset(d, 0, sizeof(*d));
    if (r->initial < 0) {
        d->missing = true;
        return false;
    }
    /* Redis' units taken are its buyers, and they are MySQL's active
     * orders plus the orders still in the stream. */
    d->units = (r->initial - r->stock - r->buyers) * 1000000 +
               (r->buyers - m->active - r->unsettled);
    return d->units == 0;
}

bool async_disagreement_same(const struct async_disagreement *a,
                             const struct async_disagreement *b)
{
    return a->missing == b->missing && a->units == b->units;
}

uint64_t async_stream_pos(const char *id)
{
    char *end;
    unsigned long long ms, seq;

    if (!id || id[0] < '0' || id[0] > '9')
        return 0;
    ms = strtoull(id, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return 0;
    seq = strtoull(end + 1, &end, 10);
    if (*end != '\0' || ms >= 1ULL << 43)
        return 0;
    if (seq > (1ULL << 20) - 1)
        seq = (1ULL << 20) - 1;
    return ms << 20 | seq;
}
