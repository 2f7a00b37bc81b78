/* ctx.h - the CUDA backend's context: what one model's ops run with (the runtime,
 * cuBLAS and cuDNN handles bound to the model's stream, the kernel table, scratch for
 * reductions, the first error of the entries that cannot return one). Internal to
 * src/nn. */
#ifndef STOKE_NN_CUDA_CTX_H
#define STOKE_NN_CUDA_CTX_H

#include <stdbool.h>

#include "nn/backend_impl.h"
#include "nn/cuda/launch.h"
#include "nn/cuda/libs.h"
#include "stoke/hw.h"

/* Partial sums of a reduction: enough to keep a GPU's SMs busy, few enough for one
 * thread to add them up. */
#define CUDA_SUM_STRIDE 4096

typedef struct cuda_ctx {
    stoke_cudart *rt;
    nn_cublas *blas;
    void *blas_h;
    nn_cudnn *dnn; /* loaded at the first convolution: models without one run without */
    void *dnn_h;
    void *module; /* libstoke_cuda.so, or NULL for the host build */
    const nn_cuda_kernels *k;
    nk_launch L;
    int device, cc_major, cc_minor;
    bool tf32;        /* fp32 GEMMs on TF32 tensor cores (compute capability >= 8.0) */
    double *partial;  /* CUDA_SUM_STRIDE doubles of device memory */
    double *totals;   /* ntotals doubles: one sum per tensor (cuda_ctx_totals) */
    int ntotals;
    int32_t *flag;    /* a device int kernels set to report bad input (1 + sample) */
    stoke_status err; /* the first failure of a void entry (read, write, zero, ...) */
    char err_msg[512];
    char why[256]; /* how it was set up: "cuBLAS 13, kernels: device (sm_80 ...)" */
    /* conv.c: cuDNN descriptors and algorithms per (shape, batch, precision) */
    struct cuda_conv_plan **conv_plans;
    int nconv_plans;
} cuda_ctx;

/* A context on CUDA device `device`. STOKE_ERR_UNAVAILABLE saying what is missing (no
 * runtime, no device, no cuBLAS, no kernel module), recorded. */
stoke_status cuda_ctx_new(int device, cuda_ctx **out);
void cuda_ctx_free(cuda_ctx *c);

/* A launch's or library call's result as a status: STOKE_OK, or STOKE_ERR_UNAVAILABLE
 * naming `what` with the runtime's reason (recorded). */
stoke_status cuda_check(cuda_ctx *c, int rc, const char *what);
stoke_status cuda_blas_check(cuda_ctx *c, int rc, const char *what);
stoke_status cuda_dnn_check(cuda_ctx *c, int rc, const char *what);

/* Keeps the first failure of an entry that returns nothing, for cuda_ctx_sync. */
void cuda_note(cuda_ctx *c, stoke_status st);

/* Waits for the stream; the first error noted or raised since the last call. */
stoke_status cuda_ctx_sync(cuda_ctx *c);

/* c->totals with room for at least n doubles (grown when needed). */
stoke_status cuda_ctx_totals(cuda_ctx *c, int n);

/* cuDNN, loaded and bound to the stream on first use. */
stoke_status cuda_ctx_dnn(cuda_ctx *c);

/* Frees conv.c's cached plans (their cuDNN descriptors). */
void cuda_conv_plans_free(cuda_ctx *c);

/* Runs kernel `name` over n indices with args a, as a status. */
#define CUDA_RUN(c, name, n, a) cuda_check((c), (c)->k->name(&(c)->L, (int64_t)(n), (a)), #name)

#endif
