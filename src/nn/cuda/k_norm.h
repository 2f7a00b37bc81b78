/* k_norm.h - kernel bodies (kern.h) of the CUDA backend's batch norm, layer norm and
 * the attention's head split/merge and softmax, as src/nn/cpu/norm.c and attn.c
 * compute them. Reductions take one index per channel (batch norm) or per row (layer
 * norm) and sum in order in double, so they are deterministic; a GPU would want a
 * block per channel with a tree in shared memory, which would still be deterministic
 * but is tuning this backend leaves for later. */
#ifndef STOKE_NN_CUDA_K_NORM_H
#define STOKE_NN_CUDA_K_NORM_H

#include "nn/cuda/kern.h"

/* ---- batch norm: x (B, C, S), statistics per channel over B x S values ---- */

typedef struct nk_bn_args {
    const float *x, *dy;
    float *y, *dx;       /* dx accumulated, or NULL */
    const float *w, *b;  /* affine, or NULL */
    float *rmean, *rvar; /* running statistics */
    float *mean, *rstd;  /* saved per channel, forward -> backward */
    float *dw, *db;      /* accumulated, or NULL */
    float *mdy, *mdyx;   /* backward scratch per channel */
    int64_t B, C, S;
    int train;
    float momentum, eps;
} nk_bn_args;

NK_FN const float *nk_bn_chan(const float *p, const nk_bn_args *a, int64_t b, int64_t c)
{
    return p + (b * a->C + c) * a->S;
}

/* cpu_batchnorm_forward's statistics: two passes (mean, then squared deviations
 * about it) in double; running stats with the unbiased variance, as PyTorch. */
NK_FN void nk_bn_stats(int64_t c, const nk_bn_args *a)
{
    if (!a->train) {
        a->mean[c] = a->rmean[c];
        a->rstd[c] = (float)(1.0 / sqrt((double)a->rvar[c] + (double)a->eps));
        return;
    }
    double count = (double)(a->B * a->S), sum = 0, ss = 0;
    for (int64_t b = 0; b < a->B; b++) {
        const float *x = nk_bn_chan(a->x, a, b, c);
        for (int64_t s = 0; s < a->S; s++)
            sum += x[s];
    }
    double m = sum / count;
    for (int64_t b = 0; b < a->B; b++) {
        const float *x = nk_bn_chan(a->x, a, b, c);
        for (int64_t s = 0; s < a->S; s++)
            ss += ((double)x[s] - m) * ((double)x[s] - m);
    }
    a->mean[c] = (float)m;
    a->rstd[c] = (float)(1.0 / sqrt(ss / count + (double)a->eps));
    if (a->rmean && a->rvar) {
        double mo = a->momentum;
        a->rmean[c] = (float)((1.0 - mo) * a->rmean[c] + mo * m);
        a->rvar[c] = (float)((1.0 - mo) * a->rvar[c] + mo * (ss / (count - 1)));
    }
}

/* y = x a + sh with a = w rstd, sh = b - mean a (one index per element) */
NK_FN void nk_bn_apply(int64_t i, const nk_bn_args *a)
{
    int64_t c = (i / a->S) % a->C;
    float k = (a->w ? a->w[c] : 1.0f) * a->rstd[c];
    float sh = (a->b ? a->b[c] : 0.0f) - a->mean[c] * k;
    a->y[i] = a->x[i] * k + sh;
}

/* per channel: sum dy and sum dy xhat into the parameter gradients, and their means
 * (zero in eval, where the statistics are constants) for the input gradient */
NK_FN void nk_bn_grad(int64_t c, const nk_bn_args *a)
{
    double sdy = 0, sdyx = 0;
    float m = a->mean[c], r = a->rstd[c];
    for (int64_t b = 0; b < a->B; b++) {
        const float *x = nk_bn_chan(a->x, a, b, c), *dy = nk_bn_chan(a->dy, a, b, c);
        for (int64_t s = 0; s < a->S; s++) {
            sdy += dy[s];
            sdyx += (double)dy[s] * ((x[s] - m) * r);
        }
    }
    if (a->dw)
        a->dw[c] += (float)sdyx;
    if (a->db)
        a->db[c] += (float)sdy;
    double count = (double)(a->B * a->S);
    a->mdy[c] = a->train ? (float)(sdy / count) : 0.0f;
    a->mdyx[c] = a->train ? (float)(sdyx / count) : 0.0f;
}

/* dx += w rstd (dy - mean(dy) - xhat mean(dy xhat)) */
NK_FN void nk_bn_dx(int64_t i, const nk_bn_args *a)
{
    int64_t c = (i / a->S) % a->C;
    float r = a->rstd[c], k = (a->w ? a->w[c] : 1.0f) * r;
    float xhat = (a->x[i] - a->mean[c]) * r;
    a->dx[i] += k * (a->dy[i] - a->mdy[c] - xhat * a->mdyx[c]);
}

/* ---- layer norm: rows of C values ---- */

typedef struct nk_ln_args {
    const float *x, *dy;
    float *y, *dx;      /* dx accumulated, or NULL */
    const float *w, *b; /* or NULL */
    float *mean, *rstd; /* saved per row */
    float *dw, *db;     /* accumulated, or NULL */
    int64_t rows, C;
    float eps;
} nk_ln_args;

NK_FN void nk_ln_fwd(int64_t r, const nk_ln_args *a)
{
    const float *x = a->x + r * a->C;
    float *y = a->y + r * a->C;
    double sum = 0, ss = 0;
    for (int64_t c = 0; c < a->C; c++)
        sum += x[c];
    float m = (float)(sum / (double)a->C);
    for (int64_t c = 0; c < a->C; c++)
        ss += ((double)x[c] - m) * ((double)x[c] - m);
    float rstd = 1.0f / sqrtf((float)(ss / (double)a->C) + a->eps);
    a->mean[r] = m;
    a->rstd[r] = rstd;
    for (int64_t c = 0; c < a->C; c++)
        y[c] = (x[c] - m) * rstd * (a->w ? a->w[c] : 1.0f) + (a->b ? a->b[c] : 0.0f);
}

/* dx += rstd (g - mean(g) - xhat mean(g xhat)), g = dy w (one index per row) */
NK_FN void nk_ln_dx(int64_t r, const nk_ln_args *a)
{
    const float *x = a->x + r * a->C, *dy = a->dy + r * a->C;
    float *dx = a->dx + r * a->C;
    float m = a->mean[r], rstd = a->rstd[r];
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < a->C; c++) {
        float g = dy[c] * (a->w ? a->w[c] : 1.0f);
        sg += g;
        sgx += (double)g * ((x[c] - m) * rstd);
    }
    float mg = (float)(sg / (double)a->C), mgx = (float)(sgx / (double)a->C);
    for (int64_t c = 0; c < a->C; c++) {
        float g = dy[c] * (a->w ? a->w[c] : 1.0f);
        dx[c] += rstd * (g - mg - (x[c] - m) * rstd * mgx);
    }
}

/* dw[c] += sum over rows of dy xhat, db[c] += sum of dy, rows in order (one index
 * per column) */
NK_FN void nk_ln_param(int64_t c, const nk_ln_args *a)
{
    double sw = 0, sb = 0;
    for (int64_t r = 0; r < a->rows; r++) {
        float dy = a->dy[r * a->C + c];
        sw += (double)dy * ((a->x[r * a->C + c] - a->mean[r]) * a->rstd[r]);
        sb += dy;
    }
    if (a->dw)
        a->dw[c] += (float)sw;
    if (a->db)
        a->db[c] += (float)sb;
}

/* ---- attention: heads laid out (part, b, h, t, d) so one strided batched GEMM covers
 * every (b, h); the packed rows are (b, t, part x C + h x hs + d) ---- */

typedef struct nk_heads_args {
    const float *src;
    float *dst;
    int64_t B, T, C, H, parts; /* parts: 3 for q|k|v, 1 for one C-wide tensor */
} nk_heads_args;

/* index into the packed rows of the element at split position i */
NK_FN int64_t nk_heads_packed(int64_t i, const nk_heads_args *a)
{
    int64_t hs = a->C / a->H, d = i % hs, t = (i / hs) % a->T, bh = i / (hs * a->T);
    int64_t h = bh % a->H, b = (bh / a->H) % a->B, p = bh / (a->H * a->B);
    return (b * a->T + t) * (a->parts * a->C) + p * a->C + h * hs + d;
}

/* split: one index per split element */
NK_FN void nk_heads_split(int64_t i, const nk_heads_args *a)
{
    a->dst[i] = a->src[nk_heads_packed(i, a)];
}

/* merge: one index per packed element, so each writes only its own */
NK_FN void nk_heads_merge(int64_t j, const nk_heads_args *a)
{
    int64_t hs = a->C / a->H, w = a->parts * a->C, col = j % w, bt = j / w;
    int64_t p = col / a->C, h = (col % a->C) / hs, d = col % hs;
    int64_t b = bt / a->T, t = bt % a->T;
    a->dst[j] = a->src[(((p * a->B + b) * a->H + h) * a->T + t) * hs + d];
}

typedef struct nk_attn_softmax_args {
    float *s;       /* rows x cols: scores -> probabilities, or dp -> ds */
    const float *p; /* backward: the probabilities */
    int64_t cols;
    float scale;
} nk_attn_softmax_args;

/* p = softmax(scale s) per row */
NK_FN void nk_attn_softmax(int64_t r, const nk_attn_softmax_args *a)
{
    float *s = a->s + r * a->cols;
    float mx = s[0] * a->scale;
    for (int64_t j = 1; j < a->cols; j++)
        mx = s[j] * a->scale > mx ? s[j] * a->scale : mx;
    double sum = 0;
    for (int64_t j = 0; j < a->cols; j++) {
        s[j] = expf(s[j] * a->scale - mx);
        sum += s[j];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < a->cols; j++)
        s[j] *= inv;
}

/* ds = scale p (dp - sum_j p dp) per row: the gradient of the scaled scores' input */
NK_FN void nk_attn_softmax_bwd(int64_t r, const nk_attn_softmax_args *a)
{
    float *ds = a->s + r * a->cols;
    const float *p = a->p + r * a->cols;
    double dot = 0;
    for (int64_t j = 0; j < a->cols; j++)
        dot += (double)p[j] * ds[j];
    for (int64_t j = 0; j < a->cols; j++)
        ds[j] = a->scale * p[j] * (ds[j] - (float)dot);
}

#define NK_NORM_KERNELS(X)                \
    X(bn_stats, nk_bn_args)               \
    X(bn_apply, nk_bn_args)               \
    X(bn_grad, nk_bn_args)                \
    X(bn_dx, nk_bn_args)                  \
    X(ln_fwd, nk_ln_args)                 \
    X(ln_dx, nk_ln_args)                  \
    X(ln_param, nk_ln_args)               \
    X(heads_split, nk_heads_args)         \
    X(heads_merge, nk_heads_args)         \
    X(attn_softmax, nk_attn_softmax_args) \
    X(attn_softmax_bwd, nk_attn_softmax_args)

#endif
