/* loss.c - the CUDA backend's losses and metrics (k_loss.h): per-sample terms, then
 * one ordered sum, so a loss is the same for any launch configuration. A bad class
 * index or action sets the node's flag, read once the forward is queued
 * (cuda_forward_check): the kernels skip the bad samples meanwhile. */
#include <math.h>

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
    k.flag = cuda_flag_of(c, a->index);
    k.rows = a->batch;
    k.cols = cuda_elems(s);
    k.tcols = cuda_elems(cuda_in_shape(a, 1));
    bool per_sample = a->node->op == STOKE_NN_CROSS_ENTROPY || a->node->op == STOKE_NN_ACCURACY ||
                      a->node->op == STOKE_NN_POLICY_GRADIENT;
    k.denom = per_sample ? (double)a->batch : (double)a->batch * (double)k.cols;
    k.g = (double)scale / k.denom * (a->node->op == STOKE_NN_MSE ? 2.0 : 1.0);
    k.on = 1.0 - a->node->smoothing;
    k.off = a->node->smoothing / (double)k.cols;
    k.clip = a->node->clip;
    k.entropy = a->node->entropy;
    return k;
}

/* cpu_policy_gradient's checks of the sizes and options, before any launch */
static stoke_status pg_check(const nk_loss_args *k)
{
    if (k->rows < 1 || k->cols < 2)
        return stoke_fail(STOKE_ERR_ARG,
                          "policy gradient: batch %d and actions %d must be >= 1 "
                          "and >= 2",
                          (int)k->rows, (int)k->cols);
    if (k->tcols == 2 ? k->clip != 0 : k->tcols != 3 || !(k->clip > 0 && k->clip < 1))
        return stoke_fail(STOKE_ERR_ARG,
                          "policy gradient: %d target columns with clip %g (2 "
                          "with clip 0, or 3 with clip in (0, 1))",
                          (int)k->tcols, (double)k->clip);
    if (!(k->entropy >= 0 && isfinite(k->entropy)))
        return stoke_fail(STOKE_ERR_ARG,
                          "policy gradient: entropy coefficient %g must be "
                          "finite and >= 0",
                          (double)k->entropy);
    return STOKE_OK;
}

static stoke_status read_back(cuda_ctx *c, void *host, const void *dev, size_t bytes)
{
    stoke_status st = stoke_cudart_copy_to_host_async(c->rt, host, dev, bytes, c->L.stream);
    return st == STOKE_OK ? stoke_cudart_stream_sync(c->rt, c->L.stream) : st;
}

/* The first bad sample's error, worded as the CPU backend's: its target read back. */
stoke_status cuda_loss_bad(cuda_ctx *c, const cuda_input_check *k, int32_t flag)
{
    int b = flag - 1;
    if (k->node->op == STOKE_NN_CROSS_ENTROPY) {
        int32_t t = 0;
        stoke_status st = read_back(c, &t, (const int32_t *)k->data + b, sizeof t);
        if (st != STOKE_OK)
            return st;
        return stoke_fail(STOKE_ERR_ARG,
                          "cross-entropy: sample %d has target %d, outside [0, %lld)", b, (int)t,
                          (long long)k->cols);
    }
    float t[3] = {0, 0, 0};
    stoke_status st =
        read_back(c, t, (const float *)k->data + (int64_t)b * k->tcols, (size_t)k->tcols * 4);
    if (st != STOKE_OK)
        return st;
    if (!(t[0] >= 0 && t[0] < (float)k->cols && t[0] == floorf(t[0])))
        return stoke_fail(STOKE_ERR_ARG,
                          "sample %d has action %g, not a whole number in "
                          "[0, %d)",
                          b, (double)t[0], (int)k->cols);
    if (!isfinite(t[1]))
        return stoke_fail(STOKE_ERR_ARG, "sample %d has advantage %g (not finite)", b,
                          (double)t[1]);
    return stoke_fail(STOKE_ERR_ARG, "sample %d has old log-probability %g (not finite)", b,
                      (double)t[2]);
}

/* The sum into out[0], and the flag (every loss writes its own; those with targets
 * that can be bad are checked after the forward). */
static stoke_status reduce(cuda_ctx *c, const nn_exec_args *a, nk_loss_args *k)
{
    stoke_status st = CUDA_RUN(c, loss_reduce, 1, k);
    if (st == STOKE_OK &&
        (a->node->op == STOKE_NN_CROSS_ENTROPY || a->node->op == STOKE_NN_POLICY_GRADIENT))
        c->checks[a->index] = (cuda_input_check){a->node, a->in[1], k->cols, k->tcols};
    return st;
}

stoke_status cuda_loss_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    stoke_status st = cuda_ctx_checks(c, a->graph->nnodes);
    if (st != STOKE_OK)
        return cuda_layer_fail(st, a->node);
    nk_loss_args k = loss_args(c, a, NULL, 1.0f);
    switch (a->node->op) {
    case STOKE_NN_CROSS_ENTROPY: st = CUDA_RUN(c, ce_fwd, k.rows, &k); break;
    case STOKE_NN_MSE: st = CUDA_RUN(c, mse_fwd, k.rows, &k); break;
    case STOKE_NN_L1: st = CUDA_RUN(c, l1_fwd, k.rows, &k); break;
    case STOKE_NN_BCE_LOGITS: st = CUDA_RUN(c, bce_fwd, k.rows, &k); break;
    case STOKE_NN_ACCURACY: st = CUDA_RUN(c, accuracy, k.rows, &k); break;
    case STOKE_NN_MAE: st = CUDA_RUN(c, mae, k.rows, &k); break;
    case STOKE_NN_POLICY_GRADIENT:
        st = pg_check(&k);
        if (st == STOKE_OK)
            st = CUDA_RUN(c, pg_fwd, k.rows, &k);
        break;
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
    case STOKE_NN_POLICY_GRADIENT: st = CUDA_RUN(c, pg_bwd, k.rows, &k); break;
    default: return stoke_fail(STOKE_ERR_ARG, "op %s: not a loss", stoke_nn_op_name(a->node->op));
    }
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
