/* stokepy_data_functions.c - the module's data functions for the Python layer and its tests: the
 * sampler's order, one sample through the transform alone, and the tuner's loader
 * settings (decide(), transform_one_pass) as `stoke train` decides them. */
#include <stdlib.h>
#include <string.h>

#include "ext.h"
#include "loader.h"
#include "stoke/data.h"
#include "stoke/hw.h"
#include "stoke/train.h"
#include "stoke/tune.h"

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
    if (stokepy_get_i64(o, "batch_size", &so.batch_size) < 0 ||
        stokepy_get_bool(o, "shuffle", &so.shuffle) < 0 ||
        stokepy_get_bool(o, "drop_last", &so.drop_last) < 0 ||
        stokepy_get_int(o, "rank", &so.rank) < 0 ||
        stokepy_get_int(o, "world_size", &so.world_size) < 0 ||
        stokepy_get_u64(o, "seed", &so.seed) < 0)
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
    if (stokepy_get_i64(o, "batch_size", &so.batch_size) < 0 ||
        stokepy_get_bool(o, "drop_last", &so.drop_last) < 0 ||
        stokepy_get_int(o, "rank", &so.rank) < 0 ||
        stokepy_get_int(o, "world_size", &so.world_size) < 0)
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
    if (!stokepy_dataset_ok((DatasetObject *)ds) || stokepy_parse_transform(&tmp, t) < 0)
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
    if (stokepy_parse_transform(&tmp, t) < 0)
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

PyMethodDef stokepy_data_functions[] = {
    {"epoch_order", epoch_order, METH_VARARGS, "the sampler's batches of one epoch"},
    {"epoch_batches", epoch_batches, METH_VARARGS, "batches per epoch"},
    {"transform_apply", transform_apply, METH_VARARGS, "one sample through a transform"},
    {"transform_one_pass", transform_one_pass, METH_VARARGS,
     "whether a transform is one cheap pass per sample (the tuner's cheap_transform)"},
    {"decide", decide, METH_VARARGS, "the tuner's loader settings, with reasons"},
    {NULL, NULL, 0, NULL},
};
