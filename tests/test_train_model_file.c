/* test_train_model_file.c - YAML model files: presets and layer lists parse and build
 * into the graphs they describe; bad files are refused with file, line, column and
 * field. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "stoke/train.h"

static stoke_model_file *parse(const char *text)
{
    stoke_model_file *mf = NULL;
    stoke_status s = stoke_model_file_parse(text, strlen(text), "m.yaml", &mf);
    CHECK_MSG(s == STOKE_OK, "%s: %s", text, stoke_last_error());
    return mf;
}

static void bad(const char *text, const char *where, const char *needle)
{
    stoke_model_file *mf = NULL;
    CHECK_MSG(stoke_model_file_parse(text, strlen(text), "m.yaml", &mf) == STOKE_ERR_FORMAT,
              "accepted: %s", text);
    CHECK(mf == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), where);
    CHECK_STR_CONTAINS(stoke_last_error(), needle);
}

static const char *layers_doc =
    "layers:\n"
    "  - {type: conv2d, out: 8, kernel: 3, padding: 1}\n"
    "  - {type: relu}\n"
    "  - {type: maxpool2d, kernel: 2}\n"
    "  - type: residual\n"
    "    layers:\n"
    "      - {type: conv2d, out: 8, kernel: 3, padding: 1, bias: false}\n"
    "      - {type: batchnorm}\n"
    "  - {type: flatten}\n"
    "  - {type: dropout, p: 0.1}\n"
    "  - {type: linear, out: 16, name: hidden}\n"
    "  - {type: gelu}\n"
    "  - {type: linear, out: classes}\n"
    "label_smoothing: 0.1\n";

static void test_parse(void)
{
    stoke_model_file *mf = parse("model: cnn\n");
    CHECK(mf && !strcmp(stoke_model_file_describe(mf), "cnn"));
    stoke_model_file_free(mf);
    mf = parse(layers_doc);
    CHECK(mf && !strcmp(stoke_model_file_describe(mf), "layers (9)"));
    CHECK(mf && !strcmp(stoke_model_file_text(mf), layers_doc));
    stoke_model_file_free(mf);
    mf = NULL;
    CHECK_INT_EQ(stoke_model_file_load("mlp", &mf), STOKE_OK);
    CHECK(mf && !strcmp(stoke_model_file_describe(mf), "mlp"));
    stoke_model_file_free(mf);
    CHECK_INT_EQ(stoke_model_file_load("/no/such/model.yaml", &mf), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "/no/such/model.yaml");

    bad("layers:\n  - {type: conv2d, out: 32, kernel: x}\n", "m.yaml:2:",
        "layers[0].kernel: expected an integer");
    bad("layers:\n  - {type: relu}\n  - {type: frob}\n", "m.yaml:3:", "unknown layer type 'frob'");
    bad("layers:\n  - {type: relu, out: 3}\n", "m.yaml:2:", "layers[0].out: not a field");
    bad("layers:\n  - {out: 3}\n", "m.yaml:2:", "layers[0].type: missing");
    bad("model: cnnn\n", "m.yaml:1:8", "unknown preset 'cnnn'");
    bad("model: cnn\nwidht: 3\n", "m.yaml:2:1", "widht: unknown key");
    bad("model: cnn\nlayers: [{type: relu}]\n", "m.yaml:2:", "not both");
    bad("layers: [{type: conv2d, out: 4}]\n", "m.yaml:1:", "needs out and kernel");
    bad("layers:\n  - type: residual\n    layers:\n      - {type: linear, out: -1}\n",
        "m.yaml:4:", "layers[0].layers[0].out");
    /* found by fuzz_model_yaml: the second list replaced (and leaked) the first */
    bad("layers:\n  - type: residual\n    layers: [{type: relu}]\n    layers: [{type: relu}]\n",
        "m.yaml:4:", "layers[0].layers: given twice");
    bad("layers: [\n", "m.yaml:", "not valid YAML");
    bad("", "m.yaml:1:1", "empty");
    bad("- 1\n- 2\n", "m.yaml:1:1", "expected a mapping");
    bad("loss: hinge\nmodel: cnn\n", "m.yaml:1:7", "loss");
    bad("model: actor-critic\nclip: 1.5\n", "m.yaml:2:7", "clip: expected");
    bad("model: mlp\nentropy: 0.01\n", "m.yaml:2:1", "entropy: applies to the actor-critic");
}

/* The actor-critic by target kind: classes (behaviour cloning), rows of 3 (A2C) or 4
 * (PPO) values; anything else is refused with the layouts named. */
static void test_actor_critic(void)
{
    stoke_shape obs = {1, {6}}, none = {0}, r3 = {1, {3}}, r4 = {1, {4}}, r5 = {1, {5}};
    stoke_model_file *mf = parse("model: actor-critic\nhidden: [16]\nentropy: 0.01\n");
    stoke_model_file *ppo = parse("model: actor-critic\nclip: 0.1\n");
    stoke_model_file *plain = parse("model: actor-critic\n");
    if (!mf || !ppo || !plain)
        return;
    stoke_graph *g = stoke_model_file_build(mf, &obs, STOKE_TARGET_VECTOR, &r3, 4);
    CHECK_MSG(g != NULL, "%s", stoke_last_error());
    if (g) {
        const stoke_shape *y = stoke_graph_shape(g, stoke_graph_find(g, "y"));
        CHECK(y && y->ndim == 1 && y->dims[0] == 3);
        CHECK_INT_EQ(stoke_graph_shape(g, stoke_graph_find(g, "policy"))->dims[0], 4);
        bool pg = false;
        for (int i = 0; i < stoke_graph_node_count(g); i++)
            pg |= stoke_graph_node_op(g, i) == STOKE_NN_POLICY_GRADIENT;
        CHECK(pg);
    }
    stoke_graph_free(g);
    g = stoke_model_file_build(ppo, &obs, STOKE_TARGET_VECTOR, &r4, 4);
    CHECK_MSG(g != NULL, "%s", stoke_last_error());
    stoke_graph_free(g);
    g = stoke_model_file_build(plain, &obs, STOKE_TARGET_CLASS, &none, 4);
    CHECK_MSG(g != NULL && stoke_graph_find(g, "accuracy") != STOKE_NO_TENSOR, "%s",
              stoke_last_error());
    stoke_graph_free(g);
    CHECK(stoke_model_file_build(plain, &obs, STOKE_TARGET_VECTOR, &r5, 4) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "[action, advantage, old_log_prob, return] (4)");
    CHECK_STR_CONTAINS(stoke_last_error(), "the dataset's are (5,)");
    CHECK(stoke_model_file_build(plain, &obs, STOKE_TARGET_SCALAR, &none, 0) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "single numbers");
    CHECK(stoke_model_file_build(plain, &obs, STOKE_TARGET_VECTOR, &r3, 1) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "at least 2 actions");
    CHECK(stoke_model_file_build(ppo, &obs, STOKE_TARGET_VECTOR, &r3, 4) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "clip is PPO's");
    CHECK(stoke_model_file_build(mf, &obs, STOKE_TARGET_CLASS, &none, 4) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "not to class targets");
    stoke_model_file_free(mf);
    stoke_model_file_free(ppo);
    stoke_model_file_free(plain);
}

static void test_build(void)
{
    stoke_model_file *mf = parse(layers_doc);
    if (!mf)
        return;
    stoke_shape in = {3, {1, 8, 8}};
    stoke_shape none = {0};
    stoke_graph *g = stoke_model_file_build(mf, &in, STOKE_TARGET_CLASS, &none, 5);
    CHECK_MSG(g != NULL, "%s", stoke_last_error());
    if (g) {
        stoke_tensor logits = stoke_graph_find(g, "logits");
        CHECK(logits != STOKE_NO_TENSOR);
        const stoke_shape *s = stoke_graph_shape(g, logits);
        CHECK(s && s->ndim == 1 && s->dims[0] == 5);
        CHECK(stoke_graph_find(g, "x") != STOKE_NO_TENSOR);
        CHECK(stoke_graph_find(g, "y") != STOKE_NO_TENSOR);
        /* conv1 (8x1x3x3 + 8), conv2 (8x8x3x3, no bias), bn1 (8 + 8 + running 8 + 8),
         * hidden (16 x 128 + 16), fc1 (5 x 16 + 5). */
        int64_t want = 8 * 9 + 8 + 8 * 8 * 9 + 16 + 16 * 128 + 16 + 5 * 16 + 5;
        CHECK_INT_EQ(stoke_graph_trainable_elems(g), want);
        bool have_hidden = false;
        for (int i = 0; i < stoke_graph_param_count(g); i++)
            have_hidden |= !strcmp(stoke_graph_param(g, i)->name, "hidden.weight");
        CHECK(have_hidden);
        stoke_graph_free(g);
    }
    /* A shape error names the file, the line and the layer. */
    stoke_model_file_free(mf);
    mf = parse("layers:\n  - {type: flatten}\n  - {type: attention, heads: 3}\n");
    g = mf ? stoke_model_file_build(mf, &in, STOKE_TARGET_CLASS, &none, 5) : NULL;
    CHECK(g == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "m.yaml:3:");
    CHECK_STR_CONTAINS(stoke_last_error(), "attention layer");
    stoke_graph_free(g);
    stoke_model_file_free(mf);

    mf = parse("model: cnn\n");
    stoke_shape img = {3, {1, 28, 28}};
    g = mf ? stoke_model_file_build(mf, &img, STOKE_TARGET_CLASS, &none, 10) : NULL;
    CHECK_MSG(g != NULL, "%s", stoke_last_error());
    /* The reference CNN: 320 + 18496 + 401536 + 1290 parameters. */
    if (g)
        CHECK_INT_EQ(stoke_graph_trainable_elems(g), 320 + 18496 + 401536 + 1290);
    stoke_graph_free(g);
    stoke_model_file_free(mf);
}

int main(void)
{
    test_parse();
    test_build();
    test_actor_critic();
    return CHECK_DONE();
}
