/* op_matmul.c - the CPU backend's matmul-like ops: linear and conv2d on oneDNN (and
 * OpenBLAS), in fp32, bf16 or emulated precision, and the fused chains the table
 * offers (linear -> relu, conv2d -> relu -> max_pool2d). */
#include "nn/cpu/ops.h"

#include <string.h>

#include "nn/cpu/conv.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"

/* ---- linear: (..., C) -> (..., OC) over rows = batch x leading dims ---- */

typedef struct lin_dims {
    int rows, C, OC;
} lin_dims;

static stoke_status linear_dims(const stoke_graph *g, const nn_node *n, int64_t batch, lin_dims *d)
{
    const stoke_shape *s = &g->nodes[n->in[0]].shape;
    int64_t C = s->dims[s->ndim - 1];
    int64_t rows = batch * (elems(s) / C);
    if (C > INT32_MAX || n->features > INT32_MAX)
        return cpu_op_too_big(n, "weight's side", 1, C > n->features ? C : n->features);
    if (past_int(batch, elems(s) / C))
        return cpu_op_too_big(n, "rows (the batch x the input's leading axes)", batch,
                              elems(s) / C);
    *d = (lin_dims){(int)rows, (int)C, (int)n->features};
    return STOKE_OK;
}

stoke_status cpu_op_linear_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                              stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    lin_dims d = {0, 0, 0};
    stoke_status st = linear_dims(g, n, batch, &d);
    if (st != STOKE_OK)
        return st;
    /* The kernel holds its own scratch (oneDNN's scratchpad, allocated by prepare); it
     * is counted here so the plan's total is an upper bound of what training uses. */
    size_t kernel = 0;
    st = cpu_linear_workspace(d.rows, d.C, d.OC, n->bias, cpu_op_bf16_native(p), &kernel);
    if (st != STOKE_OK)
        return st;
    /* + operands: input, output grad, (emulation) widened weight */
    *bytes = align_up(kernel) + cpu_op_operand_bytes(p, (size_t)d.rows * d.C) +
             cpu_op_operand_bytes(p, (size_t)d.rows * d.OC) +
             cpu_op_wide_bytes(p, (size_t)d.OC * d.C);
    return STOKE_OK;
}

/* linear, or linear -> relu fused (relu: the ReLU as oneDNN's post-op; fp32 and bf16
 * only, see cpu_op_fuse). */
static stoke_status linear_forward(const nn_exec_args *a, int relu)
{
    lin_dims d = {0, 0, 0};
    stoke_status st = linear_dims(a->graph, a->node, a->batch, &d);
    if (st != STOKE_OK)
        return st;
    const float *bias = a->node->bias ? a->param[1] : NULL;
    if (!lowp(a))
        return relu ? cpu_linear_relu_forward(a->out, a->in[0], a->param[0], bias, d.rows, d.C,
                                              d.OC, 0)
                    : cpu_linear_forward(a->out, a->in[0], a->param[0], bias, d.rows, d.C, d.OC);
    size_t off = 0;
    const void *x = cpu_op_operand(a, a->in[0], (size_t)d.rows * d.C, &off);
    if (cpu_op_bf16_native(a->precision))
        return relu ? cpu_linear_relu_forward(a->out, x, a->param_lp[0], bias, d.rows, d.C, d.OC, 1)
                    : cpu_linear_forward_bf16(a->out, x, a->param_lp[0], bias, d.rows, d.C, d.OC);
    const float *w = cpu_op_weight_wide(a, 0, (size_t)d.OC * d.C, &off);
    return cpu_linear_forward(a->out, x, w, bias, d.rows, d.C, d.OC);
}

stoke_status cpu_op_linear_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    return linear_forward(a, 0);
}

/* linear's backward from the output gradient, or for linear -> relu fused (relu) from
 * the ReLU's output gradient masked by its output into the workspace (in bf16 straight
 * into the operand the bf16 matmul reads). */
static stoke_status linear_backward(const nn_exec_args *a, int relu)
{
    lin_dims d = {0, 0, 0};
    stoke_status st = linear_dims(a->graph, a->node, a->batch, &d);
    if (st != STOKE_OK)
        return st;
    float *dbias = a->node->bias ? a->grad[1] : NULL;
    size_t n_out = (size_t)d.rows * d.OC;
    if (!lowp(a)) {
        const float *dy = a->dout;
        if (relu) {
            cpu_relu_mask_grad(a->ws, NULL, a->dout, a->out, n_out);
            dy = a->ws;
        }
        return cpu_linear_backward(a->din[0], a->grad[0], dbias, dy, a->in[0], a->param[0], d.rows,
                                   d.C, d.OC);
    }
    size_t off = 0;
    const void *x = cpu_op_operand(a, a->in[0], (size_t)d.rows * d.C, &off);
    const void *dy;
    if (relu && cpu_op_bf16_native(a->precision)) {
        dy = (char *)a->ws + off;
        cpu_relu_mask_grad(NULL, (uint16_t *)dy, a->dout, a->out, n_out);
    } else {
        dy = cpu_op_operand(a, a->dout, n_out, &off);
    }
    if (cpu_op_bf16_native(a->precision))
        return cpu_linear_backward_bf16(a->din[0], a->grad[0], dbias, dy, x, a->param_lp[0], d.rows,
                                        d.C, d.OC);
    const float *w = cpu_op_weight_wide(a, 0, (size_t)d.OC * d.C, &off);
    return cpu_linear_backward(a->din[0], a->grad[0], dbias, dy, x, w, d.rows, d.C, d.OC);
}

stoke_status cpu_op_linear_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    return linear_backward(a, 0);
}

/* ---- conv2d ---- */

static stoke_status conv_shape(const stoke_graph *g, const nn_node *n, int64_t batch,
                               cpu_conv2d_shape *s)
{
    const stoke_shape *in = &g->nodes[n->in[0]].shape;
    if (past_int(batch, elems(in)))
        return cpu_op_too_big(n, "input", batch, elems(in));
    if (past_int(batch, elems(&n->shape)))
        return cpu_op_too_big(n, "output", batch, elems(&n->shape));
    *s = (cpu_conv2d_shape){.B = (int)batch,
                            .C = (int)in->dims[0],
                            .H = (int)in->dims[1],
                            .W = (int)in->dims[2],
                            .OC = (int)n->features,
                            .KH = n->kernel,
                            .KW = n->kernel,
                            .stride_h = n->stride,
                            .stride_w = n->stride,
                            .pad_h = n->padding,
                            .pad_w = n->padding,
                            .has_bias = n->bias};
    return STOKE_OK;
}

stoke_status cpu_op_conv_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(g, n, batch, &s);
    if (st != STOKE_OK)
        return st;
    size_t kernel = 0;
    st = cpu_conv2d_workspace(&s, cpu_op_bf16_native(p), &kernel);
    if (st != STOKE_OK)
        return st;
    size_t in_n = (size_t)batch * (size_t)elems(&g->nodes[n->in[0]].shape);
    size_t out_n = (size_t)batch * (size_t)elems(&n->shape);
    size_t w_n = (size_t)s.OC * s.C * s.KH * s.KW;
    *bytes = align_up(kernel) + cpu_op_operand_bytes(p, in_n) + cpu_op_operand_bytes(p, out_n) +
             cpu_op_wide_bytes(p, w_n);
    return STOKE_OK;
}

/* The kernel's share of the workspace: what follows the operands (the executor sizes
 * the workspace for the batch it runs, so cpu_op_conv_ws's total is there). */
static void *conv_kernel_ws(const nn_exec_args *a, size_t off, size_t *size)
{
    *size = a->ws_size - off;
    return (char *)a->ws + off;
}

stoke_status cpu_op_conv_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(a->graph, a->node, a->batch, &s);
    if (st != STOKE_OK)
        return st;
    const float *bias = a->node->bias ? a->param[1] : NULL;
    size_t off = 0, ksize;
    if (!lowp(a)) {
        void *kws = conv_kernel_ws(a, 0, &ksize);
        return cpu_conv2d_forward(a->out, a->in[0], a->param[0], bias, &s, kws, ksize);
    }
    size_t in_n = (size_t)a->batch * (size_t)elems(in_shape(a, 0));
    const void *x = cpu_op_operand(a, a->in[0], in_n, &off);
    if (cpu_op_bf16_native(a->precision)) {
        void *kws = conv_kernel_ws(a, off, &ksize);
        return cpu_conv2d_forward_bf16(a->out, x, a->param_lp[0], bias, &s, kws, ksize);
    }
    const float *w = cpu_op_weight_wide(a, 0, (size_t)s.OC * s.C * s.KH * s.KW, &off);
    void *kws = conv_kernel_ws(a, off, &ksize);
    return cpu_conv2d_forward(a->out, x, w, bias, &s, kws, ksize);
}

stoke_status cpu_op_conv_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(a->graph, a->node, a->batch, &s);
    if (st != STOKE_OK)
        return st;
    float *dbias = a->node->bias ? a->grad[1] : NULL;
    size_t off = 0, ksize;
    if (!lowp(a)) {
        void *kws = conv_kernel_ws(a, 0, &ksize);
        return cpu_conv2d_backward(a->din[0], a->grad[0], dbias, a->dout, a->in[0], a->param[0], &s,
                                   kws, ksize);
    }
    size_t in_n = (size_t)a->batch * (size_t)elems(in_shape(a, 0));
    size_t out_n = (size_t)a->batch * (size_t)elems(&a->node->shape);
    const void *x = cpu_op_operand(a, a->in[0], in_n, &off);
    const void *dy = cpu_op_operand(a, a->dout, out_n, &off);
    if (cpu_op_bf16_native(a->precision)) {
        void *kws = conv_kernel_ws(a, off, &ksize);
        return cpu_conv2d_backward_bf16(a->din[0], a->grad[0], dbias, dy, x, a->param_lp[0], &s,
                                        kws, ksize);
    }
    const float *w = cpu_op_weight_wide(a, 0, (size_t)s.OC * s.C * s.KH * s.KW, &off);
    void *kws = conv_kernel_ws(a, off, &ksize);
    return cpu_conv2d_backward(a->din[0], a->grad[0], dbias, dy, x, w, &s, kws, ksize);
}

/* ---- fused conv2d -> relu -> max_pool2d (cpu_conv_block_*) ----
 * bf16 runs as the mixed convolution (fp32 tensors, bf16 math: the reorders round),
 * so the block needs no operand copies; fp16's emulation is not fused. */

static int block_prec(stoke_precision p)
{
    return p == STOKE_PREC_BF16 ? CPU_CONV_MIXED_BF16 : CPU_CONV_FP32;
}

static stoke_status block_ws(void *ctx, const stoke_graph *g, const int *chain, int n,
                             int64_t batch, stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    (void)n;
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(g, &g->nodes[chain[0]], batch, &s);
    if (st != STOKE_OK)
        return st;
    return cpu_conv_block_workspace(&s, g->nodes[chain[2]].kernel, block_prec(p), bytes);
}

static size_t block_saved(void *ctx, const stoke_graph *g, const int *chain, int n)
{
    CPU_CTX_SCOPE(ctx);
    return (size_t)elems(&g->nodes[chain[n - 1]].shape); /* a byte per pooled element */
}

static stoke_status block_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(a->graph, a->node, a->batch, &s);
    if (st != STOKE_OK)
        return st;
    const float *bias = a->node->bias ? a->param[1] : NULL;
    return cpu_conv_block_forward(a->out, a->saved, a->in[0], a->param[0], bias, &s,
                                  a->graph->nodes[a->chain[2]].kernel, block_prec(a->precision),
                                  a->ws, a->ws_size);
}

static stoke_status block_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(a->graph, a->node, a->batch, &s);
    if (st != STOKE_OK)
        return st;
    float *dbias = a->node->bias ? a->grad[1] : NULL;
    return cpu_conv_block_backward(a->din[0], a->grad[0], dbias, a->dout, a->saved, a->in[0],
                                   a->param[0], &s, a->graph->nodes[a->chain[2]].kernel,
                                   block_prec(a->precision), a->ws, a->ws_size);
}

static const nn_fused_impl conv_block = {"conv2d+relu+max_pool2d", block_fwd, block_bwd, block_ws,
                                         block_saved};

/* ---- fused linear -> relu: the ReLU as the matmul's post-op; backward masks the
 * gradient into the workspace (as the bf16 operand directly, in bf16), so the
 * pre-activation and its gradient never exist and nothing is zeroed for them ---- */

static stoke_status linrelu_ws(void *ctx, const stoke_graph *g, const int *chain, int n,
                               int64_t batch, stoke_precision p, size_t *bytes)
{
    (void)n;
    const nn_node *lin = &g->nodes[chain[0]];
    lin_dims d = {0, 0, 0};
    stoke_status st = linear_dims(g, lin, batch, &d);
    if (st == STOKE_OK)
        st = cpu_linear_relu_prepare(d.rows, d.C, d.OC, lin->bias, p == STOKE_PREC_BF16);
    if (st == STOKE_OK)
        st = cpu_op_linear_ws(ctx, g, lin, batch, p, bytes);
    /* + the masked gradient in fp32 (the bf16 operand is already counted) */
    if (st == STOKE_OK && p != STOKE_PREC_BF16)
        *bytes += align_up((size_t)d.rows * d.OC * sizeof(float));
    return st;
}

static size_t linrelu_saved(void *ctx, const stoke_graph *g, const int *chain, int n)
{
    (void)ctx, (void)g, (void)chain, (void)n;
    return 0; /* backward reads the ReLU's output, which the chain keeps */
}

static stoke_status linrelu_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    return linear_forward(a, 1);
}

static stoke_status linrelu_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    return linear_backward(a, 1);
}

static const nn_fused_impl linear_relu = {"linear+relu", linrelu_fwd, linrelu_bwd, linrelu_ws,
                                          linrelu_saved};

stoke_status cpu_op_fuse(void *ctx, const stoke_graph *g, const int *chain, int n, int64_t batch,
                         stoke_precision p, const nn_fused_impl **out)
{
    CPU_CTX_SCOPE(ctx);
    *out = NULL;
    if (p != STOKE_PREC_FP32 && !cpu_op_bf16_native(p))
        return STOKE_OK; /* the fused kernels have no emulated precision */
    if (n == 2) {
        if (g->nodes[chain[0]].op == STOKE_NN_LINEAR && g->nodes[chain[1]].op == STOKE_NN_RELU)
            *out = &linear_relu;
        return STOKE_OK;
    }
    if (n != 3)
        return STOKE_OK;
    const nn_node *c = &g->nodes[chain[0]], *r = &g->nodes[chain[1]], *m = &g->nodes[chain[2]];
    if (c->op != STOKE_NN_CONV2D || r->op != STOKE_NN_RELU || m->op != STOKE_NN_MAXPOOL2D ||
        m->stride != m->kernel || m->padding != 0)
        return STOKE_OK;
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(g, c, batch, &s);
    int ok = 0;
    if (st == STOKE_OK)
        st = cpu_conv_block_supported(&s, m->kernel, block_prec(p), &ok);
    if (st == STOKE_OK && ok)
        *out = &conv_block;
    return st;
}
