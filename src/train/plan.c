/* plan.c - the models' memory plans at the run's batches: the options of the training
 * and the evaluation model, the plans (naming the largest batch the kernels take when
 * one is refused), the bytes they and the device slots need, the GPU's free memory,
 * and stoke_trainer_plan (the largest batch that fits a budget, for batch auto). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

/* The validation batch as run: a batch larger than the validation set is never
 * filled, and planning the evaluation model at it reserved memory for samples that do
 * not exist (256 x 224x224 images for 30 of them: 3.4 GB). The config keeps the value
 * given, so a resumed run on a larger set gets it back. */
int64_t train_val_batch(const stoke_trainer *t)
{
    int64_t b = t->cfg.val_batch_size;
    return t->val_count > 0 && t->val_count < b ? t->val_count : b;
}

/* The options of the training model (training) or of the inference model that
 * evaluates on the validation set: on the device decided, at the configured batches. */
stoke_model_opts train_model_opts(const stoke_trainer *t, bool training)
{
    const stoke_train_config *c = &t->cfg;
    return (stoke_model_opts){.max_batch = training ? c->batch_size : train_val_batch(t),
                              .epoch_samples = training ? train_epoch_samples(t) : t->val_count,
                              .precision = t->precision,
                              .optim = training ? t->optim : (stoke_optim){0},
                              .training = training,
                              .seed = c->seed,
                              .no_fusion = c->no_fusion,
                              .threads = t->threads,
                              .recompute = training && t->recompute,
                              .cuda = t->device != STOKE_TUNE_CPU,
                              .cuda_device = t->device,
                              .tf32 = t->decision.tf32};
}

/* stoke_graph_plan of a model of t's graph. A batch past what the kernels can index
 * fails at one layer, which names its own limit; the batch that fits the whole model is
 * what the user can give, so it is found (the sizes grow with the batch) and named. */
stoke_status train_plan_model(const stoke_trainer *t, const stoke_model_opts *o,
                              stoke_mem_plan *plan)
{
    stoke_status s = stoke_graph_plan(t->graph, o, plan);
    if (s != STOKE_ERR_ARG || o->max_batch <= 1)
        return s;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    stoke_model_opts q = *o;
    stoke_mem_plan p;
    int64_t lo = 0, hi = o->max_batch; /* lo plans (0: none found), hi does not */
    while (hi - lo > 1) {
        q.max_batch = lo + (hi - lo) / 2;
        if (stoke_graph_plan(t->graph, &q, &p) == STOKE_OK)
            lo = q.max_batch;
        else
            hi = q.max_batch;
    }
    if (lo == 0) /* not the batch: its message as it was */
        return stoke_fail(s, "%s", msg);
    return stoke_fail(
        s, "%s; the largest %s batch the model's kernels take is %" PRId64 " (%s %" PRId64 ")", msg,
        o->training ? "training" : "validation", lo,
        o->training ? "--batch-size" : "--val-batch-size", lo);
}

/* The recompute line: how many segments the training model checkpoints and the
 * activation bytes of a training batch without and with them. */
void train_report_recompute(stoke_trainer *t, const char *why)
{
    stoke_model_opts mo = train_model_opts(t, true);
    stoke_mem_plan on, off;
    mo.recompute = true;
    if (stoke_graph_plan(t->graph, &mo, &on) != STOKE_OK)
        return; /* the allocation that follows reports it */
    mo.recompute = false;
    if (stoke_graph_plan(t->graph, &mo, &off) != STOKE_OK)
        return;
    if (on.recompute_segments == 0) {
        train_info(t,
                   "recompute: on (%s), but the model has no cut to checkpoint at: every "
                   "activation is kept",
                   why);
        return;
    }
    char a[32], b[32];
    double batch = (double)t->cfg.batch_size;
    train_info(t,
               "recompute: on (%s; %d segments, activations %s -> %s per batch of %" PRId64
               ", recomputed in backward)",
               why, on.recompute_segments,
               stoke_format_bytes((double)off.activations_per_sample * batch, a, sizeof a),
               stoke_format_bytes((double)on.activations_per_sample * batch, b, sizeof b),
               t->cfg.batch_size);
}

/* recompute auto, still off: the first thing to try when the models do not fit. */
bool train_recompute_pending(const stoke_trainer *t)
{
    return !t->recompute && strcmp(t->cfg.recompute, "auto") == 0;
}

/* The bytes the training and validation models' plans take at the current batches. */
stoke_status train_planned_bytes(const stoke_trainer *t, size_t *bytes)
{
    const stoke_train_config *c = &t->cfg;
    stoke_model_opts mo = train_model_opts(t, true), eo = train_model_opts(t, false);
    stoke_mem_plan tp, ep = {0};
    stoke_status s = train_plan_model(t, &mo, &tp);
    if (s == STOKE_OK && t->val_d)
        s = train_plan_model(t, &eo, &ep);
    /* and the loaders' device slots, which the batches are copied into */
    size_t in = (size_t)stoke_shape_elems(&t->input.model_shape) * 4;
    *bytes = tp.total + ep.total + (size_t)t->decision.prefetch * (size_t)c->batch_size * in +
             (t->val_d ? 2 * (size_t)train_val_batch(t) * in : 0);
    return s;
}

/* The GPU's free memory, from the CUDA runtime. */
stoke_status train_gpu_free_bytes(int device, size_t *free_bytes)
{
    stoke_cudart *rt = NULL;
    size_t total = 0;
    int count = 0;
    stoke_status s = stoke_cudart_open(&rt);
    if (s == STOKE_OK)
        s = stoke_cudart_check_compute_api(rt);
    if (s == STOKE_OK)
        s = stoke_cudart_device_count(rt, &count);
    if (s == STOKE_OK && device >= count) /* the backend's words, for either caller */
        s = stoke_fail(STOKE_ERR_UNAVAILABLE, "CUDA device %d does not exist (%d found)", device,
                       count);
    if (s == STOKE_OK)
        s = stoke_cudart_set_device(rt, device);
    if (s == STOKE_OK)
        s = stoke_cudart_mem_info(rt, free_bytes, &total);
    stoke_cudart_close(rt);
    return s;
}

/* stoke_trainer_plan on a GPU: the plans of the CUDA backend against 90% of its free
 * memory (or the budget given), beside the validation model and the device slots. */
static stoke_status plan_on_gpu(stoke_trainer *t, size_t budget_bytes, stoke_mem_plan *plan,
                                int64_t *max_batch, size_t *budget_used, size_t *beside)
{
    const stoke_train_config *c = &t->cfg;
    stoke_model_opts mo = train_model_opts(t, true);
    size_t free_bytes = 0, all = 0;
    stoke_status s = train_plan_model(t, &mo, plan);
    if (s == STOKE_OK && !budget_bytes && !(c->memory_budget > 0))
        s = train_gpu_free_bytes(t->device, &free_bytes);
    if (s == STOKE_OK)
        s = train_planned_bytes(t, &all);
    if (s != STOKE_OK)
        return s;
    size_t budget = budget_bytes           ? budget_bytes
                    : c->memory_budget > 0 ? (size_t)c->memory_budget
                                           : free_bytes / 10 * 9;
    size_t in = (size_t)stoke_shape_elems(&t->input.model_shape) * 4;
    /* what train_planned_bytes counts beside the training model's plan and its slots */
    size_t others = all - plan->total - (size_t)t->decision.prefetch * (size_t)c->batch_size * in;
    *budget_used = budget;
    *beside = others;
    *max_batch = budget > others ? stoke_plan_max_batch(plan, budget - others,
                                                        (size_t)t->decision.prefetch * in)
                                 : 0;
    return STOKE_OK;
}

stoke_status stoke_trainer_plan(stoke_trainer *t, size_t budget_bytes, stoke_mem_plan *plan,
                                int64_t *max_batch, size_t *budget_used, size_t *beside)
{
    if (t->device != STOKE_TUNE_CPU)
        return plan_on_gpu(t, budget_bytes, plan, max_batch, budget_used, beside);
    stoke_model_opts mo = train_model_opts(t, true);
    stoke_status s = train_plan_model(t, &mo, plan);
    if (s != STOKE_OK)
        return s;
    /* The same budget as the check before allocating (train_check_memory): a given
     * budget covers the data held in memory; what is available now already excludes
     * it. The validation model takes its share too. */
    size_t budget, held = 0;
    stoke_mem_info mi;
    if (budget_bytes || t->cfg.memory_budget > 0) {
        budget = budget_bytes ? budget_bytes : (size_t)t->cfg.memory_budget;
        held = (size_t)t->held_bytes;
    } else {
        budget = stoke_mem_probe(NULL, &mi) == STOKE_OK && mi.available_bytes
                     ? (size_t)mi.available_bytes
                     : (size_t)t->machine.mem.available_bytes;
    }
    size_t others = held;
    if (t->val_d) {
        stoke_model_opts eo = train_model_opts(t, false);
        stoke_mem_plan ep;
        if ((s = train_plan_model(t, &eo, &ep)) != STOKE_OK)
            return s;
        others += ep.total + train_ring_per_sample(t, t->val_d, 0, 0) * (size_t)train_val_batch(t);
    }
    *budget_used = budget;
    *beside = others;
    *max_batch = budget > others
                     ? stoke_plan_max_batch(
                           plan, budget - others,
                           train_ring_per_sample(t, t->train_d, t->workers, t->decision.prefetch))
                     : 0;
    return STOKE_OK;
}
