/* scenario.h - the GPU scenario files replayed by the NVML and CUDA runtime test
 * doubles (format in README.md beside this file). */
#ifndef FAKE_SCENARIO_H
#define FAKE_SCENARIO_H

#include <stdbool.h>

#define FAKE_MAX_DEVICES 8
#define FAKE_MAX_SAMPLES 512
#define FAKE_MAX_PROCS   16

/* A sample row: which keys were given, and their values. */
enum fake_key {
    K_UTIL,
    K_MEM_UTIL,
    K_MEM_USED,
    K_POWER,
    K_TEMP,
    K_SM_CLOCK,
    K_THROTTLE,
    K_PCIE_RX,
    K_PCIE_TX,
    K_NKEYS
};

typedef struct fake_row {
    unsigned has; /* 1 << fake_key */
    unsigned long long v[K_NKEYS];
} fake_row;

typedef struct fake_proc {
    enum { PID_NUMBER, PID_SELF, PID_CHILD } kind;
    unsigned pid;
    bool has_mem;
    unsigned long long mem;
} fake_proc;

typedef struct fake_device {
    char name[96], uuid[96], bus[32];
    bool has_memory, has_cc, has_sm, has_power_limit, has_max_clock, has_pcie, has_bus;
    unsigned long long memory;
    int cc_major, cc_minor, sm;
    unsigned power_limit, max_sm_clock, pcie_gen, pcie_width;
    int nrows;
    fake_row rows[FAKE_MAX_SAMPLES];
    int nprocs;
    fake_proc procs[FAKE_MAX_PROCS];
} fake_device;

typedef struct fake_scenario {
    char driver[80];
    int cuda, runtime, init_error;
    int cudart_error; /* cudaGetDeviceCount's error (35: no or an old driver), 0 none */
    int ndevices;
    fake_device devices[FAKE_MAX_DEVICES];
} fake_scenario;

/* Loads $STOKE_FAKE_GPU_SCENARIO once (an empty machine if unset). A malformed file
 * is reported on stderr and aborts: a broken test fixture must not pass quietly. */
const fake_scenario *fake_scenario_get(void);

/* First child process of the calling process, or 0 if it has none. */
unsigned fake_first_child(void);

#endif
