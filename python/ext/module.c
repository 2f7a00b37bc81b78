/* module.c - the _stoke extension module: its init and the exception classes. */
#include <stdio.h>

#include "ext.h"

static PyObject *errors[8]; /* by stoke_status; [0] is the base class stoke.Error */

PyObject *stokepy_raise(stoke_status st)
{
    int i = st > 0 && st < (int)(sizeof errors / sizeof *errors) && errors[st] ? (int)st : 0;
    PyObject *exc = PyObject_CallFunction(errors[i], "s", stoke_last_error());
    if (!exc)
        return NULL;
    PyObject *name = PyUnicode_FromString(stoke_status_name(st));
    if (name) {
        PyObject_SetAttrString(exc, "status", name);
        Py_DECREF(name);
    }
    PyErr_SetObject(errors[i], exc);
    Py_DECREF(exc);
    return NULL;
}

int stokepy_put(PyObject *d, const char *key, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

PyTypeObject *stokepy_add_type(PyObject *m, PyType_Spec *spec)
{
    PyObject *t = PyType_FromModuleAndSpec(m, spec, NULL);
    if (!t || PyModule_AddType(m, (PyTypeObject *)t) < 0) {
        Py_XDECREF(t);
        return NULL;
    }
    return (PyTypeObject *)t;
}

void stokepy_free(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF((PyObject *)tp);
}

/* The type's __name__: tp_name is not in the stable ABI. The two agree for the
 * built-in types and for classes defined in Python. */
int stokepy_wrong_type(const char *what, const char *expected, PyObject *o)
{
    PyObject *name = PyType_GetName(Py_TYPE(o));
    if (name) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, not %U", what, expected, name);
        Py_DECREF(name);
    }
    return -1;
}

/* Each class is also the built-in exception a Python user would catch for the same
 * fault, so `except FileNotFoundError` works on a missing dataset. */
int stokepy_add_errors(PyObject *m)
{
    static const struct {
        stoke_status st;
        const char *name;
        PyObject **builtin;
    } table[] = {
        {STOKE_ERR_ARG, "ArgumentError", &PyExc_ValueError},
        {STOKE_ERR_IO, "FileError", &PyExc_OSError},
        {STOKE_ERR_FORMAT, "FormatError", &PyExc_ValueError},
        {STOKE_ERR_NOMEM, "OutOfMemoryError", &PyExc_MemoryError},
        {STOKE_ERR_UNAVAILABLE, "UnavailableError", &PyExc_RuntimeError},
        {STOKE_ERR_SYSTEM, "SystemFailure", &PyExc_OSError},
        {STOKE_ERR_NOTFOUND, "NotFoundError", &PyExc_FileNotFoundError},
    };
    errors[0] = PyErr_NewExceptionWithDoc("stoke.Error",
                                          "A stoke failure; `status` names its kind "
                                          "(argument, io, format, ...).",
                                          NULL, NULL);
    if (!errors[0] || PyModule_AddObjectRef(m, "Error", errors[0]) < 0)
        return -1;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "stoke.%s", table[i].name);
        PyObject *bases = PyTuple_Pack(2, errors[0], *table[i].builtin);
        if (!bases)
            return -1;
        PyObject *cls = PyErr_NewException(qual, bases, NULL);
        Py_DECREF(bases);
        if (!cls || PyModule_AddObjectRef(m, table[i].name, cls) < 0)
            return -1;
        errors[table[i].st] = cls;
    }
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_stoke",
    "stoke's C library for Python: datasets, the loader, the monitor and the probe "
    "(use the package `stoke`, docs/python.md).",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__stoke(void);
PyMODINIT_FUNC PyInit__stoke(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    /* the library's version: the package is built from the same sources, so the two
     * cannot differ */
    if (PyModule_AddStringConstant(m, "__version__", STOKE_VERSION) < 0 ||
        stokepy_add_errors(m) < 0 || stokepy_add_data(m) < 0 || stokepy_add_monitor(m) < 0 ||
        stokepy_add_probe(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
