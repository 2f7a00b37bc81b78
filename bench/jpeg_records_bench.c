/* jpeg_records_bench.c - packed records that keep the JPEG bytes (--store jpeg) against
 * pixel records (--store pixels) and the image folder itself, on the same generated
 * photo-like JPEGs (bench/jpeg_gen.h: sizes around ImageNet's ~400x350, quality 75 to
 * 95, 4:2:0): each file's size, and the read rate of stoke_dataset_read on one thread
 * (so per core) at the output size, plus a RandomResizedCrop-like window read (the
 * middle 60% of each axis) for the two that decode.
 *
 *     stoke_bench_jpeg_records [IMAGES] [SECONDS_PER_MEASURE] [SIZE]
 *
 * Defaults: 400 images, 2 s, 224 (224x224 RGB). The files are written under $TMPDIR
 * (or /tmp) and removed at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../bench/jpeg_gen.h"
#include "data/dataset_impl.h"
#include "stoke/data.h"

static const int sizes[][2] = {{400, 350}, {500, 375}, {375, 500}, {333, 500},
                               {448, 336}, {350, 400}, {420, 315}, {512, 384}};
enum { NSIZES = sizeof sizes / sizeof *sizes };

static int out_size = 224;

static double elapsed(uint64_t t0) { return (double)(stoke_now_ns() - t0) / 1e9; }

static void window(void *ctx, int w, int h, stoke_image_window *win)
{
    (void)ctx;
    int x0 = w / 5, x1 = w * 4 / 5, y0 = h / 5, y1 = h * 4 / 5;
    win->x = (stoke_resize_axis){x0, x1, x0, x1, out_size, 0, out_size};
    win->y = (stoke_resize_axis){y0, y1, y0, y1, out_size, 0, out_size};
}

/* Samples read per second over `secs`, cycling through the dataset; windowed reads
 * through the dataset's read_window. */
static double rate(stoke_dataset *d, double secs, int windowed)
{
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    unsigned char *in = malloc(f->input_bytes);
    int64_t target, done = 0;
    uint64_t t0 = stoke_now_ns();
    while (elapsed(t0) < secs) {
        int64_t i = done % f->count;
        stoke_status s = windowed ? d->vt->read_window(d, i, window, NULL, in, &target)
                                  : stoke_dataset_read(d, i, in, &target);
        if (s != STOKE_OK) {
            fprintf(stderr, "read: %s\n", stoke_last_error());
            exit(1);
        }
        done++;
    }
    double r = (double)done / elapsed(t0);
    free(in);
    return r;
}

static long long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 400;
    double secs = argc > 2 ? atof(argv[2]) : 2.0;
    out_size = argc > 3 ? atoi(argv[3]) : 224;
    if (n < 1 || secs <= 0 || out_size < 1) {
        fprintf(stderr, "usage: stoke_bench_jpeg_records [IMAGES] [SECONDS] [SIZE]\n");
        return 2;
    }
    const char *t = getenv("TMPDIR");
    char dir[4096], cls[4200], p[4300], jrec[4200], prec[4200];
    snprintf(dir, sizeof dir, "%s/stoke-jrec-bench-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    snprintf(cls, sizeof cls, "%s/imgs/c", dir);
    snprintf(p, sizeof p, "%s/imgs", dir);
    mkdir(p, 0700);
    mkdir(cls, 0700);
    long long jpeg_bytes = 0;
    for (int k = 0; k < n; k++) {
        unsigned char *j = NULL;
        unsigned long len = 0;
        if (!jg_jpeg(sizes[k % NSIZES][0], sizes[k % NSIZES][1], 1000 + k, 75 + (k * 7) % 21, &j,
                     &len)) {
            fprintf(stderr, "encoding failed\n");
            return 1;
        }
        snprintf(p, sizeof p, "%s/%05d.jpg", cls, k);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(j, 1, len, f) != len) {
            perror(p);
            return 1;
        }
        fclose(f);
        jpeg_bytes += (long long)len;
        tjFree(j);
    }
    snprintf(p, sizeof p, "%s/imgs", dir);
    snprintf(jrec, sizeof jrec, "%s/j.rec", dir);
    snprintf(prec, sizeof prec, "%s/p.rec", dir);
    stoke_dataset_opts o = {.image_width = out_size, .image_height = out_size};
    stoke_dataset *folder = NULL, *j = NULL, *px = NULL;
    uint64_t t0 = stoke_now_ns();
    if (stoke_dataset_open(p, &o, &folder) != STOKE_OK ||
        stoke_records_write_as(folder, jrec, STOKE_STORE_JPEG, NULL, NULL) != STOKE_OK) {
        fprintf(stderr, "%s\n", stoke_last_error());
        return 1;
    }
    double conv_j = elapsed(t0);
    t0 = stoke_now_ns();
    if (stoke_records_write_as(folder, prec, STOKE_STORE_PIXELS, NULL, NULL) != STOKE_OK ||
        stoke_dataset_open(jrec, NULL, &j) != STOKE_OK ||
        stoke_dataset_open(prec, NULL, &px) != STOKE_OK) {
        fprintf(stderr, "%s\n", stoke_last_error());
        return 1;
    }
    double conv_p = elapsed(t0);
    printf("%d JPEGs of 333x500 to 512x384 (8 sizes), quality 75-95, 4:2:0, read at %dx%d; "
           "%.1f s per measure, 1 thread\n",
           n, out_size, out_size, secs);
    printf("%-26s %14s %12s %12s %14s\n", "", "file bytes", "bytes/img", "plain img/s",
           "window img/s");
    printf("%-26s %14lld %12.0f %12.0f %14.0f\n", "image folder (the JPEGs)", jpeg_bytes,
           (double)jpeg_bytes / n, rate(folder, secs, 0), rate(folder, secs, 1));
    printf("%-26s %14lld %12.0f %12.0f %14.0f\n", "records --store jpeg", file_size(jrec),
           (double)file_size(jrec) / n, rate(j, secs, 0), rate(j, secs, 1));
    printf("%-26s %14lld %12.0f %12.0f %14s\n", "records --store pixels", file_size(prec),
           (double)file_size(prec) / n, rate(px, secs, 0), "-");
    printf("convert: --store jpeg %.0f img/s (read + 1/8-scale check), --store pixels %.0f img/s "
           "(decode + resize)\n",
           n / conv_j, n / conv_p);
    printf("pixel records / jpeg records: %.2fx the bytes\n",
           (double)file_size(prec) / (double)file_size(jrec));
    stoke_dataset_close(folder);
    stoke_dataset_close(j);
    stoke_dataset_close(px);
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    return system(p) == 0 ? 0 : 1;
}
