/* train.h - checkpoints (safetensors), YAML model files, and the training loop that
 * ties the loader, the model, the optimizer and the monitor together. */
#ifndef STOKE_TRAIN_H
#define STOKE_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"
#include "stoke/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Checkpoints: safetensors files (checkpoint.c, docs/checkpoint.md) ----------
 * The layout is Hugging Face's safetensors: an 8-byte little-endian header length N,
 * N bytes of JSON mapping each tensor name to {"dtype", "shape", "data_offsets"}
 * (offsets relative to the data that follows the header) plus "__metadata__", a
 * string -> string object, then the raw little-endian tensor bytes. */

/* One named tensor. Writers fill every field but nbytes (computed); readers get
 * pointers into the opened checkpoint (valid until stoke_ckpt_close). */
typedef struct stoke_ckpt_tensor {
    const char *name;
    stoke_dtype dtype;        /* any stoke dtype; safetensors names F32, BF16, I64, ... */
    int ndim;                 /* 0..STOKE_MAX_DIMS (0 is a scalar) */
    int64_t shape[STOKE_MAX_DIMS];
    const void *data;         /* elems x dtype size bytes */
    size_t nbytes;
} stoke_ckpt_tensor;

typedef struct stoke_ckpt_kv {
    const char *key;
    const char *value;
} stoke_ckpt_kv;

/* Writes the tensors (in the given order) and the metadata to `path` atomically: into
 * "<path>.tmp-<pid>" in the same directory, fsync, rename over `path`, fsync of the
 * directory. A crash at any point leaves either the previous file or the new one under
 * `path` (a SIGKILL may leave the temporary file behind; the next write from a process
 * with the same pid reuses it). Names must be unique and non-empty, metadata keys
 * unique and not "__metadata__" (STOKE_ERR_ARG naming the tensor or key); write
 * failures are STOKE_ERR_IO naming the file. */
stoke_status stoke_ckpt_write(const char *path, const stoke_ckpt_tensor *tensors,
                              size_t ntensors, const stoke_ckpt_kv *meta, size_t nmeta);

typedef struct stoke_ckpt stoke_ckpt;

/* Reads the whole file at `path` and checks all of it before returning: the header
 * length within the file (and at most 100 MB), valid JSON, every entry's dtype, shape
 * and data_offsets, sizes equal to elems x dtype size, no overlaps and no holes (the
 * tensors tile the data exactly), metadata values strings. Errors (STOKE_ERR_FORMAT)
 * name the file, the tensor or key, and the file offset; STOKE_ERR_NOTFOUND / IO if it
 * cannot be read. On success close with stoke_ckpt_close. */
stoke_status stoke_ckpt_open(const char *path, stoke_ckpt **out);

/* The same checks over a file already in memory (`size` bytes, copied); `name` is what
 * the messages call it. For fuzzing and for tests. */
stoke_status stoke_ckpt_open_memory(const void *data, size_t size, const char *name,
                                    stoke_ckpt **out);

size_t stoke_ckpt_count(const stoke_ckpt *c);
/* Tensors in file (offset) order. i < count. */
const stoke_ckpt_tensor *stoke_ckpt_tensor_at(const stoke_ckpt *c, size_t i);
/* The tensor called `name`, or NULL. */
const stoke_ckpt_tensor *stoke_ckpt_find(const stoke_ckpt *c, const char *name);
/* The metadata value of `key`, or NULL. */
const char *stoke_ckpt_meta(const stoke_ckpt *c, const char *key);
size_t stoke_ckpt_meta_count(const stoke_ckpt *c);
const stoke_ckpt_kv *stoke_ckpt_meta_at(const stoke_ckpt *c, size_t i);
/* The file name given to open. */
const char *stoke_ckpt_path(const stoke_ckpt *c);

void stoke_ckpt_close(stoke_ckpt *c); /* NULL is fine */

/* safetensors' dtype names ("F32", "BF16", "I64", "U8", ...) <-> stoke dtypes.
 * stoke_ckpt_dtype_parse returns false for a name it does not know. */
const char *stoke_ckpt_dtype_name(stoke_dtype t);
bool stoke_ckpt_dtype_parse(const char *name, stoke_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
