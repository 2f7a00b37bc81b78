/* eltwise.c - the CUDA backend's element-wise ops (k_eltwise.h). */
#include "nn/cuda/ops.h"

static int64_t out_n(const nn_exec_args *a) { return a->batch * cuda_elems(&a->node->shape); }

stoke_status cuda_relu_fwd(void *ctx, const nn_exec_args *a)
{
    nk_unary_args k = {a->out, a->in[0], NULL};
    return CUDA_RUN((cuda_ctx *)ctx, relu_fwd, out_n(a), &k);
}

stoke_status cuda_relu_bwd(void *ctx, const nn_exec_args *a)
{
    if (!a->din[0])
        return STOKE_OK;
    nk_unary_args k = {a->din[0], a->out, a->dout};
    return CUDA_RUN((cuda_ctx *)ctx, relu_bwd, out_n(a), &k);
}
