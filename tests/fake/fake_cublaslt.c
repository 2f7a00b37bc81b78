/* fake_cublaslt.c - a test double of libcublasLt.so: the matmul API stoke calls, its
 * descriptors malloc'ed structs of the attributes set, the products and their
 * epilogues (bias, ReLU and its bit mask, dReLU, the bias gradients) computed on the
 * CPU in double over the fake CUDA runtime's "device memory". Every argument is
 * checked as cuBLASLt documents it (layouts against the transposes and the compute
 * type's rules, the pointers an epilogue needs, the workspace against the algorithm's),
 * at the call: a violation returns cuBLAS's error status and is counted
 * (fake_cublaslt_violations). The product is queued on the call's stream, as the
 * library enqueues its kernels, so it runs in stream order and can be captured.
 *
 * The ReLU mask's layout: element (i, j) of D is bit i + j * ld of the buffer, bits
 * numbered from each byte's least significant (ld a multiple of 128, cuBLASLt's rule,
 * so every column starts on a 16-byte boundary). stoke never reads the mask itself:
 * only the dReLU epilogue does, so the layout only has to agree with this file. */
#include "fake_blas.h"
#include "fake_lib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { TRANSA = 3, TRANSB = 4, EPILOGUE = 7, BIAS_POINTER = 8, AUX_POINTER = 11, AUX_LD = 12 };
enum {
    E_DEFAULT = 1,
    E_RELU = 2,
    E_RELU_AUX = 130,
    E_BIAS = 4,
    E_RELU_BIAS = 6,
    E_RELU_AUX_BIAS = 134,
    E_DRELU = 136,
    E_DRELU_BGRAD = 152,
    E_BGRADA = 256,
    E_BGRADB = 512
};
enum { PREF_MAX_WORKSPACE = 1, PREF_ALIGN_A = 5, PREF_ALIGN_D = 8 };

/* What the heuristic asks for, when the preference allows it: enough to prove the
 * caller passes a workspace of its own. */
#define FAKE_LT_WS   4096
#define MAGIC_HANDLE 0x4c54484eu
#define MAGIC_DESC   0x4c544445u
#define MAGIC_LAYOUT 0x4c544c41u
#define MAGIC_PREF   0x4c545052u
#define MAGIC_ALGO   0x4c54414c474f0000ull

typedef struct lt_obj {
    uint32_t magic;
} lt_obj;
typedef struct lt_desc {
    uint32_t magic;
    int compute, scale, ta, tb, epi;
    void *bias, *aux;
    int64_t aux_ld;
} lt_desc;
typedef struct lt_layout {
    uint32_t magic;
    int type;
    uint64_t rows, cols;
    int64_t ld;
} lt_layout;
typedef struct lt_pref {
    uint32_t magic;
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D: the alignment the caller promises */
} lt_pref;
typedef struct lt_algo { /* cublasLtMatmulAlgo_t: 64 bytes */
    uint64_t magic, ws, align[4], unused[2];
} lt_algo;
typedef struct lt_result { /* cublasLtMatmulHeuristicResult_t */
    lt_algo algo;
    size_t workspace;
    int state;
    float waves;
    int reserved[4];
} lt_result;

static int live_objects, epi_calls[1024];

/* Objects are freed with their magic cleared first; a stale pointer is the caller's
 * use after free, which ASan reports. */
static void *obj_new(size_t size, uint32_t magic)
{
    lt_obj *o = calloc(1, size);
    if (!o)
        return NULL;
    o->magic = magic;
    pthread_mutex_lock(&fake_lib_mu);
    live_objects++;
    pthread_mutex_unlock(&fake_lib_mu);
    return o;
}

static int obj_ok(const void *p, uint32_t magic)
{
    return p && ((const lt_obj *)p)->magic == magic;
}

static int obj_free(void *p, uint32_t magic, const char *fn)
{
    if (!obj_ok(p, magic))
        return fake_violation(INVALID_VALUE, "%s: not a live object", fn);
    ((lt_obj *)p)->magic = 0;
    free(p);
    pthread_mutex_lock(&fake_lib_mu);
    live_objects--;
    pthread_mutex_unlock(&fake_lib_mu);
    return OK;
}

int cublasLtCreate(void **h)
{
    if (!h)
        return fake_violation(INVALID_VALUE, "cublasLtCreate: NULL handle pointer");
    if (!fake_have_runtime())
        return NOT_INITIALIZED;
    *h = obj_new(sizeof(lt_obj), MAGIC_HANDLE);
    return *h ? OK : ALLOC_FAILED;
}

int cublasLtDestroy(void *h) { return obj_free(h, MAGIC_HANDLE, "cublasLtDestroy"); }

int cublasLtMatmulDescCreate(void **desc, int compute, int scale)
{
    if (!desc)
        return fake_violation(INVALID_VALUE, "cublasLtMatmulDescCreate: NULL pointer");
    if ((compute != COMPUTE_32F && compute != COMPUTE_32F_FAST_TF32) || scale != R_32F)
        return fake_violation(NOT_SUPPORTED, "cublasLtMatmulDescCreate: compute %d scale %d",
                              compute, scale);
    lt_desc *d = obj_new(sizeof *d, MAGIC_DESC);
    if (!d)
        return ALLOC_FAILED;
    d->compute = compute;
    d->scale = scale;
    d->epi = E_DEFAULT;
    *desc = d;
    return OK;
}

int cublasLtMatmulDescDestroy(void *desc)
{
    return obj_free(desc, MAGIC_DESC, "cublasLtMatmulDescDestroy");
}

static int epi_known(uint32_t e)
{
    switch (e) {
    case E_DEFAULT:
    case E_RELU:
    case E_RELU_AUX:
    case E_BIAS:
    case E_RELU_BIAS:
    case E_RELU_AUX_BIAS:
    case E_DRELU:
    case E_DRELU_BGRAD:
    case E_BGRADA:
    case E_BGRADB: return 1;
    default: return 0;
    }
}

int cublasLtMatmulDescSetAttribute(void *desc, int attr, const void *buf, size_t size)
{
    static const char fn[] = "cublasLtMatmulDescSetAttribute";
    lt_desc *d = desc;
    if (!obj_ok(d, MAGIC_DESC))
        return fake_violation(INVALID_VALUE, "%s: not a live descriptor", fn);
    /* the library checks the size against its own storage of the attribute */
    size_t want = attr == BIAS_POINTER || attr == AUX_POINTER || attr == AUX_LD ? 8 : 4;
    if (!buf || size != want)
        return fake_violation(INVALID_VALUE, "%s: attribute %d: %zu bytes at %p", fn, attr, size,
                              buf);
    int32_t i32;
    uint32_t u32;
    switch (attr) {
    case TRANSA:
    case TRANSB:
        memcpy(&i32, buf, 4);
        if (i32 < 0 || i32 > 1)
            return fake_violation(INVALID_VALUE, "%s: transpose %d", fn, i32);
        *(attr == TRANSA ? &d->ta : &d->tb) = i32;
        return OK;
    case EPILOGUE:
        memcpy(&u32, buf, 4);
        if (!epi_known(u32))
            return fake_violation(INVALID_VALUE, "%s: epilogue %u", fn, u32);
        d->epi = (int)u32;
        return OK;
    case BIAS_POINTER: memcpy(&d->bias, buf, 8); return OK;
    case AUX_POINTER: memcpy(&d->aux, buf, 8); return OK;
    case AUX_LD: memcpy(&d->aux_ld, buf, 8); return OK;
    default:
        return fake_violation(NOT_SUPPORTED, "%s: attribute %d (not in this double)", fn, attr);
    }
}

int cublasLtMatrixLayoutCreate(void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld)
{
    static const char fn[] = "cublasLtMatrixLayoutCreate";
    if (!layout)
        return fake_violation(INVALID_VALUE, "%s: NULL pointer", fn);
    if (type != R_32F && type != R_16F && type != R_16BF)
        return fake_violation(NOT_SUPPORTED, "%s: type %d", fn, type);
    if (rows > INT32_MAX || cols > INT32_MAX || ld < 1 || (uint64_t)ld < rows)
        return fake_violation(INVALID_VALUE, "%s: %llu x %llu, ld %lld", fn,
                              (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    lt_layout *l = obj_new(sizeof *l, MAGIC_LAYOUT);
    if (!l)
        return ALLOC_FAILED;
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    *layout = l;
    return OK;
}

int cublasLtMatrixLayoutDestroy(void *layout)
{
    return obj_free(layout, MAGIC_LAYOUT, "cublasLtMatrixLayoutDestroy");
}

int cublasLtMatmulPreferenceCreate(void **pref)
{
    if (!pref)
        return fake_violation(INVALID_VALUE, "cublasLtMatmulPreferenceCreate: NULL pointer");
    lt_pref *p = obj_new(sizeof *p, MAGIC_PREF);
    if (!p)
        return ALLOC_FAILED;
    for (int i = 0; i < 4; i++)
        p->align[i] = 256; /* cuBLASLt's default: what its algorithms may assume */
    *pref = p;
    return OK;
}

int cublasLtMatmulPreferenceDestroy(void *pref)
{
    return obj_free(pref, MAGIC_PREF, "cublasLtMatmulPreferenceDestroy");
}

int cublasLtMatmulPreferenceSetAttribute(void *pref, int attr, const void *buf, size_t size)
{
    static const char fn[] = "cublasLtMatmulPreferenceSetAttribute";
    lt_pref *p = pref;
    if (!obj_ok(p, MAGIC_PREF))
        return fake_violation(INVALID_VALUE, "%s: not a live preference", fn);
    if (attr == PREF_MAX_WORKSPACE) {
        if (!buf || size != 8)
            return fake_violation(INVALID_VALUE, "%s: workspace: %zu bytes", fn, size);
        memcpy(&p->max_ws, buf, 8);
        return OK;
    }
    if (attr >= PREF_ALIGN_A && attr <= PREF_ALIGN_D) {
        uint32_t a;
        if (!buf || size != 4)
            return fake_violation(INVALID_VALUE, "%s: alignment: %zu bytes", fn, size);
        memcpy(&a, buf, 4);
        if (a == 0 || (a & (a - 1)))
            return fake_violation(INVALID_VALUE, "%s: alignment %u", fn, a);
        p->align[attr - PREF_ALIGN_A] = a;
        return OK;
    }
    return fake_violation(NOT_SUPPORTED, "%s: attribute %d (not in this double)", fn, attr);
}

/* ---- the product ---- */

typedef struct mm {
    lt_desc d;
    lt_layout a, b, c;
    int m, n, k;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
} mm;

static int kind(int t) { return t == R_32F ? FAKE_F32 : t == R_16F ? FAKE_F16 : FAKE_BF16; }
static size_t type_size(int t) { return t == R_32F ? 4 : 2; }

static int epi_has_bias(int e)
{
    return e == E_BIAS || e == E_RELU_BIAS || e == E_RELU_AUX_BIAS || e == E_DRELU_BGRAD ||
           e == E_BGRADA || e == E_BGRADB;
}
static int epi_has_aux(int e)
{
    return e == E_RELU_AUX || e == E_RELU_AUX_BIAS || e == E_DRELU || e == E_DRELU_BGRAD;
}

/* The shapes: op(A) m x k, op(B) k x n, C and D m x n; the types by the compute type
 * (fp32 operands with 32F or TF32, fp16/bf16 with 32F and C of theirs or fp32). */
static int check_layouts(const char *fn, const lt_desc *d, const lt_layout *a, const lt_layout *b,
                         const lt_layout *c, const lt_layout *dl, mm *g)
{
    if (!obj_ok(a, MAGIC_LAYOUT) || !obj_ok(b, MAGIC_LAYOUT) || !obj_ok(c, MAGIC_LAYOUT) ||
        !obj_ok(dl, MAGIC_LAYOUT))
        return fake_violation(INVALID_VALUE, "%s: a layout is not live", fn);
    uint64_t m = d->ta ? a->cols : a->rows, k = d->ta ? a->rows : a->cols;
    uint64_t kb = d->tb ? b->cols : b->rows, n = d->tb ? b->rows : b->cols;
    if (k != kb || c->rows != m || c->cols != n || dl->rows != m || dl->cols != n ||
        c->ld != dl->ld)
        return fake_violation(
            INVALID_VALUE, "%s: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, D %llu x %llu",
            fn, (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb,
            (unsigned long long)n, (unsigned long long)c->rows, (unsigned long long)c->cols,
            (unsigned long long)dl->rows, (unsigned long long)dl->cols);
    int ok = a->type == b->type && c->type == dl->type;
    if (a->type == R_32F)
        ok = ok && c->type == R_32F;
    else
        ok = ok && d->compute == COMPUTE_32F && (c->type == R_32F || c->type == a->type);
    if (!ok)
        return fake_violation(NOT_SUPPORTED, "%s: types A %d B %d C %d D %d compute %d", fn,
                              a->type, b->type, c->type, dl->type, d->compute);
    if (epi_has_aux(d->epi) && (d->aux_ld % 128 || d->aux_ld < (int64_t)m))
        return fake_violation(INVALID_VALUE, "%s: ReLU mask ld %lld for %llu rows", fn,
                              (long long)d->aux_ld, (unsigned long long)m);
    /* the library writes a bias gradient in C's type; this double only in fp32 */
    int bgrad = d->epi == E_DRELU_BGRAD || d->epi == E_BGRADA || d->epi == E_BGRADB;
    if (bgrad && c->type != R_32F)
        return fake_violation(NOT_SUPPORTED, "%s: a bias gradient in type %d", fn, c->type);
    g->d = *d;
    g->a = *a;
    g->b = *b;
    g->c = *c;
    g->m = (int)m;
    g->n = (int)n;
    g->k = (int)k;
    return OK;
}

int cublasLtMatmulAlgoGetHeuristic(void *h, void *desc, void *a, void *b, void *c, void *d,
                                   void *pref, int want, lt_result *results, int *got)
{
    static const char fn[] = "cublasLtMatmulAlgoGetHeuristic";
    if (!obj_ok(h, MAGIC_HANDLE) || !obj_ok(desc, MAGIC_DESC) || !obj_ok(pref, MAGIC_PREF))
        return fake_violation(INVALID_VALUE, "%s: handle, descriptor or preference not live", fn);
    if (want <= 0 || !results || !got)
        return fake_violation(INVALID_VALUE, "%s: %d results at %p", fn, want, (void *)results);
    mm g;
    int rc = check_layouts(fn, desc, a, b, c, d, &g);
    if (rc != OK)
        return rc;
    memset(results, 0, sizeof *results);
    const lt_pref *p = pref;
    results->algo.magic = MAGIC_ALGO;
    results->algo.ws = p->max_ws >= FAKE_LT_WS ? FAKE_LT_WS : 0;
    for (int i = 0; i < 4; i++)
        results->algo.align[i] = p->align[i];
    results->workspace = results->algo.ws;
    results->waves = 1.0f;
    *got = 1;
    return OK;
}

static int inside(const void *p, size_t bytes)
{
    size_t room = 0;
    return fake_rt.extent(p, &room) == 2 && room >= bytes;
}

static size_t matrix_bytes(const lt_layout *l)
{
    return ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * type_size(l->type);
}

static int aux_bit(const unsigned char *aux, int64_t ld, int i, int j)
{
    int64_t b = i + j * ld;
    return (aux[b / 8] >> (b % 8)) & 1;
}

static void mm_queued(void *params)
{
    const mm *g = params;
    const lt_desc *d = &g->d;
    int e = d->epi, ka = kind(g->a.type), kb = kind(g->b.type), kc = kind(g->c.type);
    int64_t lda = g->a.ld, ldb = g->b.ld, ldc = g->c.ld;
    unsigned char *aux = d->aux;
    if (e == E_RELU_AUX || e == E_RELU_AUX_BIAS) /* the mask's padding bits are zero */
        memset(aux, 0, (size_t)(d->aux_ld * g->n / 8));
    if (e == E_DRELU_BGRAD || e == E_BGRADA)
        for (int i = 0; i < g->m; i++)
            fake_store(d->bias, FAKE_F32, i, 0);
    if (e == E_BGRADB)
        for (int j = 0; j < g->n; j++)
            fake_store(d->bias, FAKE_F32, j, 0);
    /* op(A) (m x k) and op(B)^T (n x k) as doubles, in the scratch after the job */
    int k = g->k;
    double *at = (double *)(g + 1), *bt = at + (size_t)g->m * (size_t)k;
    fake_pack(g->A, ka, g->m, k, d->ta ? lda : 1, d->ta ? 1 : lda, at);
    fake_pack(g->B, kb, g->n, k, d->tb ? 1 : ldb, d->tb ? ldb : 1, bt);
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            const double *ai = at + (size_t)i * k, *bj = bt + (size_t)j * k;
            double sum = 0;
            for (int l = 0; l < k; l++)
                sum += ai[l] * bj[l];
            double v = g->alpha * sum;
            if (g->beta != 0) /* beta == 0: C is not read */
                v += g->beta * fake_load(g->C, kc, i + j * ldc);
            if (e == E_BIAS || e == E_RELU_BIAS || e == E_RELU_AUX_BIAS)
                v += fake_load(d->bias, FAKE_F32, i);
            if (e == E_RELU_AUX || e == E_RELU_AUX_BIAS) {
                int64_t b = i + j * d->aux_ld;
                if (v > 0)
                    aux[b / 8] |= (unsigned char)(1u << (b % 8));
            }
            if (e == E_RELU || e == E_RELU_BIAS || e == E_RELU_AUX || e == E_RELU_AUX_BIAS)
                v = v > 0 ? v : 0;
            if ((e == E_DRELU || e == E_DRELU_BGRAD) && !aux_bit(aux, d->aux_ld, i, j))
                v = 0;
            fake_store(g->D, kc, i + j * ldc, v);
            /* the bias gradient of what was stored (rounded as D is) */
            if (e == E_DRELU_BGRAD)
                fake_store(d->bias, FAKE_F32, i,
                           fake_load(d->bias, FAKE_F32, i) + fake_load(g->D, kc, i + j * ldc));
        }
    /* BGRADA / BGRADB: op(A)'s rows, op(B)'s columns, summed over k */
    if (e == E_BGRADA)
        for (int i = 0; i < g->m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += at[(size_t)i * k + l];
            fake_store(d->bias, FAKE_F32, i, s);
        }
    if (e == E_BGRADB)
        for (int j = 0; j < g->n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += bt[(size_t)j * k + l];
            fake_store(d->bias, FAKE_F32, j, s);
        }
}

int cublasLtMatmul(void *h, void *desc, const void *alpha, const void *A, void *adesc,
                   const void *B, void *bdesc, const void *beta, const void *C, void *cdesc,
                   void *D, void *ddesc, const lt_algo *algo, void *ws, size_t ws_bytes,
                   void *stream)
{
    static const char fn[] = "cublasLtMatmul";
    fake_count_call();
    if (!obj_ok(h, MAGIC_HANDLE) || !obj_ok(desc, MAGIC_DESC))
        return fake_violation(INVALID_VALUE, "%s: handle or descriptor not live", fn);
    if (!alpha || !beta)
        return fake_violation(INVALID_VALUE, "%s: NULL alpha or beta", fn);
    mm g;
    int rc = check_layouts(fn, desc, adesc, bdesc, cdesc, ddesc, &g);
    if (rc != OK)
        return rc;
    if (!algo || algo->magic != MAGIC_ALGO)
        return fake_violation(INVALID_VALUE, "%s: not an algorithm of the heuristic", fn);
    if (ws_bytes < algo->ws || (ws_bytes && (!inside(ws, ws_bytes) || (uintptr_t)ws % 16)))
        return fake_violation(INVALID_VALUE,
                              "%s: workspace of %zu bytes at %p, the algorithm's %llu", fn,
                              ws_bytes, ws, (unsigned long long)algo->ws);
    memcpy(&g.alpha, alpha, sizeof g.alpha);
    memcpy(&g.beta, beta, sizeof g.beta);
    g.A = A;
    g.B = B;
    g.C = C;
    g.D = D;
    if (g.m == 0 || g.n == 0)
        return OK;
    const lt_desc *d = &g.d;
    /* an algorithm chosen for pointers aligned as the preference said */
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % algo->align[i] && (i != 2 || g.beta != 0))
            return fake_violation(INVALID_VALUE,
                                  "%s: %c at %p not aligned to the %llu bytes the heuristic was "
                                  "promised",
                                  fn, "ABCD"[i], ptrs[i], (unsigned long long)algo -> align[i]);
    if ((g.k && (!inside(A, matrix_bytes(&g.a)) || !inside(B, matrix_bytes(&g.b)))) ||
        (g.beta != 0 && !inside(C, matrix_bytes(&g.c))) || !inside(D, matrix_bytes(&g.c)))
        return fake_violation(INVALID_VALUE, "%s: A, B, C or D outside device memory", fn);
    size_t nbias = d->epi == E_BGRADB ? (size_t)g.n : (size_t)g.m;
    if (epi_has_bias(d->epi) && (!d->bias || !inside(d->bias, nbias * 4)))
        return fake_violation(INVALID_VALUE, "%s: epilogue %d: bias %p of %zu floats", fn, d->epi,
                              d->bias, nbias);
    if (epi_has_aux(d->epi) &&
        (!d->aux || (uintptr_t)d->aux % 16 || !inside(d->aux, (size_t)(d->aux_ld * g.n / 8))))
        return fake_violation(INVALID_VALUE, "%s: epilogue %d: ReLU mask %p (ld %lld, %d columns)",
                              fn, d->epi, d->aux, (long long)d->aux_ld, g.n);
    rc = fake_queue(stream, mm_queued, &g, sizeof g, fake_pack_bytes(g.m, g.n, g.k));
    if (rc == 2)
        return fake_violation(ALLOC_FAILED, "%s: out of host memory", fn);
    if (rc != OK)
        return fake_violation(EXECUTION_FAILED, "%s: queueing on the stream failed (%d)", fn, rc);
    pthread_mutex_lock(&fake_lib_mu);
    epi_calls[d->epi]++;
    pthread_mutex_unlock(&fake_lib_mu);
    if (g.a.type == R_32F && d->compute == COMPUTE_32F_FAST_TF32)
        fake_count_tf32();
    return OK;
}

/* ---- For the tests (found with dlsym) ---- */
int fake_cublaslt_violations(void) { return fake_lib_violations(); }
int fake_cublaslt_calls(void) { return fake_lib_calls(); }
int fake_cublaslt_tf32_calls(void) { return fake_lib_tf32_calls(); }
const char *fake_cublaslt_last_problem(void) { return fake_lib_last_problem(); }
void fake_cublaslt_reset(void) { fake_lib_reset(); }
/* Handles, descriptors, layouts and preferences not destroyed. */
int fake_cublaslt_live(void) { return live_objects; }
/* The matmuls queued with epilogue e (cublasLtEpilogue_t) since the process began. */
int fake_cublaslt_epilogue_calls(int e) { return e >= 0 && e < 1024 ? epi_calls[e] : 0; }
