/* records.c - stoke's packed-records format: a checksummed 256-byte header, then
 * fixed-size aligned records (input bytes, then target bytes), read by offset (pread,
 * not mapped: util_impl.h says why); and the writer, which goes through a temporary
 * file renamed into place. The header of both versions is read here; version 2
 * (encoded images) is records_jpeg.c's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/tmpfile.h"
#include "data/dataset_impl.h"
#include "data/records_impl.h"
#include "data/util_impl.h"

/* Byte offsets of the header fields (docs/formats.md). */
enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 8,
    OFF_HEADER_SIZE = 12,
    OFF_COUNT = 16,
    OFF_RECORD_SIZE = 24,
    OFF_INPUT_BYTES = 32,
    OFF_TARGET_BYTES = 40,
    OFF_NUM_CLASSES = 48,
    OFF_INPUT_DTYPE = 56,
    OFF_INPUT_NDIM = 57,
    OFF_TARGET_KIND = 58,
    OFF_TARGET_DTYPE = 59,
    OFF_TARGET_NDIM = 60,
    OFF_INPUT_DIMS = 64,
    OFF_TARGET_DIMS = 128,
    OFF_TARGET_OFFSET = 192,
    OFF_RESERVED = 200,
};

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static uint32_t header_crc(const unsigned char *buf)
{
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, STOKE_REC_CRC_OFFSET);
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

stoke_status stoke_records_layout(const stoke_dataset_info *info, stoke_rec_header *h)
{
    memset(h, 0, sizeof *h);
    h->version = STOKE_REC_VERSION;
    h->info = *info;
    h->count = (uint64_t)info->count;
    /* Inputs start 16-byte aligned (vector loads), targets 8-byte aligned (any
     * element type). */
    if (info->input_bytes > ((size_t)1 << 40) || info->target_bytes > ((size_t)1 << 40))
        return stoke_fail(STOKE_ERR_ARG, "records: a sample of %zu + %zu bytes is too large",
                          info->input_bytes, info->target_bytes);
    h->target_offset = align_up(info->input_bytes, 8);
    h->record_size = align_up(h->target_offset + info->target_bytes, 16);
    if (h->record_size == 0)
        h->record_size = 16;
    return STOKE_OK;
}

void stoke_records_encode_header(const stoke_rec_header *h,
                                 unsigned char out[STOKE_REC_HEADER_SIZE])
{
    const stoke_dataset_info *f = &h->info;
    memset(out, 0, STOKE_REC_HEADER_SIZE);
    memcpy(out + OFF_MAGIC, STOKE_REC_MAGIC, 8);
    put_u32(out + OFF_VERSION, h->version);
    put_u32(out + OFF_HEADER_SIZE, STOKE_REC_HEADER_SIZE);
    stoke_rec_put_u64(out + OFF_COUNT, h->count);
    stoke_rec_put_u64(out + OFF_RECORD_SIZE, h->record_size);
    stoke_rec_put_u64(out + OFF_INPUT_BYTES, f->input_bytes);
    stoke_rec_put_u64(out + OFF_TARGET_BYTES, f->target_bytes);
    stoke_rec_put_u64(out + OFF_NUM_CLASSES, (uint64_t)f->num_classes);
    out[OFF_INPUT_DTYPE] = (unsigned char)f->input_dtype;
    out[OFF_INPUT_NDIM] = (unsigned char)f->input_shape.ndim;
    out[OFF_TARGET_KIND] = (unsigned char)f->target_kind;
    out[OFF_TARGET_DTYPE] = (unsigned char)f->target_dtype;
    out[OFF_TARGET_NDIM] = (unsigned char)f->target_shape.ndim;
    for (int k = 0; k < f->input_shape.ndim; k++)
        stoke_rec_put_u64(out + OFF_INPUT_DIMS + 8 * k, (uint64_t)f->input_shape.dims[k]);
    for (int k = 0; k < f->target_shape.ndim; k++)
        stoke_rec_put_u64(out + OFF_TARGET_DIMS + 8 * k, (uint64_t)f->target_shape.dims[k]);
    stoke_rec_put_u64(out + OFF_TARGET_OFFSET, h->target_offset);
    if (h->version == STOKE_REC_VERSION_ENC)
        out[STOKE_REC_OFF_ENCODING] = STOKE_REC_ENC_IMAGE;
    put_u32(out + STOKE_REC_CRC_OFFSET, header_crc(out));
}

/* Reads a shape's ndim and dims; dims past ndim must be zero. */
static stoke_status get_shape(const unsigned char *buf, int ndim_off, int dims_off,
                              const char *path, const char *which, stoke_shape *s)
{
    int nd = buf[ndim_off];
    if (nd > STOKE_MAX_DIMS)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: %s ndim %d "
                          "(at most %d)",
                          path, ndim_off, which, nd, STOKE_MAX_DIMS);
    s->ndim = nd;
    for (int k = 0; k < STOKE_MAX_DIMS; k++) {
        uint64_t v = stoke_rec_get_u64(buf + dims_off + 8 * k);
        if (k < nd ? v == 0 || v > ((uint64_t)1 << 40) : v != 0)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records header, offset %d: %s dimension "
                              "%d is %" PRIu64 "%s",
                              path, dims_off + 8 * k, which, k, v,
                              k < nd ? "" : " past ndim (must be 0)");
        s->dims[k] = (int64_t)v;
    }
    return STOKE_OK;
}

/* elems x dtype size, or UINT64_MAX if invalid (dims are at most 2^40 each, ndim
 * at most 8: the product is checked for overflow). */
static uint64_t shape_bytes(const stoke_shape *s, stoke_dtype t)
{
    uint64_t total = stoke_dtype_size(t);
    for (int k = 0; k < s->ndim; k++)
        if (__builtin_mul_overflow(total, (uint64_t)s->dims[k], &total) ||
            total > ((uint64_t)1 << 40))
            return UINT64_MAX;
    return total;
}

/* Version 2's samples are images: u8 (height, width, channels), C 1 or 3, the size a
 * plain read resizes to. */
static stoke_status parse_enc_input(const stoke_dataset_info *f, const char *path)
{
    const stoke_shape *s = &f->input_shape;
    if (f->input_dtype != STOKE_U8 || s->ndim != 3)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: encoded images are read as uint8 "
                          "(height, width, channels), not %s of ndim %d",
                          path, f->input_dtype != STOKE_U8 ? OFF_INPUT_DTYPE : OFF_INPUT_NDIM,
                          stoke_dtype_name(f->input_dtype), s->ndim);
    for (int k = 0; k < 3; k++) {
        int64_t lim = k == 2 ? 3 : 16384;
        if (s->dims[k] > lim || (k == 2 && s->dims[k] == 2))
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records header, offset %d: %s %" PRId64 " (%s)", path,
                              OFF_INPUT_DIMS + 8 * k,
                              k == 0   ? "height"
                              : k == 1 ? "width"
                                       : "channels",
                              s->dims[k], k == 2 ? "1 or 3" : "1 to 16384");
    }
    return STOKE_OK;
}

/* Version 2's layout: no fixed record size, and a file long enough for the index and
 * the trailer (whose entries stoke_records_check_index reads). */
static stoke_status parse_enc_layout(const unsigned char *buf, uint64_t file_size, const char *path,
                                     stoke_rec_header *h)
{
    h->record_size = stoke_rec_get_u64(buf + OFF_RECORD_SIZE);
    if (h->record_size != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: record size %" PRIu64
                          " (version 2: 0, records vary)",
                          path, OFF_RECORD_SIZE, h->record_size);
    h->target_offset = stoke_rec_get_u64(buf + OFF_TARGET_OFFSET);
    if (h->target_offset != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: target offset %" PRIu64
                          " (version 2: 0, the target leads each record)",
                          path, OFF_TARGET_OFFSET, h->target_offset);
    h->count = stoke_rec_get_u64(buf + OFF_COUNT);
    uint64_t fixed = STOKE_REC_HEADER_SIZE + STOKE_REC_TRAILER_SIZE;
    if (file_size < fixed || h->count > (file_size - fixed) / STOKE_REC_INDEX_ENTRY)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: truncated: the header (offset %d) says %" PRIu64
                          " records, whose index and trailer alone need more than the %" PRIu64
                          " bytes the file holds after the header",
                          path, OFF_COUNT, h->count,
                          file_size > STOKE_REC_HEADER_SIZE ? file_size - STOKE_REC_HEADER_SIZE
                                                            : 0);
    h->info.count = (int64_t)h->count;
    return STOKE_OK;
}

stoke_status stoke_records_parse_header(const unsigned char *buf, size_t n, uint64_t file_size,
                                        const char *path, stoke_rec_header *h)
{
    memset(h, 0, sizeof *h);
    if (n < STOKE_REC_HEADER_SIZE)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header truncated: %zu bytes, the "
                          "header is %d",
                          path, n, STOKE_REC_HEADER_SIZE);
    if (memcmp(buf, STOKE_REC_MAGIC, 8) != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset 0: bad magic (expected "
                          "\"STOKEREC\")",
                          path);
    h->version = get_u32(buf + OFF_VERSION);
    if (h->version != STOKE_REC_VERSION && h->version != STOKE_REC_VERSION_ENC)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: version %" PRIu32
                          " (this stoke reads versions %d and %d)",
                          path, OFF_VERSION, h->version, STOKE_REC_VERSION, STOKE_REC_VERSION_ENC);
    bool enc = h->version == STOKE_REC_VERSION_ENC;
    uint32_t stored = get_u32(buf + STOKE_REC_CRC_OFFSET), computed = header_crc(buf);
    if (stored != computed)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: bad checksum "
                          "(stored %08" PRIx32 ", computed %08" PRIx32 "): the header is corrupt",
                          path, STOKE_REC_CRC_OFFSET, stored, computed);
    if (get_u32(buf + OFF_HEADER_SIZE) != STOKE_REC_HEADER_SIZE)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: header size %" PRIu32 " (expected %d)",
                          path, OFF_HEADER_SIZE, get_u32(buf + OFF_HEADER_SIZE),
                          STOKE_REC_HEADER_SIZE);
    for (int i = 61; i < 64; i++)
        if (buf[i])
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records header, offset %d: reserved "
                              "byte is not 0",
                              path, i);
    if (enc && buf[STOKE_REC_OFF_ENCODING] != STOKE_REC_ENC_IMAGE)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: encoding %u (version 2 knows %d, "
                          "image file bytes)",
                          path, STOKE_REC_OFF_ENCODING, buf[STOKE_REC_OFF_ENCODING],
                          STOKE_REC_ENC_IMAGE);
    for (int i = OFF_RESERVED + enc; i < STOKE_REC_CRC_OFFSET; i++)
        if (buf[i])
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records header, offset %d: reserved "
                              "byte is not 0",
                              path, i);
    stoke_dataset_info *f = &h->info;
    snprintf(f->format, sizeof f->format, "records");
    if (buf[OFF_INPUT_DTYPE] >= STOKE_DTYPE_COUNT)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: unknown input "
                          "dtype %u",
                          path, OFF_INPUT_DTYPE, buf[OFF_INPUT_DTYPE]);
    f->input_dtype = buf[OFF_INPUT_DTYPE];
    stoke_status s = get_shape(buf, OFF_INPUT_NDIM, OFF_INPUT_DIMS, path, "input", &f->input_shape);
    if (s == STOKE_OK && enc)
        s = parse_enc_input(f, path);
    if (s != STOKE_OK)
        return s;
    if (buf[OFF_TARGET_KIND] > STOKE_TARGET_VECTOR)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: unknown target "
                          "kind %u",
                          path, OFF_TARGET_KIND, buf[OFF_TARGET_KIND]);
    f->target_kind = buf[OFF_TARGET_KIND];
    if (buf[OFF_TARGET_DTYPE] >= STOKE_DTYPE_COUNT)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: unknown target "
                          "dtype %u",
                          path, OFF_TARGET_DTYPE, buf[OFF_TARGET_DTYPE]);
    f->target_dtype = buf[OFF_TARGET_DTYPE];
    s = get_shape(buf, OFF_TARGET_NDIM, OFF_TARGET_DIMS, path, "target", &f->target_shape);
    if (s != STOKE_OK)
        return s;

    uint64_t in_bytes = stoke_rec_get_u64(buf + OFF_INPUT_BYTES);
    uint64_t want_in = shape_bytes(&f->input_shape, f->input_dtype);
    if (in_bytes != want_in)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: input bytes %" PRIu64
                          " do not match the input shape and dtype",
                          path, OFF_INPUT_BYTES, in_bytes);
    f->input_bytes = (size_t)in_bytes;
    uint64_t tg_bytes = stoke_rec_get_u64(buf + OFF_TARGET_BYTES);
    uint64_t want_tg =
        f->target_kind == STOKE_TARGET_NONE ? 0 : shape_bytes(&f->target_shape, f->target_dtype);
    if (tg_bytes != want_tg)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: target bytes %" PRIu64
                          " do not match the target kind, shape and "
                          "dtype",
                          path, OFF_TARGET_BYTES, tg_bytes);
    f->target_bytes = (size_t)tg_bytes;
    bool scalar_kind =
        f->target_kind == STOKE_TARGET_CLASS || f->target_kind == STOKE_TARGET_SCALAR;
    if ((scalar_kind || f->target_kind == STOKE_TARGET_NONE) && f->target_shape.ndim != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: a %s target has "
                          "ndim %d (must be 0)",
                          path, OFF_TARGET_NDIM, scalar_kind ? "class or scalar" : "missing",
                          f->target_shape.ndim);
    if (f->target_kind == STOKE_TARGET_VECTOR && f->target_shape.ndim == 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: a vector target "
                          "has ndim 0",
                          path, OFF_TARGET_NDIM);
    f->num_classes = (int64_t)stoke_rec_get_u64(buf + OFF_NUM_CLASSES);
    if (f->target_kind == STOKE_TARGET_CLASS
            ? f->num_classes < 1 || f->num_classes > STOKE_MAX_CLASSES
            : f->num_classes != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: num_classes %" PRId64
                          " (class targets: 1 to %d; others: 0)",
                          path, OFF_NUM_CLASSES, f->num_classes, STOKE_MAX_CLASSES);

    if (enc)
        return parse_enc_layout(buf, file_size, path, h);
    h->target_offset = stoke_rec_get_u64(buf + OFF_TARGET_OFFSET);
    if (h->target_offset != align_up(in_bytes, 8))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: target offset %" PRIu64
                          " (expected %" PRIu64 ")",
                          path, OFF_TARGET_OFFSET, h->target_offset, align_up(in_bytes, 8));
    h->record_size = stoke_rec_get_u64(buf + OFF_RECORD_SIZE);
    uint64_t want_rs = align_up(h->target_offset + tg_bytes, 16);
    if (want_rs == 0)
        want_rs = 16;
    if (h->record_size != want_rs)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: record size %" PRIu64
                          " (expected %" PRIu64 ")",
                          path, OFF_RECORD_SIZE, h->record_size, want_rs);
    h->count = stoke_rec_get_u64(buf + OFF_COUNT);
    uint64_t body;
    if (h->count > INT64_MAX || __builtin_mul_overflow(h->count, h->record_size, &body) ||
        body > UINT64_MAX - STOKE_REC_HEADER_SIZE)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: records header, offset %d: count %" PRIu64 " is impossible", path,
                          OFF_COUNT, h->count);
    f->count = (int64_t)h->count;
    if (body + STOKE_REC_HEADER_SIZE != file_size)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: %s: the header says %" PRIu64 " records of %" PRIu64
                          " bytes (%" PRIu64 " bytes with the "
                          "header), the file holds %" PRIu64,
                          path,
                          file_size < body + STOKE_REC_HEADER_SIZE ? "truncated" : "oversized",
                          h->count, h->record_size, body + STOKE_REC_HEADER_SIZE, file_size);
    return STOKE_OK;
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct records_impl {
    stoke_rfile file;
    stoke_rec_header h;
} records_impl;

/* One system call per sample: the input, the padding up to the target, the target. */
static stoke_status records_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    const records_impl *m = d->impl;
    unsigned char pad[8];
    stoke_rfile_part parts[3] = {
        {input, d->info.input_bytes},
        {pad, target ? (size_t)(m->h.target_offset - d->info.input_bytes) : 0},
        {target, target ? d->info.target_bytes : 0}};
    return stoke_rfile_readv(&m->file, d->path, i, parts, 3,
                             STOKE_REC_HEADER_SIZE + (uint64_t)i * m->h.record_size);
}

/* Reads whole runs of records and keeps their targets: fewer system calls than one per
 * target, for records of a few hundred bytes. */
static stoke_status records_class_counts(stoke_dataset *d, int64_t *counts)
{
    const records_impl *m = d->impl;
    const stoke_dataset_info *f = &d->info;
    size_t rs = (size_t)m->h.record_size;
    int64_t run = rs >= ((size_t)1 << 20) ? 1 : (int64_t)(((size_t)1 << 20) / rs);
    unsigned char *buf = malloc(run == 1 ? f->target_bytes + 1 : (size_t)run * rs);
    if (!buf)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", d->path);
    stoke_status s = STOKE_OK;
    for (int64_t i = 0; i < f->count && s == STOKE_OK; i += run) {
        int64_t k = f->count - i < run ? f->count - i : run;
        uint64_t at = STOKE_REC_HEADER_SIZE + (uint64_t)i * rs;
        /* a record of 1 MiB or more: its target alone */
        s = run == 1 ? stoke_rfile_read(&m->file, d->path, i, buf, f->target_bytes,
                                        at + m->h.target_offset)
                     : stoke_rfile_read(&m->file, d->path, i, buf, (size_t)k * rs, at);
        for (int64_t j = 0; j < k && s == STOKE_OK; j++) {
            const unsigned char *t = run == 1 ? buf : buf + (size_t)j * rs + m->h.target_offset;
            int64_t c;
            if (!stoke_class_of(t, f->target_dtype, f->num_classes, &c))
                s = stoke_fail(
                    STOKE_ERR_FORMAT, "%s: sample %" PRId64 ": class %g is not in [0, %" PRId64 ")",
                    d->path, i + j, stoke_value_as_double(t, f->target_dtype), f->num_classes);
            else
                counts[c]++;
        }
    }
    free(buf);
    return s;
}

static void records_close(stoke_dataset *d)
{
    records_impl *m = d->impl;
    if (!m)
        return;
    stoke_rfile_close(&m->file);
    free(m);
    d->impl = NULL;
}

const char *stoke_records_encoding(const stoke_dataset *d, double *bytes_per_sample)
{
    double mean = d ? stoke_records_enc_mean_bytes(d) : -1;
    if (bytes_per_sample)
        *bytes_per_sample = mean > 0 ? mean : 0;
    if (mean >= 0)
        return "jpeg";
    if (!d || !d->vt || d->vt->close != records_close)
        return NULL;
    if (bytes_per_sample)
        *bytes_per_sample = (double)((const records_impl *)d->impl)->h.record_size;
    return "pixels";
}

static const stoke_dataset_vt records_vt = {
    .read = records_read, .close = records_close, .class_counts = records_class_counts};

stoke_status stoke_records_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o)
{
    (void)o;
    /* Samples are stored in the host's order; stoke writes and reads little-endian. */
    if (!stoke_host_little())
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "%s: packed records need a little-endian "
                          "host",
                          path);
    records_impl *m = calloc(1, sizeof *m);
    if (!m)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    unsigned char head[STOKE_REC_HEADER_SIZE];
    stoke_status s = stoke_rfile_open(path, &m->file);
    size_t n = m->file.size < sizeof head ? (size_t)m->file.size : sizeof head;
    if (s == STOKE_OK)
        s = stoke_rfile_read(&m->file, path, -1, head, n, 0);
    if (s == STOKE_OK)
        s = stoke_records_parse_header(head, n, m->file.size, path, &m->h);
    if (s == STOKE_OK && m->h.version == STOKE_REC_VERSION_ENC) {
        s = stoke_records_enc_open(d, path, m->file, &m->h);
        if (s == STOKE_OK) {
            free(m); /* the file is the version 2 dataset's now */
            return s;
        }
    }
    if (s != STOKE_OK) {
        stoke_rfile_close(&m->file);
        free(m);
        return s;
    }
    d->impl = m;
    d->vt = &records_vt;
    d->info = m->h.info;
    return STOKE_OK;
}

/* ---- writing ------------------------------------------------------------------------ */

stoke_status stoke_records_write(stoke_dataset *d, const char *path,
                                 void (*progress)(void *ctx, int64_t done, int64_t total),
                                 void *ctx)
{
    return stoke_records_write_as(d, path, STOKE_STORE_PIXELS, progress, ctx);
}

stoke_status stoke_records_write_as(stoke_dataset *d, const char *path, stoke_records_store store,
                                    void (*progress)(void *ctx, int64_t done, int64_t total),
                                    void *ctx)
{
    if (!d || !path || !*path)
        return stoke_fail(STOKE_ERR_ARG, "stoke_records_write: %s is missing",
                          d ? "the path" : "the dataset");
    if (!stoke_host_little())
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "%s: packed records need a little-endian "
                          "host",
                          path);
    if (store == STOKE_STORE_JPEG)
        return stoke_records_enc_write(d, path, progress, ctx);
    if (store != STOKE_STORE_PIXELS)
        return stoke_fail(STOKE_ERR_ARG, "stoke_records_write_as: unknown store %d", (int)store);
    stoke_rec_header h;
    stoke_status s = stoke_records_layout(&d->info, &h);
    if (s != STOKE_OK)
        return s;

    /* A failure or a signal mid-write leaves the destination as it was and no
     * temporary file (core/tmpfile.h). */
    stoke_tmpfile out;
    s = stoke_tmpfile_open(&out, path);
    if (s != STOKE_OK)
        return s;

    unsigned char header[STOKE_REC_HEADER_SIZE];
    stoke_records_encode_header(&h, header);
    s = stoke_tmpfile_write(&out, header, sizeof header);

    size_t rs = (size_t)h.record_size;
    size_t batch = rs >= ((size_t)1 << 20) ? 1 : ((size_t)1 << 20) / rs;
    unsigned char *buf = s == STOKE_OK ? calloc(batch, rs) : NULL;
    if (s == STOKE_OK && !buf)
        s = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for %zu records", path, batch);
    int64_t total = d->info.count;
    if (s == STOKE_OK && progress)
        progress(ctx, 0, total);
    for (int64_t i = 0; s == STOKE_OK && i < total;) {
        size_t k = 0;
        for (; k < batch && i < total && s == STOKE_OK; k++, i++) {
            unsigned char *rec = buf + k * rs;
            void *target = d->info.target_bytes ? rec + h.target_offset : NULL;
            s = d->vt->read(d, i, rec, target);
        }
        if (s == STOKE_OK)
            s = stoke_tmpfile_write(&out, buf, k * rs);
        if (s == STOKE_OK && progress)
            progress(ctx, i, total);
    }
    free(buf);
    if (s == STOKE_OK)
        return stoke_tmpfile_commit(&out);
    stoke_tmpfile_abort(&out);
    return s;
}
