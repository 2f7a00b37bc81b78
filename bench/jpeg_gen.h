/* jpeg_gen.h - photo-like test images, encoded by TurboJPEG: what the resize benchmark
 * and tests/test_resize.c decode. Smooth shading, hard-edged shapes, a fine texture and
 * sensor-like noise, so the entropy coder, the IDCT and the resampler see the mix a
 * photo gives them (a flat or pure-noise image would flatter or punish each of them).
 * Header-only (static functions) so the test and the benchmark share it. */
#ifndef STOKE_BENCH_JPEG_GEN_H
#define STOKE_BENCH_JPEG_GEN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <turbojpeg.h>

static uint32_t jg_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static double jg_unit(uint64_t *s) { return jg_next(s) / 2147483648.0; }

/* An h x w RGB image from `seed`. Returns NULL if out of memory. */
static unsigned char *jg_pixels(int w, int h, uint64_t seed)
{
    unsigned char *p = malloc((size_t)w * h * 3);
    if (!p)
        return NULL;
    uint64_t s = seed * 2654435761u + 1;
    double base[3], gx[3], gy[3];
    for (int c = 0; c < 3; c++) {
        base[c] = 60 + 120 * jg_unit(&s);
        gx[c] = (jg_unit(&s) - 0.5) * 120 / w;
        gy[c] = (jg_unit(&s) - 0.5) * 120 / h;
    }
    enum { NE = 6 };
    double ex[NE], ey[NE], ra[NE], rb[NE], col[NE][3];
    for (int e = 0; e < NE; e++) {
        ex[e] = w * jg_unit(&s), ey[e] = h * jg_unit(&s);
        ra[e] = (0.05 + 0.25 * jg_unit(&s)) * w, rb[e] = (0.05 + 0.25 * jg_unit(&s)) * h;
        for (int c = 0; c < 3; c++)
            col[e][c] = 255 * jg_unit(&s);
    }
    double freq = 0.2 + 0.5 * jg_unit(&s);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v[3];
            for (int c = 0; c < 3; c++)
                v[c] = base[c] + gx[c] * x + gy[c] * y;
            for (int e = 0; e < NE; e++) {
                double dx = (x - ex[e]) / ra[e], dy = (y - ey[e]) / rb[e], r = dx * dx + dy * dy;
                if (r < 1)
                    for (int c = 0; c < 3; c++)
                        v[c] = col[e][c] * (1 - 0.4 * r) + (e == 0 ? 25 * sin(freq * x) : 0);
            }
            for (int c = 0; c < 3; c++) {
                double n = ((int)(jg_next(&s) % 17) - 8) * 0.8;
                double t = v[c] + n;
                p[((size_t)y * w + x) * 3 + c] = (unsigned char)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
        }
    return p;
}

/* jg_pixels as a JPEG of `quality` and subsampling `samp` (TJSAMP_*): *out (free with
 * tjFree) and *len. False on failure. */
static inline int jg_jpeg_samp(int w, int h, uint64_t seed, int quality, int samp,
                               unsigned char **out, unsigned long *len)
{
    /* TurboJPEG reads a non-NULL *out as a buffer of *len bytes to write into (or to
     * reallocate): a caller's uninitialized pointer there corrupted memory */
    *out = NULL;
    *len = 0;
    unsigned char *p = jg_pixels(w, h, seed);
    tjhandle tj = tjInitCompress();
    int ok = p && tj && tjCompress2(tj, p, w, 0, h, TJPF_RGB, out, len, samp, quality, 0) == 0;
    if (tj)
        tjDestroy(tj);
    free(p);
    return ok;
}

/* The same, 4:2:0 (what cameras and most datasets store). */
static inline int jg_jpeg(int w, int h, uint64_t seed, int quality, unsigned char **out,
                          unsigned long *len)
{
    return jg_jpeg_samp(w, h, seed, quality, TJSAMP_420, out, len);
}

#endif
