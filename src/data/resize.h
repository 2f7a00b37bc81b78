/* resize.h - the antialiased resize of 8-bit interleaved images (Pillow's BILINEAR
 * resampling, bit for bit), with AVX2 and AVX-512 paths and the scalar path they are
 * tested against.
 * Internal to src/data. */
#ifndef STOKE_DATA_RESIZE_H
#define STOKE_DATA_RESIZE_H

#include <stdbool.h>

/* in is (ih, iw, c) and out is (oh, ow, c), rows packed, 1 <= c <= 4. False if out of
 * memory. Thread-safe. */
bool stoke_resize_u8(const unsigned char *in, int iw, int ih, unsigned char *out, int ow, int oh,
                     int c);

/* One axis of a resize of part of an image, in the coordinates of the image it is cut
 * from: output pixel x is pixel off + x of the box [in0, in1) resized to virt pixels
 * (Pillow's resize with a box), and the filter reads only coordinates in [lo, hi).
 * torchvision's crop then resize is the box [j, j + w) with lo, hi = its ends; its
 * resize then centre crop is the whole image resized to virt, off the crop's start. */
typedef struct stoke_resize_axis {
    double in0, in1;
    int lo, hi;
    int virt, off, out;
} stoke_resize_axis;

/* The whole of `in` pixels resized to `out`: what stoke_resize_u8 does on each axis. */
stoke_resize_axis stoke_resize_whole(int in, int out);

/* The coordinates [*first, *end) the resize reads on this axis: the part of the image a
 * decoder must produce. */
void stoke_resize_span(const stoke_resize_axis *a, int *first, int *end);

/* Resizes with the geometry of ax and ay from `in`, (ih, iw, c) pixels whose first
 * column and row are coordinates ox and oy; in must hold every coordinate the spans
 * name. out is (ay->out, ax->out, c). With whole-image axes this is stoke_resize_u8,
 * bit for bit. False if out of memory. */
bool stoke_resize_box_u8(const unsigned char *in, int iw, int ih, int ox, int oy,
                         const stoke_resize_axis *ax, const stoke_resize_axis *ay,
                         unsigned char *out, int c);

/* The path stoke_resize_u8 takes now: "avx512", "avx2" or "scalar". */
const char *stoke_resize_path(void);

#endif
