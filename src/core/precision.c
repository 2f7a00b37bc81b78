/* precision.c - fp32 <-> bf16 / fp16 conversions (scalar reference, F16C, AVX-512F,
 * AVX512-BF16 paths), bf16/fp16 storage emulation and the dynamic loss scaler. */
#include "core/precision.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/isa.h"

/* Written by hand: the conversions are a few lines each and must agree bit for bit
 * across paths and with the instructions' NaN rules; no Debian library offers bulk
 * bf16 conversions with runtime dispatch that we could test that way. */

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- which paths may run ----------------------------------------------------------
 * What this CPU has and the instruction-set cap allows (core/isa.h: the one place that
 * detects features and reads STOKE_MAX_CPU_ISA). */

bool cpu_isa_supported(cpu_isa isa)
{
    unsigned usable = stoke_isa_usable();
    switch (isa) {
    case CPU_ISA_SCALAR: return true;
    case CPU_ISA_F16C: return usable & STOKE_ISA_F16C;
    case CPU_ISA_AVX512F: return usable & STOKE_ISA_AVX512F;
    case CPU_ISA_AVX512BF16: return usable & STOKE_ISA_AVX512_BF16;
    default: return false;
    }
}

const char *cpu_isa_name(cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR: return "scalar";
    case CPU_ISA_F16C: return "f16c";
    case CPU_ISA_AVX512F: return "avx512f";
    case CPU_ISA_AVX512BF16: return "avx512bf16";
    default: return "unknown";
    }
}

cpu_isa cpu_isa_for_bf16(void)
{
    if (cpu_isa_supported(CPU_ISA_AVX512BF16))
        return CPU_ISA_AVX512BF16;
    if (cpu_isa_supported(CPU_ISA_AVX512F))
        return CPU_ISA_AVX512F;
    return CPU_ISA_SCALAR;
}

cpu_isa cpu_isa_for_f16(void)
{
    if (cpu_isa_supported(CPU_ISA_AVX512F))
        return CPU_ISA_AVX512F;
    if (cpu_isa_supported(CPU_ISA_F16C))
        return CPU_ISA_F16C;
    return CPU_ISA_SCALAR;
}

/* ---- scalar reference ---------------------------------------------------------------
 * Integer arithmetic only, so the result never depends on MXCSR (FTZ/DAZ). */

uint16_t cpu_f32_to_bf16_1(float x)
{
    uint32_t u = f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

float cpu_bf16_to_f32_1(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t cpu_f32_to_f16_1(float x)
{
    uint32_t u = f2u(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and up round to inf (65520 is a tie, 65536 even) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal half: 2^-14 and up */
        uint32_t r = a + 0xfffu + ((a >> 13) & 1);
        return (uint16_t)(sign | ((r - ((127u - 15) << 23)) >> 13));
    }
    if (a <= 0x33000000u) /* at most 2^-25, half the smallest subnormal: ties to 0 */
        return (uint16_t)sign;
    /* subnormal half: |x| = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e) */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

float cpu_f16_to_f32_1(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf, or NaN made quiet as vcvtph2ps does */
        return u2f(sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0));
    if (e == 0) {
        if (m == 0)
            return u2f(sign);
        int p = 31 - __builtin_clz(m); /* leading bit: |h| = 1.f * 2^(p - 24) */
        return u2f(sign | ((uint32_t)(p + 103) << 23) | ((m << (23 - p)) & 0x7fffffu));
    }
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

static void f32_to_bf16_scalar(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cpu_f32_to_bf16_1(in[i]);
}

static void bf16_to_f32_scalar(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cpu_bf16_to_f32_1(in[i]);
}

static void f32_to_f16_scalar(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cpu_f32_to_f16_1(in[i]);
}

static void f16_to_f32_scalar(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cpu_f16_to_f32_1(in[i]);
}

/* ---- F16C ---------------------------------------------------------------------------- */

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *in, uint16_t *out,
                                                                size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h =
            _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(out + i), h);
    }
    f32_to_f16_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const uint16_t *in, float *out,
                                                                size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    f16_to_f32_scalar(in + i, out + i, n - i);
}

/* ---- AVX-512F ------------------------------------------------------------------------ */

__attribute__((target("avx512f"))) static void f32_to_f16_avx512(const float *in, uint16_t *out,
                                                                 size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h =
            _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)(out + i), h);
    }
    f32_to_f16_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx512f"))) static void f16_to_f32_avx512(const uint16_t *in, float *out,
                                                                 size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + i))));
    f16_to_f32_scalar(in + i, out + i, n - i);
}

/* The scalar rounding rule on 16 lanes, in integers (exact for subnormals too). */
__attribute__((target("avx512f"))) static inline __m256i bf16_round_16(__m512i u)
{
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f"))) static void f32_to_bf16_avx512(const float *in, uint16_t *out,
                                                                  size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i),
                            bf16_round_16(_mm512_loadu_si512((const void *)(in + i))));
    f32_to_bf16_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx512f"))) static void bf16_to_f32_avx512(const uint16_t *in, float *out,
                                                                  size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i)));
        _mm512_storeu_si512((void *)(out + i), _mm512_slli_epi32(w, 16));
    }
    bf16_to_f32_scalar(in + i, out + i, n - i);
}

/* ---- AVX512-BF16 ---------------------------------------------------------------------
 * vcvtne2ps2bf16 rounds to nearest even and keeps NaNs as the scalar rule does, but it
 * flushes fp32 subnormal inputs to zero; a block holding any subnormal is redone with
 * the exact integer rounding (rare in practice: such values are below 1.2e-38). */

__attribute__((target("avx512f"))) static inline __mmask16 subnormal_lanes(__m512i u)
{
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    return _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x00800000)) & _mm512_test_epi32_mask(a, a);
}

__attribute__((target("avx512bf16,avx512vl,avx512f"))) static void
f32_to_bf16_avx512bf16(const float *in, uint16_t *out, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i lo = _mm512_loadu_si512((const void *)(in + i));
        __m512i hi = _mm512_loadu_si512((const void *)(in + i + 16));
        if (subnormal_lanes(lo) | subnormal_lanes(hi)) {
            _mm256_storeu_si256((__m256i *)(out + i), bf16_round_16(lo));
            _mm256_storeu_si256((__m256i *)(out + i + 16), bf16_round_16(hi));
            continue;
        }
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
        _mm512_storeu_si512((void *)(out + i), (__m512i)r);
    }
    f32_to_bf16_avx512(in + i, out + i, n - i);
}

/* ---- dispatch ------------------------------------------------------------------------ */

static cpu_isa usable(cpu_isa isa) { return cpu_isa_supported(isa) ? isa : CPU_ISA_SCALAR; }

void cpu_f32_to_bf16_isa(cpu_isa isa, const float *in, uint16_t *out, size_t n)
{
    switch (usable(isa)) {
    case CPU_ISA_AVX512BF16: f32_to_bf16_avx512bf16(in, out, n); break;
    case CPU_ISA_AVX512F: f32_to_bf16_avx512(in, out, n); break;
    default: /* F16C has nothing for bf16 */ f32_to_bf16_scalar(in, out, n); break;
    }
}

void cpu_bf16_to_f32_isa(cpu_isa isa, const uint16_t *in, float *out, size_t n)
{
    switch (usable(isa)) {
    case CPU_ISA_AVX512BF16: /* widening is a shift: the AVX-512F code is the same */
    case CPU_ISA_AVX512F: bf16_to_f32_avx512(in, out, n); break;
    default: bf16_to_f32_scalar(in, out, n); break;
    }
}

void cpu_f32_to_f16_isa(cpu_isa isa, const float *in, uint16_t *out, size_t n)
{
    switch (usable(isa)) {
    case CPU_ISA_AVX512BF16: /* implies AVX-512F */
    case CPU_ISA_AVX512F: f32_to_f16_avx512(in, out, n); break;
    case CPU_ISA_F16C: f32_to_f16_f16c(in, out, n); break;
    default: f32_to_f16_scalar(in, out, n); break;
    }
}

void cpu_f16_to_f32_isa(cpu_isa isa, const uint16_t *in, float *out, size_t n)
{
    switch (usable(isa)) {
    case CPU_ISA_AVX512BF16:
    case CPU_ISA_AVX512F: f16_to_f32_avx512(in, out, n); break;
    case CPU_ISA_F16C: f16_to_f32_f16c(in, out, n); break;
    default: f16_to_f32_scalar(in, out, n); break;
    }
}

void cpu_f32_to_bf16(const float *in, uint16_t *out, size_t n)
{
    cpu_f32_to_bf16_isa(cpu_isa_for_bf16(), in, out, n);
}

void cpu_bf16_to_f32(const uint16_t *in, float *out, size_t n)
{
    cpu_bf16_to_f32_isa(cpu_isa_for_bf16(), in, out, n);
}

void cpu_f32_to_f16(const float *in, uint16_t *out, size_t n)
{
    cpu_f32_to_f16_isa(cpu_isa_for_f16(), in, out, n);
}

void cpu_f16_to_f32(const uint16_t *in, float *out, size_t n)
{
    cpu_f16_to_f32_isa(cpu_isa_for_f16(), in, out, n);
}

/* Round trips go through a small stack buffer so x can be rounded in place. */
enum { ROUND_BLOCK = 1024 };

void cpu_round_bf16_isa(cpu_isa isa, float *x, size_t n)
{
    uint16_t buf[ROUND_BLOCK];
    for (size_t i = 0; i < n; i += ROUND_BLOCK) {
        size_t k = n - i < ROUND_BLOCK ? n - i : ROUND_BLOCK;
        cpu_f32_to_bf16_isa(isa, x + i, buf, k);
        cpu_bf16_to_f32_isa(isa, buf, x + i, k);
    }
}

void cpu_round_f16_isa(cpu_isa isa, float *x, size_t n)
{
    uint16_t buf[ROUND_BLOCK];
    for (size_t i = 0; i < n; i += ROUND_BLOCK) {
        size_t k = n - i < ROUND_BLOCK ? n - i : ROUND_BLOCK;
        cpu_f32_to_f16_isa(isa, x + i, buf, k);
        cpu_f16_to_f32_isa(isa, buf, x + i, k);
    }
}

void cpu_round_bf16(float *x, size_t n) { cpu_round_bf16_isa(cpu_isa_for_bf16(), x, n); }

void cpu_round_f16(float *x, size_t n) { cpu_round_f16_isa(cpu_isa_for_f16(), x, n); }

/* ---- loss scaler ---------------------------------------------------------------------- */

void cpu_loss_scaler_init(cpu_loss_scaler *s)
{
    memset(s, 0, sizeof *s);
    s->scale = 65536.0f;
    s->growth_factor = 2.0f;
    s->backoff_factor = 0.5f;
    s->growth_interval = 2000;
}

stoke_status cpu_loss_scaler_check(const cpu_loss_scaler *s)
{
    if (!(isfinite(s->scale) && s->scale > 0))
        return stoke_fail(STOKE_ERR_ARG, "loss scaler: scale %g is not finite and positive",
                          (double)s->scale);
    if (!(isfinite(s->growth_factor) && s->growth_factor > 1))
        return stoke_fail(STOKE_ERR_ARG, "loss scaler: growth_factor %g must be > 1",
                          (double)s->growth_factor);
    if (!(s->backoff_factor > 0 && s->backoff_factor < 1))
        return stoke_fail(STOKE_ERR_ARG, "loss scaler: backoff_factor %g must be in (0, 1)",
                          (double)s->backoff_factor);
    if (s->growth_interval < 1)
        return stoke_fail(STOKE_ERR_ARG, "loss scaler: growth_interval %d must be >= 1",
                          (int)s->growth_interval);
    if (s->good_steps < 0 || s->good_steps >= s->growth_interval)
        return stoke_fail(STOKE_ERR_ARG, "loss scaler: good_steps %d outside [0, %d)",
                          (int)s->good_steps, (int)s->growth_interval);
    if (s->skipped_steps < 0)
        return stoke_fail(STOKE_ERR_ARG, "loss scaler: skipped_steps %lld is negative",
                          (long long)s->skipped_steps);
    return STOKE_OK;
}

void cpu_loss_scaler_update(cpu_loss_scaler *s, bool overflow)
{
    if (overflow) {
        s->scale *= s->backoff_factor;
        s->good_steps = 0;
        s->skipped_steps++;
        return;
    }
    if (++s->good_steps >= s->growth_interval) {
        float grown = s->scale * s->growth_factor;
        if (isfinite(grown))
            s->scale = grown;
        s->good_steps = 0;
    }
}

/* The public conversions of core.h: the same dispatched paths. */
void stoke_f32_to_f16(const float *in, uint16_t *out, size_t n) { cpu_f32_to_f16(in, out, n); }
void stoke_f32_to_bf16(const float *in, uint16_t *out, size_t n) { cpu_f32_to_bf16(in, out, n); }
float stoke_f16_to_f32(uint16_t h) { return cpu_f16_to_f32_1(h); }
