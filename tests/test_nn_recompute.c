/* test_nn_recompute.c - gradient checkpointing (stoke_model_opts.recompute): a model
 * that drops its segments' activations after forward and recomputes them in backward
 * trains exactly as one that keeps them (losses, gradients, weights and batch-norm
 * running statistics bit for bit at a fixed thread count, dropout included), with
 * fewer activation bytes where the graph has cuts; inference models and graphs without
 * cuts are unchanged; gradient accumulation over smaller micro-batches, in bf16 too. */
#include "check.h"
#include "stoke/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { B = 8, STEPS = 3 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float rnd(void)
{ /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static stoke_model *model(const stoke_graph *g, bool recompute, bool no_fusion, bool training)
{
    stoke_model_opts o = {.max_batch = B,
                          .precision = STOKE_PREC_FP32,
                          .training = training,
                          .seed = 5,
                          .optim = {.kind = STOKE_ADAMW, .weight_decay = 0.01f},
                          .threads = 2,
                          .no_fusion = no_fusion,
                          .recompute = recompute};
    stoke_model *m = NULL;
    CHECK_MSG(stoke_model_new(g, &o, &m) == STOKE_OK, "%s", stoke_last_error());
    return m;
}

/* Fills every input of both models with the same values: fp32 inputs in [-1, 1),
 * int32 ones (class targets) below `classes`. */
static void feed(const stoke_graph *g, stoke_model *a, stoke_model *b, int classes)
{
    for (int t = 0; t < stoke_graph_node_count(g); t++) {
        if (stoke_graph_node_op(g, t) != STOKE_NN_INPUT)
            continue;
        const stoke_shape *s = stoke_graph_shape(g, t);
        size_t n = (size_t)B * (size_t)(s->ndim ? stoke_shape_elems(s) : 1);
        float *fa = stoke_model_input(a, t), *fb = stoke_model_input(b, t);
        bool ids = strcmp(stoke_graph_node_name(g, t), "y") == 0 && classes > 1;
        for (size_t i = 0; i < n; i++) {
            if (ids)
                ((int32_t *)fa)[i] = ((int32_t *)fb)[i] =
                    (int32_t)((rnd() + 1.0f) * 0.5f * (float)classes) % classes;
            else
                fa[i] = fb[i] = rnd();
        }
    }
}

/* Every parameter (running statistics included), or with grads every gradient, of
 * the two models, bit for bit. */
static void same_tensors(const char *what, stoke_model *a, stoke_model *b, bool grads, int step)
{
    const stoke_graph *g = stoke_model_graph(a);
    for (int p = 0; p < stoke_graph_param_count(g); p++) {
        const stoke_param_info *in = stoke_graph_param(g, p);
        float *x = grads ? stoke_model_grad(a, p) : stoke_model_param(a, p);
        float *y = grads ? stoke_model_grad(b, p) : stoke_model_param(b, p);
        if (!x || !y) {
            CHECK(!x && !y);
            continue;
        }
        CHECK_MSG(memcmp(x, y, (size_t)in->elems * sizeof *x) == 0, "%s step %d: %s of %s differ",
                  what, step, grads ? "gradient" : "value", in->name);
    }
}

/* Trains `g` STEPS steps with recompute off and on; returns the two plans'
 * activation bytes per sample and the segments. */
static void compare(const char *what, const stoke_graph *g, int classes, bool no_fusion,
                    size_t *act_off, size_t *act_on, int *segments)
{
    stoke_model *off = model(g, false, no_fusion, true), *on = model(g, true, no_fusion, true);
    if (!off || !on) {
        stoke_model_free(off);
        stoke_model_free(on);
        return;
    }
    *act_off = stoke_model_plan(off)->activations_per_sample;
    *act_on = stoke_model_plan(on)->activations_per_sample;
    *segments = stoke_model_plan(on)->recompute_segments;
    printf("%s: %d segments, activations %zu -> %zu bytes per sample\n", what, *segments, *act_off,
           *act_on);
    CHECK_INT_EQ(stoke_model_plan(off)->recompute_segments, 0);
    CHECK_MSG(*act_on <= *act_off, "%s: %zu bytes per sample recomputing, %zu keeping", what,
              *act_on, *act_off);
    CHECK_INT_EQ(stoke_model_used_mem(on), stoke_model_plan(on)->total);
    for (int s = 0; s < STEPS; s++) {
        feed(g, off, on, classes);
        CHECK(stoke_model_forward(off, B, true) == STOKE_OK);
        CHECK(stoke_model_forward(on, B, true) == STOKE_OK);
        double lo = stoke_model_loss(off), ln = stoke_model_loss(on);
        CHECK_MSG(lo == ln && isfinite(lo), "%s step %d: loss %.9g kept, %.9g recomputed", what, s,
                  lo, ln);
        CHECK_MSG(stoke_model_backward(off) == STOKE_OK, "%s", stoke_last_error());
        CHECK_MSG(stoke_model_backward(on) == STOKE_OK, "%s", stoke_last_error());
        /* the loss values are the forward's: backward's recompute does not touch them */
        CHECK(stoke_model_loss(on) == ln);
        same_tensors(what, off, on, true, s);
        CHECK(stoke_model_step(off, 1e-2, 1, NULL) == STOKE_OK);
        CHECK(stoke_model_step(on, 1e-2, 1, NULL) == STOKE_OK);
        same_tensors(what, off, on, false, s);
    }
    stoke_model_free(off);
    stoke_model_free(on);
}

/* A CNN with batch norm and dropout in the checkpointed segments: the running
 * statistics must move once per forward, and the recompute must see the forward's
 * dropout mask. */
static stoke_graph *cnn_bn_dropout(void)
{
    stoke_graph *g = stoke_graph_new("cnn_bn_dropout");
    stoke_shape img = {.ndim = 3, .dims = {3, 12, 12}}, none = {0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &img);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &none);
    stoke_tensor h = x;
    const char *conv[] = {"conv1", "conv2", "conv3", "conv4"}, *bn[] = {"bn1", "bn2", "bn3", "bn4"};
    for (int i = 0; i < 4; i++) {
        h = stoke_nn_conv2d(g, conv[i], h, 8, 3, 1, 1, false);
        h = stoke_nn_batchnorm(g, bn[i], h, 0.1f, 1e-5f);
        h = stoke_nn_relu(g, h);
        h = stoke_nn_dropout(g, h, 0.25f);
        if (i == 1)
            h = stoke_nn_maxpool2d(g, h, 2, 0, 0);
    }
    h = stoke_nn_flatten(g, h);
    h = stoke_nn_linear(g, "fc1", h, 32, true);
    h = stoke_nn_batchnorm(g, "bn5", h, 0.1f, 1e-5f);
    h = stoke_nn_relu(g, h);
    h = stoke_nn_dropout(g, h, 0.5f);
    h = stoke_nn_linear(g, "fc2", h, 10, true);
    stoke_nn_output(g, "logits", h);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    stoke_nn_accuracy(g, h, y);
    CHECK_MSG(stoke_graph_status(g) == STOKE_OK, "%s", stoke_last_error());
    return g;
}

static void test_presets(void)
{
    stoke_shape flat = {.ndim = 1, .dims = {48}}, img = {.ndim = 3, .dims = {3, 16, 16}};
    int64_t hidden[6] = {64, 64, 48, 48, 32, 32};
    size_t off = 0, on = 0;
    int segs = 0;

    stoke_graph *g = stoke_preset_mlp(&flat, hidden, 6, 10);
    compare("mlp", g, 10, false, &off, &on, &segs);
    CHECK_MSG(segs > 0 && on < off, "mlp: %d segments, %zu -> %zu bytes", segs, off, on);
    compare("mlp, unfused", g, 10, true, &off, &on, &segs);
    CHECK_MSG(segs > 0 && on < off, "mlp unfused: %d segments, %zu -> %zu bytes", segs, off, on);
    stoke_graph_free(g);

    g = stoke_preset_cnn(&img, 10);
    compare("cnn", g, 10, false, &off, &on, &segs);
    stoke_graph_free(g);

    g = cnn_bn_dropout();
    compare("cnn with batch norm and dropout", g, 10, false, &off, &on, &segs);
    CHECK_MSG(segs > 0 && on < off, "cnn bn dropout: %d segments, %zu -> %zu bytes", segs, off, on);
    stoke_graph_free(g);

    g = stoke_preset_resnet(&img, 10, 8, 4);
    compare("resnet", g, 10, false, &off, &on, &segs);
    CHECK_MSG(segs > 0 && on < off, "resnet: %d segments, %zu -> %zu bytes", segs, off, on);
    stoke_graph_free(g);

    g = stoke_preset_transformer(&img, 4, 32, 4, 4, 10);
    compare("transformer", g, 10, false, &off, &on, &segs);
    CHECK_MSG(segs > 0 && on < off, "transformer: %d segments, %zu -> %zu bytes", segs, off, on);
    /* a larger plan shrinks as much per sample: the largest batch in a budget grows */
    stoke_model_opts o = {
        .max_batch = 64, .training = true, .optim = {.kind = STOKE_ADAMW}, .threads = 2};
    stoke_mem_plan po, pn;
    CHECK(stoke_graph_plan(g, &o, &po) == STOKE_OK);
    o.recompute = true;
    CHECK(stoke_graph_plan(g, &o, &pn) == STOKE_OK);
    CHECK_INT_EQ(pn.activations_per_sample, on);
    size_t budget = po.total;
    CHECK(stoke_plan_max_batch(&pn, budget, 0) > stoke_plan_max_batch(&po, budget, 0));
    /* an inference model has nothing to recompute: the same plan */
    o.training = false;
    CHECK(stoke_graph_plan(g, &o, &pn) == STOKE_OK);
    o.recompute = false;
    CHECK(stoke_graph_plan(g, &o, &po) == STOKE_OK);
    CHECK_INT_EQ(pn.activations_per_sample, po.activations_per_sample);
    CHECK_INT_EQ(pn.total, po.total);
    CHECK_INT_EQ(pn.recompute_segments, 0);
    stoke_graph_free(g);

    int64_t trunk[4] = {32, 32, 32, 32};
    stoke_shape obs = {.ndim = 1, .dims = {8}};
    g = stoke_preset_actor_critic(&obs, trunk, 4, 4, NULL);
    compare("actor-critic", g, 4, false, &off, &on, &segs);
    stoke_graph_free(g);
}

/* Gradient accumulation over two micro-batches smaller than the model's batch, in
 * bf16: each backward recomputes from its own forward (batch, dropout key). */
static void test_accumulate(void)
{
    stoke_shape img = {.ndim = 3, .dims = {3, 16, 16}};
    stoke_graph *g = stoke_preset_transformer(&img, 4, 32, 3, 4, 10);
    stoke_graph *c = cnn_bn_dropout();
    stoke_graph *gs[2] = {g, c};
    for (int k = 0; k < 2; k++) {
        stoke_model_opts o = {.max_batch = B,
                              .precision = k == 0 ? STOKE_PREC_BF16 : STOKE_PREC_FP32,
                              .training = true,
                              .seed = 9,
                              .optim = {.kind = STOKE_SGD, .momentum = 0.9f},
                              .threads = 2};
        stoke_model *off = NULL, *on = NULL;
        CHECK_MSG(stoke_model_new(gs[k], &o, &off) == STOKE_OK, "%s", stoke_last_error());
        o.recompute = true;
        CHECK_MSG(stoke_model_new(gs[k], &o, &on) == STOKE_OK, "%s", stoke_last_error());
        for (int s = 0; off && on && s < 2; s++) {
            for (int micro = 0; micro < 2; micro++) {
                feed(gs[k], off, on, 10);
                int64_t b = micro ? B - 3 : B - 1;
                CHECK(stoke_model_forward(off, b, true) == STOKE_OK);
                CHECK(stoke_model_forward(on, b, true) == STOKE_OK);
                CHECK(stoke_model_loss(off) == stoke_model_loss(on));
                CHECK(stoke_model_backward(off) == STOKE_OK);
                CHECK(stoke_model_backward(on) == STOKE_OK);
            }
            same_tensors(k == 0 ? "accumulated, bf16" : "accumulated, batch norm", off, on, true,
                         s);
            CHECK(stoke_model_step(off, 1e-2, 2, NULL) == STOKE_OK);
            CHECK(stoke_model_step(on, 1e-2, 2, NULL) == STOKE_OK);
            same_tensors(k == 0 ? "accumulated, bf16" : "accumulated, batch norm", off, on, false,
                         s);
        }
        stoke_model_free(off);
        stoke_model_free(on);
    }
    stoke_graph_free(g);
    stoke_graph_free(c);
}

/* Eval forwards with recompute on give the kept model's outputs. */
static void test_eval(void)
{
    stoke_shape img = {.ndim = 3, .dims = {3, 16, 16}};
    stoke_graph *g = stoke_preset_resnet(&img, 10, 8, 2);
    stoke_model *off = model(g, false, false, false), *on = model(g, true, false, false);
    if (off && on) {
        CHECK_INT_EQ(stoke_model_plan(on)->recompute_segments, 0);
        CHECK_INT_EQ(stoke_model_plan(on)->total, stoke_model_plan(off)->total);
        feed(g, off, on, 10);
        CHECK(stoke_model_forward(off, B, false) == STOKE_OK);
        CHECK(stoke_model_forward(on, B, false) == STOKE_OK);
        stoke_tensor t = stoke_graph_find(g, "logits");
        CHECK(memcmp(stoke_model_output(off, t), stoke_model_output(on, t),
                     (size_t)B * 10 * sizeof(float)) == 0);
    }
    stoke_model_free(off);
    stoke_model_free(on);
    stoke_graph_free(g);
}

/* A graph whose activations all stay live (every hidden layer is an output) has
 * nothing to drop: no segments, the same plan, and it trains as before. */
static void test_no_cut(void)
{
    stoke_graph *g = stoke_graph_new("all_live");
    stoke_shape in = {.ndim = 1, .dims = {16}}, none = {0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &in);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &none);
    stoke_tensor h = x;
    const char *names[] = {"fc1", "fc2", "fc3", "fc4"}, *outs[] = {"h1", "h2", "h3", "h4"},
               *acts[] = {"a1", "a2", "a3", "a4"};
    for (int i = 0; i < 4; i++) {
        h = stoke_nn_linear(g, names[i], h, 16, true);
        stoke_nn_output(g, outs[i], h);
        h = stoke_nn_tanh(g, h);
        stoke_nn_output(g, acts[i], h);
    }
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    CHECK_MSG(stoke_graph_status(g) == STOKE_OK, "%s", stoke_last_error());
    size_t off = 0, on = 0;
    int segs = -1;
    compare("all live", g, 16, false, &off, &on, &segs);
    CHECK_INT_EQ(segs, 0);
    CHECK_INT_EQ(on, off);
    stoke_graph_free(g);
}

int main(void)
{
    test_presets();
    test_accumulate();
    test_eval();
    test_no_cut();
    return CHECK_DONE();
}
