/* nccl_abi.h - the part of NCCL's ABI that stoke calls, declared here so no vendor
 * header is needed at build time (libnccl is loaded at run time through core/dl.h).
 * Values as NCCL 2.28's nccl.h has them (stable since 2.10, which added ncclAvg);
 * tests/abi/nccl_abi_check.c checks them against nccl.h wherever it is installed, and
 * the test double (tests/fake/fake_nccl.c) implements the same functions. Internal to
 * src/dist and its tests. */
#ifndef STOKE_DIST_NCCL_ABI_H
#define STOKE_DIST_NCCL_ABI_H

#include <stddef.h>

enum { NC_UNIQUE_ID_BYTES = 128 };
typedef struct nc_unique_id { /* ncclUniqueId, passed by value */
    char internal[NC_UNIQUE_ID_BYTES];
} nc_unique_id;

typedef struct nc_comm *nc_comm; /* ncclComm_t */

enum { /* ncclResult_t */
       NC_SUCCESS = 0,
       NC_UNHANDLED_CUDA_ERROR = 1,
       NC_SYSTEM_ERROR = 2,
       NC_INTERNAL_ERROR = 3,
       NC_INVALID_ARGUMENT = 4,
       NC_INVALID_USAGE = 5,
       NC_REMOTE_ERROR = 6,
       NC_IN_PROGRESS = 7,
};
enum { NC_FLOAT = 7 };           /* ncclFloat (ncclFloat32) */
enum { NC_SUM = 0, NC_AVG = 4 }; /* ncclRedOp_t */
enum { NC_MIN_VERSION = 21000 }; /* 2.10.0, the first with ncclAvg (NCCL_VERSION(2,10,0)) */

/* The functions, as a core/dl.h table: the dlopen handle first. */
typedef struct nc_lib {
    void *lib;
    int (*get_version)(int *version);
    int (*get_unique_id)(nc_unique_id *id);
    int (*comm_init_rank)(nc_comm *comm, int nranks, nc_unique_id id, int rank);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, nc_comm comm,
                      void *stream);
    int (*comm_destroy)(nc_comm comm);
    const char *(*get_error_string)(int result);
    int (*comm_abort)(nc_comm comm);                       /* optional */
    int (*comm_get_async_error)(nc_comm comm, int *error); /* optional */
} nc_lib;

#endif
