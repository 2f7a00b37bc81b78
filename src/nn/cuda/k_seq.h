/* k_seq.h - kernel bodies (kern.h) of the CUDA backend's seq ops. */
#ifndef STOKE_NN_CUDA_K_SEQ_H
#define STOKE_NN_CUDA_K_SEQ_H

#include "nn/cuda/kern.h"

#define NK_SEQ_KERNELS(X)

#endif
