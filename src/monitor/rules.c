/* rules.c - the diagnosis: a table of rules over a run's summary, each with evidence
 * and advice in numbers. Thresholds live in the table rows (see docs/monitor.md). */
#include "stoke/monitor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GB 1e9

static void put(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* The GPUs the job uses: those holding memory of the watched tree if the driver says
 * so for any GPU, otherwise every GPU with utilization readings. */
static bool gpu_considered(const stoke_mon_summary *s, int g)
{
    if (s->gpu[g].s[STOKE_G_UTIL].n == 0 && s->gpu[g].s[STOKE_G_MEM_USED].n == 0)
        return false;
    bool any_job = false;
    for (int k = 0; k < s->gpu_count; k++)
        if (s->gpu[k].s[STOKE_G_PROC_MEM].max > 0)
            any_job = true;
    return !any_job || s->gpu[g].s[STOKE_G_PROC_MEM].max > 0;
}

static bool any_gpu(const stoke_mon_summary *s)
{
    for (int g = 0; g < s->gpu_count; g++)
        if (gpu_considered(s, g))
            return true;
    return false;
}

/* Loader workers to suggest: one core is left for the training process itself. */
static int suggested_workers(const stoke_mon_summary *s)
{
    return s->usable_cpus > 1 ? s->usable_cpus - 1 : 1;
}

/* The input pipeline's own account of the run: its wait share series, if it reported. */
static const stoke_stats *data_wait(const stoke_mon_summary *s)
{
    const stoke_stats *w = &s->sys[STOKE_M_DATA_WAIT];
    return s->have_pipeline && w->n ? w : NULL;
}

static bool slow_disk(const stoke_mon_summary *s)
{
    return s->have_disk &&
           (s->disk_kind == STOKE_DISK_ROTATIONAL || s->disk_kind == STOKE_DISK_NETWORK);
}

/* The training loop waits for its input pipeline (measured by the loader itself). */
static bool check_data_wait(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    const stoke_stats *w = data_wait(s);
    if (!w || w->median < r->data_wait_atleast)
        return false;
    const stoke_mon_pipeline *p = &s->pipeline;
    char workers[96], rate[64] = "", cpu[64] = "";
    if (p->workers > 0)
        put(workers, sizeof workers, "%d worker%s busy %.0f%% of the time", p->workers,
            p->workers == 1 ? "" : "s", 100.0 * p->busy_frac);
    else
        put(workers, sizeof workers,
            "no workers: the loop read and transformed its batches "
            "itself (busy %.0f%% of the time)",
            100.0 * p->busy_frac);
    if (s->sys[STOKE_M_BATCH_RATE].n)
        put(rate, sizeof rate, "; %.1f batches/s (median)", s->sys[STOKE_M_BATCH_RATE].median);
    if (s->sys[STOKE_M_CPU].n)
        put(cpu, sizeof cpu, "; CPUs %.0f%% busy (median)", s->sys[STOKE_M_CPU].median);
    f->gpu = -1;
    put(f->evidence, sizeof f->evidence,
        "the training loop waited for data %.0f%% of the time (median; p95 %.0f%%); per batch "
        "avg %.1f ms, p95 %.1f ms, max %.1f ms; the ring of %d slots held %.2f ready batches "
        "on average when asked; %s%s%s",
        w->median, w->p95, p->wait_avg_ms, p->wait_p95_ms, p->wait_max_ms, p->slots, p->fill_avg,
        workers, rate, cpu);
    const stoke_stats *io = &s->sys[STOKE_M_IOWAIT];
    bool reading = (io->n && io->median >= r->iowait_atleast) || slow_disk(s);
    int cap = suggested_workers(s);
    if (p->busy_frac >= r->busy_frac_atleast && reading) {
        /* Blocking reads count as busy: busy workers on waiting storage are reading. */
        char ram[32];
        stoke_format_bytes((double)s->mem_total_bytes, ram, sizeof ram);
        put(f->advice, sizeof f->advice,
            "the workers spend their time reading (iowait median %.0f%%%s): storage feeds "
            "them too slowly - copy the dataset to tmpfs (/dev/shm) if it fits in RAM (%s "
            "here) or to local SSD, and convert it to stoke packed records (stoke data "
            "convert SRC DST) so each sample is one sequential read; see io-bound",
            io->n ? io->median : 0.0, slow_disk(s) ? ", the data is on slow storage" : "", ram);
    } else if (p->busy_frac >= r->busy_frac_atleast) {
        /* To keep up, the pipeline must produce 1/(1 - wait share) times as fast. */
        double share = w->median < 99 ? w->median / 100.0 : 0.99;
        int have = p->workers > 0 ? p->workers : 1;
        int need = (int)ceil(have / (1.0 - share));
        if (need > cap)
            need = cap;
        if (p->workers < cap && need > p->workers)
            put(f->advice, sizeof f->advice,
                "the workers cannot keep up: run %d loader worker%s (now %d; waiting %.0f%% of "
                "the time means the pipeline must be %.1fx as fast; at most %d, one of the %d "
                "usable cores is the training loop's), and make per-sample work cheaper "
                "(cheaper transforms, decode/resize once: convert the dataset to stoke packed "
                "records with stoke data convert SRC DST)",
                need, need == 1 ? "" : "s", p->workers, w->median, 1.0 / (1.0 - share), cap,
                s->usable_cpus);
        else
            put(f->advice, sizeof f->advice,
                "the %d workers are busy and use the usable cores (%d, one for the training "
                "loop): make per-sample work cheaper - cheaper transforms, decode/resize once "
                "by converting the dataset to stoke packed records (stoke data convert SRC "
                "DST), augmentation on the accelerator; beyond that only more cores help",
                p->workers, s->usable_cpus);
    } else if (p->fill_avg < r->fill_below) {
        char ring[160] = "";
        if (p->workers > 0 && p->slots < 2 * p->workers + 2)
            put(ring, sizeof ring,
                "; a ring of %d slots for %d workers also gives them too "
                "little to do at once: prefetch %d",
                p->slots, p->workers, 2 * p->workers + 2);
        put(f->advice, sizeof f->advice,
            "the workers idle %.0f%% of the time yet the ring is mostly empty, so they are not "
            "short of CPU time: look at the storage (see io-bound: tmpfs /dev/shm, local SSD, "
            "stoke data "
            "convert to packed records)%s",
            100.0 * (1.0 - p->busy_frac), ring);
    } else {
        put(f->advice, sizeof f->advice,
            "batches are ready on average (%.2f) yet the loop still waits: the waits come in "
            "bursts (max %.1f ms against avg %.1f ms); a deeper prefetch ring absorbs them: "
            "%d slots instead of %d",
            p->fill_avg, p->wait_max_ms, p->wait_avg_ms, 2 * p->slots, p->slots);
    }
    return true;
}

/* GPU mostly idle while the CPUs are saturated. */
static bool check_input_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    const stoke_stats *cpu = &s->sys[STOKE_M_CPU];
    const stoke_stats *job = &s->sys[STOKE_M_PROC_CPU];
    if (cpu->n == 0)
        return false;
    /* The loader's own measurement beats inference from utilization: with it, the
     * data-wait rule (first in the table) decides. A loop that does not wait for data
     * is not input-bound whatever the CPUs do, and one that does gets data-wait's more
     * specific advice, which this rule's worker count must not contradict. */
    if (data_wait(s))
        return false;
    double cores = s->usable_cpus > 0 ? s->usable_cpus : 1;
    bool saturated = cpu->median >= r->cpu_atleast ||
                     (job->n && job->median / 100.0 >= cores * r->cpu_atleast / 100.0);
    if (!saturated)
        return false;
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (!gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        char jobtxt[96] = "";
        if (job->n)
            put(jobtxt, sizeof jobtxt, "; the job itself used %.1f cores", job->median / 100.0);
        put(f->evidence, sizeof f->evidence,
            "GPU %d utilization median %.0f%% (p95 %.0f%%) while the CPUs were %.0f%% busy "
            "(median): %.1f of %d cores busy%s",
            g, u->median, u->p95, cpu->median, cpu->median / 100.0 * s->ncpu, s->ncpu, jobtxt);
        put(f->advice, sizeof f->advice,
            "the GPU waits for batches prepared on the CPU: run %d loader workers "
            "(num_workers=%d; NUM_WORKERS=%d) if it has fewer, and make per-sample CPU work "
            "cheaper (decode/resize once and cache the result, move augmentation to the GPU); "
            "all %d cores are busy, so beyond that only more cores help",
            suggested_workers(s), suggested_workers(s), suggested_workers(s), s->usable_cpus);
        return true;
    }
    return false;
}

/* GPU idle while the CPUs wait on storage, or the data is on slow storage. */
static bool check_io_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    const stoke_stats *io = &s->sys[STOKE_M_IOWAIT];
    bool waiting = io->n && io->median >= r->iowait_atleast;
    if (!waiting && !slow_disk(s))
        return false;
    char disk[320] = "";
    if (slow_disk(s))
        put(disk, sizeof disk, "; the data under %s is on %s storage", s->data_path,
            stoke_disk_kind_name(s->disk_kind));
    char rd[48] = "";
    if (s->sys[STOKE_M_PROC_READ].n) {
        char b[32];
        put(rd, sizeof rd, "; the job read %s/s (median)",
            stoke_format_bytes(s->sys[STOKE_M_PROC_READ].median, b, sizeof b));
    }
    char ram[32];
    stoke_format_bytes((double)s->mem_total_bytes, ram, sizeof ram);
#define IO_ADVICE                                                                        \
    "storage feeds the job too slowly: copy the dataset to local SSD or to tmpfs "       \
    "(/dev/shm) if it fits in RAM (%s here), or read it once so later epochs come from " \
    "the page cache; pack small files into large records and use more loader workers "   \
    "(%d) so reads overlap"
    if (!any_gpu(s)) {
        /* A CPU-only job: the cores that wait on storage are the idle accelerator. */
        if (!waiting)
            return false;
        f->gpu = -1;
        put(f->evidence, sizeof f->evidence, "iowait median %.0f%% (p95 %.0f%%) of the CPUs%s%s",
            io->median, io->p95, rd, disk);
        put(f->advice, sizeof f->advice, IO_ADVICE, ram, suggested_workers(s));
        return true;
    }
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (!gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        char wait[64] = "";
        if (io->n)
            put(wait, sizeof wait, "; iowait median %.0f%% (p95 %.0f%%)", io->median, io->p95);
        put(f->evidence, sizeof f->evidence, "GPU %d utilization median %.0f%%%s%s%s", g, u->median,
            wait, rd, disk);
        put(f->advice, sizeof f->advice, IO_ADVICE, ram, suggested_workers(s));
        return true;
    }
    return false;
}

/* GPU busy but most of its memory unused. */
static bool check_batch_grow(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        double total = (double)s->gpu[g].mem_total_bytes;
        if (!gpu_considered(s, g) || u->n == 0 || m->n == 0 || total <= 0 || m->max <= 0)
            continue;
        if (u->median < r->gpu_util_atleast || m->max / total >= r->mem_frac_below)
            continue;
        double target = r->mem_target_frac * total;
        double factor = target / m->max;
        f->gpu = g;
        put(f->evidence, sizeof f->evidence,
            "GPU %d utilization median %.0f%% with memory peak %.1f of %.1f GB (%.1f%%)", g,
            u->median, m->max / GB, total / GB, 100.0 * m->max / total);
        put(f->advice, sizeof f->advice,
            "the batch can grow: %.1f GB of headroom up to %.0f%% of memory; memory grows at "
            "most in proportion to the batch, so up to about %.0fx the batch fits - grow it in "
            "steps (2x, 4x, ...) watching memory, and scale the learning rate with it",
            (target - m->max) / GB, 100.0 * r->mem_target_frac, floor(factor));
        return true;
    }
    return false;
}

/* GPU or system memory nearly full. */
static bool check_memory_full(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        double total = (double)s->gpu[g].mem_total_bytes;
        if (!gpu_considered(s, g) || m->n == 0 || total <= 0 ||
            m->max / total < r->mem_frac_atleast)
            continue;
        double keep = r->mem_target_frac * total / m->max;
        f->gpu = g;
        put(f->evidence, sizeof f->evidence,
            "GPU %d memory peak %.1f of %.1f GB (%.0f%%), median %.1f GB", g, m->max / GB,
            total / GB, 100.0 * m->max / total, m->median / GB);
        put(f->advice, sizeof f->advice,
            "one larger batch or allocation away from out-of-memory: scale the batch by "
            "about %.2f to stay near %.0f%% of memory and use gradient accumulation (%d steps "
            "keep the effective batch), or use bf16/fp16 activations; a caching allocator "
            "(PyTorch) may hold freed memory, so check its own peak too",
            keep, 100.0 * r->mem_target_frac, keep > 0 ? (int)ceil(1.0 / keep) : 2);
        return true;
    }
    const stoke_stats *m = &s->sys[STOKE_M_MEM_USED];
    double total = (double)s->mem_total_bytes;
    if (m->n && total > 0 && m->max / total >= r->mem_frac_atleast) {
        f->gpu = -1;
        char rss[64] = "";
        if (s->sys[STOKE_M_PROC_RSS].n)
            put(rss, sizeof rss, "; the job's RSS peaked at %.1f GB",
                s->sys[STOKE_M_PROC_RSS].max / GB);
        put(f->evidence, sizeof f->evidence, "RAM peak %.1f of %.1f GB (%.0f%%)%s", m->max / GB,
            total / GB, 100.0 * m->max / total, rss);
        put(f->advice, sizeof f->advice,
            "system memory is nearly full (the kernel's OOM killer or swapping is next): free "
            "about %.1f GB - fewer loader workers or a shallower prefetch (each worker holds "
            "its own batches), memory-map the dataset instead of loading it",
            m->max - r->mem_target_frac * total > 0 ? (m->max - r->mem_target_frac * total) / GB
                                                    : 0.0);
        return true;
    }
    return false;
}

/* Power or thermal throttling in a large part of the samples. */
static bool check_throttle(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        size_t n = s->gpu[g].throttle_samples;
        if (!gpu_considered(s, g) || n == 0)
            continue;
        double pw = (double)s->gpu[g].power_throttled / (double)n;
        double th = (double)s->gpu[g].thermal_throttled / (double)n;
        if (pw < r->samples_frac_atleast && th < r->samples_frac_atleast)
            continue;
        f->gpu = g;
        const stoke_stats *p = &s->gpu[g].s[STOKE_G_POWER];
        const stoke_stats *t = &s->gpu[g].s[STOKE_G_TEMP];
        const stoke_stats *c = &s->gpu[g].s[STOKE_G_SM_CLOCK];
        char pwr[80] = "", temp[64] = "", clk[80] = "";
        if (p->n && s->gpu[g].power_limit_w > 0)
            put(pwr, sizeof pwr, "; power median %.0f W of a %.0f W limit", p->median,
                s->gpu[g].power_limit_w);
        if (t->n)
            put(temp, sizeof temp, "; temperature p95 %.0f C", t->p95);
        if (c->n)
            put(clk, sizeof clk, "; SM clock median %.0f MHz (max seen %.0f)", c->median, c->max);
        put(f->evidence, sizeof f->evidence,
            "GPU %d throttled in %.0f%% of samples by power and %.0f%% by temperature%s%s%s", g,
            100.0 * pw, 100.0 * th, pwr, temp, clk);
        if (th >= r->samples_frac_atleast)
            put(f->advice, sizeof f->advice,
                "the GPU slows down to cool off: improve airflow or the fan curve, or cap "
                "power a little (nvidia-smi -pl %.0f, 10%% under the limit) to keep the clock "
                "steady below the thermal limit",
                s->gpu[g].power_limit_w > 0 ? 0.9 * s->gpu[g].power_limit_w : 0.0);
        else
            put(f->advice, sizeof f->advice,
                "the GPU is held at its power limit: normal at full load, but if the limit "
                "(%.0f W) is under the card's default raise it (nvidia-smi -pl); bf16/fp16 "
                "math does more work per watt",
                s->gpu[g].power_limit_w);
        return true;
    }
    return false;
}

/* A CPU-only job keeping fewer cores busy than it has. */
static bool check_cpu_underused(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (any_gpu(s))
        return false;
    double used;
    const char *who;
    const stoke_stats *job = &s->sys[STOKE_M_PROC_CPU];
    if (job->n) {
        used = job->median / 100.0;
        who = "the job";
    } else if (s->sys[STOKE_M_CPU].n) {
        used = s->sys[STOKE_M_CPU].median / 100.0 * s->ncpu;
        who = "the machine";
    } else {
        return false;
    }
    int cores = s->usable_cpus > 0 ? s->usable_cpus : 1;
    if (used < r->job_cores_atleast || used >= r->cores_frac_below * cores)
        return false;
    if (s->sys[STOKE_M_IOWAIT].n && s->sys[STOKE_M_IOWAIT].median >= 10)
        return false; /* waiting on storage, not short of threads */
    const stoke_stats *dw = data_wait(s);
    if (dw && dw->median >= r->data_wait_atleast)
        return false; /* waiting for data (data-wait), not short of threads */
    f->gpu = -1;
    put(f->evidence, sizeof f->evidence, "%s used %.1f of %d cores (median; p95 %.1f)", who, used,
        cores, job->n ? job->p95 / 100.0 : s->sys[STOKE_M_CPU].p95 / 100.0 * s->ncpu);
    put(f->advice, sizeof f->advice,
        "the work runs on fewer threads than there are cores: set OMP_NUM_THREADS=%d (and "
        "MKL_NUM_THREADS / OPENBLAS_NUM_THREADS, torch.set_num_threads(%d)), or use %d "
        "loader workers / processes",
        cores, cores, cores);
    return true;
}

/* Seed 003's automatic warning. */
static bool check_low_util(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (!gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        put(f->evidence, sizeof f->evidence,
            "GPU %d utilization median %.0f%% (p95 %.0f%%, max %.0f%%) is under %.0f%%", g,
            u->median, u->p95, u->max, r->gpu_util_below);
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        char mem[96] = "";
        if (m->n && s->gpu[g].mem_total_bytes)
            put(mem, sizeof mem, " (memory peak %.1f of %.1f GB)", m->max / GB,
                (double)s->gpu[g].mem_total_bytes / GB);
        put(f->advice, sizeof f->advice,
            "possible causes: a batch too small for the GPU%s, too few loader workers "
            "(%d cores: try %d), too little prefetch; the other findings say which",
            mem, s->usable_cpus, suggested_workers(s));
        return true;
    }
    return false;
}

/* The table. Order matters: findings print in this order, and the first BOUND finding
 * names the resource that bounded the run. */
static const stoke_rule rules[] = {
    {.id = "data-wait",
     .kind = STOKE_RULE_BOUND,
     .resource = "input pipeline (data loader)",
     .data_wait_atleast = 10,
     .busy_frac_atleast = 0.9,
     .fill_below = 1,
     .iowait_atleast = 10,
     .check = check_data_wait},
    {.id = "io-bound",
     .kind = STOKE_RULE_BOUND,
     .resource = "storage (I/O)",
     .gpu_util_below = 50,
     .iowait_atleast = 10,
     .check = check_io_bound},
    {.id = "input-bound-cpu",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU (input pipeline)",
     .gpu_util_below = 50,
     .cpu_atleast = 85,
     .data_wait_atleast = 10,
     .check = check_input_bound},
    {.id = "cpu-underused",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU threads (cores left idle)",
     .job_cores_atleast = 0.5,
     .cores_frac_below = 0.75,
     .data_wait_atleast = 10,
     .check = check_cpu_underused},
    {.id = "memory-nearly-full",
     .kind = STOKE_RULE_RISK,
     .resource = "memory",
     .mem_frac_atleast = 0.95,
     .mem_target_frac = 0.85,
     .check = check_memory_full},
    {.id = "throttling",
     .kind = STOKE_RULE_WARNING,
     .resource = "GPU clocks (power/thermal)",
     .samples_frac_atleast = 0.2,
     .check = check_throttle},
    {.id = "batch-can-grow",
     .kind = STOKE_RULE_WARNING,
     .resource = "GPU memory (unused)",
     .gpu_util_atleast = 60,
     .mem_frac_below = 0.5,
     .mem_target_frac = 0.8,
     .check = check_batch_grow},
    {.id = "low-gpu-util",
     .kind = STOKE_RULE_WARNING,
     .resource = "GPU (idle)",
     .gpu_util_below = 30,
     .check = check_low_util},
};

const stoke_rule *stoke_rules(size_t *count)
{
    *count = sizeof rules / sizeof rules[0];
    return rules;
}

size_t stoke_diagnose(const stoke_mon_summary *s, stoke_finding *out, size_t cap)
{
    size_t fired = 0;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        stoke_finding f;
        memset(&f, 0, sizeof f);
        f.gpu = -1;
        f.rule = &rules[i];
        if (!rules[i].check(&rules[i], s, &f))
            continue;
        if (fired < cap)
            out[fired] = f;
        fired++;
    }
    return fired;
}

const char *stoke_rule_kind_name(stoke_rule_kind k)
{
    switch (k) {
    case STOKE_RULE_BOUND: return "bottleneck";
    case STOKE_RULE_RISK: return "risk";
    case STOKE_RULE_WARNING: return "warning";
    }
    return "?";
}

void stoke_diagnosis_print(const stoke_mon_summary *s, const stoke_finding *f, size_t n,
                           size_t fired, FILE *out)
{
    const stoke_finding *bound = NULL;
    for (size_t i = 0; i < n && !bound; i++)
        if (f[i].rule->kind == STOKE_RULE_BOUND)
            bound = &f[i];
    double busiest = -1;
    int busiest_gpu = -1;
    for (int g = 0; g < s->gpu_count; g++)
        if (s->gpu[g].s[STOKE_G_UTIL].n && s->gpu[g].s[STOKE_G_UTIL].median > busiest) {
            busiest = s->gpu[g].s[STOKE_G_UTIL].median;
            busiest_gpu = g;
        }
    if (s->samples < 2) {
        fprintf(out,
                "diagnosis: too few samples (%zu) to judge; run longer or with a "
                "shorter --interval\n",
                s->samples);
        return;
    }
    if (bound)
        fprintf(out, "diagnosis: bounded by %s\n", bound->rule->resource);
    else if (busiest >= 80)
        fprintf(out,
                "diagnosis: bounded by the GPU itself (GPU %d busy %.0f%% of the time, "
                "median): that is the goal\n",
                busiest_gpu, busiest);
    else if (fired)
        fprintf(out, "diagnosis: no single resource bounded the run\n");
    if (fired == 0) {
        char cpu[64] = "", gpu[64] = "";
        if (s->sys[STOKE_M_CPU].n)
            put(cpu, sizeof cpu, "CPU median %.0f%%, iowait %.0f%%", s->sys[STOKE_M_CPU].median,
                s->sys[STOKE_M_IOWAIT].median);
        if (busiest_gpu >= 0)
            put(gpu, sizeof gpu, ", GPU %d median %.0f%%", busiest_gpu, busiest);
        fprintf(out,
                "diagnosis: no rule fired - no bottleneck found (%s%s); nothing to "
                "change\n",
                cpu, gpu);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "- %s [%s]: %s\n", stoke_rule_kind_name(f[i].rule->kind), f[i].rule->id,
                f[i].evidence);
        fprintf(out, "  change: %s\n", f[i].advice);
    }
}
