/* images.c - image folders: one subdirectory per class of JPEG and PNG files, decoded
 * (decode.c) on every read: resized to the folder's size, or the window a transform
 * draws on the original (RandomResizedCrop, the validation crop: read_window). */
#include "data/dataset_impl.h"
#include "core/regular.h"
#include "data/decode.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Class folders may hold images in nested folders, to this depth. */
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
    int64_t skipped;    /* entries the walk left out (img_skip) */
    char *skip_example; /* the first of them, "PATH: why" */
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

/* ---- The walk ---------------------------------------------------------------------- */
/* Symbolic links are followed only where they stay inside the class folder they are
 * in (resolved with realpath), and each file and folder is visited once, by device and
 * inode: a link to "." or ".." cannot multiply the samples, a link from b/ into a/
 * cannot give a's images class b's label, and nothing outside the dataset's root is
 * read. What is left out is counted, with one example (stoke_dataset_skipped). */

/* A set of (device, inode) pairs, open addressing; `value` keeps the first item that
 * had the key (a file's sample index, for messages). */
typedef struct img_set {
    struct img_key {
        uint64_t dev, ino;
        int64_t value; /* -1: empty slot */
    } * slots;
    size_t cap, n; /* cap: 0 or a power of two */
} img_set;

static size_t img_hash(uint64_t dev, uint64_t ino)
{
    uint64_t h = (ino ^ (dev * 0x9E3779B97F4A7C15ull)) * 0xD6E8FEB86659FD93ull;
    return (size_t)(h ^ (h >> 32));
}

/* Adds (dev, ino) with `value`: true if it was new; false with *first = the value it
 * had (or on out of memory, *first = -2). */
static bool img_set_add(img_set *s, const struct stat *st, int64_t value, int64_t *first)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t ncap = s->cap ? 2 * s->cap : 1024;
        struct img_key *ns = malloc(ncap * sizeof *ns);
        if (!ns) {
            *first = -2;
            return false;
        }
        for (size_t k = 0; k < ncap; k++)
            ns[k].value = -1;
        for (size_t k = 0; k < s->cap; k++) {
            if (s->slots[k].value == -1)
                continue;
            size_t j = img_hash(s->slots[k].dev, s->slots[k].ino) & (ncap - 1);
            while (ns[j].value != -1)
                j = (j + 1) & (ncap - 1);
            ns[j] = s->slots[k];
        }
        free(s->slots);
        s->slots = ns;
        s->cap = ncap;
    }
    uint64_t dev = (uint64_t)st->st_dev, ino = (uint64_t)st->st_ino;
    size_t j = img_hash(dev, ino) & (s->cap - 1);
    for (; s->slots[j].value != -1; j = (j + 1) & (s->cap - 1))
        if (s->slots[j].dev == dev && s->slots[j].ino == ino) {
            *first = s->slots[j].value;
            return false;
        }
    s->slots[j] = (struct img_key){dev, ino, value};
    s->n++;
    return true;
}

typedef struct img_walk {
    img_impl *im;
    const char *root_real; /* the dataset root, resolved */
    const char *class_real;
    img_set files, dirs;
} img_walk;

/* True if resolved path `p` is `base` or below it. */
static bool img_under(const char *p, const char *base)
{
    size_t n = strlen(base);
    if (n == 1 && base[0] == '/')
        return p[0] == '/';
    return strncmp(p, base, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

/* Counts `path` as left out, keeping the first one's reason. */
static stoke_status img_skip(img_impl *im, const char *path, const char *why, const char *what)
{
    im->skipped++;
    if (im->skip_example)
        return STOKE_OK;
    size_t n = strlen(path) + strlen(why) + (what ? strlen(what) : 0) + 8;
    im->skip_example = malloc(n);
    if (!im->skip_example)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    snprintf(im->skip_example, n, "%s: %s%s%s", path, why, what ? " " : "", what ? what : "");
    return STOKE_OK;
}

/* Where link `p` leads, if that is inside the class folder being walked: its resolved
 * path in *real (free it); NULL in *real and the link counted as skipped otherwise. */
static stoke_status img_follow(img_walk *w, const char *p, char **real)
{
    *real = realpath(p, NULL);
    if (!*real)
        return img_skip(w->im, p, "a symbolic link that leads nowhere:", strerror(errno));
    if (img_under(*real, w->class_real))
        return STOKE_OK;
    const char *why = img_under(*real, w->root_real) ? "a symbolic link out of its class folder, to"
                                                     : "a symbolic link out of the dataset, to";
    stoke_status st = img_skip(w->im, p, why, *real);
    free(*real);
    *real = NULL;
    return st;
}

static stoke_status img_add(img_impl *im, char *p, int64_t label)
{
    if (im->n == im->cap) {
        int64_t ncap = im->cap ? im->cap * 2 : 256;
        img_entry *ni = realloc(im->items, (size_t)ncap * sizeof *ni);
        if (!ni)
            return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", p);
        im->items = ni;
        im->cap = ncap;
    }
    im->items[im->n].path = p;
    im->items[im->n].label = label;
    im->n++;
    return STOKE_OK;
}

/* One entry of a class folder: an image file (pass 0) or a folder to walk (pass 1).
 * `p` is its path as walked (kept for an image), `real` its resolved folder's path. */
static stoke_status img_scan_class(img_walk *w, const char *dir, const char *real, int64_t label,
                                   int depth);

static stoke_status img_scan_entry(img_walk *w, char *p, const char *dir_real, const char *name,
                                   int pass, int64_t label, int depth, bool *kept)
{
    *kept = false;
    struct stat st;
    if (lstat(p, &st) != 0)
        return STOKE_OK; /* gone since the listing */
    bool image = img_has_ext(name);
    char *real = NULL;
    if (S_ISLNK(st.st_mode)) {
        struct stat to;
        bool ok = stat(p, &to) == 0;
        if (ok && !(pass == 0 ? image && S_ISREG(to.st_mode) : S_ISDIR(to.st_mode)))
            return STOKE_OK; /* the other pass's, or neither an image nor a folder */
        if (!ok && (pass == 1 || !image))
            return STOKE_OK; /* a broken link is reported once, by the image pass */
        stoke_status s = img_follow(w, p, &real);
        if (s != STOKE_OK || !real)
            return s;
        st = to;
    } else if (pass == 0 ? !(image && S_ISREG(st.st_mode)) : !S_ISDIR(st.st_mode)) {
        return STOKE_OK;
    }
    stoke_status s = STOKE_OK;
    int64_t first;
    if (pass == 0) {
        if (img_set_add(&w->files, &st, w->im->n, &first)) {
            s = img_add(w->im, p, label);
            *kept = s == STOKE_OK;
        } else if (first == -2) {
            s = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", p);
        } else {
            s = img_skip(w->im, p, "the same file as sample", NULL);
            if (s == STOKE_OK && w->im->skipped == 1) { /* the example: name the sample */
                char *e = w->im->skip_example;
                size_t n = strlen(e) + strlen(w->im->items[first].path) + 32;
                char *x = malloc(n);
                if (x) {
                    snprintf(x, n, "%s %" PRId64 ", %s", e, first, w->im->items[first].path);
                    free(e);
                    w->im->skip_example = x;
                }
            }
        }
    } else if (depth >= IMG_MAX_DEPTH) {
        s = img_skip(w->im, p, "a folder deeper than 8 levels below its class folder", NULL);
    } else if (!img_set_add(&w->dirs, &st, 0, &first)) {
        s = first == -2 ? stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", p)
                        : img_skip(w->im, p,
                                   "a folder walked already (a symbolic link loop, or a second "
                                   "link to it)",
                                   NULL);
    } else {
        char *sub = real ? real : img_join(dir_real, name);
        s = sub ? img_scan_class(w, p, sub, label, depth + 1)
                : stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", p);
        if (sub != real)
            free(sub);
    }
    free(real);
    return s;
}

/* Adds the images of one class folder: its files in name order, then its subfolders'
 * (in name order, recursively). */
static stoke_status img_scan_class(img_walk *w, const char *dir, const char *real, int64_t label,
                                   int depth)
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
            bool kept;
            st = img_scan_entry(w, p, real, names[k], pass, label, depth, &kept);
            if (!kept)
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
    free(im->skip_example);
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

static int64_t img_skipped(const stoke_dataset *d, const char **example)
{
    const img_impl *im = d->impl;
    if (example)
        *example = im->skip_example;
    return im->skipped;
}

static const stoke_dataset_vt img_vt = {.read = img_read,
                                        .skipped = img_skipped,
                                        .read_window = img_read_window,
                                        .close = img_close,
                                        .class_counts = img_class_counts,
                                        .class_name = img_class_name,
                                        .original_size = img_original_size};

/* The class folders are the root's subfolders; a symbolic link among them is left out
 * (it leads out of the dataset, or to images another folder holds). */
static stoke_status img_open_root(stoke_dataset *d, img_impl *im, const char *root)
{
    if (!img_is_dir(root))
        return stoke_fail(STOKE_ERR_NOTFOUND, "%s: not a directory", root);
    img_walk w = {.im = im};
    char *root_real = realpath(root, NULL);
    if (!root_real)
        return stoke_fail(STOKE_ERR_IO, "%s: %s", root, strerror(errno));
    w.root_real = root_real;
    char **names;
    size_t n;
    stoke_status st = img_list_dir(root, &names, &n);
    if (st != STOKE_OK) {
        free(root_real);
        return st;
    }
    struct stat rs;
    int64_t first;
    if (stat(root, &rs) == 0 && !img_set_add(&w.dirs, &rs, 0, &first) && first == -2)
        st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", root);
    int64_t classes = 0;
    for (size_t k = 0; k < n && st == STOKE_OK; k++) {
        char *p = img_join(root, names[k]);
        if (!p) {
            st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", root);
            break;
        }
        struct stat ls, cs;
        if (lstat(p, &ls) == 0 && stat(p, &cs) == 0 && S_ISDIR(cs.st_mode)) {
            if (S_ISLNK(ls.st_mode)) {
                /* inside the root it leads to another class's images (or to the root),
                 * outside it out of the dataset: neither is a class of its own */
                char *real = realpath(p, NULL);
                st = img_skip(im, p,
                              real && img_under(real, root_real)
                                  ? "a symbolic link to a folder of the dataset, not a class "
                                    "folder of its own:"
                                  : "a symbolic link out of the dataset, to",
                              real ? real : strerror(errno));
                free(real);
            } else {
                /* a root of "/" is joined without a second slash */
                char *real = img_join(strcmp(root_real, "/") ? root_real : "", names[k]);
                if (!real || (!img_set_add(&w.dirs, &cs, 0, &first) && first == -2))
                    st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", p);
                w.class_real = real;
                if (st == STOKE_OK)
                    st = img_scan_class(&w, p, real, classes, 0);
                free(real);
                /* the class keeps its folder's name: names[] is compacted in place */
                char *name = names[k];
                names[k] = names[classes];
                names[classes++] = name;
            }
        }
        free(p);
    }
    free(w.files.slots);
    free(w.dirs.slots);
    free(root_real);
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
    stoke_status st = img_open_root(d, im, root);
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
