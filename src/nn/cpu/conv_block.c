/* conv_block.c - conv2d -> ReLU -> max-pool as one kernel (see conv.h). oneDNN has
 * no such fusion (its pooling cannot be a convolution post-op), and run apart the
 * three ops move the unpooled activation through memory about ten times per step
 * (write, ReLU read+write, pool read, reorders, then in backward zeroing, pool and
 * ReLU gradients, reorder): on the reference CNN that traffic cost more than its
 * convolutions' arithmetic. Here it is written once and read once, in cache-sized
 * pieces, and its gradient is written once, directly in the layout the backward
 * primitives read. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/precision.h"
#include "nn/cpu/conv_impl.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"

#define CHUNK   16 /* channels handled together: one AVX-512 vector of fp32 */
#define NO_GRAD 0xff

static stoke_status check_block(const cpu_conv2d_shape *s, int K, int prec)
{
    if (K < 1 || K > 15)
        return stoke_fail(STOKE_ERR_ARG, "conv block: pool kernel %d outside 1..15", K);
    if (prec != CPU_CONV_FP32 && prec != CPU_CONV_MIXED_BF16)
        return stoke_fail(STOKE_ERR_ARG, "conv block: precision %d is neither fp32 nor mixed",
                          prec);
    int OH, OW;
    stoke_status st = cpu_conv2d_out_size(s, &OH, &OW);
    if (st == STOKE_OK && (OH < K || OW < K))
        st = stoke_fail(STOKE_ERR_ARG, "conv block: pool kernel %d larger than the %dx%d output", K,
                        OH, OW);
    return st;
}

/* The block runs over the batch in chunks of samples whose convolution output stays
 * in the cache between the convolution and the pooling (and the gradient between the
 * scatter and the backward convolutions): at the reference CNN's batch 128 the whole
 * output is 12.8 MB, and reading it back from memory cost as much as the pooling's
 * arithmetic many times over. */
static int chunk_samples(const cpu_conv2d_shape *s, int prec)
{
    int OH, OW;
    if (cpu_conv2d_out_size(s, &OH, &OW) != STOKE_OK || cpu_conv_winograd(s, prec))
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
static void chunk_shapes(const cpu_conv2d_shape *s, int prec, cpu_conv2d_shape *full,
                         cpu_conv2d_shape *rest)
{
    int c = chunk_samples(s, prec);
    *full = *rest = *s;
    full->B = c;
    rest->B = s->B % c;
}

/* Over the entries of the chunk shapes the block runs at s->B: whether the fused
 * kernel can address every layout oneDNN chose (which may differ with the batch), and
 * the largest workspace. */
static stoke_status block_entries(const cpu_conv2d_shape *s, int K, int prec, int *ok,
                                  size_t *bytes)
{
    *ok = 0;
    *bytes = 0;
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, prec, &sh[0], &sh[1]);
    int all = 1;
    for (int i = 0; i < 2 && st == STOKE_OK; i++) {
        conv_entry *e = NULL;
        if (sh[i].B == 0)
            continue;
        st = cpu_conv_entry_get(&sh[i], prec, 1, &e);
        if (st != STOKE_OK)
            break;
        all = all && e->fusable && !e->l_dst.bf16;
        if (e->ws_bytes + DNNL_UTIL_ALIGN > *bytes)
            *bytes = e->ws_bytes + DNNL_UTIL_ALIGN;
    }
    *ok = st == STOKE_OK && all;
    return st;
}

stoke_status cpu_conv_block_supported(const cpu_conv2d_shape *s, int K, int prec, int *ok)
{
    size_t bytes;
    return block_entries(s, K, prec, ok, &bytes);
}

stoke_status cpu_conv_block_workspace(const cpu_conv2d_shape *s, int K, int prec, size_t *bytes)
{
    int ok = 0;
    stoke_status st = block_entries(s, K, prec, &ok, bytes);
    if (st == STOKE_OK && !ok)
        st = stoke_fail(STOKE_ERR_UNAVAILABLE,
                        "conv block: at batch %d oneDNN chose layouts "
                        "the fused kernel cannot address (plan this batch, or run unfused: "
                        "STOKE_NO_FUSION=1)",
                        s->B);
    return st;
}

/* bf16 bits of x, rounded to nearest even (NaN stays NaN), inline so the loops that
 * write gradients vectorize; the same rounding as cpu_f32_to_bf16. */
static inline uint16_t to_bf16(float x)
{
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
static inline void store16h(uint16_t *p, const v16f *x)
{
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

static pool_job job_of(const conv_layout *l, int B, int C, int H, int W, int K)
{
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
static inline void task_at(const pool_job *j, long t, int64_t *at, size_t *o0, int *n_, int *c_)
{
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
static inline size_t idx_at(const pool_job *j, int n, int c, size_t w)
{
    int L = j->C % CHUNK == 0 ? CHUNK : 1;
    return (((size_t)n * (j->C / L) + (size_t)(c / L)) * j->plane + w) * L + (size_t)(c % L);
}

/* best, at: the running maximum of a window and its position, taking v at position k
 * when it is larger (the first maximum wins, as PyTorch's max-pool). */
static inline void keep_max(v16f *best, v16i *at, const v16f *v, int k)
{
    v16i more = *v > *best;
    *best = (v16f)(((v16i)*v & more) | ((v16i)*best & ~more));
    *at = (k & more) | (*at & ~more);
}

/* The pooled gradient of window w (NCHW) for CHUNK channels from c0 of sample n, and
 * the window positions of their maxima. */
static inline void load_window(const pool_job *j, const float *dout, const uint8_t *idx, int n,
                               int c0, size_t w, v16f *g, v16i *id)
{
    const float *p = dout + ((size_t)n * j->C + c0) * j->plane + w;
    for (int i = 0; i < CHUNK; i++)
        (*g)[i] = p[i * j->plane];
    v16b bytes;
    memcpy(&bytes, idx + idx_at(j, n, c0, w), sizeof bytes);
    *id = __builtin_convertvector(bytes, v16i);
}

/* A window's result for CHUNK channels from c0 of sample n: the maxima into out (NCHW,
 * element o of the first channel) and, when idx is given, the positions or NO_GRAD. */
static inline void store_window(const pool_job *j, float *out, uint8_t *idx, int n, int c0,
                                size_t o, size_t w, const v16f *best, const v16i *at)
{
    for (int i = 0; i < CHUNK; i++)
        out[o + i * j->plane] = (*best)[i];
    if (idx) {
        v16i pos = *best > 0;
        v16b bytes = __builtin_convertvector((*at & pos) | (NO_GRAD & ~pos), v16b);
        memcpy(idx + idx_at(j, n, c0, w), &bytes, sizeof bytes);
    }
}

/* Max over each K x K window of y (ReLU already applied): out gets the maximum, idx
 * the first window position holding it (row-major, as PyTorch's max-pool picks it),
 * NO_GRAD when it is not positive. */
CPU_SIMD_KERNEL(forward_task, (const pool_job *j, long t, const float *y, float *out, uint8_t *idx),
                (j, t, y, out, idx))
{
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
                    idx[idx_at(j, n, c, (size_t)ph * j->PW + pw)] =
                        best > 0 ? (uint8_t)at : NO_GRAD;
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
                    keep_max(&best, &at, &v, kh * K + kw);
                }
            store_window(j, out, idx, n, c, o, (size_t)ph * j->PW + pw, &best, &at);
        }
}

static void pool_forward(const float *y, const conv_layout *l, int B, int C, int H, int W, int K,
                         float *out, uint8_t *idx)
{
    pool_job j = job_of(l, B, C, H, W, K);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < j.tasks; t++)
        forward_task(&j, t, y, out, idx);
}

/* The convolution's output gradient, every element written: dout at each window's
 * recorded position, zero elsewhere and past the last whole window (floor mode). The
 * CHUNK-wide stores are spelled out per element type so they stay single vector
 * stores. */
CPU_SIMD_KERNEL(backward_task,
                (const pool_job *j, long t, char *d, const float *dout, const uint8_t *idx),
                (j, t, d, dout, idx))
{
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
                          const float *dout, const uint8_t *idx)
{
    pool_job j = job_of(l, B, C, H, W, K);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < j.tasks; t++)
        backward_task(&j, t, d, dout, idx);
}

/* cpu_conv_begin for the fused entry, which must address its layouts (on success the
 * entry is locked). */
static stoke_status block_begin(const cpu_conv2d_shape *s, int prec, void *ws, size_t ws_size,
                                conv_entry **e, char **base)
{
    stoke_status st = cpu_conv_begin(s, prec, 1, ws, ws_size, e, base);
    if (st == STOKE_OK && !(*e)->fusable) {
        pthread_mutex_unlock(&(*e)->lock);
        st = stoke_fail(STOKE_ERR_ARG, "conv block: oneDNN chose layouts the fused kernel "
                                       "cannot address for this shape");
    }
    return st;
}

static stoke_status one_forward(float *out, uint8_t *idx, const float *inp, const float *weight,
                                const float *bias, const cpu_conv2d_shape *s, int K, int prec,
                                void *ws, size_t ws_size)
{
    conv_entry *e = NULL;
    char *base;
    stoke_status st = block_begin(s, prec, ws, ws_size, &e, &base);
    if (st != STOKE_OK)
        return st;
    char *phase = base + e->scratch_bytes;
    float *y = (float *)(phase + e->x_off);
    dnnl_util_arg_bind(&e->f_src, inp, phase);
    dnnl_util_arg_bind(&e->f_wei, weight, phase);
    dnnl_memory_set_data_handle(e->x_dst, y);
    st = dnnl_util_arg_pull(&e->f_src, base);
    if (st == STOKE_OK)
        st = dnnl_util_arg_pull(&e->f_wei, base);
    if (st == STOKE_OK)
        st = cpu_conv_run_forward(e, e->x_dst, bias, base, "convolution forward (fused)");
    if (st == STOKE_OK)
        pool_forward(y, &e->l_dst, s->B, s->OC, e->OH, e->OW, K, out, idx);
    pthread_mutex_unlock(&e->lock);
    return st;
}

static stoke_status one_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const uint8_t *idx, const float *inp, const float *weight,
                                 const cpu_conv2d_shape *s, int K, int prec, void *ws,
                                 size_t ws_size)
{
    conv_entry *e = NULL;
    char *base;
    stoke_status st = block_begin(s, prec, ws, ws_size, &e, &base);
    if (st != STOKE_OK)
        return st;
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
    if (st == STOKE_OK)
        st = cpu_conv_run_backward_weights(e, e->x_wddst, dbias, phase, base,
                                           "convolution backward weights (fused)");
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* ---- few input channels: a direct kernel ----
 * With C <= 4 input channels (an image's first layer) each output is a dot product of
 * at most 4*7*7 terms, which oneDNN computes at a fraction of its peak, and the
 * unpooled output it writes is the block's largest tensor (the reference CNN: 32
 * channels of 28x28, 12.8 MB per batch of 128). This kernel computes each window's
 * K*K outputs for 16 output channels in registers, applies ReLU and keeps the
 * maximum, so the unpooled output never exists; its backward (weights and bias only:
 * such a layer's input is the data) visits each window's recorded maximum. */

#define DIRECT_MAX_C 4
#define DIRECT_MAX_K 7

static int direct_ok(const cpu_conv2d_shape *s)
{
    return s->C <= DIRECT_MAX_C && s->OC % CHUNK == 0 && s->KH <= DIRECT_MAX_K &&
           s->KW <= DIRECT_MAX_K;
}

typedef struct direct_job {
    const cpu_conv2d_shape *s;
    int OH, OW, PH, PW, K, T, nc; /* T: taps C*KH*KW; nc: 16-channel chunks */
    const float *wt;              /* weights as [tap][OC] */
    const float *bias;
} direct_job;

/* Weights (OC, C, KH, KW) as [C*KH*KW][OC], so 16 output channels load as a vector. */
static float *transpose_weights(const cpu_conv2d_shape *s, const float *w)
{
    int T = s->C * s->KH * s->KW;
    float *wt = malloc((size_t)T * s->OC * sizeof *wt);
    if (wt)
        for (int o = 0; o < s->OC; o++)
            for (int t = 0; t < T; t++)
                wt[(size_t)t * s->OC + o] = w[(size_t)o * T + t];
    return wt;
}

/* conv + bias + ReLU at output (oh, ow) for channels oc0..oc0+15 of sample xn. */
static inline void direct_point(const direct_job *j, const float *xn, int oh, int ow, int oc0,
                                v16f *acc)
{
    const cpu_conv2d_shape *s = j->s;
    v16f a = {0}, w;
    if (j->bias)
        load16(&a, j->bias + oc0);
    for (int c = 0; c < s->C; c++)
        for (int kh = 0; kh < s->KH; kh++) {
            int ih = oh * s->stride_h - s->pad_h + kh;
            if (ih < 0 || ih >= s->H)
                continue;
            for (int kw = 0; kw < s->KW; kw++) {
                int iw = ow * s->stride_w - s->pad_w + kw;
                if (iw < 0 || iw >= s->W)
                    continue;
                load16(&w, j->wt + (size_t)((c * s->KH + kh) * s->KW + kw) * s->OC + oc0);
                a += xn[((size_t)c * s->H + ih) * s->W + iw] * w;
            }
        }
    v16f zero = {0};
    v16i pos = a > zero;
    *acc = (v16f)((v16i)a & pos);
}

/* The common first layer, 1 channel, 3x3, stride 1, padding 1: the sample copied into
 * a zero border so no tap needs a bounds check, the 9 weight vectors in registers. */
static int direct_3x3(const cpu_conv2d_shape *s)
{
    return s->C == 1 && s->KH == 3 && s->KW == 3 && s->stride_h == 1 && s->stride_w == 1 &&
           s->pad_h == 1 && s->pad_w == 1;
}

static void pad_sample(const cpu_conv2d_shape *s, const float *xn, float *xp)
{
    int PWD = s->W + 2;
    memset(xp, 0, (size_t)(s->H + 2) * PWD * sizeof *xp);
    for (int h = 0; h < s->H; h++)
        memcpy(xp + (size_t)(h + 1) * PWD + 1, xn + (size_t)h * s->W, (size_t)s->W * sizeof *xp);
}

CPU_SIMD_KERNEL(direct3_forward_task,
                (const direct_job *j, long t, const float *inp, float *out, uint8_t *idx,
                 float *xp),
                (j, t, inp, out, idx, xp))
{
    const cpu_conv2d_shape *s = j->s;
    int n = (int)(t / j->nc), oc0 = (int)(t % j->nc) * CHUNK, K = j->K, PWD = s->W + 2;
    pad_sample(s, inp + (size_t)n * s->H * s->W, xp);
    v16f w[9], b = {0}, zero = {0};
    for (int k = 0; k < 9; k++)
        load16(&w[k], j->wt + (size_t)k * s->OC + oc0);
    if (j->bias)
        load16(&b, j->bias + oc0);
    size_t plane = (size_t)j->PH * j->PW;
    pool_job pj = {.C = s->OC, .plane = plane};
    if (K == 2) {
        /* the usual pool: the window's 4 outputs as 4 independent sums (one running sum
         * per output was a chain of dependent FMAs, bound by their latency: measured
         * 556 -> 370 us for the reference CNN's first block on 2 threads) */
        for (int ph = 0; ph < j->PH; ph++)
            for (int pw = 0; pw < j->PW; pw++) {
                const float *r = xp + (size_t)(ph * 2) * PWD + pw * 2;
                v16f a[4] = {b, b, b, b};
                for (int kh = 0; kh < 3; kh++)
                    for (int kw = 0; kw < 3; kw++) {
                        const float *q = r + kh * PWD + kw;
                        a[0] += q[0] * w[kh * 3 + kw];
                        a[1] += q[1] * w[kh * 3 + kw];
                        a[2] += q[PWD] * w[kh * 3 + kw];
                        a[3] += q[PWD + 1] * w[kh * 3 + kw];
                    }
                v16f best;
                v16i at = {0};
                for (int k = 0; k < 4; k++) {
                    a[k] = (v16f)((v16i)a[k] & (a[k] > zero)); /* ReLU */
                    if (k == 0)
                        best = a[0];
                    else
                        keep_max(&best, &at, &a[k], k);
                }
                size_t o = ((size_t)n * s->OC + oc0) * plane + (size_t)ph * j->PW + pw;
                store_window(&pj, out, idx, n, oc0, o, (size_t)ph * j->PW + pw, &best, &at);
            }
        return;
    }
    for (int ph = 0; ph < j->PH; ph++)
        for (int pw = 0; pw < j->PW; pw++) {
            v16f best = zero;
            v16i at = {0};
            for (int k = 0; k < K * K; k++) {
                /* output (oh, ow) reads padded rows oh..oh+2, columns ow..ow+2 */
                const float *r = xp + (size_t)(ph * K + k / K) * PWD + pw * K + k % K;
                v16f a = b;
                a += r[0] * w[0] + r[1] * w[1] + r[2] * w[2];
                a += r[PWD] * w[3] + r[PWD + 1] * w[4] + r[PWD + 2] * w[5];
                a += r[2 * PWD] * w[6] + r[2 * PWD + 1] * w[7] + r[2 * PWD + 2] * w[8];
                v16i pos = a > zero;
                a = (v16f)((v16i)a & pos); /* ReLU */
                if (k == 0)
                    best = a;
                else
                    keep_max(&best, &at, &a, k);
            }
            size_t o = ((size_t)n * s->OC + oc0) * plane + (size_t)ph * j->PW + pw;
            store_window(&pj, out, idx, n, oc0, o, (size_t)ph * j->PW + pw, &best, &at);
        }
}

CPU_SIMD_KERNEL(direct3_backward_task,
                (const direct_job *j, long t, const float *inp, const float *dout,
                 const uint8_t *idx, float *acc, float *xp),
                (j, t, inp, dout, idx, acc, xp))
{
    const cpu_conv2d_shape *s = j->s;
    int n = (int)(t / j->nc), oc0 = (int)(t % j->nc) * CHUNK, K = j->K, PWD = s->W + 2;
    pad_sample(s, inp + (size_t)n * s->H * s->W, xp);
    v16f dw[9], db;
    for (int k = 0; k < 9; k++)
        load16(&dw[k], acc + (size_t)k * CHUNK);
    load16(&db, acc + (size_t)9 * CHUNK);
    size_t plane = (size_t)j->PH * j->PW;
    pool_job pj = {.C = s->OC, .plane = plane};
    for (int ph = 0; ph < j->PH; ph++)
        for (int pw = 0; pw < j->PW; pw++) {
            v16f g;
            v16i id;
            load_window(&pj, dout, idx, n, oc0, (size_t)ph * j->PW + pw, &g, &id);
            for (int k = 0; k < K * K; k++) {
                v16f gk = (v16f)((v16i)g & (id == k));
                const float *r = xp + (size_t)(ph * K + k / K) * PWD + pw * K + k % K;
                db += gk;
                dw[0] += r[0] * gk, dw[1] += r[1] * gk, dw[2] += r[2] * gk;
                dw[3] += r[PWD] * gk, dw[4] += r[PWD + 1] * gk, dw[5] += r[PWD + 2] * gk;
                dw[6] += r[2 * PWD] * gk, dw[7] += r[2 * PWD + 1] * gk;
                dw[8] += r[2 * PWD + 2] * gk;
            }
        }
    for (int k = 0; k < 9; k++)
        memcpy(acc + (size_t)k * CHUNK, &dw[k], sizeof dw[k]);
    memcpy(acc + (size_t)9 * CHUNK, &db, sizeof db);
}

CPU_SIMD_KERNEL(direct_forward_task,
                (const direct_job *j, long t, const float *inp, float *out, uint8_t *idx),
                (j, t, inp, out, idx))
{
    const cpu_conv2d_shape *s = j->s;
    int n = (int)(t / j->nc), oc0 = (int)(t % j->nc) * CHUNK, K = j->K;
    const float *xn = inp + (size_t)n * s->C * s->H * s->W;
    size_t plane = (size_t)j->PH * j->PW;
    pool_job pj = {.C = s->OC, .plane = plane};
    for (int ph = 0; ph < j->PH; ph++)
        for (int pw = 0; pw < j->PW; pw++) {
            v16f best, v;
            v16i at = {0};
            direct_point(j, xn, ph * K, pw * K, oc0, &best);
            for (int k = 1; k < K * K; k++) {
                direct_point(j, xn, ph * K + k / K, pw * K + k % K, oc0, &v);
                keep_max(&best, &at, &v, k);
            }
            size_t o = ((size_t)n * s->OC + oc0) * plane + (size_t)ph * j->PW + pw;
            store_window(&pj, out, idx, n, oc0, o, (size_t)ph * j->PW + pw, &best, &at);
        }
}

/* Sums into acc ([T][16] weight-gradient taps, then 16 bias lanes) one task's share:
 * each window's gradient at its recorded maximum, times the input under the kernel. */
CPU_SIMD_KERNEL(direct_backward_task,
                (const direct_job *j, long t, const float *inp, const float *dout,
                 const uint8_t *idx, float *acc),
                (j, t, inp, dout, idx, acc))
{
    const cpu_conv2d_shape *s = j->s;
    int n = (int)(t / j->nc), oc0 = (int)(t % j->nc) * CHUNK, K = j->K;
    const float *xn = inp + (size_t)n * s->C * s->H * s->W;
    size_t plane = (size_t)j->PH * j->PW;
    pool_job pj = {.C = s->OC, .plane = plane};
    v16f db, a;
    load16(&db, acc + (size_t)j->T * CHUNK);
    for (int ph = 0; ph < j->PH; ph++)
        for (int pw = 0; pw < j->PW; pw++) {
            v16f g;
            v16i id;
            load_window(&pj, dout, idx, n, oc0, (size_t)ph * j->PW + pw, &g, &id);
            for (int k = 0; k < K * K; k++) {
                v16i mask = id == k;
                v16f gk = (v16f)((v16i)g & mask);
                int any = 0;
                for (int i = 0; i < CHUNK; i++)
                    any |= mask[i];
                if (!any)
                    continue;
                db += gk;
                int oh = ph * K + k / K, ow = pw * K + k % K;
                for (int c = 0; c < s->C; c++)
                    for (int kh = 0; kh < s->KH; kh++) {
                        int ih = oh * s->stride_h - s->pad_h + kh;
                        if (ih < 0 || ih >= s->H)
                            continue;
                        for (int kw = 0; kw < s->KW; kw++) {
                            int iw = ow * s->stride_w - s->pad_w + kw;
                            if (iw < 0 || iw >= s->W)
                                continue;
                            float *p = acc + (size_t)((c * s->KH + kh) * s->KW + kw) * CHUNK;
                            load16(&a, p);
                            a += xn[((size_t)c * s->H + ih) * s->W + iw] * gk;
                            memcpy(p, &a, sizeof a);
                        }
                    }
            }
        }
    memcpy(acc + (size_t)j->T * CHUNK, &db, sizeof db);
}

static stoke_status direct_job_init(direct_job *j, const cpu_conv2d_shape *s, int K,
                                    const float *weight, const float *bias)
{
    *j = (direct_job){.s = s, .K = K, .T = s->C * s->KH * s->KW, .nc = s->OC / CHUNK, .bias = bias};
    cpu_conv2d_out_size(s, &j->OH, &j->OW);
    j->PH = j->OH / K;
    j->PW = j->OW / K;
    if (!weight)
        return STOKE_OK; /* backward reads no weights */
    j->wt = transpose_weights(s, weight);
    return j->wt ? STOKE_OK : stoke_fail(STOKE_ERR_NOMEM, "conv block: out of memory");
}

static stoke_status direct_forward(float *out, uint8_t *idx, const float *inp, const float *weight,
                                   const float *bias, const cpu_conv2d_shape *s, int K)
{
    direct_job j;
    stoke_status st = direct_job_init(&j, s, K, weight, bias);
    if (st != STOKE_OK)
        return st;
    int nt = cpu_threads_apply();
    long tasks = (long)s->B * j.nc;
    size_t padded = (size_t)(s->H + 2) * (s->W + 2);
    float *xp = direct_3x3(s) ? malloc((size_t)nt * padded * sizeof *xp) : NULL;
    if (direct_3x3(s) && !xp) {
        free((void *)j.wt);
        return stoke_fail(STOKE_ERR_NOMEM, "conv block: out of memory");
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long t = 0; t < tasks; t++) {
        if (xp)
            direct3_forward_task(&j, t, inp, out, idx, xp + omp_get_thread_num() * padded);
        else
            direct_forward_task(&j, t, inp, out, idx);
    }
    free(xp);
    free((void *)j.wt);
    return STOKE_OK;
}

/* Each thread sums its contiguous range of tasks per 16-channel chunk; the partial
 * sums are then added in thread order, so results depend on the thread count only
 * (as oneDNN's do). */
static stoke_status direct_backward(float *dweight, float *dbias, const float *dout,
                                    const uint8_t *idx, const float *inp, const cpu_conv2d_shape *s,
                                    int K)
{
    direct_job j;
    direct_job_init(&j, s, K, NULL, NULL);
    int nt = cpu_threads_apply();
    size_t per = (size_t)(j.T + 1) * CHUNK; /* taps, then bias, per chunk */
    float *part = calloc((size_t)nt * j.nc * per, sizeof *part);
    size_t padded = (size_t)(s->H + 2) * (s->W + 2);
    float *xp = direct_3x3(s) ? malloc((size_t)nt * padded * sizeof *xp) : NULL;
    if (!part || (direct_3x3(s) && !xp)) {
        free(part);
        free(xp);
        return stoke_fail(STOKE_ERR_NOMEM, "conv block: out of memory");
    }
    long tasks = (long)s->B * j.nc;
#pragma omp parallel num_threads(nt)
    {
        int me = omp_get_thread_num(), all = omp_get_num_threads();
        long lo = tasks * me / all, hi = tasks * (me + 1) / all;
        for (long t = lo; t < hi; t++) {
            float *acc = part + ((size_t)me * j.nc + (size_t)(t % j.nc)) * per;
            if (xp)
                direct3_backward_task(&j, t, inp, dout, idx, acc, xp + (size_t)me * padded);
            else
                direct_backward_task(&j, t, inp, dout, idx, acc);
        }
    }
    free(xp);
    for (int me = 0; me < nt; me++)
        for (int c = 0; c < j.nc; c++) {
            const float *p = part + ((size_t)me * j.nc + c) * per;
            for (int tap = 0; tap < j.T; tap++)
                for (int i = 0; i < CHUNK; i++)
                    dweight[(size_t)(c * CHUNK + i) * j.T + tap] += p[(size_t)tap * CHUNK + i];
            if (dbias)
                for (int i = 0; i < CHUNK; i++)
                    dbias[c * CHUNK + i] += p[(size_t)j.T * CHUNK + i];
        }
    free(part);
    return STOKE_OK;
}

/* Per-sample element counts of the block's tensors. */
static void per_sample(const cpu_conv2d_shape *s, int K, size_t *in, size_t *pooled)
{
    int OH = 0, OW = 0;
    cpu_conv2d_out_size(s, &OH, &OW);
    *in = (size_t)s->C * s->H * s->W;
    *pooled = (size_t)s->OC * (OH / K) * (OW / K);
}

stoke_status cpu_conv_block_forward(float *out, uint8_t *idx, const float *inp, const float *weight,
                                    const float *bias, const cpu_conv2d_shape *s, int K, int prec,
                                    void *ws, size_t ws_size)
{
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    if ((bias != NULL) != (s->has_bias != 0))
        return stoke_fail(STOKE_ERR_ARG, "conv block forward: bias %s but shape has_bias=%d",
                          bias ? "given" : "missing", s->has_bias);
    if (direct_ok(s))
        return direct_forward(out, idx, inp, weight, bias, s, K);
    size_t in, pooled;
    per_sample(s, K, &in, &pooled);
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, prec, &sh[0], &sh[1]);
    for (int n = 0; n < s->B && st == STOKE_OK;) {
        const cpu_conv2d_shape *c = s->B - n >= sh[0].B ? &sh[0] : &sh[1];
        st = one_forward(out + n * pooled, idx ? idx + n * pooled : NULL, inp + n * in, weight,
                         bias, c, K, prec, ws, ws_size);
        n += c->B;
    }
    return st;
}

stoke_status cpu_conv_block_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const uint8_t *idx, const float *inp, const float *weight,
                                     const cpu_conv2d_shape *s, int K, int prec, void *ws,
                                     size_t ws_size)
{
    stoke_status st = check_block(s, K, prec);
    if (st != STOKE_OK)
        return st;
    if ((dbias != NULL) != (s->has_bias != 0))
        return stoke_fail(STOKE_ERR_ARG, "conv block backward: dbias %s but shape has_bias=%d",
                          dbias ? "given" : "missing", s->has_bias);
    if (direct_ok(s) && !dinp)
        return direct_backward(dweight, dbias, dout, idx, inp, s, K);
    size_t in, pooled;
    per_sample(s, K, &in, &pooled);
    cpu_conv2d_shape sh[2];
    chunk_shapes(s, prec, &sh[0], &sh[1]);
    for (int n = 0; n < s->B && st == STOKE_OK;) {
        const cpu_conv2d_shape *c = s->B - n >= sh[0].B ? &sh[0] : &sh[1];
        st = one_backward(dinp ? dinp + n * in : NULL, dweight, dbias, dout + n * pooled,
                          idx + n * pooled, inp + n * in, weight, c, K, prec, ws, ws_size);
        n += c->B;
    }
    return st;
}
