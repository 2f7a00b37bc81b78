/* memory.c - datasets held in memory: over a caller's arrays (borrowed or copied), or
 * a full copy of any other dataset, so benchmarks and tests run without files; and a
 * prefix of another dataset, read through to it. */
#include "data/dataset_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mem_impl {
    const unsigned char *inputs, *targets;
    void *owned_inputs, *owned_targets; /* freed at close; NULL when borrowed */
} mem_impl;

static stoke_status mem_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    const mem_impl *m = d->impl;
    size_t ib = d->info.input_bytes, tb = d->info.target_bytes;
    memcpy(input, m->inputs + (size_t)i * ib, ib);
    if (target && tb)
        memcpy(target, m->targets + (size_t)i * tb, tb);
    return STOKE_OK;
}

static void mem_close(stoke_dataset *d)
{
    mem_impl *m = d->impl;
    if (m) {
        free(m->owned_inputs);
        free(m->owned_targets);
        free(m);
    }
    d->impl = NULL;
}

static const stoke_dataset_vt mem_vt = {.read = mem_read, .close = mem_close};

static stoke_status check_info(const stoke_dataset_info *info)
{
    if (info->count < 0)
        return stoke_fail(STOKE_ERR_ARG, "memory dataset: count %" PRId64 " < 0", info->count);
    if (info->input_shape.ndim < 0 || info->input_shape.ndim > STOKE_MAX_DIMS ||
        info->target_shape.ndim < 0 || info->target_shape.ndim > STOKE_MAX_DIMS)
        return stoke_fail(STOKE_ERR_ARG, "memory dataset: ndim outside 0..%d", STOKE_MAX_DIMS);
    size_t want =
        (size_t)stoke_shape_elems(&info->input_shape) * stoke_dtype_size(info->input_dtype);
    if (want == 0 || info->input_bytes != want)
        return stoke_fail(STOKE_ERR_ARG,
                          "memory dataset: input_bytes %zu does not match the shape and "
                          "dtype (%zu)",
                          info->input_bytes, want);
    size_t twant =
        info->target_kind == STOKE_TARGET_NONE
            ? 0
            : (size_t)stoke_shape_elems(&info->target_shape) * stoke_dtype_size(info->target_dtype);
    if (info->target_bytes != twant)
        return stoke_fail(STOKE_ERR_ARG,
                          "memory dataset: target_bytes %zu does not match the target "
                          "kind, shape and dtype (%zu)",
                          info->target_bytes, twant);
    return STOKE_OK;
}

/* Builds the dataset around arrays whose ownership is already decided. */
static stoke_status wrap(const stoke_dataset_info *info, const void *inputs, const void *targets,
                         void *own_in, void *own_tg, stoke_dataset **out)
{
    stoke_dataset *d = calloc(1, sizeof *d);
    mem_impl *m = calloc(1, sizeof *m);
    if (!d || !m) {
        free(d);
        free(m);
        free(own_in);
        free(own_tg);
        return stoke_fail(STOKE_ERR_NOMEM, "memory dataset: out of memory");
    }
    m->inputs = inputs;
    m->targets = targets;
    m->owned_inputs = own_in;
    m->owned_targets = own_tg;
    d->vt = &mem_vt;
    d->info = *info;
    snprintf(d->info.format, sizeof d->info.format, "memory");
    snprintf(d->path, sizeof d->path, "(memory)");
    d->impl = m;
    *out = d;
    return STOKE_OK;
}

stoke_status stoke_dataset_from_arrays(const stoke_dataset_info *info, const void *inputs,
                                       const void *targets, bool copy, stoke_dataset **out)
{
    *out = NULL;
    stoke_status st = check_info(info);
    if (st != STOKE_OK)
        return st;
    if ((!inputs && info->count > 0) || (!targets && info->target_bytes && info->count > 0))
        return stoke_fail(STOKE_ERR_ARG, "memory dataset: NULL %s array",
                          inputs ? "targets" : "inputs");
    if (!copy)
        return wrap(info, inputs, info->target_bytes ? targets : NULL, NULL, NULL, out);
    size_t ni = (size_t)info->count * info->input_bytes;
    size_t nt = (size_t)info->count * info->target_bytes;
    void *ci = malloc(ni ? ni : 1), *ct = nt ? malloc(nt) : NULL;
    if (!ci || (nt && !ct)) {
        free(ci);
        free(ct);
        return stoke_fail(STOKE_ERR_NOMEM, "memory dataset: cannot allocate %zu bytes", ni + nt);
    }
    if (ni)
        memcpy(ci, inputs, ni);
    if (nt)
        memcpy(ct, targets, nt);
    return wrap(info, ci, ct, ci, ct, out);
}

stoke_status stoke_dataset_load(stoke_dataset *src, stoke_dataset **out)
{
    *out = NULL;
    const stoke_dataset_info *info = &src->info;
    size_t ni = (size_t)info->count * info->input_bytes;
    size_t nt = (size_t)info->count * info->target_bytes;
    unsigned char *ci = malloc(ni ? ni : 1), *ct = nt ? malloc(nt) : NULL;
    if (!ci || (nt && !ct)) {
        free(ci);
        free(ct);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: cannot allocate %zu bytes to load it", src->path,
                          ni + nt);
    }
    for (int64_t i = 0; i < info->count; i++) {
        /* Straight through the table: the index is in range by construction. */
        stoke_status st = src->vt->read(src, i, ci + (size_t)i * info->input_bytes,
                                        ct ? ct + (size_t)i * info->target_bytes : NULL);
        if (st != STOKE_OK) {
            free(ci);
            free(ct);
            return st;
        }
    }
    stoke_status st = wrap(info, ci, ct, ci, ct, out);
    if (st == STOKE_OK) /* its messages still name the file the samples came from */
        snprintf((*out)->path, sizeof(*out)->path, "%s", src->path);
    return st;
}

/* ---- a prefix of another dataset, read through ---------------------------------- */

static stoke_status prefix_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    stoke_dataset *src = d->impl;
    return src->vt->read(src, i, input, target);
}

static stoke_status prefix_read_window(stoke_dataset *d, int64_t i, stoke_image_window_fn fn,
                                       void *ctx, void *input, void *target)
{
    stoke_dataset *src = d->impl;
    return src->vt->read_window(src, i, fn, ctx, input, target);
}

static void prefix_close(stoke_dataset *d) { d->impl = NULL; /* src is borrowed */ }

static const stoke_dataset_vt prefix_vt = {.read = prefix_read, .close = prefix_close};
static const stoke_dataset_vt prefix_window_vt = {
    .read = prefix_read, .read_window = prefix_read_window, .close = prefix_close};

stoke_status stoke_dataset_prefix(stoke_dataset *src, int64_t n, stoke_dataset **out)
{
    *out = NULL;
    if (n < 0 || n > src->info.count)
        return stoke_fail(STOKE_ERR_ARG, "%s: a prefix of %" PRId64 " of its %" PRId64 " samples",
                          src->path, n, src->info.count);
    stoke_dataset *d = calloc(1, sizeof *d);
    if (!d)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", src->path);
    d->vt = src->vt->read_window ? &prefix_window_vt : &prefix_vt;
    d->info = src->info;
    d->info.count = n;
    snprintf(d->path, sizeof d->path, "%s", src->path);
    d->impl = src;
    *out = d;
    return STOKE_OK;
}
