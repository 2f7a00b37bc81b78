/* probe.c - _stoke.probe() and _stoke.recommend(): what `stoke probe` reports about the
 * machine and the settings stoke recommends for it, as Python dicts. */
#include "ext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/hw.h"
#include "stoke/nn.h"
#include "stoke/tune.h"

/* The same fact `stoke probe` states beside the OpenBLAS section (cmd_probe.c). */
static const char openblas_note[] =
    "stoke's training does not use OpenBLAS (its matrix products run on oneDNN, which "
    "picks kernels by the instructions the CPU reports); the fit matters to programs "
    "that load this library (numpy, Debian's torch)";

/* How long probe() watches what other processes take: what `stoke probe` does. */
#define PROBE_LOAD_S 0.2

/* Unknown facts are None, so every key is always there. */
static int put_u64(PyObject *d, const char *key, uint64_t v)
{
    return v ? stokepy_put(d, key, PyLong_FromUnsignedLongLong(v))
             : PyDict_SetItemString(d, key, Py_None);
}

static int put_str(PyObject *d, const char *key, const char *s)
{
    return s && *s ? stokepy_put(d, key, PyUnicode_FromString(s))
                   : PyDict_SetItemString(d, key, Py_None);
}

static PyObject *name_list(uint32_t simd)
{
    char buf[256];
    stoke_simd_names(simd, buf, sizeof buf);
    PyObject *list = PyList_New(0);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); list && t;
         t = strtok_r(NULL, " ", &save)) {
        PyObject *s = PyUnicode_FromString(t);
        if (!s || PyList_Append(list, s) < 0)
            Py_CLEAR(list);
        Py_XDECREF(s);
    }
    return list;
}

static const char *version_text(int v, char *buf, size_t size)
{
    if (!v)
        return NULL;
    snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
    return buf;
}

/* A number /proc/cpuinfo may not give (-1): None, as the JSON leaves it out. */
static int put_int(PyObject *d, const char *key, int v)
{
    return v >= 0 ? stokepy_put(d, key, PyLong_FromLong(v)) : PyDict_SetItemString(d, key, Py_None);
}

/* What other processes took over the probe's short look, as `stoke probe` says it;
 * None when the counters did not advance or could not be read. */
static PyObject *load_dict(const stoke_cpu_load *l)
{
    if (!l->valid)
        Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (stokepy_put(d, "seconds", PyFloat_FromDouble(l->seconds)) < 0 ||
        stokepy_put(d, "busy_cpus", PyFloat_FromDouble(l->busy_cpus)) < 0 ||
        stokepy_put(d, "own_cpus", PyFloat_FromDouble(l->own_cpus)) < 0 ||
        stokepy_put(d, "others_cpus", PyFloat_FromDouble(l->others_cpus)) < 0 ||
        stokepy_put(d, "steal_pct", PyFloat_FromDouble(l->steal_pct)) < 0 ||
        put_int(d, "run_queue", l->run_queue) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *cpu_dict(const stoke_machine *m)
{
    const stoke_cpu_info *c = &m->cpu;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (put_str(d, "model", c->model) < 0 ||
        put_str(d, "generation",
                stoke_cpu_generation(c->vendor, c->family, c->model_number, c->stepping)) < 0 ||
        put_str(d, "vendor", c->vendor) < 0 || put_int(d, "family", c->family) < 0 ||
        put_int(d, "model_number", c->model_number) < 0 ||
        put_u64(d, "logical_cpus", (uint64_t)c->logical_cpus) < 0 ||
        put_u64(d, "usable_cpus", (uint64_t)c->usable_cpus) < 0 ||
        (c->quota_cpus > 0 ? stokepy_put(d, "quota_cpus", PyFloat_FromDouble(c->quota_cpus))
                           : PyDict_SetItemString(d, "quota_cpus", Py_None)) < 0 ||
        put_str(d, "quota_file", c->quota_cpus > 0 ? c->quota_file : NULL) < 0 ||
        put_u64(d, "available_cpus", (uint64_t)c->available_cpus) < 0 ||
        stokepy_put(d, "load", load_dict(&m->load)) < 0 ||
        put_u64(d, "physical_cores", (uint64_t)c->physical_cores) < 0 ||
        put_u64(d, "sockets", (uint64_t)c->sockets) < 0 ||
        put_u64(d, "numa_nodes", (uint64_t)c->numa_nodes) < 0 ||
        put_u64(d, "l1d_bytes", c->l1d_bytes) < 0 || put_u64(d, "l2_bytes", c->l2_bytes) < 0 ||
        put_u64(d, "l3_bytes", c->l3_bytes) < 0 || stokepy_put(d, "simd", name_list(c->simd)) < 0 ||
        (c->max_mhz > 0 ? stokepy_put(d, "max_mhz", PyFloat_FromDouble(c->max_mhz))
                        : PyDict_SetItemString(d, "max_mhz", Py_None)) < 0 ||
        stokepy_put(d, "isa_cap", PyUnicode_FromString(stoke_cpu_isa_name(c->isa_cap))) < 0 ||
        stokepy_put(d, "simd_hidden", name_list(c->simd_hidden)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *openblas_dict(const stoke_machine *m)
{
    if (!m->openblas.valid)
        Py_RETURN_NONE;
    stoke_blas_check bc;
    stoke_openblas_check(m->openblas.core, m->cpu.simd | m->cpu.simd_hidden, &bc);
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (put_str(d, "core", m->openblas.core) < 0 || put_str(d, "config", m->openblas.config) < 0 ||
        put_str(d, "fit", stoke_blas_fit_name(bc.fit)) < 0 ||
        put_str(d, "core_isa", bc.core_isa) < 0 || put_str(d, "cpu_isa", bc.cpu_isa) < 0 ||
        put_str(d, "coretype", bc.coretype) < 0 || put_str(d, "reason", bc.reason) < 0 ||
        PyDict_SetItemString(d, "used_by_stoke_training", Py_False) < 0 ||
        put_str(d, "note", openblas_note) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *memory_dict(const stoke_mem_info *mem)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    /* Where "available" came from: the tighter of MemAvailable and the cgroup's
     * headroom (stoke_mem_probe). */
    const char *from = NULL;
    if (mem->available_bytes)
        from =
            mem->available_bytes < mem->meminfo_available_bytes ? "cgroup limit" : "MemAvailable";
    if (put_u64(d, "total_bytes", mem->total_bytes) < 0 ||
        put_u64(d, "available_bytes", mem->available_bytes) < 0 ||
        put_str(d, "available_from", from) < 0 ||
        put_u64(d, "meminfo_available_bytes", mem->meminfo_available_bytes) < 0 ||
        put_u64(d, "cgroup_limit_bytes", mem->cgroup_limit_bytes) < 0 ||
        put_u64(d, "cgroup_used_bytes", mem->cgroup_used_bytes) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *storage_dict(const stoke_machine *m)
{
    if (!m->have_disk)
        Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const stoke_disk_info *k = &m->disk;
    if (put_str(d, "path", m->data_path) < 0 || put_str(d, "mount_point", k->mount_point) < 0 ||
        put_str(d, "fs_type", k->fs_type) < 0 || put_str(d, "device", k->device) < 0 ||
        put_str(d, "kind", stoke_disk_kind_name(k->kind)) < 0 ||
        put_str(d, "reason", k->reason) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* {"ready": bool, "detail": str}: whether stoke train's CUDA backend runs on GPU i. */
static PyObject *cuda_backend_dict(const stoke_machine *m, int i)
{
    char why[512];
    bool ready = stoke_nn_cuda_ready_gpu(m, i, why, sizeof why);
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (stokepy_put(d, "ready", PyBool_FromLong(ready)) < 0 || put_str(d, "detail", why) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *gpu_dict(const stoke_machine *m, int i)
{
    const stoke_gpu_info *g = &m->gpus[i];
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
    unsigned v = g->valid;
    int rc = stokepy_put(d, "index", PyLong_FromLong(g->index));
    if (rc == 0)
        rc = put_str(d, "name", g->name);
    if (rc == 0)
        rc = put_str(d, "uuid", g->uuid);
    if (rc == 0)
        rc = put_str(d, "pci_bus_id", (v & STOKE_GPU_HAS_PCI_BUS_ID) ? g->pci_bus_id : NULL);
    if (rc == 0)
        rc = put_u64(d, "memory_total_bytes",
                     (v & STOKE_GPU_HAS_MEMORY) ? g->memory_total_bytes : 0);
    if (rc == 0)
        rc = put_str(d, "compute_capability", (v & STOKE_GPU_HAS_CC) ? cc : NULL);
    if (rc == 0)
        rc = put_u64(d, "sm_count", (v & STOKE_GPU_HAS_SM_COUNT) ? (uint64_t)g->sm_count : 0);
    if (rc == 0)
        rc = put_u64(d, "power_limit_mw", (v & STOKE_GPU_HAS_POWER_LIMIT) ? g->power_limit_mw : 0);
    if (rc == 0)
        rc = put_u64(d, "max_sm_clock_mhz",
                     (v & STOKE_GPU_HAS_MAX_SM_CLOCK) ? g->max_sm_clock_mhz : 0);
    if (rc == 0)
        rc = put_u64(d, "pcie_gen", (v & STOKE_GPU_HAS_PCIE) ? g->pcie_gen : 0);
    if (rc == 0)
        rc = put_u64(d, "pcie_width", (v & STOKE_GPU_HAS_PCIE) ? g->pcie_width : 0);
    if (rc == 0)
        rc = stokepy_put(d, "cuda_backend", cuda_backend_dict(m, i));
    if (rc < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* Probes with the GIL released: loading NVML and the CUDA runtime takes a while. With
 * `load`, then looks at what other processes take for as long as `stoke probe` does (a
 * failed look leaves the load unknown). */
static stoke_machine *probe_machine(const char *data, bool load)
{
    stoke_machine *m = calloc(1, sizeof *m);
    if (!m) {
        PyErr_NoMemory();
        return NULL;
    }
    stoke_status st;
    PyThreadState *save = PyEval_SaveThread();
    st = stoke_machine_probe(m, data);
    if (st == STOKE_OK && load)
        (void)stoke_cpu_load_sample(PROBE_LOAD_S, &m->load);
    PyEval_RestoreThread(save);
    if (st != STOKE_OK) {
        free(m);
        stokepy_raise(st);
        return NULL;
    }
    return m;
}

static PyObject *py_probe(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"data", NULL};
    PyObject *data = Py_None, *bytes = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:probe", kwlist, &data))
        return NULL;
    if (data != Py_None && !PyUnicode_FSConverter(data, &bytes))
        return NULL;
    stoke_machine *m = probe_machine(bytes ? PyBytes_AsString(bytes) : NULL, true);
    Py_XDECREF(bytes);
    if (!m)
        return NULL;
    char a[32], b[32];
    PyObject *d = PyDict_New(), *gpus = NULL;
    if (!d)
        goto fail;
    if (put_str(d, "stoke_version", STOKE_VERSION) < 0 || stokepy_put(d, "cpu", cpu_dict(m)) < 0 ||
        stokepy_put(d, "openblas", openblas_dict(m)) < 0 ||
        stokepy_put(d, "memory", memory_dict(&m->mem)) < 0 ||
        stokepy_put(d, "storage", storage_dict(m)) < 0 ||
        put_str(d, "driver_version", m->driver_version) < 0 ||
        put_str(d, "cuda_driver_version", version_text(m->cuda_driver_version, a, sizeof a)) < 0 ||
        put_str(d, "cuda_runtime_version", version_text(m->cuda_runtime_version, b, sizeof b)) < 0)
        goto fail;
    gpus = PyList_New(0);
    if (!gpus)
        goto fail;
    for (int i = 0; i < m->gpu_count; i++) {
        PyObject *g = gpu_dict(m, i);
        int rc = g ? PyList_Append(gpus, g) : -1;
        Py_XDECREF(g);
        if (rc < 0)
            goto fail;
    }
    if (PyDict_SetItemString(d, "gpus", gpus) < 0 ||
        stokepy_put(d, "gpu_note", PyUnicode_FromString(m->gpu_note)) < 0)
        goto fail;
    Py_DECREF(gpus);
    free(m);
    return d;
fail:
    Py_XDECREF(gpus);
    Py_XDECREF(d);
    free(m);
    return NULL;
}

static const char *rec_type_name(stoke_rec_type t)
{
    switch (t) {
    case STOKE_REC_TEXT: return "text";
    case STOKE_REC_BOOL: return "bool";
    case STOKE_REC_COUNT: return "count";
    case STOKE_REC_FLOPS: return "flops";
    }
    return "?";
}

static PyObject *rec_value(const stoke_rec *r)
{
    if (!r->known)
        Py_RETURN_NONE;
    switch (r->type) {
    case STOKE_REC_TEXT: return PyUnicode_FromString(r->text);
    case STOKE_REC_BOOL: return PyBool_FromLong(r->number != 0);
    case STOKE_REC_COUNT: return PyLong_FromLongLong((long long)r->number);
    case STOKE_REC_FLOPS: return PyFloat_FromDouble(r->number);
    }
    Py_RETURN_NONE;
}

static PyObject *py_recommend(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    stoke_machine *m = probe_machine(NULL, false);
    if (!m)
        return NULL;
    stoke_recs *recs = calloc(1, sizeof *recs);
    PyObject *list = recs ? PyList_New(0) : PyErr_NoMemory();
    if (list)
        stoke_recommend(m, recs);
    for (int i = 0; list && i < recs->count; i++) {
        const stoke_rec *r = &recs->items[i];
        PyObject *o = PyDict_New();
        int rc = o ? 0 : -1;
        if (rc == 0)
            rc = stokepy_put(o, "key", PyUnicode_FromString(r->key));
        if (rc == 0)
            rc = stokepy_put(o, "device",
                             r->device == STOKE_TUNE_CPU
                                 ? PyUnicode_FromString("cpu")
                                 : PyLong_FromLong(m->gpus[r->device].index));
        if (rc == 0)
            rc = stokepy_put(o, "type", PyUnicode_FromString(rec_type_name(r->type)));
        if (rc == 0)
            rc = stokepy_put(o, "known", PyBool_FromLong(r->known));
        if (rc == 0)
            rc = stokepy_put(o, "value", rec_value(r));
        if (rc == 0)
            rc = stokepy_put(o, "reason", PyUnicode_FromString(r->reason));
        /* the facts do not settle it (the CPU's precision): what they could not tell */
        if (rc == 0)
            rc = put_str(o, "unsure", r->unsure ? r->unsure_why : NULL);
        if (rc == 0)
            rc = PyList_Append(list, o);
        Py_XDECREF(o);
        if (rc < 0)
            Py_CLEAR(list);
    }
    free(recs);
    free(m);
    return list;
}

static PyMethodDef probe_functions[] = {
    {"probe", (PyCFunction)(void (*)(void))py_probe, METH_VARARGS | METH_KEYWORDS,
     "probe(data=None) -> dict: the CPU, OpenBLAS, memory, storage under `data` and the "
     "NVIDIA GPUs, as `stoke probe` reports them."},
    {"recommend", (PyCFunction)py_recommend, METH_NOARGS,
     "recommend() -> list of dicts: the settings stoke recommends for this machine, each "
     "with its reason."},
    {NULL, NULL, 0, NULL},
};

int stokepy_add_probe(PyObject *m) { return PyModule_AddFunctions(m, probe_functions); }
