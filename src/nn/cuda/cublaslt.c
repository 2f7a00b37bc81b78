/* cublaslt.c - cuBLASLt, loaded at run time with dlopen beside cuBLAS (cublas.c): the
 * matmul API whose epilogues fuse the linear layer's bias, ReLU and their gradients
 * into the GEMM. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/libs.h"

static void *open_lt(const char **tried)
{
    const char *env = getenv("STOKE_CUBLASLT_LIBRARY");
    if (env && *env) {
        *tried = env;
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    }
    /* Newest first; then the toolkit's default location, often not in the loader's
     * path. */
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                        "/usr/local/cuda/lib64/libcublasLt.so.13",
                                        "/usr/local/cuda/lib64/libcublasLt.so.12", NULL};
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

/* NULL when every function is there, else the first one missing. */
static const char *load_lt(nn_cublaslt *b)
{
    static const struct {
        const char *name;
        size_t offset;
    } syms[] = {
        {"cublasLtCreate", offsetof(nn_cublaslt, create)},
        {"cublasLtDestroy", offsetof(nn_cublaslt, destroy)},
        {"cublasLtMatmulDescCreate", offsetof(nn_cublaslt, desc_create)},
        {"cublasLtMatmulDescSetAttribute", offsetof(nn_cublaslt, desc_set)},
        {"cublasLtMatmulDescDestroy", offsetof(nn_cublaslt, desc_destroy)},
        {"cublasLtMatrixLayoutCreate", offsetof(nn_cublaslt, layout_create)},
        {"cublasLtMatrixLayoutDestroy", offsetof(nn_cublaslt, layout_destroy)},
        {"cublasLtMatmulPreferenceCreate", offsetof(nn_cublaslt, pref_create)},
        {"cublasLtMatmulPreferenceSetAttribute", offsetof(nn_cublaslt, pref_set)},
        {"cublasLtMatmulPreferenceDestroy", offsetof(nn_cublaslt, pref_destroy)},
        {"cublasLtMatmulAlgoGetHeuristic", offsetof(nn_cublaslt, heuristic)},
        {"cublasLtMatmul", offsetof(nn_cublaslt, matmul)},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(b->lib, syms[i].name);
        memcpy((char *)b + syms[i].offset, &f, sizeof f);
        if (!f)
            return syms[i].name;
    }
    return NULL;
}

stoke_status nn_cublaslt_open(nn_cublaslt **out)
{
    *out = NULL;
    const char *tried = NULL;
    void *lib = open_lt(&tried);
    if (!lib) {
        const char *env = getenv("STOKE_CUBLASLT_LIBRARY"), *why = dlerror();
        if (env && *env)
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "STOKE_CUBLASLT_LIBRARY=%s: %s", env,
                              why ? why : "not loaded");
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "cuBLASLt not found (tried libcublasLt.so.13, libcublasLt.so.12 and "
                          "/usr/local/cuda/lib64)");
    }
    nn_cublaslt *b = calloc(1, sizeof *b);
    if (!b) {
        dlclose(lib);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading cuBLASLt");
    }
    b->lib = lib;
    const char *missing = load_lt(b);
    if (missing) {
        nn_cublaslt_close(b);
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s lacks %s", tried, missing);
    }
    const char *so = strstr(tried, ".so.");
    b->version = so ? atoi(so + 4) : 0;
    *out = b;
    return STOKE_OK;
}

/* Stays loaded, as cuBLAS does (cublas.c). */
void nn_cublaslt_close(nn_cublaslt *b) { free(b); }
