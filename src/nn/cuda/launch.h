/* launch.h - the table of kernel launchers the CUDA backend calls: one entry per
 * kernel body of the k_*.h headers (kern.h), built twice from the same list. The
 * device build lives in the module libstoke_cuda.so (launch_device.cu, compiled by
 * nvcc and linked against the CUDA runtime), which the backend loads with dlopen, so
 * the stoke binary itself needs no CUDA library; the host build (launch_host.c) runs
 * the bodies in loops and is what the tests run against the CUDA test doubles.
 * Internal to src/nn. */
#ifndef STOKE_NN_CUDA_LAUNCH_H
#define STOKE_NN_CUDA_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "nn/cuda/k_attn.h"
#include "nn/cuda/k_base.h"
#include "nn/cuda/k_eltwise.h"
#include "nn/cuda/k_loss.h"
#include "nn/cuda/k_norm.h"
#include "nn/cuda/k_pool.h"
#include "nn/cuda/k_seq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a launch goes: the backend's stream. The host build queues each launch there
 * as a host function (`host_func`, the runtime's cudaLaunchHostFunc: 0 on success),
 * so it runs in the stream's order as a kernel would; without a stream it runs at
 * once. While the stream is captured into a graph (`capturing`), each launch's copy of
 * its arguments must outlive the launch, for every replay: `keep` hands it to the
 * graph (0 on success). The device build ignores all three. */
typedef struct nk_launch {
    void *stream;
    void *host_ctx;
    int (*host_func)(void *host_ctx, void *stream, void (*fn)(void *), void *user);
    int capturing;
    int (*keep)(void *host_ctx, void *user);
} nk_launch;

#define NK_ALL_KERNELS(X) \
    NK_BASE_KERNELS(X)    \
    NK_ATTN_KERNELS(X)    \
    NK_ELTWISE_KERNELS(X) \
    NK_LOSS_KERNELS(X)    \
    NK_NORM_KERNELS(X)    \
    NK_POOL_KERNELS(X)    \
    NK_SEQ_KERNELS(X)

/* Each entry runs nk_<name>(i, a) for i in [0, n); 0, or the runtime's error code
 * of the launch (a fault inside the kernel surfaces at the next synchronization). */
typedef struct nn_cuda_kernels {
    const char *build; /* "device (80-real 89-real 90)" or "host" */
    int min_cc;        /* the lowest compute capability it has code for (80: 8.0); 0: any */
#define NK_MEMBER(name, T) int (*name)(const nk_launch *L, int64_t n, const T *a);
    NK_ALL_KERNELS(NK_MEMBER)
#undef NK_MEMBER
} nn_cuda_kernels;

/* The module's entry point: its table if it was built with the same table layout
 * (size), else NULL (a module from another version of stoke). */
#define NN_CUDA_KERNELS_ENTRY "stoke_cuda_kernels_v1"
typedef const nn_cuda_kernels *(*nn_cuda_kernels_entry)(size_t table_size);

/* The host build's table (launch_host.c). */
const nn_cuda_kernels *nn_cuda_host_kernels(void);

#ifdef __cplusplus
}
#endif

#endif
