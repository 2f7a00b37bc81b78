/* loss.c - the CUDA backend's losses and metrics (k_loss.h): per-sample terms, then
 * one ordered sum, so a loss is the same for any launch configuration. A bad class
 * index comes back through the context's flag, read with the loss. */
#include "nn/cuda/ops.h"

/* per[] (doubles) then bad[] (int32), rows each */
stoke_status cuda_loss_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes)
{
    (void)ctx;
    (void)g;
    (void)n;
    (void)p;
    *bytes = (size_t)batch * (sizeof(double) + sizeof(int32_t));
    return STOKE_OK;
}

static nk_loss_args loss_args(cuda_ctx *c, const nn_exec_args *a, float *dx, float scale)
{
    const stoke_shape *s = cuda_in_shape(a, 0);
    nk_loss_args k = {0};
    k.x = a->in[0];
    k.target = a->in[1];
    k.dx = dx;
    k.per = a->ws;
    k.bad = (int32_t *)(k.per + a->batch);
    k.out = a->out;
    k.flag = c->flag;
    k.rows = a->batch;
    k.cols = cuda_elems(s);
    k.tcols = cuda_elems(cuda_in_shape(a, 1));
    bool per_sample = a->node->op == STOKE_NN_CROSS_ENTROPY || a->node->op == STOKE_NN_ACCURACY;
    k.denom = per_sample ? (double)a->batch : (double)a->batch * (double)k.cols;
    k.g = (double)scale / k.denom * (a->node->op == STOKE_NN_MSE ? 2.0 : 1.0);
    k.on = 1.0 - a->node->smoothing;
    k.off = a->node->smoothing / (double)k.cols;
    return k;
}

/* The sum into out[0]; then the flag, read back: a bad class is an error naming the
 * sample, as the CPU backend's. */
static stoke_status reduce(cuda_ctx *c, const nn_exec_args *a, nk_loss_args *k)
{
    stoke_status st = CUDA_RUN(c, loss_reduce, 1, k);
    if (st != STOKE_OK || a->node->op != STOKE_NN_CROSS_ENTROPY)
        return st;
    int32_t flag = 0;
    st = stoke_cudart_copy_to_host_async(c->rt, &flag, c->flag, sizeof flag, c->L.stream);
    if (st == STOKE_OK)
        st = stoke_cudart_stream_sync(c->rt, c->L.stream);
    if (st == STOKE_OK && flag > 0) {
        int32_t t = 0;
        st = stoke_cudart_copy_to_host_async(c->rt, &t, (const int32_t *)a->in[1] + (flag - 1),
                                             sizeof t, c->L.stream);
        if (st == STOKE_OK)
            st = stoke_cudart_stream_sync(c->rt, c->L.stream);
        if (st == STOKE_OK)
            st = stoke_fail(STOKE_ERR_ARG,
                            "cross-entropy: sample %d has target %d, outside [0, %lld)", flag - 1,
                            (int)t, (long long)k->cols);
    }
    return st;
}

stoke_status cuda_loss_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    nk_loss_args k = loss_args(c, a, NULL, 1.0f);
    stoke_status st;
    switch (a->node->op) {
    case STOKE_NN_CROSS_ENTROPY: st = CUDA_RUN(c, ce_fwd, k.rows, &k); break;
    case STOKE_NN_MSE: st = CUDA_RUN(c, mse_fwd, k.rows, &k); break;
    case STOKE_NN_L1: st = CUDA_RUN(c, l1_fwd, k.rows, &k); break;
    case STOKE_NN_BCE_LOGITS: st = CUDA_RUN(c, bce_fwd, k.rows, &k); break;
    case STOKE_NN_ACCURACY: st = CUDA_RUN(c, accuracy, k.rows, &k); break;
    case STOKE_NN_MAE: st = CUDA_RUN(c, mae, k.rows, &k); break;
    default: return stoke_fail(STOKE_ERR_ARG, "op %s: not a loss", stoke_nn_op_name(a->node->op));
    }
    if (st == STOKE_OK)
        st = reduce(c, a, &k);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_loss_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    if (!a->din[0])
        return STOKE_OK;
    nk_loss_args k = loss_args(c, a, a->din[0], a->grad_scale);
    int64_t n = k.rows * k.cols;
    stoke_status st;
    switch (a->node->op) {
    case STOKE_NN_CROSS_ENTROPY: st = CUDA_RUN(c, ce_bwd, k.rows, &k); break;
    case STOKE_NN_MSE: st = CUDA_RUN(c, mse_bwd, n, &k); break;
    case STOKE_NN_L1: st = CUDA_RUN(c, l1_bwd, n, &k); break;
    case STOKE_NN_BCE_LOGITS: st = CUDA_RUN(c, bce_bwd, n, &k); break;
    default: return stoke_fail(STOKE_ERR_ARG, "op %s: not a loss", stoke_nn_op_name(a->node->op));
    }
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
