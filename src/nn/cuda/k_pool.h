/* k_pool.h - kernel bodies (kern.h) of the CUDA backend's pooling ops and the
 * convolution's bias, as src/nn/cpu/conv.c computes them over NCHW planes. Backward
 * passes gather: one index per input element visits, in the CPU's (oh, ow) order, the
 * windows that contain it, so the sums round as the CPU's scatter does and need no
 * atomics. A GPU would rather tile a plane per block in shared memory. */
#ifndef STOKE_NN_CUDA_K_POOL_H
#define STOKE_NN_CUDA_K_POOL_H

#include "nn/cuda/kern.h"

typedef struct nk_pool_args {
    float *out;        /* forward: y (planes x OH x OW); backward: dx (accumulated) */
    const float *in;   /* x (planes x H x W): forward's input, max-pool backward's too */
    const float *dout; /* backward: dy */
    int64_t H, W, OH, OW;
    int64_t k, stride, pad;
} nk_pool_args;

/* The window's rows or columns clipped to the plane: [*lo, *hi). */
NK_FN void nk_window(int64_t o, int64_t size, const nk_pool_args *a, int64_t *lo, int64_t *hi)
{
    int64_t start = o * a->stride - a->pad;
    *lo = start < 0 ? 0 : start;
    *hi = start + a->k < size ? start + a->k : size;
}

/* The outputs whose windows cover input position x along one axis: [*lo, *hi). */
NK_FN void nk_covering(int64_t x, int64_t osize, const nk_pool_args *a, int64_t *lo, int64_t *hi)
{
    /* o covers x when o*stride - pad <= x < o*stride - pad + k */
    int64_t top = x + a->pad, first = top - a->k + 1;
    *lo = first <= 0 ? 0 : (first + a->stride - 1) / a->stride;
    int64_t last = top / a->stride + 1;
    *hi = last < osize ? last : osize;
}

/* window_argmax: the first maximum in row-major window order (a strict > scan from the
 * window's first element, so a NaN there wins and elsewhere never does); padding never
 * wins. The offset in the plane. */
NK_FN int64_t nk_argmax(const float *x, int64_t oh, int64_t ow, const nk_pool_args *a)
{
    int64_t h0, h1, w0, w1;
    nk_window(oh, a->H, a, &h0, &h1);
    nk_window(ow, a->W, a, &w0, &w1);
    int64_t best = h0 * a->W + w0;
    float bv = x[best];
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++)
            if (x[h * a->W + w] > bv) {
                bv = x[h * a->W + w];
                best = h * a->W + w;
            }
    return best;
}

/* one index per output element */
NK_FN void nk_maxpool_fwd(int64_t i, const nk_pool_args *a)
{
    int64_t osz = a->OH * a->OW, p = i / osz, o = i % osz;
    const float *x = a->in + p * a->H * a->W;
    a->out[i] = x[nk_argmax(x, o / a->OW, o % a->OW, a)];
}

/* one index per input element: the dy of every window whose argmax it is */
NK_FN void nk_maxpool_bwd(int64_t i, const nk_pool_args *a)
{
    int64_t isz = a->H * a->W, p = i / isz, at = i % isz, h = at / a->W, w = at % a->W;
    const float *x = a->in + p * isz, *dy = a->dout + p * a->OH * a->OW;
    int64_t oh0, oh1, ow0, ow1;
    nk_covering(h, a->OH, a, &oh0, &oh1);
    nk_covering(w, a->OW, a, &ow0, &ow1);
    float d = a->out[i];
    for (int64_t oh = oh0; oh < oh1; oh++)
        for (int64_t ow = ow0; ow < ow1; ow++)
            if (nk_argmax(x, oh, ow, a) == at)
                d += dy[oh * a->OW + ow];
    a->out[i] = d;
}

/* count_include_pad: every window divides by k*k (cpu_avgpool2d_forward) */
NK_FN void nk_avgpool_fwd(int64_t i, const nk_pool_args *a)
{
    int64_t osz = a->OH * a->OW, p = i / osz, o = i % osz;
    const float *x = a->in + p * a->H * a->W;
    int64_t h0, h1, w0, w1;
    nk_window(o / a->OW, a->H, a, &h0, &h1);
    nk_window(o % a->OW, a->W, a, &w0, &w1);
    float sum = 0.0f, inv = 1.0f / (float)(a->k * a->k);
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++)
            sum += x[h * a->W + w];
    a->out[i] = sum * inv;
}

NK_FN void nk_avgpool_bwd(int64_t i, const nk_pool_args *a)
{
    int64_t isz = a->H * a->W, p = i / isz, at = i % isz;
    const float *dy = a->dout + p * a->OH * a->OW;
    int64_t oh0, oh1, ow0, ow1;
    nk_covering(at / a->W, a->OH, a, &oh0, &oh1);
    nk_covering(at % a->W, a->OW, a, &ow0, &ow1);
    float d = a->out[i], inv = 1.0f / (float)(a->k * a->k);
    for (int64_t oh = oh0; oh < oh1; oh++)
        for (int64_t ow = ow0; ow < ow1; ow++)
            d += dy[oh * a->OW + ow] * inv;
    a->out[i] = d;
}

/* Global average pooling: H x W planes, one index per plane forward (summed in order,
 * as cpu_global_avgpool_forward), one per input element backward. */
NK_FN void nk_gap_fwd(int64_t p, const nk_pool_args *a)
{
    int64_t hw = a->H * a->W;
    const float *x = a->in + p * hw;
    float sum = 0.0f, inv = 1.0f / (float)hw;
    for (int64_t i = 0; i < hw; i++)
        sum += x[i];
    a->out[p] = sum * inv;
}

NK_FN void nk_gap_bwd(int64_t i, const nk_pool_args *a)
{
    int64_t hw = a->H * a->W;
    a->out[i] += a->dout[i / hw] * (1.0f / (float)hw);
}

/* The convolution's bias over (batch, channels, plane) outputs. */
typedef struct nk_conv_bias_args {
    float *y;        /* forward: y; backward: db (accumulated) */
    const float *b;  /* forward: the bias */
    const float *dy; /* backward */
    int64_t batch, channels, plane;
} nk_conv_bias_args;

/* one index per output element */
NK_FN void nk_conv_bias_add(int64_t i, const nk_conv_bias_args *a)
{
    a->y[i] += a->b[(i / a->plane) % a->channels];
}

/* one index per channel: db[c] += the sum of dy over batch and plane, in double so
 * the order matters less than the CPU's blocked fp32 sum would */
NK_FN void nk_conv_bias_grad(int64_t c, const nk_conv_bias_args *a)
{
    double s = 0;
    for (int64_t b = 0; b < a->batch; b++) {
        const float *dy = a->dy + (b * a->channels + c) * a->plane;
        for (int64_t j = 0; j < a->plane; j++)
            s += dy[j];
    }
    a->y[c] += (float)s;
}

/* fp16 bits -> fp32, exactly (subnormals, infinities and NaN payloads kept) */
NK_FN float nk_f16_bits_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m x 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31)
        return nk_u2f(sign | 0x7f800000u | (m << 13));
    return nk_u2f(sign | ((e + 112) << 23) | (m << 13));
}

/* bf16 / fp16 bits -> fp32, written or added (weights; backward results) */

typedef struct nk_widen_args {
    float *out;
    const uint16_t *in;
    int fp16, accumulate;
} nk_widen_args;

NK_FN void nk_widen(int64_t i, const nk_widen_args *a)
{
    float v = a->fp16 ? nk_f16_bits_to_f32(a->in[i]) : nk_bf16_to_f32(a->in[i]);
    a->out[i] = a->accumulate ? a->out[i] + v : v;
}

/* fp32 -> the nearest bf16 / fp16 value, kept in fp32 (the forward convolution's
 * operands: products of such values are exact in fp32 and TF32) */
typedef struct nk_round_args {
    float *out;
    const float *in;
    int fp16;
} nk_round_args;

NK_FN void nk_round_lowp(int64_t i, const nk_round_args *a)
{
    float x = a->in[i];
    a->out[i] = a->fp16 ? nk_f16_bits_to_f32(nk_to_f16(x)) : nk_bf16_to_f32(nk_to_bf16(x));
}

#define NK_POOL_KERNELS(X)               \
    X(maxpool_fwd, nk_pool_args)         \
    X(maxpool_bwd, nk_pool_args)         \
    X(avgpool_fwd, nk_pool_args)         \
    X(avgpool_bwd, nk_pool_args)         \
    X(gap_fwd, nk_pool_args)             \
    X(gap_bwd, nk_pool_args)             \
    X(conv_bias_add, nk_conv_bias_args)  \
    X(conv_bias_grad, nk_conv_bias_args) \
    X(widen, nk_widen_args)              \
    X(round_lowp, nk_round_args)

#endif
