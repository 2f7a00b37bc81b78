/* fuzz_profiles.c - the hardware profile reader (stoke_profiles_parse, docs/profiles.md)
 * on arbitrary bytes: it must accept or refuse with a message naming the file, never
 * crash, hang or leak; an accepted table holds only what the reader promises, and
 * every profile in it matches (stoke_profile_match_device) without fault. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static stoke_profiles p;
    if (stoke_profiles_parse((const char *)data, size, "fuzz.yaml", &p) != STOKE_OK) {
        if (strncmp(stoke_last_error(), "fuzz.yaml", 9) != 0 || p.count != 0)
            abort(); /* every refusal names the file and leaves no table */
        return 0;
    }
    static stoke_machine m;
    memset(&m, 0, sizeof m);
    m.cpu.usable_cpus = 7;
    for (int i = 0; i < p.count; i++) {
        const stoke_profile *f = &p.items[i];
        if (!f->name[0] || f->workers < 0 || f->prefetch_factor < 1 || f->gpu_name_count > 8)
            abort();
        /* a GPU named like each profile's first name, and of its class */
        stoke_gpu_info *g = &m.gpus[0];
        memset(g, 0, sizeof *g);
        m.gpu_count = 1;
        snprintf(g->name, sizeof g->name, "NVIDIA %s", f->gpu_name_count ? f->gpu_names[0] : "?");
        g->cc_major = f->cc_major;
        g->cc_minor = f->cc_minor;
        g->valid = STOKE_GPU_HAS_CC;
        stoke_profile_match pm;
        stoke_profile_match_device(&p, &m, 0, &pm);
        if (pm.prefetch < 0 || pm.prefetch > 32 || pm.workers < 0 || pm.workers > 7)
            abort();
        stoke_profile_match_device(&p, &m, STOKE_TUNE_CPU, &pm);
    }
    return 0;
}
