/* batch.c - a batch's zero-copy buffers and their lifetime: _stoke._Hold gives the
 * buffers back to the loader when the last array viewing them is freed, so nothing is
 * overwritten under a live tensor and nothing is copied; _stoke.Array hands them out as
 * DLPack tensors (torch.from_dlpack / numpy.from_dlpack). */
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "ext.h"
#include "loader.h"
#include "stoke/data.h"

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

PyType_Spec stokepy_hold_spec = {
    .name = "_stoke._Hold",
    .basicsize = sizeof(HoldObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = hold_slots,
};

PyTypeObject *stokepy_HoldType;

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

PyType_Spec stokepy_array_spec = {
    .name = "_stoke.Array",
    .basicsize = sizeof(ArrayObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = array_slots,
};

PyTypeObject *stokepy_ArrayType;

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

ArrayObject *stokepy_new_array(HoldObject *h, void *data, int64_t n, const stoke_shape *s,
                               stoke_dtype t, const stoke_batch *b, int device)
{
    ArrayObject *a = PyObject_New(ArrayObject, stokepy_ArrayType);
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
