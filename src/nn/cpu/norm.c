/* norm.c - batch norm and layer norm on the CPU: hand-written single-pass-per-channel
 * kernels (statistics, normalization and affine fused), with parameter gradients
 * reduced in a fixed order so training is bit-reproducible across thread counts. */
#include "nn/cpu/norm.h"

#include <math.h>
#include <stddef.h>

#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"

#define PAR_MIN ((size_t)1 << 14)

/* Sums run in fp32 vector lanes over pieces of at most PIECE elements and add the
 * pieces in double: fp32 lanes keep the loops full-width (a double accumulator
 * halves them and adds conversions), and short pieces bound the fp32 rounding. */
#define PIECE 512

/* sum x[i] and sum (x[i] - m)^2 over [0, n), added to *sum and *sq */
CPU_SIMD_KERNEL(sum_and_sq, (const float *x, int n, float m, double *sum, double *sq),
                (x, n, m, sum, sq))
{
    for (int i0 = 0; i0 < n; i0 += PIECE) {
        int i1 = i0 + PIECE < n ? i0 + PIECE : n;
        float s = 0.0f, q = 0.0f;
#pragma omp simd reduction(+ : s, q)
        for (int i = i0; i < i1; i++) {
            float d = x[i] - m;
            s += x[i];
            q += d * d;
        }
        *sum += s;
        *sq += q;
    }
}

/* sum dy[i], sum dy[i] (x[i] - m) r over [0, n) */
CPU_SIMD_KERNEL(sum_dy_dyx,
                (const float *dy, const float *x, int n, float m, float r, double *sdy,
                 double *sdyx),
                (dy, x, n, m, r, sdy, sdyx))
{
    for (int i0 = 0; i0 < n; i0 += PIECE) {
        int i1 = i0 + PIECE < n ? i0 + PIECE : n;
        float a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
        for (int i = i0; i < i1; i++) {
            a += dy[i];
            b += dy[i] * ((x[i] - m) * r);
        }
        *sdy += a;
        *sdyx += b;
    }
}

/* ---- batch norm over (B, C), S = 1 ----
 * A channel is a column here, so the per-channel loops of the general path would
 * stride through memory one element at a time. Instead threads take blocks of 64
 * columns and walk the rows with the columns in vector lanes; each column still
 * sums its rows in order (fp32 over pieces of PIECE rows, pieces in double). */

#define COLS 64

/* Batch statistics of the columns [0, w) (row stride C): fp32 mean mf, and the
 * exact-mean-corrected sum of squared deviations ss, as the general path. */
CPU_SIMD_KERNEL(bn1d_stats,
                (const float *inp, int B, int C, int w, float *mf, double *m, double *ss),
                (inp, B, C, w, mf, m, ss))
{
    double s0[COLS] = {0}, s1[COLS] = {0}, q[COLS] = {0};
    for (int b0 = 0; b0 < B; b0 += PIECE) {
        int b1 = b0 + PIECE < B ? b0 + PIECE : B;
        float acc[COLS] = {0};
        for (int b = b0; b < b1; b++) {
            const float *x = inp + (size_t)b * C;
#pragma omp simd
            for (int c = 0; c < w; c++) {
                acc[c] += x[c];
            }
        }
        for (int c = 0; c < w; c++) {
            s0[c] += acc[c];
        }
    }
    for (int c = 0; c < w; c++) {
        mf[c] = (float)(s0[c] / (double)B);
    }
    for (int b0 = 0; b0 < B; b0 += PIECE) {
        int b1 = b0 + PIECE < B ? b0 + PIECE : B;
        float a1[COLS] = {0}, a2[COLS] = {0};
        for (int b = b0; b < b1; b++) {
            const float *x = inp + (size_t)b * C;
#pragma omp simd
            for (int c = 0; c < w; c++) {
                float d = x[c] - mf[c];
                a1[c] += x[c];
                a2[c] += d * d;
            }
        }
        for (int c = 0; c < w; c++) {
            s1[c] += a1[c];
            q[c] += a2[c];
        }
    }
    for (int c = 0; c < w; c++) {
        m[c] = s1[c] / (double)B;
        ss[c] = q[c] - (double)B * (m[c] - mf[c]) * (m[c] - mf[c]);
    }
}

/* y = x a + sh per column, over B rows */
CPU_SIMD_KERNEL(bn1d_apply,
                (float *out, const float *inp, int B, int C, int w, const float *a,
                 const float *sh),
                (out, inp, B, C, w, a, sh))
{
    for (int b = 0; b < B; b++) {
        const float *x = inp + (size_t)b * C;
        float *y = out + (size_t)b * C;
#pragma omp simd
        for (int c = 0; c < w; c++) {
            y[c] = x[c] * a[c] + sh[c];
        }
    }
}

/* sum dy and sum dy xhat per column */
CPU_SIMD_KERNEL(bn1d_grad_sums,
                (const float *dout, const float *inp, int B, int C, int w, const float *mean,
                 const float *rstd, double *sdy, double *sdyx),
                (dout, inp, B, C, w, mean, rstd, sdy, sdyx))
{
    for (int c = 0; c < w; c++) {
        sdy[c] = 0.0;
        sdyx[c] = 0.0;
    }
    for (int b0 = 0; b0 < B; b0 += PIECE) {
        int b1 = b0 + PIECE < B ? b0 + PIECE : B;
        float a1[COLS] = {0}, a2[COLS] = {0};
        for (int b = b0; b < b1; b++) {
            const float *x = inp + (size_t)b * C;
            const float *dy = dout + (size_t)b * C;
#pragma omp simd
            for (int c = 0; c < w; c++) {
                a1[c] += dy[c];
                a2[c] += dy[c] * ((x[c] - mean[c]) * rstd[c]);
            }
        }
        for (int c = 0; c < w; c++) {
            sdy[c] += a1[c];
            sdyx[c] += a2[c];
        }
    }
}

/* dx += k (dy - mdy - xhat mdyx) per column (eval: mdy = mdyx = 0) */
CPU_SIMD_KERNEL(bn1d_dinp,
                (float *dinp, const float *dout, const float *inp, int B, int C, int w,
                 const float *mean, const float *rstd, const float *k, const float *mdy,
                 const float *mdyx),
                (dinp, dout, inp, B, C, w, mean, rstd, k, mdy, mdyx))
{
    for (int b = 0; b < B; b++) {
        const float *x = inp + (size_t)b * C;
        const float *dy = dout + (size_t)b * C;
        float *dx = dinp + (size_t)b * C;
#pragma omp simd
        for (int c = 0; c < w; c++) {
            float xhat = (x[c] - mean[c]) * rstd[c];
            dx[c] += k[c] * (dy[c] - mdy[c] - xhat * mdyx[c]);
        }
    }
}

static void batchnorm1d_forward(float *out, float *save_mean, float *save_rstd, float *running_mean,
                                float *running_var, const float *inp, const float *weight,
                                const float *bias, int B, int C, int train, float momentum,
                                float eps)
{
    int nblk = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)B * C >= PAR_MIN && nblk > 1)
    for (int k = 0; k < nblk; k++) {
        int c0 = k * COLS, w = C - c0 < COLS ? C - c0 : COLS;
        float mf[COLS], a[COLS], sh[COLS];
        double m[COLS], ss[COLS];
        if (train) {
            bn1d_stats(inp + c0, B, C, w, mf, m, ss);
        }
        for (int c = 0; c < w; c++) {
            int ch = c0 + c;
            float mean, rstd;
            if (train) {
                mean = (float)m[c];
                rstd = (float)(1.0 / sqrt(ss[c] / (double)B + (double)eps));
                if (running_mean && running_var) {
                    double unbiased = ss[c] / (double)(B - 1);
                    running_mean[ch] =
                        (float)((1.0 - momentum) * running_mean[ch] + momentum * m[c]);
                    running_var[ch] =
                        (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
                }
            } else {
                mean = running_mean[ch];
                rstd = (float)(1.0 / sqrt((double)running_var[ch] + (double)eps));
            }
            save_mean[ch] = mean;
            save_rstd[ch] = rstd;
            a[c] = (weight ? weight[ch] : 1.0f) * rstd;
            sh[c] = (bias ? bias[ch] : 0.0f) - mean * a[c];
        }
        bn1d_apply(out + c0, inp + c0, B, C, w, a, sh);
    }
}

static void batchnorm1d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *save_mean,
                                 const float *save_rstd, int B, int C, int train)
{
    int nblk = (C + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if ((size_t)B * C >= PAR_MIN && nblk > 1)
    for (int k = 0; k < nblk; k++) {
        int c0 = k * COLS, w = C - c0 < COLS ? C - c0 : COLS;
        double sdy[COLS], sdyx[COLS];
        float kk[COLS], mdy[COLS], mdyx[COLS];
        bn1d_grad_sums(dout + c0, inp + c0, B, C, w, save_mean + c0, save_rstd + c0, sdy, sdyx);
        for (int c = 0; c < w; c++) {
            int ch = c0 + c;
            if (dweight) {
                dweight[ch] += (float)sdyx[c];
            }
            if (dbias) {
                dbias[ch] += (float)sdy[c];
            }
            kk[c] = (weight ? weight[ch] : 1.0f) * save_rstd[ch];
            mdy[c] = train ? (float)(sdy[c] / (double)B) : 0.0f;
            mdyx[c] = train ? (float)(sdyx[c] / (double)B) : 0.0f;
        }
        if (dinp) {
            bn1d_dinp(dinp + c0, dout + c0, inp + c0, B, C, w, save_mean + c0, save_rstd + c0, kk,
                      mdy, mdyx);
        }
    }
}

stoke_status cpu_batchnorm_forward(float *out, float *save_mean, float *save_rstd,
                                   float *running_mean, float *running_var, const float *inp,
                                   const float *weight, const float *bias, int B, int C, int S,
                                   int train, float momentum, float eps)
{
    /* inp (B, C, S) -> out (B, C, S); save_mean, save_rstd (C,) */
    cpu_threads_apply();
    size_t count = (size_t)B * (size_t)S;
    if (train && count < 2) {
        return stoke_fail(STOKE_ERR_ARG,
                          "batchnorm: training needs more than 1 value per channel "
                          "(batch %d x %d positions)",
                          B, S);
    }
    if (!train && (!running_mean || !running_var)) {
        return stoke_fail(STOKE_ERR_ARG, "batchnorm: eval mode needs running statistics");
    }
    if (S == 1) {
        batchnorm1d_forward(out, save_mean, save_rstd, running_mean, running_var, inp, weight, bias,
                            B, C, train, momentum, eps);
        return STOKE_OK;
    }
    size_t total = count * (size_t)C;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int c = 0; c < C; c++) {
        float mean, rstd;
        if (train) {
            /* Two passes (a mean, then squared deviations about it) rather than
             * E[x^2] - m^2, which cancels badly when |mean| >> std. */
            double sum = 0.0, ss = 0.0, sq0 = 0.0;
            for (int b = 0; b < B; b++) {
                sum_and_sq(inp + ((size_t)b * C + c) * S, S, 0.0f, &sum, &sq0);
            }
            float mf = (float)(sum / (double)count);
            double s1 = 0.0;
            for (int b = 0; b < B; b++) {
                sum_and_sq(inp + ((size_t)b * C + c) * S, S, mf, &s1, &ss);
            }
            /* The deviations were taken about the fp32 mean mf; sum (x - mf)^2 =
             * sum (x - m)^2 + n (m - mf)^2 removes that offset. */
            double m = s1 / (double)count;
            ss -= (double)count * (m - mf) * (m - mf);
            double var = ss / (double)count;
            mean = (float)m;
            rstd = (float)(1.0 / sqrt(var + (double)eps));
            if (running_mean && running_var) {
                double unbiased = ss / (double)(count - 1);
                running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * m);
                running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
            }
        } else {
            mean = running_mean[c];
            rstd = (float)(1.0 / sqrt((double)running_var[c] + (double)eps));
        }
        save_mean[c] = mean;
        save_rstd[c] = rstd;
        /* y = x * a + b' folds normalization and affine into one multiply-add. */
        float w = weight ? weight[c] : 1.0f;
        float a = w * rstd;
        float sh = (bias ? bias[c] : 0.0f) - mean * a;
        for (int b = 0; b < B; b++) {
            const float *x = inp + ((size_t)b * C + c) * S;
            float *y = out + ((size_t)b * C + c) * S;
#pragma omp simd
            for (int s = 0; s < S; s++) {
                y[s] = x[s] * a + sh;
            }
        }
    }
    return STOKE_OK;
}

void cpu_batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *save_mean,
                            const float *save_rstd, int B, int C, int S, int train)
{
    /* dout, inp (B, C, S) -> dinp (B, C, S) +=; dweight, dbias (C,) += */
    cpu_threads_apply();
    if (S == 1) {
        batchnorm1d_backward(dinp, dweight, dbias, dout, inp, weight, save_mean, save_rstd, B, C,
                             train);
        return;
    }
    size_t count = (size_t)B * (size_t)S;
    size_t total = count * (size_t)C;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int c = 0; c < C; c++) {
        float mean = save_mean[c], rstd = save_rstd[c];
        double sdy = 0.0, sdyx = 0.0; /* sum(dout), sum(dout * xhat) */
        for (int b = 0; b < B; b++) {
            size_t o = ((size_t)b * C + c) * S;
            sum_dy_dyx(dout + o, inp + o, S, mean, rstd, &sdy, &sdyx);
        }
        if (dweight) {
            dweight[c] += (float)sdyx;
        }
        if (dbias) {
            dbias[c] += (float)sdy;
        }
        if (!dinp) {
            continue;
        }
        float w = weight ? weight[c] : 1.0f;
        float k = w * rstd;
        if (train) {
            /* dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)) */
            float mdy = (float)(sdy / (double)count);
            float mdyx = (float)(sdyx / (double)count);
            for (int b = 0; b < B; b++) {
                const float *x = inp + ((size_t)b * C + c) * S;
                const float *dy = dout + ((size_t)b * C + c) * S;
                float *dx = dinp + ((size_t)b * C + c) * S;
#pragma omp simd
                for (int s = 0; s < S; s++) {
                    float xhat = (x[s] - mean) * rstd;
                    dx[s] += k * (dy[s] - mdy - xhat * mdyx);
                }
            }
        } else {
            for (int b = 0; b < B; b++) {
                const float *dy = dout + ((size_t)b * C + c) * S;
                float *dx = dinp + ((size_t)b * C + c) * S;
#pragma omp simd
                for (int s = 0; s < S; s++) {
                    dx[s] += k * dy[s];
                }
            }
        }
    }
}

/* Rows per parallel work item: about 4096 elements. */
static int rows_per_block(int C) { return 4096 / C + 1; }

CPU_SIMD_KERNEL(layernorm_rows,
                (float *out, float *save_mean, float *save_rstd, const float *inp,
                 const float *weight, const float *bias, int rows, int C, float eps),
                (out, save_mean, save_rstd, inp, weight, bias, rows, C, eps))
{
    for (int n = 0; n < rows; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++) {
            sum += x[c];
        }
        float m = sum / (float)C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            ss += d * d;
        }
        float rstd = 1.0f / sqrtf(ss / (float)C + eps);
        save_mean[n] = m;
        save_rstd[n] = rstd;
        if (weight && bias) {
#pragma omp simd
            for (int c = 0; c < C; c++) {
                y[c] = (x[c] - m) * rstd * weight[c] + bias[c];
            }
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) {
                y[c] = (x[c] - m) * rstd * (weight ? weight[c] : 1.0f) + (bias ? bias[c] : 0.0f);
            }
        }
    }
}

void cpu_layernorm_forward(float *out, float *save_mean, float *save_rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps)
{
    /* inp (N, C) -> out (N, C); save_mean, save_rstd (N,) */
    cpu_threads_apply();
    int rows = rows_per_block(C), nblk = (N + rows - 1) / rows;
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= PAR_MIN && nblk > 1)
    for (int k = 0; k < nblk; k++) {
        int r0 = k * rows, m = N - r0 < rows ? N - r0 : rows;
        size_t o = (size_t)r0 * C;
        layernorm_rows(out + o, save_mean + r0, save_rstd + r0, inp + o, weight, bias, m, C, eps);
    }
}

CPU_SIMD_KERNEL(layernorm_rows_backward,
                (float *dinp, const float *dout, const float *inp, const float *weight,
                 const float *save_mean, const float *save_rstd, int rows, int C),
                (dinp, dout, inp, weight, save_mean, save_rstd, rows, C))
{
    for (int n = 0; n < rows; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = save_mean[n], rstd = save_rstd[n];
        float sg = 0.0f, sgx = 0.0f; /* sum(g), sum(g xhat) with g = dout * weight */
#pragma omp simd reduction(+ : sg, sgx)
        for (int c = 0; c < C; c++) {
            float g = dy[c] * (weight ? weight[c] : 1.0f);
            sg += g;
            sgx += g * ((x[c] - m) * rstd);
        }
        float mg = sg / (float)C, mgx = sgx / (float)C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float g = dy[c] * (weight ? weight[c] : 1.0f);
            float xhat = (x[c] - m) * rstd;
            dx[c] += rstd * (g - mg - xhat * mgx);
        }
    }
}

/* dw[0, w) = sum_n dout[n] xhat[n], db[0, w) = sum_n dout[n] over the columns
 * [0, w) of the row stride C, rows in order. */
CPU_SIMD_KERNEL(layernorm_param_block,
                (float *dw, float *db, const float *dout, const float *inp, const float *save_mean,
                 const float *save_rstd, int N, int C, int w),
                (dw, db, dout, inp, save_mean, save_rstd, N, C, w))
{
    for (int c = 0; c < w; c++) {
        dw[c] = 0.0f;
        db[c] = 0.0f;
    }
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float m = save_mean[n], rstd = save_rstd[n];
#pragma omp simd
        for (int c = 0; c < w; c++) {
            dw[c] += dy[c] * ((x[c] - m) * rstd);
            db[c] += dy[c];
        }
    }
}

void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *save_mean,
                            const float *save_rstd, int N, int C)
{
    /* dout, inp (N, C) -> dinp (N, C) +=; dweight, dbias (C,) += */
    cpu_threads_apply();
    size_t total = (size_t)N * (size_t)C;
    int rows = rows_per_block(C), nrb = dinp ? (N + rows - 1) / rows : 0;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN && nrb > 1)
    for (int k = 0; k < nrb; k++) {
        int r0 = k * rows, m = N - r0 < rows ? N - r0 : rows;
        size_t o = (size_t)r0 * C;
        layernorm_rows_backward(dinp + o, dout + o, inp + o, weight, save_mean + r0, save_rstd + r0,
                                m, C);
    }
    if (!dweight && !dbias) {
        return;
    }
    /* Parameter gradients: column blocks of 64 per thread, rows summed in order, so
     * the sums are the same bits whatever the thread count. */
    const int blk = 64;
    int nblk = (C + blk - 1) / blk;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN && nblk > 1)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * blk;
        int w = c0 + blk < C ? blk : C - c0;
        float dw[64], db[64];
        layernorm_param_block(dw, db, dout + c0, inp + c0, save_mean, save_rstd, N, C, w);
        for (int c = 0; c < w; c++) {
            if (dweight) {
                dweight[c0 + c] += dw[c];
            }
            if (dbias) {
                dbias[c0 + c] += db[c];
            }
        }
    }
}
