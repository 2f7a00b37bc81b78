/* dense.h - the CPU backend's linear (fully connected) kernels in fp32 and bf16, and
 * the compute-thread setting every CPU kernel follows. */
#ifndef STOKE_NN_CPU_DENSE_H
#define STOKE_NN_CPU_DENSE_H

#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

/* Compute threads for every CPU kernel (oneDNN, OpenBLAS and the kernels' own OpenMP
 * loops) run with the calling thread's current context (nn/cpu/ctx.h: the one bound,
 * else the thread's own); n <= 0 means the number of online CPUs. A model's context is
 * set through its table (set_threads), never through here. Kernels apply their
 * context's count on whatever thread calls them (OpenMP's thread count is per calling
 * thread), and the primitive cache is keyed by it, so changing it later is safe but
 * builds new primitives. Results are bit-identical for a fixed count.
 * Oversubscription is costly: libgomp's threads spin at barriers, so when other
 * runnable threads (loader workers, other processes) leave fewer free cores than n,
 * a descheduled compute thread stalls every parallel region for a time slice.
 * Measured with 2 threads on the Sapphire Rapids machine (Intel Xeon, 2 cores) at
 * load ~9 (bench/kernels_bench.c):
 * MLP fc2 forward 13.4 ms instead of 1.5 ms with OMP_WAIT_POLICY=passive, max-pool
 * 13 ms instead of 1.4 ms. libgomp reads that variable only at start-up, so the
 * launcher must set it (or keep n at or below the cores left free). */
void cpu_set_threads(int n);

/* The calling thread's context's compute-thread count (resolved, >= 1). */
int cpu_get_threads(void);

/* Applies the calling thread's context's compute-thread count to the thread's OpenMP
 * setting; every kernel calls it on entry. Returns the thread count. */
int cpu_threads_apply(void);

/* Which library runs the fp32 linear GEMMs. AUTO is oneDNN's matmul, which measured
 * as fast or faster than OpenBLAS at every benchmark shape (bench/kernels_bench.c);
 * the others force one, for the benchmark and the tests. BLAS runs whatever kernels
 * OpenBLAS chose when it loaded, possibly a fallback far below the CPU (the kernels
 * benchmark prints which; stoke_openblas_check in tune.h). bf16 always runs on
 * oneDNN. GEMMs under 2M multiply-adds run on one thread whatever the setting. */
typedef enum cpu_linear_impl {
    CPU_LINEAR_AUTO = 0,
    CPU_LINEAR_DNNL,
    CPU_LINEAR_BLAS,
} cpu_linear_impl;

/* Sets the current context's choice (nn/cpu/ctx.h), for the benchmark and the tests
 * that call kernels directly. */
void cpu_linear_set_impl(cpu_linear_impl impl);

/* Creates the oneDNN matmul primitives for a (B, C, OC) linear layer (fp32 if bf16 is
 * 0, else bf16 inputs) so the first step does not pay for it; the executor calls it
 * while planning. Forward, backward-data and backward-weights are all built. Kernel
 * calls for a shape that was not prepared prepare it themselves. Fails with
 * STOKE_ERR_ARG for non-positive sizes, STOKE_ERR_UNAVAILABLE if oneDNN has no
 * implementation. */
stoke_status cpu_linear_prepare(int B, int C, int OC, int has_bias, int bf16);

/* Bytes of scratch the linear primitives of that shape hold (oneDNN's scratchpad).
 * The kernels own it (allocated once, by prepare), so callers pass no workspace;
 * the memory plan adds it to its workspace total. Prepares the shape; returns
 * STOKE_OK and *bytes, or the failure of prepare. */
stoke_status cpu_linear_workspace(int B, int C, int OC, int has_bias, int bf16, size_t *bytes);

/* inp (B, C), weight (OC, C) as PyTorch stores it, bias (OC) or NULL, out (B, OC).
 * out = inp @ weight^T + bias, overwritten. Fails only if the shape cannot be
 * prepared (see cpu_linear_prepare); out is then untouched. */
stoke_status cpu_linear_forward(float *out, const float *inp, const float *weight,
                                const float *bias, int B, int C, int OC);

/* dout (B, OC), inp (B, C), weight (OC, C); ACCUMULATES:
 * dinp (B, C) += dout @ weight (skipped if dinp is NULL, e.g. the first layer),
 * dweight (OC, C) += dout^T @ inp, dbias (OC) += column sums of dout (skipped if
 * NULL). Deterministic for a fixed thread count. */
stoke_status cpu_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int B, int C, int OC);

/* bf16 variants (uint16_t holds the bf16 bit pattern): bf16 inputs and weights,
 * fp32 accumulation, fp32 outputs and gradients; same shapes and semantics as the
 * fp32 kernels. In backward, dout is bf16 too (oneDNN multiplies bf16 by bf16 only). */
stoke_status cpu_linear_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                     const float *bias, int B, int C, int OC);
stoke_status cpu_linear_backward_bf16(float *dinp, float *dweight, float *dbias,
                                      const uint16_t *dout, const uint16_t *inp,
                                      const uint16_t *weight, int B, int C, int OC);

/* linear -> ReLU fused: out = max(0, inp @ weight^T + bias), the ReLU applied by
 * oneDNN's matmul as a post-op, so the pre-activation never reaches memory. inp and
 * weight are fp32, or bf16 bits when bf16 is set (as cpu_linear_forward_bf16). The
 * backward is cpu_linear_backward on the output gradient masked by out > 0
 * (cpu_relu_mask_grad). Always oneDNN, whatever cpu_linear_set_impl says. */
stoke_status cpu_linear_relu_forward(float *out, const void *inp, const void *weight,
                                     const float *bias, int B, int C, int OC, int bf16);
/* Builds that shape's primitives while planning. */
stoke_status cpu_linear_relu_prepare(int B, int C, int OC, int has_bias, int bf16);

#endif
