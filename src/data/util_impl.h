/* util_impl.h - helpers the file-format readers share (IDX, NPY, packed records):
 * reading a file by offset, byte swapping, and decoding one element as a number. */
#ifndef STOKE_DATA_UTIL_IMPL_H
#define STOKE_DATA_UTIL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/data.h"

/* A user's data file, open for reading by offset (pread), never mapped. Why: a mapped
 * file that shrinks, or is truncated and rewritten, while a loader reads it delivers
 * SIGBUS on the next touch past its new end, which kills the process (the CLI, or a
 * Python interpreter that loaded stoke). Re-checking the size before each copy still
 * races with a truncate between the check and the copy; a SIGBUS handler in a library
 * would take over a signal that belongs to the host process (Python, torch) and needs
 * per-thread jump buffers around every copy. pread cannot fault: a short read is an
 * ordinary error that names the file and the sample. Its cost is one system call per
 * sample: Fashion-MNIST records, `stoke data bench --hold no --workers 0` on a 2-CPU
 * Xeon VM, about 460k samples/s against 750k mapped; a dataset that stoke train holds
 * in memory (the default when it fits) is read once, so training does not pay it. A
 * file renamed over or deleted keeps being read as it was opened (the descriptor holds
 * the old file). */
typedef struct stoke_rfile {
    int fd;        /* -1: not open */
    uint64_t size; /* bytes, as opened: what the header was checked against */
} stoke_rfile;

/* Opens `path` with stoke_open_regular (core/regular.h: a FIFO or device is refused
 * without blocking). STOKE_ERR_NOTFOUND if it does not exist, STOKE_ERR_IO otherwise;
 * the message names the file and the reason. On failure f->fd is -1. */
stoke_status stoke_rfile_open(const char *path, stoke_rfile *f);
void stoke_rfile_close(stoke_rfile *f); /* closed or open; can't fail */

/* Reads exactly n bytes at `off` into buf. A read that ends early (the file shrank
 * since it was opened) or fails is STOKE_ERR_IO naming `path`, the sample (when
 * sample >= 0), the bytes wanted and the file's size now and when opened. Thread-safe
 * (no shared file position). */
stoke_status stoke_rfile_read(const stoke_rfile *f, const char *path, int64_t sample, void *buf,
                              size_t n, uint64_t off);

/* The same into several buffers, one after the other in the file (a record's input,
 * padding and target in one system call). At most 4 parts. */
typedef struct stoke_rfile_part {
    void *buf;
    size_t n;
} stoke_rfile_part;
stoke_status stoke_rfile_readv(const stoke_rfile *f, const char *path, int64_t sample,
                               const stoke_rfile_part *parts, int nparts, uint64_t off);

/* Reverses the bytes of each of n elements of elem_size bytes at p, in place (a file's
 * byte order differs from the host's). */
void stoke_swap_in_place(void *p, size_t n, size_t elem_size);

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
