/* eltwise.h - the CPU backend's element-wise kernels: activations, dropout, residual
 * add, softmax, embedding, and the vectorizable exp/erf/tanh they share. */
#ifndef STOKE_NN_CPU_ELTWISE_H
#define STOKE_NN_CPU_ELTWISE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nn/cpu/simd.h"
#include "stoke/core.h"

/* Conventions (llm.c style): plain functions over fp32 buffers, `n` is an element
 * count. Forward writes its output; backward ACCUMULATES (+=) into every gradient.
 * In-place forward (out == inp) is allowed where the backward does not need inp.
 * Each backward's comment names the forward buffer it reads, so the executor keeps
 * that one alive until the backward has run. Results do not depend on the thread
 * count (no cross-thread reductions); they may differ in the last bits between
 * machines with different vector units or under different STOKE_MAX_CPU_ISA caps
 * (see simd.h: lane counts change the order of sums, and the AVX-512 variant fuses
 * multiply-adds). Nothing here allocates, prints or fails, except embedding, which
 * validates its indices. */

/* A kernel's inner loops go in a CPU_SIMD_KERNEL (simd.h): compiled for AVX-512F,
 * AVX2 and the baseline, the one run chosen by the CPU and the STOKE_MAX_CPU_ISA cap. */

/* ---- vectorizable math ----
 * libm's expf/erff/tanhf are scalar calls that stop the loops around them from
 * vectorizing (GCC only maps them to libmvec under -ffast-math), so the kernels use
 * these inline versions. Max errors, measured against double-precision libm over
 * the ranges the tests sweep (tests/test_nn_norm_eltwise.c checks them):
 *   cpu_fast_expf      relative 1.5e-7 on [-87.3, 88.3]; below it returns 0, above
 *                      it 2.17e38 (e^88.3: never inf).
 *   cpu_fast_erfcf_pos absolute 2.5e-7 for x >= 0 (Abramowitz & Stegun 7.1.26, whose
 *                      own bound is 1.5e-7, above 0.6; a series below).
 *   cpu_fast_tanhf     absolute 1.5e-7.
 * NaN inputs give NaN or garbage, never a trap.
 *
 * They are branch-free: every select is a bitwise blend (cpu_select). Under GCC's
 * default -ftrapping-math a `c ? a : b` lets it sink the arithmetic of an arm into
 * a branch, which it then may not if-convert ("control flow in loop"), and the
 * loop stays scalar. */

static inline float cpu_select(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)(c != 0), ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    uint32_t r = (ua & m) | (ub & ~m);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}

static inline float cpu_fast_expf(float x)
{
    /* Cephes expf: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n
     * built in the exponent bits. n comes from the 1.5 * 2^23 rounding trick: its
     * integer lands in the low mantissa bits, so no float-to-int conversion (which
     * would be undefined out of range) is needed. */
    float fm = x * 1.44269504088896341f + 12582912.0f;
    float fn = fm - 12582912.0f;
    uint32_t mb;
    memcpy(&mb, &fm, sizeof mb);
    uint32_t n = mb - 0x4b400000u; /* round(x / ln2), mod 2^32 */
    float r = x - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (n + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale; /* garbage outside the range; replaced below */
    y = cpu_select(x > 88.3f, 2.17e38f, y);
    return cpu_select(x < -87.3f, 0.0f, y);
}

/* erfc(x) for x >= 0 (callers fold the sign), computed directly so 1 + erf(-x)
 * keeps its relative precision in the tail instead of cancelling. Below 0.6 the
 * A&S polynomial loses ~5e-7 to fp32 rounding (its terms cancel), so there
 * 1 - erf(x) comes from erf's Maclaurin series (truncation < 1e-8); both are
 * computed and one is selected. The GELU backward already has exp(-x*x) for the
 * density, so it passes it in. */
static inline float cpu_erfcf_pos_given_exp(float x, float e)
{ /* e = exp(-x*x) */
    float t = 1.0f / (1.0f + 0.3275911f * x);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    float tail = p * t * e;
    float x2 = x * x;
    float s = -1.0f / 75600.0f; /* x^(2k+1) (-1)^k / (k! (2k+1)), k = 0..7 */
    s = s * x2 + 1.0f / 9360.0f;
    s = s * x2 - 1.0f / 1320.0f;
    s = s * x2 + 1.0f / 216.0f;
    s = s * x2 - 1.0f / 42.0f;
    s = s * x2 + 1.0f / 10.0f;
    s = s * x2 - 1.0f / 3.0f;
    s = s * x2 + 1.0f;
    float head = 1.0f - 1.12837916709551257f * x * s;
    return cpu_select(x < 0.6f, head, tail);
}

static inline float cpu_fast_erfcf_pos(float x)
{
    return cpu_erfcf_pos_given_exp(x, cpu_fast_expf(-x * x));
}

static inline float cpu_fast_tanhf(float x)
{
    float e = cpu_fast_expf(-2.0f * fabsf(x));
    return copysignf((1.0f - e) / (1.0f + e), x);
}

/* max of x[0..n) (n >= 1). A `reduction(max)` over floats does not vectorize in
 * clang without -ffast-math (NaN ordering), so 16 independent lanes are kept
 * instead; `a > b ? a : b` per lane is exactly what maxps computes. */
static inline float cpu_row_max(const float *x, int n)
{
    float lane[16];
    for (int l = 0; l < 16; l++) {
        lane[l] = x[0];
    }
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; l++) {
            lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
        }
    }
    float mx = x[0];
    for (int l = 0; l < 16; l++) {
        mx = lane[l] > mx ? lane[l] : mx;
    }
    for (; i < n; i++) {
        mx = x[i] > mx ? x[i] : mx;
    }
    return mx;
}

/* y = softmax(x) over n entries (y may be x): exp(x - max) normalized by its sum. Inline,
 * so each CPU_SIMD_KERNEL caller gets it in its own vector width. */
static inline void cpu_softmax_row(float *y, const float *x, int n)
{
    float mx = cpu_row_max(x, n);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < n; c++) {
        float e = cpu_fast_expf(x[c] - mx);
        y[c] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int c = 0; c < n; c++)
        y[c] *= inv;
}

/* ---- activations ---- inp, out, dinp, dout are (n,) */

/* out = max(inp, 0). */
void cpu_relu_forward(float *out, const float *inp, size_t n);
/* dinp += dout * (out > 0). Reads the forward OUTPUT `out` (so the forward may run
 * in place). */
void cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n);
/* ReLU's gradient written, not accumulated, for a fused linear -> ReLU: dout where
 * out > 0, else 0, into g32 (fp32) or, when g32 is NULL, g16 (bf16 bits, rounded to
 * nearest even) for the bf16 matmul that reads it. */
void cpu_relu_mask_grad(float *g32, uint16_t *g16, const float *dout, const float *out, size_t n);

/* GELU. approx_tanh = 0: PyTorch's default exact form x * Phi(x) = 0.5 x erfc(-x/sqrt2);
 * approx_tanh = 1: PyTorch's approximate="tanh",
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void cpu_gelu_forward(float *out, const float *inp, size_t n, int approx_tanh);
/* dinp += dout * gelu'(inp). Reads the forward INPUT `inp`. */
void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int approx_tanh);

/* out = tanh(inp). */
void cpu_tanh_forward(float *out, const float *inp, size_t n);
/* dinp += dout * (1 - out^2). Reads the forward OUTPUT `out`. */
void cpu_tanh_backward(float *dinp, const float *dout, const float *out, size_t n);

/* out = 1 / (1 + exp(-inp)). */
void cpu_sigmoid_forward(float *out, const float *inp, size_t n);
/* dinp += dout * out * (1 - out). Reads the forward OUTPUT `out`. */
void cpu_sigmoid_backward(float *dinp, const float *dout, const float *out, size_t n);

/* ---- dropout ----
 * The mask is a pure function of (seed, step, element index): element i is kept iff
 * cpu_dropout_keep(seed, step, i, p). Nothing is stored between forward and
 * backward; the backward recomputes the mask from the same (seed, step). The mask
 * does not depend on the thread count or on how the tensor is split. Callers give
 * each dropout layer its own seed (e.g. run seed mixed with the layer index) and
 * pass the optimizer step (or a micro-step counter under gradient accumulation), so
 * masks differ between layers and steps. The keep probability is 1 - p up to
 * 2^-32. */
int cpu_dropout_keep(uint64_t seed, uint64_t step, size_t i, float p);

/* Train mode: out = inp * mask / (1 - p); p >= 1 gives zeros (as PyTorch).
 * Eval mode (train = 0) or p <= 0: out = inp (a copy unless out == inp).
 * In place (out == inp) is allowed. */
void cpu_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t seed,
                         uint64_t step, int train);
/* dinp += dout * mask / (1 - p) with the forward's (seed, step, p, train). Needs no
 * forward buffer. */
void cpu_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t seed,
                          uint64_t step, int train);

/* ---- residual add ---- */

/* out = a + b; out may alias a or b. */
void cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
/* da += dout; db += dout. Needs no forward buffer. da and db must not alias. */
void cpu_residual_backward(float *da, float *db, const float *dout, size_t n);

/* ---- softmax over the last dim ---- inp, out (N, C) */

/* Numerically stable (max subtracted per row). */
void cpu_softmax_forward(float *out, const float *inp, int N, int C);
/* dinp += out * (dout - sum_c(dout * out)) per row. Reads the forward OUTPUT `out`. */
void cpu_softmax_backward(float *dinp, const float *dout, const float *out, int N, int C);

/* ---- embedding ---- idx (N,) int32 with N = B*T, table (V, C), out (N, C) */

/* out[n] = table[idx[n]]. Every index is checked before anything is written: an
 * index outside [0, V) returns STOKE_ERR_ARG with a message naming its position
 * and value, and `out` is untouched. */
stoke_status cpu_embedding_forward(float *out, const int32_t *idx, const float *table, int N, int V,
                                   int C);
/* dtable[idx[n]] += dout[n]. Reads `idx` (not the forward output). Deterministic and
 * race-free whatever the thread count: threads split the C columns, and each
 * column sums its rows in index order. Same index check and error as forward;
 * dtable is untouched on error. */
stoke_status cpu_embedding_backward(float *dtable, const float *dout, const int32_t *idx, int N,
                                    int V, int C);

#endif
