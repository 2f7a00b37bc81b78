/* attn.c - the CUDA backend's multi-head self-attention (PyTorch's
 * nn.MultiheadAttention(C, heads, batch_first=True)(x, x, x), as src/nn/cpu/attn.c),
 * two ways, chosen per layer by cuda_attn_fused (ctx.h) from the sequence length:
 *
 * - GEMM path, for short sequences, where the probabilities are small and the
 *   products run on tensor cores (the fused kernels are scalar fp32 loops): the
 *   projections and every head's q k^T and p v are cuBLAS GEMMs, the heads split
 *   into (part, b, h, t, d) so one strided batched GEMM covers all (b, h) pairs, the
 *   bias, split/merge and scaled softmax are kernels (k_norm.h). The (B, H, T, T) probabilities are kept for
 *   backward as the CPU keeps them, and the workspace holds as many again.
 * - Fused path, for long sequences, where those T^2 terms would dominate the layer's
 *   memory and bound the batch a GPU fits: FlashAttention-2's forward and backward
 *   (k_attn.h) between the same projection GEMMs, keeping per row only its
 *   logsumexp, so saved state and workspace are linear in T.
 *
 * In bf16/fp16 every GEMM takes rounded operands with fp32 accumulation, as the
 * linear layer; the fused kernels get q, k, v and the output gradient rounded the
 * same way (k_attn.h says why the probabilities stay fp32). */
#include <string.h>

#include "nn/cuda/ops.h"

/* Sizes and buffers of one call, by path.
 * GEMM:  saved: heads q|k|v (3 BT C) | att (BH T T) | y (BT C, the merged head outputs
 *        the output projection reads). ws: f0 (BT 3C: qkv, then dqkv) | f1 (3 BT C: the
 *        heads' outputs, then their gradients) | dy (BT C) | dyh (BT C) | ds (BH T T) |
 *        two low-precision operand slots of lp_slot halves each.
 * fused: saved: qkv (BT 3C, as projected: k_attn.h reads the heads in place) | lse
 *        (BH T) | y (BT C). ws: f0 (BT 3C: dqkv) | dy (BT C) | D (BH T) | low-precision
 *        slots of BT C halves (the projections' inputs) and 3 BT C (their output
 *        gradients, at most 3C wide). */
typedef struct attn_bufs {
    int64_t B, T, C, H, hs, BT, BH;
    bool fused;
    float *heads, *att, *y; /* fused: heads is the packed qkv, att the lse */
    float *f0, *f1, *dy, *dyh, *ds;
    float *D;
    uint16_t *lp[2];
    int type; /* NC_R_32F, or the low-precision type of every GEMM */
} attn_bufs;

static int64_t lp_slot(int64_t BT, int64_t C, int64_t BH, int64_t T)
{
    int64_t a = 3 * BT * C, b = BH * T * T;
    return a > b ? a : b;
}

/* Floats of saved state per sample and of workspace at `batch`, and the halves of the
 * low-precision slots: the layouts above, so the plan's sizes are the ones used. */
static void attn_sizes(bool fused, int64_t batch, int64_t T, int64_t C, int64_t H, int64_t *saved,
                       int64_t *ws, int64_t *halves)
{
    int64_t BT = batch * T, BH = batch * H;
    if (fused) {
        *saved = 4 * T * C + H * T;
        *ws = 3 * BT * C + BT * C + BH * T;
        *halves = BT * C + 3 * BT * C;
    } else {
        *saved = 4 * T * C + H * T * T;
        *ws = 3 * BT * C + 3 * BT * C + 2 * BT * C + BH * T * T;
        *halves = 2 * lp_slot(BT, C, BH, T);
    }
}

static bool fused_for(const cuda_ctx *c, const nn_node *n)
{
    int64_t T = n->shape.dims[0], C = n->shape.dims[1];
    return cuda_attn_fused(c, T, n->heads > 0 ? C / n->heads : C);
}

size_t cuda_attn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    (void)g;
    int64_t saved, ws, halves;
    attn_sizes(fused_for(ctx, n), 1, n->shape.dims[0], n->shape.dims[1], n->heads, &saved, &ws,
               &halves);
    return (size_t)saved * sizeof(float);
}

stoke_status cuda_attn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes)
{
    (void)g;
    int64_t T = n->shape.dims[0], C = n->shape.dims[1], H = n->heads;
    if (H <= 0 || C % H != 0)
        return stoke_fail(STOKE_ERR_ARG, "attention: %d heads do not divide the width %lld", (int)H,
                          (long long)C);
    bool fused = fused_for(ctx, n);
    if (fused && C / H > NK_ATTN_MAX_HS)
        return stoke_fail(STOKE_ERR_ARG,
                          "attention: heads of %lld values (width %lld over %d heads) are more "
                          "than the fused attention kernels hold (%d): use more heads",
                          (long long)(C / H), (long long)C, (int)H, NK_ATTN_MAX_HS);
    int64_t saved, floats, halves;
    attn_sizes(fused, batch, T, C, H, &saved, &floats, &halves);
    if (p == STOKE_PREC_FP32)
        halves = 0;
    *bytes = (size_t)floats * sizeof(float) + (size_t)halves * sizeof(uint16_t);
    return STOKE_OK;
}

static attn_bufs bufs_of(cuda_ctx *c, const nn_exec_args *a)
{
    attn_bufs s;
    memset(&s, 0, sizeof s);
    s.B = a->batch;
    s.T = a->node->shape.dims[0];
    s.C = a->node->shape.dims[1];
    s.H = a->node->heads;
    s.hs = s.C / s.H;
    s.BT = s.B * s.T;
    s.BH = s.B * s.H;
    s.fused = fused_for(c, a->node);
    s.type = a->param_lp[0] ? (a->precision == STOKE_PREC_FP16 ? NC_R_16F : NC_R_16BF) : NC_R_32F;
    s.heads = a->saved;
    if (s.fused) {
        s.att = s.heads + 3 * s.BT * s.C;
        s.y = s.att + s.BH * s.T;
        s.f0 = a->ws;
        s.dy = s.f0 + 3 * s.BT * s.C;
        s.D = s.dy + s.BT * s.C;
        s.lp[0] = (uint16_t *)(s.D + s.BH * s.T);
        s.lp[1] = s.lp[0] + s.BT * s.C;
        return s;
    }
    s.att = s.heads + 3 * s.BT * s.C;
    s.y = s.att + s.BH * s.T * s.T;
    s.f0 = a->ws;
    s.f1 = s.f0 + 3 * s.BT * s.C;
    s.dy = s.f1 + 3 * s.BT * s.C;
    s.dyh = s.dy + s.BT * s.C;
    s.ds = s.dyh + s.BT * s.C;
    s.lp[0] = (uint16_t *)(s.ds + s.BH * s.T * s.T);
    s.lp[1] = s.lp[0] + lp_slot(s.BT, s.C, s.BH, s.T);
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

/* x (n floats) rounded in place to the GEMM operands' precision, for the fused
 * kernels; nothing in fp32. */
static stoke_status round_lp(cuda_ctx *c, const attn_bufs *s, float *x, int64_t n)
{
    nk_attn_round_args r = {x, s->type == NC_R_16F};
    return s->type == NC_R_32F ? STOKE_OK : CUDA_RUN(c, attn_round, n, &r);
}

static nk_flash_args flash_args(const attn_bufs *s)
{
    nk_flash_args f;
    f.qkv = s->heads;
    f.dy = s->dy;
    f.y = s->y;
    f.lse = s->att;
    f.D = s->D;
    f.dqkv = s->f0;
    f.T = s->T;
    f.C = s->C;
    f.H = s->H;
    f.scale = 1.0f / sqrtf((float)s->hs);
    return f;
}

stoke_status cuda_attn_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    attn_bufs s = bufs_of(c, a);
    stoke_status st;
    if (s.fused) {
        nk_flash_args f = flash_args(&s);
        st = project(c, a, &s, 0, a->in[0], s.C, 3 * s.C, s.heads);
        if (st == STOKE_OK)
            st = round_lp(c, &s, s.heads, 3 * s.BT * s.C);
        if (st == STOKE_OK)
            st = CUDA_RUN(c, flash_fwd, s.BH * s.T, &f);
    } else {
        st = project(c, a, &s, 0, a->in[0], s.C, 3 * s.C, s.f0);
        if (st == STOKE_OK)
            st = heads(c, &s, s.f0, s.heads, 3, 0);
        if (st == STOKE_OK)
            st = attend(c, a, &s);
        if (st == STOKE_OK)
            st = heads(c, &s, s.f1, s.y, 1, 1);
    }
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
    if (st == STOKE_OK && a->grad[w + 1])
        st = cuda_bias_grad(c, a->grad[w + 1], dy, s->BT, out);
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

/* From dy (the heads' output gradients, merged) to dq|dk|dv packed in f0: D per row
 * first, which the dK/dV pass reads for every query row. */
static stoke_status unattend_fused(cuda_ctx *c, const attn_bufs *s)
{
    nk_flash_args f = flash_args(s);
    int64_t rows = s->BH * s->T;
    stoke_status st = round_lp(c, s, s->dy, s->BT * s->C);
    if (st == STOKE_OK)
        st = CUDA_RUN(c, flash_bwd_d, rows, &f);
    if (st == STOKE_OK)
        st = CUDA_RUN(c, flash_bwd_dq, rows, &f);
    if (st == STOKE_OK)
        st = CUDA_RUN(c, flash_bwd_dkv, rows, &f);
    return st;
}

stoke_status cuda_attn_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    attn_bufs s = bufs_of(c, a);
    stoke_status st = unproject(c, a, &s, 2, s.y, a->dout, s.C, s.C, s.dy, 1);
    if (st == STOKE_OK && s.fused) {
        st = unattend_fused(c, &s);
    } else if (st == STOKE_OK) {
        st = heads(c, &s, s.dy, s.dyh, 1, 0);
        if (st == STOKE_OK)
            st = unattend(c, a, &s);
        if (st == STOKE_OK)
            st = heads(c, &s, s.f1, s.f0, 3, 1);
    }
    if (st == STOKE_OK)
        st = unproject(c, a, &s, 0, a->in[0], s.f0, s.C, 3 * s.C, a->din[0], 0);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
