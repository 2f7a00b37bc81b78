/* k_eltwise.h - kernel bodies (kern.h) of the CUDA backend's element-wise ops, as the
 * CPU backend's src/nn/cpu/eltwise.h defines them: forward writes, backward
 * ACCUMULATES into din. */
#ifndef STOKE_NN_CUDA_K_ELTWISE_H
#define STOKE_NN_CUDA_K_ELTWISE_H

#include "nn/cuda/kern.h"

typedef struct nk_unary_args {
    float *out;        /* forward: the output; backward: din (accumulated) */
    const float *in;   /* forward: the input; backward: what the op's backward reads */
    const float *dout; /* backward */
} nk_unary_args;

/* relu: backward reads the forward's output (out > 0) */
NK_FN void nk_relu_fwd(int64_t i, const nk_unary_args *a)
{
    a->out[i] = a->in[i] > 0 ? a->in[i] : 0.0f;
}
NK_FN void nk_relu_bwd(int64_t i, const nk_unary_args *a)
{
    if (a->in[i] > 0)
        a->out[i] += a->dout[i];
}

#define NK_ELTWISE_KERNELS(X)  \
    X(relu_fwd, nk_unary_args) \
    X(relu_bwd, nk_unary_args)

#endif
