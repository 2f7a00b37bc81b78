/* dist_util.h - the micro-batches the data parallel tests feed every model alike. */
#ifndef STOKE_TEST_DIST_UTIL_H
#define STOKE_TEST_DIST_UTIL_H

#include <stdint.h>

/* Micro-batch k: b x in inputs in [-1, 1) from a xorshift stream keyed by k, and b
 * class targets below classes. */
static inline void dist_micro_batch(int k, int b, int in, int classes, float *x, int32_t *y)
{
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 1);
    for (int i = 0; i < b * in; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    for (int i = 0; i < b; i++)
        y[i] = (i * 7 + k) % classes;
}

#endif
