/*
 * compare.c - the reconciliation's judgement of one async sale (see
 * compare.h).
 */
#include "async/compare.h"

#include <stdlib.h>
#include <string.h>

/*
 * Every order Redis sold up to the snapshot is, at that moment, either
 * unsettled (its pending record is still there) or settled: written to
 * MySQL (counted in "written") or dead-lettered. MySQL is read after
 * Redis, counting only orders up to the snapshot's stream position, so
 * that orders sold later do not count; among those it counts, the ones
 * Redis had not settled yet are the only difference, and there cannot be
 * more of them than Redis had unsettled:
 *
 *   in flight = MySQL's orders - written,  0 <= in flight <= unsettled
 *
 * Redis' buyers are the written orders still active, the closed ones
 * whose unit MySQL still owes back to Redis (the unit and the buyer come
 * back together, in one script, a moment or a retry after the close),
 * and the unsettled ones (plus the dead letters, which the rebuild
 * clears):
 *
 *   buyers = written - closed + owed + unsettled,
 *            closed = MySQL's orders - its active ones
 *
 * and Redis agrees with itself: initial = stock + buyers. Each term is
 * judged on its own: no sum of them can hide one behind another.
 *
 * A restock commits in MySQL (initial and restocked up by n) before its
 * script adds n to Redis' initial, stock and restocked at once; in
 * between MySQL's initial is Redis' plus the restocks Redis lacks:
 *
 *   initial(Redis) = initial(MySQL) - (restocked(MySQL) - restocked(Redis))
 */
bool async_sale_compare(const struct async_redis_side *r,
                        const struct async_mysql_side *m,
                        struct async_disagreement *d)
{
    long long in_flight = m->orders - r->written;

    memset(d, 0, sizeof(*d));
    if (r->initial < 0) {
        d->missing = true;
        return false;
    }
    d->orphan = r->orphan;
    d->initial = m->initial >= 0
                     ? r->initial - (m->initial - (m->restocked - r->restocked))
                     : 0;
    d->units = r->initial - r->stock - r->buyers;
    d->buyers = r->buyers - (r->written - (m->orders - m->active) + m->owed) -
                r->unsettled;
    d->in_flight = in_flight < 0              ? in_flight
                   : in_flight > r->unsettled ? in_flight - r->unsettled
                                              : 0;
    return !d->orphan && d->initial == 0 && d->units == 0 && d->buyers == 0 &&
           d->in_flight == 0;
}

bool async_disagreement_same(const struct async_disagreement *a,
                             const struct async_disagreement *b)
{
    return a->missing == b->missing && a->orphan == b->orphan &&
           a->initial == b->initial && a->units == b->units &&
           a->buyers == b->buyers && a->in_flight == b->in_flight;
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
