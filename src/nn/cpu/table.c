/* table.c - the CPU backend's table (backend_impl.h) and its instances: one context
 * per model (nn/cpu/ctx.h), the shared context-less table for planning, and the
 * process-wide query stoke_nn_precision_native as a function of the machine. */
#include "nn/cpu/ops.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "nn/cpu/dense.h"

/* Reshape never runs: the plan makes its output and gradient alias its input's. */
static stoke_status cpu_op_nop(void *ctx, const nn_exec_args *a)
{
    CPU_CTX_SCOPE(ctx);
    (void)a;
    return STOKE_OK;
}

/* ---- the table ---- */

static bool cpu_supports(void *ctx, stoke_nn_op op, stoke_precision p)
{
    CPU_CTX_SCOPE(ctx);
    if (p == STOKE_PREC_FP32)
        return op >= 0 && op < STOKE_NN_OP_COUNT;
    /* bf16: oneDNN's bf16 matmul and convolution (AVX512-BF16/AMX where present, its
     * own exact emulation on AVX-512 otherwise, ours below AVX-512); fp16: emulated
     * operands; see "low precision operands" in ops.c. Everything else stays fp32. */
    return op == STOKE_NN_LINEAR || op == STOKE_NN_CONV2D;
}

static bool cpu_native(void *ctx, stoke_precision p)
{
    (void)ctx; /* the machine's answer, the same for every context */
    return stoke_nn_precision_native(p);
}

static int cpu_threads(void *ctx)
{
    CPU_CTX_SCOPE(ctx);
    return cpu_ctx_threads(cpu_ctx_current());
}

/* A model's own count, applied by its kernels as they run. */
static void cpu_set_threads_(void *ctx, int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    atomic_store(&((cpu_ctx *)ctx)->threads, n < 1 ? 1 : n);
}

static void cpu_ctx_free_(void *ctx) { cpu_ctx_free(ctx); }

/* The table every instance copies (nn_cpu_backend_new gives it its context). Each
 * entry binds its context to the calling thread while it runs, for the kernels. */
static const nn_backend cpu_backend = {
    .name = "cpu",
    .ctx = NULL,
    .ops =
        {
            [STOKE_NN_INPUT] = {cpu_op_nop, NULL, NULL, NULL},
            [STOKE_NN_LINEAR] = {cpu_op_linear_fwd, cpu_op_linear_bwd, cpu_op_linear_ws, NULL},
            [STOKE_NN_CONV2D] = {cpu_op_conv_fwd, cpu_op_conv_bwd, cpu_op_conv_ws, NULL},
            [STOKE_NN_MAXPOOL2D] = {cpu_op_maxpool_fwd, cpu_op_maxpool_bwd, NULL, NULL},
            [STOKE_NN_AVGPOOL2D] = {cpu_op_avgpool_fwd, cpu_op_avgpool_bwd, NULL, NULL},
            [STOKE_NN_GLOBAL_AVGPOOL] = {cpu_op_gap_fwd, cpu_op_gap_bwd, NULL, NULL},
            [STOKE_NN_BATCHNORM] = {cpu_op_bn_fwd, cpu_op_bn_bwd, cpu_op_input_sized_ws,
                                    cpu_op_bn_saved},
            [STOKE_NN_LAYERNORM] = {cpu_op_ln_fwd, cpu_op_ln_bwd, cpu_op_input_sized_ws,
                                    cpu_op_ln_saved},
            [STOKE_NN_RELU] = {cpu_op_relu_fwd, cpu_op_relu_bwd, NULL, NULL},
            [STOKE_NN_GELU] = {cpu_op_gelu_fwd, cpu_op_gelu_bwd, NULL, NULL},
            [STOKE_NN_TANH] = {cpu_op_tanh_fwd, cpu_op_tanh_bwd, NULL, NULL},
            [STOKE_NN_SIGMOID] = {cpu_op_sigmoid_fwd, cpu_op_sigmoid_bwd, NULL, NULL},
            [STOKE_NN_DROPOUT] = {cpu_op_dropout_fwd, cpu_op_dropout_bwd, NULL, NULL},
            [STOKE_NN_ADD] = {cpu_op_add_fwd, cpu_op_add_bwd, NULL, NULL},
            [STOKE_NN_RESHAPE] = {cpu_op_nop, cpu_op_nop, NULL, NULL},
            [STOKE_NN_EMBEDDING] = {cpu_op_emb_fwd, cpu_op_emb_bwd, NULL, NULL},
            [STOKE_NN_SOFTMAX] = {cpu_op_softmax_fwd, cpu_op_softmax_bwd, NULL, NULL},
            [STOKE_NN_ATTENTION] = {cpu_op_attn_fwd, cpu_op_attn_bwd, cpu_op_attn_ws,
                                    cpu_op_attn_saved},
            [STOKE_NN_PATCHIFY] = {cpu_op_patchify_fwd, cpu_op_patchify_bwd, NULL, NULL},
            [STOKE_NN_POS_EMBED] = {cpu_op_pos_fwd, cpu_op_pos_bwd, NULL, NULL},
            [STOKE_NN_SEQ_MEAN] = {cpu_op_seqmean_fwd, cpu_op_seqmean_bwd, NULL, NULL},
            [STOKE_NN_CROSS_ENTROPY] = {cpu_op_loss_fwd, cpu_op_loss_bwd, NULL, NULL},
            [STOKE_NN_BCE_LOGITS] = {cpu_op_loss_fwd, cpu_op_loss_bwd, NULL, NULL},
            [STOKE_NN_MSE] = {cpu_op_loss_fwd, cpu_op_loss_bwd, NULL, NULL},
            [STOKE_NN_L1] = {cpu_op_loss_fwd, cpu_op_loss_bwd, NULL, NULL},
            [STOKE_NN_ACCURACY] = {cpu_op_accuracy_fwd, NULL, NULL, NULL},
            [STOKE_NN_MAE] = {cpu_op_mae_fwd, NULL, NULL, NULL},
            [STOKE_NN_POLICY_GRADIENT] = {cpu_op_loss_fwd, cpu_op_loss_bwd, NULL, NULL},
            [STOKE_NN_SLICE] = {cpu_op_slice_fwd, cpu_op_slice_bwd, NULL, NULL},
        },
    .supports = cpu_supports,
    .native = cpu_native,
    .fuse = cpu_op_fuse,
    .alloc = cpu_be_alloc,
    .free = cpu_be_free,
    .zero = cpu_be_zero,
    .read = cpu_be_read,
    .write = cpu_be_write,
    .copy = cpu_be_copy,
    .to_lowp = cpu_be_to_lowp,
    .sum_squares = cpu_be_sumsq,
    .scale = cpu_be_scale,
    .sgd = cpu_be_sgd,
    .adamw = cpu_be_adamw,
    .check_optim = cpu_be_check_optim,
    .threads = cpu_threads,
    .set_threads = cpu_set_threads_,
    .ctx_free = cpu_ctx_free_,
};

/* No context: what oneDNN implements on this machine under its ISA caps. */
bool stoke_nn_precision_native(stoke_precision p)
{
    return p == STOKE_PREC_FP32 || cpu_op_bf16_native(p);
}

stoke_status nn_cpu_backend_new(int threads, nn_backend **out)
{
    *out = NULL;
    nn_backend *be = malloc(sizeof *be);
    if (!be)
        return stoke_fail(STOKE_ERR_NOMEM, "cpu backend: out of memory");
    *be = cpu_backend;
    be->ctx = cpu_ctx_new(threads);
    if (!be->ctx) {
        free(be);
        return STOKE_ERR_NOMEM;
    }
    *out = be;
    return STOKE_OK;
}

void nn_backend_free(nn_backend *be)
{
    if (!be)
        return;
    if (be->ctx_free)
        be->ctx_free(be->ctx);
    free(be);
}
