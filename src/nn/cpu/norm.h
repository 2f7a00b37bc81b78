/* norm.h - the CPU backend's normalization kernels: batch norm (NCHW and (B, C)) and
 * layer norm over the last dim. */
#ifndef STOKE_NN_CPU_NORM_H
#define STOKE_NN_CPU_NORM_H

#include "stoke/core.h"

/* Conventions: fp32 buffers, llm.c style. Forward writes out and the saved
 * statistics; backward ACCUMULATES (+=) into dinp, dweight and dbias. weight/bias
 * may be NULL (no affine: weight 1, bias 0). Any of dinp, dweight, dbias may be
 * NULL: that gradient is skipped (dinp for a layer on the model's input). Parameter
 * gradients are reduced per channel in a fixed order, so results do not depend on
 * the thread count. */

#define CPU_BN_MOMENTUM 0.1f  /* PyTorch's default */
#define CPU_NORM_EPS    1e-5f /* PyTorch's default for both */

/* Batch norm over inp (B, C, S) with S = H*W spatial positions (NCHW); S = 1 is
 * BatchNorm1d over (B, C). Per channel c: weight, bias, running_mean, running_var,
 * save_mean, save_rstd are (C,).
 *
 * train != 0: normalizes with the batch statistics (mean, biased variance), writes
 *   save_mean = mean, save_rstd = 1/sqrt(var_biased + eps), and, unless running_mean
 *   and running_var are NULL, updates them as PyTorch does:
 *     running_mean = (1 - momentum) running_mean + momentum mean
 *     running_var  = (1 - momentum) running_var  + momentum var_unbiased
 *   with var_unbiased = var_biased * B*S / (B*S - 1). Needs B*S >= 2: otherwise
 *   returns STOKE_ERR_ARG (PyTorch's "Expected more than 1 value per channel") and
 *   writes nothing.
 * train == 0: normalizes with running_mean / running_var (required), and writes
 *   them into save_mean / save_rstd too, so the backward is the same call.
 * Statistics accumulate in double. out may alias inp. */
stoke_status cpu_batchnorm_forward(float *out, float *save_mean, float *save_rstd,
                                   float *running_mean, float *running_var, const float *inp,
                                   const float *weight, const float *bias, int B, int C, int S,
                                   int train, float momentum, float eps);

/* dout, inp (B, C, S) -> dinp (B, C, S) +=, dweight, dbias (C,) +=.
 * Reads the forward INPUT `inp` and save_mean / save_rstd from the forward (with the
 * same `train`). train != 0 differentiates through the batch statistics:
 *   dinp += rstd (g - mean(g) - xhat mean(g xhat)),  g = dout * weight;
 * train == 0 treats the statistics as constants: dinp += dout * weight * rstd. */
void cpu_batchnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *save_mean,
                            const float *save_rstd, int B, int C, int S, int train);

/* Layer norm over the last dim: inp, out (N, C) with N = B*T; weight, bias (C,);
 * save_mean, save_rstd (N,). Biased variance, as PyTorch. out must not alias inp
 * (the backward reads inp). */
void cpu_layernorm_forward(float *out, float *save_mean, float *save_rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps);

/* dout, inp (N, C) -> dinp (N, C) +=, dweight, dbias (C,) +=. Reads the forward
 * INPUT `inp` and save_mean / save_rstd. */
void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *save_mean,
                            const float *save_rstd, int N, int C);

#endif
