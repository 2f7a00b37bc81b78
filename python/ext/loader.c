/* loader.c - _stoke.LoaderCore, the loader for Python: its life (made from an options
 * dict; workers started, stopped, left alone after fork()) and its iteration, with Ctrl-C
 * honoured while it waits. Batches leave as DLPack tensors over the loader's own buffers (opts.hold;
 * batch.c); which loader the monitors report is kept here too. */
#include <pthread.h>
#include <unistd.h>

#include "ext.h"
#include "loader.h"
#include "stoke/data.h"
#include "stoke/hw.h"
#include "stoke/monitor.h"

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

/* ---- the loader core ------------------------------------------------------------------- */

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
    if (stokepy_get_i64(o, "batch_size", &lo.sampler.batch_size) < 0 ||
        stokepy_get_bool(o, "shuffle", &lo.sampler.shuffle) < 0 ||
        stokepy_get_bool(o, "drop_last", &lo.sampler.drop_last) < 0 ||
        stokepy_get_int(o, "rank", &lo.sampler.rank) < 0 ||
        stokepy_get_int(o, "world_size", &lo.sampler.world_size) < 0 ||
        stokepy_get_i64(o, "start_epoch", &lo.start.epoch) < 0 ||
        stokepy_get_i64(o, "start_index", &lo.start.index) < 0 ||
        stokepy_get_int(o, "workers", &lo.workers) < 0 ||
        stokepy_get_int(o, "prefetch", &lo.prefetch) < 0 ||
        stokepy_get_int(o, "device", &device) < 0)
        return -1;
    if (stokepy_get_u64(o, "seed", &lo.sampler.seed) < 0)
        return -1;
    PyObject *t = PyDict_GetItemString(o, "transform");
    if (t && t != Py_None) {
        if (stokepy_parse_transform(self, t) < 0)
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
    HoldObject *h = PyObject_New(HoldObject, stokepy_HoldType);
    if (!h) {
        stoke_loader_release(l, b.held);
        return NULL;
    }
    Py_INCREF((PyObject *)self);
    h->core = self;
    h->token = b.held;
    const stoke_dataset_info *info = stoke_dataset_get_info(((DatasetObject *)self->dataset)->d);
    int device_id = self->device;
    ArrayObject *x =
        stokepy_new_array(h, b.inputs, b.size, &b.input_shape, b.input_dtype, &b, device_id);
    ArrayObject *y = NULL;
    if (x && b.targets) {
        y = stokepy_new_array(h, b.targets, b.size, &info->target_shape, info->target_dtype, &b,
                              device_id);
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

int stokepy_add_data(PyObject *m)
{
    if (stokepy_add_dataset(m) < 0)
        return -1;
    /* Only Python makes LoaderCores (by calling the type), so its pointer is not kept. */
    PyTypeObject *core = stokepy_add_type(m, &core_spec);
    if (!core)
        return -1;
    Py_DECREF((PyObject *)core);
    if (!(stokepy_HoldType = stokepy_add_type(m, &stokepy_hold_spec)) ||
        !(stokepy_ArrayType = stokepy_add_type(m, &stokepy_array_spec)))
        return -1;
    return PyModule_AddFunctions(m, stokepy_data_functions);
}
