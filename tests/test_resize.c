/* test_resize.c - the AVX2 and AVX-512 resizes against the scalar reference (bit for bit, at sizes
 * that reach every vector loop and its tails), the JPEG scale an image folder decodes
 * at, scaled decode + resize against full decode + resize, and damaged JPEGs among
 * good ones read through the loader. The scalar resize itself is checked against
 * Pillow in test_data_hdf5_images. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "../bench/jpeg_gen.h"
#include "check.h"
#include "core/isa.h"
#include "data/dataset_impl.h"
#include "data/resize.h"
#include "data/test_seam.h"
#include "stoke/data.h"

static uint64_t rng = 88172645463325252ull;

static unsigned rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 32);
}

/* The path each level takes follows the CPU and the STOKE_MAX_CPU_ISA cap, worked out
 * here from the CPU's features and the cap rather than from the dispatcher's own
 * stoke_isa_usable(). */
static void test_paths(void)
{
    stoke_cpu_isa cap;
    CHECK(stoke_max_cpu_isa(&cap) == STOKE_OK);
    unsigned present = stoke_isa_present();
#if defined(__x86_64__)
    bool bw = __builtin_cpu_supports("avx512bw");
#else
    bool bw = false;
#endif
    bool avx2 = (present & STOKE_ISA_AVX2) && cap >= STOKE_CPU_ISA_AVX2;
    bool avx512 = (present & STOKE_ISA_AVX512F) && bw && cap >= STOKE_CPU_ISA_AVX512_CORE;
    const char *best = avx512 ? "avx512" : avx2 ? "avx2" : "scalar";
    stoke_data_test_seam()->resize_isa = 2;
    CHECK_STR_EQ(stoke_resize_path(), best);
    stoke_data_test_seam()->resize_isa = 1;
    CHECK_STR_EQ(stoke_resize_path(), avx2 ? "avx2" : "scalar");
    stoke_data_test_seam()->resize_isa = 0;
    CHECK_STR_EQ(stoke_resize_path(), "scalar");
    stoke_data_test_seam()->resize_isa = -1;
    CHECK_STR_EQ(stoke_resize_path(), best);
    fprintf(stderr, "cap %s: resize path %s\n", stoke_cpu_isa_name(cap), stoke_resize_path());
}

/* Every pair of sizes: down by small and large factors, up, one direction only, rows
 * narrower than the filter (the scalar fallback), widths that leave vector tails. */
static void test_simd_matches_scalar(int level)
{
    static const int sz[][4] = {
        {400, 350, 224, 224}, {250, 219, 224, 224}, {500, 375, 224, 224}, {1000, 800, 37, 29},
        {17, 13, 40, 31},     {3, 2, 1, 1},         {5, 5, 2, 2},         {2, 9, 7, 3},
        {224, 300, 224, 224}, {300, 224, 224, 224}, {33, 1, 5, 1},        {64, 64, 63, 65},
    };
    for (size_t s = 0; s < sizeof sz / sizeof *sz; s++)
        for (int c = 1; c <= 4; c++)
            for (int kind = 0; kind < 2; kind++) {
                int iw = sz[s][0], ih = sz[s][1], ow = sz[s][2], oh = sz[s][3];
                size_t in_n = (size_t)iw * ih * c, out_n = (size_t)ow * oh * c;
                unsigned char *in = malloc(in_n), *a = malloc(out_n), *b = malloc(out_n);
                /* kind 0: noise (every weight matters); 1: extremes (the clamps) */
                for (size_t k = 0; k < in_n; k++)
                    in[k] = kind ? (rnd() & 1 ? 255 : 0) : (unsigned char)rnd();
                stoke_data_test_seam()->resize_isa = 0;
                CHECK(stoke_resize_u8(in, iw, ih, a, ow, oh, c));
                stoke_data_test_seam()->resize_isa = level;
                CHECK(stoke_resize_u8(in, iw, ih, b, ow, oh, c));
                size_t bad = 0;
                for (size_t k = 0; k < out_n; k++)
                    bad += a[k] != b[k];
                CHECK_MSG(bad == 0, "%s: %dx%d -> %dx%d, %d channels, kind %d: %zu of %zu differ",
                          stoke_resize_path(), iw, ih, ow, oh, c, kind, bad, out_n);
                free(in);
                free(a);
                free(b);
            }
    stoke_data_test_seam()->resize_isa = -1;
}

static void test_jpeg_denom(void)
{
    static const int t[][5] = {
        /* w, h, ow, oh, denom */
        {400, 350, 224, 224, 1}, {1000, 800, 224, 224, 2}, {447, 447, 224, 224, 2},
        {446, 900, 224, 224, 1}, {480, 400, 12, 10, 8},    {100, 100, 13, 13, 8},
        {100, 100, 14, 13, 4},   {100, 100, 13, 14, 4},    {1000, 800, 112, 112, 4},
        {224, 224, 224, 224, 1}, {100, 100, 224, 224, 1},  {900, 700, 224, 175, 4},
        {900, 700, 226, 175, 2},
    };
    for (size_t k = 0; k < sizeof t / sizeof *t; k++)
        CHECK_MSG(stoke_images_jpeg_denom(t[k][0], t[k][1], t[k][2], t[k][3]) == t[k][4],
                  "%dx%d to %dx%d: 1/%d, expected 1/%d", t[k][0], t[k][1], t[k][2], t[k][3],
                  stoke_images_jpeg_denom(t[k][0], t[k][1], t[k][2], t[k][3]), t[k][4]);
}

static char dir[4096];

static void write_file(const char *name, const unsigned char *b, size_t n)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/c/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK_MSG(f && fwrite(b, 1, n, f) == n, "%s: %s", p, strerror(errno));
    if (f)
        fclose(f);
}

/* Scaled decode is not full decode: the DCT scaling averages each block without the
 * triangle filter's overlap, so the two pipelines differ where detail sits near the
 * new pixel grid, the more so the smaller the scale; most at 1/8 (a plain 8x8 block
 * mean) on a fine periodic texture, which aliases (Pillow's draft mode does the same).
 * The tolerances, per-channel levels out of 255, by scale 1/2, 1/4, 1/8; measured on
 * this test's images: max 7-10, 6-17, 2-56; mean 0.30-0.31, 0.35-0.57, 0.22-1.41.
 * Decoding one step smaller than chosen (then enlarging) gives means of 0.67-0.69 at
 * 1/2 and 1.0-2.1 at 1/4: the mean bounds catch that. */
static const int scaled_max_diff[4] = {0, 16, 32, 64};
static const double scaled_mean_diff[4] = {0, 0.5, 0.8, 1.8};

static void test_scaled_decode(void)
{
    static const int img[][3] = {{1000, 800, 90}, {900, 700, 80}, {1600, 1200, 95}};
    static const int out[][2] = {{224, 224}, {112, 112}, {64, 48}, {200, 150}};
    enum { NIMG = 3 };
    unsigned char *jpg[NIMG];
    unsigned long len[NIMG];
    for (int k = 0; k < NIMG; k++) {
        CHECK(jg_jpeg(img[k][0], img[k][1], 100 + k, img[k][2], &jpg[k], &len[k]));
        char name[32];
        snprintf(name, sizeof name, "img%d.jpg", k);
        write_file(name, jpg[k], len[k]);
    }
    tjhandle tj = tjInitDecompress();
    int scaled = 0;
    for (size_t o = 0; o < sizeof out / sizeof *out; o++) {
        int ow = out[o][0], oh = out[o][1];
        stoke_dataset_opts opts = {.image_width = ow, .image_height = oh};
        stoke_dataset *d = NULL;
        CHECK_MSG(stoke_dataset_open(dir, &opts, &d) == STOKE_OK, "%s", stoke_last_error());
        if (!d)
            continue;
        unsigned char *got = malloc((size_t)ow * oh * 3), *ref = malloc((size_t)ow * oh * 3);
        for (int k = 0; k < NIMG; k++) {
            int w = img[k][0], h = img[k][1];
            scaled += stoke_images_jpeg_denom(w, h, ow, oh) > 1;
            CHECK_MSG(stoke_dataset_read(d, k, got, NULL) == STOKE_OK, "%s", stoke_last_error());
            unsigned char *full = malloc((size_t)w * h * 3);
            CHECK(tjDecompress2(tj, jpg[k], len[k], full, w, 0, h, TJPF_RGB, TJFLAG_ACCURATEDCT) ==
                  0);
            CHECK(stoke_resize_u8(full, w, h, ref, ow, oh, 3));
            int maxd = 0;
            double sum = 0;
            for (size_t q = 0; q < (size_t)ow * oh * 3; q++) {
                int dd = abs(got[q] - ref[q]);
                maxd = dd > maxd ? dd : maxd;
                sum += dd;
            }
            double mean = sum / ((double)ow * oh * 3);
            fprintf(stderr, "scaled decode 1/%d %dx%d -> %dx%d: max diff %d, mean %.3f\n",
                    stoke_images_jpeg_denom(w, h, ow, oh), w, h, ow, oh, maxd, mean);
            int lg = stoke_images_jpeg_denom(w, h, ow, oh) == 8   ? 3
                     : stoke_images_jpeg_denom(w, h, ow, oh) == 4 ? 2
                                                                  : 1;
            CHECK_MSG(maxd <= scaled_max_diff[lg] && mean <= scaled_mean_diff[lg],
                      "%dx%d -> %dx%d: max diff %d, mean %.3f", w, h, ow, oh, maxd, mean);
            free(full);
        }
        free(got);
        free(ref);
        stoke_dataset_close(d);
    }
    CHECK(scaled >= 8); /* the cases do reach the scaled decoder */
    tjDestroy(tj);
    for (int k = 0; k < NIMG; k++)
        tjFree(jpg[k]);
}

/* A JPEG truncated in its scan and one with garbage in its entropy-coded data, among
 * good ones: reading them fails with the file named, through the dataset and through a
 * loader with workers, and the good ones still read. */
static void test_damaged_among_good(void)
{
    unsigned char *j = NULL;
    unsigned long n = 0;
    CHECK(jg_jpeg(320, 240, 7, 85, &j, &n));
    write_file("a_good.jpg", j, n);
    write_file("b_truncated.jpg", j, n / 2);
    unsigned char *garbled = malloc(n);
    memcpy(garbled, j, n);
    /* restart markers where the image declares no restart interval: invalid whatever
     * ran before (random bytes need not be invalid JPEG data) */
    for (unsigned long k = n / 2; k < n / 2 + 64; k++)
        garbled[k] = (k & 1) ? 0xD3 : 0xFF;
    write_file("c_garbled.jpg", garbled, n);
    write_file("d_good.jpg", j, n);
    free(garbled);
    tjFree(j);
    stoke_dataset_opts opts = {.image_width = 64, .image_height = 48};
    stoke_dataset *d = NULL;
    CHECK_MSG(stoke_dataset_open(dir, &opts, &d) == STOKE_OK, "%s", stoke_last_error());
    if (!d)
        return;
    unsigned char px[64 * 48 * 3];
    static const char *names[] = {"a_good.jpg", "b_truncated.jpg", "c_garbled.jpg", "d_good.jpg"};
    for (int i = 0; i < 4; i++) {
        stoke_status s = stoke_dataset_read(d, i, px, NULL);
        if (i == 0 || i == 3) {
            CHECK_MSG(s == STOKE_OK, "%s: %s", names[i], stoke_last_error());
        } else {
            CHECK_MSG(s == STOKE_ERR_FORMAT, "%s: %s", names[i], stoke_status_name(s));
            CHECK_STR_CONTAINS(stoke_last_error(), names[i]);
            CHECK_STR_CONTAINS(stoke_last_error(), "corrupt JPEG");
            fprintf(stderr, "%s\n", stoke_last_error());
        }
    }
    /* The loader's workers stop at the first damaged sample and report it by name. */
    stoke_loader_opts lo = {.sampler = {.batch_size = 4}, .workers = 2};
    stoke_loader *l = NULL;
    CHECK_MSG(stoke_loader_create(d, &lo, &l) == STOKE_OK, "%s", stoke_last_error());
    if (l) {
        stoke_batch b;
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_ERR_FORMAT);
        const char *e = stoke_last_error();
        CHECK_MSG(strstr(e, "b_truncated.jpg") || strstr(e, "c_garbled.jpg"), "%s", e);
        stoke_loader_destroy(l);
    }
    stoke_dataset_close(d);
}

/* A fresh temporary image folder with one class, "c". */
static int make_dir(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/stoke-resize-XXXXXX", t && t[0] ? t : "/tmp");
    char c[4200];
    if (!mkdtemp(dir) || snprintf(c, sizeof c, "%s/c", dir) < 0 || mkdir(c, 0700) != 0) {
        perror(dir);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    /* the parts test_resize_simd and _simd512: scalar against scalar would prove
     * nothing */
    int level = check_part(argc, argv, "simd") ? 1 : check_part(argc, argv, "simd512") ? 2 : 0;
    if (level) {
        static const char *const want[] = {"", "avx2", "avx512"};
        stoke_data_test_seam()->resize_isa = level;
        if (strcmp(stoke_resize_path(), want[level]) != 0) {
            fprintf(stderr,
                    "skipped: %s is not usable here (the CPU, or STOKE_MAX_CPU_ISA): "
                    "no vectorized resize to compare with the scalar one\n",
                    level == 1 ? "AVX2" : "AVX-512 (F and BW)");
            return CHECK_SKIPPED;
        }
        test_simd_matches_scalar(level);
        return CHECK_DONE();
    }
    test_paths();
    test_jpeg_denom();
    if (!make_dir())
        return 1;
    test_scaled_decode();
    check_rm_rf(dir);
    if (!make_dir())
        return 1;
    test_damaged_among_good();
    check_rm_rf(dir);
    return CHECK_DONE();
}
