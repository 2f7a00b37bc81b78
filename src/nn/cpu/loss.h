/* loss.h - the CPU backend's losses with their gradients, and the metrics (accuracy,
 * MAE, streaming epoch averages). */
#ifndef STOKE_NN_CPU_LOSS_H
#define STOKE_NN_CPU_LOSS_H

#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

/* Every loss below returns the mean loss over the batch in *loss and, when dinp is not
 * NULL, ACCUMULATES (as every backward kernel: a tensor feeding several losses gets
 * their sum; the executor zeroes activation grads before the backward pass)
 *     dinp += grad_scale * d(mean loss) / d(inp).
 * grad_scale folds in whatever multiplies the loss before backward: the fp16 loss
 * scale and 1/accum for gradient accumulation, e.g. loss_scale / accum_steps; pass 1
 * for the plain gradient. *loss is never scaled. Sums are taken in double, serially,
 * so results are deterministic. dinp may be NULL (evaluation). Sizes are positive. */

/* Cross-entropy over logits, as torch.nn.CrossEntropyLoss(label_smoothing=eps),
 * reduction mean:
 *   logits (B, K), targets (B) int32 class indices in [0, K), dlogits (B, K) or NULL.
 *   loss_b = -(1 - eps) log p[b, t_b] - (eps / K) sum_k log p[b, k],  p = softmax,
 *   dlogits[b, k] += grad_scale / B * (p[b, k] - (1 - eps) [k == t_b] - eps / K).
 * Uses log-sum-exp, so any finite logits are safe. eps in [0, 1].
 * Fails with STOKE_ERR_ARG naming the sample when a target is outside [0, K), or when
 * B, K or eps are invalid; nothing is written then. */
stoke_status cpu_cross_entropy(const float *logits, const int32_t *targets, int B, int K,
                               float label_smoothing, float grad_scale, float *loss,
                               float *dlogits);

/* Binary cross-entropy with logits, as torch.nn.BCEWithLogitsLoss, reduction mean over
 * all n elements (logits (B,) or (B, K): n = B * K):
 *   logits (n), targets (n) floats (usually 0 or 1), dlogits (n) or NULL.
 *   loss_i = max(x, 0) - x y + log(1 + exp(-|x|)),
 *   dlogits[i] += grad_scale / n * (sigmoid(x) - y).
 * Fails with STOKE_ERR_ARG if n < 1. */
stoke_status cpu_bce_with_logits(const float *logits, const float *targets, size_t n,
                                 float grad_scale, float *loss, float *dlogits);

/* Mean squared error, as torch.nn.MSELoss (mean over all n elements):
 *   pred (n), target (n), dpred (n) or NULL; dpred += grad_scale * 2 (pred - target) / n.
 * Fails with STOKE_ERR_ARG if n < 1. */
stoke_status cpu_mse(const float *pred, const float *target, size_t n, float grad_scale,
                     float *loss, float *dpred);

/* Mean absolute error loss, as torch.nn.L1Loss (mean over all n elements):
 *   pred (n), target (n), dpred (n) or NULL; dpred += grad_scale * sign(pred - target) / n,
 *   with sign(0) = 0 as PyTorch. Fails with STOKE_ERR_ARG if n < 1. */
stoke_status cpu_l1(const float *pred, const float *target, size_t n, float grad_scale, float *loss,
                    float *dpred);

/* Policy-gradient loss (docs/nn-training-math.md), batch mean of per-sample losses:
 *   logits (B, K), target (B, cols) floats, dlogits (B, K) or NULL; per sample
 *   a = target[0] (a whole number in [0, K)), A = target[1], log pi = log softmax;
 *   cols 2:  loss_b = -A log pi(a)                                  (clip must be 0)
 *   cols 3:  r = exp(log pi(a) - target[2]),
 *            loss_b = -min(r A, clamp(r, 1 - clip, 1 + clip) A)   (clip in (0, 1))
 *   and minus entropy * H(pi), H = -sum_k pi_k log pi_k. Gradients:
 *   d log pi(a) / dx_k = [k == a] - pi_k; the surrogate's is r A (that) where the
 *   unclipped term is the minimum (ties included, as PyTorch) and 0 where the clamped
 *   one is; dH/dx_k = -pi_k (log pi_k + H).
 * Fails with STOKE_ERR_ARG naming the sample when an action is not a whole number in
 * [0, K) or an advantage or old log-probability is not finite, or when the sizes,
 * cols, clip or entropy are invalid; nothing is written then. */
stoke_status cpu_policy_gradient(const float *logits, const float *target, int B, int K, int cols,
                                 float clip, float entropy, float grad_scale, float *loss,
                                 float *dlogits);

/* ---- metrics ------------------------------------------------------------------------ */

/* Samples whose argmax over logits (B, K) equals targets (B); ties go to the lowest
 * index (as torch.argmax); a NaN logit never wins. Targets outside [0, K) count as
 * wrong. Can't fail. */
int64_t cpu_count_correct(const float *logits, const int32_t *targets, int B, int K);

/* Binary accuracy for logits (n) against targets (n): predicted 1 when the logit is
 * > 0, target 1 when >= 0.5. Returns the number of matches. Can't fail. */
int64_t cpu_count_correct_binary(const float *logits, const float *targets, size_t n);

/* Sum over pred (n), target (n) of |pred - target|, in double. Can't fail. */
double cpu_abs_error_sum(const float *pred, const float *target, size_t n);

/* Streaming averages over an epoch: add each batch, read the means at the end. Plain
 * data; zero-initialized (or cpu_metrics_reset) is empty. */
typedef struct cpu_metrics {
    double loss_sum;    /* sum over batches of mean batch loss * batch samples */
    double abs_err_sum; /* sum of |pred - target| over elements */
    int64_t samples;    /* samples added with a loss */
    int64_t correct;    /* samples classified correctly */
    int64_t counted;    /* samples added with a correct count */
    int64_t elements;   /* elements added with an absolute error */
} cpu_metrics;

void cpu_metrics_reset(cpu_metrics *m);
/* A batch of `batch` samples whose mean loss was `mean_loss`. */
void cpu_metrics_add_loss(cpu_metrics *m, double mean_loss, int64_t batch);
/* `correct` right answers out of `batch` samples. */
void cpu_metrics_add_correct(cpu_metrics *m, int64_t correct, int64_t batch);
/* An absolute-error sum over `elements` elements (cpu_abs_error_sum). */
void cpu_metrics_add_abs_error(cpu_metrics *m, double abs_err_sum, int64_t elements);
/* Means so far: sample-weighted loss, accuracy in [0, 1], MAE; NAN when nothing of
 * that kind was added. */
double cpu_metrics_loss(const cpu_metrics *m);
double cpu_metrics_accuracy(const cpu_metrics *m);
double cpu_metrics_mae(const cpu_metrics *m);

#endif
