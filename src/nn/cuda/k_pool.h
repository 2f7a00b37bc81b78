/* k_pool.h - kernel bodies (kern.h) of what the convolution and the pooling ops run
 * beside cuDNN (which pools and convolves, conv.c, pool.c): the convolution's bias,
 * the fused chain's ReLU mask, the low-precision operands' conversions. */
#ifndef STOKE_NN_CUDA_K_POOL_H
#define STOKE_NN_CUDA_K_POOL_H

#include "nn/cuda/kern.h"

/* The convolution's bias over (batch, channels, plane) outputs, one index per output
 * element (its gradient is a tree of sums, reduce.c). */
typedef struct nk_conv_bias_args {
    float *y;
    const float *b;
    int64_t channels, plane;
} nk_conv_bias_args;

NK_FN void nk_conv_bias_add(int64_t i, const nk_conv_bias_args *a)
{
    a->y[i] += a->b[(i / a->plane) % a->channels];
}

/* The fused conv -> relu -> max-pool chain's backward (conv_block.c): the pooling's
 * input gradient dz, in place, kept where the saved ReLU output y is positive. */
typedef struct nk_relu_mask_args {
    float *dz;
    const float *y;
} nk_relu_mask_args;

NK_FN void nk_relu_mask(int64_t i, const nk_relu_mask_args *a)
{
    if (!(a->y[i] > 0))
        a->dz[i] = 0.0f;
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

#define NK_POOL_KERNELS(X)              \
    X(relu_mask, nk_relu_mask_args)     \
    X(conv_bias_add, nk_conv_bias_args) \
    X(widen, nk_widen_args)             \
    X(round_lowp, nk_round_args)

#endif
