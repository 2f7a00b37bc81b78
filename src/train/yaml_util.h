/* yaml_util.h - YAML documents as stoke's readers take them (model files, --config
 * files): loaded only once they are known to be shallow, alias-free, untagged, single
 * documents without duplicate keys, so each reader checks just its own schema. */
#ifndef STOKE_TRAIN_YAML_UTIL_H
#define STOKE_TRAIN_YAML_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "stoke/core.h"

/* Lists and mappings nest at most this deep in any stoke YAML file. A model's 64
 * residual blocks (model_file.c) take 2 levels each, so no valid file comes near; the
 * readers' recursion stays a few hundred frames (far from any stack, ASan's included),
 * and libyaml never sees the deep part (see yaml_util.c on why that matters). */
#define TRAIN_YAML_MAX_DEPTH 256

/* The largest YAML file a reader reads from disk (a model or config file is a few
 * hundred bytes). */
#define TRAIN_YAML_MAX_FILE (16u << 20)

/* Loads the one YAML document in `len` bytes of `text` into *doc (which the caller
 * deletes with yaml_document_delete on success; its root is NULL for an empty text).
 * `name` is what messages call the text. Refused with STOKE_ERR_FORMAT, naming name,
 * line and column (1-based) and the key the problem sits under: invalid YAML, nesting
 * deeper than TRAIN_YAML_MAX_DEPTH, an alias (*name), an explicit tag (!!int, !x), a
 * second document, a key given twice in one mapping (naming both lines). With
 * `dash_is_underscore`, keys that differ only in '-' against '_' count as the same key
 * (batch-size and batch_size are one setting). STOKE_ERR_NOMEM when out of memory;
 * on any error *doc holds nothing to delete. */
stoke_status train_yaml_load(const char *text, size_t len, const char *name,
                             bool dash_is_underscore, yaml_document_t *doc);

/* Reads the regular file at `path` (at most TRAIN_YAML_MAX_FILE bytes; opened through
 * stoke_fopen_regular, so a FIFO or device is refused, never waited on) into a
 * malloc'd, NUL-terminated buffer the caller frees. STOKE_ERR_NOTFOUND / STOKE_ERR_IO
 * name the path, the context `unopened` if not NULL, and the reason ("PATH: not a
 * preset (...): cannot open: No such file or directory", "PATH: is a FIFO (named
 * pipe), not a regular file"), STOKE_ERR_FORMAT a file that is too large. */
stoke_status train_yaml_read_file(const char *path, const char *unopened, char **text, size_t *len);

/* True for YAML's null: an empty plain value, ~, null, Null or NULL. */
/* STOKE_ERR_FORMAT with "FILE:LINE:COL: FIELD: message": the node's place (1-based;
 * 1:1 when n is NULL), for every YAML reader's errors. */
stoke_status train_yaml_fail(const char *file, const yaml_node_t *n, const char *field,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));

bool train_yaml_is_null(const yaml_node_t *n);

/* What a value is, for "expected X, got Y" messages: 'text' (a scalar, quoted and cut
 * to fit), "nothing (null)", "a mapping" or "a list". Returns buf. */
const char *train_yaml_what(const yaml_node_t *n, char *buf, size_t size);

#endif
