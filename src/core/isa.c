/* isa.c - CPU feature detection and the instruction-set cap (STOKE_MAX_CPU_ISA). The
 * one environment variable read below the config layer: the cap must reach code that
 * runs without it (the kernels, the probe, libstoke used from C or Python), as
 * ONEDNN_MAX_CPU_ISA reaches oneDNN. */
#include "core/isa.h"
#include "core/env.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const level_names[] = {
    [STOKE_CPU_ISA_SSE41] = "sse41",
    [STOKE_CPU_ISA_AVX2] = "avx2",
    [STOKE_CPU_ISA_AVX512_CORE] = "avx512_core",
    [STOKE_CPU_ISA_AVX512_CORE_VNNI] = "avx512_core_vnni",
    [STOKE_CPU_ISA_AVX512_CORE_BF16] = "avx512_core_bf16",
    [STOKE_CPU_ISA_AVX512_CORE_AMX] = "avx512_core_amx",
    [STOKE_CPU_ISA_ALL] = "all",
};
#define N_LEVELS (sizeof level_names / sizeof level_names[0])
#define LEVEL_LIST                                                   \
    "sse41, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, " \
    "avx512_core_amx, all"

const char *stoke_cpu_isa_name(stoke_cpu_isa isa)
{
    return (unsigned)isa < N_LEVELS ? level_names[isa] : "unknown";
}

/* Without stoke_fail, so reading the variable never clobbers a pending message. */
static bool parse_level(const char *name, stoke_cpu_isa *out)
{
    for (unsigned i = 0; name && i < N_LEVELS; i++)
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (stoke_cpu_isa)i;
            return true;
        }
    return false;
}

stoke_status stoke_cpu_isa_parse(const char *name, stoke_cpu_isa *out)
{
    if (parse_level(name, out))
        return STOKE_OK;
    return stoke_fail(STOKE_ERR_ARG, "'%s' is not a CPU ISA level (%s)", name ? name : "(null)",
                      LEVEL_LIST);
}

/* Which cap first allows each CPU feature, as oneDNN draws its levels: SSE4.2 already
 * belongs to AVX (its sse41 level stops at 4.1), FMA and F16C come with AVX2 (Haswell),
 * AVX512-FP16 with AMX (Sapphire Rapids has both; oneDNN 2.x has no level between). */
static const struct {
    const char *flag;
    stoke_cpu_isa level;
} flag_levels[] = {
    {"sse", STOKE_CPU_ISA_SSE41},
    {"sse2", STOKE_CPU_ISA_SSE41},
    {"pni", STOKE_CPU_ISA_SSE41},
    {"ssse3", STOKE_CPU_ISA_SSE41},
    {"sse4_1", STOKE_CPU_ISA_SSE41},
    {"sse4_2", STOKE_CPU_ISA_AVX2},
    {"avx", STOKE_CPU_ISA_AVX2},
    {"avx2", STOKE_CPU_ISA_AVX2},
    {"fma", STOKE_CPU_ISA_AVX2},
    {"f16c", STOKE_CPU_ISA_AVX2},
    {"avx512f", STOKE_CPU_ISA_AVX512_CORE},
    {"avx512cd", STOKE_CPU_ISA_AVX512_CORE},
    {"avx512bw", STOKE_CPU_ISA_AVX512_CORE},
    {"avx512dq", STOKE_CPU_ISA_AVX512_CORE},
    {"avx512vl", STOKE_CPU_ISA_AVX512_CORE},
    {"avx512_vnni", STOKE_CPU_ISA_AVX512_CORE_VNNI},
    {"avx512_bf16", STOKE_CPU_ISA_AVX512_CORE_BF16},
    {"avx512_fp16", STOKE_CPU_ISA_AVX512_CORE_AMX},
    {"amx_tile", STOKE_CPU_ISA_AVX512_CORE_AMX},
    {"amx_bf16", STOKE_CPU_ISA_AVX512_CORE_AMX},
    {"amx_int8", STOKE_CPU_ISA_AVX512_CORE_AMX},
};

stoke_cpu_isa stoke_isa_level_of_flag(const char *flag)
{
    for (size_t i = 0; i < sizeof flag_levels / sizeof flag_levels[0]; i++)
        if (strcmp(flag, flag_levels[i].flag) == 0)
            return flag_levels[i].level;
    return STOKE_CPU_ISA_ALL;
}

/* The dispatch features, each with the flags it needs (its level is theirs). */
static const struct {
    unsigned bit;
    const char *flags[3];
} features[] = {
    {STOKE_ISA_F16C, {"avx", "f16c"}},
    {STOKE_ISA_AVX2, {"avx2"}},
    {STOKE_ISA_AVX512F, {"avx512f"}},
    {STOKE_ISA_AVX512_BF16, {"avx512f", "avx512vl", "avx512_bf16"}},
};

unsigned stoke_isa_allowed(unsigned present, stoke_cpu_isa cap)
{
    unsigned ok = 0;
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++) {
        bool allowed = true;
        for (int k = 0; k < 3 && features[i].flags[k]; k++)
            allowed = allowed && stoke_isa_level_of_flag(features[i].flags[k]) <= cap;
        if (allowed)
            ok |= features[i].bit;
    }
    return present & ok;
}

/* F16C through cpuid: clang's __builtin_cpu_supports does not know "f16c". The others
 * through __builtin_cpu_supports, which gcc 12 and clang 14 both accept for these
 * names and which checks that the OS saves the ymm/zmm state. */
static unsigned detect(void)
{
    unsigned a, b, c, d, bits = 0;
    __builtin_cpu_init();
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx"))
        bits |= STOKE_ISA_F16C;
    if (__builtin_cpu_supports("avx2"))
        bits |= STOKE_ISA_AVX2;
    if (__builtin_cpu_supports("avx512f"))
        bits |= STOKE_ISA_AVX512F;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bf16"))
        bits |= STOKE_ISA_AVX512_BF16;
    return bits;
}

/* The state, written under `lock` once and then only read. `usable` (-1 until the cap
 * is fixed) is the dispatchers' lock-free fast path. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool fixed, set_by_call;
static stoke_cpu_isa cap, set_value;
static unsigned present;
static char bad_value[64]; /* a rejected STOKE_MAX_CPU_ISA, "" when it was fine */
static int usable = -1;

/* Fixes the cap if it is not yet; call with `lock` held. */
static void fix_locked(void)
{
    if (fixed)
        return;
    present = detect();
    cap = STOKE_CPU_ISA_ALL;
    const char *env = stoke_env("STOKE_MAX_CPU_ISA");
    if (set_by_call) {
        cap = set_value;
    } else if (env && *env) {
        stoke_cpu_isa v;
        if (parse_level(env, &v)) {
            cap = v;
        } else {
            snprintf(bad_value, sizeof bad_value, "%s", env);
            cap = STOKE_CPU_ISA_SSE41; /* run nothing the user may have meant to exclude */
        }
    }
    fixed = true;
    __atomic_store_n(&usable, (int)stoke_isa_allowed(present, cap), __ATOMIC_RELEASE);
}

unsigned stoke_isa_present(void)
{
    pthread_mutex_lock(&lock);
    fix_locked();
    unsigned p = present;
    pthread_mutex_unlock(&lock);
    return p;
}

unsigned stoke_isa_usable(void)
{
    int u = __atomic_load_n(&usable, __ATOMIC_ACQUIRE);
    if (u >= 0)
        return (unsigned)u;
    pthread_mutex_lock(&lock);
    fix_locked();
    pthread_mutex_unlock(&lock);
    return (unsigned)__atomic_load_n(&usable, __ATOMIC_ACQUIRE);
}

stoke_status stoke_max_cpu_isa(stoke_cpu_isa *out)
{
    pthread_mutex_lock(&lock);
    fix_locked();
    stoke_cpu_isa c = cap;
    char bad[sizeof bad_value];
    memcpy(bad, bad_value, sizeof bad);
    pthread_mutex_unlock(&lock);
    *out = c;
    if (bad[0])
        return stoke_fail(STOKE_ERR_ARG,
                          "STOKE_MAX_CPU_ISA='%s' is not a CPU ISA level; accepted values "
                          "(case-insensitive): %s",
                          bad, LEVEL_LIST);
    return STOKE_OK;
}

stoke_status stoke_set_max_cpu_isa(stoke_cpu_isa isa)
{
    if ((unsigned)isa >= N_LEVELS)
        return stoke_fail(STOKE_ERR_ARG, "stoke_set_max_cpu_isa: %d is not a CPU ISA level",
                          (int)isa);
    pthread_mutex_lock(&lock);
    stoke_status st = STOKE_OK;
    if (!fixed) {
        set_by_call = true;
        set_value = isa;
    } else if (bad_value[0] || isa != cap) {
        st = stoke_fail(STOKE_ERR_ARG,
                        "stoke_set_max_cpu_isa(%s): too late, the CPU ISA cap is already "
                        "fixed at %s (set it before the first kernel, probe or model)",
                        stoke_cpu_isa_name(isa),
                        bad_value[0] ? "an invalid STOKE_MAX_CPU_ISA" : stoke_cpu_isa_name(cap));
    }
    pthread_mutex_unlock(&lock);
    return st;
}
