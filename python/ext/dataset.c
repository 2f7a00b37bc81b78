/* dataset.c - stoke.Dataset's C side: a dataset in any format stoke reads, its facts,
 * single samples, and the per-channel statistics Normalize() measures. */
#include <stdlib.h>
#include <string.h>

#include "ext.h"
#include "stoke/data.h"

/* ---- small helpers ----------------------------------------------------------------- */

PyObject *stokepy_shape_tuple(const stoke_shape *s)
{
    PyObject *t = PyTuple_New(s->ndim);
    for (int i = 0; t && i < s->ndim; i++) {
        PyObject *v = PyLong_FromLongLong(s->dims[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, i, v);
    }
    return t;
}

/* An optional str argument: NULL for None. -1 with TypeError naming it otherwise. */
static int opt_str(PyObject *o, const char *name, const char **out)
{
    *out = NULL;
    if (!o || o == Py_None)
        return 0;
    if (!PyUnicode_Check(o))
        return stokepy_wrong_type(name, "a str or None", o);
    *out = PyUnicode_AsUTF8AndSize(o, NULL);
    return *out ? 0 : -1;
}

/* ---- Dataset ------------------------------------------------------------------------ */

static void dataset_dealloc(DatasetObject *self)
{
    stoke_dataset_close(self->d);
    stoke_dataset_close(self->file);
    stokepy_free((PyObject *)self);
}

static int dataset_init(DatasetObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path",         "input",     "target", "split",
                            "targets_path", "height",    "width",  "channels",
                            "regression",   "in_memory", NULL};
    PyObject *path_o = NULL, *input_o = NULL, *target_o = NULL, *split_o = NULL, *tp_o = NULL;
    int height = 0, width = 0, channels = 0, regression = 0, in_memory = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OOOOiiipp", names, PyUnicode_FSConverter,
                                     &path_o, &input_o, &target_o, &split_o, &tp_o, &height, &width,
                                     &channels, &regression, &in_memory))
        return -1;
    stoke_dataset_opts o = {.image_height = height,
                            .image_width = width,
                            .image_channels = channels,
                            .regression = regression};
    int rc = -1;
    if (opt_str(input_o, "input", &o.input_name) < 0 ||
        opt_str(target_o, "target", &o.target_name) < 0 ||
        opt_str(split_o, "split", &o.split) < 0 ||
        opt_str(tp_o, "targets_path", &o.targets_path) < 0)
        goto out;
    if (height < 0 || width < 0 || channels < 0) {
        PyErr_SetString(PyExc_ValueError, "image size and channels must not be negative");
        goto out;
    }
    stoke_dataset_close(self->d);
    stoke_dataset_close(self->file);
    self->d = self->file = NULL;
    const char *path = PyBytes_AsString(path_o);
    stoke_dataset *d = NULL, *mem = NULL;
    stoke_status st;
    Py_BEGIN_ALLOW_THREADS
        st = stoke_dataset_open(path, &o, &d);
        if (st == STOKE_OK && in_memory)
            st = stoke_dataset_load(d, &mem);
    Py_END_ALLOW_THREADS
    if (st != STOKE_OK) {
        stoke_dataset_close(d);
        stokepy_raise(st);
        goto out;
    }
    if (mem) {
        self->d = mem;
        self->file = d;
    } else {
        self->d = d;
    }
    rc = 0;
out:
    Py_DECREF(path_o);
    return rc;
}

int stokepy_dataset_ok(DatasetObject *self)
{
    if (self->d)
        return 1;
    PyErr_SetString(PyExc_ValueError, "the dataset is not open");
    return 0;
}

static PyObject *dataset_info(DatasetObject *self, void *closure)
{
    (void)closure;
    if (!stokepy_dataset_ok(self))
        return NULL;
    const stoke_dataset_info *i = stoke_dataset_get_info(self->d);
    /* what opening the file left out (image folders): the file's, not the copy's */
    const char *ex = NULL;
    int64_t skipped = stoke_dataset_skipped(self->file ? self->file : self->d, &ex);
    return Py_BuildValue(
        "{s:s,s:L,s:N,s:s,s:s,s:N,s:s,s:L,s:n,s:n,s:N,s:L,s:z}", "format", i->format, "count",
        (long long)i->count, "input_shape", stokepy_shape_tuple(&i->input_shape), "input_dtype",
        stoke_dtype_name(i->input_dtype), "target_kind", stoke_target_kind_name(i->target_kind),
        "target_shape", stokepy_shape_tuple(&i->target_shape), "target_dtype",
        i->target_kind == STOKE_TARGET_NONE ? "" : stoke_dtype_name(i->target_dtype), "num_classes",
        (long long)i->num_classes, "input_bytes", (Py_ssize_t)i->input_bytes, "target_bytes",
        (Py_ssize_t)i->target_bytes, "originals",
        PyBool_FromLong(stoke_dataset_has_originals(self->d)), "skipped", (long long)skipped,
        "skipped_example", ex);
}

static Py_ssize_t dataset_len(DatasetObject *self)
{
    if (!stokepy_dataset_ok(self))
        return -1;
    return (Py_ssize_t)stoke_dataset_get_info(self->d)->count;
}

/* read(i) -> (input bytes, target bytes or None): one sample as stored. */
static PyObject *dataset_read(DatasetObject *self, PyObject *arg)
{
    if (!stokepy_dataset_ok(self))
        return NULL;
    long long i = PyLong_AsLongLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    const stoke_dataset_info *info = stoke_dataset_get_info(self->d);
    PyObject *in = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)info->input_bytes);
    PyObject *tg = info->target_bytes
                       ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)info->target_bytes)
                       : (Py_INCREF(Py_None), Py_None);
    if (!in || !tg) {
        Py_XDECREF(in);
        Py_XDECREF(tg);
        return NULL;
    }
    char *pi = PyBytes_AsString(in), *pt = tg == Py_None ? NULL : PyBytes_AsString(tg);
    stoke_status st;
    Py_BEGIN_ALLOW_THREADS
        st = stoke_dataset_read(self->d, i, pi, pt);
    Py_END_ALLOW_THREADS
    if (st != STOKE_OK) {
        Py_DECREF(in);
        Py_DECREF(tg);
        return stokepy_raise(st);
    }
    return Py_BuildValue("(NN)", in, tg);
}

/* channel_stats(max_samples) -> (mean, std): per channel, as a normalize op without
 * given statistics uses them (stoke_dataset_channel_stats). */
static PyObject *dataset_channel_stats(DatasetObject *self, PyObject *arg)
{
    if (!stokepy_dataset_ok(self))
        return NULL;
    long long maxn = PyLong_AsLongLong(arg);
    if (maxn == -1 && PyErr_Occurred())
        return NULL;
    if (maxn < 1) {
        PyErr_Format(PyExc_ValueError, "channel_stats(%lld): at least 1 sample", maxn);
        return NULL;
    }
    int ch = 0;
    float m[4], sd[4];
    stoke_status st;
    Py_BEGIN_ALLOW_THREADS
        st = stoke_dataset_channel_stats(self->d, maxn, &ch, m, sd);
    Py_END_ALLOW_THREADS
    if (st != STOKE_OK)
        return stokepy_raise(st);
    PyObject *mean = PyList_New(ch), *std = PyList_New(ch);
    for (int c = 0; mean && std && c < ch; c++) {
        PyList_SetItem(mean, c, PyFloat_FromDouble(m[c]));
        PyList_SetItem(std, c, PyFloat_FromDouble(sd[c]));
    }
    return Py_BuildValue("(NN)", mean, std);
}

static PyObject *dataset_class_counts(DatasetObject *self, PyObject *unused)
{
    (void)unused;
    if (!stokepy_dataset_ok(self))
        return NULL;
    const stoke_dataset_info *info = stoke_dataset_get_info(self->d);
    if (info->target_kind != STOKE_TARGET_CLASS) {
        PyErr_SetString(PyExc_ValueError, "class_counts: the targets are not classes");
        return NULL;
    }
    int64_t *c = calloc((size_t)info->num_classes + 1, sizeof *c);
    if (!c)
        return PyErr_NoMemory();
    stoke_status st;
    Py_BEGIN_ALLOW_THREADS
        st = stoke_dataset_class_counts(self->d, c);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (st != STOKE_OK) {
        stokepy_raise(st);
    } else if ((out = PyList_New((Py_ssize_t)info->num_classes))) {
        for (int64_t k = 0; k < info->num_classes; k++)
            PyList_SetItem(out, k, PyLong_FromLongLong(c[k]));
    }
    free(c);
    return out;
}

static PyMethodDef dataset_methods[] = {
    {"read", (PyCFunction)dataset_read, METH_O, "read(i) -> (input bytes, target bytes|None)"},
    {"channel_stats", (PyCFunction)dataset_channel_stats, METH_O,
     "channel_stats(max_samples) -> (mean list, std list)"},
    {"class_counts", (PyCFunction)dataset_class_counts, METH_NOARGS, "samples per class"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef dataset_getset[] = {
    {"info", (getter)dataset_info, NULL, "what the file holds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot dataset_slots[] = {
    {Py_tp_doc, "A dataset in a format stoke reads (docs/data.md)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, dataset_init},
    {Py_tp_dealloc, dataset_dealloc},
    {Py_tp_methods, dataset_methods},
    {Py_tp_getset, dataset_getset},
    {Py_sq_length, dataset_len},
    {0, NULL},
};

static PyType_Spec dataset_spec = {
    .name = "_stoke.Dataset",
    .basicsize = sizeof(DatasetObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = dataset_slots,
};

PyTypeObject *stokepy_DatasetType;

int stokepy_add_dataset(PyObject *m)
{
    stokepy_DatasetType = stokepy_add_type(m, &dataset_spec);
    return stokepy_DatasetType ? 0 : -1;
}
