/* cpu.c - CPU topology, caches, SIMD features, the cgroup CPU quota and memory from
 * /proc and /sys. */
#include "stoke/hw.h"

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/isa.h"
#include "core/parse.h"

/* Enough for the kernel's CPU list syntax ("0-3,8-11") and for the CPU indices a
 * recorded tree uses; larger machines are counted but not walked one by one. */
#define MAX_CPUS 4096

static void join(char *out, size_t size, const char *root, const char *path)
{
    snprintf(out, size, "%s%s", root ? root : "", path);
}

/* Parses a kernel CPU/node list ("0-3,8,10-11") into set[] (true for members below
 * cap); returns how many members it names, or -1 if it is malformed. */
static int parse_list(const char *s, bool *set, int cap)
{
    int count = 0;
    while (*s && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s || a < 0)
            return -1;
        long b = a;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a)
                return -1;
            s = end;
        }
        for (long i = a; i <= b; i++) {
            if (set && i < cap)
                set[i] = true;
            count++;
        }
        if (*s == ',')
            s++;
        else if (*s && *s != '\n')
            return -1;
    }
    return count;
}

/* "48K", "2048K", "32M" as sysfs writes cache sizes; 0 if unreadable. */
static uint64_t parse_size(const char *s)
{
    const char *end;
    uint64_t v;
    if (!stoke_parse_u64_prefix(s, 10, &v, &end))
        return 0;
    switch (*end) {
    case 'K': return (uint64_t)v << 10;
    case 'M': return (uint64_t)v << 20;
    case 'G': return (uint64_t)v << 30;
    default: return (uint64_t)v;
    }
}

static const struct {
    const char *flag;
    uint32_t bit;
} simd_flags[] = {
    {"sse4_2", STOKE_SIMD_SSE42},
    {"avx", STOKE_SIMD_AVX},
    {"avx2", STOKE_SIMD_AVX2},
    {"fma", STOKE_SIMD_FMA},
    {"avx512f", STOKE_SIMD_AVX512F},
    {"avx512bw", STOKE_SIMD_AVX512BW},
    {"avx512vl", STOKE_SIMD_AVX512VL},
    {"avx512_vnni", STOKE_SIMD_AVX512_VNNI},
    {"avx512_bf16", STOKE_SIMD_AVX512_BF16},
    {"avx512_fp16", STOKE_SIMD_AVX512_FP16},
    {"amx_tile", STOKE_SIMD_AMX_TILE},
    {"amx_bf16", STOKE_SIMD_AMX_BF16},
    {"amx_int8", STOKE_SIMD_AMX_INT8},
    {"f16c", STOKE_SIMD_F16C},
};
#define N_SIMD_FLAGS (sizeof simd_flags / sizeof simd_flags[0])

static uint32_t parse_flags(const char *list)
{
    uint32_t bits = 0;
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, " \t\n");
        if (n == 0)
            break;
        for (size_t i = 0; i < N_SIMD_FLAGS; i++)
            if (strlen(simd_flags[i].flag) == n && memcmp(simd_flags[i].flag, p, n) == 0)
                bits |= simd_flags[i].bit;
        p += n;
    }
    return bits;
}

const char *stoke_simd_names(uint32_t simd, char *buf, size_t size)
{
    if (size == 0)
        return buf;
    buf[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < N_SIMD_FLAGS; i++) {
        if (!(simd & simd_flags[i].bit))
            continue;
        int n = snprintf(buf + used, size - used, "%s%s", used ? " " : "", simd_flags[i].flag);
        if (n < 0 || (size_t)n >= size - used) {
            buf[used] = '\0'; /* whole names only */
            break;
        }
        used += (size_t)n;
    }
    return buf;
}

void stoke_cpu_apply_isa_cap(stoke_cpu_info *info, stoke_cpu_isa cap)
{
    if (cap >= STOKE_CPU_ISA_ALL)
        return;
    for (size_t i = 0; i < N_SIMD_FLAGS; i++) {
        uint32_t bit = simd_flags[i].bit;
        if ((info->simd & bit) && stoke_isa_level_of_flag(simd_flags[i].flag) > cap) {
            info->simd &= ~bit;
            info->simd_hidden |= bit;
        }
    }
    if (cap < info->isa_cap)
        info->isa_cap = cap;
}

/* Generations by vendor, family and model range, after the Linux kernel's
 * arch/x86/kernel/cpu/amd.c (the Zen feature bits: bsp_init_amd / init_amd_zen*) and
 * arch/x86/include/asm/intel-family.h. A family or model not listed is "unknown": a
 * table that guessed from the nearest entry named a Zen 5 "Zen 4" and a figure
 * measured on one generation read as this machine's. Intel's 0x55 is three
 * generations, told apart by stepping (intel-family.h's comments). */
static const struct {
    const char *vendor;
    int family, model_lo, model_hi, stepping_lo, stepping_hi;
    const char *name;
} generations[] = {
    {"AuthenticAMD", 0x17, 0x00, 0x2f, 0, 255, "AMD Zen / Zen+"},
    {"AuthenticAMD", 0x17, 0x50, 0x5f, 0, 255, "AMD Zen / Zen+"},
    {"AuthenticAMD", 0x17, 0x30, 0x4f, 0, 255, "AMD Zen 2"},
    {"AuthenticAMD", 0x17, 0x60, 0x7f, 0, 255, "AMD Zen 2"},
    {"AuthenticAMD", 0x17, 0x90, 0x91, 0, 255, "AMD Zen 2"},
    {"AuthenticAMD", 0x17, 0xa0, 0xaf, 0, 255, "AMD Zen 2"},
    {"AuthenticAMD", 0x19, 0x00, 0x0f, 0, 255, "AMD Zen 3"},
    {"AuthenticAMD", 0x19, 0x20, 0x5f, 0, 255, "AMD Zen 3"},
    {"AuthenticAMD", 0x19, 0x10, 0x1f, 0, 255, "AMD Zen 4"},
    {"AuthenticAMD", 0x19, 0x60, 0xaf, 0, 255, "AMD Zen 4"},
    {"AuthenticAMD", 0x1a, 0x00, 0x2f, 0, 255, "AMD Zen 5"},
    {"AuthenticAMD", 0x1a, 0x40, 0x4f, 0, 255, "AMD Zen 5"},
    {"AuthenticAMD", 0x1a, 0x60, 0x7f, 0, 255, "AMD Zen 5"},
    {"GenuineIntel", 6, 0x3f, 0x3f, 0, 255, "Intel Haswell-X"},
    {"GenuineIntel", 6, 0x3c, 0x3c, 0, 255, "Intel Haswell"},
    {"GenuineIntel", 6, 0x45, 0x46, 0, 255, "Intel Haswell"},
    {"GenuineIntel", 6, 0x4f, 0x4f, 0, 255, "Intel Broadwell-X"},
    {"GenuineIntel", 6, 0x56, 0x56, 0, 255, "Intel Broadwell-D"},
    {"GenuineIntel", 6, 0x3d, 0x3d, 0, 255, "Intel Broadwell"},
    {"GenuineIntel", 6, 0x47, 0x47, 0, 255, "Intel Broadwell"},
    {"GenuineIntel", 6, 0x4e, 0x4e, 0, 255, "Intel Skylake"},
    {"GenuineIntel", 6, 0x5e, 0x5e, 0, 255, "Intel Skylake"},
    {"GenuineIntel", 6, 0x55, 0x55, 0, 4, "Intel Skylake-SP"},
    {"GenuineIntel", 6, 0x55, 0x55, 5, 7, "Intel Cascade Lake"},
    {"GenuineIntel", 6, 0x55, 0x55, 10, 11, "Intel Cooper Lake"},
    {"GenuineIntel", 6, 0x8e, 0x8e, 0, 255, "Intel Kaby Lake / Coffee Lake"},
    {"GenuineIntel", 6, 0x9e, 0x9e, 0, 255, "Intel Kaby Lake / Coffee Lake"},
    {"GenuineIntel", 6, 0xa5, 0xa6, 0, 255, "Intel Comet Lake"},
    {"GenuineIntel", 6, 0x6a, 0x6a, 0, 255, "Intel Ice Lake-SP"},
    {"GenuineIntel", 6, 0x6c, 0x6c, 0, 255, "Intel Ice Lake-D"},
    {"GenuineIntel", 6, 0x7d, 0x7e, 0, 255, "Intel Ice Lake"},
    {"GenuineIntel", 6, 0x8c, 0x8d, 0, 255, "Intel Tiger Lake"},
    {"GenuineIntel", 6, 0xa7, 0xa7, 0, 255, "Intel Rocket Lake"},
    {"GenuineIntel", 6, 0x8f, 0x8f, 0, 255, "Intel Sapphire Rapids"},
    {"GenuineIntel", 6, 0xcf, 0xcf, 0, 255, "Intel Emerald Rapids"},
    {"GenuineIntel", 6, 0xad, 0xae, 0, 255, "Intel Granite Rapids"},
    {"GenuineIntel", 6, 0xaf, 0xaf, 0, 255, "Intel Sierra Forest"},
    {"GenuineIntel", 6, 0x97, 0x97, 0, 255, "Intel Alder Lake"},
    {"GenuineIntel", 6, 0x9a, 0x9a, 0, 255, "Intel Alder Lake"},
    {"GenuineIntel", 6, 0xb7, 0xb7, 0, 255, "Intel Raptor Lake"},
    {"GenuineIntel", 6, 0xba, 0xba, 0, 255, "Intel Raptor Lake"},
    {"GenuineIntel", 6, 0xbf, 0xbf, 0, 255, "Intel Raptor Lake"},
    {"GenuineIntel", 6, 0xaa, 0xaa, 0, 255, "Intel Meteor Lake"},
    {"GenuineIntel", 6, 0xac, 0xac, 0, 255, "Intel Meteor Lake"},
    {"GenuineIntel", 6, 0xc5, 0xc6, 0, 255, "Intel Arrow Lake"},
    {"GenuineIntel", 6, 0xbd, 0xbd, 0, 255, "Intel Lunar Lake"},
};

const char *stoke_cpu_generation(const char *vendor, int family, int model, int stepping)
{
    if (!vendor)
        return "unknown";
    for (size_t i = 0; i < sizeof generations / sizeof generations[0]; i++) {
        if (strcmp(vendor, generations[i].vendor) || family != generations[i].family ||
            model < generations[i].model_lo || model > generations[i].model_hi)
            continue;
        if (generations[i].stepping_lo == 0 && generations[i].stepping_hi == 255)
            return generations[i].name;
        if (stepping >= generations[i].stepping_lo && stepping <= generations[i].stepping_hi)
            return generations[i].name;
    }
    return "unknown";
}

/* A (package, core) pair seen among online CPUs, for counting physical cores. */
typedef struct core_id {
    long package, core;
} core_id;

typedef struct topo {
    core_id *cores;
    int n_cores, cap_cores;
    long *packages;
    int n_packages, cap_packages;
} topo;

static bool topo_add(topo *t, long package, long core)
{
    bool have_pkg = false;
    for (int i = 0; i < t->n_packages; i++)
        have_pkg |= t->packages[i] == package;
    if (!have_pkg) {
        if (t->n_packages == t->cap_packages) {
            int cap = t->cap_packages ? 2 * t->cap_packages : 8;
            long *p = realloc(t->packages, (size_t)cap * sizeof *p);
            if (!p)
                return false;
            t->packages = p;
            t->cap_packages = cap;
        }
        t->packages[t->n_packages++] = package;
    }
    for (int i = 0; i < t->n_cores; i++)
        if (t->cores[i].package == package && t->cores[i].core == core)
            return true;
    if (t->n_cores == t->cap_cores) {
        int cap = t->cap_cores ? 2 * t->cap_cores : 16;
        core_id *c = realloc(t->cores, (size_t)cap * sizeof *c);
        if (!c)
            return false;
        t->cores = c;
        t->cap_cores = cap;
    }
    t->cores[t->n_cores++] = (core_id){package, core};
    return true;
}

static void topo_free(topo *t)
{
    free(t->cores);
    free(t->packages);
}

/* Value after the colon of a "key\t: value" cpuinfo line, or NULL if the line is for
 * another key. */
static const char *cpuinfo_value(const char *line, const char *key)
{
    size_t n = strlen(key);
    if (strncmp(line, key, n) != 0 || (line[n] != ' ' && line[n] != '\t' && line[n] != ':'))
        return NULL;
    const char *colon = strchr(line + n, ':');
    if (!colon)
        return NULL;
    colon++;
    while (*colon == ' ')
        colon++;
    return colon;
}

/* Reads the facts /proc/cpuinfo holds; the topology it gives is only used when
 * sysfs has none (some containers and old kernels). */
static stoke_status read_cpuinfo(const char *root, stoke_cpu_info *out, int *processors, topo *t,
                                 double *max_cpuinfo_mhz)
{
    char path[1024];
    join(path, sizeof path, root, "/proc/cpuinfo");
    FILE *f = fopen(path, "re");
    if (!f)
        return stoke_fail(STOKE_ERR_IO, "%s: cannot open: %m", path);
    char *line = NULL;
    size_t cap = 0;
    long package = -1, core = -1;
    bool flags_seen = false;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        const char *v;
        if (line[0] == '\0') {
            /* A blank line ends one processor's block. */
            if (package >= 0 && core >= 0 && !topo_add(t, package, core)) {
                free(line);
                fclose(f);
                return stoke_fail(STOKE_ERR_NOMEM, "cpu probe: out of memory");
            }
            package = core = -1;
        } else if (cpuinfo_value(line, "processor")) {
            (*processors)++;
        } else if ((v = cpuinfo_value(line, "model name")) && !out->model[0]) {
            snprintf(out->model, sizeof out->model, "%s", v);
        } else if ((v = cpuinfo_value(line, "vendor_id")) && !out->vendor[0]) {
            snprintf(out->vendor, sizeof out->vendor, "%s", v);
        } else if ((v = cpuinfo_value(line, "cpu family")) && out->family < 0) {
            out->family = (int)strtol(v, NULL, 10);
        } else if (strncmp(line, "model name", 10) && (v = cpuinfo_value(line, "model")) &&
                   out->model_number < 0) {
            out->model_number = (int)strtol(v, NULL, 10);
        } else if ((v = cpuinfo_value(line, "stepping")) && out->stepping < 0) {
            out->stepping = (int)strtol(v, NULL, 10);
        } else if ((v = cpuinfo_value(line, "physical id"))) {
            package = strtol(v, NULL, 10);
        } else if ((v = cpuinfo_value(line, "core id"))) {
            core = strtol(v, NULL, 10);
        } else if ((v = cpuinfo_value(line, "cpu MHz"))) {
            double mhz = strtod(v, NULL);
            if (mhz > *max_cpuinfo_mhz)
                *max_cpuinfo_mhz = mhz;
        } else if (!flags_seen && (v = cpuinfo_value(line, "flags"))) {
            /* The first processor's flags: the kernel reports the common set. */
            out->simd = parse_flags(v);
            flags_seen = true;
        }
    }
    if (package >= 0 && core >= 0)
        topo_add(t, package, core);
    free(line);
    fclose(f);
    return STOKE_OK;
}

static void read_caches(const char *root, stoke_cpu_info *out)
{
    for (int i = 0; i < 16; i++) {
        char path[1024], level[16], type[32], size[32];
        char rel[128];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu0/cache/index%d/", i);
        join(path, sizeof path, root, rel);
        size_t base = strlen(path);
        snprintf(path + base, sizeof path - base, "level");
        if (stoke_read_line(path, level, sizeof level) < 0)
            continue; /* indices need not be contiguous */
        snprintf(path + base, sizeof path - base, "type");
        if (stoke_read_line(path, type, sizeof type) < 0)
            continue;
        snprintf(path + base, sizeof path - base, "size");
        if (stoke_read_line(path, size, sizeof size) < 0)
            continue;
        uint64_t bytes = parse_size(size);
        int lv = atoi(level);
        if (lv == 1 && strcmp(type, "Data") == 0)
            out->l1d_bytes = bytes;
        else if (lv == 2 && strcmp(type, "Instruction") != 0)
            out->l2_bytes = bytes;
        else if (lv == 3 && strcmp(type, "Instruction") != 0)
            out->l3_bytes = bytes;
    }
}

static int count_usable(const char *root, int logical)
{
    /* A recorded tree describes another machine: this process's affinity says
     * nothing about it, so every online CPU counts as usable there. */
    if (root && *root)
        return logical;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return logical;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : logical;
}

static void cg_cpu_quota(const char *root, stoke_cpu_info *out);

stoke_status stoke_cpu_probe(const char *root, stoke_cpu_info *out)
{
    memset(out, 0, sizeof *out);
    out->isa_cap = STOKE_CPU_ISA_ALL;
    out->family = out->model_number = out->stepping = -1;
    stoke_cpu_isa cap = STOKE_CPU_ISA_ALL;
    if ((!root || !*root) && stoke_max_cpu_isa(&cap) != STOKE_OK)
        return STOKE_ERR_ARG; /* the cap's message stands */
    topo from_cpuinfo = {0}, from_sysfs = {0};
    int processors = 0;
    double cpuinfo_mhz = 0;
    stoke_status s = read_cpuinfo(root, out, &processors, &from_cpuinfo, &cpuinfo_mhz);
    if (s != STOKE_OK) {
        topo_free(&from_cpuinfo);
        return s;
    }

    char path[1024], buf[4096];
    bool *online = calloc(MAX_CPUS, sizeof *online);
    if (!online) {
        topo_free(&from_cpuinfo);
        return stoke_fail(STOKE_ERR_NOMEM, "cpu probe: out of memory");
    }
    join(path, sizeof path, root, "/sys/devices/system/cpu/online");
    int n_online = -1;
    if (stoke_read_line(path, buf, sizeof buf) > 0)
        n_online = parse_list(buf, online, MAX_CPUS);
    if (n_online <= 0) {
        /* No sysfs list: number the processors cpuinfo showed. */
        n_online = processors;
        for (int i = 0; i < processors && i < MAX_CPUS; i++)
            online[i] = true;
    }
    out->logical_cpus = n_online;
    out->usable_cpus = count_usable(root, n_online);

    double max_khz = 0;
    bool topo_ok = true;
    for (int i = 0; i < MAX_CPUS; i++) {
        if (!online[i])
            continue;
        char rel[128];
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%d/topology/core_id", i);
        join(path, sizeof path, root, rel);
        long core = -1, package = -1;
        if (stoke_read_line(path, buf, sizeof buf) > 0)
            core = strtol(buf, NULL, 10);
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", i);
        join(path, sizeof path, root, rel);
        if (stoke_read_line(path, buf, sizeof buf) > 0)
            package = strtol(buf, NULL, 10);
        if (core < 0 || package < 0 || !topo_add(&from_sysfs, package, core))
            topo_ok = false;
        snprintf(rel, sizeof rel, "/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", i);
        join(path, sizeof path, root, rel);
        if (stoke_read_line(path, buf, sizeof buf) > 0) {
            double khz = strtod(buf, NULL);
            if (khz > max_khz)
                max_khz = khz;
        }
    }
    free(online);
    const topo *t = topo_ok && from_sysfs.n_cores > 0 ? &from_sysfs : &from_cpuinfo;
    out->physical_cores = t->n_cores;
    out->sockets = t->n_packages;
    topo_free(&from_sysfs);
    topo_free(&from_cpuinfo);

    /* cpufreq's maximum is the rated turbo; cpuinfo's "cpu MHz" is only the current
     * clock, so it is the fallback (virtual machines often have no cpufreq). */
    out->max_mhz = max_khz > 0 ? max_khz / 1000.0 : cpuinfo_mhz;

    join(path, sizeof path, root, "/sys/devices/system/node/online");
    int nodes = -1;
    if (stoke_read_line(path, buf, sizeof buf) > 0)
        nodes = parse_list(buf, NULL, 0);
    out->numa_nodes = nodes > 0 ? nodes : 1;

    read_caches(root, out);
    cg_cpu_quota(root, out);
    stoke_cpu_apply_isa_cap(out, cap);
    return STOKE_OK;
}

/* A cgroup memory value: bytes, or 0 for none ("max", v1's near-2^63 "unlimited"). */
static uint64_t cg_value(const char *path)
{
    char buf[64];
    if (stoke_read_line(path, buf, sizeof buf) <= 0)
        return 0;
    uint64_t v;
    if (!stoke_parse_u64_prefix(buf, 10, &v, NULL) || v >= (1ull << 62))
        return 0;
    return (uint64_t)v;
}

/* Where one controller's cgroup of this process lives: the mount (without the root)
 * and the cgroup's path under it. */
typedef struct cg_place {
    char mount[64]; /* "/sys/fs/cgroup" (v2) or the v1 controller's mount */
    char rel[512];  /* "/user.slice/app.scope" */
    bool v1;
} cg_place;

/* Finds `controller`'s cgroup in /proc/self/cgroup: v2's "0::/path" (under the unified
 * mount) or v1's "N:ctrl,...:/path" whose comma-separated list names it (a v1 line wins:
 * on a hybrid system the controller is v1's). The v1 mount is the first of v1_mounts
 * that exists under root, else the last. False when neither line is there. */
static bool cg_find(const char *root, const char *controller, const char *const *v1_mounts,
                    int n_mounts, cg_place *out)
{
    char path[1024], buf[4096];
    memset(out, 0, sizeof *out);
    join(path, sizeof path, root, "/proc/self/cgroup");
    if (stoke_read_file(path, buf, sizeof buf) < 0)
        return false;
    size_t clen = strlen(controller);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2) {
            size_t n = (size_t)(c2 - c1 - 1);
            bool v2 = !strncmp(line, "0:", 2) && n == 0;
            bool v1 = false;
            for (char *t = c1 + 1; !v2 && t < c2;) { /* comma-separated controllers */
                char *e = memchr(t, ',', (size_t)(c2 - t));
                size_t k = (size_t)((e ? e : c2) - t);
                v1 |= k == clen && !strncmp(t, controller, clen);
                t += k + 1;
            }
            if (v1 || (v2 && !out->mount[0])) {
                snprintf(out->rel, sizeof out->rel, "%s", c2 + 1);
                out->v1 = v1;
                if (!v1) {
                    snprintf(out->mount, sizeof out->mount, "/sys/fs/cgroup");
                } else {
                    for (int i = 0; i < n_mounts; i++) {
                        snprintf(out->mount, sizeof out->mount, "%s", v1_mounts[i]);
                        join(path, sizeof path, root, v1_mounts[i]);
                        if (access(path, F_OK) == 0)
                            break;
                    }
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return out->mount[0] && out->rel[0] == '/';
}

/* Steps p->rel up to its parent: "/a/b" -> "/a" -> "/"; false at "/". Inside a cgroup
 * namespace the path may not exist under the mount, and the walk up to the mount
 * itself still finds the container's own settings. */
static bool cg_parent(cg_place *p)
{
    char *slash = strrchr(p->rel, '/');
    if (!slash || p->rel[1] == '\0')
        return false;
    if (slash == p->rel)
        p->rel[1] = '\0'; /* "/a" -> "/" */
    else
        *slash = '\0';
    return true;
}

/* The directory of p's cgroup under root, and the file `name` in it (without the
 * root into `shown` when given). */
static void cg_file(const char *root, const cg_place *p, const char *name, char *out, size_t size,
                    char *shown, size_t shown_size)
{
    const char *sep = p->rel[1] ? "/" : "";
    snprintf(out, size, "%s%s%s%s%s", root ? root : "", p->mount, p->rel, sep, name);
    if (shown)
        snprintf(shown, shown_size, "%s%s%s%s", p->mount, p->rel, sep, name);
}

/* The quota of one cgroup in CPUs, 0 for none or a malformed file. v2's cpu.max is
 * "max 100000" (none) or "150000 100000" (1.5 CPUs); v1's cpu.cfs_quota_us is -1 for
 * none, over cpu.cfs_period_us. */
static double cg_quota(const char *root, const cg_place *p, char *shown, size_t shown_size)
{
    char f[1700], buf[128];
    uint64_t quota, period;
    const char *end;
    if (!p->v1) {
        cg_file(root, p, "cpu.max", f, sizeof f, shown, shown_size);
        if (stoke_read_line(f, buf, sizeof buf) <= 0 ||
            !stoke_parse_u64_prefix(buf, 10, &quota, &end) || *end != ' ' ||
            !stoke_parse_u64(end + 1, &period))
            return 0; /* "max ..." or malformed */
    } else {
        cg_file(root, p, "cpu.cfs_period_us", f, sizeof f, NULL, 0);
        if (stoke_read_line(f, buf, sizeof buf) <= 0 || !stoke_parse_u64(buf, &period))
            return 0;
        cg_file(root, p, "cpu.cfs_quota_us", f, sizeof f, shown, shown_size);
        if (stoke_read_line(f, buf, sizeof buf) <= 0 || !stoke_parse_u64(buf, &quota))
            return 0; /* "-1" or malformed */
    }
    if (quota == 0 || period == 0)
        return 0;
    return (double)quota / (double)period;
}

/* The smallest CPU quota of this process's cgroup and its ancestors into
 * out->quota_cpus and quota_file; then available_cpus. */
static void cg_cpu_quota(const char *root, stoke_cpu_info *out)
{
    static const char *const mounts[] = {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"};
    cg_place p;
    if (cg_find(root, "cpu", mounts, 2, &p)) {
        do {
            char shown[sizeof out->quota_file];
            double q = cg_quota(root, &p, shown, sizeof shown);
            if (q > 0 && (out->quota_cpus == 0 || q < out->quota_cpus)) {
                out->quota_cpus = q;
                snprintf(out->quota_file, sizeof out->quota_file, "%s", shown);
            }
        } while (cg_parent(&p));
    }
    int n = out->usable_cpus;
    if (out->quota_cpus > 0) {
        double whole = ceil(out->quota_cpus - 1e-9);
        if (whole < n)
            n = (int)whole;
    }
    out->available_cpus = n > 0 ? n : 1;
}

/* The headroom under the memory limits of this process's cgroup and its ancestors,
 * the smallest limit - usage among those that set a limit. In a container MemAvailable
 * is the host's, and the cgroup's limit is what the OOM killer enforces. */
static void cg_headroom(const char *root, stoke_mem_info *out)
{
    static const char *const mounts[] = {"/sys/fs/cgroup/memory"};
    cg_place p;
    if (!cg_find(root, "memory", mounts, 1, &p))
        return;
    const char *lim = p.v1 ? "memory.limit_in_bytes" : "memory.max";
    const char *use = p.v1 ? "memory.usage_in_bytes" : "memory.current";
    uint64_t best = UINT64_MAX;
    do {
        char f[1700];
        cg_file(root, &p, lim, f, sizeof f, NULL, 0);
        uint64_t l = cg_value(f);
        if (l > 0) {
            cg_file(root, &p, use, f, sizeof f, NULL, 0);
            uint64_t u = cg_value(f), room = u < l ? l - u : 0;
            if (room < best) {
                best = room;
                out->cgroup_limit_bytes = l;
                out->cgroup_used_bytes = u;
            }
        }
    } while (cg_parent(&p));
    if (best != UINT64_MAX && (out->available_bytes == 0 || best < out->available_bytes))
        out->available_bytes = best ? best : 1; /* 0 would read as unknown */
}

stoke_status stoke_mem_probe(const char *root, stoke_mem_info *out)
{
    memset(out, 0, sizeof *out);
    char path[1024], buf[8192];
    join(path, sizeof path, root, "/proc/meminfo");
    if (stoke_read_file(path, buf, sizeof buf) < 0)
        return stoke_fail(STOKE_ERR_IO, "%s: cannot read: %m", path);
    bool have_total = false;
    for (char *line = buf; line && *line;) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
            out->total_bytes = (uint64_t)kb * 1024;
            have_total = true;
        } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            out->available_bytes = (uint64_t)kb * 1024;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    if (!have_total)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: no MemTotal line", path);
    out->meminfo_available_bytes = out->available_bytes;
    cg_headroom(root, out);
    return STOKE_OK;
}
