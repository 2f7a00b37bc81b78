/* fake_cudnn.c - a test double of libcudnn.so.9: the legacy convolution, fused
 * convolution + bias + activation and pooling API stoke calls (NCHW, 2-d
 * cross-correlation, groups 1, dilation 1; pooling in fp32), computed by loops in
 * double over "device memory" from the fake CUDA runtime. Descriptors are checked
 * against each other at the call and every tensor must lie inside one cudaMalloc
 * allocation; any error status is counted (fake_cudnn_violations) so a backend test
 * can assert none happened. The convolution itself is queued on the handle's stream,
 * as cuDNN enqueues kernels, so it runs in stream order and can be captured. */
#include "fake_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OK = 0,
    NOT_INITIALIZED = 1001,
    BAD_PARAM = 2000,
    BAD_PARAM_NULL_POINTER = 2002,
    SHAPE_MISMATCH = 2008,
    NOT_SUPPORTED = 3000,
    ALLOC_FAILED = 4003,
    EXECUTION_FAILED = 5000,
};
enum { D_FLOAT = 0, D_HALF = 2, D_BFLOAT16 = 9 };
enum { NCHW = 0, CROSS_CORRELATION = 1 };
enum { O_HANDLE = 1, O_TENSOR, O_FILTER, O_CONV, O_POOL, O_ACT };
enum { POOL_MAX = 0, POOL_AVG_INCLUDE = 1, POOL_AVG_EXCLUDE = 2, POOL_MAX_DETERMINISTIC = 3 };
enum { ACT_RELU = 1, ACT_IDENTITY = 5, ALGO_IMPLICIT_PRECOMP_GEMM = 1 };
enum { FWD, BWD_DATA, BWD_FILTER };
enum { MATH_DEFAULT = 0, MATH_TENSOR_OP = 1, MATH_ALLOW_CONVERSION = 2, MATH_FMA = 3 };

/* One handle or descriptor. All are kept in `objs` until exit (a destroyed one is
 * marked, not freed), so a use after destroy is recognised rather than undefined. */
typedef struct obj {
    int kind, live, set;
    int dtype, n, c, h, w;                            /* tensor; filter: n is k */
    int pad_h, pad_w, u, v, dil_h, dil_w, mode, math; /* convolution; pooling (mode) */
    int win_h, win_w, nan;                            /* pooling; activation (nan) */
    void *stream;                                     /* handle */
} obj;

static obj **objs;
static size_t nobjs, cap;

static int create(void **out, int kind)
{
    if (!out)
        return fake_violation(BAD_PARAM_NULL_POINTER, "create: NULL output pointer");
    obj *o = calloc(1, sizeof *o);
    pthread_mutex_lock(&fake_lib_mu);
    if (o && nobjs == cap) {
        size_t ncap = cap ? 2 * cap : 64;
        obj **grown = realloc(objs, ncap * sizeof *objs);
        if (grown) {
            objs = grown;
            cap = ncap;
        }
    }
    if (!o || nobjs == cap) {
        pthread_mutex_unlock(&fake_lib_mu);
        free(o);
        return ALLOC_FAILED;
    }
    o->kind = kind;
    o->live = 1;
    objs[nobjs++] = o;
    pthread_mutex_unlock(&fake_lib_mu);
    *out = o;
    return OK;
}

/* The live object of that kind p points to, or NULL (never dereferences a stranger). */
static obj *find(const void *p, int kind)
{
    obj *found = NULL;
    pthread_mutex_lock(&fake_lib_mu);
    for (size_t i = 0; i < nobjs && !found; i++)
        if (objs[i] == p)
            found = objs[i];
    pthread_mutex_unlock(&fake_lib_mu);
    return found && found->kind == kind && found->live ? found : NULL;
}

static const char *kind_name(int kind)
{
    static const char *const names[] = {"?",
                                        "handle",
                                        "tensor descriptor",
                                        "filter descriptor",
                                        "convolution descriptor",
                                        "pooling descriptor",
                                        "activation descriptor"};
    return names[kind];
}

static int destroy(const char *fn, void *p, int kind)
{
    obj *o = find(p, kind);
    if (!o)
        return fake_violation(BAD_PARAM, "%s: %p is not a live %s", fn, p, kind_name(kind));
    o->live = 0;
    return OK;
}

size_t cudnnGetVersion(void) { return 91900; }

const char *cudnnGetErrorString(int status)
{
    switch (status) {
    case OK: return "CUDNN_STATUS_SUCCESS";
    case NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case ALLOC_FAILED: return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    case EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_UNKNOWN_STATUS_FOUND";
    }
}

int cudnnCreate(void **h)
{
    if (!fake_have_runtime())
        return NOT_INITIALIZED;
    return create(h, O_HANDLE);
}

int cudnnDestroy(void *h) { return destroy("cudnnDestroy", h, O_HANDLE); }

int cudnnSetStream(void *h, void *stream)
{
    obj *o = find(h, O_HANDLE);
    if (!o)
        return fake_violation(BAD_PARAM, "cudnnSetStream: %p is not a live handle", h);
    o->stream = stream;
    return OK;
}

/* ---- Descriptors ---- */

int cudnnCreateTensorDescriptor(void **d) { return create(d, O_TENSOR); }
int cudnnCreateFilterDescriptor(void **d) { return create(d, O_FILTER); }
int cudnnCreateConvolutionDescriptor(void **d) { return create(d, O_CONV); }
int cudnnDestroyTensorDescriptor(void *d)
{
    return destroy("cudnnDestroyTensorDescriptor", d, O_TENSOR);
}
int cudnnDestroyFilterDescriptor(void *d)
{
    return destroy("cudnnDestroyFilterDescriptor", d, O_FILTER);
}
int cudnnDestroyConvolutionDescriptor(void *d)
{
    return destroy("cudnnDestroyConvolutionDescriptor", d, O_CONV);
}

static int set_4d(const char *fn, void *d, int kind, int format, int dtype, const int dims[4])
{
    obj *o = find(d, kind);
    if (!o)
        return fake_violation(BAD_PARAM, "%s: %p is not a live %s", fn, d, kind_name(kind));
    for (int i = 0; i < 4; i++)
        if (dims[i] <= 0)
            return fake_violation(BAD_PARAM, "%s: dimension %d is %d", fn, i, dims[i]);
    if (format != NCHW)
        return fake_violation(NOT_SUPPORTED, "%s: format %d (the double knows NCHW only)", fn,
                              format);
    if (dtype != D_FLOAT && dtype != D_HALF && dtype != D_BFLOAT16)
        return fake_violation(NOT_SUPPORTED, "%s: data type %d", fn, dtype);
    o->dtype = dtype;
    o->n = dims[0], o->c = dims[1], o->h = dims[2], o->w = dims[3];
    o->set = 1;
    return OK;
}

int cudnnSetTensor4dDescriptor(void *d, int format, int dtype, int n, int c, int h, int w)
{
    const int dims[4] = {n, c, h, w};
    return set_4d("cudnnSetTensor4dDescriptor", d, O_TENSOR, format, dtype, dims);
}

int cudnnSetFilter4dDescriptor(void *d, int dtype, int format, int k, int c, int h, int w)
{
    const int dims[4] = {k, c, h, w};
    return set_4d("cudnnSetFilter4dDescriptor", d, O_FILTER, format, dtype, dims);
}

int cudnnSetConvolution2dDescriptor(void *d, int pad_h, int pad_w, int u, int v, int dil_h,
                                    int dil_w, int mode, int compute)
{
    const char *fn = "cudnnSetConvolution2dDescriptor";
    obj *o = find(d, O_CONV);
    if (!o)
        return fake_violation(BAD_PARAM, "%s: %p is not a live convolution descriptor", fn, d);
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0)
        return fake_violation(BAD_PARAM, "%s: pad %d %d stride %d %d dilation %d %d", fn, pad_h,
                              pad_w, u, v, dil_h, dil_w);
    if (dil_h != 1 || dil_w != 1 || mode != CROSS_CORRELATION)
        return fake_violation(NOT_SUPPORTED, "%s: dilation %d %d mode %d", fn, dil_h, dil_w, mode);
    if (compute != D_FLOAT && compute != D_HALF && compute != D_BFLOAT16)
        return fake_violation(BAD_PARAM, "%s: compute type %d", fn, compute);
    *o = (obj){.kind = O_CONV,
               .live = 1,
               .set = 1,
               .dtype = compute,
               .pad_h = pad_h,
               .pad_w = pad_w,
               .u = u,
               .v = v,
               .dil_h = 1,
               .dil_w = 1,
               .mode = mode,
               .math = o->math};
    return OK;
}

int cudnnSetConvolutionMathType(void *d, int math)
{
    obj *o = find(d, O_CONV);
    if (!o)
        return fake_violation(BAD_PARAM, "cudnnSetConvolutionMathType: %p is not live", d);
    if (math < MATH_DEFAULT || math > MATH_FMA)
        return fake_violation(BAD_PARAM, "cudnnSetConvolutionMathType: math %d", math);
    o->math = math;
    return OK;
}

/* ---- Convolutions ---- */

/* One convolution's shape: x (n c h w) * w (k c r s) -> y (n k oh ow). */
typedef struct problem {
    int n, c, h, w, k, r, s, oh, ow, pad_h, pad_w, u, v, dtype, math;
} problem;

static long long x_count(const problem *p) { return (long long)p->n * p->c * p->h * p->w; }
static long long w_count(const problem *p) { return (long long)p->k * p->c * p->r * p->s; }
static long long y_count(const problem *p) { return (long long)p->n * p->k * p->oh * p->ow; }
static size_t elem_size(int dtype) { return dtype == D_FLOAT ? 4 : 2; }

/* Looks the three descriptors up and checks them against each other: y must have
 * exactly the convolution's output dimensions. */
static int make_problem(const char *fn, void *xd, void *wd, void *cd, void *yd, problem *p)
{
    obj *x = find(xd, O_TENSOR), *w = find(wd, O_FILTER), *c = find(cd, O_CONV);
    obj *y = find(yd, O_TENSOR);
    if (!x || !w || !c || !y)
        return fake_violation(BAD_PARAM, "%s: a descriptor is not live (x %p w %p conv %p y %p)",
                              fn, xd, wd, cd, yd);
    if (!x->set || !w->set || !c->set || !y->set)
        return fake_violation(BAD_PARAM, "%s: a descriptor was never set", fn);
    if (x->dtype != w->dtype || x->dtype != y->dtype)
        return fake_violation(NOT_SUPPORTED, "%s: data types %d %d %d differ", fn, x->dtype,
                              w->dtype, y->dtype);
    *p = (problem){.n = x->n,
                   .c = x->c,
                   .h = x->h,
                   .w = x->w,
                   .k = w->n,
                   .r = w->h,
                   .s = w->w,
                   .pad_h = c->pad_h,
                   .pad_w = c->pad_w,
                   .u = c->u,
                   .v = c->v,
                   .dtype = x->dtype,
                   .math = c->math};
    if (w->c != x->c || x->h + 2 * c->pad_h < w->h || x->w + 2 * c->pad_w < w->w)
        return fake_violation(SHAPE_MISMATCH,
                              "%s: filter %dx%dx%dx%d does not fit input %dx%dx%dx%d", fn, w->n,
                              w->c, w->h, w->w, x->n, x->c, x->h, x->w);
    p->oh = (x->h + 2 * c->pad_h - w->h) / c->u + 1;
    p->ow = (x->w + 2 * c->pad_w - w->w) / c->v + 1;
    if (y->n != x->n || y->c != w->n || y->h != p->oh || y->w != p->ow)
        return fake_violation(SHAPE_MISMATCH,
                              "%s: output %dx%dx%dx%d, the convolution gives %dx%dx%dx%d", fn, y->n,
                              y->c, y->h, y->w, p->n, p->k, p->oh, p->ow);
    return OK;
}

/* The workspace an algorithm needs: algorithm 0 none, 1 four bytes per output element
 * (so the caller's workspace planning is exercised); the double knows no others. */
static int workspace(const problem *p, int op, int algo, size_t *bytes)
{
    long long out = op == FWD ? y_count(p) : op == BWD_DATA ? x_count(p) : w_count(p);
    if (algo != 0 && algo != 1)
        return NOT_SUPPORTED;
    *bytes = algo == 0 ? 0 : (size_t)out * 4;
    return OK;
}

/* The heuristics' ranking: the workspace-hungry algorithm first, as a fast one often
 * is on a real device. */
static int algos(const char *fn, void *h, void *xd, void *wd, void *cd, void *yd, int op, int want,
                 int *got, void *perf_out)
{
    problem p;
    if (!find(h, O_HANDLE))
        return fake_violation(BAD_PARAM, "%s: %p is not a live handle", fn, h);
    if (want < 1 || !got || !perf_out)
        return fake_violation(BAD_PARAM, "%s: requested %d", fn, want);
    int rc = make_problem(fn, xd, wd, cd, yd, &p);
    if (rc != OK)
        return rc;
    struct perf {
        int algo, status;
        float time;
        size_t memory;
        int determinism, math_type, reserved[3];
    } *perf = perf_out;
    /* The real heuristics rank algorithms of other math types too (PyTorch sets each
     * call's math type from the entry it picks): for fp32 data on FMA_MATH, a tensor-op
     * entry ranked first, which a caller that keeps TF32 off must pass over (taking it
     * shows in fake_cudnn_tf32_calls). */
    int n = 0;
    if (p.dtype == D_FLOAT && p.math == MATH_FMA && n < want)
        perf[n++] =
            (struct perf){.algo = 1, .time = -1.0f, .determinism = 1, .math_type = MATH_TENSOR_OP};
    for (int i = 0; i < 2 && n < want; i++)
        perf[n++] =
            (struct perf){.algo = 1 - i, .time = -1.0f, .determinism = 1, .math_type = p.math};
    for (int i = 0; i < n; i++)
        workspace(&p, op, perf[i].algo, &perf[i].memory);
    *got = n;
    return OK;
}

int cudnnGetConvolutionForwardAlgorithm_v7(void *h, void *x, void *w, void *conv, void *y, int want,
                                           int *got, void *perf)
{
    return algos("cudnnGetConvolutionForwardAlgorithm_v7", h, x, w, conv, y, FWD, want, got, perf);
}

int cudnnGetConvolutionBackwardDataAlgorithm_v7(void *h, void *w, void *dy, void *conv, void *dx,
                                                int want, int *got, void *perf)
{
    return algos("cudnnGetConvolutionBackwardDataAlgorithm_v7", h, dx, w, conv, dy, BWD_DATA, want,
                 got, perf);
}

int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void *h, void *x, void *dy, void *conv, void *dw,
                                                  int want, int *got, void *perf)
{
    return algos("cudnnGetConvolutionBackwardFilterAlgorithm_v7", h, x, dw, conv, dy, BWD_FILTER,
                 want, got, perf);
}

static int ws_size(const char *fn, void *h, void *xd, void *wd, void *cd, void *yd, int op,
                   int algo, size_t *bytes)
{
    problem p;
    if (!find(h, O_HANDLE))
        return fake_violation(BAD_PARAM, "%s: %p is not a live handle", fn, h);
    if (!bytes)
        return fake_violation(BAD_PARAM_NULL_POINTER, "%s: NULL size pointer", fn);
    int rc = make_problem(fn, xd, wd, cd, yd, &p);
    if (rc == OK && workspace(&p, op, algo, bytes) != OK)
        rc = fake_violation(NOT_SUPPORTED, "%s: algorithm %d", fn, algo);
    return rc;
}

int cudnnGetConvolutionForwardWorkspaceSize(void *h, void *x, void *w, void *conv, void *y,
                                            int algo, size_t *bytes)
{
    return ws_size("cudnnGetConvolutionForwardWorkspaceSize", h, x, w, conv, y, FWD, algo, bytes);
}

int cudnnGetConvolutionBackwardDataWorkspaceSize(void *h, void *w, void *dy, void *conv, void *dx,
                                                 int algo, size_t *bytes)
{
    return ws_size("cudnnGetConvolutionBackwardDataWorkspaceSize", h, dx, w, conv, dy, BWD_DATA,
                   algo, bytes);
}

int cudnnGetConvolutionBackwardFilterWorkspaceSize(void *h, void *x, void *dy, void *conv, void *dw,
                                                   int algo, size_t *bytes)
{
    return ws_size("cudnnGetConvolutionBackwardFilterWorkspaceSize", h, x, dw, conv, dy, BWD_FILTER,
                   algo, bytes);
}

static int kind(int dtype)
{
    return dtype == D_FLOAT ? FAKE_F32 : dtype == D_HALF ? FAKE_F16 : FAKE_BF16;
}
static double load(const void *p, int dtype, long long i) { return fake_load(p, kind(dtype), i); }
static void store(void *p, int dtype, long long i, double v) { fake_store(p, kind(dtype), i, v); }

/* A call's x, w and y: two are read, the one the operation computes is written. */
typedef struct operands {
    const void *x, *w, *y;
} operands;

/* The scratch a convolution's job carries: x, w and y as doubles, the one computed
 * being its accumulator. */
static size_t conv_scratch(const problem *p)
{
    return (size_t)(x_count(p) + w_count(p) + y_count(p)) * sizeof(double);
}

/* The convolution op of o in double precision, in scratch (conv_scratch bytes); returns
 * the accumulator of the output. The two inputs are read as doubles first so that the
 * loops run over plain arrays; out-of-image taps are cut from the r and s ranges
 * rather than skipped one by one. Each output element still receives its products in
 * the order of the loops n k oh ow c r s, so the sums are the same bits as before. */
static double *loops(const problem *p, int op, const operands *o, double *scratch)
{
    long long nx = x_count(p), nw = w_count(p), ny = y_count(p);
    double *x = scratch, *w = x + nx, *y = w + nw;
    double *acc = op == FWD ? y : op == BWD_DATA ? x : w;
    int kd = kind(p->dtype);
    if (op != BWD_DATA)
        fake_pack(o->x, kd, 1, nx, 0, 1, x);
    if (op != BWD_FILTER)
        fake_pack(o->w, kd, 1, nw, 0, 1, w);
    if (op != FWD)
        fake_pack(o->y, kd, 1, ny, 0, 1, y);
    memset(acc, 0, (size_t)(op == FWD ? ny : op == BWD_DATA ? nx : nw) * sizeof *acc);
    for (int n = 0; n < p->n; n++)
        for (int k = 0; k < p->k; k++)
            for (int oh = 0; oh < p->oh; oh++) {
                int h0 = oh * p->u - p->pad_h; /* ih = h0 + r */
                int r0 = h0 < 0 ? -h0 : 0, r1 = p->h - h0 < p->r ? p->h - h0 : p->r;
                for (int ow = 0; ow < p->ow; ow++) {
                    int w0 = ow * p->v - p->pad_w; /* iw = w0 + s */
                    int s0 = w0 < 0 ? -w0 : 0, s1 = p->w - w0 < p->s ? p->w - w0 : p->s;
                    long long yi = (((long long)n * p->k + k) * p->oh + oh) * p->ow + ow;
                    for (int c = 0; c < p->c; c++)
                        for (int r = r0; r < r1; r++) {
                            long long xr = (((long long)n * p->c + c) * p->h + h0 + r) * p->w + w0;
                            long long wr = (((long long)k * p->c + c) * p->r + r) * p->s;
                            for (int s = s0; s < s1; s++) {
                                long long xi = xr + s, wi = wr + s;
                                if (op == FWD)
                                    acc[yi] += x[xi] * w[wi];
                                else if (op == BWD_DATA)
                                    acc[xi] += y[yi] * w[wi];
                                else
                                    acc[wi] += x[xi] * y[yi];
                            }
                        }
                }
            }
    return acc;
}

static int inside(const void *ptr, unsigned long long bytes)
{
    size_t room = 0;
    return fake_rt.extent(ptr, &room) == 2 && bytes <= room;
}

typedef struct call {
    const char *fn;
    int op, algo;
    void *h, *xd, *wd, *cd, *yd;
    const void *x, *w, *y; /* the output is the one of the three being written */
    void *out;
    void *ws;
    size_t ws_bytes;
    const void *alpha, *beta;
} call;

static int check_call(const call *c, problem *p, obj **handle)
{
    size_t need = 0;
    *handle = find(c->h, O_HANDLE);
    if (!*handle)
        return fake_violation(BAD_PARAM, "%s: %p is not a live handle", c->fn, c->h);
    if (!c->alpha || !c->beta)
        return fake_violation(BAD_PARAM_NULL_POINTER, "%s: NULL alpha or beta", c->fn);
    int rc = make_problem(c->fn, c->xd, c->wd, c->cd, c->yd, p);
    if (rc != OK)
        return rc;
    if (workspace(p, c->op, c->algo, &need) != OK)
        return fake_violation(NOT_SUPPORTED, "%s: algorithm %d", c->fn, c->algo);
    if (c->ws_bytes < need)
        return fake_violation(BAD_PARAM, "%s: algorithm %d needs %zu bytes of workspace, given %zu",
                              c->fn, c->algo, need, c->ws_bytes);
    if (need && !inside(c->ws, need))
        return fake_violation(BAD_PARAM, "%s: workspace %p outside device memory", c->fn, c->ws);
    size_t e = elem_size(p->dtype);
    if (!inside(c->x, (unsigned long long)x_count(p) * e) ||
        !inside(c->w, (unsigned long long)w_count(p) * e) ||
        !inside(c->y, (unsigned long long)y_count(p) * e))
        return fake_violation(BAD_PARAM, "%s: x %p w %p y %p: not all inside device memory", c->fn,
                              c->x, c->w, c->y);
    return OK;
}

/* What a queued convolution needs when its stream runs it; its doubles (conv_scratch)
 * follow it in the same block (fake_queue's scratch), so a graph's copy has its own. */
typedef struct conv_job {
    problem p;
    int op;
    operands o;
    void *out;
    double alpha, beta;
    long long count;
} conv_job;

static void conv_queued(void *params)
{
    conv_job *j = params;
    const double *acc = loops(&j->p, j->op, &j->o, (double *)(j + 1));
    for (long long i = 0; i < j->count; i++) {
        /* beta == 0: the output is not read, so NaN there does not propagate */
        double v = j->alpha * acc[i];
        if (j->beta != 0)
            v += j->beta * load(j->out, j->p.dtype, i);
        store(j->out, j->p.dtype, i, v);
    }
}

/* Counts a convolution cuDNN may run on TF32: fp32 data under any math type but
 * FMA_MATH (DEFAULT_MATH permits TF32 from compute capability 8.0: cudnnMathType_t). */
static void count_tf32(const problem *p)
{
    if (p->dtype == D_FLOAT && p->math != MATH_FMA)
        fake_count_tf32();
}

static int run_conv(const call *c)
{
    conv_job j = {.op = c->op, .o = {c->x, c->w, c->y}, .out = c->out};
    obj *h = NULL;
    fake_count_call();
    int rc = check_call(c, &j.p, &h);
    if (rc != OK)
        return rc;
    j.count = c->op == FWD ? y_count(&j.p) : c->op == BWD_DATA ? x_count(&j.p) : w_count(&j.p);
    /* host pointer mode: cuDNN reads alpha and beta at the call */
    j.alpha = *(const float *)c->alpha;
    j.beta = *(const float *)c->beta;
    /* Queued as cuDNN enqueues its kernels: in stream order, recorded while the stream
     * captures. */
    rc = fake_queue(h->stream, conv_queued, &j, sizeof j, conv_scratch(&j.p));
    if (rc == 2)
        return fake_violation(ALLOC_FAILED, "%s: out of host memory", c->fn);
    if (rc != OK)
        return fake_violation(EXECUTION_FAILED, "%s: queueing on the stream failed (%d)", c->fn,
                              rc);
    count_tf32(&j.p);
    return OK;
}

int cudnnConvolutionForward(void *h, const void *alpha, void *xd, const void *x, void *wd,
                            const void *w, void *conv, int algo, void *ws, size_t ws_bytes,
                            const void *beta, void *yd, void *y)
{
    call c = {"cudnnConvolutionForward",
              FWD,
              algo,
              h,
              xd,
              wd,
              conv,
              yd,
              x,
              w,
              y,
              y,
              ws,
              ws_bytes,
              alpha,
              beta};
    return run_conv(&c);
}

int cudnnConvolutionBackwardData(void *h, const void *alpha, void *wd, const void *w, void *dyd,
                                 const void *dy, void *conv, int algo, void *ws, size_t ws_bytes,
                                 const void *beta, void *dxd, void *dx)
{
    call c = {"cudnnConvolutionBackwardData",
              BWD_DATA,
              algo,
              h,
              dxd,
              wd,
              conv,
              dyd,
              dx,
              w,
              dy,
              dx,
              ws,
              ws_bytes,
              alpha,
              beta};
    return run_conv(&c);
}

int cudnnConvolutionBackwardFilter(void *h, const void *alpha, void *xd, const void *x, void *dyd,
                                   const void *dy, void *conv, int algo, void *ws, size_t ws_bytes,
                                   const void *beta, void *dwd, void *dw)
{
    call c = {"cudnnConvolutionBackwardFilter",
              BWD_FILTER,
              algo,
              h,
              xd,
              dwd,
              conv,
              dyd,
              x,
              dw,
              dy,
              dw,
              ws,
              ws_bytes,
              alpha,
              beta};
    return run_conv(&c);
}

/* ---- Convolution, bias and activation in one call ---- */

int cudnnCreateActivationDescriptor(void **d) { return create(d, O_ACT); }
int cudnnDestroyActivationDescriptor(void *d)
{
    return destroy("cudnnDestroyActivationDescriptor", d, O_ACT);
}

/* The double knows the two modes the fused convolution accepts. */
int cudnnSetActivationDescriptor(void *d, int mode, int nan, double coef)
{
    const char *fn = "cudnnSetActivationDescriptor";
    (void)coef;
    obj *o = find(d, O_ACT);
    if (!o)
        return fake_violation(BAD_PARAM, "%s: %p is not a live activation descriptor", fn, d);
    if (nan != 0 && nan != 1)
        return fake_violation(BAD_PARAM, "%s: NaN option %d", fn, nan);
    if (mode != ACT_RELU && mode != ACT_IDENTITY)
        return fake_violation(NOT_SUPPORTED, "%s: mode %d (the double knows RELU and IDENTITY)", fn,
                              mode);
    o->mode = mode;
    o->nan = nan;
    o->set = 1;
    return OK;
}

/* A queued conv + bias + activation: the convolution's sums, then the epilogue. */
typedef struct cba_job {
    conv_job conv; /* its out is y */
    const void *z, *bias;
    double alpha2;
    int relu, propagate_nan;
} cba_job;

static void cba_queued(void *params)
{
    cba_job *j = params;
    const problem *p = &j->conv.p;
    const double *acc = loops(p, FWD, &j->conv.o, (double *)(j + 1));
    long long plane = (long long)p->oh * p->ow;
    for (long long i = 0; i < j->conv.count; i++) {
        double v = j->conv.alpha * acc[i] + load(j->bias, p->dtype, (i / plane) % p->k);
        /* alpha2 == 0: z is not read (it may be y, as cuDNN allows) */
        if (j->alpha2 != 0)
            v += j->alpha2 * load(j->z, p->dtype, i);
        if (j->relu && !(v > 0) && !(j->propagate_nan && v != v))
            v = 0;
        store(j->conv.out, p->dtype, i, v);
    }
}

static int fused_calls;

int cudnnConvolutionBiasActivationForward(void *h, const void *alpha1, void *xd, const void *x,
                                          void *wd, const void *w, void *conv, int algo, void *ws,
                                          size_t ws_bytes, const void *alpha2, void *zd,
                                          const void *z, void *biasd, const void *bias, void *actd,
                                          void *yd, void *y)
{
    const char *fn = "cudnnConvolutionBiasActivationForward";
    /* beta is alpha2 for check_call's NULL test */
    call c = {fn, FWD, algo, h, xd, wd, conv, yd, x, w, y, y, ws, ws_bytes, alpha1, alpha2};
    cba_job j = {.conv = {.op = FWD, .o = {x, w, y}, .out = y}, .z = z, .bias = bias};
    obj *hd = NULL;
    fake_count_call();
    int rc = check_call(&c, &j.conv.p, &hd);
    if (rc != OK)
        return rc;
    const problem *p = &j.conv.p;
    obj *zo = find(zd, O_TENSOR), *bo = find(biasd, O_TENSOR), *act = find(actd, O_ACT);
    if (!zo || !bo || !act || !zo->set || !bo->set || !act->set)
        return fake_violation(BAD_PARAM, "%s: z %p bias %p activation %p: not all live and set", fn,
                              zd, biasd, actd);
    /* cuDNN's documented restriction: RELU is only fused on this algorithm */
    if (act->mode == ACT_RELU && algo != ALGO_IMPLICIT_PRECOMP_GEMM)
        return fake_violation(
            NOT_SUPPORTED, "%s: algorithm %d with RELU (only IMPLICIT_PRECOMP_GEMM, 1)", fn, algo);
    if (zo->n != p->n || zo->c != p->k || zo->h != p->oh || zo->w != p->ow || zo->dtype != p->dtype)
        return fake_violation(SHAPE_MISMATCH, "%s: z %dx%dx%dx%d is not y's shape", fn, zo->n,
                              zo->c, zo->h, zo->w);
    if (bo->n != 1 || bo->c != p->k || bo->h != 1 || bo->w != 1 || bo->dtype != p->dtype)
        return fake_violation(SHAPE_MISMATCH, "%s: bias %dx%dx%dx%d, want 1x%dx1x1", fn, bo->n,
                              bo->c, bo->h, bo->w, p->k);
    size_t e = elem_size(p->dtype);
    j.alpha2 = *(const float *)alpha2;
    if (!inside(bias, (unsigned long long)p->k * e) ||
        (j.alpha2 != 0 && !inside(z, (unsigned long long)y_count(p) * e)))
        return fake_violation(BAD_PARAM, "%s: bias %p or z %p outside device memory", fn, bias, z);
    j.conv.count = y_count(p);
    j.conv.alpha = *(const float *)alpha1;
    j.relu = act->mode == ACT_RELU;
    j.propagate_nan = act->nan;
    rc = fake_queue(hd->stream, cba_queued, &j, sizeof j, conv_scratch(p));
    if (rc != OK)
        return fake_violation(rc == 2 ? ALLOC_FAILED : EXECUTION_FAILED,
                              "%s: queueing on the stream failed (%d)", fn, rc);
    pthread_mutex_lock(&fake_lib_mu);
    fused_calls++;
    pthread_mutex_unlock(&fake_lib_mu);
    count_tf32(p);
    return OK;
}

/* ---- Pooling (fp32) ----
 * Max pooling's ties: forward takes the first maximum in row-major window order
 * (a strict > scan from the window's first element, so padding never wins), backward
 * gives each dy to the first element of its window equal to y, in the same order: the
 * CPU backend's rule. cuDNN documents none, so callers must not rely on it. */

int cudnnCreatePoolingDescriptor(void **d) { return create(d, O_POOL); }
int cudnnDestroyPoolingDescriptor(void *d)
{
    return destroy("cudnnDestroyPoolingDescriptor", d, O_POOL);
}

int cudnnSetPooling2dDescriptor(void *d, int mode, int nan, int win_h, int win_w, int pad_h,
                                int pad_w, int stride_h, int stride_w)
{
    const char *fn = "cudnnSetPooling2dDescriptor";
    obj *o = find(d, O_POOL);
    if (!o)
        return fake_violation(BAD_PARAM, "%s: %p is not a live pooling descriptor", fn, d);
    if (mode < POOL_MAX || mode > POOL_MAX_DETERMINISTIC || (nan != 0 && nan != 1))
        return fake_violation(BAD_PARAM, "%s: mode %d NaN option %d", fn, mode, nan);
    if (win_h <= 0 || win_w <= 0 || stride_h <= 0 || stride_w <= 0 || pad_h < 0 || pad_w < 0)
        return fake_violation(BAD_PARAM, "%s: window %dx%d pad %d %d stride %d %d", fn, win_h,
                              win_w, pad_h, pad_w, stride_h, stride_w);
    o->mode = mode;
    o->nan = nan;
    o->win_h = win_h, o->win_w = win_w;
    o->pad_h = pad_h, o->pad_w = pad_w;
    o->u = stride_h, o->v = stride_w;
    o->set = 1;
    return OK;
}

typedef struct pool_problem {
    int mode, n, c, h, w, oh, ow, wh, ww, ph, pw, sh, sw;
} pool_problem;

static int same_dims(const obj *a, const obj *b)
{
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->dtype == b->dtype;
}

/* The pooling's and x's and y's descriptors, checked against each other: y must have
 * exactly the pooling's output dimensions; fp32 only (all stoke pools in). */
static int make_pool(const char *fn, void *pd, void *xd, void *yd, pool_problem *p)
{
    obj *po = find(pd, O_POOL), *x = find(xd, O_TENSOR), *y = find(yd, O_TENSOR);
    if (!po || !x || !y)
        return fake_violation(BAD_PARAM, "%s: a descriptor is not live (pool %p x %p y %p)", fn, pd,
                              xd, yd);
    if (!po->set || !x->set || !y->set)
        return fake_violation(BAD_PARAM, "%s: a descriptor was never set", fn);
    if (x->dtype != D_FLOAT || y->dtype != D_FLOAT)
        return fake_violation(NOT_SUPPORTED, "%s: data types %d %d (the double pools fp32)", fn,
                              x->dtype, y->dtype);
    *p = (pool_problem){po->mode,  x->n,      x->c,      x->h,      x->w,  0,    0,
                        po->win_h, po->win_w, po->pad_h, po->pad_w, po->u, po->v};
    if (p->wh > p->h + 2 * p->ph || p->ww > p->w + 2 * p->pw)
        return fake_violation(BAD_PARAM, "%s: window %dx%d larger than the padded %dx%d input", fn,
                              p->wh, p->ww, p->h, p->w);
    p->oh = (p->h + 2 * p->ph - p->wh) / p->sh + 1;
    p->ow = (p->w + 2 * p->pw - p->ww) / p->sw + 1;
    if (y->n != p->n || y->c != p->c || y->h != p->oh || y->w != p->ow)
        return fake_violation(SHAPE_MISMATCH,
                              "%s: output %dx%dx%dx%d, the pooling gives %dx%dx%dx%d", fn, y->n,
                              y->c, y->h, y->w, p->n, p->c, p->oh, p->ow);
    return OK;
}

typedef struct pool_job {
    pool_problem p;
    const float *x, *y, *dy;
    float *out; /* y forward, dx backward */
    double alpha, beta;
    int backward;
} pool_job;

static void clip(int o, int stride, int pad, int win, int size, int *lo, int *hi)
{
    int start = o * stride - pad;
    *lo = start < 0 ? 0 : start;
    *hi = start + win < size ? start + win : size;
}

static int is_max(int mode) { return mode == POOL_MAX || mode == POOL_MAX_DETERMINISTIC; }

static void pool_queued(void *params)
{
    const pool_job *j = params;
    const pool_problem *p = &j->p;
    long long planes = (long long)p->n * p->c, in = (long long)p->h * p->w;
    long long count = planes * (j->backward ? in : (long long)p->oh * p->ow);
    double *acc = (double *)(j + 1);
    memset(acc, 0, (size_t)count * sizeof *acc);
    for (long long pl = 0; pl < planes; pl++)
        for (int oh = 0; oh < p->oh; oh++)
            for (int ow = 0; ow < p->ow; ow++) {
                int h0, h1, w0, w1;
                clip(oh, p->sh, p->ph, p->wh, p->h, &h0, &h1);
                clip(ow, p->sw, p->pw, p->ww, p->w, &w0, &w1);
                const float *x = j->x + pl * in;
                long long o = (pl * p->oh + oh) * p->ow + ow;
                double div = p->mode == POOL_AVG_INCLUDE ? (double)p->wh * p->ww
                                                         : (double)(h1 - h0) * (w1 - w0);
                double best = x[h0 * p->w + w0], sum = 0;
                long long at = -1; /* backward max: where dy goes */
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        double v = x[h * p->w + w];
                        sum += v;
                        if (v > best)
                            best = v;
                        if (j->backward && at < 0 && v == j->y[o])
                            at = pl * in + h * p->w + w;
                    }
                if (!j->backward)
                    acc[o] = is_max(p->mode) ? best : sum / div;
                else if (is_max(p->mode) && at >= 0)
                    acc[at] += j->dy[o];
                else if (!is_max(p->mode))
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++)
                            acc[pl * in + h * p->w + w] += j->dy[o] / div;
            }
    for (long long i = 0; i < count; i++) {
        /* beta == 0: the output is not read */
        double v = j->alpha * acc[i];
        if (j->beta != 0)
            v += j->beta * j->out[i];
        j->out[i] = (float)v;
    }
}

static int run_pool(const char *fn, void *h, const pool_job *j)
{
    obj *ho = find(h, O_HANDLE);
    if (!ho)
        return fake_violation(BAD_PARAM, "%s: %p is not a live handle", fn, h);
    const pool_problem *p = &j->p;
    unsigned long long xb = (unsigned long long)p->n * p->c * p->h * p->w * 4,
                       yb = (unsigned long long)p->n * p->c * p->oh * p->ow * 4;
    if (!inside(j->x, xb) || !inside(j->out, j->backward ? xb : yb) ||
        (j->backward && (!inside(j->y, yb) || !inside(j->dy, yb))))
        return fake_violation(BAD_PARAM, "%s: a tensor is not all inside device memory", fn);
    long long count = (long long)p->n * p->c * (j->backward ? p->h * p->w : p->oh * p->ow);
    int rc = fake_queue(ho->stream, pool_queued, j, sizeof *j, (size_t)count * sizeof(double));
    if (rc != OK)
        return fake_violation(rc == 2 ? ALLOC_FAILED : EXECUTION_FAILED,
                              "%s: queueing on the stream failed (%d)", fn, rc);
    return OK;
}

int cudnnPoolingForward(void *h, void *pd, const void *alpha, void *xd, const void *x,
                        const void *beta, void *yd, void *y)
{
    const char *fn = "cudnnPoolingForward";
    pool_job j = {.x = x, .out = y};
    fake_count_call();
    if (!alpha || !beta)
        return fake_violation(BAD_PARAM_NULL_POINTER, "%s: NULL alpha or beta", fn);
    int rc = make_pool(fn, pd, xd, yd, &j.p);
    if (rc != OK)
        return rc;
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    return run_pool(fn, h, &j);
}

int cudnnPoolingBackward(void *h, void *pd, const void *alpha, void *yd, const void *y, void *dyd,
                         const void *dy, void *xd, const void *x, const void *beta, void *dxd,
                         void *dx)
{
    const char *fn = "cudnnPoolingBackward";
    pool_job j = {.x = x, .y = y, .dy = dy, .out = dx, .backward = 1};
    fake_count_call();
    if (!alpha || !beta)
        return fake_violation(BAD_PARAM_NULL_POINTER, "%s: NULL alpha or beta", fn);
    int rc = make_pool(fn, pd, xd, yd, &j.p);
    if (rc != OK)
        return rc;
    obj *dyo = find(dyd, O_TENSOR), *dxo = find(dxd, O_TENSOR);
    if (!dyo || !dxo || !dyo->set || !dxo->set)
        return fake_violation(BAD_PARAM, "%s: dy %p or dx %p not a live, set descriptor", fn, dyd,
                              dxd);
    if (!same_dims(dyo, find(yd, O_TENSOR)) || !same_dims(dxo, find(xd, O_TENSOR)))
        return fake_violation(SHAPE_MISMATCH, "%s: dy or dx differs from y or x", fn);
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    return run_pool(fn, h, &j);
}

/* ---- For the tests (found with dlsym) ---- */
int fake_cudnn_violations(void) { return fake_lib_violations(); }
int fake_cudnn_calls(void) { return fake_lib_calls(); }
int fake_cudnn_tf32_calls(void) { return fake_lib_tf32_calls(); }
const char *fake_cudnn_last_problem(void) { return fake_lib_last_problem(); }
/* cudnnConvolutionBiasActivationForward calls queued: whether a fused chain ran. */
int fake_cudnn_fused_calls(void)
{
    pthread_mutex_lock(&fake_lib_mu);
    int n = fused_calls;
    pthread_mutex_unlock(&fake_lib_mu);
    return n;
}

void fake_cudnn_reset(void) { fake_lib_reset(); }

/* The objects kept for use-after-destroy checks go with the library (unload or
 * exit), so a leak checker reports only what the caller leaks. */
__attribute__((destructor)) static void free_objects(void)
{
    for (size_t i = 0; i < nobjs; i++)
        free(objs[i]);
    free(objs);
    objs = NULL;
    nobjs = cap = 0;
}

/* Live handles and descriptors: 0 when every created one was destroyed. */
int fake_cudnn_live(void)
{
    int n = 0;
    pthread_mutex_lock(&fake_lib_mu);
    for (size_t i = 0; i < nobjs; i++)
        n += objs[i]->live;
    pthread_mutex_unlock(&fake_lib_mu);
    return n;
}
