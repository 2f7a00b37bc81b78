/* conv_block.c - the CUDA backend's fused conv2d -> relu -> max_pool2d chain, where
 * the CPU backend fuses it (src/nn/cpu/op_matmul.c's conv block: a non-overlapping,
 * unpadded max-pool after a ReLU after a convolution). Forward: the convolution, its
 * bias and the ReLU in one cudnnConvolutionBiasActivationForward (conv.c), then
 * cudnnPoolingForward; backward: cudnnPoolingBackward into the workspace, the ReLU's
 * mask from the saved output (k_pool.h), the convolution's backward from there.
 *
 * Fused at every precision: the GPU's convolution has one path for all three (conv.c),
 * where the CPU emulates fp16 and leaves it unfused.
 *
 * Saved state: the conv+relu output, 4 bytes per element of the convolution's output
 * (the CPU's chain keeps a byte per pooled element, its window's argmax). cuDNN's legacy
 * pooling backward takes the pooling's input itself, not indices, and the ReLU's mask
 * is read from the same values; the chain still drops the conv's and the ReLU's
 * separate outputs and their two gradients the unfused ops would keep. */
#include "nn/cuda/ops.h"

static const nn_node *node_at(const stoke_graph *g, const int *chain, int k)
{
    return &g->nodes[chain[k]];
}

/* the convolution's output elements per sample, which the saved state holds */
static int64_t conv_elems(const stoke_graph *g, const int *chain)
{
    return cuda_elems(&node_at(g, chain, 0)->shape);
}

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* the masked gradient, then the convolution's workspace */
static size_t dz_bytes(const stoke_graph *g, const int *chain, int64_t batch)
{
    return align256((size_t)batch * (size_t)conv_elems(g, chain) * sizeof(float));
}

static stoke_status block_ws(void *ctx, const stoke_graph *g, const int *chain, int n,
                             int64_t batch, stoke_precision p, size_t *bytes)
{
    (void)n;
    const struct cuda_pool_plan *pool = NULL;
    size_t conv = 0;
    stoke_status st = cuda_conv_relu_ws(ctx, g, node_at(g, chain, 0), batch, p, &conv);
    if (st == STOKE_OK)
        st = cuda_pool_plan_for(ctx, g, node_at(g, chain, 2), batch, &pool);
    *bytes = dz_bytes(g, chain, batch) + conv;
    return st;
}

static size_t block_saved(void *ctx, const stoke_graph *g, const int *chain, int n)
{
    (void)ctx;
    (void)n;
    return (size_t)conv_elems(g, chain) * sizeof(float);
}

static stoke_status block_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    float *y = a->saved;
    const struct cuda_pool_plan *pool = NULL;
    stoke_status st = cuda_conv_relu_fwd(c, a, y);
    if (st == STOKE_OK)
        st = cuda_pool_plan_for(c, a->graph, node_at(a->graph, a->chain, 2), a->batch, &pool);
    if (st == STOKE_OK)
        st = cuda_pool_forward(c, pool, y, a->out);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

static stoke_status block_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    const float *y = a->saved;
    size_t off = dz_bytes(a->graph, a->chain, a->batch);
    if (a->ws_size < off)
        return cuda_layer_fail(stoke_fail(STOKE_ERR_ARG,
                                          "a workspace of %zu bytes, the chain "
                                          "needs more than %zu",
                                          a->ws_size, off),
                               a->node);
    float *dz = a->ws;
    const struct cuda_pool_plan *pool = NULL;
    stoke_status st =
        cuda_pool_plan_for(c, a->graph, node_at(a->graph, a->chain, 2), a->batch, &pool);
    if (st == STOKE_OK)
        st = cuda_pool_backward(c, pool, a->out, a->dout, y, 0.0f, dz);
    if (st == STOKE_OK) {
        nk_relu_mask_args m = {dz, y};
        st = CUDA_RUN(c, relu_mask, a->batch * conv_elems(a->graph, a->chain), &m);
    }
    if (st == STOKE_OK) {
        nn_exec_args b = *a;
        b.ws = (char *)a->ws + off;
        b.ws_size = a->ws_size - off;
        st = cuda_conv_bwd_from(c, &b, dz);
    }
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

static const nn_fused_impl conv_block = {"conv2d+relu+max_pool2d", block_fwd, block_bwd, block_ws,
                                         block_saved};

stoke_status cuda_fuse_conv(void *ctx, const stoke_graph *g, const int *chain, int n, int64_t batch,
                       stoke_precision p, const nn_fused_impl **out)
{
    (void)ctx;
    (void)batch;
    (void)p;
    *out = NULL;
    if (n != 3)
        return STOKE_OK;
    const nn_node *cv = node_at(g, chain, 0), *r = node_at(g, chain, 1), *m = node_at(g, chain, 2);
    if (cv->op == STOKE_NN_CONV2D && r->op == STOKE_NN_RELU && m->op == STOKE_NN_MAXPOOL2D &&
        m->stride == m->kernel && m->padding == 0)
        *out = &conv_block;
    return STOKE_OK;
}
