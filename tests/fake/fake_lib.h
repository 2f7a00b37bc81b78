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
    /* fake_cudart_launch_owned: queues fn(user) on the stream, the runtime owning user */
    int (*launch_owned)(void *stream, void (*fn)(void *), void *user, size_t size);
} fake_runtime;
FAKE_HIDDEN extern fake_runtime fake_rt;
/* Whether fake_rt is filled (looked up once). */
FAKE_HIDDEN int fake_have_runtime(void);

/* Queues fn on the stream with a malloc'ed copy of `size` bytes of params followed by
 * `scratch` bytes for fn's own use (allocated now, so running out of host memory is
 * the call's failure, not the stream's), as the libraries enqueue their kernels: it
 * runs when the stream gets to it (in a capture, at each launch of the graph). On the
 * legacy default stream (NULL), where nothing is ever queued here, it runs at once.
 * 0, or the runtime's error. */
FAKE_HIDDEN int fake_queue(void *stream, void (*fn)(void *), const void *params, size_t size,
                           size_t scratch);

/* Guards the double's own tables too. */
FAKE_HIDDEN extern pthread_mutex_t fake_lib_mu;

/* Counts a violation, keeps its text as the last problem, returns status. */
FAKE_HIDDEN int fake_violation(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Counts a computing call (a GEMM, a convolution). */
FAKE_HIDDEN void fake_count_call(void);
/* Counts a computing call on fp32 operands that the library may run on TF32 tensor
 * cores (of a device of compute capability 8.0 and up), where the caller's arguments
 * permit it: how a test sees that TF32 turned off reached every call. */
FAKE_HIDDEN void fake_count_tf32(void);
FAKE_HIDDEN int fake_lib_tf32_calls(void);
FAKE_HIDDEN int fake_lib_violations(void);
FAKE_HIDDEN int fake_lib_calls(void);
FAKE_HIDDEN const char *fake_lib_last_problem(void);
FAKE_HIDDEN void fake_lib_reset(void);

/* Element i of a matrix of fp32, fp16 or bf16 values, as the libraries read and write
 * them (stores round to nearest even from fp32, as stoke's kernels do: nn/cuda/kern.h). */
enum { FAKE_F32 = 0, FAKE_F16 = 1, FAKE_BF16 = 2 };
FAKE_HIDDEN double fake_load(const void *p, int kind, long long i);
FAKE_HIDDEN void fake_store(void *p, int kind, long long i, double v);

/* out[o * inner + q] = element o * so + q * si of p, as doubles: a GEMM's operand laid
 * out so its dot products run over contiguous memory. The doubles' loops spent most of
 * the suite's GPU time in per-element loads; the sums keep their order, so the results
 * are the same bits as summing from p directly. */
FAKE_HIDDEN void fake_pack(const void *p, int kind, long long outer, long long inner,
                           long long so, long long si, double *out);

/* The bytes of a GEMM's two packed operands, op(A) (m x k) and op(B)^T (n x k): the
 * scratch a job queues with it (fake_queue) for fake_pack. */
FAKE_HIDDEN size_t fake_pack_bytes(int m, int n, int k);

#endif
