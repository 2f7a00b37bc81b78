/* saved.c - a trained model rebuilt from its checkpoint for evaluation and prediction:
 * the model file, input shape, targets and normalization come from the metadata. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_impl.h"

struct stoke_saved_model {
    stoke_model_file *mf;
    stoke_graph *graph;
    stoke_model *model;
    int64_t batch;
    train_input input;
    stoke_op ops[STOKE_TRAIN_MAX_OPS];
    stoke_transform_opts topts;
    stoke_transform *transform;
    void *scratch;
    stoke_target_kind kind;
    int64_t classes;
    stoke_tensor x, y, logits, value, metric;
    int64_t outputs, logit_elems, target_elems;
    char dataset[512];
    stoke_ckpt *ck;     /* open until the model is allocated, for its weights */
    char **class_names; /* classes entries, or NULL: the checkpoint names none */
};

void stoke_saved_model_free(stoke_saved_model *s)
{
    if (!s)
        return;
    stoke_model_free(s->model);
    stoke_ckpt_close(s->ck);
    stoke_graph_free(s->graph);
    stoke_model_file_free(s->mf);
    stoke_transform_destroy(s->transform);
    free(s->scratch);
    for (int64_t c = 0; s->class_names && c < s->classes; c++)
        free(s->class_names[c]);
    free(s->class_names);
    free(s);
}

/* stoke.class_names, a JSON array of one string per class; optional (checkpoints of
 * datasets without names, and older ones, lack it). */
static stoke_status read_class_names(stoke_saved_model *s, const stoke_ckpt *c, const char *path)
{
    const char *js = stoke_ckpt_meta(c, "stoke.class_names");
    if (!js || s->kind != STOKE_TARGET_CLASS || s->classes <= 0)
        return STOKE_OK;
    cJSON *a = cJSON_Parse(js);
    stoke_status st = STOKE_OK;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != s->classes)
        st = stoke_fail(STOKE_ERR_FORMAT,
                        "%s: metadata stoke.class_names is not an array of %" PRId64 " names", path,
                        s->classes);
    else if (!(s->class_names = calloc((size_t)s->classes, sizeof *s->class_names)))
        st = stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; st == STOKE_OK && k < s->classes; k++) {
        const cJSON *e = cJSON_GetArrayItem(a, (int)k);
        if (!cJSON_IsString(e))
            st = stoke_fail(STOKE_ERR_FORMAT,
                            "%s: metadata stoke.class_names: entry %" PRId64 " is not a string",
                            path, k);
        else if (!(s->class_names[k] = strdup(e->valuestring)))
            st = stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(a);
    return st;
}

/* The graph's tensors eval and predict use: input, target, the outputs (logits, or an
 * actor-critic's policy and value) and the metric. */
static stoke_status find_tensors(stoke_saved_model *s, const char *path)
{
    s->x = stoke_graph_find(s->graph, "x");
    s->y = stoke_graph_find(s->graph, "y");
    s->logits = stoke_graph_find(s->graph, "logits");
    s->value = STOKE_NO_TENSOR;
    if (s->logits == STOKE_NO_TENSOR) { /* an actor-critic: policy logits, then the value */
        s->logits = stoke_graph_find(s->graph, "policy");
        s->value = stoke_graph_find(s->graph, "value");
    }
    s->metric = STOKE_NO_TENSOR;
    for (int i = 0; i < stoke_graph_node_count(s->graph); i++) {
        stoke_nn_op op = stoke_graph_node_op(s->graph, i);
        if (s->metric == STOKE_NO_TENSOR && (op == STOKE_NN_ACCURACY || op == STOKE_NN_MAE))
            s->metric = i;
    }
    if (s->x == STOKE_NO_TENSOR || s->logits == STOKE_NO_TENSOR)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: the model has no input x or output logits", path);
    s->logit_elems = stoke_shape_elems(stoke_graph_shape(s->graph, s->logits));
    s->outputs = s->logit_elems + (s->value != STOKE_NO_TENSOR ? 1 : 0);
    s->target_elems =
        s->y != STOKE_NO_TENSOR ? stoke_shape_elems(stoke_graph_shape(s->graph, s->y)) : 0;
    return STOKE_OK;
}

/* Every parameter in the checkpoint, float32 of the graph's shape. Inference reads the
 * fp32 master weights; buffers (batch norm statistics) too. They are checked now and
 * copied when the model is allocated (ensure_model). */
static stoke_status check_weights(const stoke_saved_model *s, const stoke_ckpt *c, const char *path)
{
    const stoke_graph *g = s->graph;
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        if (!train_tensor_fits(stoke_ckpt_find(c, p->name), &p->shape))
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: tensor '%s' is missing or not float32 of "
                              "the model's shape",
                              path, p->name);
    }
    return STOKE_OK;
}

/* The evaluation transform the training run used (its config in the checkpoint): a
 * model trained on random resized crops is evaluated on centre crops of the image
 * enlarged by 8/7, as during training. A config that does not say is refused
 * (train_ckpt_config): guessing "none" would evaluate such a model on other inputs. */
static stoke_status saved_eval_aug(const stoke_ckpt *c, train_aug *eval)
{
    cJSON *o;
    stoke_status s = train_ckpt_config(c, &o);
    if (s != STOKE_OK)
        return s;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "augment");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(o, "transforms");
    train_aug train = TRAIN_AUG_NONE;
    *eval = TRAIN_AUG_NONE;
    if (cJSON_IsString(tr))
        train_aug_of(cJSON_IsTrue(a), tr->valuestring, &train, eval);
    cJSON_Delete(o);
    return STOKE_OK;
}

stoke_status stoke_saved_model_open(const char *path, int64_t batch, stoke_saved_model **out)
{
    *out = NULL;
    stoke_ckpt *c;
    stoke_status st = stoke_ckpt_open(path, &c);
    if (st != STOKE_OK)
        return st;
    stoke_saved_model *s = calloc(1, sizeof *s);
    if (!s) {
        stoke_ckpt_close(c);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    s->batch = batch > 0 ? batch : 256;
    train_meta m;
    if ((st = train_meta_read(c, &m)) != STOKE_OK)
        goto fail;
    snprintf(s->dataset, sizeof s->dataset, "%s", m.dataset);
    /* a path that is not UTF-8: the exact bytes, not the JSON's U+FFFD */
    if (train_ckpt_config_bytes(c, "dataset", s->dataset, sizeof s->dataset) < 0) {
        st = STOKE_ERR_FORMAT;
        goto fail;
    }
    stoke_dtype dt = STOKE_DTYPE_COUNT;
    for (int i = 0; i < STOKE_DTYPE_COUNT; i++)
        if (!strcmp(stoke_dtype_name((stoke_dtype)i), m.data_dtype))
            dt = (stoke_dtype)i;
    if (strcmp(m.format, TRAIN_CKPT_FORMAT) || dt == STOKE_DTYPE_COUNT) {
        st = stoke_fail(STOKE_ERR_FORMAT,
                        "%s: its stoke metadata (format, shapes, dtype) is not "
                        "understood",
                        path);
        goto fail;
    }
    s->kind = !strcmp(m.target_kind, "class")    ? STOKE_TARGET_CLASS
              : !strcmp(m.target_kind, "vector") ? STOKE_TARGET_VECTOR
                                                 : STOKE_TARGET_SCALAR;
    s->classes = m.classes;
    if ((st = read_class_names(s, c, path)) != STOKE_OK ||
        (st = train_input_init(&s->input, &m.data_shape, dt)) != STOKE_OK)
        goto fail;
    if (s->input.image) {
        memcpy(s->input.mean, m.mean.v, sizeof s->input.mean);
        memcpy(s->input.std, m.std.v, sizeof s->input.std);
        if (m.mean.n != s->input.channels || m.std.n != s->input.channels) {
            st = stoke_fail(STOKE_ERR_FORMAT, "%s: stoke.normalize_mean/std do not have %d values",
                            path, s->input.channels);
            goto fail;
        }
        train_aug eval;
        if ((st = saved_eval_aug(c, &eval)) != STOKE_OK)
            goto fail;
        train_transform_opts(&s->input, eval, s->ops, &s->topts);
        if ((st = stoke_transform_create(&s->topts, &s->transform)) != STOKE_OK)
            goto fail;
        size_t sb = stoke_transform_scratch_bytes(s->transform);
        s->scratch = sb ? malloc(sb) : NULL;
    }
    if ((st = stoke_model_file_parse(m.model, strlen(m.model), path, &s->mf)) != STOKE_OK)
        goto fail;
    s->graph =
        stoke_model_file_build(s->mf, &s->input.model_shape, s->kind, &m.target_shape, s->classes);
    if (!s->graph) {
        st = STOKE_ERR_FORMAT;
        goto fail;
    }
    if ((st = find_tensors(s, path)) != STOKE_OK || (st = check_weights(s, c, path)) != STOKE_OK)
        goto fail;
    s->ck = c;
    *out = s;
    return STOKE_OK;
fail:
    stoke_ckpt_close(c);
    stoke_saved_model_free(s);
    return st;
}

/* Allocates the model when the first n samples arrive, at a batch of no more than n:
 * `eval --batch-size 1048576` on 10,000 samples plans for 10,000, not for a batch
 * that never runs. A plan that cannot fit is refused before allocating. */
static stoke_status ensure_model(stoke_saved_model *s, int64_t n)
{
    if (s->model)
        return STOKE_OK;
    if (n > 0 && n < s->batch)
        s->batch = n;
    stoke_model_opts mo = {.max_batch = s->batch, .precision = STOKE_PREC_FP32, .training = false};
    stoke_mem_plan plan;
    train_mem_need need = {"inference", &plan, "--batch-size",
                           0}; /* no loader: it reads samples itself */
    stoke_status st;
    if ((st = stoke_graph_plan(s->graph, &mo, &plan)) != STOKE_OK ||
        (st = train_check_memory(stoke_model_file_describe(s->mf), &need, 1, 0, NULL)) !=
            STOKE_OK ||
        (st = stoke_model_new(s->graph, &mo, &s->model)) != STOKE_OK)
        return st;
    for (int i = 0; i < stoke_graph_param_count(s->graph); i++) {
        const stoke_ckpt_tensor *t = stoke_ckpt_find(s->ck, stoke_graph_param(s->graph, i)->name);
        memcpy(stoke_model_param(s->model, i), t->data, t->nbytes);
    }
    stoke_model_params_changed(s->model);
    stoke_ckpt_close(s->ck);
    s->ck = NULL;
    return STOKE_OK;
}

const char *stoke_saved_model_dataset(const stoke_saved_model *s) { return s->dataset; }
const stoke_shape *stoke_saved_model_input_shape(const stoke_saved_model *s)
{
    return &s->input.in_shape;
}
int64_t stoke_saved_model_classes(const stoke_saved_model *s)
{
    return s->kind == STOKE_TARGET_CLASS ? s->classes : 0;
}

const char *stoke_saved_model_class_name(const stoke_saved_model *s, int64_t c)
{
    return s->class_names && c >= 0 && c < s->classes ? s->class_names[c] : NULL;
}
int64_t stoke_saved_model_outputs(const stoke_saved_model *s) { return s->outputs; }
int64_t stoke_saved_model_actions(const stoke_saved_model *s)
{
    return s->value != STOKE_NO_TENSOR ? s->logit_elems : 0;
}

/* Readies the model for the batches n samples come in (the last one smaller), so a
 * kernel that needs more workspace at that batch fails before any output. */
static stoke_status reserve(stoke_saved_model *s, int64_t n)
{
    stoke_status st = STOKE_OK;
    if (n >= s->batch)
        st = stoke_model_reserve(s->model, s->batch);
    if (st == STOKE_OK && n % s->batch)
        st = stoke_model_reserve(s->model, n % s->batch);
    return st;
}

/* Writes n samples of raw input into the model's input buffer, transformed as in
 * training. */
static void feed(stoke_saved_model *s, const unsigned char *in, size_t in_bytes, int64_t n)
{
    float *x = stoke_model_input(s->model, s->x);
    size_t xe = (size_t)stoke_shape_elems(&s->input.model_shape);
    for (int64_t i = 0; i < n; i++) {
        if (s->transform)
            stoke_transform_apply(s->transform, in + (size_t)i * in_bytes, x + (size_t)i * xe,
                                  s->scratch, 0, 0, i);
        else
            memcpy(x + (size_t)i * xe, in + (size_t)i * in_bytes, xe * sizeof(float));
    }
}

stoke_status stoke_saved_model_eval(stoke_saved_model *s, stoke_dataset *d, int64_t limit,
                                    double *loss, double *metric, int64_t *count)
{
    const stoke_dataset_info *in = stoke_dataset_get_info(d);
    if (in->input_dtype != s->input.in_dtype || in->input_shape.ndim != s->input.in_shape.ndim ||
        memcmp(in->input_shape.dims, s->input.in_shape.dims,
               sizeof in->input_shape.dims[0] * (size_t)in->input_shape.ndim))
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: the dataset's samples are not those the model was "
                          "trained on (shape or dtype differ)",
                          stoke_dataset_path(d));
    if (in->target_kind == STOKE_TARGET_NONE || s->y == STOKE_NO_TENSOR)
        return stoke_fail(STOKE_ERR_ARG, "%s: the dataset has no targets to evaluate against",
                          stoke_dataset_path(d));
    int64_t n = limit > 0 && limit < in->count ? limit : in->count;
    stoke_status rs = ensure_model(s, n);
    if (rs == STOKE_OK)
        rs = reserve(s, n);
    if (rs != STOKE_OK)
        return rs;
    unsigned char *ib = malloc((size_t)s->batch * in->input_bytes);
    unsigned char *tb = malloc((size_t)s->batch * (in->target_bytes ? in->target_bytes : 1));
    int64_t *idx = malloc((size_t)s->batch * sizeof *idx);
    stoke_status st = ib && tb && idx ? STOKE_OK : stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    train_targets tg = {
        in->target_dtype,     s->target_elems, s->kind == STOKE_TARGET_CLASS, s->classes, NULL,
        stoke_dataset_path(d)};
    train_eval acc = {0};
    for (int64_t at = 0; at < n && st == STOKE_OK; at += s->batch) {
        int64_t b = n - at < s->batch ? n - at : s->batch;
        for (int64_t i = 0; i < b && st == STOKE_OK; i++) {
            idx[i] = at + i;
            st = stoke_dataset_read(d, at + i, ib + (size_t)i * in->input_bytes,
                                    tb + (size_t)i * in->target_bytes);
        }
        if (st != STOKE_OK)
            break;
        feed(s, ib, in->input_bytes, b);
        st = train_eval_batch(s->model, s->y, s->metric, &tg, tb, idx, b, &acc);
    }
    free(ib);
    free(tb);
    free(idx);
    if (st != STOKE_OK)
        return st;
    train_eval_means(&acc, s->metric != STOKE_NO_TENSOR, loss, metric, count);
    return STOKE_OK;
}

stoke_status stoke_saved_model_predict(stoke_saved_model *s, const void *inputs, stoke_dtype dtype,
                                       int64_t n, int64_t *pred, float *out)
{
    if (dtype != s->input.in_dtype)
        return stoke_fail(STOKE_ERR_ARG, "inputs are %s, the model was trained on %s",
                          stoke_dtype_name(dtype), stoke_dtype_name(s->input.in_dtype));
    size_t in_bytes = (size_t)stoke_shape_elems(&s->input.in_shape) * stoke_dtype_size(dtype);
    stoke_status rs = ensure_model(s, n);
    if (rs == STOKE_OK)
        rs = reserve(s, n);
    if (rs != STOKE_OK)
        return rs;
    if (s->y != STOKE_NO_TENSOR) /* forward also computes the loss: give it valid targets */
        memset(stoke_model_input(s->model, s->y), 0,
               (size_t)s->batch * (size_t)s->target_elems * 4);
    for (int64_t at = 0; at < n; at += s->batch) {
        int64_t b = n - at < s->batch ? n - at : s->batch;
        feed(s, (const unsigned char *)inputs + (size_t)at * in_bytes, in_bytes, b);
        stoke_status st = stoke_model_forward(s->model, b, false);
        if (st != STOKE_OK)
            return st;
        const float *o = stoke_model_output(s->model, s->logits);
        const float *v =
            s->value != STOKE_NO_TENSOR ? stoke_model_output(s->model, s->value) : NULL;
        if (!o || (s->value != STOKE_NO_TENSOR && !v))
            return stoke_fail(STOKE_ERR_ARG, "the model's output is not readable");
        size_t K = (size_t)s->logit_elems;
        for (int64_t i = 0; i < b; i++) {
            const float *r = o + (size_t)i * K;
            int64_t best = 0;
            for (size_t k = 1; k < K; k++)
                if (r[k] > r[best])
                    best = (int64_t)k;
            pred[at + i] = s->kind == STOKE_TARGET_CLASS || v ? best : 0;
            if (out) {
                float *w = out + (size_t)(at + i) * (size_t)s->outputs;
                memcpy(w, r, K * 4);
                if (v)
                    w[K] = v[i];
            }
        }
    }
    return STOKE_OK;
}
