/* cpu_backend.c - the CPU backend table: adapters from graph nodes to the kernels of
 * src/nn/cpu (oneDNN, OpenBLAS and our own loops), plus the few glue ops too small
 * for a kernel family (reshape, patchify, position table, mean over tokens). */
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/backend_impl.h"
#include "nn/cpu/attn.h"
#include "nn/cpu/conv.h"
#include "nn/cpu/ctx.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/dnnl_util.h"
#include "nn/cpu/eltwise.h"
#include "nn/cpu/loss.h"
#include "nn/cpu/norm.h"
#include "nn/cpu/optim.h"
#include "core/parse.h"
#include "core/precision.h"

#define ALIGN 64

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* Prefixes the kernel's message with the layer's name (copied first: stoke_fail writes
 * the buffer stoke_last_error reads). */
static stoke_status layer_fail(stoke_status st, const nn_node *n)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    return stoke_fail(st, "%s: %s", n->name, msg);
}

static const stoke_shape *in_shape(const nn_exec_args *a, int i)
{
    return &a->graph->nodes[a->node->in[i]].shape;
}

static int64_t elems(const stoke_shape *s) { return stoke_shape_elems(s); }

/* Sizes reach the kernels as int: the plan refuses graphs where they would not fit,
 * naming the quantity past the limit and the batch this layer takes, since the batch
 * is what the user can change. */
static stoke_status too_big(const nn_node *n, const char *what, int64_t batch, int64_t per_sample)
{
    if (per_sample > INT32_MAX)
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: its %s has %lld values a sample, more than the CPU kernels' int "
                          "limit (2147483647) even at batch 1",
                          n->name, what, (long long)per_sample);
    return stoke_fail(STOKE_ERR_ARG,
                      "%s: its %s at batch %lld has %.0f values (%lld a sample), more than the "
                      "CPU kernels' int limit (2147483647): this layer takes a batch of at most "
                      "%lld",
                      n->name, what, (long long)batch, (double)batch * (double)per_sample,
                      (long long)per_sample, (long long)(INT32_MAX / per_sample));
}

/* Whether batch x per_sample is past the kernels' int (without overflowing first: the
 * batch search plans batches up to 2^40). */
static bool past_int(int64_t batch, int64_t per_sample)
{
    return per_sample > 0 && batch > INT32_MAX / per_sample;
}

/* ---- low precision operands ----
 * bf16 where oneDNN has bf16 kernels on this CPU (AVX-512 and up: dnnl_util_bf16_kernels):
 * the kernels take bf16 bits; activations are converted into the workspace per call.
 * Otherwise the precision is emulated exactly: operands are rounded to bf16 or fp16
 * (values representable in it, stored as fp32) and the fp32 kernels run on them with
 * fp32 accumulation, the arithmetic of the bf16 kernels up to the order of sums. fp16
 * is always emulated (the CPU kernels have no fp16 path); bf16 on CPUs without
 * AVX-512, or under an ISA cap below it, so that `--precision bf16` trains the same
 * way on every CPU. */

static bool lowp(const nn_exec_args *a) { return a->param_lp[0] != NULL; }

/* Whether precision p runs on oneDNN's bf16 kernels (else fp32 or emulated). */
static bool bf16_native(stoke_precision p)
{
    return p == STOKE_PREC_BF16 && dnnl_util_bf16_kernels();
}

/* Converts x (n) into ws at *off as the kernels' operand for the args' precision: bf16
 * bits, or fp32 rounded to bf16 / fp16. Returns the operand. */
static void cpu_to_lowp(void *ctx, stoke_precision p, const float *in, uint16_t *out, size_t n);

static const void *operand(const nn_exec_args *a, const float *x, size_t n, size_t *off)
{
    char *dst = (char *)a->ws + *off;
    if (bf16_native(a->precision)) {
        cpu_to_lowp(NULL, STOKE_PREC_BF16, x, (uint16_t *)dst, n);
        *off += align_up(n * sizeof(uint16_t));
    } else {
        memcpy(dst, x, n * sizeof(float));
        (a->precision == STOKE_PREC_BF16 ? cpu_round_bf16 : cpu_round_f16)((float *)dst, n);
        *off += align_up(n * sizeof(float));
    }
    return dst;
}

/* The bf16 / fp16 weight copy widened to fp32 in the workspace (emulation). */
static const float *weight_wide(const nn_exec_args *a, int i, size_t n, size_t *off)
{
    float *dst = (float *)((char *)a->ws + *off);
    if (a->precision == STOKE_PREC_BF16)
        cpu_bf16_to_f32(a->param_lp[i], dst, n);
    else
        cpu_f16_to_f32(a->param_lp[i], dst, n);
    *off += align_up(n * sizeof(float));
    return dst;
}

/* Workspace of the low-precision operands of one matmul-like op. */
static size_t operand_bytes(stoke_precision p, size_t n)
{
    if (bf16_native(p))
        return align_up(n * sizeof(uint16_t));
    if (p != STOKE_PREC_FP32)
        return align_up(n * sizeof(float));
    return 0;
}

/* Workspace of the widened weight copy (emulated precisions). */
static size_t wide_bytes(stoke_precision p, size_t n)
{
    return p != STOKE_PREC_FP32 && !bf16_native(p) ? align_up(n * sizeof(float)) : 0;
}

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
        return too_big(n, "weight's side", 1, C > n->features ? C : n->features);
    if (past_int(batch, elems(s) / C))
        return too_big(n, "rows (the batch x the input's leading axes)", batch, elems(s) / C);
    *d = (lin_dims){(int)rows, (int)C, (int)n->features};
    return STOKE_OK;
}

static stoke_status linear_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
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
    st = cpu_linear_workspace(d.rows, d.C, d.OC, n->bias, bf16_native(p), &kernel);
    if (st != STOKE_OK)
        return st;
    /* + operands: input, output grad, (emulation) widened weight */
    *bytes = align_up(kernel) + operand_bytes(p, (size_t)d.rows * d.C) +
             operand_bytes(p, (size_t)d.rows * d.OC) + wide_bytes(p, (size_t)d.OC * d.C);
    return STOKE_OK;
}

/* linear, or linear -> relu fused (relu: the ReLU as oneDNN's post-op; fp32 and bf16
 * only, see cpu_fuse). */
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
    const void *x = operand(a, a->in[0], (size_t)d.rows * d.C, &off);
    if (bf16_native(a->precision))
        return relu ? cpu_linear_relu_forward(a->out, x, a->param_lp[0], bias, d.rows, d.C, d.OC, 1)
                    : cpu_linear_forward_bf16(a->out, x, a->param_lp[0], bias, d.rows, d.C, d.OC);
    const float *w = weight_wide(a, 0, (size_t)d.OC * d.C, &off);
    return cpu_linear_forward(a->out, x, w, bias, d.rows, d.C, d.OC);
}

static stoke_status linear_fwd(void *ctx, const nn_exec_args *a)
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
    const void *x = operand(a, a->in[0], (size_t)d.rows * d.C, &off);
    const void *dy;
    if (relu && bf16_native(a->precision)) {
        dy = (char *)a->ws + off;
        cpu_relu_mask_grad(NULL, (uint16_t *)dy, a->dout, a->out, n_out);
    } else {
        dy = operand(a, a->dout, n_out, &off);
    }
    if (bf16_native(a->precision))
        return cpu_linear_backward_bf16(a->din[0], a->grad[0], dbias, dy, x, a->param_lp[0], d.rows,
                                        d.C, d.OC);
    const float *w = weight_wide(a, 0, (size_t)d.OC * d.C, &off);
    return cpu_linear_backward(a->din[0], a->grad[0], dbias, dy, x, w, d.rows, d.C, d.OC);
}

static stoke_status linear_bwd(void *ctx, const nn_exec_args *a)
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
        return too_big(n, "input", batch, elems(in));
    if (past_int(batch, elems(&n->shape)))
        return too_big(n, "output", batch, elems(&n->shape));
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

static stoke_status conv_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    cpu_conv2d_shape s = {0};
    stoke_status st = conv_shape(g, n, batch, &s);
    if (st != STOKE_OK)
        return st;
    size_t kernel = 0;
    st = cpu_conv2d_workspace(&s, bf16_native(p), &kernel);
    if (st != STOKE_OK)
        return st;
    size_t in_n = (size_t)batch * (size_t)elems(&g->nodes[n->in[0]].shape);
    size_t out_n = (size_t)batch * (size_t)elems(&n->shape);
    size_t w_n = (size_t)s.OC * s.C * s.KH * s.KW;
    *bytes =
        align_up(kernel) + operand_bytes(p, in_n) + operand_bytes(p, out_n) + wide_bytes(p, w_n);
    return STOKE_OK;
}

/* The kernel's share of the workspace: what follows the operands (the executor sizes
 * the workspace for the batch it runs, so conv_ws's total is there). */
static void *conv_kernel_ws(const nn_exec_args *a, size_t off, size_t *size)
{
    *size = a->ws_size - off;
    return (char *)a->ws + off;
}

static stoke_status conv_fwd(void *ctx, const nn_exec_args *a)
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
    const void *x = operand(a, a->in[0], in_n, &off);
    if (bf16_native(a->precision)) {
        void *kws = conv_kernel_ws(a, off, &ksize);
        return cpu_conv2d_forward_bf16(a->out, x, a->param_lp[0], bias, &s, kws, ksize);
    }
    const float *w = weight_wide(a, 0, (size_t)s.OC * s.C * s.KH * s.KW, &off);
    void *kws = conv_kernel_ws(a, off, &ksize);
    return cpu_conv2d_forward(a->out, x, w, bias, &s, kws, ksize);
}

static stoke_status conv_bwd(void *ctx, const nn_exec_args *a)
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
    const void *x = operand(a, a->in[0], in_n, &off);
    const void *dy = operand(a, a->dout, out_n, &off);
    if (bf16_native(a->precision)) {
        void *kws = conv_kernel_ws(a, off, &ksize);
        return cpu_conv2d_backward_bf16(a->din[0], a->grad[0], dbias, dy, x, a->param_lp[0], &s,
                                        kws, ksize);
    }
    const float *w = weight_wide(a, 0, (size_t)s.OC * s.C * s.KH * s.KW, &off);
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
        st = linear_ws(ctx, g, lin, batch, p, bytes);
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

static stoke_status cpu_fuse(void *ctx, const stoke_graph *g, const int *chain, int n,
                             int64_t batch, stoke_precision p, const nn_fused_impl **out)
{
    CPU_CTX_SCOPE(ctx);
    *out = NULL;
    if (p != STOKE_PREC_FP32 && !bf16_native(p))
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

static stoke_status maxpool_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    cpu_maxpool2d_forward(a->out, a->in[0], &s);
    return STOKE_OK;
}

static stoke_status maxpool_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    if (a->din[0])
        cpu_maxpool2d_backward(a->din[0], a->dout, a->in[0], &s);
    return STOKE_OK;
}

static stoke_status avgpool_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    cpu_avgpool2d_forward(a->out, a->in[0], &s);
    return STOKE_OK;
}

static stoke_status avgpool_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_pool2d_shape s = pool_shape(a);
    if (a->din[0])
        cpu_avgpool2d_backward(a->din[0], a->dout, &s);
    return STOKE_OK;
}

static stoke_status gap_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    cpu_global_avgpool_forward(a->out, a->in[0], (int)a->batch, (int)in->dims[0], (int)in->dims[1],
                               (int)in->dims[2]);
    return STOKE_OK;
}

static stoke_status gap_bwd(void *ctx, const nn_exec_args *a)
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

static size_t bn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
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

static stoke_status bn_fwd(void *ctx, const nn_exec_args *a)
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
        return layer_fail(st, a->node);
    return STOKE_OK;
}

static stoke_status bn_bwd(void *ctx, const nn_exec_args *a)
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
static stoke_status input_sized_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                                   stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    (void)p;
    *bytes = align_up((size_t)batch * (size_t)elems(&g->nodes[n->in[0]].shape) * sizeof(float));
    return STOKE_OK;
}

static size_t ln_saved(void *ctx, const stoke_graph *g, const nn_node *n)
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

static stoke_status ln_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N, C;
    ln_dims(a, &N, &C);
    cpu_layernorm_forward(a->out, a->saved, (float *)a->saved + N, a->in[0], a->param[0],
                          a->param[1], N, C, a->node->eps);
    return STOKE_OK;
}

static stoke_status ln_bwd(void *ctx, const nn_exec_args *a)
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

/* ---- element-wise ---- */

static size_t out_n(const nn_exec_args *a)
{
    return (size_t)a->batch * (size_t)elems(&a->node->shape);
}

static stoke_status relu_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_relu_forward(a->out, a->in[0], out_n(a));
    return STOKE_OK;
}
static stoke_status relu_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_relu_backward(a->din[0], a->dout, a->out, out_n(a));
    return STOKE_OK;
}
static stoke_status gelu_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_gelu_forward(a->out, a->in[0], out_n(a), 0);
    return STOKE_OK;
}
static stoke_status gelu_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_gelu_backward(a->din[0], a->dout, a->in[0], out_n(a), 0);
    return STOKE_OK;
}
static stoke_status tanh_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_tanh_forward(a->out, a->in[0], out_n(a));
    return STOKE_OK;
}
static stoke_status tanh_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_tanh_backward(a->din[0], a->dout, a->out, out_n(a));
    return STOKE_OK;
}
static stoke_status sigmoid_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_sigmoid_forward(a->out, a->in[0], out_n(a));
    return STOKE_OK;
}
static stoke_status sigmoid_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_sigmoid_backward(a->din[0], a->dout, a->out, out_n(a));
    return STOKE_OK;
}
static stoke_status dropout_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_dropout_forward(a->out, a->in[0], out_n(a), a->node->p, a->seed, a->step, a->train);
    return STOKE_OK;
}
static stoke_status dropout_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (a->din[0])
        cpu_dropout_backward(a->din[0], a->dout, out_n(a), a->node->p, a->seed, a->step, a->train);
    return STOKE_OK;
}
static stoke_status add_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    cpu_residual_forward(a->out, a->in[0], a->in[1], out_n(a));
    return STOKE_OK;
}
static stoke_status add_bwd(void *ctx, const nn_exec_args *a)
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
static stoke_status softmax_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *s = &a->node->shape;
    int C = (int)s->dims[s->ndim - 1];
    cpu_softmax_forward(a->out, a->in[0], (int)(out_n(a) / (size_t)C), C);
    return STOKE_OK;
}
static stoke_status softmax_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *s = &a->node->shape;
    int C = (int)s->dims[s->ndim - 1];
    if (a->din[0])
        cpu_softmax_backward(a->din[0], a->dout, a->out, (int)(out_n(a) / (size_t)C), C);
    return STOKE_OK;
}

/* Reshape never runs: the plan makes its output and gradient alias its input's. */
static stoke_status nop(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    (void)a;
    return STOKE_OK;
}

/* ---- embedding and attention ---- */

static stoke_status emb_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N = (int)(a->batch * elems(in_shape(a, 0)));
    stoke_status st = cpu_embedding_forward(a->out, a->in[0], a->param[0], N, (int)a->node->vocab,
                                            (int)a->node->features);
    if (st != STOKE_OK)
        return layer_fail(st, a->node);
    return STOKE_OK;
}

static stoke_status emb_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N = (int)(a->batch * elems(in_shape(a, 0)));
    return cpu_embedding_backward(a->grad[0], a->dout, a->in[0], N, (int)a->node->vocab,
                                  (int)a->node->features);
}

static size_t attn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    CPU_CTX_SCOPE(ctx);
    (void)g;
    return cpu_attention_saved_floats(1, (int)n->shape.dims[0], (int)n->shape.dims[1], n->heads) *
           sizeof(float);
}

static stoke_status attn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    (void)g;
    (void)p;
    int T = (int)n->shape.dims[0], C = (int)n->shape.dims[1];
    /* The projections' own scratch (oneDNN's, held by the kernel like linear's) is
     * counted too, so the plan's total stays an upper bound of what training uses. */
    size_t kernel = 0;
    stoke_status st = cpu_attention_prepare((int)batch, T, C, n->heads, &kernel);
    if (st != STOKE_OK)
        return st;
    /* + an input-gradient sink when the attention reads data directly */
    *bytes = align_up(kernel) + align_up(cpu_attention_workspace((int)batch, T, C, n->heads)) +
             align_up((size_t)batch * T * C * sizeof(float));
    return STOKE_OK;
}

static stoke_status attn_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const nn_node *n = a->node;
    return cpu_attention_forward(a->out, a->saved, a->in[0], a->param[0], a->param[1], a->param[2],
                                 a->param[3], (int)a->batch, (int)n->shape.dims[0],
                                 (int)n->shape.dims[1], n->heads, 0);
}

static stoke_status attn_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const nn_node *n = a->node;
    int T = (int)n->shape.dims[0], C = (int)n->shape.dims[1];
    size_t kws = align_up(cpu_attention_workspace((int)a->batch, T, C, n->heads));
    float *din = a->din[0];
    if (!din) {
        din = (float *)((char *)a->ws + kws);
        memset(din, 0, (size_t)a->batch * T * C * sizeof(float));
    }
    return cpu_attention_backward(din, a->grad[0], a->grad[1], a->grad[2], a->grad[3], a->dout,
                                  a->in[0], a->param[0], a->param[2], a->saved, (int)a->batch, T, C,
                                  n->heads, 0, a->ws, kws);
}

/* ---- glue ops, written here because they are plain copies/sums that no library
 * offers in this layout ---- */

/* (C, H, W) -> (H/P * W/P, C*P*P), patch (ph, pw) row-major, vector (c, py, px): the
 * layout of a Conv2d(kernel=stride=P) weight, so a following linear equals ViT's
 * patch embedding. */
static void patch_index(const nn_exec_args *a, int64_t *C, int64_t *H, int64_t *W, int *P)
{
    const stoke_shape *in = in_shape(a, 0);
    *C = in->dims[0];
    *H = in->dims[1];
    *W = in->dims[2];
    *P = a->node->patch;
}

static stoke_status patchify_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int64_t C, H, W;
    int P;
    patch_index(a, &C, &H, &W, &P);
    int64_t NW = W / P, per = C * H * W;
    const float *x = a->in[0];
    float *y = a->out;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    int64_t t = (h / P) * NW + w / P;
                    int64_t k = (c * P + h % P) * P + w % P;
                    y[b * per + t * (C * P * P) + k] = x[b * per + (c * H + h) * W + w];
                }
    return STOKE_OK;
}

static stoke_status patchify_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    int64_t C, H, W;
    int P;
    patch_index(a, &C, &H, &W, &P);
    int64_t NW = W / P, per = C * H * W;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    int64_t t = (h / P) * NW + w / P;
                    int64_t k = (c * P + h % P) * P + w % P;
                    a->din[0][b * per + (c * H + h) * W + w] +=
                        a->dout[b * per + t * (C * P * P) + k];
                }
    return STOKE_OK;
}

static stoke_status pos_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t per = (size_t)elems(&a->node->shape);
    for (int64_t b = 0; b < a->batch; b++)
        cpu_residual_forward(a->out + b * per, (const float *)a->in[0] + b * per, a->param[0], per);
    return STOKE_OK;
}

static stoke_status pos_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t per = (size_t)elems(&a->node->shape);
    for (int64_t b = 0; b < a->batch; b++) { /* in batch order: deterministic */
        const float *dy = a->dout + b * per;
        for (size_t i = 0; i < per; i++)
            a->grad[0][i] += dy[i];
        if (a->din[0])
            for (size_t i = 0; i < per; i++)
                a->din[0][b * per + i] += dy[i];
    }
    return STOKE_OK;
}

static stoke_status seqmean_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    int64_t T = in->dims[0], C = in->dims[1];
    for (int64_t b = 0; b < a->batch; b++) {
        const float *x = (const float *)a->in[0] + b * T * C;
        float *y = a->out + b * C;
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++)
                s += x[t * C + c];
            y[c] = (float)(s / (double)T);
        }
    }
    return STOKE_OK;
}

static stoke_status seqmean_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    const stoke_shape *in = in_shape(a, 0);
    int64_t T = in->dims[0], C = in->dims[1];
    float inv = 1.0f / (float)T;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++)
                a->din[0][(b * T + t) * C + c] += a->dout[b * C + c] * inv;
    return STOKE_OK;
}

/* ---- slice: columns [begin, begin + width) of the last dim ---- */

static stoke_status slice_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    int64_t C = in->dims[in->ndim - 1], W = a->node->features, off = a->node->begin;
    int64_t rows = a->batch * (elems(in) / C);
    const float *x = a->in[0];
    for (int64_t r = 0; r < rows; r++)
        memcpy(a->out + r * W, x + r * C + off, (size_t)W * sizeof(float));
    return STOKE_OK;
}

static stoke_status slice_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    const stoke_shape *in = in_shape(a, 0);
    int64_t C = in->dims[in->ndim - 1], W = a->node->features, off = a->node->begin;
    int64_t rows = a->batch * (elems(in) / C);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < W; j++)
            a->din[0][r * C + off + j] += a->dout[r * W + j];
    return STOKE_OK;
}

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
        return layer_fail(st, a->node);
    a->out[0] = loss;
    return STOKE_OK;
}

static stoke_status loss_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    return loss_run(a, NULL, 1.0f);
}

static stoke_status loss_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    return loss_run(a, a->din[0], a->grad_scale);
}

static stoke_status accuracy_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int64_t k = cpu_count_correct(a->in[0], a->in[1], (int)a->batch, (int)in_shape(a, 0)->dims[0]);
    a->out[0] = (float)((double)k / (double)a->batch);
    return STOKE_OK;
}

static stoke_status mae_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t n = (size_t)a->batch * (size_t)elems(in_shape(a, 0));
    a->out[0] = (float)(cpu_abs_error_sum(a->in[0], a->in[1], n) / (double)n);
    return STOKE_OK;
}

/* ---- the table ---- */

static bool cpu_supports(void *ctx, stoke_nn_op op, stoke_precision p)
{
    CPU_CTX_SCOPE(ctx);
    if (p == STOKE_PREC_FP32)
        return op >= 0 && op < STOKE_NN_OP_COUNT;
    /* bf16: oneDNN's bf16 matmul and convolution (AVX512-BF16/AMX where present, its
     * own exact emulation on AVX-512 otherwise, ours below AVX-512); fp16: emulated
     * operands; see "low precision operands" above. Everything else stays fp32. */
    return op == STOKE_NN_LINEAR || op == STOKE_NN_CONV2D;
}

static bool cpu_native(void *ctx, stoke_precision p)
{
    CPU_CTX_SCOPE(ctx);
    return p == STOKE_PREC_FP32 || bf16_native(p);
}

static void *cpu_alloc(void *ctx, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    void *p = NULL;
    /* a test hook (docs/testing.md): arenas above this many bytes are refused, so the
     * trainer's halving on an allocation failure is exercised deterministically */
    const char *above = getenv("STOKE_FAIL_ALLOC_ABOVE");
    uint64_t limit;
    if (above && stoke_parse_u64(above, &limit) && bytes > limit)
        return NULL;
    if (posix_memalign(&p, ALIGN, bytes ? align_up(bytes) : ALIGN) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *ctx, void *p)
{
    CPU_CTX_SCOPE(ctx);
    free(p);
}

/* Zeroing the activation gradients before each backward is tens of MB for the CNN; one
 * thread's memset leaves the other core spinning in OpenMP's barrier, so large spans are
 * split over the threads in 64 KB-aligned pieces (the result is the same zeros). */
#define ZERO_PAR_MIN ((size_t)1 << 20)
#define ZERO_BLK     ((size_t)1 << 16)

static void cpu_zero(void *ctx, void *p, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    if (bytes < ZERO_PAR_MIN) {
        memset(p, 0, bytes);
        return;
    }
    cpu_threads_apply();
    char *c = p;
    long nblk = (long)((bytes + ZERO_BLK - 1) / ZERO_BLK);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * ZERO_BLK;
        memset(c + o, 0, bytes - o < ZERO_BLK ? bytes - o : ZERO_BLK);
    }
}

static void cpu_read(void *ctx, void *host, const void *dev, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    memcpy(host, dev, bytes);
}

static void cpu_write(void *ctx, void *dev, const void *host, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    memcpy(dev, host, bytes);
}

static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    memcpy(dst, src, bytes);
}

/* Element-wise passes over large arrays run in fixed blocks over the compute threads:
 * on 2 cores a single-threaded pass leaves the other core spinning in OpenMP's barrier
 * (measured: a fifth of the MLP's step). Results do not depend on the thread count. */
#define PASS_BLK ((size_t)1 << 16)

static void cpu_to_lowp(void *ctx, stoke_precision p, const float *in, uint16_t *out, size_t n)
{
    CPU_CTX_SCOPE(ctx);
    if (n < 2 * PASS_BLK) {
        (p == STOKE_PREC_BF16 ? cpu_f32_to_bf16 : cpu_f32_to_f16)(in, out, n);
        return;
    }
    cpu_threads_apply();
    long nblk = (long)((n + PASS_BLK - 1) / PASS_BLK);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * PASS_BLK, m = n - o < PASS_BLK ? n - o : PASS_BLK;
        (p == STOKE_PREC_BF16 ? cpu_f32_to_bf16 : cpu_f32_to_f16)(in + o, out + o, m);
    }
}

/* Blocks' sums of squares added in block order: the same double for any thread
 * count. */
static double sumsq_one(const float *x, size_t n, bool *finite)
{
    if (n < 2 * PASS_BLK)
        return cpu_sum_squares(x, n, finite);
    long nblk = (long)((n + PASS_BLK - 1) / PASS_BLK);
    double *part = malloc((size_t)nblk * sizeof *part);
    if (!part)
        return cpu_sum_squares(x, n, finite);
    cpu_threads_apply();
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * PASS_BLK;
        part[k] = cpu_sum_squares(x + o, n - o < PASS_BLK ? n - o : PASS_BLK, NULL);
    }
    double total = 0;
    for (long k = 0; k < nblk; k++)
        total += part[k];
    free(part);
    if (finite)
        *finite = isfinite(total);
    return total;
}

static void cpu_sumsq(void *ctx, const float *const *x, const size_t *n, int count, double *out)
{
    CPU_CTX_SCOPE(ctx);
    for (int k = 0; k < count; k++)
        out[k] = sumsq_one(x[k], n[k], NULL);
}

static void cpu_scale_(void *ctx, float *x, size_t n, float s)
{
    CPU_CTX_SCOPE(ctx);
    cpu_scale(x, n, s);
}

static void cpu_sgd(void *ctx, float *w, float *g, float *mom, size_t n, float lr, int64_t t,
                    const stoke_optim *o, uint16_t *w_lp, stoke_precision lp)
{
    CPU_CTX_SCOPE(ctx);
    cpu_sgd_config c = {
        .momentum = o->momentum, .weight_decay = o->weight_decay, .nesterov = o->nesterov};
    cpu_after_update after = {.lowp = w_lp, .fp16 = lp == STOKE_PREC_FP16, .zero_grad = true};
    cpu_sgd_step_then(&c, lr, t, w, g, mom, n, &after);
}

static void cpu_adamw(void *ctx, float *w, const float *g, float *m, float *v, size_t n, float lr,
                      int64_t t, const stoke_optim *o)
{
    CPU_CTX_SCOPE(ctx);
    cpu_adamw_config c = {
        .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .weight_decay = o->weight_decay};
    cpu_adamw_step(&c, lr, t, w, g, m, v, n);
}

static stoke_status cpu_check_optim(void *ctx, const stoke_optim *o)
{
    CPU_CTX_SCOPE(ctx);
    return nn_optim_check(o);
}

stoke_status nn_optim_check(const stoke_optim *o)
{
    if (o->kind == STOKE_SGD) {
        cpu_sgd_config c = {
            .momentum = o->momentum, .weight_decay = o->weight_decay, .nesterov = o->nesterov};
        return cpu_sgd_check(&c);
    }
    cpu_adamw_config c = {
        .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .weight_decay = o->weight_decay};
    return cpu_adamw_check(&c);
}

static int cpu_threads(void *ctx) { return cpu_ctx_threads(ctx ? ctx : cpu_ctx_default()); }

/* The default context (the static table's): also OpenBLAS's and the calling thread's
 * OpenMP count, as before contexts; a model's: its own count. */
static void cpu_set_threads_(void *ctx, int n)
{
    if (!ctx) {
        cpu_set_threads(n);
        return;
    }
    if (n <= 0)
        n = omp_get_num_procs();
    atomic_store(&((cpu_ctx *)ctx)->threads, n < 1 ? 1 : n);
}

static void cpu_ctx_free_(void *ctx) { cpu_ctx_free(ctx); }

/* The table with no context: its entries run with the default one (nn/cpu/ctx.h).
 * Each entry binds its context to the calling thread while it runs, for the kernels. */
static const nn_backend cpu_backend = {
    .name = "cpu",
    .ctx = NULL,
    .ops =
        {
            [STOKE_NN_INPUT] = {nop, NULL, NULL, NULL},
            [STOKE_NN_LINEAR] = {linear_fwd, linear_bwd, linear_ws, NULL},
            [STOKE_NN_CONV2D] = {conv_fwd, conv_bwd, conv_ws, NULL},
            [STOKE_NN_MAXPOOL2D] = {maxpool_fwd, maxpool_bwd, NULL, NULL},
            [STOKE_NN_AVGPOOL2D] = {avgpool_fwd, avgpool_bwd, NULL, NULL},
            [STOKE_NN_GLOBAL_AVGPOOL] = {gap_fwd, gap_bwd, NULL, NULL},
            [STOKE_NN_BATCHNORM] = {bn_fwd, bn_bwd, input_sized_ws, bn_saved},
            [STOKE_NN_LAYERNORM] = {ln_fwd, ln_bwd, input_sized_ws, ln_saved},
            [STOKE_NN_RELU] = {relu_fwd, relu_bwd, NULL, NULL},
            [STOKE_NN_GELU] = {gelu_fwd, gelu_bwd, NULL, NULL},
            [STOKE_NN_TANH] = {tanh_fwd, tanh_bwd, NULL, NULL},
            [STOKE_NN_SIGMOID] = {sigmoid_fwd, sigmoid_bwd, NULL, NULL},
            [STOKE_NN_DROPOUT] = {dropout_fwd, dropout_bwd, NULL, NULL},
            [STOKE_NN_ADD] = {add_fwd, add_bwd, NULL, NULL},
            [STOKE_NN_RESHAPE] = {nop, nop, NULL, NULL},
            [STOKE_NN_EMBEDDING] = {emb_fwd, emb_bwd, NULL, NULL},
            [STOKE_NN_SOFTMAX] = {softmax_fwd, softmax_bwd, NULL, NULL},
            [STOKE_NN_ATTENTION] = {attn_fwd, attn_bwd, attn_ws, attn_saved},
            [STOKE_NN_PATCHIFY] = {patchify_fwd, patchify_bwd, NULL, NULL},
            [STOKE_NN_POS_EMBED] = {pos_fwd, pos_bwd, NULL, NULL},
            [STOKE_NN_SEQ_MEAN] = {seqmean_fwd, seqmean_bwd, NULL, NULL},
            [STOKE_NN_CROSS_ENTROPY] = {loss_fwd, loss_bwd, NULL, NULL},
            [STOKE_NN_BCE_LOGITS] = {loss_fwd, loss_bwd, NULL, NULL},
            [STOKE_NN_MSE] = {loss_fwd, loss_bwd, NULL, NULL},
            [STOKE_NN_L1] = {loss_fwd, loss_bwd, NULL, NULL},
            [STOKE_NN_ACCURACY] = {accuracy_fwd, NULL, NULL, NULL},
            [STOKE_NN_MAE] = {mae_fwd, NULL, NULL, NULL},
            [STOKE_NN_POLICY_GRADIENT] = {loss_fwd, loss_bwd, NULL, NULL},
            [STOKE_NN_SLICE] = {slice_fwd, slice_bwd, NULL, NULL},
        },
    .supports = cpu_supports,
    .native = cpu_native,
    .fuse = cpu_fuse,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .read = cpu_read,
    .write = cpu_write,
    .copy = cpu_copy,
    .to_lowp = cpu_to_lowp,
    .sum_squares = cpu_sumsq,
    .scale = cpu_scale_,
    .sgd = cpu_sgd,
    .adamw = cpu_adamw,
    .check_optim = cpu_check_optim,
    .threads = cpu_threads,
    .set_threads = cpu_set_threads_,
    .ctx_free = cpu_ctx_free_,
};

const nn_backend *nn_cpu_backend(void) { return &cpu_backend; }

stoke_status nn_cpu_backend_new(int threads, nn_backend **out)
{
    *out = NULL;
    nn_backend *be = malloc(sizeof *be);
    if (!be)
        return stoke_fail(STOKE_ERR_NOMEM, "cpu backend: out of memory");
    *be = cpu_backend;
    be->ctx = cpu_ctx_new(threads);
    if (!be->ctx) {
        free(be);
        return STOKE_ERR_NOMEM;
    }
    *out = be;
    return STOKE_OK;
}

void nn_backend_free(nn_backend *be)
{
    if (!be)
        return;
    if (be->ctx_free)
        be->ctx_free(be->ctx);
    free(be);
}
