/* rules.c - the diagnosis: a table of rules over a run's summary; a finding records the
 * figures it read and the settings it asks to change as fields, and its evidence and
 * advice texts render them. Thresholds live in the table rows (see docs/monitor.md). */
#include "stoke/monitor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"

#define GB 1e9

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

/* ---- The fields of a finding: the texts are rendered from what these record ---- */

/* Records a figure of the run the rule read; returns its value for the evidence. */
static double fig(stoke_finding *f, const char *name, double value, const char *unit)
{
    if ((unsigned)f->nfigures < STOKE_FINDING_FIGURES)
        f->figures[f->nfigures++] = (stoke_finding_figure){name, value, unit};
    return value;
}

/* Records a setting the advice asks to change; returns its value to suggest. current
 * and suggested are NAN when unknown or not given (a direction only). */
static double change(stoke_finding *f, const char *setting, const char *unit, double current,
                     double suggested, int direction)
{
    if ((unsigned)f->nchanges < STOKE_FINDING_CHANGES)
        f->changes[f->nchanges++] =
            (stoke_finding_change){setting, unit, current, suggested, direction, NULL};
    return suggested;
}

/* Records a setting to set to a word ("bf16", "tmpfs"). */
static void change_to(stoke_finding *f, const char *setting, const char *to)
{
    if ((unsigned)f->nchanges < STOKE_FINDING_CHANGES)
        f->changes[f->nchanges++] = (stoke_finding_change){setting, "", NAN, NAN, 0, to};
}

const stoke_finding_figure *stoke_finding_figure_of(const stoke_finding *f, const char *name)
{
    for (int i = 0; i < f->nfigures; i++)
        if (!strcmp(f->figures[i].name, name))
            return &f->figures[i];
    return NULL;
}

const stoke_finding_change *stoke_finding_change_of(const stoke_finding *f, const char *setting)
{
    for (int i = 0; i < f->nchanges; i++)
        if (!strcmp(f->changes[i].setting, setting))
            return &f->changes[i];
    return NULL;
}

/* Loader workers to suggest: one core is left for the training process itself. */
static int suggested_workers(const stoke_mon_summary *s)
{
    return s->usable_cpus > 1 ? s->usable_cpus - 1 : 1;
}

/* The advice is worded for the program watched: stoke's flags for its own trainer,
 * PyTorch's knobs for a foreign job; a knob of the other is no advice at all. */
static bool is_stoke(const stoke_mon_summary *s) { return s->program.kind == STOKE_PROG_STOKE; }

/* "--workers 3" or "DataLoader(num_workers=3)". */
static const char *workers_knob(const stoke_mon_summary *s, int n, char *buf, size_t size)
{
    if (is_stoke(s))
        stoke_say(buf, size, "--workers %d", n);
    else
        stoke_say(buf, size, "DataLoader(num_workers=%d)", n);
    return buf;
}

/* Batches in flight: stoke's ring slots, or PyTorch's per-worker prefetch_factor. */
static const char *prefetch_knob(const stoke_mon_summary *s, int slots, int workers, char *buf,
                                 size_t size)
{
    if (is_stoke(s))
        stoke_say(buf, size, "--prefetch %d", slots);
    else
        stoke_say(buf, size, "prefetch %d batches: DataLoader(prefetch_factor=%d)", slots,
                  workers > 0 ? (slots + workers - 1) / workers : slots);
    return buf;
}

static const char *threads_knob(const stoke_mon_summary *s, int n, char *buf, size_t size)
{
    if (is_stoke(s))
        stoke_say(buf, size, "--threads %d", n);
    else
        stoke_say(buf, size,
                  "OMP_NUM_THREADS=%d (and MKL_NUM_THREADS / OPENBLAS_NUM_THREADS, "
                  "torch.set_num_threads(%d))",
                  n, n);
    return buf;
}

/* The run's loader workers: the pipeline's report, else stoke's setting; NAN unknown. */
static double current_workers(const stoke_mon_summary *s)
{
    if (s->have_pipeline)
        return s->pipeline.workers;
    return is_stoke(s) && s->program.workers > 0 ? s->program.workers : NAN;
}

/* The run's prefetch depth (batches in flight), as current_workers. */
static double current_prefetch(const stoke_mon_summary *s)
{
    if (s->have_pipeline)
        return s->pipeline.slots;
    return is_stoke(s) && s->program.prefetch > 0 ? s->program.prefetch : NAN;
}

/* Records "at least n loader workers" and returns n for the advice. */
static int more_workers(stoke_finding *f, const stoke_mon_summary *s, int n)
{
    return (int)change(f, "workers", "workers", current_workers(s), n, +1);
}

/* The batch size scaled by factor (recorded as a change): stoke's flag with its current
 * value when known. */
static const char *batch_knob(const stoke_mon_summary *s, stoke_finding *f, double factor,
                              char *buf, size_t size)
{
    int b = s->program.batch_size;
    bool known = is_stoke(s) && b > 0;
    double to = change(f, "batch_size", "samples", known ? b : NAN,
                       known ? fmax(1, floor(b * factor)) : NAN, factor > 1 ? +1 : -1);
    if (known)
        stoke_say(buf, size, "--batch-size %d (now %d)", (int)to, b);
    else if (is_stoke(s))
        stoke_say(buf, size, "--batch-size");
    else
        stoke_say(buf, size, "the DataLoader's batch_size");
    return buf;
}

/* Per-sample work done once: stoke's packed records where stoke's loader reads the data
 * (its trainer, or a Python job whose stoke.Loader reports the pipeline), else large
 * shards (a foreign loader cannot read stoke's format). */
static const char *pack_advice(const stoke_mon_summary *s, stoke_finding *f)
{
    bool records = is_stoke(s) || s->have_pipeline;
    change_to(f, "data_format", records ? "stoke-records" : "shards");
    return records ? "convert the dataset to stoke packed records (stoke data convert SRC DST)"
                   : "pack the samples into large sequential shards (tar/WebDataset)";
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
    double wait = fig(f, "data_wait_median", w->median, "%");
    double wait95 = fig(f, "data_wait_p95", w->p95, "%");
    double avg_ms = fig(f, "wait_avg_ms", p->wait_avg_ms, "ms");
    double p95_ms = fig(f, "wait_p95_ms", p->wait_p95_ms, "ms");
    double max_ms = fig(f, "wait_max_ms", p->wait_max_ms, "ms");
    int slots = (int)fig(f, "prefetch", p->slots, "batches");
    double fill = fig(f, "fill_avg", p->fill_avg, "batches");
    int nworkers = (int)fig(f, "workers", p->workers, "workers");
    double busy_pct = fig(f, "workers_busy", 100.0 * p->busy_frac, "%");
    char workers[96], rate[64] = "", cpu[64] = "";
    if (nworkers > 0)
        stoke_say(workers, sizeof workers, "%d worker%s busy %.0f%% of the time", nworkers,
                  nworkers == 1 ? "" : "s", busy_pct);
    else
        stoke_say(workers, sizeof workers,
                  "no workers: the loop read and transformed its batches "
                  "itself (busy %.0f%% of the time)",
                  busy_pct);
    if (s->sys[STOKE_M_BATCH_RATE].n)
        stoke_say(rate, sizeof rate, "; %.1f batches/s (median)",
                  fig(f, "batches_per_s", s->sys[STOKE_M_BATCH_RATE].median, "batches/s"));
    if (s->sys[STOKE_M_CPU].n)
        stoke_say(cpu, sizeof cpu, "; CPUs %.0f%% busy (median)",
                  fig(f, "cpu_busy_median", s->sys[STOKE_M_CPU].median, "%"));
    f->gpu = -1;
    stoke_say(
        f->evidence, sizeof f->evidence,
        "the training loop waited for data %.0f%% of the time (median; p95 %.0f%%); per batch "
        "avg %.1f ms, p95 %.1f ms, max %.1f ms; the ring of %d slots held %.2f ready batches "
        "on average when asked; %s%s%s",
        wait, wait95, avg_ms, p95_ms, max_ms, slots, fill, workers, rate, cpu);
    const stoke_stats *io = &s->sys[STOKE_M_IOWAIT];
    bool reading = (io->n && io->median >= r->iowait_atleast) || slow_disk(s);
    int cap = suggested_workers(s);
    char knob[96];
    /* With no workers the loop loads inside its wait: the wait is loading work, however
     * much its compute between batches dilutes its busy share (86% busy loading 90% of
     * the time, once). */
    /* Workers that idle part of the time on saturated CPUs are still short of CPU: they
     * idle while a ring too shallow for them is full, or at an epoch's end, and each
     * batch they make takes cores from the compute (the robustness check of stoke bench,
     * 2 cores at 100%, its 2 workers busy 85%). Storage is not the answer there. */
    const stoke_stats *busy_cpu = &s->sys[STOKE_M_CPU];
    bool saturated = busy_cpu->n && busy_cpu->median >= r->cpu_atleast;
    bool busy = p->busy_frac >= r->busy_frac_atleast || nworkers == 0 || saturated;
    if (busy && reading) {
        /* Blocking reads count as busy: busy workers on waiting storage are reading. */
        char ram[32];
        stoke_format_bytes((double)s->mem_total_bytes, ram, sizeof ram);
        double iowait = io->n ? fig(f, "iowait_median", io->median, "%") : 0.0;
        change_to(f, "data_location", "tmpfs");
        const char *pack = pack_advice(s, f);
        stoke_say(
            f->advice, sizeof f->advice,
            "the workers spend their time reading (iowait median %.0f%%%s): storage feeds "
            "them too slowly - copy the dataset to tmpfs (/dev/shm) if it fits in RAM (%s "
            "here) or to local SSD, and %s so each sample is one sequential read; see io-bound",
            iowait, slow_disk(s) ? ", the data is on slow storage" : "", ram, pack);
    } else if (busy) {
        /* To keep up, the pipeline must produce 1/(1 - wait share) times as fast. */
        double share = wait < 99 ? wait / 100.0 : 0.99;
        int have = nworkers > 0 ? nworkers : 1;
        int need = (int)ceil(have / (1.0 - share));
        if (need > cap)
            need = cap;
        int usable = (int)fig(f, "usable_cpus", s->usable_cpus, "cores");
        if (nworkers < cap && need > nworkers) {
            need = more_workers(f, s, need);
            change(f, "per_sample_work", "", NAN, NAN, -1);
            const char *pack = pack_advice(s, f);
            stoke_say(
                f->advice, sizeof f->advice,
                "the workers cannot keep up: run %d loader worker%s, %s (now %d; waiting %.0f%% "
                "of the time means the pipeline must be %.1fx as fast; at most %d, one of the "
                "%d usable cores is the training loop's), and make per-sample work cheaper "
                "(cheaper transforms, decode/resize once: %s)",
                need, need == 1 ? "" : "s", workers_knob(s, need, knob, sizeof knob), nworkers,
                wait, fig(f, "speedup_needed", 1.0 / (1.0 - share), "x"), cap, usable, pack);
        } else {
            change(f, "per_sample_work", "", NAN, NAN, -1);
            const char *pack = pack_advice(s, f);
            stoke_say(
                f->advice, sizeof f->advice,
                "the %d workers %s and use the usable cores (%d, one for the training "
                "loop): make per-sample work cheaper - cheaper transforms, decode/resize once "
                "(%s), augmentation on the accelerator; beyond that only more cores help",
                nworkers,
                p->busy_frac >= r->busy_frac_atleast ? "are busy" : "share saturated CPUs", usable,
                pack);
        }
    } else if (fill < r->fill_below) {
        change_to(f, "data_location", "tmpfs");
        const char *pack = pack_advice(s, f);
        char ring[160] = "";
        if (nworkers > 0 && slots < 2 * nworkers + 2) {
            int deeper = (int)change(f, "prefetch", "batches", slots, 2 * nworkers + 2, +1);
            stoke_say(ring, sizeof ring,
                      "; a ring of %d slots for %d workers also gives them too "
                      "little to do at once: %s",
                      slots, nworkers, prefetch_knob(s, deeper, nworkers, knob, sizeof knob));
        }
        stoke_say(
            f->advice, sizeof f->advice,
            "the workers idle %.0f%% of the time yet the ring is mostly empty, so they are not "
            "short of CPU time: look at the storage (see io-bound: tmpfs /dev/shm, local SSD; "
            "%s)%s",
            100.0 * (1.0 - p->busy_frac), pack, ring);
    } else {
        int deeper = (int)change(f, "prefetch", "batches", slots, 2 * slots, +1);
        stoke_say(f->advice, sizeof f->advice,
                  "batches are ready on average (%.2f) yet the loop still waits: the waits come in "
                  "bursts (max %.1f ms against avg %.1f ms); a deeper prefetch ring absorbs them: "
                  "%d slots instead of %d, %s",
                  fill, max_ms, avg_ms, deeper, slots,
                  prefetch_knob(s, deeper, nworkers, knob, sizeof knob));
    }
    return true;
}

/* ---- Cores shared with other processes --------------------------------------- */

/* The job's compute threads: for stoke's trainer its threads setting (what it gave
 * oneDNN, BLAS and its OpenMP loops); otherwise, or when stoke's is unknown, the median
 * count of the tree's threads that were busy in a sample (stoke_thread_read: at least
 * half the busiest thread's CPU or 20% of a core). That count is what the job runs, not
 * what it was configured with, but on shared cores the threads of a team get equal
 * slices, so the relative cut still finds them. 0 when neither is known: without it
 * a job that sleeps cannot be told from one that is starved. */
static int compute_threads(const stoke_mon_summary *s, bool *configured)
{
    *configured = is_stoke(s) && s->program.threads > 0;
    if (*configured)
        return s->program.threads;
    const stoke_stats *b = &s->sys[STOKE_M_BUSY_THREADS];
    return b->n && b->median >= 0.5 ? (int)lround(b->median) : 0;
}

/* The cores other processes kept busy among those the job may use (median). The
 * per-sample series counts the whole machine; when the job may use fewer CPUs than
 * there are (affinity), only the others on its own CPUs compete with it: on saturated
 * CPUs those are its CPUs' busy share less its own cores. */
static double others_cores(const stoke_mon_summary *s)
{
    const stoke_stats *o = &s->sys[STOKE_M_OTHERS_CPU];
    if (!o->n)
        return 0;
    double others = o->median / 100.0;
    if (s->usable_cpus > 0 && s->usable_cpus < s->ncpu && s->sys[STOKE_M_CPU].n)
        others = fmin(others, fmax(0.0, s->usable_cpus * s->sys[STOKE_M_CPU].median / 100.0 -
                                            s->sys[STOKE_M_PROC_CPU].median / 100.0));
    return others;
}

/* The CPUs saturated with other processes holding a part of them: then idle cores
 * are not there to be used, whatever the job's own share (cpu-underused must not ask
 * for more threads). The thresholds are the reading rule's row. */
static bool cpus_taken(const stoke_rule *r, const stoke_mon_summary *s)
{
    const stoke_stats *cpu = &s->sys[STOKE_M_CPU];
    return cpu->n && s->sys[STOKE_M_PROC_CPU].n && cpu->median >= r->cpu_atleast &&
           others_cores(s) >= r->others_cores_atleast;
}

/* The job's compute threads compete with other processes for the usable CPUs: more
 * runnable threads than cores (its threads + the others' cores exceed them), or each
 * of its threads getting only a slice of a core. A job alone saturating the machine is
 * not this (the others hold nothing), nor one thread that gets its full core. */
static bool check_contention(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (!cpus_taken(r, s))
        return false;
    bool configured;
    int threads = compute_threads(s, &configured);
    if (threads < 1)
        return false;
    /* A GPU kept busy bounded the run whatever the host threads got. */
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (gpu_considered(s, g) && u->n && u->median >= r->gpu_util_atleast)
            return false;
    }
    int usable = s->usable_cpus > 0 ? s->usable_cpus : 1;
    double job = s->sys[STOKE_M_PROC_CPU].median / 100.0;
    /* A job next to nothing mostly sleeps (on a GPU, I/O, a lock): starving it would
     * take a load of tens of runnable threads per core. */
    if (job < r->job_cores_atleast)
        return false;
    double others = others_cores(s);
    double each = job / threads;
    bool over = threads + others >= usable + r->excess_cores_atleast;
    bool starved = each < r->thread_share_below;
    if (!over && !starved)
        return false;
    /* The threads the others leave room for: one at least. */
    int n = usable - (int)lround(others);
    char room[80];
    if (n < 1) {
        n = 1;
        stoke_say(room, sizeof room, "the others take all %d usable CPUs; one at least", usable);
    } else {
        stoke_say(room, sizeof room, "%d usable - %.0f taken", usable, round(others));
    }
    f->gpu = -1;
    fig(f, "job_cores", job, "cores");
    fig(f, "compute_threads", threads, "threads");
    fig(f, "cores_per_thread", each, "cores");
    fig(f, "others_cores", others, "cores");
    fig(f, "usable_cpus", usable, "cores");
    double cpu = fig(f, "cpu_busy_median", s->sys[STOKE_M_CPU].median, "%");
    stoke_say(f->evidence, sizeof f->evidence,
              "the job used %.2f of a core with %d compute thread%s (%.2f each; %s); other "
              "processes kept %.1f of the %d usable CPUs busy (CPUs %.0f%% busy, median)",
              job, threads, threads == 1 ? "" : "s", each,
              configured ? "its --threads" : "threads busy in a sample, median", others, usable,
              cpu);
    char knob[160];
    if (n < threads) {
        n = (int)change(f, "threads", "threads", threads, n, -1);
        /* libgomp's threads spin at barriers: on a core shared with another process a
         * descheduled one stalls every parallel region for a time slice (10x slower
         * kernels measured, src/nn/cpu/dense.h). One thread has no barrier to wait at. */
        if (is_stoke(s))
            stoke_say(knob, sizeof knob, "--threads %d (now %d)", n, threads);
        else
            threads_knob(s, n, knob, sizeof knob);
        stoke_say(f->advice, sizeof f->advice,
                  "more compute threads than the cores the other processes leave free: run %d "
                  "(%s): %s%s; or stop or renice the other processes (renice +10), or give "
                  "the job CPUs of its own (taskset, a cpuset)",
                  n, room, knob,
                  /* the stoke command bounds libgomp's spinning itself (cli/omp_wait.c) */
                  n > 1 && !is_stoke(s)
                      ? ", and OMP_WAIT_POLICY=passive for libgomp-based programs (spinning "
                        "threads at barriers turn a shared core into a collapse)"
                      : "");
    } else {
        stoke_say(f->advice, sizeof f->advice,
                  "the job already runs no more compute threads (%d) than the cores the others "
                  "leave (%d): fewer would not help; the other processes hold the CPUs - stop "
                  "or renice them (renice +10), run the job when the machine is free, or give "
                  "it CPUs of its own (taskset, a cpuset)",
                  threads, n);
    }
    return true;
}

/* One thread of the job saturated (a loop loading its own batches: PyTorch with
 * num_workers=0) while the GPU idles, or a CPU-only loop waits for data, and the
 * machine has idle cores: the process totals hide it, the per-thread reading shows it. */
static bool check_thread_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    const stoke_stats *th = &s->sys[STOKE_M_THREAD_MAX];
    const stoke_stats *cpu = &s->sys[STOKE_M_CPU];
    if (!s->have_thread || th->n == 0 || th->median < r->thread_core_atleast || cpu->n == 0)
        return false;
    double busy = cpu->median / 100.0 * s->ncpu;
    double idle = fmin((double)s->usable_cpus, s->ncpu - busy);
    if (idle < r->idle_cores_atleast)
        return false;
    /* A loop that says it does not wait for data is not held up by its input, however
     * busy one of its threads is (a launch-bound or compute thread). */
    const stoke_stats *w = data_wait(s);
    if (w && w->median < r->data_wait_atleast)
        return false;
    /* How many cores of loading keep up: the thread's load scaled by how much faster
     * the consumer could go (the GPU to full use, or the loop without its waits). */
    double load = th->median / 100.0, speedup;
    char starved[160];
    int g = -1;
    if (any_gpu(s)) {
        for (int k = 0; k < s->gpu_count && g < 0; k++) {
            const stoke_stats *u = &s->gpu[k].s[STOKE_G_UTIL];
            if (gpu_considered(s, k) && u->n && u->median < r->gpu_util_below)
                g = k;
        }
        if (g < 0)
            return false;
        double u = fig(f, "gpu_util_median", s->gpu[g].s[STOKE_G_UTIL].median, "%");
        speedup = 100.0 / fmax(u, 10.0);
        stoke_say(starved, sizeof starved, "GPU %d utilization median %.0f%%", g, u);
    } else {
        if (!w)
            return false; /* CPU-only without the loader's numbers: cpu-underused judges */
        double wait = fig(f, "data_wait_median", w->median, "%");
        speedup = 1.0 / (1.0 - fmin(wait, 90.0) / 100.0);
        stoke_say(starved, sizeof starved, "the training loop waited for data %.0f%% of the time",
                  wait);
    }
    int need = (int)ceil(load * speedup - 1e-9);
    int avail = (int)floor(idle + 1e-9);
    int n = need < avail ? need : avail;
    if (n < 1)
        n = 1;
    const stoke_mon_thread *t = &s->busiest_thread;
    f->gpu = g;
    fig(f, "thread_core_median", th->median, "% of a core");
    fig(f, "thread_core_p95", th->p95, "% of a core");
    fig(f, "idle_cores", idle, "cores");
    fig(f, "ncpu", s->ncpu, "cores");
    fig(f, "cpu_busy_median", cpu->median, "%");
    fig(f, "cores_needed", need, "cores");
    char job[64] = "";
    if (s->sys[STOKE_M_PROC_CPU].n)
        stoke_say(job, sizeof job, "; the job used %.1f cores",
                  fig(f, "job_cores", s->sys[STOKE_M_PROC_CPU].median / 100.0, "cores"));
    stoke_say(
        f->evidence, sizeof f->evidence,
        "thread '%s' (TID %d of PID %d) ran at %.0f%% of a core (median of the busiest "
        "thread; p95 %.0f%%; the busiest in %zu of %zu samples) while %s and %.1f of %d cores "
        "were idle (CPUs %.0f%% busy)%s",
        t->comm, t->tid, t->pid, th->median, th->p95, s->busiest_thread_samples, th->n, starved,
        idle, s->ncpu, cpu->median, job);
    n = more_workers(f, s, n);
    char knob[96];
    stoke_say(
        f->advice, sizeof f->advice,
        "one thread prepares the batches and cannot go faster: run %d loader worker%s to take "
        "the loading off it (%s; the thread's %.1f cores of work would need %d at full speed, %.1f "
        "cores idle here)%s",
        n, n == 1 ? "" : "s", workers_knob(s, n, knob, sizeof knob), load, need, idle,
        is_stoke(s) ? "" : ", with pin_memory=True and persistent_workers=True");
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
    /* Busy CPUs are the job's input pipeline only if the job is among what keeps them
     * busy: a job that used almost none of them is not bounded by them (other processes
     * took them), and blaming it would contradict its own evidence. A job that gets
     * its fair share of contended cores still is (a loaded 2-core machine). */
    double busy = cpu->median / 100.0 * s->ncpu;
    if (job->n && (job->median / 100.0 < r->job_cores_atleast ||
                   job->median / 100.0 < r->job_share_atleast * busy))
        return false;
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (!gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        fig(f, "gpu_util_median", u->median, "%");
        fig(f, "gpu_util_p95", u->p95, "%");
        fig(f, "cpu_busy_median", cpu->median, "%");
        fig(f, "busy_cores", cpu->median / 100.0 * s->ncpu, "cores");
        fig(f, "ncpu", s->ncpu, "cores");
        char jobtxt[96] = "";
        if (job->n)
            stoke_say(jobtxt, sizeof jobtxt, "; the job itself used %.1f cores",
                      fig(f, "job_cores", job->median / 100.0, "cores"));
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d utilization median %.0f%% (p95 %.0f%%) while the CPUs were %.0f%% busy "
                  "(median): %.1f of %d cores busy%s",
                  g, u->median, u->p95, cpu->median, cpu->median / 100.0 * s->ncpu, s->ncpu,
                  jobtxt);
        int usable = (int)fig(f, "usable_cpus", s->usable_cpus, "cores");
        int n = more_workers(f, s, suggested_workers(s));
        change(f, "per_sample_work", "", NAN, NAN, -1);
        char knob[96];
        stoke_say(
            f->advice, sizeof f->advice,
            "the GPU waits for batches prepared on the CPU: run %d loader workers (%s) if it "
            "has fewer, and make per-sample CPU work cheaper (decode/resize once and cache the "
            "result, move augmentation to the GPU); all %d cores are busy, so beyond that only "
            "more cores help",
            n, workers_knob(s, n, knob, sizeof knob), usable);
        return true;
    }
    return false;
}

/* io-bound's advice and its changes: the data nearer (tmpfs, SSD), packed, and read by
 * more workers. */
static void io_advice(const stoke_mon_summary *s, stoke_finding *f)
{
    char ram[32], knob[96];
    stoke_format_bytes((double)s->mem_total_bytes, ram, sizeof ram);
    change_to(f, "data_location", "tmpfs");
    const char *pack = pack_advice(s, f);
    int n = more_workers(f, s, suggested_workers(s));
    stoke_say(f->advice, sizeof f->advice,
              "storage feeds the job too slowly: copy the dataset to local SSD or to tmpfs "
              "(/dev/shm) if it fits in RAM (%s here), or read it once so later epochs come from "
              "the page cache; %s, and use more loader workers (%d) so reads overlap: %s",
              ram, pack, n, workers_knob(s, n, knob, sizeof knob));
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
        stoke_say(disk, sizeof disk, "; the data under %s is on %s storage", s->data_path,
                  stoke_disk_kind_name(s->disk_kind));
    char rd[48] = "";
    if (s->sys[STOKE_M_PROC_READ].n) {
        char b[32];
        stoke_say(
            rd, sizeof rd, "; the job read %s/s (median)",
            stoke_format_bytes(fig(f, "job_read", s->sys[STOKE_M_PROC_READ].median, "bytes/s"), b,
                               sizeof b));
    }
    if (io->n) {
        fig(f, "iowait_median", io->median, "%");
        fig(f, "iowait_p95", io->p95, "%");
    }
    if (!any_gpu(s)) {
        /* A CPU-only job: the cores that wait on storage are the idle accelerator. */
        if (!waiting)
            return false;
        f->gpu = -1;
        stoke_say(f->evidence, sizeof f->evidence,
                  "iowait median %.0f%% (p95 %.0f%%) of the CPUs%s%s", io->median, io->p95, rd,
                  disk);
        io_advice(s, f);
        return true;
    }
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (!gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        char wait[64] = "";
        if (io->n)
            stoke_say(wait, sizeof wait, "; iowait median %.0f%% (p95 %.0f%%)", io->median,
                      io->p95);
        stoke_say(f->evidence, sizeof f->evidence, "GPU %d utilization median %.0f%%%s%s%s", g,
                  fig(f, "gpu_util_median", u->median, "%"), wait, rd, disk);
        io_advice(s, f);
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
        double util = fig(f, "gpu_util_median", u->median, "%");
        double peak = fig(f, "gpu_mem_peak", m->max / GB, "GB");
        double all = fig(f, "gpu_mem_total", total / GB, "GB");
        double pct = fig(f, "gpu_mem_peak_pct", 100.0 * m->max / total, "%");
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d utilization median %.0f%% with memory peak %.1f of %.1f GB (%.1f%%)", g,
                  util, peak, all, pct);
        double headroom = fig(f, "headroom", (target - m->max) / GB, "GB");
        double most = fig(f, "batch_scale_max", floor(factor), "x");
        char knob[96];
        stoke_say(
            f->advice, sizeof f->advice,
            "the batch can grow: %.1f GB of headroom up to %.0f%% of memory; memory grows at "
            "most in proportion to the batch, so up to about %.0fx the batch fits - grow it in "
            "steps (2x first: %s) watching memory, and scale the learning rate with it",
            headroom, 100.0 * r->mem_target_frac, most, batch_knob(s, f, 2, knob, sizeof knob));
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
        f->gpu = g;
        double peak = fig(f, "gpu_mem_peak", m->max / GB, "GB");
        double all = fig(f, "gpu_mem_total", total / GB, "GB");
        double pct = fig(f, "gpu_mem_peak_pct", 100.0 * m->max / total, "%");
        double median = fig(f, "gpu_mem_median", m->median / GB, "GB");
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d memory peak %.1f of %.1f GB (%.0f%%), median %.1f GB", g, peak, all, pct,
                  median);
        double keep = fig(f, "batch_scale", r->mem_target_frac * total / m->max, "x");
        char knob[96];
        batch_knob(s, f, keep, knob, sizeof knob);
        int steps = (int)change(f, "grad_accum_steps", "steps", NAN,
                                keep > 0 ? (int)ceil(1.0 / keep) : 2, +1);
        change_to(f, "precision", "bf16");
        stoke_say(f->advice, sizeof f->advice,
                  "one larger batch or allocation away from out-of-memory: scale the batch by "
                  "about %.2f (%s) to stay near %.0f%% of memory and use gradient accumulation (%d "
                  "steps keep the effective batch), or use bf16/fp16 activations%s",
                  keep, knob, 100.0 * r->mem_target_frac, steps,
                  is_stoke(s) ? ""
                              : "; PyTorch's caching allocator may hold freed memory, so check "
                                "torch.cuda.max_memory_allocated too");
        return true;
    }
    const stoke_stats *m = &s->sys[STOKE_M_MEM_USED];
    double total = (double)s->mem_total_bytes;
    if (m->n && total > 0 && m->max / total >= r->mem_frac_atleast) {
        f->gpu = -1;
        double peak = fig(f, "ram_peak", m->max / GB, "GB");
        double all = fig(f, "ram_total", total / GB, "GB");
        double pct = fig(f, "ram_peak_pct", 100.0 * m->max / total, "%");
        char rss[64] = "";
        if (s->sys[STOKE_M_PROC_RSS].n)
            stoke_say(rss, sizeof rss, "; the job's RSS peaked at %.1f GB",
                      fig(f, "job_rss_peak", s->sys[STOKE_M_PROC_RSS].max / GB, "GB"));
        stoke_say(f->evidence, sizeof f->evidence, "RAM peak %.1f of %.1f GB (%.0f%%)%s", peak, all,
                  pct, rss);
        double excess =
            fig(f, "to_free",
                m->max - r->mem_target_frac * total > 0 ? (m->max - r->mem_target_frac * total) / GB
                                                        : 0.0,
                "GB");
        /* Fewer and shallower, without a number: what each worker holds is not measured. */
        change(f, "workers", "workers", current_workers(s), NAN, -1);
        change(f, "prefetch", "batches", current_prefetch(s), NAN, -1);
        stoke_say(
            f->advice, sizeof f->advice,
            "system memory is nearly full (the kernel's OOM killer or swapping is next): free "
            "about %.1f GB - fewer loader workers or a shallower prefetch (%s; each worker "
            "holds its own batches), memory-map the dataset instead of loading it",
            excess,
            is_stoke(s) ? "--workers, --prefetch" : "DataLoader num_workers, prefetch_factor");
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
        fig(f, "power_throttled_pct", 100.0 * pw, "%");
        fig(f, "thermal_throttled_pct", 100.0 * th, "%");
        const stoke_stats *p = &s->gpu[g].s[STOKE_G_POWER];
        const stoke_stats *t = &s->gpu[g].s[STOKE_G_TEMP];
        const stoke_stats *c = &s->gpu[g].s[STOKE_G_SM_CLOCK];
        char pwr[80] = "", temp[64] = "", clk[80] = "";
        double limit = s->gpu[g].power_limit_w;
        if (limit > 0)
            fig(f, "power_limit", limit, "W");
        if (p->n && limit > 0)
            stoke_say(pwr, sizeof pwr, "; power median %.0f W of a %.0f W limit",
                      fig(f, "power_median", p->median, "W"), limit);
        if (t->n)
            stoke_say(temp, sizeof temp, "; temperature p95 %.0f C",
                      fig(f, "temperature_p95", t->p95, "C"));
        if (c->n) {
            double clock = fig(f, "sm_clock_median", c->median, "MHz");
            stoke_say(clk, sizeof clk, "; SM clock median %.0f MHz (max seen %.0f)", clock,
                      fig(f, "sm_clock_max", c->max, "MHz"));
        }
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d throttled in %.0f%% of samples by power and %.0f%% by temperature%s%s%s",
                  g, 100.0 * pw, 100.0 * th, pwr, temp, clk);
        if (th >= r->samples_frac_atleast) {
            double cap = change(f, "power_limit", "W", limit > 0 ? limit : NAN,
                                limit > 0 ? 0.9 * limit : NAN, -1);
            stoke_say(
                f->advice, sizeof f->advice,
                "the GPU slows down to cool off: improve airflow or the fan curve, or cap "
                "power a little (nvidia-smi -pl %.0f, 10%% under the limit) to keep the clock "
                "steady below the thermal limit",
                limit > 0 ? cap : 0.0);
        } else {
            /* Raised only if under the card's default, which NVML's reading here lacks. */
            change(f, "power_limit", "W", limit > 0 ? limit : NAN, NAN, +1);
            change_to(f, "precision", "bf16");
            stoke_say(f->advice, sizeof f->advice,
                      "the GPU is held at its power limit: normal at full load, but if the limit "
                      "(%.0f W) is under the card's default raise it (nvidia-smi -pl); bf16/fp16 "
                      "math does more work per watt",
                      limit);
        }
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
    /* Cores other processes keep busy are not left idle: more threads would only share
     * them (cpu-contention judges that). */
    if (cpus_taken(r, s))
        return false;
    f->gpu = -1;
    fig(f, job->n ? "job_cores" : "busy_cores", used, "cores");
    double p95 =
        fig(f, job->n ? "job_cores_p95" : "busy_cores_p95",
            job->n ? job->p95 / 100.0 : s->sys[STOKE_M_CPU].p95 / 100.0 * s->ncpu, "cores");
    fig(f, "usable_cpus", cores, "cores");
    stoke_say(f->evidence, sizeof f->evidence, "%s used %.1f of %d cores (median; p95 %.1f)", who,
              used, cores, p95);
    char th[160], wk[96];
    bool known = is_stoke(s) && s->program.threads > 0;
    int threads = (int)change(f, "threads", "threads", known ? s->program.threads : NAN, cores, +1);
    if (known)
        stoke_say(th, sizeof th, "--threads %d (now %d)", threads, s->program.threads);
    else
        threads_knob(s, threads, th, sizeof th);
    int n = more_workers(f, s, suggested_workers(s));
    stoke_say(f->advice, sizeof f->advice,
              "the work runs on fewer threads than there are cores: set %s, or use %d loader "
              "workers (%s)",
              th, n, workers_knob(s, n, wk, sizeof wk));
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
        double util = fig(f, "gpu_util_median", u->median, "%");
        double p95 = fig(f, "gpu_util_p95", u->p95, "%");
        double max = fig(f, "gpu_util_max", u->max, "%");
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d utilization median %.0f%% (p95 %.0f%%, max %.0f%%) is under %.0f%%", g,
                  util, p95, max, r->gpu_util_below);
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        char mem[96] = "";
        if (m->n && s->gpu[g].mem_total_bytes) {
            double peak = fig(f, "gpu_mem_peak", m->max / GB, "GB");
            stoke_say(mem, sizeof mem, " (memory peak %.1f of %.1f GB)", peak,
                      fig(f, "gpu_mem_total", (double)s->gpu[g].mem_total_bytes / GB, "GB"));
        }
        int usable = (int)fig(f, "usable_cpus", s->usable_cpus, "cores");
        int n = more_workers(f, s, suggested_workers(s));
        char knob[96];
        stoke_say(f->advice, sizeof f->advice,
                  "possible causes: a batch too small for the GPU%s, too few loader workers "
                  "(%d cores: try %d) - %s, too little prefetch; the other findings say which",
                  mem, usable, n, workers_knob(s, n, knob, sizeof knob));
        return true;
    }
    return false;
}

/* A large part of the watched time went before the job's first GPU work: its figures
 * are the rest, and the wait itself is worth a word when one thread did it. */
static bool check_startup(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (!s->startup_samples || s->duration_s <= 0 ||
        s->startup_s < r->startup_frac_atleast * s->duration_s)
        return false;
    double at = fig(f, "startup", s->startup_s, "s");
    double watched = fig(f, "watched", s->duration_s, "s");
    double share = fig(f, "startup_pct", 100.0 * s->startup_s / s->duration_s, "%");
    char who[160] = "";
    if (s->startup_thread > 0 && s->startup_job > 0) {
        double thread = fig(f, "startup_thread_core", s->startup_thread, "% of a core");
        stoke_say(who, sizeof who,
                  "; until then its busiest thread ran at %.0f%% of a core and the job at %.1f "
                  "cores (medians)",
                  thread, fig(f, "startup_job_cores", s->startup_job / 100.0, "cores"));
    }
    stoke_say(f->evidence, sizeof f->evidence,
              "the job's first GPU work came %.1f s into the %.1f s watched (%.0f%%)%s", at,
              watched, share, who);
    bool one_thread = s->startup_thread >= 90 && s->startup_job < 150;
    /* The preparation done once: stoke's packed records, whoever runs (the advice names
     * `stoke data convert` either way). */
    if (one_thread)
        change_to(f, "data_format", "stoke-records");
    stoke_say(f->advice, sizeof f->advice,
              "the other findings and the summary cover only the %.1f s since; %s",
              s->duration_s - s->startup_s,
              one_thread ? "one thread prepared before training (imports, reading and decoding "
                           "the data): do that once and keep the result (save the prepared "
                           "tensors, or pack the data with `stoke data convert`), and watch a "
                           "longer run to judge the training itself"
                         : "watch a longer run to judge the training itself");
    return true;
}

/* The table. Order matters: findings print in this order, and the first BOUND finding
 * names the resource that bounded the run. */
static const stoke_rule rules[] = {
    {.id = "startup",
     .kind = STOKE_RULE_WARNING,
     .resource = "startup before the first GPU work",
     .startup_frac_atleast = 0.3,
     .check = check_startup},
    {.id = "data-wait",
     .kind = STOKE_RULE_BOUND,
     .resource = "input pipeline (data loader)",
     .data_wait_atleast = 10,
     .busy_frac_atleast = 0.9,
     .cpu_atleast = 90,
     .fill_below = 1,
     .iowait_atleast = 10,
     .check = check_data_wait},
    {.id = "cpu-contention",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU shared with other processes",
     .cpu_atleast = 90,
     .others_cores_atleast = 0.5,
     .excess_cores_atleast = 0.5,
     .thread_share_below = 0.6,
     .job_cores_atleast = 0.1,
     .gpu_util_atleast = 80,
     .check = check_contention},
    {.id = "input-bound-thread",
     .kind = STOKE_RULE_BOUND,
     .resource = "one CPU thread (input pipeline on one thread)",
     .gpu_util_below = 50,
     .data_wait_atleast = 10,
     .thread_core_atleast = 90,
     .idle_cores_atleast = 0.5,
     .check = check_thread_bound},
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
     .job_cores_atleast = 0.5,
     .job_share_atleast = 0.25,
     .check = check_input_bound},
    {.id = "cpu-underused",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU threads (cores left idle)",
     .job_cores_atleast = 0.5,
     .cores_frac_below = 0.75,
     .data_wait_atleast = 10,
     .cpu_atleast = 90,
     .others_cores_atleast = 0.5,
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
        f.program = s->program.kind;
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
    /* one sample is judged: a short run's only sample spans all of it (the Python
     * monitor takes one at stop) */
    if (s->samples < 1) {
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
            stoke_say(cpu, sizeof cpu, "CPU median %.0f%%, iowait %.0f%%",
                      s->sys[STOKE_M_CPU].median, s->sys[STOKE_M_IOWAIT].median);
        if (busiest_gpu >= 0)
            stoke_say(gpu, sizeof gpu, ", GPU %d median %.0f%%", busiest_gpu, busiest);
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
