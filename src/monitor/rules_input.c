/* rules_input.c - the rules of the input side: the loop waiting for its data pipeline,
 * CPUs saturated preparing batches, storage too slow, and the time before training began. */
#include "monitor/rules_impl.h"

#include <math.h>

#include "core/text.h"

static bool slow_disk(const stoke_mon_summary *s)
{
    return s->have_disk &&
           (s->disk_kind == STOKE_DISK_ROTATIONAL || s->disk_kind == STOKE_DISK_NETWORK);
}

/* The training loop waits for its input pipeline (measured by the loader itself). */
bool rule_check_data_wait(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    const stoke_stats *w = rule_data_wait(s);
    if (!w || w->median < r->data_wait_atleast)
        return false;
    const stoke_mon_pipeline *p = &s->pipeline;
    double wait = rule_fig(f, "data_wait_median", w->median, "%");
    double wait95 = rule_fig(f, "data_wait_p95", w->p95, "%");
    double avg_ms = rule_fig(f, "wait_avg_ms", p->wait_avg_ms, "ms");
    double p95_ms = rule_fig(f, "wait_p95_ms", p->wait_p95_ms, "ms");
    double max_ms = rule_fig(f, "wait_max_ms", p->wait_max_ms, "ms");
    int slots = (int)rule_fig(f, "prefetch", p->slots, "batches");
    double fill = rule_fig(f, "fill_avg", p->fill_avg, "batches");
    int nworkers = (int)rule_fig(f, "workers", p->workers, "workers");
    double busy_pct = rule_fig(f, "workers_busy", 100.0 * p->busy_frac, "%");
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
                  rule_fig(f, "batches_per_s", s->sys[STOKE_M_BATCH_RATE].median, "batches/s"));
    if (s->sys[STOKE_M_CPU].n)
        stoke_say(cpu, sizeof cpu, "; CPUs %.0f%% busy (median)",
                  rule_fig(f, "cpu_busy_median", s->sys[STOKE_M_CPU].median, "%"));
    f->gpu = -1;
    stoke_say(
        f->evidence, sizeof f->evidence,
        "the training loop waited for data %.0f%% of the time (median; p95 %.0f%%); per batch "
        "avg %.1f ms, p95 %.1f ms, max %.1f ms; the ring of %d slots held %.2f ready batches "
        "on average when asked; %s%s%s",
        wait, wait95, avg_ms, p95_ms, max_ms, slots, fill, workers, rate, cpu);
    const stoke_stats *io = &s->sys[STOKE_M_IOWAIT];
    bool reading = (io->n && io->median >= r->iowait_atleast) || slow_disk(s);
    int cap = rule_suggested_workers(s);
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
        double iowait = io->n ? rule_fig(f, "iowait_median", io->median, "%") : 0.0;
        rule_change_to(f, "data_location", "tmpfs");
        const char *pack = rule_pack_advice(s, f);
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
        int usable = (int)rule_fig(f, "usable_cpus", s->usable_cpus, "cores");
        if (nworkers < cap && need > nworkers) {
            need = rule_more_workers(f, s, need);
            rule_change(f, "per_sample_work", "", NAN, NAN, -1);
            const char *pack = rule_pack_advice(s, f);
            stoke_say(
                f->advice, sizeof f->advice,
                "the workers cannot keep up: run %d loader worker%s, %s (now %d; waiting %.0f%% "
                "of the time means the pipeline must be %.1fx as fast; at most %d, one of the "
                "%d usable cores is the training loop's), and make per-sample work cheaper "
                "(cheaper transforms, decode/resize once: %s)",
                need, need == 1 ? "" : "s", rule_workers_knob(s, need, knob, sizeof knob), nworkers,
                wait, rule_fig(f, "speedup_needed", 1.0 / (1.0 - share), "x"), cap, usable, pack);
        } else {
            rule_change(f, "per_sample_work", "", NAN, NAN, -1);
            const char *pack = rule_pack_advice(s, f);
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
        rule_change_to(f, "data_location", "tmpfs");
        const char *pack = rule_pack_advice(s, f);
        char ring[160] = "";
        if (nworkers > 0 && slots < 2 * nworkers + 2) {
            int deeper = (int)rule_change(f, "prefetch", "batches", slots, 2 * nworkers + 2, +1);
            stoke_say(ring, sizeof ring,
                      "; a ring of %d slots for %d workers also gives them too "
                      "little to do at once: %s",
                      slots, nworkers, rule_prefetch_knob(s, deeper, nworkers, knob, sizeof knob));
        }
        stoke_say(
            f->advice, sizeof f->advice,
            "the workers idle %.0f%% of the time yet the ring is mostly empty, so they are not "
            "short of CPU time: look at the storage (see io-bound: tmpfs /dev/shm, local SSD; "
            "%s)%s",
            100.0 * (1.0 - p->busy_frac), pack, ring);
    } else {
        int deeper = (int)rule_change(f, "prefetch", "batches", slots, 2 * slots, +1);
        stoke_say(f->advice, sizeof f->advice,
                  "batches are ready on average (%.2f) yet the loop still waits: the waits come in "
                  "bursts (max %.1f ms against avg %.1f ms); a deeper prefetch ring absorbs them: "
                  "%d slots instead of %d, %s",
                  fill, max_ms, avg_ms, deeper, slots,
                  rule_prefetch_knob(s, deeper, nworkers, knob, sizeof knob));
    }
    return true;
}

/* GPU mostly idle while the CPUs are saturated. */
bool rule_check_input_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    const stoke_stats *cpu = &s->sys[STOKE_M_CPU];
    const stoke_stats *job = &s->sys[STOKE_M_PROC_CPU];
    if (cpu->n == 0)
        return false;
    /* The loader's own measurement beats inference from utilization: with it, the
     * data-wait rule (first in the table) decides. A loop that does not wait for data
     * is not input-bound whatever the CPUs do, and one that does gets data-wait's more
     * specific advice, which this rule's worker count must not contradict. */
    if (rule_data_wait(s))
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
        if (!rule_gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        rule_fig(f, "gpu_util_median", u->median, "%");
        rule_fig(f, "gpu_util_p95", u->p95, "%");
        rule_fig(f, "cpu_busy_median", cpu->median, "%");
        rule_fig(f, "busy_cores", cpu->median / 100.0 * s->ncpu, "cores");
        rule_fig(f, "ncpu", s->ncpu, "cores");
        char jobtxt[96] = "";
        if (job->n)
            stoke_say(jobtxt, sizeof jobtxt, "; the job itself used %.1f cores",
                      rule_fig(f, "job_cores", job->median / 100.0, "cores"));
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d utilization median %.0f%% (p95 %.0f%%) while the CPUs were %.0f%% busy "
                  "(median): %.1f of %d cores busy%s",
                  g, u->median, u->p95, cpu->median, cpu->median / 100.0 * s->ncpu, s->ncpu,
                  jobtxt);
        int usable = (int)rule_fig(f, "usable_cpus", s->usable_cpus, "cores");
        int n = rule_more_workers(f, s, rule_suggested_workers(s));
        rule_change(f, "per_sample_work", "", NAN, NAN, -1);
        char knob[96];
        stoke_say(
            f->advice, sizeof f->advice,
            "the GPU waits for batches prepared on the CPU: run %d loader workers (%s) if it "
            "has fewer, and make per-sample CPU work cheaper (decode/resize once and cache the "
            "result, move augmentation to the GPU); all %d cores are busy, so beyond that only "
            "more cores help",
            n, rule_workers_knob(s, n, knob, sizeof knob), usable);
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
    rule_change_to(f, "data_location", "tmpfs");
    const char *pack = rule_pack_advice(s, f);
    int n = rule_more_workers(f, s, rule_suggested_workers(s));
    stoke_say(f->advice, sizeof f->advice,
              "storage feeds the job too slowly: copy the dataset to local SSD or to tmpfs "
              "(/dev/shm) if it fits in RAM (%s here), or read it once so later epochs come from "
              "the page cache; %s, and use more loader workers (%d) so reads overlap: %s",
              ram, pack, n, rule_workers_knob(s, n, knob, sizeof knob));
}

/* GPU idle while the CPUs wait on storage, or the data is on slow storage. */
bool rule_check_io_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
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
            stoke_format_bytes(rule_fig(f, "job_read", s->sys[STOKE_M_PROC_READ].median, "bytes/s"),
                               b, sizeof b));
    }
    if (io->n) {
        rule_fig(f, "iowait_median", io->median, "%");
        rule_fig(f, "iowait_p95", io->p95, "%");
    }
    if (!rule_any_gpu(s)) {
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
        if (!rule_gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        char wait[64] = "";
        if (io->n)
            stoke_say(wait, sizeof wait, "; iowait median %.0f%% (p95 %.0f%%)", io->median,
                      io->p95);
        stoke_say(f->evidence, sizeof f->evidence, "GPU %d utilization median %.0f%%%s%s%s", g,
                  rule_fig(f, "gpu_util_median", u->median, "%"), wait, rd, disk);
        io_advice(s, f);
        return true;
    }
    return false;
}

/* A large part of the watched time went before the job's first GPU work: its figures
 * are the rest, and the wait itself is worth a word when one thread did it. */
bool rule_check_startup(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (!s->startup_samples || s->duration_s <= 0 ||
        s->startup_s < r->startup_frac_atleast * s->duration_s)
        return false;
    double at = rule_fig(f, "startup", s->startup_s, "s");
    double watched = rule_fig(f, "watched", s->duration_s, "s");
    double share = rule_fig(f, "startup_pct", 100.0 * s->startup_s / s->duration_s, "%");
    char who[160] = "";
    if (s->startup_thread > 0 && s->startup_job > 0) {
        double thread = rule_fig(f, "startup_thread_core", s->startup_thread, "% of a core");
        stoke_say(who, sizeof who,
                  "; until then its busiest thread ran at %.0f%% of a core and the job at %.1f "
                  "cores (medians)",
                  thread, rule_fig(f, "startup_job_cores", s->startup_job / 100.0, "cores"));
    }
    stoke_say(f->evidence, sizeof f->evidence,
              "the job's first GPU work came %.1f s into the %.1f s watched (%.0f%%)%s", at,
              watched, share, who);
    bool one_thread = s->startup_thread >= 90 && s->startup_job < 150;
    /* The preparation done once: stoke's packed records, whoever runs (the advice names
     * `stoke data convert` either way). */
    if (one_thread)
        rule_change_to(f, "data_format", "stoke-records");
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
