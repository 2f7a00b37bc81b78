/* norm.c - batch norm and layer norm on the CPU: hand-written single-pass-per-channel
 * kernels (statistics, normalization and affine fused), with parameter gradients
 * reduced in a fixed order so training is bit-reproducible across thread counts. */
#include "nn/cpu/norm.h"

#include <math.h>
#include <stddef.h>

#include "nn/cpu/eltwise.h"

#define PAR_MIN ((size_t)1 << 14)

/* Sums run in fp32 vector lanes over pieces of at most PIECE elements and add the
 * pieces in double: fp32 lanes keep the loops full-width (a double accumulator
 * halves them and adds conversions), and short pieces bound the fp32 rounding. */
#define PIECE 512

/* sum x[i] and sum (x[i] - m)^2 over [0, n), added to *sum and *sq */
CPU_CLONES static void sum_and_sq(const float *x, int n, float m, double *sum,
                                  double *sq) {
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
CPU_CLONES static void sum_dy_dyx(const float *dy, const float *x, int n, float m,
                                  float r, double *sdy, double *sdyx) {
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

stoke_status cpu_batchnorm_forward(float *out, float *save_mean, float *save_rstd,
                                   float *running_mean, float *running_var,
                                   const float *inp, const float *weight, const float *bias,
                                   int B, int C, int S, int train, float momentum,
                                   float eps) {
    /* inp (B, C, S) -> out (B, C, S); save_mean, save_rstd (C,) */
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
                running_var[c] =
                    (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
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
                            const float *save_rstd, int B, int C, int S, int train) {
    /* dout, inp (B, C, S) -> dinp (B, C, S) +=; dweight, dbias (C,) += */
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
static int rows_per_block(int C) {
    return 4096 / C + 1;
}

CPU_CLONES static void layernorm_rows(float *out, float *save_mean, float *save_rstd,
                                      const float *inp, const float *weight,
                                      const float *bias, int rows, int C, float eps) {
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

void cpu_layernorm_forward(float *out, float *save_mean, float *save_rstd,
                           const float *inp, const float *weight, const float *bias, int N,
                           int C, float eps) {
    /* inp (N, C) -> out (N, C); save_mean, save_rstd (N,) */
    int rows = rows_per_block(C), nblk = (N + rows - 1) / rows;
#pragma omp parallel for schedule(static) if ((size_t)N * (size_t)C >= PAR_MIN && nblk > 1)
    for (int k = 0; k < nblk; k++) {
        int r0 = k * rows, m = N - r0 < rows ? N - r0 : rows;
        size_t o = (size_t)r0 * C;
        layernorm_rows(out + o, save_mean + r0, save_rstd + r0, inp + o, weight, bias, m, C,
                       eps);
    }
}

CPU_CLONES static void layernorm_rows_backward(float *dinp, const float *dout,
                                               const float *inp, const float *weight,
                                               const float *save_mean,
                                               const float *save_rstd, int rows, int C) {
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
CPU_CLONES static void layernorm_param_block(float *dw, float *db, const float *dout,
                                             const float *inp, const float *save_mean,
                                             const float *save_rstd, int N, int C, int w) {
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
                            const float *save_rstd, int N, int C) {
    /* dout, inp (N, C) -> dinp (N, C) +=; dweight, dbias (C,) += */
    size_t total = (size_t)N * (size_t)C;
    int rows = rows_per_block(C), nrb = dinp ? (N + rows - 1) / rows : 0;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN && nrb > 1)
    for (int k = 0; k < nrb; k++) {
        int r0 = k * rows, m = N - r0 < rows ? N - r0 : rows;
        size_t o = (size_t)r0 * C;
        layernorm_rows_backward(dinp + o, dout + o, inp + o, weight, save_mean + r0,
                                save_rstd + r0, m, C);
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
