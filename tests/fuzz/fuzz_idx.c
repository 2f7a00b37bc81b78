/* fuzz_idx.c - the IDX reader (plain and gzip) on arbitrary bytes: opening must either
 * succeed, with every sample readable, or fail with a message; never crash, hang, read
 * out of bounds or allocate much more than the input inflates to. */
#include <stdint.h>
#include <stdlib.h>

#include "data/dataset_impl.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("in.idx", data, size);
    stoke_dataset *d = calloc(1, sizeof *d);
    if (!d)
        return 0;
    if (stoke_idx_open(d, path, NULL) != STOKE_OK) {
        free(d);
        return 0;
    }
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    unsigned char *in = malloc(f->input_bytes ? f->input_bytes : 1);
    for (int64_t i = 0; in && i < f->count; i++)
        stoke_dataset_read(d, i, in, NULL);
    free(in);
    stoke_dataset_close(d);
    return 0;
}
