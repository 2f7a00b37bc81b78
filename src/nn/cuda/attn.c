/* attn.c - the CUDA backend's multi-head self-attention (PyTorch's
 * nn.MultiheadAttention(C, heads, batch_first=True)(x, x, x), as src/nn/cpu/attn.c):
 * the projections and every head's q k^T and p v are cuBLAS GEMMs, the heads are
 * split into (part, b, h, t, d) so one strided batched GEMM covers all (b, h) pairs,
 * and the bias, split/merge and scaled softmax are kernels (k_norm.h). In bf16/fp16
 * every GEMM takes rounded operands with fp32 accumulation, as the linear layer.
 * The (B, H, T, T) probabilities are kept for backward as the CPU keeps them; a GPU
 * would want a fused (flash-attention) kernel that recomputes them instead, and a
 * block per softmax row rather than a thread. */
#include "nn/cuda/ops.h"

/* Sizes and buffers of one call. saved: heads q|k|v (3 BT C) | att (BH T T) | y
 * (BT C, the merged head outputs the output projection reads). ws: f0 (BT 3C: qkv,
 * then dqkv) | f1 (3 BT C: the heads' outputs, then their gradients) | dy (BT C) |
 * dyh (BT C) | ds (BH T T) | two low-precision operand slots. */
typedef struct attn_bufs {
    int64_t B, T, C, H, hs, BT, BH;
    float *heads, *att, *y;
    float *f0, *f1, *dy, *dyh, *ds;
    uint16_t *lp[2];
    int type; /* NC_R_32F, or the low-precision type of every GEMM */
} attn_bufs;

static int64_t lp_slot(int64_t BT, int64_t C, int64_t BH, int64_t T)
{
    int64_t a = 3 * BT * C, b = BH * T * T;
    return a > b ? a : b;
}

size_t cuda_attn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    (void)ctx;
    (void)g;
    int64_t T = n->shape.dims[0], C = n->shape.dims[1];
    return (size_t)(4 * T * C + (int64_t)n->heads * T * T) * sizeof(float);
}

stoke_status cuda_attn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes)
{
    (void)ctx;
    (void)g;
    int64_t T = n->shape.dims[0], C = n->shape.dims[1], H = n->heads;
    if (H <= 0 || C % H != 0)
        return stoke_fail(STOKE_ERR_ARG, "attention: %d heads do not divide the width %lld", (int)H,
                          (long long)C);
    int64_t BT = batch * T, BH = batch * H;
    int64_t floats = 3 * BT * C + 3 * BT * C + 2 * BT * C + BH * T * T;
    int64_t halves = p == STOKE_PREC_FP32 ? 0 : 2 * lp_slot(BT, C, BH, T);
    *bytes = (size_t)floats * sizeof(float) + (size_t)halves * sizeof(uint16_t);
    return STOKE_OK;
}

static attn_bufs bufs_of(const nn_exec_args *a)
{
    attn_bufs s;
    s.B = a->batch;
    s.T = a->node->shape.dims[0];
    s.C = a->node->shape.dims[1];
    s.H = a->node->heads;
    s.hs = s.C / s.H;
    s.BT = s.B * s.T;
    s.BH = s.B * s.H;
    s.heads = a->saved;
    s.att = s.heads + 3 * s.BT * s.C;
    s.y = s.att + s.BH * s.T * s.T;
    s.f0 = a->ws;
    s.f1 = s.f0 + 3 * s.BT * s.C;
    s.dy = s.f1 + 3 * s.BT * s.C;
    s.dyh = s.dy + s.BT * s.C;
    s.ds = s.dyh + s.BT * s.C;
    s.lp[0] = (uint16_t *)(s.ds + s.BH * s.T * s.T);
    s.lp[1] = s.lp[0] + lp_slot(s.BT, s.C, s.BH, s.T);
    s.type = a->param_lp[0] ? (a->precision == STOKE_PREC_FP16 ? NC_R_16F : NC_R_16BF) : NC_R_32F;
    return s;
}

/* x as a GEMM operand: itself in fp32, else rounded into low-precision slot k. */
static const void *operand(cuda_ctx *c, const nn_exec_args *a, const attn_bufs *s, int k,
                           const float *x, int64_t n, stoke_status *st)
{
    if (s->type == NC_R_32F || *st != STOKE_OK)
        return x;
    *st = cuda_to_lowp(c, a->precision, x, s->lp[k], n);
    return s->lp[k];
}

static const void *weight(const nn_exec_args *a, const attn_bufs *s, int i)
{
    return s->type == NC_R_32F ? (const void *)a->param[i] : (const void *)a->param_lp[i];
}

static stoke_status heads(cuda_ctx *c, const attn_bufs *s, const float *src, float *dst, int parts,
                          int merge)
{
    nk_heads_args k = {src, dst, s->B, s->T, s->C, s->H, parts};
    int64_t n = parts * s->BT * s->C;
    return merge ? CUDA_RUN(c, heads_merge, n, &k) : CUDA_RUN(c, heads_split, n, &k);
}

/* Y (rows x out) = X W^T + b, row-major, as cuda_linear_fwd */
static stoke_status project(cuda_ctx *c, const nn_exec_args *a, const attn_bufs *s, int w,
                            const float *x, int64_t in, int64_t out, float *y)
{
    stoke_status st = STOKE_OK;
    const void *xo = operand(c, a, s, 0, x, s->BT * in, &st);
    if (st == STOKE_OK)
        st = cuda_gemm(c, NC_OP_T, NC_OP_N, out, s->BT, in, weight(a, s, w), in, xo, in, 0.0f, y,
                       out, s->type);
    nk_bias_args b = {y, a->param[w + 1], out};
    return st == STOKE_OK ? CUDA_RUN(c, bias_add, s->BT * out, &b) : st;
}

/* p = softmax(scale q k^T) per (b, h) into att, then yh = p v into f1. Row-major
 * (T x T) S = Q K^T is column-major S^T = K Q^T: K, Q are column-major (hs x T). */
static stoke_status attend(cuda_ctx *c, const nn_exec_args *a, const attn_bufs *s)
{
    int64_t T = s->T, hs = s->hs, n = s->BT * s->C, tt = T * T;
    stoke_status st = STOKE_OK;
    const float *q = s->heads, *k = q + n, *v = k + n;
    const void *qo = operand(c, a, s, 0, q, 2 * n, &st), *ko = NULL;
    ko = s->type == NC_R_32F ? (const void *)k : (const void *)(s->lp[0] + n);
    if (st == STOKE_OK)
        st = cuda_gemm_batched(c, NC_OP_T, NC_OP_N, T, T, hs, ko, hs, T * hs, qo, hs, T * hs, 0.0f,
                               s->att, T, tt, s->BH, s->type);
    nk_attn_softmax_args sm = {s->att, NULL, T, 1.0f / sqrtf((float)hs)};
    if (st == STOKE_OK)
        st = CUDA_RUN(c, attn_softmax, s->BH * T, &sm);
    /* yh^T (hs x T) = V^T P^T: V column-major (hs x T), P^T is P row-major */
    const void *vo = operand(c, a, s, 0, v, n, &st);
    const void *po = operand(c, a, s, 1, s->att, s->BH * tt, &st);
    if (st == STOKE_OK)
        st = cuda_gemm_batched(c, NC_OP_N, NC_OP_N, hs, T, T, vo, hs, T * hs, po, T, tt, 0.0f,
                               s->f1, hs, T * hs, s->BH, s->type);
    return st;
}

stoke_status cuda_attn_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    attn_bufs s = bufs_of(a);
    stoke_status st = project(c, a, &s, 0, a->in[0], s.C, 3 * s.C, s.f0);
    if (st == STOKE_OK)
        st = heads(c, &s, s.f0, s.heads, 3, 0);
    if (st == STOKE_OK)
        st = attend(c, a, &s);
    if (st == STOKE_OK)
        st = heads(c, &s, s.f1, s.y, 1, 1);
    if (st == STOKE_OK)
        st = project(c, a, &s, 2, s.y, s.C, s.C, a->out);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* dX (rows x in) += dY W and dW += dY^T X, db += colsum(dY) of Y = X W^T + b, as
 * cuda_linear_bwd; dX overwritten (beta 0) when `assign`, skipped when NULL. */
static stoke_status unproject(cuda_ctx *c, const nn_exec_args *a, const attn_bufs *s, int w,
                              const float *x, const float *dy, int64_t in, int64_t out, float *dx,
                              int assign)
{
    stoke_status st = STOKE_OK;
    const void *xo = operand(c, a, s, 0, x, s->BT * in, &st);
    const void *dyo = operand(c, a, s, 1, dy, s->BT * out, &st);
    if (st == STOKE_OK && dx)
        st = cuda_gemm(c, NC_OP_N, NC_OP_N, in, s->BT, out, weight(a, s, w), in, dyo, out,
                       assign ? 0.0f : 1.0f, dx, in, s->type);
    if (st == STOKE_OK && a->grad[w])
        st = cuda_gemm(c, NC_OP_N, NC_OP_T, in, out, s->BT, xo, in, dyo, out, 1.0f, a->grad[w], in,
                       s->type);
    if (st == STOKE_OK && a->grad[w + 1]) {
        nk_bias_grad_args b = {a->grad[w + 1], dy, s->BT, out};
        st = CUDA_RUN(c, bias_grad, out, &b);
    }
    return st;
}

/* From dyh (the heads' output gradients) to dq|dk|dv in f1. */
static stoke_status unattend(cuda_ctx *c, const nn_exec_args *a, const attn_bufs *s)
{
    int64_t T = s->T, hs = s->hs, n = s->BT * s->C, tt = T * T;
    const float *q = s->heads, *k = q + n, *v = k + n;
    float *dq = s->f1, *dk = dq + n, *dv = dk + n;
    stoke_status st = STOKE_OK;
    /* dP = dYh V^T: column-major dP^T = V dYh^T; dV = P^T dYh: dV^T = dYh^T P */
    const void *vo = operand(c, a, s, 0, v, n, &st), *dyo = operand(c, a, s, 1, s->dyh, n, &st);
    if (st == STOKE_OK)
        st = cuda_gemm_batched(c, NC_OP_T, NC_OP_N, T, T, hs, vo, hs, T * hs, dyo, hs, T * hs, 0.0f,
                               s->ds, T, tt, s->BH, s->type);
    const void *po = operand(c, a, s, 0, s->att, s->BH * tt, &st);
    if (st == STOKE_OK)
        st = cuda_gemm_batched(c, NC_OP_N, NC_OP_T, hs, T, T, dyo, hs, T * hs, po, T, tt, 0.0f, dv,
                               hs, T * hs, s->BH, s->type);
    nk_attn_softmax_args sm = {s->ds, s->att, T, 1.0f / sqrtf((float)hs)};
    if (st == STOKE_OK)
        st = CUDA_RUN(c, attn_softmax_bwd, s->BH * T, &sm);
    /* dQ = dS K: dQ^T = K^T dS^T; dK = dS^T Q: dK^T = Q^T dS */
    const void *qko = operand(c, a, s, 0, q, 2 * n, &st),
               *dso = operand(c, a, s, 1, s->ds, s->BH * tt, &st);
    const void *ko = s->type == NC_R_32F ? (const void *)k : (const void *)(s->lp[0] + n);
    if (st == STOKE_OK)
        st = cuda_gemm_batched(c, NC_OP_N, NC_OP_N, hs, T, T, ko, hs, T * hs, dso, T, tt, 0.0f, dq,
                               hs, T * hs, s->BH, s->type);
    if (st == STOKE_OK)
        st = cuda_gemm_batched(c, NC_OP_N, NC_OP_T, hs, T, T, qko, hs, T * hs, dso, T, tt, 0.0f, dk,
                               hs, T * hs, s->BH, s->type);
    return st;
}

stoke_status cuda_attn_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    attn_bufs s = bufs_of(a);
    stoke_status st = unproject(c, a, &s, 2, s.y, a->dout, s.C, s.C, s.dy, 1);
    if (st == STOKE_OK)
        st = heads(c, &s, s.dy, s.dyh, 1, 0);
    if (st == STOKE_OK)
        st = unattend(c, a, &s);
    if (st == STOKE_OK)
        st = heads(c, &s, s.f1, s.f0, 3, 1);
    if (st == STOKE_OK)
        st = unproject(c, a, &s, 0, a->in[0], s.f0, s.C, 3 * s.C, a->din[0], 0);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
