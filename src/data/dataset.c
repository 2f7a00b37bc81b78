/* dataset.c - the dataset interface: dtypes and shapes, recognising a file's format
 * from its contents, bounds-checked reads, class balance, and the helpers the file
 * readers share (util_impl.h). */
#include "data/dataset_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/regular.h"
#include "data/util_impl.h"

/* ---- dtypes and shapes ----------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[STOKE_DTYPE_COUNT] = {
    [STOKE_U8] = {"uint8", 1},     [STOKE_I8] = {"int8", 1},
    [STOKE_U16] = {"uint16", 2},   [STOKE_I16] = {"int16", 2},
    [STOKE_U32] = {"uint32", 4},   [STOKE_I32] = {"int32", 4},
    [STOKE_I64] = {"int64", 8},    [STOKE_F16] = {"float16", 2},
    [STOKE_BF16] = {"bfloat16", 2}, [STOKE_F32] = {"float32", 4},
    [STOKE_F64] = {"float64", 8},
};

size_t stoke_dtype_size(stoke_dtype t)
{
    return (unsigned)t < STOKE_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *stoke_dtype_name(stoke_dtype t)
{
    return (unsigned)t < STOKE_DTYPE_COUNT ? dtypes[t].name : "?";
}

int64_t stoke_shape_elems(const stoke_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim && i < STOKE_MAX_DIMS; i++)
        n *= s->dims[i];
    return n;
}

char *stoke_shape_format(const stoke_shape *s, char *buf, size_t size)
{
    if (size == 0)
        return buf;
    size_t len = 0;
    buf[0] = '\0';
    int nd = s->ndim < 0 ? 0 : s->ndim > STOKE_MAX_DIMS ? STOKE_MAX_DIMS : s->ndim;
    len += (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < nd && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "",
                                s->dims[i]);
    /* Python's spelling, which the people reading it know: (5,) is one dimension. */
    if (len < size)
        snprintf(buf + len, size - len, nd == 1 ? ",)" : ")");
    return buf;
}

/* ---- helpers shared by the readers (util_impl.h) ---------------------------------- */

stoke_status stoke_map_file(const char *path, stoke_mapped *m)
{
    m->data = NULL;
    m->size = 0;
    int fd;
    struct stat st;
    stoke_status s = stoke_open_regular(path, &fd, &st);
    if (s != STOKE_OK)
        return s;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return stoke_fail(STOKE_ERR_IO, "%s: cannot map %lld bytes: %s", path,
                              (long long)st.st_size, strerror(e));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return STOKE_OK;
}

void stoke_unmap_file(stoke_mapped *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

void stoke_copy_swapped(void *dst, const void *src, size_t n, size_t elem_size, bool swap)
{
    if (!swap || elem_size == 1) {
        memcpy(dst, src, n * elem_size);
        return;
    }
    unsigned char *d = dst;
    const unsigned char *s = src;
    switch (elem_size) {
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, s + 2 * i, 2);
            v = __builtin_bswap16(v);
            memcpy(d + 2 * i, &v, 2);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, s + 4 * i, 4);
            v = __builtin_bswap32(v);
            memcpy(d + 4 * i, &v, 4);
        }
        break;
    case 8:
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, s + 8 * i, 8);
            v = __builtin_bswap64(v);
            memcpy(d + 8 * i, &v, 8);
        }
        break;
    default:
        for (size_t i = 0; i < n; i++)
            for (size_t b = 0; b < elem_size; b++)
                d[i * elem_size + b] = s[i * elem_size + elem_size - 1 - b];
    }
}

/* IEEE half to double, by hand: C11 has no portable _Float16. */
static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    double m = h & 0x3ff;
    double v = e == 0    ? ldexp(m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

double stoke_value_as_double(const void *p, stoke_dtype t)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        int64_t i64;
        float f32;
        double f64;
    } v;
    size_t n = stoke_dtype_size(t);
    if (!n)
        return NAN;
    memcpy(&v, p, n);
    switch (t) {
    case STOKE_U8: return v.u8;
    case STOKE_I8: return v.i8;
    case STOKE_U16: return v.u16;
    case STOKE_I16: return v.i16;
    case STOKE_U32: return v.u32;
    case STOKE_I32: return v.i32;
    case STOKE_I64: return (double)v.i64;
    case STOKE_F16: return half_to_double(v.u16);
    case STOKE_BF16: {
        uint32_t bits = (uint32_t)v.u16 << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    case STOKE_F32: return v.f32;
    case STOKE_F64: return v.f64;
    case STOKE_DTYPE_COUNT: break;
    }
    return NAN;
}

bool stoke_dtype_is_integer(stoke_dtype t)
{
    return t == STOKE_U8 || t == STOKE_I8 || t == STOKE_U16 || t == STOKE_I16 ||
           t == STOKE_U32 || t == STOKE_I32 || t == STOKE_I64;
}

bool stoke_class_of(const void *p, stoke_dtype t, int64_t limit, int64_t *out)
{
    if (t == STOKE_I64) { /* beyond 2^53 a double would round */
        int64_t v;
        memcpy(&v, p, 8);
        if (v < 0 || v >= limit)
            return false;
        *out = v;
        return true;
    }
    double v = stoke_value_as_double(p, t);
    if (!(v >= 0) || v >= (double)limit || v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

stoke_status stoke_scalar_targets(const char *path, const unsigned char *data, int64_t count,
                                  stoke_dtype t, bool swap, bool regression,
                                  stoke_target_kind *kind, int64_t *num_classes)
{
    *kind = STOKE_TARGET_SCALAR;
    *num_classes = 0;
    if (regression)
        return STOKE_OK;
    size_t es = stoke_dtype_size(t);
    bool integer = stoke_dtype_is_integer(t);
    int64_t max = -1;
    for (int64_t i = 0; i < count; i++) {
        unsigned char v[8];
        stoke_copy_swapped(v, data + (size_t)i * es, 1, es, swap);
        int64_t c;
        if (!stoke_class_of(v, t, STOKE_MAX_CLASSES, &c)) {
            if (!integer)
                return STOKE_OK; /* not whole numbers: regression targets */
            return stoke_fail(STOKE_ERR_FORMAT, "%s: sample %" PRId64 ": label %.0f is not a "
                                                "class index (0 to %d)", path, i,
                              stoke_value_as_double(v, t), STOKE_MAX_CLASSES - 1);
        }
        if (c > max)
            max = c;
    }
    if (count == 0 && !integer)
        return STOKE_OK;
    *kind = STOKE_TARGET_CLASS;
    *num_classes = max + 1;
    return STOKE_OK;
}

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
           (h[2] == 0x08 || h[2] == 0x09 || (h[2] >= 0x0B && h[2] <= 0x0E)) &&
           h[3] >= 1 && h[3] <= STOKE_MAX_DIMS + 1;
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

static bool sniff_hdf5(const sniff_input *in)
{
    return !in->is_dir && stoke_hdf5_sniff(in->path);
}

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
    {"idx", sniff_idx_file, stoke_idx_open},
    {"idx", sniff_idx_dir, stoke_idx_open},
    {"npy", sniff_npy, stoke_npy_open},
    {"records", sniff_records, stoke_records_open},
    {"hdf5", sniff_hdf5, stoke_hdf5_open},
    {"images", sniff_images, stoke_images_open},
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
        return stoke_fail(errno == ENOENT ? STOKE_ERR_NOTFOUND : STOKE_ERR_IO, "%s: %s",
                          path, strerror(errno));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return stoke_fail(STOKE_ERR_IO, "%s: is %s: a dataset is a regular file or a "
                                        "directory", path, stoke_file_kind(st.st_mode));
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
                          ".jpg/.jpeg/.png files (image folder)", path);
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

const stoke_dataset_info *stoke_dataset_get_info(const stoke_dataset *d)
{
    return d ? &d->info : NULL;
}

stoke_status stoke_dataset_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    if (!d || !input)
        return stoke_fail(STOKE_ERR_ARG, "stoke_dataset_read: %s is NULL",
                          d ? "input" : "dataset");
    if (i < 0 || i >= d->info.count)
        return stoke_fail(STOKE_ERR_ARG, "%s: sample %" PRId64 " out of range (%" PRId64
                                         " samples)", d->path, i, d->info.count);
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
            s = stoke_fail(STOKE_ERR_FORMAT, "%s: sample %" PRId64 ": class %g is not in "
                                             "[0, %" PRId64 ")", d->path, i,
                           stoke_value_as_double(tgt, f->target_dtype), f->num_classes);
        if (s == STOKE_OK)
            counts[c]++;
    }
    free(in);
    return s;
}

