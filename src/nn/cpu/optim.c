/* optim.c - SGD and AdamW updates and the passes of global-norm clipping, written as
 * PyTorch's single-tensor code orders them so results match it closely. */
#include "nn/cpu/optim.h"
#include "core/precision.h"
#include "nn/cpu/dense.h"

#include <emmintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <xmmintrin.h>

/* A weight whose gradient stays zero (a dead ReLU unit) sees its momentum shrink by the
 * momentum factor every step, into subnormal floats after some hundreds of steps, and
 * x86 computes on subnormals through microcode assists, ~100x slower: measured, the SGD
 * update grew from 1% to 17% of the reference CNN's step by its third epoch. So the
 * update loops flush subnormals to zero (MXCSR FTZ and DAZ, for their own duration and
 * thread only): a term below 1.2e-38 moves no weight of normal size. */
static unsigned flush_begin(void)
{
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return old;
}

static void flush_end(unsigned old) { _mm_setcsr(old); }

/* The updates are elementwise loops bound by memory traffic (there is no BLAS "Adam").
 * SGD splits large tensors over the compute threads in fixed blocks (the same bits for
 * any thread count); AdamW runs on one thread. */

static bool finite_nonneg(double x) { return isfinite(x) && x >= 0; }

stoke_status cpu_sgd_check(const cpu_sgd_config *c)
{
    if (!finite_nonneg(c->momentum))
        return stoke_fail(STOKE_ERR_ARG, "sgd: momentum %g must be finite and >= 0",
                          (double)c->momentum);
    if (!finite_nonneg(c->dampening))
        return stoke_fail(STOKE_ERR_ARG, "sgd: dampening %g must be finite and >= 0",
                          (double)c->dampening);
    if (!finite_nonneg(c->weight_decay))
        return stoke_fail(STOKE_ERR_ARG, "sgd: weight_decay %g must be finite and >= 0",
                          (double)c->weight_decay);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        return stoke_fail(STOKE_ERR_ARG,
                          "sgd: nesterov needs momentum > 0 and dampening 0 (momentum %g, "
                          "dampening %g)",
                          (double)c->momentum, (double)c->dampening);
    return STOKE_OK;
}

#define SGD_PAR_MIN ((size_t)1 << 16)
#define SGD_BLK     ((size_t)1 << 13)

static void sgd_range_(const cpu_sgd_config *c, float neg_lr, bool first, float *param,
                       const float *grad, float *momentum_buf, size_t lo, size_t hi)
{
    const float wd = c->weight_decay, mom = c->momentum, keep = 1.0f - c->dampening;
    if (mom == 0) {
        for (size_t i = lo; i < hi; i++)
            param[i] += neg_lr * (grad[i] + wd * param[i]);
        return;
    }
    for (size_t i = lo; i < hi; i++) {
        float d = grad[i] + wd * param[i];
        float buf = first ? d : mom * momentum_buf[i] + keep * d;
        momentum_buf[i] = buf;
        param[i] += neg_lr * (c->nesterov ? d + mom * buf : buf);
    }
}

static void sgd_range(const cpu_sgd_config *c, float neg_lr, bool first, float *param,
                      const float *grad, float *momentum_buf, size_t lo, size_t hi)
{
    unsigned csr = flush_begin();
    sgd_range_(c, neg_lr, first, param, grad, momentum_buf, lo, hi);
    flush_end(csr);
}

/* One block of the update, then what follows it while the block is in cache: the
 * weights' low-precision copy and the zeroed gradient. */
static void sgd_block(const cpu_sgd_config *c, float neg_lr, bool first, float *param, float *grad,
                      float *momentum_buf, size_t lo, size_t hi, const cpu_after_update *after)
{
    sgd_range(c, neg_lr, first, param, grad, momentum_buf, lo, hi);
    if (!after)
        return;
    if (after->lowp)
        (after->fp16 ? cpu_f32_to_f16 : cpu_f32_to_bf16)(param + lo, after->lowp + lo, hi - lo);
    if (after->zero_grad)
        memset(grad + lo, 0, (hi - lo) * sizeof *grad);
}

void cpu_sgd_step_then(const cpu_sgd_config *c, double lr, int64_t step, float *param, float *grad,
                       float *momentum_buf, size_t n, const cpu_after_update *after)
{
    const float neg_lr = (float)-lr;
    const bool first = step <= 1;
    /* Element-wise, so splitting over the threads changes no bits; worth it only for the
     * large weights (the CNN's 3136x128), not for biases. */
    if (n < SGD_PAR_MIN) {
        sgd_block(c, neg_lr, first, param, grad, momentum_buf, 0, n, after);
        return;
    }
    cpu_threads_apply();
    long nblk = (long)((n + SGD_BLK - 1) / SGD_BLK);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t lo = (size_t)k * SGD_BLK, hi = n - lo < SGD_BLK ? n : lo + SGD_BLK;
        sgd_block(c, neg_lr, first, param, grad, momentum_buf, lo, hi, after);
    }
}

void cpu_sgd_step(const cpu_sgd_config *c, double lr, int64_t step, float *param, const float *grad,
                  float *momentum_buf, size_t n)
{
    /* grad is only read when nothing follows the update */
    cpu_sgd_step_then(c, lr, step, param, (float *)(uintptr_t)grad, momentum_buf, n, NULL);
}

void cpu_adamw_defaults(cpu_adamw_config *c)
{
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
}

stoke_status cpu_adamw_check(const cpu_adamw_config *c)
{
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return stoke_fail(STOKE_ERR_ARG, "adamw: beta1 %g outside [0, 1)", (double)c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return stoke_fail(STOKE_ERR_ARG, "adamw: beta2 %g outside [0, 1)", (double)c->beta2);
    if (!finite_nonneg(c->eps))
        return stoke_fail(STOKE_ERR_ARG, "adamw: eps %g must be finite and >= 0", (double)c->eps);
    if (!finite_nonneg(c->weight_decay))
        return stoke_fail(STOKE_ERR_ARG, "adamw: weight_decay %g must be finite and >= 0",
                          (double)c->weight_decay);
    return STOKE_OK;
}

typedef struct adamw_k {
    float b1, b2, one_b1, one_b2, decay, neg_step_size, bc2_sqrt, eps;
} adamw_k;

/* SSE2 (baseline x86-64): sqrtf under errno rules keeps the compiler from vectorizing
 * the scalar loop, and the AdamW step would be compute-bound without it. The same
 * correctly rounded operations in the same order as the scalar tail, so every element
 * gets the same bits either way. */
static void adamw_range_(const adamw_k *k, float *param, const float *grad, float *m, float *v,
                         size_t lo, size_t hi)
{
    size_t i = lo;
    const __m128 b1 = _mm_set1_ps(k->b1), b2 = _mm_set1_ps(k->b2);
    const __m128 ob1 = _mm_set1_ps(k->one_b1), ob2 = _mm_set1_ps(k->one_b2);
    const __m128 decay = _mm_set1_ps(k->decay), nss = _mm_set1_ps(k->neg_step_size);
    const __m128 bc2 = _mm_set1_ps(k->bc2_sqrt), eps = _mm_set1_ps(k->eps);
    for (; i + 4 <= hi; i += 4) {
        __m128 g = _mm_loadu_ps(grad + i);
        __m128 p = _mm_mul_ps(_mm_loadu_ps(param + i), decay);
        __m128 mi = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(m + i), b1), _mm_mul_ps(ob1, g));
        __m128 vi =
            _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(v + i), b2), _mm_mul_ps(_mm_mul_ps(ob2, g), g));
        _mm_storeu_ps(m + i, mi);
        _mm_storeu_ps(v + i, vi);
        __m128 den = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2), eps);
        _mm_storeu_ps(param + i, _mm_add_ps(p, _mm_div_ps(_mm_mul_ps(nss, mi), den)));
    }
    for (; i < hi; i++) {
        float g = grad[i], p = param[i] * k->decay;
        float mi = m[i] * k->b1 + k->one_b1 * g;
        float vi = v[i] * k->b2 + k->one_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = p + k->neg_step_size * mi / (sqrtf(vi) / k->bc2_sqrt + k->eps);
    }
}

static void adamw_range(const adamw_k *k, float *param, const float *grad, float *m, float *v,
                        size_t lo, size_t hi)
{
    unsigned csr = flush_begin();
    adamw_range_(k, param, grad, m, v, lo, hi);
    flush_end(csr);
}

void cpu_adamw_step(const cpu_adamw_config *c, double lr, int64_t step, float *param,
                    const float *grad, float *m, float *v, size_t n)
{
    /* PyTorch computes the scalars on Python floats (double), then the tensor ops take
     * them as float scalars */
    const double t = (double)(step < 1 ? 1 : step);
    const adamw_k k = {
        .b1 = c->beta1,
        .b2 = c->beta2,
        .one_b1 = 1.0f - c->beta1,
        .one_b2 = 1.0f - c->beta2,
        .decay = (float)(1.0 - lr * c->weight_decay),
        .neg_step_size = (float)(-lr / (1.0 - pow(c->beta1, t))),
        .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, t)),
        .eps = c->eps,
    };
    adamw_range(&k, param, grad, m, v, 0, n);
}

/* ---- clipping passes ------------------------------------------------------------------------ */

double cpu_sum_squares(const float *x, size_t n, bool *finite)
{
    /* four partial sums in a fixed order: deterministic, and not one long chain */
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            s[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++)
        s[0] += (double)x[i] * x[i];
    double total = (s[0] + s[1]) + (s[2] + s[3]);
    if (finite) /* a float's square overflows no double, so inf/NaN here mean inf/NaN in x */
        *finite = isfinite(total);
    return total;
}

void cpu_scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}
