/* pool.c - the CUDA backend's max, average and global average pooling (k_pool.h):
 * forward one index per output element, backward one per input element gathering
 * from the windows that contain it. */
#include "nn/cuda/ops.h"

static nk_pool_args pool_args(const nn_exec_args *a, float *out, const float *dout)
{
    const stoke_shape *in = cuda_in_shape(a, 0), *o = &a->node->shape;
    nk_pool_args k = {0};
    k.out = out;
    k.in = a->in[0];
    k.dout = dout;
    k.H = in->dims[1];
    k.W = in->dims[2];
    if (a->node->op != STOKE_NN_GLOBAL_AVGPOOL) {
        k.OH = o->dims[1];
        k.OW = o->dims[2];
        k.k = a->node->kernel;
        k.stride = a->node->stride;
        k.pad = a->node->padding;
    }
    return k;
}

static int64_t in_n(const nn_exec_args *a) { return a->batch * cuda_elems(cuda_in_shape(a, 0)); }
static int64_t out_n(const nn_exec_args *a) { return a->batch * cuda_elems(&a->node->shape); }

static stoke_status done(stoke_status st, const nn_exec_args *a)
{
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_pool_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    nk_pool_args k = pool_args(a, a->out, NULL);
    stoke_status st;
    switch (a->node->op) {
    case STOKE_NN_MAXPOOL2D: st = CUDA_RUN(c, maxpool_fwd, out_n(a), &k); break;
    case STOKE_NN_AVGPOOL2D: st = CUDA_RUN(c, avgpool_fwd, out_n(a), &k); break;
    case STOKE_NN_GLOBAL_AVGPOOL: st = CUDA_RUN(c, gap_fwd, out_n(a), &k); break;
    default: return stoke_fail(STOKE_ERR_ARG, "op %s: not a pool", stoke_nn_op_name(a->node->op));
    }
    return done(st, a);
}

stoke_status cuda_pool_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    if (!a->din[0])
        return STOKE_OK;
    nk_pool_args k = pool_args(a, a->din[0], a->dout);
    stoke_status st;
    switch (a->node->op) {
    case STOKE_NN_MAXPOOL2D: st = CUDA_RUN(c, maxpool_bwd, in_n(a), &k); break;
    case STOKE_NN_AVGPOOL2D: st = CUDA_RUN(c, avgpool_bwd, in_n(a), &k); break;
    case STOKE_NN_GLOBAL_AVGPOOL: st = CUDA_RUN(c, gap_bwd, in_n(a), &k); break;
    default: return stoke_fail(STOKE_ERR_ARG, "op %s: not a pool", stoke_nn_op_name(a->node->op));
    }
    return done(st, a);
}
