/*
 * snapshot.c - the holder of the sales listing's snapshot (listing.c
 * fills and reads it): made with the sale, freed with it.
 */
#include "sale/internal.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/util.h"

void sale__snapshot_unref(struct sale_snapshot *sn)
{
    if (!sn || atomic_fetch_sub(&sn->refs, 1) != 1)
        return;
    free(sn->items);
    free(sn->ended);
    free(sn);
}

struct sale_listing *sale__listing_new(void)
{
    struct sale_listing *l = xcalloc(1, sizeof(*l));

    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->changed, NULL);
    return l;
}

void sale__listing_free(struct sale_listing *l)
{
    if (!l)
        return;
    sale__snapshot_unref(l->cur);
    pthread_cond_destroy(&l->changed);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
