/* recommend.c - the table of recommendation rules, the peak FLOP/s arithmetic and the
 * judgement of OpenBLAS's kernels against the CPU. */
#include "core/text.h"
#include "core/tf32.h"
#include "stoke/tune.h"
#include "tune/tune_impl.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- Peak FLOP/s tables ---------------------------------------------------------
 * Per-SM rates by compute capability. FP32 is FMA lanes × 2 (an FMA is 2 FLOPs).
 * Tensor is dense (no 2:4 sparsity) bf16/fp16 with fp32 accumulation, the mode mixed
 * precision training uses. Each figure is the vendor's published peak divided by
 * SMs × boost clock:
 *   5.x Maxwell, 6.1 GP10x: 128 fp32 lanes/SM (Pascal whitepaper: GTX 1080 20 SMs,
 *       8.9 TFLOPS at 1733 MHz); 6.0 GP100: 64 (P100: 56 SMs, 10.6 TFLOPS at 1480).
 *   7.0 GV100: 64 lanes; 8 tensor cores × 64 FMA = 1024 FLOPs/clk (V100 SXM2: 80 SMs,
 *       1530 MHz, 125 TFLOPS; Volta whitepaper).
 *   7.5 TU10x: 64 lanes; 1024 (T4: 40 SMs, 1590 MHz, 65 TFLOPS). GeForce Turing runs
 *       fp32 accumulation at half rate (RTX 2080 Ti: 53.8 TFLOPS at 68 SMs, 1545 MHz).
 *   8.0 GA100: 64 lanes; 2048 (A100: 108 SMs, 1410 MHz, 312 TFLOPS bf16).
 *   8.6 GA10x: 128 lanes; 1024 (A40: 84 SMs, 1740 MHz, 149.7 TFLOPS bf16 with fp32
 *       accumulate); GeForce halves it (RTX 3090: 71 TFLOPS at 82 SMs, 1695 MHz).
 *   8.7 Orin: 128 lanes; tensor rate not published per SM here, so unknown.
 *   8.9 AD10x: 128 lanes; 512 (L40: 142 SMs, 2490 MHz, 181 TFLOPS bf16; RTX 4090
 *       with fp32 accumulate: 165 TFLOPS at 128 SMs, 2520 MHz).
 *   9.0 GH100: 128 lanes; 4096 (H100 SXM: 132 SMs, 1830 MHz, 989.4 TFLOPS bf16; 4
 *       tensor cores × 512 FMA; Hopper whitepaper).
 *   10.x, 12.x Blackwell: 128 lanes; no per-SM tensor figure verified, so unknown. */
typedef struct arch_rate {
    int cc; /* 10 * major + minor; -1 in `minor_any` rows matches any minor */
    bool any_minor;
    int fp32_lanes;      /* fp32 FMA lanes per SM */
    int tensor_flops;    /* dense bf16/fp16 FLOPs per clock per SM; 0 = unknown/none */
    bool geforce_halves; /* GeForce boards run fp32-accumulate tensor math at half rate */
    const char *arch;
} arch_rate;

static const arch_rate arch_rates[] = {
    {50, true, 128, 0, false, "Maxwell"},         {60, false, 64, 0, false, "Pascal GP100"},
    {61, false, 128, 0, false, "Pascal"},         {62, false, 128, 0, false, "Pascal"},
    {70, false, 64, 1024, false, "Volta"},        {72, false, 64, 1024, false, "Volta (Xavier)"},
    {75, false, 64, 1024, true, "Turing"},        {80, false, 64, 2048, false, "Ampere GA100"},
    {86, false, 128, 1024, true, "Ampere GA10x"}, {87, false, 128, 0, false, "Ampere (Orin)"},
    {89, false, 128, 512, false, "Ada"},          {90, false, 128, 4096, false, "Hopper"},
    {100, true, 128, 0, false, "Blackwell"},      {120, true, 128, 0, false, "Blackwell"},
};

static const arch_rate *find_arch(int major, int minor)
{
    for (size_t i = 0; i < sizeof arch_rates / sizeof arch_rates[0]; i++) {
        const arch_rate *a = &arch_rates[i];
        if (a->any_minor ? a->cc / 10 == major : a->cc == 10 * major + minor)
            return a;
    }
    return NULL;
}

static bool is_geforce(const stoke_gpu_info *g) { return strstr(g->name, "GeForce") != NULL; }

bool stoke_gpu_peak_flops(const stoke_gpu_info *gpu, bool tensor, double *flops, char *why,
                          size_t why_size)
{
    *flops = 0;
    if (!(gpu->valid & STOKE_GPU_HAS_CC)) {
        stoke_say(why, why_size, "unknown: the driver did not report the compute capability");
        return false;
    }
    const arch_rate *a = find_arch(gpu->cc_major, gpu->cc_minor);
    int per_sm = 0;
    if (a)
        per_sm = tensor ? a->tensor_flops : 2 * a->fp32_lanes;
    if (per_sm == 0) {
        stoke_say(why, why_size, "unknown: no %s rate on file for compute capability %d.%d",
                  tensor ? "tensor-core" : "fp32", gpu->cc_major, gpu->cc_minor);
        return false;
    }
    if (!(gpu->valid & STOKE_GPU_HAS_SM_COUNT) || gpu->sm_count <= 0) {
        stoke_say(why, why_size, "unknown: no SM count (the CUDA runtime did not report it)");
        return false;
    }
    if (!(gpu->valid & STOKE_GPU_HAS_MAX_SM_CLOCK) || gpu->max_sm_clock_mhz == 0) {
        stoke_say(why, why_size, "unknown: the driver did not report the max SM clock");
        return false;
    }
    bool halved = tensor && a->geforce_halves && is_geforce(gpu);
    if (halved)
        per_sm /= 2;
    *flops = (double)gpu->sm_count * gpu->max_sm_clock_mhz * 1e6 * per_sm;
    if (tensor)
        stoke_say(why, why_size,
                  "%d SMs x %u MHz x %d dense FLOPs/clock/SM (%s tensor cores, cc %d.%d, fp32 "
                  "accumulate%s)",
                  gpu->sm_count, gpu->max_sm_clock_mhz, per_sm, a->arch, gpu->cc_major,
                  gpu->cc_minor, halved ? ", half rate on GeForce" : "");
    else
        stoke_say(why, why_size,
                  "%d SMs x %u MHz x %d FLOPs/clock/SM (%d fp32 FMA lanes x 2, %s, cc %d.%d)",
                  gpu->sm_count, gpu->max_sm_clock_mhz, per_sm, a->fp32_lanes, a->arch,
                  gpu->cc_major, gpu->cc_minor);
    return true;
}

/* fp32 FLOPs per cycle per core by SIMD level, widest first. AVX-512 assumes two
 * 512-bit FMA units (server cores with one unit reach half): 2 units × 16 lanes × 2.
 * AVX2+FMA: 2 × 8 × 2. AVX without FMA: one 8-wide add + one 8-wide mul. SSE: 4 + 4. */
static const struct {
    uint32_t need;
    int flops;
    const char *what;
} cpu_rates[] = {
    {STOKE_SIMD_AVX512F, 64, "AVX-512: 2 FMA units x 16 fp32 lanes x 2"},
    {STOKE_SIMD_AVX2 | STOKE_SIMD_FMA, 32, "AVX2+FMA: 2 FMA units x 8 fp32 lanes x 2"},
    {STOKE_SIMD_AVX, 16, "AVX: 8-wide add + 8-wide multiply"},
    {STOKE_SIMD_SSE42, 8, "SSE: 4-wide add + 4-wide multiply"},
};

bool stoke_cpu_peak_flops(const stoke_cpu_info *cpu, bool bf16, double *flops, char *why,
                          size_t why_size)
{
    *flops = 0;
    int per_cycle = 0;
    const char *what = NULL;
    for (size_t i = 0; i < sizeof cpu_rates / sizeof cpu_rates[0]; i++) {
        if ((cpu->simd & cpu_rates[i].need) == cpu_rates[i].need) {
            per_cycle = cpu_rates[i].flops;
            what = cpu_rates[i].what;
            break;
        }
    }
    char bf16_what[96];
    if (bf16) {
        if (cpu->simd & STOKE_SIMD_AMX_BF16) {
            /* One AMX tile unit: 512 bf16 FMAs per cycle (Intel's Sapphire Rapids
             * figure of 1024 bf16 FLOPs/cycle/core). */
            per_cycle = 1024;
            what = "AMX-BF16 tile unit";
        } else if (cpu->simd & STOKE_SIMD_AVX512_BF16) {
            /* VDPBF16PS does a pair of bf16 products per fp32 lane: twice fp32. */
            snprintf(bf16_what, sizeof bf16_what, "AVX512-BF16: 2 x the %d fp32 rate", per_cycle);
            per_cycle *= 2;
            what = bf16_what;
        } else {
            stoke_say(why, why_size, "unknown: no bf16 instructions (AVX512-BF16, AMX-BF16)");
            return false;
        }
    }
    if (per_cycle == 0) {
        stoke_say(why, why_size, "unknown: no SIMD rate on file for this CPU's features");
        return false;
    }
    if (cpu->physical_cores <= 0) {
        stoke_say(why, why_size, "unknown: the physical core count is unknown");
        return false;
    }
    if (cpu->max_mhz <= 0) {
        stoke_say(why, why_size, "unknown: the kernel reports no CPU clock");
        return false;
    }
    *flops = cpu->physical_cores * cpu->max_mhz * 1e6 * per_cycle;
    stoke_say(why, why_size, "%d physical cores x %.0f MHz x %d FLOPs/cycle/core (%s)",
              cpu->physical_cores, cpu->max_mhz, per_cycle, what);
    return true;
}

/* ---- OpenBLAS's kernels -----------------------------------------------------------
 * OpenBLAS's DYNAMIC_ARCH builds pick a "core" (a set of kernels) from the CPU's
 * family and model, so a model newer than the library (Debian 12's 0.3.21 on an
 * Emerald Rapids Xeon) gets a fallback written for SSE3. Both sides are put on one
 * scale of vector levels and compared. */
typedef enum blas_level { LVL_C, LVL_SSE, LVL_AVX, LVL_AVX2, LVL_AVX512 } blas_level;

/* OpenBLAS 0.3's x86-64 cores, as openblas_get_corename() names them, and the ISA
 * their GEMM kernels are written for (kernel/x86_64/KERNEL.<core>). */
static const struct {
    const char *core;
    blas_level level;
    const char *isa;
} blas_cores[] = {
    {"Generic", LVL_C, "plain C"},
    {"Katmai", LVL_SSE, "SSE"},
    {"Coppermine", LVL_SSE, "SSE"},
    {"Northwood", LVL_SSE, "SSE2"},
    {"Banias", LVL_SSE, "SSE2"},
    {"Athlon", LVL_SSE, "SSE2"},
    {"Opteron", LVL_SSE, "SSE2"},
    {"Prescott", LVL_SSE, "SSE3"},
    {"Opteron_SSE3", LVL_SSE, "SSE3"},
    {"Nano", LVL_SSE, "SSE3"},
    {"Barcelona", LVL_SSE, "SSE3+SSE4a"},
    {"Core2", LVL_SSE, "SSSE3"},
    {"Atom", LVL_SSE, "SSSE3"},
    {"Bobcat", LVL_SSE, "SSSE3"},
    {"Penryn", LVL_SSE, "SSE4.1"},
    {"Dunnington", LVL_SSE, "SSE4.1"},
    {"Nehalem", LVL_SSE, "SSE4.2"},
    {"Sandybridge", LVL_AVX, "AVX"},
    {"Bulldozer", LVL_AVX, "AVX+FMA4"},
    {"Piledriver", LVL_AVX, "AVX+FMA"},
    {"Steamroller", LVL_AVX, "AVX+FMA"},
    {"Excavator", LVL_AVX, "AVX+FMA"},
    {"Haswell", LVL_AVX2, "AVX2"},
    {"Zen", LVL_AVX2, "AVX2"},
    {"SkylakeX", LVL_AVX512, "AVX-512"},
    {"Cooperlake", LVL_AVX512, "AVX-512"},
    {"SapphireRapids", LVL_AVX512, "AVX-512"},
};

/* The widest level a CPU offers OpenBLAS, widest first, and the core that uses it.
 * SkylakeX's kernels need AVX-512 BW and VL besides F (OpenBLAS runs Haswell's on
 * Xeon Phi, which lacks them). */
static const struct {
    uint32_t need;
    blas_level level;
    const char *isa;
    const char *coretype;
} blas_cpu_levels[] = {
    {STOKE_SIMD_AVX512F | STOKE_SIMD_AVX512BW | STOKE_SIMD_AVX512VL, LVL_AVX512, "AVX-512",
     "SkylakeX"},
    {STOKE_SIMD_AVX2 | STOKE_SIMD_FMA, LVL_AVX2, "AVX2+FMA", "Haswell"},
    {STOKE_SIMD_AVX, LVL_AVX, "AVX", "Sandybridge"},
    {STOKE_SIMD_SSE42, LVL_SSE, "SSE4.2", "Nehalem"},
};

const char *stoke_blas_fit_name(stoke_blas_fit fit)
{
    switch (fit) {
    case STOKE_BLAS_FIT_MATCH: return "match";
    case STOKE_BLAS_FIT_BELOW: return "below";
    case STOKE_BLAS_FIT_FALLBACK: return "fallback";
    case STOKE_BLAS_FIT_ABOVE: return "above";
    case STOKE_BLAS_FIT_UNKNOWN: break;
    }
    return "unknown";
}

stoke_blas_fit stoke_openblas_check(const char *core, uint32_t simd, stoke_blas_check *out)
{
    memset(out, 0, sizeof *out);
    int c = -1, l = -1;
    for (size_t i = 0; core && i < sizeof blas_cores / sizeof blas_cores[0]; i++)
        if (strcasecmp(core, blas_cores[i].core) == 0)
            c = (int)i;
    for (size_t i = 0; i < sizeof blas_cpu_levels / sizeof blas_cpu_levels[0]; i++) {
        if ((simd & blas_cpu_levels[i].need) == blas_cpu_levels[i].need) {
            l = (int)i;
            break;
        }
    }
    if (c >= 0)
        out->core_isa = blas_cores[c].isa;
    if (l >= 0)
        out->cpu_isa = blas_cpu_levels[l].isa;
    if (!core || !*core) {
        stoke_say(out->reason, sizeof out->reason, "unknown: OpenBLAS reported no core");
        return out->fit;
    }
    if (c < 0) {
        stoke_say(out->reason, sizeof out->reason,
                  "unknown: OpenBLAS core %s is not one of the x86-64 cores stoke knows", core);
        return out->fit;
    }
    if (l < 0) {
        stoke_say(out->reason, sizeof out->reason,
                  "unknown: this CPU's flags show no SSE4.2 or wider vectors to judge the %s "
                  "kernels (%s) against",
                  core, out->core_isa);
        return out->fit;
    }
    blas_level have = blas_cores[c].level, can = blas_cpu_levels[l].level;
    const char *want = blas_cpu_levels[l].coretype;
    if (have == can) {
        out->fit = STOKE_BLAS_FIT_MATCH;
        stoke_say(out->reason, sizeof out->reason,
                  "OpenBLAS runs its %s kernels (%s), which use the widest vectors this CPU has "
                  "(%s)",
                  core, out->core_isa, out->cpu_isa);
        return out->fit;
    }
    out->coretype = want;
    if (have > can) {
        out->fit = STOKE_BLAS_FIT_ABOVE;
        stoke_say(out->reason, sizeof out->reason,
                  "OpenBLAS runs its %s kernels (%s) but this CPU has only %s: its GEMMs would "
                  "stop on an illegal instruction; set OPENBLAS_CORETYPE=%s or unset it",
                  core, out->core_isa, out->cpu_isa, want);
    } else if (have == LVL_AVX2 && can == LVL_AVX512) {
        out->fit = STOKE_BLAS_FIT_BELOW;
        stoke_say(out->reason, sizeof out->reason,
                  "OpenBLAS runs its %s kernels (%s) on a CPU with %s: one level below, slower "
                  "on large products; set OPENBLAS_CORETYPE=%s for programs using this OpenBLAS",
                  core, out->core_isa, out->cpu_isa, want);
    } else {
        out->fit = STOKE_BLAS_FIT_FALLBACK;
        stoke_say(out->reason, sizeof out->reason,
                  "OpenBLAS runs its %s kernels (%s) on a CPU with %s: a fallback far below it, "
                  "several times slower (OpenBLAS picks them by CPU model and falls back on "
                  "models it does not know); set OPENBLAS_CORETYPE=%s for programs using this "
                  "OpenBLAS",
                  core, out->core_isa, out->cpu_isa, want);
    }
    return out->fit;
}

/* ---- Rules ----------------------------------------------------------------------
 * Each rule fills one recommendation for one device and returns false when it does
 * not apply there. The table's order is the report's order. */
typedef bool (*rule_fn)(const stoke_machine *m, int dev, stoke_rec *r);

typedef enum rule_scope { ON_CPU, ON_EACH_GPU } rule_scope;

/* Precision by compute capability, highest first. */
static const struct {
    int min_cc; /* 10 * major + minor */
    const char *value;
    stoke_precision precision;
    const char *why;
} precision_rules[] = {
    {80, "bf16", STOKE_PREC_BF16,
     "is >= 8.0: bf16 tensor cores; bf16 keeps fp32's range, so no loss scaling"},
    {70, "fp16+loss-scaling", STOKE_PREC_FP16,
     "is 7.x: fp16 tensor cores but no bf16; fp16's narrow range needs dynamic loss scaling"},
    {0, "fp32", STOKE_PREC_FP32,
     "is below 7.0: no tensor cores, so half precision would save memory but not time"},
};

static bool rule_gpu_precision(const stoke_machine *m, int dev, stoke_rec *r)
{
    const stoke_gpu_info *g = &m->gpus[dev];
    r->type = STOKE_REC_TEXT;
    if (!(g->valid & STOKE_GPU_HAS_CC)) {
        stoke_say(r->reason, sizeof r->reason,
                  "unknown: the driver did not report the compute "
                  "capability");
        return true;
    }
    int cc = 10 * g->cc_major + g->cc_minor;
    for (size_t i = 0; i < sizeof precision_rules / sizeof precision_rules[0]; i++) {
        if (cc >= precision_rules[i].min_cc) {
            r->known = true;
            snprintf(r->text, sizeof r->text, "%s", precision_rules[i].value);
            r->precision = precision_rules[i].precision;
            stoke_say(r->reason, sizeof r->reason, "compute capability %d.%d %s", g->cc_major,
                      g->cc_minor, precision_rules[i].why);
            break;
        }
    }
    return true;
}

static bool rule_gpu_tf32(const stoke_machine *m, int dev, stoke_rec *r)
{
    const stoke_gpu_info *g = &m->gpus[dev];
    r->type = STOKE_REC_BOOL;
    if (!(g->valid & STOKE_GPU_HAS_CC)) {
        stoke_say(r->reason, sizeof r->reason,
                  "unknown: the driver did not report the compute "
                  "capability");
        return true;
    }
    r->known = true;
    r->number = stoke_tf32_rule(g->cc_major, g->cc_minor);
    if (r->number)
        stoke_say(r->reason, sizeof r->reason,
                  "compute capability %d.%d >= 8.0: fp32 matmuls and convolutions run on TF32 "
                  "tensor cores (10-bit mantissa, fp32 range) on this GPU only; the CPU has no "
                  "TF32, so a CPU run has nothing to set",
                  g->cc_major, g->cc_minor);
    else
        stoke_say(r->reason, sizeof r->reason, "compute capability %d.%d < 8.0 has no TF32",
                  g->cc_major, g->cc_minor);
    return true;
}

/* A peak's reason: how it was derived and, when known, the figure. */
static bool flops_reason(stoke_rec *r, const char *why)
{
    if (r->known) {
        char f[32];
        stoke_say(r->reason, sizeof r->reason, "%s = %s", why,
                  stoke_format_flops(r->number, f, sizeof f));
    } else {
        stoke_say(r->reason, sizeof r->reason, "%s", why);
    }
    return true;
}

static bool peak_rule(const stoke_machine *m, int dev, stoke_rec *r, bool tensor)
{
    const stoke_gpu_info *g = &m->gpus[dev];
    r->type = STOKE_REC_FLOPS;
    char why[sizeof r->reason];
    r->known = stoke_gpu_peak_flops(g, tensor, &r->number, why, sizeof why);
    return flops_reason(r, why);
}

static bool rule_gpu_peak_fp32(const stoke_machine *m, int dev, stoke_rec *r)
{
    return peak_rule(m, dev, r, false);
}

static bool rule_gpu_peak_tensor(const stoke_machine *m, int dev, stoke_rec *r)
{
    const stoke_gpu_info *g = &m->gpus[dev];
    /* The tensor figure is for the precision chosen above: bf16 from 8.0, fp16 on 7.x,
     * none below (and nothing to say without a compute capability). */
    if (!(g->valid & STOKE_GPU_HAS_CC) || g->cc_major < 7)
        return false;
    r->key = g->cc_major >= 8 ? "peak_bf16_flops" : "peak_fp16_flops";
    return peak_rule(m, dev, r, true);
}

static bool rule_cpu_precision(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    if (m->gpu_count > 0)
        return false; /* the GPUs do the math; their precision rules speak */
    r->type = STOKE_REC_TEXT;
    r->known = true;
    uint32_t s = m->cpu.simd;
    if (s & STOKE_SIMD_AMX_BF16) {
        /* Measured on the 2-core Sapphire Rapids machine (docs/train-bench.md): the
         * reference CNN and the MLP train about 2x faster in bf16 than in fp32 and end
         * within 0.5 points of fp32's test accuracy. */
        snprintf(r->text, sizeof r->text, "bf16");
        r->precision = STOKE_PREC_BF16;
        stoke_say(r->reason, sizeof r->reason,
                  "CPU-only with AMX-BF16: bf16 matmuls and convolutions on AMX tiles with fp32 "
                  "accumulation and fp32 master weights (about 2x fp32's training speed, same "
                  "accuracy within 0.5 points, measured)");
        return true;
    }
    snprintf(r->text, sizeof r->text, "fp32");
    r->precision = STOKE_PREC_FP32;
    stoke_say(r->reason, sizeof r->reason, "CPU-only: the CPU backend computes in fp32");
    uint32_t hidden = m->cpu.simd_hidden;
    if (hidden & STOKE_SIMD_AMX_BF16)
        stoke_more(r->reason, sizeof r->reason,
                   "; its AMX-BF16 is hidden by the CPU ISA cap %s (STOKE_MAX_CPU_ISA)",
                   stoke_cpu_isa_name(m->cpu.isa_cap));
    else if (s & STOKE_SIMD_AVX512_BF16)
        stoke_more(r->reason, sizeof r->reason,
                   "; this CPU has AVX512-BF16 but no AMX, so bf16 would at most double the fp32 "
                   "rate (measured on an AMD EPYC Zen 4: bf16 trained 1.3x faster than fp32 at "
                   "the same accuracy; --precision bf16 to try it on this CPU)");
    else if (hidden & STOKE_SIMD_AVX512_BF16)
        stoke_more(r->reason, sizeof r->reason,
                   "; its AVX512-BF16 is hidden by the CPU ISA cap %s (STOKE_MAX_CPU_ISA)",
                   stoke_cpu_isa_name(m->cpu.isa_cap));
    else
        stoke_more(r->reason, sizeof r->reason,
                   "; it has no bf16 instructions (AVX512-BF16, AMX-BF16)");
    /* AVX512-BF16 without AMX (a cap that hides AMX leaves the same CPU): bf16 ran 1.3x
     * fp32 on a Zen 4 and 1.6x on a Zen 5, but the rate is a model's and a machine's,
     * so a run that leaves precision unset measures it. Without AVX512-BF16 (none, or
     * capped away) bf16 is emulated on the fp32 kernels: slower, so fp32 is sure. */
    if (s & STOKE_SIMD_AVX512_BF16) {
        r->unsure = true;
        stoke_say(r->unsure_why, sizeof r->unsure_why, "AVX512-BF16 without AMX%s",
                  hidden & STOKE_SIMD_AMX_BF16 ? " (capped)" : "");
    }
    return true;
}

/* Loader workers: on a GPU machine the CPUs only feed, so all but one for the training
 * loop and one per GPU (its copy/launch thread) load data, capped at 16 (the seeds'
 * 16 workers for 18 cores); on a CPU-only machine the CPUs also compute, so a quarter
 * of them (1 to 8) load and the rest compute. */
enum { MAX_GPU_WORKERS = 16, MAX_CPU_WORKERS = 8 };

/* The CPUs the rules share out: the usable ones, less what a cgroup CPU quota allows;
 * 0 when unknown. */
static int cpus_of(const stoke_machine *m)
{
    return m->cpu.usable_cpus > 0 ? stoke_cpu_available(&m->cpu) : 0;
}

/* "8 usable CPUs", or with a quota "2 available CPUs (8 usable, a cgroup quota of 1.5)". */
static const char *cpus_words(const stoke_machine *m, char *buf, size_t size)
{
    int n = cpus_of(m);
    if (m->cpu.quota_cpus > 0 && n < m->cpu.usable_cpus)
        snprintf(buf, size, "%d available CPU%s (%d usable, a cgroup quota of %.1f)", n,
                 n == 1 ? "" : "s", m->cpu.usable_cpus, m->cpu.quota_cpus);
    else
        snprintf(buf, size, "%d usable CPU%s", n, n == 1 ? "" : "s");
    return buf;
}

static int loader_workers(const stoke_machine *m)
{
    int usable = cpus_of(m);
    if (usable <= 1)
        return 0;
    int n;
    if (m->gpu_count > 0) {
        n = usable - 1 - m->gpu_count;
        if (n > MAX_GPU_WORKERS)
            n = MAX_GPU_WORKERS;
    } else {
        n = usable / 4;
        if (n > MAX_CPU_WORKERS)
            n = MAX_CPU_WORKERS;
    }
    return n < 1 ? 1 : n;
}

int tune_workers_cap(const stoke_machine *m)
{
    return m->gpu_count > 0 ? MAX_GPU_WORKERS : MAX_CPU_WORKERS;
}

static bool rule_loader_workers(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    r->type = STOKE_REC_COUNT;
    int usable = cpus_of(m);
    char cpus[96];
    cpus_words(m, cpus, sizeof cpus);
    if (usable <= 0) {
        stoke_say(r->reason, sizeof r->reason, "unknown: the number of usable CPUs is unknown");
        return true;
    }
    r->known = true;
    int n = loader_workers(m);
    r->number = n;
    if (usable == 1) {
        stoke_say(r->reason, sizeof r->reason, "%s: batches are loaded in the training thread",
                  cpus);
    } else if (m->gpu_count > 0) {
        int raw = usable - 1 - m->gpu_count;
        stoke_say(r->reason, sizeof r->reason,
                  "GPU machine: %s - 1 for the training loop - %d for GPU feeding "
                  "(one per GPU) = %d",
                  cpus, m->gpu_count, raw);
        if (raw > MAX_GPU_WORKERS)
            stoke_more(r->reason, sizeof r->reason,
                       ", capped at %d (more rarely helps and each worker holds batches in RAM)",
                       MAX_GPU_WORKERS);
        else if (raw < 1)
            stoke_more(r->reason, sizeof r->reason, ", raised to 1 so loading overlaps compute");
    } else {
        stoke_say(r->reason, sizeof r->reason,
                  "CPU-only machine: the CPUs also compute, so a quarter of the %s "
                  "(at least 1, at most %d) load data",
                  cpus, MAX_CPU_WORKERS);
    }
    return true;
}

static bool rule_compute_threads(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    if (m->gpu_count > 0 || m->cpu.usable_cpus <= 0)
        return false;
    r->type = STOKE_REC_COUNT;
    r->known = true;
    int workers = loader_workers(m);
    int n = cpus_of(m) - workers;
    r->number = n < 1 ? 1 : n;
    char cpus[96];
    stoke_say(r->reason, sizeof r->reason,
              "CPU-only machine: %s - %d loader worker%s = %.0f for the math "
              "(BLAS/OpenMP threads), so nothing oversubscribes",
              cpus_words(m, cpus, sizeof cpus), workers, workers == 1 ? "" : "s", r->number);
    return true;
}

static bool rule_pin_memory(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    r->type = STOKE_REC_BOOL;
    r->known = true;
    r->number = m->gpu_count > 0;
    if (m->gpu_count > 0)
        stoke_say(r->reason, sizeof r->reason,
                  "%d GPU%s: batches staged in page-locked host memory copy asynchronously at "
                  "full PCIe speed while the GPU computes",
                  m->gpu_count, m->gpu_count == 1 ? "" : "s");
    else
        stoke_say(r->reason, sizeof r->reason,
                  "no GPU: there is no device copy to speed up, and pinned pages are taken "
                  "from the OS");
    return true;
}

int tune_prefetch_clamp(long depth)
{
    return depth < MIN_PREFETCH ? MIN_PREFETCH : depth > MAX_PREFETCH ? MAX_PREFETCH : (int)depth;
}

int tune_prefetch_depth(int workers) { return tune_prefetch_clamp(2L * workers); }

static bool rule_prefetch_depth(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    r->type = STOKE_REC_COUNT;
    if (m->cpu.usable_cpus <= 0) {
        stoke_say(r->reason, sizeof r->reason,
                  "unknown: follows the loader workers, which are "
                  "unknown");
        return true;
    }
    int workers = loader_workers(m);
    int depth = tune_prefetch_depth(workers);
    r->known = true;
    r->number = depth;
    stoke_say(r->reason, sizeof r->reason,
              "2 batches per loader worker (one being filled, one ready) x %d worker%s, within "
              "[%d, %d]%s",
              workers, workers == 1 ? "" : "s", MIN_PREFETCH, MAX_PREFETCH,
              m->gpu_count > 0 ? ", in pinned slots" : "");
    return true;
}

static bool rule_cpu_peak(const stoke_machine *m, stoke_rec *r, bool bf16)
{
    r->type = STOKE_REC_FLOPS;
    char why[sizeof r->reason];
    r->known = stoke_cpu_peak_flops(&m->cpu, bf16, &r->number, why, sizeof why);
    return flops_reason(r, why);
}

static bool rule_cpu_peak_fp32(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    return rule_cpu_peak(m, r, false);
}

static bool rule_cpu_peak_bf16(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    if (!(m->cpu.simd & (STOKE_SIMD_AMX_BF16 | STOKE_SIMD_AVX512_BF16)))
        return false; /* emulated bf16 has no peak worth quoting */
    return rule_cpu_peak(m, r, true);
}

/* Only when there is something to set: a matching or unjudged core is reported by the
 * probe's OpenBLAS section, not here. */
static bool rule_openblas_coretype(const stoke_machine *m, int dev, stoke_rec *r)
{
    (void)dev;
    if (!m->openblas.valid)
        return false;
    stoke_blas_check c;
    /* the CPU as OpenBLAS sees it: STOKE_MAX_CPU_ISA does not reach OpenBLAS */
    stoke_openblas_check(m->openblas.core, m->cpu.simd | m->cpu.simd_hidden, &c);
    if (!c.coretype)
        return false;
    r->type = STOKE_REC_TEXT;
    r->known = true;
    snprintf(r->text, sizeof r->text, "%s", c.coretype);
    stoke_say(r->reason, sizeof r->reason, "%s. stoke's training does not use OpenBLAS", c.reason);
    return true;
}

static const struct rule {
    const char *key;
    rule_scope scope;
    rule_fn fn;
} rules[] = {
    {"precision", ON_CPU, rule_cpu_precision},
    {"loader_workers", ON_CPU, rule_loader_workers},
    {"compute_threads", ON_CPU, rule_compute_threads},
    {"pin_memory", ON_CPU, rule_pin_memory},
    {"prefetch_depth", ON_CPU, rule_prefetch_depth},
    {"peak_fp32_flops", ON_CPU, rule_cpu_peak_fp32},
    {"peak_bf16_flops", ON_CPU, rule_cpu_peak_bf16},
    {"openblas_coretype", ON_CPU, rule_openblas_coretype},
    {"precision", ON_EACH_GPU, rule_gpu_precision},
    {"tf32", ON_EACH_GPU, rule_gpu_tf32},
    {"peak_fp32_flops", ON_EACH_GPU, rule_gpu_peak_fp32},
    {"peak_tensor_flops", ON_EACH_GPU, rule_gpu_peak_tensor}, /* key set by the rule */
};
#define N_RULES (sizeof rules / sizeof rules[0])

static void apply(const stoke_machine *m, const struct rule *rule, int dev, stoke_recs *out)
{
    if (out->count >= STOKE_MAX_RECS)
        return;
    stoke_rec *r = &out->items[out->count];
    memset(r, 0, sizeof *r);
    r->key = rule->key;
    r->device = dev;
    if (rule->fn(m, dev, r))
        out->count++;
}

void stoke_recommend(const stoke_machine *m, stoke_recs *out)
{
    out->count = 0;
    for (size_t i = 0; i < N_RULES; i++)
        if (rules[i].scope == ON_CPU)
            apply(m, &rules[i], STOKE_TUNE_CPU, out);
    int gpus = m->gpu_count < STOKE_MAX_GPUS ? m->gpu_count : STOKE_MAX_GPUS;
    for (int g = 0; g < gpus; g++)
        for (size_t i = 0; i < N_RULES; i++)
            if (rules[i].scope == ON_EACH_GPU)
                apply(m, &rules[i], g, out);
}

const stoke_rec *stoke_recs_find(const stoke_recs *recs, const char *key, int device)
{
    for (int i = 0; i < recs->count; i++)
        if (recs->items[i].device == device && strcmp(recs->items[i].key, key) == 0)
            return &recs->items[i];
    return NULL;
}
