/* attn.h - the CPU backend's multi-head self-attention (QKV projection, scaled
 * dot-product attention, output projection), forward and backward. */
#ifndef STOKE_NN_CPU_ATTN_H
#define STOKE_NN_CPU_ATTN_H

#include <stddef.h>

#include "stoke/core.h"

/* Shapes, with hs = C / H the head size:
 *   inp, out     (B, T, C)
 *   w_qkv (3C, C), b_qkv (3C)   PyTorch's nn.MultiheadAttention in_proj_weight /
 *                               in_proj_bias: rows [0, C) make q, [C, 2C) k, [2C, 3C) v
 *   w_out (C, C),  b_out (C)    out_proj.weight / out_proj.bias
 *   saved        cpu_attention_saved_floats(B, T, C, H) floats, written by the
 *                forward and read by the backward: qkv (B, T, 3C), the attention
 *                probabilities (B, H, T, T) and the heads' concatenated output
 *                (B, T, C). Keep it between forward and backward.
 * out = softmax(q k^T / sqrt(hs) [+ causal mask]) v, heads concatenated, then
 * projected: exactly torch's MultiheadAttention(C, H, batch_first=True) with
 * need_weights=False (no dropout), and is_causal / an upper-triangular -inf mask
 * when causal != 0. */

/* Floats of the saved buffer: B*T*3C + B*H*T*T + B*T*C. */
size_t cpu_attention_saved_floats(int B, int T, int C, int H);

/* Bytes of scratch the backward needs (the forward needs none): the gradients of
 * the heads' output (B, T, C), of qkv (B, T, 3C) and of the scores (B, H, T, T). It
 * does not depend on the thread count. */
size_t cpu_attention_workspace(int B, int T, int C, int H);

/* Prepares the two projections' linear kernels for these sizes (oneDNN primitives,
 * cached; see cpu_linear_prepare in dense.h) and, if kernel_bytes is not NULL, sets
 * it to the scratch those kernels hold (their own, allocated once: the memory plan
 * adds it to its workspace total). The executor calls it while planning; forward
 * and backward call it too (a cache lookup once prepared). Fails with STOKE_ERR_ARG
 * for bad sizes, or the linear kernels' failure. */
stoke_status cpu_attention_prepare(int B, int T, int C, int H, size_t *kernel_bytes);

/* Writes out and saved. The projections run on the linear kernels (oneDNN matmul)
 * over all B*T rows; the per-head q k^T and p v products are oneDNN SGEMMs
 * (dnnl_sgemm) on strided views of qkv (no copies), with (b, h) pairs spread over
 * OpenMP threads. Returns STOKE_ERR_ARG if a size is not positive or H does not divide
 * C (or the failure of cpu_attention_prepare); nothing is written then. If oneDNN's
 * SGEMM cannot allocate its packing buffers: STOKE_ERR_NOMEM, out unspecified.
 * Deterministic for a fixed thread count. */
stoke_status cpu_attention_forward(float *out, float *saved, const float *inp, const float *w_qkv,
                                   const float *b_qkv, const float *w_out, const float *b_out,
                                   int B, int T, int C, int H, int causal);

/* dout (B, T, C) -> dinp (B, T, C) +=, dw_qkv (3C, C) +=, db_qkv (3C) +=,
 * dw_out (C, C) +=, db_out (C) +=; dinp may be NULL (skipped: a layer on the
 * model's input). Reads the forward INPUT `inp`, the weights
 * w_qkv and w_out, and `saved` from the forward with the same sizes and `causal`.
 * `ws` holds at least cpu_attention_workspace(B, T, C, H) bytes (contents
 * irrelevant). Returns STOKE_ERR_ARG on bad sizes or a short workspace (or the
 * failure of cpu_attention_prepare), before touching any gradient; STOKE_ERR_NOMEM if
 * oneDNN's SGEMM cannot allocate its packing buffers, with the gradients then
 * unspecified. Deterministic for a fixed thread count. */
stoke_status cpu_attention_backward(float *dinp, float *dw_qkv, float *db_qkv, float *dw_out,
                                    float *db_out, const float *dout, const float *inp,
                                    const float *w_qkv, const float *w_out, const float *saved,
                                    int B, int T, int C, int H, int causal, void *ws,
                                    size_t ws_size);

#endif
