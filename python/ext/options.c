/* options.c - the loader's options and transforms as Python passes them (dicts), read
 * into stoke's option structs: a missing key keeps stoke's default, a wrong one raises. */
#include <string.h>

#include "ext.h"
#include "loader.h"
#include "stoke/data.h"

/* Dict helpers for the options: a missing key leaves the default. */
int stokepy_get_i64(PyObject *d, const char *k, int64_t *out)
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
int stokepy_get_u64(PyObject *d, const char *k, uint64_t *out)
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

int stokepy_get_int(PyObject *d, const char *k, int *out)
{
    int64_t x = *out;
    if (stokepy_get_i64(d, k, &x) < 0)
        return -1;
    if (x < INT32_MIN || x > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s=%lld is out of range", k, (long long)x);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int stokepy_get_bool(PyObject *d, const char *k, bool *out)
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
    if (stokepy_get_int(d, "height", &op->height) < 0 ||
        stokepy_get_int(d, "width", &op->width) < 0 || stokepy_get_int(d, "pad", &op->pad) < 0 ||
        stokepy_get_bool(d, "center", &op->center) < 0 || get_float(d, "p", &op->p) < 0 ||
        get_float(d, "brightness", &op->brightness) < 0 ||
        get_float(d, "contrast", &op->contrast) < 0 ||
        get_float(d, "saturation", &op->saturation) < 0 || get_float(d, "hue", &op->hue) < 0 ||
        stokepy_get_bool(d, "random_order", &op->random_order) < 0 ||
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

int stokepy_parse_transform(CoreObject *self, PyObject *t)
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
