// cuda_abi_check.cu - checks the CUDA runtime values stoke declares by hand
// (src/hw/gpu_impl.h, loaded with dlopen at run time) against the toolkit's own
// headers, and links against the real runtime. Compiled by nvcc: if a value drifts in a
// new toolkit, the build fails here rather than a device misreporting at run time.
#include <cuda_runtime_api.h>
#include <stdio.h>


extern "C" {
#include "hw/gpu_impl.h"
}

static_assert((int)cudaSuccess == CU_SUCCESS, "cudaSuccess");
static_assert((int)cudaErrorInsufficientDriver == CU_ERROR_INSUFFICIENT_DRIVER,
              "cudaErrorInsufficientDriver");
static_assert((int)cudaErrorNoDevice == CU_ERROR_NO_DEVICE, "cudaErrorNoDevice");
static_assert((int)cudaDevAttrMultiProcessorCount == CU_ATTR_MULTIPROCESSOR_COUNT,
              "MultiProcessorCount");
static_assert((int)cudaDevAttrPciBusId == CU_ATTR_PCI_BUS_ID, "PciBusId");
static_assert((int)cudaDevAttrPciDeviceId == CU_ATTR_PCI_DEVICE_ID, "PciDeviceId");
static_assert((int)cudaDevAttrPciDomainId == CU_ATTR_PCI_DOMAIN_ID, "PciDomainId");
static_assert((int)cudaDevAttrComputeCapabilityMajor == CU_ATTR_COMPUTE_CAPABILITY_MAJOR,
              "ComputeCapabilityMajor");
static_assert((int)cudaDevAttrComputeCapabilityMinor == CU_ATTR_COMPUTE_CAPABILITY_MINOR,
              "ComputeCapabilityMinor");
static_assert((int)cudaErrorMemoryAllocation == CU_ERROR_MEMORY_ALLOCATION,
              "cudaErrorMemoryAllocation");
static_assert((int)cudaErrorNotReady == CU_ERROR_NOT_READY, "cudaErrorNotReady");
static_assert(cudaHostAllocDefault == CU_HOST_ALLOC_DEFAULT, "cudaHostAllocDefault");
static_assert((int)cudaMemcpyHostToDevice == CU_MEMCPY_HOST_TO_DEVICE, "cudaMemcpyHostToDevice");
static_assert(cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING, "cudaStreamNonBlocking");
static_assert(cudaEventDisableTiming == CU_EVENT_DISABLE_TIMING, "cudaEventDisableTiming");
static_assert(sizeof(cudaStream_t) == sizeof(void *), "cudaStream_t is passed as void *");
static_assert(sizeof(cudaEvent_t) == sizeof(void *), "cudaEvent_t is passed as void *");
static_assert(sizeof(enum cudaMemcpyKind) == sizeof(int), "cudaMemcpyKind is passed as int");
static_assert(sizeof(cudaError_t) == sizeof(int), "cudaError_t is passed as int");
static_assert(sizeof(enum cudaDeviceAttr) == sizeof(int), "cudaDeviceAttr is passed as int");

int main()
{
    // The loader's entries of the driver table: each must convert to the toolkit's
    // prototype exactly (enums and handles are passed as int and void *, whose sizes
    // are checked above); a changed prototype fails to compile here.
#define CHECK_PROTOTYPE(fn, type) (void)static_cast<type>(&fn)
    CHECK_PROTOTYPE(cudaSetDevice, cudaError_t (*)(int));
    CHECK_PROTOTYPE(cudaHostAlloc, cudaError_t (*)(void **, size_t, unsigned int));
    CHECK_PROTOTYPE(cudaFreeHost, cudaError_t (*)(void *));
    CHECK_PROTOTYPE(cudaMalloc, cudaError_t (*)(void **, size_t));
    CHECK_PROTOTYPE(cudaFree, cudaError_t (*)(void *));
    CHECK_PROTOTYPE(cudaMemcpyAsync,
              cudaError_t (*)(void *, const void *, size_t, cudaMemcpyKind, cudaStream_t));
    CHECK_PROTOTYPE(cudaStreamCreateWithFlags, cudaError_t (*)(cudaStream_t *, unsigned int));
    CHECK_PROTOTYPE(cudaStreamDestroy, cudaError_t (*)(cudaStream_t));
    CHECK_PROTOTYPE(cudaEventCreateWithFlags, cudaError_t (*)(cudaEvent_t *, unsigned int));
    CHECK_PROTOTYPE(cudaEventRecord, cudaError_t (*)(cudaEvent_t, cudaStream_t));
    CHECK_PROTOTYPE(cudaEventSynchronize, cudaError_t (*)(cudaEvent_t));
    CHECK_PROTOTYPE(cudaEventQuery, cudaError_t (*)(cudaEvent_t));
    CHECK_PROTOTYPE(cudaEventDestroy, cudaError_t (*)(cudaEvent_t));
    CHECK_PROTOTYPE(cudaStreamWaitEvent, cudaError_t (*)(cudaStream_t, cudaEvent_t, unsigned int));
    // Linked against the real runtime: on a machine without a GPU this reports the
    // runtime's own reason, which is what stoke prints too.
    int n = -1, version = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    cudaRuntimeGetVersion(&version);
    printf("CUDA runtime %d linked; cudaGetDeviceCount: %s (%d devices)\n", version,
           rc == cudaSuccess ? "ok" : cudaGetErrorString(rc), rc == cudaSuccess ? n : 0);
    return 0;
}
