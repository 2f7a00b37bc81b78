/* rng.h - stoke's one family of random numbers: SplitMix64 (Steele, Lea, Flood 2014)
 * and the counter-based streams built on it. Every random choice stoke makes (weight
 * initialization, dropout masks, shuffles, augmentations, temporary names) comes from
 * here, so a seed means the same thing everywhere and checkpoints, shuffles and masks
 * are reproducible bit for bit. Written by hand: it is a few lines, and a library for
 * it would be larger. Inline because the transforms and the initializer draw per
 * element. */
#ifndef STOKE_CORE_RNG_H
#define STOKE_CORE_RNG_H

#include <stdint.h>

/* SplitMix64's increment (2^64 / golden ratio). */
#define STOKE_GOLDEN64 0x9e3779b97f4a7c15ULL

/* SplitMix64's finalizer alone: a bijective mix of 64 bits. */
static inline uint64_t stoke_fmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* SplitMix64's output for counter z: stoke_fmix64(z + STOKE_GOLDEN64). */
static inline uint64_t stoke_mix64(uint64_t z) { return stoke_fmix64(z + STOKE_GOLDEN64); }

/* The sequential SplitMix64 generator: advances *state and returns its next number. */
static inline uint64_t stoke_splitmix64_next(uint64_t *state)
{
    return stoke_fmix64(*state += STOKE_GOLDEN64);
}

/* The top 53 bits of x as a double, uniform in [0, 1). */
static inline double stoke_u64_to_unit(uint64_t x) { return (double)(x >> 11) * 0x1.0p-53; }

/* The key of a stream: independent for every (seed, a, b) triple. */
static inline uint64_t stoke_stream_key(uint64_t seed, uint64_t a, uint64_t b)
{
    return stoke_mix64(stoke_mix64(stoke_mix64(seed) ^ a) ^ b);
}

/* A counter-based stream: the n-th number depends only on (key, n), so a worker can
 * draw sample i's numbers without drawing those of the samples before it. */
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
static inline double stoke_rng_unit(stoke_rng *r) { return stoke_u64_to_unit(stoke_rng_u64(r)); }

#endif
