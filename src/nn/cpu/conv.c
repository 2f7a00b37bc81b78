/* conv.c - 2-D convolution on oneDNN primitives (cached per shape, blocked layouts
 * inside, NCHW at the edges) and hand-written OpenMP pooling loops. */
#include "nn/cpu/conv.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/conv_impl.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/dnnl_util.h"

void cpu_conv2d_set_layout(cpu_conv_layout layout)
{
    atomic_store(&cpu_ctx_current()->conv_layout, (int)layout);
}

/* The sliding-window arithmetic conv2d and pooling share (PyTorch's floor rule), after
 * each has checked its own padding rule; `op` names the caller in messages. */
static stoke_status window_out(const char *op, int H, int W, int KH, int KW, int sh, int sw, int ph,
                               int pw, int *OH, int *OW)
{
    int oh = H + 2 * ph - KH, ow = W + 2 * pw - KW;
    if (oh < 0 || ow < 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: kernel %dx%d larger than the padded input %dx%d", op,
                          KH, KW, H + 2 * ph, W + 2 * pw);
    if (OH)
        *OH = oh / sh + 1;
    if (OW)
        *OW = ow / sw + 1;
    return STOKE_OK;
}

stoke_status cpu_conv2d_out_size(const cpu_conv2d_shape *s, int *OH, int *OW)
{
    if (s->B <= 0 || s->C <= 0 || s->H <= 0 || s->W <= 0 || s->OC <= 0)
        return stoke_fail(STOKE_ERR_ARG, "conv2d: sizes B=%d C=%d H=%d W=%d OC=%d must be positive",
                          s->B, s->C, s->H, s->W, s->OC);
    if (s->KH <= 0 || s->KW <= 0 || s->stride_h <= 0 || s->stride_w <= 0)
        return stoke_fail(STOKE_ERR_ARG, "conv2d: kernel %dx%d and stride %dx%d must be positive",
                          s->KH, s->KW, s->stride_h, s->stride_w);
    if (s->pad_h < 0 || s->pad_w < 0 || s->pad_h >= s->KH || s->pad_w >= s->KW)
        return stoke_fail(STOKE_ERR_ARG,
                          "conv2d: padding %dx%d must be non-negative and below the kernel %dx%d",
                          s->pad_h, s->pad_w, s->KH, s->KW);
    return window_out("conv2d", s->H, s->W, s->KH, s->KW, s->stride_h, s->stride_w, s->pad_h,
                      s->pad_w, OH, OW);
}

static void conv_entry_free(conv_entry *e)
{
    dnnl_util_prim_destroy(&e->fwd);
    dnnl_util_prim_destroy(&e->bwd_d);
    dnnl_util_prim_destroy(&e->bwd_w);
    dnnl_util_arg *args[] = {&e->f_src,  &e->f_wei, &e->f_dst,  &e->d_ddst, &e->d_wei,
                             &e->d_dsrc, &e->w_src, &e->w_ddst, &e->w_dwei};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        dnnl_util_arg_destroy(args[i]);
    if (e->f_bias)
        dnnl_memory_destroy(e->f_bias);
    if (e->w_dbias)
        dnnl_memory_destroy(e->w_dbias);
    if (e->x_wddst && e->x_wddst != e->x_ddst)
        dnnl_memory_destroy(e->x_wddst);
    if (e->x_ddst)
        dnnl_memory_destroy(e->x_ddst);
    if (e->x_dst)
        dnnl_memory_destroy(e->x_dst);
    free(e->owned);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static stoke_status md4(dnnl_memory_desc_t *md, int64_t a, int64_t b, int64_t c, int64_t d,
                        dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
    dnnl_dims_t dims = {a, b, c, d};
    return dnnl_util_check(dnnl_memory_desc_init_by_tag(md, 4, dims, dt, tag), "md");
}

static const dnnl_memory_desc_t *q(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

static stoke_status make_pd(dnnl_primitive_desc_t *pd, const void *desc,
                            const_dnnl_primitive_desc_t hint, int relu, const char *what)
{
    dnnl_engine_t eng = NULL;
    stoke_status st = dnnl_util_engine(&eng, NULL);
    if (st != STOKE_OK)
        return st;
    dnnl_primitive_attr_t attr = dnnl_util_attr(relu ? DNNL_UTIL_POST_RELU : 0);
    if (!attr)
        return stoke_fail(STOKE_ERR_NOMEM, "oneDNN: cannot create a %s attribute", what);
    st = dnnl_util_check(dnnl_primitive_desc_create(pd, desc, attr, eng, hint), what);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* A conv_layout for md if the fused kernels can address it: 4-D, blocked, with at
 * most one inner block, on the channels, dividing them. */
static int layout_of(const dnnl_memory_desc_t *md, conv_layout *l)
{
    if (md->ndims != 4 || md->format_kind != dnnl_blocked ||
        (md->data_type != dnnl_f32 && md->data_type != dnnl_bf16) || md->offset0 != 0)
        return 0;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    for (int d = 0; d < 4; d++)
        if (md->padded_dims[d] != md->dims[d] || md->padded_offsets[d] != 0)
            return 0;
    *l = (conv_layout){.sn = b->strides[0],
                       .scb = b->strides[1],
                       .sh = b->strides[2],
                       .sw = b->strides[3],
                       .cb = 1,
                       .bf16 = md->data_type == dnnl_bf16,
                       .bytes = dnnl_memory_desc_get_size(md)};
    if (b->inner_nblks == 1 && b->inner_idxs[0] == 1 && md->dims[1] % b->inner_blks[0] == 0) {
        l->cb = (int)b->inner_blks[0];
        return 1;
    }
    if (b->inner_nblks != 0)
        return 0;
    if (b->strides[1] == 1) { /* channels innermost (NHWC): one block of all of them */
        l->cb = (int)md->dims[1];
        l->scb = 0;
    }
    return 1;
}

/* The fused block's extra tensors: the forward output and the backward output
 * gradients in the primitives' own layouts, so no reorder touches them. */
static stoke_status fused_init(conv_entry *e, const_dnnl_primitive_desc_t fpd,
                               const_dnnl_primitive_desc_t dpd, const_dnnl_primitive_desc_t wpd,
                               size_t *xbytes)
{
    dnnl_engine_t eng = NULL;
    stoke_status st = dnnl_util_engine(&eng, NULL);
    if (st != STOKE_OK)
        return st;
    const dnnl_memory_desc_t *dst = q(fpd, dnnl_query_dst_md);
    const dnnl_memory_desc_t *dd = q(dpd, dnnl_query_diff_dst_md);
    const dnnl_memory_desc_t *wd = q(wpd, dnnl_query_diff_dst_md);
    e->fusable =
        layout_of(dst, &e->l_dst) && layout_of(dd, &e->l_ddst) && layout_of(wd, &e->l_wddst);
    if (!e->fusable)
        return STOKE_OK;
    st = dnnl_util_check(dnnl_memory_create(&e->x_dst, dst, eng, DNNL_MEMORY_NONE), "memory");
    if (st == STOKE_OK)
        st = dnnl_util_check(dnnl_memory_create(&e->x_ddst, dd, eng, DNNL_MEMORY_NONE), "memory");
    if (st != STOKE_OK)
        return st;
    size_t bwd = dnnl_util_align(e->l_ddst.bytes);
    if (dnnl_memory_desc_equal(dd, wd)) {
        e->x_wddst = e->x_ddst;
    } else {
        st = dnnl_util_check(dnnl_memory_create(&e->x_wddst, wd, eng, DNNL_MEMORY_NONE), "memory");
        bwd += dnnl_util_align(e->l_wddst.bytes);
    }
    size_t fwd = dnnl_util_align(e->l_dst.bytes);
    *xbytes = fwd > bwd ? fwd : bwd;
    return st;
}

static stoke_status conv_create(const void *key, void **value)
{
    const conv_key *k = key;
    const cpu_conv2d_shape *s = &k->s;
    int OH = 0, OW = 0; /* set by cpu_conv2d_out_size; GCC 12 cannot tell */
    stoke_status st = cpu_conv2d_out_size(s, &OH, &OW);
    if (st != STOKE_OK)
        return st;
    dnnl_engine_t eng = NULL;
    if ((st = dnnl_util_engine(&eng, NULL)) != STOKE_OK)
        return st;
    conv_entry *e = calloc(1, sizeof *e);
    if (!e)
        return stoke_fail(STOKE_ERR_NOMEM, "conv2d: out of memory");
    pthread_mutex_init(&e->lock, NULL);
    e->OC = s->OC;
    e->OH = OH;
    e->OW = OW;
    /* in: what the primitives read; uin: what the caller's inputs hold (mixed precision
     * converts fp32 to bf16 in the reorders that change the layout anyway). */
    dnnl_data_type_t in = k->prec != CPU_CONV_FP32 ? dnnl_bf16 : dnnl_f32, f = dnnl_f32;
    dnnl_data_type_t uin = k->prec == CPU_CONV_BF16 ? dnnl_bf16 : dnnl_f32;
    /* Backward always prefers blocked layouts; forward too, unless the input has so few
     * channels that blocking it pads 1 channel to 16 (see cpu_conv_layout). */
    int plain_b = k->layout == CPU_CONV_LAYOUT_PLAIN;
    /* (oneDNN's NCHW kernel for few channels is a GEMM that applies a ReLU post-op in a
     * slow separate pass, so the fused block keeps blocked layouts there too.) */
    int plain_f = plain_b || (k->layout == CPU_CONV_LAYOUT_AUTO && s->C < 4 && !k->relu);
    dnnl_format_tag_t any = dnnl_format_tag_any;
    dnnl_format_tag_t act_f = plain_f ? dnnl_nchw : any, wt_f = plain_f ? dnnl_oihw : any;
    dnnl_format_tag_t act = plain_b ? dnnl_nchw : any, wt = plain_b ? dnnl_oihw : any;
    dnnl_memory_desc_t u_src, u_wei, u_dst, u_ddst, u_dsrc, u_dwei, bias;
    dnnl_memory_desc_t f_src, f_wei, f_dst, a_src, a_wei, a_ddst, a_dsrc, a_dwei;
    dnnl_dims_t bdims = {s->OC};
    if ((st = md4(&u_src, s->B, s->C, s->H, s->W, uin, dnnl_nchw)) ||
        (st = md4(&u_wei, s->OC, s->C, s->KH, s->KW, uin, dnnl_oihw)) ||
        (st = md4(&u_dst, s->B, s->OC, OH, OW, f, dnnl_nchw)) ||
        (st = md4(&u_ddst, s->B, s->OC, OH, OW, uin, dnnl_nchw)) ||
        (st = md4(&u_dsrc, s->B, s->C, s->H, s->W, f, dnnl_nchw)) ||
        (st = md4(&u_dwei, s->OC, s->C, s->KH, s->KW, f, dnnl_oihw)) ||
        (st = md4(&f_src, s->B, s->C, s->H, s->W, in, act_f)) ||
        (st = md4(&f_wei, s->OC, s->C, s->KH, s->KW, in, wt_f)) ||
        (st = md4(&f_dst, s->B, s->OC, OH, OW, f, act_f)) ||
        (st = md4(&a_src, s->B, s->C, s->H, s->W, in, act)) ||
        (st = md4(&a_wei, s->OC, s->C, s->KH, s->KW, in, wt)) ||
        (st = md4(&a_ddst, s->B, s->OC, OH, OW, in, act)) ||
        (st = md4(&a_dsrc, s->B, s->C, s->H, s->W, f, act)) ||
        (st = md4(&a_dwei, s->OC, s->C, s->KH, s->KW, f, wt)) ||
        (st = dnnl_util_check(dnnl_memory_desc_init_by_tag(&bias, 1, bdims, f, dnnl_a), "md")))
        goto fail;
    /* PyTorch's floor mode: the right padding is whatever makes the output OH x OW,
     * which may be less than the left padding (or negative) when the stride does not
     * divide the padded extent. */
    dnnl_dims_t strides = {s->stride_h, s->stride_w}, pad_l = {s->pad_h, s->pad_w};
    dnnl_dims_t pad_r = {(int64_t)(OH - 1) * s->stride_h + s->KH - s->H - s->pad_h,
                         (int64_t)(OW - 1) * s->stride_w + s->KW - s->W - s->pad_w};

    dnnl_convolution_desc_t fd, dd, wd;
    dnnl_alg_kind_t alg =
        cpu_conv_winograd(s, k->prec) ? dnnl_convolution_auto : dnnl_convolution_direct;
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    st = dnnl_util_check(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &f_src,
                                                            &f_wei, s->has_bias ? &bias : NULL,
                                                            &f_dst, strides, pad_l, pad_r),
                         "convolution forward desc");
    if (st == STOKE_OK)
        st = make_pd(&fpd, &fd, NULL, k->relu, "convolution forward");
    if (st == STOKE_OK)
        st = dnnl_util_check(dnnl_convolution_backward_data_desc_init(
                                 &dd, alg, &a_dsrc, &a_wei, &a_ddst, strides, pad_l, pad_r),
                             "convolution backward data desc");
    if (st == STOKE_OK)
        st = make_pd(&dpd, &dd, fpd, 0, "convolution backward data");
    if (st == STOKE_OK)
        st = dnnl_util_check(dnnl_convolution_backward_weights_desc_init(
                                 &wd, alg, &a_src, &a_dwei, s->has_bias ? &bias : NULL, &a_ddst,
                                 strides, pad_l, pad_r),
                             "convolution backward weights desc");
    if (st == STOKE_OK)
        st = make_pd(&wpd, &wd, fpd, 0, "convolution backward weights");

    size_t fph = 0, dph = 0, wph = 0;
    if (st == STOKE_OK)
        st = dnnl_util_prim_init(&e->fwd, fpd, "convolution forward");
    if (st == STOKE_OK)
        st = dnnl_util_prim_init(&e->bwd_d, dpd, "convolution backward data");
    if (st == STOKE_OK)
        st = dnnl_util_prim_init(&e->bwd_w, wpd, "convolution backward weights");
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->f_src, &u_src, q(fpd, dnnl_query_src_md), DNNL_UTIL_IN, &fph);
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->f_wei, &u_wei, q(fpd, dnnl_query_weights_md), DNNL_UTIL_IN,
                                &fph);
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->f_dst, &u_dst, q(fpd, dnnl_query_dst_md), DNNL_UTIL_OUT, &fph);
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->d_ddst, &u_ddst, q(dpd, dnnl_query_diff_dst_md), DNNL_UTIL_IN,
                                &dph);
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->d_wei, &u_wei, q(dpd, dnnl_query_weights_md), DNNL_UTIL_IN,
                                &dph);
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->d_dsrc, &u_dsrc, q(dpd, dnnl_query_diff_src_md),
                                DNNL_UTIL_OUT_ACC, &dph);
    /* The output gradient goes first in both backward phases, so when both primitives
     * want it in the same layout, backward-weights reuses backward-data's copy. */
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->w_ddst, &u_ddst, q(wpd, dnnl_query_diff_dst_md), DNNL_UTIL_IN,
                                &wph);
    if (st == STOKE_OK)
        e->share_ddst =
            e->d_ddst.reorder && e->w_ddst.reorder && e->d_ddst.ws_off == 0 &&
            e->w_ddst.ws_off == 0 &&
            dnnl_memory_desc_equal(q(dpd, dnnl_query_diff_dst_md), q(wpd, dnnl_query_diff_dst_md));
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->w_src, &u_src, q(wpd, dnnl_query_src_md), DNNL_UTIL_IN, &wph);
    if (st == STOKE_OK)
        st = dnnl_util_arg_init(&e->w_dwei, &u_dwei, q(wpd, dnnl_query_diff_weights_md),
                                DNNL_UTIL_OUT_ACC, &wph);
    if (st == STOKE_OK && s->has_bias) {
        st =
            dnnl_util_check(dnnl_memory_create(&e->f_bias, &bias, eng, DNNL_MEMORY_NONE), "memory");
        if (st == STOKE_OK)
            st = dnnl_util_check(dnnl_memory_create(&e->w_dbias, &bias, eng, DNNL_MEMORY_NONE),
                                 "memory");
        e->w_dbias_off = wph;
        wph += dnnl_util_align((size_t)s->OC * sizeof(float));
    }
    size_t xbytes = 0;
    if (st == STOKE_OK && k->relu)
        st = fused_init(e, fpd, dpd, wpd, &xbytes);
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (dpd)
        dnnl_primitive_desc_destroy(dpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (st != STOKE_OK)
        goto fail;
    size_t sp = max3(e->fwd.scratch_bytes, e->bwd_d.scratch_bytes, e->bwd_w.scratch_bytes);
    dnnl_util_arg *args[] = {&e->f_src,  &e->f_wei, &e->f_dst,  &e->d_ddst, &e->d_wei,
                             &e->d_dsrc, &e->w_src, &e->w_ddst, &e->w_dwei};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        if (args[i]->scratch_bytes > sp)
            sp = args[i]->scratch_bytes;
    e->scratch_bytes = dnnl_util_align(sp);
    e->x_off = dnnl_util_align(max3(fph, dph, wph));
    e->ws_bytes = e->scratch_bytes + (k->relu ? e->x_off + xbytes : max3(fph, dph, wph));
    *value = e;
    return STOKE_OK;
fail:
    conv_entry_free(e);
    return st;
}

int cpu_conv_winograd(const cpu_conv2d_shape *s, int prec)
{
    return prec == CPU_CONV_FP32 && s->C >= 16 && s->KH == 3 && s->KW == 3 && s->stride_h == 1 &&
           s->stride_w == 1;
}

static void conv_entry_destroy(void *value) { conv_entry_free(value); }

stoke_status cpu_conv_entry_get(const cpu_conv2d_shape *s, int prec, int relu, conv_entry **e)
{
    if (prec < CPU_CONV_FP32 || prec > CPU_CONV_MIXED_BF16)
        return stoke_fail(STOKE_ERR_ARG, "conv2d: precision %d is not a cpu_conv_prec", prec);
    conv_key k;
    memset(&k, 0, sizeof k);
    k.s = *s;
    k.s.has_bias = s->has_bias != 0;
    /* With under 4 input channels the bf16 kernels are slower than fp32 (a reduction of
     * C*KH*KW = 9 cannot fill AMX tiles; measured on the CNN's first layer), so mixed
     * precision keeps fp32 math there: it is allowed, not required, to round. */
    k.prec = prec == CPU_CONV_MIXED_BF16 && s->C < 4 ? CPU_CONV_FP32 : prec;
    k.layout = atomic_load(&cpu_ctx_current()->conv_layout);
    /* oneDNN sizes a primitive for the calling thread's OpenMP count when it creates
     * it, which must be the count it runs with: the context's (planning calls this
     * before any kernel has applied it). */
    k.threads = cpu_threads_apply();
    k.relu = relu != 0;
    stoke_status st = cpu_conv2d_out_size(s, NULL, NULL);
    if (st != STOKE_OK)
        return st;
    void *v = NULL;
    st = dnnl_util_cache_get(&k, sizeof k, conv_create, conv_entry_destroy, &v);
    *e = v;
    return st;
}

stoke_status cpu_conv2d_prepare(const cpu_conv2d_shape *s, int prec)
{
    conv_entry *e = NULL;
    return cpu_conv_entry_get(s, prec, 0, &e);
}

stoke_status cpu_conv2d_workspace(const cpu_conv2d_shape *s, int prec, size_t *bytes)
{
    conv_entry *e = NULL;
    stoke_status st = cpu_conv_entry_get(s, prec, 0, &e);
    /* Room to align an arbitrary caller pointer to DNNL_UTIL_ALIGN. */
    *bytes = st == STOKE_OK && e->ws_bytes ? e->ws_bytes + DNNL_UTIL_ALIGN : 0;
    return st;
}

/* Locks the entry and resolves the workspace: the caller's, or the entry's own. */
stoke_status cpu_conv_begin(const cpu_conv2d_shape *s, int prec, int relu, void *ws, size_t ws_size,
                            conv_entry **out, char **base)
{
    cpu_threads_apply();
    conv_entry *e = NULL;
    stoke_status st = cpu_conv_entry_get(s, prec, relu, &e);
    if (st != STOKE_OK)
        return st;
    pthread_mutex_lock(&e->lock);
    if (ws && e->ws_bytes) {
        uintptr_t p = (uintptr_t)ws, aligned = dnnl_util_align(p);
        if (ws_size < aligned - p + e->ws_bytes) {
            pthread_mutex_unlock(&e->lock);
            return stoke_fail(STOKE_ERR_ARG, "conv2d: workspace of %zu bytes, %zu needed", ws_size,
                              e->ws_bytes + DNNL_UTIL_ALIGN);
        }
        ws = (void *)aligned;
    } else if (!ws) {
        if (!e->owned && e->ws_bytes)
            e->owned = aligned_alloc(DNNL_UTIL_ALIGN, e->ws_bytes);
        if (!e->owned && e->ws_bytes) {
            pthread_mutex_unlock(&e->lock);
            return stoke_fail(STOKE_ERR_NOMEM, "conv2d: cannot allocate %zu bytes of workspace",
                              e->ws_bytes);
        }
        ws = e->owned;
    }
    *out = e;
    *base = ws;
    return STOKE_OK;
}

stoke_status cpu_conv_run_forward(conv_entry *e, dnnl_memory_t dst, const float *bias,
                                  void *scratch, const char *what)
{
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, e->f_src.prim}, {DNNL_ARG_WEIGHTS, e->f_wei.prim}, {DNNL_ARG_DST, dst}};
    int n = 3;
    if (bias) {
        dnnl_memory_set_data_handle(e->f_bias, (void *)(uintptr_t)bias);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->f_bias};
    }
    return dnnl_util_exec(&e->fwd, n, args, scratch, what);
}

stoke_status cpu_conv_run_backward_weights(conv_entry *e, dnnl_memory_t ddst, float *dbias,
                                           char *phase, void *scratch, const char *what)
{
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->w_src.prim},
                               {DNNL_ARG_DIFF_DST, ddst},
                               {DNNL_ARG_DIFF_WEIGHTS, e->w_dwei.prim}};
    int n = 3;
    float *db = (float *)(phase + e->w_dbias_off);
    if (dbias) {
        dnnl_memory_set_data_handle(e->w_dbias, db);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, e->w_dbias};
    }
    stoke_status st = dnnl_util_exec(&e->bwd_w, n, args, scratch, what);
    if (st == STOKE_OK)
        st = dnnl_util_arg_push(&e->w_dwei, scratch);
    if (st == STOKE_OK && dbias)
        for (int o = 0; o < e->OC; o++)
            dbias[o] += db[o];
    return st;
}

static stoke_status conv_forward(float *out, const void *inp, const void *weight, const float *bias,
                                 const cpu_conv2d_shape *s, void *ws, size_t ws_size, int prec)
{
    if ((bias != NULL) != (s->has_bias != 0))
        return stoke_fail(STOKE_ERR_ARG, "conv2d forward: bias %s but shape has_bias=%d",
                          bias ? "given" : "missing", s->has_bias);
    conv_entry *e = NULL;
    char *ws_base;
    stoke_status st = cpu_conv_begin(s, prec, 0, ws, ws_size, &e, &ws_base);
    if (st != STOKE_OK)
        return st;
    char *phase = ws_base + e->scratch_bytes;
    dnnl_util_arg_bind(&e->f_src, inp, phase);
    dnnl_util_arg_bind(&e->f_wei, weight, phase);
    dnnl_util_arg_bind(&e->f_dst, out, phase);
    st = dnnl_util_arg_pull(&e->f_src, ws_base);
    if (st == STOKE_OK)
        st = dnnl_util_arg_pull(&e->f_wei, ws_base);
    if (st == STOKE_OK)
        st = cpu_conv_run_forward(e, e->f_dst.prim, bias, ws_base, "convolution forward");
    if (st == STOKE_OK)
        st = dnnl_util_arg_push(&e->f_dst, ws_base);
    pthread_mutex_unlock(&e->lock);
    return st;
}

static stoke_status conv_backward(float *dinp, float *dweight, float *dbias, const void *dout,
                                  const void *inp, const void *weight, const cpu_conv2d_shape *s,
                                  void *ws, size_t ws_size, int prec)
{
    if ((dbias != NULL) != (s->has_bias != 0))
        return stoke_fail(STOKE_ERR_ARG, "conv2d backward: dbias %s but shape has_bias=%d",
                          dbias ? "given" : "missing", s->has_bias);
    conv_entry *e = NULL;
    char *ws_base;
    stoke_status st = cpu_conv_begin(s, prec, 0, ws, ws_size, &e, &ws_base);
    if (st != STOKE_OK)
        return st;
    char *phase = ws_base + e->scratch_bytes;
    if (dinp) {
        dnnl_util_arg_bind(&e->d_ddst, dout, phase);
        dnnl_util_arg_bind(&e->d_wei, weight, phase);
        dnnl_util_arg_bind(&e->d_dsrc, dinp, phase);
        st = dnnl_util_arg_pull(&e->d_ddst, ws_base);
        if (st == STOKE_OK)
            st = dnnl_util_arg_pull(&e->d_wei, ws_base);
        if (st == STOKE_OK) {
            dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, e->d_ddst.prim},
                                       {DNNL_ARG_WEIGHTS, e->d_wei.prim},
                                       {DNNL_ARG_DIFF_SRC, e->d_dsrc.prim}};
            st = dnnl_util_exec(&e->bwd_d, 3, args, ws_base, "convolution backward data");
        }
        if (st == STOKE_OK)
            st = dnnl_util_arg_push(&e->d_dsrc, ws_base);
    }
    if (st == STOKE_OK) {
        dnnl_util_arg_bind(&e->w_src, inp, phase);
        dnnl_util_arg_bind(&e->w_ddst, dout, phase);
        dnnl_util_arg_bind(&e->w_dwei, dweight, phase);
        st = dnnl_util_arg_pull(&e->w_src, ws_base);
        if (st == STOKE_OK && !(dinp && e->share_ddst))
            st = dnnl_util_arg_pull(&e->w_ddst, ws_base);
    }
    if (st == STOKE_OK)
        st = cpu_conv_run_backward_weights(e, e->w_ddst.prim, dbias, phase, ws_base,
                                           "convolution backward weights");
    pthread_mutex_unlock(&e->lock);
    return st;
}

stoke_status cpu_conv2d_forward(float *out, const float *inp, const float *weight,
                                const float *bias, const cpu_conv2d_shape *s, void *ws,
                                size_t ws_size)
{
    return conv_forward(out, inp, weight, bias, s, ws, ws_size, CPU_CONV_FP32);
}

stoke_status cpu_conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const cpu_conv2d_shape *s,
                                 void *ws, size_t ws_size)
{
    return conv_backward(dinp, dweight, dbias, dout, inp, weight, s, ws, ws_size, CPU_CONV_FP32);
}

stoke_status cpu_conv2d_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                     const float *bias, const cpu_conv2d_shape *s, void *ws,
                                     size_t ws_size)
{
    return conv_forward(out, inp, weight, bias, s, ws, ws_size, CPU_CONV_BF16);
}

stoke_status cpu_conv2d_backward_bf16(float *dinp, float *dweight, float *dbias,
                                      const uint16_t *dout, const uint16_t *inp,
                                      const uint16_t *weight, const cpu_conv2d_shape *s, void *ws,
                                      size_t ws_size)
{
    return conv_backward(dinp, dweight, dbias, dout, inp, weight, s, ws, ws_size, CPU_CONV_BF16);
}

stoke_status cpu_conv2d_forward_mixed(float *out, const float *inp, const float *weight,
                                      const float *bias, const cpu_conv2d_shape *s, void *ws,
                                      size_t ws_size)
{
    return conv_forward(out, inp, weight, bias, s, ws, ws_size, CPU_CONV_MIXED_BF16);
}

stoke_status cpu_conv2d_backward_mixed(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const float *inp, const float *weight,
                                       const cpu_conv2d_shape *s, void *ws, size_t ws_size)
{
    return conv_backward(dinp, dweight, dbias, dout, inp, weight, s, ws, ws_size,
                         CPU_CONV_MIXED_BF16);
}

/* ---- pooling: memory-bound loops over independent planes, hand-written because they
 * are short and keep NCHW without oneDNN's reorders; one plane per OpenMP iteration,
 * so results do not depend on the thread count. ---- */

stoke_status cpu_pool2d_out_size(const cpu_pool2d_shape *s, int *OH, int *OW)
{
    if (s->B <= 0 || s->C <= 0 || s->H <= 0 || s->W <= 0)
        return stoke_fail(STOKE_ERR_ARG, "pool2d: sizes B=%d C=%d H=%d W=%d must be positive", s->B,
                          s->C, s->H, s->W);
    if (s->KH <= 0 || s->KW <= 0 || s->stride_h <= 0 || s->stride_w <= 0)
        return stoke_fail(STOKE_ERR_ARG, "pool2d: kernel %dx%d and stride %dx%d must be positive",
                          s->KH, s->KW, s->stride_h, s->stride_w);
    if (s->pad_h < 0 || s->pad_w < 0 || 2 * s->pad_h > s->KH || 2 * s->pad_w > s->KW)
        return stoke_fail(STOKE_ERR_ARG,
                          "pool2d: padding %dx%d must be non-negative and at most half the "
                          "kernel %dx%d",
                          s->pad_h, s->pad_w, s->KH, s->KW);
    return window_out("pool2d", s->H, s->W, s->KH, s->KW, s->stride_h, s->stride_w, s->pad_h,
                      s->pad_w, OH, OW);
}

static void pool_dims(const cpu_pool2d_shape *s, int *OH, int *OW)
{
    *OH = (s->H + 2 * s->pad_h - s->KH) / s->stride_h + 1;
    *OW = (s->W + 2 * s->pad_w - s->KW) / s->stride_w + 1;
}

/* Offset in the plane of the window's first maximum (row-major window order). */
static inline int window_argmax(const float *x, const cpu_pool2d_shape *s, int oh, int ow)
{
    int h0 = oh * s->stride_h - s->pad_h, w0 = ow * s->stride_w - s->pad_w;
    int h1 = h0 + s->KH < s->H ? h0 + s->KH : s->H, w1 = w0 + s->KW < s->W ? w0 + s->KW : s->W;
    if (h0 < 0)
        h0 = 0;
    if (w0 < 0)
        w0 = 0;
    int best = h0 * s->W + w0;
    float bv = x[best];
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++)
            if (x[h * s->W + w] > bv) {
                bv = x[h * s->W + w];
                best = h * s->W + w;
            }
    return best;
}

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int is_pool2x2(const cpu_pool2d_shape *s)
{
    return s->KH == 2 && s->KW == 2 && s->stride_h == 2 && s->stride_w == 2 && s->pad_h == 0 &&
           s->pad_w == 0;
}

void cpu_maxpool2d_forward(float *out, const float *inp, const cpu_pool2d_shape *s)
{
    cpu_threads_apply();
    int OH, OW;
    pool_dims(s, &OH, &OW);
    long planes = (long)s->B * s->C;
    size_t isz = (size_t)s->H * s->W, osz = (size_t)OH * OW;
    int fast = is_pool2x2(s);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + p * isz;
        float *y = out + p * osz;
        if (fast) {
            for (int oh = 0; oh < OH; oh++) {
                const float *r0 = x + 2 * oh * s->W, *r1 = r0 + s->W;
                float *yr = y + oh * OW;
                for (int ow = 0; ow < OW; ow++) {
                    /* Branch-free max in the same order; the compiler vectorizes it. */
                    float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
                    float m = b > a ? b : a;
                    m = c > m ? c : m;
                    yr[ow] = d > m ? d : m;
                }
            }
            continue;
        }
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                y[oh * OW + ow] = x[window_argmax(x, s, oh, ow)];
    }
}

void cpu_maxpool2d_backward(float *dinp, const float *dout, const float *inp,
                            const cpu_pool2d_shape *s)
{
    cpu_threads_apply();
    int OH, OW;
    pool_dims(s, &OH, &OW);
    long planes = (long)s->B * s->C;
    size_t isz = (size_t)s->H * s->W, osz = (size_t)OH * OW;
    int fast = is_pool2x2(s);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + p * isz;
        float *dx = dinp + p * isz;
        const float *dy = dout + p * osz;
        if (fast) {
            for (int oh = 0; oh < OH; oh++) {
                const float *r0 = x + 2 * oh * s->W, *r1 = r0 + s->W;
                float *d0 = dx + 2 * oh * s->W, *d1 = d0 + s->W;
                const float *g = dy + oh * OW;
#pragma omp simd
                for (int ow = 0; ow < OW; ow++) {
                    /* Branch-free, since random data defeats the branch predictor (a
                     * float == compiles to branches for NaN): m is bit-identical to the
                     * element it was taken from, so integer compares of the bits find
                     * the first maximum, which is the one forward's strict-> scan keeps.
                     * Windows do not overlap: each input gets at most one gradient. */
                    float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
                    float m = b > a ? b : a;
                    m = c > m ? c : m;
                    m = d > m ? d : m;
                    uint32_t ua = f2u(a), ub = f2u(b), uc = f2u(c), um = f2u(m), ug = f2u(g[ow]);
                    uint32_t k0 = 0u - (uint32_t)(ua == um);
                    uint32_t k1 = ~k0 & (0u - (uint32_t)(ub == um));
                    uint32_t k2 = ~(k0 | k1) & (0u - (uint32_t)(uc == um));
                    uint32_t k3 = ~(k0 | k1 | k2);
                    d0[2 * ow] += u2f(ug & k0);
                    d0[2 * ow + 1] += u2f(ug & k1);
                    d1[2 * ow] += u2f(ug & k2);
                    d1[2 * ow + 1] += u2f(ug & k3);
                }
            }
            continue;
        }
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                dx[window_argmax(x, s, oh, ow)] += dy[oh * OW + ow];
    }
}

void cpu_avgpool2d_forward(float *out, const float *inp, const cpu_pool2d_shape *s)
{
    cpu_threads_apply();
    int OH, OW;
    pool_dims(s, &OH, &OW);
    long planes = (long)s->B * s->C;
    size_t isz = (size_t)s->H * s->W, osz = (size_t)OH * OW;
    float inv = 1.0f / (float)(s->KH * s->KW);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + p * isz;
        float *y = out + p * osz;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int h0 = oh * s->stride_h - s->pad_h, w0 = ow * s->stride_w - s->pad_w;
                float sum = 0.0f;
                for (int h = h0 < 0 ? 0 : h0; h < h0 + s->KH && h < s->H; h++)
                    for (int w = w0 < 0 ? 0 : w0; w < w0 + s->KW && w < s->W; w++)
                        sum += x[h * s->W + w];
                y[oh * OW + ow] = sum * inv;
            }
    }
}

void cpu_avgpool2d_backward(float *dinp, const float *dout, const cpu_pool2d_shape *s)
{
    cpu_threads_apply();
    int OH, OW;
    pool_dims(s, &OH, &OW);
    long planes = (long)s->B * s->C;
    size_t isz = (size_t)s->H * s->W, osz = (size_t)OH * OW;
    float inv = 1.0f / (float)(s->KH * s->KW);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        float *dx = dinp + p * isz;
        const float *dy = dout + p * osz;
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                int h0 = oh * s->stride_h - s->pad_h, w0 = ow * s->stride_w - s->pad_w;
                float g = dy[oh * OW + ow] * inv;
                for (int h = h0 < 0 ? 0 : h0; h < h0 + s->KH && h < s->H; h++)
                    for (int w = w0 < 0 ? 0 : w0; w < w0 + s->KW && w < s->W; w++)
                        dx[h * s->W + w] += g;
            }
    }
}

void cpu_global_avgpool_forward(float *out, const float *inp, int B, int C, int H, int W)
{
    cpu_threads_apply();
    long planes = (long)B * C;
    size_t hw = (size_t)H * W;
    float inv = 1.0f / (float)hw;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        const float *x = inp + p * hw;
        float sum = 0.0f;
        for (size_t i = 0; i < hw; i++)
            sum += x[i];
        out[p] = sum * inv;
    }
}

void cpu_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int H, int W)
{
    cpu_threads_apply();
    long planes = (long)B * C;
    size_t hw = (size_t)H * W;
    float inv = 1.0f / (float)hw;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        float g = dout[p] * inv;
        float *dx = dinp + p * hw;
        for (size_t i = 0; i < hw; i++)
            dx[i] += g;
    }
}
