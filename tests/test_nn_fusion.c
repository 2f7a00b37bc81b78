/* test_nn_fusion.c - fused chains. The conv2d -> ReLU -> max-pool block (conv.h)
 * against a float64 reference of the three ops, in fp32 and mixed bf16 (inputs, weights
 * and the output gradient rounded to bf16 in the reference too), with accumulation
 * into the caller's gradients, floor-mode leftovers, inference (no index), errors; and
 * at the model level, the CNN (conv blocks and linear -> ReLU) and an MLP (linear ->
 * ReLU) with and without fusion giving the same loss and gradients while planning
 * less activation memory. Random inputs, never zeros; shapes are small so
 * that no two window values are within rounding of each other (the argmax, and so
 * where a gradient goes, is then the same in every precision). */
#include "check.h"
#include "nn/cpu/conv.h"
#include "nn/cpu/dnnl_util.h"
#include "stoke/nn.h"

#include <stdint.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static double rnd(void)
{ /* uniform in [-1, 1), never exactly zero */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    double v = (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    return v == 0 ? 0.5 : v;
}

static float *frand(size_t n, double scale)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(rnd() * scale);
    return p;
}

static float bf_round(float f)
{ /* the value bf16 stores, round to nearest even */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double q(float v, int mixed) { return mixed ? (double)bf_round(v) : (double)v; }

typedef struct ref {
    double *y;            /* conv + bias, unpooled (B, OC, OH, OW) */
    double *p;            /* pooled after ReLU */
    int *at;              /* window position of the first maximum, -1: no gradient */
    double *dx, *dw, *db; /* gradients from dp alone */
} ref;

static void reference(const cpu_conv2d_shape *s, int K, int mixed, const float *x, const float *w,
                      const float *b, const float *dp, int OH, int OW, ref *r)
{
    int PH = OH / K, PW = OW / K;
    size_t ny = (size_t)s->B * s->OC * OH * OW, np = (size_t)s->B * s->OC * PH * PW;
    size_t nx = (size_t)s->B * s->C * s->H * s->W, nw = (size_t)s->OC * s->C * s->KH * s->KW;
    r->y = calloc(ny, sizeof(double));
    r->p = calloc(np, sizeof(double));
    r->at = calloc(np, sizeof(int));
    r->dx = calloc(nx, sizeof(double));
    r->dw = calloc(nw, sizeof(double));
    r->db = calloc((size_t)s->OC, sizeof(double));
    double *dy = calloc(ny, sizeof(double));
#define X(n, c, h, w_)  x[(((size_t)(n)*s->C + (c)) * s->H + (h)) * s->W + (w_)]
#define W(o, c, kh, kw) w[(((size_t)(o)*s->C + (c)) * s->KH + (kh)) * s->KW + (kw)]
    for (int n = 0; n < s->B; n++)
        for (int o = 0; o < s->OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = b ? b[o] : 0;
                    for (int c = 0; c < s->C; c++)
                        for (int kh = 0; kh < s->KH; kh++)
                            for (int kw = 0; kw < s->KW; kw++) {
                                int h = oh * s->stride_h - s->pad_h + kh;
                                int ww = ow * s->stride_w - s->pad_w + kw;
                                if (h >= 0 && h < s->H && ww >= 0 && ww < s->W)
                                    acc += q(X(n, c, h, ww), mixed) * q(W(o, c, kh, kw), mixed);
                            }
                    r->y[(((size_t)n * s->OC + o) * OH + oh) * OW + ow] = acc;
                }
    for (int n = 0; n < s->B; n++)
        for (int o = 0; o < s->OC; o++)
            for (int ph = 0; ph < PH; ph++)
                for (int pw = 0; pw < PW; pw++) {
                    size_t pi = (((size_t)n * s->OC + o) * PH + ph) * PW + pw;
                    double best = -INFINITY;
                    int at = 0;
                    for (int k = 0; k < K * K; k++) {
                        double v = r->y[(((size_t)n * s->OC + o) * OH + ph * K + k / K) * OW +
                                        pw * K + k % K];
                        v = v > 0 ? v : 0; /* ReLU first, as the ops run apart */
                        if (v > best) {
                            best = v;
                            at = k;
                        }
                    }
                    r->p[pi] = best;
                    r->at[pi] = best > 0 ? at : -1;
                    if (best > 0)
                        dy[(((size_t)n * s->OC + o) * OH + ph * K + at / K) * OW + pw * K +
                           at % K] = q(dp[pi], mixed);
                }
    for (int n = 0; n < s->B; n++)
        for (int o = 0; o < s->OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double g = dy[(((size_t)n * s->OC + o) * OH + oh) * OW + ow];
                    if (g == 0)
                        continue;
                    r->db[o] += g;
                    for (int c = 0; c < s->C; c++)
                        for (int kh = 0; kh < s->KH; kh++)
                            for (int kw = 0; kw < s->KW; kw++) {
                                int h = oh * s->stride_h - s->pad_h + kh;
                                int ww = ow * s->stride_w - s->pad_w + kw;
                                if (h < 0 || h >= s->H || ww < 0 || ww >= s->W)
                                    continue;
                                r->dw[(((size_t)o * s->C + c) * s->KH + kh) * s->KW + kw] +=
                                    g * q(X(n, c, h, ww), mixed);
                                r->dx[(((size_t)n * s->C + c) * s->H + h) * s->W + ww] +=
                                    g * q(W(o, c, kh, kw), mixed);
                            }
                }
#undef X
#undef W
    free(dy);
}

static void ref_free(ref *r)
{
    free(r->y), free(r->p), free(r->at), free(r->dx), free(r->dw), free(r->db);
}

/* got - before must equal want, within tol relative to the largest |want| (at least
 * 1). */
static void check_acc(const char *what, const char *label, const float *got, const float *before,
                      const double *want, size_t n, double tol)
{
    double mag = 1, worst = 0;
    for (size_t i = 0; i < n; i++)
        mag = fabs(want[i]) > mag ? fabs(want[i]) : mag;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(((double)got[i] - (before ? before[i] : 0)) - want[i]);
        worst = d > worst ? d : worst;
    }
    CHECK_MSG(worst <= tol * mag, "%s %s: max error %g, allowed %g", label, what, worst, tol * mag);
}

static void test_block(cpu_conv2d_shape s, int K, int mixed, int first)
{
    int prec = mixed ? CPU_CONV_MIXED_BF16 : CPU_CONV_FP32;
    /* with under 4 input channels mixed precision computes in fp32 (conv.h) */
    int rounds = mixed && s.C >= 4;
    char label[160];
    snprintf(label, sizeof label, "B%d C%d %dx%d -> %d k%d s%d p%d pool %d %s%s", s.B, s.C, s.H,
             s.W, s.OC, s.KH, s.stride_h, s.pad_h, K, mixed ? "mixed" : "fp32",
             first ? " (no dinp)" : "");
    int ok = 0;
    CHECK_MSG(cpu_conv_block_supported(&s, K, prec, &ok) == STOKE_OK, "%s: %s", label,
              stoke_last_error());
    CHECK_MSG(ok, "%s: not fusable", label);
    if (!ok)
        return;
    int OH, OW;
    cpu_conv2d_out_size(&s, &OH, &OW);
    int PH = OH / K, PW = OW / K;
    size_t nx = (size_t)s.B * s.C * s.H * s.W, nw = (size_t)s.OC * s.C * s.KH * s.KW;
    size_t np = (size_t)s.B * s.OC * PH * PW;
    float *x = frand(nx, 1), *w = frand(nw, 0.5), *b = s.has_bias ? frand((size_t)s.OC, 0.2) : NULL;
    float *dp = frand(np, 1), *out = frand(np, 1), *out2 = frand(np, 1);
    float *dx = frand(nx, 1), *dw = frand(nw, 1), *db = frand((size_t)s.OC, 1);
    float *dx0 = malloc(nx * sizeof *dx0), *dw0 = malloc(nw * sizeof *dw0);
    float *db0 = malloc((size_t)s.OC * sizeof *db0);
    memcpy(dx0, dx, nx * sizeof *dx), memcpy(dw0, dw, nw * sizeof *dw);
    memcpy(db0, db, (size_t)s.OC * sizeof *db);
    uint8_t *idx = malloc(np);
    size_t wsz = 0;
    CHECK(cpu_conv_block_workspace(&s, K, prec, &wsz) == STOKE_OK && wsz > 0);
    char *ws = malloc(wsz + 3);
    ref r;
    reference(&s, K, rounds, x, w, b, dp, OH, OW, &r);

    /* an unaligned workspace: the kernels align it themselves */
    stoke_status st = cpu_conv_block_forward(out, idx, x, w, b, &s, K, prec, ws + 3, wsz);
    CHECK_MSG(st == STOKE_OK, "%s forward: %s", label, stoke_last_error());
    double tol = mixed ? 1e-5 : 1e-5; /* both accumulate in fp32 over the same values */
    check_acc("pooled output", label, out, NULL, r.p, np, tol);
    /* idx's layout is the block's own; where each gradient lands checks it below */
    /* inference: no index, same output */
    st = cpu_conv_block_forward(out2, NULL, x, w, b, &s, K, prec, NULL, 0);
    CHECK_MSG(st == STOKE_OK && memcmp(out, out2, np * sizeof *out) == 0,
              "%s: inference output differs", label);

    st = cpu_conv_block_backward(first ? NULL : dx, dw, s.has_bias ? db : NULL, dp, idx, x, w, &s,
                                 K, prec, ws + 3, wsz);
    CHECK_MSG(st == STOKE_OK, "%s backward: %s", label, stoke_last_error());
    /* mixed: oneDNN's backward rounds its inputs to bf16 too; fp32 accumulation of up
     * to a few thousand terms */
    double gtol = mixed ? 2e-5 : 1e-5;
    if (!first)
        check_acc("input gradient", label, dx, dx0, r.dx, nx, gtol);
    else
        CHECK_MSG(memcmp(dx, dx0, nx * sizeof *dx) == 0, "%s: dinp NULL but touched", label);
    check_acc("weight gradient", label, dw, dw0, r.dw, nw, gtol);
    if (s.has_bias)
        check_acc("bias gradient", label, db, db0, r.db, (size_t)s.OC, gtol);

    ref_free(&r);
    free(x), free(w), free(b), free(dp), free(out), free(out2), free(dx), free(dw), free(db);
    free(dx0), free(dw0), free(db0), free(idx), free(ws);
}

static void test_errors(void)
{
    cpu_conv2d_shape s = {2, 4, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1};
    float x[2 * 4 * 64], w[16 * 4 * 9], b[16], out[2 * 16 * 16];
    int ok = 1;
    CHECK(cpu_conv_block_supported(&s, 0, CPU_CONV_FP32, &ok) == STOKE_ERR_ARG && !ok);
    CHECK_STR_CONTAINS(stoke_last_error(), "pool kernel 0");
    CHECK(cpu_conv_block_supported(&s, 9, CPU_CONV_FP32, &ok) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "larger than the 8x8 output");
    CHECK(cpu_conv_block_supported(&s, 2, CPU_CONV_BF16, &ok) == STOKE_ERR_ARG);
    CHECK(cpu_conv_block_forward(out, NULL, x, w, NULL, &s, 2, CPU_CONV_FP32, NULL, 0) ==
          STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "bias missing");
    (void)b;
    cpu_conv2d_shape bad = s;
    bad.pad_h = 3;
    CHECK(cpu_conv_block_supported(&bad, 2, CPU_CONV_FP32, &ok) == STOKE_ERR_ARG);
}

/* The reference CNN: the loss and gradients of a model with fusion against fp32 with
 * none. fp32 fused must match; bf16 fused must be as close to fp32 as bf16 without
 * fusion is (its first convolution keeps fp32 math, see conv.h, so it is not
 * bit-for-bit the unfused bf16). The fused plan keeps neither the unpooled activations
 * nor their gradients. */
static double *run_model(const stoke_graph *g, stoke_precision prec, bool no_fusion, int B,
                         const float *xs, double *loss, stoke_mem_plan *plan)
{
    stoke_model *m = NULL;
    stoke_model_opts o = {.max_batch = B,
                          .precision = prec,
                          .training = true,
                          .seed = 7,
                          .optim = {.kind = STOKE_SGD},
                          .no_fusion = no_fusion};
    CHECK_MSG(stoke_model_new(g, &o, &m) == STOKE_OK, "%s", stoke_last_error());
    CHECK(stoke_graph_plan(g, &o, plan) == STOKE_OK);
    if (!m)
        return NULL;
    CHECK(plan->total == stoke_model_used_mem(m));
    memcpy(stoke_model_input(m, stoke_graph_find(g, "x")), xs, (size_t)B * 144 * sizeof(float));
    int32_t *y = stoke_model_input(m, stoke_graph_find(g, "y"));
    for (int i = 0; i < B; i++)
        y[i] = i % 10;
    CHECK(stoke_model_forward(m, B, true) == STOKE_OK);
    *loss = stoke_model_loss(m);
    stoke_model_zero_grad(m);
    CHECK_MSG(stoke_model_backward(m) == STOKE_OK, "%s", stoke_last_error());
    size_t total = 0;
    for (int p = 0; p < stoke_graph_param_count(g); p++)
        total += (size_t)stoke_graph_param(g, p)->elems;
    double *grads = calloc(total, sizeof *grads);
    size_t off = 0;
    for (int p = 0; p < stoke_graph_param_count(g); p++) {
        const float *gr = stoke_model_grad(m, p);
        for (int64_t i = 0; i < stoke_graph_param(g, p)->elems; i++)
            grads[off + (size_t)i] = gr ? gr[i] : 0;
        off += (size_t)stoke_graph_param(g, p)->elems;
    }
    stoke_model_free(m);
    return grads;
}

/* Largest difference of each parameter's gradient, over its largest |reference|. */
static double grad_err(const stoke_graph *g, const double *a, const double *want)
{
    double worst = 0;
    size_t off = 0;
    for (int p = 0; p < stoke_graph_param_count(g); p++) {
        int64_t n = stoke_graph_param(g, p)->elems;
        double mag = 1e-6, d = 0;
        for (int64_t i = 0; i < n; i++) {
            mag = fabs(want[off + i]) > mag ? fabs(want[off + i]) : mag;
            d = fabs(a[off + i] - want[off + i]) > d ? fabs(a[off + i] - want[off + i]) : d;
        }
        worst = d / mag > worst ? d / mag : worst;
        off += (size_t)n;
    }
    return worst;
}

static void test_model(bool cnn)
{
    stoke_shape in = {.ndim = 3, .dims = {1, 12, 12}};
    int64_t hidden[2] = {40, 24};
    stoke_graph *g = cnn ? stoke_preset_cnn(&in, 10) : stoke_preset_mlp(&in, hidden, 2, 10);
    CHECK(g != NULL);
    if (!g)
        return;
    int B = 6;
    float *xs = frand((size_t)B * 144, 1);
    double l32, l32f, lbf, lbff;
    stoke_mem_plan p32, p32f, pbf, pbff;
    double *g32 = run_model(g, STOKE_PREC_FP32, true, B, xs, &l32, &p32);
    double *g32f = run_model(g, STOKE_PREC_FP32, false, B, xs, &l32f, &p32f);
    double *gbf = run_model(g, STOKE_PREC_BF16, true, B, xs, &lbf, &pbf);
    double *gbff = run_model(g, STOKE_PREC_BF16, false, B, xs, &lbff, &pbff);
    CHECK_MSG(p32f.activations_per_sample < p32.activations_per_sample,
              "fused plan %zu bytes per sample, unfused %zu", p32f.activations_per_sample,
              p32.activations_per_sample);
    if (dnnl_util_bf16_kernels())
        CHECK(pbff.activations_per_sample < pbf.activations_per_sample);
    else /* emulated bf16 is never fused: the same plan and the same values */
        CHECK(pbff.activations_per_sample == pbf.activations_per_sample && lbff == lbf);
    if (g32 && g32f && gbf && gbff) {
        CHECK_NEAR(l32f, l32, 1e-5 * fabs(l32));
        double e32 = grad_err(g, g32f, g32), ebf = grad_err(g, gbf, g32),
               ebff = grad_err(g, gbff, g32);
        CHECK_MSG(e32 <= 1e-4, "%s: fp32 fused gradients differ by %g (relative)",
                  cnn ? "cnn" : "mlp", e32);
        CHECK_MSG(ebff <= 2 * ebf + 1e-3, "%s: bf16 fused gradients %g from fp32, unfused %g",
                  cnn ? "cnn" : "mlp", ebff, ebf);
        CHECK_MSG(fabs(lbff - l32) <= 2 * fabs(lbf - l32) + 1e-3 * fabs(l32),
                  "bf16 fused loss %g, unfused %g, fp32 %g", lbff, lbf, l32);
    }
    free(g32), free(g32f), free(gbf), free(gbff), free(xs);
    stoke_graph_free(g);
}

int main(void)
{
    /* B, C, H, W, OC, KH, KW, stride, stride, pad, pad, bias */
    cpu_conv2d_shape cnn1 = {3, 1, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1};
    cpu_conv2d_shape cnn2 = {2, 32, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1};
    cpu_conv2d_shape odd = {2, 3, 11, 11, 16, 3, 3, 1, 1, 1, 1, 1}; /* 11x11: floor leftover */
    cpu_conv2d_shape k3 = {2, 16, 9, 9, 16, 3, 3, 1, 1, 0, 0, 0};   /* 7x7, pool 3, no bias */
    cpu_conv2d_shape s2 = {2, 8, 16, 16, 32, 3, 3, 2, 2, 1, 1, 1};  /* stride 2 */
    /* few input channels, first layer: the direct kernel's general form */
    cpu_conv2d_shape d5 = {2, 2, 10, 10, 16, 5, 5, 1, 1, 2, 2, 1};  /* 5x5, pad 2 */
    cpu_conv2d_shape ds2 = {2, 3, 13, 13, 32, 3, 3, 2, 2, 1, 1, 0}; /* stride 2, no bias */
    /* mixed precision needs oneDNN's bf16 kernels: AVX-512 and up (the suite runs
     * capped to AVX2 too); below, the block says so and the model runs bf16 unfused */
    int bf16 = dnnl_util_bf16_kernels();
    if (!bf16) {
        int ok = 1;
        printf("note: oneDNN has no bf16 kernels on this CPU: mixed blocks not run\n");
        CHECK(cpu_conv_block_supported(&cnn2, 2, CPU_CONV_MIXED_BF16, &ok) ==
                  STOKE_ERR_UNAVAILABLE &&
              !ok);
    }
    for (int mixed = 0; mixed < 1 + bf16; mixed++) {
        test_block(cnn1, 2, mixed, 1);
        test_block(cnn2, 2, mixed, 0);
        test_block(odd, 2, mixed, 0);
        test_block(k3, 3, mixed, 0);
        test_block(s2, 2, mixed, 0);
        test_block(d5, 2, mixed, 1);
        test_block(ds2, 2, mixed, 1);
        test_block(cnn1, 2, mixed, 0); /* an input gradient: oneDNN's backward, the
                                          direct forward's argmax bytes */
    }
    test_errors();
    test_model(true);
    test_model(false);
    return CHECK_DONE();
}
