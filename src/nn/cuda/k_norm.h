/* k_norm.h - kernel bodies (kern.h) of the CUDA backend's norm ops. */
#ifndef STOKE_NN_CUDA_K_NORM_H
#define STOKE_NN_CUDA_K_NORM_H

#include "nn/cuda/kern.h"

#define NK_NORM_KERNELS(X)

#endif
