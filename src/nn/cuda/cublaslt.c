/* cublaslt.c - cuBLASLt, loaded at run time with dlopen beside cuBLAS (cublas.c): the
 * matmul API whose epilogues fuse the linear layer's bias, ReLU and their gradients
 * into the GEMM. */
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/libs.h"

/* Newest first; then the toolkit's default location, often not in the loader's path. */
static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                    "/usr/local/cuda/lib64/libcublasLt.so.13",
                                    "/usr/local/cuda/lib64/libcublasLt.so.12", NULL};

static const nn_dl_sym syms[] = {
    {"cublasLtCreate", offsetof(nn_cublaslt, create), 0},
    {"cublasLtDestroy", offsetof(nn_cublaslt, destroy), 0},
    {"cublasLtMatmulDescCreate", offsetof(nn_cublaslt, desc_create), 0},
    {"cublasLtMatmulDescSetAttribute", offsetof(nn_cublaslt, desc_set), 0},
    {"cublasLtMatmulDescDestroy", offsetof(nn_cublaslt, desc_destroy), 0},
    {"cublasLtMatrixLayoutCreate", offsetof(nn_cublaslt, layout_create), 0},
    {"cublasLtMatrixLayoutDestroy", offsetof(nn_cublaslt, layout_destroy), 0},
    {"cublasLtMatmulPreferenceCreate", offsetof(nn_cublaslt, pref_create), 0},
    {"cublasLtMatmulPreferenceSetAttribute", offsetof(nn_cublaslt, pref_set), 0},
    {"cublasLtMatmulPreferenceDestroy", offsetof(nn_cublaslt, pref_destroy), 0},
    {"cublasLtMatmulAlgoGetHeuristic", offsetof(nn_cublaslt, heuristic), 0},
    {"cublasLtMatmul", offsetof(nn_cublaslt, matmul), 0},
};

stoke_status nn_cublaslt_open(nn_cublaslt **out)
{
    *out = NULL;
    nn_cublaslt *b = calloc(1, sizeof *b);
    if (!b)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading cuBLASLt");
    const nn_dl_lib l = {"cuBLASLt", "STOKE_CUBLASLT_LIBRARY", names, syms,
                         sizeof syms / sizeof syms[0]};
    const char *tried;
    stoke_status st = nn_dl_open(&l, b, &tried);
    if (st != STOKE_OK) {
        nn_cublaslt_close(b);
        return st;
    }
    b->version = nn_dl_soname_version(tried);
    *out = b;
    return STOKE_OK;
}

/* Stays loaded, as cuBLAS does (cublas.c). */
void nn_cublaslt_close(nn_cublaslt *b) { free(b); }
