/* model_file.c - YAML model files (libyaml): a preset with its options or a list of
 * layers, checked with the file, line and column of every error, built into a graph. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "train/train_impl.h"
#include "train/yaml_util.h"

/* Residual blocks nest at most this deep. Parsing, building and freeing recurse once
 * per block, so this bounds their stack: under ASan the parser took about 1.5 KB a
 * block (it overflowed 8 MB at 5,400), so 64 take some 100 KB; no real model nests
 * more than a handful. The YAML reader's own depth limit (TRAIN_YAML_MAX_DEPTH, 2
 * levels a block) comes after this one. */
#define MAX_BLOCK_NESTING 64

typedef enum layer_type {
    L_LINEAR,
    L_CONV2D,
    L_MAXPOOL,
    L_AVGPOOL,
    L_GLOBAL_AVGPOOL,
    L_BATCHNORM,
    L_LAYERNORM,
    L_RELU,
    L_GELU,
    L_TANH,
    L_SIGMOID,
    L_DROPOUT,
    L_FLATTEN,
    L_ATTENTION,
    L_PATCHIFY,
    L_POS_EMBED,
    L_SEQ_MEAN,
    L_RESIDUAL,
    L_COUNT
} layer_type;

/* Per type: its name in files, the fields it accepts (besides type and name), and the
 * prefix of generated layer names (NULL: no parameters, no name needed). */
static const struct {
    const char *name;
    const char *fields;
    const char *prefix;
} layer_types[L_COUNT] = {
    [L_LINEAR] = {"linear", " out bias ", "fc"},
    [L_CONV2D] = {"conv2d", " out kernel stride padding bias ", "conv"},
    [L_MAXPOOL] = {"maxpool2d", " kernel stride padding ", NULL},
    [L_AVGPOOL] = {"avgpool2d", " kernel stride padding ", NULL},
    [L_GLOBAL_AVGPOOL] = {"global_avgpool", " ", NULL},
    [L_BATCHNORM] = {"batchnorm", " momentum eps ", "bn"},
    [L_LAYERNORM] = {"layernorm", " eps ", "ln"},
    [L_RELU] = {"relu", " ", NULL},
    [L_GELU] = {"gelu", " ", NULL},
    [L_TANH] = {"tanh", " ", NULL},
    [L_SIGMOID] = {"sigmoid", " ", NULL},
    [L_DROPOUT] = {"dropout", " p ", NULL},
    [L_FLATTEN] = {"flatten", " ", NULL},
    [L_ATTENTION] = {"attention", " heads ", "attn"},
    [L_PATCHIFY] = {"patchify", " patch ", NULL},
    [L_POS_EMBED] = {"pos_embed", " ", "pos"},
    [L_SEQ_MEAN] = {"seq_mean", " ", NULL},
    [L_RESIDUAL] = {"residual", " layers ", NULL},
};

typedef struct layer {
    layer_type type;
    char name[64];
    int64_t out; /* 0: the model's outputs (classes) */
    int kernel, stride, padding, heads, patch;
    bool bias;
    float p, eps, momentum;
    size_t line, col; /* 1-based, for build errors */
    struct layer *children;
    int nchildren;
} layer;

#define MAX_HIDDEN TRAIN_MAX_HIDDEN

struct stoke_model_file {
    char *name;
    char *text;
    char desc[64];
    char preset[32]; /* "" for a layers model */
    int64_t hidden[MAX_HIDDEN];
    int nhidden; /* -1: not given */
    int width, blocks, patch, depth, heads;
    layer *layers;
    int nlayers;
    char loss[24]; /* "" = by target kind */
    float label_smoothing;
    float clip, entropy; /* actor-critic: PPO epsilon (0: 0.2), entropy bonus */
};

static const char *presets[] = {"mlp", "cnn", "resnet", "transformer", "actor-critic"};
#define N_PRESETS (sizeof presets / sizeof presets[0])

typedef struct ctx {
    const char *file;
    yaml_document_t *doc;
} ctx;

/* A value's text; NULL for a mapping, a list or null (each an error where a value is
 * expected, reported with train_yaml_what). */
static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE && !train_yaml_is_null(n)
               ? (const char *)n->data.scalar.value
               : NULL;
}

/* The "got ..." of a message about `n`, in a buffer good for one message. */
#define WHAT(n) train_yaml_what((n), (char[96]){0}, 96)

static yaml_node_t *node(const ctx *c, int i) { return yaml_document_get_node(c->doc, i); }

static stoke_status get_int(const ctx *c, const yaml_node_t *n, const char *field, long min,
                            long max, int64_t *out)
{
    const char *s = scalar(n);
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < min || v > max)
        return train_yaml_fail(c->file, n, field, "expected an integer in [%ld, %ld], got %s", min,
                               max, WHAT(n));
    *out = v;
    return STOKE_OK;
}

static stoke_status get_int32(const ctx *c, const yaml_node_t *n, const char *field, long min,
                              long max, int *out)
{
    int64_t v;
    stoke_status s = get_int(c, n, field, min, max, &v);
    if (s == STOKE_OK)
        *out = (int)v;
    return s;
}

static stoke_status get_float(const ctx *c, const yaml_node_t *n, const char *field, double min,
                              double max, float *out)
{
    const char *s = scalar(n);
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < min || v > max)
        return train_yaml_fail(c->file, n, field, "expected a number in [%g, %g], got %s", min, max,
                               WHAT(n));
    *out = (float)v;
    return STOKE_OK;
}

static stoke_status get_bool(const ctx *c, const yaml_node_t *n, const char *field, bool *out)
{
    const char *s = scalar(n);
    if (s && (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))) {
        *out = true;
        return STOKE_OK;
    }
    if (s && (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))) {
        *out = false;
        return STOKE_OK;
    }
    return train_yaml_fail(c->file, n, field, "expected true or false, got %s", WHAT(n));
}

/* dst = path + suffix (a field name such as "layers[0].layers[2].out"). A path too long
 * for dst keeps its start and its end, with " ... " between (as train_yaml_load's
 * messages do); the message's line and column say exactly where. */
static void field_path(char *dst, size_t size, const char *path, const char *suffix)
{
    size_t pl = strlen(path), sl = strlen(suffix), n;
    if (pl + sl < size) {
        memcpy(dst, path, pl);
        memcpy(dst + pl, suffix, sl);
        dst[pl + sl] = '\0';
        return;
    }
    const char *cut = strstr(path, " ... "); /* cut before, by this function */
    size_t head = cut ? (size_t)(cut - path) : (size - 1) / 2;
    while (!cut && head > 0 && path[head] != '.' && path[head] != '[')
        head--;
    if (head + 5 + sl + 1 > size) { /* not with stoke's buffers */
        snprintf(dst, size, "%s", suffix);
        return;
    }
    const char *rest = cut ? cut + 5 : path + head;
    const char *tail = path + pl - (size - 1 - head - 5 - sl);
    if (tail < rest)
        tail = rest;
    while (*tail && *tail != '.' && *tail != '[') /* from the start of a part */
        tail++;
    tail += *tail == '.';
    size_t tl = strlen(tail);
    memcpy(dst, path, head);
    memcpy(dst + head, " ... ", 5);
    n = head + 5;
    memcpy(dst + n, tail, tl);
    memcpy(dst + n + tl, suffix, sl);
    dst[n + tl + sl] = '\0';
}

/* Recurses once per residual block: at most MAX_BLOCK_NESTING deep. */
static void free_layers(layer *l, int n)
{
    for (int i = 0; i < n; i++)
        free_layers(l[i].children, l[i].nchildren);
    free(l);
}

static stoke_status parse_layers(const ctx *c, const yaml_node_t *seq, const char *path, int blocks,
                                 layer **out, int *count);

/* `blocks`: how many residual blocks enclose the layer. */
static stoke_status parse_layer(const ctx *c, const yaml_node_t *n, const char *path, int blocks,
                                layer *l)
{
    if (n->type != YAML_MAPPING_NODE)
        return train_yaml_fail(c->file, n, path, "expected a mapping such as {type: relu}, got %s",
                               WHAT(n));
    memset(l, 0, sizeof *l);
    l->bias = true;
    l->line = n->start_mark.line + 1;
    l->col = n->start_mark.column + 1;
    /* type first, since it decides which fields are allowed */
    const yaml_node_t *type_node = NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *k = scalar(node(c, p->key));
        if (k && !strcmp(k, "type"))
            type_node = node(c, p->value);
    }
    char field[256];
    field_path(field, sizeof field, path, ".type");
    const char *t = scalar(type_node);
#define LAYER_TYPES                                                       \
    "linear, conv2d, maxpool2d, avgpool2d, global_avgpool, batchnorm, "   \
    "layernorm, relu, gelu, tanh, sigmoid, dropout, flatten, attention, " \
    "patchify, pos_embed, seq_mean, residual"
    if (!type_node)
        return train_yaml_fail(c->file, n, field, "missing (one of " LAYER_TYPES ")");
    if (!t)
        return train_yaml_fail(c->file, type_node, field, "expected one of " LAYER_TYPES ", got %s",
                               WHAT(type_node));
#undef LAYER_TYPES
    int type = -1;
    for (int i = 0; i < L_COUNT; i++)
        if (!strcmp(layer_types[i].name, t))
            type = i;
    if (type < 0)
        return train_yaml_fail(c->file, type_node, field, "unknown layer type '%s'", t);
    l->type = (layer_type)type;
    if (type == L_MAXPOOL || type == L_AVGPOOL)
        l->kernel = 2;
    if (type == L_BATCHNORM)
        l->momentum = 0.1f;
    l->eps = 1e-5f;
    bool have_out = false, have_kernel = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = node(c, p->key), *v = node(c, p->value);
        const char *k = scalar(kn);
        if (!k)
            return train_yaml_fail(c->file, kn, path, "keys must be plain names");
        char dot_k[72];
        snprintf(dot_k, sizeof dot_k, ".%.64s", k);
        field_path(field, sizeof field, path, dot_k);
        if (!strcmp(k, "type"))
            continue;
        char want[40];
        snprintf(want, sizeof want, " %s ", k);
        if (strcmp(k, "name") != 0 && !strstr(layer_types[type].fields, want))
            return train_yaml_fail(c->file, kn, field, "not a field of a %s layer (fields:%sname)",
                                   t, layer_types[type].fields);
        stoke_status s = STOKE_OK;
        if (!strcmp(k, "name")) {
            const char *nm = scalar(v);
            if (!nm || !*nm || strlen(nm) >= sizeof l->name || strchr(nm, '.'))
                return train_yaml_fail(c->file, v, field,
                                       "expected a name of 1 to 63 characters without "
                                       "'.', got %s",
                                       WHAT(v));
            snprintf(l->name, sizeof l->name, "%s", nm);
        } else if (!strcmp(k, "out")) {
            const char *sv = scalar(v);
            if (sv && !strcmp(sv, "classes"))
                l->out = 0;
            else
                s = get_int(c, v, field, 1, 1L << 24, &l->out);
            have_out = true;
        } else if (!strcmp(k, "kernel")) {
            s = get_int32(c, v, field, 1, 64, &l->kernel);
            have_kernel = true;
        } else if (!strcmp(k, "stride")) {
            s = get_int32(c, v, field, 1, 64, &l->stride);
        } else if (!strcmp(k, "padding")) {
            s = get_int32(c, v, field, 0, 64, &l->padding);
        } else if (!strcmp(k, "heads")) {
            s = get_int32(c, v, field, 1, 1024, &l->heads);
        } else if (!strcmp(k, "patch")) {
            s = get_int32(c, v, field, 1, 1024, &l->patch);
        } else if (!strcmp(k, "bias")) {
            s = get_bool(c, v, field, &l->bias);
        } else if (!strcmp(k, "p")) {
            s = get_float(c, v, field, 0, 0.99, &l->p);
        } else if (!strcmp(k, "eps")) {
            s = get_float(c, v, field, 1e-12, 1, &l->eps);
        } else if (!strcmp(k, "momentum")) {
            s = get_float(c, v, field, 0, 1, &l->momentum);
        } else if (!strcmp(k, "layers")) {
            char sub[128];
            field_path(sub, sizeof sub, path, ".layers");
            /* (a key given twice, which would leak the first list, is refused by
             * train_yaml_load before this runs) */
            if (blocks >= MAX_BLOCK_NESTING)
                return train_yaml_fail(c->file, n, path,
                                       "residual blocks nested deeper than %d (stoke's "
                                       "limit)",
                                       MAX_BLOCK_NESTING);
            s = parse_layers(c, v, sub, blocks + 1, &l->children, &l->nchildren);
        }
        if (s != STOKE_OK)
            return s;
    }
    snprintf(field, sizeof field, "%s", path);
    if (type == L_CONV2D && (!have_out || !have_kernel))
        return train_yaml_fail(c->file, n, field, "a conv2d layer needs out and kernel");
    if (type == L_ATTENTION && l->heads == 0)
        return train_yaml_fail(c->file, n, field, "an attention layer needs heads");
    if (type == L_PATCHIFY && l->patch == 0)
        return train_yaml_fail(c->file, n, field, "a patchify layer needs patch");
    if (type == L_RESIDUAL && l->nchildren == 0)
        return train_yaml_fail(c->file, n, field, "a residual block needs layers");
    (void)have_out;
    return STOKE_OK;
}

static stoke_status parse_layers(const ctx *c, const yaml_node_t *seq, const char *path, int blocks,
                                 layer **out, int *count)
{
    if (seq->type != YAML_SEQUENCE_NODE)
        return train_yaml_fail(c->file, seq, path, "expected a list of layers, got %s", WHAT(seq));
    int n = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (n == 0)
        return train_yaml_fail(c->file, seq, path, "the list of layers is empty");
    if (n > 4096)
        return train_yaml_fail(c->file, seq, path, "%d layers (at most 4096)", n);
    layer *l = calloc((size_t)n, sizeof *l);
    if (!l)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", c->file);
    for (int i = 0; i < n; i++) {
        char sub[128];
        char index[16];
        snprintf(index, sizeof index, "[%d]", i);
        field_path(sub, sizeof sub, path, index);
        stoke_status s =
            parse_layer(c, node(c, seq->data.sequence.items.start[i]), sub, blocks, &l[i]);
        if (s != STOKE_OK) {
            free_layers(l, i + 1);
            return s;
        }
    }
    *out = l;
    *count = n;
    return STOKE_OK;
}

static stoke_status parse_root(const ctx *c, stoke_model_file *mf)
{
    yaml_node_t *root = yaml_document_get_root_node(c->doc);
    if (!root)
        return train_yaml_fail(c->file, NULL, "model", "the file is empty");
    if (root->type == YAML_SCALAR_NODE) {
        /* A bare preset name, as `--model cnn` gives. */
        if (!scalar(root))
            return train_yaml_fail(c->file, root, "model",
                                   "expected a mapping (model: cnn, or layers: "
                                   "[...]) or a preset name, got %s",
                                   WHAT(root));
        snprintf(mf->preset, sizeof mf->preset, "%.31s", scalar(root));
    } else if (root->type != YAML_MAPPING_NODE) {
        return train_yaml_fail(c->file, root, "model",
                               "expected a mapping (model: cnn, or layers: [...]), "
                               "got %s",
                               WHAT(root));
    }
    const yaml_node_t *layers_node = NULL, *preset_node = NULL, *ac_node = NULL;
    if (root->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
             p++) {
            yaml_node_t *kn = node(c, p->key), *v = node(c, p->value);
            const char *k = scalar(kn);
            if (!k)
                return train_yaml_fail(c->file, kn, "model", "keys must be plain names");
            stoke_status s = STOKE_OK;
            if (!strcmp(k, "model")) {
                const char *pv = scalar(v);
                if (!pv || !*pv || strlen(pv) >= sizeof mf->preset)
                    return train_yaml_fail(c->file, v, k,
                                           "expected a preset name (mlp, cnn, resnet, "
                                           "transformer, actor-critic), got %s",
                                           WHAT(v));
                snprintf(mf->preset, sizeof mf->preset, "%s", pv);
                preset_node = v;
            } else if (!strcmp(k, "layers")) {
                if (v->type == YAML_SEQUENCE_NODE)
                    layers_node = v;
                else if (!scalar(v))
                    return train_yaml_fail(c->file, v, k,
                                           "expected a list of layers (or the transformer's "
                                           "depth), got %s",
                                           WHAT(v));
                else
                    s = get_int32(c, v, k, 1, 256, &mf->depth); /* transformer depth */
            } else if (!strcmp(k, "hidden")) {
                if (v->type == YAML_SEQUENCE_NODE) {
                    int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
                    if (n < 1 || n > MAX_HIDDEN)
                        return train_yaml_fail(c->file, v, k, "expected 1 to %d sizes", MAX_HIDDEN);
                    for (int i = 0; i < n && s == STOKE_OK; i++) {
                        char f[32];
                        snprintf(f, sizeof f, "hidden[%d]", i);
                        s = get_int(c, node(c, v->data.sequence.items.start[i]), f, 1, 1L << 20,
                                    &mf->hidden[i]);
                    }
                    mf->nhidden = n;
                } else {
                    s = get_int(c, v, k, 1, 1L << 20, &mf->hidden[0]);
                    mf->nhidden = 1;
                }
            } else if (!strcmp(k, "width")) {
                s = get_int32(c, v, k, 1, 4096, &mf->width);
            } else if (!strcmp(k, "blocks")) {
                s = get_int32(c, v, k, 1, 64, &mf->blocks);
            } else if (!strcmp(k, "patch")) {
                s = get_int32(c, v, k, 1, 1024, &mf->patch);
            } else if (!strcmp(k, "heads")) {
                s = get_int32(c, v, k, 1, 1024, &mf->heads);
            } else if (!strcmp(k, "loss")) {
                const char *lv = scalar(v);
                if (!lv || (strcmp(lv, "cross_entropy") && strcmp(lv, "mse") && strcmp(lv, "l1") &&
                            strcmp(lv, "bce")))
                    return train_yaml_fail(
                        c->file, v, k, "expected cross_entropy, mse, l1 or bce, got %s", WHAT(v));
                snprintf(mf->loss, sizeof mf->loss, "%s", lv);
            } else if (!strcmp(k, "label_smoothing")) {
                s = get_float(c, v, k, 0, 0.99, &mf->label_smoothing);
            } else if (!strcmp(k, "clip")) {
                s = get_float(c, v, k, 0.001, 0.999, &mf->clip);
                ac_node = kn;
            } else if (!strcmp(k, "entropy")) {
                s = get_float(c, v, k, 0, 10, &mf->entropy);
                ac_node = kn;
            } else {
                return train_yaml_fail(c->file, kn, k,
                                       "unknown key (model, layers, hidden, width, blocks, "
                                       "patch, heads, loss, label_smoothing, clip, entropy)");
            }
            if (s != STOKE_OK)
                return s;
        }
    }
    if (mf->preset[0] && layers_node)
        return train_yaml_fail(c->file, layers_node, "layers",
                               "give either model (a preset) or a list of "
                               "layers, not both");
    if (ac_node && strcmp(mf->preset, "actor-critic") != 0)
        return train_yaml_fail(c->file, ac_node, scalar(ac_node),
                               "applies to the actor-critic preset only");
    if (layers_node)
        return parse_layers(c, layers_node, "layers", 0, &mf->layers, &mf->nlayers);
    if (!mf->preset[0])
        return train_yaml_fail(c->file, root, "model",
                               "missing: name a preset (model: cnn) or list layers");
    bool known = false;
    for (size_t i = 0; i < N_PRESETS; i++)
        known |= !strcmp(presets[i], mf->preset);
    if (!known)
        return train_yaml_fail(c->file, preset_node ? preset_node : root, "model",
                               "unknown preset '%s' "
                               "(mlp, cnn, resnet, transformer, actor-critic)",
                               mf->preset);
    return STOKE_OK;
}

void stoke_model_file_free(stoke_model_file *mf)
{
    if (!mf)
        return;
    free(mf->name);
    free(mf->text);
    free_layers(mf->layers, mf->nlayers);
    free(mf);
}

stoke_status stoke_model_file_parse(const char *text, size_t len, const char *name,
                                    stoke_model_file **out)
{
    *out = NULL;
    stoke_model_file *mf = calloc(1, sizeof *mf);
    if (!mf || !(mf->name = strdup(name)) || !(mf->text = malloc(len + 1))) {
        stoke_model_file_free(mf);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", name);
    }
    memcpy(mf->text, text, len);
    mf->text[len] = '\0';
    mf->nhidden = -1;
    yaml_document_t doc;
    stoke_status s = train_yaml_load(text, len, name, false, &doc);
    if (s != STOKE_OK) {
        stoke_model_file_free(mf);
        return s;
    }
    ctx c = {name, &doc};
    s = parse_root(&c, mf);
    yaml_document_delete(&doc);
    if (s != STOKE_OK) {
        stoke_model_file_free(mf);
        return s;
    }
    if (mf->preset[0])
        snprintf(mf->desc, sizeof mf->desc, "%s", mf->preset);
    else
        snprintf(mf->desc, sizeof mf->desc, "layers (%d)", mf->nlayers);
    *out = mf;
    return STOKE_OK;
}

stoke_status stoke_model_file_load(const char *spec, stoke_model_file **out)
{
    *out = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(presets[i], spec)) {
            char doc[64];
            snprintf(doc, sizeof doc, "model: %s\n", spec);
            return stoke_model_file_parse(doc, strlen(doc), spec, out);
        }
    char *buf;
    size_t n;
    stoke_status s = train_yaml_read_file(spec,
                                          "not a preset (mlp, cnn, resnet, transformer, "
                                          "actor-critic)",
                                          &buf, &n);
    if (s != STOKE_OK)
        return s;
    s = stoke_model_file_parse(buf, n, spec, out);
    free(buf);
    return s;
}

const char *stoke_model_file_text(const stoke_model_file *mf) { return mf->text; }
const char *stoke_model_file_describe(const stoke_model_file *mf) { return mf->desc; }

/* ---- Building --------------------------------------------------------------------- */

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
        else if (layer_types[y->type].prefix)
            snprintf(name, sizeof name, "%s%d", layer_types[y->type].prefix, ++b->counts[y->type]);
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
                             layer_types[y->type].name);
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
