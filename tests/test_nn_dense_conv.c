/* test_nn_dense_conv.c - the CPU linear, conv2d and pooling kernels against float64
 * references (forward) and float64 central differences (backward), bf16 against
 * fp32, accumulation, determinism and shape errors. */
#include "check.h"
#include "nn/cpu/conv.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/dnnl_util.h"

#include <omp.h>
#include <stdint.h>

/* Tolerances (stated once, used everywhere):
 * - fp32 forward vs float64 reference: |got - ref| <= FWD_TOL * (1 + sum of |terms|),
 *   where the terms are the products summed into that output (fp32 rounding of a sum
 *   is bounded relative to the sum of magnitudes);
 * - fp32 backward vs float64 central differences of the float64 forward (step FD_H):
 *   |got - fd| <= BWD_TOL * max(1, max |fd| over the tensor);
 * - bf16 kernels vs the fp32 kernels on the same (bf16-rounded) values:
 *   BF16_SAME_TOL * max(1, max |fp32|); vs the fp32 kernels on the unrounded values
 *   (the price of bf16 storage): BF16_TOL * max(1, max |fp32|). */
#define FWD_TOL       1e-5
#define BWD_TOL       1e-4
#define FD_H          1e-4
#define BF16_SAME_TOL 1e-4
#define BF16_TOL      3e-2
/* Elements checked by finite differences per tensor: all of them up to this many,
 * else this many spread over the tensor. */
#define FD_MAX 48

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double rnd(void)
{ /* uniform in [-1, 1), never exactly zero */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    double u = (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    return u == 0.0 ? 0.5 : u;
}

static float *frand(size_t n)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rnd();
    return p;
}

static double *to_d(const float *x, size_t n)
{
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static float *fcopy(const float *x, size_t n)
{
    float *p = malloc(n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static float *fzero(size_t n) { return calloc(n, sizeof(float)); }

/* fp32 -> bf16, round to nearest even (inputs are finite). */
static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t *to_bf(const float *x, size_t n)
{
    uint16_t *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = f2bf(x[i]);
    return p;
}

static float *bf_round(const float *x, size_t n)
{ /* the fp32 values bf16 stores */
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = bf2f(f2bf(x[i]));
    return p;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Compares two fp32 tensors within tol * max(1, max|ref|); reports the first miss. */
static void check_close(const char *what, const float *got, const float *ref, size_t n, double tol)
{
    double lim = tol * fmax(1.0, max_abs(ref, n));
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - ref[i]) <= lim)) {
            CHECK_MSG(0, "%s[%zu]: %.8g vs %.8g (tolerance %.3g)", what, i, got[i], ref[i], lim);
            return;
        }
    CHECK(1);
}

static void check_bits(const char *what, const float *a, const float *b, size_t n)
{
    CHECK_MSG(memcmp(a, b, n * sizeof *a) == 0, "%s: results differ in bits", what);
}

/* ---- finite differences: L = sum(out * G) over a float64 forward; the gradient of
 * x[i] is (L(x + h) - L(x - h)) / 2h. ---- */

typedef double (*loss_fn)(void *ctx);

/* Checks got (a gradient already accumulated onto `base`) against central
 * differences of loss over x (float64, perturbed in place). */
static void check_fd(const char *what, const float *got, const float *base, double *x, size_t n,
                     loss_fn loss, void *ctx)
{
    size_t cnt = n <= FD_MAX ? n : FD_MAX;
    double *fd = malloc(cnt * sizeof *fd);
    size_t *idx = malloc(cnt * sizeof *idx);
    double fmax_ = 0;
    for (size_t k = 0; k < cnt; k++) {
        size_t i = n <= FD_MAX ? k : (k * n) / FD_MAX + (size_t)((rnd() + 1) * 0.5 * (n / FD_MAX));
        if (i >= n)
            i = n - 1;
        idx[k] = i;
        double x0 = x[i];
        x[i] = x0 + FD_H;
        double lp = loss(ctx);
        x[i] = x0 - FD_H;
        double lm = loss(ctx);
        x[i] = x0;
        fd[k] = (lp - lm) / (2 * FD_H);
        fmax_ = fabs(fd[k]) > fmax_ ? fabs(fd[k]) : fmax_;
    }
    double lim = BWD_TOL * fmax(1.0, fmax_);
    int bad = 0;
    for (size_t k = 0; k < cnt && !bad; k++) {
        double g = (double)got[idx[k]] - (base ? base[idx[k]] : 0.0);
        if (!(fabs(g - fd[k]) <= lim)) {
            CHECK_MSG(0, "%s[%zu]: %.8g vs finite difference %.8g (tolerance %.3g)", what, idx[k],
                      g, fd[k], lim);
            bad = 1;
        }
    }
    if (!bad)
        CHECK(1);
    free(fd);
    free(idx);
}

/* ---- linear ---- */

typedef struct lin_ctx {
    int B, C, OC;
    double *x, *w, *b, *g; /* b may be NULL */
} lin_ctx;

static void lin_ref(const lin_ctx *c, double *out, double *mag)
{
    for (int b = 0; b < c->B; b++)
        for (int o = 0; o < c->OC; o++) {
            double s = c->b ? c->b[o] : 0, m = c->b ? fabs(c->b[o]) : 0;
            for (int i = 0; i < c->C; i++) {
                s += c->x[b * c->C + i] * c->w[o * c->C + i];
                m += fabs(c->x[b * c->C + i] * c->w[o * c->C + i]);
            }
            out[b * c->OC + o] = s;
            if (mag)
                mag[b * c->OC + o] = m;
        }
}

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    size_t n = (size_t)c->B * c->OC;
    double *out = malloc(n * sizeof *out), L = 0;
    lin_ref(c, out, NULL);
    for (size_t i = 0; i < n; i++)
        L += out[i] * c->g[i];
    free(out);
    return L;
}

static void test_linear(int B, int C, int OC, int has_bias, cpu_linear_impl impl)
{
    char what[96];
    snprintf(what, sizeof what, "linear B=%d C=%d OC=%d bias=%d impl=%d", B, C, OC, has_bias,
             (int)impl);
    cpu_linear_set_impl(impl);
    size_t nx = (size_t)B * C, nw = (size_t)OC * C, ny = (size_t)B * OC;
    float *x = frand(nx), *w = frand(nw), *b = has_bias ? frand(OC) : NULL, *g = frand(ny);
    lin_ctx c = {B, C, OC, to_d(x, nx), to_d(w, nw), has_bias ? to_d(b, OC) : NULL, to_d(g, ny)};

    float *y = fzero(ny);
    double *yr = malloc(ny * sizeof *yr), *mag = malloc(ny * sizeof *mag);
    CHECK_INT_EQ(cpu_linear_forward(y, x, w, b, B, C, OC), STOKE_OK);
    lin_ref(&c, yr, mag);
    int bad = 0;
    for (size_t i = 0; i < ny && !bad; i++)
        if (!(fabs(y[i] - yr[i]) <= FWD_TOL * (1 + mag[i]))) {
            CHECK_MSG(0, "%s: out[%zu] %.8g vs %.8g", what, i, y[i], yr[i]);
            bad = 1;
        }
    CHECK(!bad);

    /* Backward onto random prior gradients: it must add, not overwrite. */
    float *dx0 = frand(nx), *dw0 = frand(nw), *db0 = has_bias ? frand(OC) : NULL;
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = has_bias ? fcopy(db0, OC) : NULL;
    CHECK_INT_EQ(cpu_linear_backward(dx, dw, db, g, x, w, B, C, OC), STOKE_OK);
    check_fd("linear dinp", dx, dx0, c.x, nx, lin_loss, &c);
    check_fd("linear dweight", dw, dw0, c.w, nw, lin_loss, &c);
    if (has_bias)
        check_fd("linear dbias", db, db0, c.b, OC, lin_loss, &c);

    /* From zero, a second call doubles every gradient exactly; dinp NULL skips it. */
    float *ex = fzero(nx), *ew = fzero(nw), *eb = fzero(OC);
    CHECK_INT_EQ(cpu_linear_backward(ex, ew, has_bias ? eb : NULL, g, x, w, B, C, OC), STOKE_OK);
    float *ex1 = fcopy(ex, nx), *ew1 = fcopy(ew, nw), *eb1 = fcopy(eb, OC);
    CHECK_INT_EQ(cpu_linear_backward(ex, ew, has_bias ? eb : NULL, g, x, w, B, C, OC), STOKE_OK);
    for (size_t i = 0; i < nx; i++)
        ex1[i] *= 2;
    for (size_t i = 0; i < nw; i++)
        ew1[i] *= 2;
    for (int i = 0; i < OC; i++)
        eb1[i] *= 2;
    check_bits("linear dinp twice", ex, ex1, nx);
    check_bits("linear dweight twice", ew, ew1, nw);
    check_bits("linear dbias twice", eb, eb1, OC);
    float *fw = fzero(nw);
    CHECK_INT_EQ(cpu_linear_backward(NULL, fw, NULL, g, x, w, B, C, OC), STOKE_OK);
    memcpy(ew1, ew, nw * sizeof *ew1);
    for (size_t i = 0; i < nw; i++)
        ew1[i] *= 0.5f;
    check_bits("linear dweight without dinp", fw, ew1, nw);

    free(x), free(w), free(b), free(g), free(y), free(yr), free(mag);
    free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db);
    free(ex), free(ew), free(eb), free(ex1), free(ew1), free(eb1), free(fw);
    free(c.x), free(c.w), free(c.b), free(c.g);
    cpu_linear_set_impl(CPU_LINEAR_AUTO);
}

static void test_linear_bf16(int B, int C, int OC)
{
    size_t nx = (size_t)B * C, nw = (size_t)OC * C, ny = (size_t)B * OC;
    float *x = frand(nx), *w = frand(nw), *b = frand(OC), *g = frand(ny);
    float *xr = bf_round(x, nx), *wr = bf_round(w, nw), *gr = bf_round(g, ny);
    uint16_t *xh = to_bf(x, nx), *wh = to_bf(w, nw), *gh = to_bf(g, ny);
    float *y = fzero(ny), *ys = fzero(ny), *yf = fzero(ny);
    cpu_linear_set_impl(CPU_LINEAR_DNNL);
    CHECK_INT_EQ(cpu_linear_forward_bf16(y, xh, wh, b, B, C, OC), STOKE_OK);
    CHECK_INT_EQ(cpu_linear_forward(ys, xr, wr, b, B, C, OC), STOKE_OK);
    CHECK_INT_EQ(cpu_linear_forward(yf, x, w, b, B, C, OC), STOKE_OK);
    check_close("linear bf16 out vs fp32 on bf16 values", y, ys, ny, BF16_SAME_TOL);
    check_close("linear bf16 out vs fp32", y, yf, ny, BF16_TOL);

    float *dx = fzero(nx), *dw = fzero(nw), *db = fzero(OC);
    float *sx = fzero(nx), *sw = fzero(nw), *sb = fzero(OC);
    float *fx = fzero(nx), *fw = fzero(nw), *fb = fzero(OC);
    CHECK_INT_EQ(cpu_linear_backward_bf16(dx, dw, db, gh, xh, wh, B, C, OC), STOKE_OK);
    CHECK_INT_EQ(cpu_linear_backward(sx, sw, sb, gr, xr, wr, B, C, OC), STOKE_OK);
    CHECK_INT_EQ(cpu_linear_backward(fx, fw, fb, g, x, w, B, C, OC), STOKE_OK);
    check_close("linear bf16 dinp vs fp32 on bf16 values", dx, sx, nx, BF16_SAME_TOL);
    check_close("linear bf16 dweight vs fp32 on bf16 values", dw, sw, nw, BF16_SAME_TOL);
    check_close("linear bf16 dbias vs fp32 on bf16 values", db, sb, OC, BF16_SAME_TOL);
    check_close("linear bf16 dinp vs fp32", dx, fx, nx, BF16_TOL);
    check_close("linear bf16 dweight vs fp32", dw, fw, nw, BF16_TOL);
    check_close("linear bf16 dbias vs fp32", db, fb, OC, BF16_TOL);
    cpu_linear_set_impl(CPU_LINEAR_AUTO);
    free(x), free(w), free(b), free(g), free(xr), free(wr), free(gr), free(xh), free(wh);
    free(gh), free(y), free(ys), free(yf), free(dx), free(dw), free(db), free(sx), free(sw);
    free(sb), free(fx), free(fw), free(fb);
}

/* ---- conv2d ---- */

typedef struct conv_ctx {
    cpu_conv2d_shape s;
    int OH, OW;
    double *x, *w, *b, *g;
} conv_ctx;

static void conv_ref(const conv_ctx *c, double *out, double *mag)
{
    const cpu_conv2d_shape *s = &c->s;
    for (int n = 0; n < s->B; n++)
        for (int o = 0; o < s->OC; o++)
            for (int oh = 0; oh < c->OH; oh++)
                for (int ow = 0; ow < c->OW; ow++) {
                    double acc = c->b ? c->b[o] : 0, m = c->b ? fabs(c->b[o]) : 0;
                    for (int i = 0; i < s->C; i++)
                        for (int kh = 0; kh < s->KH; kh++)
                            for (int kw = 0; kw < s->KW; kw++) {
                                int h = oh * s->stride_h - s->pad_h + kh;
                                int w = ow * s->stride_w - s->pad_w + kw;
                                if (h < 0 || h >= s->H || w < 0 || w >= s->W)
                                    continue;
                                double t = c->x[((size_t)(n * s->C + i) * s->H + h) * s->W + w] *
                                           c->w[((size_t)(o * s->C + i) * s->KH + kh) * s->KW + kw];
                                acc += t;
                                m += fabs(t);
                            }
                    size_t k = ((size_t)(n * s->OC + o) * c->OH + oh) * c->OW + ow;
                    out[k] = acc;
                    if (mag)
                        mag[k] = m;
                }
}

static double conv_loss(void *p)
{
    conv_ctx *c = p;
    size_t n = (size_t)c->s.B * c->s.OC * c->OH * c->OW;
    double *out = malloc(n * sizeof *out), L = 0;
    conv_ref(c, out, NULL);
    for (size_t i = 0; i < n; i++)
        L += out[i] * c->g[i];
    free(out);
    return L;
}

static void test_conv(cpu_conv2d_shape s, int use_ws)
{
    char what[160];
    snprintf(what, sizeof what, "conv B=%d C=%d %dx%d OC=%d k%dx%d s%dx%d p%dx%d bias=%d ws=%d",
             s.B, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
             s.has_bias, use_ws);
    int OH = 0, OW = 0;
    CHECK_INT_EQ(cpu_conv2d_out_size(&s, &OH, &OW), STOKE_OK);
    size_t nx = (size_t)s.B * s.C * s.H * s.W, nw = (size_t)s.OC * s.C * s.KH * s.KW;
    size_t ny = (size_t)s.B * s.OC * OH * OW;
    float *x = frand(nx), *w = frand(nw), *b = s.has_bias ? frand(s.OC) : NULL, *g = frand(ny);
    conv_ctx c = {s, OH, OW, to_d(x, nx), to_d(w, nw), b ? to_d(b, s.OC) : NULL, to_d(g, ny)};
    size_t wsz = 0;
    CHECK_INT_EQ(cpu_conv2d_workspace(&s, 0, &wsz), STOKE_OK);
    /* The caller's workspace need not be aligned: give it an odd 4-byte offset. */
    char *ws_mem = use_ws && wsz ? malloc(wsz + 4) : NULL;
    void *ws = ws_mem ? ws_mem + 4 : NULL;

    float *y = fzero(ny);
    double *yr = malloc(ny * sizeof *yr), *mag = malloc(ny * sizeof *mag);
    CHECK_MSG(cpu_conv2d_forward(y, x, w, b, &s, ws, wsz) == STOKE_OK, "%s: %s", what,
              stoke_last_error());
    conv_ref(&c, yr, mag);
    int bad = 0;
    for (size_t i = 0; i < ny && !bad; i++)
        if (!(fabs(y[i] - yr[i]) <= FWD_TOL * (1 + mag[i]))) {
            CHECK_MSG(0, "%s: out[%zu] %.8g vs %.8g", what, i, y[i], yr[i]);
            bad = 1;
        }
    CHECK(!bad);

    float *dx0 = frand(nx), *dw0 = frand(nw), *db0 = b ? frand(s.OC) : NULL;
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw), *db = b ? fcopy(db0, s.OC) : NULL;
    CHECK_MSG(cpu_conv2d_backward(dx, dw, db, g, x, w, &s, ws, wsz) == STOKE_OK, "%s: %s", what,
              stoke_last_error());
    check_fd("conv dinp", dx, dx0, c.x, nx, conv_loss, &c);
    check_fd("conv dweight", dw, dw0, c.w, nw, conv_loss, &c);
    if (b)
        check_fd("conv dbias", db, db0, c.b, s.OC, conv_loss, &c);

    /* From zero, twice doubles exactly; without dinp the weight gradient is the same. */
    float *ex = fzero(nx), *ew = fzero(nw), *eb = fzero(s.OC);
    CHECK_INT_EQ(cpu_conv2d_backward(ex, ew, b ? eb : NULL, g, x, w, &s, ws, wsz), STOKE_OK);
    float *ex1 = fcopy(ex, nx), *ew1 = fcopy(ew, nw), *eb1 = fcopy(eb, s.OC);
    float *fw = fzero(nw), *fb = fzero(s.OC);
    CHECK_INT_EQ(cpu_conv2d_backward(NULL, fw, b ? fb : NULL, g, x, w, &s, ws, wsz), STOKE_OK);
    check_bits("conv dweight without dinp", fw, ew1, nw);
    CHECK_INT_EQ(cpu_conv2d_backward(ex, ew, b ? eb : NULL, g, x, w, &s, ws, wsz), STOKE_OK);
    for (size_t i = 0; i < nx; i++)
        ex1[i] *= 2;
    for (size_t i = 0; i < nw; i++)
        ew1[i] *= 2;
    for (int i = 0; i < s.OC; i++)
        eb1[i] *= 2;
    check_bits("conv dinp twice", ex, ex1, nx);
    check_bits("conv dweight twice", ew, ew1, nw);
    check_bits("conv dbias twice", eb, eb1, s.OC);

    free(ws_mem), free(x), free(w), free(b), free(g), free(y), free(yr), free(mag);
    free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db);
    free(ex), free(ew), free(eb), free(ex1), free(ew1), free(eb1), free(fw), free(fb);
    free(c.x), free(c.w), free(c.b), free(c.g);
}

static void test_conv_bf16(cpu_conv2d_shape s)
{
    int OH = 0, OW = 0;
    CHECK_INT_EQ(cpu_conv2d_out_size(&s, &OH, &OW), STOKE_OK);
    size_t nx = (size_t)s.B * s.C * s.H * s.W, nw = (size_t)s.OC * s.C * s.KH * s.KW;
    size_t ny = (size_t)s.B * s.OC * OH * OW;
    float *x = frand(nx), *w = frand(nw), *b = s.has_bias ? frand(s.OC) : NULL, *g = frand(ny);
    float *xr = bf_round(x, nx), *wr = bf_round(w, nw), *gr = bf_round(g, ny);
    uint16_t *xh = to_bf(x, nx), *wh = to_bf(w, nw), *gh = to_bf(g, ny);
    float *y = fzero(ny), *ys = fzero(ny), *yf = fzero(ny);
    CHECK_MSG(cpu_conv2d_forward_bf16(y, xh, wh, b, &s, NULL, 0) == STOKE_OK, "%s",
              stoke_last_error());
    CHECK_INT_EQ(cpu_conv2d_forward(ys, xr, wr, b, &s, NULL, 0), STOKE_OK);
    CHECK_INT_EQ(cpu_conv2d_forward(yf, x, w, b, &s, NULL, 0), STOKE_OK);
    check_close("conv bf16 out vs fp32 on bf16 values", y, ys, ny, BF16_SAME_TOL);
    check_close("conv bf16 out vs fp32", y, yf, ny, BF16_TOL);
    int nb = s.has_bias ? s.OC : 1;
    float *dx = fzero(nx), *dw = fzero(nw), *db = fzero(nb);
    float *sx = fzero(nx), *sw = fzero(nw), *sb = fzero(nb);
    float *fx = fzero(nx), *fw = fzero(nw), *fb = fzero(nb);
    float *pb = s.has_bias ? db : NULL, *psb = s.has_bias ? sb : NULL,
          *pfb = s.has_bias ? fb : NULL;
    CHECK_MSG(cpu_conv2d_backward_bf16(dx, dw, pb, gh, xh, wh, &s, NULL, 0) == STOKE_OK, "%s",
              stoke_last_error());
    CHECK_INT_EQ(cpu_conv2d_backward(sx, sw, psb, gr, xr, wr, &s, NULL, 0), STOKE_OK);
    CHECK_INT_EQ(cpu_conv2d_backward(fx, fw, pfb, g, x, w, &s, NULL, 0), STOKE_OK);
    check_close("conv bf16 dinp vs fp32 on bf16 values", dx, sx, nx, BF16_SAME_TOL);
    check_close("conv bf16 dweight vs fp32 on bf16 values", dw, sw, nw, BF16_SAME_TOL);
    check_close("conv bf16 dbias vs fp32 on bf16 values", db, sb, nb, BF16_SAME_TOL);
    check_close("conv bf16 dinp vs fp32", dx, fx, nx, BF16_TOL);
    check_close("conv bf16 dweight vs fp32", dw, fw, nw, BF16_TOL);
    check_close("conv bf16 dbias vs fp32", db, fb, nb, BF16_TOL);

    /* Mixed: fp32 tensors rounded to bf16 inside must give what the bf16 kernels give
     * on the rounded tensors; with < 4 input channels it keeps fp32 math. */
    if (s.C < 4) {
        memcpy(y, yf, ny * sizeof *y);
        memcpy(dx, fx, nx * sizeof *dx);
        memcpy(dw, fw, nw * sizeof *dw);
        memcpy(db, fb, nb * sizeof *db);
    }
    float *my = fzero(ny), *mx = fzero(nx), *mw = fzero(nw), *mb = fzero(nb);
    CHECK_MSG(cpu_conv2d_forward_mixed(my, x, w, b, &s, NULL, 0) == STOKE_OK, "%s",
              stoke_last_error());
    check_close("conv mixed out vs bf16", my, y, ny, BF16_SAME_TOL);
    CHECK_MSG(cpu_conv2d_backward_mixed(mx, mw, s.has_bias ? mb : NULL, g, x, w, &s, NULL, 0) ==
                  STOKE_OK,
              "%s", stoke_last_error());
    check_close("conv mixed dinp vs bf16", mx, dx, nx, BF16_SAME_TOL);
    check_close("conv mixed dweight vs bf16", mw, dw, nw, BF16_SAME_TOL);
    check_close("conv mixed dbias vs bf16", mb, db, nb, BF16_SAME_TOL);
    free(my), free(mx), free(mw), free(mb);
    free(x), free(w), free(b), free(g), free(xr), free(wr), free(gr), free(xh), free(wh);
    free(gh), free(y), free(ys), free(yf), free(dx), free(dw), free(db), free(sx), free(sw);
    free(sb), free(fx), free(fw), free(fb);
}

/* ---- pooling ---- */

enum { POOL_MAX, POOL_AVG, POOL_GLOBAL };

typedef struct pool_ctx {
    cpu_pool2d_shape s;
    int kind, OH, OW;
    double *x, *g;
} pool_ctx;

static void pool_ref(const pool_ctx *c, double *out)
{
    const cpu_pool2d_shape *s = &c->s;
    for (int p = 0; p < s->B * s->C; p++) {
        const double *x = c->x + (size_t)p * s->H * s->W;
        if (c->kind == POOL_GLOBAL) {
            double sum = 0;
            for (int i = 0; i < s->H * s->W; i++)
                sum += x[i];
            out[p] = sum / (s->H * s->W);
            continue;
        }
        for (int oh = 0; oh < c->OH; oh++)
            for (int ow = 0; ow < c->OW; ow++) {
                double m = -INFINITY, sum = 0;
                for (int kh = 0; kh < s->KH; kh++)
                    for (int kw = 0; kw < s->KW; kw++) {
                        int h = oh * s->stride_h - s->pad_h + kh,
                            w = ow * s->stride_w - s->pad_w + kw;
                        if (h < 0 || h >= s->H || w < 0 || w >= s->W)
                            continue; /* padding: -inf for max, 0 for the sum */
                        m = fmax(m, x[h * s->W + w]);
                        sum += x[h * s->W + w];
                    }
                out[((size_t)p * c->OH + oh) * c->OW + ow] =
                    c->kind == POOL_MAX ? m : sum / (s->KH * s->KW);
            }
    }
}

static size_t pool_out_n(const pool_ctx *c)
{
    return c->kind == POOL_GLOBAL ? (size_t)c->s.B * c->s.C
                                  : (size_t)c->s.B * c->s.C * c->OH * c->OW;
}

static double pool_loss(void *p)
{
    pool_ctx *c = p;
    size_t n = pool_out_n(c);
    double *out = malloc(n * sizeof *out), L = 0;
    pool_ref(c, out);
    for (size_t i = 0; i < n; i++)
        L += out[i] * c->g[i];
    free(out);
    return L;
}

static void test_pool(int kind, cpu_pool2d_shape s)
{
    pool_ctx c = {s, kind, 1, 1, NULL, NULL};
    if (kind != POOL_GLOBAL)
        CHECK_INT_EQ(cpu_pool2d_out_size(&s, &c.OH, &c.OW), STOKE_OK);
    size_t nx = (size_t)s.B * s.C * s.H * s.W, ny = pool_out_n(&c);
    float *x = frand(nx), *g = frand(ny), *y = fzero(ny);
    c.x = to_d(x, nx);
    c.g = to_d(g, ny);
    double *yr = malloc(ny * sizeof *yr);
    pool_ref(&c, yr);
    if (kind == POOL_MAX)
        cpu_maxpool2d_forward(y, x, &s);
    else if (kind == POOL_AVG)
        cpu_avgpool2d_forward(y, x, &s);
    else
        cpu_global_avgpool_forward(y, x, s.B, s.C, s.H, s.W);
    int bad = 0;
    for (size_t i = 0; i < ny && !bad; i++)
        /* max is exact; averages are sums of at most a few dozen values in [-1, 1] */
        if (!(fabs(y[i] - yr[i]) <= (kind == POOL_MAX ? 0 : FWD_TOL))) {
            CHECK_MSG(0, "pool %d: out[%zu] %.8g vs %.8g", kind, i, y[i], yr[i]);
            bad = 1;
        }
    CHECK(!bad);
    float *dx0 = frand(nx), *dx = fcopy(dx0, nx);
    if (kind == POOL_MAX)
        cpu_maxpool2d_backward(dx, g, x, &s);
    else if (kind == POOL_AVG)
        cpu_avgpool2d_backward(dx, g, &s);
    else
        cpu_global_avgpool_backward(dx, g, s.B, s.C, s.H, s.W);
    check_fd(kind == POOL_MAX   ? "maxpool dinp"
             : kind == POOL_AVG ? "avgpool dinp"
                                : "gap dinp",
             dx, dx0, c.x, nx, pool_loss, &c);
    free(x), free(g), free(y), free(yr), free(dx0), free(dx), free(c.x), free(c.g);
}

/* ---- determinism: fresh buffers, same inputs, same threads -> same bits ---- */

static void test_determinism(int threads)
{
    cpu_set_threads(threads);
    CHECK_INT_EQ(cpu_get_threads(), threads);
    cpu_conv2d_shape s = {4, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1};
    int OH, OW;
    CHECK_INT_EQ(cpu_conv2d_out_size(&s, &OH, &OW), STOKE_OK);
    size_t nx = (size_t)s.B * s.C * s.H * s.W, nw = (size_t)s.OC * s.C * 9,
           ny = (size_t)s.B * s.OC * OH * OW;
    float *x = frand(nx), *w = frand(nw), *b = frand(s.OC), *g = frand(ny);
    float *r[2][4];
    for (int run = 0; run < 2; run++) {
        float *y = fzero(ny), *dx = fzero(nx), *dw = fzero(nw), *db = fzero(s.OC);
        CHECK_INT_EQ(cpu_conv2d_forward(y, x, w, b, &s, NULL, 0), STOKE_OK);
        CHECK_INT_EQ(cpu_conv2d_backward(dx, dw, db, g, x, w, &s, NULL, 0), STOKE_OK);
        r[run][0] = y, r[run][1] = dx, r[run][2] = dw, r[run][3] = db;
    }
    check_bits("conv out determinism", r[0][0], r[1][0], ny);
    check_bits("conv dinp determinism", r[0][1], r[1][1], nx);
    check_bits("conv dweight determinism", r[0][2], r[1][2], nw);
    check_bits("conv dbias determinism", r[0][3], r[1][3], s.OC);
    for (int run = 0; run < 2; run++)
        for (int k = 0; k < 4; k++)
            free(r[run][k]);
    free(x), free(w), free(b), free(g);

    for (int impl = CPU_LINEAR_DNNL; impl <= CPU_LINEAR_BLAS; impl++) {
        cpu_linear_set_impl((cpu_linear_impl)impl);
        int B = 64, C = 200, OC = 96;
        float *lx = frand((size_t)B * C), *lw = frand((size_t)OC * C), *lb = frand(OC);
        float *lg = frand((size_t)B * OC), *q[2][4];
        for (int run = 0; run < 2; run++) {
            float *y = fzero((size_t)B * OC), *dx = fzero((size_t)B * C);
            float *dw = fzero((size_t)OC * C), *db = fzero(OC);
            CHECK_INT_EQ(cpu_linear_forward(y, lx, lw, lb, B, C, OC), STOKE_OK);
            CHECK_INT_EQ(cpu_linear_backward(dx, dw, db, lg, lx, lw, B, C, OC), STOKE_OK);
            q[run][0] = y, q[run][1] = dx, q[run][2] = dw, q[run][3] = db;
        }
        check_bits("linear out determinism", q[0][0], q[1][0], (size_t)B * OC);
        check_bits("linear dinp determinism", q[0][1], q[1][1], (size_t)B * C);
        check_bits("linear dweight determinism", q[0][2], q[1][2], (size_t)OC * C);
        check_bits("linear dbias determinism", q[0][3], q[1][3], OC);
        for (int run = 0; run < 2; run++)
            for (int k = 0; k < 4; k++)
                free(q[run][k]);
        free(lx), free(lw), free(lb), free(lg);
    }
    cpu_linear_set_impl(CPU_LINEAR_AUTO);
}

static void test_errors(void)
{
    float a[4] = {1, 2, 3, 4};
    CHECK_INT_EQ(cpu_linear_forward(a, a, a, NULL, 0, 2, 2), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "B=0");
    CHECK_INT_EQ(cpu_linear_prepare(2, 3, -1, 1, 0), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "OC=-1");
    size_t lin_ws = 1;
    int bf16 = dnnl_util_bf16_kernels(); /* else the bf16 shape is refused, as it must */
    CHECK_INT_EQ(cpu_linear_prepare(64, 200, 96, 1, bf16), STOKE_OK);
    CHECK_INT_EQ(cpu_linear_workspace(64, 200, 96, 1, bf16, &lin_ws), STOKE_OK);
    CHECK(lin_ws < (size_t)1 << 30);
    cpu_conv2d_shape s = {1, 1, 2, 2, 1, 3, 3, 1, 1, 0, 0, 0};
    CHECK_INT_EQ(cpu_conv2d_out_size(&s, NULL, NULL), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "larger than the padded input");
    CHECK_INT_EQ(cpu_conv2d_forward(a, a, a, NULL, &s, NULL, 0), STOKE_ERR_ARG);
    s.pad_h = s.pad_w = 3;
    CHECK_INT_EQ(cpu_conv2d_out_size(&s, NULL, NULL), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "padding");
    cpu_conv2d_shape ok = {1, 1, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0};
    CHECK_INT_EQ(cpu_conv2d_forward(a, a, a, a, &ok, NULL, 0), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "has_bias=0");
    size_t nbytes = 0;
    CHECK_INT_EQ(cpu_conv2d_workspace(&ok, 7, &nbytes), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "precision 7");
    cpu_conv2d_shape big = {2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 0};
    size_t need = 0;
    CHECK_INT_EQ(cpu_conv2d_workspace(&big, 0, &need), STOKE_OK);
    if (need > 0) {
        float *x = frand(2 * 16 * 64), *w = frand(16 * 16 * 9), *y = fzero(2 * 16 * 64);
        /* need includes room to align the pointer: short of the aligned need fails. */
        CHECK_INT_EQ(cpu_conv2d_forward(y, x, w, NULL, &big, y, need - 64 - 1), STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), "workspace");
        free(x), free(w), free(y);
    }
    cpu_pool2d_shape p = {1, 1, 4, 4, 2, 2, 2, 2, 2, 0};
    CHECK_INT_EQ(cpu_pool2d_out_size(&p, NULL, NULL), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "half the kernel");
}

/* The benchmark's layer sizes (the reference CNN's 3136->128 at batch 128, the MLP's
 * 784->512 and 512->512 at batch 256): GEMMs large enough to run on every compute
 * thread, with reductions longer than one of the GEMM's K blocks, as the trainer runs
 * them. Finite differences would cost a float64 forward per element, so the backward
 * is checked against the float64 products it computes: onto random prior gradients
 * within FWD_TOL * (1 + sum of |terms|) each; from zero, a second call doubles every
 * gradient within FWD_TOL; a second run on fresh buffers gives the same bits. (The
 * doubling is exact on AVX-512 but not under STOKE_MAX_CPU_ISA=avx2, which the suite
 * also runs: there oneDNN's GEMMs add onto the gradient as they go, one block of the
 * reduction at a time, so g + g is rounded in another order than 2g; see SGEMM_MAX_K
 * in src/nn/cpu/dense.c.) */
static void test_linear_large(int B, int C, int OC)
{
    char what[96];
    snprintf(what, sizeof what, "linear B=%d C=%d OC=%d on %d threads", B, C, OC,
             cpu_get_threads());
    size_t nx = (size_t)B * C, nw = (size_t)OC * C, ny = (size_t)B * OC;
    float *x = frand(nx), *w = frand(nw), *g = frand(ny);
    float *dx = frand(nx), *dw = frand(nw), *db = frand(OC);
    double *rx = malloc(nx * sizeof *rx), *mx = malloc(nx * sizeof *mx);
    double *rw = malloc(nw * sizeof *rw), *mw = malloc(nw * sizeof *mw);
    double *rb = malloc(OC * sizeof *rb), *mb = malloc(OC * sizeof *mb);
    for (size_t i = 0; i < nx; i++)
        rx[i] = dx[i], mx[i] = fabs(dx[i]);
    for (size_t i = 0; i < nw; i++)
        rw[i] = dw[i], mw[i] = fabs(dw[i]);
    for (int o = 0; o < OC; o++)
        rb[o] = db[o], mb[o] = fabs(db[o]);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OC; o++) {
            double go = g[(size_t)b * OC + o];
            rb[o] += go, mb[o] += fabs(go);
            for (int c = 0; c < C; c++) {
                double tx = go * w[(size_t)o * C + c], tw = go * x[(size_t)b * C + c];
                rx[(size_t)b * C + c] += tx, mx[(size_t)b * C + c] += fabs(tx);
                rw[(size_t)o * C + c] += tw, mw[(size_t)o * C + c] += fabs(tw);
            }
        }
    CHECK_INT_EQ(cpu_linear_backward(dx, dw, db, g, x, w, B, C, OC), STOKE_OK);
    const float *got[3] = {dx, dw, db};
    const double *ref[3] = {rx, rw, rb}, *mag[3] = {mx, mw, mb};
    const char *name[3] = {"dinp", "dweight", "dbias"};
    size_t len[3] = {nx, nw, (size_t)OC};
    for (int t = 0; t < 3; t++) {
        size_t bad = len[t];
        for (size_t i = 0; i < len[t] && bad == len[t]; i++)
            if (!(fabs(got[t][i] - ref[t][i]) <= FWD_TOL * (1 + mag[t][i])))
                bad = i;
        CHECK_MSG(bad == len[t], "%s: %s[%zu] %.8g vs %.8g", what, name[t], bad,
                  bad < len[t] ? got[t][bad] : 0.0, bad < len[t] ? ref[t][bad] : 0.0);
    }

    float *r[2][3];
    for (int run = 0; run < 2; run++) {
        float *ex = fzero(nx), *ew = fzero(nw), *eb = fzero(OC);
        CHECK_INT_EQ(cpu_linear_backward(ex, ew, eb, g, x, w, B, C, OC), STOKE_OK);
        r[run][0] = ex, r[run][1] = ew, r[run][2] = eb;
    }
    for (int t = 0; t < 3; t++) {
        char m[160];
        snprintf(m, sizeof m, "%s: %s determinism", what, name[t]);
        check_bits(m, r[0][t], r[1][t], len[t]);
    }
    CHECK_INT_EQ(cpu_linear_backward(r[1][0], r[1][1], r[1][2], g, x, w, B, C, OC), STOKE_OK);
    for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < len[t]; i++)
            r[0][t][i] *= 2;
        char m[160];
        snprintf(m, sizeof m, "%s: %s twice", what, name[t]);
        check_close(m, r[1][t], r[0][t], len[t], FWD_TOL);
    }
    for (int run = 0; run < 2; run++)
        for (int t = 0; t < 3; t++)
            free(r[run][t]);
    free(x), free(w), free(g), free(dx), free(dw), free(db);
    free(rx), free(mx), free(rw), free(mw), free(rb), free(mb);
}

int main(void)
{
    cpu_set_threads(2);

    /* linear: odd sizes, batch 1, with and without bias, both GEMM libraries. */
    for (int impl = CPU_LINEAR_DNNL; impl <= CPU_LINEAR_BLAS; impl++) {
        test_linear(3, 5, 4, 1, (cpu_linear_impl)impl);
        test_linear(1, 7, 3, 0, (cpu_linear_impl)impl);
        test_linear(17, 33, 9, 1, (cpu_linear_impl)impl);
        test_linear(6, 100, 70, 1, (cpu_linear_impl)impl);
    }
    test_linear(5, 13, 11, 1, CPU_LINEAR_AUTO);
    for (int threads = 1; threads <= 2; threads++) {
        cpu_set_threads(threads);
        test_linear_large(128, 3136, 128);
        test_linear_large(256, 784, 512);
        test_linear_large(256, 512, 512);
    }
    /* Small GEMMs run on one thread, and the calling thread's OpenMP count (which the
     * other kernels follow) is restored afterwards. */
    CHECK_INT_EQ(omp_get_max_threads(), 2);
    /* bf16 kernels exist from AVX-512 up (the suite runs capped to AVX2 too); below,
     * they must fail cleanly (the executor emulates bf16 instead, test_nn_graph) */
    int bf16 = dnnl_util_bf16_kernels();
    if (bf16) {
        test_linear_bf16(3, 5, 4);
        test_linear_bf16(32, 96, 48);
    } else {
        printf("note: oneDNN has no bf16 kernels on this CPU: bf16 kernels must refuse\n");
        uint16_t h[12] = {0};
        float o[16];
        CHECK(cpu_linear_forward_bf16(o, h, h, NULL, 3, 4, 3) == STOKE_ERR_UNAVAILABLE);
    }

    /* conv2d: stride 1/2, padding 0/1/2, non-square images and kernels, batch 1, odd
     * sizes, channel counts that make oneDNN pick blocked layouts; each layout choice
     * inside oneDNN, with the caller's workspace and the cache's own. */
    const cpu_conv2d_shape convs[] = {
        /* B  C  H   W OC KH KW sh sw ph pw bias */
        {2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1},
        {1, 2, 9, 6, 3, 3, 2, 2, 2, 0, 0, 0}, /* stride 2 does not divide: short right pad */
        {3, 4, 8, 11, 5, 5, 5, 2, 2, 2, 2, 1},
        {2, 1, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1}, /* the CNN's first layer, smaller image */
        {1, 16, 8, 8, 24, 3, 3, 1, 1, 1, 1, 1},  /* blocked channels */
        {2, 17, 5, 6, 19, 3, 1, 1, 2, 1, 0, 1},  /* odd channel counts, 3x1 kernel */
    };
    size_t nconv = sizeof convs / sizeof convs[0];
    for (int layout = CPU_CONV_LAYOUT_AUTO; layout <= CPU_CONV_LAYOUT_BLOCKED; layout++) {
        cpu_conv2d_set_layout((cpu_conv_layout)layout);
        for (size_t i = 0; i < nconv; i++)
            test_conv(convs[i], (int)(i + layout) % 2);
    }
    cpu_conv2d_set_layout(CPU_CONV_LAYOUT_AUTO);
    if (bf16) {
        test_conv_bf16(convs[0]);
        test_conv_bf16(convs[2]);
        test_conv_bf16(convs[3]); /* < 4 input channels: plain forward */
        test_conv_bf16(convs[4]);
    } else {
        uint16_t h[24 * 16 * 9] = {0};
        float o[24 * 64];
        CHECK(cpu_conv2d_forward_bf16(o, h, h, NULL,
                                      &(cpu_conv2d_shape){1, 16, 8, 8, 24, 3, 3, 1, 1, 1, 1, 0},
                                      NULL, 0) == STOKE_ERR_UNAVAILABLE);
    }

    const cpu_pool2d_shape pools[] = {
        /* B  C  H  W KH KW sh sw ph pw */
        {2, 3, 8, 8, 2, 2, 2, 2, 0, 0}, /* the CNN's pool */
        {1, 2, 7, 9, 3, 3, 2, 2, 1, 1},
        {2, 2, 6, 5, 3, 3, 1, 1, 1, 1},
        {1, 1, 5, 6, 2, 3, 1, 2, 1, 1},
        {1, 3, 7, 7, 2, 2, 2, 2, 0, 0}, /* odd size: the last row and column are dropped */
    };
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
        test_pool(POOL_MAX, pools[i]);
        test_pool(POOL_AVG, pools[i]);
    }
    test_pool(POOL_GLOBAL, (cpu_pool2d_shape){2, 3, 5, 7, 0, 0, 0, 0, 0, 0});
    test_pool(POOL_GLOBAL, (cpu_pool2d_shape){1, 4, 1, 1, 0, 0, 0, 0, 0, 0});

    test_determinism(1);
    test_determinism(2);
    test_errors();
    return CHECK_DONE();
}
