/* rules_cpu.c - the rules of the CPU side: cores shared with other processes, one thread
 * doing the loading alone, and cores a CPU-only job leaves idle. */
#include "monitor/rules_impl.h"

#include <math.h>

#include "core/text.h"

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
    *configured = rule_is_stoke(s) && s->program.threads > 0;
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
bool rule_check_contention(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
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
        if (rule_gpu_considered(s, g) && u->n && u->median >= r->gpu_util_atleast)
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
    rule_fig(f, "job_cores", job, "cores");
    rule_fig(f, "compute_threads", threads, "threads");
    rule_fig(f, "cores_per_thread", each, "cores");
    rule_fig(f, "others_cores", others, "cores");
    rule_fig(f, "usable_cpus", usable, "cores");
    double cpu = rule_fig(f, "cpu_busy_median", s->sys[STOKE_M_CPU].median, "%");
    stoke_say(f->evidence, sizeof f->evidence,
              "the job used %.2f of a core with %d compute thread%s (%.2f each; %s); other "
              "processes kept %.1f of the %d usable CPUs busy (CPUs %.0f%% busy, median)",
              job, threads, threads == 1 ? "" : "s", each,
              configured ? "its --threads" : "threads busy in a sample, median", others, usable,
              cpu);
    char knob[160];
    if (n < threads) {
        n = (int)rule_change(f, "threads", "threads", threads, n, -1);
        /* libgomp's threads spin at barriers: on a core shared with another process a
         * descheduled one stalls every parallel region for a time slice (10x slower
         * kernels measured, src/nn/cpu/dense.h). One thread has no barrier to wait at. */
        if (rule_is_stoke(s))
            stoke_say(knob, sizeof knob, "--threads %d (now %d)", n, threads);
        else
            rule_threads_knob(s, n, knob, sizeof knob);
        stoke_say(f->advice, sizeof f->advice,
                  "more compute threads than the cores the other processes leave free: run %d "
                  "(%s): %s%s; or stop or renice the other processes (renice +10), or give "
                  "the job CPUs of its own (taskset, a cpuset)",
                  n, room, knob,
                  /* the stoke command bounds libgomp's spinning itself (cli/omp_wait.c) */
                  n > 1 && !rule_is_stoke(s)
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
bool rule_check_thread_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
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
    const stoke_stats *w = rule_data_wait(s);
    if (w && w->median < r->data_wait_atleast)
        return false;
    /* How many cores of loading keep up: the thread's load scaled by how much faster
     * the consumer could go (the GPU to full use, or the loop without its waits). */
    double load = th->median / 100.0, speedup;
    char starved[160];
    int g = -1;
    if (rule_any_gpu(s)) {
        for (int k = 0; k < s->gpu_count && g < 0; k++) {
            const stoke_stats *u = &s->gpu[k].s[STOKE_G_UTIL];
            if (rule_gpu_considered(s, k) && u->n && u->median < r->gpu_util_below)
                g = k;
        }
        if (g < 0)
            return false;
        double u = rule_fig(f, "gpu_util_median", s->gpu[g].s[STOKE_G_UTIL].median, "%");
        speedup = 100.0 / fmax(u, 10.0);
        stoke_say(starved, sizeof starved, "GPU %d utilization median %.0f%%", g, u);
    } else {
        if (!w)
            return false; /* CPU-only without the loader's numbers: cpu-underused judges */
        double wait = rule_fig(f, "data_wait_median", w->median, "%");
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
    rule_fig(f, "thread_core_median", th->median, "% of a core");
    rule_fig(f, "thread_core_p95", th->p95, "% of a core");
    rule_fig(f, "idle_cores", idle, "cores");
    rule_fig(f, "ncpu", s->ncpu, "cores");
    rule_fig(f, "cpu_busy_median", cpu->median, "%");
    rule_fig(f, "cores_needed", need, "cores");
    char job[64] = "";
    if (s->sys[STOKE_M_PROC_CPU].n)
        stoke_say(job, sizeof job, "; the job used %.1f cores",
                  rule_fig(f, "job_cores", s->sys[STOKE_M_PROC_CPU].median / 100.0, "cores"));
    stoke_say(
        f->evidence, sizeof f->evidence,
        "thread '%s' (TID %d of PID %d) ran at %.0f%% of a core (median of the busiest "
        "thread; p95 %.0f%%; the busiest in %zu of %zu samples) while %s and %.1f of %d cores "
        "were idle (CPUs %.0f%% busy)%s",
        t->comm, t->tid, t->pid, th->median, th->p95, s->busiest_thread_samples, th->n, starved,
        idle, s->ncpu, cpu->median, job);
    n = rule_more_workers(f, s, n);
    char knob[96];
    stoke_say(
        f->advice, sizeof f->advice,
        "one thread prepares the batches and cannot go faster: run %d loader worker%s to take "
        "the loading off it (%s; the thread's %.1f cores of work would need %d at full speed, %.1f "
        "cores idle here)%s",
        n, n == 1 ? "" : "s", rule_workers_knob(s, n, knob, sizeof knob), load, need, idle,
        rule_is_stoke(s) ? "" : ", with pin_memory=True and persistent_workers=True");
    return true;
}

/* A CPU-only job keeping fewer cores busy than it has. */
bool rule_check_cpu_underused(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (rule_any_gpu(s))
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
    const stoke_stats *dw = rule_data_wait(s);
    if (dw && dw->median >= r->data_wait_atleast)
        return false; /* waiting for data (data-wait), not short of threads */
    /* Cores other processes keep busy are not left idle: more threads would only share
     * them (cpu-contention judges that). */
    if (cpus_taken(r, s))
        return false;
    f->gpu = -1;
    rule_fig(f, job->n ? "job_cores" : "busy_cores", used, "cores");
    double p95 =
        rule_fig(f, job->n ? "job_cores_p95" : "busy_cores_p95",
                 job->n ? job->p95 / 100.0 : s->sys[STOKE_M_CPU].p95 / 100.0 * s->ncpu, "cores");
    rule_fig(f, "usable_cpus", cores, "cores");
    stoke_say(f->evidence, sizeof f->evidence, "%s used %.1f of %d cores (median; p95 %.1f)", who,
              used, cores, p95);
    char th[160], wk[96];
    bool known = rule_is_stoke(s) && s->program.threads > 0;
    int threads =
        (int)rule_change(f, "threads", "threads", known ? s->program.threads : NAN, cores, +1);
    if (known)
        stoke_say(th, sizeof th, "--threads %d (now %d)", threads, s->program.threads);
    else
        rule_threads_knob(s, threads, th, sizeof th);
    int n = rule_more_workers(f, s, rule_suggested_workers(s));
    stoke_say(f->advice, sizeof f->advice,
              "the work runs on fewer threads than there are cores: set %s, or use %d loader "
              "workers (%s)",
              th, n, rule_workers_knob(s, n, wk, sizeof wk));
    return true;
}
