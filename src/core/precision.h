/* precision.h - fp32 <-> bf16 / fp16 conversions with runtime ISA dispatch, bf16
 * storage emulation, and the dynamic loss scaler for fp16 training (CPU backend). */
#ifndef STOKE_NN_CPU_PRECISION_H
#define STOKE_NN_CPU_PRECISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

/* The instruction-set paths of the bulk conversions. Every path gives the same bits as
 * CPU_ISA_SCALAR on every input (tests/test_nn_precision.c checks it). */
typedef enum cpu_isa {
    CPU_ISA_SCALAR = 0, /* portable C, exact */
    CPU_ISA_F16C,       /* AVX + F16C: 8-wide fp16 conversions */
    CPU_ISA_AVX512F,    /* AVX-512F: 16-wide fp16 conversions, integer bf16 rounding */
    CPU_ISA_AVX512BF16, /* AVX512-BF16 (vcvtne2ps2bf16) for fp32 -> bf16 */
    CPU_ISA_COUNT
} cpu_isa;

/* Whether this CPU and OS (XSAVE state enabled) can run the path and the instruction-set
 * cap (STOKE_MAX_CPU_ISA, stoke_max_cpu_isa) allows it. Can't fail. */
bool cpu_isa_supported(cpu_isa isa);

/* Short name of a path ("scalar", "f16c", "avx512f", "avx512bf16"). Never NULL. */
const char *cpu_isa_name(cpu_isa isa);

/* The paths the dispatching functions below use: the widest supported one for each
 * direction (thread-safe). */
cpu_isa cpu_isa_for_bf16(void);
cpu_isa cpu_isa_for_f16(void);

/* ---- scalar conversions (the reference semantics) ----------------------------------
 * fp32 -> bf16 / fp16: round to nearest, ties to even, fp32 subnormals included (no
 * flush to zero, unlike the bare vcvtneps2bf16 instruction, whose flushed lanes the
 * AVX512-BF16 path repairs). Overflow gives +-inf. A NaN stays a NaN of the same sign,
 * quiet, with the top payload bits kept: bf16 = (bits >> 16) | 0x0040, fp16 = 0x7e00 |
 * (mantissa >> 13) (what the conversion instructions produce).
 * bf16 / fp16 -> fp32 is exact; a signaling fp16 NaN comes back quiet (as vcvtph2ps
 * does); a bf16 NaN keeps its bits. These never fail and never touch MXCSR state. */
uint16_t cpu_f32_to_bf16_1(float x);
float cpu_bf16_to_f32_1(uint16_t h);
uint16_t cpu_f32_to_f16_1(float x);
float cpu_f16_to_f32_1(uint16_t h);

/* ---- bulk conversions: in (n), out (n); in and out must not overlap ----------------
 * The plain names dispatch to cpu_isa_for_bf16() / cpu_isa_for_f16(); the _isa
 * variants run the given path, which must be supported (an unsupported path falls back
 * to the scalar one rather than fault). None fails. */
void cpu_f32_to_bf16(const float *in, uint16_t *out, size_t n);
void cpu_bf16_to_f32(const uint16_t *in, float *out, size_t n);
void cpu_f32_to_f16(const float *in, uint16_t *out, size_t n);
void cpu_f16_to_f32(const uint16_t *in, float *out, size_t n);
void cpu_f32_to_bf16_isa(cpu_isa isa, const float *in, uint16_t *out, size_t n);
void cpu_bf16_to_f32_isa(cpu_isa isa, const uint16_t *in, float *out, size_t n);
void cpu_f32_to_f16_isa(cpu_isa isa, const float *in, uint16_t *out, size_t n);
void cpu_f16_to_f32_isa(cpu_isa isa, const uint16_t *in, float *out, size_t n);

/* bf16 storage emulation: x (n) is rounded to bf16 and back in place, so x[i] ==
 * cpu_bf16_to_f32_1(cpu_f32_to_bf16_1(x[i])) bit for bit. fp16 likewise. */
void cpu_round_bf16(float *x, size_t n);
void cpu_round_f16(float *x, size_t n);
void cpu_round_bf16_isa(cpu_isa isa, float *x, size_t n);
void cpu_round_f16_isa(cpu_isa isa, float *x, size_t n);

/* ---- dynamic loss scaling (as torch.cuda.amp.GradScaler) ----------------------------
 * Plain data, so a checkpoint can store every field and restore it exactly. The loss
 * is multiplied by `scale` (the loss functions' grad_scale); stoke_model_step divides
 * the gradients by it (together with the accumulation count and the clipping
 * coefficient: one pass), skips the step if any gradient is inf or NaN, and then calls
 * cpu_loss_scaler_update(). Clipping sees the unscaled gradients. */
typedef struct cpu_loss_scaler {
    float scale;             /* current loss scale (initially 65536) */
    float growth_factor;     /* scale *= this after growth_interval good steps (2) */
    float backoff_factor;    /* scale *= this on an overflow (0.5) */
    int32_t growth_interval; /* good steps in a row before growing (2000) */
    int32_t good_steps;      /* good steps since the last growth or overflow */
    int64_t skipped_steps;   /* overflows seen so far (steps skipped), for reports */
} cpu_loss_scaler;

/* PyTorch's defaults: scale 65536, growth 2, backoff 0.5, interval 2000. Can't fail. */
void cpu_loss_scaler_init(cpu_loss_scaler *s);

/* Checks a scaler's fields (scale finite and > 0, growth > 1, 0 < backoff < 1,
 * interval >= 1, 0 <= good_steps < interval), as after loading a checkpoint.
 * STOKE_ERR_ARG naming the field otherwise. */
stoke_status cpu_loss_scaler_check(const cpu_loss_scaler *s);

/* After the step (taken or skipped): on overflow the scale is multiplied by
 * backoff_factor and good_steps restarts; otherwise good_steps grows, and reaching
 * growth_interval multiplies the scale by growth_factor (kept if it stays finite) and
 * restarts the count. Can't fail. */
void cpu_loss_scaler_update(cpu_loss_scaler *s, bool overflow);

#endif
