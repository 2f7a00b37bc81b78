/* presets.c - the built-in models (mlp, cnn, resnet, transformer, actor-critic) as
 * graph builders; their layer tables are in docs/nn.md. */
#include <stdio.h>

#include "nn/graph_impl.h"

/* Returns g when it built cleanly, else frees it (the error message stays). */
static stoke_graph *finish(stoke_graph *g)
{
    if (!g) {
        stoke_fail(STOKE_ERR_NOMEM, "nn: out of memory building a preset");
        return NULL;
    }
    if (stoke_graph_status(g) != STOKE_OK) {
        stoke_graph_free(g);
        return NULL;
    }
    return g;
}

/* The head shared by the classifiers and regressors: cross-entropy and accuracy on an
 * int32 class target "y" (classes > 1), or MSE and MAE on a float target "y" of the
 * output's shape (classes == 1). */
static void head(stoke_graph *g, stoke_tensor logits, int64_t classes)
{
    stoke_shape scalar = {0};
    stoke_nn_output(g, "logits", logits);
    if (classes > 1) {
        stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &scalar);
        stoke_tensor loss = stoke_nn_cross_entropy(g, logits, y, 0.0f);
        stoke_nn_output(g, "loss", loss);
        stoke_nn_output(g, "accuracy", stoke_nn_accuracy(g, logits, y));
    } else {
        stoke_shape one = {.ndim = 1, .dims = {1}};
        stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &one);
        stoke_nn_output(g, "loss", stoke_nn_mse(g, logits, y));
        stoke_nn_output(g, "mae", stoke_nn_mae(g, logits, y));
    }
}

static bool check_classes(int64_t classes, const char *preset)
{
    if (classes >= 1)
        return true;
    stoke_fail(STOKE_ERR_ARG, "%s: classes %lld must be >= 1 (1: regression)", preset,
               (long long)classes);
    return false;
}

stoke_graph *stoke_preset_mlp(const stoke_shape *input, const int64_t *hidden, int nhidden,
                              int64_t classes)
{
    if (!check_classes(classes, "mlp"))
        return NULL;
    if (!input || nhidden < 0 || (nhidden > 0 && !hidden)) {
        stoke_fail(STOKE_ERR_ARG, "mlp: needs an input shape and %d hidden sizes", nhidden);
        return NULL;
    }
    stoke_graph *g = stoke_graph_new("mlp");
    if (!g)
        return finish(NULL);
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, input);
    if (input->ndim != 1)
        x = stoke_nn_flatten(g, x);
    char name[32];
    for (int i = 0; i < nhidden; i++) {
        snprintf(name, sizeof name, "fc%d", i + 1);
        x = stoke_nn_relu(g, stoke_nn_linear(g, name, x, hidden[i], true));
    }
    snprintf(name, sizeof name, "fc%d", nhidden + 1);
    head(g, stoke_nn_linear(g, name, x, classes, true), classes);
    return finish(g);
}

stoke_graph *stoke_preset_cnn(const stoke_shape *input, int64_t classes)
{
    if (!input || !check_classes(classes, "cnn"))
        return NULL;
    stoke_graph *g = stoke_graph_new("cnn");
    if (!g)
        return finish(NULL);
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, input);
    if (input->ndim == 2) { /* (H, W) gray images -> (1, H, W) */
        stoke_shape s = {.ndim = 3, .dims = {1, input->dims[0], input->dims[1]}};
        x = stoke_nn_reshape(g, x, &s);
    }
    x = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv1", x, 32, 3, 1, 1, true));
    x = stoke_nn_maxpool2d(g, x, 2, 2, 0);
    x = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv2", x, 64, 3, 1, 1, true));
    x = stoke_nn_maxpool2d(g, x, 2, 2, 0);
    x = stoke_nn_flatten(g, x);
    x = stoke_nn_relu(g, stoke_nn_linear(g, "fc1", x, 128, true));
    head(g, stoke_nn_linear(g, "fc2", x, classes, true), classes);
    return finish(g);
}

/* conv (no bias: batch norm follows, as torchvision's ResNets) + BN. */
static stoke_tensor conv_bn(stoke_graph *g, const char *name, stoke_tensor x, int64_t ch,
                            int kernel, int stride)
{
    char conv[80], bn[80];
    snprintf(conv, sizeof conv, "%s.conv", name);
    snprintf(bn, sizeof bn, "%s.bn", name);
    x = stoke_nn_conv2d(g, conv, x, ch, kernel, stride, kernel / 2, false);
    return stoke_nn_batchnorm(g, bn, x, 0.1f, 1e-5f);
}

stoke_graph *stoke_preset_resnet(const stoke_shape *input, int64_t classes, int width, int blocks)
{
    if (!input || !check_classes(classes, "resnet"))
        return NULL;
    if (width < 1 || blocks < 0) {
        stoke_fail(STOKE_ERR_ARG, "resnet: width %d must be >= 1 and blocks %d >= 0", width,
                   blocks);
        return NULL;
    }
    stoke_graph *g = stoke_graph_new("resnet");
    if (!g)
        return finish(NULL);
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, input);
    if (input->ndim == 2) {
        stoke_shape s = {.ndim = 3, .dims = {1, input->dims[0], input->dims[1]}};
        x = stoke_nn_reshape(g, x, &s);
    }
    x = stoke_nn_relu(g, conv_bn(g, "stem", x, width, 3, 1));
    int64_t ch = width;
    char name[48];
    for (int b = 0; b < blocks; b++) {
        /* every second block (the 2nd, 4th, ...) halves the size and doubles the width */
        bool down = b % 2 == 1;
        int64_t out_ch = down ? ch * 2 : ch;
        snprintf(name, sizeof name, "block%d.a", b + 1);
        stoke_tensor y = stoke_nn_relu(g, conv_bn(g, name, x, out_ch, 3, down ? 2 : 1));
        snprintf(name, sizeof name, "block%d.b", b + 1);
        y = conv_bn(g, name, y, out_ch, 3, 1);
        stoke_tensor shortcut = x;
        if (down) {
            snprintf(name, sizeof name, "block%d.down", b + 1);
            shortcut = conv_bn(g, name, x, out_ch, 1, 2);
        }
        x = stoke_nn_relu(g, stoke_nn_add(g, y, shortcut));
        ch = out_ch;
    }
    x = stoke_nn_global_avgpool(g, x);
    head(g, stoke_nn_linear(g, "fc", x, classes, true), classes);
    return finish(g);
}

stoke_graph *stoke_preset_transformer(const stoke_shape *input, int patch, int64_t hidden,
                                      int layers, int heads, int64_t classes)
{
    if (!input || !check_classes(classes, "transformer"))
        return NULL;
    if (hidden < 1 || layers < 0 || heads < 1) {
        stoke_fail(STOKE_ERR_ARG,
                   "transformer: hidden %lld, layers %d and heads %d must be positive",
                   (long long)hidden, layers, heads);
        return NULL;
    }
    stoke_graph *g = stoke_graph_new("transformer");
    if (!g)
        return finish(NULL);
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, input);
    if (patch > 0) {
        if (input->ndim == 2) {
            stoke_shape s = {.ndim = 3, .dims = {1, input->dims[0], input->dims[1]}};
            x = stoke_nn_reshape(g, x, &s);
        }
        x = stoke_nn_patchify(g, x, patch);
    } else if (input->ndim == 1) { /* a feature vector: a sequence of one token */
        stoke_shape s = {.ndim = 2, .dims = {1, input->dims[0]}};
        x = stoke_nn_reshape(g, x, &s);
    }
    x = stoke_nn_linear(g, "embed", x, hidden, true);
    x = stoke_nn_pos_embed(g, "pos", x);
    char name[48];
    for (int l = 0; l < layers; l++) {
        snprintf(name, sizeof name, "layer%d.ln1", l + 1);
        stoke_tensor y = stoke_nn_layernorm(g, name, x, 1e-5f);
        snprintf(name, sizeof name, "layer%d.attn", l + 1);
        y = stoke_nn_attention(g, name, y, heads);
        x = stoke_nn_add(g, x, y);
        snprintf(name, sizeof name, "layer%d.ln2", l + 1);
        y = stoke_nn_layernorm(g, name, x, 1e-5f);
        snprintf(name, sizeof name, "layer%d.fc1", l + 1);
        y = stoke_nn_gelu(g, stoke_nn_linear(g, name, y, 4 * hidden, true));
        snprintf(name, sizeof name, "layer%d.fc2", l + 1);
        y = stoke_nn_linear(g, name, y, hidden, true);
        x = stoke_nn_add(g, x, y);
    }
    x = stoke_nn_layernorm(g, "ln", x, 1e-5f);
    x = stoke_nn_seq_mean(g, x);
    head(g, stoke_nn_linear(g, "head", x, classes, true), classes);
    return finish(g);
}

stoke_graph *stoke_preset_actor_critic(const stoke_shape *obs, const int64_t *hidden, int nhidden,
                                       int64_t actions, const stoke_actor_critic_opts *opts)
{
    stoke_actor_critic_opts o = opts ? *opts : (stoke_actor_critic_opts){0};
    if (!obs || nhidden < 1 || !hidden || actions < 2) {
        stoke_fail(STOKE_ERR_ARG,
                   "actor-critic: needs an observation shape, >= 1 hidden layer and >= 2 actions");
        return NULL;
    }
    if (o.targets != 0 && o.targets != 3 && o.targets != 4) {
        stoke_fail(STOKE_ERR_ARG,
                   "actor-critic: targets are an action (0), [action, advantage, "
                   "return] (3) or [action, advantage, old_log_prob, return] (4), not %d",
                   o.targets);
        return NULL;
    }
    if (o.targets == 4 && o.clip == 0)
        o.clip = 0.2f; /* PPO's usual epsilon */
    stoke_graph *g = stoke_graph_new("actor-critic");
    if (!g)
        return finish(NULL);
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, obs);
    if (obs->ndim != 1)
        x = stoke_nn_flatten(g, x);
    char name[32];
    for (int i = 0; i < nhidden; i++) {
        snprintf(name, sizeof name, "trunk.fc%d", i + 1);
        x = stoke_nn_tanh(g, stoke_nn_linear(g, name, x, hidden[i], true));
    }
    stoke_tensor policy = stoke_nn_linear(g, "policy", x, actions, true);
    stoke_tensor value = stoke_nn_linear(g, "value", x, 1, true);
    stoke_nn_output(g, "policy", policy);
    stoke_nn_output(g, "value", value);
    if (o.targets == 0) { /* behaviour cloning: the taken action is the label */
        stoke_shape scalar = {0};
        stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &scalar);
        stoke_nn_output(g, "policy_loss", stoke_nn_cross_entropy(g, policy, y, 0.0f));
        stoke_nn_output(g, "accuracy", stoke_nn_accuracy(g, policy, y));
        return finish(g);
    }
    /* one target row per sample, the return last: the policy gradient takes the
     * columns before it, the value head the return */
    stoke_shape row = {.ndim = 1, .dims = {o.targets}};
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &row);
    stoke_tensor pg_target = stoke_nn_slice(g, y, 0, o.targets - 1);
    stoke_tensor ret = stoke_nn_slice(g, y, o.targets - 1, o.targets);
    stoke_tensor pl =
        stoke_nn_policy_gradient(g, policy, pg_target, o.targets == 4 ? o.clip : 0.0f, o.entropy);
    stoke_tensor vl = stoke_nn_mse(g, value, ret);
    stoke_nn_loss_weight(g, vl, 0.5f);
    stoke_nn_output(g, "policy_loss", pl);
    stoke_nn_output(g, "value_loss", vl);
    stoke_nn_output(g, "value_mae", stoke_nn_mae(g, value, ret));
    return finish(g);
}
