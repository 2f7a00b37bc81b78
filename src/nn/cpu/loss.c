/* loss.c - cross-entropy (label smoothing), BCE with logits, MSE, L1 and the policy
 * gradient (with PPO's clip and an entropy bonus) with their
 * gradients, and the metrics; written by hand because they are a few fused loops over
 * (B, K) that no library call covers with PyTorch's exact definitions. */
#include "nn/cpu/loss.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

stoke_status cpu_cross_entropy(const float *logits, const int32_t *targets, int B, int K,
                               float label_smoothing, float grad_scale, float *loss, float *dlogits)
{
    if (B < 1 || K < 1)
        return stoke_fail(STOKE_ERR_ARG, "cross-entropy: batch %d and classes %d must be >= 1", B,
                          K);
    if (!(label_smoothing >= 0 && label_smoothing <= 1))
        return stoke_fail(STOKE_ERR_ARG, "cross-entropy: label_smoothing %g outside [0, 1]",
                          (double)label_smoothing);
    /* all targets are checked before anything is written */
    for (int b = 0; b < B; b++)
        if (targets[b] < 0 || targets[b] >= K)
            return stoke_fail(STOKE_ERR_ARG,
                              "cross-entropy: sample %d has target %d, outside [0, %d)", b,
                              (int)targets[b], K);
    const double eps = label_smoothing, on = 1.0 - eps, off = eps / K;
    const double g = (double)grad_scale / B;
    double total = 0;
    for (int b = 0; b < B; b++) {
        const float *x = logits + (size_t)b * K;
        int t = targets[b];
        float mx = x[0];
        for (int k = 1; k < K; k++)
            mx = x[k] > mx ? x[k] : mx;
        double sum = 0, xsum = 0;
        for (int k = 0; k < K; k++) {
            sum += exp((double)x[k] - mx);
            xsum += x[k];
        }
        /* -log p_k = lse - x_k, so loss_b = lse - (1 - eps) x_t - (eps / K) sum_k x_k */
        double lse = mx + log(sum);
        total += lse - on * x[t] - off * xsum;
        if (dlogits) {
            float *d = dlogits + (size_t)b * K;
            double inv = 1.0 / sum;
            for (int k = 0; k < K; k++) {
                double p = exp((double)x[k] - mx) * inv;
                d[k] += (float)(g * (p - off - (k == t ? on : 0.0)));
            }
        }
    }
    *loss = (float)(total / B);
    return STOKE_OK;
}

stoke_status cpu_bce_with_logits(const float *logits, const float *targets, size_t n,
                                 float grad_scale, float *loss, float *dlogits)
{
    if (n < 1)
        return stoke_fail(STOKE_ERR_ARG, "bce-with-logits: no elements");
    const double g = (double)grad_scale / (double)n;
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double x = logits[i], y = targets[i];
        /* stable: never exp of a positive number */
        total += (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
        if (dlogits) {
            double s = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
            dlogits[i] += (float)(g * (s - y));
        }
    }
    *loss = (float)(total / (double)n);
    return STOKE_OK;
}

stoke_status cpu_mse(const float *pred, const float *target, size_t n, float grad_scale,
                     float *loss, float *dpred)
{
    if (n < 1)
        return stoke_fail(STOKE_ERR_ARG, "mse: no elements");
    const double g = 2.0 * grad_scale / (double)n;
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)pred[i] - target[i];
        total += d * d;
        if (dpred)
            dpred[i] += (float)(g * d);
    }
    *loss = (float)(total / (double)n);
    return STOKE_OK;
}

stoke_status cpu_l1(const float *pred, const float *target, size_t n, float grad_scale, float *loss,
                    float *dpred)
{
    if (n < 1)
        return stoke_fail(STOKE_ERR_ARG, "l1: no elements");
    const float g = (float)((double)grad_scale / (double)n);
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)pred[i] - target[i];
        total += fabs(d);
        if (dpred)
            dpred[i] += d > 0 ? g : d < 0 ? -g : 0.0f;
    }
    *loss = (float)(total / (double)n);
    return STOKE_OK;
}

stoke_status cpu_policy_gradient(const float *logits, const float *target, int B, int K, int cols,
                                 float clip, float entropy, float grad_scale, float *loss,
                                 float *dlogits)
{
    if (B < 1 || K < 2)
        return stoke_fail(STOKE_ERR_ARG,
                          "policy gradient: batch %d and actions %d must be >= 1 "
                          "and >= 2",
                          B, K);
    if (cols == 2 ? clip != 0 : cols != 3 || !(clip > 0 && clip < 1))
        return stoke_fail(STOKE_ERR_ARG,
                          "policy gradient: %d target columns with clip %g (2 "
                          "with clip 0, or 3 with clip in (0, 1))",
                          cols, (double)clip);
    if (!(entropy >= 0 && isfinite(entropy)))
        return stoke_fail(STOKE_ERR_ARG,
                          "policy gradient: entropy coefficient %g must be "
                          "finite and >= 0",
                          (double)entropy);
    /* every target is checked before anything is written */
    for (int b = 0; b < B; b++) {
        const float *t = target + (size_t)b * cols;
        if (!(t[0] >= 0 && t[0] < (float)K && t[0] == floorf(t[0])))
            return stoke_fail(STOKE_ERR_ARG,
                              "sample %d has action %g, not a whole number in "
                              "[0, %d)",
                              b, (double)t[0], K);
        if (!isfinite(t[1]))
            return stoke_fail(STOKE_ERR_ARG, "sample %d has advantage %g (not finite)", b,
                              (double)t[1]);
        if (cols == 3 && !isfinite(t[2]))
            return stoke_fail(STOKE_ERR_ARG, "sample %d has old log-probability %g (not finite)", b,
                              (double)t[2]);
    }
    const double g = (double)grad_scale / B, beta = entropy;
    double total = 0;
    for (int b = 0; b < B; b++) {
        const float *x = logits + (size_t)b * K, *t = target + (size_t)b * cols;
        int a = (int)t[0];
        double A = t[1];
        float mx = x[0];
        for (int k = 1; k < K; k++)
            mx = x[k] > mx ? x[k] : mx;
        double sum = 0, px = 0;
        for (int k = 0; k < K; k++) {
            double e = exp((double)x[k] - mx);
            sum += e;
            px += e * x[k];
        }
        double lse = mx + log(sum), logp = x[a] - lse;
        /* H = -sum p (x - lse) = lse - sum p x */
        double H = lse - px / sum;
        double obj, coef; /* the objective and its derivative by log pi(a) */
        if (cols == 2) {
            obj = A * logp;
            coef = A;
        } else {
            double r = exp(logp - (double)t[2]);
            double rc = r < 1.0 - clip ? 1.0 - clip : r > 1.0 + clip ? 1.0 + clip : r;
            bool unclipped = r * A <= rc * A;
            obj = unclipped ? r * A : rc * A;
            coef = unclipped ? r * A : 0.0;
        }
        total += -obj - beta * H;
        if (dlogits) {
            float *d = dlogits + (size_t)b * K;
            for (int k = 0; k < K; k++) {
                double lp = (double)x[k] - lse, p = exp(lp);
                d[k] += (float)(g * (-coef * ((k == a ? 1.0 : 0.0) - p) + beta * p * (lp + H)));
            }
        }
    }
    *loss = (float)(total / B);
    return STOKE_OK;
}

/* ---- metrics ------------------------------------------------------------------------- */

int64_t cpu_count_correct(const float *logits, const int32_t *targets, int B, int K)
{
    int64_t correct = 0;
    for (int b = 0; b < B; b++) {
        const float *x = logits + (size_t)b * K;
        int best = -1;
        for (int k = 0; k < K; k++)
            if (!isnan(x[k]) && (best < 0 || x[k] > x[best])) /* strict: ties keep the first */
                best = k;
        correct += best >= 0 && best == targets[b];
    }
    return correct;
}

int64_t cpu_count_correct_binary(const float *logits, const float *targets, size_t n)
{
    int64_t correct = 0;
    for (size_t i = 0; i < n; i++)
        correct += (logits[i] > 0) == (targets[i] >= 0.5f);
    return correct;
}

double cpu_abs_error_sum(const float *pred, const float *target, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += fabs((double)pred[i] - target[i]);
    return s;
}

void cpu_metrics_reset(cpu_metrics *m) { memset(m, 0, sizeof *m); }

void cpu_metrics_add_loss(cpu_metrics *m, double mean_loss, int64_t batch)
{
    m->loss_sum += mean_loss * (double)batch;
    m->samples += batch;
}

void cpu_metrics_add_correct(cpu_metrics *m, int64_t correct, int64_t batch)
{
    m->correct += correct;
    m->counted += batch;
}

void cpu_metrics_add_abs_error(cpu_metrics *m, double abs_err_sum, int64_t elements)
{
    m->abs_err_sum += abs_err_sum;
    m->elements += elements;
}

double cpu_metrics_loss(const cpu_metrics *m)
{
    return m->samples ? m->loss_sum / (double)m->samples : NAN;
}

double cpu_metrics_accuracy(const cpu_metrics *m)
{
    return m->counted ? (double)m->correct / (double)m->counted : NAN;
}

double cpu_metrics_mae(const cpu_metrics *m)
{
    return m->elements ? m->abs_err_sum / (double)m->elements : NAN;
}
