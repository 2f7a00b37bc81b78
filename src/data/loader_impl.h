/* loader_impl.h - what the sampler, transforms and loader share privately: the
 * counter-based random numbers that make every stream a function of its key. */
#ifndef STOKE_LOADER_IMPL_H
#define STOKE_LOADER_IMPL_H

#include <stdbool.h>
#include <stdint.h>

/* splitmix64's finalizer: a bijective mix of a 64-bit counter (Steele, Lea, Flood
 * 2014). Written by hand: it is six lines, and a library for it would be larger. */
static inline uint64_t stoke_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The key of a stream: independent for every (seed, a, b) triple. */
static inline uint64_t stoke_stream_key(uint64_t seed, uint64_t a, uint64_t b)
{
    return stoke_mix64(stoke_mix64(stoke_mix64(seed) ^ a) ^ b);
}

/* A counter-based stream: the n-th number depends only on (key, n). */
typedef struct stoke_rng {
    uint64_t key, n;
} stoke_rng;

static inline uint64_t stoke_rng_u64(stoke_rng *r)
{
    return stoke_mix64(r->key ^ stoke_mix64(r->n++));
}

/* Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject). */
static inline uint64_t stoke_rng_below(stoke_rng *r, uint64_t bound)
{
    unsigned __int128 m = (unsigned __int128)stoke_rng_u64(r) * bound;
    uint64_t lo = (uint64_t)m;
    if (lo < bound) {
        uint64_t t = -bound % bound;
        while (lo < t) {
            m = (unsigned __int128)stoke_rng_u64(r) * bound;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double stoke_rng_unit(stoke_rng *r)
{
    return (double)(stoke_rng_u64(r) >> 11) * 0x1.0p-53;
}

/* The random parameters one op draws for one sample, in op order from the sample's
 * stream (seed, epoch, index). */
typedef struct stoke_op_draw {
    int crop_i, crop_j; /* CROP: top-left corner in the padded image */
    bool flip;          /* HFLIP */
    int order[4];       /* COLOR_JITTER: order of brightness 0, contrast 1,
                           saturation 2, hue 3 */
    float factor[4];    /*   and their factors (hue: the shift, in turns) */
} stoke_op_draw;

struct stoke_transform;
/* Fills p[0..nops) with what stoke_transform_apply draws for that sample; the tests
 * compute their references from it. */
void stoke_transform_draw(const struct stoke_transform *t, uint64_t seed, int64_t epoch,
                          int64_t index, stoke_op_draw *p);

/* Tests only: the instruction set the transforms created afterwards use (-1: detect,
 * 0: baseline x86-64, 1: AVX2 where the CPU and the STOKE_MAX_CPU_ISA cap allow it,
 * else baseline), so the scalar path is tested against the vectorized one on the same
 * machine. */
void stoke_transform_set_isa(int level);

#endif
