/* op_loss.c - the CPU backend's losses and metrics: each writes the batch mean, and a
 * loss's backward its input gradient scaled by the loss scale. */
#include "nn/cpu/ops.h"

#include "nn/cpu/loss.h"

/* ---- losses and metrics: out[0] = the batch mean ---- */

static stoke_status loss_run(const nn_exec_args *a, float *din, float scale)
{
    size_t n = (size_t)a->batch * (size_t)elems(in_shape(a, 0));
    float loss = 0;
    stoke_status st;
    switch (a->node->op) {
    case STOKE_NN_CROSS_ENTROPY:
        st = cpu_cross_entropy(a->in[0], a->in[1], (int)a->batch, (int)in_shape(a, 0)->dims[0],
                               a->node->smoothing, scale, &loss, din);
        break;
    case STOKE_NN_BCE_LOGITS:
        st = cpu_bce_with_logits(a->in[0], a->in[1], n, scale, &loss, din);
        break;
    case STOKE_NN_MSE: st = cpu_mse(a->in[0], a->in[1], n, scale, &loss, din); break;
    case STOKE_NN_POLICY_GRADIENT:
        st = cpu_policy_gradient(a->in[0], a->in[1], (int)a->batch, (int)in_shape(a, 0)->dims[0],
                                 (int)in_shape(a, 1)->dims[0], a->node->clip, a->node->entropy,
                                 scale, &loss, din);
        break;
    default: st = cpu_l1(a->in[0], a->in[1], n, scale, &loss, din); break;
    }
    if (st != STOKE_OK)
        return cpu_op_layer_fail(st, a->node);
    a->out[0] = loss;
    return STOKE_OK;
}

stoke_status cpu_op_loss_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    return loss_run(a, NULL, 1.0f);
}

stoke_status cpu_op_loss_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    return loss_run(a, a->din[0], a->grad_scale);
}

stoke_status cpu_op_accuracy_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int64_t k = cpu_count_correct(a->in[0], a->in[1], (int)a->batch, (int)in_shape(a, 0)->dims[0]);
    a->out[0] = (float)((double)k / (double)a->batch);
    return STOKE_OK;
}

stoke_status cpu_op_mae_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t n = (size_t)a->batch * (size_t)elems(in_shape(a, 0));
    a->out[0] = (float)(cpu_abs_error_sum(a->in[0], a->in[1], n) / (double)n);
    return STOKE_OK;
}
