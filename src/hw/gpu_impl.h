/* gpu_impl.h - the driver tables behind stoke_nvml and stoke_cudart: the subset of
 * NVML and the CUDA runtime that stoke calls, declared from the ABI fact sheet
 * (shared/reference/gpu-abi.md) so no vendor header is needed at build time. Where
 * the CUDA headers exist, tests/abi/cuda_abi_check.cu checks these values against them.
 * The test doubles in tests/fake/ implement the same functions. Both are core/dl.h
 * tables (the dlopen handle first, then the slots its loader fills), so
 * stoke_dl_find reaches what no slot holds: the CUDA backend asks a stoke_cudart
 * whether it is the test double (its marker `stoke_fake_cudart`). */
#ifndef STOKE_GPU_IMPL_H
#define STOKE_GPU_IMPL_H

#include "stoke/hw.h"

/* ---- NVML ---- */
enum {
    NV_SUCCESS = 0,
    NV_ERROR_NOT_SUPPORTED = 3,
    NV_ERROR_NOT_FOUND = 6,
    NV_ERROR_INSUFFICIENT_SIZE = 7,
    NV_ERROR_GPU_IS_LOST = 15,
};
enum { NV_TEMPERATURE_GPU = 0 };
enum { NV_CLOCK_GRAPHICS = 0, NV_CLOCK_SM = 1, NV_CLOCK_MEM = 2 };
enum { NV_PCIE_TX_BYTES = 0, NV_PCIE_RX_BYTES = 1 };
#define NV_VALUE_NOT_AVAILABLE (~0ULL) /* usedGpuMemory when the driver cannot tell */

typedef struct nv_device_st *nv_device;

typedef struct nv_pci_info { /* nvmlPciInfo_t, 68 bytes */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nv_pci_info;

typedef struct nv_memory { /* nvmlMemory_t, bytes */
    unsigned long long total, free, used;
} nv_memory;

typedef struct nv_utilization { /* nvmlUtilization_t, percent */
    unsigned gpu, memory;
} nv_utilization;

typedef struct nv_process_info { /* nvmlProcessInfo_t (v2 layout), 24 bytes */
    unsigned pid;
    unsigned long long used_gpu_memory;
    unsigned gpu_instance_id, compute_instance_id;
} nv_process_info;

struct stoke_nvml {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    const char *(*error_string)(int);
    int (*driver_version)(char *, unsigned);
    int (*cuda_driver_version)(int *);
    int (*device_count)(unsigned *);
    int (*handle_by_index)(unsigned, nv_device *);
    int (*name)(nv_device, char *, unsigned);
    int (*uuid)(nv_device, char *, unsigned);
    int (*pci_info)(nv_device, nv_pci_info *);
    int (*memory)(nv_device, nv_memory *);
    int (*utilization)(nv_device, nv_utilization *);
    int (*power_usage)(nv_device, unsigned *);
    int (*power_limit)(nv_device, unsigned *);
    int (*temperature)(nv_device, int, unsigned *);
    int (*clock)(nv_device, int, unsigned *);
    int (*max_clock)(nv_device, int, unsigned *);
    int (*compute_capability)(nv_device, int *, int *);
    int (*pcie_throughput)(nv_device, int, unsigned *);
    int (*pcie_gen)(nv_device, unsigned *);
    int (*pcie_width)(nv_device, unsigned *);
    int (*clock_reasons)(nv_device, unsigned long long *);
    int (*processes)(nv_device, unsigned *, void *);
    size_t process_stride; /* bytes per entry written by `processes` */
    unsigned count;
    nv_device devices[STOKE_MAX_GPUS];
    char driver[80];
    int cuda_version;
};

/* ---- CUDA runtime ---- */
enum {
    CU_SUCCESS = 0,
    CU_ERROR_MEMORY_ALLOCATION = 2,
    CU_ERROR_STUB_LIBRARY = 34,
    CU_ERROR_INSUFFICIENT_DRIVER = 35,
    CU_ERROR_NO_DEVICE = 100,
    CU_ERROR_NOT_READY = 600,
};
/* Flags and kinds of the loader's pinned memory, copies, streams and events. */
enum { CU_HOST_ALLOC_DEFAULT = 0 };
enum {
    CU_MEMCPY_HOST_TO_DEVICE = 1,
    CU_MEMCPY_DEVICE_TO_HOST = 2,
    CU_MEMCPY_DEVICE_TO_DEVICE = 3,
};
enum { CU_STREAM_NON_BLOCKING = 1 };
enum { CU_EVENT_DEFAULT = 0, CU_EVENT_DISABLE_TIMING = 2 };
enum { CU_CAPTURE_MODE_GLOBAL = 0 };
enum {
    CU_ATTR_MULTIPROCESSOR_COUNT = 16,
    CU_ATTR_PCI_BUS_ID = 33,
    CU_ATTR_PCI_DEVICE_ID = 34,
    CU_ATTR_PCI_DOMAIN_ID = 50,
    CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,
};

struct stoke_cudart {
    void *lib;
    int (*get_device_count)(int *);
    int (*device_get_attribute)(int *, int, int);
    int (*runtime_get_version)(int *);
    int (*driver_get_version)(int *);
    const char *(*get_error_string)(int);
    /* The loader's: pinned host memory, device memory, asynchronous copies on its own
     * stream, and events. Optional: NULL when the library lacks them. cudaStream_t
     * and cudaEvent_t are opaque pointers. */
    int (*set_device)(int);
    int (*host_alloc)(void **, size_t, unsigned);
    int (*free_host)(void *);
    int (*malloc)(void **, size_t);
    int (*free)(void *);
    int (*memcpy_async)(void *, const void *, size_t, int, void *);
    int (*stream_create_with_flags)(void **, unsigned);
    int (*stream_destroy)(void *);
    int (*event_create_with_flags)(void **, unsigned);
    int (*event_record)(void *, void *);
    int (*event_synchronize)(void *);
    int (*event_query)(void *);
    int (*event_destroy)(void *);
    int (*stream_wait_event)(void *, void *, unsigned);
    /* The CUDA backend's (src/nn/cuda): synchronous copies, fills, waits, memory. */
    int (*memcpy)(void *, const void *, size_t, int);
    int (*memset_async)(void *, int, size_t, void *);
    int (*stream_synchronize)(void *);
    int (*mem_get_info)(size_t *, size_t *);
    int (*get_last_error)(void);
    int (*event_elapsed_time)(float *, void *, void *);
    int (*launch_host_func)(void *, void (*)(void *), void *);
    /* graphs (optional: the CUDA backend captures its steps where they exist) */
    int (*stream_begin_capture)(void *, int);
    int (*stream_end_capture)(void *, void **);
    int (*graph_instantiate)(void **, void *, unsigned long long);
    int (*graph_launch)(void *, void *);
    int (*graph_exec_destroy)(void *);
    int (*graph_destroy)(void *);
    int runtime_version;
};

#endif
