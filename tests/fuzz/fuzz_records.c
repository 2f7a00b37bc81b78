/* fuzz_records.c - packed records, both versions (decoded pixels; version 2's image
 * files' bytes), on arbitrary bytes. The input's checksum is patched in first
 * (otherwise almost nothing would get past it), then the header is parsed; an accepted
 * file is opened and every record read, and version 2's also through a crop window,
 * so the index checks, the trailer and the decoders all see the input. The seeds are
 * files `stoke data convert` wrote, with and without --store jpeg. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/dataset_impl.h"
#include "data/records_impl.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The middle half of the image on each axis, resized to 9 x 7. */
static void window(void *ctx, int w, int h, stoke_image_window *win)
{
    (void)ctx;
    int x0 = w / 4, x1 = x0 + (w + 1) / 2, y0 = h / 4, y1 = y0 + (h + 1) / 2;
    win->x = (stoke_resize_axis){x0, x1, x0, x1, 9, 0, 9};
    win->y = (stoke_resize_axis){y0, y1, y0, y1, 7, 0, 7};
}

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
        if (h.version == STOKE_REC_VERSION_ENC) { /* the header saw room for the tail */
            size_t n = (size_t)h.count * STOKE_REC_INDEX_ENTRY + STOKE_REC_TRAILER_SIZE;
            stoke_records_check_index(buf + size - n, n, size, "fuzz.rec", &h);
        }
        stoke_dataset *d = calloc(1, sizeof *d);
        const char *path = fuzz_write("in.rec", buf, size);
        if (d && stoke_records_open(d, path, NULL) == STOKE_OK) {
            const stoke_dataset_info *f = &d->info;
            /* a version 2 header may ask for a 16384 x 16384 plain read: cap one input */
            unsigned char *in =
                f->input_bytes <= ((size_t)1 << 26) ? malloc(f->input_bytes + 1) : NULL;
            unsigned char *tg = malloc(f->target_bytes + 1), win[9 * 7 * 3];
            for (int64_t i = 0; tg && i < f->count && i < 4096; i++) {
                if (in)
                    stoke_dataset_read(d, i, in, tg);
                if (d->vt->read_window)
                    d->vt->read_window(d, i, window, NULL, win, tg);
            }
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
