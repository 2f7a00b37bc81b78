/* ops.c - what the CPU backend's op adapters share: a layer's name on a kernel's
 * error, the int-size limit's message, and the low-precision operands (bf16 bits for
 * oneDNN's bf16 kernels, else values rounded to bf16 / fp16 for the fp32 kernels). */
#include "nn/cpu/ops.h"

#include <stdio.h>
#include <string.h>

#include "nn/cpu/dnnl_util.h"
#include "nn/cpu/eltwise.h"
#include "core/precision.h"

stoke_status cpu_op_layer_fail(stoke_status st, const nn_node *n)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    return stoke_fail(st, "%s: %s", n->name, msg);
}

/* Sizes reach the kernels as int: the plan refuses graphs where they would not fit,
 * naming the quantity past the limit and the batch this layer takes, since the batch
 * is what the user can change. */
stoke_status cpu_op_too_big(const nn_node *n, const char *what, int64_t batch, int64_t per_sample)
{
    if (per_sample > INT32_MAX)
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: its %s has %lld values a sample, more than the CPU kernels' int "
                          "limit (2147483647) even at batch 1",
                          n->name, what, (long long)per_sample);
    return stoke_fail(STOKE_ERR_ARG,
                      "%s: its %s at batch %lld has %.0f values (%lld a sample), more than the "
                      "CPU kernels' int limit (2147483647): this layer takes a batch of at most "
                      "%lld",
                      n->name, what, (long long)batch, (double)batch * (double)per_sample,
                      (long long)per_sample, (long long)(INT32_MAX / per_sample));
}

/* ---- low precision operands ----
 * bf16 where oneDNN has bf16 kernels on this CPU (AVX-512 and up: dnnl_util_bf16_kernels):
 * the kernels take bf16 bits; activations are converted into the workspace per call.
 * Otherwise the precision is emulated exactly: operands are rounded to bf16 or fp16
 * (values representable in it, stored as fp32) and the fp32 kernels run on them with
 * fp32 accumulation, the arithmetic of the bf16 kernels up to the order of sums. fp16
 * is always emulated (the CPU kernels have no fp16 path); bf16 on CPUs without
 * AVX-512, or under an ISA cap below it, so that `--precision bf16` trains the same
 * way on every CPU. */

/* Whether precision p runs on oneDNN's bf16 kernels (else fp32 or emulated). */
bool cpu_op_bf16_native(stoke_precision p)
{
    return p == STOKE_PREC_BF16 && dnnl_util_bf16_kernels();
}

/* Converts x (n) into ws at *off as the kernels' operand for the args' precision: bf16
 * bits, or fp32 rounded to bf16 / fp16. Returns the operand. */
const void *cpu_op_operand(const nn_exec_args *a, const float *x, size_t n, size_t *off)
{
    char *dst = (char *)a->ws + *off;
    if (cpu_op_bf16_native(a->precision)) {
        cpu_op_lowp_pass(STOKE_PREC_BF16, x, (uint16_t *)dst, n);
        *off += align_up(n * sizeof(uint16_t));
    } else {
        memcpy(dst, x, n * sizeof(float));
        (a->precision == STOKE_PREC_BF16 ? cpu_round_bf16 : cpu_round_f16)((float *)dst, n);
        *off += align_up(n * sizeof(float));
    }
    return dst;
}

/* The bf16 / fp16 weight copy widened to fp32 in the workspace (emulation). */
const float *cpu_op_weight_wide(const nn_exec_args *a, int i, size_t n, size_t *off)
{
    float *dst = (float *)((char *)a->ws + *off);
    if (a->precision == STOKE_PREC_BF16)
        cpu_bf16_to_f32(a->param_lp[i], dst, n);
    else
        cpu_f16_to_f32(a->param_lp[i], dst, n);
    *off += align_up(n * sizeof(float));
    return dst;
}

/* Workspace of the low-precision operands of one matmul-like op. */
size_t cpu_op_operand_bytes(stoke_precision p, size_t n)
{
    if (cpu_op_bf16_native(p))
        return align_up(n * sizeof(uint16_t));
    if (p != STOKE_PREC_FP32)
        return align_up(n * sizeof(float));
    return 0;
}

/* Workspace of the widened weight copy (emulated precisions). */
size_t cpu_op_wide_bytes(stoke_precision p, size_t n)
{
    return p != STOKE_PREC_FP32 && !cpu_op_bf16_native(p) ? align_up(n * sizeof(float)) : 0;
}
