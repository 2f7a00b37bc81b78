/* transform.c - per-sample augmentation: resize, crop with padding, random resized crop,
 * resize of the shorter side, flip, color jitter, normalize, and conversion to
 * f32/bf16/f16 in CHW or HWC, with a fused, vectorized pass for the common
 * u8 -> crop -> flip -> normalize -> f32 path.
 *
 * RandomResizedCrop (and the validation transform, resize of the shorter side + centre
 * crop) works on the original image when the dataset can read one (image folders,
 * packed JPEG records: read_window): stoke_transform_read draws the window on the
 * original's size, as torchvision does, and the decoder produces only that window at
 * the op's size (decode.c); the other ops then run on it. On other datasets (arrays,
 * pixel records) they work on the sample as stored. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/isa.h"
#include "core/rng.h"
#include "data/dataset_impl.h"
#include "data/resize.h"
#include "data/seam.h"
#include "data/transform_impl.h"
#include "stoke/data.h"

#define MAX_OPS          16
#define TRANSFORM_DOMAIN 0x4155474dULL /* "AUGM": separates these streams */

typedef void (*fused_fn)(const stoke_transform *t, const uint8_t *in, float *out, const int *crop,
                         bool flip);

struct stoke_transform {
    int C, H, W; /* input */
    bool in_hwc;
    stoke_dtype in_dtype;
    stoke_op ops[MAX_OPS];
    int nops;
    int oH, oW; /* output (C channels) */
    bool out_hwc;
    stoke_dtype out_dtype;
    size_t stage_elems; /* largest intermediate image, in floats */
    /* The first op resamples u8 HWC input (RANDOM_RESIZED_CROP, RESIZE_SHORTER): done on
     * the u8 pixels with Pillow's filter before the float pipeline, as torchvision does on
     * PIL images; u8_elems bytes of scratch hold the window and its resized copy. */
    bool u8_first;
    size_t u8_elems;
    /* On originals (stoke_transform_read): how many leading ops the decoder's window
     * does (1: RANDOM_RESIZED_CROP; 2: RESIZE_SHORTER + centre CROP; 0: none), the
     * shorter side asked for, and the window's output size. */
    int window_ops, shorter;
    int win_h, win_w;
    struct stoke_transform *tail; /* the ops after the window, on its u8 HWC pixels (the
                                     fused pass where they allow it) */
    /* Fused path: u8 input, ops a subsequence of CROP, HFLIP, NORMALIZE, f32 out. */
    fused_fn fused;
    int crop_op, flip_op;    /* their positions in ops, or -1 */
    float scale[4], bias[4]; /* u8 -> normalized: v * scale + bias */
};

typedef stoke_op_draw op_params;

/* AVX2 where the CPU has it and the instruction-set cap allows it (core/isa.h); the
 * tests' level can only lower that. */
static bool have_avx2(void)
{
    return stoke_data_seam_get()->transform_isa != 0 && (stoke_isa_usable() & STOKE_ISA_AVX2);
}

/* ---- options -------------------------------------------------------------------- */

static const char *op_name(stoke_op_kind k)
{
    switch (k) {
    case STOKE_OP_RESIZE: return "resize";
    case STOKE_OP_CROP: return "crop";
    case STOKE_OP_HFLIP: return "hflip";
    case STOKE_OP_COLOR_JITTER: return "color_jitter";
    case STOKE_OP_NORMALIZE: return "normalize";
    case STOKE_OP_RANDOM_RESIZED_CROP: return "random_resized_crop";
    case STOKE_OP_RESIZE_SHORTER: return "resize_shorter";
    }
    return "?";
}

static stoke_status parse_input(stoke_transform *t, const stoke_transform_opts *o)
{
    const stoke_shape *s = &o->in_shape;
    t->in_dtype = o->in_dtype;
    if (o->in_dtype != STOKE_U8 && o->in_dtype != STOKE_F32)
        return stoke_fail(STOKE_ERR_ARG, "transform: input dtype %s (uint8 or float32 only)",
                          stoke_dtype_name(o->in_dtype));
    if (s->ndim == 2) {
        t->H = (int)s->dims[0], t->W = (int)s->dims[1], t->C = 1, t->in_hwc = true;
    } else if (s->ndim == 3) {
        bool last = s->dims[2] == 1 || s->dims[2] == 3 || s->dims[2] == 4;
        bool first = s->dims[0] == 1 || s->dims[0] == 3 || s->dims[0] == 4;
        bool hwc = o->in_layout == STOKE_LAYOUT_HWC || (o->in_layout == STOKE_LAYOUT_AUTO && last);
        if (o->in_layout == STOKE_LAYOUT_AUTO && !last && !first)
            return stoke_fail(STOKE_ERR_ARG,
                              "transform: input shape (%" PRId64 ", %" PRId64 ", %" PRId64
                              ") has no channel dimension of 1, 3 or 4; give in_layout",
                              s->dims[0], s->dims[1], s->dims[2]);
        t->in_hwc = hwc;
        t->C = (int)(hwc ? s->dims[2] : s->dims[0]);
        t->H = (int)(hwc ? s->dims[0] : s->dims[1]);
        t->W = (int)(hwc ? s->dims[1] : s->dims[2]);
    } else {
        return stoke_fail(STOKE_ERR_ARG, "transform: input of %d dimensions (2 or 3 only)",
                          s->ndim);
    }
    if (t->C < 1 || t->C > 4 || t->H < 1 || t->W < 1 || t->H > 65536 || t->W > 65536)
        return stoke_fail(STOKE_ERR_ARG,
                          "transform: image %d x %d x %d outside 1..65536 "
                          "pixels and 1..4 channels",
                          t->H, t->W, t->C);
    return STOKE_OK;
}

static void fused_default(const stoke_transform *t, const uint8_t *in, float *out, const int *crop,
                          bool flip);
static void fused_avx2(const stoke_transform *t, const uint8_t *in, float *out, const int *crop,
                       bool flip);

stoke_status stoke_transform_create(const stoke_transform_opts *o, stoke_transform **out)
{
    *out = NULL;
    stoke_transform *t = calloc(1, sizeof *t);
    if (!t)
        return stoke_fail(STOKE_ERR_NOMEM, "transform: out of memory");
    stoke_status st = parse_input(t, o);
    if (st == STOKE_OK && (o->nops < 0 || o->nops > MAX_OPS || (o->nops && !o->ops)))
        st = stoke_fail(STOKE_ERR_ARG, "transform: %d ops (at most %d)", o->nops, MAX_OPS);
    t->out_dtype = o->out_u8 ? STOKE_U8 : o->out_dtype == STOKE_U8 ? STOKE_F32 : o->out_dtype;
    if (st == STOKE_OK && o->out_u8 && o->out_dtype != STOKE_U8)
        st = stoke_fail(STOKE_ERR_ARG, "transform: out_u8 with output dtype %s (leave it 0)",
                        stoke_dtype_name(o->out_dtype));
    if (st == STOKE_OK && t->out_dtype != STOKE_F32 && t->out_dtype != STOKE_BF16 &&
        t->out_dtype != STOKE_F16 && t->out_dtype != STOKE_U8)
        st = stoke_fail(STOKE_ERR_ARG,
                        "transform: output dtype %s (float32, bfloat16 or "
                        "float16 only)",
                        stoke_dtype_name(o->out_dtype));
    t->out_hwc = o->out_layout == STOKE_LAYOUT_HWC;
    int h = t->H, w = t->W;
    size_t big = (size_t)h * (size_t)w;
    bool fusable = o->in_dtype == STOKE_U8 && t->out_dtype == STOKE_F32;
    int last_kind = 0;
    t->crop_op = t->flip_op = -1;
    for (int c = 0; c < 4; c++)
        t->scale[c] = 1.0f / 255.0f, t->bias[c] = 0.0f;
    for (int i = 0; st == STOKE_OK && i < o->nops; i++) {
        stoke_op op = o->ops[i];
        const char *nm = op_name(op.kind);
        switch (op.kind) {
        case STOKE_OP_RESIZE:
        case STOKE_OP_CROP:
            if (op.height < 1 || op.width < 1 || op.height > 65536 || op.width > 65536) {
                st = stoke_fail(STOKE_ERR_ARG, "transform op %d (%s): size %d x %d", i, nm,
                                op.height, op.width);
                break;
            }
            if (op.kind == STOKE_OP_CROP &&
                (op.pad < 0 || op.height > h + 2 * op.pad || op.width > w + 2 * op.pad)) {
                st = stoke_fail(STOKE_ERR_ARG,
                                "transform op %d (crop): %d x %d does not fit "
                                "a %d x %d image padded by %d",
                                i, op.height, op.width, h, w, op.pad);
                break;
            }
            if (op.kind == STOKE_OP_RESIZE)
                fusable = false;
            else
                t->crop_op = i;
            h = op.height, w = op.width;
            break;
        case STOKE_OP_HFLIP:
            if (op.p == 0.0f)
                op.p = 0.5f;
            if (!(op.p >= 0.0f && op.p <= 1.0f))
                st = stoke_fail(STOKE_ERR_ARG, "transform op %d (hflip): p %g outside [0, 1]", i,
                                (double)op.p);
            t->flip_op = i;
            break;
        case STOKE_OP_COLOR_JITTER:
            if (!(op.brightness >= 0 && op.contrast >= 0 && op.saturation >= 0 && op.hue >= 0 &&
                  op.hue <= 0.5f))
                st = stoke_fail(STOKE_ERR_ARG,
                                "transform op %d (color_jitter): factors must "
                                "be >= 0 and hue <= 0.5",
                                i);
            fusable = false;
            break;
        case STOKE_OP_NORMALIZE:
            if (t->out_dtype == STOKE_U8)
                st = stoke_fail(STOKE_ERR_ARG,
                                "transform op %d (normalize): uint8 output holds [0, 1] as 0..255; "
                                "normalize where the batch is consumed (on the device)",
                                i);
            for (int c = 0; c < t->C && st == STOKE_OK; c++)
                if (!(op.std[c] != 0.0f) || !isfinite(op.std[c]) || !isfinite(op.mean[c]))
                    st = stoke_fail(STOKE_ERR_ARG,
                                    "transform op %d (normalize): channel %d "
                                    "has std %g, mean %g",
                                    i, c, (double)op.std[c], (double)op.mean[c]);
            for (int c = 0; c < t->C; c++) {
                /* (v / 255 - mean) / std folded into one multiply-add per value. */
                t->scale[c] = (float)(1.0 / (255.0 * op.std[c]));
                t->bias[c] = (float)(-op.mean[c] / (double)op.std[c]);
            }
            if (last_kind == STOKE_OP_NORMALIZE)
                fusable = false; /* two normalizes do not fold into one */
            break;
        case STOKE_OP_RANDOM_RESIZED_CROP:
            if (op.scale[0] == 0 && op.scale[1] == 0)
                op.scale[0] = 0.08f, op.scale[1] = 1.0f;
            if (op.ratio[0] == 0 && op.ratio[1] == 0)
                op.ratio[0] = 3.0f / 4.0f, op.ratio[1] = 4.0f / 3.0f;
            if (op.height < 1 || op.width < 1 || op.height > 65536 || op.width > 65536 ||
                !(op.scale[0] > 0 && op.scale[0] <= op.scale[1] && isfinite(op.scale[1])) ||
                !(op.ratio[0] > 0 && op.ratio[0] <= op.ratio[1] && isfinite(op.ratio[1]))) {
                st = stoke_fail(STOKE_ERR_ARG,
                                "transform op %d (random_resized_crop): size %d x %d, "
                                "scale (%g, %g), ratio (%g, %g): sizes 1..65536, ranges "
                                "0 < lo <= hi",
                                i, op.height, op.width, (double)op.scale[0], (double)op.scale[1],
                                (double)op.ratio[0], (double)op.ratio[1]);
                break;
            }
            if (i == 0 && o->in_dtype == STOKE_U8 && t->in_hwc)
                t->u8_first = true;
            fusable = false;
            h = op.height, w = op.width;
            break;
        case STOKE_OP_RESIZE_SHORTER: {
            if (op.height < 1 || op.height > 65536) {
                st = stoke_fail(STOKE_ERR_ARG, "transform op %d (resize_shorter): size %d", i,
                                op.height);
                break;
            }
            /* torchvision's _compute_resized_output_size: the longer side truncated. */
            int s = op.height;
            int64_t lng = (int64_t)s * (h > w ? h : w) / (h > w ? w : h);
            if (lng > 65536) {
                st = stoke_fail(STOKE_ERR_ARG,
                                "transform op %d (resize_shorter): %d x %d to a shorter side "
                                "of %d is larger than 65536",
                                i, h, w, s);
                break;
            }
            if (i == 0)
                t->shorter = s;
            /* Kept as the size it resizes to: what the later ops and the draw need. */
            if (w <= h)
                op.width = s, op.height = (int)lng;
            else
                op.height = s, op.width = (int)lng;
            if (i == 0 && o->in_dtype == STOKE_U8 && t->in_hwc)
                t->u8_first = true;
            fusable = false;
            h = op.height, w = op.width;
            break;
        }
        default:
            st = stoke_fail(STOKE_ERR_ARG, "transform op %d: unknown kind %d", i, (int)op.kind);
        }
        /* The fused pass applies crop, flip, normalize in that order only. */
        if ((int)op.kind < last_kind && op.kind != STOKE_OP_RESIZE)
            fusable = false;
        last_kind = (int)op.kind;
        t->ops[i] = op;
        if ((size_t)h * (size_t)w > big)
            big = (size_t)h * (size_t)w;
    }
    if (st != STOKE_OK) {
        free(t);
        return st;
    }
    t->nops = o->nops;
    t->oH = h, t->oW = w;
    t->stage_elems = big * (size_t)t->C;
    if (t->u8_first)
        t->u8_elems = ((size_t)t->H * t->W + (size_t)t->ops[0].height * t->ops[0].width) * t->C;
    const stoke_op *o0 = &t->ops[0], *o1 = &t->ops[1];
    if (t->u8_first && o0->kind == STOKE_OP_RANDOM_RESIZED_CROP)
        t->window_ops = 1, t->win_h = o0->height, t->win_w = o0->width;
    /* The centre crop must lie inside the resized original whatever its aspect. */
    if (t->u8_first && o0->kind == STOKE_OP_RESIZE_SHORTER && t->nops >= 2 &&
        o1->kind == STOKE_OP_CROP && o1->center && o1->pad == 0 && t->shorter >= o1->height &&
        t->shorter >= o1->width)
        t->window_ops = 2, t->win_h = o1->height, t->win_w = o1->width;
    if (fusable)
        t->fused = have_avx2() ? fused_avx2 : fused_default;
    if (t->window_ops) {
        stoke_transform_opts to = {.in_shape = {3, {t->win_h, t->win_w, t->C}},
                                   .in_dtype = STOKE_U8,
                                   .in_layout = STOKE_LAYOUT_HWC,
                                   .ops = t->ops + t->window_ops,
                                   .nops = t->nops - t->window_ops,
                                   .out_dtype = t->out_dtype == STOKE_U8 ? STOKE_U8 : t->out_dtype,
                                   .out_layout = t->out_hwc ? STOKE_LAYOUT_HWC : STOKE_LAYOUT_CHW,
                                   .out_u8 = t->out_dtype == STOKE_U8};
        if ((st = stoke_transform_create(&to, &t->tail)) != STOKE_OK) {
            free(t);
            return st;
        }
    }
    *out = t;
    return STOKE_OK;
}

void stoke_transform_destroy(stoke_transform *t)
{
    if (t)
        stoke_transform_destroy(t->tail);
    free(t);
}

stoke_shape stoke_transform_out_shape(const stoke_transform *t)
{
    stoke_shape s = {.ndim = 3};
    if (t->out_hwc)
        s.dims[0] = t->oH, s.dims[1] = t->oW, s.dims[2] = t->C;
    else
        s.dims[0] = t->C, s.dims[1] = t->oH, s.dims[2] = t->oW;
    return s;
}

stoke_dtype stoke_transform_out_dtype(const stoke_transform *t) { return t->out_dtype; }

size_t stoke_transform_out_bytes(const stoke_transform *t)
{
    return (size_t)t->C * (size_t)t->oH * (size_t)t->oW * stoke_dtype_size(t->out_dtype);
}

size_t stoke_transform_scratch_bytes(const stoke_transform *t)
{
    size_t own = t->fused ? 0 : 2 * t->stage_elems * sizeof(float) + t->u8_elems;
    size_t tail = t->tail ? stoke_transform_scratch_bytes(t->tail) : 0;
    return own > tail ? own : tail;
}

/* ---- random parameters ------------------------------------------------------------ */

/* torchvision RandomResizedCrop.get_params: ten tries of an area fraction uniform in
 * scale and an aspect ratio log-uniform in ratio, sides rounded half to even as Python's
 * round(); then the whole image clamped to the ratio range, centred. */
static void rrc_window(stoke_rng *r, int H, int W, const stoke_op *op, op_params *q)
{
    double area = (double)H * W, lr0 = log(op->ratio[0]), lr1 = log(op->ratio[1]);
    for (int k = 0; k < 10; k++) {
        double target = area * (op->scale[0] + (op->scale[1] - op->scale[0]) * stoke_rng_unit(r));
        double aspect = exp(lr0 + (lr1 - lr0) * stoke_rng_unit(r));
        double wd = rint(sqrt(target * aspect)), hd = rint(sqrt(target / aspect));
        if (wd > 0 && wd <= W && hd > 0 && hd <= H) {
            int w = (int)wd, h = (int)hd;
            q->crop_i = (int)stoke_rng_below(r, (uint64_t)(H - h) + 1);
            q->crop_j = (int)stoke_rng_below(r, (uint64_t)(W - w) + 1);
            q->win_h = h, q->win_w = w;
            return;
        }
    }
    double in_ratio = (double)W / H;
    int w = W, h = H;
    if (in_ratio < op->ratio[0])
        h = (int)rint(W / (double)op->ratio[0]);
    else if (in_ratio > op->ratio[1])
        w = (int)rint(H * (double)op->ratio[1]);
    h = h < 1 ? 1 : h > H ? H : h;
    w = w < 1 ? 1 : w > W ? W : w;
    q->crop_i = (H - h) / 2, q->crop_j = (W - w) / 2;
    q->win_h = h, q->win_w = w;
}

/* torchvision's _compute_resized_output_size: the shorter side to s, the longer
 * truncated. */
static void shorter_size(int s, int h, int w, int *oh, int *ow)
{
    int64_t lng = (int64_t)s * (h > w ? h : w) / (h > w ? w : h);
    if (w <= h)
        *ow = s, *oh = (int)lng;
    else
        *oh = s, *ow = (int)lng;
}

/* The draws of a sample whose input is h x w: the dataset's shape, or an original's. */
static void draw_sized(const stoke_transform *t, uint64_t seed, int64_t epoch, int64_t index, int h,
                       int w, stoke_op_draw *p)
{
    memset(p, 0, (size_t)t->nops * sizeof *p);
    stoke_rng r = {stoke_stream_key(seed ^ TRANSFORM_DOMAIN, (uint64_t)epoch, (uint64_t)index), 0};
    for (int i = 0; i < t->nops; i++) {
        const stoke_op *op = &t->ops[i];
        op_params *q = &p[i];
        switch (op->kind) {
        case STOKE_OP_RESIZE: h = op->height, w = op->width; break;
        case STOKE_OP_CROP: {
            int ph = h + 2 * op->pad - op->height, pw = w + 2 * op->pad - op->width;
            if (op->center) { /* torchvision CenterCrop's rounding: Python's, half to even */
                q->crop_i = (int)rint(ph / 2.0), q->crop_j = (int)rint(pw / 2.0);
            } else {
                q->crop_i = (int)stoke_rng_below(&r, (uint64_t)ph + 1);
                q->crop_j = (int)stoke_rng_below(&r, (uint64_t)pw + 1);
            }
            h = op->height, w = op->width;
            break;
        }
        case STOKE_OP_HFLIP: q->flip = stoke_rng_unit(&r) < (double)op->p; break;
        case STOKE_OP_COLOR_JITTER: {
            for (int k = 0; k < 4; k++)
                q->order[k] = k;
            if (op->random_order)
                for (int k = 3; k > 0; k--) {
                    int j = (int)stoke_rng_below(&r, (uint64_t)k + 1), tmp = q->order[k];
                    q->order[k] = q->order[j], q->order[j] = tmp;
                }
            const float amt[3] = {op->brightness, op->contrast, op->saturation};
            for (int k = 0; k < 3; k++) {
                double lo = amt[k] < 1 ? 1 - amt[k] : 0, hi = 1 + amt[k];
                q->factor[k] = (float)(lo + (hi - lo) * stoke_rng_unit(&r));
            }
            q->factor[3] = (float)(-op->hue + 2.0 * op->hue * stoke_rng_unit(&r));
            break;
        }
        case STOKE_OP_NORMALIZE: break;
        case STOKE_OP_RANDOM_RESIZED_CROP:
            rrc_window(&r, h, w, op, q);
            h = op->height, w = op->width;
            break;
        case STOKE_OP_RESIZE_SHORTER:
            if (i == 0)
                shorter_size(t->shorter, h, w, &h, &w);
            else
                h = op->height, w = op->width;
            break;
        }
    }
}

void stoke_transform_draw(const stoke_transform *t, uint64_t seed, int64_t epoch, int64_t index,
                          stoke_op_draw *p)
{
    draw_sized(t, seed, epoch, index, t->H, t->W, p);
}

/* ---- the fused pass --------------------------------------------------------------- */

/* One output plane row from a u8 source row: the compiler vectorizes both loops (and
 * the AVX2 copy below gets 256-bit registers). No FMA target, so both copies round
 * identically. */
static inline __attribute__((always_inline)) void
fused_body(const stoke_transform *t, const uint8_t *in, float *out, const int *crop, bool flip)
{
    const int C = t->C, H = t->H, W = t->W, oH = t->oH, oW = t->oW;
    const int pad = t->crop_op >= 0 ? t->ops[t->crop_op].pad : 0;
    const int oy = crop ? crop[0] - pad : 0, ox = crop ? crop[1] - pad : 0;
    /* Output column x reads source column sx = ox + (flip ? oW-1-x : x); the columns
     * with 0 <= sx < W form one run [x0, x1). */
    int x0, x1;
    if (!flip) {
        x0 = ox < 0 ? -ox : 0;
        x1 = W - ox < oW ? W - ox : oW;
    } else {
        x0 = ox + oW - W > 0 ? ox + oW - W : 0;
        x1 = ox + oW < oW ? ox + oW : oW;
    }
    if (x1 < x0)
        x1 = x0;
    const size_t in_sx = t->in_hwc ? (size_t)C : 1, out_sx = t->out_hwc ? (size_t)C : 1;
    for (int c = 0; c < C; c++) {
        const float a = t->scale[c], b = t->bias[c];
        for (int y = 0; y < oH; y++) {
            float *d = t->out_hwc ? out + (size_t)y * oW * C + c : out + ((size_t)c * oH + y) * oW;
            int sy = y + oy;
            if (sy < 0 || sy >= H) {
                for (int x = 0; x < oW; x++)
                    d[x * out_sx] = b;
                continue;
            }
            const uint8_t *s =
                t->in_hwc ? in + (size_t)sy * W * C + c : in + ((size_t)c * H + sy) * W;
            for (int x = 0; x < x0; x++)
                d[x * out_sx] = b;
            for (int x = x1; x < oW; x++)
                d[x * out_sx] = b;
            if (in_sx == 1 && out_sx == 1) {
                float *restrict dd = d;
                if (!flip) {
                    const uint8_t *restrict ss = s + ox;
                    for (int x = x0; x < x1; x++)
                        dd[x] = (float)ss[x] * a + b;
                } else {
                    const uint8_t *restrict ss = s + ox + oW - 1;
                    for (int x = x0; x < x1; x++)
                        dd[x] = (float)ss[-x] * a + b;
                }
            } else {
                for (int x = x0; x < x1; x++) {
                    int sx = ox + (flip ? oW - 1 - x : x);
                    d[x * out_sx] = (float)s[(size_t)sx * in_sx] * a + b;
                }
            }
        }
    }
}

static void fused_default(const stoke_transform *t, const uint8_t *in, float *out, const int *crop,
                          bool flip)
{
    fused_body(t, in, out, crop, flip);
}

__attribute__((target("avx2"))) static void fused_avx2(const stoke_transform *t, const uint8_t *in,
                                                       float *out, const int *crop, bool flip)
{
    fused_body(t, in, out, crop, flip);
}

/* ---- the general path, on float HWC images ------------------------------------------- */

static void resize_bilinear(const float *src, int h, int w, int C, float *dst, int oh, int ow)
{
    /* PyTorch's upsample_bilinear2d with align_corners=False, in float as it does. */
    const float sh = (float)h / (float)oh, sw = (float)w / (float)ow;
    for (int y = 0; y < oh; y++) {
        float ry = (y + 0.5f) * sh - 0.5f;
        if (ry < 0)
            ry = 0;
        int y0 = (int)ry, y1 = y0 < h - 1 ? y0 + 1 : y0;
        float ly = ry - (float)y0, ly0 = 1.0f - ly;
        for (int x = 0; x < ow; x++) {
            float rx = (x + 0.5f) * sw - 0.5f;
            if (rx < 0)
                rx = 0;
            int x0 = (int)rx, x1 = x0 < w - 1 ? x0 + 1 : x0;
            float lx = rx - (float)x0, lx0 = 1.0f - lx;
            for (int c = 0; c < C; c++) {
                const float *r0 = src + (size_t)y0 * w * C, *r1 = src + (size_t)y1 * w * C;
                dst[((size_t)y * ow + x) * C + c] =
                    ly0 * (lx0 * r0[x0 * C + c] + lx * r0[x1 * C + c]) +
                    ly * (lx0 * r1[x0 * C + c] + lx * r1[x1 * C + c]);
            }
        }
    }
}

static float clamp01(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

static float gray(const float *px) { return 0.299f * px[0] + 0.587f * px[1] + 0.114f * px[2]; }

static void rgb_to_hsv(const float *px, float *hsv)
{
    /* torchvision's _rgb2hsv, one pixel at a time. */
    float r = px[0], g = px[1], b = px[2];
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    bool eqc = maxc == minc;
    float cr = maxc - minc;
    float s = cr / (eqc ? 1.0f : maxc);
    float div = eqc ? 1.0f : cr;
    float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float h = 0.0f;
    if (maxc == r)
        h = bc - gc;
    else if (maxc == g)
        h = 2.0f + rc - bc;
    else
        h = 4.0f + gc - rc;
    h = fmodf(h / 6.0f + 1.0f, 1.0f);
    hsv[0] = h, hsv[1] = s, hsv[2] = maxc;
}

static void hsv_to_rgb(const float *hsv, float *px)
{
    float h = hsv[0], s = hsv[1], v = hsv[2];
    float i = floorf(h * 6.0f), f = h * 6.0f - i;
    int k = ((int)i % 6 + 6) % 6;
    float p = clamp01(v * (1.0f - s)), q = clamp01(v * (1.0f - s * f)),
          u = clamp01(v * (1.0f - s * (1.0f - f)));
    const float rr[6] = {v, q, p, p, u, v}, gg[6] = {u, v, v, q, p, p}, bb[6] = {p, p, u, v, v, q};
    px[0] = rr[k], px[1] = gg[k], px[2] = bb[k];
}

static void color_jitter(float *img, size_t npx, int C, const stoke_op *op, const op_params *q)
{
    for (int k = 0; k < 4; k++) {
        int fn = q->order[k];
        float f = q->factor[fn];
        if (fn == 0 && op->brightness > 0) {
            for (size_t i = 0; i < npx * C; i++)
                img[i] = clamp01(img[i] * f);
        } else if (fn == 1 && op->contrast > 0) {
            double sum = 0;
            for (size_t i = 0; i < npx; i++)
                sum += C >= 3 ? gray(img + i * C) : img[i * C];
            float mean = (float)(sum / (double)npx);
            for (size_t i = 0; i < npx * C; i++)
                img[i] = clamp01(f * img[i] + (1.0f - f) * mean);
        } else if (fn == 2 && op->saturation > 0 && C >= 3) {
            for (size_t i = 0; i < npx; i++) {
                float *px = img + i * C, g = gray(px);
                for (int c = 0; c < 3; c++)
                    px[c] = clamp01(f * px[c] + (1.0f - f) * g);
            }
        } else if (fn == 3 && op->hue > 0 && C >= 3) {
            for (size_t i = 0; i < npx; i++) {
                float hsv[3];
                rgb_to_hsv(img + i * C, hsv);
                hsv[0] = hsv[0] + f;
                hsv[0] -= floorf(hsv[0]);
                hsv_to_rgb(hsv, img + i * C);
            }
        }
    }
}

/* Copies the (wh, ww) window at (i, j) of an (h, w, C) image into a packed one. */
static void window_copy(const void *src, size_t elem, int w, int C, int i, int j, int wh, int ww,
                        void *dst)
{
    size_t row = (size_t)ww * C * elem;
    for (int y = 0; y < wh; y++)
        memcpy((char *)dst + (size_t)y * row,
               (const char *)src + (((size_t)(i + y) * w + j) * C) * elem, row);
}

/* The first op on u8 HWC input, resampled with Pillow's filter into out8. False if out
 * of memory. */
static bool u8_resample(const stoke_transform *t, const uint8_t *in, uint8_t *win, uint8_t *out8,
                        const op_params *q)
{
    const stoke_op *op = &t->ops[0];
    const uint8_t *src = in;
    int sh = t->H, sw = t->W;
    if (op->kind == STOKE_OP_RANDOM_RESIZED_CROP) {
        window_copy(in, 1, t->W, t->C, q->crop_i, q->crop_j, q->win_h, q->win_w, win);
        src = win, sh = q->win_h, sw = q->win_w;
    }
    /* Pillow's antialiased resize (resize.c), as images.c resizes image folders: the
     * same arithmetic as torchvision on PIL images */
    return stoke_resize_u8(src, sw, sh, out8, op->width, op->height, t->C);
}

static void general_apply(const stoke_transform *t, const void *in, void *out, float *a, float *b,
                          uint8_t *u8, const op_params *p)
{
    const int C = t->C;
    int h = t->H, w = t->W, k0 = 0;
    bool hwc = t->in_hwc;
    if (t->u8_first) {
        uint8_t *out8 = u8 + (size_t)t->H * t->W * C;
        if (!u8_resample(t, in, u8, out8, &p[0]))
            memset(out8, 0, (size_t)t->ops[0].height * t->ops[0].width * C);
        in = out8, h = t->ops[0].height, w = t->ops[0].width, k0 = 1, hwc = true;
    }
    size_t n = (size_t)h * w;
    /* Load as HWC floats in [0, 1] (u8) or as given (f32). */
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < C; c++) {
            size_t src = hwc ? i * C + c : (size_t)c * n + i;
            a[i * C + c] = t->in_dtype == STOKE_U8 ? ((const uint8_t *)in)[src] / 255.0f
                                                   : ((const float *)in)[src];
        }
    for (int k = k0; k < t->nops; k++) {
        const stoke_op *op = &t->ops[k];
        const op_params *q = &p[k];
        switch (op->kind) {
        case STOKE_OP_RANDOM_RESIZED_CROP:
            /* Float input, or not the first op: the window resized as RESIZE does (torch's
             * tensor bilinear without antialias). */
            window_copy(a, sizeof(float), w, C, q->crop_i, q->crop_j, q->win_h, q->win_w, b);
            resize_bilinear(b, q->win_h, q->win_w, C, a, op->height, op->width);
            h = op->height, w = op->width;
            break;
        case STOKE_OP_RESIZE_SHORTER:
        case STOKE_OP_RESIZE: {
            resize_bilinear(a, h, w, C, b, op->height, op->width);
            float *tmp = a;
            a = b, b = tmp;
            h = op->height, w = op->width;
            break;
        }
        case STOKE_OP_CROP: {
            int oh = op->height, ow = op->width;
            for (int y = 0; y < oh; y++)
                for (int x = 0; x < ow; x++) {
                    int sy = y + q->crop_i - op->pad, sx = x + q->crop_j - op->pad;
                    bool in_img = sy >= 0 && sy < h && sx >= 0 && sx < w;
                    for (int c = 0; c < C; c++)
                        b[((size_t)y * ow + x) * C + c] =
                            in_img ? a[((size_t)sy * w + sx) * C + c] : 0.0f;
                }
            float *tmp = a;
            a = b, b = tmp;
            h = oh, w = ow;
            break;
        }
        case STOKE_OP_HFLIP:
            if (q->flip)
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w / 2; x++)
                        for (int c = 0; c < C; c++) {
                            float *l = a + ((size_t)y * w + x) * C + c;
                            float *r = a + ((size_t)y * w + (w - 1 - x)) * C + c;
                            float tmp = *l;
                            *l = *r, *r = tmp;
                        }
            break;
        case STOKE_OP_COLOR_JITTER: color_jitter(a, (size_t)h * w, C, op, q); break;
        case STOKE_OP_NORMALIZE:
            for (size_t i = 0; i < (size_t)h * w; i++)
                for (int c = 0; c < C; c++)
                    a[i * C + c] = (a[i * C + c] - op->mean[c]) / op->std[c];
            break;
        }
    }
    /* Lay out (into b when the layout changes) and convert. */
    n = (size_t)h * w;
    const float *src = a;
    if (!t->out_hwc && C > 1) {
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < C; c++)
                b[(size_t)c * n + i] = a[i * C + c];
        src = b;
    }
    if (t->out_dtype == STOKE_F32)
        memcpy(out, src, n * C * sizeof(float));
    else if (t->out_dtype == STOKE_U8) /* [0, 1] back to 0..255: u8 in, u8 out exactly */
        for (size_t k = 0; k < n * C; k++)
            ((uint8_t *)out)[k] = (uint8_t)lrintf(clamp01(src[k]) * 255.0f);
    else if (t->out_dtype == STOKE_BF16)
        stoke_f32_to_bf16(src, out, n * C);
    else
        stoke_f32_to_f16(src, out, n * C);
}

/* The ops with their parameters already drawn. */
static void apply_drawn(const stoke_transform *t, const void *in, void *out, void *scratch,
                        const op_params *p)
{
    if (t->fused) {
        int crop[2] = {0, 0};
        if (t->crop_op >= 0)
            crop[0] = p[t->crop_op].crop_i, crop[1] = p[t->crop_op].crop_j;
        t->fused(t, in, out, t->crop_op >= 0 ? crop : NULL, t->flip_op >= 0 && p[t->flip_op].flip);
        return;
    }
    void *own = NULL;
    if (!scratch && !(scratch = own = malloc(stoke_transform_scratch_bytes(t)))) {
        memset(out, 0, stoke_transform_out_bytes(t)); /* documented: pass scratch */
        return;
    }
    float *a = scratch, *b = a + t->stage_elems;
    general_apply(t, in, out, a, b, (uint8_t *)(b + t->stage_elems), p);
    free(own);
}

void stoke_transform_apply(const stoke_transform *t, const void *in, void *out, void *scratch,
                           uint64_t seed, int64_t epoch, int64_t index)
{
    op_params p[MAX_OPS];
    stoke_transform_draw(t, seed, epoch, index, p);
    apply_drawn(t, in, out, scratch, p);
}

/* ---- on originals ------------------------------------------------------------------ */

typedef struct window_ctx {
    const stoke_transform *t;
    uint64_t seed;
    int64_t epoch, index;
    op_params *p;
} window_ctx;

/* The decoder's window for an original of src_w x src_h: drawn from the sample's stream
 * on that size (so every later op's draw follows as on a stored sample). */
static void window_of(void *ctx, int src_w, int src_h, stoke_image_window *win)
{
    window_ctx *c = ctx;
    const stoke_transform *t = c->t;
    draw_sized(t, c->seed, c->epoch, c->index, src_h, src_w, c->p);
    memset(win, 0, sizeof *win);
    if (t->window_ops == 1) { /* crop, then resize the crop alone */
        const op_params *q = &c->p[0];
        win->x = stoke_resize_whole(q->win_w, t->win_w);
        win->y = stoke_resize_whole(q->win_h, t->win_h);
        win->x0 = q->crop_j, win->y0 = q->crop_i;
    } else { /* resize the whole, then keep the centre */
        int rh, rw;
        shorter_size(t->shorter, src_h, src_w, &rh, &rw);
        win->x = stoke_resize_whole(src_w, rw);
        win->y = stoke_resize_whole(src_h, rh);
        win->x.off = c->p[1].crop_j, win->x.out = t->win_w;
        win->y.off = c->p[1].crop_i, win->y.out = t->win_h;
    }
}

bool stoke_transform_on_originals(const stoke_transform *t, const stoke_dataset *d)
{
    return t->window_ops > 0 && d->vt->read_window;
}

size_t stoke_transform_window_bytes(const stoke_transform *t)
{
    return (size_t)t->win_h * t->win_w * t->C;
}

stoke_status stoke_transform_read(const stoke_transform *t, stoke_dataset *d, int64_t i,
                                  void *window, void *out, void *target, void *scratch,
                                  uint64_t seed, int64_t epoch)
{
    op_params p[MAX_OPS];
    window_ctx c = {t, seed, epoch, i, p};
    stoke_status st = d->vt->read_window(d, i, window_of, &c, window, target);
    if (st != STOKE_OK)
        return st;
    apply_drawn(t->tail, window, out, scratch, p + t->window_ops);
    return STOKE_OK;
}
