/* model_build.c - a model file's graph: its preset or its layers (residual blocks
 * nested) on the data's input, target kind and classes, with the loss and metric. */
#include <stdio.h>
#include <string.h>

#include "train/model_file_impl.h"

typedef struct builder {
    const stoke_model_file *mf;
    stoke_graph *g;
    int counts[L_COUNT];
    int64_t outputs;
} builder;

/* Recurses once per residual block: at most MAX_BLOCK_NESTING deep. */
static stoke_tensor build_layers(builder *b, const layer *l, int n, stoke_tensor x)
{
    for (int i = 0; i < n && x != STOKE_NO_TENSOR; i++) {
        const layer *y = &l[i];
        char name[80];
        if (y->name[0])
            snprintf(name, sizeof name, "%s", y->name);
        else if (train_layer_types[y->type].prefix)
            snprintf(name, sizeof name, "%s%d", train_layer_types[y->type].prefix,
                     ++b->counts[y->type]);
        else
            name[0] = '\0';
        stoke_graph *g = b->g;
        switch (y->type) {
        case L_LINEAR: {
            /* A linear layer maps the last axis: on a (C, H, W) image that is each row's
             * W pixels, never what is meant, and left alone the mistake surfaced only at
             * the loss, as a shape the user's file never mentions. */
            const stoke_shape *in = stoke_graph_shape(g, x);
            if (in && in->ndim >= 3) {
                char sh[64];
                stoke_fail(STOKE_ERR_ARG,
                           "%s:%zu:%zu: %s: linear on a %s input applies to its last axis "
                           "only (%lld values), not to the whole sample; add `- {type: "
                           "flatten}` before it",
                           b->mf->name, y->line, y->col, name,
                           stoke_shape_format(in, sh, sizeof sh),
                           (long long)in->dims[in->ndim - 1]);
                return STOKE_NO_TENSOR;
            }
            x = stoke_nn_linear(g, name, x, y->out ? y->out : b->outputs, y->bias);
            break;
        }
        case L_CONV2D:
            x = stoke_nn_conv2d(g, name, x, y->out ? y->out : b->outputs, y->kernel,
                                y->stride ? y->stride : 1, y->padding, y->bias);
            break;
        case L_MAXPOOL: x = stoke_nn_maxpool2d(g, x, y->kernel, y->stride, y->padding); break;
        case L_AVGPOOL: x = stoke_nn_avgpool2d(g, x, y->kernel, y->stride, y->padding); break;
        case L_GLOBAL_AVGPOOL: x = stoke_nn_global_avgpool(g, x); break;
        case L_BATCHNORM: x = stoke_nn_batchnorm(g, name, x, y->momentum, y->eps); break;
        case L_LAYERNORM: x = stoke_nn_layernorm(g, name, x, y->eps); break;
        case L_RELU: x = stoke_nn_relu(g, x); break;
        case L_GELU: x = stoke_nn_gelu(g, x); break;
        case L_TANH: x = stoke_nn_tanh(g, x); break;
        case L_SIGMOID: x = stoke_nn_sigmoid(g, x); break;
        case L_DROPOUT: x = stoke_nn_dropout(g, x, y->p); break;
        case L_FLATTEN: x = stoke_nn_flatten(g, x); break;
        case L_ATTENTION: x = stoke_nn_attention(g, name, x, y->heads); break;
        case L_PATCHIFY: x = stoke_nn_patchify(g, x, y->patch); break;
        case L_POS_EMBED: x = stoke_nn_pos_embed(g, name, x); break;
        case L_SEQ_MEAN: x = stoke_nn_seq_mean(g, x); break;
        case L_RESIDUAL: {
            stoke_tensor r = build_layers(b, y->children, y->nchildren, x);
            if (r == STOKE_NO_TENSOR) /* the inner layer's message names its line */
                return STOKE_NO_TENSOR;
            x = stoke_nn_add(g, x, r);
            break;
        }
        case L_COUNT: break;
        }
        if (stoke_graph_status(g) != STOKE_OK || x == STOKE_NO_TENSOR) {
            train_wrap_error(STOKE_ERR_FORMAT, "%s:%zu:%zu: %s layer", b->mf->name, y->line, y->col,
                             train_layer_types[y->type].name);
            return STOKE_NO_TENSOR;
        }
    }
    return x;
}

static int64_t default_hidden(const stoke_model_file *mf, int i, int64_t d)
{
    return mf->nhidden > i ? mf->hidden[i] : d;
}

/* The actor-critic trains on class targets (behaviour cloning) or on rows [action,
 * advantage, return] / [action, advantage, old_log_prob, return]; `classes` is the
 * number of actions either way (the trainer counts them for vector targets). */
static bool actor_critic_targets(const stoke_model_file *mf, stoke_target_kind kind,
                                 const stoke_shape *target, int64_t classes)
{
    char b[64];
    if (kind == STOKE_TARGET_VECTOR &&
        (target->ndim != 1 || (target->dims[0] != 3 && target->dims[0] != 4))) {
        stoke_fail(STOKE_ERR_ARG,
                   "%s: actor-critic targets are rows [action, advantage, "
                   "return] (3 values) or [action, advantage, old_log_prob, return] (4) per "
                   "sample, or a class (the action, for behaviour cloning); the dataset's are %s",
                   mf->name, stoke_shape_format(target, b, sizeof b));
        return false;
    }
    if (kind != STOKE_TARGET_VECTOR && kind != STOKE_TARGET_CLASS) {
        stoke_fail(STOKE_ERR_ARG,
                   "%s: actor-critic targets are classes (actions, behaviour "
                   "cloning) or rows [action, advantage, (old_log_prob,) return]; the "
                   "dataset's are single numbers",
                   mf->name);
        return false;
    }
    if (classes < 2) {
        stoke_fail(STOKE_ERR_ARG,
                   "%s: actor-critic needs at least 2 actions, the dataset has "
                   "%lld",
                   mf->name, (long long)classes);
        return false;
    }
    if (kind == STOKE_TARGET_CLASS && (mf->clip != 0 || mf->entropy != 0)) {
        stoke_fail(STOKE_ERR_ARG,
                   "%s: clip and entropy apply to policy-gradient targets "
                   "(rows with an advantage), not to class targets",
                   mf->name);
        return false;
    }
    if (kind == STOKE_TARGET_VECTOR && target->dims[0] == 3 && mf->clip != 0) {
        stoke_fail(STOKE_ERR_ARG,
                   "%s: clip is PPO's and needs the old log-probability: "
                   "rows [action, advantage, old_log_prob, return] (4 values)",
                   mf->name);
        return false;
    }
    return true;
}

stoke_graph *stoke_model_file_build(const stoke_model_file *mf, const stoke_shape *input,
                                    stoke_target_kind kind, const stoke_shape *target,
                                    int64_t classes)
{
    int64_t outputs = kind == STOKE_TARGET_CLASS    ? classes
                      : kind == STOKE_TARGET_VECTOR ? stoke_shape_elems(target)
                                                    : 1;
    if (kind == STOKE_TARGET_CLASS && classes < 2) {
        stoke_fail(STOKE_ERR_ARG, "%s: class targets with %lld classes (need at least 2)", mf->name,
                   (long long)classes);
        return NULL;
    }
    if (kind == STOKE_TARGET_NONE) {
        stoke_fail(STOKE_ERR_ARG, "%s: the dataset has no targets to train on", mf->name);
        return NULL;
    }
    stoke_graph *g = NULL;
    const char *p = mf->preset;
    if (*p) {
        if (kind == STOKE_TARGET_VECTOR && strcmp(p, "actor-critic") != 0) {
            stoke_fail(STOKE_ERR_ARG,
                       "%s: preset %s takes class or scalar targets; the "
                       "dataset's are vectors: write a layers model",
                       mf->name, p);
            return NULL;
        }
        if (!strcmp(p, "actor-critic") && !actor_critic_targets(mf, kind, target, classes))
            return NULL;
        int64_t k = kind == STOKE_TARGET_CLASS ? classes : 1;
        if (!strcmp(p, "cnn")) {
            g = stoke_preset_cnn(input, k);
        } else if (!strcmp(p, "mlp")) {
            int64_t h[MAX_HIDDEN] = {512, 512};
            int nh = mf->nhidden >= 0 ? mf->nhidden : 2;
            for (int i = 0; i < nh; i++)
                h[i] = default_hidden(mf, i, h[i]);
            g = stoke_preset_mlp(input, h, nh, k);
        } else if (!strcmp(p, "resnet")) {
            g = stoke_preset_resnet(input, k, mf->width ? mf->width : 16,
                                    mf->blocks ? mf->blocks : 4);
        } else if (!strcmp(p, "transformer")) {
            int patch = mf->patch ? mf->patch : (input->ndim == 3 ? 4 : 0);
            g = stoke_preset_transformer(input, patch, default_hidden(mf, 0, 64),
                                         mf->depth ? mf->depth : 2, mf->heads ? mf->heads : 4, k);
        } else {
            int64_t h[MAX_HIDDEN] = {64, 64};
            int nh = mf->nhidden >= 0 ? mf->nhidden : 2;
            for (int i = 0; i < nh; i++)
                h[i] = default_hidden(mf, i, h[i]);
            stoke_actor_critic_opts ao = {
                .targets = kind == STOKE_TARGET_VECTOR ? (int)stoke_shape_elems(target) : 0,
                .clip = mf->clip,
                .entropy = mf->entropy};
            g = stoke_preset_actor_critic(input, h, nh, classes, &ao);
        }
        if (!g) {
            train_wrap_error(STOKE_ERR_ARG, "%s: preset %s", mf->name, p);
            return NULL;
        }
        return g;
    }
    g = stoke_graph_new(mf->name);
    if (!g) {
        stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", mf->name);
        return NULL;
    }
    builder b = {.mf = mf, .g = g, .outputs = outputs};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, input);
    stoke_tensor out = build_layers(&b, mf->layers, mf->nlayers, x);
    if (out == STOKE_NO_TENSOR)
        goto fail;
    stoke_nn_output(g, "logits", out);
    const char *loss = mf->loss;
    if (!*loss)
        loss = kind == STOKE_TARGET_CLASS ? "cross_entropy" : "mse";
    if (!strcmp(loss, "cross_entropy")) {
        if (kind != STOKE_TARGET_CLASS) {
            stoke_fail(STOKE_ERR_ARG, "%s: loss cross_entropy needs class targets", mf->name);
            goto fail;
        }
        stoke_shape ts = {0};
        stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ts);
        stoke_nn_cross_entropy(g, out, y, mf->label_smoothing);
        stoke_nn_accuracy(g, out, y);
    } else {
        if (kind == STOKE_TARGET_CLASS) {
            stoke_fail(STOKE_ERR_ARG,
                       "%s: loss %s needs numeric targets; the dataset's are "
                       "classes",
                       mf->name, loss);
            goto fail;
        }
        stoke_shape ts = *stoke_graph_shape(g, out);
        stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ts);
        if (!strcmp(loss, "mse"))
            stoke_nn_mse(g, out, y);
        else if (!strcmp(loss, "l1"))
            stoke_nn_l1(g, out, y);
        else
            stoke_nn_bce_logits(g, out, y);
        stoke_nn_mae(g, out, y);
    }
    if (stoke_graph_status(g) != STOKE_OK) {
        train_wrap_error(STOKE_ERR_FORMAT, "%s: loss", mf->name);
        goto fail;
    }
    return g;
fail:
    stoke_graph_free(g);
    return NULL;
}
