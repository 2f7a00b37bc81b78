/* train.c - the training loop: probe and tune, datasets in memory, loader, model,
 * optimizer steps with accumulation, evaluation, progress events, JSON-lines log,
 * checkpoints and exact resume. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoke/monitor.h"
#include "stoke/tune.h"
#include "train/train_impl.h"

/* ---- Shared helpers (train_impl.h) -------------------------------------------------- */

stoke_status train_wrap_error(stoke_status s, const char *prefix)
{
    char old[1024];
    snprintf(old, sizeof old, "%s", stoke_last_error());
    return stoke_fail(s, "%s: %s", prefix, old);
}

stoke_status train_input_init(train_input *ti, const stoke_shape *shape, stoke_dtype dtype)
{
    memset(ti, 0, sizeof *ti);
    ti->in_shape = *shape;
    ti->in_dtype = dtype;
    bool imagey = (dtype == STOKE_U8 || dtype == STOKE_F32) && (shape->ndim == 2 || shape->ndim == 3);
    if (imagey && shape->ndim == 3) {
        int64_t last = shape->dims[2], first = shape->dims[0];
        imagey = last == 1 || last == 3 || last == 4 || first == 1 || first == 3 || first == 4;
    }
    /* 2-D float inputs may be (T, F) feature sequences rather than images: only u8 2-D
     * inputs are taken as gray images. */
    if (imagey && shape->ndim == 2 && dtype == STOKE_F32)
        imagey = false;
    if (imagey) {
        ti->image = true;
        if (shape->ndim == 2) {
            ti->channels = 1;
            ti->model_shape = (stoke_shape){3, {1, shape->dims[0], shape->dims[1]}};
        } else {
            int64_t last = shape->dims[2];
            bool hwc = last == 1 || last == 3 || last == 4;
            ti->channels = (int)(hwc ? last : shape->dims[0]);
            ti->model_shape = hwc ? (stoke_shape){3, {last, shape->dims[0], shape->dims[1]}}
                                  : *shape;
        }
        for (int c = 0; c < TRAIN_MAX_CHANNELS; c++)
            ti->mean[c] = 0, ti->std[c] = 1;
        return STOKE_OK;
    }
    if (dtype != STOKE_F32)
        return stoke_fail(STOKE_ERR_ARG, "inputs of %s %s samples are not supported for "
                          "training (uint8 images or float32 data; convert with stoke data)",
                          stoke_dtype_name(dtype), shape->ndim == 1 ? "vector" : "tensor");
    ti->model_shape = *shape;
    return STOKE_OK;
}

void train_transform_opts(const train_input *ti, bool augment, stoke_op *ops,
                          stoke_transform_opts *o)
{
    int n = 0;
    int64_t h = ti->model_shape.dims[1], w = ti->model_shape.dims[2];
    if (augment) {
        ops[n++] = (stoke_op){.kind = STOKE_OP_CROP, .height = (int)h, .width = (int)w, .pad = 2};
        ops[n++] = (stoke_op){.kind = STOKE_OP_HFLIP};
    }
    stoke_op norm = {.kind = STOKE_OP_NORMALIZE};
    for (int c = 0; c < TRAIN_MAX_CHANNELS; c++)
        norm.mean[c] = ti->mean[c], norm.std[c] = ti->std[c];
    ops[n++] = norm;
    memset(o, 0, sizeof *o);
    o->in_shape = ti->in_shape;
    o->in_dtype = ti->in_dtype;
    o->ops = ops;
    o->nops = n;
    o->out_dtype = STOKE_F32;
    o->out_layout = STOKE_LAYOUT_CHW;
}

static double read_num(const void *src, stoke_dtype t, int64_t i)
{
    switch (t) {
    case STOKE_U8: return ((const uint8_t *)src)[i];
    case STOKE_I8: return ((const int8_t *)src)[i];
    case STOKE_U16: return ((const uint16_t *)src)[i];
    case STOKE_I16: return ((const int16_t *)src)[i];
    case STOKE_U32: return ((const uint32_t *)src)[i];
    case STOKE_I32: return ((const int32_t *)src)[i];
    case STOKE_I64: return (double)((const int64_t *)src)[i];
    case STOKE_F16: return stoke_f16_to_f32(((const uint16_t *)src)[i]);
    case STOKE_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)src)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case STOKE_F32: return ((const float *)src)[i];
    case STOKE_F64: return ((const double *)src)[i];
    default: return NAN;
    }
}

stoke_status train_convert_targets(const void *src, stoke_dtype dtype, int64_t n,
                                   int64_t elems, bool classes, int64_t nclasses, void *dst,
                                   const int64_t *samples)
{
    for (int64_t i = 0; i < n * elems; i++) {
        double v = read_num(src, dtype, i);
        if (classes) {
            if (!(v >= 0 && v < (double)nclasses) || v != floor(v))
                return stoke_fail(STOKE_ERR_ARG, "sample %" PRId64 ": class %g is outside "
                                  "[0, %" PRId64 ")", samples ? samples[i] : i, v, nclasses);
            ((int32_t *)dst)[i] = (int32_t)v;
        } else {
            ((float *)dst)[i] = (float)v;
        }
    }
    return STOKE_OK;
}

void train_format_shape(const stoke_shape *s, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 0; d < s->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64, d ? "," : "", s->dims[d]);
}

bool train_parse_shape(const char *s, stoke_shape *out)
{
    memset(out, 0, sizeof *out);
    if (!*s)
        return true;
    while (*s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || out->ndim >= STOKE_MAX_DIMS)
            return false;
        out->dims[out->ndim++] = v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return true;
}

void train_format_floats(const float *v, int n, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%.9g", i ? "," : "", (double)v[i]);
}

int train_parse_floats(const char *s, float *v, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        v[n++] = strtof(s, &end);
        if (end == s)
            return -1;
        s = end;
        if (*s == ',')
            s++;
    }
    return *s ? -1 : n;
}

/* ---- The trainer -------------------------------------------------------------------- */

struct stoke_trainer {
    stoke_train_config cfg;
    stoke_train_callback cb;
    void *cb_ctx;
    stoke_machine machine;
    stoke_recs recs;
    stoke_dataset *train_src, *train_d, *val_src, *val_d; /* *_d may be the in-memory copy */
    stoke_dataset_info info;
    int64_t val_count;
    train_input input;
    stoke_op ops[4], val_ops[4];
    stoke_transform_opts topts, val_topts;
    stoke_model_file *mf;
    stoke_graph *graph;
    stoke_model *model;
    stoke_model *eval_model; /* inference-only, val_batch_size samples, weights copied in */
    stoke_precision precision;
    stoke_optim optim;
    stoke_lr_schedule sched;
    stoke_tensor x, y, metric;
    const char *metric_name;
    bool classes;
    int64_t nclasses;
    int64_t target_elems;
    stoke_loader *loader, *val_loader;
    stoke_sampler_state start;
    stoke_monitor *monitor;
    int workers, threads;
    int log_fd;
    char log_error[600]; /* the first record that could not be written */
    double held_bytes;   /* samples held in memory (training and validation) */
    /* position */
    int64_t epoch, step;
    /* this epoch's running sums (saved with a mid-epoch checkpoint) */
    double ep_loss, ep_metric;
    int64_t ep_samples, ep_batches;
    double ep_elapsed_before; /* seconds of this epoch before a resume */
    double loop_start;        /* wall time the training loop started: log "elapsed" */
    char warned[16][32];
    int nwarned;
    stoke_train_result result;
};

static void emit(stoke_trainer *t, const stoke_train_event *e)
{
    if (t->cb)
        t->cb(e, t->cb_ctx);
}

static void info(stoke_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void info(stoke_trainer *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    stoke_train_event e = {.kind = STOKE_EV_INFO, .text = buf};
    emit(t, &e);
}

/* Reads the first n samples of src into memory (limit and in-memory holding in one
 * pass). The arrays are owned by the returned dataset (copy = true, then freed). */
static stoke_status load_prefix(stoke_dataset *src, int64_t n, stoke_dataset **out)
{
    stoke_dataset_info info = *stoke_dataset_get_info(src);
    if (n <= 0 || n > info.count)
        n = info.count;
    if (n == info.count)
        return stoke_dataset_load(src, out);
    info.count = n;
    unsigned char *in = malloc((size_t)n * info.input_bytes);
    unsigned char *tg = info.target_bytes ? malloc((size_t)n * info.target_bytes) : NULL;
    if (!in || (info.target_bytes && !tg)) {
        free(in);
        free(tg);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory holding %" PRId64 " samples", n);
    }
    stoke_status s = STOKE_OK;
    for (int64_t i = 0; i < n && s == STOKE_OK; i++)
        s = stoke_dataset_read(src, i, in + (size_t)i * info.input_bytes,
                               tg ? tg + (size_t)i * info.target_bytes : NULL);
    if (s == STOKE_OK)
        s = stoke_dataset_from_arrays(&info, in, tg, true, out);
    free(in);
    free(tg);
    return s;
}

/* Per-channel mean and std of the training inputs (in the [0, 1] scale for u8), over
 * at most 10,000 samples spread over the set, for the normalize transform. */
static stoke_status input_stats(stoke_dataset *d, train_input *ti)
{
    const stoke_dataset_info *in = stoke_dataset_get_info(d);
    int64_t n = in->count < 10000 ? in->count : 10000;
    int64_t stride = in->count / (n ? n : 1);
    unsigned char *buf = malloc(in->input_bytes);
    if (!buf)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    double sum[TRAIN_MAX_CHANNELS] = {0}, sq[TRAIN_MAX_CHANNELS] = {0};
    int64_t cnt[TRAIN_MAX_CHANNELS] = {0};
    int64_t elems = stoke_shape_elems(&ti->in_shape);
    int C = ti->channels;
    bool hwc = ti->in_shape.ndim == 3 && ti->model_shape.dims[0] == ti->in_shape.dims[2] &&
               !(ti->in_shape.dims[0] == ti->in_shape.dims[2] && ti->in_shape.dims[0] == C &&
                 ti->in_shape.dims[1] != C);
    int64_t plane = elems / C;
    for (int64_t k = 0; k < n; k++) {
        stoke_status s = stoke_dataset_read(d, k * stride, buf, NULL);
        if (s != STOKE_OK) {
            free(buf);
            return s;
        }
        for (int64_t i = 0; i < elems; i++) {
            int c = C == 1 ? 0 : (int)(hwc ? i % C : i / plane);
            double v = in->input_dtype == STOKE_U8 ? buf[i] / 255.0 : ((const float *)(void *)buf)[i];
            sum[c] += v;
            sq[c] += v * v;
            cnt[c]++;
        }
    }
    free(buf);
    for (int c = 0; c < C; c++) {
        double m = cnt[c] ? sum[c] / (double)cnt[c] : 0;
        double var = cnt[c] ? sq[c] / (double)cnt[c] - m * m : 1;
        ti->mean[c] = (float)m;
        ti->std[c] = (float)(var > 1e-12 ? sqrt(var) : 1.0);
    }
    return STOKE_OK;
}

bool stoke_train_loader_pipeline(void *ctx, stoke_mon_pipeline *out)
{
    stoke_loader *l = ctx;
    if (!l)
        return false;
    stoke_loader_stats st;
    stoke_loader_get_stats(l, &st);
    memset(out, 0, sizeof *out);
    out->batches = st.batches;
    out->wait_total_s = st.wait_avg_ms * (double)st.batches / 1e3;
    out->wait_avg_ms = st.wait_avg_ms;
    out->wait_p95_ms = st.wait_p95_ms;
    out->wait_max_ms = st.wait_max_ms;
    out->fill_avg = st.fill_avg;
    out->slots = st.slots;
    out->workers = st.workers;
    int n = st.workers > 0 ? st.workers : 1; /* 0 workers: the consumer's own time */
    if (n > 64)
        n = 64;
    double busy = 0;
    for (int i = 0; i < n; i++)
        busy += st.busy_frac[i];
    out->busy_frac = busy / n;
    return true;
}

/* ---- Checkpoints -------------------------------------------------------------------- */

enum { MAX_META = 32 };

stoke_status stoke_trainer_save(stoke_trainer *t, const char *path)
{
    const stoke_graph *g = t->graph;
    int np = stoke_graph_param_count(g);
    int slots = stoke_model_optim_slots(t->model);
    stoke_ckpt_tensor *ts = calloc((size_t)np * 3, sizeof *ts);
    char (*names)[160] = calloc((size_t)np * 2, sizeof *names);
    if (!ts || !names) {
        free(ts);
        free(names);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = 0;
    for (int i = 0; i < np; i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        ts[n++] = (stoke_ckpt_tensor){.name = p->name, .dtype = STOKE_F32, .ndim = p->shape.ndim,
                                      .data = stoke_model_param(t->model, i)};
        memcpy(ts[n - 1].shape, p->shape.dims, sizeof p->shape.dims);
    }
    for (int slot = 0; slot < slots; slot++)
        for (int i = 0; i < np; i++) {
            const stoke_param_info *p = stoke_graph_param(g, i);
            float *st = stoke_model_optim_state(t->model, i, slot);
            if (!p->trainable || !st)
                continue;
            char *nm = names[slot * np + i];
            snprintf(nm, sizeof names[0], "optim.%s.%s", slot == 0 ? "m" : "v", p->name);
            ts[n++] = (stoke_ckpt_tensor){.name = nm, .dtype = STOKE_F32, .ndim = p->shape.ndim,
                                          .data = st};
            memcpy(ts[n - 1].shape, p->shape.dims, sizeof p->shape.dims);
        }
    stoke_sampler_state ss = t->loader ? stoke_loader_state(t->loader) : t->start;
    char v[24][128];
    int k = 0;
#define PUT(...) snprintf(v[k++], sizeof v[0], __VA_ARGS__)
    PUT("%s", TRAIN_CKPT_FORMAT);
    PUT("%" PRId64, ss.epoch);
    PUT("%" PRId64, t->step);
    PUT("%" PRIu64, t->cfg.seed);
    PUT("%" PRId64, ss.epoch);
    PUT("%" PRId64, ss.index);
    PUT("%.9g", (double)stoke_model_loss_scale(t->model));
    PUT("%s", stoke_precision_name(t->precision));
    PUT("%s", stoke_optim_name(t->optim.kind));
    char shape[96];
    train_format_shape(&t->input.model_shape, shape, sizeof shape);
    PUT("%s", shape);
    train_format_shape(&t->info.input_shape, shape, sizeof shape);
    PUT("%s", shape);
    PUT("%s", stoke_dtype_name(t->info.input_dtype));
    PUT("%s", t->classes ? "class" : t->info.target_kind == STOKE_TARGET_VECTOR ? "vector" : "scalar");
    PUT("%" PRId64, t->nclasses);
    train_format_shape(&t->info.target_shape, shape, sizeof shape);
    PUT("%s", shape);
    char floats[96];
    train_format_floats(t->input.mean, t->input.image ? t->input.channels : 0, floats, sizeof floats);
    PUT("%s", floats);
    train_format_floats(t->input.std, t->input.image ? t->input.channels : 0, floats, sizeof floats);
    PUT("%s", floats);
    PUT("%.17g", t->ep_loss);
    PUT("%.17g", t->ep_metric);
    PUT("%" PRId64, t->ep_samples);
    PUT("%" PRId64, t->ep_batches);
#undef PUT
    char *cfg = stoke_train_config_json(&t->cfg);
    stoke_ckpt_kv meta[] = {
        {"format", "pt"}, /* what Hugging Face's loaders expect for plain tensors */
        {"stoke.format", v[0]},
        {"stoke.epoch", v[1]},
        {"stoke.step", v[2]},
        {"stoke.seed", v[3]},
        {"stoke.sampler_epoch", v[4]},
        {"stoke.sampler_index", v[5]},
        {"stoke.loss_scale", v[6]},
        {"stoke.precision", v[7]},
        {"stoke.optimizer", v[8]},
        {"stoke.input_shape", v[9]},
        {"stoke.data_shape", v[10]},
        {"stoke.data_dtype", v[11]},
        {"stoke.target_kind", v[12]},
        {"stoke.classes", v[13]},
        {"stoke.target_shape", v[14]},
        {"stoke.normalize_mean", v[15]},
        {"stoke.normalize_std", v[16]},
        {"stoke.epoch_loss_sum", v[17]},
        {"stoke.epoch_metric_sum", v[18]},
        {"stoke.epoch_samples", v[19]},
        {"stoke.epoch_batches", v[20]},
        {"stoke.model", stoke_model_file_text(t->mf)},
        {"stoke.dataset", t->cfg.dataset},
        {"stoke.config", cfg ? cfg : "{}"},
    };
    stoke_status s = stoke_ckpt_write(path, ts, n, meta, sizeof meta / sizeof meta[0]);
    free(cfg);
    free(ts);
    free(names);
    return s;
}

static const char *meta_req(const stoke_ckpt *c, const char *key, stoke_status *s)
{
    const char *v = stoke_ckpt_meta(c, key);
    if (!v && *s == STOKE_OK)
        *s = stoke_fail(STOKE_ERR_FORMAT, "%s: metadata key %s is missing (not a stoke "
                        "checkpoint?)", stoke_ckpt_path(c), key);
    return v ? v : "";
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
                return stoke_fail(STOKE_ERR_FORMAT, "%s: tensor '%s' is missing", stoke_ckpt_path(c),
                                  name);
            bool same = ct->dtype == STOKE_F32 && ct->ndim == p->shape.ndim;
            for (int d = 0; same && d < ct->ndim; d++)
                same = ct->shape[d] == p->shape.dims[d];
            if (!same)
                return stoke_fail(STOKE_ERR_FORMAT, "%s: tensor '%s' has %s of another shape than "
                                  "the model's", stoke_ckpt_path(c), name,
                                  stoke_ckpt_dtype_name(ct->dtype));
            memcpy(dst, ct->data, ct->nbytes);
        }
    stoke_model_params_changed(m);
    return STOKE_OK;
}

/* How a setting given with --resume relates to the checkpoint. The model, the
 * optimizer (its saved state) and the seed (the sample order of the epoch being
 * resumed) are what the checkpoint holds: another value cannot apply. Settings of the
 * run's machinery apply silently. Any other that differs from the checkpoint's value
 * changes the training from here on: applied, and said. */
static const char *const resume_fixed[] = {"model", "hidden", "optimizer", "seed", NULL};
static const char *const resume_quiet[] = {"resume", "dry_run", "log", "checkpoint", "log_every",
                                           "monitor", "workers", "prefetch", "threads",
                                           "memory_budget", "max_steps", "eval_every",
                                           "target_accuracy", "val_batch_size", NULL};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k))
            return true;
    return false;
}

/* A config value as the user would write it ("cnn", "0.1", "true"); "" if absent. */
static void json_value(const cJSON *v, char *buf, size_t n)
{
    if (cJSON_IsString(v))
        snprintf(buf, n, "%s", v->valuestring);
    else if (cJSON_IsBool(v))
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) /* the shortest form that reads back the same: 0.1 */
        for (int p = 6; p <= 17; p++) {
            snprintf(buf, n, "%.*g", p, v->valuedouble);
            if (strtod(buf, NULL) == v->valuedouble)
                break;
        }
    else
        buf[0] = '\0';
}

/* "--batch-size 64", "batch_size: 64 (config file)", "batch_size 64 (environment)" */
static void given_as(const char *k, stoke_cfg_source src, const char *v, char *buf, size_t n)
{
    if (src == STOKE_CFG_FLAG) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s", k);
        for (char *p = flag; *p; p++)
            if (*p == '_')
                *p = '-';
        snprintf(buf, n, "--%s %s", flag, v[0] ? v : "''");
    } else {
        snprintf(buf, n, "%s %s (%s)", k, v[0] ? v : "''",
                 src == STOKE_CFG_FILE ? "config file" : "environment");
    }
}

/* Settings the user did not give come from the checkpoint's config, so `--resume F`
 * alone continues the same run; those given are checked against it (above). */
static stoke_status resume_config(stoke_trainer *t, const stoke_ckpt *ck)
{
    stoke_train_config *c = &t->cfg;
    const char *js = stoke_ckpt_meta(ck, "stoke.config");
    cJSON *o = js ? cJSON_Parse(js) : NULL;
    if (!o)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: metadata stoke.config is missing or not JSON",
                          stoke_ckpt_path(ck));
    char *mine_js = stoke_train_config_json(c);
    cJSON *mine = mine_js ? cJSON_Parse(mine_js) : NULL;
    free(mine_js);
    if (!mine) {
        cJSON_Delete(o);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    stoke_status s = STOKE_OK;
    for (int i = 0; stoke_train_config_key(i) && s == STOKE_OK; i++) {
        const char *k = stoke_train_config_key(i);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        char buf[600], given[700];
        json_value(v, buf, sizeof buf);
        if (c->source[i] != STOKE_CFG_DEFAULT) {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(mine, k);
            if (!v || in_list(resume_quiet, k) || cJSON_Compare(u, v, true))
                continue;
            char uv[600];
            json_value(u, uv, sizeof uv);
            given_as(k, c->source[i], uv, given, sizeof given);
            if (in_list(resume_fixed, k))
                s = stoke_fail(STOKE_ERR_ARG, "%s: %s contradicts the checkpoint, which was "
                               "trained with %s %s: a resumed run continues the checkpoint's "
                               "model, optimizer state and sample order (drop it, or start a "
                               "new run without --resume)", stoke_ckpt_path(ck), given, k,
                               buf[0] ? buf : "unset");
            else
                info(t, "resume: %s replaces the checkpoint's %s %s", given, k,
                     buf[0] ? buf : "unset");
            continue;
        }
        if (!strcmp(k, "resume") || !strcmp(k, "dry_run") || !strcmp(k, "log") || !v ||
            (!cJSON_IsString(v) && !cJSON_IsBool(v) && !cJSON_IsNumber(v)))
            continue;
        if (stoke_train_config_set(c, k, buf, STOKE_CFG_CHECKPOINT) != STOKE_OK)
            s = train_wrap_error(STOKE_ERR_FORMAT, stoke_ckpt_path(ck));
    }
    cJSON_Delete(mine);
    cJSON_Delete(o);
    return s;
}

/* ---- Setup -------------------------------------------------------------------------- */

/* What the precision line adds when the CPU has no kernels of that precision. */
static const char *emulated_note(stoke_precision p)
{
    if (stoke_nn_precision_native(p))
        return "";
    return p == STOKE_PREC_BF16
               ? "; emulated: oneDNN has no bf16 kernels on this CPU (they start at AVX-512), "
                 "so operands are rounded to bf16 and the math runs in fp32, no faster than fp32"
               : "; emulated: the CPU kernels have no fp16 path, so operands are rounded to "
                 "fp16 and the math runs in fp32, no faster than fp32";
}

static stoke_status decide_precision(stoke_trainer *t)
{
    const char *p = t->cfg.precision;
    if (!strcmp(p, "auto")) {
        const stoke_rec *r = stoke_recs_find(&t->recs, "precision",
                                             t->machine.gpu_count > 0 ? 0 : STOKE_TUNE_CPU);
        /* The CPU backend is the only one so far: a GPU's "fp16+loss-scaling" maps to
         * fp16, "tf32"/"fp32" to fp32. */
        const char *text = r && r->known ? r->text : "fp32";
        if (!strncmp(text, "bf16", 4))
            t->precision = STOKE_PREC_BF16;
        else if (!strncmp(text, "fp16", 4))
            t->precision = STOKE_PREC_FP16;
        else
            t->precision = STOKE_PREC_FP32;
        info(t, "precision: %s (auto: %s)%s", stoke_precision_name(t->precision),
             r && r->known ? r->reason : "no recommendation, fp32", emulated_note(t->precision));
        return STOKE_OK;
    }
    if (!stoke_precision_parse(p, &t->precision))
        return stoke_fail(STOKE_ERR_ARG, "precision: '%s' is not auto, fp32, bf16 or fp16", p);
    info(t, "precision: %s (%s)%s", p,
         stoke_cfg_source_name(stoke_train_config_source(&t->cfg, "precision")),
         emulated_note(t->precision));
    return STOKE_OK;
}

static void decide_threads(stoke_trainer *t, bool in_memory, bool cheap_transform)
{
    int usable = t->machine.cpu.usable_cpus > 0 ? t->machine.cpu.usable_cpus : 1;
    const stoke_rec *rw = stoke_recs_find(&t->recs, "loader_workers", STOKE_TUNE_CPU);
    char why[400];
    if (t->cfg.workers >= 0) {
        t->workers = (int)t->cfg.workers;
        snprintf(why, sizeof why, "%d loader worker%s (%s)", t->workers, t->workers == 1 ? "" : "s",
                 stoke_cfg_source_name(stoke_train_config_source(&t->cfg, "workers")));
    } else if (in_memory && cheap_transform) {
        /* A batch gathered from memory through the fused transform costs ~1 us a
         * sample, far below a step's compute: a worker thread would mostly sleep yet
         * take a core from the math, so the training thread does it. */
        t->workers = 0;
        snprintf(why, sizeof why, "0 loader workers (the dataset is in memory and its "
                 "transform is one fused pass: the training thread gathers each batch)");
    } else {
        t->workers = rw && rw->known ? (int)rw->number : 1;
        snprintf(why, sizeof why, "%d loader worker%s (the tuner: %s)", t->workers,
                 t->workers == 1 ? "" : "s", rw ? rw->reason : "");
    }
    if (t->cfg.threads > 0) {
        t->threads = (int)t->cfg.threads;
    } else {
        t->threads = usable - t->workers;
        if (t->threads < 1)
            t->threads = 1;
    }
    stoke_nn_set_threads(t->threads);
    info(t, "threads: %d usable CPU%s = %d compute (OpenMP: oneDNN, kernels, BLAS)%s + %s",
         usable, usable == 1 ? "" : "s", t->threads,
         t->cfg.threads > 0 ? " (flag)" : "", why);
}

static bool is_subdir(const char *path, const char *name)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", path, name);
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Samples held in memory (a --limit prefix, the validation set) must fit in what is
 * available, or the copy grows toward the OOM killer. */
static stoke_status check_hold(const char *path, const char *flag, int64_t n, double bytes,
                               uint64_t avail)
{
    if (avail == 0 || bytes <= (double)avail)
        return STOKE_OK;
    char a[32], b[32];
    return stoke_fail(STOKE_ERR_NOMEM, "%s: holding %" PRId64 " samples in memory takes %s, "
                      "and %s is available: lower %s", path, n,
                      stoke_format_bytes(bytes, a, sizeof a),
                      stoke_format_bytes((double)avail, b, sizeof b), flag);
}

/* Host bytes per sample of a loader's ring over d: its slots x (the input as fed to the
 * model + the target + the sample index), as stoke_loader_create allocates it. */
static size_t ring_per_sample(const stoke_trainer *t, stoke_dataset *d, int workers,
                              int prefetch)
{
    stoke_loader_opts o = {.workers = workers, .prefetch = prefetch};
    const stoke_dataset_info *i = stoke_dataset_get_info(d);
    size_t in = t->input.image ? (size_t)stoke_shape_elems(&t->input.model_shape) * sizeof(float)
                               : i->input_bytes;
    return (size_t)stoke_loader_slots(&o) * (in + i->target_bytes + sizeof(int64_t));
}

static stoke_status open_data(stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    /* An IDX directory holds both splits side by side (no split: its train-* files);
     * an image folder either has them as subfolders (PATH/train, PATH/val, as
     * torchvision's ImageFolder users lay them out) or is itself the training set
     * (PATH/<class>/...), as `stoke data info PATH` reads it. */
    bool train_dir = is_subdir(c->dataset, "train");
    stoke_dataset_opts o = {.split = train_dir ? "train" : NULL};
    stoke_status s = stoke_dataset_open(c->dataset, &o, &t->train_src);
    if (s != STOKE_OK)
        return s;
    t->info = *stoke_dataset_get_info(t->train_src);
    /* Hold the data in memory when it takes at most a quarter of the available RAM:
     * the loader then gathers batches without touching storage. */
    uint64_t avail = c->memory_budget > 0 ? (uint64_t)c->memory_budget
                                          : t->machine.mem.available_bytes;
    int64_t n = c->limit > 0 && c->limit < t->info.count ? c->limit : t->info.count;
    double bytes = (double)n * (double)(t->info.input_bytes + t->info.target_bytes);
    bool in_memory = avail == 0 || bytes <= avail / 4.0;
    if (!in_memory && c->limit > 0 && (s = check_hold(c->dataset, "--limit", n, bytes, avail)) != STOKE_OK)
        return s;
    if (in_memory || c->limit > 0) {
        s = load_prefix(t->train_src, n, &t->train_d);
        if (s != STOKE_OK)
            return s;
        t->held_bytes += bytes;
    } else {
        t->train_d = t->train_src;
    }
    t->info = *stoke_dataset_get_info(t->train_d);
    char sh[64];
    info(t, "dataset: %s: %" PRId64 " samples of %s %s%s (%s)%s", c->dataset, t->info.count,
         stoke_shape_format(&t->info.input_shape, sh, sizeof sh),
         stoke_dtype_name(t->info.input_dtype), c->limit > 0 ? ", limited" : "",
         stoke_dataset_get_info(t->train_src)->format, in_memory ? ", held in memory" : "");
    /* Validation: the given set, the test split of an IDX directory, or the val (else
     * test) subfolder of an image folder that has a train subfolder. */
    const char *src_format = stoke_dataset_get_info(t->train_src)->format;
    const char *vsplit = !strcmp(src_format, "idx") ? "test"
                         : !strcmp(src_format, "images") && train_dir
                             ? (is_subdir(c->dataset, "val") ? "val"
                                : is_subdir(c->dataset, "test") ? "test" : NULL)
                             : NULL;
    if (c->val_dataset[0] || vsplit) {
        stoke_dataset_opts vo = {.split = vsplit};
        const char *vpath = c->val_dataset[0] ? c->val_dataset : c->dataset;
        s = stoke_dataset_open(vpath, c->val_dataset[0] ? NULL : &vo, &t->val_src);
        if (s != STOKE_OK && (c->val_dataset[0] || strcmp(src_format, "idx")))
            return s;
        if (s == STOKE_OK) {
            const stoke_dataset_info *vi = stoke_dataset_get_info(t->val_src);
            /* class indices follow the sorted folder names: the splits must agree */
            if (!c->val_dataset[0] && !strcmp(src_format, "images") &&
                vi->num_classes != t->info.num_classes)
                return stoke_fail(STOKE_ERR_FORMAT, "%s/%s has %" PRId64 " class folders and "
                                  "%s/train %" PRId64 ": the class indices would not match",
                                  c->dataset, vsplit, vi->num_classes, c->dataset,
                                  t->info.num_classes);
            int64_t vn = c->val_limit > 0 && c->val_limit < vi->count ? c->val_limit : vi->count;
            if ((s = check_hold(vpath, "--val-limit", vn,
                                (double)vn * (double)(vi->input_bytes + vi->target_bytes),
                                avail)) != STOKE_OK)
                return s;
            if ((s = load_prefix(t->val_src, vn, &t->val_d)) != STOKE_OK)
                return s;
            t->held_bytes += (double)vn * (double)(vi->input_bytes + vi->target_bytes);
            t->val_count = vn;
            info(t, "validation: %s%s%s%s: %" PRId64 " samples", vpath,
                 c->val_dataset[0] ? "" : " (", c->val_dataset[0] ? "" : vsplit,
                 c->val_dataset[0] ? "" : " split)", vn);
            return STOKE_OK;
        }
        t->val_src = NULL;
    }
    info(t, "validation: none (give --val-dataset)");
    return STOKE_OK;
}

/* The actor-critic's actions for rows [action, advantage, ...]: the largest action
 * (column 0) in the training and validation sets + 1, as a class count is found. */
static stoke_status count_actions(stoke_dataset *d, const char *path, int64_t *actions)
{
    const stoke_dataset_info *in = stoke_dataset_get_info(d);
    unsigned char *x = malloc(in->input_bytes), *y = malloc(in->target_bytes);
    stoke_status s = x && y ? STOKE_OK : stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < in->count && s == STOKE_OK; i++) {
        if ((s = stoke_dataset_read(d, i, x, y)) != STOKE_OK)
            break;
        double a = read_num(y, in->target_dtype, 0);
        if (!(a >= 0 && a < 1 << 24) || a != floor(a))
            s = stoke_fail(STOKE_ERR_ARG, "%s: sample %" PRId64 ": action %g (the target's first "
                           "value) is not a whole number in [0, 2^24)", path, i, a);
        else if ((int64_t)a + 1 > *actions)
            *actions = (int64_t)a + 1;
    }
    free(x);
    free(y);
    return s;
}

static stoke_status setup_model(stoke_trainer *t, const stoke_ckpt *ck)
{
    const stoke_train_config *c = &t->cfg;
    stoke_status s;
    if (ck) {
        const char *text = stoke_ckpt_meta(ck, "stoke.model");
        if (!text)
            return stoke_fail(STOKE_ERR_FORMAT, "%s: metadata stoke.model is missing",
                              stoke_ckpt_path(ck));
        s = stoke_model_file_parse(text, strlen(text), stoke_ckpt_path(ck), &t->mf);
    } else if (c->hidden[0]) {
        /* --hidden 512,512 is the model document "model: mlp / hidden: [512,512]", so the
         * checkpoint's stoke.model rebuilds the same sizes for eval and predict. */
        if (strcmp(c->model, "mlp") && strcmp(c->model, "actor-critic"))
            return stoke_fail(STOKE_ERR_ARG, "hidden (--hidden %s): only the mlp and actor-critic "
                              "presets take hidden sizes, not model '%s' (a model file gives "
                              "its own: hidden: [...] or its layers)", c->hidden, c->model);
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
        if ((s = count_actions(t->train_d, c->dataset, &t->nclasses)) != STOKE_OK ||
            (t->val_d && (s = count_actions(t->val_d, c->val_dataset[0] ? c->val_dataset
                                            : c->dataset, &t->nclasses)) != STOKE_OK))
            return s;
    }
    t->graph = stoke_model_file_build(t->mf, &t->input.model_shape, t->info.target_kind,
                                      &t->info.target_shape, t->nclasses);
    if (!t->graph)
        return STOKE_ERR_ARG;
    t->x = stoke_graph_find(t->graph, "x");
    t->y = stoke_graph_find(t->graph, "y");
    if (t->x == STOKE_NO_TENSOR || t->y == STOKE_NO_TENSOR)
        return stoke_fail(STOKE_ERR_ARG, "model %s: stoke train feeds inputs \"x\" and \"y\"; "
                          "this model has other inputs", stoke_model_file_describe(t->mf));
    t->target_elems = stoke_shape_elems(stoke_graph_shape(t->graph, t->y));
    int64_t data_target_elems = t->info.target_kind == STOKE_TARGET_NONE ? 0
                                : stoke_shape_elems(&t->info.target_shape);
    if (t->target_elems != data_target_elems)
        return stoke_fail(STOKE_ERR_ARG, "model %s: its target has %" PRId64 " values per sample, "
                          "the dataset's %" PRId64, stoke_model_file_describe(t->mf),
                          t->target_elems, data_target_elems);
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

stoke_status stoke_trainer_new(const stoke_train_config *cfg, stoke_train_callback cb, void *ctx,
                               stoke_trainer **out)
{
    *out = NULL;
    stoke_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    t->cfg = *cfg;
    t->cb = cb;
    t->cb_ctx = ctx;
    t->log_fd = -1;
    t->result.val_loss = t->result.val_metric = t->result.best_val_metric = NAN;
    stoke_ckpt *ck = NULL;
    stoke_status s = STOKE_OK;
    if (cfg->resume[0]) {
        s = stoke_ckpt_open(cfg->resume, &ck);
        if (s == STOKE_OK && strcmp(meta_req(ck, "stoke.format", &s), TRAIN_CKPT_FORMAT) && s == STOKE_OK)
            s = stoke_fail(STOKE_ERR_FORMAT, "%s: not a stoke training checkpoint", cfg->resume);
        if (s == STOKE_OK)
            s = resume_config(t, ck);
        if (s != STOKE_OK)
            goto fail;
    }
    const stoke_train_config *c = &t->cfg;
    s = stoke_machine_probe(&t->machine, NULL);
    if (s != STOKE_OK)
        goto fail;
    stoke_recommend(&t->machine, &t->recs);
    if ((s = open_data(t)) != STOKE_OK)
        goto fail;
    if ((s = train_input_init(&t->input, &t->info.input_shape, t->info.input_dtype)) != STOKE_OK)
        goto fail;
    if (c->augment && !t->input.image) { /* not dropped without a word */
        char sh[64];
        s = stoke_fail(STOKE_ERR_ARG, "augment (--augment): random crops and flips are for "
                       "images, and %s has samples of %s", c->dataset,
                       stoke_shape_format(&t->info.input_shape, sh, sizeof sh));
        goto fail;
    }
    if (t->input.image) {
        const char *m = ck ? stoke_ckpt_meta(ck, "stoke.normalize_mean") : NULL;
        const char *sd = ck ? stoke_ckpt_meta(ck, "stoke.normalize_std") : NULL;
        if (m && sd) {
            train_parse_floats(m, t->input.mean, TRAIN_MAX_CHANNELS);
            train_parse_floats(sd, t->input.std, TRAIN_MAX_CHANNELS);
        } else if ((s = input_stats(t->train_d, &t->input)) != STOKE_OK) {
            goto fail;
        }
        train_transform_opts(&t->input, c->augment, t->ops, &t->topts);
        train_transform_opts(&t->input, false, t->val_ops, &t->val_topts);
        char mean[64], std[64];
        train_format_floats(t->input.mean, t->input.channels, mean, sizeof mean);
        train_format_floats(t->input.std, t->input.channels, std, sizeof std);
        info(t, "transforms: %snormalize (mean %s, std %s, from the training set)",
             c->augment ? "random crop (pad 2), horizontal flip, " : "", mean, std);
    }
    if ((s = setup_model(t, ck)) != STOKE_OK)
        goto fail;
    if (c->target_accuracy > 0 && strcmp(t->metric_name, "acc")) {
        s = stoke_fail(STOKE_ERR_ARG, "target_accuracy (--target-accuracy %g): model %s has no "
                       "accuracy metric (its targets are numbers: the metric is %s)",
                       c->target_accuracy, stoke_model_file_describe(t->mf),
                       t->metric_name[0] ? t->metric_name : "none");
        goto fail;
    }
    if ((c->target_accuracy > 0 || c->eval_every > 0) && !t->val_d) {
        s = stoke_fail(STOKE_ERR_ARG, "%s: there is no validation set to evaluate on (give "
                       "--val-dataset)", c->target_accuracy > 0 ? "target_accuracy (--target-accuracy)"
                                                                : "eval_every (--eval-every)");
        goto fail;
    }
    if ((s = decide_precision(t)) != STOKE_OK)
        goto fail;
    decide_threads(t, t->train_d != t->train_src, !c->augment || t->input.in_dtype == STOKE_U8);
    t->optim = (stoke_optim){.kind = strcmp(c->optimizer, "adamw") ? STOKE_SGD : STOKE_ADAMW,
                             .momentum = (float)c->momentum, .nesterov = c->nesterov,
                             .weight_decay = (float)c->weight_decay,
                             .clip_norm = (float)c->clip_norm};
    if (t->optim.kind == STOKE_ADAMW)
        t->optim.momentum = 0;
    int64_t steps_per_epoch = (t->info.count + c->batch_size * c->accumulate - 1) /
                              (c->batch_size * c->accumulate);
    t->sched = (stoke_lr_schedule){
        .kind = !strcmp(c->schedule, "cosine") ? STOKE_LR_COSINE
                : !strcmp(c->schedule, "step") ? STOKE_LR_STEP : STOKE_LR_CONSTANT,
        .lr = c->lr, .warmup_steps = c->warmup_steps, .step_size = c->step_size,
        .gamma = c->gamma, .total_steps = steps_per_epoch * c->epochs, .min_lr = c->min_lr};
    char sh[64];
    info(t, "model: %s on %s, %" PRId64 " parameters; %s lr %g%s, batch %" PRId64 " x %" PRId64
         " accumulated = %" PRId64 ", %" PRId64 " epoch%s, seed %" PRIu64,
         stoke_model_file_describe(t->mf), stoke_shape_format(&t->input.model_shape, sh, sizeof sh),
         stoke_graph_trainable_elems(t->graph), c->optimizer, c->lr,
         t->sched.kind == STOKE_LR_COSINE ? " (cosine)" : t->sched.kind == STOKE_LR_STEP ? " (step)" : "",
         c->batch_size, c->accumulate, c->batch_size * c->accumulate, c->epochs,
         c->epochs == 1 ? "" : "s", c->seed);
    if (c->dry_run) {
        if (ck)
            stoke_ckpt_close(ck);
        *out = t;
        return STOKE_OK;
    }
    /* epoch_samples: the epoch's last, smaller batch is planned too (the kernels'
     * workspace at a smaller batch can be larger) */
    stoke_model_opts mo = {.max_batch = c->batch_size, .epoch_samples = t->info.count,
                           .precision = t->precision, .optim = t->optim, .training = true,
                           .seed = c->seed, .no_fusion = c->no_fusion};
    /* Evaluation runs on its own inference model (no gradients or saved activations),
     * so a large validation batch does not size the training arenas. */
    stoke_model_opts eo = {.max_batch = c->val_batch_size, .epoch_samples = t->val_count,
                           .precision = t->precision, .training = false, .seed = c->seed,
                           .no_fusion = c->no_fusion};
    stoke_mem_plan tp, ep;
    if ((s = stoke_graph_plan(t->graph, &mo, &tp)) != STOKE_OK ||
        (t->val_d && (s = stoke_graph_plan(t->graph, &eo, &ep)) != STOKE_OK))
        goto fail;
    train_mem_need need[2] = {
        {"training", &tp, "--batch-size", ring_per_sample(t, t->train_d, t->workers, (int)c->prefetch)},
        {"validation", &ep, "--val-batch-size", t->val_d ? ring_per_sample(t, t->val_d, 0, 0) : 0}};
    /* --memory-budget covers the data held in memory too; otherwise what is available
     * now already excludes it */
    double budget = c->memory_budget > t->held_bytes ? c->memory_budget - t->held_bytes
                    : c->memory_budget > 0 ? 1 : 0;
    size_t left;
    if ((s = train_check_memory(stoke_model_file_describe(t->mf), need, t->val_d ? 2 : 1,
                                budget, &left)) != STOKE_OK)
        goto fail;
    if ((s = stoke_model_new(t->graph, &mo, &t->model)) != STOKE_OK)
        goto fail;
    if (t->val_d && (s = stoke_model_new(t->graph, &eo, &t->eval_model)) != STOKE_OK)
        goto fail;
    if (ck) {
        /* the optimizer, like the model and seed, was checked by resume_config */
        stoke_status ms = STOKE_OK;
        t->step = strtoll(meta_req(ck, "stoke.step", &ms), NULL, 10);
        t->start.epoch = strtoll(meta_req(ck, "stoke.sampler_epoch", &ms), NULL, 10);
        t->start.index = strtoll(meta_req(ck, "stoke.sampler_index", &ms), NULL, 10);
        float scale = strtof(meta_req(ck, "stoke.loss_scale", &ms), NULL);
        t->ep_loss = strtod(meta_req(ck, "stoke.epoch_loss_sum", &ms), NULL);
        t->ep_metric = strtod(meta_req(ck, "stoke.epoch_metric_sum", &ms), NULL);
        t->ep_samples = strtoll(meta_req(ck, "stoke.epoch_samples", &ms), NULL, 10);
        t->ep_batches = strtoll(meta_req(ck, "stoke.epoch_batches", &ms), NULL, 10);
        if ((s = ms) != STOKE_OK || (s = load_params(t->model, ck, true)) != STOKE_OK)
            goto fail;
        stoke_model_set_step_count(t->model, t->step);
        if (scale > 0)
            stoke_model_set_loss_scale(t->model, scale);
        info(t, "resumed from %s: epoch %" PRId64 ", sample %" PRId64 " of it, step %" PRId64,
             cfg->resume, t->start.epoch + 1, t->start.index, t->step);
        stoke_ckpt_close(ck);
        ck = NULL;
    }
    t->epoch = t->start.epoch;
    stoke_loader_opts lo = {.sampler = {.batch_size = c->batch_size, .shuffle = true,
                                        .seed = c->seed},
                            .start = t->start, .transform = t->input.image ? &t->topts : NULL,
                            .workers = t->workers, .prefetch = (int)c->prefetch,
                            .memory_limit = left ? left + need[0].ring_per_sample * (size_t)c->batch_size : 0};
    if (t->start.epoch < c->epochs && (s = stoke_loader_create(t->train_d, &lo, &t->loader)) != STOKE_OK)
        goto fail;
    if (t->val_d) {
        stoke_loader_opts vo = {.sampler = {.batch_size = c->val_batch_size},
                                .transform = t->input.image ? &t->val_topts : NULL,
                                .memory_limit = left ? left + need[1].ring_per_sample * (size_t)c->val_batch_size : 0};
        if ((s = stoke_loader_create(t->val_d, &vo, &t->val_loader)) != STOKE_OK)
            goto fail;
    }
    if (c->monitor && t->loader) {
        stoke_monitor_config mc = {.interval_s = 0.5, .pid = getpid(), .no_gpu = false,
                                   .pipeline_fn = stoke_train_loader_pipeline, .pipeline_ctx = t->loader};
        if (stoke_monitor_create(&mc, &t->monitor) != STOKE_OK)
            t->monitor = NULL; /* utilization is then reported as unknown */
    }
    if (c->log[0]) {
        if ((s = stoke_mon_open_log(c->log, cfg->resume[0] != 0, &t->log_fd)) != STOKE_OK)
            goto fail;
    }
    *out = t;
    return STOKE_OK;
fail:
    stoke_ckpt_close(ck);
    stoke_trainer_free(t);
    return s;
}

stoke_status stoke_trainer_plan(stoke_trainer *t, size_t budget_bytes, stoke_mem_plan *plan,
                                int64_t *max_batch, size_t *budget_used, size_t *beside)
{
    stoke_model_opts mo = {.max_batch = t->cfg.batch_size, .epoch_samples = t->info.count,
                           .precision = t->precision, .optim = t->optim, .training = true,
                           .seed = t->cfg.seed, .no_fusion = t->cfg.no_fusion};
    stoke_status s = stoke_graph_plan(t->graph, &mo, plan);
    if (s != STOKE_OK)
        return s;
    /* The same budget as the check before allocating (train_check_memory): a given
     * budget covers the data held in memory; what is available now already excludes
     * it. The validation model takes its share too. */
    size_t budget, held = 0;
    stoke_mem_info mi;
    if (budget_bytes || t->cfg.memory_budget > 0) {
        budget = budget_bytes ? budget_bytes : (size_t)t->cfg.memory_budget;
        held = (size_t)t->held_bytes;
    } else {
        budget = stoke_mem_probe(NULL, &mi) == STOKE_OK && mi.available_bytes
                     ? (size_t)mi.available_bytes : (size_t)t->machine.mem.available_bytes;
    }
    size_t others = held;
    if (t->val_d) {
        stoke_model_opts eo = {.max_batch = t->cfg.val_batch_size, .epoch_samples = t->val_count,
                               .precision = t->precision, .training = false, .seed = t->cfg.seed,
                               .no_fusion = t->cfg.no_fusion};
        stoke_mem_plan ep;
        if ((s = stoke_graph_plan(t->graph, &eo, &ep)) != STOKE_OK)
            return s;
        others += ep.total + ring_per_sample(t, t->val_d, 0, 0) * (size_t)t->cfg.val_batch_size;
    }
    *budget_used = budget;
    *beside = others;
    *max_batch = budget > others
                     ? stoke_plan_max_batch(plan, budget - others,
                                            ring_per_sample(t, t->train_d, t->workers,
                                                            (int)t->cfg.prefetch))
                     : 0;
    return STOKE_OK;
}

/* ---- The loop ------------------------------------------------------------------------ */

/* A record that cannot be written (a full disk, /dev/full, a file-size limit) stops
 * the log with a warning: the training goes on, since its checkpoint is worth more
 * than the log, and the run ends with the error (log_finish). */
static void log_line(stoke_trainer *t, const char *buf)
{
    if (t->log_fd < 0)
        return;
    if (stoke_mon_write_line(t->log_fd, buf, strlen(buf), t->cfg.log) == STOKE_OK)
        return;
    snprintf(t->log_error, sizeof t->log_error, "%s", stoke_last_error());
    close(t->log_fd);
    t->log_fd = -1;
    char w[700];
    snprintf(w, sizeof w, "log: %s; the log stops here, training goes on (the run will end "
             "with this error)", t->log_error);
    stoke_train_event e = {.kind = STOKE_EV_WARNING, .text = w};
    emit(t, &e);
}

/* The log's end: flushed to the disk and closed, each checked (a network filesystem
 * reports a failed write only then). The error of any record lost. */
static stoke_status log_finish(stoke_trainer *t)
{
    if (t->log_fd >= 0) {
        int fd = t->log_fd;
        t->log_fd = -1;
        bool ok = fsync(fd) == 0 || errno == EINVAL || errno == EROFS; /* pipes, devices */
        int e = errno;
        if (close(fd) != 0 && ok) {
            ok = false;
            e = errno;
        }
        if (!ok && !t->log_error[0])
            snprintf(t->log_error, sizeof t->log_error, "cannot write to '%s': %s", t->cfg.log,
                     strerror(e));
    }
    if (!t->log_error[0])
        return STOKE_OK;
    return stoke_fail(STOKE_ERR_IO, "the log is incomplete: %s", t->log_error);
}

/* JSON has no NaN: absent values are null. */
static const char *num(char *b, size_t n, double v)
{
    if (isfinite(v))
        snprintf(b, n, "%.6g", v);
    else
        snprintf(b, n, "null");
    return b;
}

static void utilization(stoke_trainer *t, stoke_train_event *e)
{
    e->cpu_pct = e->gpu_pct = NAN;
    stoke_mon_sample s;
    if (t->monitor && stoke_monitor_latest(t->monitor, &s)) {
        if (s.valid & STOKE_MS_PROC_CPU)
            e->cpu_pct = s.proc_cpu_pct;
        if (s.gpu_count > 0 && (s.gpus[0].s.valid & STOKE_GS_UTIL))
            e->gpu_pct = s.gpus[0].s.util_gpu_pct;
    }
}

static double loader_wait_s(stoke_loader *l)
{
    stoke_loader_stats s;
    stoke_loader_get_stats(l, &s);
    return s.wait_avg_ms * (double)s.batches / 1000.0;
}

static stoke_status evaluate(stoke_trainer *t, double *loss, double *metric, int64_t *count)
{
    *loss = *metric = NAN;
    *count = 0;
    if (!t->val_loader)
        return STOKE_OK;
    double ls = 0, ms = 0;
    int64_t n = 0;
    stoke_model *m = t->eval_model;
    for (int i = 0; i < stoke_graph_param_count(t->graph); i++)
        memcpy(stoke_model_param(m, i), stoke_model_param(t->model, i),
               (size_t)stoke_graph_param(t->graph, i)->elems * sizeof(float));
    stoke_model_params_changed(m);
    void *xin = stoke_model_input(m, t->x), *yin = stoke_model_input(m, t->y);
    stoke_batch b;
    stoke_status s;
    while ((s = stoke_loader_next(t->val_loader, &b)) == STOKE_OK && b.size > 0) {
        memcpy(xin, b.inputs, (size_t)b.size * b.input_bytes);
        s = train_convert_targets(b.targets, t->info.target_dtype, b.size, t->target_elems,
                                  t->classes, t->nclasses, yin, b.samples);
        if (s == STOKE_OK)
            s = stoke_model_forward(m, b.size, false);
        if (s != STOKE_OK)
            return train_wrap_error(s, "validation");
        ls += stoke_model_loss(m) * (double)b.size;
        if (t->metric != STOKE_NO_TENSOR)
            ms += stoke_model_value(m, t->metric) * (double)b.size;
        n += b.size;
    }
    if (s != STOKE_OK)
        return s;
    *loss = n ? ls / (double)n : NAN;
    *metric = n && t->metric != STOKE_NO_TENSOR ? ms / (double)n : NAN;
    *count = n;
    return STOKE_OK;
}

/* The monitor's rules over the run so far; each finding is reported once. */
static void monitor_warnings(stoke_trainer *t)
{
    if (!t->monitor)
        return;
    stoke_monitor_stop(t->monitor);
    stoke_mon_summary sum;
    if (stoke_mon_summarize(stoke_monitor_history(t->monitor), t->machine.cpu.usable_cpus, &sum) ==
        STOKE_OK) {
        stoke_finding f[8];
        size_t n = stoke_diagnose(&sum, f, 8);
        for (size_t i = 0; i < n && i < 8; i++) {
            bool seen = false;
            for (int k = 0; k < t->nwarned; k++)
                seen |= !strcmp(t->warned[k], f[i].rule->id);
            if (seen || t->nwarned >= 16)
                continue;
            snprintf(t->warned[t->nwarned++], sizeof t->warned[0], "%s", f[i].rule->id);
            char text[1000];
            snprintf(text, sizeof text, "%s: %s; %s", f[i].rule->id, f[i].evidence, f[i].advice);
            stoke_train_event e = {.kind = STOKE_EV_WARNING, .text = text, .epoch = t->epoch};
            emit(t, &e);
        }
    }
    stoke_monitor_start(t->monitor);
}

static stoke_status checkpoint(stoke_trainer *t)
{
    if (!t->cfg.checkpoint[0])
        return STOKE_OK;
    stoke_status s = stoke_trainer_save(t, t->cfg.checkpoint);
    if (s == STOKE_OK) {
        stoke_train_event e = {.kind = STOKE_EV_CHECKPOINT, .text = t->cfg.checkpoint,
                               .epoch = t->epoch, .step = t->step};
        emit(t, &e);
    }
    return s;
}

/* The log's first record of a run (and of each resumed part): what is trained and how,
 * and the clock "elapsed" counts from. */
static void log_start(stoke_trainer *t, int64_t steps_per_epoch)
{
    const stoke_train_config *c = &t->cfg;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "type", "start");
    cJSON_AddNumberToObject(o, "time", t->loop_start);
    cJSON_AddStringToObject(o, "model", stoke_model_file_describe(t->mf));
    if (c->hidden[0]) /* with --resume, the checkpoint's (resume_config) */
        cJSON_AddStringToObject(o, "hidden", c->hidden);
    cJSON_AddNumberToObject(o, "parameters", (double)stoke_graph_trainable_elems(t->graph));
    cJSON_AddStringToObject(o, "dataset", c->dataset);
    cJSON_AddNumberToObject(o, "train_samples", (double)t->info.count);
    cJSON_AddNumberToObject(o, "val_samples", (double)t->val_count);
    cJSON_AddNumberToObject(o, "batch", (double)c->batch_size);
    cJSON_AddNumberToObject(o, "accumulate", (double)c->accumulate);
    cJSON_AddNumberToObject(o, "epochs", (double)c->epochs);
    cJSON_AddNumberToObject(o, "steps_per_epoch", (double)steps_per_epoch);
    cJSON_AddNumberToObject(o, "max_steps", (double)c->max_steps);
    cJSON_AddStringToObject(o, "precision", stoke_precision_name(t->precision));
    cJSON_AddNumberToObject(o, "threads", t->threads);
    cJSON_AddNumberToObject(o, "workers", t->workers);
    cJSON_AddStringToObject(o, "optimizer", c->optimizer);
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddStringToObject(o, "schedule", c->schedule);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed);
    cJSON_AddStringToObject(o, "seed", seed); /* a string, as in the checkpoint's config */
    cJSON_AddNumberToObject(o, "eval_every", (double)c->eval_every);
    if (c->target_accuracy > 0)
        cJSON_AddNumberToObject(o, "target_accuracy", c->target_accuracy);
    else
        cJSON_AddNullToObject(o, "target_accuracy");
    if (c->resume[0]) {
        cJSON_AddNumberToObject(o, "resumed_step", (double)t->step);
        cJSON_AddNumberToObject(o, "resumed_epoch", (double)t->epoch);
    }
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!js)
        return;
    size_t n = strlen(js);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, js, n);
        memcpy(line + n, "\n", 2);
        log_line(t, line);
    }
    free(line);
    free(js);
}

/* After each evaluation: keeps the best metric and checks target_accuracy. True when
 * the target is reached (the event, the log record and the result say where). `batch`
 * is the epoch's batches done (= batches at its end). */
static bool check_target(stoke_trainer *t, double vl, double vm, int64_t vn, int64_t batch,
                         int64_t batches, double now)
{
    double *best = &t->result.best_val_metric;
    bool higher = !strcmp(t->metric_name, "acc");
    if (isfinite(vm) && (isnan(*best) || (higher ? vm > *best : vm < *best)))
        *best = vm;
    /* The accuracy is a mean of per-batch fractions: 9000 of 10000 right may come out a
     * rounding below 0.9, which must still count as reaching 90%. */
    if (!(t->cfg.target_accuracy > 0) || !(vm >= t->cfg.target_accuracy - 1e-9))
        return false;
    double el = now - t->loop_start;
    t->result.target_reached = true;
    t->result.target_epoch = t->epoch;
    t->result.target_step = t->step;
    t->result.target_elapsed_s = el;
    stoke_train_event e = {.kind = STOKE_EV_TARGET, .epoch = t->epoch, .epochs = t->cfg.epochs,
                           .batch = batch, .batches = batches, .step = t->step,
                           .metric = NAN, .metric_name = t->metric_name, .val_loss = vl,
                           .val_metric = vm, .val_samples = vn, .run_elapsed_s = el,
                           .target = t->cfg.target_accuracy, .cpu_pct = NAN, .gpu_pct = NAN};
    emit(t, &e);
    if (t->log_fd >= 0) {
        char line[400];
        snprintf(line, sizeof line,
                 "{\"type\":\"target\",\"time\":%.3f,\"elapsed\":%.3f,\"epoch\":%" PRId64
                 ",\"step\":%" PRId64 ",\"batch\":%" PRId64 ",\"epoch_end\":%s,\"val_acc\":%.6g,"
                 "\"target\":%.6g}\n",
                 now, el, t->epoch, t->step, batch, batch >= batches ? "true" : "false", vm,
                 t->cfg.target_accuracy);
        log_line(t, line);
    }
    return true;
}

/* An evaluation within an epoch (every eval_every steps). It runs on the inference
 * model with its own loader, so the training trajectory is unchanged. *seconds: how
 * long it took; *reached: the target check's answer. */
static stoke_status eval_within_epoch(stoke_trainer *t, int64_t batches, double *seconds,
                                      bool *reached)
{
    double t0 = stoke_wall_time(), vl, vm;
    int64_t vn;
    stoke_status s = evaluate(t, &vl, &vm, &vn);
    if (s != STOKE_OK)
        return s;
    double now = stoke_wall_time();
    *seconds = now - t0;
    stoke_train_event e = {.kind = STOKE_EV_EVAL, .epoch = t->epoch, .epochs = t->cfg.epochs,
                           .batch = t->ep_batches, .batches = batches, .step = t->step,
                           .metric = NAN, .metric_name = t->metric_name, .val_loss = vl,
                           .val_metric = vm, .val_samples = vn, .elapsed_s = *seconds,
                           .run_elapsed_s = now - t->loop_start, .cpu_pct = NAN, .gpu_pct = NAN};
    emit(t, &e);
    if (t->log_fd >= 0) {
        char line[400], a[32], m[32];
        const char *mn = t->metric_name[0] ? t->metric_name : "metric";
        snprintf(line, sizeof line,
                 "{\"type\":\"eval\",\"time\":%.3f,\"elapsed\":%.3f,\"epoch\":%" PRId64
                 ",\"step\":%" PRId64 ",\"batch\":%" PRId64 ",\"val_loss\":%s,\"val_%s\":%s,"
                 "\"val_samples\":%" PRId64 ",\"seconds\":%.3f}\n",
                 now, now - t->loop_start, t->epoch, t->step, t->ep_batches,
                 num(a, sizeof a, vl), mn, num(m, sizeof m, vm), vn, *seconds);
        log_line(t, line);
    }
    t->result.val_loss = vl;
    t->result.val_metric = vm;
    *reached = check_target(t, vl, vm, vn, t->ep_batches, batches, now);
    return STOKE_OK;
}

stoke_status stoke_trainer_run(stoke_trainer *t, const volatile int *stop)
{
    const stoke_train_config *c = &t->cfg;
    double run_start = stoke_wall_time();
    if (!t->loader) { /* resumed a finished run */
        t->result.epochs_done = t->epoch;
        t->result.steps = t->step;
        return STOKE_OK;
    }
    if (t->monitor)
        stoke_monitor_start(t->monitor);
    void *xin = stoke_model_input(t->model, t->x), *yin = stoke_model_input(t->model, t->y);
    int64_t batches = (t->info.count + c->batch_size - 1) / c->batch_size;
    t->loop_start = stoke_wall_time();
    log_start(t, (batches + c->accumulate - 1) / c->accumulate);
    if (t->log_error[0]) { /* not even the first record: nothing has been trained yet */
        if (t->monitor)
            stoke_monitor_stop(t->monitor);
        return stoke_fail(STOKE_ERR_IO, "log: %s (before the first step: nothing was "
                          "trained)", t->log_error);
    }
    double ep_start = stoke_wall_time() - t->ep_elapsed_before;
    double wait0 = loader_wait_s(t->loader);
    int64_t ep_samples_start = t->ep_samples;
    int last_decile = (int)(t->ep_batches * 10 / batches);
    double last_emit = 0;
    int accum = 0;
    bool stop_mid_epoch = false; /* the target was reached within an epoch */
    stoke_status s = STOKE_OK;
    stoke_batch b;
    for (;;) {
        bool at_boundary = accum == 0;
        if (at_boundary && ((stop && *stop) || (c->max_steps > 0 && t->step >= c->max_steps))) {
            t->result.interrupted = true;
            break;
        }
        if ((s = stoke_loader_next(t->loader, &b)) != STOKE_OK)
            break;
        double now = stoke_wall_time();
        if (b.size > 0) {
            memcpy(xin, b.inputs, (size_t)b.size * b.input_bytes);
            s = train_convert_targets(b.targets, t->info.target_dtype, b.size, t->target_elems,
                                      t->classes, t->nclasses, yin, b.samples);
            if (s == STOKE_OK)
                s = stoke_model_forward(t->model, b.size, true);
            if (s == STOKE_OK)
                s = stoke_model_backward(t->model);
            if (s != STOKE_OK)
                break;
            double loss = stoke_model_loss(t->model);
            t->ep_loss += loss * (double)b.size;
            if (t->metric != STOKE_NO_TENSOR)
                t->ep_metric += stoke_model_value(t->model, t->metric) * (double)b.size;
            t->ep_samples += b.size;
            t->ep_batches++;
            if (++accum < c->accumulate)
                continue;
        } else if (accum == 0) {
            goto epoch_end;
        }
        /* An optimizer step: after `accumulate` batches, or the epoch's last few. */
        {
            double lr = stoke_lr_at(&t->sched, t->step);
            bool applied = true;
            s = stoke_model_step(t->model, lr, accum, &applied);
            if (s != STOKE_OK)
                break;
            accum = 0;
            t->step++;
            now = stoke_wall_time();
            double el = now - ep_start;
            stoke_train_event e = {.kind = STOKE_EV_PROGRESS, .epoch = t->epoch, .epochs = c->epochs,
                                   .batch = t->ep_batches, .batches = batches, .step = t->step,
                                   .loss = t->ep_samples ? t->ep_loss / (double)t->ep_samples : NAN,
                                   .metric = t->metric != STOKE_NO_TENSOR && t->ep_samples
                                                 ? t->ep_metric / (double)t->ep_samples : NAN,
                                   .metric_name = t->metric_name, .lr = lr, .elapsed_s = el,
                                   .run_elapsed_s = now - t->loop_start};
            e.samples_per_s = el > 0 ? (double)(t->ep_samples - ep_samples_start) /
                                       (now - ep_start - t->ep_elapsed_before + 1e-12)
                                     : 0;
            double wait = loader_wait_s(t->loader) - wait0;
            e.data_wait_pct = el > 0 ? 100.0 * wait / (now - ep_start - t->ep_elapsed_before + 1e-12) : 0;
            e.eta_s = t->ep_batches > 0 ? el * (double)(batches - t->ep_batches) / (double)t->ep_batches : 0;
            int decile = (int)(t->ep_batches * 10 / batches);
            e.tick = decile > last_decile && t->ep_batches < batches;
            if (e.tick || now - last_emit >= 0.25) {
                utilization(t, &e);
                emit(t, &e);
                last_emit = now;
                last_decile = decile;
            }
            if (t->log_fd >= 0 && t->step % c->log_every == 0) {
                char line[512], a[32], m[32];
                snprintf(line, sizeof line,
                         "{\"type\":\"step\",\"time\":%.3f,\"elapsed\":%.3f,\"epoch\":%" PRId64
                         ",\"step\":%" PRId64 ",\"batch\":%" PRId64 ",\"loss\":%s,\"batch_loss\":%s,"
                         "\"lr\":%.6g,\"samples_per_s\":%.1f,\"data_wait_pct\":%.2f,\"applied\":%s}\n",
                         now, now - t->loop_start, t->epoch, t->step, t->ep_batches, num(a, sizeof a, e.loss),
                         num(m, sizeof m, stoke_model_loss(t->model)), lr, e.samples_per_s,
                         e.data_wait_pct, applied ? "true" : "false");
                log_line(t, line);
            }
            /* --eval-every: not on the step that ends the epoch (all its batches are
             * done), whose evaluation is the epoch's own. */
            if (c->eval_every > 0 && t->step % c->eval_every == 0 && t->ep_batches < batches) {
                double eval_s;
                bool reached;
                if ((s = eval_within_epoch(t, batches, &eval_s, &reached)) != STOKE_OK)
                    break;
                ep_start += eval_s; /* the epoch's figures count training time only */
                if (reached) {
                    stop_mid_epoch = true;
                    break;
                }
            }
            if (b.size > 0)
                continue;
        }
    epoch_end: {
        double el = stoke_wall_time() - ep_start;
        double vl, vm;
        int64_t vn;
        if ((s = evaluate(t, &vl, &vm, &vn)) != STOKE_OK)
            break;
        double end = stoke_wall_time();
        stoke_train_event e = {.kind = STOKE_EV_EPOCH, .epoch = t->epoch, .epochs = c->epochs,
                               .batch = t->ep_batches, .batches = batches, .step = t->step,
                               .loss = t->ep_samples ? t->ep_loss / (double)t->ep_samples : NAN,
                               .metric = t->metric != STOKE_NO_TENSOR && t->ep_samples
                                             ? t->ep_metric / (double)t->ep_samples : NAN,
                               .metric_name = t->metric_name, .lr = stoke_lr_at(&t->sched, t->step),
                               .elapsed_s = el, .val_loss = vl, .val_metric = vm, .val_samples = vn,
                               .run_elapsed_s = end - t->loop_start};
        double run_el = el - t->ep_elapsed_before;
        e.samples_per_s = run_el > 0 ? (double)(t->ep_samples - ep_samples_start) / run_el : 0;
        e.data_wait_pct = run_el > 0 ? 100.0 * (loader_wait_s(t->loader) - wait0) / run_el : 0;
        utilization(t, &e);
        emit(t, &e);
        if (t->log_fd >= 0) {
            char line[600], a[32], m[32], vla[32], vma[32], cpu[32];
            snprintf(line, sizeof line,
                     "{\"type\":\"epoch\",\"time\":%.3f,\"elapsed\":%.3f,\"epoch\":%" PRId64
                     ",\"step\":%" PRId64 ",\"loss\":%s,\"%s\":%s,\"val_loss\":%s,\"val_%s\":%s,"
                     "\"val_samples\":%" PRId64 ",\"seconds\":%.3f,\"samples_per_s\":%.1f,"
                     "\"data_wait_pct\":%.2f,\"cpu_pct\":%s}\n",
                     end, end - t->loop_start, t->epoch, t->step, num(a, sizeof a, e.loss),
                     t->metric_name[0] ? t->metric_name : "metric", num(m, sizeof m, e.metric),
                     num(vla, sizeof vla, vl), t->metric_name[0] ? t->metric_name : "metric",
                     num(vma, sizeof vma, vm), vn, el, e.samples_per_s, e.data_wait_pct,
                     num(cpu, sizeof cpu, e.cpu_pct));
            log_line(t, line);
        }
        t->result.train_loss = e.loss;
        t->result.val_loss = vl;
        t->result.val_metric = vm;
        bool reached = check_target(t, vl, vm, vn, batches, batches, end);
        t->epoch++;
        t->result.epochs_done = t->epoch;
        t->ep_loss = t->ep_metric = 0;
        t->ep_samples = t->ep_batches = 0;
        t->ep_elapsed_before = 0;
        monitor_warnings(t);
        if ((s = checkpoint(t)) != STOKE_OK)
            break;
        if (t->epoch >= c->epochs || reached)
            break;
        ep_start = stoke_wall_time();
        wait0 = loader_wait_s(t->loader);
        ep_samples_start = 0;
        last_decile = 0;
    }
    }
    if (t->monitor)
        stoke_monitor_stop(t->monitor);
    t->result.steps = t->step;
    t->result.metric_name = t->metric_name;
    t->result.seconds = stoke_wall_time() - run_start;
    if (s == STOKE_OK && (t->result.interrupted || stop_mid_epoch)) {
        t->ep_elapsed_before = stoke_wall_time() - ep_start;
        s = checkpoint(t);
    }
    stoke_status ls = log_finish(t);
    return s != STOKE_OK ? s : ls;
}

void stoke_trainer_result(const stoke_trainer *t, stoke_train_result *r)
{
    *r = t->result;
    r->metric_name = t->metric_name ? t->metric_name : "";
}

stoke_model *stoke_trainer_model(stoke_trainer *t) { return t->model; }

void stoke_trainer_free(stoke_trainer *t)
{
    if (!t)
        return;
    stoke_monitor_free(t->monitor);
    stoke_loader_destroy(t->loader);
    stoke_loader_destroy(t->val_loader);
    stoke_model_free(t->model);
    stoke_model_free(t->eval_model);
    stoke_graph_free(t->graph);
    stoke_model_file_free(t->mf);
    if (t->train_d != t->train_src)
        stoke_dataset_close(t->train_d);
    stoke_dataset_close(t->train_src);
    if (t->val_d != t->val_src)
        stoke_dataset_close(t->val_d);
    stoke_dataset_close(t->val_src);
    if (t->log_fd >= 0)
        close(t->log_fd);
    free(t);
}

/* ---- Formatting --------------------------------------------------------------------- */

static size_t metric_text(const stoke_train_event *e, double v, const char *prefix, char *buf,
                          size_t size)
{
    if (!isfinite(v) || !e->metric_name || !e->metric_name[0])
        return (size_t)snprintf(buf, size, "%s", "");
    if (!strcmp(e->metric_name, "acc"))
        return (size_t)snprintf(buf, size, " %sacc %.2f%%", prefix, 100 * v);
    return (size_t)snprintf(buf, size, " %s%s %.4g", prefix, e->metric_name, v);
}

size_t stoke_train_format_progress(const stoke_train_event *e, char *buf, size_t size)
{
    char m[48], cpu[32] = "", gpu[32] = "";
    metric_text(e, e->metric, "", m, sizeof m);
    if (isfinite(e->cpu_pct))
        snprintf(cpu, sizeof cpu, " | CPU %.0f%%", e->cpu_pct);
    if (isfinite(e->gpu_pct))
        snprintf(gpu, sizeof gpu, " | GPU %.0f%%", e->gpu_pct);
    int n = snprintf(buf, size,
                     "epoch %" PRId64 "/%" PRId64 " %3.0f%% %" PRId64 "/%" PRId64
                     " | loss %.4f%s | %.0f samples/s | data wait %.1f%%%s%s | lr %.3g | eta %.0fs",
                     e->epoch + 1, e->epochs,
                     e->batches ? 100.0 * (double)e->batch / (double)e->batches : 0.0, e->batch,
                     e->batches, e->loss, m, e->samples_per_s, e->data_wait_pct, cpu, gpu, e->lr,
                     e->eta_s);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}

size_t stoke_train_format_epoch(const stoke_train_event *e, char *buf, size_t size)
{
    char m[48], vm[48], val[96] = "", cpu[32] = "";
    metric_text(e, e->metric, "", m, sizeof m);
    metric_text(e, e->val_metric, "val ", vm, sizeof vm);
    if (isfinite(e->val_loss))
        snprintf(val, sizeof val, " | val loss %.4f%s", e->val_loss, vm);
    if (isfinite(e->cpu_pct))
        snprintf(cpu, sizeof cpu, ", CPU %.0f%%", e->cpu_pct);
    int n = snprintf(buf, size,
                     "epoch %" PRId64 "/%" PRId64 " done in %.1fs | loss %.4f%s%s | %.0f samples/s, "
                     "data wait %.1f%%%s",
                     e->epoch + 1, e->epochs, e->elapsed_s, e->loss, m, val, e->samples_per_s,
                     e->data_wait_pct, cpu);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}

/* "epoch 2/5, 41%" or "epoch 2/5, end". */
static void position_text(const stoke_train_event *e, char *buf, size_t size)
{
    if (e->batches > 0 && e->batch < e->batches)
        snprintf(buf, size, "epoch %" PRId64 "/%" PRId64 ", %.0f%%", e->epoch + 1, e->epochs,
                 100.0 * (double)e->batch / (double)e->batches);
    else
        snprintf(buf, size, "epoch %" PRId64 "/%" PRId64 ", end", e->epoch + 1, e->epochs);
}

size_t stoke_train_format_eval(const stoke_train_event *e, char *buf, size_t size)
{
    char pos[64], vm[48];
    position_text(e, pos, sizeof pos);
    metric_text(e, e->val_metric, "val ", vm, sizeof vm);
    int n = snprintf(buf, size, "eval at step %" PRId64 " (%s) | val loss %.4f%s | %.1fs, at %.1fs",
                     e->step, pos, e->val_loss, vm, e->elapsed_s, e->run_elapsed_s);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}

size_t stoke_train_format_target(const stoke_train_event *e, char *buf, size_t size)
{
    char pos[64];
    position_text(e, pos, sizeof pos);
    int n = snprintf(buf, size, "target reached: val acc %.2f%% >= %.2f%% at step %" PRId64
                     " (%s), %.1fs after the start",
                     100 * e->val_metric, 100 * e->target, e->step, pos, e->run_elapsed_s);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}
