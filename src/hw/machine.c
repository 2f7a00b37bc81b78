/* machine.c - the whole machine in one probe: CPU, its OpenBLAS, memory, data storage,
 * NVIDIA GPUs. */
#include "stoke/hw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"

typedef struct pci_addr {
    uint64_t domain, bus, device, function;
} pci_addr;

/* Parses "domain:bus:device.function" (hex); the domain may be absent ("01:00.0"),
 * as in the legacy short form, and is then 0. */
static bool parse_bus_id(const char *s, pci_addr *out)
{
    if (!s || !*s)
        return false;
    uint64_t f[4];
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *end;
        if (n == 4 || !stoke_parse_u64_prefix(p, 16, &f[n++], &end))
            return false;
        if (*end == ':' || (*end == '.' && n >= 2)) {
            p = end + 1;
            continue;
        }
        if (*end != '\0')
            return false;
        break;
    }
    if (n == 4)
        *out = (pci_addr){f[0], f[1], f[2], f[3]};
    else if (n == 3)
        *out = (pci_addr){0, f[0], f[1], f[2]};
    else
        return false;
    return true;
}

bool stoke_pci_bus_id_equal(const char *a, const char *b)
{
    pci_addr x, y;
    if (!parse_bus_id(a, &x) || !parse_bus_id(b, &y))
        return false;
    return x.domain == y.domain && x.bus == y.bus && x.device == y.device &&
           x.function == y.function;
}

/* Adds SM counts from the CUDA runtime, matched by PCI bus id because NVML and CUDA
 * may number the same devices differently (CUDA orders fastest first by default). */
static void fill_sm_counts(stoke_machine *m)
{
    stoke_cudart *rt = NULL;
    if (stoke_cudart_open(&rt) != STOKE_OK)
        return; /* NVML's facts stand on their own; sm_count stays absent */
    m->cuda_runtime_version = stoke_cudart_runtime_version(rt);
    int count = 0;
    if (stoke_cudart_device_count(rt, &count) == STOKE_OK) {
        for (int dev = 0; dev < count; dev++) {
            int sm = 0;
            char bus[32] = "";
            if (stoke_cudart_device_sm(rt, dev, &sm, bus, sizeof bus) != STOKE_OK || sm <= 0)
                continue;
            for (int g = 0; g < m->gpu_count; g++) {
                stoke_gpu_info *gpu = &m->gpus[g];
                if ((gpu->valid & STOKE_GPU_HAS_PCI_BUS_ID) &&
                    stoke_pci_bus_id_equal(gpu->pci_bus_id, bus)) {
                    gpu->sm_count = sm;
                    gpu->cuda_index = dev;
                    gpu->valid |= STOKE_GPU_HAS_SM_COUNT | STOKE_GPU_HAS_CUDA_INDEX;
                }
            }
        }
    }
    stoke_cudart_close(rt);
}

static void probe_gpus(stoke_machine *m)
{
    stoke_nvml *nvml = NULL;
    if (stoke_nvml_open(&nvml) != STOKE_OK) {
        snprintf(m->gpu_note, sizeof m->gpu_note, "no NVIDIA GPU: %s", stoke_last_error());
        return;
    }
    snprintf(m->driver_version, sizeof m->driver_version, "%s", stoke_nvml_driver_version(nvml));
    m->cuda_driver_version = stoke_nvml_cuda_driver_version(nvml);
    int count = stoke_nvml_device_count(nvml);
    if (count <= 0) {
        snprintf(m->gpu_note, sizeof m->gpu_note, "no NVIDIA GPU: the driver reports 0 devices");
        stoke_nvml_close(nvml);
        return;
    }
    if (count > STOKE_MAX_GPUS)
        count = STOKE_MAX_GPUS;
    for (int i = 0; i < count; i++) {
        stoke_gpu_info *gpu = &m->gpus[m->gpu_count];
        memset(gpu, 0, sizeof *gpu);
        if (stoke_nvml_device_info(nvml, i, gpu) != STOKE_OK) {
            /* A device the driver lists but cannot describe (no permission, lost)
             * is left out, and the note says which, so the count never lies. */
            size_t used = strlen(m->gpu_note);
            snprintf(m->gpu_note + used, sizeof m->gpu_note - used, "%sGPU %d skipped: %s",
                     used ? "; " : "", i, stoke_last_error());
            continue;
        }
        gpu->index = i;
        gpu->cuda_index = -1;
        gpu->valid &= ~(unsigned)(STOKE_GPU_HAS_SM_COUNT | STOKE_GPU_HAS_CUDA_INDEX);
        m->gpu_count++;
    }
    stoke_nvml_close(nvml);
    if (m->gpu_count == 0) {
        char skipped[sizeof m->gpu_note];
        snprintf(skipped, sizeof skipped, "%s", m->gpu_note);
        snprintf(m->gpu_note, sizeof m->gpu_note, "no NVIDIA GPU usable: %.200s", skipped);
        return;
    }
    fill_sm_counts(m);
}

stoke_status stoke_machine_probe(stoke_machine *m, const char *data_path)
{
    memset(m, 0, sizeof *m);
    stoke_status s = stoke_cpu_probe(NULL, &m->cpu);
    if (s != STOKE_OK)
        return s;
    stoke_openblas_probe(&m->openblas);
    s = stoke_mem_probe(NULL, &m->mem);
    if (s != STOKE_OK)
        return s;
    if (data_path) {
        snprintf(m->data_path, sizeof m->data_path, "%s", data_path);
        s = stoke_disk_probe(data_path, &m->disk);
        if (s != STOKE_OK)
            return s;
        m->have_disk = true;
    }
    probe_gpus(m);
    return STOKE_OK;
}

int stoke_machine_cuda_gpu(const stoke_machine *m, int cuda_dev)
{
    bool matched = false;
    for (int g = 0; g < m->gpu_count; g++) {
        if (!(m->gpus[g].valid & STOKE_GPU_HAS_CUDA_INDEX))
            continue;
        matched = true;
        if (m->gpus[g].cuda_index == cuda_dev)
            return g;
    }
    return !matched && cuda_dev >= 0 && cuda_dev < m->gpu_count ? cuda_dev : -1;
}
