/* dense.c - the CUDA backend's linear layer, alone or fused with the ReLU after it:
 * cuBLASLt matmuls (fp32 with TF32 where the device has it; bf16/fp16 operands with
 * fp32 accumulation) whose epilogues add the bias, apply the ReLU and compute their
 * gradients; cuda_gemm (cuBLAS) is attention's. */
#include <limits.h>
#include <string.h>

#include "nn/cuda/ops.h"

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

stoke_status cuda_gemm(cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A,
                       int64_t lda, const void *B, int64_t ldb, float beta, float *C, int64_t ldc,
                       int type)
{
    return cuda_gemm_batched(c, ta, tb, m, n, k, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, type);
}

stoke_status cuda_gemm_batched(cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k,
                               const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                               int64_t sb, float beta, float *C, int64_t ldc, int64_t sc,
                               int64_t batch, int type)
{
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
        !fits_int(ldc) || !fits_int(batch))
        return stoke_fail(STOKE_ERR_ARG, "a GEMM of %lld x %lld x %lld exceeds cuBLAS's int sizes",
                          (long long)m, (long long)n, (long long)k);
    if (m == 0 || n == 0 || batch == 0)
        return STOKE_OK;
    const float alpha = 1.0f;
    int compute = type == NC_R_32F && c->tf32 ? NC_COMPUTE_32F_FAST_TF32 : NC_COMPUTE_32F;
    int rc;
    if (batch == 1)
        rc = c->blas->gemm_ex(c->blas_h, ta, tb, (int)m, (int)n, (int)k, &alpha, A, type, (int)lda,
                              B, type, (int)ldb, &beta, C, NC_R_32F, (int)ldc, compute,
                              NC_GEMM_DEFAULT);
    else
        rc = c->blas->gemm_strided_batched_ex(
            c->blas_h, ta, tb, (int)m, (int)n, (int)k, &alpha, A, type, (int)lda, sa, B, type,
            (int)ldb, sb, &beta, C, NC_R_32F, (int)ldc, sc, (int)batch, compute, NC_GEMM_DEFAULT);
    return cuda_blas_check(c, rc, batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}

stoke_status cuda_to_lowp(cuda_ctx *c, stoke_precision p, const float *x, uint16_t *out, int64_t n)
{
    nk_lowp_args a = {x, out, p == STOKE_PREC_FP16};
    return CUDA_RUN(c, to_lowp, n, &a);
}

typedef struct lin_dims {
    int64_t rows, in, out;
} lin_dims;

static lin_dims dims_of(const stoke_graph *g, const nn_node *n, int64_t batch)
{
    const stoke_shape *s = &nn_graph_node(g, n->in[0])->shape;
    lin_dims d;
    d.in = s->dims[s->ndim - 1];
    d.out = n->features;
    d.rows = batch * (cuda_elems(s) / d.in);
    return d;
}

static int lowp_type(stoke_precision p) { return p == STOKE_PREC_FP16 ? NC_R_16F : NC_R_16BF; }

/* The ReLU mask's leading dimension in bits: cuBLASLt's rule, a multiple of 128 no
 * less than the output's rows (the layer's features). */
static int64_t mask_ld(int64_t out) { return (out + 127) / 128 * 128; }

static size_t up(size_t n) { return (n + 255) & ~(size_t)255; }

/* The layer's matmuls and its workspace, in cuBLASLt's column-major terms: Y (rows x
 * out, row-major) is Y^T (out x rows); W (out x in) is W^T (in x out); X is X^T (in x
 * rows). Each workspace region starts 256-byte aligned, cuBLASLt's own last. */
typedef struct lin_plan {
    cuda_mm fwd;   /* Y^T = W^T' X^T, + bias [, ReLU with its mask] */
    cuda_mm dx;    /* dX^T += W^T dY^T */
    cuda_mm dw;    /* dW^T += X^T dY^T' [, the bias gradient from dY: BGRADB] */
    cuda_mm drelu; /* dZ^T = dReLU(0 0' + dY^T) [, its bias gradient] (fused only) */
    size_t x_lp, dy_lp, db, dz, zeros, lt; /* workspace offsets */
} lin_plan;

/* A matmul of packed matrices: each leading dimension its stored matrix's rows. */
static cuda_mm packed(int64_t ta, int64_t tb, int64_t m, int64_t n, int64_t k, int64_t type,
                      int64_t epi, int64_t aux_ld)
{
    return (cuda_mm){ta, tb, m, n, k, ta ? k : m, tb ? n : k, m, type, epi, aux_ld};
}

static lin_plan plan_of(const lin_dims *d, stoke_precision p, bool bias, bool relu)
{
    lin_plan L;
    memset(&L, 0, sizeof L);
    int64_t type = p == STOKE_PREC_FP32 ? NC_R_32F : lowp_type(p), ld = relu ? mask_ld(d->out) : 0;
    int64_t epi = relu ? (bias ? NC_LT_EPI_RELU_AUX_BIAS : NC_LT_EPI_RELU_AUX)
                       : (bias ? NC_LT_EPI_BIAS : NC_LT_EPI_DEFAULT);
    L.fwd = packed(NC_OP_T, NC_OP_N, d->out, d->rows, d->in, type, epi, ld);
    L.dx = packed(NC_OP_N, NC_OP_N, d->in, d->rows, d->out, type, NC_LT_EPI_DEFAULT, 0);
    epi = bias && !relu ? NC_LT_EPI_BGRADB : NC_LT_EPI_DEFAULT;
    L.dw = packed(NC_OP_N, NC_OP_T, d->in, d->out, d->rows, type, epi, 0);
    /* The chain's output gradient arrives summed over its readers, so no matmul of
     * the chain produces it: the dReLU epilogue (the mask from the forward) and its bias
     * gradient apply to C through a product of k = 1 over zeros (scaled by 0), which
     * costs a pass over dY as a kernel of stoke's own would. The mask is the forward's
     * (RELU_AUX) rather than recomputed from the output: DRELU reads only the mask. */
    epi = bias ? NC_LT_EPI_DRELU_BGRAD : NC_LT_EPI_DRELU;
    L.drelu = packed(NC_OP_N, NC_OP_N, d->out, d->rows, 1, NC_R_32F, epi, ld);
    size_t lp = p == STOKE_PREC_FP32 ? 0 : sizeof(uint16_t), at = 0;
    L.x_lp = at;
    at += up((size_t)(d->rows * d->in) * lp);
    L.dy_lp = at;
    at += up((size_t)(d->rows * d->out) * lp);
    L.db = at;
    at += up(bias ? (size_t)d->out * sizeof(float) : 0);
    L.dz = at;
    at += up(relu ? (size_t)(d->rows * d->out) * sizeof(float) : 0);
    L.zeros = at;
    /* A's zeros, then B's at a 256-byte boundary of their own */
    at += relu ? up((size_t)d->out * sizeof(float)) + up((size_t)d->rows * sizeof(float)) : 0;
    L.lt = at;
    return L;
}

static stoke_status lin_ws(cuda_ctx *c, const lin_dims *d, stoke_precision p, bool bias, bool relu,
                           size_t *bytes)
{
    lin_plan L = plan_of(d, p, bias, relu);
    const cuda_mm *mm[] = {&L.fwd, &L.dx, &L.dw, &L.drelu};
    size_t most = 0;
    stoke_status st = STOKE_OK;
    for (int i = 0; i < (relu ? 4 : 3) && st == STOKE_OK; i++) {
        size_t ws = 0;
        st = cuda_mm_plan(c, mm[i], &ws);
        most = ws > most ? ws : most;
    }
    *bytes = L.lt + most;
    return st;
}

stoke_status cuda_linear_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes)
{
    lin_dims d = dims_of(g, n, batch);
    stoke_status st = lin_ws(ctx, &d, p, n->bias, false, bytes);
    return st == STOKE_OK ? st : cuda_layer_fail(st, n);
}

static cuda_mm_ptrs ptrs(const nn_exec_args *a, const lin_plan *L, const void *A, const void *B,
                         float beta, const float *C, float *D)
{
    cuda_mm_ptrs q;
    memset(&q, 0, sizeof q);
    q.A = A;
    q.B = B;
    q.C = C;
    q.D = D;
    q.alpha = 1.0f;
    q.beta = beta;
    q.ws = (char *)a->ws + L->lt;
    q.ws_size = a->ws_size > L->lt ? a->ws_size - L->lt : 0;
    return q;
}

static stoke_status forward(cuda_ctx *c, const nn_exec_args *a, bool relu)
{
    lin_dims d = dims_of(a->graph, a->node, a->batch);
    lin_plan L = plan_of(&d, a->param_lp[0] ? a->precision : STOKE_PREC_FP32, a->node->bias, relu);
    const void *x = a->in[0], *w = a->param[0];
    stoke_status st = STOKE_OK;
    if (a->param_lp[0]) {
        uint16_t *xl = (void *)((char *)a->ws + L.x_lp);
        st = cuda_to_lowp(c, a->precision, a->in[0], xl, d.rows * d.in);
        x = xl;
        w = a->param_lp[0];
    }
    cuda_mm_ptrs q = ptrs(a, &L, w, x, 0.0f, a->out, a->out);
    q.bias = a->node->bias ? a->param[1] : NULL;
    q.aux = relu ? a->saved : NULL;
    if (st == STOKE_OK)
        st = cuda_mm_run(c, &L.fwd, &q);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* From the layer's output gradient dy (fp32), or for the fused chain from the ReLU's
 * gradient through the dReLU epilogue. The bias gradient comes out of an epilogue,
 * which writes it: into the workspace, then added to the accumulated one. */
static stoke_status backward(cuda_ctx *c, const nn_exec_args *a, bool relu)
{
    lin_dims d = dims_of(a->graph, a->node, a->batch);
    bool lp = a->param_lp[0] != NULL, bias = a->node->bias;
    lin_plan L = plan_of(&d, lp ? a->precision : STOKE_PREC_FP32, bias, relu);
    float *db = bias && a->grad[1] ? (float *)((char *)a->ws + L.db) : NULL;
    const float *dy32 = a->dout;
    stoke_status st = STOKE_OK;
    if (relu) {
        float *zeros = (float *)((char *)a->ws + L.zeros), *dz = (float *)((char *)a->ws + L.dz);
        size_t a_bytes = up((size_t)d.out * sizeof(float));
        st = stoke_cudart_memset_async(c->rt, zeros, 0, a_bytes + (size_t)d.rows * sizeof(float),
                                       c->L.stream);
        cuda_mm_ptrs q = ptrs(a, &L, zeros, (char *)zeros + a_bytes, 1.0f, a->dout, dz);
        q.alpha = 0.0f;
        q.aux = a->saved;
        /* DRELU_BGRAD's bias gradient has nowhere else to go */
        q.bias = bias ? (float *)((char *)a->ws + L.db) : NULL;
        if (st == STOKE_OK)
            st = cuda_mm_run(c, &L.drelu, &q);
        dy32 = dz;
    }
    const void *x = a->in[0], *w = a->param[0], *dy = dy32;
    if (lp) {
        uint16_t *xl = (void *)((char *)a->ws + L.x_lp), *dyl = (void *)((char *)a->ws + L.dy_lp);
        if (st == STOKE_OK)
            st = cuda_to_lowp(c, a->precision, a->in[0], xl, d.rows * d.in);
        if (st == STOKE_OK)
            st = cuda_to_lowp(c, a->precision, dy32, dyl, d.rows * d.out);
        x = xl;
        dy = dyl;
        w = a->param_lp[0];
    }
    if (st == STOKE_OK && a->din[0]) {
        cuda_mm_ptrs q = ptrs(a, &L, w, dy, 1.0f, a->din[0], a->din[0]);
        st = cuda_mm_run(c, &L.dx, &q);
    }
    if (st == STOKE_OK && a->grad[0]) {
        cuda_mm_ptrs q = ptrs(a, &L, x, dy, 1.0f, a->grad[0], a->grad[0]);
        q.bias = L.dw.epi == NC_LT_EPI_BGRADB ? db : NULL;
        st = cuda_mm_run(c, &L.dw, &q);
    } else if (st == STOKE_OK && db && !relu) {
        /* a frozen weight and a trained bias: no dW matmul to fuse the gradient into */
        st = cuda_bias_grad(c, a->grad[1], a->dout, d.rows, d.out);
        db = NULL;
    }
    if (st == STOKE_OK && db) {
        st = cuda_bias_grad(c, a->grad[1], db, 1, d.out); /* grad += db: a sum of one row */
    }
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_linear_fwd(void *ctx, const nn_exec_args *a) { return forward(ctx, a, false); }
stoke_status cuda_linear_bwd(void *ctx, const nn_exec_args *a) { return backward(ctx, a, false); }

/* ---- linear -> relu fused: the ReLU, its mask and gradient in the matmuls' epilogues,
 * so the pre-activation and its gradient never exist in memory ---- */

static stoke_status linrelu_ws(void *ctx, const stoke_graph *g, const int *chain, int n,
                               int64_t batch, stoke_precision p, size_t *bytes)
{
    (void)n;
    const nn_node *lin = &g->nodes[chain[0]];
    lin_dims d = dims_of(g, lin, batch);
    stoke_status st = lin_ws(ctx, &d, p, lin->bias, true, bytes);
    return st == STOKE_OK ? st : cuda_layer_fail(st, lin);
}

/* The ReLU's bit mask, a sample's columns of mask_ld bits each. */
static size_t linrelu_saved(void *ctx, const stoke_graph *g, const int *chain, int n)
{
    (void)ctx, (void)n;
    const nn_node *lin = &g->nodes[chain[0]];
    lin_dims d = dims_of(g, lin, 1);
    return (size_t)(d.rows * mask_ld(d.out) / 8);
}

static stoke_status linrelu_fwd(void *ctx, const nn_exec_args *a) { return forward(ctx, a, true); }
static stoke_status linrelu_bwd(void *ctx, const nn_exec_args *a) { return backward(ctx, a, true); }

static const nn_fused_impl linear_relu = {"linear+relu", linrelu_fwd, linrelu_bwd, linrelu_ws,
                                          linrelu_saved};

/* As the CPU backend fuses: a linear layer and the ReLU that alone reads it, at every
 * precision the layer runs in (cuBLASLt's epilogues take all three). */
stoke_status cuda_fuse_linear(void *ctx, const stoke_graph *g, const int *chain, int n,
                              int64_t batch, stoke_precision p, const nn_fused_impl **out)
{
    (void)ctx, (void)batch, (void)p;
    *out = NULL;
    if (n == 2 && g->nodes[chain[0]].op == STOKE_NN_LINEAR &&
        g->nodes[chain[1]].op == STOKE_NN_RELU)
        *out = &linear_relu;
    return STOKE_OK;
}
