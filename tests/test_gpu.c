/* test_gpu.c - the NVML and CUDA runtime driver tables, against the test doubles in
 * tests/fake/ and (where present) the machine's real libraries. Each scenario runs in
 * a child process because a test double loads its scenario once. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "gpu_case.h"
#include "hw/gpu_impl.h"

/* The cases end with _exit, which skips LeakSanitizer's check at exit: ask for it here,
 * in the ASan build, so data the doubles own (queued work, graphs) is seen freed. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static void no_leaks(void) { CHECK_INT_EQ(__lsan_do_recoverable_leak_check(), 0); }
#else
static void no_leaks(void) {}
#endif

/* Layouts from shared/reference/gpu-abi.md (measured there with gcc). */
_Static_assert(sizeof(nv_pci_info) == 68, "nvmlPciInfo_t is 68 bytes");
_Static_assert(offsetof(nv_pci_info, bus_id) == 36, "busId at 36");
_Static_assert(sizeof(nv_memory) == 24, "nvmlMemory_t is 24 bytes");
_Static_assert(sizeof(nv_utilization) == 8, "nvmlUtilization_t is 8 bytes");
_Static_assert(sizeof(nv_process_info) == 24, "nvmlProcessInfo_t is 24 bytes");
_Static_assert(offsetof(nv_process_info, used_gpu_memory) == 8, "usedGpuMemory at 8");

static const char *two_gpus =
    "driver 550.54.15\n"
    "cuda 12040\n"
    "device name=\"NVIDIA H100 PCIe\" uuid=GPU-aaaa bus=00000000:3B:00.0 memory=85899345920 "
    "cc=9.0 sm=114 power_limit=350000 max_sm_clock=1755 pcie_gen=5 pcie_width=16\n"
    "sample util=11 mem_util=3 mem_used=2500000000 power=172000 temp=45 sm_clock=1755 "
    "throttle=0x1 pcie_rx=1200 pcie_tx=300\n"
    "sample util=97 mem_used=60000000000 temp=80 throttle=0x24\n"
    "proc pid=self mem=1000000000\n"
    "proc pid=4242\n"
    "# a device that reports little: no power limit, clocks or PCIe\n"
    "device name=\"Tesla V100\" bus=00000000:86:00.0 memory=17179869184 cc=7.0\n";

static void write_scenario(const char *text)
{
    char path[] = "/tmp/stoke-test-gpu-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    setenv("STOKE_FAKE_GPU_SCENARIO", path, 1);
    /* The doubles read the file when first asked; unlinking afterwards would race, so
     * the file is removed when the case's process ends (see run_case). */
}

static void case_missing_library(void)
{
    setenv("STOKE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    stoke_nvml *n = (stoke_nvml *)1;
    CHECK_INT_EQ(stoke_nvml_open(&n), STOKE_ERR_UNAVAILABLE);
    CHECK(n == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1");
    stoke_nvml_close(NULL);

    unsetenv("STOKE_NVML_LIBRARY");
    void *real = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!real) { /* the usual case here: no driver installed */
        CHECK_INT_EQ(stoke_nvml_open(&n), STOKE_ERR_UNAVAILABLE);
        CHECK_STR_EQ(stoke_last_error(), "libnvidia-ml.so.1 not found");
    } else {
        fprintf(stderr, "note: a real libnvidia-ml.so.1 is installed; not checking its absence\n");
        dlclose(real);
    }
}

static void case_init_error(void)
{
    write_scenario("init_error 9\n");
    setenv("STOKE_NVML_LIBRARY", FAKE_NVML, 1);
    stoke_nvml *n = NULL;
    CHECK_INT_EQ(stoke_nvml_open(&n), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_EQ(stoke_last_error(), "nvmlInit_v2 failed: Driver Not Loaded");
}

static void case_no_devices(void)
{
    write_scenario("driver 550.54.15\n");
    setenv("STOKE_NVML_LIBRARY", FAKE_NVML, 1);
    stoke_nvml *n = NULL;
    CHECK_INT_EQ(stoke_nvml_open(&n), STOKE_OK);
    CHECK_INT_EQ(stoke_nvml_device_count(n), 0);
    CHECK_STR_EQ(stoke_nvml_driver_version(n), "550.54.15");
    CHECK_INT_EQ(stoke_nvml_cuda_driver_version(n), 0);
    stoke_gpu_sample s;
    CHECK_INT_EQ(stoke_nvml_sample(n, 0, &s), STOKE_ERR_ARG);
    stoke_nvml_close(n);

    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    stoke_cudart *rt = NULL;
    CHECK_INT_EQ(stoke_cudart_open(&rt), STOKE_OK);
    int count = -1;
    CHECK_INT_EQ(stoke_cudart_device_count(rt, &count), STOKE_ERR_UNAVAILABLE);
    CHECK_INT_EQ(count, 0);
    CHECK_STR_CONTAINS(stoke_last_error(), "no CUDA-capable device is detected");
    stoke_cudart_close(rt);
}

static void case_two_devices(const char *library)
{
    write_scenario(two_gpus);
    setenv("STOKE_NVML_LIBRARY", library, 1);
    stoke_nvml *n = NULL;
    CHECK_INT_EQ(stoke_nvml_open(&n), STOKE_OK);
    if (!n)
        return;
    CHECK_INT_EQ(stoke_nvml_device_count(n), 2);
    CHECK_STR_EQ(stoke_nvml_driver_version(n), "550.54.15");
    CHECK_INT_EQ(stoke_nvml_cuda_driver_version(n), 12040);

    stoke_gpu_info g;
    CHECK_INT_EQ(stoke_nvml_device_info(n, 0, &g), STOKE_OK);
    CHECK_STR_EQ(g.name, "NVIDIA H100 PCIe");
    CHECK_STR_EQ(g.uuid, "GPU-aaaa");
    CHECK_STR_EQ(g.pci_bus_id, "00000000:3B:00.0");
    CHECK_INT_EQ(g.memory_total_bytes, 85899345920LL);
    CHECK_INT_EQ(g.cc_major, 9);
    CHECK_INT_EQ(g.cc_minor, 0);
    CHECK_INT_EQ(g.power_limit_mw, 350000);
    CHECK_INT_EQ(g.max_sm_clock_mhz, 1755);
    CHECK_INT_EQ(g.pcie_gen, 5);
    CHECK_INT_EQ(g.pcie_width, 16);
    unsigned all = STOKE_GPU_HAS_MEMORY | STOKE_GPU_HAS_CC | STOKE_GPU_HAS_POWER_LIMIT |
                   STOKE_GPU_HAS_MAX_SM_CLOCK | STOKE_GPU_HAS_PCIE | STOKE_GPU_HAS_PCI_BUS_ID;
    CHECK_INT_EQ(g.valid, all); /* SM count comes from the runtime, not NVML */

    CHECK_INT_EQ(stoke_nvml_device_info(n, 1, &g), STOKE_OK);
    CHECK_STR_EQ(g.name, "Tesla V100");
    CHECK_STR_EQ(g.uuid, "");
    CHECK_INT_EQ(g.valid, STOKE_GPU_HAS_MEMORY | STOKE_GPU_HAS_CC | STOKE_GPU_HAS_PCI_BUS_ID);

    /* Samples replay in order, then hold at the last row. */
    stoke_gpu_sample s;
    CHECK_INT_EQ(stoke_nvml_sample(n, 0, &s), STOKE_OK);
    CHECK_INT_EQ(s.util_gpu_pct, 11);
    CHECK_INT_EQ(s.util_mem_pct, 3);
    CHECK_INT_EQ(s.mem_used_bytes, 2500000000LL);
    CHECK_INT_EQ(s.mem_total_bytes, 85899345920LL);
    CHECK_INT_EQ(s.power_mw, 172000);
    CHECK_INT_EQ(s.power_limit_mw, 350000);
    CHECK_INT_EQ(s.temp_c, 45);
    CHECK_INT_EQ(s.sm_clock_mhz, 1755);
    CHECK_INT_EQ(s.throttle_reasons, STOKE_THROTTLE_GPU_IDLE);
    CHECK_INT_EQ(s.pcie_rx_kBps, 1200);
    CHECK_INT_EQ(s.pcie_tx_kBps, 300);
    CHECK_INT_EQ(s.valid, 0x1ff);
    for (int k = 0; k < 2; k++) {
        CHECK_INT_EQ(stoke_nvml_sample(n, 0, &s), STOKE_OK);
        CHECK_INT_EQ(s.util_gpu_pct, 97);
        CHECK_INT_EQ(s.mem_used_bytes, 60000000000LL);
        CHECK_INT_EQ(s.throttle_reasons, STOKE_THROTTLE_SW_POWER_CAP | STOKE_THROTTLE_SW_THERMAL);
        /* The second row has no power, clock or PCIe: absent, not zero. */
        CHECK(!(s.valid &
                (STOKE_GS_POWER | STOKE_GS_SM_CLOCK | STOKE_GS_PCIE_RX | STOKE_GS_PCIE_TX)));
        CHECK(s.valid & STOKE_GS_POWER_LIMIT);
    }
    /* A device with no samples at all reads as nothing but its memory. */
    CHECK_INT_EQ(stoke_nvml_sample(n, 1, &s), STOKE_OK);
    CHECK_INT_EQ(s.valid, STOKE_GS_MEMORY);
    CHECK_INT_EQ(s.mem_used_bytes, 0);

    stoke_gpu_proc procs[8];
    int count = -1;
    CHECK_INT_EQ(stoke_nvml_processes(n, 0, procs, 8, &count), STOKE_OK);
    CHECK_INT_EQ(count, 2);
    CHECK_INT_EQ(procs[0].pid, getpid());
    CHECK(procs[0].used_valid);
    CHECK_INT_EQ(procs[0].used_bytes, 1000000000);
    CHECK_INT_EQ(procs[1].pid, 4242);
    CHECK(!procs[1].used_valid);
    CHECK_INT_EQ(stoke_nvml_processes(n, 0, procs, 1, &count), STOKE_OK);
    CHECK_INT_EQ(count, 1); /* capped by the caller's array */
    CHECK_INT_EQ(stoke_nvml_processes(n, 1, procs, 8, &count), STOKE_OK);
    CHECK_INT_EQ(count, 0);
    stoke_nvml_close(n);

    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    stoke_cudart *rt = NULL;
    CHECK_INT_EQ(stoke_cudart_open(&rt), STOKE_OK);
    if (!rt)
        return;
    CHECK_INT_EQ(stoke_cudart_runtime_version(rt), 13000);
    int devices = 0, sm = 0;
    char bus[32];
    CHECK_INT_EQ(stoke_cudart_device_count(rt, &devices), STOKE_OK);
    CHECK_INT_EQ(devices, 2);
    CHECK_INT_EQ(stoke_cudart_device_sm(rt, 0, &sm, bus, sizeof bus), STOKE_OK);
    CHECK_INT_EQ(sm, 114);
    CHECK_STR_EQ(bus, "0000:3b:00.0");
    CHECK_INT_EQ(stoke_cudart_device_sm(rt, 1, &sm, bus, sizeof bus), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_CONTAINS(stoke_last_error(), "device 1");
    stoke_cudart_close(rt);
}

static void case_nvml_535(void) { case_two_devices(FAKE_NVML_535); }
static void case_nvml(void) { case_two_devices(FAKE_NVML); }

/* The machine's own CUDA runtime, if any: whatever it says, it must say it plainly. */
/* The device API (hw.h) as the loader uses it: pinned and device memory, a copy that
 * lands only once an event recorded after it is waited for, and each failure named by
 * its CUDA call. */
static void case_device_api(void)
{
    write_scenario("device name=\"NVIDIA H100 PCIe\" bus=00000000:3B:00.0 sm=114\n");
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    stoke_cudart *rt = NULL;
    CHECK_INT_EQ(stoke_cudart_open(&rt), STOKE_OK);
    void *fake = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
    CHECK(fake != NULL);
    if (!rt || !fake)
        return;
    int (*kind)(const void *) = (int (*)(const void *))dlsym(fake, "fake_cudart_kind");
    int (*live)(void) = (int (*)(void))dlsym(fake, "fake_cudart_live");
    void (*fail_host)(int) = (void (*)(int))dlsym(fake, "fake_cudart_fail_host_alloc");
    CHECK(kind && live && fail_host);
    if (!kind || !live || !fail_host)
        return;

    CHECK_INT_EQ(stoke_cudart_check_device_api(rt), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_set_device(rt, 1), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_EQ(stoke_last_error(), "cudaSetDevice: invalid device ordinal (error 101)");
    CHECK_INT_EQ(stoke_cudart_set_device(rt, 0), STOKE_OK);

    enum { N = 4096 };
    unsigned char *host = NULL, *dev = NULL;
    CHECK_INT_EQ(stoke_cudart_host_alloc(rt, N, (void **)&host), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_malloc(rt, N, (void **)&dev), STOKE_OK);
    stoke_gpu_stream s = NULL;
    stoke_gpu_event e = NULL;
    CHECK_INT_EQ(stoke_cudart_stream_create(rt, &s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_create(rt, &e), STOKE_OK);
    if (!host || !dev || !s || !e)
        return;
    CHECK_INT_EQ(kind(host), 1);
    CHECK_INT_EQ(kind(dev), 2);
    for (int i = 0; i < N; i++)
        host[i] = (unsigned char)(i * 7 + 1), dev[i] = 0; /* the double's device is host memory */
    CHECK_INT_EQ(stoke_cudart_copy_to_device_async(rt, dev, host, N, s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_record(rt, e, s), STOKE_OK);
    CHECK_INT_EQ(dev[N - 1], 0); /* still in flight */
    CHECK_INT_EQ(stoke_cudart_stream_wait(rt, s, e), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_sync(rt, e), STOKE_OK);
    CHECK(memcmp(dev, host, N) == 0);
    CHECK_INT_EQ(stoke_cudart_copy_to_device_async(rt, dev, host, N, NULL), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_EQ(stoke_last_error(), "cudaMemcpyAsync: invalid argument (error 1)");

    fail_host(1);
    void *p = (void *)1;
    CHECK_INT_EQ(stoke_cudart_host_alloc(rt, 100, &p), STOKE_ERR_UNAVAILABLE);
    CHECK(p == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "cudaHostAlloc(100 bytes): ");
    fail_host(0);

    stoke_cudart_event_destroy(rt, e);
    stoke_cudart_stream_destroy(rt, s);
    stoke_cudart_free(rt, dev);
    stoke_cudart_host_free(rt, host);
    stoke_cudart_event_destroy(rt, NULL);
    stoke_cudart_stream_destroy(rt, NULL);
    stoke_cudart_free(rt, NULL);
    stoke_cudart_host_free(rt, NULL);
    CHECK_INT_EQ(live(), 0);
    dlclose(fake);
    stoke_cudart_close(rt);
}

/* Timing events as the step's phases use them: an event completes when the work queued
 * before it has, the elapsed time needs both completed (the double's first query says
 * "not ready"), and an event without timing cannot be timed. */
static void case_timing_events(void)
{
    write_scenario("device name=\"NVIDIA H100 PCIe\" bus=00000000:3B:00.0 sm=114\n");
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    stoke_cudart *rt = NULL;
    CHECK_INT_EQ(stoke_cudart_open(&rt), STOKE_OK);
    if (!rt)
        return;
    CHECK_INT_EQ(stoke_cudart_check_compute_api(rt), STOKE_OK);
    enum { N = 1 << 20 };
    unsigned char *host = NULL, *dev = NULL;
    stoke_gpu_stream s = NULL;
    stoke_gpu_event a = NULL, b = NULL, plain = NULL;
    CHECK_INT_EQ(stoke_cudart_host_alloc(rt, N, (void **)&host), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_malloc(rt, N, (void **)&dev), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_stream_create(rt, &s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_timing_event_create(rt, &a), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_timing_event_create(rt, &b), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_create(rt, &plain), STOKE_OK);
    if (!host || !dev || !s || !a || !b || !plain)
        return;
    /* the double's clock, set by the test: the elapsed time is exact, not a timing */
    void *fake = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
    void (*set_clock)(double) = NULL;
    if (fake)
        *(void **)&set_clock = dlsym(fake, "fake_cudart_set_clock");
    CHECK(set_clock != NULL);
    if (!set_clock)
        return;
    memset(host, 3, N);
    double ms = -1;
    set_clock(100); /* a completes at its record: nothing is queued before it */
    CHECK_INT_EQ(stoke_cudart_event_record(rt, a, s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_copy_to_device_async(rt, dev, host, N, s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_record(rt, b, s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_elapsed(rt, a, b, &ms), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_EQ(stoke_last_error(), "cudaEventElapsedTime: device not ready (error 600)");
    bool done = true;
    set_clock(130); /* b completes when the queued copy has run */
    CHECK_INT_EQ(stoke_cudart_event_done(rt, b, &done), STOKE_OK);
    CHECK(!done); /* the copy is still queued */
    CHECK_INT_EQ(stoke_cudart_event_done(rt, b, &done), STOKE_OK);
    CHECK(done);
    CHECK_INT_EQ(dev[N - 1], 3);
    CHECK_INT_EQ(stoke_cudart_event_sync(rt, a), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_elapsed(rt, a, b, &ms), STOKE_OK);
    CHECK(ms == 30);
    /* a and b swapped: the device's clock runs backwards from b to a */
    double back = 1;
    CHECK_INT_EQ(stoke_cudart_event_elapsed(rt, b, a, &back), STOKE_OK);
    CHECK(back == -30);
    CHECK_INT_EQ(stoke_cudart_event_record(rt, plain, s), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_sync(rt, plain), STOKE_OK);
    CHECK_INT_EQ(stoke_cudart_event_elapsed(rt, a, plain, &ms), STOKE_ERR_UNAVAILABLE);
    CHECK_STR_EQ(stoke_last_error(), "cudaEventElapsedTime: invalid resource handle (error 400)");
    stoke_cudart_event_destroy(rt, a);
    stoke_cudart_event_destroy(rt, b);
    stoke_cudart_event_destroy(rt, plain);
    stoke_cudart_stream_destroy(rt, s);
    stoke_cudart_free(rt, dev);
    stoke_cudart_host_free(rt, host);
    set_clock(-1);
    dlclose(fake);
    stoke_cudart_close(rt);
}

/* Host functions run in the stream's order; a capture records the stream's work into
 * a graph that runs only when launched, once per launch; and a call a capture does not
 * allow (a wait on the capturing stream, cudaMalloc) fails with 900 and spoils the
 * capture (901 at its end), as the runtime's global mode does. */
static void add_one(void *user) { (*(int *)user)++; }

static void case_capture(void)
{
    write_scenario("device name=\"NVIDIA H100 PCIe\" bus=00000000:3B:00.0 sm=114\n");
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    void *fake = dlopen(FAKE_CUDART, RTLD_NOW);
    CHECK(fake != NULL);
    if (!fake)
        return;
    int (*host_func)(void *, void (*)(void *), void *);
    int (*begin)(void *, int), (*end)(void *, void **), (*capturing)(void *, int *);
    int (*inst)(void **, void *, unsigned long long), (*launch)(void *, void *);
    int (*exec_destroy)(void *), (*graph_destroy)(void *), (*live)(void);
    int (*stream_create)(void **, unsigned), (*stream_sync)(void *), (*stream_destroy)(void *);
    int (*dmalloc)(void **, size_t), (*memset_async)(void *, int, size_t, void *);
    int (*dfree)(void *);
    *(void **)&host_func = dlsym(fake, "cudaLaunchHostFunc");
    *(void **)&begin = dlsym(fake, "cudaStreamBeginCapture");
    *(void **)&end = dlsym(fake, "cudaStreamEndCapture");
    *(void **)&capturing = dlsym(fake, "cudaStreamIsCapturing");
    *(void **)&inst = dlsym(fake, "cudaGraphInstantiate");
    *(void **)&launch = dlsym(fake, "cudaGraphLaunch");
    *(void **)&exec_destroy = dlsym(fake, "cudaGraphExecDestroy");
    *(void **)&graph_destroy = dlsym(fake, "cudaGraphDestroy");
    *(void **)&live = dlsym(fake, "fake_cudart_live");
    *(void **)&stream_create = dlsym(fake, "cudaStreamCreateWithFlags");
    *(void **)&stream_sync = dlsym(fake, "cudaStreamSynchronize");
    *(void **)&stream_destroy = dlsym(fake, "cudaStreamDestroy");
    *(void **)&dmalloc = dlsym(fake, "cudaMalloc");
    *(void **)&memset_async = dlsym(fake, "cudaMemsetAsync");
    *(void **)&dfree = dlsym(fake, "cudaFree");
    CHECK(host_func && begin && end && capturing && inst && launch && exec_destroy &&
          graph_destroy && live && stream_create && stream_sync && stream_destroy && dmalloc &&
          memset_async && dfree);
    if (!host_func || !begin || !end || !capturing || !inst || !launch || !exec_destroy ||
        !graph_destroy || !live || !stream_create || !stream_sync || !stream_destroy || !dmalloc ||
        !memset_async || !dfree)
        return;
    int base = live();
    void *s = NULL, *graph = NULL, *exec = NULL;
    unsigned char *dev = NULL;
    int count = 0, status = -1;
    CHECK_INT_EQ(stream_create(&s, 1), 0);
    CHECK_INT_EQ(dmalloc((void **)&dev, 64), 0);
    if (!s || !dev)
        return;
    /* in order: the fill, then the function */
    CHECK_INT_EQ(memset_async(dev, 7, 64, s), 0);
    CHECK_INT_EQ(host_func(s, add_one, &count), 0);
    CHECK_INT_EQ(count, 0); /* queued, not run */
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(count, 1);
    CHECK_INT_EQ(dev[63], 7);

    CHECK_INT_EQ(begin(s, 0), 0);
    CHECK_INT_EQ(capturing(s, &status), 0);
    CHECK_INT_EQ(status, 1);
    CHECK_INT_EQ(begin(s, 0), 1); /* already capturing */
    CHECK_INT_EQ(memset_async(dev, 9, 64, s), 0);
    CHECK_INT_EQ(host_func(s, add_one, &count), 0);
    CHECK_INT_EQ(end(s, &graph), 0);
    CHECK(graph != NULL);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(count, 1); /* recorded, not run */
    CHECK_INT_EQ(dev[0], 7);
    CHECK_INT_EQ(inst(&exec, graph, 0), 0);
    for (int k = 0; k < 3; k++)
        CHECK_INT_EQ(launch(exec, s), 0);
    CHECK_INT_EQ(count, 1);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(count, 4);
    CHECK_INT_EQ(dev[0], 9);
    CHECK_INT_EQ(exec_destroy(exec), 0);
    CHECK_INT_EQ(graph_destroy(graph), 0);

    /* forbidden inside a capture: waiting for the stream, allocating */
    void *p = NULL;
    graph = (void *)1;
    CHECK_INT_EQ(begin(s, 0), 0);
    CHECK_INT_EQ(stream_sync(s), 900);
    CHECK_INT_EQ(capturing(s, &status), 0);
    CHECK_INT_EQ(status, 2);
    CHECK_INT_EQ(end(s, &graph), 901);
    CHECK(graph == NULL);
    CHECK_INT_EQ(begin(s, 0), 0);
    CHECK_INT_EQ(dmalloc(&p, 16), 900);
    CHECK(p == NULL);
    CHECK_INT_EQ(end(s, &graph), 901);
    CHECK_INT_EQ(capturing(s, &status), 0);
    CHECK_INT_EQ(status, 0);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(dfree(dev), 0);
    CHECK_INT_EQ(stream_destroy(s), 0);
    CHECK_INT_EQ(live(), base);
    dlclose(fake);
}

/* An owned host function's data (fake_cudart_launch_owned, what the cuBLAS and cuDNN
 * doubles queue their work with): freed after it runs from a stream, kept by a graph,
 * copied by an instantiation, which keeps its copy across launches. A leak or a use
 * after free here is what the ASan build reports. */
typedef struct owned_data {
    int *count;
    int runs; /* of this copy */
} owned_data;

static int last_runs;

static void owned_run(void *user)
{
    owned_data *d = user;
    (*d->count)++;
    last_runs = ++d->runs;
}

static owned_data *owned(int *count)
{
    owned_data *d = malloc(sizeof *d);
    *d = (owned_data){count, 0};
    return d;
}

static void case_owned(void)
{
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    void *fake = dlopen(FAKE_CUDART, RTLD_NOW);
    CHECK(fake != NULL);
    if (!fake)
        return;
    int (*launch_owned)(void *, void (*)(void *), void *, size_t);
    int (*begin)(void *, int), (*end)(void *, void **);
    int (*inst)(void **, void *, unsigned long long), (*launch)(void *, void *);
    int (*exec_destroy)(void *), (*graph_destroy)(void *), (*live)(void);
    int (*stream_create)(void **, unsigned), (*stream_sync)(void *), (*stream_destroy)(void *);
    *(void **)&launch_owned = dlsym(fake, "fake_cudart_launch_owned");
    *(void **)&begin = dlsym(fake, "cudaStreamBeginCapture");
    *(void **)&end = dlsym(fake, "cudaStreamEndCapture");
    *(void **)&inst = dlsym(fake, "cudaGraphInstantiate");
    *(void **)&launch = dlsym(fake, "cudaGraphLaunch");
    *(void **)&exec_destroy = dlsym(fake, "cudaGraphExecDestroy");
    *(void **)&graph_destroy = dlsym(fake, "cudaGraphDestroy");
    *(void **)&live = dlsym(fake, "fake_cudart_live");
    *(void **)&stream_create = dlsym(fake, "cudaStreamCreateWithFlags");
    *(void **)&stream_sync = dlsym(fake, "cudaStreamSynchronize");
    *(void **)&stream_destroy = dlsym(fake, "cudaStreamDestroy");
    if (!launch_owned || !begin || !end || !inst || !launch || !exec_destroy || !graph_destroy ||
        !live || !stream_create || !stream_sync || !stream_destroy) {
        CHECK(0);
        return;
    }
    int base = live(), count = 0;
    void *s = NULL, *graph = NULL, *exec = NULL, *exec2 = NULL;
    CHECK_INT_EQ(stream_create(&s, 1), 0);
    if (!s)
        return;
    CHECK_INT_EQ(launch_owned(s, owned_run, owned(&count), sizeof(owned_data)), 0);
    CHECK_INT_EQ(count, 0);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(count, 1);
    /* refused: the data is freed all the same */
    CHECK_INT_EQ(launch_owned(NULL, owned_run, owned(&count), sizeof(owned_data)), 1);

    CHECK_INT_EQ(begin(s, 0), 0);
    CHECK_INT_EQ(launch_owned(s, owned_run, owned(&count), sizeof(owned_data)), 0);
    CHECK_INT_EQ(end(s, &graph), 0);
    CHECK_INT_EQ(inst(&exec, graph, 0), 0);
    CHECK_INT_EQ(inst(&exec2, graph, 0), 0);
    CHECK_INT_EQ(graph_destroy(graph), 0);
    CHECK_INT_EQ(launch(exec, s), 0);
    CHECK_INT_EQ(launch(exec, s), 0);
    CHECK_INT_EQ(count, 1);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(count, 3);
    CHECK_INT_EQ(last_runs, 2); /* the exec's copy, kept between launches */
    CHECK_INT_EQ(launch(exec2, s), 0);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(last_runs, 1); /* each instantiation has its own */
    /* destroyed while launched: freed once the stream has run it */
    CHECK_INT_EQ(launch(exec, s), 0);
    CHECK_INT_EQ(exec_destroy(exec), 0);
    CHECK_INT_EQ(stream_sync(s), 0);
    CHECK_INT_EQ(count, 5);
    CHECK_INT_EQ(last_runs, 3);
    CHECK_INT_EQ(exec_destroy(exec2), 0);
    /* a graph never instantiated, and a stream destroyed with owned work queued */
    CHECK_INT_EQ(begin(s, 0), 0);
    CHECK_INT_EQ(launch_owned(s, owned_run, owned(&count), sizeof(owned_data)), 0);
    CHECK_INT_EQ(end(s, &graph), 0);
    CHECK_INT_EQ(graph_destroy(graph), 0);
    CHECK_INT_EQ(launch_owned(s, owned_run, owned(&count), sizeof(owned_data)), 0);
    CHECK_INT_EQ(stream_destroy(s), 0);
    CHECK_INT_EQ(count, 6);
    CHECK_INT_EQ(live(), base);
    dlclose(fake);
    no_leaks();
}

static void case_real_runtime(void)
{
    unsetenv("STOKE_CUDART_LIBRARY");
    stoke_cudart *rt = NULL;
    stoke_status s = stoke_cudart_open(&rt);
    if (s != STOKE_OK) {
        CHECK_INT_EQ(s, STOKE_ERR_UNAVAILABLE);
        CHECK_STR_CONTAINS(stoke_last_error(), "CUDA runtime not found");
        return;
    }
    int n = -1;
    s = stoke_cudart_device_count(rt, &n);
    CHECK(s == STOKE_OK || (s == STOKE_ERR_UNAVAILABLE && n == 0 && *stoke_last_error()));
    fprintf(stderr, "note: real CUDA runtime %d: %s\n", stoke_cudart_runtime_version(rt),
            s == STOKE_OK ? "devices found" : stoke_last_error());
    stoke_cudart_close(rt);
}

int main(void)
{
    /* Said in the output so that a pass is never read as a GPU result. */
    printf("GPU driver tables against the test doubles (tests/fake): no GPU is used\n");
    gpu_case("missing_library", case_missing_library);
    gpu_case("init_error", case_init_error);
    gpu_case("no_devices", case_no_devices);
    gpu_case("two_devices", case_nvml);
    gpu_case("two_devices_535_stride", case_nvml_535);
    gpu_case("device_api", case_device_api);
    gpu_case("timing_events", case_timing_events);
    gpu_case("capture", case_capture);
    gpu_case("owned_host_functions", case_owned);
    gpu_case("real_runtime", case_real_runtime);
    return CHECK_DONE();
}
