/* libs.h - the driver tables of cuBLAS, cuBLASLt and cuDNN: the subset the CUDA backend calls,
 * loaded at run time with dlopen (as NVML and the CUDA runtime are, src/hw/gpu_impl.h)
 * so one binary runs with or without the libraries. Declared from the ABI, not from
 * the vendor headers; tests/abi/cuda_abi_check.cu checks the constants and the
 * layouts against the toolkit's headers wherever nvcc is installed. The test doubles
 * in tests/fake/ implement the same functions on the CPU. Internal to src/nn. */
#ifndef STOKE_NN_CUDA_LIBS_H
#define STOKE_NN_CUDA_LIBS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dl.h"
#include "stoke/core.h"

/* A library to load (dl.c, through core's loader): `what` names it in messages, env
 * names a file to load instead (the tests' doubles), names are tried in order
 * (NULL-terminated); syms fill the table, whose first member is the dlopen handle. */
typedef stoke_dl_sym nn_dl_sym;
typedef struct nn_dl_lib {
    const char *what, *env;
    const char *const *names;
    const nn_dl_sym *syms;
    size_t nsyms;
} nn_dl_lib;
/* Loads l into `table` (zeroed by the caller); *tried the file loaded or tried.
 * STOKE_ERR_UNAVAILABLE: the env's file did not load (with dlerror's reason), none of
 * the names did (listing them), or a required function is missing (naming it). */
stoke_status nn_dl_open(const nn_dl_lib *l, void *table, const char **tried);
/* The soname's major version ("libcublas.so.13": 13), 0 for a name without one. */
int nn_dl_soname_version(const char *name);

/* ---- cuBLAS (libcublas.so.13, .12) ---- */
enum { NC_CUBLAS_SUCCESS = 0 };
enum { NC_OP_N = 0, NC_OP_T = 1 };                           /* cublasOperation_t */
enum { NC_R_32F = 0, NC_R_16F = 2, NC_R_16BF = 14 };         /* cudaDataType */
enum { NC_COMPUTE_32F = 68, NC_COMPUTE_32F_FAST_TF32 = 77 }; /* cublasComputeType_t */
enum { NC_GEMM_DEFAULT = -1 };                               /* cublasGemmAlgo_t */
enum { NC_DEFAULT_MATH = 0, NC_TF32_TENSOR_OP_MATH = 3 };    /* cublasMath_t */

typedef struct nn_cublas {
    void *lib;
    int (*create)(void **handle);                  /* cublasCreate_v2 */
    int (*destroy)(void *handle);                  /* cublasDestroy_v2 */
    int (*set_stream)(void *handle, void *stream); /* cublasSetStream_v2 */
    int (*set_math_mode)(void *handle, int mode);  /* cublasSetMathMode */
    /* cublasSetWorkspace_v2; optional (NULL: the library's own pool) */
    int (*set_workspace)(void *handle, void *ws, size_t bytes);
    /* cublasGemmEx: column-major C (m x n) = alpha op(A) op(B) + beta C; alpha and beta
     * point to floats (compute type 32F). */
    int (*gemm_ex)(void *handle, int transa, int transb, int m, int n, int k, const void *alpha,
                   const void *A, int atype, int lda, const void *B, int btype, int ldb,
                   const void *beta, void *C, int ctype, int ldc, int compute, int algo);
    /* cublasGemmStridedBatchedEx */
    int (*gemm_strided_batched_ex)(void *handle, int transa, int transb, int m, int n, int k,
                                   const void *alpha, const void *A, int atype, int lda,
                                   long long stride_a, const void *B, int btype, int ldb,
                                   long long stride_b, const void *beta, void *C, int ctype,
                                   int ldc, long long stride_c, int batch, int compute, int algo);
    const char *(*status_string)(int status); /* cublasGetStatusString; optional */
    int version;                              /* cublasGetProperty-free: from the soname */
} nn_cublas;

/* Loads cuBLAS (STOKE_CUBLAS_LIBRARY names a file to load instead: the tests' double).
 * STOKE_ERR_UNAVAILABLE with the name tried when it is missing or lacks a function. */
stoke_status nn_cublas_open(nn_cublas **out);
void nn_cublas_close(nn_cublas *b); /* NULL is fine */
/* "CUBLAS_STATUS_ALLOC_FAILED", ... or "cuBLAS status N". */
const char *nn_cublas_error(const nn_cublas *b, int status);

/* ---- cuBLASLt (libcublasLt.so.13, .12): the linear layer's matmuls with their
 * epilogues (bias, ReLU and their gradients fused into the GEMM) ---- */
enum { /* cublasLtMatmulDescAttributes_t */
       NC_LT_TRANSA = 3,
       NC_LT_TRANSB = 4,
       NC_LT_EPILOGUE = 7,
       NC_LT_BIAS_POINTER = 8,
       NC_LT_AUX_POINTER = 11,
       NC_LT_AUX_LD = 12
};
enum { /* cublasLtEpilogue_t */
       NC_LT_EPI_DEFAULT = 1,
       NC_LT_EPI_RELU_AUX = 2 | 128,
       NC_LT_EPI_BIAS = 4,
       NC_LT_EPI_RELU_AUX_BIAS = 2 | 128 | 4,
       NC_LT_EPI_DRELU = 8 | 128,
       NC_LT_EPI_DRELU_BGRAD = 8 | 128 | 16,
       NC_LT_EPI_BGRADA = 256,
       NC_LT_EPI_BGRADB = 512
};
enum { /* cublasLtMatmulPreferenceAttributes_t */
       NC_LT_PREF_MAX_WORKSPACE_BYTES = 1,
       NC_LT_PREF_MIN_ALIGN_A = 5,
       NC_LT_PREF_MIN_ALIGN_B = 6,
       NC_LT_PREF_MIN_ALIGN_C = 7,
       NC_LT_PREF_MIN_ALIGN_D = 8
};

typedef struct nn_lt_algo { /* cublasLtMatmulAlgo_t */
    uint64_t data[8];
} nn_lt_algo;

typedef struct nn_lt_heuristic { /* cublasLtMatmulHeuristicResult_t */
    nn_lt_algo algo;
    size_t workspace;
    int state;
    float waves;
    int reserved[4];
} nn_lt_heuristic;

typedef struct nn_cublaslt {
    void *lib;
    int (*create)(void **handle); /* cublasLtCreate */
    int (*destroy)(void *handle); /* cublasLtDestroy */
    /* cublasLtMatmulDesc{Create,SetAttribute,Destroy}: compute a cublasComputeType_t,
     * scale a cudaDataType (the type of alpha and beta) */
    int (*desc_create)(void **desc, int compute, int scale);
    int (*desc_set)(void *desc, int attr, const void *buf, size_t bytes);
    int (*desc_destroy)(void *desc);
    /* cublasLtMatrixLayout{Create,Destroy}: column-major rows x cols of a cudaDataType */
    int (*layout_create)(void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
    int (*layout_destroy)(void *layout);
    /* cublasLtMatmulPreference{Create,SetAttribute,Destroy} */
    int (*pref_create)(void **pref);
    int (*pref_set)(void *pref, int attr, const void *buf, size_t bytes);
    int (*pref_destroy)(void *pref);
    /* cublasLtMatmulAlgoGetHeuristic: up to `want` algorithms, fastest first */
    int (*heuristic)(void *handle, void *desc, void *a, void *b, void *c, void *d, void *pref,
                     int want, nn_lt_heuristic *results, int *got);
    /* cublasLtMatmul: D = alpha op(A) op(B) + beta C, then the descriptor's epilogue;
     * alpha and beta point to floats on the host */
    int (*matmul)(void *handle, void *desc, const void *alpha, const void *A, void *adesc,
                  const void *B, void *bdesc, const void *beta, const void *C, void *cdesc, void *D,
                  void *ddesc, const nn_lt_algo *algo, void *ws, size_t ws_bytes, void *stream);
    int version; /* from the soname */
} nn_cublaslt;

/* Loads cuBLASLt (STOKE_CUBLASLT_LIBRARY names a file to load instead). Its statuses
 * are cuBLAS's (nn_cublas_error words them). */
stoke_status nn_cublaslt_open(nn_cublaslt **out);
void nn_cublaslt_close(nn_cublaslt *b); /* NULL is fine */

/* ---- cuDNN (libcudnn.so.9): the legacy convolution, pooling and activation API ---- */
enum { NC_CUDNN_SUCCESS = 0 };
enum { NC_CUDNN_DATA_FLOAT = 0, NC_CUDNN_DATA_HALF = 2, NC_CUDNN_DATA_BFLOAT16 = 9 };
enum { NC_CUDNN_TENSOR_NCHW = 0 };
enum { NC_CUDNN_CROSS_CORRELATION = 1 };
enum { NC_CUDNN_DEFAULT_MATH = 0, NC_CUDNN_TENSOR_OP_MATH = 1, NC_CUDNN_FMA_MATH = 3 };
enum { NC_CUDNN_FWD_IMPLICIT_PRECOMP_GEMM = 1 }; /* cudnnConvolutionFwdAlgo_t */
enum {                                           /* cudnnPoolingMode_t */
       NC_CUDNN_POOL_AVG_INCLUDE_PAD = 1,
       NC_CUDNN_POOL_AVG_EXCLUDE_PAD = 2,
       NC_CUDNN_POOL_MAX_DETERMINISTIC = 3
};
enum { NC_CUDNN_NOT_PROPAGATE_NAN = 0, NC_CUDNN_PROPAGATE_NAN = 1 }; /* cudnnNanPropagation_t */
enum { NC_CUDNN_ACTIVATION_RELU = 1, NC_CUDNN_ACTIVATION_IDENTITY = 5 };

/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the same layout for all three */
typedef struct nn_cudnn_perf {
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
} nn_cudnn_perf;

typedef struct nn_cudnn {
    void *lib;
    size_t (*get_version)(void);
    const char *(*error_string)(int status);
    int (*create)(void **handle);
    int (*destroy)(void *handle);
    int (*set_stream)(void *handle, void *stream);
    int (*create_tensor)(void **desc);
    int (*set_tensor_4d)(void *desc, int format, int dtype, int n, int c, int h, int w);
    int (*destroy_tensor)(void *desc);
    int (*create_filter)(void **desc);
    int (*set_filter_4d)(void *desc, int dtype, int format, int k, int c, int h, int w);
    int (*destroy_filter)(void *desc);
    int (*create_conv)(void **desc);
    int (*set_conv_2d)(void *desc, int pad_h, int pad_w, int u, int v, int dil_h, int dil_w,
                       int mode, int compute);
    int (*set_conv_math)(void *desc, int math);
    int (*destroy_conv)(void *desc);
    /* cudnnGetConvolutionForwardAlgorithm_v7 and friends: the heuristics' ranking */
    int (*fwd_algos)(void *h, void *x, void *w, void *conv, void *y, int want, int *got,
                     nn_cudnn_perf *perf);
    int (*bwd_data_algos)(void *h, void *w, void *dy, void *conv, void *dx, int want, int *got,
                          nn_cudnn_perf *perf);
    int (*bwd_filter_algos)(void *h, void *x, void *dy, void *conv, void *dw, int want, int *got,
                            nn_cudnn_perf *perf);
    int (*fwd_ws)(void *h, void *x, void *w, void *conv, void *y, int algo, size_t *bytes);
    int (*bwd_data_ws)(void *h, void *w, void *dy, void *conv, void *dx, int algo, size_t *bytes);
    int (*bwd_filter_ws)(void *h, void *x, void *dy, void *conv, void *dw, int algo, size_t *bytes);
    /* alpha and beta point to floats */
    int (*fwd)(void *h, const void *alpha, void *xd, const void *x, void *wd, const void *w,
               void *conv, int algo, void *ws, size_t ws_bytes, const void *beta, void *yd,
               void *y);
    int (*bwd_data)(void *h, const void *alpha, void *wd, const void *w, void *dyd, const void *dy,
                    void *conv, int algo, void *ws, size_t ws_bytes, const void *beta, void *dxd,
                    void *dx);
    int (*bwd_filter)(void *h, const void *alpha, void *xd, const void *x, void *dyd,
                      const void *dy, void *conv, int algo, void *ws, size_t ws_bytes,
                      const void *beta, void *dwd, void *dw);
    /* y = act(alpha1 conv(x, w) + alpha2 z + bias): with RELU only the
     * IMPLICIT_PRECOMP_GEMM algorithm is supported */
    int (*conv_bias_act)(void *h, const void *alpha1, void *xd, const void *x, void *wd,
                         const void *w, void *conv, int algo, void *ws, size_t ws_bytes,
                         const void *alpha2, void *zd, const void *z, void *biasd, const void *bias,
                         void *actd, void *yd, void *y);
    int (*create_act)(void **desc);
    int (*set_act)(void *desc, int mode, int nan_opt, double coef);
    int (*destroy_act)(void *desc);
    /* pooling: y = alpha pool(x) + beta y; backward takes y, dy and x (max routes each
     * dy to its window's maximum) */
    int (*create_pool)(void **desc);
    int (*set_pool_2d)(void *desc, int mode, int nan_opt, int win_h, int win_w, int pad_h,
                       int pad_w, int stride_h, int stride_w);
    int (*destroy_pool)(void *desc);
    int (*pool_fwd)(void *h, void *pool, const void *alpha, void *xd, const void *x,
                    const void *beta, void *yd, void *y);
    int (*pool_bwd)(void *h, void *pool, const void *alpha, void *yd, const void *y, void *dyd,
                    const void *dy, void *xd, const void *x, const void *beta, void *dxd, void *dx);
    size_t version;
} nn_cudnn;

/* Loads cuDNN (STOKE_CUDNN_LIBRARY names a file to load instead). */
stoke_status nn_cudnn_open(nn_cudnn **out);
void nn_cudnn_close(nn_cudnn *d);
const char *nn_cudnn_error(const nn_cudnn *d, int status);

#endif
