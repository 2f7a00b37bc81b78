/* records_impl.h - the packed-records header (layout in docs/formats.md): its checks
 * on a buffer, for records.c, records_jpeg.c and the fuzz targets. Version 1 holds
 * fixed-size records of decoded samples (records.c); version 2 the image files' own
 * bytes, one variable-length record per sample found through an index (records_jpeg.c). */
#ifndef STOKE_RECORDS_IMPL_H
#define STOKE_RECORDS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "data/util_impl.h"
#include "stoke/data.h"

#define STOKE_REC_MAGIC        "STOKEREC"
#define STOKE_REC_VERSION      1   /* fixed-size records of samples as read */
#define STOKE_REC_VERSION_ENC  2   /* encoded images, an index, a trailer */
#define STOKE_REC_HEADER_SIZE  256 /* bytes; the first record starts here */
#define STOKE_REC_CRC_OFFSET   252 /* crc32 of bytes [0, 252) */
#define STOKE_REC_OFF_ENCODING 200 /* version 2: the encoding byte */
#define STOKE_REC_ENC_IMAGE    1   /* version 2's encoding: JPEG or PNG file bytes */
/* Version 2 ends with a trailer: u64 index offset, then this magic. */
#define STOKE_REC_TRAILER_MAGIC "STOKEEND"
#define STOKE_REC_TRAILER_SIZE  16
#define STOKE_REC_INDEX_ENTRY   16 /* u64 offset, u64 length */
/* Version 2: an image's bytes in one record at most (decode.c reads no larger file). */
#define STOKE_REC_MAX_IMAGE_BYTES ((uint64_t)1 << 30)

/* The file's integers are little-endian whatever the host. */
static inline uint64_t stoke_rec_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline void stoke_rec_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

typedef struct stoke_rec_header {
    uint32_t version;
    uint64_t count;
    uint64_t record_size;    /* version 1: bytes per record, a multiple of 16; 2: 0 */
    uint64_t target_offset;  /* version 1: bytes from a record's start to its target; 2: 0
                                (the target leads each record) */
    uint64_t index_offset;   /* version 2 (from the trailer, once checked): where the
                                index starts, which is where the records end */
    stoke_dataset_info info; /* everything but format */
} stoke_rec_header;

/* Decodes and checks the header in buf[0..n) of a file of file_size bytes: magic,
 * version, checksum, every field's range and consistency; version 1:
 * header + count x record_size == file_size; version 2: the file can hold count index
 * entries and the trailer (the index itself: stoke_records_check_index). On failure
 * STOKE_ERR_FORMAT with a message naming path, the field and its byte offset. Can't
 * crash on any input. */
stoke_status stoke_records_parse_header(const unsigned char *buf, size_t n, uint64_t file_size,
                                        const char *path, stoke_rec_header *h);

/* The layout stoke writes for samples described by `info`: sets h->record_size,
 * h->target_offset and h->count (= info->count). STOKE_ERR_ARG if a sample is too
 * large. */
stoke_status stoke_records_layout(const stoke_dataset_info *info, stoke_rec_header *h);

/* Encodes h (from stoke_records_layout, or a version 2 header) into out, with its
 * checksum. */
void stoke_records_encode_header(const stoke_rec_header *h,
                                 unsigned char out[STOKE_REC_HEADER_SIZE]);

/* ---- version 2 (records_jpeg.c) ---- */

/* Checks a version 2 file's trailer and index in `tail`, the last n bytes of a file of
 * file_size bytes (h from stoke_records_parse_header, which saw room for them; n at
 * least the index and the trailer, count x 16 + 16): the trailer's magic and index
 * offset, then each entry: records follow each other from byte 256 with no gap or
 * overlap, each holds its target and at least one image byte, the last ends at the
 * index. Sets h->index_offset. STOKE_ERR_FORMAT naming path, the entry, its byte
 * offset. */
stoke_status stoke_records_check_index(const unsigned char *tail, size_t n, uint64_t file_size,
                                       const char *path, stoke_rec_header *h);

/* Makes d a version 2 dataset over `file` (h checked by stoke_records_parse_header):
 * reads the index and the trailer into memory and checks them. On success d owns the
 * file; on failure the caller still does. */
stoke_status stoke_records_enc_open(stoke_dataset *d, const char *path, stoke_rfile file,
                                    const stoke_rec_header *h);

/* Writes image folder d's files' bytes as a version 2 file (stoke_records_write_as). */
stoke_status stoke_records_enc_write(stoke_dataset *d, const char *path,
                                     void (*progress)(void *ctx, int64_t done, int64_t total),
                                     void *ctx);

/* Version 2: the mean bytes of an image in a record (0 without records); -1 for any
 * other dataset. */
double stoke_records_enc_mean_bytes(const stoke_dataset *d);

#endif
