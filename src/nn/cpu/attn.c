/* attn.c - multi-head self-attention on the CPU: the projections are the linear
 * kernels (oneDNN matmul, dense.h), each head's q k^T and p v are OpenBLAS SGEMMs on
 * strided views of the packed qkv buffer, a fused scale/mask/softmax in between,
 * (batch, head) pairs over OpenMP. */
#include "nn/cpu/attn.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"

/* OpenBLAS (the pthread build Debian ships) runs a GEMM on one thread when
 * m*n*k <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4). Per-head products up to that size
 * are spread over OpenMP threads, one (b, h) each; bigger ones run one after the
 * other and OpenBLAS threads each, so the two thread pools never stack up. */
#define HEAD_GEMM_SERIAL_MAX 262144.0

static stoke_status attention_check(int B, int T, int C, int H) {
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0) {
        return stoke_fail(STOKE_ERR_ARG, "attention: sizes B=%d T=%d C=%d H=%d must be positive",
                          B, T, C, H);
    }
    if (C % H != 0) {
        return stoke_fail(STOKE_ERR_ARG, "attention: %d heads do not divide the width %d", H,
                          C);
    }
    return STOKE_OK;
}

size_t cpu_attention_saved_floats(int B, int T, int C, int H) {
    size_t bt = (size_t)B * (size_t)T;
    return bt * 3 * (size_t)C + (size_t)B * (size_t)H * (size_t)T * (size_t)T +
           bt * (size_t)C;
}

size_t cpu_attention_workspace(int B, int T, int C, int H) {
    size_t bt = (size_t)B * (size_t)T;
    size_t floats = bt * (size_t)C + bt * 3 * (size_t)C +
                    (size_t)B * (size_t)H * (size_t)T * (size_t)T;
    return floats * sizeof(float);
}

stoke_status cpu_attention_prepare(int B, int T, int C, int H, size_t *kernel_bytes) {
    stoke_status st = attention_check(B, T, C, H);
    size_t in_bytes = 0, out_bytes = 0;
    if (st == STOKE_OK) {
        st = cpu_linear_workspace(B * T, C, 3 * C, 1, 0, &in_bytes);
    }
    if (st == STOKE_OK) {
        st = cpu_linear_workspace(B * T, C, C, 1, 0, &out_bytes);
    }
    if (st == STOKE_OK && kernel_bytes) {
        *kernel_bytes = in_bytes + out_bytes;
    }
    return st;
}

static int heads_in_parallel(int T, int hs) {
    return (double)T * (double)T * (double)hs <= HEAD_GEMM_SERIAL_MAX;
}

/* scores (T, T) -> probabilities in place: row i softmaxes its first len(i) = i + 1
 * entries (causal) or all T, and zeroes the masked rest. */
CPU_SIMD_KERNEL(softmax_rows_masked, (float *att, int T, int causal), (att, T, causal)) {
    for (int i = 0; i < T; i++) {
        float *row = att + (size_t)i * T;
        int len = causal ? i + 1 : T; /* causal: keys j <= i */
        cpu_softmax_row(row, row, len);
        for (int j = len; j < T; j++)
            row[j] = 0.0f;
    }
}

/* dp (T, T) -> ds = p (dp - sum_j p dp) in place, per row. Masked entries have
 * p = 0, so they get no gradient. */
CPU_SIMD_KERNEL(softmax_rows_backward, (float *ds, const float *att, int T), (ds, att, T)) {
    for (int i = 0; i < T; i++) {
        float *row = ds + (size_t)i * T;
        const float *p = att + (size_t)i * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < T; j++) {
            dot += p[j] * row[j];
        }
#pragma omp simd
        for (int j = 0; j < T; j++) {
            row[j] = p[j] * (row[j] - dot);
        }
    }
}

/* One (b, h): p = softmax(scale q k^T [masked]) into att (T, T), y = p v. */
static void head_forward(float *att, float *y, const float *q, const float *k,
                         const float *v, int T, int hs, int ldqkv, int ldy, float scale,
                         int causal) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ldqkv, k, ldqkv,
                0.0f, att, T);
    softmax_rows_masked(att, T, causal);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, att, T, v, ldqkv,
                0.0f, y, ldy);
}

stoke_status cpu_attention_forward(float *out, float *saved, const float *inp,
                                   const float *w_qkv, const float *b_qkv,
                                   const float *w_out, const float *b_out, int B, int T,
                                   int C, int H, int causal) {
    /* inp (B, T, C) -> out (B, T, C); saved = qkv (B, T, 3C) | att (B, H, T, T) |
     * y (B, T, C) */
    cpu_threads_apply();
    stoke_status st = cpu_attention_prepare(B, T, C, H, NULL);
    if (st != STOKE_OK) {
        return st;
    }
    int hs = C / H, C3 = 3 * C, BT = B * T;
    float *qkv = saved;
    float *att = qkv + (size_t)BT * C3;
    float *y = att + (size_t)B * H * T * T;
    float scale = 1.0f / sqrtf((float)hs);

    st = cpu_linear_forward(qkv, inp, w_qkv, b_qkv, BT, C, C3);
    if (st != STOKE_OK) {
        return st;
    }
    int nbh = B * H;
#pragma omp parallel for schedule(static) if (heads_in_parallel(T, hs) && nbh > 1)
    for (int bh = 0; bh < nbh; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        head_forward(att + (size_t)bh * T * T, y + (size_t)b * T * C + (size_t)h * hs, q,
                     q + C, q + 2 * C, T, hs, C3, C, scale, causal);
    }
    return cpu_linear_forward(out, y, w_out, b_out, BT, C, C);
}

/* One (b, h), given dy (T, hs) of its output slice: writes dq, dk, dv (T, hs) slices
 * of dqkv and uses ds (T, T) as scratch. */
static void head_backward(float *dq, float *dk, float *dv, float *ds, const float *dy,
                          const float *att, const float *q, const float *k, const float *v,
                          int T, int hs, int ldqkv, int ldy, float scale) {
    /* dp = dy v^T; dv = p^T dy */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, ldy, v, ldqkv,
                0.0f, ds, T);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, att, T, dy, ldy,
                0.0f, dv, ldqkv);
    softmax_rows_backward(ds, att, T);
    /* scores = scale q k^T: dq = scale ds k, dk = scale ds^T q */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, ds, T, k, ldqkv,
                0.0f, dq, ldqkv);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, ds, T, q, ldqkv,
                0.0f, dk, ldqkv);
}

stoke_status cpu_attention_backward(float *dinp, float *dw_qkv, float *db_qkv,
                                    float *dw_out, float *db_out, const float *dout,
                                    const float *inp, const float *w_qkv,
                                    const float *w_out, const float *saved, int B, int T,
                                    int C, int H, int causal, void *ws, size_t ws_size) {
    /* dout (B, T, C) -> dinp (B, T, C) +=; dw_qkv (3C, C), db_qkv (3C), dw_out (C, C),
     * db_out (C) += */
    (void)causal; /* the mask is already in the saved probabilities (zeros) */
    cpu_threads_apply();
    stoke_status st = cpu_attention_prepare(B, T, C, H, NULL);
    if (st != STOKE_OK) {
        return st;
    }
    size_t need = cpu_attention_workspace(B, T, C, H);
    if (!ws || ws_size < need) {
        return stoke_fail(STOKE_ERR_ARG, "attention backward: workspace of %zu bytes, needs %zu",
                          ws ? ws_size : (size_t)0, need);
    }
    int hs = C / H, C3 = 3 * C, BT = B * T;
    const float *qkv = saved;
    const float *att = qkv + (size_t)BT * C3;
    const float *y = att + (size_t)B * H * T * T;
    float *dy = ws;
    float *dqkv = dy + (size_t)BT * C;
    float *ds = dqkv + (size_t)BT * C3;
    float scale = 1.0f / sqrtf((float)hs);

    /* output projection: dy = dout w_out, dw_out += dout^T y, db_out += colsum(dout).
     * Both shapes were prepared above, so the linear kernels cannot fail now and no
     * gradient is left half-updated. */
    memset(dy, 0, (size_t)BT * C * sizeof *dy);
    cpu_linear_backward(dy, dw_out, db_out, dout, y, w_out, BT, C, C);

    int nbh = B * H;
#pragma omp parallel for schedule(static) if (heads_in_parallel(T, hs) && nbh > 1)
    for (int bh = 0; bh < nbh; bh++) {
        int b = bh / H, h = bh % H;
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        head_backward(dq, dq + C, dq + 2 * C, ds + (size_t)bh * T * T,
                      dy + (size_t)b * T * C + (size_t)h * hs, att + (size_t)bh * T * T, q,
                      q + C, q + 2 * C, T, hs, C3, C, scale);
    }

    /* input projection: dinp += dqkv w_qkv (unless NULL), dw_qkv += dqkv^T inp,
     * db_qkv += colsum(dqkv) */
    return cpu_linear_backward(dinp, dw_qkv, db_qkv, dqkv, inp, w_qkv, BT, C, C3);
}
