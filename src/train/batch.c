/* batch.c - batch_size auto and effective_batch for the trainer: the facts the rule in
 * tune/batch.c decides from (the device's free memory, the exact plans of the models at
 * each batch, the samples), measured; what it decides applied to the config and the
 * decision, and said. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

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
    int local = t->world ? stoke_dist_local_size(t->world) : 1;
    if (local > 1) { /* the ranks on this machine share its memory */
        *bytes /= (size_t)local;
        *what = probed && mi.available_bytes < mi.meminfo_available_bytes
                    ? "this rank's share of what is available under the cgroup's memory limit"
                    : "this rank's share of what is available (MemAvailable / the ranks here)";
    }
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
    stoke_batch_fit f = {.safety = safety, .samples = t->info.count, .pow2 = pow2};
    *cap = 0;
    stoke_status s = free_memory(t, &f.free_bytes, &f.free_what, &f.held);
    if (s != STOKE_OK)
        return s;
    f.budget = stoke_tune_batch_budget(f.free_bytes, safety);
    /* planned at batch 1: stoke_plan_max_batch re-plans every candidate exactly */
    int64_t given = c->batch_size;
    c->batch_size = 1;
    stoke_mem_plan plan;
    size_t used;
    s = stoke_trainer_plan(t, f.budget + f.held, &plan, &f.fit, &used, &f.beside);
    f.plan = &plan;
    f.ring_per_sample =
        t->device != STOKE_TUNE_CPU
            ? (size_t)t->decision.prefetch * (size_t)stoke_shape_elems(&t->input.model_shape) * 4
            : train_ring_per_sample(t, t->train_d, t->workers, t->decision.prefetch);
    c->batch_size = given;
    if (s != STOKE_OK)
        return s;
    return stoke_tune_batch_fit(&f, cap, why, n);
}

/* batch_size auto: tune's rule on the memory fit measured, into cfg and the decision. */
static stoke_status auto_batch(stoke_trainer *t)
{
    stoke_train_config *c = &t->cfg;
    char fit[320];
    int64_t cap;
    stoke_status s = train_fit_batch(t, c->memory_safety, c->batch_pow2, &cap, fit, sizeof fit);
    if (s != STOKE_OK)
        return s;
    c->batch_size =
        stoke_tune_batch_auto(cap, fit, t->info.count, c->accumulate, c->effective_batch > 0,
                              t->device == STOKE_TUNE_CPU, c->batch_pow2, &t->decision.batch_why);
    t->decision.batch = c->batch_size;
    return STOKE_OK;
}

/* effective_batch: the accumulation that reaches it at the decided batch, unless the
 * config's sources say the accumulation given wins. */
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
    /* over the world: each step takes world x batch x accumulate samples */
    int64_t world = train_world(t);
    c->accumulate = stoke_tune_accumulate(c->effective_batch, world * c->batch_size, w);
    if (world > 1)
        stoke_more(w->reason, sizeof w->reason, " (%" PRId64 " ranks x batch %" PRId64 ")", world,
                   c->batch_size);
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
    if (s == STOKE_OK) /* every rank the same batch, before the accumulation is decided */
        s = train_dist_agree_batch(t);
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
