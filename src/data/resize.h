/* resize.h - the antialiased resize of 8-bit interleaved images (Pillow's BILINEAR
 * resampling, bit for bit), with an AVX2 path and the scalar path it is tested against.
 * Internal to src/data. */
#ifndef STOKE_DATA_RESIZE_H
#define STOKE_DATA_RESIZE_H

#include <stdbool.h>

/* in is (ih, iw, c) and out is (oh, ow, c), rows packed, 1 <= c <= 4. False if out of
 * memory. Thread-safe. */
bool stoke_resize_u8(const unsigned char *in, int iw, int ih, unsigned char *out, int ow, int oh,
                     int c);

/* Tests and benchmarks only: the path stoke_resize_u8 takes from now on (-1: detect,
 * 0: scalar, 1: AVX2 where the CPU and the STOKE_MAX_CPU_ISA cap allow it, else
 * scalar), so the scalar reference is compared with the vectorized path on one
 * machine. Not thread-safe: set it before the threads that resize start. */
void stoke_resize_set_isa(int level);

/* The path stoke_resize_u8 takes now: "avx2" or "scalar". */
const char *stoke_resize_path(void);

#endif
