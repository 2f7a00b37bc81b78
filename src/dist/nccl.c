/* nccl.c - the gradients over NCCL on a GPU's stream (placeholder until built). */
#include "dist/dist_impl.h"

stoke_status dist_use_nccl(stoke_dist *d, int device)
{
    (void)d, (void)device;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "dist: NCCL is not built yet");
}
