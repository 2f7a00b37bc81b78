/* isa.h - the CPU features stoke's own code dispatches on, as this CPU has them and
 * as the instruction-set cap (stoke_max_cpu_isa, core.h) allows them. Internal: the
 * one place that detects features and reads the cap. */
#ifndef STOKE_CORE_ISA_H
#define STOKE_CORE_ISA_H

#include "stoke/core.h"

/* The features, as bits. Each counts as present only when the OS saves its register
 * state too (xgetbv), as __builtin_cpu_supports checks. */
enum {
    STOKE_ISA_F16C = 1u << 0,        /* AVX + F16C: 8-wide fp16 conversions */
    STOKE_ISA_AVX2 = 1u << 1,        /* AVX2 (the kernels' target("avx2") variant) */
    STOKE_ISA_AVX512F = 1u << 2,     /* AVX-512F (the target("avx512f") variant) */
    STOKE_ISA_AVX512_BF16 = 1u << 3, /* AVX512-BF16 with AVX512-VL and F */
};

/* The features this CPU and OS have, whatever the cap. Detected once; thread-safe. */
unsigned stoke_isa_present(void);

/* The features of `present` that `cap` allows. Pure. */
unsigned stoke_isa_allowed(unsigned present, stoke_cpu_isa cap);

/* stoke_isa_allowed(stoke_isa_present(), the cap in force): what the dispatchers use.
 * Fixes the cap on first use; after that one atomic load. With a bad
 * STOKE_MAX_CPU_ISA it is the set for STOKE_CPU_ISA_SSE41 (nothing beyond the
 * baseline). Thread-safe, can't fail. */
unsigned stoke_isa_usable(void);

/* The lowest cap that allows a CPU feature, named as /proc/cpuinfo's flags line names
 * it ("sse4_2", "avx2", "avx512_bf16", "amx_tile"): STOKE_CPU_ISA_SSE41 for SSE up to
 * 4.1, STOKE_CPU_ISA_ALL (hidden by every cap) for a name the table does not know. */
stoke_cpu_isa stoke_isa_level_of_flag(const char *flag);

#endif
