/* fake_cudart.c - a test double of libcudart.so: the CUDA runtime functions stoke
 * calls, answering from the same scenario file as the NVML double. */
#include <stdio.h>

#include "scenario.h"

enum { OK = 0, INVALID_VALUE = 1, NO_DEVICE = 100, INVALID_DEVICE = 101 };

int cudaGetDeviceCount(int *n)
{
    const fake_scenario *s = fake_scenario_get();
    *n = 0;
    if (s->ndevices == 0)
        return NO_DEVICE;
    *n = s->ndevices;
    return OK;
}

int cudaDeviceGetAttribute(int *value, int attr, int dev)
{
    const fake_scenario *s = fake_scenario_get();
    if (dev < 0 || dev >= s->ndevices)
        return INVALID_DEVICE;
    const fake_device *d = &s->devices[dev];
    unsigned domain = 0, bus = 0, device = 0;
    sscanf(d->bus, "%x:%x:%x", &domain, &bus, &device);
    switch (attr) {
    case 16:
        if (!d->has_sm)
            return INVALID_VALUE;
        *value = d->sm;
        return OK;
    case 33: *value = (int)bus; return OK;
    case 34: *value = (int)device; return OK;
    case 50: *value = (int)domain; return OK;
    case 75: *value = d->cc_major; return OK;
    case 76: *value = d->cc_minor; return OK;
    default: return INVALID_VALUE;
    }
}

int cudaRuntimeGetVersion(int *v)
{
    *v = fake_scenario_get()->runtime;
    return OK;
}

int cudaDriverGetVersion(int *v)
{
    *v = fake_scenario_get()->cuda;
    return OK;
}

const char *cudaGetErrorString(int rc)
{
    switch (rc) {
    case OK: return "no error";
    case NO_DEVICE: return "no CUDA-capable device is detected";
    case INVALID_DEVICE: return "invalid device ordinal";
    default: return "invalid argument";
    }
}
