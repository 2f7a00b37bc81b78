/* build.c - the model for the data: its graph (the checkpoint's, the preset, --hidden
 * or a model file) fed by the data's inputs and targets, the input's normalization and
 * transforms, the settings that need both (evaluation), the optimizer and the
 * learning-rate schedule at the batch decided. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

/* The model (the checkpoint's when resuming, else the preset, --hidden or model file)
 * built for the data: its inputs, targets, classes and metric. */
stoke_status train_setup_model(stoke_trainer *t, const train_meta *meta)
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

/* How samples feed the model; for images, the normalization (the checkpoint's when
 * resuming, else the training set's) and the transforms. */
stoke_status train_setup_input(stoke_trainer *t, const train_meta *meta)
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
stoke_status train_check_evaluation(const stoke_trainer *t)
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
void train_setup_optimizer(stoke_trainer *t)
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
void train_setup_schedule(stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    int64_t steps_per_epoch = (train_epoch_batches(t) + c->accumulate - 1) / c->accumulate;
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
