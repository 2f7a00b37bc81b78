/* k_seq.h - kernel bodies (kern.h) of the CUDA backend's sequence ops, as the CPU
 * backend's (src/nn/cpu/op_seq.c, src/nn/cpu/eltwise.c) compute them: slice,
 * embedding, learned positions, the mean over a sequence, patchify. Where a gradient
 * sums over the batch, one index owns an output element and loops over the samples in
 * order, so the sum needs no atomics and its order is the CPU's. */
#ifndef STOKE_NN_CUDA_K_SEQ_H
#define STOKE_NN_CUDA_K_SEQ_H

#include "nn/cuda/kern.h"

/* Columns [off, off + width) of rows of `cols`; one index per output element.
 * Forward: out[r, j] = x[r, off + j]; backward: dx[r, off + j] += dy[r, j]. */
typedef struct nk_slice_args {
    float *out;      /* forward: y; backward: dx (accumulated) */
    const float *in; /* forward: x; backward: dy */
    int64_t cols, off, width;
} nk_slice_args;
NK_FN void nk_slice_fwd(int64_t i, const nk_slice_args *a)
{
    int64_t r = i / a->width, j = i % a->width;
    a->out[i] = a->in[r * a->cols + a->off + j];
}
NK_FN void nk_slice_bwd(int64_t i, const nk_slice_args *a)
{
    int64_t r = i / a->width, j = i % a->width;
    a->out[r * a->cols + a->off + j] += a->in[i];
}

/* Embedding: n positions (the batch's ids), a (vocab, cols) table. */
typedef struct nk_emb_args {
    float *out;         /* forward: (n, cols) */
    float *dtable;      /* backward: (vocab, cols), accumulated */
    const float *table; /* forward */
    const float *dout;  /* backward: (n, cols) */
    const int32_t *ids; /* (n) */
    double *partial;    /* the check's partial results, `stride` of them */
    int32_t *flag;      /* the first bad position + 1, or 0 */
    int64_t n, cols, vocab, stride;
} nk_emb_args;

NK_FN int nk_emb_bad(const nk_emb_args *a, int64_t p)
{
    return a->ids[p] < 0 || a->ids[p] >= a->vocab;
}

/* The first bad position in two launches: index j scans j, j + stride, ... and keeps its
 * first (so its smallest) bad position, -1 for none; then one index takes the least. */
NK_FN void nk_emb_check_part(int64_t j, const nk_emb_args *a)
{
    double first = -1;
    for (int64_t p = j; p < a->n && first < 0; p += a->stride)
        if (nk_emb_bad(a, p))
            first = (double)p;
    a->partial[j] = first;
}
NK_FN void nk_emb_check_total(int64_t j, const nk_emb_args *a)
{
    (void)j;
    double first = -1;
    for (int64_t k = 0; k < a->stride; k++)
        if (a->partial[k] >= 0 && (first < 0 || a->partial[k] < first))
            first = a->partial[k];
    *a->flag = (int32_t)(first + 1);
}

/* out[p, c] = table[ids[p], c] (0 for a bad id: the check reports it, reading stays in
 * bounds); one index per output element */
NK_FN void nk_emb_fwd(int64_t i, const nk_emb_args *a)
{
    int64_t p = i / a->cols, c = i % a->cols;
    a->out[i] = nk_emb_bad(a, p) ? 0.0f : a->table[(int64_t)a->ids[p] * a->cols + c];
}

/* dtable[ids[p], c] += dout[p, c] over p in order; one index per column c (a GPU would
 * want more parallelism for narrow tables: a sort by id, then a segmented sum) */
NK_FN void nk_emb_bwd(int64_t c, const nk_emb_args *a)
{
    for (int64_t p = 0; p < a->n; p++)
        if (!nk_emb_bad(a, p))
            a->dtable[(int64_t)a->ids[p] * a->cols + c] += a->dout[p * a->cols + c];
}

/* Learned positions: per = elements of one sample, rows = the batch. */
typedef struct nk_pos_args {
    float *out;        /* forward: y; backward: dx (accumulated, or NULL) */
    const float *in;   /* forward: x */
    const float *w;    /* forward: the table (per) */
    float *dw;         /* backward: the table's gradient */
    const float *dout; /* backward */
    int64_t per, rows;
} nk_pos_args;
NK_FN void nk_pos_fwd(int64_t i, const nk_pos_args *a) { a->out[i] = a->in[i] + a->w[i % a->per]; }
/* index j < per: dw[j] += dy[b, j] over b in order (cpu pos_bwd's order) */
NK_FN void nk_pos_bwd_w(int64_t j, const nk_pos_args *a)
{
    float g = a->dw[j];
    for (int64_t b = 0; b < a->rows; b++)
        g += a->dout[b * a->per + j];
    a->dw[j] = g;
}

/* Mean over T of x (T, cols): forward one index per (b, c), summed in double; backward
 * one index per input element. */
typedef struct nk_seqmean_args {
    float *out;      /* forward: y (b, cols); backward: dx (b, T, cols) accumulated */
    const float *in; /* forward: x (b, T, cols); backward: dy (b, cols) */
    int64_t T, cols;
    float inv_t;
} nk_seqmean_args;
NK_FN void nk_seqmean_fwd(int64_t i, const nk_seqmean_args *a)
{
    int64_t b = i / a->cols, c = i % a->cols;
    const float *x = a->in + b * a->T * a->cols + c;
    double s = 0;
    for (int64_t t = 0; t < a->T; t++)
        s += x[t * a->cols];
    a->out[i] = (float)(s / (double)a->T);
}
NK_FN void nk_seqmean_bwd(int64_t i, const nk_seqmean_args *a)
{
    int64_t c = i % a->cols, b = i / (a->T * a->cols);
    a->out[i] += a->in[b * a->cols + c] * a->inv_t;
}

/* Patchify (C, H, W) -> (H/P * W/P, C*P*P), as cpu patchify_fwd: one index per image
 * element, which maps to exactly one patch element. Forward y[that] = x[i]; backward
 * dx[i] += dy[that]. */
typedef struct nk_patch_args {
    float *out;      /* forward: y; backward: dx (accumulated) */
    const float *in; /* forward: x; backward: dy */
    int64_t C, H, W, P;
} nk_patch_args;
NK_FN int64_t nk_patch_of(int64_t i, const nk_patch_args *a)
{
    int64_t per = a->C * a->H * a->W, b = i / per, r = i % per;
    int64_t c = r / (a->H * a->W), h = (r / a->W) % a->H, w = r % a->W, P = a->P;
    int64_t t = (h / P) * (a->W / P) + w / P, k = (c * P + h % P) * P + w % P;
    return b * per + t * (a->C * P * P) + k;
}
NK_FN void nk_patch_fwd(int64_t i, const nk_patch_args *a) { a->out[nk_patch_of(i, a)] = a->in[i]; }
NK_FN void nk_patch_bwd(int64_t i, const nk_patch_args *a)
{
    a->out[i] += a->in[nk_patch_of(i, a)];
}

#define NK_SEQ_KERNELS(X)           \
    X(slice_fwd, nk_slice_args)     \
    X(slice_bwd, nk_slice_args)     \
    X(emb_check_part, nk_emb_args)  \
    X(emb_check_total, nk_emb_args) \
    X(emb_fwd, nk_emb_args)         \
    X(emb_bwd, nk_emb_args)         \
    X(pos_fwd, nk_pos_args)         \
    X(pos_bwd_w, nk_pos_args)       \
    X(seqmean_fwd, nk_seqmean_args) \
    X(seqmean_bwd, nk_seqmean_args) \
    X(patch_fwd, nk_patch_args)     \
    X(patch_bwd, nk_patch_args)

#endif
