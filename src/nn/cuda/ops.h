/* ops.h - the CUDA backend's ops (backend_impl.h's nn_op_impl entries), by file. Each
 * takes the backend's cuda_ctx as ctx. Internal to src/nn. */
#ifndef STOKE_NN_CUDA_OPS_H
#define STOKE_NN_CUDA_OPS_H

#include "nn/backend_impl.h"
#include "nn/cuda/ctx.h"

/* util.c: shapes (elements of node n's per-sample shape, and of its input k) */
int64_t cuda_elems(const stoke_shape *s);
const stoke_shape *cuda_in_shape(const nn_exec_args *a, int k);
/* The node's name prefixed to the last message, as the CPU backend's ops do. */
stoke_status cuda_layer_fail(stoke_status st, const nn_node *n);

/* dense.c: linear through cuBLASLt (the bias in its epilogue), and the chain linear ->
 * relu fused (the ReLU and its gradient in the epilogues too) */
stoke_status cuda_linear_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_linear_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_linear_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes);
/* cuda_backend.c's fuse entry for chains that start with a linear layer */
stoke_status cuda_fuse_linear(void *ctx, const stoke_graph *g, const int *chain, int n,
                              int64_t batch, stoke_precision p, const nn_fused_impl **out);
/* cuBLAS's column-major C (m x n, fp32, ldc) = op(A) op(B) + beta C with fp32
 * accumulation; A and B both fp32 (TF32 where the context allows) or both of `type`
 * NC_R_16BF / NC_R_16F. Attention's GEMMs (the linear layer's are cuBLASLt's). */
stoke_status cuda_gemm(cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A,
                       int64_t lda, const void *B, int64_t ldb, float beta, float *C, int64_t ldc,
                       int type);
/* cuda_gemm over `batch` matrices at the given element strides. */
stoke_status cuda_gemm_batched(cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k,
                               const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                               int64_t sb, float beta, float *C, int64_t ldc, int64_t sc,
                               int64_t batch, int type);
/* lt.c: matmuls through cuBLASLt, column-major as cuBLAS: D (m x n, fp32, ldc) =
 * alpha op(A) op(B) + beta C, then the epilogue. A key of int64s (no padding: the
 * plans are found by comparing keys' bytes). */
typedef struct cuda_mm {
    int64_t ta, tb, m, n, k, lda, ldb, ldc;
    int64_t type;   /* A and B: NC_R_32F (TF32 where the context has it), NC_R_16BF, NC_R_16F */
    int64_t epi;    /* NC_LT_EPI_* */
    int64_t aux_ld; /* the ReLU mask's leading dimension in bits (its epilogues), else 0 */
} cuda_mm;
typedef struct cuda_mm_ptrs {
    const void *A, *B;
    const float *C;
    float *D;
    void *bias; /* the bias (fp32, m) or its gradient (BGRADA, DRELU_BGRAD: m; BGRADB: n) */
    void *aux;  /* the ReLU mask */
    float alpha, beta;
    void *ws; /* cuBLASLt's workspace: 256-byte aligned */
    size_t ws_size;
} cuda_mm_ptrs;
/* Plans the matmul (descriptors and algorithm, kept in the context); *ws = the bytes of
 * workspace its algorithm needs. */
stoke_status cuda_mm_plan(cuda_ctx *c, const cuda_mm *k, size_t *ws);
/* Queues the matmul (planned now if it was not). */
stoke_status cuda_mm_run(cuda_ctx *c, const cuda_mm *k, const cuda_mm_ptrs *a);

/* x (n fp32) rounded into out (n bf16/fp16 bits, precision p). */
stoke_status cuda_to_lowp(cuda_ctx *c, stoke_precision p, const float *x, uint16_t *out, int64_t n);

/* loss.c: losses and metrics (out[0] = the batch mean) */
stoke_status cuda_loss_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_loss_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_loss_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes);

/* eltwise.c: activations, dropout, add, softmax, slice */
stoke_status cuda_relu_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_relu_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_gelu_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_gelu_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_tanh_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_tanh_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_sigmoid_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_sigmoid_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_dropout_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_dropout_bwd(void *ctx, const nn_exec_args *a);
/* The dropout kernel's args for elements [base, ...) of one 2^32 block, dst and src
 * pointing at element base: the block's key as the CPU backend derives it. */
nk_dropout_args cuda_dropout_block(uint64_t seed, const uint64_t *step, float p, int64_t base,
                                   float *dst, const float *src, int acc);
stoke_status cuda_add_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_add_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_softmax_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_softmax_bwd(void *ctx, const nn_exec_args *a);

/* seq.c: slice, embedding (ids checked on the device), positions, seq_mean, patchify */
stoke_status cuda_slice_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_slice_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_emb_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_emb_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_pos_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_pos_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_seqmean_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_seqmean_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_patchify_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_patchify_bwd(void *ctx, const nn_exec_args *a);

/* norm.c: batch norm (2d over (C, H, W), 1d over (C)) and layer norm */
stoke_status cuda_bn_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_bn_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_bn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                        stoke_precision p, size_t *bytes);
size_t cuda_bn_saved(void *ctx, const stoke_graph *g, const nn_node *n);
stoke_status cuda_ln_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_ln_bwd(void *ctx, const nn_exec_args *a);
size_t cuda_ln_saved(void *ctx, const stoke_graph *g, const nn_node *n);

/* attn.c: multi-head self-attention (projections and per-head products on cuBLAS) */
stoke_status cuda_attn_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_attn_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_attn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes);
size_t cuda_attn_saved(void *ctx, const stoke_graph *g, const nn_node *n);

/* conv.c: conv2d through cuDNN, the bias as kernels */
stoke_status cuda_conv_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_conv_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_conv_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes);

/* The fused conv2d -> relu -> max_pool2d chain's convolution (conv.c), on plans of
 * its own: forward is cudnnConvolutionBiasActivationForward into y (fp32, the conv's
 * output shape); backward reads dy (fp32, the ReLU's masked gradient) instead of
 * a->dout. Both use a->ws/ws_size from its start: the chain passes its convolution's
 * part there. */
stoke_status cuda_conv_relu_fwd(cuda_ctx *c, const nn_exec_args *a, float *y);
stoke_status cuda_conv_bwd_from(cuda_ctx *c, const nn_exec_args *a, const float *dy);
stoke_status cuda_conv_relu_ws(cuda_ctx *c, const stoke_graph *g, const nn_node *n, int64_t batch,
                               stoke_precision p, size_t *bytes);

/* pool.c: max, average (padding counted) and global average pooling through cuDNN */
stoke_status cuda_pool_fwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_pool_bwd(void *ctx, const nn_exec_args *a);
stoke_status cuda_pool_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes);
/* Pool node n's plan at this batch (made on first use) and its two directions over the
 * node's input x and output y: forward writes y, backward dx = dx_grad + beta dx. */
struct cuda_pool_plan;
stoke_status cuda_pool_plan_for(cuda_ctx *c, const stoke_graph *g, const nn_node *n, int64_t batch,
                                const struct cuda_pool_plan **out);
stoke_status cuda_pool_forward(cuda_ctx *c, const struct cuda_pool_plan *p, const float *x,
                               float *y);
stoke_status cuda_pool_backward(cuda_ctx *c, const struct cuda_pool_plan *p, const float *y,
                                const float *dy, const float *x, float beta, float *dx);

/* conv_block.c: cuda_backend.c's fuse entry for chains that start with a convolution
 * (conv2d -> relu -> max_pool2d) */
stoke_status cuda_fuse_conv(void *ctx, const stoke_graph *g, const int *chain, int n, int64_t batch,
                            stoke_precision p, const nn_fused_impl **out);

#endif
