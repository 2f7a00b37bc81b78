/* records_impl.h - the packed-records header (layout in docs/formats.md): its checks
 * on a buffer, for records.c and its fuzz target. */
#ifndef STOKE_RECORDS_IMPL_H
#define STOKE_RECORDS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "stoke/data.h"

#define STOKE_REC_MAGIC       "STOKEREC"
#define STOKE_REC_VERSION     1
#define STOKE_REC_HEADER_SIZE 256 /* bytes; the first record starts here */
#define STOKE_REC_CRC_OFFSET  252 /* crc32 of bytes [0, 252) */

typedef struct stoke_rec_header {
    uint32_t version;
    uint64_t count;
    uint64_t record_size;    /* bytes per record, a multiple of 16 */
    uint64_t target_offset;  /* bytes from a record's start to its target */
    stoke_dataset_info info; /* everything but format */
} stoke_rec_header;

/* Decodes and checks the header in buf[0..n) of a file of file_size bytes: magic,
 * version, checksum, every field's range and consistency, and
 * header + count x record_size == file_size. On failure STOKE_ERR_FORMAT with a
 * message naming path, the field and its byte offset. Can't crash on any input. */
stoke_status stoke_records_parse_header(const unsigned char *buf, size_t n, uint64_t file_size,
                                        const char *path, stoke_rec_header *h);

/* The layout stoke writes for samples described by `info`: sets h->record_size,
 * h->target_offset and h->count (= info->count). STOKE_ERR_ARG if a sample is too
 * large. */
stoke_status stoke_records_layout(const stoke_dataset_info *info, stoke_rec_header *h);

/* Encodes h (from stoke_records_layout) into out, with its checksum. */
void stoke_records_encode_header(const stoke_rec_header *h,
                                 unsigned char out[STOKE_REC_HEADER_SIZE]);

#endif
