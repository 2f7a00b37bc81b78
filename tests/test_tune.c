/* test_tune.c - recommendations and peak FLOP/s for machines built in C: an H100, an
 * RTX 3090 beside a V100, GPUs with missing readings, and CPU-only boxes; the CPU
 * precision rule on the recorded CPU classes CI runs on, capped and not; OpenBLAS's
 * core judged against every CPU class; the decision a training run applies; the
 * hardware profile each GPU and the CPU start from, and what the decision takes from it. */
#include "check.h"
#include "stoke/train.h" /* stoke_profiles_load: the built-in table */
#include "stoke/tune.h"

static stoke_machine machine;
static stoke_recs recs;

static void cpu_box(stoke_machine *m, int cores, int usable, double mhz, uint32_t simd)
{
    memset(m, 0, sizeof *m);
    m->cpu.physical_cores = cores;
    m->cpu.logical_cpus = usable;
    m->cpu.usable_cpus = usable;
    m->cpu.sockets = 1;
    m->cpu.numa_nodes = 1;
    m->cpu.max_mhz = mhz;
    m->cpu.simd = simd;
    m->mem.total_bytes = 64ull << 30;
    snprintf(m->gpu_note, sizeof m->gpu_note, "no NVIDIA GPU: test");
}

static stoke_gpu_info *add_gpu(stoke_machine *m, const char *name, int major, int minor, int sms,
                               unsigned mhz)
{
    stoke_gpu_info *g = &m->gpus[m->gpu_count];
    memset(g, 0, sizeof *g);
    g->index = m->gpu_count++;
    snprintf(g->name, sizeof g->name, "%s", name);
    g->cc_major = major;
    g->cc_minor = minor;
    g->sm_count = sms;
    g->max_sm_clock_mhz = mhz;
    g->valid = STOKE_GPU_HAS_CC | STOKE_GPU_HAS_SM_COUNT | STOKE_GPU_HAS_MAX_SM_CLOCK;
    m->gpu_note[0] = '\0';
    return g;
}

static const stoke_rec *rec(const char *key, int dev)
{
    const stoke_rec *r = stoke_recs_find(&recs, key, dev);
    CHECK_MSG(r != NULL, "no %s recommendation for device %d", key, dev);
    static stoke_rec missing;
    return r ? r : &missing;
}

static void test_h100(void)
{
    cpu_box(&machine, 18, 18, 3000, STOKE_SIMD_AVX2 | STOKE_SIMD_FMA | STOKE_SIMD_AVX);
    add_gpu(&machine, "NVIDIA H100 PCIe", 9, 0, 114, 1755);
    stoke_recommend(&machine, &recs);

    const stoke_rec *r = rec("precision", 0);
    CHECK(r->known);
    CHECK_STR_EQ(r->text, "bf16");
    CHECK_STR_CONTAINS(r->reason, "compute capability 9.0 is >= 8.0");
    r = rec("tf32", 0);
    CHECK(r->known && r->type == STOKE_REC_BOOL && r->number == 1);
    CHECK_STR_CONTAINS(r->reason, "9.0 >= 8.0");

    r = rec("peak_bf16_flops", 0);
    CHECK(r->known && r->type == STOKE_REC_FLOPS);
    /* 4 tensor cores x 512 bf16 FMAs x 2 FLOPs per SM per clock (Hopper). */
    CHECK_NEAR(r->number, 114.0 * 1755e6 * 4 * 512 * 2, 1);
    CHECK_STR_CONTAINS(r->reason, "114 SMs x 1755 MHz x 4096");
    CHECK_STR_CONTAINS(r->reason, "819.5 TFLOP/s");
    r = rec("peak_fp32_flops", 0);
    CHECK_NEAR(r->number, 114.0 * 1755e6 * 128 * 2, 1);
    CHECK_STR_CONTAINS(r->reason, "128 fp32 FMA lanes x 2");
    CHECK(stoke_recs_find(&recs, "peak_fp16_flops", 0) == NULL);

    /* 18 CPUs - 1 training loop - 1 GPU = 16: the seed's figure for this machine. */
    r = rec("loader_workers", STOKE_TUNE_CPU);
    CHECK(r->known && r->type == STOKE_REC_COUNT);
    CHECK_INT_EQ(r->number, 16);
    CHECK_STR_CONTAINS(r->reason, "18 usable CPUs - 1 for the training loop - 1");
    r = rec("pin_memory", STOKE_TUNE_CPU);
    CHECK(r->known && r->number == 1);
    CHECK_STR_CONTAINS(r->reason, "1 GPU:");
    r = rec("prefetch_depth", STOKE_TUNE_CPU);
    CHECK_INT_EQ(r->number, 32);
    CHECK_STR_CONTAINS(r->reason, "x 16 workers");
    /* The CPU's precision only matters when it does the math. */
    CHECK(stoke_recs_find(&recs, "precision", STOKE_TUNE_CPU) == NULL);
    CHECK(stoke_recs_find(&recs, "compute_threads", STOKE_TUNE_CPU) == NULL);
    /* The CPU's own peak is still reported (hybrid CPU/GPU work, MFU). */
    r = rec("peak_fp32_flops", STOKE_TUNE_CPU);
    CHECK_NEAR(r->number, 18 * 3000e6 * 32, 1);

    /* A 64-CPU host is capped. */
    machine.cpu.usable_cpus = 64;
    stoke_recommend(&machine, &recs);
    r = rec("loader_workers", STOKE_TUNE_CPU);
    CHECK_INT_EQ(r->number, 16);
    CHECK_STR_CONTAINS(r->reason, "= 62, capped at 16");
}

static void test_3090_and_v100(void)
{
    cpu_box(&machine, 8, 16, 4000, STOKE_SIMD_AVX2 | STOKE_SIMD_FMA | STOKE_SIMD_AVX);
    add_gpu(&machine, "NVIDIA GeForce RTX 3090", 8, 6, 82, 2100);
    add_gpu(&machine, "Tesla V100-SXM2-16GB", 7, 0, 80, 1530);
    stoke_recommend(&machine, &recs);

    CHECK_STR_EQ(rec("precision", 0)->text, "bf16");
    const stoke_rec *r = rec("peak_bf16_flops", 0);
    /* GA10x: 1024 dense FLOPs/clock/SM, halved on GeForce with fp32 accumulation. */
    CHECK_NEAR(r->number, 82.0 * 2100e6 * 512, 1);
    CHECK_STR_CONTAINS(r->reason, "half rate on GeForce");
    CHECK_NEAR(rec("peak_fp32_flops", 0)->number, 82.0 * 2100e6 * 256, 1);

    r = rec("precision", 1);
    CHECK_STR_EQ(r->text, "fp16+loss-scaling");
    CHECK_STR_CONTAINS(r->reason, "7.0");
    CHECK_STR_CONTAINS(r->reason, "loss scaling");
    r = rec("tf32", 1);
    CHECK(r->known && r->number == 0);
    CHECK_STR_CONTAINS(r->reason, "< 8.0");
    r = rec("peak_fp16_flops", 1);
    CHECK_NEAR(r->number, 80.0 * 1530e6 * 1024, 1); /* V100 SXM2: 125 TFLOPS */
    CHECK_STR_CONTAINS(r->reason, "125.3 TFLOP/s");
    CHECK(stoke_recs_find(&recs, "peak_bf16_flops", 1) == NULL);
    CHECK_NEAR(rec("peak_fp32_flops", 1)->number, 80.0 * 1530e6 * 128, 1);

    r = rec("loader_workers", STOKE_TUNE_CPU);
    CHECK_INT_EQ(r->number, 16 - 1 - 2);
    CHECK_STR_CONTAINS(r->reason, "2 for GPU feeding");
    CHECK_STR_CONTAINS(rec("pin_memory", STOKE_TUNE_CPU)->reason, "2 GPUs");
}

static void test_missing_readings(void)
{
    cpu_box(&machine, 4, 4, 0, STOKE_SIMD_AVX2 | STOKE_SIMD_FMA);
    stoke_gpu_info *g = add_gpu(&machine, "NVIDIA A100-SXM4-40GB", 8, 0, 108, 1410);
    g->valid &= ~(unsigned)STOKE_GPU_HAS_SM_COUNT;
    g = add_gpu(&machine, "NVIDIA B200", 10, 0, 148, 1965);
    g = add_gpu(&machine, "Mystery", 0, 0, 10, 1000);
    g->valid &= ~(unsigned)STOKE_GPU_HAS_CC;
    g = add_gpu(&machine, "Tesla P100", 6, 0, 56, 1480);
    g->valid &= ~(unsigned)STOKE_GPU_HAS_MAX_SM_CLOCK;
    stoke_recommend(&machine, &recs);

    const stoke_rec *r = rec("peak_bf16_flops", 0);
    CHECK(!r->known);
    CHECK_INT_EQ(r->number, 0);
    CHECK_STR_CONTAINS(r->reason, "no SM count");
    CHECK(!rec("peak_fp32_flops", 0)->known);
    CHECK_STR_EQ(rec("precision", 0)->text, "bf16"); /* needs only the cc */

    r = rec("peak_bf16_flops", 1);
    CHECK(!r->known);
    CHECK_STR_CONTAINS(r->reason, "no tensor-core rate on file for compute capability 10.0");
    r = rec("peak_fp32_flops", 1);
    CHECK(r->known);
    CHECK_NEAR(r->number, 148.0 * 1965e6 * 256, 1);

    r = rec("precision", 2);
    CHECK(!r->known);
    CHECK_STR_EQ(r->text, "");
    CHECK_STR_CONTAINS(r->reason, "compute capability");
    CHECK(!rec("tf32", 2)->known);
    CHECK(!rec("peak_fp32_flops", 2)->known);
    CHECK(stoke_recs_find(&recs, "peak_bf16_flops", 2) == NULL);

    r = rec("precision", 3);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "no tensor cores");
    r = rec("peak_fp32_flops", 3);
    CHECK(!r->known);
    CHECK_STR_CONTAINS(r->reason, "max SM clock");
    CHECK(stoke_recs_find(&recs, "peak_fp16_flops", 3) == NULL);

    r = rec("peak_fp32_flops", STOKE_TUNE_CPU);
    CHECK(!r->known);
    CHECK_STR_CONTAINS(r->reason, "no CPU clock");
}

static void test_cpu_only_amx(void)
{
    /* This development machine's shape: 2 cores, AVX-512 with BF16 and AMX. */
    uint32_t simd = STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA | STOKE_SIMD_AVX512F |
                    STOKE_SIMD_AVX512_BF16 | STOKE_SIMD_AMX_TILE | STOKE_SIMD_AMX_BF16;
    cpu_box(&machine, 2, 2, 2600, simd);
    stoke_recommend(&machine, &recs);

    const stoke_rec *r = rec("precision", STOKE_TUNE_CPU);
    CHECK_STR_EQ(r->text, "bf16");
    CHECK_STR_CONTAINS(r->reason, "AMX-BF16");
    CHECK_INT_EQ(rec("loader_workers", STOKE_TUNE_CPU)->number, 1);
    CHECK_INT_EQ(rec("compute_threads", STOKE_TUNE_CPU)->number, 1);
    r = rec("pin_memory", STOKE_TUNE_CPU);
    CHECK(r->known && r->number == 0);
    CHECK_STR_CONTAINS(r->reason, "no GPU");
    CHECK_INT_EQ(rec("prefetch_depth", STOKE_TUNE_CPU)->number, 2);
    r = rec("peak_fp32_flops", STOKE_TUNE_CPU);
    CHECK_NEAR(r->number, 2 * 2600e6 * 64, 1);
    CHECK_STR_CONTAINS(r->reason, "AVX-512");
    r = rec("peak_bf16_flops", STOKE_TUNE_CPU);
    CHECK_NEAR(r->number, 2 * 2600e6 * 1024, 1);
    CHECK_STR_CONTAINS(r->reason, "AMX-BF16");
    CHECK(stoke_recs_find(&recs, "tf32", 0) == NULL);

    /* Without AMX, AVX512-BF16 doubles the fp32 rate. */
    machine.cpu.simd &= ~(uint32_t)(STOKE_SIMD_AMX_BF16 | STOKE_SIMD_AMX_TILE);
    stoke_recommend(&machine, &recs);
    CHECK_NEAR(rec("peak_bf16_flops", STOKE_TUNE_CPU)->number, 2 * 2600e6 * 128, 1);
    CHECK_STR_EQ(rec("precision", STOKE_TUNE_CPU)->text, "fp32");
    CHECK_STR_CONTAINS(rec("precision", STOKE_TUNE_CPU)->reason, "AVX512-BF16 but no AMX");
}

/* The CPU precision rule says when it is unsure, the case a run measures instead of
 * taking it (docs/tune.md): AVX512-BF16 without AMX. Synthetic machines, so it holds on
 * whatever CPU runs the test. */
static void test_cpu_precision_unsure(void)
{
    uint32_t avx512 = STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA | STOKE_SIMD_AVX512F;
    struct {
        const char *what;
        uint32_t simd, hidden;
        const char *text;
        bool unsure;
        const char *reason;
    } cases[] = {
        {"AMX-BF16: sure bf16", avx512 | STOKE_SIMD_AVX512_BF16 | STOKE_SIMD_AMX_BF16, 0, "bf16",
         false, "AMX-BF16"},
        {"AVX512-BF16 without AMX: unsure fp32", avx512 | STOKE_SIMD_AVX512_BF16, 0, "fp32", true,
         "AVX512-BF16 but no AMX"},
        {"AVX512-BF16 hidden by a cap: sure fp32", avx512, STOKE_SIMD_AVX512_BF16, "fp32", false,
         "its AVX512-BF16 is hidden by the CPU ISA cap"},
        {"AMX hidden, AVX512-BF16 left: unsure fp32", avx512 | STOKE_SIMD_AVX512_BF16,
         STOKE_SIMD_AMX_BF16, "fp32", true, "its AMX-BF16 is hidden"},
        {"no bf16 instructions: sure fp32", avx512, 0, "fp32", false, "no bf16 instructions"},
        {"AVX2 only: sure fp32", STOKE_SIMD_AVX2 | STOKE_SIMD_FMA, 0, "fp32", false,
         "no bf16 instructions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cpu_box(&machine, 4, 8, 3000, cases[i].simd);
        machine.cpu.simd_hidden = cases[i].hidden;
        if (cases[i].hidden)
            machine.cpu.isa_cap = STOKE_CPU_ISA_AVX512_CORE;
        stoke_recommend(&machine, &recs);
        const stoke_rec *r = rec("precision", STOKE_TUNE_CPU);
        printf("  %s: %s%s\n", cases[i].what, r->text, r->unsure ? " (unsure)" : "");
        CHECK_STR_EQ(r->text, cases[i].text);
        CHECK_INT_EQ(r->unsure, cases[i].unsure);
        CHECK_STR_CONTAINS(r->reason, cases[i].reason);
        if (cases[i].unsure)
            CHECK_STR_CONTAINS(r->unsure_why, "AVX512-BF16 without AMX");
        else
            CHECK_STR_EQ(r->unsure_why, "");

        /* the decision carries the doubt for precision auto only */
        stoke_decision d;
        stoke_tune_request q = {.precision = "auto", .workers = -1, .batch = 128};
        CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
        CHECK_INT_EQ(d.precision_unsure, cases[i].unsure);
        CHECK_STR_EQ(d.precision_unsure_why, r->unsure_why);
        q.precision = "bf16";
        q.precision_src = STOKE_SRC_FLAG;
        CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
        CHECK(!d.precision_unsure);
    }
    /* with a GPU the CPU's rule is silent, and the GPU's rules are sure */
    cpu_box(&machine, 4, 8, 3000, avx512 | STOKE_SIMD_AVX512_BF16);
    add_gpu(&machine, "NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410);
    stoke_recommend(&machine, &recs);
    CHECK(stoke_recs_find(&recs, "precision", STOKE_TUNE_CPU) == NULL);
    CHECK(!rec("precision", 0)->unsure);
    stoke_decision d;
    stoke_tune_request q = {.precision = "auto", .workers = -1, .batch = 128};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK(!d.precision_unsure);
}

static void test_cpu_only_avx2(void)
{
    cpu_box(&machine, 8, 16, 3700, STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA);
    stoke_recommend(&machine, &recs);
    const stoke_rec *r = rec("loader_workers", STOKE_TUNE_CPU);
    CHECK_INT_EQ(r->number, 4);
    CHECK_STR_CONTAINS(r->reason, "a quarter of the 16 usable CPUs");
    CHECK_INT_EQ(rec("compute_threads", STOKE_TUNE_CPU)->number, 12);
    CHECK_INT_EQ(rec("prefetch_depth", STOKE_TUNE_CPU)->number, 8);
    CHECK_NEAR(rec("peak_fp32_flops", STOKE_TUNE_CPU)->number, 8 * 3700e6 * 32, 1);
    CHECK(stoke_recs_find(&recs, "peak_bf16_flops", STOKE_TUNE_CPU) == NULL);
    CHECK_STR_CONTAINS(rec("precision", STOKE_TUNE_CPU)->reason, "no bf16 instructions");

    /* One CPU: load in the training thread. */
    cpu_box(&machine, 1, 1, 2000, STOKE_SIMD_SSE42);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(rec("loader_workers", STOKE_TUNE_CPU)->number, 0);
    CHECK_INT_EQ(rec("compute_threads", STOKE_TUNE_CPU)->number, 1);
    CHECK_NEAR(rec("peak_fp32_flops", STOKE_TUNE_CPU)->number, 2000e6 * 8, 1);

    /* No SIMD the table knows (another architecture): unknown, not a guess. */
    cpu_box(&machine, 4, 4, 2000, 0);
    stoke_recommend(&machine, &recs);
    const stoke_rec *p = rec("peak_fp32_flops", STOKE_TUNE_CPU);
    CHECK(!p->known);
    CHECK_STR_CONTAINS(p->reason, "no SIMD rate");
}

/* The CPU precision rule (what `--precision auto` takes on a CPU-only machine) on the
 * CPU classes CI runs on, from their recorded /proc/cpuinfo (tests/sysroot/cpu-*), as
 * found and under an instruction-set cap applied as STOKE_MAX_CPU_ISA applies it. */
static const stoke_rec *cpu_class(const char *tree, stoke_cpu_isa cap)
{
    char root[512];
    snprintf(root, sizeof root, "%s/sysroot/%s", STOKE_TEST_DATA, tree);
    stoke_cpu_info cpu;
    CHECK_INT_EQ(stoke_cpu_probe(root, &cpu), STOKE_OK);
    /* another machine's tree: the environment's cap is not applied to it */
    CHECK_INT_EQ(cpu.isa_cap, STOKE_CPU_ISA_ALL);
    CHECK_INT_EQ(cpu.simd_hidden, 0);
    stoke_cpu_apply_isa_cap(&cpu, cap);
    cpu_box(&machine, cpu.physical_cores, cpu.usable_cpus, cpu.max_mhz, cpu.simd);
    machine.cpu = cpu;
    stoke_recommend(&machine, &recs);
    return rec("precision", STOKE_TUNE_CPU);
}

static void test_cpu_classes(void)
{
    /* Sapphire Rapids class, AMX-BF16: bf16, at the AMX rate */
    const stoke_rec *r = cpu_class("cpu-spr-amx", STOKE_CPU_ISA_ALL);
    CHECK_STR_EQ(r->text, "bf16");
    CHECK_STR_CONTAINS(r->reason, "CPU-only with AMX-BF16");
    CHECK_NEAR(rec("peak_bf16_flops", STOKE_TUNE_CPU)->number, 2 * 2699.998e6 * 1024, 1);
    /* the same machine capped: a cap that keeps AMX changes nothing ... */
    CHECK_STR_EQ(cpu_class("cpu-spr-amx", STOKE_CPU_ISA_AVX512_CORE_AMX)->text, "bf16");
    /* ... one below it hides AMX, and the rule says so */
    r = cpu_class("cpu-spr-amx", STOKE_CPU_ISA_AVX512_CORE_BF16);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "AMX-BF16 is hidden by the CPU ISA cap avx512_core_bf16 "
                                  "(STOKE_MAX_CPU_ISA)");
    CHECK(machine.cpu.simd & STOKE_SIMD_AVX512_BF16);
    CHECK(machine.cpu.simd_hidden & STOKE_SIMD_AMX_BF16);
    CHECK_NEAR(rec("peak_bf16_flops", STOKE_TUNE_CPU)->number, 2 * 2699.998e6 * 128, 1);
    /* capped at AVX2 it is a Haswell as far as stoke can tell */
    r = cpu_class("cpu-spr-amx", STOKE_CPU_ISA_AVX2);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "AMX-BF16 is hidden by the CPU ISA cap avx2");
    CHECK_INT_EQ(machine.cpu.simd, STOKE_SIMD_SSE42 | STOKE_SIMD_AVX | STOKE_SIMD_AVX2 |
                                       STOKE_SIMD_FMA | STOKE_SIMD_F16C);
    CHECK(stoke_recs_find(&recs, "peak_bf16_flops", STOKE_TUNE_CPU) == NULL);
    CHECK_NEAR(rec("peak_fp32_flops", STOKE_TUNE_CPU)->number, 2 * 2699.998e6 * 32, 1);

    /* AVX-512 with VNNI, BF16 and AMX hidden by the hypervisor: fp32 */
    r = cpu_class("cpu-icx-vnni", STOKE_CPU_ISA_ALL);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "no bf16 instructions");
    CHECK(machine.cpu.simd & STOKE_SIMD_AVX512_VNNI);
    CHECK(stoke_recs_find(&recs, "peak_bf16_flops", STOKE_TUNE_CPU) == NULL);
    CHECK_NEAR(rec("peak_fp32_flops", STOKE_TUNE_CPU)->number, 2 * 2899.998e6 * 64, 1);

    /* Zen 4, AVX512-BF16 without AMX: fp32, and the reason names the missing AMX */
    r = cpu_class("cpu-zen4", STOKE_CPU_ISA_ALL);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "AVX512-BF16 but no AMX");
    CHECK_NEAR(rec("peak_bf16_flops", STOKE_TUNE_CPU)->number, 2 * 2596.098e6 * 128, 1);
    /* the Zen 4 figure is a measurement on that CPU, not a claim about this one: a
     * Zen 5 with the same flags reads it as such */
    r = cpu_class("cpu-zen5", STOKE_CPU_ISA_ALL);
    CHECK_STR_CONTAINS(r->reason, "measured on an AMD EPYC Zen 4: bf16 trained 1.3x faster");
    CHECK(strstr(r->reason, "one run on an AMD EPYC Zen 4") == NULL);
    CHECK(r->unsure);
    r = cpu_class("cpu-zen4", STOKE_CPU_ISA_AVX512_CORE);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "its AVX512-BF16 is hidden by the CPU ISA cap avx512_core");
    CHECK(!r->unsure);

    /* AVX2 only: fp32; a cap above what it has hides nothing */
    r = cpu_class("cpu-haswell", STOKE_CPU_ISA_ALL);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_STR_CONTAINS(r->reason, "no bf16 instructions");
    CHECK_NEAR(rec("peak_fp32_flops", STOKE_TUNE_CPU)->number, 2 * 2400.052e6 * 32, 1);
    uint32_t simd = machine.cpu.simd;
    r = cpu_class("cpu-haswell", STOKE_CPU_ISA_AVX512_CORE_AMX);
    CHECK_STR_EQ(r->text, "fp32");
    CHECK_INT_EQ(machine.cpu.simd, simd);
    CHECK_INT_EQ(machine.cpu.simd_hidden, 0);
}

/* OpenBLAS's core against CPU classes no test machine has: each row a core name as
 * openblas_get_corename() gives it and a CPU's flags. */
static void test_openblas_check(void)
{
    const uint32_t sse = STOKE_SIMD_SSE42, avx = sse | STOKE_SIMD_AVX,
                   avx2 = avx | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA | STOKE_SIMD_F16C,
                   /* Emerald Rapids under a hypervisor that hides AVX512-BF16 and AMX */
        avx512 = avx2 | STOKE_SIMD_AVX512F | STOKE_SIMD_AVX512BW | STOKE_SIMD_AVX512VL |
                 STOKE_SIMD_AVX512_VNNI,
                   zen4 = avx512 | STOKE_SIMD_AVX512_BF16,
                   knl = avx2 | STOKE_SIMD_AVX512F; /* Xeon Phi: no AVX-512 BW, VL */
    static const struct {
        const char *core;
        uint32_t simd;
        stoke_blas_fit fit;
        const char *coretype, *core_isa, *cpu_isa;
    } rows[] = {
        {"Prescott", avx512, STOKE_BLAS_FIT_FALLBACK, "SkylakeX", "SSE3", "AVX-512"},
        {"SkylakeX", avx512, STOKE_BLAS_FIT_MATCH, NULL, "AVX-512", "AVX-512"},
        {"Cooperlake", zen4, STOKE_BLAS_FIT_MATCH, NULL, "AVX-512", "AVX-512"},
        {"Haswell", zen4, STOKE_BLAS_FIT_BELOW, "SkylakeX", "AVX2", "AVX-512"},
        {"Zen", avx512, STOKE_BLAS_FIT_BELOW, "SkylakeX", "AVX2", "AVX-512"},
        {"Sandybridge", avx512, STOKE_BLAS_FIT_FALLBACK, "SkylakeX", "AVX", "AVX-512"},
        {"Haswell", avx2, STOKE_BLAS_FIT_MATCH, NULL, "AVX2", "AVX2+FMA"},
        {"HASWELL", avx2, STOKE_BLAS_FIT_MATCH, NULL, "AVX2", "AVX2+FMA"}, /* any case */
        {"Zen", avx2, STOKE_BLAS_FIT_MATCH, NULL, "AVX2", "AVX2+FMA"},
        {"Core2", avx2, STOKE_BLAS_FIT_FALLBACK, "Haswell", "SSSE3", "AVX2+FMA"},
        {"Nehalem", avx2, STOKE_BLAS_FIT_FALLBACK, "Haswell", "SSE4.2", "AVX2+FMA"},
        {"Sandybridge", avx2, STOKE_BLAS_FIT_FALLBACK, "Haswell", "AVX", "AVX2+FMA"},
        {"Piledriver", avx2, STOKE_BLAS_FIT_FALLBACK, "Haswell", "AVX+FMA", "AVX2+FMA"},
        {"generic", avx2, STOKE_BLAS_FIT_FALLBACK, "Haswell", "plain C", "AVX2+FMA"},
        {"SkylakeX", avx2, STOKE_BLAS_FIT_ABOVE, "Haswell", "AVX-512", "AVX2+FMA"},
        {"Haswell", knl, STOKE_BLAS_FIT_MATCH, NULL, "AVX2", "AVX2+FMA"},
        {"SkylakeX", knl, STOKE_BLAS_FIT_ABOVE, "Haswell", "AVX-512", "AVX2+FMA"},
        {"Sandybridge", avx, STOKE_BLAS_FIT_MATCH, NULL, "AVX", "AVX"},
        {"Prescott", avx, STOKE_BLAS_FIT_FALLBACK, "Sandybridge", "SSE3", "AVX"},
        {"Haswell", avx, STOKE_BLAS_FIT_ABOVE, "Sandybridge", "AVX2", "AVX"},
        {"Nehalem", sse, STOKE_BLAS_FIT_MATCH, NULL, "SSE4.2", "SSE4.2"},
        {"Prescott", sse, STOKE_BLAS_FIT_MATCH, NULL, "SSE3", "SSE4.2"},
        {"Sandybridge", sse, STOKE_BLAS_FIT_ABOVE, "Nehalem", "AVX", "SSE4.2"},
        {"NEOVERSEN1", 0, STOKE_BLAS_FIT_UNKNOWN, NULL, NULL, NULL}, /* arm64 */
        {"Unknown", avx2, STOKE_BLAS_FIT_UNKNOWN, NULL, NULL, "AVX2+FMA"},
        {"Prescott", 0, STOKE_BLAS_FIT_UNKNOWN, NULL, "SSE3", NULL},
        {"", avx2, STOKE_BLAS_FIT_UNKNOWN, NULL, NULL, "AVX2+FMA"},
        {NULL, avx2, STOKE_BLAS_FIT_UNKNOWN, NULL, NULL, "AVX2+FMA"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        stoke_blas_check c;
        const char *core = rows[i].core ? rows[i].core : "(null)";
        stoke_blas_fit fit = stoke_openblas_check(rows[i].core, rows[i].simd, &c);
        CHECK_MSG(fit == rows[i].fit && c.fit == fit, "%s on %#x: %s, want %s", core,
                  (unsigned)rows[i].simd, stoke_blas_fit_name(fit),
                  stoke_blas_fit_name(rows[i].fit));
#define SAME(got, want)                                                           \
    CHECK_MSG((got) == (want) || ((got) && (want) && strcmp((got), (want)) == 0), \
              "%s on %#x: " #got " %s, want %s", core, (unsigned)rows[i].simd,    \
              (got) ? (got) : "NULL", (want) ? (want) : "NULL")
        SAME(c.coretype, rows[i].coretype);
        SAME(c.core_isa, rows[i].core_isa);
        SAME(c.cpu_isa, rows[i].cpu_isa);
#undef SAME
        if (fit == STOKE_BLAS_FIT_UNKNOWN)
            CHECK_STR_CONTAINS(c.reason, "unknown: ");
        else
            CHECK_STR_CONTAINS(c.reason, core);
        if (c.coretype) {
            char set[64];
            snprintf(set, sizeof set, "OPENBLAS_CORETYPE=%s", c.coretype);
            CHECK_STR_CONTAINS(c.reason, set);
        }
    }
    stoke_blas_check c;
    stoke_openblas_check("Prescott", avx512, &c);
    CHECK_STR_CONTAINS(c.reason, "fallback far below");
    stoke_openblas_check("SkylakeX", avx2, &c);
    CHECK_STR_CONTAINS(c.reason, "illegal instruction");
    stoke_openblas_check("NEOVERSEN1", 0, &c);
    CHECK_STR_CONTAINS(c.reason, "not one of the x86-64 cores");
    stoke_openblas_check("Prescott", 0, &c);
    CHECK_STR_CONTAINS(c.reason, "no SSE4.2 or wider");
    CHECK_STR_EQ(stoke_blas_fit_name(STOKE_BLAS_FIT_MATCH), "match");
    CHECK_STR_EQ(stoke_blas_fit_name(STOKE_BLAS_FIT_BELOW), "below");
    CHECK_STR_EQ(stoke_blas_fit_name(STOKE_BLAS_FIT_FALLBACK), "fallback");
    CHECK_STR_EQ(stoke_blas_fit_name(STOKE_BLAS_FIT_ABOVE), "above");
    CHECK_STR_EQ(stoke_blas_fit_name(STOKE_BLAS_FIT_UNKNOWN), "unknown");
}

/* The recommendation follows the check: only when there is a core to set. */
static void test_openblas_rule(void)
{
    /* The machine: Emerald Rapids, BF16 and AMX hidden, Debian's OpenBLAS. */
    uint32_t simd = STOKE_SIMD_SSE42 | STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA |
                    STOKE_SIMD_AVX512F | STOKE_SIMD_AVX512BW | STOKE_SIMD_AVX512VL;
    cpu_box(&machine, 2, 2, 2100, simd);
    machine.openblas.valid = true;
    snprintf(machine.openblas.core, sizeof machine.openblas.core, "Prescott");
    stoke_recommend(&machine, &recs);
    const stoke_rec *r = rec("openblas_coretype", STOKE_TUNE_CPU);
    CHECK(r->known && r->type == STOKE_REC_TEXT);
    CHECK_STR_EQ(r->text, "SkylakeX");
    CHECK_STR_CONTAINS(r->reason, "Prescott kernels (SSE3) on a CPU with AVX-512");
    CHECK_STR_CONTAINS(r->reason, "stoke's training does not use OpenBLAS"); /* whole */

    snprintf(machine.openblas.core, sizeof machine.openblas.core, "SkylakeX");
    stoke_recommend(&machine, &recs);
    CHECK(stoke_recs_find(&recs, "openblas_coretype", STOKE_TUNE_CPU) == NULL);

    snprintf(machine.openblas.core, sizeof machine.openblas.core, "Haswell");
    stoke_recommend(&machine, &recs);
    CHECK_STR_EQ(rec("openblas_coretype", STOKE_TUNE_CPU)->text, "SkylakeX");

    /* The longest names still fit the whole reason. */
    machine.cpu.simd = STOKE_SIMD_SSE42 | STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA;
    snprintf(machine.openblas.core, sizeof machine.openblas.core, "Opteron_SSE3");
    stoke_recommend(&machine, &recs);
    r = rec("openblas_coretype", STOKE_TUNE_CPU);
    CHECK_STR_EQ(r->text, "Haswell");
    CHECK_STR_CONTAINS(r->reason, "stoke's training does not use OpenBLAS");

    machine.openblas.valid = false; /* no answer from the library: nothing to say */
    stoke_recommend(&machine, &recs);
    CHECK(stoke_recs_find(&recs, "openblas_coretype", STOKE_TUNE_CPU) == NULL);
}

/* The decision: open settings from the rules, given ones kept with their source. */
static void test_decide(void)
{
    stoke_decision d;
    /* 8 usable CPUs with AMX, nothing given, data streamed from storage: the rules */
    cpu_box(&machine, 8, 8, 3000, STOKE_SIMD_AVX512F | STOKE_SIMD_AMX_BF16);
    stoke_recommend(&machine, &recs);
    stoke_tune_request q = {.precision = "auto", .workers = -1, .batch = 128};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.precision, STOKE_PREC_BF16);
    CHECK_INT_EQ(d.precision_why.source, STOKE_SRC_RULE);
    CHECK_STR_CONTAINS(d.precision_why.reason, "AMX-BF16");
    CHECK_INT_EQ(d.workers, 2); /* a quarter of 8 */
    CHECK_STR_CONTAINS(d.workers_why.reason, "the tuner: CPU-only machine");
    CHECK_INT_EQ(d.threads, 6);
    CHECK_INT_EQ(d.prefetch, (int)rec("prefetch_depth", STOKE_TUNE_CPU)->number);
    CHECK_INT_EQ(d.prefetch, 4);
    CHECK(!d.pinned);
    CHECK_INT_EQ(d.device, STOKE_TUNE_CPU);
    CHECK_INT_EQ(d.batch, 128);
    CHECK_INT_EQ(d.batch_why.source, STOKE_SRC_DEFAULT);

    /* Held in memory with the fused transform: the training thread loads. */
    q.in_memory = q.cheap_transform = true;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 0);
    CHECK_INT_EQ(d.threads, 8);
    CHECK_INT_EQ(d.prefetch, 2);
    CHECK_STR_CONTAINS(d.workers_why.reason, "the dataset is in memory");

    /* Given settings win and keep their sources. */
    q = (stoke_tune_request){.precision = "fp16",
                             .precision_src = STOKE_SRC_ENV,
                             .workers = 3,
                             .workers_src = STOKE_SRC_FLAG,
                             .threads = 1,
                             .threads_src = STOKE_SRC_FILE,
                             .prefetch = 7,
                             .prefetch_src = STOKE_SRC_CHECKPOINT,
                             .in_memory = true,
                             .cheap_transform = true};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.precision, STOKE_PREC_FP16);
    CHECK_STR_EQ(stoke_source_name(d.precision_why.source), "env");
    CHECK_INT_EQ(d.workers, 3);
    CHECK_STR_EQ(stoke_source_name(d.workers_why.source), "flag");
    CHECK_INT_EQ(d.threads, 1);
    CHECK_STR_EQ(stoke_source_name(d.threads_why.source), "file");
    CHECK_INT_EQ(d.prefetch, 7);
    CHECK_STR_EQ(stoke_source_name(d.prefetch_why.source), "checkpoint");

    /* A CPU without AMX: fp32; a GPU's fp16 rule maps to the enum, not to text. */
    cpu_box(&machine, 2, 1, 3000, STOKE_SIMD_AVX2);
    stoke_recommend(&machine, &recs);
    q = (stoke_tune_request){.precision = "auto", .workers = -1};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.precision, STOKE_PREC_FP32);
    CHECK_INT_EQ(d.workers, 0); /* 1 usable CPU */
    CHECK_INT_EQ(d.threads, 1);
    add_gpu(&machine, "Tesla V100", 7, 0, 80, 1530);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.precision, STOKE_PREC_FP16);
    /* auto takes the GPU: batches are copied there, one thread queues its work */
    CHECK_INT_EQ(d.device, 0);
    /* a rule decided it, nothing was measured: said so, apart from measured and cached */
    CHECK_STR_EQ(stoke_source_name(d.device_why.source), "rule");
    CHECK_STR_EQ(stoke_source_name(STOKE_SRC_MEASURED), "measured");
    CHECK_STR_EQ(stoke_source_name(STOKE_SRC_CACHED), "cached");
    CHECK_STR_CONTAINS(d.device_why.reason, "Tesla V100, compute capability 7.0");
    CHECK(d.pinned);
    CHECK_STR_CONTAINS(d.pinned_why.reason, "copied to the GPU");
    CHECK_INT_EQ(d.threads, 1);
    CHECK_STR_CONTAINS(d.threads_why.reason, "the GPU computes");
    /* the CPU asked for: the CPU's precision rule, no device copy */
    q.device = "cpu";
    q.device_src = STOKE_SRC_FLAG;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, STOKE_TUNE_CPU);
    CHECK_STR_EQ(stoke_source_name(d.device_why.source), "flag");
    CHECK_INT_EQ(d.precision, STOKE_PREC_FP32);
    CHECK(!d.pinned);
    CHECK_STR_CONTAINS(d.pinned_why.reason, "no batch is copied to a GPU");
    /* a device asked for is decided as given (creating the model says if it is absent) */
    q.device = "cuda:2";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, 2);
    CHECK_INT_EQ(d.precision, STOKE_PREC_FP32); /* no recommendation for a GPU not seen */
    q.device = "cuda";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, 0);
    const char *bad[] = {"gpu",     "cuda:",   "cuda:x",  "cuda:-1",
                         "cuda: 1", "cuda:+1", "cuda:1x", "CPU"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        q.device = bad[i];
        CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), "is not auto, cpu, cuda or cuda:N");
        CHECK_INT_EQ(stoke_device_check(bad[i]), STOKE_ERR_ARG);
    }
    /* issue 26 (12): of the form, past the devices stoke addresses: the limit is said */
    const char *past[] = {"cuda:16", "cuda:99", "cuda:99999999999999999999"};
    for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
        q.device = past[i];
        CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(),
                           "stoke addresses at most 16 GPUs, cuda:0 to cuda:15");
    }
    q.device = "cuda:15";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, 15);
    q.device = NULL;

    /* Data in memory through the fused pass: the training thread gathers on the CPU;
     * on a GPU (a step as short as the gather) 2 workers gather ahead, where 3 CPUs
     * leave room for them (the H200 kit run: the MLP's loop waited half its time) */
    stoke_tune_request g = {
        .precision = "auto", .workers = -1, .in_memory = true, .cheap_transform = true};
    cpu_box(&machine, 16, 16, 3000, STOKE_SIMD_AVX2);
    add_gpu(&machine, "NVIDIA H200", 9, 0, 132, 1980);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &g, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, 0);
    CHECK_INT_EQ(d.workers, 2);
    CHECK_INT_EQ(d.threads, 1);
    CHECK_STR_CONTAINS(d.workers_why.reason, "a GPU's step is about as short as gathering a batch");
    g.device = "cpu";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &g, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 0);
    CHECK_STR_CONTAINS(d.workers_why.reason, "the training thread gathers each batch");
    g.device = NULL;
    g.host_threads = 4; /* a Python script computing on the CPU beside the loader */
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &g, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 0);
    g.host_threads = 0;
    cpu_box(&machine, 2, 2, 3000, STOKE_SIMD_AVX2);
    add_gpu(&machine, "NVIDIA H200", 9, 0, 132, 1980);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &g, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, 0);
    CHECK_INT_EQ(d.workers, 0); /* 2 CPUs: no room beside the training thread */

    q.precision = "fp64";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "precision: 'fp64' is not auto, fp32, bf16 or fp16");
}

/* Issue 27: the threads follow the CPUs available (affinity and the cgroup quota), less
 * the whole cores other processes were busy on at the start (the load a test sets). */
static void test_decide_available(void)
{
    stoke_decision d;
    stoke_tune_request q = {
        .precision = "fp32", .workers = -1, .in_memory = true, .cheap_transform = true};
    /* 2 usable CPUs under a quota of 1 CPU */
    cpu_box(&machine, 2, 2, 3000, STOKE_SIMD_AVX2);
    machine.cpu.quota_cpus = 1.0;
    machine.cpu.available_cpus = 1;
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.usable_cpus, 2);
    CHECK_INT_EQ(d.available_cpus, 1);
    CHECK_INT_EQ(d.workers, 0);
    CHECK_INT_EQ(d.threads, 1);
    CHECK_STR_EQ(d.threads_why.reason, "2 usable CPUs, a cgroup quota of 1.0 CPU: 1 available, "
                                       "less 0 loader workers: 1 thread");
    /* a quota of 3.5 on 16 usable: 4 available; the rules share those out */
    cpu_box(&machine, 16, 16, 3000, STOKE_SIMD_AVX2);
    machine.cpu.quota_cpus = 3.5;
    machine.cpu.available_cpus = 4;
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(rec("loader_workers", STOKE_TUNE_CPU)->number, 1); /* a quarter of 4 */
    CHECK_STR_CONTAINS(rec("loader_workers", STOKE_TUNE_CPU)->reason,
                       "a quarter of the 4 available CPUs (16 usable, a cgroup quota of 3.5)");
    CHECK_INT_EQ(rec("compute_threads", STOKE_TUNE_CPU)->number, 3);
    q.in_memory = false;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 1);
    CHECK_INT_EQ(d.threads, 3);
    CHECK_STR_EQ(d.threads_why.reason, "16 usable CPUs, a cgroup quota of 3.5 CPUs: 4 available, "
                                       "less 1 loader worker: 3 threads");
    q.in_memory = true;

    /* 2 CPUs, other processes busy on one of them at the start */
    cpu_box(&machine, 2, 2, 3000, STOKE_SIMD_AVX2);
    stoke_recommend(&machine, &recs);
    machine.load = (stoke_cpu_load){.valid = true,
                                    .ncpu = 2,
                                    .busy_cpus = 1.2,
                                    .own_cpus = 0.2,
                                    .others_cpus = 1.0,
                                    .run_queue = 2};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.others_cpus, 1);
    CHECK_INT_EQ(d.threads, 1);
    CHECK_STR_EQ(d.threads_why.reason, "2 usable CPUs, other processes busy on about 1.0 of "
                                       "them, less 0 loader workers: 1 thread");
    /* less than half a core: nothing taken out, nothing said */
    machine.load.others_cpus = 0.4;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.others_cpus, 0);
    CHECK_INT_EQ(d.threads, 2);
    CHECK_STR_EQ(d.threads_why.reason, "2 usable CPUs, less 0 loader workers: 2 threads");
    /* all of them busy: none left out (time is shared by thread: a smaller team only
     * gets a smaller share), and said */
    machine.load.others_cpus = 2.0;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.threads, 2);
    CHECK_STR_CONTAINS(d.threads_why.reason, "about 2.0 of them (all of them: none is left out");
    CHECK_STR_CONTAINS(d.threads_why.reason, ": 2 threads");
    /* 1.6: rounds to all of them too */
    machine.load.others_cpus = 1.6;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.threads, 2);
    /* threads given: kept, whatever the load */
    q.threads = 2;
    q.threads_src = STOKE_SRC_FLAG;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.threads, 2);
    q.threads = 0;
    /* 4 CPUs of a 64-CPU machine (a container): the others' 40 fit in the 60 outside
     * ours; 62 leave 2 on ours */
    cpu_box(&machine, 4, 4, 3000, STOKE_SIMD_AVX2);
    stoke_recommend(&machine, &recs);
    machine.load = (stoke_cpu_load){.valid = true, .ncpu = 64, .others_cpus = 40.0};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.others_cpus, 0);
    CHECK_INT_EQ(d.threads, 4);
    CHECK_STR_CONTAINS(d.threads_why.reason, "other processes busy on about 40.0 of the "
                                             "machine's 64 CPUs: 0 of these taken out");
    machine.load.others_cpus = 61.6;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.others_cpus, 2);
    CHECK_INT_EQ(d.threads, 2);
    /* an unsampled load (valid false) takes nothing out */
    machine.load = (stoke_cpu_load){.others_cpus = 3};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.threads, 4);
    /* a GPU computes: one thread, the load changes nothing */
    machine.load = (stoke_cpu_load){.valid = true, .ncpu = 4, .others_cpus = 3};
    add_gpu(&machine, "Tesla V100", 7, 0, 80, 1530);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.threads, 1);
    CHECK_STR_CONTAINS(d.threads_why.reason, "the GPU computes");
}

/* Workers for a caller that computes on its own threads beside the loader (the Python
 * loader: torch.get_num_threads()): what the available CPUs, its threads and the other
 * processes leave, at least 1, at most the rules' cap; 0 threads (stoke train) keeps
 * the rules. */
static void test_decide_host_threads(void)
{
    stoke_decision d;
    stoke_tune_request q = {.precision = "fp32",
                            .workers = -1,
                            .host_threads = 1,
                            .host_threads_from = "torch.get_num_threads()"};
    cpu_box(&machine, 2, 2, 3000, STOKE_SIMD_AVX2);
    machine.load = (stoke_cpu_load){.valid = true, .ncpu = 2};
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 1);
    CHECK_INT_EQ(d.workers_why.source, STOKE_SRC_RULE);
    CHECK_STR_EQ(d.workers_why.reason, "2 available CPUs, the script computes on 1 thread "
                                       "(torch.get_num_threads()), other processes busy on "
                                       "0.0: 1 worker");
    /* 16 CPUs, the script on 4 threads, others on 2: 10 left, the CPU-only cap is 8 */
    cpu_box(&machine, 16, 16, 3000, STOKE_SIMD_AVX2);
    machine.load = (stoke_cpu_load){.valid = true, .ncpu = 16, .others_cpus = 2.2};
    stoke_recommend(&machine, &recs);
    q.host_threads = 4;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 8);
    CHECK_STR_CONTAINS(d.workers_why.reason, "the script computes on 4 threads "
                                             "(torch.get_num_threads()), other processes busy "
                                             "on 2.2: 8 workers (10 left, capped at 8: the "
                                             "rules' cap on a CPU-only machine)");
    q.host_threads = 10; /* 16 - 10 - 2 */
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 4);
    /* the prefetch rule follows the workers */
    CHECK_INT_EQ(d.prefetch, 8);
    q.host_threads = 16; /* nothing left: at least 1 */
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 1);
    CHECK_STR_CONTAINS(d.workers_why.reason, ": 1 worker (at least 1)");
    /* 0 threads (stoke train): the rules' quarter, whatever the load */
    q.host_threads = 0;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 4);
    CHECK_STR_CONTAINS(d.workers_why.reason, "the tuner: CPU-only machine");
    /* given workers never change; the in-memory rule's 0 stays */
    q.host_threads = 1;
    q.workers = 3;
    q.workers_src = STOKE_SRC_FLAG;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 3);
    CHECK_INT_EQ(d.workers_why.source, STOKE_SRC_FLAG);
    q.workers = -1;
    q.in_memory = q.cheap_transform = true;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 0);
    CHECK_STR_CONTAINS(d.workers_why.reason, "the training thread gathers");
    q.in_memory = q.cheap_transform = false;
    /* a quota of 3.5 on 16 usable: 4 available, less 1 thread: 3; an unsampled load
     * takes nothing out and says so */
    machine.cpu.quota_cpus = 3.5;
    machine.cpu.available_cpus = 4;
    machine.load = (stoke_cpu_load){0};
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 3);
    CHECK_STR_EQ(d.workers_why.reason, "4 available CPUs (16 usable, a cgroup quota of 3.5), the "
                                       "script computes on 1 thread (torch.get_num_threads()), "
                                       "other processes' load unknown: 3 workers");
    /* 4 CPUs of a 64-CPU machine: the others' 61.6 leave 2 of ours busy */
    cpu_box(&machine, 4, 4, 3000, STOKE_SIMD_AVX2);
    machine.load = (stoke_cpu_load){.valid = true, .ncpu = 64, .others_cpus = 61.6};
    stoke_recommend(&machine, &recs);
    q.host_threads_from = NULL;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 1);
    CHECK_STR_EQ(d.workers_why.reason, "4 available CPUs, the script computes on 1 thread, other "
                                       "processes busy on 61.6 of the machine's 64 CPUs (2 of "
                                       "these): 1 worker");
    /* one CPU: the rule's training thread loads, whatever is left */
    cpu_box(&machine, 1, 1, 3000, STOKE_SIMD_AVX2);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 0);
    /* a GPU machine: its cap is 16 */
    cpu_box(&machine, 32, 32, 3000, STOKE_SIMD_AVX2);
    add_gpu(&machine, "NVIDIA H100 PCIe", 9, 0, 114, 1755);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 16);
    CHECK_STR_CONTAINS(d.workers_why.reason, "(31 left, capped at 16: the rules' cap with a GPU)");
}

static stoke_profiles profiles;

/* The profile `name` (an NVML name), of compute capability major.minor and `gb` GB, gets
 * on an 18-core machine: its name, or "" for none; the match's reason in *why. */
static const char *profile_of(const char *name, int major, int minor, double gb,
                              stoke_profile_match *pm)
{
    cpu_box(&machine, 18, 18, 3000, STOKE_SIMD_AVX2);
    stoke_gpu_info *g = add_gpu(&machine, name, major, minor, 100, 1500);
    if (gb > 0) {
        g->memory_total_bytes = (uint64_t)(gb * 1e9);
        g->valid |= STOKE_GPU_HAS_MEMORY;
    }
    stoke_profile_match_device(&profiles, &machine, 0, pm);
    return pm->how == STOKE_PROFILE_NONE ? "" : pm->profile.name;
}

/* Every seed GPU by the names NVML gives it; the classes around them; none where no
 * profile comes near, saying why. */
static void test_profile_match(void)
{
    unsetenv("STOKE_PROFILES");
    CHECK_INT_EQ(stoke_profiles_load(&profiles), STOKE_OK);
    static const struct {
        const char *nvml;
        int major, minor;
        double gb;
        const char *profile;
        stoke_profile_how how;
    } cases[] = {
        {"NVIDIA H100 PCIe", 9, 0, 85.5, "h100", STOKE_PROFILE_BY_NAME}, /* seed 000 */
        {"NVIDIA H100 80GB HBM3", 9, 0, 85.9, "h100", STOKE_PROFILE_BY_NAME},
        {"NVIDIA H200", 9, 0, 150.0, "h200", STOKE_PROFILE_BY_NAME}, /* 001, 004 */
        {"NVIDIA H200 NVL", 9, 0, 150.0, "h200", STOKE_PROFILE_BY_NAME},
        {"NVIDIA GeForce RTX 3090", 8, 6, 25.8, "rtx-3090", STOKE_PROFILE_BY_NAME}, /* 002, 003 */
        {"NVIDIA GeForce RTX 3090 Ti", 8, 6, 25.8, "rtx-3090", STOKE_PROFILE_BY_NAME},
        {"NVIDIA GeForce RTX 4090", 8, 9, 25.8, "rtx-4090", STOKE_PROFILE_BY_NAME}, /* 003 */
        {"NVIDIA GeForce RTX 4080 SUPER", 8, 9, 17.2, "rtx-4080", STOKE_PROFILE_BY_NAME},
        {"NVIDIA GeForce RTX 5090", 12, 0, 34.2, "rtx-5090", STOKE_PROFILE_BY_NAME},
        {"NVIDIA A100-SXM4-80GB", 8, 0, 85.1, "a100", STOKE_PROFILE_BY_NAME}, /* stoke's own */
        {"NVIDIA A100-PCIE-40GB", 8, 0, 42.5, "a100", STOKE_PROFILE_BY_NAME},
        {"NVIDIA L4", 8, 9, 24.1, "l4", STOKE_PROFILE_BY_NAME},
        /* whole words only: a Grace Hopper is not an H200, an L40S not an L4 */
        {"NVIDIA GH200 480GB", 9, 0, 102.0, "h100", STOKE_PROFILE_BY_CLASS},
        {"NVIDIA L40S", 8, 9, 48.3, "l4", STOKE_PROFILE_BY_CLASS},
        {"NVIDIA GeForce RTX 3080", 8, 6, 10.7, "rtx-3090", STOKE_PROFILE_BY_CLASS},
        {"NVIDIA GeForce RTX 4070", 8, 9, 12.9, "rtx-4080", STOKE_PROFILE_BY_CLASS},
        {"NVIDIA A30", 8, 0, 25.8, "a100", STOKE_PROFILE_BY_CLASS},
        {"Tesla V100-PCIE-16GB", 7, 0, 17.2, "", STOKE_PROFILE_NONE},
        {"NVIDIA B200", 10, 0, 192.0, "", STOKE_PROFILE_NONE},
    };
    stoke_profile_match pm;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got =
            profile_of(cases[i].nvml, cases[i].major, cases[i].minor, cases[i].gb, &pm);
        CHECK_MSG(!strcmp(got, cases[i].profile) && pm.how == cases[i].how,
                  "%s: profile '%s' by %s (%s), expected '%s' by %s", cases[i].nvml, got,
                  stoke_profile_how_name(pm.how), pm.why, cases[i].profile,
                  stoke_profile_how_name(cases[i].how));
    }
    profile_of("NVIDIA GeForce RTX 3080", 8, 6, 10.7, &pm);
    CHECK_STR_CONTAINS(pm.why,
                       "no profile names 'NVIDIA GeForce RTX 3080'; the nearest class: "
                       "compute capability 8.6 like rtx-3090's 8.6, 11 GB against its 24 GB");
    profile_of("Tesla V100-PCIE-16GB", 7, 0, 17.2, &pm);
    CHECK_STR_CONTAINS(pm.why, "or has compute capability 7.x: the rules decide");
    profile_of("NVIDIA H100 PCIe", 9, 0, 85.5, &pm);
    CHECK_STR_EQ(pm.why, "'NVIDIA H100 PCIe' names 'H100'");
    /* no compute capability and no name: nothing to go by */
    cpu_box(&machine, 4, 4, 3000, 0);
    stoke_gpu_info *g = add_gpu(&machine, "Mystery GPU", 0, 0, 0, 0);
    g->valid = 0;
    CHECK_INT_EQ(stoke_profile_match_device(&profiles, &machine, 0, &pm), STOKE_PROFILE_NONE);
    CHECK_STR_CONTAINS(pm.why, "did not report its compute capability");
    CHECK_INT_EQ(stoke_profile_match_device(NULL, &machine, 0, &pm), STOKE_PROFILE_NONE);

    /* the seed's workers scaled by cores: 16 for 18; on 2 CPUs the GPU run leaves 1 */
    profile_of("NVIDIA H100 PCIe", 9, 0, 85.5, &pm);
    CHECK_INT_EQ(pm.workers, 16);
    CHECK_INT_EQ(pm.prefetch, 32); /* 16 x 2, within [2, 32] */
    machine.cpu.usable_cpus = 2;
    stoke_profile_match_device(&profiles, &machine, 0, &pm);
    CHECK_INT_EQ(pm.workers, 1);
    CHECK_INT_EQ(pm.prefetch, 2);

    /* The CPU class decides as the rules, on every machine size. */
    for (int usable = 1; usable <= 80; usable++) {
        cpu_box(&machine, usable, usable, 3000, STOKE_SIMD_AVX2);
        stoke_recommend(&machine, &recs);
        CHECK_INT_EQ(stoke_profile_match_device(&profiles, &machine, STOKE_TUNE_CPU, &pm),
                     STOKE_PROFILE_CPU);
        CHECK_MSG(pm.workers == (int)rec("loader_workers", STOKE_TUNE_CPU)->number &&
                      pm.prefetch == (int)rec("prefetch_depth", STOKE_TUNE_CPU)->number,
                  "%d CPUs: the profile's %d workers, %d prefetch; the rules' %g, %g", usable,
                  pm.workers, pm.prefetch, rec("loader_workers", STOKE_TUNE_CPU)->number,
                  rec("prefetch_depth", STOKE_TUNE_CPU)->number);
    }
}

/* What the decision takes from a profile: workers and prefetch, said so; the rule's
 * precision kept, the profile's differing one said; the start values recorded. */
static void test_decide_profile(void)
{
    stoke_decision d;
    stoke_tune_request q = {.precision = "auto", .workers = -1, .profiles = &profiles};
    /* An RTX 3090 on 32 CPUs: the rule gives 16 workers, seed 002 eight */
    cpu_box(&machine, 32, 32, 3000, STOKE_SIMD_AVX2);
    stoke_gpu_info *g = add_gpu(&machine, "NVIDIA GeForce RTX 3090", 8, 6, 82, 2100);
    g->cuda_index = 0;
    g->valid |= STOKE_GPU_HAS_CUDA_INDEX;
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.device, 0);
    CHECK_INT_EQ(d.profile.how, STOKE_PROFILE_BY_NAME);
    CHECK_STR_EQ(d.profile.profile.name, "rtx-3090");
    CHECK_INT_EQ(d.profile.profile.batch, 128); /* recorded, not applied */
    CHECK(d.profile.profile.tf32);
    CHECK_INT_EQ(d.workers, 8);
    CHECK_STR_CONTAINS(d.workers_why.reason, "profile 'rtx-3090' (seed 002): 8 workers");
    CHECK_STR_CONTAINS(d.workers_why.reason, "(the rule alone: 16)");
    CHECK_INT_EQ(d.prefetch, 32); /* 8 x 4 */
    CHECK_STR_CONTAINS(d.prefetch_why.reason, "profile 'rtx-3090' (seed 002): 4 batches ahead");
    CHECK_INT_EQ(d.precision, STOKE_PREC_BF16);
    CHECK_STR_CONTAINS(d.precision_why.reason, "profile 'rtx-3090' (seed 002) starts from fp16, "
                                               "the rule is kept");
    /* Given settings still win over the profile. */
    q.workers = 2;
    q.workers_src = STOKE_SRC_FLAG;
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 2);
    CHECK_INT_EQ(d.prefetch, 8); /* the profile's 4 per worker, for the 2 given */
    /* A device asked for that is not there: no profile, the rules. */
    q.device = "cuda:3";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.profile.how, STOKE_PROFILE_NONE);
    CHECK_INT_EQ(d.prefetch, 4);

    /* An H100 on 18 CPUs: the rule and seed 000 agree, and the reason says so. */
    cpu_box(&machine, 18, 18, 3000, STOKE_SIMD_AVX2);
    g = add_gpu(&machine, "NVIDIA H100 PCIe", 9, 0, 114, 1755);
    g->valid |= STOKE_GPU_HAS_CUDA_INDEX;
    stoke_recommend(&machine, &recs);
    q = (stoke_tune_request){.precision = "auto", .workers = -1, .profiles = &profiles};
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.workers, 16);
    CHECK_STR_CONTAINS(d.workers_why.reason, "the tuner: GPU machine");
    CHECK_STR_CONTAINS(d.workers_why.reason, "; profile 'h100' (seed 000) starts from the same");
    CHECK_STR_CONTAINS(d.precision_why.reason, "profile 'h100' (seed 000) starts from the same");
    /* The CPU asked for on that machine: the CPUs compute, so the CPU class's quarter
     * loads, not the GPU machine's 16 (which left the math 2 threads). */
    q.device = "cpu";
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.profile.how, STOKE_PROFILE_CPU);
    CHECK_INT_EQ(d.workers, 4);
    CHECK_INT_EQ(d.threads, 14);
    CHECK_STR_CONTAINS(d.workers_why.reason, "profile 'cpu' (stoke's own): 1 worker for 4 cores, "
                                             "scaled to the 18 usable CPUs");
    CHECK_STR_CONTAINS(d.workers_why.reason, "(the rule alone: 16)");
    q.device = NULL;

    /* The CPU: the same decision as without profiles, the profile named. */
    cpu_box(&machine, 8, 8, 3000, STOKE_SIMD_AVX512F | STOKE_SIMD_AMX_BF16);
    stoke_recommend(&machine, &recs);
    CHECK_INT_EQ(stoke_decide(&machine, &recs, &q, &d), STOKE_OK);
    CHECK_INT_EQ(d.profile.how, STOKE_PROFILE_CPU);
    CHECK_INT_EQ(d.workers, 2);
    CHECK_INT_EQ(d.threads, 6);
    CHECK_INT_EQ(d.prefetch, 4);
    CHECK_INT_EQ(d.precision, STOKE_PREC_BF16);
    CHECK_STR_CONTAINS(d.workers_why.reason, "profile 'cpu' (stoke's own) starts from the same");
}

/* The batch size's rule (tune/batch.c) on facts given: the smallest bound leads the
 * reason, each a power of two with pow2; effective_batch's accumulation rounds up. */
static void test_batch_rule(void)
{
    stoke_why w;
    char why[64];
    /* the CPU's start (256) under a fit of 4096 and 60,000 samples (cap 1200 -> 1024) */
    CHECK_INT_EQ(stoke_tune_batch_auto(4096, "FIT", 60000, 1, false, true, true, &w), 256);
    CHECK_STR_CONTAINS(w.reason, "256, the CPU's starting point");
    CHECK_STR_CONTAINS(w.reason, "fit: FIT");
    CHECK_INT_EQ(w.source, STOKE_SRC_RULE);
    /* 2,000 samples at 2 accumulated: 20 -> 16, below the start */
    CHECK_INT_EQ(stoke_tune_batch_auto(4096, "FIT", 2000, 2, false, true, true, &w), 16);
    CHECK_STR_CONTAINS(w.reason, "of 2 accumulated batches, a power of two); fit: FIT");
    /* a GPU: no start; an effective batch given: no steps cap; the fit decides alone */
    CHECK_INT_EQ(stoke_tune_batch_auto(700, "FIT", 2000, 1, true, false, true, &w), 700);
    CHECK_STR_EQ(w.reason, "FIT");
    CHECK_INT_EQ(stoke_tune_steps_cap(10, 1, false, why, sizeof why), 1); /* at least 1 */
    CHECK_INT_EQ(stoke_tune_steps_cap(10, 1, true, why, sizeof why), 0);
    CHECK_INT_EQ(stoke_tune_pow2_floor(1), 1);
    CHECK_INT_EQ(stoke_tune_pow2_floor(1023), 512);
    CHECK_INT_EQ(stoke_tune_accumulate(1000, 256, &w), 4);
    CHECK_STR_CONTAINS(w.reason, "the effective batch is 1024");
    CHECK_INT_EQ(stoke_tune_accumulate(1024, 256, &w), 4);
    CHECK(!strstr(w.reason, "not a multiple"));
    /* not even batch 1: the error says the numbers */
    stoke_mem_plan plan = {.params = 100, .grads = 100, .optim = 100};
    stoke_batch_fit f = {.safety = 0.5,
                         .free_bytes = 1000,
                         .free_what = "free",
                         .budget = 500,
                         .plan = &plan,
                         .fit = 0,
                         .samples = 10,
                         .pow2 = true};
    int64_t cap = 7;
    CHECK_INT_EQ(stoke_tune_batch_fit(&f, &cap, why, sizeof why), STOKE_ERR_NOMEM);
    CHECK_INT_EQ(cap, 0);
    CHECK_STR_CONTAINS(stoke_last_error(), "not even batch 1 fits: 50% of the");
    f.fit = 10; /* the samples: said, and rounded down */
    char fit[400];
    CHECK_INT_EQ(stoke_tune_batch_fit(&f, &cap, fit, sizeof fit), STOKE_OK);
    CHECK_INT_EQ(cap, 8);
    CHECK_STR_CONTAINS(fit,
                       "fits 10 (capped by the 10 samples), rounded down to a power of two: 8");
}

int main(void)
{
    test_h100();
    test_3090_and_v100();
    test_missing_readings();
    test_cpu_only_amx();
    test_cpu_precision_unsure();
    test_cpu_only_avx2();
    test_cpu_classes();
    test_openblas_check();
    test_openblas_rule();
    test_decide();
    test_decide_available();
    test_decide_host_threads();
    test_profile_match();
    test_decide_profile();
    test_batch_rule();
    return CHECK_DONE();
}
