/* k_eltwise.h - kernel bodies (kern.h) of the CUDA backend's element-wise ops, as the
 * CPU backend's src/nn/cpu/eltwise.h defines them: forward writes, backward
 * ACCUMULATES into din. The transcendental functions are the C library's (CUDA's
 * device versions on the GPU), not the CPU backend's fast approximations: both are
 * within a few ulp of PyTorch's, which is the function both backends promise. */
#ifndef STOKE_NN_CUDA_K_ELTWISE_H
#define STOKE_NN_CUDA_K_ELTWISE_H

#include "nn/cuda/kern.h"

typedef struct nk_unary_args {
    float *out;        /* forward: the output; backward: din (accumulated) */
    const float *in;   /* forward: the input; backward: what the op's backward reads */
    const float *dout; /* backward */
} nk_unary_args;

/* relu: backward reads the forward's output (out > 0) */
NK_FN void nk_relu_fwd(int64_t i, const nk_unary_args *a)
{
    a->out[i] = a->in[i] > 0 ? a->in[i] : 0.0f;
}
NK_FN void nk_relu_bwd(int64_t i, const nk_unary_args *a)
{
    if (a->in[i] > 0)
        a->out[i] += a->dout[i];
}

/* exact GELU, x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2 (accurate in both tails);
 * backward reads the forward's input */
#define NK_SQRT1_2      0.70710678118654752f
#define NK_INV_SQRT_2PI 0.39894228040143268f
NK_FN void nk_gelu_fwd(int64_t i, const nk_unary_args *a)
{
    float x = a->in[i];
    a->out[i] = x * 0.5f * erfcf(-x * NK_SQRT1_2);
}
NK_FN void nk_gelu_bwd(int64_t i, const nk_unary_args *a)
{
    float x = a->in[i];
    float cdf = 0.5f * erfcf(-x * NK_SQRT1_2);
    a->out[i] += a->dout[i] * (cdf + x * NK_INV_SQRT_2PI * expf(-0.5f * x * x));
}

/* tanh and sigmoid: backward reads the forward's output y */
NK_FN void nk_tanh_fwd(int64_t i, const nk_unary_args *a) { a->out[i] = tanhf(a->in[i]); }
NK_FN void nk_tanh_bwd(int64_t i, const nk_unary_args *a)
{
    float y = a->in[i];
    a->out[i] += a->dout[i] * (1.0f - y * y);
}
NK_FN void nk_sigmoid_fwd(int64_t i, const nk_unary_args *a)
{
    a->out[i] = 1.0f / (1.0f + expf(-a->in[i]));
}
NK_FN void nk_sigmoid_bwd(int64_t i, const nk_unary_args *a)
{
    float y = a->in[i];
    a->out[i] += a->dout[i] * y * (1.0f - y);
}

/* *p = value: the forward's dropout key into device memory, queued in stream order */
typedef struct nk_set_args {
    uint64_t *p;
    uint64_t value;
} nk_set_args;
NK_FN void nk_set_u64(int64_t i, const nk_set_args *a)
{
    (void)i;
    *a->p = a->value;
}

/* out += dout (add's and eval dropout's backward; `in` unused) */
NK_FN void nk_acc(int64_t i, const nk_unary_args *a) { a->out[i] += a->dout[i]; }

/* out = in (eval dropout) */
NK_FN void nk_copy(int64_t i, const nk_unary_args *a) { a->out[i] = a->in[i]; }

/* add (the residual): out = x + y */
typedef struct nk_add_args {
    float *out;
    const float *x, *y;
} nk_add_args;
NK_FN void nk_add_fwd(int64_t i, const nk_add_args *a) { a->out[i] = a->x[i] + a->y[i]; }

/* Dropout with the CPU backend's mask (cpu_dropout_keep) over elements base, base + 1,
 * ... of one 2^32 block (out and in point at element base): element e keeps iff
 * hash(e's low 32 bits, the block's key) >= thr, the block's 64-bit key being
 * core/rng.h's stoke_stream_key(seed, step, block). The step is read from device memory
 * when the kernel runs (the backend's set_key writes it before each forward), so a
 * captured graph replays with the forward's own mask. Forward: out = in * mask *
 * scale; backward (acc): out += in * mask * scale. */
typedef struct nk_dropout_args {
    float *out;
    const float *in;
    int64_t base;
    uint64_t seed_mix;    /* stoke_mix64(seed) */
    const uint64_t *step; /* device */
    uint32_t thr;
    float scale;
    int acc;
} nk_dropout_args;

NK_FN uint32_t nk_hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

NK_FN void nk_dropout(int64_t i, const nk_dropout_args *a)
{
    uint64_t key = nk_mix64(nk_mix64(a->seed_mix ^ *a->step) ^ ((uint64_t)a->base >> 32));
    uint32_t bits =
        nk_hash32(nk_hash32((uint32_t)(a->base + i) ^ (uint32_t)key) + (uint32_t)(key >> 32));
    float v = a->in[i] * (bits >= a->thr ? a->scale : 0.0f);
    if (a->acc)
        a->out[i] += v;
    else
        a->out[i] = v;
}

/* Softmax over the last dim, one index per row of `cols` (a GPU would want a block
 * per row with a shared-memory reduction): as cpu_softmax_row, the max, then exp
 * summed in float, then scaled; backward dx += y (dy - <dy, y>). */
typedef struct nk_softmax_args {
    float *out;        /* forward: y; backward: din (accumulated) */
    const float *in;   /* forward: x; backward: y */
    const float *dout; /* backward */
    int64_t cols;
} nk_softmax_args;

NK_FN void nk_softmax_fwd(int64_t r, const nk_softmax_args *a)
{
    const float *x = a->in + r * a->cols;
    float *y = a->out + r * a->cols;
    float mx = x[0];
    for (int64_t c = 1; c < a->cols; c++)
        mx = x[c] > mx ? x[c] : mx;
    float sum = 0.0f;
    for (int64_t c = 0; c < a->cols; c++) {
        y[c] = expf(x[c] - mx);
        sum += y[c];
    }
    float inv = 1.0f / sum;
    for (int64_t c = 0; c < a->cols; c++)
        y[c] *= inv;
}

NK_FN void nk_softmax_bwd(int64_t r, const nk_softmax_args *a)
{
    const float *y = a->in + r * a->cols, *dy = a->dout + r * a->cols;
    float *dx = a->out + r * a->cols;
    float dot = 0.0f;
    for (int64_t c = 0; c < a->cols; c++)
        dot += dy[c] * y[c];
    for (int64_t c = 0; c < a->cols; c++)
        dx[c] += y[c] * (dy[c] - dot);
}

#define NK_ELTWISE_KERNELS(X)       \
    X(relu_fwd, nk_unary_args)      \
    X(relu_bwd, nk_unary_args)      \
    X(gelu_fwd, nk_unary_args)      \
    X(gelu_bwd, nk_unary_args)      \
    X(tanh_fwd, nk_unary_args)      \
    X(tanh_bwd, nk_unary_args)      \
    X(sigmoid_fwd, nk_unary_args)   \
    X(sigmoid_bwd, nk_unary_args)   \
    X(acc, nk_unary_args)           \
    X(copy, nk_unary_args)          \
    X(add_fwd, nk_add_args)         \
    X(dropout, nk_dropout_args)     \
    X(set_u64, nk_set_args)         \
    X(softmax_fwd, nk_softmax_args) \
    X(softmax_bwd, nk_softmax_args)

#endif
