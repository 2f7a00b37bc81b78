/* local.c - the world of one process: the transport whose mean over one rank is its
 * input, so the seam is exercised (buckets staged and copied back) without a peer. */
#include <stdlib.h>

#include "dist/dist_impl.h"

static stoke_status local_mean(stoke_dist *d, float *buf, size_t n, void *stream)
{
    (void)d, (void)buf, (void)n, (void)stream; /* the mean of one value is the value */
    return STOKE_OK;
}

stoke_status stoke_dist_local(stoke_dist **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory");
    (*out)->world = 1;
    (*out)->allreduce_mean = local_mean;
    return STOKE_OK;
}
