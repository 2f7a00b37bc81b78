/* dist_impl.h - what a world is made of, internal to src/dist (and to the tests that
 * build a world of threads): the host's collectives (MPI's between processes, the one
 * process's, or a test's) and the gradients' transport (MPI's non-blocking all-reduce
 * on the CPU, NCCL's on a GPU's stream), which dist.c's reducer drives. */
#ifndef STOKE_DIST_IMPL_H
#define STOKE_DIST_IMPL_H

#include "stoke/dist.h"

/* The host's collectives over the world, blocking, on host memory. Errors are
 * recorded (stoke_fail) with what failed, naming the rank where it is known. */
typedef struct dist_host {
    const char *name; /* "local", "mpi", a test's */
    /* v[0..n) replaced by its sum (op 0), min (op 1) or max (op 2) over the ranks */
    stoke_status (*allreduce_f64)(stoke_dist *d, double *v, int n, int op);
    stoke_status (*allreduce_f32)(stoke_dist *d, float *v, size_t n); /* sum, in place */
    stoke_status (*bcast)(stoke_dist *d, void *buf, size_t bytes, int root);
    /* mine[0..bytes) of every rank into all[rank * bytes ...] on every rank */
    stoke_status (*allgather)(stoke_dist *d, const void *mine, size_t bytes, void *all);
    void (*free)(stoke_dist *d);            /* the host state (MPI_Finalize); NULL: none */
    void (*abort)(stoke_dist *d, int code); /* MPI_Abort; NULL: nothing to stop */
} dist_host;

/* The gradients' transport: the in-place mean of each bucket's staging buffer over
 * the world, one of two kinds:
 * - queued on the model's stream (NCCL, local): stream_ordered, start and wait; the
 *   bucket is copied back at once, behind the mean on the stream, and wait only
 *   orders the step after it;
 * - completed by the host (MPI): mean, a blocking call that dist.c runs on its own
 *   communication thread, one bucket after another in readiness order, while backward
 *   computes the next (MPI's non-blocking collectives progress only inside MPI calls,
 *   which a training thread busy in backward does not make); the copies back happen
 *   after the step's finish has waited for them. */
typedef struct dist_grads {
    const char *name; /* "local", "mpi", "nccl" */
    bool stream_ordered;
    /* stream_ordered: starts bucket k's mean of buf[0..n) floats on stream (the model's). */
    stoke_status (*start)(stoke_dist *d, int k, float *buf, size_t n, void *stream);
    /* stream_ordered: every started mean ordered ahead of what is queued next. */
    stoke_status (*wait)(stoke_dist *d, void *stream);
    /* host-completed: buf[0..n) replaced by its mean over the world; called on dist's
     * communication thread (errors recorded there are carried to the training thread) */
    stoke_status (*mean)(stoke_dist *d, float *buf, size_t n);
    void (*free)(stoke_dist *d); /* the transport's state; NULL: none */
} dist_grads;

/* dist.c's communication thread for host-completed transports: a queue of buckets. */
typedef struct dist_comm dist_comm;

/* One staging buffer per bucket: non-blocking reductions of several buckets are in
 * flight together, each in its own buffer (as DDP's flat bucket storage). */
typedef struct dist_stage {
    float *buf;
    size_t n;
    bool started;
} dist_stage;

struct stoke_dist {
    int world, rank;             /* this process among all */
    int local_world, local_rank; /* among those on its machine */
    char host_name[64];
    const dist_host *host;
    void *host_state;
    const dist_grads *grads;
    void *grads_state;
    /* the reducer's (dist.c) */
    dist_stage *stage;
    int nstage;
    const stoke_grad_bucket *buckets; /* the model's, as prepare was given them */
    dist_comm *comm;                  /* host-completed transports' thread; NULL: none yet */
    bool sync;    /* reduce this backward's buckets (false: a micro-batch that accumulates) */
    bool replays; /* the last reduce call queued its bucket: a captured backward replays it */
    stoke_dist_stats stats;
};

/* The world of the host collectives h (its state `state`), the gradients through
 * MPI-like host completion when grads is NULL: a world of size 1 gets local.c's, a
 * larger one must give its own. STOKE_ERR_NOMEM. Used by local.c, mpi.c and tests. */
stoke_status dist_new(int world, int rank, const dist_host *h, void *state, const dist_grads *g,
                      stoke_dist **out);

/* comm.c: bucket k queued for the communication thread (started with the first);
 * every bucket queued so far reduced, with the first failure's status and message;
 * the thread joined (after the last wait: the stage buffers are the model's). */
stoke_status dist_comm_start(stoke_dist *d, int k);
stoke_status dist_comm_wait(stoke_dist *d);
void dist_comm_free(stoke_dist *d);

/* mpi.c: MPI's world (MPI_Init_thread), or STOKE_ERR_UNAVAILABLE in a build without
 * MPI, saying so. */
stoke_status dist_mpi_init(stoke_dist **out);

/* nccl.c: replaces d's gradient transport with NCCL on CUDA device `device`, its
 * communicator made from a unique id that rank 0 draws and broadcasts through d's host
 * collectives. STOKE_ERR_UNAVAILABLE (no libnccl, or no CUDA runtime) naming what is
 * missing. */
stoke_status dist_use_nccl(stoke_dist *d, int device);

#endif
