/* dataset.c - the dataset interface: recognising a file's format from its contents,
 * bounds-checked reads and class balance. */
#include "data/dataset_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/regular.h"
#include "data/util_impl.h"

/* ---- recognising a format ---------------------------------------------------------- */

#define HEAD_BYTES 16

/* What a sniffer sees: the path, whether it is a directory, and (for a file) its
 * first bytes. */
typedef struct sniff_input {
    const char *path;
    bool is_dir;
    const unsigned char *head;
    size_t n;
    const stoke_dataset_opts *opts;
} sniff_input;

static bool idx_magic(const unsigned char *h, size_t n)
{
    /* 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64; 1..9 dimensions. */
    return n >= 4 && h[0] == 0 && h[1] == 0 &&
           (h[2] == 0x08 || h[2] == 0x09 || (h[2] >= 0x0B && h[2] <= 0x0E)) && h[3] >= 1 &&
           h[3] <= STOKE_MAX_DIMS + 1;
}

/* gzip is claimed by IDX, the only compressed format stoke reads, so a damaged gzip
 * stream is reported by the IDX reader (with zlib's reason), not as "unrecognised". */
static bool sniff_idx_file(const sniff_input *in)
{
    return !in->is_dir && (idx_magic(in->head, in->n) ||
                           (in->n >= 2 && in->head[0] == 0x1f && in->head[1] == 0x8b));
}

static bool exists_with_gz(const char *dir, const char *name)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (stat(p, &st) == 0)
        return true;
    snprintf(p, sizeof p, "%s/%s.gz", dir, name);
    return stat(p, &st) == 0;
}

static bool sniff_idx_dir(const sniff_input *in)
{
    return in->is_dir && (exists_with_gz(in->path, "train-images-idx3-ubyte") ||
                          exists_with_gz(in->path, "t10k-images-idx3-ubyte"));
}

static bool sniff_npy(const sniff_input *in)
{
    return !in->is_dir && in->n >= 6 && memcmp(in->head, "\x93NUMPY", 6) == 0;
}

static bool sniff_records(const sniff_input *in)
{
    return !in->is_dir && in->n >= 8 && memcmp(in->head, "STOKEREC", 8) == 0;
}

static bool sniff_hdf5(const sniff_input *in) { return !in->is_dir && stoke_hdf5_sniff(in->path); }

static bool sniff_images(const sniff_input *in)
{
    return in->is_dir && stoke_images_sniff(in->path, in->opts);
}

/* The dispatch table: the first row whose sniffer says yes opens the path. */
static const struct format_row {
    const char *name;
    bool (*sniff)(const sniff_input *in);
    stoke_status (*open)(stoke_dataset *d, const char *path, const stoke_dataset_opts *o);
} formats[] = {
    {"idx", sniff_idx_file, stoke_idx_open}, {"idx", sniff_idx_dir, stoke_idx_open},
    {"npy", sniff_npy, stoke_npy_open},      {"records", sniff_records, stoke_records_open},
    {"hdf5", sniff_hdf5, stoke_hdf5_open},   {"images", sniff_images, stoke_images_open},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

stoke_status stoke_dataset_open(const char *path, const stoke_dataset_opts *opts,
                                stoke_dataset **out)
{
    if (!out)
        return stoke_fail(STOKE_ERR_ARG, "stoke_dataset_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return stoke_fail(STOKE_ERR_ARG, "stoke_dataset_open: no path");
    if (strlen(path) >= sizeof((stoke_dataset *)0)->path)
        return stoke_fail(STOKE_ERR_ARG, "%.64s...: path too long", path);
    stoke_dataset_opts none = {0};
    if (!opts)
        opts = &none;

    /* A directory or a regular file; anything else (a FIFO would hang the first read)
     * is refused by name before it is opened. */
    struct stat st;
    if (stat(path, &st) != 0)
        return stoke_fail(errno == ENOENT ? STOKE_ERR_NOTFOUND : STOKE_ERR_IO, "%s: %s", path,
                          strerror(errno));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return stoke_fail(STOKE_ERR_IO,
                          "%s: is %s: a dataset is a regular file or a "
                          "directory",
                          path, stoke_file_kind(st.st_mode));
    sniff_input in = {.path = path, .is_dir = S_ISDIR(st.st_mode), .opts = opts};
    unsigned char head[HEAD_BYTES];
    if (!in.is_dir) {
        int fd;
        stoke_status s = stoke_open_regular(path, &fd, NULL);
        if (s != STOKE_OK)
            return s;
        ssize_t n;
        do
            n = read(fd, head, sizeof head);
        while (n < 0 && errno == EINTR);
        int e = errno;
        close(fd);
        if (n < 0)
            return stoke_fail(STOKE_ERR_IO, "%s: cannot read: %s", path, strerror(e));
        in.head = head;
        in.n = (size_t)n;
    }

    for (size_t i = 0; i < N_FORMATS; i++) {
        if (!formats[i].sniff(&in))
            continue;
        stoke_dataset *d = calloc(1, sizeof *d);
        if (!d)
            return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
        snprintf(d->path, sizeof d->path, "%s", path);
        stoke_status s = formats[i].open(d, path, opts);
        if (s != STOKE_OK) {
            free(d);
            return s;
        }
        *out = d;
        return STOKE_OK;
    }
    if (in.is_dir)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: unrecognised directory: no train-images-idx3-ubyte[.gz] or "
                          "t10k-images-idx3-ubyte[.gz] (IDX) in it, and no subdirectories of "
                          ".jpg/.jpeg/.png files (image folder)",
                          path);
    char hex[3 * HEAD_BYTES + 1] = "";
    for (size_t i = 0; i < in.n && i < 8; i++)
        snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02x ", head[i]);
    if (in.n)
        hex[3 * (in.n < 8 ? in.n : 8) - 1] = '\0';
    return stoke_fail(STOKE_ERR_FORMAT,
                      "%s: unrecognised format (first bytes: %s); stoke reads IDX, NPY, "
                      "HDF5, image folders and stoke packed records (docs/formats.md)",
                      path, in.n ? hex : "none, the file is empty");
}

const char *stoke_target_kind_name(stoke_target_kind k)
{
    switch (k) {
    case STOKE_TARGET_NONE: return "none";
    case STOKE_TARGET_CLASS: return "class";
    case STOKE_TARGET_SCALAR: return "scalar";
    case STOKE_TARGET_VECTOR: return "vector";
    }
    return "?";
}

bool stoke_dataset_has_originals(const stoke_dataset *d) { return d && d->vt->read_window; }

const char *stoke_dataset_path(const stoke_dataset *d) { return d ? d->path : "(null)"; }

int64_t stoke_dataset_skipped(const stoke_dataset *d, const char **example)
{
    if (example)
        *example = NULL;
    return d && d->vt->skipped ? d->vt->skipped(d, example) : 0;
}

const stoke_dataset_info *stoke_dataset_get_info(const stoke_dataset *d)
{
    return d ? &d->info : NULL;
}

stoke_status stoke_dataset_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    if (!d || !input)
        return stoke_fail(STOKE_ERR_ARG, "stoke_dataset_read: %s is NULL", d ? "input" : "dataset");
    if (i < 0 || i >= d->info.count)
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: sample %" PRId64 " out of range (%" PRId64 " samples)", d->path, i,
                          d->info.count);
    if (d->info.target_kind == STOKE_TARGET_NONE)
        target = NULL;
    return d->vt->read(d, i, input, target);
}

void stoke_dataset_close(stoke_dataset *d)
{
    if (!d)
        return;
    if (d->vt && d->vt->close)
        d->vt->close(d);
    free(d);
}

stoke_status stoke_dataset_channel_stats(stoke_dataset *d, int64_t max_samples, int *channels,
                                         float mean[4], float std[4])
{
    const stoke_dataset_info *in = &d->info;
    const stoke_shape *sh = &in->input_shape;
    if (in->input_dtype != STOKE_U8 && in->input_dtype != STOKE_F32)
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: channel statistics of %s inputs (uint8 or float32 only)", d->path,
                          stoke_dtype_name(in->input_dtype));
    int C = 1;
    bool hwc = false;
    if (sh->ndim == 3) {
        int64_t last = sh->dims[2];
        hwc = last == 1 || last == 3 || last == 4;
        C = (int)(hwc ? last : sh->dims[0]);
    }
    if (C < 1 || C > 4)
        return stoke_fail(STOKE_ERR_ARG, "%s: channel statistics of %d channels (1 to 4)", d->path,
                          C);
    int64_t n = in->count < max_samples ? in->count : max_samples;
    int64_t stride = in->count / (n > 0 ? n : 1);
    unsigned char *buf = malloc(in->input_bytes ? in->input_bytes : 1);
    if (!buf)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    double sum[4] = {0}, sq[4] = {0};
    int64_t cnt[4] = {0};
    int64_t elems = stoke_shape_elems(sh);
    int64_t plane = elems / C;
    for (int64_t k = 0; k < n; k++) {
        stoke_status s = stoke_dataset_read(d, k * stride, buf, NULL);
        if (s != STOKE_OK) {
            free(buf);
            return s;
        }
        for (int64_t i = 0; i < elems; i++) {
            int c = C == 1 ? 0 : (int)(hwc ? i % C : i / plane);
            double v =
                in->input_dtype == STOKE_U8 ? buf[i] / 255.0 : ((const float *)(void *)buf)[i];
            sum[c] += v;
            sq[c] += v * v;
            cnt[c]++;
        }
    }
    free(buf);
    for (int c = 0; c < C; c++) {
        double m = cnt[c] ? sum[c] / (double)cnt[c] : 0;
        double var = cnt[c] ? sq[c] / (double)cnt[c] - m * m : 1;
        mean[c] = (float)m;
        std[c] = (float)(var > 1e-12 ? sqrt(var) : 1.0);
    }
    *channels = C;
    return STOKE_OK;
}

const char *stoke_dataset_class_name(const stoke_dataset *d, int64_t c)
{
    if (!d || !d->vt->class_name || c < 0 || c >= d->info.num_classes)
        return NULL;
    return d->vt->class_name(d, c);
}

stoke_status stoke_dataset_image_sizes(stoke_dataset *d, int64_t max_images, stoke_image_sizes *out)
{
    memset(out, 0, sizeof *out);
    if (!d || !d->vt->original_size)
        return stoke_fail(STOKE_ERR_ARG, "%s: is %s, not a dataset of image files",
                          d ? d->path : "(null)", d ? d->info.format : "missing");
    int64_t n = d->info.count;
    int64_t step = max_images > 0 && n > max_images ? n / max_images : 1;
    for (int64_t i = 0, k = 0; i < n && (max_images <= 0 || k < max_images); i += step, k++) {
        int w = 0, h = 0;
        stoke_status s = d->vt->original_size(d, i, &w, &h);
        if (s != STOKE_OK)
            return s;
        if (!out->read || w < out->min_width)
            out->min_width = w;
        if (!out->read || h < out->min_height)
            out->min_height = h;
        if (w > out->max_width)
            out->max_width = w;
        if (h > out->max_height)
            out->max_height = h;
        out->read++;
    }
    return STOKE_OK;
}

stoke_status stoke_dataset_class_counts(stoke_dataset *d, int64_t *counts)
{
    if (!d || !counts)
        return stoke_fail(STOKE_ERR_ARG, "stoke_dataset_class_counts: %s is NULL",
                          d ? "counts" : "dataset");
    const stoke_dataset_info *f = &d->info;
    if (f->target_kind != STOKE_TARGET_CLASS || f->num_classes <= 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: the targets are not class indices", d->path);
    memset(counts, 0, (size_t)f->num_classes * sizeof *counts);
    if (d->vt->class_counts)
        return d->vt->class_counts(d, counts);
    void *in = malloc(f->input_bytes ? f->input_bytes : 1);
    unsigned char tgt[16];
    if (!in || f->target_bytes > sizeof tgt) {
        free(in);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", d->path);
    }
    stoke_status s = STOKE_OK;
    for (int64_t i = 0; i < f->count && s == STOKE_OK; i++) {
        s = d->vt->read(d, i, in, tgt);
        int64_t c = 0;
        if (s == STOKE_OK && !stoke_class_of(tgt, f->target_dtype, f->num_classes, &c))
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: sample %" PRId64 ": class %g is not in "
                           "[0, %" PRId64 ")",
                           d->path, i, stoke_value_as_double(tgt, f->target_dtype), f->num_classes);
        if (s == STOKE_OK)
            counts[c]++;
    }
    free(in);
    return s;
}
