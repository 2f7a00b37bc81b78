/* model_file.c - YAML model files (libyaml): a preset with its options or a list of
 * layers, read and checked with the file, line and column of every error. The graph
 * is built from it in model_build.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "train/model_file_impl.h"
#include "train/yaml_util.h"

const layer_type_info train_layer_types[L_COUNT] = {
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
        if (!strcmp(train_layer_types[i].name, t))
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
        if (strcmp(k, "name") != 0 && !strstr(train_layer_types[type].fields, want))
            return train_yaml_fail(c->file, kn, field, "not a field of a %s layer (fields:%sname)",
                                   t, train_layer_types[type].fields);
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
