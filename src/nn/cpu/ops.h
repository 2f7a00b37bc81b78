/* ops.h - the CPU backend's entries (backend_impl.h's nn_backend), by file, and what
 * their adapters share. Each entry takes the model's cpu_ctx as ctx (NULL: the calling
 * thread's own) and binds it for the kernels while it runs (CPU_CTX_SCOPE). Internal
 * to src/nn/cpu. */
#ifndef STOKE_NN_CPU_OPS_H
#define STOKE_NN_CPU_OPS_H

#include "nn/backend_impl.h"
#include "nn/cpu/ctx.h"

/* Workspace regions and allocations are cut at this alignment (AVX-512 lines). */
#define CPU_OP_ALIGN 64

static inline size_t align_up(size_t n)
{
    return (n + CPU_OP_ALIGN - 1) & ~(size_t)(CPU_OP_ALIGN - 1);
}

static inline const stoke_shape *in_shape(const nn_exec_args *a, int i)
{
    return &a->graph->nodes[a->node->in[i]].shape;
}

static inline int64_t elems(const stoke_shape *s) { return stoke_shape_elems(s); }

/* Whether batch x per_sample is past the kernels' int (without overflowing first: the
 * batch search plans batches up to 2^40). */
static inline bool past_int(int64_t batch, int64_t per_sample)
{
    return per_sample > 0 && batch > INT32_MAX / per_sample;
}

/* Whether the op runs in a low precision (its weights have a bf16 / fp16 copy). */
static inline bool lowp(const nn_exec_args *a) { return a->param_lp[0] != NULL; }

/* ops.c: the layer's name prefixed to the kernel's message (copied first: stoke_fail
 * writes the buffer stoke_last_error reads) */
stoke_status cpu_op_layer_fail(stoke_status st, const nn_node *n);
/* STOKE_ERR_ARG naming the quantity past the kernels' int and the batch the layer takes */
stoke_status cpu_op_too_big(const nn_node *n, const char *what, int64_t batch, int64_t per_sample);
/* Whether precision p runs on oneDNN's bf16 kernels (else fp32 or emulated). */
bool cpu_op_bf16_native(stoke_precision p);
/* x (n floats) converted into the workspace at *off (advanced) as the kernels' operand
 * for the args' precision: bf16 bits, or fp32 rounded to bf16 / fp16. */
const void *cpu_op_operand(const nn_exec_args *a, const float *x, size_t n, size_t *off);
/* Weight i's bf16 / fp16 copy widened to fp32 in the workspace at *off (emulation). */
const float *cpu_op_weight_wide(const nn_exec_args *a, int i, size_t n, size_t *off);
/* The workspace bytes of those two: one operand of n values; one widened weight. */
size_t cpu_op_operand_bytes(stoke_precision p, size_t n);
size_t cpu_op_wide_bytes(stoke_precision p, size_t n);

/* op_matmul.c: linear and conv2d, and the fuse entry (linear -> relu, conv2d -> relu
 * -> max_pool2d) */
stoke_status cpu_op_linear_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                              stoke_precision p, size_t *bytes);
stoke_status cpu_op_linear_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_linear_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_conv_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes);
stoke_status cpu_op_conv_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_conv_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_fuse(void *ctx, const stoke_graph *g, const int *chain, int n, int64_t batch,
                         stoke_precision p, const nn_fused_impl **out);

/* op_pool_norm.c: pooling, batch and layer norm */
stoke_status cpu_op_maxpool_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_maxpool_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_avgpool_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_avgpool_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_gap_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_gap_bwd(void *ctx, const nn_exec_args *a);
size_t cpu_op_bn_saved(void *ctx, const stoke_graph *g, const nn_node *n);
stoke_status cpu_op_bn_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_bn_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_input_sized_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                                   stoke_precision p, size_t *bytes);
size_t cpu_op_ln_saved(void *ctx, const stoke_graph *g, const nn_node *n);
stoke_status cpu_op_ln_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_ln_bwd(void *ctx, const nn_exec_args *a);

/* op_eltwise.c: activations, dropout, residual add, softmax */
stoke_status cpu_op_relu_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_relu_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_gelu_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_gelu_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_tanh_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_tanh_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_sigmoid_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_sigmoid_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_dropout_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_dropout_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_add_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_add_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_softmax_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_softmax_bwd(void *ctx, const nn_exec_args *a);

/* op_seq.c: embedding, attention and the sequence glue */
stoke_status cpu_op_emb_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_emb_bwd(void *ctx, const nn_exec_args *a);
size_t cpu_op_attn_saved(void *ctx, const stoke_graph *g, const nn_node *n);
stoke_status cpu_op_attn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes);
stoke_status cpu_op_attn_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_attn_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_patchify_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_patchify_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_pos_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_pos_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_seqmean_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_seqmean_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_slice_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_slice_bwd(void *ctx, const nn_exec_args *a);

/* op_loss.c: losses and metrics */
stoke_status cpu_op_loss_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_loss_bwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_accuracy_fwd(void *ctx, const nn_exec_args *a);
stoke_status cpu_op_mae_fwd(void *ctx, const nn_exec_args *a);

/* memory.c: the memory entries */
void *cpu_be_alloc(void *ctx, size_t bytes);
void cpu_be_free(void *ctx, void *p);
void cpu_be_zero(void *ctx, void *p, size_t bytes);
void cpu_be_read(void *ctx, void *host, const void *dev, size_t bytes);
void cpu_be_write(void *ctx, void *dev, const void *host, size_t bytes);
void cpu_be_copy(void *ctx, void *dst, const void *src, size_t bytes);

/* step.c: the optimizer step's entries; cpu_op_lowp_pass is to_lowp's conversion
 * with the caller's binding (for operands, inside another entry) */
void cpu_op_lowp_pass(stoke_precision p, const float *in, uint16_t *out, size_t n);
void cpu_be_to_lowp(void *ctx, stoke_precision p, const float *in, uint16_t *out, size_t n);
void cpu_be_sumsq(void *ctx, const float *const *x, const size_t *n, int count, double *out);
void cpu_be_scale(void *ctx, float *x, size_t n, float s);
void cpu_be_sgd(void *ctx, float *w, float *g, float *mom, size_t n, float lr, int64_t t,
                const stoke_optim *o, uint16_t *w_lp, stoke_precision lp);
void cpu_be_adamw(void *ctx, float *w, const float *g, float *m, float *v, size_t n, float lr,
                  int64_t t, const stoke_optim *o);
stoke_status cpu_be_check_optim(void *ctx, const stoke_optim *o);

#endif
