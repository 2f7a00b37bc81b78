/* fake_blas.h - what the cuBLAS and cuBLASLt doubles share: cuBLAS's statuses (which
 * cuBLASLt returns too) and the data and compute types of cublas_api.h. */
#ifndef STOKE_FAKE_BLAS_H
#define STOKE_FAKE_BLAS_H

enum {
    OK = 0,
    NOT_INITIALIZED = 1,
    ALLOC_FAILED = 3,
    INVALID_VALUE = 7,
    EXECUTION_FAILED = 13,
    NOT_SUPPORTED = 15
};
enum { R_32F = 0, R_16F = 2, R_16BF = 14 };
enum { COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77 };

#endif
