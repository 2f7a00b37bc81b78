/* seam.h - the CUDA context's one test seam: what a new context runs with, which a
 * test may change before anything is planned on it. Only tests include this header;
 * nothing in src/ installs a hook (docs/testing.md). */
#ifndef STOKE_NN_CUDA_SEAM_H
#define STOKE_NN_CUDA_SEAM_H

#include "nn/cuda/ctx.h"

/* What cuda_ctx_new decided for a context from its options and its device. */
typedef struct cuda_ctx_cfg {
    bool tf32;                /* fp32 products on TF32 (cuBLAS math mode, cuDNN, cuBLASLt) */
    cuda_attention attention; /* CUDA_ATTN_AUTO */
} cuda_ctx_cfg;

/* Called by every cuda_ctx_new with the context's device and cfg, before the
 * libraries are set up and before any plan, so a test forces a choice (the fused
 * attention at any length, fp32 products on a TF32 device) on the contexts its models
 * create. NULL (the default) leaves cfg as decided. Not thread-safe against contexts
 * being made: install it between models. */
typedef void (*cuda_ctx_hook)(const cuda_ctx *c, cuda_ctx_cfg *cfg);
void cuda_set_ctx_hook(cuda_ctx_hook hook);

#endif
