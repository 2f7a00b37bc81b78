/* rules.c - the diagnosis: the table of rules over a run's summary, run in its order,
 * and the report of what fired. Thresholds live in the table rows (see docs/monitor.md);
 * each row's check is in rules_input.c, rules_cpu.c, rules_gpu.c or rules_dist.c, and
 * the fields a finding records in finding.c. */
#include "monitor/rules_impl.h"

#include <stdio.h>
#include <string.h>

#include "core/text.h"

/* The table. Order matters: findings print in this order, and the first BOUND finding
 * names the resource that bounded the run. */
static const stoke_rule rules[] = {
    {.id = "startup",
     .kind = STOKE_RULE_WARNING,
     .resource = "startup before the first GPU work",
     .startup_frac_atleast = 0.3,
     .check = rule_check_startup},
    /* The ranks first: one rank's pace sets every rank's, which no single process's
     * figures show. A wait under 15% of the step costs less than the run-to-run spread of
     * step times; a rank waiting under half the others' wait differs from them by at
     * least 7.5% of a step, more than jitter; 10% of its step waiting for batches is the
     * data-wait rule's own threshold. */
    {.id = "rank-straggler",
     .kind = STOKE_RULE_BOUND,
     .resource = "one rank (the others wait for it at the all-reduce)",
     .reduce_wait_atleast = 15,
     .wait_ratio_below = 0.5,
     .input_wait_atleast = 10,
     .check = rule_check_rank_straggler},
    {.id = "allreduce-exposed",
     .kind = STOKE_RULE_BOUND,
     .resource = "the gradients' all-reduce (communication)",
     .reduce_wait_atleast = 15,
     .wait_ratio_below = 0.5,
     .check = rule_check_allreduce_exposed},
    {.id = "data-wait",
     .kind = STOKE_RULE_BOUND,
     .resource = "input pipeline (data loader)",
     .data_wait_atleast = 10,
     .busy_frac_atleast = 0.9,
     .cpu_atleast = 90,
     .fill_below = 1,
     .iowait_atleast = 10,
     .check = rule_check_data_wait},
    {.id = "cpu-contention",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU shared with other processes",
     .cpu_atleast = 90,
     .others_cores_atleast = 0.5,
     .excess_cores_atleast = 0.5,
     .thread_share_below = 0.6,
     .job_cores_atleast = 0.1,
     .gpu_util_atleast = 80,
     .check = rule_check_contention},
    {.id = "input-bound-thread",
     .kind = STOKE_RULE_BOUND,
     .resource = "one CPU thread (input pipeline on one thread)",
     .gpu_util_below = 50,
     .data_wait_atleast = 10,
     .thread_core_atleast = 90,
     .idle_cores_atleast = 0.5,
     .check = rule_check_thread_bound},
    {.id = "io-bound",
     .kind = STOKE_RULE_BOUND,
     .resource = "storage (I/O)",
     .gpu_util_below = 50,
     .iowait_atleast = 10,
     .check = rule_check_io_bound},
    {.id = "input-bound-cpu",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU (input pipeline)",
     .gpu_util_below = 50,
     .cpu_atleast = 85,
     .data_wait_atleast = 10,
     .job_cores_atleast = 0.5,
     .job_share_atleast = 0.25,
     .check = rule_check_input_bound},
    {.id = "cpu-underused",
     .kind = STOKE_RULE_BOUND,
     .resource = "CPU threads (cores left idle)",
     .job_cores_atleast = 0.5,
     .cores_frac_below = 0.75,
     .data_wait_atleast = 10,
     .cpu_atleast = 90,
     .others_cores_atleast = 0.5,
     .check = rule_check_cpu_underused},
    {.id = "memory-nearly-full",
     .kind = STOKE_RULE_RISK,
     .resource = "memory",
     .mem_frac_atleast = 0.95,
     .mem_target_frac = 0.85,
     .check = rule_check_memory_full},
    /* A Ctrl-C on mpirun that kills the ranks before rank 0 saves: the checkpoint asked
     * for is lost (no threshold: the grace is OpenMPI's, the need measured). */
    {.id = "stop-grace",
     .kind = STOKE_RULE_RISK,
     .resource = "the stop on Ctrl-C (mpirun's grace before SIGKILL)",
     .check = rule_check_stop_grace},
    {.id = "throttling",
     .kind = STOKE_RULE_WARNING,
     .resource = "GPU clocks (power/thermal)",
     .samples_frac_atleast = 0.2,
     .check = rule_check_throttle},
    {.id = "batch-can-grow",
     .kind = STOKE_RULE_WARNING,
     .resource = "GPU memory (unused)",
     .gpu_util_atleast = 60,
     .mem_frac_below = 0.5,
     .mem_target_frac = 0.8,
     .check = rule_check_batch_grow},
    {.id = "low-gpu-util",
     .kind = STOKE_RULE_WARNING,
     .resource = "GPU (idle)",
     .gpu_util_below = 30,
     .check = rule_check_low_util},
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
        f.rank = -1;
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