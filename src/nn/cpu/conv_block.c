/* conv_block.c - conv2d -> ReLU -> max-pool as one kernel (see conv.h). oneDNN has
 * no such fusion (its pooling cannot be a convolution post-op), and run apart the
 * three ops move the unpooled activation through memory about ten times per step
 * (write, ReLU read+write, pool read, reorders, then in backward zeroing, pool and
 * ReLU gradients, reorder): on the reference CNN that traffic cost more than its
 * convolutions' arithmetic. Here it is written once and read once, in cache-sized
 * pieces, and its gradient is written once, directly in the layout the backward
 * primitives read. */
#include <stdlib.h>
#include <string.h>

#include "core/precision.h"
#include "nn/cpu/conv_impl.h"
#include "nn/cpu/eltwise.h"

#define CHUNK 16 /* channels handled together: one AVX-512 vector of fp32 */
#define NO_GRAD 0xff

static stoke_status check_block(const cpu_conv2d_shape *s, int K, int prec) {
    if (K < 1 || K > 15)
        return stoke_fail(STOKE_ERR_ARG, "conv block: pool kernel %d outside 1..15", K);
    if (prec != CPU_CONV_FP32 && prec != CPU_CONV_MIXED_BF16)
        return stoke_fail(STOKE_ERR_ARG, "conv block: precision %d is neither fp32 nor mixed",
                          prec);
    int OH, OW;
    stoke_status st = cpu_conv2d_out_size(s, &OH, &OW);
    if (st == STOKE_OK && (OH < K || OW < K))
        st = stoke_fail(STOKE_ERR_ARG, "conv block: pool kernel %d larger than the %dx%d output",
                        K, OH, OW);
    return st;
}

/* The block runs over the batch in chunks of samples whose convolution output stays
 * in the cache between the convolution and the pooling (and the gradient between the
 * scatter and the backward convolutions): at the reference CNN's batch 128 the whole
 * output is 12.8 MB, and reading it back from memory cost as much as the pooling's
 * arithmetic many times over. */
static int chunk_samples(const cpu_conv2d_shape *s) {
    int OH, OW;
    if (cpu_conv2d_out_size(s, &OH, &OW) != STOKE_OK)
        return s->B;
    /* 1 MB: of 256 KB to 100 MB, measured best with bench/kernels_bench.c on 1 and 2
     * threads (the reference CNN's blocks, fp32 and bf16) */
    size_t per = (size_t)s->OC * OH * OW * sizeof(float);
    size_t c = ((size_t)1 << 20) / (per ? per : 1);
    if (c < 1)
        c = 1;
    return c >= (size_t)s->B ? s->B : (int)c;
}

/* The shapes of the full chunks and of the remainder (B 0 when none). */
static void chunk_shapes(const cpu_conv2d_shape *s, cpu_conv2d_shape *full,
                         cpu_conv2d_shape *rest) {
    int c = chunk_samples(s);
    *full = *rest = *s;
    full->B = c;
    rest->B = s->B % c;
}

stoke_status cpu_conv_block_supported(const cpu_conv2d_shape *s, int K, int prec, int *ok) {
    *ok = 0;
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, &sh[0], &sh[1]);
    int all = 1;
    for (int i = 0; i < 2 && st == STOKE_OK; i++) {
        conv_entry *e = NULL;
        if (sh[i].B == 0)
            continue;
        st = cpu_conv_entry_get(&sh[i], prec, 1, &e);
        if (st == STOKE_OK)
            all = all && e->fusable && !e->l_dst.bf16;
    }
    *ok = st == STOKE_OK && all;
    return st;
}

stoke_status cpu_conv_block_workspace(const cpu_conv2d_shape *s, int K, int prec,
                                      size_t *bytes) {
    *bytes = 0;
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, &sh[0], &sh[1]);
    for (int i = 0; i < 2 && st == STOKE_OK; i++) {
        conv_entry *e = NULL;
        if (sh[i].B == 0)
            continue;
        st = cpu_conv_entry_get(&sh[i], prec, 1, &e);
        if (st == STOKE_OK && e->ws_bytes + DNNL_UTIL_ALIGN > *bytes)
            *bytes = e->ws_bytes + DNNL_UTIL_ALIGN;
    }
    return st;
}

/* bf16 bits of x, rounded to nearest even (NaN stays NaN), inline so the loops that
 * write gradients vectorize; the same rounding as cpu_f32_to_bf16. */
static inline uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
}

typedef float v16f __attribute__((vector_size(CHUNK * sizeof(float))));
typedef int32_t v16i __attribute__((vector_size(CHUNK * sizeof(int32_t))));
typedef uint32_t v16u __attribute__((vector_size(CHUNK * sizeof(uint32_t))));
typedef uint16_t v16h __attribute__((vector_size(CHUNK * sizeof(uint16_t))));
typedef uint8_t v16b __attribute__((vector_size(CHUNK)));

/* (Vectors go by pointer: the baseline target's ABI cannot pass them in registers.) */
static inline void load16(v16f *v, const float *p) { memcpy(v, p, sizeof *v); }

/* CHUNK fp32 values as bf16 bits at p, rounded as to_bf16 does. */
static inline void store16h(uint16_t *p, const v16f *x) {
    v16u u = (v16u)*x;
    v16u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    v16u nan = (v16u)((u & 0x7fffffffu) > 0x7f800000u);
    r = (((u >> 16) | 0x40u) & nan) | (r & ~nan);
    v16h h = __builtin_convertvector(r, v16h);
    memcpy(p, &h, sizeof h);
}

/* One pass's geometry: the unpooled H x W, the pooled PH x PW, and the tasks: one per
 * (sample, channel block, run of CHUNK channels) when the layout keeps channels in
 * contiguous runs of CHUNK (nChw16c, NHWC: vec), else per (sample, channel). */
typedef struct pool_job {
    const conv_layout *l;
    int C, H, W, K, PH, PW, cb, nb, nc, vec;
    size_t plane;
    long tasks;
} pool_job;

static pool_job job_of(const conv_layout *l, int B, int C, int H, int W, int K) {
    pool_job j = {.l = l, .C = C, .H = H, .W = W, .K = K, .PH = H / K, .PW = W / K, .cb = l->cb};
    j.nb = C / j.cb;
    j.vec = j.cb % CHUNK == 0;
    j.nc = j.vec ? j.cb / CHUNK : j.cb;
    j.plane = (size_t)j.PH * j.PW;
    j.tasks = (long)B * j.nb * j.nc;
    return j;
}

/* Task t's offsets: of its first element in the layout, of its first pooled element
 * (NCHW). */
static inline void task_at(const pool_job *j, long t, int64_t *at, size_t *o0, int *n_,
                           int *c_) {
    long per = (long)j->nb * j->nc;
    int n = (int)(t / per), r = (int)(t % per), b = r / j->nc;
    int c0 = j->vec ? (r % j->nc) * CHUNK : r % j->nc;
    *at = n * j->l->sn + b * j->l->scb + c0;
    *o0 = ((size_t)n * j->C + (size_t)b * j->cb + c0) * j->plane;
    *n_ = n;
    *c_ = b * j->cb + c0;
}

/* The argmax bytes are the block's own business, so when the channels come in runs of
 * CHUNK they are stored CHUNK channels of one window side by side, whatever the
 * convolution's layouts (forward and backward may differ), and move as one vector;
 * the pooled output, a graph tensor, is NCHW. Offset of (n, c, window w): */
static inline size_t idx_at(const pool_job *j, int n, int c, size_t w) {
    int L = j->C % CHUNK == 0 ? CHUNK : 1;
    return (((size_t)n * (j->C / L) + (size_t)(c / L)) * j->plane + w) * L + (size_t)(c % L);
}

/* Max over each K x K window of y (ReLU already applied): out gets the maximum, idx
 * the first window position holding it (row-major, as PyTorch's max-pool picks it),
 * NO_GRAD when it is not positive. */
CPU_CLONES static void forward_task(const pool_job *j, long t, const float *y, float *out,
                                    uint8_t *idx) {
    const conv_layout *l = j->l;
    int K = j->K;
    int64_t at0;
    size_t o0;
    int n, c;
    task_at(j, t, &at0, &o0, &n, &c);
    const float *yb = y + at0;
    for (int ph = 0; ph < j->PH; ph++)
        for (int pw = 0; pw < j->PW; pw++) {
            const float *p0 = yb + ph * K * l->sh + pw * K * l->sw;
            size_t o = o0 + (size_t)ph * j->PW + pw;
            if (!j->vec) {
                float best = p0[0];
                int at = 0;
                for (int k = 1; k < K * K; k++) {
                    float v = p0[(k / K) * l->sh + (k % K) * l->sw];
                    if (v > best) {
                        best = v;
                        at = k;
                    }
                }
                out[o] = best;
                if (idx)
                    idx[idx_at(j, n, c, (size_t)ph * j->PW + pw)] = best > 0 ? (uint8_t)at : NO_GRAD;
                continue;
            }
            /* GCC vector types keep the running maximum in registers (plain arrays
             * went through the stack with masked stores that stall the loads) */
            v16f best, v;
            load16(&best, p0);
            v16i at = {0};
            for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++) {
                    if (kh == 0 && kw == 0)
                        continue;
                    load16(&v, p0 + kh * l->sh + kw * l->sw);
                    v16i more = v > best;
                    best = (v16f)(((v16i)v & more) | ((v16i)best & ~more));
                    at = ((kh * K + kw) & more) | (at & ~more);
                }
            for (int i = 0; i < CHUNK; i++)
                out[o + i * j->plane] = best[i];
            if (idx) {
                v16i pos = best > 0;
                v16b bytes = __builtin_convertvector((at & pos) | (NO_GRAD & ~pos), v16b);
                memcpy(idx + idx_at(j, n, c, (size_t)ph * j->PW + pw), &bytes, sizeof bytes);
            }
        }
}

static void pool_forward(const float *y, const conv_layout *l, int B, int C, int H, int W,
                         int K, float *out, uint8_t *idx) {
    pool_job j = job_of(l, B, C, H, W, K);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < j.tasks; t++)
        forward_task(&j, t, y, out, idx);
}

/* The convolution's output gradient, every element written: dout at each window's
 * recorded position, zero elsewhere and past the last whole window (floor mode). The
 * CHUNK-wide stores are spelled out per element type so they stay single vector
 * stores. */
CPU_CLONES static void backward_task(const pool_job *j, long t, char *d, const float *dout,
                                     const uint8_t *idx) {
    const conv_layout *l = j->l;
    int K = j->K, m = j->vec ? CHUNK : 1;
    int64_t base;
    size_t o0;
    int n, c;
    task_at(j, t, &base, &o0, &n, &c);
    float *df = (float *)d;
    uint16_t *dh = (uint16_t *)d;
    for (int ph = 0; ph < j->PH; ph++)
        for (int pw = 0; pw < j->PW; pw++) {
            v16f g = {0};
            v16i id = {0};
            size_t o = o0 + (size_t)ph * j->PW + pw;
            for (int i = 0; i < m; i++)
                g[i] = dout[o + i * j->plane];
            size_t ia = idx_at(j, n, c, (size_t)ph * j->PW + pw);
            if (j->vec) {
                v16b bytes;
                memcpy(&bytes, idx + ia, sizeof bytes);
                id = __builtin_convertvector(bytes, v16i);
            } else {
                id[0] = idx[ia];
            }
            for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++) {
                    int32_t k = kh * K + kw;
                    int64_t at = base + (ph * K + kh) * l->sh + (pw * K + kw) * l->sw;
                    if (!j->vec) {
                        float v = id[0] == k ? g[0] : 0.0f;
                        if (l->bf16)
                            dh[at] = to_bf16(v);
                        else
                            df[at] = v;
                    } else {
                        v16i mask = id == k;
                        v16f v = (v16f)((v16i)g & mask);
                        if (l->bf16)
                            store16h(dh + at, &v);
                        else
                            memcpy(df + at, &v, sizeof v);
                    }
                }
        }
    size_t esz = l->bf16 ? sizeof(uint16_t) : sizeof(float);
    for (int h = 0; h < j->H; h++)
        for (int w = h < j->PH * K ? j->PW * K : 0; w < j->W; w++)
            memset(d + (base + h * l->sh + w * l->sw) * (int64_t)esz, 0, (size_t)m * esz);
}

static void pool_backward(char *d, const conv_layout *l, int B, int C, int H, int W, int K,
                          const float *dout, const uint8_t *idx) {
    pool_job j = job_of(l, B, C, H, W, K);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < j.tasks; t++)
        backward_task(&j, t, d, dout, idx);
}

static stoke_status one_forward(float *out, uint8_t *idx, const float *inp, const float *weight,
                                const float *bias, const cpu_conv2d_shape *s, int K, int prec,
                                void *ws, size_t ws_size) {
    conv_entry *e = NULL;
    char *base;
    stoke_status st = cpu_conv_begin(s, prec, 1, ws, ws_size, &e, &base);
    if (st != STOKE_OK)
        return st;
    if (!e->fusable) {
        pthread_mutex_unlock(&e->lock);
        return stoke_fail(STOKE_ERR_ARG, "conv block: oneDNN chose layouts the fused kernel "
                          "cannot address for this shape");
    }
    char *phase = base + e->scratch_bytes;
    float *y = (float *)(phase + e->x_off);
    dnnl_util_arg_bind(&e->f_src, inp, phase);
    dnnl_util_arg_bind(&e->f_wei, weight, phase);
    dnnl_memory_set_data_handle(e->x_dst, y);
    st = dnnl_util_arg_pull(&e->f_src, base);
    if (st == STOKE_OK)
        st = dnnl_util_arg_pull(&e->f_wei, base);
    if (st == STOKE_OK) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->f_src.prim},
                                   {DNNL_ARG_WEIGHTS, e->f_wei.prim},
                                   {DNNL_ARG_DST, e->x_dst}};
        int n = 3;
        if (bias) {
            dnnl_memory_set_data_handle(e->f_bias, (void *)(uintptr_t)bias);
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->f_bias};
        }
        st = dnnl_util_exec(&e->fwd, n, args, base, "convolution forward (fused)");
    }
    if (st == STOKE_OK)
        pool_forward(y, &e->l_dst, s->B, s->OC, e->OH, e->OW, K, out, idx);
    pthread_mutex_unlock(&e->lock);
    return st;
}

static stoke_status one_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const uint8_t *idx, const float *inp, const float *weight,
                                 const cpu_conv2d_shape *s, int K, int prec, void *ws,
                                 size_t ws_size) {
    conv_entry *e = NULL;
    char *base;
    stoke_status st = cpu_conv_begin(s, prec, 1, ws, ws_size, &e, &base);
    if (st != STOKE_OK)
        return st;
    if (!e->fusable) {
        pthread_mutex_unlock(&e->lock);
        return stoke_fail(STOKE_ERR_ARG, "conv block: oneDNN chose layouts the fused kernel "
                          "cannot address for this shape");
    }
    char *phase = base + e->scratch_bytes;
    char *dd = phase + e->x_off, *wd = dd;
    int shared = e->x_wddst == e->x_ddst;
    if (!shared)
        wd = dd + dnnl_util_align(e->l_ddst.bytes);
    if (dinp)
        pool_backward(dd, &e->l_ddst, s->B, s->OC, e->OH, e->OW, K, dout, idx);
    if (!shared || !dinp)
        pool_backward(wd, &e->l_wddst, s->B, s->OC, e->OH, e->OW, K, dout, idx);
    if (dinp) {
        dnnl_util_arg_bind(&e->d_wei, weight, phase);
        dnnl_util_arg_bind(&e->d_dsrc, dinp, phase);
        dnnl_memory_set_data_handle(e->x_ddst, dd);
        st = dnnl_util_arg_pull(&e->d_wei, base);
        if (st == STOKE_OK) {
            dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, e->x_ddst},
                                       {DNNL_ARG_WEIGHTS, e->d_wei.prim},
                                       {DNNL_ARG_DIFF_SRC, e->d_dsrc.prim}};
            st = dnnl_util_exec(&e->bwd_d, 3, args, base, "convolution backward data (fused)");
        }
        if (st == STOKE_OK)
            st = dnnl_util_arg_push(&e->d_dsrc, base);
    }
    if (st == STOKE_OK) {
        dnnl_util_arg_bind(&e->w_src, inp, phase);
        dnnl_util_arg_bind(&e->w_dwei, dweight, phase);
        dnnl_memory_set_data_handle(e->x_wddst, wd);
        st = dnnl_util_arg_pull(&e->w_src, base);
    }
    if (st == STOKE_OK) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->w_src.prim},
                                   {DNNL_ARG_DIFF_DST, e->x_wddst},
                                   {DNNL_ARG_DIFF_WEIGHTS, e->w_dwei.prim}};
        int n = 3;
        float *db = (float *)(phase + e->w_dbias_off);
        if (dbias) {
            dnnl_memory_set_data_handle(e->w_dbias, db);
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, e->w_dbias};
        }
        st = dnnl_util_exec(&e->bwd_w, n, args, base, "convolution backward weights (fused)");
        if (st == STOKE_OK)
            st = dnnl_util_arg_push(&e->w_dwei, base);
        if (st == STOKE_OK && dbias)
            for (int o = 0; o < e->OC; o++)
                dbias[o] += db[o];
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* Per-sample element counts of the block's tensors. */
static void per_sample(const cpu_conv2d_shape *s, int K, size_t *in, size_t *pooled) {
    int OH = 0, OW = 0;
    cpu_conv2d_out_size(s, &OH, &OW);
    *in = (size_t)s->C * s->H * s->W;
    *pooled = (size_t)s->OC * (OH / K) * (OW / K);
}

stoke_status cpu_conv_block_forward(float *out, uint8_t *idx, const float *inp,
                                    const float *weight, const float *bias,
                                    const cpu_conv2d_shape *s, int K, int prec, void *ws,
                                    size_t ws_size) {
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    if ((bias != NULL) != (s->has_bias != 0))
        return stoke_fail(STOKE_ERR_ARG, "conv block forward: bias %s but shape has_bias=%d",
                          bias ? "given" : "missing", s->has_bias);
    size_t in, pooled;
    per_sample(s, K, &in, &pooled);
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, &sh[0], &sh[1]);
    for (int n = 0; n < s->B && st == STOKE_OK;) {
        const cpu_conv2d_shape *c = s->B - n >= sh[0].B ? &sh[0] : &sh[1];
        st = one_forward(out + n * pooled, idx ? idx + n * pooled : NULL, inp + n * in, weight,
                         bias, c, K, prec, ws, ws_size);
        n += c->B;
    }
    return st;
}

stoke_status cpu_conv_block_backward(float *dinp, float *dweight, float *dbias,
                                     const float *dout, const uint8_t *idx, const float *inp,
                                     const float *weight, const cpu_conv2d_shape *s, int K,
                                     int prec, void *ws, size_t ws_size) {
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    if ((dbias != NULL) != (s->has_bias != 0))
        return stoke_fail(STOKE_ERR_ARG, "conv block backward: dbias %s but shape has_bias=%d",
                          dbias ? "given" : "missing", s->has_bias);
    size_t in, pooled;
    per_sample(s, K, &in, &pooled);
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, &sh[0], &sh[1]);
    for (int n = 0; n < s->B && st == STOKE_OK;) {
        const cpu_conv2d_shape *c = s->B - n >= sh[0].B ? &sh[0] : &sh[1];
        st = one_backward(dinp ? dinp + n * in : NULL, dweight, dbias, dout + n * pooled,
                          idx + n * pooled, inp + n * in, weight, c, K, prec, ws, ws_size);
        n += c->B;
    }
    return st;
}
