/* op_eltwise.c - the CPU backend's element-wise ops: activations, dropout, the
 * residual add, and softmax over the last axis. */
#include "nn/cpu/ops.h"

#include "nn/cpu/eltwise.h"

/* ---- element-wise ---- */

static size_t out_n(const nn_exec_args *a)
{
    return (size_t)a->batch * (size_t)elems(&a->node->shape);
}

stoke_status cpu_op_relu_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_relu_forward(a->out, a->in[0], out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_relu_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_relu_backward(a->din[0], a->dout, a->out, out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_gelu_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_gelu_forward(a->out, a->in[0], out_n(a), 0);
    return STOKE_OK;
}
stoke_status cpu_op_gelu_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_gelu_backward(a->din[0], a->dout, a->in[0], out_n(a), 0);
    return STOKE_OK;
}
stoke_status cpu_op_tanh_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_tanh_forward(a->out, a->in[0], out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_tanh_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_tanh_backward(a->din[0], a->dout, a->out, out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_sigmoid_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_sigmoid_forward(a->out, a->in[0], out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_sigmoid_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_sigmoid_backward(a->din[0], a->dout, a->out, out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_dropout_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_dropout_forward(a->out, a->in[0], out_n(a), a->node->p, a->seed, a->step, a->train);
    return STOKE_OK;
}
stoke_status cpu_op_dropout_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_dropout_backward(a->din[0], a->dout, out_n(a), a->node->p, a->seed, a->step, a->train);
    return STOKE_OK;
}
stoke_status cpu_op_add_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_residual_forward(a->out, a->in[0], a->in[1], out_n(a));
    return STOKE_OK;
}
stoke_status cpu_op_add_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t n = out_n(a);
    if (a->din[0] && a->din[1]) {
        cpu_residual_backward(a->din[0], a->din[1], a->dout, n);
        return STOKE_OK;
    }
    for (int k = 0; k < 2; k++)
        if (a->din[k])
            for (size_t i = 0; i < n; i++)
                a->din[k][i] += a->dout[i];
    return STOKE_OK;
}
stoke_status cpu_op_softmax_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *s = &a->node->shape;
    int C = (int)s->dims[s->ndim - 1];
    cpu_softmax_forward(a->out, a->in[0], (int)(out_n(a) / (size_t)C), C);
    return STOKE_OK;
}
stoke_status cpu_op_softmax_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *s = &a->node->shape;
    int C = (int)s->dims[s->ndim - 1];
    if (a->din[0])
        cpu_softmax_backward(a->din[0], a->dout, a->out, (int)(out_n(a) / (size_t)C), C);
    return STOKE_OK;
}
