/* cublas.c - cuBLAS, loaded at run time with dlopen (as src/hw/cudart.c loads the CUDA
 * runtime), so a binary built without the toolkit still runs GEMMs on a GPU machine. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/libs.h"

/* The soname's major version, or 0 when the name has none (a file named by the env). */
static int soname_version(const char *name)
{
    const char *so = strstr(name, ".so.");
    return so ? atoi(so + 4) : 0;
}

static void *open_cublas(const char **tried)
{
    const char *env = getenv("STOKE_CUBLAS_LIBRARY");
    if (env && *env) {
        *tried = env;
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    }
    /* Newest first; then the toolkit's default location, often not in the loader's
     * path. */
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12",
                                        "/usr/local/cuda/lib64/libcublas.so.13",
                                        "/usr/local/cuda/lib64/libcublas.so.12", NULL};
    *tried = names[0];
    for (int i = 0; names[i]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            *tried = names[i];
            return lib;
        }
    }
    return NULL;
}

/* NULL when every required function is there, else the first one missing. */
static const char *load_cublas(nn_cublas *b)
{
    static const struct {
        const char *name;
        size_t offset;
        int optional;
    } syms[] = {
        {"cublasCreate_v2", offsetof(nn_cublas, create), 0},
        {"cublasDestroy_v2", offsetof(nn_cublas, destroy), 0},
        {"cublasSetStream_v2", offsetof(nn_cublas, set_stream), 0},
        {"cublasSetMathMode", offsetof(nn_cublas, set_math_mode), 0},
        {"cublasSetWorkspace_v2", offsetof(nn_cublas, set_workspace), 1},
        {"cublasGemmEx", offsetof(nn_cublas, gemm_ex), 0},
        {"cublasGemmStridedBatchedEx", offsetof(nn_cublas, gemm_strided_batched_ex), 0},
        {"cublasGetStatusString", offsetof(nn_cublas, status_string), 1},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(b->lib, syms[i].name);
        memcpy((char *)b + syms[i].offset, &f, sizeof f);
        if (!f && !syms[i].optional)
            return syms[i].name;
    }
    return NULL;
}

stoke_status nn_cublas_open(nn_cublas **out)
{
    *out = NULL;
    const char *tried = NULL;
    void *lib = open_cublas(&tried);
    if (!lib) {
        const char *env = getenv("STOKE_CUBLAS_LIBRARY"), *why = dlerror();
        if (env && *env)
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "STOKE_CUBLAS_LIBRARY=%s: %s", env,
                              why ? why : "not loaded");
        return stoke_fail(
            STOKE_ERR_UNAVAILABLE,
            "cuBLAS not found (tried libcublas.so.13, libcublas.so.12 and /usr/local/cuda/lib64)");
    }
    nn_cublas *b = calloc(1, sizeof *b);
    if (!b) {
        dlclose(lib);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading cuBLAS");
    }
    b->lib = lib;
    const char *missing = load_cublas(b);
    if (missing) {
        nn_cublas_close(b);
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s lacks %s", tried, missing);
    }
    b->version = soname_version(tried);
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
