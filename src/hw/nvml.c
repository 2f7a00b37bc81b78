/* nvml.c - NVIDIA GPU readings through NVML, loaded at run time (core/dl.h) so one
 * binary runs with or without a driver. Symbols are looked up newest version first;
 * every device function is optional and a missing one reads as "not supported". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl.h"
#include "core/env.h"
#include "hw/gpu_impl.h"

/* Newest version first (core/dl.h); only the four that opening needs are required. */
#define SYM(names, field, optional) STOKE_DL_SYM(stoke_nvml, names, field, optional)
static const stoke_dl_sym syms[] = {
    SYM("nvmlInit_v2 nvmlInit", init, 0),
    SYM("nvmlShutdown", shutdown, 0),
    SYM("nvmlErrorString", error_string, 1),
    SYM("nvmlSystemGetDriverVersion", driver_version, 1),
    SYM("nvmlSystemGetCudaDriverVersion_v2 nvmlSystemGetCudaDriverVersion", cuda_driver_version, 1),
    SYM("nvmlDeviceGetCount_v2 nvmlDeviceGetCount", device_count, 0),
    SYM("nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByIndex", handle_by_index, 0),
    SYM("nvmlDeviceGetName", name, 1),
    SYM("nvmlDeviceGetUUID", uuid, 1),
    SYM("nvmlDeviceGetPciInfo_v3 nvmlDeviceGetPciInfo_v2 nvmlDeviceGetPciInfo", pci_info, 1),
    SYM("nvmlDeviceGetMemoryInfo", memory, 1),
    SYM("nvmlDeviceGetUtilizationRates", utilization, 1),
    SYM("nvmlDeviceGetPowerUsage", power_usage, 1),
    SYM("nvmlDeviceGetEnforcedPowerLimit", power_limit, 1),
    SYM("nvmlDeviceGetTemperature", temperature, 1),
    SYM("nvmlDeviceGetClockInfo", clock, 1),
    SYM("nvmlDeviceGetMaxClockInfo", max_clock, 1),
    SYM("nvmlDeviceGetCudaComputeCapability", compute_capability, 1),
    SYM("nvmlDeviceGetPcieThroughput", pcie_throughput, 1),
    SYM("nvmlDeviceGetCurrPcieLinkGeneration", pcie_gen, 1),
    SYM("nvmlDeviceGetCurrPcieLinkWidth", pcie_width, 1),
    SYM("nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksThrottleReasons",
        clock_reasons, 1),
    SYM("nvmlDeviceGetComputeRunningProcesses_v3 nvmlDeviceGetComputeRunningProcesses_v2 "
        "nvmlDeviceGetComputeRunningProcesses",
        processes, 1),
};
#undef SYM

static const char *const names[] = {"libnvidia-ml.so.1", NULL};

static const char *nv_err(const stoke_nvml *n, int rc)
{
    const char *s = n->error_string ? n->error_string(rc) : NULL;
    return s ? s : "unknown NVML error";
}

/* Drivers 535.43 to 535.86 write 32-byte entries through the _v3 process call without
 * bumping its version (gpu-abi.md, "stride warning"). nvitop recognises them by this
 * combination of exports; we do the same. */
static size_t process_stride(const stoke_nvml *n)
{
    if (stoke_dl_find(n, "nvmlDeviceGetComputeRunningProcesses_v3") &&
        stoke_dl_find(n, "nvmlDeviceGetConfComputeMemSizeInfo") &&
        !stoke_dl_find(n, "nvmlDeviceGetRunningProcessDetailList"))
        return 32;
    if (stoke_dl_find(n, "nvmlDeviceGetComputeRunningProcesses_v3") ||
        stoke_dl_find(n, "nvmlDeviceGetComputeRunningProcesses_v2"))
        return sizeof(nv_process_info);
    return 16; /* the unsuffixed v1 call: pid + usedGpuMemory */
}

stoke_status stoke_nvml_open(stoke_nvml **out)
{
    *out = NULL;
    stoke_nvml *n = calloc(1, sizeof *n);
    if (!n)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading NVML");
    const stoke_dl_lib lib = {.what = "libnvidia-ml.so.1",
                              .env = "STOKE_NVML_LIBRARY",
                              .names = names,
                              .syms = syms,
                              .nsyms = sizeof syms / sizeof syms[0],
                              .words = STOKE_DL_WORDS_WHAT};
    const char *tried;
    stoke_status st = stoke_dl_open(&lib, stoke_env("STOKE_NVML_LIBRARY"), n, &tried);
    if (st != STOKE_OK) {
        stoke_dl_close(n);
        free(n);
        return st;
    }
    n->process_stride = process_stride(n);
    int rc = n->init();
    if (rc != NV_SUCCESS) {
        stoke_status s = stoke_fail(STOKE_ERR_UNAVAILABLE, "nvmlInit_v2 failed: %s", nv_err(n, rc));
        stoke_dl_close(n);
        free(n);
        return s;
    }
    unsigned count = 0;
    rc = n->device_count(&count);
    if (rc != NV_SUCCESS) {
        stoke_status s =
            stoke_fail(STOKE_ERR_UNAVAILABLE, "nvmlDeviceGetCount failed: %s", nv_err(n, rc));
        stoke_nvml_close(n);
        return s;
    }
    /* Devices we may not open (NO_PERMISSION) are skipped rather than fatal. */
    for (unsigned i = 0; i < count && n->count < STOKE_MAX_GPUS; i++) {
        nv_device d = NULL;
        if (n->handle_by_index(i, &d) == NV_SUCCESS && d)
            n->devices[n->count++] = d;
    }
    if (n->driver_version && n->driver_version(n->driver, sizeof n->driver) != NV_SUCCESS)
        n->driver[0] = '\0';
    n->driver[sizeof n->driver - 1] = '\0';
    if (n->cuda_driver_version && n->cuda_driver_version(&n->cuda_version) != NV_SUCCESS)
        n->cuda_version = 0;
    *out = n;
    return STOKE_OK;
}

void stoke_nvml_close(stoke_nvml *n)
{
    if (!n)
        return;
    n->shutdown();
    stoke_dl_close(n);
    free(n);
}

int stoke_nvml_device_count(const stoke_nvml *n) { return n ? (int)n->count : 0; }
const char *stoke_nvml_driver_version(const stoke_nvml *n) { return n ? n->driver : ""; }
int stoke_nvml_cuda_driver_version(const stoke_nvml *n) { return n ? n->cuda_version : 0; }

static stoke_status device(stoke_nvml *n, int i, nv_device *d)
{
    if (!n || i < 0 || (unsigned)i >= n->count)
        return stoke_fail(STOKE_ERR_ARG, "GPU index %d out of range (%u devices)", i,
                          n ? n->count : 0);
    *d = n->devices[i];
    return STOKE_OK;
}

/* Copies a driver string, guaranteeing termination even if the driver did not. */
static bool get_string(int (*fn)(nv_device, char *, unsigned), nv_device d, char *dst, size_t size)
{
    dst[0] = '\0';
    if (!fn || fn(d, dst, (unsigned)size) != NV_SUCCESS) {
        dst[0] = '\0';
        return false;
    }
    dst[size - 1] = '\0';
    return true;
}

stoke_status stoke_nvml_device_info(stoke_nvml *n, int i, stoke_gpu_info *out)
{
    nv_device d = NULL;
    stoke_status s = device(n, i, &d);
    if (s)
        return s;
    memset(out, 0, sizeof *out);
    out->index = i;
    if (!get_string(n->name, d, out->name, sizeof out->name))
        snprintf(out->name, sizeof out->name, "NVIDIA GPU %d", i);
    get_string(n->uuid, d, out->uuid, sizeof out->uuid);
    nv_pci_info pci;
    memset(&pci, 0, sizeof pci);
    if (n->pci_info && n->pci_info(d, &pci) == NV_SUCCESS) {
        pci.bus_id[sizeof pci.bus_id - 1] = '\0';
        snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%s", pci.bus_id);
        out->valid |= STOKE_GPU_HAS_PCI_BUS_ID;
    }
    nv_memory mem;
    if (n->memory && n->memory(d, &mem) == NV_SUCCESS) {
        out->memory_total_bytes = mem.total;
        out->valid |= STOKE_GPU_HAS_MEMORY;
    }
    if (n->compute_capability &&
        n->compute_capability(d, &out->cc_major, &out->cc_minor) == NV_SUCCESS)
        out->valid |= STOKE_GPU_HAS_CC;
    if (n->power_limit && n->power_limit(d, &out->power_limit_mw) == NV_SUCCESS)
        out->valid |= STOKE_GPU_HAS_POWER_LIMIT;
    if (n->max_clock && n->max_clock(d, NV_CLOCK_SM, &out->max_sm_clock_mhz) == NV_SUCCESS)
        out->valid |= STOKE_GPU_HAS_MAX_SM_CLOCK;
    if (n->pcie_gen && n->pcie_width && n->pcie_gen(d, &out->pcie_gen) == NV_SUCCESS &&
        n->pcie_width(d, &out->pcie_width) == NV_SUCCESS)
        out->valid |= STOKE_GPU_HAS_PCIE;
    return STOKE_OK;
}

stoke_status stoke_nvml_sample(stoke_nvml *n, int i, stoke_gpu_sample *out)
{
    nv_device d = NULL;
    stoke_status s = device(n, i, &d);
    if (s)
        return s;
    memset(out, 0, sizeof *out);
    nv_utilization u;
    int rc = n->utilization ? n->utilization(d, &u) : NV_ERROR_NOT_SUPPORTED;
    if (rc == NV_ERROR_GPU_IS_LOST)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "GPU %d has fallen off the bus (%s)", i,
                          nv_err(n, rc));
    if (rc == NV_SUCCESS) {
        out->util_gpu_pct = u.gpu;
        out->util_mem_pct = u.memory;
        out->valid |= STOKE_GS_UTIL;
    }
    nv_memory m;
    if (n->memory && n->memory(d, &m) == NV_SUCCESS) {
        out->mem_used_bytes = m.used;
        out->mem_total_bytes = m.total;
        out->valid |= STOKE_GS_MEMORY;
    }
    if (n->power_usage && n->power_usage(d, &out->power_mw) == NV_SUCCESS)
        out->valid |= STOKE_GS_POWER;
    if (n->power_limit && n->power_limit(d, &out->power_limit_mw) == NV_SUCCESS)
        out->valid |= STOKE_GS_POWER_LIMIT;
    if (n->temperature && n->temperature(d, NV_TEMPERATURE_GPU, &out->temp_c) == NV_SUCCESS)
        out->valid |= STOKE_GS_TEMP;
    if (n->clock && n->clock(d, NV_CLOCK_SM, &out->sm_clock_mhz) == NV_SUCCESS)
        out->valid |= STOKE_GS_SM_CLOCK;
    unsigned long long reasons;
    if (n->clock_reasons && n->clock_reasons(d, &reasons) == NV_SUCCESS) {
        out->throttle_reasons = reasons;
        out->valid |= STOKE_GS_THROTTLE;
    }
    if (n->pcie_throughput) {
        if (n->pcie_throughput(d, NV_PCIE_RX_BYTES, &out->pcie_rx_kBps) == NV_SUCCESS)
            out->valid |= STOKE_GS_PCIE_RX;
        if (n->pcie_throughput(d, NV_PCIE_TX_BYTES, &out->pcie_tx_kBps) == NV_SUCCESS)
            out->valid |= STOKE_GS_PCIE_TX;
    }
    return STOKE_OK;
}

stoke_status stoke_nvml_processes(stoke_nvml *n, int i, stoke_gpu_proc *procs, int cap, int *count)
{
    *count = 0;
    nv_device d = NULL;
    stoke_status s = device(n, i, &d);
    if (s)
        return s;
    if (!n->processes)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "the driver lists no GPU processes");
    /* The list can grow between the sizing call and the real one; retry a few times
     * with some slack rather than loop forever. */
    for (int attempt = 0; attempt < 4; attempt++) {
        unsigned want = 0;
        int rc = n->processes(d, &want, NULL);
        if (rc == NV_SUCCESS)
            return STOKE_OK; /* no processes */
        if (rc != NV_ERROR_INSUFFICIENT_SIZE)
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "GPU %d process list: %s", i, nv_err(n, rc));
        unsigned have = want + 8;
        unsigned char *buf = calloc(have, n->process_stride);
        if (!buf)
            return stoke_fail(STOKE_ERR_NOMEM, "out of memory for GPU process list");
        rc = n->processes(d, &have, buf);
        if (rc == NV_ERROR_INSUFFICIENT_SIZE) {
            free(buf);
            continue;
        }
        if (rc != NV_SUCCESS) {
            free(buf);
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "GPU %d process list: %s", i, nv_err(n, rc));
        }
        int w = 0;
        for (unsigned k = 0; k < have && w < cap; k++) {
            const unsigned char *e = buf + (size_t)k * n->process_stride;
            unsigned pid;
            unsigned long long used;
            memcpy(&pid, e, sizeof pid);
            memcpy(&used, e + 8, sizeof used); /* offset 8 in every layout */
            procs[w].pid = pid;
            procs[w].used_valid = used != NV_VALUE_NOT_AVAILABLE;
            procs[w].used_bytes = procs[w].used_valid ? used : 0;
            w++;
        }
        free(buf);
        *count = w;
        return STOKE_OK;
    }
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "GPU %d process list kept growing", i);
}
