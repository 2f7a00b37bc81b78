/* tune_impl.h - rules shared by the recommendations (recommend.c) and the decision a
 * run applies (decide.c), so `stoke probe` and `stoke train` say and do the same. */
#ifndef STOKE_TUNE_IMPL_H
#define STOKE_TUNE_IMPL_H

#include "stoke/tune.h"

/* Two batches per worker keep one being filled and one ready; the floor of 2 keeps
 * the next batch ready even without workers; 32 bounds the RAM the ring holds. */
enum { MIN_PREFETCH = STOKE_TUNE_PREFETCH_MIN, MAX_PREFETCH = STOKE_TUNE_PREFETCH_MAX };

/* The loader's ring slots for this many workers: 2 x workers within [2, 32]. */
int tune_prefetch_depth(int workers);

/* A count of batches in flight within [2, 32]. */
int tune_prefetch_clamp(long depth);

/* The most loader workers the rules give this machine: 16 with a GPU (more rarely
 * helps and each worker holds batches in RAM), 8 on a CPU-only machine. */
int tune_workers_cap(const stoke_machine *m);

#endif
