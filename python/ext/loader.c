/* loader.c - the loader for Python. Batches leave as DLPack tensors over the loader's
 * own buffers (opts.hold): a batch's buffers go back to the loader only when the last
 * tensor viewing them is freed, so nothing is overwritten under a live tensor and
 * nothing is copied. Also the sampler, the transform alone and the tuner's loader
 * settings, for the Python layer and its tests. */
#include <dlpack/dlpack.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ext.h"
#include "stoke/data.h"
#include "stoke/hw.h"
#include "stoke/monitor.h"
#include "stoke/train.h"
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

/* ---- the loader core, its holds and arrays ------------------------------------------- */

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

static void hold_dealloc(HoldObject *self)
{
    if (self->core && self->core->l)
        stoke_loader_release(self->core->l, self->token);
    Py_XDECREF((PyObject *)self->core);
    stokepy_free((PyObject *)self);
}

/* Holds and arrays are made only by next(), as static types without tp_new were; a
 * heap type would otherwise inherit object's. */
static PyType_Slot hold_slots[] = {
    {Py_tp_doc, "A batch held by the arrays that view it."},
    {Py_tp_dealloc, hold_dealloc},
    {0, NULL},
};

static PyType_Spec hold_spec = {
    .name = "_stoke._Hold",
    .basicsize = sizeof(HoldObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = hold_slots,
};

static PyTypeObject *HoldType;

static void array_dealloc(ArrayObject *self)
{
    Py_XDECREF((PyObject *)self->hold);
    stokepy_free((PyObject *)self);
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
    Py_INCREF((PyObject *)self);
    PyObject *cap = PyCapsule_New(&m->mt, "dltensor", capsule_destructor);
    if (!cap) {
        Py_DECREF((PyObject *)self);
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
        PyTuple_SetItem(t, i, PyLong_FromLongLong(self->shape[i]));
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

static PyType_Slot array_slots[] = {
    {Py_tp_doc, "A batch's inputs or targets, for torch.from_dlpack / numpy.from_dlpack."},
    {Py_tp_dealloc, array_dealloc},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, array_getset},
    {0, NULL},
};

static PyType_Spec array_spec = {
    .name = "_stoke.Array",
    .basicsize = sizeof(ArrayObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = array_slots,
};

static PyTypeObject *ArrayType;

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
    ArrayObject *a = PyObject_New(ArrayObject, ArrayType);
    if (!a)
        return NULL;
    Py_INCREF((PyObject *)h);
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

/* Stops the workers; the memory stays until the last batch held is freed (holds keep
 * the core alive), then core_dealloc frees it. */
static void core_close(CoreObject *self)
{
    if (!self->l || self->closed)
        return;
    drop_active(self->l);
    if (self->pid != getpid()) { /* fork()'s copy: its threads are the parent's */
        self->closed = true;
        return;
    }
    self->closed = true;
    stoke_loader *l = self->l;
    Py_BEGIN_ALLOW_THREADS
        stoke_loader_stop(l); /* joins the workers */
    Py_END_ALLOW_THREADS
}

static void core_dealloc(CoreObject *self)
{
    core_close(self);
    /* In a fork()ed child the copy is left alone: destroying it would join threads that
     * exist only in the parent. */
    if (self->pid == getpid())
        stoke_loader_destroy(self->l);
    self->l = NULL;
    Py_XDECREF(self->dataset);
    stokepy_free((PyObject *)self);
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

/* A 64-bit seed: PyLong_AsUnsignedLongLong refuses a negative int (OverflowError)
 * where PyLong_AsLongLong and a cast would make -5 into 2^64 - 5, and it takes the
 * seeds from 2^63 up that loader.py allows. */
static int get_u64(PyObject *d, const char *k, uint64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v)
        return 0;
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred())
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
    Py_ssize_t n = PySequence_Size(seq);
    int rc = 0;
    if (n < 1 || n > cap) {
        PyErr_Format(PyExc_ValueError, "%s has %zd values (1 to %d channels)", k, n, cap);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *item = PySequence_GetItem(seq, i);
        double x = item ? PyFloat_AsDouble(item) : -1;
        Py_XDECREF(item);
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
    const char *k = kind && PyUnicode_Check(kind) ? PyUnicode_AsUTF8AndSize(kind, NULL) : NULL;
    static const struct {
        const char *name;
        stoke_op_kind kind;
    } kinds[] = {{"resize", STOKE_OP_RESIZE},
                 {"crop", STOKE_OP_CROP},
                 {"hflip", STOKE_OP_HFLIP},
                 {"color_jitter", STOKE_OP_COLOR_JITTER},
                 {"normalize", STOKE_OP_NORMALIZE},
                 {"random_resized_crop", STOKE_OP_RANDOM_RESIZED_CROP},
                 {"resize_shorter", STOKE_OP_RESIZE_SHORTER}};
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
        get_floats(d, "mean", op->mean, 4) < 0 || get_floats(d, "std", op->std, 4) < 0 ||
        get_floats(d, "scale", op->scale, 2) < 0 || get_floats(d, "ratio", op->ratio, 2) < 0)
        return -1;
    return 0;
}

/* "u8" sets out_u8 (the zero dtype means float32 in stoke_transform_opts). */
static int parse_dtype(PyObject *d, const char *k, stoke_transform_opts *to)
{
    PyObject *v = PyDict_GetItemString(d, k);
    if (!v || v == Py_None)
        return 0;
    const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
    static const struct {
        const char *name;
        stoke_dtype t;
    } names[] = {{"f32", STOKE_F32},   {"float32", STOKE_F32},   {"fp32", STOKE_F32},
                 {"bf16", STOKE_BF16}, {"bfloat16", STOKE_BF16}, {"f16", STOKE_F16},
                 {"fp16", STOKE_F16},  {"float16", STOKE_F16}};
    if (s && (strcmp(s, "u8") == 0 || strcmp(s, "uint8") == 0)) {
        to->out_dtype = STOKE_U8;
        to->out_u8 = true;
        return 0;
    }
    for (size_t i = 0; s && i < sizeof names / sizeof *names; i++)
        if (strcmp(s, names[i].name) == 0) {
            to->out_dtype = names[i].t;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "dtype %R: use \"f32\", \"bf16\", \"fp16\" or \"u8\"", v);
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
    Py_ssize_t n = PySequence_Size(seq);
    int rc = 0;
    if (n > (Py_ssize_t)(sizeof self->ops / sizeof *self->ops)) {
        PyErr_Format(PyExc_ValueError, "%zd transform ops (at most 16)", n);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *op = PySequence_GetItem(seq, i);
        rc = op ? parse_op(op, &self->ops[i]) : -1;
        Py_XDECREF(op);
    }
    Py_DECREF(seq);
    if (rc < 0)
        return -1;
    memset(&self->to, 0, sizeof self->to);
    self->to.ops = self->ops;
    self->to.nops = (int)n;
    self->to.out_dtype = STOKE_F32;
    if (parse_dtype(t, "dtype", &self->to) < 0)
        return -1;
    PyObject *lay = PyDict_GetItemString(t, "layout");
    const char *ls = !lay ? "NCHW" : PyUnicode_Check(lay) ? PyUnicode_AsUTF8AndSize(lay, NULL) : "";
    if (!ls) /* a str UTF-8 cannot encode (a lone surrogate): its UnicodeEncodeError */
        return -1;
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
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!", names, stokepy_DatasetType, &ds,
                                     &PyDict_Type, &o))
        return -1;
    if (!stokepy_dataset_ok((DatasetObject *)ds))
        return -1;
    if (self->l) {
        PyErr_SetString(PyExc_ValueError, "LoaderCore is initialized once");
        return -1;
    }
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
    if (get_u64(o, "seed", &lo.sampler.seed) < 0)
        return -1;
    PyObject *t = PyDict_GetItemString(o, "transform");
    if (t && t != Py_None) {
        if (parse_transform(self, t) < 0)
            return -1;
        lo.transform = &self->to;
    }
    lo.use_device = device >= 0;
    lo.device = device;
    /* A ring that cannot fit is refused with its numbers rather than left to the OOM
     * killer (a batch_size of 10**9 is one keystroke away). */
    stoke_mem_info mi;
    if (stoke_mem_probe(NULL, &mi) == STOKE_OK && mi.available_bytes > 0)
        lo.memory_limit = mi.available_bytes;
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
    self->pid = getpid();
    Py_XDECREF(self->dataset);
    self->dataset = Py_NewRef(ds);
    return 0;
}

static int core_ok(CoreObject *self)
{
    if (self->l && !self->closed)
        return 1;
    PyErr_SetString(PyExc_ValueError, "the loader is closed");
    return 0;
}

/* next(samples=False) -> (epoch, index, inputs Array, targets Array or None, the
 * sample indices as a list or None), or None at the end of an epoch. The indices are
 * built only when asked: the training loop does not need a Python int per sample.
 * Waits with the GIL released, in slices, so Ctrl-C (any Python signal handler that
 * raises) interrupts it. */
static PyObject *core_next(CoreObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"samples", NULL};
    int want_samples = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p", names, &want_samples))
        return NULL;
    if (!core_ok(self))
        return NULL;
    /* The consumer side of a loader is one thread's: a second one waiting at the same
     * time would race on it, so it is told instead. */
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "another thread is taking a batch from this loader: one consumer "
                        "per loader (make one loader per thread)");
        return NULL;
    }
    /* After fork() the child has the loader's memory but not its worker threads
     * (stoke.Loader starts a new one in the child; this is for direct users). */
    if (self->pid != getpid()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this loader core was started in another process (fork)");
        return NULL;
    }
    stoke_loader *l = self->l;
    stoke_batch b;
    stoke_status st;
    self->busy = true;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
            st = stoke_loader_next_timed(l, &b, WAIT_SLICE_S);
        Py_END_ALLOW_THREADS
        if (st != STOKE_ERR_TIMEOUT)
            break;
        if (PyErr_CheckSignals() < 0) {
            self->busy = false;
            return NULL;
        }
    }
    self->busy = false;
    if (st != STOKE_OK)
        return stokepy_raise(st);
    set_active(l);
    if (b.size == 0)
        Py_RETURN_NONE;
    HoldObject *h = PyObject_New(HoldObject, HoldType);
    if (!h) {
        stoke_loader_release(l, b.held);
        return NULL;
    }
    Py_INCREF((PyObject *)self);
    h->core = self;
    h->token = b.held;
    const stoke_dataset_info *info = stoke_dataset_get_info(((DatasetObject *)self->dataset)->d);
    int device_id = self->device;
    ArrayObject *x = new_array(h, b.inputs, b.size, &b.input_shape, b.input_dtype, &b, device_id);
    ArrayObject *y = NULL;
    if (x && b.targets) {
        y = new_array(h, b.targets, b.size, &info->target_shape, info->target_dtype, &b, device_id);
    }
    Py_DECREF((PyObject *)h); /* the arrays hold it now */
    PyObject *samples = want_samples ? PyList_New(b.size) : (Py_INCREF(Py_None), Py_None);
    for (int64_t i = 0; want_samples && samples && i < b.size; i++)
        PyList_SetItem(samples, i, PyLong_FromLongLong(b.samples[i]));
    if (!x || (b.targets && !y) || !samples) {
        Py_XDECREF((PyObject *)x);
        Py_XDECREF((PyObject *)y);
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
        PyList_SetItem(busy, i, PyFloat_FromDouble(s.busy_frac[i]));
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
    {"next", (PyCFunction)(void (*)(void))core_next, METH_VARARGS | METH_KEYWORDS,
     "next(samples=False) -> (epoch, index, inputs, targets|None, samples|None), or None at "
     "an epoch's end"},
    {"state", (PyCFunction)core_state, METH_NOARGS, "(epoch, index) after the last batch"},
    {"stats", (PyCFunction)core_stats, METH_NOARGS, "the loader's measurements"},
    {"device", (PyCFunction)core_device, METH_NOARGS, "(on_device, reason)"},
    {"set_consumer_event", (PyCFunction)core_set_consumer_event, METH_O,
     "a cudaEvent_t (int) recorded after the kernels that read the batches"},
    {"close", (PyCFunction)core_close_m, METH_NOARGS, "stops the workers"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot core_slots[] = {
    {Py_tp_doc, "The C loader (use stoke.Loader)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, core_init},
    {Py_tp_dealloc, core_dealloc},
    {Py_tp_methods, core_methods},
    {0, NULL},
};

static PyType_Spec core_spec = {
    .name = "_stoke.LoaderCore",
    .basicsize = sizeof(CoreObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = core_slots,
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
    if (get_i64(o, "batch_size", &so.batch_size) < 0 || get_bool(o, "shuffle", &so.shuffle) < 0 ||
        get_bool(o, "drop_last", &so.drop_last) < 0 || get_int(o, "rank", &so.rank) < 0 ||
        get_int(o, "world_size", &so.world_size) < 0 || get_u64(o, "seed", &so.seed) < 0)
        return NULL;
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
            PyList_SetItem(b, i, PyLong_FromLongLong(idx[i]));
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
    PyObject *ds, *t, *seed_obj;
    Py_buffer in;
    long long epoch, index;
    /* the seed as an object: "K" converts without a range check, -5 to 2^64 - 5 */
    if (!PyArg_ParseTuple(args, "O!O!y*O!LL", stokepy_DatasetType, &ds, &PyDict_Type, &t, &in,
                          &PyLong_Type, &seed_obj, &epoch, &index))
        return NULL;
    unsigned long long seed = PyLong_AsUnsignedLongLong(seed_obj);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) {
        PyBuffer_Release(&in);
        return NULL;
    }
    PyObject *out = NULL;
    CoreObject tmp; /* only its transform fields */
    memset(&tmp, 0, sizeof tmp);
    stoke_transform *tf = NULL;
    if (!stokepy_dataset_ok((DatasetObject *)ds) || parse_transform(&tmp, t) < 0)
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
        stoke_transform_apply(tf, in.buf, PyBytes_AsString(out), scratch, seed, epoch, index);
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

/* transform_one_pass(dataset, transform dict or None) -> bool: the tuner's
 * cheap_transform for this transform on this dataset's samples (stoke_transform_one_pass,
 * the rule `stoke train` asks). */
static PyObject *transform_one_pass(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *ds, *t;
    if (!PyArg_ParseTuple(args, "O!O", stokepy_DatasetType, &ds, &t))
        return NULL;
    if (!stokepy_dataset_ok((DatasetObject *)ds))
        return NULL;
    if (t == Py_None)
        return PyBool_FromLong(stoke_transform_one_pass(NULL));
    CoreObject tmp; /* only its transform fields */
    memset(&tmp, 0, sizeof tmp);
    if (parse_transform(&tmp, t) < 0)
        return NULL;
    tmp.to.in_dtype = stoke_dataset_get_info(((DatasetObject *)ds)->d)->input_dtype;
    return PyBool_FromLong(stoke_transform_one_pass(&tmp.to));
}

/* The machine is probed once per process: the tuner's facts do not change in a run.
 * The hardware profiles are read at each decision, as each `stoke train` reads them
 * (STOKE_PROFILES, else the built-in table): the two decide from the same start
 * values. Used under the GIL. */
static stoke_machine machine;
static stoke_recs recs;
static bool probed;
static stoke_profiles profiles;

static PyObject *why_dict(const stoke_why *w)
{
    return Py_BuildValue("{s:s,s:s}", "source", stoke_source_name(w->source), "reason", w->reason);
}

/* How long decide() watches what other processes take, when it needs to. */
#define LOAD_SAMPLE_S 0.1

/* decide(workers, prefetch, batch, in_memory, cheap_transform[, host_threads,
 * host_threads_from]) -> dict: stoke_decide for a loader (workers or prefetch < 0:
 * decide), each value with source and reason. host_threads: the threads the script
 * computes on beside the loader (0: unknown, the rules share the CPUs out); with it and
 * workers to decide, what other processes take is sampled now (LOAD_SAMPLE_S) and the
 * workers take what is left (stoke_tune_request.host_threads). The hardware profiles
 * are `stoke train`'s (stoke_profiles_load). */
static PyObject *decide(PyObject *mod, PyObject *args)
{
    (void)mod;
    int workers, prefetch, in_memory, cheap, host_threads = 0;
    long long batch;
    const char *host_from = NULL;
    if (!PyArg_ParseTuple(args, "iiLpp|iz", &workers, &prefetch, &batch, &in_memory, &cheap,
                          &host_threads, &host_from))
        return NULL;
    if (host_threads < 0)
        return PyErr_Format(PyExc_ValueError, "host_threads=%d: a count >= 0", host_threads);
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
    if (workers < 0 && host_threads > 0) {
        /* the load now, not the first loader's: the decision follows it each epoch; a
         * failed sample is an unknown load (valid false), which takes nothing out */
        stoke_cpu_load load = {0};
        Py_BEGIN_ALLOW_THREADS
            if (stoke_cpu_load_sample(LOAD_SAMPLE_S, &load) != STOKE_OK)
                load = (stoke_cpu_load){.run_queue = -1};
        Py_END_ALLOW_THREADS
        machine.load = load;
    }
    stoke_status ps = stoke_profiles_load(&profiles);
    if (ps != STOKE_OK)
        return stokepy_raise(ps);
    stoke_tune_request q = {.precision = "auto",
                            .workers = workers,
                            .workers_src = workers < 0 ? STOKE_SRC_DEFAULT : STOKE_SRC_FLAG,
                            .prefetch = prefetch,
                            .prefetch_src = prefetch <= 0 ? STOKE_SRC_DEFAULT : STOKE_SRC_FLAG,
                            .batch = batch,
                            .batch_src = STOKE_SRC_FLAG,
                            .in_memory = in_memory,
                            .cheap_transform = cheap,
                            .host_threads = host_threads,
                            .host_threads_from = host_from,
                            .profiles = &profiles};
    stoke_decision d;
    stoke_status st = stoke_decide(&machine, &recs, &q, &d);
    if (st != STOKE_OK)
        return stokepy_raise(st);
    PyObject *others =
        machine.load.valid ? PyFloat_FromDouble(machine.load.others_cpus) : Py_NewRef(Py_None);
    if (!others)
        return NULL;
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:O,s:i,s:i,s:i,s:i,s:N,s:N,s:N,s:N,s:N}", "workers", d.workers, "prefetch",
        d.prefetch, "threads", d.threads, "pinned", d.pinned ? Py_True : Py_False, "usable_cpus",
        d.usable_cpus, "available_cpus", d.available_cpus, "others_cpus", d.others_cpus,
        "host_threads", host_threads, "load_others_cpus", others, "workers_why",
        why_dict(&d.workers_why), "prefetch_why", why_dict(&d.prefetch_why), "threads_why",
        why_dict(&d.threads_why), "pinned_why", why_dict(&d.pinned_why));
}

static PyMethodDef data_functions[] = {
    {"epoch_order", epoch_order, METH_VARARGS, "the sampler's batches of one epoch"},
    {"epoch_batches", epoch_batches, METH_VARARGS, "batches per epoch"},
    {"transform_apply", transform_apply, METH_VARARGS, "one sample through a transform"},
    {"transform_one_pass", transform_one_pass, METH_VARARGS,
     "whether a transform is one cheap pass per sample (the tuner's cheap_transform)"},
    {"decide", decide, METH_VARARGS, "the tuner's loader settings, with reasons"},
    {NULL, NULL, 0, NULL},
};

int stokepy_add_data(PyObject *m)
{
    if (stokepy_add_dataset(m) < 0)
        return -1;
    /* Only Python makes LoaderCores (by calling the type), so its pointer is not kept. */
    PyTypeObject *core = stokepy_add_type(m, &core_spec);
    if (!core)
        return -1;
    Py_DECREF((PyObject *)core);
    if (!(HoldType = stokepy_add_type(m, &hold_spec)) ||
        !(ArrayType = stokepy_add_type(m, &array_spec)))
        return -1;
    return PyModule_AddFunctions(m, data_functions);
}
