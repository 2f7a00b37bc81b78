/* batch.c - the batch size, decided: batch_size auto is the largest batch whose exact
 * plan fits the device's free memory x memory_safety (the seeds' rule, with the plan in
 * place of their guess), a power of two, at most the samples, the steps an epoch needs
 * and, on the CPU, its starting point; effective_batch's accumulation. The trainer
 * measures the facts (train/batch.c) and applies the result. */
#include <inttypes.h>
#include <stdio.h>

#include "core/text.h"
#include "stoke/tune.h"

int64_t stoke_tune_pow2_floor(int64_t b)
{
    int64_t p = 1;
    while (p <= b / 2)
        p *= 2;
    return p;
}

size_t stoke_tune_batch_budget(size_t free_bytes, double safety)
{
    return (size_t)((double)free_bytes * safety);
}

stoke_status stoke_tune_batch_fit(const stoke_batch_fit *f, int64_t *cap, char *why, size_t n)
{
    char a[32], b[32], e[32], g[32], h[32];
    const stoke_mem_plan *plan = f->plan;
    size_t fixed = plan->params + plan->grads + plan->optim;
    *cap = 0;
    if (f->fit < 1)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "batch_size auto: not even batch 1 fits: %.0f%% of the %s %s is %s, "
                          "and the model's parameters, gradients and optimizer state take %s "
                          "beside %s for validation and the data held",
                          f->safety * 100, stoke_format_bytes((double)f->free_bytes, a, sizeof a),
                          f->free_what, stoke_format_bytes((double)f->budget, b, sizeof b),
                          stoke_format_bytes((double)fixed, e, sizeof e),
                          stoke_format_bytes((double)f->beside, g, sizeof g));
    *cap = f->pow2 ? stoke_tune_pow2_floor(f->fit) : f->fit;
    char p2[64] = "", ds[64] = "";
    if (f->pow2 && *cap != f->fit)
        stoke_say(p2, sizeof p2, ", rounded down to a power of two: %" PRId64, *cap);
    if (f->fit == f->samples)
        stoke_say(ds, sizeof ds, " (capped by the %" PRId64 " samples)", f->samples);
    stoke_say(why, n,
              "%.0f%% (memory_safety) of the %s %s = %s, less %s beside (validation, data "
              "held); the plan: %s + %s a sample: fits %" PRId64 "%s%s",
              f->safety * 100, stoke_format_bytes((double)f->free_bytes, a, sizeof a), f->free_what,
              stoke_format_bytes((double)f->budget, b, sizeof b),
              stoke_format_bytes((double)f->beside - (double)f->held, e, sizeof e),
              stoke_format_bytes((double)(fixed + plan->workspace), g, sizeof g),
              stoke_format_bytes((double)(plan->activations_per_sample + f->ring_per_sample), h,
                                 sizeof h),
              f->fit, ds, p2);
    return STOKE_OK;
}

int64_t stoke_tune_steps_cap(int64_t samples, int64_t accumulate, bool effective_given, char *why,
                             size_t n)
{
    why[0] = '\0';
    if (effective_given)
        return 0;
    int64_t per = (int64_t)STOKE_TUNE_MIN_EPOCH_STEPS * (accumulate > 1 ? accumulate : 1);
    int64_t cap = samples / per;
    if (cap < 1)
        cap = 1;
    char acc[48] = "";
    if (accumulate > 1)
        stoke_say(acc, sizeof acc, " of %" PRId64 " accumulated batches", accumulate);
    stoke_say(why, n,
              "at most %" PRId64 " keeps an epoch of %" PRId64 " samples at least %d optimizer "
              "steps%s",
              cap, samples, STOKE_TUNE_MIN_EPOCH_STEPS, acc);
    return cap;
}

int64_t stoke_tune_cpu_start_batch(char *why, size_t n)
{
    snprintf(why, n,
             "the CPU's throughput flattens past a few hundred samples; stoke tune measures it");
    return STOKE_TUNE_CPU_START_BATCH;
}

int64_t stoke_tune_batch_auto(int64_t fit, const char *fit_why, int64_t samples, int64_t accumulate,
                              bool effective_given, bool cpu, bool pow2, stoke_why *w)
{
    char steps_why[160], start_why[160], lead[200] = "";
    int64_t steps =
        stoke_tune_steps_cap(samples, accumulate, effective_given, steps_why, sizeof steps_why);
    if (steps > 0 && pow2)
        steps = stoke_tune_pow2_floor(steps);
    int64_t start = 0;
    if (cpu) {
        start = stoke_tune_cpu_start_batch(start_why, sizeof start_why);
        if (pow2)
            start = stoke_tune_pow2_floor(start);
    }
    int64_t batch = fit;
    if (steps > 0 && steps < batch && (start <= 0 || steps < start)) {
        batch = steps;
        stoke_say(lead, sizeof lead, "%" PRId64 " (%s%s); ", steps, steps_why,
                  pow2 ? ", a power of two" : "");
    } else if (start > 0 && start < batch) {
        batch = start;
        stoke_say(lead, sizeof lead, "%" PRId64 ", the CPU's starting point (%s); ", start,
                  start_why);
    }
    stoke_say(w->reason, sizeof w->reason, "%s%s%s", lead, lead[0] ? "fit: " : "", fit_why);
    w->source = STOKE_SRC_RULE;
    return batch;
}

int64_t stoke_tune_accumulate(int64_t effective, int64_t batch, stoke_why *w)
{
    int64_t accumulate = (effective + batch - 1) / batch;
    char reached[96] = "";
    if (accumulate * batch != effective)
        stoke_say(reached, sizeof reached,
                  "; %" PRId64 " is not a multiple: the effective batch is %" PRId64, effective,
                  accumulate * batch);
    w->source = STOKE_SRC_RULE;
    stoke_say(w->reason, sizeof w->reason,
              "effective_batch %" PRId64 " at batch %" PRId64 ": %" PRId64 " accumulated%s",
              effective, batch, accumulate, reached);
    return accumulate;
}
