/* data.c - datasets, the loader and its batches for Python. Batches leave as DLPack
 * tensors over the loader's own buffers (opts.hold): a batch's buffers go back to the
 * loader only when the last tensor viewing them is freed, so nothing is overwritten
 * under a live tensor and nothing is copied. */
#include <dlpack/dlpack.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"
#include "stoke/data.h"
#include "stoke/monitor.h"
#include "stoke/tune.h"

/* How long the consumer waits inside C before it looks at Python's signals: Ctrl-C
 * takes effect within this much (plus one chunk of samples with no workers). */
#define WAIT_SLICE_S 0.05

/* ---- the loader the monitors report ------------------------------------------------ */

static pthread_mutex_t active_mu = PTHREAD_MUTEX_INITIALIZER;
static stoke_loader *active; /* under active_mu */

bool stokepy_pipeline(void *ctx, struct stoke_mon_pipeline *out)
{
    (void)ctx;
    pthread_mutex_lock(&active_mu);
    bool ok = active && stoke_loader_pipeline(active, out);
    pthread_mutex_unlock(&active_mu);
    return ok;
}

static void set_active(stoke_loader *l)
{
    pthread_mutex_lock(&active_mu);
    active = l;
    pthread_mutex_unlock(&active_mu);
}

/* Called before a loader is destroyed: a monitor's sampler must not read it after. */
static void drop_active(stoke_loader *l)
{
    pthread_mutex_lock(&active_mu);
    if (active == l)
        active = NULL;
    pthread_mutex_unlock(&active_mu);
}

/* ---- small helpers ----------------------------------------------------------------- */

static PyObject *shape_tuple(const stoke_shape *s)
{
    PyObject *t = PyTuple_New(s->ndim);
    for (int i = 0; t && i < s->ndim; i++) {
        PyObject *v = PyLong_FromLongLong(s->dims[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static const char *target_kind_name(stoke_target_kind k)
{
    switch (k) {
    case STOKE_TARGET_NONE: return "none";
    case STOKE_TARGET_CLASS: return "class";
    case STOKE_TARGET_SCALAR: return "scalar";
    case STOKE_TARGET_VECTOR: return "vector";
    }
    return "?";
}

/* An optional str argument: NULL for None. -1 with TypeError naming it otherwise. */
static int opt_str(PyObject *o, const char *name, const char **out)
{
    *out = NULL;
    if (!o || o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str or None, not %s", name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyUnicode_AsUTF8(o);
    return *out ? 0 : -1;
}

/* ---- Dataset ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD stoke_dataset *d;
    stoke_dataset *file; /* the opened file when d is its copy in memory, else NULL */
} DatasetObject;

static void dataset_dealloc(DatasetObject *self)
{
    stoke_dataset_close(self->d);
    stoke_dataset_close(self->file);
    Py_TYPE(self)->tp_free((PyObject *)self);
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
    const char *path = PyBytes_AS_STRING(path_o);
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

static int dataset_ok(DatasetObject *self)
{
    if (self->d)
        return 1;
    PyErr_SetString(PyExc_ValueError, "the dataset is not open");
    return 0;
}

static PyObject *dataset_info(DatasetObject *self, void *closure)
{
    (void)closure;
    if (!dataset_ok(self))
        return NULL;
    const stoke_dataset_info *i = stoke_dataset_get_info(self->d);
    return Py_BuildValue(
        "{s:s,s:L,s:N,s:s,s:s,s:N,s:s,s:L,s:n,s:n}", "format", i->format, "count",
        (long long)i->count, "input_shape", shape_tuple(&i->input_shape), "input_dtype",
        stoke_dtype_name(i->input_dtype), "target_kind", target_kind_name(i->target_kind),
        "target_shape", shape_tuple(&i->target_shape), "target_dtype",
        i->target_kind == STOKE_TARGET_NONE ? "" : stoke_dtype_name(i->target_dtype), "num_classes",
        (long long)i->num_classes, "input_bytes", (Py_ssize_t)i->input_bytes, "target_bytes",
        (Py_ssize_t)i->target_bytes);
}

static Py_ssize_t dataset_len(DatasetObject *self)
{
    if (!dataset_ok(self))
        return -1;
    return (Py_ssize_t)stoke_dataset_get_info(self->d)->count;
}

/* read(i) -> (input bytes, target bytes or None): one sample as stored. */
static PyObject *dataset_read(DatasetObject *self, PyObject *arg)
{
    if (!dataset_ok(self))
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
    char *pi = PyBytes_AS_STRING(in), *pt = tg == Py_None ? NULL : PyBytes_AS_STRING(tg);
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

/* Channels of a sample as the transforms see it (stoke_image_layout AUTO), and the
 * index of the channel axis: -1 for a 2-D (or other) input of one channel. */
static int channel_axis(const stoke_shape *s, int *channels)
{
    *channels = 1;
    if (s->ndim == 3) {
        int64_t last = s->dims[2], first = s->dims[0];
        if (last == 1 || last == 3 || last == 4) {
            *channels = (int)last;
            return 2;
        }
        if (first == 1 || first == 3 || first == 4) {
            *channels = (int)first;
            return 0;
        }
    }
    return -1;
}

static double sample_value(const void *p, stoke_dtype t, int64_t k)
{
    switch (t) {
    case STOKE_U8: return ((const uint8_t *)p)[k] / 255.0;
    case STOKE_F32: return ((const float *)p)[k];
    default: return 0;
    }
}

/* channel_stats(max_samples) -> (mean, std): per channel, over up to max_samples evenly
 * spaced samples, in the transforms' scale (u8 / 255): what Normalize() without
 * arguments uses. */
static PyObject *dataset_channel_stats(DatasetObject *self, PyObject *arg)
{
    if (!dataset_ok(self))
        return NULL;
    long long maxn = PyLong_AsLongLong(arg);
    if (maxn == -1 && PyErr_Occurred())
        return NULL;
    const stoke_dataset_info *info = stoke_dataset_get_info(self->d);
    if (info->input_dtype != STOKE_U8 && info->input_dtype != STOKE_F32) {
        PyErr_Format(PyExc_ValueError,
                     "Normalize() measures uint8 or float32 inputs; these are %s: give mean "
                     "and std",
                     stoke_dtype_name(info->input_dtype));
        return NULL;
    }
    if (maxn < 1 || info->count < 1) {
        PyErr_SetString(PyExc_ValueError, "channel_stats needs at least one sample");
        return NULL;
    }
    int ch = 1;
    int axis = channel_axis(&info->input_shape, &ch);
    int64_t elems = stoke_shape_elems(&info->input_shape);
    int64_t n = info->count < maxn ? info->count : maxn;
    double sum[4] = {0}, sq[4] = {0};
    int64_t cnt[4] = {0};
    void *buf = malloc(info->input_bytes ? info->input_bytes : 1);
    if (!buf)
        return PyErr_NoMemory();
    stoke_status st = STOKE_OK;
    Py_BEGIN_ALLOW_THREADS
        for (int64_t j = 0; j < n && st == STOKE_OK; j++) {
            int64_t i = j * info->count / n;
            st = stoke_dataset_read(self->d, i, buf, NULL);
            for (int64_t k = 0; st == STOKE_OK && k < elems; k++) {
                int c = axis == 2 ? (int)(k % ch) : axis == 0 ? (int)(k / (elems / ch)) : 0;
                double v = sample_value(buf, info->input_dtype, k);
                sum[c] += v;
                sq[c] += v * v;
                cnt[c]++;
            }
        }
    Py_END_ALLOW_THREADS
    free(buf);
    if (st != STOKE_OK)
        return stokepy_raise(st);
    PyObject *mean = PyList_New(ch), *std = PyList_New(ch);
    for (int c = 0; mean && std && c < ch; c++) {
        double m = sum[c] / (double)cnt[c];
        double var = sq[c] / (double)cnt[c] - m * m;
        PyList_SET_ITEM(mean, c, PyFloat_FromDouble(m));
        PyList_SET_ITEM(std, c, PyFloat_FromDouble(var > 0 ? sqrt(var) : 0));
    }
    return Py_BuildValue("(NN)", mean, std);
}

static PyObject *dataset_class_counts(DatasetObject *self, PyObject *unused)
{
    (void)unused;
    if (!dataset_ok(self))
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
            PyList_SET_ITEM(out, k, PyLong_FromLongLong(c[k]));
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

static PySequenceMethods dataset_seq = {.sq_length = (lenfunc)dataset_len};

static PyTypeObject DatasetType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_stoke.Dataset",
    .tp_basicsize = sizeof(DatasetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A dataset in a format stoke reads (docs/data.md).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dataset_init,
    .tp_dealloc = (destructor)dataset_dealloc,
    .tp_methods = dataset_methods,
    .tp_getset = dataset_getset,
    .tp_as_sequence = &dataset_seq,
};

/* ---- the loader core, its holds and arrays ------------------------------------------- */

typedef struct {
    PyObject_HEAD stoke_loader *l;
    PyObject *dataset; /* keeps the dataset open while the loader reads it */
    int device;        /* the CUDA device batches are copied to, when they are */
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

static void hold_dealloc(HoldObject *self)
{
    if (self->core && self->core->l)
        stoke_loader_release(self->core->l, self->token);
    Py_XDECREF(self->core);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject HoldType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_stoke._Hold",
    .tp_basicsize = sizeof(HoldObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch held by the arrays that view it.",
    .tp_dealloc = (destructor)hold_dealloc,
};

static void array_dealloc(ArrayObject *self)
{
    Py_XDECREF(self->hold);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The DLPack tensor a consumer takes: it keeps the array (and so the batch) alive. */
typedef struct {
    DLManagedTensor mt;
    int64_t shape[STOKE_MAX_DIMS + 1];
} managed;

static void managed_deleter(DLManagedTensor *mt)
{
    /* Consumers may free a tensor on any thread (a C++ one of torch's, say). */
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF((PyObject *)mt->manager_ctx);
    PyGILState_Release(g);
    free(mt);
}

static void capsule_destructor(PyObject *cap)
{
    /* Never consumed (still named "dltensor"): the capsule owns the tensor. */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
        if (mt && mt->deleter)
            mt->deleter(mt);
    }
}

static PyObject *array_dlpack(ArrayObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", NULL};
    PyObject *stream = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O", names, &stream))
        return NULL;
    if (stream != Py_None && self->device.device_type == kDLCUDA) {
        /* The consumer's stream waits for the batch's copy (DLPack's stream
         * argument: 1 and 2 are CUDA's legacy and per-thread default streams). */
        void *s = PyLong_AsVoidPtr(stream);
        if (!s && PyErr_Occurred())
            return NULL;
        stoke_batch b = {.on_device = true, .event = self->event};
        stoke_status st = stoke_loader_stream_wait(self->hold->core->l, &b, s);
        if (st != STOKE_OK)
            return stokepy_raise(st);
    }
    managed *m = calloc(1, sizeof *m);
    if (!m)
        return PyErr_NoMemory();
    memcpy(m->shape, self->shape, sizeof m->shape);
    m->mt.dl_tensor.data = self->data;
    m->mt.dl_tensor.device = self->device;
    m->mt.dl_tensor.ndim = self->ndim;
    m->mt.dl_tensor.dtype = self->dtype;
    m->mt.dl_tensor.shape = m->shape;
    m->mt.dl_tensor.strides = NULL; /* compact, row-major */
    m->mt.dl_tensor.byte_offset = 0;
    m->mt.manager_ctx = self;
    m->mt.deleter = managed_deleter;
    Py_INCREF(self);
    PyObject *cap = PyCapsule_New(&m->mt, "dltensor", capsule_destructor);
    if (!cap) {
        Py_DECREF(self);
        free(m);
    }
    return cap;
}

static PyObject *array_dlpack_device(ArrayObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(ii)", (int)self->device.device_type, (int)self->device.device_id);
}

static PyObject *array_ptr(ArrayObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *array_shape(ArrayObject *self, void *closure)
{
    (void)closure;
    PyObject *t = PyTuple_New(self->ndim);
    for (int i = 0; t && i < self->ndim; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(self->shape[i]));
    return t;
}

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None) -> a DLPack capsule over the batch (no copy)"},
    {"__dlpack_device__", (PyCFunction)array_dlpack_device, METH_NOARGS,
     "(device type, device id) as DLPack numbers them"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef array_getset[] = {
    {"ptr", (getter)array_ptr, NULL, "address of the first element", NULL},
    {"shape", (getter)array_shape, NULL, "dimensions", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_stoke.Array",
    .tp_basicsize = sizeof(ArrayObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch's inputs or targets, for torch.from_dlpack / numpy.from_dlpack.",
    .tp_dealloc = (destructor)array_dealloc,
    .tp_methods = array_methods,
    .tp_getset = array_getset,
};

static DLDataType dl_dtype(stoke_dtype t)
{
    DLDataType d = {kDLUInt, 8, 1};
    switch (t) {
    case STOKE_U8: d.code = kDLUInt, d.bits = 8; break;
    case STOKE_I8: d.code = kDLInt, d.bits = 8; break;
    case STOKE_U16: d.code = kDLUInt, d.bits = 16; break;
    case STOKE_I16: d.code = kDLInt, d.bits = 16; break;
    case STOKE_U32: d.code = kDLUInt, d.bits = 32; break;
    case STOKE_I32: d.code = kDLInt, d.bits = 32; break;
    case STOKE_I64: d.code = kDLInt, d.bits = 64; break;
    case STOKE_F16: d.code = kDLFloat, d.bits = 16; break;
    case STOKE_BF16: d.code = kDLBfloat, d.bits = 16; break;
    case STOKE_F32: d.code = kDLFloat, d.bits = 32; break;
    case STOKE_F64: d.code = kDLFloat, d.bits = 64; break;
    case STOKE_DTYPE_COUNT: break;
    }
    return d;
}

static ArrayObject *new_array(HoldObject *h, void *data, int64_t n, const stoke_shape *s,
                              stoke_dtype t, const stoke_batch *b, int device)
{
    ArrayObject *a = PyObject_New(ArrayObject, &ArrayType);
    if (!a)
        return NULL;
    Py_INCREF(h);
    a->hold = h;
    a->data = data;
    a->ndim = s->ndim + 1;
    a->shape[0] = n;
    for (int i = 0; i < s->ndim; i++)
        a->shape[i + 1] = s->dims[i];
    a->dtype = dl_dtype(t);
    a->device.device_type = b->on_device ? kDLCUDA : kDLCPU;
    a->device.device_id = b->on_device ? device : 0;
    a->event = b->event;
    return a;
}

static void core_close(CoreObject *self)
{
    if (!self->l)
        return;
    drop_active(self->l);
    stoke_loader *l = self->l;
    self->l = NULL;
    Py_BEGIN_ALLOW_THREADS
        stoke_loader_destroy(l); /* joins the workers */
    Py_END_ALLOW_THREADS
}

static void core_dealloc(CoreObject *self)
{
    core_close(self);
    Py_XDECREF(self->dataset);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Dict helpers for the options: a missing key leaves the default. */
static int get_i64(PyObject *d, const char *k, int64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v)
        return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = x;
    return 0;
}

static int get_int(PyObject *d, const char *k, int *out)
{
    int64_t x = *out;
    if (get_i64(d, k, &x) < 0)
        return -1;
    if (x < INT32_MIN || x > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s=%lld is out of range", k, (long long)x);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int get_bool(PyObject *d, const char *k, bool *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v)
        return 0;
    int r = PyObject_IsTrue(v);
    if (r < 0)
        return -1;
    *out = r;
    return 0;
}

static int get_float(PyObject *d, const char *k, float *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v)
        return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = (float)x;
    return 0;
}

static int get_floats(PyObject *d, const char *k, float *out, int cap)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v)
        return 0;
    PyObject *seq = PySequence_Fast(v, "mean and std must be sequences of numbers");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    if (n < 1 || n > cap) {
        PyErr_Format(PyExc_ValueError, "%s has %zd values (1 to %d channels)", k, n, cap);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        double x = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (x == -1 && PyErr_Occurred())
            rc = -1;
        out[i] = (float)x;
    }
    /* One value stands for every channel, as in torchvision. */
    for (Py_ssize_t i = n; rc == 0 && n == 1 && i < cap; i++)
        out[i] = out[0];
    Py_DECREF(seq);
    return rc;
}

static int parse_op(PyObject *d, stoke_op *op)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "each transform op must be a dict");
        return -1;
    }
    PyObject *kind = PyDict_GetItemString(d, "kind");
    const char *k = kind && PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    static const struct {
        const char *name;
        stoke_op_kind kind;
    } kinds[] = {{"resize", STOKE_OP_RESIZE},
                 {"crop", STOKE_OP_CROP},
                 {"hflip", STOKE_OP_HFLIP},
                 {"color_jitter", STOKE_OP_COLOR_JITTER},
                 {"normalize", STOKE_OP_NORMALIZE}};
    memset(op, 0, sizeof *op);
    for (size_t i = 0; k && i < sizeof kinds / sizeof *kinds; i++)
        if (strcmp(k, kinds[i].name) == 0)
            op->kind = kinds[i].kind;
    if (!op->kind) {
        PyErr_Format(PyExc_ValueError, "unknown transform op kind %R", kind ? kind : Py_None);
        return -1;
    }
    op->std[0] = op->std[1] = op->std[2] = op->std[3] = 1;
    if (get_int(d, "height", &op->height) < 0 || get_int(d, "width", &op->width) < 0 ||
        get_int(d, "pad", &op->pad) < 0 || get_bool(d, "center", &op->center) < 0 ||
        get_float(d, "p", &op->p) < 0 || get_float(d, "brightness", &op->brightness) < 0 ||
        get_float(d, "contrast", &op->contrast) < 0 ||
        get_float(d, "saturation", &op->saturation) < 0 || get_float(d, "hue", &op->hue) < 0 ||
        get_bool(d, "random_order", &op->random_order) < 0 ||
        get_floats(d, "mean", op->mean, 4) < 0 || get_floats(d, "std", op->std, 4) < 0)
        return -1;
    return 0;
}

static int parse_dtype(PyObject *d, const char *k, stoke_dtype *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v || v == Py_None)
        return 0;
    const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
    static const struct {
        const char *name;
        stoke_dtype t;
    } names[] = {{"f32", STOKE_F32},   {"float32", STOKE_F32},   {"fp32", STOKE_F32},
                 {"bf16", STOKE_BF16}, {"bfloat16", STOKE_BF16}, {"f16", STOKE_F16},
                 {"fp16", STOKE_F16},  {"float16", STOKE_F16}};
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].t;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "dtype %R: use \"f32\", \"bf16\" or \"fp16\"", v);
    return -1;
}

static int parse_transform(CoreObject *self, PyObject *t)
{
    if (!PyDict_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "transform must be a dict");
        return -1;
    }
    PyObject *ops = PyDict_GetItemString(t, "ops");
    PyObject *seq = ops ? PySequence_Fast(ops, "transform ops must be a list") : PyList_New(0);
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    if (n > (Py_ssize_t)(sizeof self->ops / sizeof *self->ops)) {
        PyErr_Format(PyExc_ValueError, "%zd transform ops (at most 16)", n);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
        rc = parse_op(PySequence_Fast_GET_ITEM(seq, i), &self->ops[i]);
    Py_DECREF(seq);
    if (rc < 0)
        return -1;
    memset(&self->to, 0, sizeof self->to);
    self->to.ops = self->ops;
    self->to.nops = (int)n;
    self->to.out_dtype = STOKE_F32;
    if (parse_dtype(t, "dtype", &self->to.out_dtype) < 0)
        return -1;
    PyObject *lay = PyDict_GetItemString(t, "layout");
    const char *ls = lay && PyUnicode_Check(lay) ? PyUnicode_AsUTF8(lay) : "NCHW";
    if (strcmp(ls, "NCHW") == 0) {
        self->to.out_layout = STOKE_LAYOUT_CHW;
    } else if (strcmp(ls, "NHWC") == 0) {
        self->to.out_layout = STOKE_LAYOUT_HWC;
    } else {
        PyErr_Format(PyExc_ValueError, "layout %R: use \"NCHW\" or \"NHWC\"", lay);
        return -1;
    }
    return 0;
}

/* LoaderCore(dataset, options dict): the C loader with opts.hold, at options["start"]. */
static int core_init(CoreObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dataset", "options", NULL};
    PyObject *ds, *o;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!", names, &DatasetType, &ds, &PyDict_Type, &o))
        return -1;
    if (!dataset_ok((DatasetObject *)ds))
        return -1;
    core_close(self);
    stoke_loader_opts lo = {.sampler = {.batch_size = 1, .world_size = 1}, .hold = true};
    int device = -1;
    if (get_i64(o, "batch_size", &lo.sampler.batch_size) < 0 ||
        get_bool(o, "shuffle", &lo.sampler.shuffle) < 0 ||
        get_bool(o, "drop_last", &lo.sampler.drop_last) < 0 ||
        get_int(o, "rank", &lo.sampler.rank) < 0 ||
        get_int(o, "world_size", &lo.sampler.world_size) < 0 ||
        get_i64(o, "start_epoch", &lo.start.epoch) < 0 ||
        get_i64(o, "start_index", &lo.start.index) < 0 || get_int(o, "workers", &lo.workers) < 0 ||
        get_int(o, "prefetch", &lo.prefetch) < 0 || get_int(o, "device", &device) < 0)
        return -1;
    int64_t seed = 0;
    if (get_i64(o, "seed", &seed) < 0)
        return -1;
    lo.sampler.seed = (uint64_t)seed;
    PyObject *t = PyDict_GetItemString(o, "transform");
    if (t && t != Py_None) {
        if (parse_transform(self, t) < 0)
            return -1;
        lo.transform = &self->to;
    }
    lo.use_device = device >= 0;
    lo.device = device;
    stoke_dataset *d = ((DatasetObject *)ds)->d;
    stoke_loader *l = NULL;
    stoke_status st;
    Py_BEGIN_ALLOW_THREADS
        st = stoke_loader_create(d, &lo, &l);
    Py_END_ALLOW_THREADS
    if (st != STOKE_OK)
        return stokepy_raise(st), -1;
    self->l = l;
    self->device = device;
    Py_INCREF(ds);
    Py_XSETREF(self->dataset, ds);
    return 0;
}

static int core_ok(CoreObject *self)
{
    if (self->l)
        return 1;
    PyErr_SetString(PyExc_ValueError, "the loader is closed");
    return 0;
}

/* next() -> (epoch, index, inputs Array, targets Array or None, samples list), or None
 * at the end of an epoch. Waits with the GIL released, in slices, so Ctrl-C (any
 * Python signal handler that raises) interrupts it. */
static PyObject *core_next(CoreObject *self, PyObject *unused)
{
    (void)unused;
    if (!core_ok(self))
        return NULL;
    stoke_loader *l = self->l;
    stoke_batch b;
    stoke_status st;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
            st = stoke_loader_next_timed(l, &b, WAIT_SLICE_S);
        Py_END_ALLOW_THREADS
        if (st != STOKE_ERR_TIMEOUT)
            break;
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
    if (st != STOKE_OK)
        return stokepy_raise(st);
    set_active(l);
    if (b.size == 0)
        Py_RETURN_NONE;
    HoldObject *h = PyObject_New(HoldObject, &HoldType);
    if (!h) {
        stoke_loader_release(l, b.held);
        return NULL;
    }
    Py_INCREF(self);
    h->core = self;
    h->token = b.held;
    const stoke_dataset_info *info = stoke_dataset_get_info(((DatasetObject *)self->dataset)->d);
    int device_id = self->device;
    ArrayObject *x = new_array(h, b.inputs, b.size, &b.input_shape, b.input_dtype, &b, device_id);
    ArrayObject *y = NULL;
    if (x && b.targets) {
        y = new_array(h, b.targets, b.size, &info->target_shape, info->target_dtype, &b, device_id);
    }
    Py_DECREF(h); /* the arrays hold it now */
    PyObject *samples = PyList_New(b.size);
    for (int64_t i = 0; samples && i < b.size; i++)
        PyList_SET_ITEM(samples, i, PyLong_FromLongLong(b.samples[i]));
    if (!x || (b.targets && !y) || !samples) {
        Py_XDECREF(x);
        Py_XDECREF(y);
        Py_XDECREF(samples);
        return NULL;
    }
    return Py_BuildValue("(LLNNN)", (long long)b.epoch, (long long)b.index, (PyObject *)x,
                         y ? (PyObject *)y : (Py_INCREF(Py_None), Py_None), samples);
}

static PyObject *core_state(CoreObject *self, PyObject *unused)
{
    (void)unused;
    if (!core_ok(self))
        return NULL;
    stoke_sampler_state s = stoke_loader_state(self->l);
    return Py_BuildValue("(LL)", (long long)s.epoch, (long long)s.index);
}

static PyObject *core_stats(CoreObject *self, PyObject *unused)
{
    (void)unused;
    if (!core_ok(self))
        return NULL;
    stoke_loader_stats s;
    stoke_loader_get_stats(self->l, &s);
    int n = s.workers > 0 ? (s.workers < 64 ? s.workers : 64) : 1;
    PyObject *busy = PyList_New(n);
    for (int i = 0; busy && i < n; i++)
        PyList_SET_ITEM(busy, i, PyFloat_FromDouble(s.busy_frac[i]));
    return Py_BuildValue("{s:L,s:L,s:d,s:d,s:d,s:d,s:i,s:i,s:i,s:i,s:d,s:N,s:d,s:i,s:i}", "batches",
                         (long long)s.batches, "samples", (long long)s.samples, "wait_avg_ms",
                         s.wait_avg_ms, "wait_p95_ms", s.wait_p95_ms, "wait_max_ms", s.wait_max_ms,
                         "fill_avg", s.fill_avg, "fill_min", s.fill_min, "fill_max", s.fill_max,
                         "slots", s.slots, "workers", s.workers, "busy_avg_ms", s.busy_avg_ms,
                         "busy_frac", busy, "elapsed_s", s.elapsed_s, "held", s.held, "buffers",
                         s.buffers);
}

static PyObject *core_device(CoreObject *self, PyObject *unused)
{
    (void)unused;
    if (!core_ok(self))
        return NULL;
    return Py_BuildValue("(Os)", stoke_loader_on_device(self->l) ? Py_True : Py_False,
                         stoke_loader_device_reason(self->l));
}

static PyObject *core_set_consumer_event(CoreObject *self, PyObject *arg)
{
    if (!core_ok(self))
        return NULL;
    void *e = arg == Py_None ? NULL : PyLong_AsVoidPtr(arg);
    if (!e && PyErr_Occurred())
        return NULL;
    stoke_loader_set_consumer_event(self->l, e);
    Py_RETURN_NONE;
}

static PyObject *core_close_m(CoreObject *self, PyObject *unused)
{
    (void)unused;
    core_close(self);
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"next", (PyCFunction)core_next, METH_NOARGS,
     "next() -> (epoch, index, inputs, targets|None, samples), or None at an epoch's end"},
    {"state", (PyCFunction)core_state, METH_NOARGS, "(epoch, index) after the last batch"},
    {"stats", (PyCFunction)core_stats, METH_NOARGS, "the loader's measurements"},
    {"device", (PyCFunction)core_device, METH_NOARGS, "(on_device, reason)"},
    {"set_consumer_event", (PyCFunction)core_set_consumer_event, METH_O,
     "a cudaEvent_t (int) recorded after the kernels that read the batches"},
    {"close", (PyCFunction)core_close_m, METH_NOARGS, "stops the workers"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_stoke.LoaderCore",
    .tp_basicsize = sizeof(CoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The C loader (use stoke.Loader).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)core_init,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = core_methods,
};

/* ---- module functions: the sampler, the transform alone, the tuner ---------------------- */

/* epoch_order(count, options dict, epoch) -> list of batches (lists of sample indices)
 * as the loader's sampler gives them: the tests' reference. */
static PyObject *epoch_order(PyObject *mod, PyObject *args)
{
    (void)mod;
    long long count, epoch;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "LO!L", &count, &PyDict_Type, &o, &epoch))
        return NULL;
    stoke_sampler_opts so = {.batch_size = 1, .world_size = 1};
    int64_t seed = 0;
    if (get_i64(o, "batch_size", &so.batch_size) < 0 || get_bool(o, "shuffle", &so.shuffle) < 0 ||
        get_bool(o, "drop_last", &so.drop_last) < 0 || get_int(o, "rank", &so.rank) < 0 ||
        get_int(o, "world_size", &so.world_size) < 0 || get_i64(o, "seed", &seed) < 0)
        return NULL;
    so.seed = (uint64_t)seed;
    stoke_sampler *s = NULL;
    stoke_status st = stoke_sampler_create(count, &so, &s);
    if (st == STOKE_OK)
        st = stoke_sampler_set_state(s, (stoke_sampler_state){epoch, 0});
    if (st != STOKE_OK) {
        stoke_sampler_destroy(s);
        return stokepy_raise(st);
    }
    int64_t *idx = malloc((size_t)so.batch_size * sizeof *idx);
    PyObject *out = idx ? PyList_New(0) : PyErr_NoMemory();
    int64_t e = 0, n;
    while (out && (n = stoke_sampler_next(s, idx, &e)) > 0) {
        PyObject *b = PyList_New(n);
        for (int64_t i = 0; b && i < n; i++)
            PyList_SET_ITEM(b, i, PyLong_FromLongLong(idx[i]));
        if (!b || PyList_Append(out, b) < 0)
            Py_CLEAR(out);
        Py_XDECREF(b);
    }
    free(idx);
    stoke_sampler_destroy(s);
    return out;
}

/* epoch_batches(count, options dict) -> batches per epoch (len(loader)). */
static PyObject *epoch_batches(PyObject *mod, PyObject *args)
{
    (void)mod;
    long long count;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "LO!", &count, &PyDict_Type, &o))
        return NULL;
    stoke_sampler_opts so = {.batch_size = 1, .world_size = 1};
    if (get_i64(o, "batch_size", &so.batch_size) < 0 ||
        get_bool(o, "drop_last", &so.drop_last) < 0 || get_int(o, "rank", &so.rank) < 0 ||
        get_int(o, "world_size", &so.world_size) < 0)
        return NULL;
    stoke_sampler *s = NULL;
    stoke_status st = stoke_sampler_create(count, &so, &s);
    if (st != STOKE_OK)
        return stokepy_raise(st);
    long long n = stoke_sampler_epoch_batches(s);
    stoke_sampler_destroy(s);
    return PyLong_FromLongLong(n);
}

/* transform_apply(dataset, transform dict, sample bytes, seed, epoch, index) -> bytes:
 * one sample through the transform alone, as a worker would. */
static PyObject *transform_apply(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *ds, *t;
    Py_buffer in;
    unsigned long long seed;
    long long epoch, index;
    if (!PyArg_ParseTuple(args, "O!O!y*KLL", &DatasetType, &ds, &PyDict_Type, &t, &in, &seed,
                          &epoch, &index))
        return NULL;
    PyObject *out = NULL;
    CoreObject tmp; /* only its transform fields */
    memset(&tmp, 0, sizeof tmp);
    stoke_transform *tf = NULL;
    if (!dataset_ok((DatasetObject *)ds) || parse_transform(&tmp, t) < 0)
        goto done;
    const stoke_dataset_info *info = stoke_dataset_get_info(((DatasetObject *)ds)->d);
    tmp.to.in_shape = info->input_shape;
    tmp.to.in_dtype = info->input_dtype;
    if ((size_t)in.len != info->input_bytes) {
        PyErr_Format(PyExc_ValueError, "sample of %zd bytes; the dataset's have %zu", in.len,
                     info->input_bytes);
        goto done;
    }
    stoke_status st = stoke_transform_create(&tmp.to, &tf);
    if (st != STOKE_OK) {
        stokepy_raise(st);
        goto done;
    }
    size_t sb = stoke_transform_scratch_bytes(tf);
    void *scratch = sb ? malloc(sb) : NULL;
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)stoke_transform_out_bytes(tf));
    if (out && (!sb || scratch))
        stoke_transform_apply(tf, in.buf, PyBytes_AS_STRING(out), scratch, seed, epoch, index);
    else if (out) {
        Py_CLEAR(out);
        PyErr_NoMemory();
    }
    free(scratch);
done:
    stoke_transform_destroy(tf);
    PyBuffer_Release(&in);
    return out;
}

/* The machine is probed once per process: the tuner's facts do not change in a run. */
static stoke_machine machine;
static stoke_recs recs;
static bool probed;

static PyObject *why_dict(const stoke_why *w)
{
    return Py_BuildValue("{s:s,s:s}", "source", stoke_source_name(w->source), "reason", w->reason);
}

/* decide(workers, prefetch, batch, in_memory, cheap_transform) -> dict: stoke_decide
 * for a loader (workers or prefetch < 0: decide), each value with source and reason. */
static PyObject *decide(PyObject *mod, PyObject *args)
{
    (void)mod;
    int workers, prefetch, in_memory, cheap;
    long long batch;
    if (!PyArg_ParseTuple(args, "iiLpp", &workers, &prefetch, &batch, &in_memory, &cheap))
        return NULL;
    if (!probed) {
        stoke_status st;
        Py_BEGIN_ALLOW_THREADS
            st = stoke_machine_probe(&machine, NULL);
        Py_END_ALLOW_THREADS
        if (st != STOKE_OK)
            return stokepy_raise(st);
        stoke_recommend(&machine, &recs);
        probed = true;
    }
    stoke_tune_request q = {.precision = "auto",
                            .workers = workers,
                            .workers_src = workers < 0 ? STOKE_SRC_DEFAULT : STOKE_SRC_FLAG,
                            .prefetch = prefetch,
                            .prefetch_src = prefetch <= 0 ? STOKE_SRC_DEFAULT : STOKE_SRC_FLAG,
                            .batch = batch,
                            .batch_src = STOKE_SRC_FLAG,
                            .in_memory = in_memory,
                            .cheap_transform = cheap};
    stoke_decision d;
    stoke_status st = stoke_decide(&machine, &recs, &q, &d);
    if (st != STOKE_OK)
        return stokepy_raise(st);
    return Py_BuildValue("{s:i,s:i,s:i,s:O,s:i,s:N,s:N,s:N,s:N}", "workers", d.workers, "prefetch",
                         d.prefetch, "threads", d.threads, "pinned", d.pinned ? Py_True : Py_False,
                         "usable_cpus", d.usable_cpus, "workers_why", why_dict(&d.workers_why),
                         "prefetch_why", why_dict(&d.prefetch_why), "threads_why",
                         why_dict(&d.threads_why), "pinned_why", why_dict(&d.pinned_why));
}

static PyMethodDef data_functions[] = {
    {"epoch_order", epoch_order, METH_VARARGS, "the sampler's batches of one epoch"},
    {"epoch_batches", epoch_batches, METH_VARARGS, "batches per epoch"},
    {"transform_apply", transform_apply, METH_VARARGS, "one sample through a transform"},
    {"decide", decide, METH_VARARGS, "the tuner's loader settings, with reasons"},
    {NULL, NULL, 0, NULL},
};

int stokepy_add_data(PyObject *m)
{
    PyTypeObject *types[] = {&DatasetType, &CoreType, &HoldType, &ArrayType};
    const char *names[] = {"Dataset", "LoaderCore", "_Hold", "Array"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyType_Ready(types[i]) < 0 ||
            PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0)
            return -1;
    return PyModule_AddFunctions(m, data_functions);
}
