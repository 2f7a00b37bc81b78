/* test_nn_norm_eltwise.c - the CPU norm and element-wise kernels: every forward against
 * a float64 reference written here, every backward against float64 central
 * differences of that reference, accumulation (+=) semantics, thread-count
 * independence, dropout's mask statistics, embedding's index errors, and torch
 * (Debian's python3-torch) for GELU, layer norm and batch norm.
 *
 * Tolerances (|got - want| <= atol + rtol |want|), fp32 kernels against float64:
 *   activations forward atol 1e-6 rtol 2e-6 (the fast exp/erf/tanh: <= 2.5e-7 abs)
 *   norms/softmax forward atol 1e-5 rtol 1e-5
 *   backward vs finite differences atol 1e-4 rtol 1e-3 (fp32 sums of ~100 terms)
 *   torch: atol 1e-5 (forward), 1e-4 (gradients); torch itself computes in fp32. */
#include <omp.h>

#include "nn/cpu/dense.h"
#include <stdint.h>

#include "nn/cpu/eltwise.h"
#include "nn/cpu/norm.h"
#include "nn_norm_attn_util.h"

/* ---- the fast math: stated max errors ---- */

static void case_fast_math(void)
{
    double e_exp = 0.0, e_erfc = 0.0, e_tanh = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = (float)(-87.0 + 175.0 * i / 2000000.0);
        double want = exp((double)x);
        double rel = fabs(cpu_fast_expf(x) - want) / want;
        e_exp = rel > e_exp ? rel : e_exp;
    }
    for (int i = 0; i <= 1000000; i++) {
        float x = (float)(10.0 * i / 1000000.0);
        double d = fabs(cpu_fast_erfcf_pos(x) - erfc((double)x));
        e_erfc = d > e_erfc ? d : e_erfc;
        float t = (float)(-20.0 + 40.0 * i / 1000000.0);
        d = fabs(cpu_fast_tanhf(t) - tanh((double)t));
        e_tanh = d > e_tanh ? d : e_tanh;
    }
    fprintf(stderr, "fast math max error: exp rel %.3g, erfc abs %.3g, tanh abs %.3g\n", e_exp,
            e_erfc, e_tanh);
    CHECK_MSG(e_exp <= 1.5e-7, "exp relative error %g", e_exp);
    CHECK_MSG(e_erfc <= 2.5e-7, "erfc absolute error %g", e_erfc);
    CHECK_MSG(e_tanh <= 1.5e-7, "tanh absolute error %g", e_tanh);
    /* the clamps: no inf, no NaN, no subnormal at the ends */
    CHECK(isfinite(cpu_fast_expf(1000.0f)) && cpu_fast_expf(1000.0f) > 1e38f);
    CHECK(cpu_fast_expf(-1000.0f) >= 0.0f && cpu_fast_expf(-1000.0f) < 1e-37f);
    CHECK(cpu_fast_tanhf(50.0f) == 1.0f && cpu_fast_tanhf(-50.0f) == -1.0f);
}

/* ---- activations ---- */

enum act { ACT_RELU, ACT_GELU, ACT_GELU_TANH, ACT_TANH, ACT_SIGMOID, ACT_COUNT };
static const char *const act_name[] = {"relu", "gelu", "gelu_tanh", "tanh", "sigmoid"};

static double act_ref(int a, double x)
{
    switch (a) {
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case ACT_TANH: return tanh(x);
    default: return 1 / (1 + exp(-x));
    }
}

static void act_forward(int a, float *out, const float *inp, size_t n)
{
    switch (a) {
    case ACT_RELU: cpu_relu_forward(out, inp, n); break;
    case ACT_GELU:
    case ACT_GELU_TANH: cpu_gelu_forward(out, inp, n, a == ACT_GELU_TANH); break;
    case ACT_TANH: cpu_tanh_forward(out, inp, n); break;
    default: cpu_sigmoid_forward(out, inp, n);
    }
}

/* Calls the backward with the buffer its contract names (input or output). */
static void act_backward(int a, float *dinp, const float *dout, const float *inp, const float *out,
                         size_t n)
{
    switch (a) {
    case ACT_RELU: cpu_relu_backward(dinp, dout, out, n); break;
    case ACT_GELU:
    case ACT_GELU_TANH: cpu_gelu_backward(dinp, dout, inp, n, a == ACT_GELU_TANH); break;
    case ACT_TANH: cpu_tanh_backward(dinp, dout, out, n); break;
    default: cpu_sigmoid_backward(dinp, dout, out, n);
    }
}

typedef struct act_ctx {
    int a;
    const double *r;
} act_ctx;

static double act_loss(const double *x, void *vctx)
{
    act_ctx *c = vctx;
    /* element-wise: the loss of element i only; numgrad calls it per element */
    return act_ref(c->a, x[0]) * c->r[0];
}

/* Backward twice into a random starting gradient: the first call adds g, the
 * second 2g (the accumulation contract). */
static void check_accumulates(const char *what, float *grad_buf, const float *init, const double *g,
                              size_t n, int call, double atol, double rtol)
{
    double *want = malloc(n * sizeof *want);
    float *delta = falloc(n);
    for (size_t i = 0; i < n; i++) {
        delta[i] = grad_buf[i] - init[i];
        want[i] = g[i] * call;
    }
    char label[128];
    snprintf(label, sizeof label, "%s (backward call %d)", what, call);
    check_close(label, delta, want, n, atol * call, rtol);
    free(want);
    free(delta);
}

static void case_activations(void)
{
    const size_t n = 3000; /* crosses the vector tails; below the parallel cutoff */
    float *x = falloc(n), *y = falloc(n), *dy = falloc(n), *dx = falloc(n), *dx0 = falloc(n);
    for (int a = 0; a < ACT_COUNT; a++) {
        fill_away(x, n, 6.0);
        fill(dy, n, -1, 1);
        fill(dx0, n, -1, 1);
        act_forward(a, y, x, n);
        double *want = malloc(n * sizeof *want), *g = malloc(n * sizeof *g);
        for (size_t i = 0; i < n; i++) {
            want[i] = act_ref(a, x[i]);
            double xi = x[i], ri = dy[i];
            act_ctx c = {a, &ri};
            numgrad(act_loss, &c, &xi, 1, &g[i]);
        }
        char label[64];
        snprintf(label, sizeof label, "%s forward", act_name[a]);
        check_close(label, y, want, n, 1e-6, 2e-6);
        memcpy(dx, dx0, n * sizeof *dx);
        snprintf(label, sizeof label, "%s backward", act_name[a]);
        for (int call = 1; call <= 2; call++) {
            act_backward(a, dx, dy, x, y, n);
            check_accumulates(label, dx, dx0, g, n, call, 1e-5, 1e-4);
        }
        /* forward in place where the backward reads the output */
        if (a != ACT_GELU && a != ACT_GELU_TANH) {
            float *z = fdup(x, n);
            act_forward(a, z, z, n);
            CHECK_MSG(memcmp(z, y, n * sizeof *z) == 0, "%s in place", act_name[a]);
            free(z);
        }
        free(want);
        free(g);
    }
    /* extremes stay finite */
    float ext[4] = {-200.0f, -90.0f, 90.0f, 200.0f}, eo[4];
    for (int a = 0; a < ACT_COUNT; a++) {
        act_forward(a, eo, ext, 4);
        for (int i = 0; i < 4; i++) {
            CHECK_MSG(isfinite(eo[i]), "%s(%g) = %g", act_name[a], ext[i], eo[i]);
        }
    }
    free(x), free(y), free(dy), free(dx), free(dx0);
}

/* ---- dropout ---- */

static void case_dropout(void)
{
    const size_t n = 100000;
    const float p = 0.3f;
    float *x = falloc(n), *y1 = falloc(n), *y2 = falloc(n), *dy = falloc(n), *dx = falloc(n);
    fill_away(x, n, 2.0);
    fill(dy, n, -1, 1);
    int saved_threads = omp_get_max_threads();

    cpu_set_threads(1);
    cpu_dropout_forward(y1, x, n, p, 42, 7, 1);
    cpu_set_threads(2);
    cpu_dropout_forward(y2, x, n, p, 42, 7, 1);
    CHECK_MSG(memcmp(y1, y2, n * sizeof *y1) == 0, "dropout mask differs with thread count");

    size_t kept = 0, agree = 0;
    float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) {
        int k = cpu_dropout_keep(42, 7, i, p);
        kept += (size_t)k;
        agree += (size_t)(k ? y1[i] == x[i] * scale : y1[i] == 0.0f);
    }
    CHECK_INT_EQ(agree, n);
    /* keep count ~ Binomial(n, 1 - p): sd = sqrt(n p (1-p)) = 145; 6 sd bound */
    double sd = sqrt((double)n * p * (1.0 - p));
    CHECK_MSG(fabs((double)kept - n * (1.0 - p)) < 6.0 * sd, "kept %zu of %zu at p=%g", kept, n,
              (double)p);

    /* backward: the same mask, recomputed; accumulates */
    double *g = malloc(n * sizeof *g);
    float *dx0 = falloc(n);
    fill(dx0, n, -1, 1);
    memcpy(dx, dx0, n * sizeof *dx);
    for (size_t i = 0; i < n; i++) {
        g[i] = cpu_dropout_keep(42, 7, i, p) ? (double)dy[i] * scale : 0.0;
    }
    for (int call = 1; call <= 2; call++) {
        cpu_dropout_backward(dx, dy, n, p, 42, 7, 1);
        check_accumulates("dropout backward", dx, dx0, g, n, call, 1e-6, 1e-6);
    }

    /* another step or seed gives another mask */
    cpu_dropout_forward(y2, x, n, p, 42, 8, 1);
    CHECK(memcmp(y1, y2, n * sizeof *y1) != 0);
    cpu_dropout_forward(y2, x, n, p, 43, 7, 1);
    CHECK(memcmp(y1, y2, n * sizeof *y1) != 0);
    /* masks of neighbouring steps are uncorrelated: overlap ~ (1-p)^2 */
    size_t both = 0;
    cpu_dropout_forward(y2, x, n, p, 42, 8, 1);
    for (size_t i = 0; i < n; i++) {
        both += (size_t)(y1[i] != 0.0f && y2[i] != 0.0f);
    }
    double q = (1.0 - p) * (1.0 - p);
    CHECK_MSG(fabs((double)both - n * q) < 6.0 * sqrt(n * q * (1 - q)), "overlap %zu", both);

    /* eval and p = 0: identity; p = 1: zeros */
    cpu_dropout_forward(y2, x, n, p, 42, 7, 0);
    CHECK(memcmp(y2, x, n * sizeof *x) == 0);
    cpu_dropout_forward(y2, x, n, 0.0f, 42, 7, 1);
    CHECK(memcmp(y2, x, n * sizeof *x) == 0);
    cpu_dropout_forward(y2, x, n, 1.0f, 42, 7, 1);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        nonzero += y2[i] != 0.0f;
    }
    CHECK_INT_EQ(nonzero, 0);
    memcpy(dx, dx0, n * sizeof *dx);
    cpu_dropout_backward(dx, dy, n, p, 42, 7, 0);
    for (size_t i = 0; i < n; i++) {
        g[i] = dy[i];
    }
    check_accumulates("dropout eval backward", dx, dx0, g, n, 1, 1e-6, 1e-6);
    /* in place */
    memcpy(y2, x, n * sizeof *x);
    cpu_dropout_forward(y2, y2, n, p, 42, 7, 1);
    CHECK(memcmp(y1, y2, n * sizeof *y1) == 0);

    cpu_set_threads(saved_threads);
    free(g), free(dx0);
    free(x), free(y1), free(y2), free(dy), free(dx);
}

/* ---- residual ---- */

static void case_residual(void)
{
    const size_t n = 1000;
    float *a = falloc(n), *b = falloc(n), *y = falloc(n), *dy = falloc(n);
    float *da = falloc(n), *db = falloc(n), *da0 = falloc(n), *db0 = falloc(n);
    fill_away(a, n, 3), fill_away(b, n, 3), fill(dy, n, -1, 1);
    fill(da0, n, -1, 1), fill(db0, n, -1, 1);
    cpu_residual_forward(y, a, b, n);
    double *want = malloc(n * sizeof *want), *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) {
        want[i] = (double)a[i] + b[i];
        g[i] = dy[i];
    }
    check_close("residual forward", y, want, n, 0, 1e-7);
    memcpy(da, da0, n * sizeof *da), memcpy(db, db0, n * sizeof *db);
    for (int call = 1; call <= 2; call++) {
        cpu_residual_backward(da, db, dy, n);
        check_accumulates("residual da", da, da0, g, n, call, 1e-6, 1e-6);
        check_accumulates("residual db", db, db0, g, n, call, 1e-6, 1e-6);
    }
    free(want), free(g);
    free(a), free(b), free(y), free(dy), free(da), free(db), free(da0), free(db0);
}

/* ---- softmax ---- */

typedef struct rows_ctx {
    int N, C;
    const double *r; /* (N, C) weights of the loss */
} rows_ctx;

static void softmax_ref(double *y, const double *x, int N, int C)
{
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int c = 0; c < C; c++) {
            mx = fmax(mx, x[n * C + c]);
        }
        for (int c = 0; c < C; c++) {
            s += exp(x[n * C + c] - mx);
        }
        for (int c = 0; c < C; c++) {
            y[n * C + c] = exp(x[n * C + c] - mx) / s;
        }
    }
}

static double softmax_loss(const double *x, void *vctx)
{
    rows_ctx *c = vctx;
    size_t n = (size_t)c->N * c->C;
    double *y = malloc(n * sizeof *y), l = 0;
    softmax_ref(y, x, c->N, c->C);
    for (size_t i = 0; i < n; i++) {
        l += y[i] * c->r[i];
    }
    free(y);
    return l;
}

static void case_softmax(void)
{
    const int N = 7, C = 37;
    size_t n = (size_t)N * C;
    float *x = falloc(n), *y = falloc(n), *dy = falloc(n), *dx = falloc(n), *dx0 = falloc(n);
    fill_away(x, n, 4), fill(dy, n, -1, 1), fill(dx0, n, -1, 1);
    x[5] += 500.0f; /* a large logit: stability */
    cpu_softmax_forward(y, x, N, C);
    double *xd = to_double(x, n), *rd = to_double(dy, n);
    double *want = malloc(n * sizeof *want), *g = malloc(n * sizeof *g);
    softmax_ref(want, xd, N, C);
    check_close("softmax forward", y, want, n, 1e-6, 1e-5);
    rows_ctx c = {N, C, rd};
    numgrad(softmax_loss, &c, xd, n, g);
    memcpy(dx, dx0, n * sizeof *dx);
    for (int call = 1; call <= 2; call++) {
        cpu_softmax_backward(dx, dy, y, N, C);
        check_accumulates("softmax backward", dx, dx0, g, n, call, 1e-5, 1e-4);
    }
    free(xd), free(rd), free(want), free(g);
    free(x), free(y), free(dy), free(dx), free(dx0);
}

/* ---- embedding ---- */

static void case_embedding(void)
{
    const int N = 2000, V = 7, C = 40; /* N*C over the parallel cutoff; many repeats */
    int32_t *idx = malloc((size_t)N * sizeof *idx);
    for (int i = 0; i < N; i++) {
        idx[i] = (int32_t)(rnd_unit() * V);
    }
    float *table = falloc((size_t)V * C), *out = falloc((size_t)N * C);
    float *dy = falloc((size_t)N * C), *dt = falloc((size_t)V * C), *dt0 = falloc((size_t)V * C);
    fill_away(table, (size_t)V * C, 1), fill(dy, (size_t)N * C, -1, 1);
    fill(dt0, (size_t)V * C, -1, 1);
    CHECK_INT_EQ(cpu_embedding_forward(out, idx, table, N, V, C), STOKE_OK);
    int same = 1;
    for (int i = 0; i < N; i++) {
        same &= memcmp(out + (size_t)i * C, table + (size_t)idx[i] * C, C * sizeof(float)) == 0;
    }
    CHECK_MSG(same, "embedding forward copies the rows");
    double *g = calloc((size_t)V * C, sizeof *g);
    for (int i = 0; i < N; i++) {
        for (int c = 0; c < C; c++) {
            g[(size_t)idx[i] * C + c] += dy[(size_t)i * C + c];
        }
    }
    memcpy(dt, dt0, (size_t)V * C * sizeof *dt);
    int saved_threads = omp_get_max_threads();
    for (int call = 1; call <= 2; call++) {
        CHECK_INT_EQ(cpu_embedding_backward(dt, dy, idx, N, V, C), STOKE_OK);
        /* ~285 fp32 terms per entry */
        check_accumulates("embedding backward", dt, dt0, g, (size_t)V * C, call, 2e-5, 1e-5);
    }
    /* same bits with 1 and 2 threads */
    float *t1 = fdup(dt0, (size_t)V * C), *t2 = fdup(dt0, (size_t)V * C);
    cpu_set_threads(1);
    cpu_embedding_backward(t1, dy, idx, N, V, C);
    cpu_set_threads(2);
    cpu_embedding_backward(t2, dy, idx, N, V, C);
    cpu_set_threads(saved_threads);
    CHECK_MSG(memcmp(t1, t2, (size_t)V * C * sizeof *t1) == 0,
              "embedding backward depends on the thread count");

    /* out of range: an error naming the position and the index; nothing written */
    idx[1234] = 7;
    float *out_copy = fdup(out, (size_t)N * C);
    fill(out, (size_t)N * C, 5, 6);
    memcpy(out_copy, out, (size_t)N * C * sizeof *out);
    CHECK_INT_EQ(cpu_embedding_forward(out, idx, table, N, V, C), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "index 7 at position 1234");
    CHECK(memcmp(out, out_copy, (size_t)N * C * sizeof *out) == 0);
    idx[1234] = -1;
    memcpy(t1, t2, (size_t)V * C * sizeof *t1);
    CHECK_INT_EQ(cpu_embedding_backward(t1, dy, idx, N, V, C), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "index -1 at position 1234");
    CHECK(memcmp(t1, t2, (size_t)V * C * sizeof *t1) == 0);

    free(idx), free(table), free(out), free(dy), free(dt), free(dt0), free(g);
    free(t1), free(t2), free(out_copy);
}

/* ---- layer norm ---- */

static void layernorm_ref(double *y, const double *x, const double *w, const double *b, int N,
                          int C)
{
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) {
            m += r[c];
        }
        m /= C;
        for (int c = 0; c < C; c++) {
            v += (r[c] - m) * (r[c] - m);
        }
        v /= C;
        for (int c = 0; c < C; c++) {
            y[(size_t)n * C + c] = (r[c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
        }
    }
}

/* x = inp (N, C) | weight (C) | bias (C) */
static double layernorm_loss(const double *x, void *vctx)
{
    rows_ctx *c = vctx;
    size_t n = (size_t)c->N * c->C;
    double *y = malloc(n * sizeof *y), l = 0;
    layernorm_ref(y, x, x + n, x + n + c->C, c->N, c->C);
    for (size_t i = 0; i < n; i++) {
        l += y[i] * c->r[i];
    }
    free(y);
    return l;
}

static void case_layernorm(void)
{
    const int N = 6, C = 37;
    size_t n = (size_t)N * C, nx = n + 2 * (size_t)C;
    float *all = falloc(nx); /* inp | weight | bias, as the loss takes them */
    fill_away(all, n, 2);
    for (size_t i = 0; i < n; i += 3) {
        all[i] += 1.5f; /* a non-zero mean */
    }
    fill(all + n, C, 0.5, 1.5);
    fill_away(all + n + C, C, 1);
    const float *x = all, *w = all + n, *b = all + n + C;
    float *y = falloc(n), *mean = falloc(N), *rstd = falloc(N), *dy = falloc(n);
    fill(dy, n, -1, 1);
    cpu_layernorm_forward(y, mean, rstd, x, w, b, N, C, CPU_NORM_EPS);
    double *xd = to_double(all, nx), *rd = to_double(dy, n);
    double *want = malloc(n * sizeof *want), *g = malloc(nx * sizeof *g);
    layernorm_ref(want, xd, xd + n, xd + n + C, N, C);
    check_close("layernorm forward", y, want, n, 1e-5, 1e-5);
    rows_ctx c = {N, C, rd};
    numgrad(layernorm_loss, &c, xd, nx, g);
    float *grads0 = falloc(nx), *grads = falloc(nx); /* dinp | dweight | dbias */
    fill(grads0, nx, -1, 1);
    memcpy(grads, grads0, nx * sizeof *grads);
    for (int call = 1; call <= 2; call++) {
        cpu_layernorm_backward(grads, grads + n, grads + n + C, dy, x, w, mean, rstd, N, C);
        check_accumulates("layernorm dinp", grads, grads0, g, n, call, 1e-4, 1e-3);
        check_accumulates("layernorm dweight", grads + n, grads0 + n, g + n, C, call, 1e-4, 1e-3);
        check_accumulates("layernorm dbias", grads + n + C, grads0 + n + C, g + n + C, C, call,
                          1e-4, 1e-3);
    }

    float *pg = falloc(2 * (size_t)C);
    cpu_layernorm_backward(NULL, pg, pg + C, dy, x, w, mean, rstd, N, C);
    check_close("layernorm dweight, dinp NULL", pg, g + n, C, 1e-4, 1e-3);
    check_close("layernorm dbias, dinp NULL", pg + C, g + n + C, C, 1e-4, 1e-3);
    free(pg);

    /* thread-count independence on a size that runs in parallel */
    {
        const int N2 = 512, C2 = 72;
        size_t n2 = (size_t)N2 * C2;
        float *x2 = falloc(n2), *w2 = falloc(C2), *b2 = falloc(C2), *y2 = falloc(n2);
        float *m2 = falloc(N2), *s2 = falloc(N2), *dy2 = falloc(n2);
        fill_away(x2, n2, 2), fill(w2, C2, 0.5, 1.5), fill_away(b2, C2, 1), fill(dy2, n2, -1, 1);
        float *gr[2];
        int saved_threads = omp_get_max_threads();
        for (int t = 0; t < 2; t++) {
            cpu_set_threads(t + 1);
            gr[t] = falloc(n2 + 2 * (size_t)C2);
            cpu_layernorm_forward(y2, m2, s2, x2, w2, b2, N2, C2, CPU_NORM_EPS);
            cpu_layernorm_backward(gr[t], gr[t] + n2, gr[t] + n2 + C2, dy2, x2, w2, m2, s2, N2, C2);
        }
        cpu_set_threads(saved_threads);
        CHECK_MSG(memcmp(gr[0], gr[1], (n2 + 2 * (size_t)C2) * sizeof(float)) == 0,
                  "layernorm backward depends on the thread count");
        free(gr[0]), free(gr[1]);
        free(x2), free(w2), free(b2), free(y2), free(m2), free(s2), free(dy2);
    }
    free(all), free(y), free(mean), free(rstd), free(dy), free(xd), free(rd), free(want);
    free(g), free(grads0), free(grads);
}

/* ---- batch norm ---- */

typedef struct bn_ctx {
    int B, C, S, train;
    const double *r;            /* (B, C, S) */
    const double *rmean, *rvar; /* eval statistics */
} bn_ctx;

static void batchnorm_ref(double *y, double *bmean, double *bvar, const double *x, const double *w,
                          const double *b, const bn_ctx *c)
{
    int B = c->B, C = c->C, S = c->S;
    for (int ch = 0; ch < C; ch++) {
        double m = 0, v = 0;
        if (c->train) {
            for (int i = 0; i < B; i++) {
                for (int s = 0; s < S; s++) {
                    m += x[((size_t)i * C + ch) * S + s];
                }
            }
            m /= (double)B * S;
            for (int i = 0; i < B; i++) {
                for (int s = 0; s < S; s++) {
                    double d = x[((size_t)i * C + ch) * S + s] - m;
                    v += d * d;
                }
            }
            v /= (double)B * S;
        } else {
            m = c->rmean[ch];
            v = c->rvar[ch];
        }
        if (bmean) {
            bmean[ch] = m, bvar[ch] = v;
        }
        for (int i = 0; i < B; i++) {
            for (int s = 0; s < S; s++) {
                size_t k = ((size_t)i * C + ch) * S + s;
                y[k] = (x[k] - m) / sqrt(v + 1e-5) * w[ch] + b[ch];
            }
        }
    }
}

static double batchnorm_loss(const double *x, void *vctx)
{
    bn_ctx *c = vctx;
    size_t n = (size_t)c->B * c->C * c->S;
    double *y = malloc(n * sizeof *y), l = 0;
    batchnorm_ref(y, NULL, NULL, x, x + n, x + n + c->C, c);
    for (size_t i = 0; i < n; i++) {
        l += y[i] * c->r[i];
    }
    free(y);
    return l;
}

static void batchnorm_case(int B, int C, int S, int train)
{
    size_t n = (size_t)B * C * S, nx = n + 2 * (size_t)C;
    float *all = falloc(nx);
    fill_away(all, n, 2);
    fill(all + n, C, 0.5, 1.5);
    fill_away(all + n + C, C, 1);
    for (size_t i = 0; i < n; i++) {
        all[i] += (float)((i / S) % C); /* channel means differ */
    }
    const float *x = all, *w = all + n, *b = all + n + C;
    float *rm = falloc(C), *rv = falloc(C), *rm0 = falloc(C), *rv0 = falloc(C);
    fill(rm0, C, -0.5, 0.5), fill(rv0, C, 0.5, 2.0);
    memcpy(rm, rm0, C * sizeof *rm), memcpy(rv, rv0, C * sizeof *rv);
    float *y = falloc(n), *sm = falloc(C), *sr = falloc(C), *dy = falloc(n);
    fill(dy, n, -1, 1);
    CHECK_INT_EQ(cpu_batchnorm_forward(y, sm, sr, rm, rv, x, w, b, B, C, S, train, CPU_BN_MOMENTUM,
                                       CPU_NORM_EPS),
                 STOKE_OK);
    double *xd = to_double(all, nx), *rd = to_double(dy, n);
    double *rmd = to_double(rm0, C), *rvd = to_double(rv0, C);
    bn_ctx c = {B, C, S, train, rd, rmd, rvd};
    double *want = malloc(n * sizeof *want), *bm = malloc(C * sizeof *bm),
           *bv = malloc(C * sizeof *bv), *g = malloc(nx * sizeof *g);
    batchnorm_ref(want, bm, bv, xd, xd + n, xd + n + C, &c);
    char label[96];
    snprintf(label, sizeof label, "batchnorm %s (%d,%d,%d) forward", train ? "train" : "eval", B, C,
             S);
    check_close(label, y, want, n, 1e-5, 1e-5);
    /* running statistics: PyTorch's update with the unbiased batch variance */
    double *wm = malloc(C * sizeof *wm), *wv = malloc(C * sizeof *wv);
    for (int ch = 0; ch < C; ch++) {
        double cnt = (double)B * S;
        wm[ch] = train ? 0.9 * rm0[ch] + 0.1 * bm[ch] : rm0[ch];
        wv[ch] = train ? 0.9 * rv0[ch] + 0.1 * bv[ch] * cnt / (cnt - 1) : rv0[ch];
    }
    check_close("batchnorm running_mean", rm, wm, C, 1e-6, 1e-6);
    check_close("batchnorm running_var", rv, wv, C, 1e-6, 1e-6);

    numgrad(batchnorm_loss, &c, xd, nx, g);
    float *grads0 = falloc(nx), *grads = falloc(nx);
    fill(grads0, nx, -1, 1);
    memcpy(grads, grads0, nx * sizeof *grads);
    for (int call = 1; call <= 2; call++) {
        cpu_batchnorm_backward(grads, grads + n, grads + n + C, dy, x, w, sm, sr, B, C, S, train);
        snprintf(label, sizeof label, "batchnorm %s (%d,%d,%d) dinp", train ? "train" : "eval", B,
                 C, S);
        check_accumulates(label, grads, grads0, g, n, call, 1e-4, 1e-3);
        check_accumulates("batchnorm dweight", grads + n, grads0 + n, g + n, C, call, 1e-4, 1e-3);
        check_accumulates("batchnorm dbias", grads + n + C, grads0 + n + C, g + n + C, C, call,
                          1e-4, 1e-3);
    }
    /* no input gradient wanted: dinp NULL, the parameter gradients unchanged */
    float *pg = falloc(2 * (size_t)C);
    cpu_batchnorm_backward(NULL, pg, pg + C, dy, x, w, sm, sr, B, C, S, train);
    check_close("batchnorm dweight, dinp NULL", pg, g + n, C, 1e-4, 1e-3);
    check_close("batchnorm dbias, dinp NULL", pg + C, g + n + C, C, 1e-4, 1e-3);
    free(pg);
    free(all), free(rm), free(rv), free(rm0), free(rv0), free(y), free(sm), free(sr), free(dy);
    free(xd), free(rd), free(rmd), free(rvd), free(want), free(bm), free(bv), free(g), free(wm);
    free(wv), free(grads0), free(grads);
}

/* BatchNorm1d's own column-block path (S = 1) against the general path on the
 * transposed data: (B, C) as (1, C, S = B) has the same per-channel statistics.
 * B crosses a 512-row summation piece, C a 64-column block. fp32 against fp32 in
 * different orders: atol = rtol = 2e-5 (gradients 1e-4). */
static void case_batchnorm1d_path(void)
{
    const int B = 600, C = 150;
    size_t n = (size_t)B * C;
    float *x = falloc(n), *xt = falloc(n), *dy = falloc(n), *dyt = falloc(n);
    float *w = falloc(C), *b = falloc(C);
    fill_away(x, n, 2), fill(dy, n, -1, 1), fill(w, C, 0.5, 1.5), fill_away(b, C, 1);
    for (int i = 0; i < B; i++) {
        for (int c = 0; c < C; c++) {
            x[(size_t)i * C + c] += (float)(c % 7);
            xt[(size_t)c * B + i] = x[(size_t)i * C + c];
            dyt[(size_t)c * B + i] = dy[(size_t)i * C + c];
        }
    }
    for (int train = 1; train >= 0; train--) {
        float *y = falloc(n), *yt = falloc(n), *dx = falloc(n), *dxt = falloc(n);
        float *st = falloc(8 * (size_t)C); /* mean rstd rm rv | same for the general path */
        for (int k = 0; k < 2; k++) {
            fill(st + 4 * k * C + 2 * C, C, 0, 0); /* running mean 0 */
            fill(st + 4 * k * C + 3 * C, C, 1, 1); /* running var 1 */
        }
        float *p1 = st, *p2 = st + 4 * C;
        CHECK_INT_EQ(cpu_batchnorm_forward(y, p1, p1 + C, p1 + 2 * C, p1 + 3 * C, x, w, b, B, C, 1,
                                           train, 0.1f, 1e-5f),
                     STOKE_OK);
        CHECK_INT_EQ(cpu_batchnorm_forward(yt, p2, p2 + C, p2 + 2 * C, p2 + 3 * C, xt, w, b, 1, C,
                                           B, train, 0.1f, 1e-5f),
                     STOKE_OK);
        float *g = falloc(4 * (size_t)C); /* dw db | general dw db */
        cpu_batchnorm_backward(dx, g, g + C, dy, x, w, p1, p1 + C, B, C, 1, train);
        cpu_batchnorm_backward(dxt, g + 2 * C, g + 3 * C, dyt, xt, w, p2, p2 + C, 1, C, B, train);
        double *want = malloc(n * sizeof *want);
        for (int i = 0; i < B; i++) {
            for (int c = 0; c < C; c++) {
                want[(size_t)i * C + c] = yt[(size_t)c * B + i];
            }
        }
        check_close(train ? "batchnorm1d path forward (train)" : "batchnorm1d path forward (eval)",
                    y, want, n, 2e-5, 2e-5);
        for (int i = 0; i < B; i++) {
            for (int c = 0; c < C; c++) {
                want[(size_t)i * C + c] = dxt[(size_t)c * B + i];
            }
        }
        check_close("batchnorm1d path dinp", dx, want, n, 1e-4, 1e-4);
        double *ws = to_double(p2, 4 * (size_t)C), *wg = to_double(g + 2 * C, 2 * (size_t)C);
        check_close("batchnorm1d path statistics", p1, ws, 4 * (size_t)C, 2e-5, 2e-5);
        check_close("batchnorm1d path dweight, dbias", g, wg, 2 * (size_t)C, 1e-4, 1e-4);
        free(ws), free(wg), free(want), free(g);
        free(y), free(yt), free(dx), free(dxt), free(st);
    }
    /* thread-count independence */
    float *r[2];
    int saved_threads = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        cpu_set_threads(t + 1);
        r[t] = falloc(2 * n + 6 * (size_t)C); /* y | dx | mean | rstd | rm | rv | dw | db */
        float *q = r[t] + 2 * n;
        q[3 * C] = 1.0f;
        cpu_batchnorm_forward(r[t], q, q + C, q + 2 * C, q + 3 * C, x, w, b, B, C, 1, 1, 0.1f,
                              1e-5f);
        cpu_batchnorm_backward(r[t] + n, q + 4 * C, q + 5 * C, dy, x, w, q, q + C, B, C, 1, 1);
    }
    cpu_set_threads(saved_threads);
    CHECK_MSG(memcmp(r[0], r[1], (2 * n + 6 * (size_t)C) * sizeof(float)) == 0,
              "batchnorm1d depends on the thread count");
    free(r[0]), free(r[1]);
    free(x), free(xt), free(dy), free(dyt), free(w), free(b);
}

static void case_batchnorm(void)
{
    batchnorm_case(4, 3, 10, 1); /* NCHW, H*W = 10 */
    batchnorm_case(4, 3, 10, 0);
    batchnorm_case(9, 5, 1, 1); /* BatchNorm1d */
    batchnorm_case(9, 5, 1, 0);

    /* one value per channel cannot train; nothing is written */
    float x[3] = {1, 2, 3}, y[3] = {7, 7, 7}, sm[3], sr[3], rm[3] = {0}, rv[3] = {1, 1, 1};
    CHECK_INT_EQ(cpu_batchnorm_forward(y, sm, sr, rm, rv, x, NULL, NULL, 1, 3, 1, 1, 0.1f, 1e-5f),
                 STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "more than 1 value per channel");
    CHECK(y[0] == 7 && rm[0] == 0 && rv[0] == 1);

    /* |mean| >> std: the variance must not cancel (E[x^2] - m^2 would lose it all) */
    {
        const int B2 = 8, C2 = 2, S2 = 300;
        size_t n2 = (size_t)B2 * C2 * S2;
        float *x2 = falloc(n2), *y2 = falloc(n2), m2[2], r2[2], rm2[2] = {0}, rv2[2] = {1, 1};
        fill_away(x2, n2, 1);
        for (size_t i = 0; i < n2; i++) {
            x2[i] += 3000.0f;
        }
        CHECK_INT_EQ(
            cpu_batchnorm_forward(y2, m2, r2, rm2, rv2, x2, NULL, NULL, B2, C2, S2, 1, 0.1f, 1e-5f),
            STOKE_OK);
        for (int ch = 0; ch < C2; ch++) {
            double m = 0, v = 0, cnt = (double)B2 * S2;
            for (int i = 0; i < B2; i++) {
                for (int k = 0; k < S2; k++) {
                    m += x2[((size_t)i * C2 + ch) * S2 + k];
                }
            }
            m /= cnt;
            for (int i = 0; i < B2; i++) {
                for (int k = 0; k < S2; k++) {
                    double d = x2[((size_t)i * C2 + ch) * S2 + k] - m;
                    v += d * d;
                }
            }
            CHECK_NEAR(m2[ch], m, 1e-6 * fabs(m));
            CHECK_NEAR(r2[ch], 1.0 / sqrt(v / cnt + 1e-5), 1e-5);
            CHECK_NEAR(rv2[ch], 0.9 + 0.1 * v / (cnt - 1), 1e-5);
        }
        free(x2), free(y2);
    }

    /* thread-count independence (forward statistics and backward) */
    const int B = 16, C = 8, S = 196;
    size_t n = (size_t)B * C * S;
    float *xb = falloc(n), *w = falloc(C), *b = falloc(C), *dy = falloc(n);
    fill_away(xb, n, 2), fill(w, C, 0.5, 1.5), fill_away(b, C, 1), fill(dy, n, -1, 1);
    float *res[2];
    int saved_threads = omp_get_max_threads();
    for (int t = 0; t < 2; t++) {
        cpu_set_threads(t + 1);
        res[t] = falloc(2 * n + 6 * (size_t)C); /* y | dx | dw | db | mean | rstd | rm | rv */
        float *r = res[t];
        float *rmt = r + 2 * n + 4 * C, *rvt = rmt + C;
        rvt[0] = 1.0f;
        cpu_batchnorm_forward(r, r + 2 * n + 2 * C, r + 2 * n + 3 * C, rmt, rvt, xb, w, b, B, C, S,
                              1, 0.1f, 1e-5f);
        cpu_batchnorm_backward(r + n, r + 2 * n, r + 2 * n + C, dy, xb, w, r + 2 * n + 2 * C,
                               r + 2 * n + 3 * C, B, C, S, 1);
    }
    cpu_set_threads(saved_threads);
    CHECK_MSG(memcmp(res[0], res[1], (2 * n + 6 * (size_t)C) * sizeof(float)) == 0,
              "batchnorm depends on the thread count");
    free(res[0]), free(res[1]), free(xb), free(w), free(b), free(dy);
}

/* ---- torch: GELU, layer norm, batch norm ---- */

static void case_torch(void)
{
    const size_t ng = 4000;
    const int N = 12, C = 48, B = 5, BC = 6, H = 7, W = 5;
    size_t nl = (size_t)N * C, nb = (size_t)B * BC * H * W;
    int S = H * W;
    float *gx = falloc(ng), *lx = falloc(nl), *lw = falloc(C), *lb = falloc(C), *ldy = falloc(nl);
    float *bx = falloc(nb), *bw = falloc(BC), *bb = falloc(BC), *rm = falloc(BC), *rv = falloc(BC);
    float *bdy = falloc(nb);
    fill(gx, ng, -8, 8), fill_away(lx, nl, 3), fill(lw, C, 0.5, 1.5), fill_away(lb, C, 1);
    fill(ldy, nl, -1, 1), fill_away(bx, nb, 3), fill(bw, BC, 0.5, 1.5), fill_away(bb, BC, 1);
    fill(rm, BC, -0.5, 0.5), fill(rv, BC, 0.5, 2), fill(bdy, nb, -1, 1);
    tbuf ins[] = {{gx, ng}, {lx, nl}, {lw, C},  {lb, C},  {ldy, nl}, {bx, nb},
                  {bw, BC}, {bb, BC}, {rm, BC}, {rv, BC}, {bdy, nb}};
    size_t outn[] = {ng, ng, nl, nl, C, C, nb, BC, BC, nb, BC, BC, nb};
    enum { NOUT = 13 };
    float *t[NOUT];
    for (int i = 0; i < NOUT; i++) {
        t[i] = falloc(outn[i]);
    }
    char args[128];
    snprintf(args, sizeof args, "%zu %d %d %d %d %d %d", ng, N, C, B, BC, H, W);
    if (torch_run("norm", args, ins, 11, t, outn, NOUT) == 0) {
        double *want;
        size_t ny = ng > nb ? (ng > nl ? ng : nl) : (nb > nl ? nb : nl);
        float *y = falloc(ny);
        /* ours against torch's fp32: the comparison is fp32 vs fp32 */
#define AGAINST(what, got, ti, n, tol)             \
    do {                                           \
        want = to_double(t[ti], n);                \
        check_close(what, got, want, n, tol, tol); \
        free(want);                                \
    } while (0)
        cpu_gelu_forward(y, gx, ng, 0);
        AGAINST("gelu vs torch", y, 0, ng, 1e-6);
        cpu_gelu_forward(y, gx, ng, 1);
        AGAINST("gelu tanh vs torch", y, 1, ng, 1e-6);

        float *m = falloc(N), *r = falloc(N), *g = falloc(nl + 2 * (size_t)C);
        cpu_layernorm_forward(y, m, r, lx, lw, lb, N, C, CPU_NORM_EPS);
        AGAINST("layernorm vs torch", y, 2, nl, 1e-5);
        cpu_layernorm_backward(g, g + nl, g + nl + C, ldy, lx, lw, m, r, N, C);
        AGAINST("layernorm dinp vs torch", g, 3, nl, 1e-4);
        AGAINST("layernorm dweight vs torch", g + nl, 4, C, 1e-4);
        AGAINST("layernorm dbias vs torch", g + nl + C, 5, C, 1e-4);

        float *sm = falloc(BC), *sr = falloc(BC), *bg = falloc(nb + 2 * (size_t)BC);
        CHECK_INT_EQ(cpu_batchnorm_forward(y, sm, sr, rm, rv, bx, bw, bb, B, BC, S, 1,
                                           CPU_BN_MOMENTUM, CPU_NORM_EPS),
                     STOKE_OK);
        AGAINST("batchnorm train vs torch", y, 6, nb, 1e-5);
        AGAINST("batchnorm running_mean vs torch", rm, 7, BC, 1e-6);
        AGAINST("batchnorm running_var vs torch", rv, 8, BC, 1e-6);
        cpu_batchnorm_backward(bg, bg + nb, bg + nb + BC, bdy, bx, bw, sm, sr, B, BC, S, 1);
        AGAINST("batchnorm dinp vs torch", bg, 9, nb, 1e-4);
        AGAINST("batchnorm dweight vs torch", bg + nb, 10, BC, 1e-4);
        AGAINST("batchnorm dbias vs torch", bg + nb + BC, 11, BC, 1e-4);
        CHECK_INT_EQ(cpu_batchnorm_forward(y, sm, sr, rm, rv, bx, bw, bb, B, BC, S, 0,
                                           CPU_BN_MOMENTUM, CPU_NORM_EPS),
                     STOKE_OK);
        AGAINST("batchnorm eval vs torch", y, 12, nb, 1e-5);
#undef AGAINST
        free(m), free(r), free(g), free(sm), free(sr), free(bg), free(y);
    }
    for (int i = 0; i < NOUT; i++) {
        free(t[i]);
    }
    free(gx), free(lx), free(lw), free(lb), free(ldy), free(bx), free(bw), free(bb), free(rm);
    free(rv), free(bdy);
}

int main(int argc, char **argv)
{
    CHECK_TORCH_PART(argc, argv, case_torch);
    case_fast_math();
    case_activations();
    case_dropout();
    case_residual();
    case_softmax();
    case_embedding();
    case_layernorm();
    case_batchnorm();
    case_batchnorm1d_path();
    return CHECK_DONE();
}
