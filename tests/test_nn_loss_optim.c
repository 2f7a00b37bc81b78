/* test_nn_loss_optim.c - the CPU losses (the policy gradient with PPO's clip
 * included) and metrics against float64 references and finite differences; the SGD
 * and AdamW kernels against their formulas (and SGD's threaded blocks against its
 * serial loop); the optimizer step as `stoke train` runs it (stoke_model_step: loss
 * scale, accumulation, clipping, update) and the lr schedule (stoke_lr_at) against the
 * formulas and, with the argument "torch", against PyTorch (Debian's python3-torch,
 * through tests/nn_loss_optim_ref.py). */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nn/cpu/loss.h"
#include "core/precision.h"
#include "nn/backend_impl.h"
#include "nn/cpu/optim.h"
#include "stoke/nn.h"

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi), never exactly 0 for a symmetric range (inputs are never zeros) */
static float urand(float lo, float hi)
{
    float u = (float)((rng_next() >> 11) * 0x1.0p-53);
    float x = lo + (hi - lo) * u;
    return x == 0 ? 0.125f : x;
}

static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = urand(lo, hi);
}

/* |a - b| <= rel * max(|b|, floor): relative, with a floor for values near zero */
static bool close_rel(double a, double b, double rel, double floor_)
{
    double m = fabs(b) > floor_ ? fabs(b) : floor_;
    return fabs(a - b) <= rel * m;
}

/* ---- float64 references ------------------------------------------------------------- */

/* cross-entropy with label smoothing, written from its definition, -sum q log p */
static double ref_ce(const double *x, const int32_t *t, int B, int K, double eps)
{
    double total = 0;
    for (int b = 0; b < B; b++) {
        const double *r = x + (size_t)b * K;
        double z = 0;
        for (int k = 0; k < K; k++)
            z += exp(r[k]);
        for (int k = 0; k < K; k++) {
            double q = (k == t[b] ? 1 - eps : 0) + eps / K;
            total -= q * log(exp(r[k]) / z);
        }
    }
    return total / B;
}

static double ref_bce(const double *x, const double *y, size_t n)
{
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        double s = 1 / (1 + exp(-x[i]));
        total -= y[i] * log(s) + (1 - y[i]) * log(1 - s);
    }
    return total / (double)n;
}

static double ref_mse(const double *x, const double *y, size_t n)
{
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += (x[i] - y[i]) * (x[i] - y[i]);
    return total / (double)n;
}

static double ref_l1(const double *x, const double *y, size_t n)
{
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += fabs(x[i] - y[i]);
    return total / (double)n;
}

/* the policy-gradient loss from its definition: softmax, its log, the entropy, PPO's
 * min(r A, clamp(r) A) */
static double ref_pg(const double *x, const double *t, int B, int K, int cols, double clip,
                     double beta)
{
    double total = 0;
    for (int b = 0; b < B; b++) {
        const double *r = x + (size_t)b * K, *tr = t + (size_t)b * cols;
        double z = 0, H = 0;
        for (int k = 0; k < K; k++)
            z += exp(r[k]);
        for (int k = 0; k < K; k++)
            H -= exp(r[k]) / z * log(exp(r[k]) / z);
        int a = (int)tr[0];
        double A = tr[1], logp = log(exp(r[a]) / z), obj = A * logp;
        if (cols == 3) {
            double ratio = exp(logp - tr[2]);
            double clamped = fmin(fmax(ratio, 1 - clip), 1 + clip);
            obj = fmin(ratio * A, clamped * A);
        }
        total += -obj - beta * H;
    }
    return total / B;
}

/* Rows [action, advantage(, old_log_prob)] for logits x (B, K): advantages of both
 * signs, and with 3 columns old log-probabilities that put the ratio r = pi / pi_old
 * below, inside and above [0.8, 1.2], each at least 0.05 from the edges (so central
 * differences never straddle a kink). */
static void make_pg_targets(const float *x, int B, int K, int cols, float *t)
{
    static const double ratios[8] = {0.5, 0.9, 1.05, 1.6, 0.7, 1.3, 0.95, 1.25};
    static const double sign[8] = {1, -1, 1, 1, -1, -1, 1, -1};
    for (int b = 0; b < B; b++) {
        float *r = t + (size_t)b * cols;
        int a = (int)(rng_next() % (uint64_t)K);
        r[0] = (float)a;
        r[1] = (float)(sign[b % 8] * urand(0.2f, 2.0f));
        if (cols == 3) {
            double z = 0;
            for (int k = 0; k < K; k++)
                z += exp((double)x[b * K + k]);
            r[2] = (float)(log(exp((double)x[b * K + a]) / z) - log(ratios[b % 8]));
        }
    }
}

/* ---- losses -------------------------------------------------------------------------- */

enum { B = 6, K = 5, N = B * K };

static void test_cross_entropy(void)
{
    float logits[N], d[N];
    double xd[N];
    int32_t t[B];
    fill(logits, N, -3, 3);
    for (int b = 0; b < B; b++)
        t[b] = (int32_t)(rng_next() % K);
    for (int i = 0; i < N; i++)
        xd[i] = logits[i];
    const float eps_values[] = {0.0f, 0.1f, 1.0f};
    for (int e = 0; e < 3; e++) {
        double eps = eps_values[e];
        /* accumulation and the grad_scale factor: start from 0.25, scale 3 */
        for (int i = 0; i < N; i++)
            d[i] = 0.25f;
        float loss = 0;
        CHECK_INT_EQ(cpu_cross_entropy(logits, t, B, K, eps_values[e], 3.0f, &loss, d), STOKE_OK);
        /* loss: float64 reference, relative 1e-6 */
        double ref = ref_ce(xd, t, B, K, eps);
        CHECK_MSG(close_rel(loss, ref, 1e-6, 1e-6), "ce eps %g: %.9g vs %.9g", eps, loss, ref);
        /* gradient: central differences of the float64 reference, h = 1e-5;
         * abs tolerance 1e-6 on values of size ~0.1 */
        for (int i = 0; i < N; i++) {
            double save = xd[i], h = 1e-5;
            xd[i] = save + h;
            double up = ref_ce(xd, t, B, K, eps);
            xd[i] = save - h;
            double dn = ref_ce(xd, t, B, K, eps);
            xd[i] = save;
            double fd = 3.0 * (up - dn) / (2 * h) + 0.25;
            CHECK_MSG(fabs(d[i] - fd) <= 1e-6, "ce eps %g grad %d: %.9g vs %.9g", eps, i, d[i], fd);
        }
    }
    /* loss only */
    float loss1 = 0, loss2 = 0;
    CHECK_INT_EQ(cpu_cross_entropy(logits, t, B, K, 0.1f, 1.0f, &loss1, NULL), STOKE_OK);
    for (int i = 0; i < N; i++)
        d[i] = 0;
    CHECK_INT_EQ(cpu_cross_entropy(logits, t, B, K, 0.1f, 1.0f, &loss2, d), STOKE_OK);
    CHECK(loss1 == loss2);

    /* stability: logits far beyond exp's range */
    float big[4] = {1000.0f, -1000.0f, 0.5f, 3000.0f};
    int32_t bt[2] = {1, 0};
    float bd[4] = {0, 0, 0, 0}, bl = 0;
    CHECK_INT_EQ(cpu_cross_entropy(big, bt, 2, 2, 0.0f, 1.0f, &bl, bd), STOKE_OK);
    /* sample 0: -log p = 2000; sample 1: -log p = 2999.5; mean 2499.75 */
    CHECK_MSG(close_rel(bl, 2499.75, 1e-6, 1), "ce big %.9g", bl);
    CHECK(isfinite(bd[0]) && isfinite(bd[1]) && isfinite(bd[2]) && isfinite(bd[3]));
    CHECK_NEAR(bd[0], 0.5, 1e-6);
    CHECK_NEAR(bd[1], -0.5, 1e-6);

    /* a target out of range: an error naming the sample, nothing written */
    int32_t badt[B];
    memcpy(badt, t, sizeof badt);
    badt[3] = K;
    for (int i = 0; i < N; i++)
        d[i] = 7.0f;
    float bad_loss = -1;
    CHECK_INT_EQ(cpu_cross_entropy(logits, badt, B, K, 0.0f, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "sample 3");
    CHECK_STR_CONTAINS(stoke_last_error(), "target 5");
    CHECK(bad_loss == -1 && d[0] == 7.0f && d[N - 1] == 7.0f);
    badt[3] = -1;
    CHECK_INT_EQ(cpu_cross_entropy(logits, badt, B, K, 0.0f, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
    CHECK_INT_EQ(cpu_cross_entropy(logits, t, B, K, 1.5f, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
    CHECK_INT_EQ(cpu_cross_entropy(logits, t, 0, K, 0.0f, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
}

static void test_policy_gradient(void)
{
    enum { PB = 8, PK = 5, PN = PB * PK };
    float x[PN], d[PN], t[PB * 3];
    double xd[PN], td[PB * 3];
    fill(x, PN, -3, 3);
    for (int i = 0; i < PN; i++)
        xd[i] = x[i];
    const struct {
        int cols;
        float clip, beta;
    } cases[] = {{2, 0, 0}, {2, 0, 0.05f}, {3, 0.2f, 0}, {3, 0.2f, 0.05f}};
    for (int c = 0; c < 4; c++) {
        int cols = cases[c].cols;
        double clip = cases[c].clip, beta = cases[c].beta;
        make_pg_targets(x, PB, PK, cols, t);
        for (int i = 0; i < PB * cols; i++)
            td[i] = t[i];
        for (int i = 0; i < PN; i++)
            d[i] = 0.25f;
        float loss = 0;
        CHECK_INT_EQ(
            cpu_policy_gradient(x, t, PB, PK, cols, cases[c].clip, cases[c].beta, 3.0f, &loss, d),
            STOKE_OK);
        /* loss: float64 reference, relative 1e-6 */
        double ref = ref_pg(xd, td, PB, PK, cols, clip, beta);
        CHECK_MSG(close_rel(loss, ref, 1e-6, 1e-6), "pg %d: %.9g vs %.9g", c, loss, ref);
        /* gradient: central differences of the float64 reference, h = 1e-5; abs
         * tolerance 1e-6 on values of size ~0.1 (float32 storage is ~1e-8) */
        for (int i = 0; i < PN; i++) {
            double save = xd[i], h = 1e-5;
            xd[i] = save + h;
            double up = ref_pg(xd, td, PB, PK, cols, clip, beta);
            xd[i] = save - h;
            double dn = ref_pg(xd, td, PB, PK, cols, clip, beta);
            xd[i] = save;
            double fd = 3.0 * (up - dn) / (2 * h) + 0.25;
            CHECK_MSG(fabs(d[i] - fd) <= 1e-6, "pg %d grad %d: %.9g vs %.9g", c, i, d[i], fd);
        }
        if (cols == 3 && beta == 0) {
            /* the clipped samples (3: r 1.6, A > 0; 4: r 0.7, A < 0) get no gradient;
             * the unclipped outside the range (0: r 0.5, A > 0) do */
            for (int k = 0; k < PK; k++)
                CHECK(d[3 * PK + k] == 0.25f && d[4 * PK + k] == 0.25f);
            CHECK(d[0] != 0.25f);
        }
    }
    /* advantage 1 everywhere, no entropy: exactly the cross-entropy of the actions */
    int32_t acts[PB];
    for (int b = 0; b < PB; b++) {
        acts[b] = (int32_t)(rng_next() % PK);
        t[b * 2] = (float)acts[b];
        t[b * 2 + 1] = 1.0f;
    }
    float dpg[PN] = {0}, dce[PN] = {0}, lpg = 0, lce = 0;
    CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, 2, 0, 0, 1.0f, &lpg, dpg), STOKE_OK);
    CHECK_INT_EQ(cpu_cross_entropy(x, acts, PB, PK, 0, 1.0f, &lce, dce), STOKE_OK);
    CHECK_MSG(close_rel(lpg, lce, 1e-6, 1e-6), "pg as ce: %.9g vs %.9g", lpg, lce);
    for (int i = 0; i < PN; i++)
        CHECK_NEAR(dpg[i], dce[i], 1e-7);

    /* bad rows: errors naming the sample, nothing written */
    make_pg_targets(x, PB, PK, 3, t);
    for (int i = 0; i < PN; i++)
        d[i] = 7.0f;
    float bad_loss = -1;
    const struct {
        int col;
        float v;
        const char *msg;
    } bad[] = {{0, 5.0f, "sample 3 has action 5, not a whole number in [0, 5)"},
               {0, -1.0f, "sample 3 has action -1"},
               {0, 2.5f, "sample 3 has action 2.5"},
               {0, NAN, "sample 3 has action nan"},
               {1, INFINITY, "sample 3 has advantage inf"},
               {2, NAN, "sample 3 has old log-probability nan"}};
    for (int k = 0; k < 6; k++) {
        float save = t[3 * 3 + bad[k].col];
        t[3 * 3 + bad[k].col] = bad[k].v;
        CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, 3, 0.2f, 0.01f, 1.0f, &bad_loss, d),
                     STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), bad[k].msg);
        t[3 * 3 + bad[k].col] = save;
    }
    CHECK(bad_loss == -1 && d[0] == 7.0f && d[PN - 1] == 7.0f);
    CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, 3, 0.0f, 0, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
    CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, 2, 0.2f, 0, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
    CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, 4, 0.2f, 0, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
    CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, 3, 0.2f, -1, 1.0f, &bad_loss, d), STOKE_ERR_ARG);
}

typedef stoke_status (*pair_loss)(const float *, const float *, size_t, float, float *, float *);
typedef double (*pair_ref)(const double *, const double *, size_t);

/* A loss of (pred, target) against its float64 reference and central differences. */
static void check_pair_loss(const char *name, pair_loss fn, pair_ref ref, const float *x,
                            const float *y, size_t n, double fd_tol)
{
    double xd[64], yd[64];
    float d[64];
    for (size_t i = 0; i < n; i++) {
        xd[i] = x[i];
        yd[i] = y[i];
        d[i] = -0.5f;
    }
    float loss = 0;
    CHECK_INT_EQ(fn(x, y, n, 2.0f, &loss, d), STOKE_OK);
    double r = ref(xd, yd, n);
    CHECK_MSG(close_rel(loss, r, 1e-6, 1e-6), "%s: %.9g vs %.9g", name, loss, r);
    for (size_t i = 0; i < n; i++) {
        double save = xd[i], h = 1e-6;
        xd[i] = save + h;
        double up = ref(xd, yd, n);
        xd[i] = save - h;
        double dn = ref(xd, yd, n);
        xd[i] = save;
        double fd = 2.0 * (up - dn) / (2 * h) - 0.5;
        CHECK_MSG(fabs(d[i] - fd) <= fd_tol, "%s grad %zu: %.9g vs %.9g", name, i, d[i], fd);
    }
    CHECK_INT_EQ(fn(x, y, 0, 1.0f, &loss, NULL), STOKE_ERR_ARG);
}

static void test_pair_losses(void)
{
    float x[40], y[40], yb[40];
    fill(x, 40, -4, 4);
    fill(y, 40, -2, 2);
    for (int i = 0; i < 40; i++)
        yb[i] = i % 3 == 0 ? 0.3f : (float)(rng_next() & 1); /* soft and hard targets */
    /* abs tolerance 1e-7 on gradients of size ~2/40 (1e-6 relative or better) */
    check_pair_loss("bce", cpu_bce_with_logits, ref_bce, x, yb, 40, 1e-7);
    check_pair_loss("mse", cpu_mse, ref_mse, x, y, 40, 1e-7);
    check_pair_loss("l1", cpu_l1, ref_l1, x, y, 40, 1e-7);

    /* BCE stays finite where the naive formula overflows: x = +-100 */
    float bx[4] = {100.0f, -100.0f, 100.0f, -100.0f}, by[4] = {0, 1, 1, 0}, bd[4] = {0};
    float bl = 0;
    CHECK_INT_EQ(cpu_bce_with_logits(bx, by, 4, 1.0f, &bl, bd), STOKE_OK);
    CHECK_MSG(close_rel(bl, 50.0, 1e-6, 1), "bce big %.9g", bl); /* (100 + 100 + 0 + 0) / 4 */
    CHECK_NEAR(bd[0], 0.25, 1e-7);
    CHECK_NEAR(bd[1], -0.25, 1e-7);
    CHECK_NEAR(bd[2], 0.0, 1e-7);

    /* L1's gradient at a zero difference is 0, as PyTorch's sign() */
    float lx[3] = {1.5f, 2.0f, -1.0f}, ly[3] = {1.5f, 1.0f, 1.0f}, ld[3] = {0, 0, 0}, ll = 0;
    CHECK_INT_EQ(cpu_l1(lx, ly, 3, 1.0f, &ll, ld), STOKE_OK);
    CHECK(ld[0] == 0.0f);
    CHECK_NEAR(ld[1], 1.0 / 3, 1e-7);
    CHECK_NEAR(ld[2], -1.0 / 3, 1e-7);
    CHECK_NEAR(ll, 1.0, 1e-7);
}

static void test_metrics(void)
{
    /* ties go to the lowest index; NaN never wins */
    float lg[4 * 3] = {1,  3,  3,    /* argmax 1 */ 2, 2, 2, /* 0 */ NAN, 0.5f, 0.25f, /* 1 */
                       -1, -2, -0.5f /* 2 */};
    int32_t t1[4] = {1, 0, 1, 2}, t2[4] = {2, 1, 0, 7};
    CHECK_INT_EQ(cpu_count_correct(lg, t1, 4, 3), 4);
    CHECK_INT_EQ(cpu_count_correct(lg, t2, 4, 3), 0);
    float bl[5] = {0.5f, -0.5f, 0.0f, 2.0f, -3.0f}, bt[5] = {1, 0, 0, 0.7f, 0.2f};
    CHECK_INT_EQ(cpu_count_correct_binary(bl, bt, 5), 5);
    bt[2] = 1;
    CHECK_INT_EQ(cpu_count_correct_binary(bl, bt, 5), 4);
    float p[3] = {1, 2, 3}, q[3] = {1.5f, 0, 3};
    CHECK_NEAR(cpu_abs_error_sum(p, q, 3), 2.5, 1e-12);

    /* streaming averages: sample-weighted, as one big batch would give */
    cpu_metrics m;
    cpu_metrics_reset(&m);
    CHECK(isnan(cpu_metrics_loss(&m)) && isnan(cpu_metrics_accuracy(&m)) &&
          isnan(cpu_metrics_mae(&m)));
    cpu_metrics_add_loss(&m, 2.0, 10);
    cpu_metrics_add_loss(&m, 0.5, 30);
    cpu_metrics_add_correct(&m, 7, 10);
    cpu_metrics_add_correct(&m, 23, 30);
    cpu_metrics_add_abs_error(&m, 2.5, 3);
    cpu_metrics_add_abs_error(&m, 1.5, 5);
    CHECK_NEAR(cpu_metrics_loss(&m), (2.0 * 10 + 0.5 * 30) / 40, 1e-12);
    CHECK_NEAR(cpu_metrics_accuracy(&m), 30.0 / 40, 1e-12);
    CHECK_NEAR(cpu_metrics_mae(&m), 4.0 / 8, 1e-12);
}

/* ---- the SGD and AdamW kernels without torch ---------------------------------------- */

/* The update rules of optim.h in double, for one element over `steps` updates with the
 * gradients g[0..steps). */
static double ref_sgd(const cpu_sgd_config *c, double lr, double p, const float *g, int steps)
{
    double buf = 0;
    for (int t = 1; t <= steps; t++) {
        double d = g[t - 1] + (double)c->weight_decay * p;
        if (c->momentum != 0) {
            buf = t == 1 ? d : c->momentum * buf + (1 - (double)c->dampening) * d;
            d = c->nesterov ? d + c->momentum * buf : buf;
        }
        p -= lr * d;
    }
    return p;
}

static double ref_adamw(const cpu_adamw_config *c, double lr, double p, const float *g, int steps)
{
    double m = 0, v = 0;
    for (int t = 1; t <= steps; t++) {
        p *= 1 - lr * c->weight_decay;
        m = c->beta1 * m + (1 - (double)c->beta1) * g[t - 1];
        v = c->beta2 * v + (1 - (double)c->beta2) * g[t - 1] * g[t - 1];
        double mh = m / (1 - pow(c->beta1, t)), vh = v / (1 - pow(c->beta2, t));
        p -= lr * mh / (sqrt(vh) + c->eps);
    }
    return p;
}

static void test_optim_kernels(void)
{
    /* the formulas, over three steps (the first sets the momentum buffer to g) */
    enum { NK = 37, KS = 3 };
    const cpu_sgd_config sgds[] = {{.momentum = 0},
                                   {.momentum = 0.9f, .weight_decay = 1e-2f},
                                   {.momentum = 0.9f, .dampening = 0.3f, .weight_decay = 1e-2f},
                                   {.momentum = 0.8f, .weight_decay = 5e-4f, .nesterov = 1}};
    for (int k = 0; k < 4; k++) {
        float p[NK], p0[NK], g[KS][NK], buf[NK], gi[KS];
        fill(p, NK, -1, 1);
        memcpy(p0, p, sizeof p);
        CHECK_INT_EQ(cpu_sgd_check(&sgds[k]), STOKE_OK);
        for (int t = 0; t < KS; t++) {
            fill(g[t], NK, -1, 1);
            cpu_sgd_step(&sgds[k], 0.1, t + 1, p, g[t], buf, NK);
        }
        int bad = 0;
        for (int i = 0; i < NK; i++) {
            for (int t = 0; t < KS; t++)
                gi[t] = g[t][i];
            bad += !close_rel(p[i], ref_sgd(&sgds[k], 0.1, p0[i], gi, KS), 1e-6, 1);
        }
        CHECK_MSG(bad == 0, "sgd config %d: %d of %d values off the formula", k, bad, NK);
    }
    {
        cpu_adamw_config ac;
        cpu_adamw_defaults(&ac);
        ac.weight_decay = 0.1f;
        float p[NK], p0[NK], g[KS][NK], m[NK] = {0}, v[NK] = {0}, gi[KS];
        fill(p, NK, -1, 1);
        memcpy(p0, p, sizeof p);
        for (int t = 0; t < KS; t++) {
            fill(g[t], NK, -1, 1);
            cpu_adamw_step(&ac, 1e-2, t + 1, p, g[t], m, v, NK);
        }
        int bad = 0;
        for (int i = 0; i < NK; i++) {
            for (int t = 0; t < KS; t++)
                gi[t] = g[t][i];
            bad += !close_rel(p[i], ref_adamw(&ac, 1e-2, p0[i], gi, KS), 1e-6, 1);
        }
        CHECK_MSG(bad == 0, "adamw: %d of %d values off the formula", bad, NK);
    }

    /* AdamW: the 4-wide loop and the scalar tail give the same bits (one call over 37
     * elements against 37 calls of one element) */
    {
        float q1[37], q2[37], gg[37], m1[37] = {0}, v1[37] = {0}, m2[37] = {0}, v2[37] = {0};
        fill(q1, 37, -1, 1);
        memcpy(q2, q1, sizeof q1);
        cpu_adamw_config ac;
        cpu_adamw_defaults(&ac);
        for (int s = 1; s <= 3; s++) {
            fill(gg, 37, -1, 1);
            cpu_adamw_step(&ac, 1e-2, s, q1, gg, m1, v1, 37);
            for (int i = 0; i < 37; i++)
                cpu_adamw_step(&ac, 1e-2, s, q2 + i, gg + i, m2 + i, v2 + i, 1);
        }
        CHECK(memcmp(q1, q2, sizeof q1) == 0 && memcmp(v1, v2, sizeof v1) == 0);
    }

    cpu_sgd_config bad = {.momentum = 0, .nesterov = 1};
    CHECK_INT_EQ(cpu_sgd_check(&bad), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "nesterov");
    bad = (cpu_sgd_config){.momentum = -1};
    CHECK_INT_EQ(cpu_sgd_check(&bad), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "momentum");
    cpu_adamw_config a;
    cpu_adamw_defaults(&a);
    CHECK_INT_EQ(cpu_adamw_check(&a), STOKE_OK);
    a.beta2 = 1.0f;
    CHECK_INT_EQ(cpu_adamw_check(&a), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "beta2");

    bool fin = false;
    float x[5] = {3, 0, 0, 0, 4};
    CHECK_NEAR(cpu_sum_squares(x, 5, &fin), 25.0, 1e-12);
    CHECK(fin);
    x[4] = INFINITY;
    cpu_sum_squares(x, 5, &fin);
    CHECK(!fin);
    x[4] = NAN;
    cpu_sum_squares(x, 5, &fin);
    CHECK(!fin);
}

/* SGD's threaded path (tensors of SGD_PAR_MIN = 65,536 elements and up, in blocks of
 * 8,192) against the serial one on pieces below that size: the same bits, with the
 * bf16 copy and the zeroed gradient that follow each block. 100,000 elements end in a
 * partial block. */
static void test_sgd_threaded(void)
{
    const size_t n = 100000, piece = 4096;
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4), *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    float *b1 = malloc(n * 4), *b2 = malloc(n * 4);
    uint16_t *l1 = malloc(n * 2), *l2 = malloc(n * 2);
    if (!p1 || !p2 || !g1 || !g2 || !b1 || !b2 || !l1 || !l2) {
        CHECK(0);
        return;
    }
    fill(p1, n, -1, 1);
    memcpy(p2, p1, n * 4);
    const cpu_sgd_config c = {.momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = 1};
    for (int t = 1; t <= 2; t++) {
        fill(g1, n, -1, 1);
        memcpy(g2, g1, n * 4);
        cpu_after_update a1 = {.lowp = l1, .zero_grad = true};
        cpu_sgd_step_then(&c, 0.05, t, p1, g1, b1, n, &a1);
        for (size_t o = 0; o < n; o += piece) {
            size_t k = n - o < piece ? n - o : piece;
            cpu_after_update a2 = {.lowp = l2 + o, .zero_grad = true};
            cpu_sgd_step_then(&c, 0.05, t, p2 + o, g2 + o, b2 + o, k, &a2);
        }
        CHECK_MSG(memcmp(p1, p2, n * 4) == 0 && memcmp(b1, b2, n * 4) == 0,
                  "step %d: threaded SGD differs from serial", t);
        CHECK_MSG(memcmp(l1, l2, n * 2) == 0, "step %d: bf16 copies differ", t);
        size_t nonzero = 0;
        for (size_t i = 0; i < n; i++)
            nonzero += g1[i] != 0;
        CHECK_MSG(nonzero == 0, "step %d: %zu gradients not zeroed", t, nonzero);
    }
    free(p1), free(p2), free(g1), free(g2), free(b1), free(b2), free(l1), free(l2);
}

/* The CPU backend's threaded passes over whole arrays (fixed blocks of 65,536
 * elements from 131,072 up; zeroing from 1 MiB) against their serial forms: the
 * low-precision weight copies bit for bit, the sum of squares against a double sum
 * (its blocks add in a fixed order, so only rounding differs) and its finite flag with
 * the bad value in the last, partial block. */
static void test_backend_passes(void)
{
    nn_backend *be = NULL; /* two threads of its own: the threaded passes */
    CHECK_INT_EQ(nn_cpu_backend_new(2, &be), STOKE_OK);
    const size_t n = 300000;
    float *x = malloc(n * sizeof *x);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    if (!be || !x || !a || !b) {
        CHECK(0);
        nn_backend_free(be);
        free(x), free(a), free(b);
        return;
    }
    fill(x, n, -3, 3);
    be->to_lowp(be->ctx, STOKE_PREC_BF16, x, a, n);
    cpu_f32_to_bf16(x, b, n);
    CHECK_MSG(memcmp(a, b, n * 2) == 0, "threaded bf16 copy differs from serial");
    be->to_lowp(be->ctx, STOKE_PREC_FP16, x, a, n);
    cpu_f32_to_f16(x, b, n);
    CHECK_MSG(memcmp(a, b, n * 2) == 0, "threaded fp16 copy differs from serial");
    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += (double)x[i] * x[i];
    const float *xs[2] = {x, x + 1};
    size_t ns[2] = {n, 3};
    double got[2] = {0, 0};
    be->sum_squares(be->ctx, xs, ns, 2, got);
    CHECK_MSG(close_rel(got[0], want, 1e-12, 0), "sum of squares %.17g vs %.17g", got[0], want);
    CHECK_NEAR(got[1], (double)x[1] * x[1] + (double)x[2] * x[2] + (double)x[3] * x[3], 1e-9);
    x[n - 3] = NAN;
    be->sum_squares(be->ctx, xs, ns, 2, got);
    CHECK(!isfinite(got[0]) && isfinite(got[1]));
    be->zero(be->ctx, x, n * sizeof *x);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++)
        nonzero += x[i] != 0;
    CHECK_MSG(nonzero == 0, "%zu values not zeroed", nonzero);
    free(x), free(a), free(b);
    nn_backend_free(be);
}

/* ---- the optimizer step as training runs it (stoke_model_step) ----------------------- */

/* An MLP (in -> hidden -> 3 classes) whose parameters and gradients the tests write
 * directly, then step through stoke_model_step, as `stoke train` does. Its parameters
 * side by side, in graph order, are one flat vector of `total` floats. */
typedef struct stepper {
    stoke_graph *g;
    stoke_model *m;
    int np;
    size_t total;
} stepper;

static size_t param_elems(const stepper *s, int i)
{
    return (size_t)stoke_graph_param(s->g, i)->elems;
}

static bool stepper_new(stepper *s, int64_t in, int64_t hidden, stoke_precision prec,
                        stoke_optim optim)
{
    stoke_shape shape = {.ndim = 1, .dims = {in}};
    s->g = stoke_preset_mlp(&shape, &hidden, 1, 3);
    s->m = NULL;
    stoke_model_opts o = {
        .max_batch = 1, .training = true, .seed = 3, .precision = prec, .optim = optim};
    if (!s->g || stoke_model_new(s->g, &o, &s->m) != STOKE_OK) {
        CHECK_MSG(0, "model: %s", stoke_last_error());
        stoke_graph_free(s->g);
        return false;
    }
    s->np = stoke_graph_param_count(s->g);
    s->total = 0;
    for (int i = 0; i < s->np; i++) {
        CHECK(stoke_graph_param(s->g, i)->trainable);
        s->total += param_elems(s, i);
    }
    return true;
}

static void stepper_free(stepper *s)
{
    stoke_model_free(s->m);
    stoke_graph_free(s->g);
}

static void set_params(stepper *s, const float *x)
{
    for (int i = 0; i < s->np; i++) {
        memcpy(stoke_model_param(s->m, i), x, param_elems(s, i) * sizeof *x);
        x += param_elems(s, i);
    }
    stoke_model_params_changed(s->m);
}

/* the gradients as a backward pass with this loss scale and accumulation count leaves
 * them: x times scale x accum (exact for powers of two) */
static void set_grads(stepper *s, const float *x, float times)
{
    for (int i = 0; i < s->np; i++) {
        float *gr = stoke_model_grad(s->m, i);
        for (size_t k = 0; k < param_elems(s, i); k++)
            gr[k] = *x++ * times;
    }
}

static void get_params(stepper *s, float *x)
{
    for (int i = 0; i < s->np; i++) {
        memcpy(x, stoke_model_param(s->m, i), param_elems(s, i) * sizeof *x);
        x += param_elems(s, i);
    }
}

/* A step at sizes that take every parallel path on the way: the first weight has
 * 64 x 2100 = 134,400 elements, over the backend's threaded sum of squares (131,072)
 * and SGD's threaded update (65,536), each ending in a partial block. The loss scale
 * (4) and accumulation (2) are divided out, the global norm is clipped to 1, then
 * SGD with momentum and weight decay: all against the formula in double. */
static void test_step_large(void)
{
    stepper s;
    stoke_optim o = {.kind = STOKE_SGD, .momentum = 0.9f, .weight_decay = 1e-3f, .clip_norm = 1.0f};
    if (!stepper_new(&s, 64, 2100, STOKE_PREC_FP32, o))
        return;
    size_t n = s.total;
    float *p0 = malloc(n * 4), *g = malloc(n * 4), *p = malloc(n * 4);
    if (!p0 || !g || !p) {
        CHECK(0);
        free(p0), free(g), free(p);
        stepper_free(&s);
        return;
    }
    fill(p0, n, -1, 1);
    fill(g, n, -1, 1);
    set_params(&s, p0);
    stoke_model_set_loss_scale(s.m, 4.0f);
    set_grads(&s, g, 8.0f);
    bool applied = false;
    CHECK(stoke_model_step(s.m, 0.1, 2, &applied) == STOKE_OK && applied);
    double sumsq = 0;
    for (size_t i = 0; i < n; i++)
        sumsq += (double)g[i] * g[i];
    double norm = sqrt(sumsq), coef = 1.0 / (norm + 1e-6);
    CHECK_MSG(close_rel(stoke_model_grad_norm(s.m), norm, 1e-12, 0),
              "grad norm %.17g, expected %.17g", stoke_model_grad_norm(s.m), norm);
    get_params(&s, p);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double want = p0[i] - 0.1 * (coef * g[i] + 1e-3 * p0[i]);
        if (!close_rel(p[i], want, 1e-6, 1) && bad++ == 0)
            first = i;
    }
    CHECK_MSG(bad == 0, "%zu of %zu parameters off the formula, first [%zu]", bad, n, first);
    free(p0), free(g), free(p);
    stepper_free(&s);
}

/* fp16's dynamic loss scale as the step keeps it: 65536, x2 after 2000 good steps,
 * x0.5 and no update on an overflow (an overflowed step does not count). */
static void test_step_loss_scale(void)
{
    stepper s;
    if (!stepper_new(&s, 4, 5, STOKE_PREC_FP16, (stoke_optim){.kind = STOKE_SGD}))
        return;
    CHECK(stoke_model_loss_scale(s.m) == 65536.0f);
    bool applied = false;
    int failed = 0;
    for (int k = 0; k < 1999; k++) /* zero gradients: finite */
        failed += stoke_model_step(s.m, 0.1, 1, &applied) != STOKE_OK || !applied;
    CHECK_INT_EQ(failed, 0);
    CHECK(stoke_model_loss_scale(s.m) == 65536.0f);
    CHECK(stoke_model_step(s.m, 0.1, 1, &applied) == STOKE_OK && applied);
    CHECK(stoke_model_loss_scale(s.m) == 131072.0f);
    float w0 = stoke_model_param(s.m, 0)[0];
    stoke_model_grad(s.m, 1)[2] = INFINITY;
    stoke_model_grad(s.m, 0)[0] = 65536.0f;
    CHECK(stoke_model_step(s.m, 0.1, 1, &applied) == STOKE_OK && !applied);
    CHECK(stoke_model_loss_scale(s.m) == 65536.0f && stoke_model_param(s.m, 0)[0] == w0);
    CHECK(stoke_model_grad(s.m, 1)[2] == 0); /* the skipped step's gradients are dropped */
    CHECK_INT_EQ(stoke_model_step_count(s.m), 2000);
    for (int k = 0; k < 1999; k++)
        failed += stoke_model_step(s.m, 0.1, 1, &applied) != STOKE_OK || !applied;
    CHECK_INT_EQ(failed, 0);
    CHECK(stoke_model_loss_scale(s.m) == 65536.0f);
    CHECK(stoke_model_step(s.m, 0.1, 1, &applied) == STOKE_OK && applied);
    CHECK(stoke_model_loss_scale(s.m) == 131072.0f);
    stepper_free(&s);
}

/* The schedule's shape and its warm-up convention, lr (step + 1) / W (see
 * docs/nn-training-math.md), without torch. */
static void test_lr_schedule(void)
{
    stoke_lr_schedule c = {.kind = STOKE_LR_CONSTANT, .lr = 0.1, .warmup_steps = 4};
    const double want[6] = {0.025, 0.05, 0.075, 0.1, 0.1, 0.1};
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(stoke_lr_at(&c, i), want[i], 1e-15);
    c.warmup_steps = 0;
    CHECK(stoke_lr_at(&c, 0) == 0.1 && stoke_lr_at(&c, 1000) == 0.1);
    stoke_lr_schedule cos = {
        .kind = STOKE_LR_COSINE, .lr = 0.1, .warmup_steps = 10, .total_steps = 30, .min_lr = 0.001};
    CHECK_NEAR(stoke_lr_at(&cos, 0), 0.01, 1e-15);
    CHECK_NEAR(stoke_lr_at(&cos, 9), 0.1, 1e-15);
    CHECK_NEAR(stoke_lr_at(&cos, 10), 0.1, 1e-15);
    CHECK_NEAR(stoke_lr_at(&cos, 20), 0.001 + 0.099 * 0.5, 1e-15);
    CHECK_NEAR(stoke_lr_at(&cos, 30), 0.001, 1e-15);
    CHECK_NEAR(stoke_lr_at(&cos, 1000), 0.001, 1e-15); /* stays at min_lr past the end */
    stoke_lr_schedule st = {.kind = STOKE_LR_STEP, .lr = 1, .step_size = 2, .gamma = 0.5};
    CHECK(stoke_lr_at(&st, 1) == 1 && stoke_lr_at(&st, 2) == 0.5 && stoke_lr_at(&st, 5) == 0.25);
}

/* ---- against torch ------------------------------------------------------------------- */

enum { MAX_ROWS = 32 };

typedef struct expect {
    char name[48];
    size_t n;
    double *v;
    double rel, floor_; /* |ours - torch| <= rel * max(|torch|, floor_) */
} expect;

static expect rows[MAX_ROWS];
static int nrows;

static expect *add_row(const char *name, double rel, double floor_, size_t cap)
{
    expect *e = &rows[nrows++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->n = 0;
    e->v = malloc(cap * sizeof *e->v);
    e->rel = rel;
    e->floor_ = floor_;
    return e;
}

static void put(FILE *f, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.9g ", (double)x[i]);
    fputc('\n', f);
}

static void case_ce(FILE *f, float eps)
{
    enum { CB = 5, CK = 7 };
    float x[CB * CK], d[CB * CK] = {0}, loss = 0;
    int32_t t[CB];
    fill(x, CB * CK, -4, 4);
    for (int b = 0; b < CB; b++)
        t[b] = (int32_t)(rng_next() % CK);
    fprintf(f, "ce %d %d %.9g\n", CB, CK, (double)eps);
    put(f, x, CB * CK);
    for (int b = 0; b < CB; b++)
        fprintf(f, "%d ", (int)t[b]);
    fputc('\n', f);
    CHECK_INT_EQ(cpu_cross_entropy(x, t, CB, CK, eps, 1.0f, &loss, d), STOKE_OK);
    /* torch works in float32, we sum in float64: 1e-6 relative, floored at 0.1 (so 1e-7
     * absolute) since a gradient entry (p - q) / B is a difference of float32
     * probabilities that torch rounds at about 1e-7 */
    expect *e =
        add_row(eps > 0 ? "cross-entropy (smoothing)" : "cross-entropy", 1e-6, 0.1, 1 + CB * CK);
    e->v[e->n++] = loss;
    for (int i = 0; i < CB * CK; i++)
        e->v[e->n++] = d[i];
}

static void case_pg(FILE *f, int cols, float clip, float beta)
{
    enum { CB = 8, CK = 6 };
    float x[CB * CK], t[CB * 3], d[CB * CK] = {0}, loss = 0;
    fill(x, CB * CK, -4, 4);
    make_pg_targets(x, CB, CK, cols, t);
    fprintf(f, "pg %d %d %d %.9g %.9g\n", CB, CK, cols, (double)clip, (double)beta);
    put(f, x, CB * CK);
    put(f, t, (size_t)CB * cols);
    CHECK_INT_EQ(cpu_policy_gradient(x, t, CB, CK, cols, clip, beta, 1.0f, &loss, d), STOKE_OK);
    /* as cross-entropy: torch's float32 softmax rounds at ~1e-7 */
    expect *e = add_row(cols == 3 ? "policy gradient (PPO clip)" : "policy gradient", 1e-6, 0.1,
                        1 + CB * CK);
    e->v[e->n++] = loss;
    for (int i = 0; i < CB * CK; i++)
        e->v[e->n++] = d[i];
}

enum { STEPS = 6 };

/* STEPS optimizer steps of a model (in -> hidden -> 3) through stoke_model_step, its
 * parameters as one flat tensor for torch (the updates are element-wise). SGD: h1..h3
 * momentum, weight decay, nesterov; AdamW: beta1, beta2, eps, weight decay. */
static void case_step(FILE *f, const char *name, int adam, double lr, float h1, float h2, float h3,
                      float h4, int64_t in, int64_t hidden)
{
    stoke_optim o =
        adam ? (stoke_optim){.kind = STOKE_ADAMW,
                             .beta1 = h1,
                             .beta2 = h2,
                             .eps = h3,
                             .weight_decay = h4}
             : (stoke_optim){
                   .kind = STOKE_SGD, .momentum = h1, .weight_decay = h2, .nesterov = h3 != 0};
    stepper s;
    if (!stepper_new(&s, in, hidden, STOKE_PREC_FP32, o))
        return;
    size_t n = s.total;
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    fill(p, n, -1, 1);
    if (adam)
        fprintf(f, "adamw %.17g %.9g %.9g %.9g %.9g %zu %d\n", lr, (double)h1, (double)h2,
                (double)h3, (double)h4, n, STEPS);
    else /* torch's order: lr, momentum, dampening (0), weight decay, nesterov */
        fprintf(f, "sgd %.17g %.9g 0 %.9g %.9g %zu %d\n", lr, (double)h1, (double)h2, (double)h3, n,
                STEPS);
    put(f, p, n);
    set_params(&s, p);
    for (int t = 1; t <= STEPS; t++) {
        fill(g, n, -1, 1);
        if (t == 3)
            g[5] = 1e-4f; /* a tiny gradient: AdamW's eps matters */
        put(f, g, n);
        set_grads(&s, g, 1.0f);
        bool applied = false;
        CHECK(stoke_model_step(s.m, lr, 1, &applied) == STOKE_OK && applied);
    }
    /* parameters of size ~1 after 6 steps: 1e-6 relative, floored at 1 (1e-6 absolute),
     * since a parameter near 0 is a cancellation of terms of size ~1 that torch rounds
     * in float32 with FMAs and we without; the step takes lr as a float */
    expect *e = add_row(name, 1e-6, 1.0, n);
    get_params(&s, p);
    for (size_t i = 0; i < n; i++)
        e->v[e->n++] = p[i];
    free(p), free(g);
    stepper_free(&s);
}

/* Clipping inside stoke_model_step: gradients written with a loss scale of 1024 and
 * accumulated over 2 passes, clipped to max_norm, then SGD with lr 1 from zero weights,
 * so the weights come out as minus the clipped gradients; torch's clip_grad_norm_ sees
 * the unscaled gradients. */
static void case_clip(FILE *f, double max_norm, float spread)
{
    stepper s;
    if (!stepper_new(&s, 4, 5, STOKE_PREC_FP32,
                     (stoke_optim){.kind = STOKE_SGD, .clip_norm = (float)max_norm}))
        return;
    size_t n = s.total;
    float *g = malloc(n * sizeof *g), *p = calloc(n, sizeof *p);
    fill(g, n, -spread, spread);
    fprintf(f, "clip %.17g %d", max_norm, s.np);
    for (int i = 0; i < s.np; i++)
        fprintf(f, " %zu", param_elems(&s, i));
    fputc('\n', f);
    for (int i = 0, o = 0; i < s.np; i++) {
        put(f, g + o, param_elems(&s, i));
        o += (int)param_elems(&s, i);
    }
    set_params(&s, p);
    stoke_model_set_loss_scale(s.m, 1024.0f);
    set_grads(&s, g, 2048.0f);
    CHECK(stoke_model_step(s.m, 1.0, 2, NULL) == STOKE_OK);
    expect *e =
        add_row(max_norm < 1 ? "clip (clipped)" : "clip (under the limit)", 1e-6, 1e-3, n + 1);
    e->v[e->n++] = stoke_model_grad_norm(s.m);
    get_params(&s, p);
    for (size_t i = 0; i < n; i++)
        e->v[e->n++] = -p[i];
    free(g), free(p);
    stepper_free(&s);
}

static void case_sched(FILE *f, const char *name, stoke_lr_schedule s, int nsteps)
{
    fprintf(f, "sched %d %.17g %lld %.17g %lld %.17g %lld %d\n", (int)s.kind, s.lr,
            (long long)s.step_size, s.gamma, (long long)s.total_steps, s.min_lr,
            (long long)s.warmup_steps, nsteps);
    /* torch's recursive forms drift by rounding only: 1e-9 relative of the base lr */
    expect *e = add_row(name, 1e-9, s.lr, (size_t)nsteps);
    for (int i = 0; i < nsteps; i++)
        e->v[e->n++] = stoke_lr_at(&s, i);
}

static void test_against_torch(void)
{
    char in[] = "/tmp/stoke-nn-optim-in-XXXXXX", out[64];
    int fd = mkstemp(in);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    snprintf(out, sizeof out, "%s.out", in);
    FILE *f = fdopen(fd, "w");

    case_ce(f, 0.0f);
    case_ce(f, 0.1f);
    case_ce(f, 0.35f);
    case_pg(f, 2, 0.0f, 0.0f);
    case_pg(f, 2, 0.0f, 0.01f);
    case_pg(f, 3, 0.2f, 0.0f);
    case_pg(f, 3, 0.15f, 0.02f); /* edges 0.85 and 1.15, away from the ratios */
    case_step(f, "sgd", 0, 0.1, 0.0f, 0.0f, 0, 0, 5, 6);
    case_step(f, "sgd momentum", 0, 0.05, 0.9f, 0.0f, 0, 0, 5, 6);
    case_step(f, "sgd momentum wd", 0, 0.05, 0.9f, 1e-2f, 0, 0, 5, 6);
    case_step(f, "sgd nesterov wd", 0, 0.05, 0.9f, 5e-4f, 1, 0, 5, 6);
    case_step(f, "sgd wd only", 0, 0.2, 0.0f, 0.1f, 0, 0, 5, 6);
    /* a first weight of 64 x 1040 = 66,560 elements: SGD's threaded blocks, the last
     * one partial */
    case_step(f, "sgd momentum wd (threaded)", 0, 0.05, 0.9f, 1e-2f, 0, 0, 64, 1040);
    case_step(f, "adamw defaults", 1, 1e-3, 0.9f, 0.999f, 1e-8f, 1e-2f, 5, 6);
    case_step(f, "adamw large lr, wd", 1, 0.05, 0.8f, 0.99f, 1e-6f, 0.1f, 5, 6);
    case_step(f, "adamw no wd", 1, 3e-3, 0.9f, 0.999f, 1e-8f, 0.0f, 5, 6);
    case_step(f, "adamw eps 1e-2", 1, 0.1, 0.9f, 0.999f, 1e-2f, 0.0f, 5, 6);
    case_clip(f, 0.5, 1.0f);
    case_clip(f, 100.0, 1.0f);
    case_sched(f, "lr constant", (stoke_lr_schedule){.kind = STOKE_LR_CONSTANT, .lr = 0.1}, 12);
    case_sched(f, "lr step",
               (stoke_lr_schedule){.kind = STOKE_LR_STEP, .lr = 0.1, .step_size = 4, .gamma = 0.5},
               20);
    case_sched(
        f, "lr cosine",
        (stoke_lr_schedule){.kind = STOKE_LR_COSINE, .lr = 0.1, .total_steps = 25, .min_lr = 1e-3},
        26);
    case_sched(f, "lr warm-up + cosine",
               (stoke_lr_schedule){
                   .kind = STOKE_LR_COSINE, .lr = 0.1, .total_steps = 30, .warmup_steps = 6},
               31);
    case_sched(
        f, "lr warm-up + step",
        (stoke_lr_schedule){
            .kind = STOKE_LR_STEP, .lr = 0.05, .step_size = 5, .gamma = 0.1, .warmup_steps = 4},
        22);
    case_sched(f, "lr warm-up + constant",
               (stoke_lr_schedule){.kind = STOKE_LR_CONSTANT, .lr = 0.02, .warmup_steps = 5}, 12);
    case_sched(f, "lr warm-up 1 + cosine",
               (stoke_lr_schedule){.kind = STOKE_LR_COSINE,
                                   .lr = 0.1,
                                   .total_steps = 10,
                                   .min_lr = 1e-3,
                                   .warmup_steps = 1},
               11);
    fclose(f);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/nn_loss_optim_ref.py %s %s", STOKE_TEST_DATA, in,
             out);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s failed (%d)", cmd, rc);
    FILE *r = fopen(out, "r");
    CHECK(r != NULL);
    if (r) {
        for (int i = 0; i < nrows; i++) {
            expect *e = &rows[i];
            size_t bad = 0, first = 0;
            double worst_a = 0, worst_b = 0;
            for (size_t j = 0; j < e->n; j++) {
                double v;
                if (fscanf(r, "%lf", &v) != 1) {
                    CHECK_MSG(0, "%s: torch gave fewer than %zu values", e->name, e->n);
                    bad = (size_t)-1;
                    break;
                }
                if (!close_rel(e->v[j], v, e->rel, e->floor_) && bad++ == 0) {
                    first = j;
                    worst_a = e->v[j];
                    worst_b = v;
                }
            }
            if (bad == (size_t)-1)
                break;
            CHECK_MSG(bad == 0, "%s: %zu of %zu values differ from torch, first [%zu] %.9g vs %.9g",
                      e->name, bad, e->n, first, worst_a, worst_b);
        }
        fclose(r);
    }
    unlink(in);
    unlink(out);
    for (int i = 0; i < nrows; i++)
        free(rows[i].v);
}

int main(int argc, char **argv)
{
    CHECK_TORCH_PART(argc, argv, test_against_torch);
    test_cross_entropy();
    test_policy_gradient();
    test_pair_losses();
    test_metrics();
    test_optim_kernels();
    test_sgd_threaded();
    test_backend_passes();
    test_step_large();
    test_step_loss_scale();
    test_lr_schedule();
    return CHECK_DONE();
}
