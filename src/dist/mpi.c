/* mpi.c - the world of processes under mpirun: OpenMPI's communicator for the host's
 * collectives and, on the CPU, the gradients' mean through MPI_Iallreduce, so every
 * bucket's reduction proceeds while backward computes the next (MPI progresses inside
 * its calls: the reducer polls between buckets). Built where CMake finds MPI
 * (STOKE_HAVE_MPI); the transport is MPI's, never one of stoke's own. */
#include "dist/dist_impl.h"

#ifdef STOKE_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mpi_state {
    MPI_Comm comm;
    MPI_Request *req; /* one per bucket */
    int nreq;
} mpi_state;

static mpi_state *st_of(stoke_dist *d) { return d->host_state; }

/* MPI's error as stoke's, with what was being done. */
static stoke_status mpi_fail(stoke_dist *d, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    return stoke_fail(STOKE_ERR_IO,
                      "rank %d of %d: %s failed: %s (a rank that died or lost its connection "
                      "stops the others; mpirun names it)",
                      d->rank, d->world, what, text);
}

static stoke_status mpi_f64(stoke_dist *d, double *v, int n, int op)
{
    MPI_Op o = op == 0 ? MPI_SUM : op == 1 ? MPI_MIN : MPI_MAX;
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, o, st_of(d)->comm);
    return rc == MPI_SUCCESS ? STOKE_OK : mpi_fail(d, rc, "an all-reduce of figures");
}

static stoke_status mpi_f32(stoke_dist *d, float *v, size_t n)
{
    if (n > INT_MAX)
        return stoke_fail(STOKE_ERR_ARG, "dist: an all-reduce of %zu floats is too large", n);
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT, MPI_SUM, st_of(d)->comm);
    return rc == MPI_SUCCESS ? STOKE_OK : mpi_fail(d, rc, "an all-reduce");
}

static stoke_status mpi_bcast(stoke_dist *d, void *buf, size_t bytes, int root)
{
    for (size_t off = 0; off < bytes;) { /* MPI counts are ints */
        int k = bytes - off > INT_MAX ? INT_MAX : (int)(bytes - off);
        int rc = MPI_Bcast((char *)buf + off, k, MPI_BYTE, root, st_of(d)->comm);
        if (rc != MPI_SUCCESS)
            return mpi_fail(d, rc, "a broadcast");
        off += (size_t)k;
    }
    return STOKE_OK;
}

static stoke_status mpi_allgather(stoke_dist *d, const void *mine, size_t bytes, void *all)
{
    if (bytes > INT_MAX)
        return stoke_fail(STOKE_ERR_ARG, "dist: an all-gather of %zu bytes is too large", bytes);
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, st_of(d)->comm);
    return rc == MPI_SUCCESS ? STOKE_OK : mpi_fail(d, rc, "an all-gather");
}

static void mpi_free(stoke_dist *d)
{
    mpi_state *s = st_of(d);
    if (!s)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        MPI_Comm_free(&s->comm);
        MPI_Finalize();
    }
    free(s->req);
    free(s);
}

static const dist_host mpi_host = {.name = "mpi",
                                   .allreduce_f64 = mpi_f64,
                                   .allreduce_f32 = mpi_f32,
                                   .bcast = mpi_bcast,
                                   .allgather = mpi_allgather,
                                   .free = mpi_free};

/* ---- the gradients ---------------------------------------------------------------- */

static stoke_status grads_prepare(stoke_dist *d, int buckets)
{
    mpi_state *s = st_of(d);
    free(s->req);
    s->nreq = 0;
    if (!(s->req = malloc((size_t)(buckets > 0 ? buckets : 1) * sizeof *s->req)))
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory for %d requests", buckets);
    for (int k = 0; k < buckets; k++)
        s->req[k] = MPI_REQUEST_NULL;
    s->nreq = buckets;
    return STOKE_OK;
}

static stoke_status grads_start(stoke_dist *d, int k, float *buf, size_t n, void *stream)
{
    (void)stream;
    if (n > INT_MAX) /* buckets are about 25 MiB: a bucket this large is a bug */
        return stoke_fail(STOKE_ERR_ARG, "dist: gradient bucket %d of %zu floats", k, n);
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, st_of(d)->comm,
                            &st_of(d)->req[k]);
    return rc == MPI_SUCCESS ? STOKE_OK : mpi_fail(d, rc, "starting a gradient all-reduce");
}

static void grads_poll(stoke_dist *d)
{
    mpi_state *s = st_of(d);
    int done;
    MPI_Testall(s->nreq, s->req, &done, MPI_STATUSES_IGNORE);
}

/* The sums waited for, then made means: 1/world is exact for a power of two, so two
 * ranks' mean is the single process's accumulated sum halved, bit for bit. */
static stoke_status grads_wait(stoke_dist *d, void *stream)
{
    (void)stream;
    mpi_state *s = st_of(d);
    int rc = MPI_Waitall(s->nreq, s->req, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_fail(d, rc, "a gradient all-reduce");
    float inv = 1.0f / (float)d->world;
    for (int k = 0; k < d->nstage; k++) {
        if (!d->stage[k].started)
            continue;
        float *v = d->stage[k].buf;
        for (size_t i = 0; i < d->stage[k].n; i++)
            v[i] *= inv;
    }
    return STOKE_OK;
}

static void grads_release(stoke_dist *d)
{
    mpi_state *s = st_of(d);
    free(s->req);
    s->req = NULL;
    s->nreq = 0;
}

static const dist_grads mpi_grads = {.name = "mpi",
                                     .stream_ordered = false,
                                     .prepare = grads_prepare,
                                     .start = grads_start,
                                     .poll = grads_poll,
                                     .wait = grads_wait,
                                     .release = grads_release};

stoke_status dist_mpi_init(stoke_dist **out)
{
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    /* only the training thread calls MPI */
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "dist: MPI_Init failed");
    mpi_state *s = calloc(1, sizeof *s);
    if (!s)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory");
    MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    /* errors come back as codes (named in messages), not an abort without a word */
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    int world, rank;
    MPI_Comm_size(s->comm, &world);
    MPI_Comm_rank(s->comm, &rank);
    stoke_status st = dist_new(world, rank, &mpi_host, s, &mpi_grads, out);
    if (st != STOKE_OK) {
        MPI_Comm_free(&s->comm);
        free(s);
        return st;
    }
    MPI_Comm local;
    if (MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) ==
        MPI_SUCCESS) {
        MPI_Comm_size(local, &(*out)->local_world);
        MPI_Comm_rank(local, &(*out)->local_rank);
        MPI_Comm_free(&local);
    }
    char name[MPI_MAX_PROCESSOR_NAME + 1] = "";
    int len = 0;
    MPI_Get_processor_name(name, &len);
    snprintf((*out)->host_name, sizeof(*out)->host_name, "%s", name);
    return STOKE_OK;
}
#else
stoke_status dist_mpi_init(stoke_dist **out)
{
    *out = NULL;
    return stoke_fail(STOKE_ERR_UNAVAILABLE,
                      "this process was started by mpirun, but this stoke was built without MPI: "
                      "install OpenMPI (scripts/deps installs libopenmpi-dev) and build again");
}
#endif
