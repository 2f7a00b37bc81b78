/* step.c - the CPU backend's optimizer-step entries: low-precision weight copies, the
 * gradients' sums of squares, scaling, SGD and AdamW, and the options' check. */
#include "nn/cpu/ops.h"

#include <math.h>
#include <stdlib.h>

#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"
#include "nn/cpu/optim.h"
#include "core/precision.h"

/* Element-wise passes over large arrays run in fixed blocks over the compute threads:
 * on 2 cores a single-threaded pass leaves the other core spinning in OpenMP's barrier
 * (measured: a fifth of the MLP's step). Results do not depend on the thread count. */
#define PASS_BLK ((size_t)1 << 16)

void cpu_op_lowp_pass(stoke_precision p, const float *in, uint16_t *out, size_t n)
{
    if (n < 2 * PASS_BLK) {
        (p == STOKE_PREC_BF16 ? cpu_f32_to_bf16 : cpu_f32_to_f16)(in, out, n);
        return;
    }
    cpu_threads_apply();
    long nblk = (long)((n + PASS_BLK - 1) / PASS_BLK);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * PASS_BLK, m = n - o < PASS_BLK ? n - o : PASS_BLK;
        (p == STOKE_PREC_BF16 ? cpu_f32_to_bf16 : cpu_f32_to_f16)(in + o, out + o, m);
    }
}

void cpu_be_to_lowp(void *ctx, stoke_precision p, const float *in, uint16_t *out, size_t n)
{
    CPU_CTX_SCOPE(ctx);
    cpu_op_lowp_pass(p, in, out, n);
}

/* Blocks' sums of squares added in block order: the same double for any thread
 * count. */
static double sumsq_one(const float *x, size_t n, bool *finite)
{
    if (n < 2 * PASS_BLK)
        return cpu_sum_squares(x, n, finite);
    long nblk = (long)((n + PASS_BLK - 1) / PASS_BLK);
    double *part = malloc((size_t)nblk * sizeof *part);
    if (!part)
        return cpu_sum_squares(x, n, finite);
    cpu_threads_apply();
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * PASS_BLK;
        part[k] = cpu_sum_squares(x + o, n - o < PASS_BLK ? n - o : PASS_BLK, NULL);
    }
    double total = 0;
    for (long k = 0; k < nblk; k++)
        total += part[k];
    free(part);
    if (finite)
        *finite = isfinite(total);
    return total;
}

void cpu_be_sumsq(void *ctx, const float *const *x, const size_t *n, int count, double *out)
{
    CPU_CTX_SCOPE(ctx);
    for (int k = 0; k < count; k++)
        out[k] = sumsq_one(x[k], n[k], NULL);
}

void cpu_be_scale(void *ctx, float *x, size_t n, float s)
{
    CPU_CTX_SCOPE(ctx);
    cpu_scale(x, n, s);
}

void cpu_be_sgd(void *ctx, float *w, float *g, float *mom, size_t n, float lr, int64_t t,
                const stoke_optim *o, uint16_t *w_lp, stoke_precision lp)
{
    CPU_CTX_SCOPE(ctx);
    cpu_sgd_config c = {
        .momentum = o->momentum, .weight_decay = o->weight_decay, .nesterov = o->nesterov};
    cpu_after_update after = {.lowp = w_lp, .fp16 = lp == STOKE_PREC_FP16, .zero_grad = true};
    cpu_sgd_step_then(&c, lr, t, w, g, mom, n, &after);
}

void cpu_be_adamw(void *ctx, float *w, const float *g, float *m, float *v, size_t n, float lr,
                  int64_t t, const stoke_optim *o)
{
    CPU_CTX_SCOPE(ctx);
    cpu_adamw_config c = {
        .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .weight_decay = o->weight_decay};
    cpu_adamw_step(&c, lr, t, w, g, m, v, n);
}

stoke_status cpu_be_check_optim(void *ctx, const stoke_optim *o)
{
    CPU_CTX_SCOPE(ctx);
    return nn_optim_check(o);
}

stoke_status nn_optim_check(const stoke_optim *o)
{
    if (o->kind == STOKE_SGD) {
        cpu_sgd_config c = {
            .momentum = o->momentum, .weight_decay = o->weight_decay, .nesterov = o->nesterov};
        return cpu_sgd_check(&c);
    }
    cpu_adamw_config c = {
        .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps, .weight_decay = o->weight_decay};
    return cpu_adamw_check(&c);
}
