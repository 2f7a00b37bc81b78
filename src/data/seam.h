/* seam.h - the data module's one test seam: the paths a test must force to compare
 * them on one machine (the scalar reference against the vectorized resize and
 * transforms, whole JPEG decodes against cropped ones, HDF5's read-ahead without a
 * 64 MB fixture), which no user setting reaches. The readers here see it read-only;
 * tests and benchmarks change it through data/test_seam.h (docs/testing.md, "Test
 * seams"). Internal to src/data. */
#ifndef STOKE_DATA_SEAM_H
#define STOKE_DATA_SEAM_H

typedef struct stoke_data_seam {
    /* stoke_resize_u8's path: -1 detect (the best there is); 0 scalar; 1 AVX2; 2 AVX-512
     * F and BW; each where the CPU and the STOKE_MAX_CPU_ISA cap allow it, else the
     * next one down. */
    int resize_isa;
    /* The transforms created afterwards: -1 detect; 0 baseline x86-64; 1 AVX2 where
     * the CPU and the cap allow it. */
    int transform_isa;
    /* 1 (the default): a JPEG is decoded cropped to what the resize reads; 0: whole. */
    int jpeg_partial;
    /* HDF5 contiguous data up to this many bytes is cached whole; < 0: the default
     * (the cache's size). */
    double hdf5_whole_max;
} stoke_data_seam;

/* The seam in force: the defaults above unless a test changed them. Never NULL. */
const stoke_data_seam *stoke_data_seam_get(void);

#endif
