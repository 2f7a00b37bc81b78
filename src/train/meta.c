/* meta.c - a training checkpoint: its stoke.* metadata as one table of {key, field,
 * type} that both the writer (stoke_trainer_save) and the readers (resume, eval,
 * predict) go through, and the tensors (weights, then the optimizer's state). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/parse.h"
#include "train/trainer.h"

typedef enum meta_type {
    META_TEXT,   /* const char *, as it is */
    META_I64,    /* int64_t, decimal */
    META_U64,    /* uint64_t, decimal */
    META_F32,    /* float, %.9g (reads back the same float) */
    META_F64,    /* double, %.17g (reads back the same double) */
    META_SHAPE,  /* stoke_shape, "1,28,28" */
    META_FLOATS, /* train_floats, "0.286,0.353" */
} meta_type;

typedef struct meta_row {
    const char *key;
    size_t field; /* offsetof(train_meta, ...) */
    meta_type type;
    /* A number's range: what a run can write. A checkpoint is outside data (edited,
     * damaged, another program's): "-1" as the step would run the loop from step -1. */
    double min, max;
} meta_row;

/* The counts a run reaches: max_steps and limit go to 1e15, epochs to 1e6. */
#define COUNT 1e15
#define ROW(key, field, type)                        \
    {                                                \
        key, offsetof(train_meta, field), type, 0, 0 \
    }
#define NUM(key, field, type, lo, hi)                  \
    {                                                  \
        key, offsetof(train_meta, field), type, lo, hi \
    }
/* In the order they are written (the checkpoint's bytes depend on it). */
static const meta_row rows[] = {
    ROW("stoke.format", format, META_TEXT),
    NUM("stoke.epoch", epoch, META_I64, 0, 1e6),
    NUM("stoke.step", step, META_I64, 0, COUNT),
    ROW("stoke.seed", seed, META_U64), /* every 64-bit value is a seed */
    NUM("stoke.sampler_epoch", sampler_epoch, META_I64, 0, 1e6),
    NUM("stoke.sampler_index", sampler_index, META_I64, 0, COUNT),
    /* 0: no dynamic scale (fp32, bf16); fp16's is a power of two, at most FLT_MAX */
    NUM("stoke.loss_scale", loss_scale, META_F32, 0, FLT_MAX),
    ROW("stoke.precision", precision, META_TEXT),
    ROW("stoke.optimizer", optimizer, META_TEXT),
    /* shapes: each dimension, at least 1 (the kernels index with 32-bit ints) */
    NUM("stoke.input_shape", input_shape, META_SHAPE, 1, INT32_MAX),
    NUM("stoke.data_shape", data_shape, META_SHAPE, 1, INT32_MAX),
    ROW("stoke.data_dtype", data_dtype, META_TEXT),
    ROW("stoke.target_kind", target_kind, META_TEXT),
    NUM("stoke.classes", classes, META_I64, 0, INT32_MAX),
    NUM("stoke.target_shape", target_shape, META_SHAPE, 1, INT32_MAX),
    /* each channel's; a std divides (the writer's is never below 1e-6) */
    NUM("stoke.normalize_mean", mean, META_FLOATS, -FLT_MAX, FLT_MAX),
    NUM("stoke.normalize_std", std, META_FLOATS, FLT_MIN, FLT_MAX),
    /* an actor-critic's loss is below 0 at times; accuracy and MAE never are */
    NUM("stoke.epoch_loss_sum", epoch_loss_sum, META_F64, -DBL_MAX, DBL_MAX),
    NUM("stoke.epoch_metric_sum", epoch_metric_sum, META_F64, 0, DBL_MAX),
    NUM("stoke.epoch_samples", epoch_samples, META_I64, 0, COUNT),
    NUM("stoke.epoch_batches", epoch_batches, META_I64, 0, COUNT),
    ROW("stoke.model", model, META_TEXT),
    ROW("stoke.dataset", dataset, META_TEXT),
    ROW("stoke.config", config, META_TEXT),
};
#undef ROW
#undef NUM
#undef COUNT
enum { N_ROWS = sizeof rows / sizeof rows[0] };

/* A row's value as text into buf (a META_TEXT row's own string is returned instead). */
static const char *meta_format(const meta_row *r, const train_meta *m, char *buf, size_t n)
{
    const void *f = (const char *)m + r->field;
    switch (r->type) {
    case META_TEXT: return *(const char *const *)f;
    case META_I64: snprintf(buf, n, "%" PRId64, *(const int64_t *)f); break;
    case META_U64: snprintf(buf, n, "%" PRIu64, *(const uint64_t *)f); break;
    case META_F32: snprintf(buf, n, "%.9g", (double)*(const float *)f); break;
    case META_F64: snprintf(buf, n, "%.17g", *(const double *)f); break;
    case META_SHAPE: train_format_shape(f, buf, n); break;
    case META_FLOATS: {
        const train_floats *fl = f;
        train_format_floats(fl->v, fl->n, buf, n);
        break;
    }
    }
    return buf;
}

/* Parses v into the row's field; false when it is not of the row's type, and
 * *out_of_range too when it is a number outside the row's range (NaN and infinities
 * are outside every range). */
static bool meta_parse(const meta_row *r, const char *v, train_meta *m, bool *out_of_range)
{
    void *f = (char *)m + r->field;
    char *end = NULL;
    double x = 0;
    *out_of_range = false;
    errno = 0;
    switch (r->type) {
    case META_TEXT: *(const char **)f = v; return true;
    case META_U64: return stoke_parse_u64(v, (uint64_t *)f);
    case META_SHAPE: {
        const stoke_shape *sh = f;
        if (!train_parse_shape(v, f))
            return false;
        for (int d = 0; d < sh->ndim; d++)
            *out_of_range |= !(sh->dims[d] >= r->min && sh->dims[d] <= r->max);
        return !*out_of_range;
    }
    case META_FLOATS: {
        train_floats *fl = f;
        fl->n = train_parse_floats(v, fl->v, TRAIN_MAX_CHANNELS);
        for (int c = 0; c < fl->n; c++)
            *out_of_range |= !(fl->v[c] >= r->min && fl->v[c] <= r->max);
        return fl->n >= 0 && !*out_of_range;
    }
    case META_I64: x = (double)(*(int64_t *)f = strtoll(v, &end, 10)); break;
    case META_F32: x = *(float *)f = strtof(v, &end); break;
    case META_F64: x = *(double *)f = strtod(v, &end); break;
    }
    /* as the writer prints them: no blank or '+' before, nothing after */
    if (end == v || *end || errno || isspace((unsigned char)v[0]) || v[0] == '+')
        return false;
    *out_of_range = !(x >= r->min && x <= r->max);
    return !*out_of_range;
}

stoke_status train_meta_read(const stoke_ckpt *c, train_meta *m)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < N_ROWS; i++) {
        const char *v = stoke_ckpt_meta(c, rows[i].key);
        if (!v)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: metadata key %s is missing (not a stoke "
                              "checkpoint?)",
                              stoke_ckpt_path(c), rows[i].key);
        bool out_of_range;
        if (!meta_parse(&rows[i], v, m, &out_of_range))
            return out_of_range
                       ? stoke_fail(STOKE_ERR_FORMAT,
                                    "%s: metadata %s: '%.80s' is outside [%.17g, %.17g] "
                                    "(a damaged or edited checkpoint)",
                                    stoke_ckpt_path(c), rows[i].key, v, rows[i].min, rows[i].max)
                       : stoke_fail(STOKE_ERR_FORMAT, "%s: metadata %s: '%.80s' is not understood",
                                    stoke_ckpt_path(c), rows[i].key, v);
    }
    return STOKE_OK;
}

static const char *const config_required[] = {"dataset", "model",   "hidden",     "optimizer",
                                              "seed",    "augment", "transforms", NULL};

static const char *json_kind(const cJSON *v)
{
    return cJSON_IsArray(v)    ? "an array"
           : cJSON_IsObject(v) ? "an object"
           : cJSON_IsNull(v)   ? "null"
           : cJSON_IsString(v) ? "a string"
           : cJSON_IsNumber(v) ? "a number"
                               : "a boolean";
}

stoke_status train_ckpt_config(const stoke_ckpt *c, cJSON **out)
{
    *out = NULL;
    const char *path = stoke_ckpt_path(c);
    const char *js = stoke_ckpt_meta(c, "stoke.config");
    if (!js)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: metadata key stoke.config is missing", path);
    cJSON *o = cJSON_Parse(js);
    if (!o)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: metadata stoke.config is not JSON", path);
    stoke_status s = STOKE_OK;
    if (!cJSON_IsObject(o))
        s = stoke_fail(STOKE_ERR_FORMAT,
                       "%s: metadata stoke.config is %s, not a JSON object of the run's "
                       "settings (a damaged or edited checkpoint)",
                       path, json_kind(o));
    for (const cJSON *v = s == STOKE_OK ? o->child : NULL; v && s == STOKE_OK; v = v->next)
        if (!cJSON_IsString(v) && !cJSON_IsNumber(v) && !cJSON_IsBool(v))
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: metadata stoke.config: key %s is %s, not a setting's value "
                           "(a string, number or boolean)",
                           path, v->string, json_kind(v));
    for (int i = 0; s == STOKE_OK && config_required[i]; i++)
        if (!cJSON_GetObjectItemCaseSensitive(o, config_required[i]))
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: metadata stoke.config lacks the key %s (what the checkpoint "
                           "was trained with; a damaged or edited checkpoint)",
                           path, config_required[i]);
    if (s != STOKE_OK) {
        cJSON_Delete(o);
        return s;
    }
    *out = o;
    return STOKE_OK;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int train_ckpt_config_bytes(const stoke_ckpt *c, const char *key, char *buf, size_t size)
{
    const char *js = stoke_ckpt_meta(c, "stoke.config_bytes");
    if (!js)
        return 0;
    cJSON *o = cJSON_Parse(js);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    int r = cJSON_IsObject(o) && (!v || cJSON_IsString(v)) ? (v ? 1 : 0) : -1;
    size_t n = r == 1 ? strlen(v->valuestring) : 0;
    if (r == 1 && (n % 2 || n / 2 >= size))
        r = -1;
    for (size_t i = 0; r == 1 && i < n / 2; i++) {
        int hi = hex_digit(v->valuestring[2 * i]), lo = hex_digit(v->valuestring[2 * i + 1]);
        if (hi < 0 || lo < 0 || (hi | lo) == 0) { /* a NUL would cut the text */
            r = -1;
            break;
        }
        buf[i] = (char)(hi << 4 | lo);
    }
    if (r == 1)
        buf[n / 2] = '\0';
    cJSON_Delete(o);
    if (r < 0)
        stoke_fail(STOKE_ERR_FORMAT,
                   "%s: metadata stoke.config_bytes: %s is not an object of settings whose "
                   "values are the hex of their bytes",
                   stoke_ckpt_path(c), v ? key : "it");
    return r;
}

/* The checkpoint's tensors: every parameter, then each optimizer slot's state of the
 * trainable ones ("optim.m.NAME", "optim.v.NAME"). */
static stoke_ckpt_tensor *collect_tensors(stoke_model *model, char (*names)[160], size_t *count)
{
    const stoke_graph *g = stoke_model_graph(model);
    int np = stoke_graph_param_count(g);
    int slots = stoke_model_optim_slots(model);
    stoke_ckpt_tensor *ts = calloc((size_t)np * 3, sizeof *ts);
    if (!ts)
        return NULL;
    size_t n = 0;
    for (int i = 0; i < np; i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        ts[n++] = (stoke_ckpt_tensor){.name = p->name,
                                      .dtype = STOKE_F32,
                                      .ndim = p->shape.ndim,
                                      .data = stoke_model_param(model, i)};
        memcpy(ts[n - 1].shape, p->shape.dims, sizeof p->shape.dims);
    }
    for (int slot = 0; slot < slots; slot++)
        for (int i = 0; i < np; i++) {
            const stoke_param_info *p = stoke_graph_param(g, i);
            float *st = stoke_model_optim_state(model, i, slot);
            if (!p->trainable || !st)
                continue;
            char *nm = names[slot * np + i];
            snprintf(nm, sizeof names[0], "optim.%s.%s", slot == 0 ? "m" : "v", p->name);
            ts[n++] = (stoke_ckpt_tensor){
                .name = nm, .dtype = STOKE_F32, .ndim = p->shape.ndim, .data = st};
            memcpy(ts[n - 1].shape, p->shape.dims, sizeof p->shape.dims);
        }
    *count = n;
    return ts;
}

/* The trainer's state as metadata; `config` is the run's config as JSON. */
static void trainer_meta(const stoke_trainer *t, const char *config, train_meta *m)
{
    stoke_sampler_state ss = t->loader ? stoke_loader_state(t->loader) : t->start;
    int channels = t->input.image ? t->input.channels : 0;
    *m = (train_meta){.format = TRAIN_CKPT_FORMAT,
                      .epoch = ss.epoch,
                      .step = t->step,
                      .seed = t->cfg.seed,
                      .sampler_epoch = ss.epoch,
                      .sampler_index = ss.index,
                      .loss_scale = stoke_model_loss_scale(t->model),
                      .precision = stoke_precision_name(t->precision),
                      .optimizer = stoke_optim_name(t->optim.kind),
                      .input_shape = t->input.model_shape,
                      .data_shape = t->info.input_shape,
                      .data_dtype = stoke_dtype_name(t->info.input_dtype),
                      .target_kind = t->classes                                   ? "class"
                                     : t->info.target_kind == STOKE_TARGET_VECTOR ? "vector"
                                                                                  : "scalar",
                      .classes = t->nclasses,
                      .target_shape = t->info.target_shape,
                      .mean.n = channels,
                      .std.n = channels,
                      .epoch_loss_sum = t->ep_loss,
                      .epoch_metric_sum = t->ep_metric,
                      .epoch_samples = t->ep_samples,
                      .epoch_batches = t->ep_batches,
                      .model = stoke_model_file_text(t->mf),
                      .dataset = t->cfg.dataset,
                      .config = config};
    memcpy(m->mean.v, t->input.mean, sizeof m->mean.v);
    memcpy(m->std.v, t->input.std, sizeof m->std.v);
}

/* The training data's class names as a JSON array (to free), or NULL when it names
 * none (only image folders do) or they do not match the model's classes. */
static char *class_names_json(const stoke_trainer *t)
{
    if (!t->classes || t->nclasses <= 0 || !stoke_dataset_class_name(t->train_src, 0) ||
        stoke_dataset_get_info(t->train_src)->num_classes != t->nclasses)
        return NULL;
    cJSON *a = cJSON_CreateArray();
    for (int64_t c = 0; a && c < t->nclasses; c++)
        cJSON_AddItemToArray(a, cJSON_CreateString(stoke_dataset_class_name(t->train_src, c)));
    char *js = a ? stoke_json_print(a, false) : NULL;
    cJSON_Delete(a);
    return js;
}

static size_t tensor_bytes(const stoke_ckpt_tensor *t)
{
    size_t n = stoke_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* A device model's tensors are copied to one host block first (*host, to free): the
 * checkpoint is written from host memory, the same file whichever device trained. */
static stoke_status tensors_to_host(stoke_model *m, stoke_ckpt_tensor *ts, size_t n, char **host)
{
    *host = NULL;
    if (!stoke_model_on_device(m))
        return STOKE_OK;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += tensor_bytes(&ts[i]);
    char *block = malloc(total ? total : 1);
    if (!block)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory copying the model to the host");
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t bytes = tensor_bytes(&ts[i]);
        stoke_status st = stoke_model_read(m, ts[i].data, block + off, bytes);
        if (st != STOKE_OK) {
            free(block);
            return st;
        }
        ts[i].data = block + off;
        off += bytes;
    }
    *host = block;
    return STOKE_OK;
}

stoke_status stoke_trainer_save(stoke_trainer *t, const char *path)
{
    int np = stoke_graph_param_count(t->graph);
    char(*names)[160] = calloc((size_t)np * 2, sizeof *names);
    size_t n = 0;
    stoke_ckpt_tensor *ts = names ? collect_tensors(t->model, names, &n) : NULL;
    char *cfg = stoke_train_config_json(&t->cfg);
    if (!ts) {
        free(names);
        free(cfg);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    }
    char *host = NULL;
    stoke_status hs = tensors_to_host(t->model, ts, n, &host);
    if (hs != STOKE_OK) {
        free(names);
        free(cfg);
        free(ts);
        return hs;
    }
    train_meta m;
    trainer_meta(t, cfg ? cfg : "{}", &m);
    char text[N_ROWS][128];
    stoke_ckpt_kv kv[3 + N_ROWS] = {
        {"format", "pt"}, /* what Hugging Face's loaders expect for plain tensors */
    };
    for (int i = 0; i < N_ROWS; i++)
        kv[1 + i] =
            (stoke_ckpt_kv){rows[i].key, meta_format(&rows[i], &m, text[i], sizeof text[i])};
    /* optional, after the table: predict prints the names the data gave the classes */
    char *class_names = class_names_json(t);
    size_t nkv = 1 + N_ROWS;
    if (class_names)
        kv[nkv++] = (stoke_ckpt_kv){"stoke.class_names", class_names};
    char *exact = NULL;
    stoke_status s = train_config_bytes(&t->cfg, &exact);
    if (exact)
        kv[nkv++] = (stoke_ckpt_kv){"stoke.config_bytes", exact};
    if (s == STOKE_OK)
        s = stoke_ckpt_write(path, ts, n, kv, nkv);
    free(exact);
    free(class_names);
    free(host);
    free(cfg);
    free(ts);
    free(names);
    return s;
}

bool train_tensor_fits(const stoke_ckpt_tensor *t, const stoke_shape *shape)
{
    bool ok = t && t->dtype == STOKE_F32 && t->ndim == shape->ndim;
    for (int d = 0; ok && d < t->ndim; d++)
        ok = t->shape[d] == shape->dims[d];
    return ok;
}

/* Copies parameters (and, when `optim`, the optimizer state) from a checkpoint. Every
 * parameter must be present with its shape. */
static stoke_status load_params(stoke_model *m, const stoke_ckpt *c, bool optim)
{
    const stoke_graph *g = stoke_model_graph(m);
    int np = stoke_graph_param_count(g);
    int slots = optim ? stoke_model_optim_slots(m) : 0;
    for (int slot = -1; slot < slots; slot++)
        for (int i = 0; i < np; i++) {
            const stoke_param_info *p = stoke_graph_param(g, i);
            float *dst = slot < 0 ? stoke_model_param(m, i) : stoke_model_optim_state(m, i, slot);
            if (!dst || (slot >= 0 && !p->trainable))
                continue;
            char name[160];
            if (slot < 0)
                snprintf(name, sizeof name, "%s", p->name);
            else
                snprintf(name, sizeof name, "optim.%s.%s", slot == 0 ? "m" : "v", p->name);
            const stoke_ckpt_tensor *ct = stoke_ckpt_find(c, name);
            if (!ct)
                return stoke_fail(STOKE_ERR_FORMAT, "%s: tensor '%s' is missing",
                                  stoke_ckpt_path(c), name);
            if (!train_tensor_fits(ct, &p->shape))
                return stoke_fail(STOKE_ERR_FORMAT,
                                  "%s: tensor '%s' has %s of another shape than "
                                  "the model's",
                                  stoke_ckpt_path(c), name, stoke_ckpt_dtype_name(ct->dtype));
            stoke_status st = stoke_model_write(m, dst, ct->data, ct->nbytes);
            if (st != STOKE_OK)
                return st;
        }
    stoke_model_params_changed(m);
    return stoke_model_sync(m);
}

stoke_status train_restore(stoke_trainer *t, const stoke_ckpt *ck, const train_meta *m)
{
    stoke_status s = load_params(t->model, ck, true);
    if (s != STOKE_OK)
        return s;
    t->step = m->step;
    t->start.epoch = m->sampler_epoch;
    t->start.index = m->sampler_index;
    t->ep_loss = m->epoch_loss_sum;
    t->ep_metric = m->epoch_metric_sum;
    t->ep_samples = m->epoch_samples;
    t->ep_batches = m->epoch_batches;
    if (train_dist_on(t)) {
        /* the sums are the world's (rank 0 saved them): counted once, on rank 0; the
         * epoch's batches are this world's, which may not be the saver's */
        if (train_rank(t) != 0)
            t->ep_loss = t->ep_metric = 0, t->ep_samples = 0;
        int64_t g = (int64_t)train_world(t) * t->cfg.batch_size;
        t->ep_batches = (t->start.index + g - 1) / g;
    }
    stoke_model_set_step_count(t->model, t->step);
    if (m->loss_scale > 0)
        stoke_model_set_loss_scale(t->model, m->loss_scale);
    return STOKE_OK;
}
