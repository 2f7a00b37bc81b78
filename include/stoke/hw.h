/* hw.h - what the machine has: CPU, memory, the storage under a path, and NVIDIA GPUs
 * (through NVML and the CUDA runtime, both loaded at run time with dlopen). */
#ifndef STOKE_HW_H
#define STOKE_HW_H

#include <stdbool.h>
#include <stdint.h>

#include "stoke/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU ---------------------------------------------------------------------- */

/* SIMD feature bits, as reported by the kernel's /proc/cpuinfo flags. */
enum {
    STOKE_SIMD_SSE42 = 1u << 0,
    STOKE_SIMD_AVX = 1u << 1,
    STOKE_SIMD_AVX2 = 1u << 2,
    STOKE_SIMD_FMA = 1u << 3,
    STOKE_SIMD_AVX512F = 1u << 4,
    STOKE_SIMD_AVX512BW = 1u << 5,
    STOKE_SIMD_AVX512VL = 1u << 6,
    STOKE_SIMD_AVX512_VNNI = 1u << 7,
    STOKE_SIMD_AVX512_BF16 = 1u << 8,
    STOKE_SIMD_AVX512_FP16 = 1u << 9,
    STOKE_SIMD_AMX_TILE = 1u << 10,
    STOKE_SIMD_AMX_BF16 = 1u << 11,
    STOKE_SIMD_AMX_INT8 = 1u << 12,
    STOKE_SIMD_F16C = 1u << 13,
};

typedef struct stoke_cpu_info {
    char model[128];       /* "model name" of the first CPU, "" if unknown */
    int logical_cpus;      /* online logical CPUs */
    int usable_cpus;       /* CPUs this process may run on (sched_getaffinity) */
    int physical_cores;    /* distinct (package, core id) pairs among online CPUs */
    int sockets;           /* distinct physical package ids */
    int numa_nodes;        /* online NUMA nodes, 1 if the kernel shows none */
    uint64_t l1d_bytes;    /* per-core L1 data cache; 0 = unknown */
    uint64_t l2_bytes;     /* per-core (or per-cluster) L2; 0 = unknown */
    uint64_t l3_bytes;     /* per-package L3; 0 = unknown */
    uint32_t simd;         /* STOKE_SIMD_* bits, less those the ISA cap hides */
    double max_mhz;        /* highest clock the kernel reports; 0 = unknown */
    stoke_cpu_isa isa_cap; /* the instruction-set cap applied; STOKE_CPU_ISA_ALL: none */
    uint32_t simd_hidden;  /* STOKE_SIMD_* bits the CPU has but the cap hides */
    char vendor[16];       /* "vendor_id": "GenuineIntel", "AuthenticAMD"; "" if unknown */
    int family, model_number, stepping; /* as the kernel shows them (extended family and
                                           model folded in: AMD's 0x1A is 26); -1 if unknown */

    double quota_cpus;    /* the tightest cgroup CPU quota (quota / period) of this
                             process's cgroup or an ancestor, in CPUs (1.5 = 150 ms
                             each 100 ms); 0 = none */
    char quota_file[640]; /* the cgroup file that quota came from, without the root
                             ("/sys/fs/cgroup/user.slice/cpu.max"); "" = none */
    int available_cpus;   /* the CPUs stoke may keep busy: usable_cpus, less what the
                             quota allows (min(usable, ceil(quota))), at least 1 */
} stoke_cpu_info;

/* The CPUs stoke may keep busy: info->available_cpus, or usable_cpus when that is
 * unset (0: an info filled by hand); at least 1. Can't fail. */
static inline int stoke_cpu_available(const stoke_cpu_info *info)
{
    int n = info->available_cpus > 0 ? info->available_cpus : info->usable_cpus;
    return n > 0 ? n : 1;
}

/* Fills *out from /proc/cpuinfo, /sys/devices/system/{cpu,node} and the CPU quota of
 * /proc/self/cgroup's cgroup and its ancestors (v2 cpu.max, v1 cpu.cfs_quota_us over
 * cpu.cfs_period_us; a malformed file is no quota). `root` is a prefix prepended to
 * those paths ("" or NULL for the real system) so tests can feed
 * a recorded tree. Missing files leave their fields 0/"". On the real system the
 * process's instruction-set cap (stoke_max_cpu_isa, STOKE_MAX_CPU_ISA) is applied with
 * stoke_cpu_apply_isa_cap, since the cap is part of the machine stoke sees; a recorded
 * tree describes another machine and stays uncapped (isa_cap STOKE_CPU_ISA_ALL) unless
 * the caller applies a cap to it. Returns STOKE_ERR_IO only if /proc/cpuinfo itself
 * cannot be read, STOKE_ERR_ARG (the cap's message) for a bad STOKE_MAX_CPU_ISA. */
stoke_status stoke_cpu_probe(const char *root, stoke_cpu_info *out);

/* Hides from info->simd the features `cap` does not allow (oneDNN's levels, core.h:
 * e.g. avx2 hides avx512f and above, sse41 even sse4_2), adding them to
 * info->simd_hidden, and records the cap in info->isa_cap (a second cap can only hide
 * more; the lower one is kept). STOKE_CPU_ISA_ALL changes nothing. Can't fail. */
void stoke_cpu_apply_isa_cap(stoke_cpu_info *info, stoke_cpu_isa cap);

/* The CPU's generation ("AMD Zen 5", "Intel Sapphire Rapids") from its vendor id,
 * family, model and stepping (stepping only tells Skylake-SP, Cascade Lake and Cooper
 * Lake apart; -1 if unknown), after the Linux kernel's own tables; "unknown" for any
 * combination not on file, never a guess from the nearest entry. Pure; never NULL. */
const char *stoke_cpu_generation(const char *vendor, int family, int model, int stepping);

/* Space-separated names of the bits in `simd` ("avx2 fma avx512f ..."). */
const char *stoke_simd_names(uint32_t simd, char *buf, size_t size);

/* ---- What other processes take ------------------------------------------------
 * Two snapshots of the kernel's CPU counters some time apart tell how many CPUs the
 * whole machine kept busy in between, how many this process did, and so how many the
 * other processes did. */

/* One reading of /proc/stat's aggregate "cpu" line, its run queue and this process's
 * own CPU time. Counters are in clock ticks (USER_HZ), summed over all CPUs. */
typedef struct stoke_cpu_snapshot {
    bool valid; /* the "cpu" line was read */
    uint64_t user, nice, system, idle, iowait, irq, softirq, steal;
    int ncpu;          /* "cpuN" lines: the online CPUs the counters add up */
    int procs_running; /* runnable tasks right then (the reader included); -1 unknown */
    bool own_valid;    /* own_ticks was read */
    double own_ticks;  /* this process's user + system time, clock ticks */
} stoke_cpu_snapshot;

/* What happened between two snapshots, as CPUs kept busy on average (2.0 = two CPUs
 * flat out). busy counts user, nice, system, irq and softirq time; idle, iowait and
 * steal are not busy. */
typedef struct stoke_cpu_load {
    bool valid;         /* both snapshots were valid and the counters advanced */
    int ncpu;           /* CPUs of the second snapshot */
    double seconds;     /* the interval, from the counters (ticks / ncpu / USER_HZ) */
    double busy_cpus;   /* the whole machine's */
    double own_cpus;    /* this process's (0 when its time was not read) */
    double others_cpus; /* busy_cpus - own_cpus, at least 0 */
    double steal_pct;   /* % of all CPU time a hypervisor gave to other guests */
    int run_queue;      /* procs_running of the second snapshot; -1 unknown */
} stoke_cpu_load;

/* Reads <root>/proc/stat and this process's CPU time: <root>/proc/self/stat's utime +
 * stime when root is a recorded tree, getrusage on the real system (root NULL or "").
 * STOKE_ERR_IO if /proc/stat cannot be read, STOKE_ERR_FORMAT if it has no "cpu"
 * line; a missing own time or procs_running only leaves its field unknown. */
stoke_status stoke_cpu_snapshot_read(const char *root, stoke_cpu_snapshot *out);

/* The load between snapshot a and the later b into *out. Pure. Returns out->valid:
 * false (all figures 0, run_queue -1) when either is invalid or the counters did not
 * advance (or went backwards: a different machine or a counter reset). */
bool stoke_cpu_load_between(const stoke_cpu_snapshot *a, const stoke_cpu_snapshot *b,
                            stoke_cpu_load *out);

/* Two live snapshots `seconds` apart (the calling thread sleeps in between; 0.2 s is
 * enough to see whole cores taken). Errors as stoke_cpu_snapshot_read; out->valid is
 * false when the counters did not advance. */
stoke_status stoke_cpu_load_sample(double seconds, stoke_cpu_load *out);

typedef struct stoke_mem_info {
    uint64_t total_bytes;             /* MemTotal */
    uint64_t available_bytes;         /* what this process can still use: MemAvailable, or the
                                 headroom under a cgroup memory limit when smaller;
                                 0 = unknown */
    uint64_t meminfo_available_bytes; /* MemAvailable alone */
    uint64_t cgroup_limit_bytes;      /* the tightest cgroup memory limit (this process's
                                    cgroup or an ancestor), 0 = none */
    uint64_t cgroup_used_bytes;       /* that cgroup's usage */
} stoke_mem_info;

/* Reads /proc/meminfo and the memory limits of /proc/self/cgroup (v1 or v2), all
 * under `root` as above. */
stoke_status stoke_mem_probe(const char *root, stoke_mem_info *out);

/* ---- The BLAS library ----------------------------------------------------------- */

/* The OpenBLAS linked into this process, as it describes itself. OpenBLAS chooses its
 * kernels (its "core") once, when it is loaded: in DYNAMIC_ARCH builds such as
 * Debian's by the CPU's family and model, unless OPENBLAS_CORETYPE names one. Other
 * programs that load the same library in the same environment (numpy, Debian's
 * torch) get the same core. stoke_openblas_check (tune.h) judges it. */
typedef struct stoke_openblas_info {
    bool valid;       /* false when the library reported no core */
    char core[32];    /* openblas_get_corename(): "Haswell", "SkylakeX", "Prescott", ... */
    char config[192]; /* openblas_get_config(): version and build options */
} stoke_openblas_info;

/* Asks the linked OpenBLAS for its core and build configuration. Can't fail; an
 * empty answer leaves valid false. */
void stoke_openblas_probe(stoke_openblas_info *out);

/* ---- Storage under a path ----------------------------------------------------- */

typedef enum stoke_disk_kind {
    STOKE_DISK_UNKNOWN = 0,
    STOKE_DISK_MEMORY,     /* tmpfs / ramfs: the data already lives in RAM */
    STOKE_DISK_SSD,        /* block device with queue/rotational = 0 */
    STOKE_DISK_ROTATIONAL, /* block device with queue/rotational = 1 */
    STOKE_DISK_NETWORK,    /* nfs, cifs, sshfs, ... */
    STOKE_DISK_OVERLAY,    /* overlay or other virtual fs whose backing disk is hidden */
} stoke_disk_kind;

typedef struct stoke_disk_info {
    char mount_point[512]; /* longest mount point containing the path */
    char fs_type[32];      /* "ext4", "tmpfs", "nfs4", ... */
    char device[128];      /* mount source, e.g. "/dev/nvme0n1p2" */
    stoke_disk_kind kind;
    char reason[160]; /* how the kind was decided, for the user */
} stoke_disk_info;

/* Finds the filesystem under `path` (which must exist) from /proc/self/mountinfo and
 * classifies it. STOKE_ERR_NOTFOUND if the path does not exist. */
stoke_status stoke_disk_probe(const char *path, stoke_disk_info *out);

const char *stoke_disk_kind_name(stoke_disk_kind k); /* "ssd", "rotational", ... */

/* ---- NVIDIA GPUs ------------------------------------------------------------------
 * Every reading carries a valid bit: a reading a device does not support is absent,
 * never zero. */

enum {
    STOKE_GPU_HAS_MEMORY = 1u << 0,
    STOKE_GPU_HAS_CC = 1u << 1,
    STOKE_GPU_HAS_SM_COUNT = 1u << 2,
    STOKE_GPU_HAS_POWER_LIMIT = 1u << 3,
    STOKE_GPU_HAS_MAX_SM_CLOCK = 1u << 4,
    STOKE_GPU_HAS_PCIE = 1u << 5,
    STOKE_GPU_HAS_PCI_BUS_ID = 1u << 6,
    STOKE_GPU_HAS_CUDA_INDEX = 1u << 7,
};

typedef struct stoke_gpu_info {
    int index; /* NVML index */
    char name[96];
    char uuid[96];
    char pci_bus_id[32]; /* "00000000:3B:00.0" */
    uint64_t memory_total_bytes;
    int cc_major, cc_minor;  /* compute capability */
    int sm_count;            /* streaming multiprocessors (CUDA runtime) */
    int cuda_index;          /* the CUDA runtime's number (cuda:N), matched by PCI bus id: CUDA
                       orders devices its own way and CUDA_VISIBLE_DEVICES renumbers */
    unsigned power_limit_mw; /* enforced power limit, milliwatts */
    unsigned max_sm_clock_mhz;
    unsigned pcie_gen, pcie_width; /* current link generation and lanes */
    unsigned valid;                /* STOKE_GPU_HAS_* */
} stoke_gpu_info;

enum {
    STOKE_GS_UTIL = 1u << 0,   /* util_gpu_pct and util_mem_pct */
    STOKE_GS_MEMORY = 1u << 1, /* mem_used_bytes and mem_total_bytes */
    STOKE_GS_POWER = 1u << 2,  /* power_mw */
    STOKE_GS_POWER_LIMIT = 1u << 3,
    STOKE_GS_TEMP = 1u << 4,
    STOKE_GS_SM_CLOCK = 1u << 5,
    STOKE_GS_THROTTLE = 1u << 6,
    STOKE_GS_PCIE_RX = 1u << 7,
    STOKE_GS_PCIE_TX = 1u << 8,
};

/* Clock-event ("throttle") reason bits, as NVML defines them. */
enum {
    STOKE_THROTTLE_GPU_IDLE = 0x1,
    STOKE_THROTTLE_APP_CLOCKS = 0x2,
    STOKE_THROTTLE_SW_POWER_CAP = 0x4,
    STOKE_THROTTLE_HW_SLOWDOWN = 0x8,
    STOKE_THROTTLE_SYNC_BOOST = 0x10,
    STOKE_THROTTLE_SW_THERMAL = 0x20,
    STOKE_THROTTLE_HW_THERMAL = 0x40,
    STOKE_THROTTLE_HW_POWER_BRAKE = 0x80,
    STOKE_THROTTLE_DISPLAY_CLOCK = 0x100,
};

typedef struct stoke_gpu_sample {
    unsigned valid;        /* STOKE_GS_* */
    unsigned util_gpu_pct; /* % of time a kernel ran over the driver's window */
    unsigned util_mem_pct; /* % of time device memory was read or written */
    uint64_t mem_used_bytes, mem_total_bytes;
    unsigned power_mw, power_limit_mw;
    unsigned temp_c;
    unsigned sm_clock_mhz;
    uint64_t throttle_reasons;           /* STOKE_THROTTLE_* bits */
    unsigned pcie_rx_kBps, pcie_tx_kBps; /* KB/s over NVML's 20 ms window */
} stoke_gpu_sample;

typedef struct stoke_gpu_proc {
    unsigned pid;
    uint64_t used_bytes;
    bool used_valid; /* false when the driver does not report it */
} stoke_gpu_proc;

typedef struct stoke_nvml stoke_nvml; /* a loaded NVML and its function table */

/* Loads NVML: the file named by $STOKE_NVML_LIBRARY if set, else libnvidia-ml.so.1,
 * and initializes it. On failure returns STOKE_ERR_UNAVAILABLE with a message such as
 * "libnvidia-ml.so.1 not found" or "nvmlInit_v2 failed: Driver Not Loaded"; that is a
 * normal answer on machines without a GPU. On success *out must be closed. */
stoke_status stoke_nvml_open(stoke_nvml **out);
void stoke_nvml_close(stoke_nvml *nvml); /* NULL is fine */

int stoke_nvml_device_count(const stoke_nvml *nvml);
const char *stoke_nvml_driver_version(const stoke_nvml *nvml); /* "" if unknown */
int stoke_nvml_cuda_driver_version(const stoke_nvml *nvml);    /* 12040, or 0 */

/* Static facts of device i (0 <= i < count); sm_count is left invalid here. */
stoke_status stoke_nvml_device_info(stoke_nvml *nvml, int i, stoke_gpu_info *out);

/* One reading of device i. Unsupported readings leave their valid bit clear. */
stoke_status stoke_nvml_sample(stoke_nvml *nvml, int i, stoke_gpu_sample *out);

/* Compute processes on device i: at most `cap` entries into procs, the number written
 * into *count. */
stoke_status stoke_nvml_processes(stoke_nvml *nvml, int i, stoke_gpu_proc *procs, int cap,
                                  int *count);

typedef struct stoke_cudart stoke_cudart; /* a loaded CUDA runtime */

/* Loads the CUDA runtime: $STOKE_CUDART_LIBRARY if set, else libcudart.so.13, .so.12,
 * then libcudart.so. STOKE_ERR_UNAVAILABLE with a message if none loads. */
stoke_status stoke_cudart_open(stoke_cudart **out);
void stoke_cudart_close(stoke_cudart *rt);
int stoke_cudart_runtime_version(const stoke_cudart *rt); /* 13000, or 0 */

/* Number of CUDA devices; on failure STOKE_ERR_UNAVAILABLE with the runtime's reason
 * ("no CUDA-capable device is detected"), or in words when the runtime is installed
 * but the driver is not ("no NVIDIA driver: ... libcuda.so.1 is not found") or is older
 * than the runtime, with what to install. */
stoke_status stoke_cudart_device_count(stoke_cudart *rt, int *count);

/* SM count and PCI bus id ("0000:3b:00.0" form, lower case) of CUDA device `dev`. */
stoke_status stoke_cudart_device_sm(stoke_cudart *rt, int dev, int *sm_count, char *pci_bus_id,
                                    size_t size);

/* ---- Device memory, streams and events -----------------------------------------
 * What the data loader needs to stage batches on a GPU, as thin wrappers over the
 * runtime's functions of the same names, so no caller needs a CUDA header or the
 * runtime's table. Every failure is STOKE_ERR_UNAVAILABLE with the message
 * "<CUDA function>: <the runtime's reason> (error <code>)". Calls on one stream are
 * ordered; the destroy and free functions ignore NULL and errors. */

typedef void *stoke_gpu_stream; /* a cudaStream_t */
typedef void *stoke_gpu_event;  /* a cudaEvent_t */

/* STOKE_OK if the runtime has every function below (old or partial runtimes lack
 * some); else "the CUDA runtime lacks the stream, event or memory functions". Call it
 * before the others, which assume it. */
stoke_status stoke_cudart_check_device_api(const stoke_cudart *rt);

/* cudaSetDevice: the device the calling thread's later calls use. */
stoke_status stoke_cudart_set_device(stoke_cudart *rt, int dev);

/* Pinned (page-locked) host memory of `bytes` (0 counts as 1) into *out, for copies
 * that overlap computation; free with stoke_cudart_host_free. The message is
 * "cudaHostAlloc(<bytes> bytes): ...". *out is NULL on failure. */
stoke_status stoke_cudart_host_alloc(stoke_cudart *rt, size_t bytes, void **out);
void stoke_cudart_host_free(stoke_cudart *rt, void *p);

/* Device memory of `bytes` into *out (NULL on failure); free with stoke_cudart_free. */
stoke_status stoke_cudart_malloc(stoke_cudart *rt, size_t bytes, void **out);
void stoke_cudart_free(stoke_cudart *rt, void *p);

/* A stream that does not synchronize with the legacy default stream (NonBlocking). */
stoke_status stoke_cudart_stream_create(stoke_cudart *rt, stoke_gpu_stream *out);
void stoke_cudart_stream_destroy(stoke_cudart *rt, stoke_gpu_stream s);

/* An event without timing (DisableTiming: cheaper to record and wait for). */
stoke_status stoke_cudart_event_create(stoke_cudart *rt, stoke_gpu_event *out);
void stoke_cudart_event_destroy(stoke_cudart *rt, stoke_gpu_event e);

/* Records e on s: it completes when the work queued on s before it has. */
stoke_status stoke_cudart_event_record(stoke_cudart *rt, stoke_gpu_event e, stoke_gpu_stream s);

/* Blocks the calling thread until e has completed. */
stoke_status stoke_cudart_event_sync(stoke_cudart *rt, stoke_gpu_event e);

/* Makes the work queued on s from now on wait for e (another stream's event). */
stoke_status stoke_cudart_stream_wait(stoke_cudart *rt, stoke_gpu_stream s, stoke_gpu_event e);

/* Queues a copy of `bytes` from host memory src (pinned, for it to be asynchronous) to
 * device memory dst on s. Both must stay valid until the copy has completed. */
stoke_status stoke_cudart_copy_to_device_async(stoke_cudart *rt, void *dst, const void *src,
                                               size_t bytes, stoke_gpu_stream s);

/* What the CUDA backend adds (src/nn/cuda): STOKE_OK if the runtime also has the
 * functions below, else "the CUDA runtime lacks ...". */
stoke_status stoke_cudart_check_compute_api(const stoke_cudart *rt);

/* Queues a copy of `bytes` from device memory src to host memory dst on s, or between
 * two device buffers (stoke_cudart_copy_on_device_async). */
stoke_status stoke_cudart_copy_to_host_async(stoke_cudart *rt, void *dst, const void *src,
                                             size_t bytes, stoke_gpu_stream s);
stoke_status stoke_cudart_copy_on_device_async(stoke_cudart *rt, void *dst, const void *src,
                                               size_t bytes, stoke_gpu_stream s);
/* Queues a fill of `bytes` of device memory with the byte `value` on s. */
stoke_status stoke_cudart_memset_async(stoke_cudart *rt, void *dst, int value, size_t bytes,
                                       stoke_gpu_stream s);
/* Blocks until the work queued on s has completed; its message carries the first
 * error of that work (a kernel's fault surfaces here). */
stoke_status stoke_cudart_stream_sync(stoke_cudart *rt, stoke_gpu_stream s);
/* Free and total memory of the current device, in bytes. */
stoke_status stoke_cudart_mem_info(stoke_cudart *rt, size_t *free_bytes, size_t *total_bytes);
/* Compute capability of device `dev` (9.0 -> major 9, minor 0). */
stoke_status stoke_cudart_device_cc(stoke_cudart *rt, int dev, int *major, int *minor);
/* The runtime's pending launch error, cleared (cudaGetLastError), as a status. */
stoke_status stoke_cudart_last_error(stoke_cudart *rt, const char *what);
/* An event that records when it completes, for stoke_cudart_event_elapsed (timing
 * events cost more to record: only for measuring). */
stoke_status stoke_cudart_timing_event_create(stoke_cudart *rt, stoke_gpu_event *out);
/* Whether e has completed (cudaEventQuery), without waiting. */
stoke_status stoke_cudart_event_done(stoke_cudart *rt, stoke_gpu_event e, bool *done);
/* Milliseconds of the device's clock from timing event a to b, both completed. */
stoke_status stoke_cudart_event_elapsed(stoke_cudart *rt, stoke_gpu_event a, stoke_gpu_event b,
                                        double *ms);
/* Queues fn(user) on s: it runs on a runtime thread once the work before it is done,
 * and the work after it waits for it (cudaLaunchHostFunc). */
stoke_status stoke_cudart_launch_host_func(stoke_cudart *rt, stoke_gpu_stream s, void (*fn)(void *),
                                           void *user);
/* Graphs: STOKE_OK if the runtime has them. From capture_begin to capture_end the work
 * queued on s is recorded instead of run (global mode: a wait or an allocation in
 * between fails and spoils the capture); capture_end instantiates it into *out, which
 * graph_launch queues on s again, whole, each time. */
typedef void *stoke_gpu_graph; /* a cudaGraphExec_t */
stoke_status stoke_cudart_check_graph_api(const stoke_cudart *rt);
stoke_status stoke_cudart_capture_begin(stoke_cudart *rt, stoke_gpu_stream s);
stoke_status stoke_cudart_capture_end(stoke_cudart *rt, stoke_gpu_stream s, stoke_gpu_graph *out);
stoke_status stoke_cudart_graph_launch(stoke_cudart *rt, stoke_gpu_graph g, stoke_gpu_stream s);
void stoke_cudart_graph_free(stoke_cudart *rt, stoke_gpu_graph g); /* NULL is ignored */

/* True if two PCI bus ids name the same device, whatever their spelling: NVML's
 * "00000000:3B:00.0" and CUDA's "0000:3b:00.0" are both domain:bus:device.function in
 * hex, of any case and domain width. False if either does not parse. Can't fail. */
bool stoke_pci_bus_id_equal(const char *a, const char *b);

/* ---- The whole machine -------------------------------------------------------- */

#define STOKE_MAX_GPUS 16

typedef struct stoke_machine {
    stoke_cpu_info cpu;
    stoke_openblas_info openblas; /* the BLAS library this process loaded */
    stoke_mem_info mem;
    bool have_disk; /* a data path was given and probed */
    char data_path[512];
    stoke_disk_info disk;
    int gpu_count;
    stoke_gpu_info gpus[STOKE_MAX_GPUS];
    char gpu_note[256];       /* why there are no GPUs, or "" */
    char driver_version[80];  /* NVIDIA driver, "" if unknown */
    int cuda_driver_version;  /* 1000*major + 10*minor, 0 if unknown */
    int cuda_runtime_version; /* same encoding, 0 if no runtime */
    stoke_cpu_load load;      /* what other processes took when the run started; valid
                                 false: not sampled (stoke_machine_probe leaves it so,
                                 the trainer and `stoke probe` sample it) */
} stoke_machine;

/* Probes everything. `data_path` may be NULL. A missing GPU, NVML or runtime is
 * recorded in gpu_note, never an error. Errors: the data path does not exist
 * (STOKE_ERR_NOTFOUND), /proc unreadable (STOKE_ERR_IO). */
stoke_status stoke_machine_probe(stoke_machine *m, const char *data_path);

/* The entry of m->gpus that CUDA device `cuda_dev` (cuda:N) is: matched by PCI bus id
 * (STOKE_GPU_HAS_CUDA_INDEX); when no GPU was matched (no runtime), NVML's N itself.
 * -1 when there is none. Can't fail. */
int stoke_machine_cuda_gpu(const stoke_machine *m, int cuda_dev);

#ifdef __cplusplus
}
#endif
#endif
