/* k_base.h - kernel bodies (kern.h) of the CUDA backend's memory passes, optimizer
 * updates, the linear layer's bias and the tree of sums (bias gradients, gradients'
 * squares). Each body mirrors the CPU backend's function named in its comment,
 * operation for operation where the CPU's is scalar. */
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

/* Sums by a tree of plain bodies (reduce.c plans it): x viewed as [A][L][K] (K
 * innermost) is summed over L, level after level, each output adding G inputs into a
 * double, until L is 1. A body may not share memory or shuffle between threads (the
 * same body is the host build's loop, kern.h), so the tree is made of launches, and
 * every level's order is fixed by its shape alone: the sums are the same bits on the
 * host and on any GPU, run after run.
 *
 * Output (r, j, k) of a level adds l = j, j + Lout, j + 2 Lout, ... (G of them, in
 * that order): for each step of the loop, threads next in index read addresses next
 * in memory, K > 1 or not. The inner loop's trip count is a constant so nvcc unrolls
 * it and keeps its NK_TREE_F loads in flight; the bound check makes it a predicate.
 * A float's square is exact in double (48 significant bits of 53), so an FMA that
 * nvcc contracts it into adds the same bits as the host's multiply and add. */
#define NK_TREE_F 32
#ifdef __CUDACC__
#define NK_UNROLL _Pragma("unroll")
#else
#define NK_UNROLL
#endif
typedef struct nk_tree_args {
    const float *xf; /* the input: floats, or (NULL) the doubles xd */
    const double *xd;
    double *out;           /* [A][Lout][K]; NULL at the last level, which writes */
    double *total;         /* total[r K + k] = the sum, or */
    float *db;             /* db[r K + k] += (float)the sum */
    int64_t L, K, Lout, G; /* Lout = ceil(L / G); G a multiple of NK_TREE_F */
    int square;            /* x^2 summed (x the floats) */
} nk_tree_args;

#define NK_TREE_LOOP(V)                                \
    for (int64_t t0 = 0; t0 < a->G; t0 += NK_TREE_F) { \
        NK_UNROLL for (int t = 0; t < NK_TREE_F; t++)  \
        {                                              \
            int64_t l = j + (t0 + t) * a->Lout;        \
            if (l < a->L)                              \
                s += (V);                              \
        }                                              \
    }

NK_FN void nk_tree_sum(int64_t i, const nk_tree_args *a)
{
    int64_t K = a->K, k = i % K, rj = i / K, j = rj % a->Lout, r = rj / a->Lout;
    const float *xf = a->xf ? a->xf + r * a->L * K + k : NULL;
    const double *xd = a->xd ? a->xd + r * a->L * K + k : NULL;
    double s = 0;
    if (xf && a->square)
        NK_TREE_LOOP((double)xf[l * K] * (double)xf[l * K])
    else if (xf)
        NK_TREE_LOOP((double)xf[l * K])
    else
        NK_TREE_LOOP(xd[l * K])
    if (a->out)
        a->out[i] = s;
    else if (a->total)
        a->total[r * K + k] = s;
    else
        a->db[r * K + k] += (float)s;
}
#undef NK_TREE_LOOP

/* Up to NK_TREE_MANY tensors' sums of squares in one launch a level (reduce.c's
 * cuda_sum_squares_many): entry t's outputs are indices [out_at[t], out_at[t + 1]),
 * each adding NK_TREE_F of its L[t] values in nk_tree_sum's order (fan-in NK_TREE_F:
 * its totals are the bits of cuda_sum_squares on that tensor alone). The first level
 * reads the floats x[t] squared, later ones the partials xd + in_at[t]; an entry with
 * one output writes *total[t]. */
#define NK_TREE_MANY 16
typedef struct nk_tree_many_args {
    const float *x[NK_TREE_MANY];
    double *total[NK_TREE_MANY];
    int64_t L[NK_TREE_MANY], in_at[NK_TREE_MANY], out_at[NK_TREE_MANY + 1];
    const double *xd;
    double *out;
    int count;
} nk_tree_many_args;

NK_FN void nk_tree_many(int64_t i, const nk_tree_many_args *a)
{
    /* the entry's fields picked with constant indices: indexing the arguments by a
     * variable would copy them to each thread's local memory */
    const float *x = a->x[0];
    double *total = a->total[0];
    int64_t L = a->L[0], in_at = a->in_at[0], at = a->out_at[0], end = a->out_at[1];
    NK_UNROLL for (int u = 1; u < NK_TREE_MANY; u++)
    {
        if (u < a->count && a->out_at[u] <= i) {
            x = a->x[u];
            total = a->total[u];
            L = a->L[u];
            in_at = a->in_at[u];
            at = a->out_at[u];
            end = a->out_at[u + 1];
        }
    }
    int64_t j = i - at, Lout = end - at;
    double s = 0;
    if (x) {
        NK_UNROLL for (int m = 0; m < NK_TREE_F; m++)
        {
            int64_t l = j + m * Lout;
            if (l < L)
                s += (double)x[l] * (double)x[l];
        }
    } else {
        const double *xd = a->xd + in_at;
        NK_UNROLL for (int m = 0; m < NK_TREE_F; m++)
        {
            int64_t l = j + m * Lout;
            if (l < L)
                s += xd[l];
        }
    }
    if (Lout == 1)
        *total = s;
    else
        a->out[i] = s;
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

#define NK_BASE_KERNELS(X)              \
    X(set_step, nk_set_step_args)       \
    X(step_decide, nk_step_decide_args) \
    X(scale, nk_scale_args)             \
    X(to_lowp, nk_lowp_args)            \
    X(tree_sum, nk_tree_args)           \
    X(tree_many, nk_tree_many_args)     \
    X(sgd, nk_sgd_args)                 \
    X(adamw, nk_adamw_args)             \
    X(bias_add, nk_bias_args)

#endif
