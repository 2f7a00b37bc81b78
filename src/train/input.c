/* input.c - how a dataset's samples become the model's inputs and targets: the input's
 * layout and normalization, the targets' conversion, and the text forms of shapes and
 * per-channel values kept in a checkpoint's metadata. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"
#include "train/train_impl.h"

stoke_status train_wrap_error(stoke_status s, const char *fmt, ...)
{
    char prefix[1024], old[1024]; /* stoke_fail cannot be given its own message */
    snprintf(old, sizeof old, "%s", stoke_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return stoke_fail(s, "%s: %s", prefix, old);
}

stoke_status train_input_init(train_input *ti, const stoke_shape *shape, stoke_dtype dtype)
{
    memset(ti, 0, sizeof *ti);
    ti->in_shape = *shape;
    ti->in_dtype = dtype;
    bool imagey =
        (dtype == STOKE_U8 || dtype == STOKE_F32) && (shape->ndim == 2 || shape->ndim == 3);
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
            ti->model_shape =
                hwc ? (stoke_shape){3, {last, shape->dims[0], shape->dims[1]}} : *shape;
        }
        for (int c = 0; c < TRAIN_MAX_CHANNELS; c++)
            ti->mean[c] = 0, ti->std[c] = 1;
        return STOKE_OK;
    }
    if (dtype != STOKE_F32)
        return stoke_fail(STOKE_ERR_ARG,
                          "inputs of %s %s samples are not supported for "
                          "training (uint8 images or float32 data; convert with stoke data)",
                          stoke_dtype_name(dtype), shape->ndim == 1 ? "vector" : "tensor");
    ti->model_shape = *shape;
    return STOKE_OK;
}

stoke_status train_input_setup(train_input *ti, const stoke_train_config *c, const char *path,
                               const stoke_dataset_info *info)
{
    stoke_status s = train_input_init(ti, &info->input_shape, info->input_dtype);
    if (s != STOKE_OK)
        return s;
    if (c->augment && !ti->image) { /* not dropped without a word */
        char sh[64];
        return stoke_fail(STOKE_ERR_ARG,
                          "augment (--augment): random crops and flips are for "
                          "images, and %s has samples of %s",
                          path, stoke_shape_format(&info->input_shape, sh, sizeof sh));
    }
    if (ti->image && !c->augment && strcmp(c->transforms, "crop"))
        return stoke_fail(STOKE_ERR_ARG,
                          "transforms (--transforms %s) picks the augmentation, which is off: "
                          "add --augment",
                          c->transforms);
    return STOKE_OK;
}

stoke_status stoke_train_input_transform(const stoke_train_config *c, stoke_dataset *d, bool eval,
                                         stoke_op ops[STOKE_TRAIN_MAX_OPS], stoke_transform_opts *o,
                                         bool *image)
{
    train_input ti;
    memset(o, 0, sizeof *o);
    *image = false;
    stoke_status s = train_input_setup(&ti, c, c->dataset, stoke_dataset_get_info(d));
    if (s != STOKE_OK || !ti.image)
        return s;
    if ((s = train_input_stats(d, &ti)) != STOKE_OK)
        return s;
    train_aug aug, val;
    train_aug_of(c->augment, c->transforms, &aug, &val);
    train_transform_opts(&ti, eval ? val : aug, ops, o);
    *image = true;
    return STOKE_OK;
}

void train_aug_of(bool augment, const char *transforms, train_aug *train, train_aug *eval)
{
    bool rrc = augment && !strncmp(transforms, "rrc", 3);
    bool jitter = strstr(transforms, "+jitter") != NULL;
    *train = !augment ? TRAIN_AUG_NONE
             : rrc    ? (jitter ? TRAIN_AUG_RRC_JITTER : TRAIN_AUG_RRC)
                      : (jitter ? TRAIN_AUG_CROP_JITTER : TRAIN_AUG_CROP);
    *eval = rrc ? TRAIN_AUG_RRC_EVAL : TRAIN_AUG_NONE;
}

void train_transform_opts(const train_input *ti, train_aug aug, stoke_op *ops,
                          stoke_transform_opts *o)
{
    int n = 0;
    int64_t h = ti->model_shape.dims[1], w = ti->model_shape.dims[2];
    bool crop = aug == TRAIN_AUG_CROP || aug == TRAIN_AUG_CROP_JITTER;
    bool rrc = aug == TRAIN_AUG_RRC || aug == TRAIN_AUG_RRC_JITTER;
    if (crop)
        ops[n++] = (stoke_op){.kind = STOKE_OP_CROP, .height = (int)h, .width = (int)w, .pad = 2};
    if (rrc)
        ops[n++] =
            (stoke_op){.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = (int)h, .width = (int)w};
    if (crop || rrc)
        ops[n++] = (stoke_op){.kind = STOKE_OP_HFLIP};
    /* timm's and the ImageNet recipes' color_jitter 0.4, torchvision's random order */
    if (aug == TRAIN_AUG_CROP_JITTER || aug == TRAIN_AUG_RRC_JITTER)
        ops[n++] = (stoke_op){.kind = STOKE_OP_COLOR_JITTER,
                              .brightness = 0.4f,
                              .contrast = 0.4f,
                              .saturation = 0.4f,
                              .random_order = true};
    if (aug == TRAIN_AUG_RRC_EVAL) {
        /* torchvision's Resize(256) + CenterCrop(224) for any input size: 8/7. */
        int64_t s = h < w ? h : w;
        ops[n++] = (stoke_op){.kind = STOKE_OP_RESIZE_SHORTER, .height = (int)((s * 8 + 3) / 7)};
        ops[n++] =
            (stoke_op){.kind = STOKE_OP_CROP, .height = (int)h, .width = (int)w, .center = true};
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

double train_read_num(const void *src, stoke_dtype t, int64_t i)
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

stoke_status train_convert_targets(const void *src, stoke_dtype dtype, int64_t n, int64_t elems,
                                   bool classes, int64_t nclasses, void *dst,
                                   const int64_t *samples, const char *source)
{
    for (int64_t i = 0; i < n * elems; i++) {
        double v = train_read_num(src, dtype, i);
        if (classes) {
            /* a label the format does not check on open (packed records) meets the
             * model's class count here: the message names the file as theirs do */
            if (!(v >= 0 && v < (double)nclasses) || v != floor(v))
                return stoke_fail(STOKE_ERR_ARG,
                                  "%s%ssample %" PRId64 ": class %g is not in [0, %" PRId64 ")",
                                  source ? source : "", source ? ": " : "",
                                  samples ? samples[i] : i, v, nclasses);
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
        const char *end;
        uint64_t v; /* digits only: strtoll took " 5" and "+5" */
        if (!stoke_parse_u64_prefix(s, 10, &v, &end) || v > INT64_MAX ||
            out->ndim >= STOKE_MAX_DIMS)
            return false;
        out->dims[out->ndim++] = (int64_t)v;
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

stoke_status train_feed_targets(stoke_model *m, stoke_tensor y, const train_targets *tg,
                                const void *targets, const int64_t *samples, int64_t n)
{
    void *dst = tg->stage ? tg->stage : stoke_model_input(m, y);
    stoke_status s = train_convert_targets(targets, tg->dtype, n, tg->elems, tg->classes,
                                           tg->nclasses, dst, samples, tg->source);
    if (s == STOKE_OK && tg->stage)
        s = stoke_model_set_input(m, y, tg->stage, (size_t)n * (size_t)tg->elems * 4);
    return s;
}

stoke_status train_eval_batch(stoke_model *m, stoke_tensor y, stoke_tensor metric,
                              const train_targets *tg, const void *targets, const int64_t *samples,
                              int64_t n, train_eval *acc)
{
    stoke_status s = train_feed_targets(m, y, tg, targets, samples, n);
    if (s == STOKE_OK)
        s = stoke_model_forward(m, n, false);
    if (s != STOKE_OK)
        return s;
    acc->loss += stoke_model_loss(m) * (double)n;
    if (metric != STOKE_NO_TENSOR)
        acc->metric += stoke_model_value(m, metric) * (double)n;
    acc->n += n;
    return STOKE_OK;
}

void train_eval_means(const train_eval *acc, bool has_metric, double *loss, double *metric,
                      int64_t *count)
{
    *loss = acc->n ? acc->loss / (double)acc->n : NAN;
    *metric = acc->n && has_metric ? acc->metric / (double)acc->n : NAN;
    *count = acc->n;
}
