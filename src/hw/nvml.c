/* nvml.c - NVIDIA GPU readings through NVML, loaded at run time with dlopen so one
 * binary runs with or without a driver. Symbols are looked up newest version first;
 * every device function is optional and a missing one reads as "not supported". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/regular.h"
#include "hw/gpu_impl.h"

static void *sym(void *lib, const char *const *names)
{
    for (; *names; names++) {
        void *p = dlsym(lib, *names);
        if (p)
            return p;
    }
    return NULL;
}

#define LOAD(field, ...)                                         \
    do {                                                         \
        static const char *const names_[] = {__VA_ARGS__, NULL}; \
        *(void **)&n->field = sym(n->lib, names_);               \
    } while (0)

static const char *nv_err(const stoke_nvml *n, int rc)
{
    const char *s = n->error_string ? n->error_string(rc) : NULL;
    return s ? s : "unknown NVML error";
}

/* Drivers 535.43 to 535.86 write 32-byte entries through the _v3 process call without
 * bumping its version (gpu-abi.md, "stride warning"). nvitop recognises them by this
 * combination of exports; we do the same. */
static size_t process_stride(void *lib)
{
    if (dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3") &&
        dlsym(lib, "nvmlDeviceGetConfComputeMemSizeInfo") &&
        !dlsym(lib, "nvmlDeviceGetRunningProcessDetailList"))
        return 32;
    if (dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3") ||
        dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"))
        return sizeof(nv_process_info);
    return 16; /* the unsuffixed v1 call: pid + usedGpuMemory */
}

stoke_status stoke_nvml_open(stoke_nvml **out)
{
    *out = NULL;
    const char *env = getenv("STOKE_NVML_LIBRARY");
    const char *path = (env && *env) ? env : "libnvidia-ml.so.1";
    if (env && *env && stoke_check_library("STOKE_NVML_LIBRARY", env) != STOKE_OK)
        return STOKE_ERR_UNAVAILABLE; /* a FIFO would hang dlopen */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        if (env && *env)
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "STOKE_NVML_LIBRARY=%s: %s", env, dlerror());
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "libnvidia-ml.so.1 not found");
    }
    stoke_nvml *n = calloc(1, sizeof *n);
    if (!n) {
        dlclose(lib);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading NVML");
    }
    n->lib = lib;
    LOAD(init, "nvmlInit_v2", "nvmlInit");
    LOAD(shutdown, "nvmlShutdown");
    LOAD(error_string, "nvmlErrorString");
    LOAD(driver_version, "nvmlSystemGetDriverVersion");
    LOAD(cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2",
         "nvmlSystemGetCudaDriverVersion");
    LOAD(device_count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    LOAD(handle_by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    LOAD(name, "nvmlDeviceGetName");
    LOAD(uuid, "nvmlDeviceGetUUID");
    LOAD(pci_info, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo");
    LOAD(memory, "nvmlDeviceGetMemoryInfo");
    LOAD(utilization, "nvmlDeviceGetUtilizationRates");
    LOAD(power_usage, "nvmlDeviceGetPowerUsage");
    LOAD(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    LOAD(temperature, "nvmlDeviceGetTemperature");
    LOAD(clock, "nvmlDeviceGetClockInfo");
    LOAD(max_clock, "nvmlDeviceGetMaxClockInfo");
    LOAD(compute_capability, "nvmlDeviceGetCudaComputeCapability");
    LOAD(pcie_throughput, "nvmlDeviceGetPcieThroughput");
    LOAD(pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
    LOAD(pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
    LOAD(clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons",
         "nvmlDeviceGetCurrentClocksThrottleReasons");
    LOAD(processes, "nvmlDeviceGetComputeRunningProcesses_v3",
         "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses");
    n->process_stride = process_stride(lib);

    if (!n->init || !n->shutdown || !n->device_count || !n->handle_by_index) {
        dlclose(lib);
        free(n);
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s lacks nvmlInit/nvmlDeviceGetCount", path);
    }
    int rc = n->init();
    if (rc != NV_SUCCESS) {
        stoke_status s = stoke_fail(STOKE_ERR_UNAVAILABLE, "nvmlInit_v2 failed: %s", nv_err(n, rc));
        dlclose(lib);
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
    dlclose(n->lib);
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
