/* fake_cudart.c - a test double of libcudart.so: the CUDA runtime functions stoke
 * calls, answering from the same scenario file as the NVML double. */
#include <stdio.h>
#include <stdlib.h>

#include "scenario.h"

enum { OK = 0, INVALID_VALUE = 1, NO_DEVICE = 100, INVALID_DEVICE = 101 };

/* The scenario device (NVML's numbering) that CUDA device `dev` is, or -1: as the
 * runtime, CUDA_VISIBLE_DEVICES (a list of NVML indices) renumbers the devices from 0,
 * so cuda:0 need not be NVML's device 0. */
static int physical(int dev)
{
    int n = fake_scenario_get()->ndevices;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v)
        return dev >= 0 && dev < n ? dev : -1;
    for (int i = 0; *v; i++) {
        char *end;
        long k = strtol(v, &end, 10);
        if (end == v || k < 0 || k >= n) /* the runtime stops at the first invalid one */
            return -1;
        if (i == dev)
            return (int)k;
        v = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end)
            return -1;
    }
    return -1;
}

int cudaGetDeviceCount(int *n)
{
    *n = 0;
    if (fake_scenario_get()->cudart_error) /* as the runtime without (a recent) driver */
        return fake_scenario_get()->cudart_error;
    while (physical(*n) >= 0)
        (*n)++;
    return *n ? OK : NO_DEVICE;
}

int cudaDeviceGetAttribute(int *value, int attr, int dev)
{
    const fake_scenario *s = fake_scenario_get();
    if (physical(dev) < 0)
        return INVALID_DEVICE;
    const fake_device *d = &s->devices[physical(dev)];
    unsigned domain = 0, bus = 0, device = 0;
    sscanf(d->bus, "%x:%x:%x", &domain, &bus, &device);
    switch (attr) {
    case 16:
        if (!d->has_sm)
            return INVALID_VALUE;
        *value = d->sm;
        return OK;
    case 33: *value = (int)bus; return OK;
    case 34: *value = (int)device; return OK;
    case 50: *value = (int)domain; return OK;
    case 75: *value = d->cc_major; return OK;
    case 76: *value = d->cc_minor; return OK;
    default: return INVALID_VALUE;
    }
}

int cudaRuntimeGetVersion(int *v)
{
    *v = fake_scenario_get()->runtime;
    return OK;
}

int cudaDriverGetVersion(int *v)
{
    *v = fake_scenario_get()->cuda;
    return OK;
}

const char *cudaGetErrorString(int rc)
{
    switch (rc) {
    case OK: return "no error";
    case NO_DEVICE: return "no CUDA-capable device is detected";
    case 34: return "CUDA driver is a stub library";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case INVALID_DEVICE: return "invalid device ordinal";
    case 2: return "out of memory";
    case 400: return "invalid resource handle";
    case 600: return "device not ready";
    case 900: return "operation not permitted when stream is capturing";
    case 901: return "operation failed due to a previous error during capture";
    default: return "invalid argument";
    }
}

/* ---- The loader's functions: pinned memory, device memory, streams and events ----
 * Host allocations are aligned mallocs kept in a registry, so a test can ask whether a
 * pointer is pinned and whether anything leaked; device memory is host memory. A copy
 * is not done when issued: it waits in its stream's queue until an event recorded
 * after it is synchronized (or queried), as a real copy would be in flight. A copy
 * into device memory that a pending copy still writes is counted as a violation. Every
 * call is logged in order for the tests (fake_cudart_log). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    NOT_READY = 600,
    MEMORY_ALLOCATION = 2,
    INVALID_HANDLE = 400,
    DISABLE_TIMING = 2,
    CAPTURE_UNSUPPORTED = 900,
    CAPTURE_INVALIDATED = 901,
};

#define FAKE_MAX_ALLOCS   1024
#define FAKE_MAX_CAPTURES 8
#define FAKE_MAX_LOG      4096

typedef struct fake_alloc {
    void *p;
    size_t size;
    int device; /* 0 host (pinned), 1 device */
} fake_alloc;

typedef struct fake_copy {
    void *dst;
    const void *src; /* NULL: a fill with `value` (cudaMemsetAsync) */
    size_t n;
    int event_mark; /* not a copy but an event record: the event's id */
    int value;
    struct fake_event *ev; /* the recorded event (NULL once re-recorded or destroyed) */
    void (*fn)(void *);    /* not a copy but a host function (cudaLaunchHostFunc) */
    void *user;
    /* `user` is the double's (fake_cudart_launch_owned): freed after it runs from a
     * stream's queue, or with the graph that recorded it */
    int owned;
    size_t size;             /* of an owned `user`, for the copy an instantiation makes */
    struct fake_graph *exec; /* queued by a launch of this exec, which keeps `user` */
    int unlocked;            /* runs with fake_mu released (fake_cudart_launch_collective) */
} fake_copy;

/* A captured graph (cudaStreamEndCapture) and an instantiated one (cudaGraphExec_t):
 * the stream's operations in order, queued again at each launch. */
typedef struct fake_graph {
    fake_copy *ops;
    int n, cap;
    /* An exec's owned entries still queued by its launches: a destroy while some are
     * pending is deferred until they have run, as the runtime lets an exec in flight
     * be destroyed. */
    int pending, destroyed;
} fake_graph;

typedef struct fake_stream {
    int id;
    int nq, cap;
    fake_copy *q;
    fake_graph *capture; /* capturing into it (cudaStreamBeginCapture), or NULL */
    int invalidated;     /* a call the capture does not allow was made */
} fake_stream;

typedef struct fake_event {
    int id;
    fake_stream *stream; /* where it was last recorded; NULL when complete */
    int queries;
    unsigned flags;
    int stamped;  /* the work before its record has run: `stamp` holds when */
    double stamp; /* ms of CLOCK_MONOTONIC */
} fake_event;

static double manual_ms = -1; /* fake_cudart_set_clock */

static double now_ms(void)
{
    if (manual_ms >= 0)
        return manual_ms;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One logged call: op is 'C' copy or fill, 'R' record, 'S' event sync, 'Q' query, 'W'
 * stream waits on an event, 'Y' stream sync, 'X' copy or fill executed. */
typedef struct fake_log_entry {
    char op;
    int stream, event;
    const void *dst;
} fake_log_entry;

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_alloc allocs[FAKE_MAX_ALLOCS];
static int live_streams, live_events, live_graphs, next_id = 1, violations, copies_done;
static fake_stream *capturing[FAKE_MAX_CAPTURES]; /* streams in capture (global mode) */
static int capture_forbids(const fake_stream *st);
static fake_log_entry log_entries[FAKE_MAX_LOG];
static int nlog;
static int host_alloc_fail; /* tests: make cudaHostAlloc fail */
static int current_device, last_error;
static size_t device_live_bytes;

int fake_cudart_extent(const void *p, size_t *bytes_after);

/* Exported as data so the backend can tell it runs on this double. */
int stoke_fake_cudart = 1;

/* Remembers a failure for cudaGetLastError, as the runtime does. */
static int ret(int rc)
{
    if (rc != OK)
        __atomic_store_n(&last_error, rc, __ATOMIC_RELAXED);
    return rc;
}

/* The current device's memory (scenario `memory=`), 16 GiB without a scenario device. */
static size_t device_total(void)
{
    const fake_scenario *s = fake_scenario_get();
    int dev = physical(__atomic_load_n(&current_device, __ATOMIC_RELAXED));
    if (dev >= 0 && s->devices[dev].has_memory)
        return (size_t)s->devices[dev].memory;
    return (size_t)16 << 30;
}

/* The device's memory, or STOKE_FAKE_CUDA_MALLOC_LIMIT when smaller (the tests'
 * out-of-memory knob): what cudaMalloc allows and cudaMemGetInfo reports. */
static size_t device_limit(void)
{
    size_t limit = device_total();
    const char *env = getenv("STOKE_FAKE_CUDA_MALLOC_LIMIT");
    if (env && *env) {
        unsigned long long l = strtoull(env, NULL, 10);
        if (l < limit)
            limit = (size_t)l;
    }
    return limit;
}

/* Whether `size` more device bytes fit. Called with fake_mu. */
static int device_fits(size_t size)
{
    size_t limit = device_limit();
    return device_live_bytes <= limit && size <= limit - device_live_bytes;
}

static void log_op(char op, int stream, int event, const void *dst)
{
    if (nlog < FAKE_MAX_LOG)
        log_entries[nlog++] = (fake_log_entry){op, stream, event, dst};
}

static int add_alloc(void **p, size_t size, int device)
{
    void *m = NULL;
    if (posix_memalign(&m, 4096, size ? size : 1) != 0)
        return MEMORY_ALLOCATION;
    pthread_mutex_lock(&fake_mu);
    if (device && !device_fits(size)) {
        pthread_mutex_unlock(&fake_mu);
        free(m);
        return MEMORY_ALLOCATION;
    }
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        if (!allocs[i].p) {
            allocs[i] = (fake_alloc){m, size, device};
            if (device)
                device_live_bytes += size;
            pthread_mutex_unlock(&fake_mu);
            *p = m;
            return OK;
        }
    pthread_mutex_unlock(&fake_mu);
    free(m);
    return MEMORY_ALLOCATION;
}

static int drop_alloc(void *p, int device)
{
    if (!p)
        return OK;
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        if (allocs[i].p == p && allocs[i].device == device) {
            allocs[i].p = NULL;
            if (device)
                device_live_bytes -= allocs[i].size;
            pthread_mutex_unlock(&fake_mu);
            free(p);
            return OK;
        }
    pthread_mutex_unlock(&fake_mu);
    return INVALID_VALUE;
}

int cudaSetDevice(int dev)
{
    if (physical(dev) < 0)
        return ret(INVALID_DEVICE);
    __atomic_store_n(&current_device, dev, __ATOMIC_RELAXED);
    return OK;
}

int cudaHostAlloc(void **p, size_t size, unsigned flags)
{
    (void)flags;
    if (host_alloc_fail)
        return MEMORY_ALLOCATION;
    return add_alloc(p, size, 0);
}

int cudaFreeHost(void *p) { return drop_alloc(p, 0); }
/* Not during a capture (the runtime's global mode calls it unsafe) */
static int capture_forbids_any(void)
{
    pthread_mutex_lock(&fake_mu);
    int rc = capture_forbids(NULL);
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

int cudaMalloc(void **p, size_t size)
{
    *p = NULL;
    int rc = capture_forbids_any();
    return ret(rc != OK ? rc : add_alloc(p, size, 1));
}

int cudaFree(void *p) { return ret(drop_alloc(p, 1)); }

int cudaStreamCreateWithFlags(void **s, unsigned flags)
{
    (void)flags;
    fake_stream *st = calloc(1, sizeof *st);
    if (!st)
        return MEMORY_ALLOCATION;
    pthread_mutex_lock(&fake_mu);
    st->id = next_id++;
    live_streams++;
    pthread_mutex_unlock(&fake_mu);
    *s = st;
    return OK;
}

/* A graph or exec and the owned user data of its entries. */
static void graph_release(fake_graph *g)
{
    if (!g)
        return;
    for (int k = 0; k < g->n; k++)
        if (g->ops[k].owned)
            free(g->ops[k].user);
    free(g->ops);
    free(g);
}

/* Runs the stream's queue up to and including the record of event `upto` (all of it
 * for 0). Called with fake_mu held. */
static void run_queue(fake_stream *st, int upto)
{
    int k = 0;
    while (k < st->nq) {
        fake_copy *c = &st->q[k++];
        if (c->event_mark) {
            if (c->ev && !c->ev->stamped) {
                c->ev->stamp = now_ms();
                c->ev->stamped = 1;
            }
            if (c->ev && c->ev->stream == st) /* its only mark (a re-record drops the old) */
                c->ev->stream = NULL;
            if (c->event_mark == upto)
                break;
            continue;
        }
        if (c->fn) {
            fake_copy op = *c;
            if (op.unlocked) {
                /* the queue whole without what ran, so other threads' calls may run */
                memmove(st->q, st->q + k, (size_t)(st->nq - k) * sizeof st->q[0]);
                st->nq -= k;
                k = 0;
                pthread_mutex_unlock(&fake_mu);
                op.fn(op.user);
                pthread_mutex_lock(&fake_mu);
            } else {
                op.fn(op.user);
            }
            if (op.owned)
                free(op.user);
            else if (op.exec && --op.exec->pending == 0 && op.exec->destroyed)
                graph_release(op.exec);
            continue;
        }
        if (c->src)
            memcpy(c->dst, c->src, c->n);
        else
            memset(c->dst, c->value, c->n);
        copies_done++;
        log_op('X', st->id, 0, c->dst);
    }
    if (k > 0 && k < st->nq)
        memmove(st->q, st->q + k, (size_t)(st->nq - k) * sizeof st->q[0]);
    st->nq -= k;
}

int cudaStreamDestroy(void *s)
{
    fake_stream *st = s;
    if (!st)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    run_queue(st, 0);
    live_streams--;
    for (int i = 0; i < FAKE_MAX_CAPTURES; i++) /* its capture ends with it */
        if (capturing[i] == st)
            capturing[i] = NULL;
    pthread_mutex_unlock(&fake_mu);
    free(st->q);
    graph_release(st->capture);
    free(st);
    return OK;
}

/* Room for one more operation in an array that grows; 0 when out of memory. */
static int room(fake_copy **a, int n, int *cap)
{
    if (n < *cap)
        return 1;
    int grown = *cap ? 2 * *cap : 64;
    fake_copy *q = realloc(*a, (size_t)grown * sizeof *q);
    if (!q)
        return 0;
    *a = q;
    *cap = grown;
    return 1;
}

static int push(fake_copy **a, int *n, int *cap, fake_copy op)
{
    if (!room(a, *n, cap))
        return 0;
    (*a)[(*n)++] = op;
    return 1;
}

/* A call the capture of `st` (any capture in progress, for st NULL) does not allow, as
 * the runtime's global capture mode: every capture in progress is invalidated (its end
 * fails with 901) and the call fails with 900. 0 when nothing is capturing. Called with
 * fake_mu held. */
static int capture_forbids(const fake_stream *st)
{
    int hit = 0;
    for (int i = 0; i < FAKE_MAX_CAPTURES; i++)
        if (capturing[i] && (!st || capturing[i] == st)) {
            capturing[i]->invalidated = 1;
            hit = 1;
        }
    return hit ? CAPTURE_UNSUPPORTED : OK;
}

/* Queues op on st, or adds it to the graph st captures. Called with fake_mu held. */
static int enqueue_locked(fake_stream *st, fake_copy op)
{
    if (st->capture) {
        if (!push(&st->capture->ops, &st->capture->n, &st->capture->cap, op))
            return MEMORY_ALLOCATION;
        log_op('G', st->id, 0, op.dst);
        return OK;
    }
    /* copies only: a stream's queue holds thousands of kernels between two waits, and
     * scanning it at each launch made the suite's GPU runs quadratic */
    for (int k = 0; op.src && k < st->nq; k++) {
        const fake_copy *c = &st->q[k];
        if (!c->event_mark && !c->fn && (const char *)op.dst < (const char *)c->dst + c->n &&
            (const char *)c->dst < (const char *)op.dst + op.n)
            violations++;
    }
    if (!push(&st->q, &st->nq, &st->cap, op))
        return MEMORY_ALLOCATION;
    log_op(op.fn ? 'H' : 'C', st->id, 0, op.dst);
    return OK;
}

/* Queues a copy (src) or a fill (src NULL). A copy into device memory that a pending
 * copy or fill of the stream still writes is counted as a violation (a loader slot
 * reused before its copy landed). */
static int enqueue(fake_stream *st, fake_copy op)
{
    pthread_mutex_lock(&fake_mu);
    int rc = enqueue_locked(st, op);
    pthread_mutex_unlock(&fake_mu);
    return ret(rc);
}

/* The kernels' host build queues each launch as a host function, so a kernel runs
 * when the stream gets to it, after the copies before it and before the reads after
 * it, as on a device: a read that forgets to wait sees the old values here too. */
int cudaLaunchHostFunc(void *s, void (*fn)(void *), void *user)
{
    if (!s || !fn)
        return ret(INVALID_VALUE);
    return enqueue(s, (fake_copy){.fn = fn, .user = user});
}

/* For the cuBLAS and cuDNN doubles, which queue each call's computation with a malloc'ed
 * copy of its parameters, as the libraries enqueue kernels: the double owns `user`
 * (`size` bytes) from this call on, failed or not. A capture records it into the graph,
 * which frees it; an instantiation copies it, since an exec outlives its graph. */
int fake_cudart_launch_owned(void *s, void (*fn)(void *), void *user, size_t size)
{
    if (!s || !fn) {
        free(user);
        return ret(INVALID_VALUE);
    }
    int rc = enqueue(s, (fake_copy){.fn = fn, .user = user, .owned = 1, .size = size});
    if (rc != OK)
        free(user);
    return rc;
}

/* For the NCCL double: as fake_cudart_launch_owned, but fn runs with the double's lock
 * released, since a collective waits there for its peers' streams, which their own
 * threads run (one rank a thread), as an NCCL kernel waits for the peers' GPUs. Only
 * the stream's own thread may use the stream meanwhile. */
int fake_cudart_launch_collective(void *s, void (*fn)(void *), void *user, size_t size)
{
    if (!s || !fn) {
        free(user);
        return ret(INVALID_VALUE);
    }
    int rc =
        enqueue(s, (fake_copy){.fn = fn, .user = user, .owned = 1, .size = size, .unlocked = 1});
    if (rc != OK)
        free(user);
    return rc;
}

/* ---- graphs: a capture records the stream's operations instead of queueing them;
 * a launch queues them all again, in order ---- */

int cudaStreamBeginCapture(void *s, int mode)
{
    fake_stream *st = s;
    if (!st || mode != 0) /* only the global mode */
        return ret(INVALID_VALUE);
    const char *no = getenv("STOKE_FAKE_CUDA_NO_CAPTURE"); /* a runtime that cannot */
    if (no && *no && strcmp(no, "0") != 0)
        return ret(CAPTURE_UNSUPPORTED);
    pthread_mutex_lock(&fake_mu);
    int slot = -1;
    for (int i = 0; i < FAKE_MAX_CAPTURES; i++)
        if (!capturing[i] && slot < 0)
            slot = i;
    int rc = OK;
    if (st->capture || slot < 0)
        rc = INVALID_VALUE;
    else if (!(st->capture = calloc(1, sizeof *st->capture)))
        rc = MEMORY_ALLOCATION;
    else {
        capturing[slot] = st;
        st->invalidated = 0;
    }
    pthread_mutex_unlock(&fake_mu);
    return ret(rc);
}

int cudaStreamEndCapture(void *s, void **graph)
{
    fake_stream *st = s;
    if (!st || !graph)
        return ret(INVALID_VALUE);
    *graph = NULL;
    pthread_mutex_lock(&fake_mu);
    fake_graph *g = st->capture;
    int rc = g ? OK : INVALID_VALUE;
    for (int i = 0; i < FAKE_MAX_CAPTURES; i++)
        if (capturing[i] == st)
            capturing[i] = NULL;
    st->capture = NULL;
    if (g && st->invalidated) {
        graph_release(g);
        rc = CAPTURE_INVALIDATED;
    } else if (g) {
        live_graphs++;
        *graph = g;
    }
    pthread_mutex_unlock(&fake_mu);
    return ret(rc);
}

/* 0 none, 1 active, 2 invalidated */
int cudaStreamIsCapturing(void *s, int *status)
{
    fake_stream *st = s;
    if (!st || !status)
        return ret(INVALID_VALUE);
    pthread_mutex_lock(&fake_mu);
    *status = st->capture ? (st->invalidated ? 2 : 1) : 0;
    pthread_mutex_unlock(&fake_mu);
    return OK;
}

int cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags)
{
    fake_graph *g = graph, *x = NULL;
    if (!exec || !g || flags != 0)
        return ret(INVALID_VALUE);
    *exec = NULL;
    x = calloc(1, sizeof *x);
    if (!x)
        return ret(MEMORY_ALLOCATION);
    pthread_mutex_lock(&fake_mu);
    int rc = OK;
    for (int k = 0; k < g->n && rc == OK; k++) {
        fake_copy op = g->ops[k];
        if (op.owned) {
            op.user = malloc(op.size ? op.size : 1);
            if (op.user)
                memcpy(op.user, g->ops[k].user, op.size);
        }
        if ((op.owned && !op.user) || !push(&x->ops, &x->n, &x->cap, op)) {
            if (op.owned)
                free(op.user);
            rc = MEMORY_ALLOCATION;
        }
    }
    if (rc == OK) {
        live_graphs++;
        *exec = x;
    }
    pthread_mutex_unlock(&fake_mu);
    if (rc != OK)
        graph_release(x);
    return ret(rc);
}

int cudaGraphLaunch(void *exec, void *s)
{
    fake_graph *x = exec;
    fake_stream *st = s;
    if (!x || !st)
        return ret(INVALID_VALUE);
    pthread_mutex_lock(&fake_mu);
    int rc = OK;
    log_op('L', st->id, 0, NULL);
    for (int k = 0; k < x->n && rc == OK; k++) {
        fake_copy op = x->ops[k];
        if (op.owned) { /* the exec keeps user for its next launches */
            op.owned = 0;
            op.exec = x;
        }
        rc = enqueue_locked(st, op);
        if (rc == OK && op.exec)
            x->pending++;
    }
    pthread_mutex_unlock(&fake_mu);
    return ret(rc);
}

static int graph_free(void *graph)
{
    fake_graph *g = graph;
    if (!g)
        return ret(INVALID_VALUE);
    pthread_mutex_lock(&fake_mu);
    live_graphs--;
    g->destroyed = 1;
    if (!g->pending)
        graph_release(g);
    pthread_mutex_unlock(&fake_mu);
    return OK;
}

int cudaGraphExecDestroy(void *exec) { return graph_free(exec); }
int cudaGraphDestroy(void *graph) { return graph_free(graph); }

/* Whether a copy of kind 1 (host to device), 2 (device to host) or 3 (device to
 * device) has device memory where the kind says, n bytes of it. */
static int copy_ok(void *dst, const void *src, size_t n, int kind)
{
    static const int want[4][2] = {{0, 0}, {0, 2}, {2, 0}, {2, 2}}; /* src, dst kinds */
    if (kind < 1 || kind > 3)
        return 0;
    size_t src_room = n, dst_room = n;
    int src_kind = want[kind][0] ? fake_cudart_extent(src, &src_room) : 0;
    int dst_kind = want[kind][1] ? fake_cudart_extent(dst, &dst_room) : 0;
    return src_kind == want[kind][0] && dst_kind == want[kind][1] && n <= src_room && n <= dst_room;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s)
{
    if (!s || !copy_ok(dst, src, n, kind))
        return ret(INVALID_VALUE);
    return enqueue(s, (fake_copy){.dst = dst, .src = src, .n = n});
}

/* Synchronous, and like the real one it waits for nothing queued on non-blocking
 * streams (stoke creates only those): ordering is the caller's job. */
int cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    if (!copy_ok(dst, src, n, kind))
        return ret(INVALID_VALUE);
    int rc = capture_forbids_any();
    if (rc != OK)
        return ret(rc);
    if (n)
        memcpy(dst, src, n);
    return OK;
}

int cudaMemsetAsync(void *dst, int value, size_t n, void *s)
{
    size_t room = 0;
    if (!s || fake_cudart_extent(dst, &room) != 2 || n > room)
        return ret(INVALID_VALUE);
    return enqueue(s, (fake_copy){.dst = dst, .n = n, .value = value});
}

int cudaStreamSynchronize(void *s)
{
    fake_stream *st = s;
    if (!st) /* the legacy default stream: nothing is ever queued on it here */
        return OK;
    pthread_mutex_lock(&fake_mu);
    log_op('Y', st->id, 0, NULL);
    int rc = capture_forbids(st);
    if (rc == OK)
        run_queue(st, 0);
    pthread_mutex_unlock(&fake_mu);
    return ret(rc);
}

int cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    pthread_mutex_lock(&fake_mu);
    *total = device_total();
    size_t limit = device_limit();
    *free_bytes = device_live_bytes < limit ? limit - device_live_bytes : 0;
    pthread_mutex_unlock(&fake_mu);
    return OK;
}

int cudaGetLastError(void) { return __atomic_exchange_n(&last_error, OK, __ATOMIC_RELAXED); }

int cudaEventCreateWithFlags(void **e, unsigned flags)
{
    fake_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return MEMORY_ALLOCATION;
    ev->flags = flags;
    pthread_mutex_lock(&fake_mu);
    ev->id = next_id++;
    live_events++;
    pthread_mutex_unlock(&fake_mu);
    *e = ev;
    return OK;
}

int cudaEventRecord(void *e, void *s)
{
    fake_event *ev = e;
    fake_stream *st = s;
    if (!ev || !st)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    /* stricter than the runtime, which makes it a dependency inside the graph: stoke
     * records events around graphs, never inside one */
    if (st->capture) {
        int rc = capture_forbids(st);
        pthread_mutex_unlock(&fake_mu);
        return ret(rc);
    }
    if (!room(&st->q, st->nq, &st->cap)) {
        pthread_mutex_unlock(&fake_mu);
        return ret(MEMORY_ALLOCATION);
    }
    /* A re-record moves the event: drop its older mark so waits use the new one. */
    int pending = 0;
    for (int k = 0; k < st->nq; k++) {
        if (st->q[k].event_mark == ev->id) {
            st->q[k].event_mark = -1;
            st->q[k].ev = NULL;
        }
        pending |= !st->q[k].event_mark;
    }
    if (ev->stream && ev->stream != st) /* recorded on another stream before */
        for (int k = 0; k < ev->stream->nq; k++)
            if (ev->stream->q[k].ev == ev)
                ev->stream->q[k].ev = NULL;
    st->q[st->nq++] = (fake_copy){.event_mark = ev->id, .ev = ev};
    /* kernels ran at their launch: with no copy pending, the work before is done now */
    ev->stamped = !pending;
    ev->stamp = now_ms();
    ev->stream = st;
    ev->queries = 0;
    log_op('R', st->id, ev->id, NULL);
    pthread_mutex_unlock(&fake_mu);
    return OK;
}

int cudaEventSynchronize(void *e)
{
    fake_event *ev = e;
    if (!ev)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    log_op('S', ev->stream ? ev->stream->id : 0, ev->id, NULL);
    if (ev->stream)
        run_queue(ev->stream, ev->id);
    ev->stream = NULL;
    pthread_mutex_unlock(&fake_mu);
    return OK;
}

/* Not ready on the first query after a record, complete on the next: the caller must
 * cope with both answers. */
int cudaEventQuery(void *e)
{
    fake_event *ev = e;
    if (!ev)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    log_op('Q', ev->stream ? ev->stream->id : 0, ev->id, NULL);
    int rc = OK;
    if (ev->stream && ev->queries++ == 0) {
        rc = NOT_READY;
    } else if (ev->stream) {
        run_queue(ev->stream, ev->id);
        ev->stream = NULL;
    }
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

/* The other stream's work up to the event is run now (the double has no concurrency),
 * so whatever the waiting stream does next comes after it. */
int cudaStreamWaitEvent(void *s, void *e, unsigned flags)
{
    fake_stream *st = s;
    fake_event *ev = e;
    if (!st || !ev || flags != 0)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    log_op('W', st->id, ev->id, NULL);
    if (ev->stream && ev->stream != st) {
        run_queue(ev->stream, ev->id);
        ev->stream = NULL;
    }
    pthread_mutex_unlock(&fake_mu);
    return OK;
}

/* As the runtime: both events complete (else 600), both with timing (else 400). */
int cudaEventElapsedTime(float *ms, void *a, void *b)
{
    fake_event *ea = a, *eb = b;
    if (!ms || !ea || !eb)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    int rc = OK;
    if ((ea->flags | eb->flags) & DISABLE_TIMING)
        rc = INVALID_HANDLE;
    else if (ea->stream || eb->stream)
        rc = NOT_READY;
    else if (!ea->stamped || !eb->stamped)
        rc = INVALID_HANDLE; /* never recorded */
    else
        *ms = (float)(eb->stamp - ea->stamp);
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

int cudaEventDestroy(void *e)
{
    fake_event *ev = e;
    if (!ev)
        return INVALID_VALUE;
    pthread_mutex_lock(&fake_mu);
    if (ev->stream) /* the runtime lets a pending event go: forget its mark */
        for (int k = 0; k < ev->stream->nq; k++)
            if (ev->stream->q[k].ev == ev)
                ev->stream->q[k].ev = NULL;
    live_events--;
    pthread_mutex_unlock(&fake_mu);
    free(ev);
    return OK;
}

/* ---- For the tests (found with dlsym) ---- */

/* 1 if p lies in a live pinned host allocation, 2 if in device memory, 0 otherwise. */
int fake_cudart_kind(const void *p)
{
    int kind = 0;
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        if (allocs[i].p && (const char *)p >= (const char *)allocs[i].p &&
            (const char *)p < (const char *)allocs[i].p + allocs[i].size)
            kind = allocs[i].device ? 2 : 1;
    pthread_mutex_unlock(&fake_mu);
    return kind;
}

/* As fake_cudart_kind, and the bytes from p to the end of its allocation in
 * *bytes_after (0 when p is in none), so the other doubles can bound every access. */
int fake_cudart_extent(const void *p, size_t *bytes_after)
{
    int kind = 0;
    *bytes_after = 0;
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        if (allocs[i].p && (const char *)p >= (const char *)allocs[i].p &&
            (const char *)p < (const char *)allocs[i].p + allocs[i].size) {
            kind = allocs[i].device ? 2 : 1;
            *bytes_after = (size_t)((const char *)allocs[i].p + allocs[i].size - (const char *)p);
        }
    pthread_mutex_unlock(&fake_mu);
    return kind;
}

/* Live host allocations + device allocations + streams + events: 0 when nothing leaked. */
int fake_cudart_live(void)
{
    pthread_mutex_lock(&fake_mu);
    int n = live_streams + live_events + live_graphs;
    for (int i = 0; i < FAKE_MAX_ALLOCS; i++)
        n += allocs[i].p != NULL;
    pthread_mutex_unlock(&fake_mu);
    return n;
}

int fake_cudart_violations(void) { return violations; }
int fake_cudart_copies_done(void) { return copies_done; }
void fake_cudart_fail_host_alloc(int on) { host_alloc_fail = on; }

/* The call log: entry i's op ('C', 'R', 'S', 'Q', 'X'), stream, event and destination. */
int fake_cudart_log(int i, char *op, int *stream, int *event, const void **dst)
{
    if (i < 0 || i >= nlog)
        return 0;
    *op = log_entries[i].op;
    *stream = log_entries[i].stream;
    *event = log_entries[i].event;
    *dst = log_entries[i].dst;
    return 1;
}

/* Empties the call log, for a test that counts the calls of what follows. */
void fake_cudart_log_reset(void)
{
    pthread_mutex_lock(&fake_mu);
    nlog = 0;
    pthread_mutex_unlock(&fake_mu);
}

/* Stamps events with `ms` from now on instead of the host's clock (negative: the host's
 * clock again), so a test can say exactly how long the device took. */
void fake_cudart_set_clock(double ms)
{
    pthread_mutex_lock(&fake_mu);
    manual_ms = ms;
    pthread_mutex_unlock(&fake_mu);
}

/* The fake's id of an event handle (as in the log). */
int fake_cudart_event_id(const void *e) { return e ? ((const fake_event *)e)->id : 0; }
