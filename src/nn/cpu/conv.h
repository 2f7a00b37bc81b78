/* conv.h - the CPU backend's 2-D convolution (oneDNN, fp32 and bf16) and pooling
 * kernels (max, average, global average) over NCHW images. */
#ifndef STOKE_NN_CPU_CONV_H
#define STOKE_NN_CPU_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

/* A convolution's shape: input (B, C, H, W), weight (OC, C, KH, KW), bias (OC) if
 * has_bias, output (B, OC, OH, OW) with OH = (H + 2*pad_h - KH) / stride_h + 1 (and
 * likewise OW), as PyTorch's Conv2d with groups 1 and dilation 1. */
typedef struct cpu_conv2d_shape {
    int B, C, H, W;
    int OC, KH, KW;
    int stride_h, stride_w;
    int pad_h, pad_w;
    int has_bias;
} cpu_conv2d_shape;

/* Checks a shape (positive sizes, padding < kernel, output at least 1x1) and gives
 * OH, OW (either may be NULL). STOKE_ERR_ARG with the offending field otherwise. */
stoke_status cpu_conv2d_out_size(const cpu_conv2d_shape *s, int *OH, int *OW);

/* The arithmetic of a convolution: fp32; bf16 (the caller's input, weights and output
 * gradient are bf16; outputs and gradients fp32); or mixed (every tensor fp32, as in
 * the fp32 kernels, but the math in bf16 on AMX: the reorders that move the inputs
 * into oneDNN's layouts round them to bf16 on the way, so no separate conversion pass
 * is needed). */
typedef enum cpu_conv_prec {
    CPU_CONV_FP32 = 0,
    CPU_CONV_BF16 = 1,
    CPU_CONV_MIXED_BF16 = 2,
} cpu_conv_prec;

/* Creates and caches the oneDNN forward, backward-data and backward-weights primitives
 * for the shape and precision (a cpu_conv_prec) and their reorders, so the first step
 * does not pay for it; the executor calls it while planning. Kernel calls on an
 * unprepared shape prepare it themselves. */
stoke_status cpu_conv2d_prepare(const cpu_conv2d_shape *s, int prec);

/* Bytes of workspace the kernels of the shape and precision need: the reordered
 * (blocked) copies of their tensors, the gradients before they are added into the
 * caller's, oneDNN's scratchpad, and room to align the caller's pointer. One region
 * serves forward and backward (they never overlap). Prepares the shape. */
stoke_status cpu_conv2d_workspace(const cpu_conv2d_shape *s, int prec, size_t *bytes);

/* inp (B, C, H, W), weight (OC, C, KH, KW), bias (OC) or NULL (must match
 * s->has_bias), out (B, OC, OH, OW), overwritten. ws: at least
 * cpu_conv2d_workspace bytes (any alignment; the kernel aligns it), or NULL to use a
 * buffer the cache owns (allocated on the first such call for the shape). A workspace
 * that is too small fails with STOKE_ERR_ARG before anything is written. */
stoke_status cpu_conv2d_forward(float *out, const float *inp, const float *weight,
                                const float *bias, const cpu_conv2d_shape *s, void *ws,
                                size_t ws_size);

/* dout (B, OC, OH, OW), inp (B, C, H, W), weight (OC, C, KH, KW); ACCUMULATES:
 * dinp (B, C, H, W) += input gradient (skipped if NULL), dweight (OC, C, KH, KW) +=
 * weight gradient, dbias (OC) += bias gradient (NULL when the shape has no bias).
 * Workspace as for forward. Deterministic for a fixed thread count. */
stoke_status cpu_conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const cpu_conv2d_shape *s,
                                 void *ws, size_t ws_size);

/* bf16 variants (uint16_t holds bf16 bits): bf16 input, weights and output gradient,
 * fp32 accumulation, output and gradients. Same shapes and semantics as fp32. */
stoke_status cpu_conv2d_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                     const float *bias, const cpu_conv2d_shape *s, void *ws,
                                     size_t ws_size);
stoke_status cpu_conv2d_backward_bf16(float *dinp, float *dweight, float *dbias,
                                      const uint16_t *dout, const uint16_t *inp,
                                      const uint16_t *weight, const cpu_conv2d_shape *s, void *ws,
                                      size_t ws_size);

/* Mixed variants: fp32 tensors exactly as the fp32 kernels take them, bf16 math
 * (inputs, weights and output gradient rounded to bf16 inside; fp32 accumulation),
 * except with fewer than 4 input channels, where fp32 math is faster and is used. */
stoke_status cpu_conv2d_forward_mixed(float *out, const float *inp, const float *weight,
                                      const float *bias, const cpu_conv2d_shape *s, void *ws,
                                      size_t ws_size);
stoke_status cpu_conv2d_backward_mixed(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const float *inp, const float *weight,
                                       const cpu_conv2d_shape *s, void *ws, size_t ws_size);

/* Layouts inside oneDNN. AUTO (the default) lets oneDNN choose blocked layouts
 * (nChw16c and the like, with reorders from and to NCHW at the edges) except for the
 * forward pass of a convolution with fewer than 4 input channels, which runs faster
 * on plain NCHW (measured with bench/kernels_bench.c: the CNN's first layer). PLAIN
 * and BLOCKED force one choice everywhere, for the benchmark and the tests. The
 * setter sets the current context's choice (nn/cpu/ctx.h), for kernels called
 * directly; it applies to shapes prepared afterwards. */
typedef enum cpu_conv_layout {
    CPU_CONV_LAYOUT_AUTO = 0,
    CPU_CONV_LAYOUT_PLAIN,
    CPU_CONV_LAYOUT_BLOCKED,
} cpu_conv_layout;

void cpu_conv2d_set_layout(cpu_conv_layout layout);

/* A pooling window: input (B, C, H, W), kernel KH x KW, stride, zero padding;
 * output (B, C, OH, OW) with OH = (H + 2*pad_h - KH) / stride_h + 1 (floor mode). */
typedef struct cpu_pool2d_shape {
    int B, C, H, W;
    int KH, KW;
    int stride_h, stride_w;
    int pad_h, pad_w;
} cpu_pool2d_shape;

/* Checks a pooling shape (positive sizes, padding at most half the kernel as PyTorch
 * requires, output at least 1x1) and gives OH, OW (either may be NULL). */
stoke_status cpu_pool2d_out_size(const cpu_pool2d_shape *s, int *OH, int *OW);

/* Max pooling. inp (B, C, H, W), out (B, C, OH, OW); padding never wins (as -inf).
 * Backward recomputes each window's argmax from inp (first maximum in row-major
 * window order, as forward picks it), so no index tensor is kept between the passes;
 * dinp (B, C, H, W) += dout at the argmax. The shape must have passed
 * cpu_pool2d_out_size. No workspace, can't fail. */
void cpu_maxpool2d_forward(float *out, const float *inp, const cpu_pool2d_shape *s);
void cpu_maxpool2d_backward(float *dinp, const float *dout, const float *inp,
                            const cpu_pool2d_shape *s);

/* Average pooling with padding counted in the divisor (PyTorch's default
 * count_include_pad=True): every window divides by KH*KW. dinp += dout / (KH*KW)
 * over each window. No workspace, can't fail. */
void cpu_avgpool2d_forward(float *out, const float *inp, const cpu_pool2d_shape *s);
void cpu_avgpool2d_backward(float *dinp, const float *dout, const cpu_pool2d_shape *s);

/* Global average pooling: inp (B, C, H, W) -> out (B, C), the mean of each plane;
 * backward dinp (B, C, H, W) += dout (B, C) / (H*W). Can't fail. */
void cpu_global_avgpool_forward(float *out, const float *inp, int B, int C, int H, int W);
void cpu_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int H, int W);

/* ---- the fused block: conv2d -> ReLU -> max-pool ----
 * The reference CNN's pattern, run as one kernel: ReLU is a post-op of oneDNN's
 * convolution, the max-pool reads the convolution's output in the primitive's own
 * (blocked) layout from the workspace, and only the pooled output (NCHW) and one byte
 * per pooled element (the window position of its maximum, or 0xff when the maximum
 * is not positive, so ReLU passes no gradient) leave the kernel. Backward writes the
 * convolution's output gradient straight into the backward primitives' layouts
 * (zeros but at the argmax), so neither the unpooled activation nor its gradient is
 * ever stored, reordered or zeroed. With at most 4 input channels and output
 * channels in multiples of 16 (an image's first layer) a direct kernel replaces
 * oneDNN: it computes each window in registers, and, when no input gradient is
 * wanted, its backward too. Values are those of the three ops run apart (up to the
 * order of fp32 sums).
 * The pool: kernel == stride == K (non-overlapping windows), no padding, floor mode
 * (rows and columns past the last window get no gradient). */

/* Whether the block can run fused for this shape at prec (CPU_CONV_FP32 or
 * CPU_CONV_MIXED_BF16): K in 1..15 and the convolution's layouts addressable.
 * Prepares the shape. STOKE_ERR_ARG for an invalid shape. */
stoke_status cpu_conv_block_supported(const cpu_conv2d_shape *s, int K, int prec, int *ok);

/* Workspace bytes of the fused kernels at s->B (any alignment; the kernels align it).
 * Not monotone in the batch: oneDNN picks algorithms and layouts per shape. Fails
 * with STOKE_ERR_UNAVAILABLE when the layouts chosen at this batch cannot be fused
 * (cpu_conv_block_supported would say no). */
stoke_status cpu_conv_block_workspace(const cpu_conv2d_shape *s, int K, int prec, size_t *bytes);

/* out (B, OC, OH/K, OW/K) overwritten; idx (same count, bytes) the argmax window
 * positions, or NULL (inference). inp, weight, bias as cpu_conv2d_forward. */
stoke_status cpu_conv_block_forward(float *out, uint8_t *idx, const float *inp, const float *weight,
                                    const float *bias, const cpu_conv2d_shape *s, int K, int prec,
                                    void *ws, size_t ws_size);

/* dout (B, OC, OH/K, OW/K) and the forward's idx; ACCUMULATES dinp (skipped if NULL),
 * dweight and dbias (NULL when the shape has no bias) as cpu_conv2d_backward. */
stoke_status cpu_conv_block_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const uint8_t *idx, const float *inp, const float *weight,
                                     const cpu_conv2d_shape *s, int K, int prec, void *ws,
                                     size_t ws_size);

#endif
