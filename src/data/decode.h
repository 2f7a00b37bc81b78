/* decode.h - JPEG and PNG bytes to the 8-bit pixels one sample needs. The caller names
 * the part of the image it wants once the image's size is known (a transform draws its
 * RandomResizedCrop window on the original, as torchvision does); a JPEG is then decoded
 * at the smallest DCT scale that keeps that part's resolution, and only the rows and
 * columns the resize reads, then resized with Pillow's filter (resize.h). Shared by
 * image folders and packed JPEG records. Internal to src/data. */
#ifndef STOKE_DATA_DECODE_H
#define STOKE_DATA_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/resize.h"
#include "stoke/core.h"

/* Larger images are refused before decoding (Pillow's decompression-bomb limit): a
 * corrupt header must not make a read allocate gigabytes. */
#define STOKE_IMAGE_MAX_PIXELS 178956970LL

/* The part of a src_w x src_h image a sample needs, as resize axes (resize.h): x on the
 * width, y on the height; out sizes are the sample's. The axes' coordinate 0 is image
 * pixel (x0, y0): a crop's own coordinates, so that crop then resize computes Pillow's
 * weights bit for bit (they depend on where coordinate 0 is through rounding). */
typedef struct stoke_image_window {
    stoke_resize_axis x, y;
    int x0, y0;
} stoke_image_window;

/* Fills *w for an image of src_w x src_h pixels. Called once per decode, before any
 * pixel is decoded; ctx is the caller's. */
typedef void (*stoke_image_window_fn)(void *ctx, int src_w, int src_h, stoke_image_window *w);

/* The whole image resized to ctx's int[2] {width, height}: image folders' plain read. */
void stoke_image_window_fit(void *ctx, int src_w, int src_h, stoke_image_window *w);

/* Decodes `buf` (JPEG or PNG, told by its signature) into `out`: the window's
 * (y.out, x.out) pixels of c channels (1: gray, as Pillow's convert("L"); 3: RGB).
 * Errors name `name` and sample `index`: not an image, a bad header, an image above
 * STOKE_IMAGE_MAX_PIXELS, CMYK, corrupt or truncated data (a decoder warning is an
 * error: it would otherwise hand back gray filler), out of memory. Thread-safe. */
stoke_status stoke_image_decode(const char *name, int64_t index, const unsigned char *buf,
                                size_t len, int c, stoke_image_window_fn fn, void *ctx,
                                unsigned char *out);

/* The width and height in pixels of a JPEG or PNG image, from its header alone (no
 * pixel is decoded). Errors as stoke_image_decode's for a bad header or size. */
stoke_status stoke_image_size(const char *name, int64_t index, const unsigned char *buf, size_t len,
                              int *width, int *height);

/* The DCT scaling a JPEG window of bw x bh source pixels is decoded with, to be
 * resized to ow x oh: 1/denom, denom the largest of 1, 2, 4, 8 that leaves at least
 * ow x oh pixels (sizes rounded up, as libjpeg's). Only these: libjpeg-turbo's other
 * factors (3/8, 5/8, 3/4, 7/8) run scalar IDCTs and decode slower than the whole image
 * (bench/resize_bench.c). */
int stoke_images_jpeg_denom(int bw, int bh, int ow, int oh);

/* Reads a whole regular file (at most 1 GiB) into *buf (free it); errors name the
 * path and sample. */
stoke_status stoke_image_load_file(const char *path, int64_t index, unsigned char **buf,
                                   size_t *len);

#endif
