/* ext.h - the parts of the _stoke extension module (docs/python.md). Each file adds its
 * types and functions to the module; errors go through stokepy_raise so every stoke
 * failure reaches Python as an exception carrying stoke's own message.
 *
 * The module is built against CPython's stable ABI (Py_LIMITED_API 3.11, set in
 * python/CMakeLists.txt), so the one _stoke.abi3.so built with Debian's 3.11 also
 * imports on a GPU machine's later Python (3.12 with PyTorch, and no headers there to
 * build against). Hence heap types from PyType_Spec rather than static PyTypeObjects,
 * and no macro or struct field that reaches into an object's layout. */
#ifndef STOKEPY_EXT_H
#define STOKEPY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include "stoke/core.h"

struct stoke_mon_pipeline;

/* Raises the exception class of `st` (stoke.ArgumentError, stoke.FormatError, ...)
 * with stoke_last_error() as its message and `status` set; returns NULL. */
PyObject *stokepy_raise(stoke_status st);

/* Sets d[key] = v and drops the reference to v (which may be NULL: a failed
 * constructor); -1 on failure. For building result dicts in one expression. */
int stokepy_put(PyObject *d, const char *key, PyObject *v);

/* Creates the heap type `spec` describes and adds it to m under its name: a new
 * reference the caller keeps for the module's life, or NULL on failure. */
PyTypeObject *stokepy_add_type(PyObject *m, PyType_Spec *spec);

/* The end of every tp_dealloc: frees self with its type's tp_free (a Python subclass's
 * may be the GC's) and drops the reference each instance of a heap type holds. */
void stokepy_free(PyObject *self);

/* Raises TypeError "<what> must be <expected>, not <o's type>"; returns -1. */
int stokepy_wrong_type(const char *what, const char *expected, PyObject *o);

/* The module's parts, each called once by the module's init; -1 with an exception set
 * on failure. */
int stokepy_add_errors(PyObject *m);
int stokepy_add_data(PyObject *m);    /* loader.c: LoaderCore, Array, sampler, tuner (loader.h) */
int stokepy_add_dataset(PyObject *m); /* dataset.c: Dataset (called by stokepy_add_data) */
int stokepy_add_monitor(PyObject *m); /* monitor.c: Monitor */
int stokepy_add_probe(PyObject *m);   /* probe.c: probe(), recommend() */

/* stoke.Dataset's object, which loaders read from. */
struct stoke_dataset;
typedef struct {
    PyObject_HEAD struct stoke_dataset *d;
    struct stoke_dataset *file; /* the opened file when d is its copy in memory, else NULL */
} DatasetObject;
extern PyTypeObject *stokepy_DatasetType;
/* 1 if open, else 0 with ValueError set. */
int stokepy_dataset_ok(DatasetObject *self);
/* A tuple of a shape's dimensions (new reference, NULL on failure). */
struct stoke_shape;
PyObject *stokepy_shape_tuple(const struct stoke_shape *s);

/* The input pipeline the monitors report (a stoke_mon_pipeline_fn): the loader that
 * handed out a batch most recently, if it is still open. Runs on a monitor's sampler
 * thread without the GIL; thread-safe against loaders being created and freed. */
bool stokepy_pipeline(void *ctx, struct stoke_mon_pipeline *out);

#endif
