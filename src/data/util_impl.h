/* util_impl.h - helpers the file-format readers share (IDX, NPY, packed records):
 * whole-file mappings, byte swapping, and decoding one element as a number. */
#ifndef STOKE_DATA_UTIL_IMPL_H
#define STOKE_DATA_UTIL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/data.h"

/* A read-only view of a whole file. */
typedef struct stoke_mapped {
    const unsigned char *data; /* NULL when size is 0 */
    size_t size;               /* bytes */
} stoke_mapped;

/* Maps `path` read-only (MAP_PRIVATE), opened with stoke_open_regular (core/regular.h:
 * a FIFO or device is refused without blocking). STOKE_ERR_NOTFOUND if it does not
 * exist, STOKE_ERR_IO otherwise (not a regular file, a permission, mmap failing); the
 * message names the file and the reason. On failure *m is zeroed. */
stoke_status stoke_map_file(const char *path, stoke_mapped *m);
void stoke_unmap_file(stoke_mapped *m); /* zeroed or mapped; can't fail */

/* Copies n elements of elem_size bytes from src to dst, reversing the bytes of each
 * element when swap is true (the file's byte order differs from the host's). */
void stoke_copy_swapped(void *dst, const void *src, size_t n, size_t elem_size, bool swap);

/* One element of type t at p (host byte order) as a double; NaN for invalid t. */
double stoke_value_as_double(const void *p, stoke_dtype t);

/* True for the integer dtypes (class labels may only be integers or, when every
 * value is a whole number, floats). */
bool stoke_dtype_is_integer(stoke_dtype t);

/* Class index of one target element: false unless it is a whole number in
 * [0, limit). */
bool stoke_class_of(const void *p, stoke_dtype t, int64_t limit, int64_t *out);

/* The largest class count stoke accepts: a label beyond it is more likely a value to
 * regress than a class (and class_counts callers allocate num_classes entries). */
#define STOKE_MAX_CLASSES (1 << 24)

/* Decides what per-sample scalar targets are, from `count` values of type t at data
 * (in the file's byte order: swap if it differs from the host's):
 * - regression: SCALAR;
 * - integers: CLASS; each must be in [0, STOKE_MAX_CLASSES), else STOKE_ERR_FORMAT
 *   naming the file, the sample and the value;
 * - floats: CLASS when every value is a whole number in [0, STOKE_MAX_CLASSES) (labels
 *   saved as floats), SCALAR otherwise (regression: angles, prices).
 * *num_classes is max + 1 for CLASS, else 0. */
stoke_status stoke_scalar_targets(const char *path, const unsigned char *data, int64_t count,
                                  stoke_dtype t, bool swap, bool regression,
                                  stoke_target_kind *kind, int64_t *num_classes);

/* True if the host stores numbers little-endian (every format's reference order). */
static inline bool stoke_host_little(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

#endif
