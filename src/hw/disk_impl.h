/* disk_impl.h - the storage probe with its inputs named, so tests can feed a recorded
 * mountinfo and sysfs tree. */
#ifndef STOKE_DISK_IMPL_H
#define STOKE_DISK_IMPL_H

#include "stoke/hw.h"

/* stoke_disk_probe reading `mountinfo` (a file in /proc/self/mountinfo's format)
 * and block devices under `sys_root` + "/sys/dev/block" ("" for the real system).
 * Same results and errors as stoke_disk_probe. */
stoke_status stoke_disk_probe_from(const char *mountinfo, const char *sys_root, const char *path,
                                   stoke_disk_info *out);

#endif
