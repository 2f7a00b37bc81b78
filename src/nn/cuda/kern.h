/* kern.h - a CUDA kernel written once for two compilers (DESIGN.md, "No GPU on the
 * development machines"). A kernel's body is a plain function of its index,
 *     NK_FN void nk_<name>(int64_t i, const <args> *a)
 * in a header both compilers read (k_*.h). nvcc wraps it in a __global__ launcher, one
 * thread per index (launch_device.cu, the module libstoke_cuda.so); the C compiler
 * wraps the same body in a loop over the indices (launch_host.c). The host build is
 * what the test suite runs against the CUDA test doubles, so the arithmetic the GPU
 * executes is the arithmetic the tests check.
 *
 * Rules for a body: it writes only what its index owns (no atomics, no shared memory:
 * results never depend on scheduling, so they are deterministic), reads and writes
 * device pointers held in its args struct, and uses only what both C and CUDA C++
 * have (no designated initializers or restrict in headers; casts from void * are
 * explicit). A reduction whose outputs are few and whose inputs are many runs as a
 * tree of launches (k_base.h's nk_tree_sum, planned by reduce.c): one thread looping
 * over a batch's worth of values waits on memory for the whole GPU. */
#ifndef STOKE_NN_CUDA_KERN_H
#define STOKE_NN_CUDA_KERN_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NK_FN static __device__ __forceinline__
#else
#include <string.h>
#define NK_FN static inline
#endif

NK_FN uint32_t nk_f2u(float x)
{
#ifdef __CUDACC__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

NK_FN float nk_u2f(uint32_t u)
{
#ifdef __CUDACC__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* core/rng.h's stoke_mix64 (SplitMix64's finalizer after a golden-ratio step), again:
 * that header's functions are host code, which a kernel cannot call; the dropout
 * test holds the two to the same bits. */
NK_FN uint64_t nk_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* fp32 -> bf16 / fp16 bits with the CPU backend's rounding (src/core/precision.h:
 * nearest-even, subnormals kept, NaN quiet with its top payload), so a model's
 * low-precision weight copies are the same bits on either device. */
NK_FN uint16_t nk_to_bf16(float x)
{
    uint32_t u = nk_f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

NK_FN uint16_t nk_to_f16(float x)
{
    uint32_t u = nk_f2u(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        uint32_t r = a + 0xfffu + ((a >> 13) & 1);
        return (uint16_t)(sign | ((r - ((127u - 15) << 23)) >> 13));
    }
    if (a <= 0x33000000u)
        return (uint16_t)sign;
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

NK_FN float nk_bf16_to_f32(uint16_t h) { return nk_u2f((uint32_t)h << 16); }

/* fp16 bits -> fp32, exact (C11 has no portable _Float16; the test doubles use it
 * too): subnormals scaled by 2^-24, a NaN stays a NaN of the same payload, quiet. */
NK_FN float nk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return nk_u2f(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0)
        return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
    return nk_u2f(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
