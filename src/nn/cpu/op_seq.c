/* op_seq.c - the CPU backend's sequence ops: embedding and attention on their kernels,
 * and the glue no library offers in this layout (patchify, position table, mean over
 * tokens, slice). */
#include "nn/cpu/ops.h"

#include <string.h>

#include "nn/cpu/attn.h"
#include "nn/cpu/eltwise.h"

/* ---- embedding and attention ---- */

stoke_status cpu_op_emb_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N = (int)(a->batch * elems(in_shape(a, 0)));
    stoke_status st = cpu_embedding_forward(a->out, a->in[0], a->param[0], N, (int)a->node->vocab,
                                            (int)a->node->features);
    if (st != STOKE_OK)
        return cpu_op_layer_fail(st, a->node);
    return STOKE_OK;
}

stoke_status cpu_op_emb_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int N = (int)(a->batch * elems(in_shape(a, 0)));
    return cpu_embedding_backward(a->grad[0], a->dout, a->in[0], N, (int)a->node->vocab,
                                  (int)a->node->features);
}

size_t cpu_op_attn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    CPU_CTX_SCOPE(ctx);
    (void)g;
    return cpu_attention_saved_floats(1, (int)n->shape.dims[0], (int)n->shape.dims[1], n->heads) *
           sizeof(float);
}

stoke_status cpu_op_attn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes)
{
    CPU_CTX_SCOPE(ctx);
    (void)g;
    (void)p;
    int T = (int)n->shape.dims[0], C = (int)n->shape.dims[1];
    /* The projections' own scratch (oneDNN's, held by the kernel like linear's) is
     * counted too, so the plan's total stays an upper bound of what training uses. */
    size_t kernel = 0;
    stoke_status st = cpu_attention_prepare((int)batch, T, C, n->heads, &kernel);
    if (st != STOKE_OK)
        return st;
    /* + an input-gradient sink when the attention reads data directly */
    *bytes = align_up(kernel) + align_up(cpu_attention_workspace((int)batch, T, C, n->heads)) +
             align_up((size_t)batch * T * C * sizeof(float));
    return STOKE_OK;
}

stoke_status cpu_op_attn_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const nn_node *n = a->node;
    return cpu_attention_forward(a->out, a->saved, a->in[0], a->param[0], a->param[1], a->param[2],
                                 a->param[3], (int)a->batch, (int)n->shape.dims[0],
                                 (int)n->shape.dims[1], n->heads, 0);
}

stoke_status cpu_op_attn_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const nn_node *n = a->node;
    int T = (int)n->shape.dims[0], C = (int)n->shape.dims[1];
    size_t kws = align_up(cpu_attention_workspace((int)a->batch, T, C, n->heads));
    float *din = a->din[0];
    if (!din) {
        din = (float *)((char *)a->ws + kws);
        memset(din, 0, (size_t)a->batch * T * C * sizeof(float));
    }
    return cpu_attention_backward(din, a->grad[0], a->grad[1], a->grad[2], a->grad[3], a->dout,
                                  a->in[0], a->param[0], a->param[2], a->saved, (int)a->batch, T, C,
                                  n->heads, 0, a->ws, kws);
}

/* ---- glue ops, written here because they are plain copies/sums that no library
 * offers in this layout ---- */

/* (C, H, W) -> (H/P * W/P, C*P*P), patch (ph, pw) row-major, vector (c, py, px): the
 * layout of a Conv2d(kernel=stride=P) weight, so a following linear equals ViT's
 * patch embedding. */
static void patch_index(const nn_exec_args *a, int64_t *C, int64_t *H, int64_t *W, int *P)
{
    const stoke_shape *in = in_shape(a, 0);
    *C = in->dims[0];
    *H = in->dims[1];
    *W = in->dims[2];
    *P = a->node->patch;
}

stoke_status cpu_op_patchify_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    int64_t C, H, W;
    int P;
    patch_index(a, &C, &H, &W, &P);
    int64_t NW = W / P, per = C * H * W;
    const float *x = a->in[0];
    float *y = a->out;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    int64_t t = (h / P) * NW + w / P;
                    int64_t k = (c * P + h % P) * P + w % P;
                    y[b * per + t * (C * P * P) + k] = x[b * per + (c * H + h) * W + w];
                }
    return STOKE_OK;
}

stoke_status cpu_op_patchify_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    int64_t C, H, W;
    int P;
    patch_index(a, &C, &H, &W, &P);
    int64_t NW = W / P, per = C * H * W;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    int64_t t = (h / P) * NW + w / P;
                    int64_t k = (c * P + h % P) * P + w % P;
                    a->din[0][b * per + (c * H + h) * W + w] +=
                        a->dout[b * per + t * (C * P * P) + k];
                }
    return STOKE_OK;
}

stoke_status cpu_op_pos_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t per = (size_t)elems(&a->node->shape);
    for (int64_t b = 0; b < a->batch; b++)
        cpu_residual_forward(a->out + b * per, (const float *)a->in[0] + b * per, a->param[0], per);
    return STOKE_OK;
}

stoke_status cpu_op_pos_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    size_t per = (size_t)elems(&a->node->shape);
    for (int64_t b = 0; b < a->batch; b++) { /* in batch order: deterministic */
        const float *dy = a->dout + b * per;
        for (size_t i = 0; i < per; i++)
            a->grad[0][i] += dy[i];
        if (a->din[0])
            for (size_t i = 0; i < per; i++)
                a->din[0][b * per + i] += dy[i];
    }
    return STOKE_OK;
}

stoke_status cpu_op_seqmean_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    int64_t T = in->dims[0], C = in->dims[1];
    for (int64_t b = 0; b < a->batch; b++) {
        const float *x = (const float *)a->in[0] + b * T * C;
        float *y = a->out + b * C;
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++)
                s += x[t * C + c];
            y[c] = (float)(s / (double)T);
        }
    }
    return STOKE_OK;
}

stoke_status cpu_op_seqmean_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    const stoke_shape *in = in_shape(a, 0);
    int64_t T = in->dims[0], C = in->dims[1];
    float inv = 1.0f / (float)T;
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++)
                a->din[0][(b * T + t) * C + c] += a->dout[b * C + c] * inv;
    return STOKE_OK;
}

/* ---- slice: columns [begin, begin + width) of the last dim ---- */

stoke_status cpu_op_slice_fwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    const stoke_shape *in = in_shape(a, 0);
    int64_t C = in->dims[in->ndim - 1], W = a->node->features, off = a->node->begin;
    int64_t rows = a->batch * (elems(in) / C);
    const float *x = a->in[0];
    for (int64_t r = 0; r < rows; r++)
        memcpy(a->out + r * W, x + r * C + off, (size_t)W * sizeof(float));
    return STOKE_OK;
}

stoke_status cpu_op_slice_bwd(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    if (!a->din[0])
        return STOKE_OK;
    const stoke_shape *in = in_shape(a, 0);
    int64_t C = in->dims[in->ndim - 1], W = a->node->features, off = a->node->begin;
    int64_t rows = a->batch * (elems(in) / C);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < W; j++)
            a->din[0][r * C + off + j] += a->dout[r * W + j];
    return STOKE_OK;
}
