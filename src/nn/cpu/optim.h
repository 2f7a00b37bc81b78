/* optim.h - the CPU backend's optimizer updates (SGD, AdamW) over flat parameter
 * arrays and the two passes clipping needs (sum of squares, scale). */
#ifndef STOKE_NN_CPU_OPTIM_H
#define STOKE_NN_CPU_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

/* ---- SGD, as torch.optim.SGD (single-tensor path, maximize=False) -------------------
 * With g = grad + weight_decay * param:
 *   step 1:  buf = g                                   (if momentum != 0)
 *   later:   buf = momentum * buf + (1 - dampening) * g
 *   nesterov: g = g + momentum * buf;  otherwise g = buf  (if momentum != 0)
 *   param -= lr * g
 * `step` counts updates from 1 (the optimizer's state: 1 on the first call, which only
 * decides whether buf starts as g). */
typedef struct cpu_sgd_config {
    float momentum;     /* 0 disables the buffer */
    float dampening;    /* 0 as in PyTorch's default */
    float weight_decay; /* L2 added to the gradient (coupled) */
    int nesterov;       /* needs momentum > 0 and dampening == 0 */
} cpu_sgd_config;

/* STOKE_ERR_ARG naming the field for negative or non-finite values, or Nesterov
 * without momentum or with dampening (as PyTorch refuses). */
stoke_status cpu_sgd_check(const cpu_sgd_config *c);

/* param (n), grad (n) read only, momentum_buf (n) (unused, may be NULL, when momentum
 * is 0); lr >= 0; step >= 1. The config must have passed cpu_sgd_check. Can't fail. */
void cpu_sgd_step(const cpu_sgd_config *c, double lr, int64_t step, float *param, const float *grad,
                  float *momentum_buf, size_t n);

/* What the same pass does after each block of the update, while it is in cache: the
 * parameter's low-precision copy refreshed (lowp, n values: fp16 if set, else bf16)
 * and the gradient zeroed. Saves two passes over every parameter per step. */
typedef struct cpu_after_update {
    uint16_t *lowp; /* or NULL */
    bool fp16;
    bool zero_grad;
} cpu_after_update;

/* cpu_sgd_step, then `after` (may be NULL); grad is written only to zero it. */
void cpu_sgd_step_then(const cpu_sgd_config *c, double lr, int64_t step, float *param, float *grad,
                       float *momentum_buf, size_t n, const cpu_after_update *after);

/* ---- AdamW, as torch.optim.AdamW (amsgrad=False, maximize=False) --------------------
 *   param *= 1 - lr * weight_decay               (decoupled decay)
 *   m = beta1 m + (1 - beta1) grad;  v = beta2 v + (1 - beta2) grad^2
 *   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The scalar factors are computed in double and rounded to float once, as the Python
 * side of PyTorch does. m and v start at zero; t = step counts updates from 1. */
typedef struct cpu_adamw_config {
    float beta1;        /* 0.9 */
    float beta2;        /* 0.999 */
    float eps;          /* 1e-8, added outside the square root */
    float weight_decay; /* 0.01 */
} cpu_adamw_config;

/* PyTorch's defaults above. Can't fail. */
void cpu_adamw_defaults(cpu_adamw_config *c);

/* STOKE_ERR_ARG naming the field: betas in [0, 1), eps >= 0, weight_decay >= 0. */
stoke_status cpu_adamw_check(const cpu_adamw_config *c);

/* param (n), grad (n) read only, m (n), v (n); lr >= 0; step >= 1. Can't fail. */
void cpu_adamw_step(const cpu_adamw_config *c, double lr, int64_t step, float *param,
                    const float *grad, float *m, float *v, size_t n);

/* ---- the passes of gradient clipping --------------------------------------------- */

/* Sum of squares of x (n) in double, in a fixed order (deterministic whatever the
 * thread count); *finite (may be NULL) is set to whether every value is finite. */
double cpu_sum_squares(const float *x, size_t n, bool *finite);

/* x (n) *= s. Can't fail. */
void cpu_scale(float *x, size_t n, float s);

/* Global-norm clipping itself (the norm, the coefficient, torch's 1e-6) is in
 * stoke_model_step (src/nn/model.c), folded into the loss scale's division so the
 * gradients are multiplied once; the backend only supplies these two passes. The
 * learning-rate schedule is stoke_lr_at (include/stoke/nn.h). */

#endif
