/* eltwise.c - the CUDA backend's element-wise ops (k_eltwise.h): activations, dropout,
 * the residual add, softmax. */
#include "nn/cuda/ops.h"

#include "core/rng.h"

static int64_t out_n(const nn_exec_args *a) { return a->batch * cuda_elems(&a->node->shape); }

static stoke_status named(stoke_status st, const nn_exec_args *a)
{
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* An activation's pair of entries: forward out = f(in); backward din += dout f'(x),
 * f' read from BWD_READS (the forward's `in` or `out`, as the CPU backend's). */
#define CUDA_ACTIVATION(op, BWD_READS)                                      \
    stoke_status cuda_##op##_fwd(void *ctx, const nn_exec_args *a)          \
    {                                                                       \
        nk_unary_args k = {a->out, (const float *)a->in[0], NULL};          \
        return named(CUDA_RUN((cuda_ctx *)ctx, op##_fwd, out_n(a), &k), a); \
    }                                                                       \
    stoke_status cuda_##op##_bwd(void *ctx, const nn_exec_args *a)          \
    {                                                                       \
        if (!a->din[0])                                                     \
            return STOKE_OK;                                                \
        nk_unary_args k = {a->din[0], (const float *)(BWD_READS), a->dout}; \
        return named(CUDA_RUN((cuda_ctx *)ctx, op##_bwd, out_n(a), &k), a); \
    }

CUDA_ACTIVATION(relu, a->out)
CUDA_ACTIVATION(gelu, a->in[0])
CUDA_ACTIVATION(tanh, a->out)
CUDA_ACTIVATION(sigmoid, a->out)

/* ---- dropout ---- */

/* Keep iff bits >= thr, so P(keep) = 1 - thr / 2^32 (the CPU's dropout_threshold) */
static uint32_t dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

nk_dropout_args cuda_dropout_block(uint64_t seed, const uint64_t *step, float p, int64_t base,
                                   float *dst, const float *src, int acc)
{
    nk_dropout_args k = {
        dst, src, base, stoke_mix64(seed), step, dropout_threshold(p), 1.0f / (1.0f - p), acc};
    return k;
}

/* dst (+)= src * mask * scale: one launch per 2^32 elements, each block with its key */
static stoke_status dropout_apply(cuda_ctx *c, const nn_exec_args *a, float *dst, const float *src,
                                  int acc)
{
    int64_t n = out_n(a);
    const int64_t block = (int64_t)1 << 32;
    stoke_status st = STOKE_OK;
    for (int64_t base = 0; base < n && st == STOKE_OK; base += block) {
        nk_dropout_args k =
            cuda_dropout_block(a->seed, c->key, a->node->p, base, dst + base, src + base, acc);
        st = CUDA_RUN(c, dropout, n - base < block ? n - base : block, &k);
    }
    return st;
}

stoke_status cuda_dropout_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    float p = a->node->p;
    const float *x = a->in[0];
    if (p >= 1.0f && a->train)
        return named(stoke_cudart_memset_async(c->rt, a->out, 0, (size_t)out_n(a) * sizeof(float),
                                               c->L.stream),
                     a);
    if (!a->train || p <= 0.0f) {
        nk_unary_args k = {a->out, x, NULL};
        return a->out == x ? STOKE_OK : named(CUDA_RUN(c, copy, out_n(a), &k), a);
    }
    return named(dropout_apply(c, a, a->out, x, 0), a);
}

stoke_status cuda_dropout_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    float p = a->node->p;
    if (!a->din[0] || (a->train && p >= 1.0f))
        return STOKE_OK;
    if (!a->train || p <= 0.0f) {
        nk_unary_args k = {a->din[0], NULL, a->dout};
        return named(CUDA_RUN(c, acc, out_n(a), &k), a);
    }
    return named(dropout_apply(c, a, a->din[0], a->dout, 1), a);
}

/* ---- add (residual) ---- */

stoke_status cuda_add_fwd(void *ctx, const nn_exec_args *a)
{
    nk_add_args k = {a->out, a->in[0], a->in[1]};
    return named(CUDA_RUN((cuda_ctx *)ctx, add_fwd, out_n(a), &k), a);
}

stoke_status cuda_add_bwd(void *ctx, const nn_exec_args *a)
{
    stoke_status st = STOKE_OK;
    for (int i = 0; i < 2 && st == STOKE_OK; i++) {
        nk_unary_args k = {a->din[i], NULL, a->dout};
        if (a->din[i])
            st = CUDA_RUN((cuda_ctx *)ctx, acc, out_n(a), &k);
    }
    return named(st, a);
}

/* ---- softmax over the last dim ---- */

static nk_softmax_args softmax_args(const nn_exec_args *a, float *out, const float *in,
                                    const float *dout)
{
    const stoke_shape *s = &a->node->shape;
    nk_softmax_args k = {out, in, dout, s->dims[s->ndim - 1]};
    return k;
}

stoke_status cuda_softmax_fwd(void *ctx, const nn_exec_args *a)
{
    nk_softmax_args k = softmax_args(a, a->out, a->in[0], NULL);
    return named(CUDA_RUN((cuda_ctx *)ctx, softmax_fwd, out_n(a) / k.cols, &k), a);
}

stoke_status cuda_softmax_bwd(void *ctx, const nn_exec_args *a)
{
    if (!a->din[0])
        return STOKE_OK;
    nk_softmax_args k = softmax_args(a, a->din[0], a->out, a->dout);
    return named(CUDA_RUN((cuda_ctx *)ctx, softmax_bwd, out_n(a) / k.cols, &k), a);
}
