/* cublas.c - cuBLAS, loaded at run time with dlopen (as src/hw/cudart.c loads the CUDA
 * runtime), so a binary built without the toolkit still runs GEMMs on a GPU machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/libs.h"

/* Newest first; then the toolkit's default location, often not in the loader's path. */
static const char *const names[] = {"libcublas.so.13", "libcublas.so.12",
                                    "/usr/local/cuda/lib64/libcublas.so.13",
                                    "/usr/local/cuda/lib64/libcublas.so.12", NULL};

static const nn_dl_sym syms[] = {
    {"cublasCreate_v2", offsetof(nn_cublas, create), 0},
    {"cublasDestroy_v2", offsetof(nn_cublas, destroy), 0},
    {"cublasSetStream_v2", offsetof(nn_cublas, set_stream), 0},
    {"cublasSetMathMode", offsetof(nn_cublas, set_math_mode), 0},
    {"cublasSetWorkspace_v2", offsetof(nn_cublas, set_workspace), 1},
    {"cublasGemmEx", offsetof(nn_cublas, gemm_ex), 0},
    {"cublasGemmStridedBatchedEx", offsetof(nn_cublas, gemm_strided_batched_ex), 0},
    {"cublasGetStatusString", offsetof(nn_cublas, status_string), 1},
};

stoke_status nn_cublas_open(nn_cublas **out)
{
    *out = NULL;
    nn_cublas *b = calloc(1, sizeof *b);
    if (!b)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading cuBLAS");
    const nn_dl_lib l = {"cuBLAS", "STOKE_CUBLAS_LIBRARY", names, syms,
                         sizeof syms / sizeof syms[0]};
    const char *tried;
    stoke_status st = nn_dl_open(&l, b, &tried);
    if (st != STOKE_OK) {
        nn_cublas_close(b);
        return st;
    }
    b->version = nn_dl_soname_version(tried);
    *out = b;
    return STOKE_OK;
}

/* The library stays loaded (no dlclose): NVIDIA's libraries and their C++ runtime keep
 * process-long allocations, which unloading would leak, and they do not support being
 * unloaded and loaded again. A later open finds it mapped. */
void nn_cublas_close(nn_cublas *b) { free(b); }

/* cublasStatus_t's names (cublas_api.h), for libraries without cublasGetStatusString. */
static const char *cublas_status_name(int status)
{
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return NULL;
    }
}

const char *nn_cublas_error(const nn_cublas *b, int status)
{
    const char *s = b && b->status_string ? b->status_string(status) : NULL;
    /* The libraries' answer to a code they do not know ("<unknown>",
     * "CUDNN_UNKNOWN_STATUS_FOUND") says less than the number. */
    if (s && (s[0] == '<' || strstr(s, "UNKNOWN")))
        s = NULL;
    if (!s)
        s = cublas_status_name(status);
    if (s)
        return s;
    /* Per thread, so two threads' messages do not overwrite each other. */
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "cuBLAS status %d", status);
    return buf;
}
