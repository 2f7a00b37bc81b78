/* batch.c - batch_size auto and effective_batch: the largest batch whose exact plan
 * fits the device's free memory x memory_safety (the seeds' rule, with the plan in
 * place of their guess), a power of two, at most the samples; on the CPU the fit is a
 * cap on a starting point; the accumulation that reaches a target effective batch. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

int64_t train_cpu_start_batch(const stoke_trainer *t, char *why, size_t n)
{
    (void)t; /* the lead's measured search replaces this through the same call */
    snprintf(why, n,
             "the CPU's throughput flattens past a few hundred samples; stoke tune measures it");
    return TRAIN_CPU_START_BATCH;
}

int64_t train_steps_cap(const stoke_trainer *t, char *why, size_t n)
{
    const stoke_train_config *c = &t->cfg;
    why[0] = '\0';
    if (c->effective_batch > 0)
        return 0;
    int64_t per = (int64_t)TRAIN_MIN_EPOCH_STEPS * (c->accumulate > 1 ? c->accumulate : 1);
    int64_t cap = t->info.count / per;
    if (cap < 1)
        cap = 1;
    char acc[48] = "";
    if (c->accumulate > 1)
        stoke_say(acc, sizeof acc, " of %" PRId64 " accumulated batches", c->accumulate);
    stoke_say(why, n,
              "at most %" PRId64 " keeps an epoch of %" PRId64 " samples at least %d optimizer "
              "steps%s",
              cap, t->info.count, TRAIN_MIN_EPOCH_STEPS, acc);
    return cap;
}

/* The largest power of two <= b (b >= 1). */
static int64_t pow2_floor(int64_t b)
{
    int64_t p = 1;
    while (p <= b / 2)
        p *= 2;
    return p;
}

/* What the budget is a share of: the GPU's free memory, the host's available memory,
 * or --memory-budget; *held: the data held in memory the budget already covers. */
static stoke_status free_memory(stoke_trainer *t, size_t *bytes, const char **what, size_t *held)
{
    *held = 0;
    if (t->cfg.memory_budget > 0) {
        *bytes = (size_t)t->cfg.memory_budget;
        *what = "--memory-budget";
        return STOKE_OK;
    }
    if (t->device != STOKE_TUNE_CPU) {
        *what = "free on the GPU (cudaMemGetInfo)";
        return train_gpu_free_bytes(t->device, bytes);
    }
    /* what is available now already excludes the data held; the plan's budget rule
     * subtracts it from a given budget, so it is added back */
    stoke_mem_info mi;
    bool probed = stoke_mem_probe(NULL, &mi) == STOKE_OK && mi.available_bytes;
    *bytes = probed ? (size_t)mi.available_bytes : (size_t)t->machine.mem.available_bytes;
    *what = probed && mi.available_bytes < mi.meminfo_available_bytes
                ? "available under the cgroup's memory limit"
                : "available (MemAvailable)";
    *held = (size_t)t->held_bytes;
    if (*bytes == 0)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "batch_size auto: the available memory is unknown (give "
                          "--memory-budget or a batch size)");
    return STOKE_OK;
}

stoke_status train_fit_batch(stoke_trainer *t, double safety, bool pow2, int64_t *cap, char *why,
                             size_t n)
{
    stoke_train_config *c = &t->cfg;
    size_t free_bytes, held;
    const char *what;
    *cap = 0;
    stoke_status s = free_memory(t, &free_bytes, &what, &held);
    if (s != STOKE_OK)
        return s;
    size_t budget = (size_t)((double)free_bytes * safety);
    /* planned at batch 1: stoke_plan_max_batch re-plans every candidate exactly */
    int64_t given = c->batch_size;
    c->batch_size = 1;
    stoke_mem_plan plan;
    int64_t fit;
    size_t used, beside;
    s = stoke_trainer_plan(t, budget + held, &plan, &fit, &used, &beside);
    size_t ring =
        t->device != STOKE_TUNE_CPU
            ? (size_t)t->decision.prefetch * (size_t)stoke_shape_elems(&t->input.model_shape) * 4
            : train_ring_per_sample(t, t->train_d, t->workers, t->decision.prefetch);
    c->batch_size = given;
    if (s != STOKE_OK)
        return s;
    char a[32], b[32], e[32], f[32], g[32];
    size_t fixed = plan.params + plan.grads + plan.optim;
    if (fit < 1)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "batch_size auto: not even batch 1 fits: %.0f%% of the %s %s is %s, "
                          "and the model's parameters, gradients and optimizer state take %s "
                          "beside %s for validation and the data held",
                          safety * 100, stoke_format_bytes((double)free_bytes, a, sizeof a), what,
                          stoke_format_bytes((double)budget, b, sizeof b),
                          stoke_format_bytes((double)fixed, e, sizeof e),
                          stoke_format_bytes((double)beside, f, sizeof f));
    *cap = pow2 ? pow2_floor(fit) : fit;
    char p2[64] = "", ds[64] = "";
    if (pow2 && *cap != fit)
        stoke_say(p2, sizeof p2, ", rounded down to a power of two: %" PRId64, *cap);
    if (fit == t->info.count)
        stoke_say(ds, sizeof ds, " (capped by the %" PRId64 " samples)", t->info.count);
    stoke_say(why, n,
              "%.0f%% (memory_safety) of the %s %s = %s, less %s beside (validation, data "
              "held); the plan: %s + %s a sample: fits %" PRId64 "%s%s",
              safety * 100, stoke_format_bytes((double)free_bytes, a, sizeof a), what,
              stoke_format_bytes((double)budget, b, sizeof b),
              stoke_format_bytes((double)beside - (double)held, e, sizeof e),
              stoke_format_bytes((double)(fixed + plan.workspace), f, sizeof f),
              stoke_format_bytes((double)(plan.activations_per_sample + ring), g, sizeof g), fit,
              ds, p2);
    return STOKE_OK;
}

/* batch_size auto: the smallest of the memory fit, the steps an epoch needs and (on the
 * CPU) its starting point, into cfg and the decision, the bound that decided it first
 * in the reason. */
static stoke_status auto_batch(stoke_trainer *t)
{
    stoke_train_config *c = &t->cfg;
    stoke_why *w = &t->decision.batch_why;
    char fit[320];
    int64_t cap;
    stoke_status s = train_fit_batch(t, c->memory_safety, c->batch_pow2, &cap, fit, sizeof fit);
    if (s != STOKE_OK)
        return s;
    char steps_why[160], start_why[160], lead[200] = "";
    int64_t steps = train_steps_cap(t, steps_why, sizeof steps_why);
    if (steps > 0 && c->batch_pow2)
        steps = pow2_floor(steps);
    int64_t start = 0;
    if (t->device == STOKE_TUNE_CPU) {
        start = train_cpu_start_batch(t, start_why, sizeof start_why);
        if (c->batch_pow2)
            start = pow2_floor(start);
    }
    c->batch_size = cap;
    if (steps > 0 && steps < c->batch_size && (start <= 0 || steps < start)) {
        c->batch_size = steps;
        stoke_say(lead, sizeof lead, "%" PRId64 " (%s%s); ", steps, steps_why,
                  c->batch_pow2 ? ", a power of two" : "");
    } else if (start > 0 && start < c->batch_size) {
        c->batch_size = start;
        stoke_say(lead, sizeof lead, "%" PRId64 ", the CPU's starting point (%s); ", start,
                  start_why);
    }
    stoke_say(w->reason, sizeof w->reason, "%s%s%s", lead, lead[0] ? "fit: " : "", fit);
    w->source = STOKE_SRC_RULE;
    t->decision.batch = c->batch_size;
    return STOKE_OK;
}

/* effective_batch: the accumulation that reaches it at the decided batch. */
static stoke_status effective(stoke_trainer *t)
{
    stoke_train_config *c = &t->cfg;
    stoke_why *w = &t->decision.accumulate_why;
    w->source = (stoke_source)stoke_train_config_source(c, "accumulate");
    if (c->effective_batch <= 0)
        return STOKE_OK;
    /* a resumed run's own value yields to the other one given now */
    stoke_cfg_source as = stoke_train_config_source(c, "accumulate"),
                     es = stoke_train_config_source(c, "effective_batch");
    bool a_given = as != STOKE_CFG_DEFAULT && as != STOKE_CFG_CHECKPOINT;
    if (a_given && es == STOKE_CFG_CHECKPOINT)
        return STOKE_OK;
    if (a_given)
        return stoke_fail(STOKE_ERR_ARG,
                          "effective_batch (%s) and accumulate (%s) both set the accumulation: "
                          "give one",
                          stoke_cfg_source_name(es), stoke_cfg_source_name(as));
    c->accumulate = (c->effective_batch + c->batch_size - 1) / c->batch_size;
    char reached[96] = "";
    if (c->accumulate * c->batch_size != c->effective_batch)
        stoke_say(reached, sizeof reached,
                  "; %" PRId64 " is not a multiple: the effective batch is %" PRId64,
                  c->effective_batch, c->accumulate * c->batch_size);
    w->source = STOKE_SRC_RULE;
    stoke_say(w->reason, sizeof w->reason,
              "effective_batch %" PRId64 " at batch %" PRId64 ": %" PRId64 " accumulated%s",
              c->effective_batch, c->batch_size, c->accumulate, reached);
    return STOKE_OK;
}

stoke_status train_decide_batch(stoke_trainer *t)
{
    stoke_train_config *c = &t->cfg;
    stoke_status s = c->batch_size == 0 ? auto_batch(t) : STOKE_OK;
    /* A batch past the samples is never filled, yet the models would be planned for it
     * (--batch-size 100000 on 1000 samples hit the kernels' size limit) */
    int64_t given = c->batch_size;
    if (s == STOKE_OK && t->info.count > 0 && c->batch_size > t->info.count) {
        c->batch_size = t->info.count;
        t->decision.batch = c->batch_size;
    }
    if (s == STOKE_OK)
        s = effective(t);
    if (s != STOKE_OK)
        return s;
    const stoke_decision *d = &t->decision;
    if (t->tuned.batch && t->tuned.pending[0])
        train_tuned_pending(t, &t->decision.batch_why); /* the rule decided: say why */
    if (given != c->batch_size)
        train_info(t,
                   "batch: %" PRId64 " (capped by the %" PRId64 " training samples; %" PRId64
                   " given (%s))",
                   c->batch_size, t->info.count, given, stoke_source_name(d->batch_why.source));
    else if (stoke_source_decided(d->batch_why.source))
        /* a pending reason begins "auto, not measured yet": no second "auto" before it */
        train_info(t, "batch: %" PRId64 " (%s%s)", c->batch_size,
                   d->batch_why.source == STOKE_SRC_CACHED ? "cached: "
                   : t->tuned.batch && t->tuned.pending[0] ? ""
                                                           : "auto: ",
                   d->batch_why.reason);
    if (d->accumulate_why.source == STOKE_SRC_RULE)
        train_info(t, "accumulate: %" PRId64 " (auto: %s)", c->accumulate,
                   d->accumulate_why.reason);
    return STOKE_OK;
}
