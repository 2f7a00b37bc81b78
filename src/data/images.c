/* images.c - image folders: one subdirectory per class of JPEG (TurboJPEG) and PNG
 * (libpng) files, decoded and resized to one size on every read. RandomResizedCrop runs
 * on that image in the transforms, not here on the original (transform.c says why). */
#include "data/dataset_impl.h"
#include "core/regular.h"
#include "data/resize.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

/* Larger images are refused before decoding (Pillow's decompression-bomb limit): a
 * corrupt header must not make a read allocate gigabytes. */
#define IMG_MAX_PIXELS 178956970LL
/* A file larger than this is not an image stoke will read whole into memory. */
#define IMG_MAX_FILE_BYTES ((off_t)1 << 30)
/* Class folders may hold images in nested folders; this bounds symlink loops. */
#define IMG_MAX_DEPTH 8

typedef struct img_entry {
    char *path;
    int64_t label;
} img_entry;

typedef struct img_impl {
    img_entry *items;
    int64_t n, cap;
    int height, width, channels;
} img_impl;

static bool img_has_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 ||
                   strcasecmp(dot, ".png") == 0);
}

static int img_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void img_names_free(char **names, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(names[k]);
    free(names);
}

/* The visible entries of `dir`, sorted by byte order (so the order, and the class
 * indices, are the same on every machine and filesystem). */
static stoke_status img_list_dir(const char *dir, char ***out, size_t *count)
{
    *out = NULL;
    *count = 0;
    DIR *dp = opendir(dir);
    if (!dp)
        return stoke_fail(errno == ENOENT ? STOKE_ERR_NOTFOUND : STOKE_ERR_IO, "%s: %s", dir,
                          strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.') /* ".", "..", and hidden files such as .DS_Store */
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = realloc(names, ncap * sizeof *nn);
            if (!nn)
                goto nomem;
            names = nn;
            cap = ncap;
        }
        if (!(names[n] = strdup(e->d_name)))
            goto nomem;
        n++;
    }
    closedir(dp);
    if (n)
        qsort(names, n, sizeof *names, img_name_cmp);
    *out = names;
    *count = n;
    return STOKE_OK;
nomem:
    closedir(dp);
    img_names_free(names, n);
    return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory listing the directory", dir);
}

static char *img_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (s) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    }
    return s;
}

static bool img_is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool img_is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Adds the images of one class folder: its files in name order, then its subfolders'
 * (in name order, recursively). */
static stoke_status img_scan_class(img_impl *im, const char *dir, int64_t label, int depth)
{
    char **names;
    size_t n;
    stoke_status st = img_list_dir(dir, &names, &n);
    if (st != STOKE_OK)
        return st;
    for (int pass = 0; pass < 2 && st == STOKE_OK; pass++) {
        for (size_t k = 0; k < n && st == STOKE_OK; k++) {
            char *p = img_join(dir, names[k]);
            if (!p) {
                st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", dir);
                break;
            }
            if (pass == 0 && img_has_ext(names[k]) && img_is_file(p)) {
                if (im->n == im->cap) {
                    int64_t ncap = im->cap ? im->cap * 2 : 256;
                    img_entry *ni = realloc(im->items, (size_t)ncap * sizeof *ni);
                    if (!ni) {
                        free(p);
                        st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", dir);
                        break;
                    }
                    im->items = ni;
                    im->cap = ncap;
                }
                im->items[im->n].path = p;
                im->items[im->n].label = label;
                im->n++;
                continue;
            }
            if (pass == 1 && depth < IMG_MAX_DEPTH && img_is_dir(p))
                st = img_scan_class(im, p, label, depth + 1);
            free(p);
        }
    }
    img_names_free(names, n);
    return st;
}

/* True if `dir` or a folder below it (to `depth` levels) holds an image file. */
static bool img_dir_has_image(const char *dir, int depth)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = img_join(dir, e->d_name);
        if (!p)
            break;
        if (img_has_ext(e->d_name) && img_is_file(p))
            found = true;
        else if (depth > 0 && img_is_dir(p))
            found = img_dir_has_image(p, depth - 1);
        free(p);
    }
    closedir(dp);
    return found;
}

/* The folder whose subfolders are the classes: PATH, or PATH/split. */
static char *img_root(const char *path, const stoke_dataset_opts *o)
{
    if (o && o->split && o->split[0])
        return img_join(path, o->split);
    return strdup(path);
}

bool stoke_images_sniff(const char *path, const stoke_dataset_opts *o)
{
    char *root = img_root(path, o);
    if (!root)
        return false;
    char **names;
    size_t n;
    bool found = false;
    if (img_is_dir(root) && img_list_dir(root, &names, &n) == STOKE_OK) {
        for (size_t k = 0; k < n && !found; k++) {
            char *p = img_join(root, names[k]);
            if (p && img_is_dir(p))
                found = img_dir_has_image(p, 2);
            free(p);
        }
        img_names_free(names, n);
    }
    free(root);
    return found;
}

/* ---- Decoding ---------------------------------------------------------------------- */

/* A decoded image: 8-bit, `c` interleaved channels, rows packed. */
typedef struct img_pixels {
    unsigned char *data;
    int w, h, c;
} img_pixels;

static stoke_status img_load_file(const char *path, int64_t i, unsigned char **buf, size_t *len)
{
    int fd;
    struct stat st;
    stoke_status os = stoke_open_regular(path, &fd, &st);
    if (os != STOKE_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        return stoke_fail(os, "%s (sample %lld)", why, (long long)i);
    }
    if (st.st_size > IMG_MAX_FILE_BYTES) {
        close(fd);
        return stoke_fail(STOKE_ERR_IO, "%s (sample %lld): larger than 1 GiB", path, (long long)i);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *b = malloc(size ? size : 1);
    if (!b) {
        close(fd);
        return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory", path, (long long)i);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int err = errno;
            free(b);
            close(fd);
            return stoke_fail(STOKE_ERR_IO, "%s (sample %lld): read failed at offset %zu: %s", path,
                              (long long)i, got, r < 0 ? strerror(err) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = size;
    return STOKE_OK;
}

static stoke_status img_check_size(const char *path, int64_t i, long long w, long long h)
{
    if (w <= 0 || h <= 0 || w * h > IMG_MAX_PIXELS)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s (sample %lld): image size %lldx%lld is invalid or above "
                          "the %lld-pixel limit",
                          path, (long long)i, w, h, IMG_MAX_PIXELS);
    return STOKE_OK;
}

int stoke_images_jpeg_denom(int w, int h, int ow, int oh)
{
    for (int denom = 8; denom > 1; denom /= 2) {
        tjscalingfactor sf = {1, denom};
        if (TJSCALED(w, sf) >= ow && TJSCALED(h, sf) >= oh)
            return denom;
    }
    return 1;
}

/* JPEG through TurboJPEG. Where the image is at least twice the target size, the
 * decoder's DCT scaling does most of the shrinking for far less work; the resampler
 * does the rest. Only 1/2, 1/4 and 1/8 (as Pillow's draft mode): libjpeg-turbo's other
 * factors (3/8, 5/8, 3/4, 7/8) run scalar IDCTs and decode slower than the whole image
 * (bench/resize_bench.c, docs/loader.md). Warnings (a truncated file, corrupt entropy
 * data) are errors: the decoder would otherwise hand back gray filler. */
static stoke_status img_decode_jpeg(const char *path, int64_t i, const unsigned char *buf,
                                    size_t len, int ow, int oh, int c, img_pixels *px)
{
    tjhandle tj = tjInitDecompress(); /* one per call: handles are not thread-safe */
    if (!tj)
        return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): cannot start the JPEG decoder: %s",
                          path, (long long)i, tjGetErrorStr2(NULL));
    stoke_status st = STOKE_OK;
    int w, h, subsamp, cs;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &subsamp, &cs) != 0) {
        st = stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): bad JPEG header: %s", path,
                        (long long)i, tjGetErrorStr2(tj));
        goto done;
    }
    if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
        st = stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): CMYK JPEG images are not supported",
                        path, (long long)i);
        goto done;
    }
    if ((st = img_check_size(path, i, w, h)) != STOKE_OK)
        goto done;
    tjscalingfactor best = {1, stoke_images_jpeg_denom(w, h, ow, oh)};
    px->w = TJSCALED(w, best);
    px->h = TJSCALED(h, best);
    px->c = c;
    px->data = malloc((size_t)px->w * (size_t)px->h * (size_t)c);
    if (!px->data) {
        st = stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory", path, (long long)i);
        goto done;
    }
    if (tjDecompress2(tj, buf, (unsigned long)len, px->data, px->w, 0, px->h,
                      c == 3 ? TJPF_RGB : TJPF_GRAY, TJFLAG_ACCURATEDCT) != 0) {
        st = stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): corrupt JPEG: %s", path, (long long)i,
                        tjGetErrorStr2(tj));
        free(px->data);
        px->data = NULL;
    }
done:
    tjDestroy(tj);
    return st;
}

/* libpng reports errors by longjmp: everything that must survive one lives here,
 * behind a pointer, so no local variable is clobbered. */
typedef struct img_png_job {
    const unsigned char *buf;
    size_t len, pos;
    int want_c;
    char err[200];
    png_bytep *rows;
    img_pixels px;
} img_png_job;

static void img_png_error(png_structp p, png_const_charp msg)
{
    img_png_job *j = png_get_error_ptr(p);
    snprintf(j->err, sizeof j->err, "%s", msg);
    png_longjmp(p, 1);
}

static void img_png_warning(png_structp p, png_const_charp msg)
{
    (void)p; /* warnings are about ancillary chunks: the pixels are fine; never print */
    (void)msg;
}

static void img_png_read(png_structp p, png_bytep out, size_t n)
{
    img_png_job *j = png_get_io_ptr(p);
    if (n > j->len - j->pos)
        png_error(p, "file is truncated");
    memcpy(out, j->buf + j->pos, n);
    j->pos += n;
}

/* Decodes to 8 bits and 1 (gray) or 3 (RGB) channels, whatever is stored: palettes and
 * low bit depths expanded, 16-bit samples keep their high byte (as Pillow does for
 * 16-bit RGB), alpha dropped (as Pillow's convert("RGB") does). An RGB image asked for
 * in gray comes back with 3 channels; the caller converts it. */
static bool img_png_run(png_structp p, png_infop info, img_png_job *j)
{
    if (setjmp(png_jmpbuf(p)))
        return false;
    png_set_read_fn(p, j, img_png_read);
    png_read_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    int depth = png_get_bit_depth(p, info), type = png_get_color_type(p, info);
    if ((long long)w * h > IMG_MAX_PIXELS) {
        snprintf(j->err, sizeof j->err, "image size %ux%u is above the %lld-pixel limit",
                 (unsigned)w, (unsigned)h, IMG_MAX_PIXELS);
        return false;
    }
    png_set_expand(p);
    if (depth == 16)
        png_set_strip_16(p);
    png_set_strip_alpha(p);
    bool color = (type & PNG_COLOR_MASK_COLOR) != 0;
    if (!color && j->want_c == 3)
        png_set_gray_to_rgb(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    int c = png_get_channels(p, info);
    size_t rowbytes = png_get_rowbytes(p, info);
    if ((c != 1 && c != 3) || rowbytes != (size_t)w * (size_t)c) {
        snprintf(j->err, sizeof j->err, "unexpected layout after conversion (%d channels)", c);
        return false;
    }
    j->px.w = (int)w;
    j->px.h = (int)h;
    j->px.c = c;
    j->px.data = malloc(rowbytes * h);
    j->rows = malloc(sizeof *j->rows * h);
    if (!j->px.data || !j->rows) {
        snprintf(j->err, sizeof j->err, "out of memory");
        return false;
    }
    for (png_uint_32 y = 0; y < h; y++)
        j->rows[y] = j->px.data + (size_t)y * rowbytes;
    png_read_image(p, j->rows);
    png_read_end(p, NULL); /* checks the CRCs of the chunks after the image data */
    return true;
}

static stoke_status img_decode_png(const char *path, int64_t i, const unsigned char *buf,
                                   size_t len, int c, img_pixels *px)
{
    img_png_job j = {.buf = buf, .len = len, .want_c = c};
    png_structp p =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, img_png_error, img_png_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!p || !info) {
        png_destroy_read_struct(p ? &p : NULL, NULL, NULL);
        return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): cannot start the PNG decoder", path,
                          (long long)i);
    }
    bool ok = img_png_run(p, info, &j);
    png_destroy_read_struct(&p, &info, NULL);
    free(j.rows);
    if (!ok) {
        free(j.px.data);
        return stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): corrupt PNG: %s", path, (long long)i,
                          j.err);
    }
    *px = j.px;
    return STOKE_OK;
}

/* RGB to gray in place with Pillow's convert("L") arithmetic (ITU-R 601-2 luma in 16.16
 * fixed point), so a gray dataset matches what a Pillow pipeline sees; libpng's own
 * conversion uses other coefficients. */
static void img_rgb_to_gray(img_pixels *px)
{
    size_t n = (size_t)px->w * (size_t)px->h;
    unsigned char *d = px->data;
    for (size_t k = 0; k < n; k++) {
        const unsigned char *s = d + 3 * k;
        d[k] = (unsigned char)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
    }
    px->c = 1;
}

/* ---- The dataset ------------------------------------------------------------------- */

static stoke_status img_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    img_impl *im = d->impl;
    const char *path = im->items[i].path;
    if (target)
        memcpy(target, &im->items[i].label, sizeof(int64_t));
    unsigned char *buf = NULL;
    size_t len = 0;
    stoke_status st = img_load_file(path, i, &buf, &len);
    if (st != STOKE_OK)
        return st;
    img_pixels px = {0};
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 8 && memcmp(buf, png_sig, 8) == 0)
        st = img_decode_png(path, i, buf, len, im->channels, &px);
    else if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF)
        st = img_decode_jpeg(path, i, buf, len, im->width, im->height, im->channels, &px);
    else
        st = stoke_fail(STOKE_ERR_FORMAT,
                        "%s (sample %lld): not a JPEG or PNG file (%zu bytes, no "
                        "JPEG or PNG signature)",
                        path, (long long)i, len);
    free(buf);
    if (st != STOKE_OK)
        return st;
    if (px.c == 3 && im->channels == 1)
        img_rgb_to_gray(&px);
    if (px.w == im->width && px.h == im->height)
        memcpy(input, px.data, d->info.input_bytes);
    else if (!stoke_resize_u8(px.data, px.w, px.h, input, im->width, im->height, im->channels))
        st = stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory resizing", path,
                        (long long)i);
    free(px.data);
    return st;
}

static void img_free(img_impl *im)
{
    if (!im)
        return;
    for (int64_t k = 0; k < im->n; k++)
        free(im->items[k].path);
    free(im->items);
    free(im);
}

static void img_close(stoke_dataset *d)
{
    img_free(d->impl);
    d->impl = NULL;
}

/* Labels are known from the folders: no image is decoded to count them. */
static stoke_status img_class_counts(stoke_dataset *d, int64_t *counts)
{
    img_impl *im = d->impl;
    memset(counts, 0, sizeof *counts * (size_t)d->info.num_classes);
    for (int64_t k = 0; k < im->n; k++)
        counts[im->items[k].label]++;
    return STOKE_OK;
}

static const stoke_dataset_vt img_vt = {
    .read = img_read, .close = img_close, .class_counts = img_class_counts};

static stoke_status img_open_root(stoke_dataset *d, img_impl *im, const char *path,
                                  const char *root)
{
    if (!img_is_dir(root))
        return stoke_fail(STOKE_ERR_NOTFOUND, "%s: not a directory", root);
    char **names;
    size_t n;
    stoke_status st = img_list_dir(root, &names, &n);
    if (st != STOKE_OK)
        return st;
    int64_t classes = 0;
    for (size_t k = 0; k < n && st == STOKE_OK; k++) {
        char *p = img_join(root, names[k]);
        if (!p) {
            st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", root);
            break;
        }
        if (img_is_dir(p))
            st = img_scan_class(im, p, classes++, 0);
        free(p);
    }
    img_names_free(names, n);
    if (st != STOKE_OK)
        return st;
    if (classes == 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: no class subdirectories (an image folder has one "
                          "subdirectory of .jpg/.jpeg/.png files per class)",
                          root);
    if (im->n == 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: no .jpg, .jpeg or .png images in its %lld class "
                          "subdirectories",
                          root, (long long)classes);
    (void)path;
    d->info.count = im->n;
    d->info.num_classes = classes;
    return STOKE_OK;
}

stoke_status stoke_images_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o)
{
    int h = o && o->image_height ? o->image_height : 224;
    int w = o && o->image_width ? o->image_width : 224;
    int c = o && o->image_channels ? o->image_channels : 3;
    if (h < 1 || w < 1 || h > 16384 || w > 16384)
        return stoke_fail(STOKE_ERR_ARG, "%s: image size %dx%d is out of range (1 to 16384)", path,
                          h, w);
    if (c != 1 && c != 3)
        return stoke_fail(STOKE_ERR_ARG, "%s: image channels must be 1 or 3, not %d", path, c);
    img_impl *im = calloc(1, sizeof *im);
    char *root = img_root(path, o);
    if (!im || !root) {
        free(im);
        free(root);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    }
    im->height = h;
    im->width = w;
    im->channels = c;
    if (d->path[0] == '\0')
        snprintf(d->path, sizeof d->path, "%s", path);
    memset(&d->info, 0, sizeof d->info);
    snprintf(d->info.format, sizeof d->info.format, "images");
    stoke_status st = img_open_root(d, im, path, root);
    free(root);
    if (st != STOKE_OK) {
        img_free(im);
        return st;
    }
    stoke_dataset_info *info = &d->info;
    info->input_shape.ndim = 3;
    info->input_shape.dims[0] = h;
    info->input_shape.dims[1] = w;
    info->input_shape.dims[2] = c;
    info->input_dtype = STOKE_U8;
    info->input_bytes = (size_t)h * (size_t)w * (size_t)c;
    info->target_kind = STOKE_TARGET_CLASS;
    info->target_shape.ndim = 0;
    info->target_dtype = STOKE_I64;
    info->target_bytes = sizeof(int64_t);
    d->vt = &img_vt;
    d->impl = im;
    return STOKE_OK;
}
