/* kernels_bench.c - GFLOP/s of the CPU linear and conv kernels at the benchmark's
 * shapes (MLP 784-512-512-10 at batch 256, the reference CNN at batch 128), beside the
 * best SGEMM this machine reaches (oneDNN matmul and OpenBLAS at 1024^3), with 1 and 2
 * compute threads, and a whole training step of each model op by op ("cnn step", "mlp
 * step": docs/nn-kernels.md, "Where a training step's time goes"). Usage:
 * stoke_bench_kernels [-f NAME_PART] [THREADS...] (default: 1 2); -f runs only the
 * cases whose name contains NAME_PART. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/cpu/conv.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"
#include "nn/cpu/loss.h"
#include "nn/cpu/optim.h"
#include "stoke/core.h"
#include "stoke/hw.h"
#include "stoke/tune.h"

static float *frand(size_t n)
{
    float *p = malloc(n * sizeof *p);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

static uint16_t *bf(const float *x, size_t n)
{
    uint16_t *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        p[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
    return p;
}

typedef void (*bench_fn)(void *ctx);

static double g_cpu_per_call; /* process CPU seconds per call in the best round */

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds per call: 3 warm-up calls (primitive creation), then the best of 7 rounds
 * of enough calls to fill ~60 ms each (the machine is shared: the best round is the
 * least disturbed). The process CPU time of that round is kept too: with 1 thread,
 * CPU time well below wall time means the machine was busy with something else. */
static double time_call(bench_fn f, void *ctx)
{
    for (int i = 0; i < 3; i++)
        f(ctx);
    uint64_t t0 = stoke_now_ns();
    f(ctx);
    double one = (double)(stoke_now_ns() - t0) * 1e-9;
    int reps = one > 0.06 ? 1 : (int)(0.06 / (one > 1e-7 ? one : 1e-7)) + 1;
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        double c0 = cpu_now();
        t0 = stoke_now_ns();
        for (int i = 0; i < reps; i++)
            f(ctx);
        double t = (double)(stoke_now_ns() - t0) * 1e-9 / reps;
        if (t < best) {
            best = t;
            g_cpu_per_call = (cpu_now() - c0) / reps;
        }
    }
    return best;
}

static const char *g_filter; /* run only the cases whose name contains it */

static int wanted(const char *label) { return !g_filter || strstr(label, g_filter); }

static void report(const char *name, double flops, double sec)
{
    char buf[64];
    printf("  %-48s %9.1f us (cpu %9.1f us)  %s\n", name, sec * 1e6, g_cpu_per_call * 1e6,
           flops > 0 ? stoke_format_flops(flops / sec, buf, sizeof buf) : "");
}

/* ---- linear ---- */
typedef struct lin {
    int B, C, OC, bf16;
    float *x, *w, *b, *y, *g, *dx, *dw, *db;
    uint16_t *xh, *wh, *gh;
} lin;

static void lin_fwd(void *p)
{
    lin *l = p;
    stoke_status st = l->bf16 ? cpu_linear_forward_bf16(l->y, l->xh, l->wh, l->b, l->B, l->C, l->OC)
                              : cpu_linear_forward(l->y, l->x, l->w, l->b, l->B, l->C, l->OC);
    if (st != STOKE_OK) {
        fprintf(stderr, "linear forward: %s\n", stoke_last_error());
        exit(1);
    }
}

static void lin_bwd(void *p)
{
    lin *l = p;
    stoke_status st =
        l->bf16
            ? cpu_linear_backward_bf16(l->dx, l->dw, l->db, l->gh, l->xh, l->wh, l->B, l->C, l->OC)
            : cpu_linear_backward(l->dx, l->dw, l->db, l->g, l->x, l->w, l->B, l->C, l->OC);
    if (st != STOKE_OK) {
        fprintf(stderr, "linear backward: %s\n", stoke_last_error());
        exit(1);
    }
}

static void bench_linear(int B, int C, int OC, const char *label)
{
    if (!wanted(label))
        return;
    lin l = {B,
             C,
             OC,
             0,
             frand((size_t)B * C),
             frand((size_t)OC * C),
             frand(OC),
             frand((size_t)B * OC),
             frand((size_t)B * OC),
             frand((size_t)B * C),
             frand((size_t)OC * C),
             frand(OC),
             NULL,
             NULL,
             NULL};
    l.xh = bf(l.x, (size_t)B * C), l.wh = bf(l.w, (size_t)OC * C), l.gh = bf(l.g, (size_t)B * OC);
    double f = 2.0 * B * C * OC;
    char name[96];
    const char *impls[] = {"", "onednn", "openblas"};
    for (int impl = CPU_LINEAR_DNNL; impl <= CPU_LINEAR_BLAS; impl++) {
        cpu_linear_set_impl((cpu_linear_impl)impl);
        snprintf(name, sizeof name, "%s fwd %s", label, impls[impl]);
        report(name, f, time_call(lin_fwd, &l));
        snprintf(name, sizeof name, "%s bwd %s", label, impls[impl]);
        report(name, 2 * f, time_call(lin_bwd, &l));
    }
    cpu_linear_set_impl(CPU_LINEAR_AUTO);
    l.bf16 = 1;
    snprintf(name, sizeof name, "%s fwd onednn bf16", label);
    report(name, f, time_call(lin_fwd, &l));
    snprintf(name, sizeof name, "%s bwd onednn bf16", label);
    report(name, 2 * f, time_call(lin_bwd, &l));
    free(l.x), free(l.w), free(l.b), free(l.y), free(l.g), free(l.dx), free(l.dw), free(l.db);
    free(l.xh), free(l.wh), free(l.gh);
}

typedef struct gemm {
    int n;
    float *a, *b, *c;
} gemm;

static void blas_gemm(void *p)
{
    gemm *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b,
                g->n, 0.0f, g->c, g->n);
}

/* ---- conv ---- */
typedef struct conv {
    cpu_conv2d_shape s;
    int prec, first; /* cpu_conv_prec */
    float *x, *w, *b, *y, *g, *dx, *dw, *db;
    uint16_t *xh, *wh, *gh;
    void *ws;
    size_t wsz;
} conv;

static void conv_fwd(void *p)
{
    conv *c = p;
    stoke_status st = c->prec == CPU_CONV_BF16
                          ? cpu_conv2d_forward_bf16(c->y, c->xh, c->wh, c->b, &c->s, c->ws, c->wsz)
                      : c->prec == CPU_CONV_MIXED_BF16
                          ? cpu_conv2d_forward_mixed(c->y, c->x, c->w, c->b, &c->s, c->ws, c->wsz)
                          : cpu_conv2d_forward(c->y, c->x, c->w, c->b, &c->s, c->ws, c->wsz);
    if (st != STOKE_OK) {
        fprintf(stderr, "conv forward: %s\n", stoke_last_error());
        exit(1);
    }
}

static void conv_bwd(void *p)
{
    conv *c = p;
    float *dx = c->first ? NULL : c->dx;
    stoke_status st =
        c->prec == CPU_CONV_BF16
            ? cpu_conv2d_backward_bf16(dx, c->dw, c->db, c->gh, c->xh, c->wh, &c->s, c->ws, c->wsz)
        : c->prec == CPU_CONV_MIXED_BF16
            ? cpu_conv2d_backward_mixed(dx, c->dw, c->db, c->g, c->x, c->w, &c->s, c->ws, c->wsz)
            : cpu_conv2d_backward(dx, c->dw, c->db, c->g, c->x, c->w, &c->s, c->ws, c->wsz);
    if (st != STOKE_OK) {
        fprintf(stderr, "conv backward: %s\n", stoke_last_error());
        exit(1);
    }
}

static void bench_conv(cpu_conv2d_shape s, int first, const char *label)
{
    if (!wanted(label))
        return;
    int OH, OW;
    if (cpu_conv2d_out_size(&s, &OH, &OW) != STOKE_OK)
        exit(1);
    size_t nx = (size_t)s.B * s.C * s.H * s.W, nw = (size_t)s.OC * s.C * s.KH * s.KW;
    size_t ny = (size_t)s.B * s.OC * OH * OW;
    conv c = {s,         CPU_CONV_FP32, first,     frand(nx), frand(nw),   frand(s.OC),
              frand(ny), frand(ny),     frand(nx), frand(nw), frand(s.OC), NULL,
              NULL,      NULL,          NULL,      0};
    c.xh = bf(c.x, nx), c.wh = bf(c.w, nw), c.gh = bf(c.g, ny);
    double f = 2.0 * s.B * s.OC * OH * OW * s.C * s.KH * s.KW;
    char name[96];
    for (int mode = 0; mode < 5; mode++) {
        c.prec = mode == 3 ? CPU_CONV_BF16 : mode == 4 ? CPU_CONV_MIXED_BF16 : CPU_CONV_FP32;
        cpu_conv2d_set_layout(mode == 1   ? CPU_CONV_LAYOUT_BLOCKED
                              : mode == 2 ? CPU_CONV_LAYOUT_PLAIN
                                          : CPU_CONV_LAYOUT_AUTO);
        if (cpu_conv2d_workspace(&s, c.prec, &c.wsz) != STOKE_OK) {
            fprintf(stderr, "conv prepare: %s\n", stoke_last_error());
            exit(1);
        }
        c.ws = c.wsz ? aligned_alloc(64, (c.wsz + 63) / 64 * 64) : NULL;
        const char *m = mode == 0   ? "auto"
                        : mode == 1 ? "blocked"
                        : mode == 2 ? "nchw"
                        : mode == 3 ? "auto bf16"
                                    : "auto mixed (fp32 in, bf16 math)";
        snprintf(name, sizeof name, "%s fwd %s", label, m);
        report(name, f, time_call(conv_fwd, &c));
        snprintf(name, sizeof name, "%s bwd %s%s", label, m, first ? " (no dinp)" : "");
        report(name, first ? f : 2 * f, time_call(conv_bwd, &c));
        free(c.ws);
    }
    cpu_conv2d_set_layout(CPU_CONV_LAYOUT_AUTO);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.g), free(c.dx), free(c.dw), free(c.db);
    free(c.xh), free(c.wh), free(c.gh);
}

/* ---- pooling ---- */
typedef struct pool {
    cpu_pool2d_shape s;
    float *x, *y, *g, *dx;
} pool;

static void pool_fwd(void *p)
{
    pool *q = p;
    cpu_maxpool2d_forward(q->y, q->x, &q->s);
}

static void pool_bwd(void *p)
{
    pool *q = p;
    cpu_maxpool2d_backward(q->dx, q->g, q->x, &q->s);
}

static void bench_pool(cpu_pool2d_shape s, const char *label)
{
    if (!wanted(label))
        return;
    size_t nx = (size_t)s.B * s.C * s.H * s.W, ny = nx / 4;
    pool q = {s, frand(nx), frand(ny), frand(ny), frand(nx)};
    char name[96];
    double bytes = (double)(nx + ny) * 4;
    snprintf(name, sizeof name, "%s fwd", label);
    double t = time_call(pool_fwd, &q);
    printf("  %-48s %9.1f us (cpu %9.1f us)  %.1f GB/s\n", name, t * 1e6, g_cpu_per_call * 1e6,
           bytes / t * 1e-9);
    snprintf(name, sizeof name, "%s bwd", label);
    t = time_call(pool_bwd, &q);
    printf("  %-48s %9.1f us (cpu %9.1f us)  %.1f GB/s\n", name, t * 1e6, g_cpu_per_call * 1e6,
           (bytes + nx * 8.0) / t * 1e-9);
    free(q.x), free(q.y), free(q.g), free(q.dx);
}

/* conv -> ReLU -> max-pool 2: the three kernels as the executor runs them apart
 * (activation gradients zeroed first, then accumulated), against the fused block. */
typedef struct block {
    cpu_conv2d_shape s;
    cpu_pool2d_shape ps;
    int prec, first;
    float *x, *w, *b, *y, *r, *p, *gp, *gr, *gy, *dx, *dw, *db;
    uint8_t *idx;
    void *ws;
    size_t wsz;
    size_t ny;
} block;

static void block_apart_fwd(void *v)
{
    block *k = v;
    (k->prec ? cpu_conv2d_forward_mixed : cpu_conv2d_forward)(k->y, k->x, k->w, k->b, &k->s, k->ws,
                                                              k->wsz);
    cpu_relu_forward(k->r, k->y, k->ny);
    cpu_maxpool2d_forward(k->p, k->r, &k->ps);
}

static void block_apart_bwd(void *v)
{
    block *k = v;
    memset(k->gr, 0, k->ny * sizeof(float));
    memset(k->gy, 0, k->ny * sizeof(float));
    cpu_maxpool2d_backward(k->gr, k->gp, k->r, &k->ps);
    cpu_relu_backward(k->gy, k->gr, k->r, k->ny);
    (k->prec ? cpu_conv2d_backward_mixed : cpu_conv2d_backward)(
        k->first ? NULL : k->dx, k->dw, k->db, k->gy, k->x, k->w, &k->s, k->ws, k->wsz);
}

static void block_fused_fwd(void *v)
{
    block *k = v;
    if (cpu_conv_block_forward(k->p, k->idx, k->x, k->w, k->b, &k->s, 2, k->prec, k->ws, k->wsz) !=
        STOKE_OK) {
        fprintf(stderr, "block forward: %s\n", stoke_last_error());
        exit(1);
    }
}

static void block_fused_bwd(void *v)
{
    block *k = v;
    if (cpu_conv_block_backward(k->first ? NULL : k->dx, k->dw, k->db, k->gp, k->idx, k->x, k->w,
                                &k->s, 2, k->prec, k->ws, k->wsz) != STOKE_OK) {
        fprintf(stderr, "block backward: %s\n", stoke_last_error());
        exit(1);
    }
}

static void bench_block(cpu_conv2d_shape s, int first, const char *label)
{
    if (!wanted(label))
        return;
    int OH, OW;
    if (cpu_conv2d_out_size(&s, &OH, &OW) != STOKE_OK)
        exit(1);
    size_t nx = (size_t)s.B * s.C * s.H * s.W, nw = (size_t)s.OC * s.C * s.KH * s.KW;
    size_t ny = (size_t)s.B * s.OC * OH * OW;
    block k = {s,
               {s.B, s.OC, OH, OW, 2, 2, 2, 2, 0, 0},
               0,
               first,
               frand(nx),
               frand(nw),
               frand(s.OC),
               frand(ny),
               frand(ny),
               frand(ny / 4),
               frand(ny / 4),
               frand(ny),
               frand(ny),
               frand(nx),
               frand(nw),
               frand(s.OC),
               malloc(ny / 4),
               NULL,
               0,
               ny};
    char name[128];
    for (int prec = 0; prec < 2; prec++) {
        k.prec = prec ? CPU_CONV_MIXED_BF16 : CPU_CONV_FP32;
        size_t a = 0, b = 0;
        if (cpu_conv2d_workspace(&s, k.prec, &a) != STOKE_OK ||
            cpu_conv_block_workspace(&s, 2, k.prec, &b) != STOKE_OK) {
            fprintf(stderr, "block prepare: %s\n", stoke_last_error());
            exit(1);
        }
        k.wsz = a > b ? a : b;
        k.ws = aligned_alloc(64, (k.wsz + 63) / 64 * 64);
        const char *pn = prec ? "mixed bf16" : "fp32";
        snprintf(name, sizeof name, "%s %s fwd apart", label, pn);
        report(name, 0, time_call(block_apart_fwd, &k));
        snprintf(name, sizeof name, "%s %s fwd fused", label, pn);
        report(name, 0, time_call(block_fused_fwd, &k));
        snprintf(name, sizeof name, "%s %s bwd apart", label, pn);
        report(name, 0, time_call(block_apart_bwd, &k));
        snprintf(name, sizeof name, "%s %s bwd fused", label, pn);
        report(name, 0, time_call(block_fused_bwd, &k));
        free(k.ws);
    }
    float *bufs[] = {k.x, k.w, k.b, k.y, k.r, k.p, k.gp, k.gr, k.gy, k.dx, k.dw, k.db};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(k.idx);
}

/* ---- a whole training step, op by op ----
 * The reference CNN (batch 128) and the MLP 784-512-512-10 (batch 256) in fp32, each
 * op through the kernel the executor calls for it (src/nn/cpu/op_*.c, with its
 * fusions: conv+ReLU+pool blocks, linear+ReLU), in the executor's order: forward,
 * loss, the activation gradients zeroed, backward, SGD (momentum 0.9, zeroing the
 * gradient as it goes). Each op's wall and CPU time per step, median of the timed
 * steps, beside its share of the step and, for the matmuls and convolutions, its
 * GFLOP/s (FLOPs as docs/train.md's MFU counts them). */

#define STEP_MAX_OPS 16

typedef struct step_op {
    const char *name;
    void (*fn)(void *ctx, int i);
    double flops;
} step_op;

typedef struct step_bench {
    const char *label;
    int nops;
    step_op op[STEP_MAX_OPS];
    void *ctx;
} step_bench;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void check(stoke_status st, const char *what)
{
    if (st != STOKE_OK) {
        fprintf(stderr, "%s: %s\n", what, stoke_last_error());
        exit(1);
    }
}

/* The executor's zeroing of the activation gradients (cpu_be_zero in src/nn/cpu/memory.c):
 * 64 KB pieces over the threads above 1 MB. */
static void zero_par(void *p, size_t bytes)
{
    if (bytes < ((size_t)1 << 20)) {
        memset(p, 0, bytes);
        return;
    }
    cpu_threads_apply();
    char *c = p;
    const size_t blk = (size_t)1 << 16;
    long nblk = (long)((bytes + blk - 1) / blk);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * blk;
        memset(c + o, 0, bytes - o < blk ? bytes - o : blk);
    }
}

/* Parameters: weights and biases in one array each, gradients and momenta beside. */
typedef struct step_params {
    int n;
    size_t len[8];
    float *w[8], *g[8], *m[8];
} step_params;

static void params_add(step_params *p, size_t len)
{
    p->len[p->n] = len;
    p->w[p->n] = frand(len);
    for (size_t i = 0; i < len; i++)
        p->w[p->n][i] *= 0.1f;
    p->g[p->n] = calloc(len, sizeof(float));
    p->m[p->n] = calloc(len, sizeof(float));
    p->n++;
}

static void params_sgd(step_params *p, int64_t t)
{
    cpu_sgd_config c = {.momentum = 0.9f};
    cpu_after_update after = {.zero_grad = true};
    for (int i = 0; i < p->n; i++)
        cpu_sgd_step_then(&c, 0.01, t, p->w[i], p->g[i], p->m[i], p->len[i], &after);
}

static void params_free(step_params *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->w[i]), free(p->g[i]), free(p->m[i]);
}

/* The CNN: block1 conv 1->32 + ReLU + pool, block2 32->64 + ReLU + pool, fc1
 * 3136->128 + ReLU, fc2 128->10, cross-entropy. dout: the activation gradients in one
 * span, as the executor keeps them (p1, p2, h, logits). */
typedef struct cnn_step {
    cpu_conv2d_shape s1, s2;
    step_params p; /* w1 b1 w2 b2 w3 b3 w4 b4 */
    float *x, *p1, *p2, *h, *logits, *dout, *dp1, *dp2, *dh, *dlogits, *mask;
    int32_t *t;
    uint8_t *idx1, *idx2;
    void *ws;
    size_t wsz, dout_bytes;
    int64_t step;
} cnn_step;

enum { CNN_B = 128 };

static void cnn_b1_fwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_conv_block_forward(c->p1, c->idx1, c->x, c->p.w[0], c->p.w[1], &c->s1, 2,
                                 CPU_CONV_FP32, c->ws, c->wsz),
          "block1 forward");
}

static void cnn_b2_fwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_conv_block_forward(c->p2, c->idx2, c->p1, c->p.w[2], c->p.w[3], &c->s2, 2,
                                 CPU_CONV_FP32, c->ws, c->wsz),
          "block2 forward");
}

static void cnn_fc1_fwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_linear_relu_forward(c->h, c->p2, c->p.w[4], c->p.w[5], CNN_B, 3136, 128, 0),
          "fc1 forward");
}

static void cnn_fc2_fwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_linear_forward(c->logits, c->h, c->p.w[6], c->p.w[7], CNN_B, 128, 10), "fc2 forward");
}

static void cnn_loss_fwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    float loss;
    check(cpu_cross_entropy(c->logits, c->t, CNN_B, 10, 0, 1, &loss, NULL), "loss");
}

static void cnn_zero(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    zero_par(c->dout, c->dout_bytes);
}

static void cnn_loss_bwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    float loss;
    check(cpu_cross_entropy(c->logits, c->t, CNN_B, 10, 0, 1, &loss, c->dlogits), "loss backward");
}

static void cnn_fc2_bwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_linear_backward(c->dh, c->p.g[6], c->p.g[7], c->dlogits, c->h, c->p.w[6], CNN_B, 128,
                              10),
          "fc2 backward");
}

static void cnn_fc1_bwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    cpu_relu_mask_grad(c->mask, NULL, c->dh, c->h, (size_t)CNN_B * 128);
    check(cpu_linear_backward(c->dp2, c->p.g[4], c->p.g[5], c->mask, c->p2, c->p.w[4], CNN_B, 3136,
                              128),
          "fc1 backward");
}

static void cnn_b2_bwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_conv_block_backward(c->dp1, c->p.g[2], c->p.g[3], c->dp2, c->idx2, c->p1, c->p.w[2],
                                  &c->s2, 2, CPU_CONV_FP32, c->ws, c->wsz),
          "block2 backward");
}

static void cnn_b1_bwd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    check(cpu_conv_block_backward(NULL, c->p.g[0], c->p.g[1], c->dp1, c->idx1, c->x, c->p.w[0],
                                  &c->s1, 2, CPU_CONV_FP32, c->ws, c->wsz),
          "block1 backward");
}

static void cnn_sgd(void *v, int i)
{
    cnn_step *c = v;
    (void)i;
    params_sgd(&c->p, ++c->step);
}

/* Runs warm-up steps, then `steps` timed ones; prints each op's median wall and CPU
 * time per step, its share of the summed medians and its rate. */
static void run_step(step_bench *b, int steps)
{
    int n = b->nops;
    double *wall = calloc((size_t)n * steps, sizeof *wall),
           *cpu = calloc((size_t)n * steps, sizeof *cpu);
    double *whole = calloc((size_t)steps, sizeof *whole);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < n; k++)
            b->op[k].fn(b->ctx, k);
    for (int r = 0; r < steps; r++) {
        uint64_t s0 = stoke_now_ns();
        for (int k = 0; k < n; k++) {
            double c0 = cpu_now();
            uint64_t t0 = stoke_now_ns();
            b->op[k].fn(b->ctx, k);
            wall[(size_t)k * steps + r] = (double)(stoke_now_ns() - t0) * 1e-9;
            cpu[(size_t)k * steps + r] = cpu_now() - c0;
        }
        whole[r] = (double)(stoke_now_ns() - s0) * 1e-9;
    }
    double med[STEP_MAX_OPS], cmed[STEP_MAX_OPS], sum = 0, flops = 0;
    for (int k = 0; k < n; k++) {
        med[k] = median(wall + (size_t)k * steps, steps);
        cmed[k] = median(cpu + (size_t)k * steps, steps);
        sum += med[k];
        flops += b->op[k].flops;
    }
    double best = whole[0];
    for (int r = 1; r < steps; r++)
        best = whole[r] < best ? whole[r] : best;
    double wmed = median(whole, steps);
    char buf[64];
    printf("  %s: %d steps; step median %.2f ms, best %.2f ms; sum of op medians %.2f ms; "
           "%.1f MFLOP a step: %s at the median\n",
           b->label, steps, wmed * 1e3, best * 1e3, sum * 1e3, flops * 1e-6,
           stoke_format_flops(flops / wmed, buf, sizeof buf));
    printf("    %-34s %9s %9s %6s  %s\n", "op", "wall us", "cpu us", "share", "rate");
    for (int k = 0; k < n; k++)
        printf("    %-34s %9.1f %9.1f %5.1f%%  %s\n", b->op[k].name, med[k] * 1e6, cmed[k] * 1e6,
               100 * med[k] / sum,
               b->op[k].flops > 0 ? stoke_format_flops(b->op[k].flops / med[k], buf, sizeof buf)
                                  : "");
    free(wall), free(cpu), free(whole);
}

static void bench_cnn_step(int steps)
{
    if (!wanted("cnn step"))
        return;
    cnn_step c = {.s1 = {CNN_B, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1},
                  .s2 = {CNN_B, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1}};
    size_t n1 = (size_t)CNN_B * 32 * 14 * 14, n2 = (size_t)CNN_B * 3136, nh = (size_t)CNN_B * 128,
           nl = (size_t)CNN_B * 10;
    params_add(&c.p, 32 * 9), params_add(&c.p, 32);
    params_add(&c.p, (size_t)64 * 32 * 9), params_add(&c.p, 64);
    params_add(&c.p, (size_t)128 * 3136), params_add(&c.p, 128);
    params_add(&c.p, (size_t)10 * 128), params_add(&c.p, 10);
    c.x = frand((size_t)CNN_B * 784);
    c.p1 = malloc(n1 * 4), c.p2 = malloc(n2 * 4), c.h = malloc(nh * 4), c.logits = malloc(nl * 4);
    c.dout_bytes = (n1 + n2 + nh + nl) * 4;
    c.dout = aligned_alloc(64, (c.dout_bytes + 63) / 64 * 64);
    c.dp1 = c.dout, c.dp2 = c.dp1 + n1, c.dh = c.dp2 + n2, c.dlogits = c.dh + nh;
    c.mask = malloc(nh * 4);
    c.idx1 = malloc(n1), c.idx2 = malloc(n2);
    c.t = malloc(CNN_B * sizeof *c.t);
    for (int i = 0; i < CNN_B; i++)
        c.t[i] = i % 10;
    size_t a = 0, b = 0;
    check(cpu_conv_block_workspace(&c.s1, 2, CPU_CONV_FP32, &a), "block1 workspace");
    check(cpu_conv_block_workspace(&c.s2, 2, CPU_CONV_FP32, &b), "block2 workspace");
    c.wsz = a > b ? a : b;
    c.ws = aligned_alloc(64, (c.wsz + 63) / 64 * 64);
    double conv1 = 2.0 * CNN_B * 32 * 784 * 9, conv2 = 2.0 * CNN_B * 64 * 196 * 32 * 9;
    double fc1 = 2.0 * CNN_B * 3136 * 128, fc2 = 2.0 * CNN_B * 128 * 10;
    step_bench sb = {.label = "cnn step (batch 128, fp32)",
                     .ctx = &c,
                     .op = {{"fwd block1 conv1+relu+pool (direct)", cnn_b1_fwd, conv1},
                            {"fwd block2 conv2+relu+pool", cnn_b2_fwd, conv2},
                            {"fwd fc1 3136->128 +relu", cnn_fc1_fwd, fc1},
                            {"fwd fc2 128->10", cnn_fc2_fwd, fc2},
                            {"fwd cross-entropy", cnn_loss_fwd, 0},
                            {"bwd zero activation grads", cnn_zero, 0},
                            {"bwd cross-entropy", cnn_loss_bwd, 0},
                            {"bwd fc2 (dW, db, dx)", cnn_fc2_bwd, 2 * fc2},
                            {"bwd fc1 (relu mask, dW, db, dx)", cnn_fc1_bwd, 2 * fc1},
                            {"bwd block2 (dW, db, dx)", cnn_b2_bwd, 2 * conv2},
                            {"bwd block1 (dW, db; direct)", cnn_b1_bwd, conv1},
                            {"opt sgd (momentum, zero grads)", cnn_sgd, 0}}};
    while (sb.op[sb.nops].fn)
        sb.nops++;
    run_step(&sb, steps);
    params_free(&c.p);
    free(c.x), free(c.p1), free(c.p2), free(c.h), free(c.logits), free(c.dout), free(c.mask);
    free(c.idx1), free(c.idx2), free(c.t), free(c.ws);
}

/* The MLP 784-512-512-10 at batch 256: fc1 + ReLU (no input gradient: the data),
 * fc2 + ReLU, fc3, cross-entropy. */
typedef struct mlp_step {
    step_params p;
    float *x, *h1, *h2, *logits, *dout, *dh1, *dh2, *dlogits, *mask;
    int32_t *t;
    int64_t step;
    size_t dout_bytes;
} mlp_step;

enum { MLP_B = 256 };

static void mlp_fc1_fwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    check(cpu_linear_relu_forward(m->h1, m->x, m->p.w[0], m->p.w[1], MLP_B, 784, 512, 0), "fc1");
}

static void mlp_fc2_fwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    check(cpu_linear_relu_forward(m->h2, m->h1, m->p.w[2], m->p.w[3], MLP_B, 512, 512, 0), "fc2");
}

static void mlp_fc3_fwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    check(cpu_linear_forward(m->logits, m->h2, m->p.w[4], m->p.w[5], MLP_B, 512, 10), "fc3");
}

static void mlp_loss_fwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    float loss;
    check(cpu_cross_entropy(m->logits, m->t, MLP_B, 10, 0, 1, &loss, NULL), "loss");
}

static void mlp_zero(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    zero_par(m->dout, m->dout_bytes);
}

static void mlp_loss_bwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    float loss;
    check(cpu_cross_entropy(m->logits, m->t, MLP_B, 10, 0, 1, &loss, m->dlogits), "loss backward");
}

static void mlp_fc3_bwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    check(cpu_linear_backward(m->dh2, m->p.g[4], m->p.g[5], m->dlogits, m->h2, m->p.w[4], MLP_B,
                              512, 10),
          "fc3 backward");
}

static void mlp_fc2_bwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    cpu_relu_mask_grad(m->mask, NULL, m->dh2, m->h2, (size_t)MLP_B * 512);
    check(cpu_linear_backward(m->dh1, m->p.g[2], m->p.g[3], m->mask, m->h1, m->p.w[2], MLP_B, 512,
                              512),
          "fc2 backward");
}

static void mlp_fc1_bwd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    cpu_relu_mask_grad(m->mask, NULL, m->dh1, m->h1, (size_t)MLP_B * 512);
    check(
        cpu_linear_backward(NULL, m->p.g[0], m->p.g[1], m->mask, m->x, m->p.w[0], MLP_B, 784, 512),
        "fc1 backward");
}

static void mlp_sgd(void *v, int i)
{
    mlp_step *m = v;
    (void)i;
    params_sgd(&m->p, ++m->step);
}

static void bench_mlp_step(int steps)
{
    if (!wanted("mlp step"))
        return;
    mlp_step m = {0};
    size_t nh = (size_t)MLP_B * 512, nl = (size_t)MLP_B * 10;
    params_add(&m.p, (size_t)512 * 784), params_add(&m.p, 512);
    params_add(&m.p, (size_t)512 * 512), params_add(&m.p, 512);
    params_add(&m.p, (size_t)10 * 512), params_add(&m.p, 10);
    m.x = frand((size_t)MLP_B * 784);
    m.h1 = malloc(nh * 4), m.h2 = malloc(nh * 4), m.logits = malloc(nl * 4);
    m.dout_bytes = (2 * nh + nl) * 4;
    m.dout = aligned_alloc(64, (m.dout_bytes + 63) / 64 * 64);
    m.dh1 = m.dout, m.dh2 = m.dh1 + nh, m.dlogits = m.dh2 + nh;
    m.mask = malloc(nh * 4);
    m.t = malloc(MLP_B * sizeof *m.t);
    for (int i = 0; i < MLP_B; i++)
        m.t[i] = i % 10;
    double fc1 = 2.0 * MLP_B * 784 * 512, fc2 = 2.0 * MLP_B * 512 * 512,
           fc3 = 2.0 * MLP_B * 512 * 10;
    step_bench sb = {.label = "mlp step (784-512-512-10, batch 256, fp32)",
                     .ctx = &m,
                     .op = {{"fwd fc1 784->512 +relu", mlp_fc1_fwd, fc1},
                            {"fwd fc2 512->512 +relu", mlp_fc2_fwd, fc2},
                            {"fwd fc3 512->10", mlp_fc3_fwd, fc3},
                            {"fwd cross-entropy", mlp_loss_fwd, 0},
                            {"bwd zero activation grads", mlp_zero, 0},
                            {"bwd cross-entropy", mlp_loss_bwd, 0},
                            {"bwd fc3 (dW, db, dx)", mlp_fc3_bwd, 2 * fc3},
                            {"bwd fc2 (relu mask, dW, db, dx)", mlp_fc2_bwd, 2 * fc2},
                            {"bwd fc1 (relu mask, dW, db)", mlp_fc1_bwd, fc1},
                            {"opt sgd (momentum, zero grads)", mlp_sgd, 0}}};
    while (sb.op[sb.nops].fn)
        sb.nops++;
    run_step(&sb, steps);
    params_free(&m.p);
    free(m.x), free(m.h1), free(m.h2), free(m.logits), free(m.dout), free(m.mask), free(m.t);
}

static void bench_gemm(void)
{
    gemm g = {1024, frand(1 << 20), frand(1 << 20), frand(1 << 20)};
    double f = 2.0 * 1024 * 1024 * 1024;
    report("sgemm 1024^3 openblas", f, time_call(blas_gemm, &g));
    lin l = {1024, 1024, 1024, 0, g.a, g.b, NULL, g.c, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    cpu_linear_set_impl(CPU_LINEAR_DNNL);
    report("sgemm 1024^3 onednn matmul (A B^T)", f, time_call(lin_fwd, &l));
    l.bf16 = 1;
    l.xh = bf(g.a, 1 << 20), l.wh = bf(g.b, 1 << 20);
    report("bf16 gemm 1024^3 onednn matmul (A B^T)", f, time_call(lin_fwd, &l));
    cpu_linear_set_impl(CPU_LINEAR_AUTO);
    free(l.xh), free(l.wh), free(g.a), free(g.b), free(g.c);
}

static void run(int threads)
{
    cpu_set_threads(threads);
    printf("compute threads: %d\n", threads);
    if (wanted("sgemm"))
        bench_gemm();
    bench_linear(256, 784, 512, "mlp fc1 256x784->512");
    bench_linear(256, 512, 512, "mlp fc2 256x512->512");
    bench_linear(256, 512, 10, "mlp fc3 256x512->10");
    bench_linear(128, 3136, 128, "cnn fc1 128x3136->128");
    bench_linear(128, 128, 10, "cnn fc2 128x128->10");
    bench_conv((cpu_conv2d_shape){128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1}, 1,
               "cnn conv1 128x1x28x28->32");
    bench_conv((cpu_conv2d_shape){128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1}, 0,
               "cnn conv2 128x32x14x14->64");
    bench_block((cpu_conv2d_shape){128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1}, 1,
                "cnn block1 conv+relu+pool");
    bench_block((cpu_conv2d_shape){128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1}, 0,
                "cnn block2 conv+relu+pool");
    bench_pool((cpu_pool2d_shape){128, 32, 28, 28, 2, 2, 2, 2, 0, 0}, "maxpool 128x32x28x28");
    bench_pool((cpu_pool2d_shape){128, 64, 14, 14, 2, 2, 2, 2, 0, 0}, "maxpool 128x64x14x14");
    bench_cnn_step(40);
    bench_mlp_step(40);
}

/* The "openblas" rows run whatever kernels OpenBLAS loaded; say which, and whether they
 * are a fallback far below this CPU, so a slow row is not read as OpenBLAS's best. */
static void print_openblas(void)
{
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("OPENBLAS_CORETYPE=%s\n", ct ? ct : "(unset)");
    stoke_openblas_info ob;
    stoke_cpu_info cpu;
    stoke_openblas_probe(&ob);
    if (stoke_cpu_probe(NULL, &cpu) != STOKE_OK)
        cpu.simd = 0;
    stoke_blas_check c;
    stoke_openblas_check(ob.core, cpu.simd | cpu.simd_hidden, &c);
    printf("OpenBLAS core %s: %s\n", ob.core[0] ? ob.core : "(none)", stoke_blas_fit_name(c.fit));
    if (c.fit != STOKE_BLAS_FIT_MATCH)
        printf("  %s\n", c.reason);
}

int main(int argc, char **argv)
{
    print_openblas();
    int nthreads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0 && i + 1 < argc)
            g_filter = argv[++i];
        else if (atoi(argv[i]) > 0)
            nthreads++;
        else {
            fprintf(stderr, "usage: %s [-f NAME_PART] [THREADS...]\n", argv[0]);
            return 2;
        }
    }
    if (!nthreads) {
        run(1);
        run(2);
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0)
            i++;
        else
            run(atoi(argv[i]));
    }
    return 0;
}
