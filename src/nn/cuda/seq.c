/* seq.c - the CUDA backend's sequence ops (k_seq.h): slice, embedding, learned
 * positions, seq_mean, patchify. */
#include "nn/cuda/ops.h"

static int64_t out_n(const nn_exec_args *a) { return a->batch * cuda_elems(&a->node->shape); }
static int64_t in_n(const nn_exec_args *a) { return a->batch * cuda_elems(cuda_in_shape(a, 0)); }

static stoke_status named(stoke_status st, const nn_exec_args *a)
{
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* ---- slice: columns [begin, begin + width) of the last dim ---- */

static nk_slice_args slice_args(const nn_exec_args *a, float *out, const float *in)
{
    const stoke_shape *s = cuda_in_shape(a, 0);
    nk_slice_args k = {out, in, s->dims[s->ndim - 1], a->node->begin, a->node->features};
    return k;
}

stoke_status cuda_slice_fwd(void *ctx, const nn_exec_args *a)
{
    nk_slice_args k = slice_args(a, a->out, a->in[0]);
    return named(CUDA_RUN((cuda_ctx *)ctx, slice_fwd, out_n(a), &k), a);
}

stoke_status cuda_slice_bwd(void *ctx, const nn_exec_args *a)
{
    if (!a->din[0])
        return STOKE_OK;
    nk_slice_args k = slice_args(a, a->din[0], a->dout);
    return named(CUDA_RUN((cuda_ctx *)ctx, slice_bwd, out_n(a), &k), a);
}

/* ---- embedding ---- */

static nk_emb_args emb_args(cuda_ctx *c, const nn_exec_args *a)
{
    nk_emb_args k = {0};
    k.out = a->out;
    k.dtable = a->grad[0];
    k.table = a->param[0];
    k.dout = a->dout;
    k.ids = a->in[0];
    k.partial = c->partial;
    k.flag = cuda_flag_of(c, a->index);
    k.n = in_n(a);
    k.cols = a->node->features;
    k.vocab = a->node->vocab;
    k.stride = CUDA_SUM_STRIDE;
    return k;
}

static stoke_status read_i32(cuda_ctx *c, int32_t *host, const int32_t *dev)
{
    stoke_status st = stoke_cudart_copy_to_host_async(c->rt, host, dev, sizeof *host, c->L.stream);
    return st == STOKE_OK ? stoke_cudart_stream_sync(c->rt, c->L.stream) : st;
}

/* The first bad id read back: the CPU's error, naming the position in the batch's ids
 * (sample-major). */
stoke_status cuda_emb_bad(cuda_ctx *c, const cuda_input_check *k, int32_t flag)
{
    int32_t id = 0;
    stoke_status st = read_i32(c, &id, (const int32_t *)k->data + (flag - 1));
    if (st != STOKE_OK)
        return st;
    return stoke_fail(STOKE_ERR_ARG,
                      "embedding forward: index %d at position %d is outside the table's %d rows",
                      (int)id, (int)(flag - 1), (int)k->cols);
}

/* The ids checked on the device into the node's flag, read after the forward
 * (cuda_forward_check); the lookup skips bad ids meanwhile. */
static stoke_status emb_check(cuda_ctx *c, const nn_exec_args *a, const nk_emb_args *k)
{
    stoke_status st = CUDA_RUN(c, emb_check_part, CUDA_SUM_STRIDE, k);
    if (st == STOKE_OK)
        st = CUDA_RUN(c, emb_check_total, 1, k);
    if (st == STOKE_OK)
        c->checks[a->index] = (cuda_input_check){a->node, k->ids, k->vocab, 0};
    return st;
}

stoke_status cuda_emb_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    stoke_status st = cuda_ctx_checks(c, a->graph->nnodes);
    if (st != STOKE_OK)
        return named(st, a);
    nk_emb_args k = emb_args(c, a);
    st = emb_check(c, a, &k);
    if (st == STOKE_OK)
        st = CUDA_RUN(c, emb_fwd, k.n * k.cols, &k);
    return named(st, a);
}

/* Bad ids were refused by the forward; the kernel skips them rather than trust that. */
stoke_status cuda_emb_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    if (!a->grad[0])
        return STOKE_OK;
    nk_emb_args k = emb_args(c, a);
    return named(CUDA_RUN(c, emb_bwd, k.cols, &k), a);
}

/* ---- learned positions ---- */

stoke_status cuda_pos_fwd(void *ctx, const nn_exec_args *a)
{
    int64_t per = cuda_elems(&a->node->shape);
    nk_pos_args k = {a->out, a->in[0], a->param[0], NULL, NULL, per, a->batch};
    return named(CUDA_RUN((cuda_ctx *)ctx, pos_fwd, out_n(a), &k), a);
}

stoke_status cuda_pos_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    int64_t per = cuda_elems(&a->node->shape);
    stoke_status st = STOKE_OK;
    if (a->grad[0]) {
        nk_pos_args k = {NULL, NULL, NULL, a->grad[0], a->dout, per, a->batch};
        st = CUDA_RUN(c, pos_bwd_w, per, &k);
    }
    if (st == STOKE_OK && a->din[0]) {
        nk_unary_args k = {a->din[0], NULL, a->dout};
        st = CUDA_RUN(c, acc, out_n(a), &k);
    }
    return named(st, a);
}

/* ---- mean over the sequence: (T, C) -> (C) ---- */

static nk_seqmean_args seqmean_args(const nn_exec_args *a, float *out, const float *in)
{
    const stoke_shape *s = cuda_in_shape(a, 0);
    nk_seqmean_args k = {out, in, s->dims[0], s->dims[1], 1.0f / (float)s->dims[0]};
    return k;
}

stoke_status cuda_seqmean_fwd(void *ctx, const nn_exec_args *a)
{
    nk_seqmean_args k = seqmean_args(a, a->out, a->in[0]);
    return named(CUDA_RUN((cuda_ctx *)ctx, seqmean_fwd, out_n(a), &k), a);
}

stoke_status cuda_seqmean_bwd(void *ctx, const nn_exec_args *a)
{
    if (!a->din[0])
        return STOKE_OK;
    nk_seqmean_args k = seqmean_args(a, a->din[0], a->dout);
    return named(CUDA_RUN((cuda_ctx *)ctx, seqmean_bwd, in_n(a), &k), a);
}

/* ---- patchify ---- */

static nk_patch_args patch_args(const nn_exec_args *a, float *out, const float *in)
{
    const stoke_shape *s = cuda_in_shape(a, 0);
    nk_patch_args k = {out, in, s->dims[0], s->dims[1], s->dims[2], a->node->patch};
    return k;
}

stoke_status cuda_patchify_fwd(void *ctx, const nn_exec_args *a)
{
    nk_patch_args k = patch_args(a, a->out, a->in[0]);
    return named(CUDA_RUN((cuda_ctx *)ctx, patch_fwd, in_n(a), &k), a);
}

stoke_status cuda_patchify_bwd(void *ctx, const nn_exec_args *a)
{
    if (!a->din[0])
        return STOKE_OK;
    nk_patch_args k = patch_args(a, a->din[0], a->dout);
    return named(CUDA_RUN((cuda_ctx *)ctx, patch_bwd, in_n(a), &k), a);
}
