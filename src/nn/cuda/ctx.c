/* ctx.c - setting up the CUDA backend's context: the runtime, the device, cuBLAS, the
 * kernel module, the stream every op is queued on. */
#include "core/dl.h"
#include "core/env.h"
#include "core/regular.h"
#include "core/tf32.h"
#include "nn/cuda/ops.h"
#include "nn/cuda/seam.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int host_func(void *ctx, void *stream, void (*fn)(void *), void *user)
{
    cuda_ctx *c = ctx;
    return stoke_cudart_launch_host_func(c->rt, stream, fn, user) == STOKE_OK ? 0 : 1;
}

/* The host build's launch arguments during a capture, for the graph (cuda_graph). */
static int keep(void *ctx, void *user)
{
    cuda_ctx *c = ctx;
    if (c->nkept == c->capkept) {
        int grown = c->capkept ? 2 * c->capkept : 64;
        void **k = realloc(c->kept, (size_t)grown * sizeof *k);
        if (!k)
            return 1;
        c->kept = k;
        c->capkept = grown;
    }
    c->kept[c->nkept++] = user;
    return 0;
}

static void drop_kept(cuda_ctx *c)
{
    for (int i = 0; i < c->nkept; i++)
        free(c->kept[i]);
    c->nkept = 0;
}

struct cuda_graph {
    stoke_gpu_graph exec;
    void **kept; /* the host build's launch arguments its launches point at */
    int nkept;
};

stoke_status cuda_capture_begin(cuda_ctx *c)
{
    stoke_status st = stoke_cudart_check_graph_api(c->rt);
    if (st == STOKE_OK)
        st = cuda_ctx_sync(c); /* an earlier error must not be blamed on the capture */
    if (st == STOKE_OK)
        st = stoke_cudart_capture_begin(c->rt, c->L.stream);
    c->L.capturing = st == STOKE_OK;
    return st;
}

stoke_status cuda_capture_end(cuda_ctx *c, cuda_graph **out)
{
    *out = NULL;
    c->L.capturing = 0;
    stoke_gpu_graph exec = NULL;
    stoke_status st = stoke_cudart_capture_end(c->rt, c->L.stream, &exec);
    cuda_graph *g = st == STOKE_OK ? calloc(1, sizeof *g) : NULL;
    if (st == STOKE_OK && !g)
        st = stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    if (st != STOKE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", stoke_last_error());
        stoke_cudart_graph_free(c->rt, exec);
        drop_kept(c);
        /* what failed inside the capture is the capture's, not the next call's */
        c->err = STOKE_OK;
        (void)stoke_cudart_last_error(c->rt, "");
        return stoke_fail(st, "%s", msg);
    }
    g->exec = exec;
    g->kept = c->kept;
    g->nkept = c->nkept;
    c->kept = NULL;
    c->nkept = c->capkept = 0;
    *out = g;
    return STOKE_OK;
}

stoke_status cuda_graph_replay(cuda_ctx *c, cuda_graph *g)
{
    return stoke_cudart_graph_launch(c->rt, g->exec, c->L.stream);
}

void cuda_graph_free(cuda_ctx *c, cuda_graph *g)
{
    if (!g)
        return;
    /* a launch still queued reads the arguments */
    cuda_note(c, stoke_cudart_stream_sync(c->rt, c->L.stream));
    stoke_cudart_graph_free(c->rt, g->exec);
    for (int i = 0; i < g->nkept; i++)
        free(g->kept[i]);
    free(g->kept);
    free(g);
}

/* The module sits beside the object holding this code (the stoke binary, or the
 * Python extension), or in ../lib/stoke when installed. */
static void *open_module(char *tried, size_t size)
{
    Dl_info info;
    char self[4096];
    snprintf(tried, size, "libstoke_cuda.so");
    if (!dladdr((void *)open_module, &info) || !info.dli_fname)
        return NULL;
    snprintf(self, sizeof self, "%s", info.dli_fname);
    if (strcmp(self, "") == 0 || !strchr(self, '/'))
        snprintf(self, sizeof self, "/proc/self/exe"); /* an executable's own name */
    char real[4096];
    if (!realpath(self, real))
        return NULL;
    const char *dir = dirname(real);
    static const char *const where[] = {"/libstoke_cuda.so", "/../lib/stoke/libstoke_cuda.so"};
    for (size_t i = 0; i < sizeof where / sizeof *where; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s%s", dir, where[i]);
        if (stoke_check_library(NULL, path) != STOKE_OK)
            continue; /* not there, or not a file dlopen could read without hanging */
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
    }
    snprintf(tried, size, "libstoke_cuda.so beside %s or in %s/../lib/stoke", real, dir);
    return NULL;
}

/* STOKE_CUDA_KERNELS: a module's path, or "host" for the kernels' host build, which
 * only the runtime's test double can run (its device memory is host memory). */
static stoke_status load_kernels(cuda_ctx *c)
{
    const char *env = stoke_env("STOKE_CUDA_KERNELS");
    char tried[4300];
    if (env && strcmp(env, "host") == 0) {
        if (!stoke_dl_find(c->rt, "stoke_fake_cudart")) /* hw loads rt as a core/dl.h table */
            return stoke_fail(STOKE_ERR_ARG, "STOKE_CUDA_KERNELS=host runs the kernels on the "
                                             "CPU: only for the CUDA runtime's test double");
        c->k = nn_cuda_host_kernels();
        return STOKE_OK;
    }
    if (env && *env) {
        snprintf(tried, sizeof tried, "%s", env);
        if (stoke_check_library("STOKE_CUDA_KERNELS", env) != STOKE_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", stoke_last_error());
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "the CUDA kernels %s", why);
        }
        c->module = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!c->module) {
            const char *why = dlerror();
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "the CUDA kernels STOKE_CUDA_KERNELS=%s: %s",
                              env, why ? why : "cannot be loaded");
        }
    } else {
        c->module = open_module(tried, sizeof tried);
    }
    if (!c->module)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "the CUDA kernels (%s) are missing: this stoke was built without nvcc",
                          tried);
    nn_cuda_kernels_entry entry;
    *(void **)&entry = dlsym(c->module, NN_CUDA_KERNELS_ENTRY);
    if (!entry)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s is not stoke's CUDA kernel module (no %s)",
                          tried, NN_CUDA_KERNELS_ENTRY);
    c->k = entry(sizeof(nn_cuda_kernels));
    if (!c->k)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "%s is from another build of stoke (its kernel table does not match)",
                          tried);
    return STOKE_OK;
}

static stoke_status open_device(cuda_ctx *c, int device)
{
    stoke_status st = stoke_cudart_open(&c->rt);
    if (st == STOKE_OK)
        st = stoke_cudart_check_compute_api(c->rt);
    int count = 0;
    if (st == STOKE_OK)
        st = stoke_cudart_device_count(c->rt, &count);
    if (st == STOKE_OK && (device < 0 || device >= count))
        st = stoke_fail(STOKE_ERR_UNAVAILABLE, "CUDA device %d does not exist (%d found)", device,
                        count);
    if (st == STOKE_OK)
        st = stoke_cudart_set_device(c->rt, device);
    if (st == STOKE_OK)
        st = stoke_cudart_device_cc(c->rt, device, &c->cc_major, &c->cc_minor);
    if (st == STOKE_OK)
        st = stoke_cudart_stream_create(c->rt, &c->L.stream);
    c->device = device;
    c->L.host_ctx = c;
    c->L.host_func = host_func;
    c->L.keep = keep;
    return st;
}

/* TF32 for fp32 matmuls as the option says, where the device has it (ctx.h) */
static bool tf32_of(const cuda_ctx *c, stoke_tf32 t)
{
    return t != STOKE_TF32_OFF && stoke_tf32_rule(c->cc_major, c->cc_minor);
}

static _Atomic(cuda_ctx_hook) ctx_hook;

void cuda_set_ctx_hook(cuda_ctx_hook hook) { atomic_store(&ctx_hook, hook); }

static stoke_status open_blas(cuda_ctx *c)
{
    stoke_status st = nn_cublas_open(&c->blas);
    if (st != STOKE_OK)
        return st;
    st = cuda_blas_check(c, c->blas->create(&c->blas_h), "cublasCreate");
    if (st == STOKE_OK)
        st = cuda_blas_check(c, c->blas->set_stream(c->blas_h, c->L.stream), "cublasSetStream");
    if (st == STOKE_OK)
        st = cuda_blas_check(
            c,
            c->blas->set_math_mode(c->blas_h, c->tf32 ? NC_TF32_TENSOR_OP_MATH : NC_DEFAULT_MATH),
            "cublasSetMathMode");
    if (st == STOKE_OK)
        st = nn_cublaslt_open(&c->lt);
    if (st == STOKE_OK)
        st = cuda_blas_check(c, c->lt->create(&c->lt_h), "cublasLtCreate");
    return st;
}

bool cuda_attn_fused(const cuda_ctx *c, int64_t T, int64_t hs)
{
    switch (c->attention) {
    case CUDA_ATTN_FUSED: return true;
    case CUDA_ATTN_GEMM: return false;
    case CUDA_ATTN_AUTO: break;
    }
    return T >= CUDA_ATTN_FUSED_FROM_T && hs <= NK_ATTN_MAX_HS;
}

static void describe(cuda_ctx *c)
{
    char attn[96];
    if (c->attention == CUDA_ATTN_AUTO)
        snprintf(attn, sizeof attn, "fused attention from sequence length %d",
                 CUDA_ATTN_FUSED_FROM_T);
    else
        snprintf(attn, sizeof attn, "%s attention",
                 c->attention == CUDA_ATTN_FUSED ? "fused" : "GEMM");
    snprintf(c->why, sizeof c->why, "CUDA device %d (compute capability %d.%d), kernels: %s%s, %s",
             c->device, c->cc_major, c->cc_minor, c->k->build, c->tf32 ? ", TF32 matmuls" : "",
             attn);
}

void cuda_ctx_set_attention(cuda_ctx *c, cuda_attention a)
{
    c->attention = a;
    describe(c);
}

stoke_status cuda_ctx_new(int device, stoke_tf32 tf32, cuda_ctx **out)
{
    *out = NULL;
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    stoke_status st = open_device(c, device);
    if (st == STOKE_OK)
        st = load_kernels(c);
    if (st == STOKE_OK && c->cc_major * 10 + c->cc_minor < c->k->min_cc)
        st = stoke_fail(STOKE_ERR_UNAVAILABLE,
                        "CUDA device %d has compute capability %d.%d; this stoke's kernels are "
                        "built for %d.%d and up (%s): rebuild with -DSTOKE_CUDA_ARCHS listing "
                        "%d%d-real",
                        device, c->cc_major, c->cc_minor, c->k->min_cc / 10, c->k->min_cc % 10,
                        c->k->build, c->cc_major, c->cc_minor);
    cuda_ctx_cfg cfg = {.attention = CUDA_ATTN_AUTO};
    if (st == STOKE_OK) {
        cfg.tf32 = tf32_of(c, tf32);
        cuda_ctx_hook hook = atomic_load(&ctx_hook);
        if (hook)
            hook(c, &cfg);
        c->tf32 = cfg.tf32;
        st = open_blas(c);
    }
    if (st == STOKE_OK)
        st = stoke_cudart_malloc(c->rt, CUDA_SUM_STRIDE * sizeof(double), (void **)&c->partial);
    c->tree_cap = CUDA_TREE_CAP;
    if (st == STOKE_OK)
        st = stoke_cudart_malloc(c->rt, sizeof(uint64_t), (void **)&c->key);
    if (st == STOKE_OK)
        st = stoke_cudart_malloc(c->rt, sizeof(nk_step), (void **)&c->step);
    if (st == STOKE_OK)
        st = stoke_cudart_malloc(c->rt, sizeof(nk_step_result), (void **)&c->result);
    if (st == STOKE_OK)
        st = stoke_cudart_host_alloc(c->rt, sizeof(nk_step_result), (void **)&c->result_host);
    for (int i = 0; i < 2 && st == STOKE_OK; i++)
        st = stoke_cudart_event_create(c->rt, &c->fence[i]);
    if (st != STOKE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", stoke_last_error());
        cuda_ctx_free(c);
        return stoke_fail(st, "%s", msg);
    }
    cuda_ctx_set_attention(c, cfg.attention);
    *out = c;
    return STOKE_OK;
}

/* *p with room for n elements of `size` bytes: a new zeroed buffer once the stream is
 * done with the old one, whose contents are dropped. */
static stoke_status grow(cuda_ctx *c, void **p, int *cap, int n, size_t size)
{
    if (n <= *cap)
        return STOKE_OK;
    stoke_status st = stoke_cudart_stream_sync(c->rt, c->L.stream);
    if (st != STOKE_OK)
        return st;
    stoke_cudart_free(c->rt, *p);
    *p = NULL;
    *cap = 0;
    st = stoke_cudart_malloc(c->rt, (size_t)n * size, p);
    if (st == STOKE_OK)
        st = stoke_cudart_memset_async(c->rt, *p, 0, (size_t)n * size, c->L.stream);
    if (st == STOKE_OK)
        *cap = n;
    return st;
}

stoke_status cuda_ctx_checks(cuda_ctx *c, int n)
{
    if (n <= c->nchecks)
        return STOKE_OK;
    /* the old flags' copy to the host may be queued */
    stoke_status st = stoke_cudart_stream_sync(c->rt, c->L.stream);
    cuda_input_check *k = calloc((size_t)n, sizeof *k);
    int32_t *h = NULL;
    if (st == STOKE_OK && k)
        st = stoke_cudart_host_alloc(c->rt, (size_t)n * sizeof *h, (void **)&h);
    if (st != STOKE_OK || !k) {
        free(k);
        return st != STOKE_OK ? st : stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    free(c->checks);
    stoke_cudart_host_free(c->rt, c->flags_host);
    c->checks = k;
    c->flags_host = h;
    return grow(c, (void **)&c->flags, &c->nchecks, n, sizeof(int32_t));
}

int32_t *cuda_flag_of(cuda_ctx *c, int node)
{
    return c->flags && node >= 0 && node < c->nchecks ? c->flags + node : NULL;
}

stoke_status cuda_ctx_totals(cuda_ctx *c, int n)
{
    return grow(c, (void **)&c->totals, &c->ntotals, n, sizeof(double));
}

void cuda_ctx_free(cuda_ctx *c)
{
    if (!c)
        return;
    if (c->rt && c->L.stream)
        stoke_cudart_stream_sync(c->rt, c->L.stream); /* nothing freed while in use */
    cuda_conv_plans_free(c);
    cuda_pool_plans_free(c);
    cuda_lt_plans_free(c);
    if (c->lt_h)
        c->lt->destroy(c->lt_h);
    nn_cublaslt_close(c->lt);
    if (c->dnn_h)
        c->dnn->destroy(c->dnn_h);
    nn_cudnn_close(c->dnn);
    if (c->blas_h)
        c->blas->destroy(c->blas_h);
    nn_cublas_close(c->blas);
    if (c->rt) {
        stoke_cudart_free(c->rt, c->partial);
        stoke_cudart_free(c->rt, c->tree);
        stoke_cudart_free(c->rt, c->totals);
        stoke_cudart_free(c->rt, c->key);
        stoke_cudart_free(c->rt, c->step);
        stoke_cudart_free(c->rt, c->result);
        stoke_cudart_free(c->rt, c->flags);
        stoke_cudart_host_free(c->rt, c->flags_host);
        stoke_cudart_host_free(c->rt, c->values_host);
        stoke_cudart_host_free(c->rt, c->result_host);
        cuda_stages_free(c);
        for (int i = 0; i < 2; i++)
            if (c->fence[i])
                stoke_cudart_event_destroy(c->rt, c->fence[i]);
        stoke_cudart_stream_destroy(c->rt, c->L.stream);
    }
    /* the kernel module stays loaded, as cuBLAS does (cublas.c): it links the CUDA
     * runtime's C++ code, whose allocations live as long as the process */
    stoke_cudart_close(c->rt);
    drop_kept(c);
    free(c->kept);
    free(c->checks);
    free(c);
}

stoke_status cuda_check(cuda_ctx *c, int rc, const char *what)
{
    if (rc == 0)
        return STOKE_OK;
    stoke_status st = stoke_cudart_last_error(c->rt, what);
    if (st != STOKE_OK)
        return st;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: CUDA error %d", what, rc);
}

stoke_status cuda_blas_check(cuda_ctx *c, int rc, const char *what)
{
    if (rc == NC_CUBLAS_SUCCESS)
        return STOKE_OK;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: %s", what, nn_cublas_error(c->blas, rc));
}

stoke_status cuda_dnn_check(cuda_ctx *c, int rc, const char *what)
{
    if (rc == NC_CUDNN_SUCCESS)
        return STOKE_OK;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: %s", what, nn_cudnn_error(c->dnn, rc));
}

void cuda_note(cuda_ctx *c, stoke_status st)
{
    if (st == STOKE_OK || c->err != STOKE_OK)
        return;
    c->err = st;
    snprintf(c->err_msg, sizeof c->err_msg, "%s", stoke_last_error());
}

stoke_status cuda_ctx_sync(cuda_ctx *c)
{
    cuda_note(c, stoke_cudart_stream_sync(c->rt, c->L.stream));
    stoke_status st = c->err;
    c->err = STOKE_OK;
    if (st != STOKE_OK)
        return stoke_fail(st, "%s", c->err_msg);
    return STOKE_OK;
}

stoke_status cuda_ctx_dnn(cuda_ctx *c)
{
    if (c->dnn_h)
        return STOKE_OK;
    stoke_status st = c->dnn ? STOKE_OK : nn_cudnn_open(&c->dnn);
    if (st != STOKE_OK)
        return st;
    st = cuda_dnn_check(c, c->dnn->create(&c->dnn_h), "cudnnCreate");
    if (st == STOKE_OK)
        st = cuda_dnn_check(c, c->dnn->set_stream(c->dnn_h, c->L.stream), "cudnnSetStream");
    return st;
}
