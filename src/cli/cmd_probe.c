/* cmd_probe.c - `stoke probe`: what the machine has and what stoke will do with it. */
#include "core/json.h"
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/hw.h"
#include "stoke/train.h" /* stoke_profiles_load */
#include "stoke/tune.h"

typedef struct probe_args {
    const char *data;
    bool json;
} probe_args;

static const cli_opt probe_opts[] = {
    {.name = "data",
     .type = CLI_TEXT,
     .off = offsetof(probe_args, data),
     .arg = "PATH",
     .min = 1,
     .want = "needs a path",
     .help = "also classify the filesystem holding PATH (memory, ssd,\nrotational, network, "
             "overlay)"},
    {.name = "json",
     .type = CLI_SWITCH,
     .off = offsetof(probe_args, json),
     .help = "print one JSON document instead (schema: docs/probe.md)"},
    {0}};

void cmd_probe_usage(void)
{
    cli_print_usage("usage: stoke probe", 19, (const cli_opt *[]){probe_opts, NULL}, NULL);
    puts("\n"
         "Prints the CPU, the kernels OpenBLAS chose for it, memory, NVIDIA GPUs and\n"
         "(with --data) the storage under PATH, then the settings stoke recommends for\n"
         "this machine, each with its reason.\n"
         "No GPU is a normal answer, not an error.\n"
         "\n"
         "options:");
    cli_print_options(probe_opts, 16);
    puts("  -h, --help    this help\n"
         "\n"
         "environment: STOKE_PROFILES names a hardware profile file to read instead of\n"
         "the built-in one (docs/profiles.md); STOKE_NVML_LIBRARY, STOKE_CUDART_LIBRARY\n"
         "name the NVML and CUDA runtime libraries to load instead of libnvidia-ml.so.1\n"
         "and libcudart.so;\n"
         "STOKE_MAX_CPU_ISA (sse41, avx2, avx512_core, ..., all) caps the instruction\n"
         "sets stoke uses, and the report shows the CPU as capped.");
}

/* Cache sizes come from sysfs in binary units; decimal "49.2 kB" for a 48K L1 would
 * read as a mistake. */
static const char *cache_text(uint64_t bytes, char *buf, size_t size)
{
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(buf, size, "%llu MiB", (unsigned long long)(bytes >> 20));
    else if (bytes >= (1u << 20))
        snprintf(buf, size, "%.1f MiB", (double)bytes / (1u << 20));
    else
        snprintf(buf, size, "%llu KiB", (unsigned long long)(bytes >> 10));
    return buf;
}

static const char *version_text(int v, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
    return buf;
}

static const char *rec_value_text(const stoke_rec *r, char *buf, size_t size)
{
    if (!r->known)
        return "unknown";
    switch (r->type) {
    case STOKE_REC_TEXT: snprintf(buf, size, "%s", r->text); break;
    case STOKE_REC_BOOL: snprintf(buf, size, "%s", r->number != 0 ? "on" : "off"); break;
    case STOKE_REC_COUNT: snprintf(buf, size, "%.0f", r->number); break;
    case STOKE_REC_FLOPS: stoke_format_flops(r->number, buf, size); break;
    }
    return buf;
}

#define ROW "  %-15s "

/* A fact about stoke itself, so the OpenBLAS section is read in proportion. */
static const char openblas_note[] =
    "stoke's training does not use OpenBLAS (its matrix products run on oneDNN, which "
    "picks kernels by the instructions the CPU reports); the fit matters to programs "
    "that load this library (numpy, Debian's torch)";

static void print_openblas(const stoke_machine *m)
{
    printf("\nOpenBLAS\n");
    if (!m->openblas.valid) {
        printf("  the linked OpenBLAS reported no core\n");
        return;
    }
    stoke_blas_check c;
    stoke_openblas_check(m->openblas.core, m->cpu.simd | m->cpu.simd_hidden, &c);
    if (c.core_isa)
        printf(ROW "%s (%s kernels)\n", "core", m->openblas.core, c.core_isa);
    else
        printf(ROW "%s\n", "core", m->openblas.core);
    printf(ROW "%s\n", "build", m->openblas.config[0] ? m->openblas.config : "unknown");
    if (c.fit == STOKE_BLAS_FIT_UNKNOWN)
        printf(ROW "%s\n", "fit", c.reason);
    else if (c.coretype)
        printf(ROW "%s: %s kernels on a CPU with %s; set OPENBLAS_CORETYPE=%s "
                   "(openblas_coretype below)\n",
               "fit", stoke_blas_fit_name(c.fit), c.core_isa, c.cpu_isa, c.coretype);
    else
        printf(ROW "%s: %s kernels on a CPU with %s\n", "fit", stoke_blas_fit_name(c.fit),
               c.core_isa, c.cpu_isa);
    printf(ROW "%s\n", "note", openblas_note);
}

/* The profile of device `dev` (a GPU's index in m->gpus, or STOKE_TUNE_CPU). */
static void print_profile(const stoke_machine *m, const stoke_profiles *p, int dev)
{
    stoke_profile_match pm;
    stoke_profile_match_device(p, m, dev, &pm);
    char label[16];
    if (dev == STOKE_TUNE_CPU)
        snprintf(label, sizeof label, "cpu");
    else
        snprintf(label, sizeof label, "gpu %d", m->gpus[dev].index);
    if (pm.how == STOKE_PROFILE_NONE) {
        printf("  %-6s none: %s\n", label, pm.why);
        return;
    }
    const stoke_profile *f = &pm.profile;
    if (pm.how == STOKE_PROFILE_CPU)
        printf("  %-6s %s: %s\n", label, f->name, pm.why);
    else
        printf("  %-6s %s, by %s: %s\n", label, f->name, stoke_profile_how_name(pm.how), pm.why);
    if (f->batch)
        printf("  %-6s batch %lld, for %s\n", "", (long long)f->batch, f->batch_for);
    else
        printf("  %-6s batch: none given (the memory fit decides)\n", "");
    char per[48] = "";
    if (f->workers_for_cores)
        snprintf(per, sizeof per, " for %d cores", f->workers_for_cores);
    printf("  %-6s loader: %d worker%s%s -> %d here; prefetch factor %d -> %d batches in flight\n",
           "", f->workers, f->workers == 1 ? "" : "s", per, pm.workers, f->prefetch_factor,
           pm.prefetch);
    printf("  %-6s precision %s, tf32 %s\n", "",
           f->precision_auto ? "auto (the rule)" : stoke_precision_name(f->precision),
           f->tf32 ? "on" : "off");
    printf("  %-6s source: %s: %s\n", "", f->source, f->note);
}

static void print_human(const stoke_machine *m, const stoke_recs *recs, const stoke_profiles *p)
{
    const stoke_cpu_info *c = &m->cpu;
    char a[64], b[64], d[64];
    printf("CPU\n");
    printf(ROW "%s\n", "model", c->model[0] ? c->model : "unknown");
    const char *gen = stoke_cpu_generation(c->vendor, c->family, c->model_number, c->stepping);
    if (c->family >= 0)
        printf(ROW "%s (%s family %d model %d)\n", "generation", gen,
               c->vendor[0] ? c->vendor : "unknown vendor", c->family, c->model_number);
    else
        printf(ROW "unknown (no cpu family in /proc/cpuinfo)\n", "generation");
    printf(ROW "%d physical, %d logical, %d usable by this process\n", "cores", c->physical_cores,
           c->logical_cpus, c->usable_cpus);
    if (c->quota_cpus > 0)
        printf(ROW "%.2f CPUs (%s)\n", "CPU quota", c->quota_cpus, c->quota_file);
    else
        printf(ROW "none\n", "CPU quota");
    printf(ROW "%d (the usable CPUs%s)\n", "available", c->available_cpus,
           c->quota_cpus > 0 ? " within the cgroup quota" : "");
    const stoke_cpu_load *ld = &m->load;
    if (ld->valid) {
        printf(ROW "other processes busy on %.1f CPUs, this one on %.1f; steal %.1f%%", "load",
               ld->others_cpus, ld->own_cpus, ld->steal_pct);
        if (ld->run_queue >= 0)
            printf(", run queue %d", ld->run_queue);
        printf(" (%.1f s)\n", ld->seconds);
    } else {
        printf(ROW "unknown (/proc/stat did not advance or could not be read)\n", "load");
    }
    printf(ROW "%d socket%s, %d NUMA node%s\n", "sockets", c->sockets, c->sockets == 1 ? "" : "s",
           c->numa_nodes, c->numa_nodes == 1 ? "" : "s");
    printf(ROW "L1d %s, L2 %s, L3 %s\n", "caches",
           c->l1d_bytes ? cache_text(c->l1d_bytes, a, sizeof a) : "unknown",
           c->l2_bytes ? cache_text(c->l2_bytes, b, sizeof b) : "unknown",
           c->l3_bytes ? cache_text(c->l3_bytes, d, sizeof d) : "unknown");
    char simd[256];
    stoke_simd_names(c->simd, simd, sizeof simd);
    printf(ROW "%s\n", "SIMD", simd[0] ? simd : "none known");
    if (c->isa_cap != STOKE_CPU_ISA_ALL) {
        stoke_simd_names(c->simd_hidden, simd, sizeof simd);
        printf(ROW "%s (STOKE_MAX_CPU_ISA): %s%s\n", "ISA cap", stoke_cpu_isa_name(c->isa_cap),
               simd[0] ? "hides " : "hides nothing this CPU has", simd);
    }
    if (c->max_mhz > 0)
        printf(ROW "%.0f MHz\n", "max clock", c->max_mhz);
    else
        printf(ROW "unknown\n", "max clock");

    print_openblas(m);

    printf("\nMemory\n");
    printf(ROW "%s\n", "total", stoke_format_bytes((double)m->mem.total_bytes, a, sizeof a));
    printf(ROW "%s%s\n", "available",
           m->mem.available_bytes ? stoke_format_bytes((double)m->mem.available_bytes, b, sizeof b)
                                  : "unknown",
           m->mem.available_bytes && m->mem.available_bytes < m->mem.meminfo_available_bytes
               ? " (under the cgroup's limit)"
               : "");
    if (m->mem.cgroup_limit_bytes) {
        char l[32], u[32];
        printf(ROW "%s, %s used\n", "cgroup limit",
               stoke_format_bytes((double)m->mem.cgroup_limit_bytes, l, sizeof l),
               stoke_format_bytes((double)m->mem.cgroup_used_bytes, u, sizeof u));
    }

    if (m->have_disk) {
        const stoke_disk_info *k = &m->disk;
        printf("\nStorage\n");
        printf(ROW "%s\n", "path", m->data_path);
        printf(ROW "%s\n", "mount point", k->mount_point);
        printf(ROW "%s on %s\n", "filesystem", k->fs_type, k->device);
        printf(ROW "%s\n", "kind", stoke_disk_kind_name(k->kind));
        printf(ROW "%s\n", "because", k->reason);
    }

    printf("\nGPUs\n");
    if (m->driver_version[0])
        printf(ROW "%s\n", "driver", m->driver_version);
    if (m->cuda_driver_version)
        printf(ROW "%s\n", "CUDA (driver)", version_text(m->cuda_driver_version, a, sizeof a));
    if (m->cuda_runtime_version)
        printf(ROW "%s\n", "CUDA runtime", version_text(m->cuda_runtime_version, a, sizeof a));
    if (m->gpu_count == 0)
        printf("  %s\n", m->gpu_note);
    for (int i = 0; i < m->gpu_count; i++) {
        const stoke_gpu_info *g = &m->gpus[i];
        const char *na = "not reported";
        printf("  GPU %d: %s\n", g->index, g->name);
        printf(ROW "%s\n", "  uuid", g->uuid[0] ? g->uuid : na);
        printf(ROW "%s\n", "  pci bus id",
               (g->valid & STOKE_GPU_HAS_PCI_BUS_ID) ? g->pci_bus_id : na);
        printf(ROW "%s\n", "  memory",
               (g->valid & STOKE_GPU_HAS_MEMORY)
                   ? stoke_format_bytes((double)g->memory_total_bytes, a, sizeof a)
                   : na);
        if (g->valid & STOKE_GPU_HAS_CC)
            printf(ROW "%d.%d\n", "  compute cap.", g->cc_major, g->cc_minor);
        else
            printf(ROW "%s\n", "  compute cap.", na);
        if (g->valid & STOKE_GPU_HAS_CUDA_INDEX)
            printf(ROW "cuda:%d\n", "  as device", g->cuda_index);
        else
            printf(ROW "%s\n", "  as device", "not reported (no CUDA runtime match)");
        if (g->valid & STOKE_GPU_HAS_SM_COUNT)
            printf(ROW "%d\n", "  SMs", g->sm_count);
        else
            printf(ROW "%s\n", "  SMs", "not reported (no CUDA runtime match)");
        if (g->valid & STOKE_GPU_HAS_POWER_LIMIT)
            printf(ROW "%.0f W\n", "  power limit", g->power_limit_mw / 1000.0);
        else
            printf(ROW "%s\n", "  power limit", na);
        if (g->valid & STOKE_GPU_HAS_MAX_SM_CLOCK)
            printf(ROW "%u MHz\n", "  max SM clock", g->max_sm_clock_mhz);
        else
            printf(ROW "%s\n", "  max SM clock", na);
        if (g->valid & STOKE_GPU_HAS_PCIE)
            printf(ROW "gen %u x%u\n", "  PCIe", g->pcie_gen, g->pcie_width);
        else
            printf(ROW "%s\n", "  PCIe", na);
        char why[512];
        bool ready = stoke_nn_cuda_ready_gpu(m, i, why, sizeof why);
        printf(ROW "%s: %s\n", "  stoke train", ready ? "runs here" : "cannot run here", why);
    }
    if (m->gpu_count > 0 && m->gpu_note[0])
        printf("  note: %s\n", m->gpu_note);

    printf("\nProfiles (%s; starting points, not measurements)\n", p->origin);
    for (int i = 0; i < m->gpu_count; i++)
        print_profile(m, p, i);
    print_profile(m, p, STOKE_TUNE_CPU);

    printf("\nRecommendations\n");
    for (int i = 0; i < recs->count; i++) {
        const stoke_rec *r = &recs->items[i];
        char dev[16];
        if (r->device == STOKE_TUNE_CPU)
            snprintf(dev, sizeof dev, "cpu");
        else
            snprintf(dev, sizeof dev, "gpu %d", m->gpus[r->device].index);
        printf("  %-6s %-18s %s\n", dev, r->key, rec_value_text(r, a, sizeof a));
        printf("  %-6s because %s\n", "", r->reason);
        if (r->unsure)
            printf("  %-6s unsure: %s; a run that leaves it unset measures it\n", "",
                   r->unsure_why);
    }
}

static void add_nonzero(cJSON *o, const char *key, double v)
{
    if (v > 0)
        cJSON_AddNumberToObject(o, key, v);
}

static cJSON *profile_json(const stoke_machine *m, const stoke_profiles *p, int dev)
{
    stoke_profile_match pm;
    stoke_profile_match_device(p, m, dev, &pm);
    cJSON *o = cJSON_CreateObject();
    if (dev == STOKE_TUNE_CPU) {
        cJSON_AddStringToObject(o, "device", "cpu");
    } else {
        cJSON_AddStringToObject(o, "device", "gpu");
        cJSON_AddNumberToObject(o, "gpu", m->gpus[dev].index);
    }
    cJSON_AddStringToObject(o, "match", stoke_profile_how_name(pm.how));
    cJSON_AddStringToObject(o, "why", pm.why);
    if (pm.how == STOKE_PROFILE_NONE)
        return o;
    const stoke_profile *f = &pm.profile;
    cJSON *j = cJSON_AddObjectToObject(o, "profile");
    cJSON_AddStringToObject(j, "name", f->name);
    if (f->batch) {
        cJSON_AddNumberToObject(j, "batch", (double)f->batch);
        cJSON_AddStringToObject(j, "batch_for", f->batch_for);
    }
    cJSON_AddNumberToObject(j, "workers", f->workers);
    if (f->workers_for_cores)
        cJSON_AddNumberToObject(j, "workers_for_cores", f->workers_for_cores);
    if (f->workers_max)
        cJSON_AddNumberToObject(j, "workers_max", f->workers_max);
    cJSON_AddNumberToObject(j, "prefetch_factor", f->prefetch_factor);
    cJSON_AddStringToObject(j, "precision",
                            f->precision_auto ? "auto" : stoke_precision_name(f->precision));
    cJSON_AddBoolToObject(j, "tf32", f->tf32);
    cJSON_AddStringToObject(j, "source", f->source);
    cJSON_AddStringToObject(j, "note", f->note);
    cJSON_AddNumberToObject(o, "workers", pm.workers);
    cJSON_AddNumberToObject(o, "prefetch", pm.prefetch);
    return o;
}

static cJSON *machine_json(const stoke_machine *m, const stoke_recs *recs, const stoke_profiles *p)
{
    char buf[256];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "stoke_version", STOKE_VERSION);

    const stoke_cpu_info *c = &m->cpu;
    cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
    if (c->model[0])
        cJSON_AddStringToObject(cpu, "model", c->model);
    cJSON_AddStringToObject(
        cpu, "generation",
        stoke_cpu_generation(c->vendor, c->family, c->model_number, c->stepping));
    if (c->vendor[0])
        cJSON_AddStringToObject(cpu, "vendor", c->vendor);
    if (c->family >= 0)
        cJSON_AddNumberToObject(cpu, "family", c->family);
    if (c->model_number >= 0)
        cJSON_AddNumberToObject(cpu, "model_number", c->model_number);
    add_nonzero(cpu, "logical_cpus", c->logical_cpus);
    add_nonzero(cpu, "usable_cpus", c->usable_cpus);
    if (c->quota_cpus > 0) {
        cJSON_AddNumberToObject(cpu, "quota_cpus", c->quota_cpus);
        cJSON_AddStringToObject(cpu, "quota_file", c->quota_file);
    } else {
        cJSON_AddNullToObject(cpu, "quota_cpus");
    }
    add_nonzero(cpu, "available_cpus", c->available_cpus);
    const stoke_cpu_load *l = &m->load;
    if (l->valid) {
        cJSON *load = cJSON_AddObjectToObject(cpu, "load");
        cJSON_AddNumberToObject(load, "seconds", l->seconds);
        cJSON_AddNumberToObject(load, "busy_cpus", l->busy_cpus);
        cJSON_AddNumberToObject(load, "own_cpus", l->own_cpus);
        cJSON_AddNumberToObject(load, "others_cpus", l->others_cpus);
        cJSON_AddNumberToObject(load, "steal_pct", l->steal_pct);
        if (l->run_queue >= 0)
            cJSON_AddNumberToObject(load, "run_queue", l->run_queue);
    }
    add_nonzero(cpu, "physical_cores", c->physical_cores);
    add_nonzero(cpu, "sockets", c->sockets);
    add_nonzero(cpu, "numa_nodes", c->numa_nodes);
    add_nonzero(cpu, "l1d_bytes", (double)c->l1d_bytes);
    add_nonzero(cpu, "l2_bytes", (double)c->l2_bytes);
    add_nonzero(cpu, "l3_bytes", (double)c->l3_bytes);
    cJSON *simd = cJSON_AddArrayToObject(cpu, "simd");
    stoke_simd_names(c->simd, buf, sizeof buf);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
        cJSON_AddItemToArray(simd, cJSON_CreateString(t));
    add_nonzero(cpu, "max_mhz", c->max_mhz);
    if (c->isa_cap != STOKE_CPU_ISA_ALL) {
        cJSON_AddStringToObject(cpu, "isa_cap", stoke_cpu_isa_name(c->isa_cap));
        cJSON *hidden = cJSON_AddArrayToObject(cpu, "simd_hidden");
        stoke_simd_names(c->simd_hidden, buf, sizeof buf);
        for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
            cJSON_AddItemToArray(hidden, cJSON_CreateString(t));
    }

    if (m->openblas.valid) {
        stoke_blas_check bc;
        stoke_openblas_check(m->openblas.core, c->simd | c->simd_hidden, &bc);
        cJSON *ob = cJSON_AddObjectToObject(root, "openblas");
        cJSON_AddStringToObject(ob, "core", m->openblas.core);
        if (m->openblas.config[0])
            cJSON_AddStringToObject(ob, "config", m->openblas.config);
        cJSON_AddStringToObject(ob, "fit", stoke_blas_fit_name(bc.fit));
        if (bc.core_isa)
            cJSON_AddStringToObject(ob, "core_isa", bc.core_isa);
        if (bc.cpu_isa)
            cJSON_AddStringToObject(ob, "cpu_isa", bc.cpu_isa);
        if (bc.coretype)
            cJSON_AddStringToObject(ob, "coretype", bc.coretype);
        cJSON_AddStringToObject(ob, "reason", bc.reason);
        cJSON_AddBoolToObject(ob, "used_by_stoke_training", false);
        cJSON_AddStringToObject(ob, "note", openblas_note);
    }

    cJSON *mem = cJSON_AddObjectToObject(root, "memory");
    add_nonzero(mem, "total_bytes", (double)m->mem.total_bytes);
    add_nonzero(mem, "available_bytes", (double)m->mem.available_bytes);
    add_nonzero(mem, "meminfo_available_bytes", (double)m->mem.meminfo_available_bytes);
    add_nonzero(mem, "cgroup_limit_bytes", (double)m->mem.cgroup_limit_bytes);
    add_nonzero(mem, "cgroup_used_bytes", (double)m->mem.cgroup_used_bytes);

    if (m->have_disk) {
        cJSON *st = cJSON_AddObjectToObject(root, "storage");
        cJSON_AddStringToObject(st, "path", m->data_path);
        cJSON_AddStringToObject(st, "mount_point", m->disk.mount_point);
        cJSON_AddStringToObject(st, "fs_type", m->disk.fs_type);
        cJSON_AddStringToObject(st, "device", m->disk.device);
        cJSON_AddStringToObject(st, "kind", stoke_disk_kind_name(m->disk.kind));
        cJSON_AddStringToObject(st, "reason", m->disk.reason);
    }

    if (m->driver_version[0])
        cJSON_AddStringToObject(root, "driver_version", m->driver_version);
    if (m->cuda_driver_version)
        cJSON_AddStringToObject(root, "cuda_driver_version",
                                version_text(m->cuda_driver_version, buf, sizeof buf));
    if (m->cuda_runtime_version)
        cJSON_AddStringToObject(root, "cuda_runtime_version",
                                version_text(m->cuda_runtime_version, buf, sizeof buf));
    cJSON *gpus = cJSON_AddArrayToObject(root, "gpus");
    for (int i = 0; i < m->gpu_count; i++) {
        const stoke_gpu_info *g = &m->gpus[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", g->index);
        cJSON_AddStringToObject(o, "name", g->name);
        if (g->uuid[0])
            cJSON_AddStringToObject(o, "uuid", g->uuid);
        if (g->valid & STOKE_GPU_HAS_PCI_BUS_ID)
            cJSON_AddStringToObject(o, "pci_bus_id", g->pci_bus_id);
        if (g->valid & STOKE_GPU_HAS_MEMORY)
            cJSON_AddNumberToObject(o, "memory_total_bytes", (double)g->memory_total_bytes);
        if (g->valid & STOKE_GPU_HAS_CC) {
            snprintf(buf, sizeof buf, "%d.%d", g->cc_major, g->cc_minor);
            cJSON_AddStringToObject(o, "compute_capability", buf);
        }
        if (g->valid & STOKE_GPU_HAS_CUDA_INDEX)
            cJSON_AddNumberToObject(o, "cuda_device", g->cuda_index);
        if (g->valid & STOKE_GPU_HAS_SM_COUNT)
            cJSON_AddNumberToObject(o, "sm_count", g->sm_count);
        if (g->valid & STOKE_GPU_HAS_POWER_LIMIT)
            cJSON_AddNumberToObject(o, "power_limit_mw", g->power_limit_mw);
        if (g->valid & STOKE_GPU_HAS_MAX_SM_CLOCK)
            cJSON_AddNumberToObject(o, "max_sm_clock_mhz", g->max_sm_clock_mhz);
        if (g->valid & STOKE_GPU_HAS_PCIE) {
            cJSON_AddNumberToObject(o, "pcie_gen", g->pcie_gen);
            cJSON_AddNumberToObject(o, "pcie_width", g->pcie_width);
        }
        char why[512];
        cJSON *cb = cJSON_AddObjectToObject(o, "cuda_backend");
        cJSON_AddBoolToObject(cb, "ready", stoke_nn_cuda_ready_gpu(m, i, why, sizeof why));
        cJSON_AddStringToObject(cb, "detail", why);
        cJSON_AddItemToArray(gpus, o);
    }
    if (m->gpu_note[0])
        cJSON_AddStringToObject(root, "gpu_note", m->gpu_note);

    cJSON *prof = cJSON_AddObjectToObject(root, "profiles");
    cJSON_AddStringToObject(prof, "origin", p->origin);
    cJSON *devs = cJSON_AddArrayToObject(prof, "devices");
    for (int i = 0; i < m->gpu_count; i++)
        cJSON_AddItemToArray(devs, profile_json(m, p, i));
    cJSON_AddItemToArray(devs, profile_json(m, p, STOKE_TUNE_CPU));

    cJSON *list = cJSON_AddArrayToObject(root, "recommendations");
    for (int i = 0; i < recs->count; i++) {
        const stoke_rec *r = &recs->items[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "key", r->key);
        if (r->device == STOKE_TUNE_CPU) {
            cJSON_AddStringToObject(o, "device", "cpu");
        } else {
            cJSON_AddStringToObject(o, "device", "gpu");
            cJSON_AddNumberToObject(o, "gpu", m->gpus[r->device].index);
        }
        if (r->known) {
            switch (r->type) {
            case STOKE_REC_TEXT: cJSON_AddStringToObject(o, "value", r->text); break;
            case STOKE_REC_BOOL: cJSON_AddBoolToObject(o, "value", r->number != 0); break;
            case STOKE_REC_COUNT:
            case STOKE_REC_FLOPS: cJSON_AddNumberToObject(o, "value", r->number); break;
            }
            if (r->type == STOKE_REC_FLOPS)
                cJSON_AddStringToObject(o, "unit", "FLOP/s");
        }
        cJSON_AddStringToObject(o, "reason", r->reason);
        if (r->unsure)
            cJSON_AddStringToObject(o, "unsure", r->unsure_why);
        cJSON_AddItemToArray(list, o);
    }
    return root;
}

int cmd_probe(int argc, char **argv)
{
    probe_args a = {0};
    cli_group g = {probe_opts, &a};
    cli_spec spec = {
        .cmd = "probe", .usage = cmd_probe_usage, .groups = &g, .ngroups = 1, .equals = true};
    int prc = cli_parse(&spec, argc, argv, 1);
    if (prc >= 0)
        return prc;
    const char *data = a.data;
    bool json = a.json;

    stoke_machine *m = calloc(1, sizeof *m);
    stoke_recs *recs = calloc(1, sizeof *recs);
    stoke_profiles *prof = calloc(1, sizeof *prof);
    if (!m || !recs || !prof) {
        free(m);
        free(recs);
        free(prof);
        return cli_error("probe", "out of memory");
    }
    if (stoke_profiles_load(prof) != STOKE_OK) {
        free(m);
        free(recs);
        free(prof);
        return cli_error("probe", "%s", stoke_last_error());
    }
    stoke_status s = stoke_machine_probe(m, data);
    if (s != STOKE_OK) {
        int rc = s == STOKE_ERR_NOTFOUND && data
                     ? cli_error("probe", "--data: %s", stoke_last_error())
                     : cli_error("probe", "%s", stoke_last_error());
        free(m);
        free(recs);
        free(prof);
        return rc;
    }
    /* one short look at what other processes take (a failed one leaves it unknown) */
    (void)stoke_cpu_load_sample(0.2, &m->load);
    stoke_recommend(m, recs);
    int rc = 0;
    if (json) {
        cJSON *doc = machine_json(m, recs, prof);
        char *text = doc ? stoke_json_print(doc, true) : NULL;
        if (text) {
            puts(text);
            free(text);
        } else {
            rc = cli_error("probe", "out of memory while writing JSON");
        }
        cJSON_Delete(doc);
    } else {
        print_human(m, recs, prof);
    }
    free(m);
    free(recs);
    free(prof);
    if (fflush(stdout) != 0)
        rc = cli_error("probe", "cannot write the report");
    return rc;
}
