/* optim.h - the CPU backend's optimizer updates (SGD, AdamW) over flat parameter
 * arrays, global-norm gradient clipping and learning-rate schedules. */
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
void cpu_sgd_step(const cpu_sgd_config *c, double lr, int64_t step, float *param,
                  const float *grad, float *momentum_buf, size_t n);

/* What the same pass does after each block of the update, while it is in cache: the
 * parameter's low-precision copy refreshed (lowp, n values: fp16 if set, else bf16)
 * and the gradient zeroed. Saves two passes over every parameter per step. */
typedef struct cpu_after_update {
    uint16_t *lowp; /* or NULL */
    bool fp16;
    bool zero_grad;
} cpu_after_update;

/* cpu_sgd_step, then `after` (may be NULL); grad is written only to zero it. */
void cpu_sgd_step_then(const cpu_sgd_config *c, double lr, int64_t step, float *param,
                       float *grad, float *momentum_buf, size_t n,
                       const cpu_after_update *after);

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

/* ---- gradient clipping by global norm (as torch.nn.utils.clip_grad_norm_, p = 2) ----
 * grads[a] has sizes[a] floats, a < count. */

/* Sum of squares of x (n) in double, in a fixed order (deterministic whatever the
 * thread count); *finite (may be NULL) is set to whether every value is finite. */
double cpu_sum_squares(const float *x, size_t n, bool *finite);

/* x (n) *= s. Can't fail. */
void cpu_scale(float *x, size_t n, float s);

/* The L2 norm of all the arrays together, summed in double in a fixed order
 * (deterministic whatever the thread count). Can't fail. */
double cpu_global_norm(const float *const *grads, const size_t *sizes, int count);

/* Computes the global norm and, when it exceeds max_norm, multiplies every gradient by
 * max_norm / (norm + 1e-6) (rounded to float, as PyTorch). Returns the norm before
 * clipping. If the norm is inf or NaN the gradients are left alone and that value is
 * returned, so the caller can skip the step (PyTorch would fill them with NaN).
 * max_norm > 0. Can't fail. */
double cpu_clip_grad_norm(float *const *grads, const size_t *sizes, int count,
                          double max_norm);

/* ---- learning-rate schedules: pure functions of the step ----------------------------
 * `step` counts optimizer updates already taken (0 for the first update), i.e. the lr
 * of PyTorch's scheduler after `step` calls of scheduler.step(). With a warm-up of W
 * steps:
 *   step < W:  lr = base_lr * (f + (1 - f) * step / W)       (f = warmup_start_factor)
 *   step >= W: lr = the main schedule at step - W,
 * which is torch SequentialLR([LinearLR(start_factor=f, total_iters=W), main],
 * milestones=[W]). Main schedules at s = step - W:
 *   CONSTANT: base_lr
 *   STEP:     base_lr * gamma^floor(s / step_size)                       (StepLR)
 *   COSINE:   min_lr + (base_lr - min_lr) (1 + cos(pi s / T)) / 2 with T = total_steps
 *             - W, and min_lr once s >= T            (CosineAnnealingLR, T_max = T) */
typedef enum cpu_lr_kind { CPU_LR_CONSTANT = 0, CPU_LR_STEP, CPU_LR_COSINE } cpu_lr_kind;

typedef struct cpu_lr_schedule {
    cpu_lr_kind kind;
    double base_lr;
    int64_t step_size;          /* STEP: updates between decays */
    double gamma;               /* STEP: decay factor */
    int64_t total_steps;        /* COSINE: updates in the whole run, warm-up included */
    double min_lr;              /* COSINE: eta_min */
    int64_t warmup_steps;       /* 0: no warm-up */
    double warmup_start_factor; /* lr factor at step 0 of the warm-up, in (0, 1] */
} cpu_lr_schedule;

/* STOKE_ERR_ARG naming the field (base_lr >= 0, step_size >= 1, gamma > 0,
 * total_steps > warmup_steps for cosine, 0 <= min_lr, warm-up factor in (0, 1]). */
stoke_status cpu_lr_check(const cpu_lr_schedule *s);

/* The learning rate for update number `step` (>= 0). Can't fail. */
double cpu_lr_at(const cpu_lr_schedule *s, int64_t step);

#endif
