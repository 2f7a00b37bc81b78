/* world.c - which world this process is in (launched by mpirun or alone) and the
 * measurement of what an unhidden all-reduce costs in it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "dist/dist_impl.h"

bool stoke_dist_launched(int *size)
{
    /* OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; a PMIx launcher (srun, prterun)
     * PMIX_RANK, with the size only known once MPI starts */
    const char *v = stoke_env("OMPI_COMM_WORLD_SIZE");
    *size = 0;
    if (v && *v) {
        *size = atoi(v);
        return *size > 0;
    }
    v = stoke_env("PMIX_RANK");
    if (v && *v) {
        *size = -1;
        return true;
    }
    return false;
}

bool stoke_dist_stop_grace(double *seconds)
{
    *seconds = 0;
    const char *v = stoke_env("OMPI_COMM_WORLD_SIZE");
    if (!v || !*v)
        return false;
    /* mpirun sets it for its ranks from --mca or its own environment; a value from an
     * MCA parameter file is not passed on, and the default is then assumed */
    v = stoke_env("OMPI_MCA_odls_base_sigkill_timeout");
    if (!v || !*v) {
        *seconds = 1;
        return true;
    }
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 0)
        return false;
    *seconds = (double)n;
    return true;
}

stoke_status stoke_dist_init(stoke_dist **out)
{
    int size;
    if (stoke_dist_launched(&size) && size != 1)
        return dist_mpi_init(out);
    return stoke_dist_local(out);
}

stoke_status stoke_dist_use_device(stoke_dist *d, int device)
{
    return d->world > 1 ? dist_use_nccl(d, device) : STOKE_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

stoke_status stoke_dist_time_allreduce(stoke_dist *d, size_t floats, int reps, double *seconds)
{
    *seconds = 0;
    if (d->world <= 1 || floats == 0 || reps < 1)
        return STOKE_OK;
    float *v = calloc(floats, sizeof *v);
    double *t = malloc((size_t)reps * sizeof *t);
    stoke_status s =
        v && t ? STOKE_OK
               : stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory for %zu floats", floats);
    for (int r = -1; s == STOKE_OK && r < reps; r++) {
        /* every rank starts together, so the figure is the transfer's, not a late rank's */
        double sync = 0;
        if ((s = stoke_dist_sum(d, &sync, 1)) != STOKE_OK)
            break;
        double t0 = stoke_wall_time();
        s = d->host->allreduce_f32(d, v, floats);
        if (r >= 0)
            t[r] = stoke_wall_time() - t0;
    }
    if (s == STOKE_OK) {
        /* the slowest rank's median is what a step waits for */
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *seconds = t[reps / 2];
        s = stoke_dist_max(d, seconds, 1);
    }
    free(v);
    free(t);
    return s;
}
