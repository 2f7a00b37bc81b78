/* fake_nccl.c - a test double of libnccl.so.2 for a world of threads in one process:
 * communicators keyed by their unique id, ncclCommInitRank waiting until every rank has
 * joined, and ncclAllReduce queued on the caller's stream of the CUDA runtime double
 * (whose device memory is host memory) where, when each rank's stream gets to it, it
 * waits for its peers and computes the real sum or mean over their buffers. Every call
 * is recorded (the calling thread, buffers, count, type, op, stream) for the tests. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/nccl_abi.h"

enum { MAX_RANKS = 8, MAX_GROUPS = 8, MAX_CALLS = 4096, WAIT_S = 30 };

typedef struct fake_group {
    nc_unique_id id;
    int used, nranks, joined, members;
    /* the collective in progress: each rank's buffers, until all have arrived */
    long done; /* collectives completed */
    int arrived;
    const float *send[MAX_RANKS];
    float *recv[MAX_RANKS];
    size_t count[MAX_RANKS];
    int op[MAX_RANKS];
} fake_group;

struct nc_comm {
    fake_group *g;
    int rank;
    long executed; /* this rank's all-reduces its stream has run */
};

typedef struct fake_call {
    char kind; /* 'U' unique id, 'I' init rank, 'A' all-reduce, 'D' destroy, 'X' abort */
    unsigned long thread;
    int rank, dtype, op;
    const void *send;
    void *recv;
    size_t count;
    void *stream;
} fake_call;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static fake_group groups[MAX_GROUPS];
static fake_call calls[MAX_CALLS];
static int ncalls, next_id, live, version = 22809, fail_allreduce, async_error;
static long executed;

static void record(fake_call c)
{
    c.thread = (unsigned long)pthread_self();
    pthread_mutex_lock(&mu);
    if (ncalls < MAX_CALLS)
        calls[ncalls++] = c;
    pthread_mutex_unlock(&mu);
}

/* The deadline of a wait that would otherwise hang a test whose peer never comes. */
static struct timespec deadline(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += WAIT_S;
    return t;
}

int ncclGetVersion(int *v)
{
    *v = version;
    return NC_SUCCESS;
}

const char *ncclGetErrorString(int rc)
{
    switch (rc) {
    case NC_SUCCESS: return "no error";
    case NC_UNHANDLED_CUDA_ERROR: return "unhandled cuda error";
    case NC_SYSTEM_ERROR: return "unhandled system error";
    case NC_INTERNAL_ERROR: return "internal error";
    case NC_INVALID_ARGUMENT: return "invalid argument";
    case NC_INVALID_USAGE: return "invalid usage";
    case NC_REMOTE_ERROR: return "remote process exited or there was a network error";
    case NC_IN_PROGRESS: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

int ncclGetUniqueId(nc_unique_id *id)
{
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&mu);
    snprintf(id->internal, sizeof id->internal, "fake-nccl-id-%d", ++next_id);
    pthread_mutex_unlock(&mu);
    record((fake_call){.kind = 'U', .rank = -1});
    return NC_SUCCESS;
}

/* The group of `id`, made when the first rank joins. Called with mu held. */
static fake_group *group_of(const nc_unique_id *id, int nranks)
{
    fake_group *free_slot = NULL;
    for (int i = 0; i < MAX_GROUPS; i++) {
        if (groups[i].used && !memcmp(&groups[i].id, id, sizeof *id))
            return &groups[i];
        if (!groups[i].used && !free_slot)
            free_slot = &groups[i];
    }
    if (free_slot)
        *free_slot = (fake_group){.id = *id, .used = 1, .nranks = nranks};
    return free_slot;
}

int ncclCommInitRank(nc_comm *comm, int nranks, nc_unique_id id, int rank)
{
    *comm = NULL;
    record((fake_call){.kind = 'I', .rank = rank, .count = (size_t)nranks});
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return NC_INVALID_ARGUMENT;
    nc_comm c = calloc(1, sizeof *c);
    if (!c)
        return NC_SYSTEM_ERROR;
    pthread_mutex_lock(&mu);
    fake_group *g = group_of(&id, nranks);
    int rc = !g || g->nranks != nranks || g->joined >= nranks ? NC_INVALID_USAGE : NC_SUCCESS;
    if (rc == NC_SUCCESS) {
        c->g = g;
        c->rank = rank;
        g->joined++;
        g->members++;
        pthread_cond_broadcast(&cv);
        struct timespec t = deadline();
        while (g->joined < g->nranks && rc == NC_SUCCESS)
            if (pthread_cond_timedwait(&cv, &mu, &t) == ETIMEDOUT)
                rc = NC_SYSTEM_ERROR;
        if (rc != NC_SUCCESS && --g->members == 0)
            g->used = 0;
    }
    if (rc == NC_SUCCESS)
        live++;
    pthread_mutex_unlock(&mu);
    if (rc != NC_SUCCESS)
        free(c);
    else
        *comm = c;
    return rc;
}

static int leave(nc_comm c, char kind)
{
    if (!c)
        return NC_INVALID_ARGUMENT;
    record((fake_call){.kind = kind, .rank = c->rank});
    pthread_mutex_lock(&mu);
    if (--c->g->members == 0)
        c->g->used = 0;
    live--;
    pthread_mutex_unlock(&mu);
    free(c);
    return NC_SUCCESS;
}

int ncclCommDestroy(nc_comm c) { return leave(c, 'D'); }
int ncclCommAbort(nc_comm c) { return leave(c, 'X'); }

int ncclCommGetAsyncError(nc_comm c, int *err)
{
    *err = c ? __atomic_load_n(&async_error, __ATOMIC_RELAXED) : NC_SUCCESS;
    return c ? NC_SUCCESS : NC_INVALID_ARGUMENT;
}

/* ---- the all-reduce ---- */

typedef struct job {
    nc_comm comm;
    const float *send;
    float *recv;
    size_t count;
    int op;
} job;

/* Every rank's inputs read before any output is written (in place is allowed), summed
 * in rank order in float, and for the mean multiplied by 1/nranks. Called with mu held
 * by the last rank to arrive. */
static void combine(fake_group *g)
{
    size_t n = g->count[0];
    for (int r = 1; r < g->nranks; r++)
        if (g->count[r] != n || g->op[r] != g->op[0]) {
            fprintf(stderr, "fake NCCL: ranks disagree on an all-reduce (%zu vs %zu floats)\n", n,
                    g->count[r]);
            __atomic_store_n(&async_error, NC_INVALID_USAGE, __ATOMIC_RELAXED);
            return;
        }
    float *sum = malloc((n ? n : 1) * sizeof *sum);
    if (!sum) {
        __atomic_store_n(&async_error, NC_SYSTEM_ERROR, __ATOMIC_RELAXED);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float s = g->send[0][i];
        for (int r = 1; r < g->nranks; r++)
            s += g->send[r][i];
        sum[i] = g->op[0] == NC_AVG ? s * (1.0f / (float)g->nranks) : s;
    }
    for (int r = 0; r < g->nranks; r++)
        memcpy(g->recv[r], sum, n * sizeof *sum);
    free(sum);
}

/* Run from the rank's stream (with the runtime double's lock released): waits for the
 * peers' same collective, as NCCL's kernel does on a GPU. */
static void run_job(void *user)
{
    const job *j = user;
    fake_group *g = j->comm->g;
    pthread_mutex_lock(&mu);
    long seq = j->comm->executed++;
    struct timespec t = deadline();
    int timed_out = 0;
    while (g->done < seq && !timed_out) /* the collectives before this one first */
        timed_out = pthread_cond_timedwait(&cv, &mu, &t) == ETIMEDOUT;
    if (!timed_out) {
        int r = j->comm->rank;
        g->send[r] = j->send;
        g->recv[r] = j->recv;
        g->count[r] = j->count;
        g->op[r] = j->op;
        if (++g->arrived == g->nranks) {
            combine(g);
            g->arrived = 0;
            g->done++;
            pthread_cond_broadcast(&cv);
        }
        while (g->done <= seq && !timed_out)
            timed_out = pthread_cond_timedwait(&cv, &mu, &t) == ETIMEDOUT;
    }
    if (timed_out) {
        fprintf(stderr, "fake NCCL: rank %d waited %d s for its peers' all-reduce\n", j->comm->rank,
                WAIT_S);
        __atomic_store_n(&async_error, NC_REMOTE_ERROR, __ATOMIC_RELAXED);
    }
    executed++;
    pthread_mutex_unlock(&mu);
}

/* The CUDA runtime double the caller loaded: its device memory and streams. */
static int (*extent)(const void *p, size_t *bytes_after);
static int (*launch)(void *stream, void (*fn)(void *), void *user, size_t size);

static void find_runtime(void)
{
    const char *path = getenv("STOKE_CUDART_LIBRARY");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!lib)
        return;
    *(void **)&extent = dlsym(lib, "fake_cudart_extent");
    *(void **)&launch = dlsym(lib, "fake_cudart_launch_collective");
}

/* Whether buf holds n floats of the runtime double's device memory. */
static int on_device(const void *buf, size_t n)
{
    size_t room = 0;
    return extent(buf, &room) == 2 && n <= room / sizeof(float);
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, nc_comm comm,
                  void *stream)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_runtime);
    record((fake_call){.kind = 'A',
                       .rank = comm ? comm->rank : -1,
                       .dtype = dtype,
                       .op = op,
                       .send = send,
                       .recv = recv,
                       .count = count,
                       .stream = stream});
    int fail = __atomic_load_n(&fail_allreduce, __ATOMIC_RELAXED);
    if (fail)
        return fail;
    if (!extent || !launch)
        return NC_UNHANDLED_CUDA_ERROR; /* no CUDA runtime double loaded */
    if (!comm || dtype != NC_FLOAT || (op != NC_SUM && op != NC_AVG) || !on_device(send, count) ||
        !on_device(recv, count))
        return NC_INVALID_ARGUMENT;
    job *j = malloc(sizeof *j);
    if (!j)
        return NC_SYSTEM_ERROR;
    *j = (job){comm, send, recv, count, op};
    if (!stream) { /* the legacy default stream: nothing is queued on it here */
        run_job(j);
        free(j);
        return NC_SUCCESS;
    }
    return launch(stream, run_job, j, sizeof *j) == 0 ? NC_SUCCESS : NC_UNHANDLED_CUDA_ERROR;
}

/* ---- for the tests (found with dlsym) ---- */

int fake_nccl_calls(void) { return ncalls; }

/* Call i: its kind ('U', 'I', 'A', 'D', 'X'), the calling thread (pthread_self), the
 * rank (-1 for 'U'), and for 'A' its arguments; for 'I' *count is nranks. */
int fake_nccl_call(int i, char *kind, unsigned long *thread, int *rank, const void **send,
                   void **recv, size_t *count, int *dtype, int *op, void **stream)
{
    if (i < 0 || i >= ncalls)
        return 0;
    const fake_call *c = &calls[i];
    *kind = c->kind;
    *thread = c->thread;
    *rank = c->rank;
    *send = c->send;
    *recv = c->recv;
    *count = c->count;
    *dtype = c->dtype;
    *op = c->op;
    *stream = c->stream;
    return 1;
}

/* All-reduces run (summed over ranks): a captured one runs at each graph launch. */
long fake_nccl_executed(void) { return executed; }
int fake_nccl_live(void) { return live; } /* communicators not destroyed */

/* The next calls of ncclAllReduce return rc (0: succeed again). */
void fake_nccl_fail_allreduce(int rc) { __atomic_store_n(&fail_allreduce, rc, __ATOMIC_RELAXED); }
/* What ncclCommGetAsyncError reports (0: no error). */
void fake_nccl_set_async_error(int rc) { __atomic_store_n(&async_error, rc, __ATOMIC_RELAXED); }
/* What ncclGetVersion reports (NCCL_VERSION's code: 22809 for 2.28.9). */
void fake_nccl_set_version(int v) { version = v; }

void fake_nccl_reset(void)
{
    pthread_mutex_lock(&mu);
    ncalls = 0;
    executed = 0;
    pthread_mutex_unlock(&mu);
}
