/* data.h - the data pipeline: datasets in the formats people have, a sampler, seeded
 * transforms, and a loader whose worker threads fill a ring of prefetched batch slots
 * (pinned, with an asynchronous device copy, where the CUDA runtime is loadable). */
#ifndef STOKE_DATA_H
#define STOKE_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Element types and shapes ------------------------------------------------- */

typedef enum stoke_dtype {
    STOKE_U8 = 0,
    STOKE_I8,
    STOKE_U16,
    STOKE_I16,
    STOKE_U32,
    STOKE_I32,
    STOKE_I64,
    STOKE_F16,
    STOKE_BF16,
    STOKE_F32,
    STOKE_F64,
    STOKE_DTYPE_COUNT
} stoke_dtype;

size_t stoke_dtype_size(stoke_dtype t);      /* bytes per element; 0 if invalid */
const char *stoke_dtype_name(stoke_dtype t); /* "uint8", "float32", ...; "?" if invalid */

#define STOKE_MAX_DIMS 8

/* The shape of ONE sample (no batch dimension). ndim 0 is a scalar. */
typedef struct stoke_shape {
    int ndim;
    int64_t dims[STOKE_MAX_DIMS];
} stoke_shape;

int64_t stoke_shape_elems(const stoke_shape *s); /* product of dims; 1 for a scalar */

/* Formats a shape as "(28, 28)" or "()" into buf and returns buf. */
char *stoke_shape_format(const stoke_shape *s, char *buf, size_t size);

/* ---- Datasets ------------------------------------------------------------------ */

typedef enum stoke_target_kind {
    STOKE_TARGET_NONE = 0, /* inputs only */
    STOKE_TARGET_CLASS,    /* one integer class index per sample (ndim 0) */
    STOKE_TARGET_SCALAR,   /* one float per sample (regression, ndim 0) */
    STOKE_TARGET_VECTOR,   /* a vector or tensor per sample */
} stoke_target_kind;

typedef struct stoke_dataset_info {
    char format[16];          /* "idx", "npy", "hdf5", "images", "records" */
    int64_t count;            /* number of samples */
    stoke_shape input_shape;  /* per sample, e.g. (28, 28) or (224, 224, 3) */
    stoke_dtype input_dtype;
    stoke_target_kind target_kind;
    stoke_shape target_shape; /* per sample; ndim 0 for class and scalar targets */
    stoke_dtype target_dtype;
    int64_t num_classes;      /* for class targets: max label + 1, or the folder count
                                 for image folders; 0 otherwise */
    size_t input_bytes;       /* bytes of one sample's input, as read */
    size_t target_bytes;      /* bytes of one sample's target, as read (0 if none) */
} stoke_dataset_info;

/* Options for opening; zero-initialize and set what applies. */
typedef struct stoke_dataset_opts {
    const char *split;        /* IDX directories: "train" (default) or "test"
                                 (t10k files); image folders: a subdirectory name */
    const char *targets_path; /* NPY: the targets file when PATH names the inputs
                                 (default: PATH with "x"/"inputs" -> "y"/"targets",
                                 see docs/data.md) */
    const char *input_name;   /* HDF5: dataset of inputs (default "inputs", then "x",
                                 "data", "features") */
    const char *target_name;  /* HDF5: dataset of targets (default "targets", then
                                 "y", "labels") */
    int image_height;         /* image folders: every image is resized to this */
    int image_width;          /*   (default 224 x 224) */
    int image_channels;       /* image folders: 1 or 3 (default 3) */
    bool regression;          /* float targets of ndim 0 are SCALAR, not CLASS (for
                                 integer-valued float files) */
} stoke_dataset_opts;

typedef struct stoke_dataset stoke_dataset;

/* Opens the dataset at `path`, recognising the format from its contents:
 * a directory of IDX files (train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz],
 * or t10k-* for split "test"), an IDX file, an NPY file (with its targets file), an
 * HDF5 file, a directory with one subdirectory of JPEG/PNG images per class, or a
 * stoke packed-records file. The whole file header (and, for records, the whole file
 * size) is checked here so nothing fails halfway through an epoch.
 * opts may be NULL. On failure *out is NULL and the message names the file, the
 * offset or field, and what was wrong (STOKE_ERR_NOTFOUND, STOKE_ERR_FORMAT,
 * STOKE_ERR_IO). On success close with stoke_dataset_close. */
stoke_status stoke_dataset_open(const char *path, const stoke_dataset_opts *opts,
                                stoke_dataset **out);

const stoke_dataset_info *stoke_dataset_get_info(const stoke_dataset *d);

/* Reads sample i: its input into `input` (info.input_bytes) and its target into
 * `target` (info.target_bytes; may be NULL to skip). Thread-safe: many workers may
 * read at once. Errors (STOKE_ERR_FORMAT, STOKE_ERR_IO, STOKE_ERR_ARG for i out of
 * range) name the file and the sample index. */
stoke_status stoke_dataset_read(stoke_dataset *d, int64_t i, void *input, void *target);

void stoke_dataset_close(stoke_dataset *d); /* NULL is fine */

/* Class balance: counts[c] = samples of class c, for c < info.num_classes (the caller
 * allocates num_classes entries). STOKE_ERR_ARG if the targets are not classes. */
stoke_status stoke_dataset_class_counts(stoke_dataset *d, int64_t *counts);

/* Writes every sample of `d` as a stoke packed-records file at `path` (format in
 * docs/formats.md), through a temporary file renamed into place at the end, so a
 * failure never leaves a partial file under `path`. `progress` (may be NULL) is called
 * now and then with samples done and total. */
stoke_status stoke_records_write(stoke_dataset *d, const char *path,
                                 void (*progress)(void *ctx, int64_t done, int64_t total),
                                 void *ctx);

/* ---- Sampler, transforms and loader: see below ----------------------------------- */

#ifdef __cplusplus
}
#endif
#endif
