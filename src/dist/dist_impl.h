/* dist_impl.h - what a transport (MPI, NCCL: none built yet) provides to the reducer
 * of dist.c: the world and an in-place mean over it. Internal to src/dist. */
#ifndef STOKE_DIST_IMPL_H
#define STOKE_DIST_IMPL_H

#include "stoke/dist.h"

struct stoke_dist {
    int world, rank;
    /* buf[0..n) replaced by its mean over the world's ranks, queued on `stream` (the
     * model's cudaStream_t, NULL on the CPU, where it is done on return): NCCL's
     * ncclAllReduce with ncclAvg on that stream is capturable into the backward's
     * graph; MPI_Allreduce on the CPU returns done. */
    stoke_status (*allreduce_mean)(stoke_dist *d, float *buf, size_t n, void *stream);
    /* Before the step: everything queued complete or ordered ahead of it. NULL: the
     * stream orders it already. */
    stoke_status (*wait)(stoke_dist *d, void *stream);
    void (*transport_free)(stoke_dist *d); /* NULL: nothing of its own */
    void *staging; /* the model's memory, the largest bucket's bytes (dist.c) */
};

#endif
