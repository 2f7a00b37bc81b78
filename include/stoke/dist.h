/* dist.h - data-parallel training (docs/distributed.md): a world of processes, one
 * model replica each, whose gradients are all-reduced to their mean before every
 * optimizer step through the model's reducer seam (stoke_grad_reducer, nn.h). The
 * world is MPI's when stoke runs under mpirun (OpenMPI), with the gradients over MPI's
 * non-blocking all-reduce on the CPU or over NCCL on a GPU's stream; alone, it is the
 * one process's, whose reduction changes nothing. */
#ifndef STOKE_DIST_H
#define STOKE_DIST_H

#include "stoke/nn.h"

typedef struct stoke_dist stoke_dist;

/* The world of one process (rank 0 of 1). STOKE_ERR_NOMEM, recorded. */
stoke_status stoke_dist_local(stoke_dist **out);

/* Whether this process was started by mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE, or
 * PMIx's PMIX_RANK): then *size is the world's size (0 when not launched so). */
bool stoke_dist_launched(int *size);

/* Under OpenMPI's mpirun: true, with *seconds the time mpirun leaves a rank between the
 * SIGTERM of a Ctrl-C and its SIGKILL (odls_base_sigkill_timeout, default 1 s, as it
 * passes the setting on in OMPI_MCA_odls_base_sigkill_timeout). False elsewhere, or when
 * the setting is not a number. */
bool stoke_dist_stop_grace(double *seconds);

/* The world this process was launched into: MPI's under mpirun (MPI_Init here), else
 * the one process's. STOKE_ERR_UNAVAILABLE when launched by mpirun but this stoke was
 * built without MPI, or MPI cannot start (its message). */
stoke_status stoke_dist_init(stoke_dist **out);
/* NULL is fine; after every model using it. MPI_Finalize for MPI's world. */
void stoke_dist_free(stoke_dist *d);

/* A rank that cannot go on (its error already said) stops the whole world with exit
 * status `code`: MPI_Abort, after which mpirun stops every rank and names this one, so
 * no peer waits forever in a collective this rank will never join (MPI_Finalize would
 * wait for them). Does not return in MPI's world; nothing in the one process's. */
void stoke_dist_abort(stoke_dist *d, int code);

int stoke_dist_world_size(const stoke_dist *d);
int stoke_dist_rank(const stoke_dist *d);
int stoke_dist_local_size(const stoke_dist *d); /* ranks on this machine */
int stoke_dist_local_rank(const stoke_dist *d);
const char *stoke_dist_host_name(const stoke_dist *d);
/* "local", "mpi" or "nccl": what carries the gradients. */
const char *stoke_dist_transport(const stoke_dist *d);

/* The gradients of a model on CUDA device `device` over NCCL (loaded at run time:
 * libnccl.so.2, or STOKE_NCCL_LIBRARY), one GPU per rank; the host's collectives stay
 * MPI's. A world of one keeps its local transport. STOKE_ERR_UNAVAILABLE naming what
 * is missing. */
stoke_status stoke_dist_use_device(stoke_dist *d, int device);

/* The host's collectives, blocking, every rank calling them in the same order.
 * Errors are recorded naming what failed. */
stoke_status stoke_dist_sum(stoke_dist *d, double *v, int n); /* v: its sum over ranks */
stoke_status stoke_dist_min(stoke_dist *d, double *v, int n);
stoke_status stoke_dist_max(stoke_dist *d, double *v, int n);
stoke_status stoke_dist_bcast(stoke_dist *d, void *buf, size_t bytes, int root);
/* mine[0..bytes) of every rank into all[rank * bytes ...] on every rank */
stoke_status stoke_dist_allgather(stoke_dist *d, const void *mine, size_t bytes, void *all);

/* Rank 0's parameters (weights and buffers such as batch norm's running statistics)
 * copied into every rank's model: replicas start equal. */
stoke_status stoke_dist_bcast_params(stoke_dist *d, stoke_model *m);
/* The buffers (parameters that are not trainable: running statistics) replaced by
 * their mean over the ranks, so what is evaluated or saved is the same everywhere. */
stoke_status stoke_dist_average_buffers(stoke_dist *d, stoke_model *m);

/* The reducer for stoke_model_set_reducer: each bucket's gradients gathered into its
 * own flat buffer of the model's memory and all-reduced to their mean over the world
 * as soon as backward has produced it, while the rest of backward runs, and scattered
 * back before the step. Over one process the mean is the input: the gradients come
 * back bit for bit. d serves one model at a time. */
stoke_grad_reducer stoke_dist_reducer(stoke_dist *d);

/* Whether the next backward's buckets are reduced (the default). A micro-batch whose
 * gradients only accumulate toward a later step is not: the step's last one reduces
 * the sum once (DDP's no_sync). On a device whose backward is captured the captured
 * reduction runs at every backward, so this is ignored there. */
void stoke_dist_set_sync(stoke_dist *d, bool sync);

/* Where the gradients' reduction spent its time, since the last reset. */
typedef struct stoke_dist_stats {
    int64_t steps;      /* finishes (optimizer steps) */
    int64_t reductions; /* bucket reductions started */
    double bytes;       /* their bytes */
    double reduce_s;    /* host time in the reducer during backward (staging, starting) */
    double finish_s;    /* host time in the reducer before the step (waiting, scattering) */
    double exposed_s;   /* of finish_s, waiting for reductions to complete: the
                           all-reduce's time not hidden behind backward */
} stoke_dist_stats;
void stoke_dist_get_stats(const stoke_dist *d, stoke_dist_stats *out);
void stoke_dist_reset_stats(stoke_dist *d);

/* The seconds one blocking all-reduce of `floats` floats takes over this world, the
 * median of `reps` (after one warm-up): what the all-reduce of a step would cost if
 * none of it were hidden. On the host (MPI or local); 0 for a world of one. */
stoke_status stoke_dist_time_allreduce(stoke_dist *d, size_t floats, int reps, double *seconds);

#endif
