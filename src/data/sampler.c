/* sampler.c - which samples make each batch: sequential or a seeded permutation per
 * epoch (Fisher-Yates over a counter-based stream keyed by (seed, epoch)), drop_last,
 * and sharding over ranks by global batches, padded by wrapping around. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "stoke/data.h"

struct stoke_sampler {
    int64_t count; /* samples in the dataset */
    stoke_sampler_opts o;
    int64_t per_rank;    /* this rank's samples per epoch, before drop_last */
    int64_t usable;      /* positions of an epoch over all ranks, after drop_last */
    int64_t *order;      /* the epoch's order over the whole dataset (count entries) */
    int64_t order_epoch; /* which epoch `order` holds; -1 for none */
    stoke_sampler_state st;
};

/* Stream domain separating the sampler from the transforms' streams. */
#define SAMPLER_DOMAIN 0x5348554646ULL /* "SHUFF" */

static void build_order(stoke_sampler *s, int64_t epoch)
{
    int64_t n = s->count;
    for (int64_t i = 0; i < n; i++)
        s->order[i] = i;
    if (s->o.shuffle && n > 1) {
        stoke_rng r = {stoke_stream_key(s->o.seed, SAMPLER_DOMAIN, (uint64_t)epoch), 0};
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)stoke_rng_below(&r, (uint64_t)i + 1);
            int64_t t = s->order[i];
            s->order[i] = s->order[j];
            s->order[j] = t;
        }
    }
    s->order_epoch = epoch;
}

stoke_status stoke_sampler_create(int64_t count, const stoke_sampler_opts *o, stoke_sampler **out)
{
    *out = NULL;
    int world = o->world_size ? o->world_size : 1;
    if (count <= 0)
        return stoke_fail(STOKE_ERR_ARG, "sampler: the dataset has no samples");
    if (o->batch_size < 1)
        return stoke_fail(STOKE_ERR_ARG, "sampler: batch_size %" PRId64 " < 1", o->batch_size);
    if (world < 1 || o->rank < 0 || o->rank >= world)
        return stoke_fail(STOKE_ERR_ARG, "sampler: rank %d outside world size %d", o->rank, world);
    stoke_sampler *s = calloc(1, sizeof *s);
    if (!s || !(s->order = malloc((size_t)count * sizeof *s->order))) {
        free(s);
        return stoke_fail(STOKE_ERR_NOMEM, "sampler: out of memory for %" PRId64 " indices", count);
    }
    s->count = count;
    s->o = *o;
    s->o.world_size = world;
    s->per_rank = (count + world - 1) / world;
    if (o->exact)
        s->usable = count;
    else
        s->usable = world * (o->drop_last ? s->per_rank / o->batch_size * o->batch_size
                                          : s->per_rank);
    s->order_epoch = -1;
    *out = s;
    return STOKE_OK;
}

void stoke_sampler_destroy(stoke_sampler *s)
{
    if (s) {
        free(s->order);
        free(s);
    }
}

/* This rank's share of the global batch that starts at position p: its first
 * position in *first, its length returned (0: none left for it). Every rank gets the
 * same share (the padded order is a multiple of the world) except in an exact epoch's
 * last global batch, whose shares are cut at the end of the data. */
static int64_t share_at(const stoke_sampler *s, int64_t p, int64_t *first)
{
    int64_t world = s->o.world_size, rem = s->usable - p;
    if (rem <= 0)
        return 0;
    int64_t k = (rem + world - 1) / world;
    if (k > s->o.batch_size)
        k = s->o.batch_size;
    *first = p + s->o.rank * k;
    int64_t left = s->usable - *first;
    return left < 0 ? 0 : left < k ? left : k;
}

/* The positions the global batch at p takes over all ranks. */
static int64_t global_step(const stoke_sampler *s, int64_t p)
{
    int64_t world = s->o.world_size, rem = s->usable - p;
    int64_t k = (rem + world - 1) / world;
    if (k > s->o.batch_size)
        k = s->o.batch_size;
    return k * world < rem ? k * world : rem;
}

int64_t stoke_sampler_epoch_samples(const stoke_sampler *s)
{
    int64_t n = 0, first;
    if (s->o.world_size == 1)
        return s->usable;
    for (int64_t p = 0; p < s->usable; p += global_step(s, p))
        n += share_at(s, p, &first);
    return n;
}

int64_t stoke_sampler_epoch_batches(const stoke_sampler *s)
{
    int64_t n = 0, first;
    for (int64_t p = 0; p < s->usable; p += global_step(s, p))
        n += share_at(s, p, &first) > 0;
    return n;
}

int64_t stoke_sampler_next(stoke_sampler *s, int64_t *idx, int64_t *epoch)
{
    *epoch = s->st.epoch;
    int64_t first = 0, k = share_at(s, s->st.index, &first);
    if (k == 0) {
        s->st.epoch++;
        s->st.index = 0;
        return 0;
    }
    if (s->order_epoch != s->st.epoch)
        build_order(s, s->st.epoch);
    /* positions past the data wrap around to the order's start (the padding) */
    for (int64_t j = 0; j < k; j++)
        idx[j] = s->order[(first + j) % s->count];
    s->st.index += global_step(s, s->st.index);
    return k;
}

stoke_sampler_state stoke_sampler_get_state(const stoke_sampler *s) { return s->st; }

stoke_status stoke_sampler_set_state(stoke_sampler *s, stoke_sampler_state st)
{
    if (st.epoch < 0 || st.index < 0 || st.index > s->usable)
        return stoke_fail(STOKE_ERR_ARG,
                          "sampler state: epoch %" PRId64 " index %" PRId64
                          " outside an epoch of %" PRId64 " samples",
                          st.epoch, st.index, s->usable);
    s->st = st;
    return STOKE_OK;
}
