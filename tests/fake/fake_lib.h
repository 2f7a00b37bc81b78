/* fake_lib.h - what the cuBLAS and cuDNN doubles share: the fake CUDA runtime they
 * check device memory and stream order against, and the count of the violations they
 * find. Compiled into each double (hidden: every double keeps its own count). */
#ifndef STOKE_FAKE_LIB_H
#define STOKE_FAKE_LIB_H

#include <pthread.h>
#include <stddef.h>

#define FAKE_HIDDEN __attribute__((visibility("hidden")))

/* The fake CUDA runtime the caller already loaded (STOKE_CUDART_LIBRARY). */
typedef struct fake_runtime {
    int (*extent)(const void *p, size_t *bytes_after); /* fake_cudart_extent */
    int (*sync)(void *stream);                         /* cudaStreamSynchronize */
} fake_runtime;
FAKE_HIDDEN extern fake_runtime fake_rt;
/* Whether fake_rt is filled (looked up once). */
FAKE_HIDDEN int fake_have_runtime(void);

/* Guards the double's own tables too. */
FAKE_HIDDEN extern pthread_mutex_t fake_lib_mu;

/* Counts a violation, keeps its text as the last problem, returns status. */
FAKE_HIDDEN int fake_violation(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Counts a computing call (a GEMM, a convolution). */
FAKE_HIDDEN void fake_count_call(void);
FAKE_HIDDEN int fake_lib_violations(void);
FAKE_HIDDEN int fake_lib_calls(void);
FAKE_HIDDEN const char *fake_lib_last_problem(void);
FAKE_HIDDEN void fake_lib_reset(void);

/* Element i of a matrix of fp32, fp16 or bf16 values, as the libraries read and write
 * them (stores round to nearest even from fp32, as stoke's kernels do: nn/cuda/kern.h). */
enum { FAKE_F32 = 0, FAKE_F16 = 1, FAKE_BF16 = 2 };
FAKE_HIDDEN double fake_load(const void *p, int kind, long long i);
FAKE_HIDDEN void fake_store(void *p, int kind, long long i, double v);

#endif
