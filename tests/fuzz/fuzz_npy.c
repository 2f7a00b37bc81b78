/* fuzz_npy.c - the NPY header parser on arbitrary bytes (the buffer is the whole
 * "file"): it must accept or refuse with a message, never crash or read past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/npy_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so ASan sees any read past the end. */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    stoke_npy_header h;
    if (stoke_npy_parse_header(buf, size, "fuzz.npy", &h) == STOKE_OK &&
        (h.data_offset > size || h.ndim < 0 || h.ndim > STOKE_NPY_MAX_NDIM))
        abort(); /* accepted a header the parser promises to have checked */
    free(buf);
    return 0;
}
