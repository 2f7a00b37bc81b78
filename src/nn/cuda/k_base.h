/* k_base.h - kernel bodies (kern.h) of the CUDA backend's memory passes, optimizer
 * updates and the linear layer's bias. Each body mirrors the CPU backend's function
 * named in its comment, operation for operation where the CPU's is scalar. */
#ifndef STOKE_NN_CUDA_K_BASE_H
#define STOKE_NN_CUDA_K_BASE_H

#include "nn/cuda/kern.h"

/* The optimizer step's scalars in device memory, read by the update kernels as they
 * run, so a captured step replays with each step's own: the host's (set_step) and
 * the step's decision (nk_step_decide), made on the device so that nothing in a step
 * waits for the host. */
typedef struct nk_step {
    float neg_lr;                         /* SGD */
    int first;                            /* SGD: the first momentum step */
    float decay, neg_step_size, bc2_sqrt; /* AdamW's, computed on the host in double */
    double inv;                           /* 1 / (loss scale x batches) */
    float clip;                           /* the clipping norm, 0: none */
    /* decided on the device from the gradients */
    float coef; /* the gradients' factor: inv, with clipping's */
    int skip;   /* a gradient is not finite: no update (the gradients are still zeroed) */
} nk_step;

/* What the host learns of a step, once it is done (the backend's step_result). */
typedef struct nk_step_result {
    double norm; /* the unscaled gradients' norm (inf when one is not finite) */
    int32_t bad; /* the first tensor whose sum of squares is not finite, or -1 */
    int32_t skip;
} nk_step_result;

typedef struct nk_set_step_args {
    nk_step *p;
    nk_step value;
} nk_set_step_args;
NK_FN void nk_set_step(int64_t i, const nk_set_step_args *a)
{
    (void)i;
    *a->p = a->value;
}

/* torch.nn.utils.clip_grad_norm_'s factor with the unscaling: the one rule of both
 * backends (the CPU's model.c calls it on the host, nk_step_decide on the device), in
 * double from the summed squares; *norm the unscaled norm. */
NK_FN double nk_step_coef(double sumsq, double inv, float clip, double *norm)
{
    *norm = sqrt(sumsq) * inv;
    return clip > 0 && *norm > clip ? inv * (clip / (*norm + 1e-6)) : inv;
}

/* The step's decision from every gradient's sum of squares (totals[0..count), the
 * sumsq kernels'), one index: the factor, or a skip when one is not finite. */
typedef struct nk_step_decide_args {
    nk_step *step;
    const double *totals;
    nk_step_result *out;
    int count;
} nk_step_decide_args;
NK_FN void nk_step_decide(int64_t i, const nk_step_decide_args *a)
{
    (void)i;
    double sumsq = 0, norm = 0;
    int bad = -1;
    for (int k = 0; k < a->count; k++) {
        double s = a->totals[k];
        sumsq += s;
        if (bad < 0 && !isfinite(s))
            bad = k;
    }
    nk_step *st = a->step;
    st->skip = bad >= 0;
    st->coef = st->skip ? 0.0f : (float)nk_step_coef(sumsq, st->inv, st->clip, &norm);
    a->out->norm = st->skip ? INFINITY : norm;
    a->out->bad = bad;
    a->out->skip = st->skip;
}

/* x *= the step's coef */
typedef struct nk_scale_args {
    float *x;
    const nk_step *step;
} nk_scale_args;
NK_FN void nk_scale(int64_t i, const nk_scale_args *a)
{
    if (!a->step->skip)
        a->x[i] *= a->step->coef;
}

/* fp32 -> bf16 (fp16 when fp16 != 0) bits (cpu_f32_to_bf16 / _f16) */
typedef struct nk_lowp_args {
    const float *in;
    uint16_t *out;
    int fp16;
} nk_lowp_args;
NK_FN void nk_to_lowp(int64_t i, const nk_lowp_args *a)
{
    a->out[i] = a->fp16 ? nk_to_f16(a->in[i]) : nk_to_bf16(a->in[i]);
}

/* Sum of squares in two launches (cpu_sum_squares' double sum; the order differs, so
 * the last bits may): partial[j] = sum over i = j, j + stride, ... of x[i]^2, then
 * *total = the sum of partial[0..stride) in order. A non-finite value makes the sum
 * non-finite, which is all the caller asks. */
typedef struct nk_sumsq_args {
    const float *x;
    double *partial, *total;
    int64_t n, stride;
} nk_sumsq_args;
NK_FN void nk_sumsq_part(int64_t j, const nk_sumsq_args *a)
{
    double s = 0;
    for (int64_t i = j; i < a->n; i += a->stride)
        s += (double)a->x[i] * (double)a->x[i];
    a->partial[j] = s;
}
NK_FN void nk_sumsq_total(int64_t j, const nk_sumsq_args *a)
{
    (void)j;
    double s = 0;
    for (int64_t k = 0; k < a->stride; k++)
        s += a->partial[k];
    *a->total = s;
}

/* SGD as cpu_sgd_step_then: the update, the low-precision copy, the zeroed gradient. */
typedef struct nk_sgd_args {
    float *w, *g, *mom;
    uint16_t *w_lp; /* or NULL */
    const nk_step *step;
    float wd, momentum, keep;
    int nesterov, fp16;
} nk_sgd_args;
NK_FN void nk_sgd(int64_t i, const nk_sgd_args *a)
{
    if (a->step->skip) {
        a->g[i] = 0.0f;
        return;
    }
    float d = a->g[i] + a->wd * a->w[i], neg_lr = a->step->neg_lr;
    if (a->momentum == 0) {
        a->w[i] += neg_lr * d;
    } else {
        float buf = a->step->first ? d : a->momentum * a->mom[i] + a->keep * d;
        a->mom[i] = buf;
        a->w[i] += neg_lr * (a->nesterov ? d + a->momentum * buf : buf);
    }
    if (a->w_lp)
        a->w_lp[i] = a->fp16 ? nk_to_f16(a->w[i]) : nk_to_bf16(a->w[i]);
    a->g[i] = 0.0f;
}

/* AdamW as cpu_adamw_step, with its factors computed on the host in double. */
typedef struct nk_adamw_args {
    float *w;
    const float *g;
    float *m, *v;
    const nk_step *step;
    float b1, b2, one_b1, one_b2, eps;
} nk_adamw_args;
NK_FN void nk_adamw(int64_t i, const nk_adamw_args *a)
{
    const nk_step *s = a->step;
    if (s->skip)
        return;
    float p = a->w[i] * s->decay, gi = a->g[i];
    float m = a->b1 * a->m[i] + a->one_b1 * gi;
    float v = a->b2 * a->v[i] + a->one_b2 * gi * gi;
    a->m[i] = m;
    a->v[i] = v;
    float denom = sqrtf(v) / s->bc2_sqrt + a->eps;
    a->w[i] = p + s->neg_step_size * m / denom;
}

/* Rows of `cols` values: y[r, c] += b[c] (the linear layer's bias after its GEMM) */
typedef struct nk_bias_args {
    float *y;
    const float *b;
    int64_t cols;
} nk_bias_args;
NK_FN void nk_bias_add(int64_t i, const nk_bias_args *a) { a->y[i] += a->b[i % a->cols]; }

/* db[c] += sum over rows r of dy[r, c], rows summed in order (index c) */
typedef struct nk_bias_grad_args {
    float *db;
    const float *dy;
    int64_t rows, cols;
} nk_bias_grad_args;
NK_FN void nk_bias_grad(int64_t c, const nk_bias_grad_args *a)
{
    float s = 0;
    for (int64_t r = 0; r < a->rows; r++)
        s += a->dy[r * a->cols + c];
    a->db[c] += s;
}

#define NK_BASE_KERNELS(X)              \
    X(set_step, nk_set_step_args)       \
    X(step_decide, nk_step_decide_args) \
    X(scale, nk_scale_args)             \
    X(to_lowp, nk_lowp_args)            \
    X(sumsq_part, nk_sumsq_args)        \
    X(sumsq_total, nk_sumsq_args)       \
    X(sgd, nk_sgd_args)                 \
    X(adamw, nk_adamw_args)             \
    X(bias_add, nk_bias_args)           \
    X(bias_grad, nk_bias_grad_args)

#endif
