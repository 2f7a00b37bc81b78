/* k_attn.h - kernel bodies (kern.h) of the CUDA backend's fused attention, the
 * FlashAttention-2 recurrences without the (B, H, T, T) scores or probabilities in
 * memory: the forward keeps one row's running max, sum and output, and saves the
 * row's logsumexp; the backward recomputes each probability from it. One index per
 * (b, h, row), looping over the other side's rows in a fixed order, so every index
 * writes only its own row and results are deterministic without atomics.
 *
 * Layouts: qkv is the input projection's output as it comes out of the GEMM, rows
 * (b, t) of 3C values q | k | v with head h at columns h hs .. h hs + hs, so no split
 * is needed; y and dy are (b, t, C) rows, head h at the same columns, so no merge is
 * needed either. Row statistics (lse, D) are (b, h, t), the index itself.
 *
 * Arithmetic in fp32 (double is slow on most GPUs, and a row's sums are short). In
 * bf16/fp16 the caller rounds q, k, v and the output gradient in place first
 * (nk_attn_round), the same roundings the GEMM path gives its operands; the products
 * then accumulate in fp32 as the tensor cores' would, while the probabilities stay
 * fp32: they live in registers here, never an operand of a low-precision GEMM. */
#ifndef STOKE_NN_CUDA_K_ATTN_H
#define STOKE_NN_CUDA_K_ATTN_H

#include "nn/cuda/kern.h"

/* A row's output and gradient accumulators are local arrays of this many floats (a
 * thread's local memory, 1 KB each, cached in L1), so the size is fixed at compile
 * time; larger heads are refused when the model is planned (attn.c). */
#define NK_ATTN_MAX_HS 256

typedef struct nk_flash_args {
    const float *qkv; /* (B, T, 3C) */
    const float *dy;  /* (B, T, C): the heads' output gradient (backward) */
    float *y;         /* (B, T, C): the heads' outputs (written forward, read backward) */
    float *lse;       /* (B, H, T): the rows' logsumexp of the scaled scores */
    float *D;         /* (B, H, T): dy . y per row (backward) */
    float *dqkv;      /* (B, T, 3C): dq | dk | dv, assigned (backward) */
    int64_t T, C, H;
    float scale; /* 1 / sqrt(hs) */
} nk_flash_args;

/* Row r = (b, h, t) of the index space: offsets of its (b, t) row in qkv (3C wide)
 * and in y (C wide), both at head h's columns, and of key 0's row of batch b in qkv. */
typedef struct nk_flash_row {
    int64_t hs, t, qkv, y, keys;
} nk_flash_row;

NK_FN nk_flash_row nk_flash_at(int64_t r, const nk_flash_args *a)
{
    nk_flash_row w;
    int64_t bh = r / a->T, h = bh % a->H, b = bh / a->H;
    w.hs = a->C / a->H;
    w.t = r % a->T;
    w.qkv = (b * a->T + w.t) * 3 * a->C + h * w.hs;
    w.y = (b * a->T + w.t) * a->C + h * w.hs;
    w.keys = b * a->T * 3 * a->C + h * w.hs;
    return w;
}

NK_FN float nk_flash_dot(const float *x, const float *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t d = 0; d < n; d++)
        s += x[d] * y[d];
    return s;
}

/* Forward, one index per query row: online softmax over the keys. The running max
 * starts at key 0's score (T >= 1), so no infinity enters the arithmetic. */
NK_FN void nk_flash_fwd(int64_t r, const nk_flash_args *a)
{
    nk_flash_row w = nk_flash_at(r, a);
    int64_t hs = w.hs, C = a->C, stride = 3 * C;
    const float *q = a->qkv + w.qkv, *k = a->qkv + w.keys + C, *v = k + C;
    float o[NK_ATTN_MAX_HS];
    float m = a->scale * nk_flash_dot(q, k, hs), l = 1.0f;
    for (int64_t d = 0; d < hs; d++)
        o[d] = v[d];
    for (int64_t j = 1; j < a->T; j++) {
        k += stride;
        v += stride;
        float s = a->scale * nk_flash_dot(q, k, hs);
        if (s > m) { /* a new max: rescale what was summed against the old one */
            float c = expf(m - s);
            l *= c;
            for (int64_t d = 0; d < hs; d++)
                o[d] *= c;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        for (int64_t d = 0; d < hs; d++)
            o[d] += p * v[d];
    }
    float inv = 1.0f / l, *y = a->y + w.y;
    for (int64_t d = 0; d < hs; d++)
        y[d] = o[d] * inv;
    a->lse[r] = m + logf(l);
}

/* D = dO . O per row: softmax's backward term sum_j p dp, without p. */
NK_FN void nk_flash_bwd_d(int64_t r, const nk_flash_args *a)
{
    nk_flash_row w = nk_flash_at(r, a);
    a->D[r] = nk_flash_dot(a->dy + w.y, a->y + w.y, w.hs);
}

/* dq_i = scale sum_j p_ij (dO_i . v_j - D_i) k_j, one index per query row i */
NK_FN void nk_flash_bwd_dq(int64_t r, const nk_flash_args *a)
{
    nk_flash_row w = nk_flash_at(r, a);
    int64_t hs = w.hs, C = a->C, stride = 3 * C;
    const float *q = a->qkv + w.qkv, *dout = a->dy + w.y;
    const float *k = a->qkv + w.keys + C, *v = k + C;
    float dq[NK_ATTN_MAX_HS];
    float lse = a->lse[r], Di = a->D[r];
    for (int64_t d = 0; d < hs; d++)
        dq[d] = 0.0f;
    for (int64_t j = 0; j < a->T; j++, k += stride, v += stride) {
        float p = expf(a->scale * nk_flash_dot(q, k, hs) - lse);
        float ds = p * (nk_flash_dot(dout, v, hs) - Di);
        for (int64_t d = 0; d < hs; d++)
            dq[d] += ds * k[d];
    }
    float *out = a->dqkv + w.qkv;
    for (int64_t d = 0; d < hs; d++)
        out[d] = a->scale * dq[d];
}

/* dv_j = sum_i p_ij dO_i and dk_j = scale sum_i p_ij (dO_i . v_j - D_i) q_i, one
 * index per key row j (r's t), reading every query row's lse and D */
NK_FN void nk_flash_bwd_dkv(int64_t r, const nk_flash_args *a)
{
    nk_flash_row w = nk_flash_at(r, a);
    int64_t hs = w.hs, C = a->C, T = a->T, stride = 3 * C;
    const float *k = a->qkv + w.qkv + C, *v = k + C;
    /* the queries from row 0 of (b, h) on */
    const float *q = a->qkv + w.keys, *dout = a->dy + (w.y - w.t * C);
    const float *lse = a->lse + (r - w.t), *D = a->D + (r - w.t);
    float dk[NK_ATTN_MAX_HS], dv[NK_ATTN_MAX_HS];
    for (int64_t d = 0; d < hs; d++)
        dk[d] = dv[d] = 0.0f;
    for (int64_t i = 0; i < T; i++, q += stride, dout += C) {
        float p = expf(a->scale * nk_flash_dot(q, k, hs) - lse[i]);
        float ds = p * (nk_flash_dot(dout, v, hs) - D[i]);
        for (int64_t d = 0; d < hs; d++) {
            dv[d] += p * dout[d];
            dk[d] += ds * q[d];
        }
    }
    float *gk = a->dqkv + w.qkv + C, *gv = gk + C;
    for (int64_t d = 0; d < hs; d++) {
        gk[d] = a->scale * dk[d];
        gv[d] = dv[d];
    }
}

typedef struct nk_attn_round_args {
    float *x;
    int fp16; /* else bf16 */
} nk_attn_round_args;

/* x through bf16/fp16 and back, in place: the fused kernels' operands rounded as the
 * GEMM path's are (cuda_to_lowp's conversions). */
NK_FN void nk_attn_round(int64_t i, const nk_attn_round_args *a)
{
    float x = a->x[i];
    a->x[i] = a->fp16 ? nk_f16_to_f32(nk_to_f16(x)) : nk_bf16_to_f32(nk_to_bf16(x));
}

#define NK_ATTN_KERNELS(X)          \
    X(flash_fwd, nk_flash_args)     \
    X(flash_bwd_d, nk_flash_args)   \
    X(flash_bwd_dq, nk_flash_args)  \
    X(flash_bwd_dkv, nk_flash_args) \
    X(attn_round, nk_attn_round_args)

#endif
