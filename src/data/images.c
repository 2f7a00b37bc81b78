/* images.c - image folders: one subdirectory per class of JPEG and PNG files, decoded
 * (decode.c) on every read: resized to the folder's size, or the window a transform
 * draws on the original (RandomResizedCrop, the validation crop: read_window). */
#include "data/dataset_impl.h"
#include "core/regular.h"
#include "data/decode.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

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
    char **class_names; /* the class folders' names, by class index */
    size_t nclasses;
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

/* ---- The dataset ------------------------------------------------------------------- */

static stoke_status img_read_window(stoke_dataset *d, int64_t i, stoke_image_window_fn fn,
                                    void *ctx, void *input, void *target)
{
    img_impl *im = d->impl;
    const char *path = im->items[i].path;
    if (target)
        memcpy(target, &im->items[i].label, sizeof(int64_t));
    unsigned char *buf = NULL;
    size_t len = 0;
    stoke_status st = stoke_image_load_file(path, i, &buf, &len);
    if (st == STOKE_OK)
        st = stoke_image_decode(path, i, buf, len, im->channels, fn, ctx, input);
    free(buf);
    return st;
}

static stoke_status img_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    img_impl *im = d->impl;
    int size[2] = {im->width, im->height};
    return img_read_window(d, i, stoke_image_window_fit, size, input, target);
}

static const stoke_dataset_vt img_vt;

stoke_status stoke_images_raw(stoke_dataset *d, int64_t i, void *target, unsigned char **buf,
                              size_t *len, const char **path, int *channels)
{
    if (!d || d->vt != &img_vt)
        return stoke_fail(STOKE_ERR_ARG, "%s: is %s, not an image folder", d ? d->path : "(null)",
                          d ? d->info.format : "missing");
    img_impl *im = d->impl;
    if (target)
        memcpy(target, &im->items[i].label, sizeof(int64_t));
    *path = im->items[i].path;
    *channels = im->channels;
    return stoke_image_load_file(im->items[i].path, i, buf, len);
}

static void img_free(img_impl *im)
{
    if (!im)
        return;
    for (int64_t k = 0; k < im->n; k++)
        free(im->items[k].path);
    free(im->items);
    img_names_free(im->class_names, im->nclasses);
    free(im);
}

static const char *img_class_name(const stoke_dataset *d, int64_t c)
{
    const img_impl *im = d->impl;
    return c >= 0 && (size_t)c < im->nclasses ? im->class_names[c] : NULL;
}

/* The header alone is read: sizes of a large folder come at the cost of its file reads. */
static stoke_status img_original_size(stoke_dataset *d, int64_t i, int *w, int *h)
{
    img_impl *im = d->impl;
    unsigned char *buf = NULL;
    size_t len = 0;
    stoke_status st = stoke_image_load_file(im->items[i].path, i, &buf, &len);
    if (st == STOKE_OK)
        st = stoke_image_size(im->items[i].path, i, buf, len, w, h);
    free(buf);
    return st;
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

static const stoke_dataset_vt img_vt = {.read = img_read,
                                        .read_window = img_read_window,
                                        .close = img_close,
                                        .class_counts = img_class_counts,
                                        .class_name = img_class_name,
                                        .original_size = img_original_size};

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
        if (img_is_dir(p)) {
            st = img_scan_class(im, p, classes, 0);
            /* the class keeps its folder's name: names[] is compacted in place */
            char *name = names[k];
            names[k] = names[classes];
            names[classes++] = name;
        }
        free(p);
    }
    im->class_names = names;
    im->nclasses = (size_t)classes;
    /* the names that are not classes (files beside the folders) are freed now */
    for (size_t k = (size_t)classes; k < n; k++)
        free(names[k]);
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
