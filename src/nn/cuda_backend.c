/* cuda_backend.c - the CUDA backend's table (backend_impl.h): memory through the CUDA
 * runtime on the context's stream, matmuls through cuBLASLt (the linear layer, its
 * chain linear -> relu fused) and cuBLAS (attention), convolutions and pooling through
 * cuDNN (the chain conv -> relu -> max-pool fused there), everything else through the
 * kernel table (src/nn/cuda/launch.h), whose host
 * build the tests run against the CUDA test doubles. Every op is queued on one stream,
 * so ops are ordered without waits; the host waits only where it reads a value (a
 * loss, the gradient norm) or at sync. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/ops.h"

static stoke_status nop(void *ctx, const nn_exec_args *a)
{
    (void)ctx;
    (void)a;
    return STOKE_OK;
}

/* ---- memory ---- */

static void *cuda_alloc(void *ctx, size_t bytes)
{
    cuda_ctx *c = ctx;
    void *p = NULL;
    /* cudaMalloc's blocks are 256-byte aligned, past the 64 the table promises */
    if (stoke_cudart_malloc(c->rt, bytes ? bytes : 1, &p) != STOKE_OK)
        return NULL;
    if (stoke_cudart_memset_async(c->rt, p, 0, bytes, c->L.stream) != STOKE_OK) {
        stoke_cudart_free(c->rt, p);
        return NULL;
    }
    return p;
}

static void cuda_free(void *ctx, void *p)
{
    cuda_ctx *c = ctx;
    if (!p)
        return;
    /* cudaFree would wait for the device anyway; waiting on the stream first keeps
     * the order explicit for the doubles, which check it */
    cuda_note(c, stoke_cudart_stream_sync(c->rt, c->L.stream));
    stoke_cudart_free(c->rt, p);
}

static void cuda_zero(void *ctx, void *p, size_t bytes)
{
    cuda_ctx *c = ctx;
    cuda_note(c, stoke_cudart_memset_async(c->rt, p, 0, bytes, c->L.stream));
}

static void cuda_read(void *ctx, void *host, const void *dev, size_t bytes)
{
    cuda_ctx *c = ctx;
    stoke_status st = stoke_cudart_copy_to_host_async(c->rt, host, dev, bytes, c->L.stream);
    if (st == STOKE_OK)
        st = stoke_cudart_stream_sync(c->rt, c->L.stream);
    if (st != STOKE_OK)
        memset(host, 0, bytes);
    cuda_note(c, st);
}

static void cuda_write(void *ctx, void *dev, const void *host, size_t bytes)
{
    cuda_note(ctx, cuda_stage_write(ctx, dev, host, bytes));
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    cuda_ctx *c = ctx;
    cuda_note(c, stoke_cudart_copy_on_device_async(c->rt, dst, src, bytes, c->L.stream));
}

static void cuda_to_lowp_(void *ctx, stoke_precision p, const float *in, uint16_t *out, size_t n)
{
    cuda_note(ctx, cuda_to_lowp(ctx, p, in, out, (int64_t)n));
}

/* The step's host scalars into device memory, queued before its graph; AdamW's
 * factors as cpu_adamw_step computes them (in double, rounded once). */
static void cuda_set_step(void *ctx, float lr, int64_t t, double inv, const stoke_optim *o)
{
    cuda_ctx *c = ctx;
    double td = (double)(t < 1 ? 1 : t), lrd = lr;
    nk_set_step_args a;
    memset(&a, 0, sizeof a);
    a.p = c->step;
    a.value.neg_lr = -lr;
    a.value.first = t <= 1;
    a.value.decay = (float)(1.0 - lrd * o->weight_decay);
    a.value.neg_step_size = (float)(-lrd / (1.0 - pow(o->beta1, td)));
    a.value.bc2_sqrt = (float)sqrt(1.0 - pow(o->beta2, td));
    a.value.inv = inv;
    a.value.clip = o->clip_norm;
    cuda_note(c, CUDA_RUN(c, set_step, 1, &a));
}

static stoke_status cuda_decide(void *ctx, const float *const *x, const size_t *n, int count)
{
    return cuda_step_decide(ctx, x, n, count);
}

static stoke_status cuda_fetch_step(void *ctx) { return cuda_step_fetch(ctx); }

static stoke_status cuda_result(void *ctx, double *norm, int *bad, bool *skip)
{
    nk_step_result r;
    stoke_status st = cuda_step_result(ctx, &r);
    *norm = r.norm;
    *bad = r.bad;
    *skip = r.skip != 0;
    return st;
}

/* The learning rate and step are set_step's (the same values as the arguments), the
 * factor and the skip step_decide's: read from device memory as the kernels run. */
static void cuda_scale(void *ctx, float *x, size_t n, float s)
{
    (void)s;
    nk_scale_args a = {x, ((cuda_ctx *)ctx)->step};
    cuda_note(ctx, CUDA_RUN((cuda_ctx *)ctx, scale, n, &a));
}

static void cuda_sgd(void *ctx, float *w, float *g, float *mom, size_t n, float lr, int64_t t,
                     const stoke_optim *o, uint16_t *w_lp, stoke_precision lp)
{
    (void)lr;
    (void)t;
    nk_sgd_args a = {w,
                     g,
                     mom,
                     w_lp,
                     ((cuda_ctx *)ctx)->step,
                     o->weight_decay,
                     o->momentum,
                     1.0f, /* 1 - dampening (0, as PyTorch's default) */
                     o->nesterov,
                     lp == STOKE_PREC_FP16};
    cuda_note(ctx, CUDA_RUN((cuda_ctx *)ctx, sgd, n, &a));
}

static void cuda_adamw(void *ctx, float *w, const float *g, float *m, float *v, size_t n, float lr,
                       int64_t t, const stoke_optim *o)
{
    (void)lr;
    (void)t;
    nk_adamw_args a = {w,
                       g,
                       m,
                       v,
                       ((cuda_ctx *)ctx)->step,
                       o->beta1,
                       o->beta2,
                       1.0f - o->beta1,
                       1.0f - o->beta2,
                       o->eps};
    cuda_note(ctx, CUDA_RUN((cuda_ctx *)ctx, adamw, n, &a));
}

static stoke_status cuda_check_optim(void *ctx, const stoke_optim *o)
{
    (void)ctx;
    return nn_optim_check(o);
}

/* ---- precision ---- */

static bool cuda_supports(void *ctx, stoke_nn_op op, stoke_precision p)
{
    (void)ctx;
    if (p == STOKE_PREC_FP32)
        return op >= 0 && op < STOKE_NN_OP_COUNT;
    return op == STOKE_NN_LINEAR || op == STOKE_NN_CONV2D || op == STOKE_NN_ATTENTION;
}

/* bf16 tensor cores from compute capability 8.0, fp16 from 7.0 */
static bool cuda_native(void *ctx, stoke_precision p)
{
    cuda_ctx *c = ctx;
    return p == STOKE_PREC_FP32 || (p == STOKE_PREC_BF16 && c->cc_major >= 8) ||
           (p == STOKE_PREC_FP16 && c->cc_major >= 7);
}

static int cuda_threads(void *ctx)
{
    (void)ctx;
    return 1; /* the host thread that queues the work */
}

static void cuda_set_threads(void *ctx, int n)
{
    (void)ctx;
    (void)n;
}

static stoke_status cuda_sync(void *ctx) { return cuda_ctx_sync(ctx); }

static stoke_status cuda_cap_begin(void *ctx) { return cuda_capture_begin(ctx); }
static stoke_status cuda_cap_end(void *ctx, void **graph)
{
    return cuda_capture_end(ctx, (cuda_graph **)graph);
}
static stoke_status cuda_replay(void *ctx, void *graph) { return cuda_graph_replay(ctx, graph); }
static void cuda_graph_free_(void *ctx, void *graph) { cuda_graph_free(ctx, graph); }

static stoke_status cuda_fwd_fetch(void *ctx, const float *const *values, int n)
{
    return cuda_forward_fetch(ctx, values, n);
}

static stoke_status cuda_fwd_check(void *ctx, int *node, float *values)
{
    return cuda_forward_check(ctx, node, values);
}

static void cuda_set_key(void *ctx, uint64_t key)
{
    cuda_ctx *c = ctx;
    nk_set_args a = {c->key, key};
    cuda_note(c, CUDA_RUN(c, set_u64, 1, &a));
}

/* ---- timing events: the step's phases on the device's clock ---- */

static void *cuda_event_new(void *ctx)
{
    cuda_ctx *c = ctx;
    stoke_gpu_event e = NULL;
    cuda_note(c, stoke_cudart_timing_event_create(c->rt, &e));
    return e;
}

static void cuda_event_free(void *ctx, void *ev)
{
    stoke_cudart_event_destroy(((cuda_ctx *)ctx)->rt, ev);
}

static void cuda_event_record(void *ctx, void *ev)
{
    cuda_ctx *c = ctx;
    if (ev)
        cuda_note(c, stoke_cudart_event_record(c->rt, ev, c->L.stream));
}

static bool cuda_event_done(void *ctx, void *ev, bool wait)
{
    cuda_ctx *c = ctx;
    if (!ev)
        return true;
    stoke_status st = wait ? stoke_cudart_event_sync(c->rt, ev) : STOKE_OK;
    bool done = wait;
    if (st == STOKE_OK && !wait)
        st = stoke_cudart_event_done(c->rt, ev, &done);
    cuda_note(c, st);
    return done || st != STOKE_OK;
}

static double cuda_event_seconds(void *ctx, void *a, void *b)
{
    cuda_ctx *c = ctx;
    double ms = 0;
    if (a && b)
        cuda_note(c, stoke_cudart_event_elapsed(c->rt, a, b, &ms));
    return ms / 1e3;
}
static void *cuda_queue(void *ctx) { return ((cuda_ctx *)ctx)->L.stream; }

static void cuda_ctx_free_(void *ctx) { cuda_ctx_free(ctx); }

/* ---- fused chains: one function per chain, in the file of the chain's first op ---- */

static stoke_status cuda_fuse(void *ctx, const stoke_graph *g, const int *chain, int n,
                              int64_t batch, stoke_precision p, const nn_fused_impl **out)
{
    *out = NULL;
    switch (g->nodes[chain[0]].op) {
    case STOKE_NN_LINEAR: return cuda_fuse_linear(ctx, g, chain, n, batch, p, out);
    case STOKE_NN_CONV2D: return cuda_fuse_conv(ctx, g, chain, n, batch, p, out);
    default: return STOKE_OK;
    }
}

static const nn_backend cuda_backend = {
    .name = "cuda",
    .ops =
        {
            [STOKE_NN_INPUT] = {nop, NULL, NULL, NULL},
            [STOKE_NN_LINEAR] = {cuda_linear_fwd, cuda_linear_bwd, cuda_linear_ws, NULL},
            [STOKE_NN_RESHAPE] = {nop, nop, NULL, NULL},
            /* conv.c, pool.c */
            [STOKE_NN_CONV2D] = {cuda_conv_fwd, cuda_conv_bwd, cuda_conv_ws, NULL},
            [STOKE_NN_MAXPOOL2D] = {cuda_pool_fwd, cuda_pool_bwd, cuda_pool_ws, NULL},
            [STOKE_NN_AVGPOOL2D] = {cuda_pool_fwd, cuda_pool_bwd, cuda_pool_ws, NULL},
            [STOKE_NN_GLOBAL_AVGPOOL] = {cuda_pool_fwd, cuda_pool_bwd, cuda_pool_ws, NULL},
            /* eltwise.c */
            [STOKE_NN_RELU] = {cuda_relu_fwd, cuda_relu_bwd, NULL, NULL},
            [STOKE_NN_GELU] = {cuda_gelu_fwd, cuda_gelu_bwd, NULL, NULL},
            [STOKE_NN_TANH] = {cuda_tanh_fwd, cuda_tanh_bwd, NULL, NULL},
            [STOKE_NN_SIGMOID] = {cuda_sigmoid_fwd, cuda_sigmoid_bwd, NULL, NULL},
            [STOKE_NN_DROPOUT] = {cuda_dropout_fwd, cuda_dropout_bwd, NULL, NULL},
            [STOKE_NN_ADD] = {cuda_add_fwd, cuda_add_bwd, NULL, NULL},
            [STOKE_NN_SOFTMAX] = {cuda_softmax_fwd, cuda_softmax_bwd, NULL, NULL},
            /* seq.c */
            [STOKE_NN_SLICE] = {cuda_slice_fwd, cuda_slice_bwd, NULL, NULL},
            [STOKE_NN_EMBEDDING] = {cuda_emb_fwd, cuda_emb_bwd, NULL, NULL},
            [STOKE_NN_POS_EMBED] = {cuda_pos_fwd, cuda_pos_bwd, NULL, NULL},
            [STOKE_NN_SEQ_MEAN] = {cuda_seqmean_fwd, cuda_seqmean_bwd, NULL, NULL},
            [STOKE_NN_PATCHIFY] = {cuda_patchify_fwd, cuda_patchify_bwd, NULL, NULL},
            /* norm.c, attn.c */
            [STOKE_NN_BATCHNORM] = {cuda_bn_fwd, cuda_bn_bwd, cuda_bn_ws, cuda_bn_saved},
            [STOKE_NN_LAYERNORM] = {cuda_ln_fwd, cuda_ln_bwd, NULL, cuda_ln_saved},
            [STOKE_NN_ATTENTION] = {cuda_attn_fwd, cuda_attn_bwd, cuda_attn_ws, cuda_attn_saved},
            /* loss.c */
            [STOKE_NN_CROSS_ENTROPY] = {cuda_loss_fwd, cuda_loss_bwd, cuda_loss_ws, NULL},
            [STOKE_NN_BCE_LOGITS] = {cuda_loss_fwd, cuda_loss_bwd, cuda_loss_ws, NULL},
            [STOKE_NN_MSE] = {cuda_loss_fwd, cuda_loss_bwd, cuda_loss_ws, NULL},
            [STOKE_NN_L1] = {cuda_loss_fwd, cuda_loss_bwd, cuda_loss_ws, NULL},
            [STOKE_NN_ACCURACY] = {cuda_loss_fwd, NULL, cuda_loss_ws, NULL},
            [STOKE_NN_MAE] = {cuda_loss_fwd, NULL, cuda_loss_ws, NULL},
            [STOKE_NN_POLICY_GRADIENT] = {cuda_loss_fwd, cuda_loss_bwd, cuda_loss_ws, NULL},
        },
    .supports = cuda_supports,
    .native = cuda_native,
    .fuse = cuda_fuse,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .zero = cuda_zero,
    .read = cuda_read,
    .write = cuda_write,
    .copy = cuda_copy,
    .to_lowp = cuda_to_lowp_,
    .scale = cuda_scale,
    .check_optim = cuda_check_optim,
    .sgd = cuda_sgd,
    .adamw = cuda_adamw,
    .threads = cuda_threads,
    .set_threads = cuda_set_threads,
    .sync = cuda_sync,
    .set_key = cuda_set_key,
    .set_step = cuda_set_step,
    .forward_fetch = cuda_fwd_fetch,
    .forward_check = cuda_fwd_check,
    .step_decide = cuda_decide,
    .step_fetch = cuda_fetch_step,
    .step_result = cuda_result,
    .capture_begin = cuda_cap_begin,
    .capture_end = cuda_cap_end,
    .replay = cuda_replay,
    .graph_free = cuda_graph_free_,
    .event_new = cuda_event_new,
    .event_free = cuda_event_free,
    .event_record = cuda_event_record,
    .event_done = cuda_event_done,
    .event_seconds = cuda_event_seconds,
    .queue = cuda_queue,
    .ctx_free = cuda_ctx_free_,
};

stoke_status nn_cuda_backend_new(int device, stoke_tf32 tf32, nn_backend **out)
{
    *out = NULL;
    nn_backend *be = malloc(sizeof *be);
    if (!be)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    *be = cuda_backend;
    cuda_ctx *c = NULL;
    stoke_status st = cuda_ctx_new(device, tf32, &c);
    if (st != STOKE_OK) {
        free(be);
        return st;
    }
    be->ctx = c;
    *out = be;
    return STOKE_OK;
}

void *nn_backend_stream(const nn_backend *be)
{
    return be && be->queue ? be->queue(be->ctx) : NULL;
}

const char *nn_backend_describe(const nn_backend *be)
{
    return be && be->ctx && strcmp(be->name, "cuda") == 0 ? ((const cuda_ctx *)be->ctx)->why : "";
}

bool stoke_nn_cuda_ready(int device, char *why, size_t size)
{
    nn_backend *be = NULL;
    bool ok = nn_cuda_backend_new(device, STOKE_TF32_AUTO, &be) == STOKE_OK;
    snprintf(why, size, "%s", ok ? nn_backend_describe(be) : stoke_last_error());
    nn_backend_free(be);
    return ok;
}

bool stoke_nn_cuda_ready_gpu(const stoke_machine *m, int g, char *why, size_t size)
{
    const stoke_gpu_info *gpu = &m->gpus[g];
    if (gpu->valid & STOKE_GPU_HAS_CUDA_INDEX)
        return stoke_nn_cuda_ready(gpu->cuda_index, why, size);
    if (stoke_machine_cuda_gpu(m, g) == g) /* no GPU matched: the runtime says why */
        return stoke_nn_cuda_ready(g, why, size);
    snprintf(why, size,
             "the CUDA runtime does not list this GPU (PCI bus id %s; CUDA_VISIBLE_DEVICES "
             "hides it?)",
             gpu->pci_bus_id);
    return false;
}
