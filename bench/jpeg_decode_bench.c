/* jpeg_decode_bench.c - the limit of an image loader on one core: TurboJPEG decoding
 * whole images (RGB, the accurate IDCT stoke's image folders use), with the files
 * already in memory, so no file reads, no resize, no transform. Every JPEG of an image
 * folder (FOLDER/<class>/<file>.jpg) is decoded in turn, for SECONDS at least, on one
 * thread. Prints "decode_images_per_s N", "decode_images N" and "decode_mean_kb N".
 *
 *     stoke_bench_decode FOLDER [SECONDS]
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <turbojpeg.h>

typedef struct jpg {
    unsigned char *data;
    unsigned long len;
} jpg;

static jpg *files;
static int nfiles, capfiles;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CPU this process used: the per-core rate on a machine shared with other jobs,
 * which take wall time but not this process's CPU seconds. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int add_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) || ftell(f) <= 0) {
        perror(path);
        return 0;
    }
    long len = ftell(f);
    rewind(f);
    if (nfiles == capfiles) {
        capfiles = capfiles ? 2 * capfiles : 256;
        files = realloc(files, (size_t)capfiles * sizeof *files);
    }
    jpg *j = &files[nfiles];
    j->data = malloc((size_t)len);
    j->len = (unsigned long)len;
    int ok = files && j->data && fread(j->data, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    if (!ok)
        return fprintf(stderr, "%s: cannot read\n", path), 0;
    nfiles++;
    return 1;
}

static int ends_with_jpg(const char *n)
{
    size_t l = strlen(n);
    return (l > 4 && !strcasecmp(n + l - 4, ".jpg")) || (l > 5 && !strcasecmp(n + l - 5, ".jpeg"));
}

/* Every JPEG one directory level down (the class folders). */
static int load_folder(const char *root)
{
    DIR *d = opendir(root);
    if (!d)
        return perror(root), 0;
    struct dirent *e;
    char sub[4096], path[8192];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof sub, "%s/%s", root, e->d_name);
        DIR *c = opendir(sub);
        if (!c)
            continue;
        struct dirent *f;
        while ((f = readdir(c)))
            if (ends_with_jpg(f->d_name)) {
                snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
                if (!add_file(path))
                    return closedir(c), closedir(d), 0;
            }
        closedir(c);
    }
    closedir(d);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s FOLDER [SECONDS]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? atof(argv[2]) : 5.0;
    if (!load_folder(argv[1]) || nfiles == 0) {
        fprintf(stderr, "%s: no JPEG files in class folders\n", argv[1]);
        return 1;
    }
    tjhandle tj = tjInitDecompress();
    unsigned char *px = NULL;
    size_t cap = 0;
    double bytes = 0;
    for (int i = 0; i < nfiles; i++)
        bytes += (double)files[i].len;
    long done = 0;
    double t0 = now(), c0 = cpu_now(), el;
    /* Whole passes over the folder, so every size is weighted as often as it occurs. */
    do {
        for (int i = 0; i < nfiles; i++, done++) {
            int w, h, sub, cs;
            if (tjDecompressHeader3(tj, files[i].data, files[i].len, &w, &h, &sub, &cs))
                return fprintf(stderr, "image %d: %s\n", i, tjGetErrorStr2(tj)), 1;
            if ((size_t)w * (size_t)h * 3 > cap) {
                cap = (size_t)w * (size_t)h * 3;
                free(px);
                px = malloc(cap);
            }
            if (!px || tjDecompress2(tj, files[i].data, files[i].len, px, w, 0, h, TJPF_RGB,
                                     TJFLAG_ACCURATEDCT))
                return fprintf(stderr, "image %d: %s\n", i, tjGetErrorStr2(tj)), 1;
        }
        el = now() - t0;
    } while (el < secs);
    double cpu = cpu_now() - c0;
    printf("decode_images %d\ndecode_mean_kb %.1f\ndecode_images_per_s %.1f\n"
           "decode_images_per_cpu_s %.1f\n",
           nfiles, bytes / nfiles / 1024, (double)done / el, cpu > 0 ? (double)done / cpu : 0.0);
    tjDestroy(tj);
    free(px);
    return 0;
}
