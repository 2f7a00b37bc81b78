/* idx.c - IDX files (MNIST, Fashion-MNIST), plain or gzip: an images file and its
 * labels file, checked entirely on open. A gzip file is inflated into memory once (gzip
 * cannot seek), and so are plain class labels (checked on open: they stay as checked);
 * other plain files are read by offset (pread, not mapped: util_impl.h says why). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data/dataset_impl.h"
#include "data/util_impl.h"

#define IDX_MAX_NDIM (STOKE_MAX_DIMS + 1) /* the sample axis plus a sample's dims */

typedef struct idx_file {
    char path[1024];
    stoke_rfile file;          /* plain files read by offset; closed once in memory */
    unsigned char *mem;        /* in memory (inflated, or read whole): the content */
    const unsigned char *data; /* mem: header, then elements; NULL: read from file */
    size_t size;               /* the content's bytes */
    stoke_dtype dtype;
    int ndim;
    int64_t dims[IDX_MAX_NDIM];
    size_t header; /* 4 + 4 * ndim */
} idx_file;

typedef struct idx_impl {
    idx_file images, labels;
    bool has_labels;
} idx_impl;

static void idx_file_free(idx_file *f)
{
    stoke_rfile_close(&f->file);
    free(f->mem);
    f->mem = NULL;
    f->data = NULL;
}

static bool idx_dtype(unsigned char code, stoke_dtype *t)
{
    switch (code) {
    case 0x08: *t = STOKE_U8; return true;
    case 0x09: *t = STOKE_I8; return true;
    case 0x0B: *t = STOKE_I16; return true;
    case 0x0C: *t = STOKE_I32; return true;
    case 0x0D: *t = STOKE_F32; return true;
    case 0x0E: *t = STOKE_F64; return true;
    }
    return false;
}

/* Checks the magic (4 bytes at h, n available) and records dtype and ndim. */
static stoke_status parse_magic(idx_file *f, const unsigned char *h, size_t n)
{
    if (n < 4)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: truncated: %zu bytes, an IDX header needs "
                          "at least 4",
                          f->path, n);
    if (h[0] != 0 || h[1] != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: offset 0: bad IDX magic %02x %02x (expected "
                          "00 00)",
                          f->path, h[0], h[1]);
    if (!idx_dtype(h[2], &f->dtype))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: offset 2: unknown IDX element type 0x%02x "
                          "(known: 08 u8, 09 i8, 0B i16, 0C i32, 0D f32, "
                          "0E f64)",
                          f->path, h[2]);
    if (h[3] < 1 || h[3] > IDX_MAX_NDIM)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: offset 3: %u dimensions (1 to %d "
                          "supported)",
                          f->path, h[3], IDX_MAX_NDIM);
    f->ndim = h[3];
    f->header = 4 + 4 * (size_t)f->ndim;
    return STOKE_OK;
}

/* Reads the dimensions (the header is complete in h) and returns the exact size the
 * whole content must have in *expect. */
static stoke_status parse_dims(idx_file *f, const unsigned char *h, size_t *expect)
{
    uint64_t total = stoke_dtype_size(f->dtype);
    for (int k = 0; k < f->ndim; k++) {
        const unsigned char *p = h + 4 + 4 * k;
        uint32_t v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (v == 0)
            return stoke_fail(STOKE_ERR_FORMAT, "%s: offset %d: dimension %d is 0", f->path,
                              4 + 4 * k, k);
        f->dims[k] = v;
        if (__builtin_mul_overflow(total, (uint64_t)v, &total) || total > SIZE_MAX / 4)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: offset %d: dimensions too large "
                              "(more than %zu bytes)",
                              f->path, 4 + 4 * k, SIZE_MAX / 4);
    }
    *expect = (size_t)total + f->header;
    return STOKE_OK;
}

static void shape_text(const idx_file *f, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < f->ndim && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, k ? " x " : "", f->dims[k]);
}

static stoke_status size_mismatch(const idx_file *f, size_t expect, size_t actual, const char *what)
{
    char dims[160];
    shape_text(f, dims, sizeof dims);
    return stoke_fail(STOKE_ERR_FORMAT,
                      "%s: %s: the header says %s %s (%zu bytes with the "
                      "%zu-byte header), the file holds %s%zu bytes%s",
                      f->path, actual < expect ? "truncated" : "oversized", dims,
                      stoke_dtype_name(f->dtype), expect, f->header,
                      actual > expect ? "at least " : "", actual, what);
}

/* Inflates the whole gzip stream of f->file into f->mem. Memory grows only as data
 * actually comes out, and never past the size the header promises (+1 byte to tell an
 * oversized file), so a lying header cannot make it allocate much. */
static stoke_status inflate_all(idx_file *f)
{
    enum { IN_CHUNK = 1 << 18 };
    z_stream z;
    memset(&z, 0, sizeof z);
    unsigned char *in = malloc(IN_CHUNK);
    if (!in)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", f->path);
    if (inflateInit2(&z, 15 + 32) != Z_OK) { /* 32: gzip or zlib header */
        free(in);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: zlib: cannot start inflating", f->path);
    }
    uint64_t in_pos = 0, in_size = f->file.size; /* read so far; the compressed bytes */

    unsigned char *buf = NULL;
    size_t cap = 0, len = 0;
    size_t limit = 4 + 4 * IDX_MAX_NDIM; /* until the header is known */
    size_t expect = 0;
    bool header_known = false, ended = false;
    stoke_status s = STOKE_OK;
    while (s == STOKE_OK) {
        if (!header_known && len >= 4) {
            s = parse_magic(f, buf, len);
            if (s != STOKE_OK)
                break;
            if (len >= f->header) {
                s = parse_dims(f, buf, &expect);
                if (s != STOKE_OK)
                    break;
                header_known = true;
                limit = expect + 1;
            }
        }
        if (ended || len >= limit)
            break;
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            if (ncap > limit)
                ncap = limit;
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) {
                s = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory inflating %zu bytes", f->path,
                               ncap);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        /* The header is read a few bytes at a time, so its checks run before the
         * buffer grows. */
        size_t want = header_known ? cap - len : (len < 4 ? 4 : f->header) - len;
        if (want > cap - len)
            want = cap - len;
        z.next_out = buf + len;
        z.avail_out = (uInt)(want > UINT32_MAX ? UINT32_MAX : want);
        uInt before = z.avail_out;
        if (z.avail_in == 0 && in_pos < in_size) {
            size_t k = in_size - in_pos < IN_CHUNK ? (size_t)(in_size - in_pos) : IN_CHUNK;
            s = stoke_rfile_read(&f->file, f->path, -1, in, k, in_pos);
            if (s != STOKE_OK)
                break;
            z.next_in = in;
            z.avail_in = (uInt)k;
            in_pos += k;
        }
        int r = inflate(&z, Z_NO_FLUSH);
        len += before - z.avail_out;
        if (r == Z_STREAM_END) {
            /* Concatenated gzip members are one file (as gzip -d reads them). */
            if (z.avail_in == 0 && in_pos == in_size)
                ended = true;
            else if (inflateReset(&z) != Z_OK)
                s = stoke_fail(STOKE_ERR_FORMAT, "%s: zlib: cannot restart", f->path);
        } else if (r == Z_BUF_ERROR && z.avail_in == 0 && in_pos == in_size) {
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: bad gzip: the compressed stream ends "
                           "early, at compressed byte %" PRIu64,
                           f->path, in_size);
        } else if (r == Z_MEM_ERROR) {
            s = stoke_fail(STOKE_ERR_NOMEM, "%s: zlib: out of memory", f->path);
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            s = stoke_fail(STOKE_ERR_FORMAT, "%s: bad gzip data near compressed byte %lu: %s",
                           f->path, z.total_in, z.msg ? z.msg : "corrupt stream");
        }
    }
    inflateEnd(&z);
    free(in);
    if (s == STOKE_OK && !header_known) {
        if (len < 4)
            s = parse_magic(f, buf, len);
        if (s == STOKE_OK)
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: truncated: the %d-dimension header needs "
                           "%zu bytes, the file holds %zu (uncompressed)",
                           f->path, f->ndim, f->header, len);
    }
    if (s == STOKE_OK && len != expect)
        s = size_mismatch(f, expect, len, " (uncompressed)");
    if (s != STOKE_OK) {
        free(buf);
        return s;
    }
    stoke_rfile_close(&f->file); /* the compressed bytes are no longer needed */
    f->mem = buf;
    f->data = buf;
    f->size = len;
    return STOKE_OK;
}

/* Loads and checks one IDX file (plain or gzip). `labels`: a plain file of class
 * labels (1 dimension) is read whole, as a gzip file is inflated. */
static stoke_status idx_load(const char *path, idx_file *f, bool labels)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    stoke_status s = stoke_rfile_open(path, &f->file);
    if (s != STOKE_OK)
        return s;
    unsigned char head[4 + 4 * IDX_MAX_NDIM];
    f->size = f->file.size < sizeof head ? (size_t)f->file.size : sizeof head;
    s = stoke_rfile_read(&f->file, path, -1, head, f->size, 0);
    if (s == STOKE_OK && f->size >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
        s = inflate_all(f);
    } else if (s == STOKE_OK) {
        size_t expect = 0;
        s = parse_magic(f, head, f->size);
        f->size = (size_t)f->file.size;
        if (s == STOKE_OK && f->size < f->header)
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: truncated: the %d-dimension header needs "
                           "%zu bytes, the file holds %zu",
                           path, f->ndim, f->header, f->size);
        if (s == STOKE_OK)
            s = parse_dims(f, head, &expect);
        if (s == STOKE_OK && f->size != expect)
            s = size_mismatch(f, expect, f->size, "");
        if (s == STOKE_OK && labels && f->ndim == 1) {
            f->mem = malloc(f->size);
            s = f->mem
                    ? stoke_rfile_read(&f->file, path, -1, f->mem, f->size, 0)
                    : stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for %zu bytes", path, f->size);
            f->data = f->mem;
            if (s == STOKE_OK)
                stoke_rfile_close(&f->file);
        }
    }
    if (s != STOKE_OK)
        idx_file_free(f);
    return s;
}

/* Sample i's `bytes` of f into out, in the host's order (IDX is big-endian). */
static stoke_status idx_sample(const idx_file *f, int64_t i, size_t bytes, void *out)
{
    size_t es = stoke_dtype_size(f->dtype);
    bool swap = stoke_host_little();
    size_t at = f->header + (size_t)i * bytes;
    if (f->data) {
        stoke_copy_swapped(out, f->data + at, bytes / es, es, swap);
        return STOKE_OK;
    }
    stoke_status s = stoke_rfile_read(&f->file, f->path, i, out, bytes, at);
    if (s == STOKE_OK && swap && es > 1)
        stoke_swap_in_place(out, bytes / es, es);
    return s;
}

static stoke_status idx_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    const idx_impl *m = d->impl;
    const stoke_dataset_info *f = &d->info;
    stoke_status s = idx_sample(&m->images, i, f->input_bytes, input);
    if (s == STOKE_OK && target && m->has_labels)
        s = idx_sample(&m->labels, i, f->target_bytes, target);
    return s;
}

static void idx_close(stoke_dataset *d)
{
    idx_impl *m = d->impl;
    if (!m)
        return;
    idx_file_free(&m->images);
    idx_file_free(&m->labels);
    free(m);
    d->impl = NULL;
}

static const stoke_dataset_vt idx_vt = {.read = idx_read, .close = idx_close};

/* Finds dir/name or dir/name.gz; false if neither exists. */
static bool find_with_gz(const char *dir, const char *name, char *out, size_t size)
{
    struct stat st;
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) < size && stat(out, &st) == 0)
        return true;
    return (size_t)snprintf(out, size, "%s/%s.gz", dir, name) < size && stat(out, &st) == 0;
}

/* The labels beside an images file, by the standard naming:
 * PREFIX-images-idx3-ubyte[.gz] -> PREFIX-labels-idx1-ubyte[.gz]. */
static bool labels_beside(const char *images, char *out, size_t size)
{
    const char *slash = strrchr(images, '/');
    const char *base = slash ? slash + 1 : images;
    const char *tag = strstr(base, "-images-idx");
    if (!tag)
        return false;
    char dir[1024], name[1024];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - images) : 1, slash ? images : ".");
    snprintf(name, sizeof name, "%.*s-labels-idx1-ubyte", (int)(tag - base), base);
    return find_with_gz(dir, name, out, size);
}

stoke_status stoke_idx_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o)
{
    char images[1100], labels[1100];
    bool want_labels;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        const char *split = o && o->split ? o->split : "train";
        const char *prefix = strcmp(split, "train") == 0  ? "train"
                             : strcmp(split, "test") == 0 ? "t10k"
                                                          : NULL;
        if (!prefix)
            return stoke_fail(STOKE_ERR_ARG,
                              "%s: split '%s' of an IDX directory must be "
                              "'train' or 'test'",
                              path, split);
        char name[64];
        snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
        if (!find_with_gz(path, name, images, sizeof images))
            return stoke_fail(STOKE_ERR_NOTFOUND, "%s: no %s[.gz] for split '%s'", path, name,
                              split);
        snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
        want_labels = find_with_gz(path, name, labels, sizeof labels);
    } else {
        snprintf(images, sizeof images, "%s", path);
        want_labels = labels_beside(path, labels, sizeof labels);
    }

    idx_impl *m = calloc(1, sizeof *m);
    if (!m)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    m->images.file.fd = m->labels.file.fd = -1;
    d->impl = m;
    d->vt = &idx_vt;
    stoke_status s = idx_load(images, &m->images, false);
    if (s == STOKE_OK && want_labels) {
        s = idx_load(labels, &m->labels, true);
        m->has_labels = s == STOKE_OK;
    }
    if (s != STOKE_OK) {
        idx_close(d);
        return s;
    }

    stoke_dataset_info *f = &d->info;
    snprintf(f->format, sizeof f->format, "idx");
    const idx_file *im = &m->images;
    f->count = im->dims[0];
    f->input_dtype = im->dtype;
    f->input_shape.ndim = im->ndim - 1;
    for (int k = 1; k < im->ndim; k++)
        f->input_shape.dims[k - 1] = im->dims[k];
    f->input_bytes = (size_t)stoke_shape_elems(&f->input_shape) * stoke_dtype_size(im->dtype);
    if (m->has_labels) {
        const idx_file *lb = &m->labels;
        if (lb->dims[0] != im->dims[0]) {
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s holds %" PRId64 " samples but %s holds %" PRId64 " labels", im->path,
                           im->dims[0], lb->path, lb->dims[0]);
            idx_close(d);
            return s;
        }
        f->target_dtype = lb->dtype;
        f->target_shape.ndim = lb->ndim - 1;
        for (int k = 1; k < lb->ndim; k++)
            f->target_shape.dims[k - 1] = lb->dims[k];
        f->target_bytes = (size_t)stoke_shape_elems(&f->target_shape) * stoke_dtype_size(lb->dtype);
        if (lb->ndim > 1) {
            f->target_kind = STOKE_TARGET_VECTOR;
        } else {
            s = stoke_scalar_targets(lb->path, lb->data + lb->header, f->count, lb->dtype,
                                     stoke_host_little(), o && o->regression, &f->target_kind,
                                     &f->num_classes);
            if (s != STOKE_OK) {
                idx_close(d);
                return s;
            }
        }
    }
    return STOKE_OK;
}
