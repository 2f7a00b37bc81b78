/* records_jpeg.c - packed records version 2: each sample's image file bytes (JPEG, or
 * PNG), decoded on every read as an image folder's files are (decode.h), so a file is
 * several times smaller than decoded pixels and RandomResizedCrop is drawn on the
 * original image; and its writer. Records vary in size: an index of (offset, length)
 * finds them. The index follows the records, so the writer goes through the file once
 * (core/tmpfile.h only appends) and reads each image once. Layout in docs/formats.md. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpfile.h"
#include "data/dataset_impl.h"
#include "data/decode.h"
#include "data/records_impl.h"

typedef struct enc_impl {
    stoke_rfile file;
    unsigned char *index; /* the index entries, read on open: count x 16 bytes */
    stoke_rec_header h;
    int size[2]; /* {width, height}: what a plain read resizes to */
    int channels;
} enc_impl;

/* ---- the index --------------------------------------------------------------------- */

stoke_status stoke_records_check_index(const unsigned char *tail, size_t n, uint64_t file_size,
                                       const char *path, stoke_rec_header *h)
{
    /* parse_header saw room for the index and the trailer; a caller that skipped it
     * must not make this read out of bounds */
    uint64_t fixed = STOKE_REC_HEADER_SIZE + STOKE_REC_TRAILER_SIZE;
    if (file_size < fixed || h->count > (file_size - fixed) / STOKE_REC_INDEX_ENTRY ||
        n > file_size || n < h->count * STOKE_REC_INDEX_ENTRY + STOKE_REC_TRAILER_SIZE)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: truncated: %" PRIu64 " bytes hold no index of %" PRIu64 " records",
                          path, file_size, h->count);
    /* tail[k] is the file's byte base + k */
    uint64_t base = file_size - n;
    uint64_t trailer = file_size - STOKE_REC_TRAILER_SIZE;
    if (memcmp(tail + (trailer - base) + 8, STOKE_REC_TRAILER_MAGIC, 8) != 0)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: truncated or damaged: trailer, offset %" PRIu64
                          ": no end marker \"STOKEEND\" (the last 8 bytes of a complete file)",
                          path, trailer + 8);
    uint64_t index = trailer - h->count * STOKE_REC_INDEX_ENTRY;
    uint64_t stored = stoke_rec_get_u64(tail + (trailer - base));
    if (stored != index)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: trailer, offset %" PRIu64 ": index offset %" PRIu64
                          " (expected %" PRIu64 ": the %" PRIu64
                          " entries of 16 bytes end where the trailer starts)",
                          path, trailer, stored, index, h->count);
    uint64_t tb = h->info.target_bytes, pos = STOKE_REC_HEADER_SIZE;
    for (uint64_t i = 0; i < h->count; i++) {
        uint64_t at = index + i * STOKE_REC_INDEX_ENTRY;
        const unsigned char *e = tail + (at - base);
        uint64_t off = stoke_rec_get_u64(e), len = stoke_rec_get_u64(e + 8);
        if (off != pos)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records index, offset %" PRIu64 ": record %" PRIu64
                              " starts at %" PRIu64 " (expected %" PRIu64
                              ": records follow each other from byte 256, no gap or overlap)",
                              path, at, i, off, pos);
        if (len > index - pos)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records index, offset %" PRIu64 ": record %" PRIu64
                              " at %" PRIu64 " is %" PRIu64 " bytes: past the index, which"
                              " starts at %" PRIu64,
                              path, at + 8, i, off, len, index);
        if (len <= tb || len - tb > STOKE_REC_MAX_IMAGE_BYTES)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: records index, offset %" PRIu64 ": record %" PRIu64
                              " at %" PRIu64 " is %" PRIu64 " bytes (its target's %" PRIu64
                              ", then 1 byte to 1 GiB of image)",
                              path, at + 8, i, off, len, tb);
        pos += len;
    }
    if (pos != index)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: trailer, offset %" PRIu64 ": the records end at %" PRIu64
                          " but the index starts at %" PRIu64,
                          path, trailer, pos, index);
    h->index_offset = index;
    return STOKE_OK;
}

/* ---- reading ----------------------------------------------------------------------- */

static void enc_entry(const enc_impl *m, int64_t i, uint64_t *off, uint64_t *len)
{
    const unsigned char *e = m->index + (uint64_t)i * STOKE_REC_INDEX_ENTRY;
    *off = stoke_rec_get_u64(e);
    *len = stoke_rec_get_u64(e + 8);
}

static stoke_status enc_read_window(stoke_dataset *d, int64_t i, stoke_image_window_fn fn,
                                    void *ctx, void *input, void *target)
{
    const enc_impl *m = d->impl;
    uint64_t off, len, tb = d->info.target_bytes;
    enc_entry(m, i, &off, &len); /* checked on open: tb < len <= 1 GiB + tb */
    unsigned char *rec = malloc((size_t)len);
    if (!rec)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "%s: sample %" PRId64 ": out of memory for %" PRIu64 " bytes", d->path, i,
                          len);
    stoke_status s = stoke_rfile_read(&m->file, d->path, i, rec, (size_t)len, off);
    if (s == STOKE_OK) {
        if (target)
            memcpy(target, rec, tb);
        /* the decoder's messages name this, then the sample */
        char name[sizeof d->path + 64];
        snprintf(name, sizeof name, "%s: the image at byte %" PRIu64, d->path, off + tb);
        s = stoke_image_decode(name, i, rec + tb, (size_t)(len - tb), m->channels, fn, ctx, input);
    }
    free(rec);
    return s;
}

static stoke_status enc_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    enc_impl *m = d->impl;
    return enc_read_window(d, i, stoke_image_window_fit, m->size, input, target);
}

/* Targets lead their records: counting them reads a few bytes per record, no image. */
static stoke_status enc_class_counts(stoke_dataset *d, int64_t *counts)
{
    const enc_impl *m = d->impl;
    const stoke_dataset_info *f = &d->info;
    memset(counts, 0, sizeof *counts * (size_t)f->num_classes);
    unsigned char t[16]; /* a class target is one scalar */
    if (f->target_bytes > sizeof t)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: a class target of %zu bytes", d->path,
                          f->target_bytes);
    for (int64_t i = 0; i < f->count; i++) {
        uint64_t off, len;
        enc_entry(m, i, &off, &len);
        stoke_status s = stoke_rfile_read(&m->file, d->path, i, t, f->target_bytes, off);
        if (s != STOKE_OK)
            return s;
        int64_t c;
        if (!stoke_class_of(t, f->target_dtype, f->num_classes, &c))
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: sample %" PRId64 ": class %g is not in [0, %" PRId64
                              ") (record at byte %" PRIu64 ")",
                              d->path, i, stoke_value_as_double(t, f->target_dtype), f->num_classes,
                              off);
        counts[c]++;
    }
    return STOKE_OK;
}

static void enc_close(stoke_dataset *d)
{
    enc_impl *m = d->impl;
    if (!m)
        return;
    stoke_rfile_close(&m->file);
    free(m->index);
    free(m);
    d->impl = NULL;
}

static const stoke_dataset_vt enc_vt = {.read = enc_read,
                                        .read_window = enc_read_window,
                                        .close = enc_close,
                                        .class_counts = enc_class_counts};

stoke_status stoke_records_enc_open(stoke_dataset *d, const char *path, stoke_rfile file,
                                    const stoke_rec_header *h)
{
    /* parse_header checked that the file holds the index and the trailer */
    size_t n = (size_t)(h->count * STOKE_REC_INDEX_ENTRY + STOKE_REC_TRAILER_SIZE);
    enc_impl *m = calloc(1, sizeof *m);
    unsigned char *tail = malloc(n);
    if (!m || !tail) {
        free(m);
        free(tail);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for the index of %" PRIu64 " records",
                          path, h->count);
    }
    m->h = *h;
    stoke_status s = stoke_rfile_read(&file, path, -1, tail, n, file.size - n);
    if (s == STOKE_OK)
        s = stoke_records_check_index(tail, n, file.size, path, &m->h);
    if (s != STOKE_OK) {
        free(tail);
        free(m);
        return s;
    }
    m->file = file;
    m->index = tail; /* the entries lead; the trailer after them is not read again */
    m->size[0] = (int)h->info.input_shape.dims[1];
    m->size[1] = (int)h->info.input_shape.dims[0];
    m->channels = (int)h->info.input_shape.dims[2];
    d->impl = m;
    d->vt = &enc_vt;
    d->info = m->h.info;
    return STOKE_OK;
}

double stoke_records_enc_mean_bytes(const stoke_dataset *d)
{
    if (d->vt != &enc_vt)
        return -1;
    const enc_impl *m = d->impl;
    if (m->h.count == 0)
        return 0;
    uint64_t images =
        m->h.index_offset - STOKE_REC_HEADER_SIZE - m->h.count * (uint64_t)d->info.target_bytes;
    return (double)images / (double)m->h.count;
}

/* ---- writing ----------------------------------------------------------------------- */

/* Converting decodes every image once, as small as the decoder allows (1/8 scale), so a
 * damaged file fails the convert with its name instead of an epoch later. */
enum { ENC_CHECK_SIZE = 8 };

static void enc_check_window(void *ctx, int w, int h, stoke_image_window *win)
{
    (void)ctx;
    int size[2] = {w < ENC_CHECK_SIZE ? w : ENC_CHECK_SIZE,
                   h < ENC_CHECK_SIZE ? h : ENC_CHECK_SIZE};
    stoke_image_window_fit(size, w, h, win);
}

stoke_status stoke_records_enc_write(stoke_dataset *d, const char *path,
                                     void (*progress)(void *ctx, int64_t done, int64_t total),
                                     void *ctx)
{
    if (strcmp(d->info.format, "images") != 0)
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: is %s: only an image folder's files can be stored as JPEG "
                          "bytes (--store jpeg)",
                          d->path, d->info.format);
    stoke_rec_header h = {.version = STOKE_REC_VERSION_ENC, .info = d->info};
    h.count = (uint64_t)d->info.count;
    size_t tb = d->info.target_bytes;
    unsigned char header[STOKE_REC_HEADER_SIZE];
    stoke_records_encode_header(&h, header);

    unsigned char *index = malloc(h.count ? h.count * STOKE_REC_INDEX_ENTRY : 1);
    unsigned char *target = malloc(tb ? tb : 1);
    if (!index || !target) {
        free(index);
        free(target);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for the index of %" PRIu64 " records",
                          path, h.count);
    }
    stoke_tmpfile out;
    stoke_status s = stoke_tmpfile_open(&out, path);
    if (s != STOKE_OK) {
        free(index);
        free(target);
        return s;
    }
    s = stoke_tmpfile_write(&out, header, sizeof header);
    if (s == STOKE_OK && progress)
        progress(ctx, 0, d->info.count);
    unsigned char check[ENC_CHECK_SIZE * ENC_CHECK_SIZE * 3];
    uint64_t pos = STOKE_REC_HEADER_SIZE;
    for (int64_t i = 0; s == STOKE_OK && i < d->info.count; i++) {
        unsigned char *buf = NULL;
        size_t len = 0;
        const char *file = NULL;
        int channels = 3;
        s = stoke_images_raw(d, i, target, &buf, &len, &file, &channels);
        if (s == STOKE_OK)
            s = stoke_image_decode(file, i, buf, len, channels, enc_check_window, NULL, check);
        if (s == STOKE_OK && tb)
            s = stoke_tmpfile_write(&out, target, tb);
        if (s == STOKE_OK)
            s = stoke_tmpfile_write(&out, buf, len);
        free(buf);
        stoke_rec_put_u64(index + (uint64_t)i * STOKE_REC_INDEX_ENTRY, pos);
        stoke_rec_put_u64(index + (uint64_t)i * STOKE_REC_INDEX_ENTRY + 8, tb + len);
        pos += tb + len;
        if (s == STOKE_OK && progress && ((i + 1) % 64 == 0 || i + 1 == d->info.count))
            progress(ctx, i + 1, d->info.count);
    }
    if (s == STOKE_OK)
        s = stoke_tmpfile_write(&out, index, h.count * STOKE_REC_INDEX_ENTRY);
    unsigned char trailer[STOKE_REC_TRAILER_SIZE];
    stoke_rec_put_u64(trailer, pos);
    memcpy(trailer + 8, STOKE_REC_TRAILER_MAGIC, 8);
    if (s == STOKE_OK)
        s = stoke_tmpfile_write(&out, trailer, sizeof trailer);
    free(index);
    free(target);
    if (s == STOKE_OK)
        return stoke_tmpfile_commit(&out);
    stoke_tmpfile_abort(&out);
    return s;
}
