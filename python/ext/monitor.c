/* monitor.c - _stoke.Monitor: libstoke's sampler watching the Python process (or any
 * tree), its JSON lines and live line, and the run's summary and diagnosis as Python
 * objects. The input pipeline it reports is the loader iterated most recently
 * (stokepy_pipeline). */
#include "ext.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoke/monitor.h"

/* What the sampler thread writes after each sample. The controlling thread changes it
 * only while the sampler is stopped (json_fd, printed). */
typedef struct sink {
    int json_fd;     /* -1: no JSON lines, or closed by stop() */
    char *json_path; /* NULL without JSON lines */
    bool live, tty;
    double interval, last_line_t;
    bool printed; /* a live line is on the terminal without its newline */
    bool any_line;
    char buf[32768];
} sink;

typedef struct MonitorObject {
    PyObject_HEAD stoke_monitor *mon;
    sink *sink;
    /* start, stop and the summaries release the GIL while the sampler thread is
     * joined; this keeps two Python threads from driving the monitor at once. */
    PyThread_type_lock ctl;
    bool running;
    bool error_raised; /* the sampler's first error reached Python once already */
    int pid;           /* watched root, 0 = whole system */
    pid_t owner;       /* the process whose thread samples; a fork() child has none */
    bool have_disk;    /* `data` was given: its storage feeds the I/O rule */
    stoke_disk_info disk;
    char data_path[256];
} MonitorObject;

static void write_stderr(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* a closed stderr is no reason to stop sampling */
        s += w;
        n -= (size_t)w;
    }
}

/* Runs on the sampler thread without the GIL, so it writes to the descriptors
 * directly rather than through sys.stderr. */
static stoke_status on_sample(const stoke_mon_sample *s, void *arg)
{
    sink *c = arg;
    stoke_status st = STOKE_OK;
    if (c->json_fd >= 0) {
        size_t n = stoke_mon_format_json(s, c->buf, sizeof c->buf);
        if (n)
            st = stoke_mon_write_line(c->json_fd, c->buf, n, c->json_path);
    }
    /* Like `stoke monitor`: a terminal gets one refreshed line, a log at most about
     * one plain line per second. */
    if (c->live && (c->tty || !c->any_line || s->t - c->last_line_t >= 1.0 - c->interval / 2)) {
        static const char prefix[] = "stoke: ";
        size_t off = 0;
        if (c->tty)
            c->buf[off++] = '\r';
        memcpy(c->buf + off, prefix, sizeof prefix - 1);
        off += sizeof prefix - 1;
        off += stoke_mon_format_line(s, c->buf + off, sizeof c->buf - off - 8);
        const char *end = c->tty ? "\033[K" : "\n";
        memcpy(c->buf + off, end, strlen(end));
        off += strlen(end);
        write_stderr(c->buf, off);
        c->last_line_t = s->t;
        c->printed = c->tty;
        c->any_line = true;
    }
    return st;
}

static void ctl_lock(MonitorObject *self)
{
    if (!PyThread_acquire_lock(self->ctl, NOWAIT_LOCK)) {
        PyThreadState *save = PyEval_SaveThread();
        PyThread_acquire_lock(self->ctl, WAIT_LOCK);
        PyEval_RestoreThread(save);
    }
}

static void ctl_unlock(MonitorObject *self) { PyThread_release_lock(self->ctl); }

static bool ready(MonitorObject *self)
{
    if (self->mon)
        return true;
    PyErr_SetString(PyExc_RuntimeError, "the Monitor was not initialized");
    return false;
}

static PyObject *Monitor_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args, (void)kw;
    allocfunc alloc = PyType_GetSlot(type, Py_tp_alloc);
    MonitorObject *self = (MonitorObject *)alloc(type, 0);
    if (!self)
        return NULL;
    self->ctl = PyThread_allocate_lock();
    if (!self->ctl) {
        Py_DECREF((PyObject *)self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void sink_free(sink *c)
{
    if (!c)
        return;
    if (c->json_fd >= 0)
        close(c->json_fd);
    free(c->json_path);
    free(c);
}

static int Monitor_init(MonitorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"interval", "pid", "no_gpu", "jsonl", "live", "data", NULL};
    double interval = 0.5;
    PyObject *pid_obj = Py_None, *jsonl = Py_None, *data = Py_None;
    int no_gpu = 0, live = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|dOpOpO:Monitor", kwlist, &interval, &pid_obj,
                                     &no_gpu, &jsonl, &live, &data))
        return -1;
    if (self->mon) {
        PyErr_SetString(PyExc_RuntimeError, "a Monitor cannot be initialized twice");
        return -1;
    }
    int pid = (int)getpid();
    if (PyBool_Check(pid_obj)) {
        PyErr_SetString(PyExc_TypeError, "pid must be an int or None, not bool");
        return -1;
    }
    if (pid_obj != Py_None) {
        long v = PyLong_AsLong(pid_obj);
        if (v == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                stokepy_wrong_type("pid", "an int or None", pid_obj);
            }
            return -1;
        }
        if (v < 0 || v > 0x7fffffff) {
            stoke_fail(STOKE_ERR_ARG,
                       "pid must be a process id, 0 (the whole system) or None "
                       "(this process), not %ld",
                       v);
            stokepy_raise(STOKE_ERR_ARG);
            return -1;
        }
        pid = (int)v;
    }
    if (data != Py_None) {
        PyObject *bytes = NULL;
        if (!PyUnicode_FSConverter(data, &bytes))
            return -1;
        snprintf(self->data_path, sizeof self->data_path, "%s", PyBytes_AsString(bytes));
        stoke_status st = stoke_disk_probe(PyBytes_AsString(bytes), &self->disk);
        Py_DECREF(bytes);
        if (st != STOKE_OK) {
            stokepy_raise(st);
            return -1;
        }
        self->have_disk = true;
    }
    sink *c = calloc(1, sizeof *c);
    if (!c) {
        PyErr_NoMemory();
        return -1;
    }
    c->json_fd = -1;
    c->live = live;
    c->tty = isatty(STDERR_FILENO);
    c->interval = interval;
    if (jsonl != Py_None) {
        PyObject *bytes = NULL;
        if (!PyUnicode_FSConverter(jsonl, &bytes)) {
            sink_free(c);
            return -1;
        }
        c->json_path = strdup(PyBytes_AsString(bytes));
        Py_DECREF(bytes);
        if (!c->json_path) {
            sink_free(c);
            PyErr_NoMemory();
            return -1;
        }
    }
    stoke_monitor_config cfg = {.interval_s = interval,
                                .pid = pid,
                                .no_gpu = no_gpu,
                                .on_sample = on_sample,
                                .ctx = c,
                                .pipeline_fn = stokepy_pipeline};
    stoke_status st = STOKE_OK;
    stoke_monitor *mon = NULL;
    /* Loading NVML and the first /proc reading can take a while. The log is opened
     * after the monitor exists, so a bad interval or pid leaves no file behind. */
    PyThreadState *save = PyEval_SaveThread();
    st = stoke_monitor_create(&cfg, &mon);
    if (st == STOKE_OK && c->json_path) {
        st = stoke_mon_open_log(c->json_path, false, &c->json_fd);
        if (st != STOKE_OK) {
            stoke_monitor_free(mon);
            mon = NULL;
        }
    }
    PyEval_RestoreThread(save);
    if (st != STOKE_OK) {
        sink_free(c);
        stokepy_raise(st);
        return -1;
    }
    self->mon = mon;
    self->sink = c;
    self->pid = pid;
    self->owner = getpid();
    return 0;
}

static void Monitor_dealloc(MonitorObject *self)
{
    /* In a fork() child (DataLoader workers) the sampler thread does not exist, so
     * joining it would be undefined: the child leaves the monitor alone. */
    if (self->mon && self->owner != getpid())
        self->mon = NULL;
    if (self->mon) {
        stoke_monitor *mon = self->mon;
        self->mon = NULL;
        PyThreadState *save = PyEval_SaveThread();
        stoke_monitor_free(mon);
        PyEval_RestoreThread(save);
    }
    if (self->sink && self->sink->printed)
        write_stderr("\n", 1);
    sink_free(self->sink);
    if (self->ctl)
        PyThread_free_lock(self->ctl);
    stokepy_free((PyObject *)self);
}

static PyObject *Monitor_start(MonitorObject *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    ctl_lock(self);
    stoke_status st = STOKE_OK;
    if (!self->running) {
        sink *c = self->sink;
        /* stop() closed the log so that it is complete on disk; a new start adds to it. */
        if (c->json_path && c->json_fd < 0)
            st = stoke_mon_open_log(c->json_path, true, &c->json_fd);
        if (st == STOKE_OK)
            st = stoke_monitor_start(self->mon);
        self->running = st == STOKE_OK;
    }
    ctl_unlock(self);
    if (st != STOKE_OK)
        return stokepy_raise(st);
    Py_RETURN_NONE;
}

/* The shortest span the sample taken at stop() covers: over less, the CPU readings
 * (clock ticks of 10 ms) would say more about the tick than about the run. */
#define STOP_SAMPLE_MIN_S 0.02

/* Stops and joins the sampler; the caller holds ctl and the GIL. */
static void halt(MonitorObject *self)
{
    if (!self->running)
        return;
    if (self->owner != getpid()) {
        self->running = false; /* a fork() child: there is no thread to join */
        return;
    }
    stoke_monitor *mon = self->mon;
    PyThreadState *save = PyEval_SaveThread();
    stoke_monitor_stop(mon);
    PyEval_RestoreThread(save);
    self->running = false;
}

static stoke_status resume(MonitorObject *self)
{
    stoke_status st = stoke_monitor_start(self->mon);
    self->running = st == STOKE_OK;
    return st;
}

static PyObject *Monitor_stop(MonitorObject *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    ctl_lock(self);
    bool was = self->running;
    halt(self);
    if (was && self->owner == getpid()) {
        /* A loop shorter than the interval still gets a sample of its whole length, so
         * that the diagnosis has something to judge (README's example is such a loop). */
        PyThreadState *save = PyEval_SaveThread();
        stoke_monitor_sample_now(self->mon, STOP_SAMPLE_MIN_S);
        PyEval_RestoreThread(save);
    }
    sink *c = self->sink;
    if (c->printed) {
        write_stderr("\n", 1);
        c->printed = false;
    }
    stoke_status st = STOKE_OK;
    char msg[600];
    if (was && c->json_fd >= 0) {
        int fd = c->json_fd;
        c->json_fd = -1;
        /* close() can be the first to report a failed write (NFS). */
        if (close(fd) != 0) {
            st = STOKE_ERR_IO;
            snprintf(msg, sizeof msg, "cannot write to '%s': %s", c->json_path, strerror(errno));
        }
    }
    if (st == STOKE_OK && !self->error_raised) {
        st = stoke_monitor_error(self->mon, msg, sizeof msg);
        self->error_raised = st != STOKE_OK;
    }
    ctl_unlock(self);
    if (st != STOKE_OK) {
        stoke_fail(st, "%s", msg);
        return stokepy_raise(st);
    }
    Py_RETURN_NONE;
}

/* Summarizes the history. The sampler writes the history without a lock, so a running
 * monitor is paused for the copy and restarted: the next sample then comes at once
 * and the schedule continues (docs/python.md). */
static int summarize(MonitorObject *self, stoke_mon_summary *out)
{
    if (!ready(self))
        return -1;
    ctl_lock(self);
    bool was = self->running && self->owner == getpid();
    halt(self);
    int usable = 0;
    cpu_set_t set;
    if (sched_getaffinity(self->pid, sizeof set, &set) == 0)
        usable = CPU_COUNT(&set);
    stoke_status st;
    const stoke_mon_history *h = stoke_monitor_history(self->mon);
    PyThreadState *save = PyEval_SaveThread();
    st = stoke_mon_summarize(h, usable, out);
    PyEval_RestoreThread(save);
    stoke_status rs = was ? resume(self) : STOKE_OK;
    if (st == STOKE_OK && self->have_disk) {
        out->have_disk = true;
        out->disk_kind = self->disk.kind;
        snprintf(out->data_path, sizeof out->data_path, "%s", self->data_path);
    }
    ctl_unlock(self);
    if (st == STOKE_OK)
        st = rs;
    if (st != STOKE_OK) {
        stokepy_raise(st);
        return -1;
    }
    return 0;
}

static PyObject *stats_dict(const stoke_stats *s, const char *unit)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (stokepy_put(d, "n", PyLong_FromSize_t(s->n)) < 0 ||
        stokepy_put(d, "min", PyFloat_FromDouble(s->min)) < 0 ||
        stokepy_put(d, "median", PyFloat_FromDouble(s->median)) < 0 ||
        stokepy_put(d, "p95", PyFloat_FromDouble(s->p95)) < 0 ||
        stokepy_put(d, "max", PyFloat_FromDouble(s->max)) < 0 ||
        stokepy_put(d, "mean", PyFloat_FromDouble(s->mean)) < 0 ||
        stokepy_put(d, "unit", PyUnicode_FromString(unit)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *pipeline_dict(const stoke_mon_pipeline *p)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (stokepy_put(d, "batches", PyLong_FromLongLong(p->batches)) < 0 ||
        stokepy_put(d, "wait_total_s", PyFloat_FromDouble(p->wait_total_s)) < 0 ||
        stokepy_put(d, "wait_avg_ms", PyFloat_FromDouble(p->wait_avg_ms)) < 0 ||
        stokepy_put(d, "wait_p95_ms", PyFloat_FromDouble(p->wait_p95_ms)) < 0 ||
        stokepy_put(d, "wait_max_ms", PyFloat_FromDouble(p->wait_max_ms)) < 0 ||
        stokepy_put(d, "fill_avg", PyFloat_FromDouble(p->fill_avg)) < 0 ||
        stokepy_put(d, "slots", PyLong_FromLong(p->slots)) < 0 ||
        stokepy_put(d, "workers", PyLong_FromLong(p->workers)) < 0 ||
        stokepy_put(d, "busy_frac", PyFloat_FromDouble(p->busy_frac)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* Appends o (a new reference, NULL after a failure) to *l and drops it; on failure *l
 * is released and set to NULL, which ends the caller's loop. */
static void list_take(PyObject **l, PyObject *o)
{
    if (!o || PyList_Append(*l, o) < 0)
        Py_CLEAR(*l);
    Py_XDECREF(o);
}

/* The ranks of the watched tree: [{rank, pid, metrics: {cpu_pct, rss}}]. */
static PyObject *rank_procs_list(const stoke_mon_summary *s)
{
    PyObject *l = PyList_New(0);
    for (int k = 0; l && k < s->nrank_procs && k < STOKE_MON_LOCAL_RANKS; k++) {
        const stoke_mon_rank_usage *u = &s->rank_procs[k];
        PyObject *m = PyDict_New();
        int rc = m ? 0 : -1;
        if (rc == 0 && u->cpu_pct.n)
            rc = stokepy_put(m, "cpu_pct", stats_dict(&u->cpu_pct, "% of a core"));
        if (rc == 0 && u->rss_bytes.n)
            rc = stokepy_put(m, "rss", stats_dict(&u->rss_bytes, "bytes"));
        list_take(&l, rc == 0 ? Py_BuildValue("{s:i,s:i,s:O}", "rank", u->rank, "pid", u->pid,
                                              "metrics", m)
                              : NULL);
        Py_XDECREF(m);
    }
    return l;
}

/* The trainer's per-rank step figures: [{rank, host, steps, step_s, input_wait_s,
 * compute_s, reduce_wait_s}]. */
static PyObject *ranks_list(const stoke_mon_summary *s)
{
    PyObject *l = PyList_New(0);
    for (int k = 0; l && k < s->nranks && k < STOKE_MON_MAX_RANKS; k++) {
        const stoke_mon_rank *x = &s->ranks[k];
        /* the trainer's words, not checked: bad bytes are replaced rather than raised */
        PyObject *host =
            PyUnicode_DecodeUTF8(x->host, (Py_ssize_t)strnlen(x->host, sizeof x->host), "replace");
        PyObject *o =
            Py_BuildValue("{s:i,s:N,s:L,s:d,s:d,s:d,s:d}", "rank", x->rank, "host", host, "steps",
                          (long long)x->steps, "step_s", x->step_s, "input_wait_s", x->input_wait_s,
                          "compute_s", x->compute_s, "reduce_wait_s", x->reduce_wait_s);
        list_take(&l, o);
    }
    return l;
}

static PyObject *summary_dict(const stoke_mon_summary *s)
{
    PyObject *d = PyDict_New(), *metrics = NULL, *gpus = NULL;
    if (!d)
        return NULL;
    if ((s->have_disk &&
         (stokepy_put(d, "data_path", PyUnicode_FromString(s->data_path)) < 0 ||
          stokepy_put(d, "data_storage", PyUnicode_FromString(stoke_disk_kind_name(s->disk_kind))) <
              0)) ||
        stokepy_put(d, "samples", PyLong_FromSize_t(s->samples)) < 0 ||
        stokepy_put(d, "duration_s", PyFloat_FromDouble(s->duration_s)) < 0 ||
        stokepy_put(d, "startup_s", PyFloat_FromDouble(s->startup_s)) < 0 ||
        stokepy_put(d, "startup_samples", PyLong_FromSize_t(s->startup_samples)) < 0 ||
        stokepy_put(d, "ncpu", PyLong_FromLong(s->ncpu)) < 0 ||
        stokepy_put(d, "usable_cpus", PyLong_FromLong(s->usable_cpus)) < 0 ||
        stokepy_put(d, "mem_total_bytes", PyLong_FromUnsignedLongLong(s->mem_total_bytes)) < 0 ||
        stokepy_put(d, "pid", PyLong_FromLong(s->proc_pid)) < 0)
        goto fail;
    metrics = PyDict_New();
    if (!metrics)
        goto fail;
    for (int i = 0; i < STOKE_M_COUNT; i++)
        if (s->sys[i].n && stokepy_put(metrics, stoke_sys_metric_name(i),
                                       stats_dict(&s->sys[i], stoke_sys_metric_unit(i))) < 0)
            goto fail;
    if (PyDict_SetItemString(d, "metrics", metrics) < 0)
        goto fail;
    gpus = PyList_New(0);
    if (!gpus)
        goto fail;
    for (int g = 0; g < s->gpu_count && g < STOKE_MAX_GPUS; g++) {
        PyObject *o = PyDict_New(), *m = PyDict_New();
        int rc = o && m ? 0 : -1;
        for (int i = 0; i < STOKE_G_COUNT && rc == 0; i++)
            if (s->gpu[g].s[i].n)
                rc = stokepy_put(m, stoke_gpu_metric_name(i),
                                 stats_dict(&s->gpu[g].s[i], stoke_gpu_metric_unit(i)));
        if (rc == 0)
            rc = stokepy_put(o, "index", PyLong_FromLong(g));
        if (rc == 0 && s->gpu[g].mem_total_bytes)
            rc = stokepy_put(o, "mem_total_bytes",
                             PyLong_FromUnsignedLongLong(s->gpu[g].mem_total_bytes));
        if (rc == 0 && s->gpu[g].power_limit_w > 0)
            rc = stokepy_put(o, "power_limit_w", PyFloat_FromDouble(s->gpu[g].power_limit_w));
        if (rc == 0)
            rc = stokepy_put(o, "throttle_samples", PyLong_FromSize_t(s->gpu[g].throttle_samples));
        if (rc == 0)
            rc = stokepy_put(o, "power_throttled", PyLong_FromSize_t(s->gpu[g].power_throttled));
        if (rc == 0)
            rc =
                stokepy_put(o, "thermal_throttled", PyLong_FromSize_t(s->gpu[g].thermal_throttled));
        if (rc == 0)
            rc = PyDict_SetItemString(o, "metrics", m);
        if (rc == 0)
            rc = PyList_Append(gpus, o);
        Py_XDECREF(m);
        Py_XDECREF(o);
        if (rc < 0)
            goto fail;
    }
    if (PyDict_SetItemString(d, "gpus", gpus) < 0)
        goto fail;
    if (s->have_pipeline && stokepy_put(d, "pipeline", pipeline_dict(&s->pipeline)) < 0)
        goto fail;
    /* "ranks" as in a JSON line (the processes); the trainer's figures apart */
    if (stokepy_put(d, "ranks", rank_procs_list(s)) < 0 ||
        stokepy_put(d, "rank_steps", ranks_list(s)) < 0)
        goto fail;
    Py_DECREF(metrics);
    Py_DECREF(gpus);
    return d;
fail:
    Py_XDECREF(metrics);
    Py_XDECREF(gpus);
    Py_DECREF(d);
    return NULL;
}

static PyObject *Monitor_summary(MonitorObject *self, PyObject *unused)
{
    (void)unused;
    stoke_mon_summary s;
    if (summarize(self, &s) < 0)
        return NULL;
    return summary_dict(&s);
}

/* A number of a finding, None when it is unknown (NAN). */
static PyObject *number_or_none(double v)
{
    return isnan(v) ? Py_NewRef(Py_None) : PyFloat_FromDouble(v);
}

/* {name: {"value", "unit"}} of the figures the rule read. */
static PyObject *figures_dict(const stoke_finding *f)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < f->nfigures; i++) {
        const stoke_finding_figure *x = &f->figures[i];
        PyObject *o = Py_BuildValue("{s:d,s:s}", "value", x->value, "unit", x->unit);
        if (stokepy_put(d, x->name, o) < 0)
            Py_CLEAR(d);
    }
    return d;
}

/* [{"setting", "unit", "current", "suggested", "direction", "to"}] of the advice. */
static PyObject *changes_list(const stoke_finding *f)
{
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < f->nchanges; i++) {
        const stoke_finding_change *c = &f->changes[i];
        PyObject *o =
            Py_BuildValue("{s:s,s:s,s:N,s:N,s:i,s:z}", "setting", c->setting, "unit", c->unit,
                          "current", number_or_none(c->current), "suggested",
                          number_or_none(c->suggested), "direction", c->direction, "to", c->to);
        list_take(&l, o);
    }
    return l;
}

static PyObject *finding_dict(const stoke_finding *f)
{
    PyObject *o = PyDict_New();
    int rc = o ? 0 : -1;
    if (rc == 0)
        rc = stokepy_put(o, "id", PyUnicode_FromString(f->rule->id));
    if (rc == 0)
        rc = stokepy_put(o, "kind", PyUnicode_FromString(stoke_rule_kind_name(f->rule->kind)));
    if (rc == 0)
        rc = stokepy_put(o, "resource", PyUnicode_FromString(f->rule->resource));
    if (rc == 0)
        rc = f->gpu >= 0 ? stokepy_put(o, "gpu", PyLong_FromLong(f->gpu))
                         : PyDict_SetItemString(o, "gpu", Py_None);
    if (rc == 0)
        rc = f->rank >= 0 ? stokepy_put(o, "rank", PyLong_FromLong(f->rank))
                          : PyDict_SetItemString(o, "rank", Py_None);
    if (rc == 0)
        rc = f->host[0] ? stokepy_put(o, "host", PyUnicode_FromString(f->host))
                        : PyDict_SetItemString(o, "host", Py_None);
    if (rc == 0)
        rc = stokepy_put(o, "evidence", PyUnicode_FromString(f->evidence));
    if (rc == 0)
        rc = stokepy_put(o, "advice", PyUnicode_FromString(f->advice));
    if (rc == 0)
        rc = stokepy_put(
            o, "program",
            PyUnicode_FromString(f->program == STOKE_PROG_STOKE ? "stoke" : "external"));
    if (rc == 0)
        rc = stokepy_put(o, "figures", figures_dict(f));
    if (rc == 0)
        rc = stokepy_put(o, "changes", changes_list(f));
    if (rc < 0)
        Py_CLEAR(o);
    return o;
}

/* The findings of s (at most 32, the table's length), into f; returns how many. */
static size_t diagnose(const stoke_mon_summary *s, stoke_finding *f, size_t *fired)
{
    size_t cap;
    stoke_rules(&cap);
    if (cap > 32)
        cap = 32;
    *fired = stoke_diagnose(s, f, cap);
    return *fired < cap ? *fired : cap;
}

static PyObject *findings_list(const stoke_finding *f, size_t n)
{
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        list_take(&list, finding_dict(&f[i]));
    }
    return list;
}

static PyObject *Monitor_findings(MonitorObject *self, PyObject *unused)
{
    (void)unused;
    stoke_mon_summary s;
    if (summarize(self, &s) < 0)
        return NULL;
    stoke_finding f[32];
    size_t fired;
    return findings_list(f, diagnose(&s, f, &fired));
}

/* The text `stoke monitor` ends with: the table (when `table`) and the diagnosis; with
 * `findings`, the pair (text, the findings it prints), both of one summary. */
static PyObject *report_text(MonitorObject *self, bool table, bool findings)
{
    stoke_mon_summary s;
    if (summarize(self, &s) < 0)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return PyErr_NoMemory();
    if (table) {
        stoke_mon_summary_print(&s, f);
        fputc('\n', f);
    }
    stoke_finding fs[32];
    size_t fired, n = diagnose(&s, fs, &fired);
    stoke_diagnosis_print(&s, fs, n, fired, f);
    if (fclose(f) != 0 || !text) {
        free(text);
        return PyErr_NoMemory();
    }
    PyObject *r = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
    free(text);
    if (!r || !findings)
        return r;
    return Py_BuildValue("(NN)", r, findings_list(fs, n));
}

static PyObject *Monitor_diagnosis(MonitorObject *self, PyObject *args)
{
    int findings = 0;
    if (!PyArg_ParseTuple(args, "|p", &findings))
        return NULL;
    return report_text(self, false, findings);
}

static PyObject *Monitor_report(MonitorObject *self, PyObject *args)
{
    int findings = 0;
    if (!PyArg_ParseTuple(args, "|p", &findings))
        return NULL;
    return report_text(self, true, findings);
}

static PyObject *Monitor_latest(MonitorObject *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    stoke_mon_sample *s = PyMem_Malloc(sizeof *s);
    char *buf = PyMem_Malloc(32768);
    PyObject *r = NULL;
    if (!s || !buf) {
        PyErr_NoMemory();
        goto out;
    }
    if (!stoke_monitor_latest(self->mon, s)) {
        r = Py_NewRef(Py_None);
        goto out;
    }
    /* Through the JSON-lines schema, so latest() and a jsonl line have the same keys. */
    size_t n = stoke_mon_format_json(s, buf, 32768);
    if (n == 0) {
        PyErr_SetString(PyExc_RuntimeError, "the sample does not fit the JSON buffer");
        goto out;
    }
    PyObject *json = PyImport_ImportModule("json");
    if (!json)
        goto out;
    r = PyObject_CallMethod(json, "loads", "s#", buf, (Py_ssize_t)n);
    Py_DECREF(json);
    if (r && !PyDict_Check(r)) {
        Py_CLEAR(r);
        PyErr_SetString(PyExc_RuntimeError, "the sample's JSON is not an object");
    }
    if (r && !PyDict_GetItemString(r, "gpus")) {
        PyObject *empty = PyList_New(0);
        if (stokepy_put(r, "gpus", empty) < 0)
            Py_CLEAR(r);
    }
out:
    PyMem_Free(s);
    PyMem_Free(buf);
    return r;
}

static PyObject *Monitor_line(MonitorObject *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    stoke_mon_sample *s = PyMem_Malloc(sizeof *s);
    if (!s)
        return PyErr_NoMemory();
    char buf[1024];
    size_t n = stoke_monitor_latest(self->mon, s) ? stoke_mon_format_line(s, buf, sizeof buf) : 0;
    PyMem_Free(s);
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)n, "replace");
}

static PyObject *Monitor_get_running(MonitorObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->running);
}

static PyObject *Monitor_get_gpu_note(MonitorObject *self, void *closure)
{
    (void)closure;
    if (!ready(self))
        return NULL;
    return PyUnicode_FromString(stoke_monitor_gpu_note(self->mon));
}

static PyObject *Monitor_get_gpu_count(MonitorObject *self, void *closure)
{
    (void)closure;
    if (!ready(self))
        return NULL;
    return PyLong_FromLong(stoke_monitor_gpu_count(self->mon));
}

static PyObject *Monitor_get_pid(MonitorObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->pid);
}

static PyMethodDef Monitor_methods[] = {
    {"start", (PyCFunction)Monitor_start, METH_NOARGS,
     "Starts sampling (again: the history goes on, the JSON lines are appended)."},
    {"stop", (PyCFunction)Monitor_stop, METH_NOARGS,
     "Stops sampling; raises the first sampling or logging error, once."},
    {"latest", (PyCFunction)Monitor_latest, METH_NOARGS,
     "The latest sample as a dict with the keys of a JSON line (docs/monitor.md), or None."},
    {"line", (PyCFunction)Monitor_line, METH_NOARGS, "The live line of the latest sample."},
    {"summary", (PyCFunction)Monitor_summary, METH_NOARGS,
     "min/median/p95/max/mean of every series of the run, and the pipeline's summaries."},
    {"findings", (PyCFunction)Monitor_findings, METH_NOARGS, "The diagnosis rules that fired."},
    {"diagnosis", (PyCFunction)Monitor_diagnosis, METH_VARARGS,
     "The diagnosis `stoke monitor` prints; diagnosis(True): (text, findings)."},
    {"report", (PyCFunction)Monitor_report, METH_VARARGS,
     "The summary table and the diagnosis, as `stoke monitor` ends; report(True): (text, "
     "findings)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Monitor_getset[] = {
    {"running", (getter)Monitor_get_running, NULL, "True while the sampler runs.", NULL},
    {"gpu_note", (getter)Monitor_get_gpu_note, NULL, "Why no GPU is sampled; '' if some are.",
     NULL},
    {"gpu_count", (getter)Monitor_get_gpu_count, NULL, "GPUs sampled.", NULL},
    {"pid", (getter)Monitor_get_pid, NULL, "Watched root, 0 = the whole system.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Monitor_slots[] = {
    {Py_tp_doc, "Monitor(interval=0.5, pid=None, no_gpu=False, jsonl=None, live=False, data=None): "
                "libstoke's sampler (use stoke.Monitor)."},
    {Py_tp_new, Monitor_new},
    {Py_tp_init, Monitor_init},
    {Py_tp_dealloc, Monitor_dealloc},
    {Py_tp_methods, Monitor_methods},
    {Py_tp_getset, Monitor_getset},
    {0, NULL},
};

static PyType_Spec Monitor_spec = {
    .name = "stoke._stoke.Monitor",
    .basicsize = sizeof(MonitorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Monitor_slots,
};

/* Only Python makes Monitors (by calling the type), so its pointer is not kept. */
int stokepy_add_monitor(PyObject *m)
{
    PyTypeObject *t = stokepy_add_type(m, &Monitor_spec);
    Py_XDECREF((PyObject *)t);
    return t ? 0 : -1;
}
