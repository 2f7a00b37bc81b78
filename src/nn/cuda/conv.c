/* conv.c - the CUDA backend's 2-d convolution through cuDNN (NCHW, groups 1,
 * cross-correlation) with the bias as kernels (k_pool.h). Per (shape, batch, precision)
 * a plan keeps the descriptors and the algorithms the _v7 heuristics rank first among
 * those whose workspace fits, chosen once in the workspace entry; the three directions
 * share the plan's workspace, the largest of theirs.
 *
 * bf16/fp16 compute the CPU backend's function: products of low-precision operands
 * summed in fp32, fp32 results. cuDNN's legacy API writes a low-precision y when its
 * inputs are, and a rounded y would change which element a following max-pool picks
 * (ties), so forward runs on fp32 tensors holding the rounded input and weights, where
 * TF32 tensor cores multiply them exactly. The two backward convolutions, whose
 * results are only summed into fp32 gradients, run on bf16/fp16 tensors (the rounded
 * input and output gradient) and are widened into din and grad.
 *
 * The fused conv2d -> relu -> max_pool2d chain (conv_block.c) runs its convolution
 * here too, on plans of its own (fused in the key): forward is one
 * cudnnConvolutionBiasActivationForward, which runs ReLU only on the
 * IMPLICIT_PRECOMP_GEMM algorithm, so that one is taken rather than the heuristics'
 * first; a convolution without bias adds a zero one the plan keeps. */
#include <limits.h>
#include <stdlib.h>

#include "nn/cuda/ops.h"

/* An algorithm needing more scratch than this is passed over for the next one: a
 * bigger workspace would eat the memory the batch size was planned with. */
#define CONV_WS_LIMIT ((size_t)512 << 20)
#define CONV_ALGOS    8
enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER, NDIR };

typedef struct conv_key {
    int n, c, h, w, k, r, oh, ow, stride, pad, dtype;
    int fused, zero_bias; /* conv+bias+relu in one call; with a bias of zeros */
} conv_key;

/* x, w, y descriptors of one data type */
typedef struct conv_descs {
    void *x, *w, *y;
} conv_descs;

typedef struct cuda_conv_plan {
    conv_key key;
    conv_descs d[2]; /* fp32; the backward's low precision (unset for fp32 plans) */
    void *cd;
    void *bias_d, *act; /* fused: the bias (1 x k x 1 x 1) and ReLU descriptors */
    float *zero_bias;   /* fused without bias: k zeros of device memory */
    int algo[NDIR];
    int math[NDIR]; /* cudnnMathType_t of each direction's algorithm, set before its call */
    size_t ws;      /* the largest of the three directions' */
} cuda_conv_plan;

static bool key_eq(const conv_key *a, const conv_key *b)
{
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
           a->r == b->r && a->oh == b->oh && a->ow == b->ow && a->stride == b->stride &&
           a->pad == b->pad && a->dtype == b->dtype && a->fused == b->fused &&
           a->zero_bias == b->zero_bias;
}

static int dnn_type(stoke_precision p)
{
    return p == STOKE_PREC_FP32   ? NC_CUDNN_DATA_FLOAT
           : p == STOKE_PREC_FP16 ? NC_CUDNN_DATA_HALF
                                  : NC_CUDNN_DATA_BFLOAT16;
}

/* cuDNN's legacy API takes int dimensions and tensors under 2^31 elements. */
static stoke_status key_of(const stoke_graph *g, const nn_node *n, int64_t batch, stoke_precision p,
                           int fused, conv_key *k)
{
    const stoke_shape *in = &nn_graph_node(g, n->in[0])->shape;
    /* Under 4 input channels the CPU backend's mixed-precision convolution (what its
     * conv-ReLU-pool blocks run, as in the reference CNN) keeps fp32 math, rounding
     * being allowed there, not required; so does this, for one function on both (tensor
     * cores gain little from a reduction over so few channels anyway). */
    if (in->dims[0] < 4)
        p = STOKE_PREC_FP32;
    int64_t most = cuda_elems(in) > cuda_elems(&n->shape) ? cuda_elems(in) : cuda_elems(&n->shape);
    if (batch < 1 || batch > INT_MAX || most > INT_MAX / batch)
        return stoke_fail(STOKE_ERR_ARG, "%s: size %lld exceeds cuDNN's int range", n->name,
                          (long long)(batch * most));
    *k = (conv_key){.n = (int)batch,
                    .c = (int)in->dims[0],
                    .h = (int)in->dims[1],
                    .w = (int)in->dims[2],
                    .k = (int)n->features,
                    .r = n->kernel,
                    .oh = (int)n->shape.dims[1],
                    .ow = (int)n->shape.dims[2],
                    .stride = n->stride,
                    .pad = n->padding,
                    .dtype = dnn_type(p),
                    .fused = fused,
                    .zero_bias = fused && !n->bias};
    return STOKE_OK;
}

static bool lowp(const cuda_conv_plan *p) { return p->key.dtype != NC_CUDNN_DATA_FLOAT; }

/* the descriptors direction dir runs on */
static const conv_descs *descs(const cuda_conv_plan *p, int dir)
{
    return &p->d[dir != DIR_FWD && lowp(p)];
}

static void plan_free(cuda_ctx *c, cuda_conv_plan *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->d[i].x)
            c->dnn->destroy_tensor(p->d[i].x);
        if (p->d[i].y)
            c->dnn->destroy_tensor(p->d[i].y);
        if (p->d[i].w)
            c->dnn->destroy_filter(p->d[i].w);
    }
    if (p->cd)
        c->dnn->destroy_conv(p->cd);
    if (p->bias_d)
        c->dnn->destroy_tensor(p->bias_d);
    if (p->act)
        c->dnn->destroy_act(p->act);
    if (p->zero_bias)
        stoke_cudart_free(c->rt, p->zero_bias);
    free(p);
}

void cuda_conv_plans_free(cuda_ctx *c)
{
    for (int i = 0; i < c->nconv_plans; i++)
        plan_free(c, c->conv_plans[i]);
    free(c->conv_plans);
    c->conv_plans = NULL;
    c->nconv_plans = 0;
}

static int describe_one(nn_cudnn *d, const conv_key *k, int dtype, conv_descs *t)
{
    int rc = d->create_tensor(&t->x);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->create_tensor(&t->y);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->create_filter(&t->w);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_tensor_4d(t->x, NC_CUDNN_TENSOR_NCHW, dtype, k->n, k->c, k->h, k->w);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_tensor_4d(t->y, NC_CUDNN_TENSOR_NCHW, dtype, k->n, k->k, k->oh, k->ow);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_filter_4d(t->w, dtype, NC_CUDNN_TENSOR_NCHW, k->k, k->c, k->r, k->r);
    return rc;
}

/* The fused call's bias and ReLU (NaN not propagated: the CPU's x > 0 ? x : 0 makes
 * NaN 0) and, without a bias, k zeros to add. */
static stoke_status describe_fused(cuda_ctx *c, cuda_conv_plan *p)
{
    const conv_key *k = &p->key;
    nn_cudnn *d = c->dnn;
    int rc = d->create_tensor(&p->bias_d);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_tensor_4d(p->bias_d, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, 1, k->k, 1, 1);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->create_act(&p->act);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_act(p->act, NC_CUDNN_ACTIVATION_RELU, NC_CUDNN_NOT_PROPAGATE_NAN, 0.0);
    stoke_status st = cuda_dnn_check(c, rc, "cuDNN activation descriptors");
    if (st == STOKE_OK && k->zero_bias) {
        size_t bytes = (size_t)k->k * sizeof(float);
        void *z = NULL;
        st = stoke_cudart_malloc(c->rt, bytes, &z);
        p->zero_bias = z;
        if (st == STOKE_OK)
            st = stoke_cudart_memset_async(c->rt, z, 0, bytes, c->L.stream);
    }
    return st;
}

/* tensor cores where the device has them: TF32 for fp32 when the context allows it, as
 * the GEMMs (ctx.c). Without TF32, FMA_MATH: cuDNN's DEFAULT_MATH permits TF32 for fp32
 * from compute capability 8.0 (cudnnMathType_t); below, the two are the same. */
static bool fp32_no_tf32(const cuda_ctx *c, const cuda_conv_plan *p)
{
    return !lowp(p) && !c->tf32;
}

static int base_math(const cuda_ctx *c, const cuda_conv_plan *p)
{
    return fp32_no_tf32(c, p) ? NC_CUDNN_FMA_MATH : NC_CUDNN_TENSOR_OP_MATH;
}

/* The descriptor's math type for a direction's call: cuDNN picks its kernels from the
 * algorithm and the math type together, so each call runs with the math type the
 * heuristics gave its algorithm (as PyTorch does). */
static stoke_status use_math(cuda_ctx *c, const cuda_conv_plan *p, int dir)
{
    return cuda_dnn_check(c, c->dnn->set_conv_math(p->cd, p->math[dir]),
                          "cudnnSetConvolutionMathType");
}

static stoke_status describe(cuda_ctx *c, cuda_conv_plan *p)
{
    const conv_key *k = &p->key;
    nn_cudnn *d = c->dnn;
    int math = base_math(c, p);
    int rc = describe_one(d, k, NC_CUDNN_DATA_FLOAT, &p->d[0]);
    if (rc == NC_CUDNN_SUCCESS && lowp(p))
        rc = describe_one(d, k, k->dtype, &p->d[1]);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->create_conv(&p->cd);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_conv_2d(p->cd, k->pad, k->pad, k->stride, k->stride, 1, 1,
                            NC_CUDNN_CROSS_CORRELATION, NC_CUDNN_DATA_FLOAT);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_conv_math(p->cd, math);
    stoke_status st = cuda_dnn_check(c, rc, "cuDNN descriptors");
    if (st == STOKE_OK && k->fused)
        st = describe_fused(c, p);
    return st;
}

static int rank(cuda_ctx *c, const cuda_conv_plan *p, int dir, int *got, nn_cudnn_perf *perf)
{
    nn_cudnn *d = c->dnn;
    const conv_descs *t = descs(p, dir);
    if (dir == DIR_FWD)
        return d->fwd_algos(c->dnn_h, t->x, t->w, p->cd, t->y, CONV_ALGOS, got, perf);
    if (dir == DIR_BWD_DATA)
        return d->bwd_data_algos(c->dnn_h, t->w, t->y, p->cd, t->x, CONV_ALGOS, got, perf);
    return d->bwd_filter_algos(c->dnn_h, t->x, t->y, p->cd, t->w, CONV_ALGOS, got, perf);
}

static int ws_of(cuda_ctx *c, const cuda_conv_plan *p, int dir, int algo, size_t *bytes)
{
    nn_cudnn *d = c->dnn;
    const conv_descs *t = descs(p, dir);
    if (dir == DIR_FWD)
        return d->fwd_ws(c->dnn_h, t->x, t->w, p->cd, t->y, algo, bytes);
    if (dir == DIR_BWD_DATA)
        return d->bwd_data_ws(c->dnn_h, t->w, t->y, p->cd, t->x, algo, bytes);
    return d->bwd_filter_ws(c->dnn_h, t->x, t->y, p->cd, t->w, algo, bytes);
}

/* The heuristics' first algorithm that succeeds and fits CONV_WS_LIMIT. */
static stoke_status choose(cuda_ctx *c, cuda_conv_plan *p, int dir)
{
    static const char *const what[NDIR] = {"cudnnGetConvolutionForwardAlgorithm_v7",
                                           "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                                           "cudnnGetConvolutionBackwardFilterAlgorithm_v7"};
    nn_cudnn_perf perf[CONV_ALGOS];
    int got = 0;
    if (dir == DIR_FWD && p->key.fused) {
        /* the one algorithm cuDNN fuses ReLU into */
        size_t bytes = 0;
        stoke_status st =
            cuda_dnn_check(c, ws_of(c, p, dir, NC_CUDNN_FWD_IMPLICIT_PRECOMP_GEMM, &bytes),
                           "cudnnGetConvolutionForwardWorkspaceSize (IMPLICIT_PRECOMP_GEMM)");
        if (st == STOKE_OK && bytes > CONV_WS_LIMIT)
            st = stoke_fail(STOKE_ERR_UNAVAILABLE,
                            "conv+bias+relu needs %zu MiB of workspace, more than %zu MiB",
                            bytes >> 20, CONV_WS_LIMIT >> 20);
        p->algo[dir] = NC_CUDNN_FWD_IMPLICIT_PRECOMP_GEMM;
        p->math[dir] = base_math(c, p);
        p->ws = bytes > p->ws ? bytes : p->ws;
        return st;
    }
    stoke_status st = cuda_dnn_check(c, rank(c, p, dir, &got, perf), what[dir]);
    for (int i = 0; st == STOKE_OK && i < got; i++) {
        size_t bytes = 0;
        if (perf[i].status != NC_CUDNN_SUCCESS || perf[i].memory > CONV_WS_LIMIT)
            continue;
        int math = perf[i].math_type;
        if (fp32_no_tf32(c, p)) {
            /* TF32 is off: a tensor-op entry would run fp32 on TF32 */
            if (math != NC_CUDNN_DEFAULT_MATH && math != NC_CUDNN_FMA_MATH)
                continue;
            math = NC_CUDNN_FMA_MATH;
        }
        p->math[dir] = math;
        st = use_math(c, p, dir);
        if (st == STOKE_OK)
            st = cuda_dnn_check(c, ws_of(c, p, dir, perf[i].algo, &bytes),
                                "cudnnGetConvolutionWorkspaceSize");
        if (st == STOKE_OK && bytes <= CONV_WS_LIMIT) {
            p->algo[dir] = perf[i].algo;
            p->ws = bytes > p->ws ? bytes : p->ws;
            return STOKE_OK;
        }
    }
    if (st == STOKE_OK)
        st =
            stoke_fail(STOKE_ERR_UNAVAILABLE,
                       "%s: none of %d algorithms for %dx%dx%dx%d runs within %zu MiB of workspace",
                       what[dir], got, p->key.n, p->key.c, p->key.h, p->key.w, CONV_WS_LIMIT >> 20);
    return st;
}

static stoke_status plan_new(cuda_ctx *c, const conv_key *k, cuda_conv_plan **out)
{
    cuda_conv_plan **grown = realloc(c->conv_plans, (size_t)(c->nconv_plans + 1) * sizeof *grown);
    cuda_conv_plan *p = calloc(1, sizeof *p);
    if (grown)
        c->conv_plans = grown;
    if (!grown || !p) {
        free(p);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    p->key = *k;
    stoke_status st = describe(c, p);
    for (int dir = 0; dir < NDIR && st == STOKE_OK; dir++)
        st = choose(c, p, dir);
    if (st != STOKE_OK) {
        plan_free(c, p);
        return st;
    }
    c->conv_plans[c->nconv_plans++] = p;
    *out = p;
    return STOKE_OK;
}

/* The cached plan of node n at this batch and precision, made on first use. */
static stoke_status plan_for(cuda_ctx *c, const stoke_graph *g, const nn_node *n, int64_t batch,
                             stoke_precision prec, int fused, const cuda_conv_plan **out)
{
    conv_key k;
    stoke_status st = key_of(g, n, batch, prec, fused, &k);
    if (st == STOKE_OK)
        st = cuda_ctx_dnn(c);
    if (st != STOKE_OK)
        return st;
    for (int i = 0; i < c->nconv_plans; i++)
        if (key_eq(&c->conv_plans[i]->key, &k)) {
            *out = c->conv_plans[i];
            return STOKE_OK;
        }
    cuda_conv_plan *p = NULL;
    st = plan_new(c, &k, &p);
    *out = p;
    return st;
}

/* ---- the workspace: low-precision operands, then cuDNN's scratch ---- */

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* Low precision: forward's fp32 copies of the rounded x and w, or backward's
 * low-precision x, dy and cuDNN's dx and dw (the two never at once); then cuDNN's. */
typedef struct conv_ws {
    float *xr, *wr;
    uint16_t *x, *dy, *dx, *dw;
    void *dnn;
    size_t need;
} conv_ws;

static conv_ws ws_layout(const cuda_conv_plan *p, void *base)
{
    const conv_key *k = &p->key;
    size_t xn = (size_t)k->n * k->c * k->h * k->w, yn = (size_t)k->n * k->k * k->oh * k->ow;
    size_t wn = (size_t)k->k * k->c * k->r * k->r;
    size_t fwd[2] = {0, align256(xn * 4)}, bwd[4] = {0, align256(xn * 2), 0, 0};
    bwd[2] = bwd[1] + align256(yn * 2);
    bwd[3] = bwd[2] + align256(xn * 2);
    size_t end_f = fwd[1] + align256(wn * 4), end_b = bwd[3] + align256(wn * 2);
    size_t ops = lowp(p) ? (end_f > end_b ? end_f : end_b) : 0;
    conv_ws w = {0};
    w.need = ops + p->ws;
    if (!base)
        return w;
    char *b = base;
    if (lowp(p)) {
        w.xr = (float *)(void *)(b + fwd[0]);
        w.wr = (float *)(void *)(b + fwd[1]);
        w.x = (uint16_t *)(void *)(b + bwd[0]);
        w.dy = (uint16_t *)(void *)(b + bwd[1]);
        w.dx = (uint16_t *)(void *)(b + bwd[2]);
        w.dw = (uint16_t *)(void *)(b + bwd[3]);
    }
    w.dnn = p->ws ? b + ops : NULL;
    return w;
}

static stoke_status ws_of_node(cuda_ctx *c, const stoke_graph *g, const nn_node *n, int64_t batch,
                               stoke_precision p, int fused, size_t *bytes)
{
    const cuda_conv_plan *plan = NULL;
    stoke_status st = plan_for(c, g, n, batch, p, fused, &plan);
    if (st != STOKE_OK)
        return st; /* the executor names the node */
    /* offsets from a 256-aligned base, which the executor's arena is */
    *bytes = ws_layout(plan, NULL).need;
    return STOKE_OK;
}

stoke_status cuda_conv_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes)
{
    return ws_of_node(ctx, g, n, batch, p, 0, bytes);
}

stoke_status cuda_conv_relu_ws(cuda_ctx *c, const stoke_graph *g, const nn_node *n, int64_t batch,
                               stoke_precision p, size_t *bytes)
{
    return ws_of_node(c, g, n, batch, p, 1, bytes);
}

/* The plan and the workspace of a call; a workspace smaller than the plan's is the
 * executor's bug, reported rather than overrun. */
static stoke_status setup(cuda_ctx *c, const nn_exec_args *a, const cuda_conv_plan **p, conv_ws *w)
{
    stoke_precision prec = a->param_lp[0] ? a->precision : STOKE_PREC_FP32;
    stoke_status st = plan_for(c, a->graph, a->node, a->batch, prec, a->nchain > 0, p);
    if (st != STOKE_OK)
        return st;
    *w = ws_layout(*p, a->ws);
    if (w->need > a->ws_size)
        return stoke_fail(STOKE_ERR_ARG, "a workspace of %zu bytes, the convolution needs %zu",
                          a->ws_size, w->need);
    return STOKE_OK;
}

static int64_t x_n(const cuda_conv_plan *p)
{
    return (int64_t)p->key.n * p->key.c * p->key.h * p->key.w;
}
static int64_t y_n(const cuda_conv_plan *p)
{
    return (int64_t)p->key.n * p->key.k * p->key.oh * p->key.ow;
}
static int64_t w_n(const cuda_conv_plan *p)
{
    return (int64_t)p->key.k * p->key.c * p->key.r * p->key.r;
}

static stoke_status widen(cuda_ctx *c, const nn_exec_args *a, float *out, const uint16_t *in,
                          int64_t n, int accumulate)
{
    nk_widen_args k = {out, in, a->precision == STOKE_PREC_FP16, accumulate};
    return CUDA_RUN(c, widen, n, &k);
}

/* y = conv(x, w) + b, or in a fused chain's plan relu(conv(x, w) + b) */
static stoke_status forward(cuda_ctx *c, const nn_exec_args *a, float *y)
{
    const cuda_conv_plan *p;
    conv_ws w;
    stoke_status st = setup(c, a, &p, &w);
    if (st != STOKE_OK)
        return st;
    const float *x = a->in[0], *wt = a->param[0];
    if (lowp(p)) {
        nk_round_args r = {w.xr, a->in[0], a->precision == STOKE_PREC_FP16};
        st = CUDA_RUN(c, round_lowp, x_n(p), &r);
        if (st == STOKE_OK)
            st = widen(c, a, w.wr, a->param_lp[0], w_n(p), 0);
        x = w.xr;
        wt = w.wr;
    }
    const float one = 1.0f, zero = 0.0f;
    const conv_descs *t = descs(p, DIR_FWD);
    if (st == STOKE_OK)
        st = use_math(c, p, DIR_FWD);
    if (st == STOKE_OK && p->key.fused) {
        /* alpha2 0: z (y itself, as cuDNN allows) is not read */
        const float *bias = p->zero_bias ? p->zero_bias : a->param[1];
        return cuda_dnn_check(c,
                              c->dnn->conv_bias_act(c->dnn_h, &one, t->x, x, t->w, wt, p->cd,
                                                    p->algo[DIR_FWD], w.dnn, p->ws, &zero, t->y, y,
                                                    p->bias_d, bias, p->act, t->y, y),
                              "cudnnConvolutionBiasActivationForward");
    }
    if (st == STOKE_OK)
        st = cuda_dnn_check(c,
                            c->dnn->fwd(c->dnn_h, &one, t->x, x, t->w, wt, p->cd, p->algo[DIR_FWD],
                                        w.dnn, p->ws, &zero, t->y, y),
                            "cudnnConvolutionForward");
    if (st == STOKE_OK && a->node->bias) {
        nk_conv_bias_args b = {y, a->param[1], p->key.k, (int64_t)p->key.oh * p->key.ow};
        st = CUDA_RUN(c, conv_bias_add, y_n(p), &b);
    }
    return st;
}

stoke_status cuda_conv_fwd(void *ctx, const nn_exec_args *a)
{
    stoke_status st = forward(ctx, a, a->out);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_conv_relu_fwd(cuda_ctx *c, const nn_exec_args *a, float *y)
{
    return forward(c, a, y);
}

/* dx += the data gradient: in place with beta 1 in fp32, else through w.dx */
static stoke_status bwd_data(cuda_ctx *c, const nn_exec_args *a, const cuda_conv_plan *p,
                             const conv_ws *w, const void *dy)
{
    const float one = 1.0f, zero = 0.0f;
    const conv_descs *t = descs(p, DIR_BWD_DATA);
    const void *wt = lowp(p) ? (const void *)a->param_lp[0] : (const void *)a->param[0];
    void *dx = lowp(p) ? (void *)w->dx : (void *)a->din[0];
    stoke_status st = use_math(c, p, DIR_BWD_DATA);
    if (st != STOKE_OK)
        return st;
    st = cuda_dnn_check(c,
                        c->dnn->bwd_data(c->dnn_h, &one, t->w, wt, t->y, dy, p->cd,
                                         p->algo[DIR_BWD_DATA], w->dnn, p->ws,
                                         lowp(p) ? &zero : &one, t->x, dx),
                        "cudnnConvolutionBackwardData");
    if (st == STOKE_OK && lowp(p))
        st = widen(c, a, a->din[0], w->dx, x_n(p), 1);
    return st;
}

static stoke_status bwd_filter(cuda_ctx *c, const nn_exec_args *a, const cuda_conv_plan *p,
                               const conv_ws *w, const void *x, const void *dy)
{
    const float one = 1.0f, zero = 0.0f;
    const conv_descs *t = descs(p, DIR_BWD_FILTER);
    void *dw = lowp(p) ? (void *)w->dw : (void *)a->grad[0];
    stoke_status st = use_math(c, p, DIR_BWD_FILTER);
    if (st != STOKE_OK)
        return st;
    st = cuda_dnn_check(c,
                        c->dnn->bwd_filter(c->dnn_h, &one, t->x, x, t->y, dy, p->cd,
                                           p->algo[DIR_BWD_FILTER], w->dnn, p->ws,
                                           lowp(p) ? &zero : &one, t->w, dw),
                        "cudnnConvolutionBackwardFilter");
    if (st == STOKE_OK && lowp(p))
        st = widen(c, a, a->grad[0], w->dw, w_n(p), 1);
    return st;
}

/* from the output gradient dy32 (fp32): a->dout, or a fused chain's masked gradient */
static stoke_status backward(cuda_ctx *c, const nn_exec_args *a, const float *dy32)
{
    const cuda_conv_plan *p;
    conv_ws w;
    stoke_status st = setup(c, a, &p, &w);
    if (st != STOKE_OK)
        return st;
    const void *x = a->in[0], *dy = dy32;
    if (lowp(p)) {
        st = cuda_to_lowp(c, a->precision, dy32, w.dy, y_n(p));
        if (st == STOKE_OK && a->grad[0])
            st = cuda_to_lowp(c, a->precision, a->in[0], w.x, x_n(p));
        x = w.x;
        dy = w.dy;
    }
    if (st == STOKE_OK && a->din[0])
        st = bwd_data(c, a, p, &w, dy);
    if (st == STOKE_OK && a->grad[0])
        st = bwd_filter(c, a, p, &w, x, dy);
    if (st == STOKE_OK && a->node->bias && a->grad[1]) {
        st = cuda_conv_bias_grad(c, a->grad[1], dy32, p->key.n, p->key.k,
                                 (int64_t)p->key.oh * p->key.ow);
    }
    return st;
}

stoke_status cuda_conv_bwd(void *ctx, const nn_exec_args *a)
{
    stoke_status st = backward(ctx, a, a->dout);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_conv_bwd_from(cuda_ctx *c, const nn_exec_args *a, const float *dy)
{
    return backward(c, a, dy);
}
