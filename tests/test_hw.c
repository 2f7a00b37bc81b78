/* test_hw.c - CPU, memory and storage probes on recorded trees and on this machine;
 * PCI bus id matching; the whole-machine probe (OpenBLAS's core included) without a
 * GPU library. */
#include "check.h"
#include "core/isa.h"
#include "hw/disk_impl.h"
#include "stoke/hw.h"

#include <stdint.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#define SYSROOT STOKE_TEST_DATA "/sysroot"

static void test_twosocket(void)
{
    stoke_cpu_info c;
    CHECK_INT_EQ(stoke_cpu_probe(SYSROOT "/twosocket", &c), STOKE_OK);
    CHECK_STR_EQ(c.model, "Intel(R) Xeon(R) CPU E5-2637 v4 @ 3.50GHz");
    CHECK_INT_EQ(c.logical_cpus, 16);
    CHECK_INT_EQ(c.usable_cpus, 16); /* a recorded tree ignores our own affinity */
    CHECK_INT_EQ(c.physical_cores, 8);
    CHECK_INT_EQ(c.sockets, 2);
    CHECK_INT_EQ(c.numa_nodes, 2);
    CHECK_INT_EQ(c.l1d_bytes, 32 * 1024);
    CHECK_INT_EQ(c.l2_bytes, 256 * 1024);
    CHECK_INT_EQ(c.l3_bytes, 15 * 1024 * 1024);
    CHECK_NEAR(c.max_mhz, 3700.0, 1e-9); /* cpufreq beats cpuinfo's current 1200 */
    uint32_t want =
        STOKE_SIMD_SSE42 | STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA | STOKE_SIMD_F16C;
    CHECK_INT_EQ(c.simd, want);
    char names[256];
    CHECK_STR_EQ(stoke_simd_names(c.simd, names, sizeof names), "sse4_2 avx avx2 fma f16c");

    stoke_mem_info m;
    CHECK_INT_EQ(stoke_mem_probe(SYSROOT "/twosocket", &m), STOKE_OK);
    CHECK_INT_EQ(m.total_bytes, 131900000ull * 1024);
    CHECK_INT_EQ(m.available_bytes, 120000000ull * 1024);
    CHECK_INT_EQ(m.cgroup_limit_bytes, 0); /* no /proc/self/cgroup there */
}

/* A cgroup's memory limit caps what is available: the host's MemAvailable is not
 * what the OOM killer enforces in a container. */
static void test_cgroup_memory(void)
{
    stoke_mem_info m;
    CHECK_INT_EQ(stoke_mem_probe(SYSROOT "/cgroup2", &m), STOKE_OK);
    CHECK_INT_EQ(m.meminfo_available_bytes, 120000000ull * 1024);
    CHECK_INT_EQ(m.cgroup_limit_bytes, 8ull << 30);
    CHECK_INT_EQ(m.cgroup_used_bytes, 1ull << 30);
    CHECK_INT_EQ(m.available_bytes, 7ull << 30);
    CHECK_INT_EQ(stoke_mem_probe(SYSROOT "/cgroup1", &m), STOKE_OK);
    CHECK_INT_EQ(m.cgroup_limit_bytes, 4ull << 30);
    CHECK_INT_EQ(m.available_bytes, (4ull << 30) - 1000000000ull);
}

/* The CPU quota of this process's cgroup and its ancestors: the smallest wins, "max"
 * and -1 are none, a malformed file is none; available = min(usable, ceil(quota)). */
static void test_cpu_quota(void)
{
    static const struct {
        const char *tree;
        double quota;
        const char *file;
        int available;
    } cases[] = {
        /* the pod's 1.5 beats the container's 3 under it and "max" above */
        {"cpuquota-v2-nested", 1.5, "/sys/fs/cgroup/kubepods/pod1/cpu.max", 2},
        {"cpuquota-v2-max", 0, "", 4},
        /* "150000", "150000 0", "-50000 100000", "abc 100000", "150000 100000 7" */
        {"cpuquota-v2-bad", 0, "", 4},
        /* v1 "cpu,cpuacct": the container's 0.5; its parent's "12x" and the mount's -1
         * are none */
        {"cpuquota-v1", 0.5, "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", 1},
        /* v1 "cpu" alone, the path not under the mount: the mount's own 2.5 */
        {"cpuquota-v1-cpu", 2.5, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", 3},
        {"twosocket", 0, "", 16}, /* no /proc/self/cgroup */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char root[512];
        snprintf(root, sizeof root, "%s/%s", SYSROOT, cases[i].tree);
        stoke_cpu_info c;
        CHECK_INT_EQ(stoke_cpu_probe(root, &c), STOKE_OK);
        CHECK_MSG(c.quota_cpus == cases[i].quota, "%s: quota %g", cases[i].tree, c.quota_cpus);
        CHECK_STR_EQ(c.quota_file, cases[i].file);
        CHECK_MSG(c.available_cpus == cases[i].available, "%s: available %d", cases[i].tree,
                  c.available_cpus);
        CHECK_INT_EQ(stoke_cpu_available(&c), cases[i].available);
    }
    /* filled by hand (available 0): the usable CPUs, at least 1 */
    stoke_cpu_info hand = {.usable_cpus = 6};
    CHECK_INT_EQ(stoke_cpu_available(&hand), 6);
    hand.usable_cpus = 0;
    CHECK_INT_EQ(stoke_cpu_available(&hand), 1);
}

/* Two recorded /proc/stat snapshots: busy, own and others' CPUs, steal, run queue. */
static void test_cpu_load(void)
{
    stoke_cpu_snapshot t0, t1, t2;
    stoke_cpu_load l;
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/cpuload/t0", &t0), STOKE_OK);
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/cpuload/t1", &t1), STOKE_OK);
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/cpuload/t2", &t2), STOKE_OK);
    CHECK_INT_EQ(t0.ncpu, 4);
    CHECK_INT_EQ(t0.steal, 1000);
    CHECK_INT_EQ(t0.procs_running, 2);
    CHECK(t0.own_valid);
    CHECK_NEAR(t0.own_ticks, 1000, 0); /* utime 700 + stime 300, past "(a) b c)" */
    /* 400 ticks of 4 CPUs: 250 busy (user 150, nice 20, system 50, irq 10, softirq 20),
     * idle 100, iowait 10, steal 40; this process 100 */
    CHECK(stoke_cpu_load_between(&t0, &t1, &l));
    CHECK_INT_EQ(l.ncpu, 4);
    CHECK_NEAR(l.seconds, 100.0 / (double)sysconf(_SC_CLK_TCK), 1e-12);
    CHECK_NEAR(l.busy_cpus, 2.5, 1e-12);
    CHECK_NEAR(l.own_cpus, 1.0, 1e-12);
    CHECK_NEAR(l.others_cpus, 1.5, 1e-12);
    CHECK_NEAR(l.steal_pct, 10.0, 1e-12);
    CHECK_INT_EQ(l.run_queue, 5);
    /* this process's 60 ticks beat the machine's 40 busy (read at other times): others
     * clamped to 0 */
    CHECK(stoke_cpu_load_between(&t1, &t2, &l));
    CHECK_NEAR(l.busy_cpus, 40.0 / 360 * 4, 1e-12);
    CHECK_NEAR(l.own_cpus, 60.0 / 360 * 4, 1e-12);
    CHECK_NEAR(l.others_cpus, 0, 0);
    CHECK_NEAR(l.steal_pct, 0, 0);
    CHECK_INT_EQ(l.run_queue, 1);
    /* backwards (another machine, a reset) or the same snapshot: no load */
    CHECK(!stoke_cpu_load_between(&t1, &t0, &l));
    CHECK(!l.valid);
    CHECK_INT_EQ(l.run_queue, -1);
    CHECK(!stoke_cpu_load_between(&t1, &t1, &l));
    /* an old kernel's four counters, no own time, no procs_running: all busy is others' */
    stoke_cpu_snapshot o0, o1;
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/cpuload/oldkernel0", &o0), STOKE_OK);
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/cpuload/oldkernel1", &o1), STOKE_OK);
    CHECK(!o1.own_valid);
    CHECK_INT_EQ(o1.procs_running, -1);
    CHECK(stoke_cpu_load_between(&o0, &o1, &l));
    CHECK_NEAR(l.busy_cpus, 1.0, 1e-12);
    CHECK_NEAR(l.others_cpus, 1.0, 1e-12);
    CHECK_INT_EQ(l.run_queue, -1);
    /* no aggregate line; no file */
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/cpuload/bad", &o0), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "no aggregate \"cpu\" line");
    CHECK(!stoke_cpu_load_between(&o0, &o1, &l));
    CHECK_INT_EQ(stoke_cpu_snapshot_read(SYSROOT "/nonexistent", &o0), STOKE_ERR_IO);
    /* live: the figures hang together, whatever this machine is doing */
    CHECK_INT_EQ(stoke_cpu_load_sample(0.05, &l), STOKE_OK);
    if (l.valid) {
        CHECK(l.others_cpus >= 0 && l.others_cpus <= l.busy_cpus + 1e-9);
        CHECK(l.busy_cpus <= l.ncpu + 1e-9);
        CHECK(l.steal_pct >= 0 && l.steal_pct <= 100);
    }
}

static void test_nosysfs(void)
{
    stoke_cpu_info c;
    CHECK_INT_EQ(stoke_cpu_probe(SYSROOT "/nosysfs", &c), STOKE_OK);
    CHECK_INT_EQ(c.logical_cpus, 4);
    CHECK_INT_EQ(c.physical_cores, 2); /* from cpuinfo's physical id / core id */
    CHECK_INT_EQ(c.sockets, 1);
    CHECK_INT_EQ(c.numa_nodes, 1);
    CHECK_INT_EQ(c.l1d_bytes, 0);
    CHECK_INT_EQ(c.l3_bytes, 0);
    CHECK_NEAR(c.max_mhz, 2103.5, 1e-9);
    CHECK(c.simd & STOKE_SIMD_AVX512F);
    CHECK(c.simd & STOKE_SIMD_AVX512_BF16);
    CHECK(c.simd & STOKE_SIMD_AMX_BF16);
    CHECK(c.simd & STOKE_SIMD_AMX_TILE);
    CHECK(!(c.simd & STOKE_SIMD_AVX512_FP16));

    stoke_mem_info m;
    CHECK_INT_EQ(stoke_mem_probe(SYSROOT "/nosysfs", &m), STOKE_OK);
    CHECK_INT_EQ(m.total_bytes, 8000000ull * 1024);
    CHECK_INT_EQ(m.available_bytes, 0); /* no MemAvailable line: unknown */

    stoke_cpu_info none;
    CHECK_INT_EQ(stoke_cpu_probe(SYSROOT "/absent", &none), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/absent/proc/cpuinfo");
    CHECK_INT_EQ(stoke_mem_probe(SYSROOT "/absent", &m), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/absent/proc/meminfo");
}

static void test_simd_names(void)
{
    char buf[64];
    CHECK_STR_EQ(stoke_simd_names(0, buf, sizeof buf), "");
    CHECK_STR_EQ(stoke_simd_names(STOKE_SIMD_AVX512_BF16 | STOKE_SIMD_AMX_BF16, buf, sizeof buf),
                 "avx512_bf16 amx_bf16");
    /* A short buffer holds whole names only. */
    char tiny[12];
    CHECK_STR_EQ(
        stoke_simd_names(STOKE_SIMD_AVX | STOKE_SIMD_AVX2 | STOKE_SIMD_FMA, tiny, sizeof tiny),
        "avx avx2");
}

/* The generation table: the Linux kernel's family and model ranges, "unknown" for
 * anything off them (never the nearest entry), and the probe's fields from a recorded
 * Zen 5 guest (EPYC family 26 model 2, 2,596 MHz reported). */
static void test_generation(void)
{
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 26, 2, 1), "AMD Zen 5");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 0x1a, 0x11, 0), "AMD Zen 5");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 0x1a, 0x44, 0), "AMD Zen 5");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 0x1a, 0x30, 0), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 25, 0x01, 1), "AMD Zen 3");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 25, 0x21, 0), "AMD Zen 3");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 25, 0x11, 1), "AMD Zen 4");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 25, 0x61, 2), "AMD Zen 4");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 25, 0xa0, 2), "AMD Zen 4");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 25, 0xb0, 0), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 23, 0x31, 0), "AMD Zen 2");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 27, 0x00, 0), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 0x8f, 8), "Intel Sapphire Rapids");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 0xcf, 2), "Intel Emerald Rapids");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 0xad, 1), "Intel Granite Rapids");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 0x6a, 6), "Intel Ice Lake-SP");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 85, 4), "Intel Skylake-SP");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 85, 7), "Intel Cascade Lake");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 85, 11), "Intel Cooper Lake");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 85, 8), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 6, 85, -1), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation("GenuineIntel", 19, 1, 0), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation("AuthenticAMD", 6, 0x8f, 0), "unknown"); /* vendor */
    CHECK_STR_EQ(stoke_cpu_generation("", -1, -1, -1), "unknown");
    CHECK_STR_EQ(stoke_cpu_generation(NULL, 26, 2, 1), "unknown");

    stoke_cpu_info c;
    CHECK_INT_EQ(stoke_cpu_probe(SYSROOT "/cpu-zen5", &c), STOKE_OK);
    CHECK_STR_EQ(c.vendor, "AuthenticAMD");
    CHECK_INT_EQ(c.family, 26);
    CHECK_INT_EQ(c.model_number, 2); /* not the "model name" line's */
    CHECK_INT_EQ(c.stepping, 1);
    CHECK_STR_EQ(c.model, "AMD EPYC 9B45");
    CHECK_STR_EQ(stoke_cpu_generation(c.vendor, c.family, c.model_number, c.stepping), "AMD Zen 5");
    /* a cpuinfo without those lines says unknown, not family 0 */
    CHECK_INT_EQ(stoke_cpu_probe(SYSROOT "/cpu-zen4", &c), STOKE_OK);
    CHECK_INT_EQ(c.family, -1);
    CHECK_STR_EQ(stoke_cpu_generation(c.vendor, c.family, c.model_number, c.stepping), "unknown");
}

/* The instruction-set cap on a recorded tree: it is applied only when asked
 * (stoke_cpu_apply_isa_cap), hides by oneDNN's levels, and only ever lowers. */
static void test_isa_cap(void)
{
    stoke_cpu_info c;
    CHECK_INT_EQ(stoke_cpu_probe(SYSROOT "/cpu-spr-amx", &c), STOKE_OK);
    CHECK_INT_EQ(c.isa_cap, STOKE_CPU_ISA_ALL);
    uint32_t all = c.simd;
    char names[256];
    CHECK_STR_EQ(stoke_simd_names(all, names, sizeof names),
                 "sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 "
                 "avx512_fp16 amx_tile amx_bf16 amx_int8 f16c");
    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_ALL);
    CHECK_INT_EQ(c.simd, all);
    CHECK_INT_EQ(c.simd_hidden, 0);
    CHECK_INT_EQ(c.isa_cap, STOKE_CPU_ISA_ALL);

    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_AVX512_CORE_BF16);
    CHECK_STR_EQ(stoke_simd_names(c.simd_hidden, names, sizeof names),
                 "avx512_fp16 amx_tile amx_bf16 amx_int8");
    CHECK_INT_EQ(c.simd | c.simd_hidden, all);
    CHECK_INT_EQ(c.isa_cap, STOKE_CPU_ISA_AVX512_CORE_BF16);
    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_AVX512_CORE_VNNI); /* lower: hides more */
    CHECK(!(c.simd & STOKE_SIMD_AVX512_BF16) && (c.simd & STOKE_SIMD_AVX512_VNNI));
    CHECK_INT_EQ(c.isa_cap, STOKE_CPU_ISA_AVX512_CORE_VNNI);
    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_AVX512_CORE_AMX); /* higher: nothing back */
    CHECK(!(c.simd & STOKE_SIMD_AVX512_BF16));
    CHECK_INT_EQ(c.isa_cap, STOKE_CPU_ISA_AVX512_CORE_VNNI);
    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_AVX512_CORE);
    CHECK_STR_EQ(stoke_simd_names(c.simd, names, sizeof names),
                 "sse4_2 avx avx2 fma avx512f avx512bw avx512vl f16c");
    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_AVX2);
    CHECK_STR_EQ(stoke_simd_names(c.simd, names, sizeof names), "sse4_2 avx avx2 fma f16c");
    stoke_cpu_apply_isa_cap(&c, STOKE_CPU_ISA_SSE41); /* SSE4.2 is above oneDNN's sse41 */
    CHECK_INT_EQ(c.simd, 0);
    CHECK_INT_EQ(c.simd_hidden, all);
    CHECK_INT_EQ(c.isa_cap, STOKE_CPU_ISA_SSE41);

    /* every flag the probe knows has a level, so no cap lets an unknown one through */
    char every[512];
    stoke_simd_names(~0u, every, sizeof every);
    for (char *save = NULL, *t = strtok_r(every, " ", &save); t; t = strtok_r(NULL, " ", &save))
        CHECK_MSG(stoke_isa_level_of_flag(t) < STOKE_CPU_ISA_ALL, "%s has no level", t);
}

/* True if /proc/cpuinfo's first flags line names `flag`: an independent reading to
 * compare the probe with. */
static bool cpuinfo_has(const char *flag)
{
    static char buf[1 << 16];
    if (stoke_read_file("/proc/cpuinfo", buf, sizeof buf) < 0)
        return false;
    char *line = strstr(buf, "\nflags");
    if (!line)
        return false;
    char *end = strchr(line + 1, '\n');
    if (end)
        *end = '\0';
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", flag);
    size_t n = strlen(line);
    line[n] = ' '; /* so the last flag also has a trailing space */
    line[n + 1] = '\0';
    return strstr(line, pat) != NULL;
}

static void test_this_machine(void)
{
    stoke_cpu_info c;
    CHECK_INT_EQ(stoke_cpu_probe(NULL, &c), STOKE_OK);
    CHECK_INT_EQ(c.logical_cpus, sysconf(_SC_NPROCESSORS_ONLN));
    CHECK(c.usable_cpus >= 1 && c.usable_cpus <= c.logical_cpus);
    CHECK(c.available_cpus >= 1 && c.available_cpus <= c.usable_cpus);
    CHECK(c.quota_cpus >= 0);
    CHECK(c.physical_cores >= 1 && c.physical_cores <= c.logical_cpus);
    CHECK(c.sockets >= 1 && c.sockets <= c.physical_cores);
    CHECK(c.numa_nodes >= 1);
    CHECK(c.max_mhz > 0);
    static const struct {
        const char *flag;
        uint32_t bit;
    } flags[] = {{"avx2", STOKE_SIMD_AVX2},
                 {"avx512f", STOKE_SIMD_AVX512F},
                 {"avx512_bf16", STOKE_SIMD_AVX512_BF16},
                 {"amx_bf16", STOKE_SIMD_AMX_BF16}};
    /* what cpuinfo lists is either shown or hidden by the environment's ISA cap */
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        CHECK_MSG(cpuinfo_has(flags[i].flag) == !!((c.simd | c.simd_hidden) & flags[i].bit), "%s",
                  flags[i].flag);
    CHECK_INT_EQ(c.simd & c.simd_hidden, 0);
    stoke_cpu_isa cap;
    CHECK_INT_EQ(stoke_max_cpu_isa(&cap), STOKE_OK);
    CHECK_INT_EQ(c.isa_cap, cap);

    stoke_mem_info m;
    CHECK_INT_EQ(stoke_mem_probe("", &m), STOKE_OK);
    struct sysinfo si;
    CHECK(sysinfo(&si) == 0);
    uint64_t total = (uint64_t)si.totalram * si.mem_unit;
    /* Both read the same kernel counter; meminfo rounds to kB. */
    CHECK_MSG(m.total_bytes <= total + 1024 && m.total_bytes + 1024 >= total, "%llu vs %llu",
              (unsigned long long)m.total_bytes, (unsigned long long)total);
    CHECK(m.available_bytes > 0 && m.available_bytes <= m.total_bytes);
    CHECK(m.available_bytes <= m.meminfo_available_bytes);
}

static void test_real_disk(void)
{
    stoke_disk_info d;
    CHECK_INT_EQ(stoke_disk_probe("/dev/shm", &d), STOKE_OK);
    CHECK_STR_EQ(d.mount_point, "/dev/shm");
    CHECK_STR_EQ(d.fs_type, "tmpfs");
    CHECK_INT_EQ(d.kind, STOKE_DISK_MEMORY);
    CHECK_STR_EQ(stoke_disk_kind_name(d.kind), "memory");
    CHECK_STR_CONTAINS(d.reason, "tmpfs");

    /* A file below the mount point, reached through a name with a space. */
    char dir[] = "/dev/shm/stoke test XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_INT_EQ(stoke_disk_probe(dir, &d), STOKE_OK);
    CHECK_STR_EQ(d.mount_point, "/dev/shm");
    rmdir(dir);

    CHECK_INT_EQ(stoke_disk_probe("/", &d), STOKE_OK);
    CHECK_STR_EQ(d.mount_point, "/");
    CHECK(d.fs_type[0] != '\0');
    CHECK(d.reason[0] != '\0');

    /* proc sits on an anonymous device: no disk to name, and the reason says so. */
    CHECK_INT_EQ(stoke_disk_probe("/proc/self", &d), STOKE_OK);
    CHECK_STR_EQ(d.mount_point, "/proc");
    CHECK_INT_EQ(d.kind, STOKE_DISK_UNKNOWN);
    CHECK_STR_CONTAINS(d.reason, "anonymous");

    CHECK_INT_EQ(stoke_disk_probe("/nonexistent/stoke/data", &d), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent/stoke/data");
}

/* Mount points under a fresh directory, one with an escaped space, each on a device
 * of the blockdev tree or of a kind decided by its type. */
static void test_recorded_mounts(void)
{
    char base[] = "/tmp/stoke-mounts-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    static const char *dirs[] = {"hdd", "nvme", "my data", "nfs",        "ovl",
                                 "dm",  "gone", "hddx",    "my data/sub"};
    char p[512];
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", base, dirs[i]);
        CHECK(mkdir(p, 0755) == 0);
    }
    char mi[600];
    snprintf(mi, sizeof mi, "%s/mountinfo", base);
    FILE *f = fopen(mi, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n");
    fprintf(f, "2 1 8:2 / %s/hdd rw,relatime - ext4 /dev/sda2 rw\n", base);
    fprintf(f, "3 1 259:1 / %s/nvme rw shared:1 master:2 - xfs /dev/nvme0n1p1 rw\n", base);
    fprintf(f, "4 1 0:40 / %s/my\\040data rw - tmpfs tmp\\040fs rw\n", base);
    fprintf(f, "5 1 0:41 / %s/nfs rw - nfs4 server:/export rw\n", base);
    fprintf(f, "6 1 0:42 / %s/ovl rw - overlay overlay rw,lowerdir=/a\n", base);
    fprintf(f, "7 1 253:0 / %s/dm rw - ext4 /dev/mapper/vg-data rw\n", base);
    fprintf(f, "8 1 7:9 / %s/gone rw - ext4 /dev/loop9 rw\n", base);
    /* A second mount on the same point hides the first. */
    fprintf(f, "9 1 0:43 / %s/nvme rw - ramfs none rw\n", base);
    fclose(f);
    const char *sys = SYSROOT "/blockdev";
    stoke_disk_info d;
    char want[600];

    snprintf(p, sizeof p, "%s/hdd", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_STR_EQ(d.mount_point, p);
    CHECK_STR_EQ(d.device, "/dev/sda2");
    CHECK_INT_EQ(d.kind, STOKE_DISK_ROTATIONAL);
    CHECK_STR_CONTAINS(d.reason, "sda (8:2): queue/rotational is 1");

    /* "hddx" must not be taken as inside "hdd". */
    snprintf(p, sizeof p, "%s/hddx", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_STR_EQ(d.mount_point, "/");

    snprintf(p, sizeof p, "%s/nvme", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_STR_EQ(d.fs_type, "ramfs");
    CHECK_INT_EQ(d.kind, STOKE_DISK_MEMORY);

    snprintf(p, sizeof p, "%s/my data/sub", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    snprintf(want, sizeof want, "%s/my data", base);
    CHECK_STR_EQ(d.mount_point, want);
    CHECK_STR_EQ(d.device, "tmp fs");
    CHECK_INT_EQ(d.kind, STOKE_DISK_MEMORY);

    snprintf(p, sizeof p, "%s/nfs", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_INT_EQ(d.kind, STOKE_DISK_NETWORK);
    CHECK_STR_CONTAINS(d.reason, "nfs4");

    snprintf(p, sizeof p, "%s/ovl", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_INT_EQ(d.kind, STOKE_DISK_OVERLAY);

    snprintf(p, sizeof p, "%s/dm", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_INT_EQ(d.kind, STOKE_DISK_SSD);
    CHECK_STR_CONTAINS(d.reason, "dm-0 (253:0): queue/rotational is 0");

    snprintf(p, sizeof p, "%s/gone", base);
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, p, &d), STOKE_OK);
    CHECK_INT_EQ(d.kind, STOKE_DISK_UNKNOWN);
    CHECK_STR_CONTAINS(d.reason, "7:9");

    /* The SSD partition, through a mountinfo where nothing hides it. */
    f = fopen(mi, "w");
    if (f) {
        fprintf(f, "3 1 259:1 / %s rw - xfs /dev/nvme0n1p1 rw\n", base);
        fclose(f);
    }
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, base, &d), STOKE_OK);
    CHECK_INT_EQ(d.kind, STOKE_DISK_SSD);
    CHECK_STR_CONTAINS(d.reason, "nvme0n1 (259:1)");
    CHECK_INT_EQ(stoke_disk_probe_from(mi, sys, "/", &d), STOKE_ERR_NOTFOUND);

    unlink(mi);
    for (size_t i = sizeof dirs / sizeof dirs[0]; i-- > 0;) {
        snprintf(p, sizeof p, "%s/%s", base, dirs[i]);
        rmdir(p);
    }
    rmdir(base);
}

static void test_bus_ids(void)
{
    CHECK(stoke_pci_bus_id_equal("00000000:3B:00.0", "0000:3b:00.0"));
    CHECK(stoke_pci_bus_id_equal("00000001:01:00.0", "0001:01:00.0"));
    CHECK(stoke_pci_bus_id_equal("01:00.0", "0000:01:00.0")); /* legacy short form */
    CHECK(!stoke_pci_bus_id_equal("00000000:3B:00.0", "0000:3c:00.0"));
    CHECK(!stoke_pci_bus_id_equal("00000000:3B:00.0", "0000:3b:00.1"));
    CHECK(!stoke_pci_bus_id_equal("00000001:3B:00.0", "0000:3b:00.0"));
    CHECK(!stoke_pci_bus_id_equal("", "0000:3b:00.0"));
    CHECK(!stoke_pci_bus_id_equal("0000:3b:00.0x", "0000:3b:00.0"));
    CHECK(!stoke_pci_bus_id_equal(NULL, "0000:3b:00.0"));
}

static void test_machine_without_gpu(void)
{
    setenv("STOKE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    static stoke_machine m;
    CHECK_INT_EQ(stoke_machine_probe(&m, NULL), STOKE_OK);
    CHECK_INT_EQ(m.gpu_count, 0);
    CHECK_MSG(strncmp(m.gpu_note, "no NVIDIA GPU: ", 15) == 0, "%s", m.gpu_note);
    CHECK(!m.have_disk);
    CHECK(m.cpu.logical_cpus >= 1);
    CHECK(m.mem.total_bytes > 0);
    /* The linked OpenBLAS names its core and build (the core's fit is test_tune's). */
    CHECK(m.openblas.valid);
    CHECK(m.openblas.core[0] != '\0');
    CHECK_STR_CONTAINS(m.openblas.config, "OpenBLAS");

    CHECK_INT_EQ(stoke_machine_probe(&m, "/dev/shm"), STOKE_OK);
    CHECK(m.have_disk);
    CHECK_STR_EQ(m.data_path, "/dev/shm");
    CHECK_INT_EQ(m.disk.kind, STOKE_DISK_MEMORY);

    CHECK_INT_EQ(stoke_machine_probe(&m, "/nonexistent/data"), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent/data");
    unsetenv("STOKE_NVML_LIBRARY");
}

int main(void)
{
    test_twosocket();
    test_nosysfs();
    test_cgroup_memory();
    test_cpu_quota();
    test_cpu_load();
    test_simd_names();
    test_isa_cap();
    test_generation();
    test_this_machine();
    test_real_disk();
    test_recorded_mounts();
    test_bus_ids();
    test_machine_without_gpu();
    return CHECK_DONE();
}
