/* fake_nvml.c - a test double of libnvidia-ml.so.1: the NVML functions stoke calls,
 * answering from a scenario file (README.md beside this file). Built twice: normally,
 * and with FAKE_STRIDE32 to act like drivers 535.43-535.86, whose _v3 process call
 * writes 32-byte entries. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "scenario.h"

enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, INSUFFICIENT = 7 };

/* One cursor per device, moved on by each nvmlDeviceGetUtilizationRates call (the
 * first reading stoke takes of a device in a sample); the other readings answer from
 * the current row, so one sample is always one coherent row. */
static unsigned cursors[FAKE_MAX_DEVICES];
static int initialised;

static const fake_device *dev_of(void *h)
{
    const fake_scenario *s = fake_scenario_get();
    const fake_device *d = h;
    if (!initialised || d < s->devices || d >= s->devices + s->ndevices)
        return NULL;
    return d;
}

/* The current row of device d (advancing it first if `advance`), or NULL if the
 * scenario has none or the row lacks the key. */
static const fake_row *row(const fake_device *d, bool advance, int key)
{
    const fake_scenario *s = fake_scenario_get();
    int di = (int)(d - s->devices);
    unsigned c = advance ? __atomic_add_fetch(&cursors[di], 1, __ATOMIC_RELAXED)
                         : __atomic_load_n(&cursors[di], __ATOMIC_RELAXED);
    unsigned k = c > 0 ? c - 1 : 0; /* row of the latest utilization call */
    if (d->nrows == 0)
        return NULL;
    const fake_row *r = &d->rows[k < (unsigned)d->nrows ? k : (unsigned)d->nrows - 1];
    return (r->has & (1u << key)) ? r : NULL;
}

int nvmlInit_v2(void)
{
    const fake_scenario *s = fake_scenario_get();
    if (s->init_error)
        return s->init_error;
    initialised = 1;
    return OK;
}

int nvmlShutdown(void)
{
    initialised = 0;
    return OK;
}

const char *nvmlErrorString(int rc)
{
    switch (rc) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
    const fake_scenario *s = fake_scenario_get();
    if (!s->driver[0])
        return NOT_SUPPORTED;
    snprintf(buf, len, "%s", s->driver);
    return OK;
}

int nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    const fake_scenario *s = fake_scenario_get();
    if (!s->cuda)
        return NOT_SUPPORTED;
    *v = s->cuda;
    return OK;
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
    if (!initialised)
        return UNINIT;
    *n = (unsigned)fake_scenario_get()->ndevices;
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h)
{
    const fake_scenario *s = fake_scenario_get();
    if (!initialised)
        return UNINIT;
    if (i >= (unsigned)s->ndevices)
        return INVALID;
    *h = (void *)&s->devices[i];
    return OK;
}

int nvmlDeviceGetName(void *h, char *buf, unsigned len)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    snprintf(buf, len, "%s", d->name);
    return OK;
}

int nvmlDeviceGetUUID(void *h, char *buf, unsigned len)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    if (!d->uuid[0])
        return NOT_SUPPORTED;
    snprintf(buf, len, "%s", d->uuid);
    return OK;
}

typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_info;

int nvmlDeviceGetPciInfo_v3(void *h, pci_info *p)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    if (!d->has_bus)
        return NOT_SUPPORTED;
    memset(p, 0, sizeof *p);
    snprintf(p->bus_id, sizeof p->bus_id, "%s", d->bus);
    sscanf(d->bus, "%x:%x:%x", &p->domain, &p->bus, &p->device);
    return OK;
}

int nvmlDeviceGetMemoryInfo(void *h, unsigned long long m[3])
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    if (!d->has_memory)
        return NOT_SUPPORTED;
    const fake_row *r = row(d, false, K_MEM_USED);
    unsigned long long used = r ? r->v[K_MEM_USED] : 0;
    m[0] = d->memory;
    m[1] = d->memory - used;
    m[2] = used;
    return OK;
}

int nvmlDeviceGetUtilizationRates(void *h, unsigned u[2])
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    const fake_row *r = row(d, true, K_UTIL);
    if (!r)
        return NOT_SUPPORTED;
    u[0] = (unsigned)r->v[K_UTIL];
    u[1] = (r->has & (1u << K_MEM_UTIL)) ? (unsigned)r->v[K_MEM_UTIL] : 0;
    return OK;
}

#define READING(fn, key)                        \
    int fn(void *h, unsigned *out)              \
    {                                           \
        const fake_device *d = dev_of(h);       \
        if (!d)                                 \
            return INVALID;                     \
        const fake_row *r = row(d, false, key); \
        if (!r)                                 \
            return NOT_SUPPORTED;               \
        *out = (unsigned)r->v[key];             \
        return OK;                              \
    }
READING(nvmlDeviceGetPowerUsage, K_POWER)

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t)
{
    const fake_device *d = dev_of(h);
    if (!d || sensor != 0)
        return INVALID;
    const fake_row *r = row(d, false, K_TEMP);
    if (!r)
        return NOT_SUPPORTED;
    *t = (unsigned)r->v[K_TEMP];
    return OK;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    if (type != 1) /* only the SM clock is scripted */
        return NOT_SUPPORTED;
    const fake_row *r = row(d, false, K_SM_CLOCK);
    if (!r)
        return NOT_SUPPORTED;
    *mhz = (unsigned)r->v[K_SM_CLOCK];
    return OK;
}

int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *bits)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    const fake_row *r = row(d, false, K_THROTTLE);
    if (!r)
        return NOT_SUPPORTED;
    *bits = r->v[K_THROTTLE];
    return OK;
}

int nvmlDeviceGetPcieThroughput(void *h, int counter, unsigned *kbps)
{
    const fake_device *d = dev_of(h);
    if (!d || (counter != 0 && counter != 1))
        return INVALID;
    int key = counter == 1 ? K_PCIE_RX : K_PCIE_TX;
    const fake_row *r = row(d, false, key);
    if (!r)
        return NOT_SUPPORTED;
    *kbps = (unsigned)r->v[key];
    return OK;
}

#define STATIC_FACT(fn, has, field)       \
    int fn(void *h, unsigned *out)        \
    {                                     \
        const fake_device *d = dev_of(h); \
        if (!d)                           \
            return INVALID;               \
        if (!d->has)                      \
            return NOT_SUPPORTED;         \
        *out = d->field;                  \
        return OK;                        \
    }
STATIC_FACT(nvmlDeviceGetEnforcedPowerLimit, has_power_limit, power_limit)
STATIC_FACT(nvmlDeviceGetCurrPcieLinkGeneration, has_pcie, pcie_gen)
STATIC_FACT(nvmlDeviceGetCurrPcieLinkWidth, has_pcie, pcie_width)

int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    if (type != 1 || !d->has_max_clock)
        return NOT_SUPPORTED;
    *mhz = d->max_sm_clock;
    return OK;
}

int nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    if (!d->has_cc)
        return NOT_SUPPORTED;
    *major = d->cc_major;
    *minor = d->cc_minor;
    return OK;
}

#ifdef FAKE_STRIDE32
#define STRIDE 32
int nvmlDeviceGetConfComputeMemSizeInfo(void *h, void *info);
int nvmlDeviceGetConfComputeMemSizeInfo(void *h, void *info)
{
    (void)h, (void)info;
    return NOT_SUPPORTED;
}
#else
#define STRIDE 24
#endif

int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *count, unsigned char *infos)
{
    const fake_device *d = dev_of(h);
    if (!d)
        return INVALID;
    unsigned pids[FAKE_MAX_PROCS];
    unsigned long long mems[FAKE_MAX_PROCS];
    unsigned n = 0;
    for (int i = 0; i < d->nprocs; i++) {
        const fake_proc *p = &d->procs[i];
        unsigned pid = p->kind == PID_NUMBER ? p->pid
                       : p->kind == PID_SELF ? (unsigned)getpid()
                                             : fake_first_child();
        if (!pid)
            continue;
        pids[n] = pid;
        mems[n] = p->has_mem ? p->mem : ~0ULL;
        n++;
    }
    if (n == 0) {
        *count = 0;
        return OK;
    }
    if (!infos || *count < n) {
        *count = n;
        return INSUFFICIENT;
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned char *e = infos + (size_t)i * STRIDE;
        unsigned none = 0xFFFFFFFFu;
        memset(e, 0, STRIDE);
        memcpy(e, &pids[i], 4);
        memcpy(e + 8, &mems[i], 8);
        memcpy(e + 16, &none, 4);
        memcpy(e + 20, &none, 4);
    }
    *count = n;
    return OK;
}
