/* fuzz_input.h - helpers for fuzz targets whose parser reads a file: each input is
 * written to a file under a private temporary root, created once per process. */
#ifndef STOKE_FUZZ_INPUT_H
#define STOKE_FUZZ_INPUT_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* One fixed directory per target: libFuzzer leaves with _Exit, so nothing cleans up
 * after it, and a fixed name keeps repeated runs from piling up directories. */
static const char *fuzz_root(void)
{
    static char root[256];
    if (!root[0]) {
        extern char *program_invocation_short_name;
        snprintf(root, sizeof root, "/tmp/stoke-%s", program_invocation_short_name);
        mkdir(root, 0700);
    }
    return root;
}

/* Writes data to fuzz_root() + rel (whose directories are created) and returns the
 * full path in a static buffer. */
static const char *fuzz_write(const char *rel, const unsigned char *data, size_t size)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_root(), rel);
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
    return path;
}

#endif
