/* nccl.c - the gradients over NCCL on the rank's GPU: libnccl loaded at run time through
 * core/dl.h (so one binary runs with or without it), one communicator per world made
 * from a unique id that rank 0 draws and MPI broadcasts, and each bucket's mean queued
 * on the model's stream by ncclAllReduce with ncclAvg, so a captured backward replays
 * it and the step that follows on the stream reads the mean without the host waiting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl.h"
#include "core/env.h"
#include "dist/dist_impl.h"
#include "dist/nccl_abi.h"

typedef struct nccl_state {
    nc_lib nc;
    stoke_cudart *rt; /* the CUDA runtime, for the rank's device */
    nc_comm comm;
    int device;
    bool failed; /* an error was seen: the communicator is aborted, not destroyed */
} nccl_state;

#define SYM(names, field, optional) STOKE_DL_SYM(nc_lib, names, field, optional)
static const stoke_dl_sym syms[] = {
    SYM("ncclGetVersion", get_version, 0),
    SYM("ncclGetUniqueId", get_unique_id, 0),
    SYM("ncclCommInitRank", comm_init_rank, 0),
    SYM("ncclAllReduce", all_reduce, 0),
    SYM("ncclCommDestroy", comm_destroy, 0),
    SYM("ncclGetErrorString", get_error_string, 0),
    SYM("ncclCommAbort", comm_abort, 1),
    SYM("ncclCommGetAsyncError", comm_get_async_error, 1),
};
#undef SYM

static const char *const names[] = {"libnccl.so.2", NULL};

static const char *nc_err(const nccl_state *s, int rc)
{
    const char *t = s->nc.get_error_string ? s->nc.get_error_string(rc) : NULL;
    return t ? t : "unknown NCCL error";
}

static void state_free(nccl_state *s)
{
    if (!s)
        return;
    if (s->comm) /* after an error the peers may be gone: Destroy could wait for them */
        (s->failed && s->nc.comm_abort ? s->nc.comm_abort : s->nc.comm_destroy)(s->comm);
    stoke_dl_close(&s->nc);
    stoke_cudart_close(s->rt);
    free(s);
}

/* ---- the transport (dist_impl.h's dist_grads) ------------------------------------ */

static stoke_status nccl_start(stoke_dist *d, int k, float *buf, size_t n, void *stream)
{
    nccl_state *s = d->grads_state;
    /* in place, on the model's stream: no host wait and no allocation, so capturable */
    int rc = s->nc.all_reduce(buf, buf, n, NC_FLOAT, NC_AVG, s->comm, stream);
    if (rc == NC_SUCCESS)
        return STOKE_OK;
    s->failed = true;
    return stoke_fail(STOKE_ERR_IO,
                      "rank %d of %d: NCCL's ncclAllReduce of gradient bucket %d (%zu floats) "
                      "failed: %s (NCCL error %d)",
                      d->rank, d->world, k, n, nc_err(s, rc), rc);
}

/* Nothing to wait for on the host: the step is queued behind the means on the stream.
 * What NCCL found since (a peer gone, a network error) is reported here, before the
 * step, naming this rank. */
static stoke_status nccl_wait(stoke_dist *d, void *stream)
{
    (void)stream;
    nccl_state *s = d->grads_state;
    if (!s->nc.comm_get_async_error)
        return STOKE_OK;
    int err = NC_SUCCESS, rc = s->nc.comm_get_async_error(s->comm, &err);
    if (rc != NC_SUCCESS)
        err = rc;
    if (err == NC_SUCCESS || err == NC_IN_PROGRESS)
        return STOKE_OK;
    s->failed = true;
    return stoke_fail(STOKE_ERR_IO,
                      "rank %d of %d: NCCL's communicator failed: %s (NCCL error %d; a rank "
                      "that died or lost its connection stops the others)",
                      d->rank, d->world, nc_err(s, err), err);
}

static void nccl_free(stoke_dist *d)
{
    state_free(d->grads_state);
    d->grads_state = NULL;
}

static const dist_grads nccl_grads = {.name = "nccl",
                                      .stream_ordered = true,
                                      .start = nccl_start,
                                      .wait = nccl_wait,
                                      .free = nccl_free};

/* ---- making the communicator ------------------------------------------------------ */

/* libnccl loaded, 2.10 or newer. The message names the library. */
static stoke_status load(nccl_state *s)
{
    const stoke_dl_lib lib = {.what = "NCCL",
                              .env = "STOKE_NCCL_LIBRARY",
                              .names = names,
                              .syms = syms,
                              .nsyms = sizeof syms / sizeof syms[0],
                              .words = STOKE_DL_WORDS_LIST};
    const char *tried;
    stoke_status st = stoke_dl_open(&lib, stoke_env("STOKE_NCCL_LIBRARY"), &s->nc, &tried);
    if (st != STOKE_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        return stoke_fail(st,
                          "%s (data parallel on GPUs needs NCCL 2.10 or newer: install libnccl2, "
                          "or name the library with STOKE_NCCL_LIBRARY)",
                          why);
    }
    int v = 0, rc = s->nc.get_version(&v);
    if (rc != NC_SUCCESS)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: ncclGetVersion: %s (NCCL error %d)", tried,
                          nc_err(s, rc), rc);
    if (v < NC_MIN_VERSION) {
        /* NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 */
        int major = v < 10000 ? v / 1000 : v / 10000,
            minor = v < 10000 ? v % 1000 / 100 : v % 10000 / 100;
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "%s is NCCL %d.%d.%d: stoke averages the gradients with ncclAvg, "
                          "which needs NCCL 2.10 or newer",
                          tried, major, minor, v % 100);
    }
    return STOKE_OK;
}

/* NCCL loaded and the rank's device made current (NCCL binds the communicator to it). */
static stoke_status open_rank(nccl_state *s, int device)
{
    stoke_status st = load(s);
    if (st == STOKE_OK)
        st = stoke_cudart_open(&s->rt);
    if (st == STOKE_OK)
        st = stoke_cudart_check_device_api(s->rt);
    if (st == STOKE_OK)
        st = stoke_cudart_set_device(s->rt, device);
    return st;
}

/* What each rank tells the others before the collective calls, so that a rank whose
 * NCCL or GPU is missing stops every rank with a message rather than leaving them in
 * ncclCommInitRank, and two ranks on one GPU (which NCCL refuses) are named. */
typedef struct rank_card {
    int failed, device;
    char host[64];
} rank_card;

static stoke_status agree(stoke_dist *d, bool failed, int device)
{
    char mine_msg[1024];
    snprintf(mine_msg, sizeof mine_msg, "%s", failed ? stoke_last_error() : "");
    rank_card mine = {.failed = failed, .device = device},
              *all = calloc((size_t)d->world, sizeof *all);
    if (!all)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory");
    snprintf(mine.host, sizeof mine.host, "%s", d->host_name);
    stoke_status st = d->host->allgather(d, &mine, sizeof mine, all);
    if (st == STOKE_OK && failed)
        st = stoke_fail(STOKE_ERR_UNAVAILABLE, "dist: rank %d of %d cannot use NCCL on cuda:%d: %s",
                        d->rank, d->world, device, mine_msg);
    for (int r = 0; st == STOKE_OK && r < d->world; r++) {
        if (all[r].failed)
            st = stoke_fail(STOKE_ERR_UNAVAILABLE,
                            "dist: rank %d of %d cannot use NCCL on cuda:%d (its own message "
                            "says why)",
                            r, d->world, all[r].device);
        for (int q = 0; st == STOKE_OK && q < r; q++)
            if (all[q].device == all[r].device && !strcmp(all[q].host, all[r].host))
                st = stoke_fail(STOKE_ERR_ARG,
                                "dist: ranks %d and %d both use cuda:%d of %s: NCCL needs one GPU "
                                "per rank (each rank takes the device of its local rank)",
                                q, r, all[r].device, all[r].host[0] ? all[r].host : "one host");
    }
    free(all);
    return st;
}

/* The communicator: rank 0's unique id broadcast over the host's collectives (MPI),
 * then every rank joins with it. */
static stoke_status init_comm(stoke_dist *d, nccl_state *s)
{
    struct {
        int ok;
        nc_unique_id id;
    } card = {0};
    int rc = NC_SUCCESS;
    if (d->rank == 0) {
        rc = s->nc.get_unique_id(&card.id);
        card.ok = rc == NC_SUCCESS;
    }
    stoke_status st = d->host->bcast(d, &card, sizeof card, 0);
    if (st != STOKE_OK)
        return st;
    if (!card.ok)
        return d->rank == 0 ? stoke_fail(STOKE_ERR_UNAVAILABLE,
                                         "dist: rank 0: ncclGetUniqueId: %s (NCCL error %d)",
                                         nc_err(s, rc), rc)
                            : stoke_fail(STOKE_ERR_UNAVAILABLE,
                                         "dist: rank 0 could not draw NCCL's unique id (its own "
                                         "message says why)");
    rc = s->nc.comm_init_rank(&s->comm, d->world, card.id, d->rank);
    if (rc != NC_SUCCESS) {
        s->comm = NULL;
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "dist: rank %d of %d: ncclCommInitRank on cuda:%d: %s (NCCL error %d)",
                          d->rank, d->world, s->device, nc_err(s, rc), rc);
    }
    return STOKE_OK;
}

stoke_status dist_use_nccl(stoke_dist *d, int device)
{
    if (d->grads == &nccl_grads) {
        const nccl_state *s = d->grads_state;
        return s->device == device
                   ? STOKE_OK
                   : stoke_fail(STOKE_ERR_ARG, "dist: NCCL already runs on cuda:%d, not cuda:%d",
                                s->device, device);
    }
    if (d->nstage > 0) /* the reducer's buffers were made for the transport before */
        return stoke_fail(STOKE_ERR_ARG,
                          "dist: the gradients' transport is chosen before the reducer is "
                          "installed");
    nccl_state *s = calloc(1, sizeof *s);
    if (!s)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory");
    s->device = device;
    /* every rank reaches the agreement, whatever failed before it */
    stoke_status st = agree(d, open_rank(s, device) != STOKE_OK, device);
    if (st == STOKE_OK)
        st = init_comm(d, s);
    if (st != STOKE_OK) {
        state_free(s);
        return st;
    }
    if (d->grads && d->grads->free)
        d->grads->free(d);
    d->grads = &nccl_grads;
    d->grads_state = s;
    return STOKE_OK;
}
