/* fuzz_records.c - the packed-records header checks on arbitrary bytes. The input's
 * checksum is patched in first (otherwise almost nothing would get past it), then the
 * header is parsed; an accepted file is opened and every record read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/dataset_impl.h"
#include "data/records_impl.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    stoke_rec_header h;
    stoke_records_parse_header(buf, size, size, "fuzz.rec", &h); /* checksum as given */
    if (size >= STOKE_REC_HEADER_SIZE) {
        uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, STOKE_REC_CRC_OFFSET);
        for (int k = 0; k < 4; k++)
            buf[STOKE_REC_CRC_OFFSET + k] = (unsigned char)(c >> 8 * k);
    }
    if (stoke_records_parse_header(buf, size, size, "fuzz.rec", &h) == STOKE_OK) {
        stoke_dataset *d = calloc(1, sizeof *d);
        const char *path = fuzz_write("in.rec", buf, size);
        if (d && stoke_records_open(d, path, NULL) == STOKE_OK) {
            const stoke_dataset_info *f = &d->info;
            unsigned char *in = malloc(f->input_bytes + 1), *tg = malloc(f->target_bytes + 1);
            for (int64_t i = 0; in && tg && i < f->count; i++)
                stoke_dataset_read(d, i, in, tg);
            int64_t *counts = f->target_kind == STOKE_TARGET_CLASS && f->num_classes <= 4096
                                  ? malloc((size_t)f->num_classes * sizeof *counts)
                                  : NULL;
            if (counts)
                stoke_dataset_class_counts(d, counts);
            free(counts);
            free(in);
            free(tg);
            stoke_dataset_close(d);
        } else {
            free(d);
        }
    }
    free(buf);
    return 0;
}
