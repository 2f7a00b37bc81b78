/* fake_cublas.c - a test double of libcublas.so: the GEMMs stoke calls, computed on the
 * CPU in double over "device memory" from the fake CUDA runtime. Every argument is
 * checked at the call as cuBLAS documents it, and every matrix must lie inside one
 * cudaMalloc allocation: a violation returns an error status and is counted, so a
 * backend test can assert none happened (fake_cublas_violations). The product itself
 * is queued on the handle's stream, as cuBLAS enqueues kernels, so it runs in stream
 * order and can be captured into a graph. */
#include "fake_blas.h"
#include "fake_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define FAKE_MAX_HANDLES 256

enum { MATH_DEFAULT = 0, MATH_TENSOR_OP = 1, MATH_PEDANTIC = 2, MATH_TF32 = 3 }; /* cublasMath_t */

typedef struct fake_handle {
    int live;
    int stream_set;
    void *stream;
    int math;
} fake_handle;

/* Handles are never reused, so a destroyed one stays recognisable. */
static fake_handle handles[FAKE_MAX_HANDLES];
static int nhandles;

static fake_handle *get_handle(void *h)
{
    /* Compared as integers: a stranger's pointer is not in the array. */
    uintptr_t p = (uintptr_t)h, first = (uintptr_t)handles;
    if (p < first || p >= first + sizeof handles || (p - first) % sizeof handles[0])
        return NULL;
    fake_handle *fh = &handles[(p - first) / sizeof handles[0]];
    return fh->live ? fh : NULL;
}

int cublasCreate_v2(void **h)
{
    if (!h)
        return fake_violation(INVALID_VALUE, "cublasCreate_v2: NULL handle pointer");
    if (!fake_have_runtime())
        return NOT_INITIALIZED;
    pthread_mutex_lock(&fake_lib_mu);
    if (nhandles == FAKE_MAX_HANDLES) {
        pthread_mutex_unlock(&fake_lib_mu);
        return ALLOC_FAILED;
    }
    handles[nhandles] = (fake_handle){1, 0, NULL, 0};
    *h = &handles[nhandles++];
    pthread_mutex_unlock(&fake_lib_mu);
    return OK;
}

int cublasDestroy_v2(void *h)
{
    fake_handle *fh = get_handle(h);
    if (!fh)
        return fake_violation(NOT_INITIALIZED, "cublasDestroy_v2: not a live handle");
    fh->live = 0;
    return OK;
}

int cublasSetStream_v2(void *h, void *stream)
{
    fake_handle *fh = get_handle(h);
    if (!fh)
        return fake_violation(NOT_INITIALIZED, "cublasSetStream_v2: not a live handle");
    fh->stream = stream;
    fh->stream_set = 1;
    return OK;
}

int cublasSetMathMode(void *h, int mode)
{
    fake_handle *fh = get_handle(h);
    if (!fh)
        return fake_violation(NOT_INITIALIZED, "cublasSetMathMode: not a live handle");
    /* 16 (DISALLOW_REDUCED_PRECISION_REDUCTION) is a flag */
    if ((mode & ~16) < MATH_DEFAULT || (mode & ~16) > MATH_TF32)
        return fake_violation(INVALID_VALUE, "cublasSetMathMode: mode %d", mode);
    fh->math = mode;
    return OK;
}

int cublasSetWorkspace_v2(void *h, void *ws, size_t bytes)
{
    if (!get_handle(h))
        return fake_violation(NOT_INITIALIZED, "cublasSetWorkspace_v2: not a live handle");
    size_t room = 0;
    if (bytes && (fake_rt.extent(ws, &room) != 2 || room < bytes))
        return fake_violation(
            INVALID_VALUE, "cublasSetWorkspace_v2: %zu bytes at %p not device memory", bytes, ws);
    if ((uintptr_t)ws % 256)
        return fake_violation(INVALID_VALUE, "cublasSetWorkspace_v2: %p not 256-byte aligned", ws);
    return OK;
}

/* The names of the statuses this double returns; any other is unknown to it, so stoke's
 * own table (src/nn/cuda/cublas.c) answers, as it does for libraries without this call. */
const char *cublasGetStatusString(int status)
{
    switch (status) {
    case OK: return "CUBLAS_STATUS_SUCCESS";
    case NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "<unknown>";
    }
}

/* ---- GEMM ---- */

typedef struct gemm {
    int ta, tb, m, n, k;
    const void *a, *b;
    void *c;
    int atype, btype, ctype, compute;
    int lda, ldb, ldc;
    long long sa, sb, sc;
    int batch;
    float alpha, beta;
} gemm;

static size_t type_size(int t) { return t == R_32F ? 4 : 2; }

static int kind(int t) { return t == R_32F ? FAKE_F32 : t == R_16F ? FAKE_F16 : FAKE_BF16; }
static double load(const void *p, int t, long long i) { return fake_load(p, kind(t), i); }
static void store(void *p, int t, long long i, double v) { fake_store(p, kind(t), i, v); }

static int types_ok(const gemm *g)
{
    if (g->atype != g->btype)
        return 0;
    if (g->atype == R_32F)
        return g->ctype == R_32F &&
               (g->compute == COMPUTE_32F || g->compute == COMPUTE_32F_FAST_TF32);
    if (g->atype == R_16F || g->atype == R_16BF)
        return (g->ctype == R_32F || g->ctype == g->atype) && g->compute == COMPUTE_32F;
    return 0;
}

/* Whether a rows x cols matrix (ld, batch stride) of type t lies in one device
 * allocation: the last element of the last batch is inside the first one's. */
static int inside(const void *p, int t, int rows, int cols, int ld, long long stride, int batch)
{
    size_t room = 0;
    if (fake_rt.extent(p, &room) != 2)
        return 0;
    long long last = (long long)(cols - 1) * ld + rows - 1 + (long long)(batch - 1) * stride;
    return (unsigned long long)(last + 1) * type_size(t) <= room;
}

static int check_shape(const char *fn, const gemm *g)
{
    if (g->ta < 0 || g->ta > 2 || g->tb < 0 || g->tb > 2)
        return fake_violation(INVALID_VALUE, "%s: trans %d %d", fn, g->ta, g->tb);
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 0)
        return fake_violation(INVALID_VALUE, "%s: m n k batch %d %d %d %d", fn, g->m, g->n, g->k,
                              g->batch);
    int arows = g->ta ? g->k : g->m, brows = g->tb ? g->n : g->k;
    if (g->lda < (arows > 1 ? arows : 1) || g->ldb < (brows > 1 ? brows : 1) ||
        g->ldc < (g->m > 1 ? g->m : 1))
        return fake_violation(INVALID_VALUE, "%s: lda %d ldb %d ldc %d for m %d n %d k %d", fn,
                              g->lda, g->ldb, g->ldc, g->m, g->n, g->k);
    if (g->batch > 1 && (g->sa < 0 || g->sb < 0 || g->sc < (long long)g->ldc * g->n))
        return fake_violation(INVALID_VALUE, "%s: strides %lld %lld %lld", fn, g->sa, g->sb, g->sc);
    if (!types_ok(g))
        return fake_violation(NOT_SUPPORTED, "%s: types A %d B %d C %d compute %d", fn, g->atype,
                              g->btype, g->ctype, g->compute);
    return OK;
}

static int check_memory(const char *fn, const gemm *g)
{
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return OK;
    if (!inside(g->c, g->ctype, g->m, g->n, g->ldc, g->sc, g->batch))
        return fake_violation(INVALID_VALUE, "%s: C %p outside device memory", fn, g->c);
    if (g->k == 0)
        return OK;
    if (!inside(g->a, g->atype, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->lda, g->sa, g->batch))
        return fake_violation(INVALID_VALUE, "%s: A %p outside device memory", fn, g->a);
    if (!inside(g->b, g->btype, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb, g->sb, g->batch))
        return fake_violation(INVALID_VALUE, "%s: B %p outside device memory", fn, g->b);
    return OK;
}

/* Batch p of the GEMM; at and bt (m x k and n x k doubles) hold op(A) and op(B)^T. */
static void compute_one(const gemm *g, int p, double *at, double *bt)
{
    const char *a = (const char *)g->a + (size_t)(p * g->sa) * type_size(g->atype);
    const char *b = (const char *)g->b + (size_t)(p * g->sb) * type_size(g->btype);
    char *c = (char *)g->c + (size_t)(p * g->sc) * type_size(g->ctype);
    int k = g->k;
    fake_pack(a, kind(g->atype), g->m, k, g->ta ? g->lda : 1, g->ta ? 1 : g->lda, at);
    fake_pack(b, kind(g->btype), g->n, k, g->tb ? 1 : g->ldb, g->tb ? g->ldb : 1, bt);
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            const double *ai = at + (size_t)i * k, *bj = bt + (size_t)j * k;
            double sum = 0;
            for (int l = 0; l < k; l++)
                sum += ai[l] * bj[l];
            long long ci = i + (long long)j * g->ldc;
            /* beta == 0: C is not read, so NaN or garbage there does not propagate */
            double v = g->alpha * sum;
            if (g->beta != 0)
                v += g->beta * load(c, g->ctype, ci);
            store(c, g->ctype, ci, v);
        }
}

static void gemm_queued(void *params)
{
    const gemm *g = params;
    /* the scratch after the queued copy of g: one batch's op(A) and op(B)^T */
    double *at = (double *)(g + 1), *bt = at + (size_t)g->m * (size_t)g->k;
    for (int p = 0; p < g->batch; p++)
        compute_one(g, p, at, bt);
}

/* Whether cuBLAS may run a GEMM on TF32: fp32 operands with the TF32 compute type, or
 * 32F under the handle's TF32 math mode (or the deprecated tensor-op one, which allows
 * even fp16). PEDANTIC math and DEFAULT keep fp32. */
static int tf32_permitted(const gemm *g, int math)
{
    int mode = math & ~16;
    return g->atype == R_32F &&
           (g->compute == COMPUTE_32F_FAST_TF32 || mode == MATH_TF32 || mode == MATH_TENSOR_OP);
}

static int run_gemm(const char *fn, void *h, gemm *g, const void *alpha, const void *beta)
{
    fake_count_call();
    fake_handle *fh = get_handle(h);
    if (!fh)
        return fake_violation(NOT_INITIALIZED, "%s: not a live handle", fn);
    if (!fh->stream_set)
        return fake_violation(INVALID_VALUE, "%s: no stream set on the handle", fn);
    if (!alpha || !beta)
        return fake_violation(INVALID_VALUE, "%s: NULL alpha or beta", fn);
    g->alpha = *(const float *)alpha;
    g->beta = *(const float *)beta;
    int rc = check_shape(fn, g);
    if (rc == OK)
        rc = check_memory(fn, g);
    if (rc != OK)
        return rc;
    /* Queued as cuBLAS enqueues its kernels: after the stream's copies and kernels before
     * it, before the ones after it, and recorded (not run) while the stream captures.
     * alpha and beta were read above: host pointer mode reads them at the call. */
    rc = fake_queue(fh->stream, gemm_queued, g, sizeof *g, fake_pack_bytes(g->m, g->n, g->k));
    if (rc == 2) /* cudaErrorMemoryAllocation */
        return fake_violation(ALLOC_FAILED, "%s: out of host memory", fn);
    if (rc != OK)
        return fake_violation(EXECUTION_FAILED, "%s: queueing on the stream failed (%d)", fn, rc);
    if (tf32_permitted(g, fh->math))
        fake_count_tf32();
    return OK;
}

static int algo_ok(int algo) { return (algo >= -1 && algo <= 23) || (algo >= 99 && algo <= 115); }

/* One matrix product's arguments (batch 1, no strides). */
static gemm gemm_of(int ta, int tb, int m, int n, int k, const void *A, int atype, int lda,
                    const void *B, int btype, int ldb, void *C, int ctype, int ldc, int compute)
{
    return (gemm){.ta = ta,
                  .tb = tb,
                  .m = m,
                  .n = n,
                  .k = k,
                  .a = A,
                  .b = B,
                  .c = C,
                  .atype = atype,
                  .btype = btype,
                  .ctype = ctype,
                  .compute = compute,
                  .lda = lda,
                  .ldb = ldb,
                  .ldc = ldc,
                  .batch = 1};
}

int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
                 int atype, int lda, const void *B, int btype, int ldb, const void *beta, void *C,
                 int ctype, int ldc, int compute, int algo)
{
    gemm g = gemm_of(ta, tb, m, n, k, A, atype, lda, B, btype, ldb, C, ctype, ldc, compute);
    if (!algo_ok(algo))
        return fake_violation(INVALID_VALUE, "cublasGemmEx: algo %d", algo);
    return run_gemm("cublasGemmEx", h, &g, alpha, beta);
}

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                               const void *A, int atype, int lda, long long sa, const void *B,
                               int btype, int ldb, long long sb, const void *beta, void *C,
                               int ctype, int ldc, long long sc, int batch, int compute, int algo)
{
    gemm g = gemm_of(ta, tb, m, n, k, A, atype, lda, B, btype, ldb, C, ctype, ldc, compute);
    g.sa = sa;
    g.sb = sb;
    g.sc = sc;
    g.batch = batch;
    if (!algo_ok(algo))
        return fake_violation(INVALID_VALUE, "cublasGemmStridedBatchedEx: algo %d", algo);
    return run_gemm("cublasGemmStridedBatchedEx", h, &g, alpha, beta);
}

/* ---- For the tests (found with dlsym) ---- */
int fake_cublas_violations(void) { return fake_lib_violations(); }
int fake_cublas_calls(void) { return fake_lib_calls(); }
int fake_cublas_tf32_calls(void) { return fake_lib_tf32_calls(); }
const char *fake_cublas_last_problem(void) { return fake_lib_last_problem(); }

/* Live handles: 0 when every created one was destroyed. */
int fake_cublas_live(void)
{
    int n = 0;
    for (int i = 0; i < nhandles; i++)
        n += handles[i].live;
    return n;
}

void fake_cublas_reset(void) { fake_lib_reset(); }
