/* transform_impl.h - what the transforms show their tests: the random parameters each
 * op draws for a sample, and the instruction-set switch of the vectorized paths. */
#ifndef STOKE_TRANSFORM_IMPL_H
#define STOKE_TRANSFORM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

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

/* Tests only: the instruction set the transforms created afterwards use (-1: detect,
 * 0: baseline x86-64, 1: AVX2 where the CPU and the STOKE_MAX_CPU_ISA cap allow it,
 * else baseline), so the scalar path is tested against the vectorized one on the same
 * machine. */
void stoke_transform_set_isa(int level);

#endif
