/* test_nn_precision.c - fp32 <-> bf16/fp16 conversions (exhaustive to fp32, random and
 * edge cases from fp32, every dispatch path bit-identical to the scalar one), bf16/fp16
 * storage emulation, and the dynamic loss scaler with injected overflows. */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/precision.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- independent references (double arithmetic, not bit tricks) ---------------------- */

/* the value of a finite fp16 pattern, or 2^16 for 0x7c00 (the "next value" that
 * rounding to nearest compares against before it overflows to inf) */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? 65536.0 : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t h)
{
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? ldexp(1.0, 128) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

/* nearest of the two magnitude neighbours lo <= |x| <= lo + 1 (patterns), ties to even */
static uint16_t nearest(double ax, uint16_t lo, double (*value)(uint16_t))
{
    uint16_t hi = (uint16_t)(lo + 1);
    double dl = ax - value(lo), dh = value(hi) - ax;
    if (dl < dh)
        return lo;
    if (dh < dl)
        return hi;
    return (lo & 1) ? hi : lo;
}

static uint16_t ref_f32_to_bf16(float x)
{
    uint32_t u = f2u(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x40);
    if (isinf(x))
        return sign | 0x7f80;
    double ax = fabs((double)x);
    uint16_t lo = (uint16_t)((u & 0x7fffffffu) >> 16); /* truncation is the lower neighbour */
    if (bf16_value(lo) == ax)
        return sign | lo;
    return sign | nearest(ax, lo, bf16_value);
}

static uint16_t ref_f32_to_f16(float x)
{
    uint32_t u = f2u(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if (isnan(x))
        return sign | 0x7e00 | ((u >> 13) & 0x3ff);
    double ax = fabs((double)x);
    if (ax >= 65536.0)
        return sign | 0x7c00;
    /* the largest pattern whose value is <= ax, by binary search over 0..0x7c00 */
    uint16_t lo = 0, hi = 0x7c00;
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (f16_value(mid) <= ax)
            lo = mid;
        else
            hi = mid;
    }
    if (f16_value(lo) == ax)
        return sign | lo;
    return sign | nearest(ax, lo, f16_value);
}

/* ---- the paths ------------------------------------------------------------------------ */

static cpu_isa paths[CPU_ISA_COUNT];
static int npaths;

static void find_paths(void)
{
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        if (cpu_isa_supported((cpu_isa)i))
            paths[npaths++] = (cpu_isa)i;
        fprintf(stderr, "note: path %-10s %s\n", cpu_isa_name((cpu_isa)i),
                cpu_isa_supported((cpu_isa)i) ? "tested" : "not supported here, skipped");
    }
    CHECK(cpu_isa_supported(CPU_ISA_SCALAR));
    CHECK(cpu_isa_supported(cpu_isa_for_bf16()) && cpu_isa_supported(cpu_isa_for_f16()));
    CHECK_STR_EQ(cpu_isa_name(CPU_ISA_AVX512BF16), "avx512bf16");
    CHECK(!cpu_isa_supported(CPU_ISA_COUNT));
}

/* ---- to fp32: all 65536 patterns ------------------------------------------------------- */

static void test_to_f32_exhaustive(void)
{
    static uint16_t h[65536 + 3];
    static float ref[65536 + 3], got[65536 + 3];
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        /* bf16: exact, the bits in the top half */
        ref[i] = cpu_bf16_to_f32_1(h[i]);
        if (f2u(ref[i]) != (uint32_t)i << 16)
            bad++;
        int e = (i >> 7) & 0xff;
        if (e == 255 ? !(isnan(ref[i]) || isinf(ref[i])) : (double)ref[i] != bf16_value(h[i]))
            bad++;
    }
    CHECK_INT_EQ(bad, 0);
    for (int p = 0; p < npaths; p++) {
        cpu_bf16_to_f32_isa(paths[p], h, got, 65536);
        CHECK_MSG(memcmp(got, ref, 65536 * 4) == 0, "bf16 -> f32 path %s", cpu_isa_name(paths[p]));
    }

    bad = 0;
    for (int i = 0; i < 65536; i++) {
        float f = cpu_f16_to_f32_1(h[i]);
        ref[i] = f;
        int e = (i >> 10) & 0x1f, m = i & 0x3ff;
        if (e == 31 && m) { /* NaN: same sign, quiet, payload kept */
            uint32_t u = f2u(f);
            if (!isnan(f) || (u >> 31) != (uint32_t)(i >> 15) || !(u & 0x400000) ||
                ((u >> 13) & 0x3ff) != (uint32_t)(m | 0x200))
                bad++;
        } else if (e == 31) {
            if (!isinf(f) || (f < 0) != (i >> 15))
                bad++;
        } else if ((double)f != f16_value(h[i]) || (signbit(f) != 0) != (i >> 15 != 0)) {
            bad++;
        }
    }
    CHECK_INT_EQ(bad, 0);
    for (int p = 0; p < npaths; p++) {
        cpu_f16_to_f32_isa(paths[p], h, got, 65536);
        CHECK_MSG(memcmp(got, ref, 65536 * 4) == 0, "f16 -> f32 path %s", cpu_isa_name(paths[p]));
        /* a misaligned start and an odd length exercise every tail */
        cpu_f16_to_f32_isa(paths[p], h + 1, got, 65533);
        CHECK_MSG(memcmp(got, ref + 1, 65533 * 4) == 0, "f16 -> f32 path %s, offset 1",
                  cpu_isa_name(paths[p]));
    }
    /* the dispatching entry points */
    cpu_f16_to_f32(h, got, 65536);
    CHECK(memcmp(got, ref, 65536 * 4) == 0);
}

/* ---- from fp32: edge cases and 1e6 random values ---------------------------------------- */

static const uint32_t edges[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, /* zeros, infinities */
    0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa00000, 0x7fbfffff, 0x7fffffff,
    0x7f810000, 0x7f80ffff, /* NaNs: quiet, signaling, payloads */
    0x7f7fffff, 0xff7fffff, 0x7f7f0000, 0x7f7f8000, 0x7f7f7fff, /* fp32 max, bf16 max */
    0x00000001, 0x80000001, 0x007fffff, 0x00400000, 0x00008000, 0x00018000, 0x00007fff,
    0x0000ffff, 0x807f8000, 0x00800000, 0x007f8000, 0x007fc000,             /* subnormal fp32 */
    0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf808000,             /* bf16 ties */
    0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000, 0xc77ff000, /* fp16 max */
    0x3f801000, 0x3f803000, 0x3f801001, 0x3f800fff,                         /* fp16 ties */
    0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33c00000, 0x33a00000, 0x34400000,
    0x387fc000, 0x387fe000, 0x387ff000, 0x38800000, 0x387fffff, 0xb87fe000, /* fp16 subn. */
    0x3f800000, 0x40490fdb, 0xc0490fdb, 0x3eaaaaab,
};
enum { NEDGE = sizeof edges / sizeof edges[0] };
enum { NRAND = 1000000 };

static void test_from_f32(void)
{
    /* the scalar path against the double-arithmetic references, on the edges */
    for (int i = 0; i < NEDGE; i++) {
        float x = u2f(edges[i]);
        CHECK_MSG(cpu_f32_to_bf16_1(x) == ref_f32_to_bf16(x), "bf16 of %08x: %04x vs %04x",
                  edges[i], cpu_f32_to_bf16_1(x), ref_f32_to_bf16(x));
        CHECK_MSG(cpu_f32_to_f16_1(x) == ref_f32_to_f16(x), "f16 of %08x: %04x vs %04x", edges[i],
                  cpu_f32_to_f16_1(x), ref_f32_to_f16(x));
    }
    /* named values */
    CHECK_INT_EQ(cpu_f32_to_bf16_1(u2f(0x3f808000)), 0x3f80); /* tie to even, down */
    CHECK_INT_EQ(cpu_f32_to_bf16_1(u2f(0x3f818000)), 0x3f82); /* tie to even, up */
    CHECK_INT_EQ(cpu_f32_to_bf16_1(u2f(0x7f7fffff)), 0x7f80); /* overflow: inf */
    CHECK_INT_EQ(cpu_f32_to_bf16_1(u2f(0x00400000)), 0x0040); /* subnormal kept */
    CHECK_INT_EQ(cpu_f32_to_bf16_1(u2f(0x7f800001)), 0x7fc0); /* NaN stays NaN */
    CHECK_INT_EQ(cpu_f32_to_f16_1(65504.0f), 0x7bff);
    CHECK_INT_EQ(cpu_f32_to_f16_1(65520.0f), 0x7c00);
    CHECK_INT_EQ(cpu_f32_to_f16_1(0x1.0p-24f), 0x0001);
    CHECK_INT_EQ(cpu_f32_to_f16_1(0x1.0p-25f), 0x0000);
    CHECK_INT_EQ(cpu_f32_to_f16_1(0x1.8p-24f), 0x0002);
    CHECK_INT_EQ(cpu_f32_to_f16_1(-0x1.0p-14f), 0x8400);
    CHECK_INT_EQ(cpu_f32_to_f16_1(u2f(0x7f800001)), 0x7e00);

    /* the inputs: edges, random bit patterns (every class), random values in the fp16
     * range, and values one fp32 ulp around bf16/fp16 ties */
    size_t n = NRAND + NEDGE;
    float *x = malloc(n * sizeof *x);
    uint16_t *ref = malloc(n * 2), *got = malloc(n * 2);
    CHECK(x && ref && got);
    if (!x || !ref || !got)
        return;
    for (size_t i = 0; i < NRAND; i++) {
        uint64_t r = rng_next();
        uint32_t u = (uint32_t)r;
        switch ((r >> 32) % 4) {
        case 0: /* any pattern */ break;
        case 1: /* magnitudes 2^-26 .. 2^17: the fp16 range and its edges */
            u = (u & 0x807fffffu) | ((uint32_t)(101 + (r >> 40) % 43) << 23);
            break;
        case 2: /* bf16 ties and their neighbours */
            u = (u & 0xffff0000u) | 0x8000u;
            u += (uint32_t)((r >> 40) % 3) - 1;
            break;
        default: /* fp16 ties (in the normal range) and neighbours */
            u = (u & 0x8000e000u) | ((uint32_t)(113 + (r >> 40) % 30) << 23) | 0x1000u;
            u += (uint32_t)((r >> 48) % 3) - 1;
            break;
        }
        x[i] = u2f(u);
    }
    for (int i = 0; i < NEDGE; i++)
        x[NRAND + i] = u2f(edges[i]);

    /* scalar vs the references: every 7th value (the references are slow) */
    int bad_bf = 0, bad_h = 0;
    for (size_t i = 0; i < n; i += 7) {
        bad_bf += cpu_f32_to_bf16_1(x[i]) != ref_f32_to_bf16(x[i]);
        bad_h += cpu_f32_to_f16_1(x[i]) != ref_f32_to_f16(x[i]);
    }
    CHECK_INT_EQ(bad_bf, 0);
    CHECK_INT_EQ(bad_h, 0);

    /* every path bit for bit against the scalar one, over the whole array and with a
     * misaligned start and odd length */
    for (size_t i = 0; i < n; i++)
        ref[i] = cpu_f32_to_bf16_1(x[i]);
    for (int p = 0; p < npaths; p++) {
        cpu_f32_to_bf16_isa(paths[p], x, got, n);
        CHECK_MSG(memcmp(got, ref, n * 2) == 0, "f32 -> bf16 path %s", cpu_isa_name(paths[p]));
        cpu_f32_to_bf16_isa(paths[p], x + 3, got, n - 8);
        CHECK_MSG(memcmp(got, ref + 3, (n - 8) * 2) == 0, "f32 -> bf16 path %s, offset 3",
                  cpu_isa_name(paths[p]));
    }
    cpu_f32_to_bf16(x, got, n);
    CHECK(memcmp(got, ref, n * 2) == 0);
    for (size_t i = 0; i < n; i++)
        ref[i] = cpu_f32_to_f16_1(x[i]);
    for (int p = 0; p < npaths; p++) {
        cpu_f32_to_f16_isa(paths[p], x, got, n);
        CHECK_MSG(memcmp(got, ref, n * 2) == 0, "f32 -> f16 path %s", cpu_isa_name(paths[p]));
        cpu_f32_to_f16_isa(paths[p], x + 5, got, n - 12);
        CHECK_MSG(memcmp(got, ref + 5, (n - 12) * 2) == 0, "f32 -> f16 path %s, offset 5",
                  cpu_isa_name(paths[p]));
    }
    cpu_f32_to_f16(x, got, n);
    CHECK(memcmp(got, ref, n * 2) == 0);

    /* a block of normal values with one subnormal in it (the AVX512-BF16 path redoes
     * such blocks) and every length 1..70 */
    float blk[70];
    uint16_t r1[70], r2[70];
    for (int i = 0; i < 70; i++)
        blk[i] = (float)(i + 1) * 1.37f;
    blk[40] = u2f(0x00418000);
    for (int len = 1; len <= 70; len++) {
        for (int p = 0; p < npaths; p++) {
            for (int i = 0; i < len; i++)
                r1[i] = cpu_f32_to_bf16_1(blk[i]);
            cpu_f32_to_bf16_isa(paths[p], blk, r2, (size_t)len);
            CHECK_MSG(memcmp(r1, r2, (size_t)len * 2) == 0, "bf16 path %s length %d",
                      cpu_isa_name(paths[p]), len);
        }
    }

    /* storage emulation: rounding in place equals the scalar round trip */
    float *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *want);
    CHECK(y && want);
    if (y && want) {
        for (size_t i = 0; i < n; i++)
            want[i] = cpu_bf16_to_f32_1(cpu_f32_to_bf16_1(x[i]));
        for (int p = 0; p < npaths; p++) {
            memcpy(y, x, n * sizeof *y);
            cpu_round_bf16_isa(paths[p], y, n);
            CHECK_MSG(memcmp(y, want, n * 4) == 0, "round bf16 path %s", cpu_isa_name(paths[p]));
        }
        memcpy(y, x, n * sizeof *y);
        cpu_round_bf16(y, n);
        CHECK(memcmp(y, want, n * 4) == 0);
        for (size_t i = 0; i < n; i++)
            want[i] = cpu_f16_to_f32_1(cpu_f32_to_f16_1(x[i]));
        for (int p = 0; p < npaths; p++) {
            memcpy(y, x, n * sizeof *y);
            cpu_round_f16_isa(paths[p], y, n);
            CHECK_MSG(memcmp(y, want, n * 4) == 0, "round f16 path %s", cpu_isa_name(paths[p]));
        }
        memcpy(y, x, n * sizeof *y);
        cpu_round_f16(y, n);
        CHECK(memcmp(y, want, n * 4) == 0);
        /* a value already in bf16 is unchanged; 1 + 2^-9 rounds to 1 (tie to even) */
        float v[3] = {1.5f, 1.0f + 0x1.0p-9f, 1.0f + 0x1.8p-8f};
        cpu_round_bf16(v, 3);
        CHECK(v[0] == 1.5f && v[1] == 1.0f && v[2] == 1.0f + 0x1.0p-7f);
    }
    free(y);
    free(want);
    free(x);
    free(ref);
    free(got);
}

/* ---- the loss scaler ------------------------------------------------------------------- */

static void test_loss_scaler(void)
{
    cpu_loss_scaler s;
    cpu_loss_scaler_init(&s);
    CHECK(s.scale == 65536.0f && s.growth_factor == 2.0f && s.backoff_factor == 0.5f);
    CHECK_INT_EQ(s.growth_interval, 2000);
    CHECK_INT_EQ(cpu_loss_scaler_check(&s), STOKE_OK);

    /* overflows back off and restart the count */
    s.growth_interval = 3;
    for (int k = 0; k < 5; k++) {
        float before = s.scale;
        cpu_loss_scaler_update(&s, true);
        CHECK(s.scale == before * 0.5f);
        CHECK_INT_EQ(s.good_steps, 0);
    }
    CHECK_INT_EQ(s.skipped_steps, 5);
    CHECK(s.scale == 2048.0f);

    /* growth after growth_interval good steps; an overflow restarts the count */
    cpu_loss_scaler_update(&s, false);
    cpu_loss_scaler_update(&s, false);
    CHECK(s.scale == 2048.0f);
    CHECK_INT_EQ(s.good_steps, 2);
    cpu_loss_scaler_update(&s, true);
    CHECK(s.scale == 1024.0f);
    for (int i = 0; i < 2; i++)
        cpu_loss_scaler_update(&s, false);
    CHECK(s.scale == 1024.0f);
    cpu_loss_scaler_update(&s, false);
    CHECK(s.scale == 2048.0f);
    CHECK_INT_EQ(s.good_steps, 0);
    /* it never grows to inf */
    s.scale = FLT_MAX;
    for (int i = 0; i < 3; i++)
        cpu_loss_scaler_update(&s, false);
    CHECK(s.scale == FLT_MAX);

    /* a checkpoint's fields are checked on load */
    cpu_loss_scaler bad = s;
    bad.scale = NAN;
    CHECK_INT_EQ(cpu_loss_scaler_check(&bad), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "scale");
    bad = s;
    bad.good_steps = 3;
    CHECK_INT_EQ(cpu_loss_scaler_check(&bad), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "good_steps");
    bad = s;
    bad.backoff_factor = 1.0f;
    CHECK_INT_EQ(cpu_loss_scaler_check(&bad), STOKE_ERR_ARG);
}

int main(void)
{
    find_paths();
    test_to_f32_exhaustive();
    test_from_f32();
    test_loss_scaler();
    return CHECK_DONE();
}
