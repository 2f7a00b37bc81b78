/* transform_impl.h - what the transforms show their tests: the random parameters each
 * op draws for a sample, and the instruction-set switch of the vectorized paths. */
#ifndef STOKE_TRANSFORM_IMPL_H
#define STOKE_TRANSFORM_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

/* The random parameters one op draws for one sample, in op order from the sample's
 * stream (seed, epoch, index). */
typedef struct stoke_op_draw {
    int crop_i, crop_j; /* CROP: top-left corner in the padded image;
                           RANDOM_RESIZED_CROP: the window's */
    int win_h, win_w;   /* RANDOM_RESIZED_CROP: the window's size */
    bool flip;          /* HFLIP */
    int order[4];       /* COLOR_JITTER: order of brightness 0, contrast 1,
                           saturation 2, hue 3 */
    float factor[4];    /*   and their factors (hue: the shift, in turns) */
} stoke_op_draw;

struct stoke_transform;
/* Fills p[0..nops) with what stoke_transform_apply draws for that sample; the tests
 * compute their references from it. */
void stoke_transform_draw(const struct stoke_transform *t, uint64_t seed, int64_t epoch,
                          int64_t index, stoke_op_draw *p);

struct stoke_dataset;
/* True when t begins with a window the decoder can cut from the dataset's originals
 * (RANDOM_RESIZED_CROP, or RESIZE_SHORTER + centre CROP, on u8 HWC images) and d can
 * read originals (read_window): the loader then reads samples with
 * stoke_transform_read. */
bool stoke_transform_on_originals(const struct stoke_transform *t, const struct stoke_dataset *d);

/* Bytes of the window buffer stoke_transform_read needs (u8 HWC). */
size_t stoke_transform_window_bytes(const struct stoke_transform *t);

/* Reads sample i of d from its original: the window drawn on the original's size from
 * the sample's stream, decoded into `window`, then the remaining ops into `out`, with
 * the draws stoke_transform_apply would make on a sample of that size. `scratch` as
 * for stoke_transform_apply (not NULL); target as stoke_dataset_read. Errors are the
 * dataset's. Thread-safe. */
stoke_status stoke_transform_read(const struct stoke_transform *t, struct stoke_dataset *d,
                                  int64_t i, void *window, void *out, void *target, void *scratch,
                                  uint64_t seed, int64_t epoch);

#endif
