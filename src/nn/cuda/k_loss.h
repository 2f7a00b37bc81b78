/* k_loss.h - kernel bodies (kern.h) of the CUDA backend's loss ops. */
#ifndef STOKE_NN_CUDA_K_LOSS_H
#define STOKE_NN_CUDA_K_LOSS_H

#include "nn/cuda/kern.h"

#define NK_LOSS_KERNELS(X)

#endif
