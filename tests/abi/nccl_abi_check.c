/* nccl_abi_check.c - checks the NCCL values stoke declares by hand (src/dist/nccl_abi.h,
 * libnccl loaded with dlopen at run time) against NCCL's own nccl.h, wherever it is
 * installed: if a value drifts in a new NCCL, the build fails here rather than a run
 * averaging with the wrong operation. */
#include <nccl.h>
#include <stdio.h>

#include "dist/nccl_abi.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(nc_unique_id), "ncclUniqueId");
_Static_assert(NCCL_UNIQUE_ID_BYTES == NC_UNIQUE_ID_BYTES, "NCCL_UNIQUE_ID_BYTES");
_Static_assert(sizeof(ncclComm_t) == sizeof(nc_comm), "ncclComm_t");
_Static_assert(sizeof(ncclResult_t) == sizeof(int), "ncclResult_t");
_Static_assert(sizeof(ncclDataType_t) == sizeof(int), "ncclDataType_t");
_Static_assert(sizeof(ncclRedOp_t) == sizeof(int), "ncclRedOp_t");
_Static_assert((int)ncclSuccess == NC_SUCCESS, "ncclSuccess");
_Static_assert((int)ncclUnhandledCudaError == NC_UNHANDLED_CUDA_ERROR, "ncclUnhandledCudaError");
_Static_assert((int)ncclSystemError == NC_SYSTEM_ERROR, "ncclSystemError");
_Static_assert((int)ncclInternalError == NC_INTERNAL_ERROR, "ncclInternalError");
_Static_assert((int)ncclInvalidArgument == NC_INVALID_ARGUMENT, "ncclInvalidArgument");
_Static_assert((int)ncclInvalidUsage == NC_INVALID_USAGE, "ncclInvalidUsage");
_Static_assert((int)ncclRemoteError == NC_REMOTE_ERROR, "ncclRemoteError");
_Static_assert((int)ncclInProgress == NC_IN_PROGRESS, "ncclInProgress");
_Static_assert((int)ncclFloat == NC_FLOAT, "ncclFloat");
_Static_assert((int)ncclSum == NC_SUM, "ncclSum");
_Static_assert((int)ncclAvg == NC_AVG, "ncclAvg");
_Static_assert(NCCL_VERSION(2, 10, 0) == NC_MIN_VERSION, "NCCL_VERSION(2, 10, 0)");

int main(void)
{
    printf("NCCL %d.%d ABI: the values of src/dist/nccl_abi.h match nccl.h\n", NCCL_MAJOR,
           NCCL_MINOR);
    return 0;
}
