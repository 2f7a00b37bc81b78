/* graph_init.c - a parameter's initial values: PyTorch's default initialization,
 * drawn from a seed. */
#include <math.h>
#include <stdint.h>

#include "core/rng.h"
#include "nn/graph_impl.h"

/* Each parameter gets its own SplitMix64 stream keyed by (seed, FNV-1a of its name), so
 * the values do not depend on the layer order. */
static double uniform01(uint64_t *s)
{ /* [0, 1) with 53 bits */
    return stoke_u64_to_unit(stoke_splitmix64_next(s));
}

void nn_param_init(const nn_param *p, uint64_t seed, float *out)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = p->name; *c; c++)
        h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    uint64_t s = seed ^ h;
    stoke_splitmix64_next(&s);
    int64_t n = p->info.elems;
    double bound = 0;
    switch (p->init) {
    case NN_INIT_UNIFORM_FAN_IN:
        /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) =
         * 1/sqrt(fan_in); PyTorch's bias bound is the same 1/sqrt(fan_in). */
        bound = 1.0 / sqrt(p->fan_in);
        break;
    case NN_INIT_XAVIER: bound = sqrt(6.0 / (p->fan_in + p->fan_out)); break;
    case NN_INIT_NORMAL:
        for (int64_t i = 0; i < n; i += 2) { /* Box-Muller, both values used */
            double u1 = 1.0 - uniform01(&s), u2 = uniform01(&s);
            double r = sqrt(-2.0 * log(u1)) * p->std;
            out[i] = (float)(r * cos(2 * M_PI * u2));
            if (i + 1 < n)
                out[i + 1] = (float)(r * sin(2 * M_PI * u2));
        }
        return;
    case NN_INIT_ZEROS:
    case NN_INIT_ONES:
        for (int64_t i = 0; i < n; i++)
            out[i] = p->init == NN_INIT_ONES ? 1.0f : 0.0f;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = (float)((2.0 * uniform01(&s) - 1.0) * bound);
        /* rounding to float may reach the bound itself; PyTorch's U(-b, b) is open */
        out[i] = fabsf(v) < (float)bound ? v : 0.0f;
    }
}
