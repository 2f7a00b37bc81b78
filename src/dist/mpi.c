/* mpi.c - the world of processes under mpirun: OpenMPI's communicator for the host's
 * collectives and, on the CPU, the gradients' mean through MPI_Allreduce on dist's
 * communication thread (comm.c), so every bucket's reduction proceeds while backward
 * computes the next. Built where CMake finds MPI
 * (STOKE_HAVE_MPI); the transport is MPI's, never one of stoke's own. */
#include "dist/dist_impl.h"

#ifdef STOKE_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mpi_state {
    MPI_Comm comm;  /* the host's collectives: the training thread's */
    MPI_Comm grads; /* the gradients': the communication thread's */
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
        MPI_Comm_free(&s->grads);
        MPI_Comm_free(&s->comm);
        MPI_Finalize();
    }
    free(s);
}

static void mpi_abort(stoke_dist *d, int code)
{
    /* said here: mpirun's own notice is not always printed (OpenMPI 4.1 can lose it) */
    fflush(stdout);
    fprintf(stderr, "stoke: rank %d of %d cannot go on: it stops every rank (MPI_Abort, exit %d)\n",
            d->rank, d->world, code);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const dist_host mpi_host = {.name = "mpi",
                                   .allreduce_f64 = mpi_f64,
                                   .allreduce_f32 = mpi_f32,
                                   .bcast = mpi_bcast,
                                   .allgather = mpi_allgather,
                                   .free = mpi_free,
                                   .abort = mpi_abort};

/* ---- the gradients ---------------------------------------------------------------- */

/* The sum over the ranks, then the mean: 1/world is exact for a power of two, so two
 * ranks' mean is the single process's accumulated sum halved, bit for bit. On its own
 * communicator, so the communication thread's calls never interleave with the
 * training thread's figures on the host's. */
static stoke_status grads_mean(stoke_dist *d, float *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        int k = n - off > INT_MAX ? INT_MAX : (int)(n - off);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, k, MPI_FLOAT, MPI_SUM, st_of(d)->grads);
        if (rc != MPI_SUCCESS)
            return mpi_fail(d, rc, "a gradient all-reduce");
        off += (size_t)k;
    }
    float inv = 1.0f / (float)d->world;
    for (size_t i = 0; i < n; i++)
        buf[i] *= inv;
    return STOKE_OK;
}

static const dist_grads mpi_grads = {.name = "mpi", .mean = grads_mean};

/* An MPI without threads: each bucket reduced where backward hands it over, in the
 * training thread (correct, not overlapped; the data parallel line says so). */
static stoke_status sync_start(stoke_dist *d, int k, float *buf, size_t n, void *stream)
{
    (void)k, (void)stream;
    return grads_mean(d, buf, n);
}

static stoke_status sync_wait(stoke_dist *d, void *stream)
{
    (void)d, (void)stream;
    return STOKE_OK;
}

static const dist_grads mpi_grads_sync = {.name = "mpi (not overlapped: this MPI has no "
                                                  "thread support)",
                                          .stream_ordered = true,
                                          .start = sync_start,
                                          .wait = sync_wait};

stoke_status dist_mpi_init(stoke_dist **out)
{
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    /* the training thread and the communication thread call MPI, on communicators of
     * their own */
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "dist: MPI_Init failed");
    if (inited)
        MPI_Query_thread(&provided);
    mpi_state *s = calloc(1, sizeof *s);
    if (!s)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory");
    MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &s->grads);
    /* errors come back as codes (named in messages), not an abort without a word */
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(s->grads, MPI_ERRORS_RETURN);
    int world, rank;
    MPI_Comm_size(s->comm, &world);
    MPI_Comm_rank(s->comm, &rank);
    stoke_status st = dist_new(world, rank, &mpi_host, s,
                               provided >= MPI_THREAD_MULTIPLE ? &mpi_grads : &mpi_grads_sync, out);
    if (st != STOKE_OK) {
        MPI_Comm_free(&s->grads);
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
