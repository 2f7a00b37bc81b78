/* attn.c - multi-head self-attention on the CPU: the projections are the linear
 * kernels (oneDNN matmul, dense.h), each head's q k^T and p v are oneDNN SGEMMs on
 * strided views of the packed qkv buffer, a fused scale/mask/softmax in between,
 * (batch, head) pairs over OpenMP. oneDNN rather than OpenBLAS because it JITs for the
 * ISA cpuid reports (within its ISA cap), where Debian's OpenBLAS 0.3.21 picks kernels
 * from a table of CPU models and falls back to SSE3 on models it does not know. */
#include "nn/cpu/attn.h"

#include <math.h>
#include <string.h>

#include "nn/cpu/dense.h"
#include "nn/cpu/dnnl_util.h"
#include "nn/cpu/eltwise.h"

static stoke_status attention_check(int B, int T, int C, int H)
{
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0) {
        return stoke_fail(STOKE_ERR_ARG, "attention: sizes B=%d T=%d C=%d H=%d must be positive", B,
                          T, C, H);
    }
    if (C % H != 0) {
        return stoke_fail(STOKE_ERR_ARG, "attention: %d heads do not divide the width %d", H, C);
    }
    return STOKE_OK;
}

size_t cpu_attention_saved_floats(int B, int T, int C, int H)
{
    size_t bt = (size_t)B * (size_t)T;
    return bt * 3 * (size_t)C + (size_t)B * (size_t)H * (size_t)T * (size_t)T + bt * (size_t)C;
}

size_t cpu_attention_workspace(int B, int T, int C, int H)
{
    size_t bt = (size_t)B * (size_t)T;
    size_t floats =
        bt * (size_t)C + bt * 3 * (size_t)C + (size_t)B * (size_t)H * (size_t)T * (size_t)T;
    return floats * sizeof(float);
}

stoke_status cpu_attention_prepare(int B, int T, int C, int H, size_t *kernel_bytes)
{
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

/* (b, h) pairs are spread over the compute threads, one per iteration, when there are
 * at least as many as threads: dnnl_sgemm runs on one thread inside a parallel region,
 * so nothing nests, and whole heads split better than oneDNN splits one small product
 * (2 threads, AMD EPYC Zen 4: B 8, T 256, C 256, H 4 forward 23 -> 9 ms). Fewer pairs
 * run one after the other, oneDNN threading each product. */
static int heads_in_parallel(int nbh) { return nbh > 1 && nbh >= cpu_get_threads(); }

/* scores (T, T) -> probabilities in place: row i softmaxes its first len(i) = i + 1
 * entries (causal) or all T, and zeroes the masked rest. */
CPU_SIMD_KERNEL(softmax_rows_masked, (float *att, int T, int causal), (att, T, causal))
{
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
CPU_SIMD_KERNEL(softmax_rows_backward, (float *ds, const float *att, int T), (ds, att, T))
{
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

/* One (b, h): p = softmax(scale q k^T [masked]) into att (T, T), y = p v. Returns
 * oneDNN's status (row-major SGEMMs). */
static dnnl_status_t head_forward(float *att, float *y, const float *q, const float *k,
                                  const float *v, int T, int hs, int ldqkv, int ldy, float scale,
                                  int causal)
{
    dnnl_status_t s = dnnl_sgemm('N', 'T', T, T, hs, scale, q, ldqkv, k, ldqkv, 0.0f, att, T);
    if (s != dnnl_success)
        return s;
    softmax_rows_masked(att, T, causal);
    return dnnl_sgemm('N', 'N', T, hs, T, 1.0f, att, T, v, ldqkv, 0.0f, y, ldy);
}

stoke_status cpu_attention_forward(float *out, float *saved, const float *inp, const float *w_qkv,
                                   const float *b_qkv, const float *w_out, const float *b_out,
                                   int B, int T, int C, int H, int causal)
{
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
    int nbh = B * H, bad = dnnl_success; /* oneDNN's statuses: success 0, failures > 0 */
#pragma omp parallel for schedule(static) reduction(max : bad) if (heads_in_parallel(nbh))
    for (int bh = 0; bh < nbh; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        int s = (int)head_forward(att + (size_t)bh * T * T, y + (size_t)b * T * C + (size_t)h * hs,
                                  q, q + C, q + 2 * C, T, hs, C3, C, scale, causal);
        bad = s > bad ? s : bad;
    }
    if (bad != dnnl_success)
        return dnnl_util_check((dnnl_status_t)bad, "attention head sgemm");
    return cpu_linear_forward(out, y, w_out, b_out, BT, C, C);
}

/* One (b, h), given dy (T, hs) of its output slice: writes dq, dk, dv (T, hs) slices
 * of dqkv and uses ds (T, T) as scratch. Returns oneDNN's status. */
static dnnl_status_t head_backward(float *dq, float *dk, float *dv, float *ds, const float *dy,
                                   const float *att, const float *q, const float *k, const float *v,
                                   int T, int hs, int ldqkv, int ldy, float scale)
{
    /* dp = dy v^T; dv = p^T dy */
    dnnl_status_t s = dnnl_sgemm('N', 'T', T, T, hs, 1.0f, dy, ldy, v, ldqkv, 0.0f, ds, T);
    if (s == dnnl_success)
        s = dnnl_sgemm('T', 'N', T, hs, T, 1.0f, att, T, dy, ldy, 0.0f, dv, ldqkv);
    if (s != dnnl_success)
        return s;
    softmax_rows_backward(ds, att, T);
    /* scores = scale q k^T: dq = scale ds k, dk = scale ds^T q */
    s = dnnl_sgemm('N', 'N', T, hs, T, scale, ds, T, k, ldqkv, 0.0f, dq, ldqkv);
    if (s == dnnl_success)
        s = dnnl_sgemm('T', 'N', T, hs, T, scale, ds, T, q, ldqkv, 0.0f, dk, ldqkv);
    return s;
}

stoke_status cpu_attention_backward(float *dinp, float *dw_qkv, float *db_qkv, float *dw_out,
                                    float *db_out, const float *dout, const float *inp,
                                    const float *w_qkv, const float *w_out, const float *saved,
                                    int B, int T, int C, int H, int causal, void *ws,
                                    size_t ws_size)
{
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

    int nbh = B * H, bad = dnnl_success;
#pragma omp parallel for schedule(static) reduction(max : bad) if (heads_in_parallel(nbh))
    for (int bh = 0; bh < nbh; bh++) {
        int b = bh / H, h = bh % H;
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = qkv + off;
        float *dq = dqkv + off;
        int s =
            (int)head_backward(dq, dq + C, dq + 2 * C, ds + (size_t)bh * T * T,
                               dy + (size_t)b * T * C + (size_t)h * hs, att + (size_t)bh * T * T, q,
                               q + C, q + 2 * C, T, hs, C3, C, scale);
        bad = s > bad ? s : bad;
    }
    /* The sizes were checked, so only oneDNN running out of memory for its packing
     * buffers can fail here, after dw_out and db_out were updated. */
    if (bad != dnnl_success)
        return dnnl_util_check((dnnl_status_t)bad, "attention head sgemm");

    /* input projection: dinp += dqkv w_qkv (unless NULL), dw_qkv += dqkv^T inp,
     * db_qkv += colsum(dqkv) */
    return cpu_linear_backward(dinp, dw_qkv, db_qkv, dqkv, inp, w_qkv, BT, C, C3);
}
