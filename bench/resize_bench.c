/* resize_bench.c - an image folder's per-sample work on one core, on a generated
 * folder of photo-like JPEGs (bench/jpeg_gen.h: sizes around ImageNet's ~400x350,
 * quality 75 to 95, 4:2:0): decoding alone (the limit), decoding at the scale stoke
 * picks and at the scale the rule before it picked, and stoke_dataset_read (file read,
 * scaled decode, resize) with the scalar, AVX2 and AVX-512 resizes; then the resize
 * alone.
 * Images/s on one thread, so per core. Prints what it measured and the ratios.
 *
 *     stoke_bench_resize [IMAGES] [SECONDS_PER_MEASURE] [OUT_SIZES...]
 *
 * Defaults: 240 images, 2 s, output sizes 224x224 and 112x112. The folder is written
 * under $TMPDIR (or /tmp) and removed at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../bench/jpeg_gen.h"
#include "data/dataset_impl.h"
#include "data/resize.h"
#include "data/test_seam.h"
#include "stoke/data.h"

static const int sizes[][2] = {{400, 350}, {500, 375}, {375, 500}, {333, 500},
                               {448, 336}, {350, 400}, {420, 315}, {512, 384}};
enum { NSIZES = sizeof sizes / sizeof *sizes };

typedef struct img {
    unsigned char *jpg;
    unsigned long len;
    int w, h;
    unsigned char *px; /* decoded at stoke's scale, for the resize-only runs */
    int pw, ph;
} img;

static double secs;

static double elapsed(uint64_t t0) { return (double)(stoke_now_ns() - t0) / 1e9; }

/* Decodes image k at 1/denom (num/denom: sf) and returns the pixels (caller frees). */
static unsigned char *decode(tjhandle tj, const img *m, tjscalingfactor sf, int *w, int *h)
{
    *w = TJSCALED(m->w, sf);
    *h = TJSCALED(m->h, sf);
    unsigned char *p = malloc((size_t)*w * *h * 3);
    if (!p || tjDecompress2(tj, m->jpg, m->len, p, *w, 0, *h, TJPF_RGB, TJFLAG_ACCURATEDCT)) {
        fprintf(stderr, "decode: %s\n", tjGetErrorStr2(tj));
        exit(1);
    }
    return p;
}

/* The rule before: the smallest of all TurboJPEG's factors that leaves ow x oh. */
static tjscalingfactor old_rule(int w, int h, int ow, int oh)
{
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n), best = {1, 1};
    for (int k = 0; k < n; k++)
        if (sf[k].num <= sf[k].denom && TJSCALED(w, sf[k]) >= ow && TJSCALED(h, sf[k]) >= oh &&
            (long long)sf[k].num * best.denom < (long long)best.num * sf[k].denom)
            best = sf[k];
    return best;
}

/* 0: full size; 1: stoke's scale; 2: the old rule's scale. Images/s. */
static double run_decode(img *im, int n, int mode, int ow, int oh)
{
    tjhandle tj = tjInitDecompress();
    long done = 0;
    uint64_t t0 = stoke_now_ns();
    while (elapsed(t0) < secs) {
        const img *m = &im[done % n];
        tjscalingfactor sf = {1, 1};
        if (mode == 1)
            sf.denom = stoke_images_jpeg_denom(m->w, m->h, ow, oh);
        else if (mode == 2)
            sf = old_rule(m->w, m->h, ow, oh);
        int w, h;
        free(decode(tj, m, sf, &w, &h));
        done++;
    }
    double r = done / elapsed(t0);
    tjDestroy(tj);
    return r;
}

static double run_read(const char *dir, int n, int ow, int oh, int isa)
{
    stoke_data_test_seam()->resize_isa = isa;
    stoke_dataset_opts o = {.image_width = ow, .image_height = oh};
    stoke_dataset *d = NULL;
    if (stoke_dataset_open(dir, &o, &d) != STOKE_OK) {
        fprintf(stderr, "%s\n", stoke_last_error());
        exit(1);
    }
    unsigned char *out = malloc((size_t)ow * oh * 3);
    long done = 0;
    uint64_t t0 = stoke_now_ns();
    while (elapsed(t0) < secs) {
        if (stoke_dataset_read(d, done % n, out, NULL) != STOKE_OK) {
            fprintf(stderr, "%s\n", stoke_last_error());
            exit(1);
        }
        done++;
    }
    double r = done / elapsed(t0);
    free(out);
    stoke_dataset_close(d);
    stoke_data_test_seam()->resize_isa = -1;
    return r;
}

static double run_resize(const img *im, int n, int ow, int oh, int isa)
{
    stoke_data_test_seam()->resize_isa = isa;
    unsigned char *out = malloc((size_t)ow * oh * 3);
    long done = 0;
    uint64_t t0 = stoke_now_ns();
    while (elapsed(t0) < secs) {
        const img *m = &im[done % n];
        if (!stoke_resize_u8(m->px, m->pw, m->ph, out, ow, oh, 3))
            exit(1);
        done++;
    }
    double r = done / elapsed(t0);
    free(out);
    stoke_data_test_seam()->resize_isa = -1;
    return r;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 240;
    secs = argc > 2 ? atof(argv[2]) : 2.0;
    if (n < 1 || secs <= 0) {
        fprintf(stderr, "usage: %s [IMAGES] [SECONDS] [WxH ...]\n", argv[0]);
        return 2;
    }
    const char *t = getenv("TMPDIR");
    char dir[4096], cls[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/stoke-resize-bench-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(dir) || snprintf(cls, sizeof cls, "%s/c", dir) < 0 || mkdir(cls, 0700)) {
        perror(dir);
        return 1;
    }
    img *im = calloc((size_t)n, sizeof *im);
    double bytes = 0;
    for (int k = 0; k < n; k++) {
        im[k].w = sizes[k % NSIZES][0], im[k].h = sizes[k % NSIZES][1];
        int q = 75 + (k * 7) % 21;
        if (!jg_jpeg(im[k].w, im[k].h, (uint64_t)k, q, &im[k].jpg, &im[k].len))
            return 1;
        snprintf(path, sizeof path, "%s/%05d.jpg", cls, k);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(im[k].jpg, 1, im[k].len, f) != im[k].len || fclose(f)) {
            perror(path);
            return 1;
        }
        bytes += (double)im[k].len;
    }
    printf("folder: %d JPEGs, %d sizes from 333x500 to 512x384, quality 75-95, mean %.1f KB\n", n,
           NSIZES, bytes / n / 1024);
    printf("resize path: %s (STOKE_MAX_CPU_ISA caps it)\n", stoke_resize_path());
    double full = run_decode(im, n, 0, 0, 0);
    printf("decode only, full size:                %8.0f images/s\n", full);
    int nout = argc > 3 ? argc - 3 : 2;
    for (int s = 0; s < nout; s++) {
        int ow = 224, oh = 224;
        if (argc > 3 && sscanf(argv[3 + s], "%dx%d", &ow, &oh) != 2) {
            fprintf(stderr, "%s: not WxH\n", argv[3 + s]);
            return 2;
        }
        if (argc <= 3 && s == 1)
            ow = oh = 112;
        tjhandle tj = tjInitDecompress();
        for (int k = 0; k < n; k++) {
            free(im[k].px);
            tjscalingfactor sf = {1, stoke_images_jpeg_denom(im[k].w, im[k].h, ow, oh)};
            im[k].px = decode(tj, &im[k], sf, &im[k].pw, &im[k].ph);
        }
        tjDestroy(tj);
        printf("-- output %dx%d (image 0: %dx%d decoded at %dx%d)\n", ow, oh, im[0].w, im[0].h,
               im[0].pw, im[0].ph);
        double dec = run_decode(im, n, 1, ow, oh), old = run_decode(im, n, 2, ow, oh);
        /* levels 0-2 (scalar, AVX2, AVX-512), each lowered to what is usable */
        double rd[3], rz[3];
        const char *name[3];
        for (int l = 0; l < 3; l++) {
            stoke_data_test_seam()->resize_isa = l;
            name[l] = stoke_resize_path();
            rd[l] = run_read(dir, n, ow, oh, l);
            rz[l] = run_resize(im, n, ow, oh, l);
        }
        printf("decode only, stoke's scale (1/2^k):    %8.0f images/s\n", dec);
        printf("decode only, any TurboJPEG scale:      %8.0f images/s (the rule before)\n", old);
        for (int l = 0; l < 3; l++)
            printf("decode + resize, %-6s resize:        %8.0f images/s\n", name[l], rd[l]);
        for (int l = 0; l < 3; l++)
            printf("resize only, %-6s:                    %8.0f images/s\n", name[l], rz[l]);
        printf("ratios: resize %s/scalar %.2fx, %s/%s %.2fx; decode + %s resize / full decode "
               "%.2f; / scaled decode %.2f; decode + resize %s/scalar %.2fx, %s/%s %.2fx\n",
               name[2], rz[2] / rz[0], name[2], name[1], rz[2] / rz[1], name[2], rd[2] / full,
               rd[2] / dec, name[2], rd[2] / rd[0], name[2], name[1], rd[2] / rd[1]);
    }
    for (int k = 0; k < n; k++) {
        snprintf(path, sizeof path, "%s/%05d.jpg", cls, k);
        remove(path);
        tjFree(im[k].jpg);
        free(im[k].px);
    }
    remove(cls);
    remove(dir);
    free(im);
    return 0;
}
