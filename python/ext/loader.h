/* loader.h - private to loader.c, batch.c, options.c and stokepy_data_functions.c: the loader
 * core's and a batch's objects, which the four share, and the helpers each lends the
 * others. */
#ifndef STOKEPY_LOADER_H
#define STOKEPY_LOADER_H

#include <dlpack/dlpack.h>
#include <sys/types.h>

#include "ext.h"
#include "stoke/data.h"

typedef struct {
    PyObject_HEAD stoke_loader *l;
    PyObject *dataset; /* keeps the dataset open while the loader reads it */
    int device;        /* the CUDA device batches are copied to, when they are */
    bool closed;       /* workers stopped: no more batches */
    bool busy;         /* a thread is inside next() (checked and set under the GIL) */
    pid_t pid;         /* the process whose threads these are */
    stoke_transform_opts to;
    stoke_op ops[16];
} CoreObject;

/* A batch's buffers, given back to the loader when the last array viewing them goes. */
typedef struct {
    PyObject_HEAD CoreObject *core;
    void *token;
} HoldObject;

typedef struct {
    PyObject_HEAD HoldObject *hold;
    void *data;
    int64_t shape[STOKE_MAX_DIMS + 1];
    int ndim;
    DLDataType dtype;
    DLDevice device;
    void *event; /* device batches: the copy's event, for the consumer's stream */
} ArrayObject;

/* batch.c: the hold's and the array's types, created by stokepy_add_data. */
extern PyType_Spec stokepy_hold_spec, stokepy_array_spec;
extern PyTypeObject *stokepy_HoldType, *stokepy_ArrayType;
/* An array of n samples of shape s over `data`, keeping h alive; NULL on failure. */
ArrayObject *stokepy_new_array(HoldObject *h, void *data, int64_t n, const stoke_shape *s,
                               stoke_dtype t, const stoke_batch *b, int device);

/* options.c: an options dict's entries (a missing key leaves *out as it is; -1 with an
 * exception set on a wrong one) and a transform dict, parsed into self->to and self->ops. */
int stokepy_get_i64(PyObject *d, const char *k, int64_t *out);
int stokepy_get_u64(PyObject *d, const char *k, uint64_t *out);
int stokepy_get_int(PyObject *d, const char *k, int *out);
int stokepy_get_bool(PyObject *d, const char *k, bool *out);
int stokepy_parse_transform(CoreObject *self, PyObject *t);

/* data_functions.c: the module's functions, added by stokepy_add_data. */
extern PyMethodDef stokepy_data_functions[];

#endif
