/* test_nn_loss_optim.c - the CPU losses (the policy gradient with PPO's clip
 * included) and metrics against float64 references and
 * finite differences; SGD, AdamW, clipping and the lr schedules against PyTorch
 * (Debian's python3-torch, through tests/nn_loss_optim_ref.py). */
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
#include "nn/cpu/optim.h"

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
            CHECK_MSG(fabs(d[i] - fd) <= 1e-6, "ce eps %g grad %d: %.9g vs %.9g", eps, i,
                      d[i], fd);
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
    const struct { int cols; float clip, beta; } cases[] = {
        {2, 0, 0}, {2, 0, 0.05f}, {3, 0.2f, 0}, {3, 0.2f, 0.05f}};
    for (int c = 0; c < 4; c++) {
        int cols = cases[c].cols;
        double clip = cases[c].clip, beta = cases[c].beta;
        make_pg_targets(x, PB, PK, cols, t);
        for (int i = 0; i < PB * cols; i++)
            td[i] = t[i];
        for (int i = 0; i < PN; i++)
            d[i] = 0.25f;
        float loss = 0;
        CHECK_INT_EQ(cpu_policy_gradient(x, t, PB, PK, cols, cases[c].clip, cases[c].beta, 3.0f,
                                         &loss, d), STOKE_OK);
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
    const struct { int col; float v; const char *msg; } bad[] = {
        {0, 5.0f, "sample 3 has action 5, not a whole number in [0, 5)"},
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
    float lg[4 * 3] = {1, 3, 3, /* argmax 1 */ 2, 2, 2, /* 0 */ NAN, 0.5f, 0.25f, /* 1 */
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

/* ---- optimizers, clipping, schedules without torch ------------------------------------ */

static void test_optim_local(void)
{
    /* SGD momentum from a zero buffer equals the step-1 rule (buf = g) */
    float p1[8], p2[8], g[8], b1[8], b2[8] = {0};
    fill(p1, 8, -1, 1);
    fill(g, 8, -1, 1);
    memcpy(p2, p1, sizeof p1);
    cpu_sgd_config c = {.momentum = 0.9f, .weight_decay = 1e-2f, .nesterov = 1};
    CHECK_INT_EQ(cpu_sgd_check(&c), STOKE_OK);
    cpu_sgd_step(&c, 0.1, 1, p1, g, b1, 8);
    cpu_sgd_step(&c, 0.1, 2, p2, g, b2, 8);
    CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(b1, b2, sizeof b1) == 0);

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

    /* global norm over several arrays, and clipping */
    float x[5] = {3, 0, 0, 0, 0}, y[3] = {0, 4, 0};
    float *arrs[2] = {x, y};
    size_t sizes[2] = {5, 3};
    CHECK_NEAR(cpu_global_norm((const float *const *)arrs, sizes, 2), 5.0, 1e-12);
    bool fin = false;
    CHECK_NEAR(cpu_sum_squares(x, 5, &fin), 9.0, 1e-12);
    CHECK(fin);
    double pre = cpu_clip_grad_norm(arrs, sizes, 2, 10.0); /* under the limit: untouched */
    CHECK_NEAR(pre, 5.0, 1e-12);
    CHECK(x[0] == 3 && y[1] == 4);
    pre = cpu_clip_grad_norm(arrs, sizes, 2, 1.0);
    CHECK_NEAR(pre, 5.0, 1e-12);
    CHECK_NEAR(cpu_global_norm((const float *const *)arrs, sizes, 2), 1.0, 1e-6);
    y[2] = INFINITY;
    x[0] = 0.5f;
    pre = cpu_clip_grad_norm(arrs, sizes, 2, 1.0);
    CHECK(isinf(pre) && x[0] == 0.5f); /* non-finite: left alone for the caller to skip */
    cpu_sum_squares(y, 3, &fin);
    CHECK(!fin);
    y[2] = NAN;
    cpu_sum_squares(y, 3, &fin);
    CHECK(!fin);

    /* schedules: checks of the fields, and shapes without torch */
    cpu_lr_schedule s = {.kind = CPU_LR_COSINE, .base_lr = 0.1, .total_steps = 10,
                         .min_lr = 0.001, .warmup_steps = 10, .warmup_start_factor = 0.1};
    CHECK_INT_EQ(cpu_lr_check(&s), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "total_steps");
    s.total_steps = 30;
    CHECK_INT_EQ(cpu_lr_check(&s), STOKE_OK);
    CHECK_NEAR(cpu_lr_at(&s, 0), 0.01, 1e-15);
    CHECK_NEAR(cpu_lr_at(&s, 10), 0.1, 1e-15);
    CHECK_NEAR(cpu_lr_at(&s, 30), 0.001, 1e-15);
    CHECK_NEAR(cpu_lr_at(&s, 1000), 0.001, 1e-15); /* stays at min_lr past the end */
    s = (cpu_lr_schedule){.kind = CPU_LR_STEP, .base_lr = 1, .step_size = 0, .gamma = 0.5};
    CHECK_INT_EQ(cpu_lr_check(&s), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "step_size");
    s.kind = (cpu_lr_kind)9;
    s.step_size = 1;
    CHECK_INT_EQ(cpu_lr_check(&s), STOKE_ERR_ARG);
}

/* ---- against torch ------------------------------------------------------------------- */

enum { MAX_ROWS = 32, MAX_ROW = 512 };

typedef struct expect {
    char name[48];
    int n;
    double v[MAX_ROW];
    double rel, floor_; /* |ours - torch| <= rel * max(|torch|, floor_) */
} expect;

static expect rows[MAX_ROWS];
static int nrows;

static expect *add_row(const char *name, double rel, double floor_)
{
    expect *e = &rows[nrows++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->n = 0;
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
    expect *e = add_row(eps > 0 ? "cross-entropy (smoothing)" : "cross-entropy", 1e-6, 0.1);
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
    expect *e = add_row(cols == 3 ? "policy gradient (PPO clip)" : "policy gradient", 1e-6, 0.1);
    e->v[e->n++] = loss;
    for (int i = 0; i < CB * CK; i++)
        e->v[e->n++] = d[i];
}

enum { PN = 37, STEPS = 6 };

static void case_optim(FILE *f, const char *name, int adam, double lr, float h1, float h2,
                       float h3, float h4)
{
    float p[PN], g[PN], s1[PN] = {0}, s2[PN] = {0};
    fill(p, PN, -1, 1);
    if (adam)
        fprintf(f, "adamw %.17g %.9g %.9g %.9g %.9g %d %d\n", lr, (double)h1, (double)h2,
                (double)h3, (double)h4, PN, STEPS);
    else
        fprintf(f, "sgd %.17g %.9g %.9g %.9g %.9g %d %d\n", lr, (double)h1, (double)h2,
                (double)h3, (double)h4, PN, STEPS);
    put(f, p, PN);
    cpu_sgd_config sc = {.momentum = h1, .dampening = h2, .weight_decay = h3,
                         .nesterov = h4 != 0};
    cpu_adamw_config ac = {.beta1 = h1, .beta2 = h2, .eps = h3, .weight_decay = h4};
    CHECK_INT_EQ(adam ? cpu_adamw_check(&ac) : cpu_sgd_check(&sc), STOKE_OK);
    for (int s = 1; s <= STEPS; s++) {
        fill(g, PN, -1, 1);
        if (s == 3)
            g[5] = 1e-4f; /* a tiny gradient: AdamW's eps matters */
        put(f, g, PN);
        if (adam)
            cpu_adamw_step(&ac, lr, s, p, g, s1, s2, PN);
        else
            cpu_sgd_step(&sc, lr, s, p, g, s1, PN);
    }
    /* parameters of size ~1 after 6 steps: 1e-6 relative, floored at 1 (1e-6 absolute),
     * since a parameter near 0 is a cancellation of terms of size ~1 that torch rounds
     * in float32 with FMAs and we without */
    expect *e = add_row(name, 1e-6, 1.0);
    for (int i = 0; i < PN; i++)
        e->v[e->n++] = p[i];
}

static void case_clip(FILE *f, double max_norm, float spread)
{
    float a[13], b[1], c[20];
    float *arrs[3] = {a, b, c};
    size_t sizes[3] = {13, 1, 20};
    fill(a, 13, -spread, spread);
    fill(b, 1, -spread, spread);
    fill(c, 20, -spread, spread);
    fprintf(f, "clip %.17g 3 13 1 20\n", max_norm);
    put(f, a, 13);
    put(f, b, 1);
    put(f, c, 20);
    double norm = cpu_clip_grad_norm(arrs, sizes, 3, max_norm);
    expect *e = add_row(max_norm < 1 ? "clip (clipped)" : "clip (under the limit)", 1e-6, 1e-3);
    e->v[e->n++] = norm;
    for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < sizes[i]; j++)
            e->v[e->n++] = arrs[i][j];
}

static void case_sched(FILE *f, const char *name, cpu_lr_schedule s, int nsteps)
{
    CHECK_INT_EQ(cpu_lr_check(&s), STOKE_OK);
    fprintf(f, "sched %d %.17g %lld %.17g %lld %.17g %lld %.17g %d\n", (int)s.kind, s.base_lr,
            (long long)s.step_size, s.gamma, (long long)s.total_steps, s.min_lr,
            (long long)s.warmup_steps, s.warmup_start_factor, nsteps);
    /* torch's recursive forms drift by rounding only: 1e-9 relative of base_lr */
    expect *e = add_row(name, 1e-9, s.base_lr);
    for (int i = 0; i < nsteps; i++)
        e->v[e->n++] = cpu_lr_at(&s, i);
}

static void test_against_torch(void)
{
    if (!check_have_torch())
        return;
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
    case_pg(f, 3, 0.1f, 0.02f);
    case_optim(f, "sgd", 0, 0.1, 0.0f, 0.0f, 0.0f, 0);
    case_optim(f, "sgd momentum", 0, 0.05, 0.9f, 0.0f, 0.0f, 0);
    case_optim(f, "sgd momentum dampening wd", 0, 0.05, 0.9f, 0.3f, 1e-2f, 0);
    case_optim(f, "sgd nesterov wd", 0, 0.05, 0.9f, 0.0f, 5e-4f, 1);
    case_optim(f, "sgd wd only", 0, 0.2, 0.0f, 0.0f, 0.1f, 0);
    case_optim(f, "adamw defaults", 1, 1e-3, 0.9f, 0.999f, 1e-8f, 1e-2f);
    case_optim(f, "adamw large lr, wd", 1, 0.05, 0.8f, 0.99f, 1e-6f, 0.1f);
    case_optim(f, "adamw no wd", 1, 3e-3, 0.9f, 0.999f, 1e-8f, 0.0f);
    case_optim(f, "adamw eps 1e-2", 1, 0.1, 0.9f, 0.999f, 1e-2f, 0.0f);
    case_clip(f, 0.5, 1.0f);
    case_clip(f, 100.0, 1.0f);
    case_sched(f, "lr constant", (cpu_lr_schedule){.kind = CPU_LR_CONSTANT, .base_lr = 0.1}, 12);
    case_sched(f, "lr step",
               (cpu_lr_schedule){.kind = CPU_LR_STEP, .base_lr = 0.1, .step_size = 4,
                                 .gamma = 0.5},
               20);
    case_sched(f, "lr cosine",
               (cpu_lr_schedule){.kind = CPU_LR_COSINE, .base_lr = 0.1, .total_steps = 25,
                                 .min_lr = 1e-3},
               26);
    case_sched(f, "lr warm-up + cosine",
               (cpu_lr_schedule){.kind = CPU_LR_COSINE, .base_lr = 0.1, .total_steps = 30,
                                 .min_lr = 0, .warmup_steps = 6, .warmup_start_factor = 0.2},
               31);
    case_sched(f, "lr warm-up + step",
               (cpu_lr_schedule){.kind = CPU_LR_STEP, .base_lr = 0.05, .step_size = 5,
                                 .gamma = 0.1, .warmup_steps = 4, .warmup_start_factor = 0.25},
               22);
    case_sched(f, "lr warm-up + constant",
               (cpu_lr_schedule){.kind = CPU_LR_CONSTANT, .base_lr = 0.02, .warmup_steps = 5,
                                 .warmup_start_factor = 0.2},
               12);
    fclose(f);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/nn_loss_optim_ref.py %s %s", STOKE_TEST_DATA,
             in, out);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s failed (%d)", cmd, rc);
    FILE *r = fopen(out, "r");
    CHECK(r != NULL);
    if (r) {
        for (int i = 0; i < nrows; i++) {
            expect *e = &rows[i];
            int bad = 0, first = -1;
            double worst_a = 0, worst_b = 0;
            for (int j = 0; j < e->n; j++) {
                double v;
                if (fscanf(r, "%lf", &v) != 1) {
                    CHECK_MSG(0, "%s: torch gave fewer than %d values", e->name, e->n);
                    bad = -1;
                    break;
                }
                if (!close_rel(e->v[j], v, e->rel, e->floor_) && bad++ == 0) {
                    first = j;
                    worst_a = e->v[j];
                    worst_b = v;
                }
            }
            if (bad < 0)
                break;
            CHECK_MSG(bad == 0, "%s: %d of %d values differ from torch, first [%d] %.9g vs %.9g",
                      e->name, bad, e->n, first, worst_a, worst_b);
        }
        fclose(r);
    }
    unlink(in);
    unlink(out);
}

int main(void)
{
    test_cross_entropy();
    test_policy_gradient();
    test_pair_losses();
    test_metrics();
    test_optim_local();
    test_against_torch();
    return CHECK_DONE();
}
