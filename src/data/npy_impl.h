/* npy_impl.h - the NPY header parser on a buffer, for npy.c and its fuzz target. */
#ifndef STOKE_NPY_IMPL_H
#define STOKE_NPY_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/data.h"

#define STOKE_NPY_MAX_NDIM (STOKE_MAX_DIMS + 1) /* the sample axis plus a sample's */

typedef struct stoke_npy_header {
    int major, minor; /* format version: 1.0, 2.0 or 3.0 */
    stoke_dtype dtype;
    bool swap; /* the file's byte order differs from the host's */
    int ndim;  /* of the whole array; 0 for shape () */
    int64_t shape[STOKE_NPY_MAX_NDIM];
    size_t data_offset; /* bytes from the file's start to the first element */
    size_t data_bytes;  /* elements x element size, as the header describes */
} stoke_npy_header;

/* Parses the NPY preamble and header dict in buf[0..n) (n: the bytes available, e.g.
 * the whole file). Checks the magic, the version (1.0, 2.0, 3.0), the header length
 * against n, and the dict: exactly the keys 'descr', 'fortran_order' and 'shape'.
 * Does not look at the data. `path` is only for messages. On failure returns
 * STOKE_ERR_FORMAT with a message naming path, the byte offset and what was wrong
 * ("Fortran order is not supported", "unsupported dtype '<c8'", ...). Can't crash on
 * any input. */
stoke_status stoke_npy_parse_header(const unsigned char *buf, size_t n, const char *path,
                                    stoke_npy_header *h);

#endif
