/* disk.c - which filesystem and what kind of device hold a path (mountinfo + sysfs). */
#include "hw/disk_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *stoke_disk_kind_name(stoke_disk_kind k)
{
    switch (k) {
    case STOKE_DISK_UNKNOWN: return "unknown";
    case STOKE_DISK_MEMORY: return "memory";
    case STOKE_DISK_SSD: return "ssd";
    case STOKE_DISK_ROTATIONAL: return "rotational";
    case STOKE_DISK_NETWORK: return "network";
    case STOKE_DISK_OVERLAY: return "overlay";
    }
    return "unknown";
}

/* Filesystems decided by their type alone. */
static const struct {
    const char *fs;
    stoke_disk_kind kind;
} fs_kinds[] = {
    {"tmpfs", STOKE_DISK_MEMORY},      {"ramfs", STOKE_DISK_MEMORY},
    {"nfs", STOKE_DISK_NETWORK},       {"nfs4", STOKE_DISK_NETWORK},
    {"cifs", STOKE_DISK_NETWORK},      {"smb3", STOKE_DISK_NETWORK},
    {"sshfs", STOKE_DISK_NETWORK},     {"fuse.sshfs", STOKE_DISK_NETWORK},
    {"9p", STOKE_DISK_NETWORK},        {"ceph", STOKE_DISK_NETWORK},
    {"glusterfs", STOKE_DISK_NETWORK}, {"fuse.glusterfs", STOKE_DISK_NETWORK},
    {"lustre", STOKE_DISK_NETWORK},    {"overlay", STOKE_DISK_OVERLAY},
};

/* mountinfo escapes space, tab, newline and backslash as \ooo octal; decodes in
 * place. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* True if mount point `mp` contains `path`: equal, "/", or a prefix ending at a
 * path separator (so "/data" does not contain "/database"). */
static bool contains(const char *mp, const char *path)
{
    size_t n = strlen(mp);
    if (strcmp(mp, "/") == 0)
        return path[0] == '/';
    return strncmp(mp, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Reads sysfs for a block device number and sets kind and reason. */
static void classify_block(const char *sys_root, unsigned maj, unsigned mnr, stoke_disk_info *out)
{
    char link[PATH_MAX], dev[PATH_MAX], path[PATH_MAX + 32], buf[32];
    snprintf(link, sizeof link, "%s/sys/dev/block/%u:%u", sys_root, maj, mnr);
    if (!realpath(link, dev)) {
        snprintf(out->reason, sizeof out->reason,
                 "%s on block device %u:%u, which has no /sys/dev/block entry", out->fs_type, maj,
                 mnr);
        return;
    }
    /* A partition has a "partition" file and its queue/ lives on the parent disk. */
    snprintf(path, sizeof path, "%s/partition", dev);
    if (stoke_read_line(path, buf, sizeof buf) >= 0) {
        char *slash = strrchr(dev, '/');
        if (slash)
            *slash = '\0';
    }
    const char *name = strrchr(dev, '/');
    name = name ? name + 1 : dev;
    snprintf(path, sizeof path, "%s/queue/rotational", dev);
    if (stoke_read_line(path, buf, sizeof buf) < 0) {
        snprintf(out->reason, sizeof out->reason,
                 "%s on block device %.48s (%u:%u): queue/rotational unreadable", out->fs_type,
                 name, maj, mnr);
        return;
    }
    out->kind = strcmp(buf, "1") == 0 ? STOKE_DISK_ROTATIONAL : STOKE_DISK_SSD;
    snprintf(out->reason, sizeof out->reason,
             "%s on block device %.48s (%u:%u): queue/rotational is %.8s", out->fs_type, name, maj,
             mnr, buf);
}

stoke_status stoke_disk_probe(const char *path, stoke_disk_info *out)
{
    return stoke_disk_probe_from("/proc/self/mountinfo", "", path, out);
}

stoke_status stoke_disk_probe_from(const char *mountinfo, const char *sys_root, const char *path,
                                   stoke_disk_info *out)
{
    memset(out, 0, sizeof *out);
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        if (errno == ENOENT || errno == ENOTDIR)
            return stoke_fail(STOKE_ERR_NOTFOUND, "%s: no such file or directory", path);
        return stoke_fail(STOKE_ERR_IO, "%s: %m", path);
    }
    FILE *f = fopen(mountinfo, "re");
    if (!f)
        return stoke_fail(STOKE_ERR_IO, "%s: %m", mountinfo);
    char *line = NULL;
    size_t cap = 0;
    size_t best_len = 0;
    unsigned best_maj = 0, best_min = 0;
    bool found = false;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        /* id parent maj:min root mount-point options [optional...] - type source ... */
        unsigned maj, mnr;
        int mp_at = 0, mp_end = 0;
        if (sscanf(line, "%*u %*u %u:%u %*s %n%*s%n", &maj, &mnr, &mp_at, &mp_end) != 2 ||
            mp_end == 0)
            continue;
        char *sep = strstr(line + mp_end, " - ");
        if (!sep)
            continue;
        line[mp_end] = '\0';
        char *mp = line + mp_at;
        unescape(mp);
        if (!contains(mp, real))
            continue;
        size_t len = strlen(mp);
        /* A later mount on the same point hides the earlier one, hence >=. */
        if (found && len < best_len)
            continue;
        char fs[sizeof out->fs_type], src[sizeof out->device];
        fs[0] = src[0] = '\0';
        if (sscanf(sep + 3, "%31s %127s", fs, src) < 1)
            continue;
        unescape(src);
        found = true;
        best_len = len;
        best_maj = maj;
        best_min = mnr;
        snprintf(out->mount_point, sizeof out->mount_point, "%s", mp);
        snprintf(out->fs_type, sizeof out->fs_type, "%s", fs);
        snprintf(out->device, sizeof out->device, "%s", src);
    }
    free(line);
    fclose(f);
    if (!found)
        return stoke_fail(STOKE_ERR_NOTFOUND, "%s: no mount in %s contains %s", path, mountinfo,
                          real);

    for (size_t i = 0; i < sizeof fs_kinds / sizeof fs_kinds[0]; i++) {
        if (strcmp(out->fs_type, fs_kinds[i].fs) == 0) {
            out->kind = fs_kinds[i].kind;
            snprintf(out->reason, sizeof out->reason, "filesystem type %s is %s storage",
                     out->fs_type,
                     out->kind == STOKE_DISK_MEMORY    ? "in-memory"
                     : out->kind == STOKE_DISK_NETWORK ? "network"
                                                       : "an overlay (backing disk hidden)");
            return STOKE_OK;
        }
    }
    /* Major 0 is the kernel's anonymous block device: btrfs subvolumes, fuse and other
     * virtual filesystems, whose real disk sysfs cannot name. */
    if (best_maj == 0) {
        snprintf(out->reason, sizeof out->reason,
                 "%s on an anonymous device (0:%u): the backing disk is not visible", out->fs_type,
                 best_min);
        return STOKE_OK;
    }
    classify_block(sys_root, best_maj, best_min, out);
    return STOKE_OK;
}
