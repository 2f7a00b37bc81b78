/* conv_impl.h - the cached oneDNN convolution entry shared by conv.c (the plain
 * convolution) and conv_block.c (convolution -> ReLU -> max-pool fused). Internal to
 * src/nn/cpu. */
#ifndef STOKE_NN_CPU_CONV_IMPL_H
#define STOKE_NN_CPU_CONV_IMPL_H

#include <pthread.h>

#include "nn/cpu/conv.h"
#include "nn/cpu/dnnl_util.h"

typedef struct conv_key {
    cpu_conv2d_shape s;
    int prec, layout, threads; /* prec: cpu_conv_prec */
    int relu;                  /* the forward primitive applies ReLU (fused block) */
} conv_key;

/* Where element (n, c, h, w) of a 4-D activation lives in a oneDNN layout the fused
 * kernels can address: channels in blocks of cb, element offset
 * n*sn + (c / cb)*scb + (c % cb) + h*sh + w*sw (plain NCHW: cb = 1, scb = H*W; NHWC:
 * cb = C, one block; nChw16c: cb = 16). */
typedef struct conv_layout {
    int64_t sn, scb, sh, sw;
    int cb;
    int bf16;     /* elements are bf16 bits, else fp32 */
    size_t bytes; /* of the whole tensor */
} conv_layout;

/* One cached shape. Forward, backward-data and backward-weights each form a phase
 * whose reordered tensors live in the workspace after the shared scratchpad:
 * ws = [scratchpad (max over all primitives)][phase region (max over phases)]. The
 * lock serializes calls of one shape, since the memory handles are per call.
 * A fused entry (key.relu) adds, after the phase region at x_off, the convolution's
 * output in the forward primitive's layout, or in backward its output gradient in
 * the backward primitives' layouts (x_ddst, then x_wddst when theirs differs). */
typedef struct conv_entry {
    pthread_mutex_t lock;
    dnnl_util_prim fwd, bwd_d, bwd_w;
    dnnl_util_arg f_src, f_wei, f_dst;
    dnnl_util_arg d_ddst, d_wei, d_dsrc;
    dnnl_util_arg w_src, w_ddst, w_dwei;
    dnnl_memory_t f_bias, w_dbias;
    size_t w_dbias_off;
    size_t scratch_bytes, ws_bytes;
    void *owned; /* the workspace used when callers pass none */
    int OC, OH, OW;
    int share_ddst; /* backward-weights reads backward-data's reordered dout */
    /* fused block only */
    int fusable;                          /* every layout below is a conv_layout */
    dnnl_memory_t x_dst, x_ddst, x_wddst; /* x_wddst == x_ddst when the layouts agree */
    conv_layout l_dst, l_ddst, l_wddst;
    size_t x_off;
} conv_entry;

/* Whether oneDNN may choose Winograd F(4x4, 3x3) (its "auto" algorithm) for the
 * shape: fp32 3x3 stride-1 convolutions from 16 input channels. Measured on the
 * reference CNN's second convolution (32 -> 64 channels, 14x14, batch 128), forward
 * 2.94 -> 2.35 ms and backward 6.28 -> 4.95 ms on 2 threads, and the whole fp32
 * training step about 10% faster; with fewer channels it pads them to 16 and is
 * several times slower than direct. Over a batch split in small chunks it gains
 * nothing, so the fused block does not split such shapes. */
int cpu_conv_winograd(const cpu_conv2d_shape *s, int prec);

/* The cached entry for a shape, precision and fusion (relu), created on first use. */
stoke_status cpu_conv_entry_get(const cpu_conv2d_shape *s, int prec, int relu, conv_entry **e);

/* Locks the entry and resolves the workspace (the caller's, aligned, or the entry's
 * own); the caller unlocks e->lock. */
stoke_status cpu_conv_begin(const cpu_conv2d_shape *s, int prec, int relu, void *ws, size_t ws_size,
                            conv_entry **out, char **base);

/* The entry's forward primitive from its (pulled) source and weights into dst, with
 * the bias if given. */
stoke_status cpu_conv_run_forward(conv_entry *e, dnnl_memory_t dst, const float *bias,
                                  void *scratch, const char *what);

/* Its backward-weights primitive from the (pulled) source and the output gradient
 * ddst: the weight gradient added into the bound user buffer, the bias gradient into
 * dbias (when given) through the phase region. */
stoke_status cpu_conv_run_backward_weights(conv_entry *e, dnnl_memory_t ddst, float *dbias,
                                           char *phase, void *scratch, const char *what);

#endif
