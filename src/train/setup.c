/* setup.c - stoke_trainer_new: the checkpoint to resume, the machine and what to do on
 * it (precision, threads), the data, the model and its optimizer, the memory check,
 * the loaders, the monitor and the log; and the trainer's end. The loop is loop.c. */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/parse.h"
#include "core/text.h"
#include "core/tmpfile.h"
#include "train/trainer.h"

/* What the precision line adds when the CPU has no kernels of that precision. */
static const char *emulated_note(stoke_precision p)
{
    if (stoke_nn_precision_native(p))
        return "";
    return p == STOKE_PREC_BF16
               ? "; emulated: oneDNN has no bf16 kernels on this CPU (they start at AVX-512), "
                 "so operands are rounded to bf16 and the math runs in fp32, no faster than fp32"
               : "; emulated: the CPU kernels have no fp16 path, so operands are rounded to "
                 "fp16 and the math runs in fp32, no faster than fp32";
}

/* The config layer's sources are the tuner's first ones. */
_Static_assert((int)STOKE_CFG_DEFAULT == (int)STOKE_SRC_DEFAULT &&
                   (int)STOKE_CFG_FILE == (int)STOKE_SRC_FILE &&
                   (int)STOKE_CFG_ENV == (int)STOKE_SRC_ENV &&
                   (int)STOKE_CFG_FLAG == (int)STOKE_SRC_FLAG &&
                   (int)STOKE_CFG_CHECKPOINT == (int)STOKE_SRC_CHECKPOINT,
               "stoke_cfg_source and stoke_source differ");

/* The run's request to the tuner: the settings the user gave (each with its source)
 * or left open, and the facts of the data it runs on. */
static stoke_tune_request tune_request(const stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
#define SRC(key) ((stoke_source)stoke_train_config_source(c, key))
    return (stoke_tune_request){.device = c->device,
                                .device_src = SRC("device"),
                                .precision = c->precision,
                                .precision_src = SRC("precision"),
                                .workers = (int)c->workers,
                                .workers_src = SRC("workers"),
                                .threads = (int)c->threads,
                                .threads_src = SRC("threads"),
                                .prefetch = (int)c->prefetch,
                                .prefetch_src = SRC("prefetch"),
                                .batch = c->batch_size,
                                .batch_src = SRC("batch_size"),
                                .in_memory = t->train_d != t->train_src,
                                .cheap_transform = !c->augment || (t->input.in_dtype == STOKE_U8 &&
                                                                   !strcmp(c->transforms, "crop")),
                                .profiles = &t->profiles};
#undef SRC
}

/* Settings measured (tune.c) carry their provenance and the measurements' reason. */
static void tuned_sources(const stoke_trainer *t, stoke_tune_request *q)
{
    const struct train_tuned *u = &t->tuned;
    if (!u->applied)
        return;
    if (u->batch)
        q->batch_src = u->source;
    if (u->workers)
        q->workers_src = u->source;
    if (u->prefetch)
        q->prefetch_src = u->source;
    if (u->threads)
        q->threads_src = u->source;
    if (u->precision)
        q->precision_src = u->source;
}

void train_tuned_pending(const stoke_trainer *t, stoke_why *w)
{
    char rule[sizeof w->reason];
    memcpy(rule, w->reason, sizeof rule);
    stoke_say(w->reason, sizeof w->reason, "%s: %s", t->tuned.pending, rule);
}

static void tuned_reasons(const stoke_trainer *t, stoke_decision *d)
{
    const struct train_tuned *u = &t->tuned;
    if (!u->applied && !u->pending[0])
        return;
    struct {
        bool on;
        stoke_why *w;
        const char *why;
    } v[] = {{u->batch, &d->batch_why, u->why_batch},
             {u->workers, &d->workers_why, u->why_workers},
             {u->prefetch, &d->prefetch_why, u->why_prefetch},
             {u->threads, &d->threads_why, u->why_threads},
             {u->precision, &d->precision_why, u->why_precision}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        if (!v[i].on)
            continue;
        if (u->applied) {
            /* a value measured but given to the rules as if given: its source and
             * reason are the measurement's (tune.c leaves no reason empty) */
            v[i].w->source = u->source;
            stoke_say(v[i].w->reason, sizeof v[i].w->reason, "%s", v[i].why);
            continue;
        }
        train_tuned_pending(t, v[i].w);
    }
}

/* "(flag)", or for a decided setting its reason. */
static const char *given_or_why(const stoke_why *w, char *buf, size_t n)
{
    if (w->source == STOKE_SRC_CACHED)
        stoke_say(buf, n, "cached: %s", w->reason);
    else
        stoke_say(buf, n, "%s",
                  stoke_source_decided(w->source) ? w->reason : stoke_source_name(w->source));
    return buf;
}

/* The CUDA runtime sees GPU `device`: checked before anything is said about it (its
 * precision, pinned memory, peak), so that a machine without a driver is told so first. */
static stoke_status check_cuda_device(int device)
{
    stoke_cudart *rt = NULL;
    int count = 0;
    stoke_status s = stoke_cudart_open(&rt);
    if (s == STOKE_OK)
        s = stoke_cudart_device_count(rt, &count);
    if (s == STOKE_OK && device >= count) /* the backend's words, as elsewhere */
        s = stoke_fail(STOKE_ERR_UNAVAILABLE, "CUDA device %d does not exist (%d found)", device,
                       count);
    stoke_cudart_close(rt);
    return s;
}

/* The "auto: " a line's reason starts with: decided now, by a rule or trials. */
static const char *auto_prefix(const stoke_why *w)
{
    return w->source == STOKE_SRC_RULE || w->source == STOKE_SRC_MEASURED ? "auto: " : "";
}

/* What tune decided, applied (the compute threads; the rest is read from t->decision
 * where the models and loaders are made) and printed. */
/* " + 1 left to other processes (busy on about 1.2 CPUs at the start)" when the threads'
 * rule took CPUs out for them; "" otherwise. */
static const char *others_note(const stoke_trainer *t, const stoke_decision *d, char *buf,
                               size_t size)
{
    buf[0] = '\0';
    int left = d->available_cpus - d->threads - d->workers; /* the 1-thread floor may eat in */
    if (d->others_cpus > 0 && left > 0 && d->threads_why.source == STOKE_SRC_RULE)
        snprintf(buf, size, " + %d left to other processes (busy on about %.1f CPUs at the start)",
                 left, t->machine.load.others_cpus);
    return buf;
}

static stoke_status apply_decision(stoke_trainer *t, const char *cpu_because)
{
    stoke_tune_request q = tune_request(t);
    tuned_sources(t, &q);
    if (cpu_because)
        q.device = "cpu";
    stoke_status s = stoke_decide(&t->machine, &t->recs, &q, &t->decision);
    if (s != STOKE_OK)
        return s;
    if (t->decision.device != STOKE_TUNE_CPU && check_cuda_device(t->decision.device) != STOKE_OK) {
        char why[400], reason[480];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        if (t->decision.device_why.source != STOKE_SRC_RULE)
            return stoke_fail(STOKE_ERR_UNAVAILABLE,
                              "device cuda:%d (%s): %s; or train on the CPU (--device cpu)",
                              t->decision.device, stoke_source_name(t->decision.device_why.source),
                              why);
        snprintf(reason, sizeof reason, "the CUDA backend cannot run on cuda:%d: %s",
                 t->decision.device, why);
        return apply_decision(t, reason);
    }
    tuned_reasons(t, &t->decision);
    if (cpu_because) {
        t->decision.device_why.source = STOKE_SRC_RULE;
        snprintf(t->decision.device_why.reason, sizeof t->decision.device_why.reason, "%s",
                 cpu_because);
    }
    const stoke_decision *d = &t->decision;
    t->precision = d->precision;
    t->device = d->device;
    t->workers = d->workers;
    t->threads = d->threads;
    char a[sizeof d->device_why.reason + 16], b[sizeof a], given[32] = "";
    if (!stoke_source_decided(d->threads_why.source))
        snprintf(given, sizeof given, " (%s)", stoke_source_name(d->threads_why.source));
    if (d->device == STOKE_TUNE_CPU)
        train_info(t, "device: cpu (%s%s)", auto_prefix(&d->device_why),
                   given_or_why(&d->device_why, a, sizeof a));
    else
        train_info(t, "device: cuda:%d (%s%s)", d->device, auto_prefix(&d->device_why),
                   given_or_why(&d->device_why, a, sizeof a));
    train_info(t, "precision: %s (%s%s)%s", stoke_precision_name(d->precision),
               auto_prefix(&d->precision_why), given_or_why(&d->precision_why, a, sizeof a),
               d->device == STOKE_TUNE_CPU ? emulated_note(d->precision) : "");
    if (d->device != STOKE_TUNE_CPU)
        train_info(t, "threads: %d usable CPU%s: 1 queues the GPU's work + %d loader worker%s (%s)",
                   d->usable_cpus, d->usable_cpus == 1 ? "" : "s", d->workers,
                   d->workers == 1 ? "" : "s", given_or_why(&d->workers_why, a, sizeof a));
    else
        train_info(t,
                   "threads: %d %s CPU%s = %d compute (OpenMP: oneDNN, kernels, BLAS)%s + "
                   "%d loader worker%s (%s)%s",
                   d->available_cpus, d->available_cpus < d->usable_cpus ? "available" : "usable",
                   d->available_cpus == 1 ? "" : "s", d->threads, given, d->workers,
                   d->workers == 1 ? "" : "s", given_or_why(&d->workers_why, a, sizeof a),
                   others_note(t, d, b, sizeof b));
    if (d->device == STOKE_TUNE_CPU) {
        /* the most threads a quiet machine would get: the available CPUs less the
         * workers (the start's count may be lower, other processes busy then) */
        int most = d->available_cpus - d->workers;
        t->adapt.max = most > t->threads ? most : t->threads;
        t->adapt.on = stoke_source_decided(d->threads_why.source) && t->adapt.max > 1 &&
                      !t->trial.on;
        if (t->adapt.on) /* `config show` and bench say it with the decision */
            stoke_more(t->decision.threads_why.reason, sizeof t->decision.threads_why.reason,
                       "; during the run it follows the load, 1 to %d", t->adapt.max);
        char w[400];
        if (t->adapt.on)
            train_info(t,
                       "threads adapt: on: the steps' speed is watched, and another count is "
                       "tried when it or the other processes' load changes, between 1 and %d "
                       "(kept when faster by 5%%, and said; --threads N fixes the count); %s",
                       t->adapt.max, stoke_nn_omp_wait(w, sizeof w));
        else
            train_info(t, "threads adapt: off (%s); %s",
                       !stoke_source_decided(d->threads_why.source) ? "the count was given"
                                                                    : "one compute thread",
                       stoke_nn_omp_wait(w, sizeof w));
    }
    train_info(t, "loader: %d batches in flight (%s); pinned memory: %s (%s)", d->prefetch,
               given_or_why(&d->prefetch_why, a, sizeof a), d->pinned ? "yes" : "no",
               given_or_why(&d->pinned_why, b, sizeof b));
    return STOKE_OK;
}

/* What MFU is measured against: a training step's FLOPs per sample, as backward
 * computes them, and the device's peak at the run's precision: on a CPU the matmul
 * rate measured (or cached from an earlier run), on a GPU its specification (tensor
 * cores for bf16/fp16; TF32 is not counted as tensor work, so fp32 MFU on a GPU uses
 * the FMA peak, raised by the first epoch that beats it). A tuning trial reports no
 * MFU and measures nothing; a dry run reads the cache but measures nothing. */
static void setup_mfu(stoke_trainer *t)
{
    memset(&t->peak, 0, sizeof t->peak);
    t->step_flops = stoke_graph_step_flops(t->graph);
    if (t->trial.on)
        return;
    int gi = t->device != STOKE_TUNE_CPU ? stoke_machine_cuda_gpu(&t->machine, t->device) : -1;
    if (gi >= 0) {
        bool lowp = t->precision != STOKE_PREC_FP32;
        if (stoke_gpu_peak_flops(&t->machine.gpus[gi], lowp, &t->peak.flops, t->peak.how,
                                 sizeof t->peak.how)) {
            t->peak.source = TRAIN_PEAK_SPEC;
            stoke_say(t->peak.label, sizeof t->peak.label, "GPU spec");
        }
    } else if (t->device == STOKE_TUNE_CPU) {
        /* emulated bf16 and fp16 run on the fp32 kernels: their rate is fp32's */
        stoke_precision p =
            t->precision == STOKE_PREC_BF16 && stoke_nn_precision_native(STOKE_PREC_BF16)
                ? STOKE_PREC_BF16
                : STOKE_PREC_FP32;
        /* adapting, the count can rise to adapt.max: MFU is against that many threads'
         * peak, so a switch up cannot read above 100% */
        train_cpu_peak(&t->machine.cpu, p, t->adapt.on ? t->adapt.max : t->threads,
                       !t->cfg.dry_run, &t->peak);
    } else {
        stoke_say(t->peak.how, sizeof t->peak.how, "unknown: cuda:%d is not among the GPUs probed",
                  t->device);
    }
    if (!(t->peak.flops > 0)) {
        t->peak.flops = 0;
        t->peak.source = TRAIN_PEAK_NONE;
        train_info(t, "MFU: %.3g MFLOP a sample a step; the peak is unknown (%s)",
                   t->step_flops / 1e6, t->peak.how);
        return;
    }
    char f[32];
    train_info(t,
               "MFU: %.3g MFLOP a sample a step (forward and what backward computes: weight "
               "gradients, and input gradients but the first layer's) against a peak of %s, "
               "%s: %s",
               t->step_flops / 1e6, stoke_format_flops(t->peak.flops, f, sizeof f), t->peak.label,
               t->peak.how);
}

/* The model (the checkpoint's when resuming, else the preset, --hidden or model file)
 * built for the data: its inputs, targets, classes and metric. */
static stoke_status setup_model(stoke_trainer *t, const train_meta *meta)
{
    const stoke_train_config *c = &t->cfg;
    stoke_status s;
    if (meta) {
        s = stoke_model_file_parse(meta->model, strlen(meta->model), c->resume, &t->mf);
    } else if (c->hidden[0]) {
        /* --hidden 512,512 is the model document "model: mlp / hidden: [512,512]", so the
         * checkpoint's stoke.model rebuilds the same sizes for eval and predict. */
        if (strcmp(c->model, "mlp") && strcmp(c->model, "actor-critic"))
            return stoke_fail(STOKE_ERR_ARG,
                              "hidden (--hidden %s): only the mlp and actor-critic "
                              "presets take hidden sizes, not model '%s' (a model file gives "
                              "its own: hidden: [...] or its layers)",
                              c->hidden, c->model);
        char doc[256]; /* the model is mlp or actor-critic here */
        snprintf(doc, sizeof doc, "model: %.12s\nhidden: [%s]\n", c->model, c->hidden);
        s = stoke_model_file_parse(doc, strlen(doc), c->model, &t->mf);
    } else {
        s = stoke_model_file_load(c->model, &t->mf);
    }
    if (s != STOKE_OK)
        return s;
    t->classes = t->info.target_kind == STOKE_TARGET_CLASS;
    t->nclasses = t->classes ? t->info.num_classes : 0;
    if (t->val_d && t->classes && stoke_dataset_get_info(t->val_d)->num_classes > t->nclasses)
        t->nclasses = stoke_dataset_get_info(t->val_d)->num_classes;
    if (t->info.target_kind == STOKE_TARGET_VECTOR &&
        !strcmp(stoke_model_file_describe(t->mf), "actor-critic")) {
        if ((s = train_count_actions(t->train_d, c->dataset, &t->nclasses)) != STOKE_OK ||
            (t->val_d &&
             (s = train_count_actions(t->val_d, c->val_dataset[0] ? c->val_dataset : c->dataset,
                                      &t->nclasses)) != STOKE_OK))
            return s;
    }
    t->graph = stoke_model_file_build(t->mf, &t->input.model_shape, t->info.target_kind,
                                      &t->info.target_shape, t->nclasses);
    if (!t->graph)
        return STOKE_ERR_ARG;
    t->x = stoke_graph_find(t->graph, "x");
    t->y = stoke_graph_find(t->graph, "y");
    if (t->x == STOKE_NO_TENSOR || t->y == STOKE_NO_TENSOR)
        return stoke_fail(STOKE_ERR_ARG,
                          "model %s: stoke train feeds inputs \"x\" and \"y\"; "
                          "this model has other inputs",
                          stoke_model_file_describe(t->mf));
    t->target_elems = stoke_shape_elems(stoke_graph_shape(t->graph, t->y));
    int64_t data_target_elems =
        t->info.target_kind == STOKE_TARGET_NONE ? 0 : stoke_shape_elems(&t->info.target_shape);
    if (t->target_elems != data_target_elems)
        return stoke_fail(STOKE_ERR_ARG,
                          "model %s: its target has %" PRId64 " values per sample, "
                          "the dataset's %" PRId64,
                          stoke_model_file_describe(t->mf), t->target_elems, data_target_elems);
    t->metric = STOKE_NO_TENSOR;
    for (int i = 0; i < stoke_graph_node_count(t->graph); i++) {
        stoke_nn_op op = stoke_graph_node_op(t->graph, i);
        if (t->metric == STOKE_NO_TENSOR && (op == STOKE_NN_ACCURACY || op == STOKE_NN_MAE)) {
            t->metric = i;
            t->metric_name = op == STOKE_NN_ACCURACY ? "acc" : "mae";
        }
    }
    if (!t->metric_name)
        t->metric_name = "";
    return STOKE_OK;
}

/* --resume: the checkpoint opened and its metadata read; the run's settings completed
 * from its config. */
static stoke_status open_resume(stoke_trainer *t, stoke_ckpt **ck, train_meta *meta)
{
    const char *path = t->cfg.resume;
    stoke_status s = stoke_ckpt_open(path, ck);
    if (s == STOKE_OK)
        s = train_meta_read(*ck, meta);
    if (s == STOKE_OK && strcmp(meta->format, TRAIN_CKPT_FORMAT))
        s = stoke_fail(STOKE_ERR_FORMAT, "%s: not a stoke training checkpoint", path);
    if (s == STOKE_OK)
        s = train_resume_config(t, *ck);
    return s;
}

/* How samples feed the model; for images, the normalization (the checkpoint's when
 * resuming, else the training set's) and the transforms. */
static stoke_status setup_input(stoke_trainer *t, const train_meta *meta)
{
    const stoke_train_config *c = &t->cfg;
    stoke_status s = train_input_setup(&t->input, c, c->dataset, &t->info);
    if (s != STOKE_OK || !t->input.image)
        return s;
    if (meta) {
        memcpy(t->input.mean, meta->mean.v, (size_t)meta->mean.n * sizeof(float));
        memcpy(t->input.std, meta->std.v, (size_t)meta->std.n * sizeof(float));
    } else {
        if (stoke_dataset_has_originals(t->train_d)) /* decoded one by one: seconds */
            train_info(t,
                       "preparing: the mean and std to normalize with, over %" PRId64
                       " training images...",
                       t->info.count < TRAIN_STATS_SAMPLES ? t->info.count : TRAIN_STATS_SAMPLES);
        if ((s = train_input_stats(t->train_d, &t->input)) != STOKE_OK)
            return s;
    }
    train_aug aug, eval;
    train_aug_of(c->augment, c->transforms, &aug, &eval);
    train_transform_opts(&t->input, aug, t->ops, &t->topts);
    train_transform_opts(&t->input, eval, t->val_ops, &t->val_topts);
    char mean[64], std[64];
    train_format_floats(t->input.mean, t->input.channels, mean, sizeof mean);
    train_format_floats(t->input.std, t->input.channels, std, sizeof std);
    bool rrc = aug == TRAIN_AUG_RRC || aug == TRAIN_AUG_RRC_JITTER;
    bool orig = rrc && stoke_dataset_has_originals(t->train_d);
    bool jitter = aug == TRAIN_AUG_RRC_JITTER || aug == TRAIN_AUG_CROP_JITTER;
    train_info(t, "transforms: %s%snormalize (mean %s, std %s, from the training set)",
               rrc && orig             ? "random resized crop (scale 0.08-1, ratio 3/4-4/3, "
                                         "on the original images), horizontal flip, "
               : rrc                   ? "random resized crop (scale 0.08-1, ratio 3/4-4/3), "
                                         "horizontal flip, "
               : aug != TRAIN_AUG_NONE ? "random crop (pad 2), horizontal flip, "
                                       : "",
               jitter ? "color jitter (brightness, contrast, saturation 0.4), " : "", mean, std);
    return STOKE_OK;
}

/* Settings that need what the model and the data offer. */
static stoke_status check_evaluation(const stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    if (c->target_accuracy > 0 && strcmp(t->metric_name, "acc"))
        return stoke_fail(STOKE_ERR_ARG,
                          "target_accuracy (--target-accuracy %g): model %s has no "
                          "accuracy metric (its targets are numbers: the metric is %s)",
                          c->target_accuracy, stoke_model_file_describe(t->mf),
                          t->metric_name[0] ? t->metric_name : "none");
    if ((c->target_accuracy > 0 || c->eval_every > 0) && !t->val_d)
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: there is no validation set to evaluate on (give "
                          "--val-dataset)",
                          c->target_accuracy > 0 ? "target_accuracy (--target-accuracy)"
                                                 : "eval_every (--eval-every)");
    return STOKE_OK;
}

/* The optimizer (its state is part of the plans the batch is fitted to). */
static void setup_optimizer(stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    t->optim = (stoke_optim){.kind = strcmp(c->optimizer, "adamw") ? STOKE_SGD : STOKE_ADAMW,
                             .momentum = (float)c->momentum,
                             .nesterov = c->nesterov,
                             .weight_decay = (float)c->weight_decay,
                             .clip_norm = (float)c->clip_norm};
    if (t->optim.kind == STOKE_ADAMW)
        t->optim.momentum = 0;
}

/* The learning-rate schedule at the batch decided, and the model line. */
static void setup_schedule(stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    int64_t steps_per_epoch =
        (t->info.count + c->batch_size * c->accumulate - 1) / (c->batch_size * c->accumulate);
    t->sched = (stoke_lr_schedule){.kind = !strcmp(c->schedule, "cosine") ? STOKE_LR_COSINE
                                           : !strcmp(c->schedule, "step") ? STOKE_LR_STEP
                                                                          : STOKE_LR_CONSTANT,
                                   .lr = c->lr,
                                   .warmup_steps = c->warmup_steps,
                                   .step_size = c->step_size,
                                   .gamma = c->gamma,
                                   .total_steps = steps_per_epoch * c->epochs,
                                   .min_lr = c->min_lr};
    char sh[64];
    train_info(t,
               "model: %s on %s, %" PRId64 " parameters; %s lr %g%s, batch %" PRId64 " x %" PRId64
               " accumulated = %" PRId64 ", %" PRId64 " epoch%s, seed %" PRIu64,
               stoke_model_file_describe(t->mf),
               stoke_shape_format(&t->input.model_shape, sh, sizeof sh),
               stoke_graph_trainable_elems(t->graph), c->optimizer, c->lr,
               t->sched.kind == STOKE_LR_COSINE ? " (cosine)"
               : t->sched.kind == STOKE_LR_STEP ? " (step)"
                                                : "",
               c->batch_size, c->accumulate, c->batch_size * c->accumulate, c->epochs,
               c->epochs == 1 ? "" : "s", c->seed);
}

/* The validation batch as run: a batch larger than the validation set is never
 * filled, and planning the evaluation model at it reserved memory for samples that do
 * not exist (256 x 224x224 images for 30 of them: 3.4 GB). The config keeps the value
 * given, so a resumed run on a larger set gets it back. */
static int64_t val_batch(const stoke_trainer *t)
{
    int64_t b = t->cfg.val_batch_size;
    return t->val_count > 0 && t->val_count < b ? t->val_count : b;
}

/* The options of the training model (training) or of the inference model that
 * evaluates on the validation set: on the device decided, at the configured batches. */
static stoke_model_opts model_opts(const stoke_trainer *t, bool training)
{
    const stoke_train_config *c = &t->cfg;
    return (stoke_model_opts){.max_batch = training ? c->batch_size : val_batch(t),
                              .epoch_samples = training ? t->info.count : t->val_count,
                              .precision = t->precision,
                              .optim = training ? t->optim : (stoke_optim){0},
                              .training = training,
                              .seed = c->seed,
                              .no_fusion = c->no_fusion,
                              .threads = t->threads,
                              .recompute = training && t->recompute,
                              .cuda = t->device != STOKE_TUNE_CPU,
                              .cuda_device = t->device};
}

/* stoke_graph_plan of a model of t's graph. A batch past what the kernels can index
 * fails at one layer, which names its own limit; the batch that fits the whole model is
 * what the user can give, so it is found (the sizes grow with the batch) and named. */
static stoke_status plan_model(const stoke_trainer *t, const stoke_model_opts *o,
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
static void report_recompute(stoke_trainer *t, const char *why)
{
    stoke_model_opts mo = model_opts(t, true);
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
static bool recompute_pending(const stoke_trainer *t)
{
    return !t->recompute && strcmp(t->cfg.recompute, "auto") == 0;
}

/* The CPU's models: their plans and the loaders' rings against the memory budget
 * (train_check_memory); *left: what remains for the rings. */
static stoke_status check_host_memory(const stoke_trainer *t, const size_t ring[2], size_t *left)
{
    const stoke_train_config *c = &t->cfg;
    stoke_model_opts mo = model_opts(t, true), eo = model_opts(t, false);
    stoke_mem_plan tp, ep;
    stoke_status s;
    if ((s = plan_model(t, &mo, &tp)) != STOKE_OK ||
        (t->val_d && (s = plan_model(t, &eo, &ep)) != STOKE_OK))
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
    size_t rings = ring[0] * (size_t)t->cfg.batch_size + ring[1] * (size_t)val_batch(t);
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
    stoke_model_opts mo = model_opts(t, true), eo = model_opts(t, false);
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
    if (plan_model(t, &mo, &tp) == STOKE_OK && (!t->val_d || plan_model(t, &eo, &ep) == STOKE_OK)) {
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
    int64_t most = c->batch_size > val_batch(t) ? c->batch_size : val_batch(t);
    free(t->target_stage);
    t->target_stage = NULL;
    if (mo.cuda && !(t->target_stage =
                         calloc((size_t)most * (size_t)(t->target_elems ? t->target_elems : 1), 4)))
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    return STOKE_OK;
}

/* The bytes the training and validation models' plans take at the current batches. */
static stoke_status planned_bytes(const stoke_trainer *t, size_t *bytes)
{
    const stoke_train_config *c = &t->cfg;
    stoke_model_opts mo = model_opts(t, true), eo = model_opts(t, false);
    stoke_mem_plan tp, ep = {0};
    stoke_status s = plan_model(t, &mo, &tp);
    if (s == STOKE_OK && t->val_d)
        s = plan_model(t, &eo, &ep);
    /* and the loaders' device slots, which the batches are copied into */
    size_t in = (size_t)stoke_shape_elems(&t->input.model_shape) * 4;
    *bytes = tp.total + ep.total + (size_t)t->decision.prefetch * (size_t)c->batch_size * in +
             (t->val_d ? 2 * (size_t)val_batch(t) * in : 0);
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

/* Half the micro-batch, twice the accumulation: the same effective batch, said. */
static void halve(stoke_trainer *t, const char *why)
{
    stoke_train_config *c = &t->cfg;
    c->batch_size /= 2;
    c->accumulate *= 2;
    if (val_batch(t) > 1) /* from the batch run, or halving a 256 over 30 samples frees nothing */
        c->val_batch_size = val_batch(t) / 2;
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
    if (recompute_pending(t) && (s = planned_bytes(t, &need)) == STOKE_OK && need > budget) {
        char why[160];
        snprintf(why, sizeof why,
                 "auto: the plan needs %.1f MB of GPU memory without it, 90%% of the %.1f MB "
                 "free is %.1f MB",
                 need / 1e6, free_bytes / 1e6, budget / 1e6);
        t->recompute = true;
        report_recompute(t, why);
    }
    if (s != STOKE_OK)
        return s;
    /* batch 1 first: if even that does not fit, halving would only print lines */
    int64_t b = c->batch_size, vb = c->val_batch_size;
    c->batch_size = c->val_batch_size = 1;
    s = planned_bytes(t, &need);
    c->batch_size = b;
    c->val_batch_size = vb;
    if (s == STOKE_OK && need > budget)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "model %s needs %.1f MB of GPU memory at batch 1 (parameters, "
                          "gradients, optimizer state, activations, workspace); 90%% of the "
                          "%.1f MB free on cuda:%d is %.1f MB",
                          stoke_model_file_describe(t->mf), need / 1e6, free_bytes / 1e6, t->device,
                          budget / 1e6);
    while ((s = planned_bytes(t, &need)) == STOKE_OK && need > budget && c->batch_size > 1) {
        c->batch_size /= 2;
        c->accumulate *= 2;
        if (val_batch(t) > 1)
            c->val_batch_size = val_batch(t) / 2;
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
           (recompute_pending(t) ||
            (!t->plan_refused && c->batch_size > 1 && c->accumulate <= (1 << 15)))) {
        char why[300];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        stoke_model_free(t->model);
        stoke_model_free(t->eval_model);
        t->model = t->eval_model = NULL;
        if (recompute_pending(t)) {
            t->recompute = true;
            report_recompute(t, "auto: the models did not fit without it");
            continue;
        }
        halve(t, why);
    }
    return s;
}

/* The models on the device decided; under device auto, a GPU the CUDA backend cannot
 * run on (no kernel module, no cuBLAS) falls back to the CPU, saying why: decided
 * again for the CPU (precision and threads follow the device). */
static stoke_status allocate_on_device(stoke_trainer *t, size_t ring[2], size_t *left)
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
    if ((s = apply_decision(t, reason)) != STOKE_OK)
        return s;
    setup_mfu(t);
    return allocate_models(t, ring, left);
}

/* The loaders (none for the training set of a finished run), the monitor watching the
 * training loader, and the log. */
static stoke_status start_pipeline(stoke_trainer *t, const size_t ring[2], size_t left)
{
    const stoke_train_config *c = &t->cfg;
    stoke_status s;
    stoke_loader_opts lo = {
        .sampler = {.batch_size = c->batch_size, .shuffle = true, .seed = c->seed},
        .start = t->start,
        .transform = t->input.image ? &t->topts : NULL,
        .workers = t->workers,
        .prefetch = t->decision.prefetch,
        .use_device = t->device != STOKE_TUNE_CPU,
        .device = t->device,
        .sample_delay_us = (int)c->loader_delay_us,
        .memory_limit = left ? left + ring[0] * (size_t)c->batch_size : 0};
    if (t->start.epoch < c->epochs &&
        (s = stoke_loader_create(t->train_d, &lo, &t->loader)) != STOKE_OK)
        return s;
    if (t->val_d) {
        stoke_loader_opts vo = {.sampler = {.batch_size = val_batch(t)},
                                .transform = t->input.image ? &t->val_topts : NULL,
                                .use_device = t->device != STOKE_TUNE_CPU,
                                .device = t->device,
                                .memory_limit = left ? left + ring[1] * (size_t)val_batch(t) : 0};
        if ((s = stoke_loader_create(t->val_d, &vo, &t->val_loader)) != STOKE_OK)
            return s;
    }
    /* the models copy a batch out of the loader's device slot without waiting: the
     * loader's next copy into that slot waits for the model's */
    if (t->loader && stoke_loader_on_device(t->loader))
        stoke_loader_set_consumer_event(t->loader, stoke_model_input_event(t->model));
    if (t->val_loader && stoke_loader_on_device(t->val_loader))
        stoke_loader_set_consumer_event(t->val_loader, stoke_model_input_event(t->eval_model));
    if (t->device != STOKE_TUNE_CPU && t->loader)
        train_info(t, "device copy: %s",
                   stoke_loader_on_device(t->loader)
                       ? "batches go to the GPU from pinned slots on the loader's stream; the "
                         "compute stream waits on each copy's event"
                       : stoke_loader_device_reason(t->loader));
    if (c->monitor && t->loader) {
        stoke_monitor_config mc = {.interval_s = 0.5,
                                   .pid = getpid(),
                                   .no_gpu = false,
                                   .pipeline_fn = stoke_loader_pipeline,
                                   .pipeline_ctx = t->loader};
        if (stoke_monitor_create(&mc, &t->monitor) != STOKE_OK)
            t->monitor = NULL; /* utilization is then reported as unknown */
    }
    return STOKE_OK;
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

/* The loaders and the monitor watching one, gone (rebuilt after them). */
static void stop_pipeline(stoke_trainer *t)
{
    stoke_monitor_free(t->monitor);
    t->monitor = NULL;
    if (t->model)
        stoke_model_sync(t->model);
    if (t->eval_model)
        stoke_model_sync(t->eval_model);
    stoke_loader_destroy(t->loader);
    stoke_loader_destroy(t->val_loader);
    t->loader = t->val_loader = NULL;
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
        stop_pipeline(t);
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
            s = start_pipeline(t, ring, left);
        if (s == STOKE_OK && t->monitor)
            stoke_monitor_start(t->monitor);
    }
    state_free(&st);
    return s;
}

/* How long the start's look at other processes' CPU use takes, seconds. */
#define CPU_LOAD_SAMPLE_S 0.2

/* Everything up to the model line (all a --dry-run does). */
static stoke_status prepare(stoke_trainer *t, const train_meta *meta)
{
    stoke_status s = stoke_machine_probe(&t->machine, NULL);
    if (s != STOKE_OK)
        return s;
    /* What other processes take, once, for the compute threads' rule (a dry run too, so
     * `config show` says what a run would decide); threads given need no sample. A
     * failed sample leaves the load unknown and the rule on the available CPUs alone. */
    if (t->cfg.threads <= 0)
        (void)stoke_cpu_load_sample(CPU_LOAD_SAMPLE_S, &t->machine.load);
    stoke_recommend(&t->machine, &t->recs);
    if ((s = stoke_profiles_load(&t->profiles)) != STOKE_OK ||
        (s = train_open_data(t)) != STOKE_OK || (s = setup_input(t, meta)) != STOKE_OK ||
        (s = setup_model(t, meta)) != STOKE_OK || (s = check_evaluation(t)) != STOKE_OK ||
        (s = apply_decision(t, NULL)) != STOKE_OK)
        return s;
    setup_optimizer(t);
    if ((s = train_decide_batch(t)) != STOKE_OK)
        return s;
    /* a test hook: "N" or "N:M", batch M (0: the first) of optimizer step N fails as an
     * allocation would */
    const char *fs = getenv("STOKE_FAIL_ALLOC_AT_STEP");
    const char *end = "";
    uint64_t step = 0, micro = 0;
    t->fail_on = fs && stoke_parse_u64_prefix(fs, 10, &step, &end) && step <= INT64_MAX &&
                 (!*end || (*end == ':' && stoke_parse_u64(end + 1, &micro) && micro <= INT_MAX));
    t->fail_step = (int64_t)step;
    t->fail_micro = (int)micro;
    setup_mfu(t);
    setup_schedule(t);
    t->recompute = strcmp(t->cfg.recompute, "on") == 0;
    if (t->recompute)
        report_recompute(t, stoke_cfg_source_name(stoke_train_config_source(&t->cfg, "recompute")));
    return STOKE_OK;
}

/* The rest: memory, models, the checkpoint's state, loaders, monitor and log. */
static stoke_status start(stoke_trainer *t, const stoke_ckpt *ck, const train_meta *meta)
{
    /* The checkpoint's directory before any step: its first write comes at the end of
     * an epoch, and a missing one found then costs the epoch. */
    if (t->cfg.checkpoint[0] && stoke_tmpfile_check(t->cfg.checkpoint) != STOKE_OK)
        return train_wrap_error(STOKE_ERR_IO, "--checkpoint");
    size_t ring[2], left;
    stoke_status s = allocate_on_device(t, ring, &left);
    if (s != STOKE_OK)
        return s;
    if (ck) {
        /* the optimizer, like the model and seed, was checked by train_resume_config */
        if ((s = train_restore(t, ck, meta)) != STOKE_OK)
            return s;
        train_info(t, "resumed from %s: epoch %" PRId64 ", sample %" PRId64 " of it, step %" PRId64,
                   t->cfg.resume, t->start.epoch + 1, t->start.index, t->step);
    }
    t->epoch = t->start.epoch;
    s = start_pipeline(t, ring, left);
    /* a loader's ring that does not fit: the models at half the batch leave it room */
    while (s == STOKE_ERR_NOMEM && t->cfg.batch_size > 1) {
        char why[300];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        s = train_halve_batch(t, t->start, why);
    }
    if (s == STOKE_OK && t->cfg.log[0])
        s = stoke_mon_open_log(t->cfg.log, t->cfg.resume[0] != 0, &t->log_fd);
    return s;
}

stoke_status stoke_trainer_new(const stoke_train_config *cfg, stoke_train_callback cb, void *ctx,
                               stoke_trainer **out)
{
    return train_new(cfg, cb, ctx, NULL, out);
}

stoke_status train_new(const stoke_train_config *cfg, stoke_train_callback cb, void *ctx,
                       const train_trial *trial, stoke_trainer **out)
{
    *out = NULL;
    stoke_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    t->cfg = *cfg;
    t->cb = cb;
    t->cb_ctx = ctx;
    t->log_fd = -1;
    t->result.val_loss = t->result.val_metric = t->result.best_val_metric = NAN;
    stoke_ckpt *ck = NULL;
    train_meta meta;
    stoke_status s = STOKE_OK;
    if (trial)
        t->trial = *trial;
    if (cfg->resume[0])
        s = open_resume(t, &ck, &meta);
    if (s == STOKE_OK && !trial)
        s = train_tune_settings(t);
    if (s == STOKE_OK)
        s = prepare(t, ck ? &meta : NULL);
    if (s == STOKE_OK && !t->cfg.dry_run)
        s = start(t, ck, &meta);
    stoke_ckpt_close(ck);
    if (s != STOKE_OK) {
        stoke_trainer_free(t);
        return s;
    }
    *out = t;
    return STOKE_OK;
}

/* stoke_trainer_plan on a GPU: the plans of the CUDA backend against 90% of its free
 * memory (or the budget given), beside the validation model and the device slots. */
static stoke_status plan_on_gpu(stoke_trainer *t, size_t budget_bytes, stoke_mem_plan *plan,
                                int64_t *max_batch, size_t *budget_used, size_t *beside)
{
    const stoke_train_config *c = &t->cfg;
    stoke_model_opts mo = model_opts(t, true);
    size_t free_bytes = 0, all = 0;
    stoke_status s = plan_model(t, &mo, plan);
    if (s == STOKE_OK && !budget_bytes && !(c->memory_budget > 0))
        s = train_gpu_free_bytes(t->device, &free_bytes);
    if (s == STOKE_OK)
        s = planned_bytes(t, &all);
    if (s != STOKE_OK)
        return s;
    size_t budget = budget_bytes           ? budget_bytes
                    : c->memory_budget > 0 ? (size_t)c->memory_budget
                                           : free_bytes / 10 * 9;
    size_t in = (size_t)stoke_shape_elems(&t->input.model_shape) * 4;
    /* what planned_bytes counts beside the training model's plan and its slots */
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
    stoke_model_opts mo = model_opts(t, true);
    stoke_status s = plan_model(t, &mo, plan);
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
        stoke_model_opts eo = model_opts(t, false);
        stoke_mem_plan ep;
        if ((s = plan_model(t, &eo, &ep)) != STOKE_OK)
            return s;
        others += ep.total + train_ring_per_sample(t, t->val_d, 0, 0) * (size_t)val_batch(t);
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

void stoke_trainer_result(const stoke_trainer *t, stoke_train_result *r)
{
    *r = t->result;
    r->metric_name = t->metric_name ? t->metric_name : "";
}

stoke_model *stoke_trainer_model(stoke_trainer *t) { return t->model; }

const stoke_train_config *stoke_trainer_config(const stoke_trainer *t) { return &t->cfg; }

const stoke_decision *stoke_trainer_decision(const stoke_trainer *t) { return &t->decision; }

void stoke_trainer_free(stoke_trainer *t)
{
    if (!t)
        return;
    stoke_monitor_free(t->monitor);
    if (t->model) /* its queued copies read the loaders' device memory */
        stoke_model_sync(t->model);
    if (t->eval_model)
        stoke_model_sync(t->eval_model);
    stoke_loader_destroy(t->loader);
    stoke_loader_destroy(t->val_loader);
    stoke_model_free(t->model);
    stoke_model_free(t->eval_model);
    free(t->target_stage);
    stoke_graph_free(t->graph);
    stoke_model_file_free(t->mf);
    if (t->train_d != t->train_src)
        stoke_dataset_close(t->train_d);
    stoke_dataset_close(t->train_src);
    if (t->val_d != t->val_src)
        stoke_dataset_close(t->val_d);
    stoke_dataset_close(t->val_src);
    if (t->log_fd >= 0)
        close(t->log_fd);
    free(t);
}
