/* dist.h - data-parallel training (docs: DESIGN's dist module, over MPI on the CPU
 * and NCCL on the GPU): a world of processes, one model replica each, whose gradients
 * are all-reduced to their mean before every optimizer step through the model's
 * reducer seam (stoke_grad_reducer, nn.h). No transport is built yet: the one world
 * here is the single process, whose reduction copies. */
#ifndef STOKE_DIST_H
#define STOKE_DIST_H

#include "stoke/nn.h"

typedef struct stoke_dist stoke_dist;

/* The world of one process (rank 0 of 1). STOKE_ERR_NOMEM, recorded. */
stoke_status stoke_dist_local(stoke_dist **out);
void stoke_dist_free(stoke_dist *d); /* NULL is fine; after every model using it */

int stoke_dist_world_size(const stoke_dist *d);
int stoke_dist_rank(const stoke_dist *d);

/* The reducer for stoke_model_set_reducer: each bucket's gradients gathered into one
 * flat buffer of the model's memory, all-reduced to their mean over the world, and
 * scattered back, all queued on the model's stream (on a device, captured into its
 * backward graph). Over one process the mean is the input: the gradients come back
 * bit for bit, so a model trains exactly as without a reducer. d serves one model at
 * a time. */
stoke_grad_reducer stoke_dist_reducer(stoke_dist *d);

#endif
