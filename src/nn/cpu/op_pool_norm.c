/* op_pool_norm.c - the CPU backend's pooling and normalization ops (max, average and
 * global average pooling; batch and layer norm). */
#include "nn/cpu/ops.h"

#include <string.h>

#include "nn/cpu/conv.h"
#include "nn/cpu/norm.h"

/* ---- pooling ---- */

static cpu_pool2d_shape pool_shape(const nn_exec_args *a)
{
    const stoke_shape *in = in_shape(a, 0);
    return (cpu_pool2d_shape){.B = (int)a->batch,
                              .C = (int)in->dims[0],
                              .H = (int)in->dims[1],
                              .W = (int)in->dims[2],
                              .KH = a->node->kernel,
                              .KW = a->node->kernel,
                              .stride_h = a->node->stride,
                              .stride_w = a->node->stride,
                              .pad_h = a->node->padding,
                              .pad_w = a->node->padding};
}

stoke_status cpu_op_maxpool_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    cpu_maxpool2d_forward(a->out, a->in[0], &s);
    return STOKE_OK;
}

stoke_status cpu_op_maxpool_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    if (a->din[0])
        cpu_maxpool2d_backward(a->din[0], a->dout, a->in[0], &s);
    return STOKE_OK;
}

stoke_status cpu_op_avgpool_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    cpu_avgpool2d_forward(a->out, a->in[0], &s);
    return STOKE_OK;
}

stoke_status cpu_op_avgpool_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    if (a->din[0])
        cpu_avgpool2d_backward(a->din[0], a->dout, &s);
    return STOKE_OK;
}

stoke_status cpu_op_gap_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    cpu_global_avgpool_forward(a->out, a->in[0], (int)a->batch, (int)in->dims[0], (int)in->dims[1],
                               (int)in->dims[2]);
    return STOKE_OK;
}

stoke_status cpu_op_gap_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    if (a->din[0])
        cpu_global_avgpool_backward(a->din[0], a->dout, (int)a->batch, (int)in->dims[0],
                                    (int)in->dims[1], (int)in->dims[2]);
    return STOKE_OK;
}

/* ---- normalization ----
 * Batch norm keeps (mean, rstd) per channel; the saved area is per sample, so it is
 * over-provisioned to 2C floats per sample (small next to the activations) and the
 * plan stays linear in the batch. */

size_t cpu_op_bn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    CPU_CTX_SCOPE(ctx);
    (void)g;
    return 2 * (size_t)n->shape.dims[0] * sizeof(float);
}

static void bn_dims(const nn_exec_args *a, int *C, int *S)
{
    const stoke_shape *s = &a->node->shape;
    *C = (int)s->dims[0];
    *S = s->ndim == 3 ? (int)(s->dims[1] * s->dims[2]) : 1;
}

stoke_status cpu_op_bn_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int C, S;
    bn_dims(a, &C, &S);
    float *mean = a->saved, *rstd = (float *)a->saved + C;
    /* a recompute must not move the running statistics a second time */
    float *rmean = a->recompute ? NULL : a->param[2], *rvar = a->recompute ? NULL : a->param[3];
    stoke_status st =
        cpu_batchnorm_forward(a->out, mean, rstd, rmean, rvar, a->in[0], a->param[0], a->param[1],
                              (int)a->batch, C, S, a->train, a->node->momentum, a->node->eps);
    if (st != STOKE_OK)
        return cpu_op_layer_fail(st, a->node);
    return STOKE_OK;
}

stoke_status cpu_op_bn_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int C, S;
    bn_dims(a, &C, &S);
    const float *mean = a->saved, *rstd = (const float *)a->saved + C;
    if (!a->din[0]) { /* the kernel always writes dinp; give it the workspace */
        nn_exec_args b = *a;
        b.din[0] = a->ws;
        memset(a->ws, 0, (size_t)a->batch * (size_t)elems(&a->node->shape) * sizeof(float));
        cpu_batchnorm_backward(b.din[0], a->grad[0], a->grad[1], a->dout, a->in[0], a->param[0],
                               mean, rstd, (int)a->batch, C, S, a->train);
        return STOKE_OK;
    }
    cpu_batchnorm_backward(a->din[0], a->grad[0], a->grad[1], a->dout, a->in[0], a->param[0], mean,
                           rstd, (int)a->batch, C, S, a->train);
    return STOKE_OK;
}

/* Scratch for a gradient the graph does not want (an input's) when the kernel always
 * writes one: the layer's input size. */
stoke_status cpu_op_input_sized_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                                   stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    (void)p;
    *bytes = align_up((size_t)batch * (size_t)elems(&g->nodes[n->in[0]].shape) * sizeof(float));
    return STOKE_OK;
}

size_t cpu_op_ln_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    CPU_CTX_SCOPE(ctx);
    (void)g;
    const stoke_shape *s = &n->shape;
    return 2 * (size_t)(elems(s) / s->dims[s->ndim - 1]) * sizeof(float);
}

static void ln_dims(const nn_exec_args *a, int *N, int *C)
{
    const stoke_shape *s = &a->node->shape;
    *C = (int)s->dims[s->ndim - 1];
    *N = (int)(a->batch * (elems(s) / *C));
}

stoke_status cpu_op_ln_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N, C;
    ln_dims(a, &N, &C);
    cpu_layernorm_forward(a->out, a->saved, (float *)a->saved + N, a->in[0], a->param[0],
                          a->param[1], N, C, a->node->eps);
    return STOKE_OK;
}

stoke_status cpu_op_ln_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N, C;
    ln_dims(a, &N, &C);
    float *din = a->din[0];
    if (!din) {
        din = a->ws;
        memset(din, 0, (size_t)N * C * sizeof(float));
    }
    cpu_layernorm_backward(din, a->grad[0], a->grad[1], a->dout, a->in[0], a->param[0], a->saved,
                           (const float *)a->saved + N, N, C);
    return STOKE_OK;
}
