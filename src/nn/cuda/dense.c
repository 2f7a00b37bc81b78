/* dense.c - the CUDA backend's linear layer: cuBLAS GEMMs (fp32 with TF32 where the
 * device has it; bf16/fp16 operands with fp32 accumulation) and the bias kernels. */
#include <limits.h>

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

stoke_status cuda_linear_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                            stoke_precision p, size_t *bytes)
{
    (void)ctx;
    lin_dims d = dims_of(g, n, batch);
    /* low precision: the input and the output gradient rounded, side by side */
    *bytes = p == STOKE_PREC_FP32 ? 0 : (size_t)(d.rows * (d.in + d.out)) * sizeof(uint16_t);
    return STOKE_OK;
}

/* Row-major Y (rows x out) = X (rows x in) W^T is column-major Y^T = W^T' X^T: cuBLAS
 * sees W (in x out, column-major) transposed and X (in x rows) as is. */
stoke_status cuda_linear_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    lin_dims d = dims_of(a->graph, a->node, a->batch);
    const void *x = a->in[0], *w = a->param[0];
    int type = NC_R_32F;
    stoke_status st = STOKE_OK;
    if (a->param_lp[0]) {
        uint16_t *xl = a->ws;
        st = cuda_to_lowp(c, a->precision, a->in[0], xl, d.rows * d.in);
        x = xl;
        w = a->param_lp[0];
        type = lowp_type(a->precision);
    }
    if (st == STOKE_OK)
        st = cuda_gemm(c, NC_OP_T, NC_OP_N, d.out, d.rows, d.in, w, d.in, x, d.in, 0.0f, a->out,
                       d.out, type);
    if (st == STOKE_OK && a->node->nparam > 1) {
        nk_bias_args b = {a->out, a->param[1], d.out};
        st = CUDA_RUN(c, bias_add, d.rows * d.out, &b);
    }
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* dX (rows x in) += dY W is column-major dX^T += W' dY^T; dW (out x in) += dY^T X is
 * column-major dW^T += X^T dY^T'. */
stoke_status cuda_linear_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    lin_dims d = dims_of(a->graph, a->node, a->batch);
    const void *x = a->in[0], *w = a->param[0], *dy = a->dout;
    int type = NC_R_32F;
    stoke_status st = STOKE_OK;
    if (a->param_lp[0]) {
        uint16_t *xl = a->ws, *dyl = xl + d.rows * d.in;
        st = cuda_to_lowp(c, a->precision, a->in[0], xl, d.rows * d.in);
        if (st == STOKE_OK)
            st = cuda_to_lowp(c, a->precision, a->dout, dyl, d.rows * d.out);
        x = xl;
        dy = dyl;
        w = a->param_lp[0];
        type = lowp_type(a->precision);
    }
    if (st == STOKE_OK && a->din[0])
        st = cuda_gemm(c, NC_OP_N, NC_OP_N, d.in, d.rows, d.out, w, d.in, dy, d.out, 1.0f,
                       a->din[0], d.in, type);
    if (st == STOKE_OK && a->grad[0])
        st = cuda_gemm(c, NC_OP_N, NC_OP_T, d.in, d.out, d.rows, x, d.in, dy, d.out, 1.0f,
                       a->grad[0], d.in, type);
    if (st == STOKE_OK && a->node->nparam > 1 && a->grad[1]) {
        nk_bias_grad_args b = {a->grad[1], a->dout, d.rows, d.out};
        st = CUDA_RUN(c, bias_grad, d.out, &b);
    }
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
