/* k_eltwise.h - kernel bodies (kern.h) of the CUDA backend's eltwise ops. */
#ifndef STOKE_NN_CUDA_K_ELTWISE_H
#define STOKE_NN_CUDA_K_ELTWISE_H

#include "nn/cuda/kern.h"

#define NK_ELTWISE_KERNELS(X)

#endif
