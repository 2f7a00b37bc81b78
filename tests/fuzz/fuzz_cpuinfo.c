/* fuzz_cpuinfo.c - the CPU and memory probe's parsers (/proc/cpuinfo, /proc/meminfo)
 * on arbitrary bytes: they must never crash, hang or read out of bounds. */
#include <stdint.h>

#include "fuzz_input.h"
#include "stoke/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("proc/cpuinfo", data, size);
    fuzz_write("proc/meminfo", data, size);
    stoke_cpu_info cpu;
    stoke_mem_info mem;
    stoke_cpu_probe(fuzz_root(), &cpu);
    stoke_mem_probe(fuzz_root(), &mem);
    char names[512];
    stoke_simd_names(cpu.simd, names, sizeof names);
    return 0;
}
