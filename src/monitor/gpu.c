/* gpu.c - per-GPU readings and the watched tree's GPU memory, through hw.h's NVML. */
#include "stoke/monitor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPU_PROCS 256

struct stoke_gpu_reader {
    stoke_nvml *nvml;
    int count;
    stoke_gpu_proc procs[MAX_GPU_PROCS];
    char name[STOKE_MAX_GPUS][96], uuid[STOKE_MAX_GPUS][96]; /* read once: they never change */
};

stoke_status stoke_gpu_reader_open(stoke_gpu_reader **out)
{
    *out = NULL;
    stoke_gpu_reader *g = calloc(1, sizeof *g);
    if (!g)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    stoke_status st = stoke_nvml_open(&g->nvml);
    if (st != STOKE_OK) {
        free(g); /* stoke_nvml_open left its message */
        return st;
    }
    int n = stoke_nvml_device_count(g->nvml);
    g->count = n < 0 ? 0 : n > STOKE_MAX_GPUS ? STOKE_MAX_GPUS : n;
    for (int i = 0; i < g->count; i++) {
        stoke_gpu_info info;
        if (stoke_nvml_device_info(g->nvml, i, &info) == STOKE_OK) {
            snprintf(g->name[i], sizeof g->name[i], "%s", info.name);
            snprintf(g->uuid[i], sizeof g->uuid[i], "%s", info.uuid);
        }
    }
    *out = g;
    return STOKE_OK;
}

void stoke_gpu_reader_free(stoke_gpu_reader *g)
{
    if (!g)
        return;
    stoke_nvml_close(g->nvml);
    free(g);
}

int stoke_gpu_reader_count(const stoke_gpu_reader *g) { return g ? g->count : 0; }

void stoke_gpu_read(stoke_gpu_reader *g, const int *pids, int npids, stoke_mon_sample *s)
{
    s->gpu_count = g->count;
    bool any_proc = false;
    uint64_t proc_total = 0;
    for (int i = 0; i < g->count; i++) {
        stoke_mon_gpu *x = &s->gpus[i];
        memset(x, 0, sizeof *x);
        memcpy(x->name, g->name[i], sizeof x->name);
        memcpy(x->uuid, g->uuid[i], sizeof x->uuid);
        if (stoke_nvml_sample(g->nvml, i, &x->s) != STOKE_OK)
            x->s.valid = 0; /* a device that fails a tick is absent for that tick */
        if (npids <= 0)
            continue;
        int n = 0;
        if (stoke_nvml_processes(g->nvml, i, g->procs, MAX_GPU_PROCS, &n) != STOKE_OK)
            continue;
        /* The driver lists the processes holding memory; an unlisted tree holds none. */
        x->proc_mem_valid = true;
        for (int k = 0; k < n; k++) {
            bool ours = false;
            for (int j = 0; j < npids && !ours; j++)
                ours = (unsigned)pids[j] == g->procs[k].pid;
            if (!ours)
                continue;
            if (g->procs[k].used_valid)
                x->proc_mem_bytes += g->procs[k].used_bytes;
        }
        any_proc = true;
        proc_total += x->proc_mem_bytes;
    }
    if (any_proc) {
        s->proc_gpu_mem_bytes = proc_total;
        s->valid |= STOKE_MS_PROC_GPU;
    }
}
