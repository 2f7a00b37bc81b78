/* cudart.c - the CUDA runtime, loaded at run time through core/dl.h. The probe uses it for
 * what NVML does not report (SM count); the loader uses its device API (hw.h) for
 * pinned memory, streams, asynchronous copies and events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl.h"
#include "core/env.h"
#include "hw/gpu_impl.h"

#define SYM(name, field, optional) STOKE_DL_SYM(stoke_cudart, name, field, optional)
/* Only the probe's two are required; the rest are checked by the API that needs them
 * (stoke_cudart_check_device_api, ..._compute_api, ..._graph_api). */
static const stoke_dl_sym syms[] = {
    SYM("cudaGetDeviceCount", get_device_count, 0),
    SYM("cudaDeviceGetAttribute", device_get_attribute, 0),
    SYM("cudaRuntimeGetVersion", runtime_get_version, 1),
    SYM("cudaDriverGetVersion", driver_get_version, 1),
    SYM("cudaGetErrorString", get_error_string, 1),
    SYM("cudaSetDevice", set_device, 1),
    SYM("cudaHostAlloc", host_alloc, 1),
    SYM("cudaFreeHost", free_host, 1),
    SYM("cudaMalloc", malloc, 1),
    SYM("cudaFree", free, 1),
    SYM("cudaMemcpyAsync", memcpy_async, 1),
    SYM("cudaStreamCreateWithFlags", stream_create_with_flags, 1),
    SYM("cudaStreamDestroy", stream_destroy, 1),
    SYM("cudaEventCreateWithFlags", event_create_with_flags, 1),
    SYM("cudaEventRecord", event_record, 1),
    SYM("cudaEventSynchronize", event_synchronize, 1),
    SYM("cudaEventQuery", event_query, 1),
    SYM("cudaEventDestroy", event_destroy, 1),
    SYM("cudaStreamWaitEvent", stream_wait_event, 1),
    SYM("cudaMemcpy", memcpy, 1),
    SYM("cudaMemsetAsync", memset_async, 1),
    SYM("cudaStreamSynchronize", stream_synchronize, 1),
    SYM("cudaMemGetInfo", mem_get_info, 1),
    SYM("cudaGetLastError", get_last_error, 1),
    SYM("cudaEventElapsedTime", event_elapsed_time, 1),
    SYM("cudaLaunchHostFunc", launch_host_func, 1),
    SYM("cudaStreamBeginCapture", stream_begin_capture, 1),
    SYM("cudaStreamEndCapture", stream_end_capture, 1),
    SYM("cudaGraphInstantiate", graph_instantiate, 1),
    SYM("cudaGraphLaunch", graph_launch, 1),
    SYM("cudaGraphExecDestroy", graph_exec_destroy, 1),
    SYM("cudaGraphDestroy", graph_destroy, 1),
};
#undef SYM

/* Sonames newest first; then the toolkit's default location, which is often not in
 * the loader's path. */
static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
                                    "/usr/local/cuda/lib64/libcudart.so", NULL};

stoke_status stoke_cudart_open(stoke_cudart **out)
{
    *out = NULL;
    stoke_cudart *rt = calloc(1, sizeof *rt);
    if (!rt)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading the CUDA runtime");
    const stoke_dl_lib lib = {.what = "CUDA runtime",
                              .env = "STOKE_CUDART_LIBRARY",
                              .names = names,
                              .syms = syms,
                              .nsyms = sizeof syms / sizeof syms[0],
                              .words = STOKE_DL_WORDS_FIRST};
    const char *tried;
    stoke_status st = stoke_dl_open(&lib, stoke_env("STOKE_CUDART_LIBRARY"), rt, &tried);
    if (st != STOKE_OK) {
        stoke_cudart_close(rt);
        return st;
    }
    if (!rt->runtime_get_version || rt->runtime_get_version(&rt->runtime_version) != CU_SUCCESS)
        rt->runtime_version = 0;
    *out = rt;
    return STOKE_OK;
}

void stoke_cudart_close(stoke_cudart *rt)
{
    if (!rt)
        return;
    stoke_dl_close(rt);
    free(rt);
}

int stoke_cudart_runtime_version(const stoke_cudart *rt) { return rt ? rt->runtime_version : 0; }

static const char *cu_err(const stoke_cudart *rt, int rc)
{
    const char *s = rt->get_error_string ? rt->get_error_string(rc) : NULL;
    return s ? s : "unknown CUDA error";
}

/* cudaErrorInsufficientDriver (35) and cudaErrorStubLibrary (34) mean the runtime is
 * installed but the driver it talks to is not, or is too old for it: the runtime's own
 * words ("driver version is insufficient") hide the common case, no driver at all,
 * which cudaDriverGetVersion tells apart by answering 0. */
static stoke_status driver_missing(const stoke_cudart *rt, int rc)
{
    int drv = 0, run = rt->runtime_version;
    if (!rt->driver_get_version || rt->driver_get_version(&drv) != CU_SUCCESS)
        drv = 0;
    if (drv <= 0 || rc == CU_ERROR_STUB_LIBRARY)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "no NVIDIA driver: the CUDA runtime %d.%d is installed but the "
                          "driver's library libcuda.so.1 is not found (cudaGetDeviceCount: "
                          "error %d); install the NVIDIA driver",
                          run / 1000, run % 1000 / 10, rc);
    return stoke_fail(STOKE_ERR_UNAVAILABLE,
                      "the NVIDIA driver is older than the CUDA runtime: it supports CUDA up "
                      "to %d.%d, the runtime is %d.%d (cudaGetDeviceCount: %s, error %d); "
                      "install a newer NVIDIA driver",
                      drv / 1000, drv % 1000 / 10, run / 1000, run % 1000 / 10, cu_err(rt, rc), rc);
}

stoke_status stoke_cudart_device_count(stoke_cudart *rt, int *count)
{
    *count = 0;
    int rc = rt->get_device_count(count);
    if (rc != CU_SUCCESS) {
        *count = 0;
        if (rc == CU_ERROR_INSUFFICIENT_DRIVER || rc == CU_ERROR_STUB_LIBRARY)
            return driver_missing(rt, rc);
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "cudaGetDeviceCount: %s (error %d)",
                          cu_err(rt, rc), rc);
    }
    return STOKE_OK;
}

stoke_status stoke_cudart_device_sm(stoke_cudart *rt, int dev, int *sm_count, char *pci_bus_id,
                                    size_t size)
{
    int domain = 0, bus = 0, device = 0;
    int rc = rt->device_get_attribute(sm_count, CU_ATTR_MULTIPROCESSOR_COUNT, dev);
    if (rc == CU_SUCCESS)
        rc = rt->device_get_attribute(&domain, CU_ATTR_PCI_DOMAIN_ID, dev);
    if (rc == CU_SUCCESS)
        rc = rt->device_get_attribute(&bus, CU_ATTR_PCI_BUS_ID, dev);
    if (rc == CU_SUCCESS)
        rc = rt->device_get_attribute(&device, CU_ATTR_PCI_DEVICE_ID, dev);
    if (rc != CU_SUCCESS)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "cudaDeviceGetAttribute(device %d): %s", dev,
                          cu_err(rt, rc));
    snprintf(pci_bus_id, size, "%04x:%02x:%02x.0", (unsigned)domain, (unsigned)bus,
             (unsigned)device);
    return STOKE_OK;
}

/* ---- the device API (hw.h) ------------------------------------------------------ */

static stoke_status cu_fail(const stoke_cudart *rt, const char *what, int rc)
{
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: %s (error %d)", what, cu_err(rt, rc), rc);
}

#define CU_CALL(rt, what, call)                                       \
    do {                                                              \
        int rc_ = (call);                                             \
        return rc_ == CU_SUCCESS ? STOKE_OK : cu_fail(rt, what, rc_); \
    } while (0)

stoke_status stoke_cudart_check_device_api(const stoke_cudart *rt)
{
    if (!rt->set_device || !rt->host_alloc || !rt->free_host || !rt->malloc || !rt->free ||
        !rt->memcpy_async || !rt->stream_create_with_flags || !rt->stream_destroy ||
        !rt->event_create_with_flags || !rt->event_record || !rt->event_synchronize ||
        !rt->event_query || !rt->event_destroy || !rt->stream_wait_event)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "the CUDA runtime lacks the stream, event or memory functions");
    return STOKE_OK;
}

stoke_status stoke_cudart_set_device(stoke_cudart *rt, int dev)
{
    CU_CALL(rt, "cudaSetDevice", rt->set_device(dev));
}

stoke_status stoke_cudart_host_alloc(stoke_cudart *rt, size_t bytes, void **out)
{
    *out = NULL;
    int rc = rt->host_alloc(out, bytes ? bytes : 1, CU_HOST_ALLOC_DEFAULT);
    if (rc != CU_SUCCESS) {
        *out = NULL;
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "cudaHostAlloc(%zu bytes): %s (error %d)", bytes,
                          cu_err(rt, rc), rc);
    }
    return STOKE_OK;
}

void stoke_cudart_host_free(stoke_cudart *rt, void *p)
{
    if (p)
        rt->free_host(p);
}

stoke_status stoke_cudart_malloc(stoke_cudart *rt, size_t bytes, void **out)
{
    *out = NULL;
    int rc = rt->malloc(out, bytes);
    if (rc != CU_SUCCESS) {
        *out = NULL;
        return cu_fail(rt, "cudaMalloc", rc);
    }
    return STOKE_OK;
}

void stoke_cudart_free(stoke_cudart *rt, void *p)
{
    if (p)
        rt->free(p);
}

stoke_status stoke_cudart_stream_create(stoke_cudart *rt, stoke_gpu_stream *out)
{
    *out = NULL;
    CU_CALL(rt, "cudaStreamCreateWithFlags",
            rt->stream_create_with_flags(out, CU_STREAM_NON_BLOCKING));
}

void stoke_cudart_stream_destroy(stoke_cudart *rt, stoke_gpu_stream s)
{
    if (s)
        rt->stream_destroy(s);
}

stoke_status stoke_cudart_event_create(stoke_cudart *rt, stoke_gpu_event *out)
{
    *out = NULL;
    CU_CALL(rt, "cudaEventCreateWithFlags",
            rt->event_create_with_flags(out, CU_EVENT_DISABLE_TIMING));
}

void stoke_cudart_event_destroy(stoke_cudart *rt, stoke_gpu_event e)
{
    if (e)
        rt->event_destroy(e);
}

stoke_status stoke_cudart_event_record(stoke_cudart *rt, stoke_gpu_event e, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaEventRecord", rt->event_record(e, s));
}

stoke_status stoke_cudart_event_sync(stoke_cudart *rt, stoke_gpu_event e)
{
    CU_CALL(rt, "cudaEventSynchronize", rt->event_synchronize(e));
}

stoke_status stoke_cudart_stream_wait(stoke_cudart *rt, stoke_gpu_stream s, stoke_gpu_event e)
{
    CU_CALL(rt, "cudaStreamWaitEvent", rt->stream_wait_event(s, e, 0));
}

stoke_status stoke_cudart_copy_to_device_async(stoke_cudart *rt, void *dst, const void *src,
                                               size_t bytes, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaMemcpyAsync", rt->memcpy_async(dst, src, bytes, CU_MEMCPY_HOST_TO_DEVICE, s));
}

/* ---- the CUDA backend's ---- */

stoke_status stoke_cudart_check_compute_api(const stoke_cudart *rt)
{
    stoke_status st = stoke_cudart_check_device_api(rt);
    if (st != STOKE_OK)
        return st;
    if (!rt->memset_async || !rt->stream_synchronize || !rt->mem_get_info || !rt->get_last_error ||
        !rt->event_elapsed_time)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "the CUDA runtime lacks cudaMemsetAsync, cudaStreamSynchronize, "
                          "cudaMemGetInfo, cudaGetLastError or cudaEventElapsedTime");
    return STOKE_OK;
}

stoke_status stoke_cudart_copy_to_host_async(stoke_cudart *rt, void *dst, const void *src,
                                             size_t bytes, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaMemcpyAsync", rt->memcpy_async(dst, src, bytes, CU_MEMCPY_DEVICE_TO_HOST, s));
}

stoke_status stoke_cudart_copy_on_device_async(stoke_cudart *rt, void *dst, const void *src,
                                               size_t bytes, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaMemcpyAsync",
            rt->memcpy_async(dst, src, bytes, CU_MEMCPY_DEVICE_TO_DEVICE, s));
}

stoke_status stoke_cudart_memset_async(stoke_cudart *rt, void *dst, int value, size_t bytes,
                                       stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaMemsetAsync", rt->memset_async(dst, value, bytes, s));
}

stoke_status stoke_cudart_stream_sync(stoke_cudart *rt, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaStreamSynchronize", rt->stream_synchronize(s));
}

stoke_status stoke_cudart_mem_info(stoke_cudart *rt, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    CU_CALL(rt, "cudaMemGetInfo", rt->mem_get_info(free_bytes, total_bytes));
}

stoke_status stoke_cudart_device_cc(stoke_cudart *rt, int dev, int *major, int *minor)
{
    *major = *minor = 0;
    int rc = rt->device_get_attribute(major, CU_ATTR_COMPUTE_CAPABILITY_MAJOR, dev);
    if (rc == CU_SUCCESS)
        rc = rt->device_get_attribute(minor, CU_ATTR_COMPUTE_CAPABILITY_MINOR, dev);
    if (rc != CU_SUCCESS)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "cudaDeviceGetAttribute(device %d): %s", dev,
                          cu_err(rt, rc));
    return STOKE_OK;
}

stoke_status stoke_cudart_last_error(stoke_cudart *rt, const char *what)
{
    int rc = rt->get_last_error();
    return rc == CU_SUCCESS ? STOKE_OK : cu_fail(rt, what, rc);
}

stoke_status stoke_cudart_timing_event_create(stoke_cudart *rt, stoke_gpu_event *out)
{
    *out = NULL;
    CU_CALL(rt, "cudaEventCreateWithFlags", rt->event_create_with_flags(out, CU_EVENT_DEFAULT));
}

stoke_status stoke_cudart_event_done(stoke_cudart *rt, stoke_gpu_event e, bool *done)
{
    int rc = rt->event_query(e);
    *done = rc == CU_SUCCESS;
    return rc == CU_SUCCESS || rc == CU_ERROR_NOT_READY ? STOKE_OK
                                                        : cu_fail(rt, "cudaEventQuery", rc);
}

stoke_status stoke_cudart_event_elapsed(stoke_cudart *rt, stoke_gpu_event a, stoke_gpu_event b,
                                        double *ms)
{
    float f = 0;
    int rc = rt->event_elapsed_time(&f, a, b);
    *ms = rc == CU_SUCCESS ? (double)f : 0;
    return rc == CU_SUCCESS ? STOKE_OK : cu_fail(rt, "cudaEventElapsedTime", rc);
}

stoke_status stoke_cudart_launch_host_func(stoke_cudart *rt, stoke_gpu_stream s, void (*fn)(void *),
                                           void *user)
{
    if (!rt->launch_host_func)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "the CUDA runtime lacks cudaLaunchHostFunc");
    CU_CALL(rt, "cudaLaunchHostFunc", rt->launch_host_func(s, fn, user));
}

stoke_status stoke_cudart_check_graph_api(const stoke_cudart *rt)
{
    if (!rt->stream_begin_capture || !rt->stream_end_capture || !rt->graph_instantiate ||
        !rt->graph_launch || !rt->graph_exec_destroy || !rt->graph_destroy)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "the CUDA runtime lacks the graph functions");
    return STOKE_OK;
}

stoke_status stoke_cudart_capture_begin(stoke_cudart *rt, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaStreamBeginCapture", rt->stream_begin_capture(s, CU_CAPTURE_MODE_GLOBAL));
}

stoke_status stoke_cudart_capture_end(stoke_cudart *rt, stoke_gpu_stream s, stoke_gpu_graph *out)
{
    *out = NULL;
    void *g = NULL;
    int rc = rt->stream_end_capture(s, &g);
    if (rc != CU_SUCCESS) {
        if (g)
            rt->graph_destroy(g);
        return cu_fail(rt, "cudaStreamEndCapture", rc);
    }
    void *exec = NULL;
    rc = rt->graph_instantiate(&exec, g, 0);
    rt->graph_destroy(g); /* the instantiated graph outlives its template */
    if (rc != CU_SUCCESS)
        return cu_fail(rt, "cudaGraphInstantiate", rc);
    *out = exec;
    return STOKE_OK;
}

stoke_status stoke_cudart_graph_launch(stoke_cudart *rt, stoke_gpu_graph g, stoke_gpu_stream s)
{
    CU_CALL(rt, "cudaGraphLaunch", rt->graph_launch(g, s));
}

void stoke_cudart_graph_free(stoke_cudart *rt, stoke_gpu_graph g)
{
    if (g)
        rt->graph_exec_destroy(g);
}
