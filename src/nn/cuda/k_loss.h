/* k_loss.h - kernel bodies (kern.h) of the CUDA backend's losses and metrics. Each
 * loss runs in two launches, as cpu_* in src/nn/cpu/loss.c computes it: one index per
 * sample sums its terms in double into per[b] and marks a bad target in bad[b]; then
 * one index adds per[] in order, writes the mean to out[0] and the first bad sample (+1,
 * 0 for none) to *flag. Gradients take one index per sample (or per element). */
#ifndef STOKE_NN_CUDA_K_LOSS_H
#define STOKE_NN_CUDA_K_LOSS_H

#include "nn/cuda/kern.h"

typedef struct nk_loss_args {
    const float *x;     /* logits or predictions (rows x cols) */
    const void *target; /* int32 classes (rows), or fp32 (rows x tcols) */
    float *dx;          /* gradient, accumulated; NULL in forward */
    double *per;        /* rows */
    int32_t *bad;       /* rows */
    float *out;         /* out[0] = the mean */
    int32_t *flag;      /* the first bad sample + 1 */
    int64_t rows, cols, tcols;
    double denom;        /* what the sum is divided by (batch, or elements) */
    double g;            /* gradient factor: grad_scale / denom (x 2 for MSE) */
    double on, off;      /* cross-entropy: 1 - eps, eps / K */
    float clip, entropy; /* policy gradient */
} nk_loss_args;

NK_FN void nk_loss_reduce(int64_t i, const nk_loss_args *a)
{
    (void)i;
    double s = 0;
    int32_t first = 0;
    for (int64_t r = 0; r < a->rows; r++) {
        s += a->per[r];
        if (a->bad[r] && !first)
            first = (int32_t)(r + 1);
    }
    a->out[0] = (float)(s / a->denom);
    *a->flag = first;
}

/* cpu_cross_entropy: loss_b = lse - (1 - eps) x_t - (eps / K) sum_k x_k */
NK_FN void nk_ce_fwd(int64_t b, const nk_loss_args *a)
{
    const float *x = a->x + b * a->cols;
    int32_t t = ((const int32_t *)a->target)[b];
    a->bad[b] = t < 0 || t >= a->cols;
    if (a->bad[b]) {
        a->per[b] = 0;
        return;
    }
    float mx = x[0];
    for (int64_t k = 1; k < a->cols; k++)
        mx = x[k] > mx ? x[k] : mx;
    double sum = 0, xsum = 0;
    for (int64_t k = 0; k < a->cols; k++) {
        sum += exp((double)x[k] - mx);
        xsum += x[k];
    }
    a->per[b] = mx + log(sum) - a->on * x[t] - a->off * xsum;
}

NK_FN void nk_ce_bwd(int64_t b, const nk_loss_args *a)
{
    const float *x = a->x + b * a->cols;
    float *d = a->dx + b * a->cols;
    int32_t t = ((const int32_t *)a->target)[b];
    if (t < 0 || t >= a->cols)
        return;
    float mx = x[0];
    for (int64_t k = 1; k < a->cols; k++)
        mx = x[k] > mx ? x[k] : mx;
    double sum = 0;
    for (int64_t k = 0; k < a->cols; k++)
        sum += exp((double)x[k] - mx);
    double inv = 1.0 / sum;
    for (int64_t k = 0; k < a->cols; k++) {
        double p = exp((double)x[k] - mx) * inv;
        d[k] += (float)(a->g * (p - a->off - (k == t ? a->on : 0.0)));
    }
}

/* Element-wise losses: per[b] sums sample b's cols elements (the target has as many). */
NK_FN double nk_bce_term(double x, double y)
{
    return (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
}

NK_FN void nk_eltloss_fwd(int64_t b, const nk_loss_args *a, int kind)
{
    const float *x = a->x + b * a->cols, *y = (const float *)a->target + b * a->cols;
    double s = 0;
    for (int64_t k = 0; k < a->cols; k++) {
        double d = (double)x[k] - y[k];
        s += kind == 0 ? d * d : kind == 1 ? fabs(d) : nk_bce_term(x[k], y[k]);
    }
    a->per[b] = s;
    a->bad[b] = 0;
}
NK_FN void nk_mse_fwd(int64_t b, const nk_loss_args *a) { nk_eltloss_fwd(b, a, 0); }
NK_FN void nk_l1_fwd(int64_t b, const nk_loss_args *a) { nk_eltloss_fwd(b, a, 1); }
NK_FN void nk_bce_fwd(int64_t b, const nk_loss_args *a) { nk_eltloss_fwd(b, a, 2); }

/* one index per element: dx += g * 2 (x - y) (cpu_mse; g holds the 2) */
NK_FN void nk_mse_bwd(int64_t i, const nk_loss_args *a)
{
    a->dx[i] += (float)(a->g * ((double)a->x[i] - ((const float *)a->target)[i]));
}

/* cpu_l1: g rounded to float first, sign(0) = 0 */
NK_FN void nk_l1_bwd(int64_t i, const nk_loss_args *a)
{
    double d = (double)a->x[i] - ((const float *)a->target)[i];
    float g = (float)a->g;
    a->dx[i] += d > 0 ? g : d < 0 ? -g : 0.0f;
}

/* cpu_bce_with_logits: sigmoid without exp of a positive number */
NK_FN void nk_bce_bwd(int64_t i, const nk_loss_args *a)
{
    double x = a->x[i], y = ((const float *)a->target)[i];
    double s = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    a->dx[i] += (float)(a->g * (s - y));
}

/* cpu_count_correct: argmax, ties to the lowest index, a NaN never wins; per[b] = 1
 * for a right answer. With int32 targets (classes). */
NK_FN void nk_accuracy(int64_t b, const nk_loss_args *a)
{
    const float *x = a->x + b * a->cols;
    int32_t t = ((const int32_t *)a->target)[b];
    int64_t best = -1;
    for (int64_t k = 0; k < a->cols; k++)
        if (x[k] == x[k] && (best < 0 || x[k] > x[best]))
            best = k;
    a->per[b] = best >= 0 && best == t ? 1.0 : 0.0;
    a->bad[b] = 0;
}

/* MAE metric: per[b] = sum of |x - y| over the sample's elements */
NK_FN void nk_mae(int64_t b, const nk_loss_args *a) { nk_eltloss_fwd(b, a, 1); }

/* cpu_policy_gradient: per sample -obj - beta H with pi = softmax(x); tcols 2
 * (REINFORCE: obj = A log pi(a)) or 3 (PPO: the clipped surrogate). bad[b] marks a
 * target the CPU refuses (an action not a whole number in [0, K), a non-finite
 * advantage or old log-probability); the host reads the row back to say which. */
NK_FN int nk_pg_bad(const float *t, const nk_loss_args *a)
{
    return !(t[0] >= 0 && t[0] < (float)a->cols && t[0] == floorf(t[0])) || !isfinite(t[1]) ||
           (a->tcols == 3 && !isfinite(t[2]));
}

/* the sample's lse, entropy H, log pi(a), and the objective's derivative by log pi(a) */
typedef struct nk_pg_terms {
    double lse, H, obj, coef;
} nk_pg_terms;

NK_FN nk_pg_terms nk_pg_eval(const float *x, const float *t, const nk_loss_args *a)
{
    int64_t K = a->cols, act = (int64_t)t[0];
    float mx = x[0];
    for (int64_t k = 1; k < K; k++)
        mx = x[k] > mx ? x[k] : mx;
    double sum = 0, px = 0;
    for (int64_t k = 0; k < K; k++) {
        double e = exp((double)x[k] - mx);
        sum += e;
        px += e * x[k];
    }
    nk_pg_terms r;
    r.lse = mx + log(sum);
    r.H = r.lse - px / sum;
    double A = t[1], logp = x[act] - r.lse;
    if (a->tcols == 2) {
        r.obj = A * logp;
        r.coef = A;
    } else {
        double clip = a->clip, ratio = exp(logp - (double)t[2]);
        double rc = ratio < 1.0 - clip ? 1.0 - clip : ratio > 1.0 + clip ? 1.0 + clip : ratio;
        int unclipped = ratio * A <= rc * A;
        r.obj = unclipped ? ratio * A : rc * A;
        r.coef = unclipped ? ratio * A : 0.0;
    }
    return r;
}

NK_FN void nk_pg_fwd(int64_t b, const nk_loss_args *a)
{
    const float *x = a->x + b * a->cols, *t = (const float *)a->target + b * a->tcols;
    a->bad[b] = nk_pg_bad(t, a);
    if (a->bad[b]) {
        a->per[b] = 0;
        return;
    }
    nk_pg_terms r = nk_pg_eval(x, t, a);
    a->per[b] = -r.obj - (double)a->entropy * r.H;
}

NK_FN void nk_pg_bwd(int64_t b, const nk_loss_args *a)
{
    const float *x = a->x + b * a->cols, *t = (const float *)a->target + b * a->tcols;
    if (nk_pg_bad(t, a))
        return;
    nk_pg_terms r = nk_pg_eval(x, t, a);
    float *d = a->dx + b * a->cols;
    int64_t act = (int64_t)t[0];
    double beta = a->entropy;
    for (int64_t k = 0; k < a->cols; k++) {
        double lp = (double)x[k] - r.lse, p = exp(lp);
        d[k] += (float)(a->g * (-r.coef * ((k == act ? 1.0 : 0.0) - p) + beta * p * (lp + r.H)));
    }
}

#define NK_LOSS_KERNELS(X)       \
    X(loss_reduce, nk_loss_args) \
    X(ce_fwd, nk_loss_args)      \
    X(ce_bwd, nk_loss_args)      \
    X(mse_fwd, nk_loss_args)     \
    X(mse_bwd, nk_loss_args)     \
    X(l1_fwd, nk_loss_args)      \
    X(l1_bwd, nk_loss_args)      \
    X(bce_fwd, nk_loss_args)     \
    X(bce_bwd, nk_loss_args)     \
    X(accuracy, nk_loss_args)    \
    X(mae, nk_loss_args)         \
    X(pg_fwd, nk_loss_args)      \
    X(pg_bwd, nk_loss_args)

#endif
