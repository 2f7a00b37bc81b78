/* eltwise.c - the CPU backend's element-wise kernels (activations, dropout, residual,
 * softmax, embedding): hand-written, because fused into one pass they beat a
 * oneDNN eltwise primitive's per-shape setup at these sizes and need no cache. */
#include "nn/cpu/eltwise.h"

#include <math.h>

#include "core/rng.h"
#include "nn/cpu/dense.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN ((size_t)1 << 15)
/* Elements per parallel work item: 16 KB of floats, many vector iterations. */
#define BLK ((size_t)4096)

/* The element-wise loops run as a static parallel loop over blocks, each block a
 * plain `omp simd` loop in its own CPU_SIMD_KERNEL (simd.h). */
#define FOR_BLOCKS(n, par_min, body)                                                           \
    do {                                                                                       \
        size_t n_ = (n), nblk_ = (n_ + BLK - 1) / BLK;                                         \
        int par_ = n_ >= (par_min) && nblk_ > 1;                                               \
        _Pragma("omp parallel for schedule(static) if (par_)") for (size_t k_ = 0; k_ < nblk_; \
                                                                    k_++)                      \
        {                                                                                      \
            size_t o = k_ * BLK, m = n_ - o < BLK ? n_ - o : BLK;                              \
            body;                                                                              \
        }                                                                                      \
    } while (0)

CPU_SIMD_KERNEL(relu_fwd_span, (float *out, const float *inp, size_t n), (out, inp, n))
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
    }
}

CPU_SIMD_KERNEL(relu_bwd_span, (float *dinp, const float *dout, const float *out, size_t n),
                (dinp, dout, out, n))
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float d = dout[i]; /* loaded unconditionally, so the select is branch-free */
        dinp[i] += out[i] > 0.0f ? d : 0.0f;
    }
}

/* bf16 bits of x, rounded to nearest even (NaN kept NaN) as cpu_f32_to_bf16. */
static inline uint16_t relu_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
}

CPU_SIMD_KERNEL(relu_mask_span,
                (float *g32, uint16_t *g16, const float *dout, const float *out, size_t n),
                (g32, g16, dout, out, n))
{
    if (g16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float d = dout[i];
            g16[i] = relu_bf16(out[i] > 0.0f ? d : 0.0f);
        }
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float d = dout[i];
            g32[i] = out[i] > 0.0f ? d : 0.0f;
        }
    }
}

void cpu_relu_mask_grad(float *g32, uint16_t *g16, const float *dout, const float *out, size_t n)
{
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN,
               relu_mask_span(g32 ? g32 + o : NULL, g16 ? g16 + o : NULL, dout + o, out + o, m));
}

void cpu_relu_forward(float *out, const float *inp, size_t n)
{
    /* inp (n,), out (n,) */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN, relu_fwd_span(out + o, inp + o, m));
}

void cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    /* dout, out (n,) -> dinp (n,) += */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN, relu_bwd_span(dinp + o, dout + o, out + o, m));
}

#define SQRT1_2        0.70710678118654752f
#define INV_SQRT_2PI   0.39894228040143268f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define GELU_K         0.044715f

/* Phi(x) = 0.5 erfc(-x / sqrt2), with the sign folded so both tails keep their
 * relative precision. */
static inline float normal_cdf(float x)
{
    float q = 0.5f * cpu_fast_erfcf_pos(fabsf(x) * SQRT1_2);
    return cpu_select(x < 0.0f, q, 1.0f - q);
}

CPU_SIMD_KERNEL(gelu_fwd_span, (float *out, const float *inp, size_t n, int approx_tanh),
                (out, inp, n, approx_tanh))
{
    if (approx_tanh) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
            out[i] = 0.5f * x * (1.0f + cpu_fast_tanhf(u));
        }
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            out[i] = x * normal_cdf(x);
        }
    }
}

CPU_SIMD_KERNEL(gelu_bwd_span,
                (float *dinp, const float *dout, const float *inp, size_t n, int approx_tanh),
                (dinp, dout, inp, n, approx_tanh))
{
    if (approx_tanh) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
            float th = cpu_fast_tanhf(u);
            float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_K * x * x);
            float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
            dinp[i] += dout[i] * g;
        }
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            /* one exp serves both: exp(-x^2/2) is the density's and erfc's */
            float z = fabsf(x) * SQRT1_2;
            float e = cpu_fast_expf(-z * z);
            float q = 0.5f * cpu_erfcf_pos_given_exp(z, e);
            float cdf = cpu_select(x < 0.0f, q, 1.0f - q);
            dinp[i] += dout[i] * (cdf + x * INV_SQRT_2PI * e);
        }
    }
}

void cpu_gelu_forward(float *out, const float *inp, size_t n, int approx_tanh)
{
    /* inp (n,), out (n,) */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN / 8, gelu_fwd_span(out + o, inp + o, m, approx_tanh));
}

void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int approx_tanh)
{
    /* dout, inp (n,) -> dinp (n,) += */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN / 8, gelu_bwd_span(dinp + o, dout + o, inp + o, m, approx_tanh));
}

CPU_SIMD_KERNEL(tanh_fwd_span, (float *out, const float *inp, size_t n), (out, inp, n))
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        out[i] = cpu_fast_tanhf(inp[i]);
    }
}

/* d(1 - y^2) for tanh (sigmoid = 0), d y (1 - y) for sigmoid (sigmoid = 1) */
CPU_SIMD_KERNEL(tanh_sigmoid_bwd_span,
                (float *dinp, const float *dout, const float *out, size_t n, int sigmoid),
                (dinp, dout, out, n, sigmoid))
{
    if (sigmoid) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            dinp[i] += dout[i] * out[i] * (1.0f - out[i]);
        }
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
        }
    }
}

CPU_SIMD_KERNEL(sigmoid_fwd_span, (float *out, const float *inp, size_t n), (out, inp, n))
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        out[i] = 1.0f / (1.0f + cpu_fast_expf(-inp[i]));
    }
}

void cpu_tanh_forward(float *out, const float *inp, size_t n)
{
    /* inp (n,), out (n,) */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN / 8, tanh_fwd_span(out + o, inp + o, m));
}

void cpu_tanh_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    /* dout, out (n,) -> dinp (n,) += */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN, tanh_sigmoid_bwd_span(dinp + o, dout + o, out + o, m, 0));
}

void cpu_sigmoid_forward(float *out, const float *inp, size_t n)
{
    /* inp (n,), out (n,) */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN / 8, sigmoid_fwd_span(out + o, inp + o, m));
}

void cpu_sigmoid_backward(float *dinp, const float *dout, const float *out, size_t n)
{
    /* dout, out (n,) -> dinp (n,) += */
    cpu_threads_apply();
    FOR_BLOCKS(n, PAR_MIN, tanh_sigmoid_bwd_span(dinp + o, dout + o, out + o, m, 1));
}

/* ---- dropout ---- */

/* Chris Wellons' lowbias32: a 32-bit integer hash with near-ideal avalanche, in
 * 32-bit lanes so the mask loop vectorizes (a 64-bit multiply would not on the
 * baseline x86-64 target). */
static inline uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Element i of a (seed, step) stream: the 64-bit keys come from SplitMix64 over seed,
 * step and the high half of i (constant over 2^32 elements), and the low half is
 * hashed with them in 32-bit lanes. */
typedef struct dropout_key {
    uint32_t k0, k1;
} dropout_key;

static dropout_key dropout_key_for(uint64_t seed, uint64_t step, uint64_t hi)
{
    uint64_t k = stoke_stream_key(seed, step, hi);
    dropout_key key = {(uint32_t)k, (uint32_t)(k >> 32)};
    return key;
}

static inline uint32_t dropout_bits(dropout_key key, uint32_t lo)
{
    return hash32(hash32(lo ^ key.k0) + key.k1);
}

/* Keep iff bits >= threshold, so P(keep) = 1 - threshold / 2^32. */
static uint32_t dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

int cpu_dropout_keep(uint64_t seed, uint64_t step, size_t i, float p)
{
    if (p <= 0.0f) {
        return 1;
    }
    if (p >= 1.0f) {
        return 0;
    }
    dropout_key key = dropout_key_for(seed, step, (uint64_t)i >> 32);
    return dropout_bits(key, (uint32_t)i) >= dropout_threshold(p);
}

/* dst[i] (+)= src[i] * mask_i * scale over [begin, end), which lies inside one 2^32
 * block. */
CPU_SIMD_KERNEL(dropout_span,
                (float *dst, const float *src, size_t begin, size_t end, dropout_key key,
                 uint32_t thr, float scale, int accumulate),
                (dst, src, begin, end, key, thr, scale, accumulate))
{
    if (accumulate) {
#pragma omp simd
        for (size_t i = begin; i < end; i++) {
            float m = dropout_bits(key, (uint32_t)i) >= thr ? scale : 0.0f;
            dst[i] += src[i] * m;
        }
    } else {
#pragma omp simd
        for (size_t i = begin; i < end; i++) {
            float m = dropout_bits(key, (uint32_t)i) >= thr ? scale : 0.0f;
            dst[i] = src[i] * m;
        }
    }
}

static void dropout_apply(float *dst, const float *src, size_t n, float p, uint64_t seed,
                          uint64_t step, int accumulate)
{
    uint32_t thr = dropout_threshold(p);
    float scale = 1.0f / (1.0f - p);
    /* Chunks of 2^16 elements: a chunk never straddles a 2^32 block, and the mask of
     * an element depends only on its index, so the split cannot change the result. */
    const size_t chunk = (size_t)1 << 16;
    size_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t c = 0; c < nchunks; c++) {
        size_t begin = c * chunk;
        size_t end = begin + chunk < n ? begin + chunk : n;
        dropout_key key = dropout_key_for(seed, step, (uint64_t)begin >> 32);
        dropout_span(dst, src, begin, end, key, thr, scale, accumulate);
    }
}

void cpu_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t seed,
                         uint64_t step, int train)
{
    /* inp (n,), out (n,) */
    cpu_threads_apply();
    if (!train || p <= 0.0f) {
        if (out != inp) {
            memcpy(out, inp, n * sizeof *out);
        }
        return;
    }
    if (p >= 1.0f) {
        memset(out, 0, n * sizeof *out);
        return;
    }
    dropout_apply(out, inp, n, p, seed, step, 0);
}

void cpu_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t seed,
                          uint64_t step, int train)
{
    /* dout (n,) -> dinp (n,) += */
    cpu_threads_apply();
    if (!train || p <= 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            dinp[i] += dout[i];
        }
        return;
    }
    if (p >= 1.0f) {
        return;
    }
    dropout_apply(dinp, dout, n, p, seed, step, 1);
}

/* ---- residual ---- */

void cpu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    /* a, b (n,) -> out (n,) */
    cpu_threads_apply();
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        out[i] = a[i] + b[i];
    }
}

void cpu_residual_backward(float *da, float *db, const float *dout, size_t n)
{
    /* dout (n,) -> da, db (n,) += */
    cpu_threads_apply();
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* ---- softmax ---- */

CPU_SIMD_KERNEL(softmax_rows, (float *out, const float *inp, int rows, int C), (out, inp, rows, C))
{
    for (int r = 0; r < rows; r++)
        cpu_softmax_row(out + (size_t)r * C, inp + (size_t)r * C, C);
}

void cpu_softmax_forward(float *out, const float *inp, int N, int C)
{
    /* inp (N, C) -> out (N, C), softmax over C; rows in blocks of ~BLK elements */
    cpu_threads_apply();
    int rows = (int)(BLK / (size_t)C) + 1;
    int nblk = (N + rows - 1) / rows;
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= PAR_MIN / 4 && nblk > 1)
    for (int k = 0; k < nblk; k++) {
        int r0 = k * rows, m = N - r0 < rows ? N - r0 : rows;
        softmax_rows(out + (size_t)r0 * C, inp + (size_t)r0 * C, m, C);
    }
}

void cpu_softmax_backward(float *dinp, const float *dout, const float *out, int N, int C)
{
    /* dout, out (N, C) -> dinp (N, C) += */
    cpu_threads_apply();
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= PAR_MIN)
    for (int r = 0; r < N; r++) {
        const float *dy = dout + (size_t)r * C;
        const float *y = out + (size_t)r * C;
        float *dx = dinp + (size_t)r * C;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) {
            dot += dy[c] * y[c];
        }
#pragma omp simd
        for (int c = 0; c < C; c++) {
            dx[c] += y[c] * (dy[c] - dot);
        }
    }
}

/* ---- embedding ---- */

static stoke_status embedding_check(const char *what, const int32_t *idx, int N, int V)
{
    for (int n = 0; n < N; n++) {
        if (idx[n] < 0 || idx[n] >= V) {
            return stoke_fail(STOKE_ERR_ARG,
                              "embedding %s: index %d at position %d is outside the "
                              "table's %d rows",
                              what, (int)idx[n], n, V);
        }
    }
    return STOKE_OK;
}

stoke_status cpu_embedding_forward(float *out, const int32_t *idx, const float *table, int N, int V,
                                   int C)
{
    /* idx (N,), table (V, C) -> out (N, C) */
    cpu_threads_apply();
    stoke_status st = embedding_check("forward", idx, N, V);
    if (st != STOKE_OK) {
        return st;
    }
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        memcpy(out + (size_t)n * C, table + (size_t)idx[n] * C, (size_t)C * sizeof *out);
    }
    return STOKE_OK;
}

stoke_status cpu_embedding_backward(float *dtable, const float *dout, const int32_t *idx, int N,
                                    int V, int C)
{
    /* dout (N, C), idx (N,) -> dtable (V, C) += */
    cpu_threads_apply();
    stoke_status st = embedding_check("backward", idx, N, V);
    if (st != STOKE_OK) {
        return st;
    }
    /* Columns in blocks of 16 (a cache line): each block belongs to one thread, so
     * two rows hitting the same table row never race, and each column's sum runs
     * over n in order whatever the thread count. */
    const int blk = 16;
    int nblk = (C + blk - 1) / blk;
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= PAR_MIN)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * blk;
        int c1 = c0 + blk < C ? c0 + blk : C;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)idx[n] * C;
            const float *src = dout + (size_t)n * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dst[c] += src[c];
            }
        }
    }
    return STOKE_OK;
}
