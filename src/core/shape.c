/* shape.c - element types and per-sample shapes (core.h): their sizes, names and
 * printed form. */
#include <inttypes.h>
#include <stdio.h>

#include "stoke/core.h"

/* ---- dtypes and shapes ----------------------------------------------------------- */

static const struct {
    const char *name;
    size_t size;
} dtypes[STOKE_DTYPE_COUNT] = {
    [STOKE_U8] = {"uint8", 1},    [STOKE_I8] = {"int8", 1},     [STOKE_U16] = {"uint16", 2},
    [STOKE_I16] = {"int16", 2},   [STOKE_U32] = {"uint32", 4},  [STOKE_I32] = {"int32", 4},
    [STOKE_I64] = {"int64", 8},   [STOKE_F16] = {"float16", 2}, [STOKE_BF16] = {"bfloat16", 2},
    [STOKE_F32] = {"float32", 4}, [STOKE_F64] = {"float64", 8},
};

size_t stoke_dtype_size(stoke_dtype t)
{
    return (unsigned)t < STOKE_DTYPE_COUNT ? dtypes[t].size : 0;
}

const char *stoke_dtype_name(stoke_dtype t)
{
    return (unsigned)t < STOKE_DTYPE_COUNT ? dtypes[t].name : "?";
}

int64_t stoke_shape_elems(const stoke_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim && i < STOKE_MAX_DIMS; i++)
        n *= s->dims[i];
    return n;
}

char *stoke_shape_format(const stoke_shape *s, char *buf, size_t size)
{
    if (size == 0)
        return buf;
    size_t len = 0;
    buf[0] = '\0';
    int nd = s->ndim < 0 ? 0 : s->ndim > STOKE_MAX_DIMS ? STOKE_MAX_DIMS : s->ndim;
    len += (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < nd && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "", s->dims[i]);
    /* Python's spelling, which the people reading it know: (5,) is one dimension. */
    if (len < size)
        snprintf(buf + len, size - len, nd == 1 ? ",)" : ")");
    return buf;
}
