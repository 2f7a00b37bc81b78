/* fuzz_mountinfo.c - the storage probe's /proc/self/mountinfo parser on arbitrary
 * bytes, for a path inside every mount ("/"). */
#include <stdint.h>

#include "fuzz_input.h"
#include "hw/disk_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *file = fuzz_write("mountinfo", data, size);
    stoke_disk_info info;
    stoke_disk_probe_from(file, fuzz_root(), "/", &info);
    stoke_disk_probe_from(file, fuzz_root(), "/tmp", &info);
    return 0;
}
