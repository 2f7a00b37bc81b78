/* allocate.c - the models allocated on the device decided: the memory check (the CPU's
 * plans and the loaders' rings against the budget), recompute auto, and halving the
 * micro-batch (twice the accumulation, the same effective batch) until they fit, at
 * setup and after an allocation that fails within training (the models' state
 * carried into the rebuilt ones). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

/* The CPU's models: their plans and the loaders' rings against the memory budget
 * (train_check_memory); *left: what remains for the rings. */
static stoke_status check_host_memory(const stoke_trainer *t, const size_t ring[2], size_t *left)
{
    const stoke_train_config *c = &t->cfg;
    stoke_model_opts mo = train_model_opts(t, true), eo = train_model_opts(t, false);
    stoke_mem_plan tp, ep;
    stoke_status s;
    if ((s = train_plan_model(t, &mo, &tp)) != STOKE_OK ||
        (t->val_d && (s = train_plan_model(t, &eo, &ep)) != STOKE_OK))
        return s;
    train_mem_need need[2] = {{"training", &tp, "--batch-size", ring[0]},
                              {"validation", &ep, "--val-batch-size", ring[1]}};
    /* --memory-budget covers the data held in memory too; otherwise what is available
     * now already excludes it */
    double budget = c->memory_budget > t->held_bytes ? c->memory_budget - t->held_bytes
                    : c->memory_budget > 0           ? 1
                                                     : 0;
    return train_check_memory(stoke_model_file_describe(t->mf), need, t->val_d ? 2 : 1, budget,
                              left);
}

/* A GPU's models live in its memory (fit_gpu_batch fitted them); host memory holds the
 * loaders' rings only, which the loaders check against *left themselves. */
static stoke_status host_left_for_rings(const stoke_trainer *t, const size_t ring[2], size_t *left)
{
    stoke_mem_info mi;
    *left = 0; /* unknown: no limit */
    if (stoke_mem_probe(NULL, &mi) != STOKE_OK || mi.available_bytes == 0)
        return STOKE_OK;
    size_t rings = ring[0] * (size_t)t->cfg.batch_size + ring[1] * (size_t)train_val_batch(t);
    char a[32], b[32];
    if (rings > mi.available_bytes)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "not enough memory for the loaders' rings: %s, and %s is available; "
                          "--prefetch or --batch-size lowers them",
                          stoke_format_bytes((double)rings, a, sizeof a),
                          stoke_format_bytes((double)mi.available_bytes, b, sizeof b));
    *left = (size_t)mi.available_bytes - rings;
    return STOKE_OK;
}

/* The training model and (with a validation set) the inference model, allocated when
 * their plans and the loaders' rings fit in memory. ring[]: the training and the
 * validation loaders' bytes per sample; *left: the memory that remains for the rings
 * (0: unknown). */
static stoke_status allocate_models(stoke_trainer *t, size_t ring[2], size_t *left)
{
    const stoke_train_config *c = &t->cfg;
    /* epoch_samples: the epoch's last, smaller batch is planned too (the kernels'
     * workspace at a smaller batch can be larger). Evaluation runs on its own inference
     * model (no gradients or saved activations), so a large validation batch does not
     * size the training arenas. */
    stoke_model_opts mo = train_model_opts(t, true), eo = train_model_opts(t, false);
    ring[0] = train_ring_per_sample(t, t->train_d, t->workers, t->decision.prefetch);
    ring[1] = t->val_d ? train_ring_per_sample(t, t->val_d, 0, 0) : 0;
    stoke_status s =
        mo.cuda ? host_left_for_rings(t, ring, left) : check_host_memory(t, ring, left);
    /* the CPU's plan check names the batch that fits: a given batch is not halved
     * behind it; an allocation that fails is */
    t->plan_refused = s == STOKE_ERR_NOMEM && !mo.cuda;
    if (s != STOKE_OK)
        return s;
    /* gigabytes of arenas take seconds to allocate and clear, before any progress line */
    stoke_mem_plan tp, ep = {0};
    char a[32], b[32], v[96] = "";
    if (train_plan_model(t, &mo, &tp) == STOKE_OK &&
        (!t->val_d || train_plan_model(t, &eo, &ep) == STOKE_OK)) {
        if (t->val_d)
            snprintf(v, sizeof v, ", validation %s at batch %" PRId64,
                     stoke_format_bytes((double)ep.total, b, sizeof b), eo.max_batch);
        train_info(t, "preparing: allocating the models: training %s at batch %" PRId64 "%s...",
                   stoke_format_bytes((double)tp.total, a, sizeof a), mo.max_batch, v);
    }
    if ((s = stoke_model_new(t->graph, &mo, &t->model)) != STOKE_OK)
        return s;
    if (t->val_d && (s = stoke_model_new(t->graph, &eo, &t->eval_model)) != STOKE_OK)
        return s;
    /* a device model's targets are converted on the host first; the CPU's in place */
    int64_t most = c->batch_size > train_val_batch(t) ? c->batch_size : train_val_batch(t);
    free(t->target_stage);
    t->target_stage = NULL;
    if (mo.cuda && !(t->target_stage =
                         calloc((size_t)most * (size_t)(t->target_elems ? t->target_elems : 1), 4)))
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    return STOKE_OK;
}

/* Half the micro-batch, twice the accumulation: the same effective batch, said. */
static void halve(stoke_trainer *t, const char *why)
{
    stoke_train_config *c = &t->cfg;
    c->batch_size /= 2;
    c->accumulate *= 2;
    if (train_val_batch(t) >
        1) /* from the batch run, or halving a 256 over 30 samples frees nothing */
        c->val_batch_size = train_val_batch(t) / 2;
    t->decision.batch = c->batch_size;
    train_info(t,
               "out of %s memory (%s): batch %" PRId64 " x %" PRId64
               " accumulated instead, the same effective batch",
               t->device != STOKE_TUNE_CPU ? "GPU" : "host", why, c->batch_size, c->accumulate);
}

/* Halves the micro-batch (doubling accumulation) until the models' exact plans fit in
 * 90% of the GPU's free memory (the rest: the libraries' handles and pools); an error
 * with the numbers when not even batch 1 fits. */
static stoke_status fit_gpu_batch(stoke_trainer *t)
{
    stoke_train_config *c = &t->cfg;
    size_t free_bytes = 0, need = 0;
    stoke_status s = train_gpu_free_bytes(t->device, &free_bytes);
    if (s != STOKE_OK)
        return s;
    size_t budget = free_bytes / 10 * 9;
    /* recompute auto: cheaper than a smaller batch, which leaves the GPU less to do */
    if (train_recompute_pending(t) && (s = train_planned_bytes(t, &need)) == STOKE_OK &&
        need > budget) {
        char why[160];
        snprintf(why, sizeof why,
                 "auto: the plan needs %.1f MB of GPU memory without it, 90%% of the %.1f MB "
                 "free is %.1f MB",
                 need / 1e6, free_bytes / 1e6, budget / 1e6);
        t->recompute = true;
        train_report_recompute(t, why);
    }
    if (s != STOKE_OK)
        return s;
    /* batch 1 first: if even that does not fit, halving would only print lines */
    int64_t b = c->batch_size, vb = c->val_batch_size;
    c->batch_size = c->val_batch_size = 1;
    s = train_planned_bytes(t, &need);
    c->batch_size = b;
    c->val_batch_size = vb;
    if (s == STOKE_OK && need > budget)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "model %s needs %.1f MB of GPU memory at batch 1 (parameters, "
                          "gradients, optimizer state, activations, workspace); 90%% of the "
                          "%.1f MB free on cuda:%d is %.1f MB",
                          stoke_model_file_describe(t->mf), need / 1e6, free_bytes / 1e6, t->device,
                          budget / 1e6);
    while ((s = train_planned_bytes(t, &need)) == STOKE_OK && need > budget && c->batch_size > 1) {
        c->batch_size /= 2;
        c->accumulate *= 2;
        if (train_val_batch(t) > 1)
            c->val_batch_size = train_val_batch(t) / 2;
        train_info(t,
                   "GPU memory: the plan needs %.1f MB, 90%% of the %.1f MB free is %.1f MB: "
                   "batch %" PRId64 " x %" PRId64 " accumulated instead, the same effective batch",
                   need / 1e6, free_bytes / 1e6, budget / 1e6, c->batch_size, c->accumulate);
    }
    return s;
}

/* Models that cannot be allocated at this batch: half the micro-batch, twice the
 * accumulation, the same effective batch (seed 004's advice, applied), down to batch
 * 1. On a GPU every buffer is allocated up front, so this is where it runs out; on the
 * CPU an allocation refused (the plan check's refusal names the batch that fits). */
static stoke_status allocate_halving(stoke_trainer *t, size_t ring[2], size_t *left)
{
    stoke_train_config *c = &t->cfg;
    stoke_status s = t->device != STOKE_TUNE_CPU ? fit_gpu_batch(t) : STOKE_OK;
    if (s != STOKE_OK)
        return s;
    while ((s = allocate_models(t, ring, left)) == STOKE_ERR_NOMEM &&
           (train_recompute_pending(t) ||
            (!t->plan_refused && c->batch_size > 1 && c->accumulate <= (1 << 15)))) {
        char why[300];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        stoke_model_free(t->model);
        stoke_model_free(t->eval_model);
        t->model = t->eval_model = NULL;
        if (train_recompute_pending(t)) {
            t->recompute = true;
            train_report_recompute(t, "auto: the models did not fit without it");
            continue;
        }
        halve(t, why);
    }
    return s;
}

/* The models on the device decided; under device auto, a GPU the CUDA backend cannot
 * run on (no kernel module, no cuBLAS) falls back to the CPU, saying why: decided
 * again for the CPU (precision and threads follow the device). */
stoke_status train_allocate(stoke_trainer *t, size_t ring[2], size_t *left)
{
    stoke_status s = allocate_halving(t, ring, left);
    if (s != STOKE_ERR_UNAVAILABLE || t->device == STOKE_TUNE_CPU ||
        t->decision.device_why.source != STOKE_SRC_RULE)
        return s;
    char reason[400];
    snprintf(reason, sizeof reason, "the CUDA backend cannot run on cuda:%d: %s", t->device,
             stoke_last_error());
    stoke_model_free(t->model);
    stoke_model_free(t->eval_model);
    t->model = t->eval_model = NULL;
    if ((s = train_apply_decision(t, reason)) != STOKE_OK)
        return s;
    train_setup_mfu(t);
    return allocate_models(t, ring, left);
}

/* A model's state that a rebuilt model takes over: weights, optimizer state, steps
 * and loss scale, on the host. */
typedef struct model_state {
    float **v; /* param i, then its optimizer slots: (1 + slots) x nparams */
    int n, slots;
    int64_t steps;
    float scale;
} model_state;

static void state_free(model_state *st)
{
    for (int i = 0; st->v && i < st->n * (1 + st->slots); i++)
        free(st->v[i]);
    free(st->v);
}

/* Each buffer of m (param or slot - 1) i, into or out of the snapshot. */
static stoke_status state_copy(stoke_model *m, model_state *st, bool save)
{
    const stoke_graph *g = stoke_model_graph(m);
    for (int slot = -1; slot < st->slots; slot++)
        for (int i = 0; i < st->n; i++) {
            float *dev = slot < 0 ? stoke_model_param(m, i) : stoke_model_optim_state(m, i, slot);
            float **h = &st->v[(slot + 1) * st->n + i];
            size_t bytes = (size_t)stoke_graph_param(g, i)->elems * sizeof(float);
            if (!dev)
                continue;
            if (save && !(*h = malloc(bytes)))
                return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
            stoke_status s =
                save ? stoke_model_read(m, dev, *h, bytes) : stoke_model_write(m, dev, *h, bytes);
            if (s != STOKE_OK)
                return s;
        }
    if (save) {
        st->steps = stoke_model_step_count(m);
        st->scale = stoke_model_loss_scale(m);
        return STOKE_OK;
    }
    stoke_model_params_changed(m);
    stoke_model_set_step_count(m, st->steps);
    stoke_model_set_loss_scale(m, st->scale);
    return stoke_model_sync(m);
}

stoke_status train_halve_batch(stoke_trainer *t, stoke_sampler_state from, const char *err)
{
    stoke_train_config *c = &t->cfg;
    if (c->batch_size <= 1 || c->accumulate > (1 << 15))
        return stoke_fail(STOKE_ERR_NOMEM, "%s (at batch %" PRId64 ": nothing left to halve)", err,
                          c->batch_size);
    model_state st = {.n = stoke_graph_param_count(t->graph),
                      .slots = stoke_model_optim_slots(t->model)};
    st.v = calloc((size_t)st.n * (size_t)(1 + st.slots) + 1, sizeof *st.v);
    stoke_status s = st.v ? state_copy(t->model, &st, true) : STOKE_ERR_NOMEM;
    if (s == STOKE_OK) {
        train_stop_pipeline(t);
        stoke_model_free(t->model);
        stoke_model_free(t->eval_model);
        t->model = t->eval_model = NULL;
        halve(t, err);
        size_t ring[2], left;
        s = allocate_halving(t, ring, &left);
        if (s == STOKE_OK)
            s = state_copy(t->model, &st, false);
        t->start = from;
        if (s == STOKE_OK)
            s = train_start_pipeline(t, ring, left);
        if (s == STOKE_OK && t->monitor)
            stoke_monitor_start(t->monitor);
    }
    state_free(&st);
    return s;
}
