/* test_nn_isa.c - the instruction-set cap (STOKE_MAX_CPU_ISA) as the CPU backend obeys
 * it. ctest runs it once per cap (tests/nn.cmake sets the variable), once with a bad
 * value and once with the caller's environment; each run checks, for its cap:
 *   - the kernels' dispatchers pick the widest variant this CPU has within the cap,
 *     found here independently with __builtin_cpu_supports, never one above the CPU;
 *   - the conversions' paths and the transforms' AVX2 follow the same rule;
 *   - oneDNN runs within the lower of the cap and ONEDNN_MAX_CPU_ISA;
 *   - the variant that runs gives the results of a serial reference computed here
 *     with the same formulas, at sizes that reach the vector loops and their tails.
 *     Element-wise kernels must match bit for bit, except in the AVX-512 variant,
 *     where GCC contracts a*b+c into FMA (target("avx512f") enables it, the others do
 *     not), and in reductions, whose vector lanes reorder the sums: there within
 *     atol 1e-6 + rtol 4e-6 (element-wise; on a Zen 4 at most 8.3e-7 on values up to
 *     3, the GELU-tanh backward) and atol 1e-5 + rtol 1e-5 (softmax and layer norm,
 *     as test_nn_norm_eltwise states for the norms; at most 1.4e-6 measured). The
 *     largest differences are printed. Attention's softmax rows and the conv block's
 *     tasks are checked against torch by test_nn_attn and test_nn_fusion, which
 *     scripts/check runs again under each cap.
 * With a bad value: the message names the variable, the value and the accepted
 * values; probe and oneDNN engine fail with it; the kernels run the baseline. */
#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>

#include "check.h"
#include "core/isa.h"
#include "core/precision.h"
#include "nn/cpu/dnnl_util.h"
#include "nn/cpu/eltwise.h"
#include "nn/cpu/norm.h"
#include "nn/cpu/simd.h"
#include "stoke/hw.h"

/* What this CPU has, found without stoke's own detection. */
static bool cpu_has(const char *what)
{
    __builtin_cpu_init();
    if (!strcmp(what, "avx2"))
        return __builtin_cpu_supports("avx2");
    if (!strcmp(what, "avx512f"))
        return __builtin_cpu_supports("avx512f");
    if (!strcmp(what, "avx512bf16"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bf16");
    if (!strcmp(what, "f16c")) { /* clang's builtin does not know "f16c" */
        unsigned a, b, c, d;
        return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    }
    return false;
}

static cpu_simd expected_variant(stoke_cpu_isa cap)
{
    if (cap >= STOKE_CPU_ISA_AVX512_CORE && cpu_has("avx512f"))
        return CPU_SIMD_AVX512F;
    if (cap >= STOKE_CPU_ISA_AVX2 && cpu_has("avx2"))
        return CPU_SIMD_AVX2;
    return CPU_SIMD_DEFAULT;
}

static void check_dispatch(stoke_cpu_isa cap)
{
    cpu_simd want = expected_variant(cap), got = cpu_simd_variant();
    fprintf(stderr, "cap %s: kernels run the %s variant\n", stoke_cpu_isa_name(cap),
            cpu_simd_name(got));
    CHECK_MSG(got == want, "cap %s: variant %s, expected %s", stoke_cpu_isa_name(cap),
              cpu_simd_name(got), cpu_simd_name(want));
    CHECK((stoke_isa_usable() & ~stoke_isa_present()) == 0); /* never beyond the CPU */
    CHECK(cpu_isa_supported(CPU_ISA_AVX512BF16) ==
          (cap >= STOKE_CPU_ISA_AVX512_CORE_BF16 && cpu_has("avx512bf16")));
    CHECK(cpu_isa_supported(CPU_ISA_AVX512F) ==
          (cap >= STOKE_CPU_ISA_AVX512_CORE && cpu_has("avx512f")));
    CHECK(cpu_isa_supported(CPU_ISA_F16C) == (cap >= STOKE_CPU_ISA_AVX2 && cpu_has("f16c")));
    CHECK(cpu_isa_supported(CPU_ISA_SCALAR));
    /* the conversions' dispatch picks within that */
    CHECK(cpu_isa_supported(cpu_isa_for_bf16()) && cpu_isa_supported(cpu_isa_for_f16()));
}

/* ---- oneDNN ---- */

static unsigned dnnl_bits(dnnl_cpu_isa_t isa)
{
    return isa == dnnl_cpu_isa_all ? ~0u : (unsigned)isa;
}

static void check_onednn_levels(void)
{
    /* the lower of the two caps wins, whichever variable gives it */
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_ALL, NULL), dnnl_cpu_isa_all);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_ALL, "avx2"), dnnl_cpu_isa_avx2);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX2, NULL), dnnl_cpu_isa_avx2);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX512_CORE, "AVX2"), dnnl_cpu_isa_avx2);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX2, "AVX512_CORE"), dnnl_cpu_isa_avx2);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_SSE41, "AVX512_CORE_AMX"), dnnl_cpu_isa_sse41);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX512_CORE_AMX, "AVX512_CORE_VNNI"),
                 dnnl_cpu_isa_avx512_core_vnni);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX512_CORE_BF16, "ALL"),
                 dnnl_cpu_isa_avx512_core_bf16);
    /* AVX2_VNNI sits beside AVX512_CORE: what both allow is AVX2 */
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX512_CORE_BF16, "AVX2_VNNI"), dnnl_cpu_isa_avx2);
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_ALL, "AVX2_VNNI"), dnnl_cpu_isa_avx2_vnni);
    /* a name oneDNN does not know caps nothing, as in oneDNN */
    CHECK_INT_EQ(dnnl_util_isa_cap(STOKE_CPU_ISA_AVX512_CORE, "bogus"), dnnl_cpu_isa_avx512_core);
}

static void check_onednn(stoke_cpu_isa cap)
{
    CHECK_INT_EQ(dnnl_util_engine(NULL, NULL), STOKE_OK);
    const char *env = getenv("ONEDNN_MAX_CPU_ISA");
    if (!env || !*env)
        env = getenv("DNNL_MAX_CPU_ISA");
    dnnl_cpu_isa_t want = dnnl_util_isa_cap(cap, env), now = dnnl_get_effective_cpu_isa();
    fprintf(stderr, "cap %s, ONEDNN_MAX_CPU_ISA %s: oneDNN runs at 0x%x (within 0x%x)\n",
            stoke_cpu_isa_name(cap), env ? env : "unset", (unsigned)now, (unsigned)want);
    CHECK_MSG((dnnl_bits(now) & dnnl_bits(want)) == dnnl_bits(now), "oneDNN at 0x%x, above 0x%x",
              (unsigned)now, (unsigned)want);
    /* on a CPU with AVX-512 the cap is what holds it back, so it is reached exactly */
    if (cpu_has("avx512f") && want != dnnl_cpu_isa_all && cap <= STOKE_CPU_ISA_AVX512_CORE)
        CHECK_INT_EQ(now, want);
}

/* ---- the kernels against serial references ---- */

enum { N = 3 * 4096 + 45 }; /* several blocks of the element-wise loops, and a tail */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd(float lo, float hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng >> 40) * 0x1.0p-24);
}

static float *fill(size_t n, float lo, float hi)
{
    float *p = malloc(n * sizeof *p);
    if (!p)
        abort();
    for (size_t i = 0; i < n; i++)
        p[i] = rnd(lo, hi);
    return p;
}

/* Bit for bit when `exact`, else within atol + rtol |ref|; reports the worst element. */
static void same(const char *what, const float *got, const float *ref, size_t n, bool exact,
                 double atol, double rtol)
{
    size_t bad = n;
    double worst = 0, max_abs = 0, max_rel = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        bool ok = exact ? memcmp(&got[i], &ref[i], sizeof got[i]) == 0
                        : d <= atol + rtol * fabs((double)ref[i]);
        max_abs = d > max_abs ? d : max_abs;
        if (ref[i] != 0.0f && d / fabs((double)ref[i]) > max_rel)
            max_rel = d / fabs((double)ref[i]);
        if (!ok && (bad == n || d > worst)) {
            bad = i;
            worst = d;
        }
    }
    if (!exact)
        fprintf(stderr, "  %-20s %-8s largest difference %.2g (relative %.2g)\n", what,
                cpu_simd_name(cpu_simd_variant()), max_abs, max_rel);
    CHECK_MSG(bad == n, "%s (%s, %s): [%zu] %.9g vs reference %.9g", what,
              cpu_simd_name(cpu_simd_variant()), exact ? "bit for bit" : "within tolerance", bad,
              bad < n ? got[bad] : 0.0, bad < n ? ref[bad] : 0.0);
}

#define SQRT1_2        0.70710678118654752f
#define INV_SQRT_2PI   0.39894228040143268f
#define SQRT_2_OVER_PI 0.79788456080286536f
#define GELU_K         0.044715f

/* eltwise.c's per-element formulas, serially */
static float gelu_ref(float x)
{
    float q = 0.5f * cpu_fast_erfcf_pos(fabsf(x) * SQRT1_2);
    return x * cpu_select(x < 0.0f, q, 1.0f - q);
}

static float gelu_tanh_ref(float x)
{
    float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
    return 0.5f * x * (1.0f + cpu_fast_tanhf(u));
}

static float gelu_grad_ref(float x)
{
    float z = fabsf(x) * SQRT1_2;
    float e = cpu_fast_expf(-z * z);
    float q = 0.5f * cpu_erfcf_pos_given_exp(z, e);
    float cdf = cpu_select(x < 0.0f, q, 1.0f - q);
    return cdf + x * INV_SQRT_2PI * e;
}

static float gelu_tanh_grad_ref(float x)
{
    float u = SQRT_2_OVER_PI * (x + GELU_K * x * x * x);
    float th = cpu_fast_tanhf(u);
    float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_K * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

static void check_eltwise(void)
{
    /* without FMA contraction the vector loops compute exactly what the scalar code does */
    bool fused = cpu_simd_variant() == CPU_SIMD_AVX512F;
    const double atol = 1e-6, rtol = 4e-6;
    float *x = fill(N, -9.0f, 9.0f), *dy = fill(N, -2.0f, 2.0f), *acc = fill(N, -1.0f, 1.0f);
    float *got = malloc(N * sizeof *got), *ref = malloc(N * sizeof *ref);
    uint16_t *h = malloc(N * sizeof *h), *href = malloc(N * sizeof *href);
    if (!got || !ref || !h || !href)
        abort();

    cpu_relu_forward(got, x, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = x[i] > 0.0f ? x[i] : 0.0f;
    same("relu forward", got, ref, N, true, 0, 0);
    memcpy(got, acc, N * sizeof *got);
    cpu_relu_backward(got, dy, x, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = acc[i] + (x[i] > 0.0f ? dy[i] : 0.0f);
    same("relu backward", got, ref, N, true, 0, 0);
    cpu_relu_mask_grad(got, NULL, dy, x, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = x[i] > 0.0f ? dy[i] : 0.0f;
    same("relu mask fp32", got, ref, N, true, 0, 0);
    cpu_relu_mask_grad(NULL, h, dy, x, N);
    for (size_t i = 0; i < N; i++)
        href[i] = cpu_f32_to_bf16_1(x[i] > 0.0f ? dy[i] : 0.0f);
    CHECK_MSG(memcmp(h, href, N * sizeof *h) == 0, "relu mask bf16 (%s)",
              cpu_simd_name(cpu_simd_variant()));

    for (int tanh_form = 0; tanh_form < 2; tanh_form++) {
        cpu_gelu_forward(got, x, N, tanh_form);
        for (size_t i = 0; i < N; i++)
            ref[i] = tanh_form ? gelu_tanh_ref(x[i]) : gelu_ref(x[i]);
        same(tanh_form ? "gelu(tanh) forward" : "gelu forward", got, ref, N, !fused, atol, rtol);
        memcpy(got, acc, N * sizeof *got);
        cpu_gelu_backward(got, dy, x, N, tanh_form);
        for (size_t i = 0; i < N; i++)
            ref[i] = acc[i] + dy[i] * (tanh_form ? gelu_tanh_grad_ref(x[i]) : gelu_grad_ref(x[i]));
        same(tanh_form ? "gelu(tanh) backward" : "gelu backward", got, ref, N, !fused, atol, rtol);
    }

    cpu_tanh_forward(got, x, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = cpu_fast_tanhf(x[i]);
    same("tanh forward", got, ref, N, !fused, atol, rtol);
    float *y = malloc(N * sizeof *y);
    if (!y)
        abort();
    memcpy(y, ref, N * sizeof *y);
    memcpy(got, acc, N * sizeof *got);
    cpu_tanh_backward(got, dy, y, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = acc[i] + dy[i] * (1.0f - y[i] * y[i]);
    same("tanh backward", got, ref, N, !fused, atol, rtol);

    cpu_sigmoid_forward(got, x, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = 1.0f / (1.0f + cpu_fast_expf(-x[i]));
    same("sigmoid forward", got, ref, N, !fused, atol, rtol);
    memcpy(y, ref, N * sizeof *y);
    memcpy(got, acc, N * sizeof *got);
    cpu_sigmoid_backward(got, dy, y, N);
    for (size_t i = 0; i < N; i++)
        ref[i] = acc[i] + dy[i] * y[i] * (1.0f - y[i]);
    same("sigmoid backward", got, ref, N, !fused, atol, rtol);

    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    cpu_dropout_forward(got, x, N, p, 7, 3, 1);
    for (size_t i = 0; i < N; i++)
        ref[i] = x[i] * (cpu_dropout_keep(7, 3, i, p) ? scale : 0.0f);
    same("dropout forward", got, ref, N, true, 0, 0);
    memcpy(got, acc, N * sizeof *got);
    cpu_dropout_backward(got, dy, N, p, 7, 3, 1);
    for (size_t i = 0; i < N; i++)
        ref[i] = acc[i] + dy[i] * (cpu_dropout_keep(7, 3, i, p) ? scale : 0.0f);
    same("dropout backward", got, ref, N, !fused, atol, rtol);

    free(x), free(dy), free(acc), free(got), free(ref), free(h), free(href), free(y);
}

/* Softmax and layer norm: rows long enough for the vector loops (and a row length
 * that leaves a tail), summed serially here. */
static void check_rows(void)
{
    const int rows = 24;
    const int widths[] = {1000, 37};
    for (int wi = 0; wi < 2; wi++) {
        int C = widths[wi];
        size_t n = (size_t)rows * C;
        float *x = fill(n, -8.0f, 8.0f), *got = malloc(n * sizeof *got);
        float *ref = malloc(n * sizeof *ref);
        if (!got || !ref)
            abort();
        cpu_softmax_forward(got, x, rows, C);
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * C;
            float *yr = ref + (size_t)r * C;
            float mx = xr[0], sum = 0.0f;
            for (int c = 1; c < C; c++)
                mx = xr[c] > mx ? xr[c] : mx;
            for (int c = 0; c < C; c++)
                sum += yr[c] = cpu_fast_expf(xr[c] - mx);
            for (int c = 0; c < C; c++)
                yr[c] *= 1.0f / sum;
        }
        same(C == 1000 ? "softmax C=1000" : "softmax C=37", got, ref, n, false, 1e-5, 1e-5);

        float *w = fill((size_t)C, 0.5f, 1.5f), *b = fill((size_t)C, -0.5f, 0.5f);
        float mean[24], rstd[24];
        cpu_layernorm_forward(got, mean, rstd, x, w, b, rows, C, CPU_NORM_EPS);
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * C;
            float s = 0.0f, ss = 0.0f;
            for (int c = 0; c < C; c++)
                s += xr[c];
            float m = s / (float)C;
            for (int c = 0; c < C; c++)
                ss += (xr[c] - m) * (xr[c] - m);
            float rs = 1.0f / sqrtf(ss / (float)C + CPU_NORM_EPS);
            for (int c = 0; c < C; c++)
                ref[(size_t)r * C + c] = (xr[c] - m) * rs * w[c] + b[c];
        }
        same(C == 1000 ? "layernorm C=1000" : "layernorm C=37", got, ref, n, false, 1e-5, 1e-5);
        free(x), free(got), free(ref), free(w), free(b);
    }
}

/* ---- a bad STOKE_MAX_CPU_ISA ---- */

static void check_bad_value(const char *value)
{
    stoke_cpu_isa cap = STOKE_CPU_ISA_ALL;
    CHECK_INT_EQ(stoke_max_cpu_isa(&cap), STOKE_ERR_ARG);
    const char *msg = stoke_last_error();
    char want[160];
    snprintf(want, sizeof want, "STOKE_MAX_CPU_ISA='%s' is not a CPU ISA level", value);
    CHECK_STR_CONTAINS(msg, want);
    CHECK_STR_CONTAINS(msg, "sse41, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, "
                            "avx512_core_amx, all");
    CHECK_INT_EQ(cap, STOKE_CPU_ISA_SSE41);
    /* the kernels, which cannot fail, run the baseline meanwhile */
    CHECK_INT_EQ(stoke_isa_usable(), 0);
    CHECK_INT_EQ(cpu_simd_variant(), CPU_SIMD_DEFAULT);
    /* everything that returns a status fails with the same message */
    stoke_cpu_info cpu;
    CHECK_INT_EQ(stoke_cpu_probe(NULL, &cpu), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), want);
    CHECK_INT_EQ(dnnl_util_engine(NULL, NULL), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), want);
    CHECK_INT_EQ(stoke_set_max_cpu_isa(STOKE_CPU_ISA_ALL), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "already fixed");
    /* a recorded tree is another machine: no cap is read for it */
    CHECK_INT_EQ(stoke_cpu_probe(STOKE_TEST_DATA "/sysroot/cpu-spr-amx", &cpu), STOKE_OK);
    CHECK(cpu.simd & STOKE_SIMD_AMX_BF16);
}

int main(void)
{
    const char *env = getenv("STOKE_MAX_CPU_ISA");
    stoke_cpu_isa cap = STOKE_CPU_ISA_ALL;
    check_onednn_levels();
    if (env && *env && stoke_cpu_isa_parse(env, &cap) != STOKE_OK) {
        check_bad_value(env);
    } else {
        stoke_cpu_isa got = STOKE_CPU_ISA_SSE41;
        CHECK_INT_EQ(stoke_max_cpu_isa(&got), STOKE_OK);
        CHECK_INT_EQ(got, cap);
        check_dispatch(cap);
        check_onednn(cap);
    }
    check_eltwise();
    check_rows();
    return CHECK_DONE();
}
