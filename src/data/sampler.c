/* sampler.c - which samples make each batch: sequential or a seeded permutation per
 * epoch (Fisher-Yates over a counter-based stream keyed by (seed, epoch)), drop_last,
 * and sharding over ranks padded by wrapping around. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "stoke/data.h"

struct stoke_sampler {
    int64_t count; /* samples in the dataset */
    stoke_sampler_opts o;
    int64_t per_rank;    /* this rank's samples per epoch, before drop_last */
    int64_t usable;      /* after drop_last */
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
    s->usable = o->drop_last ? s->per_rank / o->batch_size * o->batch_size : s->per_rank;
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

int64_t stoke_sampler_epoch_samples(const stoke_sampler *s) { return s->usable; }

int64_t stoke_sampler_epoch_batches(const stoke_sampler *s)
{
    return (s->usable + s->o.batch_size - 1) / s->o.batch_size;
}

int64_t stoke_sampler_next(stoke_sampler *s, int64_t *idx, int64_t *epoch)
{
    *epoch = s->st.epoch;
    if (s->st.index >= s->usable) {
        s->st.epoch++;
        s->st.index = 0;
        return 0;
    }
    if (s->order_epoch != s->st.epoch)
        build_order(s, s->st.epoch);
    int64_t k = s->usable - s->st.index;
    if (k > s->o.batch_size)
        k = s->o.batch_size;
    int64_t world = s->o.world_size;
    for (int64_t j = 0; j < k; j++) {
        /* Rank r takes positions r, r + world, ... of the padded order; positions past
         * the end wrap around to its start (DistributedSampler's padding). */
        int64_t pos = (s->st.index + j) * world + s->o.rank;
        idx[j] = s->order[pos % s->count];
    }
    s->st.index += k;
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
