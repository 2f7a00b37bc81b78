/* simd.h - the CPU kernels' vector-width dispatch: a kernel's inner loops compiled for
 * AVX-512F, AVX2 and the baseline, and chosen per call by what the CPU has and the
 * instruction-set cap (STOKE_MAX_CPU_ISA) allows. Internal to src/nn/cpu. */
#ifndef STOKE_NN_CPU_SIMD_H
#define STOKE_NN_CPU_SIMD_H

#include "core/isa.h"

/* The build targets baseline x86-64 (SSE2), and the exp-heavy loops are compute-bound,
 * so wider vectors pay: measured on one core against the SSE2 build, GELU 6x, tanh and
 * sigmoid 3.5x, dropout 4x. The choice is made at each call rather than by the dynamic
 * loader (target_clones and its ifunc resolvers), so the cap can lower it and a
 * ThreadSanitizer build keeps it (TSan's runtime is not up when resolvers run). */
typedef enum cpu_simd {
    CPU_SIMD_DEFAULT = 0, /* the baseline target */
    CPU_SIMD_AVX2,        /* target("avx2") */
    CPU_SIMD_AVX512F,     /* target("avx512f"); GCC and clang contract a*b+c to FMA here */
} cpu_simd;

/* The variant every CPU_SIMD_KERNEL dispatcher runs now: the widest the CPU has and the
 * cap allows (fixed with the cap, see stoke_max_cpu_isa). Can't fail. */
static inline cpu_simd cpu_simd_variant(void)
{
    unsigned u = stoke_isa_usable();
    return (u & STOKE_ISA_AVX512F) ? CPU_SIMD_AVX512F
           : (u & STOKE_ISA_AVX2)  ? CPU_SIMD_AVX2
                                   : CPU_SIMD_DEFAULT;
}

static inline const char *cpu_simd_name(cpu_simd v)
{
    return v == CPU_SIMD_AVX512F ? "avx512f" : v == CPU_SIMD_AVX2 ? "avx2" : "default";
}

/* Defines a void kernel `name` with parameters `params` (in parentheses) whose body
 * follows the macro; `args` repeats the parameter names, in parentheses:
 *
 *     CPU_SIMD_KERNEL(relu_span, (float *out, const float *inp, size_t n), (out, inp, n)) {
 *         ... loops ...
 *     }
 *
 * The body becomes an always-inline function, compiled into a target("avx512f"), a
 * target("avx2") and a baseline wrapper (so the static inline helpers it calls are
 * compiled at each width too), and `name` calls the one cpu_simd_variant() picks. */
#if defined(__x86_64__)
#define CPU_SIMD_KERNEL(name, params, args)                                                    \
    static inline __attribute__((always_inline)) void name##_body params;                      \
    __attribute__((target("avx512f"))) static void name##_avx512f params { name##_body args; } \
    __attribute__((target("avx2"))) static void name##_avx2 params { name##_body args; }       \
    static void name##_default params { name##_body args; }                                    \
    static void name params                                                                    \
    {                                                                                          \
        switch (cpu_simd_variant()) {                                                          \
        case CPU_SIMD_AVX512F: name##_avx512f args; return;                                    \
        case CPU_SIMD_AVX2: name##_avx2 args; return;                                          \
        case CPU_SIMD_DEFAULT: break;                                                          \
        }                                                                                      \
        name##_default args;                                                                   \
    }                                                                                          \
    static inline __attribute__((always_inline)) void name##_body params
#else
#define CPU_SIMD_KERNEL(name, params, args) static void name params
#endif

#endif
