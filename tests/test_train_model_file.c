/* test_train_model_file.c - YAML model files: presets and layer lists parse and build
 * into the graphs they describe; bad files are refused with file, line, column and
 * field. */
#include <stdio.h>
#include <stdlib.h>
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
              "accepted: %.200s", text);
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

    bad("layers:\n  - {type: conv2d, out: 32, kernel: x}\n",
        "m.yaml:2:", "layers[0].kernel: expected an integer");
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
        "m.yaml:4:5: layers[0].layers: key given twice (first at line 3)", "");
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

/* `n` residual blocks, each inside the last, around one relu: flow style on one line
 * (the shortest text per level), or block style. malloc'd. */
static char *nested(int n, bool block)
{
    size_t cap = 64 + (size_t)n * (block ? 4 * (size_t)n + 64 : 40);
    char *s = malloc(cap), *p = s;
    if (!s)
        return NULL;
    if (!block) {
        p += sprintf(p, "layers: ");
        for (int i = 0; i < n; i++)
            p += sprintf(p, "[{type: residual, layers: ");
        p += sprintf(p, "[{type: relu}]");
        for (int i = 0; i < n; i++)
            p += sprintf(p, "}]");
        sprintf(p, "\n");
        return s;
    }
    p += sprintf(p, "layers:\n");
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%*s- type: residual\n%*s  layers:\n", 2 + 4 * i, "", 2 + 4 * i, "");
    sprintf(p, "%*s- {type: relu}\n", 2 + 4 * n, "");
    return s;
}

/* Issue 9 (1): 10,000 nested residual blocks overflowed the stack (the parser, the
 * builder and the free recursed without a limit); libyaml itself takes quadratic time
 * in flow nesting and 300 bytes a level. Blocks nest 64 deep, lists and mappings 256;
 * past either the file is refused naming the line, column and the limit. */
static void test_nesting(void)
{
    stoke_shape in = {1, {8}}, none = {0};
    for (int block = 0; block < 2; block++) {
        char *text = nested(64, block);
        stoke_model_file *mf = text ? parse(text) : NULL;
        stoke_graph *g = mf ? stoke_model_file_build(mf, &in, STOKE_TARGET_CLASS, &none, 3) : NULL;
        CHECK_MSG(g != NULL, "64 nested blocks (%s): %s", block ? "block" : "flow",
                  stoke_last_error());
        stoke_graph_free(g);
        stoke_model_file_free(mf);
        free(text);
        text = nested(65, block);
        if (text)
            bad(text, block ? "m.yaml:130:261: layers[0]" : "m.yaml:1:1674: layers[0]",
                "residual blocks nested deeper than 64 (stoke's limit)");
        free(text);
    }
    char *text = nested(10000, false);
    if (text)
        bad(text, "m.yaml:1:3312: layers[0].layers[0]",
            "lists and mappings nested deeper than 256 levels (stoke's limit)");
    free(text);
    /* Past the limit libyaml is never given the rest: a million levels are refused as
     * soon as the 257th opens (they took hours, or 300 MB, before). */
    size_t n = 1000000;
    char *deep = malloc(2 * n + 16);
    if (!deep)
        return;
    static const char *const opens[] = {"[", "{", "- "};
    for (int k = 0; k < 3; k++) {
        size_t w = strlen(opens[k]), len = 0;
        for (size_t i = 0; i < n; i++, len += w)
            memcpy(deep + len, opens[k], w);
        stoke_model_file *mf = NULL;
        CHECK(stoke_model_file_parse(deep, len, "m.yaml", &mf) == STOKE_ERR_FORMAT);
        CHECK_STR_CONTAINS(stoke_last_error(), "nested deeper than 256 levels");
        CHECK_STR_CONTAINS(stoke_last_error(), k == 2 ? "m.yaml:1:513:" : "m.yaml:1:257:");
    }
    free(deep);
}

/* Issue 9 (1), the same class: an alias made the loaded tree a graph. "&a [... *a]" is a
 * cycle (a stack overflow), and anchors repeating the last ten times are 10^8 layers
 * in 3 kB (a hang). Aliases are refused where they are written. */
static void test_aliases(void)
{
    bad("layers: &x [{type: residual, layers: *x}]\n", "m.yaml:1:38: layers[0].layers",
        "aliases (*x) are not supported");
    char laughs[4096];
    int n =
        snprintf(laughs, sizeof laughs, "layers: [{type: residual, layers: &a0 [{type: relu}]}");
    for (int i = 1; i < 8; i++) {
        n +=
            snprintf(laughs + n, sizeof laughs - (size_t)n, ", {type: residual, layers: &a%d [", i);
        for (int j = 0; j < 10; j++)
            n += snprintf(laughs + n, sizeof laughs - (size_t)n, "%s{type: residual, layers: *a%d}",
                          j ? ", " : "", i - 1);
        n += snprintf(laughs + n, sizeof laughs - (size_t)n, "]}");
    }
    snprintf(laughs + n, sizeof laughs - (size_t)n, "]\n");
    bad(laughs, "m.yaml:1:", "aliases (*a0) are not supported");
    bad("model: &m mlp\nhidden: *m\n", "m.yaml:2:9: hidden", "aliases (*m)");
    /* an anchor alone names nothing twice and is harmless */
    stoke_model_file_free(parse("model: &m mlp\n"));
}

/* Issue 9 (8): a key given twice was taken from its last line (YAML forbids it); now
 * every mapping refuses it, naming both lines, in one check all readers share. */
static void test_duplicate_keys(void)
{
    bad("model: cnn\nmodel: mlp\n", "m.yaml:2:1: model: key given twice (first at line 1)", "");
    bad("layers:\n  - type: linear\n    out: 8\n    bias: false\n    out: 16\n",
        "m.yaml:5:5: layers[0].out: key given twice (first at line 3)", "");
    bad("layers: [{type: relu}, {type: linear, type: relu}]\n",
        "m.yaml:1:39: layers[1].type: key given twice (first at line 1)", "");
    bad("model: mlp\nhidden: [8]\nloss: mse\nhidden: [16]\n",
        "m.yaml:4:1: hidden: key given twice (first at line 2)", "");
    /* quoting does not make a key another: "out" is out */
    bad("layers: [{type: linear, out: 8, \"out\": 9}]\n", "layers[0].out: key given twice", "");
    /* '-' and '_' are different keys in model files (unlike config files) */
    bad("model: mlp\nlabel-smoothing: 0.1\nlabel_smoothing: 0.1\n", "m.yaml:2:1",
        "label-smoothing: unknown key");
}

/* Issue 9 (10): a value of the wrong shape names the file, its own line and column,
 * the key and what was expected. */
static void test_shapes(void)
{
    bad("model: [cnn]\n", "m.yaml:1:8: model: expected a preset name", "got a list");
    bad("model: {a: 1}\n", "m.yaml:1:8: model:", "got a mapping");
    bad("model:\n", "m.yaml:1:7: model:", "got nothing (null)");
    bad("model: mlp\nhidden: {a: 1}\n", "m.yaml:2:9: hidden: expected an integer", "got a mapping");
    bad("model: mlp\nhidden: [8, [16]]\n", "m.yaml:2:13: hidden[1]:", "got a list");
    bad("model: mlp\nhidden: ~\n", "m.yaml:2:9: hidden:", "got nothing (null)");
    bad("model: transformer\nlayers: {a: 1}\n", "m.yaml:2:9: layers: expected a list of layers",
        "got a mapping");
    bad("layers: [relu]\n", "m.yaml:1:10: layers[0]: expected a mapping such as {type: relu}",
        "got 'relu'");
    bad("layers: [{type: [relu]}]\n", "m.yaml:1:17: layers[0].type: expected one of", "got a list");
    bad("layers: [{type: }]\n", "layers[0].type: expected one of", "got nothing (null)");
    bad("layers: [{type: linear, out: [8]}]\n", "m.yaml:1:30: layers[0].out:", "got a list");
    bad("layers: [{type: linear, bias: {}}]\n",
        "m.yaml:1:31: layers[0].bias: expected true or false", "got a mapping");
    bad("layers: [{type: dropout, p: null}]\n", "m.yaml:1:29: layers[0].p:", "got nothing (null)");
    bad("layers: [{type: linear, name: [a]}]\n", "m.yaml:1:31: layers[0].name:", "got a list");
    bad("layers: [{type: residual, layers: {type: relu}}]\n",
        "m.yaml:1:35: layers[0].layers: expected a list of layers", "got a mapping");
    bad("layers: [{type: residual, layers: }]\n", "layers[0].layers: expected a list of layers",
        "got nothing (null)");
    bad("loss: [mse]\nmodel: mlp\n", "m.yaml:1:7: loss: expected cross_entropy", "got a list");
    bad("model: mlp\n[a]: 1\n", "m.yaml:2:1: model: keys must be plain names", "");
    bad("~\n", "m.yaml:1:1: model: expected a mapping", "got nothing (null)");
    bad("- mlp\n", "m.yaml:1:1: model: expected a mapping", "got a list");
    stoke_model_file_free(parse("cnn\n"));
    /* tags and more documents than one are refused, not ignored */
    bad("model: !!str mlp\n", "m.yaml:1:8: model: tags (!!str) are not supported", "");
    bad("layers: [!relu {type: relu}]\n", "m.yaml:1:10: layers[0]: tags (!relu)", "");
    bad("model: mlp\n---\nmodel: cnn\n", "m.yaml:2:1: a second document (---)", "");
    stoke_model_file_free(parse("---\nmodel: mlp\n...\n"));
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

/* Issue 24 (4): linear layers on an image without a flatten failed at the loss,
 * "cross_entropy#8: needs logits (K) with K >= 2 classes, fc2 is (1, 28, 10)", naming
 * neither a layer of the file nor the fix. The first linear on a (C, H, W) input is
 * refused, with its name, line and shape, and the flatten it lacks. */
static void test_linear_on_image(void)
{
    stoke_shape img = {3, {1, 28, 28}}, none = {0};
    stoke_model_file *mf = parse("layers:\n"
                                 "  - {type: relu}\n"
                                 "  - {type: linear, out: 64}\n"
                                 "  - {type: relu}\n"
                                 "  - {type: linear}\n");
    stoke_graph *g = mf ? stoke_model_file_build(mf, &img, STOKE_TARGET_CLASS, &none, 10) : NULL;
    CHECK(g == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(),
                       "m.yaml:3:5: fc1: linear on a (1, 28, 28) input applies to its last axis "
                       "only (28 values)");
    CHECK_STR_CONTAINS(stoke_last_error(), "add `- {type: flatten}` before it");
    stoke_graph_free(g);
    stoke_model_file_free(mf);
    /* the user's name, after a conv, inside a residual block */
    mf = parse("layers:\n"
               "  - {type: conv2d, out: 4, kernel: 3, padding: 1}\n"
               "  - type: residual\n"
               "    layers:\n"
               "      - {type: linear, out: 28, name: mix}\n"
               "  - {type: flatten}\n"
               "  - {type: linear}\n");
    g = mf ? stoke_model_file_build(mf, &img, STOKE_TARGET_CLASS, &none, 10) : NULL;
    CHECK(g == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "m.yaml:5:9: mix: linear on a (4, 28, 28) input");
    stoke_graph_free(g);
    stoke_model_file_free(mf);
    /* after a flatten, and on the tokens of a patchify, linear is what is meant */
    mf = parse("layers:\n  - {type: flatten}\n  - {type: linear}\n");
    g = mf ? stoke_model_file_build(mf, &img, STOKE_TARGET_CLASS, &none, 10) : NULL;
    CHECK_MSG(g != NULL, "%s", stoke_last_error());
    stoke_graph_free(g);
    stoke_model_file_free(mf);
    mf = parse("layers:\n  - {type: patchify, patch: 7}\n  - {type: linear, out: 8}\n"
               "  - {type: seq_mean}\n  - {type: linear}\n");
    g = mf ? stoke_model_file_build(mf, &img, STOKE_TARGET_CLASS, &none, 10) : NULL;
    CHECK_MSG(g != NULL, "%s", stoke_last_error());
    stoke_graph_free(g);
    stoke_model_file_free(mf);
}

int main(void)
{
    test_parse();
    test_nesting();
    test_aliases();
    test_duplicate_keys();
    test_shapes();
    test_build();
    test_linear_on_image();
    test_actor_critic();
    return CHECK_DONE();
}
