/* test_gpu_libs.c - the cuBLAS, cuBLASLt and cuDNN driver tables (src/nn/cuda/libs.h) against
 * the CPU test doubles in tests/fake/: GEMMs and convolutions checked against naive
 * references, the doubles' argument checks, and the fake CUDA runtime's memory and
 * stream functions the CUDA backend uses. Each case runs in a child process because
 * the doubles load their scenario once. */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "gpu_case.h"
#include "hw/gpu_impl.h"
#include "nn/cuda/kern.h"
#include "nn/cuda/libs.h"

/* The cases end with _exit, which skips LeakSanitizer's check at exit: ask for it here,
 * in the ASan build, so data the doubles own (queued work, graphs) is seen freed. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static void no_leaks(void) { CHECK_INT_EQ(__lsan_do_recoverable_leak_check(), 0); }
#else
static void no_leaks(void) {}
#endif

static struct {
    stoke_cudart *rt;
    nn_cublas *blas;
    nn_cudnn *dnn;
    void *stream;
    int (*blas_violations)(void);
    const char *(*blas_problem)(void);
    int (*dnn_violations)(void);
    const char *(*dnn_problem)(void);
    int (*extent)(const void *, size_t *);
} E;

/* ---- Setup and device memory ---- */

static int open_all(void)
{
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    setenv("STOKE_CUBLAS_LIBRARY", FAKE_CUBLAS, 1);
    setenv("STOKE_CUDNN_LIBRARY", FAKE_CUDNN, 1);
    CHECK_INT_EQ(stoke_cudart_open(&E.rt), STOKE_OK);
    CHECK_INT_EQ(nn_cublas_open(&E.blas), STOKE_OK);
    CHECK_INT_EQ(nn_cudnn_open(&E.dnn), STOKE_OK);
    if (!E.rt || !E.blas || !E.dnn)
        return 0;
    *(void **)&E.blas_violations = dlsym(E.blas->lib, "fake_cublas_violations");
    *(void **)&E.blas_problem = dlsym(E.blas->lib, "fake_cublas_last_problem");
    *(void **)&E.dnn_violations = dlsym(E.dnn->lib, "fake_cudnn_violations");
    *(void **)&E.dnn_problem = dlsym(E.dnn->lib, "fake_cudnn_last_problem");
    *(void **)&E.extent = dlsym(E.rt->lib, "fake_cudart_extent");
    CHECK(E.blas_violations && E.blas_problem && E.dnn_violations && E.dnn_problem && E.extent);
    CHECK_INT_EQ(E.rt->stream_create_with_flags(&E.stream, CU_STREAM_NON_BLOCKING), 0);
    return E.blas_violations && E.dnn_violations && E.extent && E.stream;
}

static void close_all(void)
{
    int (*live)(void) = NULL;
    *(void **)&live = dlsym(E.rt->lib, "fake_cudart_live");
    E.rt->stream_destroy(E.stream);
    CHECK_INT_EQ(live(), 0);
    nn_cudnn_close(E.dnn);
    nn_cublas_close(E.blas);
    stoke_cudart_close(E.rt);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CHECK_INT_EQ(E.rt->malloc(&p, bytes), 0);
    return p;
}

static void to_dev(void *dev, const void *host, size_t bytes)
{
    CHECK_INT_EQ(E.rt->memcpy(dev, host, bytes, CU_MEMCPY_HOST_TO_DEVICE), 0);
}

static void from_dev(void *host, const void *dev, size_t bytes)
{
    CHECK_INT_EQ(E.rt->memcpy(host, dev, bytes, CU_MEMCPY_DEVICE_TO_HOST), 0);
}

/* The doubles queue their work on the stream as the libraries do: a synchronous copy
 * out of device memory sees it only after this. */
static void finish(void) { CHECK_INT_EQ(E.rt->stream_synchronize(E.stream), 0); }

/* ---- Values: multiples of 1/8 in [-1, 1], exact in bf16 and fp16, so products and
 * their short sums are exact in float too ---- */

static double val(size_t i, int salt)
{
    return (double)((int)((i * 37 + (size_t)salt * 11) % 17) - 8) / 8.0;
}

static size_t tsize(int t) { return t == NC_R_32F ? 4 : 2; }

/* rounded as stoke's kernels round (nn/cuda/kern.h) */
static void put(void *p, int t, size_t i, double v)
{
    float f = (float)v;
    if (t == NC_R_32F)
        ((float *)p)[i] = f;
    else
        ((uint16_t *)p)[i] = t == NC_R_16F ? nk_to_f16(f) : nk_to_bf16(f);
}

static double get(const void *p, int t, size_t i)
{
    if (t == NC_R_32F)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == NC_R_16F ? nk_f16_to_f32(h) : nk_bf16_to_f32(h);
}

/* What a value reads back as after a store in type t. */
static double rounded(int t, double v)
{
    char buf[4];
    put(buf, t, 0, v);
    return get(buf, t, 0);
}

/* ---- GEMM ---- */

typedef struct gemm_case {
    int ta, tb, m, n, k, lda, ldb, ldc, ab, c, batch, compute;
    long long sa, sb, sc;
    float alpha, beta;
    int nan_c; /* C starts as NaN (with beta 0 it must not be read) */
} gemm_case;

/* Elements from a batch's first matrix to the end of its last one. */
static size_t span(int cols, int ld, long long stride, int batch)
{
    return (size_t)((long long)(batch - 1) * stride + (long long)ld * cols);
}

static double ref_at(const gemm_case *g, const void *a, const void *b, int p, int i, int j)
{
    double sum = 0;
    for (int l = 0; l < g->k; l++) {
        long long ai = g->ta ? l + (long long)i * g->lda : i + (long long)l * g->lda;
        long long bi = g->tb ? j + (long long)l * g->ldb : l + (long long)j * g->ldb;
        sum += get(a, g->ab, (size_t)(ai + p * g->sa)) * get(b, g->ab, (size_t)(bi + p * g->sb));
    }
    return sum;
}

/* One GEMM's operands, on the host and in the double's device memory. */
typedef struct gemm_bufs {
    size_t na, nb, nc; /* elements */
    void *ha, *hb, *hc, *da, *db, *dc;
} gemm_bufs;

static void *filled(size_t n, int type, int salt, int nan)
{
    void *p = malloc(n * tsize(type));
    for (size_t i = 0; i < n; i++)
        put(p, type, i, nan ? NAN : val(i, salt));
    return p;
}

static void gemm_upload(const gemm_case *g, gemm_bufs *m)
{
    m->na = span(g->ta ? g->m : g->k, g->lda, g->sa, g->batch);
    m->nb = span(g->tb ? g->k : g->n, g->ldb, g->sb, g->batch);
    m->nc = span(g->n, g->ldc, g->sc, g->batch);
    m->ha = filled(m->na, g->ab, 1, 0), m->hb = filled(m->nb, g->ab, 2, 0);
    m->hc = filled(m->nc, g->c, 3, g->nan_c);
    m->da = dev_alloc(m->na * tsize(g->ab)), m->db = dev_alloc(m->nb * tsize(g->ab));
    m->dc = dev_alloc(m->nc * tsize(g->c));
    /* A and B go through the stream's queue: the GEMM must run it first. */
    CHECK_INT_EQ(
        E.rt->memcpy_async(m->da, m->ha, m->na * tsize(g->ab), CU_MEMCPY_HOST_TO_DEVICE, E.stream),
        0);
    CHECK_INT_EQ(
        E.rt->memcpy_async(m->db, m->hb, m->nb * tsize(g->ab), CU_MEMCPY_HOST_TO_DEVICE, E.stream),
        0);
    to_dev(m->dc, m->hc, m->nc * tsize(g->c));
}

static void gemm_release(gemm_bufs *m)
{
    E.rt->free(m->da), E.rt->free(m->db), E.rt->free(m->dc);
    free(m->ha), free(m->hb), free(m->hc);
}

static int gemm_call(void *h, const gemm_case *g, const gemm_bufs *m)
{
    if (g->batch == 1 && g->sa == 0)
        return E.blas->gemm_ex(h, g->ta, g->tb, g->m, g->n, g->k, &g->alpha, m->da, g->ab, g->lda,
                               m->db, g->ab, g->ldb, &g->beta, m->dc, g->c, g->ldc, g->compute,
                               NC_GEMM_DEFAULT);
    return E.blas->gemm_strided_batched_ex(
        h, g->ta, g->tb, g->m, g->n, g->k, &g->alpha, m->da, g->ab, g->lda, g->sa, m->db, g->ab,
        g->ldb, g->sb, &g->beta, m->dc, g->c, g->ldc, g->sc, g->batch, g->compute, NC_GEMM_DEFAULT);
}

/* Mismatches of C read back against the reference: every element of every row up to
 * ldc, so padding rows must come back untouched. */
static int gemm_mismatches(const gemm_case *g, const gemm_bufs *m, const void *out)
{
    int bad = 0;
    for (int p = 0; p < g->batch; p++)
        for (int j = 0; j < g->n; j++)
            for (int i = 0; i < g->ldc; i++) {
                size_t ci = (size_t)(i + (long long)j * g->ldc + p * g->sc);
                double want = get(m->hc, g->c, ci);
                if (i < g->m)
                    want = rounded(g->c, g->alpha * ref_at(g, m->ha, m->hb, p, i, j) +
                                             (g->beta != 0 ? g->beta * want : 0));
                double got = get(out, g->c, ci);
                bad += !(got == want || (isnan(got) && isnan(want)));
            }
    return bad;
}

/* Runs one GEMM on the double; returns the number of wrong elements of C. */
static int gemm_run(const gemm_case *g)
{
    gemm_bufs m;
    gemm_upload(g, &m);
    void *h = NULL;
    CHECK_INT_EQ(E.blas->create(&h), 0);
    CHECK_INT_EQ(E.blas->set_stream(h, E.stream), 0);
    int rc = gemm_call(h, g, &m);
    CHECK_MSG(rc == 0, "gemm: %s (%s)", nn_cublas_error(E.blas, rc), E.blas_problem());
    finish();
    void *out = malloc(m.nc * tsize(g->c));
    from_dev(out, m.dc, m.nc * tsize(g->c));
    int bad = gemm_mismatches(g, &m, out);
    CHECK_INT_EQ(E.blas->destroy(h), 0);
    gemm_release(&m);
    free(out);
    return bad;
}

static gemm_case plain(int ta, int tb, int m, int n, int k)
{
    return (gemm_case){.ta = ta,
                       .tb = tb,
                       .m = m,
                       .n = n,
                       .k = k,
                       .lda = ta ? k : m,
                       .ldb = tb ? n : k,
                       .ldc = m,
                       .ab = NC_R_32F,
                       .c = NC_R_32F,
                       .batch = 1,
                       .compute = NC_COMPUTE_32F,
                       .alpha = 1.5f,
                       .beta = 0.5f};
}

static void case_gemm(void)
{
    if (!open_all())
        return;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case g = plain(ta, tb, 5, 4, 3);
            CHECK_MSG(gemm_run(&g) == 0, "trans %d %d", ta, tb);
            g.lda += 3, g.ldb += 2, g.ldc += 4; /* padded leading dimensions */
            CHECK_MSG(gemm_run(&g) == 0, "trans %d %d padded", ta, tb);
        }
    gemm_case g = plain(NC_OP_N, NC_OP_T, 6, 7, 8);
    g.compute = NC_COMPUTE_32F_FAST_TF32;
    CHECK_INT_EQ(gemm_run(&g), 0);
    const int half[2] = {NC_R_16BF, NC_R_16F};
    for (int i = 0; i < 2; i++) {
        g = plain(NC_OP_T, NC_OP_N, 6, 5, 8);
        g.ab = half[i];
        CHECK_MSG(gemm_run(&g) == 0, "type %d into float", half[i]);
        g.c = half[i];
        CHECK_MSG(gemm_run(&g) == 0, "type %d into itself", half[i]);
    }
    /* beta 0: C is not read, so a NaN there must not come out */
    g = plain(NC_OP_N, NC_OP_N, 4, 3, 5);
    g.beta = 0, g.nan_c = 1;
    CHECK_INT_EQ(gemm_run(&g), 0);
    /* strided batched, with gaps between the matrices and B shared (stride 0) */
    g = plain(NC_OP_T, NC_OP_N, 4, 3, 5);
    g.batch = 3, g.lda = 6, g.sa = 6 * 4 + 7, g.sb = 0, g.ldc = 5, g.sc = 5 * 3 + 2;
    CHECK_INT_EQ(gemm_run(&g), 0);
    g.ab = NC_R_16BF, g.c = NC_R_16BF, g.beta = 0, g.nan_c = 1;
    CHECK_INT_EQ(gemm_run(&g), 0);
    CHECK_INT_EQ(E.blas_violations(), 0);
    close_all();
}

/* A GEMM is queued as cuBLAS enqueues its kernels: after the copies into A and B, before
 * the copy out of C, and nothing of it done until something waits for the stream. */
static void case_gemm_queued(void)
{
    if (!open_all())
        return;
    gemm_case g = plain(NC_OP_N, NC_OP_T, 5, 4, 3);
    gemm_bufs m;
    gemm_upload(&g, &m); /* A and B through the queue, C synchronously */
    void *h = NULL;
    CHECK_INT_EQ(E.blas->create(&h), 0);
    CHECK_INT_EQ(E.blas->set_stream(h, E.stream), 0);
    CHECK_INT_EQ(gemm_call(h, &g, &m), 0);
    size_t bytes = m.nc * tsize(g.c);
    float *out = malloc(bytes), *peek = malloc(bytes);
    for (size_t i = 0; i < m.nc; i++)
        out[i] = -7;
    CHECK_INT_EQ(E.rt->memcpy_async(out, m.dc, bytes, CU_MEMCPY_DEVICE_TO_HOST, E.stream), 0);
    from_dev(peek, m.dc, bytes);
    CHECK(memcmp(peek, m.hc, bytes) == 0); /* C untouched: the GEMM waits in the queue */
    CHECK(out[0] == -7 && out[m.nc - 1] == -7);
    finish();
    CHECK_INT_EQ(gemm_mismatches(&g, &m, out), 0);
    CHECK_INT_EQ(E.blas_violations(), 0);
    CHECK_INT_EQ(E.blas->destroy(h), 0);
    gemm_release(&m);
    free(out), free(peek);
    close_all();
}

/* One bad GEMM: the expected status, counted once, the problem naming `what`. */
static void refused(int rc, int want, const char *what)
{
    static int expected_violations;
    CHECK_MSG(rc == want, "%s: status %d, want %d", what, rc, want);
    CHECK_INT_EQ(E.blas_violations(), ++expected_violations);
    CHECK_STR_CONTAINS(E.blas_problem(), what);
}

static void case_gemm_refused(void)
{
    if (!open_all())
        return;
    float one = 1, zero = 0, host[64];
    float *a = dev_alloc(64 * 4), *b = dev_alloc(64 * 4), *c = dev_alloc(64 * 4);
    void *h = NULL, *h2 = NULL;
    CHECK_INT_EQ(E.blas->create(&h), 0);
    CHECK_INT_EQ(E.blas->set_stream(h, E.stream), 0);
    CHECK_INT_EQ(E.blas->set_math_mode(h, NC_TF32_TENSOR_OP_MATH), 0);
#define GEMM(h, ta, m, n, k, A, at, lda, ldb, C, ct, ldc)                                     \
    E.blas->gemm_ex(h, ta, NC_OP_N, m, n, k, &one, A, at, lda, b, at, ldb, &zero, C, ct, ldc, \
                    NC_COMPUTE_32F, NC_GEMM_DEFAULT)
    CHECK_INT_EQ(GEMM(h, NC_OP_N, 4, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_32F, 4), 0);
    refused(GEMM(h, 5, 4, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_32F, 4), 7, "trans");
    refused(GEMM(h, NC_OP_N, -1, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_32F, 4), 7, "m n k");
    refused(GEMM(h, NC_OP_N, 4, 4, 4, a, NC_R_32F, 3, 4, c, NC_R_32F, 4), 7, "lda 3");
    refused(GEMM(h, NC_OP_T, 4, 4, 5, a, NC_R_32F, 4, 5, c, NC_R_32F, 4), 7, "lda 4");
    refused(GEMM(h, NC_OP_N, 4, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_32F, 3), 7, "ldc 3");
    refused(GEMM(h, NC_OP_N, 4, 4, 4, host, NC_R_32F, 4, 4, c, NC_R_32F, 4), 7, "A");
    refused(GEMM(h, NC_OP_N, 4, 4, 4, a + 60, NC_R_32F, 4, 4, c, NC_R_32F, 4), 7, "A");
    refused(GEMM(h, NC_OP_N, 8, 8, 8, a, NC_R_32F, 8, 8, c + 1, NC_R_32F, 8), 7, "outside");
    refused(GEMM(h, NC_OP_N, 4, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_16BF, 4), 15, "types");
    refused(GEMM(h, NC_OP_N, 4, 4, 4, a, NC_R_16F, 4, 4, c, NC_R_16BF, 4), 15, "types");
    refused(E.blas->gemm_strided_batched_ex(h, NC_OP_N, NC_OP_N, 2, 2, 2, &one, a, NC_R_32F, 2, 4,
                                            b, NC_R_32F, 2, 4, &zero, c, NC_R_32F, 2, 3, 2,
                                            NC_COMPUTE_32F, NC_GEMM_DEFAULT),
            7, "strides");
    refused(E.blas->set_math_mode(h, 9), 7, "mode 9");
    refused(E.blas->set_workspace(h, host, sizeof host), 7, "not device memory");
    CHECK_INT_EQ(E.blas->set_workspace(h, c, 256), 0);
    CHECK_INT_EQ(E.blas->create(&h2), 0);
    refused(GEMM(h2, NC_OP_N, 4, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_32F, 4), 7, "no stream");
    CHECK_INT_EQ(E.blas->destroy(h2), 0);
    refused(GEMM(h2, NC_OP_N, 4, 4, 4, a, NC_R_32F, 4, 4, c, NC_R_32F, 4), 1, "not a live handle");
    refused(E.blas->destroy(h2), 1, "not a live handle");
#undef GEMM
    finish();
    CHECK_INT_EQ(E.blas->destroy(h), 0);
    E.rt->free(a), E.rt->free(b), E.rt->free(c);
    close_all();
}

/* ---- Convolution ---- */

typedef struct conv_shape {
    int n, c, h, w, k, r, s, ph, pw, u, v, oh, ow;
} conv_shape;

static size_t x_elems(const conv_shape *s) { return (size_t)s->n * s->c * s->h * s->w; }
static size_t w_elems(const conv_shape *s) { return (size_t)s->k * s->c * s->r * s->s; }
static size_t y_elems(const conv_shape *s) { return (size_t)s->n * s->k * s->oh * s->ow; }

/* The three references at once: y = conv(x, w), dx = conv^T(dy, w), dw = x (*) dy. */
static void conv_ref(const conv_shape *s, const float *x, const float *w, const float *dy,
                     double *y, double *dx, double *dw)
{
    for (int n = 0; n < s->n; n++)
        for (int k = 0; k < s->k; k++)
            for (int oh = 0; oh < s->oh; oh++)
                for (int ow = 0; ow < s->ow; ow++)
                    for (int c = 0; c < s->c; c++)
                        for (int r = 0; r < s->r; r++)
                            for (int q = 0; q < s->s; q++) {
                                int ih = oh * s->u - s->ph + r, iw = ow * s->v - s->pw + q;
                                if (ih < 0 || ih >= s->h || iw < 0 || iw >= s->w)
                                    continue;
                                size_t xi = (((size_t)n * s->c + c) * s->h + ih) * s->w + iw;
                                size_t wi = (((size_t)k * s->c + c) * s->r + r) * s->s + q;
                                size_t yi = (((size_t)n * s->k + k) * s->oh + oh) * s->ow + ow;
                                y[yi] += (double)x[xi] * w[wi];
                                dx[xi] += (double)dy[yi] * w[wi];
                                dw[wi] += (double)x[xi] * dy[yi];
                            }
}

/* A convolution's input, weights and output-shaped values (the gradient or the output
 * to accumulate into: stream `ykey` of val) for shape s. */
static void conv_fill(const conv_shape *s, float *x, float *w, float *y, int ykey)
{
    for (size_t i = 0; i < x_elems(s); i++)
        x[i] = (float)val(i, 4);
    for (size_t i = 0; i < w_elems(s); i++)
        w[i] = (float)val(i, 5);
    for (size_t i = 0; i < y_elems(s); i++)
        y[i] = (float)val(i, ykey);
}

typedef struct conv_descs {
    void *h, *x, *w, *y, *conv;
} conv_descs;

static void descs_create(conv_descs *d, const conv_shape *s)
{
    nn_cudnn *D = E.dnn;
    CHECK_INT_EQ(D->create(&d->h), 0);
    CHECK_INT_EQ(D->set_stream(d->h, E.stream), 0);
    CHECK_INT_EQ(D->create_tensor(&d->x), 0);
    CHECK_INT_EQ(D->create_tensor(&d->y), 0);
    CHECK_INT_EQ(D->create_filter(&d->w), 0);
    CHECK_INT_EQ(D->create_conv(&d->conv), 0);
    CHECK_INT_EQ(
        D->set_tensor_4d(d->x, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, s->n, s->c, s->h, s->w),
        0);
    CHECK_INT_EQ(
        D->set_tensor_4d(d->y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, s->n, s->k, s->oh, s->ow),
        0);
    CHECK_INT_EQ(
        D->set_filter_4d(d->w, NC_CUDNN_DATA_FLOAT, NC_CUDNN_TENSOR_NCHW, s->k, s->c, s->r, s->s),
        0);
    CHECK_INT_EQ(D->set_conv_2d(d->conv, s->ph, s->pw, s->u, s->v, 1, 1, NC_CUDNN_CROSS_CORRELATION,
                                NC_CUDNN_DATA_FLOAT),
                 0);
    CHECK_INT_EQ(D->set_conv_math(d->conv, NC_CUDNN_FMA_MATH), 0);
}

static void descs_destroy(conv_descs *d)
{
    CHECK_INT_EQ(E.dnn->destroy_tensor(d->x), 0);
    CHECK_INT_EQ(E.dnn->destroy_tensor(d->y), 0);
    CHECK_INT_EQ(E.dnn->destroy_filter(d->w), 0);
    CHECK_INT_EQ(E.dnn->destroy_conv(d->conv), 0);
    CHECK_INT_EQ(E.dnn->destroy(d->h), 0);
}

static const conv_shape shape = {.n = 2,
                                 .c = 3,
                                 .h = 7,
                                 .w = 5,
                                 .k = 4,
                                 .r = 3,
                                 .s = 2,
                                 .ph = 1,
                                 .pw = 0,
                                 .u = 2,
                                 .v = 1,
                                 .oh = 4,
                                 .ow = 4};

static int near_all(const float *got, const double *want, size_t n, double scale, double add,
                    const float *old)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double w = scale * want[i] + (old ? add * old[i] : 0);
        bad += !(fabs(got[i] - w) <= 1e-5 * (1 + fabs(w)));
    }
    return bad;
}

/* The heuristics' choices: at least two, one needing workspace, one not; the sizes
 * agree with the workspace functions. Returns the algorithm needing workspace. */
static int check_algos(const conv_descs *d, size_t *ws_need)
{
    nn_cudnn_perf perf[4];
    int got = 0, with_ws = -1;
    CHECK_INT_EQ(E.dnn->fwd_algos(d->h, d->x, d->w, d->conv, d->y, 4, &got, perf), 0);
    CHECK(got >= 2);
    for (int i = 0; i < got && i < 4; i++) {
        size_t bytes = 1;
        CHECK_INT_EQ(E.dnn->fwd_ws(d->h, d->x, d->w, d->conv, d->y, perf[i].algo, &bytes), 0);
        CHECK_INT_EQ(bytes, perf[i].memory);
        CHECK_INT_EQ(perf[i].status, 0);
        if (bytes)
            with_ws = perf[i].algo, *ws_need = bytes;
    }
    CHECK(with_ws >= 0);
    CHECK_INT_EQ(E.dnn->bwd_data_algos(d->h, d->w, d->y, d->conv, d->x, 1, &got, perf), 0);
    CHECK_INT_EQ(got, 1);
    CHECK_INT_EQ(E.dnn->bwd_filter_algos(d->h, d->x, d->y, d->conv, d->w, 4, &got, perf), 0);
    /* past the tensor-op entry the double ranks first for fp32 on FMA_MATH, as the real
     * heuristics may (conv.c passes it over while TF32 is off) */
    int o = got > 0 && perf[0].math_type == NC_CUDNN_TENSOR_OP_MATH;
    CHECK(got >= o + 2 && (perf[o].memory == 0) != (perf[o + 1].memory == 0));
    return with_ws;
}

static void case_conv(void)
{
    if (!open_all())
        return;
    CHECK(E.dnn->version >= 90000);
    const conv_shape *s = &shape;
    float *x = malloc(x_elems(s) * 4), *w = malloc(w_elems(s) * 4), *dy = malloc(y_elems(s) * 4);
    float *out = malloc(x_elems(s) * 8), *old = malloc(x_elems(s) * 8);
    double *ry = calloc(y_elems(s), 8), *rdx = calloc(x_elems(s), 8), *rdw = calloc(w_elems(s), 8);
    conv_fill(s, x, w, dy, 6);
    conv_ref(s, x, w, dy, ry, rdx, rdw);
    float *dx_ = dev_alloc(x_elems(s) * 4), *dw_ = dev_alloc(w_elems(s) * 4),
          *dy_ = dev_alloc(y_elems(s) * 4);
    float *dxg = dev_alloc(x_elems(s) * 4), *dwg = dev_alloc(w_elems(s) * 4),
          *dyo = dev_alloc(y_elems(s) * 4);
    to_dev(dx_, x, x_elems(s) * 4), to_dev(dw_, w, w_elems(s) * 4), to_dev(dy_, dy, y_elems(s) * 4);
    conv_descs d;
    descs_create(&d, s);
    size_t need = 0;
    int algo = check_algos(&d, &need);
    void *ws = dev_alloc(need);
    float one = 1, two = 2, zero = 0, half = 0.5f;

    /* forward into NaN with beta 0: must come out clean */
    for (size_t i = 0; i < y_elems(s); i++)
        old[i] = NAN;
    to_dev(dyo, old, y_elems(s) * 4);
    CHECK_INT_EQ(E.dnn->fwd(d.h, &two, d.x, dx_, d.w, dw_, d.conv, algo, ws, need, &zero, d.y, dyo),
                 0);
    finish();
    from_dev(out, dyo, y_elems(s) * 4);
    CHECK_INT_EQ(near_all(out, ry, y_elems(s), 2, 0, NULL), 0);

    /* backward data, algorithm 0 (no workspace), accumulating with beta 0.5 */
    for (size_t i = 0; i < x_elems(s); i++)
        old[i] = (float)val(i, 7);
    to_dev(dxg, old, x_elems(s) * 4);
    CHECK_INT_EQ(
        E.dnn->bwd_data(d.h, &one, d.w, dw_, d.y, dy_, d.conv, 0, NULL, 0, &half, d.x, dxg), 0);
    finish();
    from_dev(out, dxg, x_elems(s) * 4);
    CHECK_INT_EQ(near_all(out, rdx, x_elems(s), 1, 0.5, old), 0);

    /* backward filter with the workspace the double asks for */
    size_t fneed = 0;
    CHECK_INT_EQ(E.dnn->bwd_filter_ws(d.h, d.x, d.y, d.conv, d.w, 1, &fneed), 0);
    CHECK(fneed > 0);
    void *fws = dev_alloc(fneed);
    for (size_t i = 0; i < w_elems(s); i++)
        old[i] = NAN;
    to_dev(dwg, old, w_elems(s) * 4);
    CHECK_INT_EQ(
        E.dnn->bwd_filter(d.h, &one, d.x, dx_, d.y, dy_, d.conv, 1, fws, fneed, &zero, d.w, dwg),
        0);
    finish();
    from_dev(out, dwg, w_elems(s) * 4);
    CHECK_INT_EQ(near_all(out, rdw, w_elems(s), 1, 0, NULL), 0);
    CHECK_INT_EQ(E.dnn_violations(), 0);

    descs_destroy(&d);
    void *bufs[] = {dx_, dw_, dy_, dxg, dwg, dyo, ws, fws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        E.rt->free(bufs[i]);
    free(x), free(w), free(dy), free(out), free(old), free(ry), free(rdx), free(rdw);
    close_all();
}

/* The runtime double's graph functions (not in stoke's table). */
static struct {
    int (*begin)(void *, int), (*end)(void *, void **),
        (*inst)(void **, void *, unsigned long long);
    int (*launch)(void *, void *), (*exec_destroy)(void *), (*graph_destroy)(void *);
    int (*live)(void);
} G;

static int graph_functions(void)
{
    *(void **)&G.begin = dlsym(E.rt->lib, "cudaStreamBeginCapture");
    *(void **)&G.end = dlsym(E.rt->lib, "cudaStreamEndCapture");
    *(void **)&G.inst = dlsym(E.rt->lib, "cudaGraphInstantiate");
    *(void **)&G.launch = dlsym(E.rt->lib, "cudaGraphLaunch");
    *(void **)&G.exec_destroy = dlsym(E.rt->lib, "cudaGraphExecDestroy");
    *(void **)&G.graph_destroy = dlsym(E.rt->lib, "cudaGraphDestroy");
    *(void **)&G.live = dlsym(E.rt->lib, "fake_cudart_live");
    int ok = G.begin && G.end && G.inst && G.launch && G.exec_destroy && G.graph_destroy && G.live;
    CHECK(ok);
    return ok;
}

/* C (5 x 4, f32) against c0 + times * alpha * A B. */
static int gemm_after(const gemm_case *g, const gemm_bufs *m, int times)
{
    float *out = malloc(m->nc * 4);
    from_dev(out, m->dc, m->nc * 4);
    int bad = 0;
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            size_t ci = (size_t)(i + j * g->ldc);
            double want =
                get(m->hc, g->c, ci) + times * g->alpha * ref_at(g, m->ha, m->hb, 0, i, j);
            bad += !(fabs(out[ci] - want) <= 1e-6 * (1 + fabs(want)));
        }
    free(out);
    return bad;
}

/* stoke captures its training step, GEMMs and convolutions included, as a CUDA graph:
 * the doubles' calls are recorded, not run, and each launch of the graph runs them
 * again with the alpha and beta of the call. beta 1 accumulates, so the launches are
 * counted. The graph is destroyed before its exec, as CUDA allows. */
static void case_captured(void)
{
    if (!open_all() || !graph_functions())
        return;
    gemm_case g = plain(NC_OP_T, NC_OP_N, 5, 4, 3);
    g.beta = 1;
    gemm_bufs m;
    gemm_upload(&g, &m);
    finish();
    const conv_shape *s = &shape;
    float *x = malloc(x_elems(s) * 4), *w = malloc(w_elems(s) * 4), *y0 = malloc(y_elems(s) * 4);
    float *out = malloc(y_elems(s) * 4), *dy = calloc(y_elems(s), 4);
    double *ry = calloc(y_elems(s), 8), *rdx = calloc(x_elems(s), 8), *rdw = calloc(w_elems(s), 8);
    conv_fill(s, x, w, y0, 8);
    conv_ref(s, x, w, dy, ry, rdx, rdw);
    float *dx = dev_alloc(x_elems(s) * 4), *dw = dev_alloc(w_elems(s) * 4),
          *dyv = dev_alloc(y_elems(s) * 4);
    to_dev(dx, x, x_elems(s) * 4), to_dev(dw, w, w_elems(s) * 4), to_dev(dyv, y0, y_elems(s) * 4);
    conv_descs d;
    descs_create(&d, s);
    void *h = NULL, *graph = NULL, *exec = NULL;
    CHECK_INT_EQ(E.blas->create(&h), 0);
    CHECK_INT_EQ(E.blas->set_stream(h, E.stream), 0);
    int base = G.live();

    float one = 1;
    CHECK_INT_EQ(G.begin(E.stream, 0), 0);
    CHECK_INT_EQ(gemm_call(h, &g, &m), 0);
    CHECK_INT_EQ(E.dnn->fwd(d.h, &one, d.x, dx, d.w, dw, d.conv, 0, NULL, 0, &one, d.y, dyv), 0);
    /* the values at the call count, not what the pointers hold at a launch */
    g.alpha = 99, one = 99;
    CHECK_INT_EQ(G.end(E.stream, &graph), 0);
    g.alpha = 1.5f;
    CHECK(graph != NULL);
    finish();
    CHECK_INT_EQ(gemm_after(&g, &m, 0), 0); /* recorded, not computed */
    from_dev(out, dyv, y_elems(s) * 4);
    CHECK(memcmp(out, y0, y_elems(s) * 4) == 0);

    CHECK_INT_EQ(G.inst(&exec, graph, 0), 0);
    CHECK_INT_EQ(G.graph_destroy(graph), 0); /* the exec keeps its own copy */
    CHECK_INT_EQ(G.launch(exec, E.stream), 0);
    CHECK_INT_EQ(G.launch(exec, E.stream), 0);
    CHECK_INT_EQ(gemm_after(&g, &m, 0), 0); /* queued, not run */
    finish();
    CHECK_INT_EQ(gemm_after(&g, &m, 2), 0);
    from_dev(out, dyv, y_elems(s) * 4);
    CHECK_INT_EQ(near_all(out, ry, y_elems(s), 2, 1, y0), 0);
    /* destroyed while a launch is pending: the runtime lets it finish */
    CHECK_INT_EQ(G.launch(exec, E.stream), 0);
    CHECK_INT_EQ(G.exec_destroy(exec), 0);
    finish();
    CHECK_INT_EQ(gemm_after(&g, &m, 3), 0);
    from_dev(out, dyv, y_elems(s) * 4);
    CHECK_INT_EQ(near_all(out, ry, y_elems(s), 3, 1, y0), 0);
    CHECK_INT_EQ(G.live(), base);
    CHECK_INT_EQ(E.blas_violations(), 0);
    CHECK_INT_EQ(E.dnn_violations(), 0);

    CHECK_INT_EQ(E.blas->destroy(h), 0);
    descs_destroy(&d);
    E.rt->free(dx), E.rt->free(dw), E.rt->free(dyv);
    gemm_release(&m);
    free(x), free(w), free(y0), free(out), free(dy), free(ry), free(rdx), free(rdw);
    close_all();
    no_leaks();
}

static void dnn_refused(int rc, int want, const char *what)
{
    static int expected_violations;
    CHECK_MSG(rc == want, "%s: status %d, want %d", what, rc, want);
    CHECK_INT_EQ(E.dnn_violations(), ++expected_violations);
    CHECK_STR_CONTAINS(E.dnn_problem(), what);
}

static void case_conv_refused(void)
{
    if (!open_all())
        return;
    const conv_shape *s = &shape;
    float *x = dev_alloc(x_elems(s) * 4), *w = dev_alloc(w_elems(s) * 4),
          *y = dev_alloc(y_elems(s) * 4);
    float host[16], one = 1, zero = 0;
    conv_descs d;
    descs_create(&d, s);
    size_t need = 0;
    int algo = check_algos(&d, &need);
    void *ws = dev_alloc(need);
#define FWD(xp, a, wsp, bytes) \
    E.dnn->fwd(d.h, &one, d.x, xp, d.w, w, d.conv, a, wsp, bytes, &zero, d.y, y)
    CHECK_INT_EQ(FWD(x, algo, ws, need), 0);
    dnn_refused(FWD(x, algo, ws, need - 1), 2000, "workspace");
    dnn_refused(FWD(x, algo, host, need), 2000, "workspace");
    dnn_refused(FWD(x, 5, ws, need), 3000, "algorithm 5");
    dnn_refused(FWD(host, algo, ws, need), 2000, "device memory");
    dnn_refused(FWD(x + 1, algo, ws, need), 2000, "device memory");
    CHECK_INT_EQ(E.dnn->set_tensor_4d(d.y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, 2, 4, 3, 4),
                 0);
    dnn_refused(FWD(x, algo, ws, need), 2008, "output 2x4x3x4");
    size_t bytes = 0;
    dnn_refused(E.dnn->bwd_data_ws(d.h, d.w, d.y, d.conv, d.x, 0, &bytes), 2008,
                "convolution gives");
    CHECK_INT_EQ(E.dnn->set_tensor_4d(d.y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_HALF, 2, 4, 4, 4),
                 0);
    dnn_refused(FWD(x, algo, ws, need), 3000, "data types");
    dnn_refused(E.dnn->set_tensor_4d(d.y, 1, NC_CUDNN_DATA_FLOAT, 2, 4, 4, 4), 3000, "NCHW only");
    dnn_refused(E.dnn->set_tensor_4d(d.y, 0, NC_CUDNN_DATA_FLOAT, 2, 0, 4, 4), 2000, "dimension 1");
    dnn_refused(E.dnn->set_conv_2d(d.conv, 0, 0, 1, 1, 2, 1, NC_CUDNN_CROSS_CORRELATION,
                                   NC_CUDNN_DATA_FLOAT),
                3000, "dilation 2 1");
    dnn_refused(E.dnn->set_conv_2d(d.conv, 0, 0, 1, 1, 1, 1, 0, NC_CUDNN_DATA_FLOAT), 3000,
                "mode 0");
    dnn_refused(E.dnn->set_conv_2d(d.conv, -1, 0, 1, 1, 1, 1, 1, NC_CUDNN_DATA_FLOAT), 2000,
                "pad -1");
    /* cudnnMathType_t's four values only */
    dnn_refused(E.dnn->set_conv_math(d.conv, 4), 2000, "math 4");
    dnn_refused(E.dnn->set_conv_math(d.conv, -1), 2000, "math -1");
    CHECK_INT_EQ(E.dnn->set_tensor_4d(d.y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, 2, 4, 4, 4),
                 0);
    CHECK_INT_EQ(FWD(x, algo, ws, need), 0);
    void *gone = NULL;
    CHECK_INT_EQ(E.dnn->create_tensor(&gone), 0);
    CHECK_INT_EQ(E.dnn->destroy_tensor(gone), 0);
    dnn_refused(E.dnn->fwd(d.h, &one, gone, x, d.w, w, d.conv, 0, NULL, 0, &zero, d.y, y), 2000,
                "not live");
    dnn_refused(E.dnn->destroy_tensor(gone), 2000, "not a live tensor descriptor");
#undef FWD
    finish();
    descs_destroy(&d);
    dnn_refused(E.dnn->set_stream(d.h, E.stream), 2000, "not a live handle");
    E.rt->free(x), E.rt->free(w), E.rt->free(y), E.rt->free(ws);
    close_all();
}

/* ---- cuDNN pooling and the fused convolution + bias + ReLU (cudnn-pool) ---- */

typedef struct pool_shape {
    int mode, n, c, h, w, k_h, k_w, pad, stride_h, stride_w, oh, ow;
} pool_shape;

static size_t pool_in(const pool_shape *p) { return (size_t)p->n * p->c * p->h * p->w; }
static size_t pool_out(const pool_shape *p) { return (size_t)p->n * p->c * p->oh * p->ow; }

/* y = pool(x) and dx = the gradient from dy, in double; max windows of distinct values */
static void pool_ref(const pool_shape *p, const float *x, const float *dy, double *y, double *dx)
{
    int max = p->mode == NC_CUDNN_POOL_MAX_DETERMINISTIC;
    for (int pl = 0; pl < p->n * p->c; pl++)
        for (int oh = 0; oh < p->oh; oh++)
            for (int ow = 0; ow < p->ow; ow++) {
                size_t o = ((size_t)pl * p->oh + oh) * p->ow + ow, at = 0;
                double best = -INFINITY, sum = 0, in_bounds = 0;
                for (int r = 0; r < p->k_h; r++)
                    for (int q = 0; q < p->k_w; q++) {
                        int h = oh * p->stride_h - p->pad + r, w = ow * p->stride_w - p->pad + q;
                        if (h < 0 || h >= p->h || w < 0 || w >= p->w)
                            continue;
                        size_t i = ((size_t)pl * p->h + h) * p->w + w;
                        sum += x[i], in_bounds++;
                        if (x[i] > best)
                            best = x[i], at = i;
                    }
                double div =
                    p->mode == NC_CUDNN_POOL_AVG_EXCLUDE_PAD ? in_bounds : (double)p->k_h * p->k_w;
                y[o] = max ? best : sum / div;
                if (max) {
                    dx[at] += dy[o];
                    continue;
                }
                for (int r = 0; r < p->k_h; r++)
                    for (int q = 0; q < p->k_w; q++) {
                        int h = oh * p->stride_h - p->pad + r, w = ow * p->stride_w - p->pad + q;
                        if (h >= 0 && h < p->h && w >= 0 && w < p->w)
                            dx[((size_t)pl * p->h + h) * p->w + w] += dy[o] / div;
                    }
            }
}

typedef struct pool_descs {
    void *h, *pd, *x, *y;
} pool_descs;

static void pool_descs_create(pool_descs *d, const pool_shape *p)
{
    nn_cudnn *D = E.dnn;
    CHECK_INT_EQ(D->create(&d->h), 0);
    CHECK_INT_EQ(D->set_stream(d->h, E.stream), 0);
    CHECK_INT_EQ(D->create_pool(&d->pd), 0);
    CHECK_INT_EQ(D->create_tensor(&d->x), 0);
    CHECK_INT_EQ(D->create_tensor(&d->y), 0);
    CHECK_INT_EQ(D->set_pool_2d(d->pd, p->mode, NC_CUDNN_NOT_PROPAGATE_NAN, p->k_h, p->k_w, p->pad,
                                p->pad, p->stride_h, p->stride_w),
                 0);
    CHECK_INT_EQ(
        D->set_tensor_4d(d->x, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, p->n, p->c, p->h, p->w),
        0);
    CHECK_INT_EQ(
        D->set_tensor_4d(d->y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, p->n, p->c, p->oh, p->ow),
        0);
}

static void pool_descs_destroy(pool_descs *d)
{
    CHECK_INT_EQ(E.dnn->destroy_tensor(d->x), 0);
    CHECK_INT_EQ(E.dnn->destroy_tensor(d->y), 0);
    CHECK_INT_EQ(E.dnn->destroy_pool(d->pd), 0);
    CHECK_INT_EQ(E.dnn->destroy(d->h), 0);
}

/* distinct values within each 7x6 plane (37 is prime to 101), or few (ties) */
static float pool_val(size_t i, int ties)
{
    return ties ? (float)(i % 3) : ((i * 37) % 101) / 16.0f;
}

/* forward with alpha 2 into NaN (beta 0), backward with beta 0.5 onto old values */
static void pool_one(const pool_shape *p)
{
    size_t ni = pool_in(p), no = pool_out(p);
    float *x = malloc(ni * 4), *dy = malloc(no * 4), *old = malloc(ni * 4), *got = malloc(ni * 4);
    double *ry = calloc(no, 8), *rdx = calloc(ni, 8);
    for (size_t i = 0; i < ni; i++)
        x[i] = pool_val(i, 0), old[i] = (float)val(i, 3);
    for (size_t i = 0; i < no; i++)
        dy[i] = (float)val(i, 2), got[i] = NAN;
    pool_ref(p, x, dy, ry, rdx);
    float *xd = dev_alloc(ni * 4), *yd = dev_alloc(no * 4), *dyd = dev_alloc(no * 4),
          *dxd = dev_alloc(ni * 4);
    to_dev(xd, x, ni * 4), to_dev(yd, got, no * 4), to_dev(dyd, dy, no * 4),
        to_dev(dxd, old, ni * 4);
    pool_descs d;
    pool_descs_create(&d, p);
    float one = 1, two = 2, zero = 0, half = 0.5f;
    CHECK_INT_EQ(E.dnn->pool_fwd(d.h, d.pd, &two, d.x, xd, &zero, d.y, yd), 0);
    finish();
    from_dev(got, yd, no * 4);
    CHECK_MSG(near_all(got, ry, no, 2, 0, NULL) == 0, "pooling mode %d %dx%d forward", p->mode,
              p->k_h, p->k_w);
    /* y from the forward (alpha 1) for the backward */
    CHECK_INT_EQ(E.dnn->pool_fwd(d.h, d.pd, &one, d.x, xd, &zero, d.y, yd), 0);
    CHECK_INT_EQ(E.dnn->pool_bwd(d.h, d.pd, &one, d.y, yd, d.y, dyd, d.x, xd, &half, d.x, dxd), 0);
    finish();
    from_dev(got, dxd, ni * 4);
    CHECK_MSG(near_all(got, rdx, ni, 1, 0.5, old) == 0, "pooling mode %d %dx%d backward", p->mode,
              p->k_h, p->k_w);
    CHECK_INT_EQ(E.dnn_violations(), 0);
    pool_descs_destroy(&d);
    E.rt->free(xd), E.rt->free(yd), E.rt->free(dyd), E.rt->free(dxd);
    free(x), free(dy), free(old), free(got), free(ry), free(rdx);
}

/* Max pooling over ties: whichever maximum gets a window's dy (cuDNN documents no
 * rule), each window's dy lands whole on an element equal to its maximum. */
static void pool_ties(const pool_shape *p)
{
    size_t ni = pool_in(p), no = pool_out(p);
    float *x = malloc(ni * 4), *dy = malloc(no * 4), *y = malloc(no * 4), *dx = malloc(ni * 4);
    for (size_t i = 0; i < ni; i++)
        x[i] = pool_val(i, 1);
    for (size_t i = 0; i < no; i++)
        dy[i] = 1.0f + (float)i; /* distinct, so each window's share is recognisable */
    float *xd = dev_alloc(ni * 4), *yd = dev_alloc(no * 4), *dyd = dev_alloc(no * 4),
          *dxd = dev_alloc(ni * 4);
    to_dev(xd, x, ni * 4), to_dev(dyd, dy, no * 4);
    pool_descs d;
    pool_descs_create(&d, p);
    float one = 1, zero = 0;
    CHECK_INT_EQ(E.dnn->pool_fwd(d.h, d.pd, &one, d.x, xd, &zero, d.y, yd), 0);
    CHECK_INT_EQ(E.dnn->pool_bwd(d.h, d.pd, &one, d.y, yd, d.y, dyd, d.x, xd, &zero, d.x, dxd), 0);
    finish();
    from_dev(y, yd, no * 4), from_dev(dx, dxd, ni * 4);
    /* eligible: equal to the maximum of a window holding it */
    char *eligible = calloc(ni, 1);
    for (int pl = 0; pl < p->n * p->c; pl++)
        for (int oh = 0; oh < p->oh; oh++)
            for (int ow = 0; ow < p->ow; ow++)
                for (int r = 0; r < p->k_h; r++)
                    for (int q = 0; q < p->k_w; q++) {
                        int h = oh * p->stride_h - p->pad + r, w = ow * p->stride_w - p->pad + q;
                        size_t i = ((size_t)pl * p->h + h) * p->w + w;
                        if (h >= 0 && h < p->h && w >= 0 && w < p->w &&
                            x[i] == y[((size_t)pl * p->oh + oh) * p->ow + ow])
                            eligible[i] = 1;
                    }
    double total = 0, want = 0;
    int off_max = 0;
    for (size_t i = 0; i < no; i++)
        want += dy[i];
    for (size_t i = 0; i < ni; i++) {
        total += dx[i];
        off_max += dx[i] != 0 && !eligible[i];
    }
    free(eligible);
    CHECK_MSG(fabs(total - want) < 1e-3 && off_max == 0, "ties: dx sums to %g (dy %g), %d off",
              total, want, off_max);
    pool_descs_destroy(&d);
    E.rt->free(xd), E.rt->free(yd), E.rt->free(dyd), E.rt->free(dxd);
    free(x), free(dy), free(y), free(dx);
}

static void case_pool(void)
{
    if (!open_all())
        return;
    enum { MAX = NC_CUDNN_POOL_MAX_DETERMINISTIC };
    const pool_shape shapes[] = {
        {MAX, 2, 2, 7, 6, 3, 3, 1, 2, 2, 4, 3}, /* stride != kernel, padded */
        {MAX, 2, 2, 7, 6, 2, 2, 0, 2, 2, 3, 3}, /* the last row in no window */
        {NC_CUDNN_POOL_AVG_INCLUDE_PAD, 2, 2, 7, 6, 3, 3, 1, 2, 2, 4, 3},
        {NC_CUDNN_POOL_AVG_EXCLUDE_PAD, 2, 2, 7, 6, 3, 3, 1, 2, 2, 4, 3},
        {NC_CUDNN_POOL_AVG_INCLUDE_PAD, 2, 2, 7, 6, 7, 6, 0, 7, 6, 1, 1}, /* global */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        pool_one(&shapes[i]);
    pool_ties(&shapes[0]);
    pool_ties(&shapes[1]);
    close_all();
}

static void case_pool_refused(void)
{
    if (!open_all())
        return;
    const pool_shape p = {NC_CUDNN_POOL_MAX_DETERMINISTIC, 2, 2, 7, 6, 3, 3, 1, 2, 2, 4, 3};
    float *x = dev_alloc(pool_in(&p) * 4), *y = dev_alloc(pool_out(&p) * 4);
    float host[4], one = 1, zero = 0;
    pool_descs d;
    pool_descs_create(&d, &p);
    nn_cudnn *D = E.dnn;
#define PFWD(xp)  D->pool_fwd(d.h, d.pd, &one, d.x, xp, &zero, d.y, y)
#define PBWD(dyd) D->pool_bwd(d.h, d.pd, &one, d.y, y, dyd, y, d.x, x, &zero, d.x, x)
    CHECK_INT_EQ(PFWD(x), 0);
    CHECK_INT_EQ(PBWD(d.y), 0);
    dnn_refused(PFWD(host), 2000, "device memory");
    dnn_refused(PFWD(x + 1), 2000, "device memory");
    dnn_refused(D->pool_fwd(d.h, d.pd, NULL, d.x, x, &zero, d.y, y), 2002, "alpha");
    dnn_refused(PBWD(d.x), 2008, "dy or dx");
    dnn_refused(D->set_pool_2d(d.pd, 7, 0, 3, 3, 1, 1, 2, 2), 2000, "mode 7");
    dnn_refused(D->set_pool_2d(d.pd, 0, 0, 3, 3, 1, 1, 0, 2), 2000, "stride 0 2");
    CHECK_INT_EQ(D->set_tensor_4d(d.y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, 2, 2, 3, 3), 0);
    dnn_refused(PFWD(x), 2008, "pooling gives 2x2x4x3");
    CHECK_INT_EQ(D->set_tensor_4d(d.y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_HALF, 2, 2, 4, 3), 0);
    dnn_refused(PFWD(x), 3000, "pools fp32");
    CHECK_INT_EQ(D->set_tensor_4d(d.y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, 2, 2, 4, 3), 0);
    CHECK_INT_EQ(D->set_pool_2d(d.pd, 0, 0, 9, 3, 0, 0, 1, 1), 0);
    dnn_refused(PFWD(x), 2000, "larger than the padded");
    CHECK_INT_EQ(D->set_pool_2d(d.pd, 3, 0, 3, 3, 1, 1, 2, 2), 0);
    CHECK_INT_EQ(PFWD(x), 0);
    void *gone = NULL;
    CHECK_INT_EQ(D->create_pool(&gone), 0);
    CHECK_INT_EQ(D->destroy_pool(gone), 0);
    dnn_refused(D->pool_fwd(d.h, gone, &one, d.x, x, &zero, d.y, y), 2000, "not live");
    dnn_refused(D->destroy_pool(gone), 2000, "not a live pooling descriptor");
#undef PFWD
#undef PBWD
    finish();
    pool_descs_destroy(&d);
    E.rt->free(x), E.rt->free(y);
    close_all();
}

/* relu(conv(x, w) + b) against the reference; cuDNN's restriction kept: RELU on
 * IMPLICIT_PRECOMP_GEMM only; bias and z descriptors checked. */
static void case_conv_bias_act(void)
{
    if (!open_all())
        return;
    const conv_shape *s = &shape;
    nn_cudnn *D = E.dnn;
    float *x = malloc(x_elems(s) * 4), *w = malloc(w_elems(s) * 4), *dy = malloc(y_elems(s) * 4);
    float *out = malloc(y_elems(s) * 4), b[4] = {0.5f, -0.25f, 0.125f, -1.0f};
    double *ry = calloc(y_elems(s), 8), *rdx = calloc(x_elems(s), 8), *rdw = calloc(w_elems(s), 8);
    conv_fill(s, x, w, dy, 6);
    conv_ref(s, x, w, dy, ry, rdx, rdw);
    size_t plane = (size_t)s->oh * s->ow;
    for (size_t i = 0; i < y_elems(s); i++) {
        double v = 2 * ry[i] + b[(i / plane) % 4];
        ry[i] = v > 0 ? v : 0;
    }
    float *xd = dev_alloc(x_elems(s) * 4), *wd = dev_alloc(w_elems(s) * 4),
          *yd = dev_alloc(y_elems(s) * 4), *bd = dev_alloc(sizeof b);
    to_dev(xd, x, x_elems(s) * 4), to_dev(wd, w, w_elems(s) * 4), to_dev(bd, b, sizeof b);
    conv_descs d;
    descs_create(&d, s);
    void *bias = NULL, *act = NULL;
    CHECK_INT_EQ(D->create_tensor(&bias), 0);
    CHECK_INT_EQ(D->set_tensor_4d(bias, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, 1, 4, 1, 1), 0);
    CHECK_INT_EQ(D->create_act(&act), 0);
    CHECK_INT_EQ(D->set_act(act, NC_CUDNN_ACTIVATION_RELU, NC_CUDNN_NOT_PROPAGATE_NAN, 0.0), 0);
    size_t need = 0;
    int algo = NC_CUDNN_FWD_IMPLICIT_PRECOMP_GEMM;
    CHECK_INT_EQ(D->fwd_ws(d.h, d.x, d.w, d.conv, d.y, algo, &need), 0);
    void *ws = dev_alloc(need ? need : 1);
    float two = 2, zero = 0;
#define CBA(a, biasd, zd)                                                                        \
    D->conv_bias_act(d.h, &two, d.x, xd, d.w, wd, d.conv, a, ws, need, &zero, zd, yd, biasd, bd, \
                     act, d.y, yd)
    CHECK_INT_EQ(CBA(algo, bias, d.y), 0);
    finish();
    from_dev(out, yd, y_elems(s) * 4);
    CHECK_INT_EQ(near_all(out, ry, y_elems(s), 1, 0, NULL), 0);
    CHECK_INT_EQ(E.dnn_violations(), 0);
    dnn_refused(CBA(0, bias, d.y), 3000, "with RELU");
    dnn_refused(CBA(algo, d.y, d.y), 2008, "bias 2x4x4x4");
    dnn_refused(CBA(algo, bias, d.x), 2008, "is not y's shape");
    dnn_refused(D->set_act(act, 2, 0, 0.0), 3000, "mode 2");
#undef CBA
    finish();
    CHECK_INT_EQ(D->destroy_tensor(bias), 0);
    CHECK_INT_EQ(D->destroy_act(act), 0);
    descs_destroy(&d);
    E.rt->free(xd), E.rt->free(wd), E.rt->free(yd), E.rt->free(bd), E.rt->free(ws);
    free(x), free(w), free(dy), free(out), free(ry), free(rdx), free(rdw);
    close_all();
}

/* ---- The fake CUDA runtime's additions ---- */

static void write_scenario(const char *text)
{
    char path[] = "/tmp/stoke-test-gpu-libs-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    setenv("STOKE_FAKE_GPU_SCENARIO", path, 1); /* removed when the case ends (run_case) */
}

static void case_cudart(void)
{
    write_scenario("device name=\"small\" bus=00000000:01:00.0 memory=1048576 cc=8.0 sm=10\n");
    if (!open_all())
        return;
    const int *marker = dlsym(E.rt->lib, "stoke_fake_cudart");
    CHECK(marker && *marker == 1);
    size_t free_b = 0, total = 0;
    CHECK_INT_EQ(E.rt->mem_get_info(&free_b, &total), 0);
    CHECK_INT_EQ(total, 1048576);
    CHECK_INT_EQ(free_b, 1048576);
    char *a = dev_alloc(600000), *b = NULL;
    CHECK_INT_EQ(E.rt->mem_get_info(&free_b, &total), 0);
    CHECK_INT_EQ(free_b, 1048576 - 600000);
    CHECK_INT_EQ(E.rt->get_last_error(), 0);
    CHECK_INT_EQ(E.rt->malloc((void **)&b, 600000), CU_ERROR_MEMORY_ALLOCATION);
    CHECK(b == NULL);
    CHECK_INT_EQ(E.rt->get_last_error(), CU_ERROR_MEMORY_ALLOCATION);
    CHECK_INT_EQ(E.rt->get_last_error(), 0);
    setenv("STOKE_FAKE_CUDA_MALLOC_LIMIT", "700000", 1);
    CHECK_INT_EQ(E.rt->malloc((void **)&b, 200000), CU_ERROR_MEMORY_ALLOCATION);
    b = dev_alloc(100000);
    unsetenv("STOKE_FAKE_CUDA_MALLOC_LIMIT");

    size_t after = 0;
    CHECK_INT_EQ(E.extent(a + 10, &after), 2);
    CHECK_INT_EQ(after, 600000 - 10);
    CHECK_INT_EQ(E.extent(&after, &after), 0);

    /* a fill waits in the stream's queue; a synchronous copy does not flush it */
    char host[32] = {0}, back[32];
    to_dev(a, host, sizeof host);
    CHECK_INT_EQ(E.rt->memset_async(a, 0x7f, 16, E.stream), 0);
    from_dev(back, a, sizeof back);
    CHECK_INT_EQ(back[0], 0);
    CHECK_INT_EQ(E.rt->stream_synchronize(E.stream), 0);
    from_dev(back, a, sizeof back);
    CHECK(back[0] == 0x7f && back[15] == 0x7f && back[16] == 0);
    CHECK_INT_EQ(E.rt->memcpy(b, a, 32, CU_MEMCPY_DEVICE_TO_DEVICE), 0);
    /* asynchronous copies out of device memory wait in the queue as well */
    char later[32] = {0};
    CHECK_INT_EQ(E.rt->memcpy_async(later, b, 32, CU_MEMCPY_DEVICE_TO_HOST, E.stream), 0);
    CHECK_INT_EQ(later[0], 0);
    CHECK_INT_EQ(E.rt->stream_synchronize(E.stream), 0);
    CHECK(later[0] == 0x7f && later[16] == 0);
    CHECK_INT_EQ(E.rt->memcpy_async(host, later, 32, CU_MEMCPY_HOST_TO_DEVICE, E.stream), 1);
    CHECK_INT_EQ(E.rt->memcpy_async(b + 99990, host, 32, CU_MEMCPY_HOST_TO_DEVICE, E.stream), 1);
    CHECK_INT_EQ(E.rt->memcpy(host, back, 32, CU_MEMCPY_HOST_TO_DEVICE), 1);
    CHECK_INT_EQ(E.rt->memcpy(a + 599990, host, 32, CU_MEMCPY_HOST_TO_DEVICE), 1);
    CHECK_INT_EQ(E.rt->memset_async(host, 0, 4, E.stream), 1);
    CHECK_INT_EQ(E.rt->get_last_error(), 1);
    E.rt->free(a), E.rt->free(b);
    CHECK_INT_EQ(E.rt->mem_get_info(&free_b, &total), 0);
    CHECK_INT_EQ(free_b, total);
    close_all();
}

static void case_cudart_default_memory(void)
{
    if (!open_all())
        return;
    size_t free_b = 0, total = 0;
    CHECK_INT_EQ(E.rt->mem_get_info(&free_b, &total), 0);
    CHECK_INT_EQ(total, (size_t)16 << 30);
    close_all();
}

/* ---- cuBLASLt: the matmul, every epilogue stoke uses against a naive reference, and
 * the arguments the double refuses ---- */

static struct {
    nn_cublaslt *lt;
    void *h;
    int (*violations)(void), (*live)(void);
    const char *(*problem)(void);
} LT;

static int lt_open(void)
{
    setenv("STOKE_CUBLASLT_LIBRARY", FAKE_CUBLASLT, 1);
    if (!open_all())
        return 0;
    CHECK_INT_EQ(nn_cublaslt_open(&LT.lt), STOKE_OK);
    if (!LT.lt)
        return 0;
    *(void **)&LT.violations = dlsym(LT.lt->lib, "fake_cublaslt_violations");
    *(void **)&LT.live = dlsym(LT.lt->lib, "fake_cublaslt_live");
    *(void **)&LT.problem = dlsym(LT.lt->lib, "fake_cublaslt_last_problem");
    CHECK(LT.violations && LT.live && LT.problem);
    CHECK_INT_EQ(LT.lt->create(&LT.h), 0);
    return LT.violations && LT.live && LT.problem && LT.h;
}

static void lt_close(void)
{
    CHECK_INT_EQ(LT.lt->destroy(LT.h), 0);
    CHECK_INT_EQ(LT.live(), 0); /* every descriptor, layout and preference destroyed */
    nn_cublaslt_close(LT.lt);
    close_all();
}

typedef struct lt_case {
    int ta, tb, m, n, k, type, compute, epi;
    float alpha, beta;
} lt_case;

/* One matmul's objects: the descriptor with the case's attributes, the layouts (each
 * ld past its rows, so a wrong stride shows), the heuristic's algorithm. */
typedef struct lt_objs {
    void *desc, *la, *lb, *lc;
    nn_lt_heuristic algo;
    int lda, ldb, ldc;
    int64_t aux_ld;
} lt_objs;

static int lt_rows(int t, int r, int c) { return t ? c : r; }

static void lt_objs_new(const lt_case *q, lt_objs *o)
{
    memset(o, 0, sizeof *o);
    o->lda = lt_rows(q->ta, q->m, q->k) + 1;
    o->ldb = lt_rows(q->tb, q->k, q->n) + 2;
    o->ldc = q->m + 3;
    o->aux_ld = (q->m + 127) / 128 * 128;
    int32_t ta = q->ta, tb = q->tb;
    uint32_t epi = (uint32_t)q->epi;
    CHECK_INT_EQ(LT.lt->desc_create(&o->desc, q->compute, NC_R_32F), 0);
    CHECK_INT_EQ(LT.lt->desc_set(o->desc, NC_LT_TRANSA, &ta, sizeof ta), 0);
    CHECK_INT_EQ(LT.lt->desc_set(o->desc, NC_LT_TRANSB, &tb, sizeof tb), 0);
    CHECK_INT_EQ(LT.lt->desc_set(o->desc, NC_LT_EPILOGUE, &epi, sizeof epi), 0);
    CHECK_INT_EQ(LT.lt->desc_set(o->desc, NC_LT_AUX_LD, &o->aux_ld, sizeof o->aux_ld), 0);
    CHECK_INT_EQ(LT.lt->layout_create(&o->la, q->type, (uint64_t)lt_rows(q->ta, q->m, q->k),
                                      (uint64_t)lt_rows(q->ta, q->k, q->m), o->lda),
                 0);
    CHECK_INT_EQ(LT.lt->layout_create(&o->lb, q->type, (uint64_t)lt_rows(q->tb, q->k, q->n),
                                      (uint64_t)lt_rows(q->tb, q->n, q->k), o->ldb),
                 0);
    CHECK_INT_EQ(LT.lt->layout_create(&o->lc, NC_R_32F, (uint64_t)q->m, (uint64_t)q->n, o->ldc), 0);
    void *pref = NULL;
    uint64_t most = 1 << 20;
    CHECK_INT_EQ(LT.lt->pref_create(&pref), 0);
    CHECK_INT_EQ(LT.lt->pref_set(pref, NC_LT_PREF_MAX_WORKSPACE_BYTES, &most, sizeof most), 0);
    int got = 0;
    CHECK_INT_EQ(
        LT.lt->heuristic(LT.h, o->desc, o->la, o->lb, o->lc, o->lc, pref, 1, &o->algo, &got), 0);
    CHECK_INT_EQ(got, 1);
    CHECK_INT_EQ(o->algo.state, 0);
    CHECK_INT_EQ(LT.lt->pref_destroy(pref), 0);
}

static void lt_objs_free(lt_objs *o)
{
    CHECK_INT_EQ(LT.lt->desc_destroy(o->desc), 0);
    CHECK_INT_EQ(LT.lt->layout_destroy(o->la), 0);
    CHECK_INT_EQ(LT.lt->layout_destroy(o->lb), 0);
    CHECK_INT_EQ(LT.lt->layout_destroy(o->lc), 0);
}

static bool lt_relu_aux(int e) { return e == NC_LT_EPI_RELU_AUX || e == NC_LT_EPI_RELU_AUX_BIAS; }
static bool lt_drelu(int e) { return e == NC_LT_EPI_DRELU || e == NC_LT_EPI_DRELU_BGRAD; }
static bool mask_bit(const uint8_t *m, int64_t b) { return (m[b / 8] >> (b % 8)) & 1; }

/* The case against a reference of its own: D = alpha op(A) op(B) + beta C; + bias;
 * ReLU with its mask bit (value > 0) at i + j ld, the padding bits 0; dReLU zeroes
 * where the given mask is 0; DRELU_BGRAD sums D's rows; BGRADA sums op(A)'s rows over
 * k, BGRADB op(B)'s columns. The values are eighths, so the sums are exact. */
static int lt_mismatches(const lt_case *q)
{
    lt_objs o;
    lt_objs_new(q, &o);
    size_t na = (size_t)o.lda * lt_rows(q->ta, q->k, q->m),
           nb = (size_t)o.ldb * lt_rows(q->tb, q->n, q->k), nc = (size_t)o.ldc * q->n;
    size_t nbias = q->epi == NC_LT_EPI_BGRADB ? (size_t)q->n : (size_t)q->m;
    size_t nmask = (size_t)(o.aux_ld * q->n / 8);
    void *ha = malloc(na * tsize(q->type)), *hb = malloc(nb * tsize(q->type));
    float *hc = malloc(nc * 4), *hd = malloc(nc * 4), *hbias = malloc(nbias * 4);
    uint8_t *hmask = malloc(nmask);
    for (size_t i = 0; i < na; i++)
        put(ha, q->type, i, val(i, 1));
    for (size_t i = 0; i < nb; i++)
        put(hb, q->type, i, val(i, 2));
    for (size_t i = 0; i < nc; i++)
        hc[i] = (float)val(i, 3);
    for (size_t i = 0; i < nbias; i++)
        hbias[i] = (float)val(i, 4);
    for (size_t i = 0; i < nmask; i++)
        hmask[i] = (uint8_t)(i * 0x9d + 0x35);
    void *da = dev_alloc(na * tsize(q->type)), *db = dev_alloc(nb * tsize(q->type));
    float *dc = dev_alloc(nc * 4), *dd = dev_alloc(nc * 4), *dbias = dev_alloc(nbias * 4);
    uint8_t *dmask = dev_alloc(nmask);
    void *ws = o.algo.workspace ? dev_alloc(o.algo.workspace) : NULL;
    to_dev(da, ha, na * tsize(q->type));
    to_dev(db, hb, nb * tsize(q->type));
    to_dev(dc, hc, nc * 4);
    to_dev(dbias, hbias, nbias * 4);
    to_dev(dmask, hmask, nmask);
    CHECK_INT_EQ(LT.lt->desc_set(o.desc, NC_LT_BIAS_POINTER, &dbias, sizeof dbias), 0);
    CHECK_INT_EQ(LT.lt->desc_set(o.desc, NC_LT_AUX_POINTER, &dmask, sizeof dmask), 0);
    CHECK_INT_EQ(LT.lt->matmul(LT.h, o.desc, &q->alpha, da, o.la, db, o.lb, &q->beta, dc, o.lc, dd,
                               o.lc, &o.algo.algo, ws, o.algo.workspace, E.stream),
                 0);
    finish();
    float *out = malloc(nc * 4), *bias_out = malloc(nbias * 4);
    uint8_t *mask_out = malloc(nmask);
    from_dev(out, dd, nc * 4);
    from_dev(bias_out, dbias, nbias * 4);
    from_dev(mask_out, dmask, nmask);
    int bad = 0, e = q->epi;
    double *colsum = calloc((size_t)q->m, sizeof *colsum);
    for (int j = 0; j < q->n; j++)
        for (int i = 0; i < q->m; i++) {
            double s = 0;
            for (int l = 0; l < q->k; l++)
                s += get(ha, q->type, (size_t)(q->ta ? l + i * o.lda : i + l * o.lda)) *
                     get(hb, q->type, (size_t)(q->tb ? j + l * o.ldb : l + j * o.ldb));
            size_t ci = (size_t)(i + j * o.ldc);
            double v = q->alpha * s + (q->beta != 0 ? q->beta * hc[ci] : 0);
            if (e == NC_LT_EPI_BIAS || e == NC_LT_EPI_RELU_AUX_BIAS)
                v += hbias[i];
            int64_t b = i + j * o.aux_ld;
            if (lt_relu_aux(e)) {
                bad += mask_bit(mask_out, b) != (v > 0);
                v = v > 0 ? v : 0;
            }
            if (lt_drelu(e) && !mask_bit(hmask, b))
                v = 0;
            colsum[i] += v;
            bad += out[ci] != (float)v;
        }
    if (lt_relu_aux(e)) /* the padding rows' bits */
        for (int j = 0; j < q->n; j++)
            for (int64_t i = q->m; i < o.aux_ld; i++)
                bad += mask_bit(mask_out, i + j * o.aux_ld);
    for (size_t x = 0; x < nbias; x++) {
        double want = hbias[x];
        if (e == NC_LT_EPI_DRELU_BGRAD)
            want = colsum[x];
        if (e == NC_LT_EPI_BGRADA || e == NC_LT_EPI_BGRADB) {
            want = 0;
            for (int l = 0; l < q->k; l++) {
                int i = (int)x;
                want += e == NC_LT_EPI_BGRADA
                            ? get(ha, q->type, (size_t)(q->ta ? l + i * o.lda : i + l * o.lda))
                            : get(hb, q->type, (size_t)(q->tb ? i + l * o.ldb : l + i * o.ldb));
            }
        }
        bad += bias_out[x] != (float)want;
    }
    CHECK_INT_EQ(LT.violations(), 0);
    lt_objs_free(&o);
    E.rt->free(da), E.rt->free(db), E.rt->free(dc), E.rt->free(dd), E.rt->free(dbias);
    E.rt->free(dmask);
    if (ws)
        E.rt->free(ws);
    free(ha), free(hb), free(hc), free(hd), free(hbias), free(hmask), free(out), free(bias_out);
    free(mask_out), free(colsum);
    return bad;
}

static void case_lt_epilogues(void)
{
    if (!lt_open())
        return;
    static const int epis[] = {NC_LT_EPI_DEFAULT,       NC_LT_EPI_BIAS,  NC_LT_EPI_RELU_AUX,
                               NC_LT_EPI_RELU_AUX_BIAS, NC_LT_EPI_DRELU, NC_LT_EPI_DRELU_BGRAD,
                               NC_LT_EPI_BGRADA,        NC_LT_EPI_BGRADB};
    static const struct {
        int type, compute;
    } types[] = {{NC_R_32F, NC_COMPUTE_32F},
                 {NC_R_32F, NC_COMPUTE_32F_FAST_TF32},
                 {NC_R_16BF, NC_COMPUTE_32F},
                 {NC_R_16F, NC_COMPUTE_32F}};
    for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (int tr = 0; tr < 4; tr++) {
                /* 130 rows: the mask's ld is 256 bits, its second 128 partly padding */
                lt_case q = {tr & 1,
                             tr >> 1,
                             e % 2 ? 130 : 5,
                             7,
                             3,
                             types[t].type,
                             types[t].compute,
                             epis[e],
                             tr == 3 ? 0.5f : 1.0f,
                             tr == 2 ? 0.0f : 1.0f};
                int bad = lt_mismatches(&q);
                CHECK_MSG(bad == 0, "epilogue %d type %d trans %d %d: %d mismatches", q.epi, q.type,
                          q.ta, q.tb, bad);
            }
    lt_close();
}

/* One bad call: the expected status, counted once, the problem naming `what`. */
static void lt_refused(int rc, int want, const char *what)
{
    static int expected;
    CHECK_MSG(rc == want, "%s: status %d, want %d", what, rc, want);
    CHECK_INT_EQ(LT.violations(), ++expected);
    CHECK_STR_CONTAINS(LT.problem(), what);
}

static void case_lt_refused(void)
{
    if (!lt_open())
        return;
    void *x = NULL;
    int32_t two = 2;
    uint32_t bad_epi = 3;
    int64_t ld = 100;
    lt_refused(LT.lt->layout_create(&x, NC_R_32F, 8, 4, 7), 7, "cublasLtMatrixLayoutCreate");
    lt_refused(LT.lt->layout_create(&x, 5, 8, 4, 8), 15, "type 5");
    lt_refused(LT.lt->desc_create(&x, NC_COMPUTE_32F, NC_R_16F), 15, "scale");
    lt_case q = {0, 0, 5, 4, 3, NC_R_32F, NC_COMPUTE_32F, NC_LT_EPI_BIAS, 1.0f, 0.0f};
    lt_objs o;
    lt_objs_new(&q, &o);
    lt_refused(LT.lt->desc_set(o.desc, NC_LT_TRANSA, &two, sizeof two), 7, "transpose 2");
    lt_refused(LT.lt->desc_set(o.desc, NC_LT_TRANSA, &two, 8), 7, "attribute 3: 8 bytes");
    lt_refused(LT.lt->desc_set(o.desc, NC_LT_EPILOGUE, &bad_epi, sizeof bad_epi), 7, "epilogue 3");
    float one = 1, zero = 0;
    static float host[64] __attribute__((aligned(256)));
    size_t bytes = 64 * 4;
    float *a = dev_alloc(bytes), *b = dev_alloc(bytes), *c = dev_alloc(bytes),
          *bias = dev_alloc(bytes);
    uint8_t *mask = dev_alloc(64);
    void *ws = dev_alloc(o.algo.workspace + 1);
    /* the bias epilogue without its pointer */
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, c, o.lc,
                             &o.algo.algo, ws, o.algo.workspace, E.stream),
               7, "bias (nil)");
    CHECK_INT_EQ(LT.lt->desc_set(o.desc, NC_LT_BIAS_POINTER, &bias, sizeof bias), 0);
    /* less workspace than the algorithm's */
    CHECK(o.algo.workspace > 0);
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, c, o.lc,
                             &o.algo.algo, ws, o.algo.workspace - 1, E.stream),
               7, "workspace");
    /* D in host memory; an algorithm not from the heuristic */
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, host, o.lc,
                             &o.algo.algo, ws, o.algo.workspace, E.stream),
               7, "outside device memory");
    /* A less aligned than the heuristic was told (cuBLASLt's default, 256 bytes) */
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a + 1, o.la, b, o.lb, &zero, c, o.lc, c, o.lc,
                             &o.algo.algo, ws, o.algo.workspace, E.stream),
               7, "A at");
    nn_lt_algo none;
    memset(&none, 0, sizeof none);
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, c, o.lc, &none,
                             ws, o.algo.workspace, E.stream),
               7, "not an algorithm");
    /* the ReLU mask: without its pointer; an ld not a multiple of 128 */
    uint32_t relu = NC_LT_EPI_RELU_AUX_BIAS;
    CHECK_INT_EQ(LT.lt->desc_set(o.desc, NC_LT_EPILOGUE, &relu, sizeof relu), 0);
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, c, o.lc,
                             &o.algo.algo, ws, o.algo.workspace, E.stream),
               7, "ReLU mask (nil)");
    CHECK_INT_EQ(LT.lt->desc_set(o.desc, NC_LT_AUX_POINTER, &mask, sizeof mask), 0);
    CHECK_INT_EQ(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, c, o.lc,
                               &o.algo.algo, ws, o.algo.workspace, E.stream),
                 0);
    CHECK_INT_EQ(LT.lt->desc_set(o.desc, NC_LT_AUX_LD, &ld, sizeof ld), 0);
    lt_refused(LT.lt->matmul(LT.h, o.desc, &one, a, o.la, b, o.lb, &zero, c, o.lc, c, o.lc,
                             &o.algo.algo, ws, o.algo.workspace, E.stream),
               7, "mask ld 100");
    /* shapes that do not chain: op(B) 4 x 4 after op(A) 5 x 3; types that do not mix */
    void *b44 = NULL, *bf = NULL, *pref = NULL;
    nn_lt_heuristic r;
    int got = 0;
    CHECK_INT_EQ(LT.lt->pref_create(&pref), 0);
    CHECK_INT_EQ(LT.lt->layout_create(&b44, NC_R_32F, 4, 4, 4), 0);
    CHECK_INT_EQ(LT.lt->layout_create(&bf, NC_R_16BF, 3, 4, 3), 0);
    lt_refused(LT.lt->heuristic(LT.h, o.desc, o.la, b44, o.lc, o.lc, pref, 1, &r, &got), 7,
               "op(B) 4 x 4");
    lt_refused(LT.lt->heuristic(LT.h, o.desc, o.la, bf, o.lc, o.lc, pref, 1, &r, &got), 15,
               "types A 0 B 14");
    lt_refused(LT.lt->heuristic(LT.h, o.desc, o.la, o.lb, o.lc, o.lc, pref, 0, &r, &got), 7,
               "0 results");
    /* bf16 operands take no TF32 */
    void *tf32 = NULL, *abf = NULL;
    CHECK_INT_EQ(LT.lt->desc_create(&tf32, NC_COMPUTE_32F_FAST_TF32, NC_R_32F), 0);
    CHECK_INT_EQ(LT.lt->layout_create(&abf, NC_R_16BF, 5, 3, 5), 0);
    lt_refused(LT.lt->heuristic(LT.h, tf32, abf, bf, o.lc, o.lc, pref, 1, &r, &got), 15,
               "compute 77");
    CHECK_INT_EQ(LT.lt->desc_destroy(tf32), 0);
    CHECK_INT_EQ(LT.lt->layout_destroy(abf), 0);
    CHECK_INT_EQ(LT.lt->layout_destroy(b44), 0);
    CHECK_INT_EQ(LT.lt->layout_destroy(bf), 0);
    CHECK_INT_EQ(LT.lt->pref_destroy(pref), 0);
    finish();
    lt_objs_free(&o);
    E.rt->free(a), E.rt->free(b), E.rt->free(c), E.rt->free(bias), E.rt->free(mask);
    E.rt->free(ws);
    lt_close();
}

/* The matmul is queued: nothing of D written until the stream gets to it, and in a
 * capture it runs at each launch of the graph (beta 1 accumulates: counted). */
static void case_lt_queued(void)
{
    if (!lt_open() || !graph_functions())
        return;
    lt_case q = {0, 1, 5, 4, 3, NC_R_32F, NC_COMPUTE_32F, NC_LT_EPI_DEFAULT, 1.0f, 1.0f};
    lt_objs o;
    lt_objs_new(&q, &o);
    size_t na = (size_t)o.lda * 3, nb = (size_t)o.ldb * 3, nc = (size_t)o.ldc * 4;
    float *ha = malloc(na * 4), *hb = malloc(nb * 4), *hc = calloc(nc, 4), *out = malloc(nc * 4);
    for (size_t i = 0; i < na; i++)
        ha[i] = (float)val(i, 1);
    for (size_t i = 0; i < nb; i++)
        hb[i] = (float)val(i, 2);
    float *da = dev_alloc(na * 4), *db = dev_alloc(nb * 4), *dc = dev_alloc(nc * 4);
    void *ws = dev_alloc(o.algo.workspace);
    to_dev(da, ha, na * 4), to_dev(db, hb, nb * 4), to_dev(dc, hc, nc * 4);
    float one = 1;
    CHECK_INT_EQ(G.begin(E.stream, 0), 0);
    CHECK_INT_EQ(LT.lt->matmul(LT.h, o.desc, &one, da, o.la, db, o.lb, &one, dc, o.lc, dc, o.lc,
                               &o.algo.algo, ws, o.algo.workspace, E.stream),
                 0);
    void *graph = NULL, *exec = NULL;
    CHECK_INT_EQ(G.end(E.stream, &graph), 0);
    CHECK_INT_EQ(G.inst(&exec, graph, 0), 0);
    from_dev(out, dc, nc * 4);
    CHECK(memcmp(out, hc, nc * 4) == 0); /* recorded, not run */
    for (int t = 0; t < 3; t++)
        CHECK_INT_EQ(G.launch(exec, E.stream), 0);
    finish();
    from_dev(out, dc, nc * 4);
    int bad = 0;
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 5; i++) {
            double s = 0;
            for (int l = 0; l < 3; l++)
                s += ha[i + l * o.lda] * hb[j + l * o.ldb];
            bad += out[i + j * o.ldc] != (float)(3 * s);
        }
    CHECK_INT_EQ(bad, 0);
    CHECK_INT_EQ(G.exec_destroy(exec), 0);
    CHECK_INT_EQ(G.graph_destroy(graph), 0);
    CHECK_INT_EQ(LT.violations(), 0);
    lt_objs_free(&o);
    E.rt->free(da), E.rt->free(db), E.rt->free(dc), E.rt->free(ws);
    free(ha), free(hb), free(hc), free(out);
    lt_close();
}

/* ---- Loading ---- */

static void case_missing_library(void)
{
    nn_cublas *b = (nn_cublas *)1;
    nn_cudnn *d = (nn_cudnn *)1;
    setenv("STOKE_CUBLAS_LIBRARY", "/nonexistent/libcublas.so.13", 1);
    CHECK_INT_EQ(nn_cublas_open(&b), STOKE_ERR_UNAVAILABLE);
    CHECK(b == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "STOKE_CUBLAS_LIBRARY=/nonexistent/libcublas.so.13");
    setenv("STOKE_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
    CHECK_INT_EQ(nn_cudnn_open(&d), STOKE_ERR_UNAVAILABLE);
    CHECK(d == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "STOKE_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9");
    /* a library lacking a required function: named with the function */
    setenv("STOKE_CUBLAS_LIBRARY", FAKE_CUDNN, 1);
    CHECK_INT_EQ(nn_cublas_open(&b), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_CONTAINS(stoke_last_error(), "lacks cublasCreate_v2");
    CHECK_STR_CONTAINS(stoke_last_error(), FAKE_CUDNN);
    setenv("STOKE_CUDNN_LIBRARY", FAKE_CUBLAS, 1);
    CHECK_INT_EQ(nn_cudnn_open(&d), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_CONTAINS(stoke_last_error(), "lacks cudnnGetVersion");
    nn_cublaslt *lt = (nn_cublaslt *)1;
    setenv("STOKE_CUBLASLT_LIBRARY", "/nonexistent/libcublasLt.so.13", 1);
    CHECK_INT_EQ(nn_cublaslt_open(&lt), STOKE_ERR_UNAVAILABLE);
    CHECK(lt == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "STOKE_CUBLASLT_LIBRARY=/nonexistent/libcublasLt.so.13");
    setenv("STOKE_CUBLASLT_LIBRARY", FAKE_CUBLAS, 1);
    CHECK_INT_EQ(nn_cublaslt_open(&lt), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_CONTAINS(stoke_last_error(), "lacks cublasLtCreate");
    nn_cublaslt_close(NULL);
    nn_cublas_close(NULL);
    nn_cudnn_close(NULL);
}

static void case_errors(void)
{
    CHECK_STR_EQ(nn_cublas_error(NULL, 3), "CUBLAS_STATUS_ALLOC_FAILED");
    CHECK_STR_EQ(nn_cublas_error(NULL, 999), "cuBLAS status 999");
    CHECK_STR_EQ(nn_cudnn_error(NULL, 2000), "CUDNN_STATUS_BAD_PARAM");
    CHECK_STR_EQ(nn_cudnn_error(NULL, 3000), "CUDNN_STATUS_NOT_SUPPORTED");
    CHECK_STR_EQ(nn_cudnn_error(NULL, 7), "cuDNN status 7");
    if (!open_all())
        return;
    CHECK_STR_EQ(nn_cublas_error(E.blas, 7), "CUBLAS_STATUS_INVALID_VALUE");
    CHECK_STR_EQ(nn_cublas_error(E.blas, 999), "cuBLAS status 999");
    CHECK_STR_EQ(nn_cudnn_error(E.dnn, 77), "cuDNN status 77");
    CHECK_STR_EQ(nn_cudnn_error(E.dnn, 2008), "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH");
    CHECK_INT_EQ(E.blas->version, 13);
    close_all();
}

/* Without the fake CUDA runtime loaded the doubles have no device: handles fail as on
 * a machine without a GPU. */
static void case_no_runtime(void)
{
    unsetenv("STOKE_CUDART_LIBRARY");
    setenv("STOKE_CUBLAS_LIBRARY", FAKE_CUBLAS, 1);
    setenv("STOKE_CUDNN_LIBRARY", FAKE_CUDNN, 1);
    nn_cublas *b = NULL;
    nn_cudnn *d = NULL;
    CHECK_INT_EQ(nn_cublas_open(&b), STOKE_OK);
    CHECK_INT_EQ(nn_cudnn_open(&d), STOKE_OK);
    void *h = NULL;
    if (b)
        CHECK_INT_EQ(b->create(&h), 1);
    if (d)
        CHECK_INT_EQ(d->create(&h), 1001);
    nn_cublas_close(b);
    nn_cudnn_close(d);
}

/* Leaves environment variable `var` as the caller set it, naming a library to load
 * instead of the default names (the GPU kit points it at PyTorch's copies), unless it
 * names `fake`, the double's file: then the library is found by its default names. */
static void real_library(const char *var, const char *fake)
{
    const char *path = getenv(var);
    struct stat a, b;
    if (path && stat(path, &a) == 0 && stat(fake, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        unsetenv(var);
}

/* NVIDIA's own libraries (the part real_libraries, skipped where they are not found):
 * every function of the tables is there (no GPU is needed to load them). */
static int real_libraries(void)
{
    real_library("STOKE_CUBLAS_LIBRARY", FAKE_CUBLAS);
    real_library("STOKE_CUBLASLT_LIBRARY", FAKE_CUBLASLT);
    real_library("STOKE_CUDNN_LIBRARY", FAKE_CUDNN);
    nn_cublas *b = NULL;
    nn_cudnn *d = NULL;
    if (nn_cublas_open(&b) != STOKE_OK || nn_cudnn_open(&d) != STOKE_OK) {
        fprintf(stderr, "skipped: cuBLAS or cuDNN does not load: %s\n", stoke_last_error());
        nn_cublas_close(b);
        return CHECK_SKIPPED;
    }
    CHECK(b->version >= 12);
    CHECK(b->status_string != NULL);
    CHECK(d->version >= 90000 && d->version < 100000);
    CHECK_STR_EQ(nn_cudnn_error(d, 0), "CUDNN_STATUS_SUCCESS");
    /* pooling and the fused convolution (every entry is loaded, or open fails) */
    CHECK(d->pool_fwd && d->pool_bwd && d->conv_bias_act && d->set_pool_2d && d->set_act);
    /* cuBLASLt ships with cuBLAS: where one is, the other must load, every function */
    nn_cublaslt *lt = NULL;
    CHECK_MSG(nn_cublaslt_open(&lt) == STOKE_OK, "%s", stoke_last_error());
    CHECK(lt && lt->version >= 12);
    nn_cublaslt_close(lt);
    nn_cublas_close(b);
    nn_cudnn_close(d);
    return CHECK_DONE();
}

int main(int argc, char **argv)
{
    if (check_part(argc, argv, "real_libraries"))
        return real_libraries();
    /* Said in the output so that a pass is never read as a GPU result. */
    printf("cuBLAS, cuBLASLt and cuDNN tables against the test doubles (tests/fake): no GPU is "
           "used\n");
    gpu_case("missing_library", case_missing_library);
    gpu_case("errors", case_errors);
    gpu_case("no_runtime", case_no_runtime);
    gpu_case("gemm", case_gemm);
    gpu_case("gemm_queued", case_gemm_queued);
    gpu_case("gemm_refused", case_gemm_refused);
    gpu_case("conv", case_conv);
    gpu_case("conv_refused", case_conv_refused);
    gpu_case("pool", case_pool);
    gpu_case("pool_refused", case_pool_refused);
    gpu_case("conv_bias_act", case_conv_bias_act);
    gpu_case("captured", case_captured);
    gpu_case("cudart", case_cudart);
    gpu_case("cudart_default_memory", case_cudart_default_memory);
    gpu_case("lt_epilogues", case_lt_epilogues);
    gpu_case("lt_refused", case_lt_refused);
    gpu_case("lt_queued", case_lt_queued);
    return CHECK_DONE();
}
