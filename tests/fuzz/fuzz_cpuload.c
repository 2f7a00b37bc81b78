/* fuzz_cpuload.c - the readers of what the CPU allowance and the other processes'
 * load come from, on arbitrary bytes: /proc/self/cgroup with the cgroup CPU quota
 * files (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us) walked up from it, and
 * /proc/stat with /proc/self/stat turned into a load between two snapshots. The input
 * is split at its first NUL: the part before is the cgroup path file and /proc/stat,
 * the part after the quota files and /proc/self/stat. */
#include <stdint.h>
#include <string.h>

#include "fuzz_input.h"
#include "stoke/hw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t a = nul ? (size_t)(nul - data) : size;
    const uint8_t *rest = nul ? nul + 1 : data + size;
    size_t b = size - (size_t)(rest - data);
    fuzz_write("proc/cpuinfo", (const uint8_t *)"processor\t: 0\n", 14);
    fuzz_write("proc/self/cgroup", data, a);
    fuzz_write("sys/fs/cgroup/cpu.max", rest, b);
    fuzz_write("sys/fs/cgroup/a/cpu.max", rest, b);
    fuzz_write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", rest, b);
    fuzz_write("sys/fs/cgroup/cpu/cpu.cfs_period_us", data, a);
    fuzz_write("sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us", rest, b);
    fuzz_write("sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", rest, b);
    stoke_cpu_info cpu;
    stoke_cpu_probe(fuzz_root(), &cpu);
    if (cpu.available_cpus < 0 || cpu.quota_cpus < 0)
        __builtin_trap();
    stoke_cpu_snapshot s1, s2;
    stoke_cpu_load load;
    fuzz_write("proc/stat", data, a);
    fuzz_write("proc/self/stat", rest, b);
    stoke_status r1 = stoke_cpu_snapshot_read(fuzz_root(), &s1);
    fuzz_write("proc/stat", rest, b);
    fuzz_write("proc/self/stat", data, a);
    stoke_status r2 = stoke_cpu_snapshot_read(fuzz_root(), &s2);
    if (r1 == STOKE_OK && r2 == STOKE_OK && stoke_cpu_load_between(&s1, &s2, &load) &&
        (!(load.busy_cpus >= 0) || !(load.others_cpus >= 0) || !(load.steal_pct >= 0)))
        __builtin_trap(); /* a figure that cannot be true */
    return 0;
}
