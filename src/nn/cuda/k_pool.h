/* k_pool.h - kernel bodies (kern.h) of the CUDA backend's pool ops. */
#ifndef STOKE_NN_CUDA_K_POOL_H
#define STOKE_NN_CUDA_K_POOL_H

#include "nn/cuda/kern.h"

#define NK_POOL_KERNELS(X)

#endif
